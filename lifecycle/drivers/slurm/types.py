"""What racklife knows about Slurm objects, in the field's words, independent of how they were read.

scontrol text, sinfo columns and slurmrestd JSON all become these frozen
dataclasses, so the rest of racklife never sees a vendor dict. The state
tables map Slurm's vocabulary (base state plus flags, sinfo's short names and
suffixes) onto one ``NodeState``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

BASE_STATES = frozenset(
    {"idle", "allocated", "mixed", "down", "error", "future", "unknown", "completing"}
)

# sinfo %T/%t names → (base state, flags). Long names first, then short ones.
SINFO_STATES: dict[str, tuple[str, frozenset[str]]] = {
    "idle": ("idle", frozenset()),
    "allocated": ("allocated", frozenset()),
    "alloc": ("allocated", frozenset()),
    "mixed": ("mixed", frozenset()),
    "mix": ("mixed", frozenset()),
    "down": ("down", frozenset()),
    "error": ("error", frozenset()),
    "future": ("future", frozenset()),
    "futr": ("future", frozenset()),
    "unknown": ("unknown", frozenset()),
    "unk": ("unknown", frozenset()),
    "completing": ("idle", frozenset({"COMPLETING"})),
    "comp": ("idle", frozenset({"COMPLETING"})),
    "drained": ("idle", frozenset({"DRAIN"})),
    "drain": ("idle", frozenset({"DRAIN"})),
    "draining": ("allocated", frozenset({"DRAIN"})),
    "drng": ("allocated", frozenset({"DRAIN"})),
    "maint": ("idle", frozenset({"MAINTENANCE"})),
    "reserved": ("idle", frozenset({"RESERVED"})),
    "resv": ("idle", frozenset({"RESERVED"})),
    "planned": ("idle", frozenset({"PLANNED"})),
    "inval": ("unknown", frozenset({"INVALID_REG"})),
    "powered_down": ("idle", frozenset({"POWERED_DOWN"})),
    "powering_up": ("idle", frozenset({"POWERING_UP"})),
    "powering_down": ("idle", frozenset({"POWERING_DOWN"})),
    "reboot_requested": ("idle", frozenset({"REBOOT_REQUESTED"})),
}

# sinfo's one-character suffixes on a state name.
SINFO_SUFFIXES: dict[str, str] = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}


@dataclass(frozen=True)
class NodeState:
    base: str
    flags: frozenset[str] = frozenset()

    @classmethod
    def from_scontrol(cls, text: str) -> NodeState:
        """``IDLE+DRAIN``, ``MIXED+DRAIN``, ``IDLE+CLOUD+POWERED_DOWN``, ``DOWN*+DRAIN``."""
        parts = [p for p in text.strip().split("+") if p]
        if not parts:
            return cls("unknown")
        flags: set[str] = set()
        base = parts[0]
        if base.endswith("*"):
            base = base[:-1]
            flags.add("NOT_RESPONDING")
        for p in parts[1:]:
            flags.add(p.rstrip("*").upper())
        return cls(_base(base), frozenset(flags))

    @classmethod
    def from_sinfo(cls, text: str) -> NodeState:
        """``drain*``, ``idle~``, ``draining``, ``alloc``, ``drained*``."""
        name = text.strip().lower()
        flags: set[str] = set()
        while name and name[-1] in SINFO_SUFFIXES:
            flags.add(SINFO_SUFFIXES[name[-1]])
            name = name[:-1]
        if name not in SINFO_STATES:
            return cls("unknown", frozenset({*flags, f"UNRECOGNISED:{text.strip()}"}))
        base, extra = SINFO_STATES[name]
        return cls(base, frozenset(flags | extra))

    @classmethod
    def from_rest(cls, state: str, flags: list[str]) -> NodeState:
        return cls(_base(state), frozenset(f.upper() for f in flags))

    @property
    def drain(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def busy(self) -> bool:
        return self.base in ("allocated", "mixed", "completing") or "COMPLETING" in self.flags

    @property
    def drained(self) -> bool:
        """Drained and empty: nothing runs, nothing new will start."""
        return self.drain and not self.busy

    @property
    def draining(self) -> bool:
        return self.drain and self.busy

    @property
    def powered_down(self) -> bool:
        return "POWERED_DOWN" in self.flags

    @property
    def responding(self) -> bool:
        return "NOT_RESPONDING" not in self.flags

    @property
    def serving(self) -> bool:
        """Slurm would start a job on the node now: up, responding, not drained, down or powered down."""
        return (self.base in ("idle", "allocated", "mixed", "completing") and self.responding and not self.drain
                and not self.powered_down and not self.flags & {"POWER_DOWN", "POWERING_DOWN", "POWERING_UP", "FAIL",
                                                                "REBOOT_ISSUED"})

    def __str__(self) -> str:
        return "+".join([self.base, *sorted(self.flags)])


def _base(text: str) -> str:
    low = text.strip().lower()
    return low if low in BASE_STATES else "unknown"


OwnerKind = Literal["racklife", "other", "none"]

# "racklife:<run-id>: human reason"; run ids are short tokens without ':' or spaces.
RACKLIFE_REASON = re.compile(r"^racklife:(?P<run>[A-Za-z0-9._-]{1,64}):\s?(?P<human>.*)$", re.S)


@dataclass(frozen=True)
class DrainOwner:
    """Who set a node's drain/down reason. ``none``: no reason at all (never ours)."""

    kind: OwnerKind
    run_id: str | None = None
    user: str | None = None
    reason: str = ""

    @classmethod
    def of(cls, reason: str, user: str | None = None) -> DrainOwner:
        reason = reason.strip()
        if not reason or reason in ("none", "(null)"):
            return cls("none", user=user)
        m = RACKLIFE_REASON.match(reason)
        if m:
            return cls("racklife", run_id=m.group("run"), user=user, reason=reason)
        return cls("other", user=user, reason=reason)

    def describe(self) -> str:
        if self.kind == "racklife":
            return f"racklife run {self.run_id}"
        if self.kind == "other":
            return f"{self.user or 'someone else'} ({self.reason!r})"
        return "nobody (no reason set)"


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: NodeState
    reason: str = ""
    reason_user: str | None = None
    reason_time: str | None = None
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    gres: str = ""
    cpus: int = 0
    alloc_cpus: int = 0
    real_memory_mb: int = 0
    slurmd_start: str | None = None
    """When the node's slurmd last started (``SlurmdStartTime``): it changes when the node has rebooted."""

    @property
    def owner(self) -> DrainOwner:
        return DrainOwner.of(self.reason, self.reason_user)


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str
    """Upper case, as Slurm says it: RUNNING, PENDING, COMPLETING, …"""
    nodes: tuple[str, ...] = ()
    partition: str = ""
    user: str = ""
    name: str = ""
    reason: str = ""
    restarts: int = 0
    requeue: bool = True

    @property
    def active(self) -> bool:
        """Holds resources on its nodes."""
        return self.state in ACTIVE_JOB_STATES


ACTIVE_JOB_STATES = frozenset(
    {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
     "RESIZING"}
)


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: tuple[str, ...]
    start: str
    end: str
    flags: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
