"""Softmax, LogSoftmax, Hardmax, ArgMax, ArgMin and TopK (deployopt/coupling/rules/axis.py): along
an axis other than the channels they keep a conv's group free, and padding it is exact; along the
channels (opset < 13 Softmax: from `axis` on, channels included) they freeze it."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_coupling import Net
from test_surgery import run

from deployopt.coupling import analyze
from deployopt.errors import PlanError
from deployopt.surgery import apply_plan


def _cast(n: Net, x: str) -> str:
    return n.op("Cast", [x], to=TensorProto.FLOAT)


def _topk(n: Net, x: str, k: int, **attrs: Any) -> tuple[str, str]:
    """TopK of `x` over W (k from the `K` input from opset 10, the attribute before)."""
    n.n += 1
    name = f"topk{n.n}"
    if n.opset < 10:
        ins, attrs = [x], {**attrs, "k": k}
    else:
        ins = [x, _i64(n, f"{name}.k", [k])]
    values, indices = f"{name}.values", f"{name}.indices"
    n.nodes.append(helper.make_node("TopK", ins, [values, indices], name=name, **attrs))
    c, h, _ = n.dims[x]
    n.dims[values] = n.dims[indices] = (c, h, k)
    return values, indices


def _i64(n: Net, name: str, values: list[int]) -> str:
    n.inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
    return name


def _model(opset: int, op: str, **attrs: Any) -> onnx.ModelProto:
    """conv1 (8 channels) → the op → a conv reading its output (through a Cast for indices)."""
    n = Net(opset=opset)
    a = n.op("Relu", [n.conv("x", 8)])
    if op == "TopK":
        values, indices = _topk(n, a, 3, **attrs)
        y = n.op("Add", [values, _cast(n, indices)])
    elif op in ("ArgMax", "ArgMin"):
        c, h, w = n.dims[a]
        dims = (c, 1, w) if attrs["axis"] in (2, -2) else (c, h, 1)
        y = _cast(n, n.op(op, [a], dims, **attrs))
    else:
        y = n.op(op, [a], **attrs)
    return n.build(n.conv(y, 4))


FREE = [
    (17, "Softmax", {"axis": -1}),  # a spatial softmax over W
    (17, "Softmax", {"axis": 2}),
    (17, "Softmax", {"axis": 0}),  # over the batch: each channel on its own too
    (13, "Softmax", {}),  # the opset-13 default: the last axis
    (17, "LogSoftmax", {"axis": 3}),
    (17, "Hardmax", {"axis": -2}),
    (11, "Softmax", {"axis": 2}),  # before 13: over H·W at once, per channel
    (11, "Softmax", {"axis": -1}),
    (12, "LogSoftmax", {"axis": 3}),
    (11, "Hardmax", {"axis": 2}),
    (17, "ArgMax", {"axis": 2}),
    (17, "ArgMax", {"axis": -1, "select_last_index": 1}),
    (17, "ArgMin", {"axis": 3}),
    (11, "ArgMin", {"axis": -2}),
    (17, "TopK", {}),  # the default axis: the last one (W)
    (17, "TopK", {"axis": 3, "largest": 0}),
    (9, "TopK", {"axis": -1}),  # k as an attribute
]


@pytest.mark.parametrize(("opset", "op", "attrs"), FREE, ids=[f"{o}-{op}-{a}" for o, op, a in FREE])
def test_along_another_axis_pads_exactly_and_trims(opset: int, op: str, attrs: dict[str, Any]) -> None:
    """They froze the conv's group ("works across channels") whatever their axis."""
    model = _model(opset, op, **attrs)
    group = {g.id: g for g in analyze(model).groups}["conv1"]
    assert not group.frozen, group.reason
    padded = apply_plan(model, {"conv1": 13})
    assert [t.dims for t in padded.graph.initializer if t.name == "conv1.w"] == [[13, 3, 3, 3]]
    np.testing.assert_array_equal(run(padded), run(model))
    trimmed = apply_plan(model, {"conv1": 5})
    onnx.checker.check_model(trimmed, full_check=True)
    assert run(trimmed).shape == run(model).shape
    (last,) = [c for c in analyze(trimmed).convs if c.out_group != "conv1"]
    assert last.shape.c == 5


FROZEN = [
    (17, "Softmax", {"axis": 1}),
    (17, "Softmax", {"axis": -3}),
    (11, "Softmax", {}),  # before 13 the default axis is 1: channels and H·W as one row
    (11, "Softmax", {"axis": 1}),
    (12, "LogSoftmax", {"axis": 0}),  # before 13: everything, channels included
    (11, "Hardmax", {"axis": -3}),
    (17, "ArgMax", {"axis": 1}),
    (17, "ArgMin", {"axis": -3}),
    (17, "TopK", {"axis": 1}),
    (17, "TopK", {"axis": -3}),
]


@pytest.mark.parametrize(("opset", "op", "attrs"), FROZEN, ids=[f"{o}-{op}-{a}" for o, op, a in FROZEN])
def test_across_the_channels_stays_frozen(opset: int, op: str, attrs: dict[str, Any]) -> None:
    """A padded zero would change every softmax of its row and could win an ArgMax or a TopK of
    negative values: no exact padding exists."""
    n = Net(opset=opset)
    a = n.conv("x", 8)
    if op == "TopK":
        values, _ = _topk(n, a, 3, **attrs)
        n.dims[values] = (3, 8, 8)
        y = values
    elif op in ("ArgMax", "ArgMin"):
        y = _cast(n, n.op(op, [a], (1, 8, 8), **attrs))
    else:
        y = n.op(op, [a], **attrs)
    model = n.build(n.conv(y, 4))
    group = {g.id: g for g in analyze(model).groups}["conv1"]
    assert group.frozen and group.reason.startswith(f"{op} ")
    assert group.reason.endswith(" works across channels")
    with pytest.raises(PlanError, match="frozen"):
        apply_plan(model, {"conv1": 9})


def test_argmax_without_keepdims_moves_the_channels_down() -> None:
    """ArgMax over the batch without `keepdims`: [1, C, H, W] → [C, H, W], channels on axis 0; a
    Transpose to channels-last and a MatMul read them there, and padding is exact."""
    n = Net()
    a = n.conv("x", 8)
    arg = _cast(n, n.op("ArgMax", [n.op("Relu", [a])], keepdims=0, axis=0))
    t = n.op("Transpose", [arg], perm=[1, 2, 0])  # [H, W, C]
    y = n.op("MatMul", [t, n.init("w", np.random.default_rng(1).standard_normal((8, 5)))])
    n.nodes.append(helper.make_node("Unsqueeze", [y, _i64(n, "ax", [0])], ["out"], name="unsq"))
    n.dims["out"] = (8, 8, 5)
    model = n.build("out")
    analysis = analyze(model)
    assert analysis.state is not None and analysis.state.channel_axis(arg) == 0
    assert not analysis.group("conv1").frozen
    np.testing.assert_array_equal(run(apply_plan(model, {"conv1": 13})), run(model))
    assert run(apply_plan(model, {"conv1": 5})).shape == (1, 8, 8, 5)


def test_softmax_of_channels_last_maps_reads_the_moved_axis() -> None:
    """After a Transpose to NHWC the channels are the last axis: a Softmax over it (-1) freezes,
    one over H (axis 1 there) is free and exact."""
    for axis, frozen in ((-1, True), (1, False)):
        n = Net()
        a = n.conv("x", 8)
        t = n.op("Transpose", [a], (8, 8, 8), perm=[0, 2, 3, 1])
        s = n.op("Softmax", [t], axis=axis)
        back = n.op("Transpose", [s], (8, 8, 8), perm=[0, 3, 1, 2])
        model = n.build(n.conv(back, 4))
        group = analyze(model).group("conv1")
        assert group.frozen == frozen, group.reason
        if not frozen:
            np.testing.assert_array_equal(run(apply_plan(model, {"conv1": 13})), run(model))


@pytest.mark.parametrize(("op", "free"), [("Softmax", True), ("Hardmax", True), ("LogSoftmax", False)])
def test_sqrt_of_a_spatial_softmax_keeps_the_group_free(op: str, free: bool) -> None:
    """sqrt(softmax_W(1 - x)) with a per-channel 1: a padded channel holds -1 before the softmax
    (the constant pads with 0), but a softmax (or hardmax) is never negative, so the Sqrt reads no
    NaN-making value: the group stays free and padding is exact (it froze as "could read a negative
    padded channel"). LogSoftmax is ≤ 0: the Sqrt still freezes it."""
    n = Net(opset=17)
    a = n.conv("x", 8)
    s = n.op("Sub", [n.init("one", np.ones((1, 8, 1, 1))), a], n.dims[a])
    model = n.build(n.conv(n.op("Sqrt", [n.op(op, [s], axis=-1)]), 4))
    group = analyze(model).group("conv1")
    assert group.frozen != free, group.reason
    if free:
        padded = apply_plan(model, {"conv1": 13})
        assert np.isfinite(run(padded)).all()
        np.testing.assert_allclose(run(padded), run(model), atol=1e-6, rtol=0)
    else:
        assert group.reason.endswith("could read a negative padded channel (NaN)")


def _nhwc_model() -> onnx.ModelProto:
    """What tf2onnx exports: an NHWC input, a Transpose to NCHW, then convs (and GAP → MatMul)."""
    rng = np.random.default_rng(0)

    def w(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    inits = [w("w1", 20, 3, 3, 3), w("b1", 20), w("w2", 36, 20, 3, 3), w("b2", 36), w("fc", 36, 10)]
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2], name="to_nchw"),
        helper.make_node("Conv", ["t", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "nhwc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 16, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_nhwc_input_through_a_transpose_leaves_the_first_conv_free() -> None:
    """The graph input's axis 1 (H of an NHWC input) was traced as its channels; the Transpose moved
    it to axis 2 and the first conv froze whole ("expects channels on axis 1, not axis 2"), its own
    filters included. A frozen set that changes on no axis is now read as untraced there."""
    model = _nhwc_model()
    groups = {g.id: g for g in analyze(model).groups}
    assert not groups["conv1"].frozen, groups["conv1"].reason
    assert not groups["conv2"].frozen and groups["input:x"].frozen
    padded = apply_plan(model, {"conv1": 32, "conv2": 40})
    assert [t.dims for t in padded.graph.initializer if t.name == "w1"] == [[32, 3, 3, 3]]
    np.testing.assert_array_equal(run(padded), run(model))
    trimmed = apply_plan(model, {"conv1": 16})
    onnx.checker.check_model(trimmed, full_check=True)
    assert run(trimmed).shape == (1, 10)
