"""Wall time of the controller side of acceptance on 8 and 32 nodes, split into burn-in and overhead.

Each node is an SSH login to one OpenSSH server started here on 127.0.0.1 (key auth
only; needs root and Debian ``openssh-server``); on it ``python -m burnin run`` runs for
real with captured tool outputs on PATH (ibstat, all_reduce_perf, dcgmi from
../shared/fixtures; the GPU soak is skipped because this machine has no GPU). Then the
controller fetches every result, judges the rack, writes the evidence bundle and the
three reports.

Burn-in time is the longest node's own ``started_at``..``ended_at`` (nodes run in
parallel on real racks, so that is the critical path); racklife's overhead is the rest
of the wall time: SSH, fetching, judging, hashing, plotting. On one shared machine all
"nodes" compete for the same cores, and a real quick-level burn-in takes minutes rather
than the seconds it takes here, so the ratio printed is a pessimistic bound.

    sudo python bench/accept.py [--nodes 8 32] [--max-in-flight 32]
"""

from __future__ import annotations

import argparse
import os
import socket
import stat
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from acceptance.evidence import BundleMeta, write_bundle
from acceptance.fanout import BurninCommand, OpenSSH, Target, fan_out, to_input
from acceptance.judge import judge_rack
from acceptance.reports import ReportInput, write_reports

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / ".." / "shared" / "fixtures"
TOOLS = {
    "ibstat": "infiniband/gpud_ibstat.47.0.h100.all.active.0.txt",
    "all_reduce_perf": "nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt",
    "dcgmi": "dcgm/virtualclient/DCGMIDiag_r1_results.json",
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_sshd(d: Path) -> tuple[subprocess.Popen[bytes], int]:
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    port = _port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nPidFile {d / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nPermitRootLogin prohibit-password\nStrictModes no\nMaxStartups 100\nMaxSessions 100\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
                            stderr=subprocess.DEVNULL)
    key = (d / "host.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {key[0]} {key[1]}\n")
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    raise SystemExit("sshd did not start")


def fake_tools(d: Path) -> Path:
    bin_dir = d / "bin"
    bin_dir.mkdir()
    for name, rel in TOOLS.items():
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\n/bin/cat "{(FIXTURES / rel).resolve()}"\n')
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _t(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def bench(n: int, max_in_flight: int, d: Path, port: int, bin_dir: Path) -> None:
    ssh = OpenSSH(d / "client", d / "known_hosts")
    work = d / f"n{n}"
    cmd = BurninCommand("h100-sxm-8", "quick", f"bench-{n}", python=sys.executable, base_dir=str(work / "remote"),
                        env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, skip=("stress",))
    targets = [Target(f"gpu-{i:03d}", "127.0.0.1", port) for i in range(n)]
    t0 = time.perf_counter()
    outcomes = fan_out(ssh, targets, cmd, work / "collected", max_in_flight=max_in_flight, timeout_s=600)
    t1 = time.perf_counter()
    inputs = [to_input(o, "h100-sxm-8", i + 1, "rack-bench") for i, o in enumerate(outcomes)]
    judgement = judge_rack(inputs)
    t2 = time.perf_counter()
    meta = BundleMeta("rack-bench", "bench", "2026-11-30T00:00:00Z", "2026-11-30T00:10:00Z", "0.1.0", "quick")
    digest = write_bundle(work / "bundle", judgement, inputs,
                          {o.node: o.local_dir for o in outcomes if o.local_dir is not None}, meta)
    t3 = time.perf_counter()
    write_reports(work / "reports", ReportInput(judgement, inputs, meta, evidence_digest=digest))
    t4 = time.perf_counter()
    ok = [o for o in outcomes if o.result is not None]
    if len(ok) != n:
        raise SystemExit(f"{n - len(ok)} node(s) without a result: {[o.reason for o in outcomes if o.result is None]}")
    burnin = max(_t(o.result.ended_at) - _t(o.result.started_at) for o in ok if o.result is not None)
    wall = t4 - t0
    print(f"{n:>5} {max_in_flight:>6} {wall:>8.2f} {burnin:>8.2f} {wall - burnin:>9.2f} "
          f"{100 * (wall - burnin) / burnin:>7.0f}% | fan-out {t1 - t0:6.2f}  judge {t2 - t1:5.2f}  "
          f"evidence {t3 - t2:5.2f}  reports {t4 - t3:5.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--max-in-flight", type=int, default=32)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the bench starts sshd and logs in as root")
    with tempfile.TemporaryDirectory(prefix="racklife-bench-") as tmp:
        d = Path(tmp)
        proc, port = start_sshd(d)
        try:
            bin_dir = fake_tools(d)
            print(f"{'nodes':>5} {'flight':>6} {'wall s':>8} {'burnin':>8} {'overhead':>9} {'ratio':>8} | phases (s)")
            for n in args.nodes:
                bench(n, min(args.max_in_flight, n), d, port, bin_dir)
        finally:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    main()
