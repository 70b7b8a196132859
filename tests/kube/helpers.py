"""Raw HTTPS access to the stand-in for tests that check the API's answers themselves."""

from __future__ import annotations

import http.client
import json
import ssl
from typing import Any

from lifecycle.lab.kube import KubeStandIn


def connect(api: KubeStandIn, timeout: float = 10) -> http.client.HTTPSConnection:
    """An HTTPS connection to the stand-in that verifies it with the lab's CA (as every client does)."""
    host, port = api.url.removeprefix("https://").split(":")
    return http.client.HTTPSConnection(host, int(port), timeout=timeout,
                                       context=ssl.create_default_context(cadata=api.ca_pem.decode()))


def call(api: KubeStandIn, method: str, path: str, body: Any = None, content_type: str = "application/json",
         token: str | None = "ours") -> tuple[int, Any, str]:
    """One raw API request: (status, decoded body, Content-Type)."""
    conn = connect(api)
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {api.token if token == 'ours' else token}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null"), resp.getheader("Content-Type") or ""
    finally:
        conn.close()
