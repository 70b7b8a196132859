"""Which built images the boot server publishes, read from their manifests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lifecycle.drivers.boot.render import BootImage


def published_images(images_dir: Path, boot_url: str) -> dict[str, dict[str, Any]]:
    """name -> BootImage fields for every ``NAME-VERSION/manifest.json`` (newest build per name)."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for manifest_path in sorted(images_dir.glob("*/manifest.json")):
        m = json.loads(manifest_path.read_text())
        rel = manifest_path.parent.name
        image = BootImage(
            name=m["name"], version=m["version"],
            kernel_url=f"{boot_url}/images/{rel}/vmlinuz", initrd_url=f"{boot_url}/images/{rel}/initrd.img",
            rootfs_url=None, rootfs_sha256=None, kernel_args=("console=ttyS0",),
        )
        built = str(m.get("built_at", ""))
        if m["name"] not in found or built > found[m["name"]][0]:
            found[m["name"]] = (built, image.__dict__ | {"kernel_args": list(image.kernel_args)})
    return {name: fields for name, (_, fields) in found.items()}
