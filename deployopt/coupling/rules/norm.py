"""Normalizations: per-channel ones pass channels through; those that mix channels freeze."""

from __future__ import annotations

import onnx

from deployopt.coupling.registry import CouplingState, rule


@rule("BatchNormalization")
def batch_norm(ctx: CouplingState, node: onnx.NodeProto) -> None:
    # padded channel: scale 0, bias 0, mean 0, var 1 -> exactly 0 whatever reaches it
    lay = ctx.pass_through(node)
    for i, pad in zip(range(1, 5), (0.0, 0.0, 0.0, 1.0)):
        if i < len(node.input):
            ctx.bind(node.input[i], 0, lay, pad, node)


@rule("InstanceNormalization")
def instance_norm(ctx: CouplingState, node: onnx.NodeProto) -> None:
    lay = ctx.pass_through(node)
    ctx.bind(node.input[1], 0, lay, 0.0, node)
    ctx.bind(node.input[2], 0, lay, 0.0, node)


@rule("LayerNormalization", "GroupNormalization")
def mixing_norm(ctx: CouplingState, node: onnx.NodeProto) -> None:
    ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} normalizes across channels")
