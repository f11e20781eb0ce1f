"""The wave model as a backend: predicted, labelled as such, and equal to the model's own numbers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.backends.model import NODE_COST_US, conv_shapes_from_model
from deployopt.coupling import analyze
from deployopt.errors import DeployoptError
from deployopt.layers import ConvShape, conv_model
from deployopt.targets import get_target
from deployopt.waves import predict


def test_registered_and_predicting_only() -> None:
    backend = get_backend("model")
    assert backend.name == "model" and backend.measured is False and backend.can_limit_sms is True
    assert backend.availability()[0] is True


def test_one_conv_model_is_exactly_the_wave_model(tmp_path: Path) -> None:
    shape = ConvShape(n=8, c=128, h=28, w=28, k=400)
    path = tmp_path / "conv.onnx"
    onnx.save(conv_model(shape), str(path))
    target = get_target("h200", sms=8)
    with get_backend("model").open(MeasureOptions(dtype="fp16", sms=8, extra={"target": "h200"})) as session:
        t = session.measure(path)
        per_layer = session.measure_convs([shape, shape.with_channels(k=384)])
    want = predict(shape, target, "fp16").predicted_us
    assert t.samples_us == [pytest.approx(want)]  # a single Conv node: no per-node extra
    assert t.measured is False and t.backend == "model"
    assert t.predictor is not None and "wave model" in t.predictor and "8 SMs" in t.predictor
    assert "not measured" in t.describe()
    assert per_layer[0].median_us == pytest.approx(want)
    assert per_layer[1].median_us == pytest.approx(
        predict(shape.with_channels(k=384), target, "fp16").predicted_us
    )


def test_sms_option_changes_the_target_sm_count() -> None:
    shape = ConvShape(n=8, c=128, h=28, w=28, k=400)
    opts = MeasureOptions(dtype="fp16", sms=16, extra={"target": get_target("h200")})
    with get_backend("model").open(opts) as session:
        assert session.target.sms == 16
        got = session.measure_convs([shape])[0].median_us
    assert got == pytest.approx(predict(shape, get_target("h200", sms=16), "fp16").predicted_us)


def test_whole_model_is_the_sum_over_convs_plus_node_costs(
    zoo_model_path: Callable[[str], Path], zoo_model: Callable[[str], onnx.ModelProto]
) -> None:
    model = zoo_model("vgg16_pruned_b4")
    shapes = conv_shapes_from_model(model)
    # The shapes read from the graph are the coupling analysis' shapes.
    assert shapes == {c.name: c.shape for c in analyze(model).convs}
    target = get_target("orin-nano-8gb")
    with get_backend("model").open(MeasureOptions(dtype="fp16", extra={"target": target})) as session:
        t = session.measure(zoo_model_path("vgg16_pruned_b4"))
    others = len(model.graph.node) - len(shapes)
    want = sum(predict(s, target, "fp16").predicted_us for s in shapes.values()) + NODE_COST_US * others
    assert t.median_us == pytest.approx(want)


def test_needs_a_target() -> None:
    with pytest.raises(DeployoptError, match="needs a target"):
        get_backend("model").open(MeasureOptions(dtype="fp16"))


@pytest.mark.parametrize(
    "attrs",
    [
        {"pads": [0, 0, 1, 1], "strides": [2, 2]},  # what a TF-style SAME export writes at stride 2
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
        {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
        {"pads": [0, 1, 2, 0], "strides": [1, 1]},
        {"auto_pad": "VALID", "strides": [2, 1]},
        {"pads": [1, 1, 1, 1], "strides": [1, 1], "dilations": [2, 2]},
    ],
)
def test_conv_shapes_are_the_convs_own_with_asymmetric_pads(attrs: dict) -> None:
    """An odd total pad was halved down ((0 + 1) // 2 = 0): a TF-style SAME conv at stride 2 on
    14×14 (7×7 out, gemm_m 49) was priced as 6×6 (36), and the wave-model backend refused auto_pad.
    The analysis and the backend now give the output size onnxruntime computes."""
    from onnx import TensorProto, helper, numpy_helper
    from ort_session import session

    w = numpy_helper.from_array(np.ones((16, 8, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="c", **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 14, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "k", "p", "q"])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    real = session(model).run(None, {"x": np.zeros((2, 8, 14, 13), np.float32)})[0].shape
    for shape in (conv_shapes_from_model(model)["c"], analyze(model).convs[0].shape):
        assert (shape.n, shape.k, shape.p, shape.q) == real, (attrs, shape)
        assert shape.gemm == (real[0] * real[2] * real[3], 16, 8 * 9)
