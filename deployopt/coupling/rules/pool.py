"""Pooling, resizing, padding and spatial reductions: each channel is handled on its own."""

from __future__ import annotations

import onnx

from deployopt.coupling.registry import CouplingState, normalize_axis, rule


@rule("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "MaxRoiPool")
def pool(ctx: CouplingState, node: onnx.NodeProto) -> None:
    ctx.pass_through(node)


@rule("Resize", "Upsample")
def resize(ctx: CouplingState, node: onnx.NodeProto) -> None:
    if node.op_type == "Upsample" and len(node.input) < 2:
        scales = ctx.attr(node, "scales", None)
        scale_in = ""
    else:
        scale_in = (
            node.input[1]
            if node.op_type == "Upsample" or ctx.opset < 11
            else (node.input[2] if len(node.input) > 2 else "")
        )
        scales = ctx.const(scale_in) if scale_in else None
    sizes_in = node.input[3] if node.op_type == "Resize" and len(node.input) > 3 else ""
    sizes = ctx.const(sizes_in) if sizes_in else None
    if (scale_in and scales is None) or (sizes_in and sizes is None):
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} has computed scales/sizes")
        return
    axes = ctx.attr(node, "axes", None)
    if axes is not None:
        rank = len(ctx.shape(node.input[0]) or [])
        if 1 in [normalize_axis(int(a), rank) for a in axes]:
            ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} resizes the channel axis")
        else:
            ctx.pass_through(node)
        return
    if scales is not None and len(scales) > 1 and float(scales.ravel()[1]) != 1.0:
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} resizes the channel axis")
        return
    lay = ctx.pass_through(node)
    if sizes is not None and sizes.size > 1 and lay is not None:
        ctx.edit_shape(sizes_in, 1, lay, node)


@rule("Pad")
def pad(ctx: CouplingState, node: onnx.NodeProto) -> None:
    rank = len(ctx.shape(node.input[0]) or [])
    if ctx.opset < 11:
        pads = ctx.attr(node, "pads", None)
    else:
        pads_arr = ctx.const(node.input[1]) if len(node.input) > 1 else None
        pads = None if pads_arr is None else [int(v) for v in pads_arr.ravel()]
        axes_in = node.input[3] if len(node.input) > 3 else ""
        if axes_in:
            ax = ctx.const(axes_in)
            if ax is None or pads is None:
                pads = None
            else:  # expand to full-rank pads
                full = [0] * (2 * rank)
                n = len(ax.ravel())
                for j, a in enumerate(ax.ravel()):
                    a = normalize_axis(int(a), rank)
                    full[a], full[a + rank] = pads[j], pads[j + n]
                pads = full
    if pads is None or rank < 2:
        ctx.freeze_node(node, f"Pad {ctx.name(node)} has computed pads")
        return
    if pads[1] != 0 or pads[1 + rank] != 0:
        ctx.freeze_node(node, f"Pad {ctx.name(node)} pads the channel axis")
        return
    ctx.pass_through(node)


@rule("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
      "ReduceProd", "ReduceSumSquare", any_axis=True)  # fmt: skip
def reduce(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """Over other axes: channels pass through (on the axis they land on without `keepdims`).

    Over the channel axis (CBAM's channel mean/max, a LayerNorm that an opset < 17 export spelled
    out as ReduceMean, Sub, Pow, Sqrt, Div on a channels-last tensor): the input's channels freeze,
    and with `keepdims` the output is a one-channel statistic on the same axis, so the ops that
    broadcast it back over the channels still know where the channels are.
    """
    x, y = node.input[0], node.output[0]
    rank = len(ctx.shape(x) or [])
    axes = ctx.attr(node, "axes", None)
    if axes is None and len(node.input) > 1 and node.input[1]:
        arr = ctx.const(node.input[1])
        if arr is None:
            ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} has computed axes")
            return
        axes = [int(v) for v in arr.ravel()]
    if rank < 2:
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)}: input shape unknown")
        return
    if not axes and ctx.attr(node, "noop_with_empty_axes", 0):  # no axes: the op is an identity
        ctx.pass_through(node)
        return
    channel = ctx.channel_axis(x)
    keep = bool(ctx.attr(node, "keepdims", 1))
    reduced = set(range(rank)) if not axes else {normalize_axis(int(a), rank) for a in axes}
    if channel in reduced:
        reason = f"{node.op_type} {ctx.name(node)} reduces over channels"
        ctx.freeze(ctx.require_layout(x, node), reason)
        if keep and ctx.channels(y) is not None:
            ctx.set_axis(y, channel)
            ctx.set_layout(y, ctx.new_layout(node, 1, frozen=reason, statistic=True), channel)
        else:
            ctx.freeze_node(node, reason)
        return
    lay = ctx.layout(x)
    if lay is None:
        return
    out_axis = channel if keep else channel - sum(1 for a in reduced if a < channel)
    ys = ctx.shape(y)
    if ys is not None and (out_axis >= len(ys) or ys[out_axis] != sum(w for _, w in lay)):
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)}: output shape does not match its axes")
        return
    ctx.set_layout(y, lay, out_axis)


@rule("SpaceToDepth", "DepthToSpace", "ChannelShuffle")
def rearrange(ctx: CouplingState, node: onnx.NodeProto) -> None:
    ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} rearranges channels")
