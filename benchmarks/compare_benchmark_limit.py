"""PyTorch's cudnn.benchmark times only the first 10 engines of cuDNN's heuristic list
(`torch.backends.cudnn.benchmark_limit`, default 10). How much do the staircases change when it
times all of them (limit 0)? Compares the same sweeps measured both ways on the H200:

    python benchmarks/compare_benchmark_limit.py          # prints a Markdown table

Default-limit sweeps: benchmarks/staircases/ (staircase_sweeps.py); limit-0 sweeps:
benchmarks/results/h200_benchmark_limit0/ (staircase_sweeps.py --benchmark-limit 0; measured in a
later run than the default ones, so run-to-run noise of a few % is in every ratio).
Each sweep is scored with the shipped wave model and the plain 128×128 wave model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_wave_model as ev  # noqa: E402

from deployopt.targets import get_target  # noqa: E402
from deployopt.waves import pair_agreement, regret  # noqa: E402

LIMIT0_DIR = ROOT / "benchmarks" / "results" / "h200_benchmark_limit0"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit0", type=Path, default=LIMIT0_DIR)
    args = ap.parse_args()
    target = get_target("h200")
    default = {s["id"]: s for s in ev.load_sweeps()}
    rows = []
    totals: dict[str, list[float]] = {"default": [0, 0, 0.0, 0], "limit 0": [0, 0, 0.0, 0]}
    for s in ev.load_sweeps(args.limit0):
        d = default.get(s["id"])
        if d is None or d["ks"] != s["ks"]:
            continue
        ratio = [a / b for a, b in zip(s["measured"], d["measured"])]
        cells = []
        for name, sweep in (("default", d), ("limit 0", s)):
            pred = ev.predictions("wave", sweep, target, target.wave_params(sweep["dtype"]))
            agree, counted = pair_agreement(sweep["measured"], pred)
            reg = regret(sweep["ks"], sweep["measured"], pred)
            t = totals[name]
            t[0] += agree
            t[1] += counted
            t[2] += reg * len(sweep["ks"])
            t[3] += len(sweep["ks"])
            cells.append(f"{agree}/{counted}, {100 * reg:.2f} %")
        spread = f"{min(ratio):.2f}–{max(ratio):.2f}"
        name = s["id"].removeprefix("h200_")
        rows.append(f"| {name} | {statistics.median(ratio):.2f} | {spread} | " + " | ".join(cells) + " |")
    print("| sweep | limit 0 / default, median | range | wave model on default | wave model on limit 0 |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    for name, (a, c, r, n) in totals.items():
        print(f"\n{name}: agreement {100 * a / c:.1f} % of {c} pairs, regret {100 * r / n:.2f} %", end="")
    print()


if __name__ == "__main__":
    main()
