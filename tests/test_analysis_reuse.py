"""One Analysis, any model of its graph: another checkpoint, or the same model with new weights.

The analysis holds the graph's structure; every weight that `apply_plan` edits and that a trim ranks
by (filter L1, zero filters, the readers' norms of activation importance) is read from the model
given, by name. Applied with a reused analysis, a plan gives byte for byte what it gives with a
fresh analysis of that model; a model of another graph is one PlanError line, never a model that
mixes two checkpoints' weights.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from test_coupling_qdq import qdq_net

from deployopt.coupling import Analysis, analyze
from deployopt.coupling import registry as registry_mod
from deployopt.errors import PlanError
from deployopt.importance import activation_importance, dead_channels_many, filter_l1
from deployopt.model import load_model
from deployopt.surgery import GroupChange, apply_plan, apply_plan_report, channel_order, kept_channels

#: zoo models (tests/zoo_models.py) covering: residual adds, a projection shortcut with its weights
#: in Constant nodes, depthwise convs (a `group` edit), Concats, an SE gate
MODELS = ["resnet56_pruned", "resnet_projection_constants", "mobilenet_like", "densenet_like", "se_net"]


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _dequantized_data(model: onnx.ModelProto) -> set[str]:
    return {n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}


def _retrained(value: np.ndarray, rng: np.random.Generator, quantized: bool) -> np.ndarray:
    """Other weights of the same type and shape: floats rescaled entry by entry (signs kept, so a
    BatchNorm variance stays positive; magnitudes reordered, so the L1 ranking changes), quantized
    integer weights drawn again. Other integer tensors (shapes, axes, zero points) stay."""
    if value.dtype.kind == "f":
        return (value * rng.uniform(0.2, 5.0, value.shape)).astype(value.dtype)
    if quantized:
        info = np.iinfo(value.dtype)
        lo, hi = max(info.min + 1, -127), min(info.max, 127)
        return rng.integers(lo, hi + 1, value.shape).astype(value.dtype)
    return value


def _settings(model: onnx.ModelProto) -> set[str]:
    """The constants `model` reads as op settings (Clip bounds, Resize scales...), which retraining
    keeps (check_graph compares them: `registry._SETTING_INPUTS`)."""
    slots = registry_mod._SETTING_INPUTS
    return {n.input[i] for n in model.graph.node for i in slots.get(n.op_type, ()) if i < len(n.input)}


def retrain(model: onnx.ModelProto, seed: int = 1, *, rebuild: bool = False) -> None:
    """Give `model` other weights in place, initializers and Constant nodes alike (`rebuild`: by
    replacing the initializer list, not each tensor's contents); its settings (`_settings`) stay."""
    rng = np.random.default_rng(seed)
    quantized = _dequantized_data(model)
    kept = _settings(model)
    new = []
    for t in model.graph.initializer:
        if t.name in kept:
            new.append(onnx.TensorProto())
            new[-1].CopyFrom(t)
            continue
        value = _retrained(numpy_helper.to_array(t), rng, t.name in quantized)
        new.append(numpy_helper.from_array(value, t.name))
    if rebuild:
        del model.graph.initializer[:]
        model.graph.initializer.extend(new)
    else:
        for t, n in zip(model.graph.initializer, new):
            t.CopyFrom(n)
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output[0] not in kept:
            for a in node.attribute:
                if a.name == "value":
                    value = _retrained(numpy_helper.to_array(a.t), rng, node.output[0] in quantized)
                    a.t.CopyFrom(numpy_helper.from_array(value, a.t.name))


def zero_filters(model: onnx.ModelProto, conv: str, rows: list[int]) -> None:
    """Zero some output filters of `conv` in place (through its DequantizeLinear when quantized)."""
    node = next(n for n in model.graph.node if n.name == conv)
    name = node.input[1]
    dq = next((n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == name), None)
    name = dq.input[0] if dq is not None else name
    tensors = [t for t in model.graph.initializer if t.name == name]
    tensors += [
        a.t for n in model.graph.node if n.op_type == "Constant" and n.output[0] == name for a in n.attribute
    ]
    arr = numpy_helper.to_array(tensors[0]).copy()
    arr[rows] = 0
    tensors[0].CopyFrom(numpy_helper.from_array(arr, tensors[0].name))


def constants(model: onnx.ModelProto) -> dict[str, bytes]:
    """Every initializer's and Constant node's value, serialized, by name."""
    out = {t.name: t.SerializeToString() for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant":
            out[n.output[0]] = b"".join(a.SerializeToString() for a in n.attribute)
    return out


def pad_plan(analysis: Analysis) -> dict[str, int]:
    return {g.id: g.width + 1 + i % 8 for i, g in enumerate(analysis.free_groups())}


def trim_plan(analysis: Analysis) -> dict[str, int]:
    return {g.id: max(1, g.width * 3 // 4) for g in analysis.free_groups() if g.width > 1}


def checkpoints(name: str, path: Callable[[str], Path]) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Checkpoint 1 and 2 of one architecture: the zoo's weights, and others on the same graph (two
    of them zero filters, so the second checkpoint has a dead-channel candidate the first lacks)."""
    if name == "qdq":
        one = qdq_net()
    else:
        one = load_model(path(name)).model
    two = _copy(one)
    retrain(two)
    first = next(n for n in two.graph.node if n.op_type == "Conv")
    zero_filters(two, first.name, [0, 2])
    return one, two


def assert_same_edit(
    model: onnx.ModelProto, plan: dict[str, int], reused: Analysis, fresh: Analysis, **kw: object
) -> list[GroupChange]:
    got, got_report = apply_plan_report(model, plan, reused, **kw)  # type: ignore[arg-type]
    want, want_report = apply_plan_report(model, plan, fresh, **kw)  # type: ignore[arg-type]
    assert got_report == want_report
    assert [c.kept for c in got_report] == [c.kept for c in want_report]
    mine, theirs = constants(got), constants(want)
    assert mine.keys() == theirs.keys()
    differ = sorted(n for n in mine if mine[n] != theirs[n])
    assert not differ, f"{len(differ)} of {len(mine)} constants differ, e.g. {differ[:3]}"
    assert got.SerializeToString() == want.SerializeToString()
    return got_report


@pytest.mark.parametrize("name", [*MODELS, "qdq"])
def test_a_reused_analysis_pads_another_checkpoint_as_a_fresh_one(
    name: str, zoo_model_path: Callable[[str], Path]
) -> None:
    one, two = checkpoints(name, zoo_model_path)
    reused = analyze(one)
    plan = pad_plan(reused)
    assert plan
    assert_same_edit(two, plan, reused, analyze(two))
    # and it is checkpoint 2's weights that went in, not checkpoint 1's
    assert constants(apply_plan(two, plan, reused)) != constants(apply_plan(one, plan, reused))


@pytest.mark.parametrize("name", [*MODELS, "qdq"])
def test_a_reused_analysis_trims_another_checkpoint_by_its_filter_l1(
    name: str, zoo_model_path: Callable[[str], Path]
) -> None:
    one, two = checkpoints(name, zoo_model_path)
    reused = analyze(one)
    fresh = analyze(two)
    plan = trim_plan(reused)
    report = assert_same_edit(two, plan, reused, fresh)
    # the ranking read checkpoint 2: it keeps other channels than checkpoint 1's ranking does
    assert [c.kept for c in report] != [c.kept for c in apply_plan_report(one, plan, reused)[1]]
    assert kept_channels(two, plan, reused) == kept_channels(two, plan, fresh)
    for gid in plan:
        np.testing.assert_array_equal(filter_l1(reused, gid, two), filter_l1(fresh, gid))
        assert channel_order(two, reused, gid) == channel_order(two, fresh, gid)
    assert dead_channels_many(two, reused, list(plan)) == dead_channels_many(two, fresh, list(plan))


def test_a_reused_analysis_ranks_another_checkpoint_on_data_by_its_weights(
    zoo_model_path: Callable[[str], Path],
) -> None:
    one, two = checkpoints("resnet56_pruned", zoo_model_path)
    reused, fresh = analyze(one), analyze(two)
    plan = trim_plan(reused)
    rng = np.random.default_rng(5)
    name = two.graph.input[0].name
    samples = [{name: rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(2)]
    got = activation_importance(two, reused, list(plan), samples)
    want = activation_importance(two, fresh, list(plan), samples)
    assert got.keys() == want.keys()
    for gid in got:
        np.testing.assert_array_equal(got[gid], want[gid])
    assert_same_edit(two, plan, reused, fresh, importance=got)


@pytest.mark.parametrize("rebuild", [False, True], ids=["tensors-rewritten", "list-replaced"])
@pytest.mark.parametrize("name", ["resnet56_pruned", "resnet_projection_constants", "qdq"])
def test_weights_changed_in_place_after_analyze_are_the_ones_applied(
    name: str, rebuild: bool, zoo_model_path: Callable[[str], Path]
) -> None:
    model, _ = checkpoints(name, zoo_model_path)
    analysis = analyze(model)
    pad, trim = pad_plan(analysis), trim_plan(analysis)
    apply_plan(model, trim, analysis)  # an apply before the change: nothing of it is kept
    retrain(model, seed=7, rebuild=rebuild)
    first = next(n for n in model.graph.node if n.op_type == "Conv")
    zero_filters(model, first.name, [1])
    fresh = analyze(_copy(model))
    for plan in (pad, trim):
        assert_same_edit(model, plan, analysis, fresh)


def _error(model: onnx.ModelProto, analysis: Analysis, plan: dict[str, int]) -> str:
    with pytest.raises(PlanError) as exc:
        apply_plan(model, plan, analysis)
    text = str(exc.value)
    assert "\n" not in text and "analyze(model)" in text
    return text


def test_a_model_of_another_graph_is_one_error(zoo_model_path: Callable[[str], Path]) -> None:
    model = load_model(zoo_model_path("resnet56_pruned")).model
    analysis = analyze(model)
    plan = pad_plan(analysis)

    other = load_model(zoo_model_path("resnet56_cifar")).model  # the same ops, other widths
    weight = "initializer 'layer1.0.conv1.conv.weight' has shape [16, 16, 3, 3], analysed [11, 16, 3, 3]"
    assert weight in _error(other, analysis, plan)
    assert "nodes" in _error(load_model(zoo_model_path("se_net")).model, analysis, plan)
    older = load_model(zoo_model_path("resnet56_opset9")).model
    assert "opset 9, analysed 17" in _error(older, analysis, pad_plan(analyze(older)))

    renamed = _copy(model)
    renamed.graph.node[3].name = "something_else"
    assert "named 'something_else'" in _error(renamed, analysis, plan)

    retyped = _copy(model)
    relu = next(n for n in retyped.graph.node if n.op_type == "Relu")
    relu.op_type = "Sigmoid"
    assert "is Sigmoid, analysed Relu" in _error(retyped, analysis, plan)

    rewired = _copy(model)
    conv = next(n for n in rewired.graph.node if n.op_type == "Conv" and n.input[0] != "input")
    conv.input[0] = rewired.graph.input[0].name
    assert "reads" in _error(rewired, analysis, plan)

    strided = _copy(model)
    conv = next(n for n in strided.graph.node if n.op_type == "Conv")
    for a in conv.attribute:
        if a.name == "strides":
            a.ints[:] = [2, 2]
    assert "attribute 'strides'" in _error(strided, analysis, plan)

    name = model.graph.initializer[0].name
    halved = _copy(model)
    t = halved.graph.initializer[0]
    t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), name))
    assert f"initializer {name!r} is FLOAT16, analysed FLOAT" in _error(halved, analysis, plan)
    renamed = _copy(model)
    renamed.graph.initializer[0].name = "renamed_weight"
    assert "initializer 'renamed_weight' is not in the analysed graph" in _error(renamed, analysis, plan)
    dropped = _copy(model)
    del dropped.graph.initializer[0]
    assert f"initializer {name!r} is missing" in _error(dropped, analysis, plan)

    # a ranking on another graph refuses too
    gid = next(iter(trim_plan(analysis)))
    with pytest.raises(PlanError, match=r"analyze\(model\)"):
        filter_l1(analysis, gid, other)
    with pytest.raises(PlanError, match=r"analyze\(model\)"):
        kept_channels(other, trim_plan(analysis), analysis)


def test_an_integer_constant_the_analysis_read_must_hold_the_same_values() -> None:
    """A Reshape target (what a Flatten's spread and the classifier's binding were traced from)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
        numpy_helper.from_array(rng.standard_normal((10, 8 * 4 * 4)).astype(np.float32), "fc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["f"], name="reshape"),
        helper.make_node("Gemm", ["f", "fc"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    )
    analysis = analyze(model)
    assert not analysis.group("conv").frozen
    other = _copy(model)
    other.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.array([-1, 128], np.int64), "shape"))
    assert "constant 'shape'" in _error(other, analysis, {"conv": 9})
    retrained = _copy(model)
    retrain(retrained)
    assert_same_edit(retrained, {"conv": 9}, analysis, analyze(retrained))


def test_the_analysed_model_checks_only_its_initializers(
    zoo_model_path: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Applied to the model it analysed, no node is compared (the fast path optimize takes, plan
    after plan); a weight whose shape changed in place since is still one error."""
    model = load_model(zoo_model_path("resnet56_pruned")).model
    analysis = analyze(model)

    def refuse(*args: object) -> None:
        raise AssertionError("the analysed model's nodes were compared")

    monkeypatch.setattr(registry_mod, "_graph_difference", refuse)
    apply_plan(model, pad_plan(analysis), analysis)
    t = next(t for t in model.graph.initializer if len(t.dims) == 4)
    arr = numpy_helper.to_array(t)
    t.CopyFrom(numpy_helper.from_array(np.concatenate([arr, arr]), t.name))
    assert "has shape" in _error(model, analysis, pad_plan(analysis))
