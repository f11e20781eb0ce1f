"""INT8 calibration data made here for a board (--remote) is checked against the model's input
types as the local tensorrt backend checks it: normalised images for a uint8 input are one line
before anything goes to the board (they were sent, and refused only by the board's runner)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import run_cli
from onnx import TensorProto
from test_calibration_inputs import CIFAR, _cast_model
from test_tensorrt_remote import REMOTE, play_the_board, version_check

#: the board these tests play is this machine, as tests/test_tensorrt_remote.py's (one xdist worker)
pytestmark = pytest.mark.xdist_group("board")


def test_remote_int8_calibration_refuses_normalised_images_for_a_uint8_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log, _ = play_the_board(tmp_path, monkeypatch)
    model = _cast_model(tmp_path / "u8.onnx", TensorProto.UINT8, [1, 3, 32, 32])
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "int8", "--runs", "5",
        "--calibration-data", str(CIFAR),
    )  # fmt: skip
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "model input 'x' takes uint8, the data holds other values" in err and str(CIFAR) in err
    assert log.read_text().splitlines() == [version_check()]  # nothing sent
