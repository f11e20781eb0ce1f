"""A/A check of `deployopt compare`: how often two measurements of the same model get a verdict.

Give it several `deployopt bench -o` results of one model, timed one after another; it judges
every pair (and the disjoint pairs 1/2, 3/4, ...) by compare's rule at its defaults and counts the
verdicts. The same model has no true difference, so any "faster"/"slower" is a false alarm: the
rate to hold against --alpha, and the largest change between two runs' medians is the smallest
--min-effect that would have kept them quiet. Prints JSON (and writes it with -o):

    python benchmarks/aa_compare.py RESULT.json RESULT.json ... [-o aa.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import Counter
from pathlib import Path

from deployopt.regression import compare_timings
from deployopt.timing import Comparison, Timing, load_timing


def verdict(c: Comparison) -> str:
    if c.unstable:
        return "unstable"
    if c.mixed:
        return "mixed"
    return c.verdict


def count(pairs: list[tuple[int, int]], timings: list[Timing]) -> dict[str, object]:
    seen = Counter(verdict(compare_timings(timings[a], timings[b])) for a, b in pairs)
    alarms = seen["faster"] + seen["slower"]
    return {
        "pairs": len(pairs),
        "verdicts": dict(seen),
        "false_alarm_rate": alarms / len(pairs) if pairs else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="bench -o results of one model, in the order timed")
    ap.add_argument("-o", "--output", type=Path, help="also write the JSON here")
    args = ap.parse_args(argv)
    if len(args.results) < 2:
        ap.error("give at least two results")
    timings = [load_timing(p) for p in args.results]
    n = len(timings)
    out = {
        "rule": "deployopt compare's defaults (alpha 0.01, min effect 2 %, the within-run stability check)",
        "results": [str(p) for p in args.results],
        "medians_us": [t.median_us for t in timings],
        # the largest change between two of these medians: a --min-effect below it let this set's
        # own A/A pairs through as faster/slower (each run's samples cannot show it)
        "largest_median_change_pct": 100
        * (max(t.median_us for t in timings) / min(t.median_us for t in timings) - 1),
        "disjoint": count([(i, i + 1) for i in range(0, n - 1, 2)], timings),
        "all": count(list(itertools.combinations(range(n), 2)), timings),
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
