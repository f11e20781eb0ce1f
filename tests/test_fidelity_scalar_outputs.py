"""The fidelity gate on outputs a per-row cosine cannot judge (fidelity.compare_models, `_scoring`).

A row of one value has cosine ±1 by its sign alone, and integer labels compared by cosine say
nothing: `verify` passed a sigmoid giving 0.508 for the reference's 0.99999 and an ArgMax agreeing
on 0 of 16 labels (cosine 1.000000), and `optimize --mode trim` accepted trims that moved a
probability by 20–60 % of itself. One-value outputs are now held to a relative error, integer
outputs to an exact match; an identical and an exactly padded model still pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from deployopt.fidelity import Thresholds, compare_models, load_calibration

# how an output is scored: "scored_by" in the JSON (fidelity's COSINE, RELATIVE and EXACT)
COSINE, RELATIVE, EXACT = "cosine", "relative error", "exact match"

CIFAR = Path(__file__).resolve().parents[1] / "calibration_data" / "cifar10"


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _save(path: Path, nodes: list[Any], inits: list[Any], inp: Any, out: Any) -> Path:
    graph = h.make_graph(nodes, path.stem, [inp], [out], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _head(seed: int, classes: int, scale: float = 1.0) -> tuple[list[Any], list[Any]]:
    """Conv 3→8, ReLU, global pool, Gemm to `classes` values: z [1, classes]."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((classes, 8)).astype(np.float32)
    if classes == 1:
        w2 = np.abs(w2) * scale
    inits = [nh.from_array(w1, "W1"), nh.from_array(w2.astype(np.float32), "W2")]
    nodes = [
        h.make_node("Conv", ["img", "W1"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c"], ["r"]),
        h.make_node("GlobalAveragePool", ["r"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Gemm", ["f", "W2"], ["z"], transB=1),
    ]
    return nodes, inits


IMG32 = h.make_tensor_value_info("img", T.FLOAT, [1, 3, 32, 32])


def scalar_model(path: Path, seed: int, scale: float = 1.0) -> Path:
    """A [1, 1] sigmoid probability (the bug bash's mk_scalar.py)."""
    nodes, inits = _head(seed, 1, scale)
    nodes.append(h.make_node("Sigmoid", ["z"], ["prob"]))
    return _save(path, nodes, inits, IMG32, h.make_tensor_value_info("prob", T.FLOAT, [1, 1]))


def argmax_model(path: Path, seed: int) -> Path:
    """An int64 [1] label from an in-graph ArgMax over 10 logits (mk_argmax.py)."""
    nodes, inits = _head(seed, 10)
    nodes.append(h.make_node("ArgMax", ["z"], ["label"], axis=1, keepdims=0))
    return _save(path, nodes, inits, IMG32, h.make_tensor_value_info("label", T.INT64, [1]))


def two_conv_model(path: Path, pad: int = 0, sigmoid: bool = True) -> Path:
    """mk_scalar2.py's model: conv 3→37, conv 37→70, pool, Gemm to one value, sigmoid (a score
    that is ~1e-5–1e-2 on CIFAR images), or without the sigmoid a raw value of either sign. `pad`:
    the first conv padded by that many zero filters (zero bias) that the second conv reads with zero
    weights, an exact edit: the outputs equal the unpadded model's up to float rounding."""
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((37, 3, 3, 3)) * 0.5).astype(np.float32)
    b1 = (rng.standard_normal(37) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((70, 37, 3, 3)) * np.sqrt(2 / 333)).astype(np.float32)
    b2 = (rng.standard_normal(70) * 0.1).astype(np.float32)
    w3 = (rng.standard_normal((1, 70)) * 0.5).astype(np.float32)
    if pad:
        w1 = np.concatenate([w1, np.zeros((pad, 3, 3, 3), np.float32)])
        b1 = np.concatenate([b1, np.zeros(pad, np.float32)])
        w2 = np.concatenate([w2, np.zeros((70, pad, 3, 3), np.float32)], axis=1)
    # without the sigmoid, a bias centres the raw value (−11 … −5 on CIFAR) on zero
    b3 = np.array([0.0 if sigmoid else 8.0], np.float32)
    arrays = ((w1, "W1"), (b1, "B1"), (w2, "W2"), (b2, "B2"), (w3, "W3"), (b3, "B3"))
    inits = [nh.from_array(a, n) for a, n in arrays]
    nodes = [
        h.make_node("Conv", ["img", "W1", "B1"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c"], ["r"]),
        h.make_node("Conv", ["r", "W2", "B2"], ["c2"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c2"], ["r2"]),
        h.make_node("GlobalAveragePool", ["r2"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Gemm", ["f", "W3", "B3"], ["z"], transB=1),
    ]
    out = "z"
    if sigmoid:
        nodes.append(h.make_node("Sigmoid", ["z"], ["prob"]))
        out = "prob"
    img = h.make_tensor_value_info("img", T.FLOAT, [1, 3, 64, 64])
    return _save(path, nodes, inits, img, h.make_tensor_value_info(out, T.FLOAT, [1, 1]))


def _verify(monkeypatch: pytest.MonkeyPatch, capsys: Any, *args: str) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, "verify", *args, "--calibration-data", str(CIFAR))


def test_a_one_value_output_far_off_fails_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Repro 1: every reference probability ~0.99999, the candidate's ~0.508: cosine 1.000000,
    PASSED, exit 0. Now the relative error (~49 %) fails it, in the table, the FAILED line (naming
    the output and the statistic) and the JSON; the cosine reads n/a, as no output has one."""
    ref = scalar_model(tmp_path / "ref.onnx", 0)
    cand = scalar_model(tmp_path / "cand.onnx", 1, scale=0.01)
    code, out, err = _verify(monkeypatch, capsys, str(ref), str(cand))
    assert code == 1, out + err
    said = " ".join(out.split())
    assert "FAILED: output prob: relative error 49." in said and "> 4.47%" in said
    assert "PASSED" not in out
    assert "relative error, prob" in out and "FAIL" in out
    assert "cosine similarity (min) │ n/a" in said
    assert "relative error: output prob holds one value per row, whose cosine is ±1 by its sign alone" in said

    code, out, _ = _verify(monkeypatch, capsys, str(ref), str(cand), "--json")
    rep = json.loads(out)
    assert code == 1 and not rep["passed"]
    assert rep["cosine_min"] is None and rep["cosine_mean"] is None
    assert 0.45 < rep["relative_error_max"] < 0.55
    assert rep["relative_error_limit"] == pytest.approx(0.0447, abs=1e-4)  # √(2·(1 − 0.999))
    (prob,) = rep["per_output"]
    assert prob["scored_by"] == RELATIVE and prob["cosine_min"] is None
    assert prob["relative_error"] == rep["relative_error_max"]
    # the old fields are all still there
    for key in ("max_abs_error", "mean_abs_error", "top1_agreement", "samples", "rows", "failures"):
        assert key in rep


def test_an_integer_label_output_is_scored_by_exact_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Repro 2: an ArgMax label agreeing on none of 16 images passed at cosine 1.000000. Integer
    outputs are compared for equality and held to --min-top1."""
    ref = argmax_model(tmp_path / "ref.onnx", 0)
    cand = argmax_model(tmp_path / "cand.onnx", 7)
    code, out, err = _verify(monkeypatch, capsys, str(ref), str(cand), "--json")
    rep = json.loads(out)
    assert code == 1, err
    (label,) = rep["per_output"]
    assert label["scored_by"] == EXACT and label["values_compared"] == 16
    assert label["values_equal"] < 8 and rep["exact_match"] == label["values_equal"] / 16
    assert rep["cosine_min"] is None and rep["top1_agreement"] is None
    assert rep["failures"] == [
        f"output label: exact match {rep['exact_match']:.2%} < 99.00% (--min-top1; "
        f"{label['values_equal']} of 16 integer values equal)"
    ]
    code, out, _ = _verify(monkeypatch, capsys, str(ref), str(cand))
    said = " ".join(out.split())
    assert code == 1 and f"exact match, label │ {label['values_equal']}/16" in said
    assert "FAILED: output label: exact match" in said
    # --min-top1 is the threshold: 0 lets it through
    assert _verify(monkeypatch, capsys, str(ref), str(cand), "--min-top1", "0")[0] == 0


def test_identical_models_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    for path in (scalar_model(tmp_path / "s.onnx", 0), argmax_model(tmp_path / "a.onnx", 0)):
        code, out, err = _verify(monkeypatch, capsys, str(path), str(path), "--json")
        rep = json.loads(out)
        assert code == 0 and rep["passed"] and rep["failures"] == [], err
        assert rep["relative_error_max"] in (None, 0.0) and rep["exact_match"] in (None, 1.0)


@pytest.mark.parametrize("sigmoid", [True, False])
def test_an_exactly_padded_model_passes(tmp_path: Path, sigmoid: bool) -> None:
    """Zero filters read with zero weights: the outputs differ by float rounding alone. A raw value
    (no sigmoid) crosses zero across images; a row near zero is measured against 1 % of the
    output's largest magnitude, not its own, so rounding there does not fail it."""
    ref = two_conv_model(tmp_path / "ref.onnx", sigmoid=sigmoid)
    padded = two_conv_model(tmp_path / "pad.onnx", pad=5, sigmoid=sigmoid)
    calib = load_calibration(CIFAR, {"img": [1, 3, 64, 64]}, count=16)
    rep = compare_models(ref, padded, calib)
    assert rep.output_scored_by == [RELATIVE]
    assert rep.check(Thresholds(min_cosine=0.999999, min_top1=0.99)) == []
    assert rep.relative_error_max is not None and rep.relative_error_max < 1e-4
    if not sigmoid:
        values = [float(x) for s in calib.samples for x in onnx_outputs(ref, s)]
        assert min(values) < 0 < max(values)  # the case the floor is for


def onnx_outputs(path: Path, sample: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path)).run(None, sample)[0].ravel()


def test_a_trim_moving_a_one_value_output_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Repro 3: every trim of mk_scalar2.py's model passed the gate at cosine 1.0000 and the answer
    moved the probability by 10–67 % of itself. The gate now refuses the trims past the relative
    error --min-cosine 0.99 allows (14.14 %); the answer it keeps is within it."""
    model = two_conv_model(tmp_path / "scalar2.onnx")
    args = ["optimize", str(model), "--target", "orin-nano-8gb", "--mode", "trim", "--max-trim", "0.5"]
    code, out, err = run_cli(
        monkeypatch, capsys, *args, "--calibration-data", str(CIFAR), "-o", str(tmp_path / "out")
    )
    assert code == 0, err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["refused"], "no trim was refused"
    assert all("output prob: relative error" in e["reason"] for e in report["refused"])
    fid = report["fidelity"]
    assert fid["passed"] and fid["cosine_min"] is None
    assert fid["relative_error_max"] <= fid["relative_error_limit"] == pytest.approx(0.14142, abs=1e-5)
    said = " ".join(out.split())
    assert "max relative error" in said
    # no output scored by cosine (cosine_min None): the gate quotes no cosine bound it never checked
    gate = "relative error ≤ 14.14% (outputs of one value per row, from min cosine 0.99)"
    assert f"gate: {gate}, top-1: not applied (no class-score output)" in said and "min cosine ≥" not in said
    md = (tmp_path / "out" / "report.md").read_text()
    assert "relative error max:" in md and "Plans refused for fidelity" in md
    assert (
        f"- trim gate: {gate}, top-1: not applied (no class-score output)" in md and "min cosine ≥" not in md
    )


def test_scoring_of_outputs_beside_logits() -> None:
    """Logits [N, classes] keep the cosine and top-1; a one-value output beside them is scored
    by its relative error and counts in neither; an integer one by exact match only."""
    from deployopt import fidelity
    from deployopt.fidelity import _scoring

    assert (fidelity.COSINE, fidelity.RELATIVE, fidelity.EXACT) == (COSINE, RELATIVE, EXACT)
    assert fidelity.relative_error_limit(0.99) == pytest.approx(0.141421, abs=1e-6)
    assert fidelity.relative_error_limit(1.0) == 0.0 and fidelity.relative_error_limit(None) is None

    logits = np.zeros((2, 10), np.float32)
    assert _scoring([logits, np.zeros((2, 1), np.float32), np.zeros((2,), np.int64)]) == [
        COSINE,
        RELATIVE,
        EXACT,
    ]
    assert _scoring([np.zeros((2, 3, 4, 4), np.float32), np.zeros((2, 1, 1, 1), np.float32)]) == [
        COSINE,
        RELATIVE,
    ]
    assert _scoring([np.zeros((), np.float32)]) == [RELATIVE]
    assert _scoring([np.zeros((1, 2), np.float32), np.zeros((1, 5), bool)]) == [COSINE, EXACT]


def test_the_gate_phrase_names_the_checks_other_outputs_got() -> None:
    from deployopt.report import describe_gate, gate_checks

    gate = {"min_cosine": 0.99, "min_top1": 0.99, "enforced": True}
    fid = {
        "top1_agreement": 1.0,
        "per_output": [{"scored_by": COSINE}, {"scored_by": EXACT}, {"scored_by": RELATIVE}],
    }
    assert describe_gate(gate, **gate_checks(fid)) == (
        "min cosine ≥ 0.99 (outputs of one value per row: relative error ≤ 14.14%), "
        "top-1 agreement ≥ 99%, integer outputs' exact match ≥ 99%, enforced"
    )
    old = {"top1_agreement": 1.0, "per_output": [{"name": "logits"}]}  # a journal's from before
    assert describe_gate(gate, **gate_checks(old)) == describe_gate(gate)
    assert describe_gate(gate, **gate_checks({"top1_agreement": 1.0})) == describe_gate(gate)


def test_the_gate_phrase_quotes_no_cosine_where_no_output_was_scored_by_it() -> None:
    """Every output one value per row or integer (the report's cosine_min None): the phrase said
    "min cosine ≥ 0.99" of a cosine no output was held to. Now the relative-error and exact-match
    bounds alone, the cosine named only as where the relative error's bound comes from."""
    from deployopt.report import describe_gate, gate_checks

    gate = {"min_cosine": 0.99, "min_top1": 0.99, "enforced": False}
    no_cosine = {"cosine_min": None, "top1_agreement": None}
    both = {**no_cosine, "per_output": [{"scored_by": EXACT}, {"scored_by": RELATIVE}]}
    assert gate_checks(both) == {"top1": False, "relative": True, "exact": True, "cosine": False}
    assert describe_gate(gate, **gate_checks(both)) == (
        "relative error ≤ 14.14% (outputs of one value per row, from min cosine 0.99), "
        "integer outputs' exact match ≥ 99%, reported only (--no-fidelity-gate)"
    )
    relative = {**no_cosine, "per_output": [{"scored_by": RELATIVE}]}
    assert describe_gate(gate, **gate_checks(relative)) == (
        "relative error ≤ 14.14% (outputs of one value per row, from min cosine 0.99), "
        "top-1: not applied (no class-score output), reported only (--no-fidelity-gate)"
    )
    integers = {**no_cosine, "per_output": [{"scored_by": EXACT}, {"scored_by": EXACT}]}
    assert describe_gate(gate, **gate_checks(integers)) == (
        "integer outputs' exact match ≥ 99%, reported only (--no-fidelity-gate)"
    )


def test_resume_compares_again_the_plans_an_old_journal_passed_by_cosine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A journal written before outputs were scored by kind holds passes at cosine 1.0 for the
    trims the gate now refuses; --resume does not replay them as passed but compares them again."""
    model = two_conv_model(tmp_path / "scalar2.onnx")
    args = ["optimize", str(model), "--target", "orin-nano-8gb", "--mode", "trim", "--max-trim", "0.5"]
    args += ["--calibration-data", str(CIFAR), "-o", str(tmp_path / "out")]
    assert run_cli(monkeypatch, capsys, *args)[0] == 0
    journal = tmp_path / "out" / "journal.jsonl"
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    old = 0
    for ev in events:  # as the old code wrote them: every plan passed, no "scored_by"
        if ev["event"] == "fidelity":
            rep = ev["report"]
            rep.update(passed=True, failures=[], cosine_min=1.0, cosine_mean=1.0)
            for key in ("relative_error_max", "relative_error_limit", "exact_match"):
                rep.pop(key)
            rep["per_output"] = [
                {k: v for k, v in p.items() if k in ("name", "max_abs_error", "max_abs_reference")}
                for p in rep["per_output"]
            ]
            old += 1
    assert old
    journal.write_text("".join(json.dumps(ev) + "\n" for ev in events))
    code, _, err = run_cli(monkeypatch, capsys, *args, "--resume")
    assert code == 0, err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["refused"] and all("relative error" in e["reason"] for e in report["refused"])
    # the answer's report is a new one (a replayed old one has no relative error), within the limit
    fid = report["fidelity"]
    assert fid.get("relative_error_max") is not None, "the answer's old report was replayed"
    assert fid["relative_error_max"] <= fid["relative_error_limit"]
