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
    rank = len(ctx.shape(node.input[0]) or [])
    axis = normalize_axis(int(ctx.attr(node, "axis", 0)), rank) if rank else -1
    if axis != 1 and rank >= 2:
        ctx.pass_through(node)
        return
    ctx.freeze_node(node, f"Split {ctx.name(node)} cuts a channel set at fixed sizes")


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
