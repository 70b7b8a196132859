"""BIOS settings on every emulated BMC: ``@Redfish.Settings`` with the apply times a BMC offers.

Redfish stages BIOS changes in a settings object and applies them when the BMC says
(``SupportedApplyTimes``): at the next reset (``bmc.BmcState.boot`` moves them into the live
``Bios``) or, where offered, ``Immediate``. Vendors differ here, and the driver has to follow
what each one lists, so the emulator does too: the iDRAC capture lists its own apply times
(OnReset and maintenance windows), the DMTF mockup is given Immediate and OnReset, the iLO
capture lists none (settings then apply at the next reset, and an apply-time annotation is
refused), and OpenBMC, whose capture has a Bios with no attributes at all, gets a small
synthetic attribute set (as bmcweb serves with its BIOS configuration manager) and OnReset.
"""

from __future__ import annotations

from typing import Any

from lifecycle.lab.redfish_emulator.bmc import BmcState, Reply, error
from lifecycle.lab.redfish_emulator.hardware import SYNTHETIC
from lifecycle.lab.redfish_emulator.tree import Resource, norm

ANNOTATION = "@Redfish.SettingsApplyTime"

# Apply times added where a capture's @Redfish.Settings lists none; a tree absent here keeps
# what it captured (or nothing).
APPLY_TIMES: dict[str, tuple[str, ...]] = {
    "dmtf-public-rackmount1": ("Immediate", "OnReset"),
    "openbmc-stock": ("OnReset",),
}
# For a Bios captured without Attributes (OpenBMC): what bmcweb's BIOS config manager shows.
SYNTHETIC_ATTRIBUTES: dict[str, Any] = {
    "BootMode": "Uefi", "ProcHyperthreading": "Enabled", "ProcVirtualization": "Enabled",
    "SriovGlobalEnable": "Enabled", "PowerProfile": "MaxPerf",
}


def _bios_paths(state: BmcState) -> list[str]:
    links = [(state.resource(s) or {}).get("Bios", {}).get("@odata.id") for s in state.systems]
    return [str(link) for link in links if isinstance(link, str) and state.resource(link)]


def install(state: BmcState) -> None:
    """Give every Bios attributes, a settings object and its apply times (see the docstring)."""
    wanted = APPLY_TIMES.get(state.tree.name)
    for path in _bios_paths(state):
        bios = state.resource(path) or {}
        if not isinstance(bios.get("Attributes"), dict):
            live = state.writable(path)
            live["Attributes"] = dict(SYNTHETIC_ATTRIBUTES)
            live["Description"] = SYNTHETIC
            bios = live
        settings = bios.get("@Redfish.Settings")
        if not isinstance(settings, dict) or "SettingsObject" not in settings:
            link = f"{path.rstrip('/')}/Settings"
            state.writable(path)["@Redfish.Settings"] = {
                "@odata.type": "#Settings.v1_3_5.Settings",
                "SettingsObject": {"@odata.id": link}}
            state.overlay[norm(link)] = {
                "@odata.id": link, "@odata.type": bios.get("@odata.type", "#Bios.v1_1_0.Bios"),
                "Id": "Settings", "Name": "BIOS pending settings", "Attributes": {}}
            bios = state.resource(path) or {}
        if wanted and "SupportedApplyTimes" not in bios["@Redfish.Settings"]:
            state.writable(path)["@Redfish.Settings"]["SupportedApplyTimes"] = list(wanted)


def _live_bios(state: BmcState, settings_path: str) -> str | None:
    for path in _bios_paths(state):
        link = (state.resource(path) or {}).get("@Redfish.Settings", {}).get(
            "SettingsObject", {}).get("@odata.id")
        if isinstance(link, str) and norm(link) == norm(settings_path):
            return path
    return None


def take_apply_time(state: BmcState, settings_path: str, body: Resource) -> Reply | str | None:
    """Remove the apply-time annotation from a PATCH to a settings object; return the apply
    time it asked for (None: not a settings object or none asked), or the refusal."""
    bios_path = _live_bios(state, settings_path)
    if bios_path is None:
        return None
    asked = body.pop(ANNOTATION, None)
    if asked is None:
        return None
    supported = (state.resource(bios_path) or {}).get("@Redfish.Settings", {}).get(
        "SupportedApplyTimes")
    apply_time = asked.get("ApplyTime") if isinstance(asked, dict) else None
    if not isinstance(supported, list):
        return error(400, "Base.1.8.PropertyUnknown",
                     f"The property {ANNOTATION} is not supported by this service.")
    if apply_time not in supported:
        return error(400, "Base.1.8.PropertyValueNotInList",
                     f"The value {apply_time} for ApplyTime is not in SupportedApplyTimes.")
    return str(apply_time)


def apply_now(state: BmcState, settings_path: str) -> None:
    """``Immediate``: move what is staged into the live Bios now."""
    bios_path = _live_bios(state, settings_path)
    settings = state.resource(settings_path) or {}
    pending = settings.get("Attributes")
    if bios_path is None or not pending:
        return
    live = state.writable(bios_path)
    live.setdefault("Attributes", {}).update(pending)
    state.bump_etag(live)
    state.writable(settings_path)["Attributes"] = {}
