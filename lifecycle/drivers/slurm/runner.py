"""The one place racklife runs Slurm client commands and reads slurmrestd, translating failures.

Every scontrol/sinfo/squeue/scancel call goes through ``CommandRunner`` (argv
lists only, a timeout on each), and every slurmrestd read through
``RestClient``. Failures become ``lifecycle.drivers.errors`` types here, from
one table of Slurm's own messages, so callers only ask "can a retry help?"
(``TemporaryError``: no controller, a socket timeout, "temporarily"; else
``PermanentError``). slurmrestd is only read (GET): an error it explains in
its body is classified by the same table (22.05 answers a refused token with
500 "Unspecified error": permanent); a 5xx or 429 without one (a proxy, a
restart) is temporary (``Busy``, with its ``Retry-After``).
The JWT is sent as a header and never appears in an error or a log.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lifecycle.drivers.errors import (
    AuthFailed,
    Busy,
    DriverError,
    NotSupported,
    OperationFailed,
    Unreachable,
)
from lifecycle.model.redact import register

# Slurm's words (stderr, lower-cased) → the error they mean. First match wins.
ERROR_TABLE: tuple[tuple[str, type[DriverError]], ...] = (
    ("unable to contact slurm controller", Unreachable),
    ("socket timed out", Unreachable),
    ("connection refused", Unreachable),
    ("could not establish a configuration source", Unreachable),
    ("slurm backup controller in standby mode", Unreachable),
    ("resource temporarily unavailable", Busy),
    ("temporarily unable to accept job", Busy),
    ("munge", AuthFailed),
    ("access/permission denied", AuthFailed),
    ("invalid user", AuthFailed),
    ("authentication failure", AuthFailed),
)


def classify(target: str, stderr: str) -> DriverError:
    low = stderr.lower()
    for needle, kind in ERROR_TABLE:
        if needle in low:
            return kind(target, stderr.strip())
    return OperationFailed(target, stderr.strip() or "failed without a message")


def _slurm_error(exc: urllib.error.HTTPError) -> str | None:
    """The first error slurmrestd put in the body of an HTTP error (None: no such body)."""
    try:
        body = json.loads(exc.read(65536) or b"null")
    except (ValueError, OSError):
        return None
    errors = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(errors, list) or not errors or not isinstance(errors[0], dict):
        return None
    return str(errors[0].get("error") or errors[0].get("description") or "") or None


class Runner(Protocol):
    def __call__(self, argv: Sequence[str]) -> str:
        """Run a Slurm client command; return stdout or raise a DriverError."""
        ...


@dataclass
class CommandRunner:
    """Runs Slurm client commands with a fixed environment (``SLURM_CONF``) and timeout."""

    env: Mapping[str, str] | None = None
    timeout_s: float = 30.0
    calls: int = field(default=0, init=False)

    def __call__(self, argv: Sequence[str]) -> str:
        target = argv[0] if argv else "slurm"
        self.calls += 1
        try:
            res = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=self.timeout_s,
                env=dict(self.env) if self.env is not None else None, check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            raise NotSupported(target, f"{target} is not installed") from None
        except subprocess.TimeoutExpired:
            raise Unreachable(target, f"no answer within {self.timeout_s:.0f}s") from None
        if res.returncode != 0:
            raise classify(" ".join(argv[:3]), res.stderr or res.stdout)
        return res.stdout


@dataclass(frozen=True)
class RestClient:
    """Read-only slurmrestd client (openapi v0.0.38, the newest Slurm 22.05 serves)."""

    url: str
    token: str = field(repr=False)
    user: str = "root"
    version: str = "v0.0.38"
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        register(self.token)
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("slurmrestd URL must be http:// or https://")

    def get(self, path: str) -> dict[str, Any]:
        req = urllib.request.Request(  # noqa: S310 (scheme checked in __post_init__)
            f"{self.url.rstrip('/')}/slurm/{self.version}/{path.lstrip('/')}",
            headers={"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token},
        )
        target = f"slurmrestd {self.url}"
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310
                body: dict[str, Any] = json.load(resp)
        except urllib.error.HTTPError as exc:
            said = _slurm_error(exc)
            exc.close()
            if exc.code in (401, 403):
                raise AuthFailed(target, f"HTTP {exc.code}: token refused") from None
            if exc.code == 404:
                raise NotSupported(target, f"HTTP 404 for {path}") from None
            if said is not None and exc.code >= 500:
                # slurmrestd's own error: its words decide. 22.05 answers a refused token with
                # 500 "Unspecified error" (errno -1), which no retry can fix.
                raise classify(target, f"HTTP {exc.code}: {said}") from None
            if exc.code == 429 or exc.code >= 500:
                after = (exc.headers.get("Retry-After") or "") if exc.headers else ""
                raise Busy(target, f"HTTP {exc.code}",
                           delay_s=float(after) if after.isdigit() else None) from None
            raise OperationFailed(target, f"HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise Unreachable(target, str(getattr(exc, "reason", exc))) from None
        except ValueError:
            raise OperationFailed(target, f"answer to {path} is not JSON") from None
        errors = [e for e in body.get("errors", []) if e]
        if errors:
            first = errors[0]
            text = first.get("error") or first.get("description") or first
            raise OperationFailed(target, str(text))
        return body
