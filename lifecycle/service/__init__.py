"""racklife serve and what it exposes: metrics, the controller (lifecycle/service/*.py)."""
