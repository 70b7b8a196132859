"""Metrics computed from the store at scrape time: scraped over HTTP, parsed with prometheus_client's parser."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lifecycle.model.states import RULES, State
from lifecycle.service import metrics
from lifecycle.service.fleet import CAPACITY, TRANSITIONAL
from lifecycle.store import Store
from tests.service import scripted

RACKLIFE = [sys.executable, "-c", "from lifecycle.cli import main; main()"]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> tuple[Samples, dict[str, str]]:
    samples: Samples = {}
    types: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, types


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:  # loopback only
        assert resp.status == 200
        return str(resp.read().decode())


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'rl.sqlite'}"


@pytest.fixture
def store(repo_dir: Path, url: str) -> Iterator[Store]:
    s = scripted.build(repo_dir, url)
    yield s
    s.close()


def test_every_state_has_a_capacity_row() -> None:
    assert set(CAPACITY) == set(State)
    # every state the machine can leave without a person: each source of a workflow-only "_done" event
    assert {r.source for r in RULES if r.event.endswith("_done")} | {State.BURNING_IN} == TRANSITIONAL
    assert State.IN_SERVICE not in TRANSITIONAL


def test_scraped_over_http_gives_the_store_values(store: Store) -> None:
    server = metrics.serve(store, "127.0.0.1", 0, clock=lambda: scripted.NOW)
    try:
        assert server.host == "127.0.0.1"
        samples, types = parse(scrape(f"http://127.0.0.1:{server.port}/metrics"))
    finally:
        server.close()
    wrong = {k: (v, samples.get(k)) for k, v in scripted.EXPECTED.items() if samples.get(k) != pytest.approx(v)}
    assert not wrong, wrong
    assert types["racklife_acceptance_records"] == "counter"
    assert types["racklife_workflow_duration_seconds"] == "histogram"
    # Only passing records count for the age; a node that never passed has none.
    assert not [k for k in samples if k[0] == "racklife_acceptance_last_pass_age_seconds"
                and ("node", "r01-n02") in k[1]]
    exported = {name for name, _ in samples} | set(types)
    assert {n for n in metrics.METRICS} <= {n.removesuffix("_total") for n in exported}


def test_scrape_reads_the_store_each_time(store: Store) -> None:
    server = metrics.serve(store, "127.0.0.1", 0, clock=lambda: scripted.NOW)
    key = ("racklife_nodes", frozenset({"pool": "training", "state": "quarantined"}.items()))
    try:
        before, _ = parse(scrape(f"http://127.0.0.1:{server.port}/"))
        store.transition("r01-n05", "inspect", scripted.Actor.OPERATOR, "look")
        store.transition("r01-n05", "inspect_done", scripted.Actor.WORKFLOW, "looked")
        scripted._walk(store, "r01-n05", ["provision", "provision_done", "burn_in", "quarantine"])
        after, _ = parse(scrape(f"http://127.0.0.1:{server.port}/"))
    finally:
        server.close()
    assert (before[key], after[key]) == (1, 2)


def test_the_repair_breaker_opens_with_a_repair_under_way(store: Store) -> None:
    """The breaker's own count (lifecycle/store/repair_breaker.py), read at the scrape: a lease opens it."""
    from lifecycle.store import repair_breaker

    server = metrics.serve(store, "127.0.0.1", 0, clock=lambda: scripted.NOW)

    def breaker() -> tuple[float, float, float]:
        samples, _ = parse(scrape(f"http://127.0.0.1:{server.port}/metrics"))
        return tuple(samples[(f"racklife_repair_breaker_{k}", frozenset({("pool", "training")}))]
                     for k in ("open", "repairs", "limit"))  # type: ignore[return-value]

    try:
        assert breaker() == (0, 0, 1)
        took = repair_breaker.take(store, "r01-n01", "run-repair-1", automatic=False)
        assert took.ok
        assert breaker() == (1, 1, 1)
        assert not repair_breaker.take(store, "r01-n04", "run-repair-2", automatic=True).ok  # what "open" means
        with store.engine.begin() as conn:
            conn.execute(scripted.sa.delete(scripted.dbm.leases).where(scripted.dbm.leases.c.run_id == "run-repair-1"))
        assert breaker() == (0, 0, 1)
    finally:
        server.close()


def test_xid_events_are_counted_by_pool_and_what_became_of_them(store: Store) -> None:
    from lifecycle.store import health

    made = health.record(store, [
        health.SeenXid("r01-n01", 79, "0000:17:00", f"[{i}.0]", f"NVRM: Xid (PCI:0000:17:00): 79, line {i}",
                       "gpu_fallen_off", "reboot") for i in range(3)])
    health.set_outcome(store, made[0].id, health.Outcome.STARTED.value, "repair run", run_id="run-repair")
    health.set_outcome(store, made[1].id, health.Outcome.COVERED.value, "rides along")
    samples, _ = parse(metrics.render(store, clock=lambda: scripted.NOW))
    got = {dict(labels)["outcome"]: v for (name, labels), v in samples.items()
           if name == "racklife_health_events" and ("pool", "training") in labels}
    assert got == {o.value: {"started": 1, "covered": 1, "pending": 1}.get(o.value, 0) for o in health.Outcome}
    assert samples[("racklife_health_events", frozenset({"pool": "inference", "outcome": "pending"}.items()))] == 0


def test_an_unreadable_store_fails_the_scrape(tmp_path: Path, store: Store) -> None:
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE racklife_observations")
    server = metrics.serve(store, "127.0.0.1", 0)
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            scrape(f"http://127.0.0.1:{server.port}/metrics")
    finally:
        server.close()
    err.value.close()
    assert err.value.code == 500  # Prometheus sees up == 0, not an empty fleet


def test_workflow_runs_from_dbos_status_table(store: Store, url: str, repo_dir: Path) -> None:
    env = os.environ | {"RACKLIFE_DB": url}
    done = subprocess.run([sys.executable, "-m", "tests.service.runs_app", url],
                          cwd=repo_dir, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    samples, _ = parse(metrics.render(store))

    def value(name: str, **labels: str) -> float | None:
        return samples.get((name, frozenset(labels.items())))

    assert value("racklife_workflow_runs", workflow="metrics_ok", status="SUCCESS") == 1
    assert value("racklife_workflow_runs", workflow="metrics_bad", status="ERROR") == 1
    assert value("racklife_workflow_duration_seconds_count", workflow="metrics_ok", status="SUCCESS") == 1
    assert value("racklife_workflow_duration_seconds_bucket", workflow="metrics_bad", status="ERROR",
                 le="+Inf") == 1
    assert value("racklife_workflow_duration_seconds_bucket", workflow="metrics_ok", status="SUCCESS",
                 le="60.0") == 1  # a run of two steps takes well under a minute


def test_textfile_is_written_atomically_and_parses(store: Store, url: str, tmp_path: Path) -> None:
    out = tmp_path / "prom" / "racklife.prom"
    out.parent.mkdir()
    env = os.environ | {"RACKLIFE_DB": url}
    done = subprocess.run([*RACKLIFE, "metrics", "textfile", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in out.parent.iterdir()] == ["racklife.prom"]  # no temp file left
    samples, _ = parse(out.read_text())
    assert samples[("racklife_nodes", frozenset({"pool": "training", "state": "lent"}.items()))] == 1


@pytest.mark.parametrize("name", ["racklife.txt", "missing/racklife.prom"])
def test_textfile_refuses_a_bad_path(url: str, tmp_path: Path, name: str) -> None:
    done = subprocess.run([*RACKLIFE, "metrics", "textfile", str(tmp_path / name)],
                          env=os.environ | {"RACKLIFE_DB": url}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "error:" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / name).exists()


def test_metrics_serve_command_binds_loopback_and_stops_on_sigterm(store: Store, url: str) -> None:
    proc = subprocess.Popen([*RACKLIFE, "metrics", "serve", "--port", "0"],
                            env=os.environ | {"RACKLIFE_DB": url}, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("serving metrics on http://127.0.0.1:"), line
        samples, _ = parse(scrape(line.split()[-1]))
        assert samples[("racklife_nodes", frozenset({"pool": "inference", "state": "in_service"}.items()))] == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
