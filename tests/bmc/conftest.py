"""Fixtures for the Redfish driver and emulator tests: captured trees, emulators, a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lifecycle.drivers.bmc.base import Credentials
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.lab.redfish_emulator import BmcConfig, ExtraHardware, RedfishEmulator

# The captured vendor trees shared with the project (shared/fixtures/redfish/<name>).
VENDOR_TREES = ("dell-idrac-bmclib", "dmtf-public-rackmount1", "hpe-ilo5-dl325", "openbmc-stock")
USER = "racklife"
PASSWORD = "emulator-S3cret!"


class FakeClock:
    """Virtual time: ``sleep`` advances ``now`` and records the wait instead of sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture(scope="session")
def redfish_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "redfish"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def credentials() -> Credentials:
    return Credentials(USER, PASSWORD)


def bmc_config(name: str, tree: Path, **settings: object) -> BmcConfig:
    return BmcConfig(name=name, tree=tree, username=USER, password=PASSWORD,
                     **settings)  # type: ignore[arg-type]


@pytest.fixture
def emulator(redfish_dir: Path) -> Iterator[RedfishEmulator]:
    """One BMC per captured tree, as captured (no extra hardware), tasks finishing in 3 polls."""
    bmcs = [bmc_config(name, redfish_dir / name, task_polls=3) for name in VENDOR_TREES]
    with RedfishEmulator(bmcs) as emu:
        yield emu


@pytest.fixture
def gpu_emulator(redfish_dir: Path) -> Iterator[RedfishEmulator]:
    """GPU nodes: 8 GPUs as Processors (OpenBMC/HGX style) or as PCIeDevices, 2 NVMe drives."""
    bmcs = [
        bmc_config("hgx-processors", redfish_dir / "openbmc-stock", task_polls=3,
            hardware=ExtraHardware(gpus=8, gpu_source="processors", drives=2)),
        bmc_config("hgx-pcie", redfish_dir / "dmtf-public-rackmount1", task_polls=3,
            hardware=ExtraHardware(gpus=8, gpu_source="pcie", drives=2)),
    ]
    with RedfishEmulator(bmcs) as emu:
        yield emu


class DriverFactory:
    """Builds drivers on the fake clock and closes them at the end of the test."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.made: list[RedfishDriver] = []

    def __call__(self, url: str, **settings: object) -> RedfishDriver:
        settings.setdefault("timeout", 5.0)
        made = RedfishDriver(url, Credentials(USER, PASSWORD), clock=self.clock,
                             **settings)  # type: ignore[arg-type]
        self.made.append(made)
        return made


@pytest.fixture
def make_driver(clock: FakeClock) -> Iterator[DriverFactory]:
    factory = DriverFactory(clock)
    yield factory
    for made in factory.made:
        made.close()  # best effort by design: never raises, even for an unreachable BMC
