"""How each tool says its version, and what is recorded when it cannot.

The report used to read "nvidia-smi Invalid combination of input arguments",
"dcgmi Usage: …" and "all_reduce_perf None": the first line a tool printed for
``--version`` was taken as its version whatever the tool answered (an old
driver's nvidia-smi has no ``--version``; a dcgmi build may print its usage).
Here each tool is a table entry: the argv that asks it, and a version is only
what that argv printed with exit status 0 *and* a version number in it.
Anything else is no version, with the reason in words
(``CheckResult.tool_version_note``), so the report says "unknown" and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NUMBER = re.compile(r"\d+(?:\.\d+)+")


@dataclass(frozen=True)
class Probe:
    """How to ask a tool its version: ``argv``; None when the tool has no way to say."""

    argv: tuple[str, ...] | None
    why_none: str = ""  # for a tool without a version option: where its version can be found instead


PROBES: dict[str, Probe] = {
    "dcgmi": Probe(("dcgmi", "--version")),
    "ibstat": Probe(("ibstat", "-V")),
    "ibv_devinfo": Probe(("ibv_devinfo", "--version")),
    "dmesg": Probe(("dmesg", "--version")),
    # Every driver answers the query form; `nvidia-smi --version` is unknown to older ones.
    "nvidia-smi": Probe(("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")),
    "all_reduce_perf": Probe(None, "all_reduce_perf has no version option and its output named no NCCL version"),
}


def read(tool: str, argv: tuple[str, ...], exit_code: int | None, out: str) -> tuple[str | None, str | None]:
    """(version, None) when ``out`` answers ``argv``, else (None, why not) in words."""
    asked = " ".join(argv)
    first = next((ln.strip() for ln in out.splitlines() if ln.strip()), "")
    if exit_code is None:
        return None, f"`{asked}` did not finish"
    if exit_code != 0:
        return None, f"`{asked}` exited {exit_code}" + (f": {first[:120]}" if first else "")
    if not NUMBER.search(first):
        return None, f"`{asked}` printed no version number" + (f" ({first[:120]})" if first else "")
    return first[:200], None


NCCL_VERSION = re.compile(r"(?:nccl-tests version|NCCL version)\s+(\S+)")


def nccl_from_output(text: str) -> str | None:
    """The nccl-tests or NCCL version an all_reduce_perf run printed (newer builds and NCCL_DEBUG=INFO)."""
    m = NCCL_VERSION.search(text)
    return f"{'nccl-tests' if 'nccl-tests' in m.group(0) else 'NCCL'} {m.group(1)}" if m else None
