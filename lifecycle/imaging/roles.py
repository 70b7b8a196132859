"""Apply the Ansible roles of an image definition to its root, and prove they are idempotent.

ansible-core runs on the builder and reaches the root through the
``racklife_chroot`` connection plugin shipped next to this module (the
community.general chroot plugin is not in ansible-core). The play is written as
YAML data, never by pasting values into text. Every build applies the roles
twice: the second run must report ``changed=0``, so an image never ships a role
that would fight the next run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lifecycle.imaging.chroot import chroot_env, in_namespace
from lifecycle.imaging.common import BuildError
from lifecycle.imaging.definition import Role, roles_dir

PLUGINS = Path(__file__).resolve().parent / "ansible_plugins"
HOST = "image"
_RECAP = re.compile(
    rf"^{HOST}\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", re.M)


_VAR_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_JINJA = ("{{", "{%", "{#")


class AnsibleLiteral(str):
    """A string Ansible must take as it is: written ``!unsafe``, so Jinja never evaluates it."""


class _PlayDumper(yaml.SafeDumper):
    pass


_PlayDumper.add_representer(AnsibleLiteral, lambda d, v: d.represent_scalar("!unsafe", str(v)))


def literal_vars(values: Any, where: str = "vars") -> Any:
    """Role variables as Ansible must see them: names checked, strings with Jinja delimiters made literal.

    A value given to an image build (``--vars``, a definition's ``vars``) is data: a
    ``{{ lookup('pipe', ...) }}`` in it would otherwise run on the builder when Ansible templates
    the play. Names are Ansible variable names; anything that is not YAML data is refused.
    """
    if isinstance(values, dict):
        out = {}
        for k, v in values.items():
            if where == "vars" and (not isinstance(k, str) or not _VAR_NAME.fullmatch(k)):
                raise BuildError(f"{where}: {k!r} is not an Ansible variable name ([a-z_][a-z0-9_]*)")
            if not isinstance(k, str):
                raise BuildError(f"{where}: key {k!r} is not a string")
            out[k] = literal_vars(v, f"{where}.{k}")
        return out
    if isinstance(values, list):
        return [literal_vars(v, f"{where}[{i}]") for i, v in enumerate(values)]
    if isinstance(values, str):
        return AnsibleLiteral(values) if any(j in values for j in _JINJA) else values
    if values is None or isinstance(values, bool | int | float):
        return values
    raise BuildError(f"{where}: {type(values).__name__} is not YAML data")


@dataclass(frozen=True)
class Recap:
    """PLAY RECAP counts of one ansible-playbook run."""

    ok: int
    changed: int
    unreachable: int
    failed: int
    skipped: int


def ansible_playbook() -> str:
    beside = Path(sys.executable).parent / "ansible-playbook"
    exe = str(beside) if beside.exists() else shutil.which("ansible-playbook")
    if exe is None:
        raise BuildError("ansible-playbook is not installed: pip install 'racklife[images]' (ansible-core)")
    return exe


def playbook(roles: list[Role], extra: dict[str, Any], tasks_from: str | None = None,
             connection: str = "racklife_chroot") -> list[dict[str, Any]]:
    """One play that imports each role in order with its variables (``extra`` overrides them)."""
    tasks = []
    play_vars: dict[str, Any] = {}
    for role in roles:
        if tasks_from is not None and (role.tasks_from is not None
                                       or not (roles_dir() / role.name / "tasks" / f"{tasks_from}.yml").exists()):
            continue  # only roles applied whole, and only those with that task file
        only = tasks_from or role.tasks_from
        tasks.append({"name": f"Role {role.name}",
                      "ansible.builtin.import_role": {"name": role.name} | ({"tasks_from": only} if only else {})})
        # Play variables, not task variables, so the roles' handlers see them too. Role variables are
        # prefixed with the role's name, so roles cannot collide.
        play_vars |= role.vars | {k: v for k, v in extra.items() if k.startswith(f"{role.name}_")}
    play_vars = literal_vars(play_vars)
    return [{"name": "Apply the image's roles", "hosts": HOST, "gather_facts": False,
             "connection": connection, "vars": play_vars, "tasks": tasks}]


def _env(work: Path, epoch: int | None) -> dict[str, str]:
    cfg = work / "ansible.cfg"  # empty: no ansible.cfg of the builder's working directory or home applies
    cfg.write_text("")
    return {
        **os.environ, **chroot_env(epoch),
        "ANSIBLE_ROLES_PATH": str(roles_dir()),
        "ANSIBLE_CONNECTION_PLUGINS": str(PLUGINS / "connection"),
        "ANSIBLE_HOME": str(work / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
        # In the root, on the tmpfs the build namespace mounts at /tmp: nothing lands in the image.
        "ANSIBLE_REMOTE_TMP": "/tmp/.ansible",  # noqa: S108
        "ANSIBLE_PIPELINING": "1",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
        "ANSIBLE_CONFIG": str(cfg),
    }


def _play(argv: list[str], env: dict[str, str], timeout: float) -> tuple[Recap, str]:
    try:
        res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise BuildError(f"ansible-playbook did not finish in {timeout:.0f} s") from None
    m = _RECAP.search(res.stdout)
    if res.returncode != 0 or m is None:
        raise BuildError(f"ansible-playbook failed (exit {res.returncode}):\n{res.stdout[-3000:]}{res.stderr[-1000:]}")
    return Recap(*(int(x) for x in m.groups())), res.stdout


def changed_tasks(out: str) -> list[str]:
    """Names of the tasks an ansible-playbook run reported as changed."""
    names: list[str] = []
    task = ""
    for line in out.splitlines():
        if line.startswith(("TASK [", "RUNNING HANDLER [")):
            task = line[line.index("[") + 1:line.rindex("]")]
        elif line.startswith("changed:") and task not in names:
            names.append(task)
    return names


def _files(work: Path, root: Path | None, plays: list[dict[str, Any]]) -> tuple[Path, Path]:
    work.mkdir(parents=True, exist_ok=True)
    host: dict[str, Any] = {"ansible_host": str(root)} if root else {"ansible_connection": "local"}
    inventory = work / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {HOST: host}}}))
    book = work / "site.yml"
    book.write_text(yaml.dump(plays, Dumper=_PlayDumper, sort_keys=False))
    return inventory, book


def preflight(roles: list[Role], extra: dict[str, Any], work: Path) -> None:
    """Run each role's own ``validate`` tasks on the builder before spending minutes on debootstrap."""
    plays = playbook(roles, extra, tasks_from="validate", connection="local")
    if not plays[0]["tasks"]:
        return
    inventory, book = _files(work, None, plays)
    _play([ansible_playbook(), "-i", str(inventory), str(book)], _env(work, None), timeout=120)


def apply(root: Path, roles: list[Role], extra: dict[str, Any], work: Path, epoch: int | None,
          apt_cache: Path, log: Callable[[str], None] | None = None) -> tuple[Recap, Recap]:
    """Apply the roles twice to ``root``; raise unless the second run changed nothing."""
    inventory, book = _files(work, root, playbook(roles, extra))
    argv = in_namespace(root, [ansible_playbook(), "-i", str(inventory), str(book)], apt_cache)
    env = _env(work, epoch)
    first, _ = _play(argv, env, timeout=1200)
    if log:
        log(f"roles applied: ok={first.ok} changed={first.changed}")
    second, out = _play(argv, env, timeout=1200)
    if second.changed:
        raise BuildError(f"roles are not idempotent: the second run changed {second.changed} task(s): "
                         f"{', '.join(changed_tasks(out))}")
    return first, second
