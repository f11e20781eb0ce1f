"""Concat along channels keeps each member's group; consumers see the members at their offsets."""

from __future__ import annotations

import onnx

from deployopt.coupling.registry import CouplingState, Layout, normalize_axis, rule


def _members_axis(ctx: CouplingState, node: onnx.NodeProto) -> int | None:
    """The channel axis of a Concat's traced members (1 when none is traced), None when they
    disagree. Members on other axes, all in frozen sets, are read on axis 1 first, as the walk
    reads them for an NCHW op (`CouplingState.forget_frozen_moved`)."""
    ctx.forget_frozen_moved(node)
    axes = {
        ctx.channel_axis(t) for t in node.input if t and not ctx.is_const(t) and ctx.layout(t) is not None
    }
    return None if len(axes) > 1 else (axes.pop() if axes else 1)


@rule("Concat", any_axis=True)
def concat(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """On the members' channel axis (axis 1, or axis 3 of a channels-last map between tf2onnx's
    Transposes): the members' sets side by side. On any other axis: one set."""
    out = node.output[0]
    rank = len(ctx.shape(out) or [])
    if rank < 2:
        ctx.freeze_node(node, f"Concat {ctx.name(node)}: output shape unknown")
        return
    channel = _members_axis(ctx, node)
    if channel is None:
        ctx.freeze_node(node, f"Concat {ctx.name(node)} joins channels that lie on different axes")
        return
    axis = normalize_axis(int(ctx.attr(node, "axis", 1)), rank)
    if axis != channel:
        # every member holds all the channels: traced ones join, a constant one (a learned border
        # or token concatenated along H, W or the batch) is resized with them, padded with zeros
        lay = ctx.pass_through(node, [i for i, t in enumerate(node.input) if t and not ctx.is_const(t)])
        for t in node.input:
            if t and ctx.is_const(t):
                ctx.bind(t, channel, lay, 0.0, node)
        return
    layout: list = []
    for t in node.input:
        if not t:
            continue
        lay = ctx.require_layout(t, node, channel)
        if lay is None:
            ctx.freeze_node(node, f"Concat {ctx.name(node)}: a member's channels are unknown")
            return
        if ctx.is_const(t):
            ctx.freeze(lay, f"Concat {ctx.name(node)} joins a constant")
        layout.extend(lay)
    merged: Layout = tuple(layout)
    ctx.set_layout(out, merged, channel)


@rule("Split")
def split(ctx: CouplingState, node: onnx.NodeProto) -> None:
    x = node.input[0]
    rank = len(ctx.shape(x) or [])
    axis = normalize_axis(int(ctx.attr(node, "axis", 0)), rank) if rank else -1
    if axis != 1 and rank >= 2:
        ctx.pass_through(node)
        return
    sizes_in = node.input[1] if ctx.opset >= 13 and len(node.input) > 1 else ""
    if sizes_in:
        arr = ctx.const(sizes_in)
        sizes = None if arr is None else [int(v) for v in arr.ravel()]
    else:
        sizes = ctx.attr(node, "split", None) if ctx.opset < 13 else None
    lay = ctx.require_layout(x, node)
    outs = [ctx.channels(t) for t in node.output]
    if lay is None or not sizes or len(sizes) != len(node.output) or outs != list(sizes):
        # equal splits (no sizes given) would stay equal whatever the plan: keep them as they are
        ctx.freeze_node(node, f"Split {ctx.name(node)} cuts channels at sizes it does not spell out")
        return
    # each output becomes its own channel set (its own group unless joined elsewhere); the
    # producer is cut at the same offsets, and the split sizes follow the pieces' widths
    bounds = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    lay = ctx.cut(lay, bounds)
    starts = [sum(w for _, w in lay[:j]) for j in range(len(lay))]
    for i, t in enumerate(node.output):
        piece = tuple(seg for seg, st in zip(lay, starts) if bounds[i] <= st < bounds[i + 1])
        ctx.set_layout(t, piece)
        if sizes_in:
            ctx.edit_shape(sizes_in, i, piece, node)
        else:
            ctx.edit_attr(node, "split", piece, index=i)


#: an `end` at or beyond this means "to the end of the axis" (torch writes INT64_MAX for `x[:, a:]`)
_TO_THE_END = 2**31 - 1


@rule("Slice")
def slice_(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """A constant window [start, end) of the channel axis: the input is cut at its bounds, like a Split.

    The pieces inside the window are the output's channels (free, joined to whatever reads them);
    the pieces outside it are channels nobody reads after the Slice. `start` and `end` follow the
    plan: each becomes the new width of the pieces before it (an end that means "to the end" stays),
    a negative one minus the new width of the pieces after it (it counts from the end: recorded
    against the pieces before it, `x[:, 2:-3]` kept its -3 when the channels after the window
    changed, and the window moved onto other channels).
    GhostNet's `cat([primary, cheap])[:, :oup]` and C2f's halves at opsets that export `chunk` as
    Slices are the cases that matter. Computed bounds or a step other than 1 freeze.
    """
    x = node.input[0]
    rank = len(ctx.shape(x) or [])
    name = ctx.name(node)
    steps = None
    if ctx.opset < 10:
        starts, ends = ctx.attr(node, "starts", []), ctx.attr(node, "ends", [])
        axes = ctx.attr(node, "axes", None)
    else:
        inputs = list(node.input) + [""] * (5 - len(node.input))
        values = [ctx.const(t) if t else None for t in inputs[1:5]]
        if any(t and v is None for t, v in zip(inputs[1:5], values)):
            ctx.freeze_node(node, f"Slice {name} has computed bounds")
            return
        starts, ends, axes, steps = ([int(v) for v in a.ravel()] if a is not None else None for a in values)
    if axes is None:
        axes = list(range(len(starts)))
    norm = [normalize_axis(int(a), rank) for a in axes] if rank else []
    if rank >= 2 and 1 not in norm:
        ctx.pass_through(node)
        return
    lay = ctx.require_layout(x, node)
    if rank < 2 or lay is None:
        ctx.freeze_node(node, f"Slice {name}: input shape unknown")
        return
    i = norm.index(1)
    width = sum(w for _, w in lay)
    start, end = int(starts[i]), int(ends[i])
    if (steps is not None and int(steps[i]) != 1) or start >= _TO_THE_END:
        ctx.freeze_node(node, f"Slice {name} takes every n-th channel or runs backwards")
        return
    if start < -width:  # before the axis' start, so 0 now, but not once the channels grow past it
        ctx.freeze_node(node, f"Slice {name}: its start counts back past the channel axis")
        return
    lo = min(max(start + width if start < 0 else start, 0), width)
    hi = min(max(end + width if end < 0 else end, 0), width)
    if hi <= lo or ctx.channels(node.output[0]) not in (None, hi - lo):
        ctx.freeze_node(node, f"Slice {name}: its window of the channel axis is empty or unclear")
        return
    lay = ctx.cut(lay, [lo, hi])
    offsets = [sum(w for _, w in lay[:j]) for j in range(len(lay) + 1)]
    ctx.set_layout(node.output[0], tuple(seg for seg, o in zip(lay, offsets) if lo <= o < hi))
    for key, value, bound in (("starts", start, lo), ("ends", end, hi)):
        if value == 0 or (key == "ends" and value >= _TO_THE_END):
            continue  # 0 and "to the end" hold whatever the widths become
        # a negative bound that lands on 0 (a start of exactly -width) still counts from the end:
        # it is edited below like any other, to minus the new width of every piece
        if value < 0:  # counted back from the end: minus the width of the pieces after the bound
            pieces, scale = tuple(seg for seg, o in zip(lay, offsets) if o >= bound), -1
        else:
            pieces, scale = tuple(seg for seg, o in zip(lay, offsets) if o < bound), 1
        if ctx.opset < 10:
            ctx.edit_attr(node, key, pieces, index=i, scale=scale)
        else:
            ctx.edit_shape(node.input[1 if key == "starts" else 2], i, pieces, node, scale=scale)
