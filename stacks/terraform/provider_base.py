"""What the resources need of the provider: its :class:`Fleet`, once ``ConfigureProvider`` has built it.

Kept apart from :mod:`stacks.terraform.provider` so the resource modules and
the provider can import each other's types without a cycle.
"""

from __future__ import annotations

from typing import Any

from stacks.terraform.fleet import Fleet


class ProviderBase:
    fleet: Fleet | None = None


def configured(provider: ProviderBase, diags: Any) -> Fleet | None:
    """The provider's fleet, or None with an error saying why (configuration failed)."""
    if provider.fleet is None:
        diags.add_error("the racklife provider is not configured",
                        "its configuration was refused (see the errors on the provider block)")
    return provider.fleet
