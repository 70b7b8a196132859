"""Where the store is by default: RACKLIFE_DB, else RACKLIFE_HOME, else ~/.racklife; kept per environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from lifecycle.store import db


def test_default_url_follows_each_change_of_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    monkeypatch.delenv("RACKLIFE_DB", raising=False)
    monkeypatch.setenv("RACKLIFE_HOME", str(tmp_path / "a"))
    assert db.default_url() == f"sqlite:///{tmp_path / 'a' / 'racklife.sqlite'}"
    monkeypatch.setenv("RACKLIFE_HOME", str(tmp_path / "b"))
    assert db.default_url() == f"sqlite:///{tmp_path / 'b' / 'racklife.sqlite'}"  # not the first answer kept
    monkeypatch.setenv("RACKLIFE_DB", "postgresql://racklife@db.example/racklife")
    assert db.default_url() == "postgresql://racklife@db.example/racklife"
    monkeypatch.setenv("RACKLIFE_DB", "")  # set but empty: as if unset
    assert db.default_url() == f"sqlite:///{tmp_path / 'b' / 'racklife.sqlite'}"
    monkeypatch.delenv("RACKLIFE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert db.default_url() == f"sqlite:///{tmp_path / 'home' / '.racklife' / 'racklife.sqlite'}"
    assert db.default_home() == tmp_path / "home" / ".racklife"
