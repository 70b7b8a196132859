"""A throwaway PostgreSQL cluster (initdb + pg_ctl), for the tests that need the shared database."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def pg_bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)
    assert found, f"PostgreSQL's {name} is not installed (Debian package postgresql-15)"
    return found


@contextmanager
def throwaway_postgres(base: Path, port: int, database: str = "racklife_test") -> Iterator[str]:
    """A cluster under ``base`` listening on 127.0.0.1:``port``; yields a URL of ``database`` in it."""
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        prefix = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
        os.chmod(base, 0o755)
        for p in base.parents:
            if str(p).startswith("/tmp/"):
                os.chmod(p, os.stat(p).st_mode | 0o005)
    subprocess.run([*prefix, pg_bin("initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                    "--no-sync"], check=True, capture_output=True)
    opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {sock} -c fsync=off -c max_connections=300"
    subprocess.run([*prefix, pg_bin("pg_ctl"), "-D", str(data), "-o", opts, "-w", "-l",
                    str(base / "log"), "start"], check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/{database}"
    finally:
        subprocess.run([*prefix, pg_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
