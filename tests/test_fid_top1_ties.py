"""Top-1 agreement where a row's maximum is tied: an argmax of tied values is the first of them,
which rounding picks, so a sigmoid head saturating at exactly 1.0 "disagreed" on rows the models
rank alike. Until the fix, a candidate 3e-7 off the reference (max abs error 1.1e-5, cosine
0.9999999999) read top-1 98.44 % and `deployopt verify` FAILED, exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from typer.testing import CliRunner

from deployopt.cli.main import app
from deployopt.fidelity import CalibrationSet, Thresholds, compare_models, verify_models

try:  # click before 8.2 mixes stderr into stdout unless told not to
    runner = CliRunner(mix_stderr=False)
except TypeError:
    runner = CliRunner()


def _sigmoid_head(w: np.ndarray) -> onnx.ModelProto:
    """x [4, 3, 4, 4] → Flatten → MatMul W [48, 10] → Sigmoid: logits of tens saturate at 1.0."""
    nodes = [
        h.make_node("Flatten", ["x"], ["f"]),
        h.make_node("MatMul", ["f", "W"], ["z"]),
        h.make_node("Sigmoid", ["z"], ["probs"]),
    ]
    g = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [4, 3, 4, 4])],
        [h.make_tensor_value_info("probs", T.FLOAT, [4, 10])],
        [nh.from_array(w, "W")],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _passthrough(
    offset: np.ndarray | None = None, low: int | None = None, out_type: int = T.FLOAT, classes: int = 10
) -> onnx.ModelProto:
    """y = x (+ offset) over x [N, classes], the values the calibration arrays give: each row's
    top classes set by hand. `low`: computed through a Cast to fp16/bf16 and back (a model holding
    fp16, as `deployopt fp16`'s does with fp32 I/O); `out_type`: the output's type."""
    nodes, inits, cur = [], [], "x"
    if low is not None:
        nodes += [
            h.make_node("Cast", [cur], ["lo"], to=low),
            h.make_node("Cast", ["lo"], ["back"], to=T.FLOAT),
        ]
        cur = "back"
    if offset is not None:
        inits.append(nh.from_array(offset.astype(np.float32), "d"))
        nodes.append(h.make_node("Add", [cur, "d"], ["sum"]))
        cur = "sum"
    if out_type != T.FLOAT:
        nodes.append(h.make_node("Cast", [cur], ["y"], to=out_type))
    else:
        nodes.append(h.make_node("Identity", [cur], ["y"]))
    g = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", classes])],
        [h.make_tensor_value_info("y", out_type, ["N", classes])],
        inits,
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _rows(*rows: list[float]) -> CalibrationSet:
    x = np.zeros((len(rows), 10), np.float32)
    for i, r in enumerate(rows):
        x[i, : len(r)] = r
    return CalibrationSet(samples=[{"x": x}], source="hand-made rows", random=False)


def test_saturated_sigmoid_rows_agree_and_verify_passes(tmp_path: Path) -> None:
    """The bug bash's repro: weights × (1 + 3e-7). Every row whose argmax moved is a row of tied
    1.0s; top-1 is 100 %, those rows are counted as tied, and verify exits 0 with a note."""
    rng = np.random.default_rng(0)
    w = (rng.normal(size=(48, 10)) * 20).astype(np.float32)
    ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    onnx.save(_sigmoid_head(w), str(ref))
    onnx.save(_sigmoid_head((w * np.float32(1 + 3e-7)).astype(np.float32)), str(cand))
    result = runner.invoke(app, ["verify", str(ref), str(cand), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["top1_agreement"] == 1.0 and report["failures"] == []
    (probs,) = report["per_output"]
    assert probs["top1_tied_rows"] >= 1  # the rows plain argmax equality counted as disagreeing
    table = runner.invoke(app, ["verify", str(ref), str(cand)])
    assert table.exit_code == 0 and "PASSED" in table.stdout
    assert f"top-1: {probs['top1_tied_rows']} row(s) whose argmaxes differ count as agreeing" in table.stdout


def test_tied_maxima_agree_but_a_real_flip_does_not() -> None:
    """Rows with an exact tie and a one-ulp one agree whichever of the tied classes either argmax
    takes; a clear winner swapped, and a 1e-5 gap (well past 4 fp32 epsilons), disagree."""
    calib = _rows(
        [1.0, 1.0, 0.5],  # exact tie: the candidate's -6e-8 on class 0 moves its argmax to class 1
        [0.5, 1.0, np.nextafter(np.float32(1.0), np.float32(0.0))],  # a one-ulp tie of classes 1, 2
        [3.0, 2.0, 1.0],  # a clear winner: class 0
        [2.0, 2.00002, 1.0],  # 1e-5 apart: not a tie
    )
    offset = np.zeros(10, np.float32)
    offset[0] = -6e-8
    offset[2] = 2e-7  # row 1: class 2 at 1.0000001, one ulp above class 1's 1.0
    report = compare_models(_passthrough(), _passthrough(offset), calib)
    assert report.top1_agreement == 1.0 and report.output_top1_tied == [2]
    swap = np.zeros(10, np.float32)
    swap[1] = 1.5  # row 2: class 1 (3.5) beats class 0 (3.0); row 3: class 1 wins as it did
    report = compare_models(_passthrough(), _passthrough(swap), calib)
    # row 0: class 1 at 2.5 wins clearly in the candidate (by 60 %): the reference's tie of 1.0s
    # includes it, but the candidate does not rank them alike, so a disagreement
    assert report.top1_agreement == pytest.approx(2 / 4) and report.output_top1_tied == [0]
    close = np.zeros(10, np.float32)
    close[0] = 3e-5  # row 3: class 0 (2.00003) now beats class 1 (2.00002): 5e-6 relative, no tie
    report = compare_models(_passthrough(), _passthrough(close), calib)
    assert report.top1_agreement == pytest.approx(3 / 4) and report.output_top1_tied == [0]
    assert report.check(Thresholds()) == ["top-1 agreement 75.00% < 99.00%"]


def test_fp16_models_and_outputs_tie_at_fp16_steps() -> None:
    """A model holding fp16 rounds its logits to fp16's steps (2^-11 just below 1.0): classes one
    such step apart are tied there, and a flip between them is no disagreement; in fp32 models
    the same 4.9e-4 gap is a real one. A gap of 1 % is a disagreement in fp16 too."""
    below = float(np.float16(1.0) - np.float16(2**-11))  # fp16's value just below 1.0
    calib = _rows([1.0, below, 0.2], [0.99, 1.0, 0.2])
    swap = np.zeros(10, np.float32)
    swap[1] = 3 * 2**-11  # row 0: class 1 now at 1 + 2^-10, one fp16 step above class 0's 1.0
    fp32 = compare_models(_passthrough(), _passthrough(swap), calib)
    assert fp32.top1_agreement == pytest.approx(0.5)  # row 0 flipped, fp32 sees a real gap
    for kind in (T.FLOAT16, T.BFLOAT16):
        low = compare_models(_passthrough(low=kind), _passthrough(swap, low=kind), calib)
        assert low.top1_agreement == 1.0 and low.output_top1_tied == [1], kind
    # verify's way: the types of the models it has read, the reference fp32, the candidate fp16
    mixed = verify_models(_passthrough(), _passthrough(swap, low=T.FLOAT16), calib)
    assert mixed.top1_agreement == 1.0 and mixed.output_top1_tied == [1]
    out16 = compare_models(_passthrough(out_type=T.FLOAT16), _passthrough(swap, out_type=T.FLOAT16), calib)
    assert out16.top1_agreement == 1.0 and out16.output_top1_tied == [1]
    big = np.zeros(10, np.float32)
    big[0] = 0.02  # row 1: class 0 at 1.01 beats class 1 at 1.0 by 1 %: past 4 fp16 epsilons
    low = compare_models(_passthrough(low=T.FLOAT16), _passthrough(big, low=T.FLOAT16), calib)
    assert low.top1_agreement == pytest.approx(0.5) and low.output_top1_tied == [0]


def test_a_nonfinite_candidate_row_ties_nothing() -> None:
    """inf − inf is NaN and inf ≤ inf holds: a tie judged at an infinite row's scale agreed."""
    calib = _rows([1.0, 1.0, 0.5], [2.0, 1.0, 0.5])
    offset = np.zeros(10, np.float32)
    offset[2] = np.inf
    report = compare_models(_passthrough(), _passthrough(offset), calib)
    assert report.top1_agreement == 0.0 and report.output_top1_tied == [0]


def test_a_tie_broken_decisively_by_the_other_model_disagrees() -> None:
    """The review's repro: the reference's classes 0 and 1 at 12.0 and 11.96 are within 4 fp16
    epsilons of 12; an fp16 candidate lifting class 1 by 3.0 makes it the clear winner (14.96 to
    12.0) in every row of 1000 classes (cosine 0.9995, row scale +0.45 %: both pass). The tie
    alone counted each row as agreeing: top-1 100 %, verify passed, where the same candidate in
    fp32 read 0 % and failed."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 1000)) * 3).astype(np.float32)
    x[:, 0], x[:, 1] = 12.0, 11.96
    calib = CalibrationSet(samples=[{"x": x}], source="hand-made rows", random=False)
    lift = np.zeros(1000, np.float32)
    lift[1] = 3.0
    for low in (T.FLOAT16, None):
        ref, cand = _passthrough(classes=1000), _passthrough(lift, low=low, classes=1000)
        report = verify_models(ref, cand, calib)
        assert report.top1_agreement == 0.0 and report.output_top1_tied == [0], low
        assert report.check(Thresholds()) == ["top-1 agreement 0.00% < 99.00%"], low


def test_the_other_models_gap_and_the_tie_at_the_pairs_scale() -> None:
    """Where one model ties two classes, the other may rank them apart by 4.47 % of their value
    (the default --min-cosine's relative error): a tie of 1.0s the candidate breaks by 1e-5 (a
    saturated sigmoid) or 3 % agrees, by 6 % it does not. The tie is judged at the two classes'
    own scale: a -60 logit in the row made fp16's window 0.23, so 12.0 and 11.8 "tied"."""
    calib = _rows([1.0, 1.0, 0.5], [1.0, 1.0, 0.5], [1.0, 1.0, 0.5])
    for drop, agrees in ((1e-5, True), (0.03, True), (0.06, False)):
        offset = np.zeros(10, np.float32)
        offset[0] = -drop  # the candidate's class 1 (1.0) now leads class 0 (1 - drop)
        report = compare_models(_passthrough(), _passthrough(offset), calib)
        assert report.top1_agreement == (1.0 if agrees else 0.0), drop
        assert report.output_top1_tied == [3 if agrees else 0], drop
    tail = [12.0, 11.8, 0.5, 0.0, 0.0, -60.0]
    calib = _rows(tail, tail)
    lift = np.zeros(10, np.float32)
    lift[1] = 0.3  # class 1 at 12.1 leads 12.0 by 0.8 %: close, but the reference's 0.2 is no tie
    for low in (T.FLOAT16, None):
        report = compare_models(_passthrough(low=low), _passthrough(lift, low=low), calib)
        assert report.top1_agreement == 0.0 and report.output_top1_tied == [0], low
