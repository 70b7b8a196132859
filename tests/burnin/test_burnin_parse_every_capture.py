"""``racklife burnin parse`` reads every capture we hold, shared and new, without a traceback.

Each file gives exit 0 with the parsed document, or exit 2 with ``{"verdict": "error",
"reason": …}``; nothing else. The expected outcome of the captures that exercise a
failure path is pinned, so a parser that starts accepting them again is caught.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lifecycle.cli.burnin import app

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures"
NEW = Path(__file__).resolve().parents[1] / "fixtures"
KIND_BY_DIR = {"dcgm": "dcgm", "nccl": "nccl", "infiniband": "ibstat", "xid": "xid", "nvidia-smi": "nvidia-smi"}


def _captures() -> list[tuple[str, Path]]:
    out = []
    for root in (SHARED, NEW):
        for d, kind in KIND_BY_DIR.items():
            out += [(kind, p) for p in sorted((root / d).rglob("*")) if p.is_file()]
    return out


CAPTURES = _captures()
MUST_ERROR = {
    "l40s-x4_dcgmi-diag-r2_dcgm-4.2.3_pcie-FAIL_issue253_CUT-IN-SOURCE.txt": "no closing border",
    "gpud_ibstat.39.0.a100.failed.ibpanic.exit-255.0_FAIL.txt": "ibpanic:",
    "CONSTRUCTED_h100x8_nvidia-smi_device-handle-error-gpu3.txt": "Unable to determine the device handle",
    "DCGMIIncorrectresults.json": "test_categories",
    "h800x8_dcgmi-nvlink-s_llm-action.txt": "Diagnostic | Result",
    "nvsentinel_xiderrorsmapping.csv": "not a kernel log",
}


def test_every_kind_has_captures() -> None:
    assert {k for k, _ in CAPTURES} == set(KIND_BY_DIR.values()) and len(CAPTURES) >= 25


@pytest.mark.parametrize(("kind", "path"), CAPTURES, ids=[p.name for _, p in CAPTURES])
def test_burnin_parse_reads_the_capture(kind: str, path: Path) -> None:
    res = CliRunner().invoke(app, ["parse", kind, str(path), "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.stdout
    doc = json.loads(res.stdout)
    assert res.exit_code in (0, 2)
    if res.exit_code == 2:
        assert doc["verdict"] == "error" and doc["reason"]
    if path.name in MUST_ERROR:
        assert res.exit_code == 2 and MUST_ERROR[path.name] in doc["reason"]
