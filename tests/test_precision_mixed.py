"""What precision a model is typed in, where it is not one plain type: convs/matmuls in fp32 and fp16
both (mixed), an fp32 model with a Cast to fp16 and back, a bf16 model on onnxruntime, a Q/DQ model
quantized to 16 bits (W8A16) and one in onnxruntime's QOperator format (QLinearConv)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import ort_session
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt.errors import DeployoptWarning, ModelError
from deployopt.model import has_qdq
from deployopt.precision import is_low_precision, to_fp16, typed_precision

RNG = np.random.default_rng(0)


def _model(nodes: list, inputs: list, outputs: list, inits: list, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if opset >= 21:
        model.ir_version = 10
    return model


def _w(shape: tuple[int, ...], name: str, dtype: Any = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(dtype), name)


def fp32_convs_fp16_classifier() -> onnx.ModelProto:
    """Two fp32 convs, then GlobalAveragePool -> Flatten -> Cast(fp16) -> Gemm 'fc' with fp16
    weights -> Cast(fp32): the repro's n8_mixed.onnx (a classifier exported in half)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ra"], name="relu1"),
        helper.make_node("Conv", ["ra", "w2"], ["b"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["b"], ["rb"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["rb"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Cast", ["f"], ["f16"], name="to_half", to=TensorProto.FLOAT16),
        helper.make_node("Gemm", ["f16", "fc_w", "fc_b"], ["y16"], name="fc", transB=1),
        helper.make_node("Cast", ["y16"], ["y"], name="to_float", to=TensorProto.FLOAT),
    ]
    inits = [
        _w((4, 3, 3, 3), "w1"),
        _w((8, 4, 3, 3), "w2"),
        _w((5, 8), "fc_w", np.float16),
        _w((5,), "fc_b", np.float16),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        inits,
    )


def fp16_convs_one_kept_fp32() -> onnx.ModelProto:
    """fp16 conv, an fp32 conv between Casts, fp16 conv: as ModelOpt AutoCast keeps a layer in fp32."""
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
        helper.make_node("Conv", ["x16", "w1"], ["a16"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["a16"], ["a"], to=TensorProto.FLOAT),
        helper.make_node("Conv", ["a", "w2"], ["b"], name="conv2_kept_fp32", pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["b"], ["b16"], to=TensorProto.FLOAT16),
        helper.make_node("Conv", ["b16", "w3"], ["y16"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
    ]
    inits = [_w((4, 3, 3, 3), "w1", np.float16), _w((4, 4, 3, 3), "w2"), _w((6, 4, 3, 3), "w3", np.float16)]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])],
        inits,
    )


def conv_cast_pair() -> onnx.ModelProto:
    """conv -> Cast(fp16) -> Cast(fp32) -> Relu -> conv: the repro's n9_castpair.onnx."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["a"], ["a16"], name="cast_fp16", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["a16"], ["a32"], name="cast_fp32", to=TensorProto.FLOAT),
        helper.make_node("Relu", ["a32"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])],
        [_w((4, 3, 3, 3), "w1"), _w((6, 4, 3, 3), "w2")],
    )


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort_session.session(model).run(None, {"x": x})[0]


# ---- bug 2: any one fp16 conv/matmul made the model "already typed fp16"


def test_fp32_convs_with_an_fp16_classifier_are_mixed_not_fp16() -> None:
    """Its convs take fp32 and its Gemm fp16: it was taken for an fp16 model (any one conv/matmul in
    fp16 sufficed), so `deployopt fp16` copied it unconverted and records called it fp16."""
    model = fp32_convs_fp16_classifier()
    assert not is_low_precision(model)
    assert typed_precision(model) == "mixed fp32/fp16"


def test_a_mixed_model_is_converted_with_a_warning_and_computes_the_same() -> None:
    model = fp32_convs_fp16_classifier()
    with pytest.warns(DeployoptWarning, match=r"was typed mixed fp32/fp16 \(Gemm 'fc' takes fp16 \(1 of 3 "):
        fp16 = to_fp16(model)
    assert fp16 is not model and is_low_precision(fp16) and typed_precision(fp16) == "fp16"
    weights = {i.name: i.data_type for i in fp16.graph.initializer}
    assert set(weights.values()) == {TensorProto.FLOAT16}, weights
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    a, b = _run(model, x), _run(fp16, x)
    assert b.dtype == np.float32 and np.abs(a - b).max() <= 0.01 * np.abs(a).max()
    with warnings.catch_warnings():  # typed throughout: passed through, with no second warning
        warnings.simplefilter("error")
        assert to_fp16(fp16) is fp16


def test_a_layer_kept_fp32_between_fp16_convs_is_converted_too() -> None:
    model = fp16_convs_one_kept_fp32()
    assert typed_precision(model) == "mixed fp32/fp16" and not is_low_precision(model)
    with pytest.warns(DeployoptWarning, match=r"Conv 'conv1', Conv 'conv3' take fp16 \(2 of 3 convs"):
        fp16 = to_fp16(model)
    assert typed_precision(fp16) == "fp16"
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    a, b = _run(model, x), _run(fp16, x)
    assert np.abs(a - b).max() <= 0.01 * np.abs(a).max()


def test_a_mix_of_fp32_and_bf16_is_refused_in_one_line() -> None:
    """Typing its fp32 MatMul fp16 would leave fp16 and bf16 in one model."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
        helper.make_node("Cast", ["a"], ["a16"], to=TensorProto.BFLOAT16),
        helper.make_node("MatMul", ["a16", "w2"], ["y16"], name="mm2"),
        helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
    ]
    w2 = helper.make_tensor("w2", TensorProto.BFLOAT16, [4, 4], [0] * 16)
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [_w((4, 4), "w1"), w2],
    )
    assert typed_precision(model) == "mixed fp32/bf16"
    with pytest.raises(
        ModelError, match=r"^fp16 conversion: the model is typed mixed fp32/bf16 \(MatMul 'mm2'"
    ):
        to_fp16(model)


def test_pure_models_keep_their_precision() -> None:
    """The fix changes nothing for a model all fp32 or all fp16 (converted, or passed through)."""
    fp32 = conv_cast_pair()
    assert typed_precision(fp32) == "fp32" and not is_low_precision(fp32)
    fp16 = to_fp16(fp32)
    assert typed_precision(fp16) == "fp16" and is_low_precision(fp16) and to_fp16(fp16) is fp16


def test_fp16_command_converts_a_mixed_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src, dest = tmp_path / "n8_mixed.onnx", tmp_path / "n8_h.onnx"
    onnx.save(fp32_convs_fp16_classifier(), src)
    code, out, err = run_cli(monkeypatch, capsys, "fp16", str(src), "-o", str(dest))
    assert code == 0, err
    assert "already typed" not in out and f"wrote {dest} (fp16 inside, fp32 inputs and outputs)" in out
    assert "warning: fp16 conversion: the model was typed mixed fp32/fp16" in " ".join(err.split())
    assert typed_precision(onnx.load(dest)) == "fp16"


def test_ort_refuses_a_mixed_model_in_one_line_whatever_the_dtype(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench -b ort recorded dtype fp16 for it, and refused --dtype fp32 ("runs in fp16")."""
    src = tmp_path / "n8_mixed.onnx"
    onnx.save(fp32_convs_fp16_classifier(), src)
    for dtype in ([], ["--dtype", "fp32"], ["--dtype", "fp16"]):
        code, _out, err = run_cli(
            monkeypatch, capsys, "bench", str(src), "-b", "ort", "--runs", "3", "--warmup", "1", *dtype
        )
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1, (dtype, err)
        assert lines[0].startswith(
            "error: backend 'ort' cannot run mixed fp32/fp16 (it runs fp32, fp16, int8): n8_mixed.onnx is "
            "typed mixed fp32/fp16, and a run records one precision; type it fp16 throughout with "
            "`deployopt fp16` first"
        ), lines


def test_optimize_checks_a_mixed_model_at_fp16_tolerance() -> None:
    """Its fp16 ops round as an fp16 model's: the lossless check takes fp16's bound, not fp32's."""
    from deployopt.optimize import LOSSLESS_RTOL_LOW_PRECISION, Optimizer

    opt = Optimizer.__new__(Optimizer)
    opt.model = fp32_convs_fp16_classifier()
    assert opt._lossless_rtol() == LOSSLESS_RTOL_LOW_PRECISION["fp16"]


# ---- bug 3: the torch backend refused any model holding an fp16 tensor


@pytest.fixture(scope="module")
def torch_session() -> Iterator[Any]:
    pytest.importorskip("onnx2torch")
    from deployopt.backends import MeasureOptions, get_backend

    cpu = MeasureOptions(dtype="fp32", runs=3, warmup=1, timeout_s=120, extra={"device": "cpu"})
    s = get_backend("torch").open(cpu)
    yield s
    s.close()


def test_torch_times_an_fp32_model_with_a_cast_to_fp16_and_back(torch_session: Any, tmp_path: Path) -> None:
    """It was refused as "typed fp16 inside", though no conv takes fp16 and onnx2torch runs it."""
    path = tmp_path / "n9_castpair.onnx"
    onnx.save(conv_cast_pair(), path)
    timing = torch_session.measure(path)
    assert timing.runs == 3 and timing.environment["dtype"] == "fp32"


def test_torch_refuses_a_model_whose_classifier_takes_fp16_naming_it(
    torch_session: Any, tmp_path: Path
) -> None:
    path = tmp_path / "n8_mixed.onnx"
    onnx.save(fp32_convs_fp16_classifier(), path)
    with pytest.raises(
        ModelError,
        match=r"^n8_mixed.onnx is typed mixed fp32/fp16 inside: the torch backend times fp32 models .*"
        r"and Gemm 'fc' takes fp16 \(1 of 3 convs/matmuls; the other 2 take fp32\); time the fp32 model",
    ):
        torch_session.measure(path)


# ---- bug 4: QOperator models said "no Conv node: nothing to optimize"


def _tiny_float(opset: int = 17) -> onnx.ModelProto:
    return _model(
        [
            helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["a"], ["r"], name="relu1"),
            helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])],
        [_w((4, 3, 3, 3), "w1"), _w((6, 4, 3, 3), "w2")],
        opset,
    )


def _quantize(tmp_path: Path, name: str, opset: int = 17, **kw: Any) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(1)
            self.data = iter([{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.data, None)

    src, dest = tmp_path / f"{name}_float.onnx", tmp_path / f"{name}.onnx"
    onnx.save(_tiny_float(opset), src)
    kw.setdefault("quant_format", QuantFormat.QDQ)
    try:
        quantize_static(str(src), str(dest), Reader(), **kw)
    except Exception as exc:  # onnxruntime 1.23 (Python 3.10's) with a newer onnx: IR 14 it cannot read
        if "Unsupported model IR version" not in str(exc):
            raise
        import onnxruntime

        pytest.skip(f"onnxruntime {onnxruntime.__version__}'s quantize_static writes IR it cannot read")
    return dest


def test_a_qoperator_model_is_refused_naming_the_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnxruntime.quantization import QuantFormat

    from deployopt.coupling import analyze

    path = _quantize(tmp_path, "q_qop", quant_format=QuantFormat.QOperator)
    assert any(n.op_type == "QLinearConv" for n in onnx.load(path).graph.node)
    refusal = (
        r"QLinearConv \('conv1_quant': onnxruntime's QOperator format\) is not supported: quantize "
        r"with QuantFormat.QDQ \(Q/DQ nodes around float ops\), which deployopt edits exactly"
    )
    with pytest.raises(ModelError, match=f"^{refusal}$"):
        analyze(onnx.load(path))
    for args in (
        ["analyze", str(path)],
        ["optimize", str(path), "-t", "orin-nano-8gb", "-o", str(tmp_path / "out")],
    ):
        code, _out, err = run_cli(monkeypatch, capsys, *args)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: QLinearConv ("), (args, err)
    assert not (tmp_path / "out").exists()


def test_a_conv_integer_model_is_refused_too() -> None:
    from deployopt.coupling import analyze

    nodes = [
        helper.make_node("ConvInteger", ["x", "w", "xz"], ["acc"], name="ci"),
        helper.make_node("Cast", ["acc"], ["y"], to=TensorProto.FLOAT),
    ]
    model = _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [
            numpy_helper.from_array(np.ones((4, 3, 3, 3), np.uint8), "w"),
            numpy_helper.from_array(np.array(0, np.uint8), "xz"),
        ],
    )
    with pytest.raises(ModelError, match=r"^ConvInteger \('ci': onnxruntime's QOperator format\)"):
        analyze(model)


# ---- bug 5: a bf16 model on ort said "--dtype 'bf16': choose one of ...", of a --dtype never given


def _bf16_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.BFLOAT16),
        helper.make_node("MatMul", ["x16", "w"], ["y16"], name="mm"),
        helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
    ]
    w = helper.make_tensor("w", TensorProto.BFLOAT16, [4, 4], [0] * 16)
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [w],
    )


@pytest.mark.parametrize(
    ("command", "dtype"), [("bench", []), ("profile", []), ("bench", ["--dtype", "fp16"])]
)
def test_a_bf16_model_on_ort_is_refused_in_optimizes_words(
    command: str,
    dtype: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src = tmp_path / "bf16.onnx"
    onnx.save(_bf16_model(), src)
    assert typed_precision(onnx.load(src)) == "bf16"
    code, _out, err = run_cli(
        monkeypatch, capsys, command, str(src), "-b", "ort", "--runs", "3", "--warmup", "1", *dtype
    )
    assert code == 2 and "--dtype 'bf16'" not in err and "--dtype bf16" not in err, err
    assert err.strip() == (
        "error: backend 'ort' cannot run bf16 (it runs fp32, fp16, int8): bf16.onnx is typed bf16"
    ), err


@pytest.mark.parametrize(
    ("build", "typed", "advice"),
    [
        (
            fp32_convs_fp16_classifier,
            "mixed fp32/fp16",
            ", and a run records one precision; type it fp16 throughout with `deployopt fp16` first, "
            "or use the tensorrt backend",
        ),
        (_bf16_model, "bf16", ""),
    ],
)
def test_optimize_on_ort_refuses_a_model_typed_as_it_cannot_run_in_benchs_words(
    build: Any,
    typed: str,
    advice: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """optimize --backend ort, no --dtype, on a model typed mixed fp32/fp16 (fp32 convs, an fp16
    Gemm) or bf16: it said "backend 'ort' cannot run mixed fp32/fp16 (it runs fp32, fp16, int8)",
    naming neither the model nor what to do, where bench's line says both. Now bench's line."""
    src = tmp_path / "mixed.onnx"
    onnx.save(build(), src)
    assert typed_precision(onnx.load(src)) == typed
    line = f"error: backend 'ort' cannot run {typed} (it runs fp32, fp16, int8): mixed.onnx is typed {typed}"
    line += advice
    args = ["--target", "t4", "--max-evals", "4", "-o", str(tmp_path / "out")]
    code, _out, err = run_cli(monkeypatch, capsys, "optimize", str(src), "--backend", "ort", *args)
    assert code == 2 and " ".join(err.split()) == line, err
    assert not (tmp_path / "out").exists()
    code, _out, err = run_cli(
        monkeypatch, capsys, "bench", str(src), "-b", "ort", "--runs", "3", "--warmup", "1"
    )
    assert code == 2 and " ".join(err.split()) == line, err  # the same words as bench's


# ---- bug 6: W8A16 Q/DQ models were priced and labelled int8


def assert_refused_where_priced(
    path: Path, phrase: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`analyze --target` and `bench` (as typed, and --dtype int8) refuse the Q/DQ model at `path`
    in one line holding `phrase`, and print no int8 record."""
    for args in (
        ["analyze", str(path), "--target", "orin-nano-8gb", "--json"],
        ["bench", str(path), "-b", "ort", "--runs", "3", "--warmup", "1"],
        ["bench", str(path), "-b", "ort", "--runs", "3", "--warmup", "1", "--dtype", "int8"],
    ):
        code, out, err = run_cli(monkeypatch, capsys, *args)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and phrase in lines[0], (args, err)
        assert '"dtype": "int8"' not in out


W8A16 = (
    r"quantizes activations to uint16: 16-bit Q/DQ \(W8A16\): TensorRT has no 16-bit quantized "
    r"convs; deployopt prices and labels int8 only"
)


@pytest.mark.parametrize("opset", [17, 21])
def test_a_w8a16_model_is_refused_where_it_would_be_labelled_int8(
    opset: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from onnxruntime.quantization import QuantType

    path = _quantize(
        tmp_path,
        "q_i16",
        opset,
        per_channel=True,
        activation_type=QuantType.QUInt16,
        weight_type=QuantType.QInt8,
    )
    with pytest.raises(ModelError, match=r"^QuantizeLinear '.*' " + W8A16):
        has_qdq(onnx.load(path))
    with pytest.raises(ModelError, match=W8A16):
        typed_precision(onnx.load(path))
    assert_refused_where_priced(path, "16-bit Q/DQ (W8A16)", monkeypatch, capsys)
    code, _, err = run_cli(monkeypatch, capsys, "analyze", str(path))  # no pricing: still analysed
    assert code == 0, err


def test_an_output_dtype_q_and_int4_activations_are_refused_int4_weights_kept() -> None:
    """opset 21's output_dtype says the type where no zero point does; int4 on activations is
    refused, int4 weights (which freeze their convs' groups) stay an int8 model."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")

    def net(act_type: int, weight: onnx.TensorProto) -> onnx.ModelProto:
        nodes = [
            helper.make_node("QuantizeLinear", ["x", "s"], ["xq"], name="x_q", output_dtype=act_type),
            helper.make_node("DequantizeLinear", ["xq", "s"], ["xd"], name="x_dq"),
            helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], name="w_dq", axis=0),
            helper.make_node("Conv", ["xd", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
        ]
        ws = numpy_helper.from_array(np.full(4, 0.02, np.float32), "ws")
        return _model(nodes, [x], [y], [scale, weight, ws], opset=21)

    int8_w = numpy_helper.from_array(RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), "wq")
    int4_w = helper.make_tensor("wq", TensorProto.INT4, [4, 3, 3, 3], RNG.integers(-8, 8, 108).tolist())
    assert typed_precision(net(TensorProto.INT8, int8_w)) == "int8"
    assert typed_precision(net(TensorProto.UINT8, int4_w)) == "int8"
    with pytest.raises(ModelError, match=r"^QuantizeLinear 'x_q' " + W8A16):
        has_qdq(net(TensorProto.UINT16, int8_w))
    with pytest.raises(ModelError, match=r"^QuantizeLinear 'x_q' quantizes activations to int4: "):
        has_qdq(net(TensorProto.INT4, int8_w))
