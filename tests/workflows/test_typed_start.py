"""Starting a workflow is type-checked: ``Controller.start`` takes the workflow's own arguments and its handle
gives the workflow's own result type.

It was ``start(func, *args: Any) -> Any``: a command could start a run with arguments the workflow does not
take (one did: ``racklife slurm join/leave`` passed its arguments as ``*args: object``) and only a replay or
a failed run would say so. mypy, run here on snippets with the project's configuration, now refuses a wrong
argument, a wrong count and a result used as what it is not, and accepts the right calls.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api

REPO = Path(__file__).resolve().parents[2]

HEADER = """\
from __future__ import annotations
from typing import Any
from lifecycle.workflows import slurm_pool
from lifecycle.workflows.controller import Controller


def use(ctl: Controller) -> None:
"""


WRONG = [  # (the call, what mypy's error says)
    ('ctl.start(slurm_pool.leave_node, "n1", "sometimes", None, "why")', "str, str, None, str"),  # not a policy
    ('ctl.start(slurm_pool.join_node, "n1", "extra", nodes=["n1"])', "str, str"),  # one argument too many
    ('ctl.start(slurm_pool.leave_node, "n1")', "expected \"Callable[[str]"),  # too few
    ('n: int = ctl.start(slurm_pool.join_node, "n1").get_result()', "dict[str, Any]"),  # a dict, not an int
    ('ctl.start_or_finish(slurm_pool.leave_node, "n1", "wait", 1.0)', "str, str, float"),  # the reason missing
]
RIGHT = """
h = ctl.start(slurm_pool.leave_node, "n1", "requeue", 60.0, "maintenance", nodes=["n1"])
result: dict[str, Any] = h.get_result()
run_id: str = h.get_workflow_id()
joined: dict[str, Any] = ctl.start_or_finish(slurm_pool.join_node, "n1").get_result()
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def _mypy(tmp_path: Path, cache: Path, lines: list[str]) -> dict[int, str]:
    """mypy's errors on the snippet, by the line of ``lines`` (0-based) they are on."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(HEADER + "".join(f"    {line}\n" for line in lines))
    out, err, _ = api.run(["--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(cache),
                           "--no-error-summary", "--hide-error-context", str(snippet)])
    assert not err, err
    first = HEADER.count("\n") + 1
    return {int(m.group(1)) - first: line for line in out.splitlines()
            if (m := re.match(r".*snippet\.py:(\d+): error:", line))}


def test_a_wrong_start_is_a_type_error(tmp_path: Path, cache: Path) -> None:
    errors = _mypy(tmp_path, cache, [call for call, _ in WRONG])
    assert sorted(errors) == list(range(len(WRONG))), errors
    for i, (call, why) in enumerate(WRONG):
        assert why in errors[i], (call, errors[i])


def test_the_right_starts_type_check(tmp_path: Path, cache: Path) -> None:
    assert _mypy(tmp_path, cache, RIGHT.strip().splitlines()) == {}
