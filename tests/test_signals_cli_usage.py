"""click's usage errors, one line each, all ending `; see '<command> --help'`: an option given
without its value (click attaches no context to that error) said no command, and a suggestion
ended the line in `?; see`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["bench", "{m}", "--runs"],
            "error: Option '--runs' requires an argument; see 'deployopt bench --help'",
        ),
        (
            ["bench", "{m}", "--runs", "3", "--warmup"],
            "error: Option '--warmup' requires an argument; see 'deployopt bench --help'",
        ),
        (
            ["targets", "--json=1"],
            "error: Option '--json' does not take a value; see 'deployopt targets --help'",
        ),
        (["anal", "{m}"], "error: No such command 'anal' (did you mean 'analyze'?); see 'deployopt --help'"),
        (["--wat"], "error: No such option: --wat; see 'deployopt --help'"),
    ],
)
def test_usage_errors_say_which_help_to_read(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, args: list[str], line: str
) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")  # never read: the command line is refused first
    code, out, err = run_cli(monkeypatch, capsys, *(a.replace("{m}", str(model)) for a in args))
    assert (code, out, err) == (2, "", line + "\n")
