"""A/A check of `deployopt compare`: how often two measurements of the same model get a verdict.

Give it several `deployopt bench -o` results of one model, timed one after another (plain results,
or `bench --repeat K` results, whose replicates count as runs in the order timed); it judges pairs
by compare's rules at their defaults and counts the verdicts. The same model has no true
difference, so any "faster"/"slower" is a false alarm: the rate to hold against --alpha.

- `single_run`: every run against every other (and the disjoint pairs 1/2, 3/4, ...) by the rule
  for one run a side, the Mann-Whitney U test on the samples. `largest_median_change_pct` is the
  smallest --min-effect that would have kept all of them quiet.
- `replicate`: groups of `--group` runs (default 3) against each other by the rule for replicated
  results, the t-test on the runs' medians: `consecutive` groups (runs 1-3, 4-6, ...: what `bench
  --repeat 3` gives, one result after another), `all_splits` of the runs into two groups where
  there are exactly 2 groups' worth (6 runs: 10 splits), and `random_splits` (seeded) of the runs
  into two disjoint groups, taken anywhere in the series (interleaving baseline and current runs).
  (`one_against_group`, one run against a group, and `group_against_one` under `--detect` went
  with compare's refusal of one run against replicates, 2026-12-07: results scored before hold them.)

With `--detect B.json ...` (results of a model that really differs, timed in the same series),
each rule is also scored on A against B: how often it calls the change, and which way. Prints
JSON (and writes it with -o):

    python benchmarks/aa_compare.py RESULT.json ... [--group 3] [--detect OTHER.json ...] [-o aa.json]

`--pair A2.json` scores `bench --append` series (`interleaved`): RESULT.json and A2.json are one
model benched in turns, one replicate a round into each (and `--detect W.json`, a model that
differs, in the same rounds). For each `--rounds K` (default 3 and 6) it cuts each file into
blocks of K rounds and judges A's block i against A2's: `interleaved` the same rounds (what a loop
of K rounds gives, each side's runs spread over the same stretch of time), `sliding` the same at
every start round (overlapping windows, so not independent), `not_interleaved` block i against
block j != i (each side's K runs in a stretch of its own, as two `bench --repeat K` one after the
other give); `whole` is `compare` on the two files as they are, and `detect` the same against W:

    python benchmarks/aa_compare.py aa1.json --pair aa2.json --rounds 3 6 --detect w.json -o out.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from deployopt.regression import compare_timings
from deployopt.timing import Comparison, Timing, load_timing

#: seeded splits of the runs into two groups scored under `random_splits`
RANDOM_SPLITS = 1000


def verdict(c: Comparison) -> str:
    if c.unstable:
        return "unstable"
    if c.mixed:
        return "mixed"
    return c.verdict


def single_runs(t: Timing) -> list[Timing]:
    """A result's replicates as results of one run each (a plain result is one run)."""
    if t.replicate_count == 1:
        return [t]
    return [
        Timing(t.backend, s, t.warmup, t.timed, t.environment, model=t.model, measured_at=r.measured_at)
        for s, r in zip(t.replicate_samples(), t.replicates or [])
    ]


def group(runs: list[Timing]) -> Timing:
    """Runs of one model as one replicated result (Timing.from_replicates)."""
    return Timing.from_replicates(runs)


def count(judged: Iterable[Comparison]) -> dict[str, object]:
    seen = Counter(verdict(c) for c in judged)
    n = sum(seen.values())
    alarms = seen["faster"] + seen["slower"]
    return {"pairs": n, "verdicts": dict(seen), "faster_or_slower_rate": alarms / n if n else None}


def single_run_rule(runs: list[Timing]) -> dict[str, object]:
    n = len(runs)
    return {
        "runs": n,
        "disjoint": count(compare_timings(runs[a], runs[a + 1]) for a in range(0, n - 1, 2)),
        "all": count(compare_timings(runs[a], runs[b]) for a, b in itertools.combinations(range(n), 2)),
    }


def replicate_rule(runs: list[Timing], k: int, seed: int = 0) -> dict[str, object]:
    """The rule on replicate medians over groups of k runs (see the module's docstring)."""
    n = len(runs)
    groups = [group(runs[i : i + k]) for i in range(0, n - k + 1, k)]
    out: dict[str, object] = {
        "group": k,
        "consecutive": {
            "groups": len(groups),
            "disjoint": count(
                compare_timings(groups[i], groups[i + 1]) for i in range(0, len(groups) - 1, 2)
            ),
            "all": count(compare_timings(a, b) for a, b in itertools.combinations(groups, 2)),
        },
    }
    if n == 2 * k:  # every split into two groups of k, each once (run 0 on the baseline side)
        splits = [
            (list(left), [i for i in range(n) if i not in left])
            for left in itertools.combinations(range(n), k)
            if 0 in left
        ]
        out["all_splits"] = count(
            compare_timings(group([runs[i] for i in a]), group([runs[i] for i in b])) for a, b in splits
        )
    if n >= 2 * k:
        rng = random.Random(seed)
        picks = (rng.sample(range(n), 2 * k) for _ in range(RANDOM_SPLITS))
        out["random_splits"] = count(
            compare_timings(group([runs[i] for i in p[:k]]), group([runs[i] for i in p[k:]])) for p in picks
        )
    return out


def detect(a_runs: list[Timing], b_runs: list[Timing], k: int) -> dict[str, object]:
    """Each rule on A against B (a real difference): A's i-th run (or group of k) against B's i-th,
    and every one against every one."""
    ga = [group(a_runs[i : i + k]) for i in range(0, len(a_runs) - k + 1, k)]
    gb = [group(b_runs[i : i + k]) for i in range(0, len(b_runs) - k + 1, k)]
    return {
        "median_change_pct": 100
        * (
            sorted(t.median_us for t in b_runs)[len(b_runs) // 2]
            / sorted(t.median_us for t in a_runs)[len(a_runs) // 2]
            - 1
        ),
        "single_run": {
            "paired": count(compare_timings(a, b) for a, b in zip(a_runs, b_runs)),
            "all": count(compare_timings(a, b) for a in a_runs for b in b_runs),
        },
        "replicate": {
            "group": k,
            "paired": count(compare_timings(a, b) for a, b in zip(ga, gb)),
            "all": count(compare_timings(a, b) for a in ga for b in gb),
        },
    }


def blocks(runs: list[Timing], k: int) -> list[Timing]:
    """Consecutive blocks of k runs (rounds) as replicated results."""
    return [group(runs[i : i + k]) for i in range(0, len(runs) - k + 1, k)]


def interleaved(a: Timing, b: Timing, rounds: list[int], other: Timing | None) -> dict[str, object]:
    """`--pair`: A and A2 (and W) benched in turns with `bench --append` (see the module's docstring)."""
    ra, rb = single_runs(a), single_runs(b)
    rw = single_runs(other) if other is not None else []
    n = min(len(ra), len(rb))
    medians = {"a": [t.median_us for t in ra], "a2": [t.median_us for t in rb]}
    whole: dict[str, object] = {"aa": describe(compare_timings(a, b))}
    if other is not None:
        medians["w"] = [t.median_us for t in rw]
        whole["a_vs_w"] = describe(compare_timings(a, other))
        whole["a2_vs_w"] = describe(compare_timings(b, other))
    out: dict[str, object] = {"rounds": n, "medians_us": medians, "whole": whole}
    for k in rounds:
        ba, bb = blocks(ra[:n], k), blocks(rb[:n], k)
        m = len(ba)
        entry: dict[str, object] = {
            "blocks": m,
            "interleaved": count(compare_timings(ba[i], bb[i]) for i in range(m)),
            "sliding": count(
                compare_timings(group(ra[s : s + k]), group(rb[s : s + k])) for s in range(n - k + 1)
            ),
            "not_interleaved": count(
                compare_timings(ba[i], bb[j]) for i in range(m) for j in range(m) if i != j
            ),
        }
        if other is not None:
            bw = blocks(rw[:n], k)
            mw = min(m, len(bw))
            entry["detect"] = {
                "interleaved": count(compare_timings(side[i], bw[i]) for side in (ba, bb) for i in range(mw)),
                "not_interleaved": count(
                    compare_timings(side[i], bw[j])
                    for side in (ba, bb)
                    for i in range(mw)
                    for j in range(mw)
                    if i != j
                ),
            }
        out[f"rounds_{k}"] = entry
    return out


def describe(c: Comparison) -> dict[str, object]:
    """One comparison for the JSON: its p is null where compare gives none (NaN: replicates with no
    spread), as compare's own --json writes it; json.dumps wrote NaN, which is no JSON."""
    p = c.p_value if c.p_value is not None and math.isfinite(c.p_value) else None
    return {"verdict": verdict(c), "change_pct": 100 * (c.ratio - 1), "p_value": p, "test": c.test}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="bench -o results of one model, in the order timed")
    ap.add_argument(
        "--group", type=int, default=3, help="replicates a side for the replicate rule (default 3)"
    )
    ap.add_argument(
        "--detect", nargs="*", type=Path, default=[], help="results of a model that really differs"
    )
    ap.add_argument(
        "--pair", type=Path, help="a second result of the same model, benched in turns with RESULT (--append)"
    )
    ap.add_argument(
        "--rounds", nargs="+", type=int, default=[3, 6], help="rounds a block for --pair (default 3 6)"
    )
    ap.add_argument("-o", "--output", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)
    if args.pair is not None:
        if len(args.results) != 1 or len(args.detect) > 1:
            ap.error("--pair takes one RESULT and at most one --detect file")
        other = load_timing(args.detect[0]) if args.detect else None
        out = {
            "rule": "deployopt compare's defaults (alpha 0.01, min effect 2 %)",
            "results": [str(args.results[0]), str(args.pair)],
            "detect": [str(p) for p in args.detect],
            "interleaved": interleaved(
                load_timing(args.results[0]), load_timing(args.pair), args.rounds, other
            ),
        }
        text = json.dumps(out, indent=1)
        print(text)
        if args.output:
            args.output.write_text(text + "\n")
        return 0
    runs = [r for p in args.results for r in single_runs(load_timing(p))]
    if len(runs) < 2:
        ap.error("give at least two runs")
    if args.group < 1:
        ap.error("--group must be at least 1")
    medians = [t.median_us for t in runs]
    out: dict[str, object] = {
        "rule": "deployopt compare's defaults (alpha 0.01, min effect 2 %): one run a side, Mann-Whitney U "
        "with the within-run stability check; replicated sides, the t-test on log replicate medians",
        "results": [str(p) for p in args.results],
        "medians_us": medians,
        # the largest change between two of these medians: a --min-effect below it let this set's
        # own A/A pairs through as faster/slower (each run's samples cannot show it)
        "largest_median_change_pct": 100 * (max(medians) / min(medians) - 1),
        "single_run": single_run_rule(runs),
    }
    if len(runs) >= 2 * args.group and args.group + args.group - 2 >= 2:
        out["replicate"] = replicate_rule(runs, args.group)
    if args.detect:
        other = [r for p in args.detect for r in single_runs(load_timing(p))]
        out["detect"] = {"results": [str(p) for p in args.detect], **detect(runs, other, args.group)}
    text = json.dumps(out, indent=1)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
