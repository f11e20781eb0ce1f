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


def _rank(ctx: CouplingState, node: onnx.NodeProto) -> int:
    return len(ctx.shape(node.input[0]) or [])


def _across(ctx: CouplingState, node: onnx.NodeProto) -> None:
    ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} works across channels")


@rule("Softmax", "LogSoftmax", "Hardmax", any_axis=True)
def softmax(ctx: CouplingState, node: onnx.NodeProto) -> None:
    rank = _rank(ctx, node)
    if rank < 2:
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)}: input shape unknown")
        return
    channel = ctx.channel_axis(node.input[0])
    if ctx.opset < 13:  # over axes axis … rank-1 at once
        axis = normalize_axis(int(ctx.attr(node, "axis", 1)), rank)
        clear = axis > channel
    else:
        axis = normalize_axis(int(ctx.attr(node, "axis", -1)), rank)
        clear = axis != channel
    if clear:
        ctx.pass_through(node)
    else:
        _across(ctx, node)


@rule("ArgMax", "ArgMin", any_axis=True)
def argmax(ctx: CouplingState, node: onnx.NodeProto) -> None:
    x, y = node.input[0], node.output[0]
    rank = _rank(ctx, node)
    if rank < 2:
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)}: input shape unknown")
        return
    channel = ctx.channel_axis(x)
    axis = normalize_axis(int(ctx.attr(node, "axis", 0)), rank)
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
    rank = _rank(ctx, node)
    if rank < 2:
        ctx.freeze_node(node, f"TopK {ctx.name(node)}: input shape unknown")
        return
    if normalize_axis(int(ctx.attr(node, "axis", -1)), rank) == ctx.channel_axis(node.input[0]):
        _across(ctx, node)
    else:
        ctx.pass_through(node)
