"""Provision N emulated nodes with --max-in-flight M and a simulated boot time T.

Prints total time, the ideal time ceil(N/M) x T, their ratio, the controller's
CPU seconds and peak RSS. Goal (issue 5): ratio <= 1.15 and RSS <= 500 MB.

The controller here is the real one: the provisioning workflows on DBOS
(SQLite in WAL mode), the Redfish driver, the boot server with single-use
tokens. The BMCs are the project's Redfish emulator in its own process (one
port per BMC, serial, NIC and 8 GPUs per system so inspection matches). Each
node's "firmware" is simulated in a small thread of this process: when the
emulator reports a power-on, it waits T seconds, fetches the node's iPXE
script from the boot server over HTTP and phones home with the token, as the
minimal image does. Its CPU is counted in the controller's (it is small: two
HTTP requests per node).

    python bench/provision.py [--nodes 1000] [--max-in-flight 50] [--boot-time 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FIXTURES = REPO / ".." / "shared" / "fixtures"


def mac_of(i: int) -> str:
    return f"02:4c:{(i >> 16) & 0xff:02x}:{(i >> 8) & 0xff:02x}:{i & 0xff:02x}:01"


def inventory_yaml(n: int, urls: dict[str, str], creds: Path) -> str:
    import yaml

    nodes = [{
        "name": f"n{i:04d}", "serial": f"BENCH{i:05d}", "rack": f"r{i // 40 + 1:02d}", "u": i % 40 + 1,
        "sku": "h100-sxm-8", "pool": "training",
        "bmc": {"driver": "redfish", "address": urls[f"bmc{i:04d}"], "credentials": f"file:{creds}"},
        "nics": [{"name": "eth0", "mac": mac_of(i), "role": "boot"}],
    } for i in range(n)]
    doc = {"site": {"name": "bench"}, "racks": [{"name": f"r{r + 1:02d}"} for r in range(math.ceil(n / 40))],
           "pools": {"training": {"scheduler": "slurm", "partition": "train"}}, "nodes": nodes}
    return yaml.safe_dump(doc)


def firmware(emulator: object, boot_url: str, boot_time: float, stop: threading.Event) -> threading.Thread:
    """Power-on events from the emulator → after boot_time: fetch script, phone home."""
    from lifecycle.lab.firmware import phone_home_payload

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    timers: list[threading.Timer] = []

    def boot(i: int) -> None:
        try:
            with opener.open(f"{boot_url}/boot/{mac_of(i)}.ipxe", timeout=30) as resp:
                script = resp.read().decode()
        except OSError:
            return  # nothing pending: boots from disk
        url, body = phone_home_payload(script, [mac_of(i)])
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with opener.open(req, timeout=30) as resp:
            resp.read()

    def loop() -> None:
        seen = 0
        while not stop.is_set():
            events = emulator.poll_events()  # type: ignore[attr-defined]
            for ev in events[seen:]:
                if ev.get("event") == "power" and ev.get("state") == "On":
                    t = threading.Timer(boot_time, boot, args=(int(str(ev["bmc"])[3:]),))
                    t.daemon = True
                    t.start()
                    timers.append(t)
            seen = len(events)
            time.sleep(0.05)

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    return th


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--max-in-flight", type=int, default=50)
    ap.add_argument("--boot-time", type=float, default=10.0)
    args = ap.parse_args()
    n, m, t_boot = args.nodes, args.max_in_flight, args.boot_time

    with tempfile.TemporaryDirectory(prefix="racklife-bench-prov-") as tmp:
        home = Path(tmp)
        os.environ["RACKLIFE_HOME"] = str(home)
        os.environ.pop("RACKLIFE_DB", None)
        from lifecycle.drivers.boot.server import BootServer
        from lifecycle.imaging.build import build
        from lifecycle.imaging.definition import load_definition
        from lifecycle.lab.redfish_emulator import BmcConfig, ExtraHardware, spawn
        from lifecycle.model.inventory import parse_inventory
        from lifecycle.model.states import State
        from lifecycle.store import Store
        from lifecycle.workflows import engine, provision, registry
        from lifecycle.workflows.boot_images import published_images
        from lifecycle.workflows.boot_service import StoreBootBackend

        defn, defdir = load_definition("minimal")
        build(defn, defdir, home / "images", Path.home() / ".cache" / "racklife" / "debs")
        password = "bench-" + os.urandom(6).hex()
        creds = home / "bmc-creds"
        creds.write_text(f"admin:{password}\n")
        creds.chmod(0o600)
        tree = FIXTURES / "redfish" / "openbmc-stock"
        bmcs = [BmcConfig(f"bmc{i:04d}", tree, "admin", password, power_delay_s=0.5,
                          hardware=ExtraHardware(gpus=8, system_serial=f"BENCH{i:05d}", nic_macs=(mac_of(i),)))
                for i in range(n)]
        print(f"starting {n} emulated BMCs ...", flush=True)
        emulator = spawn(bmcs)
        stop = threading.Event()
        try:
            inv = parse_inventory(inventory_yaml(n, emulator.urls, creds), "bench")
            store = Store()
            store.import_inventory(inv)
            backend = StoreBootBackend(store)
            server = BootServer(backend, home / "images").start()
            images = published_images(home / "images", server.url)
            settings = provision.ProvisionSettings(boot_url=server.url, images=images, default_image="minimal",
                                                   boot_timeout_s=max(120.0, 6 * t_boot)).to_json()
            firmware(emulator, server.url, t_boot, stop)
            registry.launch(role="bench")
            provision.register_provision_queue(m)
            names = [node.name for node in inv.nodes]
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            outcomes = engine.start(provision.provision_many, names, None, settings).get_result()
            wall = time.perf_counter() - t0
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            ok = sum(o["ok"] for o in outcomes)
            done = len(store.nodes(state=State.PROVISIONED))
            ideal = math.ceil(n / m) * t_boot
            cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"nodes {n}  max-in-flight {m}  boot time {t_boot:g} s")
            print(f"provisioned {ok}/{n} (store: {done})")
            print(f"total {wall:.1f} s  ideal {ideal:.1f} s  ratio {wall / ideal:.3f}  (goal <= 1.15)")
            print(f"controller CPU {cpu:.1f} s ({cpu / wall:.0%} of one core)  peak RSS {rss_mb:.0f} MB "
                  f"(goal <= 500)")
            engine.shutdown()
            server.stop()
            backend.close()
            store.close()
        finally:
            stop.set()
            emulator.stop()


if __name__ == "__main__":
    main()
