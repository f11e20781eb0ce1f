"""bench's and profile's empty --backend (an unset shell variable) timed ort without a word, where
optimize's was an error; a --cudnn-engines past a C int became negative in torch (2^31) or a
ValueError in its worker (2^63)."""

from __future__ import annotations

import pytest
from cli_runner import run_cli

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.errors import DeployoptError


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_an_empty_backend_is_one_line(monkeypatch, capsys, zoo_model_path, command: str) -> None:
    model = str(zoo_model_path("resnet_projection"))
    code, out, err = run_cli(monkeypatch, capsys, command, model, "-b", "", "--runs", "3")
    assert (code, out) == (2, ""), err
    choices = "ort, torch, tensorrt, trtexec"  # bench and profile refuse model (predicted)
    assert err == f"error: --backend '': no backend named; choose one of: {choices}\n"


@pytest.mark.parametrize("engines", [2**31, 2**63])
def test_cudnn_engines_past_a_c_int_is_one_line(engines: int) -> None:
    for module in ("torch", "torchvision", "onnx2torch"):  # the torch backend checks its options
        pytest.importorskip(module)
    with pytest.raises(DeployoptError, match=rf"^--cudnn-engines {engines}: at most 2147483647"):
        get_backend("torch").check_options(MeasureOptions(cudnn_engines=engines))
