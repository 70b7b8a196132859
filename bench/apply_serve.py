"""`racklife apply` of N emulated nodes handed to one `racklife serve`, then to two, on one PostgreSQL.

Prints each wall time and their ratio (two services against one). The apply
is the real command, run as a client: it sees the services' heartbeats,
hands its runs to them, and awaits them; its provisioning wave fans out on
the provisioning queue, which every service dequeues from, with one global
limit (``--max-in-flight``). So the ratio says whether one controller process
is the bottleneck: with the per-node work bounded by boot time it is near 1;
below 1 when one process's CPU (DBOS, the Redfish driver, the store) limits
the pace.

The nodes are bench/provision.py's: the project's Redfish emulator (one port
per BMC, 8 GPUs, power changes 0.5 s late) and a "firmware" process that,
when a BMC powers on, fetches the node's iPXE script from the boot server
and phones home ``--boot-time`` seconds after the power request. The boot
server and the lab's Kubernetes stand-in (the nodes' pool is a Kubernetes
one: no Slurm runs here, and a scheduler that cannot be read blocks a plan)
run in this process. Each round gets a
fresh database in the same PostgreSQL cluster, so both provision the same
enrolled nodes. After provisioning, apply's next wave (acceptance) needs SSH
to the nodes, which emulated nodes do not have: apply reports those steps
failed in both rounds alike, and the figures cover the whole apply.

Needs root (PostgreSQL runs as its own user, as in the tests).

    python bench/apply_serve.py [--nodes 1000] [--max-in-flight 50] [--boot-time 10]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
EXE = str(Path(sys.executable).with_name("racklife"))


def kube_pool(inventory: str) -> str:
    """bench/provision.py's inventory with its nodes in a Kubernetes pool: the lab's Kubernetes stand-in
    answers for it here, where no Slurm runs (a scheduler that cannot be read blocks every plan)."""
    import yaml

    doc = yaml.safe_load(inventory)
    doc["pools"] = {"inference": {"scheduler": "kubernetes"}}
    for node in doc["nodes"]:
        node["pool"] = "inference"
    return str(yaml.safe_dump(doc))


def wait_services(url: str, count: int, timeout: float = 120) -> None:
    from lifecycle.store import Store
    from lifecycle.workflows.controller import live_services

    store = Store(url)
    try:
        deadline = time.monotonic() + timeout
        while len(live_services(store)) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{count} service(s) did not start")
            time.sleep(0.3)
    finally:
        store.close()


def one_round(services: int, base: str, name: str, inventory: Path, images: Path, args: argparse.Namespace,
              home: Path) -> dict[str, Any]:
    from lifecycle.drivers.boot.server import BootServer
    from lifecycle.store import Store
    from lifecycle.workflows.boot_service import StoreBootBackend

    url = f"{base}/{name}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RACKLIFE_")}
    env |= {"RACKLIFE_KUBECONFIG": os.environ["RACKLIFE_KUBECONFIG"], "RACKLIFE_DB": url,
            "RACKLIFE_HOME": str(home), "RACKLIFE_BOOT_LISTEN": args.boot_listen}
    subprocess.run([EXE, "inventory", "import", str(inventory)], env=env, check=True, capture_output=True)
    store = Store(url)
    host, port = args.boot_listen.rsplit(":", 1)
    server = BootServer(StoreBootBackend(store), images, host=host, port=int(port)).start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(services):
            log = (home / f"{name}-serve-{i}.log").open("wb")
            procs.append(subprocess.Popen([EXE, "serve", "--refresh-interval", "0"], env=env, stdout=log,
                                          stderr=subprocess.STDOUT))
        wait_services(url, services)
        t0 = time.perf_counter()
        res = subprocess.run([EXE, "apply", str(inventory), "--yes", "--json", "--images", str(images),
                              "--max-in-flight", str(args.max_in_flight),
                              "--boot-timeout", str(max(120.0, 6 * args.boot_time))],
                             env=env, capture_output=True, text=True, timeout=7200)
        wall = time.perf_counter() - t0
        if "handing runs to racklife serve" not in res.stderr:
            raise RuntimeError(f"apply did not hand its runs to the service(s):\n{res.stderr[-2000:]}")
        report = json.loads(res.stdout)
        done = [d for d in report["done"] if d["action"] == "provision"]
        return {"services": services, "wall_s": round(wall, 1), "apply_exit": res.returncode,
                "provisioned": sum(d["ok"] for d in done), "provision_steps": len(done)}
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
        server.stop()
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--max-in-flight", type=int, default=50)
    ap.add_argument("--boot-time", type=float, default=10.0)
    ap.add_argument("--boot-listen", default="127.0.0.1:18069")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    assert os.geteuid() == 0, "needs root: the throwaway PostgreSQL runs as the postgres user"

    import provision as bench_provision  # bench/provision.py: the emulated nodes

    from lifecycle.imaging.build import build
    from lifecycle.imaging.definition import load_definition
    from lifecycle.lab.kube import KubeStandIn
    from lifecycle.lab.ports import PortLease
    from lifecycle.lab.redfish_emulator import BmcConfig, ExtraHardware, spawn
    from tests.postgres import throwaway_postgres

    n, boot_url = args.nodes, f"http://{args.boot_listen}"
    with tempfile.TemporaryDirectory(prefix="racklife-bench-serve-") as tmp:
        home = Path(tmp)
        home.chmod(0o755)
        defn, defdir = load_definition("minimal")
        build(defn, defdir, home / "images", Path.home() / ".cache" / "racklife" / "debs")
        password = "bench-" + os.urandom(6).hex()
        creds = home / "bmc-creds"
        creds.write_text(f"admin:{password}\n")
        creds.chmod(0o600)
        tree = bench_provision.FIXTURES / "redfish" / "openbmc-stock"
        bmcs = [BmcConfig(f"bmc{i:04d}", tree, "admin", password, power_delay_s=bench_provision.POWER_ON_S,
                          hardware=ExtraHardware(gpus=8, system_serial=f"BENCH{i:05d}",
                                                 nic_macs=(bench_provision.mac_of(i),)))
                for i in range(n)]
        print(f"starting {n} emulated BMCs ...", flush=True)
        emulator = spawn(bmcs)
        firmware = subprocess.Popen([sys.executable, str(REPO / "bench" / "provision.py"), "--firmware", boot_url,
                                     "--boot-time", str(args.boot_time)], stdin=subprocess.PIPE, text=True)
        lease = PortLease()
        kube = KubeStandIn().start()
        os.environ["RACKLIFE_KUBECONFIG"] = str(home / "kubeconfig")
        try:
            assert emulator.process.stdout is not None and firmware.stdin is not None
            bench_provision.forward_power_ons(emulator.process.stdout, firmware.stdin)
            inventory = home / "inventory.yaml"
            inventory.write_text(kube_pool(bench_provision.inventory_yaml(n, emulator.urls, creds)))
            kube.write_kubeconfig(home / "kubeconfig")
            pg = home / "pg"
            pg.mkdir()
            with throwaway_postgres(pg, lease.take(1)[0], "postgres") as admin:
                base = admin.rsplit("/", 1)[0]
                rounds = [one_round(s, base, f"racklife_serve{s}", inventory, home / "images", args, home)
                          for s in (1, 2)]
        finally:
            lease.release()
            kube.stop()
            firmware.kill()
            firmware.wait()
            emulator.stop()
    one, two = rounds
    ratio = two["wall_s"] / one["wall_s"]
    for r in rounds:
        print(f"{r['services']} service(s): apply {r['wall_s']:.1f} s, provisioned {r['provisioned']}/{n} "
              f"(apply exit {r['apply_exit']})")
    print(f"nodes {n}  max-in-flight {args.max_in_flight}  boot time {args.boot_time:g} s  "
          f"wall time two services / one: {ratio:.3f}  (machine load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs)")
    if args.json:
        args.json.write_text(json.dumps({"nodes": n, "max_in_flight": args.max_in_flight,
                                         "boot_time_s": args.boot_time, "rounds": rounds,
                                         "ratio_two_to_one": round(ratio, 3)}, indent=2) + "\n")


if __name__ == "__main__":
    main()
