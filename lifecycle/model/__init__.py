"""Inventory, SKUs and the node state machine. Imports nothing else of racklife."""
