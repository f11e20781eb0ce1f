"""A classifier read after a Flatten of a map with spatial extent (VGG, AlexNet: 512×7×7 → 4096).

Channel c of the [N, C, H, W] map is features c·H·W … (c+1)·H·W − 1 of the flattened [N, C·H·W]
tensor, so padding the last conv appends H·W zero rows per channel to the classifier's weights and
trimming drops them: the last conv's width is free. Per-element ops between the Flatten and the
classifier (Relu, Dropout, Sigmoid …, a binary op with a scalar constant) keep it free; any other
op (Softmax, a per-feature constant, a division by the features) freezes it (it would read
features, not channels).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import ort_session
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_surgery import run

from deployopt.coupling import analyze
from deployopt.importance import dead_channels_many
from deployopt.surgery import apply_plan, apply_plan_report

C, HW, CLASSES = 6, 4, 5  # the map before the classifier: [1, 6, 2, 2]


def _between(spec: str, x: str, y: str, name: str) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    """One op from the features `x` to `y`: "Op", or "Op:scalar" (Op(x, 0.5)), "Op:rscalar"
    (Op(0.5, x)), "Op:vector" (Op(x, one value per feature)), "Op:flat" (Op(x, the Flatten's f))."""
    op, _, operand = spec.partition(":")
    attrs = {"LeakyRelu": {"alpha": 0.1}, "Cast": {"to": TensorProto.FLOAT}}.get(op, {})
    if op == "Clip":  # [-0.5, 0.5]: keeps 0 at 0
        lo, hi = (numpy_helper.from_array(np.array(v, dtype=np.float32), f"{name}_{v}") for v in (-0.5, 0.5))
        return helper.make_node("Clip", [x, lo.name, hi.name], [y], name=name), [lo, hi]
    if not operand:
        return helper.make_node(op, [x], [y], name=name, **attrs), []
    if operand == "flat":
        return helper.make_node(op, [x, "f"], [y], name=name), []
    value = np.full(C * HW if operand == "vector" else (), 0.5, dtype=np.float32)
    const = numpy_helper.from_array(value, f"{name}_k")
    inputs = [const.name, x] if operand == "rscalar" else [x, const.name]
    return helper.make_node(op, inputs, [y], name=name), [const]


def classifier_net(
    flatten: str = "flatten", head: str = "gemm", between: Sequence[str] = ()
) -> onnx.ModelProto:
    """Conv(3→C) → Relu → MaxPool 2 → flatten to [1, C·H·W] → [between ops] → Gemm/MatMul → [1, 5]."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((C, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal(CLASSES).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
    ]
    if flatten == "flatten":
        nodes.append(helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1))
    else:  # a Reshape whose target spells C·H·W out ("explicit") or leaves it to -1 ("infer")
        spec = [1, C * HW] if flatten == "explicit" else [1, -1]
        inits.append(numpy_helper.from_array(np.array(spec, dtype=np.int64), "spec"))
        nodes.append(helper.make_node("Reshape", ["p", "spec"], ["f"], name="flatten"))
    feat = "f"
    for k, spec in enumerate(between):  # between, between1, …: their outputs f1, f2, …
        node, consts = _between(spec, feat, f"f{k + 1}", "between" + (str(k) if k else ""))
        nodes.append(node)
        inits.extend(consts)
        feat = f"f{k + 1}"
    fc = rng.standard_normal((CLASSES, C * HW)).astype(np.float32)
    if head == "gemm":
        inits.append(numpy_helper.from_array(fc, "fc_w"))
        nodes.append(helper.make_node("Gemm", [feat, "fc_w", "fc_b"], ["y"], name="fc", transB=1))
    else:
        inits.append(numpy_helper.from_array(fc.T.copy(), "fc_w"))
        nodes.append(helper.make_node("MatMul", [feat, "fc_w"], ["mm"], name="fc"))
        nodes.append(helper.make_node("Add", ["mm", "fc_b"], ["y"], name="fc_add"))
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CLASSES])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return onnx.shape_inference.infer_shapes(model)


CASES = [("flatten", "gemm"), ("explicit", "gemm"), ("infer", "gemm"), ("flatten", "matmul")]


@pytest.mark.parametrize(("flatten", "head"), CASES)
def test_last_conv_before_a_flattened_classifier_is_free_and_pads_exactly(flatten: str, head: str) -> None:
    model = classifier_net(flatten, head)
    analysis = analyze(model)
    conv = analysis.group("conv")
    assert not conv.frozen and conv.width == C
    padded = apply_plan(model, {"conv": 16}, analysis)
    onnx.checker.check_model(padded, full_check=True)
    fc = {t.name: numpy_helper.to_array(t) for t in padded.graph.initializer}["fc_w"]
    assert fc.shape == ((CLASSES, 16 * HW) if head == "gemm" else (16 * HW, CLASSES))
    rows = fc.T if head == "gemm" else fc
    assert not rows[C * HW :].any()  # the padded channels' H·W features each read zero weights
    if flatten == "explicit":
        spec = {t.name: numpy_helper.to_array(t) for t in padded.graph.initializer}["spec"]
        assert spec.tolist() == [1, 16 * HW]
    np.testing.assert_allclose(run(padded), run(model), rtol=0, atol=1e-5)


@pytest.mark.parametrize(("flatten", "head"), CASES)
def test_trimming_drops_each_channels_block_of_features(flatten: str, head: str) -> None:
    model = classifier_net(flatten, head)
    analysis = analyze(model)
    trimmed, (change,) = apply_plan_report(model, {"conv": 4}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert change.trimmed == 2 and run(trimmed).shape == (1, CLASSES)
    # the kept channels' feature blocks, in order: the classifier of the kept channels, exactly
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    new = {t.name: numpy_helper.to_array(t) for t in trimmed.graph.initializer}
    kept_channels = [next(c for c in range(C) if np.array_equal(f, w["w"][c])) for f in new["w"]]
    cols = np.concatenate([np.arange(c * HW, (c + 1) * HW) for c in kept_channels])
    fc_old, fc_new = (w["fc_w"], new["fc_w"]) if head == "gemm" else (w["fc_w"].T, new["fc_w"].T)
    np.testing.assert_array_equal(fc_new, fc_old[:, cols])


def test_pad_then_trim_back_finds_the_padded_channels_dead() -> None:
    model = classifier_net()
    padded = apply_plan(model, {"conv": 9})
    panalysis = analyze(padded)
    # read on the map the Flatten reads (channels), not on the flattened features
    assert dead_channels_many(padded, panalysis, ["conv"]) == {"conv": [6, 7, 8]}
    back, (change,) = apply_plan_report(padded, {"conv": C}, panalysis)
    assert change.trimmed == change.dead_trimmed == 3
    for t in back.graph.initializer:
        orig = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}[t.name]
        np.testing.assert_array_equal(numpy_helper.to_array(t), orig)


#: (flatten, head, ops between the flatten and the classifier) that keep the last conv free
PER_ELEMENT = [
    ("flatten", "gemm", ("Relu",)),
    ("flatten", "gemm", ("Sigmoid",)),
    ("flatten", "gemm", ("Dropout",)),
    ("flatten", "gemm", ("Identity",)),
    ("flatten", "gemm", ("LeakyRelu",)),
    ("flatten", "gemm", ("Clip",)),
    ("flatten", "gemm", ("Cast",)),
    ("flatten", "gemm", ("Relu", "Relu")),
    ("flatten", "gemm", ("Dropout", "Sigmoid")),
    ("flatten", "gemm", ("Mul:scalar",)),
    ("flatten", "gemm", ("Sub:rscalar",)),
    ("flatten", "gemm", ("Sigmoid", "Mul:flat")),  # SiLU spelled out: x * Sigmoid(x)
    ("flatten", "gemm", ("Div:scalar", "Erf", "Add:scalar", "Mul:flat", "Mul:scalar")),  # GELU
    ("explicit", "gemm", ("Relu",)),
    ("flatten", "matmul", ("Relu",)),
    ("flatten", "matmul", ("Sigmoid",)),
    ("flatten", "matmul", ("Dropout",)),
    ("flatten", "matmul", ("Identity",)),
]


def _outputs(model: onnx.ModelProto, names: list[str]) -> list[np.ndarray]:
    """The named tensors of one run on run()'s input."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    sess = ort_session.session(probe)
    x = np.random.default_rng(1).standard_normal((1, 3, 4, 4)).astype(np.float32)
    return sess.run(names, {"x": x})


@pytest.mark.parametrize(("flatten", "head", "between"), PER_ELEMENT)
def test_per_element_ops_after_the_flatten_keep_the_conv_free_and_pad_exactly(
    flatten: str, head: str, between: tuple[str, ...]
) -> None:
    model = classifier_net(flatten, head, between)
    analysis = analyze(model)
    conv = analysis.group("conv")
    assert not conv.frozen and conv.width == C
    assert "between" in conv.consumers and "fc" in conv.consumers
    padded = apply_plan(model, {"conv": 16}, analysis)
    onnx.checker.check_model(padded, full_check=True)
    fc = {t.name: numpy_helper.to_array(t) for t in padded.graph.initializer}["fc_w"]
    rows = fc.T if head == "gemm" else fc
    assert rows.shape == (16 * HW, CLASSES) and not rows[C * HW :].any()
    np.testing.assert_allclose(run(padded), run(model), rtol=0, atol=1e-5)


@pytest.mark.parametrize("between", ["Sigmoid", "Sub:rscalar"])
def test_padded_features_an_op_makes_nonzero_meet_zero_weights(between: str) -> None:
    model = classifier_net(between=[between])
    padded = apply_plan(model, {"conv": 16})
    feats, y = _outputs(padded, ["f1", "y"])
    np.testing.assert_array_equal(feats[:, C * HW :], 0.5)  # Sigmoid(0), 0.5 - 0: not zero …
    np.testing.assert_allclose(y, run(model), rtol=0, atol=1e-5)  # … but read with zero weights


@pytest.mark.parametrize(("flatten", "head", "between"), PER_ELEMENT)
def test_trimming_through_per_element_ops_drops_each_channels_block(
    flatten: str, head: str, between: tuple[str, ...]
) -> None:
    model = classifier_net(flatten, head, between)
    trimmed, (change,) = apply_plan_report(model, {"conv": 4}, analyze(model))
    onnx.checker.check_model(trimmed, full_check=True)
    assert change.trimmed == 2 and run(trimmed).shape == (1, CLASSES)
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    new = {t.name: numpy_helper.to_array(t) for t in trimmed.graph.initializer}
    kept_channels = [next(c for c in range(C) if np.array_equal(f, w["w"][c])) for f in new["w"]]
    cols = np.concatenate([np.arange(c * HW, (c + 1) * HW) for c in kept_channels])
    fc_old, fc_new = (w["fc_w"], new["fc_w"]) if head == "gemm" else (w["fc_w"].T, new["fc_w"].T)
    np.testing.assert_array_equal(fc_new, fc_old[:, cols])


@pytest.mark.parametrize(
    ("between", "dead"),
    [(("Relu",), [6, 7, 8]), (("Dropout", "Relu"), [6, 7, 8]), (("Mul:scalar",), [6, 7, 8]),
     (("Sigmoid",), [6, 7, 8]), (("Sub:rscalar",), [6, 7, 8])],
)  # fmt: skip
def test_pad_then_trim_back_through_per_element_ops(between: tuple[str, ...], dead: list[int]) -> None:
    model = classifier_net(between=between)
    padded = apply_plan(model, {"conv": 9})
    panalysis = analyze(padded)
    # dead where the classifier reads them: after a Sigmoid the padded features are 0.5, but the
    # classifier reads them with the zero rows the pad wrote, so they add nothing: dead all the same
    assert dead_channels_many(padded, panalysis, ["conv"]) == {"conv": dead}
    back, (change,) = apply_plan_report(padded, {"conv": C}, panalysis)
    assert change.trimmed == 3 and change.dead_trimmed == len(dead)
    orig = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for t in back.graph.initializer:  # zero filters sort first by L1 whether dead or not
        np.testing.assert_array_equal(numpy_helper.to_array(t), orig[t.name])


@pytest.mark.parametrize(("between", "dead"), [("Relu", True), ("Sigmoid", False)])
def test_a_zero_channel_is_dead_only_if_the_classifier_reads_zeros(between: str, dead: bool) -> None:
    model = classifier_net(between=[between])
    for t in model.graph.initializer:  # conv channel 2: zero filter and bias, so 0 in the map
        if t.name in ("w", "b"):
            arr = numpy_helper.to_array(t).copy()
            arr[2] = 0
            t.CopyFrom(numpy_helper.from_array(arr, t.name))
    analysis = analyze(model)
    assert dead_channels_many(model, analysis, ["conv"]) == {"conv": [2] if dead else []}
    trimmed, (change,) = apply_plan_report(model, {"conv": C - 1}, analysis)
    assert change.dead_trimmed == int(dead)
    # Sigmoid(0) = 0.5 times the classifier's channel-2 rows: dropping it is not exact
    assert np.allclose(run(trimmed), run(model), rtol=0, atol=1e-5) == dead


@pytest.mark.parametrize(
    "between",
    [
        ("Softmax",),
        ("Sqrt",),
        ("Add:vector",),
        ("Div:rscalar",),
        ("Relu", "Softmax"),
        ("Sigmoid", "Div:flat"),
    ],
)
def test_an_op_that_is_not_per_element_after_the_flatten_freezes(between: tuple[str, ...]) -> None:
    analysis = analyze(classifier_net(between=between))
    conv = analysis.group("conv")
    assert conv.frozen
    op, name = between[-1].partition(":")[0], "between" + (str(len(between) - 1) if len(between) > 1 else "")
    assert conv.reason == f"{op} {name} reads channels flattened with their spatial positions"


def test_flatten_from_another_axis_still_freezes() -> None:
    model = classifier_net()
    next(n for n in model.graph.node if n.op_type == "Flatten").attribute[0].i = 2
    del model.graph.value_info[:]
    model.graph.node[-1].op_type = "Identity"  # [1, C, HW] cannot feed the Gemm; keep the graph valid
    del model.graph.node[-1].input[1:]
    del model.graph.node[-1].attribute[:]
    model.graph.output[0].type.tensor_type.shape.Clear()
    analysis = analyze(onnx.shape_inference.infer_shapes(model))
    assert analysis.group("conv").reason == "Flatten flatten mixes channels with spatial positions"


def test_flattened_maps_with_different_spreads_do_not_join() -> None:
    """Add of an [1, 8, 2, 2] and a [1, 2, 4, 4] map, both flattened to 32 features: feature i is
    channel i // 4 of one and i // 16 of the other, so no channel set passes through."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "wa"),
        numpy_helper.from_array(rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "wb"),
        numpy_helper.from_array(rng.standard_normal((CLASSES, 32)).astype(np.float32), "fc_w"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["a"], ["fa"], name="flatten_a"),
        helper.make_node("Flatten", ["b"], ["fb"], name="flatten_b"),
        helper.make_node("Add", ["fa", "fb"], ["s"], name="add"),
        helper.make_node("Gemm", ["s", "fc_w"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "two_spreads",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CLASSES])],
        inits,
    )
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), strict_mode=True
    )
    analysis = analyze(model)
    assert not analysis.free_groups()
    reason = "Add add reads channels flattened with their spatial positions"
    assert analysis.group("conv_a").reason == reason and analysis.group("conv_b").reason == reason


def test_a_zero_channel_is_dead_only_if_its_whole_block_of_features_is_zero() -> None:
    """Conv channel 2 is 0 (zero filter and bias), but a Pad of H and W at their ends with 1.0
    puts ones in the last features of its block: the classifier reads them, so it is not dead."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((C, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    w[2], b[2] = 0, 0
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(b, "b"),
        numpy_helper.from_array(np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64), "pads"),
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(rng.standard_normal((CLASSES, C * 9)).astype(np.float32), "fc_w"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Pad", ["c", "pads", "one"], ["p"], name="pad"),  # [1, C, 3, 3]
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "padded_map",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CLASSES])],
        inits,
    )
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), strict_mode=True
    )
    analysis = analyze(model)
    assert [g.id for g in analysis.free_groups()] == ["conv"]
    assert dead_channels_many(model, analysis, ["conv"]) == {"conv": []}
    _, (change,) = apply_plan_report(model, {"conv": C - 1}, analysis)
    assert change.dead_trimmed == 0
