"""Fidelity rules that `verify` and the trim gate rely on, each pinned where a mutation run found
it unguarded.

Why: RELATIVE_FLOOR at 0 (a score near zero held to its own tiny magnitude) turned a 0.20 %
relative error into 20 % and `verify` FAILED a candidate that is exact enough; a cosine check that
let NaN through (`cos < min` instead of `not cos >= min`) dropped the "min cosine similarity nan"
failure line; a zero candidate row scored cosine 1.0 (not 0.0) passed the cosine check. Every
other check still failed those candidates, so no test saw the difference. Single-output models and
unit-level functions only, so the choice of which outputs get top-1 does not enter.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt.fidelity import (
    FidelityReport,
    _cosine_and_ratio,
    _relative_error,
    _top1_agreeing,
)

F32_EPS = float(np.finfo(np.float32).eps)


def _save(
    path: Path, nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], x: list[int], y: list[int]
) -> str:
    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return str(path)


def _report(cosine_min: float) -> FidelityReport:
    return FidelityReport(
        max_abs_error=0.0,
        mean_abs_error=0.0,
        cosine_min=cosine_min,
        cosine_mean=cosine_min,
        top1_agreement=None,
        n_samples=1,
        n_rows=1,
        output_names=["y"],
        candidate_output_names=["y"],
        output_cosine_min=[cosine_min],
    )


# ---------------------------------------------------------------------------- RELATIVE_FLOOR


def test_a_row_near_zero_is_measured_against_1_percent_of_the_largest_reference() -> None:
    """Rows 10 … 0.001, each off by 2e-4: the 0.001 row is held to 0.1 (1 % of 10), not to 0.001."""
    ref = np.array([10.0, 1.0, 0.5, 0.2, 0.001])
    rel, worst = _relative_error(ref, ref + 2e-4)
    assert rel == pytest.approx(2e-4 / 0.1, rel=1e-6)
    assert worst == pytest.approx((0.001, 0.0012), rel=1e-9)


def test_the_floor_does_not_loosen_rows_above_it() -> None:
    """Every |reference| above 1 % of the largest: each row by its own magnitude (0.5 off 2.0 is 25 %)."""
    ref = np.array([-10.0, 4.0, 2.0])
    rel, worst = _relative_error(ref, ref + np.array([0.1, 0.1, 0.5]))
    assert rel == pytest.approx(0.25, rel=1e-12)
    assert worst == (2.0, 2.5)


def test_top1_counts_a_near_zero_tie_the_other_model_ranks_within_the_floor() -> None:
    """Row 0: the reference ties two classes at 0.002 beside a -50 logit, the candidate puts them
    0.003 apart: within 4.47 % of 0.5 (1 % of the row's largest |value|), so it agrees by a tie.
    Row 1: the candidate's 0.2 lead is a clear winner, past the floor too. Row 2: same argmax."""
    ref = np.array([[0.002, 0.002, -50.0], [0.002, 0.002, -50.0], [3.0, 1.0, -2.0]])
    cand = np.array([[0.002, 0.005, -50.0], [0.002, 0.2, -50.0], [3.1, 1.0, -2.0]])
    assert _top1_agreeing(ref, cand, F32_EPS) == (2, 1)


def test_verify_passes_a_score_output_off_by_2e4_near_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """[8, 1] scores 10 … 0.001, a candidate + 2e-4 everywhere: relative error 0.20 %, PASSED (20 %,
    FAILED, held to the 0.001 score's own magnitude)."""
    w = numpy_helper.from_array(np.array([[1.0], [0.0]], np.float32), "W")
    b = numpy_helper.from_array(np.array([2e-4], np.float32), "B")
    ref = _save(
        tmp_path / "score_ref.onnx", [helper.make_node("MatMul", ["x", "W"], ["y"])], [w], [8, 2], [8, 1]
    )
    nodes = [helper.make_node("MatMul", ["x", "W"], ["t"]), helper.make_node("Add", ["t", "B"], ["y"])]
    cand = _save(tmp_path / "score_cand.onnx", nodes, [w, b], [8, 2], [8, 1])
    x = np.zeros((8, 2), np.float32)
    x[:, 0] = [10, 1, 0.5, 0.1, 0.05, 0.01, 0.005, 0.001]
    np.save(tmp_path / "x.npy", x)
    code, out, err = run_cli(
        monkeypatch, capsys, "verify", ref, cand, "--calibration-data", str(tmp_path / "x.npy")
    )
    assert code == 0, out + err
    row = next(line for line in out.splitlines() if "relative error, y" in line)
    assert " ".join(row.split()) == "│ relative error, y │ 0.20% │ ≤ 4.47% │ ok │", row
    assert "FAILED" not in out
    assert "PASSED: all thresholds hold" in out


# ---------------------------------------------------------------------------- the cosine check


def test_a_nan_cosine_fails_the_cosine_check() -> None:
    failures = _report(math.nan).check()
    assert [f for f in failures if f.startswith("min cosine similarity")] == [
        "min cosine similarity nan < 0.999"
    ]


@pytest.mark.parametrize(("cosine", "fails"), [(0.999, False), (0.99899, True), (1.0, False), (0.0, True)])
def test_the_cosine_check_holds_at_the_threshold(cosine: float, fails: bool) -> None:
    failures = _report(cosine).check()
    assert any(f.startswith("min cosine similarity") for f in failures) == fails, failures


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], (0.0, 0.0)),  # a zero candidate row: no direction, cosine 0
        ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], (1.0, 1.0)),  # both zero: the same row
        ([0.0, 0.0, 0.0], [1.0, 0.0, 0.0], (0.0, math.inf)),  # a zero reference row
        ([1.0, 2.0, 2.0], [5.0, 10.0, 10.0], (1.0, 5.0)),  # 5× the reference: the cosine cannot see it
        ([1.0, 0.0, 0.0], [0.0, 2.0, 0.0], (0.0, 2.0)),
    ],
)
def test_cosine_and_ratio_of_known_rows(
    a: list[float], b: list[float], expected: tuple[float, float]
) -> None:
    assert _cosine_and_ratio(np.array(a), np.array(b)) == pytest.approx(expected, rel=1e-12)


def _feature_map_pair(tmp_path: Path, candidate: str) -> tuple[str, str]:
    """A 3→4 conv and a copy whose weights hold a NaN (`nan`) or are all zero (`zero`)."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    bad = w.copy()
    if candidate == "nan":
        bad[2, 0, 1, 1] = np.nan
    else:
        bad[:] = 0.0
    paths = []
    for name, weights in (("fm_ref", w), (f"fm_{candidate}", bad)):
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
        inits = [numpy_helper.from_array(weights, "w")]
        paths.append(_save(tmp_path / f"{name}.onnx", [node], inits, [1, 3, 6, 6], [1, 4, 6, 6]))
    return paths[0], paths[1]


@pytest.mark.parametrize(("candidate", "shown"), [("nan", "nan"), ("zero", "0.000000")])
def test_verify_names_the_cosine_failure_of_a_nan_or_zero_candidate(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    candidate: str,
    shown: str,
) -> None:
    """A NaN candidate feature map, or an all-zero one: the cosine row FAILs and the failure list
    says so first (the row-scale check fails too, but it is not the only line)."""
    ref, cand = _feature_map_pair(tmp_path, candidate)
    code, out, err = run_cli(monkeypatch, capsys, "verify", ref, cand)
    assert code == 1, out + err
    row = next(line for line in out.splitlines() if "cosine similarity (min)" in line)
    assert f"│ {shown} │" in " ".join(row.split()), row
    assert row.rstrip().endswith("FAIL │"), row
    failed = [line for line in out.splitlines() if line.startswith("FAILED:")]
    assert failed[0] == f"FAILED: min cosine similarity {shown} < 0.999", failed
    assert any(line.startswith("FAILED: output y: row scale changed by") for line in failed), failed
