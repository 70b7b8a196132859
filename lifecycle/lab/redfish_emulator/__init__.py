"""The project's Redfish emulator: many BMCs, one process, captured vendor trees.

It is the real peer of the Redfish driver's tests and the BMCs of the lab. Each
BMC serves one captured tree (``shared/fixtures/redfish/<vendor>``) and behaves
like hardware: sessions that expire, power changes that land later, ``Once``
boot overrides that revert, ETags, tasks with progress, event logs, and faults
injected on request.

In-process::

    with RedfishEmulator([BmcConfig("bmc0", tree, "admin", pw)]) as emu:
        emu.urls["bmc0"]   # "http://127.0.0.1:PORT"

As a subprocess (``python -m lifecycle.lab.redfish_emulator``): ``spawn()``.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lifecycle.lab.redfish_emulator.config import BmcConfig, Faults
from lifecycle.lab.redfish_emulator.hardware import ExtraHardware
from lifecycle.lab.redfish_emulator.server import RedfishEmulator, make_certificate

__all__ = ["BmcConfig", "EmulatorProcess", "ExtraHardware", "Faults", "RedfishEmulator",
           "make_certificate", "spawn"]


@dataclass
class EmulatorProcess:
    """A running ``python -m lifecycle.lab.redfish_emulator``; ``urls`` by BMC name."""

    process: subprocess.Popen[str]
    urls: dict[str, str]
    cert_path: Path | None
    config_file: Path
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll_events(self) -> list[dict[str, Any]]:
        """Power events printed by the emulator since the last call (non-blocking)."""
        stdout = self.process.stdout
        assert stdout is not None
        selector = selectors.DefaultSelector()
        selector.register(stdout, selectors.EVENT_READ)
        while selector.select(timeout=0):
            line = stdout.readline()
            if not line:
                break
            self.events.append(json.loads(line))
        selector.close()
        return self.events

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        self.config_file.unlink(missing_ok=True)

    def __enter__(self) -> EmulatorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn(bmcs: Sequence[BmcConfig], *, tls: bool = False, startup_timeout: float = 120.0,
          stderr: IO[str] | int | None = subprocess.DEVNULL) -> EmulatorProcess:
    """Start the emulator as a subprocess and wait until it listens.

    The BMC list (with its passwords) goes through a temporary file readable only
    by this user, never through argv or the environment.
    """
    fd, name = tempfile.mkstemp(prefix="redfish-emulator-", suffix=".json")
    config_file = Path(name)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"tls": tls, "bmcs": [b.to_json() for b in bmcs]}, handle)
    process = subprocess.Popen(
        [sys.executable, "-m", "lifecycle.lab.redfish_emulator", "--config", str(config_file)],
        stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert process.stdout is not None
    deadline = time.monotonic() + startup_timeout
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            if not selector.select(timeout=min(1.0, max(0.0, deadline - time.monotonic()))):
                if process.poll() is not None:
                    break
                continue
            line = process.stdout.readline()
            if not line:
                break
            ready = json.loads(line)
            if ready.get("event") == "ready":
                cert = ready.get("cert")
                return EmulatorProcess(process, dict(ready["urls"]),
                                       Path(cert) if cert else None, config_file)
    finally:
        selector.close()
    process.kill()
    process.wait()
    config_file.unlink(missing_ok=True)
    raise RuntimeError("the Redfish emulator did not start (run it by hand to see why)")
