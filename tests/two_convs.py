"""Two UNNAMED parallel convs into a Concat and a 1×1 conv, saved in either node order: where the
position names (`Conv_0`, `Conv_1`) meet the other conv (the plan checks' tests)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def parallel_convs(order: str, a: int, b: int, seed: int = 0) -> onnx.ModelProto:
    """Convs A (`a` filters) and B (`b`) over x [1, 3, 16, 16], concatenated, then an 8-filter 1×1
    conv; `order` "ab" or "ba" says which comes first in the node list (both valid topological
    orders); another `seed`: other weights, another checkpoint of the same model."""
    rng = np.random.default_rng(seed)
    init = [
        numpy_helper.from_array(rng.standard_normal((a, 3, 3, 3)).astype(np.float32), "wa"),
        numpy_helper.from_array(rng.standard_normal((b, 3, 3, 3)).astype(np.float32), "wb"),
        numpy_helper.from_array(rng.standard_normal((8, a + b, 1, 1)).astype(np.float32), "wc"),
    ]
    conv_a = helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1])
    conv_b = helper.make_node("Conv", ["x", "wb"], ["b"], pads=[1, 1, 1, 1])
    cat = helper.make_node("Concat", ["a", "b"], ["c"], axis=1)
    out = helper.make_node("Conv", ["c", "wc"], ["y"])
    graph = helper.make_graph(
        [*([conv_a, conv_b] if order == "ab" else [conv_b, conv_a]), cat, out],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model
