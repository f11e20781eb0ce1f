"""What cuDNN's heuristics alone (cudnn.benchmark off) run, against the autotuned sweeps: the
figures of docs/wave_model_evaluation.md's heuristics section, from the committed sweep JSON.

    python benchmarks/heuristic_kernels.py      # prints them, writes benchmarks/results/h200_heuristic.json

1. Latency, width by width: heuristic sweep / the same sweep with cudnn.benchmark (default limit,
   and all engines timed), per dtype and SM count: median, 90th percentile, worst.
2. Kernel choice inside a green context: at 8 and 16 SMs, does a width run the kernel it runs on
   all 132 SMs (same name), the same tile in another variant (deployopt.kernels.parse_tile), or
   another tile?
3. Run to run: does a `_repeat` sweep run the same kernel as its original, wherever both traced one?
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_wave_model as ev  # noqa: E402

from deployopt.fileio import write_json  # noqa: E402
from deployopt.kernels import parse_tile  # noqa: E402

HEURISTIC = ROOT / "benchmarks" / "staircases_heuristic"
OTHERS = {
    "default limit": ROOT / "benchmarks" / "staircases",
    "all engines": ROOT / "benchmarks" / "staircases_all_engines",
}
OUT = ROOT / "benchmarks" / "results" / "h200_heuristic.json"
# helper kernels that come and go with split-K or layout conversion, not the GEMM itself
HELPERS = ("init_device_workspace", "splitKreduce", "convertTensor", "nchwToNhwc", "nhwcToNchw")


def names(point_kernels: list[dict[str, Any]]) -> list[str]:
    return [k["name"] for k in point_kernels]


def main_tile(point_kernels: list[dict[str, Any]]) -> tuple[int, ...] | None:
    gemm = [n for n in names(point_kernels) if not any(h in n for h in HELPERS)]
    return parse_tile(gemm[-1]) if gemm else None


def originals(sweeps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in sweeps if not s["id"].endswith("_repeat")}


def main() -> None:
    heur = ev.load_sweeps(HEURISTIC)
    by_id = {s["id"]: s for s in heur}
    doc: dict[str, Any] = {"ratios": {}, "green_context_kernels": {}, "repeats": {}}

    print("== heuristic latency / cudnn.benchmark latency, width by width ==")
    for label, folder in OTHERS.items():
        other = originals(ev.load_sweeps(folder))
        groups: dict[str, list[float]] = defaultdict(list)
        for sid, s in originals(heur).items():
            twin = other.get(sid)
            if twin is None:
                continue
            m = dict(zip(twin["ks"], twin["measured"]))
            groups[f"{s['dtype']} {s['sms']} SMs"] += [
                h / m[k] for k, h in zip(s["ks"], s["measured"]) if k in m
            ]
        for key in sorted(groups):
            r = np.array(groups[key])
            row = {"widths": len(r), "median": float(np.median(r)), "p90": float(np.percentile(r, 90)),
                   "max": float(r.max())}  # fmt: skip
            doc["ratios"].setdefault(label, {})[key] = row
            print(f"  vs {label:<13} {key:<13} {row['widths']:4d} widths  median {row['median']:.3f}  "
                  f"p90 {row['p90']:.2f}  max {row['max']:.2f}")  # fmt: skip

    print("\n== kernel at 8 / 16 SMs against the kernel at 132 SMs (heuristic sweeps) ==")
    for sid, full in sorted(originals(heur).items()):
        if full["sms"] != 132:
            continue
        for sms in (8, 16):
            small = by_id.get(sid.replace("_132sm", f"_{sms}sm"))
            if small is None:
                continue
            c = doc["green_context_kernels"].setdefault(f"{full['dtype']} {sms} SMs", Counter())
            for a, b in zip(full["kernels"], small["kernels"]):
                if not a or not b:
                    c["untraced"] += 1
                elif names(a) == names(b):
                    c["same kernel"] += 1
                elif main_tile(a) == main_tile(b):
                    c["same tile, other variant"] += 1
                else:
                    c["other tile"] += 1
    for key, c in sorted(doc["green_context_kernels"].items()):
        total = sum(c.values())
        print(f"  {key:<10} " + ", ".join(f"{k} {v} ({100 * v / total:.1f} %)" for k, v in sorted(c.items())))

    same = Counter()
    for rid, rep in by_id.items():
        orig = by_id.get(rid.removesuffix("_repeat")) if rid.endswith("_repeat") else None
        if orig is None:
            continue
        for a, b in zip(orig["kernels"], rep["kernels"]):
            if a and b:
                gemm_a = [n for n in names(a) if not any(h in n for h in HELPERS)]
                gemm_b = [n for n in names(b) if not any(h in n for h in HELPERS)]
                if not gemm_a or not gemm_b:  # the first repeats' tracer missed driver-API launches
                    same["GEMM kernel untraced in one"] += 1
                else:
                    same["same GEMM kernel" if gemm_a == gemm_b else "different"] += 1
    doc["repeats"] = dict(same)
    print(f"\n== original vs _repeat, widths traced in both: {dict(same)} ==")
    doc["green_context_kernels"] = {k: dict(v) for k, v in doc["green_context_kernels"].items()}
    write_json(OUT, doc)
    print(f"written {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    # no options: --help prints this, rather than writing its outputs as a plain run does
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    main()
