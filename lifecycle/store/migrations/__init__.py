"""Alembic's script directory for racklife's own tables (run by :mod:`lifecycle.store.migrate`)."""
