"""A password in the inventory is refused at validation, with its line and field, never echoed.

Probes from issue 14: a BMC URL carrying a password in its userinfo or query
string, and a node label holding one, were accepted and stored.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "site-h100-2rack.yaml"
SECRET = "Hunter2-pw-0xC0FFEE"

PROBES = {
    "bmc-url-userinfo": ("      address: https://10.10.1.11\n",
                         f"      address: https://admin:{SECRET}@10.10.1.11\n", "bmc.address"),
    "bmc-url-query": ("      address: https://10.10.1.11\n",
                      f"      address: https://10.10.1.11/redfish/v1?password={SECRET}\n", "bmc.address"),
    "node-label": ("    image: debian12-gpu\n",
                   f"    image: debian12-gpu\n    labels:\n      racklife.io/bmc-password: {SECRET}\n", "labels"),
    "node-label-token": ("    image: debian12-gpu\n",
                         f"    image: debian12-gpu\n    labels:\n      api_token: {SECRET}\n", "labels"),
}


def racklife(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RACKLIFE_DB"} | {"RACKLIFE_HOME": str(home)}
    exe = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
    return subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_a_password_in_the_inventory_is_refused(tmp_path: Path, probe: str) -> None:
    old, new, field = PROBES[probe]
    text = EXAMPLE.read_text()
    assert old in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(old, new, 1))
    res = racklife(tmp_path, "inventory", "validate", str(bad), "--json")
    assert res.returncode == 2, res.stdout + res.stderr
    problems = json.loads(res.stdout)["problems"]
    assert any(p["field"].startswith("nodes[0]") and field in p["field"] and p["line"] for p in problems), problems
    imported = racklife(tmp_path, "inventory", "import", str(bad))
    assert imported.returncode == 2
    for out in (res.stdout, res.stderr, imported.stdout, imported.stderr):
        assert SECRET not in out
    assert not (tmp_path / "racklife.sqlite").exists()


def test_an_ordinary_label_is_still_accepted(tmp_path: Path) -> None:
    ok = tmp_path / "ok.yaml"
    ok.write_text(EXAMPLE.read_text().replace("    image: debian12-gpu\n",
                                              "    image: debian12-gpu\n    labels:\n      racklife.io/row: a\n", 1))
    assert racklife(tmp_path, "inventory", "validate", str(ok)).returncode == 0
