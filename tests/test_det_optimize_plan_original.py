"""optimize's plan.json records each group's width in the input model (`original`), so `apply`
refuses the plan for the same model saved with its nodes in another order, whose unnamed convs'
`Conv_<index>` ids name other convs (a lossless plan trimmed a branch there, exit 0), and still
rebuilds optimize's model.onnx from the input it was written for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx
import pytest
from cli_runner import run_cli
from test_det_plan_original import _model


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def test_optimize_records_the_input_widths_and_apply_checks_them(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    ab, ba, out = tmp_path / "ab.onnx", tmp_path / "ba.onnx", tmp_path / "out"
    onnx.save(_model("ab"), str(ab))
    onnx.save(_model("ba"), str(ba))
    args = ["optimize", str(ab), "--target", "h200", "--sms", "8", "--backend", "model", "-o", str(out)]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    plan = json.loads((out / "plan.json").read_text())
    assert plan["original"] == {"Conv_0": 13, "Conv_1": 22} and sorted(plan["widths"]) == ["Conv_0", "Conv_1"]
    assert list(plan)[:2] == ["widths", "original"]  # the widths a user edits stay first
    assert plan["widths"] != plan["original"]  # a plan that changes the model
    dest = tmp_path / "again.onnx"
    code, _, err = run_cli(
        monkeypatch, capsys, "apply", str(ba), "--plan", str(out / "plan.json"), "-o", str(dest)
    )
    assert code == 2 and err.count("\n") == 1, err
    assert "group 'Conv_0' is 22 channel(s) wide in this model" in err and "where it is 13 " in err, err
    assert not dest.exists()
    code, _, err = run_cli(
        monkeypatch, capsys, "apply", str(ab), "--plan", str(out / "plan.json"), "-o", str(dest)
    )
    assert code == 0, err
    assert dest.read_bytes() == (out / "model.onnx").read_bytes()
