"""The driver against an independent peer: OpenStack's sushy-tools with its fake driver.

sushy-tools supports a subset: power (changes land 1-11 s after the request),
boot override (``Once`` is kept as ``Continuous``), system/NIC inventory,
Chassis sensors, virtual media (it downloads the image), HTTP Basic only (no
SessionService). Traps from shared/notes/pxe-and-bmcs-on-one-machine.md: the
auth file uses bcrypt rounds=4, and each run gets its own state directory.
"""

from __future__ import annotations

import functools
import http.server
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest
import requests

from lifecycle.drivers.bmc.base import BootDevice, Credentials, PowerAction, PowerState
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.errors import AuthFailed, NotSupported, OperationFailed

MakeDriver = Callable[..., RedfishDriver]
USER, PASSWORD = "racklife", "emulator-S3cret!"
NODE_UUID = "5d6c1f7e-0f1e-4a4b-9a53-8a1f0e5b7c21"
NODE_MAC = "52:54:00:12:34:56"
OTHER_UUID = "9a0e4b1c-7d2f-4e8a-b6c3-1f2e3d4c5b6a"


@pytest.fixture(scope="module")
def sushy(tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int]) -> Iterator[str]:
    work = tmp_path_factory.mktemp("sushy")
    auth = work / "htpasswd"
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    auth.write_text(f"{USER}:{hashed}\n", encoding="utf-8")
    port = free_port()
    # Two systems behind one service, as on a multi-node chassis manager.
    systems = [{"uuid": NODE_UUID, "name": "gpu-node-01", "power_state": "Off",
                "nics": [{"mac": NODE_MAC, "ip": "10.10.0.11"}]},
               {"uuid": OTHER_UUID, "name": "gpu-node-02", "power_state": "On",
                "nics": [{"mac": "52:54:00:12:34:57", "ip": "10.10.0.12"}]}]
    config = work / "sushy.conf"
    config.write_text(
        "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(auth)!r}\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(work / 'state')!r}\n"
        "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n", encoding="utf-8")
    emulator = Path(sys.executable).with_name("sushy-emulator")
    assert emulator.is_file(), "pip install sushy-tools"
    log = (work / "sushy.log").open("w")
    proc = subprocess.Popen([str(emulator), "--config", str(config)], stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                requests.get(url + "/redfish/v1/", timeout=1)
                break
            except requests.ConnectionError:
                assert proc.poll() is None, (work / "sushy.log").read_text()
                assert time.monotonic() < deadline, "sushy-emulator did not start"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def image_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A plain HTTP server with an ISO: sushy-tools downloads what it is asked to insert."""
    root = tmp_path_factory.mktemp("images")
    (root / "rescue.iso").write_bytes(b"\0" * 4096)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/rescue.iso"
    server.shutdown()
    server.server_close()
    thread.join()


def wait_for(drv: RedfishDriver, state: PowerState) -> None:
    """sushy-tools applies power changes 1-11 s later; poll real time, bounded."""
    deadline = time.monotonic() + 20
    while drv.power_state() is not state:
        assert time.monotonic() < deadline, f"power never reached {state}"
        time.sleep(0.5)


@pytest.mark.slow
def test_power_on_sushy(sushy: str, make_driver: MakeDriver) -> None:
    # auth="session" (the default): sushy-tools has no SessionService, so Basic is used.
    drv = make_driver(sushy, system_id=NODE_UUID)
    wait_for(drv, PowerState.OFF)
    calls = drv.transport.calls
    drv.power(PowerAction.OFF)  # already off: only the read
    assert drv.transport.calls == calls + 1
    drv.power(PowerAction.ON)
    wait_for(drv, PowerState.ON)
    drv.power(PowerAction.GRACEFUL_OFF)
    wait_for(drv, PowerState.OFF)


def test_boot_override_on_sushy(sushy: str, make_driver: MakeDriver) -> None:
    drv = make_driver(sushy, system_id=NODE_UUID)
    for device, target in ((BootDevice.CD, "Cd"), (BootDevice.DISK, "Hdd"),
                           (BootDevice.PXE, "Pxe")):
        drv.set_boot(device, once=True)
        boot = drv.system()["Boot"]
        # sushy-tools keeps the target but reports every override as Continuous.
        assert (boot["BootSourceOverrideTarget"], boot["BootSourceOverrideEnabled"]) == (
            target, "Continuous")


def test_inventory_sensors_health_on_sushy(sushy: str, make_driver: MakeDriver) -> None:
    drv = make_driver(sushy, system_id=NODE_UUID)
    inv = drv.inventory()
    assert (inv.system.vendor, inv.system.uuid) == ("Sushy Emulator", NODE_UUID)
    assert [n.mac for n in inv.nics] == [NODE_MAC]
    assert inv.drives == [] and inv.gpus == []  # Storage answers 500: the sushy quirk
    assert drv.health().overall == "OK"
    assert {r.kind for r in drv.sensors()} >= {"temperature"}
    with pytest.raises(NotSupported):
        drv.bios_attributes()
    with pytest.raises(NotSupported):
        drv.event_log()


def test_virtual_media_on_sushy(sushy: str, image_server: str, make_driver: MakeDriver) -> None:
    drv = make_driver(sushy, system_id=NODE_UUID)
    drv.virtual_media_insert(image_server)
    media = drv._cd()
    assert (media["Image"], media["Inserted"]) == (image_server, True)
    drv.virtual_media_eject()
    assert drv._cd()["Inserted"] is False


def test_system_id_chooses_among_several(sushy: str, make_driver: MakeDriver) -> None:
    with pytest.raises(OperationFailed, match="manages 2 systems"):
        make_driver(sushy).power_state()
    other = make_driver(sushy, system_id=OTHER_UUID)
    assert other.system_path() == f"/redfish/v1/Systems/{OTHER_UUID}"
    assert other.inventory().nics[0].mac == "52:54:00:12:34:57"


def test_wrong_password_on_sushy(sushy: str) -> None:
    drv = RedfishDriver(sushy, Credentials(USER, "not-the-password"), auth="basic")
    with pytest.raises(AuthFailed):
        drv.power_state()
    drv.close()
