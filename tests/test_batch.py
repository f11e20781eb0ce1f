"""Written models get the input file's dynamic batch back (deployopt.batch), or say why not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import ort_session
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt.batch import restore_dynamic_batch
from deployopt.coupling import analyze
from deployopt.model import load_model


def _run(model: onnx.ModelProto | Path, x: np.ndarray) -> list[np.ndarray]:
    data = str(model) if isinstance(model, Path) else model.SerializeToString()
    sess = ort_session.session(data)
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _batch_dim(model: onnx.ModelProto) -> onnx.TensorShapeProto.Dimension:
    return model.graph.input[0].type.tensor_type.shape.dim[0]


def _pad_plan(path: Path, tmp_path: Path, input_shape: list[int] | None = None) -> Path:
    shapes = {"input": input_shape} if input_shape else None
    free = analyze(load_model(path, shapes).model).free_groups()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {g.id: g.width + 5 for g in free}}))
    return plan


@pytest.mark.parametrize("name", ["resnet_projection_dynamic", "mobilenet_like_dynamic"])
def test_apply_keeps_the_dynamic_batch_and_pads_exactly_at_other_batches(
    name: str, zoo_model_path: Callable[[str], Path], tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    src = zoo_model_path(name)
    out = tmp_path / "out.onnx"
    code, _, err = run_cli(
        monkeypatch, capsys, "apply", str(src), "--plan", str(_pad_plan(src, tmp_path)), "-o", str(out)
    )
    assert code == 0, err
    said = " ".join(err.split())  # unwrapped: where the console wraps depends on its width
    assert "notice: written with the input's dynamic batch ('batch'), checked at batch 1 and 2" in said
    written = onnx.load(str(out))
    assert _batch_dim(written).dim_param == "batch" and not _batch_dim(written).HasField("dim_value")
    assert written.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    x = np.random.default_rng(0).standard_normal([3, 3, 32, 32]).astype(np.float32)
    np.testing.assert_allclose(_run(out, x)[0], _run(src, x)[0], rtol=0, atol=1e-5)


def test_a_folded_flatten_reshape_gets_copy_dim_zero(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    """torch's `x.view(x.size(0), -1)` exported with a dynamic batch computes the Reshape target from
    Shape; loading folds it to [1, -1] at batch 1, which restoring turns into [0, -1]."""
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 13, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(13, 8, 3, padding=1, stride=2)
            self.fc = torch.nn.Linear(8 * 4 * 4, 10)

        def forward(self, x: Any) -> Any:
            x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
            return self.fc(x.view(x.size(0), -1))

    torch.manual_seed(0)
    src = tmp_path / "net.onnx"
    torch.onnx.export(
        Net().eval(), torch.randn(2, 3, 8, 8), str(src), dynamo=False, opset_version=17,
        input_names=["input"], output_names=["logits"], dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
    )  # fmt: skip
    loaded = load_model(src)
    assert any(n.op_type == "Reshape" for n in loaded.model.graph.node)
    assert not any(n.op_type == "Shape" for n in loaded.model.graph.node)  # folded: the batch is baked in
    out = tmp_path / "out.onnx"
    plan = _pad_plan(src, tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, "apply", str(src), "--plan", str(plan), "-o", str(out))
    assert code == 0, err
    written = onnx.load(str(out))
    assert _batch_dim(written).dim_param == "N"
    inits = {t.name: numpy_helper.to_array(t) for t in written.graph.initializer}
    reshape = next(n for n in written.graph.node if n.op_type == "Reshape")
    assert inits[reshape.input[1]].tolist() == [0, -1]
    x = np.random.default_rng(1).standard_normal([5, 3, 8, 8]).astype(np.float32)
    np.testing.assert_allclose(_run(out, x)[0], _run(src, x)[0], rtol=0, atol=1e-5)


def _slice_first_sample() -> onnx.ModelProto:
    """Conv, then x[:1] on the batch axis: at batch 1 a no-op, at batch 2 it drops a sample."""
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal([4, 3, 3, 3]).astype(np.float32), "w"
    )
    consts = [
        numpy_helper.from_array(np.array([v], dtype=np.int64), n) for n, v in (("s", 0), ("e", 1), ("a", 0))
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Slice", ["c", "s", "e", "a"], ["y"]),
        ],
        "slice_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        [w, *consts],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_batch_baked_into_another_op_is_written_static_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "slice.onnx"
    onnx.save(_slice_first_sample(), str(path))
    loaded = load_model(path)
    result = restore_dynamic_batch(loaded.model, loaded.dynamic_batch, loaded.static_batch)
    assert not result.restored and result.model is loaded.model
    assert result.notice == (
        "written with a static batch of 1: the input's dynamic batch could not be restored "
        "(output 'y' does not follow the batch)"
    )
    assert _batch_dim(result.model).dim_value == 1


def test_onnxruntimes_whole_reason_is_said_not_its_first_line(tmp_path: Path) -> None:
    """Bug bash: a linear Resize whose `sizes` (batch included) loading folded from Shape fails at
    batch 2 with a message over several lines; the notice kept the first, which ended in "only
    supports:". It now names the node and says onnxruntime's reason, without its source location.
    (Its data is two batches joined, so its folded sizes[0] is not the batch: one that is, restoring
    computes from the shape again, tests/test_resize_dynamic_dims.py.)"""
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal([4, 3, 3, 3]).astype(np.float32), "w"
    )
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Concat", ["c", "c"], ["cc"], axis=0),
            helper.make_node("Shape", ["cc"], ["s"]),
            helper.make_node("Slice", ["s", "zero", "two"], ["nc"]),
            helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
            helper.make_node("Resize", ["cc", "", "", "sizes"], ["y"], mode="linear", name="up"),
        ],
        "resize_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch2", 4, 16, 16])],
        [
            w,
            *(
                numpy_helper.from_array(np.array(v, dtype=np.int64), n)
                for n, v in (("zero", [0]), ("two", [2]))
            ),
            numpy_helper.from_array(np.array([16, 16], dtype=np.int64), "hw"),
        ],
    )
    path = tmp_path / "resize.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    loaded = load_model(path)
    result = restore_dynamic_batch(loaded.model, loaded.dynamic_batch, loaded.static_batch)
    assert not result.restored
    why = result.notice.removeprefix(
        "written with a static batch of 1: the input's dynamic batch could not be restored ("
    )
    assert why.startswith("Resize 'up': ") and "2-D inputs" in why and "\n" not in why
    assert ".h:" not in why and "[ONNXRuntimeError]" not in why


def test_a_static_input_file_is_left_as_it_is(zoo_model_path: Callable[[str], Path]) -> None:
    loaded = load_model(zoo_model_path("resnet_projection"))
    assert loaded.dynamic_batch == {}
    result = restore_dynamic_batch(loaded.model, loaded.dynamic_batch, loaded.static_batch)
    assert result.model is loaded.model and not result.restored and result.notice == ""


def test_loaded_at_another_batch_the_file_symbol_still_comes_back(
    zoo_model_path: Callable[[str], Path],
) -> None:
    """`--input-shape input:4x3x32x32` (or optimize --batch 4) times batch 4; the written model
    still takes any batch, as the file did."""
    src = zoo_model_path("resnet_projection_dynamic")
    loaded = load_model(src, {"input": [4, 3, 32, 32]})
    result = restore_dynamic_batch(loaded.model, loaded.dynamic_batch, loaded.static_batch)
    assert result.restored and _batch_dim(result.model).dim_param == "batch"
    x = np.random.default_rng(2).standard_normal([2, 3, 32, 32]).astype(np.float32)
    np.testing.assert_allclose(_run(result.model, x)[0], _run(src, x)[0], rtol=0, atol=1e-5)


def test_optimize_writes_the_dynamic_batch_and_reports_it(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    src = zoo_model_path("mobilenet_like_dynamic")
    outdir = tmp_path / "opt"
    code, out, err = run_cli(
        monkeypatch, capsys, "optimize", str(src), "--target", "h200", "--sms", "8", "--backend", "model",
        "--max-evals", "4", "-o", str(outdir),
    )  # fmt: skip
    assert code == 0, err
    assert "notice: written with the input's dynamic batch ('batch'), checked at batch 1 and 2" in out
    report = json.loads((outdir / "report.json").read_text())
    assert (
        report["written_batch"]
        == "written with the input's dynamic batch ('batch'), checked at batch 1 and 2"
    )
    assert "- model.onnx: written with the input's dynamic batch" in (outdir / "report.md").read_text()
    assert _batch_dim(onnx.load(str(outdir / "model.onnx"))).dim_param == "batch"


def test_a_uint8_input_is_fed_its_own_type(tmp_path: Path) -> None:
    """A model that takes uint8 pixels and casts them itself: the check feeds uint8 (verify's input
    types), so the dynamic batch comes back."""
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal([4, 3, 3, 3]).astype(np.float32), "w"
    )
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
            helper.make_node("Conv", ["xf", "w"], ["y"], pads=[1, 1, 1, 1]),
        ],
        "uint8_input",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 8, 8])],
        [w],
    )
    path = tmp_path / "u8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    loaded = load_model(path)
    result = restore_dynamic_batch(loaded.model, loaded.dynamic_batch, loaded.static_batch)
    assert result.restored, result.notice
    assert _batch_dim(result.model).dim_param == "n"
