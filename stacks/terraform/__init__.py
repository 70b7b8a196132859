"""racklife as a Terraform provider: ``racklife_node``, ``racklife_pool`` and the ``racklife_node`` data source.

Platform teams that standardise on Terraform describe their fleet in HCL; the
provider turns each create, read, update and delete into the planner's
refresh, plan and apply for the resources concerned (``lifecycle.planner``),
so ``terraform apply``, ``racklife apply`` and the Pulumi stacks can never
disagree about what a change does. It is written with PyPI ``tf``, which
speaks Terraform's plugin protocol (v6) from Python; ``racklife terraform
install-provider`` puts it where Terraform finds it.
"""
