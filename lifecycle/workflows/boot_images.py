"""Which built images the boot server publishes, read from their manifests.

An initramfs image (``minimal``) is a kernel and an initrd; a root image
(``debian12-gpu``) adds its squashfs, booted by live-boot (``boot=live
fetch=URL``) with the sha256 from its manifest on the kernel command line.
"""

from __future__ import annotations

import json
from pathlib import Path

from lifecycle.drivers.boot.render import BootImage


def published_images(images_dir: Path, boot_url: str) -> dict[str, BootImage]:
    """name -> the image of every ``NAME-VERSION/manifest.json`` (newest build per name), and
    ``name:version`` -> that build (a reimage or an upgrade names its version)."""
    found: dict[str, tuple[str, BootImage]] = {}
    versions: dict[str, BootImage] = {}
    for manifest_path in sorted(images_dir.glob("*/manifest.json")):
        m = json.loads(manifest_path.read_text())
        rel = manifest_path.parent.name
        base = f"{boot_url}/images/{rel}"
        root = m.get("artefacts", {}).get("root.squashfs") if m.get("kind") == "rootfs" else None
        image = BootImage(
            name=m["name"], version=m["version"],
            kernel_url=f"{base}/vmlinuz", initrd_url=f"{base}/initrd.img",
            rootfs_url=f"{base}/root.squashfs" if root else None,
            rootfs_sha256=str(root["sha256"]) if root else None,
            # A root image boots with live-boot, which fetches the squashfs into RAM over HTTP.
            kernel_args=("console=ttyS0", "boot=live", f"fetch={base}/root.squashfs") if root
            else ("console=ttyS0",),
        )
        built = str(m.get("built_at", ""))
        versions[f"{image.name}:{image.version}"] = image
        if m["name"] not in found or built > found[m["name"]][0]:
            found[m["name"]] = (built, image)
    return {name: image for name, (_, image) in found.items()} | versions
