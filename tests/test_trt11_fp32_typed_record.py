"""TensorRT >= 11 builds a model in its own types whatever --dtype says: a --dtype fp32 run of a
model typed mixed or fp16 records the model's typing (it recorded fp32), on the tensorrt API
backend, trtexec and the board's runner alike; 10.x (weakly typed) and fp32 models are unchanged."""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from test_precision_mixed import fp32_convs_fp16_classifier
from test_tensorrt_fake_api import V10, V11, FakeGpu, install, opts
from test_trtexec_backend import fake, fake11  # noqa: F401 (fixtures)

from deployopt.backends.base import MeasureOptions
from deployopt.backends.tensorrt import build_and_time
from deployopt.backends.trtexec import TrtexecBackend
from deployopt.precision import to_fp16

#: the remote test plays the board on this machine, as tests/test_tensorrt_remote.py's (one worker)
pytestmark = pytest.mark.xdist_group("board")


@pytest.fixture
def typed_models(zoo_model_path: Callable[[str], Path], tmp_path: Path) -> dict[str, Path]:
    """An fp32 model, the same typed fp16 (deployopt.precision) and fp32 convs before an fp16 Gemm."""
    plain = zoo_model_path("mobilenet_like")
    paths = {"fp32": plain, "fp16": tmp_path / "m16.onnx", "mixed fp32/fp16": tmp_path / "mixed.onnx"}
    onnx.save(to_fp16(onnx.load(plain)), paths["fp16"])
    onnx.save(fp32_convs_fp16_classifier(), paths["mixed fp32/fp16"])
    return paths


@pytest.mark.parametrize("version", [V10, V11])
def test_tensorrt_fp32_of_a_typed_model_records_its_typing_on_trt11(
    version: str, monkeypatch: pytest.MonkeyPatch, typed_models: dict[str, Path], tmp_path: Path
) -> None:
    _: tuple[types.ModuleType, FakeGpu] = install(monkeypatch, version, "bindings")
    for typing, model in typed_models.items():
        timing = build_and_time(str(model), opts(tmp_path, dtype="fp32"), per_layer=False)["timing"]
        want = typing if version == V11 else "fp32"
        assert timing["environment"]["dtype"] == want, (version, typing)
        if want != "fp32":
            assert timing["timed"].startswith(f"one forward pass ({want} as typed in the model, asked fp32")


def test_trtexec_fp32_of_a_typed_model_records_its_typing_on_trt11(
    fake11: dict[str, Path],  # noqa: F811
    typed_models: dict[str, Path],
) -> None:
    options = MeasureOptions(dtype="fp32", runs=300, workdir=fake11["workdir"])
    with TrtexecBackend().open(options) as session:
        for typing, model in typed_models.items():
            timing = session.measure(model)
            assert timing.environment["dtype"] == typing
            if typing != "fp32":
                assert timing.timed.startswith(f"one query ({typing} as typed in the model, asked fp32")


def test_remote_runner_fp32_of_a_typed_model_records_its_typing_on_trt11(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, typed_models: dict[str, Path]
) -> None:
    """The board's runner records the --dtype it was given; the host says what the build ran in."""
    from test_tensorrt_remote import HOST, play_the_board

    from deployopt.backends.base import get_backend

    play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_TRT", V11)
    options = MeasureOptions(dtype="fp32", runs=3, warmup=1, extra={"remote": HOST})
    with get_backend("tensorrt").open(options) as session:
        for typing, model in typed_models.items():
            timing = session.measure(model)
            assert timing.environment["dtype"] == typing
            if typing != "fp32":
                assert f"({typing} as typed in the model, asked fp32" in timing.timed
