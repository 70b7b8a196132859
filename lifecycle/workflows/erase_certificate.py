"""Erase every drive of a node through its BMC, and certify it with a signed certificate.

A decommissioned server leaves the building; what was on its drives must not.
The certificate is the proof an auditor keeps: which drives (model, serial,
capacity), the method, when each erase started and ended, the BMC task's
result, what was read back and who verified it. It is a bundle like the
acceptance evidence — ``certificate.json`` sealed into ``manifest.json`` and
signed with the controller's Ed25519 key (``manifest.sig``) — so
``racklife evidence verify DIR`` checks it the same way.

Fail closed: a BMC that reports no drives, a drive that offers no secure
erase, a task that fails, a read-back that does not show a clean erase —
each makes the result ``ok: false`` with the drive and the reason, and the
workflow does not mark the node decommissioned. A certificate is written
either way (a failed erase is certified as failed, ``result: not-erased``),
because the record of an attempt is evidence too.
"""

from __future__ import annotations

import json
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
from lifecycle.workflows.node_ops import current_run_id
from lifecycle.workflows.retry import step

CERTIFICATE = "certificate.json"
SCHEMA = "racklife.erase.certificate"
SCHEMA_VERSION = 1


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@step(idempotent=False)  # not retried on a temporary error (an erase takes long); after a crash it erases again
def erase_drives(node: str) -> dict[str, Any]:
    """Erase every drive the BMC reports; each result with its read-back (never raises for one drive)."""
    from lifecycle.drivers.bmc.factory import driver_for, unsupported_reason

    rec = shared_store().get(node)
    bmc = driver_for(rec.node().bmc)
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
        return {"bmc": rec.node().bmc.driver, "target": bmc.target, "method": eraser.erase_method,
                "verifier": eraser.erase_verifier, "drives": results}
    finally:
        bmc.close()


@step(idempotent=True)  # the directory is the run's: written again it says the same
def write_certificate(node: str, erased: dict[str, Any], s: DecommissionSettings) -> dict[str, Any]:
    rec = shared_store().get(node)
    run_id = current_run_id()
    root = Path(s.certificate_dir or default_home() / "erase-certificates") / f"{node}-{run_id}"
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.iterdir():  # a replay rewrites the bundle whole
        stale.unlink()
    drives = erased.get("drives") or []
    problems = [f"{d['drive']['id']}: {p}" for d in drives for p in d.get("problems") or []]
    ok = bool(drives) and all(d.get("verified") and d.get("task_state") == "Completed" and not d.get("problems")
                              for d in drives)
    if not drives:
        problems.append("the BMC reports no drives: nothing can be certified as erased")
    doc = {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "node": node, "serial": rec.serial,
        "run_id": run_id, "operator": s.operator, "bmc": {"driver": erased.get("bmc"), "target": erased.get("target")},
        "method": erased.get("method"), "verifier": erased.get("verifier"),
        "started_at": min((d["started_at"] for d in drives), default=None),
        "ended_at": max((d["ended_at"] for d in drives), default=None),
        "result": "erased" if ok else "not-erased",
        "drives": [{"id": d["drive"]["id"], "model": d["drive"]["model"], "serial": d["drive"]["serial"],
                    "capacity_bytes": d["drive"]["capacity_bytes"], "protocol": d["drive"]["protocol"],
                    "method": d["method"], "started_at": d["started_at"], "ended_at": d["ended_at"],
                    "task": {"id": d["task_id"], "state": d["task_state"], "messages": list(d["task_messages"])},
                    "result": "erased" if d.get("verified") and not d.get("problems") else "not-erased",
                    "verified": bool(d.get("verified")), "verification": d["verification"],
                    "problems": list(d.get("problems") or [])} for d in drives],
        "problems": problems,
    }
    (root / CERTIFICATE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    signer = ControllerKey(default_home()).load(create=True)
    digest = seal(root, created_at=_now(), operator=s.operator, signer=signer)
    return {"ok": ok, "certificate": str(root), "sha256": digest, "problems": problems}


def erase_node(node: str, s: DecommissionSettings) -> dict[str, Any]:
    """Inside a decommission run: erase, certify; ``ok`` only when every drive's erase was verified."""
    try:
        erased = erase_drives(node)
    except DriverError as exc:
        return {"ok": False, "reason": f"bmc: {exc.message}", "drives": []}
    cert = write_certificate(node, erased, s)
    reason = "; ".join(cert["problems"])[:400] if not cert["ok"] else ""
    return {**cert, "reason": reason, "drives": [
        {"id": d["drive"]["id"], "serial": d["drive"]["serial"], "task": d["task_state"], "verified": d["verified"],
         "verification": d["verification"]} for d in erased.get("drives") or []]}
