"""Small hand-built graphs from the random-graph fuzzer's repros, and an exact onnxruntime check."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from ort_session import cpu_session

RNG_SEED = 0


def const(name: str, value: object, dtype: type = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def model(
    nodes: list[onnx.NodeProto],
    inits: list[onnx.TensorProto],
    out_shape: list[int],
    opset: int = 17,
    in_shape: tuple[int, ...] = (1, 3, 8, 8),
) -> onnx.ModelProto:
    """x [1, 3, 8, 8] → nodes → y; checked, shapes inferred (what analyze reads)."""
    graph = helper.make_graph(
        nodes,
        "fuzz",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)


def run(m: onnx.ModelProto, in_shape: tuple[int, ...] = (1, 3, 8, 8)) -> np.ndarray:
    x = np.random.default_rng(1).standard_normal(in_shape).astype(np.float32)
    return cpu_session(m).run(None, {"x": x})[0]


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal up to the order a kernel picked for another channel count sums the same terms in
    (docs/surgery.md: padded channels add exact zeros, a 1-channel kernel and a 4-channel one
    round differently by an ulp or so)."""
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
