"""The BMC driver split: each hardware type is the interfaces it inherits, and the table the
planner reads (without importing a driver) says the same."""

from __future__ import annotations

import pytest

from lifecycle.drivers.bmc.base import (
    INTERFACES,
    BiosInterface,
    Capability,
    Credentials,
    FirmwareInterface,
    capabilities_of,
    require,
)
from lifecycle.drivers.bmc.factory import (
    HARDWARE_TYPES,
    capabilities,
    supports,
    unsupported_reason,
)
from lifecycle.drivers.bmc.fake import FakeBmc
from lifecycle.drivers.bmc.ipmi import IpmiDriver
from lifecycle.drivers.bmc.redfish import RedfishDriver
from lifecycle.drivers.errors import NotSupported
from lifecycle.model.inventory import BmcSpec

CLASSES = {"redfish": RedfishDriver, "ipmi": IpmiDriver}


@pytest.mark.parametrize("kind", sorted(CLASSES))
def test_the_planning_table_matches_the_driver_classes(kind: str) -> None:
    assert HARDWARE_TYPES[kind] == capabilities_of(CLASSES[kind])
    assert CLASSES[kind].hardware_type == kind


def test_every_capability_has_one_interface() -> None:
    assert set(INTERFACES) == set(Capability)
    assert capabilities_of(FakeBmc) == set(Capability)  # the fake stands in for Redfish


def test_a_node_spec_answers_without_touching_its_bmc() -> None:
    ipmi = BmcSpec(driver="ipmi", address="10.0.0.5:623", credentials="env:NOPE")
    redfish = BmcSpec(driver="redfish", address="https://10.0.0.6", credentials="env:NOPE")
    assert not supports(ipmi, Capability.FIRMWARE) and not supports(ipmi, Capability.BIOS)
    assert supports(ipmi, Capability.POWER) and supports(ipmi, Capability.BOOT)
    assert supports(redfish, Capability.FIRMWARE) and supports(redfish, Capability.ERASE)
    assert capabilities(redfish) == set(Capability)
    reason = unsupported_reason(ipmi, Capability.FIRMWARE)
    assert reason == ("a firmware update needs a BMC with the firmware interface; the ipmi driver "
                      "offers boot, inventory, power (use Redfish for this node)")
    assert unsupported_reason(redfish, Capability.FIRMWARE) is None


def test_require_hands_back_the_interface_or_refuses() -> None:
    fake = FakeBmc()
    assert require(fake, FirmwareInterface) is fake
    assert require(fake, BiosInterface) is fake


    assert supports(fake, Capability.FIRMWARE)
    ipmi = IpmiDriver("127.0.0.1:1", Credentials("u", "p"))
    with pytest.raises(NotSupported, match=r"firmware update needs .* the ipmi driver"):
        require(ipmi, FirmwareInterface)

