"""The model behind benchmarks/results/h200_backends/bench_dynamic_reshape_eager.json: a conv whose
output is flattened by a Reshape whose shape is computed at run time (Shape → Gather → Unsqueeze →
Concat), as dynamic-shape exports have. onnx2torch builds that shape on the GPU, so CUDA-graph
capture fails and the torch backend times eager passes instead (docs/backends.md).

    python benchmarks/capture_fallback_model.py dyn.onnx
    deployopt bench dyn.onnx --backend torch --runs 30 --json     # on a GPU
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((64, 32, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(np.array([0], np.int64), "ax0"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Shape", ["c"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0, name="gather"),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"], name="unsq"),
        helper.make_node("Concat", ["b1", "minus1"], ["shp"], axis=0, name="cat"),
        helper.make_node("Reshape", ["c", "shp"], ["y"], name="flatten"),
    ]
    graph = helper.make_graph(
        nodes,
        "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32, 56, 56])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64 * 56 * 56])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default="dynamic_reshape.onnx", help="where to write the model")
    onnx.save(build(), ap.parse_args().out)
