"""Ansible plugins racklife ships (loaded by path through ANSIBLE_*_PLUGINS, not imported)."""
