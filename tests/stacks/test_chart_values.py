"""Every Helm value the stack overrides is a key of its chart, with the chart's type (a typo would be ignored
by Helm and the chart's default would silently apply)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lifecycle.drivers.kube.manifests import gpu_operator
from stacks.racklife_pulumi import kube

CHARTS = Path(kube.__file__).parent / "charts"


def _unknown(override: dict[str, Any], chart: dict[str, Any], path: str = "") -> list[str]:
    out = []
    for key, value in override.items():
        where = f"{path}{key}"
        if key not in chart:
            out.append(f"{where}: not a value of the chart")
        elif isinstance(value, dict):
            out += _unknown(value, chart[key], f"{where}.") if isinstance(chart[key], dict) else \
                [f"{where}: the chart's value is not a mapping"]
        elif type(value) is not type(chart[key]):
            out.append(f"{where}: {type(value).__name__}, the chart's is {type(chart[key]).__name__}")
    return out


@pytest.mark.parametrize(("file", "override"), [
    ("gpu-operator-v26.7.0.values.yaml", gpu_operator.CHART_VALUES),
    ("slurm-operator-v1.2.1.values.yaml", kube.SLURM_OPERATOR_VALUES),
])
def test_overrides_are_keys_of_their_chart(file: str, override: dict[str, Any]) -> None:
    assert _unknown(override, yaml.safe_load((CHARTS / file).read_text())) == []


def test_a_typo_is_caught() -> None:
    chart = yaml.safe_load((CHARTS / "gpu-operator-v26.7.0.values.yaml").read_text())
    assert _unknown({"clusterPolicy": {"deployCr": False}}, chart) == ["clusterPolicy.deployCr: not a value of the chart"]
    assert _unknown({"clusterPolicy": {"deployCR": "false"}}, chart) == ["clusterPolicy.deployCR: str, the chart's is bool"]
