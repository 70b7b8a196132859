"""A deterministic cpio (newc) writer for initramfs images.

GNU cpio stamps inode numbers and times from the build machine; the kernel
only needs the newc format, so writing it here makes two builds of the same
inputs byte-identical.
"""

from __future__ import annotations

import gzip
import io
import stat
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    path: str  # relative, no leading slash
    mode: int  # full st_mode (type and permissions)
    data: bytes = b""  # file contents, or the target of a symlink


def _header(ino: int, e: Entry, size: int) -> bytes:
    name = e.path.encode() + b"\0"
    fields = [ino, e.mode, 0, 0, 1, 0, size, 0, 0, 0, 0, len(name), 0]
    head = b"070701" + b"".join(f"{v:08X}".encode() for v in fields) + name
    return head + b"\0" * (-len(head) % 4)


def newc(entries: list[Entry]) -> bytes:
    out = io.BytesIO()
    for ino, e in enumerate(sorted(entries, key=lambda x: x.path), start=1):
        out.write(_header(ino, e, len(e.data)))
        out.write(e.data)
        out.write(b"\0" * (-len(e.data) % 4))
    trailer = Entry("TRAILER!!!", 0)
    out.write(_header(0, trailer, 0))
    data = out.getvalue()
    return data + b"\0" * (-len(data) % 512)


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def directory(path: str) -> Entry:
    return Entry(path, stat.S_IFDIR | 0o755)


def file(path: str, data: bytes, executable: bool = False) -> Entry:
    return Entry(path, stat.S_IFREG | (0o755 if executable else 0o644), data)


def symlink(path: str, target: str) -> Entry:
    return Entry(path, stat.S_IFLNK | 0o777, target.encode())
