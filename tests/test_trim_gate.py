"""`optimize --mode trim`'s fidelity gate from the command line: --min-cosine, --min-top1 and
--no-fidelity-gate (widths for a network the user will fine-tune), and --resume across them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def trim_args(model: Path, outdir: Path, *extra: str) -> list[str]:
    return [
        "optimize", str(model), "--target", "h200", "--sms", "8", "--backend", "model", "--mode", "trim",
        "--max-evals", "12", "-o", str(outdir), *extra,
    ]  # fmt: skip


def test_no_fidelity_gate_trims_a_network_the_gate_refuses_and_says_so(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Random weights: every trim changes the logits, so the default gate refuses them all and the
    answer keeps every group's width; without the gate the answer trims, and both the closing lines
    and report.json say the outputs changed and that the gate only reported."""
    model = zoo_model_path("vgg16_pruned_b4")
    code, out, err = run_cli(monkeypatch, capsys, *trim_args(model, tmp_path / "gated"))
    assert code == 0, err
    gated = json.loads((tmp_path / "gated" / "report.json").read_text())
    assert gated["refused"] and gated["trim_gate"] == {"min_cosine": 0.99, "min_top1": 0.99, "enforced": True}
    originals = {g["id"]: g["original"] for g in gated["groups"]}
    assert all(gated["plan"][g] >= w for g, w in originals.items())
    assert "gate: min cosine ≥ 0.99, top-1 agreement ≥ 99%, enforced" in " ".join(out.split())
    # the line says how many inputs the check rests on (a few, not the whole calibration set)
    n = gated["fidelity"]["samples"]
    said = f"(onnxruntime CPU, random inputs (no calibration data given), {n} samples):"
    assert said in " ".join(out.split())

    code, out, err = run_cli(monkeypatch, capsys, *trim_args(model, tmp_path / "free", "--no-fidelity-gate"))
    assert code == 0, err
    free = json.loads((tmp_path / "free" / "report.json").read_text())
    assert free["refused"] == [] and free["trim_gate"]["enforced"] is False
    assert any(free["plan"][g] < w for g, w in originals.items())
    assert free["fidelity"]["failures"]
    said = " ".join(out.split())  # rich wraps the line at the console's width
    assert "reported only (--no-fidelity-gate) — past the thresholds: fine-tune before deploying" in said
    assert "reported only (--no-fidelity-gate)" in (tmp_path / "free" / "report.md").read_text()


def test_lower_thresholds_let_trims_through(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """--min-cosine -1 --min-top1 0 pass every plan: nothing is refused, the answer trims, and the
    thresholds given are the ones recorded."""
    model = zoo_model_path("vgg16_pruned_b4")
    args = trim_args(model, tmp_path / "out", "--min-cosine", "-1", "--min-top1", "0")
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["refused"] == [] and report["fidelity"]["failures"] == []
    assert report["trim_gate"] == {"min_cosine": -1.0, "min_top1": 0.0, "enforced": True}
    assert any(report["plan"][g["id"]] < g["original"] for g in report["groups"])


def test_resume_refuses_other_gate_settings(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The journal keeps each plan's fidelity failures under the thresholds it ran with, so a resume
    with other thresholds is refused by name; with the same ones it resumes."""
    model = zoo_model_path("vgg16_pruned_b4")
    code, _, err = run_cli(monkeypatch, capsys, *trim_args(model, tmp_path / "out", "--min-cosine", "0.5"))
    assert code == 0, err
    code, _, err = run_cli(monkeypatch, capsys, *trim_args(model, tmp_path / "out", "--resume"))
    assert (
        code == 2 and err.strip().count("\n") == 0 and "--min-cosine was 0.5, now the default (0.99)" in err
    )
    args = trim_args(model, tmp_path / "out", "--resume", "--min-cosine", "0.5")
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--min-cosine", "0.9"], "apply to --mode trim only"),
        (["--no-fidelity-gate"], "apply to --mode trim only"),
        (["--max-trim", "0.3"], "apply to --mode trim only"),  # ran lossless without a word
        (["--mode", "grow", "--max-trim", "0.3"], "apply to --mode trim only"),
        (["--mode", "trim", "--min-cosine", "1.5"], "--min-cosine 1.5: expected a value between -1 and 1"),
        (["--mode", "trim", "--min-top1", "2"], "--min-top1 2.0: expected a fraction between 0 and 1"),
    ],
)
def test_gate_options_are_one_line_errors(
    extra: list[str],
    message: str,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    model = zoo_model_path("vgg16_pruned_b4")
    args = [
        "optimize",
        str(model),
        "--target",
        "h200",
        "--backend",
        "model",
        "-o",
        str(tmp_path / "o"),
        *extra,
    ]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and err.strip().count("\n") == 0 and message in err, err
    assert not (tmp_path / "o").exists()


def test_the_gate_line_quotes_no_top1_bound_where_no_output_was_top1_checked() -> None:
    """A detector (no N×classes output) has no top-1 agreement (null); its gate line still said
    'top-1 agreement ≥ 99%', a bound that checked nothing. The console and report.md say so."""
    from deployopt.cli.optimize_cmd import _fidelity_line
    from deployopt.report import describe_gate

    gate = {"min_cosine": 0.99, "min_top1": 0.99, "enforced": True}
    assert describe_gate(gate) == "min cosine ≥ 0.99, top-1 agreement ≥ 99%, enforced"
    fid = {"cosine_min": 0.9999, "top1_agreement": None, "samples": 4, "source": "imgs"}
    line = _fidelity_line(fid, gate).plain
    assert line == (
        "fidelity of the answer vs the input (onnxruntime CPU, imgs, 4 samples): min cosine 0.9999; "
        "gate: min cosine ≥ 0.99, top-1: not applied (no class-score output), enforced"
    )
    classifier = _fidelity_line({**fid, "top1_agreement": 1.0}, gate).plain
    assert classifier.endswith("agreement 100%; gate: min cosine ≥ 0.99, top-1 agreement ≥ 99%, enforced")
