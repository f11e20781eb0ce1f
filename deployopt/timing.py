"""Statistics over latency samples: median, IQR, bootstrap CI, and a two-sample comparison.

Every latency deployopt prints goes through `Timing`, which says whether it was measured (on what,
how many runs) or predicted (by which model).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from deployopt.clocks import throttle_record_problem
from deployopt.errors import BackendFailed, DataError, DeployoptError, no_such_file
from deployopt.fileio import read_json_input

BOOTSTRAP_RESAMPLES = 2000
#: The fewest runs a 95 % CI of the median needs: from n samples the widest interval there is,
#: [min, max], holds the median with probability 1 - 2 * 0.5**n (50 % at 2 runs, 93.75 % at 5,
#: 96.9 % at 6), and the bootstrap's percentile interval of 2 to 5 runs was [min, max], labelled 95 %.
CI_MIN_RUNS = 6
# More samples than anyone times on purpose: a typo (or 10**20) would otherwise loop until Ctrl-C.
MAX_RUNS = 100_000
#: Most replicates `bench --repeat` takes: each is a fresh session (a new process for torch and
#: tensorrt), and a test on replicate medians gains little past a few dozen.
MAX_REPEAT = 100


def counted(n: int, noun: str) -> str:
    """'1 run', '3 runs': a count with its noun in the right number (`--runs 1` printed '1 runs')."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def shown_setting(flag: str, value: Any) -> str:
    """A setting and its value as an error names it: a CLI option as typed (`--runs 0`), or a
    library argument or config field as written (`runs=0`: a library caller wrote no option)."""
    return f"{flag} {value}" if flag.startswith("-") else f"{flag}={value!r}"


def check_run_counts(
    runs: int | None, warmup: int | None = None, flag: str = "--runs", warmup_flag: str = "--warmup"
) -> None:
    """One-line errors for sample counts, shared by every command that times: at least one run,
    no negative warm-up, and neither above MAX_RUNS. `flag`, `warmup_flag`: what the caller calls
    them, a CLI option (`--runs 0: ...`) or a config field (`runs=0: ...`, `shown_setting`)."""
    if runs is not None and not 1 <= runs <= MAX_RUNS:
        raise DeployoptError(f"{shown_setting(flag, runs)}: must be between 1 and {MAX_RUNS:,}")
    if warmup is not None and not 0 <= warmup <= MAX_RUNS:
        raise DeployoptError(f"{shown_setting(warmup_flag, warmup)}: must be between 0 and {MAX_RUNS:,}")


def check_repeat(repeat: int) -> None:
    """`bench --repeat N`: a one-line error unless 1 <= N <= MAX_REPEAT (checked before anything is
    timed: a typo must not cost a measurement)."""
    if not 1 <= repeat <= MAX_REPEAT:
        raise DeployoptError(f"--repeat {repeat}: must be between 1 and {MAX_REPEAT}")


@dataclass(frozen=True)
class Replicate:
    """One independent measurement inside a replicated result (`bench --repeat`): how many of the
    result's samples it holds (they follow the previous replicate's in samples_us) and when it
    ended. Its median is computed from those samples, never stored apart from them."""

    runs: int
    measured_at: str | None = None


@dataclass
class Timing:
    """Latency samples of one model (or layer) on one backend, in microseconds."""

    backend: str
    samples_us: list[float]
    warmup: int = 0
    timed: str = ""
    environment: dict[str, Any] = field(default_factory=dict)
    measured: bool = True
    predictor: str | None = None  # set when measured is False: which model predicted it
    #: What was timed: {"file": name, "sha256": hex of its bytes} (deployopt.regression.model_identity),
    #: so `compare` can tell a wrong pair from a regression. None where the writer did not record it.
    model: dict[str, Any] | None = None
    #: When it was measured, UTC ISO 8601 to the second ("2026-12-02T09:30:00Z", measured_now), so
    #: `compare` can tell last week's file left in place by a failed run from this week's. None where
    #: the writer did not record it (older files, trtexec --exportTimes).
    measured_at: str | None = None
    #: The split of samples_us into independent measurements (`bench --repeat N`: N fresh sessions,
    #: their samples concatenated in order), so `compare` can test between-run variation on their
    #: medians. None: one measurement (every result before replicates, and --repeat 1).
    replicates: list[Replicate] | None = None

    def __post_init__(self) -> None:
        if not self.samples_us:
            raise ValueError("a Timing needs at least one sample")
        if self.replicates is not None:
            if not self.replicates or any(r.runs < 1 for r in self.replicates):
                raise ValueError("replicates must each hold at least one sample")
            total = sum(r.runs for r in self.replicates)
            if total != len(self.samples_us):
                raise ValueError(
                    f"its replicates hold {total} runs in all, but samples_us has {len(self.samples_us)}"
                )

    @property
    def replicate_count(self) -> int:
        """Independent measurements in this result (1 without a replicates record)."""
        return len(self.replicates) if self.replicates else 1

    def replicate_samples(self) -> list[list[float]]:
        """samples_us split by replicate, in order ([samples_us] for one measurement)."""
        if not self.replicates:
            return [list(self.samples_us)]
        out, i = [], 0
        for r in self.replicates:
            out.append(list(self.samples_us[i : i + r.runs]))
            i += r.runs
        return out

    @property
    def replicate_medians_us(self) -> list[float]:
        return [float(np.median(s)) for s in self.replicate_samples()]

    def replicate_text(self) -> str:
        """'3 replicates of 100 runs, medians 512.1, 515.3, 510.0 µs (spread 1.0 %)': each one's
        median and max/min - 1 of them ('' for one measurement)."""
        if self.replicate_count < 2:
            return ""
        sizes = {r.runs for r in self.replicates or []}
        each = f"of {counted(sizes.pop(), 'run')}" if len(sizes) == 1 else f"of {self.runs} runs in all"
        meds = self.replicate_medians_us
        spread = 100 * (max(meds) / min(meds) - 1) if min(meds) > 0 else float("inf")
        return (
            f"{self.replicate_count} replicates {each}, medians {', '.join(f'{m:.1f}' for m in meds)} µs "
            f"(spread {spread:.1f} %: slowest / fastest - 1)"
        )

    @classmethod
    def from_replicates(cls, parts: list[Timing]) -> Timing:
        """One result of several independent measurements of the same model (`bench --repeat`):
        their samples concatenated in order (so a reader that knows no replicates still reads every
        sample), the split recorded as `replicates`. Backend, what was timed and the model are the
        first's; the environment is the first's too, unless a later one recorded its GPU's clock
        held down (deployopt.clocks), which then is kept, so compare still flags the result."""
        if not parts:
            raise ValueError("no replicates")
        first, *rest = parts
        if rest:  # the first one's result with the others added: appended's rule, one place
            return replace(first, replicates=None).appended(rest)
        return replace(
            first,
            samples_us=[float(x) for x in first.samples_us],
            replicates=[Replicate(first.runs, first.measured_at)],
        )

    def appended(self, parts: list[Timing]) -> Timing:
        """This result with `parts` (measured later, in a separate `bench --append`) added as
        replicates after its own: a result of one run becomes its first replicate. Bench them
        interleaved with another model's runs and each side's replicates span the same stretch of
        the host's load, which three back-to-back replicates do not. Backend, what was timed, the
        model and the environment stay this result's (bench checks the parts match them), unless a
        part's GPU clock was held down and this result's was not: that environment is kept, as in
        from_replicates, so compare still flags it. measured_at is the latest of all."""
        if not parts:
            raise ValueError("no replicates to append")
        from deployopt.clocks import held_down_phrase

        envs = [self.environment, *(p.environment for p in parts)]
        env = next((e for e in envs if held_down_phrase(e)), self.environment)
        times = [t for t in (self.measured_at, *(p.measured_at for p in parts)) if t is not None]
        own = self.replicates or [Replicate(self.runs, self.measured_at)]
        return replace(
            self,
            samples_us=[float(x) for x in self.samples_us] + [float(x) for p in parts for x in p.samples_us],
            environment=env,
            measured_at=max(times, key=measured_time) if times else None,
            replicates=[*own, *(Replicate(p.runs, p.measured_at) for p in parts)],
        )

    @property
    def runs(self) -> int:
        return len(self.samples_us)

    @property
    def median_us(self) -> float:
        return float(np.median(self.samples_us))

    @property
    def iqr_us(self) -> float:
        q1, q3 = self.quartiles_us
        return q3 - q1

    @property
    def ci95_us(self) -> tuple[float, float]:
        """The 95 % CI of the median this result shows (bench's table and JSON, describe, reports).
        One run: the seeded bootstrap of its samples (sample_ci95_us). Several replicates (`bench
        --repeat`, confirmation builds): Student's t on the log of each replicate's median
        (replicate_median_ci), a CI of their geometric mean, as compare's replicate test sizes a
        change. The pooled samples' bootstrap took 600 samples of 3 runs as independent and left out
        the variation between runs that --repeat exists to show: [1019.9, 1021.1] µs beside
        replicate medians 982.8, 1020.9 and 1025.3 (it held the true median in 4 % of simulated
        results). Where the replicate medians are all alike (ci_known False) it is that median twice."""
        if self.replicate_count > 1:
            meds = self.replicate_medians_us
            return replicate_median_ci(meds) or (replicate_center(meds),) * 2
        return self.sample_ci95_us

    @property
    def sample_ci95_us(self) -> tuple[float, float]:
        """The seeded bootstrap's 95 % CI of the median of samples_us as one run's, computed once per
        set of samples: compare's size check (which is about the samples) reads it, and 20 000
        samples take 0.8 s. Cached against the samples themselves (a tuple of the same floats,
        compared without copying them), so samples replaced or changed in place are bootstrapped
        anew."""
        key = tuple(self.samples_us)
        cached = self.__dict__.get("_ci95_cache")  # no dataclass field: not in ==, repr or to_json
        if cached is not None and cached[0] == key:
            return cached[1]
        ci = bootstrap_median_ci(self.samples_us)
        self.__dict__["_ci95_cache"] = (key, ci)
        return ci

    @property
    def quartiles_us(self) -> tuple[float, float]:
        """The first and third quartiles: where the middle half of the samples lies (skewed timer
        samples put it off-centre around the median, so bars of ±IQR/2 drew it in the wrong place)."""
        q1, q3 = np.percentile(self.samples_us, [25, 75])
        return float(q1), float(q3)

    @property
    def spread_known(self) -> bool:
        """Whether the IQR and the bootstrap CI say anything: one measured sample gives a spread of 0
        and a CI [x, x] that only look exact. A prediction is deterministic: its spread is 0."""
        return self.runs >= 2 or not self.measured

    def spread_text(self) -> str:
        """Why the spread is missing, for tables: 'n/a (1 run)'."""
        return f"n/a ({counted(self.runs, 'run')})"

    @property
    def ci_known(self) -> bool:
        """Whether a 95 % CI of the median exists for these samples (CI_MIN_RUNS): from fewer runs
        the bootstrap's interval is the samples' range, which holds the median less often. A
        replicated result's CI is on its replicate medians: it exists where they show a spread."""
        if self.replicate_count > 1:
            return replicate_median_ci(self.replicate_medians_us) is not None
        return self.runs >= CI_MIN_RUNS or not self.measured

    def ci_text(self) -> str:
        """Why the CI is missing, for tables: 'n/a (5 runs; a 95% CI of the median needs 6)'."""
        if self.replicate_count > 1:
            return (
                f"n/a (the {self.replicate_count} replicates' medians are all alike: no spread between "
                "runs to size a CI by)"
            )
        return f"n/a ({counted(self.runs, 'run')}; a 95% CI of the median needs {CI_MIN_RUNS})"

    def ci_phrase(self) -> str:
        """What ci95_us is a CI of, for a table beside it: '(bootstrap)' for one run; for replicates
        '(Student's t on the logs of the 3 replicate medians: of their geometric mean 1009.5 µs,
        the variation between runs included)'."""
        if self.replicate_count < 2:
            return "(bootstrap)"
        center = replicate_center(self.replicate_medians_us)
        return (
            f"(Student's t on the logs of the {self.replicate_count} replicate medians: of their geometric "
            f"mean {center:.1f} µs, the variation between runs included)"
        )

    def describe(self) -> str:
        """One human line, e.g. 'measured on torch (H200, 8 SMs): 512.3 µs median, IQR 2.1 µs, 100 runs'."""
        if not self.measured:
            return f"predicted by {self.predictor or 'a model'}: {self.median_us:.1f} µs (not measured)"
        from deployopt.environment import where_measured

        where = where_measured(self.environment)
        where = f" ({where})" if where else ""
        if not self.spread_known:
            return (
                f"measured on {self.backend}{where}: {self.median_us:.1f} µs, IQR and CI {self.spread_text()}"
            )
        if self.ci_known:
            lo, hi = self.ci95_us
            of = f" of {self.replicate_count} replicate medians" if self.replicate_count > 1 else ""
            ci = f"95% CI [{lo:.1f}, {hi:.1f}]{of}"
        elif self.replicate_count > 1:
            ci = "no 95% CI (replicate medians all alike)"
        else:
            ci = f"no 95% CI (a CI of the median needs {CI_MIN_RUNS} runs)"
        return (
            f"measured on {self.backend}{where}: {self.median_us:.1f} µs median, "
            f"IQR {self.iqr_us:.1f} µs, {ci}, {counted(self.runs, 'run')}"
        )

    def to_json(self) -> dict[str, Any]:
        """The measurement as JSON; iqr_us and ci95_us are null when there is no spread to show
        (one measured sample: see spread_known), ci95_us also below CI_MIN_RUNS runs (ci_known). A
        replicated result's ci95_us is on its replicate medians (ci95_us; null where they are all
        alike). A prediction has no spread, runs or warmup (null): `runs: 1, iqr_us: 0` and a CI
        [x, x] read as one exact sample, beside the report's own row of it saying null."""
        known = self.spread_known and self.measured
        out: dict[str, Any] = {
            "backend": self.backend,
            "measured": self.measured,
            "median_us": self.median_us,
            "iqr_us": self.iqr_us if known else None,
            "ci95_us": list(self.ci95_us) if known and self.ci_known else None,
            "runs": self.runs if self.measured else None,
            "warmup": self.warmup if self.measured else None,
            "samples_us": [float(x) for x in self.samples_us],
            "timed": self.timed,
            "environment": self.environment,
        }
        if not self.measured:
            out["predictor"] = self.predictor
        if self.model is not None:
            out["model"] = self.model
        if self.measured_at is not None:
            out["measured_at"] = self.measured_at
        if self.replicates is not None:
            out["replicates"] = self.replicates_json()
        return out

    def replicates_json(self) -> list[dict[str, Any]] | None:
        """The "replicates" record: runs, median_us, iqr_us (null for one run) and measured_at of
        each. Median and IQR are for the reader: compare recomputes them from samples_us, which
        stays the one source of every number. None for one measurement."""
        if self.replicates is None:
            return None
        out = []
        for r, s in zip(self.replicates, self.replicate_samples()):
            med, spread = median_iqr(s)
            entry: dict[str, Any] = {"runs": r.runs, "median_us": med, "iqr_us": spread}
            if r.measured_at is not None:
                entry["measured_at"] = r.measured_at
            out.append(entry)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Timing:
        return cls(
            backend=d["backend"],
            samples_us=list(d["samples_us"]),
            warmup=d.get("warmup") or 0,  # null: a prediction's
            timed=d.get("timed", ""),
            environment=d.get("environment", {}),
            measured=d.get("measured", True),
            predictor=d.get("predictor"),
            model=d.get("model"),
            measured_at=d.get("measured_at"),
            replicates=parse_replicates(d.get("replicates")),
        )


def parse_replicates(value: Any) -> list[Replicate] | None:
    """A result's "replicates" as Replicate records (None when absent or null); ValueError, one
    line, for anything but a non-empty list of {"runs": N >= 1, ...} objects."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ValueError(
            f'"replicates" must be a non-empty list of {{"runs": N}}, not {json.dumps(value)[:40]}'
        )
    out = []
    for r in value:
        runs = r.get("runs") if isinstance(r, dict) else None
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
            raise ValueError(
                f'each of "replicates" needs "runs", a whole number of at least 1, not {json.dumps(r)[:60]}'
            )
        when = r.get("measured_at")
        if when is not None:
            try:
                measured_time(when)
            except ValueError:
                raise ValueError(
                    f'a replicate\'s "measured_at" must be a UTC ISO 8601 time, not {json.dumps(when)[:40]}'
                ) from None
        out.append(Replicate(runs, when))
    return out


def median_iqr(values: Sequence[float]) -> tuple[float, float | None]:
    """(median, IQR) of one layer's per-run times, as Timing computes them; the IQR is None for
    fewer than 2 runs. A profile's per-layer medians printed with no spread broke the rule every
    measured latency follows (median, spread, runs)."""
    median = float(np.median(values)) if len(values) else 0.0
    if len(values) < 2:
        return median, None
    q1, q3 = np.percentile(values, [25, 75])
    return median, float(q3 - q1)


def measured_now() -> str:
    """Now as a result's "measured_at": UTC, ISO 8601, to the second (2026-12-02T09:30:00Z)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


#: ISO 8601 as Python 3.11's datetime.fromisoformat reads it with a time part, parsed here so that
#: every Python reads the same (3.9 and 3.10's fromisoformat reads only 3 or 6 fraction digits and
#: ±HH:MM; a file compared on one Python was refused on another). The date: YYYY-MM-DD, YYYYMMDD,
#: YYYY-Www[-D] or YYYYWww[D] (ISO weeks); then any one character (T, t, a space, ...); the time:
#: HH, HH:MM, HHMM, HH:MM:SS or HHMMSS, the seconds with a fraction of any length after . or ,
#: (truncated to microseconds); the offset: Z (or z), or ±HH, ±HHMM, ±HH:MM, ±HHMMSS or ±HH:MM:SS,
#: its seconds with a fraction too. Refused where fromisoformat reads them otherwise than they say:
#: a fraction of an hour or minute (17.5, read as 17:00:00.5), characters between the time and its
#: offset (`17:30:15x+05:00`), an offset's minutes or seconds past 59 (+05:60, read as +06:00)
_ISO_DATE = re.compile(
    r"(\d{4})(?:-(\d{2})-(\d{2})|(\d{2})(\d{2})|-W(\d{2})(?:-(\d))?|W(\d{2})(\d)?)", re.ASCII
)
_ISO_CLOCK = re.compile(
    r"(\d{2})(?:(:?)(\d{2})(?:\2(\d{2})(?:[.,](\d*))?)?)?"
    r"(?:([Zz])|([+-])(\d{2})(?:(:?)(\d{2})(?:\9(\d{2})(?:[.,](\d+))?)?)?)?",
    re.ASCII,
)


def _iso_separator(text: str) -> int:
    """Where the date ends and the one character before the time is, found as 3.11's
    fromisoformat finds it (`_find_isoformat_datetime_separator`): YYYY-MM-DD and YYYY-Www-D end at
    10, YYYYMMDD, YYYY-Www and YYYYWwwD at 8, YYYYWww at 7 (digits after YYYYWww: by their count)."""
    n = len(text)
    if n < 10:  # a date, the separator and a 2-digit hour at the least
        raise ValueError("not ISO 8601")
    if text[4] == "-":
        if text[5] != "W":
            return 10
        if text[8] == "-":
            return 8 if n > 10 and text[10] in "0123456789" else 10
        return 8
    if text[4] != "W":
        return 8
    end = 7
    while end < n and text[end] in "0123456789":
        end += 1
    return end if end < 9 else (7 if end % 2 == 0 else 8)


def _iso_micro(digits: str | None) -> int:
    """A fraction of a second's digits as microseconds, the seventh digit on cut (as 3.11 does)."""
    return int((digits or "0")[:6].ljust(6, "0"))


def measured_time(value: Any) -> datetime:
    """A "measured_at" as a time that compares across offsets; ValueError for anything but ISO 8601
    (`_ISO_DATE`, `_ISO_CLOCK`) with a UTC offset or Z (a time without one is ambiguous: whose
    local time?)."""
    if not isinstance(value, str):
        raise ValueError("not a string")
    text = value.strip()
    at = _iso_separator(text)
    d, t = _ISO_DATE.fullmatch(text[:at]), _ISO_CLOCK.fullmatch(text[at + 1 :])
    if d is None or t is None:
        raise ValueError("not ISO 8601")
    year, month, day, b_month, b_day, week, weekday, b_week, b_weekday = d.groups()
    hour, _, minute, second, frac, zulu, sign, off_h, _, off_m, off_s, off_frac = t.groups()
    if zulu is None and sign is None:
        raise ValueError("no UTC offset")
    if week or b_week:
        # the ISO week's day (Monday 1); week 53 only in a year that has one
        iso = (int(year), int(week or b_week), int(weekday or b_weekday or 1))
        try:
            year_, month_, day_ = date.fromisocalendar(*iso).timetuple()[:3]
        except ValueError as exc:
            raise ValueError(f"week date {text[:at]}: {exc}") from None
    else:
        year_, month_, day_ = int(year), int(month or b_month), int(day or b_day)
    offset = timedelta(0)
    if sign is not None:
        if int(off_m or 0) > 59 or int(off_s or 0) > 59:
            raise ValueError("offset out of range")
        offset = timedelta(hours=int(off_h), minutes=int(off_m or 0), seconds=int(off_s or 0))
        if offset:  # as fromisoformat: +00:00:00.5 is UTC, its fraction dropped with the zero offset
            offset += timedelta(microseconds=_iso_micro(off_frac))
        if offset >= timedelta(days=1):
            raise ValueError("offset out of range")
        offset = -offset if sign == "-" else offset
    return datetime(
        year_, month_, day_, int(hour), int(minute or 0), int(second or 0), _iso_micro(frac),
        tzinfo=timezone(offset),
    )  # fmt: skip


def bootstrap_median_ci(
    samples: list[float] | np.ndarray, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap CI of the median (seeded, so reports are reproducible)."""
    x = np.asarray(samples, dtype=float)
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    # in blocks of at most ~4M indices: one (2000, n) draw took 4.8 GB for two 100 000-run files and
    # 15 GiB for a trtexec --exportTimes of 1M queries. The same stream of draws, so the same CI.
    rows = max(1, min(BOOTSTRAP_RESAMPLES, (1 << 22) // x.size))
    medians = np.concatenate(
        [
            np.median(x[rng.integers(0, x.size, size=(min(rows, BOOTSTRAP_RESAMPLES - i), x.size))], axis=1)
            for i in range(0, BOOTSTRAP_RESAMPLES, rows)
        ]
    )
    alpha = (1 - level) / 2
    lo, hi = np.quantile(medians, [alpha, 1 - alpha])
    return float(lo), float(hi)


def replicate_center(medians: Sequence[float]) -> float:
    """The geometric mean of replicate medians: what a replicated result's CI and compare's
    replicate test are of (a change is a ratio of two of them)."""
    return math.exp(float(np.mean(np.log(np.asarray(medians, dtype=float)))))


def replicate_median_ci(medians: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """Student's t-interval on the logs of replicate medians (k - 1 degrees of freedom), back in µs:
    a CI of their geometric mean that counts each run once, as compare's replicate test does, so
    the variation between runs is in it. None under 2 medians, or where they are all alike (the
    spread between runs unmeasured, not zero: an interval [x, x] would look exact), and where one is
    not above 0 (no log: [NaN, NaN] in the JSON; jetson/runner.py's twin says None too)."""
    from scipy.stats import t as student_t

    values = np.asarray(medians, dtype=float)
    if values.size < 2 or not np.all(values > 0):
        return None
    logs = np.log(values)
    if np.ptp(logs) == 0:
        return None
    se = float(np.std(logs, ddof=1)) / math.sqrt(logs.size)
    half = float(student_t.ppf(0.5 + level / 2, logs.size - 1)) * se
    mean = float(logs.mean())
    return math.exp(mean - half), math.exp(mean + half)


def build_median_ci(
    builds: list[list[float]] | list[np.ndarray], level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Two-level bootstrap CI of the median over several builds of one model: resample the builds,
    then the samples within each chosen build.

    Each build of a model is tuned anew (cuDNN re-times its algorithms), and on the H200 two builds
    of the *same* model differed by up to 0.35 %, more than one build's CI. When a comparison has
    several builds per model, this CI is the one that says what "beyond the noise" means."""
    groups = [np.asarray(b, dtype=float) for b in builds if len(b)]
    if not groups:
        raise ValueError("no samples")
    if len(groups) == 1:
        return bootstrap_median_ci(groups[0], level, seed)
    rng = np.random.default_rng(seed)
    sizes = {g.size for g in groups}
    if len(sizes) == 1:  # equal builds (the usual case): one vectorised draw
        arr, n = np.stack(groups), sizes.pop()
        pick = rng.integers(0, len(groups), size=(BOOTSTRAP_RESAMPLES, len(groups), 1))
        within = rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, len(groups), n))
        medians = np.median(arr[pick, within].reshape(BOOTSTRAP_RESAMPLES, -1), axis=1)
    else:
        medians = np.empty(BOOTSTRAP_RESAMPLES)
        for i in range(BOOTSTRAP_RESAMPLES):
            chosen = rng.integers(0, len(groups), size=len(groups))
            medians[i] = np.median(
                np.concatenate([rng.choice(groups[j], size=groups[j].size) for j in chosen])
            )
    alpha = (1 - level) / 2
    lo, hi = np.quantile(medians, [alpha, 1 - alpha])
    return float(lo), float(hi)


#: The most samples a side may have for `compare` to check whether a verdict's size is uncertain:
#: the check bootstraps both medians' CIs (0.8 s at 20 000 samples on a 2-core host, 3.5 s at
#: 100 000, 50 s for a 1M-query trtexec --exportTimes file), and a median of that many samples is
#: precise unless they split near half and half between two modes. Above it: no flag.
UNCERTAIN_MAX_RUNS = 20_000


def _us(x: float) -> str:
    """A CI bound in a one-line verdict: whole µs from 100 up (2077), 3 digits below (7.51)."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


@dataclass(frozen=True)
class Comparison:
    verdict: str  # "faster" | "slower" | "no significant difference"
    ratio: float  # median(b) / median(a)
    #: NaN: no p (a replicated pair whose replicates showed no spread between runs: no_spread)
    p_value: float
    #: significant, but the ranks moved the other way than the medians (bimodal samples), or the
    #: medians are equal (they did not move at all): no verdict
    mixed: bool = False
    #: "faster"/"slower", but the two medians' 95 % CIs overlap: the direction holds, the size
    #: (ratio) does not. Bimodal samples: the median of one side sat in the slow mode, the other's in
    #: the fast one, and -83.8 % was printed where each mode moved -20 %. The verdict stands.
    size_uncertain: bool = False
    #: the two medians' 95 % CIs (a's, b's) in µs where size_uncertain, else None
    cis_us: tuple[tuple[float, float], tuple[float, float]] | None = None
    #: a side's latency moved within its own run (first half against second half: Drift), so no
    #: faster/slower verdict: the test takes one run's samples as independent, and a host whose load
    #: stepped mid-run gave confident verdicts to A/A pairs. Set by `with_stability` (regression
    #: timing), never by `compare` alone (the optimizer's rule).
    unstable: bool = False
    #: each side's within-run check (a's, b's; None: too few samples to check), where checked
    drift: tuple[Drift | None, Drift | None] | None = None
    #: the test on replicate medians that gave this verdict (compare_replicates); None: the verdict
    #: rests on one run per side (the Mann-Whitney U test on its samples)
    replicated: ReplicateTest | None = None

    @property
    def test(self) -> str:
        """Which test gave p: 'mann-whitney-u' (one run per side) or 'student-t-log-replicate-medians'."""
        return MANN_WHITNEY if self.replicated is None else REPLICATE_TEST

    def describe(self) -> str:
        if self.unstable and self.no_spread:
            return f"unstable: {self.unstable_text()} (no verdict; ratio {self.ratio:.3f})"
        if self.unstable:
            return f"unstable: {self.drift_text()} (no verdict; p={self.p_value:.3g} between the runs)"
        if self.replicated is not None:
            r = self.replicated
            what = f"t-test on {r.counts[0]} + {r.counts[1]} replicate medians, p={self.p_value:.3g}"
            if self.verdict == "no significant difference":
                return f"no significant difference (ratio {self.ratio:.3f}, {what})"
            return f"{self.verdict}: {100 * (self.ratio - 1):+.1f}% ({what})"
        if self.verdict == "no significant difference":
            return f"no significant difference (ratio {self.ratio:.3f}, p={self.p_value:.3g})"
        uncertain = ""
        if self.size_uncertain and self.cis_us is not None:
            (alo, ahi), (blo, bhi) = self.cis_us
            uncertain = (
                f"; size uncertain: the medians' 95% CIs overlap, {_us(alo)}–{_us(ahi)} µs and "
                f"{_us(blo)}–{_us(bhi)} µs"
            )
        return f"{self.verdict}: {100 * (self.ratio - 1):+.1f}% (p={self.p_value:.3g}{uncertain})"

    @property
    def no_spread(self) -> bool:
        """A replicated pair whose replicates showed no spread between runs (every median alike on
        each side): unstable, no verdict either way, and no p (review: a deterministic +50 % read
        "no significant difference (p=1)", which a gate passes)."""
        return self.replicated is not None and not self.replicated.spread_measured

    def unstable_text(self) -> str:
        """Why an unstable pair has no verdict: a side's drift, or replicates with no spread."""
        if self.no_spread:
            return (
                "every replicate median alike on each side: no spread between runs to judge the change "
                "by (a coarse timer, or replicates of one sample)"
            )
        return self.drift_text()

    def drift_text(self, names: tuple[str, str] = ("baseline", "current")) -> str:
        """'current drifted +12.3% within its run (first half → second half)', one clause a side
        that drifted, with what that drift makes of the change between the runs where it goes the
        way of the change (', +24.6% at that rate from one run's median to the other's':
        Drift.extrapolated_pct); '' when none did."""
        sides = zip(names, self.drift or (None, None))
        return "; ".join(
            f"{name} drifted {d.change_pct:+.1f}% within {d.where} (first half → second half)"
            + (
                ""
                if d.extrapolated_pct is None
                else f", {d.extrapolated_pct:+.1f}% at that rate from one run's median to the other's"
            )
            for name, d in sides
            if d is not None and d.drifted
        )


#: Comparison.test of a verdict on one run per side, and of one on replicate medians
MANN_WHITNEY = "mann-whitney-u"
REPLICATE_TEST = "student-t-log-replicate-medians"

#: The fewest replicates each side needs for the replicate test. With one run on a side its median
#: is a single draw from the runs' modes, and the spread it is judged by is the other side's alone:
#: where runs switch between modes (cuDNN's per-process search on the H100 put run medians in two
#: groups 7 % apart) a lone run in one mode against three that landed in the other is called a
#: change. Simulated A/A pairs of such runs at --alpha 0.01: 1 against 3 called 13.1 %, 3 against 3
#: 3.3 % (bug bash 2026-12-07); until then 1 against 3 was taken (2 degrees of freedom).
REPLICATE_MIN_PER_SIDE = 2


@dataclass(frozen=True)
class ReplicateTest:
    """Student's t-test on the log of each replicate's median, pooled variance (replicate_t_test)."""

    counts: tuple[int, int]  # replicates a side (a's, b's)
    medians_us: tuple[tuple[float, ...], tuple[float, ...]]  # each replicate's median, a's and b's
    df: int
    t: float
    #: 95 % CI of the ratio b / a (of the replicates' geometric-mean medians), from the same t;
    #: (0, inf) where every replicate median on each side was alike (spread_measured False)
    ratio_ci95: tuple[float, float]

    @property
    def spread_measured(self) -> bool:
        """Whether the replicates showed any spread between runs: with none (identical medians on
        each side) the test has nothing to size a change against, and gives no verdict."""
        return math.isfinite(self.ratio_ci95[1]) and self.ratio_ci95[0] > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "replicates": {"baseline": self.counts[0], "current": self.counts[1]},
            "replicate_medians_us": {
                "baseline": list(self.medians_us[0]),
                "current": list(self.medians_us[1]),
            },
            "df": self.df,
            "t": self.t if math.isfinite(self.t) else None,
            # null where the replicates showed no spread to size it by (every median alike)
            "change_ci95_pct": ([100 * (x - 1) for x in self.ratio_ci95] if self.spread_measured else None),
        }


#: The fewest samples a side needs for the within-run stability check (halves of 5: the exact
#: test's smallest p, 2 / C(10, 5) = 0.008, is below the default alpha 0.01).
DRIFT_MIN_RUNS = 10


@dataclass(frozen=True)
class Drift:
    """One run's first half against its second half, in time order, by `compare`'s test and
    thresholds. Samples of one run are serially correlated on a loaded host (a load step moves
    every later sample), which the U test, built for independent samples, cannot see: halves that
    differ by the rule show a run that was not stationary, whose samples no test may treat as
    exchangeable."""

    runs: int  # samples in the run (the halves are runs // 2 and the rest)
    first_median_us: float
    second_median_us: float
    p_value: float
    #: p < alpha and a shift of at least min_effect (within_run_drift); with_stability also sets it on
    #: a smaller significant drift whose trend, carried between the runs, makes the pair's change
    drifted: bool
    #: which replicate (1-based) of a replicated result this is the run of (replicate_drift); None
    #: for a result of one run
    replicate: int | None = None
    #: the drift at its rate per sample, carried over the samples between the two sides' medians
    #: (with_stability; a percentage): what a steady trend running through both runs, back to back,
    #: makes of the change between them. Set where the drift is significant and goes the way of the
    #: pair's change; None otherwise (a drift against the change, a replicate's, or unchecked)
    extrapolated_pct: float | None = None

    @property
    def change_pct(self) -> float:
        return 100 * (self.second_median_us / self.first_median_us - 1)

    @property
    def where(self) -> str:
        """'its run', or 'its replicate 2' of a replicated result."""
        return "its run" if self.replicate is None else f"its replicate {self.replicate}"

    def to_json(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "first_half_median_us": self.first_median_us,
            "second_half_median_us": self.second_median_us,
            "change_pct": self.change_pct,
            "p_value": self.p_value,
            "drifted": self.drifted,
            "replicate": self.replicate,
            "extrapolated_pct": self.extrapolated_pct,
        }


def within_run_drift(t: Timing, alpha: float, min_effect: float) -> Drift | None:
    """Did `t`'s latency move within its run? Its first half against its second half (samples in
    the order they were timed): u_test p < alpha and a median shift of at least min_effect. None
    for a prediction, fewer than DRIFT_MIN_RUNS samples (too few to tell) or a first half whose
    median is under MIN_MEDIAN_US (a change from 0 µs has no size; check_samples passes such a run
    whole); a second half of zeros is a drift of -100 %."""
    if not t.measured or t.runs < DRIFT_MIN_RUNS:
        return None
    half = t.runs // 2
    first, second = t.samples_us[:half], t.samples_us[half:]
    m1, m2 = float(np.median(first)), float(np.median(second))
    if m1 < MIN_MEDIAN_US:  # a first half of zeros: no change from it has a size (it divided by 0)
        return None
    _, p = u_test(first, second)
    shift = abs(m2 / m1 - 1)
    drifted = p < alpha and shift >= min_effect * (1 - 1e-9) and m1 != m2
    return Drift(t.runs, m1, m2, p, drifted)


def replicate_drift(t: Timing, alpha: float, min_effect: float) -> Drift | None:
    """within_run_drift of each replicate of `t` on its own samples (halves across two replicates
    would be two runs, not a drift): the replicate that drifted most, else the one that moved most,
    with its 1-based number; None where no replicate has DRIFT_MIN_RUNS samples. A result of one
    run is checked as within_run_drift does (replicate None: it has no replicates)."""
    if t.replicate_count < 2:
        return within_run_drift(t, alpha, min_effect)
    found = []
    for i, samples in enumerate(t.replicate_samples(), 1):
        d = within_run_drift(replace(t, samples_us=samples, replicates=None), alpha, min_effect)
        if d is not None:
            found.append(replace(d, replicate=i))
    if not found:
        return None
    return max(found, key=lambda d: (d.drifted, abs(d.change_pct)))


def with_stability(c: Comparison, a: Timing, b: Timing, alpha: float, min_effect: float) -> Comparison:
    """`c` with each side's within-run check (Drift). The pair gets no verdict ("no significant
    difference", unstable) where a side's drift could make its change, which the test, taking one
    run's samples as independent, cannot tell:

    - a step: a side drifted (by the rule) by at least as much as the medians differ;
    - a trend: a faster/slower verdict, and a side whose significant drift (p < alpha, any size)
      goes the way of the change and, carried at its rate per sample over the samples between the
      two sides' medians (Drift.extrapolated_pct), leaves less than min_effect of the change. The
      halves of a run are half a run apart, the two runs' medians a whole one (back to back, equal
      lengths): a steady creep drifts each run by half the change it makes between them, so "a
      drift as large as the change" never fired. Same model, latency creeping +6 % a run: "slower
      +5.8 %, p=2.6e-34", each side "drifted +2.9 % … so the verdict stands"; at +3 % a run the
      drift (1.5 %) was under min_effect and nothing was said (bug bash 2026-12-07). Such a side is
      marked drifted, whatever its size.

    A smaller drift keeps the verdict (`drift` records it, compare prints a note): on an H100 every
    torch run got 2–2.5 % faster over its first 100 of 200 runs, and withholding every verdict over
    that hid a 30 % regression as well as the A/A false alarms it was meant to stop. A drift against
    the change is not carried over (a warm-up each run repeats is no trend between the runs), and
    a real change at least min_effect beyond the trend keeps its verdict.

    A verdict on replicate medians (c.replicated) records a replicated side's drift (replicate_drift)
    as a note: a run that drifts moves its median, which the test counts as variation between runs.
    A side of one run against replicates (compare refuses it since 2026-12-07, REPLICATE_MIN_PER_SIDE;
    a caller of this function may not) keeps the rules above: its one median adds nothing to the
    spread the test measures, so a drift of its own could make the change unseen (review: a
    baseline run stepping +8 % mid-run was called "faster -3.9 %" against 3 steady replicates)."""
    if c.replicated is not None:
        drift = (replicate_drift(a, alpha, min_effect), replicate_drift(b, alpha, min_effect))
    else:
        drift = (within_run_drift(a, alpha, min_effect), within_run_drift(b, alpha, min_effect))
    change = abs(c.ratio - 1) * 100
    called = c.verdict in ("faster", "slower")
    checked: list[Drift | None] = []
    unstable = False
    for d in drift:
        # a replicate's drift (replicate set) is counted by the replicate test; a single run's is not
        if d is None or d.replicate is not None:
            checked.append(d)
            continue
        step = d.drifted and abs(d.change_pct) >= change
        trend = _trend_ratio(d, c.ratio, (a.runs + b.runs) / d.runs, alpha)
        if trend is not None:
            d = replace(d, extrapolated_pct=100 * (trend - 1))
            # what is left of the change once the trend is taken out, in the verdict's direction
            left = c.ratio / trend
            if called and (left - 1 if c.ratio > 1 else 1 - left) < min_effect * (1 - 1e-9):
                step, d = True, replace(d, drifted=True)
        unstable = unstable or step
        checked.append(d)
    sides = (checked[0], checked[1])
    if not unstable:
        return replace(c, drift=sides)
    return replace(
        c, verdict="no significant difference", size_uncertain=False, cis_us=None, unstable=True, drift=sides
    )


def _trend_ratio(d: Drift, ratio: float, scale: float, alpha: float) -> float | None:
    """The change a steady trend at `d`'s rate makes between the two sides' medians (a ratio, as
    Comparison.ratio), or None where `d` is no such trend: not significant, or against the change.
    `scale`: the samples between the medians over those between the halves' (both sides' runs over
    this side's: 2 for two runs of equal length, back to back); compounded, as a change is a ratio."""
    shift = d.second_median_us / d.first_median_us
    if not (d.p_value < alpha and shift != 1 and ratio != 1 and (shift > 1) == (ratio > 1)):
        return None
    return float(shift**scale)


def compare(a: Timing, b: Timing, alpha: float = 0.01, min_effect: float = 0.01) -> Comparison:
    """Is `b` faster or slower than `a`? Mann-Whitney U plus a minimum effect size.

    A difference must be both significant (p < alpha) and larger than `min_effect` (relative) to
    count: with thousands of samples, tiny clock drifts are "significant" but not real gains.
    """
    ratio = b.median_us / a.median_us
    agrees = True  # the U statistic points the way the medians moved
    if a.runs < 2 or b.runs < 2:
        p = 0.0 if ratio != 1 else 1.0
    else:
        u, p = u_test(a.samples_us, b.samples_us)
        # U counts the pairs where a's sample is the larger: over half of them means b tends to be
        # faster. Bimodal samples can move the median one way and the bulk the other: a "slower"
        # verdict (exit 1) rested on a test that found b faster.
        half = a.runs * b.runs / 2
        # Equal medians did not move at all, so no direction agrees with significant ranks: at
        # --min-effect 0 such a pair was "slower" (ratio < 1 is false), exit 1, though most of its
        # runs were faster. No verdict, and mixed where p < alpha (the ranks moved, the medians not).
        agrees = ratio != 1 and (u > half) == (ratio < 1)
    # at least min_effect, up to float rounding: 1025.61 / 1005.5 is 1.019999… and +2.0 % exactly
    # was "under min effect"
    if p < alpha and agrees and abs(ratio - 1) >= min_effect * (1 - 1e-9):
        cis = _overlapping_cis(a, b)
        return Comparison(
            "faster" if ratio < 1 else "slower", ratio, p, size_uncertain=cis is not None, cis_us=cis
        )
    return Comparison("no significant difference", ratio, p, mixed=p < alpha and not agrees)


def replicate_t_test(
    a_medians: Sequence[float], b_medians: Sequence[float]
) -> tuple[float, int, float, float, float]:
    """(t, df, two-sided p, mean log difference b - a, its standard error) of Student's t-test on
    the logs of two sets of replicate medians, with pooled variance; t and p NaN (no p) and the
    error 0 where every median on each side is alike (no spread between runs to test by).

    Why this test: a regression is a shift of the whole set of run medians, and the run is the
    unit that varies (a new process, a new kernel search, the host's load), so each replicate
    gives one value, its median, and the test is on those values, not on the pooled samples (which
    would count one run's hundreds of samples as independent evidence). Logs, because a change is
    a ratio (min_effect is relative) and a run's spread grows with its latency. Student's pooled
    variance rather than Welch's: both sides are the same setup's runs (compare flags a setup that
    differs), so they share one between-run variance, and pooling lets a side of one run (an older
    baseline) be judged against the spread the other side shows; Welch's test has no variance for
    a side of one and, at 3 against 3, as few as 2 degrees of freedom. A rank test on the medians
    (Mann-Whitney) cannot go below p = 0.1 at 3 against 3, never a verdict at alpha 0.01."""
    from scipy.stats import t as student_t

    la = np.log(np.asarray(a_medians, dtype=float))
    lb = np.log(np.asarray(b_medians, dtype=float))
    df = la.size + lb.size - 2
    if df < 1:
        raise ValueError("the replicate test needs at least 3 replicates in all")
    diff = float(lb.mean() - la.mean())
    ss = float(((la - la.mean()) ** 2).sum() + ((lb - lb.mean()) ** 2).sum())
    se = math.sqrt(ss / df * (1 / la.size + 1 / lb.size))
    # every replicate alike on each side (a coarse timer, one-sample replicates, a deterministic
    # fake): the spread between runs is unmeasured, not zero, so nothing is judged and there is no p
    # (NaN). Told by the medians themselves: the mean of three equal logs can round off them, and
    # se came out 1e-16, not 0, so 3 × 1000 µs against 3 × 1300 µs was "slower, p=2e-58"; where it
    # was 0, p read 1, a certainty of no change that a gate passes
    if se == 0 or (np.ptp(la) == 0 and np.ptp(lb) == 0):
        return math.nan, df, math.nan, diff, 0.0
    t = diff / se
    return t, df, float(min(1.0, 2 * student_t.sf(abs(t), df))), diff, se


def compare_replicates(a: Timing, b: Timing, alpha: float = 0.01, min_effect: float = 0.01) -> Comparison:
    """Is `b` faster or slower than `a`, judged on their replicates' medians (replicate_t_test)?
    A verdict needs p < alpha and a ratio of the geometric means of the replicate medians at least
    `min_effect` from 1, as `compare` asks of one run a side. ValueError under 3 replicates in all."""
    from scipy.stats import t as student_t

    ma, mb = a.replicate_medians_us, b.replicate_medians_us
    t, df, p, diff, se = replicate_t_test(ma, mb)
    ratio = math.exp(diff)
    half = float(student_t.ppf(0.975, df)) * se if se > 0 else math.inf  # se 0: spread unmeasured
    test = ReplicateTest(
        counts=(len(ma), len(mb)),
        medians_us=(tuple(ma), tuple(mb)),
        df=df,
        t=t,
        ratio_ci95=(math.exp(diff - half), math.exp(diff + half)),
    )
    if not test.spread_measured:  # spread unmeasured, not zero: no verdict either way (unstable)
        return Comparison("no significant difference", ratio, p, replicated=test, unstable=True)
    if p < alpha and ratio != 1 and abs(ratio - 1) >= min_effect * (1 - 1e-9):
        return Comparison("faster" if ratio < 1 else "slower", ratio, p, replicated=test)
    return Comparison("no significant difference", ratio, p, replicated=test)


def _overlapping_cis(a: Timing, b: Timing) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """Both medians' 95 % CIs where they overlap (the size of a verdict not pinned down), else None.
    None too where a side has no CI (a prediction, fewer than CI_MIN_RUNS runs) or more than
    UNCERTAIN_MAX_RUNS samples (its bootstrap takes seconds: see there). Only significant verdicts
    ask, so the no-difference path bootstraps nothing. The samples' bootstrap (sample_ci95_us) of
    each side, replicated or not: this rule judges the samples, and so does its size check."""
    sides = (a, b)
    if not all(t.measured and CI_MIN_RUNS <= t.runs <= UNCERTAIN_MAX_RUNS for t in sides):
        return None
    (alo, ahi), (blo, bhi) = a.sample_ci95_us, b.sample_ci95_us
    return ((alo, ahi), (blo, bhi)) if alo <= bhi and blo <= ahi else None


def _u_method(n1: int, n2: int) -> str:
    """The Mann-Whitney method for n1 and n2 samples, whatever ties they hold: exact when a side has
    8 or fewer, as scipy chooses for tie-free samples (with ties, u_test's own exact count).
    scipy's "auto" switches to the normal approximation on any tie, whose smallest p at 5 against
    5 is 0.012: timer samples are quantized (83 distinct values in 200 of one H200 record), so two
    sets of 5 that never overlapped could never differ at --alpha 0.01, which smallest_p_value
    (tie-free) said they could."""
    return "asymptotic" if n1 > 8 and n2 > 8 else "exact"


#: Most splits of the pooled samples the tie-aware exact test enumerates (8 against 12: 125 970)
EXACT_TIED_SPLITS = 200_000


def u_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(U of `a`, two-sided p) of the Mann-Whitney test, exact for small samples with ties too.

    scipy's exact method assumes no ties: on quantized timer samples ([100]*4+[110]*2 against
    [110]*2+[120]*4) it gave p = 0.0087 where every split of the pooled samples gives 0.013, and
    `compare` called a regression at --alpha 0.01 that the data do not support (20 % of 6-vs-6
    verdicts below 0.01 on quantized samples). With ties and few splits, p is counted over every
    split of the pooled midranks; with more, scipy's normal approximation, which corrects for ties."""
    from math import comb

    from scipy.stats import mannwhitneyu, rankdata

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    pooled = np.concatenate([x, y])
    method = _u_method(len(x), len(y))
    tied = len(np.unique(pooled)) < len(pooled)
    if not (tied and method == "exact"):
        test = mannwhitneyu(x, y, alternative="two-sided", method=method)
        return float(test.statistic), float(test.pvalue)
    small = min(len(x), len(y))
    if comb(len(pooled), small) > EXACT_TIED_SPLITS:
        test = mannwhitneyu(x, y, alternative="two-sided", method="asymptotic")
        return float(test.statistic), float(test.pvalue)
    from itertools import combinations

    ranks = rankdata(pooled)  # midranks: a tie shares its ranks' mean
    n1 = len(x)
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2)
    # U of every split of the pooled samples into n1 and the rest (the smaller side enumerated)
    picks = np.array(list(combinations(range(len(pooled)), small)), dtype=np.int64)
    sums = ranks[picks].sum(axis=1)
    us = sums - small * (small + 1) / 2 if small == n1 else (ranks.sum() - sums) - n1 * (n1 + 1) / 2
    # two-sided as scipy's: twice the smaller tail (ties make U's null distribution asymmetric)
    tail = min(np.mean(us <= u + 1e-9), np.mean(us >= u - 1e-9))
    return u, float(min(1.0, 2 * tail))


def smallest_p_value(n1: int, n2: int) -> float:
    """The smallest p `compare`'s Mann-Whitney U test can give for n1 and n2 samples: that of two
    samples that do not overlap at all (same scipy call, so the same exact/asymptotic choice).
    When it is not below alpha, no pair of measurements of these sizes can ever differ."""
    if n1 < 1 or n2 < 1:
        return 1.0
    from scipy.stats import mannwhitneyu

    lo, hi = np.arange(n1, dtype=float), np.arange(n1, n1 + n2, dtype=float)
    return float(mannwhitneyu(lo, hi, alternative="two-sided", method=_u_method(n1, n2)).pvalue)


def min_samples(alpha: float) -> int:
    """Fewest samples per side (both sides equal) for which the test can give p < alpha.

    For small samples the exact two-sided p is at least 2 / C(2n, n): 5 samples at alpha 0.01,
    4 at 0.05. Measured files with fewer cannot support a verdict; `compare` itself does not
    refuse them, because a prediction (one deterministic sample) is meant to compare that way.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    for n in range(1, 65):
        if smallest_p_value(n, n) < alpha:
            return n
    lo, hi = 64, 128  # the asymptotic (normal) region: p falls monotonically with n
    while smallest_p_value(hi, hi) >= alpha:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if smallest_p_value(mid, mid) >= alpha else (lo, mid)
    return hi


#: In every trtexec console log (its `&&&& RUNNING TensorRT.trtexec` banner), 7.x to 10.x.
TRTEXEC_LOG_MARK = "TensorRT.trtexec"


def load_timing(path: str | Path) -> Timing:
    """A measured Timing from a bench / runner result or a trtexec --exportTimes file (one-line
    DataError otherwise; a predicted latency is refused: there is nothing to test it against)."""
    p = Path(path)
    return timing_from_json(p, read_json(p))


#: The most a measurement file may hold: a bench result of 100,000 runs is about 2 MB, a trtexec
#: --exportTimes file about 200 bytes a query; a larger file is none of them, and reading one whole
#: (a 10 GB file given to compare) filled memory first.
MEASUREMENT_MAX_BYTES = 512 << 20


def read_json(p: Path) -> Any:
    """The parsed JSON of a measurement file, or a one-line DataError saying what the file is instead.
    Read by fileio.read_json_input: a named pipe (`compare <(ssh board cat r.json) b.json`) nothing
    writes to is one line after a few seconds (it hung), a device or a file over
    MEASUREMENT_MAX_BYTES is one line before it is read (/dev/zero filled memory)."""
    if p.is_dir():
        raise DataError(f"{p} is a folder; expected a measurement file (or give two folders)")
    try:
        text = read_json_input(p, DataError, "a measurement file (JSON)", MEASUREMENT_MAX_BYTES).decode()
        return json.loads(text)
    except FileNotFoundError:
        raise no_such_file(p, DataError) from None
    except OSError as exc:
        raise DataError(f"cannot read {p}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        if not text.strip():  # an interrupted copy or a run killed before it wrote
            raise DataError(f"{p} is empty: expected a measurement (JSON)") from None
        if TRTEXEC_LOG_MARK in text:
            raise DataError(
                f"{p} is a trtexec console log: its summary has statistics, not per-run samples; run "
                "trtexec with --exportTimes=FILE.json and compare that file"
            ) from None
        raise DataError(f"{p} is not JSON: {exc.msg}") from None
    except RecursionError:  # '[' × 100 000: json's parser recurses
        raise DataError(f"{p}: JSON nested too deeply to be a measurement") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{p} is not JSON: {exc}") from None


def timing_from_json(p: Path, data: Any) -> Timing:
    """`load_timing` of the file `p` whose JSON `read_json` gave (compare parses each file once)."""
    if data == []:
        raise DataError(f"{p} is an empty trtexec --exportTimes file: it holds no queries")
    if isinstance(data, list):
        return _from_export_times(p, data)
    if isinstance(data, dict) and data.get("tool") == "deployopt optimize":
        # the report a user has beside model.onnx: its latencies are summaries (or predictions)
        what = "measured medians, not per-run samples" if data.get("measured") else "predicted, not measured"
        raise DataError(
            f"{p} is a deployopt optimize report (its latencies are {what}): time the model it wrote "
            f"with `{bench_command_for_report(p, data)}` and compare that"
        )
    if not isinstance(data, dict) or "samples_us" not in data:
        raise DataError(
            f"{p} is neither a deployopt bench / jetson runner result (no samples_us) nor a trtexec "
            "--exportTimes file"
        )
    if "error" in data:
        raise BackendFailed(f"{p}: the measurement failed: {data['error']}")
    env = data.get("environment")
    if env is None:  # a hand-written or trimmed result: no setup to compare, not a crash later
        data = dict(data, environment={})
    elif not isinstance(env, dict):
        raise DataError(
            f"{p}: environment must be an object of setup facts (gpu, sms, ...), not {type(env).__name__}"
        )
    timed = data.get("timed")
    if timed is not None and not isinstance(timed, str):  # compare splits it into clauses: a traceback
        raise DataError(f'{p}: "timed" must be a line saying what was timed, not {json.dumps(timed)[:40]}')
    problem = throttle_record_problem(data["environment"])
    if problem:
        raise DataError(f"{p}: {problem}: a malformed record cannot show whether the clock was held down")
    samples = data["samples_us"]
    if not isinstance(samples, list):  # null, a number or a string: the line was Python's TypeError
        shown = json.dumps(samples)[:40]
        raise DataError(f"{p}: samples_us must be finite latencies (0 or more) in a list, not {shown}")
    try:
        timing = Timing.from_json(data)
    except KeyError as exc:
        raise DataError(f"{p} is not a measurement: it has no {exc.args[0]!r} field") from None
    except (ValueError, TypeError) as exc:
        raise DataError(f"{p} is not a measurement: {exc}") from None
    check_samples(p, timing, "samples_us")
    # every report line names the backend, and a "measured" of "no" read as true
    if not isinstance(timing.backend, str) or not timing.backend:
        raise DataError(f'{p}: "backend" must be the name of a backend, not {json.dumps(data["backend"])}')
    if not isinstance(timing.measured, bool):
        raise DataError(f'{p}: "measured" must be true or false, not {json.dumps(data["measured"])}')
    refuse_predicted(p, timing)
    if timing.measured_at is not None:
        try:
            measured_time(timing.measured_at)
        except ValueError:
            raise DataError(
                f'{p}: "measured_at" must be a UTC time in ISO 8601 such as 2026-12-02T09:30:00Z, not '
                f"{json.dumps(data['measured_at'])}"
            ) from None
    return timing


def bench_command_for_report(p: Path, report: dict[str, Any]) -> str:
    """The `deployopt bench` that times what an optimize report (at `p`) chose, where it was timed:
    the engine optimize wrote beside it (its "engine") with the report's TensorRT backend, on the
    board its runs name (their environment's "remote"). A `--remote` optimize was told to bench
    OUT/model.onnx on the host CPU (ort), another device than the one its numbers and engine are of."""
    backend = report.get("backend")
    timings = report.get("timings")
    remote = next(
        (
            t["environment"]["remote"]
            for t in (timings.values() if isinstance(timings, dict) else [])
            if isinstance(t, dict)
            and isinstance(t.get("environment"), dict)
            and isinstance(t["environment"].get("remote"), str)
        ),
        None,
    )
    engine = report.get("engine")
    if backend not in ("tensorrt", "trtexec", "torch"):  # ort, or a prediction (--backend model)
        return f"deployopt bench {p.parent / 'model.onnx'} -o FILE.json"
    built = isinstance(engine, str) and engine and backend != "torch" and (p.parent / engine).is_file()
    target = p.parent / engine if built else p.parent / "model.onnx"
    where = f" --remote {remote}" if remote and backend != "torch" else ""
    dtype = report.get("dtype")  # an engine's precision is the one it was built with: no --dtype
    precision = f" --dtype {dtype}" if isinstance(dtype, str) and dtype and not built else ""
    return f"deployopt bench {target} --backend {backend}{where}{precision} -o FILE.json"


def is_latency(value: Any) -> bool:
    """A number a latency in µs can be: finite and 0 or more (True and False are not numbers here).
    One rule for every sample read back: result files, the optimize journal, the layer cache."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int) and abs(value) > 1e308:  # 10**400 is valid JSON: isfinite overflowed
        return False
    return math.isfinite(value) and value >= 0


def refuse_predicted(p: str | Path, timing: Timing) -> None:
    """A predicted latency (the wave model's) has no samples to test: regression timing refuses it."""
    if not timing.measured:
        raise DataError(
            f"{p} is predicted by {timing.predictor or 'a model'}, not measured: regression timing "
            "compares measurements"
        )


#: The least median a result file may have (µs): no GPU or CPU times anything in under a nanosecond.
MIN_MEDIAN_US = 1e-3


def check_samples(p: str | Path, timing: Timing, what: str) -> None:
    """A NaN, infinite or negative sample would make a median that passes a regression gate; a
    median of 0 µs was a ZeroDivisionError traceback as the baseline and '-100 %, faster' as the
    current result; samples near float's largest (1e308) overflowed the statistics into inf after
    numpy's RuntimeWarning lines; a median under a nanosecond (5e-324 µs) gave an infinite ratio,
    written as `Infinity` in compare --json, which strict JSON readers refuse."""
    bad = [s for s in timing.samples_us if not is_latency(s)]
    if bad:
        shown = (
            repr(bad[0])
            if len(repr(bad[0])) <= 40
            else f"{repr(bad[0])[:24]}… ({len(repr(bad[0]))} characters)"
        )
        raise DataError(f"{p}: {what} must be finite latencies (0 or more); found {shown}")
    if not math.isfinite(sum(float(s) for s in timing.samples_us)):  # no numpy overflow warning
        raise DataError(f"{p}: {what} are too large to be latencies (their sum overflows)")
    if timing.median_us < MIN_MEDIAN_US:
        median = "0 µs" if timing.median_us == 0 else f"{timing.median_us:.3g} µs, under a nanosecond"
        raise DataError(f"{p}: {what} have a median of {median}: not a measured latency")
    if timing.replicate_count > 1:  # the replicate test takes each one's log
        for i, m in enumerate(timing.replicate_medians_us, 1):
            if m < MIN_MEDIAN_US:
                raise DataError(
                    f"{p}: replicate {i}'s {what} have a median of {m:.3g} µs: not a measured latency"
                )


#: The "timed" line of a trtexec --exportTimes file read by load_timing (such a file names no model).
EXPORT_TIMES_TIMED = "one query, GPU compute time per trtexec --exportTimes (computeMs)"


#: Keys of an --exportProfile entry (one a layer: name, timeMs, averageMs, [medianMs,] percentage)
#: that no --exportTimes entry has.
EXPORT_PROFILE_KEYS = frozenset({"averageMs", "percentage"})


def is_export_profile(data: list[Any]) -> bool:
    """Whether a JSON list is trtexec's --exportProfile (`[{"count": N}, {layer}...]`), per-layer
    times a compare cannot test: its entries' "name" was read as an --exportTimes field and the
    error said a layer name is no time."""
    entries = [e for e in data if isinstance(e, dict)]
    counted = bool(entries) and set(entries[0]) == {"count"}
    return counted or any(set(e) >= EXPORT_PROFILE_KEYS and "name" in e for e in entries)


def _from_export_times(p: Path, data: list[Any]) -> Timing:
    from deployopt.backends.trtexec_parser import (
        NOT_EXPORT_TIMES,
        TrtexecRun,
        is_export_times,
        parse_times_json,
    )

    if is_export_profile(data):
        raise DataError(
            f"{p} is a trtexec --exportProfile file (per-layer times, no per-run samples): run trtexec "
            "with --exportTimes=FILE.json and compare that file"
        )
    if not is_export_times(data):  # said first: the entries' check blamed the first field ("arch")
        raise DataError(f"{p} is a JSON list but {NOT_EXPORT_TIMES}")

    try:
        timing = TrtexecRun(iterations=parse_times_json(data)).timing("computeMs")
    except (KeyError, ValueError, TypeError, AttributeError):
        raise DataError(f"{p} is a JSON list but not a trtexec --exportTimes file") from None
    except DataError as exc:
        raise DataError(f"{p}: {exc}") from None
    check_samples(p, timing, "computeMs values")
    timing.timed = EXPORT_TIMES_TIMED
    timing.environment.setdefault("source", str(p))
    return timing
