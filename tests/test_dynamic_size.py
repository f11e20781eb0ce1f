"""Written models get the input file's dynamic height and width back (deployopt.dynamic_dims), or
stay at the --input-shape size with one line that says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import ort_session
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt.coupling import analyze
from deployopt.model import load_model

OPSET = [helper.make_opsetid("", 17)]


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _weight(name: str, shape: list[int], seed: int) -> onnx.TensorProto:
    return numpy_helper.from_array(
        np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name
    )


def _residual_net(h: str | None, w: str | None) -> onnx.ModelProto:
    """Conv → Relu → Conv, + the first conv's output, → Relu → 1×1 Conv: a detector backbone's
    shape, input [N, 3, h, w] and output [N, 5, h, w] (None: an unnamed dynamic dim)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="c1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="r1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="c2"),
        helper.make_node("Add", ["r1", "c2"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r2"], name="r2"),
        helper.make_node("Conv", ["r2", "w3"], ["y"], name="c3"),
    ]
    graph = helper.make_graph(
        nodes,
        "residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5, h, w])],
        [_weight("w1", [13, 3, 3, 3], 0), _weight("w2", [13, 13, 3, 3], 1), _weight("w3", [5, 13, 1, 1], 2)],
    )
    return helper.make_model(graph, opset_imports=OPSET)


def _stem() -> list[onnx.NodeProto]:
    """Conv c0 (3 → 6, free to pad) → Relu → Conv c1 (6 → 4, read by what follows)."""
    return [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], name="c0"),
        helper.make_node("Relu", ["c0"], ["r0"], name="r0"),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1], name="c1"),
    ]


def _stem_weights() -> list[onnx.TensorProto]:
    return [_weight("w0", [6, 3, 3, 3], 0), _weight("w1", [4, 6, 3, 3], 1)]


def _flatten_to_gemm() -> onnx.ModelProto:
    """A classifier exported as if its size were dynamic: Reshape to the constant [1, 4·16·16]."""
    target = numpy_helper.from_array(np.array([1, 4 * 16 * 16], np.int64), "target")
    graph = helper.make_graph(
        [
            *_stem(),
            helper.make_node("Reshape", ["c1", "target"], ["f"], name="flat"),
            helper.make_node("Gemm", ["f", "fc"], ["y"], name="fc"),
        ],
        "flatten",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [*_stem_weights(), _weight("fc", [4 * 16 * 16, 10], 2), target],
    )
    return helper.make_model(graph, opset_imports=OPSET)


def _reshape_from_shape() -> onnx.ModelProto:
    """A detector head's Reshape to [N, C, H·W] computed from Shape: runs at any size in the file,
    but loading folds the chain into a constant for the --input-shape size."""
    consts = [
        numpy_helper.from_array(np.array([0, 1], np.int64), "nc"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "hw"),
    ]
    graph = helper.make_graph(
        [
            *_stem(),
            helper.make_node("Shape", ["c1"], ["s"], name="shape"),
            helper.make_node("Gather", ["s", "nc"], ["s_nc"], axis=0, name="gather_nc"),
            helper.make_node("Gather", ["s", "hw"], ["s_hw"], axis=0, name="gather_hw"),
            helper.make_node("ReduceProd", ["s_hw"], ["s_prod"], name="prod"),
            helper.make_node("Concat", ["s_nc", "s_prod"], ["t"], axis=0, name="concat"),
            helper.make_node("Reshape", ["c1", "t"], ["y"], name="flat"),
        ],
        "reshape_hw",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "HW"])],
        [*_stem_weights(), *consts],
    )
    return helper.make_model(graph, opset_imports=OPSET)


def _top_half_from_shape() -> onnx.ModelProto:
    """`y = c1[:, :, : c1.shape[2] // 2]`: the file takes any size, loading folds the half of 16."""
    consts = [numpy_helper.from_array(np.array([2], np.int64), n) for n in ("two", "axis")] + [
        numpy_helper.from_array(np.array([0], np.int64), "zero")
    ]
    graph = helper.make_graph(
        [
            *_stem(),
            helper.make_node("Shape", ["c1"], ["s"], name="shape"),
            helper.make_node("Gather", ["s", "axis"], ["h"], axis=0, name="gather"),
            helper.make_node("Div", ["h", "two"], ["half"], name="half"),
            helper.make_node("Slice", ["c1", "zero", "half", "axis"], ["y"], name="top"),
        ],
        "top_half",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H2", "W"])],
        [*_stem_weights(), *consts],
    )
    return helper.make_model(graph, opset_imports=OPSET)


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _pad_plan(path: Path, tmp_path: Path, shape: list[int]) -> Path:
    free = analyze(load_model(path, {"x": shape}).model).free_groups()
    assert free
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {g.id: g.width + 5 for g in free}}))
    return plan


def _run(model: Path, x: np.ndarray) -> np.ndarray:
    sess = ort_session.cpu_session(onnx.load(str(model)))
    return sess.run(None, {"x": x})[0]


def _dims(vi: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


@pytest.mark.parametrize(("h", "w", "symbols"), [("H", "W", ("H", "W")), (None, None, ("height", "width"))])
def test_apply_keeps_the_dynamic_height_and_width_and_pads_exactly_at_other_sizes(
    h: str | None, w: str | None, symbols: tuple[str, str], tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """Edited at --input-shape 1x3x32x32, the written model takes 48×40 (and batch 2) as the file
    did, with the file's symbols (made-up ones where the file's were unnamed)."""
    src = _save(_residual_net(h, w), tmp_path / "net.onnx")
    out = tmp_path / "out.onnx"
    plan = _pad_plan(src, tmp_path, [1, 3, 32, 32])
    args = ["apply", str(src), "--plan", str(plan), "-o", str(out), "--input-shape", "x:1x3x32x32"]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    said = " ".join(err.split())  # unwrapped: where the console wraps depends on its width
    assert (
        f"notice: written with the input's dynamic height, width ({symbols[0]!r}, {symbols[1]!r}), "
        "checked at 32×32 and 96×96"
    ) in said
    assert "runs at that size only" not in said
    written = onnx.load(str(out))
    onnx.checker.check_model(written, full_check=True)
    assert _dims(written.graph.input[0]) == ["N", 3, *symbols]
    assert _dims(written.graph.output[0])[0] == "N" and _dims(written.graph.output[0])[1] == 5
    rng = np.random.default_rng(0)
    for shape in ([1, 3, 32, 32], [1, 3, 48, 40], [2, 3, 48, 40]):
        x = rng.standard_normal(shape).astype(np.float32)
        got = _run(out, x)
        assert got.shape == (shape[0], 5, *shape[2:])
        np.testing.assert_allclose(got, _run(src, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("build", "why"),
    [
        (_flatten_to_gemm, "at 1×3×80×80 the written model fails: Reshape 'flat': "),
        (_reshape_from_shape, "at 1×3×80×80 the written model fails: Reshape 'flat': "),
        (_top_half_from_shape, "at 1×3×80×80 output 'y' is 1×4×8×80 in the written model, 1×4×40×80 in the "),
    ],
)
def test_a_size_baked_into_the_graph_is_written_static_with_the_reason(
    build: Any, why: str, tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    src = _save(build(), tmp_path / "net.onnx")
    out = tmp_path / "out.onnx"
    (tmp_path / "plan.json").write_text(json.dumps({"widths": {"c0": 8}}))
    args = ["apply", str(src), "--plan", str(tmp_path / "plan.json"), "-o", str(out)]
    code, stdout, err = run_cli(monkeypatch, capsys, *args, "--input-shape", "x:1x3x16x16", "--json")
    assert code == 0, err
    notices = json.loads(stdout)["notices"]
    (sized,) = [n for n in notices if "left dynamic" in n]
    assert "\n" not in sized
    assert sized.startswith(
        "written at the size given by --input-shape ('x' dims 2, 3 at 16×16), which the input file left "
        "dynamic: the written model runs at that size only (the dynamic size could not be kept: " + why
    ), sized
    written = onnx.load(str(out))
    assert _dims(written.graph.input[0]) == ["N", 3, 16, 16]  # the batch came back, the size did not
    x = np.random.default_rng(0).standard_normal([1, 3, 16, 16]).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(src, x), rtol=1e-5, atol=1e-5)


def test_a_static_file_or_a_file_with_only_a_dynamic_batch_says_nothing_of_its_size(tmp_path: Path) -> None:
    from deployopt.dynamic_dims import restore_dynamic_size

    model = _residual_net("H", "W")
    for d in model.graph.input[0].type.tensor_type.shape.dim[2:]:
        d.Clear()
        d.dim_value = 16
    src = _save(model, tmp_path / "net.onnx")
    loaded = load_model(src)
    assert loaded.file_dynamic_dims == {}
    result = restore_dynamic_size(loaded.model, loaded)
    assert result.model is loaded.model and not result.restored and result.notice == ""


def test_optimize_writes_the_dynamic_size_and_reports_it(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    src = _save(_residual_net("height", "width"), tmp_path / "net.onnx")
    outdir = tmp_path / "opt"
    code, out, err = run_cli(
        monkeypatch, capsys, "optimize", str(src), "--target", "h200", "--sms", "8", "--backend", "model",
        "--max-evals", "4", "--input-shape", "x:1x3x32x32", "-o", str(outdir),
    )  # fmt: skip
    assert code == 0, err
    restored = (
        "written with the input's dynamic height, width ('height', 'width'), checked at 32×32 and 96×96"
    )
    report = json.loads((outdir / "report.json").read_text())
    assert report["written_batch"] == (
        f"written with the input's dynamic batch ('N'), checked at batch 1 and 2; {restored}"
    )
    assert restored in " ".join(out.split())
    assert "runs at that size only" not in out + err
    written = onnx.load(str(outdir / "model.onnx"))
    assert _dims(written.graph.input[0]) == ["N", 3, "height", "width"]
    x = np.random.default_rng(3).standard_normal([1, 3, 40, 56]).astype(np.float32)
    np.testing.assert_allclose(_run(outdir / "model.onnx", x), _run(src, x), rtol=1e-5, atol=1e-5)


def test_a_rewrite_that_changes_the_outputs_at_the_loaded_size_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safety net for a broken rewrite: a candidate that runs at both sizes with the right
    shapes, but gives other values than the static model at the loaded size, is not written."""
    from deployopt import dynamic_dims

    loaded = load_model(_save(_residual_net("H", "W"), tmp_path / "net.onnx"), {"x": [1, 3, 32, 32]})
    make = dynamic_dims._make_dynamic_size

    def broken(model: onnx.ModelProto, *args: Any) -> onnx.ModelProto:
        out = make(model, *args)
        w3 = next(t for t in out.graph.initializer if t.name == "w3")
        w3.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w3) * 2, "w3"))
        return out

    monkeypatch.setattr(dynamic_dims, "_make_dynamic_size", broken)
    result = dynamic_dims.restore_dynamic_size(loaded.model, loaded)
    assert not result.restored and result.model is loaded.model
    assert result.notice.endswith(
        "runs at that size only (the dynamic size could not be kept: at 1×3×32×32 output 'y' of the "
        "written model differs from the static model's)"
    )
