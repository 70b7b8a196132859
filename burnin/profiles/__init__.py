"""SKU profiles: what "healthy" means for one kind of node, as data with cited sources.

Each ``<sku>.toml`` beside this module holds the thresholds for one SKU; every number
carries a comment saying where it comes from (a datasheet, a public health-check suite,
a maintainer's statement, or a saved measurement). This module only loads and
validates them into typed objects; judging lives in :mod:`burnin.judge`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from burnin.levels import LEVELS as LEVELS
from burnin.levels import Level, level


class ProfileError(ValueError):
    """An unknown profile name or a profile file that does not validate."""


@dataclass(frozen=True)
class GpuLimits:
    count: int
    models: tuple[str, ...]
    pcie_gen: int
    pcie_width: int
    ecc_enabled: bool
    uncorrectable_ecc_volatile_max: int
    row_remap_pending_allowed: bool
    row_remap_failure_allowed: bool
    retired_pages_pending_allowed: bool
    forbidden_throttle_reasons: tuple[str, ...]
    max_temperature_c: float
    power_limit_min_w: float
    nvlink_active_links: int
    driver_min: str


@dataclass(frozen=True)
class DcgmLimits:
    levels: dict[str, int]
    required_tests: tuple[str, ...]
    allow_warn: bool
    timeout_s: dict[str, int]


@dataclass(frozen=True)
class NcclLimits:
    collectives: dict[str, tuple[str, ...]]
    min_bytes: str
    max_bytes: str
    single_node_busbw_min_gbps: float
    single_node_min_size_bytes: int
    multi_node_per_nic_busbw_min_gbps: float
    nics_per_node: int
    timeout_s: int


@dataclass(frozen=True)
class MultiNodeLimits:
    levels: tuple[Level, ...]  # the levels at which a node must have run all_reduce across nodes


@dataclass(frozen=True)
class IbLimits:
    ports_min: int
    rate_gbps: float
    link_layers: tuple[str, ...]
    ignore_cas: tuple[str, ...]


@dataclass(frozen=True)
class StressLimits:
    seconds: dict[str, float]
    h2d_min_gbps: float
    d2h_min_gbps: float
    hbm_min_gbps: float
    gemm_tflops_min: float
    gemm_size: int


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    gpu: GpuLimits
    xid_harmless_buckets: tuple[str, ...]
    dcgm: DcgmLimits
    nccl: NcclLimits
    ib: IbLimits
    stress: StressLimits
    checks: dict[str, tuple[str, ...]]  # level → the checks that level runs
    multi_node: MultiNodeLimits


def _get(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in table:
        raise ProfileError(f"{where}: missing {key!r}")
    value = table[key]
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ProfileError(f"{where}.{key}: expected a number, got a boolean")
    if not isinstance(value, kind):
        raise ProfileError(f"{where}.{key}: expected {kind}, got {type(value).__name__}")
    return value


def _strs(table: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = _get(table, key, list, where)
    if not all(isinstance(v, str) for v in value):
        raise ProfileError(f"{where}.{key}: expected a list of strings")
    return tuple(value)


def _per_level(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> dict[str, Any]:
    value = _get(table, key, dict, where)
    missing = [lvl for lvl in LEVELS if lvl not in value]
    if missing:
        raise ProfileError(f"{where}.{key}: missing level(s) {missing}")
    for lvl in LEVELS:
        _get(value, lvl, kind, f"{where}.{key}")
    return {lvl: value[lvl] for lvl in LEVELS}


def from_toml(text: str, where: str = "profile") -> Profile:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{where}: not valid TOML: {exc}") from exc
    num = (int, float)
    g = _get(doc, "gpu", dict, where)
    d = _get(doc, "dcgm", dict, where)
    n = _get(doc, "nccl", dict, where)
    i = _get(doc, "ib", dict, where)
    s = _get(doc, "stress", dict, where)
    x = _get(doc, "xid", dict, where)
    checks = _per_level(doc, "checks", list, where)
    m = _get(doc, "multi_node", dict, where)
    named = _strs(m, "levels", "multi_node")
    if unknown := [lvl for lvl in named if lvl not in LEVELS]:
        raise ProfileError(f"multi_node.levels: unknown level(s) {unknown}; known: {', '.join(LEVELS)}")
    mn_levels = tuple(level(lvl) for lvl in named)
    return Profile(
        name=_get(doc, "name", str, where),
        description=_get(doc, "description", str, where),
        gpu=GpuLimits(
            count=_get(g, "count", int, "gpu"),
            models=_strs(g, "models", "gpu"),
            pcie_gen=_get(g, "pcie_gen", int, "gpu"),
            pcie_width=_get(g, "pcie_width", int, "gpu"),
            ecc_enabled=_get(g, "ecc_enabled", bool, "gpu"),
            uncorrectable_ecc_volatile_max=_get(g, "uncorrectable_ecc_volatile_max", int, "gpu"),
            row_remap_pending_allowed=_get(g, "row_remap_pending_allowed", bool, "gpu"),
            row_remap_failure_allowed=_get(g, "row_remap_failure_allowed", bool, "gpu"),
            retired_pages_pending_allowed=_get(g, "retired_pages_pending_allowed", bool, "gpu"),
            forbidden_throttle_reasons=_strs(g, "forbidden_throttle_reasons", "gpu"),
            max_temperature_c=float(_get(g, "max_temperature_c", num, "gpu")),
            power_limit_min_w=float(_get(g, "power_limit_min_w", num, "gpu")),
            nvlink_active_links=_get(g, "nvlink_active_links", int, "gpu"),
            driver_min=_get(g, "driver_min", str, "gpu"),
        ),
        xid_harmless_buckets=_strs(x, "harmless_buckets", "xid"),
        dcgm=DcgmLimits(
            levels=_per_level(d, "levels", int, "dcgm"),
            required_tests=_strs(d, "required_tests", "dcgm"),
            allow_warn=_get(d, "allow_warn", bool, "dcgm"),
            timeout_s=_per_level(d, "timeout_s", int, "dcgm"),
        ),
        nccl=NcclLimits(
            collectives={k: tuple(v) for k, v in _per_level(n, "collectives", list, "nccl").items()},
            min_bytes=_get(n, "min_bytes", str, "nccl"),
            max_bytes=_get(n, "max_bytes", str, "nccl"),
            single_node_busbw_min_gbps=float(_get(n, "single_node_busbw_min_gbps", num, "nccl")),
            single_node_min_size_bytes=_get(n, "single_node_min_size_bytes", int, "nccl"),
            multi_node_per_nic_busbw_min_gbps=float(
                _get(n, "multi_node_per_nic_busbw_min_gbps", num, "nccl")
            ),
            nics_per_node=_get(n, "nics_per_node", int, "nccl"),
            timeout_s=_get(n, "timeout_s", int, "nccl"),
        ),
        ib=IbLimits(
            ports_min=_get(i, "ports_min", int, "ib"),
            rate_gbps=float(_get(i, "rate_gbps", num, "ib")),
            link_layers=_strs(i, "link_layers", "ib"),
            ignore_cas=_strs(i, "ignore_cas", "ib"),
        ),
        stress=StressLimits(
            seconds={k: float(v) for k, v in _per_level(s, "seconds", num, "stress").items()},
            h2d_min_gbps=float(_get(s, "h2d_min_gbps", num, "stress")),
            d2h_min_gbps=float(_get(s, "d2h_min_gbps", num, "stress")),
            hbm_min_gbps=float(_get(s, "hbm_min_gbps", num, "stress")),
            gemm_tflops_min=float(_get(s, "gemm_tflops_min", num, "stress")),
            gemm_size=_get(s, "gemm_size", int, "stress"),
        ),
        checks={k: tuple(v) for k, v in checks.items()},
        multi_node=MultiNodeLimits(levels=mn_levels),
    )


def available() -> list[str]:
    return sorted(
        p.name.removesuffix(".toml")
        for p in resources.files(__name__).iterdir()
        if p.name.endswith(".toml")
    )


def load(name: str) -> Profile:
    """Load a shipped profile by name (``h100-sxm-8`` …), or a profile file by path (``*.toml``).

    A file lets a site (or the lab, whose simulated nodes have no GPU for NVML or torch)
    run its own check list and thresholds; it is validated exactly like a shipped one.
    """
    if name.endswith(".toml"):
        path = Path(name)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ProfileError(f"cannot read profile file {name}: {exc.strerror}") from exc
        return from_toml(text, path.name)
    if name not in available():
        raise ProfileError(f"unknown profile {name!r}; known: {', '.join(available())}")
    text = resources.files(__name__).joinpath(f"{name}.toml").read_text(encoding="utf-8")
    profile = from_toml(text, name)
    if profile.name != name:
        raise ProfileError(f"{name}.toml names itself {profile.name!r}")
    return profile
