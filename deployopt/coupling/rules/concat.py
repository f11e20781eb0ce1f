"""Concat along channels keeps each member's group; consumers see the members at their offsets."""

from __future__ import annotations

import onnx

from deployopt.coupling.registry import CouplingState, Layout, normalize_axis, rule


@rule("Concat")
def concat(ctx: CouplingState, node: onnx.NodeProto) -> None:
    out = node.output[0]
    rank = len(ctx.shape(out) or [])
    if rank < 2:
        ctx.freeze_node(node, f"Concat {ctx.name(node)}: output shape unknown")
        return
    axis = normalize_axis(int(ctx.attr(node, "axis", 1)), rank)
    if axis != 1:
        ctx.pass_through(node, range(len(node.input)))
        return
    layout: list = []
    for t in node.input:
        if not t:
            continue
        lay = ctx.require_layout(t, node)
        if lay is None:
            ctx.freeze_node(node, f"Concat {ctx.name(node)}: a member's channels are unknown")
            return
        if ctx.is_const(t):
            ctx.freeze(lay, f"Concat {ctx.name(node)} joins a constant")
        layout.extend(lay)
    merged: Layout = tuple(layout)
    ctx.set_layout(out, merged)


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


@rule("Slice")
def slice_(ctx: CouplingState, node: onnx.NodeProto) -> None:
    rank = len(ctx.shape(node.input[0]) or [])
    axes = None
    if ctx.opset < 10:
        axes = ctx.attr(node, "axes", None)
        starts = ctx.attr(node, "starts", [])
    else:
        s = ctx.const(node.input[1])
        a = ctx.const(node.input[3]) if len(node.input) > 3 and node.input[3] else None
        if s is None or (len(node.input) > 3 and node.input[3] and a is None):
            ctx.freeze_node(node, f"Slice {ctx.name(node)} has computed bounds")
            return
        axes = None if a is None else [int(v) for v in a.ravel()]
        starts = list(s.ravel())
    if axes is None:
        axes = list(range(len(starts)))
    if rank >= 2 and 1 not in [normalize_axis(int(a), rank) for a in axes]:
        ctx.pass_through(node)
        return
    ctx.freeze_node(node, f"Slice {ctx.name(node)} cuts the channel axis")
