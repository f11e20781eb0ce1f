"""An onnxruntime older than the onnx that wrote the model (Python 3.9's and 3.10's newest wheels):
sessions open on a copy that says the IR version onnxruntime reads, where the opsets allow it.
The old onnxruntime is played by a wrapper that refuses what onnxruntime 1.19 refuses, in its words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper

from deployopt.onnxruntime_compat import inference_session

REAL = onnxruntime.InferenceSession


class OldOnnxRuntime:
    """onnxruntime that reads IR versions up to `max_ir` (1.19: 10), refusing newer ones as it does."""

    def __init__(self, max_ir: int = 10) -> None:
        self.max_ir = max_ir
        self.loaded: list[int] = []

    def InferenceSession(self, source: Any, options: Any = None, providers: Any = None) -> Any:
        model = onnx.load(source, load_external_data=False) if isinstance(source, str) else None
        model = model or onnx.load_from_string(source)
        if model.ir_version > self.max_ir:
            raise RuntimeError(
                "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Failed to load model with error: "
                "/onnxruntime_src/onnxruntime/core/graph/model.cc:180 onnxruntime::Model::Model(...) "
                f"Unsupported model IR version: {model.ir_version}, max supported IR version: {self.max_ir}"
            )
        self.loaded.append(model.ir_version)
        return REAL(source, options, providers=providers)


def relu_model(ir_version: int, opset: int = 17) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def test_a_model_newer_than_onnxruntime_reads_opens_at_the_ir_it_reads(tmp_path: Path) -> None:
    old = OldOnnxRuntime()
    path = tmp_path / "m.onnx"
    onnx.save(relu_model(12), str(path))
    for source in (relu_model(12), str(path)):
        sess = inference_session(old, source, None, ["CPUExecutionProvider"])
        out = sess.run(None, {"x": np.array([[-1, 2, -3, 4]], np.float32)})[0]
        np.testing.assert_array_equal(out, [[0, 2, 0, 4]])
    assert old.loaded == [10, 10]
    assert onnx.load(str(path)).ir_version == 12  # the file is as it was
    inference_session(old, relu_model(8), None, ["CPUExecutionProvider"])
    assert old.loaded[-1] == 8  # one it reads: loaded as it is, at once


def test_what_onnxruntime_cannot_read_anyway_keeps_its_own_error() -> None:
    """An opset that needs a newer IR than onnxruntime reads (opset 23: IR 11) is onnxruntime's own
    refusal; a copy that fails for another reason says that reason."""
    with pytest.raises(RuntimeError, match="Unsupported model IR version: 11, max supported IR version: 10"):
        inference_session(OldOnnxRuntime(), relu_model(11, opset=23), None, ["CPUExecutionProvider"])
    broken = relu_model(12)
    broken.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(Exception, match="NoSuchOp"):
        inference_session(OldOnnxRuntime(), broken, None, ["CPUExecutionProvider"])


def test_verify_and_bench_on_an_older_onnxruntime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end: a model saved by the newest onnx (IR 12) verifies and times on an onnxruntime
    that reads up to IR 10; before, both were 'onnxruntime cannot load it'."""
    old = OldOnnxRuntime()
    monkeypatch.setattr(onnxruntime, "InferenceSession", old.InferenceSession)
    path = tmp_path / "m.onnx"
    onnx.save(relu_model(12), str(path))
    code, out, err = run_cli(monkeypatch, capsys, "verify", str(path), str(path))
    assert code == 0 and "PASSED" in out, err
    code, out, err = run_cli(monkeypatch, capsys, "bench", str(path), "--backend", "ort", "--runs", "3")
    assert code == 0, err
    assert old.loaded and set(old.loaded) == {10}


def test_constant_folding_works_on_an_older_onnxruntime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading folds constant subgraphs through onnxruntime (onnx-graphsurgeon), at the model's IR
    version: on an onnxruntime older than the model's onnx each fold failed and was skipped
    silently, leaving a Shape → Range → Cast chain that freezes the channels it feeds. The loaded
    model keeps its own IR version."""
    from deployopt.model import load_model

    old = OldOnnxRuntime()
    monkeypatch.setattr(onnxruntime, "InferenceSession", old.InferenceSession)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    inits = [onnx.numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("zero", 0), ("one", 1))]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=1),
        helper.make_node("Squeeze", ["s"], ["n"]),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
        helper.make_node("Cast", ["r"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "f"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=12), str(path))
    loaded = load_model(path)
    assert [n.op_type for n in loaded.model.graph.node] == ["Add"] and 8 in old.loaded
    assert loaded.model.ir_version == 12


def test_lowering_holds_one_serialized_model_at_a_time_and_leaves_the_model_as_it_was() -> None:
    """The refused bytes and the lowered ones were held at once, and the lowered ones made from a
    whole copy of the model: twice the model (CI on Python 3.10, whose onnxruntime reads an older
    IR: a ranking of a 64 MiB weight held 128 MiB). The caller's model keeps its IR version."""
    from traced_memory import traced_peak

    weight = np.zeros((2048, 2048), np.float32)  # 16 MiB
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2048])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm", [x], [y],
        [onnx.numpy_helper.from_array(weight, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=12)
    old = OldOnnxRuntime()
    _, peak = traced_peak(lambda: inference_session(old, model, None, ["CPUExecutionProvider"]))
    assert old.loaded == [10]
    assert model.ir_version == 12
    assert peak < 1.5 * weight.nbytes, f"held {peak >> 20} MiB for a {weight.nbytes >> 20} MiB model"
