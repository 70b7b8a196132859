"""A bad acceptance level or Slurm leave policy on the command line is exit 2, names the valid values, changes nothing.

Before, each command compared ``--level`` and ``--policy`` to its own list of
strings (some only after it had read the store), the settings the workflows
took were plain ``str``, and a command that forgot the check passed a typo
into a durable run. Now each option is typed with the vocabulary's Literal
(``burnin.levels.Level``; ``LeavePolicy`` or the narrower ``KeepJobsPolicy``
from ``lifecycle.model.vocab``) and Typer refuses anything else while the
command line is parsed, before the command runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lifecycle.cli._lazy import every_command
from lifecycle.model.vocab import KEEP_JOBS_POLICIES, LEAVE_POLICIES, LEVELS
from lifecycle.store import Store
from tests.cli.test_error_envelope import EXAMPLE, racklife

# (command path, option) -> the values it takes: the vocabulary's own tuple, never a second list.
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("accept", "--level"): LEVELS,
    ("apply", "--level"): LEVELS,
    ("build", "--level"): LEVELS,
    ("burnin run", "--level"): LEVELS,
    ("slurm leave", "--policy"): LEAVE_POLICIES,
    ("role-swap", "--policy"): KEEP_JOBS_POLICIES,
    ("upgrade", "--policy"): KEEP_JOBS_POLICIES,
    ("bmc power", "--policy"): KEEP_JOBS_POLICIES,
}


def test_every_level_and_policy_option_takes_exactly_its_vocabulary() -> None:
    found: dict[tuple[str, str], tuple[str, ...]] = {}
    for path, cmd in every_command():
        for p in cmd.params:
            if p.param_type_name == "option" and p.opts[0] in ("--level", "--policy"):
                found[(path, p.opts[0])] = tuple(getattr(p.type_descriptor, "choices", None) or ())
    assert found == CHOICES


def _listed(values: tuple[str, ...]) -> str:
    """How the refusal names the valid values (click's Choice): 'wait', 'requeue'."""
    return ", ".join(repr(v) for v in values) + "."


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    h = tmp_path_factory.mktemp("vocab")
    assert racklife(h, "inventory", "import", str(EXAMPLE)).returncode == 0
    (h / "ssh_config").write_text("Host *\n  BatchMode yes\n")
    return h


# name -> (argv after `racklife`, with {home} replaced; the option; the values it must name)
CASES: dict[str, tuple[list[str], str, tuple[str, ...]]] = {
    "accept": (["accept", "r01", "--level", "extreme", "--ssh-config", "{home}/ssh_config"],
               "--level", LEVELS),
    "apply": (["apply", str(EXAMPLE), "--level", "extreme", "--yes"], "--level", LEVELS),
    "build": (["build", str(EXAMPLE), "--level", "Quick"], "--level", LEVELS),
    "burnin run": (["burnin", "run", "--profile", "h100-sxm-8", "--level", "extreme", "--out", "{home}/burnin"],
                   "--level", LEVELS),
    "slurm leave": (["slurm", "leave", "r01-n01", "--policy", "yank", "--yes"], "--policy", LEAVE_POLICIES),
    "role-swap": (["role-swap", "r01-n01", "--to", "inference", "--policy", "cancel"], "--policy",
                  KEEP_JOBS_POLICIES),
    "upgrade": (["upgrade", "--pool", "training", "--image", "minimal:2", "--policy", "cancel"], "--policy",
                KEEP_JOBS_POLICIES),
    "bmc power": (["bmc", "power", "cycle", "r01-n01", "--force", "--policy", "cancel", "--yes"], "--policy",
                  KEEP_JOBS_POLICIES),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_value_is_exit_2_naming_the_valid_ones_and_changes_nothing(home: Path, case: str) -> None:
    argv, option, valid = CASES[case]
    res = racklife(home, *[a.replace("{home}", str(home)) for a in argv], "--json")
    assert res.returncode == 2, (case, res.stdout, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr, case
    err = json.loads(res.stdout)["error"]
    assert err["code"] == "bad_input" and err["exit_code"] == 2, (case, err)
    assert f"Invalid value for '{option}'" in err["message"], (case, err)
    assert err["message"].endswith(f"is not one of {_listed(valid)}"), (case, err)  # every valid value, no other
    assert res.stderr.startswith("error: "), (case, res.stderr)
    store = Store(f"sqlite:///{home / 'racklife.sqlite'}")
    try:
        nodes = [n.name for n in store.nodes()]
        assert nodes and {n: [t.event for t in store.history(n)] for n in nodes} == {n: ["enroll"] for n in nodes}
    finally:
        store.close()
    assert not (home / "acceptance").exists() and not (home / "burnin").exists(), case
