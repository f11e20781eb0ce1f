"""How far could any width model get on issue 3's pair agreement from what the wave model knows?

Issue 3 asks for ≥ 80 % agreement (adjacent measured width pairs, flat < 3 % / step > 8 %, that the
model classifies the same way; deployopt.waves.classify_change). This trains learned classifiers to
predict each counted pair's measured class (flat / up / down) from the features a width model may use —
the conv's shape, dtype, SMs, K and its residues mod 32…256, and the wave model's own predictions,
family, tile, waves and size — with 10-fold cross-validation grouped by conv shape
(eval_wave_model.shape_key, fixed fold seed), so every pair is predicted by a classifier that never
saw its shape in any dtype or SM setting. A width model is a function of the same features, and a
classifier trained for exactly this score is a practical bound on what such a model reaches (an
estimate, not a proof): if it stays below 80 %, the misses are cuDNN's per-shape kernel picks and
run-to-run noise rather than a missing term in the model.

Compared, by subset (SMs, dtype, size class, the fitted staircases vs held-out rounds 7–10):
  wave model          the shipped fit (deployopt/targets/fitted/h200.json; fitted on the staircases
                      folder, so on that subset it is in-sample and the classifiers are not);
  majority            each training fold's most common class (flat everywhere);
  RF shape+K          a random forest on the shape, dtype, SMs and K features alone;
  RF shape+K+wave     the same plus the wave model's features (the bound quoted: its agreement and its
                      gain over the wave model get a 95 % shape-bootstrap interval, 2000 resamples);
  HGB shape+K+wave    histogram gradient boosting on the same features.
On the pairs whose sweep was measured twice (benchmarks/staircases `_repeat` sweeps and the
rounds' repeats/ folders): a second measurement as the "model" of the first, raw (a 3–8 % change
agrees with nothing) and snapped (a 3–8 % change counted as the nearer class, split at 5.5 %) —
the ceiling set by run-to-run noise.

Sweeps: benchmarks/staircases (no `_repeat` ids) and benchmarks/results/h200_round{7,8,9,10}/
default_limit, through eval_wave_model.load_sweeps (444 default-search H200 sweeps, 11920 counted
pairs). Needs scikit-learn, which deployopt does not depend on (do not add it to pyproject):

    python3 -m venv /tmp/cb && /tmp/cb/bin/pip install -e . scikit-learn
    /tmp/cb/bin/python benchmarks/classifier_bound.py          # print, write the JSON
or install it into the project venv for the run and uninstall it after:
    .venv/bin/pip install scikit-learn && .venv/bin/python benchmarks/classifier_bound.py
About 2 minutes on 2 cores (forests and boosting use at most 2 threads).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_wave_model as ev  # noqa: E402

from deployopt.errors import DeployoptError  # noqa: E402
from deployopt.fileio import check_output_dir, resolve_output, write_json  # noqa: E402
from deployopt.targets import get_target  # noqa: E402
from deployopt.waves import FLAT_BELOW, STEP_ABOVE, _evaluate, classify_change, size_class  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "classifier_bound.json"
SWEEP_SOURCES = [("staircases", ROOT / "benchmarks" / "staircases")] + [
    (f"r{n}", ROOT / "benchmarks" / "results" / f"h200_round{n}" / "default_limit") for n in (7, 8, 9, 10)
]
# where each source's second measurements are (round 7 has none)
REPEAT_SOURCES = [("staircases", ROOT / "benchmarks" / "staircases")] + [
    (f"r{n}", ROOT / "benchmarks" / "results" / f"h200_round{n}" / "repeats") for n in (8, 9, 10)
]
CLASSES = ("flat", "up", "down")
SNAP_AT = (FLAT_BELOW + STEP_ABOVE) / 2  # a 3–8 % change goes to the nearer of flat and step
N_JOBS = 2  # the benchmark machine's cores are shared
FOLDS = 10
BOOTSTRAP = 2000

SHAPE_K = ["n", "c", "h", "w", "r", "stride", "p", "q", "M", "depth", "k0", "k1", "k1m32", "k1m64", "k1m128",
           "k1m256", "fp16", "sms", "logM", "logdepth", "logk1", "logflops", "cmod32", "cmod64", "Mmod128",
           "Mtiles128_per_sm"]  # fmt: skip
WAVE = ["pred0", "pred1", "pred_r", "pred_med", "pred_ratio_fixed", "pred1_ratio_fixed", "tm0", "tn0", "tm1",
        "tn1", "waves0", "waves1", "tail0", "tail1", "blocks0", "blocks1", "bps1", "aligned0", "aligned1",
        "fam0", "fam1", "logpred1"]  # fmt: skip
# name → (estimator kind, features); BOUND is the one the bootstrap interval is for
CLASSIFIERS = {
    "RF shape+K": ("RF", SHAPE_K),
    "RF shape+K+wave": ("RF", SHAPE_K + WAVE),
    "HGB shape+K+wave": ("HGB", SHAPE_K + WAVE),
}
BOUND = "RF shape+K+wave"


def load(sources: list[tuple[str, Path]], repeats: bool) -> list[dict[str, Any]]:
    """The sweeps of every source folder, tagged with it: first measurements, or only `_repeat` ones."""
    out = []
    for tag, folder in sources:
        try:
            found = ev.load_sweeps(folder) if folder.is_dir() else []
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            sys.exit(f"cannot read the sweeps under {folder}: {exc!r}")
        for s in found:
            if s["id"].endswith("_repeat") == repeats:
                s["src"] = tag
                out.append(s)
    return out


def pair_rows(
    sweeps: list[dict[str, Any]], repeats: dict[tuple[str, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """One row per counted adjacent pair (measured flat or a step): its class, the wave model's class,
    the repeat's change (None without a repeat of the same widths) and the features a model may use."""
    target = get_target("h200")
    params = {dt: target.wave_params(dt) for dt in sorted({s["dtype"] for s in sweeps})}
    fam_names = sorted({f.name for p in params.values() for f in p.families})
    rows = []
    for s in sweeps:
        sh, par = s["shape"], params[s["dtype"]]
        preds = [_evaluate(sh.with_out_channels(k), target, par, s["sms"]) for k in s["ks"]]
        med = statistics.median(p.predicted_us for p in preds)
        rep_sweep = repeats.get((s["src"], s["id"]))
        rep = rep_sweep["measured"] if rep_sweep and rep_sweep["ks"] == s["ks"] else None
        m = s["measured"]
        for i in range(len(m) - 1):
            label = classify_change(m[i], m[i + 1])
            if label == "between":
                continue
            a, b = preds[i], preds[i + 1]
            k0, k1 = s["ks"][i], s["ks"][i + 1]
            gm, _, depth = sh.with_out_channels(k1).gemm
            rows.append({
                "shape_key": ev.shape_key(s), "src": s["src"], "dtype": s["dtype"], "sms": s["sms"],
                "size_class": size_class(med, par), "label": label,
                "wave_class": classify_change(a.predicted_us, b.predicted_us),
                "rep_class": classify_change(rep[i], rep[i + 1]) if rep else None,
                "rep_r": rep[i + 1] / rep[i] - 1 if rep else None,
                "n": sh.n, "c": sh.c, "h": sh.h, "w": sh.w, "r": sh.r, "stride": sh.stride[0], "p": sh.p,
                "q": sh.q, "M": gm, "depth": depth, "k0": k0, "k1": k1, "k1m32": k1 % 32, "k1m64": k1 % 64,
                "k1m128": k1 % 128, "k1m256": k1 % 256, "fp16": int(s["dtype"] == "fp16"),
                "pred0": a.predicted_us, "pred1": b.predicted_us,
                "pred_r": b.predicted_us / a.predicted_us - 1,
                "pred_med": med, "pred_ratio_fixed": med / par.fixed_us,
                "pred1_ratio_fixed": b.predicted_us / par.fixed_us,
                "tm0": a.tile[0], "tn0": a.tile[1], "tm1": b.tile[0], "tn1": b.tile[1],
                "waves0": a.waves, "waves1": b.waves, "tail0": a.tail_fill, "tail1": b.tail_fill,
                "blocks0": a.blocks, "blocks1": b.blocks, "bps1": b.blocks_per_sm,
                "aligned0": int(a.aligned), "aligned1": int(b.aligned),
                "fam0": fam_names.index(a.family) if a.family in fam_names else -1,
                "fam1": fam_names.index(b.family) if b.family in fam_names else -1,
                "logM": math.log2(gm), "logdepth": math.log2(depth), "logk1": math.log2(k1),
                "logflops": math.log2(2 * gm * k1 * depth), "logpred1": math.log2(b.predicted_us),
                "cmod32": sh.c % 32, "cmod64": sh.c % 64, "Mmod128": gm % 128,
                "Mtiles128_per_sm": math.ceil(gm / 128) / s["sms"],
            })  # fmt: skip
    return rows


def snapped(r: float | None) -> str | None:
    """A change's class with no 'between': under SNAP_AT flat, else a step its way (None: no repeat)."""
    if r is None:
        return None
    return "flat" if abs(r) < SNAP_AT else ("up" if r > 0 else "down")


SUBSETS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "all": lambda r: True,
    "8 SMs": lambda r: r["sms"] == 8,
    "16 SMs": lambda r: r["sms"] == 16,
    "132 SMs": lambda r: r["sms"] == 132,
    "fp16": lambda r: r["dtype"] == "fp16",
    "fp32": lambda r: r["dtype"] == "fp32",
    "launch-bound": lambda r: r["size_class"] == "launch-bound",
    "small": lambda r: r["size_class"] == "small",
    "wave-bound": lambda r: r["size_class"] == "wave-bound",
    "fitted set (staircases)": lambda r: r["src"] == "staircases",
    "held-out rounds 7-10": lambda r: r["src"] != "staircases",
    "fp16, wider K mult of 32": lambda r: r["dtype"] == "fp16" and r["k1"] % 32 == 0,
    "fp16, wider K odd mult of 16": lambda r: r["dtype"] == "fp16" and r["k1"] % 32 == 16,
}


def fold_ids(groups: list[str], seed: int) -> Any:
    """Fold of each pair: its shape's place in a seeded shuffle of the shapes, modulo FOLDS."""
    import numpy as np

    keys = sorted(set(groups))
    np.random.default_rng(seed).shuffle(keys)
    fold = {g: i % FOLDS for i, g in enumerate(keys)}
    return np.array([fold[g] for g in groups])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=RESULT)
    ap.add_argument("--seed", type=int, default=0, help="fold shuffle, model and bootstrap seed")
    args = ap.parse_args()
    try:
        check_output_dir(args.out.parent)
        resolve_output(args.out)
    except DeployoptError as exc:
        sys.exit(str(exc))
    try:  # lazily: deployopt does not depend on scikit-learn, only this benchmark does
        import numpy as np
        from sklearn import __version__ as sklearn_version
        from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
        from threadpoolctl import threadpool_limits
    except ImportError:
        sys.exit("pip install scikit-learn: this benchmark needs it; deployopt does not")

    t0 = time.time()
    sweeps = load(SWEEP_SOURCES, repeats=False)
    if not sweeps:
        sys.exit(f"no sweeps under {SWEEP_SOURCES[0][1]}")
    repeats = {(s["src"], s["id"].removesuffix("_repeat")): s for s in load(REPEAT_SOURCES, repeats=True)}
    rows = pair_rows(sweeps, repeats)
    y = np.array([CLASSES.index(r["label"]) for r in rows])
    groups = [r["shape_key"] for r in rows]
    fid = fold_ids(groups, args.seed)

    def make(kind: str) -> Any:
        if kind == "HGB":
            return HistGradientBoostingClassifier(
                max_iter=300,
                learning_rate=0.05,
                max_leaf_nodes=15,
                min_samples_leaf=20,
                l2_regularization=1.0,
                random_state=args.seed,
            )
        return RandomForestClassifier(
            n_estimators=300, min_samples_leaf=3, max_features="sqrt", n_jobs=N_JOBS, random_state=args.seed
        )

    # every pair predicted by models fitted on the other shapes' folds
    correct: dict[str, Any] = {"wave model": np.array([r["wave_class"] == r["label"] for r in rows])}
    majority = np.empty(len(y), dtype=int)
    for f in range(FOLDS):
        majority[fid == f] = np.bincount(y[fid != f], minlength=len(CLASSES)).argmax()
    correct["majority"] = majority == y
    preds: dict[str, Any] = {}
    with threadpool_limits(N_JOBS):
        for name, (kind, cols) in CLASSIFIERS.items():
            x = np.array([[float(r[c]) for c in cols] for r in rows])
            pred = np.empty(len(y), dtype=int)
            for f in range(FOLDS):
                train, test = fid != f, fid == f
                pred[test] = make(kind).fit(x[train], y[train]).predict(x[test])
            preds[name] = pred
            correct[name] = pred == y
            print(f"{name}: {100 * correct[name].mean():.1f} % ({time.time() - t0:.0f} s)", file=sys.stderr)

    has_rep = np.array([r["rep_r"] is not None for r in rows])
    rep_ok = {
        "repeat": np.array([r["rep_class"] == r["label"] for r in rows]),
        "repeat snapped": np.array([snapped(r["rep_r"]) == r["label"] for r in rows]),
    }
    masks = {name: np.array([fn(r) for r in rows]) for name, fn in SUBSETS.items()}
    table = {
        name: {"pairs": int(mk.sum()), **{m: float(ok[mk].mean()) for m, ok in correct.items()}}
        for name, mk in masks.items()
        if mk.any()
    }
    rep_table = {
        name: {
            "pairs": int((mk & has_rep).sum()),
            **{m: float(ok[mk & has_rep].mean()) for m, ok in {**correct, **rep_ok}.items()},
        }
        for name, mk in masks.items()
        if (mk & has_rep).any()
    }

    # shape-cluster bootstrap: resample shapes (all their pairs), not pairs, which share a shape's picks
    keys = sorted(set(groups))
    garr = np.array(groups)
    members = {g: np.flatnonzero(garr == g) for g in keys}
    rng = np.random.default_rng(args.seed)
    accs, gains = [], []
    for _ in range(BOOTSTRAP):
        ix = np.concatenate([members[g] for g in rng.choice(keys, len(keys))])
        accs.append(correct[BOUND][ix].mean())
        gains.append(correct[BOUND][ix].mean() - correct["wave model"][ix].mean())
    boot = {
        "model": BOUND,
        "resamples": BOOTSTRAP,
        "agreement": float(correct[BOUND].mean()),
        "agreement_ci95": [float(np.percentile(accs, 2.5)), float(np.percentile(accs, 97.5))],
        "gain_over_wave": float(correct[BOUND].mean() - correct["wave model"].mean()),
        "gain_ci95": [float(np.percentile(gains, 2.5)), float(np.percentile(gains, 97.5))],
    }
    labels = [r["label"] for r in rows]
    confusion = {
        "wave model": confusion_of(labels, [r["wave_class"] for r in rows]),
        BOUND: confusion_of(labels, [CLASSES[p] for p in preds[BOUND]]),
    }
    runtime = time.time() - t0

    models = list(correct)
    print_table("All counted pairs (agreement, %)", table, models)
    print_table(
        "Pairs with a repeat measurement (agreement, %)",
        rep_table,
        ["wave model", "majority", BOUND, "repeat", "repeat snapped"],
    )
    lo, hi = boot["agreement_ci95"]
    glo, ghi = boot["gain_ci95"]
    print(
        f"\n{BOUND}: {100 * boot['agreement']:.1f} % (95 % shape-bootstrap {100 * lo:.1f}–{100 * hi:.1f}), "
        f"{100 * boot['gain_over_wave']:+.1f} points over the wave model "
        f"({100 * glo:+.1f} to {100 * ghi:+.1f}); "
        f"{len(sweeps)} sweeps, {len(keys)} shapes, {len(rows)} pairs, {runtime:.0f} s"
    )
    doc = {
        "what": "grouped-by-shape 10-fold CV classifiers of the measured pair class vs the wave model "
        "(benchmarks/classifier_bound.py docstring)",
        "sweeps": len(sweeps),
        "shapes": len(keys),
        "pairs": len(rows),
        "pairs_with_repeat": int(has_rep.sum()),
        "seed": args.seed,
        "folds": FOLDS,
        "snap_between_at": SNAP_AT,
        "classifiers": {name: {"kind": kind, "features": cols} for name, (kind, cols) in CLASSIFIERS.items()},
        "sklearn": sklearn_version,
        "runtime_s": round(runtime),
        "all_pairs": table,
        "pairs_with_repeat_by_subset": rep_table,
        "bootstrap": boot,
        "confusion_measured_to_predicted": confusion,
    }
    try:
        write_json(args.out, doc)
    except DeployoptError as exc:
        sys.exit(str(exc))
    print(f"wrote {args.out}")


def confusion_of(measured: list[str], predicted: list[str]) -> dict[str, dict[str, int]]:
    """measured class → predicted class → pairs (the wave model's 'between' agrees with nothing)."""
    counts = Counter(zip(measured, predicted))
    return {a: {b: counts[a, b] for b in (*CLASSES, "between") if counts[a, b]} for a in CLASSES}


def print_table(title: str, table: dict[str, dict[str, Any]], models: list[str]) -> None:
    print(f"\n{title}\n")
    print("| subset | pairs | " + " | ".join(models) + " |")
    print("|---|---:|" + "---:|" * len(models))
    for name, t in table.items():
        print(f"| {name} | {t['pairs']} | " + " | ".join(f"{100 * t[m]:.1f}" for m in models) + " |")


if __name__ == "__main__":
    main()
