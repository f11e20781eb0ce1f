"""Bad input found by a third pass over every command: each case was a wrong verdict, NaN or
negative latencies printed as predictions, or a valid model refused with a garbled line; now one
`error:` line and exit 2 (or, for the valid model, the run it asked for)."""

from __future__ import annotations

import pytest
from cli_runner import run_cli
from test_cli_bad_input import _one_error


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_verify_rel_error_that_is_no_fraction(monkeypatch, capsys, zoo_model_path, value) -> None:
    """--rel-error nan passed the `< 0` check and every output then 'failed' against a NaN limit:
    FAILED and exit 1 for a model compared with itself."""
    m = str(zoo_model_path("resnet_projection"))
    args = ["verify", m, m, "--max-abs-error", "0.1", "--rel-error", value]
    _one_error(*run_cli(monkeypatch, capsys, *args), f"--rel-error {value}: needs --max-abs-error")
    code, out, err = run_cli(monkeypatch, capsys, *args[:-1], "0.5")
    assert code == 0 and "PASSED" in out, err
