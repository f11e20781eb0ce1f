"""deployopt.backends.onnx2torch_opset: newer-opset ops rewritten into the opset-17 ops onnx2torch
reads. Every rewrite must compute what the original computes (onnxruntime runs both), and
onnx2torch must then convert it (the torch module computes it too)."""

from __future__ import annotations

import numpy as np
import onnx
import ort_session
import pytest
from onnx import TensorProto, helper, numpy_helper

from deployopt.backends.onnx2torch_opset import TARGET, to_onnx2torch_opset
from deployopt.errors import BackendFailed
from deployopt.model import default_opset

X = (2, 6, 8, 8)


def _model(node: onnx.NodeProto, out_shape: list[int], opset: int = 20, inits: tuple = ()) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, out_shape) for o in node.output],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    sess = ort_session.session(model)
    return sess.run(None, {"x": x})


CASES = {
    "ReduceMean axes input": (
        helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean", keepdims=1),
        [2, 6, 1, 1],
        (("axes", np.array([2, 3], np.int64)),),
    ),
    "ReduceMax axes input, no keepdims": (
        helper.make_node("ReduceMax", ["x", "axes"], ["y"], name="max", keepdims=0),
        [2, 8, 8],
        (("axes", np.array([1], np.int64)),),
    ),
    "ReduceMean no axes: every axis": (
        helper.make_node("ReduceMean", ["x"], ["y"], name="all"),
        [1, 1, 1, 1],
        (),
    ),
    "ReduceMax no axes, noop_with_empty_axes": (
        helper.make_node("ReduceMax", ["x"], ["y"], name="noop", noop_with_empty_axes=1),
        list(X),
        (),
    ),
    "Split num_outputs": (
        helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, num_outputs=2),
        [2, 3, 8, 8],
        (),
    ),
    "Split sizes input": (
        helper.make_node("Split", ["x", "sizes"], ["a", "b"], name="split", axis=1),
        [2, 3, 8, 8],
        (("sizes", np.array([3, 3], np.int64)),),
    ),
    "Resize nearest": (
        helper.make_node("Resize", ["x", "", "scales"], ["y"], name="up", mode="nearest"),
        [2, 6, 16, 16],
        (("scales", np.array([1, 1, 2, 2], np.float32)),),
    ),
    "Pad constant": (
        helper.make_node("Pad", ["x", "pads"], ["y"], name="pad"),
        [2, 6, 10, 10],
        (("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),),
    ),
    "AveragePool": (
        helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        [2, 6, 4, 4],
        (),
    ),
    "Gelu": (helper.make_node("Gelu", ["x"], ["y"], name="gelu"), list(X), ()),
    "Gelu tanh": (helper.make_node("Gelu", ["x"], ["y"], name="gelu", approximate="tanh"), list(X), ()),
    "Mish": (helper.make_node("Mish", ["x"], ["y"], name="mish"), list(X), ()),
    "Reshape allowzero": (
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="flat", allowzero=1),
        [2, 384],
        (("shape", np.array([2, 384], np.int64)),),
    ),
}


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=ort_session.NOOP_REDUCE_BROKEN) if "noop" in c else c for c in sorted(CASES)],
)
def test_each_rewrite_computes_the_same_and_onnx2torch_converts_it(case: str) -> None:
    node, out_shape, inits = CASES[case]
    model = _model(node, out_shape, inits=inits)
    x = np.random.default_rng(0).standard_normal(X).astype(np.float32)
    ref = _run(model, x)
    new = to_onnx2torch_opset(model, "m.onnx")
    assert default_opset(new) == TARGET and default_opset(model) == 20  # a copy: the model given is unchanged
    onnx.checker.check_model(new, full_check=True)
    for a, b in zip(_run(new, x), ref):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-6)
    # no constant left behind that nothing reads (a Reduce's axes went into its attribute)
    read = {i for n in new.graph.node for i in n.input}
    assert all(t.name in read for t in new.graph.initializer)
    torch = pytest.importorskip("torch")
    onnx2torch = pytest.importorskip("onnx2torch")
    with torch.no_grad():
        out = onnx2torch.convert(new).eval()(torch.from_numpy(x))
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    for a, b in zip(outs, ref):
        np.testing.assert_allclose(a.numpy(), b, rtol=0, atol=1e-5)


def test_an_op_without_an_opset_17_form_is_one_line_naming_it_and_the_way_out() -> None:
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], name="aa", mode="linear", antialias=1)
    model = _model(node, [2, 6, 4, 4], inits=(("scales", np.array([1, 1, 0.5, 0.5], np.float32)),))
    with pytest.raises(BackendFailed) as err:
        to_onnx2torch_opset(model, "m.onnx")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg == (
        "onnx2torch reads ONNX opsets up to 17, and m.onnx (opset 20) has Resize (version 19) 'aa' with no "
        "opset-17 form here: export it with torch.onnx.export(..., dynamo=False, opset_version=17), or time "
        "it on another backend"
    )


def test_a_reduce_l2_that_reduces_nothing_is_refused_not_made_an_identity() -> None:
    """ReduceL2 over no axes with noop_with_empty_axes still takes |x| (onnxruntime): an Identity
    would be wrong, so it has no opset-17 form here."""
    model = _model(helper.make_node("ReduceL2", ["x"], ["y"], name="l2", noop_with_empty_axes=1), list(X))
    with pytest.raises(BackendFailed, match=r"has ReduceL2 \(version 18\) 'l2' with no opset-17 form"):
        to_onnx2torch_opset(model, "m.onnx")


def test_an_opset_17_model_is_passed_as_it_is() -> None:
    node = helper.make_node("ReduceMean", ["x"], ["y"], name="mean", axes=[2, 3])
    model = _model(node, [2, 6, 1, 1], opset=17)
    assert to_onnx2torch_opset(model, "m.onnx") is model


def test_allowzero_stays_where_the_shape_holds_a_zero() -> None:
    """allowzero=1 with a 0 in the shape means a zero-size dimension, not "copy": not the same as 0,
    so it is left for onnx2torch to refuse in its own words."""
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="r", allowzero=1)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 0])],
        [numpy_helper.from_array(np.array([4, 0], np.int64), "shape")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    new = to_onnx2torch_opset(model, "m.onnx")
    assert [a.i for a in new.graph.node[0].attribute if a.name == "allowzero"] == [1]


def test_an_op_onnx_does_not_know_is_left_for_onnx2torch_to_name() -> None:
    """No schema, no version to compare: the node stays, and onnx2torch's own one-line error names it
    (the backend's), instead of a SchemaError from here."""
    graph = helper.make_graph(
        [helper.make_node("NotAnOnnxOp", ["x"], ["y"], name="odd")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(X))],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    new = to_onnx2torch_opset(model, "m.onnx")
    assert [n.op_type for n in new.graph.node] == ["NotAnOnnxOp"] and default_opset(new) == TARGET
