"""Option values that were a traceback or did nothing: a --stride past the input (2^63 and more:
onnx's make_attribute overflowed), an empty --measure / --backend (an unset shell variable), and
optimize's empty --dtype (a blank where the dtype goes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import run_cli

STAIRCASE = ["staircase", "-t", "nano", "--input", "1x16x8x6", "--out-channels", "16,32"]


def _one_error(code: int, err: str, message: str) -> None:
    assert code == 2 and err == f"error: {message}\n", (code, err)


@pytest.mark.parametrize(
    "extra",
    [[], ["--measure", "ort", "--runs", "3"]],
    ids=["predicted", "measured"],
)
@pytest.mark.parametrize("stride", ["9", "9223372036854775808", "99999999999999999999"])
def test_a_stride_past_the_input_is_one_line(monkeypatch, capsys, extra: list[str], stride: str) -> None:
    """Predicted, 1e20 was accepted (and printed as the conv's stride); measured, 2^63 was a
    ValueError traceback from onnx.helper.make_attribute."""
    code, _, err = run_cli(monkeypatch, capsys, *STAIRCASE, "--stride", stride, *extra)
    _one_error(
        code,
        err,
        f"--stride {stride}: more than the input's height and width (8x6): past them the output is one "
        "pixel whatever the stride; at most 8",
    )


def test_a_stride_up_to_the_input_still_runs(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, *STAIRCASE, "--stride", "8", "--json")
    assert code == 0, err
    assert '"out_channels": 32' in out


@pytest.mark.parametrize("command", ["staircase", "calibrate"])
def test_an_empty_measure_is_one_line(monkeypatch, capsys, command: str) -> None:
    """`staircase --measure "$B"` with B unset printed the prediction alone, exit 0."""
    args = STAIRCASE if command == "staircase" else ["calibrate", "-t", "nano"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--measure", "")
    _one_error(code, err, "--measure '': no backend named; choose one of: ort, torch, tensorrt, trtexec")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-b", "model", "--dtype", ""], "--dtype '': choose one of fp32, fp16, int8"),
        (["-b", "model", "--dtype", "fp64"], "--dtype 'fp64': choose one of fp32, fp16, int8"),
        (
            ["-b", ""],
            "--backend '': no backend named; choose one of: auto, tensorrt, trtexec, torch, ort, model",
        ),
    ],
    ids=["empty-dtype", "unknown-dtype", "empty-backend"],
)
def test_optimize_names_the_option_given_empty(
    monkeypatch, capsys, tmp_path: Path, zoo_model_path, args: list[str], message: str
) -> None:
    """--dtype '' said "backend 'model' cannot run  (it runs fp32, fp16, int8)"."""
    out = tmp_path / "run"
    model = str(zoo_model_path("resnet_projection"))
    code, _, err = run_cli(monkeypatch, capsys, "optimize", model, "-t", "nano", *args, "-o", str(out))
    _one_error(code, err, message)
    assert not out.exists()
