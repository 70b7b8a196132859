"""Workflows: idempotent, journaled steps over drivers, run durably by DBOS."""
