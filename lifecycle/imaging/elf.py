"""The shared libraries a program from a Debian package needs, found in the image's own packages.

An initramfs image has no package manager and no ld.so.cache: a dynamically
linked program (dropbear, nvme) boots only if its ELF interpreter and every
library it names (DT_NEEDED, transitively) are in the image at the path the
package installs them, where Debian's dynamic loader looks (the multiarch
directories are built into it). The libraries are looked up only among the
packages the definition lists, so what goes into the image is exactly what the
definition says; a library none of them ships fails the build with its name.
"""

from __future__ import annotations

import re
from pathlib import Path

from lifecycle.imaging.common import BuildError, run

_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
_INTERP = re.compile(r"\[Requesting program interpreter: ([^\]]+)\]")
LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu",
            "usr/lib/aarch64-linux-gnu", "lib64", "lib", "usr/lib")


def _is_elf(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"\x7fELF"


def needed(path: Path) -> tuple[list[str], str | None]:
    """The sonames ``path`` names and its interpreter (None for a static program or a library)."""
    out = run(["readelf", "--wide", "--dynamic", "--program-headers", str(path)])
    interp = _INTERP.search(out)
    return _NEEDED.findall(out), interp.group(1) if interp else None


def find_in(roots: list[Path], rel: str) -> Path | None:
    """``rel`` (a path inside the image) in the first package root that has it, symlinks followed there."""
    for root in roots:
        p = root / rel.lstrip("/")
        for _ in range(8):
            if p.is_symlink():
                target = Path(str(p.readlink()))
                p = (root / str(target).lstrip("/")) if target.is_absolute() else p.parent / target
            else:
                break
        if p.is_file():
            return p
    return None


def closure(roots: list[Path], programs: list[str]) -> dict[str, Path]:
    """Image path -> file on disk for ``programs`` and everything they need to run."""
    want: dict[str, Path] = {}
    todo: list[str] = []
    for prog in programs:
        found = find_in(roots, prog)
        if found is None:
            raise BuildError(f"no package of the image ships {prog}")
        want[prog.lstrip("/")] = found
        todo.append(prog.lstrip("/"))
    while todo:
        path = want[todo.pop()]
        if not _is_elf(path):
            continue
        sonames, interp = needed(path)
        if interp is not None and interp.lstrip("/") not in want:
            got = find_in(roots, interp)
            if got is None:
                raise BuildError(f"{path.name} needs the interpreter {interp}, which no package of the image ships "
                                 "(add libc6)")
            want[interp.lstrip("/")] = got
            todo.append(interp.lstrip("/"))
        for soname in sonames:
            if any(Path(k).name == soname for k in want):
                continue
            hit = next(((f"{d}/{soname}", p) for d in LIB_DIRS for p in [find_in(roots, f"{d}/{soname}")] if p),
                       None)
            if hit is None:
                raise BuildError(f"{path.name} needs {soname}, which no package of the image ships in "
                                 f"{', '.join(LIB_DIRS)}: add the package that does")
            want[hit[0]] = hit[1]
            todo.append(hit[0])
    return want
