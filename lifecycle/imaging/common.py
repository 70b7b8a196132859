"""What every image build needs: running tools with argv lists, hashing artefacts, one error type."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from pathlib import Path


class BuildError(Exception):
    pass


def run(argv: list[str], cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout: float = 600) -> str:
    """Run ``argv`` (never a shell string); return stdout, or raise BuildError with the end of stderr."""
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise BuildError(f"{argv[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise BuildError(f"{' '.join(argv[:4])}… did not finish in {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip())[-1500:]
        raise BuildError(f"{' '.join(argv)} failed (exit {proc.returncode}): {tail}")
    return proc.stdout


def sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
