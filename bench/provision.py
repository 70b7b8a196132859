"""Provision N emulated nodes with --max-in-flight M and a simulated boot time T.

Prints total time, the ideal time ceil(N/M) x T, their ratio, the controller's
CPU seconds (in all and per node) and its peak RSS, and the CPU of the two
stand-ins next to it. Goal (issue 5): ratio <= 1.15 and RSS <= 500 MB.

Three processes, so that each one's CPU is counted on its own:

* the controller (this process): the provisioning workflows on DBOS (SQLite
  in WAL mode), the Redfish driver, the boot server with single-use tokens;
* the BMCs: the project's Redfish emulator (one port per BMC, serial, NIC and
  8 GPUs per system so inspection matches, power changes land 0.5 s late);
* the nodes' "firmware" (this file with ``--firmware``): when the emulator
  reports a power-on, it waits the rest of T, fetches the node's iPXE script
  from the boot server over HTTP and phones home with the token, as the
  minimal image does.

T is a node's boot as the controller sees it: from its power request to the
phone-home, that is the BMC's 0.5 s to apply power and then T - 0.5 s of
firmware and OS. Everything else in a slot's time is the controller's.

The controller's figures cover the provisioning run only (from the start of
the workflow to its result), not the set-up before it. On a shared machine
the wall time moves with the other load; the CPU seconds per node do not.

    python bench/provision.py [--nodes 1000] [--max-in-flight 50] [--boot-time 10]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FIXTURES = REPO / ".." / "shared" / "fixtures"
TICK = os.sysconf("SC_CLK_TCK")
POWER_ON_S = 0.5  # the emulated BMCs' delay between a power request and power on; part of T


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


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of another process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def firmware_main(boot_url: str, boot_time: float) -> None:
    """The nodes' side: one line per power-on (the node's index) on stdin → phone home
    ``boot_time`` after the power request (the BMC took ``POWER_ON_S`` of it already)."""
    from lifecycle.lab.firmware import phone_home_payload

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def boot(i: int) -> None:
        try:
            with opener.open(f"{boot_url}/boot/{mac_of(i)}.ipxe", timeout=30) as resp:
                script = resp.read().decode()
        except OSError:
            return  # nothing pending: boots from disk
        url, body = phone_home_payload(script, [mac_of(i)])
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with opener.open(req, timeout=30) as resp:
                resp.read()
        except OSError as exc:
            print(f"node {i}: phone-home failed: {exc}", file=sys.stderr, flush=True)

    for line in sys.stdin:
        t = threading.Timer(max(0.0, boot_time - POWER_ON_S), boot, args=(int(line),))
        t.daemon = True
        t.start()


def forward_power_ons(events: IO[str], nodes: IO[str]) -> threading.Thread:
    """Emulator power-on events → the firmware process, as they come (a blocking read, no polling)."""

    def pump() -> None:
        try:
            for line in events:
                ev = json.loads(line)
                if ev.get("event") == "power" and ev.get("state") == "On":
                    nodes.write(f"{int(str(ev['bmc'])[3:])}\n")
                    nodes.flush()
        except (OSError, ValueError):
            return  # the bench is shutting the emulator or the firmware down

    th = threading.Thread(target=pump, daemon=True)
    th.start()
    return th


def spread(values: list[float]) -> dict[str, float]:
    """Median and 90th percentile of sorted ``values``, in seconds."""
    import statistics

    return {"median_s": round(statistics.median(values), 3), "p90_s": round(values[int(0.9 * (len(values) - 1))], 3)}


def phases(store: Any, t0: float, t1: float, m: int) -> dict[str, dict[str, float]]:
    """Median and 90th percentile of each phase of a node's provisioning, from the store's records,
    and where the rest of the wall time went (t0, t1: the run's start and end, epoch seconds)."""
    import statistics

    import sqlalchemy as sa

    from lifecycle.store import db

    at: dict[tuple[str, str], float] = {}
    with store.engine.connect() as conn:
        for r in conn.execute(sa.select(db.transitions.c.node, db.transitions.c.event, db.transitions.c.at)):
            at[(r.node, r.event)] = r.at.timestamp()
        for r in conn.execute(sa.select(db.boot_tokens.c.node, db.boot_tokens.c.issued_at,
                                        db.boot_tokens.c.used_at)):
            at[(r.node, "issued")] = r.issued_at.timestamp()
            if r.used_at is not None:
                at[(r.node, "phoned")] = r.used_at.timestamp()
    spans = {"start to inspected": ("inspect", "inspect_done"), "inspected to token": ("provision", "issued"),
             "token to phone-home (T)": ("issued", "phoned"),
             "phone-home to provisioned": ("phoned", "provision_done"), "whole node": ("inspect", "provision_done")}
    nodes = {node for node, _ in at}
    out: dict[str, dict[str, float]] = {}
    for name, (a, b) in spans.items():
        values = sorted(at[(n, b)] - at[(n, a)] for n in nodes if (n, a) in at and (n, b) in at)
        if values:
            out[name] = spread(values)
    out.update(turnover(at, m))
    whole = [at[(n, "provision_done")] - at[(n, "inspect")] for n in nodes
             if (n, "inspect") in at and (n, "provision_done") in at]
    if whole:
        first = min(at[(n, "inspect")] for n in nodes if (n, "inspect") in at)
        last = max(at[(n, "provision_done")] for n in nodes if (n, "provision_done") in at)
        out["slots"] = {"mean_node_s": round(statistics.fmean(whole), 3),
                        "idle_per_node_s": round(((t1 - t0) * m - sum(whole)) / len(whole), 3),
                        "start_to_first_inspection_s": round(first - t0, 3),
                        "last_provisioned_to_end_s": round(t1 - last, 3)}
    return out


def turnover(at: dict[tuple[str, str], float], m: int) -> dict[str, dict[str, float]]:
    """A slot's turnover: from one node provisioned to the next node's first transition in
    that slot (the run's end, the queue's pickup, the next run's start). The i-th node to
    start waited for the (i - m)-th to finish. (DBOS's own dequeue time is not used: on
    SQLite under Python < 3.12 it is stamped to the second.)"""
    import statistics

    starts = sorted(t for (_, event), t in at.items() if event == "inspect")
    done = sorted(t for (_, event), t in at.items() if event == "provision_done")
    gaps = sorted(starts[i] - done[i - m] for i in range(m, min(len(starts), len(done) + m)))
    if not gaps:
        return {}
    return {"slot turnover (provisioned to next start)": {
        **spread(gaps), "mean_s": round(statistics.fmean(gaps), 3)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--max-in-flight", type=int, default=50)
    ap.add_argument("--boot-time", type=float, default=10.0)
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    ap.add_argument("--firmware", metavar="BOOT_URL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.firmware:
        firmware_main(args.firmware, args.boot_time)
        return
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
        bmcs = [BmcConfig(f"bmc{i:04d}", tree, "admin", password, power_delay_s=POWER_ON_S,
                          hardware=ExtraHardware(gpus=8, system_serial=f"BENCH{i:05d}", nic_macs=(mac_of(i),)))
                for i in range(n)]
        print(f"starting {n} emulated BMCs ...", flush=True)
        emulator = spawn(bmcs)
        firmware: subprocess.Popen[str] | None = None
        try:
            inv = parse_inventory(inventory_yaml(n, emulator.urls, creds), "bench")
            store = Store()
            store.import_inventory(inv)
            backend = StoreBootBackend(store)
            server = BootServer(backend, home / "images").start()
            images = published_images(home / "images", server.url)
            settings = provision.ProvisionSettings(boot_url=server.url, images=images, default_image="minimal",
                                                   boot_timeout_s=max(120.0, 6 * t_boot))
            firmware = subprocess.Popen(
                [sys.executable, __file__, "--firmware", server.url, "--boot-time", str(t_boot)],
                stdin=subprocess.PIPE, text=True)
            assert emulator.process.stdout is not None and firmware.stdin is not None
            forward_power_ons(emulator.process.stdout, firmware.stdin)
            registry.launch(role="bench")
            provision.register_provision_queue(m)
            names = [node.name for node in inv.nodes]
            emu0, fw0 = cpu_of(emulator.pid), cpu_of(firmware.pid)
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            t0, epoch0 = time.perf_counter(), time.time()
            run_id = f"bench-provision-{os.urandom(4).hex()}"
            store.record_operator(run_id, "bench")  # as every front end does: the run's rows name who started it
            with engine.with_id(run_id):
                handle = engine.start(provision.provision_many, names, None, settings)
            outcomes = handle.get_result()
            wall = time.perf_counter() - t0
            epoch1 = time.time()
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            user, system = ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime
            cpu = user + system
            emu_cpu, fw_cpu = cpu_of(emulator.pid) - emu0, cpu_of(firmware.pid) - fw0
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            ok = sum(o["ok"] for o in outcomes)
            done = len(store.nodes(state=State.PROVISIONED))
            ideal = math.ceil(n / m) * t_boot
            figures: dict[str, Any] = {
                "nodes": n, "max_in_flight": m, "boot_time_s": t_boot, "provisioned": ok,
                "total_s": round(wall, 1), "ideal_s": ideal, "ratio": round(wall / ideal, 3),
                "controller_cpu_s": round(cpu, 1), "controller_cpu_ms_per_node": round(1000 * cpu / n, 1),
                "controller_user_s": round(user, 1), "controller_system_s": round(system, 1),
                "emulator_cpu_s": round(emu_cpu, 1), "firmware_cpu_s": round(fw_cpu, 1),
                "peak_rss_mb": round(rss_mb), "load_avg_1m": round(os.getloadavg()[0], 2),
            }
            print(f"nodes {n}  max-in-flight {m}  boot time {t_boot:g} s")
            print(f"provisioned {ok}/{n} (store: {done})")
            print(f"total {wall:.1f} s  ideal {ideal:.1f} s  ratio {wall / ideal:.3f}  (goal <= 1.15)")
            print(f"controller CPU {cpu:.1f} s (user {user:.1f}, system {system:.1f}) = {1000 * cpu / n:.0f} ms "
                  f"per node (goal <= 30; {cpu / wall:.0%} of one core)  peak RSS {rss_mb:.0f} MB (goal <= 500)")
            print(f"CPU per node {1000 * cpu / n:.0f} ms at ratio {wall / ideal:.3f} to ideal")
            print(f"emulated BMCs CPU {emu_cpu:.1f} s  simulated firmware CPU {fw_cpu:.1f} s  "
                  f"(machine load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
            figures["phases"] = phases(store, epoch0, epoch1, m)
            for name, q in figures["phases"].items():
                print(f"  {name:40s} " + "  ".join(f"{k.removesuffix('_s')} {v:.3f} s" for k, v in q.items()))
            if args.json:
                args.json.write_text(json.dumps(figures, indent=2) + "\n")
            engine.shutdown()
            server.stop()
            store.close()
        finally:
            if firmware is not None:
                firmware.kill()
                firmware.wait()
            emulator.stop()


if __name__ == "__main__":
    main()
