"""Observed state: ask every source what a node looks like now, and keep what it said.

``racklife refresh`` and (later) the planner read the world only through
here. Each source is asked once per refresh for the whole fleet where it can
answer in bulk (Slurm, Kubernetes) and per node, in a bounded pool of threads,
where it cannot (BMCs). Every read is idempotent, so a read that fails with a
``TemporaryError`` (an IPMI session that timed out under load, a BMC that said
busy) is tried again under the project's one retry policy
(``lifecycle/workflows/retry.py``: ``RACKLIFE_RETRY_*``, the peer's delay or
the capped backoff, the process's injected sleep); a permanent error, or the
last temporary one, leaves an error on the node's observation, never a guess:
one transient timeout must not block a node for a whole wave. Nothing here
changes anything.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from lifecycle.drivers.bmc.base import BiosInterface, BmcDriver, require
from lifecycle.drivers.errors import DriverError
from lifecycle.drivers.kube.types import KubeNode
from lifecycle.drivers.slurm.types import SlurmJob, SlurmNode
from lifecycle.model.inventory import BmcSpec, Inventory, Pool
from lifecycle.model.states import State
from lifecycle.planner.observed import (
    AcceptanceSeen,
    BmcSeen,
    BootSeen,
    Desired,
    KubeSeen,
    Observation,
    SlurmSeen,
    Source,
)
from lifecycle.store import AcceptanceRecord, NodeRecord, Store
from lifecycle.store import observations as stored
from lifecycle.workflows.retry import retrier

_T = TypeVar("_T")
_R = TypeVar("_R")

BMC_WORKERS = 32
UNANSWERED_HOLD_S = 300.0
"""For this long after a source failed through the whole retry policy, it is read once, not retried: a
dead slurmctld costs each later observation one read (9 s of scontrol), not the policy's four and its
backoff (50 s), and one dead BMC no longer holds every wave of an apply for its retries. An answer ends it."""


class _Unanswered:
    """The sources (``slurm``, ``kubernetes``, ``bmc:NODE``) of this process whose last read failed, and when."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._since: dict[str, float] = {}
        self._lock = threading.Lock()
        self.clock = clock

    def read(self, key: str, fn: Callable[..., _R], *args: Any) -> _R:
        """``fn(*args)`` under the retry policy, or once while ``key`` is held (it failed in the last
        ``UNANSWERED_HOLD_S``: the hold runs from the failure of a whole policy, so one comes each period)."""
        with self._lock:
            since = self._since.get(key)
        held = since is not None and self.clock() - since < UNANSWERED_HOLD_S
        try:
            out = fn(*args) if held else retrier().call(fn, *args)
        except Exception:
            if not held:
                with self._lock:
                    self._since[key] = self.clock()
            raise
        with self._lock:
            self._since.pop(key, None)
        return out

    def failing(self) -> list[str]:
        with self._lock:
            return sorted(self._since)

    def clear(self) -> None:
        with self._lock:
            self._since.clear()


UNANSWERED = _Unanswered()


class SlurmReader(Protocol):
    def nodes(self, names: Sequence[str] | None = None) -> list[SlurmNode]: ...

    def jobs(self) -> list[SlurmJob]: ...


class KubeReader(Protocol):
    def nodes(self, labels: Mapping[str, str] | None = None) -> list[KubeNode]: ...

    def close(self) -> None: ...


@dataclass
class Sources:
    """How to reach each source; a factory that raises says why the source cannot be read."""

    bmc: Callable[[str, BmcSpec], BmcDriver]  # (node, its BMC): the node names the failed calls it records
    slurm: Callable[[], SlurmReader]
    kube: Callable[[], KubeReader]
    firmware: bool = True  # read every node's firmware versions (a BMC inventory: many requests per node)
    """False: only the nodes that have a firmware baseline (the plan needs their versions)."""


def default_sources(env: Mapping[str, str] | None = None, firmware: bool = True,
                    store: Store | None = None) -> Sources:
    """The real drivers: BMCs from the inventory, Slurm from SLURM_CONF, Kubernetes from a kubeconfig.

    With ``store``, every failed BMC call is recorded there (``workflows/bmc_calls.py``) for the metrics.
    """
    env = dict(os.environ if env is None else env)

    def bmc(node: str, spec: BmcSpec) -> BmcDriver:
        from lifecycle.drivers.bmc.factory import driver_for  # vendor SDKs only when a BMC is asked
        from lifecycle.workflows.bmc_calls import StoreObserver

        return driver_for(spec, observer=StoreObserver(store, node) if store is not None else None)

    def slurm() -> SlurmReader:
        from lifecycle.drivers.slurm.driver import SlurmDriver
        from lifecycle.drivers.slurm.runner import CommandRunner

        return SlurmDriver(CommandRunner())

    def kube() -> KubeReader:
        from lifecycle.drivers.kube.api import KubeApiDriver

        path = env.get("RACKLIFE_KUBECONFIG") or env.get("KUBECONFIG")
        if not path:
            raise RuntimeError("no kubeconfig (set RACKLIFE_KUBECONFIG or KUBECONFIG)")
        return KubeApiDriver.from_kubeconfig(Path(path))

    return Sources(bmc, slurm, kube, firmware)


def desired(inv: Inventory | None, rec: NodeRecord, store: Store) -> Desired:
    """The inventory's wishes for the node (the stored spec when no inventory is given)."""
    return desired_all(inv, [rec], store)[rec.name]


def desired_all(inv: Inventory | None, records: Sequence[NodeRecord], store: Store) -> dict[str, Desired]:
    """:func:`desired` of every record, each pool read from the store once (not once per node)."""
    listed = {n.name: n for n in inv.nodes} if inv is not None else {}
    versions = {i.name: i.version for i in inv.images} if inv is not None else {}
    stored_pools: dict[str, Pool] = {}
    out: dict[str, Desired] = {}
    for rec in records:
        node = listed.get(rec.name)
        if inv is not None and node is not None:
            pool = inv.pool(node.pool)
        else:
            node = rec.node()
            if rec.pool not in stored_pools:
                stored_pools[rec.pool] = store.pool(rec.pool)
            pool = stored_pools[rec.pool]
        image = node.image
        version = versions.get(image) if inv is not None and image is not None else None
        out[rec.name] = Desired(node, pool, image, version)
    return out


def read_bmc(sources: Sources, node: str, spec: BmcSpec, firmware_too: bool = False,
             bios: Collection[str] = ()) -> BmcSeen:
    """One whole BMC read on a fresh driver (a retry never reuses a session that just timed out);
    ``bios``: the BIOS attributes to read (through the BMC's BIOS interface; none: the Bios is not read)."""
    driver = sources.bmc(node, spec)
    try:
        power = driver.power_state().value
        read = sources.firmware or firmware_too
        parts = driver.inventory().firmware if read else []
        live = require(driver, BiosInterface).bios_attributes() if bios else {}
        return BmcSeen(power, {f.name: f.version for f in parts},
                       tuple((f.name, (f.id or "").rstrip("/").rsplit("/", 1)[-1], f.version) for f in parts),
                       {k: v for k in bios if isinstance(v := live.get(k), (bool, int, str))} if bios else None)
    finally:
        driver.close()


def _bmc(sources: Sources, rec: NodeRecord, firmware_too: bool, bios: Collection[str]) -> BmcSeen | str:
    try:
        return UNANSWERED.read(f"bmc:{rec.name}", read_bmc, sources, rec.name, rec.node().bmc, firmware_too, bios)
    except (DriverError, ValueError, OSError) as exc:
        return str(exc)


def read_slurm(sources: Sources) -> tuple[dict[str, SlurmNode], dict[str, list[str]]]:
    reader = sources.slurm()
    nodes = {n.name: n for n in reader.nodes()}
    jobs: dict[str, list[str]] = {}
    for j in reader.jobs():
        if j.active:
            for host in j.nodes:
                jobs.setdefault(host, []).append(j.job_id)
    return nodes, jobs


def _slurm(sources: Sources) -> tuple[dict[str, SlurmNode], dict[str, list[str]]] | str:
    try:
        return UNANSWERED.read("slurm", read_slurm, sources)
    except (DriverError, ValueError, OSError, RuntimeError) as exc:
        return str(exc)


def read_kube(sources: Sources) -> dict[str, KubeNode]:
    reader = sources.kube()
    try:
        return {n.name: n for n in reader.nodes()}
    finally:
        reader.close()


def _kube(sources: Sources) -> dict[str, KubeNode] | str:
    try:
        return UNANSWERED.read("kubernetes", read_kube, sources)
    except (DriverError, ValueError, OSError, RuntimeError) as exc:
        return str(exc)


def _slurm_seen(n: SlurmNode, jobs: Sequence[str]) -> SlurmSeen:
    owner = n.owner
    return SlurmSeen(str(n.state), n.state.drain, n.state.base == "down", n.reason, owner.kind,
                     owner.run_id, owner.user, tuple(n.partitions), tuple(jobs))


def _kube_seen(n: KubeNode) -> KubeSeen:
    owner = n.owner
    taints = tuple(f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in n.taints)
    return KubeSeen(True, n.ready, n.unschedulable, owner.kind, owner.run_id, dict(n.labels), taints)


def _acceptance(newest: AcceptanceRecord | None, built: datetime | None, now: datetime) -> AcceptanceSeen:
    if newest is None:
        return AcceptanceSeen(False)
    newer = built is None or newest.created_at >= built
    return AcceptanceSeen(True, newest.passed, now < newest.expires_at, newer, newest.id, newest.expires_at,
                          stored.reported_driver(newest))


def _boot(last: tuple[dict[str, Any], datetime] | None) -> BootSeen:
    if last is None:
        return BootSeen(None, None, None)
    report, at = last
    image, version = report.get("image"), report.get("image_version")
    return BootSeen(str(image) if image else None, str(version) if version else None, at)


class _Reads(Generic[_T, _R]):
    """``fn`` over ``items`` in ``workers`` daemon threads, results in order (``results`` waits for them).

    Not a ThreadPoolExecutor: its workers are joined when the interpreter exits, so a Ctrl-C of
    `racklife apply` waited out a hanging BMC's reads and retries (54 s measured) before the
    process could end. A read is idempotent and changes nothing, so leaving one behind is safe.
    """

    def __init__(self, fn: Callable[[_T], _R], items: Sequence[_T], workers: int) -> None:
        self._fn, self._items = fn, list(items)
        self._done: list[tuple[bool, Any]] = [(False, None)] * len(self._items)
        self._next = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work, name=f"bmc-read-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                i, self._next = self._next, self._next + 1
            if i >= len(self._items):
                return
            try:
                self._done[i] = (True, self._fn(self._items[i]))
            except BaseException as exc:  # raised in the caller's thread, as pool.map did
                self._done[i] = (False, exc)

    def results(self) -> list[_R]:
        for t in self._threads:
            t.join()  # a ^C interrupts the wait; the daemon threads do not hold the process
        out: list[_R] = []
        for ok, value in self._done:
            if not ok:
                raise value
            out.append(value)
        return out


def observe(store: Store, records: Sequence[NodeRecord], sources: Sources,
            pools: Mapping[str, str], clock: Callable[[], datetime] = lambda: datetime.now(UTC),
            firmware_for: Collection[str] = (), bios_for: Mapping[str, Collection[str]] | None = None,
            ) -> list[Observation]:
    """Observe ``records``; ``pools`` maps each node to its pool's scheduler (slurm, kubernetes, none);
    ``firmware_for``: nodes whose firmware versions are read even when ``sources.firmware`` is off;
    ``bios_for``: node -> the BIOS attributes read from its BMC (those its inventory entry names)."""
    bios_for = bios_for or {}
    now = clock()
    schedulers = {pools[r.name] for r in records}
    names = [r.name for r in records]
    reads = _Reads(lambda r: _bmc(sources, r, r.name in firmware_for, sorted(bios_for.get(r.name, ()))), records,
                   min(BMC_WORKERS, max(1, len(records))))  # every BMC read starts now
    slurm = _slurm(sources) if "slurm" in schedulers else ({}, {})
    kube = _kube(sources) if "kubernetes" in schedulers else {}
    boots = stored.last_boots(store, names)
    accepted = stored.newest_acceptance(store, names)
    built = stored.last_provisioned(store, names)
    bmcs = reads.results()
    out = []
    for rec, bmc in zip(records, bmcs, strict=True):
        o = Observation(rec.name, now, rec.state, rec.pool, boot=_boot(boots.get(rec.name)),
                        acceptance=_acceptance(accepted.get(rec.name), built.get(rec.name), now))
        errors: dict[Source, str] = {}
        if isinstance(bmc, str):
            errors[Source.BMC] = bmc
        else:
            o = replace(o, bmc=bmc)
        if pools[rec.name] == "slurm":
            if isinstance(slurm, str):
                errors[Source.SLURM] = slurm
            elif rec.name in slurm[0]:
                o = replace(o, slurm=_slurm_seen(slurm[0][rec.name], slurm[1].get(rec.name, [])))
            elif rec.state is not State.DECOMMISSIONED:  # a decommission takes the node out of slurm.conf
                errors[Source.SLURM] = "Slurm does not know the node"
        if pools[rec.name] == "kubernetes":
            if isinstance(kube, str):
                errors[Source.KUBE] = kube
            else:
                o = replace(o, kube=_kube_seen(kube[rec.name]) if rec.name in kube else KubeSeen(False))
        out.append(replace(o, errors=errors))
    return out


def out_of_scheduler(o: Observation, scheduler: str) -> bool:
    """The observation shows the node not serving ``scheduler``: drained or down in Slurm, not Ready or
    cordoned in Kubernetes (by anyone: an admin's drain takes capacity away as surely as racklife's own).
    The other scheduler's view does not count (a node swapped to inference stays drained in Slurm)."""
    if scheduler == "slurm":
        return o.slurm is not None and (o.slurm.drained or o.slurm.down)
    if scheduler == "kubernetes":
        return o.kube is not None and (not o.kube.registered or not o.kube.ready or o.kube.cordoned)
    return False


def save(store: Store, seen: Sequence[Observation]) -> None:
    """Store each observation, with the pool whose scheduler it shows the node out of (``out_of_scheduler``
    for the scheduler of the pool it was observed in): every max_unavailable count reads that column."""
    schedulers = {p: store.pool(p).scheduler for p in {o.pool for o in seen}}
    stored.save(store, [(o.node, o.at, o.to_json(), o.pool if out_of_scheduler(o, schedulers[o.pool]) else None)
                        for o in seen])


def load(store: Store, nodes: Sequence[str] | None = None) -> dict[str, Observation]:
    return {n: Observation.from_json(doc) for n, (_at, doc) in stored.load(store, nodes).items()}


def as_table(seen: Sequence[Observation]) -> list[dict[str, Any]]:
    return [o.to_json() for o in seen]
