"""The values that may be written into slurm.conf, gres.conf and topology.conf, checked at the boundary.

Slurm's configuration files are lines of ``Key=Value`` words: a newline in a
value starts a directive of its own (``--cluster-name $'a\\nPrologSlurmctld=/tmp/x.sh'``
would make slurmctld run a script as root at every job start), a space
starts another word, ``#`` starts a comment, and ``%n``-style escapes are
expanded in paths. The inventory's values are already validated by the model;
the render options come from flags and callers, so every one is checked here
against the vocabulary of its Slurm parameter (a table, not scattered ifs),
and the rendered text is checked once more line by line before it is
returned.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from typing import Any

from lifecycle.model import vocab


class RenderError(ValueError):
    """A value that must not be written into a Slurm configuration file."""


_PATH = re.compile(r"/[A-Za-z0-9._/+-]*")
_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_WORD = re.compile(r"[A-Za-z0-9_./+-]+(,[A-Za-z0-9_./+-]+)*")
_EXTRA = re.compile(r"[A-Z][A-Za-z0-9]*=[^\s#][^\x00-\x1f\x7f#]*")
_DATABASE = re.compile(r"[A-Za-z0-9_]{1,64}")
_LINE_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*=[^\s#\x00-\x1f\x7f]*")


def _name(value: Any) -> None:
    vocab.node_name(value)


def _host(value: Any) -> None:
    if not isinstance(value, str):
        raise ValueError("must be a host name")
    try:
        ipaddress.ip_address(value)
    except ValueError:
        vocab.hostname(value)


def _path(value: Any) -> None:
    if not isinstance(value, str) or not _PATH.fullmatch(value) or "/../" in f"{value}/":
        raise ValueError("must be an absolute path of letters, digits and '._/+-' (no spaces, '#', '%' or '..')")


def _user(value: Any) -> None:
    if not isinstance(value, str) or not _USER.fullmatch(value):
        raise ValueError("must be a Unix user name")


def _word(value: Any) -> None:
    if not isinstance(value, str) or not _WORD.fullmatch(value):
        raise ValueError("must be a comma-separated list of plugin words ([A-Za-z0-9_./+-])")


def _count(lo: int, hi: int) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if type(value) is not int or not lo <= value <= hi:
            raise ValueError(f"must be an integer from {lo} to {hi}")
    return check


def _one_of(*choices: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
    return check


def _fraction(value: Any) -> None:
    if not isinstance(value, float | int) or isinstance(value, bool) or not 0 < value <= 1:
        raise ValueError("must be a number above 0 and at most 1")


def _database(value: Any) -> None:
    if not isinstance(value, str) or not _DATABASE.fullmatch(value):
        raise ValueError("must be a MariaDB database name ([A-Za-z0-9_], at most 64)")


def _flag(value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")


def _optional(check: Callable[[Any], None]) -> Callable[[Any], None]:
    def optional(value: Any) -> None:
        if value is not None:
            check(value)
    return optional


# RenderOptions field -> the vocabulary of the Slurm parameter it becomes.
OPTION_RULES: dict[str, Callable[[Any], None]] = {
    "cluster_name": _optional(_name),
    "controller": _host,
    "controller_addr": _optional(_host),
    "backup_controller": _optional(_host),
    "backup_controller_addr": _optional(_host),
    "slurmctld_port": _optional(_count(1, 65535)),
    "slurmctld_timeout_s": _optional(_count(1, 65533)),
    "configless": _flag,
    "accounting": _flag,
    "dbd_host": _optional(_host),
    "dbd_addr": _optional(_host),
    "dbd_port": _optional(_count(1, 65535)),
    "storage_host": _host,
    "storage_port": _optional(_count(1, 65535)),
    "storage_user": _optional(_user),
    "storage_loc": _database,
    "state_dir": _path,
    "spool_dir": _path,
    "log_dir": _path,
    "run_dir": _path,
    "slurm_user": _user,
    "topology": _one_of("tree", "block"),
    "gpu_device_dir": _path,
    "gres_autodetect": _one_of("nvml", "off"),
    "memory_fraction": _fraction,
    "select_parameters": _word,
    "proctrack": _word,
    "task_plugin": _word,
    "jobacct_gather": _word,
    "auth_socket": _optional(_path),
    "jwt_key": _optional(_path),
    "resume_program": _path,
    "suspend_program": _path,
    "suspend_time_s": _count(-1, 10**7),
    "suspend_timeout_s": _count(1, 10**7),
    "resume_timeout_s": _count(1, 10**7),
    "power_save_interval_s": _count(1, 10**7),
}


def check_options(opts: Any) -> None:
    """Raise RenderError naming the first option that is not a value of its Slurm parameter."""
    for name, rule in OPTION_RULES.items():
        try:
            rule(getattr(opts, name))
        except ValueError as exc:
            raise RenderError(f"{name}: {exc}") from None
    for node, port in dict(opts.node_ports).items():
        try:
            vocab.node_name(node)
            _count(1, 65535)(port)
        except ValueError as exc:
            raise RenderError(f"node_ports[{node!r}]: {exc}") from None
    if opts.backup_controller is not None and opts.backup_controller == opts.controller:
        raise RenderError("backup_controller: must differ from controller (each slurmctld finds its own line)")
    for field in ("extra", "dbd_extra"):
        for i, line in enumerate(getattr(opts, field)):
            if not isinstance(line, str) or not _EXTRA.fullmatch(line) or line.lower().startswith("include"):
                raise RenderError(f"{field}[{i}]: must be one 'Key=Value ...' line without '#' or control "
                                  "characters (no Include)")


def check_names(names: Iterable[str], what: str) -> None:
    for name in names:
        try:
            vocab.node_name(name)
        except ValueError as exc:
            raise RenderError(f"{what} {name!r}: {exc}") from None


def check_rendered(name: str, text: str) -> str:
    """Every line of a rendered file is a comment we wrote, empty, or ``Key=Value`` words (one directive)."""
    for number, line in enumerate(text.split("\n"), 1):
        if not line or line.startswith("# Generated by racklife"):
            continue
        if any(_LINE_WORD.fullmatch(word) is None for word in line.split(" ")):
            raise RenderError(f"{name} line {number}: not a plain Key=Value line: {line[:80]!r}")
    return text
