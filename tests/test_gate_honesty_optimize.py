"""`optimize --mode trim`'s fidelity gate checks samples the trims were not ranked on, spread over
the data, and the report says which and how many (tests/test_gate_honesty.py: the library side).

Before: with no more samples than the gate's 4 (or 20 images at --batch 8) the trims were ranked
on the gate's own samples, said only in report.json's trim_order; the gate's samples were the
first 4 files (one class of a class-per-folder set); --min-cosine's help said "any calibration
sample"; and the closing line rounded "top-1 agreement ≥ 100%" for --min-top1 0.999.
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

from deployopt.fidelity import ImagePreprocess
from deployopt.optimize import OptimizeConfig, Optimizer
from deployopt.zoo.graphs import resnet_projection

RAW = ImagePreprocess(mean=(0.0,), std=(1.0,), scale=1.0)  # a sample's pixel value names its file


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _model(tmp_path: Path, batch: int = 1) -> Path:
    path = tmp_path / f"r{batch}.onnx"
    onnx.save(resnet_projection(stage_widths=(8, 16), blocks_per_stage=1, batch=batch), str(path))
    return path


def _images(folder: Path, values: list[int]) -> Path:
    """One 32×32 grey PNG per value, that value in every pixel."""
    folder.mkdir(parents=True, exist_ok=True)
    for v in values:
        Image.fromarray(np.full((32, 32, 3), v, np.uint8)).save(folder / f"img_{v:03d}.png")
    return folder


def _ids(samples: list[dict[str, Any]]) -> list[int]:
    return [int(row[0, 0, 0]) for s in samples for row in next(iter(s.values()))]


def _optimizer(model: Path, data: Path, tmp_path: Path, mode: str = "trim") -> Optimizer:
    cfg = OptimizeConfig(model_path=model, target="h200", backend="model", mode=mode, outdir=tmp_path / "o",
                         calibration_data=str(data), preprocess=RAW)  # fmt: skip
    opt = Optimizer(cfg)
    opt._load()
    return opt


@pytest.mark.parametrize(("images", "batch"), [(4, 1), (2, 1), (20, 8)])
def test_the_gate_never_checks_a_sample_the_trims_were_ranked_on(
    tmp_path: Path, images: int, batch: int
) -> None:
    opt = _optimizer(_model(tmp_path, batch), _images(tmp_path / "d", list(range(images))), tmp_path)
    gate = _ids(opt._calibration().samples)
    ranked = _ids(opt._ranking_samples()[0])
    assert gate and ranked and not set(gate) & set(ranked)
    assert any("the trims are ranked on the other" in n for n in opt.calibration_notices())


def test_gate_and_ranking_spread_over_class_folders(tmp_path: Path) -> None:
    """A class-per-folder set (ImageNet's val/): the gate's 4 from 4 of the 5 classes, not the first
    class's first 4 files; the lossless gate's too."""
    data = tmp_path / "val"
    for k in range(5):
        _images(data / f"n{k:04d}", [40 * k + i for i in range(6)])
    opt = _optimizer(_model(tmp_path), data, tmp_path)
    assert sorted({v // 40 for v in _ids(opt._calibration().samples)}) == [0, 1, 2, 3]
    assert sorted({v // 40 for v in _ids(opt._ranking_samples()[0])}) == [0, 1, 2, 3, 4]
    lossless = _optimizer(_model(tmp_path), data, tmp_path, mode="lossless")
    assert sorted({v // 40 for v in _ids(lossless._calibration().samples)}) == [0, 1, 2, 3]


def test_one_image_trims_by_filter_l1_and_the_report_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """One sample is the gate's: ranked on it too, the gate checked the ranking on its own data
    (the bug bash: passed at 0.94 cosine, 8 of 20 held-out images agreed). Ranked by filter L1
    instead, said on the console and in report.md, which said nothing of the ranking at all."""
    data = _images(tmp_path / "one", [128])
    out = tmp_path / "o"
    args = ["optimize", str(_model(tmp_path)), "--target", "h200", "--sms", "8", "--backend", "model"]
    args += ["--mode", "trim", "--max-evals", "6", "--calibration-data", str(data), "-o", str(out)]
    code, stdout, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    said = " ".join((stdout + err).split())
    assert (
        "notice: the calibration data holds one sample: the fidelity gate checks it, and the trims are"
        in said
    )
    report = json.loads((out / "report.json").read_text())
    assert report["trim_order"].startswith("dead channels, then L1 of the producing filters: the calibration")
    md = (out / "report.md").read_text()
    assert f"- trimmed channels ranked by: {report['trim_order']}\n" in md
    assert "1 sample (the data's one sample; the trims are ranked by filter L1)" in md


def test_report_md_says_which_samples_the_gate_and_the_ranking_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    data = _images(tmp_path / "d", list(range(0, 240, 8)))  # 30 images: 20 taken, 4 gate and 16 ranking
    out = tmp_path / "o"
    args = ["optimize", str(_model(tmp_path)), "--target", "h200", "--sms", "8", "--backend", "model"]
    args += ["--mode", "trim", "--max-evals", "6", "--calibration-data", str(data), "-o", str(out)]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    md = (out / "report.md").read_text()
    taken = "the 20 samples taken: 20 of the data's 30 images, at an even stride over its sorted files"
    assert f"4 samples (4 spread over {taken}; the trims are ranked on the other 16)" in md
    assert (
        "- trimmed channels ranked by: dead channels, then mean |activation| × reader weight norm, on 16 "
        f"calibration samples the fidelity gate does not check (it checks the other 4 of {taken})\n"
    ) in md
    # its figures against the gate's thresholds: `:.6g` made 0.9999996 "1" beside "≥ 0.9999999"
    from deployopt.report import render_markdown

    report = json.loads((out / "report.json").read_text())
    report["trim_gate"].update(min_cosine=0.9999999, min_top1=0.999)
    report["fidelity"].update(cosine_min=0.9999996, top1_agreement=0.9995)
    md = render_markdown(report)
    # top-1 in percent, as the gate line, the terminal and verify give it (it was "0.999500")
    assert "- cosine min: 0.9999996 (≥ 0.9999999: FAIL)\n- top-1 agreement: 99.95% (≥ 99.90%: ok)\n" in md
    assert "- trim gate: min cosine ≥ 0.9999999, top-1 agreement ≥ 99.9%, enforced\n" in md


def test_the_gate_options_help_says_what_they_are_checked_on(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "optimize", "--help")
    assert code == 0
    said = " ".join(out.replace("│", " ").split())
    assert "falls below this on any of the fidelity gate's calibration samples (4, spread over" in said
    assert "on any calibration sample" not in said
    assert "of the rows of the fidelity gate's calibration samples" in said


def test_the_fidelity_line_and_gate_print_figures_on_their_side_of_the_thresholds() -> None:
    """--min-top1 0.999 printed "≥ 100%", and a min cosine of 0.999987 failing 0.99999 "1.0000"."""
    from deployopt.cli.optimize_cmd import _fidelity_line
    from deployopt.report import describe_gate

    gate = {"min_cosine": 0.99999, "min_top1": 0.999, "enforced": False}
    assert describe_gate(gate) == (
        "min cosine ≥ 0.99999, top-1 agreement ≥ 99.9%, reported only (--no-fidelity-gate)"
    )
    fid = {"cosine_min": 0.999987, "top1_agreement": 0.98, "samples": 4, "source": "d", "failures": ["x"]}
    line = _fidelity_line(fid, gate).plain
    assert (
        "min cosine 0.999987, top-1 agreement 98%; gate: min cosine ≥ 0.99999, top-1 agreement ≥ 99.9%"
        in line
    )
    fid.update(cosine_min=0.9999999, top1_agreement=0.9995, failures=[])
    line = _fidelity_line(fid, gate).plain
    assert "min cosine 0.9999999, top-1 agreement 99.95%;" in line  # not "1.0000", "100%"
