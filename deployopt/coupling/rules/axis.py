"""Ops that work along one axis: Softmax, LogSoftmax, Hardmax, ArgMax, ArgMin, TopK.

Along an axis other than the channels (a spatial softmax over W, an ArgMax over H, a TopK over the
last axis), each channel is computed from its own values only: a padded channel gives a finite
value of its own (the softmax of zeros is 1/n, their ArgMax index 0), which its readers take with
zero weights, as they take Sigmoid(0) = 0.5; the real channels do not change, and trimming drops
a channel's own results. Channels pass through (ArgMax without `keepdims` moves them down past
the reduced axis). Along the channel axis every output depends on every channel (a padded zero
can win an ArgMax or TopK of negative values, and changes every softmax): frozen.

Before opset 13, Softmax, LogSoftmax and Hardmax coerce the input to 2-D at `axis` (default 1)
and normalize over every axis from `axis` on, so they stay clear of the channels only when
`axis` is after the channel axis (axis 2 of NCHW: over H·W, per channel); from opset 13 they
normalize over `axis` alone (default -1).
"""

from __future__ import annotations

import onnx

from deployopt.coupling.registry import CouplingState, normalize_axis, rule


def _axes(ctx: CouplingState, node: onnx.NodeProto, default: int) -> tuple[int, int] | None:
    """(the node's `axis`, normalized, and its input's channel axis); None, with the node frozen,
    when the input's rank is unknown."""
    rank = len(ctx.shape(node.input[0]) or [])
    if rank < 2:
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)}: input shape unknown")
        return None
    return normalize_axis(int(ctx.attr(node, "axis", default)), rank), ctx.channel_axis(node.input[0])


def _across(ctx: CouplingState, node: onnx.NodeProto) -> None:
    ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} works across channels")


@rule("Softmax", "LogSoftmax", "Hardmax", any_axis=True)
def softmax(ctx: CouplingState, node: onnx.NodeProto) -> None:
    coerced = ctx.opset < 13  # over axes axis … rank-1 at once
    axes = _axes(ctx, node, 1 if coerced else -1)
    if axes is None:
        return
    axis, channel = axes
    if (axis > channel) if coerced else (axis != channel):
        ctx.pass_through(node)
    else:
        _across(ctx, node)


@rule("ArgMax", "ArgMin", any_axis=True)
def argmax(ctx: CouplingState, node: onnx.NodeProto) -> None:
    x, y = node.input[0], node.output[0]
    axes = _axes(ctx, node, 0)
    if axes is None:
        return
    axis, channel = axes
    if axis == channel:
        _across(ctx, node)
        return
    lay = ctx.layout(x)
    if lay is None:
        return  # nothing traced goes in
    out_axis = channel if ctx.attr(node, "keepdims", 1) else channel - int(axis < channel)
    ys = ctx.shape(y)
    if ys is not None and (out_axis >= len(ys) or ys[out_axis] != sum(w for _, w in lay)):
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)}: output shape does not match its axis")
        return
    ctx.set_layout(y, lay, out_axis)


@rule("TopK", any_axis=True)
def topk(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """Values and indices both keep the input's channels on its channel axis (only `axis`
    shrinks to k); `k` counts entries of that axis, never channels, so it needs no edit."""
    axes = _axes(ctx, node, -1)
    if axes is None:
        return
    axis, channel = axes
    if axis == channel:
        _across(ctx, node)
    else:
        ctx.pass_through(node)
