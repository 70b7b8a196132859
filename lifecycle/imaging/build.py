"""Build an image from its definition: ``initramfs`` images here, ``rootfs`` images in rootfs.py.

For an initramfs image the package set is resolved once to exact versions and
recorded; the initramfs is written by our own deterministic cpio writer and
gzip with a zero mtime, so the same inputs give byte-identical artefacts and a
manifest that differs only in its build time.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycle import __version__
from lifecycle.imaging import cpio, elf
from lifecycle.imaging.common import BuildError, run, sha256
from lifecycle.imaging.definition import ImageDefinition

__all__ = ["BuildError", "Package", "build", "resolve"]

Log = Callable[[str], None]


@dataclass(frozen=True)
class Package:
    name: str
    version: str


def resolve(spec: str) -> Package:
    """``name`` or ``name=version`` to an exact package; metapackages (linux-image-amd64) followed once."""
    name, _, version = spec.partition("=")
    if not version:
        show = run(["apt-cache", "show", "--no-all-versions", name])
        fields = dict(re.findall(r"^([A-Za-z-]+): (.*)$", show, re.M))
        if "Version" not in fields:
            raise BuildError(f"package {name} not found in the apt index (run apt-get update)")
        depends = fields.get("Depends", "")
        # A kernel metapackage has no files of its own: take the image it depends on.
        if name.startswith("linux-image-") and re.fullmatch(r"linux-image-[a-z0-9]+", name) and depends:
            return resolve(depends.split(",")[0].split()[0])
        version = fields["Version"]
    return Package(name, version)


def _fetch(pkg: Package, cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    for deb in cache.glob(f"{pkg.name}_*.deb"):
        if run(["dpkg-deb", "-f", str(deb), "Version"]).strip() == pkg.version:
            return deb
    run(["apt-get", "download", "-o", "APT::Sandbox::User=root", f"{pkg.name}={pkg.version}"], cwd=cache)
    for deb in cache.glob(f"{pkg.name}_*.deb"):
        if run(["dpkg-deb", "-f", str(deb), "Version"]).strip() == pkg.version:
            return deb
    raise BuildError(f"apt-get download gave no .deb for {pkg.name} {pkg.version}")


_KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
              "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")


def public_keys(lines: list[str]) -> list[str]:
    """The SSH public keys of an authorized_keys text (comments and blank lines dropped), or BuildError:
    anything that is not a public key (a private key above all) never goes into an image."""
    keys = []
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "PRIVATE KEY" in line:
            raise BuildError(f"authorized keys, line {n}: a private key; give the public key (.pub)")
        parts = line.split()
        if len(parts) < 2 or parts[0] not in _KEY_TYPES:
            raise BuildError(f"authorized keys, line {n}: not an SSH public key (expected one of "
                             f"{', '.join(_KEY_TYPES[:3])}… then the key; no options)")
        try:
            blob = base64.b64decode(parts[1], validate=True)
        except ValueError:
            raise BuildError(f"authorized keys, line {n}: the key is not base64") from None
        if not blob.startswith(len(parts[0]).to_bytes(4, "big") + parts[0].encode()):
            raise BuildError(f"authorized keys, line {n}: the key's blob is not a {parts[0]} key")
        keys.append(line)
    if not keys:
        raise BuildError("authorized keys: no public key given")
    return keys


def fingerprint(key: str) -> str:
    """OpenSSH's SHA256 fingerprint of a public key line."""
    digest = hashlib.sha256(base64.b64decode(key.split()[1])).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _parents(paths: list[str], have: set[str], private: str | None) -> list[cpio.Entry]:
    """The directories ``paths`` need that are not there yet, parents first; ``private`` gets mode 0700."""
    dirs = sorted({str(p) for path in paths for p in Path(path).parents if str(p) != "."} - have)
    return [cpio.Entry(d, stat.S_IFDIR | 0o700) if d == private else cpio.directory(d) for d in dirs]


def build(defn: ImageDefinition, defdir: Path, out: Path, cache: Path, log: Log = lambda _: None,
          authorized_keys: list[str] | None = None) -> dict[str, Any]:
    """Build ``defn`` into ``out/NAME-VERSION/``; return the manifest (also written as manifest.json).

    ``authorized_keys``: the lines of the site's authorized_keys, for a definition with ``authorized_keys``
    (required there, refused elsewhere)."""
    if authorized_keys is not None and defn.authorized_keys is None:
        raise BuildError(f"image {defn.name} takes no authorized keys (its definition has no authorized_keys)")
    keys = public_keys(authorized_keys or []) if defn.authorized_keys else []
    if defn.kind == "rootfs":
        from lifecycle.imaging.rootfs import build_rootfs

        return build_rootfs(defn, defdir, out, cache, log=log).manifest
    if defn.init is None:
        raise BuildError("an initramfs image needs `init`")
    target = out / f"{defn.name}-{defn.version}"
    kernel_pkg = resolve(defn.kernel.package)
    pkgs = [kernel_pkg, *(resolve(p) for p in defn.packages)]
    log(f"packages: {', '.join(f'{p.name} {p.version}' for p in pkgs)}")
    debs = {p: _fetch(p, cache) for p in pkgs}
    with tempfile.TemporaryDirectory(prefix="racklife-image-") as tmp:
        roots: dict[str, Path] = {}
        for p, deb in debs.items():
            roots[p.name] = Path(tmp) / p.name
            run(["dpkg-deb", "-x", str(deb), str(roots[p.name])])
        kroot = roots[kernel_pkg.name]
        vmlinuz = sorted((kroot / "boot").glob("vmlinuz-*"))
        if not vmlinuz:
            raise BuildError(f"{kernel_pkg.name} has no /boot/vmlinuz-*")
        kver = vmlinuz[0].name.removeprefix("vmlinuz-")
        base_dirs = ("bin", "dev", "etc", "lib", "lib/modules", "proc", "sys", "tmp")
        entries = [cpio.directory(d) for d in base_dirs]
        for mod in defn.kernel.modules:
            found = sorted((kroot / "lib" / "modules" / kver).rglob(f"{mod}.ko"))
            if not found:
                raise BuildError(f"kernel {kver} has no module {mod}.ko")
            entries.append(cpio.file(f"lib/modules/{mod}.ko", found[0].read_bytes()))
        busybox = next((r / "bin" / "busybox" for r in roots.values() if (r / "bin" / "busybox").is_file()), None)
        if busybox is None:
            raise BuildError("no package of the image provides /bin/busybox (add busybox-static)")
        entries.append(cpio.file("bin/busybox", busybox.read_bytes(), executable=True))
        entries.append(cpio.symlink("bin/sh", "busybox"))
        entries.append(cpio.file("init", (defdir / defn.init).read_bytes(), executable=True))
        extra: list[cpio.Entry] = []
        if defn.binaries:
            programs = elf.closure(list(roots.values()), defn.binaries)
            extra += [cpio.file(dest, src.read_bytes(), executable=True) for dest, src in sorted(programs.items())]
            log(f"binaries: {len(defn.binaries)} programs, {len(programs) - len(defn.binaries)} libraries")
        extra += [cpio.file(dest.lstrip("/"), (defdir / src).read_bytes(), executable=True)
                  for dest, src in sorted(defn.files.items())]
        private = None
        if defn.authorized_keys:
            path = defn.authorized_keys.lstrip("/")
            private = str(Path(path).parent)
            extra.append(cpio.Entry(path, stat.S_IFREG | 0o600, "".join(k + "\n" for k in keys).encode()))
        entries += _parents([e.path for e in extra], set(base_dirs), private) + extra
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        shutil.copyfile(vmlinuz[0], target / "vmlinuz")
        (target / "initrd.img").write_bytes(cpio.gzipped(cpio.newc(entries)))
    manifest: dict[str, Any] = {
        "name": defn.name,
        "version": defn.version,
        "kind": defn.kind,
        "base": defn.base.model_dump(),
        "kernel_version": kver,
        "packages": [{"name": p.name, "version": p.version, "deb_sha256": sha256(debs[p])}
                     for p in sorted(pkgs, key=lambda x: x.name)],
        "artefacts": {f: {"sha256": sha256(target / f), "size": (target / f).stat().st_size}
                      for f in ("vmlinuz", "initrd.img")},
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "builder": {"name": "racklife", "version": __version__},
    }
    if defn.authorized_keys:
        manifest["authorized_keys"] = {"path": defn.authorized_keys, "fingerprints": [fingerprint(k) for k in keys]}
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    log(f"built {target}")
    return manifest
