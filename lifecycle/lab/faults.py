"""Fault profiles for simulated nodes, and the `--faults FILE` format.

The lab's fake GPU tools answer according to a node's fault profile. A profile
is chosen per node at `lab up` (from a YAML file) and can be changed on a
running lab: the tools read the node's fault file on every call, so writing a
new one is an injection. This module owns the catalogue of profiles and both
file formats, so the CLI, the node and the tools agree on them.

The YAML file maps node names to a profile, either as a bare name or as a
mapping that also says which GPU (or InfiniBand port, for ``ib-down`` and
``ib-slow``) is hit:

    node-03: xid79
    node-05: {profile: pcie-degraded, gpu: 2}

Every problem in the file is reported at once, with its line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from lifecycle.model import vocab

PROFILES: dict[str, str] = {
    "healthy": "everything passes",
    "xid79": "one GPU has fallen off the bus (Xid 79): NVML calls fail, node needs a reboot",
    "ecc": "uncorrectable ECC errors on one GPU and a failed row remap (Xid 48, Xid 64)",
    "pcie-degraded": "one GPU's PCIe link trained one generation low at half width "
    "(Gen5 x16 -> Gen4 x8)",
    "slow-nvlink": "NVLink bandwidth is low: nccl-tests busbw about a third of the SKU's",
    "ib-down": "one InfiniBand port is down (State: Down, Physical state: Disabled)",
    "ib-slow": "one InfiniBand link is Active at full rate but loses packets (a bad cable): ibstat and "
    "single-node checks look healthy; multi-node all_reduce through that rail runs at a quarter speed",
    "dcgm-power": "DCGM targeted power fails on one GPU (power below the minimum ratio)",
    "pxe-off": "network boot is disabled in the node's firmware: a one-time PXE boot falls through to the "
    "local disk, so the node never fetches its iPXE script and never phones home",
    "gpu-held": "a process that never exits holds one GPU (a stuck client): `nvidia-smi -r` is refused with "
    "'in use by another process'; the other tools are unaffected",
    "driver-unapplied": "the lab's driver install hook says it installed the version and exits 0, but installs "
    "nothing: the node boots its old driver again (the tools are unaffected)",
    "no-sanitize-log": "the node's drives keep no NVMe Sanitize Status log (no Sanitize feature, as QEMU's "
    "emulated controller): `nvme sanitize-log` is refused, so only sampled reads can verify an erase",
    "pxe-flaky": "the node's first network boot with a boot pending fails (no DHCP answer in time) and "
    "falls through to the local disk; later network boots work",
}

# Faults of a node's emulated Redfish BMC rather than of its tools: the emulator's ``Faults`` fields
# each one sets (``racklife lab fault NODE PROFILE`` sends them to the node's BMC).
BMC_PROFILES: dict[str, tuple[str, dict[str, bool]]] = {
    "bmc-healthy": ("the node's BMC does nothing wrong", {}),
    "bmc-tasks-fail": ("every task of the node's BMC (secure erase, firmware update) ends in Exception",
                       {"fail_tasks": True}),
    "erase-unverified": ("the BMC's secure erase task says Completed but the drive reads back Critical",
                         {"erase_leaves_data": True}),
    "erase-not-done": ("the BMC's secure erase task says Completed and the drive reads back healthy, but nothing "
                       "reached the drive: its Sanitize Status log still says never sanitized and its data is "
                       "all still there (sampled reads find every block unchanged)",
                       {"erase_not_done": True}),
    "firmware-unapplied": ("the BMC's firmware update task says Completed but installs nothing (the version "
                           "reads as before)", {"update_keeps_version": True}),
    "bios-unapplied": ("staged BIOS settings are not applied at the next boot (they stay pending)",
                       {"bios_settings_fail": True}),
}

FAULT_FILE = "fault.json"
KERNEL_LOG_FILE = "kernel-log.json"
"""The faults a GPU reset cleared, with when the kernel logged them: a real kernel log keeps their Xid lines
after the reset, until the next boot (``dmesg`` keeps printing them; a reboot removes the file)."""

# What clears a fault the way it clears on hardware: "reset" (`nvidia-smi -r` of the GPU it hits) and
# "reboot" (the node's power cycled). A GPU that fell off the bus is back only after a reboot (the driver
# says "Reboot the system to recover this GPU"); a failed row remap is cleared by a GPU reset or a reboot
# (NVIDIA's XID catalog: RESET_GPU for Xid 64). Every other profile is the hardware's (a link, a cable,
# firmware) and survives both.
CLEARED_BY: dict[str, frozenset[str]] = {
    "xid79": frozenset({"reboot"}),
    "ecc": frozenset({"reset", "reboot"}),
    "gpu-held": frozenset({"reboot"}),
}


@dataclass(frozen=True)
class Fault:
    """A node's fault: the profile, and the GPU (or IB port) index it hits."""

    profile: str = "healthy"
    gpu: int = 0

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown fault profile '{self.profile}' ({_known()})")
        if self.gpu < 0:
            raise ValueError("gpu must be 0 or more")


HEALTHY = Fault()


@dataclass(frozen=True)
class FaultProblem:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class FaultFileError(ValueError):
    """The faults file is invalid; ``problems`` lists every problem found."""

    def __init__(self, problems: list[FaultProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def _known() -> str:
    return "known: " + ", ".join(PROFILES)


def _entry(value: Any) -> tuple[str | None, int | None, list[str]]:
    """(profile, gpu, errors) of one YAML value."""
    if isinstance(value, str):
        return value, 0, []
    if not isinstance(value, dict):
        return None, None, ["expected a profile name or {profile: NAME, gpu: N}"]
    errors = [f"unknown key '{k}' (allowed: profile, gpu)" for k in value if k not in ("profile", "gpu")]
    profile = value.get("profile")
    gpu = value.get("gpu", 0)
    if not isinstance(profile, str):
        errors.append("'profile' is required and must be a string")
        profile = None
    if not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0:
        errors.append("'gpu' must be a whole number, 0 or more")
        gpu = None
    return profile, gpu, errors


def parse_faults(
    text: str, file: str = "<faults>", nodes: Mapping[str, int] | None = None
) -> dict[str, Fault]:
    """Parse a faults file; ``nodes`` (name -> GPU count), when given, is checked against."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise FaultFileError([FaultProblem(file, line, f"not valid YAML: {exc.problem}")]) from None
    if root is None:
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise FaultFileError(
            [FaultProblem(file, root.start_mark.line + 1, "expected a mapping of node name -> profile")]
        )
    problems: list[FaultProblem] = []
    out: dict[str, Fault] = {}
    seen: set[str] = set()
    for key_node, value_node in root.value:
        line = key_node.start_mark.line + 1
        name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(name, str) or not vocab.is_node_name(name):
            problems.append(FaultProblem(file, line, f"'{name}' is not a node name"))
            continue
        if name in seen:
            problems.append(FaultProblem(file, line, f"{name}: listed twice"))
            continue
        seen.add(name)
        # Each value from its own node: a duplicate key must not see the other's value.
        profile, gpu, errors = _entry(yaml.safe_load(yaml.serialize(value_node)))
        problems += [FaultProblem(file, line, f"{name}: {e}") for e in errors]
        if profile is not None and profile not in PROFILES:
            problems.append(FaultProblem(file, line, f"{name}: unknown profile '{profile}' ({_known()})"))
            continue
        if nodes is not None and name not in nodes:
            problems.append(
                FaultProblem(file, line, f"{name}: no such node in the lab (nodes: {', '.join(sorted(nodes))})")
            )
            continue
        if nodes is not None and gpu is not None and gpu >= nodes[name]:
            problems.append(
                FaultProblem(file, line, f"{name}: gpu {gpu} does not exist (the node has {nodes[name]} GPUs)")
            )
            continue
        if profile is not None and gpu is not None and not errors:
            out[name] = Fault(profile, gpu)
    if problems:
        raise FaultFileError(problems)
    return out


def load_faults(path: str | Path, nodes: Mapping[str, int] | None = None) -> dict[str, Fault]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise FaultFileError([FaultProblem(str(p), 0, f"cannot read: {exc.strerror}")]) from None
    return parse_faults(text, str(p), nodes)


def write_fault(node_dir: Path, fault: Fault) -> None:
    """Set a node's fault; atomic, so a tool running at the same time sees old or new."""
    tmp = node_dir / f".{FAULT_FILE}.tmp"
    tmp.write_text(json.dumps(asdict(fault)) + "\n", encoding="utf-8")
    os.replace(tmp, node_dir / FAULT_FILE)


def read_fault(node_dir: Path) -> Fault:
    """The node's current fault; a missing file means healthy."""
    try:
        data = json.loads((node_dir / FAULT_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return HEALTHY
    return Fault(str(data["profile"]), int(data.get("gpu", 0)))


def clear_faults(node_dir: Path, by: str, gpus: list[int] | None = None) -> Fault:
    """Apply a reset (``by="reset"``, of ``gpus``) or a reboot to the node's fault; return the fault after it."""
    fault = read_fault(node_dir)
    if by == "reboot":
        (node_dir / KERNEL_LOG_FILE).unlink(missing_ok=True)  # a new boot, a new kernel log
    if by in CLEARED_BY.get(fault.profile, frozenset()) and (gpus is None or fault.gpu in gpus):
        if by == "reset":
            _keep_in_kernel_log(node_dir, fault)
        write_fault(node_dir, HEALTHY)
        return HEALTHY
    return fault


@dataclass(frozen=True)
class LoggedFault:
    """A fault a GPU reset cleared, and when the kernel logged it (its fault file's time)."""

    fault: Fault
    at: float


def _keep_in_kernel_log(node_dir: Path, fault: Fault) -> None:
    try:
        at = (node_dir / FAULT_FILE).stat().st_mtime
    except FileNotFoundError:
        return
    kept = [{**asdict(e.fault), "at": e.at} for e in logged_faults(node_dir)]
    tmp = node_dir / f".{KERNEL_LOG_FILE}.tmp"
    tmp.write_text(json.dumps([*kept, {**asdict(fault), "at": at}]) + "\n", encoding="utf-8")
    os.replace(tmp, node_dir / KERNEL_LOG_FILE)


def logged_faults(node_dir: Path) -> list[LoggedFault]:
    """The faults since the last boot whose kernel lines outlived a GPU reset, oldest first."""
    try:
        data = json.loads((node_dir / KERNEL_LOG_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    return [LoggedFault(Fault(str(e["profile"]), int(e.get("gpu", 0))), float(e["at"])) for e in data]
