"""onnxruntime CPU sessions for the exactness tests (padded against original outputs)."""

from __future__ import annotations

from typing import Any

import onnx
import onnxruntime as ort
import pytest

from deployopt.onnxruntime_compat import inference_session

LEVELS = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)

#: onnxruntime before 1.20 (Python 3.9's last is 1.19) fails a reduction with no axes and
#: noop_with_empty_axes=1 ("Reduction on all axes, output size should be 1"): it cannot run such
#: a model at all, padded or not
NOOP_REDUCE_BROKEN = pytest.mark.skipif(
    tuple(int(v) for v in ort.__version__.split(".")[:2]) < (1, 20),
    reason="onnxruntime < 1.20 cannot run a reduction with no axes and noop_with_empty_axes=1",
)


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
