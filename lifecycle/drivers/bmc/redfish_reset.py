"""Reset a BMC's own settings to their defaults through Redfish (``Manager.ResetToDefaults``).

The last thing a decommission asks of a BMC before the server leaves: the
site's users, network settings and certificates should not leave with it.
Redfish defines ``#Manager.ResetToDefaults`` with a ResetType (``ResetAll``,
``PreserveNetworkAndUsers``, ``PreserveNetwork``); a BMC that does not offer
it (most captured trees: only bmcweb's does) cannot be reset this way, and
:func:`reset_support` says so before anything is changed. ``ResetAll`` is
asked for: after it the site's credentials no longer work, so it is the
last call racklife makes to that BMC.
"""

from __future__ import annotations

from typing import Any

from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.errors import NotSupported

ACTION = "#Manager.ResetToDefaults"
WANTED = "ResetAll"

Json = dict[str, Any]


def _managers(driver: RedfishDriver) -> list[Json]:
    system = driver.system()
    links = [m.get("@odata.id") for m in (system.get("Links") or {}).get("ManagedBy") or [] if isinstance(m, dict)]
    return [m for m in (driver.reader.optional(str(p)) for p in links if p) if m is not None]


def reset_support(driver: RedfishDriver) -> str:
    """"" when the system's manager offers ResetToDefaults with ``ResetAll``, else why not (reads only)."""
    managers = _managers(driver)
    if not managers:
        return "the system names no manager (Links.ManagedBy)"
    action = (managers[0].get("Actions") or {}).get(ACTION)
    if not isinstance(action, dict) or not action.get("target"):
        return f"the BMC offers no {ACTION[1:]}"
    allowed = driver._allowed(action, "ResetType")
    if allowed is not None and WANTED not in allowed:
        return f"the BMC's ResetToDefaults allows {', '.join(allowed)}, not {WANTED}"
    return ""


def reset_to_defaults(driver: RedfishDriver) -> str:
    """Ask the system's manager to reset to defaults; return what was asked."""
    why = reset_support(driver)
    if why:
        raise NotSupported(driver.target, why)
    manager = _managers(driver)[0]
    target = str(manager["Actions"][ACTION]["target"])
    driver.transport.request("POST", target, {"ResetType": WANTED})
    return f"{manager.get('@odata.id')}: ResetToDefaults {WANTED}"
