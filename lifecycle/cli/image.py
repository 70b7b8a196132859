"""`racklife image build NAME`: build a golden image from its definition under images/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import yaml

from lifecycle.cli._common import BAD_INPUT, FAILED, JsonOpt, emit_json, err_console, fail, out_console
from lifecycle.imaging.build import BuildError, build, public_keys
from lifecycle.imaging.definition import DefinitionError, load_definition
from lifecycle.imaging.rootfs import build_rootfs
from lifecycle.store.db import default_home

app = typer.Typer(help="Build golden images.", no_args_is_help=True)


def _role_vars(vars_file: Path | None, authorized_keys: Path | None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if vars_file is not None:
        try:
            loaded = yaml.safe_load(vars_file.read_text())
        except (OSError, yaml.YAMLError) as exc:
            fail(f"--vars {vars_file}: {exc}", BAD_INPUT)
        if not isinstance(loaded, dict) or not all(isinstance(k, str) for k in loaded):
            fail(f"--vars {vars_file}: expected a mapping of role variables", BAD_INPUT)
        extra |= loaded
    if authorized_keys is not None:
        try:
            lines = authorized_keys.read_text().splitlines()
        except OSError as exc:
            fail(f"--authorized-keys {authorized_keys}: {exc.strerror}", BAD_INPUT)
        extra["base_admin_authorized_keys"] = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    return extra


@app.command("build")
def build_cmd(
    name: str = typer.Argument(..., help="Image name (images/NAME.yaml) or a definition file."),
    out: Path = typer.Option(None, "--out", help="Output directory (default: $RACKLIFE_HOME/images)."),
    cache: Path = typer.Option(None, "--cache", help="Download cache (default: $RACKLIFE_HOME/cache/debs)."),
    vars_file: Path = typer.Option(None, "--vars", help="YAML mapping of role variables (rootfs images)."),
    authorized_keys: Path | None = typer.Option(
        None, "--authorized-keys", help="The admin's SSH public keys, one a line (rootfs: base_admin_authorized_keys; "
                                      "maintenance: the keys its SSH server accepts)."),
    as_json: bool = JsonOpt,
) -> None:
    """Build kernel, initrd (and a squashfs root) and manifest.json: every package with its version,
    sha256 of every artefact."""
    try:
        defn, defdir = load_definition(name)
    except DefinitionError as exc:
        fail(str(exc), BAD_INPUT)
    out = out or default_home() / "images"
    cache = cache or default_home() / "cache" / "debs"
    keys: list[str] | None = None
    if defn.kind == "initramfs" and defn.authorized_keys and authorized_keys is not None:
        try:  # this image takes the keys itself (images/maintenance.yaml): public keys only
            keys = public_keys(authorized_keys.read_text().splitlines())
        except OSError as exc:
            fail(f"--authorized-keys {authorized_keys}: {exc.strerror}", BAD_INPUT)
        except BuildError as exc:
            fail(f"--authorized-keys {authorized_keys}: {exc}", BAD_INPUT)
        authorized_keys = None
    elif defn.kind == "initramfs" and defn.authorized_keys:
        fail(f"image {defn.name} needs --authorized-keys FILE: the site's SSH public keys its SSH server accepts",
             BAD_INPUT)
    extra = _role_vars(vars_file, authorized_keys)
    if extra and defn.kind != "rootfs":
        fail(f"image {defn.name} has no roles: --vars and --authorized-keys apply to rootfs images", BAD_INPUT)
    log = lambda m: err_console.print(m, markup=False)  # noqa: E731
    try:
        if defn.kind == "rootfs":
            manifest = build_rootfs(defn, defdir, out, cache, log=log, role_vars=extra).manifest
        else:
            manifest = build(defn, defdir, out, cache, log=log, authorized_keys=keys)
    except BuildError as exc:
        fail(f"image {defn.name}: {exc}", FAILED)  # fail() escapes: Ansible output is full of [brackets]
    if as_json:
        emit_json(manifest)
    else:
        out_console.print(f"built {defn.name} {defn.version} (kernel {manifest['kernel_version']}) in "
                          f"{out / f'{defn.name}-{defn.version}'}")
        for art, meta in manifest["artefacts"].items():
            out_console.print(f"  {art}  {meta['size']} bytes  sha256 {meta['sha256']}")
