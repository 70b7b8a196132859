"""A running lab for end-to-end tests, brought up and down with the real `racklife lab` commands."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lifecycle.cli.lab import parse_exports
from lifecycle.lab import rack

_LABS = itertools.count()
EXE = shutil.which("racklife") or str(Path(sys.executable).with_name("racklife"))


def run(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True, timeout=timeout)


class RunningLab:
    def __init__(self, nodes: int, faults: dict[str, str] | None = None, boot_time: float = 1.0,
                 with_vm: bool = False, extra: tuple[str, ...] = ()) -> None:
        assert os.geteuid() == 0, "end-to-end lab tests need root (network namespaces, daemons)"
        self.root = Path(tempfile.mkdtemp(prefix="rle", dir="/tmp"))
        self.root.chmod(0o755)  # the lab's slurmrestd runs as nobody and reads slurm.conf below it
        self.dir = self.root / "lab"
        # One prefix per lab, not per process: a worker can hold a module's lab while a test brings up its
        # own, and `lab up` refuses namespaces of another lab's prefix.
        self.prefix = f"rle{os.getpid() % 10000}x{next(_LABS)}-"
        args = ["lab", "up", "--nodes", str(nodes), "--dir", str(self.dir), "--prefix", self.prefix,
                "--boot-time", str(boot_time), *(["--with-vm"] if with_vm else []), *extra]
        if faults:
            ffile = self.root / "faults.yaml"
            ffile.write_text("".join(f"{k}: {v}\n" for k, v in faults.items()))
            args += ["--faults", str(ffile)]
        res = run(dict(os.environ), *args)
        if res.returncode != 0:
            logs = self.log_tails()  # before down() removes the lab's directory with its logs
            self.down()
            raise AssertionError(f"lab up failed: {res.stdout}\n{res.stderr}\n{logs}")
        exports = run(dict(os.environ), "lab", "env", "--dir", str(self.dir)).stdout
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RACKLIFE_"))}
        # RACKLIFE_DEBUG: an internal error in a lab test prints its traceback into the CI log.
        self.env = base | parse_exports(exports) | {"RACKLIFE_DEBUG": "1"}
        self.inventory = Path(self.env["RACKLIFE_INVENTORY"])

    def status(self) -> dict[str, Any]:
        res = run(dict(os.environ), "lab", "status", "--dir", str(self.dir), "--json")
        assert res.returncode == 0, res.stderr
        data: dict[str, Any] = json.loads(res.stdout)
        return data

    def racklife(self, *args: str, timeout: float = 600,
                 env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run(self.env | (env_extra or {}), *args, timeout=timeout)

    def log_tails(self, lines: int = 30, limit: int = 40_000) -> str:
        """The last ``lines`` of each log under the lab's directory, newest first, up to ``limit`` characters:
        for a failure's message, since ``down`` removes them."""
        found = sorted((p for p in self.dir.rglob("*.log") if p.is_file()), key=lambda p: -p.stat().st_mtime)
        out: list[str] = []
        size = 0
        for p in found:
            tail = "\n".join(p.read_text(errors="replace").splitlines()[-lines:])
            part = f"--- {p.relative_to(self.dir)} (last {lines} lines)\n{tail}"
            if size + len(part) > limit:
                out.append(f"--- {len(found) - len(out)} more log(s) left out")
                break
            out.append(part)
            size += len(part)
        return "\n".join(out) or f"(no logs under {self.dir})"

    def down(self) -> None:
        run(dict(os.environ), "lab", "down", "--dir", str(self.dir), "--yes")
        rack.cleanup(self.dir, self.prefix)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def image_debs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's .deb download cache: the images built here share their kernel package."""
    return tmp_path_factory.mktemp("debs")


@pytest.fixture(scope="session")
def minimal_image(tmp_path_factory: pytest.TempPathFactory, image_debs: Path) -> Path:
    """The minimal image, built once per session into a directory the labs' controllers share."""
    from lifecycle.imaging.build import build
    from lifecycle.imaging.definition import load_definition

    out = tmp_path_factory.mktemp("images")
    defn, defdir = load_definition("minimal")
    build(defn, defdir, out, image_debs)
    return out


@dataclass(frozen=True)
class MaintenanceImage:
    out: Path
    """The directory it was built into (maintenance-1/)."""
    key: Path
    """The private key whose public half the image's SSH server accepts (the test's; never in the image)."""


@pytest.fixture(scope="session")
def maintenance_image(tmp_path_factory: pytest.TempPathFactory, image_debs: Path) -> MaintenanceImage:
    """The maintenance image, built once per session with a key made for the session."""
    from lifecycle.imaging.build import build
    from lifecycle.imaging.definition import load_definition

    keys = tmp_path_factory.mktemp("maintenance-key")
    key = keys / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "racklife-test", "-f", str(key)],
                   check=True, timeout=30)
    out = tmp_path_factory.mktemp("images")
    defn, defdir = load_definition("maintenance")
    build(defn, defdir, out, image_debs, authorized_keys=key.with_suffix(".pub").read_text().splitlines())
    return MaintenanceImage(out, key)


def publish_version(built: Path, into: Path, version: str) -> Path:
    """The built minimal image and a copy of it published as ``version`` (a later build), in ``into``."""
    shutil.copytree(built, into, dirs_exist_ok=True)
    [old] = [d for d in into.iterdir() if (d / "manifest.json").is_file() and d.name.startswith("minimal-")]
    new = into / f"minimal-{version}"
    shutil.copytree(old, new)
    manifest = json.loads((new / "manifest.json").read_text())
    manifest["version"], manifest["built_at"] = version, "2099-01-01T00:00:00+00:00"
    (new / "manifest.json").write_text(json.dumps(manifest))
    return into


def firmware_version(lab: RunningLab, node: str, component: str) -> str:
    """The version the node's BMC reports for ``component`` (its name or its id's last part)."""
    res = lab.racklife("bmc", "firmware", "list", node, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return str(next(c["version"] for c in json.loads(res.stdout)["firmware"]
                    if component in (c["name"], (c["id"] or "").rsplit("/", 1)[-1])))


@contextmanager
def built_lab(nodes: int, image: Path, *, timeout: float = 1500, **lab: Any) -> Iterator[RunningLab]:
    """A lab of ``nodes`` (``lab``: RunningLab's options) that `racklife build` brought into service from
    ``image``; down again after."""
    running = RunningLab(nodes, **lab)
    try:
        res = running.racklife("build", str(running.inventory), "--images", str(image), "--boot-timeout", "60",
                               timeout=timeout)
        assert res.returncode == 0, res.stdout + res.stderr + "\n" + running.log_tails()
        yield running
    finally:
        running.down()


def wait_for(done: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def lab8() -> Iterator[RunningLab]:
    lab = RunningLab(8)
    try:
        yield lab
    finally:
        lab.down()
