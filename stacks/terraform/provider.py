"""The provider itself: its schema, its configuration, and the process Terraform starts.

Terraform runs ``terraform-provider-racklife`` (written by ``racklife
terraform install-provider``), which calls :func:`main`: ``tf`` serves the
plugin protocol over a Unix socket and prints the handshake line on stdout,
so nothing else here may print there (racklife's own messages go to stderr,
which Terraform keeps in its log).
"""

from __future__ import annotations

from typing import Any

from tf import schema, types
from tf.iface import Provider

from lifecycle.model.vocab import LEVELS
from lifecycle.store import StoreError
from stacks.terraform import settings as cfg
from stacks.terraform.fleet import Fleet
from stacks.terraform.nodes import NodeData, NodeResource
from stacks.terraform.pools import PoolResource
from stacks.terraform.provider_base import ProviderBase

ADDRESS = "racklife.io/racklife/racklife"  # the source address a module's required_providers names
NUMBERS = frozenset({"boot_timeout", "max_in_flight"})
_DESCRIPTIONS: dict[str, str] = {
    "inventory": "The base inventory file: site, racks, serials, BMCs, NICs (env RACKLIFE_INVENTORY).",
    "home": "racklife's home: its store and acceptance work directories (env RACKLIFE_HOME).",
    "images": "Built golden images (default: HOME/images).",
    "boot_listen": "Where the embedded boot server listens while nodes are provisioned (env RACKLIFE_BOOT_LISTEN).",
    "boot_url": "The boot server's URL as nodes see it (env RACKLIFE_BOOT_URL).",
    "boot_timeout": "Seconds to wait for a node to phone home, per boot.",
    "acceptance_level": f"Acceptance level of accept steps: {', '.join(LEVELS)}.",
    "ssh_config": "ssh_config that reaches the nodes (env RACKLIFE_SSH_CONFIG).",
    "burnin_profile": "Burn-in profile for every node (default: each node's SKU).",
    "burnin_python": "Python on the nodes that has racklife's burnin package.",
    "kubeconfig": "Kubeconfig of the inference cluster (env RACKLIFE_KUBECONFIG or KUBECONFIG).",
    "role_cmd": "The site's role-switch hook run in role swaps (env RACKLIFE_NODE_ROLE_CMD).",
    "slurm_conf_cmd": "The site's slurm.conf hook run in decommissions (env RACKLIFE_SLURM_CONF_CMD).",
    "max_in_flight": "Most nodes worked on at once.",
    "max_unavailable": "Per pool, nodes out of service at once: N or P%.",
    "operator": "Who applies, as recorded in every node's history (default: terraform:LOGIN).",
}

PROVIDER_SCHEMA = schema.Schema(version=1, attributes=[
    *[schema.Attribute(k, types.Number() if k in NUMBERS else types.String(), optional=True,
                       description=_DESCRIPTIONS[k]) for k in cfg.ENV],
    schema.Attribute("bmc_credentials", types.Map(types.String()), optional=True, sensitive=True,
                     description="BMC credentials by environment variable name (user:password), for the "
                                 "inventory's `credentials: env:VAR` references; never stored."),
])


class RacklifeProvider(ProviderBase, Provider):  # type: ignore[misc]  # tf ships no type information
    def get_model_prefix(self) -> str:
        return "racklife_"

    def full_name(self) -> str:
        return ADDRESS

    def get_provider_schema(self, diags: Any) -> schema.Schema:
        return PROVIDER_SCHEMA

    def validate_config(self, diags: Any, config: dict[str, Any]) -> None:
        return None  # values may still be unknown here; configure_provider checks them

    def configure_provider(self, diags: Any, config: dict[str, Any]) -> None:
        known = {k: v for k, v in config.items() if v is not types.Unknown}
        settings, problems = cfg.from_config(known)
        for attr, message in problems:
            diags.add_error(f"racklife provider: {attr}: {message}", "", [attr])
        if settings is None:
            return
        cfg.install(settings)
        from lifecycle.store import connect, db

        try:
            connect.ensure_store(db.default_url())
        except StoreError as exc:
            diags.add_error("racklife's store is unavailable", str(exc))
            return
        self.fleet = Fleet(settings)

    def get_data_sources(self) -> list[type]:
        return [NodeData]

    def get_resources(self) -> list[type]:
        return [NodeResource, PoolResource]


def main() -> None:
    from tf.runner import run_provider

    run_provider(RacklifeProvider())
