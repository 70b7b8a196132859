"""Read back an erase from the node itself: a maintenance boot, then each drive's own log.

After the BMC's ``Drive.SecureErase`` Tasks end, a decommission with
``--erase`` does not take the BMC's word for it. The node is network-booted
into the read-back's image (``maintenance``: dropbear and nvme-cli; ``minimal``
where it is not built, which only the lab's emulated nodes answer for) through
its BMC and the boot server, by the one boot
path provisioning uses (:func:`lifecycle.workflows.provision.boot_into`, as a
maintenance boot: same claimed power cycle, token, phone-home and check of
the booted image and MACs, and no change of the node's state). Then, over
SSH (the transport acceptance uses, :func:`lifecycle.workflows.repair_actions.ssh_run`):
``nvme list`` finds each drive the BMC erased by its serial, and
``nvme sanitize-log /dev/nvmeX`` reads its NVMe Sanitize Status log. What was
read is journaled and goes into the certificate word for word; the verdict
per drive is :func:`lifecycle.workflows.sanitize_log.judge`'s.

The maintenance image makes its SSH host key at each boot and reports it
with its phone-home; the read-back reaches the node with that key pinned
(:func:`pinned_config`), so the site's ssh_config needs no known_hosts entry
for a key that did not exist before the boot.

Fail closed: no read-back settings, a boot that does not phone home, a node
that does not answer over SSH, a command that fails, output that does not
parse, a drive the booted node does not list: each is "not verified", with
the reason, and the node is not decommissioned.

The other verifier, for a drive with no Sanitize Status log (SATA, SAS, an
NVMe drive that refuses ``nvme sanitize-log``): sampled blocks
(:mod:`lifecycle.workflows.sampled_read`), read in a first maintenance boot
before the BMC's erase (:func:`read_before`) and again in the read-back's.
Every drive is sampled; a drive whose log says nothing (not NVMe, not listed
by ``nvme list``, the log refused) is judged by its samples alone, a drive
with a log by both: its log must show the erase and its samples must not
contradict it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lifecycle.workflows import provision
from lifecycle.workflows import sampled_read as sr
from lifecycle.workflows import sanitize_log as sl
from lifecycle.workflows.decommission_checks import ReadbackSettings
from lifecycle.workflows.node_ops import node_state
from lifecycle.workflows.repair_actions import await_ssh, ssh_run
from lifecycle.workflows.retry import step

COMMAND_S = 60.0


@step(idempotent=True)  # reads only
def read_drive_logs(node: str, ssh_config: str) -> dict[str, Any]:
    """``nvme list`` and each listed controller's ``nvme sanitize-log``, over SSH, as they answered."""
    listed = ssh_run(node, ssh_config, list(sl.LIST_CMD), COMMAND_S)
    out: dict[str, Any] = {"list": asdict(listed), "logs": {}}
    if listed.exit_code != 0:
        return out
    try:
        controllers = sorted({d.controller for d in sl.parse_list(listed.stdout)})
    except sl.ParseError:
        return out  # judged (and refused) from the recorded output
    for dev in controllers:
        out["logs"][dev] = asdict(ssh_run(node, ssh_config, [*sl.SANITIZE_LOG_CMD, dev], COMMAND_S))
    return out


@dataclass(frozen=True)
class SampleAsk:
    """Which blocks to sample: ``count`` per drive, at offsets from ``seed`` (chosen once per run)."""

    seed: str
    count: int = sr.DEFAULT_SAMPLES


@step(idempotent=True)  # reads only
def read_samples(node: str, ssh_config: str, ask: SampleAsk) -> dict[str, Any]:
    """The node's drives from sysfs, then each one's sampled blocks, over SSH, as they answered."""
    listed = ssh_run(node, ssh_config, ["sh", "-c", sr.LIST_SCRIPT], COMMAND_S)
    out: dict[str, Any] = {"list": asdict(listed), "drives": {}}
    if listed.exit_code != 0:
        return out
    try:
        drives = sr.parse_drives(listed.stdout)
    except sr.ParseError:
        return out  # judged (and refused) from the recorded output
    for d in drives:
        offs = sr.offsets(ask.seed, d.serial, d.size_bytes, ask.count)
        out["drives"][d.device] = {"offsets": list(offs),
                                   "read": asdict(ssh_run(node, ssh_config, sr.sample_argv(d.device, offs),
                                                          COMMAND_S))}
    return out


def sample_of(reads: dict[str, Any] | None, serial: str, ask: SampleAsk) -> sr.Sample | str:
    """One drive's sample from what :func:`read_samples` recorded, or why there is none."""
    if not reads:
        return "no sampled reads"
    listed = reads.get("list") or {}
    if listed.get("exit_code") != 0:
        return _failed("listing the drives", listed)
    try:
        found = sr.find(sr.parse_drives(str(listed.get("stdout", ""))), serial)
    except sr.ParseError as exc:
        return f"unreadable drive list: {exc}"
    if isinstance(found, str):
        return found
    rec = (reads.get("drives") or {}).get(found.device) or {}
    offs = sr.offsets(ask.seed, found.serial, found.size_bytes, ask.count)
    read = rec.get("read") or {}
    if tuple(rec.get("offsets") or ()) != offs:
        return f"the blocks read from {found.device} are not those of seed {ask.seed}"
    if read.get("exit_code") != 0:
        return _failed(f"reading {found.device}", read)
    try:
        hashes = sr.parse_blocks(str(read.get("stdout", "")), offs)
    except sr.ParseError as exc:
        return f"unreadable sampled reads of {found.device}: {exc}"
    return sr.Sample(found.serial, found.device, found.size_bytes, offs, hashes)


def read_before(node: str, cfg: ReadbackSettings | None, ask: SampleAsk) -> dict[str, Any]:
    """Before the erase: boot the node into the maintenance image and sample every drive's blocks."""
    return _boot_and_read(node, cfg, lambda ssh_config: {"samples": read_samples(node, ssh_config, ask)}, 1)


def read_back(node: str, cfg: ReadbackSettings | None, ask: SampleAsk | None = None) -> dict[str, Any]:
    """Boot the node into the maintenance image and read its drives' logs (and the same samples as before the
    erase); ``ok`` False with ``reason`` if not."""
    def reads(ssh_config: str) -> dict[str, Any]:
        got: dict[str, Any] = {"reads": read_drive_logs(node, ssh_config)}
        if ask is not None:
            got["samples"] = read_samples(node, ssh_config, ask)
        return got

    # Its attempts are numbered after those of the boot before the erase (one claim per attempt and run).
    return _boot_and_read(node, cfg, reads, 1 + (cfg.provision.attempts if cfg is not None else 0))


def _boot_and_read(node: str, cfg: ReadbackSettings | None, reads: Callable[[str], dict[str, Any]],
                   first_attempt: int) -> dict[str, Any]:
    if cfg is None:
        return {"ok": False, "reason": "no read-back configured (boot server and SSH): the erase cannot be "
                                       "verified from the node"}
    pcfg = cfg.provision
    try:
        image = pcfg.image(cfg.image)
    except KeyError as exc:
        return {"ok": False, "reason": str(exc.args[0])}
    booted = provision.boot_into(node, image, pcfg, None, provision.Outcome(node, False, node_state(node)),
                                 first_attempt)
    done: dict[str, Any] = {"image": image.name, "image_version": image.version, "boot": booted.steps,
                            "verifier": f"{sl.VERIFIER}; {sr.VERIFIER}"}
    if not booted.ok:
        return {**done, "ok": False, "reason": f"the maintenance boot failed: {booted.reason}"}
    with pinned_config(node, cfg.ssh_config, booted.ssh_host_key) as ssh_config:
        why = await_ssh(node, ssh_config, cfg.ssh_wait_s)
        if why:
            return {**done, "ok": False, "reason": f"the maintenance boot: {why}"}
        return {**done, "ok": True, "reason": "", **reads(ssh_config)}


@contextmanager
def pinned_config(node: str, ssh_config: str, host_key: str) -> Iterator[str]:
    """The site's ssh_config, with the host key the booted image reported pinned for ``node``.

    The maintenance image makes its host key at each boot (it carries none) and reports it with its
    phone-home, which the boot server accepted with the boot's single-use token; the node is reached
    with that key and no other (``StrictHostKeyChecking yes``, under ``HostKeyAlias`` NODE). The block
    comes first, so its values win (ssh_config: the first value obtained is used); the rest (address,
    user, identity, proxy) is the site's. No key reported (the minimal image, the lab's emulated
    nodes): the site's config as it is, whose known_hosts must then hold the node's key.
    """
    if not host_key:
        yield ssh_config
        return
    with tempfile.TemporaryDirectory(prefix=f"racklife-readback-{node}-") as tmp:
        known, cfg = Path(tmp) / "known_hosts", Path(tmp) / "ssh_config"
        known.write_text(f"{node} {host_key}\n")
        cfg.write_text("\n".join([
            f"Host {node}", f"    HostKeyAlias {node}", f'    UserKnownHostsFile "{known}"',
            "    GlobalKnownHostsFile /dev/null", "    StrictHostKeyChecking yes", "", ""])
            + Path(ssh_config).read_text())
        cfg.chmod(0o600)
        yield str(cfg)


def judge_log(serial: str, protocol: str, back: dict[str, Any]) -> dict[str, Any]:
    """One drive's NVMe Sanitize Status log verdict: ``verified``, ``reason``, ``method``, the device and what it
    said, and ``absent`` when the drive keeps no log to read (not NVMe, not listed by nvme, the log refused)."""
    out: dict[str, Any] = {"verified": False, "method": None, "device": None, "sanitize_log": None, "absent": False}
    if not back.get("ok"):
        return {**out, "reason": back.get("reason") or "no read-back"}
    if protocol.upper() != "NVME":
        return {**out, "absent": True,
                "reason": f"a {protocol or 'non-NVMe'} drive has no NVMe Sanitize Status log to read back"}
    reads = back.get("reads") or {}
    listed = reads.get("list") or {}
    if listed.get("exit_code") != 0:
        return {**out, "absent": True, "reason": _failed("nvme list", listed)}
    try:
        found = sl.find(sl.parse_list(str(listed.get("stdout", ""))), serial)
    except sl.ParseError as exc:
        return {**out, "reason": f"unreadable nvme list: {exc}"}
    if isinstance(found, str):
        return {**out, "reason": found, "absent": found.startswith("the booted node lists no NVMe drive")}
    log = (reads.get("logs") or {}).get(found.controller) or {}
    out.update(device=found.controller, sanitize_log=log.get("stdout"))
    if log.get("exit_code") != 0:
        return {**out, "absent": True, "reason": _failed(f"nvme sanitize-log {found.controller}", log)}
    verdict = sl.judge_text(str(log.get("stdout", "")))
    return {**out, "verified": verdict.verified, "reason": verdict.reason, "method": verdict.method}


def judge_drive(serial: str, protocol: str, back: dict[str, Any], before: dict[str, Any] | None,
                ask: SampleAsk | None) -> dict[str, Any]:
    """One drive's read-back verdict, from both verifiers: its own log where it keeps one, and its samples.

    No log (``absent``): the samples alone decide (method ``sampled-read``). A log: it must show the erase,
    and the samples must not contradict it (blank before the erase is no contradiction)."""
    log = judge_log(serial, protocol, back)
    if ask is None or before is None:
        verdict = sr.Verdict(False, "no sampled reads before the erase")
        b_sample: sr.Sample | str = "not read"
        a_sample: sr.Sample | str = "not read"
    else:
        b_sample = (sample_of(before.get("samples"), serial, ask) if before.get("ok")
                    else before.get("reason") or "no maintenance boot before the erase")
        a_sample = (sample_of(back.get("samples"), serial, ask) if back.get("ok")
                    else back.get("reason") or "no read-back")
        verdict = sr.judge(b_sample, a_sample)
    sampled = {
        "method": sr.METHOD, "verifier": sr.VERIFIER, "verified": verdict.verified, "reason": verdict.reason,
        "seed": ask.seed if ask else None, "samples": ask.count if ask else 0, "block_bytes": sr.BLOCK_BYTES,
        "before": _where(b_sample), "after": _where(a_sample),
        "blocks": [{k: b[k] for k in ("offset", "before", "after", "result")} for b in verdict.blocks],
    }
    if log.pop("absent"):
        ok, method = verdict.verified, sr.METHOD if verdict.verified else None
        reason = f"sampled reads: {verdict.reason} (no sanitize log: {log['reason']})"
    else:
        ok = log["verified"] and (verdict.verified or verdict.inconclusive)
        method = log["method"] if ok else None
        reason = f"{log['reason']}; sampled reads: {verdict.reason}"
    return {**log, "verified": ok, "method": method, "reason": reason, "sampled": sampled}


def _failed(what: str, ran: dict[str, Any]) -> str:
    """``WHAT failed (exit N): the end of its stderr``, from a recorded command."""
    return f"{what} failed (exit {ran.get('exit_code')}): {str(ran.get('stderr', '')).strip()[-200:]}"


def _where(s: sr.Sample | str) -> dict[str, Any]:
    if isinstance(s, sr.Sample):
        return {"device": s.device, "size_bytes": s.size_bytes}
    return {"device": None, "size_bytes": None, "reason": s}
