"""Conv: a full conv produces a new channel set and consumes its input's; depthwise passes through.

A grouped conv (1 < groups < C: ResNeXt, RegNet) runs g convs side by side, each reading C/g input
and writing K/g output channels. Its input is cut into g equal pieces joined into one group, and
its output is g new sets of K/g channels joined into one group: such a group's width is the width
*per conv group*. A plan that changes it changes every conv group alike (the tensors hold g × width
channels); the `group` attribute stays g.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import onnx

from deployopt.coupling.registry import ConvRecord, CouplingState, Layout, Segment, rule


def _pieces(layout: Layout, n: int) -> list[Layout]:
    """`layout` (already cut at every multiple of its width / n) as its n equal consecutive pieces."""
    size = sum(w for _, w in layout) // n
    pieces: list[list[Segment]] = [[] for _ in range(n)]
    start = 0
    for seg in layout:
        pieces[start // size].append(seg)
        start += seg[1]
    return [tuple(p) for p in pieces]


def _grouped(
    ctx: CouplingState, node: onnx.NodeProto, xl: Layout, groups: int, k: int, kind: str
) -> tuple[Optional[Layout], Optional[Layout], str]:
    """(one conv group's input layout, the output layout, "") of a grouped conv, or (None, None, reason).

    The input is cut at every multiple of C/g and the pieces are joined segment by segment, so
    every conv group reads the same channel sets in the same order. When the pieces are split
    differently (a Concat boundary that is not on a multiple of C/g), one width per conv group
    cannot describe them: nothing is joined and the reason says so. The output is g new sets of
    K/g channels at offsets j·K/g of this conv's filters (so importance ranks the right rows),
    joined into one group named after the conv.
    """
    name = ctx.name(node)
    width = sum(w for _, w in xl)
    cut = ctx.cut(xl, [j * (width // groups) for j in range(1, groups)], suffix="")
    pieces = _pieces(cut, groups)
    first = [w for _, w in pieces[0]]
    if any([w for _, w in p] != first for p in pieces[1:]):
        return None, None, f"{kind} (groups={groups}) {name}: its conv groups read differently split channels"
    for p in pieces[1:]:
        ctx.union(pieces[0], p, name)
    per = k // groups
    out = tuple((ctx.new_atom(per, name, ctx.index(node), offset=j * per), per) for j in range(groups))
    for seg in out[1:]:
        ctx.union(out[:1], (seg,), name)
    return pieces[0], out, ""


def _unsupported(group: int, c: Optional[int], k: int, op: str, name: str) -> str:
    """Why a conv with groups > 1 that is not depthwise with multiplier 1 stays frozen, or ""."""
    if c is None:  # no shape for the input: whether it is depthwise cannot be told
        return f"{op} with groups={group} on an input of unknown width {name}"
    if group == c:
        return f"depthwise {op} with channel multiplier {k // group} {name}"
    if group > c or c % group or k % group:  # not a valid model: never guess
        return f"grouped {op} (groups={group}) {name} on {c} → {k} channels"
    return ""


def _inputs(ctx: CouplingState, node: onnx.NodeProto) -> Optional[tuple[str, str, str, np.ndarray]]:
    """(X, W, B or "", W's value) of a Conv or ConvTranspose, or None with the node frozen when W is
    not a constant: both read their channel counts off the weights and cut them."""
    x, w = node.input[0], node.input[1]
    b = node.input[2] if len(node.input) > 2 else ""
    weight = ctx.const(w)
    if weight is None:
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} has non-constant weights")
        return None
    return x, w, b, weight


def _bias_scale_pad(ctx: CouplingState, node: onnx.NodeProto) -> float:
    """The scale a quantized bias's padded channels get: the input's scale × the weight's padded
    scale (1.0 per channel), as quantize_static makes every bias scale. onnxruntime fuses
    DQ → Conv → Q into an int8 QLinearConv only where they agree: with 1.0 the padded convs of an
    exact pad of a quantize_static MobileNetV2 ran float (37 → 28 QLinearConv, 5.5 → 10.6 ms on
    one CPU thread), rounding otherwise than the original's int8 kernels. 1.0 where the input's
    scale is not one constant (the padded entries are 0: any scale dequantizes them to 0)."""
    b = node.input[2] if len(node.input) > 2 else ""
    bias_q, weight_q = ctx.quantized_source(b), ctx.quantized_source(node.input[1])
    producer = ctx.producer.get(node.input[0])
    if bias_q is None or weight_q is None or producer is None:
        return 1.0
    dq = ctx.nodes[producer]
    x_scale = ctx.const(dq.input[1]) if dq.op_type == "DequantizeLinear" and len(dq.input) > 1 else None
    w_scale = ctx.const(weight_q.input[1]) if len(weight_q.input) > 1 else None
    if x_scale is None or x_scale.size != 1 or w_scale is None:
        return 1.0
    w_pad = np.float32(1.0) if w_scale.size > 1 else np.float32(w_scale.reshape(-1)[0])
    return float(np.float32(x_scale.reshape(-1)[0]) * w_pad)


def _depthwise(ctx: CouplingState, node: onnx.NodeProto, w: str, b: str, xl: Layout) -> Layout:
    """The output layout of a depthwise conv with multiplier 1 (groups == C == K), Conv or
    ConvTranspose alike: output channel i is input channel i filtered on its own, so it is the
    input's layout, weight axis 0 and the bias follow it, and `group` changes with the width."""
    ctx.bind(w, 0, xl, 0.0, node)
    ctx.bind(b, 0, xl, 0.0, node, scale_pad=_bias_scale_pad(ctx, node))
    ctx.edit_attr(node, "group", xl)
    return xl


def _set_output(
    ctx: CouplingState, node: onnx.NodeProto, xl: Optional[Layout], out: Optional[Layout], k: int, reason: str
) -> Optional[Layout]:
    """Give the output its layout, and return it: `out`, or when `reason` says the conv cannot
    change, its input frozen and a new frozen set of `k` channels."""
    if reason:
        ctx.freeze(xl, reason)
        out = ctx.new_layout(node, k, frozen=reason)
    ctx.set_layout(node.output[0], out)
    return out


@rule("Conv")
def conv(ctx: CouplingState, node: onnx.NodeProto) -> None:
    inputs = _inputs(ctx, node)
    if inputs is None:
        return
    x, w, b, weight = inputs
    group = int(ctx.attr(node, "group", 1))
    xl = ctx.require_layout(x, node)
    k = int(weight.shape[0])
    c = sum(wd for _, wd in xl) if xl else None
    out: Optional[Layout] = None
    if group == 1:
        out = ctx.new_layout(node, k)
        ctx.bind(w, 0, out, 0.0, node)
        ctx.bind(w, 1, xl, 0.0, node)
        ctx.bind(b, 0, out, 0.0, node, scale_pad=_bias_scale_pad(ctx, node))
        ctx.consume(x, node)
        reason = ""
    elif c is not None and group == c and k == c:
        assert xl is not None
        out = _depthwise(ctx, node, w, b, xl)
        reason = ""
    else:
        reason = _unsupported(group, c, k, "conv", ctx.name(node))
        if not reason:
            assert xl is not None
            piece, out, reason = _grouped(ctx, node, xl, group, k, "grouped conv")
            xl = ctx.layout(x)  # now cut into the conv groups' pieces
            if not reason:
                ctx.bind(w, 0, out, 0.0, node)
                ctx.bind(w, 1, piece, 0.0, node)  # weights [K, C/g, R, S]: one conv group's inputs
                ctx.bind(b, 0, out, 0.0, node, scale_pad=_bias_scale_pad(ctx, node))
                ctx.consume(x, node)
    out = _set_output(ctx, node, xl, out, k, reason)
    if xl is not None:
        ctx.convs.append(ConvRecord(ctx.index(node), x, xl, out, tuple(int(d) for d in weight.shape)))


@rule("ConvTranspose")
def conv_transpose(ctx: CouplingState, node: onnx.NodeProto) -> None:
    # weights are [C, K/group, R, S]: input channels on axis 0, output channels on axis 1
    inputs = _inputs(ctx, node)
    if inputs is None:
        return
    x, w, b, weight = inputs
    group = int(ctx.attr(node, "group", 1))
    xl = ctx.require_layout(x, node)
    c = int(weight.shape[0])
    k = int(weight.shape[1]) * group
    out: Optional[Layout] = None
    reason = ""
    if group == 1:
        out = ctx.new_layout(node, k)
        ctx.bind(w, 0, xl, 0.0, node)
        ctx.bind(w, 1, out, 0.0, node)
        ctx.bind(b, 0, out, 0.0, node, scale_pad=_bias_scale_pad(ctx, node))
        ctx.consume(x, node)
    elif group == c and k == c and xl is not None:
        out = _depthwise(ctx, node, w, b, xl)
    else:
        name = ctx.name(node)
        xc = sum(wd for _, wd in xl) if xl is not None else None
        reason = _unsupported(group, xc, k, "ConvTranspose", name)
        if not reason and xc != c:
            reason = f"grouped ConvTranspose (groups={group}) {name}: {xc} channels, weights for {c}"
        if not reason:
            assert xl is not None
            _, out, reason = _grouped(ctx, node, xl, group, k, "grouped ConvTranspose")
            xl = ctx.layout(x)  # now cut into the conv groups' pieces
            if not reason:
                assert out is not None
                ctx.bind(w, 0, xl, 0.0, node)  # weights [C, K/g, R, S]: every input channel …
                ctx.bind(w, 1, out[:1], 0.0, node)  # … and one conv group's outputs
                ctx.bind(b, 0, out, 0.0, node, scale_pad=_bias_scale_pad(ctx, node))
                ctx.consume(x, node)
    _set_output(ctx, node, xl, out, k, reason)
