"""Provisioning: enrolled → inspecting → available → provisioning → provisioned.

One durable workflow per node; a parent workflow fans them out through a DBOS
queue whose worker concurrency is ``--max-in-flight``. One journaled step per
phase (begin and inspect, boot attempt, phone-home and verdict): each reads
the actual state first and is safe to run again (each journal write costs
the controller CPU, so a phase is one step, not one per call); the power cycle is claimed in the store, with
the attempt's token, before it is sent, so a controller killed mid-rack never
cycles a node twice for the same attempt. Boot: set one-time network boot,
power cycle, wait for the node to phone home with its single-use token (a
step that reads the report the boot server stored when it spent the token,
woken by ``PhoneHomeWatch``); on timeout one more boot, then
``provision_failed`` with the reason. The steps of a run share one BMC
session. Why the steps are shaped this way: docs/provisioning.md, Throughput.

Each step declares whether it may run again (``lifecycle/workflows/retry.py``):
inspection and the one-time boot override only read or set state, so a BMC
that times out or answers 503 is retried under the site's policy; the power
cycle is a side effect that must not repeat, so it runs once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from dbos import DBOS, Queue

from lifecycle.drivers.bmc.base import BmcDriver, BootDevice, HardwareInventory, PowerAction
from lifecycle.drivers.boot.render import BootImage, ipxe_script
from lifecycle.drivers.errors import DriverError
from lifecycle.model.inventory import Node
from lifecycle.model.skus import SKUS
from lifecycle.model.states import TRANSITIONS, Actor, State
from lifecycle.store import Store, shared_store
from lifecycle.store import boot as boot_store
from lifecycle.workflows import engine
from lifecycle.workflows.engine import step_token
from lifecycle.workflows.leasing import lease_nodes, release_leases
from lifecycle.workflows.node_ops import current_run_id, transition
from lifecycle.workflows.retry import retrier, step
from lifecycle.workflows.waiting import waiting

log = logging.getLogger(__name__)

QUEUE = "racklife-provision"


@dataclass(frozen=True)
class ProvisionSettings:
    """Where the boot server is and what each image is; passed as workflow input, typed."""

    boot_url: str
    images: dict[str, BootImage]  # name, and name:version -> the image the boot server publishes
    default_image: str
    boot_timeout_s: float = 600.0
    attempts: int = 2

    def __post_init__(self) -> None:
        wrong = [why for ok, why in (
            (self.boot_url.startswith(("http://", "https://")), f"boot_url must be http(s)://, not {self.boot_url!r}"),
            (self.boot_timeout_s > 0, f"boot_timeout_s must be above 0, not {self.boot_timeout_s}"),
            (self.attempts >= 1, f"attempts must be at least 1, not {self.attempts}"),
            (all(isinstance(i, BootImage) for i in self.images.values()), "images must be BootImage values"),
        ) if not ok]
        if wrong:
            raise ValueError(f"provisioning settings: {'; '.join(wrong)}")

    def image(self, name: str | None) -> BootImage:
        key = name or self.default_image
        if key not in self.images:
            have = ", ".join(sorted(self.images))
            raise KeyError(f"image '{key}' is not published on the boot server (have: {have})")
        return self.images[key]



@dataclass
class Outcome:
    node: str
    ok: bool
    state: str
    reason: str = ""
    steps: list[str] = field(default_factory=list)
    ssh_host_key: str = ""
    """A maintenance boot: the SSH host key the booted image reported with its phone-home ("" if none)."""


class PhoneHomeWatch:
    """Wakes this process's runs that wait for a phone-home, with one query for all of them.

    A booting node's run waits here (in ``await_phone_home``) until its token
    is spent or its durable deadline; a boot server in this process wakes it at
    once (``arrived``), one in another process through the store, polled every
    ``interval_s`` for all waiting runs together: 0.5 s, for at 0.1 s this
    thread took 14 % of the provisioning bench's CPU (5 % at 0.5 s; 200 nodes,
    50 in flight, T = 10 s), for a wake-up that a boot server in this process
    gives at once anyway. Correctness never depends on this watch: a wake-up it
    misses only makes the run read the stored report later, at its deadline.
    """

    def __init__(self, interval_s: float = 0.5, store_of: Callable[[], Store] = shared_store) -> None:
        self.interval_s = interval_s
        self._store_of = store_of
        self._waiting: dict[tuple[str, int], threading.Event] = {}
        self._lock = threading.Lock()
        self._running = False

    def wait(self, run: str, attempt: int, timeout_s: float) -> bool:
        """Block until the boot (run, attempt) phoned home (True) or ``timeout_s`` passed."""
        if timeout_s <= 0:
            return False
        event = threading.Event()
        with self._lock:
            self._waiting[(run, attempt)] = event
            if not self._running:
                self._running = True
                threading.Thread(target=self._poll, name="phone-home-watch", daemon=True).start()
        try:
            return event.wait(timeout_s)
        finally:
            with self._lock:
                self._waiting.pop((run, attempt), None)

    def arrived(self, run: str, attempt: int) -> None:
        """The boot server of this process accepted (run, attempt): wake its run now."""
        with self._lock:
            event = self._waiting.get((run, attempt))
        if event is not None:
            event.set()

    def _poll(self) -> None:
        while True:
            time.sleep(self.interval_s)
            with self._lock:
                waiting = dict(self._waiting)
                if not waiting:
                    self._running = False
                    return
            try:
                spent = boot_store.spent(self._store_of(), {run for run, _ in waiting})
            except Exception:  # the store is unreachable for now: the run reads it at its deadline
                log.warning("phone-home watch: reading spent tokens failed", exc_info=True)
                continue
            for key in spent & waiting.keys():
                waiting[key].set()


WATCH = PhoneHomeWatch()


# One BMC driver (one Redfish session) per run, shared by the run's steps in this
# process: inspection and boot reuse the session, the service root and the system
# path instead of logging in three times. A run's steps execute one after another
# on its workflow thread, so a driver is never used by two threads at once.
_drivers: dict[str, tuple[BmcDriver, Node]] = {}
_drivers_lock = threading.Lock()


def _bmc(node: str, spec: Node | None = None) -> tuple[BmcDriver, Node]:
    """The run's driver and the node's record; ``spec``: the record as the caller has just read it."""
    # Imported here: the factory pulls in vendor SDKs only when a BMC is really used.
    from lifecycle.workflows.bmc_calls import open_bmc

    run = current_run_id()
    with _drivers_lock:
        got = _drivers.get(run)
    if got is None:
        store = shared_store()
        spec = spec or store.get(node).node()
        got = (open_bmc(node, store, spec=spec), spec)
        with _drivers_lock:
            _drivers[run] = got
    return got


def _release_bmc(run: str) -> None:
    """Log out of the run's BMC session, if it has one (idle while the node boots)."""
    with _drivers_lock:
        got = _drivers.pop(run, None)
    if got is not None:
        try:
            got[0].close()
        except DriverError as exc:  # the session expires on the BMC by itself
            log.info("%s: closing the BMC session failed: %s", got[1].name, exc.message)


def _mismatches(spec: Node, hw: HardwareInventory) -> list[str]:
    """Differences between the BMC's inventory and the inventory file (empty: match)."""
    problems = []
    if hw.system.serial.strip() != spec.serial:
        problems.append(f"serial mismatch: inventory {spec.serial}, BMC {hw.system.serial.strip() or '(none)'}")
    if spec.bmc.driver == "ipmi":
        # IPMI's FRU has no NIC or GPU inventory: MACs are verified when the node phones home,
        # the GPU count by burn-in. Redfish BMCs are held to all three here.
        return problems
    bmc_macs = {n.mac.lower() for n in hw.nics}
    for nic in spec.nics:
        if nic.role in ("boot", "mgmt") and nic.mac not in bmc_macs:
            problems.append(f"MAC {nic.mac} ({nic.name}, {nic.role}) not reported by the BMC "
                            f"(BMC has: {', '.join(sorted(bmc_macs)) or 'none'})")
    want = SKUS[spec.sku].gpu_count
    if len(hw.gpus) != want:
        problems.append(f"GPU count mismatch: SKU {spec.sku} has {want}, BMC reports {len(hw.gpus)}")
    return problems


def _bmc_failure(exc: DriverError) -> str:
    return f"BMC {type(exc).__name__.lower()}: {exc.message}"


def _begin(store: Store, node: str, state: State, image_label: str) -> State:
    """Enter this run's first state from ``state`` (as just read); return it: inspecting,
    provisioning, or where the node is.

    Run again (a step cut off after its commit), it finds the state it set.
    """
    run = current_run_id()
    if state in (State.ENROLLED, State.INSPECT_FAILED):
        state = store.transition(node, "inspect", Actor.WORKFLOW, "provisioning starts with inspection",
                                 run_id=run).target
    elif state in (State.AVAILABLE, State.PROVISION_FAILED, State.PROVISIONED):
        state = store.transition(node, "provision", Actor.WORKFLOW, f"provision with image {image_label}",
                                 run_id=run).target
    return state


@step(idempotent=True)
def begin_run(node: str, image_label: str, boot: BootRequest | None = None) -> dict[str, Any]:
    """Take the node's lease, begin the run, from ``inspecting`` inspect, and once the node is
    ``provisioning`` start its first boot (``boot``): ``held`` (why another run holds the node, ""
    when this run does), ``state`` (where the node is now), ``inspected``, ``reason`` and, when
    ``boot`` was given and the node is provisioning, ``started`` (the first attempt's
    :func:`boot_attempt` result).

    One step for all of it (one journal write, not four): the lease first (one run per node:
    a node held by another live run is left as it is, nothing else is done); then from
    enrolled or a failed inspection the node enters ``inspecting`` and the BMC's inventory is
    compared with the inventory file; on a match it moves on to ``provisioning`` (``reason``
    ""), else ``reason`` says why inspection failed (the caller records ``inspect_fail``). A
    BMC error of the inspection is raised (a temporary one is retried: every part reads first).
    A re-run after a crash finds its own lease and the state it set, and the first boot's claim:
    the power cycle is never sent twice (:func:`boot_attempt`).
    """
    held = lease_nodes([node], "provision_node")
    if held:
        return {"held": held[node], "state": "", "inspected": False, "reason": ""}
    store = shared_store()
    record = store.get(node)  # one read for the state and the record the BMC is opened from
    state = _begin(store, node, record.state, image_label)
    inspected = False
    if state is State.INSPECTING:
        driver, spec = _bmc(node, record.node())
        problems = _mismatches(spec, driver.inspect())
        if problems:
            return {"held": "", "state": state.value, "inspected": True, "reason": "; ".join(problems)}
        state = store.transitions(node, [("inspect_done", "BMC inventory matches the inventory file"),
                                         ("provision", f"provision with image {image_label}")],
                                  Actor.WORKFLOW, run_id=current_run_id()).target
        inspected = True
    out: dict[str, Any] = {"held": "", "state": state.value, "inspected": inspected, "reason": ""}
    if boot is not None and state is State.PROVISIONING:
        out["started"] = _start_boot(node, boot)
    return out


@dataclass(frozen=True)
class BootRequest:
    """One boot attempt, as its step takes it: the image, the attempt's number, where to phone home,
    the token's lifetime and how long the phone-home is waited for."""

    image: dict[str, Any]
    attempt: int
    phone_home_url: str
    ttl_s: float
    wait_s: float


@step(idempotent=False)
def boot_attempt(node: str, req: BootRequest) -> dict[str, Any]:
    """One boot attempt: the one-time network boot, then the power cycle. ``reason`` ("" when
    under way, else why it could not start) and ``until``, the time (epoch seconds) its
    phone-home is waited for.

    Setting the network boot again is harmless, so that call is retried under the site's
    policy (``retry.retrier``) inside this step; the cycle is not.

    ``until`` is journaled with the step, so a run resumed after a crash waits
    for the same deadline, not a fresh one.

    The power cycle is claimed together with the attempt's token, before the
    BMC is asked for anything: a re-run of this step (a crash before its
    checkpoint) finds the claim and sends nothing, so a node is cycled at most
    once per attempt and keeps the token it may already have fetched. A crash
    between the claim and the cycle loses the cycle; the attempt's timeout
    brings the next one. A first provisioning starts its first attempt inside
    ``begin_run`` (the same work, :func:`_start_boot`): one journal write fewer.
    """
    return _start_boot(node, req)


def _start_boot(node: str, req: BootRequest) -> dict[str, Any]:
    """:func:`boot_attempt`'s work, inside whichever step starts the attempt."""
    store = shared_store()
    run = current_run_id()
    try:
        driver, spec = _bmc(node)
        retrier().call(driver.set_boot, BootDevice.PXE, once=True)
        img = BootImage.from_json(req.image)
        if boot_store.claim_boot(store, step_token(run, f"power_cycle:{req.attempt}"), node,
                                 spec.boot_mac(), run, req.attempt,
                                 lambda token: ipxe_script(spec, img, req.phone_home_url, token),
                                 timedelta(seconds=req.ttl_s)):
            driver.power(PowerAction.CYCLE)  # from off, every driver powers on instead
    except DriverError as exc:
        return {"reason": _bmc_failure(exc), "until": time.time()}
    return {"reason": "", "until": time.time() + req.wait_s}  # counted from the cycle, as a node boots


# The in-flight state a boot belongs to -> the events that end it (done, failed): a first
# provisioning, a reimage of a node taken out of service, an upgrade that boots a new image.
FINISH: dict[State, tuple[str, str]] = {
    State.PROVISIONING: ("provision_done", "provision_fail"),
    State.REPROVISIONING: ("reprovision_done", "reprovision_fail"),
    State.UPGRADING: ("upgrade_done", "upgrade_fail"),
}


@step(idempotent=True)
def await_phone_home(node: str, attempt: int, until: float, image: dict[str, Any],
                     during: str = State.PROVISIONING.value) -> dict[str, Any]:
    """Wait for boot ``attempt`` of this run to phone home, until ``until`` (epoch seconds,
    journaled by ``boot_attempt``), then verify what the node reported and record the outcome.

    ``phoned`` is False at the deadline or when a later boot of the node superseded this one
    (nothing recorded: the caller tries the next attempt); else ``reason`` is "" when the node
    is provisioned, or why not (the failed event of ``during``, ``provision_fail`` by default,
    recorded). The report is the one the boot server stored when it spent the token, so no
    message has to reach this process: a step cut off by a crash runs again, finds the report
    (and its recorded transition, a replay) or waits for the same deadline.
    """
    store = shared_store()
    run = current_run_id()
    while True:
        spent, report = boot_store.phoned_home(store, run, attempt)
        if spent:
            if report is None:
                log.info("%s: boot attempt %d was superseded by a later boot", node, attempt)
                return {"phoned": False, "reason": ""}
            if not during:  # a maintenance boot: verified, and the node's state is not the boot's to change
                return {"phoned": True, "reason": "; ".join(_verify(report, store.get(node).node(),
                                                                    BootImage.from_json(image))),
                        "ssh_host_key": str(report.get("ssh_host_key", ""))}
            return {"phoned": True, "reason": _record_verdict(store, node, report, BootImage.from_json(image),
                                                              State(during))}
        remaining = until - time.time()
        if remaining <= 0:
            return {"phoned": False, "reason": ""}
        with waiting(node, "boot", f"phone-home of boot attempt {attempt} ({remaining:.0f} s left)", run_id=run):
            WATCH.wait(run, attempt, remaining)


def _record_verdict(store: Store, node: str, report: dict[str, Any], img: BootImage,
                    during: State = State.PROVISIONING) -> str:
    """Verify the report against the node's record and the image; "" when provisioned, else why not."""
    problems = _verify(report, store.get(node).node(), img)
    run = current_run_id()
    done, failed = FINISH[during]
    if problems:
        reason = "; ".join(problems)
        store.transition(node, failed, Actor.WORKFLOW, reason, run_id=run)
        return reason
    store.transition(node, done, Actor.WORKFLOW, f"phoned home with {img.name} {img.version}", run_id=run)
    return ""


def _verify(report: dict[str, Any], spec: Node, image: BootImage) -> list[str]:
    problems = []
    if report.get("image_version") != image.version or report.get("image") != image.name:
        problems.append(f"booted image {report.get('image')} {report.get('image_version')}, "
                        f"expected {image.name} {image.version}")
    reported = {str(m).lower() for m in report.get("macs", [])}
    missing = [n.mac for n in spec.nics if n.role in ("boot", "mgmt", "data") and n.mac not in reported]
    if missing:
        problems.append(f"MACs not seen by the booted OS: {', '.join(missing)}")
    return problems


@DBOS.workflow(name="provision_node")
def provision_node(node: str, image_name: str | None,
                   settings: ProvisionSettings) -> dict[str, Any]:
    """Provision one node as a run that holds it (one run per node) from start to end.

    The lease is taken by the run's first step (``begin_run``) and released at the end, unless
    another run held the node (then this run took nothing and has nothing to release)."""
    out = Outcome(node, False, "")
    refused = False
    try:
        refused = _provision(node, image_name, settings, out)
    finally:
        if not refused:
            release_leases()
    return asdict(out)


def _provision(node: str, image_name: str | None, cfg: ProvisionSettings, out: Outcome) -> bool:
    """Provision into ``out``; True when another run holds the node (nothing was done)."""
    run = current_run_id()
    try:
        image = cfg.image(image_name)
        label = image_name or cfg.default_image
        first = _boot_request(image, cfg, 1)
        try:
            begun = begin_run(node, label, first)
        except DriverError as exc:  # after the retries the policy allows
            begun = {"held": "", "state": State.INSPECTING.value, "inspected": True, "reason": _bmc_failure(exc)}
        if begun["held"]:
            out.reason = begun["held"]
            return True
        state = begun["state"]
        if begun["inspected"]:
            out.steps.append("inspect")
        if begun["reason"]:
            out.state, out.reason = transition(node, "inspect_fail", begun["reason"]), begun["reason"]
            return False
        if state != State.PROVISIONING.value:
            out.state, out.reason = state, f"node is {state}; provisioning needs enrolled, available or failed"
            return False
        boot_into(node, image, cfg, State.PROVISIONING, out, started=begun.get("started"))
        return False
    finally:
        _release_bmc(run)


def _boot_request(image: BootImage, cfg: ProvisionSettings, attempt: int) -> BootRequest:
    return BootRequest(asdict(image), attempt, f"{cfg.boot_url}/phone-home", cfg.boot_timeout_s * 2,
                       cfg.boot_timeout_s)


def boot_into(node: str, image: BootImage, cfg: ProvisionSettings, during: State | None, out: Outcome,
              first_attempt: int = 1, started: dict[str, Any] | None = None) -> Outcome:
    """Network-boot the node into ``image`` and verify it; the node is in ``during`` (a state of ``FINISH``).

    The attempts, the claimed power cycle and the phone-home wait of every
    provisioning, whether first (``provisioning``) or a reimage of a node
    out of service (``reprovisioning``): the outcome's state is where the
    node ended (provisioned, or the verb's failed state with the reason).
    ``during`` None is a maintenance boot (a decommission's read-back of its
    erased drives): the same boot, verified the same way, and the node's
    state left as it is (``out.ok`` and ``out.reason`` say how it went).
    A run that boots the node more than once (a decommission: before its erase and after)
    numbers its later boots' attempts after the earlier ones' (``first_attempt``): an attempt
    is claimed once per run, so a second boot that reused attempt 1 would cycle nothing and find
    the first boot's phone-home. ``started``: the first attempt was already started by the run's
    first step (provisioning's ``begin_run``), with this result.
    """
    run = current_run_id()

    def failed(reason: str) -> str:
        return transition(node, FINISH[during][1], reason) if during is not None else out.state

    try:
        verdict: dict[str, Any] = {"phoned": False, "reason": ""}
        for attempt in range(first_attempt, first_attempt + cfg.attempts):
            if attempt == first_attempt and started is not None:
                boot = started
            else:
                boot = boot_attempt(node, _boot_request(image, cfg, attempt))
            _release_bmc(run)
            if boot["reason"]:
                out.state = failed(boot["reason"])
                out.reason = boot["reason"]
                return out
            out.steps.append(f"boot attempt {attempt}")
            verdict = await_phone_home(node, attempt, boot["until"], asdict(image),
                                       during.value if during is not None else "")
            if verdict["phoned"]:
                break
        if not verdict["phoned"]:
            reason = f"no phone-home after {cfg.attempts} boot(s) of {cfg.boot_timeout_s:.0f} s each"
            out.state, out.reason = failed(reason), reason
            return out
        out.reason = verdict["reason"]
        out.ok = not out.reason
        out.ssh_host_key = str(verdict.get("ssh_host_key", ""))
        if during is not None:
            out.state = TRANSITIONS[(during, FINISH[during][0 if out.ok else 1])].target.value
        return out
    finally:
        _release_bmc(run)


@DBOS.workflow(name="provision_many")
def provision_many(nodes: list[str], image_name: str | None,
                   settings: ProvisionSettings) -> list[dict[str, Any]]:
    queue = DBOS.retrieve_queue(QUEUE)
    if queue is None:
        raise RuntimeError(f"queue {QUEUE} is not registered; call register_provision_queue() after launch")
    handles = [queue.enqueue(provision_node, n, image_name, settings) for n in nodes]
    return await_runs([h.get_workflow_id() for h in handles])


# How often the parent looks at its unfinished children: DBOS's own handle.get_result() polls each once a second.
AWAIT_POLL_S = 1.0
_AWAIT_BATCH = 500  # run ids to a query, far under SQLite's 32,766 bound variables


@step(idempotent=True, name="await_runs")
def await_runs(run_ids: list[str]) -> list[Any]:
    """The results of the runs ``run_ids``, in order, once every one has ended; what
    ``[h.get_result() for h in handles]`` returns, as one step.

    Awaited one by one inside a workflow, each child costs the parent a read of its status and a
    recorded result (docs/provisioning.md, Throughput); here the parent reads its unfinished
    children's statuses together, once a second, and records one result for all of them. As
    ``get_result`` does, a child that raised fails the parent with the child's error, and one
    cancelled or out of recovery attempts fails it too. A reading only: run again (a recovered
    parent), it waits for the same children and returns the same results.
    """
    results: dict[str, Any] = {}
    pending = list(run_ids)
    while True:
        for start in range(0, len(pending), _AWAIT_BATCH):
            for st in DBOS.list_workflows(workflow_ids=pending[start:start + _AWAIT_BATCH], load_input=False):
                if st.status == "SUCCESS":
                    results[st.workflow_id] = st.output
                elif st.status == "ERROR":
                    raise st.error if st.error is not None else RuntimeError(f"run {st.workflow_id} failed")
                elif st.status in ("CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"):
                    raise RuntimeError(f"run {st.workflow_id} ended {st.status.lower()}, without a result")
        pending = [r for r in pending if r not in results]
        if not pending:
            return [results[r] for r in run_ids]
        time.sleep(AWAIT_POLL_S)


def register_provision_queue(max_in_flight: int) -> Queue:
    """At most ``max_in_flight`` nodes provisioned at once, across every process that serves the queue."""
    return DBOS.register_queue(QUEUE, global_concurrency=max_in_flight, polling_interval_sec=engine.QUEUE_POLL_S,
                               on_conflict="always_update")

