"""The inventory: the one source of truth for hardware facts.

An inventory is a YAML file that a platform team keeps in git. It is parsed
here, validated in full (every problem at once, each with file, line and
field), and turned into frozen pydantic models that the rest of racklife
reads. Nothing in this module touches the network or the store: a bad file
is refused before anything is written anywhere.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from lifecycle.model.skus import SKUS

# RFC 1123 label: what Slurm, Kubernetes and DNS all accept, and nothing a
# shell would interpret.
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
_CRED_RE = re.compile(r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:/[^\s]+)$")
_HOST_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?$")

BUILTIN_POOLS = ("burn-in", "quarantine", "spare")
_SECRET_KEYS = frozenset({"password", "passwd", "secret", "username", "user", "token"})


def _rfc1123(value: str) -> str:
    if not _NAME_RE.match(value):
        raise ValueError(
            "must be an RFC 1123 label: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters"
        )
    return value


def _mac(value: str) -> str:
    norm = value.strip().lower().replace("-", ":")
    if not _MAC_RE.match(norm):
        raise ValueError("is not a MAC address (expected six hex octets, e.g. 3c:ec:ef:12:34:56)")
    if int(norm[:2], 16) & 1:
        raise ValueError("is a multicast or broadcast MAC, not a NIC's address")
    return norm


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError("is not an IP address") from None


def _credentials(value: str) -> str:
    if not _CRED_RE.match(value):
        # Never echo the value: it may be a password typed in by mistake.
        raise ValueError(
            "must be a credentials reference ('env:VARIABLE' or 'file:/absolute/path'); "
            "a literal secret is not allowed in the inventory"
        )
    return value


Name = Annotated[str, AfterValidator(_rfc1123)]
Mac = Annotated[str, AfterValidator(_mac)]
Ip = Annotated[str, AfterValidator(_ip)]
CredentialsRef = Annotated[str, AfterValidator(_credentials)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Site(_Model):
    name: Name
    location: str | None = None


class Rack(_Model):
    name: Name
    units: int = Field(42, ge=1, le=60)
    row: str | None = None


class BmcSpec(_Model):
    driver: Literal["redfish", "ipmi"]
    address: str
    credentials: CredentialsRef
    verify_tls: bool = True
    system: str | None = None
    """Redfish system id on a BMC that manages several; default: the only one."""

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        host = value
        if "://" in value:
            scheme, _, rest = value.partition("://")
            if scheme not in ("http", "https"):
                raise ValueError("scheme must be https:// (or http://)")
            host = rest.split("/", 1)[0]
        if host.startswith("["):
            inner, _, port = host[1:].partition("]")
            _ip(inner)
            port = port.lstrip(":")
        else:
            host, _, port = host.partition(":")
            try:
                ipaddress.ip_address(host)
            except ValueError:
                if not _HOST_RE.match(host):
                    raise ValueError("is not a host name, IP address or URL") from None
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError("has an invalid port")
        return value

    @property
    def host(self) -> str:
        rest = self.address.split("://", 1)[-1].split("/", 1)[0]
        if rest.startswith("["):
            return rest[1:].split("]", 1)[0]
        return rest.rsplit(":", 1)[0] if rest.count(":") == 1 else rest


class Nic(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,15}$")
    mac: Mac
    role: Literal["boot", "mgmt", "data", "ib", "storage"] = "data"
    ip: Ip | None = None
    speed_gbps: int | None = Field(None, ge=1)


class Topology(_Model):
    leaf: Name | None = None
    spine: Name | None = None
    nvlink_block: Name | None = None


class Node(_Model):
    name: Name
    serial: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    rack: str
    u: int = Field(ge=1, le=60)
    sku: str
    pool: str
    image: str | None = None
    bmc: BmcSpec
    nics: list[Nic] = Field(min_length=1)
    boot_ip: Ip | None = None
    mgmt_ip: Ip | None = None
    topology: Topology = Topology()
    labels: dict[str, str] = {}

    @field_validator("sku")
    @classmethod
    def _sku(cls, value: str) -> str:
        if value not in SKUS:
            raise ValueError(f"unknown SKU '{value}' (known: {', '.join(sorted(SKUS))})")
        return value

    def boot_mac(self) -> str:
        for nic in self.nics:
            if nic.role == "boot":
                return nic.mac
        return self.nics[0].mac

    def ips(self) -> list[str]:
        found = [n.ip for n in self.nics if n.ip]
        found += [ip for ip in (self.boot_ip, self.mgmt_ip) if ip]
        return list(dict.fromkeys(found))


class Pool(_Model):
    scheduler: Literal["slurm", "kubernetes", "none"]
    partition: Name | None = None
    labels: dict[str, str] = {}
    taints: list[str] = []
    acceptance_validity_days: int = Field(30, ge=1, le=3650)
    leave_policy: Literal["wait", "requeue", "cancel"] = "wait"
    drain_deadline_s: int = Field(3600, ge=0)
    lendable: bool = False
    """Nodes of this pool may be lent to the other scheduler (Slurm power saving)."""

    @model_validator(mode="after")
    def _scheduler_fields(self) -> Pool:
        if self.scheduler == "slurm" and not self.partition:
            raise ValueError("a slurm pool needs 'partition'")
        if self.scheduler != "slurm" and self.partition:
            raise ValueError("'partition' is only for scheduler: slurm")
        return self


class Image(_Model):
    name: Name
    version: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._+~-]+$")
    definition: str | None = None
    """Path of the image definition under images/ (built by `racklife image build`)."""


class Inventory(_Model):
    site: Site
    racks: list[Rack] = Field(min_length=1)
    pools: dict[str, Pool]
    images: list[Image] = []
    nodes: list[Node] = []

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def pool_names(self) -> list[str]:
        return sorted(set(self.pools) | set(BUILTIN_POOLS))

    def pool(self, name: str) -> Pool:
        if name in self.pools:
            return self.pools[name]
        if name in BUILTIN_POOLS:
            return Pool(scheduler="none")
        raise KeyError(name)


# ---------------------------------------------------------------- errors


@dataclass(frozen=True, order=True)
class Problem:
    line: int
    field: str
    message: str
    file: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.field}: {self.message}"


class InventoryError(Exception):
    """The inventory is invalid; ``problems`` lists every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


Path_ = tuple[str | int, ...]


class _MarkedLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every key and item, and refuses duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.lines: dict[Path_, int] = {}
        self.duplicates: list[tuple[Path_, int]] = []


def _walk(loader: _MarkedLoader, node: yaml.Node, path: Path_) -> Any:
    loader.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            key_s = key if isinstance(key, str) else str(key)
            child = (*path, key_s)
            if key_s in out:
                loader.duplicates.append((child, key_node.start_mark.line + 1))
            loader.lines[child] = key_node.start_mark.line + 1
            out[key_s] = _walk(loader, value_node, child)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(loader, item, (*path, i)) for i, item in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def _parse_yaml(text: str, file: str) -> tuple[Any, dict[Path_, int], list[Problem]]:
    loader = _MarkedLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise InventoryError([Problem(1, "<document>", "the file is empty", file)])
        data = _walk(loader, root, ())
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else 1
        raise InventoryError(
            [Problem(line, "<yaml>", f"not valid YAML: {exc.problem}", file)]
        ) from None
    finally:
        loader.dispose()
    problems = [
        Problem(line, _fmt(p, data), "duplicate key (YAML would silently keep the last)", file)
        for p, line in loader.duplicates
    ]
    return data, loader.lines, problems


def _fmt(path: Iterable[str | int], data: Any = None) -> str:
    out = ""
    cur = data
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
            item = cur[part] if isinstance(cur, list) and part < len(cur) else None
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                out += f"({item['name']})"
            cur = item
        else:
            out += f".{part}" if out else part
            cur = cur.get(part) if isinstance(cur, dict) else None
    return out or "<document>"


def _line_of(lines: dict[Path_, int], path: Path_) -> int:
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return lines[path[:cut]]
    return 1


def _cross_checks(data: Any) -> list[tuple[Path_, str]]:
    """Checks across records, on the raw data so they run even when some records are broken."""
    found: list[tuple[Path_, str]] = []
    if not isinstance(data, dict):
        return found
    nodes = data.get("nodes") or []
    racks = data.get("racks") or []
    pools = data.get("pools") or {}
    images = data.get("images") or []
    if not isinstance(nodes, list):
        return found

    rack_names = {r.get("name") for r in racks if isinstance(r, dict)} if isinstance(racks, list) else set()
    pool_names = (set(pools) if isinstance(pools, dict) else set()) | set(BUILTIN_POOLS)
    image_names = {i.get("name") for i in images if isinstance(i, dict)} if isinstance(images, list) else set()

    if isinstance(racks, list):
        seen_racks: dict[str, int] = {}
        for i, r in enumerate(racks):
            if isinstance(r, dict) and isinstance(r.get("name"), str):
                if r["name"] in seen_racks:
                    first = seen_racks[r["name"]]
                    found.append((("racks", i, "name"), f"duplicate rack name '{r['name']}' (first at racks[{first}])"))
                seen_racks.setdefault(r["name"], i)

    firsts: dict[tuple[str, str], str] = {}

    def unique(kind: str, value: Any, path: Path_, where: str) -> None:
        if not isinstance(value, str) or not value:
            return
        norm = value.lower()
        if kind in ("MAC",):
            norm = norm.replace("-", ":")
        if kind == "IP":
            try:
                norm = str(ipaddress.ip_address(value))
            except ValueError:
                return
        key = (kind, norm)
        if key in firsts:
            found.append((path, f"duplicate {kind} '{value}' (also used by {firsts[key]})"))
        else:
            firsts[key] = where

    positions: dict[tuple[str, int], str] = {}
    for i, n in enumerate(nodes):
        if not isinstance(n, dict):
            continue
        who = f"nodes[{i}]" + (f"({n['name']})" if isinstance(n.get("name"), str) else "")
        unique("node name", n.get("name"), ("nodes", i, "name"), who)
        unique("serial", n.get("serial"), ("nodes", i, "serial"), who)
        unique("IP", n.get("boot_ip"), ("nodes", i, "boot_ip"), who + ".boot_ip")
        unique("IP", n.get("mgmt_ip"), ("nodes", i, "mgmt_ip"), who + ".mgmt_ip")
        bmc = n.get("bmc")
        if isinstance(bmc, dict) and isinstance(bmc.get("address"), str):
            unique("BMC address", bmc["address"], ("nodes", i, "bmc", "address"), who + ".bmc")
        nics = n.get("nics")
        if isinstance(nics, list):
            for j, nic in enumerate(nics):
                if isinstance(nic, dict):
                    unique("MAC", nic.get("mac"), ("nodes", i, "nics", j, "mac"), f"{who}.nics[{j}]")
                    if nic.get("ip") not in (None, n.get("boot_ip"), n.get("mgmt_ip")):
                        unique("IP", nic.get("ip"), ("nodes", i, "nics", j, "ip"), f"{who}.nics[{j}]")
        rack = n.get("rack")
        if isinstance(rack, str) and rack not in rack_names:
            known = ", ".join(sorted(str(r) for r in rack_names))
            found.append((("nodes", i, "rack"), f"unknown rack '{rack}' (racks: {known})"))
        pool = n.get("pool")
        if isinstance(pool, str) and pool not in pool_names:
            found.append((("nodes", i, "pool"), f"unknown pool '{pool}' (pools: {', '.join(sorted(pool_names))})"))
        image = n.get("image")
        if isinstance(image, str) and image not in image_names:
            known = ", ".join(sorted(str(x) for x in image_names)) or "none defined"
            found.append((("nodes", i, "image"), f"unknown image '{image}' (images: {known})"))
        u = n.get("u")
        if isinstance(rack, str) and isinstance(u, int):
            if (rack, u) in positions:
                found.append((("nodes", i, "u"), f"rack {rack} U{u} is already taken by {positions[(rack, u)]}"))
            positions.setdefault((rack, u), who)
    return found


def parse_inventory(text: str, file: str = "<inventory>") -> Inventory:
    """Parse and validate inventory YAML; raise InventoryError listing every problem."""
    data, lines, problems = _parse_yaml(text, file)
    for path, msg in _cross_checks(data):
        problems.append(Problem(_line_of(lines, path), _fmt(path, data), msg, file))
    inv: Inventory | None = None
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors(include_input=False, include_url=False):
            loc: Path_ = tuple(p for p in err["loc"] if isinstance(p, (str, int)))
            # pydantic appends the validator name for Annotated/tagged types; drop non-fields.
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field"
                if loc and loc[-1] in _SECRET_KEYS:
                    msg = (f"'{loc[-1]}' is not allowed: give 'credentials: env:VARIABLE' or "
                           "'credentials: file:/path'; literal credentials never go in the inventory")
            problems.append(Problem(_line_of(lines, loc), _fmt(loc, data), msg, file))
    if problems or inv is None:
        raise InventoryError(problems)
    return inv


def load_inventory(path: str | Path) -> Inventory:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InventoryError([Problem(0, "<file>", f"cannot read: {exc.strerror}", str(p))]) from None
    except UnicodeDecodeError:
        raise InventoryError([Problem(0, "<file>", "not UTF-8 text", str(p))]) from None
    return parse_inventory(text, str(p))


def dump_inventory(inv: Inventory) -> str:
    """YAML text of an inventory (used by `racklife lab inventory`)."""
    return yaml.safe_dump(inv.model_dump(mode="json", exclude_defaults=True), sort_keys=False)
