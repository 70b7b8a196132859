"""``python -m burnin`` on a node that has Python and nothing else of racklife."""

from __future__ import annotations

import sys

from burnin.cli import main

if __name__ == "__main__":
    sys.exit(main())
