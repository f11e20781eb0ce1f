"""A classifier read after a Flatten of a map with spatial extent (VGG, AlexNet: 512×7×7 → 4096).

Channel c of the [N, C, H, W] map is features c·H·W … (c+1)·H·W − 1 of the flattened [N, C·H·W]
tensor, so padding the last conv appends H·W zero rows per channel to the classifier's weights and
trimming drops them: the last conv's width is free. An op other than Gemm/MatMul between the
Flatten and the classifier freezes it (it would read features, not channels).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_surgery import run

from deployopt.coupling import analyze
from deployopt.importance import dead_channels_many
from deployopt.surgery import apply_plan, apply_plan_report

C, HW, CLASSES = 6, 4, 5  # the map before the classifier: [1, 6, 2, 2]


def classifier_net(flatten: str = "flatten", head: str = "gemm", between: str = "") -> onnx.ModelProto:
    """Conv(3→C) → Relu → MaxPool 2 → flatten to [1, C·H·W] → [Relu] → Gemm/MatMul → [1, 5]."""
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
    if between:
        nodes.append(helper.make_node(between, ["f"], ["f2"], name="between"))
        feat = "f2"
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


@pytest.mark.parametrize("between", ["Relu", "Softmax"])
def test_an_op_between_the_flatten_and_the_classifier_freezes(between: str) -> None:
    analysis = analyze(classifier_net(between=between))
    conv = analysis.group("conv")
    assert conv.frozen
    assert conv.reason == f"{between} between reads channels flattened with their spatial positions"


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
