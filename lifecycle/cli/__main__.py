"""`python -m lifecycle.cli` is `racklife` (for `-X importtime` and environments without the script)."""

from lifecycle.cli import main

main()
