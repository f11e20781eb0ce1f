"""How much of the per-layer table's miss the non-conv traffic explains, on optimize runs recorded
before the traffic term existed (benchmarks/results/h200_optimize/, conv table alone; no GPU needed).

For each recorded run (lossless and trim of one case) it rebuilds the case's model as bench_optimize.py
did (same builder, seed and batch), counts each measured plan's non-conv bytes with
deployopt.traffic, and fits measured − table = a + s·bytes by least squares over the run's distinct
plans. It prints the spread (SD) of measured − table before and after the line, and s: where a
line in the bytes takes most of the spread away, the table's misses were the ops between the convs.

  python benchmarks/traffic_fit_study.py [--json out.json]

Needs torch for the detector and GhostNet exports (CPU is enough; about a minute).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_optimize as bo

from deployopt.coupling import analyze
from deployopt.fileio import json_name, read_json
from deployopt.model import load_model
from deployopt.traffic import MB, traffic

RESULTS = Path(__file__).resolve().parent / "results" / "h200_optimize"
#: (results file, SM setting as bench_optimize.py's BATCH keys it, cases to take)
RUNS = [
    ("optimize_sms8.json.gz", "8", ("vgg16", "resnet56")),
    ("optimize_sms8_resnet56_confirm.json.gz", "8", ("resnet56",)),
    ("optimize_sms8_yolo.json.gz", "8", ("yolo",)),
    ("optimize_sms8_ghostnet_regnet.json.gz", "8", ("ghostnet",)),
    ("optimize_sms16.json.gz", "16", ("vgg16", "resnet56")),
    ("optimize_full_resnet56_confirm.json", "full", ("resnet56",)),
]


def build(case: str, sms: str, work: Path) -> Path:
    """The model bench_optimize.py optimized for `case` (the pruned one, or GhostNet as published)."""
    path = work / f"{sms}_{case}.onnx"
    if path.exists():
        return path
    if case.startswith(("vgg16_seed", "resnet56_seed")):
        model, seed = case.rsplit("_seed", 1)
        onnx.save(bo.build_models(model, int(seed), bo.BATCH[sms][model])["pruned"], str(path))
    elif case.startswith("yolo_seed"):
        from deployopt.zoo.pruning import random_prune
        from deployopt.zoo.yolo import YOLOV8S_WIDTHS, export_yolo_like

        seed = int(case.rsplit("_seed", 1)[1])
        widths = random_prune(YOLOV8S_WIDTHS, seed=seed)
        export_yolo_like(path, widths=widths, size=bo.YOLO_SIZE, batch=bo.BATCH[sms]["yolo"], head="plain")
    else:
        from deployopt.zoo.ghostnet import export_ghostnet

        source = work / f"{sms}_ghostnet.onnx"
        if not source.exists():
            export_ghostnet(source, batch=bo.BATCH[sms]["ghostnet"], size=bo.GHOSTNET_SIZE)
        if case == "ghostnet":
            return source
        bo.prune_free_groups(source, path, int(case.rsplit("_seed", 1)[1]))
    return path


def fit(run: dict[str, Any], tr: Any) -> dict[str, Any]:
    seen, xs, ys = set(), [], []
    for e in run["evaluations_list"]:
        key = json.dumps(e["plan"], sort_keys=True)
        if e.get("table_us") is None or key in seen:
            continue
        seen.add(key)
        xs.append(tr.bytes(e["plan"]) / MB)
        ys.append(e["median_us"] - e["table_us"])
    x, y = np.asarray(xs), np.asarray(ys)
    a = np.c_[np.ones_like(x), x]
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    return {
        "plans": len(x),
        "mb_range": [float(x.min()), float(x.max())],
        "sd_us": float(y.std()),
        "sd_after_us": float((y - a @ coef).std()),
        "us_per_mb": float(coef[1]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        for name, sms, models in RUNS:
            data = read_json(RESULTS / name)
            file = json_name(name)  # as the run wrote it, whether or not it is stored compressed
            for case, res in data["cases"].items():
                if not case.startswith(models):
                    continue
                analysis = analyze(load_model(build(case, sms, work)).model)
                tr = traffic(analysis, data.get("dtype", "fp16"))
                for mode in ("lossless", "trim"):
                    if mode in res and res[mode].get("evaluations_list"):
                        rows.append({"file": file, "case": case, "mode": mode, **fit(res[mode], tr)})
    print("| file | case | run | plans | non-conv MB | SD of measured − table | after a line in MB | µs/MB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["mb_range"]
        print(
            f"| {r['file']} | {r['case']} | {r['mode']} | {r['plans']} | {lo:.1f}–{hi:.1f} | "
            f"{r['sd_us']:.1f} µs | {r['sd_after_us']:.1f} µs | {r['us_per_mb']:.2f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
