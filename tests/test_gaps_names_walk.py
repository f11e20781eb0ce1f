"""Loading walks the final graph's names once (`names_in_use`: 25-60 ms for a 3000-conv chain) for
the rewrites that name new tensors (equal Splits' sizes, shared constants' copies), each adding
the names it gives; it walked the whole graph once per rewrite. A name given between them (a node
named by `_name_nodes`) is still avoided."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deployopt.model
from deployopt.model import load_model, names_in_use


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many nodes each names_in_use call walked (its top graph's), one entry a call."""
    calls: list[int] = []

    def spy(graph: onnx.GraphProto) -> set[str]:
        calls.append(len(graph.node))
        return names_in_use(graph)

    monkeypatch.setattr(deployopt.model, "names_in_use", spy)
    return calls


def _model(tmp_path: Path) -> Path:
    """x → Split(num_outputs=2) → two Muls by one shared constant `w`, a third by it too, whose
    nodes are named `w_` twice (the repeat renamed `w__2`, the name the constant's second copy
    would take), and an unnamed Add."""
    out = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, num_outputs=2),
        helper.make_node("Mul", ["a", "w"], ["a2"], name="w_"),
        helper.make_node("Mul", ["b", "w"], ["b2"], name="w_"),
        helper.make_node("Mul", ["a2", "w"], ["a3"], name="m3"),
        helper.make_node("Add", ["a3", "b2"], ["y"]),
    ]
    w = numpy_helper.from_array(np.full((1, 4, 1, 1), 2.0, np.float32), "w")
    graph = helper.make_graph(
        nodes,
        "g",
        [out("x", TensorProto.FLOAT, [1, 8, 4, 4])],
        [out("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [w],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_a_load_walks_the_names_once(tmp_path: Path, walks: list[int]) -> None:
    loaded = load_model(_model(tmp_path))
    assert len(walks) == 1, walks
    assert any("gave an equal Split its sizes" in n for n in loaded.notices), loaded.notices
    assert any("readers of shared constants" in n for n in loaded.notices), loaded.notices


def test_names_given_between_the_rewrites_are_still_avoided(tmp_path: Path) -> None:
    """The second `w_` node becomes `w__2`; the shared constant's copies then skip that name, and
    every name the loaded graph holds is one thing's."""
    graph = load_model(_model(tmp_path)).model.graph
    assert [n.name for n in graph.node if n.op_type == "Mul"][:2] == ["w_", "w__2"]
    copies = sorted(t.name for t in graph.initializer if t.name.startswith("w_"))
    assert copies == ["w__1", "w__3"], copies
    node_names = [n.name for n in graph.node]
    tensors = [t.name for t in graph.initializer] + [o for n in graph.node for o in n.output]
    assert len(set(node_names)) == len(node_names) and not set(node_names) & set(tensors)
