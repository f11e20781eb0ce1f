"""Per-layer latency cache on disk: the measured staircases the optimizer's cost model is built from.

Like HALP's lookup table, but built by the tool and shared across runs: one small JSON file per
(device fingerprint, dtype, ConvShape.signature()). A rerun, a resumed run, the trim run after a
lossless run, or another model with the same layer shapes re-uses every point already measured.
Files are written atomically, so two processes filling the same cache at worst measure a point twice.

Root: deployopt.paths.cache_dir("lut") ($DEPLOYOPT_CACHE_DIR/lut, else ~/.cache/deployopt/lut).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deployopt import paths
from deployopt.errors import CacheWarning, OutputError
from deployopt.fileio import write_json
from deployopt.layers import ConvShape
from deployopt.timing import Timing, is_latency


def cache_root() -> Path:
    """Where the per-layer tables live (deployopt.paths.cache_dir("lut"))."""
    return paths.cache_dir("lut")


#: Words that make an environment key a reading that drifts: a key is dropped when one of its words
#: (split at "_", "-", ".") is one of these ("sm_clock_mhz", "jetson_clocks", "timestamp",
#: "temperature_c"). Whole words, not substrings: "onnxruntime" and "cuda_runtime" hold versions,
#: and matched "time" as substrings, so an onnxruntime or CUDA upgrade kept the old timings. Nor
#: prefixes: "clocks_locked" (whether the board's GPU clock was locked, a setup fact that changes
#: every timing) was dropped because "clocks" starts with "clock", so a table filled with the clock
#: locked was reused with it unlocked (STABLE keeps it).
VOLATILE = frozenset(
    {
        "clock",
        "clocks",
        "temp",
        "temps",
        "temperature",
        "temperatures",
        "power",
        "time",
        "times",
        "timestamp",
        "walltime",
        "timeout",
        "pid",
        "host",
        "hostname",
        "utilization",
    }
)
VOLATILE_PHRASES = ("memory_used",)
#: Setup facts whose names hold a VOLATILE word: kept in the fingerprint.
STABLE = frozenset({"clocks_locked"})
#: Facts about one model's build or one timed loop, not about the device: the engine a TensorRT
#: backend or jetson/runner.py built (its path, which lies in a per-run work folder, its key, whether
#: it was built now), a board's current devfreq clock and its over-current events during the loop.
#: In the fingerprint they made every run's table a new one, so the sweep was never reused. So did
#: the runner's readings around its timed loop (the devfreq clock and the thermal zones, before and
#: after: a real board is never at the same temperature twice; the power mode and the devfreq limits
#: stay in the key) and trtexec's verdicts on one run (enqueue-bound, unstable). So would the time
#: power or heat held the GPU's clock down in one run (clock_slowdown_us: its reasons' names, such
#: as "sw_thermal_slowdown", hold no VOLATILE word).
PER_RUN = (
    "engine",
    "engine_key",
    "engine_built_now",
    "engine_build_s",
    "gpu_cur_freq_mhz",
    "oc_events",
    "gpu_clock_during_run",
    "temperatures_c",
    "trtexec_flags",
    "clock_slowdown_us",
    # the model's input names and shapes (ort, torch and TensorRT results record them for compare):
    # the same device timed the same conv shapes for another model, or the same model with its
    # input renamed, and every conv was timed again into a table of its own (each conv's own shape,
    # batch included, is its entry's key)
    "input_shapes",
    # the deployopt that recorded the timing (environment.collect, for compare's note): the
    # kernels timed are the libraries' and the device's, which the rest of the environment names;
    # in the key, every upgrade of deployopt would re-time every table
    "deployopt",
)


def _volatile(key: str) -> bool:
    key = key.lower()
    if key in STABLE:
        return False
    words = re.split(r"[^a-z0-9]+", key)
    return any(w in VOLATILE for w in words) or any(p in key for p in VOLATILE_PHRASES)


def _stable(value: Any) -> Any:
    """The environment without what drifts between two runs on the same device (clocks, times,
    the engine of the model that happened to be timed first)."""
    if isinstance(value, dict):
        return {
            k: _stable(v)
            for k, v in sorted(value.items())
            if k not in PER_RUN and (isinstance(v, dict) or not _volatile(str(k)))
        }
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    return value


def device_fingerprint(
    backend: str, environment: dict[str, Any] | None = None, sms: int | None = None
) -> str:
    """A folder name that changes whenever the timings could: backend, device, SM limit, versions.

    Readable prefix (backend, device, SMs) plus a short hash of the stable part of what the backend
    reported about its environment (libraries, driver, GPU), so an upgrade starts a fresh table
    while clock readings and timestamps do not.
    """
    env = dict(environment or {})
    device = str(env.get("device") or env.get("gpu") or env.get("target") or "unknown")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower() or "unknown"
    digest = hashlib.sha256(
        json.dumps([backend, sms, _stable(env)], sort_keys=True, default=str).encode()
    ).hexdigest()[:10]
    return f"{backend}-{slug}-{sms if sms else 'all'}sms-{digest}"


@dataclass
class SweepResult:
    """Table values for the shapes asked for, and what it cost to get them."""

    values: dict[str, float] = field(default_factory=dict)  # signature -> median µs
    measured: int = 0  # points timed on the device in this call
    cached: int = 0  # points read from disk (or given by the caller)
    seconds: float = 0.0  # wall time of the device sweeps in this call
    #: samples per conv of each value read from disk or timed in this call (not `known` ones): the
    #: report says these, not the count asked for, which a cached entry may exceed
    samples: list[int] = field(default_factory=list)
    #: points given by the caller (`known`: a resumed run's journal), counted in `cached` too: the
    #: report said a resumed run's journal values came "from the cache", naming a folder it never read
    known: int = 0


#: The folder of a dtype's table where it is not the dtype's name: a change to how that dtype's sweep
#: convs are built (`layers.conv_model`) renames it, so tables timed the old way are never read.
#: int8: Q/DQ-quantized convs since 2026-12-04 (before, a plain conv that TensorRT ran in fp16).
DTYPE_FOLDER = {"int8": "int8-qdq"}


def entry_samples(values: dict[str, float], folders: Sequence[Path]) -> dict[str, int]:
    """Samples per conv of each value, read from the cache entry in `folders` whose median is that
    value; a value with no such entry (never cached, since removed, or replaced by a later run's
    timing) is left out. How a journal from before it recorded its sweep's sample count says it."""
    counts: dict[str, int] = {}
    for sig, value in values.items():
        for folder in folders:
            try:
                timing = Timing.from_json(json.loads((folder / f"{sig}.json").read_text())["timing"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if abs(timing.median_us - value) <= 1e-9 * max(1.0, abs(value)):
                counts[sig] = timing.runs
                break
    return counts


def _warmed(entry: dict[str, Any]) -> int:
    """The warm-up an entry's timing had: the runs its timing records (`timing.warmup`), or the
    warm-up its run asked of the sweep (`sweep_warmup`) where that is more (a backend that warms a
    conv its own way records its own count: torch's CUDA-graph convs 3, whatever was asked). An
    entry that records neither (not written by deployopt) is taken as timed cold, 0: unknown is
    not warm, and a run that asks for any warm-up times it again."""
    recorded = entry["timing"].get("warmup")
    asked = entry.get("sweep_warmup")
    counts = [v for v in (recorded, asked) if isinstance(v, int) and not isinstance(v, bool)]
    return max(counts, default=0)


class LayerCache:
    """The on-disk table for one device fingerprint and dtype."""

    def __init__(
        self,
        fingerprint: str,
        dtype: str,
        root: str | os.PathLike[str] | None = None,
        persist: bool = True,
        min_runs: int = 0,
        min_warmup: int = 0,
    ) -> None:
        self.fingerprint = fingerprint
        self.dtype = dtype
        #: an entry of fewer samples than this is timed again (and replaced): a run asking for
        #: --sweep-runs 50 was given an earlier run's 3-sample medians, its report saying 50
        self.min_runs = min_runs
        #: the warm-up runs this run asks of its sweep: an entry timed with fewer is timed again (and
        #: replaced), as one of fewer samples is. A `--warmup 0` smoke run's cold first-run medians
        #: (x1.8 a warmed table's at the median, x59 at worst) were the table of a later `--warmup 20`
        #: run, its report saying "after 20 warm-up". Each entry written records it (`sweep_warmup`)
        self.min_warmup = min_warmup
        # a str root (OptimizeConfig(cache_root="/some/dir")) was a TypeError on `/`
        base = Path(root) if root is not None and os.fspath(root) else cache_root()
        self.dir = base / fingerprint / DTYPE_FOLDER.get(dtype, dtype)
        self.persist = persist
        self._write_failed = False  # warned once; later entries are not tried again
        #: entries `put` while held (`hold`), written as they come to the folder the first one names
        #: (`_locate`): `settle` writes them again under the fingerprint it is given where that names
        #: another folder
        self._held: list[tuple[ConvShape, Timing]] | None = None
        self._locate: Callable[[Timing], str] | None = None
        #: folders `fill` read an entry from or wrote one to: what the report names (a held folder
        #: that `settle` left only where an entry was read from it)
        self.used: list[Path] = []
        self._read: set[Path] = set()  # those of `used` that `fill` read an entry from

    def _use(self, read: bool = False) -> None:
        if self.dir not in self.used:
            self.used.append(self.dir)
        if read:
            self._read.add(self.dir)

    def hold(self, locate: Callable[[Timing], str]) -> None:
        """Keep a copy of what `put` writes until `settle` names the folder. A resumed run knows its
        device's fingerprint only from the journal's environment, as the run that wrote it reported
        it: an older backend reported fewer facts, and a resume lets a Python patch release or an
        unrecorded thread count pass (said), so that folder may be another setup's table. It is read
        (the journal's own run timed what is there), never written: the first timing `put` names
        this device's folder (`locate(timing)`: its fingerprint), where it and the rest are written
        as they come (an interrupted sweep loses one chunk, and `fill` looks there for what a resume
        of the same journal timed before). Written into the journal's folder, this machine's timings
        were read as that setup's by the next run that had it."""
        if self._held is None:
            self._held = []
            self._locate = locate

    @property
    def write_failed(self) -> bool:
        """Whether an entry could not be written (read-only $HOME, full disk: warned once, no later
        entry tried): the report says the table was not cached, rather than naming no folder."""
        return self._write_failed

    @property
    def holding(self) -> bool:
        return self._held is not None

    def settle(self, fingerprint: str | None = None) -> None:
        """Write the held entries again under `fingerprint` (the environment an end-to-end timing of
        this run reported) where it names another folder than this cache's; later entries go there
        alone. None: they stay where they were written. The old folder keeps its copies, and the
        report names it only where an entry was read from it."""
        held, self._held, self._locate = self._held, None, None
        if not fingerprint or fingerprint == self.fingerprint:
            return
        if self.dir not in self._read and self.dir in self.used:
            self.used.remove(self.dir)
        self._move(fingerprint)
        for shape, timing in held or []:
            self.put(shape, timing)

    def _move(self, fingerprint: str) -> None:
        """Read and write the folder of `fingerprint` from now on (this dtype's, as before)."""
        self.fingerprint = fingerprint
        self.dir = self.dir.parent.parent / fingerprint / self.dir.name

    def _path(self, shape: ConvShape) -> Path:
        return self.dir / f"{shape.signature()}.json"

    def get(self, shape: ConvShape) -> Timing | None:
        if not self.persist:
            return None
        path = self._path(shape)
        try:
            data = json.loads(path.read_text())
            timing = Timing.from_json(data["timing"])
            # a NaN or negative sample went into the sweep's table (and the journal, which --resume
            # then refused as damaged): an entry without latencies is no entry, as one without JSON
            if not all(is_latency(s) for s in timing.samples_us):
                raise ValueError("samples_us are not latencies")
            return timing if timing.runs >= self.min_runs and _warmed(data) >= self.min_warmup else None
        except (FileNotFoundError, NotADirectoryError):
            return None  # not measured yet (or no cache folder at all)
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a cache only saves time: measure again
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a cache entry"
            warnings.warn(f"cannot read cache entry {path} ({why}); measuring it again", CacheWarning, 2)
            return None

    def put(self, shape: ConvShape, timing: Timing) -> None:
        """Save one entry; a cache that cannot be written (read-only $HOME, full disk) is one warning
        and the run goes on, since the cache only saves re-measuring."""
        if self._locate is not None:  # held: the first timing names this device's folder (`hold`)
            locate, self._locate = self._locate, None
            self._move(locate(timing))
        if not self.persist or self._write_failed:
            return
        try:
            entry = {"shape": shape.to_json(), "timing": timing.to_json(), "sweep_warmup": self.min_warmup}
            write_json(self._path(shape), entry)
            self._use()
        except OutputError as exc:
            self._write_failed = True
            warnings.warn(f"{exc}; the layer cache is not saved this run", CacheWarning, 2)
            return
        if self._held is not None:
            self._held.append((shape, timing))

    def fill(
        self,
        measure: Callable[[list[ConvShape]], list[Timing]],
        shapes: Sequence[ConvShape],
        known: dict[str, float] | None = None,
        chunk: int = 16,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> SweepResult:
        """Median µs for every shape: from `known` (e.g. a journal), then disk, then `measure`.

        Measures in chunks so a long sweep saves as it goes (an interrupted sweep loses one chunk).
        """
        result = SweepResult()
        unique: dict[str, ConvShape] = {}
        for s in shapes:
            unique.setdefault(s.signature(), s)
        todo: list[ConvShape] = []
        for sig, shape in unique.items():
            if known and sig in known:
                result.values[sig] = known[sig]
                result.cached += 1
                result.known += 1
                continue
            if not self._take(shape, result):
                todo.append(shape)
        done = 0
        if on_progress:
            on_progress(0, len(todo))
        while todo:
            # held (`hold`): one conv first, whose timing names this device's folder, where the rest
            # may be already (a resume of the same journal that was interrupted in its sweep); then
            # the rest of its chunk, so that an interrupted sweep still loses one chunk at most
            located = self._locate is None
            size = chunk - done % chunk if located else 1
            part, todo = todo[:size], todo[size:]
            t0 = time.perf_counter()
            timings = measure(part)
            result.seconds += time.perf_counter() - t0
            for shape, timing in zip(part, timings):
                self.put(shape, timing)
                result.values[shape.signature()] = timing.median_us
                result.samples.append(timing.runs)
            result.measured += len(part)
            done += len(part)
            if not located and self._locate is None:
                todo = [shape for shape in todo if not self._take(shape, result)]
            if on_progress:
                on_progress(done, done + len(todo))
        return result

    def _take(self, shape: ConvShape, result: SweepResult) -> bool:
        """Put `shape`'s cached entry in `result`, if this folder has one of it (and say so)."""
        cached = self.get(shape)
        if cached is None:
            return False
        result.values[shape.signature()] = cached.median_us
        result.samples.append(cached.runs)
        result.cached += 1
        self._use(read=True)
        return True
