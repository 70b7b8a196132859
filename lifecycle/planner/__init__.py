"""The planner: observe the fleet (refresh), diff it against the inventory, plan, apply.

Every front end (the CLI, later the service and the stacks) reaches the fleet
through here, so they cannot disagree about what a change does. So far:
observed state and drift (``observe``, ``observed``); plan and apply are to come.
"""
