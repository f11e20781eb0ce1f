"""Run the real `deployopt` entry point in-process, as a user would (one helper for every CLI test)."""

from __future__ import annotations

import sys

import pytest

from deployopt.cli.app import console
from deployopt.cli.main import main


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str, columns: int = 200
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `deployopt ARGS`, error handling included; a terminal 200
    wide, so table cells are not folded (`columns`: another width, for --help)."""
    monkeypatch.setattr(sys, "argv", ["deployopt", *args])
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setattr(console, "width", columns)
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err


def one_error(code: int, err: str) -> str:
    """`err` itself, asserted to be what bad input gets: exit 2 and one `error: ` line, no traceback."""
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err
