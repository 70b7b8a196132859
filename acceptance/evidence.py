"""The evidence bundle: everything an acceptance verdict rests on, hashed so it can be checked later.

A node joins a scheduler on the strength of its acceptance record; months later, after
an incident, someone will ask what exactly was measured and against which thresholds.
The bundle keeps, per node and per rack: the raw tool outputs, the parsed result as the
node sent it, the judgement with every number and threshold, the profile files used,
tool and image versions, timestamps and the operator. ``manifest.json`` lists every file
with its size and sha256, and carries the sha256 of its own canonical form (sorted keys,
no whitespace, UTF-8, without the ``manifest_sha256`` field). :func:`verify` recomputes
all of it and names every file that was changed, removed or added.

That alone proves only that a bundle agrees with itself: rewrite a file, re-hash the
manifest, and it agrees again. So a bundle is anchored outside itself, and :func:`verify`
passes only when at least one anchor was checked and every anchor checked holds: the
digest recorded in the store with the acceptance record (``recorded``), the controller's
Ed25519 signature in ``manifest.sig`` checked against a trusted public key
(:mod:`acceptance.signing`), or a digest the caller expects (``--expect-sha256``).

Layout::

    manifest.json
    manifest.sig                   the controller's signature of the manifest (not listed in it)
    rack.json                      rack, operator, times, versions, fleet baselines, verdicts
    profiles/<profile>.toml        the exact profile text judged against
    nodes/<node>/judgement.json    verdict, findings (number, threshold, why), versions
    nodes/<node>/result.json       burn-in result as received (absent when none came back)
    nodes/<node>/raw/...           raw tool outputs
    multi_node/<n>-<kind>.txt      raw output of each multi-node run
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from acceptance import signing
from acceptance.isolation import Isolation
from acceptance.judge import GroupJudgement, NodeInput, NodeJudgement, RackJudgement
from burnin.levels import Level

MANIFEST = "manifest.json"
SCHEMA = "racklife.evidence.manifest"
SCHEMA_VERSION = 1
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


class EvidenceError(ValueError):
    """A bundle that cannot be written (unsafe names, a directory that is not empty)."""


@dataclass(frozen=True)
class BundleMeta:
    """Who ran the acceptance, when, with what."""

    rack: str
    operator: str
    started_at: str
    ended_at: str
    racklife_version: str
    level: Level
    image: str | None = None  # golden image name and version the nodes booted
    node_images: Mapping[str, str] = field(default_factory=dict)  # per-node override
    policy: str = "manual"  # the operator or policy that asked for acceptance


AnchorKind = Literal["store", "signature", "expected"]


@dataclass(frozen=True)
class Anchor:
    """One check of the bundle against something outside it, and what it found."""

    kind: AnchorKind
    ok: bool
    detail: str


@dataclass(frozen=True)
class Verification:
    consistent: bool  # every file as the manifest lists it, and the manifest's own digest right
    tampered: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()  # the manifest itself: unreadable, wrong digest, unsafe paths
    digest: str | None = None
    anchors: tuple[Anchor, ...] = ()

    @property
    def anchored(self) -> bool:
        return bool(self.anchors) and all(a.ok for a in self.anchors)

    @property
    def ok(self) -> bool:
        """Consistent and anchored: a bundle no anchor vouches for is not verified."""
        return self.consistent and self.anchored

    def files(self) -> list[str]:
        return sorted({*self.tampered, *self.missing, *self.extra})


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def sha256_file(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def safe_name(name: str, what: str = "name") -> str:
    if not _SAFE_NAME.match(name) or name in (".", ".."):
        raise EvidenceError(f"{what} {name!r} is not a safe file name")
    return name


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")


def _copy_tree(src: Path, dst: Path) -> None:
    """Regular files only: a symlink in a node's output is not followed into the bundle."""
    for path in sorted(src.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def tool_versions(inp: NodeInput) -> dict[str, str | None]:
    if inp.result is None:
        return {}
    versions: dict[str, str | None] = {"burnin": inp.result.burnin_version}
    for c in inp.result.checks:
        if c.tool:
            versions.setdefault(c.tool, c.tool_version)
    return versions


def _node_doc(j: NodeJudgement, inp: NodeInput, meta: BundleMeta) -> dict[str, Any]:
    r = inp.result
    return {
        "node": j.node,
        "rack": inp.rack or meta.rack,
        "position": inp.position,
        "verdict": j.verdict,
        "reasons": j.reasons(),
        "profile": j.profile,
        "level": j.level,
        "operator": meta.operator,
        "policy": meta.policy,
        "image": meta.node_images.get(j.node, meta.image),
        "tool_versions": tool_versions(inp),
        "burnin_started_at": r.started_at if r else None,
        "burnin_ended_at": r.ended_at if r else None,
        "judged_at": meta.ended_at,
        "result_error": inp.error,
        "findings": [asdict(f) for f in j.findings],
    }


def _group_doc(i: int, g: GroupJudgement) -> dict[str, Any]:
    return {"index": i, "nodes": list(g.run.nodes), "kind": g.run.kind, "verdict": g.verdict,
            "launcher": g.run.launcher,
            "finding": asdict(g.finding), "error": g.run.error, "job_id": g.run.job_id,
            "raw_output": f"multi_node/{i:03d}-{safe_name(g.run.kind, 'run kind')}.txt"
            if g.run.raw_output is not None else None}


def write_bundle(
    out_dir: Path,
    judgement: RackJudgement,
    inputs: Sequence[NodeInput],
    node_dirs: Mapping[str, Path],
    meta: BundleMeta,
    *,
    isolation: Isolation | None = None,
    extra_rack_data: Mapping[str, Any] | None = None,
    signer: Ed25519PrivateKey | None = None,
) -> str:
    """Write the bundle for one rack into the empty ``out_dir`` and seal it; returns the manifest digest.

    ``node_dirs`` maps a node to the directory its ``result.json`` and ``raw/`` came back
    in (the fan-out's output); nodes without one have only their judgement.
    """
    if out_dir.exists() and any(out_dir.iterdir()):
        raise EvidenceError(f"{out_dir} is not empty; an evidence bundle is written once")
    out_dir.mkdir(parents=True, exist_ok=True)
    by_node = {i.node: i for i in inputs}
    for name in sorted({*by_node, *node_dirs}):
        safe_name(name, "node name")
    for pname in sorted({j.profile for j in judgement.nodes}):
        text = _profile_text(pname)
        if text is not None:
            (out_dir / "profiles").mkdir(exist_ok=True)
            (out_dir / "profiles" / f"{safe_name(pname, 'profile')}.toml").write_text(text, encoding="utf-8")
    for j in judgement.nodes:
        node_root = out_dir / "nodes" / j.node
        src = node_dirs.get(j.node)
        if src is not None and src.is_dir():
            _copy_tree(src, node_root)
        _write_json(node_root / "judgement.json", _node_doc(j, by_node[j.node], meta))
    groups = [_group_doc(i, g) for i, g in enumerate(judgement.groups)]
    for i, g in enumerate(judgement.groups):
        if g.run.raw_output is not None:
            path = out_dir / "multi_node" / f"{i:03d}-{g.run.kind}.txt"
            path.parent.mkdir(exist_ok=True)
            path.write_text(g.run.raw_output, encoding="utf-8")
    rack_doc = {
        "rack": meta.rack,
        "operator": meta.operator,
        "policy": meta.policy,
        "level": meta.level,
        "started_at": meta.started_at,
        "ended_at": meta.ended_at,
        "racklife_version": meta.racklife_version,
        "image": meta.image,
        "outlier_policy": asdict(judgement.policy),
        "verdicts": {j.node: j.verdict for j in judgement.nodes},
        "passed": judgement.passed,
        "not_passed": judgement.not_passed,
        "fleet": [asdict(s) for s in judgement.fleet],
        "multi_node": groups,
        "isolation": isolation.to_dict() if isolation is not None else None,
        **(dict(extra_rack_data) if extra_rack_data else {}),
    }
    _write_json(out_dir / "rack.json", rack_doc)
    return seal(out_dir, created_at=meta.ended_at, operator=meta.operator, signer=signer)


def _profile_text(name: str) -> str | None:
    ref = resources.files("burnin.profiles").joinpath(f"{name}.toml")
    return ref.read_text(encoding="utf-8") if ref.is_file() else None


def _bundle_files(root: Path) -> tuple[dict[str, Path], list[str]]:
    """Every entry under ``root`` but the manifest; symlinks and other non-files come back as odd."""
    files: dict[str, Path] = {}
    odd: list[str] = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel in (MANIFEST, signing.SIGNATURE):
            continue
        if path.is_symlink() or (not path.is_file() and not path.is_dir()):
            odd.append(rel)
        elif path.is_file():
            files[rel] = path
    return files, odd


def seal(root: Path, *, created_at: str, operator: str, signer: Ed25519PrivateKey | None = None) -> str:
    """Hash every file into ``manifest.json`` (and sign it when given a key); returns the manifest's
    digest, which the caller records with the acceptance record."""
    files, odd = _bundle_files(root)
    if odd:
        raise EvidenceError(f"bundle holds entries that are not regular files: {', '.join(odd)}")
    entries = {rel: {"sha256": sha256_file(p), "size": p.stat().st_size} for rel, p in files.items()}
    body: dict[str, Any] = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "created_at": created_at,
                            "operator": operator, "algorithm": "sha256", "files": entries}
    digest = hashlib.sha256(canonical(body)).hexdigest()
    _write_json(root / MANIFEST, {**body, "manifest_sha256": digest})
    if signer is not None:
        signing.write_signature(root, signing.sign(signer, canonical(body), digest))
    return digest


def _read_manifest(root: Path) -> tuple[dict[str, Any] | None, list[str]]:
    path = root / MANIFEST
    if path.is_symlink() or not path.is_file():
        return None, [f"{MANIFEST} is missing"]
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, [f"{MANIFEST} is not JSON: {exc}"]
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("schema_version") != SCHEMA_VERSION:
        return None, [f"{MANIFEST} is not a {SCHEMA} v{SCHEMA_VERSION} document"]
    files = doc.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in files.values()
    ):
        return None, [f"{MANIFEST}: 'files' must map paths to {{sha256, size}}"]
    return doc, []


def _anchors(root: Path, body: bytes, digest: str, expected_digest: str | None,
             recorded: Sequence[str] | None, public_key: Ed25519PublicKey | None) -> list[Anchor]:
    out: list[Anchor] = []
    if recorded is not None:
        if not recorded:
            out.append(Anchor("store", False, "the store has no acceptance record for this bundle"))
        elif digest in recorded:
            out.append(Anchor("store", True, f"manifest sha256 {digest} is the one recorded with its "
                                             "acceptance record"))
        else:
            out.append(Anchor("store", False, f"manifest sha256 {digest} is not the recorded "
                                              f"{', '.join(sorted(set(recorded)))}"))
    if public_key is not None:
        why = signing.check_signature(root, body, public_key)
        out.append(Anchor("signature", why is None,
                          why or f"signed by controller key {signing.key_id(public_key)}"))
    if expected_digest is not None:
        ok = expected_digest.lower() == digest
        said = "is the expected one" if ok else f"is not the expected {expected_digest}"
        out.append(Anchor("expected", ok, f"manifest sha256 {digest} {said}"))
    return out


def verify(root: Path, expected_digest: str | None = None, *, recorded: Sequence[str] | None = None,
           public_key: Ed25519PublicKey | None = None) -> Verification:
    """Check a bundle against its manifest (every file present, unchanged, nothing added) and against
    each anchor given: the store's recorded digests, the controller's public key, an expected digest."""
    doc, problems = _read_manifest(root)
    if doc is None:
        return Verification(False, problems=tuple(problems))
    body = {k: v for k, v in doc.items() if k != "manifest_sha256"}
    digest = hashlib.sha256(canonical(body)).hexdigest()
    if doc.get("manifest_sha256") != digest:
        problems.append(f"{MANIFEST} was edited: its content hashes to {digest}, it claims "
                        f"{doc.get('manifest_sha256')!r}")
    anchors = _anchors(root, canonical(body), digest, expected_digest, recorded, public_key)
    listed: dict[str, Any] = doc["files"]
    unsafe = [rel for rel in listed if PurePosixPath(rel).is_absolute() or ".." in PurePosixPath(rel).parts]
    problems.extend(f"{MANIFEST} lists an unsafe path {rel!r}" for rel in unsafe)
    files, odd = _bundle_files(root)
    tampered: list[str] = []
    missing: list[str] = []
    for rel, entry in sorted(listed.items()):
        if rel in unsafe:
            continue
        path = files.get(rel)
        if path is None:
            (tampered if rel in odd else missing).append(rel)
        elif path.stat().st_size != entry.get("size") or sha256_file(path) != entry["sha256"]:
            tampered.append(rel)
    extra = sorted({*(rel for rel in files if rel not in listed), *(rel for rel in odd if rel not in listed)})
    consistent = not (tampered or missing or extra or problems)
    return Verification(consistent, tuple(tampered), tuple(missing), tuple(extra), tuple(problems), digest,
                        tuple(anchors))
