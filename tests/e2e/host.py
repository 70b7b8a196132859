"""Pulumi's dynamic provider host (`python -m pulumi.dynamic`) as the engine drives it, over gRPC.

The engine starts the host, reads the port it prints, sends Configure with
the stack's configuration (``project:key``), then Check, Create, Diff,
Update, Read and Delete, each carrying the pickled provider as the
``__provider`` property. This client does exactly that, so a test exercises
the host's real unpickling (by reference, from the installed package), the
providers' ``configure`` and the wire encoding of inputs and outputs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from pulumi.dynamic.dynamic import ResourceProvider, serialize_provider
from pulumi.runtime import rpc
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

PROVIDER_KEY = "__provider"


class HostError(Exception):
    """A provider operation failed; ``details`` is what the host sent back (the provider's message)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        super().__init__(f"{code.name}: {details}")


def encode(props: Mapping[str, Any]) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(rpc.serialize_properties(dict(props), {}))
    finally:
        loop.close()


def decode(struct: Any) -> dict[str, Any]:
    out: dict[str, Any] = rpc.deserialize_properties(struct)
    return out


@dataclass
class Created:
    id: str
    outs: dict[str, Any]


class ProviderHost:
    """One host process serving one provider class's resources (``kind``: the type in URNs)."""

    def __init__(self, env: Mapping[str, str], provider: ResourceProvider, kind: str, log: Path) -> None:
        self.log = log
        with log.open("ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "pulumi.dynamic"], env=dict(env),
                                         stdout=subprocess.PIPE, stderr=err)
        assert self.proc.stdout is not None
        port = self.proc.stdout.readline().decode().strip()
        if not port.isdigit():
            self.proc.kill()
            raise AssertionError(f"the provider host printed {port!r}: {log.read_text(errors='replace')}")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = provider_pb2_grpc.ResourceProviderStub(self.channel)
        self.blob = serialize_provider(provider)
        self.kind = kind

    def urn(self, name: str) -> str:
        return f"urn:pulumi:lab::racklife::pulumi-python:dynamic/racklife:{self.kind}::{name}"

    def _call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self.stub, method)(request, timeout=1500)
        except grpc.RpcError as exc:
            raise HostError(exc.code(), exc.details() or "") from None

    def _with(self, props: Mapping[str, Any]) -> dict[str, Any]:
        return {**props, PROVIDER_KEY: self.blob}

    def configure(self, config: Mapping[str, str]) -> bool:
        got = self._call("Configure", provider_pb2.ConfigureRequest(args=encode(config), acceptSecrets=True))
        return bool(got.acceptSecrets)

    def check(self, name: str, news: Mapping[str, Any], olds: Mapping[str, Any] | None = None
              ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        got = self._call("Check", provider_pb2.CheckRequest(urn=self.urn(name), olds=encode(self._with(olds or {})),
                                                            news=encode(self._with(news))))
        return decode(got.inputs), [(f.property, f.reason) for f in got.failures]

    def create(self, name: str, inputs: Mapping[str, Any]) -> Created:
        got = self._call("Create", provider_pb2.CreateRequest(urn=self.urn(name), properties=encode(inputs),
                                                              timeout=1500))
        return Created(got.id, decode(got.properties))

    def diff(self, name: str, id_: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> tuple[str, list[str]]:
        got = self._call("Diff", provider_pb2.DiffRequest(id=id_, urn=self.urn(name), olds=encode(olds),
                                                          news=encode(news)))
        return provider_pb2.DiffResponse.DiffChanges.Name(got.changes), list(got.replaces)

    def update(self, name: str, id_: str, olds: Mapping[str, Any], news: Mapping[str, Any]) -> dict[str, Any]:
        got = self._call("Update", provider_pb2.UpdateRequest(id=id_, urn=self.urn(name), olds=encode(olds),
                                                              news=encode(news), timeout=1500))
        return decode(got.properties)

    def read(self, name: str, id_: str, props: Mapping[str, Any]) -> Created:
        got = self._call("Read", provider_pb2.ReadRequest(id=id_, urn=self.urn(name), properties=encode(props)))
        return Created(got.id, decode(got.properties))

    def delete(self, name: str, id_: str, props: Mapping[str, Any]) -> None:
        self._call("Delete", provider_pb2.DeleteRequest(id=id_, urn=self.urn(name), properties=encode(props),
                                                        timeout=1500))

    def close(self) -> None:
        self.channel.close()
        self.proc.kill()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def host_env(lab_env: Mapping[str, str]) -> dict[str, str]:
    """The lab's environment, with the checkout importable (the host unpickles providers by reference)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return {**lab_env, "PULUMI_PROJECT": "racklife", "PYTHONPATH": os.pathsep.join(
        p for p in (root, lab_env.get("PYTHONPATH", "")) if p)}
