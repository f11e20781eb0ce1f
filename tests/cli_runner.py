"""Run the real `deployopt` entry point in-process, as a user would (one helper for every CLI test)."""

from __future__ import annotations

import sys

import pytest

from deployopt.cli.app import console
from deployopt.cli.main import main


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `deployopt ARGS`, error handling included; tables 200 wide
    so cells are not folded."""
    monkeypatch.setattr(sys, "argv", ["deployopt", *args])
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(console, "width", 200)
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capsys.readouterr()
    return code, out, err
