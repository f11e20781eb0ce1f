"""The H200's wave-model fit on another GPU of the same SM design: held-out rounds measured again on
that GPU (the h100 target borrows the H200's fit, deployopt/targets/__init__.py FIT_BORROWED),
scored as benchmarks/score_rounds.py scores them, beside the same sweeps measured on the H200 and
with the H200's measurement as the "model" of the other GPU's (how alike the two staircases are).

    python benchmarks/score_gpu_transfer.py                    # benchmarks/results/h100_rounds/
    python benchmarks/score_gpu_transfer.py --gpu h100 --out benchmarks/results/h100_rounds/score.json
    python benchmarks/score_gpu_transfer.py --drop-interfered   # without widths timed under interference
The other GPU's sweeps are one JSON per sweep (benchmarks/split_sweeps.py) in <gpu>_rounds/default/
(PyTorch's default search) and <gpu>_rounds/all_engines/ (every cuDNN engine timed); a repeats/ or
all_repeats/ folder beside them (ids ending `_repeat`: that search measured again, in new processes)
is scored against its first measurement (default/, all_engines/) instead of the H200's.

    python benchmarks/score_gpu_transfer.py --records benchmarks/results/h100_round12
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_wave_model as ev  # noqa: E402
import score_rounds as sr  # noqa: E402

from deployopt.backends.cuda_conv import neighbours  # noqa: E402
from deployopt.fileio import write_json  # noqa: E402
from deployopt.targets import get_target  # noqa: E402
from deployopt.waves import pair_agreement, regret  # noqa: E402

# this GPU's folder per search mode → score_rounds' name of the same mode in the H200 records
MODES = {"default": "default_limit", "all_engines": "all_engines"}
#: folders of second measurements (ids end `_repeat`: repeats/ and all_repeats/ on the same machine in
#: new processes, other_machine/ on another machine of the same GPU model, another day's lease) → the
#: folder of the first measurement each is paired with, where the other modes pair with the H200's
REPEATS = {"repeats": "default", "all_repeats": "all_engines", "other_machine": "default"}
#: A point "interfered" (--drop-interfered): its event-timed median is over SPIKE_OVER_NEIGHBOURS times
#: each of its neighbours' (two each side) and over SPIKE_OVER_KERNEL times the conv kernels' own
#: profiled duration at that width. The kernel ran at its normal speed, so the time went outside it
#: (another context on the GPU, a stall) while that width was timed: not a step of the staircase.
#: Thresholds chosen after seeing the H100's rounds (a sensitivity check, not part of any score).
SPIKE_OVER_NEIGHBOURS = 2.5
SPIKE_OVER_KERNEL = 2.0


def interfered(sweep: dict[str, Any]) -> list[int]:
    """The indices of a sweep's interfered points (SPIKE_OVER_NEIGHBOURS, SPIKE_OVER_KERNEL)."""
    m = sweep["measured"]
    out = []
    for i, us in enumerate(m):
        near = neighbours(m, i)
        kernel_us = sum(k.get("duration_us", 0.0) for k in sweep["kernels"][i])
        if near and us > SPIKE_OVER_NEIGHBOURS * max(near) and 0 < kernel_us < us / SPIKE_OVER_KERNEL:
            out.append(i)
    return out


def without(sweep: dict[str, Any], drop: set[int]) -> dict[str, Any]:
    """The sweep without the points at `drop` (its widths, latencies and kernels alike)."""
    keep = [i for i in range(len(sweep["ks"])) if i not in drop]
    return {**sweep, **{key: [sweep[key][i] for i in keep] for key in ("ks", "measured", "kernels")}}


def drop_interfered(
    pairs: list[tuple[dict[str, Any], dict[str, Any] | None]],
) -> tuple[list[tuple[dict[str, Any], dict[str, Any] | None]], dict[str, list[int]]]:
    """Each pair without the widths either GPU timed interfered (so both sweeps keep the same widths);
    and which widths went, per sweep id of this GPU."""
    out, dropped = [], {}
    for mine, h200 in pairs:
        drop = set(interfered(mine)) | (set(interfered(h200)) if h200 is not None else set())
        if drop:
            dropped[mine["id"]] = [mine["ks"][i] for i in sorted(drop)]
        out.append((without(mine, drop), without(h200, drop) if h200 is not None else None))
    return out, dropped


def round_of(key: str) -> int | None:
    """The held-out round whose new shapes include this shape key."""
    return next((n for n, spec in sr.ROUNDS.items() if key in spec[3]), None)


def pairs_with_h200(gpu: str, mode: str, folder: Path) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(this GPU's sweep, the H200's sweep of the same shape, dtype and SM count, or None)."""
    h200_folders: dict[int, dict[str, dict[str, Any]]] = {}
    out = []
    for sweep in ev.load_sweeps(folder):
        key = sweep["id"].split("_")[1]
        number = round_of(key)
        other = None
        if number is not None:
            if number not in h200_folders:
                h200_folders[number] = {s["id"]: s for s in ev.load_sweeps(sr._folders(number)[MODES[mode]])}
            other = h200_folders[number].get("h200" + sweep["id"].removeprefix(gpu))
            if other is not None and other["ks"] != sweep["ks"]:
                other = None
        out.append((sweep, other))
    return out


def pairs_with_first(
    folder: Path, mode: str = "repeats"
) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(each `_repeat` sweep in folder/<mode>, its first measurement in folder/REPEATS[mode] or None)."""
    firsts = {s["id"]: s for s in ev.load_sweeps(folder / REPEATS[mode])}
    out = []
    for rep in ev.load_sweeps(folder / mode):
        first = firsts.get(rep["id"].removesuffix("_repeat"))
        out.append((rep, first if first is not None and first["ks"] == rep["ks"] else None))
    return out


def cross(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, float]:
    """The other measurement (the H200's, or the first of a repeat) as the "model" of this one:
    agreement over pairs, regret over sweeps."""
    agree = counted = 0
    regrets = []
    for mine, h200 in pairs:
        a, c = pair_agreement(mine["measured"], h200["measured"])
        agree, counted = agree + a, counted + c
        regrets.append(regret(mine["ks"], mine["measured"], h200["measured"]))
    return {"agreement": agree / counted if counted else float("nan"), "regret": statistics.fmean(regrets)}


def ratio(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, float]:
    """This measurement's median latency over the other's (the H200's, or the first), point by point:
    median and quartiles."""
    r = [m / h for mine, h200 in pairs for m, h in zip(mine["measured"], h200["measured"])]
    q = statistics.quantiles(r, n=4)
    return {"median": statistics.median(r), "q1": q[0], "q3": q[2], "points": len(r)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", default="h100", help="the target name, and the prefix of its sweep files")
    ap.add_argument("--records", type=Path, help="default: benchmarks/results/<gpu>_rounds")
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    ap.add_argument(
        "--drop-interfered",
        action="store_true",
        help="leave out the widths timed while something else held the GPU (see `interfered`), on both GPUs",
    )
    args = ap.parse_args()
    records = (args.records or ROOT / "benchmarks" / "results" / f"{args.gpu}_rounds").resolve()
    target, h200 = get_target(args.gpu), get_target("h200")
    print(f"{args.gpu}: parameters {target.notes or 'its own'}")
    result: dict[str, Any] = {
        "gpu": args.gpu,
        "records": str(records.relative_to(ROOT) if records.is_relative_to(ROOT) else records),
        "modes": {},
    }
    for mode in (*MODES, *REPEATS):
        if not (records / mode).is_dir():
            continue
        # the other measurement each sweep is set beside: the H200's, or for repeats the first
        other, other_target = ("first", target) if mode in REPEATS else ("h200", h200)
        if mode in REPEATS:
            both = pairs_with_first(records, mode)
        else:
            both = pairs_with_h200(args.gpu, mode, records / mode)
        n_matched = sum(o is not None for _, o in both)
        also = "with a first measurement" if mode in REPEATS else "also on the H200"
        print(f"== {mode}: {len(both)} sweeps on the {args.gpu}, {n_matched} {also} ==")
        # each sweep's size class from all its widths: leaving some out does not move a sweep's class
        wave_ids = {
            s["id"] for s, _ in both if ev.sweep_class(s, target, target.params[s["dtype"]]) == "wave-bound"
        }
        dropped = None
        if args.drop_interfered:
            both, dropped = drop_interfered(both)
            n = sum(len(v) for v in dropped.values())
            print(f"left out: {n} interfered widths in {len(dropped)} sweeps (on either GPU)")
        them = "first" if mode in REPEATS else "H200"
        print(
            f"{'group':<22}sweeps  {'model on this GPU':<18}  {'model on the ' + them:<18}  "
            f"{them + ' as model':<14}  latency ratio"
        )
        groups: dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {"all": both}
        for sms in sorted({s["sms"] for s, _ in both}):
            groups[f"{sms} SMs"] = [p for p in both if p[0]["sms"] == sms]
        for dt in ("fp16", "fp32"):
            groups[dt] = [p for p in both if p[0]["dtype"] == dt]
        wave_bound = [(s, o) for s, o in both if s["id"] in wave_ids]
        groups["wave-bound"] = wave_bound
        for sms in sorted({s["sms"] for s, _ in wave_bound}):
            groups[f"wave-bound, {sms} SMs"] = [p for p in wave_bound if p[0]["sms"] == sms]
        figures = {}
        for name, group in groups.items():
            if not group:
                continue
            mine = ev.score([s for s, _ in group], target, target.params)["wave"]
            matched = [(s, o) for s, o in group if o is not None]
            row: dict[str, Any] = {
                "sweeps": len(group),
                "model": {k: mine[k] for k in ("pairs", "agreement", "regret")},
            }
            if matched:
                theirs = ev.score([o for _, o in matched], other_target, other_target.params)["wave"]
                row[f"model_on_{other}"] = {k: theirs[k] for k in ("pairs", "agreement", "regret")}
                row[f"{other}_as_model"] = cross(matched)
                row["latency_ratio"] = ratio(matched)
                if len(matched) < len(group):
                    # the model on just the sweeps the other measurement has, to set beside it
                    paired = ev.score([s for s, _ in matched], target, target.params)["wave"]
                    row["model_on_paired"] = {k: paired[k] for k in ("pairs", "agreement", "regret")}
            figures[name] = row

            def f(d: dict[str, Any] | None) -> str:
                return "—" if d is None else f"{100 * d['agreement']:5.1f} % / {100 * d['regret']:4.2f} %"

            lr = row.get("latency_ratio")
            print(
                f"{name:<22}{len(group):6d}  {f(row['model']):<18}  {f(row.get(f'model_on_{other}')):<18}  "
                f"{f(row.get(f'{other}_as_model')):<14}  "
                + ("—" if lr is None else f"{lr['median']:.3f} [{lr['q1']:.3f}, {lr['q3']:.3f}]")
                + (
                    f"  (model on the {len(matched)} paired: {f(row['model_on_paired'])})"
                    if "model_on_paired" in row
                    else ""
                )
            )
        if dropped is not None:
            figures["interfered_widths_left_out"] = dropped
        result["modes"][mode] = figures
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
