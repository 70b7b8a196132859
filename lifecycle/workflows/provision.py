"""Provisioning: enrolled → inspecting → available → provisioning → provisioned.

One durable workflow per node; a parent workflow fans them out through a DBOS
queue whose worker concurrency is ``--max-in-flight``. Every step reads the
actual state first; the power cycle is claimed in the store before it is
sent, so a controller killed mid-rack never cycles a node twice for the same
attempt. Boot: set one-time network boot, power cycle, wait for the node to
phone home with its single-use token (DBOS recv); on timeout one more boot,
then ``provision_failed`` with the reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from dbos import DBOS, Queue

from lifecycle.drivers.bmc.base import BmcDriver, BootDevice, PowerAction, PowerState
from lifecycle.drivers.boot.render import BootImage, ipxe_script
from lifecycle.drivers.errors import DriverError
from lifecycle.model.skus import SKUS
from lifecycle.store import boot as boot_store
from lifecycle.store import shared_store
from lifecycle.workflows.engine import step_token
from lifecycle.workflows.node_ops import current_run_id, node_state, transition

PHONE_HOME_TOPIC = "phone-home"
QUEUE = "racklife-provision"


@dataclass(frozen=True)
class ProvisionSettings:
    """Where the boot server is and what each image is; passed as workflow input (JSON-able)."""

    boot_url: str
    images: dict[str, dict[str, Any]]  # name -> BootImage fields
    default_image: str
    boot_timeout_s: float = 600.0
    attempts: int = 2

    def image(self, name: str | None) -> BootImage:
        key = name or self.default_image
        if key not in self.images:
            have = ", ".join(sorted(self.images))
            raise KeyError(f"image '{key}' is not published on the boot server (have: {have})")
        return BootImage.from_json(self.images[key])

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Outcome:
    node: str
    ok: bool
    state: str
    reason: str = ""
    steps: list[str] = field(default_factory=list)


def _bmc(node: str) -> tuple[BmcDriver, Any]:
    # Imported here: the factory pulls in vendor SDKs only when a BMC is really used.
    from lifecycle.drivers.bmc.factory import driver_for

    store = shared_store()
    spec = store.get(node).node()
    return driver_for(spec.bmc), spec


@DBOS.step()
def inspect_hardware(node: str) -> list[str]:
    """Compare the BMC's inventory with the inventory file; return the mismatches (empty: match)."""
    driver, spec = _bmc(node)
    try:
        hw = driver.inventory()
    finally:
        driver.close()
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


@DBOS.step()
def prepare_boot(node: str, image: dict[str, Any], attempt: int, phone_home_url: str, ttl_s: float) -> None:
    store = shared_store()
    spec = store.get(node).node()
    img = BootImage.from_json(image)
    boot_store.issue_boot(store, node, spec.boot_mac(), current_run_id(), attempt,
                          lambda token: ipxe_script(spec, img, phone_home_url, token),
                          timedelta(seconds=ttl_s))


@DBOS.step()
def set_network_boot(node: str) -> None:
    driver, _ = _bmc(node)
    try:
        driver.set_boot(BootDevice.PXE, once=True)
    finally:
        driver.close()


@DBOS.step()
def power_cycle(node: str, attempt: int) -> bool:
    """Cycle the node once per (run, attempt); False when this attempt's cycle was already sent."""
    store = shared_store()
    if not boot_store.claim_effect(store, step_token(current_run_id(), f"power_cycle:{attempt}"), node,
                                   "power_cycle"):
        return False
    driver, _ = _bmc(node)
    try:
        if driver.power_state() in (PowerState.OFF, PowerState.POWERING_OFF):
            driver.power(PowerAction.ON)
        else:
            driver.power(PowerAction.CYCLE)
    finally:
        driver.close()
    return True


def _verify(report: dict[str, Any], node: str, image: BootImage) -> list[str]:
    store = shared_store()
    spec = store.get(node).node()
    problems = []
    if report.get("image_version") != image.version or report.get("image") != image.name:
        problems.append(f"booted image {report.get('image')} {report.get('image_version')}, "
                        f"expected {image.name} {image.version}")
    reported = {str(m).lower() for m in report.get("macs", [])}
    missing = [n.mac for n in spec.nics if n.role in ("boot", "mgmt", "data") and n.mac not in reported]
    if missing:
        problems.append(f"MACs not seen by the booted OS: {', '.join(missing)}")
    return problems


@DBOS.workflow()
def provision_node(node: str, image_name: str | None, settings: dict[str, Any]) -> dict[str, Any]:
    cfg = ProvisionSettings(**settings)
    out = Outcome(node, False, "")
    state = node_state(node)
    try:
        if state in ("enrolled", "inspect_failed", "inspecting"):
            if state != "inspecting":
                transition(node, "inspect", "provisioning starts with inspection")
            problems = inspect_hardware(node)
            out.steps.append("inspect")
            if problems:
                reason = "; ".join(problems)
                out.state = transition(node, "inspect_fail", reason)
                out.reason = reason
                return asdict(out)
            transition(node, "inspect_done", "BMC inventory matches the inventory file")
            state = "available"
        if state in ("available", "provision_failed", "provisioned"):
            transition(node, "provision", f"provision with image {image_name or cfg.default_image}")
        elif state != "provisioning":
            out.state, out.reason = state, f"node is {state}; provisioning needs enrolled, available or failed"
            return asdict(out)
        image = cfg.image(image_name)
        report: dict[str, Any] | None = None
        for attempt in range(1, cfg.attempts + 1):
            prepare_boot(node, asdict(image), attempt, f"{cfg.boot_url}/phone-home", cfg.boot_timeout_s * 2)
            set_network_boot(node)
            power_cycle(node, attempt)
            out.steps.append(f"boot attempt {attempt}")
            msg = DBOS.recv(PHONE_HOME_TOPIC, timeout_seconds=cfg.boot_timeout_s)
            if msg is not None:
                report = dict(msg)
                break
        if report is None:
            reason = f"no phone-home after {cfg.attempts} boot(s) of {cfg.boot_timeout_s:.0f} s each"
            out.state, out.reason = transition(node, "provision_fail", reason), reason
            return asdict(out)
        problems = _verify(report, node, image)
        if problems:
            reason = "; ".join(problems)
            out.state, out.reason = transition(node, "provision_fail", reason), reason
            return asdict(out)
        out.state = transition(node, "provision_done", f"phoned home with {image.name} {image.version}")
        out.ok = True
        return asdict(out)
    except DriverError as exc:
        reason = f"BMC {type(exc).__name__.lower()}: {exc.message}"
        event = "inspect_fail" if node_state(node) == "inspecting" else "provision_fail"
        out.state, out.reason = transition(node, event, reason), reason
        return asdict(out)


@DBOS.workflow()
def provision_many(nodes: list[str], image_name: str | None, settings: dict[str, Any]) -> list[dict[str, Any]]:
    queue = DBOS.retrieve_queue(QUEUE)
    if queue is None:
        raise RuntimeError(f"queue {QUEUE} is not registered; call register_provision_queue() after launch")
    handles = [queue.enqueue(provision_node, n, image_name, settings) for n in nodes]
    return [h.get_result() for h in handles]


def register_provision_queue(max_in_flight: int) -> Queue:
    return DBOS.register_queue(QUEUE, worker_concurrency=max_in_flight, polling_interval_sec=0.2,
                               on_conflict="always_update")

