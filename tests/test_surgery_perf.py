"""Applying a plan and loading a model hand onnx's checker and shape inference no weights.

Each serialized the whole model: a 335 MB model cost ~1.5 s and a copy of itself per plan optimize
built, and loading one peaked at ~5× its size. Behaviour, not time: what those calls are given, and
that what they give back (errors included) is as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from deployopt import model as model_mod
from deployopt import surgery
from deployopt.coupling import analyze
from deployopt.errors import ModelError, PlanError
from deployopt.model import load_model
from deployopt.surgery import apply_plan, apply_plan_report

ZOO = [
    "resnet56_cifar",
    "mobilenet_like",
    "densenet_like",
    "se_net",
    "inception_like",
    "resnet_projection_constantofshape",
    "mobilenet_like_opset9",
]


def _first_trim(analysis) -> dict[str, int]:
    g = next(g for g in analysis.free_groups() if g.width > 2)
    return {g.id: g.width - 1}


def test_apply_checks_a_model_without_its_weights(zoo_model_path: Callable[[str], Path], monkeypatch) -> None:
    model = load_model(zoo_model_path("resnet56_cifar")).model
    analysis = analyze(model)
    given: list[int] = []
    check = onnx.checker.check_model

    def recording(m: onnx.ModelProto, *a: object, **k: object) -> None:
        given.append(m.ByteSize())
        check(m, *a, **k)

    monkeypatch.setattr(onnx.checker, "check_model", recording)
    out = apply_plan(model, _first_trim(analysis), analysis)
    assert len(given) == 1 and given[0] < out.ByteSize() // 10


def test_the_check_still_refuses_a_broken_weight(monkeypatch) -> None:
    """A weight whose data is shorter than its shape is still the checker's error (an unused one:
    the analysis reads every weight it binds)."""
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    w2 = numpy_helper.from_array(np.ones((4, 4, 3, 3), np.float32), "w2")
    w3 = numpy_helper.from_array(np.ones((8, 4, 3, 3), np.float32), "w3")
    bad = numpy_helper.from_array(np.ones((8, 4, 3, 3), np.float32), "bad")
    bad.raw_data = bad.raw_data[:-4]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a", "w2"], ["b"], name="c2", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["b", "w3"], ["y"], name="c3", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", 1, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", 1, [1, 8, 8, 8])],
        [w, w2, w3, bad],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    analysis = analyze(onnx.shape_inference.infer_shapes(model))
    with pytest.raises(ModelError, match="raw_data size"):
        apply_plan(model, {"c1": 3}, analysis)
    skel = surgery._check_skeleton(model)
    assert [list(t.dims) for t in skel.graph.initializer] == [[0], [0], [0], [8, 4, 3, 3]]


def test_the_input_models_size_is_counted_once_per_analysis(
    zoo_model_path: Callable[[str], Path], monkeypatch
) -> None:
    model = load_model(zoo_model_path("resnet56_cifar")).model
    analysis = analyze(model)
    plan = _first_trim(analysis)
    apply_plan_report(model, plan, analysis)
    assert getattr(analysis.state, "_model_bytes", None) == model.ByteSize()
    # the kept count is what the limit is held to: one byte less refuses the plan
    monkeypatch.setattr(analysis.state, "_model_bytes", surgery.PROTOBUF_LIMIT)
    with pytest.raises(PlanError, match="2 GiB"):
        apply_plan(model, {g: analysis.group(g).width + 1 for g in plan}, analysis)


@pytest.mark.parametrize("name", ZOO)
def test_shapes_infer_as_from_the_whole_model(
    zoo_model_path: Callable[[str], Path], monkeypatch, name: str
) -> None:
    infer = onnx.shape_inference.infer_shapes
    given: list[tuple[int, int]] = []

    def recording(m: onnx.ModelProto, *a: object, **k: object) -> onnx.ModelProto:
        weights = sum(len(t.raw_data) for t in m.graph.initializer)
        given.append((weights, m.ByteSize()))
        return infer(m, *a, **k)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", recording)
    loaded = load_model(zoo_model_path(name)).model
    monkeypatch.undo()
    assert given and all(w < 64 * 8 * 100 for w, _ in given)  # small and integer tensors only
    # what inference of the whole model gives, value_info and all
    whole = onnx.ModelProto()
    whole.CopyFrom(loaded)
    del whole.graph.value_info[:]
    whole = infer(whole, strict_mode=True, data_prop=True)
    assert whole.SerializeToString() == loaded.SerializeToString()


def test_a_shape_inference_failure_reads_as_before(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((7, 9, 9), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="c")],
        "g",
        [helper.make_tensor_value_info("x", 1, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", 1, None)],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    skel = model_mod.weightless(model)
    assert list(skel.graph.initializer[0].dims) == [7, 9, 9] and not skel.graph.initializer[0].raw_data
    with pytest.raises(ModelError, match="shape inference failed") as got:
        model_mod._infer(model, tmp_path / "m.onnx")
    with pytest.raises(Exception) as whole:
        onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    assert str(got.value).endswith(str(whole.value).splitlines()[0])
