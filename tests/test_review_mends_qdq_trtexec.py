"""Mends from the review of this stop's Q/DQ and trtexec commits.

- a plain ConvTranspose's quantized bias got padded scale 1.0 (every other conv path got input ×
  weight scale, as quantize_static writes them and onnxruntime's fusion asks);
- a kept ReferenceRun of a float model gave a Q/DQ candidate onnxruntime's fused int8 kernels,
  where the same reference passed as a model computed it unfused;
- Ctrl-C during trtexec, where os has no killpg (Windows), raised AttributeError and left it running.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from test_qdq_bias_scale_pad import SHAPE, quantize_per_channel

from deployopt import fidelity
from deployopt.coupling import analyze
from deployopt.surgery import apply_plan


def _net(folder: Path, *, transpose: bool) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """conv 8 → 16 (bias) → Relu → [ConvTranspose 16 → 16 (bias), stride 2 → Relu] → 1×1 conv → 4,
    and its per-channel int8 quantize_static twin."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((16, 16, 2, 2)).astype(np.float32), "wt"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "bt"),
        numpy_helper.from_array(rng.standard_normal((4, 16, 1, 1)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="expand", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
    ]
    last = "r"
    if transpose:
        nodes += [
            helper.make_node("ConvTranspose", ["r", "wt", "bt"], ["t"], name="up", strides=[2, 2]),
            helper.make_node("Relu", ["t"], ["tr"], name="relu_up"),
        ]
        last = "tr"
    nodes.append(helper.make_node("Conv", [last, "w2"], ["y"], name="project"))
    graph = helper.make_graph(
        nodes,
        "mends",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [i for i in inits if transpose or i.name not in ("wt", "bt")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    src, dst = folder / f"float{int(transpose)}.onnx", folder / f"qdq{int(transpose)}.onnx"
    onnx.save(model, src)
    return model, quantize_per_channel(src, dst, rng)


def _init(model: onnx.ModelProto, name: str) -> np.ndarray:
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == name)


def test_a_plain_conv_transposes_quantized_bias_pads_with_input_times_weight_scale(tmp_path: Path) -> None:
    _, qdq = _net(tmp_path, transpose=True)
    analysis = analyze(qdq)
    padded = apply_plan(qdq, {g.id: 19 for g in analysis.free_groups()}, analysis)
    up = next(n for n in qdq.graph.node if n.name == "up" or n.op_type == "ConvTranspose")
    dq = next(n for n in qdq.graph.node if up.input[0] in n.output)
    assert dq.op_type == "DequantizeLinear"
    bias_dq = next(n for n in qdq.graph.node if up.input[2] in n.output)
    bias_scale = _init(padded, bias_dq.input[1])
    assert bias_scale.shape == (19,)
    # per-channel weights: the padded weight scale is 1.0, so the bias's is the input's scale
    np.testing.assert_array_equal(bias_scale[16:], np.float32(_init(qdq, dq.input[1]).reshape(-1)[0]))
    feeds = {"x": np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)}
    run = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        for m in (qdq, padded)
    ]
    np.testing.assert_array_equal(run[0], run[1])


def test_a_kept_float_reference_computes_a_qdq_candidate_unfused(tmp_path: Path, monkeypatch) -> None:
    float_model, qdq = _net(tmp_path, transpose=False)
    levels: list[str] = []
    real = fidelity.cpu_session

    def recording(*args, **kwargs):
        session = real(*args, **kwargs)
        levels.append(str(session.get_session_options().graph_optimization_level).split(".")[-1])
        return session

    monkeypatch.setattr(fidelity, "cpu_session", recording)
    rng = np.random.default_rng(1)
    calib = fidelity.CalibrationSet(
        [{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(2)], "random", True
    )
    reference = fidelity.ReferenceRun(float_model)
    levels.clear()
    fidelity.compare_models(reference, qdq, calib)
    assert levels == ["ORT_ENABLE_BASIC"]  # the candidate's session: its Q/DQ pairs as the graph writes them
    levels.clear()
    fidelity.compare_models(float_model, qdq, calib)
    assert levels == ["ORT_ENABLE_BASIC", "ORT_ENABLE_BASIC"]


def test_kill_group_without_process_groups_kills_trtexec_itself(monkeypatch) -> None:
    from deployopt.backends import trtexec

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        monkeypatch.delattr(os, "killpg")
        trtexec._kill_group(proc)  # AttributeError before
        assert proc.wait(timeout=10) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
