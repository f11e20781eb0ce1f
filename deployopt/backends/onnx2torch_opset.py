"""Rewrite a model of a newer ONNX opset into opset 17, the newest onnx2torch 1.5 converts.

Why: torch's default exporter since torch 2.9 (torch.export, `torch.onnx.export(..., dynamo=True)`)
writes opset 18–20: ReduceMean with its axes as an input (opset 18), Split(num_outputs=…) (18),
Reshape 19, Resize 19, AveragePool 19, Gelu (20) … onnx2torch has converters for none of these
versions, so the torch backend refused such models (34 of the 36 architectures of
benchmarks/check_architectures.py --dynamo: "onnx2torch cannot convert op ReduceMean (version
18)"), and onnx's own version converter has no way down for Split 18 or Gelu. Each rewrite here
computes the same function in opset-17 ops (tests/test_onnx2torch_opset.py checks it on
onnxruntime, op by op and on whole exports); an op this module cannot rewrite stays an error that
names it. The model deployopt writes is never rewritten: only what the torch backend times.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deployopt.errors import BackendFailed
from deployopt.model import default_opset, drop_attributes, fresh_name, names_in_use

TARGET = 17

#: ops whose versions past 17 only add types or float8 details this rewrite does not meet in a float
#: model (Cast's `saturate` is about float8): the node stays as it is, new attributes dropped
_SAME_AS_BEFORE: dict[str, tuple[str, ...]] = {
    "Reshape": (),
    "Identity": (),
    "Shape": (),
    "Size": (),
    "Constant": (),
    "Cast": ("saturate",),
    "CastLike": ("saturate",),
    "Equal": (),
    "Flatten": (),
    "Transpose": (),
    "Squeeze": (),
    "Unsqueeze": (),
    "ConstantOfShape": (),
}
_REDUCE = (
    "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
)  # fmt: skip


class _Context:
    """What the rewrites read (constants, element types) and add (new constants, unique names)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.graph = graph
        self.consts = {t.name: t for t in graph.initializer}
        self.types = {
            v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info, *graph.output]
        }
        # every name the graph holds (value_info, node names, subgraphs' names too): a rewrite's
        # tensor named like one of them took its place
        self.taken = names_in_use(graph)

    def const(self, name: str) -> np.ndarray | None:
        tensor = self.consts.get(name)
        return None if tensor is None else numpy_helper.to_array(tensor)

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.taken)

    def scalar(self, base: str, value: float, like: str) -> str:
        """A scalar constant of `like`'s float type (float32 when unknown)."""
        elem = self.types.get(like) or TensorProto.FLOAT
        dtype = helper.tensor_dtype_to_np_dtype(elem)
        name = self.fresh(base)
        tensor = numpy_helper.from_array(np.array(value, dtype=dtype), name)
        self.graph.initializer.append(tensor)
        self.consts[name] = tensor
        return name


def _attrs(node: onnx.NodeProto, drop: tuple[str, ...] = ()) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}


def _reduce(node: onnx.NodeProto, ctx: _Context) -> list[onnx.NodeProto] | None:
    """Reduce* 18 (and ReduceMax/Min 20): the axes input back into the attribute."""
    attrs = _attrs(node, drop=("noop_with_empty_axes",))
    axes_in = node.input[1] if len(node.input) > 1 else ""
    if axes_in:
        axes = ctx.const(axes_in)
        if axes is None:
            return None  # computed axes: no opset-17 form
        if axes.size:
            attrs["axes"] = [int(a) for a in axes.ravel()]
    noop = next((a.i for a in node.attribute if a.name == "noop_with_empty_axes"), 0)
    if "axes" not in attrs and noop:
        # reduces nothing: the input as it is, but L1/L2/LogSum… still apply their element-wise part
        # (onnxruntime gives |x| for ReduceL2), which has no one-op form here
        if node.op_type not in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"):
            return None
        return [helper.make_node("Identity", [node.input[0]], list(node.output), name=node.name)]
    return [helper.make_node(node.op_type, [node.input[0]], list(node.output), name=node.name, **attrs)]


def _split(node: onnx.NodeProto, ctx: _Context) -> list[onnx.NodeProto] | None:
    """Split 18: its sizes input is opset 13's; `num_outputs` alone is opset 13's split with no
    sizes (equal parts), which loading spells out wherever the widths are known."""
    return [drop_attributes(node, ("num_outputs",))]


def _resize(node: onnx.NodeProto, ctx: _Context) -> list[onnx.NodeProto] | None:
    """Resize 18/19: the same op when antialias, axes, the aspect-ratio policy and 19's
    half_pixel_symmetric are not used."""
    attrs = _attrs(node)
    if attrs.get("antialias", 0) or "axes" in attrs:
        return None
    if attrs.get("keep_aspect_ratio_policy", b"stretch") not in (b"stretch", "stretch"):
        return None
    if attrs.get("coordinate_transformation_mode") in (b"half_pixel_symmetric", "half_pixel_symmetric"):
        return None
    return [drop_attributes(node, ("antialias", "keep_aspect_ratio_policy"))]


def _pad(node: onnx.NodeProto, ctx: _Context) -> list[onnx.NodeProto] | None:
    """Pad 18/19/21: the same op without an `axes` input and without 19's `wrap` mode."""
    if len(node.input) > 3 and node.input[3]:
        return None
    if _attrs(node).get("mode") in (b"wrap", "wrap"):
        return None
    return [node]


def _average_pool(node: onnx.NodeProto, ctx: _Context) -> list[onnx.NodeProto] | None:
    """AveragePool 19: the same op when its new `dilations` are all 1."""
    dilations = _attrs(node).get("dilations")
    if dilations and any(int(d) != 1 for d in dilations):  # type: ignore[attr-defined]
        return None
    return [drop_attributes(node, ("dilations",))]


def _gelu(node: onnx.NodeProto, ctx: _Context) -> list[onnx.NodeProto] | None:
    """Gelu 20, spelled out as torch's TorchScript exporter writes it at opset 17."""
    x, (y,) = node.input[0], node.output
    base = node.name or y
    tmp = [ctx.fresh(f"{base}/{k}") for k in ("a", "b", "c", "d", "e", "f")]
    half = ctx.scalar(f"{base}/half", 0.5, x)
    one = ctx.scalar(f"{base}/one", 1.0, x)
    if _attrs(node).get("approximate", b"none") in (b"tanh", "tanh"):
        # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
        k = ctx.scalar(f"{base}/sqrt_2_over_pi", float(np.sqrt(2.0 / np.pi)), x)
        c = ctx.scalar(f"{base}/coeff", 0.044715, x)
        three = ctx.scalar(f"{base}/three", 3.0, x)
        cube = ctx.fresh(f"{base}/cube")
        return [
            helper.make_node("Pow", [x, three], [cube], name=cube),
            helper.make_node("Mul", [cube, c], [tmp[0]], name=tmp[0]),
            helper.make_node("Add", [x, tmp[0]], [tmp[1]], name=tmp[1]),
            helper.make_node("Mul", [tmp[1], k], [tmp[2]], name=tmp[2]),
            helper.make_node("Tanh", [tmp[2]], [tmp[3]], name=tmp[3]),
            helper.make_node("Add", [tmp[3], one], [tmp[4]], name=tmp[4]),
            helper.make_node("Mul", [x, tmp[4]], [tmp[5]], name=tmp[5]),
            helper.make_node("Mul", [tmp[5], half], [y], name=node.name),
        ]
    # 0.5·x·(1 + erf(x / √2))
    root2 = ctx.scalar(f"{base}/sqrt2", float(np.sqrt(2.0)), x)
    return [
        helper.make_node("Div", [x, root2], [tmp[0]], name=tmp[0]),
        helper.make_node("Erf", [tmp[0]], [tmp[1]], name=tmp[1]),
        helper.make_node("Add", [tmp[1], one], [tmp[2]], name=tmp[2]),
        helper.make_node("Mul", [x, tmp[2]], [tmp[3]], name=tmp[3]),
        helper.make_node("Mul", [tmp[3], half], [y], name=node.name),
    ]


def _mish(node: onnx.NodeProto, ctx: _Context) -> list[onnx.NodeProto] | None:
    """Mish 18: x·tanh(softplus(x))."""
    x, (y,) = node.input[0], node.output
    base = node.name or y
    soft, tanh = ctx.fresh(f"{base}/softplus"), ctx.fresh(f"{base}/tanh")
    return [
        helper.make_node("Softplus", [x], [soft], name=soft),
        helper.make_node("Tanh", [soft], [tanh], name=tanh),
        helper.make_node("Mul", [x, tanh], [y], name=node.name),
    ]


_REWRITES: dict[str, Callable[[onnx.NodeProto, _Context], list[onnx.NodeProto] | None]] = {
    **{op: _reduce for op in _REDUCE},
    "Split": _split,
    "Resize": _resize,
    "Pad": _pad,
    "AveragePool": _average_pool,
    "Gelu": _gelu,
    "Mish": _mish,
}


def _allowzero_off(node: onnx.NodeProto, ctx: _Context) -> None:
    """Reshape's allowzero=1 changes nothing when the shape holds no 0, and onnx2torch refuses it:
    torch's default exporter sets it on every Reshape."""
    if node.op_type != "Reshape" or not any(a.name == "allowzero" and a.i for a in node.attribute):
        return
    shape = ctx.const(node.input[1]) if len(node.input) > 1 else None
    if shape is not None and 0 not in shape.ravel():
        drop_attributes(node, ("allowzero",))


def to_onnx2torch_opset(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """`model` in opset TARGET's ops (a copy; the model itself as it is when nothing needs a rewrite).

    Raises BackendFailed naming every op of a newer version that has no rewrite here, with the way
    out (an opset-17 export)."""
    opset = default_opset(model)
    needs_allowzero = any(
        n.op_type == "Reshape" and any(a.name == "allowzero" and a.i for a in n.attribute)
        for n in model.graph.node
    )
    if opset <= TARGET and not needs_allowzero:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    ctx = _Context(out)
    nodes: list[onnx.NodeProto] = []
    missing: list[str] = []
    for node in out.graph.node:
        _allowzero_off(node, ctx)
        if opset <= TARGET or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        try:
            since = onnx.defs.get_schema(node.op_type, opset, node.domain).since_version
        except onnx.defs.SchemaError:  # not an ONNX op: onnx2torch names it in its own error
            nodes.append(node)
            continue
        if since <= TARGET:
            nodes.append(node)
        elif node.op_type in _SAME_AS_BEFORE:
            nodes.append(drop_attributes(node, _SAME_AS_BEFORE[node.op_type]))
        else:
            rewrite = _REWRITES.get(node.op_type)
            done = rewrite(node, ctx) if rewrite else None
            if done is None:
                missing.append(f"{node.op_type} (version {since}) {node.name or node.output[0]!r}")
            else:
                nodes.extend(done)
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise BackendFailed(
            f"onnx2torch reads ONNX opsets up to {TARGET}, and {name} (opset {opset}) has "
            f"{', '.join(missing[:3])}{more} with no opset-{TARGET} form here: export it with "
            f"torch.onnx.export(..., dynamo=False, opset_version={TARGET}), or time it on another backend"
        )
    read_before = {i for n in out.graph.node for i in n.input}
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    read_now = {i for n in nodes for i in n.input} | {o.name for o in out.graph.output}
    gone = [t for t in out.graph.initializer if t.name in read_before and t.name not in read_now]
    for t in gone:  # the axes a Reduce now holds as its attribute
        out.graph.initializer.remove(t)
    if opset > TARGET:
        for imp in out.opset_import:
            if imp.domain in ("", "ai.onnx"):
                imp.version = TARGET
    return out


#: what onnx2torch names itself beside the nodes' submodules: its initializers' container, their
#: buffers, a multi-output node's getitem (`torch_nodes[name + '_split_output']`)
_ONNX2TORCH_OWN = "initializers"
_ONNX2TORCH_PREFIX, _ONNX2TORCH_SUFFIX = "onnx_initializer_", "_split_output"


def _submodule_name(domain: str, name: str) -> str:
    """onnx2torch's name for a node's submodule (OnnxGraph.generate_node_name, before repeats)."""
    return (f"{domain}/" + name).lstrip("/")


def torch_safe_node_names(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, str]]:
    """(`model` with nodes renamed where onnx2torch's submodule name would clash, {new name: the
    node's own name, or its op type when unnamed}); the model itself and {} when none would.

    Why: onnx2torch adds each node as a submodule named after the node. A node named `half`,
    `float`, `to`, `forward`, `eval`, `type`, `training` ... (any attribute of a torch.fx
    GraphModule) failed the conversion ("attribute 'half' already exists"), and one named as a
    graph input or initializer silently took that tensor's place in later nodes' arguments (wrong
    outputs) or failed.
    A clashing or repeated name gets `_1`, `_2` ... (as onnx2torch numbers repeats); the
    profile maps the submodules back to the original node names with the returned dict."""
    import torch

    reserved = set(dir(torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())))
    # a node named as a graph input or an initializer a later node reads is looked up as that
    # tensor's producer: onnx2torch gave it the node's output or failed ('onnx_initializer_1')
    reserved |= {
        _ONNX2TORCH_OWN,
        *(i.name for i in model.graph.input),
        *(t.name for t in model.graph.initializer),
    }
    taken: set[str] = set()

    def clashes(key: str) -> bool:
        return (
            key in reserved
            or key in taken
            or key.startswith(_ONNX2TORCH_PREFIX)
            or key.endswith(_ONNX2TORCH_SUFFIX)
        )

    renamed: dict[int, str] = {}  # node index -> its new name, where onnx2torch's would clash
    for i, node in enumerate(model.graph.node):
        own = node.name.replace(".", "/") or node.op_type  # what onnx2torch names it by
        base = f"node_{own}" if own.startswith(_ONNX2TORCH_PREFIX) else own
        name, k = base, 1
        while clashes(_submodule_name(node.domain, name)):
            name, k = f"{base}_{k}", k + 1
        taken.add(_submodule_name(node.domain, name))
        if name != own:
            renamed[i] = name
    if not renamed:
        return model, {}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    names = {}
    for i, name in renamed.items():
        node = out.graph.node[i]
        names[name] = node.name or node.op_type
        node.name = name
    return out, names
