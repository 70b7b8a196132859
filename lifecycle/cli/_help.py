"""What every command's help shows beyond its docstring: an example, and metavars people read.

The examples live in one table, not in each module's docstring, so that a
command added without one fails ``tests/cli/test_cli_help.py`` (which also
parses every example against the real command, so none names an option that
does not exist) and ``docs/cli.md`` is generated from the same text.

Typer prints a parameter's Python type as its metavar (``--json <bool>``
invites ``--json true``); ``tidy`` gives flags none and value options the
option's own name in capitals (``--pool POOL``), as click and most CLIs do.
"""

from __future__ import annotations

import typer.core
from typer import _click as click  # typer vendors its own click (0.29): its classes, not the click package

HELP_OPTION_NAMES = ["-h", "--help"]
INV = "examples/site-h100-2rack.yaml"

# Command path (as typed after `racklife`) → one real invocation.
EXAMPLES: dict[str, str] = {
    "": "racklife --db sqlite:////var/lib/racklife/racklife.sqlite nodes list",
    "config view": "racklife --db postgresql://racklife@db1/racklife config view -o yaml",
    "inventory validate": f"racklife inventory validate {INV}",
    "inventory import": f"racklife inventory import {INV} --json",
    "nodes list": "racklife nodes list --pool training --state accepted",
    "node show": "racklife node show r01-n01",
    "node history": "racklife node history r01-n01 --json",
    "node list": "racklife node list --selector pool=training -o name",
    "nodes show": "racklife nodes show r01-n01 -o yaml",
    "nodes history": "racklife nodes history r01-n01 --no-headers",
    "workflows list": "racklife workflows list --status ERROR --limit 10",
    "workflows show": "racklife workflows show accept-917de0d4 --watch 5",
    "workflows cancel": "racklife workflows cancel accept-917de0d4",
    "workflows resume": "racklife workflows resume accept-917de0d4 --no-wait",
    "image build": "racklife image build images/minimal.yaml --out /var/lib/racklife/images",
    "provision": "racklife provision --rack r01 --image debian12-gpu --max-in-flight 4",
    "accept": "racklife accept r01 --level standard --report-dir reports/r01",
    "build": f"racklife build {INV} --level quick",
    "refresh": f"racklife refresh {INV} --nodes r01-n01,r01-n02 --json",
    "plan": f"racklife plan {INV}",
    "apply": f"racklife apply {INV} --max-unavailable 2 --yes",
    "boot serve": "racklife boot serve --listen 0.0.0.0:8069 --url http://10.0.0.1:8069",
    "slurm render": f"racklife slurm render --inventory {INV} --out /etc/slurm",
    "slurm status": "racklife slurm status --json",
    "slurm join": "racklife slurm join 'r01-n[01-02]'",
    "slurm leave": "racklife slurm leave r01-n01 --policy requeue --reason 'fan swap' --yes",
    "slurm suspend-program": "racklife slurm suspend-program 'r01-n[01-04]'",
    "slurm resume-program": "racklife slurm resume-program 'r01-n[01-04]'",
    "evidence verify": "racklife evidence verify reports/r01/evidence --json",
    "evidence key": "racklife evidence key",
    "burnin run": "racklife burnin run --profile h100-sxm-8 --level quick --out /tmp/burnin",
    "burnin parse": "racklife burnin parse dcgm dcgmi-diag.json --json",
    "burnin judge": "racklife burnin judge result.json --profile h100-sxm-8",
    "bmc power": "racklife bmc power cycle 'r01-n[01-02]' --dry-run",
    "bmc boot": "racklife bmc boot pxe r01-n01",
    "bmc inventory": "racklife bmc inventory r01-n01 --json",
    "bmc sel": "racklife bmc sel --rack r01",
    "bmc sensors": "racklife bmc sensors --pool training -o json",
    "bmc firmware list": "racklife bmc firmware list r01-n01 --json",
    "bmc firmware update": "racklife bmc firmware update 'r01-n[01-04]' --file bmc-2.16.0.tar --component BMC "
                           "--expect-version 2.16.0 --yes",
    "bmc bios list": "racklife bmc bios list r01-n01 --pending",
    "bmc bios set": "racklife bmc bios set r01-n01 SriovGlobalEnable=Enabled ProcVirtualization=Enabled --reboot",
    "kube render": f"racklife kube render gpu-operator --inventory {INV}",
    "kube join": "racklife kube join --rack r02 --pool inference --kubeconfig ~/.kube/config --ready-timeout 600",
    "kube validate": "racklife kube validate clusterpolicy.yaml",
    "metrics serve": "racklife metrics serve --port 9469",
    "metrics textfile": "racklife metrics textfile /var/lib/node_exporter/racklife.prom",
    "metrics show": "racklife metrics show",
    "upgrade": "racklife upgrade --pool training --image debian12-gpu:2026.12.1 --max-unavailable 25% --canary 1 "
               "--policy wait --window 22:00-04:00 --dry-run",
    "upgrade status": "racklife upgrade status upgrade-5f0c2a9d41be --json",
    "upgrade pause": "racklife upgrade pause upgrade-5f0c2a9d41be",
    "upgrade resume": "racklife upgrade resume upgrade-5f0c2a9d41be",
    "upgrade abort": "racklife upgrade abort upgrade-5f0c2a9d41be --json",
    "role-swap": "racklife role-swap r01-n07 r01-n08 --to inference --policy requeue --deadline 30m --reimage "
                 "--dry-run",
    "repair": "racklife repair r01-n03 --from-xid 79 --dry-run",
    "repair-status": "racklife repair-status training --json",
    "serve": "racklife serve --db postgresql://racklife@db.example/racklife --refresh-interval 300",
    "decommission": "racklife decommission 'r01-n[07-08]' --erase --force --dry-run",
    "up": "racklife up --stack lab",
    "preview": "racklife preview --stack lab --json",
    "destroy": "racklife destroy --stack lab --yes",
    "status": "racklife status --watch 5",
    "report capacity": "racklife report capacity --since 7d --json",
    "report fleet": "racklife report fleet --out fleet.html --since 30d",
    "terraform install-provider": "racklife terraform install-provider --dir ~/tf-mirror --config ~/.terraformrc",
    "lab up": "sudo racklife lab up --nodes 4 --dir /tmp/rl-lab",
    "lab status": "racklife lab status --dir /tmp/rl-lab",
    "lab down": "sudo racklife lab down --dir /tmp/rl-lab --yes",
    "lab inventory": "racklife lab inventory --dir /tmp/rl-lab > lab.yaml",
    "lab env": 'eval "$(racklife lab env --dir /tmp/rl-lab)"',
    "lab fault": "sudo racklife lab fault rl-n01 xid79 --gpu 3 --dir /tmp/rl-lab",
    "lab tour": "sudo racklife lab tour --nodes 4",
}


def example_epilog(path: str) -> str | None:
    example = EXAMPLES.get(path)
    return None if example is None else f"Example: {example}"


def tidy(cmd: click.Command, path: str) -> None:
    """Metavars without Python types and the command's example, on ``cmd`` and every command under it."""
    tidy_params(cmd)
    epilog = example_epilog(path)
    if epilog is not None and not cmd.epilog:
        cmd.epilog = epilog
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        tidy(sub, f"{path} {name}".strip())


def tidy_params(cmd: click.Command) -> None:
    """Flags show no metavar; value options their name in capitals; choices keep their list."""
    # The help option is made on first use; made here (and cached by click) it gets a metavar too.
    help_option = cmd.get_help_option(click.Context(cmd, help_option_names=HELP_OPTION_NAMES))
    for param in [*cmd.params, *([help_option] if help_option is not None else [])]:
        if isinstance(param, typer.core.TyperOption) and param.metavar is None:
            if param.is_flag or param.count or param.type_descriptor.annotation is bool:
                param.metavar = ""  # a flag takes no value
            elif not param.type_descriptor.is_choice:
                param.metavar = (param.name or "value").upper()
        elif isinstance(param, typer.core.TyperArgument) and param.metavar is None:
            param.metavar = (param.name or "value").upper()
