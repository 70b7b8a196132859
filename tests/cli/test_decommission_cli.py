"""`racklife decommission` refuses bad input with one line and exit 2, and fails closed without a scheduler.

No lab: the store is the example inventory imported (Slurm pools, no Slurm
running here). A dry run cannot read Slurm, so the foreign-drain and
running-jobs checks fail closed (exit 5); an erase asked of an IPMI BMC is
refused by name; a real run is refused the same way and records nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from lifecycle.store import Store
from tests.cli.test_roleswap_cli import EXAMPLE, racklife


def _history(home: Path, node: str) -> list[str]:
    store = Store(f"sqlite:///{home / 'racklife.sqlite'}")
    try:
        return [t.event for t in store.history(node)]
    finally:
        store.close()


def test_bad_input_is_exit_2(tmp_path: Path) -> None:
    assert racklife(tmp_path, "inventory", "import", str(EXAMPLE)).returncode == 0
    for args, needle in [(["decommission", "nope"], "nope"),
                         (["decommission", "r01-n01", "--kubeconfig", str(tmp_path / "missing")], "no such file")]:
        res = racklife(tmp_path, *args)
        assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr, (args, res.stderr)


def test_without_a_readable_scheduler_it_is_refused_and_records_nothing(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    ipmi = doc["nodes"][1]
    ipmi["bmc"] = {**ipmi["bmc"], "driver": "ipmi", "address": "10.10.1.99:623"}
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(doc))
    assert racklife(tmp_path, "inventory", "import", str(inv)).returncode == 0, "import"
    name = ipmi["name"]
    res = racklife(tmp_path, "decommission", name, "--erase", "--dry-run", "--json", "--ssh-config",
                   str(tmp_path / "no-ssh-config"))
    assert res.returncode == 5, res.stdout + res.stderr
    [plan] = json.loads(res.stdout)["nodes"]
    checks = {c["name"]: c for c in plan["checks"]}
    assert checks["state"]["ok"] and not checks["no jobs or pods running"]["ok"]
    assert checks["no jobs or pods running"]["detail"].startswith("could not be read")
    assert not checks["BMC can erase"]["ok"] and "the ipmi driver offers" in checks["BMC can erase"]["detail"]
    assert any("secure erase of every drive" in line for line in plan["plan"])
    # No SSH config to reach a maintenance boot (nor a built image): the erase could not be read back.
    assert not checks["erase can be read back"]["ok"] and "no SSH config" in checks["erase can be read back"]["detail"]
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host *\n")
    res = racklife(tmp_path, "decommission", name, "--erase", "--force", "--json", "--ssh-config", str(ssh_config),
                   "--images", str(tmp_path / "no-images"))
    assert res.returncode == 5, res.stdout + res.stderr
    [out] = json.loads(res.stdout)
    assert out["refused"] and "BMC can erase" in out["reason"] and out["state"] == "enrolled"
    assert "erase can be read back: no maintenance boot: no built images" in out["reason"], out["reason"]
    assert _history(tmp_path, name) == ["enroll"]
