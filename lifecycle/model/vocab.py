"""The vocabularies racklife's values belong to, each checked by exactly one function.

A node name travels from the inventory into Slurm's config, a Kubernetes
Node, a DHCP reservation, an iPXE script, a file name and an argv list. When
every place kept its own regular expression they drifted apart (five different
ones accepted five different sets of names), so a name one layer accepted
another could misread. Each vocabulary is defined here once; the inventory's
pydantic types, the drivers and the renderers all call these functions, and a
renderer re-checks at its boundary with the same rule the inventory applied.
Kubernetes' own vocabularies (names, label and annotation keys, label values,
taints) are here too, with apimachinery's reasons as ``*_errors`` lists, so the
manifest validator and the lab's API stand-in judge a value as the inventory does.

Every checker returns the value (normalised where the vocabulary has one
spelling, e.g. a MAC in lower case) or raises ``ValueError`` with a message
that never echoes the value: a value may be a secret typed into the wrong field.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

# The acceptance levels are burn-in's (what each level runs is in burnin's profiles); named here so the
# controller reads every vocabulary from one module. The one import of burnin the model may make.
from burnin.levels import LEVELS as LEVELS
from burnin.levels import Level as Level
from burnin.levels import level as level

# RFC 1123 label: what Slurm, Kubernetes and DNS all accept, and nothing a shell would interpret.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")
_SERIAL = re.compile(r"[A-Za-z0-9._-]{1,64}")
_NIC = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_VERSION = re.compile(r"[A-Za-z0-9._+~-]{1,128}")
# As nvidia-smi prints it: 550.127.08, 570.86 (a branch and a build, optionally a patch).
_DRIVER_VERSION = re.compile(r"\d{3}\.\d{1,3}(\.\d{1,3})?")
# A Redfish AttributeRegistry's AttributeName: a letter, then letters, digits and '_'.
_BIOS_ATTRIBUTE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")
_DNS_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*")
# Kubernetes' grammar and words, as k8s.io/apimachinery/pkg/util/validation writes them, so that the
# inventory, the drivers, the manifest renderer and the lab's API stand-in judge a value alike.
QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_NAME = QUALIFIED_NAME
LABEL_VALUE = f"({QUALIFIED_NAME})?"
DNS_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_K8S_NAME = re.compile(QUALIFIED_NAME)
_K8S_VALUE = re.compile(LABEL_VALUE)
_K8S_LABEL = re.compile(DNS_LABEL)
_K8S_SUBDOMAIN = re.compile(DNS_SUBDOMAIN)
MSG_SUBDOMAIN = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                 "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                 f"validation is '{DNS_SUBDOMAIN}')")
MSG_LABEL_DNS = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                 "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                 f"validation is '{DNS_LABEL}')")
MSG_NAME_PART = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                 "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                 f"validation is '{QUALIFIED_NAME}')")
MSG_QUALIFIED = ("a qualified name " + MSG_NAME_PART.removeprefix("name part ") + " with an optional DNS "
                 "subdomain prefix and '/' (e.g. 'example.com/MyName')")
MSG_LABEL_VALUE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                   f"'12345', regex used for validation is '{LABEL_VALUE}')")

TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
TAINT_EFFECTS: tuple[TaintEffect, ...] = get_args(TaintEffect)

KeepJobsPolicy = Literal["wait", "requeue"]
"""The Slurm leave policies that end no job: ``wait`` leaves it running, ``requeue`` puts it back in the
queue. All that a role swap, an upgrade or a power action may ask for: cancelling jobs is only ever
``slurm leave --policy cancel`` (or a pool whose ``leave_policy`` says so), never a side effect."""
LeavePolicy = Literal[KeepJobsPolicy, "cancel"]
"""What a Slurm leave does with jobs still running at the drain deadline (``lifecycle.drivers.slurm.leave``)."""
KEEP_JOBS_POLICIES: tuple[KeepJobsPolicy, ...] = get_args(KeepJobsPolicy)
LEAVE_POLICIES: tuple[LeavePolicy, ...] = get_args(LeavePolicy)


def node_name(value: str) -> str:
    """A node, rack, pool, site, partition or switch name: an RFC 1123 label."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError(
            "must be an RFC 1123 label: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters"
        )
    return value


def is_node_name(value: str) -> bool:
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def mac(value: str) -> str:
    """A NIC's unicast MAC, normalised to lower case with ':'."""
    norm = value.strip().lower().replace("-", ":")
    if not _MAC.fullmatch(norm):
        raise ValueError("is not a MAC address (expected six hex octets, e.g. 3c:ec:ef:12:34:56)")
    if int(norm[:2], 16) & 1:
        raise ValueError("is a multicast or broadcast MAC, not a NIC's address")
    return norm


def ip(value: str) -> str:
    """Any IP address, in its canonical spelling."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError("is not an IP address") from None


# What a node's own address can never be, and why (checked in this order).
_NOT_A_NODE_ADDRESS: tuple[tuple[str, str], ...] = (
    ("is_unspecified", "is the unspecified address (0.0.0.0 / ::), not a node's address"),
    ("is_multicast", "is a multicast address, not a node's address"),
    ("is_loopback", "is a loopback address: it would reach the controller itself, not the node"),
    ("is_link_local", "is a link-local address: not routable, and not stable across boots"),
)


def node_ip(value: str) -> str:
    """An address a node's NIC can hold: unicast, not loopback, link-local or broadcast."""
    addr = ipaddress.ip_address(ip(value))
    for attribute, why in _NOT_A_NODE_ADDRESS:
        if getattr(addr, attribute):
            raise ValueError(why)
    if isinstance(addr, ipaddress.IPv4Address) and addr == ipaddress.IPv4Address("255.255.255.255"):
        raise ValueError("is the broadcast address, not a node's address")
    if isinstance(addr, ipaddress.IPv4Address) and addr in ipaddress.IPv4Network("240.0.0.0/4"):
        raise ValueError("is in the reserved 240.0.0.0/4 range, not a node's address")
    return str(addr)


def serial(value: str) -> str:
    if not _SERIAL.fullmatch(value):
        raise ValueError("must be 1-64 of letters, digits, '.', '_' and '-'")
    return value


def nic_name(value: str) -> str:
    if not _NIC.fullmatch(value):
        raise ValueError("must be an interface name: 1-15 of letters, digits, '_', '.' and '-'")
    return value


def version(value: str) -> str:
    if not _VERSION.fullmatch(value):
        raise ValueError("must be 1-128 of letters, digits and '._+~-'")
    return value


def driver_version(value: str) -> str:
    """An NVIDIA driver version as nvidia-smi prints it (``550.127.08``, ``570.86``)."""
    if not _DRIVER_VERSION.fullmatch(value):
        raise ValueError(f"must be an NVIDIA driver version as nvidia-smi prints it (like 570.133.20), not {value!r}")
    return value


def bios_attribute(value: str) -> str:
    """A BIOS attribute's name as the BMC's Bios resource (its AttributeRegistry) names it."""
    if not _BIOS_ATTRIBUTE.fullmatch(value):
        raise ValueError("must be a BIOS attribute name: a letter, then up to 127 letters, digits and '_'")
    return value


def hostname(value: str) -> str:
    """A DNS host name, lower-cased, without the root's trailing dot; an all-digit name must be an IPv4."""
    name = value.lower().removesuffix(".")
    if len(name) > 253 or not _DNS_NAME.fullmatch(name):
        raise ValueError("is not a host name, IP address or URL")
    if re.fullmatch(r"[0-9.]+", name):
        # '010.0.0.5' is not an IPv4 address to Python, but many resolvers read it as octal 8.0.0.5.
        raise ValueError("looks like an IPv4 address but is not one (leading zeros, or too many parts)")
    return name


def _octets(value: str) -> int:
    """Go's ``len``: apimachinery's limits count bytes, not characters."""
    return len(value.encode("utf-8", "surrogatepass"))


def _limit_and_grammar(value: str, limit: int, grammar: re.Pattern[str], message: str) -> list[str]:
    out = [f"must be no more than {limit} characters"] if _octets(value) > limit else []
    return out + ([] if grammar.fullmatch(value) else [message])


def dns1123_label_errors(value: str) -> list[str]:
    """apimachinery's ``IsDNS1123Label`` (a namespace's name): every reason, empty when valid."""
    return _limit_and_grammar(value, 63, _K8S_LABEL, MSG_LABEL_DNS)


def dns1123_subdomain_errors(value: str) -> list[str]:
    """apimachinery's ``IsDNS1123Subdomain`` (most objects' names, a key's prefix)."""
    return _limit_and_grammar(value, 253, _K8S_SUBDOMAIN, MSG_SUBDOMAIN)


def label_value_errors(value: str) -> list[str]:
    """apimachinery's ``IsValidLabelValue`` (label and taint values)."""
    return _limit_and_grammar(value, 63, _K8S_VALUE, MSG_LABEL_VALUE)


def qualified_name_errors(value: str) -> list[str]:
    """apimachinery's ``IsQualifiedName`` (label, annotation, taint keys, finalizers): ``[prefix/]name``."""
    parts = value.split("/")
    if len(parts) > 2:
        return [MSG_QUALIFIED]
    out: list[str] = []
    if len(parts) == 2:
        out += ["prefix part " + e for e in dns1123_subdomain_errors(parts[0])] if parts[0] \
            else ["prefix part must be non-empty"]
    name = parts[-1]
    if not name:
        out.append("name part must be non-empty")
    elif _octets(name) > 63:
        out.append("name part must be no more than 63 characters")
    return out + ([] if _K8S_NAME.fullmatch(name) else [MSG_NAME_PART])


def annotation_key_errors(value: str) -> list[str]:
    """``ValidateAnnotations``: a qualified name, but case does not matter (it is checked lower-cased)."""
    return qualified_name_errors(value.lower())


ANNOTATIONS_MAX_BYTES = 256 * 1024
"""``TotalAnnotationSizeLimitB``: all of an object's annotation keys and values together."""


def annotations_size(annotations: Mapping[str, object]) -> int:
    """What counts against ``ANNOTATIONS_MAX_BYTES``: the bytes of every key and value."""
    return sum(_octets(str(k)) + _octets(str(v)) for k, v in annotations.items())


def label_key(value: str) -> str:
    """A Kubernetes label or taint key: ``[prefix/]name``, prefix a DNS subdomain of at most 253."""
    if not isinstance(value, str):
        raise ValueError("must be a string")
    errors = qualified_name_errors(value)
    if any(e.startswith("prefix part") for e in errors):
        raise ValueError("has a prefix that is not a DNS subdomain (lower-case, e.g. racklife.io/)")
    if errors:
        raise ValueError(
            "is not a Kubernetes label key: [prefix/]name, the name 1-63 of letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit"
        )
    return value


def label_value(value: str) -> str:
    """A Kubernetes label value: empty, or 1-63 of ``[A-Za-z0-9_.-]`` starting and ending alphanumeric."""
    if not isinstance(value, str):
        raise ValueError("must be a string (quote numbers and booleans in YAML)")
    if label_value_errors(value):
        raise ValueError(
            "is not a Kubernetes label value: empty, or 1-63 of letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return value


@dataclass(frozen=True)
class TaintSpec:
    """A taint as pool definitions write it (kubectl's ``key[=value]:Effect``), checked."""

    key: str
    value: str
    effect: TaintEffect

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def taint(text: str) -> TaintSpec:
    """Parse kubectl's ``key[=value]:Effect``; key and value follow label syntax."""
    if not isinstance(text, str):
        raise ValueError("must be a string 'key[=value]:Effect'")
    head, colon, effect = text.rpartition(":")
    if not colon or effect not in TAINT_EFFECTS:
        raise ValueError(
            "is not a taint: key[=value]:Effect with Effect one of " + ", ".join(TAINT_EFFECTS)
        )
    key, _, value = head.partition("=")
    for part, check, given in (("key", label_key, key), ("value", label_value, value)):
        try:
            check(given)
        except ValueError as exc:
            raise ValueError(f"{exc} (the taint's {part})") from None
    return TaintSpec(key, value, effect)


def repo_path(value: str) -> str:
    """A path inside the repository that holds the inventory: relative, no '..', no odd characters."""
    if not re.fullmatch(r"[A-Za-z0-9._/-]{1,255}", value):
        raise ValueError("must be a relative path of letters, digits and '._/-'")
    parts = value.split("/")
    if value.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError("must be a relative path inside the repository (no leading '/', no '.' or '..')")
    return value


_CREDENTIALS = re.compile(r"env:[A-Za-z_][A-Za-z0-9_]*|file:/[^\s]+")
_REDFISH_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_TEXT_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")


def credentials_ref(value: str) -> bool:
    """True for ``env:VARIABLE`` or ``file:/absolute/path`` (a bool: the value must never be echoed)."""
    return isinstance(value, str) and _CREDENTIALS.fullmatch(value) is not None


def redfish_id(value: str) -> str:
    """A Redfish resource id as it appears in a URL path segment (``/Systems/<id>``)."""
    if not _REDFISH_ID.fullmatch(value):
        raise ValueError("must be a Redfish resource id: 1-64 of letters, digits, '.', '_' and '-'")
    return value


def text(value: str) -> str:
    """Free text for people (a site's location, a rack's row): one line, printable, at most 200."""
    if len(value) > 200:
        raise ValueError("is longer than 200 characters")
    if _TEXT_CONTROL.search(value):
        raise ValueError("contains a control character; free text is one line of printable characters")
    return value


def is_printable(value: str) -> bool:
    """No control characters: safe to quote in a message."""
    return _TEXT_CONTROL.search(value) is None
