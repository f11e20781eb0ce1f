"""A JSON file nested past Python's recursion limit ('[' × 100 000) is one line, not a traceback:
compare's measurements and --target profiles read it with json, which recurses."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import run_cli


@pytest.fixture
def deep(tmp_path: Path) -> Path:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    return path


@pytest.mark.parametrize(
    "args",
    [["compare", "{deep}", "{deep}"], ["targets", "--target", "{deep}"]],
    ids=["compare", "targets"],
)
def test_a_deeply_nested_json_file_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], deep: Path, args: list[str]
) -> None:
    code, _, err = run_cli(monkeypatch, capsys, *(a.format(deep=deep) for a in args))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "nested too deeply" in lines[0], err
