"""``python -m burnin``: the node-side command, with nothing but the standard library.

A freshly imaged node has Python but not racklife's dependencies (Typer, pydantic), so
this entry point uses argparse. ``racklife burnin …`` (``lifecycle/cli/burnin.py``)
offers the same verbs through the functions defined here, so both print the same JSON.

Exit codes: 0 every check passed; 1 a check failed or could not be run (error);
2 bad input (unknown profile, unreadable file).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from burnin import gpu_stress, levels, profiles, runner
from burnin.nvml import Nvml
from burnin.nvml_pynvml import PynvmlNvml
from burnin.parsers import ParseError
from burnin.parsers import dcgm as dcgm_parser
from burnin.parsers import infiniband as ib_parser
from burnin.parsers import nccl as nccl_parser
from burnin.parsers import nvidia_smi as smi_parser
from burnin.parsers import xid as xid_parser
from burnin.result import CheckResult, ResultFormatError, RunResult, load_result

OK, FAILED, BAD_INPUT = 0, 1, 2
PARSE_KINDS = ("dcgm", "nccl", "ibstat", "xid", "nvidia-smi")
NCCL_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast",
                    "reduce", "sendrecv", "gather", "scatter", "hypercube")


def parse_text(kind: str, text: str, collective: str | None = None) -> dict[str, Any]:
    """Parse one tool's output into the JSON document ``burnin parse KIND`` prints."""
    if kind == "dcgm":
        return asdict(dcgm_parser.parse(text))
    if kind == "nccl":  # a log of several collectives: one document per run, never merged
        reports = nccl_parser.parse_all(text, collective)
        return asdict(reports[0]) if len(reports) == 1 else {"collectives": [asdict(r) for r in reports]}
    if kind == "ibstat":
        return asdict(ib_parser.parse(text))
    if kind == "xid":
        return asdict(xid_parser.parse(text))
    if kind == "nvidia-smi":
        return asdict(smi_parser.parse(text))
    raise ValueError(f"unknown parser {kind!r}; known: {', '.join(PARSE_KINDS)}")


def collective_from_name(path: Path) -> str | None:
    """nccl-tests never prints its own name; files are usually named after the binary."""
    name = path.name.lower()
    return next((c for c in NCCL_COLLECTIVES if f"{c}_perf" in name or f"{c}." in name), None)


def parse_file(kind: str, path: Path, collective: str | None = None) -> tuple[int, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return BAD_INPUT, {"verdict": "error", "reason": f"cannot read {path}: {exc.strerror}"}
    try:
        if kind == "nccl" and collective is None:
            collective = collective_from_name(path)
        return OK, parse_text(kind, text, collective)
    except ParseError as exc:
        return BAD_INPUT, {"verdict": "error", "reason": str(exc)}


def judge_file(path: Path, profile_name: str) -> tuple[int, dict[str, Any]]:
    try:
        profile = profiles.load(profile_name)
        result = load_result(path.read_text(encoding="utf-8"))
    except (profiles.ProfileError, ResultFormatError) as exc:
        return BAD_INPUT, {"passed": False, "checks": [], "error": str(exc)}
    except OSError as exc:
        return BAD_INPUT, {"passed": False, "checks": [], "error": f"cannot read {path}: {exc.strerror}"}
    verdict = runner.rejudge(result, profile)
    doc = {
        "passed": verdict.passed,
        "profile": profile.name,
        "result_profile": result.profile,
        "level": result.level,
        "checks": [
            {"name": f.name, "verdict": f.verdict, "measured": f.measured,
             "threshold": f.threshold, "reason": f.reason}
            for f in verdict.findings
        ],
    }
    return (OK if verdict.passed else FAILED), doc


def default_nvml() -> Nvml:
    return _LazyNvml()


class _LazyNvml:
    """Defers loading pynvml until a check asks, so its absence is a check error, not a crash."""

    def _real(self) -> PynvmlNvml:
        return PynvmlNvml()

    def inventory(self) -> Any:
        return self._real().inventory()

    def watch_xids(self) -> Any:
        return self._real().watch_xids()


def default_stress(seconds: float, gemm_size: int) -> gpu_stress.StressReport:
    return gpu_stress.run(seconds, gemm_size)


def run_node(
    profile_name: str,
    level: str,
    out: Path,
    skip: Sequence[str] = (),
    expect_driver: str | None = None,
    expect_cuda: str | None = None,
    progress: bool = True,
    run_id: str | None = None,
    node: str | None = None,
    kernel_log_since: str | None = None,
) -> tuple[int, RunResult | str]:
    try:
        profile = profiles.load(profile_name)
    except profiles.ProfileError as exc:
        return BAD_INPUT, str(exc)
    if kernel_log_since is not None and xid_parser.instant(kernel_log_since) is None:
        return BAD_INPUT, (f"--kernel-log-since {kernel_log_since!r} is not an ISO 8601 time with its offset "
                           "(as `date --iso-8601=ns` prints it)")
    try:
        checked = levels.level(level)
    except ValueError as exc:
        return BAD_INPUT, f"--level {exc}"
    unknown = [s for s in skip if s not in runner.KNOWN_CHECKS]
    if unknown:
        return BAD_INPUT, f"unknown check(s) to skip: {unknown}; known: {runner.KNOWN_CHECKS}"

    def show(check: CheckResult) -> None:
        if progress:
            line = f"{check.verdict.upper():5} {check.name}"
            print(f"{line}  {check.reason[:300]}" if check.reason else line, file=sys.stderr, flush=True)

    result = runner.run(
        profile, checked, out, nvml=default_nvml(), stress=default_stress, skip=tuple(skip),
        expect_driver=expect_driver, expect_cuda=expect_cuda, on_check=show, run_id=run_id, node=node,
        kernel_log_since=kernel_log_since,
    )
    return (OK if result.verdict == "pass" else FAILED), result


@contextmanager
def one_at_a_time(out: Path) -> Iterator[None]:
    """Hold ``OUT.lock`` (beside the output directory) while a burn-in writes there.

    A controller killed mid-burn-in leaves its burn-in running on the node; the
    run, recovered elsewhere, starts the same burn-in into the same directory.
    The second waits for the first instead of running beside it.
    """
    lock = out.with_name(out.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _print(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m burnin", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the checks of a profile on this node")
    r.add_argument("--profile", required=True)
    r.add_argument("--level", default="standard", choices=levels.LEVELS)
    r.add_argument("--out", required=True, type=Path)
    r.add_argument("--skip", action="append", default=[], help="check to skip (recorded as error)")
    r.add_argument("--expect-driver")
    r.add_argument("--expect-cuda")
    r.add_argument("--run-id", help="the acceptance run that asked (written into result.json)")
    r.add_argument("--node", help="the node name the controller asked (written into result.json)")
    r.add_argument("--kernel-log-since", metavar="ISO",
                   help="judge only kernel log lines from this time on (the node's clock; default: the whole log)")
    p = sub.add_parser("parse", help="parse one tool output file and print JSON")
    p.add_argument("kind", choices=PARSE_KINDS)
    p.add_argument("file", type=Path)
    p.add_argument("--collective", help="nccl: the collective the file measured")
    p.add_argument("--json", action="store_true", help="accepted for symmetry; output is JSON")
    j = sub.add_parser("judge", help="judge a result.json against a profile")
    j.add_argument("result", type=Path)
    j.add_argument("--profile", required=True)
    j.add_argument("--json", action="store_true", help="accepted for symmetry; output is JSON")
    sub.add_parser("profiles", help="list the shipped SKU profiles")
    args = ap.parse_args(argv)
    if args.cmd == "run":
        with one_at_a_time(args.out):
            code, res = run_node(args.profile, args.level, args.out, args.skip,
                                 args.expect_driver, args.expect_cuda, run_id=args.run_id, node=args.node,
                                 kernel_log_since=args.kernel_log_since)
        if isinstance(res, str):
            print(f"error: {res}", file=sys.stderr)
            return code
        print(f"{res.verdict}: {args.out / 'result.json'}", file=sys.stderr)
        return code
    if args.cmd == "parse":
        code, doc = parse_file(args.kind, args.file, args.collective)
        _print(doc)
        return code
    if args.cmd == "judge":
        code, doc = judge_file(args.result, args.profile)
        _print(doc)
        return code
    _print(profiles.available())
    return OK
