"""Which channels a trim should drop first: dead ones, then those with the smallest filters.

"Dead" is strict: a channel whose value is zero wherever the group's channels are read by a
reducing op (Conv input, Gemm rows). A zero filter alone is not enough (a BatchNorm shift after
it makes a constant channel, which the next conv still sees). Candidates are channels whose every
producing filter and bias are exactly zero (a zero Pad of the channel axis counts as a producer
with zero filters); for them the channel no longer depends on the input, so one onnxruntime run
with extra outputs decides exactly which of them are zero where it matters.
A free group that nothing reads (what a Slice of the channel axis leaves out) is dead as a whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx

if TYPE_CHECKING:
    from deployopt.coupling import Analysis


def _producer_filters(analysis: Analysis, gid: str) -> list[np.ndarray]:
    """Each producer's filters as a [width, -1] matrix (bias as an extra column)."""
    st = analysis.state
    assert st is not None
    mats = []
    for a, atom in enumerate(st.atoms):
        if atom.retired or atom.producer is None or analysis.group_of_atom(a) != gid:
            continue
        node = st.nodes[atom.producer]
        if node.op_type == "Pad":  # the zeros a Pad adds to the channel axis: zero "filters"
            mats.append(np.zeros((atom.width, 1)))
            continue
        w = st.const(node.input[1]) if len(node.input) > 1 else None
        if w is None:
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
        bias = st.const(bias_in) if bias_in else None
        if bias is not None and bias.size == mat.shape[0]:
            mat = np.concatenate([mat, bias.reshape(-1, 1)], axis=1)
        # a Split may have cut the producer's output: this group is rows offset … offset+width
        mats.append(np.asarray(mat[atom.offset : atom.offset + atom.width], dtype=np.float64))
    return mats


def filter_l1(analysis: Analysis, gid: str) -> np.ndarray:
    """L1 norm of each channel's producing filters, summed over the group's producers."""
    width = analysis.group(gid).width
    total = np.zeros(width)
    for mat in _producer_filters(analysis, gid):
        if mat.shape[0] == width:
            total += np.abs(mat).sum(axis=1)
    return total


def zero_filter_channels(analysis: Analysis, gid: str) -> list[int]:
    """Channels whose filters and bias are exactly zero in every producer."""
    mats = [m for m in _producer_filters(analysis, gid) if m.shape[0] == analysis.group(gid).width]
    if not mats:
        return []
    zero = np.ones(mats[0].shape[0], dtype=bool)
    for m in mats:
        zero &= ~np.any(m != 0, axis=1)
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


def _random_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        shape = [max(d.dim_value, 1) for d in tt.shape.dim]
        feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def dead_channels_many(model: onnx.ModelProto, analysis: Analysis, gids: list[str]) -> dict[str, list[int]]:
    """Dead channels of several groups with at most one onnxruntime run."""
    result: dict[str, list[int]] = {gid: [] for gid in gids}
    observed = {gid: _observed(analysis, gid) for gid in gids}
    for gid, obs in observed.items():
        if not obs and not analysis.group(gid).frozen:
            # a free group that no op reads: the channels a channel-axis Slice leaves out. A free
            # group cannot reach a graph output (that freezes it), so none of them matters.
            result[gid] = list(range(analysis.group(gid).width))
    candidates = {gid: zero_filter_channels(analysis, gid) for gid in gids if observed[gid]}
    observed = {gid: obs for gid, obs in observed.items() if obs and candidates[gid]}
    if not observed:
        return result
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    names = sorted({t for obs in observed.values() for t, _, _, _ in obs})
    for t in names:
        if t not in outputs:
            probe.graph.output.append(onnx.ValueInfoProto(name=t))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4  # errors come back as exceptions; the log would repeat them
    sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    values = dict(zip(names, sess.run(names, _random_feeds(model))))
    for gid, obs in observed.items():
        dead = []
        for c in candidates[gid]:
            # channel c: entries (off + c)·s … (off + c + 1)·s − 1 of the tensor's channel axis
            reads = (
                np.take(values[t], np.arange((off + c) * s, (off + c + 1) * s), axis)
                for t, axis, off, s in obs
            )
            if not any(np.any(r != 0) for r in reads):
                dead.append(c)
        result[gid] = dead
    return result
