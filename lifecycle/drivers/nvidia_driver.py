"""The site's hook that installs an NVIDIA driver on one node, and what a driver version looks like.

Installing a GPU driver is a site's own business (its package repository,
DKMS or precompiled kernel modules, the open or the proprietary flavour,
Fabric Manager and the NVSwitch packages that must match), so racklife runs
it as a hook, like the Slurm daemon hook (``drivers/slurm/daemons``):
``RACKLIFE_DRIVER_INSTALL_CMD``, run on the controller with an argv list
(never a shell) as ``<argv…> NODE VERSION``, with ``RACKLIFE_DRIVER_VERSION``
in its environment too. Exit 0 means the packages for ``VERSION`` are
installed on the node, to be loaded at its next boot; the hook does not
reboot the node (racklife does, through the node's BMC) and its word is not
taken for the result: the change is done only when the node, re-tested
after the reboot, reports the version itself (nvidia-smi or NVML's driver
version, judged by acceptance). The lab's own hook is
``lifecycle.lab.driver_install``.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from lifecycle.drivers.errors import NotSupported, OperationFailed, Unreachable
from lifecycle.model import vocab
from lifecycle.model.redact import redact

INSTALL_CMD_ENV = "RACKLIFE_DRIVER_INSTALL_CMD"
VERSION_ENV = "RACKLIFE_DRIVER_VERSION"
INSTALL_TIMEOUT_S = 1800.0
"""How long one install may take (a DKMS build of the kernel modules takes minutes)."""
_VERSION = re.compile(r"^\d{3}\.\d{1,3}(\.\d{1,3})?\Z")


def check_version(text: str) -> str:
    """An NVIDIA driver version as nvidia-smi prints it (``550.127.08``, ``570.86``); ValueError otherwise."""
    if not _VERSION.match(text.strip()):
        raise ValueError(f"--driver must be an NVIDIA driver version like 550.127.08, not {text!r}")
    return text.strip()


def no_hook_reason(env: Mapping[str, str] | None = None) -> str | None:
    """None when the site's install command is set; else why a driver change cannot be made."""
    text = (env if env is not None else os.environ).get(INSTALL_CMD_ENV, "").strip()
    return None if text else f"no driver install command: set ${INSTALL_CMD_ENV} (see docs/upgrade.md)"


@dataclass(frozen=True)
class InstallHook:
    """Runs the site's install command for one node and one driver version."""

    argv: tuple[str, ...]
    timeout_s: float = INSTALL_TIMEOUT_S

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> InstallHook:
        env = env if env is not None else os.environ
        why = no_hook_reason(env)
        if why is not None:
            raise NotSupported("driver", why)
        return cls(tuple(shlex.split(env[INSTALL_CMD_ENV])))

    def install(self, node: str, version: str) -> str:
        """Install ``version`` on ``node`` (loaded at its next boot); the hook's output, redacted, for the record."""
        if not vocab.is_node_name(node):
            raise ValueError(f"{node!r} is not a valid node name")
        version = check_version(version)
        env = {**os.environ, VERSION_ENV: version}
        try:
            res = subprocess.run([*self.argv, node, version], capture_output=True, text=True, timeout=self.timeout_s,
                                 env=env, check=False, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise NotSupported(node, f"driver install command {self.argv[0]!r} not found") from None
        except subprocess.TimeoutExpired:
            raise Unreachable(node, f"the driver install gave no answer within {self.timeout_s:.0f}s") from None
        if res.returncode != 0:
            raise OperationFailed(node, f"the driver install of {version} failed (exit {res.returncode}): "
                                  f"{redact((res.stderr or res.stdout).strip()[-500:])}")
        return redact(res.stdout.strip()[-500:])
