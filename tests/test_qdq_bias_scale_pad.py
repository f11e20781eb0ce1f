"""A padded quantized conv keeps onnxruntime's int8 fusion: its bias's padded scale is input × weight.

onnxruntime fuses DQ → Conv → Q into an int8 QLinearConv only where the int32 bias's scale is the
input's scale × the weight's. The pad gave the new channels bias scale 1.0 (weight scale 1.0), so
the padded conv ran in float: an exact pad of a quantize_static MobileNetV2 lost 9 of its 37
QLinearConvs (single-thread ort time 5.5 → 10.6 ms) and rounded otherwise than its original.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from deployopt.coupling import analyze
from deployopt.surgery import apply_plan

SHAPE = (1, 8, 16, 16)


def _qdq_net(folder: Path, depthwise: bool) -> onnx.ModelProto:
    """3×3 conv 8 → 16 (bias) → Relu → [depthwise 3×3 (bias) → Relu] → 1×1 conv 16 → 4, quantized
    per channel by quantize_static, int32 biases."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((16, 1, 3, 3)).astype(np.float32), "wd"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "bd"),
        numpy_helper.from_array(rng.standard_normal((4, 16, 1, 1)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="expand", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
    ]
    last = "r"
    if depthwise:
        nodes += [
            helper.make_node("Conv", ["r", "wd", "bd"], ["d"], name="dw", group=16, pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["d"], ["dr"], name="relu_dw"),
        ]
        last = "dr"
    nodes.append(helper.make_node("Conv", [last, "w2"], ["y"], name="project"))
    graph = helper.make_graph(
        nodes,
        "bias_scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [i for i in inits if depthwise or i.name not in ("wd", "bd")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    src, dst = folder / f"float{int(depthwise)}.onnx", folder / f"qdq{int(depthwise)}.onnx"
    onnx.save(model, src)
    return quantize_per_channel(src, dst, np.random.default_rng(1))


def quantize_per_channel(src: Path, dst: Path, rng: np.random.Generator) -> onnx.ModelProto:
    """`src` (input x of SHAPE) quantized per channel by quantize_static, int8, Q/DQ form, on 2
    random batches."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    batches = iter([{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(2)])

    class Reader(quantization.CalibrationDataReader):
        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(batches, None)

    quantization.quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=True,
        activation_type=quantization.QuantType.QInt8,
        weight_type=quantization.QuantType.QInt8,
    )
    return onnx.load(dst)


def _fused_convs(model: onnx.ModelProto, folder: Path) -> int:
    """How many QLinearConv onnxruntime's full optimization makes of the model."""
    opts = ort.SessionOptions()
    opts.optimized_model_filepath = str(folder / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sum(n.op_type == "QLinearConv" for n in onnx.load(folder / "optimized.onnx").graph.node)


def _scale(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


@pytest.mark.parametrize("depthwise", [False, True])
def test_padded_conv_stays_fused_and_exact(tmp_path: Path, depthwise: bool) -> None:
    qdq = _qdq_net(tmp_path, depthwise)
    analysis = analyze(qdq)
    assert [g.width for g in analysis.free_groups()] == [16]
    padded = apply_plan(qdq, {g.id: 19 for g in analysis.free_groups()}, analysis)
    assert _fused_convs(padded, tmp_path) == _fused_convs(qdq, tmp_path) >= 2
    x_scale = _scale(padded, "x_scale")
    np.testing.assert_allclose(_scale(padded, "b1_quantized_scale")[16:], np.float32(x_scale) * 1.0)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal(SHAPE).astype(np.float32)}
    run = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        for m in (qdq, padded)
    ]
    np.testing.assert_array_equal(run[0], run[1])
