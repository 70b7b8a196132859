"""What the operations running at once in one Pulumi provider host share: the workflow engine and the boot server.

Pulumi's engine sends a provider host every resource operation it can run
(``pulumi up --parallel``), and the host serves four at a time on threads.
Each operation used to launch the workflow engine (DBOS, one per process) and
an embedded boot server on the one listen address for itself, so they had to
run one at a time (a lock): a 16-node stack was built node after node. Here
the first operation that needs one starts it and the last one to finish
stops it, so independent resources' operations run side by side; at most
``parallel`` at once (a semaphore). Which node a run may touch is not
decided here: a run holds its nodes' leases in the store, and the planner
blocks a node another run holds, so two operations on one node never act on
it together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lifecycle.store import Store
    from lifecycle.workflows.boot_run import Boot, BootSettings
    from lifecycle.workflows.controller import Controller


class Shared:
    """One Controller and one boot server for the operations under way in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: threading.BoundedSemaphore | None = None
        self._parallel = 0
        self._ctl: Controller | None = None
        self._ctl_users = 0
        self._boot: AbstractContextManager[Boot] | None = None
        self._boot_key: tuple[str, str | None, str] | None = None
        self._boot_store: Store | None = None
        self._boot_users = 0

    @contextmanager
    def slot(self, parallel: int) -> Iterator[None]:
        """One of ``parallel`` operations at once (the first operation's setting sizes the semaphore)."""
        with self._lock:
            if self._slots is None:
                self._slots, self._parallel = threading.BoundedSemaphore(max(1, parallel)), max(1, parallel)
            slots = self._slots
        with slots:
            yield

    @contextmanager
    def controller(self, say: Callable[[str], None], operator: str | None = None) -> Iterator[Controller]:
        """The process's Controller (role ``pulumi``), entered by the first user and left by the last; its runs
        name ``operator`` (the stack's ``racklife:operator``) as who started them."""
        from lifecycle.workflows.controller import Controller

        with self._lock:
            if self._ctl is None:
                ctl = Controller("pulumi", say=say, operator=operator)
                ctl.__enter__()
                self._ctl = ctl
            self._ctl_users += 1
            ctl = self._ctl
        try:
            yield ctl
        finally:
            with self._lock:
                self._ctl_users -= 1
                if self._ctl_users == 0:
                    self._ctl = None
                    # Under the lock: DBOS is one per process, so an operation that arrives now waits for the
                    # shutdown to end before it launches DBOS again (shut down outside the lock, it was shut
                    # down under the new operation's feet: "Executor accessed before DBOS was launched").
                    # Awaits every run it started (all ended: each user awaited its own).
                    ctl.__exit__(None, None, None)

    @contextmanager
    def boot_server(self, store: Store, cfg: BootSettings, here: bool) -> Iterator[Boot]:
        """:data:`lifecycle.planner.runner.BootServerFactory`: one boot server for every wave under way here.

        Each user gets the settings for its own default image, read from the server that answers.
        """
        from lifecycle.store import Store as StoreClass
        from lifecycle.workflows.boot_run import BootSetupError, boot_server

        if not here:  # racklife serve runs the runs, and the boot server beside it
            with boot_server(store, cfg, here=False) as boot:
                yield boot
            return
        key = (cfg.listen, cfg.url, str(cfg.images_dir))
        with self._lock:
            if self._boot is None:
                self._boot_store = StoreClass()  # lives as long as the server (a user's store closes with it)
                cm = boot_server(self._boot_store, replace(cfg, image=None), here=True)
                try:
                    cm.__enter__()
                except BaseException:
                    self._boot_store.close()
                    self._boot_store = None
                    raise
                self._boot, self._boot_key = cm, key
            elif key != self._boot_key:
                raise BootSetupError(f"this provider host already serves images from {self._boot_key[2]} "
                                     f"at {self._boot_key[0]}: one boot server per host (the same "
                                     "racklife:imagesDir and bootListen for every resource)") \
                    if self._boot_key else BootSetupError("the boot server is being set up again")
            self._boot_users += 1
        try:
            with boot_server(store, cfg, here=False) as boot:  # the shared server, with this user's image
                yield boot
        finally:
            with self._lock:
                self._boot_users -= 1
                if self._boot_users == 0 and self._boot is not None:
                    self._boot.__exit__(None, None, None)
                    if self._boot_store is not None:
                        self._boot_store.close()
                    self._boot, self._boot_key, self._boot_store = None, None, None


SHARED = Shared()
