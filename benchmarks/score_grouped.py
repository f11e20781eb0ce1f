"""Score the wave model on the grouped-conv record of run_grouped_gpu.sh (held out: no grouped conv
is in the fitted sweeps). Per measured staircase: adjacent-pair agreement (flat < 3 %, step > 8 %,
issue 3's classes) and regret (the width recommended within [0.9·K, K] against the measured best),
beside a FLOPs-proportional model; and the input-channel sweep (C/g = 16 … 28 at g = 4) measured
against predicted, the case `analyze` offers widths for.

    python3 benchmarks/score_grouped.py benchmarks/results/h200_grouped [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deployopt.fileio import read_json, write_json  # noqa: E402
from deployopt.layers import ConvShape  # noqa: E402
from deployopt.targets import get_target  # noqa: E402
from deployopt.waves import pair_agreement, predict, regret  # noqa: E402


def staircase_rows(folder: Path) -> list[dict[str, Any]]:
    """One row per measured staircase JSON (`deployopt staircase --measure --json`)."""
    rows = []
    for path in sorted(folder.glob("g*_k_*.json")):
        doc = read_json(path)
        pts = [p for p in doc["points"] if p.get("measured_us") is not None]
        if len(pts) < 2:
            continue
        ks = [p["out_channels"] for p in pts]
        meas = [float(p["measured_us"]) for p in pts]
        pred = [float(p["predicted_us"]) for p in pts]
        flops = [float(k) for k in ks]  # latency ∝ output channels: the FLOPs model of issue 3
        agree, pairs = pair_agreement(meas, pred)
        fagree, _ = pair_agreement(meas, flops)
        rows.append(
            {
                "sweep": path.stem,
                "widths": f"{ks[0]}:{ks[-1]}",
                "pairs": pairs,
                "agree": agree,
                "agreement": agree / pairs if pairs else None,
                "regret": regret(ks, meas, pred),
                "flops_agreement": fagree / pairs if pairs else None,
                "flops_regret": regret(ks, meas, flops),
                "measured_us": dict(zip(ks, meas)),
                "predicted_us": dict(zip(ks, pred)),
            }
        )
    return rows


def input_rows(folder: Path) -> list[dict[str, Any]]:
    """C/g = 16 … 28 at g = 4, K = 96, 8×·×28×28, 3×3, fp16, 8 SMs: measured (bench) and predicted."""
    target = get_target("h200", sms=8)
    rows = []
    for path in sorted(folder.glob("g4_c*_fp16_8sm_bench.json"), key=lambda p: int(p.name[4:6])):
        cg = int(path.name[4:6])
        doc = read_json(path)
        shape = ConvShape(n=8, c=4 * cg, h=28, w=28, k=96, r=3, s=3, pad=(1, 1), groups=4)
        rows.append(
            {
                "channels_per_group": cg,
                "measured_us": doc["median_us"],
                "iqr_us": doc["iqr_us"],
                "runs": doc["runs"],
                "predicted_us": predict(shape, target, "fp16").predicted_us,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("record", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    doc = {"staircases": staircase_rows(args.record), "input_channels": input_rows(args.record)}
    print(f"{'sweep':<18} {'widths':<9} {'pairs':>5}  wave model       FLOPs")
    for r in doc["staircases"]:
        print(
            f"{r['sweep']:<18} {r['widths']:<9} {r['pairs']:>5}  "
            f"{100 * (r['agreement'] or 0):5.1f} % {100 * r['regret']:5.2f} %  "
            f"{100 * (r['flops_agreement'] or 0):5.1f} % {100 * r['flops_regret']:5.2f} %"
        )
    rows = doc["staircases"]
    if rows:
        pairs = sum(r["pairs"] for r in rows)
        agree = sum(r["agree"] for r in rows)
        mean_regret = sum(r["regret"] for r in rows) / len(rows)
        doc["pooled"] = {"pairs": pairs, "agree": agree, "mean_regret": mean_regret}
        print(f"{'pooled':<18} {'':<9} {pairs:>5}  {100 * agree / pairs:5.1f} % {100 * mean_regret:5.2f} %")
    if doc["input_channels"]:
        print("\nC/g at g = 4 (K 96, 8 SMs, fp16): measured median (IQR) vs predicted, µs")
        for r in doc["input_channels"]:
            print(
                f"  {r['channels_per_group']:>3}: {r['measured_us']:8.1f} ({r['iqr_us']:.1f})  "
                f"{r['predicted_us']:8.1f}"
            )
    if args.json:
        write_json(args.json, doc)


if __name__ == "__main__":
    main()
