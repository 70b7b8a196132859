"""Watches over real HTTP: live events, resourceVersion replay, selector-scoped pod watches, 410 Gone."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from lifecycle.drivers.kube.api import KubeApiDriver
from lifecycle.drivers.kube.types import WatchEvent
from lifecycle.lab.kube import KubeStandIn
from lifecycle.lab.kube import store as lab_kube
from tests.kube.helpers import connect

T = TypeVar("T")


def within(seconds: float, fn: Callable[[], T]) -> T:
    """Run ``fn`` in a worker so a watch that never delivers fails the test instead of hanging it."""
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(fn).result(timeout=seconds)
    finally:
        pool.shutdown(wait=False)


def first(events: Iterator[WatchEvent], wanted: Callable[[WatchEvent], bool]) -> WatchEvent:
    for event in events:
        if wanted(event):
            return event
    raise AssertionError("the watch ended without the event")


def test_replay_from_a_resource_version(stand_in: KubeStandIn, api_driver: KubeApiDriver) -> None:
    stand_in.join("gpu-01")
    stand_in.join("gpu-02")
    since = api_driver.list_version()
    api_driver.cordon("gpu-02", "run-1")

    def seen() -> list[WatchEvent]:
        events = api_driver.watch_nodes(since=since, server_timeout_s=5)
        return [next(events)]

    (event,) = within(10, seen)
    assert (event.type, event.name) == ("MODIFIED", "gpu-02")  # no ADDED replay of what came before
    assert event.node is not None and event.node.unschedulable
    assert int(event.resource_version) > int(since)


def test_live_events_arrive_while_watching(stand_in: KubeStandIn, api_driver: KubeApiDriver) -> None:
    stand_in.join("gpu-01", labels={"racklife.io/pool": "inference"})
    stand_in.join("gpu-02", labels={"racklife.io/pool": "training"})

    def watch() -> list[WatchEvent]:
        events = api_driver.watch_nodes(labels={"racklife.io/pool": "inference"}, server_timeout_s=5)
        added = next(events)  # the stream is open once the initial ADDED arrives
        threading.Thread(target=lambda: stand_in.join("gpu-03", labels={"racklife.io/pool": "inference"})).start()
        return [added, first(events, lambda e: e.name == "gpu-03")]

    added, joined = within(10, watch)
    assert (added.type, added.name) == ("ADDED", "gpu-01")  # gpu-02 is outside the selector
    assert (joined.type, joined.name) == ("ADDED", "gpu-03")
    assert joined.node is not None and joined.node.ready and joined.node.gpus == 8


def test_pod_watch_is_scoped_to_its_node(stand_in: KubeStandIn, api_driver: KubeApiDriver) -> None:
    stand_in.join("gpu-01")
    stand_in.join("gpu-02")
    since = api_driver.list_version()
    stand_in.create_pod("elsewhere", "gpu-02")
    stand_in.create_pod("web-a", "gpu-01", labels={"app": "web"})
    api_driver.cordon("gpu-01", "run-2")
    api_driver.drain("gpu-01", deadline_s=5)

    def seen() -> list[WatchEvent]:
        out: list[WatchEvent] = []
        for event in api_driver.watch_pods("gpu-01", since=since, server_timeout_s=5):
            out.append(event)
            if event.type == "DELETED":
                return out
        return out

    events = within(10, seen)
    assert {e.name for e in events} == {"web-a"}
    assert (events[0].type, events[-1].type) == ("ADDED", "DELETED")
    # As a kubelet reports: Pending, then Running; the eviction makes it Terminating before it is gone.
    assert [e.pod.phase for e in events if e.pod] [:2] == ["Pending", "Running"]
    assert any(e.type == "MODIFIED" and e.pod and e.pod.terminating for e in events)


def _raw_watch(stand_in: KubeStandIn, query: str) -> dict[str, Any]:
    conn = connect(stand_in)
    try:
        conn.request("GET", f"/api/v1/nodes?watch=true&{query}", headers={"Authorization": f"Bearer {stand_in.token}"})
        resp = conn.getresponse()
        assert resp.status == 200
        return dict(json.loads(resp.readline()))
    finally:
        conn.close()


def test_a_version_older_than_the_journal_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lab_kube, "JOURNAL_SIZE", 3)
    with KubeStandIn() as api:
        versions = [int(api.join(f"gpu-{i:02}")["metadata"]["resourceVersion"]) for i in range(6)]
        event = _raw_watch(api, f"resourceVersion={versions[0]}&timeoutSeconds=1")
        assert event["type"] == "ERROR"
        assert event["object"]["code"] == 410
        assert event["object"]["reason"] == "Expired"
        recent = _raw_watch(api, f"resourceVersion={versions[4]}&timeoutSeconds=1")
        assert (recent["type"], recent["object"]["metadata"]["name"]) == ("ADDED", "gpu-05")


def test_stopping_ends_open_watches() -> None:
    api = KubeStandIn().start()
    api.join("gpu-01")
    conn = connect(api)
    try:
        conn.request("GET", "/api/v1/nodes?watch=true", headers={"Authorization": f"Bearer {api.token}"})
        resp = conn.getresponse()
        assert json.loads(resp.readline())["type"] == "ADDED"
        api.stop()  # raises if an open stream holds the server up
        assert resp.read() == b""  # the stream was ended, not cut mid-event
    finally:
        conn.close()
