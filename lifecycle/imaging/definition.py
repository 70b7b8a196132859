"""Image definitions: what an image is made of, as YAML under images/.

Two kinds share one format. ``initramfs`` images (``minimal``) are assembled
from a few Debian packages into a busybox initramfs. ``rootfs`` images
(``debian12-gpu``) are a whole distribution: debootstrap from a mirror,
pinned packages installed with apt, the Ansible roles of ``roles/`` applied,
then kernel, initrd and a squashfs root. The base names its distribution,
release, mirror and apt sources, so an Ubuntu release (jammy, noble) is a new
YAML file, not new code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

_PACKAGE = r"^[a-z0-9][a-z0-9.+-]*(=[A-Za-z0-9.+~:-]+)?$"


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AptSource(_M):
    """One deb822 stanza of the image's apt sources."""

    uri: str = Field(pattern=r"^https?://[^\s]+$")
    suites: list[str] = Field(min_length=1)
    components: list[str] = ["main"]


class Base(_M):
    distro: Literal["debian", "ubuntu"]
    release: str = Field(pattern=r"^[a-z]+$")  # bookworm; ubuntu jammy/noble later
    arch: Literal["amd64", "arm64"] = "amd64"
    mirror: str | None = Field(default=None, pattern=r"^https?://[^\s]+$")
    """Where debootstrap fetches the base system (rootfs images)."""
    variant: Literal["minbase", "buildd"] = "minbase"
    include: list[str] = []
    """Packages debootstrap installs with the base (what apt and Ansible need: python3, python3-apt)."""
    sources: list[AptSource] = []
    """The image's apt sources, used to install the pinned packages and left in the image."""


class Kernel(_M):
    package: str = Field(pattern=_PACKAGE)
    modules: list[str] = []


class Role(_M):
    """A role from roles/ and the variables the image gives it."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    tasks_from: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]*$")
    """Run only this task file of the role (e.g. ``packages``: install now, configure at join)."""
    vars: dict[str, Any] = {}


class LeftOut(_M):
    """Something the image would carry if it could, and why it does not."""

    name: str
    reason: str


class ImageDefinition(_M):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    version: str = Field(pattern=r"^[A-Za-z0-9._+~-]+$")
    kind: Literal["initramfs", "rootfs"]
    base: Base
    kernel: Kernel
    packages: list[str] = []
    """``name`` or ``name=version``; a rootfs build fails if a pinned version is not the one installed."""
    init: str | None = None
    """Path of the init script, relative to the images/ directory (initramfs images)."""
    files: dict[str, str] = {}
    """Extra files: path in the image -> path relative to the images/ directory."""
    binaries: list[str] = []
    """Programs taken from the packages (paths as the package installs them), each with its ELF interpreter
    and every shared library it needs, found among the same packages (initramfs images)."""
    authorized_keys: str | None = Field(default=None, pattern=r"^/[A-Za-z0-9._/-]+$")
    """Where the build puts the site's SSH public keys (``image build --authorized-keys``), which the build
    then requires (initramfs images). Public keys only: a private key is refused."""
    roles: list[Role] = []
    """Ansible roles from roles/, applied in order (rootfs images)."""
    left_out: list[LeftOut] = []
    """Packages deliberately not in the image, with the reason; copied into the manifest."""
    source_date_epoch: int | None = Field(default=None, ge=0)
    """Timestamp given to every file of a rootfs image (SOURCE_DATE_EPOCH), so rebuilds match."""

    @model_validator(mode="after")
    def _fits_kind(self) -> ImageDefinition:
        if any(not re.match(_PACKAGE, p) for p in self.packages):
            raise ValueError("packages must be `name` or `name=version`")
        if self.kind == "initramfs":
            if self.init is None:
                raise ValueError("an initramfs image needs `init`")
            if self.roles:
                raise ValueError("an initramfs image has no roles (it has no package manager)")
        elif self.binaries or self.authorized_keys:
            raise ValueError("binaries and authorized_keys are for initramfs images (a rootfs installs packages "
                             "whole; its keys come from the base_admin role)")
        if self.kind == "rootfs":
            if self.base.mirror is None or not self.base.sources:
                raise ValueError("a rootfs image needs base.mirror and base.sources")
            if self.init is not None:
                raise ValueError("a rootfs image boots its own init system; drop `init`")
            if self.source_date_epoch is None:
                raise ValueError("a rootfs image needs source_date_epoch (reproducible file times)")
        return self


class DefinitionError(Exception):
    pass


def images_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "images"


def roles_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "roles"


def load_definition(name_or_path: str, root: Path | None = None) -> tuple[ImageDefinition, Path]:
    """Load ``images/NAME.yaml`` (or a path); return the definition and the directory it is relative to."""
    root = root or images_dir()
    path = Path(name_or_path)
    if not path.suffix:
        path = root / f"{name_or_path}.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        known = ", ".join(sorted(p.stem for p in root.glob("*.yaml"))) or "none"
        raise DefinitionError(f"no image definition {path} ({exc.strerror}); known: {known}") from None
    except yaml.YAMLError as exc:
        raise DefinitionError(f"{path}: not valid YAML: {exc}") from None
    try:
        return ImageDefinition.model_validate(data), path.parent
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise DefinitionError(f"{path}: {problems}") from None
