"""Ports for lab daemons that bind long after the lab picks them.

A powered-off node's slurmd binds its port only when the node is powered on,
perhaps minutes after the lab chose the port; `racklife provision` binds the
lab's boot port whenever the user runs it. A port found by binding port 0
comes from the kernel's ephemeral range, and meanwhile any outgoing
connection on the machine may be given it as its local port: the daemon then
fails with "Address already in use" and the node never registers (slurmctld
keeps it POWERING_UP until ResumeTimeout). So lab ports come from below the
ephemeral range, where the kernel assigns none by itself, and each is held by
a lock file for as long as its lab lives, so two labs on one machine (two
pytest workers, say) never pick the same port.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from pathlib import Path

FLOOR = 20000
"""Lowest port a lab takes (above the well-known and most registered service ports)."""

LOCK_DIR = Path(tempfile.gettempdir()) / "racklife-ports"


class PortsExhausted(RuntimeError):
    """Too few free ports between FLOOR and the kernel's ephemeral range."""


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ports it picks by itself (bind to port 0, outgoing connections)."""
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def _bindable(port: int, kind: socket.SocketKind) -> bool:
    with socket.socket(socket.AF_INET, kind) as s:
        # As the daemons do: a port left in TIME_WAIT by an earlier lab is free to them.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))  # noqa: S104 - a test bind, closed at once; nothing listens
        except OSError:
            return False
    return True


class PortLease:
    """Ports held for one lab: each has a lock file locked by this process until ``release()``."""

    def __init__(self) -> None:
        self._fds: dict[int, int] = {}

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(self._fds)

    def _try(self, port: int) -> bool:
        if not LOCK_DIR.is_dir():
            LOCK_DIR.mkdir(exist_ok=True)
            LOCK_DIR.chmod(0o1777)  # as /tmp: every user's labs share it, each owns its files
        try:
            fd = os.open(LOCK_DIR / str(port), os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError:  # another user's lock file: theirs to use
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        if not (_bindable(port, socket.SOCK_STREAM) and _bindable(port, socket.SOCK_DGRAM)):
            os.close(fd)  # closing the descriptor drops the lock
            return False
        self._fds[port] = fd
        return True

    def take(self, count: int) -> list[int]:
        """Lock ``count`` more free ports (the lowest free ones from FLOOR up) and return them."""
        low, _ = ephemeral_range()
        got: list[int] = []
        for port in range(FLOOR, low):
            if len(got) == count:
                break
            if port not in self._fds and self._try(port):
                got.append(port)
        if len(got) < count:
            for port in got:
                self._drop(port)
            raise PortsExhausted(
                f"found {len(got)} of {count} free ports between {FLOOR} and the kernel's "
                f"ephemeral range (from {low}, /proc/sys/net/ipv4/ip_local_port_range)"
            )
        return got

    def _drop(self, port: int) -> None:
        fd = self._fds.pop(port)
        with contextlib.suppress(OSError):
            os.close(fd)

    def release(self) -> None:
        for port in list(self._fds):
            self._drop(port)
