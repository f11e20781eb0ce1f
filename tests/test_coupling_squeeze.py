"""Squeeze/Unsqueeze read their axes: at width 1 the shapes alone cannot tell the channel axis."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fuzz_graphs import assert_same, const, model, run
from onnx import helper

from deployopt.coupling import analyze
from deployopt.errors import PlanError
from deployopt.surgery import apply_plan


def squeezed(k: int, axes: list[int] | None, opset: int = 17, op: str = "Squeeze") -> onnx.ModelProto:
    """Conv(K=k) → GlobalAveragePool → Squeeze(axes) → Flatten → Gemm, as the fuzzer built it."""
    r = np.random.default_rng(0)
    if opset >= 13:
        ins = ["p"] + (["ax"] if axes is not None else [])
        sq = helper.make_node("Squeeze", ins, ["s"], name="sq")
    else:
        attrs = {"axes": axes} if axes is not None else {}
        sq = helper.make_node("Squeeze", ["p"], ["s"], name="sq", **attrs)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("GlobalAveragePool", ["c"], ["p"], name="gap"),
        sq,
    ]
    inits = [const("w", r.standard_normal([k, 3, 3, 3]))]
    if opset >= 13 and axes is not None:
        inits.append(const("ax", axes, np.int64))
    if axes is None:  # every 1-dim goes: a scalar at k = 1, scaled to 5 outputs
        nodes.append(helper.make_node("Mul", ["s", "g"], ["y"], name="scale"))
        inits.append(const("g", r.standard_normal([5])))
        return model(nodes, inits, [5], opset=opset)
    nodes.append(helper.make_node("Flatten", ["s"], ["f"], name="fl"))
    nodes.append(helper.make_node("Gemm", ["f", "g"], ["y"], name="gemm"))
    feat = 1 if 1 in [a % 4 for a in axes] else k  # what the Flatten makes of the squeezed map
    inits.append(const("g", r.standard_normal([feat, 5])))
    return model(nodes, inits, [1, 5], opset=opset)


@pytest.mark.parametrize("opset", [11, 17])
@pytest.mark.parametrize("axes", [[1], [-3]])
def test_squeeze_axes_decide_whether_one_channel_is_free(opset: int, axes: list[int]) -> None:
    # [1, 1, 1, 1] → [1, 1, 1] either way: only the axes tell the channel axis from a spatial one
    m = squeezed(1, axes, opset)
    group = analyze(m).group("conv")
    assert group.frozen and group.reason == "Squeeze sq removes the channel axis"
    with pytest.raises(PlanError, match=r"frozen .*Squeeze sq removes the channel axis"):
        apply_plan(m, {"conv": 4}, analyze(m))
    # no axes: every 1-dim, the channel axis too at width 1 (a trim to 1 would remove it)
    assert "Squeeze sq has no axes" in analyze(squeezed(1, None, opset)).group("conv").reason
    # the spatial axes: the channels pass through, at width 1 and at 4
    for k in (1, 4):
        spatial = squeezed(k, [2, 3], opset)
        analysis = analyze(spatial)
        assert not analysis.group("conv").frozen
        assert_same(run(apply_plan(spatial, {"conv": k + 3}, analysis)), run(spatial))


def unsqueezed(k: int, axes: list[int]) -> onnx.ModelProto:
    """Conv(K=k) → GAP → Flatten [1, k] → Unsqueeze(axes) → Flatten → Gemm."""
    r = np.random.default_rng(0)
    rank = 2 + len(axes)
    shape = [1, k]
    for a in sorted(x % rank for x in axes):
        shape.insert(a, 1)
    feat = int(np.prod(shape[1:]))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("GlobalAveragePool", ["c"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="fl"),
        helper.make_node("Unsqueeze", ["f", "ax"], ["u"], name="unsq"),
        helper.make_node("Flatten", ["u"], ["f2"], name="fl2"),
        helper.make_node("Gemm", ["f2", "g"], ["y"], name="gemm"),
    ]
    inits = [const("w", r.standard_normal([k, 3, 3, 3])), const("ax", axes, np.int64)]
    inits.append(const("g", r.standard_normal([feat, 5])))
    return model(nodes, inits, [1, 5])


@pytest.mark.parametrize("axes", [[1], [0], [-3]])
def test_unsqueeze_axes_decide_whether_one_channel_is_free(axes: list[int]) -> None:
    # [1, 1] → [1, 1, 1]: the same leading dims, but the channels now lie on axis 2
    group = analyze(unsqueezed(1, axes)).group("conv")
    assert group.frozen and group.reason == "Unsqueeze unsq moves the channel axis off axis 1"
    # after the channel axis ([N, C] → [N, C, 1, 1]): the channels pass through
    for k in (1, 4):
        m = unsqueezed(k, [2, 3])
        analysis = analyze(m)
        assert not analysis.group("conv").frozen
        assert_same(run(apply_plan(m, {"conv": k + 3}, analysis)), run(m))
