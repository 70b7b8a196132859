"""A TaskService on every tree the emulator serves, whether the capture had one or not.

Long operations (secure erase, firmware update, any action that calls
``dispatch.start_task``) answer 202 with a Task the client follows; a client
also finds tasks from the service root's ``Tasks`` link. The iDRAC capture has
no TaskService at all, so without this a driver following an erase on that
tree would find a Task URI under a service the root does not link. One task
registry per BMC (``BmcState.tasks``), one collection (served live by
``dispatch``), one TaskService resource: the capture's where it exists, this
synthetic one (described as such) where it does not.
"""

from __future__ import annotations

from typing import Any

from lifecycle.lab.redfish_emulator.hardware import SYNTHETIC
from lifecycle.lab.redfish_emulator.tree import Resource, VendorTree, norm

SERVICE = "/redfish/v1/TaskService"
TASKS = "/redfish/v1/TaskService/Tasks"
MONITORS = "/redfish/v1/TaskService/TaskMonitors"


def task_service_overlay(tree: VendorTree) -> tuple[dict[str, Resource], dict[str, Any]]:
    """(resources to add, properties to set on the service root) so that ``tree`` has a TaskService."""
    root = tree.service_root
    linked = (root.get("Tasks") or {}).get("@odata.id") if isinstance(root.get("Tasks"), dict) else None
    if linked and tree.get(str(linked)) is not None:
        return {}, {}
    service: Resource = {
        "@odata.id": SERVICE, "@odata.type": "#TaskService.v1_1_4.TaskService", "Id": "TaskService",
        "Name": "Task Service", "Description": SYNTHETIC, "ServiceEnabled": True,
        "CompletedTaskOverWritePolicy": "Oldest", "LifeCycleEventOnTaskStateChange": False,
        "Status": {"State": "Enabled", "Health": "OK"}, "Tasks": {"@odata.id": TASKS},
    }
    return {norm(SERVICE): service}, {"Tasks": {"@odata.id": SERVICE}}
