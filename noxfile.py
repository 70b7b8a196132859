"""Developer sessions. `./dev SESSION` bootstraps a fresh Debian 12 machine, then runs one of these."""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["ci"]
nox.options.reuse_existing_virtualenvs = True

EXTRAS = "test,lint,typecheck,drivers,lab,images,stacks"


def _install(session: nox.Session) -> None:
    session.install("-e", f".[{EXTRAS}]")


def _lint(session: nox.Session) -> None:
    session.run("ruff", "check", ".")
    session.run("lint-imports")


def _pytest(session: nox.Session, env: dict[str, str] | None = None) -> None:
    # --durations: the slowest tests, printed at the end, to keep the suite under CI's 45 minutes.
    args = session.posargs or ["-n", os.environ.get("RACKLIFE_TEST_WORKERS", "2"), "--dist", "loadgroup",
                               "--durations=25"]
    session.run("pytest", *args, env=env or {})


@nox.session
def ci(session: nox.Session) -> None:
    """What CI runs (`./dev test`): lint, type-check and the test suite, in one virtualenv."""
    _install(session)
    _lint(session)
    session.run("mypy")
    # Slurm 24.11 root (Debian 13) for the topology/block check: built (or found cached) as its own step.
    session.run("python", "-m", "lifecycle.lab.slurm_root")
    # Property tests draw the same examples on every CI run (tests/conftest.py): a run is red for a change,
    # not for a new draw. `nox -s tests` keeps drawing new ones.
    _pytest(session, {"HYPOTHESIS_PROFILE": "ci"})


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (pytest with pytest-xdist). Extra arguments go to pytest."""
    _install(session)
    _pytest(session)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on everything, and the import-linter contracts that enforce DESIGN.md's layers."""
    _install(session)
    _lint(session)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the packages."""
    _install(session)
    session.run("mypy", *session.posargs)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Every benchmark under bench/ (or those named: `nox -s bench -- bmc slurm`), printing its figures."""
    _install(session)
    only = session.posargs
    for name in sorted(os.listdir("bench")):
        if name.endswith(".py") and not name.startswith("_") and (not only or name[:-3] in only):
            session.run("python", f"bench/{name}")


@nox.session(default=False)
def lab(session: nox.Session) -> None:
    """The embedded demo: bring up the lab rack, build it end to end, use it, tear it down (root)."""
    _install(session)
    session.run("racklife", "lab", "tour", *session.posargs)
