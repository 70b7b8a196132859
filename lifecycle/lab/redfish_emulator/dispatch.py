"""Redfish verbs on one emulated BMC: GET, PATCH (with If-Match), POST actions, DELETE.

This is the protocol half of the emulator (``bmc.py`` is the hardware half):
reading live collections (sessions, tasks, log entries), applying PATCHes the
way BMCs do (ETag check, ``Once`` boot overrides, BIOS changes staged in the
``@Redfish.Settings`` object), and running SimpleUpdate and SecureErase as
Tasks whose TaskMonitor answers 202 until the work is done.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from lifecycle.lab.redfish_emulator import bios_settings
from lifecycle.lab.redfish_emulator.bmc import BmcState, Reply, error, now_iso
from lifecycle.lab.redfish_emulator.task_service import MONITORS, TASKS
from lifecycle.lab.redfish_emulator.tree import Resource, norm


@dataclass
class Task:
    id: str
    name: str
    started: float
    duration: float
    polls_needed: int | None
    fail: bool
    on_done: Any  # Callable[[bool], list[str]] -> extra messages
    polls: int = 0
    state: str = "Running"
    messages: list[str] = field(default_factory=list)
    start_iso: str = field(default_factory=now_iso)
    end_iso: str | None = None
    ready: Any = None  # Callable[[], bool] | None: the task cannot end before (a download)

    def percent(self, clock: float) -> int:
        if self.state != "Running":
            return 100
        if self.polls_needed:
            return min(99, int(100 * self.polls / self.polls_needed))
        return min(99, int(100 * (clock - self.started) / max(self.duration, 1e-9)))

    def advance(self, clock: float) -> None:
        if self.state != "Running":
            return
        done = (self.polls >= self.polls_needed if self.polls_needed
                else clock - self.started >= self.duration)
        if done:
            self.finish()

    def finish(self) -> None:
        if self.state != "Running" or (self.ready is not None and not self.ready()):
            return
        self.state = "Exception" if self.fail else "Completed"
        self.messages.extend(self.on_done(not self.fail))
        self.end_iso = now_iso()

    def resource(self, clock: float) -> Resource:
        res: Resource = {
            "@odata.id": f"{TASKS}/{self.id}", "@odata.type": "#Task.v1_4_3.Task",
            "Id": self.id, "Name": self.name, "TaskState": self.state,
            "TaskStatus": {"Running": "OK", "Completed": "OK"}.get(self.state, "Critical"),
            "PercentComplete": self.percent(clock), "StartTime": self.start_iso,
            "TaskMonitor": f"{MONITORS}/{self.id}",
            "Messages": [{"MessageId": "Base.1.0.Success" if self.state != "Exception"
                          else "Base.1.0.GeneralError", "Message": m} for m in self.messages],
        }
        if self.end_iso:
            res["EndTime"] = self.end_iso
        return res


def start_task(state: BmcState, name: str, on_done: Any) -> Reply:
    task = Task(state.next_id(), name, time.monotonic(), state.config.task_duration_s,
                state.config.task_polls, state.faults.fail_tasks, on_done)
    task.messages.append(f"{name} started.")
    state.tasks[task.id] = task
    if not task.polls_needed:
        state.schedule(task.duration, task.finish)
    monitor = f"{MONITORS}/{task.id}"
    return Reply(202, task.resource(time.monotonic()), {"Location": monitor, "Retry-After": "1"})


def tasks_collection(state: BmcState) -> Resource:
    template = state.tree.get(TASKS) or {}
    members = list(template.get("Members", [])) + [{"@odata.id": f"{TASKS}/{t}"}
                                                     for t in state.tasks]
    return {"@odata.id": TASKS, "@odata.type": "#TaskCollection.TaskCollection",
            "Name": "Task Collection", "Members": members, "Members@odata.count": len(members)}


def _task_for(state: BmcState, key: str, prefix: str) -> Task | None:
    if not key.startswith(norm(prefix) + "/"):
        return None
    found: Task | None = state.tasks.get(key.rsplit("/", 1)[-1])
    return found


def get(state: BmcState, path: str) -> Reply:
    key = norm(path)
    clock = time.monotonic()
    if key == "/redfish":
        return Reply(200, {"v1": "/redfish/v1/"})
    if key == state.sessions_path:
        return Reply(200, state.sessions_collection())
    session = state.session_at(path)
    if session is not None:
        return Reply(200, state.session_resource(path.rstrip("/"), session))
    if key.startswith(state.sessions_path + "/"):
        return error(404, "Base.1.8.ResourceMissingAtURI", f"No session at {path}.")
    if key == norm(TASKS):  # live on every tree (task_service.py): empty until an action starts one
        return Reply(200, tasks_collection(state))
    task = _task_for(state, key, TASKS)
    if task is not None:
        task.advance(clock)
        return Reply(200, task.resource(clock))
    task = _task_for(state, key, MONITORS)
    if task is not None:
        task.polls += 1
        task.advance(clock)
        body = task.resource(clock)
        return Reply(202, body, {"Retry-After": "1"}) if task.state == "Running" else Reply(200,
                                                                                           body)
    if key in state.log_services():
        return Reply(200, state.log_collection(key))
    entry = state.log_entry(key)
    if entry is not None:
        return Reply(200, entry)
    return state.serve(path)


def supports_expand(state: BmcState) -> bool:
    """Whether the captured service root advertises ``$expand=.`` (ExpandAll or NoLinks)."""
    features = state.tree.service_root.get("ProtocolFeaturesSupported", {}).get("ExpandQuery",
                                                                                {})
    return bool(features.get("ExpandAll") or features.get("NoLinks"))


def get_expanded(state: BmcState, path: str, query: str) -> Reply:
    """GET with ``$expand=.($levels=1)``: a collection's members inline, where the tree allows."""
    reply = get(state, path)
    if "$expand" not in query or reply.status != 200 or not supports_expand(state):
        return reply
    body = reply.body if isinstance(reply.body, dict) else json.loads(reply.body or b"{}")
    if not isinstance(body.get("Members"), list):
        return reply
    expanded = []
    for member in body["Members"]:
        target = member.get("@odata.id") if isinstance(member, dict) else None
        if not target or set(member) != {"@odata.id"}:
            expanded.append(member)
            continue
        inner = get(state, target)
        if inner.status != 200:
            expanded.append(member)
            continue
        expanded.append(inner.body if isinstance(inner.body, dict)
                        else json.loads(inner.body or b"{}"))
    return Reply(200, {**body, "Members": expanded}, reply.headers)


def patch(state: BmcState, path: str, body: Resource, if_match: str | None) -> Reply:
    current = state.resource(path)
    if current is None:
        if not _is_settings_object(state, path):
            return state.serve(path)
        state.overlay[norm(path)] = {"@odata.id": path, "@odata.type": "#Bios.v1_1_0.Bios",
                                     "Id": "Settings", "Name": "BIOS pending settings",
                                     "Attributes": {}}
        current = state.overlay[norm(path)]
    etag = current.get("@odata.etag")
    if if_match and etag and if_match not in {etag, "*"}:
        return error(412, "Base.1.8.PreconditionFailed",
                     "The ETag supplied did not match the ETag of the resource.")
    if "Members" in current:
        return error(405, "Base.1.8.OperationNotAllowed", "Collections cannot be patched.")
    apply_time = bios_settings.take_apply_time(state, path, body)
    if isinstance(apply_time, Reply):
        return apply_time
    res = state.writable(path)
    if norm(path) in state.systems and "Boot" in body:
        reply = _check_boot(res, body["Boot"])
        if reply is not None:
            return reply
    if "Attributes" in body and isinstance(body["Attributes"], dict):
        unknown = _unknown_bios_attributes(state, path, body["Attributes"])
        if unknown:
            return error(400, "Base.1.8.PropertyUnknown",
                         f"The property {unknown[0]} is not a known BIOS attribute.")
    _merge(res, body)
    state.bump_etag(res)
    if apply_time == "Immediate":
        bios_settings.apply_now(state, path)
    headers = {"ETag": res["@odata.etag"]} if "@odata.etag" in res else {}
    return Reply(200, res, headers)


def _is_settings_object(state: BmcState, path: str) -> bool:
    for sys_path in state.systems:
        bios_link = (state.resource(sys_path) or {}).get("Bios", {}).get("@odata.id")
        bios = state.resource(bios_link) if bios_link else None
        link = (bios or {}).get("@Redfish.Settings", {}).get("SettingsObject", {}).get("@odata.id")
        if link and norm(link) == norm(path):
            return True
    return False


def _unknown_bios_attributes(state: BmcState, path: str, attrs: dict[str, Any]) -> list[str]:
    if not _is_settings_object(state, path):
        return []
    for sys_path in state.systems:
        bios_link = (state.resource(sys_path) or {}).get("Bios", {}).get("@odata.id")
        known = (state.resource(bios_link) or {}).get("Attributes", {}) if bios_link else {}
        if known:
            return [name for name in attrs if name not in known]
    return []


def _check_boot(system: Resource, boot: dict[str, Any]) -> Reply | None:
    allowed = system.get("Boot", {}).get("BootSourceOverrideTarget@Redfish.AllowableValues")
    target = boot.get("BootSourceOverrideTarget")
    if target is not None and allowed and target not in allowed:
        return error(400, "Base.1.8.PropertyValueNotInList",
                     f"The value {target} for BootSourceOverrideTarget is not allowed.")
    if boot.get("BootSourceOverrideEnabled") not in {None, "Once", "Continuous", "Disabled"}:
        return error(400, "Base.1.8.PropertyValueNotInList", "Bad BootSourceOverrideEnabled.")
    return None


def _merge(target: Resource, changes: Resource) -> None:
    for name, value in changes.items():
        if isinstance(value, dict) and isinstance(target.get(name), dict):
            _merge(target[name], value)
        else:
            target[name] = value


def delete(state: BmcState, path: str) -> Reply:
    session = state.session_at(path)
    if session is not None:
        del state.sessions[session.id]
        return Reply(204)
    if state.resource(path) is None:
        return error(404, "Base.1.8.ResourceMissingAtURI", f"No resource at {path}.")
    return error(405, "Base.1.8.OperationNotAllowed", f"DELETE is not allowed on {path}.")
