"""Review of verify's batch rows, its memory pre-flight and the profilers' TMPDIR line.

The batch was dim 0 of the model's first input: a `thr [1]` before `x [4, 16]` made it 1, so the
[4, 16] output was scored whole and a spoiled row passed (cosine_min 0.074 over 16 "rows" where
per row it is negative). A model with no inputs made the pre-flight's `min(count, *())` a
TypeError traceback, where verify said `the model has no inputs to feed`."""

from __future__ import annotations

import errno
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _thr_first(path: Path, scale: np.ndarray) -> Path:
    """Inputs thr [1] then x [4, 16]; y = x · scale + thr [4, 16]."""
    graph = h.make_graph(
        [h.make_node("Mul", ["x", "scale"], ["m"]), h.make_node("Add", ["m", "thr"], ["y"])],
        path.stem,
        [h.make_tensor_value_info("thr", T.FLOAT, [1]), h.make_tensor_value_info("x", T.FLOAT, [4, 16])],
        [h.make_tensor_value_info("y", T.FLOAT, [4, 16])],
        [nh.from_array(scale.astype(np.float32), "scale")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_the_batch_is_the_feature_inputs_not_the_first_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    ref = _thr_first(tmp_path / "ref.onnx", np.ones((4, 16)))
    spoiled = np.ones((4, 16))
    spoiled[0] = -1.0  # row 0 of every batch negated: its cosine is about −1
    cand = _thr_first(tmp_path / "cand.onnx", spoiled)
    code, out, err = run_cli(monkeypatch, capsys, "verify", str(ref), str(cand), "--count", "4", "--json")
    rep = json.loads(out)
    assert (rep["samples"], rep["rows"]) == (4, 16), out + err
    assert rep["cosine_min"] < 0 and code == 1


def test_a_model_without_inputs_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    const = h.make_node("Constant", [], ["c"], value=nh.from_array(np.ones((1, 4), np.float32)))
    graph = h.make_graph(
        [const, h.make_node("Relu", ["c"], ["y"])],
        "noin",
        [],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 4])],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.save(tmp_path / "a.npy", np.zeros((2, 1, 4), np.float32))
    m = str(tmp_path / "m.onnx")
    code, out, err = run_cli(
        monkeypatch, capsys, "verify", m, m, "--calibration-data", str(tmp_path / "a.npy")
    )
    assert code == 2 and "Traceback" not in err + out
    assert "error: the model has no inputs to feed" in err + out


def test_one_trace_failed_line_for_both_profilers() -> None:
    """The ort backend and the torch worker each wrote this line and its ENOENT rule."""
    from deployopt.errors import trace_failed

    tmp = tempfile.gettempdir()
    full = OSError(errno.ENOSPC, "No space left on device")
    assert trace_failed("onnxruntime's profiler", full) == (
        f"onnxruntime's profiler trace could not be written or read in {tmp} (TMPDIR; disk full?): "
        "No space left on device"
    )
    line = f"the torch profiler's trace could not be written or read in {tmp} (TMPDIR; disk full?)"
    assert trace_failed("the torch profiler's", FileNotFoundError(errno.ENOENT, "gone")) == line
    assert trace_failed("the torch profiler's", ValueError("Expecting value")) == line


def test_the_batch_is_the_input_dim_the_outputs_have_first() -> None:
    """A `lut [16, 2, 2]` beside `x [4, 16]`, or an NHWC image of batch 1 beside [4, 16] features:
    the input of the most dims gave 16 or 1, and a [4, 10] output was scored whole, its rows unseen."""
    from deployopt.fidelity import _input_batch

    z = np.zeros
    out = [z((4, 10)), z(())]
    assert _input_batch({"x": z((4, 16)), "lut": z((16, 2, 2))}, ["x", "lut"], out) == 4
    assert _input_batch({"img": z((1, 8, 8, 3)), "feat": z((4, 16))}, ["img", "feat"], out) == 4
    assert _input_batch({"thr": z((1,)), "x": z((4, 16))}, ["thr", "x"], out) == 4
    # no output says: the input of the most dims, as before
    assert _input_batch({"thr": z((1,)), "x": z((4, 16))}, ["thr", "x"], [z(())]) == 4
    assert _input_batch({"s": z(())}, ["s"], out) == 1
