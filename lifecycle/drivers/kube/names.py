"""Kubernetes' own grammar for names, label keys and values, and taints, with apimachinery's words.

Why it exists: a label or taint racklife writes must be one kube-apiserver
accepts, and the check belongs at the boundary where racklife renders the
value (``KubeDriver.set_pool_from``), not first in a 422 from a cluster.
The lab's stand-in refuses the same values with the same messages (it
imports these), so the two cannot disagree.
"""

from __future__ import annotations

import re

# The grammar is the model's (one validator per vocabulary); the messages here are apimachinery's words.
from lifecycle.model.vocab import DNS_LABEL as DNS_LABEL
from lifecycle.model.vocab import DNS_SUBDOMAIN as DNS_SUBDOMAIN
from lifecycle.model.vocab import LABEL_NAME as LABEL_NAME
from lifecycle.model.vocab import LABEL_VALUE as LABEL_VALUE

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

MSG_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 f"validation is '{DNS_SUBDOMAIN}')")
MSG_LABEL_DNS = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                 "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                 f"validation is '{DNS_LABEL}')")
MSG_NAME_PART = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                 "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                 f"validation is '{LABEL_NAME}')")
MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                   f"'12345', regex used for validation is '{LABEL_VALUE}')")


def full(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text) is not None


def qualified_name_errors(key: str) -> list[str]:
    """apimachinery's ``IsQualifiedName``: an optional DNS-subdomain prefix, a slash, a ≤63-character name."""
    prefix, _, name = key.rpartition("/") if "/" in key else ("", "", key)
    out: list[str] = []
    if key.count("/") > 1:
        return ["a qualified name " + MSG_NAME_PART.removeprefix("name part ") + " with an optional DNS subdomain "
                "prefix and '/' (e.g. 'example.com/MyName')"]
    if "/" in key:
        if not prefix:
            out.append("prefix part must be non-empty")
        elif len(prefix) > 253 or not full(DNS_SUBDOMAIN, prefix):
            out.append("prefix part " + MSG_SUBDOMAIN)
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append("name part must be no more than 63 characters")
    elif not full(LABEL_NAME, name):
        out.append(MSG_NAME_PART)
    return out


def label_value_errors(value: str) -> list[str]:
    out = ["must be no more than 63 characters"] if len(value) > 63 else []
    return out + ([] if full(LABEL_VALUE, value) else [MSG_LABEL_VALUE])


def label_errors(key: str, value: str) -> list[str]:
    """Why ``key=value`` is not a label kube-apiserver accepts (empty when it is)."""
    return [f"key: {e}" for e in qualified_name_errors(key)] + [f"value: {e}" for e in label_value_errors(value)]


def taint_errors(key: str, value: str) -> list[str]:
    """Why a taint's key and value would be refused (its effect is checked when it is parsed)."""
    return [f"key: {e}" for e in qualified_name_errors(key)] + \
        ([f"value: {e}" for e in label_value_errors(value)] if value else [])
