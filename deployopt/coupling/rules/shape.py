"""Shape ops: frozen, except where the rule can prove channels stay one per position.

Flatten/Reshape of a 1×1-spatial map (after GlobalAveragePool) to [N, C] keeps channel i as
feature i, so a following Gemm/MatMul consumes the group. Of an [N, C, H, W] map to [N, C·H·W]
(VGG's and AlexNet's classifier), channel c becomes the H·W features c·H·W …: the output keeps the
map's channels with a spread of H·W, which only a Gemm/MatMul or a per-element op may read
(registry docstring). A Transpose only moves axes, so it moves the channel axis to where its perm
puts it (NCHW -> NHWC and back in ConvNeXt blocks); the ops after it see the channels there
(`ctx.channel_axis`). So does a Reshape that keeps the batch axis and every channel's values
together in order, only merging, splitting, adding or dropping the axes around the channel axis
(`x.view(n, c, -1)` and `x.flatten(2)`: [N, C, H, W] → [N, C, H·W]; Keras' `Reshape((1, 1, C))`:
[N, C] → [N, 1, 1, C]). Anything else that mixes the channel axis with other axes (a Reshape that
splits C, a Flatten from another axis) freezes the channels it touches.
"""

from __future__ import annotations

import math

import onnx

from deployopt.coupling.registry import CouplingState, normalize_axis, rule


def _keeps_channels(in_shape: list[int] | None, out_shape: list[int] | None) -> bool:
    """Same batch and channel dims, every other dim 1 on both sides: only singleton axes move."""
    if not in_shape or not out_shape or len(in_shape) < 2 or len(out_shape) < 2:
        return False
    if in_shape[:2] != out_shape[:2] or min(in_shape[:2]) < 1:
        return False
    return math.prod(in_shape[2:]) == 1 and math.prod(out_shape[2:]) == 1


def _flattens_channels(in_shape: list[int] | None, out_shape: list[int] | None) -> int:
    """H·W when [N, C, H, W…] becomes [N, C·H·W…] (channel c: the H·W features from c·H·W), else 0."""
    if not in_shape or not out_shape or len(in_shape) < 3 or len(out_shape) != 2:
        return 0
    if out_shape[0] != in_shape[0] or min(in_shape) < 1 or out_shape[1] != math.prod(in_shape[1:]):
        return 0
    return math.prod(in_shape[2:])


def _spread(ctx: CouplingState, node: onnx.NodeProto) -> int:
    """The spread of a flattening node's output, once its layout is recorded (0: not a flatten)."""
    x, y = node.input[0], node.output[0]
    hw = _flattens_channels(ctx.shape(x), ctx.shape(y))
    if hw <= 1 or ctx.layout(x) is None:
        return 0
    ctx.set_layout(y, ctx.layout(x), 1)
    ctx.set_spread(y, hw)
    return hw


@rule("Flatten")
def flatten(ctx: CouplingState, node: onnx.NodeProto) -> None:
    x, y = node.input[0], node.output[0]
    axis = int(ctx.attr(node, "axis", 1))
    rank = len(ctx.shape(x) or [])
    if rank and normalize_axis(axis, rank) == 1 and _keeps_channels(ctx.shape(x), ctx.shape(y)):
        ctx.pass_through(node)
        return
    if rank and normalize_axis(axis, rank) == 1 and _spread(ctx, node):
        return
    ctx.freeze_node(node, f"Flatten {ctx.name(node)} mixes channels with spatial positions")


def _moved_channel_axis(in_shape: list[int] | None, out_shape: list[int] | None, axis: int) -> int | None:
    """Where a Reshape puts the channels of input axis `axis`, when it keeps them one per position
    on one output axis, else None.

    Row-major, element (p, c, t) of the input viewed as [P, C, T] (P: the product of the axes
    before the channels, T: of those after) is element (p, c, t) of any output whose axes before
    some axis k multiply to P and whose axis k is C: the channels land on axis k, each with the
    same P·T values. The outermost axis (the batch) must be kept, so the channels stay off it:
    `x.view(n, c, -1)` and `x.flatten(2)` ([N, C, H, W] → [N, C, H·W], channels stay on axis 1),
    Keras' `Reshape((1, 1, C))` ([N, C] → [N, 1, 1, C], channels to axis 3). One channel (C = 1)
    could be any singleton axis of the output: not told apart, None.
    """
    if not in_shape or not out_shape or len(in_shape) < 2 or len(out_shape) < 2:
        return None
    if min(in_shape) < 1 or min(out_shape) < 1 or not 1 <= axis < len(in_shape):
        return None
    width = in_shape[axis]
    if width < 2 or in_shape[0] != out_shape[0]:
        return None
    before = math.prod(in_shape[1:axis])
    for k in range(1, len(out_shape)):
        if math.prod(out_shape[1:k]) == before and out_shape[k] == width:
            return k
        if math.prod(out_shape[1:k]) > before:
            break
    return None


def _target_follows(spec: list[int], axis: int, out_axis: int, allowzero: bool) -> bool:
    """Whether a Reshape target still describes the output once the channel count changes (the
    entry at `out_axis` spelled out is edited to it): a 0 copies the input's dim at its index, so
    it must copy the channels exactly where they land, and nowhere else."""
    if allowzero:
        return True  # a 0 is a 0 there: the shapes would hold an empty axis, refused before
    return all((j == axis) == (j == out_axis) for j, v in enumerate(spec) if v == 0)


@rule("Reshape", any_axis=True)
def reshape(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """[N, C, 1, 1] ↔ [N, C] and the flatten of a map to [N, C·H·W] (module docstring); any other
    Reshape that keeps the batch axis and the channels one per position on one axis
    (`_moved_channel_axis`): the channels move to that axis, as a Transpose moves them, and a
    target that spells out C is kept in step. Anything else that reshapes the channel axis
    (ShuffleNet's [N, g, C/g, H, W], a DFL's [N, 4, 16, A]) freezes."""
    x, target, y = node.input[0], node.input[1], node.output[0]
    spec = ctx.const(target)
    axis = ctx.channel_axis(x)
    if spec is not None and axis == 1 and _keeps_channels(ctx.shape(x), ctx.shape(y)):
        lay = ctx.pass_through(node)
        if lay is not None and spec.size > 1 and int(spec.ravel()[1]) not in (0, -1):
            ctx.edit_shape(target, 1, lay, node)  # the channel count is spelled out: keep it in step
        return
    if spec is not None and axis == 1 and spec.size == 2 and int(spec.ravel()[1]) != 0:
        hw = _spread(ctx, node)
        if hw:
            if int(spec.ravel()[1]) != -1:  # C·H·W spelled out: keep it in step
                ctx.edit_shape(target, 1, ctx.layout(y), node, scale=hw)
            return
    out_axis = _moved_channel_axis(ctx.shape(x), ctx.shape(y), axis)
    values = None if spec is None or spec.ndim != 1 else [int(v) for v in spec]
    allowzero = bool(ctx.attr(node, "allowzero", 0))
    if out_axis is not None and values is not None and _target_follows(values, axis, out_axis, allowzero):
        lay = ctx.layout(x)
        if lay is None:
            return  # nothing traced goes in
        if sum(w for _, w in lay) != (ctx.shape(y) or [])[out_axis]:
            ctx.freeze_node(node, f"Reshape {ctx.name(node)}: output shape does not match its channels")
            return
        ctx.set_layout(y, lay, out_axis)
        if values[out_axis] not in (0, -1):
            ctx.edit_shape(target, out_axis, lay, node)  # the channel count is spelled out
        return
    ctx.freeze_node(node, f"Reshape {ctx.name(node)} mixes channels with other axes")


def _squeeze_axes(ctx: CouplingState, node: onnx.NodeProto) -> list[int] | None:
    """The axes a Squeeze removes / an Unsqueeze inserts, normalized; [] for a Squeeze without them
    (every 1-dim); None when they are computed or the rank is unknown."""
    if ctx.opset >= 13:
        if len(node.input) < 2 or not node.input[1]:
            spec: list[int] | None = []
        else:
            value = ctx.const(node.input[1])
            spec = None if value is None else [int(v) for v in value.ravel()]
    else:
        spec = [int(v) for v in ctx.attr(node, "axes", [])]
    # Squeeze's axes index its input, Unsqueeze's its output
    shape = ctx.shape(node.input[0] if node.op_type == "Squeeze" else node.output[0])
    if spec is None or not shape:
        return None
    return [normalize_axis(a, len(shape)) for a in spec]


@rule("Squeeze", "Unsqueeze")
def squeeze(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """Pass through when only singleton axes after the channels go or come ([N, C, 1, 1] <-> [N, C]).

    The axes are read, not guessed from the shapes: at width 1 (or batch 1) a Squeeze of the
    channel axis itself, [1, 1, 1, 1] -> [1, 1, 1], or an Unsqueeze before it, [1, 1] -> [1, 1, 1],
    leaves the same leading dims, and padding the channels then broke the Squeeze (a 4-wide axis)
    or fed them on the wrong axis.
    """
    name = ctx.name(node)
    axes = _squeeze_axes(ctx, node)
    if axes is None:
        ctx.freeze_node(node, f"{node.op_type} {name} has computed axes or an input of unknown rank")
        return
    if node.op_type == "Squeeze" and not axes:  # every 1-dim: the channel axis too, at width 1
        ctx.freeze_node(node, f"Squeeze {name} has no axes (it would remove the channel axis at width 1)")
        return
    if node.op_type == "Squeeze" and 1 in axes:
        ctx.freeze_node(node, f"Squeeze {name} removes the channel axis")
        return
    if min(axes) <= 1:
        ctx.freeze_node(node, f"{node.op_type} {name} moves the channel axis off axis 1")
        return
    if _keeps_channels(ctx.shape(node.input[0]), ctx.shape(node.output[0])):
        ctx.pass_through(node)
        return
    ctx.freeze_node(node, f"{node.op_type} {name} moves the channel axis")


@rule("Transpose", any_axis=True)
def transpose(ctx: CouplingState, node: onnx.NodeProto) -> None:
    x, y = node.input[0], node.output[0]
    lay = ctx.layout(x)
    if lay is None:
        return  # nothing traced goes in; whoever reads the output sees untraced channels
    rank = len(ctx.shape(x) or [])
    perm = ctx.attr(node, "perm", None)
    perm = list(reversed(range(rank))) if perm is None else [int(p) for p in perm]
    if rank < 2 or sorted(perm) != list(range(rank)):
        ctx.freeze_node(node, f"Transpose {ctx.name(node)}: perm or input rank unknown")
        return
    # output axis j is input axis perm[j]: the channels land where perm names their axis
    axis = perm.index(ctx.channel_axis(x))
    out_shape = ctx.shape(y)
    if out_shape is not None and (len(out_shape) != rank or out_shape[axis] != sum(w for _, w in lay)):
        ctx.freeze_node(node, f"Transpose {ctx.name(node)}: output shape does not match its perm")
        return
    ctx.set_layout(y, lay, axis)


@rule("Shape", "Size")
def shape_of(ctx: CouplingState, node: onnx.NodeProto) -> None:
    # the channel count becomes data: changing it could change whatever is computed from it
    ctx.freeze(ctx.layout(node.input[0]), f"{node.op_type} {ctx.name(node)} reads the channel count")


@rule("Expand")
def expand(ctx: CouplingState, node: onnx.NodeProto) -> None:
    """Broadcast to a constant shape: `y.expand_as(x)` of an SE block's `[N, C, 1, 1]` scale.

    Channels pass through when the input has them all (the target spells out C, kept in step, or
    1); a one-channel input broadcast over several channels, a computed target or a change of rank
    freeze.
    """
    x, target, y = node.input[0], node.input[1], node.output[0]
    spec, xs, ys = ctx.const(target), ctx.shape(x), ctx.shape(y)
    name = ctx.name(node)
    if spec is None or xs is None or ys is None or len(xs) < 2:
        ctx.freeze_node(node, f"Expand {name} has a computed target or unknown shapes")
        return
    if len(xs) != len(ys):
        ctx.freeze_node(node, f"Expand {name} changes the rank")
        return
    if xs[1] != ys[1]:
        ctx.freeze_node(node, f"Expand {name} broadcasts {xs[1]} channel(s) over {ys[1]}")
        return
    lay = ctx.pass_through(node)
    at = 1 - (len(ys) - spec.size)  # the target is right-aligned with the output
    if lay is not None and spec.ndim == 1 and 0 <= at < spec.size and int(spec[at]) != 1:
        ctx.edit_shape(target, at, lay, node)  # the channel count is spelled out: keep it in step
