"""Ranking a trim held float64 copies of every weight it read (VGG16's 392 MiB classifier: 2 GB).

`filter_l1` and the dead-channel search read each producer's filters as float64, bias column
included, and `activation_importance` its readers' weights squared: the weight concatenated with
its bias (1×), as float64 (2×) and its absolute value or square (2×) at once. They now read a few
MiB of rows at a time. The sums must be the old ones to the last bit: their last bits break ties in
the ranking, and a trim drops other channels if they move. numpy sums a row of a row-major matrix
pairwise and a column-major one's (a Gemm without transB, a MatMul) one entry after another, so
each piece is made as the whole float64 matrix was; these tests check it against that matrix.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from traced_memory import traced_peak

import deployopt.importance as importance
from deployopt.coupling import Analysis, analyze
from deployopt.importance import (
    activation_importance,
    constants,
    dead_channels_many,
    filter_l1,
    trim_order,
    zero_filter_channels,
)
from deployopt.surgery import channel_order

#: the large weight: a 4096 → 4096 classifier, 64 MiB as float32
IN, HIDDEN = 4096, 4096


def _classifier(
    rng: np.random.Generator,
    fc1: np.ndarray,
    fc1_op: str = "Gemm",
    trans_b: int = 1,
    fc1_b: np.ndarray | None = None,
) -> onnx.ModelProto:
    """conv (C = IN/64 channels, 8×8) → ReLU → Flatten → fc1 (`fc1`, with a bias) → ReLU → fc2: a
    VGG-style classifier whose fc1 both produces a group and reads the conv's flattened one."""
    hidden, inputs = fc1.shape if fc1_op == "Gemm" and trans_b else fc1.shape[::-1]
    channels = inputs // 64  # the conv's 8×8 map, flattened
    inits = [
        numpy_helper.from_array(rng.standard_normal((channels, 16, 3, 3), dtype=np.float32), "conv_w"),
        numpy_helper.from_array(rng.standard_normal(channels, dtype=np.float32), "conv_b"),
        numpy_helper.from_array(fc1, "fc1_w"),
        numpy_helper.from_array(
            rng.standard_normal(hidden, dtype=np.float32) if fc1_b is None else fc1_b, "fc1_b"
        ),
        numpy_helper.from_array(rng.standard_normal((10, hidden), dtype=np.float32), "fc2_w"),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "conv_w", "conv_b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["flat"], name="flatten"),
    ]
    if fc1_op == "Gemm":
        nodes.append(helper.make_node("Gemm", ["flat", "fc1_w", "fc1_b"], ["h"], name="fc1", transB=trans_b))
    else:  # MatMul [IN, hidden] + Add: its weight read transposed, column-major
        nodes += [
            helper.make_node("MatMul", ["flat", "fc1_w"], ["m"], name="fc1"),
            helper.make_node("Add", ["m", "fc1_b"], ["h"], name="fc1_add"),
        ]
    nodes += [
        helper.make_node("Relu", ["h"], ["hr"], name="relu1"),
        helper.make_node("Gemm", ["hr", "fc2_w"], ["output"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model)


@pytest.fixture(scope="module")
def large() -> tuple[onnx.ModelProto, Analysis]:
    rng = np.random.default_rng(0)
    model = _classifier(rng, rng.standard_normal((HIDDEN, IN), dtype=np.float32))
    return model, analyze(model)


def test_ranking_reads_a_large_weight_a_piece_at_a_time(large: tuple[onnx.ModelProto, Analysis]) -> None:
    """Before: 4× the weight above its float32 value (256 MiB here, 2 GB for VGG16's classifier);
    now a few pieces of RANK_CHUNK_BYTES (8 MiB) whatever the weight."""
    model, analysis = large
    weight = IN * HIDDEN * 4
    consts = constants(analysis, model)
    consts("fc1_w")  # read once beforehand, as surgery's Constants holds it: only the ranking counts
    bound = weight // 2  # now 2.5 pieces of RANK_CHUNK_BYTES (as float32, float64, |float64|): 20 MiB
    l1, peak = traced_peak(lambda: filter_l1(analysis, "fc1", consts))
    assert l1.shape == (HIDDEN,)
    assert peak < bound, f"filter_l1 held {peak >> 20} MiB for a {weight >> 20} MiB weight"
    zero, peak = traced_peak(lambda: zero_filter_channels(analysis, "fc1", consts))
    assert zero == []
    assert peak < bound, f"zero_filter_channels held {peak >> 20} MiB for a {weight >> 20} MiB weight"


def test_activation_ranking_reads_a_large_reader_a_piece_at_a_time(
    large: tuple[onnx.ModelProto, Analysis],
) -> None:
    """fc1 reads the conv's flattened channels: its weight, squared per channel, was 4× itself as
    float64 on top of its read (the one float32 copy Constants makes of it)."""
    model, analysis = large
    weight = IN * HIDDEN * 4
    sample = {"input": np.random.default_rng(1).standard_normal((1, 16, 8, 8), dtype=np.float32)}
    scores, peak = traced_peak(lambda: activation_importance(model, analysis, ["conv"], [sample]))
    assert scores["conv"].shape == (IN // 64,)
    assert peak < 2 * weight, f"activation_importance held {peak >> 20} MiB for a {weight >> 20} MiB weight"


def _producer_matrix(model: onnx.ModelProto, name: str) -> np.ndarray:
    """The straightforward float64 [channels, -1] matrix of `name`'s filters, bias column last,
    made whole as the ranking once made it."""
    node = next(n for n in model.graph.node if n.name == name)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w = inits[node.input[1]]
    trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
    if node.op_type == "Conv":
        mat = w.reshape(w.shape[0], -1)
    else:
        mat = w if node.op_type == "Gemm" and trans_b else w.T
    if len(node.input) > 2:
        mat = np.concatenate([mat, inits[node.input[2]].reshape(-1, 1)], axis=1)
    return np.asarray(mat, dtype=np.float64)


def _tied(rng: np.random.Generator, shape: tuple[int, int], rows_axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Random weights and biases whose filters (rows along `rows_axis`, bias included) tie: exact
    copies of one another, the same entries in another order (the same sum in exact arithmetic, not
    always in float), and zero filters; of mixed magnitudes, so that summation order shows in the
    last bits."""
    w = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(np.float32)
    f = np.moveaxis(w, rows_axis, 0)  # a view: rows are filters
    n = f.shape[0]
    bias = rng.standard_normal(n).astype(np.float32)
    for dst in rng.choice(n, n // 3, replace=False):
        src = int(rng.integers(n))
        f[dst] = f[src] if rng.random() < 0.5 else rng.permutation(f[src])
        bias[dst] = bias[src]
    f[rng.choice(n, 3, replace=False)] = 0
    return w, bias


@pytest.mark.parametrize(
    ("fc1_op", "trans_b"), [("Gemm", 1), ("Gemm", 0), ("MatMul", 0)], ids=["gemm-transB", "gemm", "matmul"]
)
@pytest.mark.parametrize("chunk", [1, 3000, 1 << 23], ids=["2-row-pieces", "odd-pieces", "default"])
def test_ranking_is_the_float64_reference_to_the_last_bit(
    fc1_op: str, trans_b: int, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """L1 sums, zero filters, reader norms and the trim order, with weights read in pieces of every
    size (down to two rows), equal those of the whole float64 matrix, bit for bit, ties included."""
    monkeypatch.setattr(importance, "RANK_CHUNK_BYTES", chunk, raising=False)  # (none before)
    rng = np.random.default_rng(7)
    hidden, inputs = 203, 16 * 64  # odd widths: a last piece of one row is merged into the one before
    shape = (hidden, inputs) if fc1_op == "Gemm" and trans_b else (inputs, hidden)
    fc1, fc1_b = _tied(rng, shape, 0 if shape[0] == hidden else 1)
    model = _classifier(rng, fc1, fc1_op, trans_b, fc1_b)
    analysis = analyze(model)
    st = analysis.state
    assert st is not None
    for gid, producer in (("fc1", "fc1"), ("conv", "conv")):
        ref = _producer_matrix(model, producer)
        ref_l1 = np.abs(ref).sum(axis=1)
        l1 = filter_l1(analysis, gid, model)
        assert l1.tobytes() == ref_l1.tobytes(), gid
        if gid == "fc1":  # exact ties, and near ones that summation order made
            assert len(np.unique(l1)) < hidden - hidden // 10
        no_bias = ref[:, :-1] if gid == "conv" or fc1_op == "Gemm" else ref
        ref_zero = [int(i) for i in np.flatnonzero(~np.any(no_bias != 0, axis=1))]
        assert zero_filter_channels(analysis, gid, model) == ref_zero
        dead = dead_channels_many(model, analysis, [gid])[gid]  # of the zero filters, those a ReLU zeroes
        assert channel_order(model, analysis, gid) == trim_order(dead, ref_l1)
    consts = constants(analysis, model)
    for node_index, tensor in st.consumed:
        node = st.nodes[node_index]
        if node.name not in ("fc1", "fc2"):
            continue
        channels = analysis.group("conv" if node.name == "fc1" else "fc1").width
        w = np.asarray(
            numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == node.input[1]))
        )
        w64 = np.asarray(w, dtype=np.float64)
        rows = (
            w64.T
            if node.op_type == "Gemm" and next((a.i for a in node.attribute if a.name == "transB"), 0)
            else w64
        )
        ref_norms = np.sqrt((rows**2).sum(axis=1).reshape(channels, -1).sum(axis=1))
        norms = importance._reader_norms(analysis, consts, node_index, tensor, channels)
        assert norms is not None and norms.tobytes() == ref_norms.tobytes(), node.name


@pytest.mark.parametrize("chunk", [1, 100, 1 << 23])
def test_conv_reader_norms_are_the_float64_reference(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A (grouped) conv's reader norms, per input channel over its filters and taps, in pieces of
    channels: the whole float64 array's sums, bit for bit."""
    monkeypatch.setattr(importance, "RANK_CHUNK_BYTES", chunk, raising=False)  # (none before)
    rng = np.random.default_rng(3)
    for groups, k, c, taps in ((1, 24, 37, (3, 3)), (4, 32, 5, (1, 1)), (2, 8, 9, (5, 5)), (1, 7, 2, (1, 1))):
        w = (rng.standard_normal((k, c, *taps)) * 10.0 ** rng.integers(-3, 4, (k, c, *taps))).astype(
            np.float32
        )
        got = importance._squares(w.reshape(groups, k // groups, c, -1), axis=2).reshape(-1)
        ref = (np.asarray(w, dtype=np.float64).reshape(groups, k // groups, c, -1) ** 2).sum(axis=(1, 3))
        assert got.tobytes() == ref.reshape(-1).tobytes(), (groups, k, c, taps)


def test_the_analysis_keeps_no_weight(large: tuple[onnx.ModelProto, Analysis]) -> None:
    """The walk reads weights (a conv's, a Gemm's) and kept every one to the end in its cache
    (VGG16: 460 MiB through `apply` and its write); now only the small integer constants that
    `check_graph` compares with another checkpoint's stay."""
    _, analysis = large
    st = analysis.state
    assert st is not None
    held = sum(a.nbytes for a in st._const_cache.values())
    assert held < 1 << 16, f"the analysis holds {held >> 20} MiB of constants"
    assert all(a.dtype.kind in "iub" for a in st._const_cache.values())
