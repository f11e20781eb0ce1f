"""onnxruntime CPU sessions for the exactness tests (padded against original outputs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from deployopt.onnxruntime_compat import inference_session

LEVELS = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)


def cpu_session(
    model: onnx.ModelProto, level: ort.GraphOptimizationLevel = LEVELS[1]
) -> ort.InferenceSession:
    """A CPU session whose int8 convs are exact on every x86 CPU.

    Without VNNI (AVX2, AVX-512F) onnxruntime's fused int8 convs multiply with VPMADDUBSW, whose
    int16 sums of product pairs saturate, and which products pair up depends on the channel count:
    a QDQ model padded by 3 channels then differs from its original by the overflow, not by the
    padding (1.56 on an AVX2 EPYC, where the original differs from its own unfused run by 4.5).
    `session.x64quantprecision` makes onnxruntime use its U8U8 kernels, which do not saturate.
    """
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.add_session_config_entry("session.x64quantprecision", "1")
    opts.add_session_config_entry("optimization.disable_specified_optimizers", "NchwcTransformer")
    return session(model, opts)


def session(model: onnx.ModelProto | bytes | str, options: Any = None) -> ort.InferenceSession:
    """An onnxruntime CPU session of a model, its bytes or its file, as deployopt opens one: an
    onnxruntime older than onnx (Python 3.9's and 3.10's newest wheels) reads the IR version the
    tests' `helper.make_model` writes (deployopt.onnxruntime_compat)."""
    if isinstance(model, bytes):
        model = onnx.load_from_string(model)
    return inference_session(ort, model, options, ["CPUExecutionProvider"])


def _runs_a_noop_reduce() -> bool:
    """Whether this onnxruntime runs a reduction with no axes and noop_with_empty_axes=1 (1.19 and
    1.23 fail it: "Reduction on all axes, output size should be 1"; 1.32 runs it)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    node = helper.make_node("ReduceSum", ["x"], ["y"], noop_with_empty_axes=1)
    model = helper.make_model(
        helper.make_graph([node], "noop", [x], [y]), opset_imports=[helper.make_opsetid("", 13)]
    )
    model.ir_version = 8
    try:
        session(model).run(None, {"x": np.ones((2, 3), np.float32)})
    except Exception:
        return False
    return True


#: such an onnxruntime cannot run a model with that reduction at all, padded or not
NOOP_REDUCE_BROKEN = pytest.mark.skipif(
    not _runs_a_noop_reduce(),
    reason="this onnxruntime fails a reduction with no axes and noop_with_empty_axes=1",
)

#: onnxruntime 1.23 (Python 3.10's newest; 1.23.2 on this machine's AVX-VNNI CPU): its fused int8
#: convs (ORT_ENABLE_ALL) compute a quantize_static ResNet built at odd channel widths (7, 9, 15;
#: never padded) 2.78 off its own unfused run in the logits, at 4, 6, 12 exactly; 1.32 is exact at
#: both. So an exact pad by 3 (or 1) of the 4/6/12 ResNet is 0.60 off its original fused and 0 off
#: unfused, and by 8 exact fused too: the kernels', not the edit's (the bias-scale fix, e817897,
#: left it so). fidelity's check runs a Q/DQ model unfused (ORT_ENABLE_BASIC) and is exact on 1.23.
INT8_KERNELS_INEXACT = pytest.mark.skipif(
    ort.__version__.startswith("1.23."),
    reason="onnxruntime 1.23's fused int8 convs are off their unfused run at odd channel widths (a pad "
    "to 7, 9, 15), padded model or not",
)


def count_sessions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the sessions deployopt's ort backend opens, one entry each: each replicate of `bench
    --repeat` must open its own, and a refusal before timing opens none."""
    from deployopt.backends.ort import OrtBackend

    opened: list[int] = []
    real = OrtBackend.open

    def open_(self: Any, options: Any) -> Any:
        opened.append(1)
        return real(self, options)

    monkeypatch.setattr(OrtBackend, "open", open_)
    return opened
