"""The inventory: the one source of truth for hardware facts.

An inventory is a YAML file that a platform team keeps in git. It is parsed
here, validated in full (every problem at once, each with file, line and
field), and turned into frozen pydantic models that the rest of racklife
reads. Nothing in this module touches the network or the store: a bad file
is refused before anything is written anywhere.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from lifecycle.model import bmc_address, vocab
from lifecycle.model.inventory_checks import cross_checks
from lifecycle.model.redact import names_a_secret
from lifecycle.model.skus import SKUS
from lifecycle.model.strict_yaml import MAX_BYTES, InventoryError, Path_, Problem, fmt, line_of, parse_yaml

__all__ = ["BUILTIN_POOLS", "MAX_BYTES", "BmcSpec", "FirmwareBaseline", "Image", "Inventory", "InventoryError", "Nic",
           "Node", "Pool", "Problem", "Rack", "Site", "Topology", "dump_inventory", "load_inventory", "parse_inventory"]

BUILTIN_POOLS = ("burn-in", "quarantine", "spare")
_SECRET_KEYS = frozenset({"password", "passwd", "secret", "username", "user", "token"})


def _credentials(value: str) -> str:
    if not vocab.credentials_ref(value):
        # Never echo the value: it may be a password typed in by mistake.
        raise ValueError(
            "must be a credentials reference ('env:VARIABLE' or 'file:/absolute/path'); "
            "a literal secret is not allowed in the inventory"
        )
    return value


def _definition(value: str) -> str:
    vocab.repo_path(value)
    if not value.startswith("images/") or not value.endswith((".yaml", ".yml")):
        raise ValueError("must be an image definition under images/ (images/NAME.yaml)")
    return value


def _firmware_file(value: str) -> str:
    if not value.startswith("/") or "/../" in f"{value}/" or "/./" in f"{value}/" or len(value) > 1024:
        raise ValueError("must be an absolute path to the firmware image on the controller (no '.' or '..')")
    return vocab.text(value)


Name = Annotated[str, AfterValidator(vocab.node_name)]
Mac = Annotated[str, AfterValidator(vocab.mac)]
NodeIp = Annotated[str, AfterValidator(vocab.node_ip)]
CredentialsRef = Annotated[str, AfterValidator(_credentials)]
def _not_a_secret(key: str) -> str:
    # Labels are published (Kubernetes Node labels, reports, `node show`): a label named like
    # a secret holds one by mistake. The value is never echoed.
    if names_a_secret(key.rpartition("/")[2]):
        raise ValueError("is named like a secret (password, token, ...): credentials never go in the "
                         "inventory; the BMC's 'credentials: env:VARIABLE' or 'file:/path' names them")
    return key


LabelKey = Annotated[str, AfterValidator(vocab.label_key), AfterValidator(_not_a_secret)]
LabelValue = Annotated[str, AfterValidator(vocab.label_value)]
TaintText = Annotated[str, AfterValidator(lambda t: str(vocab.taint(t)))]
Text = Annotated[str, AfterValidator(vocab.text)]
DriverVersion = Annotated[str, AfterValidator(vocab.driver_version)]
BiosAttribute = Annotated[str, AfterValidator(vocab.bios_attribute)]
BiosValue = StrictBool | StrictInt | Annotated[str, AfterValidator(vocab.text)]
"""As the Bios resource types it: a boolean, an integer, or a string (an enumeration's member)."""
BiosSettings = Annotated[dict[BiosAttribute, BiosValue], Field(max_length=128)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Site(_Model):
    name: Name
    location: Text | None = None


class Rack(_Model):
    name: Name
    units: StrictInt = Field(42, ge=1, le=60)
    row: Text | None = None


class BmcSpec(_Model):
    driver: Literal["redfish", "ipmi"]
    address: str
    credentials: CredentialsRef
    verify_tls: StrictBool = True
    system: Annotated[str, AfterValidator(vocab.redfish_id)] | None = None
    """Redfish system id on a BMC that manages several; default: the only one."""

    @field_validator("address")
    @classmethod
    def _address(cls, value: str, info: ValidationInfo) -> str:
        driver = info.data.get("driver")
        bmc_address.parse(value, driver if isinstance(driver, str) else "redfish")
        return value

    @property
    def endpoint(self) -> bmc_address.BmcEndpoint:
        """The address in canonical form (scheme, host, port with the scheme's default, path)."""
        return bmc_address.parse(self.address, self.driver)

    @property
    def host(self) -> str:
        return self.endpoint.host


class Nic(_Model):
    name: Annotated[str, AfterValidator(vocab.nic_name)]
    mac: Mac
    role: Literal["boot", "mgmt", "data", "ib", "storage"] = "data"
    ip: NodeIp | None = None
    speed_gbps: StrictInt | None = Field(None, ge=1, le=10_000)


class Topology(_Model):
    leaf: Name | None = None
    spine: Name | None = None
    nvlink_block: Name | None = None


class FirmwareBaseline(_Model):
    """One component a node's BMC must report at ``version``, and the image that installs it."""

    component: Annotated[str, AfterValidator(vocab.text)] = Field(min_length=1, max_length=64)
    """As the BMC's FirmwareInventory names it (``racklife bmc firmware list NODE``), or its id's last part."""
    version: Annotated[str, AfterValidator(vocab.version)]
    file: Annotated[str, AfterValidator(_firmware_file)]
    """The image on the controller that installs ``version`` (served to the BMC, or pushed to it)."""


class Node(_Model):
    name: Name
    serial: Annotated[str, AfterValidator(vocab.serial)]
    rack: str
    u: StrictInt = Field(ge=1, le=60)
    sku: str
    pool: str
    image: str | None = None
    bmc: BmcSpec
    nics: list[Nic] = Field(min_length=1, max_length=64)
    boot_ip: NodeIp | None = None
    mgmt_ip: NodeIp | None = None
    topology: Topology = Topology()
    labels: dict[LabelKey, LabelValue] = Field({}, max_length=64)
    firmware: list[FirmwareBaseline] = Field([], max_length=32)
    """The firmware baseline: ``racklife plan`` proposes an update for each component that differs."""
    driver: DriverVersion | None = None
    """The NVIDIA driver the node runs (its pool's when not given): ``racklife plan`` proposes update-driver."""
    bios: BiosSettings = {}
    """BIOS attributes the node's BMC must read, over its pool's: ``racklife plan`` proposes set-bios."""

    @field_validator("sku")
    @classmethod
    def _sku(cls, value: str) -> str:
        if value not in SKUS:
            raise ValueError(f"unknown SKU '{value}' (known: {', '.join(sorted(SKUS))})")
        return value

    @field_validator("firmware")
    @classmethod
    def _one_per_component(cls, value: list[FirmwareBaseline]) -> list[FirmwareBaseline]:
        seen = [f.component.lower() for f in value]
        twice = sorted({c for c in seen if seen.count(c) > 1})
        if twice:
            raise ValueError(f"component(s) listed twice in the baseline: {', '.join(twice)}")
        return value

    def boot_mac(self) -> str:
        for nic in self.nics:
            if nic.role == "boot":
                return nic.mac
        return self.nics[0].mac

    def boot_nic(self) -> Nic:
        return next((nic for nic in self.nics if nic.role == "boot"), self.nics[0])

    def ips(self) -> list[str]:
        found = [n.ip for n in self.nics if n.ip]
        found += [ip for ip in (self.boot_ip, self.mgmt_ip) if ip]
        return list(dict.fromkeys(found))


class Pool(_Model):
    scheduler: Literal["slurm", "kubernetes", "none"]
    partition: Name | None = None
    labels: dict[LabelKey, LabelValue] = Field({}, max_length=64)
    taints: list[TaintText] = Field([], max_length=64)
    acceptance_validity_days: StrictInt = Field(30, ge=1, le=3650)
    leave_policy: vocab.LeavePolicy = "wait"
    drain_deadline_s: StrictInt = Field(3600, ge=0, le=7 * 24 * 3600)
    join_deadline_s: StrictInt = Field(300, ge=1, le=24 * 3600)
    """How long a join waits for the scheduler to have the node serving (Slurm: up, responding, not drained)."""
    lendable: StrictBool = False
    """Nodes of this pool may be lent to the other scheduler (Slurm power saving)."""
    min_nodes: StrictInt = Field(0, ge=0, le=1_000_000)
    """The fewest nodes the pool keeps in service: a role swap that would leave fewer is refused."""
    retest_level: vocab.Level = "quick"
    """The acceptance level a node is re-tested at before it joins this pool in a role swap."""
    image: Name | None = None
    """The image a node of this pool runs (one of ``images``): ``role-swap --reimage`` reprovisions with it."""
    max_repair_percent: StrictInt = Field(10, ge=1, le=100)
    """Automatic repairs under way in this pool at once, as a share of its nodes (at least one node)."""
    driver: DriverVersion | None = None
    """The NVIDIA driver every node of the pool runs (a node's own ``driver`` wins)."""
    bios: BiosSettings = {}
    """BIOS attributes every node of the pool has (a node's own ``bios`` adds to them and wins)."""

    @model_validator(mode="after")
    def _scheduler_fields(self) -> Pool:
        if self.scheduler == "slurm" and not self.partition:
            raise ValueError("a slurm pool needs 'partition'")
        if self.scheduler != "slurm" and self.partition:
            raise ValueError("'partition' is only for scheduler: slurm")
        if self.scheduler == "none" and self.min_nodes:
            raise ValueError("'min_nodes' is only for a pool a scheduler serves (slurm or kubernetes)")
        return self


class Image(_Model):
    name: Name
    version: Annotated[str, AfterValidator(vocab.version)]
    definition: Annotated[str, AfterValidator(_definition)] | None = None
    """Path of the image definition under images/ (built by `racklife image build`)."""


class Inventory(_Model):
    site: Site
    racks: list[Rack] = Field(min_length=1)
    pools: dict[Name, Pool]
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


def _pydantic_problems(exc: ValidationError, lines: dict[Path_, int], data: Any, file: str) -> list[Problem]:
    problems = []
    for err in exc.errors(include_input=False, include_url=False):
        loc: Path_ = tuple(p for p in err["loc"] if isinstance(p, (str, int)))
        msg = str(err["msg"]).removeprefix("Value error, ")
        if loc and loc[-1] == "[key]":  # a mapping's key (a pool's name, a label's key) is wrong
            loc = loc[:-1]
            msg = f"the name '{loc[-1]}' {msg}" if loc and vocab.is_printable(str(loc[-1])) else f"the name {msg}"
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
            if loc and loc[-1] in _SECRET_KEYS:
                msg = (f"'{loc[-1]}' is not allowed: give 'credentials: env:VARIABLE' or "
                       "'credentials: file:/path'; literal credentials never go in the inventory")
        problems.append(Problem(line_of(lines, loc), fmt(loc, data), msg, file))
    return problems


def parse_inventory(text: str, file: str = "<inventory>") -> Inventory:
    """Parse and validate inventory YAML; raise InventoryError listing every problem."""
    data, lines, problems = parse_yaml(text, file)
    for path, msg in cross_checks(data, BUILTIN_POOLS):
        problems.append(Problem(line_of(lines, path), fmt(path, data), msg, file))
    inv: Inventory | None = None
    try:
        inv = Inventory.model_validate(data)
    except ValidationError as exc:
        problems += _pydantic_problems(exc, lines, data, file)
    if problems or inv is None:
        raise InventoryError(problems)
    return inv


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory file: a regular file of at most MAX_BYTES of UTF-8."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise InventoryError([Problem(0, "<file>", "is not a regular file", str(p))])
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise InventoryError([Problem(0, "<file>", f"cannot read: {exc.strerror}", str(p))]) from None
    if len(raw) > MAX_BYTES:
        size = p.stat().st_size
        raise InventoryError([Problem(0, "<file>", f"is {size:,} bytes; the limit is {MAX_BYTES:,}", str(p))])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InventoryError([Problem(line, "<file>", f"not UTF-8 text (byte {exc.start + 1})", str(p))]) from None
    return parse_inventory(text, str(p))


class _NoAliasDumper(yaml.SafeDumper):
    """Writes a value shared by two records twice: the inventory parser refuses aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_inventory(inv: Inventory) -> str:
    """YAML text of an inventory (used by `racklife lab inventory`), which parse_inventory reads back."""
    return yaml.dump(inv.model_dump(mode="json", exclude_defaults=True), Dumper=_NoAliasDumper, sort_keys=False)
