"""Give a written model back the dynamic height and width (any dim past the batch) its input file had.

A detector exported with a dynamic size (`yolo export dynamic=True`: input [batch, 3, height,
width]) is loaded at the size --input-shape gives, since every stage needs static shapes; the
edited model was then written at that size only, though the user exported it to take any. Here the
file's symbols go back on those input dims, output dims the file declares symbolic are freed, and
shape inference derives the rest.

This sits beside deployopt.batch, not in it, because the check differs: samples of one batch can be
compared with each other, outputs at two sizes cannot. So the input file itself is the reference:
at a second size (each dynamic dim + SIZE_STEP) the written model must run and give the output
shapes the file gives, and at the loaded size it must still give what the static model gives (a
broken rewrite). A size that loading baked in while folding shape arithmetic (a Reshape to H·W, a
Slice to H/2) fails the check, and the model is written at the --input-shape size with the reason in
one line; no target is rewritten to guess at it. The one exception is a Resize's `sizes` that the
file computes from a tensor's shape (`F.interpolate(y, size=x.shape[-2:])`, torchvision's
segmentation heads): the file's own chain says which entries were the input's height and width, so
those are computed from the shape again (a fixed target stays fixed), and the same check decides.

The two restores are not one check either: each keeps what passes its own (a batch baked into a
Reshape leaves a dynamic height and width dynamic, and the other way round), and each reason names
the dim that failed. `restore_dynamic_dims` runs them in turn, as apply and optimize write a model;
what they share (the written model's session, the check's inputs, the notice of a restored dim)
is deployopt.batch's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from deployopt.batch import (
    DimRestore,
    close,
    constant_resize_hint,
    random_feeds,
    restore_dynamic_batch,
    restored_notice,
    written_session,
)
from deployopt.errors import first_line, onnxruntime_reason, shorten

if TYPE_CHECKING:
    from deployopt.model import LoadedModel

#: Added to each dynamic dim for the second size checked: a multiple of 32 keeps a stride-32
#: detector's size valid (its upsampled paths meet the downsampled ones again).
SIZE_STEP = 64

#: What dims past the batch of an NCHW (NCDHW) input are called in notices, and made-up symbols.
_LABELS = {4: {2: "height", 3: "width"}, 5: {2: "depth", 3: "height", 4: "width"}}


@dataclass(frozen=True)
class DynamicDims:
    """What a written model's dynamic dims came to: its `batch` restore, then its `size` restore
    (run on the batch's model), each with its own notice ("" when the file fixed those dims)."""

    batch: DimRestore
    size: DimRestore

    @property
    def model(self) -> onnx.ModelProto:
        """The model to write."""
        return self.size.model

    @property
    def notices(self) -> list[str]:
        """The batch's notice, then the size's, those that say something."""
        return [n for n in (self.batch.notice, self.size.notice) if n]


def restore_dynamic_dims(model: onnx.ModelProto, loaded: LoadedModel) -> DynamicDims:
    """`model` (edited from `loaded`) with the dynamic dims the input file declared given back where
    onnxruntime shows they work: the batch (deployopt.batch), then the height and width."""
    batch = restore_dynamic_batch(
        model, getattr(loaded, "dynamic_batch", {}), getattr(loaded, "static_batch", None)
    )
    return DynamicDims(batch, restore_dynamic_size(batch.model, loaded))


def restore_dynamic_size(model: onnx.ModelProto, loaded: LoadedModel) -> DimRestore:
    """`model` (written from `loaded`, its batch already restored or not) with the dims past the
    batch that the input file left dynamic symbolic again, when onnxruntime shows it takes another
    size as the file does; else `model` as it is, and `loaded`'s notice of the fixed size with why."""
    dynamic = {n: dims for n, dims in loaded.file_dynamic_dims.items() if dims and n in loaded.input_shapes}
    if not dynamic:
        return DimRestore(model, False, "")
    fixed = {n: list(shape) for n, shape in loaded.input_shapes.items()}
    second = {
        n: [d + SIZE_STEP if i in dynamic.get(n, ()) else d for i, d in enumerate(shape)]
        for n, shape in fixed.items()
    }
    hinted = model  # the Resizes still constant where the check ran, for the hint
    try:
        original = _declared(loaded.path)
        symbols = _symbols(dynamic, fixed, original, model)
        candidate = hinted = _make_dynamic_size(model, symbols, original)
        why = _check_size(candidate, model, loaded.path, fixed, second)
    except Exception as exc:  # onnx/onnxruntime say why in their first line
        why = shorten(first_line(exc))
    if why:
        why += constant_resize_hint(hinted, why, "size")  # onnxruntime's reason names a later op
        return DimRestore(model, False, loaded.fixed_size_notice(why))
    return DimRestore(candidate, True, _restored_notice(symbols, fixed, second))


def _declared(path: Path) -> onnx.ModelProto:
    """The input file as written, without its external weights: its inputs' symbols and the
    output dims it declares dynamic (loading replaced both)."""
    from deployopt.model import peek_model  # parses as loading does; None for a pipe or unreadable file

    original = peek_model(path)
    if original is None:
        raise ValueError(f"the input file {path.name} cannot be read again")
    return original


def _symbols(
    dynamic: dict[str, list[int]],
    fixed: dict[str, list[int]],
    original: onnx.ModelProto,
    model: onnx.ModelProto,
) -> dict[str, dict[int, str]]:
    """input → {dim: symbol}: the file's, or for an unnamed dim a made-up one ("height" for one
    input's dim 2 of 4, else "<input>_dim<i>") that no other dim of either model uses (a shared
    symbol says two dims are equal)."""
    file_dims = {i.name: list(i.type.tensor_type.shape.dim) for i in original.graph.input}
    used = {
        d.dim_param
        for m in (original, model)
        for vi in [*m.graph.input, *m.graph.output]
        for d in vi.type.tensor_type.shape.dim
        if d.dim_param
    }
    out: dict[str, dict[int, str]] = {}
    for name, dims in dynamic.items():
        out[name] = {}
        for i in dims:
            have = file_dims.get(name, [])
            symbol = have[i].dim_param if i < len(have) else ""
            if not symbol:
                symbol = _LABELS.get(len(fixed[name]), {}).get(i, "")
                if len(dynamic) > 1 or not symbol or symbol in used:
                    symbol = f"{name}_dim{i}"
                used.add(symbol)
            out[name][i] = symbol
    return out


def _make_dynamic_size(
    model: onnx.ModelProto, symbols: dict[str, dict[int, str]], original: onnx.ModelProto
) -> onnx.ModelProto:
    """A copy of `model` with `symbols` on its inputs, output dims freed where the file declares
    them dynamic, and every other shape inferred again (the stale ones carried the fixed size)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    _resize_sizes_from_file(out.graph, model, original)
    for inp in out.graph.input:
        for i, symbol in symbols.get(inp.name, {}).items():
            d = inp.type.tensor_type.shape.dim[i]
            d.Clear()
            d.dim_param = symbol
    declared = {o.name: o for o in original.graph.output}
    for o in out.graph.output:
        _free_output_dims(o, declared.get(o.name))
    del out.graph.value_info[:]
    onnx.checker.check_model(out)
    return onnx.shape_inference.infer_shapes(out, strict_mode=True)


def _resize_sizes_from_file(
    graph: onnx.GraphProto, model: onnx.ModelProto, original: onnx.ModelProto
) -> None:
    """Give each Resize of `graph` (a copy of `model`) whose `sizes` loading folded the dims back
    that the input file computes from a tensor's shape, where that dim is dynamic in the file
    (`F.interpolate(y, size=x.shape[-2:])`: Shape(x)[2:4], folded to the --input-shape H×W). A
    Resize to a size the file fixes (a 64×64 target) keeps it. Matched by output name, as loading
    and editing keep it; a dim that is not the folded number here, or a tensor this model lacks,
    stays as it is, and the size check decides."""
    from deployopt.batch import rebuild_shape_inputs, traced_shape
    from deployopt.model import names_in_use

    def resize_sizes(node: onnx.NodeProto) -> str:
        ok = node.op_type == "Resize" and node.domain in ("", "ai.onnx") and len(node.input) > 3
        return node.input[3] if ok else ""

    theirs = {n.output[0]: resize_sizes(n) for n in original.graph.node if resize_sizes(n)}
    if not theirs or not any(resize_sizes(n) for n in graph.node):
        return
    try:
        their_dims, their_ranks = _inferred_dims(original)
        our_dims, our_ranks = _inferred_dims(model)
    except Exception:  # onnx's inference errors: the sizes stay as loading folded them, the check says why
        return
    plans: dict[int, list[Any]] = {}
    for i, node in enumerate(graph.node):
        if not resize_sizes(node) or node.output[0] not in theirs:
            continue
        ours = traced_shape(graph, node.input[3], our_ranks)
        file_sizes = traced_shape(original.graph, theirs[node.output[0]], their_ranks)
        if not ours or not file_sizes or len(ours) != len(file_sizes):
            continue
        new = list(ours)
        for k in range(1, len(ours)):  # entry 0 is the batch: deployopt.batch's
            entry, source = ours[k], file_sizes[k]
            if not isinstance(entry, int) or not isinstance(source, tuple):
                continue
            tensor, axis = source
            file_dim = their_dims.get(tensor, [])[axis : axis + 1]
            our_dim = our_dims.get(tensor, [])[axis : axis + 1]
            if file_dim == [None] and our_dim == [entry]:  # dynamic in the file, folded to this here
                new[k] = source
        if new != ours:
            plans[i] = new
    rebuild_shape_inputs(graph, plans, 3, names_in_use(graph))


def _inferred_dims(model: onnx.ModelProto) -> tuple[dict[str, list[int | None]], dict[str, int]]:
    """Each tensor's dims as shape inference finds them (None where not a number) and its rank."""
    inferred = onnx.shape_inference.infer_shapes(model)
    dims = {
        vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
        for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
        if vi.type.tensor_type.HasField("shape")
    }
    return dims, {name: len(d) for name, d in dims.items()}


def _free_output_dims(output: onnx.ValueInfoProto, in_file: onnx.ValueInfoProto | None) -> None:
    """Each fixed dim of `output` that the file declares dynamic gets the file's symbol (or none);
    an output the file gives no shape of the same rank loses its shape, which inference gives
    again. Symbols already there (the restored batch) stay. Inference then fixes what it can derive
    (a channel count), so a dim freed here that the graph fixes comes back fixed."""
    tt = output.type.tensor_type
    if not tt.HasField("shape"):
        return
    theirs = in_file.type.tensor_type if in_file is not None else None
    if theirs is None or not theirs.HasField("shape") or len(theirs.shape.dim) != len(tt.shape.dim):
        tt.ClearField("shape")
        return
    for d, f in zip(tt.shape.dim, theirs.shape.dim):
        if d.dim_param or (f.HasField("dim_value") and f.dim_value > 0):
            continue
        d.Clear()
        if f.dim_param:
            d.dim_param = f.dim_param


def _check_size(
    candidate: onnx.ModelProto,
    static: onnx.ModelProto,
    path: Path,
    fixed: dict[str, list[int]],
    second: dict[str, list[int]],
) -> str:
    """'' when `candidate` gives what `static` gives at the `fixed` size, and at the `second` size
    runs with the output shapes the input file at `path` gives there (and declares); else why not."""
    session = written_session(candidate)
    why = _same_as_static(session, written_session(static), fixed)
    if why:
        return why
    feeds = random_feeds(session, lambda inp: second.get(inp.name, inp.shape))
    if isinstance(feeds, str):
        return feeds
    at = f"at {_shapes_text(second)}"
    names = [o.name for o in session.get_outputs()]
    got = _run_written(session, names, feeds, at)
    if isinstance(got, str):
        return got
    ours = dict(zip(names, got))
    theirs = _run_file(path, feeds)
    if isinstance(theirs, str):
        return f"{at} {theirs}"
    for name, want in theirs.items():
        if name not in ours:
            return f"the written model has no output {name!r}"
        if ours[name].shape != want.shape:
            return (
                f"{at} output {name!r} is {_shape_text(ours[name].shape)} in the written model, "
                f"{_shape_text(want.shape)} in the input file"
            )
    return _declared_as_run(candidate, ours, at)


def _same_as_static(session: Any, static: Any, fixed: dict[str, list[int]]) -> str:
    """'' when the candidate's `session` gives the `static` model's outputs at the `fixed` size
    (to batch.RTOL: onnxruntime may pick other kernels for symbolic shapes); else why not."""
    feeds = random_feeds(static, lambda inp: fixed.get(inp.name, inp.shape))
    if isinstance(feeds, str):
        return feeds
    names = [o.name for o in static.get_outputs()]
    want = static.run(names, feeds)
    at = f"at {_shapes_text(fixed)}"
    got = _run_written(session, names, feeds, at)
    if isinstance(got, str):
        return got
    for name, g, w in zip(names, got, want):
        if g.shape != w.shape or not close(g, w):
            return f"{at} output {name!r} of the written model differs from the static model's"
    return ""


def _run_written(session: Any, names: list[str], feeds: dict[str, np.ndarray], at: str) -> list[Any] | str:
    """The written model's `names` outputs on `feeds`, or why it failed `at` that size."""
    try:
        return session.run(names, feeds)
    except Exception as exc:  # onnxruntime's own error types
        return f"{at} the written model fails: {onnxruntime_reason(exc)}"


def _run_file(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray] | str:
    """The input file's outputs by name on `feeds` (in its own input types), run by path so its
    external weights load too; or what failed."""
    from deployopt.fidelity import cpu_session, input_dtypes

    try:
        session = cpu_session(path, "the input file: onnxruntime cannot load it")
    except Exception as exc:  # a ModelError in one line
        return first_line(exc)
    dtypes = input_dtypes(session)
    missing = [i.name for i in session.get_inputs() if i.name not in feeds]
    if missing:
        return f"the input file takes {missing[0]!r}, which the written model does not"
    theirs = {
        i.name: feeds[i.name].astype(dtypes.get(i.name, feeds[i.name].dtype)) for i in session.get_inputs()
    }
    try:
        return dict(zip([o.name for o in session.get_outputs()], session.run(None, theirs)))
    except Exception as exc:  # onnxruntime's own error types
        return f"the input file fails: {onnxruntime_reason(exc)}"


def _declared_as_run(candidate: onnx.ModelProto, outputs: dict[str, np.ndarray], at: str) -> str:
    """'' when every fixed output dim `candidate` declares is what it gave `at` the second size:
    a stale size there would tell TensorRT and serving code a wrong shape."""
    for o in candidate.graph.output:
        dims = o.type.tensor_type.shape.dim
        got = outputs.get(o.name)
        if got is None or not o.type.tensor_type.HasField("shape"):
            continue
        if len(dims) != got.ndim or any(
            d.HasField("dim_value") and d.dim_value != n for d, n in zip(dims, got.shape)
        ):
            declared = "×".join(str(d.dim_value) if d.HasField("dim_value") else "?" for d in dims)
            return (
                f"{at} output {o.name!r} is {_shape_text(got.shape)}, the written model declares {declared}"
            )
    return ""


def _restored_notice(
    symbols: dict[str, dict[int, str]], fixed: dict[str, list[int]], second: dict[str, list[int]]
) -> str:
    """`written with the input's dynamic height, width ('height', 'width'), checked at 640×640 and
    704×704`: which dims are dynamic again, by the symbols a caller feeds, and the sizes run."""
    parts = []
    for name, dims in symbols.items():
        labels = ", ".join(_LABELS.get(len(fixed[name]), {}).get(i, f"dim {i}") for i in dims)
        parts.append((name, f"{labels} ({', '.join(map(repr, dims.values()))})"))
    if len(parts) == 1:
        what = f"the input's dynamic {parts[0][1]}"
    else:
        what = "the inputs' dynamic " + "; ".join(f"{name!r} {text}" for name, text in parts)

    def sizes(shapes: dict[str, list[int]]) -> str:
        each = [(n, "×".join(str(shapes[n][i]) for i in dims)) for n, dims in symbols.items()]
        return each[0][1] if len(each) == 1 else ", ".join(f"{n!r} {s}" for n, s in each)

    return restored_notice(what, sizes(fixed), sizes(second))


def _shape_text(shape: Any) -> str:
    return "×".join(map(str, shape))


def _shapes_text(shapes: dict[str, list[int]]) -> str:
    """`1×3×704×704` for one input; `'a' 1×3×704×704, 'b' 1×8` for several."""
    if len(shapes) == 1:
        return _shape_text(next(iter(shapes.values())))
    return ", ".join(f"{n!r} {_shape_text(s)}" for n, s in shapes.items())
