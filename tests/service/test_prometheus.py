"""A real Prometheus (Debian's 2.42) scrapes `racklife metrics serve` on loopback; PromQL returns the store's values."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lifecycle.service.fleet import CAPACITY, Capacity, read_fleet
from tests.service import scripted

RACKLIFE = [sys.executable, "-c", "from lifecycle.cli import main; main()"]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:  # loopback only
        doc = json.loads(resp.read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def wait_for(base: str, expr: str, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = query(base, expr)
            if result:
                return result
        except OSError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise AssertionError(f"Prometheus returned nothing for {expr} within {timeout} s")
        time.sleep(0.5)


@pytest.fixture
def stack(repo_dir: Path, tmp_path: Path, free_port: Any) -> Iterator[tuple[str, str]]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus not found: apt-get install prometheus (scripts/bootstrap.sh installs it)")
    url = f"sqlite:///{tmp_path / 'rl.sqlite'}"
    store = scripted.build(repo_dir, url)
    # `racklife metrics serve` runs on the real clock, not the script's NOW: provisioning for 3 h from now, so
    # the stuck-node alert (6 h) stays inactive whatever the time of day the test runs at.
    scripted._since(store, "r01-n03", datetime.now(UTC) - timedelta(hours=3))
    store.close()
    metrics_port, prom_port = free_port(), free_port()
    env = os.environ | {"RACKLIFE_DB": url}
    serve = subprocess.Popen([*RACKLIFE, "metrics", "serve", "--port", str(metrics_port)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rules = tmp_path / "alerts.yaml"
    shutil.copy(repo_dir / "docs" / "prometheus" / "alerts.yaml", rules)
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "racklife", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}],
    }))
    log = (tmp_path / "prometheus.log").open("wb")
    prom = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=log, stderr=log)
    try:
        yield f"http://127.0.0.1:{prom_port}", url
    finally:
        _stop(prom)
        _stop(serve)
        log.close()


def test_promql_returns_what_the_store_has(stack: tuple[str, str], repo_dir: Path) -> None:
    base, url = stack
    up = wait_for(base, 'up{job="racklife"} == 1')
    assert len(up) == 1
    wait_for(base, "racklife_nodes")

    from lifecycle.store import Store

    store = Store(url)
    try:
        fleet = read_fleet(store)
    finally:
        store.close()
    expected: dict[tuple[str, str], float] = {}
    for n in fleet.nodes:
        key = (n.pool, CAPACITY[n.state].value)
        expected[key] = expected.get(key, 0) + n.gpus
    got = {(r["metric"]["pool"], r["metric"]["status"]): float(r["value"][1])
           for r in query(base, "sum by (pool, status) (racklife_pool_gpus)")}
    assert {k: v for k, v in got.items() if v} == expected
    shown = subprocess.run([*RACKLIFE, "status", "--json"], env=os.environ | {"RACKLIFE_DB": url},
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    reported = {(p["name"], status): float(gpus) for p in json.loads(shown.stdout)["pools"]
                for status, gpus in p["capacity"].items()}
    assert reported == got  # racklife status --json and PromQL on the scrape agree, zeros included
    assert got[("training", Capacity.IN_SERVICE.value)] == 8 and got[("training", Capacity.LENT.value)] == 8

    lent = query(base, 'racklife_nodes{pool="training",state="lent"}')
    assert [float(r["value"][1]) for r in lent] == [1.0]
    drains = query(base, 'racklife_slurm_drains{owner="other"} > 0')
    assert [(r["metric"]["pool"], float(r["value"][1])) for r in drains] == [("training", 1.0)]
    failed = query(base, 'racklife_acceptance_records_total{outcome="fail"}')
    assert [float(r["value"][1]) for r in failed] == [1.0]


def test_the_dashboard_queries_and_the_rules_run_on_real_prometheus(stack: tuple[str, str], repo_dir: Path) -> None:
    base, _url = stack
    wait_for(base, "racklife_nodes")
    dash = json.loads((repo_dir / "docs" / "grafana" / "racklife-fleet.json").read_text())
    for panel in dash["panels"]:
        for target in panel["targets"]:
            query(base, target["expr"].replace("$pool", ".*"))  # a query Prometheus cannot parse is a 400
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=10) as resp:
            groups = json.loads(resp.read())["data"]["groups"]
        rules = {r["name"]: r for g in groups for r in g["rules"]}
        # the scripted store has a foreign drain: the drift alert goes pending (it fires after 30 min);
        # training has 1 node in service and a floor of 2: the floor alert goes pending (10 min)
        if rules and all(r["health"] == "ok" for r in rules.values()) and \
                rules["RacklifeDriftDetected"]["state"] == "pending" and \
                rules["RacklifePoolBelowFloor"]["state"] == "pending":
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.5)
    assert len(rules) == 8
    assert rules["RacklifeBmcCallErrors"]["state"] == "inactive"  # the scripted store has no failed BMC call
    assert rules["RacklifeRepairBreakerOpen"]["state"] == "inactive"  # no repair under way in the scripted store
    assert rules["RacklifeMetricsDown"]["state"] == "inactive"
    assert rules["RacklifeNodeStuckTransitional"]["state"] == "inactive"  # provisioning for minutes, not hours
