"""`ibstat` and `ibv_devinfo` for a simulated node's InfiniBand HCAs.

`ibstat` follows `fixtures/infiniband/gpud_ibstat.47.0.h100.*` (a downed port
reads "State: Down / Physical state: Disabled / Rate: 40" as in the
`some.down` capture); `ibv_devinfo` follows rdma-core's layout. One
ConnectX port per HCA, as on HGX nodes with one NIC per GPU.
"""

from __future__ import annotations

import os

from lifecycle.lab.gputools.state import Hca, NodeState

SM_LID = 334


def _ibstat_ca(h: Hca) -> str:
    return "\n".join([
        f"CA '{h.name}'",
        f"\tCA type: {h.ca_type}",
        "\tNumber of ports: 1",
        f"\tFirmware version: {h.firmware}",
        "\tHardware version: 0",
        f"\tNode GUID: 0x{h.node_guid:016x}",
        f"\tSystem image GUID: 0x{h.node_guid:016x}",
        "\tPort 1:",
        f"\t\tState: {'Active' if h.up else 'Down'}",
        f"\t\tPhysical state: {'LinkUp' if h.up else 'Disabled'}",
        f"\t\tRate: {h.rate if h.up else 40}",
        f"\t\tBase lid: {h.lid}",
        "\t\tLMC: 0",
        f"\t\tSM lid: {SM_LID}",
        "\t\tCapability mask: 0xa751e848",
        f"\t\tPort GUID: 0x{h.node_guid:016x}",
        "\t\tLink layer: InfiniBand",
    ])


def ibstat(argv: list[str], s: NodeState) -> tuple[str, int]:
    hcas = sorted(s.hcas, key=lambda h: h.name)
    if "-l" in argv or "--list_of_cas" in argv:
        return "".join(f"{h.name}\n" for h in hcas), 0
    names = [a for a in argv if not a.startswith("-")]
    if names:
        hcas = [h for h in hcas if h.name == names[0]]
        if not hcas:
            return f"ibpanic: [{os.getpid()}] main: '{names[0]}' IB device can't be found: No such device\n", 255
    return "\n".join(_ibstat_ca(h) for h in hcas) + "\n", 0


def _guid(value: int) -> str:
    h = f"{value:016x}"
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


def ibv_devinfo(argv: list[str], s: NodeState) -> tuple[str, int]:
    verbose = "-v" in argv or "--verbose" in argv
    hcas = list(s.hcas)
    for flag in ("-d", "--ib-dev"):
        if flag in argv:
            idx = argv.index(flag)
            want = argv[idx + 1] if idx + 1 < len(argv) else ""
            hcas = [h for h in hcas if h.name == want]
            if not hcas:
                return f"IB device '{want}' wasn't found\n", 255
    out: list[str] = []
    for h in hcas:
        out += [
            f"hca_id:\t{h.name}",
            "\ttransport:\t\t\tInfiniBand (0)",
            f"\tfw_ver:\t\t\t\t{h.firmware}",
            f"\tnode_guid:\t\t\t{_guid(h.node_guid)}",
            f"\tsys_image_guid:\t\t\t{_guid(h.node_guid)}",
            "\tvendor_id:\t\t\t0x02c9",
            f"\tvendor_part_id:\t\t\t{h.vendor_part}",
            "\thw_ver:\t\t\t\t0x0",
            "\tboard_id:\t\t\tMT_0000000838",
            "\tphys_port_cnt:\t\t\t1",
            "\t\tport:\t1",
            f"\t\t\tstate:\t\t\t{'PORT_ACTIVE (4)' if h.up else 'PORT_DOWN (1)'}",
            "\t\t\tmax_mtu:\t\t4096 (5)",
            "\t\t\tactive_mtu:\t\t4096 (5)",
            f"\t\t\tsm_lid:\t\t\t{SM_LID}",
            f"\t\t\tport_lid:\t\t{h.lid}",
            "\t\t\tport_lmc:\t\t0x00",
            "\t\t\tlink_layer:\t\tInfiniBand",
        ]
        if verbose:
            out.append(f"\t\t\tphys_state:\t\t{'LINK_UP (5)' if h.up else 'DISABLED (3)'}")
        out.append("")
    return "\n".join(out) + "\n", 0
