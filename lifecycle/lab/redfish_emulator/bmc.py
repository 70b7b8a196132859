"""One emulated BMC: its resources, sessions and the hardware behaviour behind them.

A ``BmcState`` serves the shared, immutable ``VendorTree`` plus an overlay of the
resources this BMC changed (power state, boot override, BIOS, virtual media,
drives). It knows nothing of HTTP servers: ``server.py`` hands it a method, a
path, headers and a body and sends back the ``Reply``. Timed behaviour (power
changes that land later, tasks that finish later) goes through the ``schedule``
callable the server injects, so the lab's ``on_power`` hook fires even when no
client is asking.
"""

from __future__ import annotations

import base64
import copy
import hmac
import json
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lifecycle.lab.redfish_emulator.config import BmcConfig, Faults
from lifecycle.lab.redfish_emulator.hardware import extra_resources
from lifecycle.lab.redfish_emulator.task_service import task_service_overlay
from lifecycle.lab.redfish_emulator.tree import Resource, VendorTree, load_tree, norm

PowerHook = Callable[[str, str, str], None]
EraseHook = Callable[[str, str, bool], None]
"""(BMC name, drive serial, ok): a secure erase reached the drive and ended well (or failed)."""
Scheduler = Callable[[float, Callable[[], None]], None]
# Fetch(url, done): download ``url`` off the event loop, then ``done(data, "")`` or
# ``done(None, why)`` on it (SimpleUpdate's image; see update_service.py).
Fetch = Callable[[str, Callable[[bytes | None, str], None]], None]

_PUBLIC = {"/redfish", "/redfish/v1", "/redfish/v1/odata", "/redfish/v1/$metadata"}
_BYTES_CACHE: dict[tuple[int, str], bytes] = {}  # (id of a VendorTree, key)


@dataclass
class Reply:
    status: int
    body: Resource | bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"

    def payload(self) -> bytes:
        if self.body is None:
            return b""
        if isinstance(self.body, bytes):
            return self.body
        return json.dumps(self.body).encode()


def error(status: int, message_id: str, message: str) -> Reply:
    info = {"MessageId": message_id, "Message": message, "Severity": "Warning",
            "Resolution": "See the emulator's documentation."}
    body = {"error": {"code": message_id, "message": message, "@Message.ExtendedInfo": [info]}}
    return Reply(status, body)


def now_iso() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


@dataclass
class Session:
    id: str
    token: str
    username: str
    last_used: float


class BmcState:
    """Everything one BMC remembers. Not thread-safe: the server's event loop owns it."""

    def __init__(self, config: BmcConfig, *, schedule: Scheduler,
                 on_power: PowerHook | None = None, on_erase: EraseHook | None = None) -> None:
        self.config = config
        self.on_erase = on_erase
        self.faults: Faults = config.faults
        self.tree: VendorTree = load_tree(config.tree, normalised=not config.as_captured)
        self.schedule = schedule
        self.on_power = on_power
        self.fetch: Fetch | None = None  # set by the server: how this BMC downloads
        self.requests: Counter[tuple[str, str]] = Counter()
        self.overlay: dict[str, Resource] = {}
        self.sessions: dict[str, Session] = {}
        self.tasks: dict[str, Any] = {}  # task id -> actions.Task
        self.logs: dict[str, list[Resource]] = {}
        self.booted_from: list[str] = []  # boot targets used at each boot, for tests and the lab
        self._ids = 0
        self._log_services: dict[str, str] | None = None
        root = self.tree.service_root
        self.sessions_path = norm(root.get("Links", {}).get("Sessions", {}).get(
            "@odata.id", "/redfish/v1/SessionService/Sessions"))
        self.session_service = norm(root.get("SessionService", {}).get(
            "@odata.id", "/redfish/v1/SessionService"))
        self.systems = [norm(p) for p in self.tree.system_ids()]
        added_service, root_patch = task_service_overlay(self.tree)
        self.overlay.update(added_service)
        if root_patch:
            self.writable("/redfish/v1").update(root_patch)
        for sys_path in self.systems:
            system = self.tree.get(sys_path)
            if system is None:
                continue
            added, patch = extra_resources(system, config.hardware, self.tree.get)
            for path, res in added.items():
                self.overlay[norm(path)] = res
            if patch:
                self.writable(sys_path).update(patch)

    # --- resources -------------------------------------------------------------------------

    def next_id(self) -> str:
        self._ids += 1
        return str(self._ids)

    def resource(self, path: str) -> Resource | None:
        key = norm(path)
        return self.overlay.get(key) or self.tree.resources.get(key)

    def writable(self, path: str) -> Resource:
        """This BMC's own copy of a resource (copied from the tree on first write)."""
        key = norm(path)
        if key not in self.overlay:
            base = self.tree.resources.get(key)
            if base is None:
                raise KeyError(path)
            self.overlay[key] = copy.deepcopy(base)
        return self.overlay[key]

    def bump_etag(self, res: Resource) -> None:
        if "@odata.etag" in res:
            res["@odata.etag"] = f'W/"{secrets.token_hex(4).upper()}"'

    def serve(self, path: str) -> Reply:
        key = norm(path)
        if key in self.overlay:
            res = self.overlay[key]
            headers = {"ETag": res["@odata.etag"]} if "@odata.etag" in res else {}
            return Reply(200, res, headers)
        shared = self.tree.resources.get(key)
        if shared is not None:
            cache_key = (id(self.tree), key)  # trees live as long as the process
            body = _BYTES_CACHE.get(cache_key)
            if body is None:
                body = _BYTES_CACHE.setdefault(cache_key, json.dumps(shared).encode())
            headers = {"ETag": shared["@odata.etag"]} if "@odata.etag" in shared else {}
            return Reply(200, body, headers)
        raw = self.tree.raw_files.get(key)
        if raw is not None:
            return Reply(200, raw[0], content_type=raw[1])
        return error(404, "Base.1.8.ResourceMissingAtURI", f"The resource at the URI {path} "
                     "was not found.")

    # --- sessions and authentication -----------------------------------------------------

    def session_timeout(self) -> float:
        if self.config.session_timeout_s is not None:
            return self.config.session_timeout_s
        service = self.resource(self.session_service) or {}
        return float(service.get("SessionTimeout", 1800))

    def is_public(self, method: str, path: str) -> bool:
        key = norm(path)
        return key in _PUBLIC or (method == "POST" and key == self.sessions_path)

    def authorized(self, headers: dict[str, str], clock: float) -> bool:
        token = headers.get("x-auth-token")
        if token:
            for session in self.sessions.values():
                if hmac.compare_digest(session.token, token):
                    if clock - session.last_used > self.session_timeout():
                        del self.sessions[session.id]
                        return False
                    session.last_used = clock
                    return True
            return False
        auth = headers.get("authorization", "")
        if auth.lower().startswith("basic "):
            try:
                user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            except ValueError:
                return False
            return self.check_password(user, password)
        return False

    def check_password(self, user: str, password: str) -> bool:
        return (hmac.compare_digest(user, self.config.username)
                and hmac.compare_digest(password, self.config.password))

    def login(self, body: Resource) -> Reply:
        user, password = body.get("UserName"), body.get("Password")
        if not isinstance(user, str) or not isinstance(password, str):
            return error(400, "Base.1.8.PropertyMissing", "UserName and Password are required.")
        if not self.check_password(user, password):
            return error(401, "Base.1.8.NoValidSession", "Invalid user name or password.")
        sid = secrets.token_hex(8)
        session = Session(sid, secrets.token_urlsafe(24), user, time.monotonic())
        self.sessions[sid] = session
        path = f"{self.tree.service_root['Links']['Sessions']['@odata.id'].rstrip('/')}/{sid}"
        return Reply(201, self.session_resource(path, session),
                     {"X-Auth-Token": session.token, "Location": path})

    def session_resource(self, path: str, session: Session) -> Resource:
        return {"@odata.id": path, "@odata.type": "#Session.v1_3_0.Session", "Id": session.id,
                "Name": "User Session", "UserName": session.username}

    def sessions_collection(self) -> Resource:
        base = self.tree.service_root["Links"]["Sessions"]["@odata.id"].rstrip("/")
        members = [{"@odata.id": f"{base}/{sid}"} for sid in self.sessions]
        return {"@odata.id": base, "@odata.type": "#SessionCollection.SessionCollection",
                "Name": "Session Collection", "Members": members,
                "Members@odata.count": len(members)}

    def session_at(self, path: str) -> Session | None:
        key = norm(path)
        if not key.startswith(self.sessions_path + "/"):
            return None
        return self.sessions.get(path.rstrip("/").rsplit("/", 1)[-1])

    def expire_sessions(self) -> None:
        self.sessions.clear()

    # --- event logs ------------------------------------------------------------------------

    def log_services(self) -> dict[str, str]:
        """Entries collections of every LogService (key -> @odata.id), ClearLog ones first,
        systems before managers."""
        if self._log_services is not None:
            return self._log_services
        clearable: dict[str, str] = {}
        others: dict[str, str] = {}
        owners = self.systems + [norm(p) for p in self.tree.members(
            self.tree.service_root.get("Managers", {}).get("@odata.id", "/redfish/v1/Managers"))]
        for owner in owners:
            services = self.tree.first_link(owner, "LogServices")
            for service in self.tree.members(services) if services else []:
                res = self.tree.get(service) or {}
                entries = res.get("Entries", {}).get("@odata.id")
                if entries:
                    clear = "#LogService.ClearLog" in res.get("Actions", {})
                    (clearable if clear else others)[norm(entries)] = str(entries).rstrip("/")
        self._log_services = {**clearable, **others}
        return self._log_services

    def log_entries(self, entries_path: str) -> list[Resource]:
        key = norm(entries_path)
        if key not in self.logs:
            self.logs[key] = [copy.deepcopy(self.tree.get(m) or {"@odata.id": m})
                              for m in self.tree.members(key)]
        return self.logs[key]

    def log_event(self, message: str, severity: str = "OK") -> None:
        services = self.log_services()
        if not services:
            return
        key, base = next(iter(services.items()))
        entries = self.log_entries(key)
        eid = f"emu{self.next_id()}"
        entries.append({"@odata.id": f"{base}/{eid}", "@odata.type": "#LogEntry.v1_6_1.LogEntry",
                        "Id": eid, "Name": "Log Entry", "EntryType": "Event",
                        "Severity": severity, "Message": message, "Created": now_iso()})

    def log_collection(self, entries_path: str) -> Resource:
        entries = self.log_entries(entries_path)
        template = self.tree.get(entries_path) or {}
        path = self.log_services().get(norm(entries_path), entries_path)
        return {"@odata.id": path,
                "@odata.type": template.get("@odata.type",
                                            "#LogEntryCollection.LogEntryCollection"),
                "Name": template.get("Name", "Log Entries"),
                "Members": entries, "Members@odata.count": len(entries)}

    def log_entry(self, path: str) -> Resource | None:
        key = norm(path)
        for entries_path, entries in self.logs.items():
            if key.startswith(entries_path + "/"):
                for entry in entries:
                    if norm(entry.get("@odata.id", "")) == key:
                        return entry
                return None
        return None

    # --- power -----------------------------------------------------------------------------

    def power_state(self, sys_path: str) -> str:
        res = self.resource(sys_path) or {}
        return str(res.get("PowerState", "Off"))

    def set_power(self, sys_path: str, state: str, *, boot: bool) -> None:
        system = self.writable(sys_path)
        previous = system.get("PowerState")
        system["PowerState"] = state
        if boot:
            self.boot(sys_path)
        if previous != state or boot:
            self.log_event(f"System {system.get('Id', '')} power {state.lower()}"
                           + (" (reset)" if boot and previous == state else ""))
            if self.on_power is not None:
                self.on_power(self.config.name, str(system.get("Id", "")), state)

    def boot(self, sys_path: str) -> None:
        """What firmware does at power-on: use the override once, apply staged BIOS settings."""
        system = self.writable(sys_path)
        boot = system.get("Boot", {})
        enabled = boot.get("BootSourceOverrideEnabled", "Disabled")
        self.booted_from.append(boot.get("BootSourceOverrideTarget", "None")
                                if enabled != "Disabled" else "Default")
        if enabled == "Once":
            boot["BootSourceOverrideEnabled"] = "Disabled"
            boot["BootSourceOverrideTarget"] = "None"
        bios_link = system.get("Bios", {}).get("@odata.id")
        bios = self.resource(bios_link) if bios_link else None
        settings_link = (bios or {}).get("@Redfish.Settings", {}).get("SettingsObject", {}).get(
            "@odata.id")
        pending = (self.resource(settings_link) or {}).get("Attributes") if settings_link else None
        if bios_link and settings_link and pending and self.faults.bios_settings_fail:
            self.writable(bios_link)["@Redfish.Settings"]["Messages"] = [
                {"MessageId": "Base.1.8.GeneralError", "Message": "BIOS settings were not applied."}]
        elif bios_link and settings_link and pending:
            live = self.writable(bios_link)
            live.setdefault("Attributes", {}).update(pending)
            self.bump_etag(live)
            self.writable(settings_link)["Attributes"] = {}

    def reset(self, sys_path: str, reset_type: str) -> Reply:
        current = self.power_state(sys_path)
        outcomes: dict[str, tuple[str, bool]] = {
            "On": ("On", current != "On"), "ForceOn": ("On", current != "On"),
            "ForceOff": ("Off", False), "GracefulShutdown": ("Off", False),
            "ForceRestart": ("On", True), "GracefulRestart": ("On", True),
            "PowerCycle": ("On", True),
            "PushPowerButton": ("Off" if current == "On" else "On", current != "On"),
            "Nmi": (current, False),
        }
        if reset_type not in outcomes:
            return error(400, "Base.1.8.ActionParameterNotSupported",
                         f"ResetType {reset_type} is not supported.")
        if reset_type in {"ForceRestart", "GracefulRestart"} and current != "On":
            return error(409, "Base.1.8.ResourceInStandby",
                         "The system is powered off; it cannot be restarted.")
        state, boot = outcomes[reset_type]
        if reset_type == "Nmi" or (state == current and not boot):
            return Reply(204)
        delay = self.config.power_delay_s
        if delay <= 0:
            self.set_power(sys_path, state, boot=boot)
        else:
            self.schedule(delay, lambda: self.set_power(sys_path, state, boot=boot))
        return Reply(204)
