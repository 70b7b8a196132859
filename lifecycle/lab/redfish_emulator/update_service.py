"""UpdateService on every emulated BMC: FirmwareInventory, SimpleUpdate, multipart push.

A firmware update is the step where a real BMC most often says "done" and is wrong, so the
emulator makes the driver prove it: SimpleUpdate downloads the ``ImageURI`` for real (over
HTTP, and only from loopback or the lab's subnet: the emulator never reaches any other
address), a multipart push carries the image in the request, and either way a Task runs for
the BMC's task time. Only when the Task completes does the target component's ``Version`` in
``FirmwareInventory`` change, to the version the image declares. An image that is not a lab
image, a download that fails, or ``Faults.fail_tasks`` end the Task in ``Exception``;
``Faults.update_keeps_version`` completes it without installing anything (a BMC that staged
the image and never applied it), which only a read-back catches.

A *lab firmware image* is an OpenBMC-style tarball whose ``MANIFEST`` names the component
and the version (``make_image``). Trees whose capture has no FirmwareInventory (the iDRAC
one) get one, synthetic and saying so, with the BMC's and the BIOS's versions from the tree.
"""

from __future__ import annotations

import io
import ipaddress
import json
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lifecycle.lab.redfish_emulator.bmc import BmcState, Reply, error
from lifecycle.lab.redfish_emulator.dispatch import start_task
from lifecycle.lab.redfish_emulator.hardware import SYNTHETIC
from lifecycle.lab.redfish_emulator.tree import Resource, norm

UPDATE_SERVICE = "/redfish/v1/UpdateService"
INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
MANIFEST = "MANIFEST"
IMAGE_PURPOSE = "racklife.lab.firmware"
# Where an emulated BMC may download from: loopback and the lab's own network, nothing else.
REACHABLE = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"),
             ipaddress.ip_network("10.77.0.0/16"))


@dataclass(frozen=True)
class LabImage:
    component: str
    version: str


def make_image(path: Path, component: str, version: str, payload: bytes = b"\0" * 4096) -> Path:
    """Write a lab firmware image for ``component`` declaring ``version``; return ``path``."""
    manifest = f"purpose={IMAGE_PURPOSE}\ncomponent={component}\nversion={version}\n".encode()
    with tarfile.open(path, "w") as tar:
        for name, data in ((MANIFEST, manifest), ("image.bin", payload)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def read_image(data: bytes) -> LabImage | str:
    """The image's component and version, or why it is not a lab firmware image."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            member = tar.extractfile(MANIFEST)
            text = member.read(4096).decode() if member is not None else ""
    except (tarfile.TarError, KeyError, UnicodeDecodeError):
        return "image verification failed: not a firmware package (no MANIFEST)"
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if fields.get("purpose") != IMAGE_PURPOSE or not fields.get("version"):
        return "image verification failed: the MANIFEST names no racklife lab firmware version"
    return LabImage(fields.get("component", ""), fields["version"])


def reachable(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    try:
        address = ipaddress.ip_address(parts.hostname)
    except ValueError:
        return parts.hostname == "localhost"
    return any(address in net for net in REACHABLE)


# --- the tree: FirmwareInventory where the capture has none ------------------------------

def _member(path: str, name: str, version: str) -> Resource:
    return {"@odata.id": path, "@odata.type": "#SoftwareInventory.v1_4_0.SoftwareInventory",
            "Id": path.rsplit("/", 1)[-1], "Name": name, "Description": SYNTHETIC,
            "Version": version, "Updateable": True,
            "Status": {"State": "Enabled", "Health": "OK"}}


def install_inventory(state: BmcState) -> None:
    """Give a tree whose UpdateService links no FirmwareInventory one (BMC and BIOS)."""
    service = state.resource(UPDATE_SERVICE)
    if service is None or state.resource(INVENTORY) is not None:
        return
    managers = state.tree.members(state.tree.service_root.get("Managers", {}).get(
        "@odata.id", "/redfish/v1/Managers"))
    bmc_version = str((state.resource(managers[0]) or {}).get("FirmwareVersion") or "") \
        if managers else ""
    bios_version = str((state.resource(state.systems[0]) or {}).get("BiosVersion") or "") \
        if state.systems else ""
    members = {f"{INVENTORY}/BMC": ("BMC firmware", bmc_version),
               f"{INVENTORY}/BIOS": ("System BIOS", bios_version)}
    for path, (name, version) in members.items():
        if version:
            state.overlay[norm(path)] = _member(path, name, version)
    listed = [p for p in members if norm(p) in state.overlay]
    state.overlay[norm(INVENTORY)] = {
        "@odata.id": INVENTORY, "@odata.type": "#SoftwareInventoryCollection."
        "SoftwareInventoryCollection", "Name": "Firmware Inventory",
        "Members": [{"@odata.id": p} for p in listed], "Members@odata.count": len(listed)}
    state.writable(UPDATE_SERVICE)["FirmwareInventory"] = {"@odata.id": INVENTORY}


def push_uri(state: BmcState) -> str | None:
    uri = (state.resource(UPDATE_SERVICE) or {}).get("MultipartHttpPushUri")
    return norm(uri) if isinstance(uri, str) else None


# --- the update itself --------------------------------------------------------------------

def _components(state: BmcState) -> list[str]:
    inventory = state.resource(INVENTORY) or {}
    return [str(m["@odata.id"]) for m in inventory.get("Members", []) if "@odata.id" in m]


def _chosen(state: BmcState, targets: list[str], image: LabImage) -> list[str]:
    if targets:
        return targets
    wanted = image.component.lower()
    return [p for p in _components(state)
            if wanted and wanted in (p.rsplit("/", 1)[-1].lower(),
                                     str((state.resource(p) or {}).get("Name", "")).lower())]


def _is_bios(path: str, member: Resource) -> bool:
    """The system firmware, by its vendor's name for it (iLO calls it the System ROM)."""
    names = (path.rsplit("/", 1)[-1].lower(), str(member.get("Name", "")).lower())
    return any("bios" in n for n in names) or names[1].startswith("system rom")


def _install(state: BmcState, targets: list[str], image: LabImage) -> list[str]:
    if state.faults.update_keeps_version:
        return ["Update staged; it will be applied later."]  # and never is
    chosen = _chosen(state, targets, image)
    if not chosen:
        return [f"No component matches {image.component!r}; nothing was applied."]
    for path in chosen:
        member = state.writable(path)
        member["Version"] = image.version
        state.bump_etag(member)
        if _is_bios(path, member):
            for sys_path in state.systems:
                state.writable(sys_path)["BiosVersion"] = image.version
    return [f"Installed {image.version} on {', '.join(chosen)}."]


def _bad_targets(state: BmcState, targets: list[str]) -> Reply | None:
    known = {norm(p) for p in _components(state)}
    unknown = [t for t in targets if norm(t) not in known]
    if unknown:
        return error(400, "Base.1.8.ActionParameterValueNotInList",
                     f"The target {unknown[0]} is not in the FirmwareInventory.")
    return None


class _Update:
    """One update: its image (downloaded or pushed) and what the Task does when it ends."""

    def __init__(self, state: BmcState, source: str, targets: list[str]) -> None:
        self.state, self.source, self.targets = state, source, targets
        self.image: LabImage | None = None
        self.failure: str | None = None
        self.arrived = False

    def received(self, data: bytes | None, why: str) -> None:
        self.arrived = True
        if data is None:
            self.failure = f"Download of {self.source} failed: {why}."
            return
        parsed = read_image(data)
        if isinstance(parsed, str):
            self.failure = parsed[0].upper() + parsed[1:] + "."
        else:
            self.image = parsed

    def done(self, ok: bool) -> list[str]:
        if not ok:
            return [self.failure or f"Update from {self.source} failed."]
        assert self.image is not None
        return _install(self.state, self.targets, self.image)


def _start(state: BmcState, update: _Update) -> Reply:
    reply = start_task(state, "Firmware update", update.done)
    body = reply.body if isinstance(reply.body, dict) else {}
    task = state.tasks[str(body["Id"])]

    def ready() -> bool:
        if update.arrived and update.failure is not None:
            task.fail = True
        return update.arrived

    task.ready = ready
    return reply


def simple_update(state: BmcState, body: Resource) -> Reply:
    image = body.get("ImageURI")
    if not isinstance(image, str) or not image:
        return error(400, "Base.1.8.ActionParameterMissing", "ImageURI is required.")
    targets = [str(t) for t in body.get("Targets", [])]
    refused = _bad_targets(state, targets)
    if refused is not None:
        return refused
    update = _Update(state, image, targets)
    state.log_event(f"Firmware update from {image} started.")
    reply = _start(state, update)
    if not reachable(image):
        update.received(None, "the BMC cannot reach that address")
    elif state.fetch is None:
        update.received(None, "this emulator cannot download")
    else:
        state.fetch(image, lambda data, why: _arrived(state, update, data, why))
    return reply


def _arrived(state: BmcState, update: _Update, data: bytes | None, why: str) -> None:
    update.received(data, why)
    for task in state.tasks.values():
        task.advance(time.monotonic())  # a task whose time is up ends now


def push(state: BmcState, parameters: bytes, image: bytes, filename: str) -> Reply:
    """A multipart push: ``UpdateParameters`` (JSON) and ``UpdateFile`` (the image)."""
    try:
        params: Any = json.loads(parameters or b"{}")
    except ValueError:
        return error(400, "Base.1.8.MalformedJSON", "UpdateParameters is not JSON.")
    if not isinstance(params, dict):
        return error(400, "Base.1.8.MalformedJSON", "UpdateParameters is not an object.")
    if not image:
        return error(400, "Base.1.8.ActionParameterMissing", "UpdateFile is required.")
    limit = (state.resource(UPDATE_SERVICE) or {}).get("MaxImageSizeBytes")
    if isinstance(limit, int) and len(image) > limit:
        return error(413, "Base.1.8.PayloadTooLarge", f"The image exceeds {limit} bytes.")
    targets = [str(t) for t in params.get("Targets", [])]
    refused = _bad_targets(state, targets)
    if refused is not None:
        return refused
    update = _Update(state, filename or "the pushed image", targets)
    update.received(image, "")
    state.log_event(f"Firmware update from pushed image {filename} started.")
    return _start(state, update)
