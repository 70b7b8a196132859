"""Running the real `terraform` binary in a test: its own HOME, CLI config and module directory.

Terraform is on this project's machine image (/usr/local/bin/terraform); a
test that needs it and does not find it fails with that message, it never
skips. Each module directory gets its own HOME (the provider caches its
TLS certificate under ``$HOME/.cache``) and a CLI configuration written by
``racklife terraform install-provider`` (``TF_CLI_CONFIG_FILE``);
``CHECKPOINT_DISABLE`` keeps Terraform from asking HashiCorp for updates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

RACKLIFE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))
EXAMPLE = Path(__file__).resolve().parents[2] / "stacks" / "terraform" / "examples" / "lab"


def terraform_bin() -> str:
    found = shutil.which("terraform")
    if found is None:
        pytest.fail("the terraform binary is not on PATH: these tests need the real engine (Terraform >= 1.5, "
                    "https://developer.hashicorp.com/terraform/install); they are never skipped")
    return found


class Workdir:
    """A Terraform module directory with the provider installed for it."""

    def __init__(self, root: Path, env: dict[str, str] | None = None) -> None:
        self.root = root
        self.module = root / "module"
        self.module.mkdir(parents=True, exist_ok=True)
        home = root / "home"
        home.mkdir(exist_ok=True)
        self.env = {**(env if env is not None else dict(os.environ)), "HOME": str(home),
                    "TF_CLI_CONFIG_FILE": str(root / "terraform.rc"), "TF_IN_AUTOMATION": "1", "TF_INPUT": "0",
                    "CHECKPOINT_DISABLE": "1", "NO_COLOR": "1"}
        self.env.pop("TF_LOG", None)
        done = subprocess.run([RACKLIFE, "terraform", "install-provider", "--dir", str(root / "mirror"),
                               "--config", str(root / "terraform.rc"), "--json"],
                              env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        self.installed: dict[str, Any] = json.loads(done.stdout)

    def write(self, name: str, text: str) -> None:
        (self.module / name).write_text(text, encoding="utf-8")

    def copy_example(self) -> None:
        for f in EXAMPLE.glob("*.tf"):
            shutil.copy(f, self.module / f.name)

    def tf(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([terraform_bin(), *args], cwd=self.module, env=self.env, capture_output=True,
                              text=True, timeout=timeout)
        assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
        assert "rpc error" not in done.stdout + done.stderr, done.stdout + done.stderr  # a provider crash
        return done
