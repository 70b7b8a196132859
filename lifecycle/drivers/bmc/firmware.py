"""A firmware update that proves it happened: the component's version read before and after.

Why it exists: a BMC's update task saying "Completed" is not evidence. BMCs stage images
and apply them later, silently skip an image for the wrong component, or report success for
a downgrade they refused. So an update is: find the component in the firmware inventory,
hand the BMC the image the way it takes one (SimpleUpdate from a URL served by the
controller, or a multipart push), follow the task to its end, read the inventory again, and
fail when the version did not change (or is not the one expected). Works on any driver with
the firmware interface; the interface itself only does the I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from lifecycle.drivers.bmc.base import (
    Firmware,
    FirmwareInterface,
    ProgressCallback,
    TaskProgress,
    UpdateMethod,
)
from lifecycle.drivers.errors import NotSupported, OperationFailed

# serve(image) -> a context whose value is the URL a BMC downloads the image from.
Serve = Callable[[Path], AbstractContextManager[str]]


@dataclass(frozen=True)
class FirmwareResult:
    component: str
    before: str
    after: str
    method: UpdateMethod
    task: TaskProgress


def find_component(components: list[Firmware], name: str, target: str) -> Firmware:
    """The one component called ``name`` (its Name, or the last part of its id; any case)."""
    wanted = name.lower()
    found = [f for f in components
             if wanted in (f.name.lower(), (f.id or "").rstrip("/").rsplit("/", 1)[-1].lower())]
    if len(found) == 1:
        return found[0]
    known = ", ".join(sorted({f.name for f in components})) or "none"
    if not found:
        raise OperationFailed(target, f"no firmware component {name!r} (the BMC reports: {known})")
    raise OperationFailed(target, f"{len(found)} components match {name!r}; name one by its id")


def choose_method(offered: tuple[UpdateMethod, ...], wanted: UpdateMethod | None,
                  can_serve: bool, target: str) -> UpdateMethod:
    """``wanted`` if offered; else pull when a URL can be served, else push."""
    if wanted is not None:
        if wanted not in offered:
            raise NotSupported(target, f"the BMC does not take {wanted} updates (it offers "
                               f"{', '.join(offered) or 'none'})")
        if wanted is UpdateMethod.PULL and not can_serve:
            raise NotSupported(target, "a pull update needs an address to serve the image on")
        return wanted
    usable = [m for m in offered if m is UpdateMethod.PUSH or can_serve]
    if not usable:
        raise NotSupported(target, "the BMC takes no firmware image racklife can give it "
                           f"(it offers {', '.join(offered) or 'neither SimpleUpdate nor push'})")
    return usable[0]


def update_firmware(fw: FirmwareInterface, component: str, image: Path, *,
                    serve: Serve | None, method: UpdateMethod | None = None,
                    expect_version: str | None = None,
                    progress: ProgressCallback | None = None) -> FirmwareResult:
    """Update ``component`` from ``image`` and verify the version changed (see the docstring).

    Raises ``OperationFailed`` when the task fails, when the component still reads its old
    version afterwards, or when it reads a version other than ``expect_version``.
    """
    if not image.is_file():
        raise OperationFailed(fw.target, f"{image}: no such file")
    before = find_component(fw.firmware_inventory(), component, fw.target)
    if before.updateable is False:
        raise OperationFailed(fw.target, f"{before.name} is not updateable (Updateable false)")
    chosen = choose_method(fw.update_methods(), method, serve is not None, fw.target)
    targets = [before.id] if before.id else None
    if chosen is UpdateMethod.PULL:
        assert serve is not None
        with serve(image) as url:
            task = fw.firmware_update(url, targets, progress)
    else:
        task = fw.firmware_push(image, targets, progress)
    after = find_component(fw.firmware_inventory(), component, fw.target)
    if after.version == before.version:
        raise OperationFailed(fw.target, f"{before.name} still reads {before.version} after task "
                              f"{task.task_id or '?'} completed: the update did not take")
    if expect_version is not None and after.version != expect_version:
        raise OperationFailed(fw.target, f"{before.name} reads {after.version} after the update, "
                              f"not {expect_version}")
    return FirmwareResult(before.name, before.version, after.version, chosen, task)
