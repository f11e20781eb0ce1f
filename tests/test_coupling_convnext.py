"""Channels-last blocks (ConvNeXt): the channel axis followed through Transpose, MatMul on [..., C].

A ConvNeXt block is depthwise 7×7 Conv → Transpose(0,2,3,1) → LayerNorm over the last axis →
MatMul/Add (dim → 4·dim) → GELU → MatMul/Add (4·dim → dim) → optional Mul by gamma → Transpose
(0,3,1,2) → residual Add. The MLP hidden width is a free group (padding is output-exact); the
LayerNorm'd dim stays frozen (zero channels would change its mean and variance).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import ort_session
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper
from test_coupling import Net
from test_surgery import run

from deployopt.coupling import analyze
from deployopt.importance import dead_channels_many
from deployopt.model import load_model
from deployopt.surgery import apply_plan, apply_plan_report

LN_REASON = "normalizes over the channel axis (padded channels would change its mean and variance)"


def gelu_erf(n: Net, x: str) -> str:
    """GELU as torch exports it below opset 20: x * (Erf(x / sqrt 2) + 1) * 0.5 with scalar constants."""
    div = n.op("Div", [x, n.init(f"sqrt2_{n.n}", np.sqrt(2.0))])
    erf = n.op("Erf", [div])
    plus = n.op("Add", [erf, n.init(f"one_{n.n}", 1.0)])
    return n.op("Mul", [n.op("Mul", [x, plus]), n.init(f"half_{n.n}", 0.5)])


def convnext_block(n: Net, x: str, gamma: str = "", gelu: str = "erf", expand: int = 4) -> str:
    """One block on the NCHW map `x`; NHWC tensors record their dims as (h, w, c) in `n.dims`.

    gamma: "" (no layer scale), "last" (Mul by a [C] vector before the Transpose back, as in the
    original ConvNeXt) or "nhwc4" (a [1, 1, 1, C] vector there).
    """
    c, h, w = n.dims[x]
    k = n.n + 1
    d = n.conv(x, c, r=7, group=c)
    t = n.op("Transpose", [d], (h, w, c), perm=[0, 2, 3, 1])
    scale = n.init(f"ln{k}.scale", n.rng.uniform(0.5, 1.5, c))
    shift = n.init(f"ln{k}.bias", n.rng.standard_normal(c) * 0.1)
    ln = n.op("LayerNormalization", [t, scale, shift], axis=-1, epsilon=1e-6)
    w1 = n.init(f"pw1_{k}.w", n.rng.standard_normal((c, expand * c)) * 0.3)
    b1 = n.init(f"pw1_{k}.b", n.rng.standard_normal(expand * c) * 0.1)
    hid = n.op("Add", [b1, n.op("MatMul", [ln, w1], (h, w, expand * c))], (h, w, expand * c))  # bias first
    act = gelu_erf(n, hid) if gelu == "erf" else n.op("Gelu", [hid])
    w2 = n.init(f"pw2_{k}.w", n.rng.standard_normal((expand * c, c)) * 0.3)
    b2 = n.init(f"pw2_{k}.b", n.rng.standard_normal(c) * 0.1)
    y = n.op("Add", [b2, n.op("MatMul", [act, w2], (h, w, c))], (h, w, c))
    if gamma:
        shape = (c,) if gamma == "last" else (1, 1, 1, c)
        y = n.op("Mul", [n.init(f"gamma{k}", n.rng.uniform(0.1, 1.0, shape)), y], (h, w, c))
    back = n.op("Transpose", [y], (c, h, w), perm=[0, 3, 1, 2])
    return n.op("Add", [x, back])


def convnext(blocks: int = 1, gamma: str = "last", gelu: str = "erf", dim: int = 12) -> onnx.ModelProto:
    n = Net(hw=8, opset=20 if gelu == "gelu" else 17)
    x = n.conv("x", dim)
    for _ in range(blocks):
        x = convnext_block(n, x, gamma=gamma, gelu=gelu)
    return n.build(n.conv(x, 5, r=1))


def hidden_groups(analysis: Any) -> list[Any]:
    return [g for g in analysis.groups if any(p.startswith("matmul") for p in g.producers) and not g.frozen]


CASES = [
    pytest.param(1, "last", "erf", id="1block-gamma"),
    pytest.param(1, "", "erf", id="1block-no-gamma"),
    pytest.param(2, "last", "erf", id="2blocks-gamma"),
    pytest.param(2, "nhwc4", "erf", id="2blocks-gamma-1x1x1xC"),
    pytest.param(2, "", "gelu", id="2blocks-gelu-op"),
]


@pytest.mark.parametrize(("blocks", "gamma", "gelu"), CASES)
def test_hidden_width_is_free_and_layernormed_dim_frozen(blocks: int, gamma: str, gelu: str) -> None:
    model = convnext(blocks, gamma, gelu)
    analysis = analyze(model)
    hidden = hidden_groups(analysis)
    assert [g.width for g in hidden] == [48] * blocks
    for g in hidden:  # produced by pwconv1 alone, read by the GELU ops and pwconv2
        assert len(g.producers) == 1 and g.producers[0].startswith("matmul")
        assert sum(c.startswith("matmul") for c in g.consumers) == 1
        assert g.consumers[-1].startswith("matmul")
    assert {g.id for g in analysis.free_groups()} == {g.id for g in hidden}
    # the residual stream: stem conv, every depthwise conv and pwconv2 in one group, frozen by the
    # first LayerNorm over it
    stream = analysis.group("conv1")
    assert stream.frozen and stream.reason == f"LayerNormalization layernormalization4 {LN_REASON}"
    assert stream.width == 12 and len(stream.producers) == 1 + blocks
    assert sum(p.startswith("matmul") for p in stream.producers) == blocks
    assert any(c.startswith("layernormalization") for c in stream.consumers)


@pytest.mark.parametrize(("blocks", "gamma", "gelu"), CASES)
def test_padding_the_hidden_width_is_exact(blocks: int, gamma: str, gelu: str) -> None:
    model = convnext(blocks, gamma, gelu)
    analysis = analyze(model)
    plan = {g.id: g.width + 5 for g in hidden_groups(analysis)}  # 4·dim + 5
    padded, changes = apply_plan_report(model, plan, analysis)
    assert [c.padded for c in changes] == [5] * blocks
    onnx.checker.check_model(padded)
    onnx.shape_inference.infer_shapes(padded, strict_mode=True)
    inits = {t.name: numpy_helper.to_array(t) for t in padded.graph.initializer}
    assert all(inits[n].shape == (12, 53) for n in inits if n.startswith("pw1_") and n.endswith(".w"))
    assert all(inits[n].shape == (53, 12) for n in inits if n.startswith("pw2_") and n.endswith(".w"))
    assert all(inits[n].shape == (53,) for n in inits if n.startswith("pw1_") and n.endswith(".b"))
    # zero weight columns, zero bias, GELU(0) = 0, zero weight rows: the same function; the added
    # K terms are exact zeros, so onnxruntime gives bit-identical outputs
    np.testing.assert_allclose(
        run(padded), run(model), atol=1e-6, rtol=0
    )  # bit-equal here; MLAS may reorder elsewhere
    assert {g.id: g.width for g in analyze(padded).groups if g.id in plan} == plan


@pytest.mark.parametrize(("blocks", "gamma", "gelu"), CASES)
def test_trimming_the_hidden_width_gives_a_valid_model(blocks: int, gamma: str, gelu: str) -> None:
    model = convnext(blocks, gamma, gelu)
    analysis = analyze(model)
    plan = {g.id: g.width - 7 - i for i, g in enumerate(hidden_groups(analysis))}
    trimmed = apply_plan(model, plan, analysis)
    onnx.checker.check_model(trimmed)
    onnx.shape_inference.infer_shapes(trimmed, strict_mode=True)
    out = run(trimmed)
    assert out.shape == run(model).shape and np.isfinite(out).all()
    assert {g.id: g.width for g in analyze(trimmed).groups if g.id in plan} == plan


def test_pad_then_trim_back_finds_the_padded_channels_dead() -> None:
    model = convnext(2, "last")
    original = {g.id: g.width for g in hidden_groups(analyze(model))}
    padded = apply_plan(model, {gid: w + 5 for gid, w in original.items()})
    panalysis = analyze(padded)
    # pwconv2 reads the hidden channels on the last axis of an NHWC tensor
    dead = dead_channels_many(padded, panalysis, list(original))
    assert dead == {gid: list(range(w, w + 5)) for gid, w in original.items()}
    back, changes = apply_plan_report(padded, original, panalysis)
    assert all(c.trimmed == c.dead_trimmed == 5 for c in changes)
    orig_w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for t in back.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(t), orig_w[t.name])


@pytest.mark.parametrize("opset", [17, 14])
def test_torch_export_of_convnext_blocks(tmp_path: Path, opset: int, capsys, monkeypatch) -> None:
    """The graph torch's exporter writes (Identity-shared LayerNorm weights, Constant scalars). Below
    opset 17 it spells LayerNorm out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add on
    the channels-last tensor): that froze every width ("unknown op Pow", ReduceMean "expects channels
    on axis 1"); now it freezes what a LayerNormalization node would, the hidden widths stay free."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, dim: int, gamma: bool) -> None:
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.pw1, self.act, self.pw2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(torch.rand(dim)) if gamma else None

        def forward(self, x: Any) -> Any:
            y = self.pw2(self.act(self.pw1(self.norm(self.dw(x).permute(0, 2, 3, 1)))))
            if self.gamma is not None:
                y = self.gamma * y
            return x + y.permute(0, 3, 1, 2)

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 12, 4, stride=4), Block(12, True), Block(12, False), nn.Conv2d(12, 5, 1))
    path = tmp_path / "convnext.onnx"
    torch.onnx.export(net.eval(), torch.randn(1, 3, 32, 32), str(path), dynamo=False, opset_version=opset)
    model = load_model(path).model
    assert ("LayerNormalization" in {n.op_type for n in model.graph.node}) == (opset == 17)
    analysis = analyze(model)
    free = analysis.free_groups()
    assert [g.width for g in free] == [48, 48]
    assert [g.producers for g in free] == [["/1/pw1/MatMul"], ["/2/pw1/MatMul"]]
    stem = analysis.group("/0/Conv")
    reason = (
        f"LayerNormalization /1/norm/LayerNormalization {LN_REASON}"
        if opset == 17
        else "ReduceMean /1/norm/ReduceMean reduces over channels"
    )
    assert stem.frozen and stem.reason == reason
    # opset 14's two ReduceMeans per LayerNorm (mean, variance) leave one-channel statistics, counted
    # apart from the groups a user could tune; nothing else is one
    stats = [g for g in analysis.groups if g.statistic]
    assert len(stats) == (0 if opset == 17 else 4)
    assert all(
        g.width == 1 and g.frozen and g.producers[0].endswith(("ReduceMean", "ReduceMean_1")) for g in stats
    )
    assert not stem.statistic and not any(g.statistic for g in free)
    if opset == 14:
        code, out, _ = run_cli(monkeypatch, capsys, "analyze", str(path))
        others = len(analysis.groups) - 4
        assert code == 0 and f"{others} channel groups, 2 free (+4 one-channel statistics" in out
        assert "ReduceMean_1 reduces" not in out  # no row for them
    padded = apply_plan(model, {g.id: 53 for g in free}, analysis)
    np.testing.assert_allclose(run(padded), run(model), atol=1e-6, rtol=0)
    trimmed = apply_plan(model, {g.id: 41 for g in free}, analysis)
    onnx.checker.check_model(trimmed)
    assert run(trimmed).shape == run(model).shape


def test_tokens_rank3_matmul_on_the_last_axis() -> None:
    """Conv1d → Transpose(0,2,1) → [N, L, C] tokens → MatMul MLP → back: the hidden width is free."""
    n = Net(c=4, hw=1)
    n.dims["x"] = (4, 16, 0)  # [N, C, L]
    w0 = n.init("c1.w", n.rng.standard_normal((8, 4, 3)) * 0.3)
    c1 = n.op("Conv", ["x", w0], (8, 16, 0), kernel_shape=[3], pads=[1, 1])
    t = n.op("Transpose", [c1], (16, 8, 0), perm=[0, 2, 1])
    h = n.op("Relu", [n.op("MatMul", [t, n.init("m1.w", n.rng.standard_normal((8, 20)))], (16, 20, 0))])
    m2 = n.op("MatMul", [h, n.init("m2.w", n.rng.standard_normal((20, 8)))], (16, 8, 0))
    back = n.op("Transpose", [m2], (8, 16, 0), perm=[0, 2, 1])
    w3 = n.init("c2.w", n.rng.standard_normal((3, 8, 1)))
    out = n.op("Conv", [n.op("Add", [c1, back]), w3], (3, 16, 0), kernel_shape=[1])
    model = _build_1d(n, out)
    analysis = analyze(model)
    assert [(g.id, g.width) for g in analysis.free_groups()] == [("conv1", 8), ("matmul3", 20)]
    padded = apply_plan(model, {"conv1": 13, "matmul3": 27}, analysis)
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    assert run(apply_plan(model, {"conv1": 5, "matmul3": 11}, analysis)).shape == run(model).shape


def _build_1d(n: Net, out: str) -> onnx.ModelProto:
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16])
    o = helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, *n.dims[out][:2]])
    model = helper.make_model(helper.make_graph(n.nodes, "net", [inp], [o], n.inits))
    model.opset_import[0].version = n.opset
    model.ir_version = 8
    onnx.checker.check_model(model)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


# ----- what still freezes ---------------------------------------------------------------------


def test_transpose_there_and_back_is_free_and_exact() -> None:
    n = Net()
    a = n.cbr("x", 16)
    t = n.op("Transpose", [a], (8, 16, 8), perm=[0, 2, 1, 3])  # channels to axis 2 …
    r = n.op("Relu", [t])
    t2 = n.op("Transpose", [r], (16, 8, 8), perm=[0, 2, 1, 3])  # … and back to axis 1
    model = n.build(n.conv(t2, 4))
    analysis = analyze(model)
    assert not analysis.group("conv1").frozen
    padded = apply_plan(model, {"conv1": 21}, analysis)
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)


def test_transpose_then_reshape_that_mixes_channels_freezes() -> None:
    n = Net()
    a = n.cbr("x", 16)
    t = n.op("Transpose", [a], (8, 8, 16), perm=[0, 2, 3, 1])
    shape = "shape"
    n.inits.append(numpy_helper.from_array(np.array([1, 8, 128], dtype=np.int64), shape))
    r = n.op("Reshape", [t, shape], (8, 128, 0))  # channels merged with W: no channel axis left
    w = n.init("fc.w", np.ones((128, 16)))
    mm = n.op("MatMul", [r, w], (8, 16, 0))
    model = _build_outputs(n, mm, [1, 8, 16], also=n.conv(a, 4))
    groups = {g.id: g for g in analyze(model).groups}
    assert groups["conv1"].reason == "Reshape reshape5 mixes channels with other axes"


def test_channel_shuffle_through_transpose_still_freezes() -> None:
    n = Net()
    a = n.cbr("x", 16)
    n.inits.append(numpy_helper.from_array(np.array([1, 4, 4, 8, 8], dtype=np.int64), "s5"))
    n.inits.append(numpy_helper.from_array(np.array([1, 16, 8, 8], dtype=np.int64), "s4"))
    r = n.op("Reshape", [a, "s5"], (4, 4, 8))
    t = n.op("Transpose", [r], (4, 4, 8), perm=[0, 2, 1, 3, 4])
    back = n.op("Reshape", [t, "s4"], (16, 8, 8))
    model = n.build(n.conv(back, 4))
    g = {g.id: g for g in analyze(model).groups}["conv1"]
    assert g.frozen and g.reason == "Reshape reshape4 mixes channels with other axes"


@pytest.mark.parametrize("op", ["Conv", "MaxPool", "BatchNormalization"])
def test_nchw_ops_on_moved_channels_freeze(op: str) -> None:
    n = Net()
    a = n.cbr("x", 8)
    t = n.op("Transpose", [a], (8, 8, 8), perm=[0, 2, 3, 1])  # square: every shape still matches
    if op == "Conv":
        y = n.conv(t, 8, r=1)
    elif op == "MaxPool":
        y = n.op("MaxPool", [t], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1])
    else:
        y = n.bn(t)
    model = n.build(n.conv(y, 4))
    g = {g.id: g for g in analyze(model).groups}["conv1"]
    assert g.frozen and g.reason.endswith("expects channels on axis 1, not axis 3")


def test_add_of_channels_on_different_axes_freezes() -> None:
    n = Net()
    a, b = n.cbr("x", 8), n.cbr("x", 8)
    t = n.op("Transpose", [b], (8, 8, 8), perm=[0, 2, 3, 1])  # same shape, channels on axis 3
    model = n.build(n.conv(n.op("Add", [a, t]), 4))
    groups = {g.id: g for g in analyze(model).groups}
    reason = "Add add8 joins channels that lie on different axes"
    assert groups["conv1"].reason == reason and groups["conv4"].reason == reason


def test_matmul_over_a_spatial_axis_freezes() -> None:
    n = Net()
    a = n.cbr("x", 8)
    mm = n.op("MatMul", [a, n.init("w", np.ones((8, 8)))])  # NCHW @ [W, W']: contracts W
    model = n.build(n.conv(mm, 4))
    g = {g.id: g for g in analyze(model).groups}["conv1"]
    assert g.frozen and g.reason == "MatMul matmul4 contracts axis 3, not the channel axis 1"


@pytest.mark.parametrize(("axis", "free"), [(1, False), (-3, False), (-1, True)])
def test_nchw_layernorm_freezes_only_over_channels(axis: int, free: bool) -> None:
    n = Net()
    a = n.cbr("x", 16)
    shape = (1, 16, 8, 8)[axis:]
    scale = n.init("ln.scale", n.rng.uniform(0.5, 1.5, shape))
    shift = n.init("ln.bias", n.rng.standard_normal(shape))
    ln = n.op("LayerNormalization", [a, scale, shift], axis=axis)
    model = n.build(n.conv(n.op("Relu", [ln]), 4))
    analysis = analyze(model)
    g = analysis.group("conv1")
    assert g.frozen != free
    assert "layernormalization4" in g.consumers and len(analysis.groups) == 3  # input, conv1, output
    if free:  # each channel normalized over W alone: a padded channel holds the LN bias, read by zeros
        padded = apply_plan(model, {"conv1": 21}, analysis)
        np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    else:
        assert g.reason == f"LayerNormalization layernormalization4 {LN_REASON}"


def _build_outputs(n: Net, out: str, shape: list[int], also: str) -> onnx.ModelProto:
    c, h, w = n.dims["x"]
    inp = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])
    oc, oh, ow = n.dims[also]
    outs = [
        helper.make_tensor_value_info(out, TensorProto.FLOAT, shape),
        helper.make_tensor_value_info(also, TensorProto.FLOAT, [1, oc, oh, ow]),
    ]
    model = helper.make_model(helper.make_graph(n.nodes, "net", [inp], outs, n.inits))
    model.opset_import[0].version = n.opset
    model.ir_version = 8
    onnx.checker.check_model(model)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@pytest.mark.parametrize(("keepdims", "shape"), [(1, (1, 1, 8)), (0, (8, 0, 0))])
def test_reduce_over_spatial_axes_of_channels_last_keeps_the_channels(
    keepdims: int, shape: tuple[int, int, int]
) -> None:
    """NHWC → ReduceMean over H, W: the channels stay on the last axis with keepdims, land on axis 1
    without; either way the MatMul after it reads them and the conv's width stays free and exact."""
    n = Net()
    a = n.cbr("x", 8)
    t = n.op("Transpose", [a], (8, 8, 8), perm=[0, 2, 3, 1])
    r = n.op("ReduceMean", [t], shape, axes=[1, 2], keepdims=keepdims)
    y = n.op("MatMul", [r, n.init("w", n.rng.standard_normal((8, 5)))], (1, 1, 5) if keepdims else (5, 0, 0))
    model = n.build(y)
    analysis = analyze(model)
    assert [g.id for g in analysis.free_groups()] == ["conv1"]
    padded = apply_plan(model, {"conv1": 13}, analysis)
    np.testing.assert_allclose(run(padded), run(model), atol=1e-6, rtol=0)


@pytest.mark.parametrize(("exponent", "free"), [(2.0, True), (0.5, True), (-1.0, False)])
def test_pow_by_a_positive_constant_passes_channels(exponent: float, free: bool) -> None:
    """0 ** p is 0 for p > 0, so padded channels stay zero; a negative power would make them inf."""
    n = Net()
    a = n.cbr("x", 8)
    p = n.op("Pow", [n.op("Relu", [a]), n.init("p", np.array(exponent))])
    model = n.build(n.conv(p, 4))
    assert [g.id for g in analyze(model).free_groups()] == (["conv1"] if free else [])
    if free:
        np.testing.assert_allclose(run(apply_plan(model, {"conv1": 11})), run(model), atol=1e-5, rtol=0)


@pytest.mark.parametrize("op", ["Sqrt", "Pow"])
def test_sqrt_of_a_possibly_negative_padded_channel_freezes(op: str) -> None:
    """sqrt(1 - sigmoid(x)) with a per-channel 1: real channels are finite, but a padded channel holds
    0 - sigmoid(0) = -0.5 there (the constant pads with 0), whose square root is NaN; zero weights
    do not cancel a NaN, so padding the group made every output NaN. It freezes; after Sigmoid
    alone (never negative) the same op keeps the group free and the padding exact."""
    for gate, free in ((True, False), (False, True)):
        n = Net()
        a = n.cbr("x", 6)
        s = n.op("Sigmoid", [a])
        if gate:
            s = n.op("Sub", [n.init("one", np.ones((1, 6, 1, 1))), s], n.dims[s])
        half = [n.init("half", np.array(0.5))] if op == "Pow" else []
        model = n.build(n.conv(n.op(op, [s, *half]), 4))
        analysis = analyze(model)
        assert [g.id for g in analysis.free_groups()] == (["conv1"] if free else [])
        conv1 = next(g for g in analysis.groups if g.id == "conv1")
        assert free or "could read a negative padded channel (NaN)" in conv1.reason
        if free:
            padded = apply_plan(model, {"conv1": 11}, analysis)
            np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
            assert np.isfinite(run(padded)).all()


@ort_session.NOOP_REDUCE_BROKEN
def test_reduce_without_axes_and_noop_with_empty_axes_is_an_identity() -> None:
    """ReduceSum (opset ≥ 13) with no axes and noop_with_empty_axes=1 returns its input: the channels
    pass through (they froze as "reduces over channels")."""
    n = Net(opset=13)
    r = n.op("ReduceSum", [n.cbr("x", 8)], (8, 8, 8), noop_with_empty_axes=1)
    model = n.build(n.cbr(r, 4))
    analysis = analyze(model)
    assert not analysis.group("conv1").frozen
    padded = apply_plan(model, {"conv1": 13}, analysis)
    np.testing.assert_allclose(run(padded), run(model), atol=1e-6, rtol=0)
