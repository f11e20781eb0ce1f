"""Q/DQ nodes inside an If/Loop/Scan body or a model-local function make a model one that
`cpu_session` computes unfused (ORT_ENABLE_BASIC), as top-level ones do: onnxruntime fuses Q/DQ
in subgraphs and inlined functions too, and has_qdq_nodes saw only the main graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from deployopt.fidelity import cpu_session, has_qdq_nodes


def _qdq_nodes(src: str, dst: str, prefix: str) -> list[onnx.NodeProto]:
    """src → QuantizeLinear → DequantizeLinear → dst, with its scale and zero point as Constants."""
    return [
        helper.make_node(
            "Constant", [], [f"{prefix}_s"], value=helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])
        ),
        helper.make_node(
            "Constant", [], [f"{prefix}_z"], value=helper.make_tensor("z", TensorProto.UINT8, [], [128])
        ),
        helper.make_node("QuantizeLinear", [src, f"{prefix}_s", f"{prefix}_z"], [f"{prefix}_q"]),
        helper.make_node("DequantizeLinear", [f"{prefix}_q", f"{prefix}_s", f"{prefix}_z"], [dst]),
    ]


def _if_model(quantized: bool, depth: int = 1) -> onnx.ModelProto:
    """y = If(cond) then <body> else Identity(x), the then-branch an If `depth - 1` deeper still;
    the innermost body is Q/DQ of x (`quantized`) or Relu(x)."""
    out = helper.make_tensor_value_info
    inner = _qdq_nodes("x", "t0", "q0") if quantized else [helper.make_node("Relu", ["x"], ["t0"])]
    body = helper.make_graph(inner, "body0", [], [out("t0", TensorProto.FLOAT, [1, 4])])
    for level in range(1, depth):
        other = helper.make_graph(
            [helper.make_node("Identity", ["x"], [f"e{level}"])],
            f"else{level}",
            [],
            [out(f"e{level}", TensorProto.FLOAT, [1, 4])],
        )
        wrap = helper.make_node("If", ["cond"], [f"t{level}"], then_branch=body, else_branch=other)
        body = helper.make_graph([wrap], f"body{level}", [], [out(f"t{level}", TensorProto.FLOAT, [1, 4])])
    other = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [out("e", TensorProto.FLOAT, [1, 4])]
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=other)],
        "g",
        [out("cond", TensorProto.BOOL, []), out("x", TensorProto.FLOAT, [1, 4])],
        [out("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _function_model() -> onnx.ModelProto:
    """y = local.qdq(x), a model-local function whose body is Q/DQ of its input."""
    out = helper.make_tensor_value_info
    fn = helper.make_function(
        "local", "qdq", ["a"], ["b"], _qdq_nodes("a", "b", "f"), [helper.make_opsetid("", 17)]
    )
    graph = helper.make_graph(
        [helper.make_node("qdq", ["x"], ["y"], domain="local")],
        "g",
        [out("x", TensorProto.FLOAT, [1, 4])],
        [out("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)], functions=[fn]
    )
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize(
    "make",
    [lambda: _if_model(True), lambda: _if_model(True, depth=3), _function_model],
    ids=["if", "if3", "function"],
)
def test_qdq_below_the_main_graph_is_seen_in_memory_and_in_a_file(make, tmp_path: Path) -> None:
    model = make()
    assert not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
    assert has_qdq_nodes(model)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert has_qdq_nodes(path)
    assert has_qdq_nodes(str(path))  # the cached answer for the file, asked again


def test_a_float_model_with_subgraphs_has_none(tmp_path: Path) -> None:
    model = _if_model(False, depth=2)
    assert not has_qdq_nodes(model)
    path = tmp_path / "f.onnx"
    onnx.save(model, path)
    assert not has_qdq_nodes(path)


def test_the_session_of_a_subgraph_qdq_model_is_not_fused(tmp_path: Path) -> None:
    """What the answer changes: the session's optimization level, and it still computes the model."""
    import onnxruntime as ort

    path = tmp_path / "m.onnx"
    onnx.save(_if_model(True), path)
    sess = cpu_session(path, "cannot load")
    level = sess.get_session_options().graph_optimization_level
    assert level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    x = np.array([[0.0, 0.26, -1.0, 3.0]], np.float32)
    (y,) = sess.run(None, {"cond": np.array(True), "x": x})
    np.testing.assert_allclose(y, [[0.0, 0.3, -1.0, 3.0]], atol=1e-6)  # rounded to 0.1 steps
