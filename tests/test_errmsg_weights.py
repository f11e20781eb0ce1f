"""A model whose weights hold NaN (a diverged checkpoint exported as is) is named as such (bug bash,
error messages 02): every command that ran it blamed the input data ("give --calibration-data",
"check the data's scale"), which no data can fix; bench timed it without a word, and apply without
data trimmed it ranked by a NaN filter L1 (exit 0)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt import model_checks

CULPRIT = "initializer 'c1.weight' holds 1 NaN value(s)"


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test its own cache, and no warning held back as given by an earlier test."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(model_checks, "_WARNED", set(), raising=False)


def _nan_model(folder: Path) -> Path:
    r = np.random.default_rng(0)
    w1 = r.standard_normal((16, 3, 3, 3)).astype(np.float32)
    w1[0, 0, 0, 0] = np.nan
    inits = [
        numpy_helper.from_array(w1, "c1.weight"),
        numpy_helper.from_array(r.standard_normal((10, 16, 3, 3)).astype(np.float32), "c2.weight"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "c1.weight"], ["a"], name="c1", pads=[1] * 4),
        helper.make_node("Relu", ["a"], ["b"], name="r"),
        helper.make_node("Conv", ["b", "c2.weight"], ["y"], name="c2", pads=[1] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(folder / "nanw.onnx"))
    np.save(folder / "data.npy", r.random((4, 3, 16, 16)).astype(np.float32))
    (folder / "plan.json").write_text(json.dumps({"widths": {"c1": 8}}))
    return folder / "nanw.onnx"


def _error_line(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: ") and "Traceback" not in err, err
    assert all(line.startswith("warning: ") for line in lines[:-1]), err
    return lines[-1]


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "{m}", "{m}"],
        ["verify", "{m}", "{m}", "--calibration-data", "{d}/data.npy"],
        ["optimize", "{m}", "--target", "nano", "--backend", "model", "-o", "{d}/out"],
        ["apply", "{m}", "--plan", "{d}/plan.json", "-o", "{d}/t.onnx", "--calibration-data", "{d}/data.npy"],
        ["apply", "{m}", "--plan", "{d}/plan.json", "-o", "{d}/t.onnx"],
    ],
    ids=["verify", "verify-data", "optimize", "apply-data", "apply-l1"],
)
def test_commands_that_compute_outputs_name_the_weight_not_the_data(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str]
) -> None:
    model = _nan_model(tmp_path)
    argv = [a.format(m=model, d=tmp_path) for a in args]
    line = _error_line(*run_cli(monkeypatch, capsys, *argv)[::2])
    assert CULPRIT in line, line
    assert "fix or re-export the checkpoint" in line, line
    assert "give --calibration-data" not in line and "check the data's scale" not in line, line
    assert not (tmp_path / "t.onnx").exists()


def test_bench_times_it_and_says_so_in_one_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = _nan_model(tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), "--runs", "3", "--warmup", "0")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1, err
    assert f"{model}: {CULPRIT}" in warnings[0] and "timings are still valid" in warnings[0], err


def test_the_check_counts_nan_and_infinities_and_leaves_a_mask_alone() -> None:
    r = np.random.default_rng(1)
    w = r.standard_normal((4, 3, 1, 1)).astype(np.float32)
    w[0, 0, 0, 0], w[1, 0, 0, 0], w[2, 0, 0, 0] = np.nan, np.inf, -np.inf
    mask = np.array([0.0, -np.inf], np.float32)  # an attention mask's -inf: a legitimate constant
    half = np.array([1.0, np.nan, np.nan], np.float16)  # not read by a conv: a NaN fill value, left alone
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["a"]),
            helper.make_node("Add", ["a", "mask"], ["b"]),
            helper.make_node("Cast", ["half"], ["h"], to=TensorProto.FLOAT),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(mask, "mask"),
            numpy_helper.from_array(half, "half"),
        ],
    )
    found = model_checks.nonfinite_weights(helper.make_model(graph))
    assert found == [("w", 1, 2)]
    assert model_checks.describe_nonfinite(found) == "initializer 'w' holds 1 NaN and 2 infinite value(s)"
