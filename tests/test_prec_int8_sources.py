"""What makes an int8 model int8, said where a record or a refusal names it: a quantize_dynamic
model (ConvInteger + DynamicQuantizeLinear) is typed int8 (precision.typed_precision), but has no
Q/DQ node. onnxruntime's record said "int8 from the model's Q/DQ nodes" of it, and TensorRT 11,
which builds INT8 only from Q/DQ nodes, took its int8 label for Q/DQ and built it unrefused."""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest
from test_trtexec_backend import fake, fake11  # noqa: F401  (fixtures)

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.backends.trtexec import TrtexecBackend
from deployopt.errors import DeployoptError
from deployopt.layers import ConvShape, conv_model

NAMED = "ConvInteger/DynamicQuantizeLinear nodes"


def _dynamic(tmp_path: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dest = tmp_path / "f32.onnx", tmp_path / "dyn.onnx"
    onnx.save(conv_model(ConvShape(n=1, c=8, h=8, w=8, k=8)), src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(str(src), str(dest), weight_type=QuantType.QUInt8, op_types_to_quantize=["Conv"])
    return dest


def test_ort_says_what_makes_a_dynamic_quant_model_int8(tmp_path: Path) -> None:
    dyn = _dynamic(tmp_path)
    ort = get_backend("ort")
    with ort.open(MeasureOptions(dtype="int8", runs=3, warmup=1)) as session:
        timing = session.measure(dyn)
    assert f"int8 from the model's {NAMED}" in timing.timed and "Q/DQ" not in timing.timed
    refused = f"dyn.onnx runs in int8 ({NAMED}): backend 'ort' runs a model as it is typed"
    with (
        ort.open(MeasureOptions(dtype="fp32", runs=3, warmup=1)) as session,
        pytest.raises(DeployoptError) as exc,
    ):
        session.measure(dyn)
    assert str(exc.value).startswith(refused)


def test_trt11_int8_refuses_a_dynamic_quant_model_as_one_without_qdq(
    fake11: dict[str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    dyn = _dynamic(tmp_path)
    opts = MeasureOptions(dtype="int8", runs=300, workdir=fake11["workdir"])
    with TrtexecBackend().open(opts) as session, pytest.raises(DeployoptError) as exc:
        session.measure(dyn)
    refused = "--dtype int8: TensorRT 11.4.1 builds INT8 only from Q/DQ nodes in the model"
    assert str(exc.value).startswith(refused)
    assert not fake11["FAKE_ARGS"].exists()  # trtexec never ran a build
