"""Names deployopt invents at load (a shared constant's copies, an equal Split's sizes, a Shape
range's Slice bounds) avoid every name the graph holds: graph inputs and outputs, value_info,
node inputs and names, and names inside If/Loop/Scan bodies, not only initializers and node
outputs. A copy named like a graph input (`b__1`) took that input's readers: a wrong freeze
("constant 'b__1' is shared by several ops") and a model that did not validate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

from deployopt.coupling import analyze
from deployopt.model import _slice_shape_ranges, load_model

RNG = np.random.default_rng(0)


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return nh.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def _vi(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _save(model: onnx.ModelProto, path: Path, opset: int = 13) -> Path:
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", opset))
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _shared_bias(second_input: str) -> onnx.ModelProto:
    """Two convs reading one bias `b`, and a graph input named `second_input` read by an Add."""
    nodes = [
        helper.make_node("Conv", ["x", "W1", "b"], ["y1"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "W2", "b"], ["y2"], name="c2", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["y1", "W3"], ["z1"], name="c3"),
        helper.make_node("Conv", ["y2", "W4"], ["z2"], name="c4"),
        helper.make_node("Add", ["z1", "z2"], ["s"], name="add"),
        helper.make_node("Add", ["s", second_input], ["out"], name="add2"),
    ]
    inits = [
        _w("W1", 6, 3, 3, 3),
        _w("W2", 6, 3, 3, 3),
        _w("b", 6),
        _w("W3", 4, 6, 1, 1),
        _w("W4", 4, 6, 1, 1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [_vi("x", [1, 3, 8, 8]), _vi(second_input, [1, 4, 8, 8])],
        [_vi("out", [1, 4, 8, 8])],
        inits,
    )
    return helper.make_model(graph)


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    out = {}
    for i in model.graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = RNG.standard_normal(dims).astype(np.float32)
    return out


def _check_same(original: onnx.ModelProto, loaded: onnx.ModelProto) -> None:
    onnx.checker.check_model(loaded, full_check=True)
    feeds = _feeds(original)
    for a, b in zip(_run(original, feeds), _run(loaded, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_constant_copy_avoids_a_graph_input_name(tmp_path: Path) -> None:
    """The second reader of `b` got a copy named `b__1`, a graph input's name: the Add that read
    the input then read the bias, and c2's group froze as sharing constant 'b__1'."""
    original = _shared_bias("b__1")
    path = _save(original, tmp_path / "m.onnx")
    loaded = load_model(path)
    groups = {g.id: g for g in analyze(loaded).groups}
    assert not groups["c1"].frozen and not groups["c2"].frozen, groups["c2"].reason
    assert "b__1" in [i.name for i in loaded.model.graph.input]
    assert "b__1" not in [t.name for t in loaded.model.graph.initializer]
    _check_same(original, loaded.model)


def test_split_sizes_avoid_a_graph_input_name(tmp_path: Path) -> None:
    """An equal Split's sizes were named `split_sizes` beside a graph input of that name."""
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["y1"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Split", ["y1"], ["a", "b"], name="split", axis=1, num_outputs=2),
        helper.make_node("Conv", ["a", "W3"], ["z1"], name="c3"),
        helper.make_node("Conv", ["b", "W4"], ["z2"], name="c4"),
        helper.make_node("Add", ["z1", "z2"], ["s"], name="add"),
        helper.make_node("Mul", ["s", "split_sizes"], ["out"], name="mul"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [_vi("x", [1, 3, 8, 8]), _vi("split_sizes", [1, 4, 8, 8])],
        [_vi("out", [1, 4, 8, 8])],
        [_w("W1", 8, 3, 3, 3), _w("W3", 4, 4, 1, 1), _w("W4", 4, 4, 1, 1)],
    )
    original = helper.make_model(graph)
    loaded = load_model(_save(original, tmp_path / "m.onnx", opset=18))
    groups = {g.id: g for g in analyze(loaded).groups}
    assert not groups["c1[0]"].frozen and not groups["c1[1]"].frozen, groups["c1[0]"].reason
    assert "split_sizes" not in [t.name for t in loaded.model.graph.initializer]
    _check_same(original, loaded.model)


def test_constant_copy_avoids_a_name_inside_a_subgraph(tmp_path: Path) -> None:
    """A name an If branch defines is in the graph's scope too: a copy named like it broke the
    model (onnx's checker: a name assigned twice)."""
    original = _shared_bias("extra")
    branch_out = [_vi("b__1", [1, 4, 8, 8])]
    then_branch = helper.make_graph([helper.make_node("Relu", ["out"], ["b__1"])], "t", [], branch_out)
    else_branch = helper.make_graph([helper.make_node("Neg", ["out"], ["b__1"])], "e", [], branch_out)
    g = original.graph
    g.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    g.node.append(
        helper.make_node(
            "If", ["cond"], ["final"], name="if", then_branch=then_branch, else_branch=else_branch
        )
    )
    del g.output[:]
    g.output.append(_vi("final", [1, 4, 8, 8]))
    loaded = load_model(_save(original, tmp_path / "m.onnx"))
    assert "b__1" not in [t.name for t in loaded.model.graph.initializer]
    onnx.checker.check_model(loaded.model, full_check=True)
    feeds = {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    feeds["extra"] = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    for cond in (True, False):
        feeds["cond"] = np.array(cond)
        np.testing.assert_allclose(
            _run(original, feeds)[0], _run(loaded.model, feeds)[0], rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("taken_by", ["input", "value_info", "node_input"])
def test_slice_bounds_avoid_every_name_in_use(taken_by: str) -> None:
    """Shape(x, start, end) becomes Slice(Shape(x), starts, ends): its bounds and the full shape
    took `s_starts` / `s_full` beside a graph input, a value_info entry or a node's (optional
    input) name of that name."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape", start=0, end=1),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "sf"], ["y"]),
    ]
    inputs = [_vi("x", [1, 3, 4, 4])]
    outputs = [_vi("y", [1, 3, 4, 4])]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    if taken_by == "input":
        graph.input.append(_vi("s_starts", [1]))
        graph.node.append(helper.make_node("Neg", ["s_starts"], ["neg"]))
        graph.output.append(_vi("neg", [1]))
    elif taken_by == "value_info":
        graph.value_info.append(_vi("s_full", [4]))
    else:  # a name read by a node (here a Relu's input produced by nothing but a graph input)
        graph.input.append(_vi("s_ends", [1]))
        graph.node.append(helper.make_node("Relu", ["s_ends"], ["r"]))
        graph.output.append(_vi("r", [1]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    g = model.graph
    before = {v.name for v in [*g.input, *g.output, *g.value_info]} | {
        t for n in g.node for t in [*n.input, *n.output, n.name]
    }
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    assert _slice_shape_ranges(rewritten) == 1
    added = {t.name for t in rewritten.graph.initializer} | {
        o for n in rewritten.graph.node if n.op_type in ("Shape", "Slice") for o in n.output
    }
    assert not (added - {"s"}) & before
    onnx.checker.check_model(rewritten, full_check=True)
    feeds = _feeds(model)
    for a, b in zip(_run(model, feeds), _run(rewritten, feeds)):
        np.testing.assert_array_equal(a, b)


def test_names_in_use_reads_every_place_a_name_is() -> None:
    """names_in_use: inputs, outputs, value_info, initializers, sparse initializers, node inputs,
    outputs and names, and nested subgraphs at any depth ('' is no name)."""
    from deployopt.model import names_in_use

    inner = helper.make_graph(
        [helper.make_node("Identity", ["deep_in"], ["deep_out"], name="deep_node")], "i", [], []
    )
    mid = helper.make_graph(
        [helper.make_node("If", ["c"], ["mid_out"], name="mid_if", then_branch=inner, else_branch=inner)],
        "m",
        [],
        [],
    )
    nodes = [
        helper.make_node("Loop", ["", "cond_in"], ["loop_out"], name="loop", body=mid),
        helper.make_node("Relu", ["read_only"], ["relu_out"], name=""),
    ]
    graph = helper.make_graph(nodes, "g", [_vi("inp", [1])], [_vi("outp", [1])], [_w("init", 1)])
    graph.value_info.append(_vi("vi", [1]))
    sparse = helper.make_sparse_tensor(
        nh.from_array(np.ones(1, np.float32), "sp"), nh.from_array(np.zeros(1, np.int64), ""), [2]
    )
    graph.sparse_initializer.append(sparse)
    names = names_in_use(graph)
    for name in (
        "inp", "outp", "vi", "init", "sp", "cond_in", "loop_out", "loop", "read_only", "relu_out",
        "mid_out", "mid_if", "c", "deep_in", "deep_out", "deep_node",
    ):  # fmt: skip
        assert name in names, name
    assert "" not in names
