"""The one redaction filter: registered secrets in every spelling, generic secret shapes, logs."""

from __future__ import annotations

import base64
import json
import logging

import pytest

from lifecycle.model import redact as r

SECRET = "Zq-redact-7Kp!x"


@pytest.fixture(autouse=True)
def registered() -> None:
    r.register(SECRET, username="admin")


@pytest.mark.parametrize("text", [
    f"login refused: {SECRET}",
    f"body {json.dumps({'UserName': 'admin', 'Password': SECRET})}",
    f"GET /x?user=admin&pw={r.quote(SECRET, safe='')}",
    "Authorization: Basic " + base64.b64encode(f"admin:{SECRET}".encode()).decode(),
])
def test_registered_secret_is_masked_in_every_spelling(text: str) -> None:
    out = r.redact(text)
    assert SECRET not in out and r.quote(SECRET, safe="") not in out
    assert base64.b64encode(f"admin:{SECRET}".encode()).decode() not in out
    assert r.MASK in out


@pytest.mark.parametrize(("text", "gone"), [
    ("connect failed: password=hunter2x&next=1", "hunter2x"),
    ('{"Password": "unregist3red", "UserName": "root"}', "unregist3red"),
    ("{'X-Auth-Token': 'abcdef123456', 'Accept': '*/*'}", "abcdef123456"),
    ("headers Authorization: Bearer eyJhbGciOi.payload.sig", "eyJhbGciOi.payload.sig"),
    ("postgresql://racklife:dbpassw0rd@db1:5432/racklife", "dbpassw0rd"),
    ("SLURM_JWT token: eyJ0eXAi", "eyJ0eXAi"),
])
def test_generic_secret_shapes_are_masked(text: str, gone: str) -> None:
    out = r.redact(text)
    assert gone not in out and r.MASK in out


def test_ordinary_text_and_credential_references_are_left_alone() -> None:
    text = 'node r01-n01: inspect_fail (credentials: env:BMC_R01) {"credentials": "file:/etc/bmc"} token expired'
    assert r.redact(text) == text


def test_redacted_json_is_still_json() -> None:
    doc = {"reason": f"BMC said {SECRET}", "body": '{"Password": "x1y2z3w4"}', "url": "https://a:b@c/d"}
    out = json.loads(r.redact(json.dumps(doc, indent=2)))
    assert SECRET not in json.dumps(out) and "x1y2z3w4" not in json.dumps(out)
    assert r.redact_data(doc)["url"] == "https://a:***@c/d"


def test_names_a_secret() -> None:
    assert r.names_a_secret("bmc-password") and r.names_a_secret("api_token") and r.names_a_secret("secret")
    assert not r.names_a_secret("row") and not r.names_a_secret("passive") and not r.names_a_secret("tokenizer")


def test_every_log_record_is_masked_args_and_traceback(caplog: pytest.LogCaptureFixture) -> None:
    r.install_logging_filter()
    r.install_logging_filter()  # idempotent
    log = logging.getLogger("some.library.deep.down")
    with caplog.at_level(logging.DEBUG):
        log.debug("sending %s", {"Password": SECRET})
        try:
            raise RuntimeError(f"BMC echoed {SECRET}")
        except RuntimeError:
            log.exception("request failed")
    text = "\n".join(rec.getMessage() + (rec.exc_text or "") for rec in caplog.records)
    assert SECRET not in text and caplog.text and SECRET not in caplog.text
    assert "request failed" in text and "BMC echoed ***" in text
