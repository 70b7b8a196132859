"""Fixtures for the Kubernetes driver tests: the stand-in API, a virtual clock, both drivers behind one scene."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig

from lifecycle.drivers.kube.api import KubeApiDriver
from lifecycle.drivers.kube.base import KubeDriver
from lifecycle.drivers.kube.fake import FakeKubeDriver
from lifecycle.drivers.kube.types import Taint
from lifecycle.lab.kube import KubeStandIn
from tests.kube.helpers import call, connect

__all__ = ["call", "connect"]


class VirtualClock:
    """Virtual time: ``sleep`` advances ``now``, records the wait and runs what a test scheduled for then."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.at_sleep: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.at_sleep:
            self.at_sleep.pop(0)()


class Scene:
    """Sets up a cluster the same way for the stand-in (over HTTP) and for the fake driver (in memory)."""

    def __init__(self, stand_in: KubeStandIn | None, fake: FakeKubeDriver | None) -> None:
        self.stand_in, self.fake = stand_in, fake

    def node(self, name: str, *, labels: Mapping[str, str] | None = None, taints: tuple[Taint, ...] = (),
             gpus: int = 8) -> None:
        if self.stand_in:
            self.stand_in.join(name, labels=labels, taints=[t.to_api() for t in taints], gpus=gpus)
        else:
            assert self.fake
            self.fake.add_node(name, labels=labels, taints=taints, gpus=gpus)

    def pod(self, name: str, node: str, **kw: Any) -> None:
        if self.stand_in:
            self.stand_in.create_pod(name, node, **kw)
        else:
            assert self.fake
            self.fake.add_pod(name, node, **kw)

    def pdb(self, name: str, match_labels: Mapping[str, str], **kw: Any) -> None:
        if self.stand_in:
            self.stand_in.create_pdb(name, match_labels, **kw)
        else:
            assert self.fake
            self.fake.add_pdb(name, match_labels, **kw)

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        if self.stand_in:
            self.stand_in.delete_pod(name, namespace)
        else:
            assert self.fake
            self.fake.delete_pod(name, namespace)

    def set_ready(self, name: str, ready: bool) -> None:
        if self.stand_in:
            self.stand_in.set_ready(name, ready)
        else:
            assert self.fake
            self.fake.set_ready(name, ready)

    def admin_cordon(self, name: str) -> None:
        """``kubectl cordon NAME``: unschedulable, no racklife mark."""
        if self.stand_in:
            self.stand_in.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}},
                                  "application/strategic-merge-patch+json")
        else:
            assert self.fake
            self.fake.admin_cordon(name)


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture(scope="session")
def _served() -> Iterator[KubeStandIn]:
    # The lab's kubelet stops a deleted pod at once: drains in virtual time see it gone on the next read.
    with KubeStandIn(shutdown_s=0) as api:
        yield api


@pytest.fixture
def stand_in(_served: KubeStandIn) -> KubeStandIn:
    """The stand-in, emptied for this test (one server for the session: a client costs more than a reset)."""
    _served.reset()
    return _served


@pytest.fixture
def kubeconfig(stand_in: KubeStandIn, tmp_path: Path) -> Path:
    return stand_in.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture(scope="session")
def _client(_served: KubeStandIn, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    config = _served.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
    with Client(KubeConfig.from_file(config), trust_env=False) as client:
        yield client


@pytest.fixture
def api_driver(stand_in: KubeStandIn, _client: Client, clock: VirtualClock) -> KubeApiDriver:
    return KubeApiDriver(_client, target=stand_in.url, clock=clock, sleep=clock.sleep)


@pytest.fixture(params=["api", "fake"])
def cluster(request: pytest.FixtureRequest, clock: VirtualClock) -> Iterator[tuple[KubeDriver, Scene]]:
    """The same scenario against the real driver over HTTP to the stand-in, and against the fake."""
    if request.param == "fake":
        fake = FakeKubeDriver(clock=clock, sleep=clock.sleep)
        yield fake, Scene(None, fake)
        return
    stand_in = request.getfixturevalue("stand_in")
    yield request.getfixturevalue("api_driver"), Scene(stand_in, None)
