"""What a node needs after an XID: one table from NVIDIA's resolution buckets to a repair action.

The XID parser (:mod:`burnin.parsers.xid`) already maps every code to the
resolution bucket of NVIDIA's catalog ("Immediate Action"). Repair needs the
next step — what racklife does to the node — and that step must be one
decision in one place, not ifs scattered through the callers, so that an
operator can read the whole policy and a test can check it covers every code
the catalog knows.

The actions are the ones racklife can perform on a bare-metal node:

- ``none``: nothing on the node (informational, or the application's fault);
- ``reset-gpu``: drain, ``nvidia-smi -r``, re-test;
- ``reboot``: drain, a BMC power cycle, re-test;
- ``reimage``: drain, reprovision the pool's image (driver or firmware update), re-test;
- ``rma``: quarantine for hands-on work (cooling, power, NVLink reseat, an NVIDIA case).

Fail closed: a bucket missing from the table, or a code the catalog does not
know (bucket ``UNKNOWN``), maps to ``rma`` — a person looks at the node —
never to ``none``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from burnin.parsers import xid


class RepairAction(StrEnum):
    NONE = "none"
    RESET_GPU = "reset-gpu"
    REBOOT = "reboot"
    REIMAGE = "reimage"
    RMA = "rma"


@dataclass(frozen=True)
class RepairRule:
    """The action for one resolution bucket, and why (recorded as the repair's reason)."""

    bucket: str
    action: RepairAction
    why: str


_RULES = (
    RepairRule("IGNORE", RepairAction.NONE, "informational"),
    RepairRule("RESTART_APP", RepairAction.NONE, "the application's fault: restart it, the node is sound"),
    RepairRule("RESET_GPU", RepairAction.RESET_GPU, "NVIDIA: reset the GPU and re-run diagnostics"),
    RepairRule("WORKFLOW_XID_48", RepairAction.RESET_GPU,
               "double-bit ECC error: NVIDIA's workflow ends in a GPU reset"),
    RepairRule("RESTART_BM", RepairAction.REBOOT, "NVIDIA: reboot the bare-metal host"),
    RepairRule("RESTART_VM", RepairAction.REBOOT, "NVIDIA: restart the VM; on bare metal the VM is the host"),
    RepairRule("UPDATE_SWFW", RepairAction.REIMAGE,
               "NVIDIA: update the driver and firmware, which the pool's image carries"),
    RepairRule("CHECK_MECHANICALS", RepairAction.RMA, "power delivery or cooling: hands-on"),
    RepairRule("CHECK_UVM", RepairAction.RMA,
               "UVM driver or memory use: needs a person's judgement, no automatic action clears it"),
    RepairRule("WORKFLOW_XID_45", RepairAction.RMA,
               "follows another Xid whose guidance applies; alone it is not enough to act on automatically"),
    RepairRule("WORKFLOW_NVLINK_ERR", RepairAction.RMA, "NVLink error: reseat or field diagnostics, hands-on"),
    RepairRule("WORKFLOW_NVLINK5_ERR", RepairAction.RMA, "NVLink5 error: reseat or field diagnostics, hands-on"),
    RepairRule("UNEXPECTED_ERR_REPORT_ISSUE", RepairAction.RMA,
               "unexpected on data-centre GPUs: open an NVIDIA case"),
    RepairRule("UNKNOWN", RepairAction.RMA, "not in NVIDIA's XID catalog: investigate"),
)

TABLE: dict[str, RepairRule] = {r.bucket: r for r in _RULES}


@dataclass(frozen=True)
class XidRepair:
    """The repair an XID calls for, with the catalog's facts it was decided on."""

    xid: int
    mnemonic: str
    bucket: str
    action: RepairAction
    reason: str


def for_bucket(bucket: str) -> RepairRule:
    """The bucket's rule; a bucket the table does not list is ``rma`` (fail closed)."""
    rule = TABLE.get(bucket)
    if rule is None:
        return RepairRule(bucket, RepairAction.RMA, f"resolution bucket {bucket!r} is not in the repair table")
    return rule


def for_xid(code: int) -> XidRepair:
    """The repair for XID ``code``: its catalog bucket through the table (unknown code: ``rma``)."""
    entry = xid.lookup(code)
    rule = for_bucket(entry.bucket)
    name = f" {entry.mnemonic}" if entry.mnemonic else ""
    return XidRepair(code, entry.mnemonic, entry.bucket, rule.action,
                     f"Xid {code}{name} ({entry.bucket}): {rule.why}")
