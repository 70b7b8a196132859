"""The Redfish firmware interface: FirmwareInventory, SimpleUpdate (pull) and multipart push.

Why apart from ``redfish.py``: firmware is its own concern of the hardware type, with its own
resources (``UpdateService``) and two ways in. SimpleUpdate hands the BMC a URL it downloads
from (the controller's HTTP server, ``drivers/boot/image_serve.py``); a multipart push
(``MultipartHttpPushUri``, Redfish 1.6+) sends the image in the request, for BMCs that cannot
reach the controller or offer no SimpleUpdate (OpenBMC). Either way the BMC answers with a
Task, followed here to its end; whether the version changed is the caller's check
(``drivers/bmc/firmware.py``), since only it knows which component it meant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lifecycle.drivers.bmc import redfish_parse as parse
from lifecycle.drivers.bmc.base import (
    Firmware,
    FirmwareInterface,
    ProgressCallback,
    TaskProgress,
    UpdateMethod,
)
from lifecycle.drivers.bmc.redfish_base import RedfishSystem
from lifecycle.drivers.errors import NotSupported, OperationFailed

Json = dict[str, Any]


class RedfishFirmware(RedfishSystem, FirmwareInterface):
    def _update_service(self) -> Json:
        update = self.reader.optional(parse.link(self.transport.root, "UpdateService"))
        if update is None:
            raise NotSupported(self.target, "the service root links no UpdateService")
        if update.get("ServiceEnabled") is False:
            raise NotSupported(self.target, "the UpdateService is disabled (ServiceEnabled false)")
        return update

    def firmware_inventory(self) -> list[Firmware]:
        update = self._update_service()
        path = parse.link(update, "FirmwareInventory")
        if path is None:
            raise NotSupported(self.target, "the UpdateService links no FirmwareInventory")
        return [parse.firmware(member) for member in self.reader.expand(path)]

    def update_methods(self) -> tuple[UpdateMethod, ...]:
        update = self._update_service()
        found: list[UpdateMethod] = []
        if "#UpdateService.SimpleUpdate" in (update.get("Actions") or {}):
            found.append(UpdateMethod.PULL)
        if isinstance(update.get("MultipartHttpPushUri"), str):
            found.append(UpdateMethod.PUSH)
        return tuple(found)

    def firmware_update(self, image_url: str, targets: list[str] | None = None,
                        progress: ProgressCallback | None = None) -> TaskProgress:
        update = self._update_service()
        target, desc = self._action(update, "#UpdateService.SimpleUpdate")
        body: Json = {"ImageURI": image_url}
        protocols = self._allowed(desc, "TransferProtocol")
        scheme = urlsplit(image_url).scheme.upper()
        if protocols is not None and scheme:
            if scheme not in protocols:
                raise NotSupported(self.target, f"the BMC cannot fetch {scheme} images "
                                   f"(allowed: {', '.join(protocols)})")
            body["TransferProtocol"] = scheme
        if targets:
            body["Targets"] = targets
        return self._follow(self.transport.request("POST", target, body), progress)

    def firmware_push(self, image: Path, targets: list[str] | None = None,
                      progress: ProgressCallback | None = None) -> TaskProgress:
        update = self._update_service()
        uri = update.get("MultipartHttpPushUri")
        if not isinstance(uri, str):
            raise NotSupported(self.target, "the UpdateService offers no MultipartHttpPushUri")
        try:
            data = image.read_bytes()
        except OSError as exc:
            raise OperationFailed(self.target, f"cannot read {image}: {exc.strerror}") from None
        limit = update.get("MaxImageSizeBytes")
        if isinstance(limit, int) and len(data) > limit:
            raise OperationFailed(self.target, f"{image.name} is {len(data)} bytes; the BMC "
                                  f"takes at most {limit} (MaxImageSizeBytes)")
        parameters: Json = {"Targets": targets or []}
        parts: list[tuple[str, tuple[str | None, str | bytes, str]]] = [
            ("UpdateParameters", (None, json.dumps(parameters), "application/json")),
            ("UpdateFile", (image.name, data, "application/octet-stream"))]
        return self._follow(self.transport.upload(uri, parts), progress)
