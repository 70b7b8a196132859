"""Put the provider where Terraform finds it: a filesystem mirror, and the CLI configuration that names it.

The provider is this package run by this Python, so "installing" it is
writing a two-line executable, ``terraform-provider-racklife_vVERSION``, in
the unpacked mirror layout (``DIR/HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/``).
The default directory, ``~/.terraform.d/plugins``, is one Terraform searches
without being told; any other needs the ``provider_installation`` block that
:func:`cli_config` writes (``TF_CLI_CONFIG_FILE`` or ``~/.terraformrc``).
No network is involved: ``terraform init`` copies the provider from the
mirror and records its checksum in the module's ``.terraform.lock.hcl``.
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from lifecycle import __version__ as RACKLIFE_VERSION
from stacks.terraform.provider import ADDRESS

TYPE = ADDRESS.rsplit("/", 1)[1]
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class Installed:
    address: str
    version: str
    platform: str
    mirror: Path
    executable: Path

    def to_json(self) -> dict[str, str]:
        return {"address": self.address, "version": self.version, "platform": self.platform,
                "mirror": str(self.mirror), "executable": str(self.executable), "cli_config": cli_config(self)}


def default_mirror() -> Path:
    return Path.home() / ".terraform.d" / "plugins"


def target() -> str:
    machine = platform.machine().lower()
    if machine not in _ARCH:
        raise ValueError(f"no Terraform platform name for this machine ({machine})")
    return f"{sys.platform if sys.platform != 'linux2' else 'linux'}_{_ARCH[machine]}"


def install(mirror: Path, python: str = sys.executable, version: str = RACKLIFE_VERSION) -> Installed:
    """Write the provider executable into ``mirror``; return where it went. Idempotent."""
    plat = target()
    where = mirror / ADDRESS / version / plat
    where.mkdir(parents=True, exist_ok=True)
    exe = where / f"terraform-provider-{TYPE}_v{version}"
    # PYTHONPATH passes through (Terraform starts providers with its own environment).
    text = f"#!/bin/sh\nexec {shlex.quote(python)} -m stacks.terraform \"$@\"\n"
    tmp = exe.with_name(exe.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o755)
    os.replace(tmp, exe)
    return Installed(ADDRESS, version, plat, mirror.resolve(), exe.resolve())


def cli_config(installed: Installed) -> str:
    """A Terraform CLI configuration that takes racklife from the mirror and every other provider as usual."""
    return (
        "provider_installation {\n"
        "  filesystem_mirror {\n"
        f"    path    = {_hcl(str(installed.mirror))}\n"
        f"    include = [{_hcl(installed.address)}]\n"
        "  }\n"
        "  direct {\n"
        f"    exclude = [{_hcl(installed.address)}]\n"
        "  }\n"
        "}\n")


def dev_overrides_config(installed: Installed) -> str:
    """The other way: Terraform runs the executable in place and needs no ``terraform init`` (it warns so)."""
    return (
        "provider_installation {\n"
        "  dev_overrides {\n"
        f"    {_hcl(installed.address)} = {_hcl(str(installed.executable.parent))}\n"
        "  }\n"
        "  direct {}\n"
        "}\n")


def _hcl(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("${", "$${").replace("%{", "%%{")
    return f'"{escaped}"'
