"""Errors at the Kubernetes edge become racklife's small hierarchy: can a retry help?"""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from lifecycle.drivers.errors import (
    AuthFailed,
    Busy,
    NotSupported,
    OperationFailed,
    PermanentError,
    TemporaryError,
    Unreachable,
)
from lifecycle.drivers.kube.api import KubeApiDriver, translate
from lifecycle.drivers.kube.base import Conflict
from lifecycle.lab.kube import KubeStandIn


def test_a_stopped_api_is_unreachable_and_retryable(tmp_path: Path) -> None:
    api = KubeStandIn().start()
    config = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.join("gpu-01")
    api.stop()
    driver = KubeApiDriver.from_kubeconfig(config, timeout_s=2)
    try:
        with pytest.raises(Unreachable) as e:
            driver.node("gpu-01")
    finally:
        driver.close()
    assert e.value.retryable
    assert e.value.exit_code == 3


def test_a_wrong_token_is_an_auth_failure_and_is_not_echoed(stand_in: KubeStandIn, tmp_path: Path) -> None:
    stand_in.join("gpu-01")
    real = stand_in.token
    stand_in.token = "not-the-lab-token-0123456789"
    config = stand_in.write_kubeconfig(tmp_path / "kubeconfig")
    stand_in.token = real
    driver = KubeApiDriver.from_kubeconfig(config)
    try:
        with pytest.raises(AuthFailed) as e:
            driver.node("gpu-01")
    finally:
        driver.close()
    assert not e.value.retryable
    assert "not-the-lab-token" not in str(e.value)


def test_a_missing_node_is_a_plain_failure(api_driver: KubeApiDriver) -> None:
    with pytest.raises(OperationFailed, match="no such node") as e:
        api_driver.node("gpu-99")
    assert not e.value.retryable


def test_a_kubeconfig_without_the_context_is_refused(kubeconfig: Path) -> None:
    with pytest.raises(AuthFailed, match=r"unusable kubeconfig: Context .production. not found"):
        KubeApiDriver.from_kubeconfig(kubeconfig, context="production")


@pytest.mark.parametrize(("code", "method", "kind", "retryable"), [
    (401, "GET", AuthFailed, False),
    (403, "GET", AuthFailed, False),
    (404, "GET", OperationFailed, False),
    (405, "GET", NotSupported, False),
    (409, "PATCH", Conflict, True),
    (415, "PATCH", NotSupported, False),
    (422, "PATCH", OperationFailed, False),
    (429, "POST", Busy, True),
    (500, "GET", Busy, True),
    (500, "POST", OperationFailed, False),  # not idempotent: a retry might apply it twice
    (500, "PATCH", OperationFailed, False),
    (503, "POST", Busy, True),
    (599, "GET", Busy, True),
    (599, "POST", OperationFailed, False),
])
def test_status_table(code: int, method: str, kind: type[Exception], retryable: bool) -> None:
    request = httpx2.Request(method, "http://127.0.0.1:1/api/v1/nodes")
    error = httpx2.HTTPStatusError("x", request=request, response=httpx2.Response(code, request=request))
    translated = translate("api", error)
    assert type(translated) is kind
    assert translated.retryable is retryable
    assert isinstance(translated, TemporaryError if retryable else PermanentError)
    assert f"HTTP {code}" in translated.message


def test_429_carries_the_api_servers_retry_after() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1:1/api/v1/namespaces/a/pods/b/eviction")
    response = httpx2.Response(429, request=request, headers={"Retry-After": "7"})
    translated = translate("api", httpx2.HTTPStatusError("x", request=request, response=response))
    assert isinstance(translated, Busy) and translated.delay_s == 7.0


def test_connection_errors_are_unreachable() -> None:
    request = httpx2.Request("GET", "http://127.0.0.1:1/api/v1/nodes")
    assert isinstance(translate("api", httpx2.ConnectError("refused", request=request)), Unreachable)
    assert isinstance(translate("api", httpx2.ReadTimeout("slow", request=request)), Unreachable)


def test_the_fake_refuses_like_the_real_one() -> None:
    from lifecycle.drivers.kube.fake import FakeKubeDriver

    fake = FakeKubeDriver()
    fake.add_node("gpu-01")
    fake.fault = "unreachable"
    with pytest.raises(Unreachable):
        fake.node("gpu-01")
    fake.fault = "auth"
    with pytest.raises(AuthFailed):
        fake.cordon("gpu-01", "run-1")
    assert fake.calls["node"] == 2
