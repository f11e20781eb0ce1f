"""Which outputs top-1 scores (fidelity.Top1Choice), bug bash finding 01_top1_on_non_classifier_outputs.

The trim gate and `verify` took the argmax of every [N, K] output: a box [N, 4], an L2-normalised
embedding [N, 64], so a harmless trim was refused ("top-1 agreement 25.00% < 99.00% (output emb)")
and the report gave a top-1 figure to a model with no classifier. Now: --top1-outputs names the
class-score outputs (obeyed exactly); by default a single [N, K] output is scored as before, but
never an [N, 2..4] output beside others, one named box/emb/feat…, nor one whose rows are
L2-normalised; the report says which outputs top-1 was applied to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from deployopt import fidelity
from deployopt.errors import DataError
from deployopt.fidelity import CalibrationSet, ReferenceRun, Thresholds, compare_models, identical_report

TOP1_NOT_APPLIED = "top-1: not applied (no class-score output)"

ROWS, DIMS = 64, 16


def _rows() -> np.ndarray:
    """Rows whose first two values nearly tie (1.0 and 1.02): a 4 % change of the first one moves
    the argmax of every row, and a row's cosine and length hardly at all."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-0.5, 0.5, (ROWS, DIMS)).astype(np.float32)
    x[:, 0], x[:, 1] = 1.0, 1.02
    return x


def _calib() -> CalibrationSet:
    return CalibrationSet(samples=[{"x": _rows()}], source="test rows", random=False)


def _model(path: Path, outputs: dict[str, str], nudge: float = 1.0, unit: bool = True) -> Path:
    """x [64, 16] → outputs by kind: "logits" (x @ W, 10 classes, never changed), "emb" (x's 16
    values, L2-normalised where `unit`), "box" (x's first 4 values × 32), "one" (x @ W alone, the
    first value nudged: a classifier whose argmax moves). `nudge` scales x's first value in
    emb/box/one: the candidate's "harmless trim"."""
    rng = np.random.default_rng(1)
    scale = np.ones(DIMS, np.float32)
    scale[0] = nudge
    inits = [
        nh.from_array(rng.standard_normal((DIMS, 10)).astype(np.float32), "WL"),
        nh.from_array(scale, "S"),
        nh.from_array(np.float32(32.0).reshape(()), "K"),
        nh.from_array(np.array([0], np.int64), "s0"),
        nh.from_array(np.array([4], np.int64), "s4"),
        nh.from_array(np.array([1], np.int64), "ax1"),
    ]
    nodes = [h.make_node("Mul", ["x", "S"], ["xs"])]
    outs = []
    for name, kind in outputs.items():
        if kind == "logits":
            nodes.append(h.make_node("MatMul", ["x", "WL"], [name]))
            dims = 10
        elif kind == "emb":
            if unit:
                nodes.append(h.make_node("LpNormalization", ["xs"], [name], axis=1, p=2))
            else:
                nodes.append(h.make_node("Identity", ["xs"], [name]))
            dims = DIMS
        elif kind == "box":
            nodes.append(h.make_node("Slice", ["xs", "s0", "s4", "ax1"], [f"{name}_s"]))
            nodes.append(h.make_node("Mul", [f"{name}_s", "K"], [name]))
            dims = 4
        else:  # "one": the row itself, its argmax moved by the nudge (a classifier that changed)
            nodes.append(h.make_node("Identity", ["xs"], [name]))
            dims = DIMS
        outs.append(h.make_tensor_value_info(name, T.FLOAT, [ROWS, dims]))
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [ROWS, DIMS])], outs, inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _pair(tmp_path: Path, outputs: dict[str, str], unit: bool = True) -> tuple[Path, Path]:
    return (
        _model(tmp_path / "ref.onnx", outputs, unit=unit),
        _model(tmp_path / "cand.onnx", outputs, nudge=1.04, unit=unit),
    )


TRIM = Thresholds(min_cosine=0.99, min_top1=0.99)
DETECTOR = {"logits": "logits", "emb": "emb", "box": "box"}


def test_boxes_and_embeddings_beside_logits_get_no_top1(tmp_path: Path) -> None:
    """The finding: the embedding's and the box's argmax moved in every row, their cosine and
    length did not; the plan was refused on "top-1 agreement 0.00% < 99.00% (output emb)". Now
    only the logits are held to top-1, and the report says which and why the others were not."""
    ref, cand = _pair(tmp_path, DETECTOR)
    rep = compare_models(ref, cand, _calib(), min_cosine=0.99)
    assert rep.check(TRIM) == []
    assert rep.output_top1_agreement == [1.0, None, None]
    assert rep.top1_outputs() == ["logits"]
    data = rep.to_json(TRIM)
    assert data["top1_outputs"] == ["logits"] and data["top1_selection"] == "auto"
    per = {p["name"]: p for p in data["per_output"]}
    assert per["emb"]["top1_agreement"] is None and per["emb"]["top1_skipped"] == "its name says emb"
    assert (
        per["box"]["top1_agreement"] is None and "[N, 4] beside other outputs" in per["box"]["top1_skipped"]
    )
    assert per["logits"]["top1_skipped"] is None
    assert data["top1_note"] == (
        "top-1: applied to logits; left out: emb (its name says emb), "
        "box ([N, 4] beside other outputs: a box or coordinates)"
    )
    # cosine, scale and max-abs figures stay on every output
    assert all(p["cosine_min"] is not None and p["scale_change"] is not None for p in per.values())


def test_given_outputs_are_obeyed_exactly(tmp_path: Path) -> None:
    """--top1-outputs emb: the embedding is held to top-1 (and fails), the logits are not."""
    ref, cand = _pair(tmp_path, DETECTOR)
    rep = compare_models(ref, cand, _calib(), min_cosine=0.99, top1_outputs=["emb"])
    assert rep.output_top1_agreement == [None, 0.0, None]
    assert rep.check(TRIM) == ["top-1 agreement 0.00% < 99.00% (output emb)"]
    assert rep.top1_note() == "top-1: applied to emb (--top1-outputs)"
    none = compare_models(ref, cand, _calib(), min_cosine=0.99, top1_outputs=[])
    assert none.top1_agreement is None and none.output_top1_agreement == [None, None, None]
    assert none.top1_note() == f"{TOP1_NOT_APPLIED} (--top1-outputs none)"
    assert none.to_json(TRIM)["top1_selection"] == "given"


def test_given_names_the_model_lacks_or_that_are_no_class_scores_are_one_line_errors(tmp_path: Path) -> None:
    ref, cand = _pair(tmp_path, {"logits": "logits", "emb": "emb"})
    with pytest.raises(DataError) as exc:
        compare_models(ref, cand, _calib(), top1_outputs=["logits", "nope"])
    assert str(exc.value) == "--top1-outputs nope: no such output; the model's outputs are logits, emb"
    grid = _model(tmp_path / "grid.onnx", {"logits": "logits"})
    with pytest.raises(DataError, match=r"no such output; the model's outputs are logits$"):
        identical_report(ReferenceRun(grid), _calib(), top1_outputs=["emb"])
    assert fidelity.parse_top1_outputs(None) is None and fidelity.parse_top1_outputs("None") == []
    assert fidelity.parse_top1_outputs("a, b,a") == ["a", "b"]
    with pytest.raises(DataError, match="expected NAME"):
        fidelity.parse_top1_outputs("a,,b")


def test_a_given_output_that_is_not_n_by_classes_is_refused(tmp_path: Path) -> None:
    """top-1 is an argmax over a row of class scores: an output of another shape cannot be one."""
    path = tmp_path / "m.onnx"
    x = h.make_tensor_value_info("x", T.FLOAT, [ROWS, DIMS])
    graph = h.make_graph(
        [h.make_node("Unsqueeze", ["x", "ax"], ["grid"]), h.make_node("Identity", ["x"], ["logits"])],
        "g",
        [x],
        [
            h.make_tensor_value_info("grid", T.FLOAT, [ROWS, 1, DIMS]),
            h.make_tensor_value_info("logits", T.FLOAT, [ROWS, DIMS]),
        ],
        [nh.from_array(np.array([1], np.int64), "ax")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    with pytest.raises(DataError) as exc:
        compare_models(path, path, _calib(), top1_outputs=["grid"])
    assert str(exc.value).startswith("--top1-outputs grid: output grid is 64×1×16, not [N, classes] scores")


def test_a_single_logits_output_is_scored_as_before(tmp_path: Path) -> None:
    """The common classifier: one [N, K] output, even of 4 classes, keeps its top-1 (and fails it
    where the argmax moved)."""
    ref, cand = _pair(tmp_path, {"out": "one"})
    rep = compare_models(ref, cand, _calib(), min_cosine=0.99)
    assert rep.output_top1_agreement == [0.0] and rep.top1_outputs() == ["out"]
    assert rep.check(TRIM) == ["top-1 agreement 0.00% < 99.00%"]
    assert rep.top1_note() == "top-1: applied to out"
    boxy = _model(tmp_path / "b.onnx", {"out": "box"})
    boxy_cand = _model(tmp_path / "bc.onnx", {"out": "box"}, nudge=1.04)
    assert compare_models(boxy, boxy_cand, _calib()).output_top1_agreement == [0.0]  # 4 classes, alone


def test_an_l2_normalised_output_gets_no_top1_whatever_its_name(tmp_path: Path) -> None:
    """Rows of norm 1 in every sample are an embedding: not scored, alone or beside others, under
    any name; the same rows not normalised (a name that says nothing) are scored as logits."""
    ref, cand = _pair(tmp_path, {"out": "emb"})
    rep = compare_models(ref, cand, _calib(), min_cosine=0.99)
    assert rep.top1_agreement is None and rep.check(TRIM) == []
    assert rep.to_json(TRIM)["per_output"][0]["top1_skipped"].startswith("its rows are L2-normalised")
    assert rep.top1_note().startswith(f"{TOP1_NOT_APPLIED}; left out: out (its rows are L2-normalised")
    same = identical_report(ReferenceRun(ref), _calib())  # optimize's answer = its input: the same choice
    assert same.top1_agreement is None and same.top1_outputs() == []
    (tmp_path / "raw").mkdir()
    raw, raw_cand = _pair(tmp_path / "raw", {"out": "emb"}, unit=False)
    assert compare_models(raw, raw_cand, _calib()).output_top1_agreement == [0.0]


def test_a_confident_softmax_of_norm_one_keeps_its_top1(tmp_path: Path) -> None:
    """A softmax row near one-hot has norm ≈ 1 too: it is class scores, still top-1 scored."""
    path = tmp_path / "soft.onnx"
    graph = h.make_graph(
        [h.make_node("Mul", ["x", "K"], ["z"]), h.make_node("Softmax", ["z"], ["prob"], axis=1)],
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [ROWS, DIMS])],
        [h.make_tensor_value_info("prob", T.FLOAT, [ROWS, DIMS])],
        [nh.from_array(np.float32(1000.0).reshape(()), "K")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    rep = identical_report(ReferenceRun(path), _calib())
    assert rep.top1_outputs() == ["prob"] and rep.top1_agreement == 1.0


def test_names_that_say_box_or_embedding_get_no_top1_beside_other_outputs(tmp_path: Path) -> None:
    """Not normalised, [N, 16]: named `feat` (or `reid_emb`) beside logits it is no class score;
    a name with a class word (`cls_feat`) or a model of one output keeps top-1."""
    names = {"logits": "logits", "reid_emb": "emb", "feat": "emb", "cls_feat": "emb"}
    ref, cand = _pair(tmp_path, names, unit=False)
    rep = compare_models(ref, cand, _calib(), min_cosine=0.99)
    assert rep.top1_outputs() == ["logits", "cls_feat"]
    skipped = dict(zip(rep.output_names, rep.output_top1_skipped))
    assert skipped["reid_emb"] == "its name says emb" and skipped["feat"] == "its name says feat"


def test_old_journal_reports_name_the_outputs_their_top1_figures_are_of() -> None:
    """Guard: a report journaled before `top1_outputs` existed still reads (optimize compares a
    plan again only where this differs from what it would choose now)."""
    old = {
        "top1_agreement": 1.0,
        "per_output": [
            {"name": "heat", "top1_agreement": None},
            {"name": "emb", "top1_agreement": 1.0},
            {"name": "box", "top1_agreement": 1.0},
        ],
    }
    assert fidelity.journaled_top1_outputs(old) == ["emb", "box"]
    assert fidelity.journaled_top1_outputs({**old, "top1_outputs": []}) == []
    assert fidelity.journaled_top1_outputs({"per_output": [{"name": "logits", "top1_agreement": 0.5}]}) == [
        "logits"
    ]


def test_the_gate_phrase_says_which_outputs_top1_was_applied_to() -> None:
    from deployopt.report import describe_gate, gate_checks

    gate = {"min_cosine": 0.99, "min_top1": 0.99, "enforced": True}
    several = {
        "top1_agreement": 1.0,
        "top1_outputs": ["logits"],
        "per_output": [{"name": "logits", "top1_agreement": 1.0}, {"name": "box", "top1_agreement": None}],
    }
    assert describe_gate(gate, **gate_checks(several)) == (
        "min cosine ≥ 0.99, top-1 agreement ≥ 99% (output logits), enforced"
    )
    none = {"top1_agreement": None, "top1_outputs": [], "per_output": several["per_output"]}
    assert describe_gate(gate, **gate_checks(none)) == (
        "min cosine ≥ 0.99, top-1: not applied (no class-score output), enforced"
    )
    # an old journal's report of several outputs: the outputs with a figure
    old: dict[str, Any] = {
        "top1_agreement": 1.0,
        "per_output": [{"name": "a", "top1_agreement": 1.0}, {"name": "b", "top1_agreement": 1.0}],
    }
    assert describe_gate(gate, **gate_checks(old)).endswith("top-1 agreement ≥ 99% (outputs a, b), enforced")
    # one output: the classifier's phrase is as it was
    one = {
        "top1_agreement": 1.0,
        "top1_outputs": ["out"],
        "per_output": [{"name": "out", "top1_agreement": 1.0}],
    }
    assert describe_gate(gate, **gate_checks(one)) == "min cosine ≥ 0.99, top-1 agreement ≥ 99%, enforced"


def _binary(path: Path, nudge: float, extra: str) -> Path:
    """x [64, 16] → `logits` [64, 2] (x @ W, the first class's weights times `nudge`) and a
    second output: `probs` (its Softmax) or `label` (its ArgMax, int64)."""
    w = np.random.default_rng(3).standard_normal((DIMS, 2)).astype(np.float32)
    w[:, 0] *= nudge
    nodes = [h.make_node("MatMul", ["x", "W"], ["logits"])]
    if extra == "probs":
        nodes.append(h.make_node("Softmax", ["logits"], ["probs"], axis=1))
        second = h.make_tensor_value_info("probs", T.FLOAT, [ROWS, 2])
    else:
        nodes.append(h.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0))
        second = h.make_tensor_value_info("label", T.INT64, [ROWS])
    graph = h.make_graph(
        nodes,
        "binary",
        [h.make_tensor_value_info("x", T.FLOAT, [ROWS, DIMS])],
        [h.make_tensor_value_info("logits", T.FLOAT, [ROWS, 2]), second],
        [nh.from_array(w, "W")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("extra", ["probs", "label"])
def test_a_two_class_classifier_with_a_second_output_keeps_its_top1(tmp_path: Path, extra: str) -> None:
    """Review of 4bf06bf: the [N, 2..4] rule took a binary classifier's `logits` beside its `probs`
    (or its int64 `label`) for a box, and its top-1 gate was dropped without a word. A name that
    says class scores keeps an output scored, and only other float outputs count as "beside"."""
    ref = _binary(tmp_path / "ref.onnx", 1.0, extra)
    same = compare_models(ref, _binary(tmp_path / "same.onnx", 1.0, extra), _calib(), min_cosine=0.9)
    assert "logits" in same.top1_outputs()
    moved = compare_models(ref, _binary(tmp_path / "moved.onnx", -1.0, extra), _calib(), min_cosine=-1.0)
    assert moved.top1_outputs()[0] == "logits"  # `probs` too: its name says class scores
    agreement = moved.output_top1_agreement[0]
    assert agreement is not None and agreement < 0.99, agreement
    assert moved.to_json(TRIM)["per_output"][0]["top1_skipped"] is None
