"""The Redfish emulator behaves like hardware, at lab scale, in-process and as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from lifecycle.drivers.bmc.base import PowerAction, PowerState
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.errors import Untrusted
from lifecycle.lab.redfish_emulator import BmcConfig, RedfishEmulator, spawn

MakeDriver = Callable[..., RedfishDriver]
USER, PASSWORD = "racklife", "emulator-S3cret!"
AUTH = (USER, PASSWORD)


def config(redfish_dir: Path, name: str, tree: str = "hpe-ilo5-dl325",
           **settings: object) -> BmcConfig:
    return BmcConfig(name=name, tree=redfish_dir / tree, username=USER, password=PASSWORD,
                     **settings)  # type: ignore[arg-type]


def test_power_changes_land_after_the_delay_and_call_the_hook(
        redfish_dir: Path, make_driver: MakeDriver) -> None:
    events: list[tuple[str, str, str]] = []
    landed = threading.Event()

    def on_power(bmc: str, system: str, state: str) -> None:
        events.append((bmc, system, state))
        landed.set()

    with RedfishEmulator([config(redfish_dir, "node7-bmc", power_delay_s=0.3)],
                         on_power=on_power) as emu:
        drv = make_driver(emu.urls["node7-bmc"])
        drv.power(PowerAction.OFF)
        assert drv.power_state() is PowerState.ON  # real hardware takes its time
        assert landed.wait(timeout=10)
        assert drv.power_state() is PowerState.OFF
        assert events == [("node7-bmc", "1", "Off")]


def test_patch_honours_etags(redfish_dir: Path) -> None:
    with RedfishEmulator([config(redfish_dir, "ilo")]) as emu:
        url = emu.urls["ilo"] + "/redfish/v1/Systems/1"
        first = requests.get(url, auth=AUTH, timeout=5)
        etag = first.headers["ETag"]
        assert etag == first.json()["@odata.etag"] == 'W/"1C210906"'  # from the capture
        body = {"AssetTag": "rack12-u07"}
        stale = requests.patch(url, json=body, auth=AUTH, headers={"If-Match": 'W/"0000"'},
                               timeout=5)
        assert stale.status_code == 412
        ok = requests.patch(url, json=body, auth=AUTH, headers={"If-Match": etag}, timeout=5)
        assert ok.status_code == 200 and ok.headers["ETag"] != etag
        again = requests.patch(url, json=body, auth=AUTH, headers={"If-Match": etag}, timeout=5)
        assert again.status_code == 412


def test_session_login_logout(redfish_dir: Path) -> None:
    with RedfishEmulator([config(redfish_dir, "ilo")]) as emu:
        base = emu.urls["ilo"]
        login = requests.post(base + "/redfish/v1/SessionService/Sessions",
                              json={"UserName": USER, "Password": PASSWORD}, timeout=5)
        assert login.status_code == 201
        token, location = login.headers["X-Auth-Token"], login.headers["Location"]
        listed = requests.get(base + "/redfish/v1/SessionService/Sessions",
                              headers={"X-Auth-Token": token}, timeout=5).json()
        assert listed["Members"] == [{"@odata.id": location}]
        assert requests.delete(base + location, headers={"X-Auth-Token": token},
                               timeout=5).status_code == 204
        after = requests.get(base + "/redfish/v1/Systems", headers={"X-Auth-Token": token},
                             timeout=5)
        assert after.status_code == 401
        bad = requests.post(base + "/redfish/v1/SessionService/Sessions",
                            json={"UserName": USER, "Password": "nope"}, timeout=5)
        assert bad.status_code == 401 and "X-Auth-Token" not in bad.headers


def test_reset_type_outside_the_allowable_values_is_refused(redfish_dir: Path) -> None:
    with RedfishEmulator([config(redfish_dir, "ilo")]) as emu:
        resp = requests.post(emu.urls["ilo"] + "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
                             json={"ResetType": "PowerCycle"}, auth=AUTH, timeout=5)
        assert resp.status_code == 400  # DL325's iLO does not list PowerCycle


def test_one_process_serves_a_thousand_bmcs(redfish_dir: Path, make_driver: MakeDriver) -> None:
    trees = ("dell-idrac-bmclib", "dmtf-public-rackmount1", "hpe-ilo5-dl325", "openbmc-stock")
    bmcs = [config(redfish_dir, f"bmc{i:04d}", trees[i % 4]) for i in range(1000)]
    with RedfishEmulator(bmcs) as emu:
        ports = {int(url.rsplit(":", 1)[1]) for url in emu.urls.values()}
        assert len(ports) == 1000
        for i in (0, 1, 2, 3, 998, 999):
            drv = make_driver(emu.urls[f"bmc{i:04d}"])
            assert drv.power_state() in (PowerState.ON, PowerState.OFF)
        drv = make_driver(emu.urls["bmc0500"])
        drv.power(PowerAction.OFF)
        assert drv.power_state() is PowerState.OFF
        assert make_driver(emu.urls["bmc0504"]).power_state() is PowerState.ON  # same tree


def test_distinct_loopback_addresses_share_a_port(redfish_dir: Path,
                                                  make_driver: MakeDriver) -> None:
    probe = RedfishEmulator([config(redfish_dir, "a", host="127.0.0.2")]).start()
    port = int(probe.urls["a"].rsplit(":", 1)[1])
    probe.stop()
    bmcs = [config(redfish_dir, f"bmc{i}", host=f"127.0.0.{i}", port=port) for i in (2, 3)]
    with RedfishEmulator(bmcs) as emu:
        assert emu.urls == {"bmc2": f"http://127.0.0.2:{port}", "bmc3": f"http://127.0.0.3:{port}"}
        make_driver(emu.urls["bmc2"]).power(PowerAction.OFF)
        assert make_driver(emu.urls["bmc2"]).power_state() is PowerState.OFF
        assert make_driver(emu.urls["bmc3"]).power_state() is PowerState.ON


# verify_tls=False is an explicit choice; urllib3 still warns about it (the library mutes the
# warning, pytest's warnings-as-errors brings it back).
@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_tls_verification_on_off_and_with_the_emulator_ca(
        redfish_dir: Path, make_driver: MakeDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    with RedfishEmulator([config(redfish_dir, "ilo")], tls=True) as emu:
        url = emu.urls["ilo"]
        assert url.startswith("https://")
        strict = make_driver(url)  # verify_tls defaults to True
        with pytest.raises(Untrusted, match="TLS verification failed") as caught:
            strict.power_state()
        assert not caught.value.retryable and strict.transport.calls == 1
        assert make_driver(url, verify_tls=False).power_state() is PowerState.ON
        assert emu.cert_path is not None
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(emu.cert_path))
        assert make_driver(url).power_state() is PowerState.ON


def test_subprocess_serves_and_reports_power_events(redfish_dir: Path,
                                                    make_driver: MakeDriver) -> None:
    bmcs = [config(redfish_dir, f"bmc{i}", "openbmc-stock") for i in range(3)]
    with spawn(bmcs) as proc:
        assert sorted(proc.urls) == ["bmc0", "bmc1", "bmc2"]
        make_driver(proc.urls["bmc1"]).power(PowerAction.ON)
        stats = requests.get(proc.urls["bmc1"] + "/_emulator/stats", timeout=5).json()
        assert stats["power"] == {"/redfish/v1/systems/system": "On"}
        events = proc.poll_events()
        assert {"event": "power", "bmc": "bmc1", "system": "system", "state": "On"} in events
        assert proc.config_file.exists()
    assert proc.process.returncode is not None
    assert not proc.config_file.exists()


def test_command_line_entry(redfish_dir: Path) -> None:
    env = {**os.environ, "EMU_PW": PASSWORD}
    proc = subprocess.Popen(
        [sys.executable, "-m", "lifecycle.lab.redfish_emulator", "--tree",
         str(redfish_dir / "dell-idrac-bmclib"), "--count", "2", "--user", USER,
         "--password-env", "EMU_PW"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert '"event": "ready"' in ready
        url = ready.split('"bmc0": "', 1)[1].split('"', 1)[0]
        assert requests.get(url + "/redfish/v1/Systems", auth=AUTH, timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()
