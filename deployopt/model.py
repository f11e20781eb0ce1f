"""Load an ONNX CNN into the one form every later stage expects, and save edited models safely.

Every stage after loading (coupling, surgery, the wave model) needs static shapes and weights that
are plain initializers. Real exports rarely give both: weights arrive as Constant nodes or computed
by ConstantOfShape subgraphs, the batch dimension is symbolic. Loading normalizes that once, so no
later stage has to care, and it reports what it changed as notices instead of silently guessing.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import math
import os
import select
import shlex
import stat
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from deployopt.errors import (
    DeployoptError,
    ModelError,
    OutputError,
    StaticDimsError,
    first_line,
    no_such_file,
    reraise_interrupt,
    shorten,
)
from deployopt.fileio import (
    NAME_MAX,
    check_output_file,
    make_output_dir,
    output_error,
    publish,
    resolve_output,
    temp_prefix,
    write_pieces,
)
from deployopt.onnx_proto import check_skeleton, copy_fields, has_unknown_fields, serialized_pieces
from deployopt.prebuilt import is_engine_file, not_onnx

#: A safety stop only: folding runs while each pass removes nodes. A dynamic-batch ShuffleNetV2
#: exported at opset 11 needs 29 passes (each channel shuffle's Reshape target is computed from the
#: shape of the previous block's output, known only once that block is folded).
_MAX_FOLD_PASSES = 1000
#: Initializers at most this large that several nodes read get one copy per reader
#: (`_unshare_constants`).
UNSHARE_MAX_ELEMENTS = 4096

#: Ops that make a graph worth running through onnx-graphsurgeon's constant folding.
_FOLD_HINT_OPS = frozenset({"Constant", "ConstantOfShape", "Shape", "Size"})
#: Never folded: a Q/DQ of constants is a quantized weight (int8 → DequantizeLinear → Conv), which
#: TensorRT needs as it is to build INT8 kernels; folding it would leave float weights.
_KEEP_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


@dataclass
class LoadedModel:
    """A model ready for analysis: constants folded, static input shapes, shapes inferred."""

    model: onnx.ModelProto
    path: Path
    notices: list[str] = field(default_factory=list)
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    external_data: bool = False
    #: inputs whose batch (dim 0) the file left dynamic → the file's symbol ("" when unnamed); loading
    #: fixes them, deployopt.batch gives a written model the symbol back
    dynamic_batch: dict[str, str] = field(default_factory=dict)
    #: inputs whose batch the file fixed → that batch (a --batch of another is a rewrite of it)
    file_batch: dict[str, int] = field(default_factory=dict)
    #: inputs → the indices of their dims past the batch that the file left dynamic (H, W of a
    #: detector export) and loading fixed from --input-shape: deployopt.dynamic_dims gives a written
    #: model the symbols back, or it keeps those sizes (`fixed_size_notice`)
    file_dynamic_dims: dict[str, list[int]] = field(default_factory=dict)

    def fixed_size_notice(self, why: str = "") -> str:
        """What a model written from this one at the loaded size is fixed to that the file left
        dynamic, or ""; `why`: why the dynamic size could not be kept (deployopt.dynamic_dims)."""
        parts = [
            f"{name!r} dims {', '.join(map(str, dims))} at "
            f"{'×'.join(str(self.input_shapes[name][i]) for i in dims)}"
            for name, dims in self.file_dynamic_dims.items()
            if dims and name in self.input_shapes
        ]
        if not parts:
            return ""
        reason = f" (the dynamic size could not be kept: {why})" if why else ""
        return (
            f"written at the size given by --input-shape ({'; '.join(parts)}), which the input file "
            f"left dynamic: the written model runs at that size only{reason}"
        )

    @property
    def static_batch(self) -> int | None:
        """The batch the dynamic-batch inputs were fixed to (None when there are none or they differ)."""
        batches = {self.input_shapes[n][0] for n in self.dynamic_batch if self.input_shapes.get(n)}
        return batches.pop() if len(batches) == 1 else None


#: Q/DQ element types deployopt does not price or label int8: 16-bit integers anywhere (W8A16,
#: quantize_static(activation_type=QuantType.QUInt16)), 4-bit integers on activations (int4
#: weights are read as computed weights: their convs' groups freeze, and the model stays int8).
_WIDE_QDQ = {TensorProto.INT16: "int16", TensorProto.UINT16: "uint16"}
_NARROW_QDQ = {getattr(TensorProto, t): t.lower() for t in ("INT4", "UINT4") if hasattr(TensorProto, t)}
#: ... and float types (FP8: ModelOpt's --quantize_mode fp8, FLOAT8E4M3FN; FP4): TensorRT builds
#: them as FP8/FP4, never INT8, and deployopt has no fp8 dtype to price, time or record them in.
_FLOAT_QDQ = {
    getattr(TensorProto, t): t.lower()
    for t in dir(TensorProto)
    if t.startswith(("FLOAT8", "FLOAT4")) and isinstance(getattr(TensorProto, t), int)
}


def _qdq_types(model: onnx.ModelProto) -> tuple[dict[str, int], set[str]]:
    """(element type of each tensor known without inference, the names of constants) for has_qdq:
    initializers, graph inputs/outputs/value_info, Constant values, Cast targets."""
    g = model.graph
    types = {t.name: t.data_type for t in g.initializer}
    consts = set(types)
    for vi in (*g.input, *g.output, *g.value_info):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types.setdefault(vi.name, vi.type.tensor_type.elem_type)
    for node in g.node:
        if node.op_type == "Constant" and node.output:
            consts.add(node.output[0])
            for a in node.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    types[node.output[0]] = a.t.data_type
        elif node.op_type == "Cast" and node.output:
            for a in node.attribute:
                if a.name == "to":
                    types[node.output[0]] = a.i
    return types, consts


def _refuse_unpriced_qdq(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> None:
    """One ModelError line for a Q/DQ model quantized to a type deployopt neither prices nor labels:
    W8A16 (uint16 activations) was priced, timed and recorded as int8 ("int8 from the model's Q/DQ
    nodes"). The type is the zero point's, else QuantizeLinear's `output_dtype` (opset 21), else
    uint8 (its default); a DequantizeLinear's is its input's. An unknown type is taken as 8-bit.
    FP8/FP4 Q/DQ (weights or activations) is refused too: it was labelled, priced and timed int8
    ("int8 from the model's Q/DQ nodes") where TensorRT builds FP8; refused rather than labelled
    fp8, as no backend, LUT or price deployopt has knows an fp8 dtype."""
    types, consts = _qdq_types(model)
    quantized_consts = {  # a float weight -> Q -> DQ (pytorch-quantization, ModelOpt): still a weight
        n.output[0] for n in nodes if n.op_type == "QuantizeLinear" and n.input and n.input[0] in consts
    }
    for i, node in enumerate(nodes):
        zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if node.op_type == "QuantizeLinear":
            out_dtype = next((a.i for a in node.attribute if a.name == "output_dtype" and a.i), None)
            elem = types.get(zp) if zp else (out_dtype or TensorProto.UINT8)
        else:
            elem = types.get(node.input[0]) if node.input else None
            elem = elem or (types.get(zp) if zp else None)
        weight = bool(node.input) and (node.input[0] in consts or node.input[0] in quantized_consts)
        what = "weights" if weight else "activations"
        name = node.name or f"{node.op_type} node {i}"
        fp = _FLOAT_QDQ.get(elem or 0)
        if fp is not None:
            raise ModelError(
                f"{node.op_type} {name!r} quantizes {what} to {fp}: FP{fp[5]} Q/DQ, which TensorRT "
                "builds as such, not INT8; deployopt prices and labels int8 only (quantize with "
                "--quantize_mode int8, or time the float model)"
            )
        wide = _WIDE_QDQ.get(elem or 0)
        narrow = None if weight else _NARROW_QDQ.get(elem or 0)
        if wide is None and narrow is None:
            continue
        if wide:
            kind = "W8A16" if not weight else "16-bit weights"
            raise ModelError(
                f"{node.op_type} {name!r} quantizes {what} to {wide}: 16-bit Q/DQ ({kind}): TensorRT has "
                "no 16-bit quantized convs; deployopt prices and labels int8 only (quantize with "
                "QuantType.QInt8 or QUInt8 activations and weights)"
            )
        raise ModelError(
            f"{node.op_type} {name!r} quantizes activations to {narrow}: TensorRT quantizes to INT4 for "
            "weights only; deployopt prices and labels int8 only (quantize activations with "
            "QuantType.QInt8 or QUInt8)"
        )


def has_qdq(model: onnx.ModelProto) -> bool:
    """Whether the model is explicitly quantized (QuantizeLinear/DequantizeLinear nodes): TensorRT
    builds such a model as INT8 from its own scales, with no calibration. Every caller then prices,
    times or labels it int8, so a Q/DQ model quantized to another integer width (16-bit anywhere,
    4-bit activations) is one ModelError line here (`_refuse_unpriced_qdq`), not an int8 model."""
    nodes = [n for n in model.graph.node if n.op_type in _KEEP_OPS]
    if not nodes:
        return False
    _refuse_unpriced_qdq(model, nodes)
    return True


def peek_model(path: str | os.PathLike[str]) -> onnx.ModelProto | None:
    """The model file at `path` parsed without its external weights, for a quick look before the
    command's own loading: None for a file that cannot be parsed (that loading reports it in one
    line) and for a pipe, which reading here would leave empty for that loading. Parsed by
    `_parse`, as loading does: onnx.load goes by the name, and a .json or .textproto given as the
    model raised its parser's error as a traceback."""
    path = Path(path)
    try:
        return _parse(path) if path.is_file() else None
    except (OSError, ModelError):
        return None


def _subgraphs(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.GraphProto]:
    """The subgraphs (If branches, Loop and Scan bodies) that `nodes` hold, one level down."""
    for node in nodes:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield a.g
            elif a.type == onnx.AttributeProto.GRAPHS:
                yield from a.graphs


def nested_qdq(model: onnx.ModelProto) -> bool:
    """Whether a QuantizeLinear/DequantizeLinear node sits in a subgraph (If/Loop/Scan body, however
    deep) or a model-local function, where `has_qdq` (the main graph: what TensorRT builds INT8
    from) does not look; onnxruntime fuses those too (fidelity.has_qdq_nodes). A model with
    neither costs one look at the main graph's attributes."""
    pending = [n for f in model.functions for n in f.node]
    pending += (n for g in _subgraphs(model.graph.node) for n in g.node)
    while pending:  # not recursive: Ifs may nest deeper than Python's recursion limit
        node = pending.pop()
        if node.op_type in _KEEP_OPS:
            return True
        pending.extend(n for g in _subgraphs([node]) for n in g.node)
    return False


def file_has_qdq(path: str | os.PathLike[str], nested: bool = False) -> bool:
    """`has_qdq` of a model file (`peek_model`'s); False for one that cannot be parsed. Its refusal
    of a Q/DQ model deployopt does not label int8 (W8A16) names the file. `nested`: Q/DQ nodes in
    subgraphs or local functions count too (`nested_qdq`). Read once per file as it is now
    (`_file_key`, as file_typed_precision), both answers from one parse: optimize's default dtype
    asks before the run and again when the run starts, and a 415 MB model parses in about 0.9 s."""
    key = _file_key(Path(path))
    if key is not None and key in _HAS_QDQ:
        found, below = _HAS_QDQ[key]
        return found or (nested and below)
    model = peek_model(path)
    try:
        found = model is not None and has_qdq(model)
        below = model is not None and nested_qdq(model)
    except ModelError as exc:
        raise ModelError(f"{Path(path).name}: {exc}") from None
    except UnicodeDecodeError:  # a string not UTF-8: the command's own loading says so in one line
        found = below = False
    if key is not None:
        _HAS_QDQ[key] = (found, below)
    return found or (nested and below)


def folded_at_load(path: str | os.PathLike[str], loaded: onnx.ModelProto) -> list[str]:
    """The nodes of the file at `path` that its loaded model (`loaded`, load_model's) no longer
    computes: constant subgraphs folded at load (a Shape → Gather → Concat chain feeding a
    Reshape), in file order, by name; an unnamed one as "<op> (unnamed, node <i> of the file)". A
    node is kept when the loaded model still produces one of its outputs (loading keeps tensor
    names; it names unnamed nodes anew). A profile maps kernels to the loaded model's nodes, so
    these were in no list of it, only counted in a notice. [] for a file that cannot be parsed."""
    try:
        raw = _parse(Path(path))
    except (OSError, ModelError):
        return []
    produced = {t for n in loaded.graph.node for t in n.output if t}
    return [
        n.name or f"{n.op_type} (unnamed, node {i} of the file)"
        for i, n in enumerate(raw.graph.node)
        if not any(t in produced for t in n.output if t)
    ]


def file_typed_precision(path: str | os.PathLike[str]) -> str:
    """`precision.typed_precision` of a model file (`peek_model`'s); "fp32" for one that cannot be
    parsed. Its ModelError (has_qdq's: FP8 or W8A16 Q/DQ) names the file. Read once per file as it
    is now (path, inode, size, mtime, ctime): the TensorRT backends ask before every build and again for
    the record, and parsing a 415 MB model took 0.87 s each time."""
    path = Path(path)
    key = _file_key(path)
    if key is not None and key in _TYPINGS:
        label, refused = _TYPINGS[key]
    else:
        label, refused = _typing_or_refusal(peek_model(path))
        if key is not None:
            _TYPINGS[key] = (label, refused)
    if refused is not None:
        raise ModelError(f"{path.name}: {refused}")
    return label


def typed_precision_of_bytes(data: bytes, name: str) -> str:
    """`file_typed_precision` of a model already read (the tensorrt backend's worker holds its bytes):
    no second read of the file; "fp32" for bytes that are not a model."""
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        return "fp32"
    label, refused = _typing_or_refusal(model if model.HasField("graph") else None)
    if refused is not None:
        raise ModelError(f"{name}: {refused}")
    return label


#: file_typed_precision's answers: (label, refusal) by (path, device, inode, size, mtime)
_TYPINGS: dict[tuple[str, int, int, int, int, int], tuple[str, str | None]] = {}
#: file_has_qdq's answers, by `_file_key`: (Q/DQ in the main graph, in subgraphs or local functions)
_HAS_QDQ: dict[tuple[str, int, int, int, int, int], tuple[bool, bool]] = {}


def _file_key(path: Path) -> tuple[str, int, int, int, int, int] | None:
    """A regular file as it is now (path, device, inode, size, mtime, ctime), to memoize what was
    read from it; None for what is no regular file (a pipe is read once anyway: never memoized)."""
    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    # ctime too: a same-size rewrite in place within the mtime clock's tick, or one whose mtime
    # was set back (cp -p, rsync -t, tar x), keeps size and mtime but not ctime
    return (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _typing_or_refusal(model: onnx.ModelProto | None) -> tuple[str, str | None]:
    """(typed_precision's label, None) or ("", has_qdq's refusal). Typed on a `weightless` copy:
    shape inference of a typed model copied the whole model, weights included."""
    from deployopt.precision import typed_precision

    if model is None:
        return "fp32", None
    try:
        return typed_precision(weightless(model)), None
    except ModelError as exc:
        return "", str(exc)
    except UnicodeDecodeError:  # a string not UTF-8: the command's own loading says so in one line
        return "fp32", None


def uses_external_data(model: onnx.ModelProto) -> bool:
    return any(t.data_location == TensorProto.EXTERNAL for t in _graph_tensors(model.graph))


def _graph_tensors(graph: onnx.GraphProto) -> list[TensorProto]:
    """Every tensor a graph holds: initializers (sparse ones' values and indices), node attributes'
    tensors (a Constant's value), and the same in subgraphs (If, Loop, Scan bodies)."""
    tensors = [*graph.initializer]
    for sparse in graph.sparse_initializer:
        tensors += [sparse.values, sparse.indices]
    for node in graph.node:
        for a in node.attribute:
            tensors += [a.t] if a.HasField("t") else []
            tensors += list(a.tensors)
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                tensors += _graph_tensors(sub)
    return tensors


def external_locations(model: onnx.ModelProto) -> list[str]:
    """The `location` of every tensor stored outside the file (see _graph_tensors), each once."""
    found = []
    for t in _graph_tensors(model.graph):
        if t.data_location == TensorProto.EXTERNAL:
            found += [e.value for e in t.external_data if e.key == "location" and e.value]
    return list(dict.fromkeys(found))


def external_data_files(model_path: str | os.PathLike[str]) -> list[tuple[Path, str]]:
    """(file here, name beside the model) for each external-data file the model reads: what must go
    along when the model is copied elsewhere (a board over scp), where TensorRT's parser looks for
    them beside the model. A location that is not a plain file name beside the model (a subfolder,
    `..`) or a file that is missing is a one-line ModelError: copied as is it could not be found."""
    model = Path(model_path)
    out = []
    for loc in external_locations(_parse(model)):
        if Path(loc).name != loc or loc in (".", ".."):
            raise ModelError(
                f"{model.name} keeps weights in {loc!r}, not a file beside it: save the model with its "
                "external data in one file next to it (onnx.save(..., location='NAME.data'))"
            )
        if not (model.parent / loc).is_file():
            raise ModelError(f"{model.name} keeps weights in {loc}, which is not beside it ({model.parent})")
        out.append((model.parent / loc, loc))
    return out


def external_data_sha256(model_path: str | os.PathLike[str]) -> str | None:
    """One sha256 over the external-data files the model reads (by location, in order), or None for
    a model that keeps its weights inside: optimize's resume check, which hashed the .onnx alone and
    resumed a run whose weights file had been replaced (its journal's fidelity, the new weights')."""
    import hashlib

    from deployopt.fileio import file_sha256

    model = Path(model_path)
    locations = external_locations(_parse(model))
    if not locations:
        return None
    digest = hashlib.sha256()
    for loc in locations:
        path = model.parent / loc
        digest.update(f"{loc}:{file_sha256(path) if path.is_file() else 'missing'}\n".encode())
    return digest.hexdigest()


def check_weights_name(path: str | os.PathLike[str]) -> None:
    """An OutputError when `path`'s weights file, `<name>.data` beside it (save_model with external
    data), is a name too long for one file: a model name of 251-255 bytes is fine, its .data not.
    apply and fp16 check it before their work, save_model again when it writes."""
    dest, direct = resolve_output(path)
    if direct:  # a pipe or device gets no weights file: save_model says so
        return
    data = dest.with_name(dest.name + ".data")
    if len(os.fsencode(data.name)) > NAME_MAX:
        raise OutputError(f"cannot write {data}: {os.strerror(errno.ENAMETOOLONG)} (the weights file)")


def refuse_replacing_weights(model_path: str | os.PathLike[str], outputs: Sequence[Path], hint: str) -> None:
    """An OutputError when one of `outputs` is a weights file the model reads (external data): the
    output is renamed over it, and the input model then reads the edited model's weights at its
    own offsets and computes garbage without an error. Parsed only when one of `outputs` exists."""
    model = Path(model_path)
    # an output that is a link is written at its target, the weights beside the target (save_model):
    # `apply M -o link.onnx`, link.onnx → X/model.onnx, replaced X/model.onnx.data, the weights of
    # the X/foo.onnx being edited (only `-o X/model.onnx` was refused)
    targets = [t.resolve() for t in outputs if t.is_symlink()]
    outputs = [*outputs, *targets, *(t.with_name(t.name + ".data") for t in targets)]
    existing = [o for o in outputs if o.is_file()]
    if not existing or not model.is_file():
        return
    sources = _weights_read_by(model)
    for out in existing:
        if any(out.samefile(src) for src in sources):
            raise OutputError(f"cannot write {out}: it is the weights file {model} reads; {hint}")


def _weights_read_by(model: Path) -> list[Path]:
    """The external-data files that exist and `model` reads ([] when it cannot be parsed: loading
    says what is wrong with it). Its locations are read once per file as it is now (as
    file_typed_precision's): optimize --resume checked its outputs twice per call, each a full parse
    (0.7 s and 270 MB for a 256 MB model)."""
    try:
        st = model.stat()
    except OSError:
        return []
    key = (str(model.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _LOCATIONS:
        try:
            _LOCATIONS[key] = external_locations(_parse(model))
        except ModelError:
            _LOCATIONS[key] = []
    return [src for src in (model.parent / loc for loc in _LOCATIONS[key]) if src.is_file()]


#: _weights_read_by's external locations by (path, device, inode, size, mtime, ctime)
_LOCATIONS: dict[tuple[str, int, int, int, int, int], list[str]] = {}

#: save_model reads the locations of a destination it replaces only up to this size, or with a
#: NAME.data beside it: a model keeping its weights outside holds its graph alone (kilobytes to a few
#: MB), and parsing a 256 MB model with its weights inside only to find none took 0.5 s a save
REPLACED_PARSE_MAX_BYTES = 64 << 20


def _replaced_weights(dest: Path) -> list[Path]:
    """The weights files the model at `dest` reads, before save_model replaces it (see
    REPLACED_PARSE_MAX_BYTES)."""
    try:
        st = dest.stat()
    except OSError:
        return []
    if not stat.S_ISREG(st.st_mode):
        return []
    if st.st_size > REPLACED_PARSE_MAX_BYTES and not dest.with_name(dest.name + ".data").exists():
        return []
    return _weights_read_by(dest)


def refuse_directory(path: Path) -> None:
    """A folder given as the model: one wording for every command that takes a model file."""
    if path.is_dir():
        raise ModelError(f"{path}: is a directory, expected an .onnx file")


# protobuf's limit on one message: an ONNX file above it keeps its weights as external data
MAX_PROTO_BYTES = 2**31 - 1
#: how long loading waits for a process to open a named pipe given as the model for writing: a
#: blocking open waited forever (`analyze fifo` with nothing feeding it hung); `<(cmd)` and a
#: writer started first are there at once
PIPE_WRITER_WAIT_S = 5.0


def _refuse_device(path: Path, mode: int) -> None:
    """A device or socket is refused before reading (`/dev/zero` would fill memory)."""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        kind = "socket" if stat.S_ISSOCK(mode) else "device"
        raise ModelError(f"{path}: is a {kind}, not a file; give an .onnx file")


def require_model_file(path: Path, command: str) -> None:
    """One line, before any work, unless `path` is a regular file. For commands that read the model
    by its path more than once (loading, then onnxruntime or a backend worker opening it again): a
    pipe gives its bytes once, so the second read hung on a named FIFO or found nothing."""
    try:
        if not path.exists():
            raise no_such_file(path, ModelError)
        refuse_directory(path)
        mode = path.stat().st_mode
    except OSError as exc:
        raise ModelError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    _refuse_device(path, mode)
    if stat.S_ISFIFO(mode):
        raise ModelError(f"{path}: is a pipe; {command} reads the model more than once: give an .onnx file")


def _wait_for_writer(fd: int, timeout_s: float) -> bytes | None:
    """None when no process opens the pipe for writing within `timeout_s`, else what a non-blocking
    read got (b"" when nothing yet). Linux polls a pipe as hung up only once a writer has been seen,
    so silence is no writer or one that has not written yet: a non-blocking read tells them apart."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if poller.poll(int(timeout_s * 1000)):
        return b""
    try:
        return os.read(fd, 1 << 20) or None  # end of file: no writer
    except BlockingIOError:  # a writer, with nothing written yet
        return b""


def read_pipe(path: Path, max_bytes: int, error: type[DeployoptError], what: str, too_much: str) -> bytes:
    """The bytes of the named pipe at `path`, for every reader of a path a user gives (a model
    here, a JSON file in fileio.read_json_input): `error` "… is a pipe nothing writes to" where no
    process opens it for writing within PIPE_WRITER_WAIT_S (a blocking open waited forever), its
    hint to give `what` instead; `error(too_much)` once more than `max_bytes` came (an endless
    pipe). Read in 1 MiB chunks: one read of 2 GiB would allocate it up front. OSError propagates."""
    # a blocking open would wait for a writer forever
    with open(path, "rb", buffering=0, opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as f:
        first = _wait_for_writer(f.fileno(), PIPE_WRITER_WAIT_S)
        if first is None:
            raise error(
                f"{path}: is a pipe nothing writes to (waited {PIPE_WRITER_WAIT_S:g} s); "
                f"start its writer first, or give {what}"
            )
        os.set_blocking(f.fileno(), True)
        chunks, size = [first], len(first)
        while size <= max_bytes and (chunk := f.read(1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    if size > max_bytes:
        raise error(too_much)
    return b"".join(chunks)


def _read_model_bytes(path: Path) -> bytes:
    """The file's bytes. A pipe (`<(gunzip -c m.onnx.gz)`) is read up to protobuf's limit, so an
    endless one ends in one line, and one that no process opens for writing ends in one line after
    PIPE_WRITER_WAIT_S; a device or socket is refused before reading."""
    try:
        mode = path.stat().st_mode
        _refuse_device(path, mode)
        if not stat.S_ISFIFO(mode):
            return path.read_bytes()
        too_much = f"{path}: more than 2 GiB came through the pipe: not an ONNX model file"
        return read_pipe(path, MAX_PROTO_BYTES, ModelError, "an .onnx file", too_much)
    except OSError as exc:
        raise ModelError(f"{path}: cannot read it: {exc.strerror or exc}") from None


def _parse(path: Path) -> onnx.ModelProto:
    if not path.exists():
        raise no_such_file(path, ModelError)
    refuse_directory(path)
    if is_engine_file(path):  # by its name, as the runner decides: not read (engines are large)
        raise ModelError(not_onnx(path))
    data = _read_model_bytes(path)
    if not data:
        raise ModelError(f"{path}: empty file")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise ModelError(
            f"{path}: not an ONNX model (protobuf parse failed: truncated or not ONNX)"
        ) from None
    if model.ir_version == 0 or not model.HasField("graph") or not model.graph.node:
        raise ModelError(f"{path}: not an ONNX model (no IR version or empty graph)")
    return model


def _check_opset(model: onnx.ModelProto, path: Path) -> None:
    """An opset newer than the installed onnx knows is an error: the checker accepts it, and shape
    inference would read its ops with the newest schemas onnx has, whatever the opset changed."""
    newest = onnx.defs.onnx_opset_version()
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > newest:
            raise ModelError(
                f"{path}: opset {o.version} is newer than onnx {onnx.__version__} knows (opsets up to "
                f"{newest}); re-export the model at opset {newest} or older"
            )


#: The most bytes a sparse initializer may take once stored dense: a protobuf message holds 2 GiB.
DENSE_MAX_BYTES = 2**31 - 1


def _dense_of(sparse: onnx.SparseTensorProto, what: str, base_dir: str) -> TensorProto:
    """The dense tensor a (COO) sparse tensor stands for: its values at its indices, zero (or "")
    elsewhere. Indices are either linear ([NNZ], into the flattened dims) or one row per value
    ([NNZ, rank]), as ONNX allows both. ModelError (one line) where they do not fit its dims."""
    name = sparse.values.name
    try:
        onnx.checker.check_sparse_tensor(sparse)
    except Exception as exc:  # ValidationError: unsorted, repeated or out-of-range indices, ...
        raise ModelError(f"{what}: invalid ({shorten(' '.join(str(exc).split()), 200)})") from None
    dims = [int(d) for d in sparse.dims]
    try:
        values = onnx.numpy_helper.to_array(sparse.values, base_dir)
        indices = onnx.numpy_helper.to_array(sparse.indices, base_dir).astype(np.int64)
    except Exception as exc:
        raise ModelError(f"{what}: cannot read its values or indices ({first_line(exc)})") from None
    numel = math.prod(dims)
    if numel * values.dtype.itemsize > DENSE_MAX_BYTES:
        raise ModelError(
            f"{what}: {'×'.join(map(str, dims))} is over 2 GiB stored dense; deployopt reads sparse "
            "initializers as dense ones"
        )
    nnz = values.size
    shape_ok = (indices.ndim == 2 and indices.shape == (nnz, len(dims)) and dims) or (
        indices.ndim == 1 and indices.size == nnz
    )
    try:
        if not shape_ok:  # the checker passes some layouts it does not define
            raise ValueError(f"shape {list(indices.shape)} for {nnz} values of a {len(dims)}-D tensor")
        flat = np.ravel_multi_index(tuple(indices.T), dims) if indices.ndim == 2 and nnz else indices.ravel()
        if nnz and (flat.min() < 0 or flat.max() >= numel):
            raise ValueError("an index out of the dims' range")
    except ValueError as exc:
        raise ModelError(
            f"{what}: its indices do not fit its dims ({exc}; expected [NNZ] or [NNZ, rank])"
        ) from None
    if values.dtype == object:  # strings: the default value is ""
        dense = np.full(numel, b"", dtype=object)
    else:
        dense = np.zeros(numel, dtype=values.dtype)
    dense[flat] = values.ravel()
    out = onnx.numpy_helper.from_array(dense.reshape(dims), name)
    if out.data_type != sparse.values.data_type:  # a type numpy holds as another: not to be guessed
        raise ModelError(
            f"{what}: its {TensorProto.DataType.Name(sparse.values.data_type)} values cannot be stored "
            "dense here; store the initializer dense"
        )
    return out


def _has_sparse(graph: onnx.GraphProto) -> bool:
    """Whether `graph` (subgraphs too) holds a sparse tensor; reads no string (they are checked
    for UTF-8 only when there is one to densify)."""
    stack = [graph]
    while stack:
        g = stack.pop()
        if len(g.sparse_initializer):
            return True
        for node in g.node:
            for a in node.attribute:
                if a.HasField("sparse_tensor") or len(a.sparse_tensors):
                    return True
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    return False


def _densify_sparse(model: onnx.ModelProto, path: Path) -> list[str]:
    """Store every sparse initializer and Constant `sparse_value` (subgraphs' too) dense, in place;
    returns the names stored so.

    onnxruntime loads and runs a model with a sparse initializer, but the type check read one as a
    `sparse_tensor(float)` where Conv takes a tensor and called the model "wrongly typed", and the
    analysis, the wave model and surgery read weights from initializers only. Dense, the graph
    computes the same, and a model written from it keeps the weights dense."""
    if not _has_sparse(model.graph):
        return []
    from deployopt.model_checks import _check_strings  # model_checks imports this module

    _check_strings(model, str(path))  # names are read below: not UTF-8 was a traceback
    done: list[str] = []
    base_dir = str(path.parent)
    stack = [model.graph]
    while stack:
        g = stack.pop()
        if len(g.sparse_initializer):
            sparse_inputs = {s.values.name for s in g.sparse_initializer}
            for sparse in g.sparse_initializer:
                what = f"{path.name}: sparse initializer {sparse.values.name!r}"
                g.initializer.append(_dense_of(sparse, what, base_dir))
                done.append(sparse.values.name)
            del g.sparse_initializer[:]
            for value in [*g.input, *g.value_info]:  # listed as a sparse input: now a tensor one
                if value.name in sparse_inputs and value.type.HasField("sparse_tensor_type"):
                    sparse_type = onnx.TypeProto.SparseTensor()
                    sparse_type.CopyFrom(value.type.sparse_tensor_type)
                    value.type.tensor_type.elem_type = sparse_type.elem_type  # clears the sparse type
                    if sparse_type.HasField("shape"):
                        value.type.tensor_type.shape.CopyFrom(sparse_type.shape)
        for node in g.node:
            for i, a in enumerate(node.attribute):
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and a.name == "sparse_value":
                    label = node.name or (node.output[0] if node.output else "")
                    what = f"{path.name}: Constant {label!r}'s sparse_value"
                    dense = _dense_of(a.sparse_tensor, what, base_dir)
                    node.attribute[i].CopyFrom(onnx.helper.make_attribute("value", dense))
                    done.append(label)
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    return done


def _real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _dynamic_batch_inputs(model: onnx.ModelProto) -> dict[str, str]:
    """Inputs whose dim 0 the file leaves open (a symbol or unknown), with the symbol."""
    out = {}
    for inp in _real_inputs(model):
        tt = inp.type.tensor_type
        if tt.HasField("shape") and len(tt.shape.dim) > 1:
            d = tt.shape.dim[0]
            if not (d.HasField("dim_value") and d.dim_value > 0):
                out[inp.name] = d.dim_param
    return out


def _check_static_dims_kept(name: str, dims: Any, want: list[int]) -> None:
    """--input-shape sets the batch (as --batch does) and dynamic dims; another static dim is the
    export's and stays: Reshape constants and the weights after a Flatten were traced for it, so a
    model rewritten to another size is a wrong model, not a faster one."""
    have = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]
    if any(h is not None and h != w for h, w in list(zip(have, want))[1:]):
        raise StaticDimsError(static_dims_message(name, have, want), name, have, list(want))


def static_dims_message(
    name: str, have: Sequence[int | None], want: Sequence[int], option: str = "--input-shape"
) -> str:
    """StaticDimsError's line; `option`: what the caller called the shapes (optimize's library
    callers wrote OptimizeConfig.input_shapes, not --input-shape)."""
    fmt = "×".join(str(d) if d is not None else "?" for d in have)
    return (
        f"input {name!r} is {fmt} in the file; {option} sets its batch and its dynamic (?) dims "
        f"only, got {'×'.join(map(str, want))} (export the model at that size instead)"
    )


_MAX_DIM = 2**63 - 1  # an ONNX dim is an int64


def check_batch_agrees(
    batch: int | None, input_shapes: dict[str, Sequence[int]] | None, cli: bool = False
) -> None:
    """A batch (`batch` of OptimizeConfig or MeasureOptions) sets dim 0 of the inputs
    `input_shapes` does not give; for an input it does give, a different dim 0 was timed silently in
    its place. Same value: fine. `cli`: the error names the options (--batch, --input-shape), else
    the fields a library caller set."""
    if batch is None:
        return
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        # said before the disagreement, which a batch of 0 always is
        raise ModelError(
            "--batch must be at least 1" if cli else f"batch={batch!r}: must be a whole number, at least 1"
        )
    for name, dims in (input_shapes or {}).items():
        dims = list(dims)
        if dims and dims[0] != batch:
            given = (
                f"--batch {batch} and --input-shape {input_shape_arg(name, 'x'.join(map(str, dims)))}"
                if cli
                else f"batch={batch} and input_shapes[{name!r}]={dims}"
            )
            raise ModelError(
                f"{given} disagree on the batch of {name!r} ({dims[0]}); give one of them, or the same "
                "batch in both"
            )


def _requested_dims(name: str, want: Any) -> list[int]:
    """An input shape given for `name` as a list of whole numbers from 1 up: a 0 or -1 was loaded
    (an empty batch, a "dynamic" dim written as a fixed -1) and analysed as if valid, and 1.0 was a
    TypeError from protobuf. A NumPy integer is an integer."""
    if isinstance(want, (str, bytes)) or not isinstance(want, (Sequence, np.ndarray)):
        raise ModelError(
            f"input shape for {name!r} must be a list of dims such as [1, 3, 224, 224], "
            f"got {shorten(repr(want), 60)}"
        )
    dims = list(want)
    bad = next(
        (d for d in dims if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1), None
    )
    if bad is not None or not dims:
        shown = shorten(repr(dims if not isinstance(want, np.ndarray) else want.tolist()), 60)
        why = "no dims" if not dims else f"{bad!r} is no whole number of at least 1"
        raise ModelError(f"input shape for {name!r}: {shown}: {why} (every dim is a size, 1 or more)")
    return [int(d) for d in dims]


def _is_control(ch: str) -> bool:
    return ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F


def input_shape_arg(name: str, dims: str) -> str:
    """`NAME:DIMS` as the one shell word to give `--input-shape`: as it is for a name the shell
    takes as it is, single-quoted for one with spaces or shell characters, and in bash's `$'…'`
    form (`\\x1b`) for one with a control character. A message printed such a name raw: an ESC
    in an input's name recoloured the terminal, and a hint that showed it escaped (`\\x1b`) but
    unquoted named no input when followed."""
    word = f"{name}:{dims}"
    if any(map(_is_control, name)):
        body = "".join(
            (f"\\x{ord(c):02x}" if ord(c) < 0x80 else f"\\u{ord(c):04x}")
            if _is_control(c)
            else ("\\" + c if c in "\\'" else c)
            for c in word
        )
        return f"$'{body}'"
    return word if shlex.quote(name) == name else shlex.quote(word)


def _shape_hint(dims: Any) -> str:
    """`1x12x<H>x<W>` for an input of N×12×H×W: its static dims as they are, batch 1, each other
    dynamic dim by its name (`<dim3>` when unnamed) to replace. A fixed `1x3x224x224` was refused
    when followed for any input that is not 3-channel 4-D (`is 1×12×?×? in the file`)."""
    parts = []
    for i, d in enumerate(dims):
        if d.HasField("dim_value") and d.dim_value > 0:
            parts.append(str(d.dim_value))
        elif i == 0:
            parts.append("1")
        else:
            parts.append(f"<{d.dim_param or f'dim{i}'}>")
    return "x".join(parts)


def _fix_input_shapes(
    model: onnx.ModelProto,
    requested: dict[str, list[int]],
    path: Path,
    notices: list[str],
    keep_dynamic: bool = False,
) -> dict[str, list[int]]:
    """Give every graph input static dims: requested ones, else batch 1 with a notice. With
    `keep_dynamic` dynamic dims stay as the file has them (0 in the result): for a command that
    rewrites the file and runs nothing, and so takes no --input-shape to ask for."""
    inputs = _real_inputs(model)
    names = [i.name for i in inputs]
    for name in requested:
        if name not in names:
            raise ModelError(
                f"input shape given for {name!r}, but {path.name} has no such input; "
                f"its inputs: {', '.join(names)}"
            )
    fixed: dict[str, list[int]] = {}
    for inp in inputs:
        ttype = inp.type.tensor_type
        if not ttype.HasField("shape"):
            if keep_dynamic:
                raise ModelError(f"input {inp.name!r} has no shape; export the model with its input shapes")
            if inp.name not in requested:
                raise ModelError(
                    f"input {inp.name!r} has no shape; give one with "
                    f"--input-shape {input_shape_arg(inp.name, '1x3x224x224')}"
                )
            ttype.shape.SetInParent()
        dims = ttype.shape.dim
        if inp.name in requested:
            want = _requested_dims(inp.name, requested[inp.name])
            if len(dims) and len(dims) != len(want):
                raise ModelError(
                    f"input shape for {inp.name!r} has {len(want)} dims, the model's input has {len(dims)}"
                )
            _check_static_dims_kept(inp.name, dims, want)
            if any(d > _MAX_DIM for d in want):  # protobuf's int64: was a ValueError traceback
                raise ModelError(
                    f"input shape for {inp.name!r}: {'x'.join(map(str, want))} has a dimension over "
                    "2^63 - 1, the most an ONNX shape holds"
                )
            del dims[:]
            for d in want:
                dims.add().dim_value = d
        elif not keep_dynamic:
            for i, d in enumerate(dims):
                if d.HasField("dim_value") and d.dim_value > 0:
                    continue
                if i == 0:
                    label = f" ({d.dim_param})" if d.dim_param else ""
                    d.Clear()
                    d.dim_value = 1
                    rest = "x".join(str(x.dim_value) if x.dim_value > 0 else "?" for x in dims[1:])
                    notices.append(
                        f"batch dimension of {inp.name!r}{label} was dynamic; fixed to 1 here (another "
                        f"batch: --input-shape {input_shape_arg(inp.name, f'Nx{rest}')}); a model written "
                        "from it gets the dynamic batch back where it checks out"
                    )
                else:
                    raise ModelError(
                        f"dimension {i} of input {inp.name!r} is dynamic; give a static shape with "
                        f"--input-shape {input_shape_arg(inp.name, _shape_hint(dims))}"
                    )
        fixed[inp.name] = [d.dim_value for d in dims]
    return fixed


def _fixed_shape_error(path: Path, asked: dict[str, list[int]], onnx_says: str) -> ModelError:
    """The line for a model whose shapes infer at the file's own input shapes but not at those
    --batch / --input-shape asked for (`asked`): the graph fixes them."""
    at = ", ".join(f"{n} {'×'.join(map(str, d))}" for n, d in asked.items())
    return ModelError(
        f"{path.name}: its shapes do not infer at {at}, though they do at the file's own: "
        "the graph fixes its batch or size (a Reshape's shape traced at export, say); export it "
        f"with a dynamic batch, or run it at its own (onnx: {onnx_says})"
    )


def _give_outputs_shapes(
    model: onnx.ModelProto,
    path: Path,
    reuse: InferenceReuse | None = None,
    asked: dict[str, list[int]] | None = None,
) -> None:
    """A graph output with a type but no shape (which onnxruntime and TensorRT run) gets the shape
    shape inference finds for it, or one ModelError that says which output has none. `reuse`: the
    load-time type check's inference, read instead where it inferred this very graph. `asked`: the
    input shapes --batch / --input-shape set; where inference finds no shape at them but does at the
    file's own, the graph fixes its batch, and the error says so (the missing output shape was
    blamed: re-exporting with output shapes only led to that line)."""
    missing = [
        o.name
        for o in model.graph.output
        if o.type.HasField("tensor_type") and not o.type.tensor_type.HasField("shape")
    ]
    if not missing:
        return
    shared = reuse.take(model, data_prop=False) if reuse is not None else None
    try:
        # on a `weightless` copy, as `_infer`: handed the whole model, onnx serializes it twice
        found = shared if shared is not None else onnx.shape_inference.infer_shapes(weightless(model))
        inferred = {o.name: o for o in found.graph.output}
    except Exception:  # a model inference cannot read: the checker or _infer says why
        inferred = {}
    for out in model.graph.output:
        if out.name not in missing:
            continue
        got = inferred.get(out.name)
        if got is None or not got.type.tensor_type.HasField("shape"):
            if asked and _infers_as_exported(path):
                try:  # strict, for onnx's line on the op that broke (the lenient pass says nothing)
                    onnx.shape_inference.infer_shapes(weightless(model), strict_mode=True, data_prop=True)
                    onnx_says = f"graph output {out.name!r} gets no shape"
                except Exception as exc:
                    onnx_says = first_line(exc, repr(exc))
                raise _fixed_shape_error(path, asked, onnx_says)
            raise ModelError(
                f"{path}: graph output {out.name!r} has no shape, and shape inference finds none; "
                "export the model with its output shapes"
            )
        out.type.tensor_type.shape.CopyFrom(got.type.tensor_type.shape)


def _clear_derived_shapes(model: onnx.ModelProto, all_outputs: bool = False) -> None:
    """Drop shapes that were inferred for other input shapes, so inference recomputes them.

    With `all_outputs` (the user set input shapes) static output dims go too: a batch-1 export
    read at batch 16 still says 1 in its outputs, and strict inference would reject it.
    """
    del model.graph.value_info[:]
    for out in model.graph.output:
        if out.type.tensor_type.HasField("shape"):
            for d in out.type.tensor_type.shape.dim:
                if all_outputs or not d.HasField("dim_value"):
                    d.Clear()


def _needs_folding(model: onnx.ModelProto) -> bool:
    const = {t.name for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type in _FOLD_HINT_OPS:
            return True
        ins = [i for i in node.input if i]
        if ins and all(i in const for i in ins) and node.op_type not in _KEEP_OPS:
            return True
    return bool(_castlike_types(model))


def _castlike_types(model: onnx.ModelProto) -> dict[int, int]:
    """Node index → element type, for each CastLike of a constant whose second input's type is
    known (a graph input, a value_info after shape inference, an initializer, a Constant's output).

    CastLike reads its second input for its type only: `CastLike(Constant 0.0, x)` is a constant,
    but folding evaluates only nodes whose inputs are all constants, so the dynamo exporter's
    unoptimized graphs (`torch.onnx.export(..., dynamo=True, optimize=False)`) kept the zero bias
    it writes for every `bias=False` conv (`Expand(CastLike(0.0, x), Shape(W)[0:1])`) as a
    computed tensor, which froze the conv's channels, and ReLU6's `CastLike(6.0, x)` bounds."""
    g = model.graph
    const = {t.name for t in g.initializer}
    types = {t.name: t.data_type for t in g.initializer}
    for node in g.node:
        if node.op_type == "Constant" and node.output and node.domain in ("", "ai.onnx"):
            const.add(node.output[0])
            for a in node.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    types[node.output[0]] = a.t.data_type
    for vi in [*g.input, *g.value_info, *g.output]:
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if elem:
            types.setdefault(vi.name, elem)
    out = {}
    for i, node in enumerate(g.node):
        if node.op_type != "CastLike" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
            continue
        if node.input[0] in const and types.get(node.input[1], 0):
            out[i] = types[node.input[1]]
    return out


def _castlike_to_cast(model: onnx.ModelProto) -> int:
    """Rewrite each CastLike of a constant (`_castlike_types`) as the Cast it is, in place, so
    folding computes it; how many."""
    targets = _castlike_types(model)
    for i, elem in targets.items():
        node = model.graph.node[i]
        saturate = [a for a in node.attribute if a.name == "saturate"]
        cast = onnx.helper.make_node("Cast", [node.input[0]], list(node.output), name=node.name, to=elem)
        cast.attribute.extend(saturate)  # CastLike-19 and Cast-19 share it; before 19 neither has it
        cast.doc_string = node.doc_string
        node.CopyFrom(cast)
    return len(targets)


def copy_model_metadata(src: onnx.ModelProto, dst: onnx.ModelProto) -> None:
    """Carry over what graph rewriting tools drop: metadata, doc strings, opset, producer."""
    dst.ir_version = src.ir_version
    dst.producer_name = src.producer_name
    dst.producer_version = src.producer_version
    dst.domain = src.domain
    dst.model_version = src.model_version
    dst.doc_string = src.doc_string
    dst.graph.name = src.graph.name
    dst.graph.doc_string = src.graph.doc_string
    del dst.metadata_props[:]
    dst.metadata_props.extend(src.metadata_props)
    del dst.opset_import[:]
    dst.opset_import.extend(src.opset_import)
    docs = {n.name: n.doc_string for n in src.graph.node if n.name and n.doc_string}
    for node in dst.graph.node:
        if node.name in docs and not node.doc_string:
            node.doc_string = docs[node.name]


#: A Constant's scalar and list attributes and the tensor type ONNX gives each (Constant-12+).
_CONSTANT_VALUE_TYPES = {
    "value_float": TensorProto.FLOAT,
    "value_floats": TensorProto.FLOAT,
    "value_int": TensorProto.INT64,
    "value_ints": TensorProto.INT64,
}


def _typed_constant_values(graph: onnx.GraphProto) -> None:
    """Rewrite each Constant's value_float(s) / value_int(s) as the `value` tensor ONNX types it as
    (float32, int64), here and in subgraphs. onnx-graphsurgeon reads value_float as a numpy
    float64, so folding made `Mul(x, Constant(value_float=0.5))` a double initializer: every
    model written from it failed to load in onnxruntime ("bound to different types"), exit 0."""
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _typed_constant_values(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    _typed_constant_values(sub)
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.attribute) != 1:
            continue
        attr = node.attribute[0]
        elem = _CONSTANT_VALUE_TYPES.get(attr.name)
        if elem is None:
            continue
        value = onnx.helper.get_attribute_value(attr)
        dims = [len(value)] if attr.name.endswith("s") else []
        tensor = onnx.helper.make_tensor(node.output[0], elem, dims, list(value) if dims else [value])
        del node.attribute[:]
        node.attribute.append(onnx.helper.make_attribute("value", tensor))


#: one fold's sessions made quiet at a time (`_quiet_fold_sessions` swaps a module attribute)
_QUIET_FOLD = threading.RLock()


@contextlib.contextmanager
def _quiet_fold_sessions() -> Iterator[None]:
    """The onnxruntime sessions folding opens (onnx-graphsurgeon's, which take no SessionOptions)
    log errors only: their own `log_severity_level` 3, given by a stand-in for
    `onnxruntime.InferenceSession` while the fold runs. Their graph-optimizer warnings about the
    folded subgraphs are noise. onnxruntime's process-wide severity has no getter: setting it to 3
    and back to a guessed 2 undid a caller's own setting; holding fd 2 instead lost what a native
    crash in the fold said and raced between threads (review of d27ce72). A session another thread
    opens meanwhile without options of its own is as quiet; nothing else changes."""
    try:
        from deployopt.onnxruntime_compat import import_onnxruntime

        ort = import_onnxruntime()
    except ImportError as exc:  # graphsurgeon reports the missing onnxruntime itself
        reraise_interrupt(exc)
        yield
        return
    with _QUIET_FOLD:
        original = ort.InferenceSession

        def options(sess_options: Any) -> Any:
            if sess_options is None:
                sess_options = ort.SessionOptions()
                sess_options.log_severity_level = 3
            return sess_options

        if isinstance(original, type):  # a subclass: isinstance checks elsewhere meanwhile still hold

            class _Quiet(original):  # type: ignore[misc, valid-type]
                def __init__(
                    self, path_or_bytes: Any, sess_options: Any = None, *args: Any, **kwargs: Any
                ) -> None:
                    super().__init__(path_or_bytes, options(sess_options), *args, **kwargs)

        else:  # a caller's (or a test's) own factory in its place: wrapped as it is

            def _Quiet(path_or_bytes: Any, sess_options: Any = None, *args: Any, **kwargs: Any) -> Any:
                return original(path_or_bytes, options(sess_options), *args, **kwargs)

        ort.InferenceSession = _Quiet
        try:
            yield
        finally:
            ort.InferenceSession = original


def _fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Turn Constant nodes and constant subgraphs into initializers (onnx-graphsurgeon + onnxruntime)."""
    import onnx_graphsurgeon as gs
    from onnx_graphsurgeon.logger import G_LOGGER

    from deployopt.onnxruntime_compat import oldest_ir_version

    level = G_LOGGER.severity
    G_LOGGER.severity = G_LOGGER.ERROR
    try:
        from deployopt.onnxruntime_compat import import_onnxruntime

        import_onnxruntime()  # without its import's telemetry line
    except ImportError as exc:  # graphsurgeon reports the missing onnxruntime itself
        reraise_interrupt(exc)  # Ctrl-C inside onnxruntime's import: interrupted, not missing
    _castlike_to_cast(model)
    try:
        with _quiet_fold_sessions():
            graph = gs.import_onnx(model)
            # the subgraphs folding evaluates go to onnxruntime at the graph's IR version: one newer
            # than onnxruntime reads (a model saved by a newer onnx, deployopt.onnxruntime_compat)
            # failed each, and folding skipped them silently; the oldest version the opsets allow is
            # read by any onnxruntime that runs them (the model keeps its own: copy_model_metadata)
            graph.ir_version = min(model.ir_version, oldest_ir_version(model) or model.ir_version)
            graph.toposort()
            graph.fold_constants(should_exclude_node=lambda node: node.op in _KEEP_OPS)
            graph.cleanup().toposort()
            folded = gs.export_onnx(graph, do_type_check=False)
            del graph
    except Exception as exc:  # graphsurgeon/onnxruntime failures are about the model, not us
        raise ModelError(
            f"constant folding failed: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        ) from None
    finally:
        G_LOGGER.severity = level
    # onnx-graphsurgeon's graph is cyclic (tensors ↔ nodes), and its weights are the input model's
    # TensorProtos, which keep that whole model alive (upb frees a message's memory all at once):
    # collected now, the input goes when the caller drops it, not at the next collection (a second
    # copy of VGG16's 530 MB of weights held through analysis, surgery and the write)
    gc.collect()
    copy_model_metadata(model, folded)
    if folded.ir_version < 4:
        # IR 3 lists every initializer as a graph input; the export lists the real inputs only, and
        # at IR 3 shape inference then ignored the weights (groups frozen "output shape unknown")
        # and the checker refused the edit. IR 4 lets initializers stand alone (as precision.py).
        folded.ir_version = 4
    return folded


#: Ops whose output has its input's type and shape, and which onnx's shape inference leaves untyped
#: (onnx 1.23 gives GroupNormalization-21, a function op, no output type: the next op's "expected
#: to have type" failed a valid model, naming that op, not the GroupNormalization)
_SAME_SHAPE_UNINFERRED = ("GroupNormalization",)


def _infer(model: onnx.ModelProto, path: Path, reuse: InferenceReuse | None = None) -> onnx.ModelProto:
    """The model with its shapes inferred (in place: what inference gives is copied into it).

    Inference reads a copy without the large float weights' data (`weightless`): handed the whole
    model, onnx serialized and parsed it twice, 1.8 GB of memory for a 340 MB model. `reuse`: the
    load-time type check's inference, taken instead where it is what this would infer."""
    shared = reuse.take(model, data_prop=True) if reuse is not None else None
    if shared is not None:
        return _copy_inferred(shared, model)
    skel = weightless(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(skel, strict_mode=True, data_prop=True)
    except Exception as exc:
        first = first_line(exc, repr(exc))
        if not type_uninferred_outputs(skel):
            raise ModelError(f"{path.name}: shape inference failed: {first}") from None
        try:
            inferred = onnx.shape_inference.infer_shapes(skel, strict_mode=True, data_prop=True)
        except Exception:  # the first error is the one to show
            raise ModelError(f"{path.name}: shape inference failed: {first}") from None
    return _copy_inferred(inferred, model)


def _copy_inferred(inferred: onnx.ModelProto, model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (in place) with everything but its initializers taken from `inferred`."""
    for fd in model.DESCRIPTOR.fields:
        if fd.name != "graph":
            model.ClearField(fd.name)
    copy_fields(inferred, model, "graph")
    for fd in model.graph.DESCRIPTOR.fields:
        if fd.name != "initializer":
            model.graph.ClearField(fd.name)
    copy_fields(inferred.graph, model.graph, "initializer")
    return model


#: ops with a data propagation function that need no constant input to propagate (onnx 1.23:
#: the others also propagate only from integer constants or what these give)
_DATA_SOURCES = ("Shape", "Size")


def _data_prop_inert(model: onnx.ModelProto) -> bool:
    """Whether `data_prop=True` cannot change what inference gives for this model (conservatively:
    True only where plain to see). Data propagation starts at a Shape or Size, or at an op with a
    propagation function reading a constant (an initializer not of a float type, whose values
    cannot be dims; any Constant's output); without one, nothing propagates and the inference
    functions see no more than without it (a bias Add reading a float weight stays inert). Not
    looked into, so False: subgraphs, local functions, an op onnx has no schema for, and an op onnx
    infers through its function body (GroupNormalization-21, whose body has Shapes: with data_prop the
    next op failed, without it the strict pass succeeded)."""
    graph = model.graph
    if model.functions:
        return False
    opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    consts = {t.name for t in graph.initializer if t.data_type not in _FLOAT_TYPES}
    consts |= {t.values.name for t in graph.sparse_initializer}
    consts |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    seen: set[tuple[str, str]] = set()
    for node in graph.node:
        if node.op_type in _DATA_SOURCES or any(a.HasField("g") or a.graphs for a in node.attribute):
            return False
        if node.op_type in _DATA_PROPAGATORS and any(i in consts for i in node.input):
            return False
        op = (node.domain or "ai.onnx", node.op_type)
        if op not in seen:
            seen.add(op)
            if not _infers_by_its_own_function(*op, opsets.get(op[0])):
                return False
    return True


#: initializers of these types feed no data propagation (onnx converts integer ones to dims)
_FLOAT_TYPES = (
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.DOUBLE,
    TensorProto.BFLOAT16,
)


def _infers_by_its_own_function(domain: str, op_type: str, opset: int | None) -> bool:
    """Whether onnx has a schema for the op at this opset with its own inference function (not
    its function body's)."""
    if opset is None:
        return False
    try:
        schema = onnx.defs.get_schema(op_type, opset, "" if domain == "ai.onnx" else domain)
    except Exception:  # onnx.defs.SchemaError: no such op in onnx
        return False
    return bool(schema.has_type_and_shape_inference_function)


def _data_propagators() -> frozenset[str]:
    """The op types onnx gives a data propagation function, in any opset (more than needed where an
    op gained one only later: a conservative `_data_prop_inert`)."""
    schemas = onnx.defs.get_all_schemas_with_history()
    return frozenset(s.name for s in schemas if getattr(s, "has_data_propagation_function", True))


_DATA_PROPAGATORS = _data_propagators()


@dataclass
class InferenceReuse:
    """The load-time type check's inference (`model_checks.check_model_data`: strict, check_type,
    no data_prop, on the `weightless` copy of the model as parsed) and what that model's graph
    looked like where load changes it (inputs, outputs, node order; value_info empty), for the next
    inference of the same graph to take instead of running again.

    `take` gives it only where what it would infer is this: the graph unchanged since (load's
    `_toposort`, `_fix_input_shapes`, `_give_outputs_shapes` and `_clear_derived_shapes` change
    nothing but those fields), and, for `_infer`'s data_prop=True, data propagation inert. A strict
    pass that succeeded gives what a lenient one gives, and check_type only refuses: neither changes
    a shape inferred. Taken once: the first inference after anything changed infers anew."""

    inferred: onnx.ModelProto | None
    inputs: list[onnx.ValueInfoProto]
    outputs: list[onnx.ValueInfoProto]
    nodes_moved: bool = False
    data_prop_inert: bool = False

    @classmethod
    def of(cls, inferred: onnx.ModelProto | None, model: onnx.ModelProto) -> InferenceReuse | None:
        """What `check_model_data` returned, kept against `model` as it is now; None where there is
        nothing to reuse (or the model's value_info, which load clears, was read)."""
        if inferred is None or len(model.graph.value_info):
            return None
        return cls(
            inferred,
            [_copy_proto(v) for v in model.graph.input],
            [_copy_proto(v) for v in model.graph.output],
            data_prop_inert=_data_prop_inert(model),
        )

    def take(self, model: onnx.ModelProto, *, data_prop: bool) -> onnx.ModelProto | None:
        """The kept inference where it is what inferring `model` now would give, else None; either
        way it is not kept after (once the graph is inferred, load goes on with that)."""
        inferred, self.inferred = self.inferred, None
        if (
            inferred is None
            or self.nodes_moved
            or (data_prop and not self.data_prop_inert)
            or len(model.graph.value_info)
            or list(model.graph.input) != self.inputs
            or list(model.graph.output) != self.outputs
        ):
            return None
        return inferred


def _copy_proto(msg: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    out = onnx.ValueInfoProto()
    out.CopyFrom(msg)
    return out


def weightless(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the model whose float initializers of more than 64 elements keep their name, type
    and dims but no data: shape inference reads no more of them (data propagation reads the small
    and integer ones, kept whole)."""
    skel = onnx.ModelProto()
    copy_fields(model, skel, "graph")
    copy_fields(model.graph, skel.graph, "initializer")
    for t in model.graph.initializer:
        numel = math.prod(t.dims)
        if t.data_type in _WEIGHT_TYPES and numel > 64:
            stub = skel.graph.initializer.add()
            stub.name, stub.data_type = t.name, t.data_type
            stub.dims.extend(t.dims)
        else:
            skel.graph.initializer.add().CopyFrom(t)
    return skel


#: the float types whose large initializers `weightless` leaves without data
_WEIGHT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)


def _type_same_shape_outputs(model: onnx.ModelProto) -> int:
    """Give the outputs of `_SAME_SHAPE_UNINFERRED` ops their input's type, read off a lenient
    inference, as value_info (in place); how many were given (one pass: see
    `type_uninferred_outputs`)."""
    ops = [n for n in model.graph.node if n.op_type in _SAME_SHAPE_UNINFERRED and n.domain in ("", "ai.onnx")]
    if not ops:
        return 0
    try:
        lenient = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        return 0
    g = lenient.graph
    typed = {v.name: v for v in (*g.input, *g.value_info, *g.output) if v.type.tensor_type.HasField("shape")}
    given = 0
    for node in ops:
        src, out = node.input[0] if node.input else "", node.output[0] if node.output else ""
        if src in typed and out and out not in typed:
            info = onnx.ValueInfoProto()
            info.CopyFrom(typed[src])
            info.name = out
            model.graph.value_info.append(info)
            typed[out] = info
            given += 1
    return given


def type_uninferred_outputs(model: onnx.ModelProto) -> int:
    """Type the outputs of `_SAME_SHAPE_UNINFERRED` ops (in place), repeating the lenient inference
    until it types nothing new; how many were typed.

    One pass types only the ops whose input was typed: a GroupNormalization-21 after another one
    reads an output that was itself untyped until that pass, and the strict pass then failed on the
    op after the first (a valid model refused, the wrong op blamed). Each pass types at least one
    more op or stops, so there are at most as many passes as such ops.
    `apply` runs it on the edited skeleton too, so its strict check sees past these ops."""
    bound = sum(1 for n in model.graph.node if n.op_type in _SAME_SHAPE_UNINFERRED)
    typed = 0
    for _ in range(bound):
        given = _type_same_shape_outputs(model)
        if not given:
            break
        typed += given
    return typed


def _infers_as_exported(path: Path) -> bool:
    """Whether the file's shapes infer at its own input shapes (batch 1 where it left the batch
    dynamic): when they do and --batch / --input-shape's do not, the graph fixed what was asked to
    change (a Reshape to [1, -1] traced at export), and onnx's line only names the op that broke."""
    try:
        model = _parse(path)
        _densify_sparse(model, path)
        _fix_input_shapes(model, {}, path, [], False)
        _give_outputs_shapes(model, path)
        _clear_derived_shapes(model, all_outputs=False)
        _infer(model, path)
    except Exception:  # any failure: the file's own shapes are no better; say nothing more
        return False
    return True


def _subgraph_inputs(node: onnx.NodeProto) -> set[str]:
    """Every name the node's subgraphs (If, Loop, Scan bodies) read, at any depth: those produced
    outside them tie the node to their producers as its own inputs do."""
    names: set[str] = set()
    for attr in node.attribute:
        for g in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
            for inner in g.node:
                names.update(inner.input)
                names |= _subgraph_inputs(inner)
    return names


def _toposort(graph: onnx.GraphProto) -> bool:
    """Sort the graph's nodes topologically when they are not (onnxruntime runs such a graph, the
    ONNX checker refuses it: "Nodes in a graph must be topologically sorted"); stable, so a sorted
    graph is untouched. True when the order changed; a cycle is left for the checker to name."""
    import heapq

    nodes = list(graph.node)
    producer = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    needs = [
        {producer[x] for x in (*n.input, *_subgraph_inputs(n)) if x in producer and producer[x] != i}
        for i, n in enumerate(nodes)
    ]
    if all(all(j < i for j in deps) for i, deps in enumerate(needs)):
        return False
    readers: dict[int, list[int]] = {}
    for i, deps in enumerate(needs):
        for j in deps:
            readers.setdefault(j, []).append(i)
    waiting = [len(deps) for deps in needs]
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for r in readers.get(i, []):
            waiting[r] -= 1
            if waiting[r] == 0:
                heapq.heappush(ready, r)
    if len(order) != len(nodes):  # a cycle: not a graph any order fixes
        return False
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)
    return True


def load_model(
    path: str | os.PathLike[str],
    input_shapes: dict[str, list[int]] | None = None,
    *,
    keep_dynamic: bool = False,
) -> LoadedModel:
    """Parse, validate and normalize a model; every problem with the file is one ModelError.

    `keep_dynamic` leaves dynamic input dims dynamic instead of fixing the batch to 1 and refusing
    the others (`deployopt fp16`, which converts the file as it is and has no --input-shape)."""
    path = Path(path)
    model = _parse(path)
    _check_opset(model, path)
    external = uses_external_data(model)
    if external:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
        except Exception as exc:  # onnx raises OSError, ValueError or ValidationError here
            first = first_line(exc, repr(exc))
            raise ModelError(f"{path}: cannot read its external weight data: {first}") from None
    # before anything reads its strings or weights: bad UTF-8, data of the wrong size or type, a
    # scalar bias, a zero-size conv were tracebacks or "please report this model" further on
    from deployopt.model_checks import check_model_data

    # before the checks: the type check took a sparse initializer for a wrongly typed weight
    densified = _densify_sparse(model, path)
    reuse = InferenceReuse.of(check_model_data(model, str(path)), model)
    # before the checker, which refuses a graph input or output without a shape in its own words
    # ("Field 'shape' of 'type' is required"): an input gets --input-shape's (or asks for one), an
    # output what inference finds (onnx-graphsurgeon writes outputs whose shape is None)
    notices: list[str] = []
    if densified:
        notices.append(
            f"stored {len(densified)} sparse constant(s) dense ({_first(densified)}): the same values, "
            "and models written from this one store them dense"
        )
    dynamic = _dynamic_batch_inputs(model)
    file_batch = {
        i.name: i.type.tensor_type.shape.dim[0].dim_value
        for i in _real_inputs(model)
        if len(i.type.tensor_type.shape.dim) and i.type.tensor_type.shape.dim[0].dim_value > 0
    }
    file_dynamic_dims = {
        i.name: [k for k, d in enumerate(i.type.tensor_type.shape.dim) if k > 0 and not d.dim_value > 0]
        for i in _real_inputs(model)
        if i.name in (input_shapes or {}) and not keep_dynamic
    }
    if _toposort(model.graph):
        if reuse is not None:
            reuse.nodes_moved = True
        notices.append(
            "the graph's nodes were not in topological order (ONNX requires it; onnxruntime sorts them "
            "itself): sorted here, and models written from this one keep that order"
        )
    fixed = _fix_input_shapes(model, dict(input_shapes or {}), path, notices, keep_dynamic)
    _give_outputs_shapes(model, path, reuse, fixed if input_shapes else None)
    try:
        # its `check_skeleton`: handed the whole model, the checker serializes it (twice its size)
        onnx.checker.check_model(check_skeleton(model, external=external))
    except (onnx.checker.ValidationError, Exception) as exc:
        # the checker's message spans lines ("... of node: \nname: fc OpType: Gemm\n is not output of
        # any previous nodes."): its first line stopped mid-sentence
        first = shorten(" ".join(str(exc).split()), 400) or repr(exc)
        raise ModelError(f"{path}: invalid ONNX model: {first}") from None
    _clear_derived_shapes(model, all_outputs=bool(input_shapes))
    try:
        model = _infer(model, path, reuse)
    except ModelError as exc:
        if input_shapes and not external and _infers_as_exported(path):
            onnx_says = str(exc).split("shape inference failed: ", 1)[-1]
            raise _fixed_shape_error(path, fixed, onnx_says) from None
        raise
    if _needs_folding(model):
        _slice_shape_ranges(model)
        _typed_constant_values(model.graph)
        # each pass can expose more: a folded Shape gives a static Reshape, whose output shape
        # makes the next Shape foldable (Polygraphy also folds in passes)
        n_before = n_prev = len(model.graph.node)
        for _ in range(_MAX_FOLD_PASSES):
            model = _fold_constants(model)
            del model.graph.value_info[:]
            model = _infer(model, path)
            if len(model.graph.node) == n_prev or not _needs_folding(model):
                break
            n_prev = len(model.graph.node)
        if len(model.graph.node) != n_before:  # a Shape on a dynamic dim, say, is left as it was: no word
            notices.append(f"folded constant subgraphs: {n_before} → {len(model.graph.node)} nodes")
    # the final graph's names, walked once (a 3000-conv chain: 25-60 ms a walk) for the rewrites
    # below: each adds the names it gives to it
    taken = names_in_use(model.graph)
    spelled = _spell_out_splits(model, taken)
    if spelled:
        splits = "an equal Split its sizes" if spelled == 1 else f"{spelled} equal Splits their sizes"
        notices.append(f"gave {splits} as a constant (same function)")
    named = _name_nodes(model)  # after folding: node indices are final, and so are the names
    if named:
        notices.append(named)
    taken.update(node.name for node in model.graph.node)  # the names it gave, unnamed nodes' too
    unshared = _unshare_constants(model, taken)
    if unshared:
        notices.append(f"gave {unshared} readers of shared constants their own copies (same values)")
    _check_conv_channels(model, path, given=bool(input_shapes))
    _check_reshapes(model, path, fixed if input_shapes else None)
    return LoadedModel(
        model=model,
        path=path,
        notices=notices,
        input_shapes=fixed,
        external_data=external,
        dynamic_batch=dynamic,
        file_batch=file_batch,
        file_dynamic_dims={k: v for k, v in file_dynamic_dims.items() if v},
    )


def model_proto(model: onnx.ModelProto | LoadedModel) -> onnx.ModelProto:
    """The ModelProto a library function reads or edits: `model`, or a LoadedModel's `.model`
    (what a user holds after load_model: analyze(loaded) was an AttributeError deep in the
    analysis). A path is refused with what to do: the analysis needs the model load_model makes."""
    if isinstance(model, LoadedModel):
        return model.model
    if isinstance(model, (str, os.PathLike)):
        raise ModelError(
            f"{model}: give a loaded model, not a path: load_model({os.fspath(model)!r}) first (it fixes "
            "the input shapes and folds the constants the analysis needs)"
        )
    if not isinstance(model, onnx.ModelProto):
        raise ModelError(
            f"expected an onnx.ModelProto or the LoadedModel load_model returns, not a {type(model).__name__}"
        )
    return model


#: Ops whose second input is a module's weight (Conv2d, ConvTranspose2d, Linear).
_WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def layer_labels(model: onnx.ModelProto) -> dict[str, str]:
    """{node name: module path} for the layers torch's default exporter (torch.export, the default
    since torch 2.9) named `node_<op>_<n>`: `node_conv2d_1` says nothing of which layer it is, while
    its weight keeps the module's name (`features.3.weight`; after a BatchNorm is folded into a conv
    the conv's own). Other exporters' names (`/features/features.3/Conv`) need no label."""
    weights = {t.name for t in model.graph.initializer}
    out: dict[str, str] = {}
    for node, name in zip(model.graph.node, unique_node_names(model.graph.node)):
        if not name.startswith("node_") or node.op_type not in _WEIGHTED_OPS or len(node.input) < 2:
            continue
        weight = node.input[1]
        if weight in weights and weight.endswith(".weight") and len(weight) > len(".weight"):
            out[name] = weight[: -len(".weight")]
    return out


def unique_node_names(nodes: Sequence[onnx.NodeProto]) -> list[str]:
    """One distinct name per node, in node order: its own where it is set and not taken by an
    earlier node, else `<op type>_<index>` for an unnamed node, with `_2`, `_3` … appended where
    that (or a repeated name) is taken.

    Convs and channel groups are keyed by node name (a plan's group ids, the wave model's per-conv
    shapes, the optimizer's per-layer table, profiles mapped back to layers), and ONNX allows
    repeats and empty names: two convs named alike overwrote each other's entries (one conv left
    out of every prediction), and onnxruntime refuses a graph with a repeated name. Deterministic,
    so a model named by `load_model` and the same model analyzed as it is agree on every name.
    """
    given = [n.name for n in nodes]
    taken = set(given)
    seen: set[str] = set()
    out: list[str] = []
    for i, (node, name) in enumerate(zip(nodes, given)):
        if name and name not in seen:
            seen.add(name)
            out.append(name)
            continue
        base = name or f"{node.op_type}_{i}"
        new, k = base, 1
        while new in taken:  # an unnamed node's fallback may be a real node's name too
            k += 1
            new = f"{base}_{k}"
        taken.add(new)
        seen.add(new)
        out.append(new)
    return out


def make_node_names_unique(model: onnx.ModelProto) -> None:
    """Rename the model's nodes to `unique_node_names`, as every model deployopt writes is named:
    onnxruntime refuses repeats (`verify` of such a file, `deployopt fp16`'s output)."""
    for node, name in zip(model.graph.node, unique_node_names(model.graph.node)):
        node.name = name


def _name_nodes(model: onnx.ModelProto) -> str:
    """Give the graph's unnamed nodes, and nodes whose name an earlier node has, unique names
    (`unique_node_names`); models written from this one keep them. The notice names the ones a
    user has not seen before, "" when there are none: an unnamed node's `<op type>_<index>` is what
    `analyze` always called it, so only a suffixed one (its name taken) and a renamed repeat count."""
    nodes = model.graph.node
    names = unique_node_names(nodes)
    unnamed = [
        new for i, (n, new) in enumerate(zip(nodes, names)) if not n.name and new != f"{n.op_type}_{i}"
    ]
    renamed = [(n.name, new) for n, new in zip(nodes, names) if n.name and n.name != new]
    for node, new in zip(nodes, names):
        node.name = new
    parts = []
    if unnamed:
        taken = "whose <op type>_<index> another node has"
        parts.append(f"named {len(unnamed)} unnamed node(s) {taken} ({_first(unnamed)})")
    if renamed:
        examples = [f"{old!r} → {new!r}" for old, new in renamed]
        parts.append(f"renamed {len(renamed)} node(s) whose name an earlier node has ({_first(examples)})")
    if not parts:
        return ""
    return (
        f"{' and '.join(parts)}: deployopt keys convs and channel groups by node name, and "
        "onnxruntime refuses repeated names; models written from this one keep the new names"
    )


def _first(items: list[str], n: int = 3) -> str:
    return ", ".join(items[:n]) + (", …" if len(items) > n else "")


def _slice_shape_ranges(model: onnx.ModelProto) -> int:
    """Rewrite Shape(x, start, end) (opset 15) as Slice(Shape(x)), the same values; returns how many.

    onnx-graphsurgeon 0.6's constant folding ignores Shape's `start` and `end`: it folded
    Shape(input, start=0, end=1), torch.export's `x.size(0)`, into the whole shape [1, 3, 96, 96],
    and the model it gave broke (a Range whose limit was that vector). A Slice it folds right."""
    graph = model.graph
    taken = names_in_use(graph)
    nodes: list[onnx.NodeProto] = []
    count = 0
    for node in graph.node:
        attrs = {a.name: a.i for a in node.attribute}
        if (
            node.op_type != "Shape"
            or node.domain not in ("", "ai.onnx")
            or not ({"start", "end"} & attrs.keys())
        ):
            nodes.append(node)
            continue
        full = fresh_name(f"{node.output[0]}_full", taken)
        bounds = []
        for key, value in (("starts", attrs.get("start", 0)), ("ends", attrs.get("end", 2**63 - 1))):
            name = fresh_name(f"{node.output[0]}_{key}", taken)
            graph.initializer.append(onnx.numpy_helper.from_array(np.array([value], dtype=np.int64), name))
            bounds.append(name)
        nodes.append(onnx.helper.make_node("Shape", [node.input[0]], [full], name=fresh_name(full, taken)))
        nodes.append(onnx.helper.make_node("Slice", [full, *bounds], list(node.output), name=node.name))
        count += 1
    if count:
        del graph.node[:]
        graph.node.extend(nodes)
    return count


def default_opset(model: onnx.ModelProto) -> int:
    """The model's default-domain (ai.onnx) opset; 0 when it imports none."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def drop_attributes(node: onnx.NodeProto, names: Iterable[str]) -> onnx.NodeProto:
    """`node` without the attributes of these names (an older opset's form of it); the node itself."""
    names = set(names)
    kept = [a for a in node.attribute if a.name not in names]
    del node.attribute[:]
    node.attribute.extend(kept)
    return node


def names_in_use(graph: onnx.GraphProto) -> set[str]:
    """Every name `graph` holds: its inputs, outputs, value_info, initializers (sparse ones too),
    its nodes' inputs, outputs and names, and the same of every subgraph (If, Loop and Scan bodies)
    in it, however deep. What a rewrite's new tensor or node must not be called (`fresh_name`).

    Sets built from initializers and node outputs alone let a copy, a Split's sizes or a Slice's
    bounds take a graph input's name (`b__1`, `split_sizes`): the input's readers then read the
    constant, and the analysis froze groups over a "shared" constant that was not, or wrote a
    model that did not validate. A subgraph's names share the graph's scope in ONNX."""
    names: set[str] = set()
    stack = [graph]
    while stack:  # not recursive: a model may nest Ifs deeper than Python's recursion limit
        g = stack.pop()
        for values in (g.input, g.output, g.value_info):
            names.update(v.name for v in values)
        names.update(t.name for t in g.initializer)
        names.update(s.values.name for s in g.sparse_initializer)
        for node in g.node:
            names.update(node.input)
            names.update(node.output)
            names.add(node.name)
            for a in node.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    names.discard("")
    return names


def fresh_name(base: str, taken: set[str]) -> str:
    """`base`, or `base_1`, `base_2` … : the first that `taken` lacks (then added to it), for a
    tensor or node a rewrite adds beside the names a graph has (`names_in_use`)."""
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _spell_out_splits(model: onnx.ModelProto, taken: set[str] | None = None) -> int:
    """Give every Split that cuts into equal parts without naming their sizes (opset 18's
    `num_outputs`, or no sizes at all) its sizes as a constant; returns how many. `taken`: the
    graph's `names_in_use`, if the caller has them (the names given here are added to it).

    torch's default exporter since torch 2.9 (torch.export) writes `x.chunk(2, 1)` as
    Split(num_outputs=2). Coupling freezes such a Split: its parts stay equal whatever a plan
    wants, so the widths behind it (YOLOv8's C2f halves) could not change. The sizes it implies are
    its outputs' inferred widths; spelled out, the graph computes the same function, and a plan can
    edit them as it edits the TorchScript exporter's Split(x, [a, b]). A Split whose outputs'
    widths are not known (an axis of dynamic size) is left as it is."""
    graph = model.graph
    opset = default_opset(model)
    shapes = {v.name: v.type.tensor_type.shape for v in [*graph.input, *graph.value_info, *graph.output]}
    taken = names_in_use(graph) if taken is None else taken

    def dims(name: str) -> list[int] | None:
        shape = shapes.get(name)
        if shape is None or not shape.dim:
            return None
        return [d.dim_value if d.HasField("dim_value") else -1 for d in shape.dim]

    count = 0
    for node in graph.node:
        if node.op_type != "Split" or node.domain not in ("", "ai.onnx"):
            continue
        attrs = {a.name: a for a in node.attribute}
        if (opset >= 13 and len(node.input) > 1 and node.input[1]) or (opset < 13 and "split" in attrs):
            continue  # its sizes are spelled out already
        x = dims(node.input[0])
        if x is None:
            continue
        axis = attrs["axis"].i if "axis" in attrs else 0
        axis = axis + len(x) if axis < 0 else axis
        outs = [dims(t) for t in node.output]
        if not 0 <= axis < len(x) or any(o is None or len(o) != len(x) or o[axis] <= 0 for o in outs):
            continue
        sizes = [o[axis] for o in outs if o is not None]
        if x[axis] > 0 and sum(sizes) != x[axis]:
            continue  # inference disagrees with itself: leave the node to the checks that follow
        if opset >= 13:
            name = fresh_name("split_sizes", taken)
            # raw bytes, as exporters and onnx-graphsurgeon write initializers
            graph.initializer.append(onnx.numpy_helper.from_array(np.array(sizes, dtype=np.int64), name))
            if len(node.input) > 1:
                node.input[1] = name
            else:
                node.input.append(name)
            drop_attributes(node, ("num_outputs",))
        else:
            node.attribute.append(onnx.helper.make_attribute("split", sizes))
        count += 1
    return count


def _unshare_constants(model: onnx.ModelProto, taken: set[str] | None = None) -> int:
    """Give every reader of a small shared initializer its own copy; returns how many copies.
    `taken`: as `_spell_out_splits`'s.

    Exporters merge constants of equal value: two C2f blocks whose Split sizes are both [51, 51],
    or two BatchNorms with the same untrained statistics, end up reading one initializer. Editing
    it for one reader would change the other, so the coupling analysis had to freeze both groups,
    although the model never meant them to be tied. Copies (shape vectors and per-channel
    parameters, ≤ UNSHARE_MAX_ELEMENTS values) compute the same function and free both."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    protected = {v.name for v in graph.input} | {v.name for v in graph.output}
    taken = names_in_use(graph) if taken is None else taken
    seen: set[str] = set()
    copies = 0
    for node in graph.node:
        for j, name in enumerate(node.input):
            tensor = inits.get(name)
            if tensor is None or name in protected:
                continue
            if name not in seen:
                seen.add(name)
                continue
            if not tensor.dims or math.prod(tensor.dims) > UNSHARE_MAX_ELEMENTS:
                continue  # a scalar ties no channels; a large tensor is a weight, not a shape vector
            k = 1
            while f"{name}__{k}" in taken:
                k += 1
            clone = TensorProto()
            clone.CopyFrom(tensor)
            clone.name = f"{name}__{k}"
            taken.add(clone.name)
            graph.initializer.append(clone)
            node.input[j] = clone.name
            copies += 1
    return copies


def _check_conv_channels(model: onnx.ModelProto, path: Path, given: bool) -> None:
    """Each Conv's input channels must be what its weights take (C = weight dim 1 × group).

    ONNX shape inference does not check this, so a wrong --input-shape or a broken export would
    otherwise load fine and fail only inside a backend (or be analyzed as if it ran)."""
    shapes: dict[str, list[int]] = {}
    for vi in [*model.graph.input, *model.graph.value_info]:
        tt = vi.type.tensor_type
        if tt.HasField("shape"):
            shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else 0 for d in tt.shape.dim]
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    for node in model.graph.node:  # a quantized weight: the shape of what it dequantizes
        if node.op_type in _KEEP_OPS and node.input and node.input[0] in weights:
            weights[node.output[0]] = weights[node.input[0]]
    for node in model.graph.node:
        if node.op_type != "Conv" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        x, w = shapes.get(node.input[0]), weights.get(node.input[1])
        if not x or len(x) < 2 or x[1] < 1 or not w or len(w) < 2:
            continue
        group = next((a.i for a in node.attribute if a.name == "group"), 1) or 1
        if x[1] != w[1] * group:
            hint = " (check --input-shape)" if given else ""
            per_group = f" ({w[1]} per group × {group} groups)" if group > 1 else ""
            raise ModelError(
                f"{path.name}: Conv {node.name or node.output[0]!r} gets {x[1]} input channels, but "
                f"its weights take {w[1] * group}{per_group}{hint}"
            )


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """{tensor: its shape} of every tensor inference gave a shape of known dims only."""
    shapes: dict[str, list[int]] = {}
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shapes[vi.name] = [d.dim_value for d in tt.shape.dim]
    return shapes


def _check_reshapes(model: onnx.ModelProto, path: Path, asked: dict[str, list[int]] | None) -> None:
    """Each Reshape must keep its input's element count. ONNX shape inference takes a constant
    target shape as it is: a channel shuffle traced at batch 1 (ShuffleNet's Reshape to
    [1, 2, 24, 8, 8]) loaded at --input-shape batch 2, and `apply` wrote a model onnxruntime cannot
    run, exit 0. `asked`: the input shapes given (--input-shape, --batch), named in the error."""
    shapes = _static_shapes(model)
    for node in model.graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or not node.input:
            continue
        x, y = shapes.get(node.input[0]), shapes.get(node.output[0])
        if x is None or y is None or math.prod(x) == math.prod(y):
            continue
        name = node.name or node.output[0]
        what = f"Reshape {name!r} makes {x} into {y}, {math.prod(x)} elements into {math.prod(y)}"
        if asked:
            shown = ", ".join(f"{n} {'×'.join(map(str, d))}" for n, d in asked.items())
            raise ModelError(
                f"{path.name}: cannot run at {shown}: {what}; the graph fixes its batch or size (a "
                "Reshape's shape traced at export): export it with a dynamic batch, or run it at its own"
            )
        raise ModelError(f"{path.name}: invalid model: {what}")


def _file_format(path: str | os.PathLike[str]) -> str | None:
    """The format onnx.save_model picks by `path`'s extension (None: protobuf, the default). onnx
    before 1.15 (the declared minimum is 1.14) has no serialization registry and writes protobuf
    whatever the extension."""
    registry = getattr(getattr(onnx, "serialization", None), "registry", None)
    if registry is None:
        return None
    return registry.get_format_from_file_extension(os.path.splitext(path)[1])


def _save_with_external_data(model: onnx.ModelProto, path: Path, location: str) -> None:
    """`onnx.save_model` of a copy of `model` to `path`, its tensors of 1 KiB or more stored in
    `location` beside it (save_as_external_data, all_tensors_to_one_file, size_threshold=1024),
    the same files written without that copy: onnx converts the model it is given, so it was
    handed a whole copy of the weights, and then serialized the converted model. Here each weight's
    bytes go to the data file as they are read, and the model written is one without them. Left to
    onnx where it does more: a text format, tensors in subgraphs, tensors already marked external,
    fields the schema does not know (which `copy_fields` would drop)."""
    fmt = _file_format(path)
    inits = model.graph.initializer
    if (
        fmt not in (None, "protobuf")
        or uses_external_data(model)
        or any(a.HasField("g") or a.graphs for n in model.graph.node for a in n.attribute)
        or has_unknown_fields(model, model.graph, *inits)
    ):
        to_save = onnx.ModelProto()
        to_save.CopyFrom(model)
        onnx.save_model(
            to_save,
            str(path),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=location,
            size_threshold=1024,
        )
        return
    skel = onnx.ModelProto()
    copy_fields(model, skel, "graph")
    copy_fields(model.graph, skel.graph, "initializer")
    offset = 0
    with contextlib.ExitStack() as stack:
        data = None  # opened at the first tensor stored in it, as onnx does
        for t in inits:
            stub = skel.graph.initializer.add()
            raw = t.raw_data if t.HasField("raw_data") else b""
            if not t.HasField("raw_data") or sys.getsizeof(raw) < 1024:  # onnx's test, to the byte
                stub.CopyFrom(t)
                continue
            copy_fields(t, stub, "raw_data")
            del stub.external_data[:]
            stub.data_location = TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", offset), ("length", len(raw))):
                entry = stub.external_data.add()
                entry.key, entry.value = key, str(value)
            if data is None:
                data = stack.enter_context(open(path.parent / location, "wb"))
            data.write(raw)
            offset += len(raw)
            del raw
    path.write_bytes(skel.SerializeToString())


def write_model_file(model: onnx.ModelProto, path: str | os.PathLike[str]) -> None:
    """`onnx.save_model(model, path)`, the bytes written piece by piece (`serialized_pieces`: one
    weight at a time, where onnx held the whole model serialized twice). Left to onnx where it does
    more than write the bytes: a text format it picks by the extension (.json, .textproto), or
    tensors marked as stored outside, which it writes to their files."""
    fmt = _file_format(path)
    if fmt not in (None, "protobuf") or uses_external_data(model):
        onnx.save_model(model, str(path))
        return
    with open(path, "wb") as f:
        for piece in serialized_pieces(model):
            f.write(piece)


def save_model(model: onnx.ModelProto, path: str | os.PathLike[str], *, external_data: bool = False) -> None:
    """Write atomically: a failed save leaves no file (and no stale .data file) behind.

    With external_data the weights go to `<name>.data` beside the model, the layout the input had.
    Both files are written in a temporary folder beside the destination and renamed into place,
    data first, so a reader never sees a model pointing at missing or half-written data (a reader
    that opens it between the two renames can still see the old graph over the new weights). Such a
    write holds a lock beside it (`.NAME.lock`, fileio.hold_lock): a second writer of the same
    output is refused in one line, where two writers' renames interleaved and left one's graph
    over the other's weights, a model that ran and computed garbage. The temporary folder,
    `.NAME.<pid>-<random>`, is locked while it is written (fileio.owned_temp_dir): one a killed
    writer left is removed by the next write beside it.
    A symlink's target is replaced (the link stays); /dev/null or a FIFO is written to in place.
    """
    from deployopt.fileio import hold_lock, lock_name, owned_temp_dir, release_lock, remove_owned_temp_dir

    given = check_output_file(path)
    dest, direct = resolve_output(given)
    if external_data:
        check_weights_name(given)
    if direct:
        if external_data:
            raise OutputError(
                f"cannot write {given}: not a regular file, and the weights need a .data file beside it"
            )
        write_pieces(given, serialized_pieces(model))  # written in place, as fileio does it
        return
    make_output_dir(dest.parent)
    lock = None
    if external_data:  # two renames: one writer at a time (a single file is one rename)
        held = lock_name(dest)
        lock = hold_lock(
            held,
            f"cannot write {given}: another deployopt run is writing it now (it holds {held.name} beside "
            "it); wait for it to end, or give another output path",
            error=OutputError,
        )
    try:
        pid = f"{os.getpid()}-"
        tmpdir = owned_temp_dir(temp_prefix(dest.name, pid, dest.parent), dest.parent)
    except OSError as exc:
        release_lock(lock)
        raise output_error(dest, exc) from None
    try:
        tmp_model = tmpdir / dest.name
        replaced = _replaced_weights(dest)  # read before anything moves in
        new_data = None  # the weights file the new model reads
        if external_data:
            location = dest.name + ".data"
            try:
                _save_with_external_data(model, tmp_model, location)
            except onnx.checker.ValidationError as exc:  # NAME.data over 255 bytes: onnx's many lines
                raise OutputError(f"cannot write {dest.parent / location}: {first_line(exc)}") from None
            except OSError as exc:  # the .data file named, not the model
                raise output_error(dest.parent / location, exc) from None
            if (tmpdir / location).exists():
                try:
                    publish(tmpdir / location, dest.parent / location)
                except OSError as exc:  # a folder named like it: the error named the model's path
                    raise output_error(dest.parent / location, exc) from None
                new_data = dest.parent / location
        else:
            write_model_file(model, tmp_model)
        publish(tmp_model, dest)
        # each weights file of the replaced model that the new one does not read (a .data of its name
        # was just written over): said, not deleted (another model may read it)
        reads = "weights inside" if new_data is None else f"weights in {new_data.name}"
        for stale in (src for src in replaced if not (new_data and src.exists() and src.samefile(new_data))):
            import warnings

            from deployopt.errors import DeployoptWarning

            warnings.warn(
                f"{stale} is left beside {given}: it holds the weights of the model this replaced, which "
                f"the new {dest.name} ({reads}) does not read; delete it unless another model does",
                DeployoptWarning,
                stacklevel=2,
            )
    except OSError as exc:  # a full disk, a read-only folder, a folder named like the data file
        raise output_error(dest, exc) from None
    finally:
        remove_owned_temp_dir(tmpdir)
        release_lock(lock)
