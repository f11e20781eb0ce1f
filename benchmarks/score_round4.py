"""Round four's table in docs/wave_model.md: the fit of rounds one to three (commit cf4b182, kept in
benchmarks/results/h200_round4/fit_before_round4.json) scored on round four's sweeps, repeats
excluded, pooled by subset. Predictions of the wave model against measured H200 medians.

    python benchmarks/score_round4.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_wave_model as ev  # noqa: E402

from deployopt.targets import get_target  # noqa: E402
from deployopt.waves import WaveParams  # noqa: E402

RECORD = ROOT / "benchmarks" / "results" / "h200_round4"
FOLDERS = {
    "default_limit": ROOT / "benchmarks" / "staircases",
    "all_engines": ROOT / "benchmarks" / "staircases_all_engines",
    "heuristic": ROOT / "benchmarks" / "staircases_heuristic",
}
NEW = {"ac", "ad", "ae", "af", "ag", "ah"}


def main() -> None:
    ids = json.loads((RECORD / "round4_sweeps.json").read_text())["sweeps"]
    fit = json.loads((RECORD / "fit_before_round4.json").read_text())
    params = {dt: WaveParams.from_json(fit["params"][dt]) for dt in ("fp16", "fp32")}
    target = get_target("h200")
    for mode, folder in FOLDERS.items():
        wanted = {i for i in ids[mode] if not i.endswith("_repeat")}
        sweeps = [s for s in ev.load_sweeps(folder) if s["id"] in wanted]
        groups = {
            "all": sweeps,
            "8 SMs": [s for s in sweeps if s["sms"] == 8],
            "16 SMs": [s for s in sweeps if s["sms"] == 16],
            "132 SMs": [s for s in sweeps if s["sms"] == 132],
            "new shapes ac-ah": [s for s in sweeps if s["id"].split("_")[1] in NEW],
            "w-ab": [s for s in sweeps if s["id"].split("_")[1] not in NEW],
        }
        for dt in ("fp16", "fp32"):
            for sms in (8, 16, 132):
                groups[f"{dt} {sms} SMs"] = [s for s in sweeps if s["dtype"] == dt and s["sms"] == sms]
        print(f"== {mode}: {len(sweeps)} sweeps ==")
        for name, group in groups.items():
            if not group:
                continue
            sc = ev.score(group, target, params)
            w = sc["wave"]
            base = "  ".join(
                f"{m} {100 * sc[m]['agreement']:.1f}/{100 * sc[m]['regret']:.2f}"
                for m in ("tile128", "flops", "constant")
            )
            agree = round(w["agreement"] * w["pairs"])
            print(
                f"  {name:<17} {len(group):3d} sweeps  {agree}/{w['pairs']} pairs"
                f" = {100 * w['agreement']:.2f} % / {100 * w['regret']:.2f} %   {base}"
            )

    # the sweeps measured twice: the model on the first measurement and on the second
    sweeps = ev.load_sweeps(FOLDERS["default_limit"])
    reps = [s for s in sweeps if s["id"] in set(ids["default_limit"]) and s["id"].endswith("_repeat")]
    twins = {r["id"].removesuffix("_repeat") for r in reps}
    for name, group in (("first measurement", [s for s in sweeps if s["id"] in twins]), ("repeat", reps)):
        w = ev.score(group, target, params)["wave"]
        print(
            f"  {name:<17} {len(group):3d} sweeps  {100 * w['agreement']:.1f} % / {100 * w['regret']:.2f} %"
        )


if __name__ == "__main__":
    main()
