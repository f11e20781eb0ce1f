"""Protobuf helpers for ONNX messages that more than one module needs.

Loading (deployopt.model: the copy shape inference reads) and surgery (deployopt.surgery: the copy
onnx.checker reads) both build a copy of a model without its large weights' data. Both need to copy
a message field by field while leaving one field (a graph's initializers, a tensor's raw bytes)
unread; this module holds that one helper, so surgery no longer imports a private name of
deployopt.model, and neither module carries a copy of it. It depends on onnx's protobuf messages
alone.
"""

from __future__ import annotations

from typing import Any


def copy_fields(src: Any, dst: Any, skip: str) -> None:
    """Every field `src` has set, on `dst` (a message of its type, those fields unset), but the one
    named `skip`; its value is never read (ListFields would read a weight's bytes)."""
    for fd in src.DESCRIPTOR.fields:
        if fd.name == skip:
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
