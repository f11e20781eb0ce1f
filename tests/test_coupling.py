"""Channel coupling: which groups exist, which are frozen and why, on tiny graphs and zoo models."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deployopt.coupling import analyze
from deployopt.coupling.registry import RULES, rule
from deployopt.errors import ModelError, PlanError


class Net:
    """A tiny NCHW graph builder with random weights, so tests state topologies in a few lines."""

    def __init__(self, c: int = 3, hw: int = 8, opset: int = 17, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.dims: dict[str, tuple[int, int, int]] = {"x": (c, hw, hw)}
        self.n = 0

    def init(self, name: str, arr: Any) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name))
        return name

    def op(self, op: str, inputs: list[str], dims: tuple[int, int, int] | None = None, **attrs: Any) -> str:
        self.n += 1
        name = f"{op.lower()}{self.n}"
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        self.dims[name] = dims if dims is not None else self.dims[inputs[0]]
        return name

    def conv(self, x: str, k: int, r: int = 3, group: int = 1, bias: bool = True) -> str:
        c, h, w = self.dims[x]
        name = f"conv{self.n + 1}"
        wt = self.init(f"{name}.w", self.rng.standard_normal((k, c // group, r, r)) * 0.3)
        ins = [x, wt] + ([self.init(f"{name}.b", self.rng.standard_normal(k) * 0.1)] if bias else [])
        return self.op("Conv", ins, (k, h, w), kernel_shape=[r, r], pads=[r // 2] * 4, group=group)

    def bn(self, x: str) -> str:
        c = self.dims[x][0]
        name = f"batchnormalization{self.n + 1}"
        values = (
            self.rng.uniform(0.5, 1.5, c),
            self.rng.standard_normal(c) * 0.1,
            self.rng.standard_normal(c) * 0.1,
            self.rng.uniform(0.5, 1.5, c),
        )
        params = [self.init(f"{name}.{p}", v) for p, v in zip(("scale", "bias", "mean", "var"), values)]
        return self.op("BatchNormalization", [x, *params])

    def cbr(self, x: str, k: int, **kw: Any) -> str:
        return self.op("Relu", [self.bn(self.conv(x, k, **kw))])

    def gap(self, x: str) -> str:
        return self.op("GlobalAveragePool", [x], (self.dims[x][0], 1, 1))

    def concat(self, *xs: str) -> str:
        c = sum(self.dims[x][0] for x in xs)
        return self.op("Concat", list(xs), (c, *self.dims[xs[0]][1:]), axis=1)

    def fc(self, x: str, n: int) -> str:
        f = self.op("Flatten", [x], (self.dims[x][0], 0, 0), axis=1)
        c = self.dims[x][0]
        name = f"gemm{self.n + 1}"
        wt = self.init(f"{name}.w", self.rng.standard_normal((n, c)) * 0.3)
        b = self.init(f"{name}.b", self.rng.standard_normal(n) * 0.1)
        return self.op("Gemm", [f, wt, b], (n, 0, 0), transB=1)

    def build(self, *outputs: str, domains: tuple[str, ...] = ()) -> onnx.ModelProto:
        c, h, w = self.dims["x"]
        outs = []
        for o in outputs:
            oc, oh, ow = self.dims[o]
            shape = [1, oc, oh, ow] if oh else [1, oc]
            outs.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, shape))
        inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])
        graph = helper.make_graph(self.nodes, "net", [inp], outs, self.inits)
        opsets = [helper.make_opsetid("", self.opset)] + [helper.make_opsetid(d, 1) for d in domains]
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 8
        onnx.checker.check_model(model)
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def tiny_mixed() -> onnx.ModelProto:
    """Residual add, depthwise conv, a concat, an SE block and a Gemm head in one small graph."""
    n = Net()
    a = n.cbr("x", 16)
    b = n.cbr(a, 16)
    s = n.op("Add", [a, b])
    d = n.conv(s, 16, group=16)
    e = n.cbr(d, 24)
    cat = n.concat(s, e)
    f = n.cbr(cat, 30)
    se = n.op("Sigmoid", [n.conv(n.op("Relu", [n.conv(n.gap(f), 8, r=1)]), 30, r=1)])
    m = n.op("Mul", [f, se])
    return n.build(n.fc(n.gap(m), 10))


def by_id(model: onnx.ModelProto) -> dict[str, Any]:
    return {g.id: g for g in analyze(model).groups}


def test_mixed_graph_groups_exactly() -> None:
    groups = by_id(tiny_mixed())
    summary = {gid: (g.width, g.frozen, g.producers) for gid, g in groups.items()}
    assert summary == {
        "input:x": (3, True, []),
        "conv1": (16, False, ["conv1", "conv4"]),  # residual Add joins both convs
        "conv9": (24, False, ["conv9"]),
        "conv13": (30, False, ["conv13", "conv19"]),  # SE Mul joins the trunk and the excitation conv
        "conv17": (8, False, ["conv17"]),
        "gemm24": (10, True, ["gemm24"]),
    }
    assert groups["input:x"].reason == "graph input 'x'"
    assert groups["gemm24"].reason == "feeds the graph output 'gemm24'"
    assert "gemm24" in groups["conv13"].consumers  # Gemm after GAP+Flatten consumes the channels
    assert "conv8" in groups["conv1"].consumers  # depthwise conv reads (and passes through) conv1


def test_convs_record_groups_and_concat_offsets() -> None:
    convs = {c.name: c for c in analyze(tiny_mixed()).convs}
    assert convs["conv8"].in_groups == [("conv1", 16)] and convs["conv8"].out_group == "conv1"
    assert convs["conv8"].shape.groups == 16 and convs["conv8"].shape.is_depthwise
    # the concat output is not a group: the consumer sees both members at their offsets
    assert convs["conv13"].in_groups == [("conv1", 16), ("conv9", 24)]
    assert convs["conv13"].shape.c == 40 and convs["conv13"].shape.k == 30
    assert convs["conv17"].shape.h == 1 and convs["conv17"].shape.r == 1


def test_conv_shapes_follow_a_plan() -> None:
    shapes = analyze(tiny_mixed()).conv_shapes({"conv1": 32, "conv9": 20})
    assert (shapes["conv1"].c, shapes["conv1"].k) == (3, 32)
    assert (shapes["conv4"].c, shapes["conv4"].k) == (32, 32)
    assert (shapes["conv8"].c, shapes["conv8"].k, shapes["conv8"].groups) == (32, 32, 32)
    assert (shapes["conv9"].c, shapes["conv9"].k) == (32, 20)
    assert (shapes["conv13"].c, shapes["conv13"].k) == (52, 30)
    # one conv at a time (the optimizer's tables) gives the same shapes
    analysis, plan = analyze(tiny_mixed()), {"conv1": 32, "conv9": 20}
    assert {c.name: analysis.conv_shape(c.name, plan) for c in analysis.convs} == shapes
    assert analysis.conv_shapes(plan, only=["conv13", "conv8"]) == {n: shapes[n] for n in ("conv13", "conv8")}


def test_ids_are_deterministic_and_json_shaped() -> None:
    one, two = analyze(tiny_mixed()).to_json(), analyze(tiny_mixed()).to_json()
    assert one == two
    assert set(one) == {"groups", "convs"}
    for g in one["groups"]:
        assert {"id", "width", "frozen", "reason", "producers", "consumers"} <= set(g)
    assert len({g["id"] for g in one["groups"]}) == len(one["groups"])


def test_concat_of_concat_keeps_member_groups() -> None:
    n = Net()
    a, b = n.cbr("x", 8), n.cbr("x", 12)
    c1 = n.concat(a, b)
    c = n.cbr(c1, 4)
    c2 = n.concat(c1, c)
    out = n.conv(c2, 6)
    model = n.build(out)
    conv = {cv.name: cv for cv in analyze(model).convs}[out]
    assert conv.in_groups == [("conv1", 8), ("conv4", 12), ("conv8", 4)]


def test_depthwise_conv_with_a_channel_multiplier_freezes() -> None:
    n = Net()
    g = n.conv(n.cbr("x", 16), 32, group=16)
    model = n.build(n.conv(g, 8))
    groups = by_id(model)
    reason = "depthwise conv with channel multiplier 2 conv4"
    assert groups["conv1"].frozen and groups["conv1"].reason == reason
    assert groups["conv4"].frozen and groups["conv4"].reason == reason


def test_grouped_conv_whose_filters_do_not_split_into_its_groups_freezes() -> None:
    """6 filters in 4 conv groups is no valid conv (ORT refuses it); the checker and shape inference
    pass it, so the analysis must not guess a width per conv group (6 // 4 = 1 would lose 2)."""
    n = Net()
    model = n.build(n.conv(n.conv(n.cbr("x", 8), 6, group=4), 4))
    groups = by_id(model)
    reason = "grouped conv (groups=4) conv4 on 8 → 6 channels"
    assert groups["conv1"].reason == groups["conv4"].reason == reason
    assert groups["conv4"].width == 6


def test_grouped_conv_widths_are_per_conv_group() -> None:
    """A grouped conv (groups=4, 16 → 32 channels) cuts its input into 4 pieces of 4 and its output
    into 4 of 8, each joined into one group: a width is per conv group, every conv group follows."""
    n = Net()
    g = n.cbr(n.cbr("x", 16), 32, group=4)
    model = n.build(n.conv(g, 8))
    analysis = analyze(model)
    groups = {x.id: x for x in analysis.groups}
    assert {gid: (x.width, x.repeat, x.frozen) for gid, x in groups.items()} == {
        "input:x": (3, 1, True),
        "conv1": (4, 4, False),  # conv1's 16 filters as 4 pieces of the grouped conv's input
        "conv4": (8, 4, False),
        "conv7": (8, 1, True),
    }
    assert groups["conv1"].producers == ["conv1"] and groups["conv4"].producers == ["conv4"]
    convs = {c.name: c for c in analysis.convs}
    assert convs["conv4"].in_groups == [("conv1", 4)] * 4
    assert convs["conv4"].out_groups == [("conv4", 8)] * 4 and convs["conv4"].out_group == "conv4"
    assert convs["conv1"].out_group == "conv1" and convs["conv7"].in_groups == [("conv4", 8)] * 4
    shapes = analysis.conv_shapes({"conv1": 5, "conv4": 11})
    assert (shapes["conv1"].k, shapes["conv7"].c) == (20, 44)
    assert (shapes["conv4"].c, shapes["conv4"].k, shapes["conv4"].groups) == (20, 44, 4)
    assert analysis.to_json()["groups"][1]["repeat"] == 4


def test_grouped_conv_over_a_concat() -> None:
    """Concat(a, b) read by groups=4: with both widths multiples of C/g, the pieces are a[0], a[1],
    b[0], b[1], all one group; a boundary inside a conv group cannot follow one width per conv
    group, so everything the conv reads freezes, saying why."""
    n = Net()
    a, b = n.cbr("x", 8), n.cbr("x", 8)
    model = n.build(n.conv(n.op("Relu", [n.conv(n.concat(a, b), 8, group=4)]), 4))
    groups = by_id(model)
    conv1 = groups["conv1"]
    assert (conv1.width, conv1.repeat, conv1.producers) == (4, 4, ["conv1", "conv4"])
    assert "conv4" not in groups and not groups["conv1"].frozen
    n = Net()
    a, b = n.cbr("x", 6), n.cbr("x", 10)
    model = n.build(n.conv(n.op("Relu", [n.conv(n.concat(a, b), 8, group=4)]), 4))
    # a's 6 channels cut at 4, b's 10 at 2 and 6: the conv groups read [4], [2, 2], [4], [4]
    groups = by_id(model)
    cut = {gid: g.width for gid, g in groups.items() if gid not in ("input:x", "conv10")}
    assert cut == {"conv1": 4, "conv1#2": 2, "conv4": 2, "conv4#2": 4, "conv4#3": 4, "conv8": 8}
    reason = "grouped conv (groups=4) conv8: its conv groups read differently split channels"
    assert all(groups[gid].reason == reason for gid in cut)


def test_unknown_op_freezes_what_it_touches() -> None:
    n = Net()
    a = n.cbr("x", 16)
    lrn = n.op("LRN", [a], size=3)
    b = n.cbr(lrn, 8)
    model = n.build(n.conv(b, 4))
    groups = by_id(model)
    assert groups["conv1"].reason == "unknown op LRN"
    assert groups["lrn4"].frozen and groups["lrn4"].reason == "unknown op LRN"  # its output: a frozen set
    assert not groups["conv5"].frozen


def test_custom_domain_op_freezes() -> None:
    n = Net()
    a = n.cbr("x", 16)
    n.nodes.append(helper.make_node("Foo", [a], ["foo"], name="foo", domain="com.example"))
    n.dims["foo"] = n.dims[a]
    model = n.build(n.conv("foo", 4), domains=("com.example",))
    groups = {g.id: g for g in analyze(model).groups}
    assert groups["conv1"].frozen and groups["conv1"].reason == "unknown op Foo"


def test_flatten_without_gap_spreads_and_with_gap_is_free() -> None:
    # 16 channels × 4×4 positions: channel c is the classifier's rows 16c … 16c + 15
    # (tests/test_coupling_flatten.py pads and trims it)
    n = Net(hw=4)
    f = n.op("Flatten", [n.cbr("x", 16)], (256, 0, 0), axis=1)
    w = n.init("fc.w", np.ones((256, 10)))
    model = n.build(n.op("MatMul", [f, w], (10, 0, 0)))
    g = by_id(model)["conv1"]
    assert not g.frozen and g.width == 16 and "matmul5" in g.consumers
    n = Net(hw=4)
    model = n.build(n.fc(n.gap(n.cbr("x", 16)), 10))
    assert not by_id(model)["conv1"].frozen


def test_reshape_after_gap_is_a_flatten() -> None:
    n = Net(hw=4)
    g = n.gap(n.cbr("x", 16))
    shape = n.init("shape", np.array([1, -1]))
    n.inits[-1] = numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "shape")
    r = n.op("Reshape", [g, shape], (16, 0, 0))
    w = n.init("fc.w", np.ones((16, 5)))
    model = n.build(n.op("MatMul", [r, w], (5, 0, 0)))
    groups = by_id(model)
    assert not groups["conv1"].frozen and "matmul6" in groups["conv1"].consumers


def test_transpose_moves_the_channel_axis_and_back() -> None:
    # a Transpose only moves the channels to another axis; an NCHW op reading them there freezes
    # (more in test_coupling_convnext.py)
    n = Net()
    a = n.cbr("x", 16)
    t = n.op("Transpose", [a], (8, 16, 8), perm=[0, 2, 1, 3])
    t2 = n.op("Transpose", [t], (16, 8, 8), perm=[0, 2, 1, 3])
    model = n.build(n.conv(t2, 4))
    assert not by_id(model)["conv1"].frozen
    n = Net()
    t = n.op("Transpose", [n.cbr("x", 16)], (8, 16, 8), perm=[0, 2, 1, 3])
    model = n.build(n.conv(t, 4))
    assert by_id(model)["conv1"].reason == "Conv conv5 expects channels on axis 1, not axis 2"


def test_per_channel_constant_joins_and_divide_by_channels_freezes() -> None:
    n = Net()
    a = n.cbr("x", 16)
    scale = n.init("scale", np.full((1, 16, 1, 1), 2.0))
    m = n.op("Mul", [a, scale])
    model = n.build(n.conv(m, 4))
    assert not by_id(model)["conv1"].frozen
    n = Net()
    a, b = n.cbr("x", 16), n.cbr("x", 16)
    model = n.build(n.conv(n.op("Div", [a, b]), 4))
    g = by_id(model)["conv1"]
    assert g.frozen and g.reason.startswith("Div div7 divides by a channel set")


def test_shared_constant_freezes() -> None:
    n = Net()
    a, b = n.conv("x", 8), n.conv("x", 8)
    shared = n.init("shared", np.ones((1, 8, 1, 1)))
    m1, m2 = n.op("Mul", [a, shared]), n.op("Mul", [b, shared])
    model = n.build(n.conv(m1, 4), n.conv(m2, 4))
    groups = by_id(model)
    assert groups["conv1"].reason == "constant 'shared' is shared by several ops"
    assert groups["conv2"].frozen


def test_a_constant_two_readers_would_pad_differently_freezes() -> None:
    """`(a + c) / c` with one large constant c (over 4096 values: the loader does not copy it per
    reader): the Add pads c with 0, the Div needs 1; padding kept the first's 0, and the padded
    model's every output was NaN (0/0). The group freezes; padding it changes nothing."""
    import onnxruntime as ort

    from deployopt.surgery import apply_plan

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 1, 1)).astype(np.float32), "w1"),
        numpy_helper.from_array((np.abs(rng.standard_normal((1, 8, 32, 32))) + 0.5).astype(np.float32), "c"),
        numpy_helper.from_array(rng.standard_normal((3, 8, 1, 1)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1"),
        helper.make_node("Add", ["a", "c"], ["s"], name="add"),
        helper.make_node("Div", ["s", "c"], ["d"], name="div"),
        helper.make_node("Conv", ["d", "w2"], ["y"], name="conv2"),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 32, 32]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "g", io[:1], io[1:], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    analysis = analyze(model)
    group = {g.id: g for g in analysis.groups}["conv1"]
    assert group.frozen and group.reason == "constant 'c' is shared by several ops"
    try:
        padded = apply_plan(model, {"conv1": 13}, analysis)
    except PlanError:
        return  # refused: as good as unchanged
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)

    def run(m: onnx.ModelProto) -> Any:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, {"x": x})[0]

    np.testing.assert_array_equal(run(padded), run(model))


def test_maxpool_whose_indices_are_read_freezes() -> None:
    """MaxPool's Indices are flat offsets into N·C·H·W: conv_a's channels padded before conv_b's
    in a Concat shifted conv_b's indices (the padded model's output moved by ~990). Read, they
    freeze the pool's channels; the values output alone passes them through."""
    rng = np.random.default_rng(0)

    def w(*shape: int) -> Any:
        return rng.standard_normal(shape).astype(np.float32)

    def model(read_indices: bool) -> onnx.ModelProto:
        inits = [numpy_helper.from_array(a, n) for a, n in ((w(3, 3, 1, 1), "wa"), (w(3, 3, 1, 1), "wb"))]
        inits.append(numpy_helper.from_array(w(4, 6, 1, 1), "wv"))
        nodes = [
            helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a"),
            helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b"),
            helper.make_node("Concat", ["a", "b"], ["cat"], axis=1, name="cat"),
            helper.make_node(
                "MaxPool", ["cat"], ["v", "idx"], kernel_shape=[2, 2], strides=[2, 2], name="pool"
            ),
            helper.make_node("Conv", ["v", "wv"], ["y"], name="conv_v"),
        ]
        outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])]
        if read_indices:
            outs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, [1, 6, 4, 4]))
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
        m = helper.make_model(
            helper.make_graph(nodes, "g", [x], outs, inits), opset_imports=[helper.make_opsetid("", 17)]
        )
        m.ir_version = 8
        return m

    groups = by_id(model(read_indices=True))
    reason = "MaxPool pool's Indices output numbers the channels in its values"
    assert groups["conv_a"].reason == groups["conv_b"].reason == reason
    groups = by_id(model(read_indices=False))
    assert not groups["conv_a"].frozen and not groups["conv_b"].frozen


def test_widths_that_cannot_match_freeze() -> None:
    """Two sets of different total width cannot be the same channels (a model that never ran)."""
    n = Net()
    a, b = n.conv("x", 8), n.conv("x", 6)
    st = analyze(n.build(n.conv(a, 4), n.conv(b, 4))).state
    assert st is not None
    la, lb = st.layout("conv1"), st.layout("conv2")
    assert la is not None and lb is not None and not st.union(la, lb, "here")
    assert (
        st.frozen_reason(la[0][0])
        == st.frozen_reason(lb[0][0])
        == ("channel sets of different widths/split meet at here")
    )


def test_no_conv_is_an_error() -> None:
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [inp], [out]))
    with pytest.raises(ModelError, match=r"^no Conv node: nothing to optimize$"):
        analyze(model)


def test_unknown_group_lookup_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="unknown channel group 'nope'"):
        analyze(tiny_mixed()).group("nope")


def test_registry_rejects_duplicates_and_accepts_new_ops() -> None:
    with pytest.raises(ValueError, match="already registered"):
        rule("Relu")(lambda ctx, node: None)
    n = Net()
    a = n.cbr("x", 16)
    lrn = n.op("LRN", [a], size=1)  # size 1: a per-channel op, so passing through is right
    model = n.build(n.conv(lrn, 4))
    try:
        rule("LRN")(lambda ctx, node: ctx.pass_through(node))
        assert not by_id(model)["conv1"].frozen
    finally:
        RULES.pop("LRN")
    assert by_id(model)["conv1"].frozen


def test_sum_couples_like_add(zoo_model: Any) -> None:
    base = analyze(zoo_model("resnet_projection")).to_json()
    summed = analyze(zoo_model("resnet_projection_sum")).to_json()
    strip = [(g["id"], g["width"], g["frozen"], g["producers"]) for g in base["groups"]]
    assert strip == [(g["id"], g["width"], g["frozen"], g["producers"]) for g in summed["groups"]]


def test_resnet56_groups(zoo_model: Any) -> None:
    analysis = analyze(zoo_model("resnet56_cifar"))
    free = analysis.free_groups()
    # three residual streams (one per stage) + 27 inner block widths; input and classifier frozen
    assert len(analysis.groups) == 32 and len(free) == 30
    stage1 = analysis.group("stem.conv")
    assert stage1.width == 16 and len(stage1.producers) == 10  # stem + 9 block outputs
    assert [g.frozen for g in analysis.groups].count(True) == 2


def test_depthwise_zoo_model_passes_through(zoo_model: Any) -> None:
    analysis = analyze(zoo_model("mobilenet_like"))
    dw = [c for c in analysis.convs if c.shape.is_depthwise]
    assert dw and all(c.out_group == c.in_groups[0][0] for c in dw)


def test_shared_split_sizes_freeze() -> None:
    n = Net()
    a, b = n.conv("x", 8), n.conv("x", 8)
    n.inits.append(numpy_helper.from_array(np.array([3, 5], dtype=np.int64), "sizes"))
    for i, t in enumerate((a, b)):
        n.nodes.append(helper.make_node("Split", [t, "sizes"], [f"p{i}", f"q{i}"], name=f"split{i}", axis=1))
        n.dims[f"p{i}"], n.dims[f"q{i}"] = (3, 8, 8), (5, 8, 8)
    model = n.build(n.conv(n.concat("p0", "q0", "p1", "q1"), 4))
    groups = by_id(model)
    assert groups["conv1[0]"].reason == "constant 'sizes' is shared by several ops"
    assert groups["conv2[1]"].frozen


def test_unknown_shapes_freeze_with_the_reason_that_applies() -> None:
    """Without a shape for its input, a depthwise conv was frozen as "grouped conv (groups=16)" and a
    spatial ReduceMean as "reduces over channels" (seen on a partly folded ShuffleNetV2): the reason
    now says that the width or shape is unknown."""
    n = Net()
    lrn = n.op("LRN", [n.conv("x", 16)], size=3)  # no rule: its output's channels are not traced
    d = n.conv(lrn, 16, group=16)
    r = n.op("ReduceMean", [n.op("Relu", [d])], (16, 1, 1), axes=[2, 3], keepdims=1)
    model = n.build(n.conv(r, 4, r=1))
    kept = [vi for vi in model.graph.value_info if vi.name not in (lrn, d, "relu4")]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)
    reasons = {g.id: g.reason for g in analyze(model).groups}
    assert reasons["conv3"] == "conv with groups=16 on an input of unknown width conv3"
    assert reasons["reducemean5"] == "ReduceMean reducemean5: input shape unknown"


def _int64s(n: Net, name: str, values: list[int]) -> str:
    n.inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
    return name


@pytest.mark.parametrize("pads", [[0, 2, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 2, 0, 0]], ids=["start", "end"])
def test_a_zero_pad_of_the_channel_axis_is_free_at_either_end(pads: list[int]) -> None:
    """Pad adds zero channels (a CIFAR ResNet's option-A shortcut): whichever end it pads, the new
    channels are a free group of their own and the input's stay free (tests/test_coupling_pad.py)."""
    n = Net()
    a = n.cbr("x", 8)
    p = n.op("Pad", [a, _int64s(n, "pads", pads)], (10, 8, 8))
    model = n.build(n.conv(p, 4))
    groups = by_id(model)
    tag = "before" if pads[1] else "after"
    assert not groups["conv1"].frozen and not groups[f"pad4.{tag}"].frozen
    assert groups[f"pad4.{tag}"].width == 2


def test_a_resize_that_scales_channels_freezes_even_at_batch_scale_1() -> None:
    n = Net(hw=4)
    a = n.cbr("x", 8)
    scales = n.init("scales", [1.0, 2.0, 1.0, 1.0])
    r = n.op("Resize", [a, "", scales], (16, 4, 4), mode="nearest")
    model = n.build(n.conv(r, 4))
    assert by_id(model)["conv1"].reason == "Resize resize4 resizes the channel axis"


def test_shape_of_a_traced_tensor_freezes_its_channels() -> None:
    """The channel count becomes data (a dynamic export's Reshape target): it must not change."""
    n = Net()
    a = n.cbr("x", 8)
    model = n.build(n.conv(a, 4))
    model.graph.node.append(helper.make_node("Shape", [a], ["shape_of_a"], name="shape_a"))
    model.graph.output.append(helper.make_tensor_value_info("shape_of_a", TensorProto.INT64, [4]))
    onnx.checker.check_model(model)
    groups = by_id(model)
    assert groups["conv1"].frozen and groups["conv1"].reason == "Shape shape_a reads the channel count"
