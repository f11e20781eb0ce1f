"""A model with a sparse initializer (or a Constant's sparse_value) loads: onnxruntime runs it, but
deployopt called it "wrongly typed tensors (onnxruntime cannot load it)". Loading stores such
constants dense (a notice says so), so analysis and edits work and written models are dense."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

from deployopt.coupling import analyze
from deployopt.errors import ModelError
from deployopt.model import load_model

WEIGHT = "features.2.expand.conv.weight"


def _sparse_of(arr: np.ndarray, name: str, layout: str) -> onnx.SparseTensorProto:
    """COO form of `arr`: indices linear ([NNZ]) or one row per value ([NNZ, rank])."""
    flat = arr.ravel()
    idx = np.nonzero(flat)[0]
    if layout == "rows":
        indices = np.stack(np.unravel_index(idx, arr.shape), axis=1).astype(np.int64)
    else:
        indices = idx.astype(np.int64)
    return helper.make_sparse_tensor(
        nh.from_array(flat[idx], name), nh.from_array(indices, ""), list(arr.shape)
    )


def _with_sparse_weight(base: onnx.ModelProto, layout: str) -> tuple[onnx.ModelProto, np.ndarray]:
    """`base` with WEIGHT (half its values zeroed) as a sparse initializer; the dense weight."""
    m = onnx.ModelProto()
    m.CopyFrom(base)
    w = next(t for t in m.graph.initializer if t.name == WEIGHT)
    arr = nh.to_array(w).copy()
    arr.ravel()[::2] = 0
    m.graph.initializer.remove(w)
    m.graph.sparse_initializer.append(_sparse_of(arr, WEIGHT, layout))
    onnx.checker.check_model(m)
    return m, arr


def _run(model: onnx.ModelProto | Path, x: np.ndarray) -> np.ndarray:
    src = str(model) if isinstance(model, Path) else model.SerializeToString()
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


@pytest.mark.parametrize("layout", ["linear", "rows"])
def test_sparse_initializer_loads_dense(
    layout: str, tmp_path: Path, zoo_model: Callable[[str], onnx.ModelProto]
) -> None:
    sparse, dense = _with_sparse_weight(zoo_model("mobilenet_like"), layout)
    path = tmp_path / "sparse.onnx"
    onnx.save(sparse, path)
    loaded = load_model(path)
    assert not loaded.model.graph.sparse_initializer
    got = next(t for t in loaded.model.graph.initializer if t.name == WEIGHT)
    np.testing.assert_array_equal(nh.to_array(got), dense)
    assert any("sparse" in n and WEIGHT in n and "dense" in n for n in loaded.notices), loaded.notices
    groups = {g.id: g for g in analyze(loaded).groups}
    assert not groups["features.2.expand.conv"].frozen
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(_run(loaded.model, x), _run(path, x), rtol=1e-5, atol=1e-5)


def test_apply_writes_a_dense_model_that_computes_the_same(
    tmp_path: Path,
    zoo_model: Callable[[str], onnx.ModelProto],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sparse, _ = _with_sparse_weight(zoo_model("mobilenet_like"), "linear")
    path = tmp_path / "sparse.onnx"
    onnx.save(sparse, path)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {"features.2.expand.conv": 104}}))
    out = tmp_path / "out.onnx"
    code, _, err = run_cli(monkeypatch, capsys, "apply", str(path), "--plan", str(plan), "-o", str(out))
    assert code == 0, err
    assert "wrongly typed" not in err and "sparse" in err
    written = onnx.load(out)
    assert not written.graph.sparse_initializer
    w = next(t for t in written.graph.initializer if t.name == WEIGHT)
    assert w.dims[0] == 104
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(path, x), rtol=1e-4, atol=1e-5)


def test_constant_sparse_value_loads_dense(tmp_path: Path) -> None:
    """A Constant node's `sparse_value` (the Conv's weight) is stored as its dense `value`."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    w[1] = 0
    nodes = [
        helper.make_node("Constant", [], ["w"], name="wconst", sparse_value=_sparse_of(w, "w", "rows")),
        helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
        helper.make_node("Conv", ["y", "w2"], ["z"], name="conv2"),
    ]
    io = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    out = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 8, 8])]
    w2 = nh.from_array(rng.standard_normal((2, 4, 1, 1)).astype(np.float32), "w2")
    model = helper.make_model(helper.make_graph(nodes, "g", io, out, [w2]))
    model.opset_import[0].version = 17
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    loaded = load_model(path)
    attrs = [a for n in loaded.model.graph.node for a in n.attribute if a.name == "sparse_value"]
    assert not attrs
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(loaded.model, x), _run(path, x), rtol=1e-5, atol=1e-6)


def test_sparse_indices_out_of_range_are_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Indices past the dims: one line naming the initializer, no traceback."""
    sparse = helper.make_sparse_tensor(
        nh.from_array(np.ones(2, np.float32), "w"),
        nh.from_array(np.array([1, 40], np.int64), ""),
        [4, 3, 1, 1],
    )
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")]
    io = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])]
    graph = helper.make_graph(nodes, "g", io, out)
    graph.sparse_initializer.append(sparse)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    with pytest.raises(ModelError, match="sparse initializer 'w'"):
        load_model(path)
    code, _, err = run_cli(monkeypatch, capsys, "analyze", str(path))
    assert code != 0 and "sparse initializer 'w'" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
