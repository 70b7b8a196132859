"""Provisioning as a front end runs it: the embedded boot server up, the provisioning run awaited.

`racklife provision` and `racklife apply` both provision through here, so the
boot server, the images it publishes and the run's settings are set up one
way. The boot server is started before a Controller recovers a killed
provisioning run (its nodes may be booting and phoning home already).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lifecycle.drivers.boot.render import BootImage
from lifecycle.store import Store
from lifecycle.workflows import provision
from lifecycle.workflows.controller import Starter


class BootSetupError(ValueError):
    """The boot server cannot be set up as asked (bad address, no built image)."""


@dataclass(frozen=True)
class BootSettings:
    images_dir: Path
    listen: str = "127.0.0.1:8069"
    url: str | None = None  # as the nodes see it; None: the listen address
    timeout_s: float = 600.0  # seconds to wait for a phone-home, per boot
    image: str | None = None  # None: minimal, or the only one built


@dataclass(frozen=True)
class Boot:
    url: str
    settings: provision.ProvisionSettings  # what the provisioning and reimage runs take
    image: str | None


def _split(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise BootSetupError(f"the boot server's listen address must be HOST:PORT, not {listen!r}")
    return host, int(port)


def _answers(url: str) -> bool:
    """Whether a racklife boot server answers at ``url`` (its chain script)."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the boot network, never a proxy
    try:
        probe = urllib.request.Request(f"{url}/boot.ipxe", method="HEAD")  # noqa: S310 - http(s): _elsewhere checks
        with opener.open(probe, timeout=5) as resp:
            return int(resp.status) == 200
    except OSError:
        return False


def _elsewhere(cfg: BootSettings) -> str:
    """The URL of the boot server another process runs (``racklife serve --boot-listen`` or
    ``racklife boot serve``), checked to answer: a run handed to the service must not wait out
    its boot timeouts for a boot server no one runs."""
    host, port = _split(cfg.listen)
    url = (cfg.url or f"http://{host}:{port}").rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise BootSetupError(f"the boot server's URL must be http(s)://, not {url!r}")
    if not (_answers(f"http://{host}:{port}") or _answers(url)):
        raise BootSetupError(f"no boot server answers at {cfg.listen} or {url}: with racklife serve running, "
                             "the boot server runs beside it (`racklife serve --boot-listen` or "
                             "`racklife boot serve`)")
    return url


@contextmanager
def boot_server(store: Store, cfg: BootSettings, here: bool = True) -> Iterator[Boot]:
    """The boot server, serving the built images, for as long as the block runs.

    ``here=False``: the runs go to ``racklife serve``, and the boot server that
    outlives this command is another process's (it must answer, serving the same
    images directory); only the settings are computed here.
    """
    from lifecycle.drivers.boot.server import BootServer
    from lifecycle.workflows.boot_images import published_images
    from lifecycle.workflows.boot_service import StoreBootBackend

    if not here:
        url = _elsewhere(cfg)
        yield Boot(url, _settings(cfg, url, published_images(cfg.images_dir, url)), cfg.image)
        return
    host, port = _split(cfg.listen)
    server = BootServer(StoreBootBackend(store), cfg.images_dir, host=host, port=port)
    if cfg.url:
        server.advertise_as(cfg.url)
    settings = _settings(cfg, server.url, published_images(cfg.images_dir, server.url))
    server.start()
    try:
        yield Boot(server.url, settings, cfg.image)
    finally:
        server.stop()


def planned_settings(cfg: BootSettings) -> provision.ProvisionSettings:
    """The settings a boot server started from ``cfg`` would give (for a dry run: nothing is started)."""
    host, port = _split(cfg.listen)
    url = (cfg.url or f"http://{host}:{port}").rstrip("/")
    from lifecycle.workflows.boot_images import published_images

    return _settings(cfg, url, published_images(cfg.images_dir, url))


def _settings(cfg: BootSettings, url: str, images: dict[str, BootImage]) -> provision.ProvisionSettings:
    if not images:
        raise BootSetupError(f"no built images in {cfg.images_dir}: run `racklife image build minimal` first")
    if cfg.image and cfg.image not in images:
        raise BootSetupError(f"image '{cfg.image}' is not built (have: {', '.join(sorted(images))})")
    default = cfg.image or ("minimal" if "minimal" in images else sorted(images)[0])
    return provision.ProvisionSettings(boot_url=url, images=images, default_image=default,
                                       boot_timeout_s=cfg.timeout_s)


def provision_nodes(ctl: Starter, boot: Boot, names: list[str], max_in_flight: int,
                    say: Callable[[str], None], adopt: bool = True,
                    wait: bool = True) -> tuple[str, list[dict[str, Any]]]:
    """Provision ``names`` (or, with ``adopt``, finish a provisioning run a dead process left); await it.

    Returns the run's id and each node's outcome (none without ``wait``: the run is only started)."""
    ctl.register_queue(provision.QUEUE, max_in_flight)
    cut_off = ctl.cut_off("provision_many") if adopt else []
    if cut_off:
        handle = ctl.handle(cut_off[0].run_id)
        say(f"resuming provisioning run {cut_off[0].run_id}, cut off earlier; its nodes and settings are the "
            f"ones it started with; boot server {boot.url}")
    else:
        handle = ctl.start(provision.provision_many, names, boot.image, boot.settings, nodes=names)
        say(f"provisioning {len(names)} node(s) as run {handle.get_workflow_id()} (max {max_in_flight} in "
            f"flight); boot server {boot.url}")
    if not wait:
        return str(handle.get_workflow_id()), []
    result: list[dict[str, Any]] = handle.get_result()
    return str(handle.get_workflow_id()), result
