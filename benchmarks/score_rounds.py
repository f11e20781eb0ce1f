"""The held-out rounds' tables in docs/wave_model_evaluation.md: each round's sweeps scored, repeats excluded
and pooled by subset, with the fit shipped just before the round was measured (kept in its record
folder), so no figure here comes from a fit that saw the sweeps it scores. Predictions of the
wave model against measured H200 medians.

    python benchmarks/score_rounds.py            # rounds four to thirteen
    python benchmarks/score_rounds.py --round 8
    python benchmarks/score_rounds.py --round 8 --transitions   # where the misses are (below)
    python benchmarks/score_rounds.py --by-size  # rounds four to thirteen pooled by predicted latency
    python benchmarks/score_rounds.py --round 13 --out score.json   # the printed figures, as JSON too
Round four: the fit of rounds one to three (commit cf4b182); round five: the fit of commit d5f5956
(rounds one to four); round six: the fit of commit f1dd72a (rounds one to five, with the fp16
family at 32); rounds seven (small) and eight (not fitted on: their sweeps stay in their records):
the fit of 9f1a9e1 (rounds one to six), unchanged for rounds nine to thirteen (ten to thirteen
pre-registered, benchmarks/preregister_round.py). Each round also prints its repeats: the model on a first
and a second measurement of the same sweeps, and each measurement as the "model" of the other.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_wave_model as ev  # noqa: E402

from deployopt.fileio import write_json  # noqa: E402
from deployopt.targets import get_target  # noqa: E402
from deployopt.waves import (  # noqa: E402
    LAUNCH_BOUND_BELOW,
    SIZE_CLASSES,
    WAVE_BOUND_FROM,
    WaveParams,
)

FOLDERS = {
    "default_limit": ROOT / "benchmarks" / "staircases",
    "all_engines": ROOT / "benchmarks" / "staircases_all_engines",
    "heuristic": ROOT / "benchmarks" / "staircases_heuristic",
}
# round → (record folder, sweep-list file, fit file, the shapes new in that round, the folder in
# the record of repeats measured after the round and kept out of the fitted sweeps, if any)
ROUNDS = {
    4: ("h200_round4", "round4_sweeps.json", "fit_before_round4.json", {"ac", "ad", "ae", "af", "ag", "ah"},
        ""),
    5: ("h200_round5", "round5_sweeps.json", "fit_before_round5.json", {"ai", "aj", "ak", "al", "am", "an"},
        "repeats_8sm"),
    6: ("h200_round6", "round6_sweeps.json", "fit_before_round6.json", {"ao", "ap", "aq", "ar", "as", "at"},
        "repeats"),
    # held out: its sweeps stay in the record (one folder per search mode), not in the fitted folders
    7: ("h200_round7", "round7_sweeps.json", "fit_before_round7.json", {"au", "av", "aw", "ax"}, ""),
    8: ("h200_round8", "round8_sweeps.json", "fit_before_round8.json",
        {"ay", "az", "ba", "bb", "bc", "bd", "be", "bf"}, "repeats"),
    9: ("h200_round9", "round9_sweeps.json", "fit_before_round9.json",
        {"bg", "bh", "bi", "bj", "bk", "bl", "bm", "bn"}, "repeats"),
    # chosen to test size_class, its classes and expectation committed before measuring
    10: ("h200_round10", "round10_sweeps.json", "fit_before_round10.json",
        {"bo", "bp", "bq", "br", "bs", "bt", "bv", "bx"}, "repeats"),
    # a second pre-registered test (preregister_round.py), the fit unchanged since round ten
    11: ("h200_round11", "round11_sweeps.json", "fit_before_round11.json",
        {"by", "bz", "ca", "cb", "cc", "cd", "ce", "cf"}, "repeats"),
    # a third, the fit still round ten's; first measured on H100s (results/h100_round12*)
    12: ("h200_round12", "round12_sweeps.json", "fit_before_round12.json",
        {"cg", "ch", "ci", "cj", "ck", "cl", "cm", "cn"}, ""),
    # a fourth, the fit still round ten's; first measured on H100s (results/h100_round13)
    13: ("h200_round13", "round13_sweeps.json", "fit_before_round13.json",
        {"co", "cp", "cq", "cr", "cs", "ct", "cu", "cv"}, "repeats"),
}  # fmt: skip
# round → the folder in its record of every-engine sweeps measured a second time (ids listed under
# all_engines with the `_repeat` suffix), scored like the default-search repeats
ALL_ENGINE_REPEATS = {10: "all_repeats", 11: "all_repeats"}


def load_round(number: int) -> tuple[dict[str, list[str]], dict[str, WaveParams], set[str]]:
    """(sweep ids per search mode, the fit shipped before the round, the round's new shapes)."""
    folder, sweeps_file, fit_file, new, _ = ROUNDS[number]
    record = ROOT / "benchmarks" / "results" / folder
    ids = json.loads((record / sweeps_file).read_text())["sweeps"]
    fit = json.loads((record / fit_file).read_text())
    return ids, {dt: WaveParams.from_json(fit["params"][dt]) for dt in ("fp16", "fp32")}, new


def _folders(number: int) -> dict[str, Path]:
    """Where the round's sweeps are, per search mode: a folder of that name inside the round's
    record (a held-out round, not fitted on) or else the committed sweep folders."""
    record = ROOT / "benchmarks" / "results" / ROUNDS[number][0]
    return {mode: record / mode if (record / mode).is_dir() else folder for mode, folder in FOLDERS.items()}


def _figures(w: dict[str, Any]) -> dict[str, Any]:
    """A score's pairs, agreement and regret, for --out."""
    return {"pairs": w["pairs"], "agreement": w["agreement"], "regret": w["regret"]}


def score_round(number: int) -> dict[str, Any]:
    """Print a round's scores; return them (for --out)."""
    result: dict[str, Any] = {"modes": {}, "measured_twice": {}}
    ids, params, new = load_round(number)
    target = get_target("h200")
    print(f"#### round {number}")
    folders = _folders(number)
    loaded: dict[str, list[dict]] = {}  # mode → every sweep in its folder, each folder read once

    def in_folder(mode: str) -> list[dict]:
        if mode not in loaded:
            loaded[mode] = ev.load_sweeps(folders[mode])
        return loaded[mode]

    for mode in folders:
        wanted = {i for i in ids[mode] if not i.endswith("_repeat")}
        if not wanted:
            continue
        sweeps = [s for s in in_folder(mode) if s["id"] in wanted]
        groups = {
            "all": sweeps,
            "8 SMs": [s for s in sweeps if s["sms"] == 8],
            "16 SMs": [s for s in sweeps if s["sms"] == 16],
            "132 SMs": [s for s in sweeps if s["sms"] == 132],
            "new shapes": [s for s in sweeps if s["id"].split("_")[1] in new],
            "older shapes": [s for s in sweeps if s["id"].split("_")[1] not in new],
        }
        for dt in ("fp16", "fp32"):
            for sms in (8, 16, 132):
                groups[f"{dt} {sms} SMs"] = [s for s in sweeps if s["dtype"] == dt and s["sms"] == sms]
        print(f"== {mode}: {len(sweeps)} sweeps ==")
        figures = result["modes"].setdefault(mode, {})
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
            figures[name] = {
                "sweeps": len(group),
                "wave": _figures(w),
                **{m: _figures(sc[m]) for m in ("tile128", "flops", "constant")},
            }
            print(
                f"  {name:<17} {len(group):3d} sweeps  {agree}/{w['pairs']} pairs"
                f" = {100 * w['agreement']:.2f} % / {100 * w['regret']:.2f} %   {base}"
            )

    # how much of the regret an alignment prior alone removes (ties to the better-aligned width)
    default = [s for s in in_folder("default_limit") if s["id"] in set(ids["default_limit"])]
    study = ev.tie_break_study([s for s in default if not s["id"].endswith("_repeat")], target, params)
    key = f"ties_aligned{ev.TIE_ALIGN}"
    result["regret_ties_aligned"] = {
        m: {"ties_wider": g["all"]["ties_wider"], key: g["all"][key]} for m, g in study.items()
    }
    print(
        f"  regret, ties to the better-aligned width (≤ {ev.TIE_ALIGN}): "
        + "  ".join(
            f"{m} {100 * g['all']['ties_wider']:.2f} → {100 * g['all'][key]:.2f} %" for m, g in study.items()
        )
    )

    # the sweeps measured twice: the model on the first measurement and on the second, and each
    # measurement as the model of the other (the ceiling for any width model)
    for mode in ("default_limit", "all_engines"):
        firsts, reps = _measured_twice(number, mode, in_folder(mode), ids)
        if not reps:
            continue
        print(f"  == {mode}, measured twice ==")
        twice: dict[str, Any] = {"repeat_as_model": {}, "by_sms": {}}
        result["measured_twice"][mode] = twice
        for name, group in (("first measurement", firsts), ("repeat", reps)):
            w = ev.score(group, target, params)["wave"]
            twice[name] = {"sweeps": len(group), "wave": _figures(w)}
            figures = f"{100 * w['agreement']:.1f} % / {100 * w['regret']:.2f} %"
            print(f"  {name:<17} {len(group):3d} sweeps  {figures}")
        ceiling = [r for r in ev.noise_ceiling(firsts + reps) if not r["measured"].endswith("_repeat")]
        for sms in sorted({s["sms"] for s in reps}):
            rows = [r for r in ceiling if r["measured"].endswith(f"_{sms}sm")]
            if not rows:
                continue
            agree, pairs = sum(r["agree"] for r in rows), sum(r["pairs"] for r in rows)
            regret = sum(r["regret"] for r in rows) / len(rows)
            twice["repeat_as_model"][f"{sms} SMs"] = {"agree": agree, "pairs": pairs, "regret": regret}
            share = f"{agree}/{pairs} pairs = {100 * agree / pairs:.1f} %"
            print(f"  repeat as model, {sms} SMs: {share}, regret {100 * regret:.2f} %")
        if len({s["sms"] for s in reps}) > 1 and ceiling:  # every SM count pooled
            agree, pairs = sum(r["agree"] for r in ceiling), sum(r["pairs"] for r in ceiling)
            regret = sum(r["regret"] for r in ceiling) / len(ceiling)
            twice["repeat_as_model"]["all"] = {"agree": agree, "pairs": pairs, "regret": regret}
            share = f"{agree}/{pairs} pairs = {100 * agree / pairs:.1f} %"
            print(f"  repeat as model, all ({len(ceiling)} sweeps): {share}, regret {100 * regret:.2f} %")
        for sms in sorted({s["sms"] for s in reps}):
            pairs = [(f, r) for f in firsts for r in reps if r["id"] == f["id"] + "_repeat"]
            pairs = [(f, r) for f, r in pairs if f["sms"] == sms]
            for name, group in (("first", [f for f, _ in pairs]), ("repeat", [r for _, r in pairs])):
                w = ev.score(group, target, params)["wave"]
                twice["by_sms"].setdefault(f"{sms} SMs", {})[name] = {
                    "sweeps": len(group),
                    "wave": _figures(w),
                }
                figures = f"{100 * w['agreement']:.1f} % / {100 * w['regret']:.2f} %"
                print(f"  {sms} SMs, {name:<6} {len(group):3d} sweeps  {figures}")
    return result


def _measured_twice(
    number: int, mode: str, every: list[dict], ids: dict[str, list[str]]
) -> tuple[list[dict], list[dict]]:
    """(first measurements, their repeats) of one search mode of a round: the `_repeat` sweeps
    among `every` (the mode's folder) that the round lists in `ids` (load_round's), and those in the
    record's folder of repeats kept beside it (not fitted on)."""
    folder, *_, kept = ROUNDS[number]
    if mode == "all_engines":
        kept = ALL_ENGINE_REPEATS.get(number, "")
    listed = set(ids[mode])
    reps = [s for s in every if s["id"].endswith("_repeat") and s["id"] in listed]
    if kept:
        reps += ev.load_sweeps(ROOT / "benchmarks" / "results" / folder / kept)
    twins = {r["id"].removesuffix("_repeat") for r in reps}
    return [s for s in every if s["id"] in twins], reps


def transitions(number: int) -> None:
    """Where the model's misses are on a round's default-limit sweeps: measured class against
    predicted class, and per alignment transition (the power of two dividing each width of a pair,
    capped at 64) how often each measured class occurs and how many pairs the model gets."""
    from collections import Counter, defaultdict

    from deployopt.waves import classify_change, pow2_align

    ids, params, _ = load_round(number)
    target = get_target("h200")
    wanted = {i for i in ids["default_limit"] if not i.endswith("_repeat")}
    sweeps = [s for s in ev.load_sweeps(_folders(number)["default_limit"]) if s["id"] in wanted]
    print(f"#### round {number}, default limit: measured → predicted class, and by alignment transition")
    for sms in sorted({s["sms"] for s in sweeps}):
        for dt in ("fp16", "fp32"):
            confusion: Counter[tuple[str, str]] = Counter()
            by_step: defaultdict[str, Counter[str]] = defaultdict(Counter)
            for s in (s for s in sweeps if s["sms"] == sms and s["dtype"] == dt):
                pred, meas, ks = ev.predictions("wave", s, target, params[dt]), s["measured"], s["ks"]
                for i in range(len(ks) - 1):
                    m, p = classify_change(meas[i], meas[i + 1]), classify_change(pred[i], pred[i + 1])
                    if m == "between":
                        continue
                    confusion[(m, p)] += 1
                    step = by_step[f"{pow2_align(ks[i], 64)}→{pow2_align(ks[i + 1], 64)}"]
                    step[m] += 1
                    step["model right"] += m == p
            pairs = ", ".join(f"{m}→{p} {n}" for (m, p), n in sorted(confusion.items()))
            print(f"  {dt} {sms} SMs: {pairs}")
            for step, counts in sorted(by_step.items()):
                cells = "  ".join(f"{k} {counts[k]}" for k in ("flat", "up", "down", "model right"))
                print(f"      {step:>7}: {cells}")


Cells = dict[tuple[str, int, str], list[float]]  # (mode, SMs, class) → agree, pairs, Σ regret, sweeps


def size_cells(numbers: list[int]) -> Cells:
    """The held-out rounds sorted by how long the model predicts the conv takes (the median of its
    predicted staircase, `deployopt.waves.size_class`): each round's new shapes only, each scored
    with the fit shipped before it, per search mode and SM count; and a second measurement as the
    "model" of the first, where the round has repeats (mode "repeat", and "repeat_all_engines" for
    every engine timed; classes from the default-search sweep of the same id). Sorting needs no
    measurement, so a user can apply it to their own layers."""

    target = get_target("h200")
    cells: Cells = {}

    def add(key: tuple[str, int, str], agree: float, pairs: float, regret: float) -> None:
        cell = cells.setdefault(key, [0, 0, 0.0, 0])
        cell[0] += agree
        cell[1] += pairs
        cell[2] += regret
        cell[3] += 1

    for number in numbers:
        ids, params, new = load_round(number)
        folders = _folders(number)
        size: dict[str, str] = {}
        loaded = {mode: ev.load_sweeps(folders[mode]) for mode in ("default_limit", "all_engines")}
        for mode, every in loaded.items():
            wanted = {i for i in ids[mode] if not i.endswith("_repeat") and i.split("_")[1] in new}
            for s in (s for s in every if s["id"] in wanted):
                cls = ev.sweep_class(s, target, params[s["dtype"]])
                if mode == "default_limit":
                    size[s["id"]] = cls
                w = ev.score([s], target, params)["wave"]
                add((mode, s["sms"], cls), round(w["agreement"] * w["pairs"]), w["pairs"], w["regret"])
        for mode, every in loaded.items():  # a second measurement as the "model" of the first
            firsts, reps = _measured_twice(number, mode, every, ids)
            firsts = [s for s in firsts if s["id"] in size]
            reps = [r for r in reps if r["id"].removesuffix("_repeat") in size]
            for row in ev.noise_ceiling(firsts + reps):
                if row["measured"].endswith("_repeat") or not row["pairs"]:
                    continue
                sms = int(row["measured"].rsplit("_", 1)[1].removesuffix("sm"))
                key = "repeat" if mode == "default_limit" else "repeat_all_engines"
                add((key, sms, size[row["measured"]]), row["agree"], row["pairs"], row["regret"])
    return cells


def pooled(cells: Cells, mode: str, cls: str, sms: int | None = None) -> dict[str, float] | None:
    """Agreement (over pairs) and regret (over sweeps) of one mode and class, at one SM count or
    pooled over all; None when no sweep is in it."""
    picked = [v for (m, n, c), v in cells.items() if m == mode and c == cls and sms in (None, n)]
    if not picked:
        return None
    agree, pairs, regret, sweeps = (sum(v[i] for v in picked) for i in range(4))
    return {"agreement": agree / pairs, "regret": regret / sweeps, "pairs": pairs, "sweeps": sweeps}


def by_size(numbers: list[int]) -> list[dict[str, Any]]:
    """Print the rounds pooled by size class; return the rows (for --out)."""
    rows: list[dict[str, Any]] = []
    cells = size_cells(numbers)
    print(f"#### rounds {', '.join(map(str, numbers))}, new shapes, by the conv's predicted median latency")
    print(
        f"(launch-bound: < {LAUNCH_BOUND_BELOW:g}× the fit's fixed cost; wave-bound: ≥ {WAVE_BOUND_FROM:g}×)"
    )
    print("search         SMs  class          sweeps  pairs  model agreement / regret  repeat as model")
    for sms in (8, 16, 132, None):  # None: every SM count pooled
        for mode in ("default_limit", "all_engines"):
            for cls in SIZE_CLASSES:
                got = pooled(cells, mode, cls, sms)
                if got is None:
                    continue
                rep = pooled(cells, "repeat" if mode == "default_limit" else "repeat_all_engines", cls, sms)
                rows.append(
                    {"search": mode, "sms": sms or "all", "class": cls, "model": got, "repeat_as_model": rep}
                )
                rep_s = "—"
                if rep:
                    rep_s = f"{100 * rep['agreement']:.1f} % / {100 * rep['regret']:.2f} % ({rep['sweeps']})"
                where = "all" if sms is None else str(sms)
                print(
                    f"{mode:<14} {where:>3}  {cls:<13} {got['sweeps']:6d} {got['pairs']:6d}  "
                    f"{100 * got['agreement']:5.1f} % / {100 * got['regret']:.2f} %          {rep_s}"
                )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--round", type=int, choices=sorted(ROUNDS), action="append")
    ap.add_argument("--transitions", action="store_true", help="where the misses are, instead of the scores")
    ap.add_argument(
        "--by-size",
        action="store_true",
        help="the rounds pooled by the conv's predicted latency (deployopt.waves.size_class), not the scores",
    )
    ap.add_argument("--out", type=Path, help="also write the printed scores (or --by-size rows) as JSON")
    args = ap.parse_args()
    if args.out and args.transitions and not args.by_size:
        ap.error("--out writes the scores or the --by-size rows, not --transitions")
    numbers = args.round or sorted(ROUNDS)
    result: dict[str, Any] = {"rounds": numbers}
    if args.by_size:
        result["by_size"] = by_size(numbers)
    elif args.transitions:
        for number in numbers:
            transitions(number)
    else:
        result["scores"] = {str(number): score_round(number) for number in numbers}
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
