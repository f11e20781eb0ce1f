"""Apply a width plan: pad or trim channel groups, exactly, as one transaction.

Padding adds channels that are zero from their producer on (zero filters and bias) and stay out
of every result (zero input weights in every consumer, neutral BatchNorm/constant parameters).
Trimming drops the least important channels (dead first, then by `importance` when the caller
measured it on calibration inputs, else by smallest L1 of the producing filters; see
deployopt.importance) and slices every tensor that runs over them the same way.

The graph's structure never changes, only constant tensors (and a depthwise conv's `group`), so
edits go straight to the protobuf: node names, doc strings, metadata and opset stay as they were,
which a round trip through a graph IR would not guarantee. The result is validated with
onnx.checker and strict shape inference before it is returned.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import onnx
from onnx import numpy_helper

from deployopt.coupling import MAX_WIDTH, Analysis, analyze
from deployopt.coupling.registry import Constants
from deployopt.errors import ModelError, PlanError, first_line, no_such_file, shorten
from deployopt.fileio import read_json_input
from deployopt.importance import check_importance, constants, dead_channels_many, filter_l1, trim_order
from deployopt.model import LoadedModel, model_proto, save_model, type_uninferred_outputs
from deployopt.onnx_proto import check_skeleton, copy_fields, has_unknown_fields, serialized_size


@dataclass(frozen=True)
class GroupChange:
    """What a plan did to one group (for the CLI and for reports)."""

    id: str
    old: int
    new: int
    padded: int
    trimmed: int
    dead_trimmed: int  # of the trimmed channels, how many were dead (an exact trim)
    # a trimmed group's kept channels (plan.json's `keep`); not in the JSON reports, which count
    kept: Optional[tuple[int, ...]] = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "kept"}


def _no_conflicting_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook: a key given twice with different values (a group's width edited by
    adding a line) is ambiguous, and json.loads kept the last one without a word."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and out[key] != value:
            raise PlanError(f"{key!r} is given twice ({out[key]!r} and {value!r}); give it once")
        out[key] = value
    return out


@dataclass(frozen=True)
class Plan:
    """A plan file: widths, and for trimmed groups the channels each keeps (`keep`, what optimize
    records so that re-applying its plan needs no ranking and gives the model it wrote)."""

    widths: dict[str, int]
    keep: dict[str, list[int]] = field(default_factory=dict)
    #: per group, its width in the model the plan was written for (optimize's `original`): a plan
    #: keyed `Conv_<index>` (unnamed nodes) met another conv in the same model saved in another node
    #: order, and padded or trimmed it in silence; empty for a hand-written or older plan (unchecked)
    original: dict[str, int] = field(default_factory=dict)
    #: per group, FINGERPRINT_SIZE random projections of its producers' weights in that model
    #: (`group_fingerprints`): two unnamed convs of equal width swapped by another node order have
    #: the same widths, and a `keep` trimmed the other conv's channels; empty for a plan without it
    #: (unchecked)
    fingerprint: dict[str, list[float]] = field(default_factory=dict)


def load_plan(path: str | os.PathLike[str]) -> dict[str, int]:
    """Read `{"widths": {"<group id>": <width>, ...}}`; any other shape is a one-line PlanError."""
    return read_plan(path).widths


#: The most a plan file may hold: one keeping every channel of a 1000-group model is a few MB; a
#: larger file is no plan, and reading one whole (a 10 GB file given as --plan) filled memory first.
PLAN_MAX_BYTES = 64 << 20


def read_plan(path: str | os.PathLike[str]) -> Plan:
    """Read a plan file: `{"widths": {...}}`, optionally with `"keep": {"<group id>": [channel, ...]}`
    for trimmed groups, `"original": {"<group id>": <width>}` and `"fingerprint": {"<group id>":
    [<number>, ...]}` (plans written by hand or by an older optimize have none of them); any other shape is
    a one-line PlanError. They are checked against a model by `validate_keep`, `validate_original`
    and `validate_fingerprint`."""
    path = Path(path)
    if path.is_dir():
        raise PlanError(f"{path}: is a folder, expected a plan file (.json)")
    if not path.exists():
        raise no_such_file(path, PlanError)
    try:  # `--plan <(jq …)` is a pipe: read it, unless nothing writes to it
        raw = read_json_input(path, PlanError, "a plan .json file", PLAN_MAX_BYTES)
    except OSError as exc:  # unreadable: permissions, a vanished network file
        raise PlanError(f"{path}: cannot read the plan: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw.decode(), object_pairs_hook=_no_conflicting_keys)
    except PlanError as exc:
        raise PlanError(f"{path}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; a 5000-digit width; '[' × 100 000
        raise PlanError(f"{path}: not valid JSON ({shorten(str(exc) or type(exc).__name__, 200)})") from None
    if not isinstance(data, dict) or not isinstance(data.get("widths"), dict):
        raise PlanError(f'{path}: expected {{"widths": {{"<group id>": <width>, ...}}}}')
    unknown = sorted(set(data) - {"widths", "keep", "original", "fingerprint"})
    if unknown:  # `"kept"` for "keep" was dropped in silence, and the trim re-ranked by L1
        raise PlanError(
            f'{path}: unknown key {", ".join(map(repr, unknown))} (a plan has "widths" and optionally '
            '"original", "fingerprint" and "keep")'
        )
    widths: dict[str, int] = {}
    for gid, w in data["widths"].items():
        if isinstance(w, bool) or not isinstance(w, int):
            raise PlanError(f"{path}: width of group {gid!r} must be an integer, got {w!r}")
        if w > MAX_WIDTH:  # a 310-digit width overflowed the size check's float: a traceback
            raise PlanError(
                f"{path}: width of group {gid!r} is {len(str(w))} digits long; at most {MAX_WIDTH}"
            )
        widths[gid] = w
    keep_data = data.get("keep", {})
    if not isinstance(keep_data, dict):
        raise PlanError(f'{path}: "keep" must map group ids to lists of channel indices, got {keep_data!r}')
    keep: dict[str, list[int]] = {}
    for gid, channels in keep_data.items():
        if not isinstance(channels, list) or any(
            isinstance(c, bool) or not isinstance(c, int) for c in channels
        ):
            shown = repr(channels) if len(repr(channels)) <= 60 else f"{repr(channels)[:57]}..."
            raise PlanError(f"{path}: channels kept by group {gid!r} must be a list of integers, got {shown}")
        keep[gid] = list(channels)
    original_data = data.get("original", {})
    if not isinstance(original_data, dict):
        raise PlanError(
            f'{path}: "original" must map group ids to widths, got {shorten(repr(original_data), 60)}'
        )
    original: dict[str, int] = {}
    for gid, w in original_data.items():
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= MAX_WIDTH:
            raise PlanError(
                f'{path}: "original" width of group {gid!r} must be an integer from 1 to {MAX_WIDTH}, '
                f"got {shorten(repr(w), 60)}"
            )
        original[gid] = w
    prints = data.get("fingerprint", {})
    if not isinstance(prints, dict) or not all(
        isinstance(v, list)
        and len(v) == FINGERPRINT_SIZE
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)
        for v in prints.values()
    ):
        raise PlanError(
            f'{path}: "fingerprint" must map group ids to lists of {FINGERPRINT_SIZE} numbers (as '
            f"optimize writes them), got {shorten(repr(prints), 60)}"
        )
    return Plan(widths, keep, original, {g: [float(x) for x in v] for g, v in prints.items()})


def validate_plan(analysis: Analysis, widths: dict[str, int]) -> None:
    """A PlanError for an unknown or frozen group or a bad width: `Analysis.check_plan`, which
    `Analysis.conv_shapes` runs too, so a plan is priced only where it can be applied."""
    analysis.check_plan(widths)


def validate_original(analysis: Analysis, original: Mapping[str, int]) -> None:
    """Each group's width recorded by the plan (`original`: in the model it was written for) checked
    against the model being edited. Group ids of unnamed nodes are `<op type>_<index>`, so the same
    model saved in another node order (onnxsim, a re-export) gives them to other convs: a lossless
    plan for `Conv_0` 13 → 16 and `Conv_1` 22 → 24 trimmed the 22-wide conv to 16, exit 0."""
    if not isinstance(original, Mapping):
        raise PlanError(
            f"a plan's original widths map group ids to widths ({{'<group id>': 64}}), "
            f"not a {type(original).__name__}"
        )
    for name, recorded in original.items():
        group = analysis.group(name)  # PlanError when unknown
        if isinstance(recorded, bool) or not isinstance(recorded, (int, np.integer)):
            raise PlanError(f"original width of group {name!r} must be an integer, got {recorded!r}")
        if int(recorded) != group.width:
            called = repr(name) if name == group.id else f"{name!r} (group {group.id!r})"
            raise PlanError(
                f"group {called} is {group.width} channel(s) wide in this model, but the plan was written "
                f"for a model where it is {int(recorded)} (another model, or this one saved with its nodes "
                "in another order: unnamed nodes are named by position); apply it to the model it was "
                'written for, or delete its "original" to apply the widths anyway'
            )


#: a group's fingerprint: this many random projections of its producers' constant inputs
FINGERPRINT_SIZE = 8
#: values of each constant input projected (sampled, with a fixed seed, where it holds more)
FINGERPRINT_SAMPLES = 4096
#: two fingerprints are of the same weights where every projection is within this of the other's.
#: A projection is ~N(0, 1) for any weights, and moves by about ‖error‖ / ‖weights‖ under rounding:
#: 0.03 % for fp16, about 1 % for int8 Q/DQ, 10 % for int4; two unrelated weight tensors differ
#: by ~N(0, √2) in each, so all 8 fall within 0.3 of each other by chance about once in 10⁶
FINGERPRINT_TOLERANCE = 0.3


def group_fingerprints(
    model: onnx.ModelProto, analysis: Analysis, groups: Collection[str]
) -> dict[str, list[float]]:
    """Per group of `groups` (ids, or producer names as a plan may give), FINGERPRINT_SIZE random
    projections of what makes its channels in `model`: the values of each producer's constant
    inputs (weights, bias; as float64, sampled with a seed of the producer's op type, output
    channels and input shapes), summed over the producers and divided by the sampled values' norm,
    so that neither node order nor names (`Conv_<index>` for unnamed nodes) change it. Rounding
    barely moves it, so the same model in fp16 or as its Q/DQ twin keeps its fingerprint (a hash
    of the bytes refused them: review), while two unnamed convs of equal width saved in the other
    order, or another checkpoint, differ (`same_fingerprint`). Only the groups' producers are read."""
    st = analysis.state
    assert st is not None, "an Analysis from deployopt.coupling.analyze is needed"
    consts = st.constants_of(model)
    ids = {g: analysis.group(g).id for g in groups}
    sums = {gid: np.zeros(FINGERPRINT_SIZE) for gid in ids.values()}
    norms = dict.fromkeys(ids.values(), 0.0)
    for a, atom in enumerate(st.atoms):
        gid = None if atom.retired or atom.producer is None else analysis.group_of_atom(a)
        if gid not in sums:
            continue
        node = st.nodes[atom.producer]
        values = [v for v in (consts.last(name) if name else None for name in node.input) if v is not None]
        key = f"{node.op_type}:{atom.offset}:{atom.width}:" + ",".join(str(tuple(v.shape)) for v in values)
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little"))
        for value in values:
            flat = np.asarray(value).reshape(-1)
            if not flat.size or flat.dtype.kind not in "fiu":
                continue
            if flat.size > FINGERPRINT_SAMPLES:
                flat = flat[rng.integers(0, flat.size, FINGERPRINT_SAMPLES)]
            flat = flat.astype(np.float64)
            signs = rng.integers(0, 2, (FINGERPRINT_SIZE, flat.size)) * 2.0 - 1.0
            sums[gid] += signs @ flat
            norms[gid] += float(flat @ flat)
    found = {
        gid: [round(float(x), 4) for x in (v / math.sqrt(norms[gid]) if norms[gid] > 0 else v)]
        for gid, v in sums.items()
    }
    return {given: found[gid] for given, gid in ids.items()}


def same_fingerprint(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether two fingerprints (`group_fingerprints`) are of the same weights, up to rounding."""
    return len(a) == len(b) and all(abs(x - y) <= FINGERPRINT_TOLERANCE for x, y in zip(a, b))


def validate_fingerprint(
    model: onnx.ModelProto,
    analysis: Analysis,
    fingerprint: Mapping[str, Sequence[float]],
    kept: Collection[str] = (),
) -> None:
    """The fingerprint the plan recorded (`group_fingerprints` of the model it was written for) of
    each group it lists kept channels for (`kept`: ids or producer names), checked against `model`:
    one differs where the model is another one (other weights), or this one saved with its nodes
    in another order so that a group id names another group of the same width (`validate_original`
    catches another width). Only those groups: their channels were chosen on the recorded weights
    (on other ones, a `keep` trims the wrong channels), while a pad, or a trim the plan leaves to
    `apply` to rank, is as right for a fine-tuned checkpoint of the model as for the model itself.
    Run after `validate_original`, whose message is the clearer one where a width differs too."""
    if not isinstance(fingerprint, Mapping):
        raise PlanError(
            f"a plan's fingerprints map group ids to lists of numbers, not a {type(fingerprint).__name__}"
        )
    for name in fingerprint:
        analysis.group(name)  # PlanError when unknown, before any weight is read
    kept_ids = {analysis.group(g).id for g in kept}
    checked = {name: fp for name, fp in fingerprint.items() if analysis.group(name).id in kept_ids}
    if not checked:
        return
    found = group_fingerprints(model, analysis, list(checked))
    for name, recorded in checked.items():
        if not same_fingerprint(found[name], recorded):
            gap = max((abs(x - y) for x, y in zip(found[name], recorded)), default=math.inf)
            group = analysis.group(name)
            called = repr(name) if name == group.id else f"{name!r} (group {group.id!r})"
            raise PlanError(
                f"group {called}: the plan keeps channels chosen on other weights than this model's "
                f"(their fingerprints differ by {gap:.2f}, more than the {FINGERPRINT_TOLERANCE:g} "
                "rounding or quantization moves one): another model or checkpoint, or "
                "this one saved with its nodes in another order (unnamed nodes are named by position); "
                'apply it to the model it was written for, delete its "keep" for that group to rank '
                'the channels on these weights, or delete its "fingerprint" to apply it anyway'
            )


def _channel_list(gid: str, channels: Any) -> list[int]:
    """A group's kept channels as integers: "a" was a ValueError from int(), and 0.5 and 1.5 were
    kept as channels 0 and 1 without a word (a float index is no channel)."""
    if isinstance(channels, (str, bytes, Mapping)) or not isinstance(channels, (Sequence, np.ndarray, set)):
        raise PlanError(f"channels kept by group {gid!r} must be a list of channel indices, got {channels!r}")
    out = list(channels)
    bad = next((c for c in out if isinstance(c, bool) or not isinstance(c, (int, np.integer))), None)
    if bad is not None:
        raise PlanError(f"channels kept by group {gid!r} must be integers (channel indices), got {bad!r}")
    return [int(c) for c in out]


def validate_keep(
    analysis: Analysis, widths: dict[str, int], keep: Mapping[str, Sequence[int]]
) -> dict[str, list[int]]:
    """A plan's kept channels checked against the model, keyed by group id: only for a group the
    plan trims, as many as its width, each a channel of the group (0 … width − 1), none twice.
    Sorted: a trim keeps its channels in their order."""
    by_id = analysis.plan_by_id(widths)
    out: dict[str, list[int]] = {}
    for name, channels in keep.items():
        group = analysis.group(name)  # PlanError when unknown
        gid, old = group.id, group.width
        if gid in out:
            raise PlanError(f"channels kept by group {gid!r} are listed twice (once as {name!r})")
        if gid not in by_id:
            raise PlanError(
                f'group {gid!r} lists channels to keep but the plan gives it no width; remove it from "keep"'
            )
        new = int(by_id[gid])
        if new >= old:
            raise PlanError(
                f"group {gid!r} lists channels to keep but is not trimmed (width {new}, the model has "
                f'{old}); remove it from "keep"'
            )
        channels = _channel_list(gid, channels)
        if len(channels) != new:
            raise PlanError(
                f"group {gid!r} lists {len(channels)} channel(s) to keep for width {new}; make them agree, "
                'or remove the group from "keep" to rank its channels again'
            )
        bad = next((int(c) for c in channels if not 0 <= int(c) < old), None)
        if bad is not None:
            raise PlanError(f"group {gid!r} keeps channel {bad}; its channels are 0 … {old - 1}")
        if len(set(channels)) != len(channels):
            twice = next(int(c) for c in channels if list(channels).count(c) > 1)
            raise PlanError(f"group {gid!r} lists channel {twice} to keep more than once")
        out[gid] = sorted(int(c) for c in channels)
    return out


#: ONNX models are one protobuf message, which cannot exceed 2 GiB when serialized
PROTOBUF_LIMIT = (1 << 31) - 1


def _check_size(model: onnx.ModelProto, analysis: Analysis, changed: dict[str, int]) -> None:
    """Refuse a plan whose conv weights alone would take the model past protobuf's 2 GiB, before
    any array is built (a width of a million used to take 11 GB of memory, then fail to serialize).
    A model written with external weights is held whole too: onnx's checker and shape inference,
    which every edited model goes through, take one message, weights included."""
    if not changed:
        return
    inits = {t.name: t for t in model.graph.initializer}
    assert analysis.state is not None
    # by the analysis' names (distinct, unnamed nodes included), not the file's, which may repeat
    nodes = dict(zip(analysis.state.node_names, model.graph.node))
    after = analysis.conv_shapes_unchecked(changed)  # validate_plan ran
    growth = 0.0
    for conv in analysis.convs:
        old, new = conv.shape, after[conv.name]
        elems_old = old.k * (old.c // max(old.groups, 1)) * old.r * old.s
        elems_new = new.k * (new.c // max(new.groups, 1)) * new.r * new.s
        node = nodes.get(conv.name)
        weight = inits.get(node.input[1]) if node is not None and len(node.input) > 1 else None
        itemsize = 4
        if weight is not None and weight.data_type != onnx.TensorProto.UNDEFINED:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(weight.data_type).itemsize
        growth += (elems_new - elems_old) * itemsize
    growth += _other_constants_growth(analysis, inits, nodes, changed)
    now = _model_bytes(model, analysis)
    size = now + growth
    if size <= PROTOBUF_LIMIT:
        return
    if now > PROTOBUF_LIMIT:  # read from external data: analyze, bench and verify take it, edits not
        raise PlanError(
            f"the model is {_gib(now)} with its weights: an edited model must fit the 2 GiB one protobuf "
            "message can hold (the checks every edited model goes through take it whole, external "
            "weights included), so this model cannot be padded or trimmed here"
        )
    raise PlanError(
        f"the edited model would be {_gib(size)} counting its weights, "
        "over the 2 GiB one protobuf message can hold (an ONNX file's limit, and that of the checks "
        "every edited model goes through, external weights included); use smaller widths"
    )


def _gib(size: float) -> str:
    """`size` bytes in GiB: one decimal, two where one reads as the limit itself ("about 2.0 GiB ...,
    over the 2 GiB" said nothing), and the bytes too where two still do."""
    gib = size / (1 << 30)
    if f"{gib:.1f}" != "2.0":
        return f"about {gib:.1f} GiB"
    if f"{gib:.2f}" != "2.00":
        return f"about {gib:.2f} GiB"
    return f"about {gib:.2f} GiB ({int(size):,} bytes)"


def _other_constants_growth(
    analysis: Analysis,
    inits: dict[str, onnx.TensorProto],
    nodes: dict[str, onnx.NodeProto],
    changed: dict[str, int],
) -> float:
    """Bytes the plan adds to the constants other than conv weights that it resizes: a Gemm or
    MatMul reading a flattened map grows by width × H·W per output (a width of 220 000 before a
    3072×10 Gemm took 7.2 GB and 16 s, then failed to serialize), per-channel scales by width."""
    assert analysis.state is not None
    conv_weights = _conv_weight_sources(analysis, nodes)
    dims: dict[str, list[int]] = {}
    for b in analysis.state.bindings:
        t = inits.get(b.init)
        if t is None or b.init in conv_weights or b.axis >= len(t.dims):
            continue
        groups = analysis.layout_groups(b.layout)
        new = sum(changed.get(gid, w) for gid, w in groups)
        if new != sum(w for _, w in groups):
            dims.setdefault(b.init, list(t.dims))[b.axis] = new * b.spread
    growth = 0.0
    for name, d in dims.items():
        t = inits[name]
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize if t.data_type else 4
        growth += (float(np.prod(d, dtype=np.float64)) - float(np.prod(t.dims, dtype=np.float64))) * itemsize
    return growth


#: ops between a weight initializer and the conv that reads it (a QDQ model's DequantizeLinear)
_WEIGHT_PATH_OPS = frozenset(
    {"DequantizeLinear", "QuantizeLinear", "Cast", "Identity", "Transpose", "Reshape"}
)


def _conv_weight_sources(analysis: Analysis, nodes: dict[str, onnx.NodeProto]) -> set[str]:
    """The tensors a conv's weight comes from, back through Q/DQ, Cast and the like (the conv loop
    counts those: a QDQ conv's int8 weight, read through its DequantizeLinear, was counted twice)."""
    producer = {o: n for n in nodes.values() for o in n.output}
    found: set[str] = set()
    for conv in analysis.convs:
        node = nodes.get(conv.name)
        name = node.input[1] if node is not None and len(node.input) > 1 else None
        while name and name not in found:
            found.add(name)
            up = producer.get(name)
            name = up.input[0] if up is not None and up.op_type in _WEIGHT_PATH_OPS and up.input else None
    return found


def _model_bytes(model: onnx.ModelProto, analysis: Analysis) -> int:
    """`model.ByteSize()`, kept on the analysis' state when it is of this very model: protobuf
    serializes the whole model to count it (0.7 s for a 335 MB one), and optimize applies one plan
    after another to the same unchanged model. Counted by `serialized_size`, one weight at a time:
    ByteSize held the whole model serialized (1 GB over VGG16's 530 MB, at apply's peak). Weights
    changed in place since keep their types and shapes (`CouplingState.check_graph` saw to it), so
    the count holds but for their encoding."""
    st = analysis.state
    if st is None or st.model is not model:
        return serialized_size(model)
    cached = getattr(st, "_model_bytes", None)
    if cached is None:
        cached = serialized_size(model)
        st._model_bytes = cached  # type: ignore[attr-defined]
    return int(cached)


def dead_channels(model: onnx.ModelProto, analysis: Analysis, gid: str) -> list[int]:
    """Channels of a group whose output is identically zero where it is consumed."""
    analysis.group(gid)
    return dead_channels_many(model, analysis, [gid])[gid]


def channel_order(
    model: onnx.ModelProto, analysis: Analysis, gid: str, importance: Optional[np.ndarray] = None
) -> list[int]:
    """Least important first: dead channels, then by `importance` (one value per channel, from
    deployopt.importance.activation_importance) when given, else by L1 of the producing filters."""
    group = analysis.group(gid)
    if importance is not None:
        importance = check_importance(gid, importance, group.width)
    consts = constants(analysis, model)  # the weights ranked are this model's
    dead = dead_channels_many(model, analysis, [gid], consts)[gid]
    return trim_order(dead, filter_l1(analysis, gid, consts), importance)


def _take(arr: np.ndarray, axis: int, idx: np.ndarray, pad: float) -> np.ndarray:
    new = idx < 0
    out = np.take(arr, np.where(new, 0, idx), axis=axis)
    if new.any():
        sl: list[Any] = [slice(None)] * arr.ndim
        sl[axis] = new
        out[tuple(sl)] = pad
    return out


def _index_maps(
    consts: Constants,
    analysis: Analysis,
    changed: dict[str, int],
    importance: Optional[dict[str, np.ndarray]] = None,
    keep: Optional[dict[str, list[int]]] = None,
) -> tuple[dict[str, np.ndarray], list[GroupChange]]:
    """Per changed group: for each new channel, the old channel it copies (-1: a padded one). A
    trimmed group in `keep` (validated, by id) keeps those channels; the others are ranked by the
    weights of the model `consts` reads."""
    trimmed = [gid for gid, w in changed.items() if w < analysis.group(gid).width]
    dead = dead_channels_many(consts.model, analysis, trimmed, consts) if trimmed else {}
    maps: dict[str, np.ndarray] = {}
    report = []
    for gid, new in changed.items():
        old = analysis.group(gid).width
        if new > old:
            maps[gid] = np.concatenate([np.arange(old), -np.ones(new - old, dtype=np.int64)])
            report.append(GroupChange(gid, old, new, new - old, 0, 0))
        else:
            if keep and gid in keep:
                drop = sorted(set(range(old)) - set(keep[gid]))
            else:
                score = (importance or {}).get(gid)
                if score is not None:
                    score = check_importance(gid, score, old)
                drop = trim_order(dead[gid], filter_l1(analysis, gid, consts), score)[: old - new]
            maps[gid] = np.array(sorted(set(range(old)) - set(drop)), dtype=np.int64)
            kept_ = tuple(int(c) for c in maps[gid])
            report.append(GroupChange(gid, old, new, 0, old - new, len(set(drop) & set(dead[gid])), kept_))
    return maps, report


def apply_plan_report(
    model: onnx.ModelProto | LoadedModel,
    widths: dict[str, int],
    analysis: Optional[Analysis] = None,
    importance: Optional[dict[str, np.ndarray]] = None,
    keep: Optional[Mapping[str, Sequence[int]]] = None,
    original: Optional[Mapping[str, int]] = None,
    fingerprint: Optional[Mapping[str, Sequence[float]]] = None,
) -> tuple[onnx.ModelProto, list[GroupChange]]:
    """`apply_plan`, also saying per group what was padded or trimmed."""
    model = model_proto(model)
    if analysis is None:
        analysis = analyze(model)
    st = analysis.state
    assert st is not None, "an Analysis from deployopt.coupling.analyze is needed"
    # every weight edited or ranked is read from `model` (by name), whichever model of this graph
    # was analysed: the analysis holds the structure only (another graph: a PlanError)
    consts = st.constants_of(model)
    validate_plan(analysis, widths)
    validate_original(analysis, original or {})  # before `keep`, whose indices a swap makes wrong
    validate_fingerprint(model, analysis, fingerprint or {}, keep or {})  # equal widths swapped
    kept = validate_keep(analysis, widths, keep or {})
    widths = analysis.plan_by_id(widths)  # a plan may name a group by any of its producers
    importance = {analysis.group(g).id: v for g, v in (importance or {}).items()}  # … and so may this
    changed = {g: int(w) for g, w in widths.items() if int(w) != analysis.group(g).width}
    _check_size(model, analysis, changed)
    if not changed:
        out = onnx.ModelProto()
        out.CopyFrom(model)
        _name_nodes(out, st.node_names)
        return out, []
    maps, report = _index_maps(consts, analysis, changed, importance, kept)

    def full_index(layout: Any) -> Optional[np.ndarray]:
        parts, off, touched = [], 0, False
        for gid, w in analysis.layout_groups(layout):
            idx = maps.get(gid)
            touched |= idx is not None
            idx = np.arange(w) if idx is None else idx
            parts.append(np.where(idx < 0, -1, idx + off))
            off += w
        return np.concatenate(parts) if touched else None

    def new_width(layout: Any) -> int:
        return sum(changed.get(gid, w) for gid, w in analysis.layout_groups(layout))

    bindings: dict[str, list[Any]] = {}
    for b in st.bindings:
        bindings.setdefault(b.init, []).append(b)
    shape_edits: dict[str, list[Any]] = {}
    for e in st.shape_edits:
        shape_edits.setdefault(e.init, []).append(e)

    def new_value(name: str) -> Optional[np.ndarray]:
        """Constant `name` as the plan makes it (None: as it is), built when it is written: built
        all before any was written, they were another copy of every weight the plan edits."""
        arr = None
        for b in bindings.get(name, ()):
            idx = full_index(b.layout)
            if idx is None:
                continue
            arr = consts.last(name) if arr is None else arr
            assert arr is not None
            if b.spread > 1:  # channel c is entries c·spread … (c+1)·spread − 1 (a flattened map)
                entries = idx[:, None] * b.spread + np.arange(b.spread)
                idx = np.where(idx[:, None] < 0, -1, entries).ravel()
            expected = sum(w for _, w in b.layout) * b.spread
            if arr.shape[b.axis] != expected:
                raise ModelError(
                    f"constant {name!r}: axis {b.axis} has {arr.shape[b.axis]} entries, expected {expected}"
                )
            arr = _take(arr, b.axis, idx, b.pad)
        for e in shape_edits.get(name, ()):
            if full_index(e.layout) is None:
                continue
            arr = np.array(consts.last(name) if arr is None else arr)
            arr.reshape(-1)[e.index] = new_width(e.layout) * e.scale
        return arr

    edited = bindings.keys() | shape_edits.keys()
    shapes: dict[str, tuple[int, ...]] = {}  # the new shape of each constant rewritten
    out = _copy_rewriting(model, new_value, edited, shapes)
    _name_nodes(out, st.node_names)
    graph = out.graph
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] in edited:
            arr = new_value(node.output[0])
            if arr is None:
                continue
            shapes[node.output[0]] = arr.shape
            for a in node.attribute:
                if a.name == "value":
                    dtype = onnx.helper.tensor_dtype_to_np_dtype(a.t.data_type)
                    a.t.CopyFrom(numpy_helper.from_array(arr.astype(dtype), a.t.name))
    for inp in graph.input:  # IR < 4 lists initializers as inputs too, with their shapes
        if inp.name in shapes and inp.type.tensor_type.HasField("shape"):
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[inp.name]:
                dims.add().dim_value = int(d)
    for e in st.attr_edits:
        if full_index(e.layout) is None:
            continue
        node = graph.node[e.node]
        for a in node.attribute:
            if a.name == e.attr and e.index is None:
                a.i = new_width(e.layout) * e.scale
            elif a.name == e.attr:
                a.ints[e.index] = new_width(e.layout) * e.scale
    del graph.value_info[:]
    try:
        skel = _skeleton(out)
        # as loading does: without it, what follows a GroupNormalization-21 stayed shapeless and
        # the strict pass saw no mismatch there (an edit onnxruntime refuses was written)
        type_uninferred_outputs(skel)
        inferred = onnx.shape_inference.infer_shapes(skel, check_type=True, strict_mode=True, data_prop=True)
        del skel
        _refuse_lost_shapes(_shaped_before(model, analysis), inferred)
        graph.value_info.extend(inferred.graph.value_info)
        onnx.checker.check_model(_check_skeleton(out))
    except Exception as exc:  # a bug or an op a rule mis-declares: never hand back a broken model
        first = first_line(exc, repr(exc))
        raise ModelError(f"the edited model does not validate (please report this model): {first}") from None
    return out, report


def _shaped(inferred: onnx.ModelProto) -> set[str]:
    """The values an inference gave a shape (its value_info and inputs), and the constants."""
    g = inferred.graph
    names = {v.name for v in (*g.value_info, *g.input) if v.type.tensor_type.HasField("shape")}
    return names | {t.name for t in g.initializer}


def _shaped_before(model: onnx.ModelProto, analysis: Analysis) -> set[str]:
    """`_shaped` of the input model inferred as its edit is (weightless, GroupNorm-21 typed), kept on
    the analysis' state for this very model: compared with the value_info the model carries, a
    raw model's from another tool (graph outputs listed, a com.microsoft op's output shaped) made
    every plan lose shapes that onnx never gives."""
    st = analysis.state
    cached = getattr(st, "_shaped_before", None) if st is not None and st.model is model else None
    if cached is not None:
        return set(cached)
    skel = _skeleton(model)
    del skel.graph.value_info[:]
    type_uninferred_outputs(skel)
    names = _shaped(onnx.shape_inference.infer_shapes(skel, data_prop=True))
    if st is not None and st.model is model:
        st._shaped_before = frozenset(names)  # type: ignore[attr-defined]
    return names


def _refuse_lost_shapes(before: set[str], inferred: onnx.ModelProto) -> None:
    """Raise if a value the input model's inference shaped (`_shaped_before`) has no shape in the
    edited one's.

    The strict pass checks the shapes it infers, never those it cannot: an op it leaves untyped
    leaves everything after it unchecked, and a graph output keeps its declared shape whatever was
    inferred (so an output counts as lost when an input of the node making it is). A shape lost is
    an edit the check could not see through: refused, not written."""
    g = inferred.graph
    now = _shaped(inferred)
    outputs = {o.name for o in g.output}
    lost = sorted(n for n in before - now if n not in outputs)
    producer = {o: n for n in g.node for o in n.output}
    for out in g.output:
        node = producer.get(out.name)
        if node is not None and any(i in before and i not in now for i in node.input if i):
            lost.append(out.name)
    if lost:
        raise ModelError(f"inference no longer gives {lost[0]!r} a shape ({len(lost)} value(s) lost it)")


def _name_nodes(model: onnx.ModelProto, names: Sequence[str]) -> None:
    """The names the analysis and plan use: unchanged for a loaded model (load_model gives these);
    a raw one's repeats and unnamed nodes get them."""
    for node, name in zip(model.graph.node, names):
        node.name = name


def _copy_rewriting(
    model: onnx.ModelProto,
    new_value: Callable[[str], Optional[np.ndarray]],
    edited: Collection[str],
    shapes: dict[str, tuple[int, ...]],
) -> onnx.ModelProto:
    """A copy of `model` whose initializers named in `edited` hold `new_value(name)` (each in its
    type; None: unchanged), the new shapes put in `shapes`.

    Built initializer by initializer, each new value made, written and dropped in turn: copied
    whole and then rewritten (CopyFrom), the copy kept every replaced weight's old bytes until it
    was freed (upb frees a message's memory all at once), a third copy of the weights beside the
    input and the new values. A model or graph with fields its schema does not know (which
    `copy_fields` would drop) is copied whole and rewritten in place, as before."""
    out = onnx.ModelProto()
    whole = has_unknown_fields(model, model.graph)
    if whole:
        out.CopyFrom(model)
    else:
        copy_fields(model, out, "graph")
        copy_fields(model.graph, out.graph, "initializer")
    for i, t in enumerate(model.graph.initializer):
        arr = new_value(t.name) if t.name in edited else None
        if arr is None:
            if not whole:
                out.graph.initializer.add().CopyFrom(t)
            continue
        shapes[t.name] = arr.shape
        arr = arr.astype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type), copy=False)
        dst = out.graph.initializer[i] if whole else out.graph.initializer.add()
        elem = onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)
        if elem not in _PLAIN_FLOATS or arr.dtype.byteorder == ">" or sys.byteorder != "little":
            dst.CopyFrom(numpy_helper.from_array(arr, t.name))
            continue
        # numpy_helper.from_array(arr, t.name) spelled out for a float weight, the array dropped
        # before its bytes go in: from_array then CopyFrom held the array, its bytes, their tensor
        # and the copy (four of a 440 MB weight: apply's peak)
        raw = arr.tobytes()
        dst.Clear()
        dst.dims.extend(arr.shape)
        if t.name:
            dst.name = t.name
        del arr
        dst.raw_data = raw
        dst.data_type = elem
    return out


#: the element types `_copy_rewriting` writes as numpy_helper.from_array does, without it (others:
#: strings, packed 4-bit and 2-bit types, go through it)
_PLAIN_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE})


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with large float weights reduced to their shapes: shape inference needs no more.

    Handing 45 MB of ResNet18 weights to the C++ shape inference (and parsing them back) cost about
    0.1 s per `apply`; small and integer tensors keep their values, data propagation reads them.
    """
    graph = model.graph
    skel = onnx.ModelProto(ir_version=model.ir_version)
    skel.opset_import.extend(model.opset_import)
    skel.functions.extend(model.functions)
    g = skel.graph
    g.name = graph.name
    g.node.extend(graph.node)
    g.input.extend(graph.input)
    g.output.extend(graph.output)
    for t in graph.initializer:
        if t.data_type in _FLOAT_TYPES and _numel(t) > 64:
            stub = g.initializer.add()
            stub.name, stub.data_type = t.name, t.data_type
            stub.dims.extend(t.dims)
        else:
            g.initializer.add().CopyFrom(t)
    return skel


#: what onnx.checker is given for the edited model (tests read it by this name)
_check_skeleton = check_skeleton


_FLOAT_TYPES = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.DOUBLE,
    onnx.TensorProto.BFLOAT16,
}


def _numel(t: onnx.TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


def apply_plan(
    model: onnx.ModelProto | LoadedModel,
    widths: dict[str, int],
    analysis: Optional[Analysis] = None,
    importance: Optional[dict[str, np.ndarray]] = None,
    keep: Optional[Mapping[str, Sequence[int]]] = None,
    original: Optional[Mapping[str, int]] = None,
    fingerprint: Optional[Mapping[str, Sequence[float]]] = None,
) -> onnx.ModelProto:
    """A new model with each planned group padded or trimmed to its width; the input is untouched.

    `analysis` (by default `analyze(model)`) may be of another model of the same graph, another
    checkpoint of the architecture or `model` before its weights changed: every weight edited or
    ranked is read from `model`. A model of another graph is a PlanError.

    `keep` (group id → the channels a trimmed group keeps, as `kept_channels` gives them) fixes a
    trim's channels outright; other trimmed groups rank their live channels by `importance` (group
    id → one value per channel, e.g. deployopt.importance.activation_importance on calibration
    inputs) where given, else by filter L1.

    `original` (group id → its width in the model the plan was written for, plan.json's `original`)
    makes a group of another width a PlanError: the model is not the one the plan was written for.
    `fingerprint` (plan.json's: group id → `group_fingerprints` of that model) does so for a group
    whose producers' weights differ, as where two unnamed convs of equal width are swapped.

    `model` may be the LoadedModel `load_model` returned (its `.model` is edited). Write the result
    with `save_edited`, which gives back the dynamic dims loading fixed, as `deployopt apply` does.
    """
    return apply_plan_report(model, widths, analysis, importance, keep, original, fingerprint)[0]


def save_edited(model: onnx.ModelProto, path: str | os.PathLike[str], loaded: LoadedModel) -> list[str]:
    """Write `model`, edited from `loaded`, as `deployopt apply` and `optimize` write theirs: with the
    dynamic batch, height and width of the input file given back where onnxruntime shows they work
    (loading fixed them, and `save_model` alone wrote a batch-1 model from a dynamic-batch export),
    and the weights in `<path>.data` when the input kept them apart. Returns the notices: which
    dims were restored, or why one stays fixed."""
    from deployopt.dynamic_dims import restore_dynamic_dims

    if not isinstance(loaded, LoadedModel):
        raise ModelError(
            f"save_edited needs the LoadedModel that load_model returned (its file's dynamic dims), "
            f"not a {type(loaded).__name__}"
        )
    written = restore_dynamic_dims(model_proto(model), loaded)
    save_model(written.model, path, external_data=loaded.external_data)
    return written.notices


def kept_channels(
    model: onnx.ModelProto,
    widths: dict[str, int],
    analysis: Analysis,
    importance: Optional[dict[str, np.ndarray]] = None,
) -> dict[str, list[int]]:
    """Per group the plan trims (by id), the channels `apply_plan` keeps with this `importance`:
    what plan.json's `keep` holds, so applying the plan again needs no ranking. (`apply_plan_report`
    gives the same in its GroupChange.kept, without ranking twice.)"""
    validate_plan(analysis, widths)
    by_id = {g: int(w) for g, w in analysis.plan_by_id(widths).items()}
    trimmed = {g: w for g, w in by_id.items() if w < analysis.group(g).width}
    if not trimmed:
        return {}
    importance = {analysis.group(g).id: v for g, v in (importance or {}).items()}
    maps, _ = _index_maps(constants(analysis, model), analysis, trimmed, importance)
    return {g: [int(c) for c in maps[g]] for g in sorted(trimmed)}
