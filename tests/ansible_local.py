"""Running one of racklife's roles on this machine, as the role tests do: one environment, one recap reader.

The role tests (Slurm's, kube_node's) apply a role twice to a throwaway root
with the real ``ansible-playbook``; each had its own copy of the environment
(our roles path, a private Ansible home and temp dir, no colours, no retry
files, the system python3 for the apt module) and of the ``changed=`` reader.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

_RECAP = re.compile(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)")


def play_locally(repo: Path, tmp: Path, args: list[str], env: dict[str, str] | None = None,
                 timeout: float = 300) -> tuple[int, str]:
    """``ansible-playbook -i localhost, ARGS``: (tasks changed, stdout and stderr); asserts it succeeded."""
    exe = Path(sys.executable).parent / "ansible-playbook"
    assert exe.exists(), "ansible-core is required: pip install ansible-core"
    environ = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(repo / "roles"),
        "ANSIBLE_HOME": str(tmp / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",  # the apt module needs python3-apt
        **(env or {}),
    }
    res = subprocess.run([str(exe), "-i", "localhost,", *args], env=environ, capture_output=True, text=True,
                         timeout=timeout, check=False)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    m = _RECAP.search(res.stdout)
    assert m, res.stdout[-2000:]
    return int(m.group(2)), res.stdout + res.stderr
