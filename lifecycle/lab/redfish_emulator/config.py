"""Settings of one emulated BMC and the faults it can be told to show.

Kept apart from the server so the lab, the tests and the CLI describe BMCs with
plain dataclasses (and JSON, for the subprocess form) without importing aiohttp.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from lifecycle.lab.redfish_emulator.hardware import ExtraHardware


@dataclass(frozen=True)
class Faults:
    """What a BMC does wrong. ``remaining`` limits how many requests are affected (None: all).

    * ``timeout``: accept the request and never answer (the client's timeout fires);
    * ``status``: answer with this HTTP status (500, 503, …); with 503, ``retry_after``
      adds a ``Retry-After`` header;
    * ``slow_s``: answer correctly but this many seconds late;
    * ``expire_sessions``: drop every session now (one shot), so the next call gets 401;
    * ``fail_tasks``: tasks (firmware update, secure erase) end in ``Exception``;
    * ``erase_leaves_data``: secure erase reports success but the drive reads back degraded;
    * ``erase_not_done``: secure erase reports success, the drive reads back healthy, and nothing
      was erased (a BMC that lies): only the drive's own Sanitize Status log, read from the booted
      node, shows it (never sanitized);
    * ``update_keeps_version``: a firmware update's task completes and installs nothing (a BMC
      that staged the image and never applied it: only reading the version back shows it);
    * ``bios_settings_fail``: staged BIOS settings are not applied at boot (they stay pending,
      and ``@Redfish.Settings.Messages`` says so);
    * ``echo_request``: refuse a request that carries credentials or a body (``status``, default
      400) with an error message that quotes it back, headers and body, as some BMCs do: a
      session login's password, a Basic or session token, with it.
    """

    timeout: bool = False
    status: int | None = None
    retry_after: int | None = None
    slow_s: float = 0.0
    remaining: int | None = None
    expire_sessions: bool = False
    fail_tasks: bool = False
    erase_leaves_data: bool = False
    erase_not_done: bool = False
    update_keeps_version: bool = False
    bios_settings_fail: bool = False
    echo_request: bool = False

    def active(self) -> bool:
        return self.timeout or self.status is not None or self.slow_s > 0 or self.echo_request


@dataclass(frozen=True)
class BmcConfig:
    """One emulated BMC. ``port=0`` lets the OS pick a free port."""

    name: str
    tree: Path
    username: str
    password: str = field(repr=False)
    host: str = "127.0.0.1"
    port: int = 0
    power_delay_s: float = 0.0
    task_duration_s: float = 1.0
    task_polls: int | None = None  # finish a task after this many reads instead of by time
    session_timeout_s: float | None = None  # None: the tree's SessionService.SessionTimeout
    hardware: ExtraHardware = field(default_factory=ExtraHardware)
    faults: Faults = field(default_factory=Faults)
    as_captured: bool = False
    """Serve the tree exactly as captured, without ``vendor_fixes.py`` (see ``normalise.py``)."""

    def with_faults(self, **changes: Any) -> BmcConfig:
        return replace(self, faults=replace(self.faults, **changes))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tree"] = str(self.tree)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BmcConfig:
        data = dict(data)
        data["tree"] = Path(data["tree"])
        data["hardware"] = ExtraHardware(**data.get("hardware", {}))
        data["faults"] = Faults(**data.get("faults", {}))
        return cls(**data)

