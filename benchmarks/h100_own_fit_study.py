"""Would the h100 target gain from its own fit? It borrows the H200's (deployopt/targets
FIT_BORROWED). Fit the wave model's parameters on the H100's own sweeps of rounds nine to eleven
(default search, benchmarks/results/h100_rounds/default, fitted from generic values as
eval_wave_model.py fits the H200's) and score both fits on round twelve's three H100 measurements,
which neither fit saw, and on the every-engine sweeps.

    python benchmarks/h100_own_fit_study.py [--out benchmarks/results/h100_round12/own_fit_study.json]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_wave_model as ev  # noqa: E402

from deployopt.fileio import write_json  # noqa: E402
from deployopt.targets import get_target  # noqa: E402
from deployopt.waves import fit, generic_params  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DTYPES = ("fp16", "fp32")
#: scored sets: name → folder of one-JSON-per-sweep records (none fitted on)
SCORED = {
    "round 12, first measurement": RESULTS / "h100_round12" / "default",
    "round 12, second measurement": RESULTS / "h100_round12" / "repeats",
    "round 12, third (re-timed)": RESULTS / "h100_round12_retimed" / "default",
    "round 12, every engine": RESULTS / "h100_round12" / "all_engines",
    "rounds 9-11, every engine (shapes fitted on)": RESULTS / "h100_rounds" / "all_engines",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    args = ap.parse_args()
    target = get_target("h100")
    train = ev.load_sweeps(RESULTS / "h100_rounds" / "default")
    start = replace(
        target, params={dt: generic_params(target.compute_capability, dt, target.clock_mhz) for dt in DTYPES}
    )
    own = {dt: fit(ev.fit_points([s for s in train if s["dtype"] == dt]), start, dt) for dt in DTYPES}
    fits = {
        "borrowed (the H200's, shipped)": (target, target.params),
        "own (H100 rounds 9-11)": (replace(target, params=own), own),
    }
    result: dict[str, Any] = {
        "fitted_on": f"{len(train)} sweeps",
        "own_params": {dt: p.to_json() for dt, p in own.items()},
        "scores": {},
    }
    print(f"{'set':<46}{'fit':<32}{'all':>16}{'wave-bound':>18}")
    for name, folder in SCORED.items():
        sweeps = ev.load_sweeps(folder)
        # classes from the shipped fit, as every other table here
        wave = [s for s in sweeps if ev.sweep_class(s, target, target.params[s["dtype"]]) == "wave-bound"]
        for label, (tgt, params) in fits.items():
            every, waves = ev.score(sweeps, tgt, params)["wave"], ev.score(wave, tgt, params)["wave"]
            row = {
                k: {m: d[m] for m in ("pairs", "agreement", "regret")}
                for k, d in (("all", every), ("wave-bound", waves))
            }
            row["sweeps"] = {"all": len(sweeps), "wave-bound": len(wave)}
            result["scores"].setdefault(name, {})[label] = row
            print(
                f"{name:<46}{label:<32}{100 * every['agreement']:7.1f} % / {100 * every['regret']:4.2f} %"
                f"{100 * waves['agreement']:9.1f} % / {100 * waves['regret']:4.2f} %"
            )
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
