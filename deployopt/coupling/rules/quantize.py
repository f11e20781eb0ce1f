"""QuantizeLinear / DequantizeLinear: the Q/DQ pairs of an INT8 (QDQ) model.

Of activations, a per-tensor Q or DQ (one scale, one zero point) is per element: the channels pass
through on whatever axis they are, flattened ones included (`spread=True`). A padded channel stays
exactly 0 through a pair, whatever the zero point: dq(q(0)) = (zp − zp) · scale = 0; one that
another op made nonzero (Sigmoid(0) = 0.5) stays finite, and its readers give it zero weights.
A per-channel one (`axis` on the channel axis, a 1-D scale of C values) binds its scale (padded
with 1.0) and zero point (0) to the channels. Anything else (a scale along another axis, blocked
quantization, a scale computed at run time) freezes what it touches.

Of constants (a quantized weight, int8 → DequantizeLinear → Conv), nothing happens here: the
registry reads the output as a constant (its dequantized value) and `bind` resizes the integer
weight, scale and zero point along with the op that reads it (CouplingState._bind_quantized).
"""

from __future__ import annotations

import onnx

from deployopt.coupling.registry import CouplingState, normalize_axis, rule


@rule("QuantizeLinear", "DequantizeLinear", any_axis=True, spread=True)
def quantize_linear(ctx: CouplingState, node: onnx.NodeProto) -> None:
    name = f"{node.op_type} {ctx.name(node)}"
    if ctx.is_const(node.output[0]):
        return  # a quantized weight: bound by the op that reads it
    x = node.input[0]
    scale_name, zp_name = node.input[1], node.input[2] if len(node.input) > 2 else ""
    if ctx.is_const(x):
        ctx.freeze_node(node, f"{name} quantizes constants in a form the analysis does not read")
        return
    scale = ctx.const(scale_name)
    zp = ctx.const(zp_name) if zp_name else None
    if scale is None or (zp_name and zp is None):
        ctx.freeze_node(node, f"{name} has a scale or zero point computed at run time")
        return
    if int(ctx.attr(node, "block_size", 0)):
        ctx.freeze_node(node, f"{name} quantizes in blocks")
        return
    if scale.size == 1 and (zp is None or zp.size == 1):
        ctx.pass_through(node)
        return
    if x in ctx.spread:
        ctx.freeze_flattened(node)
        return
    lay = ctx.layout(x)
    rank = len(ctx.shape(x) or [])
    axis = normalize_axis(int(ctx.attr(node, "axis", 1)), rank) if rank else -1
    width = sum(w for _, w in lay) if lay is not None else -1
    if (
        lay is None
        or axis != ctx.channel_axis(x)
        or scale.ndim != 1
        or scale.shape[0] != width
        or (zp is not None and zp.shape != scale.shape)
    ):
        ctx.freeze_node(node, f"{name} quantizes per entry of axis {axis}, not per channel")
        return
    lay = ctx.pass_through(node)
    ctx.bind(scale_name, 0, lay, 1.0, node)
    ctx.bind(zp_name, 0, lay, 0.0, node)
