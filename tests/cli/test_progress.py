"""Progress while a command waits: plain timestamped lines off a terminal, nothing under -o json.

The TTY form (a Rich status line) and a real wait are in
tests/slurm/test_slurm_workflows.py (a leave waiting for a job, then Ctrl-C).
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import pytest

from lifecycle.cli import _output
from lifecycle.cli._runs import progress


def states_seen() -> tuple[list[str], object]:
    seen: list[str] = []
    answers = iter([{"provisioning": ["n1", "n2"]}, {"provisioning": ["n1"], "provisioned": ["n2"]}])
    last: dict[str, list[str]] = {}

    def read(nodes: Sequence[str]) -> dict[str, list[str]]:
        nonlocal last
        seen.extend(nodes)
        last = next(answers, last)
        return last
    return seen, read


def test_a_line_when_a_node_moves_and_not_otherwise(capsys: pytest.CaptureFixture[str]) -> None:
    seen, read = states_seen()
    with progress(["n1", "n2"], "provisioning 2 node(s)", read=read, tick_s=0.05):  # type: ignore[arg-type]
        time.sleep(0.5)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines  # one per change, not one per tick
    assert re.fullmatch(r"\d\d:\d\d:\d\d provisioning 2 node\(s\), \d+ s: provisioning: n1, n2", lines[0])
    assert lines[1].endswith("provisioned: n2; provisioning: n1")
    assert seen[:2] == ["n1", "n2"]


def test_nothing_extra_under_json(capsys: pytest.CaptureFixture[str]) -> None:
    _seen, read = states_seen()
    with _output.using(_output.Output(_output.Format.JSON)), \
            progress(["n1"], "accepting", read=read, tick_s=0.05):  # type: ignore[arg-type]
        time.sleep(0.3)
    out = capsys.readouterr()
    assert out.err == "" and out.out == ""
