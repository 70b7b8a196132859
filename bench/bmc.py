"""Fan ``power status`` and ``inventory`` out to many emulated BMCs; compare with raw requests.

    /work/venv/bin/python bench/bmc.py [--count 1000] [--concurrency 32] [--trees a,b]

Starts the Redfish emulator as a subprocess (one process for all BMCs), then for
each operation runs RedfishDriver against every BMC with bounded concurrency,
recording every HTTP request the driver sends. The same request sequences are
then replayed with plain ``requests`` (session login, X-Auth-Token, JSON
decoding, logout) at the same concurrency, so the ratio is the driver's own
overhead. Prints ops/s, p50/p99 latency, peak RSS of this process (driver) and
of the emulator, and driver/raw time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lifecycle.drivers.bmc.base import Credentials  # noqa: E402
from lifecycle.drivers.bmc.redfish import RedfishDriver  # noqa: E402
from lifecycle.lab.redfish_emulator import BmcConfig, ExtraHardware, spawn  # noqa: E402

TREES = ("dell-idrac-bmclib", "dmtf-public-rackmount1", "hpe-ilo5-dl325", "openbmc-stock")
USER = "bench"
PASSWORD = os.environ.get("BENCH_BMC_PASSWORD", "bench-" + os.urandom(6).hex())

Request = tuple[str, str, dict[str, Any] | None]


@dataclass
class Run:
    name: str
    wall_s: float
    latencies: list[float]
    requests: int
    errors: int = 0
    recorded: dict[str, list[Request]] = field(default_factory=dict)

    def report(self) -> str:
        lat = sorted(self.latencies)
        p50 = statistics.median(lat) * 1000
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
        return (f"{self.name:<28} {len(lat) / self.wall_s:8.1f} ops/s  p50 {p50:7.1f} ms  "
                f"p99 {p99:7.1f} ms  wall {self.wall_s:6.2f} s  "
                f"{self.requests / self.wall_s:7.0f} req/s  errors {self.errors}")


def fan_out(urls: dict[str, str], concurrency: int,
            one: Callable[[str, str], int]) -> tuple[float, list[float], int, int]:
    latencies: list[float] = []
    counts: list[int] = []
    errors = 0

    def timed(item: tuple[str, str]) -> None:
        nonlocal errors
        start = time.perf_counter()
        try:
            counts.append(one(*item))
        except Exception as exc:
            errors += 1
            print(f"  {item[0]}: {type(exc).__name__}: {exc}", file=sys.stderr)
        latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(timed, urls.items()))
    return time.perf_counter() - start, latencies, sum(counts), errors


def driver_run(name: str, urls: dict[str, str], concurrency: int,
               op: Callable[[RedfishDriver], object], auth: str) -> Run:
    creds = Credentials(USER, PASSWORD)
    recorded: dict[str, list[Request]] = {}

    def one(bmc: str, url: str) -> int:
        drv = RedfishDriver(url, creds, verify_tls=False, auth=auth)  # type: ignore[arg-type]
        log: list[Request] = []
        transport = drv.transport
        send = transport._call

        def recording(method: str, path: str, body: dict[str, Any] | None,
                      headers: dict[str, str]) -> Any:
            log.append((method, path, body))
            return send(method, path, body, headers)

        transport._call = recording  # type: ignore[method-assign]
        op(drv)
        drv.close()
        recorded[bmc] = log
        return len(log)

    wall, lat, count, errors = fan_out(urls, concurrency, one)
    return Run(name, wall, lat, count, errors, recorded)


def raw_run(name: str, urls: dict[str, str], concurrency: int,
            recorded: dict[str, list[Request]], auth: tuple[str, str] | None) -> Run:
    """Replay each BMC's requests with plain requests: same paths, bodies and auth flow."""

    def one(bmc: str, url: str) -> int:
        with requests.Session() as session:
            session.auth = auth
            headers = {"OData-Version": "4.0"}
            location = None
            for method, path, body in recorded[bmc]:
                if method == "DELETE" and location:
                    path = location
                resp = session.request(method, url + path, json=body, headers=headers,
                                       timeout=10)
                if resp.content:
                    resp.json()
                if method == "POST" and "X-Auth-Token" in resp.headers:
                    headers["X-Auth-Token"] = resp.headers["X-Auth-Token"]
                    location = resp.headers.get("Location")
            return len(recorded[bmc])

    wall, lat, count, errors = fan_out(urls, concurrency, one)
    return Run(name, wall, lat, count, errors)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--trees", default=",".join(TREES))
    parser.add_argument("--auth", choices=["session", "basic"], default="session")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs added to every BMC")
    parser.add_argument("--fixtures", type=Path,
                        default=REPO.parent / "shared" / "fixtures" / "redfish")
    args = parser.parse_args()
    trees = args.trees.split(",")
    bmcs = [BmcConfig(name=f"bmc{i:04d}", tree=args.fixtures / trees[i % len(trees)],
                      username=USER, password=PASSWORD,
                      hardware=ExtraHardware(gpus=args.gpus, drives=2))
            for i in range(args.count)]
    print(f"{args.count} BMCs ({', '.join(trees)}; +{args.gpus} GPUs, 2 drives each), "
          f"concurrency {args.concurrency}, auth {args.auth}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    started = time.perf_counter()
    with spawn(bmcs) as emu:
        print(f"emulator up in {time.perf_counter() - started:.2f} s (pid {emu.pid})")
        results = []
        for op_name, op in (("power status", lambda d: d.power_state()),
                            ("inventory", lambda d: d.inventory())):
            basic = (USER, PASSWORD) if args.auth == "basic" else None
            drv = driver_run(f"driver {op_name}", emu.urls, args.concurrency, op, args.auth)
            raw = raw_run(f"raw requests {op_name}", emu.urls, args.concurrency, drv.recorded,
                          basic)
            drv2 = driver_run(f"driver {op_name} (again)", emu.urls, args.concurrency, op,
                              args.auth)
            raw2 = raw_run(f"raw requests {op_name} (again)", emu.urls, args.concurrency,
                           drv2.recorded, basic)
            for run in (drv, raw, drv2, raw2):
                print(run.report())
            per_bmc = drv.requests / max(1, len(drv.latencies))
            ratio = (drv.wall_s + drv2.wall_s) / (raw.wall_s + raw2.wall_s)
            results.append((op_name, ratio, per_bmc, min(drv.wall_s, drv2.wall_s)))
        emulator_rss = peak_rss_mb(emu.pid)
    driver_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: driver process {driver_rss:.0f} MB, emulator {emulator_rss:.0f} MB")
    for op_name, ratio, per_bmc, wall in results:
        print(f"{op_name}: {per_bmc:.1f} HTTP requests per BMC, driver/raw time {ratio:.2f}x, "
              f"{args.count} BMCs in {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
