"""Import pyghmi without breaking the imports other threads make at the same moment.

pyghmi's OEM lookup (``pyghmi.ipmi.oem.lookup``, imported by ``pyghmi.ipmi.command``
and so by ``pyghmi.ipmi.bmc``) loads its plugins when it is imported: for each
plugin directory it inserts the directory at ``sys.path[1]``, imports the plugin,
and pops ``sys.path[1]`` again. Python's path finder walks ``sys.path`` as a list;
a pop while another thread is part-way along it shifts the entries left under
that thread, which skips one. When the skipped entry is site-packages, that
thread's import fails with ``No module named …`` for a package that is
installed. CI failed so once: ``racklife apply`` read its nodes' sources on
threads; a BMC read imported pyghmi while the Kubernetes read imported
lightkube ("internal error: ModuleNotFoundError: No module named 'lightkube'").

:func:`load` imports pyghmi (once per process, under a lock) with ``sys.path``
replaced for the duration by a copy that every walker walks as a snapshot; the
original list is put back afterwards, unchanged, since pyghmi pops every entry
it inserts. Every racklife module that imports pyghmi's ``command`` or ``bmc``
(the IPMI driver, the lab's IPMI emulator) calls it first.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator

_LOCK = threading.Lock()
PYGHMI = ("pyghmi.ipmi.command", "pyghmi.ipmi.bmc")


class _WalkedAsSnapshot(list[str]):
    """``sys.path`` while pyghmi loads: inserted into and popped from, but walked as a copy taken first."""

    def __iter__(self) -> Iterator[str]:
        return iter(list.copy(self))


def load(modules: tuple[str, ...] = PYGHMI) -> None:
    """Import ``modules`` (pyghmi's) with ``sys.path`` safe for other threads' imports meanwhile."""
    if all(m in sys.modules for m in modules):
        return
    with _LOCK:
        if all(m in sys.modules for m in modules):
            return
        original = sys.path
        sys.path = _WalkedAsSnapshot(original)
        try:
            for m in modules:
                importlib.import_module(m)
        finally:
            sys.path = original
