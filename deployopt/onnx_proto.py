"""Protobuf helpers for ONNX messages that more than one module needs.

Loading (deployopt.model: the copy shape inference reads) and surgery (deployopt.surgery: the copy
onnx.checker reads) both build a copy of a model without its large weights' data. Both need to copy
a message field by field while leaving one field (a graph's initializers, a tensor's raw bytes)
unread; this module holds that helper, so surgery no longer imports a private name of
deployopt.model, and neither module carries a copy of it. It also holds `check_skeleton` (what both
hand onnx.checker) and `serialized_pieces` (a model's bytes written without one buffer of all of
them). It depends on onnx's protobuf messages alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import onnx


def copy_fields(src: Any, dst: Any, skip: str) -> None:
    """Every field `src` has set, on `dst` (a message of its type, those fields unset), but the one
    named `skip`; its value is never read (ListFields would read a weight's bytes)."""
    _copy_where(src, dst, lambda fd: fd.name != skip)


def _copy_where(src: Any, dst: Any, keep: Callable[[Any], bool]) -> None:
    """`copy_fields` of the fields `keep` (given each field's descriptor) is true for."""
    for fd in src.DESCRIPTOR.fields:
        if not keep(fd):
            continue
        # protobuf 7 drops `label`; before 5.29 (onnx 1.14 needs 3.20) there is no `is_repeated`
        repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
        if repeated:
            getattr(dst, fd.name).extend(getattr(src, fd.name))
        elif not src.HasField(fd.name):
            continue
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(dst, fd.name).CopyFrom(getattr(src, fd.name))
        else:
            setattr(dst, fd.name, getattr(src, fd.name))


def has_unknown_fields(*messages: Any) -> bool:
    """Whether any of `messages` holds fields its schema does not know (a file from a newer onnx):
    `copy_fields` and `serialized_pieces` copy known fields only, so such a message is copied or
    serialized whole instead."""
    try:
        from google.protobuf import unknown_fields
    except ImportError:  # protobuf before 4.24 (onnx 1.14 allows 3.20): the message method
        try:
            return any(len(m.UnknownFields()) for m in messages)
        except Exception:  # cannot tell: copied or serialized whole, as before
            return True
    return any(len(unknown_fields.UnknownFieldSet(m)) for m in messages)


def check_skeleton(model: onnx.ModelProto, *, external: bool = False) -> onnx.ModelProto:
    """What `onnx.checker.check_model` is given for a model: all of it, but each large float
    weight whose data the checker would pass (raw bytes, exactly its shape's, all dims positive)
    emptied to zero elements. The checker serializes what it is given, and the weights were most of
    it (1.5 s and a second copy of a 335 MB model per applied plan; at load, 1.1 GB over the 530 MB
    of VGG16 held); of a weight it checks only the type, one value field and its size, which are
    checked here instead. Like the checker, a model over protobuf's 2 GiB is a ValueError, except
    when its weights were read from `external` data: that file is no one protobuf (onnx's checker
    is then called with the model's path, which does not add them up either), and a 2.3 GB model
    onnxruntime runs was refused by every command as "invalid ONNX model"."""
    skel = onnx.ModelProto()
    copy_fields(model, skel, "graph")
    copy_fields(model.graph, skel.graph, "initializer")
    total = 0
    for t in model.graph.initializer:
        itemsize = _ITEMSIZE.get(t.data_type)
        dims = list(t.dims)
        numel = 1
        for d in dims:
            numel *= d
        if (
            itemsize is None
            or not dims
            or min(dims) <= 0
            or numel <= 64
            or t.data_location != onnx.TensorProto.DEFAULT
            or t.external_data
            or not t.HasField("raw_data")
            or any(getattr(t, f) for f in VALUE_FIELDS)
        ):
            skel.graph.initializer.add().CopyFrom(t)
            continue
        size = len(t.raw_data)
        if size != numel * itemsize:  # the checker says what is wrong with it
            skel.graph.initializer.add().CopyFrom(t)
            continue
        total += size
        stub = skel.graph.initializer.add()
        copy_fields(t, stub, "raw_data")
        del stub.dims[:]
        stub.dims.append(0)
    if (
        total
        and not external
        and skel.ByteSize() + total > getattr(onnx.checker, "MAXIMUM_PROTOBUF", 2**31 - 1)
    ):
        raise ValueError(
            "This protobuf of onnx model is too large (>2GB). Call check_model with model path instead."
        )
    return skel


#: the repeated value fields of a TensorProto (raw_data aside)
VALUE_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")

#: bytes per element of the float types whose weights `check_skeleton` empties
_ITEMSIZE = {
    onnx.TensorProto.FLOAT: 4,
    onnx.TensorProto.FLOAT16: 2,
    onnx.TensorProto.DOUBLE: 8,
    onnx.TensorProto.BFLOAT16: 2,
}


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _length_delimited(number: int, size: int) -> bytes:
    """The key and length of field `number` holding `size` bytes (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(size)


def _part(msg: Any, keep: Callable[[int], bool]) -> bytes:
    """`msg` serialized with only the fields whose number `keep` is true for."""
    part = type(msg)()
    _copy_where(msg, part, lambda fd: keep(fd.number))
    return part.SerializeToString()


#: protobuf's limit on one message (a file past it would not parse)
MAX_PROTO_BYTES = 2**31 - 1

_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
_RAW_DATA = onnx.TensorProto.DESCRIPTOR.fields_by_name["raw_data"].number


def _tensor_pieces(tensor: onnx.TensorProto) -> tuple[int, Callable[[], Iterator[bytes]]]:
    """(the tensor's serialized size, what yields its bytes in pieces): its raw bytes apart from the
    fields around them, so that no piece holds them twice (SerializeToString of one 392 MB weight
    took twice that: upb's buffer and the bytes copied out of it)."""
    if not tensor.HasField("raw_data") or has_unknown_fields(tensor):
        return tensor.ByteSize(), lambda: iter([tensor.SerializeToString()])
    before = _part(tensor, lambda n: n < _RAW_DATA)
    after = _part(tensor, lambda n: n > _RAW_DATA)
    raw = len(tensor.raw_data)  # read as a copy of them, dropped at once

    def pieces() -> Iterator[bytes]:
        yield before + _length_delimited(_RAW_DATA, raw)
        yield tensor.raw_data
        yield after

    return len(before) + len(_length_delimited(_RAW_DATA, raw)) + raw + len(after), pieces


def _pieces(model: onnx.ModelProto) -> tuple[int, Iterator[bytes]]:
    """(the model's serialized size, its bytes in pieces as `serialized_pieces` gives them). The
    pieces are made as they are read: each initializer's when the one before it is written."""
    graph = model.graph
    before = _part(model, lambda n: n < _GRAPH)
    after = _part(model, lambda n: n > _GRAPH)
    if not model.HasField("graph"):
        return len(before) + len(after), iter([before, after])
    head = _part(graph, lambda n: n < _INITIALIZER)
    tail = _part(graph, lambda n: n > _INITIALIZER)
    tensors = [_tensor_pieces(t) for t in graph.initializer]
    inits = sum(len(_length_delimited(_INITIALIZER, size)) + size for size, _ in tensors)
    graph_key = _length_delimited(_GRAPH, len(head) + inits + len(tail))

    def pieces() -> Iterator[bytes]:
        yield before + graph_key + head
        for size, tensor_pieces in tensors:
            yield _length_delimited(_INITIALIZER, size)
            written = 0
            for piece in tensor_pieces():
                written += len(piece)
                yield piece
            if written != size:  # never seen: the lengths written before it would be wrong
                raise RuntimeError(f"an initializer serialized to {written} bytes, not {size}")
        yield tail + after

    return len(before) + len(graph_key) + len(head) + inits + len(tail) + len(after), pieces()


def serialized_pieces(model: onnx.ModelProto) -> Iterator[bytes]:
    """`model.SerializeToString()`, in pieces whose concatenation is those very bytes: the model's
    fields before its graph, the graph's before its initializers, each initializer (its raw bytes
    apart), then the rest. SerializeToString held the whole model serialized twice at once (upb's
    buffer and the bytes copied out of it: 1.1 GB over the 550 MB of VGG16); written piece by
    piece, the most held is one weight. Protobuf writes a message's known fields in field-number
    order (upb and the C++ runtime both), which is what makes the pieces add up; a model or graph
    with unknown fields (written after them) is serialized whole, as is one over protobuf's 2 GiB
    (for protobuf's own error)."""
    if has_unknown_fields(model, model.graph):
        yield model.SerializeToString()
        return
    size, pieces = _pieces(model)
    if size > MAX_PROTO_BYTES:
        yield model.SerializeToString()
        return
    yield from pieces


def serialized_size(model: onnx.ModelProto) -> int:
    """`model.ByteSize()`, counted as `serialized_pieces` writes it: upb's ByteSize serializes the
    whole model to count it (1.6 GB over the 530 MB of VGG16 for a moment)."""
    if has_unknown_fields(model, model.graph):
        return model.ByteSize()
    return _pieces(model)[0]
