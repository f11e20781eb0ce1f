"""`deployopt verify` end to end: exit 0 / 1 / 2, table and JSON, random inputs said plainly."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import numpy_helper
from typer.testing import CliRunner

from deployopt.cli.main import app
from deployopt.errors import DataError, ModelError

CIFAR = Path(__file__).resolve().parents[1] / "calibration_data" / "cifar10"
try:  # click before 8.2 (Python 3.9's) mixes stderr into stdout unless told not to
    runner = CliRunner(mix_stderr=False)
except TypeError:  # 8.2 keeps them apart and has no such argument
    runner = CliRunner()


def _shifted(src: Path, dest: Path, delta: float) -> Path:
    """Copy of the model with class 0's logit moved by `delta`."""
    model = onnx.load(str(src))
    for t in model.graph.initializer:
        if t.name == "classifier.fc.bias":
            b = numpy_helper.to_array(t).copy()
            b[0] += delta
            t.CopyFrom(numpy_helper.from_array(b, t.name))
    onnx.save(model, str(dest))
    return dest


def _verify(*args: str):
    return runner.invoke(app, ["verify", *args])


def test_identical_models_pass_and_random_inputs_are_announced(zoo_model_path) -> None:
    ref = str(zoo_model_path("resnet56_pruned"))
    result = _verify(ref, ref, "--count", "3")
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.output and "random inputs (no calibration data given)" in result.output
    assert "3 / 3" in result.output


def test_perturbed_model_fails_with_exit_1_and_names_the_thresholds(zoo_model_path, tmp_path: Path) -> None:
    ref = zoo_model_path("resnet56_pruned")
    cand = _shifted(ref, tmp_path / "cand.onnx", 0.01)
    result = _verify(str(ref), str(cand), "--calibration-data", str(CIFAR), "--max-abs-error", "1e-3")
    assert result.exit_code == 1, result.output
    assert "FAILED: max abs error 0.01 > 0.001" in result.output
    assert "cosine" in result.output and f"inputs: {CIFAR}" in result.output
    # The same small shift passes the default thresholds (cosine, top-1): no abs limit by default.
    assert _verify(str(ref), str(cand), "--calibration-data", str(CIFAR)).exit_code == 0


def test_json_report(zoo_model_path, tmp_path: Path) -> None:
    ref = zoo_model_path("resnet56_pruned")
    cand = _shifted(ref, tmp_path / "cand.onnx", 50.0)
    result = _verify(str(ref), str(cand), "--calibration-data", str(CIFAR), "--json", "--count", "7")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["samples"] == 7 and report["random_inputs"] is False and report["source"] == str(CIFAR)
    assert report["passed"] is False
    assert report["max_abs_error"] == pytest.approx(50.0, abs=1e-4)
    assert report["mean_abs_error"] == pytest.approx(5.0, abs=1e-5)
    assert report["top1_agreement"] < 0.5  # +50 on class 0 makes nearly every image class 0
    # +50 on class 0 lengthens the rows past the scale the cosine threshold allows, too
    assert [f.split(" ")[0] for f in report["failures"]] == ["min", "output", "top-1"]


def test_repository_calibration_folder_itself_is_accepted(zoo_model_path) -> None:
    """`--calibration-data calibration_data/` (the images are one folder down) runs on the 20 images."""
    ref = str(zoo_model_path("resnet56_pruned"))
    result = _verify(ref, ref, "--calibration-data", str(CIFAR.parent), "--count", "100", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["samples"], report["random_inputs"], report["source"]) == (20, False, str(CIFAR.parent))


def test_dynamic_batch_uses_input_shape(zoo_model_path) -> None:
    dyn = str(zoo_model_path("resnet_projection_dynamic"))
    result = _verify(dyn, dyn, "--calibration-data", str(CIFAR), "--input-shape", "input:4x3x32x32", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["samples"], report["rows"]) == (5, 20)
    result = _verify(dyn, dyn, "--count", "2", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["rows"] == 2  # batch fixed to 1, with a notice on stderr
    assert "fixed to 1" in result.stderr


def test_bad_input_raises_one_line_errors(zoo_model_path, tmp_path: Path) -> None:
    ref = str(zoo_model_path("resnet56_pruned"))
    result = _verify(ref, str(tmp_path / "missing.onnx"))
    assert isinstance(result.exception, ModelError) and "missing.onnx: no such file" in str(result.exception)
    result = _verify(ref, str(zoo_model_path("resnet_projection_64")))
    assert isinstance(result.exception, DataError) and "input shapes differ" in str(result.exception)
    result = _verify(ref, ref, "--mean", "a,b")
    assert isinstance(result.exception, DataError) and "--mean 'a,b'" in str(result.exception)
    result = _verify(ref, ref, "--min-top1", "1.5")
    assert isinstance(result.exception, DataError)
    for bound in ("-1", "nan"):  # accepted before, and then failed every model, identical ones too
        result = _verify(ref, ref, "--max-abs-error", bound)
        assert isinstance(result.exception, DataError)
        assert f"--max-abs-error {float(bound)}: expected an error bound ≥ 0" == str(result.exception)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--scale", "inf", "--scale must be a finite number above 0, got inf"),
        ("--scale", "nan", "--scale must be a finite number above 0, got nan"),
        ("--scale", "0", "--scale must be a finite number above 0, got 0.0"),
        ("--mean", "nan,0,0", "--mean values must be finite numbers, got nan,0.0,0.0"),
        ("--std", "1,inf,1", "--std values must be finite numbers, got 1.0,inf,1.0"),
    ],
)
def test_preprocessing_that_makes_nan_inputs_is_bad_input(zoo_model_path, option, value, message) -> None:
    """Before, these fed NaN (or all-zero) images and reported 'FAILED: min cosine nan' with exit 1,
    as if the models differed."""
    ref = str(zoo_model_path("resnet56_pruned"))
    result = _verify(ref, ref, "--calibration-data", str(CIFAR), option, value)
    assert isinstance(result.exception, DataError) and str(result.exception) == message


def test_console_script_exit_codes(zoo_model_path, tmp_path: Path) -> None:
    """Through the real entry point: bad calibration data is one line on stderr and exit 2."""
    ref = str(zoo_model_path("resnet56_pruned"))
    bad = tmp_path / "imgs"
    bad.mkdir()
    exe = shutil.which("deployopt") or str(Path(sys.executable).with_name("deployopt"))
    proc = subprocess.run(
        [exe, "verify", ref, ref, "--calibration-data", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"error: {bad}: empty folder (no png/jpg/jpeg/bmp images and no .npy/.npz arrays, "
        "subfolders searched too)"
    )
    assert "Traceback" not in proc.stderr


def test_rel_error_widens_each_outputs_limit_and_needs_max_abs_error(zoo_model_path, tmp_path: Path) -> None:
    ref = zoo_model_path("resnet56_pruned")
    cand = _shifted(ref, tmp_path / "cand.onnx", 0.01)
    args = [str(ref), str(cand), "--calibration-data", str(CIFAR), "--json", "--max-abs-error", "1e-3"]
    strict = json.loads(_verify(*args).stdout)
    (logits,) = strict["per_output"]
    assert logits["name"] == "logits" and logits["max_abs_error"] == pytest.approx(0.01, abs=1e-5)
    # the keys docs/models.md lists (it named three of the five; the last five came with scoring
    # outputs of one value per row and of integers otherwise)
    keys = ["name", "max_abs_error", "max_abs_reference", "cosine_min", "top1_agreement", "scored_by"]
    keys += ["relative_error", "exact_match", "values_equal", "values_compared"]
    keys += ["scale_change", "norm_ratio", "top1_tied_rows", "top1_skipped"]
    documented = "`per_output` is `[{" + ", ".join(f'"{k}"' for k in keys) + "}]`"
    assert documented in " ".join((CIFAR.parents[1] / "docs" / "models.md").read_text().split())
    assert list(logits) == keys and logits["scored_by"] == "cosine"
    # 1e-3 + rel × max|logit| covers the 0.01 shift exactly when rel is large enough
    rel = 0.01 / logits["max_abs_reference"]
    assert _verify(*args, "--rel-error", str(rel * 0.5)).exit_code == 1
    assert _verify(*args, "--rel-error", str(rel)).exit_code == 0
    result = _verify(str(ref), str(cand), "--rel-error", "0.1")
    assert isinstance(result.exception, DataError)
    assert "--rel-error 0.1: needs --max-abs-error" in str(result.exception)


def test_models_whose_nodes_repeat_a_name_are_verified(zoo_model_path, tmp_path: Path) -> None:
    """ONNX allows repeated node names and every other command reads such a model (renaming its
    nodes, with a notice); verify loaded the files as they are in onnxruntime, which refuses
    them: "reference model: onnxruntime cannot load it: ... two nodes with same node name". A
    model with its convs all named "conv" now verifies against itself and against a shifted copy
    (which still fails on the bound, exit 1: the models are compared, not skipped)."""
    model = onnx.load(str(zoo_model_path("resnet56_pruned")))
    for node in model.graph.node:
        if node.op_type == "Conv":
            node.name = "conv"
    dup = tmp_path / "dup.onnx"
    onnx.save(model, str(dup))
    result = _verify(str(dup), str(dup), "--count", "2")
    assert result.exit_code == 0 and "PASSED" in result.output, result.output
    shifted = _shifted(dup, tmp_path / "shifted.onnx", 0.01)
    result = _verify(str(dup), str(shifted), "--count", "2", "--max-abs-error", "1e-3")
    assert result.exit_code == 1 and "FAILED: max abs error 0.01 > 0.001" in result.output, result.output


def test_verify_says_how_images_were_made_into_tensors(zoo_model_path) -> None:
    """optimize and apply print the preprocessing their images got; verify said nothing of it."""
    ref = str(zoo_model_path("resnet56_pruned"))
    result = _verify(ref, ref, "--calibration-data", str(CIFAR), "--count", "2", "--resize", "crop")
    assert result.exit_code == 0, result.output
    assert (
        "calibration images made into tensors by: scale 1/255, mean 0.485,0.456,0.406, "
        "std 0.229,0.224,0.225, RGB, resize crop"
    ) in result.stdout
    assert "made into tensors" not in _verify(ref, ref, "--count", "2").stdout  # random inputs
