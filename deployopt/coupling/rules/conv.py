"""Conv: a full conv produces a new channel set and consumes its input's; depthwise passes through."""

from __future__ import annotations

import onnx

from deployopt.coupling.registry import ConvRecord, CouplingState, rule


@rule("Conv")
def conv(ctx: CouplingState, node: onnx.NodeProto) -> None:
    x, w = node.input[0], node.input[1]
    b = node.input[2] if len(node.input) > 2 else ""
    weight = ctx.const(w)
    if weight is None:
        ctx.freeze_node(node, f"Conv {ctx.name(node)} has non-constant weights")
        return
    group = int(ctx.attr(node, "group", 1))
    xl = ctx.require_layout(x, node)
    k = int(weight.shape[0])
    c = sum(wd for _, wd in xl) if xl else None
    if group == 1:
        out = ctx.new_layout(node, k)
        ctx.bind(w, 0, out, 0.0, node)
        ctx.bind(w, 1, xl, 0.0, node)
        ctx.bind(b, 0, out, 0.0, node)
        ctx.consume(x, node)
    elif c is not None and group == c and k == c:
        # depthwise, multiplier 1: output channel i is input channel i filtered on its own
        out = xl
        ctx.bind(w, 0, out, 0.0, node)
        ctx.bind(b, 0, out, 0.0, node)
        ctx.edit_attr(node, "group", out)
    else:
        if c is None:  # no shape for the input: whether it is depthwise cannot be told
            kind = f"conv with groups={group} on an input of unknown width"
        elif group == c:
            kind = f"depthwise conv with channel multiplier {k // group}"
        else:
            kind = f"grouped conv (groups={group})"
        reason = f"{kind} {ctx.name(node)}"
        ctx.freeze(xl, reason)
        out = ctx.new_layout(node, k, frozen=reason)
    ctx.set_layout(node.output[0], out)
    if xl is not None:
        ctx.convs.append(ConvRecord(ctx.index(node), x, xl, out, tuple(int(d) for d in weight.shape)))


@rule("ConvTranspose")
def conv_transpose(ctx: CouplingState, node: onnx.NodeProto) -> None:
    # weights are [C, K/group, R, S]: input channels on axis 0, output channels on axis 1
    x, w = node.input[0], node.input[1]
    b = node.input[2] if len(node.input) > 2 else ""
    weight = ctx.const(w)
    if weight is None:
        ctx.freeze_node(node, f"ConvTranspose {ctx.name(node)} has non-constant weights")
        return
    group = int(ctx.attr(node, "group", 1))
    xl = ctx.require_layout(x, node)
    c = int(weight.shape[0])
    k = int(weight.shape[1]) * group
    if group == 1:
        out = ctx.new_layout(node, k)
        ctx.bind(w, 0, xl, 0.0, node)
        ctx.bind(w, 1, out, 0.0, node)
        ctx.bind(b, 0, out, 0.0, node)
        ctx.consume(x, node)
    elif group == c and k == c and xl is not None:
        out = xl
        ctx.bind(w, 0, out, 0.0, node)
        ctx.bind(b, 0, out, 0.0, node)
        ctx.edit_attr(node, "group", out)
    else:
        reason = f"grouped ConvTranspose (groups={group}) {ctx.name(node)}"
        ctx.freeze(xl, reason)
        out = ctx.new_layout(node, k, frozen=reason)
    ctx.set_layout(node.output[0], out)
