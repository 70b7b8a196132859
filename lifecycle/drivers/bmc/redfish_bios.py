"""The Redfish BIOS interface: current attributes from ``Bios``, changes staged in its settings.

Why apart from ``redfish.py``: BIOS is its own concern of the hardware type. Changes are
PATCHed to the ``@Redfish.Settings`` object, never to the live ``Bios`` (which BMCs refuse),
with the apply time the BMC lists in ``SupportedApplyTimes``; ``OnReset`` settings land at the
next boot, so reading them back is the caller's step after its reboot
(``workflows/bmc_changes.py``).
"""

from __future__ import annotations

from typing import Any

from lifecycle.drivers.bmc import redfish_parse as parse
from lifecycle.drivers.bmc.base import BiosApplyTime, BiosInterface, BiosStaged
from lifecycle.drivers.bmc.redfish_base import RedfishSystem
from lifecycle.drivers.errors import NotSupported, OperationFailed

Json = dict[str, Any]


class RedfishBios(RedfishSystem, BiosInterface):
    def _bios(self) -> tuple[str, Json]:
        path = parse.link(self.system(), "Bios")
        if path is None:
            raise NotSupported(self.target, "the system links no Bios")
        return path, self.transport.get(path)

    def bios_attributes(self) -> dict[str, object]:
        _, bios = self._bios()
        attributes = bios.get("Attributes")
        if not isinstance(attributes, dict):
            raise NotSupported(self.target, "the Bios resource has no Attributes")
        return dict(attributes)

    def bios_pending_attributes(self) -> dict[str, object]:
        """Attributes staged in the settings object with a value the live Bios does not have
        (iLO mirrors every attribute in its settings object: those are not pending)."""
        _, bios = self._bios()
        settings = self.reader.optional(parse.link(bios, "@Redfish.Settings", "SettingsObject"))
        pending = (settings or {}).get("Attributes")
        current = bios.get("Attributes") or {}
        if not isinstance(pending, dict):
            return {}
        return {k: v for k, v in pending.items() if current.get(k, object()) != v}

    def set_bios_attributes(self, attributes: dict[str, object], *,
                            apply_time: BiosApplyTime | None = None) -> BiosStaged:
        _, bios = self._bios()
        settings_info = bios.get("@Redfish.Settings") or {}
        settings_path = parse.link(bios, "@Redfish.Settings", "SettingsObject")
        if settings_path is None:
            raise NotSupported(self.target, "the Bios has no settings object to stage changes")
        current = bios.get("Attributes")
        if not isinstance(current, dict):
            raise NotSupported(self.target, "the Bios resource has no Attributes")
        unknown = sorted(set(attributes) - set(current))
        if unknown:
            raise OperationFailed(self.target, f"unknown BIOS attribute(s): {', '.join(unknown)} "
                                  f"(this BIOS has {len(current)}; `racklife bmc bios list`)")
        supported = [str(v) for v in settings_info.get("SupportedApplyTimes") or []]
        chosen = self._apply_time(apply_time, supported)
        settings = self.reader.optional(settings_path) or {}
        pending = settings.get("Attributes") or {}
        changes = {k: v for k, v in attributes.items()
                   if pending.get(k, current.get(k, object())) != v}
        if changes:
            body: Json = {"Attributes": changes}
            if supported:  # an annotation a BMC does not list may be refused: send it only then
                body["@Redfish.SettingsApplyTime"] = {"ApplyTime": chosen.value}
            self._patch(settings_path, settings, body)
        return BiosStaged(changes, chosen)

    def _apply_time(self, wanted: BiosApplyTime | None, supported: list[str]) -> BiosApplyTime:
        if not supported:  # the BMC says nothing: settings apply at the next reset
            if wanted not in (None, BiosApplyTime.ON_RESET):
                raise NotSupported(self.target, f"the BMC lists no SupportedApplyTimes; "
                                   f"{wanted} cannot be asked for")
            return BiosApplyTime.ON_RESET
        if wanted is not None:
            if wanted.value not in supported:
                raise NotSupported(self.target, f"apply time {wanted} is not offered "
                                   f"(supported: {', '.join(supported)})")
            return wanted
        for choice in (BiosApplyTime.ON_RESET, BiosApplyTime.IMMEDIATE):
            if choice.value in supported:
                return choice
        raise NotSupported(self.target, f"the BMC applies BIOS settings only "
                           f"{', '.join(supported)}; racklife needs OnReset or Immediate")
