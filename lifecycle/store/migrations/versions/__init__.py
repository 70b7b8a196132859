"""One file per schema revision, oldest first; see docs/architecture.md "Adding a table"."""
