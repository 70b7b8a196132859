"""apply's limits: --max-unavailable as N or P%, and bad input refused before anything runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lifecycle.model.limits import Unavailable


@pytest.mark.parametrize(("text", "size", "allowed"), [("1", 10, 1), ("3", 2, 3), ("25%", 8, 2), ("10%", 4, 1),
                                                        ("100%", 7, 7)])
def test_max_unavailable_of_a_pool(text: str, size: int, allowed: int) -> None:
    assert Unavailable.parse(text).of(size) == allowed


@pytest.mark.parametrize("text", ["0", "-1", "0%", "101%", "x", "1.5", ""])
def test_bad_max_unavailable_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--max-unavailable"):
        Unavailable.parse(text)


def _racklife(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    env = os.environ | {"RACKLIFE_HOME": str(tmp_path), "RACKLIFE_DB": f"sqlite:///{tmp_path / 'rl.sqlite'}"}
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=120)


def test_apply_bad_input_exits_2_and_creates_nothing(tmp_path: Path, repo_dir: Path) -> None:
    inv = repo_dir / "examples" / "site-h100-2rack.yaml"
    for args in (["apply", str(inv), "--max-unavailable", "0%", "--yes"],
                 ["apply", str(inv), "--level", "extreme", "--yes"],
                 ["apply", str(tmp_path / "missing.yaml"), "--yes"]):
        res = _racklife(tmp_path, *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "rl.sqlite").exists()


def test_a_node_already_out_of_service_takes_no_room(tmp_path: Path, repo_dir: Path) -> None:
    """Decommissioning a drained node does not take another one out: max_unavailable leaves it through (it
    skipped every node of a pool once the pool had as many out as allowed, the node itself among them)."""
    from lifecycle.model.inventory import load_inventory
    from lifecycle.planner.apply import ApplySettings, _within_limits
    from lifecycle.planner.plan import Action
    from lifecycle.store import Store

    store = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    try:
        inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
        store.import_inventory(inv)
        names = [n.name for n in inv.nodes if n.pool == "training"][:3]  # enrolled: none in service
        skipped: dict[str, str] = {}
        assert _within_limits(store, Action.DECOMMISSION, names, ApplySettings("t"), skipped) == names
        assert skipped == {}
    finally:
        store.close()


def test_decommissioned_nodes_are_not_counted_as_unavailable(tmp_path: Path, repo_dir: Path) -> None:
    """Before, each decommissioned node of a pool counted as one out of service for ever: with max
    unavailable 1, one decommission stopped every later leave and decommission in that pool."""
    import sqlalchemy as sa

    from lifecycle.model.inventory import load_inventory
    from lifecycle.model.states import Actor, State
    from lifecycle.planner.apply import ApplySettings, _within_limits
    from lifecycle.planner.plan import Action
    from lifecycle.store import Store, db

    store = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    try:
        inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
        store.import_inventory(inv)
        members = [r.name for r in store.nodes(pool=inv.nodes[0].pool)]
        with store.engine.begin() as conn:  # every other node of the pool in service
            conn.execute(sa.update(db.nodes).where(db.nodes.c.name.in_(members[1:]))
                         .values(state=State.IN_SERVICE.value))
        store.transition(members[0], "decommission", Actor.OPERATOR, "retired", run_id="d-1")
        store.transition(members[0], "decommission_done", Actor.WORKFLOW, "retired", run_id="d-1")
        skipped: dict[str, str] = {}
        chosen = _within_limits(store, Action.DECOMMISSION, [members[1]], ApplySettings("t"), skipped)
        assert chosen == [members[1]] and skipped == {}
    finally:
        store.close()


@pytest.mark.parametrize("action", ["update-driver", "set-bios"])
def test_a_driver_or_bios_wave_takes_no_more_than_max_unavailable(tmp_path: Path, repo_dir: Path,
                                                                  action: str) -> None:
    """Each is a node cycle (leave, change, re-test, rejoin): it takes a serving node out, like a firmware update."""
    import sqlalchemy as sa

    from lifecycle.model.inventory import load_inventory
    from lifecycle.model.states import State
    from lifecycle.planner.apply import ApplySettings, _within_limits
    from lifecycle.planner.plan import Action
    from lifecycle.store import Store, db

    store = Store(f"sqlite:///{tmp_path / 'rl.sqlite'}")
    try:
        inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
        store.import_inventory(inv)
        members = sorted(r.name for r in store.nodes(pool="training"))
        with store.engine.begin() as conn:
            conn.execute(sa.update(db.nodes).where(db.nodes.c.name.in_(members)).values(state=State.IN_SERVICE.value))
        skipped: dict[str, str] = {}
        chosen = _within_limits(store, Action(action), members[:3], ApplySettings("t"), skipped)
        assert chosen == members[:1] and sorted(skipped) == members[1:3]
        assert "max unavailable 1" in skipped[members[1]]
    finally:
        store.close()


@pytest.mark.parametrize(("pool", "seen_as", "out"), [
    ("training", "drained", True), ("training", "down", True), ("training", "serving", False),
    ("training", "drained-before", False),  # seen before racklife's last move of the node: that move is newer
    ("inference", "not-ready", True), ("inference", "cordoned", True), ("inference", "serving", False),
    ("inference", "drained", False),  # Slurm's view of a Kubernetes node: a node swapped to inference stays drained
])
def test_a_node_its_scheduler_has_out_counts_as_out_though_the_store_says_in_service(
        tmp_path: Path, repo_dir: Path, monkeypatch: pytest.MonkeyPatch, pool: str, seen_as: str,
        out: bool) -> None:
    """An admin's drain, a node down in Slurm or not Ready in Kubernetes takes capacity away as surely as
    racklife's own leave: apply counted only the store's states, and took a second node out beside it.
    The rolling upgrade's count of each pool before a batch (``pools_now``) is the same count."""
    from datetime import UTC, datetime, timedelta

    import sqlalchemy as sa

    from lifecycle.model.inventory import load_inventory
    from lifecycle.model.states import State
    from lifecycle.planner import observe
    from lifecycle.planner.apply import ApplySettings, _within_limits
    from lifecycle.planner.observed import KubeSeen, Observation, SlurmSeen
    from lifecycle.planner.plan import Action
    from lifecycle.store import Store, db
    from lifecycle.workflows import upgrade

    url = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    monkeypatch.setenv("RACKLIFE_DB", url)  # the upgrade's step reads the shared store of this URL
    store = Store(url)
    try:
        inv = load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml")
        store.import_inventory(inv)
        members = sorted(r.name for r in store.nodes(pool=pool))
        with store.engine.begin() as conn:
            conn.execute(sa.update(db.nodes).where(db.nodes.c.name.in_(members)).values(state=State.IN_SERVICE.value))
        at = datetime.now(UTC)
        slurm, kube = None, None
        if pool == "training":
            slurm = SlurmSeen("idle", False, False, "", "none", None, None, ("train",))
        else:
            kube = KubeSeen(True, True, False, "none", None, {"racklife.io/pool": "inference"}, ())
        if seen_as.startswith("drained"):
            slurm = SlurmSeen("idle+DRAIN", True, False, "admin: bad DIMM", "other", None, "alice", ("train",))
        if seen_as == "drained-before":
            at = store.get(members[0]).state_since - timedelta(minutes=1)
        elif seen_as == "down":
            slurm = SlurmSeen("down+NOT_RESPONDING", False, True, "Not responding", "other", None, "slurm",
                              ("train",))
        elif seen_as in ("not-ready", "cordoned"):
            kube = KubeSeen(True, seen_as == "cordoned", seen_as == "cordoned", "other", None, {}, ())
        observe.save(store, [Observation(members[0], at, State.IN_SERVICE, pool, slurm=slurm, kube=kube)])
        skipped: dict[str, str] = {}
        chosen = _within_limits(store, Action.LEAVE, [members[1]], ApplySettings("t"), skipped)
        if out:
            assert chosen == [] and f"1 of {len(members)} out of service already" in skipped[members[1]]
        else:
            assert chosen == [members[1]] and skipped == {}
        now = upgrade.pools_now([pool])[pool]
        assert (now["size"], now["in_service"]) == (len(members), len(members) - out)
    finally:
        store.close()
