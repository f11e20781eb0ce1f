"""ONNX node names that onnx2torch cannot use as submodule names as they are: a node named `half`,
`to`, `forward`, `training` (attributes of a torch.fx GraphModule) failed the torch backend's
conversion ("attribute 'half' already exists"), and one named as a graph input took that input's
place in later nodes (wrong outputs). Renamed on a copy for onnx2torch; profiles keep the file's
names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_backend_torch import CPU

from deployopt.backends import get_backend
from deployopt.backends.torch import TorchSession
from deployopt.backends.torch_worker import Worker

pytest.importorskip("onnx2torch")

#: node names that clash: GraphModule attributes, the graph input's name, a dotted one that does not
NAMES = ["half", "x", "to", "forward", "training", "type", "block.relu"]


def clashing_model() -> onnx.ModelProto:
    """x -> Conv 'half' -> Relu 'x' -> Add 'to' (+ x through Conv) -> Mul 'forward' -> Sigmoid
    'training' -> Conv 'type' -> Relu 'block.relu' -> y."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((3, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((4, 3, 1, 1)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.full((1, 3, 1, 1), 0.5, np.float32), "k"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="half", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"], name="x"),
        helper.make_node("Add", ["b", "x"], ["c"], name="to"),
        helper.make_node("Mul", ["c", "k"], ["d"], name="forward"),
        helper.make_node("Sigmoid", ["d"], ["e"], name="training"),
        helper.make_node("Conv", ["e", "w2"], ["f"], name="type"),
        helper.make_node("Relu", ["f"], ["y"], name="block.relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "clash",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def clash_path(tmp_path: Path) -> Path:
    path = tmp_path / "clash.onnx"
    onnx.save(clashing_model(), path)
    return path


@pytest.fixture(scope="module")
def session() -> Iterator[TorchSession]:
    s = get_backend("torch").open(CPU)
    assert isinstance(s, TorchSession)
    yield s
    s.close()


def test_a_node_named_half_converts_and_computes_as_onnxruntime(clash_path: Path) -> None:
    import onnxruntime as ort
    import torch

    worker = Worker({"device": "cpu", "runs": 2, "warmup": 1})
    module, inputs = worker.load({"path": str(clash_path)})[:2]
    with torch.no_grad():
        got = module(*inputs).numpy()
    sess = ort.InferenceSession(str(clash_path), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": inputs[0].numpy()})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_profile_names_the_files_nodes(session: TorchSession, clash_path: Path) -> None:
    assert session.measure(clash_path).runs == 3
    prof = session.profile(clash_path)
    assert [layer.name for layer in prof.layers] == NAMES
    assert [layer.extra["op"] for layer in prof.layers] == [n.op_type for n in clashing_model().graph.node]


def test_only_clashing_names_are_renamed() -> None:
    from deployopt.backends.onnx2torch_opset import torch_safe_node_names

    renamed, names = torch_safe_node_names(clashing_model())
    assert [n.name for n in renamed.graph.node] == [
        "half_1", "x_1", "to_1", "forward_1", "training_1", "type_1", "block.relu",
    ]  # fmt: skip
    assert names == {f"{n}_1": n for n in NAMES[:-1]}
    plain = helper.make_model(helper.make_graph([], "g", [], []))
    assert torch_safe_node_names(plain) == (plain, {})


def test_a_node_named_as_an_initializer_converts_and_computes_as_onnxruntime(tmp_path: Path) -> None:
    """Add 'r' reads initializer k, and Mul reads initializer r: onnx2torch took the node 'r' for
    the tensor's producer and failed ('onnx_initializer_1')."""
    import onnxruntime as ort
    import torch

    inits = [
        numpy_helper.from_array(np.full((1, 3, 1, 1), 2, np.float32), "k"),
        numpy_helper.from_array(np.full((1, 3, 1, 1), 5, np.float32), "r"),
    ]
    nodes = [
        helper.make_node("Add", ["x", "k"], ["a"], name="r"),
        helper.make_node("Mul", ["a", "r"], ["y"], name="m"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 2, 2])],
        inits,
    )
    path = tmp_path / "init_clash.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    module, inputs = Worker({"device": "cpu", "runs": 2, "warmup": 1}).load({"path": str(path)})[:2]
    with torch.no_grad():
        got = module(*inputs).numpy()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(got, sess.run(None, {"x": inputs[0].numpy()})[0])
