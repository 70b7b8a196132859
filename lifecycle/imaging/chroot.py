"""Work inside an image root: mounts in a private namespace, apt, and the scrub before packing.

apt, dpkg maintainer scripts and update-initramfs need /proc, /sys and /dev in
the root. Mounting them in the builder's own namespace leaks mounts when a
build is killed, and a later ``rm -rf`` of the root would then descend into
the host's /dev. So every step runs as ``unshare --mount --propagation private
-- python -m lifecycle.imaging.chroot ROOT -- CMD…``: this module's ``main``
mounts, then execs CMD; the mounts vanish with the namespace.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from lifecycle.imaging.common import BuildError, run

# Services must not start inside the build (they would run on the builder); see invoke-rc.d(8).
POLICY_RC_D = "#!/bin/sh\n# racklife image build: no daemon starts while the image is built\nexit 101\n"

# Files the builder or package scripts leave that must not be in a golden image: secrets every node
# would share (SSH host keys; the munge key munge's postinst makes, which the join workflow replaces with
# the cluster's), one machine's identity (machine-id) or one build's traces (logs, apt lists, caches).
SCRUB_GLOBS = (
    "etc/munge/munge.key", "var/cache/ldconfig/aux-cache",
    "etc/ssh/ssh_host_*", "var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb",
    "var/cache/debconf/*-old", "var/lib/dpkg/*-old", "var/log/*.log", "var/log/apt/*", "root/.ansible",
    "tmp/*", "var/tmp/*",
    "etc/resolv.conf", "usr/sbin/policy-rc.d", "var/lib/dbus/machine-id", "etc/*-", "etc/ssh/ssh_known_hosts",
)
HOSTNAME = "localhost\n"
HOSTS = "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"


def chroot_env(epoch: int | None) -> dict[str, str]:
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
           "HOME": "/root", "DEBIAN_FRONTEND": "noninteractive", "DEBCONF_NONINTERACTIVE_SEEN": "true"}
    if epoch is not None:
        env["SOURCE_DATE_EPOCH"] = str(epoch)
    return env


def in_namespace(root: Path, argv: list[str], apt_cache: Path | None = None) -> list[str]:
    """argv that runs ``argv`` (on the builder) with the root's pseudo file systems mounted, privately."""
    cache = ["--apt-cache", str(apt_cache)] if apt_cache else []
    return ["unshare", "--mount", "--propagation", "private", "--",
            sys.executable, "-m", "lifecycle.imaging.chroot", str(root), *cache, "--", *argv]


def in_root(root: Path, argv: list[str], apt_cache: Path | None = None) -> list[str]:
    """argv that runs ``argv`` inside the root (chroot), with its pseudo file systems mounted."""
    return in_namespace(root, ["chroot", str(root), *argv], apt_cache)


def run_in_root(root: Path, argv: list[str], epoch: int | None, apt_cache: Path | None = None,
                timeout: float = 1200) -> str:
    return run(in_root(root, argv, apt_cache), env=chroot_env(epoch), timeout=timeout)


def write(root: Path, rel: str, text: str, mode: int = 0o644) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.write_text(text)
    path.chmod(mode)


def deb822_sources(sources: list[tuple[str, list[str], list[str]]], keyring: str) -> str:
    stanzas = [f"Types: deb\nURIs: {uri}\nSuites: {' '.join(suites)}\nComponents: {' '.join(comps)}\n"
               f"Signed-By: {keyring}\n" for uri, suites, comps in sources]
    return "\n".join(stanzas)


def prepare(root: Path, sources: str, builder_resolv: Path = Path("/etc/resolv.conf")) -> None:
    """Point apt at the image's sources, keep daemons from starting, and give the build DNS."""
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    write(root, "etc/apt/sources.list.d/image.sources", sources)
    write(root, "etc/apt/apt.conf.d/90racklife", 'APT::Install-Recommends "false";\n'
          'APT::Install-Suggests "false";\nAcquire::Languages "none";\n')
    write(root, "usr/sbin/policy-rc.d", POLICY_RC_D, 0o755)
    write(root, "etc/hostname", HOSTNAME)
    write(root, "etc/hosts", HOSTS)
    if builder_resolv.exists():
        write(root, "etc/resolv.conf", builder_resolv.read_text())


def apt_update(root: Path, apt_cache: Path) -> None:
    apt_cache.mkdir(parents=True, exist_ok=True)
    (apt_cache / "partial").mkdir(exist_ok=True)
    run_in_root(root, ["apt-get", "update", "-q"], None, apt_cache)


def apt_install(root: Path, packages: list[str], apt_cache: Path, epoch: int | None) -> None:
    run_in_root(root, ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], epoch, apt_cache)


def installed(root: Path) -> dict[str, tuple[str, str]]:
    """name -> (version, architecture) of every installed package, from dpkg in the root."""
    fmt = "${db:Status-Status}\t${Package}\t${Version}\t${Architecture}\n"
    out = run_in_root(root, ["dpkg-query", "-W", "-f", fmt], None)
    pkgs: dict[str, tuple[str, str]] = {}
    for line in out.splitlines():
        status, name, version, arch = line.split("\t")
        if status == "installed":
            pkgs[name] = (version, arch)
    return pkgs


def scrub(root: Path) -> list[str]:
    """Remove what identifies the builder or one build; empty machine-id (systemd makes one at boot)."""
    removed = []
    for pattern in SCRUB_GLOBS:
        for path in sorted(root.glob(pattern)):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(str(path.relative_to(root)))
    if (root / "etc/machine-id").exists():
        write(root, "etc/machine-id", "", 0o444)
    return removed


def _mount(argv: list[str]) -> None:
    subprocess.run(["mount", *argv], check=True)


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecycle.imaging.chroot",
                                     description="Mount /proc, /sys, /dev, /run, /tmp in ROOT, then exec CMD.")
    parser.add_argument("root", type=Path)
    parser.add_argument("--apt-cache", type=Path)
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.error("usage: ROOT [--apt-cache DIR] -- CMD...")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    cmd = argv[split + 1:]
    root: Path = args.root.resolve()
    if os.readlink("/proc/self/ns/mnt") == os.readlink(f"/proc/{os.getppid()}/ns/mnt"):
        parser.error("run me under `unshare --mount --propagation private`: I would mount on the host")
    for sub in ("proc", "sys", "dev", "run", "tmp"):
        (root / sub).mkdir(exist_ok=True)
    _mount(["-t", "proc", "proc", str(root / "proc")])
    _mount(["-t", "sysfs", "sysfs", str(root / "sys")])
    _mount(["--rbind", "/dev", str(root / "dev")])
    _mount(["-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(root / "run")])
    _mount(["-t", "tmpfs", "-o", "mode=1777", "tmpfs", str(root / "tmp")])
    if args.apt_cache:
        archives = root / "var/cache/apt/archives"
        archives.mkdir(parents=True, exist_ok=True)
        _mount(["--bind", str(args.apt_cache), str(archives)])
    env = dict(environ if environ is not None else os.environ)
    try:
        os.execvpe(cmd[0], cmd, env)  # noqa: S606 (argv, never a shell)
    except FileNotFoundError:
        raise BuildError(f"{cmd[0]} is not installed") from None


if __name__ == "__main__":
    sys.exit(main())
