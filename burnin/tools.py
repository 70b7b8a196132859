"""Run the node's tools (dcgmi, all_reduce_perf, ibstat, dmesg, nvidia-smi) and keep their output.

Every run is recorded the same way — argv, start/end time, exit status, stdout saved
under ``raw/`` — so each check's evidence looks alike. Tools are found on ``PATH``
(the lab puts fake tools there); a missing tool is reported, never skipped. argv is
always a list: nothing from inventory or profiles is ever put through a shell.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class ToolRun:
    argv: list[str]
    tool: str
    path: str | None  # resolved executable; None when the tool is not on PATH
    started_at: str
    ended_at: str
    exit_code: int | None
    stdout: str
    stderr: str
    raw_output: str | None  # relative to the result directory
    timed_out: bool = False

    @property
    def missing(self) -> bool:
        return self.path is None

    def failure(self) -> str | None:
        """Why this run produced no usable output, or None when it ran."""
        if self.missing:
            return f"{self.tool} not found on PATH"
        if self.timed_out:
            return f"{self.tool} timed out"
        return None

    def stderr_tail(self) -> str:
        lines = [ln for ln in self.stderr.strip().splitlines() if ln.strip()]
        return " | ".join(lines[-3:])[:300]


_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class ToolRunner:
    """Runs tools for one burn-in and writes their output under ``<out>/raw``."""

    def __init__(
        self,
        out_dir: Path,
        *,
        env: dict[str, str] | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.out_dir = out_dir
        self.raw_dir = out_dir / "raw"
        self.raw_dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ if env is None else env)
        self.clock = clock
        self._versions: dict[str, tuple[str | None, str | None]] = {}

    def which(self, tool: str) -> str | None:
        return shutil.which(tool, path=self.env.get("PATH", ""))

    def run(self, name: str, argv: Sequence[str], timeout_s: float) -> ToolRun:
        argv = list(argv)
        tool = argv[0]
        started = self.clock()
        path = self.which(tool)
        raw_name = f"raw/{_SAFE.sub('_', name)}.out"
        if path is None:
            now = iso(self.clock())
            return ToolRun(argv, tool, None, iso(started), now, None, "", "", None)
        timed_out = False
        try:
            proc = subprocess.run(
                [path, *argv[1:]],
                capture_output=True,
                timeout=timeout_s,
                env=self.env,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout or b""
            stderr = exc.stderr or b""
            code, timed_out = None, True
        except OSError as exc:
            stdout, stderr, code = b"", str(exc).encode(), None
        out_text = stdout.decode("utf-8", errors="replace")
        err_text = stderr.decode("utf-8", errors="replace")
        (self.out_dir / raw_name).write_text(out_text, encoding="utf-8")
        if err_text:
            (self.out_dir / f"raw/{_SAFE.sub('_', name)}.err").write_text(err_text, encoding="utf-8")
        return ToolRun(
            argv, tool, path, iso(started), iso(self.clock()), code, out_text, err_text,
            raw_name, timed_out,
        )

    def version(self, tool: str) -> tuple[str | None, str | None]:
        """The tool's version, or None and why not (``burnin.versions``: what it was asked, what it said)."""
        from burnin import versions

        if tool in self._versions:
            return self._versions[tool]
        probe = versions.PROBES.get(tool)
        if probe is None or probe.argv is None:
            found: tuple[str | None, str | None] = (
                None, probe.why_none if probe is not None else f"racklife knows no way to ask {tool} its version")
        elif self.which(tool) is None:
            found = None, f"{tool} not found on PATH"
        else:
            try:
                proc = subprocess.run([self.which(tool) or tool, *probe.argv[1:]], capture_output=True, timeout=20,
                                      env=self.env, check=False, stdin=subprocess.DEVNULL)
                text = (proc.stdout or proc.stderr).decode("utf-8", errors="replace")
                found = versions.read(tool, probe.argv, proc.returncode, text)
            except (OSError, subprocess.TimeoutExpired) as exc:
                found = None, f"`{' '.join(probe.argv)}` failed: {type(exc).__name__}"
        self._versions[tool] = found
        return found

    def write_raw(self, name: str, text: str) -> str:
        rel = f"raw/{_SAFE.sub('_', name)}"
        (self.out_dir / rel).write_text(text, encoding="utf-8")
        return rel
