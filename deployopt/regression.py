"""Regression timing: is a model slower now than in the measurement it shipped with?

The job after `optimize`: engines go to the boards, and every change (a new TensorRT or JetPack, a
retrained model, new widths) is timed again and put against the stored baseline. A measurement
file is whatever deployopt or the board wrote: `deployopt bench -o`, `jetson/runner.py --out`, or
trtexec's own `--exportTimes` JSON. A verdict needs a significant difference (Mann-Whitney U on the
samples) that is also larger than a minimum effect: `deployopt.timing.compare`, the rule the
optimizer uses. Pairs whose environments differ (another GPU or board, SM count, power mode,
TensorRT, clocks locked or not, what was timed) are flagged, because their difference need not be
the model's, and so is a pair where power or heat held either side's GPU clock down while it was
timed (deployopt.clocks). So are pairs that timed different models (each result records the file name and
sha256 of what it timed): comparing the wrong pair would otherwise give a confident verdict. A pair
with too few samples for the test ever to reach alpha is refused rather than judged.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from deployopt.clocks import clocks_locked, held_down_phrase
from deployopt.errors import DataError, DeployoptError, no_such_file
from deployopt.fileio import read_json_input
from deployopt.prebuilt import PREBUILT, is_engine_file
from deployopt.timing import (
    DRIFT_MIN_RUNS,
    EXPORT_TIMES_TIMED,
    MANN_WHITNEY,
    MEASUREMENT_MAX_BYTES,
    REPLICATE_MIN_PER_SIDE,
    REPLICATE_TEST,
    Comparison,
    Replicate,
    Timing,
    check_samples,
    compare,
    compare_replicates,
    counted,
    load_timing,
    measured_time,
    min_samples,
    read_json,
    refuse_predicted,
    smallest_p_value,
    timing_from_json,
    with_stability,
)

#: Environment facts that make two measurements comparable, with the word a report uses for each.
#: A fact recorded on one side only is not a difference (older files lack newer keys).
LIKE_FOR_LIKE = (
    ("gpu", "GPU"),
    ("cpu", "CPU"),
    ("cpu_cores", "usable CPU cores"),
    ("intra_op_threads", "onnxruntime intra-op threads"),
    ("board", "board"),
    ("device", "device"),
    ("sms", "SMs"),
    ("nvpmodel", "power mode"),
    ("clocks_locked", "GPU clock"),
    ("tensorrt", "TensorRT"),
    ("runtime", "runtime"),
    ("cudnn", "cuDNN"),
    ("cudnn_benchmark", "cudnn.benchmark"),
    ("cudnn_benchmark_limit", "cuDNN engines timed"),
    ("dtype", "dtype"),
    ("input_shapes", "input shapes"),
)


def gpu_name(t: Timing) -> str | None:
    """The GPU a measurement ran on, whichever key its writer used: jetson/runner.py, the tensorrt,
    torch and ort backends record CUDA's or nvidia-smi's name as 'gpu'; trtexec records only its
    'Selected Device' line (the same CUDA name) as 'device'. Read apart, a runner result and a
    trtexec result on different GPUs were never compared."""
    env = t.environment
    gpu = env.get("gpu")
    if gpu is None and t.backend == "trtexec":
        gpu = env.get("device")
    return None if gpu is None else str(gpu).strip()


def like_for_like_facts(t: Timing) -> dict[str, Any]:
    """The LIKE_FOR_LIKE facts of one measurement, read the same way whatever wrote it (None: not
    recorded)."""
    env = t.environment
    facts = {key: env.get(key) for key, _ in LIKE_FOR_LIKE}
    facts["gpu"] = gpu_name(t)
    if t.backend == "trtexec":
        facts["device"] = None  # trtexec's device is its GPU's name, read as gpu above
    facts["clocks_locked"] = clocks_locked(env)
    facts["runtime"] = runtime_version(t)
    # the CPU is what timed a measurement that names no GPU (onnxruntime's CPU provider, torch on the
    # CPU): an EPYC and a Xeon 10 % apart were compared as like for like, --strict passing
    on_cpu = facts["gpu"] is None and t.backend in ("ort", "torch")
    facts["cpu"] = env.get("cpu") if on_cpu else None
    # the cores it might use and onnxruntime's thread setting (recorded since 2026-12-07): `taskset -c
    # 0` against a 2-core run passed --strict as like for like. A side without them: unknown, no
    # difference. torch says its threads in what was timed ("2 threads")
    facts["cpu_cores"] = env.get("cpu_cores") if on_cpu else None
    facts["intra_op_threads"] = env.get("intra_op_threads") if t.backend == "ort" else None
    return facts


def runtime_version(t: Timing) -> str | None:
    """'torch 2.11.0+cu130' / 'onnxruntime 1.23.2' for the torch and ort backends (TensorRT's own
    version is its fact): a library upgrade changes the kernels run, as a TensorRT upgrade does, and
    was not flagged between two torch results."""
    env = t.environment
    libs = env.get("libraries") if isinstance(env.get("libraries"), dict) else {}
    if t.backend == "torch":
        version = env.get("torch") or libs.get("torch")
        return f"torch {version}" if version else None
    if t.backend == "ort":
        # the module that ran (recorded since 2026-12-07); an older record names its distributions
        # only, the GPU one first (alone, it is what ran; beside the CPU one, it cannot be told)
        version = env.get("onnxruntime") or libs.get("onnxruntime-gpu") or libs.get("onnxruntime")
        return f"onnxruntime {version}" if version else None
    return None


def _shown(key: str, value: Any) -> str:
    if key == "clocks_locked":
        return "locked" if value else "not locked"
    if key == "intra_op_threads" and value == 0:  # SessionOptions' default: onnxruntime chooses
        return "default (0)"
    if key == "input_shapes" and isinstance(value, dict):  # {"input": [1, 3, 32, 32]} -> input:1x3x32x32
        return ",".join(
            f"{name}:{'x'.join(map(str, dims))}" if isinstance(dims, list) else f"{name}:{dims}"
            for name, dims in value.items()
        )
    return str(value)


def setup(t: Timing) -> str:
    """The backend and the like-for-like facts a measurement recorded, in words; a file that
    recorded none says so ("measured on: trtexec (both)" read as if the setups had been checked)."""
    facts = like_for_like_facts(t)
    words = [f"{word} {_shown(key, facts[key])}" for key, word in LIKE_FOR_LIKE if facts[key] is not None]
    if not words:
        why = "a trtexec --exportTimes file names no GPU or TensorRT" if t.timed == EXPORT_TIMES_TIMED else ""
        return f"{t.backend}, setup not recorded{f' ({why})' if why else ''}"
    return ", ".join([t.backend, *words])


def differences(a: Timing, b: Timing) -> list[str]:
    """What differs between the two measurements' setups, in words ('SMs 8 → 16'), and either side
    whose GPU clock was held down (clock_slowdowns)."""
    return setup_differences(a, b) + clock_slowdowns(a, b)


def setup_differences(a: Timing, b: Timing) -> list[str]:
    """`differences` less the clock held down: backend, the LIKE_FOR_LIKE facts both sides recorded,
    and what was timed. `bench --append` refuses a run whose setup differs by these (a held-down
    clock is no setup: the run is appended and the result keeps the flag, Timing.appended)."""
    out = [] if a.backend == b.backend else [f"backend {a.backend} → {b.backend}"]
    fa, fb = like_for_like_facts(a), like_for_like_facts(b)
    for key, word in LIKE_FOR_LIKE:
        va, vb = fa[key], fb[key]
        if va is not None and vb is not None and va != vb:
            out.append(f"{word} {_shown(key, va)} → {_shown(key, vb)}")
    out += procedure_differences(a, b)
    ta, tb = comparable_timed(a), comparable_timed(b)
    if ta and tb and ta != tb:
        out.append(timed_difference(ta, tb))
    return out


def run_lengths(t: Timing) -> list[int]:
    """The runs a result's replicates each timed (one run: its own count), distinct, in order."""
    return sorted({r.runs for r in t.replicates or [Replicate(t.runs)]})


def procedure_differences(a: Timing, b: Timing) -> list[str]:
    """The warm-up and, where the backend counts runs itself (not trtexec: it warms up by time and
    takes --iterations as a minimum), the runs per replicate, where they differ: where latency
    drifts within a run (every H100 torch run got 2–2.5 % faster over its first 100 of 200) both move
    a run's median by more than --min-effect, so `bench --append` refuses to pool them
    (append_target), and compare --strict passed them as like for like. A trtexec --exportTimes file
    records neither (its warm-up reads 0): not checked against one; nor across backends (flagged
    already, and trtexec's warm-up is milliseconds, the others' runs)."""
    if a.backend != b.backend or EXPORT_TIMES_TIMED in (a.timed, b.timed):
        return []
    out = []
    if a.warmup != b.warmup:
        out.append(f"warm-up {a.warmup} → {b.warmup}")
    if a.backend != "trtexec":
        ra, rb = run_lengths(a), run_lengths(b)
        if ra != rb:
            out.append(f"runs per replicate {'/'.join(map(str, ra))} → {'/'.join(map(str, rb))}")
    return out


#: The first clause of the "what was timed" line jetson/runner.py wrote for a serialized engine
#: given as the model before commit b70dbfb (2026-12-05): `--dtype` as if it were the engine's
#: precision (`precision_phrase`: the dtype, or on TensorRT 11 its strong-typing words). Since then
#: the runner says ENGINE_CLAUSE for the same run. Known phrases only, word for word.
LEGACY_ENGINE_CLAUSES = frozenset(
    f"one forward pass ({phrase})"
    for phrase in (
        "fp32",
        "fp16",
        "int8",
        "fp16 as typed in the model (TensorRT 11 strong typing)",
        "int8 from the model's Q/DQ nodes (TensorRT 11 strong typing)",
    )
)
ENGINE_CLAUSE = f"one forward pass of {PREBUILT}"


def timed_an_engine(t: Timing) -> bool:
    """Whether a jetson/runner.py result timed a serialized engine given as the model: its recorded
    model is an engine file, or (no model recorded) it built nothing and has no engine_key, which
    the runner records for every engine it builds or reuses."""
    env = t.environment
    if "runner" not in env:
        return False
    m = t.model
    if isinstance(m, dict) and isinstance(m.get("file"), str):
        return is_engine_file(m["file"])
    return env.get("engine_built_now") is False and "engine_key" not in env


def comparable_timed(t: Timing) -> str:
    """A result's "what was timed" line in today's words: a runner older than b70dbfb that timed an
    engine said "one forward pass (fp16), ..." where today's says ENGINE_CLAUSE, so such a baseline
    read as "what was timed differs" against a current result of the same engine, and `--strict`
    failed after the runner was upgraded. Only LEGACY_ENGINE_CLAUSES on a side that timed an engine
    are rewritten: a model built at fp16 still says "(fp16)"."""
    if not t.timed or not timed_an_engine(t):
        return t.timed
    clauses = _clauses(t.timed)
    if clauses[0] not in LEGACY_ENGINE_CLAUSES:
        return t.timed
    return ", ".join([ENGINE_CLAUSE, *clauses[1:]])


def _clauses(timed: str) -> list[str]:
    """A "what was timed" line's comma-separated clauses (a comma inside brackets stays in its clause)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(timed):
        depth += (ch in "([") - (ch in ")]" and depth > 0)
        if ch == "," and depth == 0:
            out.append(timed[start:i].strip())
            start = i + 1
    return [*out, timed[start:].strip()]


def timed_difference(a: str, b: str) -> str:
    """'what was timed differs: cudnn.benchmark (10 engines timed) → cuDNN heuristics (...)': the
    clauses each line has that the other lacks. The lines run to 200 characters, and "what was
    timed differs" alone left the reader to find the difference (or to guess it was the model's)."""
    ca, cb = _clauses(a), _clauses(b)
    only_a, only_b = [c for c in ca if c not in cb], [c for c in cb if c not in ca]
    if not only_a and not only_b:  # the same clauses in another order
        return "what was timed differs"
    return f"what was timed differs: {'; '.join(only_a) or '-'} → {'; '.join(only_b) or '-'}"


def clock_slowdowns(baseline: Timing, current: Timing) -> list[str]:
    """A side whose GPU clock power or heat held down while it was timed (its "clock_slowdown_us", or
    the Jetson runner's record of its timed loop: deployopt.clocks.held_down_phrase), in words: that
    side's latency is not its GPU's, so the change need not be the model's, even when both sides ran
    the same setup. Flagged like a setup difference."""
    out = []
    for side, t in (("baseline", baseline), ("current", current)):
        held = held_down_phrase(t.environment)
        if held:
            out.append(f"{side}: GPU clock held down by {held}")
    return out


def unchecked_for_throttling(baseline: Timing, current: Timing) -> list[str]:
    """A jetson/runner.py result with no record of its board around the timed loop (no
    "gpu_clock_during_run" nor "oc_events": a runner older than that record, copied to the board by
    hand, or a board whose devfreq clock could not be read): clock_slowdowns cannot flag it, so a
    throttled week would read as a regression. Said in a note, where it was silent."""
    return [
        f"{side}: not checked for throttling: this jetson/runner.py result has no record of the GPU "
        "clock or over-current counters around its timed loop (a runner older than that record: copy "
        "the current jetson/runner.py to the board; or a board whose devfreq clock is unreadable)"
        for side, t in (("baseline", baseline), ("current", current))
        if "runner" in t.environment
        and "gpu_clock_during_run" not in t.environment
        and "oc_events" not in t.environment
    ]


#: How far apart two medians of one model may be before compare asks whether a file is in other
#: units: no rebuild or regression makes a model 100 times slower, and a result written in ms (or
#: ns) read as µs is 1000 times off ("faster -99.9 %" said nothing of it).
UNITS_RATIO = 100.0


def unit_mismatch(baseline: Timing, current: Timing) -> list[str]:
    """A note where the medians are UNITS_RATIO or more apart: samples_us are microseconds, and a
    file written in milliseconds (or nanoseconds) is judged as a 1000× change without a word."""
    ratio = current.median_us / baseline.median_us
    if 1 / UNITS_RATIO < ratio < UNITS_RATIO:
        return []
    return [
        f"the medians are {max(ratio, 1 / ratio):,.0f}× apart (current {current.median_us:.4g} µs, "
        f"baseline {baseline.median_us:.4g} µs): a file in other units? samples_us must be microseconds "
        "(milliseconds read as µs are 1000× too small)"
    ]


#: Two sides measured this close together are one session, whatever their order: a CI job that benches
#: the PR's model and then the release's (or a matrix of two parallel jobs) has its current side a few
#: seconds or minutes *before* its baseline, and "stale" failed that fresh pair under --strict.
SAME_SESSION = timedelta(hours=1)

#: How far after this machine's clock a "measured_at" may be before compare says a clock is wrong:
#: a board and the host disagree by seconds under NTP, by years without it (no RTC battery).
CLOCK_SKEW = timedelta(minutes=10)


def tool_versions(baseline: Timing, current: Timing) -> list[str]:
    """A note where the two sides were written by different deployopt versions (environment
    "deployopt", recorded since 2026-12-07): what a bench feeds and records may have changed between
    them, so the change need not be the model's. A note, not a setup difference: the versions alone
    do not say the procedure changed. A side without the record: nothing said."""
    vb, vc = (t.environment.get("deployopt") for t in (baseline, current))
    if vb is None or vc is None or vb == vc:
        return []
    return [
        f"written by deployopt {vb} (baseline) and {vc} (current): what a bench feeds and records may "
        "differ between versions (docs/regression.md)"
    ]


def staleness(baseline: Timing, current: Timing, now: datetime | None = None) -> str | None:
    """Why the current result may not be this run's (None: it is newer than its baseline, or of the
    same session, or a side recorded no "measured_at", as files written before it did not). A `bench
    -o` or a copy that failed leaves the last result in place (outputs are never half-written), and
    compare judged it again with no word; a baseline copied from the current result carries its very
    time and samples.

    Sides measured within SAME_SESSION of each other (back-to-back benches in either order, or runs
    interleaved by `bench --append`: a current run within SAME_SESSION of the baseline's first) are
    one session, so this run's. A baseline dated after `now` (future_records) is a wrong clock, not
    a failed bench: it is said there, not here."""
    if baseline.measured_at is None or current.measured_at is None:
        return None
    b, c = measured_time(baseline.measured_at), measured_time(current.measured_at)
    if c == b and baseline.samples_us == current.samples_us:
        return f"both sides are the same result, measured at {current.measured_at} (the same file or a copy)"
    if now is not None and b > now + CLOCK_SKEW:
        return None
    if c > _earliest(baseline) - SAME_SESSION:
        return None
    return f"it was measured at {current.measured_at}, before its baseline ({baseline.measured_at})"


def _span(d: timedelta) -> str:
    """'3.2 days' / '5.0 h' / '12 min': how far apart two times are, in the unit that reads."""
    s = abs(d.total_seconds())
    if s >= 2 * 86400:
        return f"{s / 86400:.1f} days"
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.0f} min"


def future_records(baseline: Timing, current: Timing, now: datetime) -> list[str]:
    """Each side dated more than CLOCK_SKEW after `now` (this machine's clock), in words that blame
    the clock: taken at face value, a current result from the future passed --strict as fresh, and a
    baseline from the future failed every later run as "stale", blaming a failed bench."""
    out = []
    for side, t in (("baseline", baseline), ("current", current)):
        if t.measured_at is None:
            continue
        ahead = measured_time(t.measured_at) - now
        if ahead > CLOCK_SKEW:
            out.append(
                f"{side} measured_at {t.measured_at} is {_span(ahead)} after this machine's clock "
                f"({now.strftime('%Y-%m-%dT%H:%M:%SZ')}): a clock is wrong (the benching machine's or this "
                "one's), so when it was measured, and whether the pair is this run's, cannot be told"
            )
    return out


def too_old(current: Timing, max_age: timedelta | None, now: datetime) -> str | None:
    """Why the current result is older than `compare --max-age` allows (None: no limit, or within
    it): a bench that failed in week 3 left week 2's result, newer than week 1's baseline, and
    --strict passed it. A current side with no "measured_at" cannot show its age: it fails too."""
    if max_age is None:
        return None
    if current.measured_at is None:
        return "the current result records no measured_at, so its age cannot be checked against --max-age"
    age = now - measured_time(current.measured_at)
    if age <= max_age:
        return None
    return (
        f"the current result was measured at {current.measured_at}, {_span(age)} ago, more than --max-age "
        f"{_span(max_age)}: a bench or copy that failed leaves the last result in place"
    )


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", re.IGNORECASE)
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """`--max-age`'s DURATION (8d, 36h, 90m, 2w, 3600s) as a timedelta, or a one-line DataError."""
    found = _DURATION.fullmatch(text)
    if found is None or float(found[1]) <= 0:
        raise DataError(f"--max-age {text!r}: expected a positive duration such as 8d, 36h or 90m")
    return timedelta(**{_UNITS[found[2].lower()]: float(found[1])})


def _earliest(t: Timing) -> datetime:
    """When the first of a result's runs was measured: its earliest replicate's time, else (one run,
    or replicates that recorded none) its measured_at."""
    times = [r.measured_at for r in t.replicates or [] if r.measured_at is not None]
    return min(measured_time(x) for x in [*times, t.measured_at] if x is not None)


#: The longest time a side's replicates may span (first replicate to last) before compare warns:
#: replicates are meant to be one measurement session (`bench --repeat`, or `bench --append` rounds
#: interleaved with the other side's). Weeks of runs appended into one result pool a drift across
#: them into the spread the test judges by: four weekly runs whose last was 10 % slower read "+2.4 %,
#: not significant", with no word. A day leaves room for a long interleaved loop on a board.
REPLICATE_SPAN_MAX = timedelta(days=1)


def replicate_span(t: Timing) -> tuple[timedelta, str, str] | None:
    """(span, first, last) of the times a result's replicates recorded (`measured_at` of each);
    None for one run, or under two replicates that recorded one."""
    times = sorted(
        (r.measured_at for r in t.replicates or [] if r.measured_at is not None), key=measured_time
    )
    if len(times) < 2:
        return None
    return measured_time(times[-1]) - measured_time(times[0]), times[0], times[-1]


def long_replicate_spans(baseline: Timing, current: Timing) -> list[str]:
    """A side whose replicates span more than REPLICATE_SPAN_MAX, in words ('current: 4 replicates
    measured over 21.0 days (… → …)'): a change within that time is diluted among them."""
    out = []
    for side, t in (("baseline", baseline), ("current", current)):
        span = replicate_span(t)
        if span is not None and span[0] > REPLICATE_SPAN_MAX:
            days = span[0] / timedelta(days=1)
            first, last = span[1], span[2]
            out.append(
                f"{side}: {t.replicate_count} replicates measured over {days:.1f} days ({first} → {last})"
            )
    return out


# ---------------------------------------------------------------------------------------------
# model identity: did both sides time the same model?

_SHA256 = re.compile(r"[0-9a-f]{64}")


def model_identity(path: Path) -> dict[str, str]:
    """What a result timed, recorded by every writer: the file name and the sha256 of its bytes.
    The name alone cannot tell a re-export from the same model, nor the hash alone a rename from
    another model. (An ONNX model's external data file is not hashed.)"""
    from deployopt.fileio import file_sha256

    return {"file": Path(path).name, "sha256": file_sha256(Path(path))}


def recorded_model(path: Path, t: Timing) -> dict[str, str] | None:
    """The identity a result recorded (None: none, as before it was recorded); a malformed one is
    bad input, not a pass."""
    m = t.model
    if m is None:
        return None
    if (
        not isinstance(m, dict)
        or not isinstance(m.get("file"), str)
        or not m["file"]
        or not isinstance(m.get("sha256"), str)
        or not _SHA256.fullmatch(m["sha256"].lower())
    ):
        raise DataError(
            f'{path}: "model" must be {{"file": NAME, "sha256": 64 hex digits}}, not {json.dumps(m)}'
        )
    return {"file": m["file"], "sha256": m["sha256"].lower()}


@dataclass(frozen=True)
class ModelCheck:
    """Whether both sides timed the same model. status: 'same' (same bytes, whatever the file
    names), 'changed' (same file name, new bytes: a re-export or retrained model, the check a user
    runs on purpose, so a note), 'different' (another name and other bytes: not comparable) or
    'unknown' (a side recorded no model, or one hashed an ONNX model and the other an engine)."""

    status: str
    message: str = ""

    @property
    def comparable(self) -> bool:
        return self.status != "different"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "comparable": self.comparable, "message": self.message}


def _kind(file: str) -> str:
    return "TensorRT engine" if is_engine_file(file) else "model"


def _why_unrecorded(t: Timing) -> str:
    if t.timed == EXPORT_TIMES_TIMED:
        return "a trtexec --exportTimes file names no model"
    return "not recorded by the writer"


def check_models(baseline: tuple[Path, Timing], current: tuple[Path, Timing]) -> ModelCheck:
    """Compare what the two sides record having timed (see ModelCheck)."""
    (bp, tb), (cp, tc) = baseline, current
    b, c = recorded_model(bp, tb), recorded_model(cp, tc)
    if b is None or c is None:
        sides = ((bp, tb, b), (cp, tc, c))
        why = "; ".join(f"{p}: {_why_unrecorded(t)}" for p, t, m in sides if m is None)
        return ModelCheck(
            "unknown", f"model identity not recorded ({why}): cannot check both sides timed the same model"
        )
    if b["sha256"] == c["sha256"]:
        return ModelCheck("same")
    bf, cf = b["file"], c["file"]
    hb, hc = b["sha256"][:12] + "…", c["sha256"][:12] + "…"
    if _kind(bf) != _kind(cf):
        return ModelCheck(
            "unknown",
            f"baseline timed the {_kind(bf)} {bf}, current the {_kind(cf)} {cf}: an engine's sha256 is "
            "not its ONNX model's, so cannot check both sides timed the same model",
        )
    if bf == cf:
        if _kind(bf) == "model":
            return ModelCheck("changed", f"model changed: {bf} has other contents (sha256 {hb} → {hc})")
        # the weekly case: OUTDIR/model.engine of a new release; a rebuild may pick other tactics
        return ModelCheck(
            "changed",
            f"engine changed: {bf} has other contents (sha256 {hb} → {hc}): rebuilt (TensorRT may pick "
            "other tactics even from the same ONNX model) or built from another model",
        )
    return ModelCheck(
        "different", f"different models: baseline timed {bf} (sha256 {hb}), current {cf} (sha256 {hc})"
    )


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
    model: ModelCheck = field(default_factory=lambda: ModelCheck("unknown"))
    #: what could not be checked (unchecked_for_throttling), medians in other units? (unit_mismatch)
    notes: list[str] = field(default_factory=list)
    stale: str | None = None  # why the current result may be an older one left in place (staleness)
    #: a side whose replicates span more than REPLICATE_SPAN_MAX (long_replicate_spans)
    long_spans: list[str] = field(default_factory=list)
    #: a side dated after this machine's clock (future_records): a clock is wrong
    future: list[str] = field(default_factory=list)
    too_old: str | None = None  # the current result is older than --max-age (too_old)

    def to_json(self) -> dict[str, Any]:
        def side(t: Timing, path: Path) -> dict[str, Any]:
            return {
                "file": str(path),
                "backend": t.backend,
                "median_us": t.median_us,
                "iqr_us": t.iqr_us,
                "ci95_us": list(t.ci95_us) if t.ci_known else None,  # null below timing.CI_MIN_RUNS
                "runs": t.runs,
                "warmup": t.warmup,  # a difference is a setup difference (procedure_differences)
                "timed": t.timed,
                "measured_on": setup(t),  # what the table's "measured on" line says
                "model": t.model,  # what was timed: file name and sha256 (null: not recorded)
                "measured_at": t.measured_at,  # UTC ISO 8601 (null: not recorded)
                # bench --repeat's independent measurements (runs, median_us, iqr_us, measured_at
                # each); null: one measurement
                "replicates": t.replicates_json(),
            }

        c = self.comparison
        test: dict[str, Any] = {"name": c.test}
        if c.replicated is not None:
            test.update(c.replicated.to_json())
        else:  # one run a side: the between-run variation is not seen (bench --repeat shows it)
            test["replicates"] = {"baseline": 1, "current": 1}

        return {
            "name": self.name,
            "baseline": side(self.baseline, self.baseline_path),
            "current": side(self.current, self.current_path),
            "ratio": self.comparison.ratio,
            "change_pct": 100 * (self.comparison.ratio - 1),
            # null: no p (a replicated pair with no spread between its replicates: unstable)
            "p_value": self.comparison.p_value if math.isfinite(self.comparison.p_value) else None,
            # which test gave p: one run a side (mann-whitney-u) or replicate medians, their counts
            "test": test,
            "one_run_per_side": c.replicated is None,
            "verdict": self.comparison.verdict,
            # faster/slower, but the medians' 95 % CIs overlap: the direction holds, the size not
            "size_uncertain": self.comparison.size_uncertain,
            # no verdict because the ranks and the medians disagree (bimodal samples, or equal
            # medians beside ranks that moved): the table's "mixed: ranks disagree". --json could not
            # tell it from "no significant difference"
            "mixed": self.comparison.mixed,
            # no verdict because a side's latency moved within its own run (first half → second half
            # by the same test and thresholds) by at least the pair's change: the table's "unstable:
            # …"; or by a trend that, carried at its rate over the gap between the runs
            # (extrapolated_pct), leaves less than min_effect of the change; `drift` has the figures,
            # also of a smaller drift that left the verdict standing (null for a side of fewer than
            # timing.DRIFT_MIN_RUNS samples)
            "unstable": self.comparison.unstable,
            "drift": {
                side: (d.to_json() if d is not None else None)
                for side, d in zip(("baseline", "current"), self.comparison.drift or (None, None))
            },
            "environment_differences": self.differences,
            "model_check": self.model.to_json(),
            "notes": self.notes,
            "stale": self.stale,
            "future": self.future,  # a side dated after this machine's clock (a clock is wrong)
            "too_old": self.too_old,  # the current side is older than --max-age
            # each side's replicates from first to last (days; null: one run, or times not recorded),
            # and whether either exceeds REPLICATE_SPAN_MAX: meant to be one measurement session
            "replicate_span_days": {
                side: (None if span is None else span[0] / timedelta(days=1))
                for side, span in (
                    ("baseline", replicate_span(self.baseline)),
                    ("current", replicate_span(self.current)),
                )
            },
            "long_replicate_span": bool(self.long_spans),
        }


@dataclass
class RegressionReport:
    pairs: list[Pair]
    alpha: float
    min_effect: float
    only_in_baseline: list[str] = field(default_factory=list)
    only_in_current: list[str] = field(default_factory=list)
    max_age: timedelta | None = None  # compare --max-age (None: no limit on the current side's age)

    @property
    def slower(self) -> list[Pair]:
        return [p for p in self.pairs if p.comparison.verdict == "slower"]

    @property
    def not_like_for_like(self) -> list[Pair]:
        return [p for p in self.pairs if p.differences]

    @property
    def unstable(self) -> list[Pair]:
        """Pairs with no verdict because a side drifted within its run by at least their change
        (Comparison.unstable)."""
        return [p for p in self.pairs if p.comparison.unstable]

    @property
    def stale(self) -> list[Pair]:
        """Pairs whose current result is not newer than its baseline: maybe not this run's."""
        return [p for p in self.pairs if p.stale]

    @property
    def future(self) -> list[Pair]:
        """Pairs with a side dated after this machine's clock (beyond CLOCK_SKEW): a clock is wrong."""
        return [p for p in self.pairs if p.future]

    @property
    def too_old(self) -> list[Pair]:
        """Pairs whose current result is older than --max-age."""
        return [p for p in self.pairs if p.too_old]

    @property
    def long_span(self) -> list[Pair]:
        """Pairs with a side whose replicates span more than REPLICATE_SPAN_MAX."""
        return [p for p in self.pairs if p.long_spans]

    def failures(self, strict: bool) -> list[dict[str, Any]]:
        """Why compare exits non-zero, one entry a reason ({"reason", "pairs", "message"}): a model
        slower, a current result older than --max-age, and with --strict every pair the test cannot
        vouch for (another model, another setup, no verdict, a stale current result, a side dated after
        this machine's clock, a file without a counterpart). `--json` had no verdict
        of its own, and a script rebuilt --strict's rule to gate on it."""
        found: list[tuple[str, list[str], str]] = []
        if self.slower:
            found.append(("regression", [p.name for p in self.slower], f"{len(self.slower)} model(s) slower"))
        if self.too_old:  # --max-age is a gate's own limit: it fails with or without --strict
            limit = f" {_span(self.max_age)}" if self.max_age is not None else ""
            names = [p.name for p in self.too_old]
            found.append(
                (
                    "too_old",
                    names,
                    f"{len(names)} pair(s) whose current result is older than --max-age{limit}",
                )
            )
        if strict:
            drifted = [p for p in self.unstable if not p.comparison.no_spread]
            flat = [p for p in self.unstable if p.comparison.no_spread]
            unpaired = self.only_in_baseline + self.only_in_current
            found += [
                (
                    "not_comparable",
                    [p.name for p in self.not_comparable],
                    f"{len(self.not_comparable)} pair(s) timed different models",
                ),
                (
                    "not_like_for_like",
                    [p.name for p in self.not_like_for_like],
                    f"{len(self.not_like_for_like)} pair(s) not like for like",
                ),
                (
                    "unstable",
                    [p.name for p in drifted],
                    f"{len(drifted)} pair(s) unstable within a run (no verdict)",
                ),
                (
                    "no_spread",
                    [p.name for p in flat],
                    f"{len(flat)} pair(s) with no spread between replicates (no verdict, no p)",
                ),
                (
                    "stale",
                    [p.name for p in self.stale],
                    f"{len(self.stale)} pair(s) whose current result is not newer than its baseline "
                    "(maybe not this run's)",
                ),
                (
                    "future",
                    [p.name for p in self.future],
                    f"{len(self.future)} pair(s) with a result dated after this machine's clock (a clock "
                    "is wrong)",
                ),
                ("unpaired", unpaired, f"{len(unpaired)} file(s) without a counterpart"),
            ]
        return [{"reason": r, "pairs": names, "message": m} for r, names, m in found if names]

    def exit_code(self, strict: bool) -> int:
        """compare's exit status for this report: NOT_COMPARABLE with --strict and a pair of
        different models (the pairing is what to fix first), else 1 on any failure, else 0."""
        if strict and self.not_comparable:
            return NOT_COMPARABLE
        return 1 if self.failures(strict) else 0

    @property
    def one_run_per_side(self) -> list[Pair]:
        """Pairs judged on one run a side: the variation between runs is not seen."""
        return [p for p in self.pairs if p.comparison.replicated is None]

    @property
    def not_comparable(self) -> list[Pair]:
        """Pairs whose sides timed different models: their verdict is no regression's."""
        return [p for p in self.pairs if not p.model.comparable]

    def to_json(self, strict: bool = False) -> dict[str, Any]:
        """The report as JSON, with the exit status compare returns for it (with or without
        --strict) and why (`exit_code`, `failures`)."""
        return {
            "rule": {
                "test": f"{MANN_WHITNEY}: Mann-Whitney U, two-sided, on the per-run samples, where each "
                "side is one run",
                "replicate_test": f"{REPLICATE_TEST}: where a side has several replicates (bench "
                "--repeat), Student's t-test, two-sided, pooled variance, on the log of each "
                f"replicate's median (at least {REPLICATE_MIN_PER_SIDE} replicates a side)",
                "alpha": self.alpha,
                "min_effect": self.min_effect,
                "stability": f"each side of {DRIFT_MIN_RUNS} or more samples: its first half against its "
                "second half in time order, by the same test and thresholds; a side that drifted by "
                "at least the change between the medians leaves its pair without a verdict (unstable), "
                "and so does a significant drift the way of the change that, carried at its rate over "
                "the samples between the two sides' medians (extrapolated_pct), leaves less than "
                "min_effect of it",
            },
            "regressions": len(self.slower),
            "not_comparable": [p.name for p in self.not_comparable],
            "stale": [p.name for p in self.stale],
            "future": [p.name for p in self.future],
            "too_old": [p.name for p in self.too_old],
            "max_age_s": None if self.max_age is None else self.max_age.total_seconds(),
            "unstable": [p.name for p in self.unstable],
            "long_replicate_span": [p.name for p in self.long_span],
            "pairs": [p.to_json() for p in self.pairs],
            "only_in_baseline": self.only_in_baseline,
            "only_in_current": self.only_in_current,
            # what compare exits with for this report (0, 1, or 3 with --strict), and each reason
            # for a non-zero one: a script gates on these, not on --strict's rule rebuilt
            "strict": strict,
            "exit_code": self.exit_code(strict),
            "failures": self.failures(strict),
        }


def is_compare_report(doc: Any) -> bool:
    """Whether a parsed JSON file is one `compare -o` wrote (its "rule" and "pairs"): written into a
    results folder, it would otherwise count as a model next time (a note, exit 1 under --strict)
    and, once that folder becomes the baseline, be read as a broken measurement (exit 2)."""
    return isinstance(doc, dict) and "rule" in doc and "pairs" in doc and "samples_us" not in doc


def measurement_files(folder: Path) -> list[Path]:
    """The files of a folder `compare` reads as measurements (every *.json but its own reports):
    `compare A B -o B/x.json` wrote its report over the measurement x.json, and the runs after it
    left x out of the pairing, so a regression there became a note and the gate exited 0."""
    return list(_measurement_files(folder, {}).values())


def _measurement_files(folder: Path, parsed: dict[Path, Any]) -> dict[str, Path]:
    """The folder's measurement files by name; each one's JSON goes into `parsed`, so it is read
    once (a file that does not parse stays out of it: loading it says why, if it is paired)."""
    files = {}
    for p in sorted(folder.glob("*.json")):
        if not p.is_file():
            continue
        with contextlib.suppress(DataError):
            parsed[p] = read_json(p)
        if not is_compare_report(parsed.get(p)):
            files[p.stem] = p
    return files


def check_testable(
    baseline: tuple[str | Path, Timing], current: tuple[str | Path, Timing], alpha: float
) -> None:
    """Refuse a pair whose sample counts could never give p < alpha.

    `timing.compare` treats a side with one sample as a deterministic prediction (p = 0 for any
    difference), so a one-sample measurement would be called slower or faster on no evidence;
    a few samples would be judged by a test that cannot reach alpha. Either way the answer would
    not be a measurement's, so the files are bad input (exit 2), like a predicted result.
    """
    short = [(p, t.runs) for p, t in (baseline, current) if t.runs < 2]
    if short:
        has = "; ".join(f"{p} has {counted(n, 'sample')}" for p, n in short)
        raise DataError(
            f"{has}: one run is not a measurement the Mann-Whitney U test can judge "
            f"(at --alpha {alpha:g} it needs {min_samples(alpha)} samples per side when both sides are "
            "alike); measure more runs"
        )
    (bp, tb), (cp, tc) = baseline, current
    if uses_replicates(tb, tc):
        check_replicates_testable(baseline, current)
        return
    p_min = smallest_p_value(tb.runs, tc.runs)
    if p_min >= alpha:
        raise DataError(
            f"{bp} ({tb.runs} samples) and {cp} ({tc.runs} samples): the smallest p the Mann-Whitney "
            f"U test gives for these counts is {p_min:.2g}, not below --alpha {alpha:g}, so it could "
            f"never find a difference (with equal counts it needs {min_samples(alpha)} per side); "
            "measure more runs"
        )


def uses_replicates(baseline: Timing, current: Timing) -> bool:
    """Whether a pair is judged on replicate medians (either side has several replicates, `bench
    --repeat`); else on one run a side, by the Mann-Whitney U test on its samples."""
    return baseline.replicate_count > 1 or current.replicate_count > 1


def check_replicates_testable(
    baseline: tuple[str | Path, Timing], current: tuple[str | Path, Timing]
) -> None:
    """Refuse a replicated pair with too few replicates for the test on their medians
    (timing.REPLICATE_MIN_PER_SIDE: 2 a side), as check_testable refuses too few samples: judged by
    the samples instead, its verdict would again rest on one run's spread, and one run against
    several is a single draw of the runs' modes (1 against 3, taken until 2026-12-07, called 13 % of
    simulated A/A pairs at --alpha 0.01 where runs land in two kernel sets 7 % apart)."""
    (bp, tb), (cp, tc) = baseline, current
    ka, kb = tb.replicate_count, tc.replicate_count
    if min(ka, kb) < REPLICATE_MIN_PER_SIDE:
        raise DataError(
            f"{bp} ({counted(ka, 'replicate')}) and {cp} ({counted(kb, 'replicate')}): too few replicates "
            f"for a test on their medians (it needs {REPLICATE_MIN_PER_SIDE} a side, to see how much runs "
            "vary on each); bench the side with fewer again with `deployopt bench --repeat 3`"
        )


#: Exit status of `compare --strict` when a pair timed different models. Above 1 (a regression):
#: the verdict of a wrong pair is no regression's, and the pairing is what to fix first.
NOT_COMPARABLE = 3


#: `compare`'s significance level unless --alpha is given (bench notes a result too short for it).
DEFAULT_ALPHA = 0.01


#: Smallest median change a regression verdict needs. The test sees only the spread within one
#: run, and a rebuild moves the median by more: the same model, benched twice on the H200 at 8 SMs,
#: measured 1.4 % apart (benchmarks/results/h200_compare/compare_repeat.json).
MIN_EFFECT = 0.02


def check_rule(alpha: float, min_effect: float) -> None:
    """compare's --alpha and --min-effect, or a one-line DataError."""
    if not 0 < alpha < 1:
        raise DataError(f"alpha {alpha:g}: expected a p-value threshold between 0 and 1")
    if not 0 <= min_effect < 1:
        raise DataError(f"min effect {min_effect:g}: expected a fraction such as 0.02 (2 %)")


def compare_timings(
    baseline: Timing,
    current: Timing,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = MIN_EFFECT,
    names: tuple[str | Path, str | Path] = ("baseline", "current"),
) -> Comparison:
    """`deployopt compare`'s verdict on two measurements in memory (`load_timing`,
    `deployopt.backends.tensorrt.load_runner_result`), with its checks and defaults: a predicted
    latency, samples that are no latencies, and sample counts the test can never judge at `alpha`
    (one run a side included) are refused in one DataError line each, named by `names`; then
    `timing.compare` at the CLI's --alpha and --min-effect (2 %), or, where a side has several
    replicates (`bench --repeat`), `timing.compare_replicates` on their medians. `timing.compare` alone is the
    optimizer's rule: it takes a one-sample side for a deterministic prediction (p = 0 for any
    difference) and its min_effect defaults to 1 %, so two one-run results read "slower: +5.0%
    (p=0)" and a rebuild's 1.4 % "slower". The setup and model checks of a pair of files stay with
    compare_paths (they need the files)."""
    check_rule(alpha, min_effect)
    for name, t in zip(names, (baseline, current)):
        refuse_predicted(name, t)
        check_samples(name, t, "samples_us")
    check_testable((names[0], baseline), (names[1], current), alpha)
    if uses_replicates(baseline, current):  # the runs are the unit: a test on their medians
        judged = compare_replicates(baseline, current, alpha, min_effect)
    else:
        judged = compare(baseline, current, alpha, min_effect)
    # each side's first half against its second (DRIFT_MIN_RUNS samples or more): a run whose latency
    # moved within it gets no verdict (Comparison.unstable); a replicated side's runs only a note
    return with_stability(judged, baseline, current, alpha, min_effect)


def compare_paths(
    baseline: str | Path,
    current: str | Path,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = MIN_EFFECT,
    max_age: timedelta | None = None,
    now: datetime | None = None,
) -> RegressionReport:
    """Two measurement files, or two folders whose files pair up by name. `now` (this machine's
    clock unless given) dates the sides: a result from the future, a current one older than
    `max_age`."""
    now = now or datetime.now(timezone.utc)
    check_rule(alpha, min_effect)  # before any file is read (compare_timings checks it per pair too)
    b, c = Path(baseline), Path(current)
    for p in (b, c):
        if not p.exists():
            raise no_such_file(p, DataError, folder=True)
    if b.is_dir() != c.is_dir():
        raise DataError(f"compare two files or two folders, not {b} with {c}")
    parsed: dict[Path, Any] = {}
    if b.is_dir():
        bf, cf = _measurement_files(b, parsed), _measurement_files(c, parsed)
        names = sorted(bf.keys() & cf.keys())
        if not names:
            raise DataError(f"no measurement file (*.json) has the same name in {b} and {c}")
        jobs = [(n, bf[n], cf[n]) for n in names]
        only_b, only_c = sorted(bf.keys() - cf.keys()), sorted(cf.keys() - bf.keys())
    else:
        jobs, only_b, only_c = [(c.stem, b, c)], [], []
    pairs = []
    for name, bp, cp in jobs:
        tb, tc = (timing_from_json(p, parsed[p]) if p in parsed else load_timing(p) for p in (bp, cp))
        comparison = compare_timings(tb, tc, alpha, min_effect, names=(bp, cp))
        model = check_models((bp, tb), (cp, tc))
        notes = unchecked_for_throttling(tb, tc) + unit_mismatch(tb, tc) + tool_versions(tb, tc)
        stale = staleness(tb, tc, now)
        spans = long_replicate_spans(tb, tc)
        pair = Pair(name, bp, cp, tb, tc, comparison, differences(tb, tc), model, notes, stale, spans)
        pair.future, pair.too_old = future_records(tb, tc, now), too_old(tc, max_age, now)
        pairs.append(pair)
    return RegressionReport(pairs, alpha, min_effect, only_b, only_c, max_age)


# ---------------------------------------------------------------------------------------------
# bench --append: more replicates added to a result, interleaved in time with another's


@dataclass(frozen=True)
class AppendTarget:
    """The bench result `bench --append` adds replicates to: the file, its result, and the bytes it
    held when read (it is rewritten only if it still holds them: fileio.write_json_if_unchanged)."""

    path: Path
    timing: Timing
    data: bytes


def append_target(
    path: Path, backend: str, identity: dict[str, str], runs: int, warmup: int
) -> AppendTarget | None:
    """The result in `path` that `bench --append` will add to, checked before anything is timed;
    None where there is no file yet (bench writes it new, so a loop works from its first round).

    One DataError line, the file untouched, unless it is a bench (or jetson runner) result of the
    same model (sha256), backend, --runs and --warmup: a compare report, an optimize report, a
    profile or a trtexec --exportTimes file is no result to add runs to, and a file that records no
    model cannot show the runs are of this one. --runs and --warmup are refused rather than mixed:
    the replicates of one side must be draws of one procedure, and where latency drifts within a run
    (every H100 torch run got 2–2.5 % faster over its first 100 of 200) the warm-up and the run
    length move a run's median, which the test on replicate medians would count as run-to-run
    variation. trtexec warms up by time and takes --iterations as a minimum, so its sample counts
    are trtexec's: not checked there. The setup facts are checked on the first new run
    (check_append_setup): the backend records them as it measures."""
    from deployopt.fileio import resolve_output

    if resolve_output(path)[1]:  # /dev/null, a FIFO, /dev/stdout: nothing to read back and rewrite
        raise DataError(
            f"--append: {path} is not a regular file: --append reads the result there and rewrites it"
        )
    try:
        data = read_json_input(path, DataError, "a bench result", MEASUREMENT_MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DataError(f"--append: cannot read {path}: {exc.strerror or exc}") from None
    except DataError as exc:  # a file too large to be one: read whole, it filled memory first
        raise DataError(f"--append: {exc} (nothing was timed)") from None

    def refuse(why: str) -> DataError:
        return DataError(f"--append: {path} {why} (nothing was timed)")

    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        what = "is empty" if not data.strip() else "is not JSON"
        raise refuse(f"{what}, not a deployopt bench result to add runs to") from None
    kind = _not_a_bench_result(doc)
    if kind:
        raise refuse(f"is {kind}, not a bench result: --append adds runs to what `deployopt bench -o` wrote")
    try:
        existing = timing_from_json(path, doc)
    except DeployoptError as exc:  # malformed samples, a failed or predicted run: its own line
        raise DataError(f"--append: {exc}") from None
    try:
        recorded = recorded_model(path, existing)
    except DeployoptError as exc:  # a malformed "model" record: its own words, this option's frame
        raise DataError(f"--append: {exc} (nothing was timed)") from None
    if recorded is None:
        raise refuse(
            "records no model (written before results did), so the runs added could not be checked to "
            "be of the same one; bench into a new file"
        )
    if recorded["sha256"] != identity["sha256"]:
        raise refuse(
            f"holds runs of {recorded['file']} (sha256 {recorded['sha256'][:12]}…), and this bench times "
            f"{identity['file']} (sha256 {identity['sha256'][:12]}…), another model; bench it into its "
            "own file"
        )
    if existing.backend != backend:
        raise refuse(f"holds runs timed by backend {existing.backend!r}, and this bench uses {backend!r}")
    if backend != "trtexec":
        sizes = sorted({r.runs for r in existing.replicates or [Replicate(existing.runs)]})
        if sizes != [runs] or existing.warmup != warmup:
            had = f"--runs {'/'.join(map(str, sizes))} --warmup {existing.warmup}"
            fix = f"give {had}" if len(sizes) == 1 else "bench into a new file"
            raise refuse(
                f"holds runs timed with {had}, and this bench asks --runs {runs} --warmup {warmup}: the "
                "runs of one side must be timed alike (warm-up and run length move a run's median where "
                f"latency drifts within it); {fix}"
            )
    return AppendTarget(path, existing, data)


def _not_a_bench_result(doc: Any) -> str:
    """What a parsed JSON file is where it is not a bench / runner result ('' where it may be one:
    timing_from_json checks the rest)."""
    if isinstance(doc, list):
        return "a JSON list (a trtexec --exportTimes file has one query per entry)"
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__}"
    if doc.get("tool") == "deployopt optimize":
        return "a deployopt optimize report"
    if is_compare_report(doc):
        return "a deployopt compare report"
    if "samples_us" not in doc:
        return "a profile result (per-layer times)" if "layers" in doc else "a JSON object without samples_us"
    return ""


def check_append_setup(target: AppendTarget, new: Timing) -> None:
    """The first run `bench --append` timed against the result it goes into: one DataError line
    (the file untouched, no further run timed) where their setups differ by what `compare
    --strict` flags (setup_differences: backend, GPU or CPU, cores and threads, runtime versions,
    SMs, dtype, input shapes, what was timed; a fact the file lacks does not count). Such runs pooled
    as one side's replicates would make a between-setup change look like run-to-run variation."""
    diffs = setup_differences(target.timing, new)
    if diffs:
        raise DataError(
            f"--append: {target.path} holds runs of another setup than this one ({'; '.join(diffs)}): "
            "not added (the runs of one side must share a setup); bench into a new file"
        )
