"""Redfish actions (POST …/Actions/X) on one emulated BMC.

An action exists only where the captured tree advertises it: the target is
looked up in the owning resource's ``Actions``, and a ResetType must be one the
tree (or its ``@Redfish.ActionInfo``) allows, because real BMCs refuse the rest.
"""

from __future__ import annotations

from collections.abc import Callable

from lifecycle.lab.redfish_emulator import update_service
from lifecycle.lab.redfish_emulator.bmc import BmcState, Reply, error
from lifecycle.lab.redfish_emulator.dispatch import start_task
from lifecycle.lab.redfish_emulator.tree import Resource, norm


def find_action(state: BmcState, path: str) -> tuple[str, str, Resource] | None:
    """(action name without '#', owner path, action description) for a POST target."""
    lowered = path.lower()
    cut = lowered.rfind("/actions/")
    if cut < 0:
        return None
    owner_path = path[:cut]
    owner = state.resource(owner_path)
    if owner is None:
        return None
    for name, desc in owner.get("Actions", {}).items():
        if name.startswith("#") and isinstance(desc, dict) and norm(desc.get("target", "")) == \
                norm(path):
            return name[1:], owner_path, desc
    return None


def allowed_values(state: BmcState, desc: Resource, parameter: str) -> list[str] | None:
    inline = desc.get(f"{parameter}@Redfish.AllowableValues")
    if isinstance(inline, list):
        return [str(v) for v in inline]
    info_path = desc.get("@Redfish.ActionInfo")
    info = state.resource(info_path) if isinstance(info_path, str) else None
    for param in (info or {}).get("Parameters", []):
        if param.get("Name") == parameter and isinstance(param.get("AllowableValues"), list):
            return [str(v) for v in param["AllowableValues"]]
    return None


def post(state: BmcState, path: str, body: Resource) -> Reply:
    if norm(path) == state.sessions_path:
        return state.login(body)
    found = find_action(state, path)
    if found is None:
        return error(404 if state.resource(path) is None else 405,
                     "Base.1.8.ActionNotSupported", f"No action at {path}.")
    name, owner, desc = found
    handler = _HANDLERS.get(name.split(".", 1)[-1])
    if handler is None:
        return error(400, "Base.1.8.ActionNotSupported", f"The action {name} is not supported.")
    return handler(state, owner, desc, body)


def _reset(state: BmcState, owner: str, desc: Resource, body: Resource) -> Reply:
    reset_type = body.get("ResetType", "On")
    allowed = allowed_values(state, desc, "ResetType")
    if allowed is not None and reset_type not in allowed:
        return error(400, "Base.1.8.ActionParameterValueNotInList",
                     f"The value {reset_type} for ResetType is not in the list of "
                     "acceptable values.")
    if norm(owner) not in state.systems:
        return Reply(204)  # manager or chassis reset: nothing to model
    return state.reset(owner, str(reset_type))


def _clear_log(state: BmcState, owner: str, desc: Resource, body: Resource) -> Reply:
    service = state.resource(owner) or {}
    entries = service.get("Entries", {}).get("@odata.id")
    if entries:
        state.log_entries(entries).clear()
    return Reply(204)


def _virtual_media(state: BmcState, owner: str, desc: Resource, body: Resource,
                   insert: bool) -> Reply:
    media = state.writable(owner)
    if insert:
        image = body.get("Image")
        if not isinstance(image, str) or not image:
            return error(400, "Base.1.8.ActionParameterMissing", "Image is required.")
        if media.get("Inserted"):
            return error(409, "Base.1.8.ResourceInUse", "Media is already inserted.")
        media.update(Image=image, Inserted=True, WriteProtected=body.get("WriteProtected", True))
    else:
        media.update(Image=None, Inserted=False)
    state.bump_etag(media)
    return Reply(204)


def _simple_update(state: BmcState, owner: str, desc: Resource, body: Resource) -> Reply:
    return update_service.simple_update(state, body)


def _secure_erase(state: BmcState, owner: str, desc: Resource, body: Resource) -> Reply:
    """A sanitize that takes time: the drive is ``Updating`` with a Sanitize in ``Operations`` until its
    Task ends; then ``Enabled`` and healthy, or ``Critical`` when the task failed or a fault says the
    erase left data behind (``erase_leaves_data``: the task itself reports success). The drive's own
    account (its Sanitize Status log, ``on_erase``) changes unless ``erase_not_done``: a BMC that
    reports an erase it never sent to the drive."""
    drive = state.writable(owner)
    if any(op.get("Operation") == "Sanitize" for op in drive.get("Operations") or []):
        return error(409, "Base.1.8.ResourceInUse", f"A secure erase of {drive.get('Id')} is already running.")
    drive["Status"] = {"State": "Updating", "Health": drive.get("Status", {}).get("Health", "OK")}

    def done(ok: bool) -> list[str]:
        degraded = not ok or state.faults.erase_leaves_data
        if state.on_erase is not None and not (ok and state.faults.erase_not_done):
            state.on_erase(state.config.name, str(drive.get("SerialNumber", "")), ok)  # what the drive itself saw
        drive["Status"] = {"State": "Enabled", "Health": "Critical" if degraded else "OK"}
        drive["Operations"] = []
        state.log_event(f"Secure erase of drive {drive.get('Id')} {'finished' if ok else 'failed'}.",
                        "OK" if ok else "Critical")
        return [f"Secure erase of {drive.get('Id')} {'failed' if not ok else 'finished'}."]

    reply = start_task(state, f"Secure erase of {drive.get('Id')}", done)
    task = reply.body if isinstance(reply.body, dict) else {}
    drive["Operations"] = [{"Operation": "Sanitize", "PercentageComplete": 0,
                            "AssociatedTask": {"@odata.id": task.get("@odata.id")}}]
    return reply


def _reset_to_defaults(state: BmcState, owner: str, desc: Resource, body: Resource) -> Reply:
    """Accepted and logged; the emulator does not model a BMC's factory settings (users stay)."""
    reset_type = body.get("ResetType")
    allowed = allowed_values(state, desc, "ResetType")
    if not isinstance(reset_type, str) or (allowed is not None and reset_type not in allowed):
        return error(400, "Base.1.8.ActionParameterValueNotInList",
                     f"The value {reset_type} for ResetType is not in the list of acceptable values.")
    state.log_event(f"Manager reset to defaults ({reset_type}).", "Warning")
    return Reply(204)


Handler = Callable[[BmcState, str, Resource, Resource], Reply]


def _insert(state: BmcState, owner: str, desc: Resource, body: Resource) -> Reply:
    return _virtual_media(state, owner, desc, body, insert=True)


def _eject(state: BmcState, owner: str, desc: Resource, body: Resource) -> Reply:
    return _virtual_media(state, owner, desc, body, insert=False)


_HANDLERS: dict[str, Handler] = {
    "Reset": _reset,
    "ClearLog": _clear_log,
    "InsertMedia": _insert,
    "EjectMedia": _eject,
    "SimpleUpdate": _simple_update,
    "SecureErase": _secure_erase,
    "ResetToDefaults": _reset_to_defaults,
}
