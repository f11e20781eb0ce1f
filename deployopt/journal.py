"""Append-only record of an optimize run, so an interrupted search resumes without re-measuring.

One JSON object per line, each line flushed and fsync'd before the search goes on: a crash or a
Ctrl-C can at worst lose the line being written, which replay then ignores. Replay gives back
every end-to-end Timing (keyed by plan), every per-layer table value, and the configuration the
run was started with, so `--resume` can refuse a journal that belongs to a different run.

A journal starts with its run's "start" event (written the moment the file is opened); a file
that does not (garbage, another program's JSON lines, nothing at all) is refused by replay rather
than taken for an empty journal, which would silently start the run over. A second "start" (two
runs' lines in one file) is refused too: replay merged both runs' timings into one search.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deployopt.errors import DeployoptError
from deployopt.fileio import output_error
from deployopt.timing import Timing, is_latency

JOURNAL_VERSION = 1


def plan_key(plan: dict[str, int], repeat: int = 0) -> str:
    """Canonical text of a plan: the same widths give the same key whatever the dict order.

    `repeat` > 0 names a re-measurement of the same plan (the final confirmation rounds)."""
    key = json.dumps({k: int(plan[k]) for k in sorted(plan)}, separators=(",", ":"))
    return f"{key}#{repeat}" if repeat else key


@dataclass
class Replay:
    """What a journal holds, ready for the search to consult instead of the device."""

    config: dict[str, Any] | None = None
    timings: dict[str, Timing] = field(default_factory=dict)  # plan_key -> end-to-end Timing
    layer_values: dict[str, float] = field(default_factory=dict)  # shape signature -> µs (median)
    #: what the sweep events say of those values: the samples per conv each sweep asked for (the
    #: last one recorded; None before journals recorded it), the fewest and most samples of its
    #: values, and the layer-cache folders (fingerprints) the sweeps used
    sweep_runs: int | None = None
    sweep_samples: list[int] = field(default_factory=list)
    sweep_fingerprints: list[str] = field(default_factory=list)
    fidelity: dict[str, dict[str, Any]] = field(default_factory=dict)  # plan_key -> fidelity record
    events: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    digest: str | None = None  # sha256 of the bytes replayed: a later look sees a change without a replay


def _measured_here(replay: Replay) -> list[dict[str, Any]]:
    """The environments of a journal's end-to-end timings that describe this machine's kind of
    setup, each once: measured (a prediction describes no machine), not a board's over ssh (`remote`)."""
    seen: list[dict[str, Any]] = []
    for timing in replay.timings.values():
        env = timing.environment
        if timing.measured and isinstance(env, dict) and not env.get("remote") and env not in seen:
            seen.append(env)
    return seen


def measured_elsewhere(replay: Replay, here: dict[str, Any] | None = None) -> str | None:
    """Why a journal's measurements do not resume on this machine, in the words of --resume's
    refusal, or None where they do. Its end-to-end timings each recorded the machine they were taken
    on; one that differs from this machine in a fact both record (environment.setup_changes: CPU,
    usable cores, Python's series, the OS's, a library's version, GPU, driver: the facts of the layer
    cache's device fingerprint, whose change starts a fresh table) was taken elsewhere, or before an
    upgrade, and a resume pooled its timings with this machine's in one search and one confirmation,
    the report calling them all this machine's (bug bash: a run interrupted on an EPYC with
    onnxruntime 1.31.0 resumed on a Xeon with 1.32.0). A Python patch release or a kernel update of
    the same series resumes, said (`patch_level_changes`). Predictions (the wave model) describe no
    machine, and a board timed over ssh (`remote`) is not this machine: neither is compared. The
    thread counts, which only the backend knows, are compared with its session's before anything is
    timed (`threads_refusal`). `here`: this machine's facts (environment.host_facts), read once."""
    from deployopt.environment import host_facts, setup_changes

    for env in _measured_here(replay):
        here = host_facts() if here is None else here
        changes = setup_changes(env, here)
        if changes:
            return (
                f"holds timings measured on another setup than this machine's ({'; '.join(changes)}): "
                "resumed, they would be pooled with this machine's in one search and one confirmation; "
                "use --force to start over here, or resume where it was measured"
            )
    return None


def patch_level_changes(replay: Replay, here: dict[str, Any] | None = None) -> list[str]:
    """What `measured_elsewhere` lets pass of a journal's timings, each once: a Python patch release
    or a kernel update of the same series (environment.patch_changes, `Python 3.11.8 → 3.11.9`)."""
    from deployopt.environment import host_facts, patch_changes

    out: list[str] = []
    for env in _measured_here(replay):
        here = host_facts() if here is None else here
        out += [change for change in patch_changes(env, here) if change not in out]
    return out


#: thread counts a measurement's environment records (part of the layer cache's fingerprint) that
#: `host_facts` cannot read: the backend's session says them (torch reads its count in its worker,
#: from OMP_NUM_THREADS and the cores), and a resumed run compares them with the journal's timings'
#: (`threads_refusal`), in the words said
THREAD_FACTS = (
    ("cpu_threads", "torch CPU threads (OMP_NUM_THREADS)"),
    ("intra_op_threads", "onnxruntime intra-op threads"),
)

#: what a CPU timing records of how much of the CPU it ran on, as `unchecked_facts` names it where a
#: journal's timings lack it (the noun) and this run's value (the label): the thread counts, and
#: the cores (recorded since 2026-12-07)
CPU_FACTS = (
    *((key, "thread count", word) for key, word in THREAD_FACTS),
    ("cpu_cores", "usable CPU core count", "usable CPU cores"),
)


def recorded_threads(replay: Replay) -> dict[str, set[Any]]:
    """The values of each of `THREAD_FACTS` the journal's measured timings recorded (not a board's
    over ssh): {} for a new journal, or one from before they were recorded."""
    found: dict[str, set[Any]] = {}
    for env in _measured_here(replay):
        for key, _word in THREAD_FACTS:
            if isinstance(env.get(key), (int, str)):
                found.setdefault(key, set()).add(env[key])
    return found


def threads_refusal(path: Path, threads: dict[str, set[Any]], env: Any) -> DeployoptError | None:
    """The refusal of a resumed run that measures (`env`: its session's environment, or a fresh
    timing's) at another thread count than the journal's timings (`threads`, recorded_threads):
    part of the layer cache's fingerprint, and a CPU latency changes with it as much as with the
    cores (bug bash: OMP_NUM_THREADS=1 resumed at 2). None where they agree, or cannot be compared."""
    if not threads or not isinstance(env, dict) or env.get("remote"):
        return None
    for key, word in THREAD_FACTS:
        was, now = threads.get(key), env.get(key)
        if was and now is not None and now not in was:
            return DeployoptError(
                f"--resume: {path} holds timings measured at {word} "
                f"{' / '.join(sorted(map(str, was)))}, this run measures at {now}: resumed, they "
                "would be pooled in one search and one confirmation; use --force to start over, "
                "or resume with the thread count they were measured at"
            )
    return None


def unchecked_facts(path: Path, replay: Replay, env: dict[str, Any]) -> str | None:
    """The warning for a journal whose timings recorded no `CPU_FACTS` fact that this run's record
    (`env`: its session's environment): written by an older deployopt, they resume unchecked on it,
    and a latency taken at other cores or threads is pooled with this run's. None where each of the
    journal's timings recorded what this run's do."""
    timed = _measured_here(replay)
    missing = [
        (noun, f"{label} {env[key]}")
        for key, noun, label in CPU_FACTS
        if env.get(key) is not None and any(key not in e for e in timed)
    ]
    if not missing:
        return None
    nouns = " and no ".join(dict.fromkeys(noun for noun, _ in missing))
    return (
        f"--resume: {path} recorded no {nouns} with its timings (an older deployopt wrote it): cannot "
        f"check that they were measured at this run's ({', '.join(v for _, v in missing)}); resumed, "
        "they are pooled with this run's as they are"
    )


class Journal:
    """Writer for OUTDIR/journal.jsonl; `Journal.replay(path)` reads one back."""

    def __init__(self, path: str | os.PathLike[str], resumed: Replay | None = None) -> None:
        """`resumed`: what `Journal.replay` read of `path` (a resumed run's, or an empty Replay for a
        new journal): its timings' thread counts are what each fresh one is held to. None: replayed
        here, for a caller that opens a journal on its own (one that cannot be replayed holds none)."""
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _cut_torn_line(self.path)
            if resumed is None:
                resumed = _replayed_or_empty(self.path)
            self._threads = recorded_threads(resumed)  # a resumed run's: checked at each timing
            self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (closed in close())
            self._opened = os.fstat(self._fh.fileno())  # the file in_place looks for at the path
        except OSError as exc:  # read-only, a file where the folder goes: one line, not a traceback
            raise output_error(self.path, exc) from None

    def write(self, event: str, *, check: bool = True, **data: Any) -> None:
        """Append one event and make it durable before returning; a full disk is one OutputError
        naming the journal (the lines already written still replay with --resume). `check`: first
        make sure the file is still the one at the journal's path (see `in_place`), so a run whose
        OUTDIR was removed stops at its next event rather than measure on for minutes, for nothing."""
        if check and not self.in_place():
            raise outdir_replaced(self.path.parent)
        if event == "measured":
            self._check_threads(data.get("timing"))
        line = json.dumps({"event": event, **data}, separators=(",", ":"), default=_json_default)
        try:
            self._fh.write(line + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            raise output_error(self.path, exc) from None

    def _check_threads(self, timing: Any) -> None:
        """Refuse (DeployoptError, before the timing is written or pooled) a fresh measurement of a
        resumed run taken at another thread count than the journal's timings (`threads_refusal`):
        optimize compares its session's before anything is timed, where the session can say them;
        this holds every timing to them all the same (a caller's session that cannot)."""
        env = timing.get("environment") if isinstance(timing, dict) else None
        refusal = threads_refusal(self.path, self._threads, env)
        if refusal is not None:
            raise refusal

    def in_place(self) -> bool:
        """Whether the file this journal appends to is still the one at its path. `rm -rf OUTDIR`
        while a run went on left it appending to a deleted file (and holding the lock of a deleted
        lock file): a second run then made OUTDIR anew and both exited 0, the folder holding one
        run's journal beside the other's results."""
        try:
            return os.path.samestat(self._opened, os.stat(self.path))
        except OSError:  # gone
            return False

    def close(self) -> None:
        """Close; a buffered line that cannot be written then is lost like a torn line, not an error."""
        if not self._fh.closed:
            with contextlib.suppress(OSError):
                self._fh.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def read(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
        """Events in order; a torn last line (killed mid-write) is skipped, a torn middle line is an error.

        Torn means cut short: every line is written with its newline last, so only a last line
        without one can be torn; any other line that is not JSON is damage (or another file)."""
        return Journal._events(Journal.read_bytes(path), path)

    @staticmethod
    def read_bytes(path: str | os.PathLike[str]) -> bytes:
        """The journal's bytes, or a one-line DeployoptError."""
        try:
            return Path(path).read_bytes()
        except OSError as exc:  # a folder named journal.jsonl, no read permission
            raise DeployoptError(f"cannot read {path}: {exc.strerror or exc}") from None

    @staticmethod
    def _events(data: bytes, path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
        # journal lines are ASCII (json.dumps escapes the rest): bytes that are not UTF-8 are
        # damage, shown as U+FFFD so the line fails as JSON below rather than as a traceback
        text = data.decode("utf-8", errors="replace")
        lines = text.splitlines()
        seen = False
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                if i == len(lines) - 1 and not text.endswith("\n"):
                    return
                if not seen:  # garbage from the start: some other file, not a damaged journal
                    raise DeployoptError(
                        f"{path} is not a deployopt journal (line {i + 1} is not JSON); "
                        "use --force to start over"
                    ) from None
                raise DeployoptError(
                    f"{path}: line {i + 1} is not valid JSON; the journal is damaged "
                    "(use --force to start over)"
                ) from None
            if not isinstance(event, dict):  # valid JSON, but no event: hand-edited or another file
                raise DeployoptError(f"{path}: line {i + 1} is not a journal event; the journal is damaged")
            seen = True
            yield event

    @classmethod
    def replay(cls, path: str | os.PathLike[str]) -> Replay:
        """What `path` holds; a one-line DeployoptError for a file that is no journal of a run."""
        data = cls.read_bytes(path)
        out = Replay(digest=hashlib.sha256(data).hexdigest())
        for ev in cls._events(data, path):
            kind = ev.get("event")
            if not out.events and kind != "start":  # every journal opens with its run's start
                raise DeployoptError(
                    f"{path} is not a deployopt journal (its first line is not a 'start' event); "
                    "use --force to start over"
                )
            if kind == "start" and out.events:  # two runs in one file: a resume would mix their timings
                raise DeployoptError(
                    f"{path} records more than one run (a second 'start' event); use --force to start over"
                )
            out.events.append(ev)
            try:
                _replay_event(out, ev)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                # a hand-edited or foreign line: what it lacks, not a traceback from deep in the search;
                # what _replay_event checks says what is wrong, a field it does not check no Python
                # internal ("'NoneType' object is not subscriptable")
                if isinstance(exc, KeyError):
                    why = f"no {exc.args[0]!r}"
                elif isinstance(exc, ValueError):  # _Damage, or a line written for users (replicates)
                    why = str(exc)
                else:
                    why = "a field is missing or of the wrong type"
                raise DeployoptError(
                    f"{path}: a {kind!r} event is damaged ({why}); use --force to start over"
                ) from None
        if not out.events:  # empty, or only the start line torn: no run recorded, as if missing
            raise DeployoptError(f"{path} records no run; nothing to resume (use --force to start over)")
        return out


def outdir_replaced(outdir: Path) -> DeployoptError:
    """The one line for a run whose OUTDIR (its journal, its lock file) was removed or replaced
    while it ran: what it journaled went with the folder, and it writes nothing there."""
    return DeployoptError(
        f"{outdir} was removed or replaced during the run; nothing written "
        "(its journal went with it): run it again"
    )


def _replayed_or_empty(path: Path) -> Replay:
    """`Journal.replay(path)`, or an empty Replay where there is no journal there (yet) or none that
    replays (whoever resumes it is refused by replay, in its words)."""
    try:
        return Journal.replay(path)
    except DeployoptError:
        return Replay()


def _cut_torn_line(path: Path) -> None:
    """Drop a torn last line (no newline: a run killed mid-write) before a resumed run appends.

    Replay skipped it; left there, the next event would be glued onto it and make a damaged middle
    line, so the run after this one could not resume."""
    try:
        f = open(path, "r+b")  # noqa: SIM115  (closed below)
    except FileNotFoundError:  # a new journal
        return
    with f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        f.truncate(f.read().rfind(b"\n") + 1)


class _Damage(ValueError):
    """What is wrong with a journal event, said in the user's terms (replay's one-line error)."""


def _replay_event(out: Replay, ev: dict[str, Any]) -> None:
    """Fold one event into `out`; a field of the wrong shape raises _Damage saying which (KeyError
    for one missing; TypeError/ValueError from a field not checked here)."""
    kind = ev.get("event")
    if kind == "start":
        config = ev.get("config")
        if not isinstance(config, dict):
            raise _Damage("config is not an object")
        out.config = config
    elif kind == "measured":
        plan = _plan(ev)
        doc = ev["timing"]
        if not isinstance(doc, dict):  # null was "'NoneType' object is not subscriptable"
            raise _Damage("timing is not an object")
        if not isinstance(doc.get("samples_us", []), list):
            raise _Damage("samples_us must be finite latencies in µs")
        timing = Timing.from_json(doc)
        if not timing.samples_us or not all(is_latency(s) for s in timing.samples_us):
            raise _Damage("samples_us must be finite latencies in µs")
        # what the run reads back: a string "no" was a measured latency in the report, an
        # environment that is no object a traceback where the layer cache is keyed on it
        if not isinstance(timing.measured, bool):
            raise _Damage("measured is not true or false")
        if not isinstance(timing.environment, dict):
            raise _Damage("environment is not an object")
        out.timings[plan_key(plan, ev.get("repeat", 0))] = timing
    elif kind == "sweep":
        raw = ev.get("values", {})
        if not isinstance(raw, dict):
            raise _Damage("values is not an object of per-conv latencies")
        # per-conv µs, checked as a measured event's samples: NaN went into the search's table
        if not all(is_latency(v) for v in raw.values()):
            raise _Damage("values must be finite per-conv latencies in µs")
        out.layer_values.update({str(k): float(v) for k, v in raw.items()})
        runs = ev.get("sweep_runs")
        if runs is not None:
            if type(runs) is not int or runs < 1:
                raise _Damage("sweep_runs is not a count of samples")
            out.sweep_runs = runs
        span = ev.get("samples_per_conv")
        if span is not None:
            counts = isinstance(span, list) and len(span) == 2 and all(type(n) is int and n > 0 for n in span)
            if not counts:
                raise _Damage("samples_per_conv is not [fewest, most]")
            lo, hi = out.sweep_samples or span
            out.sweep_samples = [min(lo, span[0]), max(hi, span[1])]
        fingerprint = ev.get("fingerprint")  # a folder name (lut.device_fingerprint), never a path
        folder = isinstance(fingerprint, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", fingerprint)
        if folder and fingerprint not in out.sweep_fingerprints:
            out.sweep_fingerprints.append(fingerprint)
    elif kind == "fidelity":
        # read back where the trim gate decides and the report is written: a report that is no
        # object, or failures that are no lines, was a traceback from deep in the search
        report = ev["report"]
        if not isinstance(report, dict):
            raise _Damage("report is not an object")
        failures = report["failures"]
        if not isinstance(failures, list) or not all(isinstance(f, str) for f in failures):
            raise _Damage("failures is not a list of lines")
        for key in ("max_abs_error", "cosine_min", "top1_agreement"):  # the figures the report prints
            value = report.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise _Damage(f"{key} is not a number")
        out.fidelity[plan_key(_plan(ev))] = ev
    elif kind == "done":
        out.done = True


def _plan(ev: dict[str, Any]) -> dict[str, Any]:
    """An event's plan; a list was an IndexError traceback in plan_key, null a TypeError's words."""
    plan = ev["plan"]
    if not isinstance(plan, dict) or not all(type(w) is int for w in plan.values()):
        raise _Damage("plan is not an object of group widths")
    return plan


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_json"):
        return obj.to_json()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"cannot journal {type(obj).__name__}")
