"""Which live channels a trim drops: by filter L1 without data, by what the next layers read with it.

The models are built so the two orders disagree: a channel with the largest filters that the next
conv reads with zero weights, or that a ReLU keeps at zero on the data, adds nothing to the
outputs. Ranked on calibration inputs it goes first and the trim leaves the outputs as they were;
ranked by L1 it is the last to go.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from ort_session import cpu_session
from test_coupling import Net

from deployopt.coupling import analyze
from deployopt.errors import DataError, ModelError, PlanError
from deployopt.importance import activation_importance, filter_l1, trim_order
from deployopt.surgery import apply_plan, channel_order


def samples(n: int = 4, shape: tuple[int, ...] = (1, 2, 8, 8)) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    return [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


def outputs(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    sess = cpu_session(model)
    return [sess.run(None, f)[0] for f in feeds]


def two_convs(bias0: float = 0.0, read0: float = 0.0) -> tuple[onnx.ModelProto, str]:
    """x (2 ch) → 1×1 conv to 4 channels → Relu → 1×1 conv to 3. Channel 0 has the largest
    filters (L1 10, plus |bias0|); the second conv reads it with weights `read0`."""
    n = Net(c=2)
    w = np.zeros((4, 2, 1, 1), dtype=np.float32)
    w[0], w[1], w[2], w[3] = 5.0, 1.0, 2.0, 3.0
    b = np.array([bias0, 0.0, 0.0, 0.0], dtype=np.float32)
    c = n.op("Conv", ["x", n.init("c1.w", w), n.init("c1.b", b)], (4, 8, 8), kernel_shape=[1, 1])
    r = n.op("Relu", [c])
    w2 = n.rng.standard_normal((3, 4, 1, 1)).astype(np.float32)
    w2[:, 0] = read0
    out = n.op("Conv", [r, n.init("c2.w", w2)], (3, 8, 8), kernel_shape=[1, 1])
    model = n.build(out)
    return model, analyze(model).convs[0].out_group


def kept_filters(model: onnx.ModelProto) -> list[float]:
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "c1.w"))
    return w[:, 0, 0, 0].tolist()


def test_trim_order_puts_dead_first_then_importance_with_ties_by_l1_then_index() -> None:
    l1 = np.array([4.0, 1.0, 1.0, 3.0, 2.0])
    assert trim_order([3], l1) == [3, 1, 2, 4, 0]  # no importance: L1 as before, ties by index
    importance = np.array([0.5, 0.5, 0.5, 0.0, 0.1])
    # dead 3 first even though it also has the lowest importance; then 4; the 0.5 tie by L1 (1, 2
    # have L1 1) then by index
    assert trim_order([3], l1, importance) == [3, 4, 1, 2, 0]
    assert trim_order([], np.zeros(3), np.zeros(3)) == [0, 1, 2]


def test_a_channel_read_with_zero_weights_goes_first_when_ranked_on_data() -> None:
    model, gid = two_convs(read0=0.0)
    analysis = analyze(model)
    feeds = samples()
    imp = activation_importance(model, analysis, [gid], feeds)
    assert imp[gid][0] == 0.0 and np.all(imp[gid][1:] > 0)
    assert channel_order(model, analysis, gid) == [1, 2, 3, 0]  # L1: the big filter stays
    assert channel_order(model, analysis, gid, imp[gid])[0] == 0
    by_data = apply_plan(model, {gid: 3}, analysis, importance=imp)
    assert kept_filters(by_data) == [1.0, 2.0, 3.0]
    for got, want in zip(outputs(by_data, feeds), outputs(model, feeds)):
        np.testing.assert_array_equal(got, want)  # it added nothing: the trim is exact
    by_l1 = apply_plan(model, {gid: 3}, analysis)
    assert kept_filters(by_l1) == [5.0, 2.0, 3.0]
    assert not np.allclose(outputs(by_l1, feeds)[0], outputs(model, feeds)[0], atol=1e-3)


def test_a_channel_a_relu_keeps_at_zero_on_the_data_goes_first() -> None:
    """Large filters and a large negative bias: L1 ranks it first to keep; on the data it is zero
    after the ReLU (though not dead: it is not zero for every input), so it is the one to drop."""
    model, gid = two_convs(bias0=-1000.0, read0=1.0)
    analysis = analyze(model)
    feeds = samples()
    assert filter_l1(analysis, gid)[0] == pytest.approx(1010.0)
    imp = activation_importance(model, analysis, [gid], feeds)
    assert imp[gid][0] == 0.0
    by_data = apply_plan(model, {gid: 3}, analysis, importance=imp)
    assert kept_filters(by_data) == [1.0, 2.0, 3.0]
    for got, want in zip(outputs(by_data, feeds), outputs(model, feeds)):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert kept_filters(apply_plan(model, {gid: 3}, analysis))[0] == 5.0


def test_importance_is_mean_activation_times_reader_norm_summed_over_readers() -> None:
    """A grouped conv (2 conv groups) and a Gemm over the flattened 8×8 map read the same 4
    channels: each channel's score is its mean |value| × the norm of the conv group's filters that
    read it, plus its mean |value| × the norm of its 64 rows of the classifier; a group channel
    that is one channel in each conv group sums both."""
    n = Net(c=2)
    a = n.op("Relu", [n.conv("x", 4, r=1)])
    g = n.conv(a, 6, r=1, group=2)
    flat = n.op("Flatten", [a], (256, 0, 0), axis=1)
    fc_w = n.init("fc.w", n.rng.standard_normal((5, 256)))
    head = n.op("Gemm", [flat, fc_w, n.init("fc.b", np.zeros(5))], (5, 0, 0), transB=1)
    model = n.build(g, head)
    analysis = analyze(model)
    gid = analysis.convs[0].out_group
    assert not analysis.group(gid).frozen
    feeds = samples(3)
    imp = activation_importance(model, analysis, [gid], feeds)[gid]
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(onnx.ValueInfoProto(name=a))
    sess = cpu_session(probe)
    mean = np.mean([np.abs(sess.run([a], f)[0][0]).reshape(4, -1).mean(1) for f in feeds], axis=0)
    wg = inits[f"{g}.w"].reshape(2, 3, 2)  # conv group j: filters 3j…3j+2 read channels 2j, 2j+1
    conv_norm = np.array([np.linalg.norm(wg[c // 2, :, c % 2]) for c in range(4)])
    fc = inits["fc.w"]
    fc_norm = np.array([np.linalg.norm(fc[:, 64 * c : 64 * (c + 1)]) for c in range(4)])
    per_channel = mean * conv_norm + mean * fc_norm
    # the grouped conv makes the group 2 wide per conv group: its channel i is channels i and 2 + i
    assert analysis.group(gid).width == 2 and analysis.group(gid).repeat == 2
    np.testing.assert_allclose(imp, per_channel[:2] + per_channel[2:], rtol=1e-5)


def test_bad_importance_or_data_is_a_one_line_error() -> None:
    model, gid = two_convs()
    analysis = analyze(model)
    with pytest.raises(PlanError, match="2 values for 4 channels"):
        apply_plan(model, {gid: 3}, analysis, importance={gid: np.zeros(2)})
    with pytest.raises(DataError, match="no calibration samples"):
        activation_importance(model, analysis, [gid], [])
    with pytest.raises(DataError, match="no array for input"):
        activation_importance(model, analysis, [gid], [{"y": np.zeros((1, 2, 8, 8), np.float32)}])
    with pytest.raises(DataError, match="onnxruntime"):
        activation_importance(model, analysis, [gid], [{"x": np.zeros((1, 3, 8, 8), np.float32)}])


def test_channels_last_matmul_reader() -> None:
    """ConvNeXt-style pointwise layers (NHWC MatMuls): the hidden channels are the last axis, each
    scored by its mean |value| × the norm of its row of the second MatMul's weights."""
    n = Net(c=2)
    c = n.conv("x", 4, r=1)
    t = n.op("Transpose", [c], (8, 8, 4), perm=[0, 2, 3, 1])
    h = n.op("MatMul", [t, n.init("w1", n.rng.standard_normal((4, 6)))], (8, 8, 6))
    r = n.op("Relu", [h])
    out = n.op("MatMul", [r, n.init("w2", n.rng.standard_normal((6, 3)))], (8, 8, 3))
    model = n.build(out)
    analysis = analyze(model)
    gid = analysis.group(h).id
    assert analysis.group(gid).width == 6 and not analysis.group(gid).frozen
    feeds = samples(2)
    imp = activation_importance(model, analysis, [gid], feeds)[gid]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(onnx.ValueInfoProto(name=r))
    sess = cpu_session(probe)
    mean = np.mean([np.abs(sess.run([r], f)[0]).reshape(-1, 6).mean(0) for f in feeds], axis=0)
    w2 = next(numpy_helper.to_array(i) for i in model.graph.initializer if i.name == "w2").astype(np.float64)
    np.testing.assert_allclose(imp, mean * np.linalg.norm(w2, axis=1), rtol=1e-5)


def unknown_op_model(zero_filter: bool = False) -> tuple[onnx.ModelProto, str]:
    """(model, its first conv's group): conv → Relu → conv → an op onnxruntime lacks. The analysis
    freezes only what the op touches, so the group (4 channels) is free. `zero_filter`: channel 0's
    filter and bias are zero, a dead-channel candidate (whose check runs the model)."""
    n = Net(c=2)
    a = n.op("Relu", [n.conv("x", 4, r=1)])
    b = n.conv(a, 3, r=1)
    model = n.build(b)
    foo = helper.make_node("Foo", [b], ["y"], name="foo", domain="com.example")
    model.graph.node.append(foo)
    model.graph.output[0].name = "y"
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    for t in model.graph.initializer:
        if zero_filter and t.name in ("conv1.w", "conv1.b"):
            arr = numpy_helper.to_array(t).copy()
            arr[0] = 0
            t.CopyFrom(numpy_helper.from_array(arr, t.name))
    analysis = analyze(model)
    gid = analysis.convs[0].out_group
    assert not analysis.group(gid).frozen and analysis.group(gid).width == 4
    return model, gid


def test_a_model_onnxruntime_cannot_load_is_a_one_line_error() -> None:
    """An op onnxruntime lacks after the trimmed group (the analysis freezes only what it touches):
    ranking on data needs onnxruntime, and its refusal was a raw onnxruntime Fail traceback."""
    model, gid = unknown_op_model()
    analysis = analyze(model)
    with pytest.raises(ModelError, match=r"^ranking channels on the calibration data: onnxruntime cannot"):
        activation_importance(model, analysis, [gid], samples(1))


def test_a_qdq_model_is_ranked_on_what_its_graph_computes(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A QDQ ResNet (quantize_static, int8): the importance equals that of the unoptimized graph
    (DequantizeLinear → float Conv, ONNX's semantics). onnxruntime fuses Q/DQ into int8 convs which,
    on x86 CPUs without VNNI (AVX2), sum product pairs in saturating int16 unless told otherwise, as
    the fidelity check tells it: without that, 13 of 30 groups ranked in another order (scores up to
    22 % off) on an AVX2 machine. (On a VNNI CPU both agree either way.)"""
    quantization = pytest.importorskip("onnxruntime.quantization")
    import onnxruntime as ort
    from test_coupling_qdq import _Calibration

    from deployopt.model import load_model
    from deployopt.zoo.cifar import resnet56_cifar

    float_path, qdq_path = tmp_path / "float.onnx", tmp_path / "qdq.onnx"
    net = resnet56_cifar(inner_widths=[4] * 9 + [6] * 9 + [12] * 9, stage_widths=(8, 16, 24))
    onnx.save(net, float_path)
    quantization.quantize_static(
        str(float_path),
        str(qdq_path),
        _Calibration(net.graph.input[0].name),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=True,
        activation_type=quantization.QuantType.QInt8,
        weight_type=quantization.QuantType.QInt8,
        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
    )
    model = load_model(qdq_path).model
    analysis = analyze(model)
    gids = [g.id for g in analysis.free_groups()]
    assert len(gids) == 30
    feeds = [{model.graph.input[0].name: s["x"]} for s in samples(2, (1, 3, 32, 32))]
    got = activation_importance(model, analysis, gids, feeds)

    class Unoptimized(ort.SessionOptions):
        def __init__(self) -> None:
            super().__init__()
            self.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL

    monkeypatch.setattr(ort, "SessionOptions", Unoptimized)
    want = activation_importance(model, analysis, gids, feeds)
    for gid in gids:
        np.testing.assert_allclose(got[gid], want[gid], rtol=1e-6, err_msg=gid)


def test_a_group_named_by_another_producer_is_ranked_the_same() -> None:
    """A plan may name a group by any of its producers (Analysis.group: a QDQ twin's exporter orders
    them differently); importance asked for, and given, under that name is the group's own. It was
    all zeros from activation_importance, and ignored by apply_plan (the trim went by L1)."""
    n = Net(c=2)
    s = n.op("Add", [n.conv("x", 4, r=1), n.conv("x", 4, r=1)])
    out = n.conv(n.op("Relu", [s]), 3, r=1)
    model = n.build(out)
    analysis = analyze(model)
    group = next(g for g in analysis.free_groups() if len(g.producers) == 2)
    alias = group.producers[1]
    feeds = samples()
    by_id = activation_importance(model, analysis, [group.id], feeds)[group.id]
    assert by_id.all()
    np.testing.assert_array_equal(activation_importance(model, analysis, [alias], feeds)[alias], by_id)
    want = apply_plan(model, {group.id: 2}, analysis, importance={group.id: by_id})
    got = apply_plan(model, {alias: 2}, analysis, importance={alias: by_id})
    assert want.SerializeToString() == got.SerializeToString()
    assert want.SerializeToString() != apply_plan(model, {group.id: 2}, analysis).SerializeToString()


def test_kept_channels_rebuild_a_ranked_trim_without_the_ranking() -> None:
    """What optimize writes into plan.json's `keep`: the channels a trim keeps under a ranking.
    Given back as `keep`, they rebuild the same model with no ranking (and no data); listed in
    any order, they are kept in the model's order."""
    from deployopt.surgery import kept_channels

    model, gid = two_convs(read0=0.0)
    analysis = analyze(model)
    imp = activation_importance(model, analysis, [gid], samples())
    keep = kept_channels(model, {gid: 3}, analysis, imp)
    assert keep == {gid: [1, 2, 3]}
    ranked = apply_plan(model, {gid: 3}, analysis, importance=imp)
    assert apply_plan(model, {gid: 3}, analysis, keep=keep).SerializeToString() == ranked.SerializeToString()
    assert apply_plan(model, {gid: 3}, analysis, keep={gid: [3, 1, 2]}).SerializeToString() == (
        ranked.SerializeToString()
    )
    assert kept_channels(model, {gid: 3}, analysis) == {gid: [0, 2, 3]}  # by L1: channel 1 is the smallest
    assert kept_channels(model, {gid: 4}, analysis) == {} == kept_channels(model, {gid: 8}, analysis)
    with pytest.raises(PlanError, match="lists 2 channel"):
        apply_plan(model, {gid: 3}, analysis, keep={gid: [0, 1]})
