"""Node-side burn-in: prove a node's GPUs, links and firmware are healthy before it joins a scheduler.

This package runs *on the node* (``python -m burnin``), so it imports nothing else of
racklife and needs only the standard library; ``pynvml`` and ``torch`` are used when
present and their absence is reported as an ``error`` verdict, never as a pass.
The controller side (``acceptance``) reads the one document this package writes,
``result.json`` (see :mod:`burnin.result`).
"""

from __future__ import annotations

from burnin.result import BURNIN_VERSION as __version__

__all__ = ["__version__"]
