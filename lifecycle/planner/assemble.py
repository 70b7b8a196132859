"""The planner's runner, assembled one way for every front end of apply.

``racklife apply`` (in the command, or inside the service's durable run,
``lifecycle/planner/durable.py``, whose request carries these settings), the
Pulumi providers and the Terraform provider each carry a plan out through a
:class:`WorkflowRunner`. Each used to build its acceptance settings (a work
directory per run), its boot server settings, its Kubernetes settings and
its site hooks by hand, and so they could drift apart.
:class:`RunnerSettings` is what they know (command options, configuration
keys or environment variables), and :func:`workflow_runner` turns it into
the runner, the same way for all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lifecycle.model.vocab import Level

if TYPE_CHECKING:  # the workflow engine is imported only when a runner is built (a provider starts fast)
    from lifecycle.planner.runner import BootServerFactory, WorkflowRunner
    from lifecycle.store import Store
    from lifecycle.workflows.accept import AcceptSettings
    from lifecycle.workflows.boot_run import BootSettings
    from lifecycle.workflows.controller import Starter
    from lifecycle.workflows.kube_pool import KubeSettings


@dataclass(frozen=True)
class RunnerSettings:
    """How apply's runs reach the nodes: what `racklife apply` takes as options."""

    operator: str  # who applies: every acceptance record and history line names them
    home: Path  # racklife's home: acceptance work directories go under HOME/acceptance/RUN
    images_dir: Path
    level: Level = "quick"  # acceptance level of a node's first acceptance
    ssh_config: Path = Path.home() / ".ssh" / "config"
    profile: str | None = None
    burnin_python: str = "python3"
    max_in_flight: int = 8
    boot_listen: str = "127.0.0.1:8069"
    boot_url: str | None = None
    boot_timeout_s: float = 600.0
    bios_timeout_s: float = 900.0  # a set-bios step: the reboot and the live Bios reading the values back
    image: str | None = None  # the image a new node is provisioned with; None: its inventory entry's, or minimal
    kubeconfig: str | None = None
    role_cmd: tuple[str, ...] = ()  # the site's role-switch hook (role swaps)
    slurm_conf_cmd: tuple[str, ...] = ()  # the site's slurm.conf hook (decommissions)
    actor: str | None = None  # how the runs name who asked (default: operator)

    def accept_settings(self, run_id: str) -> AcceptSettings:
        from lifecycle.workflows.accept import AcceptSettings

        work = self.home / "acceptance" / run_id
        return AcceptSettings(level=self.level, work_dir=str(work), report_dir=str(work / "reports"),
                              operator=self.operator, ssh_config=str(self.ssh_config.resolve()), profile=self.profile,
                              burnin_python=self.burnin_python, max_in_flight=self.max_in_flight)

    def boot(self) -> BootSettings:
        from lifecycle.workflows.boot_run import BootSettings

        return BootSettings(self.images_dir, self.boot_listen, self.boot_url, self.boot_timeout_s, self.image)

    def kube(self) -> KubeSettings | None:
        from lifecycle.workflows.kube_pool import KubeSettings

        return KubeSettings(str(Path(self.kubeconfig).resolve())) if self.kubeconfig else None


def workflow_runner(ctl: Starter, store: Store, s: RunnerSettings, move_to: Mapping[str, str],
                    say: Callable[[str], None] = lambda _m: None,
                    boot_server: BootServerFactory | None = None,
                    new_id: Callable[[str], str] | None = None) -> WorkflowRunner:
    """The runner for one apply: ``move_to`` is each node's pool in the inventory applied (for role swaps);
    ``boot_server``: how the embedded boot server is run (default: one per provisioning or reimage wave);
    ``new_id``: how a run's id is chosen (a journaled step inside a durable apply; default: at random)."""
    from lifecycle.planner.runner import WorkflowRunner

    runner = WorkflowRunner(ctl, s.accept_settings, store, s.boot(), s.max_in_flight, kube=s.kube(),
                            move_to=dict(move_to), role_cmd=s.role_cmd, slurm_conf_cmd=s.slurm_conf_cmd,
                            operator=s.actor or s.operator, say=say, bios_timeout_s=s.bios_timeout_s)
    if boot_server is not None:
        runner.boot_server = boot_server
    if new_id is not None:
        runner.new_id = new_id
    return runner
