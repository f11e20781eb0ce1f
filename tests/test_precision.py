"""deployopt.precision: fp32 models typed fp16 for TensorRT >= 11 (which has no FP16 builder flag).

Every zoo model (each builder, each exporter form, the YOLO-style detector with Resize, GhostNet)
is converted, must pass onnx.checker and type-checked strict shape inference, keep its inputs and
outputs fp32 with their names and shapes, and compute on onnxruntime CPU what the fp32 model
computes within fp16 tolerance. Small hand-built graphs pin down the rules (shape arithmetic kept
fp32, Resize scales/roi kept, a constant read both ways, Cast targets, clamping, refusals).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import ort_session
import pytest
from onnx import TensorProto, helper, numpy_helper
from zoo_models import MODELS, yolo_detect_small

from deployopt.errors import DeployoptWarning, ModelError
from deployopt.precision import is_low_precision, to_fp16, to_fp16_bytes, write_fp16

DATA = Path(__file__).parent / "data"
#: fp16 against fp32 on onnxruntime CPU, random weights and inputs: the largest difference seen over
#: the zoo was 2.1 % of the largest output (VGG16 pruned, batch 4); a wrong cast or a weight in the
#: wrong type shows as a difference of the output's own size.
REL_TOL = 0.05
MIN_COSINE = 0.999


def _types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    g = inferred.graph
    out = {t.name: t.data_type for t in g.initializer}
    out.update({v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.output, *g.value_info)})
    for node in g.node:
        if node.op_type == "Constant":
            out[node.output[0]] = next(a.t.data_type for a in node.attribute if a.name == "value")
    return out


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.log_severity_level = 3  # ORT's notes about fp16 kernels it folds on the CPU are noise here
    session = ort_session.session(model, options)
    return session.run(None, feeds)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    init = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in init:
            dims = [d.dim_value if d.dim_value > 0 else 2 for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def _io(model: onnx.ModelProto) -> list[tuple[str, int, list[int | str]]]:
    def dims(vi: onnx.ValueInfoProto) -> list[int | str]:
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    return [
        (v.name, v.type.tensor_type.elem_type, dims(v)) for v in (*model.graph.input, *model.graph.output)
    ]


def _ghostnet() -> onnx.ModelProto:
    pytest.importorskip("torch")
    from deployopt.zoo.ghostnet import export_ghostnet

    with tempfile.TemporaryDirectory() as tmp:
        return onnx.load(export_ghostnet(Path(tmp) / "g.onnx", size=64, num_classes=10))


def _yolo() -> onnx.ModelProto:
    pytest.importorskip("torch")
    return yolo_detect_small()


BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    **MODELS,
    "yolo_detect": _yolo,  # C2f Splits, SiLU, SPPF, two Resize (scales), the Detect head's anchors
    "ghostnet": _ghostnet,  # Slice, Clip (hard sigmoid), SE, depthwise
}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_zoo_model_converts_and_computes_the_same(name: str) -> None:
    model = BUILDERS[name]()
    fp16 = to_fp16(model)
    types = _types(fp16)  # raises unless the types check strictly
    onnx.checker.check_model(fp16, full_check=True)
    assert _io(fp16) == _io(model)  # same names, shapes, and fp32 at the boundary
    assert all(kind == TensorProto.FLOAT for _, kind, _ in _io(model))
    # fp16 inside: every weight, every conv's output; the only fp32 tensors are the I/O and what
    # shape arithmetic or Resize scales need
    assert {t.data_type for t in fp16.graph.initializer} <= {TensorProto.FLOAT16, TensorProto.INT64}
    for node in fp16.graph.node:
        if node.op_type in ("Conv", "Gemm", "MatMul", "BatchNormalization"):
            assert {types[i] for i in node.input if i} == {TensorProto.FLOAT16}, node.name
    casts = [n for n in fp16.graph.node if n.op_type == "Cast"]
    boundary = {n.input[0] for n in casts} & {v.name for v in model.graph.input}
    boundary |= {n.output[0] for n in casts} & {v.name for v in model.graph.output}
    assert boundary == {v.name for v in (*model.graph.input, *model.graph.output)}
    feeds = _feeds(model)
    for ref, got in zip(_run(model, feeds), _run(fp16, feeds)):
        assert got.dtype == np.float32 and got.shape == ref.shape
        scale = float(np.max(np.abs(ref)))
        err = float(np.max(np.abs(got - ref)))
        cosine = float(np.dot(ref.ravel(), got.ravel()) / (np.linalg.norm(ref) * np.linalg.norm(got)))
        assert err <= REL_TOL * scale, (name, err, scale)
        assert cosine >= MIN_COSINE, (name, cosine)
    assert to_fp16(fp16) is fp16  # already fp16: passed through


def _graph_model(nodes: list[onnx.NodeProto], inputs: list, outputs: list, inits: list, opset: int = 17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _resize_by_shape_arithmetic(h: int) -> onnx.ModelProto:
    """x -> Conv -> Resize whose sizes are floor(H * 1.0), W * 2 computed from Shape in float, and a
    second Resize with scales computed in float (Shape -> Cast -> Div -> Concat): all shape
    arithmetic, which fp16 would round (2049 -> 2048)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, h, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    inits = [
        numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32) * 0.5, "w"),
        numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "factor"),
        numpy_helper.from_array(np.array([2], np.int64), "hw_start"),
        numpy_helper.from_array(np.array([4], np.int64), "hw_end"),
        numpy_helper.from_array(np.array([0], np.int64), "nc_start"),
        numpy_helper.from_array(np.array([1.0, 1.0], np.float32), "nc_scales"),
        numpy_helper.from_array(np.array([h / 3.0, 4.0], np.float32), "target"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Shape", ["c"], ["shape"]),
        helper.make_node("Slice", ["shape", "hw_start", "hw_end"], ["hw"]),
        helper.make_node("Slice", ["shape", "nc_start", "hw_start"], ["nc"]),
        helper.make_node("Cast", ["hw"], ["hw_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["hw_f", "factor"], ["hw_scaled"]),
        helper.make_node("Floor", ["hw_scaled"], ["hw_floor"]),
        helper.make_node("Cast", ["hw_floor"], ["hw_int"], to=TensorProto.INT64),
        helper.make_node("Concat", ["nc", "hw_int"], ["sizes"], axis=0),
        helper.make_node("Resize", ["c", "", "", "sizes"], ["y"], mode="nearest"),
        helper.make_node("Div", ["target", "hw_f"], ["ratio"]),
        helper.make_node("Concat", ["nc_scales", "ratio"], ["scales"], axis=0),
        helper.make_node("Resize", ["c", "", "scales"], ["z"], mode="nearest"),
    ]
    return _graph_model(nodes, [x], [y, z], inits)


def test_shape_arithmetic_and_resize_scales_stay_fp32() -> None:
    model = _resize_by_shape_arithmetic(2049)
    fp16 = to_fp16(model)
    types = _types(fp16)
    nodes = {n.output[0]: n for n in fp16.graph.node}
    for name in ("hw_f", "hw_scaled", "hw_floor", "ratio", "scales"):
        assert types[name] == TensorProto.FLOAT, name
    assert next(a.i for a in nodes["hw_f"].attribute if a.name == "to") == TensorProto.FLOAT
    assert types[nodes["c"].input[1]] == TensorProto.FLOAT16  # the conv runs in fp16
    feeds = _feeds(model)
    (y32, z32), (y16, z16) = _run(model, feeds), _run(fp16, feeds)
    assert y16.shape == y32.shape == (1, 1, 2049, 4)  # fp16 arithmetic would give 2048
    assert z16.shape == z32.shape
    np.testing.assert_allclose(y16, y32, rtol=2e-3, atol=2e-3)


def test_resize_roi_is_kept_and_a_constant_read_both_ways_is_copied() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])
    scales = helper.make_tensor("s", TensorProto.FLOAT, [4], [1.0, 1.0, 2.0, 2.0])
    roi = helper.make_tensor("r", TensorProto.FLOAT, [8], [0, 0, 0, 0, 1, 1, 1, 1])
    nodes = [
        helper.make_node("Constant", [], ["scales"], value=scales),
        helper.make_node("Constant", [], ["roi"], value=roi),
        helper.make_node("Resize", ["x", "roi", "scales"], ["up"], mode="linear"),
        helper.make_node("Slice", ["scales", "zero", "two"], ["half"]),  # [1, 1]: also read as data
        helper.make_node("Unsqueeze", ["half", "axes"], ["half4"]),
        helper.make_node("Mul", ["up", "half4"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.array([0, 2, 3], np.int64), "axes"),
    ]
    model = _graph_model(nodes, [x], [y], inits)
    fp16 = to_fp16(model)
    types = _types(fp16)
    resize = next(n for n in fp16.graph.node if n.op_type == "Resize")
    assert resize.input[1:] == ["roi", "scales"]  # the originals, fp32
    assert types["roi"] == types["scales"] == TensorProto.FLOAT
    slice_node = next(n for n in fp16.graph.node if n.op_type == "Slice")
    assert slice_node.input[0] != "scales" and types[slice_node.input[0]] == TensorProto.FLOAT16
    feeds = _feeds(model)
    np.testing.assert_allclose(_run(fp16, feeds)[0], _run(model, feeds)[0], rtol=2e-3, atol=2e-3)


def test_cast_to_float_inside_becomes_fp16_and_weights_are_clamped() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    big = numpy_helper.from_array(np.array([1e6, -1e6, 3.0], np.float32), "big")
    nodes = [
        helper.make_node("Cast", ["x"], ["xd"], to=TensorProto.DOUBLE),
        helper.make_node("Cast", ["xd"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Min", ["xf", "big"], ["y"]),
    ]
    # said: a clamped constant changes what the model computes (a Div by 1e5 became one by 65504)
    with pytest.warns(DeployoptWarning, match=r"^fp16 conversion clamped 1 constant\(s\) .* \('big'\)"):
        fp16 = to_fp16(_graph_model(nodes, [x], [y], [big]))
    casts = {n.output[0]: n for n in fp16.graph.node if n.op_type == "Cast"}
    assert next(a.i for a in casts["xf"].attribute if a.name == "to") == TensorProto.FLOAT16
    assert next(a.i for a in casts["xd"].attribute if a.name == "to") == TensorProto.DOUBLE
    (weight,) = [numpy_helper.to_array(t) for t in fp16.graph.initializer]
    assert weight.dtype == np.float16 and weight.tolist() == [65504.0, -65504.0, 3.0]  # finite, clamped


def test_a_float64_model_is_refused_not_copied_as_converted() -> None:
    """The conversion rewrites fp32 tensors only: a model typed float64 throughout came back as it
    was, and `deployopt fp16` said 'fp16 inside'. A double Cast inside an fp32 model still converts."""
    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 3])
    w = numpy_helper.from_array(np.ones(3), "w")  # float64
    with pytest.raises(ModelError, match=r"^fp16 conversion: the model is typed float64 \(double\)"):
        to_fp16(_graph_model([helper.make_node("Mul", ["x", "w"], ["y"])], [x], [y], [w]))


def test_already_fp16_models_are_passed_through(tmp_path: Path) -> None:
    """Model Optimizer's output (fp16 casts, Q/DQ) is its own precision; so is a converted model,
    which write_fp16 then does not write again."""
    fp16 = to_fp16(MODELS["se_net"]())
    assert is_low_precision(fp16) and not is_low_precision(MODELS["se_net"]())
    assert to_fp16(fp16) is fp16
    data = fp16.SerializeToString()
    assert to_fp16_bytes(data) is data
    src = tmp_path / "se16.onnx"
    onnx.save(fp16, src)
    assert write_fp16(src, tmp_path / "out.onnx") == src and not (tmp_path / "out.onnx").exists()
    src32 = tmp_path / "se.onnx"
    onnx.save(MODELS["se_net"](), src32)
    dest = write_fp16(src32, tmp_path / "work" / "se.fp16.onnx")
    assert dest == tmp_path / "work" / "se.fp16.onnx" and is_low_precision(onnx.load(dest))
    assert sorted(p.name for p in dest.parent.iterdir()) == ["se.fp16.onnx"]  # no temporary left


def _fp32_convs_with_an_fp16_island() -> onnx.ModelProto:
    """conv -> Cast(fp16) -> Relu -> Cast(fp32) -> conv: an fp32 model whose one fp16 step (a mask,
    a post-processing op in an export) is not where it computes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), n) for n in ("w1", "w2")
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["a"], ["a16"], to=TensorProto.FLOAT16),
        helper.make_node("Relu", ["a16"], ["r16"]),
        helper.make_node("Cast", ["r16"], ["r"], to=TensorProto.FLOAT),
        helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    return _graph_model(nodes, [x], [y], inits)


def test_an_fp32_model_with_one_fp16_cast_is_converted() -> None:
    """Its convs take fp32, so it is fp32: `deployopt fp16` copied it unconverted as "already fp16"
    (the rule was any fp16 tensor), and records called it fp16. Now converted: its convs take fp16
    and its output stays close to the fp32 model's; torch still refuses it (it holds fp16)."""
    from deployopt.precision import has_low_precision_tensors, typed_precision

    model = _fp32_convs_with_an_fp16_island()
    assert has_low_precision_tensors(model) and not is_low_precision(model)
    assert typed_precision(model) == "fp32"
    fp16 = to_fp16(model)
    assert fp16 is not model and is_low_precision(fp16) and typed_precision(fp16) == "fp16"
    weights = {i.name: i.data_type for i in fp16.graph.initializer}
    assert set(weights.values()) == {TensorProto.FLOAT16}, weights
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    a, b = (ort_session.session(m).run(None, {"x": x})[0] for m in (model, fp16))
    assert b.dtype == np.float32 and np.abs(a - b).max() <= 0.01 * np.abs(a).max()


def test_a_graph_output_read_by_another_node_converts() -> None:
    """Conv -> Relu ("feat", a graph output) -> Conv: FPN features, an embedding both returned and
    used. The output got an fp16 twin and a Cast back, but the second conv kept reading the fp32
    name: "W has inconsistent type tensor(float16)", exit 2. Both outputs now come out fp32 and
    close to the fp32 model's, and the second conv reads fp16."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 8, 8]) for n in ("feat", "y")]
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), n) for n in ("w1", "w2")
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1], name="c1"),
        helper.make_node("Relu", ["a"], ["feat"], name="r"),
        helper.make_node("Conv", ["feat", "w2"], ["y"], pads=[1, 1, 1, 1], name="c2"),
    ]
    model = _graph_model(nodes, [x], outs, inits)
    fp16 = to_fp16(model)
    types = {
        vi.name: vi.type.tensor_type.elem_type
        for vi in onnx.shape_inference.infer_shapes(fp16).graph.value_info
    }
    c2 = next(n for n in fp16.graph.node if n.name == "c2")
    assert types[c2.input[0]] == TensorProto.FLOAT16
    xv = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    want = ort_session.session(model).run(None, {"x": xv})
    got = ort_session.session(fp16).run(None, {"x": xv})
    for a, b in zip(want, got):
        assert b.dtype == np.float32 and np.abs(a - b).max() <= 0.01 * np.abs(a).max()


def test_qdq_and_control_flow_are_refused_in_one_line() -> None:
    qdq = onnx.load(DATA / "modelopt_int8_se_net.onnx")  # ModelOpt's: Q/DQ and fp16 casts
    with pytest.raises(ModelError, match=r"^fp16 conversion: the model has Q/DQ nodes .*--dtype int8") as exc:
        to_fp16(qdq)
    assert "\n" not in str(exc.value)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    o = helper.make_tensor_value_info("o", TensorProto.FLOAT, [1])
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "b", [], [o])
    model = _graph_model(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)], [x, c], [y], []
    )
    with pytest.raises(
        ModelError, match=r"^fp16 conversion: the model has If nodes.*modelopt\.onnx\.autocast"
    ):
        to_fp16(model)
    with pytest.raises(ModelError, match=r"^fp16 conversion: cannot read the model"):
        to_fp16_bytes(b"not onnx")


def test_fp16_command_converts_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """`deployopt fp16 model.onnx -o model_fp16.onnx`, the host-side step for a board whose runner
    meets TensorRT >= 11: writes the fp16 model; an fp16 one is copied as it is; a missing or broken
    file, or an output that is the input, is one line with exit 2 and nothing written."""
    from cli_runner import run_cli

    def cli(*args: str) -> tuple[int, str, str]:
        return run_cli(monkeypatch, capsys, *args)

    src, dest = tmp_path / "m.onnx", tmp_path / "out" / "m_fp16.onnx"
    onnx.save(MODELS["mobilenet_like"](), src)
    code, out, err = cli("fp16", str(src), "-o", str(dest))
    assert code == 0 and is_low_precision(onnx.load(dest)), err
    assert f"wrote {dest}" in " ".join(out.split())
    again = tmp_path / "again.onnx"
    again.write_bytes(src.read_bytes())  # an older file of that name: it was left there, exit 0
    code, out, _ = cli("fp16", str(dest), "-o", str(again))
    assert code == 0 and "already typed fp16/bf16: copied to" in " ".join(out.split())
    assert onnx.load(again) == onnx.load(dest)  # the model to build, whichever the input was
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    for args in (
        [str(tmp_path / "absent.onnx"), "-o", str(tmp_path / "x.onnx")],
        [str(tmp_path / "bad.onnx"), "-o", str(tmp_path / "x.onnx")],
        [str(src), "-o", str(src)],
    ):
        code, out, err = cli("fp16", *args)
        assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "x.onnx").exists() and not is_low_precision(onnx.load(src))


def test_fp16_command_keeps_dynamic_height_and_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A detector exported with dynamic H and W (what a Jetson user often ships, built with
    trtexec --shapes) was refused with "give a static shape with --input-shape", an option `fp16`
    does not have; the conversion keeps such dims. Now written, its dims still dynamic, and it
    runs at two sizes. An input with no shape at all is one line that names no missing option."""
    from cli_runner import run_cli

    model = MODELS["mobilenet_like"]()
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "H", "W"
    del model.graph.value_info[:]
    src, dest = tmp_path / "dyn.onnx", tmp_path / "dyn_fp16.onnx"
    onnx.save(model, src)
    code, out, err = run_cli(monkeypatch, capsys, "fp16", str(src), "-o", str(dest))
    assert code == 0 and "--input-shape" not in err and f"wrote {dest}" in " ".join(out.split()), err
    written = onnx.load(dest)
    assert is_low_precision(written)
    assert [d.dim_param for d in written.graph.input[0].type.tensor_type.shape.dim[2:]] == ["H", "W"]
    session = ort_session.session(str(dest))
    for size in (32, 48):
        x = np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)
        assert session.run(None, {session.get_inputs()[0].name: x})[0].dtype == np.float32
    model.graph.input[0].type.tensor_type.ClearField("shape")
    onnx.save(model, src)
    code, _, err = run_cli(monkeypatch, capsys, "fp16", str(src), "-o", str(tmp_path / "x.onnx"))
    assert code == 2 and err.count("\n") == 1 and "has no shape" in err and "--input-shape" not in err, err
    assert not (tmp_path / "x.onnx").exists()


@pytest.mark.slow
def test_real_mobilenetv2_typed_fp16_keeps_its_answers(
    mobilenetv2_path: Path, imagenet_images: list[tuple[Path, int]]
) -> None:
    """Trained weights, real photos: the fp16-typed MobileNetV2 (what TensorRT >= 11 builds for
    --dtype fp16) gives the fp32 model's class on every foolbox ImageNet photo the fp32 model does
    not call a tie, with logits within 2 % of their largest magnitude, and is right as often.
    Measured (onnxruntime CPU): errors 0.14-1.2 %; 19 of 20 the same class; the 20th is a tie in
    fp32 (its top two logits 0.006 apart), which fp16 resolves to the true label (fp32 18/20
    correct, fp16 19/20)."""
    from deployopt.fidelity import preprocess_image

    fp32 = onnx.load(str(mobilenetv2_path))
    fp16 = to_fp16(fp32)
    assert is_low_precision(fp16) and not is_low_precision(fp32)
    runs = [ort_session.session(m) for m in (fp32, fp16)]
    same = decided = right32 = right16 = 0
    for path, label in imagenet_images:
        x = preprocess_image(path, (224, 224), resize="crop")[None]
        a, b = (s.run(None, {"input": x})[0] for s in runs)
        assert b.dtype == np.float32  # the engine's output stays fp32
        assert np.abs(a - b).max() <= 0.02 * np.abs(a).max()
        top2 = np.sort(a[0])[-2:]
        if top2[1] - top2[0] > 0.1:  # not a tie in fp32: fp16 must keep the class
            decided += 1
            same += int(a.argmax() == b.argmax())
        right32, right16 = right32 + int(a.argmax() == label), right16 + int(b.argmax() == label)
    assert same == decided >= 19 and right16 >= right32 >= 17


def test_an_ir3_model_with_initializers_as_inputs_converts() -> None:
    """IR 3 lists every initializer as a graph input; the fp16 copies are not, and the checker
    refused the result ("w1_fp16 in initializer but not in graph input") though analyze, apply and
    verify take the model. The result is IR 4, whose weights are initializers only (not inputs a
    caller could feed), as in every model exported since ONNX 1.3."""
    rng = np.random.default_rng(0)
    inits = {
        "w1": rng.standard_normal((5, 3, 3, 3)).astype(np.float32),
        "w2": rng.standard_normal((4, 5, 1, 1)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a0"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a0"], ["a"]),
        helper.make_node("Conv", ["a", "w2"], ["y"], name="c2"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    listed = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in inits.items()]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    model = _graph_model(
        nodes, [x, *listed], [y], [numpy_helper.from_array(v, k) for k, v in inits.items()], 9
    )
    model.ir_version = 3
    onnx.checker.check_model(model)
    fp16 = to_fp16(model)
    assert fp16.ir_version == 4 and [i.name for i in fp16.graph.input] == ["x"]
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    ref, got = _run(model, feeds)[0], _run(fp16, feeds)[0]
    assert float(np.max(np.abs(got - ref))) <= REL_TOL * float(np.max(np.abs(ref)))


def test_an_external_data_model_is_written_with_external_data(tmp_path: Path) -> None:
    """write_fp16 read the layout after loading the weights, which marks every tensor as inside the
    file: a model with its weights in NAME.onnx.data came out as one file (torch's default exporter
    writes such files; over 2 GiB one file cannot be written at all)."""
    src = tmp_path / "ext.onnx"
    onnx.save(
        BUILDERS["se_net"](), str(src), save_as_external_data=True, location="ext.onnx.data", size_threshold=0
    )
    dest = write_fp16(src, tmp_path / "out" / "se16.onnx")
    assert sorted(p.name for p in dest.parent.iterdir()) == ["se16.onnx", "se16.onnx.data"]
    written = onnx.load(str(dest), load_external_data=False)
    assert any(t.data_location == TensorProto.EXTERNAL for t in written.graph.initializer)


def test_fp16_command_names_repeats_and_says_the_io_it_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`deployopt fp16` of a model whose convs share one name wrote the repeats (onnxruntime
    refuses such a model); of a model with fp16 inputs and outputs (fp32 inside) it said "fp32
    inputs and outputs" over a model whose I/O stayed fp16."""
    from cli_runner import run_cli

    model = MODELS["mobilenet_like"]()
    for node in model.graph.node:
        if node.op_type == "Conv":
            node.name = "conv"
    src, dest = tmp_path / "dup.onnx", tmp_path / "dup16.onnx"
    onnx.save(model, src)
    code, out, err = run_cli(monkeypatch, capsys, "fp16", str(src), "-o", str(dest))
    assert code == 0 and "fp32 inputs and outputs" in " ".join(out.split()), err
    ort_session.session(str(dest))  # loads: the names are unique
    names = [n.name for n in onnx.load(dest).graph.node]
    assert len(set(names)) == len(names)

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4, 8, 8])
    w = numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")
    nodes = [
        helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT),
        helper.make_node("Conv", ["x32", "w"], ["c"]),
        helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT16),
    ]
    src = tmp_path / "io16.onnx"
    onnx.save(_graph_model(nodes, [x], [y], [w]), src)
    code, out, err = run_cli(monkeypatch, capsys, "fp16", str(src), "-o", str(tmp_path / "io16_out.onnx"))
    said = " ".join(out.split())
    assert code == 0 and "inputs and outputs typed as before" in said and "fp32 inputs" not in said, out + err


def test_fp16_command_writes_into_a_pipe_and_ends(tmp_path: Path) -> None:
    """`fp16 m.onnx -o >(cmd)`: the model went into the pipe, and the command then read OUTPUT
    back to say its inputs' types, blocking forever on the drained pipe."""
    import os
    import subprocess
    import sys
    import threading

    src, fifo = tmp_path / "m.onnx", tmp_path / "pipe"
    onnx.save(MODELS["mobilenet_like"](), src)
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = subprocess.run(
        [sys.executable, "-m", "deployopt", "fp16", str(src), "-o", str(fifo)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    reader.join(timeout=30)
    assert done.returncode == 0, done.stderr
    assert "fp16 inside, fp32 inputs and outputs" in " ".join(done.stdout.split())
    assert is_low_precision(onnx.load_from_string(got[0]))
