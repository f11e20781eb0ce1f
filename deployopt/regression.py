"""Regression timing: is a model slower now than in the measurement it shipped with?

The job after `optimize`: engines go to the boards, and every change (a new TensorRT or JetPack, a
retrained model, new widths) is timed again and put against the stored baseline. A measurement
file is whatever deployopt or the board wrote: `deployopt bench -o`, `jetson/runner.py --out`, or
trtexec's own `--exportTimes` JSON. A verdict needs a significant difference (Mann-Whitney U on the
samples) that is also larger than a minimum effect: `deployopt.timing.compare`, the rule the
optimizer uses. Pairs whose environments differ (another GPU or board, SM count, power mode,
TensorRT, what was timed) are flagged, because their difference need not be the model's. A pair
with too few samples for the test ever to reach alpha is refused rather than judged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deployopt.errors import DataError, no_such_file
from deployopt.timing import Comparison, Timing, compare, load_timing, min_samples, smallest_p_value

#: Environment facts that make two measurements comparable, with the word a report uses for each.
#: A fact recorded on one side only is not a difference (older files lack newer keys).
LIKE_FOR_LIKE = (
    ("gpu", "GPU"),
    ("board", "board"),
    ("device", "device"),
    ("sms", "SMs"),
    ("nvpmodel", "power mode"),
    ("tensorrt", "TensorRT"),
    ("cudnn", "cuDNN"),
    ("cudnn_benchmark", "cudnn.benchmark"),
    ("cudnn_benchmark_limit", "cuDNN engines timed"),
    ("dtype", "dtype"),
)


def setup(t: Timing) -> str:
    """The backend and the like-for-like facts a measurement recorded, in words."""
    env = t.environment
    facts = [f"{word} {env[key]}" for key, word in LIKE_FOR_LIKE if env.get(key) is not None]
    return ", ".join([t.backend, *facts])


def differences(a: Timing, b: Timing) -> list[str]:
    """What differs between the two measurements' setups, in words ('SMs 8 → 16')."""
    out = [] if a.backend == b.backend else [f"backend {a.backend} → {b.backend}"]
    for key, word in LIKE_FOR_LIKE:
        va, vb = a.environment.get(key), b.environment.get(key)
        if va is not None and vb is not None and va != vb:
            out.append(f"{word} {va} → {vb}")
    if a.timed and b.timed and a.timed != b.timed:
        out.append("what was timed differs")
    return out


@dataclass
class Pair:
    """One model timed twice: its baseline and its current measurement."""

    name: str
    baseline_path: Path
    current_path: Path
    baseline: Timing
    current: Timing
    comparison: Comparison
    differences: list[str]

    def to_json(self) -> dict[str, Any]:
        def side(t: Timing, path: Path) -> dict[str, Any]:
            lo, hi = t.ci95_us
            return {
                "file": str(path),
                "backend": t.backend,
                "median_us": t.median_us,
                "iqr_us": t.iqr_us,
                "ci95_us": [lo, hi],
                "runs": t.runs,
                "timed": t.timed,
                "measured_on": setup(t),  # what the table's "measured on" line says
            }

        return {
            "name": self.name,
            "baseline": side(self.baseline, self.baseline_path),
            "current": side(self.current, self.current_path),
            "ratio": self.comparison.ratio,
            "change_pct": 100 * (self.comparison.ratio - 1),
            "p_value": self.comparison.p_value,
            "verdict": self.comparison.verdict,
            "environment_differences": self.differences,
        }


@dataclass
class RegressionReport:
    pairs: list[Pair]
    alpha: float
    min_effect: float
    only_in_baseline: list[str] = field(default_factory=list)
    only_in_current: list[str] = field(default_factory=list)

    @property
    def slower(self) -> list[Pair]:
        return [p for p in self.pairs if p.comparison.verdict == "slower"]

    @property
    def not_like_for_like(self) -> list[Pair]:
        return [p for p in self.pairs if p.differences]

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": {
                "test": "Mann-Whitney U, two-sided, on the per-run samples",
                "alpha": self.alpha,
                "min_effect": self.min_effect,
            },
            "regressions": len(self.slower),
            "pairs": [p.to_json() for p in self.pairs],
            "only_in_baseline": self.only_in_baseline,
            "only_in_current": self.only_in_current,
        }


def is_compare_report(path: Path) -> bool:
    """Whether a JSON file is one `compare -o` wrote (its "rule" and "pairs"): written into a results
    folder, it would otherwise count as a model next time (a note, exit 1 under --strict) and, once
    that folder becomes the baseline, be read as a broken measurement (exit 2)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return False  # not readable as JSON: loading it says why
    return isinstance(doc, dict) and "rule" in doc and "pairs" in doc and "samples_us" not in doc


def _measurement_files(folder: Path) -> dict[str, Path]:
    return {p.stem: p for p in sorted(folder.glob("*.json")) if p.is_file() and not is_compare_report(p)}


def check_testable(baseline: tuple[Path, Timing], current: tuple[Path, Timing], alpha: float) -> None:
    """Refuse a pair whose sample counts could never give p < alpha.

    `timing.compare` treats a side with one sample as a deterministic prediction (p = 0 for any
    difference), so a one-sample measurement would be called slower or faster on no evidence;
    a few samples would be judged by a test that cannot reach alpha. Either way the answer would
    not be a measurement's, so the files are bad input (exit 2), like a predicted result.
    """
    need = min_samples(alpha)
    short = [(p, t.runs) for p, t in (baseline, current) if t.runs < need]
    if short:
        has = "; ".join(f"{p} has {n} sample{'' if n == 1 else 's'}" for p, n in short)
        raise DataError(
            f"{has}: at --alpha {alpha:g} the Mann-Whitney U test needs at least {need} samples per "
            "side to ever find a difference; measure more runs"
        )
    (bp, tb), (cp, tc) = baseline, current
    p_min = smallest_p_value(tb.runs, tc.runs)
    if p_min >= alpha:
        raise DataError(
            f"{bp} ({tb.runs} samples) and {cp} ({tc.runs} samples): the smallest p the Mann-Whitney "
            f"U test gives for these counts is {p_min:.2g}, not below --alpha {alpha:g}; measure more runs"
        )


#: Smallest median change a regression verdict needs. The test sees only the spread within one
#: run, and a rebuild moves the median by more: the same model, benched twice on the H200 at 8 SMs,
#: measured 1.4 % apart (benchmarks/results/h200_compare/compare_repeat.json).
MIN_EFFECT = 0.02


def compare_paths(
    baseline: str | Path, current: str | Path, alpha: float = 0.01, min_effect: float = MIN_EFFECT
) -> RegressionReport:
    """Two measurement files, or two folders whose files pair up by name."""
    if not 0 < alpha < 1:
        raise DataError(f"alpha {alpha:g}: expected a p-value threshold between 0 and 1")
    if not 0 <= min_effect < 1:
        raise DataError(f"min effect {min_effect:g}: expected a fraction such as 0.02 (2 %)")
    b, c = Path(baseline), Path(current)
    for p in (b, c):
        if not p.exists():
            raise no_such_file(p, DataError, folder=True)
    if b.is_dir() != c.is_dir():
        raise DataError(f"compare two files or two folders, not {b} with {c}")
    if b.is_dir():
        bf, cf = _measurement_files(b), _measurement_files(c)
        names = sorted(bf.keys() & cf.keys())
        if not names:
            raise DataError(f"no measurement file (*.json) has the same name in {b} and {c}")
        jobs = [(n, bf[n], cf[n]) for n in names]
        only_b, only_c = sorted(bf.keys() - cf.keys()), sorted(cf.keys() - bf.keys())
    else:
        jobs, only_b, only_c = [(c.stem, b, c)], [], []
    pairs = []
    for name, bp, cp in jobs:
        tb, tc = load_timing(bp), load_timing(cp)
        check_testable((bp, tb), (cp, tc), alpha)
        pairs.append(Pair(name, bp, cp, tb, tc, compare(tb, tc, alpha, min_effect), differences(tb, tc)))
    return RegressionReport(pairs, alpha, min_effect, only_b, only_c)
