"""The cache root: a relative XDG_CACHE_HOME is ignored, as the XDG Base Directory spec says (it
named a folder under whatever directory each run started in: one cache per working directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployopt.paths import cache_dir


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DEPLOYOPT_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("value", ["rel/cache", "cache", ".", ""])
def test_relative_or_empty_xdg_cache_home_is_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", value)
    assert cache_dir("lut") == tmp_path / "home" / ".cache" / "deployopt" / "lut"


def test_absolute_xdg_cache_home_is_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir("targets") == tmp_path / "xdg" / "deployopt" / "targets"


def test_deployopt_cache_dir_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir("lut") == tmp_path / "mine" / "lut"
