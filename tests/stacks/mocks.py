"""Running the stack program under Pulumi's mocks: a recorder of every resource, a fresh event loop per run.

Pulumi's SDK binds resources to the event loop they are created on, so each
run builds the stack inside ``pulumi.runtime.test`` on a new loop (see
../shared/notes/pulumi-and-terraform.md). ``Recorder`` answers every
resource with its inputs, and the node resources with what a built node
reports (``accepted`` and its acceptance record); ``Routed`` (in the lab
test) sends the dynamic resources to their real providers instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi.runtime import MockCallArgs, MockResourceArgs, Mocks, set_mocks
from pulumi.runtime.mocks import MockMonitor

from stacks.racklife_pulumi.program import StackConfig, build


@dataclass
class Seen:
    typ: str
    name: str
    inputs: dict[str, Any]
    order: int


def kind(typ: str) -> str:
    """``pulumi-python:dynamic/racklife:BareMetalNode`` → ``BareMetalNode``; ``kubernetes:core/v1:NodePatch`` →
    ``NodePatch``."""
    return typ.rsplit(":", 1)[-1]


class Recorder(Mocks):
    def __init__(self) -> None:
        self.seen: list[Seen] = []

    def answer(self, args: MockResourceArgs) -> dict[str, Any]:
        outs = dict(args.inputs)
        if kind(args.typ) == "BareMetalNode":
            outs.update(state="accepted", acceptance_record=f"acc-{args.inputs['node']}")
        elif kind(args.typ) == "PoolMembership":
            outs.update(state="in_service", in_service=True)
        return outs

    def new_resource(self, args: MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.seen.append(Seen(args.typ, args.name, dict(args.inputs), len(self.seen)))
        return f"{args.name}-id", self.answer(args)

    def call(self, args: MockCallArgs) -> dict[str, Any]:
        return {}

    def of(self, k: str) -> list[Seen]:
        return [s for s in self.seen if kind(s.typ) == k]


class _Monitor(MockMonitor):  # type: ignore[misc]
    """Pulumi's mock monitor, with an event loop per request that is closed after it.

    The stock one leaves a new loop on each of the SDK's worker threads (``_ensure_event_loop``), which
    pytest reports as unclosed when they are collected.
    """

    def _on_own_loop(self, call: Callable[[Any], Any], request: Any) -> Any:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            return call(request)
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    def RegisterResource(self, request: Any) -> Any:
        return self._on_own_loop(super().RegisterResource, request)

    def ReadResource(self, request: Any) -> Any:
        return self._on_own_loop(super().ReadResource, request)

    def Invoke(self, request: Any) -> Any:
        return self._on_own_loop(super().Invoke, request)


def await_memberships(cfg: StackConfig) -> Any:
    cluster = build(cfg)
    return pulumi.Output.all(*(m.in_service for m in cluster.memberships.values()))


def run_program(cfg: StackConfig, mocks: Mocks, body: Callable[[StackConfig], Any] = await_memberships) -> None:
    """Run ``body`` (by default: build the stack) under ``mocks`` on a fresh event loop, awaiting what it returns."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        set_mocks(mocks, project="racklife", stack="test", preview=False, monitor=_Monitor(mocks))

        @pulumi.runtime.test  # type: ignore[misc]
        def program() -> Any:
            return body(cfg)

        program()
    finally:
        loop.close()
        asyncio.set_event_loop(None)
