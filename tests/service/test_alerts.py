"""Alert rules and the Grafana dashboard: valid for Debian's promtool, tested per alert, on metrics we export."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from lifecycle.drivers.slurm.queue import PendingJob, parse_pending
from lifecycle.service import metrics
from lifecycle.service.fleet import TRANSITIONAL
from tests.service import scripted

NAME = re.compile(r"\bracklife_[a-z_]+\b")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: apt-get install prometheus (scripts/bootstrap.sh installs it)")
    return path


class CapturedQueue:
    """Slurm's queue as the lab's real squeue printed it (tests/fixtures/slurm), in the scripted store's partition."""

    def __init__(self, repo_dir: Path) -> None:
        text = (repo_dir / "tests" / "fixtures" / "slurm" / "lab_squeue-pending-22.05.8.txt").read_text()
        self.jobs = [dataclasses.replace(j, partitions=("train",)) for j in parse_pending(text)]

    def pending(self) -> list[PendingJob]:
        return self.jobs


@pytest.fixture(scope="module")
def exported(repo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Every sample name a scrape of racklife can carry, from the families the collector yields."""
    store = scripted.build(repo_dir, f"sqlite:///{tmp_path_factory.mktemp('alerts') / 'rl.sqlite'}")
    try:
        text = metrics.render(store, queue=CapturedQueue(repo_dir))
    finally:
        store.close()
    names = {fam.name + suffix for fam in text_string_to_metric_families(text) for suffix in SUFFIXES[fam.type]}
    assert len(names) >= len(metrics.ALL_METRICS)
    return names


@pytest.fixture(scope="module")
def rules(repo_dir: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load((repo_dir / "docs" / "prometheus" / "alerts.yaml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


@pytest.fixture(scope="module")
def dashboard_exprs(repo_dir: Path) -> list[str]:
    dash = json.loads((repo_dir / "docs" / "grafana" / "racklife-fleet.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_promtool_checks_the_rules(repo_dir: Path) -> None:
    done = subprocess.run([promtool(), "check", "rules", "alerts.yaml"], cwd=repo_dir / "docs" / "prometheus",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_unit_tests_pass(repo_dir: Path) -> None:
    done = subprocess.run([promtool(), "test", "rules", "alerts.test.yaml"], cwd=repo_dir / "docs" / "prometheus",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_firing_and_a_silent_test(repo_dir: Path, rules: list[dict[str, Any]]) -> None:
    tests = yaml.safe_load((repo_dir / "docs" / "prometheus" / "alerts.test.yaml").read_text())["tests"]
    fires: set[str] = set()
    silent: set[str] = set()
    for t in tests:
        for case in t["alert_rule_test"]:
            (fires if case["exp_alerts"] else silent).add(case["alertname"])
    names = {r["alert"] for r in rules}
    assert names == fires == silent


def test_rules_and_dashboard_query_only_exported_metrics(rules: list[dict[str, Any]], dashboard_exprs: list[str],
                                                         exported: set[str]) -> None:
    used = {n for e in [r["expr"] for r in rules] + dashboard_exprs for n in NAME.findall(e)}
    assert used, "no racklife metric in any query"
    assert used <= exported, sorted(used - exported)
    # every metric we export is on the dashboard
    shown = {n.removesuffix("_total").removesuffix("_bucket") for n in used}
    assert set(metrics.ALL_METRICS) <= shown, sorted(set(metrics.ALL_METRICS) - shown)


def test_the_stuck_alert_and_panel_name_every_transitional_state(rules: list[dict[str, Any]],
                                                                 dashboard_exprs: list[str]) -> None:
    stuck = next(r for r in rules if r["alert"] == "RacklifeNodeStuckTransitional")
    for expr in (stuck["expr"], next(e for e in dashboard_exprs if "racklife_node_state_seconds" in e)):
        match = re.search(r'state=~"([^"]+)"', expr)
        assert match is not None
        assert set(match.group(1).split("|")) == {s.value for s in TRANSITIONAL}
