"""Concat and Pad on a channels-last tensor between two Transposes (what tf2onnx's transpose
optimizer leaves where it cannot push the Transposes through): Concat(axis=3) is the channel
concat, a SAME Pad of H and W pads no channel, a Pad of axis 3 pads the channels. They froze whole
blocks ("Concat Concat_8 expects channels on axis 1, not axis 3") and made up groups whose width
was the map's height ("Concat_8 w=12", "Pad_3 w=14"): a bug bash's finding 04."""

from __future__ import annotations

import onnx
import pytest
from onnx import numpy_helper
from test_coupling_reshape_nc import G, groups, pad_and_trim

from deployopt.coupling import analyze
from deployopt.surgery import apply_plan

NHWC, NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def nhwc_concat() -> onnx.ModelProto:
    """Two 1×1 branches (19, 7) moved channels-last, concatenated on axis 3, moved back, a 1×1
    conv (26 → 10) added to the stem's output."""
    g = G()
    a = g.node("Relu", [g.conv("x", 4, 10, 3)])
    b1 = g.node("Relu", [g.node("Transpose", [g.conv(a, 10, 19)], perm=NHWC)])
    b2 = g.node("Relu", [g.node("Transpose", [g.conv(a, 10, 7)], perm=NHWC)])
    y = g.node("Transpose", [g.node("Concat", [b1, b2], axis=3)], perm=NCHW)
    y = g.node("Add", [a, g.conv(y, 26, 10)])
    return g.build(g.node("Flatten", [g.node("GlobalAveragePool", [g.conv(y, 10, 3)])]), [1, 4, 12, 12], 13)


def test_channels_last_concat_keeps_its_branches_free() -> None:
    model = nhwc_concat()
    assert groups(model) == {
        "Conv_0": (10, ""),
        "Conv_2": (19, ""),  # were frozen: "Concat Concat_8 expects channels on axis 1, not axis 3"
        "Conv_5": (7, ""),
        "Conv_12": (3, "feeds the graph output 'Flatten_14'"),
    }  # no "Concat_8" w=12 (the map's height) nor "Transpose_9@Conv_10"
    pad_and_trim(model, ["Conv_0", "Conv_2", "Conv_5"])


def nhwc_pad(pads: list[int], opset: int = 13, axes: list[int] | None = None) -> onnx.ModelProto:
    """The stem (10 channels) moved channels-last, Pad(pads) there, moved back, a VALID 3×3 conv
    (to 10 + the channel pads), added to the stem's output when the Pad adds no channel."""
    g = G()
    a = g.node("Relu", [g.conv("x", 4, 10, 3)])
    ins = [g.node("Transpose", [a], perm=NHWC), g.ints(pads)]
    if axes is not None:
        ins += ["", g.ints(axes)]
    t = g.node("Pad", ins, mode="constant")
    if axes is None:
        extra = pads[3] + pads[7]
    else:
        extra = sum(p for ax, p in zip(axes * 2, pads) if ax in (3, -1))
    y = g.conv(g.node("Transpose", [t], perm=NCHW), 10 + extra, 10, 3, pad=False)
    if extra == 0:
        y = g.node("Add", [a, y])
    else:
        y = g.node("Relu", [y])
    head = g.node("Flatten", [g.node("GlobalAveragePool", [g.conv(y, 10, 3)])])
    return g.build(head, [1, 4, 12, 12], opset)


def test_spatial_pad_between_nhwc_transposes_keeps_the_block_free() -> None:
    model = nhwc_pad([0, 1, 1, 0, 0, 1, 1, 0])  # tf's SAME padding of a 3×3 VALID conv
    assert groups(model) == {
        "Conv_0": (10, ""),  # was frozen: "Pad Pad_3 expects channels on axis 1, not axis 3"
        "Conv_7": (3, "feeds the graph output 'Flatten_9'"),
    }  # no "Pad_3" w=14 (the padded height) nor "Transpose_4@Conv_5"
    pad_and_trim(model, ["Conv_0"])


@pytest.mark.parametrize(
    ("pads", "opset", "axes"),
    [
        ([0, 1, 1, 2, 0, 1, 1, 3], 13, None),
        ([0, 0, 0, 2, 0, 0, 0, 3], 17, None),
        ([2, 3], 18, [3]),
        ([1, 2, 1, 3], 18, [1, -1]),
    ],
    ids=["spatial-and-channels", "channels", "axes-3", "axes-1-and-minus-1"],
)
def test_a_zero_pad_of_the_channels_last_axis_adds_zero_channels(
    pads: list[int], opset: int, axes: list[int] | None
) -> None:
    """The Pad's zero blocks (2 before, 3 after the stem's 10) are groups the Pad produces, its
    `pads` entries for axis 3 follow them, and they are exact: every channel in them is 0."""
    model = nhwc_pad(pads, opset, axes)
    assert groups(model) == {
        "Conv_0": (10, ""),
        "Pad_3.before": (2, ""),
        "Pad_3.after": (3, ""),
        "Conv_5": (10, ""),
        "Conv_7": (3, "feeds the graph output 'Flatten_9'"),
    }
    # onnxruntime 1.32's transpose optimizer fails on a Pad-18 `axes` between Transposes (a Gather
    # out of bounds, in the original model too): those run unoptimized
    pad_and_trim(model, ["Conv_0", "Pad_3.before", "Pad_3.after"], optimized=axes is None)
    analysis = analyze(model)
    padded = apply_plan(model, {"Pad_3.before": 5, "Pad_3.after": 4}, analysis)
    pad_node = next(n for n in padded.graph.node if n.op_type == "Pad")
    entries = numpy_helper.to_array(next(t for t in padded.graph.initializer if t.name == pad_node.input[1]))
    want = list(pads)
    k = len(pads) // 2
    at = [3] if axes is None else [j for j, ax in enumerate(axes) if ax in (3, -1)]
    for j in at:
        want[j], want[j + k] = 5, 4
    assert entries.tolist() == want


@pytest.mark.parametrize(("mode", "why"), [("reflect", "in reflect mode"), ("edge", "in edge mode")])
def test_a_pad_of_the_channels_last_axis_in_another_mode_freezes(mode: str, why: str) -> None:
    g = G()
    a = g.node("Relu", [g.conv("x", 4, 10, 3)])
    t = g.node("Pad", [g.node("Transpose", [a], perm=NHWC), g.ints([0, 0, 0, 1, 0, 0, 0, 1])], mode=mode)
    model = g.build(g.conv(g.node("Transpose", [t], perm=NCHW), 12, 3), [1, 4, 6, 6])
    assert groups(model) == {
        "Conv_0": (10, f"Pad Pad_3 pads the channel axis {why}"),
        "Pad_3": (12, f"Pad Pad_3 pads the channel axis {why}"),  # the Pad's output: 12 channels
        "Conv_5": (3, "feeds the graph output 'Conv_5'"),
    }


def test_concat_along_h_of_channels_last_maps_resizes_a_constant_border_on_axis_3() -> None:
    """Concat on axis 1 (H) of NHWC maps with a learned [1, 2, W, C] border: one set, and the
    border is resized along its channel axis, 3 (it was bound on axis 1, its height)."""
    g = G(1)
    a = g.node("Relu", [g.conv("x", 4, 10, 3)])
    border = g.c(g.rng.standard_normal((1, 2, 6, 10)))
    c = g.node("Concat", [g.node("Transpose", [a], perm=NHWC), border], axis=1)  # [1, 8, 6, 10]
    model = g.build(g.conv(g.node("Transpose", [c], perm=NCHW), 10, 3), [1, 4, 6, 6])
    assert groups(model) == {"Conv_0": (10, ""), "Conv_5": (3, "feeds the graph output 'Conv_5'")}
    pad_and_trim(model, ["Conv_0"])
    padded = apply_plan(model, {"Conv_0": 32}, analyze(model))
    assert next(t for t in padded.graph.initializer if t.name == border).dims == [1, 2, 6, 32]


def test_members_on_different_axes_freeze_without_made_up_groups() -> None:
    g = G(2)
    a = g.node("Relu", [g.conv("x", 4, 6, 3)])  # [1, 6, 6, 6]: NCHW, channels on axis 1
    b = g.node("Transpose", [g.node("Relu", [g.conv("x", 4, 6, 3)])], perm=NHWC)  # channels on 3
    model = g.build(g.conv(g.node("Concat", [a, b], axis=1), 12, 3), [1, 4, 6, 6])
    reason = "Concat Concat_5 joins channels that lie on different axes"
    assert groups(model) == {
        "Conv_0": (6, reason),
        "Conv_2": (6, reason),
        "Concat_5": (12, reason),  # its output: 6 channels of one member and 6 rows of the other
        "Conv_6": (3, "feeds the graph output 'Conv_6'"),
    }


def test_an_nhwc_graph_input_padded_after_its_transpose_keeps_the_first_conv_free() -> None:
    """Guard (passes before the change too): tf2onnx's NHWC input → Transpose → SAME Pad (of the
    NCHW tensor) → VALID conv. The input's axis 1 (H) was traced as its channels and moved to
    axis 2; the Pad must not take its pads of H for pads of channels."""
    g = G(3)
    t = g.node("Transpose", ["x"], perm=NCHW)  # [1, 3, 8, 8]
    p = g.node("Pad", [t, g.ints([0, 0, 1, 1, 0, 0, 1, 1])], mode="constant")
    y = g.node("Relu", [g.conv(p, 3, 9, 3, pad=False)])
    model = g.build(g.conv(y, 9, 2), [1, 8, 8, 3])
    assert groups(model) == {
        "Transpose_0@Pad_1": (3, "Pad Pad_1 reads channels that lie on another axis, frozen there"),
        "Conv_2": (9, ""),
        "Conv_4": (2, "feeds the graph output 'Conv_4'"),
    }
    pad_and_trim(model, ["Conv_2"])
