"""`racklife image build NAME`: build a golden image from its definition under images/."""

from __future__ import annotations

from pathlib import Path

import typer

from lifecycle.cli._common import BAD_INPUT, FAILED, JsonOpt, emit_json, err_console, fail, out_console
from lifecycle.imaging.build import BuildError, build
from lifecycle.imaging.definition import DefinitionError, load_definition
from lifecycle.store.db import default_home

app = typer.Typer(help="Build golden images.", no_args_is_help=True)


@app.command("build")
def build_cmd(
    name: str = typer.Argument(..., help="Image name (images/NAME.yaml) or a definition file."),
    out: Path = typer.Option(None, "--out", help="Output directory (default: $RACKLIFE_HOME/images)."),
    cache: Path = typer.Option(None, "--cache", help="Package cache (default: $RACKLIFE_HOME/cache/debs)."),
    as_json: bool = JsonOpt,
) -> None:
    """Build kernel, initrd and manifest.json (every package with its version, sha256 of every artefact)."""
    try:
        defn, defdir = load_definition(name)
    except DefinitionError as exc:
        fail(str(exc), BAD_INPUT)
    out = out or default_home() / "images"
    cache = cache or default_home() / "cache" / "debs"
    try:
        manifest = build(defn, defdir, out, cache, log=lambda m: err_console.print(m, markup=False))
    except BuildError as exc:
        fail(f"image {defn.name}: {exc}", FAILED)
    if as_json:
        emit_json(manifest)
    else:
        out_console.print(f"built {defn.name} {defn.version} (kernel {manifest['kernel_version']}) in "
                          f"{out / f'{defn.name}-{defn.version}'}")
        for art, meta in manifest["artefacts"].items():
            out_console.print(f"  {art}  {meta['size']} bytes  sha256 {meta['sha256']}")
