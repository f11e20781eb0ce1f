"""An Analysis reused on another model checks the small float settings too (Clip bounds, Resize
scales, Pad values), not only integer constants: a ReLU6 model's analysis applied to one that
clips at 8 (or upsamples 4x where it was 2x) is another graph, one PlanError line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from test_analysis_reuse import _copy, _error, assert_same_edit, retrain

from deployopt.coupling import analyze

F = onnx.TensorProto.FLOAT


def settings_model() -> onnx.ModelProto:
    """conv -> Clip(0, 6) -> Pad(constant 0.5) -> Resize(2x) -> conv, the settings as initializers
    and the Clip max as a Constant node."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((4, 8, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
        numpy_helper.from_array(np.array(0.5, np.float32), "pad_value"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
    ]
    nodes = [
        helper.make_node(
            "Constant", [], ["hi"], name="hi", value=numpy_helper.from_array(np.array(6.0, np.float32))
        ),
        helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c", "lo", "hi"], ["r"], name="relu6"),
        helper.make_node("Pad", ["r", "pads", "pad_value"], ["p"], name="pad"),
        helper.make_node("Resize", ["p", "", "scales"], ["u"], name="up", mode="nearest"),
        helper.make_node("Conv", ["u", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", F, [1, 4, 12, 12])],
        inits,
    )
    return onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    )


def _set(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.ModelProto:
    out = _copy(model)
    for t in out.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(value, name))
    for n in out.graph.node:
        if n.op_type == "Constant" and n.output[0] == name:
            n.attribute[0].t.CopyFrom(numpy_helper.from_array(value))
    return out


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("hi", np.array(8.0, np.float32)),  # a Constant node's value
        ("lo", np.array(-1.0, np.float32)),
        ("pad_value", np.array(0.0, np.float32)),
        ("scales", np.array([1, 1, 2, 2.5], np.float32)),
    ],
)
def test_a_float_setting_must_hold_the_same_values(name: str, value: np.ndarray) -> None:
    model = settings_model()
    analysis = analyze(model)
    plan = {"conv1": 9}
    assert f"constant {name!r} holds other values" in _error(_set(model, name, value), analysis, plan)


def test_another_checkpoint_with_the_same_settings_is_still_edited() -> None:
    model = settings_model()
    analysis = analyze(model)
    retrained = _copy(model)
    retrain(retrained)  # weights rescaled, settings kept
    assert_same_edit(retrained, {"conv1": 9}, analysis, analyze(retrained))
