"""Which channels a trim should drop first: dead ones, then the least important of the rest.

"Dead" is strict: a channel whose value is zero wherever the group's channels are read by a
reducing op (Conv input, Gemm rows). A zero filter alone is not enough (a BatchNorm shift after
it makes a constant channel, which the next conv still sees). Candidates are channels whose every
producing filter and bias are exactly zero (a zero Pad of the channel axis counts as a producer
with zero filters); for them the channel no longer depends on the input, so one onnxruntime run
with extra outputs decides exactly which of them are zero where it matters.
A free group that nothing reads (what a Slice of the channel axis leaves out) is dead as a whole.

The rest are ranked by `activation_importance` when calibration inputs are given: per channel, mean
|value| where a Conv/Gemm/MatMul reads it × the L2 norm of the weights reading it, summed over the
readers, i.e. how much the channel adds to the next layer's outputs. Without inputs, by the L1 of
the producing filters (`filter_l1`). On MobileNetV2 with its ImageNet weights, ranked on other
images than those scored, the three trim-10 % plans classify 16, 10 and 15 of 20 images correctly
where L1's classify 10, 3 and 4; data-free products with the readers' weights did not beat L1 on every plan
(benchmarks/trim_real_weights.py, docs/optimize.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np
import onnx

from deployopt.errors import DataError, ModelError, PlanError, first_line, shorten

if TYPE_CHECKING:
    from deployopt.coupling import Analysis
    from deployopt.coupling.registry import Constants

#: where weights are read: a model of the analysed graph, its `Constants` (read once for several
#: calls), or None for the analysed model as it is now
Weights = Union[onnx.ModelProto, "Constants", None]


def constants(analysis: Analysis, model: Weights = None) -> Constants:
    """The weights of `model` (see `Weights`), by name: the analysis holds the graph's structure,
    never the weights a ranking reads, so one analysis ranks any checkpoint of its graph. Another
    graph is a one-line PlanError."""
    st = analysis.state
    assert st is not None
    if model is None:
        model = st.model
    return st.constants_of(model) if isinstance(model, onnx.ModelProto) else model


#: float64 bytes a ranking converts at a time: weights are read as float64 in pieces of rows of
#: about this size, never whole (VGG16's 392 MiB classifier weight cost 2 GB as float64 and |·|)
RANK_CHUNK_BYTES = 8 << 20


def _row_pieces(rows: int, row_bytes: int) -> Iterator[tuple[int, int]]:
    """[r0, r1) pieces of rows 0 … rows, each about RANK_CHUNK_BYTES, and of two rows or more
    unless `rows` is 1: numpy sums a 1-row piece of a column-major matrix pairwise where it sums
    the whole one row after another, and each row's sum must be the whole matrix's to the last bit
    (it decides the ties of a ranking)."""
    step = max(2, RANK_CHUNK_BYTES // max(row_bytes, 1))
    bounds = [*range(0, rows, step), rows]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
        del bounds[-2]
    return zip(bounds[:-1], bounds[1:])


@dataclass
class _Filters:
    """One producer's filters of a group: rows `offset` … `offset + rows` of `mat` ([channels, -1]
    in the weight's own type, a view of it where it can be), `bias` ([channels, 1]) as an extra
    column when given."""

    mat: np.ndarray
    bias: Optional[np.ndarray]
    offset: int
    rows: int

    def pieces(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first row, those rows as float64), a few MiB at a time: each piece is made as the whole
        float64 matrix was (the same type promotion and memory order), so numpy reduces each of its
        rows in the same order and the sums are the same to the last bit."""
        cols = int(np.prod(self.mat.shape[1:], dtype=np.int64)) + (self.bias is not None)
        for r0, r1 in _row_pieces(self.rows, 8 * cols):
            part = self.mat[self.offset + r0 : self.offset + r1]
            if self.bias is not None:
                part = np.concatenate([part, self.bias[self.offset + r0 : self.offset + r1]], axis=1)
            yield r0, np.asarray(part, dtype=np.float64)


def _group_producers(analysis: Analysis, gid: str) -> Iterator[tuple[Any, Any]]:
    """(atom, producing node) for each live atom of group `gid` that a node produces."""
    st = analysis.state
    assert st is not None
    for a, atom in enumerate(st.atoms):
        if not (atom.retired or atom.producer is None or analysis.group_of_atom(a) != gid):
            yield atom, st.nodes[atom.producer]


def _producer_filters(
    analysis: Analysis, gid: str, consts: Constants, with_bias: bool = True
) -> list[_Filters]:
    """Each producer's filters as rows of a [width, -1] matrix (bias as an extra column unless not
    `with_bias`), read through `consts`; `_Filters.pieces` converts them to float64 piece by piece."""
    st = analysis.state
    assert st is not None
    mats = []
    for atom, node in _group_producers(analysis, gid):
        if node.op_type == "Pad":  # the zeros a Pad adds to the channel axis: zero "filters"
            mats.append(_Filters(np.zeros((atom.width, 1)), None, 0, atom.width))
            continue
        w = consts(node.input[1]) if len(node.input) > 1 else None
        if w is None or w.size == 0:  # a zero-size weight: no filters to rank (reshape(0, -1) raised)
            continue
        if node.op_type == "Conv":
            mat = w.reshape(w.shape[0], -1)
        elif node.op_type == "ConvTranspose":  # weights [C, K/g, R, S]: output channels on axis 1
            # output channel j·K/g + i of conv group j is w[j·C/g : (j+1)·C/g, i]
            g = int(st.attr(node, "group", 1))
            g = g if g > 0 and w.shape[0] % g == 0 else 1  # (a model that never ran: do not crash)
            per_group = w.reshape(g, w.shape[0] // g, *w.shape[1:])
            mat = np.moveaxis(per_group, 2, 1).reshape(g * w.shape[1], -1)
        elif node.op_type == "Gemm":
            mat = w if int(st.attr(node, "transB", 0)) else w.T
        elif node.op_type == "MatMul":
            mat = w.T
        else:
            continue
        bias_in = (
            node.input[2] if len(node.input) > 2 and node.op_type in ("Conv", "ConvTranspose", "Gemm") else ""
        )
        bias = consts(bias_in) if bias_in else None
        keep_bias = with_bias and bias is not None and bias.size == mat.shape[0]
        # a Split may have cut the producer's output: this group is rows offset … offset+width
        rows = max(0, min(mat.shape[0], atom.offset + atom.width) - atom.offset)
        mats.append(_Filters(mat, bias.reshape(-1, 1) if keep_bias else None, atom.offset, rows))
    return mats


def filter_l1(analysis: Analysis, gid: str, model: Weights = None) -> np.ndarray:
    """L1 norm of each channel's producing filters, summed over the group's producers, in `model`
    (see `Weights`)."""
    width = analysis.group(gid).width
    total = np.zeros(width)
    consts = constants(analysis, model)
    for filters in _producer_filters(analysis, gid, consts):
        if filters.rows == width:
            for r0, part in filters.pieces():
                total[r0 : r0 + len(part)] += np.abs(part).sum(axis=1)
    if not np.isfinite(total).all():  # NaN sorts anywhere: the trim dropped arbitrary channels, exit 0
        raise ModelError(_nonfinite_ranking(analysis, gid, consts))
    return total


def _nonfinite_ranking(analysis: Analysis, gid: str, consts: Constants) -> str:
    """The line for a group whose producing filters hold NaN or infinite values: which weight, and
    how many, where one of its producers' initializers is found so."""
    from deployopt.model_checks import describe_nonfinite

    found = []
    for _, node in _group_producers(analysis, gid):
        for name in node.input[1:3]:
            w = consts(name) if name else None
            if w is not None and w.dtype.kind == "f" and not np.isfinite(w).all():
                nan = int(np.count_nonzero(np.isnan(w)))
                found.append((name, nan, int(np.count_nonzero(~np.isfinite(w))) - nan))
    what = describe_nonfinite(found) if found else "its producing filters hold NaN or infinite values"
    return (
        f"group {gid!r}: {what}: its channels cannot be ranked, and the model computes NaN or "
        "infinite values whatever the input; fix or re-export the checkpoint"
    )


def zero_filter_channels(analysis: Analysis, gid: str, model: Weights = None) -> list[int]:
    """Channels whose filters are exactly zero in every producer (in `model`, see `Weights`): each
    is a constant (its bias, through what follows), the same for every input, so one run decides
    whether it is dead. The bias is not asked to be zero: a filter pruned to zero
    (torch.nn.utils.prune), its BatchNorm folded into a negative bias, is 0 after the ReLU, and was
    never found dead."""
    width = analysis.group(gid).width
    consts = constants(analysis, model)
    mats = [f for f in _producer_filters(analysis, gid, consts, with_bias=False) if f.rows == width]
    if not mats:
        return []
    zero = np.ones(width, dtype=bool)
    for filters in mats:
        for r0, part in filters.pieces():
            zero[r0 : r0 + len(part)] &= ~np.any(part != 0, axis=1)
    return [int(i) for i in np.flatnonzero(zero)]


def _observed(analysis: Analysis, gid: str) -> list[tuple[str, int, int, int]]:
    """(tensor, channel axis, channel offset, spread) wherever a reducing op reads this group's channels.

    Spread > 1: a classifier reads a flattened map, channel c as the entries c·spread … (c+1)·spread − 1.
    """
    st = analysis.state
    assert st is not None
    seen: list[tuple[str, int, int, int]] = []
    for _, tensor in st.consumed:
        lay = st.layout(tensor)
        if lay is None:
            continue
        off = 0
        axis = st.channel_axis(tensor)  # 1, or the last axis where a MatMul reads channels-last
        spread = st.spread.get(tensor, 1)
        for atom, w in lay:
            if analysis.group_of_atom(atom) == gid and (tensor, axis, off, spread) not in seen:
                seen.append((tensor, axis, off, spread))
            off += w
    return seen


def _probe_session(
    model: onnx.ModelProto, tensors: Sequence[str], what: str, *, optimize: bool = True
) -> Any:
    """An onnxruntime CPU session of `model` that also outputs `tensors`. A model onnxruntime cannot
    load (an op it lacks past the groups looked at) is one ModelError line saying `what` needed it."""
    from deployopt.fidelity import cpu_session

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    for t in tensors:
        if t not in outputs:
            probe.graph.output.append(onnx.ValueInfoProto(name=t))
    return cpu_session(probe, f"{what}: onnxruntime cannot load the model", optimize=optimize)


def dead_channels_many(
    model: onnx.ModelProto, analysis: Analysis, gids: list[str], consts: Optional[Constants] = None
) -> dict[str, list[int]]:
    """Dead channels of several groups of `model` with at most one onnxruntime run (`consts`: its
    `Constants`, when the caller reads its weights too)."""
    result: dict[str, list[int]] = {gid: [] for gid in gids}
    observed = {gid: _observed(analysis, gid) for gid in gids}
    for gid, obs in observed.items():
        if not obs and not analysis.group(gid).frozen:
            # a free group that no op reads: the channels a channel-axis Slice leaves out. A free
            # group cannot reach a graph output (that freezes it), so none of them matters.
            result[gid] = list(range(analysis.group(gid).width))
    wanted = [gid for gid in gids if observed[gid]]
    if wanted and consts is None:
        consts = constants(analysis, model)
    candidates = {gid: zero_filter_channels(analysis, gid, consts) for gid in wanted}
    observed = {gid: obs for gid, obs in observed.items() if obs and candidates[gid]}
    if not observed:
        return result
    names = sorted({t for obs in observed.values() for t, _, _, _ in obs})
    sess = _probe_session(model, names, "finding dead channels", optimize=False)
    from deployopt.backends.ort import random_inputs  # the inputs the ort backend times with

    values = dict(zip(names, sess.run(names, random_inputs(model))))
    unread = _unread_channels(analysis, consts, names, values)
    for gid, obs in observed.items():
        dead = []
        for c in candidates[gid]:
            # channel c: entries (off + c)·s … (off + c + 1)·s − 1 of the tensor's channel axis;
            # a read with all-zero weights adds nothing whatever the value (a padded channel of a
            # Pad's zero block after a Sigmoid holds 0.5 and is read with the zeros the pad wrote)
            reads = (
                np.take(values[t], np.arange((off + c) * s, (off + c + 1) * s), axis)
                for t, axis, off, s in obs
                if not unread[t][off + c]
            )
            if not any(np.any(r != 0) for r in reads):
                dead.append(c)
        result[gid] = dead
    return result


def _unread_channels(
    analysis: Analysis, consts: Constants, tensors: Sequence[str], values: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Per tensor, which channels every reducing op reads with all-zero weights (False where a
    reader's weights are not a constant of the expected size: such a read counts)."""
    st = analysis.state
    assert st is not None
    out: dict[str, np.ndarray] = {}
    for t in tensors:
        channels = values[t].shape[st.channel_axis(t)] // st.spread.get(t, 1)
        unread = np.ones(channels, dtype=bool)
        for node, tensor in st.consumed:
            if tensor == t:
                norms = _reader_norms(analysis, consts, node, t, channels)
                unread &= np.zeros(channels, dtype=bool) if norms is None else norms == 0
        out[t] = unread
    return out


#: bytes of read tensors one importance run keeps as extra outputs; more are split over several runs
ACTIVATION_BUDGET = 1 << 30


def _reader_norms(
    analysis: Analysis, consts: Constants, node_index: int, tensor: str, channels: int
) -> Optional[np.ndarray]:
    """Per channel of `tensor`, the L2 norm of the weights that `node` (a reducing op) reads it with.

    A grouped conv's conv group j reads its piece of the channels with its own K/g filters; a
    flattened map's channel is `spread` rows of a Gemm/MatMul weight. None when the weights are
    not a constant of the expected size (not a case the coupling rules let through)."""
    st = analysis.state
    assert st is not None
    node = st.nodes[node_index]
    value = consts(node.input[1]) if len(node.input) > 1 else None
    if value is None:
        return None
    w = value  # read as float64 a few channels at a time (`_squares`), never whole
    if node.op_type == "Conv" and w.ndim >= 2:  # [K, C/g, …]: conv group j reads channels j·C/g …
        g = max(int(st.attr(node, "group", 1)), 1)
        if w.shape[0] % g:
            return None
        sq = _squares(w.reshape(g, w.shape[0] // g, w.shape[1], -1), axis=2).reshape(-1)
    elif node.op_type == "ConvTranspose":  # [C, K/g, …]: input channels on axis 0
        sq = _squares(w.reshape(w.shape[0], -1), axis=0)
    elif node.op_type in ("Gemm", "MatMul") and w.ndim == 2:
        rows = w.T if node.op_type == "Gemm" and int(st.attr(node, "transB", 0)) else w
        sq = _squares(rows, axis=0)
    else:
        return None
    if sq.size % channels:
        return None
    return np.sqrt(sq.reshape(channels, -1).sum(axis=1))


def _squares(w: np.ndarray, axis: int) -> np.ndarray:
    """Sum of squares in float64 of `w` ([rows, -1] with `axis` 0, or a conv's [g, K/g, C/g, -1]
    with `axis` 2) per entry of `axis`, over the other axes but the first of a conv's: as
    `(np.asarray(w, np.float64) ** 2).sum(...)` to the last bit, a few MiB of float64 at a time."""
    reduce = (1,) if axis == 0 else (1, 3)
    out = np.empty((w.shape[0], w.shape[2]) if axis == 2 else w.shape[:1])
    per_entry = 8 * w.size // max(w.shape[axis], 1)
    for c0, c1 in _row_pieces(w.shape[axis], per_entry):
        part = np.asarray(w[c0:c1] if axis == 0 else w[:, :, c0:c1], dtype=np.float64)
        if axis == 0:
            out[c0:c1] = (part**2).sum(axis=reduce)
        else:
            out[:, c0:c1] = (part**2).sum(axis=reduce)
    return out


def _reads(analysis: Analysis, gids: Sequence[str]) -> dict[str, list[int]]:
    """Tensor → the reducing ops reading it, for every tensor that holds a channel of `gids`."""
    st = analysis.state
    assert st is not None
    wanted = set(gids)
    out: dict[str, list[int]] = {}
    for node, tensor in st.consumed:
        lay = st.layout(tensor)
        if lay is not None and any(analysis.group_of_atom(a) in wanted for a, _ in lay):
            out.setdefault(tensor, []).append(node)
    return out


def _mean_abs(
    model: onnx.ModelProto, analysis: Analysis, tensors: list[str], samples: Sequence[dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """Per tensor, each channel's mean |value| over the samples (onnxruntime CPU, extra outputs).

    The tensors are fetched in runs of at most ACTIVATION_BUDGET bytes (by their inferred shapes),
    so a large model at a large batch does not hold every intermediate at once."""
    st = analysis.state
    assert st is not None
    chunks: list[list[str]] = [[]]
    used = 0
    for t in tensors:
        size = 4 * int(np.prod([max(d, 1) for d in st.shape(t) or [1]]))
        if chunks[-1] and used + size > ACTIVATION_BUDGET:
            chunks.append([])
            used = 0
        chunks[-1].append(t)
        used += size
    inits = {t.name for t in model.graph.initializer}
    dtypes = {
        i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        for i in model.graph.input
        if i.name not in inits
    }
    from deployopt.fidelity import feed_inputs

    sums: dict[str, np.ndarray] = {}
    for names in chunks:
        # a QDQ model's convs become int8 kernels, which on x86 without VNNI sum pairs in saturating
        # int16: the ranking must see what the graph computes (fidelity.cpu_session sees to it)
        sess = _probe_session(model, names, "ranking channels on the calibration data")
        for sample in samples:
            missing = [n for n in dtypes if n not in sample]
            if missing:
                raise DataError(f"calibration samples have no array for input(s) {', '.join(missing)}")
            feed = feed_inputs(sample, {n: n for n in dtypes}, dtypes)  # float16 overflow: one line
            try:
                values = sess.run(names, feed)
            except Exception as exc:  # onnxruntime's own errors: one line, as the fidelity check says
                first = first_line(exc, repr(exc))
                raise DataError(f"ranking channels on the calibration data: onnxruntime: {first}") from None
            for t, v in zip(names, values):
                spread = st.spread.get(t, 1)
                axis = st.channel_axis(t)
                per = np.abs(np.moveaxis(v.astype(np.float64), axis, 0).reshape(v.shape[axis] // spread, -1))
                sums[t] = sums.get(t, 0.0) + per.mean(axis=1)
    return {t: s / len(samples) for t, s in sums.items()}


def activation_importance(
    model: onnx.ModelProto,
    analysis: Analysis,
    gids: Sequence[str],
    samples: Sequence[dict[str, np.ndarray]],
) -> dict[str, np.ndarray]:
    """Per group, each channel's share of what the next layers read: mean |value| × reader weight norm.

    Measured where reducing ops read the channel (after the activation, the tensor a Conv, Gemm or
    MatMul takes), averaged over `samples` (calibration inputs keyed by input name), times the L2
    norm of that reader's weights for the channel, summed over every reader. A channel that is
    large but read with small weights, or that a ReLU keeps at zero on real data, ranks low; its
    filters' L1 does not see either. Groups that nothing reads get zeros (they are dead anyway).
    """
    if not samples:
        raise DataError("no calibration samples to rank channels on")
    st = analysis.state
    assert st is not None
    consts = constants(analysis, model)  # the readers' weights: this model's (a PlanError if not analysed)
    ids = {gid: analysis.group(gid).id for gid in gids}  # a group may be named by any of its producers
    reads = _reads(analysis, list(ids.values()))
    means = _mean_abs(model, analysis, sorted(reads), samples) if reads else {}
    bad = next((t for t, m in means.items() if not np.isfinite(m).all()), None)
    if bad is not None:  # NaN sorts anywhere: the trim would drop arbitrary channels, exit 0
        from deployopt.model_checks import describe_nonfinite, nonfinite_weights

        found = nonfinite_weights(model)  # the weights, not the data: no data helps (it was blamed)
        if found:
            raise ModelError(
                f"ranking channels on the calibration data: tensor {bad!r} holds NaN or infinite values, "
                f"and so do the weights ({describe_nonfinite(found)}): no data can fix that; fix or "
                "re-export the checkpoint"
            )
        raise DataError(
            f"ranking channels on the calibration data: tensor {bad!r} holds NaN or infinite values on "
            "it (values that overflow the model?); check the data's scale"
        )
    result = {gid: np.zeros(analysis.group(gid).width) for gid in ids.values()}
    for tensor, nodes in reads.items():
        act = means[tensor]
        weight = np.zeros_like(act)
        for node in nodes:
            norms = _reader_norms(analysis, consts, node, tensor, act.size)
            weight += 1.0 if norms is None else norms
        score = act * weight
        off = 0
        for atom, width in st.layout(tensor) or ():
            gid = analysis.group_of_atom(atom)
            if gid in result and width == result[gid].size:
                result[gid] += score[off : off + width]
            off += width
    return {gid: result[ids[gid]] for gid in gids}


def check_importance(gid: str, score: Any, width: int) -> np.ndarray:
    """A caller's importance for group `gid` of `width` channels, as the 1-D float array
    `trim_order` sorts by, or a one-line PlanError: a 2-D array was numpy's "all keys need to be
    the same shape", and NaN sorts anywhere (the trim dropped arbitrary channels)."""
    try:
        arr = np.asarray(score, dtype=np.float64)
    except (TypeError, ValueError):
        raise PlanError(f"importance of group {gid!r}: not numbers: {shorten(repr(score), 60)}") from None
    if arr.ndim != 1:
        raise PlanError(
            f"importance of group {gid!r}: one value per channel ({width}), not an array of shape {arr.shape}"
        )
    if arr.size != width:
        raise PlanError(f"importance of group {gid!r}: {arr.size} values for {width} channels")
    if not np.isfinite(arr).all():
        raise PlanError(f"importance of group {gid!r} holds NaN or infinite values; rank on finite ones")
    return arr


def trim_order(dead: Sequence[int], l1: np.ndarray, importance: Optional[np.ndarray] = None) -> list[int]:
    """Least important first: dead channels (by index), then by `importance` when given, else by L1.

    Ties go to the smaller L1, then to the lower index, so the order is deterministic."""
    idx = np.arange(len(l1))
    keys = (idx, l1) if importance is None else (idx, l1, np.asarray(importance, dtype=np.float64))
    dead_set = {int(i) for i in dead}
    return sorted(dead_set) + [int(i) for i in np.lexsort(keys) if int(i) not in dead_set]
