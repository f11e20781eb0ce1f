"""How many times `load_model` runs onnx's shape inference. The load-time type check
(`model_checks.check_model_data`) infers the model's weightless copy strictly; where load then
changes nothing its own inference reads (inputs, outputs, node order, value_info) and data
propagation has nothing to propagate, load takes that inference instead of running a second one
(a 9,000-node graph: 2 passes → 1). Where the graphs differ (a batch fixed to 1, shapes asked for,
a Shape op) both passes still run, and the result is the same either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import onnx.shape_inference
import pytest
from onnx import TensorProto, helper

from deployopt import model as model_mod
from deployopt import zoo
from deployopt.model import load_model
from deployopt.zoo import variants

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"


def _passes(
    monkeypatch: pytest.MonkeyPatch, path: Path, shapes: dict[str, list[int]] | None = None
) -> list[Any]:
    """The keyword arguments of each infer_shapes call one load makes."""
    real = onnx.shape_inference.infer_shapes
    calls: list[dict[str, Any]] = []

    def counting(*args: Any, **kwargs: Any) -> onnx.ModelProto:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counting)
    load_model(path, shapes)
    monkeypatch.undo()
    return calls


def _save(model: onnx.ModelProto, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def _loaded_without_reuse(monkeypatch: pytest.MonkeyPatch, path: Path, shapes: Any = None) -> bytes:
    monkeypatch.setattr(model_mod.InferenceReuse, "take", lambda self, model, data_prop: None)
    try:
        return load_model(path, shapes).model.SerializeToString(deterministic=True)
    finally:
        monkeypatch.undo()


def test_a_static_model_is_inferred_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled example at its own shapes: the type check's pass serves load's inference too."""
    calls = _passes(monkeypatch, EXAMPLE)
    assert calls == [{"check_type": True, "strict_mode": True}]


def test_a_deep_chain_is_inferred_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = _save(zoo.resnet_projection(stage_widths=(8, 8, 8, 8), blocks_per_stage=8), tmp_path, "deep")
    assert len(_passes(monkeypatch, path)) == 1


def test_an_output_without_a_shape_is_given_the_check_s(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An output with a type but no shape: `_give_outputs_shapes` reads the check's inference (the
    same graph), and load's strict inference then runs on the graph with that shape (3 passes → 2)."""
    model = zoo.resnet56_cifar()
    model.graph.output[0].type.tensor_type.ClearField("shape")
    path = _save(model, tmp_path, "no_output_shape")
    calls = _passes(monkeypatch, path)
    assert calls == [{"check_type": True, "strict_mode": True}, {"strict_mode": True, "data_prop": True}]
    loaded = load_model(path).model
    assert [d.dim_value for d in loaded.graph.output[0].type.tensor_type.shape.dim] == [1, 10]
    assert loaded.SerializeToString(deterministic=True) == _loaded_without_reuse(monkeypatch, path)


@pytest.mark.parametrize(
    "build, shapes, why",
    [
        (
            lambda: variants.with_dynamic_batch(zoo.resnet56_cifar()),
            None,
            "the batch is fixed to 1 after the check",
        ),
        (zoo.resnet56_cifar, {"input": [1, 3, 32, 32]}, "asked shapes clear the outputs' dims"),
        (zoo.resnet56_cifar, {"input": [4, 3, 32, 32]}, "another batch"),
        (
            lambda: variants.bias_from_constantofshape(zoo.resnet56_cifar()),
            None,
            "data propagation reads a Shape",
        ),
    ],
)
def test_where_the_graph_changes_load_infers_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, build: Any, shapes: Any, why: str
) -> None:
    """The check's pass, then load's own (and folding's, after a Shape)."""
    path = _save(build(), tmp_path, "m")
    calls = _passes(monkeypatch, path, shapes)
    assert calls[:2] == [
        {"check_type": True, "strict_mode": True},
        {"strict_mode": True, "data_prop": True},
    ], why


def test_value_info_in_the_file_is_not_reused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The check reads the file's value_info; load clears it before inferring: not the same graph."""
    model = onnx.shape_inference.infer_shapes(zoo.resnet56_cifar())
    assert len(model.graph.value_info)
    path = _save(model, tmp_path, "with_value_info")
    assert len(_passes(monkeypatch, path)) == 2


def test_unsorted_nodes_are_inferred_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The check infers the nodes in the file's order (and fails, so types them no further); load
    sorts them first."""
    model = zoo.resnet56_cifar()
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend([nodes[-1], *nodes[:-1]])
    path = _save(model, tmp_path, "unsorted")
    assert _passes(monkeypatch, path)[-1] == {"strict_mode": True, "data_prop": True}
    assert load_model(path).model.SerializeToString(deterministic=True) == _loaded_without_reuse(
        monkeypatch, path
    )


@pytest.mark.parametrize(
    "build",
    [
        zoo.resnet56_cifar,
        zoo.densenet_like,
        zoo.se_net,
        zoo.inception_like,
        zoo.mobilenet_like,
        zoo.vgg16_cifar,
    ],
)
def test_the_reused_inference_loads_the_same_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, build: Any
) -> None:
    path = _save(build(), tmp_path, "m")
    loaded = load_model(path)
    assert loaded.model.SerializeToString(deterministic=True) == _loaded_without_reuse(monkeypatch, path)


def _group_norm_21() -> onnx.ModelProto:
    """Conv → GroupNormalization-21 → Conv: onnx infers GroupNormalization-21 through its function
    body, and data propagation changes what that gives (the strict check passes, load's first
    data_prop pass fails until `type_uninferred_outputs` types its output)."""
    import numpy as np
    from onnx import numpy_helper

    def arr(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(np.ones(shape, np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["t"], name="a", pads=[1, 1, 1, 1]),
        helper.make_node("GroupNormalization", ["t", "s", "b"], ["m"], name="gn", num_groups=2),
        helper.make_node("Conv", ["m", "w2"], ["y"], name="c", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [arr("w1", 8, 3, 3, 3), arr("s", 2), arr("b", 2), arr("w2", 4, 8, 3, 3)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def test_an_op_inferred_through_its_function_body_is_inferred_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = _save(_group_norm_21(), tmp_path, "gn21")
    calls = _passes(monkeypatch, path)
    assert calls[0] == {"check_type": True, "strict_mode": True}
    assert {"strict_mode": True, "data_prop": True} in calls[1:]
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in load_model(path).model.graph.value_info
    }
    assert shapes["m"] == [1, 8, 8, 8]


def _matmul_then(
    nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], out_shape: Any
) -> onnx.ModelProto:
    import numpy as np
    from onnx import numpy_helper

    w = numpy_helper.from_array(np.ones((16, 8), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), *nodes],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [w, *inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_float_bias_add_propagates_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Add has a data propagation function, but a float weight's values are no dims: inferred once."""
    import numpy as np
    from onnx import numpy_helper

    bias = numpy_helper.from_array(np.ones(8, np.float32), "b")
    path = _save(_matmul_then([helper.make_node("Add", ["m", "b"], ["y"])], [bias], [1, 8]), tmp_path, "bias")
    assert len(_passes(monkeypatch, path)) == 1


def test_an_integer_add_feeding_a_reshape_is_inferred_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Add of two int64 constants into a Reshape's shape, the output without a shape: without data
    propagation the check infers it 3-D of unknown dims (what `_give_outputs_shapes` gives it, as a
    lenient pass of its own did), with it load's pass infers 1×2×4, so load infers again."""
    import numpy as np
    from onnx import numpy_helper

    consts = [
        numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("s", [1, 2, 4]), ("z", [0, 0, 0]))
    ]
    nodes = [helper.make_node("Add", ["s", "z"], ["t"]), helper.make_node("Reshape", ["m", "t"], ["y"])]
    path = _save(_matmul_then(nodes, consts, None), tmp_path, "reshape")
    calls = _passes(monkeypatch, path)
    assert calls[:2] == [{"check_type": True, "strict_mode": True}, {"strict_mode": True, "data_prop": True}]
    loaded = load_model(path).model
    assert [d.dim_value for d in loaded.graph.output[0].type.tensor_type.shape.dim] == [1, 2, 4]
