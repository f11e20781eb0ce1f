"""Give a written model back the dynamic batch dimension its input file had.

Loading fixes a symbolic batch to a number (1, or the timed batch), because every later stage needs
static shapes, and folding constants at that batch can bake it into Reshape targets and Resize
sizes (`F.interpolate(y, size=x.shape[-2:])`, torchvision's fcn/deeplabv3/lraspp heads). A user who
exported with a dynamic batch (for TensorRT optimization profiles, for serving) expects the edited
model to take any batch as the original did. This module restores the symbol on the inputs and
outputs, turns batch-valued Reshape targets into 0 ("copy this dim from the input") and a Resize's
folded batch-valued `sizes[0]` into its data's dim 0 at run time, and then
*checks* the result on onnxruntime: batch 2 must give, sample by sample, what batch 1 gives. A
model that fails the check (a batch hidden in another op's constant) is written static, with the
reason in one line — never a model that breaks, or mixes samples, at another batch.

The other way round, `--batch N` on a file that fixes its batch: every backend runs it rewritten
to N (`rebatched_notice` says so), TensorRT and trtexec from a copy of the file at N
(`write_at_batch`), or every backend refuses a graph whose Reshapes hard-code it in one line.

deployopt.dynamic_dims restores the height and width the same way, with a check of its own (see
there why the two are not one check); what both use is here: the result (`DimRestore`), the
written model's onnxruntime session, the check's inputs, the tolerance, and the notice of a
restored dim.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np
import onnx
from onnx import numpy_helper

from deployopt.errors import onnxruntime_reason

if TYPE_CHECKING:
    from pathlib import Path

    from deployopt.model import LoadedModel

#: Outputs of one sample at batch 2 and at batch 1 must agree to this, relative to the output's
#: scale: the same kernels on other batch sizes may sum in another order (onnxruntime CPU).
RTOL = 1e-4


@dataclass(frozen=True)
class DimRestore:
    """The model to write and one line for the user about the dims restored (its batch here, its
    height and width in deployopt.dynamic_dims), or about those it keeps fixed and why."""

    model: onnx.ModelProto
    restored: bool
    notice: str


def restore_dynamic_batch(
    model: onnx.ModelProto, dynamic: dict[str, str], static_batch: int | None
) -> DimRestore:
    """`model` with dim 0 of the inputs in `dynamic` (name → the file's symbol, "" if it had none)
    symbolic again, when onnxruntime shows the result takes another batch sample by sample.

    `static_batch` is the batch the model was loaded (and edited) at."""
    if not dynamic or static_batch is None:
        return DimRestore(model, False, "")
    symbol = next((s for s in dynamic.values() if s), "batch")
    hinted = model  # the Resizes still constant where the check ran, for the hint
    try:
        candidate = hinted = _make_dynamic(model, dynamic, static_batch, symbol)
        why = _check_batches(candidate)
    except Exception as exc:  # onnx/onnxruntime say why in their first line
        why = onnxruntime_reason(exc)
    if why:
        return DimRestore(
            model,
            False,
            f"written with a static batch of {static_batch}: the input's dynamic batch could not be "
            f"restored ({why}{constant_resize_hint(hinted, why, 'batch')})",
        )
    what = f"the input's dynamic batch ({symbol!r})"
    return DimRestore(candidate, True, restored_notice(what, "batch 1", "2"))


def constant_resize_hint(model: onnx.ModelProto, why: str, dims: str) -> str:
    """`; likely cause: Resize 'up' has constant output sizes 1×8×16×16 ...` when `model` has a
    Resize whose `sizes` input is a constant, else "". An export computes them from the input's
    shape; loading at a fixed shape folds them to numbers, which fit no other batch or size
    (`dims`), and onnxruntime's reason (a paragraph on which scales 'Linear' mode takes, or a
    broadcast failing further on) never said so. The Resize `why` names comes first."""
    consts = {t.name: t for t in model.graph.initializer}
    fixed = [  # an empty `sizes` is none (scales are given): nothing folded there
        n
        for n in model.graph.node
        if n.op_type == "Resize"
        and len(n.input) > 3
        and n.input[3] in consts
        and any(consts[n.input[3]].dims)
    ]
    if not fixed:
        return ""
    failed = re.search(r"Resize '([^']*)'", why)  # the size check's reason starts `at x 1x3x…: …`
    node = next((n for n in fixed if failed and n.name == failed[1]), fixed[0])
    sizes = "×".join(str(int(d)) for d in numpy_helper.to_array(consts[node.input[3]]).ravel())
    more = f" (and {len(fixed) - 1} more Resize)" if len(fixed) > 1 else ""
    return (
        f"; likely cause: Resize {node.name!r}{more} has constant output sizes {sizes}, "
        f"computed for the shape loaded, which fit no other {dims}"
    )


def restored_notice(what: str, first: str, second: str) -> str:
    """The line for dims given back (`what`) and the sizes the check ran: `written with the input's
    dynamic batch ('N'), checked at batch 1 and 2`, `written with the input's dynamic height, width
    ('H', 'W'), checked at 640×640 and 704×704`."""
    return f"written with {what}, checked at {first} and {second}"


def written_session(model: onnx.ModelProto) -> Any:
    """An onnxruntime CPU session of a model about to be written, as verify makes one; a model it
    cannot load is a ModelError, whose line the restore's notice gives as the reason."""
    from deployopt.fidelity import cpu_session

    return cpu_session(model, "the written model: onnxruntime cannot load it")


def rebatched_notice(loaded: LoadedModel, given: dict[str, list[int]]) -> str:
    """The line for a batch the file fixes that --batch N rewrote (`loaded`: prepare_model's, at N;
    `given`: the --input-shape entries, which are the user's own), or "". Every backend runs such a
    model rewritten: onnxruntime and torch did so without a word, TensorRT and trtexec refused."""
    changed = [
        (name, old, loaded.input_shapes[name][0])
        for name, old in loaded.file_batch.items()
        if name not in given and loaded.input_shapes.get(name) and loaded.input_shapes[name][0] != old
    ]
    if not changed:
        return ""
    name, old, new = changed[0]
    more = f" (and {len(changed) - 1} more input(s))" if len(changed) > 1 else ""
    return (
        f"{loaded.path.name}: input {name!r}{more} is fixed at batch {old} in the file; timed "
        f"rewritten to --batch {new}, at which its shapes check out (the file itself takes batch {old})"
    )


def fixed_batch_differs(path: Path, batch: int | None, given: dict[str, list[int]]) -> bool:
    """Whether --batch `batch` meets an input of the ONNX file at `path` whose batch the file fixes
    at another value (read from its header, no weights; an input --input-shape gives is the user's)."""
    if batch is None:
        return False
    from deployopt.backends.trtexec import _onnx_input_dims

    try:
        dims = _onnx_input_dims(path)
    except Exception:  # not a model onnx reads: the backend says so in its own words
        return False
    return any(n not in given and d and d[0] is not None and d[0] != batch for n, d in dims.items())


def write_at_batch(path: Path, batch: int, given: dict[str, list[int]], dest: Path) -> str:
    """Write the ONNX file at `path` to `dest` with --batch `batch` in place of the batch its inputs
    fix, for a backend that builds the file itself (TensorRT, trtexec), and return the notice
    (`rebatched_notice`). Checked as onnxruntime and torch load it (ort.prepare_model), so a graph
    whose Reshapes hard-code the batch is the same one-line ModelError on every backend; the graph
    is otherwise the file's own (nothing folded: Q/DQ nodes stay for TensorRT), its outputs given
    the shapes found at `batch` and its intermediate shapes left for the builder to infer."""
    from deployopt.backends.ort import prepare_model
    from deployopt.model import save_model, uses_external_data

    loaded = prepare_model(path, batch, given)
    model = onnx.load(str(path), load_external_data=False)
    external = uses_external_data(model)
    if external:
        onnx.external_data_helper.load_external_data_for_model(model, str(path.parent))
    for inp in model.graph.input:
        want = loaded.input_shapes.get(inp.name)
        dims = inp.type.tensor_type.shape.dim
        if inp.name in loaded.file_batch and want and len(dims):
            dims[0].Clear()
            dims[0].dim_value = want[0]
    found = {o.name: o.type.tensor_type.shape for o in loaded.model.graph.output}
    for out in model.graph.output:
        if out.name in found and out.type.tensor_type.HasField("shape"):
            out.type.tensor_type.shape.CopyFrom(found[out.name])
    del model.graph.value_info[:]
    dest.parent.mkdir(parents=True, exist_ok=True)
    save_model(model, dest, external_data=external)
    return rebatched_notice(loaded, given)


def _make_dynamic(
    model: onnx.ModelProto, dynamic: dict[str, str], batch: int, symbol: str
) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    shaped = [
        vi
        for vi in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
        if vi.type.tensor_type.HasField("shape")
    ]
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in shaped}
    dims0 = {vi.name: vi.type.tensor_type.shape.dim[0].dim_value for vi in shaped if ranks[vi.name]}
    for inp in graph.input:
        if inp.name in dynamic:
            d = inp.type.tensor_type.shape.dim[0]
            d.Clear()
            d.dim_param = dynamic[inp.name] or symbol
    inits = {t.name: t for t in graph.initializer}
    from deployopt.model import names_in_use

    taken = names_in_use(graph)  # a copy named like a graph input or a subgraph's name broke the model
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    for node in graph.node:  # a Reshape that keeps the batch as dim 0, with the batch written in
        if node.op_type != "Reshape" or len(node.input) < 2 or node.input[1] not in inits:
            continue
        if any(a.name == "allowzero" and a.i for a in node.attribute):
            continue  # 0 would mean a zero-sized dim
        target = numpy_helper.to_array(inits[node.input[1]])
        if target.ndim != 1 or not target.size or target[0] != batch or dims0.get(node.input[0]) != batch:
            continue
        target = target.copy()
        target[0] = 0
        name = node.input[1]
        if readers[name] > 1:  # another reader keeps the old values
            name = f"{name}__dynamic_batch"
            k = 1
            while name in taken:
                name, k = f"{node.input[1]}__dynamic_batch{k}", k + 1
            taken.add(name)
            readers[name] = 1
            readers[node.input[1]] -= 1
            node.input[1] = name
        tensor = numpy_helper.from_array(target.astype(np.int64), name)
        if name in inits:
            inits[name].CopyFrom(tensor)
        else:
            graph.initializer.append(tensor)
            inits[name] = graph.initializer[-1]
    rebuild_shape_inputs(graph, _resizes_keeping_the_batch(graph, batch, dims0, ranks), 3, taken)
    del graph.value_info[:]
    for o in graph.output:
        if o.type.tensor_type.HasField("shape") and len(o.type.tensor_type.shape.dim):
            d = o.type.tensor_type.shape.dim[0]
            if d.HasField("dim_value") and d.dim_value == batch:
                d.Clear()
                d.dim_param = symbol
    onnx.checker.check_model(out)
    return onnx.shape_inference.infer_shapes(out, strict_mode=True)


def _resizes_keeping_the_batch(
    graph: onnx.GraphProto, batch: int, dims0: dict[str, int], ranks: dict[str, int]
) -> dict[int, list[ShapeEntry]]:
    """node index → new `sizes` entries, for each Resize whose `sizes` loading folded with the
    batch in (`F.interpolate(y, size=x.shape[-2:])` exports Concat(Shape(y)[:2], Shape(x)[2:]),
    folded at batch 1 to [1, C, H, W]) and whose data has that batch: its dim 0 then becomes
    Shape(data)[0] again, as a Reshape's becomes 0. The batch check decides, as for Reshapes."""
    plans: dict[int, list[ShapeEntry]] = {}
    for i, node in enumerate(graph.node):
        if node.op_type != "Resize" or node.domain not in ("", "ai.onnx") or len(node.input) < 4:
            continue
        if not node.input[3] or dims0.get(node.input[0]) != batch:
            continue
        sizes = traced_shape(graph, node.input[3], ranks)
        if sizes and isinstance(sizes[0], int) and sizes[0] == batch:
            plans[i] = [(node.input[0], 0), *sizes[1:]]
    return plans


def _check_batches(model: onnx.ModelProto) -> str:
    """'' when batch 2 gives each sample what batch 1 gives it; else why not."""
    session = written_session(model)
    feeds = random_feeds(session, lambda inp: [2 if i == 0 else d for i, d in enumerate(inp.shape)])
    if isinstance(feeds, str):
        return feeds
    names = [o.name for o in session.get_outputs()]
    both = session.run(names, feeds)
    for i in range(2):
        one = session.run(names, {k: v[i : i + 1] for k, v in feeds.items()})
        for name, full, single in zip(names, both, one):
            if full.ndim == 0 or full.shape[0] != 2 or single.shape[0] != 1:
                return f"output {name!r} does not follow the batch"
            if full.shape[1:] != single.shape[1:] or not close(full[i : i + 1], single):
                return f"output {name!r} of a sample changes with the batch"
    return ""


def random_feeds(session: Any, shape_of: Callable[[Any], list[Any]]) -> dict[str, np.ndarray] | str:
    """Inputs for a check run of an onnxruntime `session`, each of shape `shape_of(its NodeArg)`:
    seeded `random_values` in its own type (verify's random inputs: standard normals, uint8 pixels
    over 0–255; zeros made every sample of an integer input the same, so a model that mixed
    samples passed the check); or why an input cannot be fed."""
    from deployopt.fidelity import input_dtypes, random_values  # verify's input types and values

    dtypes = input_dtypes(session)
    rng = np.random.default_rng(0)
    feeds: dict[str, np.ndarray] = {}
    for inp in session.get_inputs():
        dims = shape_of(inp)
        if not all(isinstance(d, int) and d > 0 for d in dims):
            return f"input {inp.name!r} has other dynamic dims"
        if inp.name not in dtypes:
            return f"input {inp.name!r} takes {inp.type}, which the check cannot feed"
        feeds[inp.name] = random_values(rng, dims, dtypes[inp.name])
    return feeds


def close(got: np.ndarray, want: np.ndarray) -> bool:
    """Whether `got` is `want` to RTOL of `want`'s scale (same shapes assumed). NaNs count as no
    difference: random inputs can make them (a Log of a negative value) in a model that is right."""
    if not want.size:
        return True
    scale = max(float(np.max(np.abs(want))), 1e-6)
    return not float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) > RTOL * scale


#: One entry of a 1-D shape tensor as `traced_shape` finds it: a number, or `(tensor, axis)`, the
#: size of `tensor`'s dim `axis` when the model runs (what `Shape(tensor)[axis]` gives).
ShapeEntry = Union[int, tuple[str, int]]  # not `int | ...`: evaluated at import, a 3.10 feature

#: How many producers `traced_shape` follows back from a tensor: shape arithmetic is a few ops.
_TRACE_DEPTH = 32


def traced_shape(graph: onnx.GraphProto, name: str, ranks: dict[str, int]) -> list[ShapeEntry] | None:
    """What each entry of the 1-D int tensor `name` of `graph` is made of, through the ops exporters
    compute a Resize's `sizes` with (Shape, Slice, Gather, Concat, Cast, Unsqueeze...; `ranks`: the
    rank of each tensor a Shape may read), or None where another op computes it (a Mul: no longer
    one dim). Loading folds such a chain into a constant; the file's own chain says which entries
    were a tensor's dims, so those (and only those) can be computed again when the model runs."""
    consts = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output if out}

    def ints(value: np.ndarray) -> list[ShapeEntry] | None:
        if value.dtype.kind not in "iu" or value.ndim > 1:
            return None
        return [int(v) for v in value.ravel()]

    def trace(tensor: str, depth: int) -> list[ShapeEntry] | None:
        if tensor in consts:
            return ints(numpy_helper.to_array(consts[tensor]))
        node = producer.get(tensor)
        if node is None or depth > _TRACE_DEPTH or node.domain not in ("", "ai.onnx"):
            return None
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        op = node.op_type
        if op == "Constant":
            value = attrs.get("value")
            if isinstance(value, onnx.TensorProto):
                return ints(numpy_helper.to_array(value))
            for key in ("value_ints", "value_int"):
                if key in attrs:
                    return ints(np.array(attrs[key], dtype=np.int64))
            return None
        if op == "Shape":
            rank = ranks.get(node.input[0])
            if rank is None:
                return None
            start, end = attrs.get("start", 0), attrs.get("end", rank)
            axes = range(rank)[slice(start, end)]  # Shape-15 clamps start and end as Python does
            return [(node.input[0], a) for a in axes]
        inputs = [trace(x, depth + 1) if x else None for x in node.input]
        if op in ("Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten"):
            return inputs[0]  # the same values in the same order (a scalar becomes [v] and back)
        if op == "Concat":
            parts = [x for x in inputs if x is not None]
            if attrs.get("axis") not in (0, -1) or len(parts) != len(inputs):
                return None
            return [e for x in parts for e in x]
        if op == "Gather":
            data, index = inputs[0], inputs[1] if len(inputs) > 1 else None
            if data is None or index is None or attrs.get("axis", 0) not in (0, -1):
                return None
            if not all(isinstance(i, int) and -len(data) <= i < len(data) for i in index):
                return None
            return [data[int(i)] for i in index]
        if op == "Slice":
            return _sliced(inputs, attrs)
        return None

    return trace(name, 0)


def _sliced(inputs: list[list[ShapeEntry] | None], attrs: dict[str, Any]) -> list[ShapeEntry] | None:
    """A Slice of a traced 1-D tensor with constant bounds (inputs from opset 10, attributes
    before), step 1 only; else None."""
    data = inputs[0]
    if data is None:
        return None
    if len(inputs) > 1:
        bounds = [inputs[i] if i < len(inputs) else None for i in range(1, 5)]
        starts, ends, axes, steps = bounds
        if starts is None or ends is None:
            return None
    else:
        starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes"), None
    if starts is None or ends is None or len(starts) != 1 or len(ends) != 1:
        return None
    if axes not in (None, [0], [-1]) or steps not in (None, [1]):
        return None
    start, end = starts[0], ends[0]
    if not isinstance(start, int) or not isinstance(end, int):
        return None
    return data[slice(start, end)]  # ONNX clamps out-of-range bounds as Python does for step 1


def rebuild_shape_inputs(
    graph: onnx.GraphProto, plans: dict[int, list[ShapeEntry]], index: int, taken: set[str]
) -> None:
    """Give input `index` of each node `graph.node[i]` in `plans` a new 1-D int64 tensor made of
    its entries there: numbers as constants, `(tensor, axis)` as Slice(Shape(tensor)) at run time,
    joined by a Concat placed before the node. What computed the old tensor goes where nothing else
    reads it; the graph is sorted again, as a tensor read here may be computed after the node
    (loading's folding cut that dependency). `taken`: names_in_use(graph), added to."""
    if not plans:
        return
    from deployopt.model import _toposort, fresh_name

    old: list[str] = []
    nodes: list[onnx.NodeProto] = []
    for i, node in enumerate(graph.node):
        if i in plans:
            base = f"{node.name or node.output[0]}/{'sizes' if node.op_type == 'Resize' else 'shape'}"
            made, name = _shape_nodes(graph, plans[i], base, taken, fresh_name)
            nodes.extend(made)
            old.append(node.input[index])
            node.input[index] = name
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    _drop_unread(graph, old)
    _toposort(graph)


def _shape_nodes(
    graph: onnx.GraphProto,
    entries: list[ShapeEntry],
    base: str,
    taken: set[str],
    fresh_name: Callable[[str, set[str]], str],
) -> tuple[list[onnx.NodeProto], str]:
    """The nodes (constants added to `graph`'s initializers) that compute `entries`, and the name
    of their result."""
    runs: list[list[ShapeEntry]] = []
    for e in entries:  # consecutive numbers, or consecutive dims of one tensor, make one piece
        last = runs[-1][-1] if runs else None
        if last is not None and (
            (isinstance(e, int) and isinstance(last, int))
            or (isinstance(e, tuple) and isinstance(last, tuple) and e == (last[0], last[1] + 1))
        ):
            runs[-1].append(e)
        else:
            runs.append([e])

    def const(values: list[int], what: str) -> str:
        name = fresh_name(f"{base}_{what}", taken)
        graph.initializer.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    nodes: list[onnx.NodeProto] = []
    shapes: dict[str, str] = {}
    pieces: list[str] = []
    for run in runs:
        first = run[0]
        if isinstance(first, int):
            pieces.append(const([v for v in run if isinstance(v, int)], "const"))
            continue
        tensor, axis = first
        if tensor not in shapes:
            shapes[tensor] = fresh_name(f"{base}_shape", taken)
            nodes.append(onnx.helper.make_node("Shape", [tensor], [shapes[tensor]], name=shapes[tensor]))
        bounds = [const([axis], "start"), const([axis + len(run)], "end"), const([0], "axis")]
        piece = fresh_name(f"{base}_dims", taken)
        nodes.append(onnx.helper.make_node("Slice", [shapes[tensor], *bounds], [piece], name=piece))
        pieces.append(piece)
    if len(pieces) == 1:
        return nodes, pieces[0]
    name = fresh_name(base, taken)
    nodes.append(onnx.helper.make_node("Concat", pieces, [name], name=name, axis=0))
    return nodes, name


def _drop_unread(graph: onnx.GraphProto, names: list[str]) -> None:
    """Remove the constants and nodes that computed `names` and that nothing reads any more."""
    from deployopt.model import names_in_use

    reads: dict[str, int] = {}
    for node in graph.node:
        inner: set[str] = set()  # what an If or Loop body may read from here: all it names
        for a in node.attribute:
            for g in [*([a.g] if a.HasField("g") else []), *a.graphs]:
                inner |= names_in_use(g)
        for x in [*node.input, *inner]:
            reads[x] = reads.get(x, 0) + 1
    for o in graph.output:
        reads[o.name] = reads.get(o.name, 0) + 1
    inputs = {i.name for i in graph.input}
    todo = list(names)
    while todo:
        name = todo.pop()
        if not name or reads.get(name, 0) or name in inputs:
            continue
        for k, t in enumerate(graph.initializer):
            if t.name == name:
                del graph.initializer[k]
                break
        else:
            for k, node in enumerate(graph.node):
                if name in node.output and not any(reads.get(o, 0) for o in node.output):
                    if any(a.g.ByteSize() or a.graphs for a in node.attribute):
                        break  # an If or a Loop: not shape arithmetic, left as it is
                    ins = list(node.input)
                    del graph.node[k]
                    for x in ins:
                        reads[x] = reads.get(x, 0) - 1
                    todo.extend(ins)
                    break
