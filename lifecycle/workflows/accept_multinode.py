"""The multi-node stage of an acceptance: who is paired, through which launcher, and what ran.

Nodes of a Slurm pool run all_reduce across nodes as srun jobs (waiting briefly for nodes
still coming up, never for drained ones); nodes of any other pool run it as mpirun started
over the SSH fan-out; both go through :func:`acceptance.multinode.run_stage` (planned rounds,
then isolation). Every node not tested is listed with the reason, for the judge's coverage
rule (:mod:`acceptance.coverage`). Split from :mod:`lifecycle.workflows.accept`, whose step
``multi_node`` calls :func:`run_multi_node`.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance.fanout import Target, Transport
from acceptance.isolation import Isolation
from acceptance.judge import GroupRun, judge_group
from acceptance.multinode import LaunchRecord, Srun, SshMpirun, run_stage
from acceptance.topology import Placement
from burnin import profiles as burnin_profiles
from lifecycle.drivers.slurm.driver import SlurmDriver
from lifecycle.model.inventory import Pool
from lifecycle.store import NodeRecord

if TYPE_CHECKING:
    from lifecycle.workflows.accept import AcceptSettings

NCCL_LOOKUP_S = 30.0  # seconds for `command -v all_reduce_perf` on a node


def _placement(rec: NodeRecord) -> Placement:
    """The node's fabric labels; without them the rack is its leaf and one spine serves all."""
    topo = rec.spec.get("topology") or {}
    return Placement(rec.name, topo.get("leaf") or rec.rack, topo.get("spine") or "spine", topo.get("nvlink_block"))


def schedulable(nodes: list[str], wait_s: float, driver: SlurmDriver | None = None,
                sleep: Callable[[float], None] = time.sleep,
                clock: Callable[[], float] = time.monotonic) -> tuple[list[str], dict[str, str]]:
    """Nodes Slurm can run an exclusive job on now (waiting up to ``wait_s`` for ones that are
    still coming up, never for drained ones), and why not the rest."""
    from lifecycle.drivers.errors import DriverError
    from lifecycle.drivers.slurm.runner import CommandRunner

    driver = driver or SlurmDriver(CommandRunner(env=_slurm_env()))
    deadline = clock() + wait_s
    while True:
        try:
            found = {n.name: n for n in driver.nodes(nodes)}
        except (DriverError, ValueError) as exc:
            return [], {n: f"Slurm does not know the node: {exc}" for n in nodes}
        why: dict[str, str] = {}
        waiting = False
        for n in nodes:
            st = found[n].state
            if st.drain:  # stays so until someone resumes it: not worth waiting for
                why[n] = f"drained in Slurm ({found[n].owner.describe()}): jobs cannot run there"
            elif not st.responding or st.powered_down or st.base != "idle":
                why[n] = f"not idle in Slurm (state {st}): an exclusive job would wait for it"
                waiting = True
        if not waiting or clock() >= deadline:
            return [n for n in nodes if n not in why], why
        sleep(1.0)


def _slurm_env() -> dict[str, str]:
    """The controller's environment for Slurm clients, without a slurmrestd token: srun authenticates
    with munge, and a SLURM_JWT in its environment makes step launch fail."""
    return {k: v for k, v in os.environ.items() if k != "SLURM_JWT"}


def _nccl_binary(cfg: AcceptSettings, node: str, found: str | None = None) -> str:
    """The configured all_reduce_perf, else the one found during burn-in, else the one on ``node``'s
    PATH (asked over SSH), else the bare name."""
    if cfg.nccl_binary:
        return cfg.nccl_binary
    return found or ask_nccl_binary(cfg, node) or "all_reduce_perf"


def ask_nccl_binary(cfg: AcceptSettings, node: str) -> str | None:
    """The absolute path of all_reduce_perf on ``node``'s PATH, or None."""
    from acceptance.ssh_fabric import FabricSSH

    ssh = FabricSSH(Path(cfg.ssh_config))
    try:
        run = ssh.run(Target(node, node), ["sh", "-c", "command -v all_reduce_perf"], NCCL_LOOKUP_S)
    finally:
        ssh.close()
    path = run.stdout.decode("utf-8", "replace").strip() if run.exit_code == 0 else ""
    return path if path.startswith("/") and "\n" not in path else None


def _slow(limits: burnin_profiles.Profile, run: GroupRun) -> bool:
    """The isolation oracle: a run that missed the profile's multi-node floor, or gave no result."""
    return judge_group(run, limits).verdict != "pass"


def run_multi_node(recs: dict[str, NodeRecord], profiles: dict[str, str], passed: dict[str, bool],
                   pools: dict[str, Pool], cfg: AcceptSettings, run_id: str,
                   binaries: dict[str, str] | None = None, ssh: Transport | None = None) -> dict[str, Any]:
    """Pair the nodes that passed burn-in: per profile and Slurm partition through srun, per profile
    and pool over SSH (mpirun) for the other pools; every node left out says why.

    ``binaries``: all_reduce_perf per profile as found during burn-in (else asked of a node now).
    ``ssh``: the transport for the mpirun launches (default: fabric with the run's ssh_config)."""
    left: dict[str, str] = {}
    by_key: dict[tuple[str, str], list[str]] = {}
    by_pool: dict[tuple[str, str], list[str]] = {}
    for n, rec in recs.items():
        pool = pools[n]
        if not passed[n]:
            left[n] = "failed single-node burn-in: not paired"
        elif pool.scheduler == "slurm" and pool.partition:
            by_key.setdefault((profiles[n], pool.partition), []).append(n)
        else:
            by_pool.setdefault((profiles[n], rec.pool), []).append(n)
    stages = []
    for (profile, partition), members in sorted(by_key.items()):
        ready, waiting = schedulable(sorted(members), cfg.slurm_ready_s)
        left.update(waiting)
        if len(ready) < 2:
            left.update({n: "no second schedulable node of its profile in its partition" for n in ready})
            continue
        limits = burnin_profiles.load(profile)
        binary = _nccl_binary(cfg, ready[0], (binaries or {}).get(profile))
        srun = Srun(job_name=f"racklife-{run_id}", partition=partition, binary=binary,
                    env=_slurm_env(), time_limit_min=max(1, int(cfg.multi_node_timeout_s // 60)))
        stage = run_stage([_placement(recs[n]) for n in ready],
                          functools.partial(srun.run_round, timeout_s=cfg.multi_node_timeout_s),
                          functools.partial(_slow, limits), profile=profile,
                          max_parallel=cfg.multi_node_max_parallel)
        stages.append({"profile": profile, "partition": partition, "launcher": "srun", "nccl_binary": srun.binary,
                       **stage.to_dict()})
    if by_pool:
        stages += _ssh_stages(recs, by_pool, left, cfg, binaries or {}, ssh)
    return {"stages": stages, "left_out": left}


def _ssh_stages(recs: dict[str, NodeRecord], by_pool: dict[tuple[str, str], list[str]], left: dict[str, str],
                cfg: AcceptSettings, binaries: dict[str, str], ssh: Transport | None) -> list[dict[str, Any]]:
    """The multi-node rounds of the pools no Slurm schedules: mpirun over SSH, per profile and pool."""
    from acceptance.ssh_fabric import FabricSSH

    transport = ssh or FabricSSH(Path(cfg.ssh_config))
    stages = []
    try:
        for (profile, pool), members in sorted(by_pool.items()):
            if len(members) < 2:
                left.update({n: f"no second node of profile {profile} in pool '{pool}' to run with"
                             for n in members})
                continue
            limits = burnin_profiles.load(profile)
            ready = sorted(members)
            launcher = SshMpirun(transport, binary=_nccl_binary(cfg, ready[0], binaries.get(profile)))
            stage = run_stage([_placement(recs[n]) for n in ready],
                              functools.partial(launcher.run_round, timeout_s=cfg.multi_node_timeout_s),
                              functools.partial(_slow, limits), profile=profile,
                              max_parallel=cfg.multi_node_max_parallel)
            stages.append({"profile": profile, "pool": pool, "launcher": "mpirun", "nccl_binary": launcher.binary,
                           **stage.to_dict()})
    finally:
        if ssh is None:
            transport.close()  # type: ignore[attr-defined]
    return stages


def multi_node_runs(mn: dict[str, Any]) -> tuple[list[GroupRun], dict[str, str], Isolation | None]:
    runs: list[GroupRun] = []
    culprits: dict[str, str] = {}
    isolation = None
    for st in mn.get("stages", []):
        runs += [LaunchRecord.from_dict(x).group_run(st["profile"]) for x in st["launches"]]
        if st.get("isolation"):
            iso = Isolation.from_dict(st["isolation"])
            culprits.update(iso.culprits())
            isolation = isolation or iso
    return runs, culprits, isolation
