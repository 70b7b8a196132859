"""Render what a node needs to network-boot: dnsmasq's DHCP reservations and its iPXE script.

Values come from the validated inventory (RFC 1123 names, normalised MACs and
IPs) and are still checked here before they are written into a configuration
language, because a config file is as interpretable as a shell string.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

from lifecycle.model import vocab
from lifecycle.model.inventory import Inventory, Node

# fullmatch, never match with '$': '$' also matches before a final newline, and a newline in a kernel
# argument ends the iPXE `kernel` line, so the next argument would run as an iPXE command.
_SAFE_ARG = re.compile(r"[A-Za-z0-9._:/=,+@%-]+")
_SAFE_URL = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+(/[A-Za-z0-9._~/%+-]*)?")


class RenderError(ValueError):
    """A value that must not be written into a boot configuration."""


def _url(value: str, what: str) -> str:
    if not isinstance(value, str) or not _SAFE_URL.fullmatch(value):
        raise RenderError(f"{what}: not a plain http(s) URL: {value!r}")
    return value


def _arg(value: str, what: str) -> str:
    if not isinstance(value, str) or not _SAFE_ARG.fullmatch(value):
        raise RenderError(f"{what}: unsafe kernel argument {value!r}")
    return value


@dataclass(frozen=True)
class BootImage:
    """A built image as the boot server publishes it."""

    name: str
    version: str
    kernel_url: str
    initrd_url: str
    rootfs_url: str | None
    rootfs_sha256: str | None
    kernel_args: tuple[str, ...] = ("console=ttyS0", "quiet")

    @classmethod
    def from_json(cls, data: dict[str, object]) -> BootImage:
        def s(key: str) -> str:
            return str(data[key])

        def opt(key: str) -> str | None:
            return None if data.get(key) is None else str(data[key])

        args = data.get("kernel_args", cls.kernel_args)
        return cls(s("name"), s("version"), s("kernel_url"), s("initrd_url"), opt("rootfs_url"),
                   opt("rootfs_sha256"), tuple(str(a) for a in args) if isinstance(args, (list, tuple)) else ())


def _checked(what: str, check: Callable[[str], str], value: str) -> str:
    """A model value re-checked at this boundary (a Node can be built without the inventory's parser)."""
    try:
        return check(value)
    except ValueError as exc:
        raise RenderError(f"{what}: {exc}") from None


def ipxe_script(node: Node, image: BootImage, phone_home_url: str, token: str) -> str:
    """The per-node iPXE script: kernel, initrd, root image with its sha256, and a single-use token."""
    _checked("node name", vocab.node_name, node.name)
    _checked("serial", vocab.serial, node.serial)
    args = [*(_arg(a, "kernel_args") for a in image.kernel_args),
            f"racklife.node={node.name}",
            f"racklife.image={_arg(image.name, 'image')}",
            f"racklife.image_version={_arg(image.version, 'image version')}",
            f"racklife.phone_home={_url(phone_home_url, 'phone_home_url')}",
            f"racklife.token={_arg(token, 'token')}"]
    if image.rootfs_url:
        args.append(f"racklife.root={_url(image.rootfs_url, 'rootfs_url')}")
        if image.rootfs_sha256:
            if not isinstance(image.rootfs_sha256, str) or not re.fullmatch(r"[0-9a-f]{64}", image.rootfs_sha256):
                raise RenderError("rootfs_sha256 is not a sha256 hex digest")
            args.append(f"racklife.root_sha256={image.rootfs_sha256}")
    return "\n".join([
        "#!ipxe",
        f"# racklife: {node.name} ({node.serial}) image {image.name} {image.version}",
        f"kernel {_url(image.kernel_url, 'kernel_url')} initrd=initrd.img {' '.join(args)}",
        f"initrd --name initrd.img {_url(image.initrd_url, 'initrd_url')}",
        "boot",
        "",
    ])


def chain_script(boot_base_url: str) -> str:
    """The script every iPXE client gets first: fetch this machine's own script by MAC."""
    base = _url(boot_base_url.rstrip("/"), "boot_base_url")
    return f"#!ipxe\nchain {base}/boot/${{net0/mac:hexhyp}}.ipxe || goto failed\nexit\n:failed\nsleep 10\nreboot\n"


def parse_ipxe_args(script: str) -> dict[str, str]:
    """The ``racklife.*`` kernel arguments of a rendered script (what the booted node reads)."""
    for line in script.splitlines():
        if line.startswith("kernel "):
            return {k.removeprefix("racklife."): v for k, _, v in
                    (a.partition("=") for a in line.split()[2:]) if k.startswith("racklife.")}
    raise RenderError("no kernel line in iPXE script")


def dnsmasq_conf(inv: Inventory, *, interface: str, boot_base_url: str,
                 dhcp_range: tuple[str, str] | None = None, reservations_only: str | None = None,
                 tftp_root: str | None = None, no_router: bool = False) -> str:
    """dnsmasq: DHCP only (no DNS), one reservation per boot MAC, iPXE chain-loading to HTTP.

    Plain PXE firmware gets iPXE over TFTP; iPXE (DHCP option 175) is sent to
    ``{boot_base_url}/boot.ipxe``, which chains to the per-MAC script (see
    :func:`chain_script`). Give exactly one of ``dhcp_range`` (a dynamic pool
    beside the reservations) or ``reservations_only`` (a subnet such as
    ``10.77.0.0/16``: only MACs in the inventory get an address). ``no_router``
    sends an empty router option, for a boot network that must not become
    anyone's way out.
    """
    if not isinstance(interface, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", interface):
        raise RenderError(f"interface: not an interface name: {interface!r}")
    if (dhcp_range is None) == (reservations_only is None):
        raise RenderError("give exactly one of dhcp_range and reservations_only")
    if dhcp_range is not None:
        lo, hi = (_checked("dhcp_range", vocab.ip, a) for a in dhcp_range)
        pool = f"dhcp-range={lo},{hi},12h"
    else:
        try:
            net = ipaddress.IPv4Network(str(reservations_only))
        except ValueError as exc:
            raise RenderError(f"reservations_only: not an IPv4 subnet: {reservations_only!r}") from exc
        pool = f"dhcp-range={net.network_address},static,{net.netmask},12h"
    base = _url(boot_base_url.rstrip("/"), "boot_base_url")
    lines = [
        "# Generated by racklife; do not edit.",
        "port=0",  # no DNS
        f"interface={interface}",
        "bind-interfaces",
        "log-dhcp",
        pool,
        "dhcp-match=set:ipxe,175",
        "dhcp-userclass=set:ipxe,iPXE",
        f"dhcp-boot=tag:ipxe,{base}/boot.ipxe",
    ]
    if no_router:
        lines.append("dhcp-option=option:router")  # no value: the option is sent empty
    if tftp_root:
        lines += ["enable-tftp", f"tftp-root={_arg(tftp_root, 'tftp_root')}",
                  "dhcp-match=set:efi64,option:client-arch,7",
                  "dhcp-boot=tag:!ipxe,tag:efi64,ipxe.efi", "dhcp-boot=tag:!ipxe,tag:!efi64,undionly.kpxe"]
    for node in sorted(inv.nodes, key=lambda n: n.name):
        ip = node.boot_ip or next((n.ip for n in node.nics if n.role == "boot" and n.ip), None)
        entry = (f"dhcp-host={_checked('mac', vocab.mac, node.boot_mac())},"
                 f"{_checked('node name', vocab.node_name, node.name)}")
        lines.append(f"{entry},{_checked('ip', vocab.node_ip, ip)}" if ip else entry)
    return "\n".join(lines) + "\n"
