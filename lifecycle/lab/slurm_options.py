"""The lab cluster's configuration: what a test asks for (``LabSlurmConfig``) and the render options it gives.

The lab renders Slurm's files with production's renderer; only the site
settings differ on one machine (every path under the lab's root, a port per
daemon and node, plugins that need no cgroups, short timeouts, loopback
only). They are worked out here, apart from the daemons' lifecycle
(``lifecycle.lab.slurm``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lifecycle.drivers.slurm.render import RenderOptions, Topology
from lifecycle.lab import slurm_daemons
from lifecycle.model.inventory import Inventory


@dataclass(frozen=True)
class LabSlurmConfig:
    """One lab cluster: its inventory, root directory and which of production's daemons it runs."""

    inventory: Inventory
    root: Path
    topology: Topology = "tree"
    rest: bool = False
    start_nodes: Sequence[str] | None = None
    """Nodes whose slurmd starts at once; default: all but lendable ones (those start lent)."""
    extra: tuple[str, ...] = ()
    suspend_time_s: int = 3600
    resume_timeout_s: int = 60
    ready_timeout_s: float = 90.0  # each daemon: slurmdbd with MariaDB took over 30 s on a loaded CI machine
    power_programs: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    """(ResumeProgram argv, SuspendProgram argv) to call instead of the lab's own slurmd power
    mechanics — racklife's elastic-capacity programs; slurmctld appends the hostlist."""
    power_env: tuple[tuple[str, str], ...] = ()
    """Environment for those programs (store, kubeconfig, role-switch hook)."""
    accounting: bool = False
    """Run MariaDB and slurmdbd (``lifecycle.lab.slurm_accounting``) and account jobs there."""
    backup_controller: bool = False
    """A second slurmctld (``lifecycle.lab.slurm_daemons``) that takes over when the primary dies."""
    configless: bool = False
    """slurmd fetch their configuration from slurmctld (``--conf-server``) instead of reading slurm.conf."""
    slurmctld_timeout_s: int | None = None
    """How long the backup waits for a silent primary (default: 10 s with a backup, else 30 s)."""


DAEMON_PORTS = ("slurmctld", "slurmdbd")
"""Keys of ``LabSlurm.ports`` that are daemons, not nodes."""


def render_options(config: LabSlurmConfig, r: Path, ports: dict[str, int]) -> RenderOptions:
    """The lab's site settings: paths under its root, its ports, plugins that need no cgroups."""
    backup = config.backup_controller
    timeout = config.slurmctld_timeout_s or (10 if backup else 30)
    return RenderOptions(
        controller=slurm_daemons.PRIMARY_HOST if backup else "localhost",
        controller_addr="127.0.0.1",
        backup_controller=slurm_daemons.BACKUP_HOST if backup else None,
        backup_controller_addr=slurm_daemons.ADDRS[slurm_daemons.BACKUP_HOST] if backup else None,
        slurmctld_port=ports["slurmctld"],
        slurmctld_timeout_s=timeout,
        state_dir=str(r / "state"),
        spool_dir=str(r / "spool"),
        log_dir=str(r / "log"),
        run_dir=str(r / "run"),
        slurm_user="root",
        topology=config.topology,
        gpu_device_dir=str(r / "dev"),
        gres_autodetect="off",
        select_parameters="CR_Core",
        proctrack="proctrack/linuxproc",
        task_plugin="task/none",
        jobacct_gather="jobacct_gather/none",
        auth_socket=str(r / "munge" / "munge.socket"),
        jwt_key=str(r / "etc" / "jwt.key"),
        resume_program=str(r / "bin" / "resume"),
        suspend_program=str(r / "bin" / "suspend"),
        suspend_time_s=config.suspend_time_s,
        suspend_timeout_s=5,
        resume_timeout_s=config.resume_timeout_s,
        power_save_interval_s=1,
        node_ports={n: p for n, p in ports.items() if n not in DAEMON_PORTS},
        config_overrides=True,
        configless=config.configless,
        accounting=config.accounting,
        dbd_host="localhost",
        dbd_addr="127.0.0.1",
        dbd_port=ports.get("slurmdbd"),
        # slurmdbd too listens on loopback only.
        dbd_extra=("CommunicationParameters=NoInAddrAny",),
        extra=(
            "SlurmdTimeout=30", "MessageTimeout=5",
            # slurmctld and each slurmd listen on loopback only, not on every address of the host.
            "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny", *config.extra
        ),
    )
