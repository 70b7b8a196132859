"""Build a ``rootfs`` image: debootstrap, pinned packages, roles, then kernel, initrd, squashfs and manifest.

A golden image is a whole distribution made the same way every time. The base
system comes from debootstrap (its download cached as a tarball keyed by
everything that shapes it); pinned packages are installed with apt (their
.debs cached across builds); the roles of roles/ are applied twice through the
chroot connection (the second run must change nothing); the root is scrubbed
of what identifies the builder or one build; and the root is packed into a
squashfs with every file time set to the definition's ``source_date_epoch``.
The manifest lists every installed package with its version, as dpkg in the
root reports it, and the sha256 of every artefact. Same inputs give the same
package set and manifest, apart from the build time.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lifecycle import __version__
from lifecycle.imaging import chroot, roles
from lifecycle.imaging.common import BuildError, run, sha256
from lifecycle.imaging.definition import Base, ImageDefinition

Log = Callable[[str], None]

KEYRINGS = {
    "debian": "/usr/share/keyrings/debian-archive-keyring.gpg",
    "ubuntu": "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
}
TOOLS = ("debootstrap", "mksquashfs", "unshare", "chroot", "mount")
ARTEFACTS = ("vmlinuz", "initrd.img", "root.squashfs")


@dataclass(frozen=True)
class RootfsBuild:
    manifest: dict[str, Any]
    target: Path
    roles_first: roles.Recap
    roles_second: roles.Recap
    seconds: float


def _debootstrap_argv(base: Base) -> list[str]:
    include = [f"--include={','.join(sorted(base.include))}"] if base.include else []
    return ["debootstrap", f"--variant={base.variant}", f"--arch={base.arch}",
            f"--keyring={KEYRINGS[base.distro]}", *include]


def base_tarball(base: Base, cache: Path, log: Log) -> Path:
    """The debootstrap download for ``base``, made once and reused while nothing that shapes it changes."""
    assert base.mirror is not None
    version = run(["dpkg-query", "-W", "-f", "${Version}", "debootstrap"]).strip()
    key = hashlib.sha256(json.dumps([_debootstrap_argv(base), base.release, base.mirror, version]).encode())
    tarball = cache / f"{base.distro}-{base.release}-{base.arch}-{base.variant}-{key.hexdigest()[:16]}.tgz"
    if tarball.exists():
        log(f"debootstrap: cached {tarball.name}")
        return tarball
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="debootstrap-", dir=cache) as tmp:
        part = Path(tmp) / "base.tgz"
        log(f"debootstrap: downloading {base.release} from {base.mirror}")
        run([*_debootstrap_argv(base), f"--make-tarball={part}", base.release, str(Path(tmp) / "root"),
             base.mirror], timeout=1800)
        os.replace(part, tarball)
    return tarball


def base_root(base: Base, cache: Path, root: Path, log: Log) -> None:
    """debootstrap ``base`` into ``root``; the installed base is kept beside its download, so a rebuild
    only unpacks a tar (debootstrap's second stage is the same work on the same .debs every time)."""
    assert base.mirror is not None
    tarball = base_tarball(base, cache, log)
    installed = tarball.with_suffix(".root.tar")
    tar = ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls"]
    if installed.exists():
        log(f"debootstrap: cached base root {installed.name}")
        root.mkdir(parents=True)
        run([*tar, "-xpf", str(installed), "-C", str(root)], timeout=1800)
        return
    log(f"debootstrap: installing the base into {root}")
    run(["unshare", "--mount", "--propagation", "private", "--", *_debootstrap_argv(base),
         f"--unpack-tarball={tarball}", base.release, str(root), base.mirror], timeout=1800)
    part = installed.with_suffix(".part")
    run([*tar, "--sort=name", "-cpf", str(part), "-C", str(root), "."], timeout=1800)
    os.replace(part, installed)


def role_pins(defn: ImageDefinition) -> list[str]:
    """``name=version`` specs the roles install: every ``*_packages`` list in their variables."""
    return [spec for role in defn.roles for key, value in sorted(role.vars.items())
            if key.endswith("_packages") and isinstance(value, list)
            for spec in value if isinstance(spec, str) and "=" in spec]


def _check_pins(defn: ImageDefinition, have: dict[str, tuple[str, str]]) -> dict[str, str]:
    pins = {}
    for spec in (defn.kernel.package, *defn.packages, *role_pins(defn)):
        name, _, version = spec.partition("=")
        if name not in have:
            raise BuildError(f"{name} is not installed in the image")
        if version:
            if have[name][0] != version:
                raise BuildError(f"{name}: pinned {version}, installed {have[name][0]}")
            pins[name] = version
    return pins


def _kernel(root: Path, target: Path) -> str:
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1:
        raise BuildError(f"expected one kernel in /boot, found {[k.name for k in kernels]}")
    kver = kernels[0].name.removeprefix("vmlinuz-")
    initrd = root / "boot" / f"initrd.img-{kver}"
    if not initrd.is_file():
        raise BuildError(f"no initrd for kernel {kver} (is initramfs-tools in the image?)")
    shutil.copyfile(kernels[0], target / "vmlinuz")
    shutil.copyfile(initrd, target / "initrd.img")
    return kver


def squashfs(root: Path, dest: Path, epoch: int) -> None:
    """Pack ``root`` reproducibly: sorted entries, one file time, fixed creation time.

    zstd level 6: measured on a 373 MB Debian root, 6 s of CPU against 80 s for the default level 15,
    for an image 8 % larger.
    """
    dest.unlink(missing_ok=True)
    run(["mksquashfs", str(root), str(dest), "-noappend", "-comp", "zstd", "-Xcompression-level", "6",
         "-reproducible",
         "-all-time", str(epoch), "-mkfs-time", str(epoch), "-quiet", "-no-progress"], timeout=1800)


def _extra_vars(defn: ImageDefinition, extra: dict[str, Any]) -> None:
    names = [r.name for r in defn.roles]
    stray = [k for k in extra if not any(k.startswith(f"{n}_") for n in names)]
    if stray:
        raise BuildError(f"variables {stray} belong to no role of {defn.name} ({', '.join(names)})")


@contextlib.contextmanager
def _cache_lock(apt_cache: Path, log: Log) -> Iterator[None]:
    """Hold the shared apt archive for this build: apt in a second build's root would find it
    locked and fail at once ("Unable to lock directory"), so concurrent builds take turns."""
    apt_cache.parent.mkdir(parents=True, exist_ok=True)
    with (apt_cache.parent / f".{apt_cache.name}.build-lock").open("w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"apt: waiting for another build using {apt_cache}")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def build_rootfs(defn: ImageDefinition, defdir: Path, out: Path, cache: Path, log: Log = lambda _: None,
                 role_vars: dict[str, Any] | None = None) -> RootfsBuild:
    """Build ``defn`` into ``out/NAME-VERSION/`` (vmlinuz, initrd.img, root.squashfs, manifest.json)."""
    started = time.monotonic()
    extra = role_vars or {}
    _extra_vars(defn, extra)
    if os.geteuid() != 0:
        raise BuildError("a rootfs image build needs root (debootstrap, chroot, mounts)")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise BuildError(f"missing {missing}: apt-get install debootstrap squashfs-tools util-linux mount")
    epoch = defn.source_date_epoch
    assert epoch is not None and defn.base.mirror is not None
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{defn.name}-{defn.version}"
    with tempfile.TemporaryDirectory(prefix=f".build-{defn.name}-", dir=out) as tmp:
        work = Path(tmp)
        roles.preflight(list(defn.roles), extra, work / "preflight")
        root = work / "root"
        base_root(defn.base, cache / "debootstrap", root, log)
        sources = [(s.uri, s.suites, s.components) for s in defn.base.sources]
        chroot.prepare(root, chroot.deb822_sources(sources, KEYRINGS[defn.base.distro]))
        for dest, src in sorted(defn.files.items()):
            chroot.write(root, dest.lstrip("/"), (defdir / src).read_text())
        apt_cache = cache / "apt" / f"{defn.base.distro}-{defn.base.release}-{defn.base.arch}"
        with _cache_lock(apt_cache, log):
            log(f"apt: installing {len(defn.packages) + 1} pinned packages and their dependencies")
            chroot.apt_update(root, apt_cache)
            chroot.apt_install(root, list(defn.packages), apt_cache, epoch)
            # The kernel last, alone: its postinst makes the initrd once, with every initramfs hook
            # (live-boot, busybox) already in place, instead of once per package that triggers it.
            chroot.apt_install(root, [defn.kernel.package], apt_cache, epoch)
            first, second = roles.apply(root, list(defn.roles), extra, work / "ansible", epoch, apt_cache, log)
        log(f"roles: second run ok={second.ok} changed={second.changed}")
        packages = chroot.installed(root)
        pins = _check_pins(defn, packages)
        chroot.scrub(root)
        stage = work / "stage"  # moved to target when complete: readers never see half an image
        stage.mkdir()
        kver = _kernel(root, stage)
        log("squashfs: packing the root")
        squashfs(root, stage / "root.squashfs", epoch)
        manifest = _manifest(defn, kver, pins, packages, stage)
        (stage / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if target.exists():
            shutil.rmtree(target)
        stage.rename(target)
    seconds = time.monotonic() - started
    log(f"built {target} in {seconds:.0f} s")
    return RootfsBuild(manifest, target, first, second, seconds)


def _manifest(defn: ImageDefinition, kver: str, pins: dict[str, str], packages: dict[str, tuple[str, str]],
              stage: Path) -> dict[str, Any]:
    return {
        "name": defn.name,
        "version": defn.version,
        "kind": defn.kind,
        "base": defn.base.model_dump(),
        "kernel_version": kver,
        "pinned": pins,
        "roles": [r.name if r.tasks_from is None else f"{r.name}/{r.tasks_from}" for r in defn.roles],
        "left_out": [x.model_dump() for x in defn.left_out],
        "source_date_epoch": defn.source_date_epoch,
        "packages": [{"name": n, "version": v, "architecture": a} for n, (v, a) in sorted(packages.items())],
        "artefacts": {f: {"sha256": sha256(stage / f), "size": (stage / f).stat().st_size} for f in ARTEFACTS},
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "builder": {"name": "racklife", "version": __version__},
    }
