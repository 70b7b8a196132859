"""Developer sessions. `./dev SESSION` bootstraps a fresh Debian 12 machine, then runs one of these."""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True

PACKAGES = ["lifecycle", "burnin", "acceptance", "stacks"]


def _install(session: nox.Session, *extras: str) -> None:
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (pytest with pytest-xdist). Extra arguments go to pytest."""
    _install(session, "test", "drivers", "lab")
    args = session.posargs or ["-n", os.environ.get("RACKLIFE_TEST_WORKERS", "2"), "--dist", "loadgroup"]
    session.run("pytest", *args)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on everything, and the import-linter contracts that enforce DESIGN.md's layers."""
    _install(session, "lint", "drivers", "lab")
    session.run("ruff", "check", ".")
    session.run("lint-imports")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the packages."""
    _install(session, "typecheck", "drivers", "lab")
    session.run("mypy", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Every benchmark under bench/, printing the figures its issue asks for."""
    _install(session, "test", "drivers", "lab")
    only = session.posargs
    for name in sorted(os.listdir("bench")):
        if name.endswith(".py") and not name.startswith("_") and (not only or name[:-3] in only):
            session.run("python", f"bench/{name}")


@nox.session(default=False)
def lab(session: nox.Session) -> None:
    """The embedded demo: bring up the lab rack, tour it, tear it down."""
    _install(session, "drivers", "lab")
    session.run("racklife", "lab", "tour", *session.posargs)
