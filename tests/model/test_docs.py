"""The state diagram in docs/ is generated from the table and must be current."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def test_state_machine_doc_is_current(repo_dir: Path) -> None:
    spec = importlib.util.spec_from_file_location("gen_docs", repo_dir / "scripts" / "gen_docs.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert (repo_dir / "docs" / "state-machine.md").read_text() == mod.render(), \
        "docs/state-machine.md is stale: run python scripts/gen_docs.py"
