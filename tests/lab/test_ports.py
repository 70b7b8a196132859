"""Lab ports: below the kernel's ephemeral range, never shared by two labs, skipped when in use."""

from __future__ import annotations

import fcntl
import os
import socket

import pytest

from lifecycle.lab import ports
from lifecycle.lab.ports import PortLease, PortsExhausted


def test_ports_come_from_below_the_ephemeral_range_and_two_leases_never_share() -> None:
    low, _ = ports.ephemeral_range()
    a, b = PortLease(), PortLease()
    try:
        first = a.take(20)
        second = b.take(20)
        assert all(ports.FLOOR <= p < low for p in first + second)
        assert not set(first) & set(second)
        assert set(a.ports) == set(first)
    finally:
        a.release()
        b.release()


def test_a_released_port_is_unlocked() -> None:
    lease = PortLease()
    [port] = lease.take(1)
    fd = os.open(ports.LOCK_DIR / str(port), os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lease.release()
        assert lease.ports == ()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free now
    finally:
        lease.release()
        os.close(fd)


def test_a_port_something_listens_on_is_skipped() -> None:
    probe = PortLease()
    [port] = probe.take(1)
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # an earlier lab's port in TIME_WAIT
        srv.bind(("127.0.0.1", port))
        srv.listen()
        probe.release()  # unlocked now, but something listens there
        lease = PortLease()
        try:
            assert port not in lease.take(3)
        finally:
            lease.release()


def test_too_few_ports_is_a_clear_error_and_holds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (ports.FLOOR + 4, 60999))
    lease = PortLease()
    with pytest.raises(PortsExhausted, match=r"of 50 free ports between 20000"):
        lease.take(50)
    assert lease.ports == ()
