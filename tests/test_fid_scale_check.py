"""The scale a cosine cannot see: each row's ‖candidate‖ / ‖reference‖, held to the relative error
--min-cosine allows a row of one value (√(2·(1 − c)): 4.47 % at verify's 0.999, 14.1 % at the
trim gate's 0.99). Until the fix, every output 5× the reference's passed verify (max abs error
103, cosine 1.0, top-1 100 %, exit 0) on random inputs whose note says they show "whether the
models compute the same function"."""

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
from deployopt.coupling import analyze
from deployopt.fidelity import (
    CalibrationSet,
    ReferenceRun,
    Thresholds,
    compare_models,
    identical_report,
    load_calibration,
    verify_models,
)
from deployopt.precision import to_fp16
from deployopt.surgery import apply_plan

try:  # click before 8.2 mixes stderr into stdout unless told not to
    runner = CliRunner(mix_stderr=False)
except TypeError:
    runner = CliRunner()


def _logits_model(scale: float) -> onnx.ModelProto:
    """The bug bash's model: x [4, 3, 4, 4] → Flatten → MatMul [48, 10] → Mul by `scale`."""
    w = np.random.default_rng(0).normal(size=(48, 10)).astype(np.float32)
    nodes = [
        h.make_node("Flatten", ["x"], ["f"]),
        h.make_node("MatMul", ["f", "Wt"], ["z"]),
        h.make_node("Mul", ["z", "s"], ["logits"]),
    ]
    g = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, [4, 3, 4, 4])],
        [h.make_tensor_value_info("logits", T.FLOAT, [4, 10])],
        [nh.from_array(w, "Wt"), nh.from_array(np.array(scale, np.float32), "s")],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _affine(scale: float = 1.0, offset: np.ndarray | None = None, width: int = 10) -> onnx.ModelProto:
    """y = x × scale (+ offset) over x [N, width]: the candidate's rows set by hand."""
    nodes = [h.make_node("Mul", ["x", "s"], ["m"])]
    inits = [nh.from_array(np.array(scale, np.float32), "s")]
    out = "m"
    if offset is not None:
        inits.append(nh.from_array(offset.astype(np.float32), "d"))
        nodes.append(h.make_node("Add", ["m", "d"], ["y"]))
        out = "y"
    g = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", width])],
        [h.make_tensor_value_info(out, T.FLOAT, ["N", width])],
        inits,
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _calib(x: np.ndarray) -> CalibrationSet:
    return CalibrationSet(samples=[{"x": x.astype(np.float32)}], source="hand-made rows", random=False)


def test_every_output_five_times_the_reference_fails_verify(tmp_path: Path) -> None:
    ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    onnx.save(_logits_model(1.0), str(ref))
    onnx.save(_logits_model(5.0), str(cand))
    result = runner.invoke(app, ["verify", str(ref), str(cand), "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["cosine_min"] == pytest.approx(1.0) and report["top1_agreement"] == 1.0
    assert report["scale_change_max"] == pytest.approx(4.0, rel=1e-5)
    assert report["scale_change_limit"] == pytest.approx(0.04472, abs=1e-5)
    (logits,) = report["per_output"]
    assert logits["scale_change"] == pytest.approx(4.0, rel=1e-5) and logits["norm_ratio"] == pytest.approx(
        5.0
    )
    assert report["failures"] == [
        "output logits: row scale changed by 400.00% > 4.47% (‖candidate‖ / ‖reference‖ − 1 per row, at "
        "worst ‖candidate‖ = 5 × ‖reference‖; a cosine cannot see scale, so each row's length is held to "
        "the relative error --min-cosine 0.999 allows a row of one value)"
    ]
    table = runner.invoke(app, ["verify", str(ref), str(cand)])
    assert table.exit_code == 1
    row = next(line for line in table.stdout.splitlines() if "row scale change (max)" in line)
    assert "400.00%" in row and "≤ 4.47%" in row and "FAIL" in row
    # a fifth of the reference fails as well: 80 % shorter rows
    onnx.save(_logits_model(0.2), str(cand))
    report = json.loads(runner.invoke(app, ["verify", str(ref), str(cand), "--json"]).stdout)
    assert report["passed"] is False and report["scale_change_max"] == pytest.approx(0.8, rel=1e-5)


@pytest.mark.parametrize(
    ("min_cosine", "inside", "outside"),
    [(0.999, 1.04, 1.05), (0.999, 0.96, 0.95), (0.99, 1.14, 1.15), (0.99, 0.86, 0.85)],
)
def test_the_limit_is_what_the_cosine_allows_a_row_of_one_value(
    min_cosine: float, inside: float, outside: float
) -> None:
    """√(2·(1 − c)): 4.47 % at 0.999, 14.14 % at 0.99, either way."""
    x = np.random.default_rng(1).normal(size=(6, 10))
    thresholds = Thresholds(min_cosine=min_cosine, min_top1=0.99)
    ok = compare_models(_affine(), _affine(inside), _calib(x))
    assert ok.scale_change_max == pytest.approx(abs(inside - 1), rel=1e-5) and ok.check(thresholds) == []
    bad = compare_models(_affine(), _affine(outside), _calib(x))
    (failure,) = bad.check(thresholds)
    assert failure.startswith(f"output {bad.output_names[0]}: row scale changed by ")


def test_noise_the_cosine_passes_is_no_change_of_scale() -> None:
    """Noise turns a row (what the cosine judges) and changes its length by its part along the row
    alone: noise of 4 % of each row's length, cosine 0.9992, changes no length by half of 4.47 %."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 64))
    noise = rng.normal(size=64) * 0.04 * np.linalg.norm(x, axis=1).mean() / 8
    report = compare_models(_affine(width=64), _affine(offset=noise, width=64), _calib(x))
    assert 0.999 < report.cosine_min < 0.9999
    assert report.scale_change_max < 0.0447 / 2 and report.check(Thresholds()) == []


def test_all_zero_reference_rows() -> None:
    """A zero reference row with a zero candidate row is no change (ratio 1); with a nonzero one
    its cosine is 0 and its change of scale infinite: both fail."""
    x = np.zeros((3, 10))
    x[0] = np.arange(10)
    same = compare_models(_affine(), _affine(1.0), _calib(x))
    assert same.output_scale_change == [0.0] and same.output_norm_ratio == [1.0]
    assert same.check(Thresholds()) == []
    offset = np.full(10, 0.5, np.float32)
    moved = compare_models(_affine(), _affine(offset=offset), _calib(x))
    assert moved.cosine_min == 0.0 and moved.scale_change_max == np.inf
    failures = moved.check(Thresholds(min_top1=None))
    assert [f.split(" ")[0] for f in failures] == ["min", "output"]


def test_exact_pads_fp16_models_and_the_identical_report_keep_their_scale(zoo_model) -> None:
    """What must not newly fail: an exact pad (outputs equal up to summation order), an fp16
    conversion against its fp32 original (verify's fp16 use), the input's own plan (the trim
    gate's identical report); and a trim the gate judges is held at 14.1 %, not verify's 4.47 %."""
    ref = zoo_model("resnet56_pruned")
    analysis = analyze(ref)
    plan = {g.id: -(-g.width // 32) * 32 for g in analysis.free_groups()}  # each padded to 32s
    padded = apply_plan(ref, plan, analysis)
    calib = load_calibration(None, {"input": [1, 3, 32, 32]}, count=3)
    report = verify_models(ref, padded, calib)
    assert report.scale_change_max is not None and report.scale_change_max < 1e-5
    assert report.check(Thresholds()) == []
    half = verify_models(ref, to_fp16(ref), calib)
    assert half.scale_change_max < 0.01 and half.check(Thresholds()) == []
    same = identical_report(ReferenceRun(ref), calib)
    assert same.output_scale_change == [0.0] and same.to_json(Thresholds(min_cosine=0.99))["passed"]
    data = same.to_json(Thresholds(min_cosine=0.99, min_top1=0.99))
    assert data["scale_change_max"] == 0.0 and data["scale_change_limit"] == pytest.approx(0.141421, abs=1e-6)


def test_the_lossless_check_keeps_its_own_limits() -> None:
    """optimize's lossless check turns the cosine off (max abs error + rel error instead): no
    limit of scale comes with it, and a report's check is its absolute limits alone."""
    x = np.random.default_rng(3).normal(size=(4, 10))
    report = compare_models(_affine(), _affine(1.5), _calib(x))
    lossless = Thresholds(max_abs_error=100.0, rel_error=0.0, min_cosine=None, min_top1=None)
    assert report.check(lossless) == []
    assert report.to_json(lossless)["scale_change_limit"] is None
