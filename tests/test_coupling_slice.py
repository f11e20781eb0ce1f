"""Slices of the channel axis: cut like a Split, their bounds follow the plan (GhostNet, C2f's chunk)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from test_coupling import Net
from test_surgery import padded_plan, run

from deployopt.coupling import analyze
from deployopt.importance import dead_channels_many
from deployopt.surgery import apply_plan, apply_plan_report

INT64_MAX = 2**63 - 1


def ints(n: Net, name: str, values: list[int]) -> str:
    n.inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
    return name


def channel_slice(n: Net, x: str, start: int, end: int, step: int | None = None) -> str:
    """x[:, start:end(:step)] with constant bounds, as torch exports it (opset ≥ 10)."""
    k = n.n + 1
    ins = [x, ints(n, f"s{k}.starts", [start]), ints(n, f"s{k}.ends", [end]), ints(n, f"s{k}.axes", [1])]
    if step is not None:
        ins.append(ints(n, f"s{k}.steps", [step]))
    c, h, w = n.dims[x]
    width = len(range(c)[start:end:step])
    return n.op("Slice", ins, (width, h, w))


def ghost(n: Net, x: str, oup: int) -> str:
    """GhostNet's module: a primary conv, a cheap depthwise conv of it, both joined, cut to `oup`."""
    init = -(-oup // 2)
    a = n.cbr(x, init, r=1)
    cheap = n.op("Relu", [n.bn(n.conv(a, init, group=init))])
    return channel_slice(n, n.concat(a, cheap), 0, oup)


def check_exact_and_trimmable(model: onnx.ModelProto) -> None:
    """Padding every free group keeps the output; trimming each by 2 validates and runs; padding and
    trimming back finds the padded channels dead and gives the original output."""
    analysis = analyze(model)
    assert analysis.free_groups()
    ref = run(model)
    padded = apply_plan(model, padded_plan(analysis), analysis)
    np.testing.assert_allclose(run(padded), ref, atol=1e-5, rtol=0)
    trimmed = apply_plan(model, {g.id: max(1, g.width - 2) for g in analysis.free_groups()}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert run(trimmed).shape == ref.shape
    original = {g.id: g.width for g in analysis.free_groups()}
    back, changes = apply_plan_report(padded, original, analyze(padded))
    assert all(c.trimmed == c.dead_trimmed > 0 for c in changes)
    np.testing.assert_allclose(run(back), ref, atol=1e-5, rtol=0)


def test_ghost_module_is_free_and_pads_exactly() -> None:
    """cat([a, cheap(a)])[:, :oup] with oup odd: the cut splits the primary's group where the window
    ends; the pieces pad on their own and the Slice's end follows their new widths."""
    n = Net()
    g = ghost(n, ghost(n, "x", 11), 16)
    model = n.build(n.conv(g, 4))
    analysis = analyze(model)
    assert not [grp.reason for grp in analysis.groups if "Slice" in grp.reason]
    free = {grp.id: grp.width for grp in analysis.free_groups()}
    # first module: 6 primary channels, the window cuts the cheap copy after 5 → pieces of 5 and 1
    assert free == {"conv1[0]": 5, "conv1[1]": 1, "conv9": 8}
    padded = apply_plan(model, {"conv1[0]": 7, "conv1[1]": 4, "conv9": 9}, analysis)
    ends = {t.name: numpy_helper.to_array(t).tolist() for t in padded.graph.initializer if "ends" in t.name}
    assert sorted(ends.values()) == [[18], [18]]  # 7 + 4 + 7 of the first module; 9 + 9 of the second
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    check_exact_and_trimmable(model)


def test_chunk_as_slices_frees_both_halves() -> None:
    """C2f's `chunk(2, 1)` at opsets that export Slices: [0:c/2] and [c/2:INT64_MAX]; the second
    end means "to the end" and stays, the first end and the second start follow the first half."""
    n = Net()
    a = n.cbr("x", 16, r=1)
    lo, hi = channel_slice(n, a, 0, 8), channel_slice(n, a, 8, INT64_MAX)
    b = n.cbr(hi, 8)
    model = n.build(n.conv(n.concat(lo, hi, b), 6, r=1))
    free = {g.id: g.width for g in analyze(model).free_groups()}
    assert free == {"conv1[0]": 8, "conv1[1]": 8, "conv6": 8}
    padded = apply_plan(model, {"conv1[0]": 13, "conv1[1]": 9}, analyze(model))
    bounds = {t.name: numpy_helper.to_array(t).tolist() for t in padded.graph.initializer if t.name[0] == "s"}
    assert bounds["s4.ends"] == bounds["s5.starts"] == [13] and bounds["s5.ends"] == [INT64_MAX]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    check_exact_and_trimmable(model)


def test_negative_bounds_are_read_from_the_end() -> None:
    """x[:, -5:-1]: the window is [11, 15) of 16; the rewritten bounds still count from the end,
    minus the new widths of the pieces after them (4 + 3 and 3): the window is [16, 20) of 23."""
    n = Net()
    a = n.cbr("x", 16, r=1)
    model = n.build(n.conv(n.op("Add", [channel_slice(n, a, -5, -1), n.cbr("x", 4, r=1)]), 3))
    free = {g.id: g.width for g in analyze(model).free_groups()}
    assert free == {"conv1[0]": 11, "conv1[1]": 4, "conv1[2]": 1}
    padded = apply_plan(model, {"conv1[0]": 16, "conv1[2]": 3}, analyze(model))
    bounds = {t.name: numpy_helper.to_array(t).tolist() for t in padded.graph.initializer if t.name[0] == "s"}
    assert (bounds["s4.starts"], bounds["s4.ends"]) == ([-7], [-3])
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    check_exact_and_trimmable(model)


def test_a_negative_bound_follows_the_channels_after_it() -> None:
    """y[:, :5] and y[:, -3:] into two convs: padding only the last three channels' piece left the
    start at -3, recorded against the pieces before it (untouched), so the second conv got 3 of the
    8 channels its weights now take: a model onnxruntime refused, written with exit 0."""
    n = Net()
    a = n.cbr("x", 8, r=1)
    model = n.build(
        n.op("Add", [n.conv(channel_slice(n, a, 0, 5), 4), n.conv(channel_slice(n, a, -3, INT64_MAX), 4)])
    )
    analysis = analyze(model)
    assert {g.id: g.width for g in analysis.free_groups()} == {"conv1[0]": 5, "conv1[1]": 3}
    padded = apply_plan(model, {"conv1[1]": 8}, analysis)
    bounds = {t.name: numpy_helper.to_array(t).tolist() for t in padded.graph.initializer if t.name[0] == "s"}
    assert bounds["s4.starts"] == [0] and bounds["s4.ends"] == [5]
    assert bounds["s6.starts"] == [-8] and bounds["s6.ends"] == [INT64_MAX]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    check_exact_and_trimmable(model)


def test_a_negative_end_moves_with_the_channels_after_the_window() -> None:
    """y[:, 2:-3] averaged over channels: padding the channels after the window kept end = -3, and
    the window took in real channels (outputs off by 0.35, exit 0). The end is -4 for 4 after it."""
    n = Net()
    a = n.cbr("x", 8, r=1)
    window = channel_slice(n, a, 2, -3)
    model = n.build(n.op("Add", [n.op("ReduceMean", [window], (1, 8, 8), axes=[1]), n.conv(a, 1, r=1)]))
    analysis = analyze(model)
    assert {g.id: g.width for g in analysis.free_groups()} == {"conv1[0]": 2, "conv1[2]": 3}
    padded = apply_plan(model, {"conv1[2]": 4}, analysis)
    bounds = {t.name: numpy_helper.to_array(t).tolist() for t in padded.graph.initializer if t.name[0] == "s"}
    assert bounds["s4.ends"] == [-4]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    check_exact_and_trimmable(model)


def test_a_start_counting_back_past_the_axis_freezes() -> None:
    """x[:, -20:] of 8 channels is all of them, until the channels grow past 20."""
    n = Net()
    a = n.cbr("x", 8, r=1)
    model = n.build(n.conv(channel_slice(n, a, -20, INT64_MAX), 4))
    reasons = {g.id: g.reason for g in analyze(model).groups}
    assert reasons["conv1"] == "Slice slice4: its start counts back past the channel axis"


def test_channels_left_out_of_the_window_are_dead() -> None:
    """Nothing reads the 11 channels before x[:, -5:-1] or the one after it: all of them are dead,
    so trimming those pieces to one channel each is exact (what `--mode lossless` may do)."""
    n = Net()
    a = n.cbr("x", 16, r=1)
    model = n.build(n.conv(n.op("Add", [channel_slice(n, a, -5, -1), n.cbr("x", 4, r=1)]), 3))
    analysis = analyze(model)
    dead = dead_channels_many(model, analysis, ["conv1[0]", "conv1[1]", "conv1[2]"])
    assert dead == {"conv1[0]": list(range(11)), "conv1[1]": [], "conv1[2]": [0]}
    trimmed, changes = apply_plan_report(model, {"conv1[0]": 1}, analysis)
    assert [(c.trimmed, c.dead_trimmed) for c in changes] == [(10, 10)]
    assert [t.dims[0] for t in trimmed.graph.initializer if t.name == "conv1.w"] == [6]
    np.testing.assert_allclose(run(trimmed), run(model), atol=1e-5, rtol=0)


def test_opset_9_slice_attributes_follow_the_plan() -> None:
    """Before opset 10 the bounds are attributes: the list entry for the channel axis is edited."""
    n = Net(opset=9)
    a = n.cbr("x", 12, r=1)
    s = n.op("Slice", [a], (8, 6, 8), starts=[0, 2], ends=[8, 8], axes=[1, 2])
    n.dims[s] = (8, 6, 8)
    model = n.build(n.conv(s, 4))
    analysis = analyze(model)
    assert {g.id: g.width for g in analysis.free_groups()} == {"conv1[0]": 8, "conv1[1]": 4}
    padded = apply_plan(model, {"conv1[0]": 10}, analysis)
    node = next(nd for nd in padded.graph.node if nd.op_type == "Slice")
    attrs = {at.name: list(helper.get_attribute_value(at)) for at in node.attribute}
    assert attrs["starts"] == [0, 2] and attrs["ends"] == [10, 8]
    check_exact_and_trimmable(model)


def test_opset_9_negative_slice_attributes_count_from_the_end() -> None:
    """The attribute form of a negative bound: x[:, -4:] keeps counting from the end (-7 for 7)."""
    n = Net(opset=9)
    a = n.cbr("x", 12, r=1)
    s = n.op("Slice", [a], (4, 8, 8), starts=[-4], ends=[12], axes=[1])
    model = n.build(n.op("Add", [n.conv(s, 4), n.conv(a, 4)]))
    analysis = analyze(model)
    assert {g.id: g.width for g in analysis.free_groups()} == {"conv1[0]": 8, "conv1[1]": 4}
    padded = apply_plan(model, {"conv1[1]": 7}, analysis)
    node = next(nd for nd in padded.graph.node if nd.op_type == "Slice")
    attrs = {at.name: list(helper.get_attribute_value(at)) for at in node.attribute}
    assert attrs["starts"] == [-7] and attrs["ends"] == [15]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    check_exact_and_trimmable(model)


@pytest.mark.parametrize(
    ("bounds", "reason"),
    [
        ((0, 12, 2), "Slice slice4 takes every n-th channel or runs backwards"),
        ((11, None, -1), "Slice slice4 takes every n-th channel or runs backwards"),
    ],
)
def test_strided_or_reversed_channel_slices_freeze(bounds: tuple[int, int | None, int], reason: str) -> None:
    n = Net()
    a = n.cbr("x", 12, r=1)
    start, end, step = bounds
    model = n.build(n.conv(channel_slice(n, a, start, -(2**63) if end is None else end, step), 4))
    assert {g.id: g.reason for g in analyze(model).groups}["conv1"] == reason


def test_an_empty_channel_window_freezes() -> None:
    """x[:, 5:5] has no channels: no width of the pieces around it can be told from the plan."""
    n = Net()
    a = n.cbr("x", 12, r=1)
    model = n.build(n.gap(channel_slice(n, a, 5, 5)))
    reasons = {g.id: g.reason for g in analyze(model).groups}
    assert reasons["conv1"] == "Slice slice4: its window of the channel axis is empty or unclear"


def test_computed_bounds_freeze() -> None:
    """An end computed in the graph (not folded to a constant) could be anything after a plan."""
    n = Net()
    a = n.cbr("x", 12, r=1)
    end = n.op("Add", [ints(n, "two", [2]), ints(n, "four", [4])], (0, 0, 0))
    s = n.op("Slice", [a, ints(n, "zero", [0]), end, ints(n, "axis", [1])], (6, 8, 8))
    reasons = {g.id: g.reason for g in analyze(n.build(n.conv(s, 4))).groups}
    assert reasons["conv1"] == "Slice slice5 has computed bounds"


def test_the_same_width_split_differently_is_cut_to_match() -> None:
    """Concat(a, b) + c with c one conv's 16 channels: c is cut into two pieces, each joined with the
    half it is added to (it froze all three as "different widths/split meet"); padding a and b pads
    c's filters at both places, exactly."""
    n = Net()
    a, b = n.conv("x", 8), n.conv("x", 6)
    cat = n.concat(a, b)
    c = n.conv("x", 14)
    model = n.build(n.conv(n.op("Add", [cat, c]), 4))
    analysis = analyze(model)
    free = {g.id: (g.width, g.producers) for g in analysis.free_groups()}
    assert free == {"conv1": (8, ["conv1", "conv4"]), "conv2": (6, ["conv2", "conv4"])}
    padded = apply_plan(model, {"conv1": 11, "conv2": 9}, analysis)
    assert [list(t.dims) for t in padded.graph.initializer if t.name == "conv4.w"] == [[20, 3, 3, 3]]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)


def test_ghost_module_on_the_residual_stream_is_free() -> None:
    """GhostNet's bottleneck: x + ghost(ghost(x)) where x is one conv's output (the stem): the
    stem's channels are cut into the two halves the second ghost module's Concat is made of. It
    froze as "different widths/split meet"; now every width is free and padding is exact."""
    n = Net()
    stem = n.cbr("x", 16)
    y = n.op("Add", [ghost(n, ghost(n, stem, 24), 16), stem])
    model = n.build(n.conv(y, 4))
    analysis = analyze(model)
    assert [g.id for g in analysis.groups if g.frozen] == ["input:x", "conv21"]
    check_exact_and_trimmable(model)
