"""Ansible connection plugin: run tasks inside a directory tree with chroot(8).

Why it exists: ansible-core has no chroot connection (it lives in the
community.general collection, shipped only in the 450 MB ``ansible`` bundle,
and Galaxy is not reachable from our builders). Image builds apply roles to a
debootstrap root; this plugin is the small part of that we need: every
command runs as ``chroot ROOT /bin/sh -c CMD``, files move in and out with
``dd`` inside the root (so symlinks resolve inside it, never on the builder),
and modules run with the root's own Python. The host is the root directory
(``ansible_host``, default the inventory name). Mount /proc, /sys and /dev
before running ansible-playbook; this plugin mounts nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

from ansible.errors import AnsibleConnectionFailure, AnsibleError  # type: ignore[import-untyped]
from ansible.plugins.connection import ConnectionBase  # type: ignore[import-untyped]

DOCUMENTATION = """
name: racklife_chroot
short_description: run tasks in a directory tree with chroot(8)
description:
  - Runs every command as C(chroot ROOT /bin/sh -c CMD) on the controller, as root.
  - Used by racklife's image builds to apply roles to a debootstrap root.
author: racklife
options:
  remote_addr:
    description: The root directory.
    default: inventory_hostname
    type: str
    vars:
      - name: inventory_hostname
      - name: ansible_host
extends_documentation_fragment:
  - connection_pipelining
"""

_BLOCK = "65536"


class Connection(ConnectionBase):  # type: ignore[misc]
    """A chroot on the controller, reached with chroot(8)."""

    transport = "racklife_chroot"
    has_pipelining = True
    has_tty = False
    default_user = "root"
    _connected: bool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._root = ""

    def _connect(self) -> Connection:
        if self._connected:
            return self
        root = os.path.abspath(str(self.get_option("remote_addr")))
        if os.geteuid() != 0:
            raise AnsibleConnectionFailure("the racklife_chroot connection needs root")
        if not os.path.isfile(os.path.join(root, "bin", "sh")):
            raise AnsibleConnectionFailure(f"{root} is not a root file system (no /bin/sh)")
        if shutil.which("chroot") is None:
            raise AnsibleConnectionFailure("chroot(8) is not installed on the controller")
        self._root = root
        self._connected = True
        return self

    def _chroot(self, *argv: str, stdin: Any = None, stdout: Any = subprocess.PIPE,
                in_data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        # A clean environment: the builder's locale or PATH must not leak into the image.
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
               "HOME": "/root", "DEBIAN_FRONTEND": "noninteractive"}
        if "SOURCE_DATE_EPOCH" in os.environ:
            env["SOURCE_DATE_EPOCH"] = os.environ["SOURCE_DATE_EPOCH"]
        return subprocess.run(["chroot", self._root, *argv], input=in_data, stdin=stdin, stdout=stdout,
                              stderr=subprocess.PIPE, env=env, cwd="/", check=False)

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = False) -> tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        shell = self._play_context.executable or "/bin/sh"
        self._display.vvv(f"EXEC {cmd}", host=self._root)
        res = self._chroot(shell, "-c", cmd, in_data=in_data, stdin=None if in_data is not None else subprocess.DEVNULL)
        return res.returncode, res.stdout, res.stderr

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        self._display.vvv(f"PUT {in_path} TO {out_path}", host=self._root)
        try:
            with open(in_path, "rb") as src:
                res = self._chroot("dd", f"of={out_path}", f"bs={_BLOCK}", "status=none", stdin=src)
        except OSError as exc:
            raise AnsibleError(f"cannot read {in_path}: {exc.strerror}") from None
        if res.returncode != 0:
            raise AnsibleError(f"failed to write {out_path} in {self._root}: {res.stderr.decode(errors='replace')}")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        self._display.vvv(f"FETCH {in_path} TO {out_path}", host=self._root)
        with open(out_path, "wb") as dst:
            res = self._chroot("dd", f"if={in_path}", f"bs={_BLOCK}", "status=none", stdout=dst)
        if res.returncode != 0:
            raise AnsibleError(f"failed to read {in_path} in {self._root}: {res.stderr.decode(errors='replace')}")

    def close(self) -> None:
        self._connected = False
