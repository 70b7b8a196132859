"""The durable apply's argument carries one ``RunnerSettings``, the runner's one assembly.

``racklife apply`` hands the service a request whose runner settings are
what the command would assemble its own runner from
(``assemble.workflow_runner``), so the run in the service and the command
build the same runner: the same acceptance work directories, boot server,
kubeconfig and hooks. The request survives DBOS's serializer (a recovered run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dbos._serialization import DefaultSerializer

from lifecycle.model.limits import Unavailable
from lifecycle.planner.apply import ApplySettings
from lifecycle.planner.assemble import RunnerSettings, workflow_runner
from lifecycle.planner.durable import ApplyRequest, InRun
from lifecycle.store import Store
from lifecycle.workflows.boot_run import BootSettings
from lifecycle.workflows.kube_pool import KubeSettings

HOME = Path("/var/lib/racklife")
CFG = ApplySettings("ops", 4, Unavailable.parse("25%"))
RUNNER = RunnerSettings(operator="ops", home=HOME, images_dir=HOME / "images", level="standard",
                        ssh_config=Path("/etc/racklife/ssh_config"), profile="h100", burnin_python="/opt/py",
                        max_in_flight=4, boot_listen="10.0.0.1:8069", boot_url="http://boot:8069",
                        boot_timeout_s=300.0, image="debian12-gpu", kubeconfig="/etc/racklife/kubeconfig",
                        role_cmd=("/usr/lib/racklife/role",), slurm_conf_cmd=("/usr/lib/racklife/conf",))


def _recorded(req: Any) -> Any:
    ser = DefaultSerializer()
    return ser.deserialize(ser.serialize({"args": (req,), "kwargs": {}}))["args"][0]


def test_a_request_replays_with_the_runner_settings_it_was_started_with() -> None:
    req = ApplyRequest("nodes: []", "site.yaml", ("node-01",), CFG, RUNNER)
    assert _recorded(req) == req


def test_the_recovered_request_assembles_the_runner_the_command_would(tmp_path: Path) -> None:
    got = _recorded(ApplyRequest("nodes: []", "site.yaml", ("node-01",), CFG, RUNNER))
    store = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    try:
        runner = workflow_runner(InRun(), store, got.runner, {})
    finally:
        store.close()
    acc = runner.accept_settings("accept-1")
    assert (acc.work_dir, acc.operator, acc.level, acc.ssh_config, acc.profile) == (
        str(HOME / "acceptance" / "accept-1"), "ops", "standard", "/etc/racklife/ssh_config", "h100")
    assert runner.boot == BootSettings(HOME / "images", "10.0.0.1:8069", "http://boot:8069", 300.0, "debian12-gpu")
    assert runner.kube == KubeSettings("/etc/racklife/kubeconfig")
    assert (runner.role_cmd, runner.slurm_conf_cmd, runner.operator) == (
        ("/usr/lib/racklife/role",), ("/usr/lib/racklife/conf",), "ops")
