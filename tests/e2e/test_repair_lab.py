"""Automatic repair on a built 4-node lab: an injected Xid 79 → reboot, a re-test under load, rejoin; the breaker.

node-01..03 serve the training pool (real Slurm), node-04 the inference pool
(the Kubernetes stand-in); ``max_repair_percent`` is the default 10, so each
pool allows one repair at once. `racklife serve --auto-repair` reads every
in-service node's kernel log over SSH each second (no periodic refresh: its
BMC reads are not what this tests). Xid 79 (a GPU fallen off
the bus: NVIDIA's RESTART_BM) is injected into node-01, node-02 and node-04 at
once: the service records each once, repairs node-01 and node-04 (one per
pool) and holds node-02 back with the breaker open — in its log, on the
event and in `racklife repair-status`. Each repair drains or cordons the
node, power-cycles it through its BMC (which brings the lost GPU back),
re-tests it at the pool's level with the GPUs loaded (nccl-tests and DCGM
ran and passed in the re-test's burn-in) and rejoins it; when node-01's
repair ends, the breaker closes and node-02 is repaired the same way. Every
node ends in service: idle in Slurm, schedulable in Kubernetes. Then a failed
row remap on node-03 (Xid 48, 64: NVIDIA's reset) is repaired by
``nvidia-smi -r`` without a power cycle — the kernel log keeps both Xid lines
after the reset, as a real one does, and the re-test judges only the lines
from the node's clock just before the reset — and an operator's GPU reset
takes node-03 from quarantined (``--action rma``) back to service.
"""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from burnin.parsers import xid as xid_parser
from lifecycle.lab.kube.run import KubeAdmin
from lifecycle.store import Store, health
from tests.e2e.conftest import EXE, RunningLab, built_lab

pytestmark = [pytest.mark.xdist_group("lab-b"), pytest.mark.slow]

BREAKER_OPEN = "breaker open: no new automatic repair"


@pytest.fixture(scope="module")
def lab(minimal_image: Path) -> Iterator[RunningLab]:
    with built_lab(4, minimal_image) as running:
        yield running


def wait_for(done: Callable[[], bool], seconds: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)


def status(lab: RunningLab) -> dict[str, Any]:
    res = lab.racklife("repair-status", "--json")
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def store(lab: RunningLab) -> Store:
    return Store(f"sqlite:///{Path(lab.env['RACKLIFE_HOME']) / 'racklife.sqlite'}")


def events(lab: RunningLab) -> dict[str, list[dict[str, Any]]]:
    """The service's health events by node, newest first, read from the store (polled: no command each time)."""
    db = store(lab)
    try:
        found = health.events(db, limit=100)
    finally:
        db.close()
    by: dict[str, list[dict[str, Any]]] = {}
    for e in found:
        by.setdefault(e.node, []).append({"xid": e.xid, "action": e.action, "bucket": e.bucket,
                                          "outcome": e.outcome, "detail": e.detail, "run_id": e.run_id})
    return by


def outcome(lab: RunningLab, node: str) -> str:
    return str(events(lab).get(node, [{"outcome": ""}])[0]["outcome"])


def ended(lab: RunningLab, node: str) -> bool:
    return outcome(lab, node) in ("repaired", "failed")


def nodes(lab: RunningLab) -> dict[str, str]:
    db = store(lab)
    try:
        return {n.name: n.state.value for n in db.nodes() if n.name.startswith("node-")}
    finally:
        db.close()


def sinfo(lab: RunningLab, name: str) -> str:
    return subprocess.run(["sinfo", "-h", "-N", "-n", name, "-o", "%T"], env=lab.env, capture_output=True,
                          text=True, timeout=15, check=True).stdout.strip()


def retest_result(lab: RunningLab, node: str) -> dict[str, Any]:
    """The result.json of the burn-in the node's latest repair re-test ran."""
    found = sorted(Path(lab.env["RACKLIFE_HOME"], "acceptance").glob(f"repair-*/{node}/**/result.json"),
                   key=lambda p: p.stat().st_mtime)
    assert found, f"no re-test result for {node}"
    doc: dict[str, Any] = json.loads(found[-1].read_text())
    return doc


def retest_checks(lab: RunningLab, node: str) -> dict[str, str]:
    """The checks of the burn-in the node's latest repair re-test ran, by name, with their verdicts."""
    return {c["name"]: c["verdict"] for c in retest_result(lab, node)["checks"]}


def lab_dmesg(lab: RunningLab, node: str) -> str:
    """The node's kernel log as its own dmesg prints it."""
    return subprocess.run([str(lab.dir / "nodes" / node / "bin" / "dmesg"), "--time-format", "iso"],
                          capture_output=True, text=True, timeout=30, check=True).stdout


def kernel_window(lab: RunningLab, node: str) -> dict[str, Any]:
    """What the latest re-test's kernel_xid check judged: its verdict, window and the Xid lines it left out."""
    c = next(c for c in retest_result(lab, node)["checks"] if c["name"] == "kernel_xid")
    return {"verdict": c["verdict"], "since": c["options"].get("since"), **c["measured"]}


def test_an_injected_xid_79_is_repaired_and_the_breaker_holds_the_rest(lab: RunningLab, tmp_path: Path) -> None:
    assert nodes(lab) == dict.fromkeys(("node-01", "node-02", "node-03", "node-04"), "in_service")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        serve = subprocess.Popen([EXE, "serve", "--auto-repair", "--refresh-interval", "0",
                                  "--health-interval", "1"], env=lab.env,
                                 stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "racklife serve: executor" in log.read_text(), 60, "the service to start", log)
        boots = {n["name"]: n for n in lab.status()["nodes"]}
        for node in ("node-01", "node-02", "node-04"):
            res = lab.racklife("lab", "fault", node, "xid79", "--gpu", "3", "--dir", str(lab.dir))
            assert res.returncode == 0, res.stderr

        # node-01 and node-04 (one per pool) are repaired; node-02 waits on the training pool's open breaker.
        wait_for(lambda: outcome(lab, "node-02") == "breaker_open", 120, "node-02 held by the breaker", log)
        held = events(lab)["node-02"][0]
        assert held["xid"] == 79 and held["action"] == "reboot" and held["bucket"] == "RESTART_BM", held
        assert held["detail"] == ("pool training: 1 of 3 nodes under repair (node-01); max_repair_percent 10 "
                                  f"allows 1 at once; {BREAKER_OPEN}"), held
        shown = status(lab)  # what `racklife repair-status --json` says, as the store has it
        training = next(b for b in shown["breakers"] if b["pool"] == "training")
        assert training["open"] and training["repairing"] == ["node-01"], training
        assert any(e["node"] == "node-02" and e["outcome"] == "breaker_open" for e in shown["events"]), shown
        text = lab.racklife("repair-status", "training").stdout
        assert BREAKER_OPEN in text and "node-02 Xid 79 (RESTART_BM) -> reboot: breaker_open" in text, text
        assert "no automatic repair of node-02: pool training: 1 of 3 nodes under repair (node-01)" in log.read_text()
        assert {e["outcome"] for e in events(lab)["node-01"]} <= {"started", "repaired"}

        # Then the breaker closes and node-02 is repaired too; every repair ends with the node in service.
        for node in ("node-01", "node-04", "node-02"):
            wait_for(functools.partial(ended, lab, node), 600, f"{node}'s repair", log)
            [event] = events(lab)[node]  # one line, one event: read on every pass, recorded once
            assert event["outcome"] == "repaired" and event["run_id"], event
        assert nodes(lab) == dict.fromkeys(("node-01", "node-02", "node-03", "node-04"), "in_service")
        after = {n["name"]: n for n in lab.status()["nodes"]}
        for node in ("node-01", "node-02", "node-04"):
            assert after[node]["boots"] == boots[node]["boots"] + 1, (boots[node], after[node])  # one power cycle
            res = lab.racklife("node", "history", node, "--json")
            moves = [(h["event"], h["to"]) for h in json.loads(res.stdout)]
            tail = moves[moves.index(("drain", "draining")):]
            assert tail == [("drain", "draining"), ("drain_done", "drained"), ("repair", "repairing"),
                            ("burn_in", "burning_in"), ("accept", "accepted"), ("join", "joining"),
                            ("join_done", "in_service")], moves
            # The re-test loaded the GPUs (nccl-tests across the node's GPUs, DCGM) and read a kernel log
            # without the Xid: the power cycle brought the GPU back.
            checks = retest_checks(lab, node)
            assert checks.get("nccl.all_reduce") == "pass" and checks.get("dcgm") == "pass", checks
            assert checks.get("kernel_xid") == "pass" and checks.get("gpu") == "pass", checks
        assert "node-01" not in next(b for b in status(lab)["breakers"] if b["pool"] == "training")["repairing"]
        for node in ("node-01", "node-02", "node-03"):
            assert sinfo(lab, node) == "idle", node
        node04 = KubeAdmin.from_kubeconfig(Path(lab.env["KUBECONFIG"])).request("GET", "/api/v1/nodes/node-04")
        assert not node04["spec"].get("unschedulable"), node04["spec"]

        _a_failed_row_remap_is_reset_not_rebooted(lab, log)
        _an_operator_repairs_a_quarantined_node(lab)
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()


def _a_failed_row_remap_is_reset_not_rebooted(lab: RunningLab, log: Path) -> None:
    """Xid 48 then 64 (NVIDIA: reset the GPU): one automatic reset-gpu repair, no power cycle, the fault cleared."""
    boots = {n["name"]: n["boots"] for n in lab.status()["nodes"]}
    res = lab.racklife("lab", "fault", "node-03", "ecc", "--gpu", "2", "--dir", str(lab.dir))
    assert res.returncode == 0, res.stderr
    wait_for(lambda: bool({e["outcome"] for e in events(lab).get("node-03", [])} & {"repaired", "failed"}), 300,
             "node-03's reset", log)
    by = {e["xid"]: e for e in events(lab)["node-03"]}
    assert by[48]["action"] == "reset-gpu" and {by[48]["outcome"], by[64]["outcome"]} == {"repaired", "covered"}, (
        f"Xid 48: {by[48]['outcome']}: {by[48]['detail']}\n{log.read_text()[-4000:]}")  # why, in full
    assert {n["name"]: n["boots"] for n in lab.status()["nodes"]}["node-03"] == boots["node-03"]  # no reboot
    moves = [h["to"] for h in json.loads(lab.racklife("node", "history", "node-03", "--json").stdout)]
    assert moves[-5:] == ["repairing", "burning_in", "accepted", "joining", "in_service"], moves
    assert retest_checks(lab, "node-03").get("gpu") == "pass"  # the failed remap is gone after the reset
    # The kernel log still holds Xid 48 and 64 after the reset (only a boot clears it): the re-test judged
    # the log from the node's clock just before the reset, and says what it left out.
    window = kernel_window(lab, "node-03")
    assert window["verdict"] == "pass" and window["since"] and window["window"] == f"since {window['since']}", window
    assert window["ignored_before_cutoff"] == 2 and window["ignored_xids"] == [48, 64], window
    assert {e.xid for e in xid_parser.parse(lab_dmesg(lab, "node-03")).events} == {48, 64}
    assert sinfo(lab, "node-03") == "idle"


def _an_operator_repairs_a_quarantined_node(lab: RunningLab) -> None:
    """rma quarantines node-03; a GPU reset asked for by the operator takes it from quarantined back to service."""
    res = lab.racklife("repair", "node-03", "--action", "rma", "--json", timeout=300)
    assert res.returncode == 0 and json.loads(res.stdout)["state"] == "quarantined", res.stdout + res.stderr
    assert "drain" in sinfo(lab, "node-03")
    res = lab.racklife("repair", "node-03", "--action", "reset-gpu", "--json", timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["ok"] and out["state"] == "in_service" and not out["leave"], out  # nothing to leave
    assert out["changes"]["reset_gpu"]["kernel_log_since"] == kernel_window(lab, "node-03")["since"], out
    moves = [(h["event"], h["to"]) for h in json.loads(lab.racklife("node", "history", "node-03", "--json").stdout)]
    assert moves[-6:] == [("quarantine", "quarantined"), ("repair", "repairing"), ("burn_in", "burning_in"),
                          ("accept", "accepted"), ("join", "joining"), ("join_done", "in_service")], moves
    assert sinfo(lab, "node-03") == "idle"
