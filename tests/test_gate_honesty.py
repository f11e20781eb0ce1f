"""The fidelity gate is honest about what it checked, and `verify` is one library function.

A trim was ranked and gated on the same samples where the data held no more than the gate's 4
(or 20 images at --batch 8), and the gate passed a model agreeing on 8 of 20 held-out images; the
gate's samples were the first 4 files, one class of a class-per-folder dataset; a 1-channel
model's images were said to get ImageNet's RGB mean/std; `verify --json` had no image_preprocess;
figures and thresholds were rounded past the side they fall on; and `compare_models(...).check()`
was a weaker verify than the command (no fp16 overflow check, no renaming of repeated node names,
no input check). Library and `verify` level; tests/test_gate_honesty_optimize.py covers optimize.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from PIL import Image
from test_coupling import Net
from test_fp16_overflow import _overflowing
from typer.testing import CliRunner

from deployopt.cli.main import app
from deployopt.errors import DataError, ModelError
from deployopt.fidelity import (
    CalibrationSet,
    FidelityReport,
    ImagePreprocess,
    Thresholds,
    compare_models,
    load_calibration,
)
from deployopt.precision import to_fp16

try:  # click before 8.2 mixes stderr into stdout unless told not to
    runner = CliRunner(mix_stderr=False)
except TypeError:
    runner = CliRunner()

#: images fed as their raw pixel values, so a sample says which file it came from
RAW = ImagePreprocess(mean=(0.0,), std=(1.0,), scale=1.0)


def _images(folder: Path, values: list[int], sub: str = "") -> None:
    """One 8×8 grey PNG per value (that value in every pixel), in `folder`/`sub`."""
    (folder / sub).mkdir(parents=True, exist_ok=True)
    for v in values:
        Image.fromarray(np.full((8, 8, 3), v, np.uint8)).save(folder / sub / f"img_{v:03d}.png")


def _ids(calib: CalibrationSet | None) -> list[int]:
    """The pixel value of each image in each sample (RAW tensors), in order."""
    if calib is None:
        return []
    return [int(row[0, 0, 0]) for s in calib.samples for row in next(iter(s.values()))]


def _class_folders(root: Path, classes: int = 5, per_class: int = 6) -> Path:
    """ImageNet's val/ layout: one folder per class, class k's images valued 40·k + i."""
    for k in range(classes):
        _images(root, [40 * k + i for i in range(per_class)], f"n{k:04d}")
    return root


# --------------------------------------------------------------------------- A: never the same sample
def test_one_sample_is_the_gates_and_the_trims_are_ranked_by_filter_l1(tmp_path: Path) -> None:
    from deployopt.fidelity import load_trim_samples

    _images(tmp_path / "one", [7])
    split = load_trim_samples(tmp_path / "one", {"x": [1, 3, 8, 8]}, RAW)
    assert _ids(split.gate) == [7] and split.ranking is None
    assert split.ranked_on().startswith(
        "dead channels, then L1 of the producing filters: the calibration data holds one sample"
    )
    assert split.gate.notices[-1].startswith(
        "the calibration data holds one sample: the fidelity gate checks it, and the trims are ranked "
        "by filter L1, not on it"
    )


@pytest.mark.parametrize(
    ("values", "batch", "gate", "ranked"),
    [
        ([0, 1, 2, 3], 1, [[0], [2]], [[1], [3]]),  # exactly the gate's 4: half each, interleaved
        ([0, 1, 2], 1, [[0], [1]], [[2]]),
        ([0, 1], 1, [[0]], [[1]]),
        # 20 images at batch 8: two samples (4 images left out), one each
        (list(range(20)), 8, [list(range(8))], [list(range(8, 16))]),
    ],
)
def test_data_the_gate_alone_would_take_is_split_between_gate_and_ranking(
    tmp_path: Path, values: list[int], batch: int, gate: list[list[int]], ranked: list[list[int]]
) -> None:
    """Ranked and gated on the same samples, the gate passed trims that disagree on 8 of 20
    held-out images; now each sample is the gate's or the ranking's, and a notice says so."""
    from deployopt.fidelity import load_trim_samples

    _images(tmp_path / "d", values)
    split = load_trim_samples(tmp_path / "d", {"x": [batch, 3, 8, 8]}, RAW)
    assert _ids(split.gate) == [v for s in gate for v in s]
    assert _ids(split.ranking) == [v for s in ranked for v in s]
    n, g = len(gate) + len(ranked), len(gate)
    assert split.notice.startswith(
        f"the calibration data holds {n} samples, fewer than the fidelity gate's 4"
    )
    assert f"the gate checks {g} of them and the trims are ranked on the other {len(ranked)}" in split.notice
    assert split.notice in split.gate.notices and split.notice not in split.ranking.notices
    # report.json's trim_order says how many, and that they are not the gate's
    assert split.ranked_on().endswith(
        f"on {len(ranked)} calibration sample{'' if len(ranked) == 1 else 's'} the fidelity gate does not "
        f"check (it checks the other {g} of the data's {n} samples)"
    )


def test_a_ranking_cut_by_its_memory_budget_leaves_the_gate_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where one sample's inputs pass RANK_INPUT_BYTES / 2 (batch 8 at 3×1024² is 100 MB), the
    ranking wants 2 samples: 6 were loaded of 100, and the split for data that ran out gave the gate
    3 and told the user the data holds 6 (review of 6108068)."""
    import deployopt.fidelity as fidelity

    ones = np.ones((1, 2, 3), np.float32)
    np.save(tmp_path / "a.npy", np.arange(100, dtype=np.float32)[:, None, None] * ones)
    monkeypatch.setattr(fidelity, "RANK_INPUT_BYTES", 2 * 3 * 4 * 2)  # two samples' inputs
    split = fidelity.load_trim_samples(tmp_path / "a.npy", {"x": [2, 3]}, gate=4)
    assert (len(split.gate), len(split.ranking), split.notice) == (4, 2, "")
    gate = {float(s["x"][0, 0]) for s in split.gate.samples}
    ranked = {float(s["x"][0, 0]) for s in split.ranking.samples}
    assert not gate & ranked
    # data that really ran out (5 of the 6 wanted) is still split, and says what would do
    np.save(tmp_path / "b.npy", np.arange(5, dtype=np.float32)[:, None, None] * ones)
    split = fidelity.load_trim_samples(tmp_path / "b.npy", {"x": [2, 3]}, gate=4)
    assert (len(split.gate), len(split.ranking)) == (3, 2)
    assert split.notice.endswith("give 6 or more for a gate of 4"), split.notice


def test_with_data_enough_the_gate_takes_4_and_the_ranking_up_to_16_others(tmp_path: Path) -> None:
    from deployopt.fidelity import load_trim_samples

    _images(tmp_path / "d", list(range(30)))
    split = load_trim_samples(tmp_path / "d", {"x": [1, 3, 8, 8]}, RAW)
    gate, ranked = _ids(split.gate), _ids(split.ranking)
    assert len(gate) == 4 and len(ranked) == 16 and not set(gate) & set(ranked)
    assert split.notice == "" and split.gate.notices == []
    assert split.gate.chosen == (
        "4 spread over the 20 samples taken: 20 of the data's 30 images, at an even stride over its "
        "sorted files; the trims are ranked on the other 16"
    )


# --------------------------------------------------------------------------- B: spread over the data
def test_gate_and_ranking_samples_are_spread_over_class_folders(tmp_path: Path) -> None:
    """The first 20 sorted files of a class-per-folder set are its first classes (the repro: one
    class of 25 images); at an even stride, the gate's 4 come from 4 classes of 5."""
    from deployopt.fidelity import load_trim_samples

    data = _class_folders(tmp_path / "val")
    split = load_trim_samples(data, {"x": [1, 3, 8, 8]}, RAW)
    assert sorted({v // 40 for v in _ids(split.gate)}) == [0, 1, 2, 3]
    assert sorted({v // 40 for v in _ids(split.ranking)}) == [0, 1, 2, 3, 4]
    # optimize --mode lossless's gate, and any caller asking for a spread
    gate = load_calibration(data, {"x": [1, 3, 8, 8]}, count=4, preprocess=RAW, spread=True)
    assert _ids(gate) == [0, 41, 83, 124] and gate.chosen.startswith("4 of the data's 30 images")
    first = load_calibration(data, {"x": [1, 3, 8, 8]}, count=4, preprocess=RAW)  # as verify reads
    assert _ids(first) == [0, 1, 2, 3] and first.chosen == ""


def test_array_samples_and_rows_are_spread_in_file_order(tmp_path: Path) -> None:
    """Arrays: samples (one file, or a folder of them) and rows of one batch item, each picked at
    an even stride; an .npz's inputs keep their samples together."""
    rows = np.arange(30, dtype=np.float32)[:, None, None, None] * np.ones((30, 2, 4, 4), np.float32)
    folder = tmp_path / "arrays"
    folder.mkdir()
    np.save(folder / "a.npy", rows[:13])
    np.save(folder / "b.npy", rows[13:])

    def firsts(calib: CalibrationSet) -> list[list[float]]:
        return [s["x"][:, 0, 0, 0].tolist() for s in calib.samples]

    samples = load_calibration(folder, {"x": [1, 2, 4, 4]}, count=5, spread=True)
    assert firsts(samples) == [[0], [6], [12], [18], [24]]
    assert samples.chosen == "5 of the data's 30 samples, at an even stride in file order"
    batches = load_calibration(folder, {"x": [2, 2, 4, 4]}, count=5, spread=True)  # 15 batches of rows
    assert firsts(batches) == [[0, 1], [6, 7], [12, 13], [18, 19], [24, 25]]
    assert load_calibration(folder, {"x": [2, 2, 4, 4]}, count=15, spread=True).chosen == ""  # all of them
    both = tmp_path / "both.npz"
    np.savez(both, x=rows[:, None], y=rows[:, None] * 2)  # N samples of the input's shape
    paired = load_calibration(both, {"x": [1, 2, 4, 4], "y": [1, 2, 4, 4]}, count=3, spread=True)
    assert [float(s["x"].flat[0]) for s in paired.samples] == [0, 10, 20]
    assert all(np.array_equal(s["y"], s["x"] * 2) for s in paired.samples)


# --------------------------------------------------------------------------- C, D: what the images got
def _gray_model(path: Path) -> Path:
    """A 1-channel classifier: x 1×1×8×8 → conv → relu → conv → GAP → Gemm (5 classes)."""
    n = Net(c=1)
    onnx.save(n.build(n.fc(n.gap(n.conv(n.op("Relu", [n.conv("x", 12)]), 10)), 5)), str(path))
    return path


def test_a_one_channel_inputs_images_report_the_grayscale_values_they_got(tmp_path: Path) -> None:
    """Grayscale images normalised by the mean of ImageNet's three means and stds, 0.449 and
    0.226; the set, and so verify and optimize, said "mean 0.485,0.456,0.406, ..., RGB"."""
    _images(tmp_path / "d", [51])
    calib = load_calibration(tmp_path / "d", {"x": [1, 1, 8, 8]})
    assert calib.preprocess is not None
    assert calib.preprocess.to_json() == {
        "mean": [0.449], "std": [0.226], "scale": 1 / 255, "channel_order": "grayscale", "resize": "stretch",
    }  # fmt: skip
    assert calib.preprocess.describe() == "scale 1/255, mean 0.449, std 0.226, grayscale, resize stretch"
    np.testing.assert_allclose(calib.samples[0]["x"], (51 / 255 - 0.449) / 0.226, rtol=1e-6)
    again = load_calibration(tmp_path / "d", {"x": [1, 1, 8, 8]}, preprocess=calib.preprocess)
    np.testing.assert_array_equal(again.samples[0]["x"], calib.samples[0]["x"])  # it reads back
    rgb = load_calibration(tmp_path / "d", {"x": [1, 3, 8, 8]})  # 3 channels: as asked
    assert rgb.preprocess == ImagePreprocess()

    model = _gray_model(tmp_path / "gray.onnx")
    result = runner.invoke(app, ["verify", str(model), str(model), "--calibration-data", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "calibration images made into tensors by: scale 1/255, mean 0.449, std 0.226, grayscale" in said


def test_optimize_reports_the_preprocessing_a_one_channel_model_got(tmp_path: Path) -> None:
    from deployopt.optimize import OptimizeConfig, optimize

    _images(tmp_path / "d", [10, 20])
    cfg = OptimizeConfig(model_path=_gray_model(tmp_path / "gray.onnx"), target="h200", backend="model",
                         max_evals=2, outdir=tmp_path / "o", calibration_data=str(tmp_path / "d"),
                         plots=False)  # fmt: skip
    report = optimize(cfg).report
    assert report["image_preprocess"]["mean"] == [0.449]
    assert report["image_preprocess"]["channel_order"] == "grayscale"


def test_verify_json_says_how_images_became_tensors(zoo_model_path, tmp_path: Path) -> None:
    """As optimize's report.json and apply --json do: null where no image was read."""
    ref = str(zoo_model_path("resnet56_pruned"))
    cifar = Path(__file__).resolve().parents[1] / "calibration_data" / "cifar10"
    args = ["verify", ref, ref, "--count", "2", "--json"]
    result = runner.invoke(
        app, [*args, "--calibration-data", str(cifar), "--resize", "crop", "--mean", "0.5"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["image_preprocess"] == {
        "mean": [0.5], "std": [0.229, 0.224, 0.225], "scale": 1 / 255, "channel_order": "RGB",
        "resize": "crop",
    }  # fmt: skip
    arrays = tmp_path / "x.npy"
    np.save(arrays, np.zeros((2, 3, 32, 32), np.float32))
    for extra in (["--calibration-data", str(arrays)], []):
        result = runner.invoke(app, [*args, *extra])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["image_preprocess"] is None


# --------------------------------------------------------------------------- E: figures vs thresholds
def test_figures_show_the_side_of_the_threshold_they_fall_on() -> None:
    from deployopt.fidelity import shown_against, shown_threshold

    assert shown_threshold(0.999, percent=True) == "99.9%"  # `:.0%` said "100%"
    assert shown_threshold(0.99, percent=True) == "99%" and shown_threshold(0.99, True, 2) == "99.00%"
    assert shown_threshold(0.99999) == "0.99999" and shown_threshold(0.9999999) == "0.9999999"
    assert shown_against(0.999987, 0.99999, 4) == ("0.999987", "0.99999")  # was "1.0000"
    assert shown_against(0.98, 0.999, 0, percent=True) == ("98%", "99.9%")
    assert shown_against(0.9995, 0.999, 0, percent=True)[0] == "99.95%"  # not "100%"
    assert shown_against(0.5, 0.99, 4)[0] == "0.5000" and shown_against(1.0, 0.99, 4)[0] == "1.0000"
    # a limit computed from a threshold grows its digits with the figure's
    assert shown_against(0.141431, 0.1414213, 2, percent=True, computed=True) == ("14.143%", "14.142%")


def test_failure_lines_do_not_round_a_figure_onto_its_threshold() -> None:
    report = FidelityReport(
        max_abs_error=0.0, mean_abs_error=0.0, cosine_min=0.9999996, cosine_mean=0.9999998,
        top1_agreement=0.9995, n_samples=1, n_rows=2000, output_names=["y"], candidate_output_names=["y"],
    )  # fmt: skip
    failures = report.check(Thresholds(min_cosine=0.9999999, min_top1=0.99995))
    assert failures == ["min cosine similarity 0.9999996 < 0.9999999", "top-1 agreement 99.95% < 99.995%"]
    # the usual figures read as before
    report.cosine_min, report.top1_agreement = 0.5, 0.5
    assert report.check(Thresholds()) == [
        "min cosine similarity 0.500000 < 0.999",
        "top-1 agreement 50.00% < 99.00%",
    ]


# --------------------------------------------------------------------------- F: verify_models
def test_verify_models_catches_an_fp16_overflow_compare_models_alone_passes(tmp_path: Path) -> None:
    from deployopt.fidelity import verify_models

    ref, cand = tmp_path / "ref.onnx", tmp_path / "cand.onnx"
    onnx.save(_overflowing(), str(ref))
    onnx.save(to_fp16(_overflowing()), str(cand))
    calib = CalibrationSet([{"x": np.ones((1, 3, 8, 8), np.float32)}], "ones", False)
    assert compare_models(ref, cand, calib).check() == []  # onnxruntime computes the fp16 convs in fp32
    (failure,) = verify_models(ref, cand, calib).check()
    assert failure.startswith("candidate: 1 fp16 tensor(s) overflow") and "big (Conv 'conv_big'" in failure
    (failure,) = verify_models(_overflowing(), to_fp16(_overflowing()), calib).check()  # models in memory
    assert failure.startswith("candidate: 1 fp16 tensor(s) overflow")


def test_verify_models_takes_models_whose_nodes_repeat_a_name(zoo_model_path) -> None:
    """Legal ONNX that onnxruntime refuses: verify renamed the nodes, the library did not."""
    from deployopt.fidelity import verify_models

    model = onnx.load(str(zoo_model_path("resnet56_pruned")))
    for node in model.graph.node:
        if node.op_type == "Conv":
            node.name = "conv"
    calib = load_calibration(None, {"input": [1, 3, 32, 32]}, count=2)
    with pytest.raises(ModelError, match="onnxruntime cannot load it"):
        compare_models(model, model, calib)
    assert verify_models(model, model, calib).check() == []
    assert {n.name for n in model.graph.node if n.op_type == "Conv"} == {"conv"}  # the caller's, as it was


def test_verify_models_refuses_models_that_take_other_inputs(zoo_model_path) -> None:
    from deployopt.fidelity import verify_models

    ref = onnx.load(str(zoo_model_path("resnet56_pruned")))
    other = onnx.ModelProto()
    other.CopyFrom(ref)
    other.graph.input[0].type.tensor_type.shape.dim[2].dim_value = 64
    calib = load_calibration(None, {"input": [1, 3, 32, 32]}, count=1)
    with pytest.raises(
        DataError, match=r"input shapes differ: reference input 1×3×32×32, candidate input 1×3×64×32"
    ):
        verify_models(ref, other, calib)
    dynamic = onnx.ModelProto()
    dynamic.CopyFrom(ref)
    dynamic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"  # a dynamic dim agrees with any
    assert verify_models(ref, dynamic, calib).check() == []
    dynamic.graph.input[0].type.tensor_type.ClearField("shape")  # so does a shape the file leaves out
    assert verify_models(ref, dynamic, calib).check() == []


def test_the_verify_command_is_the_library_function(zoo_model_path, monkeypatch) -> None:
    """One implementation: the command's report is verify_models's."""
    from deployopt.cli import verify_cmd
    from deployopt.fidelity import verify_models

    calls: list[tuple[str, str]] = []

    def spy(reference: Path, candidate: Path, calib: CalibrationSet, **kw: Any) -> FidelityReport:
        calls.append((str(reference), str(candidate)))
        assert kw == {"min_cosine": 0.999}  # the cosine its top-1 ties are judged at
        return verify_models(reference, candidate, calib, **kw)

    monkeypatch.setattr(verify_cmd, "verify_models", spy)
    ref = str(zoo_model_path("resnet56_pruned"))
    result = runner.invoke(app, ["verify", ref, ref, "--count", "2"])
    assert result.exit_code == 0, result.output
    assert calls == [(ref, ref)]
