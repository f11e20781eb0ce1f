"""Element-wise ops: per-channel, so every channel-carrying input and the output share one group.

Constants with a channel axis (a [1,C,1,1] scale, a [C,1,1] bias; on a channels-last tensor a [C]
or [1,1,1,C] one) are resized with the group and padded with the op's neutral value. The channel
axis is the inputs' (`ctx.channel_axis`), so these rules work wherever a Transpose put it.
Padded channels are 0 after their producer; ops whose value at 0 is not finite (Log, Reciprocal)
or that divide by a channel have no rule here, so they freeze. Between producer and reader a padded
channel can take other finite values (Sigmoid(0) = 0.5, and `1 - x` with a per-channel constant,
padded with 0, makes that -0.5): Sqrt and a fractional Pow, NaN on a negative value, keep a group
free only where they read something that is never negative.

CastLike is Cast to the type of its second input, which it reads for its type only: its channels
pass from the first input as Cast's do, and the second's are neither joined nor frozen (the dynamo
exporter, unoptimized, writes `CastLike(0.0, x)` for a conv's zero bias and `CastLike(6.0, x)` for
ReLU6's bounds; load_model folds those of constants, `deployopt.model._fold_constants`).

The unary ops here, and the binary ones of flattened maps and scalar constants, are per element
with no per-channel parameter, so they also read a flattened map (`spread=True`, registry
docstring) and pass its spread on: Flatten → Relu/Dropout → Gemm keeps the last conv free. A padded
feature they make nonzero is read by the classifier's zero weight rows. Sqrt and Pow do not take a
spread (they freeze there), nor does a binary op with a per-feature vector or an operand that is
not flattened alike.
"""

from __future__ import annotations

import numpy as np
import onnx

from deployopt.coupling.registry import CouplingState, Layout, channel_axis_of, rule

UNARY = (
    "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh",
    "Softplus", "Softsign", "Mish", "Gelu", "Erf", "Abs", "Neg", "Exp", "Clip", "Identity",
    "Dropout", "Cast", "CastLike", "Floor", "Ceil", "Round", "Sign", "ThresholdedRelu", "Shrink",
    "Sin", "Cos", "Not",
)  # fmt: skip

#: value a constant operand takes on a padded channel, per op
NEUTRAL = {"Add": 0.0, "Sum": 0.0, "Sub": 0.0, "Mean": 0.0, "Max": 0.0, "Min": 0.0, "Mul": 1.0, "Div": 1.0,
           "PRelu": 0.0}  # fmt: skip

#: per-element comparisons, logic and selection: a padded channel's value is finite whatever it is
#: (a bool, or one of Where's finite operands), and its readers read it with zero weights; a constant
#: operand is padded with 0 (False). The dynamo exporter spells Softplus as Softplus → Greater →
#: Where (its threshold), and torch.where(x > t, ...) is the same pattern: both froze their group.
SELECTION = ("Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Where")
NEUTRAL.update(dict.fromkeys(SELECTION, 0.0))


#: ops whose output is never negative, whatever they read (Softmax in [0, 1] and Hardmax in {0, 1}
#: on any axis; one along the channels freezes the group in rules/axis.py, so here it is another)
NEVER_NEGATIVE = frozenset({"Relu", "Sigmoid", "HardSigmoid", "Abs", "Exp", "Softplus", "Softmax", "Hardmax"})
#: ops whose output lies in [-1, 1], whatever they read
WITHIN_ONE = frozenset(
    {"Sigmoid", "HardSigmoid", "Tanh", "Softsign", "Erf", "Sin", "Cos", "Sign", "Softmax", "Hardmax"}
)
#: ops whose padded output channels are exactly 0 (zero filters or columns, BatchNorm scale and bias 0;
#: a Gemm only with no bias or one per output column: _zero_padded checks that)
ZERO_PADDED = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization"})


def _producer(ctx: CouplingState, tensor: str) -> onnx.NodeProto | None:
    """The standard-domain node that makes `tensor`; None for a graph input, constant or custom op."""
    index = ctx.producer.get(tensor)
    node = None if index is None else ctx.nodes[index]
    return node if node is not None and node.domain in ("", "ai.onnx") else None


def _zero_padded(ctx: CouplingState, node: onnx.NodeProto) -> bool:
    """Whether `node`'s padded output channels are exactly 0."""
    if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2]:
        # a bias that is not one value per output column (a scalar, [1, 1]) is not resized, so
        # it broadcasts into the padded columns: they hold it, and it may be negative
        bias, n_out = ctx.const(node.input[2]), ctx.channels(node.output[0])
        per_column = bias is not None and bias.ndim >= 1 and bias.shape[-1] == n_out
        return per_column and n_out is not None and n_out > 1
    return node.op_type in ZERO_PADDED


def padded_within_one(ctx: CouplingState, tensor: str) -> bool:
    """Whether the padded channels of `tensor` lie in [-1, 1] whatever the plan (zero-padded, or made
    by an op bounded so), so that a product of many of them (ReduceProd) cannot overflow."""
    node = _producer(ctx, tensor)
    return node is not None and (node.op_type in WITHIN_ONE or _zero_padded(ctx, node))


def _never_negative(ctx: CouplingState, tensor: str) -> bool:
    """Whether the padded channels of `tensor` are ≥ 0 whatever the plan: its producer pads with
    zeros or never outputs a negative value (Clip with a constant min ≥ 0 included)."""
    node = _producer(ctx, tensor)
    if node is None:
        return False
    if node.op_type in ZERO_PADDED:
        return _zero_padded(ctx, node)
    if node.op_type in NEVER_NEGATIVE:
        return True
    if node.op_type == "Clip":
        low = ctx.attr(node, "min", None) if ctx.opset < 11 else None
        if ctx.opset >= 11 and len(node.input) > 1 and node.input[1]:
            arr = ctx.const(node.input[1])
            low = None if arr is None or arr.size != 1 else float(arr.ravel()[0])
        return low is not None and low >= 0
    return False


def _pass_nonnegative_only(ctx: CouplingState, node: onnx.NodeProto, reason: str) -> None:
    """Pass through; the input's set is frozen first unless its padded channels are never negative."""
    if not _never_negative(ctx, node.input[0]):
        ctx.freeze(ctx.layout(node.input[0]), reason)
    ctx.pass_through(node)


@rule(*UNARY, any_axis=True, spread=True)
def unary(ctx: CouplingState, node: onnx.NodeProto) -> None:
    ctx.pass_through(node)


@rule("Sqrt", any_axis=True)
def sqrt(ctx: CouplingState, node: onnx.NodeProto) -> None:
    _pass_nonnegative_only(ctx, node, f"Sqrt {ctx.name(node)} could read a negative padded channel (NaN)")


@rule("Pow", any_axis=True)
def pow_(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """x ** p with a constant p > 0 (the square in a spelled-out LayerNorm): 0 ** p = 0, per channel.

    Any other exponent (a negative one makes a padded 0 infinite) or a traced exponent freezes; a
    fractional one (NaN for a negative base) keeps the set free only on an input never negative.
    """
    p = ctx.const(node.input[1])
    if p is not None and p.size == 1 and float(p.ravel()[0]) > 0 and not ctx.is_const(node.input[0]):
        value = float(p.ravel()[0])
        if value.is_integer():
            ctx.pass_through(node)
        else:
            reason = f"Pow {ctx.name(node)} by {value:g} could read a negative padded channel (NaN)"
            _pass_nonnegative_only(ctx, node, reason)
        return
    ctx.freeze_node(node, f"Pow {ctx.name(node)} has an exponent that is not a positive constant")


def _flattened_per_element(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """Flattened maps with each other and with scalar constants: per element, the spread passes.

    `x * 0.5`, `Max(x, 0)`, and GELU or SiLU spelled out (`x * Sigmoid(x)`: both operands flattened
    alike, feature i of each is channel i // spread, so their channel sets join). A constant with
    more than one value (a per-feature vector would need a spread binding), an operand that is not
    flattened with the same spread, a traced divisor (a padded 0) or a broadcast to another shape
    freezes.
    """
    traced = [i for i, t in enumerate(node.input) if t and not ctx.is_const(t)]
    consts = [ctx.const(t) for t in node.input if t and ctx.is_const(t)]
    out_shape = ctx.shape(node.output[0])
    spreads = {ctx.spread.get(node.input[i], 1) for i in traced}
    if (
        len(spreads) == 1
        and 1 not in spreads
        and all(c is not None and c.size == 1 for c in consts)
        and not (node.op_type == "Div" and 1 in traced)
        and out_shape is not None
        and all(ctx.shape(node.input[i]) == out_shape for i in traced)
    ):
        ctx.pass_through(node, traced)
    else:
        ctx.freeze_flattened(node)


@rule(
    "Add", "Sum", "Sub", "Mul", "Div", "Max", "Min", "Mean", "PRelu", *SELECTION, any_axis=True, spread=True
)
def binary(ctx: CouplingState, node: onnx.NodeProto) -> None:
    for t in node.input:
        value = ctx.const(t) if t and ctx.is_const(t) else None
        if value is not None and value.dtype.kind == "f" and not np.isfinite(value).all():
            # masked_fill(x <= 0, -inf): a padded channel (0) takes the infinity whole, and a
            # reduction over its row (Softmax) makes it NaN, which its zero weight then spreads
            ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} has a constant that is not finite")
            return
    if any(t in ctx.spread for t in node.input if t):
        _flattened_per_element(ctx, node)
        return
    out = node.output[0]
    out_shape = ctx.shape(out)
    if out_shape is None or len(out_shape) < 2:
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)}: output shape unknown")
        return
    rank = len(out_shape)
    # the output's channel axis: where the traced inputs' channel axes land after broadcasting
    axes = set()
    for t in node.input:
        t_shape = ctx.shape(t) if t else None
        if t and ctx.layout(t) is not None and not ctx.is_const(t) and t_shape is not None:
            axes.add(ctx.channel_axis(t) + rank - len(t_shape))
    if len(axes) > 1:
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} joins channels that lie on different axes")
        return
    out_axis = axes.pop() if axes else 1
    width = out_shape[out_axis] if 0 <= out_axis < rank else -1
    if width < 1:
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)}: output shape unknown")
        return
    joined: Layout | None = None
    pending_consts: list[tuple[str, int]] = []
    for i, t in enumerate(node.input):
        if not t:
            continue
        axis = channel_axis_of(ctx.shape(t), rank, out_axis)
        per_channel = axis is not None and (ctx.shape(t) or [])[axis] == width
        if ctx.is_const(t):
            # a one-channel constant broadcasts, so a padded channel gets a finite value: no edit
            if per_channel and width > 1:
                pending_consts.append((t, axis))
            continue
        if not per_channel:
            # broadcast over channels (a scalar or [N,1,H,W] operand): a traced one, such as a
            # spatial-attention map from a 1-channel Conv (CBAM), must keep its one channel
            lay = ctx.layout(t)
            if lay is not None:
                ctx.freeze(lay, f"{node.op_type} {ctx.name(node)} broadcasts it over {width} channels")
            continue
        if node.op_type == "Div" and i == 1:
            reason = f"Div {ctx.name(node)} divides by a channel set (padding would divide by zero)"
            ctx.freeze(ctx.layout(t), reason)
            ctx.freeze(joined, reason)
            ctx.freeze_node(node, reason)
            return
        lay = ctx.require_layout(t, node, axis)
        if lay is None:
            continue
        if joined is None:
            joined = lay
        else:
            ctx.union(joined, lay, ctx.name(node))
    if joined is None:
        ctx.freeze_node(node, f"{node.op_type} {ctx.name(node)} has no traced channel input")
        return
    for t, axis in pending_consts:
        ctx.bind(t, axis, joined, NEUTRAL[node.op_type], node)
    ctx.set_layout(out, joined, out_axis)
