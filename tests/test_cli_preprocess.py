"""--mean/--std/--bgr/--scale/--resize on every command that reads calibration images.

Only `verify` took them; `apply` ranked trimmed channels, `optimize` ranked and gated them and
`bench`/`profile` calibrated INT8 on ImageNet-normalised RGB whatever the model takes (a YOLO model
wants pixels × 1/255 alone, a Caffe one BGR). Now each takes the same options, checks them the same
way, and the tensors the images make reach the code that uses them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from PIL import Image

from deployopt.coupling import analyze
from deployopt.fidelity import ImagePreprocess, load_calibration
from deployopt.zoo.graphs import resnet_projection

CIFAR = Path(__file__).resolve().parents[1] / "calibration_data" / "cifar10"
FIRST = sorted(CIFAR.iterdir())[:2]  # the images a 2-sample, batch-1 load reads


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def pixels(path: Path) -> np.ndarray:
    """One 32×32 CIFAR image as 1×3×32×32 float pixels (0–255), RGB."""
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.float32).transpose(2, 0, 1)[None]


def small_model(tmp_path: Path) -> tuple[Path, str]:
    """A batch-1 3×32×32 CNN on disk and one of its free groups a trim can narrow."""
    model = resnet_projection(stage_widths=(8, 16), blocks_per_stage=1, batch=1)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    gid = next(g.id for g in analyze(model).groups if not g.frozen and g.width > 4)
    return path, gid


def command_args(command: str, model: Path, tmp_path: Path) -> list[str]:
    """The least each command needs to reach its option checks."""
    if command == "verify":
        return ["verify", str(model), str(model)]
    if command == "apply":
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"widths": {}}))
        return ["apply", str(model), "--plan", str(plan), "-o", str(tmp_path / "out.onnx")]
    if command == "optimize":
        return ["optimize", str(model), "--target", "h200", "--backend", "model", "-o", str(tmp_path / "o")]
    return [command, str(model), "--backend", "tensorrt", "--dtype", "int8"]


COMMANDS = ["verify", "apply", "optimize", "bench", "profile"]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--mean", "1,2", "--mean 1.0,2.0: expected 1 value (every channel) or 3 (R,G,B), got 2"),
        ("--std", "0.5,0,0.5", "--std values must be above 0, got 0.5,0.0,0.5"),
        ("--resize", "bogus", "--resize 'bogus': expected one of stretch, crop"),
        ("--scale", "nan", "--scale must be a finite number above 0, got nan"),
        ("--mean", "a,b", "--mean 'a,b': expected numbers separated by commas, e.g. 0.485,0.456,0.406"),
        # a value left out: it was skipped, and 0.5,,0.5 became a two-value mean
        ("--std", "0.5,,0.5", "--std '0.5,,0.5': an empty item in the list (two commas, or one at an end)"),
    ],
)
def test_bad_values_are_one_line_on_every_command(
    command: str, option: str, value: str, message: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    model, _ = small_model(tmp_path)
    args = [*command_args(command, model, tmp_path), "--calibration-data", str(CIFAR), option, value]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert (code, err) == (2, f"error: {message}\n")
    assert not (tmp_path / "out.onnx").exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_the_options_without_images_are_refused_on_every_command(
    command: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    """Without --calibration-data the options have nothing to act on (verify refused them already);
    with a calibration table neither (its ranges are calibrated already)."""
    model, _ = small_model(tmp_path)
    base = command_args(command, model, tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, *base, "--bgr", "--scale", "1")
    assert code == 2 and err == (
        "error: --bgr, --scale: image preprocessing, and without --calibration-data the inputs are "
        "random; give images with --calibration-data\n"
    )
    table = tmp_path / "trt.cache"
    table.write_bytes(b"TRT-10300-EntropyCalibration2\n")
    code, _, err = run_cli(monkeypatch, capsys, *base, "--calibration-data", str(table), "--mean", "0")
    assert code == 2 and err == (
        f"error: --mean: image preprocessing, and --calibration-data {table} is a calibration table "
        "(its ranges are calibrated already); give the images to calibrate on\n"
    )


def test_apply_ranks_the_trim_on_the_images_as_the_options_make_them(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """`apply --mean 0,0,0 --std 1,1,1`: the channel ranking gets pixels × 1/255 (a YOLO model's
    input); before, it got ImageNet-normalised images whatever was asked."""
    import deployopt.importance as importance

    model, gid = small_model(tmp_path)
    plan, out_path = tmp_path / "plan.json", tmp_path / "out.onnx"
    width = next(g.width for g in analyze(onnx.load(str(model))).groups if g.id == gid)
    plan.write_text(json.dumps({"widths": {gid: width - 2}}))
    seen: list[list[dict[str, np.ndarray]]] = []
    real = importance.activation_importance

    def spy(model: Any, analysis: Any, groups: Any, samples: list[dict[str, np.ndarray]]) -> Any:
        seen.append(samples)
        return real(model, analysis, groups, samples)

    monkeypatch.setattr(importance, "activation_importance", spy)
    args = ["apply", str(model), "--plan", str(plan), "-o", str(out_path), "--calibration-data", str(CIFAR)]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--count", "2", "--mean", "0,0,0", "--std", "1,1,1")
    assert code == 0, err
    (samples,) = seen
    assert len(samples) == 2
    for sample, image in zip(samples, FIRST):
        np.testing.assert_allclose(sample["input"], pixels(image) / 255, atol=1e-6)
    # --bgr: blue first, the mean and std still given in RGB order
    seen.clear()
    code, _, err = run_cli(
        monkeypatch, capsys, *args, "--count", "1", "--bgr", "--mean", "0.1,0.2,0.3", "--std", "1,1,2"
    )
    assert code == 0, err
    rgb = pixels(FIRST[0]) / 255
    want = np.stack([(rgb[0, 2] - 0.3) / 2, rgb[0, 1] - 0.2, rgb[0, 0] - 0.1])[None]
    np.testing.assert_allclose(seen[0][0]["input"], want, atol=1e-6)


def test_array_data_gets_a_note_that_the_image_options_are_unused(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    model, _ = small_model(tmp_path)
    data = tmp_path / "calib.npy"
    np.save(data, np.zeros((2, 3, 32, 32), dtype=np.float32))
    args = [*command_args("verify", model, tmp_path), "--calibration-data", str(data), "--count", "2"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--mean", "0", "--resize", "crop")
    assert code == 0
    assert (
        f"note: --mean, --resize unused: {data} holds .npy/.npz arrays, fed to the model as they are "
        "(image preprocessing applies to images)\n"
    ) in err
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and "unused" not in err


def test_optimize_gates_ranks_and_reports_with_the_options_and_resume_checks_them(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """`optimize --mode trim --scale 0.5 --mean 0 --std 1`: the gate's and the ranking's samples are
    pixels × 0.5, report.json and report.md say how the images were made, and --resume refuses
    a journal made with other preprocessing in one line (as it refuses other thresholds)."""
    from deployopt.optimize import OptimizeConfig, Optimizer

    model, _ = small_model(tmp_path)
    raw = ImagePreprocess(mean=(0.0,), std=(1.0,), scale=0.5)
    cfg = OptimizeConfig(
        model_path=model, target="h200", backend="model", mode="trim", max_evals=3,
        fidelity_samples=2, outdir=tmp_path / "lib", calibration_data=str(CIFAR), preprocess=raw,
    )  # fmt: skip
    opt = Optimizer(cfg)
    opt._load()
    # 18 of the 20 images at an even stride (all but the 10th and the 20th); the gate has the 1st
    # and the 11th of them, the trims are ranked on the others, the 2nd first
    images = sorted(CIFAR.iterdir())
    gate = list(opt._calibration().samples)
    assert len(gate) == 2
    for sample, image in zip(gate, [images[0], images[10]]):
        np.testing.assert_allclose(sample["input"], pixels(image) * 0.5, atol=1e-4)
    ranked, _ = opt._ranking_samples()
    np.testing.assert_allclose(ranked[0]["input"], pixels(images[1]) * 0.5, atol=1e-4)

    out = tmp_path / "o"
    args = ["optimize", str(model), "--target", "h200", "--backend", "model", "--mode", "trim"]
    args += ["--max-evals", "3", "--calibration-data", str(CIFAR), "-o", str(out)]
    opts = ["--scale", "0.5", "--mean", "0", "--std", "1"]
    code, stdout, err = run_cli(monkeypatch, capsys, *args, *opts, "--json")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report == json.loads(stdout)
    assert report["image_preprocess"] == {
        "mean": [0.0], "std": [1.0], "scale": 0.5, "channel_order": "RGB", "resize": "stretch",
    }  # fmt: skip
    md = (out / "report.md").read_text()
    assert "- images made into tensors by: scale 0.5, mean 0, std 1, RGB, resize stretch\n" in md
    # the same options resume; other ones (or none) are refused, naming what changed
    code, stdout, err = run_cli(monkeypatch, capsys, *args, *opts, "--resume", "--max-evals", "4")
    assert code == 0, err
    assert "calibration images made into tensors by: scale 0.5, mean 0, std 1, RGB" in stdout
    code, _, err = run_cli(
        monkeypatch, capsys, *args, "--scale", "0.25", "--mean", "0", "--std", "1", "--resume"
    )
    assert code == 2 and err.count("\n") == 1
    assert "(the calibration data changed; image scale was 0.5, now 0.25)" in err
    code, _, err = run_cli(monkeypatch, capsys, *args, "--resume")
    assert code == 2 and err.count("\n") == 1
    assert "image mean was [0.0], now the default; image std was [1.0], now the default; " in err
    assert "image scale was 0.5, now the default)" in err


def test_lossless_resume_refuses_other_preprocessing_and_the_default_report(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """A journal made with the defaults and a run with --bgr differ in that alone (lossless keys on
    no calibration hash): the refusal names it. A run with no options reports the defaults."""
    model, _ = small_model(tmp_path)
    out = tmp_path / "o"
    args = ["optimize", str(model), "--target", "h200", "--backend", "model", "--max-evals", "2"]
    args += ["--calibration-data", str(CIFAR), "-o", str(out)]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["image_preprocess"] == ImagePreprocess().to_json()
    code, _, err = run_cli(monkeypatch, capsys, *args, "--bgr", "--resume")
    assert (code, err) == (
        2,
        f"error: --resume: {out / 'journal.jsonl'} was written by a different run (image channel_order "
        'was the default, now "BGR"); use --force to start over\n',
    )


def test_a_report_on_random_inputs_or_arrays_names_no_preprocessing(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    model, _ = small_model(tmp_path)
    data = tmp_path / "calib.npy"
    np.save(data, np.zeros((2, 3, 32, 32), dtype=np.float32))
    base = ["optimize", str(model), "--target", "h200", "--backend", "model", "--max-evals", "2"]
    for extra, out in (([], tmp_path / "a"), (["--calibration-data", str(data)], tmp_path / "b")):
        code, stdout, err = run_cli(monkeypatch, capsys, *base, *extra, "-o", str(out), "--json")
        assert code == 0, err
        assert json.loads(stdout)["image_preprocess"] is None
        assert "images made into tensors" not in (out / "report.md").read_text()


def test_load_calibration_says_how_images_were_made() -> None:
    pre = ImagePreprocess(scale=1.0, channel_order="BGR", resize="crop")
    assert load_calibration(CIFAR, {"input": [1, 3, 32, 32]}, count=1, preprocess=pre).preprocess == pre
    assert load_calibration(None, {"input": [1, 3, 32, 32]}, count=1).preprocess is None
    assert pre.changes() == {"scale": 1.0, "channel_order": "BGR", "resize": "crop"}
    assert ImagePreprocess().changes() == {}
    assert ImagePreprocess().describe() == (
        "scale 1/255, mean 0.485,0.456,0.406, std 0.229,0.224,0.225, RGB, resize stretch"
    )
