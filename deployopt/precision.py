"""Type an fp32 ONNX model fp16 for timing on TensorRT >= 11, which has no FP16 builder flag.

Why: TensorRT 11 removed weak typing (trtexec --fp16, BuilderFlag.FP16): a network runs in the
types its model declares. So that `--dtype fp16` still times what it timed on TensorRT <= 10's
--fp16 (fp16 inside, fp32 at the engine's inputs and outputs), the model is retyped before the
build, the way NVIDIA's migration guide does with ModelOpt AutoCast (`keep_io_types`):

- each fp32 graph input is read through a Cast to fp16, each fp32 graph output written through a
  Cast back to fp32, so the engine's I/O (and the caller's buffers) stay fp32;
- fp32 initializers and Constant / ConstantOfShape values become fp16 (clamped to fp16's finite
  range), and a Cast(to=FLOAT) inside becomes Cast(to=FLOAT16);
- an input that ONNX requires to be float32 (its op schema's type constraint has no float16:
  Resize/Upsample `scales`, Range, ...) keeps float32, and so does everything computed only for
  such inputs or for a Cast to an integer type (shape arithmetic: fp16 would round it), found by
  walking back from them; Resize's `roi` is kept as it is too (coordinates, read at build time).
  A constant read both ways is kept for the fp32 readers and copied in fp16 for the others.

The type rules come from `onnx.defs.get_schema` for the model's own opset, not from a list of ops.
A model whose convs and matmuls all already take fp16/bf16 (ModelOpt AutoCast's output, or this
module's) is its own precision and is passed through unchanged; an fp32 model with an fp16 step
somewhere (a Cast to fp16 and back) is converted, and so is a mixed one (fp32 convs and an fp16
classifier; AutoCast's output with layers kept in fp32): its fp32 convs/matmuls are typed fp16, with
a warning (a mix of fp32 and bf16 is refused: it would become fp16/bf16). A Q/DQ model is refused,
with or without fp16 in it: casts around its Q/DQ nodes would keep TensorRT from fusing them into
INT8 kernels, and its own precision is int8 (time it with --dtype int8). So is a model quantized
without Q/DQ nodes (quantize_dynamic's ConvInteger, QOperator's QLinearConv: `integer_compute`; its
int32 accumulator was cast to fp16, 194487 -> inf), one with a conv/matmul in float64 (left so, in a
model said to be fp16) and one none of whose fp32 convs/matmuls could take fp16. A Cast to float from
an integer wider than 8 bits keeps fp32 (fp16 rounds such values past 2048, and past 65504 they are
infinite). Every converted model is checked by `onnx.checker` and type-checked strict shape
inference; any failure is one ModelError line. NOT RUN AGAINST TENSORRT 11 (none can be installed
here): tested on onnxruntime CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto

from deployopt.errors import ModelError, first_line
from deployopt.model import fresh_name, names_in_use

#: Part of every strongly typed fp16 engine's cache key: raise it when `to_fp16` starts writing a
#: different model from the same input, so engines built from the older conversion are rebuilt.
#: 2: an fp32 model with a Cast to fp16 is converted, no longer passed through; 3: so is a model
#: whose convs/matmuls take fp32 and fp16 both (its fp32 ones typed fp16), no longer passed through;
#: 4: a Cast to float from a wide integer (`_WIDE_INTS`) keeps FLOAT, no longer made FLOAT16
CONVERSION_RECIPE = "4"

FLOAT16_MAX = float(np.finfo(np.float16).max)
_F32, _F16 = "fp32", "fp16"
_LOW_PRECISION = frozenset({TensorProto.FLOAT16, TensorProto.BFLOAT16})
_FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16})
#: Ops whose float output type is set by an attribute this module rewrites (`to`, `value*`).
_ATTR_TYPED = frozenset({"Cast", "Constant", "ConstantOfShape"})
#: (op, input index) kept as they are although the schema allows fp16: Resize's roi is
#: coordinates TensorRT reads at build time; fp16 would only round them.
_KEEP_INPUTS = frozenset({("Resize", 1)})
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
#: Integer types fp16 cannot hold: past 2048 it rounds them (an index 2049 read 2048), past 65504
#: they are infinite (a ConvInteger's int32 accumulator, 194487, was). A Cast from one of them to
#: float keeps fp32; int8/uint8 (and bool) fit fp16 exactly.
_WIDE_INTS = frozenset(np.dtype(t) for t in (np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64))
#: Integer compute of onnxruntime's quantization formats other than Q/DQ: QOperator
#: (`deployopt.coupling.QOPERATOR_CONVS`, QLinearMatMul, com.microsoft's QLinear* ops) and
#: quantize_dynamic (DynamicQuantizeLinear feeding ConvInteger/MatMulInteger, whose int32
#: accumulators a Cast turns into floats; com.microsoft's fused DynamicQuantizeMatMul,
#: MatMulIntegerToFloat). Any op whose name starts with "QLinear" counts too.
INTEGER_COMPUTE_OPS = frozenset(
    {
        "QLinearConv",
        "ConvInteger",
        "QLinearMatMul",
        "MatMulInteger",
        "DynamicQuantizeLinear",
        "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat",
    }
)
_INTEGER_DOMAINS = frozenset({"", "ai.onnx", "com.microsoft"})


def _tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every named tensor the model (after type inference) declares."""
    g = model.graph
    types = {t.name: t.data_type for t in g.initializer}
    for vi in (*g.input, *g.output, *g.value_info):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


#: Ops that hold a CNN's arithmetic: the precision they compute in is the model's.
_COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})


def has_low_precision_tensors(model: onnx.ModelProto) -> bool:
    """Whether any tensor, Cast or constant of the model is fp16 or bf16: a backend that runs the
    whole model in one dtype (torch) cannot run such a model, wherever the fp16 sits."""
    for node in model.graph.node:
        if node.op_type == "Cast" and any(a.name == "to" and a.i in _LOW_PRECISION for a in node.attribute):
            return True
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type in _LOW_PRECISION:
                return True
    return any(t in _LOW_PRECISION for t in _tensor_types(model).values())


_TYPE_NAMES = {
    TensorProto.FLOAT: _F32,
    TensorProto.FLOAT16: _F16,
    TensorProto.BFLOAT16: "bf16",
    TensorProto.DOUBLE: "fp64",
}
#: The start of `typed_precision`'s label for a model whose convs/matmuls do not all take one type.
MIXED = "mixed"


@dataclass(frozen=True)
class ComputeTyping:
    """The float type each conv/matmul of a model takes (`compute_typing`): (op, node, type) each."""

    ops: tuple[tuple[str, str, int], ...]

    @property
    def low(self) -> list[tuple[str, str, int]]:
        return [o for o in self.ops if o[2] in _LOW_PRECISION]

    @property
    def full(self) -> list[tuple[str, str, int]]:
        return [o for o in self.ops if o[2] not in _LOW_PRECISION]

    def label(self) -> str:
        """The model's typing: fp32 (no conv/matmul in fp16/bf16), fp16 or bf16 (all of them in
        it), else "mixed fp32/fp16" (the types it mixes, widest first)."""
        low = sorted({_TYPE_NAMES[t] for *_, t in self.low})
        if not low:
            return _F32
        full = sorted({_TYPE_NAMES[t] for *_, t in self.full}, reverse=True)  # fp64, fp32
        kinds = [*full, *low]
        return kinds[0] if len(kinds) == 1 else f"{MIXED} {'/'.join(kinds)}"

    def describe(self) -> str:
        """Which convs/matmuls take fp16/bf16, for a message: "Gemm '/fc/Gemm' takes fp16 (1 of 4
        convs/matmuls; the other 3 take fp32)", the first two named."""
        low, full = self.low, self.full
        names = ", ".join(f"{op} {name!r}" for op, name, _ in low[:2]) + (" …" if len(low) > 2 else "")
        types = "/".join(sorted({_TYPE_NAMES[t] for *_, t in low}))
        verb = "takes" if len(low) == 1 else "take"
        if not full:
            return f"{names} {verb} {types} (all {len(low)} of its convs/matmuls)"
        rest = "/".join(sorted({_TYPE_NAMES[t] for *_, t in full}, reverse=True))
        return (
            f"{names} {verb} {types} ({len(low)} of {len(self.ops)} convs/matmuls; the other "
            f"{len(full)} {'takes' if len(full) == 1 else 'take'} {rest})"
        )


def compute_typing(model: onnx.ModelProto) -> ComputeTyping | None:
    """The float type each Conv/ConvTranspose/MatMul/Gemm takes (its first two inputs, after type
    inference); None for a model whose types cannot be inferred."""
    try:
        types = _tensor_types(onnx.shape_inference.infer_shapes(model))
    except Exception:
        return None
    ops = []
    for i, node in enumerate(model.graph.node):
        if node.op_type not in _COMPUTE_OPS or node.domain not in ("", "ai.onnx"):
            continue
        taken = [types[n] for n in node.input[:2] if n in types and types[n] in _FLOAT_TYPES]
        if taken:
            low = [t for t in taken if t in _LOW_PRECISION]
            ops.append((node.op_type, node.name or f"node {i}", low[0] if low else taken[0]))
    return ComputeTyping(tuple(ops))


def is_low_precision(model: onnx.ModelProto) -> bool:
    """Whether the model already computes in fp16 or bf16 (typed by ModelOpt AutoCast, by this
    module, or exported so): such a model says its own precision and is built as it is.

    Read from the types its convs and matmuls take, and true only when all of them take fp16/bf16:
    an fp32 model with one Cast to fp16 (a mask, a post-processing step) was taken for an fp16 one,
    copied unconverted by `deployopt fp16` and recorded as fp16, and so was one whose convs take
    fp32 and whose classifier alone takes fp16 (any one conv/matmul in fp16 was enough). A model
    with no typed conv or matmul falls back to whether it holds any fp16 tensor."""
    if not has_low_precision_tensors(model):
        return False
    typing = compute_typing(model)
    if typing is None:  # an uninferable model: judge it by its tensors, as before
        return True
    return not typing.ops or not typing.full


def low_precision_compute(model: onnx.ModelProto) -> tuple[str, str] | None:
    """(its typing's label, what computes in fp16/bf16) for a message ("mixed fp32/fp16", "Gemm 'fc'
    takes fp16 (1 of 4 convs/matmuls; ...)": `ComputeTyping`); None when no conv/matmul takes
    fp16/bf16 (an fp32 model with a Cast to fp16 and back is fp32). A model whose types cannot be
    inferred, or with no conv/matmul, is judged by its tensors."""
    if not has_low_precision_tensors(model):
        return None
    typing = compute_typing(model)
    if typing is None or not typing.ops:
        return _F16, "it holds fp16/bf16 tensors"
    return (typing.label(), typing.describe()) if typing.low else None


def integer_compute(model: onnx.ModelProto) -> list[str]:
    """The integer compute ops (`INTEGER_COMPUTE_OPS`, QLinear*) of the model's main graph, sorted:
    onnxruntime's QOperator or dynamic quantization, int8 with no Q/DQ node (empty: none)."""
    return sorted(
        {
            n.op_type
            for n in model.graph.node
            if n.domain in _INTEGER_DOMAINS
            and (n.op_type in INTEGER_COMPUTE_OPS or n.op_type.startswith("QLinear"))
        }
    )


def quantized_by(model: onnx.ModelProto) -> str:
    """What makes an int8 model (`typed_precision` "int8") int8, for a record or a message: "Q/DQ
    nodes", or its integer ops ("ConvInteger/DynamicQuantizeLinear nodes")."""
    from deployopt.model import has_qdq

    ops = integer_compute(model)
    if has_qdq(model) or not ops:
        return "Q/DQ nodes"
    return f"{'/'.join(ops)} nodes"


def typed_precision(model: onnx.ModelProto) -> str:
    """The precision a model computes in when run as it is (onnxruntime runs no conversion): "int8"
    for Q/DQ nodes or integer compute ops (`integer_compute`: quantize_dynamic's ConvInteger /
    MatMulInteger, QOperator's QLinearConv), "fp16" or "bf16" for a model typed so (by `deployopt
    fp16`, ModelOpt AutoCast, an fp16 export), "mixed fp32/fp16" (`MIXED`, then the types) for one
    whose convs/matmuls take both, else "fp32". A record of such a model said fp32, and compare
    took an fp16 model's timing for a like-for-like one of the fp32 model's; a model with fp32
    convs and an fp16 classifier was recorded as fp16; a quantize_dynamic model (int8 convs) was
    recorded as fp32, and `--dtype int8` on ort refused it as an fp32 model. "int8" is not "has Q/DQ
    nodes": read `deployopt.model.has_qdq` for that (TensorRT builds INT8 from Q/DQ only)."""
    from deployopt.model import has_qdq

    if has_qdq(model) or integer_compute(model):
        return "int8"
    if not has_low_precision_tensors(model):
        return _F32
    typing = compute_typing(model)
    if typing is not None and typing.ops:
        return typing.label()
    types = set(_tensor_types(model).values())  # no typed conv/matmul: by its tensors, as before
    return "bf16" if TensorProto.BFLOAT16 in types and TensorProto.FLOAT16 not in types else _F16


def rounding_precision(label: str) -> str:
    """The narrowest float a `typed_precision` label computes in: "fp16" of "mixed fp32/fp16" (its
    fp16 ops round as an fp16 model's do), "bf16" where bf16 is among them; the label otherwise."""
    if not label.startswith(MIXED):
        return label
    return "bf16" if "bf16" in label.split()[-1].split("/") else _F16


def cannot_run_typed(backend: str, dtypes: tuple[str, ...] | list[str], model_name: str, typed: str) -> str:
    """The one line for a backend that runs a model as it is typed (onnxruntime) given a model typed
    in a precision it does not run (bf16, mixed fp32/fp16), in optimize's words: bench said
    "--dtype 'bf16': choose one of ..." of a --dtype never given, and took a mixed model for fp16."""
    runs = ", ".join(dtypes)
    msg = f"backend {backend!r} cannot run {typed} (it runs {runs}): {model_name} is typed {typed}"
    if typed.startswith(MIXED):
        msg += (
            ", and a run records one precision; type it fp16 throughout with `deployopt fp16` first, "
            "or use the tensorrt backend"
        )
    return msg


def _infer(model: onnx.ModelProto, what: str, strict: bool = False) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=strict, strict_mode=strict, data_prop=True)
    except Exception as exc:
        raise ModelError(f"fp16 conversion: {what}: shape inference failed: {first_line(exc)}") from None


def validate(model: onnx.ModelProto, what: str = "the converted model") -> None:
    """onnx.checker plus type-checked strict shape inference; one ModelError line on failure."""
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise ModelError(f"fp16 conversion: {what} fails the ONNX checker: {first_line(exc)}") from None
    _infer(model, what, strict=True)


@dataclass
class _Plan:
    """What one node does in the fp16 model: which of its schema's type variables become fp16, and
    the type variable (or concrete type) of each input and output slot."""

    schema: Any
    ins: list[str | None]
    outs: list[str | None]
    fp16_vars: set[str] = field(default_factory=set)
    pinned: bool = False


def _slot_types(params: Any, count: int) -> list[str | None]:
    """The formal type string of each actual slot (a variadic last parameter covers the rest)."""
    out: list[str | None] = []
    for i in range(count):
        if i < len(params):
            out.append(params[i].type_str)
        elif params and params[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
            out.append(params[-1].type_str)
        else:
            out.append(None)
    return out


class _Converter:
    def __init__(self, model: onnx.ModelProto) -> None:
        import onnx_graphsurgeon as gs

        self.gs = gs
        self.source = model
        self.graph = gs.import_onnx(_infer(model, "the input model"))
        self.opsets = {d.domain or "ai.onnx": d.version for d in model.opset_import}
        names = {t.name for t in self.graph.tensors().values()} | {n.name for n in self.graph.nodes}
        # and the names gs does not list (subgraphs' names, value_info): a new tensor named like
        # one of them took its place
        self.used = {n for n in names if n} | names_in_use(model.graph)
        self.plans: dict[int, _Plan] = {}
        self.cast_cache: dict[tuple[int, str], Any] = {}
        self.clamped: list[str] = []  # constants with finite values beyond fp16's range

    def half(self, values: np.ndarray, name: str) -> np.ndarray:
        """_to_half, noting `name` where a finite value was clamped (the model then computes
        otherwise: a Div by 1e5 became one by 65504, silently)."""
        values = np.asarray(values)
        if np.any(np.isfinite(values) & (np.abs(values) > FLOAT16_MAX)):
            self.clamped.append(name)
        return _to_half(values)

    # ---- facts
    @staticmethod
    def is_f32(tensor: Any) -> bool:
        if not tensor.name:  # an omitted optional input
            return False
        try:
            return tensor.dtype is not None and np.dtype(tensor.dtype) == np.float32
        except TypeError:  # an ONNX-only type (bfloat16, float8) graphsurgeon keeps as an enum
            return False

    def fresh(self, base: str) -> str:
        return fresh_name(base, self.used)

    def plan(self, node: Any) -> _Plan:
        key = id(node)
        if key not in self.plans:
            schema = None
            try:
                domain = node.domain or "ai.onnx"
                schema = onnx.defs.get_schema(node.op, self.opsets.get(domain, 1), node.domain or "")
            except onnx.defs.SchemaError:
                pass
            if schema is None:  # a custom op: runs in the types it has
                self.plans[key] = _Plan(
                    None, [None] * len(node.inputs), [None] * len(node.outputs), pinned=True
                )
            else:
                self.plans[key] = _Plan(
                    schema,
                    _slot_types(schema.inputs, len(node.inputs)),
                    _slot_types(schema.outputs, len(node.outputs)),
                )
                self._choose_vars(node, self.plans[key])
        return self.plans[key]

    def _choose_vars(self, node: Any, plan: _Plan) -> None:
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in plan.schema.type_constraints}
        in_vars = {ts for ts in plan.ins if ts in allowed}
        bound_f32 = {ts for t, ts in zip(node.inputs, plan.ins) if ts in allowed and self.is_f32(t)}
        bound_f32 |= {ts for t, ts in zip(node.outputs, plan.outs) if ts in allowed and self.is_f32(t)}
        kept = {plan.ins[i] for i in range(len(node.inputs)) if (node.op, i) in _KEEP_INPUTS}
        plan.fp16_vars = {
            ts
            for ts in bound_f32
            if "tensor(float16)" in allowed[ts]
            and ts not in kept
            and (ts in in_vars or node.op in _ATTR_TYPED)
        }

    def requirement(self, node: Any, index: int) -> str | None:
        """The type input `index` of `node` must have in the fp16 model (None: either will do)."""
        plan = self.plan(node)
        if plan.pinned:
            return _F32
        if node.op == "Cast":
            # a float cast to an integer is shape arithmetic: fp16 would round it (2049 -> 2048); a
            # cast to a float type takes either (a Cast to fp16 pinned the conv before it to fp32)
            return None if node.attrs.get("to") in (TensorProto.FLOAT, *_LOW_PRECISION) else _F32
        return _F16 if plan.ins[index] in plan.fp16_vars else _F32

    @staticmethod
    def from_wide_int(node: Any) -> bool:
        """Whether a Cast reads an integer type fp16 cannot hold (`_WIDE_INTS`)."""
        try:
            return np.dtype(node.inputs[0].dtype) in _WIDE_INTS
        except TypeError:  # no type, or an ONNX-only one graphsurgeon keeps as an enum
            return False

    def produces(self, node: Any, index: int) -> str:
        plan = self.plan(node)
        if plan.pinned:
            return _F32
        if node.op == "Cast":
            # a wide integer keeps fp32: typed FLOAT16, an int32 accumulator past 65504 was infinite
            to_float = node.attrs.get("to") == TensorProto.FLOAT
            return _F16 if to_float and not self.from_wide_int(node) else _F32
        return _F16 if plan.outs[index] in plan.fp16_vars else _F32

    # ---- the walk back from fp32-only inputs
    def pin(self) -> None:
        """Keep fp32 every node whose float results are read only where fp32 is required."""
        outputs = {id(t) for t in self.graph.outputs}
        changed = True
        while changed:
            changed = False
            for node in reversed(self.graph.nodes):
                plan = self.plan(node)
                if plan.pinned or node.op in ("Constant", "ConstantOfShape"):
                    continue
                floats = [t for t in node.outputs if self.is_f32(t)]
                if not floats or any(id(t) in outputs for t in floats):
                    continue
                readers = [
                    (c, i) for t in floats for c in t.outputs for i, x in enumerate(c.inputs) if x is t
                ]
                if all(self.requirement(c, i) == _F32 for c, i in readers):
                    plan.pinned = True
                    changed = True

    # ---- rewriting
    def constant_fp16(self, tensor: Any) -> Any:
        """An fp16 copy of a constant (initializer, Constant or ConstantOfShape output)."""
        key = (id(tensor), _F16)
        if key in self.cast_cache:
            return self.cast_cache[key]
        gs = self.gs
        name = self.fresh(f"{tensor.name}_fp16")
        if isinstance(tensor, gs.Constant):
            copy: Any = gs.Constant(name, self.half(np.asarray(tensor.values), tensor.name))
        else:
            producer = tensor.inputs[0]
            copy = gs.Variable(name, dtype=np.float16, shape=tensor.shape)
            if producer.op == "Constant":
                value = _constant_value(producer.attrs)
                self.graph.layer(
                    op="Constant",
                    name=self.fresh(f"{producer.name or name}_fp16"),
                    outputs=[copy],
                    attrs={"value": gs.Constant(self.fresh(f"{name}_value"), self.half(value, tensor.name))},
                )
            else:  # ConstantOfShape: same shape input, fp16 fill value
                value = producer.attrs.get("value")
                fill = np.asarray(value.values) if value is not None else np.zeros(1, np.float32)
                self.graph.layer(
                    op="ConstantOfShape",
                    name=self.fresh(f"{producer.name or name}_fp16"),
                    inputs=[producer.inputs[0]],
                    outputs=[copy],
                    attrs={"value": gs.Constant(self.fresh(f"{name}_value"), self.half(fill, tensor.name))},
                )
        self.cast_cache[key] = copy
        return copy

    def cast(self, tensor: Any, to: str) -> Any:
        key = (id(tensor), to)
        if key not in self.cast_cache:
            dtype, onnx_type = (
                (np.float16, TensorProto.FLOAT16) if to == _F16 else (np.float32, TensorProto.FLOAT)
            )
            out = self.gs.Variable(self.fresh(f"{tensor.name}_{to}"), dtype=dtype, shape=tensor.shape)
            self.graph.layer(
                op="Cast",
                name=self.fresh(f"{tensor.name}_cast_{to}"),
                inputs=[tensor],
                outputs=[out],
                attrs={"to": onnx_type},
            )
            self.cast_cache[key] = out
        return self.cast_cache[key]

    def is_constant(self, tensor: Any) -> bool:
        if isinstance(tensor, self.gs.Constant):
            return True
        return bool(tensor.inputs) and tensor.inputs[0].op in ("Constant", "ConstantOfShape")

    def produced(self, tensor: Any) -> str | None:
        """What the fp16 model makes of an fp32 tensor: fp16, fp32, or None for a constant (copied
        in the type each reader wants)."""
        if self.is_constant(tensor):
            return None
        if not tensor.inputs:  # a graph input
            return _F32
        producer = tensor.inputs[0]
        return self.produces(producer, producer.outputs.index(tensor))

    def rewrite(self) -> None:
        """Apply the plans: fp16 types and Cast targets, then a Cast or an fp16 constant wherever a
        reader wants another type than its tensor has. Every decision is taken on the fp32 model
        first (`made`), so the edits never feed back into them."""
        gs = self.gs
        nodes = list(self.graph.nodes)
        made = {
            id(t): (t, self.produced(t))
            for node in nodes
            for t in (*node.inputs, *node.outputs)
            if self.is_f32(t)
        }
        readers = [(node, i, t) for node in nodes for i, t in enumerate(node.inputs) if id(t) in made]
        # graph outputs produced in fp16 get an fp16 twin; the original name becomes a Cast back
        for out in list(self.graph.outputs):
            if id(out) not in made or made[id(out)][1] != _F16:
                continue
            producer = out.inputs[0]
            twin = gs.Variable(self.fresh(f"{out.name}_fp16"), dtype=np.float16, shape=out.shape)
            producer.outputs[producer.outputs.index(out)] = twin
            for c, i, t in readers:  # a node reading the output (FPN features, an embedding) reads the twin
                if t is out:
                    c.inputs[i] = twin
            readers = [(c, i, twin if t is out else t) for c, i, t in readers]
            made[id(twin)] = (twin, _F16)
            made[id(out)] = (out, _F32)
            self.graph.layer(
                op="Cast",
                name=self.fresh(f"{out.name}_cast_fp32"),
                inputs=[twin],
                outputs=[out],
                attrs={"to": TensorProto.FLOAT},
            )
            self.cast_cache[(id(twin), _F32)] = out
        for node, i, t in readers:
            want = self.requirement(node, i)
            have = made[id(t)][1]
            if have is None:  # a constant: an fp16 copy for an fp16 reader, the original otherwise
                if want == _F16:
                    node.inputs[i] = self.constant_fp16(t)
            elif want is not None and want != have:
                node.inputs[i] = self.cast(t, want)
        for t, kind in made.values():
            if kind == _F16:
                t.dtype = np.float16
        for node in nodes:
            if (
                node.op == "Cast"
                and node.attrs.get("to") == TensorProto.FLOAT
                and self.produces(node, 0) == _F16
            ):
                node.attrs["to"] = TensorProto.FLOAT16

    def compute_nodes(self) -> list[Any]:
        """The graph's convs/matmuls (`_COMPUTE_OPS`, the default domain)."""
        return [n for n in self.graph.nodes if n.op in _COMPUTE_OPS and n.domain in (None, "", "ai.onnx")]

    def fp32_compute(self) -> list[Any]:
        """The convs/matmuls that read an fp32 tensor (before `rewrite`)."""
        return [n for n in self.compute_nodes() if any(map(self.is_f32, n.inputs[:2]))]

    def refuse_float64_compute(self) -> None:
        """One ModelError line for a conv/matmul that takes float64: the conversion types fp32 only,
        so it stayed float64 and `deployopt fp16` said "fp16 inside" of the model."""
        compute = self.compute_nodes()
        double = [n for n in compute if any(_is_dtype(t, np.float64) for t in n.inputs[:2])]
        if double:
            node = double[0]
            name = node.name or f"making {node.outputs[0].name}"
            raise ModelError(
                f"fp16 conversion: {node.op} {name!r} computes in float64 (double; {len(double)} of the "
                f"model's {len(compute)} convs/matmuls do): the conversion types fp32 only, so it would "
                "stay float64 in a model said to be fp16; give the model typed fp32"
            )

    def export(self) -> onnx.ModelProto:
        from deployopt.model import copy_model_metadata

        self.graph.cleanup(remove_unused_graph_inputs=False).toposort()
        out = self.gs.export_onnx(self.graph, do_type_check=False)
        copy_model_metadata(self.source, out)
        del out.graph.value_info[:]  # the fp32 model's types; the checks below infer the new ones
        return out


def _is_dtype(tensor: Any, dtype: Any) -> bool:
    """Whether a graphsurgeon tensor is typed `dtype` (False for no type or an ONNX-only one)."""
    try:
        return tensor.dtype is not None and np.dtype(tensor.dtype) == dtype
    except TypeError:
        return False


def _constant_value(attrs: dict[str, Any]) -> np.ndarray:
    if "value" in attrs:
        return np.asarray(attrs["value"].values)
    if "value_float" in attrs:
        return np.array(attrs["value_float"], dtype=np.float32)
    return np.array(attrs["value_floats"], dtype=np.float32)


def _to_half(values: np.ndarray) -> np.ndarray:
    """fp32 -> fp16 with finite values clamped to fp16's range (as TensorRT clamps fp16 weights),
    so a large finite weight does not become infinite; infinities and NaN stay what they are."""
    finite = np.isfinite(values)
    clamped = np.where(finite, np.clip(values, -FLOAT16_MAX, FLOAT16_MAX), values)
    return clamped.astype(np.float16)


def refuse_unconvertible(model: onnx.ModelProto) -> None:
    """One ModelError line for what `to_fp16` does not retype."""
    from deployopt.model import has_qdq

    ops = integer_compute(model)
    if ops:
        # first, as for Q/DQ: a quantize_dynamic model was "converted", its ConvInteger's int32
        # accumulator cast to fp16 (194487 -> inf); a QOperator model's Q/DQ nodes would say Q/DQ
        raise ModelError(
            f"fp16 conversion: the model is int8 without Q/DQ nodes ({'/'.join(ops)}: onnxruntime's "
            "dynamic or QOperator quantization): its convs/matmuls compute in integers the conversion "
            "does not retype, and an int32 accumulator cast to fp16 overflows past 65504; convert the "
            "fp32 model it was quantized from"
        )
    if has_qdq(model):
        raise ModelError(
            "fp16 conversion: the model has Q/DQ nodes (explicitly quantized): TensorRT 11 builds it in its "
            "own precision; time it with --dtype int8 (casts around its Q/DQ nodes would keep TensorRT "
            "from fusing them into INT8 kernels)"
        )
    loops = sorted({n.op_type for n in model.graph.node if n.op_type in _CONTROL_FLOW})
    if loops:
        raise ModelError(
            f"fp16 conversion: the model has {'/'.join(loops)} nodes, whose subgraphs this conversion "
            "does not retype; convert it with ModelOpt AutoCast (python -m modelopt.onnx.autocast "
            "--onnx_path model.onnx --output_path model_fp16.onnx) and time that model"
        )


def _untyped_message(tensor: Any) -> str:
    """The line for a tensor (an onnx-graphsurgeon Variable) shape inference left without a type:
    it named the tensor only, not the op that makes it (a TensorRT plugin in its own domain, which
    onnx cannot infer), nor the fix (its type declared in the graph's value_info)."""
    made_by = tensor.inputs[0] if tensor.inputs else None
    if made_by is None:
        what = f"{tensor.name!r}, a tensor no node makes,"
    else:
        domain = made_by.domain or ""
        op = f"{domain} {made_by.op}" if domain not in ("", "ai.onnx") else made_by.op
        known = onnx.defs.has(made_by.op, domain) if domain not in ("", "ai.onnx") else True
        why = "an op onnx's shape inference does not know" if not known else "shape inference gives it none"
        what = f"{tensor.name!r}, the output of {op} {made_by.name!r} ({why}),"
    return (
        f"fp16 conversion: {what} has no type: declare it in the graph's value_info (type and shape) "
        "and convert again (the conversion needs every tensor's type)"
    )


def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model typed fp16 inside with fp32 inputs and outputs (see the module docstring); a model
    already in fp16/bf16 comes back as it is. Validated before it is returned."""
    refuse_unconvertible(model)  # first: a Q/DQ model with fp16 casts (ModelOpt's) is int8, not fp16
    mixed = None
    if has_low_precision_tensors(model):  # is_low_precision, with the typing kept for the warning
        typing = compute_typing(model)
        if typing is None or not typing.ops or not typing.full:
            return model
        mixed = typing if typing.low else None
    if mixed is not None and (
        any(t != TensorProto.FLOAT16 for *_, t in mixed.low)
        or any(t != TensorProto.FLOAT for *_, t in mixed.full)
    ):  # bf16 or float64 among its types: typing the fp32 ops fp16 would leave it mixed still
        raise ModelError(
            f"fp16 conversion: the model is typed {mixed.label()} ({mixed.describe()}): the conversion "
            "types fp32 ops fp16, which would leave it mixed; give it in one precision (all fp32: "
            "converted; all fp16 or bf16: built as it is)"
        )
    types = set(_tensor_types(model).values())
    if TensorProto.DOUBLE in types and TensorProto.FLOAT not in types:
        # the conversion rewrites fp32 only: a float64 model came back unchanged, said "fp16 inside"
        raise ModelError("fp16 conversion: the model is typed float64 (double); it starts from an fp32 model")
    import onnx_graphsurgeon as gs
    from onnx_graphsurgeon.logger import G_LOGGER

    level = G_LOGGER.severity
    G_LOGGER.severity = G_LOGGER.ERROR
    try:
        conv = _Converter(model)
        untyped = [
            t
            for node in conv.graph.nodes
            for t in (*node.inputs, *node.outputs)
            if t.name and isinstance(t, gs.Variable) and t.dtype is None
        ]
        if untyped:
            raise ModelError(_untyped_message(untyped[0]))
        conv.refuse_float64_compute()
        fp32_compute = conv.fp32_compute()
        conv.pin()
        conv.rewrite()
        if fp32_compute and not any(_is_dtype(t, np.float16) for n in fp32_compute for t in n.inputs[:2]):
            # a model whose convs feed only a Cast to float64 or an integer kept them all fp32: it
            # was written and said "fp16 inside", and would be timed as fp16
            raise ModelError(
                f"fp16 conversion: none of the model's {len(fp32_compute)} fp32 convs/matmuls can take "
                "fp16 (each result is read only where fp32 is kept: a Cast to float64 or to an integer, "
                "shape arithmetic), so the model would compute in fp32 said to be fp16"
            )
        out = conv.export()
    finally:
        G_LOGGER.severity = level
    if conv.clamped:
        import warnings

        from deployopt.errors import DeployoptWarning

        names = ", ".join(repr(n) for n in conv.clamped[:3]) + (" …" if len(conv.clamped) > 3 else "")
        warnings.warn(
            f"fp16 conversion clamped {len(conv.clamped)} constant(s) with values beyond fp16's ±65504 "
            f"to it ({names}): the model computes otherwise where they matter (TensorRT clamps fp16 "
            "weights the same way)",
            DeployoptWarning,
            stacklevel=2,
        )
    if out.ir_version < 4:
        # IR 3 lists every initializer as a graph input; the export keeps the real inputs only, so
        # the checker refused the result. IR 4 (ONNX 1.3) lets initializers stand alone, as in
        # every model exported since (`analyze`, `apply` and `verify` read IR 3 as it is).
        out.ir_version = 4
    validate(out)
    if mixed is not None:
        # a model with fp32 convs and an fp16 classifier was copied as "already typed fp16"; one typed
        # by ModelOpt AutoCast with layers kept in fp32 is now typed fp16 throughout too: say so
        import warnings

        from deployopt.errors import DeployoptWarning

        warnings.warn(
            f"fp16 conversion: the model was typed {mixed.label()} ({mixed.describe()}): its fp32 "
            "convs/matmuls now take fp16 too; a layer kept in fp32 on purpose (ModelOpt AutoCast's) "
            "computes otherwise",
            DeployoptWarning,
            stacklevel=2,
        )
    return out


def to_fp16_bytes(data: bytes, base_dir: str | os.PathLike[str] | None = None) -> bytes:
    """`to_fp16` of a serialized model (the tensorrt backend converts the bytes it parses); weights
    kept in external data files are read from `base_dir`, the model file's folder."""
    try:
        model = onnx.load_from_string(data)
        if base_dir is not None:
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(model, str(base_dir))
    except Exception as exc:
        raise ModelError(f"fp16 conversion: cannot read the model ({first_line(exc)})") from None
    converted = to_fp16(model)
    return data if converted is model else converted.SerializeToString()


def write_fp16(src: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
    """Convert the model file `src` and write it to `dest` atomically (a temporary file, then a
    rename: a reader never sees half a model). Returns `src` itself when it is already fp16/bf16."""
    from deployopt.model import save_model, uses_external_data

    src, dest = Path(src), Path(dest)
    try:
        # the layout first: loading the data marks every tensor as inside the file, and an
        # external-data input was written as one file (over 2 GiB it could not be)
        external = uses_external_data(onnx.load(str(src), load_external_data=False))
        model = onnx.load(str(src))
    except Exception as exc:
        raise ModelError(f"{src.name}: cannot read it for the fp16 conversion ({first_line(exc)})") from None
    converted = to_fp16(model)
    if converted is model:
        return src
    from deployopt.model import make_node_names_unique

    make_node_names_unique(converted)
    save_model(converted, dest, external_data=external)
    return dest
