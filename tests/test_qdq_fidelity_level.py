"""Fidelity sessions compute a Q/DQ model's graph as written, not onnxruntime's fused int8 kernels.

At full optimization onnxruntime fuses DQ → Conv → Q into an int8 QLinearConv only where the
conv's bias scale is its input scale × weight scale; a padded conv's new channels carry scale 1.0,
so the padded model ran that conv in float while its original ran int8. The two round otherwise:
an exact pad of a quantize_static MobileNetV2 failed verify (max error 0.29, top-1 81 %). Here a
small per-channel model, padded exactly, must compare at 0.0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from deployopt import fidelity
from deployopt.coupling import analyze
from deployopt.fidelity import CalibrationSet, ReferenceRun, compare_models, cpu_session
from deployopt.surgery import apply_plan

BASIC = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
ALL = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
SHAPE = (1, 8, 128, 128)  # enough values that the int8 and float paths round some one apart


def _float_net(seed: int = 0) -> onnx.ModelProto:
    """3×3 conv (8 → 16, bias) → Relu → 1×1 conv (16 → 4): the 16 channels are one free group."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((4, 16, 1, 1)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="expand", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="project"),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_level",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


class _Calibration:
    """Two random inputs: enough for quantize_static to pick scales."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self._batches = iter([{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(2)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)

    def rewind(self) -> None:  # the CalibrationDataReader interface
        pass


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[onnx.ModelProto, ...]:
    """(float model, its per-channel int8 Q/DQ twin, that twin padded exactly 16 → 19). The last
    conv stays float (nodes_to_exclude), so a value the first conv's Q rounds otherwise reaches
    the output unrounded."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    folder = tmp_path_factory.mktemp("qdq_level")
    float_path, qdq_path = folder / "float.onnx", folder / "qdq.onnx"
    model = _float_net()
    onnx.save(model, float_path)
    quantization.quantize_static(
        str(float_path),
        str(qdq_path),
        _Calibration(),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=True,
        activation_type=quantization.QuantType.QInt8,
        weight_type=quantization.QuantType.QInt8,
        nodes_to_exclude=["project"],
    )
    qdq = onnx.load(qdq_path)
    analysis = analyze(qdq)
    groups = analysis.free_groups()
    assert [g.width for g in groups] == [16]
    padded = apply_plan(qdq, {g.id: g.width + 3 for g in groups}, analysis)
    return model, qdq, padded


def _samples(n: int = 16) -> CalibrationSet:
    rng = np.random.default_rng(1)
    samples = [{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(n)]
    return CalibrationSet(samples, "random", True)


def _level(session: Any) -> Any:
    return session.get_session_options().graph_optimization_level


def test_exact_pad_of_a_qdq_model_compares_exactly(models: tuple[onnx.ModelProto, ...]) -> None:
    """verify's comparison and optimize's gate (a ReferenceRun kept for every candidate) alike."""
    _, qdq, padded = models
    assert any(n.op_type == "QuantizeLinear" for n in padded.graph.node)
    for reference in (qdq, ReferenceRun(qdq)):
        report = compare_models(reference, padded, _samples())
        assert report.max_abs_error == 0.0
        assert report.check() == []


def test_qdq_sessions_run_unfused_and_float_ones_fully_optimized(
    models: tuple[onnx.ModelProto, ...], tmp_path: Path
) -> None:
    model, qdq, _ = models
    assert _level(cpu_session(qdq, "q")) == BASIC
    path = tmp_path / "qdq.onnx"
    onnx.save(qdq, path)
    assert _level(cpu_session(path, "q")) == BASIC  # a file: read without its weights
    assert _level(cpu_session(model, "f")) == ALL
    assert _level(cpu_session(qdq, "q", qdq=False)) == ALL
    assert _level(cpu_session(qdq, "q", optimize=False)) == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert ReferenceRun(qdq).qdq and not ReferenceRun(model).qdq


def test_both_sessions_of_a_comparison_run_at_one_level(
    models: tuple[onnx.ModelProto, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A float reference against its Q/DQ twin (checking a quantization): both unfused, so the
    float one is not read through other kernels than the quantized one."""
    model, qdq, _ = models
    levels: list[Any] = []
    real = fidelity.cpu_session

    def recording(*args: Any, **kwargs: Any) -> Any:
        session = real(*args, **kwargs)
        levels.append(_level(session))
        return session

    monkeypatch.setattr(fidelity, "cpu_session", recording)
    for reference, candidate in ((model, qdq), (qdq, model)):
        levels.clear()
        compare_models(reference, candidate, _samples(2))
        assert levels == [BASIC, BASIC]
    levels.clear()
    compare_models(model, model, _samples(2))
    assert levels == [ALL, ALL]


def test_channel_ranking_of_a_qdq_model_runs_unfused(models: tuple[onnx.ModelProto, ...]) -> None:
    """The trim ranking's probe session (importance) goes through cpu_session too."""
    from deployopt.importance import _probe_session

    _, qdq, _ = models
    assert _level(_probe_session(qdq, ["r"], "ranking")) == BASIC
