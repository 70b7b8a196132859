"""Inventory, SKUs and the node state machine. Imports nothing else of racklife but burnin's levels (vocab)."""
