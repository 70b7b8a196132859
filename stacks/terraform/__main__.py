"""``python -m stacks.terraform``: serve the provider (what ``terraform-provider-racklife`` runs)."""

from stacks.terraform.provider import main

main()
