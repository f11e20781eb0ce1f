"""Normalizations: per-channel ones pass channels through; those that mix channels freeze.

LayerNormalization normalizes over the axes from `axis` on. When the channel axis is among them
(over C,H,W in NCHW; over the last axis after ConvNeXt's NCHW -> NHWC Transpose), its output keeps
the input's channel set, but that set is frozen: zero channels padded into it would change the
mean and variance of every position, so no padding of it is exact. When the channel axis is not
normalized (an NCHW LayerNorm over W), each channel is normalized on its own and the channels pass
through (a padded channel then holds the bias, a finite constant every consumer reads with zero
weights, like Sigmoid(0) in an SE block).
"""

from __future__ import annotations

import onnx

from deployopt.coupling.registry import CouplingState, normalize_axis, rule


def _no_epsilon(ctx: CouplingState, node: onnx.NodeProto) -> bool:
    """Freezes `node` when its epsilon is 0 (or less) and says so. A padded channel is constant over
    what it normalizes (0 after a conv, a bias after a BatchNorm), so its variance is 0, and with no
    epsilon it normalizes to 0/0 = NaN, which the next conv's zero weights do not cancel (NaN·0 is
    NaN): every output NaN, where the model's own channels vary and stay finite."""
    if float(ctx.attr(node, "epsilon", 1e-5)) > 0:
        return False
    ctx.freeze_node(
        node, f"{node.op_type} {ctx.name(node)} has epsilon 0: a padded channel's variance 0 would give NaN"
    )
    return True


@rule("BatchNormalization")
def batch_norm(ctx: CouplingState, node: onnx.NodeProto) -> None:
    # padded channel: scale 0, bias 0, mean 0, var 1 -> exactly 0 whatever reaches it. In training
    # mode (opset 14+) it uses the batch's own statistics instead, the padded channel's variance 0
    if int(ctx.attr(node, "training_mode", 0)) and _no_epsilon(ctx, node):
        return
    lay = ctx.pass_through(node)
    for i, pad in zip(range(1, 5), (0.0, 0.0, 0.0, 1.0)):
        if i < len(node.input):
            ctx.bind(node.input[i], 0, lay, pad, node)


@rule("InstanceNormalization")
def instance_norm(ctx: CouplingState, node: onnx.NodeProto) -> None:
    if _no_epsilon(ctx, node):
        return
    lay = ctx.pass_through(node)
    ctx.bind(node.input[1], 0, lay, 0.0, node)
    ctx.bind(node.input[2], 0, lay, 0.0, node)


@rule("LayerNormalization", any_axis=True)
def layer_norm(ctx: CouplingState, node: onnx.NodeProto) -> None:
    x, y = node.input[0], node.output[0]
    lay = ctx.layout(x)
    rank = len(ctx.shape(x) or [])
    if lay is None or rank < 2 or any(node.output[1:]):  # Mean / InvStdDev outputs: training graphs
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} normalizes across channels")
        return
    first = normalize_axis(int(ctx.attr(node, "axis", -1)), rank)
    channel = ctx.channel_axis(x)
    if channel >= first:
        ctx.freeze(
            lay,
            f"LayerNormalization {ctx.name(node)} normalizes over the channel axis "
            "(padded channels would change its mean and variance)",
        )
    elif _no_epsilon(ctx, node):
        return
    ctx.set_layout(y, lay, channel)  # same channels, same axis: one group with its input


@rule("GroupNormalization")
def group_norm(ctx: CouplingState, node: onnx.NodeProto) -> None:
    ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} normalizes across channels")
