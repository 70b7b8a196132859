"""The evidence bundle: complete, hashed, and any change to it is caught (also through the CLI)."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from acceptance.evidence import BundleMeta, EvidenceError, seal, verify, write_bundle
from acceptance.isolation import FaultModel, isolate
from acceptance.judge import GroupRun, NodeInput, judge_rack
from acceptance.signing import ControllerKey, SigningError, key_id
from burnin.parsers import nccl
from lifecycle.cli import app
from lifecycle.model.inventory import load_inventory
from lifecycle.store import AcceptanceRecord, Store

Build = Callable[[list[Any] | None], list[tuple[NodeInput, Path]]]
META = BundleMeta(rack="rack-a", operator="alice@example.net", started_at="2026-11-30T02:00:00Z",
                  ended_at="2026-11-30T02:12:00Z", racklife_version="0.1.0", level="quick",
                  image="racklife-h100-ubuntu2204-2026.11.1", policy="operator")


@pytest.fixture
def bundle(rack8: Build, tmp_path: Path, fixtures_dir: Path) -> tuple[Path, str]:
    built = rack8(None)
    inputs = [inp for inp, _ in built]
    degraded = (fixtures_dir / "nccl/h100x8_2node-16gpu_all_reduce_perf_ndr-ib_DEGRADED_issue290.txt").read_text()
    groups = [GroupRun(("gpu-a01", "gpu-a02"), "pair", nccl.parse(degraded, "all_reduce"), raw_output=degraded)]
    j = judge_rack(inputs, groups=groups, group_profile="h100-sxm-8")
    out = tmp_path / "bundle"
    iso = isolate([i.node for i in inputs], FaultModel(frozenset({"gpu-a03"})))
    digest = write_bundle(out, j, inputs, {inp.node: d for inp, d in built}, META, isolation=iso)
    return out, digest


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_bundle_holds_everything_and_verifies(bundle: tuple[Path, str]) -> None:
    root, digest = bundle
    assert verify(root).consistent and verify(root, digest).ok
    node = root / "nodes" / "gpu-a05"
    assert (node / "result.json").is_file() and (node / "raw" / "ib.out").is_file()
    doc = json.loads((node / "judgement.json").read_text())
    assert doc["verdict"] == "fail" and doc["operator"] == META.operator and doc["image"] == META.image
    assert doc["tool_versions"]["dcgmi"] == "3.1.8" and doc["burnin_started_at"]
    ib = next(f for f in doc["findings"] if f["check"] == "ib.ports")
    assert ib["threshold"] == {"ports_min": 8, "rate_gbps": 400.0}
    assert (root / "profiles" / "h100-sxm-8.toml").read_text().startswith("# Burn-in profile")
    rack = json.loads((root / "rack.json").read_text())
    assert rack["not_passed"] == ["gpu-a03", "gpu-a05", "gpu-a07"]
    assert rack["multi_node"][0]["verdict"] == "fail"
    assert rack["isolation"]["bad_nodes"] == ["gpu-a03"] and rack["isolation"]["rounds"] == 3
    assert (root / rack["multi_node"][0]["raw_output"]).read_text().startswith(" 0: # nThread")
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["manifest_sha256"] == digest
    assert set(manifest["files"]) == {p.relative_to(root).as_posix() for p in all_files(root)} - {"manifest.json"}


def test_changing_any_file_is_caught(bundle: tuple[Path, str]) -> None:
    root, _ = bundle
    files = [p for p in all_files(root) if p.name != "manifest.json"]
    assert len(files) > 40
    for path in files:
        original = path.read_bytes()
        path.write_bytes(original + b" ")
        result = verify(root)
        assert not result.ok and result.tampered == (path.relative_to(root).as_posix(),), path
        path.write_bytes(original[:-1] + bytes([original[-1] ^ 1]) if original else b"x")  # same size
        assert verify(root).tampered == (path.relative_to(root).as_posix(),)
        path.write_bytes(original)
    assert verify(root).consistent


def test_removed_added_and_linked_files_are_caught(bundle: tuple[Path, str]) -> None:
    root, _ = bundle
    victim = root / "nodes" / "gpu-a03" / "raw" / "nccl.all_reduce.out"
    victim.rename(root / "moved.out")
    result = verify(root)
    assert result.missing == ("nodes/gpu-a03/raw/nccl.all_reduce.out",) and result.extra == ("moved.out",)
    (root / "moved.out").rename(victim)
    (root / "nodes" / "gpu-a01" / "raw" / "fake.out").symlink_to(victim)
    assert verify(root).extra == ("nodes/gpu-a01/raw/fake.out",)


def test_manifest_edits_are_caught(bundle: tuple[Path, str]) -> None:
    root, digest = bundle
    path = root / "manifest.json"
    doc = json.loads(path.read_text())
    target = "nodes/gpu-a03/judgement.json"
    forged = json.loads((root / target).read_text())
    forged["verdict"] = "pass"
    (root / target).write_text(json.dumps(forged))
    doc["files"][target]["sha256"] = "0" * 64
    path.write_text(json.dumps(doc))
    result = verify(root)
    assert not result.ok and any("was edited" in p for p in result.problems)
    # a forger who also re-seals: consistent again, but no anchor vouches for it, and the digest
    # kept with the acceptance record gives it away
    seal(root, created_at=doc["created_at"], operator=doc["operator"])
    assert verify(root).consistent and not verify(root).ok
    assert not verify(root, digest).ok and not verify(root, recorded=[digest]).ok
    path.unlink()
    assert verify(root).problems == ("manifest.json is missing",)


def test_unsafe_inputs_are_refused(rack8: Build, tmp_path: Path) -> None:
    built = rack8(None)[:1]
    inp = built[0][0]
    bad = NodeInput("../escape", inp.profile, inp.result)
    with pytest.raises(EvidenceError, match="safe"):
        write_bundle(tmp_path / "b", judge_rack([bad]), [bad], {}, META)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(EvidenceError, match="not empty"):
        write_bundle(tmp_path / "full", judge_rack([inp]), [inp], {}, META)


def test_cli_verify_exit_codes(bundle: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, digest = bundle
    monkeypatch.setenv("RACKLIFE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RACKLIFE_DB", raising=False)
    runner = CliRunner()
    ok = runner.invoke(app, ["evidence", "verify", str(root), "--expect-sha256", digest])
    assert ok.exit_code == 0 and "verified" in ok.output and "anchor expected: ok" in ok.output
    alone = runner.invoke(app, ["evidence", "verify", str(root)])
    assert alone.exit_code == 1 and "no anchor checked" in alone.output and "UNANCHORED" in alone.output
    (root / "nodes" / "gpu-a02" / "raw" / "dcgm.out").write_text("{}")
    (root / "rack.json").unlink()
    bad = runner.invoke(app, ["evidence", "verify", str(root), "--json"])
    assert bad.exit_code == 1
    doc = json.loads(bad.output)
    assert doc["ok"] is False
    assert doc["tampered"] == ["nodes/gpu-a02/raw/dcgm.out"] and doc["missing"] == ["rack.json"]
    text = runner.invoke(app, ["evidence", "verify", str(root)])
    assert text.exit_code == 1 and "changed: nodes/gpu-a02/raw/dcgm.out" in text.output
    assert "missing: rack.json" in text.output
    assert runner.invoke(app, ["evidence", "verify", str(root / "nope")]).exit_code == 2


# ------------------------------------------------------------------ anchors outside the bundle


@pytest.fixture
def signed(rack8: Build, tmp_path: Path) -> tuple[Path, str, ControllerKey]:
    built = rack8(None)
    inputs = [inp for inp, _ in built]
    key = ControllerKey(tmp_path / "state")
    out = tmp_path / "signed"
    digest = write_bundle(out, judge_rack(inputs), inputs, {inp.node: d for inp, d in built}, META,
                          signer=key.load(create=True))
    return out, digest, key


def _forge(root: Path) -> None:
    """What a forger does: rewrite a node's result and re-hash the manifest so it agrees again."""
    victim = root / "nodes" / "gpu-a03" / "judgement.json"
    doc = json.loads(victim.read_text())
    doc["verdict"] = "pass"
    victim.write_text(json.dumps(doc))
    manifest = json.loads((root / "manifest.json").read_text())
    seal(root, created_at=manifest["created_at"], operator=manifest["operator"])


def test_signed_bundle_verifies_with_each_anchor(signed: tuple[Path, str, ControllerKey]) -> None:
    root, digest, key = signed
    public = key.load().public_key()
    result = verify(root, digest, recorded=[digest], public_key=public)
    assert result.ok and [a.kind for a in result.anchors] == ["store", "signature", "expected"]
    assert all(a.ok for a in result.anchors)
    assert "manifest.sig" not in json.loads((root / "manifest.json").read_text())["files"]


def test_rewritten_and_rehashed_bundle_fails_every_anchor(signed: tuple[Path, str, ControllerKey]) -> None:
    root, digest, key = signed
    _forge(root)
    assert verify(root).consistent  # it agrees with itself …
    result = verify(root, digest, recorded=[digest], public_key=key.load().public_key())
    assert not result.ok  # … but not with what was recorded and signed
    by = {a.kind: a for a in result.anchors}
    assert not by["store"].ok and "is not the recorded" in by["store"].detail
    assert not by["signature"].ok and "changed after signing" in by["signature"].detail
    assert not by["expected"].ok


def test_a_bundle_signed_by_another_key_or_unsigned_fails(signed: tuple[Path, str, ControllerKey],
                                                         tmp_path: Path) -> None:
    root, _, _ = signed
    other = ControllerKey(tmp_path / "other").load(create=True).public_key()
    found = verify(root, public_key=other).anchors[0]
    assert not found.ok and "not by the trusted key" in found.detail
    (root / "manifest.sig").unlink()
    assert "not signed" in verify(root, public_key=other).anchors[0].detail


def test_controller_key_is_private_and_created_once(tmp_path: Path) -> None:
    key = ControllerKey(tmp_path / "state")
    first = key.load(create=True)
    assert stat.S_IMODE(key.path.stat().st_mode) == 0o600
    assert key_id(key.load(create=True).public_key()) == key_id(first.public_key())
    key.path.chmod(0o644)
    with pytest.raises(SigningError, match="readable by others"):
        key.load()


def test_cli_key_and_verify_with_public_key_elsewhere(signed: tuple[Path, str, ControllerKey], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root, _, key = signed
    runner = CliRunner()
    monkeypatch.delenv("RACKLIFE_DB", raising=False)
    monkeypatch.setenv("RACKLIFE_HOME", str(key.state_dir))
    printed = runner.invoke(app, ["evidence", "key"])
    assert printed.exit_code == 0 and printed.output.startswith("-----BEGIN PUBLIC KEY-----")
    pem = tmp_path / "controller.pub"
    pem.write_text(printed.output)
    # an auditor's machine: no store, no controller key, only the public key file
    monkeypatch.setenv("RACKLIFE_HOME", str(tmp_path / "auditor"))
    ok = runner.invoke(app, ["evidence", "verify", str(root), "--public-key", str(pem), "--json"])
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.output)
    assert doc["ok"] and [a["kind"] for a in doc["anchors"]] == ["signature"]
    _forge(root)
    bad = runner.invoke(app, ["evidence", "verify", str(root), "--public-key", str(pem)])
    assert bad.exit_code == 1 and "anchor signature: FAILED" in bad.output and "TAMPERED" in bad.output
    garbage = tmp_path / "garbage.pub"
    garbage.write_text("not a key")
    assert runner.invoke(app, ["evidence", "verify", str(root), "--public-key", str(garbage)]).exit_code == 2


def test_cli_checks_the_digest_the_store_recorded(signed: tuple[Path, str, ControllerKey], tmp_path: Path,
                                                  repo_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, digest, _ = signed
    home = tmp_path / "controller"
    monkeypatch.setenv("RACKLIFE_HOME", str(home))
    monkeypatch.delenv("RACKLIFE_DB", raising=False)
    home.mkdir()
    store = Store()
    try:
        store.import_inventory(load_inventory(repo_dir / "examples" / "site-h100-2rack.yaml"))
        node = store.nodes()[0].name
        now = datetime.now(UTC)
        store.add_acceptance_record(AcceptanceRecord(f"run-1:{node}", node, True, "quick", "h100-sxm-8", now,
                                                     now + timedelta(days=1), "alice", "run-1", {},
                                                     str(root.resolve()), digest))
    finally:
        store.close()
    runner = CliRunner()
    ok = runner.invoke(app, ["evidence", "verify", str(root), "--json"])
    assert ok.exit_code == 0, ok.output
    assert [(a["kind"], a["ok"]) for a in json.loads(ok.output)["anchors"]] == [("store", True)]
    _forge(root)
    bad = runner.invoke(app, ["evidence", "verify", str(root)])
    assert bad.exit_code == 1 and "anchor store: FAILED" in bad.output and digest in bad.output


def test_cli_an_unreadable_store_is_one_line_not_a_traceback(signed: tuple[Path, str, ControllerKey],
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _, _ = signed
    monkeypatch.setenv("RACKLIFE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RACKLIFE_DB", "postgresql+psycopg://racklife@127.0.0.1:1/racklife")  # nothing listens
    res = CliRunner().invoke(app, ["evidence", "verify", str(root)])
    assert res.exit_code == 6 and "does not answer" in res.output and "--no-store" in res.output, res.output
