"""`racklife config view`: the settings a command would run with, and where each came from.

Forget `eval "$(racklife lab env)"` and `nodes list` read an empty default
store and said nothing of it. This shows, for each setting racklife reads
(the store, the inventory, the lab, Slurm, Kubernetes, the boot server, SSH,
burn-in), its effective value and its source: the command line (`--db`), an
environment variable, or the built-in default; and whether a `racklife
serve` is alive to take handed-off runs. Secrets (tokens, passwords in
URLs) are shown as set or unset, never their value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import typer

from lifecycle.cli._common import JsonOpt, emit_json, emit_table, settings_source

app = typer.Typer(help="The settings racklife runs with, and where each comes from.", no_args_is_help=True)


@dataclass(frozen=True)
class Setting:
    """One row: a setting, its environment variable, and its built-in default (None: unset)."""

    name: str
    env: str
    default: str | None = None
    secret: bool = False


def _home_default() -> str:
    return str(Path.home() / ".racklife")


SETTINGS: tuple[Setting, ...] = (
    Setting("home", "RACKLIFE_HOME", _home_default()),
    Setting("inventory", "RACKLIFE_INVENTORY"),
    Setting("lab directory", "RACKLIFE_LAB_DIR", "/var/lib/racklife/lab"),
    Setting("slurm.conf", "SLURM_CONF", "/etc/slurm/slurm.conf"),
    Setting("slurmrestd URL", "RACKLIFE_SLURM_REST_URL"),
    Setting("slurmrestd token", "RACKLIFE_SLURM_JWT", secret=True),
    Setting("kubeconfig", "RACKLIFE_KUBECONFIG"),
    Setting("kubeconfig (kubectl's)", "KUBECONFIG", str(Path.home() / ".kube" / "config")),
    Setting("Kubernetes token", "RACKLIFE_KUBE_TOKEN", secret=True),
    Setting("node role hook", "RACKLIFE_NODE_ROLE_CMD"),
    Setting("ssh config", "RACKLIFE_SSH_CONFIG", str(Path.home() / ".ssh" / "config")),
    Setting("boot server listen", "RACKLIFE_BOOT_LISTEN", "127.0.0.1:8069"),
    Setting("boot server URL", "RACKLIFE_BOOT_URL"),
    Setting("burn-in profile", "RACKLIFE_BURNIN_PROFILE"),
    Setting("burn-in python", "RACKLIFE_BURNIN_PYTHON", "python3"),
    Setting("event log", "RACKLIFE_EVENT_LOG"),
)


def _safe_url(url: str) -> str:
    """A database URL without its password."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(not a URL)"
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _store_row() -> dict[str, str | None]:
    from lifecycle.store.db import default_url

    source = settings_source.get("db")
    if source is None:
        source = "env RACKLIFE_DB" if os.environ.get("RACKLIFE_DB") else (
            "env RACKLIFE_HOME" if os.environ.get("RACKLIFE_HOME") else "default")
    return {"setting": "store", "value": _safe_url(default_url()), "source": source}


def _row(s: Setting) -> dict[str, str | None]:
    value = os.environ.get(s.env)
    if value is not None:
        return {"setting": s.name, "value": "(set)" if s.secret else value, "source": f"env {s.env}"}
    return {"setting": s.name, "value": s.default if s.default is not None else None,
            "source": "default" if s.default is not None else "unset"}


def _service() -> dict[str, str | None]:
    """Whether a `racklife serve` is alive to take runs (read from the store; unknown if it cannot be read)."""
    from lifecycle.store.db import default_url, is_sqlite

    url = default_url()
    if is_sqlite(url) and not Path(url.removeprefix("sqlite:///")).exists():
        return {"setting": "service", "value": None, "source": "no store yet"}
    try:
        from lifecycle.store import Store
        from lifecycle.workflows.controller import live_services

        store = Store(url)
        try:
            alive = live_services(store)
        finally:
            store.close()
    except Exception as exc:  # a view of the settings still answers when the store cannot
        return {"setting": "service", "value": None, "source": f"unknown: {type(exc).__name__}: {exc}"}
    names = ", ".join(f"{ex.id} (pid {ex.pid})" for ex in alive)
    return {"setting": "service", "value": names or None, "source": "store" if alive else "none running"}


@app.command("view")
def view(as_json: bool = JsonOpt) -> None:
    """Every setting racklife reads, its value and where it came from (command line, environment, default)."""
    rows = [_store_row(), *(_row(s) for s in SETTINGS), _service()]
    if as_json:
        emit_json(rows)
        return
    emit_table(None, ["setting", "value", "source"], [(r["setting"], r["value"] or "-", r["source"]) for r in rows])
