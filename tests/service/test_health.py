"""The automatic repair path on the store: Xids read from nodes in service, recorded once, repaired under the breaker.

The kernel logs are the lab's fake ``dmesg`` (Xid 79 on a lost GPU, Xid 48/64
on a failed row remap) and a real capture (gpud's, Xid 48, 63 and 94); the
store is SQLite with the example inventory, eight training nodes in service at
``max_repair_percent`` 25. What would start a run is recorded instead (the
repair run itself is the lab test's: tests/e2e/test_repair_lab.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lifecycle.lab.faults import Fault
from lifecycle.lab.gputools.cli import run
from lifecycle.lab.node import SimNode
from lifecycle.model.states import Actor
from lifecycle.service import health as watch
from lifecycle.store import health, leases, repair_breaker
from lifecycle.workflows.repair import RepairSettings
from tests.lab.conftest import make_node
from tests.workflows.test_repair_breaker import TRAINING, _fleet

__all__ = ["make_node"]

MakeNode = Callable[..., SimNode]
Started = list[tuple[str, RepairSettings, str]]


def _cfg(tmp_path: Path) -> watch.HealthSettings:
    return watch.HealthSettings(ssh_config=str(tmp_path / "ssh_config"), work_dir=str(tmp_path / "work"))


def _logs(make_node: MakeNode, fixtures_dir: Path, faults: dict[str, str]) -> Callable[[str], str]:
    """A reader: each node's kernel log as the lab's dmesg prints it for its fault ("gpud": the real capture)."""
    dirs = {n: make_node(fault=Fault(f, 3), name=n).dir for n, f in faults.items() if f != "gpud"}

    def read(node: str) -> str:
        if faults.get(node) == "gpud":
            return (fixtures_dir / "xid" / "gpud_tail_dmesg.0.log").read_text()
        if node == TRAINING[7]:
            raise OSError("ssh: connect to host r01-n08 port 22: Connection refused")
        return run("dmesg", ["--time-format", "iso"], dirs.get(node) or make_node(name=node).dir)[0]

    return read


def _starter(started: Started) -> Callable[[str, RepairSettings, str], None]:
    return lambda node, settings, run_id: started.append((node, settings, run_id))


def test_xids_are_recorded_once_and_repaired_within_the_breaker(tmp_path: Path, repo_dir: Path,
                                                                make_node: MakeNode, fixtures_dir: Path) -> None:
    store = _fleet(f"sqlite:///{tmp_path / 'rl.sqlite'}", repo_dir, percent=25)
    try:
        faults = {TRAINING[0]: "xid79", TRAINING[1]: "xid79", TRAINING[2]: "ecc", TRAINING[3]: "gpud"}
        read = _logs(make_node, fixtures_dir, faults)
        started: Started = []
        first = watch.health_pass(store, _cfg(tmp_path), _starter(started), read)
        # Every node in service was read; the one whose SSH refused is said, not taken for a clean log.
        assert first.read == 7 and set(first.unreadable) == {TRAINING[7]}
        assert "Connection refused" in first.unreadable[TRAINING[7]]
        assert sorted((e.node, e.xid, e.action) for e in first.new) == sorted([
            (TRAINING[0], 79, "reboot"), (TRAINING[1], 79, "reboot"), (TRAINING[2], 48, "reset-gpu"),
            (TRAINING[2], 64, "reset-gpu"), (TRAINING[3], 48, "reset-gpu"), (TRAINING[3], 63, "none"),
            *[(TRAINING[3], 94, "none")] * 9])
        # Two of eight at 25%: the first two nodes start; the others are held back by the open breaker.
        assert [(n, s.action.value, s.automatic) for n, s, _r in started] == [
            (TRAINING[0], "reboot", True), (TRAINING[1], "reboot", True)]
        assert all(s.event is not None and "Xid 79" in s.reason and s.accept.level for _n, s, _r in started)
        assert {n: le.run_id for n, le in leases.holders(store).items()} == {n: r for n, _s, r in started}
        assert set(first.held) == {TRAINING[2], TRAINING[3]}
        assert first.held[TRAINING[2]] == ("pool training: 2 of 8 nodes under repair (r01-n01, r01-n02); "
                                           "max_repair_percent 25 allows 2 at once; breaker open: no new "
                                           "automatic repair")
        by = {(e.node, e.xid): e for e in health.events(store, limit=100)}
        assert by[(TRAINING[0], 79)].outcome == "started" and by[(TRAINING[0], 79)].run_id == started[0][2]
        assert by[(TRAINING[2], 48)].outcome == by[(TRAINING[2], 64)].outcome == "breaker_open"
        assert by[(TRAINING[3], 94)].outcome == "none" and by[(TRAINING[3], 63)].outcome == "none"
        assert health.counts(store)[("training", "breaker_open")] == 3
        assert [b.open for b in repair_breaker.counts(store) if b.pool == "training"] == [True]

        # The same logs again: nothing new is recorded; the breaker is still open, nothing starts, and the
        # holds are not said again.
        again = watch.health_pass(store, _cfg(tmp_path), _starter(started), read)
        assert again.new == [] and len(started) == 2 and again.held == {}
        assert set(again.still_held) == {TRAINING[2], TRAINING[3]}

        # One repair ends (its lease goes): the oldest held-back node is repaired, its two Xids in one run.
        leases.release(store, started[0][2])
        store.transition(TRAINING[0], "drain", Actor.WORKFLOW, "repair")  # out of service: not read, not counted
        third = watch.health_pass(store, _cfg(tmp_path), _starter(started), read)
        assert [(n, s.action.value) for n, s, _r in started[2:]] == [(TRAINING[2], "reset-gpu")]
        by = {(e.node, e.xid): e for e in health.events(store, limit=100)}
        assert by[(TRAINING[2], 48)].outcome == "started" and by[(TRAINING[2], 64)].outcome == "covered"
        assert list(third.held) == [TRAINING[3]] and "under repair (r01-n02, r01-n03)" in third.held[TRAINING[3]]
    finally:
        store.close()


def test_a_reset_the_sku_cannot_do_becomes_a_reboot_and_a_node_out_of_service_is_left(
        tmp_path: Path, repo_dir: Path, make_node: MakeNode, fixtures_dir: Path) -> None:
    import sqlalchemy as sa

    from lifecycle.store import db

    store = _fleet(f"sqlite:///{tmp_path / 'rl.sqlite'}", repo_dir, percent=50)
    try:
        with store.engine.begin() as conn:  # a GB200 tray, whose GPUs share the rack's NVLink domain
            row = conn.execute(sa.select(db.nodes.c.spec).where(db.nodes.c.name == TRAINING[0])).one()
            conn.execute(sa.update(db.nodes).where(db.nodes.c.name == TRAINING[0])
                         .values(spec=row.spec.replace('"h100-sxm-8"', '"gb200-nvl72-tray"')))
        assert store.get(TRAINING[0]).node().sku == "gb200-nvl72-tray"
        read = _logs(make_node, fixtures_dir, {TRAINING[0]: "ecc", TRAINING[1]: "xid79"})
        started: Started = []
        watch.collect(store, read)
        store.transition(TRAINING[1], "quarantine", Actor.OPERATOR, "hands-on")
        done = watch.act(store, _cfg(tmp_path), _starter(started), watch.Pass())
        [(node, settings, _run)] = started
        assert node == TRAINING[0] and settings.action.value == "reboot"
        assert "rebooted instead" in settings.reason and "NVLink domain" in settings.reason
        assert "automatic repairs are for nodes in service" in done.held[TRAINING[1]]
        assert {e.outcome for e in health.events(store, TRAINING[1])} == {"refused"}
    finally:
        store.close()


def test_a_log_that_is_not_a_kernel_log_is_unreadable_not_clean(tmp_path: Path, repo_dir: Path) -> None:
    store = _fleet(f"sqlite:///{tmp_path / 'rl.sqlite'}", repo_dir, percent=25)
    try:
        done = watch.collect(store, lambda node: "" if node == TRAINING[0] else "dmesg: read kernel buffer failed\n")
        assert done.read == 0 and len(done.unreadable) == 8
        assert "empty" in done.unreadable[TRAINING[0]] and "could not be read" in done.unreadable[TRAINING[1]]
    finally:
        store.close()

