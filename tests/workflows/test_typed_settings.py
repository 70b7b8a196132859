"""The settings every workflow takes are typed, refuse bad values, and survive recovery.

A workflow's arguments are recorded by the engine (DBOS pickles them) and
decoded again when a run is recovered. These go through DBOS's own
serializer: a run started with typed settings (the boot server's
provisioning settings typed inside a role swap's, a repair's, a change's and
a read-back's) replays with equal ones, typed all the way down.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

import pytest
from dbos._serialization import DefaultSerializer

from lifecycle.drivers.boot.render import BootImage
from lifecycle.model.vocab import LEVELS
from lifecycle.workflows.accept import AcceptSettings
from lifecycle.workflows.changes import ChangeContext, ChangeKind, ChangeSettings, ChangeSpec, ImageChange
from lifecycle.workflows.decommission_checks import ReadbackSettings
from lifecycle.workflows.kube_pool import KubeSettings
from lifecycle.workflows.provision import ProvisionSettings
from lifecycle.workflows.repair import RepairSettings
from lifecycle.workflows.repair_table import RepairAction
from lifecycle.workflows.roleswap_checks import SwapSettings

GOLDEN = BootImage("golden", "2", "http://10.0.0.1:8069/images/golden-2/vmlinuz",
                   "http://10.0.0.1:8069/images/golden-2/initrd.img", None, None, ("console=ttyS0",))
TYPED = ProvisionSettings(boot_url="http://10.0.0.1:8069", images={"golden": GOLDEN, "golden:2": GOLDEN},
                          default_image="golden", boot_timeout_s=300.0)
ACCEPT = AcceptSettings(level="quick", work_dir="/w", report_dir="/w/reports", operator="ops", ssh_config="/ssh")
KUBE = KubeSettings("/kubeconfig")


def _recorded(*args: Any) -> tuple[Any, ...]:
    """The arguments as a recovered run gets them: through DBOS's serializer and back."""
    ser = DefaultSerializer()
    inputs: dict[str, Any] = ser.deserialize(ser.serialize({"args": args, "kwargs": {}}))
    return tuple(inputs["args"])


@pytest.mark.parametrize(("change", "why"), [
    ({"attempts": 0}, "attempts must be at least 1, not 0"),
    ({"boot_timeout_s": 0.0}, "boot_timeout_s must be above 0, not 0.0"),
    ({"boot_url": "10.0.0.1:8069"}, "boot_url must be http(s)://, not '10.0.0.1:8069'"),
    ({"images": {"golden": asdict(GOLDEN)}}, "images must be BootImage values"),
])
def test_provisioning_settings_refuse_a_bad_value_with_the_field(change: dict[str, Any], why: str) -> None:
    with pytest.raises(ValueError, match="provisioning settings: ") as info:
        replace(TYPED, **change)
    assert why in str(info.value)


@pytest.mark.parametrize("level", ["extreme", "Quick", ""])
def test_acceptance_settings_refuse_a_level_burn_in_does_not_have(level: str) -> None:
    """The field is a ``Level`` to mypy; a caller that built it from a plain string is refused at once, not by
    the node's burn-in hours later."""
    with pytest.raises(ValueError, match="level must be one of quick, standard, full") as info:
        replace(ACCEPT, level=level)  # type: ignore[arg-type]
    assert repr(level) in str(info.value)
    with pytest.raises(ValueError, match="acceptance settings: level"):
        AcceptSettings(level=level, work_dir="/w", report_dir="/w/r", operator="ops", ssh_config="/ssh")  # type: ignore[arg-type]
    assert [replace(ACCEPT, level=lvl).level for lvl in LEVELS] == ["quick", "standard", "full"]


def test_a_run_started_with_typed_settings_replays_with_equal_settings() -> None:
    swap = SwapSettings(target="inference", operator="ops", kube=KUBE, accept=ACCEPT, reimage="golden:2",
                        provision=TYPED)
    repair = RepairSettings(RepairAction.REIMAGE, "xid 79", "ops", ACCEPT, image="golden", provision=TYPED)
    change = ChangeSettings((ChangeSpec(ChangeKind.IMAGE, "golden:2"),), "ops", ACCEPT, ChangeContext(TYPED))
    readback = ReadbackSettings(TYPED, "/ssh")
    for given in (TYPED, swap, repair, change, readback):
        (node, got) = _recorded("node-01", given)
        assert node == "node-01" and got == given and type(got) is type(given)
    (_, got_swap) = _recorded("node-01", swap)
    assert isinstance(got_swap.provision, ProvisionSettings) and got_swap.provision.image("golden:2") == GOLDEN
    (_, got_change) = _recorded("node-01", change)
    assert ImageChange("golden:2", got_change.context.provision).precheck() == ""
