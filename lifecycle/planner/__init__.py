"""The planner: observe the fleet (refresh), diff it against the inventory, plan, apply.

Every front end (the CLI, ``racklife serve``, the Pulumi providers and the
Terraform provider) reaches the fleet through here, so they cannot disagree
about what a change does: observed state and drift (``observe``,
``observed``), the plan (``plan``), apply's waves (``apply``), the workflows
each action runs (``runner``) and the entry points (``fleet``).
"""
