"""INT8 models in QDQ form (QuantizeLinear/DequantizeLinear pairs): as free as their float twins.

Activation Q/DQ pairs with one scale pass channels through (a per-channel pair binds its scale and
zero point); a weight read through a DequantizeLinear of constants is bound like a float weight: the
int8 (or int32 bias) initializer on the same axes, padded with 0, and its per-channel scale (padded
with 1.0) and zero point (0). Zero points must be 0 there, as TensorRT requires.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import ort_session
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper
from ort_session import LEVELS, cpu_session

from deployopt.coupling import Analysis, analyze
from deployopt.errors import ModelError, PlanError
from deployopt.fidelity import CalibrationSet, compare_models
from deployopt.importance import dead_channels_many, filter_l1
from deployopt.model import load_model
from deployopt.surgery import apply_plan, apply_plan_report


def _run(model: onnx.ModelProto, level: ort.GraphOptimizationLevel = LEVELS[1], seed: int = 1) -> np.ndarray:
    sess = cpu_session(model, level)
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(seed).standard_normal(inp.shape).astype(np.float32)
    return sess.run(None, {inp.name: x})[0]


def qdq_net(weight_zp: int = 0, act_axis: int = 1, act_scales: int = 8) -> onnx.ModelProto:
    """conv1(3→6) → Relu → Q/DQ (per tensor, zero point 3) → conv_mid(6→8) → Relu → Q/DQ (per
    channel, one shared scale/zero point pair) → conv2(8→6, int32 bias) → + conv1's Q/DQ'd output →
    Q/DQ → GlobalAveragePool → Flatten → Gemm(6→5). Every weight is int8 → DequantizeLinear (per
    channel on axis 0, zero points `weight_zp` for conv_mid, 0 elsewhere)."""
    rng = np.random.default_rng(0)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(name: str, shape: tuple[int, ...], zp: int = 0) -> str:
        q = rng.integers(-127, 128, size=shape).astype(np.int8)
        scale = rng.uniform(0.005, 0.02, size=shape[0]).astype(np.float32)
        ins = [
            const(f"{name}_q", q),
            const(f"{name}_s", scale),
            const(f"{name}_zp", np.full(shape[0], zp, np.int8)),
        ]
        nodes.append(helper.make_node("DequantizeLinear", ins, [name], name=f"{name}_dq", axis=0))
        return name

    def qdq(x: str, name: str, scale: np.ndarray, zp: np.ndarray, **attrs: int) -> str:
        s, z = const(f"{name}_s", scale), const(f"{name}_zp", zp)
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [f"{name}_q"], name=f"{name}_q", **attrs))
        nodes.append(
            helper.make_node("DequantizeLinear", [f"{name}_q", s, z], [name], name=f"{name}_dq", **attrs)
        )
        return name

    bias2 = const("b2_q", rng.integers(-500, 500, size=6).astype(np.int32))
    bias2_s = const("b2_s", rng.uniform(1e-4, 2e-4, size=6).astype(np.float32))
    nodes.append(helper.make_node("DequantizeLinear", [bias2, bias2_s], ["b2"], name="b2_dq", axis=0))
    pads = {"pads": [1, 1, 1, 1]}
    bias1 = const("b1", rng.standard_normal(6).astype(np.float32))  # a float (BN-folded) bias
    nodes += [
        helper.make_node("Conv", ["x", weight("w1", (6, 3, 3, 3)), bias1], ["c1"], name="conv1", **pads),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
    ]
    d1 = qdq("r1", "a1", np.array(0.02, np.float32), np.array(3, np.int8))
    nodes += [
        helper.make_node(
            "Conv", [d1, weight("wm", (8, 6, 3, 3), weight_zp)], ["cm"], name="conv_mid", **pads
        ),
        helper.make_node("Relu", ["cm"], ["rm"], name="relu_mid"),
    ]
    scales = rng.uniform(0.01, 0.03, size=act_scales).astype(np.float32)
    dm = qdq("rm", "am", scales, rng.integers(-4, 4, size=act_scales).astype(np.int8), axis=act_axis)
    nodes += [
        helper.make_node("Conv", [dm, weight("w2", (6, 8, 3, 3)), "b2"], ["c2"], name="conv2", **pads),
        helper.make_node("Add", ["c2", d1], ["s"], name="add"),
    ]
    ds = qdq("s", "as", np.array(0.05, np.float32), np.array(0, np.int8))
    nodes += [
        helper.make_node("GlobalAveragePool", [ds], ["gp"], name="gap"),
        helper.make_node("Flatten", ["gp"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", weight("fc_w", (5, 6)), const("fc_b", np.zeros(5, np.float32))], ["y"],
                         name="fc", transB=1),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "qdq_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_hand_built_qdq_groups_are_free() -> None:
    analysis = analyze(qdq_net())
    free = {g.id: g.width for g in analysis.free_groups()}
    assert free == {"conv1": 6, "conv_mid": 8}
    frozen = {g.id: g.reason for g in analysis.groups if g.frozen}
    assert set(frozen) == {"input:x", "fc"}
    assert [c.name for c in analysis.convs] == ["conv1", "conv_mid", "conv2"]


@pytest.mark.parametrize("level", LEVELS, ids=["no-ort-optimizations", "ort-optimizations"])
def test_hand_built_qdq_pad_is_exact_and_trims_back(level: ort.GraphOptimizationLevel) -> None:
    model = qdq_net()
    analysis = analyze(model)
    padded = apply_plan(model, {"conv1": 16, "conv_mid": 13}, analysis)
    # bit-identical: every padded term is an exact 0 (int8 0 × scale, and 0 activations, which a
    # Q/DQ pair maps back to 0 whatever its zero point); onnxruntime sums the same nonzero terms
    np.testing.assert_array_equal(_run(padded, level), _run(model, level))
    new, old = _inits(padded), _inits(model)
    assert new["w1_q"].dtype == np.int8 and new["w1_q"].shape == (16, 3, 3, 3)
    assert not new["w1_q"][6:].any() and np.array_equal(new["w1_q"][:6], old["w1_q"])
    assert np.array_equal(new["w1_s"][6:], np.ones(10, np.float32)) and not new["w1_zp"][6:].any()
    assert new["wm_q"].shape == (13, 16, 3, 3) and not new["wm_q"][:, 6:].any() and not new["wm_q"][8:].any()
    assert new["am_s"].shape == (13,) and np.all(new["am_s"][8:] == 1) and not new["am_zp"][8:].any()
    assert new["w2_q"].shape == (16, 13, 3, 3) and not new["w2_q"][6:].any() and not new["w2_q"][:, 8:].any()
    assert new["b2_q"].dtype == np.int32 and new["b2_q"].shape == (16,) and not new["b2_q"][6:].any()
    assert new["fc_w_q"].shape == (5, 16) and not new["fc_w_q"][:, 6:].any()
    assert new["fc_w_s"].shape == (5,)  # the classifier's output channels did not change
    # the zero filters are found dead, so trimming back to the old widths drops exactly them
    again = analyze(padded)
    assert dead_channels_many(padded, again, ["conv1", "conv_mid"]) == {
        "conv1": list(range(6, 16)),
        "conv_mid": list(range(8, 13)),
    }
    back, report = apply_plan_report(padded, {"conv1": 6, "conv_mid": 8}, again)
    assert [(c.trimmed, c.dead_trimmed) for c in report] == [(10, 10), (5, 5)]
    restored = _inits(back)
    assert restored.keys() == old.keys()
    for name, value in old.items():
        assert restored[name].dtype == value.dtype and np.array_equal(restored[name], value), name


def test_hand_built_qdq_trim_validates_and_ranks_by_dequantized_weights() -> None:
    model = qdq_net()
    analysis = analyze(model)
    inits = _inits(model)
    # the ranking reads int8 × scale, not the raw integers
    expected = np.abs(inits["w1_q"].astype(np.float64) * inits["w1_s"][:, None, None, None]).sum(
        axis=(1, 2, 3)
    )
    expected += np.abs(inits["b1"]) + np.abs(inits["w2_q"] * inits["w2_s"][:, None, None, None]).sum(
        axis=(1, 2, 3)
    )
    expected += np.abs(inits["b2_q"] * inits["b2_s"])
    np.testing.assert_allclose(filter_l1(analysis, "conv1"), expected, rtol=1e-6)
    trimmed = apply_plan(model, {"conv1": 4, "conv_mid": 5}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    onnx.shape_inference.infer_shapes(trimmed, strict_mode=True)
    assert _run(trimmed).shape == (1, 5)
    new = _inits(trimmed)
    assert new["w1_q"].shape == (4, 3, 3, 3) and new["w1_q"].dtype == np.int8
    assert new["am_s"].shape == (5,) and new["b2_q"].shape == (4,) and new["fc_w_q"].shape == (5, 4)


@pytest.mark.parametrize(
    ("kwargs", "group", "reason"),
    [
        ({"weight_zp": 2}, "conv1", "DequantizeLinear wm_dq quantizes weights with a nonzero zero point"),
        ({"act_axis": 2}, "conv_mid", "QuantizeLinear am_q quantizes per entry of axis 2, not per channel"),
    ],
)
def test_qdq_freezes_with_reasons(kwargs: dict[str, int], group: str, reason: str) -> None:
    analysis = analyze(qdq_net(**kwargs))
    frozen = {g.reason for g in analysis.groups if g.frozen}
    assert any(r.startswith(reason) for r in frozen), frozen
    assert not any(g.id == group for g in analysis.free_groups())


def _scaled_net(per_channel: bool) -> onnx.ModelProto:
    """conv(3→6) → Mul by a quantized [1, 6, 1, 1] constant → conv(6→4): the constant's padded
    entries must dequantize to Mul's neutral 1, which only a scale along the channels (padded with
    1.0) can give exactly; one scale for all would make the int8 pad 1/scale."""
    rng = np.random.default_rng(0)
    scale = np.full(6, 0.25, np.float32) if per_channel else np.array(0.25, np.float32)
    inits = [
        numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((4, 6, 1, 1)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.integers(1, 8, size=(1, 6, 1, 1)).astype(np.int8), "g_q"),
        numpy_helper.from_array(scale, "g_s"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
        helper.make_node("DequantizeLinear", ["g_q", "g_s"], ["g"], name="g_dq", axis=1),
        helper.make_node("Mul", ["c1", "g"], ["m"], name="mul"),
        helper.make_node("Conv", ["m", "w2"], ["y"], name="conv2"),
    ]
    graph = helper.make_graph(
        nodes,
        "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def test_quantized_per_channel_constant_pads_with_its_neutral_value() -> None:
    model = _scaled_net(per_channel=True)
    analysis = analyze(model)
    assert [g.id for g in analysis.free_groups()] == ["conv1"]
    padded = apply_plan(model, {"conv1": 8}, analysis)
    new = _inits(padded)
    assert new["g_q"].dtype == np.int8 and new["g_q"].ravel().tolist()[6:] == [1, 1]
    assert new["g_s"].tolist()[6:] == [1.0, 1.0]
    np.testing.assert_array_equal(_run(padded), _run(model))


def test_quantized_per_tensor_constant_that_needs_a_nonzero_pad_freezes() -> None:
    analysis = analyze(_scaled_net(per_channel=False))
    assert not analysis.free_groups()
    reasons = {g.reason for g in analysis.groups}
    assert "DequantizeLinear g_dq: a pad of 1 cannot be quantized exactly" in reasons


# ----- a realistic model: a float CNN quantized by onnxruntime.quantization ---------------------


class _Calibration:
    """Two random images: enough for quantize_static to pick scales (the values do not matter here)."""

    def __init__(self, name: str) -> None:
        rng = np.random.default_rng(0)
        self._batches = iter(
            [{name: rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(2)]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)

    def rewind(self) -> None:  # the CalibrationDataReader interface
        pass


@pytest.fixture(scope="module")
def quantized_resnet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A narrow CIFAR ResNet56 (float) and its QDQ twin: int8 activations and weights, symmetric,
    per-channel weights, BatchNorms left in place (no pre-processing), as quantize_static writes it."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    from deployopt.zoo.cifar import resnet56_cifar

    folder = tmp_path_factory.mktemp("qdq")
    float_path, qdq_path = folder / "float.onnx", folder / "qdq.onnx"
    model = resnet56_cifar(inner_widths=[4] * 9 + [6] * 9 + [12] * 9, stage_widths=(8, 16, 24))
    onnx.save(model, float_path)
    quantization.quantize_static(
        str(float_path),
        str(qdq_path),
        _Calibration(model.graph.input[0].name),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=True,
        activation_type=quantization.QuantType.QInt8,
        weight_type=quantization.QuantType.QInt8,
        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
    )
    return float_path, qdq_path


def _producer_sets(analysis: Analysis) -> set[frozenset[str]]:
    return {frozenset(g.producers) for g in analysis.free_groups()}


@ort_session.INT8_KERNELS_INEXACT
def test_quantize_static_resnet_is_as_free_as_its_float_twin(quantized_resnet: tuple[Path, Path]) -> None:
    float_path, qdq_path = quantized_resnet
    loaded = load_model(qdq_path)
    qdq = loaded.model
    assert not loaded.notices  # the quantized weights are not folded back into float ones
    kinds = {n.op_type for n in qdq.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= kinds
    float_analysis, analysis = analyze(load_model(float_path).model), analyze(qdq)
    # the same groups, made by the same convs; a group's id (its first producer in node order) can
    # differ: the quantizer writes a block's shortcut conv before its second conv
    assert len(analysis.free_groups()) == len(float_analysis.free_groups()) == 30
    assert _producer_sets(analysis) == _producer_sets(float_analysis)
    frozen = sorted(g.reason for g in analysis.groups if g.frozen)
    assert frozen == ["feeds the graph output 'logits'", "graph input 'input'"]
    plan = {g.id: g.width + 3 for g in analysis.free_groups()}
    padded = apply_plan(qdq, plan, analysis)
    for level in LEVELS:
        np.testing.assert_array_equal(_run(padded, level), _run(qdq, level))
    again = analyze(padded)
    back = apply_plan(padded, {g.id: g.width for g in analysis.free_groups()}, again)
    restored, old = _inits(back), _inits(qdq)
    assert all(np.array_equal(restored[k], v) and restored[k].dtype == v.dtype for k, v in old.items())
    trimmed = apply_plan(qdq, {g.id: g.width - 1 for g in analysis.free_groups()}, analysis)
    assert _run(trimmed).shape == (1, 10)


def test_fidelity_sees_an_exact_pad_of_an_int8_model_as_exact(quantized_resnet: tuple[Path, Path]) -> None:
    """The fidelity check runs onnxruntime's fused int8 convs. On x86 CPUs without VNNI their int16
    pair sums saturate differently once channels are padded: this pad measured max error 2.27,
    cosine 0.93, top-1 87.5 % on an AVX2 CPU, and failed, until the check asked for onnxruntime's
    U8U8 kernels. (On a CPU with VNNI the kernels are exact either way.)"""
    qdq = load_model(quantized_resnet[1]).model
    analysis = analyze(qdq)
    padded = apply_plan(qdq, {g.id: g.width + 3 for g in analysis.free_groups()}, analysis)
    rng = np.random.default_rng(0)
    name = qdq.graph.input[0].name
    samples = [{name: rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(16)]
    report = compare_models(qdq, padded, CalibrationSet(samples, "random", True))
    assert report.check() == []
    assert report.max_abs_error < 1e-4 and report.top1_agreement == 1.0


def test_qdq_model_through_the_cli(
    quantized_resnet: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    _, qdq_path = quantized_resnet
    code, out, _ = run_cli(monkeypatch, capsys, "analyze", str(qdq_path), "--json")
    assert code == 0
    groups = json.loads(out)["groups"]
    free = [g for g in groups if not g["frozen"]]
    assert len(free) == 30
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {free[0]["id"]: free[0]["width"] + 4}}))
    padded_path = tmp_path / "padded.onnx"
    code, out, _ = run_cli(
        monkeypatch, capsys, "apply", str(qdq_path), "--plan", str(plan), "-o", str(padded_path)
    )
    assert code == 0 and "pad +4" in out
    qdq, padded = onnx.load(qdq_path), onnx.load(padded_path)
    np.testing.assert_array_equal(_run(padded), _run(qdq))
    outdir = tmp_path / "opt"
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "optimize",
        str(qdq_path),
        "--target",
        "orin-nano-8gb",
        "--force",
        "-o",
        str(outdir),
    )
    assert code == 0, err
    result = onnx.load(outdir / "model.onnx")
    # still an INT8 model: the same Q/DQ nodes, int8 weights (TensorRT builds INT8 from them)
    assert [n.op_type for n in result.graph.node] == [n.op_type for n in qdq.graph.node]
    widths = json.loads((outdir / "plan.json").read_text())["widths"]
    assert any(w != g["width"] for g in free for gid, w in widths.items() if gid == g["id"])
    w = {t.name: t.data_type for t in result.graph.initializer}
    assert all(w[t.name] == t.data_type for t in qdq.graph.initializer)
    # no --dtype: a Q/DQ model is INT8 where the backend runs int8 (the wave model here), as TensorRT
    # builds it; its float twin stays at fp16
    assert json.loads((outdir / "report.json").read_text())["dtype"] == "int8"
    float_path = quantized_resnet[0]
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(float_path), "--target", "orin-nano-8gb", "--force",
        "-o", str(tmp_path / "opt_float"),
    )  # fmt: skip
    assert code == 0, err
    assert json.loads((tmp_path / "opt_float" / "report.json").read_text())["dtype"] == "fp16"


def test_optimize_on_ort_times_the_model_and_its_convs_in_the_precision_it_is_typed_in(
    quantized_resnet: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """onnxruntime runs a model as it is typed: optimize on a Q/DQ model (or one typed fp16) times
    its per-layer table in Q/DQ (fp16) convs and says that dtype in the report. Before, the table
    was timed in fp32 convs and the report said fp32, beside end-to-end timings of the int8 model."""
    from deployopt.precision import write_fp16

    float_path, qdq_path = quantized_resnet
    typed = write_fp16(float_path, tmp_path / "fp16.onnx")
    cache = tmp_path / "cache"
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(cache))
    for model, dtype, phrase in (
        (qdq_path, "int8", "int8 from the model's Q/DQ nodes"),
        (typed, "fp16", "fp16 as typed"),
    ):
        out = tmp_path / dtype
        code, stdout, err = run_cli(
            monkeypatch, capsys, "optimize", str(model), "--target", "orin-nano-8gb", "--backend", "ort",
            "-o", str(out), "--max-evals", "4", "--runs", "5", "--warmup", "0", "--sweep-runs", "2", "--json",
        )  # fmt: skip
        assert code == 0, err
        report = json.loads(stdout)
        assert report["dtype"] == dtype and report["per_layer_sweep"]["measured"] > 0
        assert f"backend: ort; dtype: {dtype}" in (out / "report.md").read_text()
        assert phrase in report["timings"]["input"]["timed"]
        entries = list((cache / "lut").glob(f"ort-*/{dtype}*/*.json"))  # the per-layer table's convs
        assert entries and all(phrase in path.read_text() for path in entries)


def test_default_dtype_is_int8_for_a_qdq_model_where_the_backend_runs_int8(
    quantized_resnet: tuple[Path, Path], tmp_path: Path
) -> None:
    from deployopt.backends.base import default_dtype, get_backend
    from deployopt.model import file_has_qdq

    float_path, qdq_path = quantized_resnet
    assert file_has_qdq(qdq_path) and not file_has_qdq(float_path)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    assert not file_has_qdq(broken) and not file_has_qdq(tmp_path / "missing.onnx")
    for name in ("model", "tensorrt", "trtexec"):  # they run int8 (tensorrt/trtexec: the class, no GPU)
        backend = get_backend(name)
        assert default_dtype(backend, qdq_path) == "int8"
        assert default_dtype(backend, float_path) != "int8"
    ort = get_backend("ort")  # runs a model as it is typed: a Q/DQ model's int8, a float one's fp32
    assert (
        default_dtype(ort, qdq_path) == "int8" and default_dtype(ort, float_path, deployment=True) == "fp32"
    )
    assert default_dtype(ort, broken) == "fp32" and default_dtype(ort, None, deployment=True) == "fp32"
    # bench's default for a float model is unchanged: the backend's first dtype (TensorRT: fp32),
    # optimize's the deployment case, fp16
    assert default_dtype(get_backend("tensorrt"), float_path) == "fp32"
    assert default_dtype(get_backend("tensorrt"), float_path, deployment=True) == "fp16"


def test_float_weight_through_quantize_and_dequantize_is_bound() -> None:
    """pytorch-quantization's form: float weight → QuantizeLinear → DequantizeLinear → Conv."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(np.full(6, 0.02, np.float32), "w1_s"),
        numpy_helper.from_array(np.zeros(6, np.int8), "w1_zp"),
        numpy_helper.from_array(rng.standard_normal((4, 6, 1, 1)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["w1", "w1_s", "w1_zp"], ["w1_q"], name="w1_quant", axis=0),
        helper.make_node("DequantizeLinear", ["w1_q", "w1_s", "w1_zp"], ["w1_dq"], name="w1_dequant", axis=0),
        helper.make_node("Conv", ["x", "w1_dq"], ["c1"], name="conv1"),
        helper.make_node("Conv", ["c1", "w2"], ["y"], name="conv2"),
    ]
    graph = helper.make_graph(
        nodes,
        "fake_quant",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    analysis = analyze(model)
    assert [g.id for g in analysis.free_groups()] == ["conv1"]
    padded = apply_plan(model, {"conv1": 8}, analysis)
    new = _inits(padded)
    assert new["w1"].shape == (8, 3, 3, 3) and not new["w1"][6:].any()
    assert new["w1_s"].tolist()[6:] == [1.0, 1.0] and new["w1_zp"].shape == (8,)
    np.testing.assert_array_equal(_run(padded), _run(model))


def test_quantized_constants_read_as_onnx_computes_them() -> None:
    """What the analysis reads for a Q/DQ of constants (importance ranks by it) is what onnx computes:
    a per-axis DequantizeLinear on axis 1 with nonzero zero points, a QuantizeLinear that rounds
    half to even and saturates."""
    from onnx.reference import ReferenceEvaluator

    from deployopt.coupling.registry import CouplingState

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.integers(-128, 128, size=(3, 4, 2, 2)).astype(np.int8), "q"),
        numpy_helper.from_array(rng.uniform(0.01, 0.1, size=4).astype(np.float32), "s"),
        numpy_helper.from_array(np.array([-3, 0, 2, 5], np.int8), "zp"),
        numpy_helper.from_array(
            np.array([[0.5, 1.5, 2.5, -0.5], [300.0, -300.0, 0.75, -0.25]], np.float32), "f"
        ),
        numpy_helper.from_array(np.array(0.5, np.float32), "fs"),
        numpy_helper.from_array(np.array(128, np.uint8), "fzp"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["dq"], name="dq", axis=1),
        helper.make_node("QuantizeLinear", ["f", "fs", "fzp"], ["fq"], name="fq"),
    ]
    graph = helper.make_graph(
        nodes,
        "consts",
        [],
        [
            helper.make_tensor_value_info("dq", TensorProto.FLOAT, [3, 4, 2, 2]),
            helper.make_tensor_value_info("fq", TensorProto.UINT8, [2, 4]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    want_dq, want_fq = ReferenceEvaluator(model).run(None, {})
    st = CouplingState(model)
    got_dq, got_fq = st.const("dq"), st.const("fq")
    assert got_dq is not None and got_fq is not None
    assert got_dq.dtype == np.float32 and got_fq.dtype == np.uint8
    np.testing.assert_allclose(got_dq, want_dq, rtol=1e-6)
    np.testing.assert_array_equal(got_fq, want_fq)
    assert got_fq.tolist() == [[129, 131, 133, 127], [255, 0, 130, 128]]  # 1.5 → 2, -0.5 → 0: half to even


def test_quantized_weight_read_by_an_op_that_does_not_bind_it_freezes() -> None:
    """conv1's weight w (int8 → DequantizeLinear) is also read through an Identity by conv2: padding
    conv1 would resize conv2's weight too, so conv1's channels freeze."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.integers(-127, 128, size=(6, 3, 3, 3)).astype(np.int8), "w_q"),
        numpy_helper.from_array(np.full(6, 0.02, np.float32), "w_s"),
        numpy_helper.from_array(rng.standard_normal((4, 6, 1, 1)).astype(np.float32), "w3"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], name="w_dq", axis=0),
        helper.make_node("Conv", ["x", "w"], ["c1"], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w3"], ["y"], name="conv3"),
        helper.make_node("Identity", ["w"], ["w_copy"], name="copy"),
        helper.make_node("Conv", ["x", "w_copy"], ["y2"], name="conv2"),
    ]
    graph = helper.make_graph(
        nodes,
        "shared_qweight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4]),
            helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 6, 4, 4]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    analysis = analyze(model)
    groups = {g.id: g for g in analysis.groups}
    assert groups["conv1"].frozen, [(g.id, g.reason) for g in analysis.groups]
    assert groups["conv1"].reason == "quantized weight 'w' is shared by several ops"


def test_wrong_input_channels_of_a_qdq_model_are_one_error(tmp_path: Path) -> None:
    """The Conv channel check reads a quantized weight's shape through its DequantizeLinear. (The
    channel dim is made dynamic: --input-shape may not change a static one, which is refused first.)"""
    path = tmp_path / "qdq.onnx"
    model = qdq_net()
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "channels"
    onnx.save(model, str(path))
    with pytest.raises(ModelError, match=r"Conv 'conv1' gets 4 input channels, but its weights take 3 "):
        load_model(path, {"x": [1, 4, 8, 8]})


@pytest.mark.parametrize("form", ["int4", "blocked"])
def test_weights_quantized_in_a_form_the_analysis_does_not_read_freeze_their_conv(form: str) -> None:
    """An int4 weight (packed two to a byte) or one quantized in blocks is not read as a constant:
    conv1's weight is then computed, and its channels freeze instead of being resized wrongly."""
    rng = np.random.default_rng(0)
    if form == "int4":
        q = helper.make_tensor("w_q", TensorProto.INT4, [6, 4, 3, 3], rng.integers(-8, 8, size=216).tolist())
        scale, attrs = np.full(6, 0.02, np.float32), {"axis": 0}
    else:
        q = numpy_helper.from_array(rng.integers(-127, 128, size=(6, 4, 3, 3)).astype(np.int8), "w_q")
        scale, attrs = np.full((6, 2, 3, 3), 0.02, np.float32), {"axis": 1, "block_size": 2}
    inits = [
        q,
        numpy_helper.from_array(scale, "w_s"),
        numpy_helper.from_array(rng.standard_normal((5, 6, 1, 1)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], name="w_dq", **attrs),
        helper.make_node("Conv", ["x", "w"], ["c1"], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2"),
    ]
    graph = helper.make_graph(
        nodes,
        "odd_weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 4, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    analysis = analyze(model)
    assert not analysis.free_groups(), [(g.id, g.reason) for g in analysis.groups]
    assert analysis.group("conv1").frozen


def test_a_float_models_plan_applies_to_its_qdq_twin(quantized_resnet: tuple[Path, Path]) -> None:
    """Group ids are first producers in node order, and the quantizer writes a block's shortcut conv
    before its second conv, so some ids differ between the twins; a plan keyed by any producer of a
    group finds it, so the float model's plan (as `optimize` writes it) applies to the QDQ model."""
    float_path, qdq_path = quantized_resnet
    float_analysis, analysis = analyze(load_model(float_path).model), analyze(load_model(qdq_path).model)
    renamed = {g.id for g in float_analysis.free_groups()} - {g.id for g in analysis.free_groups()}
    assert renamed  # the case this is about
    plan = {g.id: g.width + 2 + i % 3 for i, g in enumerate(float_analysis.free_groups())}
    padded = apply_plan(load_model(qdq_path).model, plan, analysis)
    widths = {frozenset(g.producers): g.width for g in analyze(padded).free_groups()}
    assert widths == {frozenset(g.producers): plan[g.id] for g in float_analysis.free_groups()}
    gid = next(iter(renamed))
    other = analysis.group(gid).id
    with pytest.raises(PlanError, match="two widths"):
        apply_plan(load_model(qdq_path).model, {gid: 8, other: 9}, analysis)
