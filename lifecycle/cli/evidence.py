"""`racklife evidence verify DIR`: check an acceptance evidence bundle against its manifest.

An acceptance record is only worth what its evidence is worth; this command is what an
auditor (or the join gate) runs to know that the raw outputs, results and thresholds
in a bundle are the ones the verdict was reached on. Exit 0: intact; exit 1: changed,
missing or added files (each listed) or a manifest that does not check out.
"""

from __future__ import annotations

from pathlib import Path

import typer

from acceptance.evidence import verify
from lifecycle.cli._common import BAD_INPUT, FAILED, OK, JsonOpt, emit_json, fail, out_console

app = typer.Typer(help="Acceptance evidence bundles.", no_args_is_help=True)


@app.command("verify")
def verify_cmd(
    bundle: Path = typer.Argument(..., help="The bundle directory (holds manifest.json)."),
    expect_sha256: str | None = typer.Option(
        None, "--expect-sha256", help="The manifest digest stored with the acceptance record."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Recompute every file's sha256 and compare with DIR/manifest.json; list what differs."""
    if not bundle.is_dir():
        fail(f"{bundle} is not a directory", BAD_INPUT)
    result = verify(bundle, expect_sha256)
    if as_json:
        emit_json({"bundle": str(bundle), "ok": result.ok, "digest": result.digest,
                   "tampered": list(result.tampered), "missing": list(result.missing),
                   "extra": list(result.extra), "problems": list(result.problems)})
    else:
        for label, items in (("changed", result.tampered), ("missing", result.missing),
                             ("added", result.extra), ("manifest", result.problems)):
            for item in items:
                out_console.print(f"{label}: {item}", markup=False, highlight=False)
        status = "intact" if result.ok else "TAMPERED"
        out_console.print(f"{bundle}: {status} (manifest sha256 {result.digest or '-'})", markup=False)
    raise typer.Exit(OK if result.ok else FAILED)
