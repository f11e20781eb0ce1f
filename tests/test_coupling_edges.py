"""Graphs at the edges of what the coupling rules see. Each must either pad exactly and trim to a
valid model, or freeze with its reason."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper
from test_coupling import Net
from test_surgery import run

from deployopt import surgery
from deployopt.coupling import analyze
from deployopt.errors import PlanError
from deployopt.model import load_model
from deployopt.surgery import apply_plan


def _groups(model: onnx.ModelProto) -> dict[str, object]:
    return {g.id: g for g in analyze(model).groups}


@pytest.mark.parametrize("param", ["bias", "bn_scale"])
def test_a_per_channel_parameter_fed_at_run_time_freezes(param: str) -> None:
    """A conv bias or BatchNorm scale that is a graph input (not an initializer) cannot be resized
    with the channels: the group freezes with that reason, and a plan for it is a PlanError (it was
    free, and apply failed on an assertion)."""
    n = Net()
    a = n.bn(n.conv("x", 8))
    model = n.build(n.conv(a, 4))
    name = "conv1.b" if param == "bias" else "batchnormalization2.scale"
    (init,) = [t for t in model.graph.initializer if t.name == name]
    model.graph.initializer.remove(init)
    model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [8]))
    onnx.checker.check_model(model)
    group = _groups(model)["conv1"]
    assert group.frozen and group.reason.endswith(f"reads {name!r} per channel, and it is not a constant")
    with pytest.raises(PlanError, match="frozen"):
        apply_plan(model, {"conv1": 11})


def test_a_constant_concatenated_along_height_follows_the_channels() -> None:
    """Concat of a map and a learned [1, C, 2, W] constant along H: padding adds zero channels to
    the constant too (exact), trimming drops them from it (a valid model); before, both plans gave
    a model that did not validate."""
    n = Net()
    a = n.cbr("x", 8)
    border = n.init("border", np.random.default_rng(3).standard_normal((1, 8, 2, 8)))
    cat = n.op("Concat", [a, border], (8, 10, 8), axis=2)
    model = n.build(n.conv(cat, 4))
    assert not _groups(model)["conv1"].frozen
    padded = apply_plan(model, {"conv1": 11})
    np.testing.assert_array_equal(run(padded), run(model))
    trimmed = apply_plan(model, {"conv1": 5})
    onnx.checker.check_model(trimmed, full_check=True)
    widths = {t.name: list(t.dims) for t in trimmed.graph.initializer}
    assert widths["border"] == [1, 5, 2, 8]
    assert run(trimmed).shape == run(model).shape


def _if_reading(tensor: str, k: int, c: int) -> onnx.NodeProto:
    """An If whose branches run a 1×1 conv on `tensor`, read from the outer graph by name."""

    def branch(tag: str) -> onnx.GraphProto:
        w = numpy_helper.from_array(np.ones((k, c, 1, 1), dtype=np.float32), f"{tag}.w")
        conv = helper.make_node("Conv", [tensor, w.name], [f"{tag}.y"], name=f"{tag}.conv")
        out = helper.make_tensor_value_info(f"{tag}.y", TensorProto.FLOAT, [1, k, 8, 8])
        return helper.make_graph([conv], tag, [], [out], [w])

    return helper.make_node(
        "If", ["cond"], ["branch_out"], name="if", then_branch=branch("then"), else_branch=branch("else")
    )


def test_a_tensor_read_inside_a_subgraph_freezes() -> None:
    """An If branch reads conv1's output by name (not as an input of the If): padding conv1 would
    leave the branch's conv with too few input channels, a model that passes the checker and fails
    in onnxruntime. The group freezes instead."""
    n = Net()
    a = n.cbr("x", 8)
    total = n.op("ReduceSum", ["x"], (1, 1, 1), keepdims=0)
    n.nodes.append(helper.make_node("Greater", [total, n.init("zero", 0.0)], ["cond"], name="gt"))
    n.nodes.append(_if_reading(a, 4, 8))
    n.dims["branch_out"] = (4, 8, 8)
    model = n.build(n.conv(a, 4), "branch_out")
    group = _groups(model)["conv1"]
    assert group.frozen and group.reason == "If if reads it inside a subgraph"
    with pytest.raises(PlanError, match="frozen"):
        apply_plan(model, {"conv1": 11})


def test_a_gemm_bias_that_broadcasts_is_not_zero_padding() -> None:
    """A Gemm with a scalar bias puts that bias in its padded columns; a Sqrt after it would turn a
    negative one into NaN, which the next Gemm's zero weights carry to the output (it did: NaN
    after padding). The Sqrt freezes the Gemm's group; a per-column bias keeps it free."""
    for bias, frozen in (([-1.0], True), (np.linspace(0.5, 1.0, 5), False)):
        n = Net()
        a = n.op("Abs", [n.conv("x", 8)])
        f = n.op("Flatten", [n.gap(a)], (8, 0, 0), axis=1)
        w = n.init("g1.w", np.random.default_rng(0).uniform(50, 60, (8, 5)))
        h = n.op("Sqrt", [n.op("Gemm", [f, w, n.init("g1.b", bias)], (5, 0, 0))])
        model = n.build(n.op("Gemm", [h, n.init("g2.w", np.ones((5, 3)))], (3, 0, 0)))
        group = _groups(model)["gemm5"]
        assert group.frozen == frozen
        if frozen:
            assert group.reason == "Sqrt sqrt6 could read a negative padded channel (NaN)"
        else:
            np.testing.assert_allclose(run(apply_plan(model, {"gemm5": 8})), run(model), rtol=1e-6)


def _badly_named() -> onnx.ModelProto:
    """conv(8) → BN → Relu → conv(12) → BN → Relu → conv(6) → conv(4), its convs all named "conv"
    but one that is unnamed, with the unnamed one's fallback name ("Conv_6") and the second
    "conv"'s first choice ("conv_2") taken by other nodes, and the BatchNorms unnamed."""
    n = Net()
    model = n.build(n.conv(n.conv(n.cbr(n.cbr("x", 8), 12), 6), 4))
    names = ["conv", "", "Conv_6", "conv", "conv_2", "relu6", "", "conv"]
    assert [node.op_type for node in model.graph.node][::3] == ["Conv", "Conv", "Conv"]
    for node, name in zip(model.graph.node, names):
        node.name = name
    onnx.checker.check_model(model)
    return model


#: what `unique_node_names` makes of `_badly_named`'s names
UNIQUE = ["conv", "BatchNormalization_1", "Conv_6", "conv_3", "conv_2", "relu6", "Conv_6_2", "conv_4"]


def test_repeated_and_empty_node_names_are_made_unique_on_load(tmp_path) -> None:
    """Two convs with one name overwrote each other in every table keyed by conv name: analyze
    listed four convs named "conv", `conv_shapes` gave one shape for all four (the wave model priced
    one conv where there were four, and the optimizer's per-layer table dropped three), and
    onnxruntime refused the model. Loading now gives every node a distinct name, deterministically,
    says so, and the written model keeps them."""
    path = tmp_path / "m.onnx"
    onnx.save(_badly_named(), path)
    loaded = load_model(path)
    assert [node.name for node in loaded.model.graph.node] == UNIQUE
    assert loaded.notices == [
        "named 1 unnamed node(s) whose <op type>_<index> another node has (Conv_6_2) and renamed 2 "
        "node(s) whose name an earlier node has ('conv' → 'conv_3', 'conv' → 'conv_4'): deployopt keys "
        "convs and channel groups by node name, and onnxruntime refuses repeated names; models written "
        "from this one keep the new names"
    ]
    analysis = analyze(loaded.model)
    convs = {c.name: (c.shape.c, c.shape.k, c.out_group) for c in analysis.convs}
    assert convs == {
        "conv": (3, 8, "conv"),
        "conv_3": (8, 12, "conv_3"),
        "Conv_6_2": (12, 6, "Conv_6_2"),
        "conv_4": (6, 4, "conv_4"),
    }
    plan = {"conv": 11, "conv_3": 16, "Conv_6_2": 9}
    after = {name: (s.c, s.k) for name, s in analysis.conv_shapes(plan).items()}
    assert after == {"conv": (3, 11), "conv_3": (11, 16), "Conv_6_2": (16, 9), "conv_4": (9, 4)}
    padded = apply_plan(loaded.model, plan, analysis)
    assert [node.name for node in padded.graph.node] == UNIQUE
    np.testing.assert_array_equal(run(padded), run(loaded.model))  # onnxruntime loads both now
    assert {c.name: (c.shape.c, c.shape.k) for c in analyze(padded).convs} == after


def test_unnamed_nodes_get_the_names_analyze_showed_without_a_notice(tmp_path) -> None:
    """An unnamed node becomes `<op type>_<index>`, what `analyze` always called it: nothing a user
    has not seen, so no notice (many exporters leave every node unnamed)."""
    model = _badly_named()
    for node in model.graph.node:
        node.name = ""
    onnx.save(model, tmp_path / "m.onnx")
    loaded = load_model(tmp_path / "m.onnx")
    assert loaded.notices == []
    assert [node.name for node in loaded.model.graph.node][::3] == ["Conv_0", "Conv_3", "Conv_6"]


def test_repeated_node_names_analyzed_as_they_are_get_the_same_unique_names() -> None:
    """The Python API on a model that was not loaded: the analysis uses the names loading would
    give, and `apply_plan` writes them, so its result runs on onnxruntime and analyzes alike."""
    model = _badly_named()
    analysis = analyze(model)
    assert [c.name for c in analysis.convs] == ["conv", "conv_3", "Conv_6_2", "conv_4"]
    assert [g.id for g in analysis.groups] == ["input:x", "conv", "conv_3", "Conv_6_2", "conv_4"]
    trimmed = apply_plan(model, {"conv_3": 9})
    assert [node.name for node in trimmed.graph.node] == UNIQUE
    assert run(trimmed).shape == (1, 4, 8, 8)
    assert {c.name: (c.shape.c, c.shape.k) for c in analyze(trimmed).convs} == {
        "conv": (3, 8), "conv_3": (8, 9), "Conv_6_2": (9, 6), "conv_4": (6, 4)
    }  # fmt: skip


def test_the_size_check_counts_every_conv_of_a_repeated_name(monkeypatch) -> None:
    """The 2 GiB check summed every conv's growth from one shape per name; with four convs named
    "conv" it took the last one's (unchanged) for all, and let a plan through unchecked."""
    model = _badly_named()
    analysis = analyze(model)
    # float32: 3 more filters [3, 3, 3] in the first conv, 3 more input channels in the second's 12,
    # and 3 more entries in the first conv's bias and its BatchNorm's four vectors
    growth = 4 * (3 * 3 * 3 * 3 + 12 * 3 * 3 * 3) + 4 * 3 * 5
    monkeypatch.setattr(surgery, "PROTOBUF_LIMIT", model.ByteSize() + growth - 1)
    with pytest.raises(PlanError, match="2 GiB"):
        apply_plan(model, {"conv": 11}, analysis)
    monkeypatch.setattr(surgery, "PROTOBUF_LIMIT", model.ByteSize() + growth)
    apply_plan(model, {"conv": 11}, analysis)


def test_optimize_prices_and_lists_every_conv_of_a_repeated_name(tmp_path, monkeypatch, capsys) -> None:
    """End to end: optimize refused the model (onnxruntime would not load it for the fidelity
    check); an unnamed conv whose fallback name another node had was left out of the per-layer
    table and of every predicted latency. Every conv is now one row under its new name, and the
    written model carries the names."""
    path = tmp_path / "m.onnx"
    onnx.save(_badly_named(), path)
    out = tmp_path / "o"
    args = ["optimize", str(path), "--target", "h200", "--sms", "8", "--backend", "model", "-o", str(out)]
    code, said, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    # the renames are said, as apply says them: the written model's names are not the input's
    renamed = [n for n in report["load_notices"] if "node" in n and "name" in n]
    assert len(renamed) == 1 and f"notice: {renamed[0]}" in " ".join(said.split())  # unwrapped
    rows = {row["conv"]: row["before"] for row in report["layers"]}
    assert list(rows) == ["conv", "conv_3", "Conv_6_2", "conv_4"]
    assert [g["id"] for g in report["groups"]] == ["conv", "conv_3", "Conv_6_2"]
    assert [node.name for node in onnx.load(out / "model.onnx").graph.node] == UNIQUE


REDUCE_OPS = [
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
    "ReduceProd", "ReduceSumSquare",
]  # fmt: skip


def _reduce_model(op: str, axes: list[int], plus: float) -> onnx.ModelProto:
    """conv1 (8 channels, 16×16) → `+ plus` (a scalar: a padded channel holds `plus`) → `× 0.5` per
    channel (padded with 1: real channels come out near 1) → `op` over `axes` (opset 18: an input)
    → a 1×1 conv; over the channels the statistic is multiplied back in first."""
    n = Net(hw=16, opset=18)
    a = n.conv("x", 8)
    a = n.op("Add", [a, n.init("plus", np.array(plus))])
    a = n.op("Mul", [a, n.init("half", np.full((1, 8, 1, 1), 0.5))])
    n.inits.append(numpy_helper.from_array(np.array(axes, dtype=np.int64), "axes"))
    dims = tuple(1 if i + 1 in axes else d for i, d in enumerate(n.dims[a]))
    r = n.op(op, [a, "axes"], dims, keepdims=1)
    return n.build(n.conv(n.op("Mul", [a, r]) if 1 in axes else r, 4, r=1))


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_a_reduction_over_the_channels_freezes_the_group(op: str) -> None:
    """A padded channel would join every reduction (a 0 in a ReduceProd zeroes it, in a ReduceMin
    of positive values wins it): no exact padding exists, so the group freezes."""
    model = _reduce_model(op, [1], plus=0.0)
    group = _groups(model)["conv1"]
    assert group.frozen and group.reason == f"{op} {op.lower()}4 reduces over channels"
    with pytest.raises(PlanError, match="frozen"):
        apply_plan(model, {"conv1": 13})


def test_a_reduction_without_keepdims_names_the_untraced_axis_it_leaves() -> None:
    """A split-attention block's radix sum ([N, 2, 8, H, W] → [N, 8, H, W], keepdims 0) leaves on
    axis 1 an axis of the input that is not traced as channels: its group freezes saying so. It
    said "reduces over channels", which the sum over the two branches does not."""
    n = Net(hw=8, opset=18)
    a = n.conv("x", 16)
    n.inits.append(numpy_helper.from_array(np.array([1, 2, 8, 8, 8], dtype=np.int64), "split"))
    n.inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"))
    r = n.op("Reshape", [a, "split"], (2, 8, 8))
    s = n.op("ReduceSum", [r, "axes"], (8, 8, 8), keepdims=0)
    model = n.build(n.conv(s, 4, r=1))
    group = _groups(model)[s]
    assert group.frozen
    said = f"ReduceSum {s} drops the channel axis: its output's axis 1 is an axis of the input not traced"
    assert group.reason == said + " as channels"


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_a_spatial_reduction_pads_exactly_and_reduceprod_freezes_where_it_could_overflow(op: str) -> None:
    """Over H and W each channel is reduced on its own, so padding is exact, including where a
    padded channel holds 2 rather than 0 (a scalar added after the conv). ReduceProd raises that
    2 to the 256th power: inf, and the next conv's zero weight made it NaN in every output (the
    group was free). It freezes there; after a zero-padded producer (0 ** 256) or a bounded one
    (tanh: |x| ≤ 1) it stays free and exact."""
    model = _reduce_model(op, [2, 3], plus=2.0)
    assert np.isfinite(run(model)).all()
    group = _groups(model)["conv1"]
    if op == "ReduceProd":
        assert group.frozen and group.reason == (
            "ReduceProd reduceprod4 could overflow a padded channel (a power of its value)"
        )
        for bounded in ("Conv", "Tanh"):
            n = Net(hw=16, opset=18)
            a = n.conv("x", 8)
            a = a if bounded == "Conv" else n.op("Tanh", [n.op("Add", [a, n.init("plus", np.array(2.0))])])
            n.inits.append(numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "axes"))
            free = n.build(n.conv(n.op(op, [a, "axes"], (8, 1, 1), keepdims=1), 4, r=1))
            assert not _groups(free)["conv1"].frozen, bounded
            np.testing.assert_allclose(run(apply_plan(free, {"conv1": 13})), run(free), atol=1e-6, rtol=0)
        return
    assert not group.frozen, group.reason
    padded = apply_plan(model, {"conv1": 13})
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=1e-6)
