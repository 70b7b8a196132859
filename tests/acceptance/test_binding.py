"""A result is bound to its request: the run id, node, level and serial the controller asked for.

On the old judge a node's verdict was whatever result.json came back in its directory:
one left over from an earlier run, copied from a healthy neighbour, or run at a lower
level than this acceptance asked for passed as this node's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from acceptance.judge import NodeInput, Request, judge_rack

Build = Callable[[list[Any] | None], list[tuple[NodeInput, Path]]]
RUN = "accept-0a1b2c"


def _bound(rack8: Build, **change: Any) -> list[NodeInput]:
    """The rack's inputs, each result written for this run; ``change`` alters gpu-a01's result."""
    out = []
    for inp, _ in rack8(None):
        assert inp.result is not None
        result = replace(inp.result, run_id=RUN, node=inp.node, serial=f"SN-{inp.node}")
        if inp.node == "gpu-a01":
            result = replace(result, **change)
        out.append(replace(inp, result=result, request=Request(RUN, inp.node, "quick", f"SN-{inp.node}")))
    return out


def test_a_result_that_answers_its_request_passes_the_binding(rack8: Build) -> None:
    a01 = judge_rack(_bound(rack8)).by_node()["gpu-a01"]
    assert a01.passed
    assert {f.check for f in a01.findings if f.source == "record"} >= {
        "result.run_id", "result.node", "result.level", "result.serial"}


@pytest.mark.parametrize(("change", "check", "words"), [
    ({"run_id": "accept-earlier"}, "result.run_id", "is for run_id 'accept-earlier'"),
    ({"run_id": None}, "result.run_id", "does not say which"),
    ({"node": "gpu-a02"}, "result.node", "is for node 'gpu-a02'"),
    ({"node": None}, "result.node", "does not say which"),
    ({"level": "standard"}, "result.level", "is for level 'standard'"),
    ({"serial": "SN-gpu-a02"}, "result.serial", "serial 'SN-gpu-a02'"),
])
def test_a_result_from_another_node_run_or_level_is_an_error(rack8: Build, change: dict[str, Any], check: str,
                                                             words: str) -> None:
    a01 = judge_rack(_bound(rack8, **change)).by_node()["gpu-a01"]
    assert not a01.passed
    bad = [f for f in a01.findings if f.verdict != "pass" and f.source == "record"]
    assert [(f.check, f.verdict) for f in bad] == [(check, "error")] and words in bad[0].reason


def test_a_node_that_cannot_read_its_serial_is_an_error_when_the_inventory_has_one(rack8: Build) -> None:
    """Fail closed: the inventory knows gpu-a01's serial, and a result without one cannot show it
    came from gpu-a01 (on the old judge this passed with "not compared")."""
    a01 = judge_rack(_bound(rack8, serial=None)).by_node()["gpu-a01"]
    serial = next(f for f in a01.findings if f.check == "result.serial")
    assert not a01.passed and a01.verdict == "error"
    assert serial.verdict == "error" and "has no system serial" in serial.reason and "SN-gpu-a01" in serial.reason


def test_a_node_the_inventory_has_no_serial_for_is_not_compared(rack8: Build) -> None:
    inputs = [replace(i, request=replace(i.request, serial=None)) if i.node == "gpu-a01" and i.request else i
              for i in _bound(rack8, serial=None)]
    a01 = judge_rack(inputs).by_node()["gpu-a01"]
    serial = next(f for f in a01.findings if f.check == "result.serial")
    assert a01.passed and serial.verdict == "pass" and "the inventory has none" in serial.reason
