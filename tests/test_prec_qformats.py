"""deployopt.precision on models quantized without Q/DQ nodes, and on float64 compute.

- `deployopt fp16` of a quantize_dynamic model (DynamicQuantizeLinear + ConvInteger) typed its last
  ConvInteger's int32 accumulator Cast FLOAT16: 194487 became inf (onnxruntime drops the
  int32 -> fp16 -> fp32 cast pair and hid it; the ONNX reference evaluator, which computes each op as
  typed, showed it). Such a model is now refused in one line, and a Cast to float from a wide
  integer keeps fp32 in any model (a class index past 2048 read back rounded).
- typed_precision called a quantize_dynamic model "fp32": bench recorded its int8 convs as fp32,
  compare took it for like for like against the fp32 model, and `bench -b ort --dtype int8` refused
  it as "an fp32 model ... quantize it first".
- `deployopt fp16` of an fp32 model with a conv computed in float64 said "fp16 inside" while no conv
  took fp16 (the fp32 conv feeding the Cast to double was kept fp32, the float64 one stayed so).
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt.errors import ModelError
from deployopt.precision import to_fp16, typed_precision


def _model(nodes: list, inputs: list, outputs: list, inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv_net(channels: int = 256) -> onnx.ModelProto:
    """Conv 3 -> `channels` (3x3) -> Relu -> Conv 1x1 -> 10, fp32: the repro's network."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((channels, 3, 3, 3)) * 0.2).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(np.zeros(channels, np.float32), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((10, channels, 1, 1)) * 0.05).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10, 16, 16])],
        [w1, b1, w2],
    )


def _dynamic(tmp_path: Path, op: str = "Conv") -> Path:
    """quantize_dynamic of `_conv_net` (op "Conv": ConvInteger) or of a MatMul net (MatMulInteger)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dest = tmp_path / f"f32_{op}.onnx", tmp_path / f"dyn_{op}.onnx"
    if op == "Conv":
        model = _conv_net()
    else:
        w = numpy_helper.from_array(
            np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32), "w"
        )
        model = _model(
            [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
            [w],
        )
    onnx.save(model, src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(str(src), str(dest), weight_type=QuantType.QUInt8, op_types_to_quantize=[op])
    return dest


# ---- 1: a quantize_dynamic / QOperator model is refused by the fp16 conversion, in one line


@pytest.mark.parametrize(("op", "integer_op"), [("Conv", "ConvInteger"), ("MatMul", "MatMulInteger")])
def test_fp16_refuses_a_dynamic_quant_model_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    op: str,
    integer_op: str,
) -> None:
    dyn = _dynamic(tmp_path, op)
    ops = {n.op_type for n in onnx.load(dyn).graph.node}
    assert {integer_op, "DynamicQuantizeLinear"} <= ops and not ops & {"QuantizeLinear", "DequantizeLinear"}
    named = "/".join(sorted({integer_op, "DynamicQuantizeLinear"}))
    refusal = (
        f"fp16 conversion: the model is int8 without Q/DQ nodes ({named}: onnxruntime's dynamic or "
        "QOperator quantization)"
    )
    with pytest.raises(ModelError, match=f"^{re.escape(refusal)}") as info:
        to_fp16(onnx.load(dyn))
    assert "\n" not in str(info.value) and "convert the fp32 model it was quantized from" in str(info.value)
    out = tmp_path / "dyn_fp16.onnx"
    code, stdout, err = run_cli(monkeypatch, capsys, "fp16", str(dyn), "-o", str(out))
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert err.startswith("error: fp16 conversion: the model is int8 without Q/DQ nodes (")
    assert not out.exists()  # before: written, its accumulator Cast to FLOAT16 (inf past 65504)


def test_a_qoperator_model_is_refused_naming_its_integer_convs(tmp_path: Path) -> None:
    """A QOperator model (QLinearConv between QuantizeLinear/DequantizeLinear) was refused as a Q/DQ
    model, "time it with --dtype int8", which names neither its format nor what to convert."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(1)
            self.data = iter(
                [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(2)]
            )

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.data, None)

    src, dest = tmp_path / "f32.onnx", tmp_path / "qop.onnx"
    net = _conv_net(8)
    net.ir_version = 8  # onnxruntime 1.23 (Python 3.10's) quantizes up to IR 11; onnx 1.23 writes 14
    onnx.save(net, src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_static(str(src), str(dest), Reader(), quant_format=QuantFormat.QOperator)
    model = onnx.load(dest)
    assert "QLinearConv" in {n.op_type for n in model.graph.node}
    with pytest.raises(
        ModelError, match=r"^fp16 conversion: the model is int8 without Q/DQ nodes \(.*QLinearConv"
    ):
        to_fp16(model)


def test_integer_compute_covers_the_qoperator_convs_the_analysis_refuses() -> None:
    """The analysis' QOperator refusal and this module's int8 label read the same convs."""
    from deployopt.coupling import QOPERATOR_CONVS
    from deployopt.precision import INTEGER_COMPUTE_OPS

    assert QOPERATOR_CONVS <= INTEGER_COMPUTE_OPS


def _index_model(classes: int) -> onnx.ModelProto:
    """scores = x @ w (fp32, typed fp16 by the conversion), and the ArgMax class index of x cast to
    float as a second output, as a detector's class ids are."""
    w = numpy_helper.from_array(np.eye(classes, 8, dtype=np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["scores"], name="fc"),
        helper.make_node("ArgMax", ["x"], ["idx"], name="argmax", axis=1, keepdims=0),
        helper.make_node("Cast", ["idx"], ["cls"], name="to_float", to=TensorProto.FLOAT),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, classes])],
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 8]),
            helper.make_tensor_value_info("cls", TensorProto.FLOAT, [1]),
        ],
        [w],
    )


def test_a_cast_from_a_wide_integer_keeps_fp32() -> None:
    """Cast(int64 -> FLOAT) was typed FLOAT16: class 4097 read back 4096 (and an int32 accumulator
    past 65504, inf). It keeps FLOAT now; the MatMul beside it still takes fp16."""
    from onnx.reference import ReferenceEvaluator

    classes = 5000
    fp16 = to_fp16(_index_model(classes))
    cast = next(n for n in fp16.graph.node if n.op_type == "Cast" and n.input[0] == "idx")
    assert next(a.i for a in cast.attribute if a.name == "to") == TensorProto.FLOAT
    x = np.zeros((1, classes), np.float32)
    x[0, 4097] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores, cls = ReferenceEvaluator(fp16).run(None, {"x": x})
    assert cls.tolist() == [4097.0]  # fp16 holds 4096 and 4098, not 4097
    inits = {t.name: t.data_type for t in fp16.graph.initializer}
    assert TensorProto.FLOAT16 in inits.values()  # the MatMul's weight: the rest is still converted
    assert scores.shape == (1, 8)


def test_a_cast_from_int8_is_still_typed_fp16() -> None:
    """uint8/int8 fit fp16 exactly: a Cast from them keeps being typed FLOAT16 (pixels read as uint8)."""
    w = numpy_helper.from_array(np.ones((4, 2), np.float32), "w")
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["xf", "w"], ["y"]),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [w],
    )
    cast = next(n for n in to_fp16(model).graph.node if n.op_type == "Cast" and n.input[0] == "x")
    assert next(a.i for a in cast.attribute if a.name == "to") == TensorProto.FLOAT16


# ---- 2: a quantize_dynamic model is int8, for ort's --dtype check and for compare


def test_a_dynamic_quant_model_is_typed_int8(tmp_path: Path) -> None:
    assert typed_precision(onnx.load(_dynamic(tmp_path, "Conv"))) == "int8"
    assert typed_precision(onnx.load(_dynamic(tmp_path, "MatMul"))) == "int8"
    assert typed_precision(_conv_net(8)) == "fp32"


def test_ort_benches_a_dynamic_quant_model_as_int8_and_compare_says_not_like_for_like(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    dyn = _dynamic(tmp_path, "Conv")
    f32 = tmp_path / "f32_Conv.onnx"

    def cli(*args: str) -> tuple[int, str, str]:
        return run_cli(monkeypatch, capsys, *args)

    bench = ["--backend", "ort", "--runs", "8", "--warmup", "1"]
    code, _, err = cli("bench", str(f32), *bench, "-o", str(tmp_path / "f32.json"))
    assert code == 0, err
    # its default is its own precision, and --dtype int8 names it (it was refused as an fp32 model)
    for extra, record in (([], "dyn.json"), (["--dtype", "int8"], "dyn_int8.json")):
        code, _, err = cli("bench", str(dyn), *bench, *extra, "-o", str(tmp_path / record))
        assert code == 0, err
        assert json.loads((tmp_path / record).read_text())["environment"]["dtype"] == "int8"
    code, _, err = cli("bench", str(dyn), *bench, "--dtype", "fp32")
    assert code == 2 and err.startswith("error: dyn_Conv.onnx runs in int8 ("), err
    code, _, err = cli("compare", str(tmp_path / "f32.json"), str(tmp_path / "dyn.json"))
    assert "not like for like (dtype fp32 → int8" in " ".join(err.split()), err


# ---- 3: a conv computed in float64 is refused, and a conversion typing no conv fp16 is too


def _f64_conv_model() -> onnx.ModelProto:
    """The repro: an fp32 conv, a Cast to double, a float64 conv, a Cast back to float."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float64), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1] * 4, name="conv_f32"),
        helper.make_node("Cast", ["a"], ["a64"], to=TensorProto.DOUBLE),
        helper.make_node("Conv", ["a64", "w2"], ["b64"], pads=[1] * 4, name="conv_f64"),
        helper.make_node("Cast", ["b64"], ["y"], to=TensorProto.FLOAT),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        inits,
    )


def test_fp16_refuses_a_conv_computed_in_float64(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(
        ModelError,
        match=r"^fp16 conversion: Conv 'conv_f64' computes in float64 \(double; 1 of the model's 2 "
        r"convs/matmuls do\): the conversion types fp32 only",
    ):
        to_fp16(_f64_conv_model())
    src, out = tmp_path / "m.onnx", tmp_path / "m16.onnx"
    onnx.save(_f64_conv_model(), src)
    code, stdout, err = run_cli(monkeypatch, capsys, "fp16", str(src), "-o", str(out))
    assert code == 2 and stdout == "" and err.count("\n") == 1 and "float64" in err, err
    assert not out.exists()  # before: written, "fp16 inside", no conv in fp16


def test_fp16_refuses_a_model_whose_convs_all_stay_fp32() -> None:
    """A conv read only through a Cast to double is kept fp32 (as one read only by shape
    arithmetic): with no other conv, nothing computed in fp16 and the model was said to be."""
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="conv"),
        helper.make_node("Cast", ["a"], ["a64"], to=TensorProto.DOUBLE),
        helper.make_node("Relu", ["a64"], ["r64"]),
        helper.make_node("Cast", ["r64"], ["y"], to=TensorProto.FLOAT),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [w],
    )
    with pytest.raises(
        ModelError, match=r"^fp16 conversion: none of the model's 1 fp32 convs/matmuls can take fp16"
    ):
        to_fp16(model)


def test_a_double_step_beside_fp16_convs_still_converts() -> None:
    """Float64 outside the convs (a post-processing step) is no reason to refuse: the convs take fp16."""
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="conv"),
        helper.make_node("Relu", ["a"], ["y"]),
        helper.make_node("Cast", ["a"], ["a64"], to=TensorProto.DOUBLE),
        helper.make_node("ReduceSum", ["a64"], ["s64"], keepdims=0),
        helper.make_node("Cast", ["s64"], ["s"], to=TensorProto.FLOAT),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
        ],
        [w],
    )
    fp16 = to_fp16(model)
    types: dict[str, Any] = {t.name: t.data_type for t in fp16.graph.initializer}
    conv = next(n for n in fp16.graph.node if n.op_type == "Conv")
    assert types[conv.input[1]] == TensorProto.FLOAT16
