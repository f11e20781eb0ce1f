"""Graphs at the edges of what the coupling rules see. Each must either pad exactly and trim to a
valid model, or freeze with its reason."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_coupling import Net
from test_surgery import run

from deployopt.coupling import analyze
from deployopt.errors import PlanError
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
