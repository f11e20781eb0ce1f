"""FP8 (and FP4) Q/DQ models, ModelOpt's --quantize_mode fp8 exports: TensorRT builds them as FP8,
never INT8, and deployopt has no fp8 dtype, so they are refused in one line wherever they would be
priced, timed or recorded; they were labelled int8 ("int8 from the model's Q/DQ nodes")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_precision_mixed import assert_refused_where_priced
from test_tensorrt_fake_api import V10, install, opts

from deployopt.backends.tensorrt import build_and_time
from deployopt.errors import ModelError
from deployopt.model import has_qdq
from deployopt.precision import typed_precision

FP8 = r"quantizes (activations|weights) to float8e4m3fn: FP8 Q/DQ, which TensorRT builds as such, not INT8"


def fp8_conv(elem: int = TensorProto.FLOAT8E4M3FN) -> onnx.ModelProto:
    """x -> Q/DQ (fp8) -> Conv with its weight through Q/DQ (fp8) -> y, as ModelOpt writes FP8."""
    rng = np.random.default_rng(0)
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    zp = helper.make_tensor("zp", elem, [], [0.0])
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"], name="x_q"),
        helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"], name="x_dq"),
        helper.make_node("QuantizeLinear", ["w", "s", "zp"], ["wq"], name="w_q"),
        helper.make_node("DequantizeLinear", ["wq", "s", "zp"], ["wd"], name="w_dq"),
        helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "fp8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [scale, zp, w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_an_fp8_qdq_model_is_not_labelled_int8() -> None:
    model = fp8_conv()
    with pytest.raises(ModelError, match=r"^QuantizeLinear 'x_q' " + FP8):
        has_qdq(model)
    with pytest.raises(ModelError, match=FP8):
        typed_precision(model)
    with pytest.raises(ModelError, match=r"to float8e5m2: FP8 Q/DQ"):
        has_qdq(fp8_conv(TensorProto.FLOAT8E5M2))


def test_an_fp8_qdq_model_is_refused_in_one_line_by_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "fp8.onnx"
    onnx.save(fp8_conv(), path)
    assert_refused_where_priced(path, "FP8 Q/DQ", monkeypatch, capsys)


def test_tensorrt_refuses_an_fp8_qdq_model_before_building_it_as_int8(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    install(monkeypatch, V10, "bindings")
    path = tmp_path / "fp8.onnx"
    onnx.save(fp8_conv(), path)
    with pytest.raises(ModelError, match=FP8):
        build_and_time(str(path), opts(tmp_path, dtype="int8"), per_layer=False)
    assert not (tmp_path / "engines").exists() or not any((tmp_path / "engines").iterdir())
