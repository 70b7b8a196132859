"""A driver upgrade's re-test: the node must report the driver the controller asked for, read from its own GPUs.

The controller compares the driver version the node's gpu check read (NVML, or
``nvidia-smi -q -x``) with the request's, whatever the node was told: a node
still on the old driver, one whose check read no version, or one that ran no
gpu check at all fails (never a pass). Without a driver in the request nothing
is compared.
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


def _inputs(rack8: Build, expect: str | None, change: Callable[[Any], Any] | None = None) -> list[NodeInput]:
    out = []
    for inp, _ in rack8(None):
        assert inp.result is not None
        result = replace(inp.result, run_id=RUN, node=inp.node, serial=f"SN-{inp.node}")
        if inp.node == "gpu-a01" and change is not None:
            result = change(result)
        want = Request(RUN, inp.node, "quick", f"SN-{inp.node}", expect_driver=expect if inp.node == "gpu-a01"
                       else None)
        out.append(replace(inp, result=result, request=want))
    return out


def _driver(rack8: Build) -> str:
    [inp, *_] = [i for i, _ in rack8(None) if i.node == "gpu-a01"]
    assert inp.result is not None
    [gpu] = [c for c in inp.result.checks if c.kind == "gpu"]
    assert isinstance(gpu.data, dict) and isinstance(gpu.data["driver_version"], str)
    return gpu.data["driver_version"]


def _with_driver(version: str | None) -> Callable[[Any], Any]:
    def change(result: Any) -> Any:
        checks = [replace(c, data={**c.data, "driver_version": version}) if c.kind == "gpu" else c
                  for c in result.checks]
        return replace(result, checks=checks)
    return change


def test_the_driver_asked_for_passes(rack8: Build) -> None:
    version = _driver(rack8)
    a01 = judge_rack(_inputs(rack8, version)).by_node()["gpu-a01"]
    [found] = [f for f in a01.findings if f.check == "result.driver"]
    assert a01.passed and found.verdict == "pass" and found.measured == version, found


def test_no_driver_asked_for_is_not_compared(rack8: Build) -> None:
    a01 = judge_rack(_inputs(rack8, None)).by_node()["gpu-a01"]
    assert a01.passed and not [f for f in a01.findings if f.check == "result.driver"]


@pytest.mark.parametrize(("change", "verdict", "words"), [
    (None, "fail", "not 999.1.1"),  # the node still runs the driver it had
    (_with_driver(None), "error", "reports no driver version, not 999.1.1"),
    (lambda r: replace(r, checks=[c for c in r.checks if c.kind != "gpu"]), "error", "no gpu check ran"),
])
def test_another_driver_none_or_no_gpu_check_fails_the_node(rack8: Build, change: Callable[[Any], Any] | None,
                                                          verdict: str, words: str) -> None:
    a01 = judge_rack(_inputs(rack8, "999.1.1", change)).by_node()["gpu-a01"]
    [found] = [f for f in a01.findings if f.check == "result.driver"]
    assert not a01.passed and found.verdict == verdict and words in found.reason, found
    assert judge_rack(_inputs(rack8, "999.1.1", change)).by_node()["gpu-a02"].passed  # only the one asked
