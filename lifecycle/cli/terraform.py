"""`racklife terraform install-provider`: make racklife's Terraform provider available to `terraform init`.

The provider (``stacks/terraform``) needs the ``stacks`` extra (PyPI ``tf``);
without it this group is a stand-in that names the extra. The command writes
the provider into a filesystem mirror and prints, on stdout, the Terraform CLI
configuration that uses it (for ``TF_CLI_CONFIG_FILE`` or ``~/.terraformrc``;
the default mirror, ``~/.terraform.d/plugins``, needs none), or with
``--dev-overrides`` one that runs it in place without ``terraform init``. Exit codes: 0
installed, 2 bad input (a mirror path that cannot be written).
"""

from __future__ import annotations

from pathlib import Path

import typer

from lifecycle.cli._common import BAD_INPUT, JsonOpt, emit_json, err_console, fail
from stacks.terraform import install

app = typer.Typer(help="racklife's Terraform provider.", no_args_is_help=True)


@app.command("install-provider")
def install_provider_cmd(
    mirror: Path = typer.Option(None, "--dir", help="Filesystem mirror to install into "
                                                     "(default: ~/.terraform.d/plugins, which Terraform searches)."),
    config: Path | None = typer.Option(None, "--config", help="Also write the CLI configuration to this file."),
    dev_overrides: bool = typer.Option(False, "--dev-overrides",
                                       help="Print a dev_overrides configuration instead (no `terraform init`: "
                                            "Terraform runs the provider in place, and warns so)."),
    as_json: bool = JsonOpt,
) -> None:
    """Install the provider into a filesystem mirror; print the CLI configuration that uses it."""
    where = mirror or install.default_mirror()
    try:
        done = install.install(where)
        text = install.dev_overrides_config(done) if dev_overrides else install.cli_config(done)
        if config is not None:
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(text, encoding="utf-8")
    except (OSError, ValueError) as exc:
        fail(f"cannot install the provider into {where}: {getattr(exc, 'strerror', None) or exc}", BAD_INPUT)
    if as_json:
        emit_json(done.to_json() | {"cli_config": text})
        return
    err_console.print(f"installed {done.address} {done.version} ({done.platform}) as {done.executable}",
                      markup=False, soft_wrap=True)
    if config is not None:
        err_console.print(f"wrote the CLI configuration to {config} (export TF_CLI_CONFIG_FILE={config})",
                          markup=False, soft_wrap=True)
    typer.echo(text, nl=False)
