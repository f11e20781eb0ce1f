"""Opset-21 GroupNormalization, which onnx's shape inference leaves untyped (a function op).

Loading types its output as its input's; two in a chain failed to load (one lenient pass typed the
first only, and the error named the op after it), and `apply`'s own strict check on the edited
skeleton ran without that typing, so everything after one was shapeless and a broken edit was
written (onnxruntime refused it; `apply` exited 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as h

from deployopt import model as model_mod
from deployopt import surgery
from deployopt.coupling import analyze
from deployopt.errors import ModelError
from deployopt.model import load_model
from deployopt.surgery import apply_plan

#: what onnxruntime here loads (helper.make_model's default IR can be newer)
IR = 10


def _init(name: str, arr: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def _gn(src: str, dst: str, name: str) -> list[onnx.NodeProto]:
    ins = [src, f"{name}_s", f"{name}_b"]
    return [h.make_node("GroupNormalization", ins, [dst], name=name, num_groups=2)]


def _save(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], tmp_path: Path, name: str) -> Path:
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 21)])
    model.ir_version = IR
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path


def _affine(*names: str) -> list[onnx.TensorProto]:
    return [_init(f"{n}_{k}", np.full(4, v)) for n in names for k, v in (("s", 1.5), ("b", 0.25))]


def _run(model: onnx.ModelProto | str, x: np.ndarray) -> np.ndarray:
    src = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _two_gn_chain(tmp_path: Path) -> Path:
    """Conv → GN → Relu → GN → Relu → Conv a (4→8) → Relu → Conv b (8→4): a is free."""
    rng = np.random.default_rng(0)
    nodes = [
        h.make_node("Conv", ["x", "w0"], ["c0"], name="c0", kernel_shape=[1, 1]),
        *_gn("c0", "g1", "gn1"),
        h.make_node("Relu", ["g1"], ["r1"], name="relu1"),
        *_gn("r1", "g2", "gn2"),
        h.make_node("Relu", ["g2"], ["r2"], name="relu2"),
        h.make_node("Conv", ["r2", "aw"], ["t"], name="a", pads=[1] * 4),
        h.make_node("Relu", ["t"], ["u"], name="relu3"),
        h.make_node("Conv", ["u", "bw"], ["y"], name="b"),
    ]
    inits = [
        _init("w0", rng.standard_normal([4, 3, 1, 1])),
        *_affine("gn1", "gn2"),
        _init("aw", rng.standard_normal([8, 4, 3, 3])),
        _init("bw", rng.standard_normal([4, 8, 1, 1])),
    ]
    return _save(nodes, inits, tmp_path, "gn21_twice")


def test_two_group_norm_21_in_a_chain_load_and_pad_exactly(tmp_path: Path) -> None:
    """Was: ModelError "... (op_type:Relu, node name: relu1) ... expected to have type but instead
    is null" for a model the checker and onnxruntime accept."""
    path = _two_gn_chain(tmp_path)
    loaded = load_model(path).model
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in loaded.graph.value_info}
    assert shapes["g1"] == shapes["g2"] == shapes["r2"] == [1, 4, 8, 8]
    analysis = analyze(loaded)
    assert not analysis.group("a").frozen
    padded = apply_plan(loaded, {"a": 10}, analysis)
    onnx.checker.check_model(padded, full_check=True)
    x = np.random.default_rng(1).standard_normal([1, 3, 8, 8]).astype(np.float32)
    np.testing.assert_array_equal(_run(padded, x), _run(str(path), x))


def _gn_then_add(tmp_path: Path, gn: bool) -> Path:
    """Conv → (GN-21 or Relu) → Conv a (4→8) → Add k ([1, 8, 1, 1]) → Conv b (8→4)."""
    rng = np.random.default_rng(0)
    middle = _gn("c0", "g", "gn") if gn else [h.make_node("Relu", ["c0"], ["g"], name="gn")]
    nodes = [
        h.make_node("Conv", ["x", "w0"], ["c0"], name="c0", kernel_shape=[1, 1]),
        *middle,
        h.make_node("Conv", ["g", "aw"], ["t"], name="a", pads=[1] * 4),
        h.make_node("Add", ["t", "k"], ["u"], name="add"),
        h.make_node("Conv", ["u", "bw"], ["y"], name="b"),
    ]
    inits = [
        _init("w0", rng.standard_normal([4, 3, 1, 1])),
        *(_affine("gn") if gn else []),
        _init("aw", rng.standard_normal([8, 4, 3, 3])),
        _init("k", rng.standard_normal([1, 8, 1, 1])),
        _init("bw", rng.standard_normal([4, 8, 1, 1])),
    ]
    return _save(nodes, inits, tmp_path, f"gn{int(gn)}_add")


def test_apply_refuses_a_broken_edit_after_a_group_norm_21(tmp_path: Path, monkeypatch) -> None:
    """A rule that forgot a constant (here: the Add's, left 8 wide after a is trimmed to 6) is a
    broken shape the strict check catches; after a GroupNormalization-21 it saw nothing, and the
    model was written. Both are now one-line ModelErrors."""
    copy = surgery._copy_rewriting

    def forgetting_k(m: onnx.ModelProto, new_value: Any, edited: Any, shapes: Any) -> onnx.ModelProto:
        assert "k" in edited
        return copy(m, new_value, set(edited) - {"k"}, shapes)

    monkeypatch.setattr(surgery, "_copy_rewriting", forgetting_k)
    for gn in (False, True):  # without it (as before), then with it
        loaded = load_model(_gn_then_add(tmp_path, gn)).model
        analysis = analyze(loaded)
        assert analysis.group("c0").frozen == gn and not analysis.group("a").frozen
        with pytest.raises(ModelError, match="does not validate") as err:
            apply_plan(loaded, {"a": 6}, analysis)
        assert "\n" not in str(err.value), (gn, str(err.value))


def test_apply_refuses_an_edit_whose_output_loses_its_shape(tmp_path: Path, monkeypatch) -> None:
    """The second net: an op the check cannot type (here: the GroupNormalization typing turned off
    after loading) leaves what follows shapeless, the graph output keeps its declared shape, and
    nothing was seen. A value that had a shape and has none now is refused, even for a valid plan."""
    from deployopt import surgery

    loaded = load_model(_gn_then_add(tmp_path, gn=True)).model
    analysis = analyze(loaded)
    assert "g" in surgery._shaped_before(loaded, analysis)  # the input's inference, kept on the analysis
    monkeypatch.setattr(model_mod, "_SAME_SHAPE_UNINFERRED", ())
    with pytest.raises(ModelError, match=r"does not validate.*no longer gives 'g' a shape") as err:
        apply_plan(loaded, {"a": 10}, analysis)
    assert "\n" not in str(err.value)


def test_a_raw_model_whose_value_info_lists_its_outputs_is_not_refused() -> None:
    """onnxruntime's symbolic shape inference (quant_pre_process) lists graph outputs in value_info:
    compared with that, every plan of such a model handed to apply_plan unloaded 'lost' the output's
    shape, which onnx's inference keeps in graph.output (review)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 6, 1, 1)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    graph = helper.make_graph(nodes, "raw", [x], [y], [w1, w2])
    graph.value_info.extend([helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    out = apply_plan(model, {"conv1": 8})
    feed = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
           for m in (model, out)]  # fmt: skip
    np.testing.assert_allclose(run[1], run[0], rtol=1e-5, atol=1e-6)
