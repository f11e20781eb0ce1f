"""Pooling, resizing, padding and spatial reductions: each channel is handled on its own."""

from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from deployopt.coupling.registry import CouplingState, Layout, normalize_axis, rule
from deployopt.coupling.rules.elementwise import padded_within_one


@rule("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "MaxRoiPool")
def pool(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """Each channel pooled on its own. MaxPool's Indices output, where read, freezes: its values
    are flat offsets into the N·C·H·W input, which a channel added before others (or any at batch
    > 1) shifts."""
    indices = node.output[1] if node.op_type == "MaxPool" and len(node.output) > 1 else ""
    if indices and (ctx.users.get(indices) or ctx.is_graph_output(indices)):
        ctx.freeze_node(node, f"MaxPool {ctx.name(node)}'s Indices output numbers the channels in its values")
        return
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


@rule("Pad", any_axis=True)
def pad(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """Spatial pads pass channels through; a zero Pad of the channel axis adds zero channels.

    A CIFAR ResNet's option-A shortcut, `F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, p, p))`, pads the
    channel axis with zeros. The output's channels are [`before` new channels] + the input's
    channels + [`after` new channels]: each run of new channels is an atom of its own (none for
    a pad of 0), produced by the Pad, and the entries of `pads` for the channel axis (the `pads`
    input from opset 11, the attribute before) follow the widths a plan gives those atoms.

    Exact: such an atom holds only zeros. Surgery pads an atom by appending channels at its end;
    the Pad writes the new zeros at the beginning or the end of its zero block instead, which is
    the same tensor since every channel in the block is 0. Trimming one drops a zero channel. Where
    the residual Add joins a zero atom with a conv's output channels, the group moves both together
    (the conv gains zero filters, the Pad more zeros). Importance sees the Pad as a producer with
    zero filters, so channels that are zero where they are read come out dead.

    A reflect or edge Pad, a nonzero constant value, computed pads or value, and negative pads
    (a crop) of the channel axis freeze.

    The channel axis is the input's, wherever a Transpose put it: tf2onnx leaves a SAME Pad of H
    and W ([0, 1, 1, 0, 0, 1, 1, 0]) on the NHWC tensor between two Transposes, which pads no
    channel, and a Pad of axis 3 there pads the channels. An input traced off axis 1 whose set is
    frozen is read on axis 1, as the walk reads it for an NCHW op (an NHWC graph input's H was
    traced as its channels: `CouplingState.forget_frozen_moved`).
    """
    name = ctx.name(node)
    rank = len(ctx.shape(node.input[0]) or [])
    ctx.forget_frozen_moved(node)
    channel = ctx.channel_axis(node.input[0])
    out = node.output[0]
    ctx.set_axis(out, channel)  # frozen below, its set is still where the channels are
    pads: Optional[list[int]] = None
    where = (channel, channel + rank)  # entries of `pads` that hold the channel axis's begin and end
    if ctx.opset < 11:
        pads = ctx.attr(node, "pads", None)
        value = float(ctx.attr(node, "value", 0.0))
    else:
        pads_arr = ctx.const(node.input[1]) if len(node.input) > 1 and node.input[1] else None
        pads = None if pads_arr is None else [int(v) for v in pads_arr.ravel()]
        value_in = node.input[2] if len(node.input) > 2 else ""
        value_arr = ctx.const(value_in) if value_in else np.zeros(1)
        value = float("nan") if value_arr is None or value_arr.size != 1 else float(value_arr.ravel()[0])
        axes_in = node.input[3] if len(node.input) > 3 else ""
        if axes_in:
            ax = ctx.const(axes_in)
            if ax is None or pads is None or rank < 2:
                pads = None
            else:  # expand to full-rank pads
                full = [0] * (2 * rank)
                n = len(ax.ravel())
                where = (-1, -1)
                for j, a in enumerate(ax.ravel()):
                    a = normalize_axis(int(a), rank)
                    full[a], full[a + rank] = pads[j], pads[j + n]
                    if a == channel:
                        where = (j, j + n)
                pads = full
    if pads is None or rank < 2 or len(pads) != 2 * rank or channel >= rank:
        ctx.freeze_node(node, f"Pad {name} has computed pads")
        return
    before, after = int(pads[channel]), int(pads[channel + rank])
    if before == 0 and after == 0:
        ctx.pass_through(node)
        return
    mode = ctx.attr(node, "mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode != "constant":
        ctx.freeze_node(node, f"Pad {name} pads the channel axis in {mode} mode")
        return
    if value != value:  # NaN: a computed (or not scalar) value
        ctx.freeze_node(node, f"Pad {name} pads the channel axis with a computed value")
        return
    if value != 0.0:
        ctx.freeze_node(node, f"Pad {name} pads the channel axis with {value:g}, not 0")
        return
    if before < 0 or after < 0:
        ctx.freeze_node(node, f"Pad {name} crops the channel axis (negative pads)")
        return
    lay = ctx.require_layout(node.input[0], node, channel)
    width = ctx.channels(out)
    if lay is None or (width is not None and width != before + sum(w for _, w in lay) + after):
        ctx.freeze_node(node, f"Pad {name}: its output's channels do not add up")
        return
    layout = list(lay)
    for k, (w, tag, index) in enumerate(((before, "before", where[0]), (after, "after", where[1]))):
        if w == 0:
            continue
        zeros: Layout = ((ctx.new_atom(w, f"{name}.{tag}", ctx.index(node)), w),)
        if k == 0:
            layout = [*zeros, *layout]
        else:
            layout = [*layout, *zeros]
        if ctx.opset < 11:
            ctx.edit_attr(node, "pads", zeros, index=index)
        else:
            ctx.edit_shape(node.input[1], index, zeros, node)
    ctx.set_layout(out, tuple(layout), channel)


@rule("ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
      "ReduceProd", "ReduceSumSquare", any_axis=True)  # fmt: skip
def reduce(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """Over other axes: channels pass through (on the axis they land on without `keepdims`).

    Over the channel axis (CBAM's channel mean/max, a LayerNorm that an opset < 17 export spelled
    out as ReduceMean, Sub, Pow, Sqrt, Div on a channels-last tensor): the input's channels freeze,
    and with `keepdims` the output is a one-channel statistic on the same axis, so the ops that
    broadcast it back over the channels still know where the channels are.

    A padded channel holds one value at every position (0 after a conv, 2 after `+ 2`): the other
    reductions of it stay within a factor of the element count, but a ReduceProd raises it to that
    power, so 2 over 16×16 positions is inf, and the next conv's zero weight makes it NaN in every
    output. ReduceProd keeps the channels free only where they lie in [-1, 1].
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
            # without keepdims the output's axis `channel` is one the input had after it (the 32
            # channels of a split-attention block's [N, radix, 32, H, W] after its radix sum): it
            # is untraced, which is why it freezes; "reduces over channels" misread it
            ctx.freeze_node(
                node,
                f"{node.op_type} {ctx.name(node)} drops the channel axis: its output's axis {channel} "
                "is an axis of the input not traced as channels",
            )
        return
    lay = ctx.layout(x)
    if lay is None:
        return
    if node.op_type == "ReduceProd" and not padded_within_one(ctx, x):
        ctx.freeze(lay, f"ReduceProd {ctx.name(node)} could overflow a padded channel (a power of its value)")
    out_axis = channel if keep else channel - sum(1 for a in reduced if a < channel)
    ys = ctx.shape(y)
    if ys is not None and (out_axis >= len(ys) or ys[out_axis] != sum(w for _, w in lay)):
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)}: output shape does not match its axes")
        return
    ctx.set_layout(y, lay, out_axis)


@rule("SpaceToDepth", "DepthToSpace", "ChannelShuffle")
def rearrange(ctx: CouplingState, node: onnx.NodeProto) -> None:
    ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} rearranges channels")
