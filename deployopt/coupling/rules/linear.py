"""Gemm / MatMul of features × constant weights: consume the input channel set, produce a new one.

Gemm's input is 2-D only after Flatten/GlobalAveragePool; the shape rules make sure a 2-D layout
means one feature per channel (1×1 spatial) or H·W consecutive features per channel (a flattened
map: `ctx.spread`, bound with the weights so padding a channel adds H·W zero rows); otherwise the
features are frozen before they get here. The reduction is recorded on the features the weights
read (a per-element op between, Sigmoid(0) = 0.5, can make a zero channel of the map nonzero
there), and dead-channel detection reads each channel's block of `spread` features.
MatMul also takes [..., C] features with the channels on the last axis (an NHWC map after a
Transpose, as in ConvNeXt's pointwise "Linear" layers, or [N, L, C] tokens) times [C, D] weights:
its output has the new channel set on its last axis.
"""

from __future__ import annotations

import onnx

from deployopt.coupling.registry import CouplingState, rule


@rule("Gemm", spread=True)
def gemm(ctx: CouplingState, node: onnx.NodeProto) -> None:
    a, b = node.input[0], node.input[1]
    c = node.input[2] if len(node.input) > 2 else ""
    weight = ctx.const(b)
    trans_a = int(ctx.attr(node, "transA", 0))
    trans_b = int(ctx.attr(node, "transB", 0))
    if weight is None or ctx.is_const(a) or trans_a or weight.ndim != 2:
        ctx.freeze_node(node, f"Gemm {ctx.name(node)} is not features × constant weights")
        return
    al = ctx.require_layout(a, node)
    n_out = int(weight.shape[0] if trans_b else weight.shape[1])
    out = ctx.new_layout(node, n_out)
    ctx.bind(b, 1 if trans_b else 0, al, 0.0, node, spread=ctx.spread.get(a, 1))
    ctx.bind(b, 0 if trans_b else 1, out, 0.0, node)
    bias = ctx.const(c) if c else None
    if bias is not None and bias.ndim >= 1 and bias.shape[-1] == n_out and n_out > 1:
        ctx.bind(c, bias.ndim - 1, out, 0.0, node)
    elif c and bias is None:
        ctx.freeze(out, f"Gemm {ctx.name(node)} adds a computed bias")
    ctx.consume(a, node)
    ctx.set_layout(node.output[0], out)


@rule("MatMul", any_axis=True, spread=True)
def matmul(ctx: CouplingState, node: onnx.NodeProto) -> None:
    a, b = node.input[0], node.input[1]
    weight = ctx.const(b)
    a_shape = ctx.shape(a)
    if weight is None or weight.ndim != 2 or ctx.is_const(a) or a_shape is None or len(a_shape) < 2:
        ctx.freeze_node(node, f"MatMul {ctx.name(node)} is not [..., C] features × constant [C, D] weights")
        return
    last = len(a_shape) - 1
    if ctx.layout(a) is not None and ctx.channel_axis(a) != last:
        # it contracts an axis that is not the channels (a MatMul over W of an NCHW map)
        ctx.freeze_node(
            node, f"MatMul {ctx.name(node)} contracts axis {last}, not the channel axis {ctx.channel_axis(a)}"
        )
        return
    al = ctx.require_layout(a, node, last)
    out = ctx.new_layout(node, int(weight.shape[1]))
    ctx.bind(b, 0, al, 0.0, node, spread=ctx.spread.get(a, 1))
    ctx.bind(b, 1, out, 0.0, node)
    ctx.consume(a, node)
    ctx.set_layout(node.output[0], out, len(ctx.shape(node.output[0]) or a_shape) - 1)
