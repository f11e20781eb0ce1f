"""`apply` of a plan that lists no kept channels ranks them on the samples optimize ranked on, and
those are dealt around the fidelity gate's (fidelity.load_trim_samples): a library optimize() run
with another `fidelity_samples` than the default 4 ranked on other samples than apply did, and its
plan re-applied wrote another model. report.json records the count (`fidelity_samples`), and apply
of a plan in that OUTDIR takes it; a plan elsewhere keeps the default gate."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli

from deployopt.optimize import OptimizeConfig, optimize

CIFAR = Path(__file__).resolve().parents[1] / "calibration_data" / "cifar10"
GATE = 8  # not the default 4: 8 + 16 wanted of CIFAR's 20 leaves the ranking 12, not 16


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _apply(monkeypatch: pytest.MonkeyPatch, capsys: Any, *args: str) -> tuple[dict[str, Any], str]:
    code, out, err = run_cli(monkeypatch, capsys, "apply", *args, "--calibration-data", str(CIFAR), "--json")
    assert code == 0, err
    said = json.loads(out)
    (line,) = [n for n in said["notices"] if "lists no kept channels" in n]
    return said, line


def test_apply_ranks_around_the_gate_the_optimize_run_recorded(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    model = zoo_model_path("resnet_projection")
    out = tmp_path / "out"
    optimize(
        OptimizeConfig(
            model_path=model, outdir=out, target="h200", sms=8, backend="model", plots=False,
            mode="trim", max_trim=0.3, fidelity_gate=False, max_evals=12, calibration_data=str(CIFAR),
            fidelity_samples=GATE,
        )
    )  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert report["fidelity_samples"] == GATE
    assert report["fidelity"]["samples"] == GATE
    # live channels trimmed: the ranking decides which go
    assert any(report["plan"][g["id"]] < g["original"] - g["dead"] for g in report["groups"])
    # the plan without its kept channels (a width edited by hand drops them): ranked again
    widths = json.loads((out / "plan.json").read_text())["widths"]
    in_outdir = out / "widths_only.json"
    in_outdir.write_text(json.dumps({"widths": widths}))
    dest = tmp_path / "again.onnx"
    said, line = _apply(monkeypatch, capsys, str(model), "--plan", str(in_outdir), "-o", str(dest))
    assert said["trim_order"] == "activation"
    assert dest.read_bytes() == (out / "model.onnx").read_bytes()  # the samples optimize ranked on
    assert line.endswith(
        f"ranked on 12 calibration sample(s), those optimize ranks on (its fidelity gate checks the other "
        f"{GATE} of the data's 20 samples; a gate of {GATE} sample(s), as {out / 'report.json'} records)"
    ), line
    # a plan kept elsewhere: nothing recorded beside it, the default gate of 4 (said as before)
    elsewhere = tmp_path / "widths_only.json"
    elsewhere.write_text(json.dumps({"widths": widths}))
    _, line = _apply(
        monkeypatch, capsys, str(model), "--plan", str(elsewhere), "-o", str(tmp_path / "b.onnx")
    )
    assert line.endswith(
        "ranked on 16 calibration sample(s), those optimize ranks on (its fidelity gate checks the other 4 "
        "of the data's 20 samples)"
    ), line


@pytest.mark.parametrize(
    "report",
    [
        {"tool": "deployopt optimize"},  # an older optimize: no count recorded
        {"tool": "deployopt optimize", "fidelity_samples": True},
        {"tool": "deployopt optimize", "fidelity_samples": 0},
        {"tool": "deployopt optimize", "fidelity_samples": "8"},
        {"tool": "something else", "fidelity_samples": 8},
        None,  # not JSON
    ],
)
def test_a_report_recording_nothing_usable_leaves_the_default_gate(
    report: Any,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    model = zoo_model_path("resnet_projection")
    (tmp_path / "report.json").write_text("{not json" if report is None else json.dumps(report))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {"layer4.0.conv1.conv": 120}}))
    _, line = _apply(monkeypatch, capsys, str(model), "--plan", str(plan), "-o", str(tmp_path / "o.onnx"))
    assert line.endswith("(its fidelity gate checks the other 4 of the data's 20 samples)"), line
