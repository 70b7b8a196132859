"""`racklife evidence verify DIR` and `racklife evidence key`: check a bundle against anchors outside it.

An acceptance record is only worth what its evidence is worth; this command is what an
auditor (or the join gate) runs to know that the raw outputs, results and thresholds
in a bundle are the ones the verdict was reached on. A bundle that merely agrees with its
own manifest proves nothing (rewrite a file, re-hash the manifest), so ``verify`` checks
every anchor it has and says which: the digest the store recorded with the acceptance
record, the controller's Ed25519 signature (``--public-key FILE``, else the controller's
own key when run on the controller), and ``--expect-sha256``. Exit 0: consistent and every
anchor checked holds; exit 1: changed, missing or added files, a manifest that does not
check out, an anchor that does not hold, or no anchor at all; exit 2: bad input.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from acceptance.evidence import verify
from acceptance.signing import ControllerKey, SigningError, key_id, load_public_key, public_pem
from lifecycle.cli._common import BAD_INPUT, FAILED, OK, JsonOpt, emit_json, fail, out_console, unavailable
from lifecycle.store import Store, StoreUnavailable
from lifecycle.store.db import default_home

app = typer.Typer(help="Acceptance evidence bundles.", no_args_is_help=True)


def _store_digests(bundle: Path, as_json: bool) -> list[str] | None:
    """What the store recorded for this bundle, or None when there is no store here or no record of it
    (an auditor's copy elsewhere: the signature or --expect-sha256 anchors it)."""
    if not os.environ.get("RACKLIFE_DB") and not (default_home() / "racklife.sqlite").is_file():
        return None
    try:
        store = Store()
        try:
            return store.evidence_digests(str(bundle.resolve())) or None
        finally:
            store.close()
    except StoreUnavailable as exc:  # a store that cannot be read is not "no record": say so, change nothing
        unavailable(f"{exc}; the store anchor cannot be checked (pass --no-store to verify without it)", as_json)


@app.command("verify")
def verify_cmd(
    bundle: Path = typer.Argument(..., help="The bundle directory (holds manifest.json)."),
    expect_sha256: str | None = typer.Option(
        None, "--expect-sha256", help="The manifest digest stored with the acceptance record."
    ),
    public_key: Path | None = typer.Option(
        None, "--public-key", help="The controller's public key (PEM, from `racklife evidence key`); "
                                   "default: the controller's own key, when run on the controller."),
    use_store: bool = typer.Option(True, "--store/--no-store",
                                   help="Compare with the digest the store recorded for this bundle."),
    as_json: bool = JsonOpt,
) -> None:
    """Recompute every file's sha256, compare with DIR/manifest.json, and check the bundle's anchors."""
    if not bundle.is_dir():
        fail(f"{bundle} is not a directory", BAD_INPUT)
    try:
        if public_key is not None:
            key = load_public_key(public_key)
        elif (own := ControllerKey(default_home())).exists():
            key = own.load().public_key()
        else:
            key = None
    except SigningError as exc:
        fail(str(exc), BAD_INPUT)
    recorded = _store_digests(bundle, as_json) if use_store else None
    result = verify(bundle, expect_sha256, recorded=recorded, public_key=key)
    unanchored = "no anchor checked: the bundle only agrees with itself (give --public-key or --expect-sha256)"
    if as_json:
        emit_json({"bundle": str(bundle), "ok": result.ok, "consistent": result.consistent,
                   "digest": result.digest,
                   "anchors": [{"kind": a.kind, "ok": a.ok, "detail": a.detail} for a in result.anchors],
                   "tampered": list(result.tampered), "missing": list(result.missing),
                   "extra": list(result.extra),
                   "problems": list(result.problems) + ([] if result.anchors else [unanchored])})
    else:
        for label, items in (("changed", result.tampered), ("missing", result.missing),
                             ("added", result.extra), ("manifest", result.problems)):
            for item in items:
                out_console.print(f"{label}: {item}", markup=False, highlight=False)
        for a in result.anchors:
            out_console.print(f"anchor {a.kind}: {'ok' if a.ok else 'FAILED'}: {a.detail}", markup=False,
                              highlight=False)
        if not result.anchors:
            out_console.print(unanchored, markup=False, highlight=False)
        status = "verified" if result.ok else ("TAMPERED" if not result.consistent or result.anchors
                                               else "UNANCHORED")
        out_console.print(f"{bundle}: {status} (manifest sha256 {result.digest or '-'})", markup=False)
    raise typer.Exit(OK if result.ok else FAILED)


@app.command("key")
def key_cmd(as_json: bool = JsonOpt) -> None:
    """Print the controller's evidence-signing public key (PEM), creating the key on first use."""
    own = ControllerKey(default_home())
    try:
        public = own.load(create=True).public_key()
    except SigningError as exc:
        fail(str(exc), BAD_INPUT)
    if as_json:
        emit_json({"key_id": key_id(public), "algorithm": "ed25519", "public_key": public_pem(public),
                   "private_key_file": str(own.path)})
    else:
        typer.echo(public_pem(public), nl=False)
