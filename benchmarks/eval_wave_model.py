"""Evaluate the wave model against measured staircases (issue 3's acceptance figures).

Reads every sweep JSON under benchmarks/staircases/ (one conv, output channels swept, measured on
a real GPU by benchmarks/staircase_sweeps.py), fits the model's few parameters per dtype on a
subset of shapes, and scores on the rest and on all sweeps:
  agreement — adjacent width pairs measured flat (< 3 %) or a step (> 8 %) that the model classifies
              the same way (flat / up / down, same thresholds);
  regret    — for every swept K, measured latency of the width the model recommends within
              [0.9·K, K] over the measured best in that range, minus one (mean).
Baselines: FLOPs-proportional, constant, and a plain 128×128-tile wave model (waves only).

    python benchmarks/eval_wave_model.py                  # ~2 min on 2 cores: print, write the JSON
    python benchmarks/eval_wave_model.py --write-fitted   # the same, and refit on all sweeps and write
                                                          # deployopt/targets/fitted/h200.json
    python benchmarks/eval_wave_model.py --sweeps benchmarks/staircases_all_engines \
        --out benchmarks/eval_wave_model_all_engines.json # the sweeps timed with all cuDNN engines
The JSON is written plain; the committed results are gzip-compressed (eval_wave_model.json.gz,
…_all_engines.json.gz, …_heuristic.json.gz: records of 300 KB or more, benchmarks/results/README.md).
Every run also scores the shipped fit (deployopt/targets/fitted/, fitted on benchmarks/staircases/)
on the sweeps it reads: on another folder, that is a test on data the shipped fit never saw.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from deployopt.fileio import json_name, read_json, write_json  # noqa: E402
from deployopt.kernels import parse_tile  # noqa: E402
from deployopt.layers import ConvShape  # noqa: E402
from deployopt.targets import FITTED_DIR, get_target  # noqa: E402
from deployopt.waves import (  # noqa: E402
    WaveParams,
    _evaluate,
    fit,
    generic_params,
    pair_agreement,
    regret,
    regret_per_width,
    size_class,
)

TIE_ALIGN = 32  # the alignment tie-break studied by tie_break_study

SWEEP_DIR = ROOT / "benchmarks" / "staircases"
RESULT = ROOT / "benchmarks" / "eval_wave_model.json"


def load_sweeps(folder: Path = SWEEP_DIR) -> list[dict[str, Any]]:
    """Every sweep file, with its id (file stem) and ConvShape per point; points sorted by K."""
    sweeps = []
    found = [p for ext in ("json", "json.gz") for p in folder.glob(f"*.{ext}")]  # .gz: the staircases*/
    for path in sorted(found, key=json_name):
        doc = read_json(path)
        sh = doc["shape"]
        st = sh.get("stride", 1)
        pad = sh.get("pad", sh["r"] // 2)
        base = ConvShape(
            n=sh["n"],
            c=sh["c"],
            h=sh["h"],
            w=sh["w"],
            k=doc["points"][0]["out_channels"],
            r=sh["r"],
            s=sh.get("s", sh["r"]),
            stride=tuple(st) if isinstance(st, list) else (st, st),
            pad=tuple(pad) if isinstance(pad, list) else (pad, pad),
            groups=sh.get("groups", 1),
        )
        pts = sorted(doc["points"], key=lambda p: p["out_channels"])
        sweeps.append(
            {
                "id": json_name(path).removesuffix(".json"),
                "path": path.resolve().relative_to(ROOT).as_posix()
                if path.resolve().is_relative_to(ROOT)
                else str(path),
                "dtype": doc["dtype"],
                "sms": int(doc["sms"]),
                "shape": base,
                "ks": [p["out_channels"] for p in pts],
                "measured": [float(p["median_us"]) for p in pts],
                "kernels": [p.get("kernels") or [] for p in pts],
            }
        )
    return sweeps


def shape_key(sweep: dict[str, Any]) -> str:
    s: ConvShape = sweep["shape"]
    return f"n{s.n}c{s.c}h{s.h}w{s.w}r{s.r}st{s.stride[0]}"


def split(sweeps: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    """Fit on every other conv shape (sorted), test on the rest: a held-out sweep never shares its
    shape with a fitted one, in any dtype or SM setting."""
    keys = sorted({shape_key(s) for s in sweeps})
    train = set(keys[0::2])
    return train, set(keys) - train


def fit_points(sweeps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"id": s["id"], "shape": s["shape"].with_out_channels(k), "measured_us": m, "sms": s["sms"]}
        for s in sweeps
        for k, m in zip(s["ks"], s["measured"])
    ]


def sweep_class(sweep: dict[str, Any], target: Any, params: WaveParams) -> str:
    """The sweep's size class (deployopt.waves.size_class) under `params`: that of its median
    predicted latency, so a whole sweep is launch-bound, small or wave-bound, as pre-registered."""
    return size_class(statistics.median(predictions("wave", sweep, target, params)), params)


def predictions(model: str, sweep: dict[str, Any], target: Any, params: WaveParams | None) -> list[float]:
    shapes = [sweep["shape"].with_out_channels(k) for k in sweep["ks"]]
    if model == "wave":
        return [_evaluate(s, target, params, sweep["sms"]).predicted_us for s in shapes]
    if model == "flops":
        return [float(s.flops) for s in shapes]
    if model == "constant":
        return [1.0 for _ in shapes]
    if model == "tile128":
        return [
            float(math.ceil(math.ceil(s.gemm[0] / 128) * math.ceil(s.gemm[1] / 128) / sweep["sms"]))
            for s in shapes
        ]
    raise ValueError(model)


MODELS = ("wave", "flops", "constant", "tile128")


def score(
    sweeps: list[dict[str, Any]], target: Any, params_by_dtype: dict[str, WaveParams]
) -> dict[str, dict[str, Any]]:
    """Per model: per-sweep agreement/regret, and totals (pairs pooled; regret averaged over K)."""
    out: dict[str, dict[str, Any]] = {}
    for model in MODELS:
        rows = []
        for s in sweeps:
            pred = predictions(model, s, target, params_by_dtype.get(s["dtype"]))
            agree, counted = pair_agreement(s["measured"], pred)
            rows.append(
                {
                    "sweep": s["id"],
                    "dtype": s["dtype"],
                    "sms": s["sms"],
                    "agree": agree,
                    "pairs": counted,
                    "agreement": agree / counted if counted else None,
                    "regret": regret(s["ks"], s["measured"], pred),
                    "points": len(s["ks"]),
                }
            )
        out[model] = {"sweeps": rows, **totals(rows)}
    return out


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    pairs = sum(r["pairs"] for r in rows)
    npts = sum(r["points"] for r in rows)
    return {
        "pairs": pairs,
        "agreement": sum(r["agree"] for r in rows) / pairs if pairs else None,
        "regret": sum(r["regret"] * r["points"] for r in rows) / npts if npts else None,
    }


def by_setting(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(f"{r['dtype']} {r['sms']} SMs", []).append(r)
    return {k: totals(v) for k, v in sorted(groups.items())}


def fmt(t: dict[str, Any]) -> str:
    a = "  n/a " if t["agreement"] is None else f"{100 * t['agreement']:5.1f}%"
    return f"{a} / {100 * t['regret']:4.2f}%"


def report(title: str, scores: dict[str, dict[str, Any]]) -> dict[str, Any]:
    print(f"\n== {title}: agreement / regret ({scores['wave']['pairs']} pairs) ==")
    print(f"{'setting':<16}" + "".join(f"{m:>18}" for m in MODELS))
    settings = by_setting(scores["wave"]["sweeps"]).keys()
    per = {m: by_setting(scores[m]["sweeps"]) for m in MODELS}
    for key in settings:
        print(f"{key:<16}" + "".join(f"{fmt(per[m][key]):>18}" for m in MODELS))
    print(f"{'all':<16}" + "".join(f"{fmt(scores[m]):>18}" for m in MODELS))
    return {
        m: {
            "overall": {k: scores[m][k] for k in ("pairs", "agreement", "regret")},
            "by_setting": per[m],
            "sweeps": scores[m]["sweeps"],
        }
        for m in MODELS
    }


def noise_ceiling(sweeps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each `_repeat` sweep scored as a 'model' of its original (and back): how well a second
    measurement of the same sweep agrees with the first — the ceiling for any width model."""
    by_id = {s["id"]: s for s in sweeps}
    rows = []
    for rid, rep in sorted(by_id.items()):
        orig = by_id.get(rid.removesuffix("_repeat")) if rid.endswith("_repeat") else None
        if orig is None or orig["ks"] != rep["ks"]:
            continue
        for a, b in ((orig, rep), (rep, orig)):
            agree, counted = pair_agreement(a["measured"], b["measured"])
            rows.append(
                {
                    "measured": a["id"],
                    "as_model": b["id"],
                    "agree": agree,
                    "pairs": counted,
                    "agreement": agree / counted if counted else None,
                    "regret": regret(a["ks"], a["measured"], b["measured"]),
                }
            )
    return rows


ORACLE_FACTORS = (0.75, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 1.35)


def alignment_oracle(
    sweeps: list[dict[str, Any]], target: Any, params: dict[str, WaveParams]
) -> dict[str, Any]:
    """An upper bound for alignment rules: per sweep, the model's latencies times one factor per
    K mod 64 (0, 16, 32, 48; the first fixed at 1), each factor chosen *on that sweep's own
    measurements* to maximise agreement (coordinate search over ORACLE_FACTORS). No rule that
    must carry across shapes can do better than this in-sample choice."""
    rows = []
    for s in sweeps:
        base = predictions("wave", s, target, params[s["dtype"]])
        model_agree, counted = pair_agreement(s["measured"], base)
        best, factors = model_agree, [1.0, 1.0, 1.0, 1.0]
        for _ in range(3):
            for j in range(1, 4):
                for g in ORACLE_FACTORS:
                    trial = [*factors[:j], g, *factors[j + 1 :]]
                    pred = [b * trial[(k % 64) // 16] for b, k in zip(base, s["ks"])]
                    agree, _ = pair_agreement(s["measured"], pred)
                    if agree > best:
                        best, factors = agree, trial
        rows.append({"sweep": s["id"], "dtype": s["dtype"], "sms": s["sms"], "model": model_agree,
                     "oracle": best, "pairs": counted, "factors": factors})  # fmt: skip

    def pooled(rs: list[dict[str, Any]]) -> dict[str, float]:
        n = sum(r["pairs"] for r in rs) or 1
        return {"model": sum(r["model"] for r in rs) / n, "oracle": sum(r["oracle"] for r in rs) / n}

    settings: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        settings.setdefault(f"{r['dtype']} {r['sms']} SMs", []).append(r)
    return {
        "overall": pooled(rows),
        "by_setting": {k: pooled(v) for k, v in sorted(settings.items())},
        "sweeps": rows,
    }


def tie_break_study(
    sweeps: list[dict[str, Any]], target: Any, params: dict[str, WaveParams], cap: int = TIE_ALIGN
) -> dict[str, Any]:
    """Regret of every model when predicted ties go to the wider width (issue 3's figure, what
    every table reports) and when they go first to the better-aligned one (powers of two up to
    `cap`, then wider): how much of the regret an alignment prior alone removes, for the model and
    for the baselines alike. Agreement does not change (the predictions do not)."""
    out: dict[str, Any] = {}
    for model in MODELS:
        rows = []
        for s in sweeps:
            pred = predictions(model, s, target, params.get(s["dtype"]))
            rows.append(
                {
                    "dtype": s["dtype"],
                    "sms": s["sms"],
                    "points": len(s["ks"]),
                    "wider": regret(s["ks"], s["measured"], pred),
                    "aligned": regret(s["ks"], s["measured"], pred, prefer_aligned=cap),
                }
            )

        def mean(rs: list[dict[str, Any]], key: str) -> float:
            n = sum(r["points"] for r in rs)
            return sum(r[key] * r["points"] for r in rs) / n if n else float("nan")

        groups: dict[str, list[dict[str, Any]]] = {"all": rows}
        for r in rows:
            groups.setdefault(f"{r['dtype']} {r['sms']} SMs", []).append(r)
        out[model] = {k: {"ties_wider": mean(v, "wider"), f"ties_aligned{cap}": mean(v, "aligned")}
                      for k, v in groups.items()}  # fmt: skip
    return out


def regret_sources(
    sweeps: list[dict[str, Any]], target: Any, params: dict[str, WaveParams]
) -> dict[str, Any]:
    """Where the model's regret comes from: the share of it (summed over every K) at recommended
    widths that are multiples of 64, and at those of them where the measured kernel had a 64-row
    tile (64×128, 64×64: `parse_tile` on the traced kernel name). With PyTorch's default search
    cuDNN ran such tiles at multiples of 64 on some shapes, slower than its pick one width away."""
    groups: dict[str, dict[str, float]] = {}
    for s in sweeps:
        pred = predictions("wave", s, target, params[s["dtype"]])
        kernels = dict(zip(s["ks"], s["kernels"]))
        g = groups.setdefault(
            f"{s['dtype']} {s['sms']} SMs", {"points": 0, "regret": 0.0, "at64": 0.0, "at64_m64": 0.0}
        )
        for rec, r in regret_per_width(s["ks"], s["measured"], pred):
            g["points"] += 1
            g["regret"] += r
            if rec % 64 == 0:
                g["at64"] += r
                tile = parse_tile(kernels[rec][0]["name"]) if kernels[rec] else None
                if tile is not None and tile[0] == 64:
                    g["at64_m64"] += r
    return {
        key: {
            "regret": g["regret"] / g["points"],
            "share_at_multiples_of_64": g["at64"] / g["regret"] if g["regret"] else 0.0,
            "share_there_with_64_row_tiles": g["at64_m64"] / g["regret"] if g["regret"] else 0.0,
        }
        for key, g in sorted(groups.items())
    }


def _fit_without(job: tuple[list[dict[str, Any]], str, Any, list[str]]) -> dict[str, WaveParams]:
    """Parameters per dtype fitted on every sweep except those of one shape (a worker process)."""
    sweeps, key, start, dtypes = job
    rest = [s for s in sweeps if shape_key(s) != key]
    return {dt: fit(fit_points([s for s in rest if s["dtype"] == dt]), start, dt) for dt in dtypes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweeps", type=Path, default=SWEEP_DIR)
    ap.add_argument("--out", type=Path, default=RESULT)
    ap.add_argument("--target", default="h200")
    ap.add_argument("--write-fitted", action="store_true", help="refit on all sweeps, write the shipped fit")
    ap.add_argument("--per-sweep", action="store_true", help="print every sweep's figures")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for leave-one-shape-out")
    args = ap.parse_args()

    sweeps = load_sweeps(args.sweeps)
    if not sweeps:
        sys.exit(f"no sweeps under {args.sweeps}")
    if args.write_fitted and args.sweeps.resolve() != SWEEP_DIR.resolve():
        sys.exit(f"--write-fitted refits the shipped parameters from {SWEEP_DIR} only")
    target = get_target(args.target)
    dtypes = sorted({s["dtype"] for s in sweeps})
    # every fit starts from generic values, not from the fit shipped last time: reproducible
    start = replace(
        target, params={dt: generic_params(target.compute_capability, dt, target.clock_mhz) for dt in dtypes}
    )
    train_keys, test_keys = split(sweeps)
    train = [s for s in sweeps if shape_key(s) in train_keys]
    test = [s for s in sweeps if shape_key(s) in test_keys]

    split_params = {dt: fit(fit_points([s for s in train if s["dtype"] == dt]), start, dt) for dt in dtypes}
    all_params = {}
    for dt in dtypes:
        chosen = [s for s in sweeps if s["dtype"] == dt]
        p = fit(fit_points(chosen), start, dt, name=f"{args.target}-{dt} fit")
        all_params[dt] = replace(
            p,
            source=f"fitted on {sum(len(s['ks']) for s in chosen)} measured points of {len(chosen)} "
            f"{args.target} cuDNN sweeps (benchmarks/staircases/, benchmarks/eval_wave_model.py)",
        )
    doc: dict[str, Any] = {
        "sweeps": [s["id"] for s in sweeps],
        "train_shapes": sorted(train_keys),
        "test_shapes": sorted(test_keys),
        "thresholds": {"flat_below": 0.03, "step_above": 0.08, "trim": 0.1},
        "params_fit_on_train": {dt: p.to_json() for dt, p in split_params.items()},
        "params_fit_on_all": {dt: p.to_json() for dt, p in all_params.items()},
    }
    doc["held_out"] = report("held-out shapes (fit on the other half)", score(test, target, split_params))
    doc["train"] = report("fitted shapes (fit on them)", score(train, target, split_params))
    # the same with the halves swapped: the harder shapes held out
    swap_params = {dt: fit(fit_points([s for s in test if s["dtype"] == dt]), start, dt) for dt in dtypes}
    doc["held_out_swapped"] = report(
        "held-out shapes, halves swapped (fit on the first held-out half)", score(train, target, swap_params)
    )
    # leave-one-shape-out: each shape scored with parameters fitted on the other shapes only
    # (one fit per shape and dtype: run in parallel, one process per core)
    keys = sorted(train_keys | test_keys)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        fitted = list(pool.map(_fit_without, [(sweeps, key, start, dtypes) for key in keys]))
    loso_rows: dict[str, list[dict[str, Any]]] = {m: [] for m in MODELS}
    for key, params in zip(keys, fitted):
        held = [s for s in sweeps if shape_key(s) == key]
        for m, res in score(held, target, params).items():
            loso_rows[m].extend(res["sweeps"])
    doc["leave_one_shape_out"] = report(
        f"leave-one-shape-out (each shape fitted on the other {len(keys) - 1})",
        {m: {"sweeps": rows, **totals(rows)} for m, rows in loso_rows.items()},
    )
    doc["all_fit_all"] = report("all sweeps, fit on all of them", score(sweeps, target, all_params))
    # the fit in deployopt/targets/fitted/ (with --write-fitted: the one about to be written there)
    shipped = all_params if args.write_fitted else {dt: target.wave_params(dt) for dt in dtypes}
    doc["shipped_fit"] = {
        "params": {dt: p.to_json() for dt, p in shipped.items()},
        **report("the shipped fit as it is (not refitted)", score(sweeps, target, shipped)),
    }
    doc["alignment_oracle"] = alignment_oracle(sweeps, target, shipped)
    print("\n== alignment oracle: the shipped fit × per-sweep factors by K mod 64, chosen in-sample ==")
    for key, v in [
        *doc["alignment_oracle"]["by_setting"].items(),
        ("all", doc["alignment_oracle"]["overall"]),
    ]:
        print(f"  {key:<16} model {100 * v['model']:5.1f}%  oracle {100 * v['oracle']:5.1f}%")
    doc["tie_break_study"] = tie_break_study(sweeps, target, shipped)
    print(f"\n== regret, ties to the wider width → to the better-aligned one (≤ {TIE_ALIGN}), shipped fit ==")
    for model, groups in doc["tie_break_study"].items():
        a = groups["all"]
        print(f"  {model:<10} {100 * a['ties_wider']:.2f} % → {100 * a[f'ties_aligned{TIE_ALIGN}']:.2f} %")
    doc["regret_sources"] = regret_sources(sweeps, target, shipped)
    print(
        "\n== the shipped fit's regret: share at recommended multiples of 64, and there with 64-row tiles =="
    )
    for key, v in doc["regret_sources"].items():
        print(
            f"  {key:<16} regret {100 * v['regret']:.2f} %"
            f"  at multiples of 64 {100 * v['share_at_multiples_of_64']:.0f} %"
            f"  with 64-row tiles {100 * v['share_there_with_64_row_tiles']:.0f} %"
        )
    doc["noise_ceiling"] = noise_ceiling(sweeps)
    if doc["noise_ceiling"]:
        print("\n== noise ceiling: a repeated full-GPU sweep as the model of its original ==")
        for r in doc["noise_ceiling"]:
            print(f"  {r['measured']:<28} {r['agree']:>3}/{r['pairs']:<3} regret {100 * r['regret']:.2f}%")
    if args.per_sweep:
        for r in doc["all_fit_all"]["wave"]["sweeps"]:
            print(f"  {r['sweep']:<28} {r['agree']:>3}/{r['pairs']:<3} regret {100 * r['regret']:.2f}%")
    write_json(args.out, doc)
    print(f"\nwritten {args.out}")
    if args.write_fitted:
        path = FITTED_DIR / f"{args.target}.json"
        fitted = {
            "gpu": args.target,
            "how": "python benchmarks/eval_wave_model.py --write-fitted (deployopt.waves.fit on all sweeps)",
            "sweeps": [s["path"] for s in sweeps],  # as committed: benchmarks/staircases/NAME.json.gz
            "params": {dt: p.to_json() for dt, p in all_params.items()},
        }
        if keep_depthwise(fitted, json.loads(path.read_text()) if path.exists() else {}):
            print(
                "kept the depthwise terms of the file it replaces"
                " (eval_depthwise.py --write-fitted refits them)"
            )
        write_json(path, fitted)
        print(f"written {path}")


def keep_depthwise(fitted: dict[str, Any], before: dict[str, Any]) -> bool:
    """Carry the depthwise path's terms (dw_*, fitted by eval_depthwise.py on its own sweeps) from
    the shipped file into the new GEMM fit: this fit does not touch them, and without this they fell
    back to generic start values. True when there were terms to keep."""
    kept = False
    for dt, params in fitted["params"].items():
        old = before.get("params", {}).get(dt, {})
        dw = {k: v for k, v in old.items() if k.startswith("dw_")}
        params.update(dw)
        kept |= bool(dw)
    for key in ("depthwise_sweeps", "depthwise_how"):
        if key in before:
            fitted[key] = before[key]
    return kept


if __name__ == "__main__":
    main()
