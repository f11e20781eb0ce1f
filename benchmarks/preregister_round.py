"""Pre-register a held-out round of wave-model sweeps: before anything is measured, write the size
class (deployopt.waves.size_class) that the shipped H200 fit gives each planned default-search
sweep, the expectation under test, and a copy of the fit, into the round's record folder. Commit
them, then measure (benchmarks/run_round_gpu.sh N default) and score (score_rounds.py --round N).

    python benchmarks/preregister_round.py 11 --shapes by,bz,ca,cb,cc,cd,ce,cf
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_wave_model as ev  # noqa: E402
from staircase_sweeps import SHAPES, sweep_shapes  # noqa: E402

from deployopt.fileio import write_json  # noqa: E402
from deployopt.targets import get_target  # noqa: E402
from deployopt.waves import LAUNCH_BOUND_BELOW, WAVE_BOUND_FROM, WaveParams  # noqa: E402

FIT = ROOT / "deployopt" / "targets" / "fitted" / "h200.json"
EXPECTATION = (
    "wave-bound sweeps, pooled over SM counts: >= 80 % of adjacent-width pairs classified as measured "
    "and <= 1.5 % regret with PyTorch's default cuDNN search; launch-bound and small ones: no better "
    "than a second measurement"
)


def classes(keys: list[str], sms_list: list[int], ks: list[int]) -> dict[str, str]:
    """Sweep id → the size class the shipped fit predicts for it (median of its predicted staircase)."""
    fit = json.loads(FIT.read_text())
    params = {dt: WaveParams.from_json(fit["params"][dt]) for dt in ("fp16", "fp32")}
    target = get_target("h200")
    out: dict[str, str] = {}
    for key in keys:
        shapes, _ = sweep_shapes(key, ks)
        for sms in sms_list:
            for dt in ("fp16", "fp32"):
                sweep = {"shape": shapes[0], "ks": ks, "sms": sms, "dtype": dt}
                out[f"h200_{key}_{dt}_{sms}sm"] = ev.sweep_class(sweep, target, params[dt])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("round", type=int)
    ap.add_argument("--shapes", required=True, help="keys of staircase_sweeps.SHAPES, comma-separated")
    ap.add_argument("--out-channels", default="16:512:16", help="as staircase_sweeps.py sweeps them")
    args = ap.parse_args()
    keys = args.shapes.split(",")
    unknown = [k for k in keys if k not in SHAPES]
    if unknown:
        ap.error(f"unknown shape keys {unknown}")
    a, b, s = (int(v) for v in args.out_channels.split(":"))
    record = ROOT / "benchmarks" / "results" / f"h200_round{args.round}"
    if (record / "prediction.json").exists():
        ap.error(f"{record / 'prediction.json'} exists: a round is pre-registered once")
    got = classes(keys, [8, 16, 132], list(range(a, b + 1, s)))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    record.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FIT, record / f"fit_before_round{args.round}.json")
    write_json(
        record / "prediction.json",
        {
            "what": f"Written and committed before round {args.round} was measured: the size class the "
            f"shipped fit (deployopt.waves.size_class, bounds {LAUNCH_BOUND_BELOW}x and {WAVE_BOUND_FROM}x "
            f"the fixed cost; code of {commit.stdout.strip() or 'unknown'}) gives each planned "
            "default-search sweep, and the expectation under test.",
            "expectation": EXPECTATION,
            "classes": got,
            "counts": {c: sum(v == c for v in got.values()) for c in ("launch-bound", "small", "wave-bound")},
        },
    )
    print(json.dumps({c: sum(v == c for v in got.values()) for c in set(got.values())}))
    for sweep_id, cls in got.items():
        print(f"  {sweep_id}: {cls}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
