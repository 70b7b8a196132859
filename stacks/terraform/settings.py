"""The provider block, typed: where the store and the base inventory are, and how apply reaches the nodes.

Terraform hands the provider its configuration as an untyped map of
attributes (unset ones null). Every attribute falls back to the environment
variable the CLI reads for the same setting (``racklife lab env`` exports them
for the lab), so the provider and ``racklife apply`` run with the same
settings; problems are returned as (attribute, message) pairs, which the
provider turns into diagnostics on that attribute. BMC credentials given
here (``bmc_credentials``, a sensitive map) are only put into this process's
environment for the inventory's ``credentials: env:VAR`` references: they
never reach the state, the store or a log.
"""

from __future__ import annotations

import getpass
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lifecycle.model import vocab
from lifecycle.planner.apply import Unavailable
from lifecycle.planner.assemble import RunnerSettings


@dataclass(frozen=True)
class ProviderSettings:
    inventory: Path  # the base inventory: site, racks, BMCs, NICs (Terraform sets pools and images on top)
    home: Path  # RACKLIFE_HOME: the store and the acceptance work directories
    images_dir: Path
    boot_listen: str
    boot_url: str | None
    boot_timeout_s: float
    level: vocab.Level  # acceptance level of accept steps
    ssh_config: Path
    burnin_profile: str | None
    burnin_python: str
    kubeconfig: str | None
    role_cmd: str  # the site's role-switch hook (RACKLIFE_NODE_ROLE_CMD)
    slurm_conf_cmd: str  # the site's slurm.conf hook, for decommissions (RACKLIFE_SLURM_CONF_CMD)
    max_in_flight: int
    max_unavailable: Unavailable
    operator: str
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)

    def runner(self) -> RunnerSettings:
        """What the planner's runner takes (:func:`lifecycle.planner.assemble.workflow_runner`)."""
        return RunnerSettings(operator=self.operator, home=self.home, images_dir=self.images_dir, level=self.level,
                              ssh_config=self.ssh_config, profile=self.burnin_profile,
                              burnin_python=self.burnin_python, max_in_flight=self.max_in_flight,
                              boot_listen=self.boot_listen, boot_url=self.boot_url, boot_timeout_s=self.boot_timeout_s,
                              kubeconfig=self.kubeconfig, role_cmd=tuple(shlex.split(self.role_cmd)),
                              slurm_conf_cmd=tuple(shlex.split(self.slurm_conf_cmd)))


# attribute -> (environment variable, default); the provider schema lists the same names.
ENV: dict[str, tuple[str, str | None]] = {
    "inventory": ("RACKLIFE_INVENTORY", None),
    "home": ("RACKLIFE_HOME", str(Path.home() / ".racklife")),
    "images": ("RACKLIFE_IMAGES", None),
    "boot_listen": ("RACKLIFE_BOOT_LISTEN", "127.0.0.1:8069"),
    "boot_url": ("RACKLIFE_BOOT_URL", None),
    "boot_timeout": ("RACKLIFE_BOOT_TIMEOUT_S", "600"),
    "acceptance_level": ("RACKLIFE_ACCEPTANCE_LEVEL", "quick"),
    "ssh_config": ("RACKLIFE_SSH_CONFIG", str(Path.home() / ".ssh" / "config")),
    "burnin_profile": ("RACKLIFE_BURNIN_PROFILE", None),
    "burnin_python": ("RACKLIFE_BURNIN_PYTHON", "python3"),
    "kubeconfig": ("RACKLIFE_KUBECONFIG", None),
    "role_cmd": ("RACKLIFE_NODE_ROLE_CMD", ""),
    "slurm_conf_cmd": ("RACKLIFE_SLURM_CONF_CMD", ""),
    "max_in_flight": ("RACKLIFE_MAX_IN_FLIGHT", "8"),
    "max_unavailable": ("RACKLIFE_MAX_UNAVAILABLE", "1"),
    "operator": ("RACKLIFE_OPERATOR", None),
}


def _value(config: Mapping[str, Any], env: Mapping[str, str], key: str) -> str | None:
    given = config.get(key)
    if given is not None:
        return str(given)
    var, default = ENV[key]
    if key == "kubeconfig":
        return env.get(var) or env.get("KUBECONFIG") or default
    return env.get(var) or default


def from_config(config: Mapping[str, Any], env: Mapping[str, str] | None = None
                ) -> tuple[ProviderSettings | None, list[tuple[str, str]]]:
    """The settings, or the problems with them (attribute, message); nothing is touched."""
    env = os.environ if env is None else env
    problems: list[tuple[str, str]] = []
    inventory = _value(config, env, "inventory")
    if not inventory:
        problems.append(("inventory", "no base inventory: set `inventory` in the provider block or "
                                      "RACKLIFE_INVENTORY (the site's racks, BMCs and NICs)"))
    elif not Path(inventory).is_file():
        problems.append(("inventory", f"the inventory {inventory} is not a readable file"))
    given = _value(config, env, "acceptance_level") or "quick"
    level: vocab.Level = "quick"
    try:
        level = vocab.level(given)
    except ValueError as exc:
        problems.append(("acceptance_level", f"{exc}, not {given!r}"))
    numbers: dict[str, float] = {}
    for key, low in (("boot_timeout", 1.0), ("max_in_flight", 1.0)):
        text = _value(config, env, key) or ""
        try:
            numbers[key] = float(text)
            if numbers[key] < low or (key == "max_in_flight" and not numbers[key].is_integer()):
                raise ValueError
        except ValueError:
            problems.append((key, f"must be a number of at least {low:g}"
                                  f"{' (whole)' if key == 'max_in_flight' else ''}, not {text!r}"))
    try:
        limit = Unavailable.parse(_value(config, env, "max_unavailable") or "1")
    except ValueError as exc:
        problems.append(("max_unavailable", str(exc).replace("--max-unavailable", "max_unavailable")))
    creds = config.get("bmc_credentials") or {}
    for name in creds:
        if not name.replace("_", "").isalnum() or name[0].isdigit():
            problems.append(("bmc_credentials", f"{name!r} is not an environment variable name"))
    if problems or not inventory:
        return None, problems
    home = Path(_value(config, env, "home") or "")
    images = _value(config, env, "images")
    return ProviderSettings(
        inventory=Path(inventory).resolve(), home=home.resolve(),
        images_dir=Path(images).resolve() if images else home.resolve() / "images",
        boot_listen=_value(config, env, "boot_listen") or "127.0.0.1:8069",
        boot_url=_value(config, env, "boot_url"), boot_timeout_s=numbers["boot_timeout"], level=level,
        ssh_config=Path(_value(config, env, "ssh_config") or "").resolve(),
        burnin_profile=_value(config, env, "burnin_profile"),
        burnin_python=_value(config, env, "burnin_python") or "python3",
        kubeconfig=_value(config, env, "kubeconfig"), role_cmd=_value(config, env, "role_cmd") or "",
        slurm_conf_cmd=_value(config, env, "slurm_conf_cmd") or "",
        max_in_flight=int(numbers["max_in_flight"]), max_unavailable=limit,
        operator=_value(config, env, "operator") or f"terraform:{getpass.getuser()}",
        credentials={str(k): str(v) for k, v in creds.items()}), []


def install(settings: ProviderSettings) -> None:
    """Point this process's racklife at the configured store and credentials (the provider is its own process)."""
    os.environ["RACKLIFE_HOME"] = str(settings.home)
    for name, value in settings.credentials.items():
        os.environ[name] = value
