"""Image definitions: what an image is made of, as YAML under images/."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Base(_M):
    distro: Literal["debian", "ubuntu"]
    release: str = Field(pattern=r"^[a-z]+$")  # bookworm; ubuntu jammy/noble later
    arch: Literal["amd64", "arm64"] = "amd64"


class Kernel(_M):
    package: str = Field(pattern=r"^[a-z0-9][a-z0-9.+-]*(=[A-Za-z0-9.+~:-]+)?$")
    modules: list[str] = []


class ImageDefinition(_M):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    version: str = Field(pattern=r"^[A-Za-z0-9._+~-]+$")
    kind: Literal["initramfs"]
    base: Base
    kernel: Kernel
    packages: list[str] = []
    init: str
    """Path of the init script, relative to the images/ directory."""
    files: dict[str, str] = {}
    """Extra files: path in the image -> path relative to the images/ directory."""


class DefinitionError(Exception):
    pass


def images_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "images"


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
