"""Erase every drive of a node through its BMC, and certify it with a signed certificate.

A decommissioned server leaves the building; what was on its drives must not.
The certificate is the proof an auditor keeps: which drives (model, serial,
capacity), the method, when each erase started and ended, the BMC task's
result, what was read back and who verified it. A drive is certified erased
only when both accounts agree: the BMC's (its Task and Drive re-read) and the
drive's own, read from maintenance boots of the node
(:mod:`lifecycle.workflows.erase_readback`): its NVMe Sanitize Status log, and
sampled blocks read before and after the erase (:mod:`lifecycle.workflows.sampled_read`;
the one verifier of a drive with no log), whose words and hashes are kept in the
certificate. It is a bundle like the
acceptance evidence — ``certificate.json`` sealed into ``manifest.json`` and
signed with the controller's Ed25519 key (``manifest.sig``) — so
``racklife evidence verify DIR`` checks it the same way.

Fail closed: a BMC that reports no drives, a drive that offers no secure
erase, a task that fails, a read-back that does not show a clean erase
(no maintenance boot, no SSH, a log that says never sanitized or that cannot be read) —
each makes the result ``ok: false`` with the drive and the reason, and the
workflow does not mark the node decommissioned. A certificate is written
either way (a failed erase is certified as failed, ``result: not-erased``),
because the record of an attempt is evidence too.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from acceptance.evidence import seal
from acceptance.signing import ControllerKey
from lifecycle.drivers.bmc.base import Capability, DriveErase, EraseInterface
from lifecycle.drivers.errors import DriverError, NotSupported
from lifecycle.store import shared_store
from lifecycle.store.db import default_home
from lifecycle.workflows.decommission_checks import DecommissionSettings
from lifecycle.workflows.erase_readback import SampleAsk, judge_drive, read_back, read_before
from lifecycle.workflows.node_ops import current_run_id
from lifecycle.workflows.retry import step

CERTIFICATE = "certificate.json"
SCHEMA = "racklife.erase.certificate"
SCHEMA_VERSION = 3
"""2: the read-back from the node (``readback``, per drive ``readback``). 3 adds, and changes nothing of 2:
``sampled`` (the seed, the count, the boot before the erase) and per drive ``readback.sampled`` (method
``sampled-read``, seed, count, block size, device and size before and after, each block's hashes)."""
ACCEPTED_VERSIONS = (2, 3)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@step(idempotent=False)  # not retried on a temporary error (an erase takes long); after a crash it erases again
def erase_drives(node: str) -> dict[str, Any]:
    """Erase every drive the BMC reports; each result with its read-back (never raises for one drive)."""
    from lifecycle.drivers.bmc.factory import unsupported_reason
    from lifecycle.workflows.bmc_calls import open_bmc

    bmc = open_bmc(node)
    try:
        if not isinstance(bmc, EraseInterface):  # IPMI: the pre-check refuses it; a changed inventory still may
            raise NotSupported(bmc.target, unsupported_reason(bmc, Capability.ERASE) or "the BMC cannot erase")
        eraser = bmc
        results: list[dict[str, Any]] = []
        for d in eraser.drives():
            try:
                results.append(asdict(eraser.erase_drive(d.id)))
            except NotSupported as exc:  # a drive with no erase (SimpleStorage): not erased, said so
                now = _now()
                results.append(asdict(DriveErase(d, eraser.erase_method, now, now, "", "not started",
                                                 verification="not erased", problems=(exc.message,))))
        return {"bmc": bmc.hardware_type, "target": bmc.target, "method": eraser.erase_method,
                "verifier": eraser.erase_verifier, "drives": results}
    finally:
        bmc.close()


@step(idempotent=True)  # changes nothing; journaled: a replay samples the same blocks
def sample_seed() -> str:
    """The run's seed for the sampled blocks, chosen when the run first gets here (no one knows it before)."""
    return secrets.token_hex(16)


@step(idempotent=True)  # the directory is the run's: written again it says the same
def write_certificate(node: str, erased: dict[str, Any], back: dict[str, Any], s: DecommissionSettings,
                      before: dict[str, Any] | None = None, ask: SampleAsk | None = None) -> dict[str, Any]:
    rec = shared_store().get(node)
    run_id = current_run_id()
    root = Path(s.certificate_dir or default_home() / "erase-certificates") / f"{node}-{run_id}"
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.iterdir():  # a replay rewrites the bundle whole
        stale.unlink()
    drives = erased.get("drives") or []
    problems = [f"{d['drive']['id']}: {p}" for d in drives for p in d.get("problems") or []]
    read = {d["drive"]["id"]: judge_drive(d["drive"]["serial"], d["drive"]["protocol"], back, before, ask)
            for d in drives}
    problems += [f"{i}: read back: {r['reason']}" for i, r in read.items() if not r["verified"]]
    bmc_ok = {d["drive"]["id"]: bool(d.get("verified") and d.get("task_state") == "Completed"
                                     and not d.get("problems")) for d in drives}
    ok = bool(drives) and all(bmc_ok[i] and read[i]["verified"] for i in bmc_ok)
    if not drives:
        problems.append("the BMC reports no drives: nothing can be certified as erased")
    doc = {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "node": node, "serial": rec.serial,
        "run_id": run_id, "operator": s.operator, "bmc": {"driver": erased.get("bmc"), "target": erased.get("target")},
        "method": erased.get("method"),
        "verifier": f"{erased.get('verifier')}; then {back.get('verifier') or 'no read-back from the node'}",
        "readback": {k: back.get(k) for k in ("ok", "reason", "image", "image_version", "boot", "verifier")},
        "sampled": {"method": "sampled-read", "seed": ask.seed if ask else None, "samples": ask.count if ask else 0,
                    "before": {k: (before or {}).get(k) for k in ("ok", "reason", "image", "boot")}},
        "started_at": min((d["started_at"] for d in drives), default=None),
        "ended_at": max((d["ended_at"] for d in drives), default=None),
        "result": "erased" if ok else "not-erased",
        "drives": [{"id": d["drive"]["id"], "model": d["drive"]["model"], "serial": d["drive"]["serial"],
                    "capacity_bytes": d["drive"]["capacity_bytes"], "protocol": d["drive"]["protocol"],
                    "method": d["method"], "started_at": d["started_at"], "ended_at": d["ended_at"],
                    "task": {"id": d["task_id"], "state": d["task_state"], "messages": list(d["task_messages"])},
                    "result": "erased" if bmc_ok[d["drive"]["id"]] and read[d["drive"]["id"]]["verified"]
                    else "not-erased",
                    "verified": bmc_ok[d["drive"]["id"]] and read[d["drive"]["id"]]["verified"],
                    "verification": d["verification"], "readback": read[d["drive"]["id"]],
                    "problems": list(d.get("problems") or [])} for d in drives],
        "problems": problems,
    }
    (root / CERTIFICATE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    signer = ControllerKey(default_home()).load(create=True)
    digest = seal(root, created_at=_now(), operator=s.operator, signer=signer)
    return {"ok": ok, "certificate": str(root), "sha256": digest, "problems": problems,
            "verdicts": {i: {"verified": bmc_ok[i] and read[i]["verified"], "readback": read[i]} for i in bmc_ok}}


def erase_node(node: str, s: DecommissionSettings) -> dict[str, Any]:
    """Inside a decommission run: sample, erase, read back, certify; ``ok`` only when every drive's erase was
    verified. No maintenance boot before the erase (or no read-back configured): nothing is erased."""
    ask = SampleAsk(sample_seed())
    before = read_before(node, s.readback, ask)
    if not before.get("ok"):
        return {"ok": False, "reason": f"the sampled reads before the erase: {before.get('reason')}",
                "drives": [], "readback": {k: before.get(k) for k in ("ok", "reason", "image", "verifier")}}
    try:
        erased = erase_drives(node)
    except DriverError as exc:
        return {"ok": False, "reason": f"bmc: {exc.message}", "drives": []}
    drives = erased.get("drives") or []
    if drives and all(d.get("verified") and d.get("task_state") == "Completed" and not d.get("problems")
                      for d in drives):
        back = read_back(node, s.readback, ask)
    else:  # the BMC's own account already fails: no boot to read back what is not erased
        back = {"ok": False, "reason": "not read back: the BMC's erase did not succeed"}
    cert = write_certificate(node, erased, back, s, before, ask)
    reason = "; ".join(cert["problems"])[:400] if not cert["ok"] else ""
    verdicts = cert.pop("verdicts")
    return {**cert, "reason": reason, "readback": {k: back.get(k) for k in ("ok", "reason", "image", "verifier")},
            "drives": [{"id": d["drive"]["id"], "serial": d["drive"]["serial"], "task": d["task_state"],
                        "verified": bool(verdicts[d["drive"]["id"]]["verified"]), "verification": d["verification"],
                        "readback": verdicts[d["drive"]["id"]]["readback"]} for d in drives]}
