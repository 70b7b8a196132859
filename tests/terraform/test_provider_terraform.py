"""The provider under the real `terraform` binary, without a lab: install, init, schema, refused configuration."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.terraform.tfhelp import RACKLIFE, Workdir

MODULE = """
terraform {
  required_providers {
    racklife = { source = "racklife.io/racklife/racklife", version = "~> 0.1" }
  }
}
provider "racklife" {
  inventory = %s
}
resource "racklife_pool" "training" {
  name      = "training"
  scheduler = "slurm"
  partition = "training"
}
"""


def test_init_finds_the_provider_in_the_mirror_and_reads_its_schema(tmp_path: Path) -> None:
    w = Workdir(tmp_path)
    assert w.installed["address"] == "racklife.io/racklife/racklife"
    assert Path(w.installed["executable"]).is_file()
    w.write("main.tf", MODULE % '"/nonexistent.yaml"')
    init = w.tf("init", "-no-color")
    assert init.returncode == 0, init.stdout + init.stderr
    assert "racklife.io/racklife/racklife" in (w.module / ".terraform.lock.hcl").read_text()
    done = w.tf("providers", "schema", "-json")
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)["provider_schemas"]["racklife.io/racklife/racklife"]
    provider = schema["provider"]["block"]["attributes"]
    assert provider["bmc_credentials"]["sensitive"] is True and provider["bmc_credentials"]["type"] == ["map",
                                                                                                        "string"]
    node = schema["resource_schemas"]["racklife_node"]
    pool = schema["resource_schemas"]["racklife_pool"]["block"]["attributes"]
    assert node["version"] == 1 and schema["resource_schemas"]["racklife_pool"]["version"] == 1
    assert node["block"]["attributes"]["pool"]["required"] is True
    assert node["block"]["attributes"]["steps"]["computed"] is True
    assert pool["labels"]["type"] == ["map", "string"] and pool["taints"]["type"] == ["set", "string"]
    assert set(schema["data_source_schemas"]["racklife_node"]["block"]["attributes"]) >= {
        "state", "pool", "power", "drift", "steps", "blockers", "jobs"}


def test_a_bad_provider_block_is_an_error_on_its_attribute(tmp_path: Path) -> None:
    w = Workdir(tmp_path)
    w.write("main.tf", MODULE % '"/nonexistent.yaml"')
    assert w.tf("init", "-no-color").returncode == 0
    plan = w.tf("plan", "-no-color")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert "racklife provider: inventory: the inventory /nonexistent.yaml is not a readable file" in plan.stderr
    assert 'inventory = "/nonexistent.yaml"' in plan.stderr  # Terraform points at the attribute


def test_install_provider_into_a_path_that_is_a_file_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = subprocess.run([RACKLIFE, "terraform", "install-provider", "--dir", str(blocker)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot install the provider into" in done.stderr and "Traceback" not in done.stderr


def test_dev_overrides_run_the_provider_in_place_without_init(tmp_path: Path) -> None:
    w = Workdir(tmp_path)
    done = subprocess.run([RACKLIFE, "terraform", "install-provider", "--dir", str(tmp_path / "mirror"),
                           "--dev-overrides", "--config", str(tmp_path / "terraform.rc")],
                          env=w.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "dev_overrides" in done.stdout, done.stdout + done.stderr
    w.write("main.tf", MODULE % '"/nonexistent.yaml"')
    plan = w.tf("plan", "-no-color")  # no init
    assert "Provider development overrides are in effect" in plan.stderr + plan.stdout
    assert plan.returncode == 1 and "racklife provider: inventory:" in plan.stderr, plan.stdout + plan.stderr
