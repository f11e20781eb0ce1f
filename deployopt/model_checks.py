"""Load-time checks of what onnx.checker passes but the rest of deployopt (and onnxruntime) cannot
take: strings that are not UTF-8, tensors whose data does not fit their dims or whose type onnx does
not know, a Conv bias that is not 1-D, wrongly typed weights, zero-size convs. Each refusal is one
ModelError line naming what is wrong (`check_model_data`)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import onnx
from onnx import TensorProto

from deployopt.errors import ModelError, first_line, shorten
from deployopt.onnx_proto import VALUE_FIELDS

#: types packed below a byte an element (int4, float4, int2, float6 ...): how their raw bytes and
#: typed values count differs by type and onnx release, so their sizes are left to the checker (an
#: INT2 weight in int32_data, as onnx.helper writes it, was refused as corrupt)
_SUB_BYTE = {
    getattr(TensorProto, n)
    for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2", "FLOAT6E2M3", "FLOAT6E3M2")
    if hasattr(TensorProto, n)
}
_COMPLEX = {TensorProto.COMPLEX64, TensorProto.COMPLEX128}
_CONV_OPS = ("Conv", "ConvTranspose")


def check_model_data(model: onnx.ModelProto, name: str) -> onnx.ModelProto | None:
    """Raise ModelError (one line, `NAME: ...`) for a model onnx's checker passes but nothing can
    run: run it on the parsed model, its external data loaded, before any step reads its strings.

    Returns the type check's inference of the model as it is now (strict, on its `weightless`
    copy, without that copy's initializers), or None where that is not what it inferred (an input
    dim of 0 read as dynamic) or inference failed: `load_model` reuses it instead of inferring the
    same graph again where nothing has changed it since (`model.InferenceReuse`)."""
    _check_strings(model, name)
    consts = _check_tensors(model.graph, name)
    _check_conv_bias(model.graph, consts, name)
    _note_nonfinite_weights(model, name)
    inferred, as_is = _check_types(model, name)
    if inferred is None:
        return None
    _check_zero_size(inferred.graph, consts, name)
    if not as_is:
        return None
    del inferred.graph.initializer[:]  # the small and integer weights: whole in the copy, not needed
    return inferred


# 1. strings ----------------------------------------------------------------------------------


def _check_strings(msg: Any, name: str, where: str = "") -> None:
    """Every string field of `msg` and the messages in it (subgraphs too) decodes as UTF-8: protobuf
    keeps a proto2 string's bytes as read and raised UnicodeDecodeError at the first reader.

    `_strings_ok` looks without naming where: `_find_bad_string`, which builds a path string for
    every message it passes, took 0.23 s of a 9,000-node graph's 1.3 s load (`_strings_ok` 0.08 s),
    so it walks only a model found at fault, to name the field."""
    if not _strings_ok(msg):
        _find_bad_string(msg, name, where)


#: names of a message type's singular string fields, repeated string fields, singular message
#: fields and repeated message fields: what `_strings_ok` reads of it
_StringPlan = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]
_STRING_PLANS: dict[Any, _StringPlan] = {}


def _string_plan(descriptor: Any) -> _StringPlan:
    """The fields of a message type (its descriptor) `_strings_ok` reads, worked out once per type."""
    plan = _STRING_PLANS.get(descriptor)
    if plan is None:
        groups: tuple[list[str], list[str], list[str], list[str]] = ([], [], [], [])
        for fd in descriptor.fields:
            repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
            if fd.type == fd.TYPE_STRING:
                groups[1 if repeated else 0].append(fd.name)
            elif fd.type == fd.TYPE_MESSAGE:
                groups[3 if repeated else 2].append(fd.name)
        plan = _STRING_PLANS[descriptor] = (
            tuple(groups[0]),
            tuple(groups[1]),
            tuple(groups[2]),
            tuple(groups[3]),
        )
    return plan


def _strings_ok(msg: Any) -> bool:
    """Whether every string `_find_bad_string` reads (the same fields, in any order) is a str."""
    singular, repeated, messages, message_lists = _string_plan(msg.DESCRIPTOR)
    try:
        for f in singular:
            if not isinstance(getattr(msg, f), str):
                return False
        for f in repeated:
            for v in getattr(msg, f):
                if not isinstance(v, str):
                    return False
    except UnicodeDecodeError:
        return False
    for f in messages:
        if msg.HasField(f) and not _strings_ok(getattr(msg, f)):
            return False
    for f in message_lists:
        for sub in getattr(msg, f):
            if not _strings_ok(sub):
                return False
    return True


def _find_bad_string(msg: Any, name: str, where: str = "") -> None:
    """Raise ModelError naming the first string field (in field order, depth first) that is not
    UTF-8."""
    for fd in msg.DESCRIPTOR.fields:
        repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
        if fd.type == fd.TYPE_STRING:
            # protobuf raised UnicodeDecodeError reading such a field, or (upb, some fields) gave
            # its bytes, and the first copy into another message raised
            try:
                values = list(getattr(msg, fd.name)) if repeated else [getattr(msg, fd.name)]
                bad = any(not isinstance(v, str) for v in values)
            except UnicodeDecodeError:
                bad = True
            if bad:
                raise ModelError(
                    f"{name}: not an ONNX model: a string field is not valid UTF-8 ({where}{fd.name})"
                )
        elif fd.type == fd.TYPE_MESSAGE:
            if repeated:
                for i, sub in enumerate(getattr(msg, fd.name)):
                    _find_bad_string(sub, name, f"{where}{fd.name}[{i}].")
            elif msg.HasField(fd.name):
                _find_bad_string(getattr(msg, fd.name), name, f"{where}{fd.name}.")


# 3, 5. tensor data ---------------------------------------------------------------------------


def _graph_constants(graph: onnx.GraphProto) -> Iterator[tuple[str, str, TensorProto]]:
    """(what, output name, tensor) for each initializer and Constant `value` of `graph` and its
    subgraphs."""
    for t in graph.initializer:
        yield f"initializer {t.name!r}", t.name, t
    for i, node in enumerate(graph.node):
        for a in node.attribute:
            if node.op_type == "Constant" and a.type in _CONSTANT_VALUES:
                out = node.output[0] if node.output else ""
                yield f"Constant {node.name or out or f'node {i}'!r}", out, _constant_tensor(a)
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                for what, _out, t in _graph_constants(g):
                    yield what, "", t  # not the outer graph's names


_A = onnx.AttributeProto
_CONSTANT_VALUES = (_A.TENSOR, _A.FLOAT, _A.INT, _A.FLOATS, _A.INTS)


def _constant_tensor(a: onnx.AttributeProto) -> TensorProto:
    """A Constant's value as a tensor: its `value` as it is, a `value_float` (a scalar) or a
    `value_floats` (1-D) as one (the bias check reads their dims)."""
    if a.type == _A.TENSOR:
        return a.t
    if a.type in (_A.FLOAT, _A.INT):
        return onnx.helper.make_tensor(
            "",
            TensorProto.FLOAT if a.type == _A.FLOAT else TensorProto.INT64,
            [],
            [a.f if a.type == _A.FLOAT else a.i],
        )
    values = list(a.floats) if a.type == _A.FLOATS else list(a.ints)
    return onnx.helper.make_tensor(
        "", TensorProto.FLOAT if a.type == _A.FLOATS else TensorProto.INT64, [len(values)], values
    )


def _type_name(data_type: int) -> str:
    try:
        return TensorProto.DataType.Name(data_type)
    except ValueError:
        return str(data_type)


def _check_tensors(graph: onnx.GraphProto, name: str) -> dict[str, TensorProto]:
    """Each constant's type is one onnx knows and its data (raw bytes or typed values) is exactly
    what its dims need; external data is not read here. Returns {name: tensor} of the main graph's."""
    consts: dict[str, TensorProto] = {}
    for what, out, t in _graph_constants(graph):
        if out:
            consts[out] = t
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except (KeyError, ValueError, TypeError):
            raise ModelError(
                f"{name}: {what} has data type {t.data_type}, which onnx {onnx.__version__} does not know"
            ) from None
        if t.data_location == TensorProto.EXTERNAL or t.external_data or any(d < 0 for d in t.dims):
            continue  # the checker says what is wrong with a negative dim
        if t.data_type in _SUB_BYTE:
            continue
        numel = math.prod(t.dims)
        if t.HasField("raw_data"):
            if t.data_type == TensorProto.STRING:
                continue
            need = numel * itemsize
            have = len(t.raw_data)
            unit = "bytes"
        else:
            counts = [len(getattr(t, f)) for f in VALUE_FIELDS]
            have = sum(counts)
            if not have:
                continue  # no data at all: the checker's to say
            need = numel * (2 if t.data_type in _COMPLEX else 1)
            unit = "values"
        if have != need:  # the words only now: built for each of 12,800 weights, 25 ms of 90
            shape = "×".join(map(str, t.dims)) or "a scalar"
            kind = _type_name(t.data_type)
            raise ModelError(
                f"{name}: {what} holds {have} {unit} of data, but its {kind} dims ({shape}) need {need}: "
                "the file is corrupt"
            )
    return consts


# 4. Conv bias --------------------------------------------------------------------------------


def _check_conv_bias(graph: onnx.GraphProto, consts: dict[str, TensorProto], name: str) -> None:
    """A Conv / ConvTranspose bias is 1-D, one value per output channel (onnxruntime: "bias must be
    1-D"); a scalar bias crashed surgery."""
    for i, node in enumerate(graph.node):
        if node.op_type not in _CONV_OPS or len(node.input) < 3 or node.input[2] not in consts:
            continue
        bias = consts[node.input[2]]
        label = node.name or f"{node.op_type} node {i}"
        if len(bias.dims) != 1:
            shape = "×".join(map(str, bias.dims)) or "a scalar"
            raise ModelError(
                f"{name}: {node.op_type} {label!r}: its bias is {shape}, not 1-D "
                "(one value per output channel)"
            )
        w = consts.get(node.input[1])
        if w is None or len(w.dims) < 2:
            continue
        group = next((a.i for a in node.attribute if a.name == "group"), 1) or 1
        out_channels = w.dims[0] if node.op_type == "Conv" else w.dims[1] * group
        if bias.dims[0] != out_channels:
            raise ModelError(
                f"{name}: {node.op_type} {label!r}: its bias has {bias.dims[0]} values for {out_channels} "
                "output channels"
            )


# 6. types ------------------------------------------------------------------------------------


def _check_types(model: onnx.ModelProto, name: str) -> tuple[onnx.ModelProto | None, bool]:
    """onnx's type check (each op's inputs of the types its schema allows, alike where it says so:
    a float16 bias beside float32, an int8 weight with no DequantizeLinear) on a `weightless` copy;
    the inferred copy, or None where inference fails without the type check too (load's own
    inference says why then), and whether the copy was the model as it is (no input dim of 0
    replaced)."""
    from deployopt.model import weightless  # model imports this module

    skel = weightless(model)
    as_is = True
    for value in skel.graph.input:  # a dim of 0 is a dynamic one to loading (`--input-shape` sets it):
        for d in value.type.tensor_type.shape.dim:  # inferred at 0, every conv was "zero-size"
            if d.HasField("dim_value") and d.dim_value <= 0:
                d.dim_param = "unknown"
                as_is = False
    try:
        return onnx.shape_inference.infer_shapes(skel, check_type=True, strict_mode=True), as_is
    except Exception as exc:
        typed_error = shorten(" ".join(str(exc).split()), 300) or first_line(exc)
    try:
        inferred = onnx.shape_inference.infer_shapes(skel, strict_mode=True)
    except Exception:
        return None, as_is  # not a type error (or not only): load's shape inference says what it is
    del inferred
    raise ModelError(f"{name}: wrongly typed tensors (onnxruntime cannot load it): {typed_error}")


# 7. non-finite weights -----------------------------------------------------------------------

#: float types whose NaN and infinities numpy reads directly
_NP_FLOATS = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE}
#: elements checked at a time (np.isfinite makes a bool array as long as what it reads)
_FINITE_CHUNK = 1 << 22
#: ops whose every input is a weight computed with: an infinity there is one in the outputs (a -inf
#: elsewhere, a Where's or an Add's attention mask, is a legitimate constant)
_COMPUTE_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "InstanceNormalization")
_WARNED: set[str] = set()


def _tensor_values(t: TensorProto) -> Any:
    """The values of a float initializer (NaN and infinities as numpy reads them), or None for one
    of another type, with external data not loaded, or without data. bfloat16 as float32 (its bits
    are float32's upper half)."""
    import numpy as np

    if t.data_location == TensorProto.EXTERNAL or t.external_data:
        return None
    if t.data_type in _NP_FLOATS:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        if t.HasField("raw_data"):
            return np.frombuffer(t.raw_data, dtype=dtype)
        if t.data_type == TensorProto.FLOAT16:  # typed: the fp16 bits in int32_data
            return np.asarray(t.int32_data, dtype=np.uint16).view(np.float16)
        return np.asarray(t.double_data if t.data_type == TensorProto.DOUBLE else t.float_data, dtype=dtype)
    if t.data_type == TensorProto.BFLOAT16:
        bits = np.frombuffer(t.raw_data, np.uint16) if t.HasField("raw_data") else np.asarray(t.int32_data)
        return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)
    return None


def nonfinite_weights(model: onnx.ModelProto) -> list[tuple[str, int, int]]:
    """(tensor name, NaN count, infinite count) for each float weight of the main graph -- an
    initializer or a Constant node's `value` -- holding a NaN or an infinity where a Conv, Gemm,
    MatMul or normalization computes with it (`_COMPUTE_OPS`): a diverged or badly converted
    checkpoint, which computes NaN or infinite outputs on any input. A NaN or infinity other ops
    read (a Where's fill value, a mask's -inf) is a legitimate constant and not counted. A
    Constant's entry has a 4th item saying where it is (`describe_nonfinite`). One np.isfinite pass
    over the weights, a few MiB at a time."""
    import numpy as np

    computed = {x for n in model.graph.node if n.op_type in _COMPUTE_OPS for x in n.input}
    weights: list[tuple[str, TensorProto, tuple[str, ...]]] = [
        (t.name, t, ()) for t in model.graph.initializer if t.name in computed
    ]
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] in computed:
            for a in node.attribute:
                if a.name == "value" and a.type == _A.TENSOR:
                    out = node.output[0]
                    weights.append((out, a.t, (f"Constant {node.name or out!r} (output {out!r})",)))
    found: list[Any] = []
    for name, t, where in weights:
        values = _tensor_values(t)
        if values is None or not values.size:
            continue
        nan = inf = 0
        for i in range(0, values.size, _FINITE_CHUNK):
            part = values[i : i + _FINITE_CHUNK]
            if not np.isfinite(part).all():
                n = int(np.count_nonzero(np.isnan(part)))
                nan, inf = nan + n, inf + int(np.count_nonzero(~np.isfinite(part))) - n
        if nan or inf:
            found.append((name, nan, inf, *where))
    return found


def describe_nonfinite(found: list[tuple[str, int, int]]) -> str:
    """`initializer 'c1.weight' holds 1 NaN value(s)` (or `Constant 'n' (output 'w') holds ...`,
    for an entry with a 4th item saying where), and how many other weights do."""
    name, nan, inf, *where = found[0]
    held = " and ".join(
        part for part in (f"{nan} NaN" if nan else "", f"{inf} infinite" if inf else "") if part
    )
    what = where[0] if where else f"initializer {name!r}"
    kind = "weight(s)" if any(len(f) > 3 for f in found[1:]) else "initializer(s)"
    more = f" (and {len(found) - 1} other {kind})" if len(found) > 1 else ""
    return f"{what} holds {held} value(s){more}"


def _note_nonfinite_weights(model: onnx.ModelProto, name: str) -> None:
    """A model whose weights hold NaN (or infinities a conv computes with) loads, with one warning
    line naming the initializer: timing it is still valid, and the commands that compute its
    outputs (verify, optimize's fidelity check, a trim's ranking) refuse it naming the weight; they
    blamed the data and sent the user to give or rescale --calibration-data, which cannot help."""
    import warnings

    from deployopt.errors import DeployoptWarning

    found = nonfinite_weights(model)
    if not found:
        return
    said = describe_nonfinite(found)
    if said in _WARNED:  # once a process: optimize loads each candidate, which holds the same weights
        return
    _WARNED.add(said)
    warnings.warn(
        f"{name}: {said}: what the model computes from it is NaN or infinite whatever the input (a "
        "diverged or badly converted checkpoint?); timings are still valid, outputs are not: fix or "
        "re-export the checkpoint",
        DeployoptWarning,
        stacklevel=2,
    )


# 8. zero-size convs --------------------------------------------------------------------------


def _check_zero_size(graph: onnx.GraphProto, consts: dict[str, TensorProto], name: str) -> None:
    """A conv with a zero-size weight or an output with a 0 dim (0 output channels; a kernel larger
    than its padded input): nothing to time or prune."""
    shapes: dict[str, list[int | None]] = {}
    for vi in list(graph.value_info) + list(graph.output) + list(graph.input):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            shapes[vi.name] = [
                d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim
            ]
    for i, node in enumerate(graph.node):
        if node.op_type not in _CONV_OPS or not node.output:
            continue
        label = node.name or f"{node.op_type} node {i}"
        w = consts.get(node.input[1]) if len(node.input) > 1 else None
        if w is not None and 0 in w.dims:
            dims = "×".join(map(str, w.dims))
            raise ModelError(f"{name}: {node.op_type} {label!r} has a zero-size weight ({dims})")
        out = shapes.get(node.output[0])
        if out and 0 in out:
            dims = "×".join("?" if d is None else str(d) for d in out)
            raise ModelError(
                f"{name}: {node.op_type} {label!r}: its output is {dims}, zero-size "
                "(no output channels, or a kernel larger than its padded input)"
            )
