"""Fixtures for the burn-in tests: paths into the shared captures, and fake node tools."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def fx(fixtures_dir: Path) -> Callable[[str], Path]:
    """``fx("nccl/…")``: a file in ``../shared/fixtures``, which must exist."""

    def path(rel: str) -> Path:
        p = fixtures_dir / rel
        assert p.is_file(), f"missing shared fixture {p}"
        return p

    return path


@pytest.fixture
def fake_bin(tmp_path: Path) -> Callable[[str, Path | None, int], Path]:
    """Put a fake tool on a private PATH that prints a captured output file.

    ``fake_bin("dcgmi", fixture, exit_code)``; the tool records its argv in
    ``<bin>/<name>.argv`` (one line per call) so tests can check what burnin asked for.
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()

    def make(name: str, output: Path | None, exit_code: int = 0) -> Path:
        tool = bin_dir / name
        body = f'printf "%s\\n" "$*" >> "{bin_dir}/{name}.argv"\n'
        body += f'case "$1" in --version|-V) echo "{name} (fake) 1.0"; exit 0;; esac\n'
        if output is not None:
            body += f'/bin/cat "{output}"\n'
        tool.write_text(f"#!/bin/sh\n{body}exit {exit_code}\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
        return bin_dir

    return make


@pytest.fixture
def fake_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH holds only the fake tools: any other tool is missing."""
    env = dict(os.environ)
    env["PATH"] = str(tmp_path / "bin")
    return env


@pytest.fixture
def healthy_tools(fx: Callable[[str], Path], fake_bin: Callable[..., Path], tmp_path: Path) -> Path:
    """Every node tool of a standard run, each printing a capture of a healthy H100 node (the bin dir)."""
    clean_log = tmp_path / "dmesg.log"
    clean_log.write_text("".join(fx("xid/gpud_tail_dmesg.0.log").read_text().splitlines(True)[:10]))
    fake_bin("dmesg", clean_log)
    fake_bin("ibstat", fx("infiniband/gpud_ibstat.47.0.h100.all.active.0.txt"))
    fake_bin("dcgmi", fx("dcgm/virtualclient/DCGMIDiag_r1_results.json"))
    return fake_bin("all_reduce_perf", fx("nccl/h100x8_all_reduce_perf_single-node_nvls_issue290.txt"))


NEW_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="session")
def nfx() -> Callable[[str], Path]:
    """``nfx("dcgm/…")``: a capture in ``tests/fixtures`` (provenance in its SOURCES.md)."""

    def path(rel: str) -> Path:
        p = NEW_FIXTURES / rel
        assert p.is_file(), f"missing fixture {p}"
        return p

    return path
