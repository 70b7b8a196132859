"""The elastic-capacity pieces that need no cluster: the role-switch hook and the programs' refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle.drivers.errors import NotSupported, OperationFailed
from lifecycle.drivers.slurm.role import ROLE_CMD_ENV, CommandRoleSwitch
from lifecycle.workflows.elastic import ElasticSettings
from lifecycle.workflows.elastic_worker import settings_from_env

RECORDER = "import sys, pathlib; pathlib.Path(sys.argv[1]).write_text(' '.join(sys.argv[2:]))"


def test_role_switch_appends_role_and_node_as_argv(tmp_path: Path) -> None:
    out = tmp_path / "args"
    hook = CommandRoleSwitch((sys.executable, "-c", RECORDER, str(out)))
    hook.switch("gpu-001", "kubernetes")
    assert out.read_text() == "kubernetes gpu-001"


def test_role_switch_from_env_splits_like_a_shell_but_runs_no_shell(tmp_path: Path) -> None:
    out = tmp_path / "a b"
    hook = CommandRoleSwitch.from_env({ROLE_CMD_ENV: f'{sys.executable} -c "{RECORDER}" "{out}"'})
    hook.switch("gpu-002", "slurm")
    assert out.read_text() == "slurm gpu-002"


def test_role_switch_failure_names_the_node_and_the_hook_output() -> None:
    hook = CommandRoleSwitch((sys.executable, "-c", "import sys; sys.exit('no BMC answer')"))
    with pytest.raises(OperationFailed) as err:
        hook.switch("gpu-003", "slurm")
    assert err.value.target == "gpu-003" and "no BMC answer" in err.value.message


def test_role_switch_refuses_a_bad_node_name_and_a_missing_hook() -> None:
    with pytest.raises(ValueError, match="not a valid node name"):
        CommandRoleSwitch(("true",)).switch("gpu-1;reboot", "slurm")
    with pytest.raises(NotSupported):
        CommandRoleSwitch.from_env({})
    with pytest.raises(NotSupported, match="not found"):
        CommandRoleSwitch(("/nonexistent/hook",)).switch("gpu-004", "slurm")


def test_settings_round_trip_and_fail_closed() -> None:
    env = {"RACKLIFE_KUBECONFIG": "/k", ROLE_CMD_ENV: "hook --x", "RACKLIFE_RECLAIM_DEADLINE_S": "7"}
    settings = settings_from_env(env)
    assert settings == ElasticSettings("/k", ("hook", "--x"), "inference", 7.0)
    # A run recorded before the typed argument (its input a dict) replays with the same settings.
    assert ElasticSettings.of(settings.to_dict()) == settings and ElasticSettings.of(settings) is settings
    with pytest.raises(ValueError, match="RACKLIFE_KUBECONFIG, RACKLIFE_NODE_ROLE_CMD"):
        settings_from_env({})


def test_program_without_configuration_refuses_and_starts_nothing(tmp_path: Path) -> None:
    log = tmp_path / "elastic.log"
    res = subprocess.run(
        [sys.executable, "-m", "lifecycle.workflows.elastic_worker", "resume-program", "gpu-[001-002]"],
        env={"PATH": "/usr/bin:/bin", "RACKLIFE_ELASTIC_LOG": str(log)}, capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert res.returncode == 2 and "needs RACKLIFE_KUBECONFIG" in res.stderr
    assert not log.exists()


def test_program_refuses_node_names_that_are_not_names(tmp_path: Path) -> None:
    log = tmp_path / "elastic.log"
    env = {"PATH": "/usr/bin:/bin", "RACKLIFE_ELASTIC_LOG": str(log), "RACKLIFE_KUBECONFIG": "/k",
           ROLE_CMD_ENV: "true"}
    res = subprocess.run(
        [sys.executable, "-m", "lifecycle.workflows.elastic_worker", "suspend-program", "gpu-001,../etc"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert res.returncode == 2 and "not valid node names: '../etc'" in res.stderr
    assert not log.exists()  # nothing was started, not even gpu-001
