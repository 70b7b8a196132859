"""``python -m lifecycle.lab.redfish_emulator``: serve N emulated BMCs until SIGTERM.

Either ``--config FILE`` (what ``spawn()`` writes: ``{"tls": bool, "bmcs": [BmcConfig…]}``)
or ``--tree DIR --count N --user U --password-env VAR``. Prints one JSON line
``{"event": "ready", "urls": {...}, "cert": PATH|null}`` once every BMC listens,
then one line per power change: ``{"event": "power", "bmc", "system", "state"}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from lifecycle.lab.redfish_emulator.config import BmcConfig
from lifecycle.lab.redfish_emulator.hardware import ExtraHardware
from lifecycle.lab.redfish_emulator.server import RedfishEmulator


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lifecycle.lab.redfish_emulator",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, help="JSON file with tls and bmcs")
    parser.add_argument("--tree", type=Path, help="captured tree, e.g. shared/fixtures/redfish/X")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password-env", default="RACKLIFE_EMULATOR_PASSWORD",
                        help="environment variable holding the BMC password")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--base-port", type=int, default=0, help="0: ports chosen by the OS")
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with a self-signed cert")
    parser.add_argument("--power-delay", type=float, default=0.0)
    parser.add_argument("--task-duration", type=float, default=1.0)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--gpu-source", choices=["processors", "pcie"], default="processors")
    parser.add_argument("--drives", type=int, default=0)
    parser.add_argument("--as-captured", action="store_true",
                        help="serve the tree without the conformance fixes of vendor_fixes.py")
    return parser.parse_args(argv)


def _bmcs(args: argparse.Namespace) -> tuple[list[BmcConfig], bool]:
    if args.config:
        data = json.loads(args.config.read_text(encoding="utf-8"))
        return [BmcConfig.from_json(b) for b in data["bmcs"]], bool(data.get("tls"))
    if args.tree is None:
        raise SystemExit("give --config or --tree")
    password = os.environ.get(args.password_env)
    if not password:
        raise SystemExit(f"set the BMC password in ${args.password_env}")
    hardware = ExtraHardware(gpus=args.gpus, gpu_source=args.gpu_source, drives=args.drives)
    bmcs = [BmcConfig(name=f"bmc{i}", tree=args.tree, username=args.user, password=password,
                      host=args.host, port=args.base_port + i if args.base_port else 0,
                      power_delay_s=args.power_delay, task_duration_s=args.task_duration,
                      hardware=hardware, as_captured=args.as_captured)
            for i in range(args.count)]
    return bmcs, bool(args.tls)


def _print(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


async def _serve(emulator: RedfishEmulator) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await emulator.start_async()
    cert = str(emulator.cert_path) if emulator.cert_path else None
    _print({"event": "ready", "urls": emulator.urls, "cert": cert, "pid": os.getpid()})
    await stop.wait()
    await emulator.stop_async()


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    bmcs, tls = _bmcs(args)

    def on_power(bmc: str, system: str, state: str) -> None:
        _print({"event": "power", "bmc": bmc, "system": system, "state": state})

    emulator = RedfishEmulator(bmcs, tls=tls, on_power=on_power)
    asyncio.run(_serve(emulator))
    return 0


if __name__ == "__main__":
    sys.exit(main())
