"""Read what trtexec prints and exports: console logs (7.x to 10.x), --exportTimes, --exportProfile,
--exportLayerInfo JSON.

Why a parser of our own: trtexec's numbers are the ones TensorRT users trust, but its log format
changed across versions (7.x "Host Latency / min: ... (end to end ...)", 8.x+ "=== Performance
summary ===", profile tables with and without a median column, names first or last), and a log may
hold no end-to-end timing at all (--dumpProfile without --separateProfileRun, --skipInference).
Every number here is copied from the recording, converted only in unit; nothing is interpolated.
A log without a summary says so (`no_timing_reason`) instead of returning zeros.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from deployopt.backends.base import KernelRecord, LayerTime, Profile
from deployopt.errors import DataError, DeployoptError
from deployopt.kernels import parse_tile
from deployopt.timing import Timing, is_latency

PathLike = Union[str, Path]

NO_TIMING = "no end-to-end timing in this log"


class NoTimingError(DeployoptError):
    """The recording has no end-to-end timing (profile-only or --skipInference run)."""


# ---------------------------------------------------------------------------------------------
# result types


@dataclass
class LatencyStats:
    """One trtexec summary line, in milliseconds as printed. `percentiles` maps 99.0 -> ms."""

    min_ms: float | None = None
    max_ms: float | None = None
    mean_ms: float | None = None
    median_ms: float | None = None
    percentiles: dict[float, float] = field(default_factory=dict)

    @property
    def median_us(self) -> float | None:
        return None if self.median_ms is None else self.median_ms * 1000.0

    def to_json(self) -> dict[str, Any]:
        return {
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "mean_ms": self.mean_ms,
            "median_ms": self.median_ms,
            "percentiles": {f"{k:g}": v for k, v in self.percentiles.items()},
        }


@dataclass
class Iteration:
    """One query of --exportTimes, milliseconds since trtexec started; keys as present in the file."""

    values: dict[str, float]

    def __getitem__(self, key: str) -> float:
        return self.values[key]

    @property
    def compute_ms(self) -> float | None:
        return self.values.get("computeMs")

    @property
    def latency_ms(self) -> float | None:
        return self.values.get("latencyMs")

    @property
    def enqueue_ms(self) -> float | None:
        """endEnqMs - startEnqMs (trtexec exports the two ends, not the difference)."""
        if "startEnqMs" in self.values and "endEnqMs" in self.values:
            return self.values["endEnqMs"] - self.values["startEnqMs"]
        return None

    def to_json(self) -> dict[str, float]:
        return dict(self.values)


@dataclass
class LayerInfo:
    """One engine layer from --exportLayerInfo (detailed or names-only)."""

    name: str
    layer_type: str | None = None
    tactic_name: str | None = None
    tactic_value: str | None = None
    tile: tuple[int, ...] | None = None
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "layer_type": self.layer_type,
            "tactic_name": self.tactic_name,
            "tactic_value": self.tactic_value,
            "tile": list(self.tile) if self.tile else None,
            "inputs": self.inputs,
            "outputs": self.outputs,
        }


@dataclass
class LayerInfoSet:
    layers: list[LayerInfo]
    bindings: list[str]  # the engine's I/O tensor names ("Bindings" up to 10.x, "I/O Tensors" 11.x)
    detailed: bool
    #: TensorRT >= 11's "I/O Tensors" objects as written (Name, IOMode, DataType, Dimensions, ...)
    io_tensors: list[dict[str, Any]] = field(default_factory=list)

    def by_name(self) -> dict[str, LayerInfo]:
        return {layer.name: layer for layer in self.layers}

    def io_types(self) -> dict[str, str | None]:
        """I/O tensor name -> data type, where the export says it (11.x): e.g. whether an engine
        built from a model typed fp16 kept fp32 inputs and outputs."""
        return {t.get("Name", ""): tensor_format(t)[1] for t in self.io_tensors}

    def to_json(self) -> dict[str, Any]:
        out = {
            "detailed": self.detailed,
            "bindings": self.bindings,
            "layers": [layer.to_json() for layer in self.layers],
        }
        if self.io_tensors:  # 11.x only, so earlier exports serialize as they always did
            out["io_tensors"] = self.io_tensors
        return out


@dataclass
class TrtexecRun:
    """Everything one trtexec run recorded. Stats are None where the recording has none."""

    version: str | None = None
    device: str | None = None
    compute_capability: str | None = None
    sms: int | None = None
    precision: str | None = None
    command: str | None = None
    options: dict[str, str] = field(default_factory=dict)  # "CUDA Graph": "Enabled", ...
    throughput_qps: float | None = None
    latency: LatencyStats | None = None  # "Latency" (H2D + compute + D2H); 7.x "Host Latency"
    end_to_end: LatencyStats | None = None  # "End-to-End Host Latency"; 7.x "(end to end ...)"
    enqueue: LatencyStats | None = None
    h2d: LatencyStats | None = None
    gpu_compute: LatencyStats | None = None
    d2h: LatencyStats | None = None
    total_host_walltime_s: float | None = None
    build_s: float | None = None  # "Engine built in N sec." (8.0+): trtexec's wall time of the build
    total_gpu_compute_s: float | None = None
    queries: int | None = None
    warmup_queries: int | None = None
    warnings: list[str] = field(default_factory=list)  # trtexec's own [W] messages
    flags: list[str] = field(default_factory=list)  # enqueue_bound, h2d_bound, d2h_bound, unstable, ...
    gpu_cov_percent: float | None = None
    no_timing_reason: str | None = None
    layers: list[LayerTime] = field(default_factory=list)  # per-layer profile, "Total" row excluded
    profile_iterations: int | None = None  # "=== Profile (N iterations ) ===" or {"count": N}
    profile_total_ms: float | None = None  # the table's "Total" row, average per iteration
    iterations: list[Iteration] = field(default_factory=list)  # --exportTimes
    layer_info: LayerInfoSet | None = None
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    @property
    def has_timing(self) -> bool:
        return bool(self.iterations) or any(
            s is not None for s in (self.latency, self.end_to_end, self.gpu_compute)
        )

    @property
    def enqueue_bound(self) -> bool:
        return "enqueue_bound" in self.flags

    @property
    def transfer_bound(self) -> bool:
        return "h2d_bound" in self.flags or "d2h_bound" in self.flags

    def require_timing(self) -> None:
        if not self.has_timing:
            raise NoTimingError(f"{NO_TIMING}: {self.no_timing_reason or 'no performance summary found'}")

    def timing(self, metric: str = "computeMs", backend: str = "trtexec") -> Timing:
        """Per-query samples (from --exportTimes) as a Timing in µs. Summary stats are not samples:
        without exportTimes this raises instead of inventing a distribution."""
        if not self.iterations:
            self.require_timing()
            raise NoTimingError(
                "this trtexec run has summary statistics only (no --exportTimes samples); "
                "use .gpu_compute / .latency for them"
            )
        if metric == "enqueueMs":
            values = [it.enqueue_ms for it in self.iterations]
        else:
            values = [it.values.get(metric) for it in self.iterations]
        if any(v is None for v in values):
            raise DataError(f"--exportTimes has no {metric!r} in every entry")
        env = {k: v for k, v in (("device", self.device), ("tensorrt", self.version)) if v}
        if self.sms is not None:
            env["sms"] = self.sms
        env.update({"trtexec_" + k.lower().replace(" ", "_"): v for k, v in self.options.items()})
        return Timing(
            backend=backend,
            samples_us=[float(v) * 1000.0 for v in values],  # type: ignore[arg-type]
            warmup=self.warmup_queries or 0,
            timed=f"one query, trtexec --exportTimes {metric} (precision {self.precision or '?'})",
            environment=env,
        )

    def profile(self, backend: str = "trtexec") -> Profile:
        return Profile(
            backend=backend,
            layers=self.layers,
            environment={"device": self.device, "tensorrt": self.version},
            timed="trtexec per-layer profile (median where recorded, else average), per query",
            runs=self.profile_iterations or 0,
        )

    def to_json(self) -> dict[str, Any]:
        def stats(s: LatencyStats | None) -> dict[str, Any] | None:
            return None if s is None else s.to_json()

        return {
            "version": self.version,
            "device": self.device,
            "compute_capability": self.compute_capability,
            "sms": self.sms,
            "precision": self.precision,
            "command": self.command,
            "options": self.options,
            "throughput_qps": self.throughput_qps,
            "latency": stats(self.latency),
            "end_to_end": stats(self.end_to_end),
            "enqueue": stats(self.enqueue),
            "h2d": stats(self.h2d),
            "gpu_compute": stats(self.gpu_compute),
            "d2h": stats(self.d2h),
            "total_host_walltime_s": self.total_host_walltime_s,
            "total_gpu_compute_s": self.total_gpu_compute_s,
            "queries": self.queries,
            "warmup_queries": self.warmup_queries,
            "warnings": self.warnings,
            "flags": self.flags,
            "gpu_cov_percent": self.gpu_cov_percent,
            "no_timing_reason": self.no_timing_reason,
            "profile_iterations": self.profile_iterations,
            "profile_total_ms": self.profile_total_ms,
            "layers": [layer.to_json() for layer in self.layers],
            "iterations": [it.to_json() for it in self.iterations],
            "layer_info": None if self.layer_info is None else self.layer_info.to_json(),
            "notes": self.notes,
            "sources": self.sources,
        }


# ---------------------------------------------------------------------------------------------
# small pure helpers


def parse_version_code(code: str) -> str:
    """trtexec banner codes to dotted versions: 8001 -> 8.0.1, 8502 -> 8.5.2, 101601 -> 10.16.1."""
    code = code.strip().lstrip("v")
    if "." in code:
        return code
    n = int(code)
    if n >= 100000:  # 10.x and later: MAJOR*10000 + MINOR*100 + PATCH
        return f"{n // 10000}.{n // 100 % 100}.{n % 100}"
    return f"{n // 1000}.{n // 100 % 10}.{n % 100}"  # 7.x-9.x: MAJOR*1000 + MINOR*100 + PATCH


def version_tuple(version: str | None) -> tuple[int, ...]:
    if not version:
        return ()
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


# ---------------------------------------------------------------------------------------------
# console log

_PREFIX = re.compile(r"^\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[([A-Z])\] ?(.*)$")
#: trtexec's own word on its build (7.x on): "Engine built in 320.636 sec." (not TensorRT's "[TRT]
#: Engine generation completed in N seconds", which leaves out trtexec's share of the build).
_BUILT_IN = re.compile(r"Engine built in ([0-9.]+) sec\.?$")
_BANNER = re.compile(r"^&&&& (RUNNING|PASSED|FAILED) TensorRT\.trtexec(?: \[TensorRT v(\d+)\])?.*? # (.*)$")
_NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_STAT = re.compile(rf"(min|max|mean|median|percentile\(({_NUM})%\)) = ({_NUM}) ms")
_SUMMARY_KEYS = {
    "Latency": "latency",
    "End-to-End Host Latency": "end_to_end",
    "Enqueue Time": "enqueue",
    "H2D Latency": "h2d",
    "GPU Compute Time": "gpu_compute",
    "D2H Latency": "d2h",
}
_LEGACY_SECTIONS = {"Host Latency": "latency", "Enqueue Time": "enqueue", "GPU Compute": "gpu_compute"}
_LEGACY_STAT = re.compile(
    rf"^(min|max|mean|median|percentile): ({_NUM}) ms(?: at ({_NUM})%)?"
    rf"(?: \(end to end ({_NUM}) ms(?: at {_NUM}%)?\))?$"
)
_LOG_LAYER = re.compile(r"^Name: (.*?), LayerType: ([^,]+), ")
_LOG_TACTIC = re.compile(r"TacticName: ([^,\s]+)")
_HEADER_OPTIONS = ("CUDA Graph", "Spin-wait", "Data transfers", "Separate profiling", "Skip inference")


def _stats_from_line(text: str) -> LatencyStats:
    s = LatencyStats()
    for key, pct, value in _STAT.findall(text):
        v = float(value)
        if pct:
            s.percentiles[float(pct)] = v
        else:
            setattr(s, f"{key}_ms", v)
    return s


def read_text(path: PathLike) -> str:
    """A log file, gzipped or not."""
    p = Path(path)
    try:
        if p.suffix == ".gz":
            with gzip.open(p, "rt", encoding="utf-8", errors="replace") as fh:
                return fh.read()
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise DataError(f"cannot read trtexec output {p}: {exc.strerror or exc}") from None


def parse_log_file(path: PathLike) -> TrtexecRun:
    run = parse_log(read_text(path))
    run.sources.append(str(path))
    return run


def parse_log(text: str) -> TrtexecRun:
    """Parse a trtexec console log (any version from 7.x on)."""
    run = TrtexecRun()
    lines = text.splitlines()
    legacy_section: str | None = None
    legacy: dict[str, LatencyStats] = {}
    legacy_e2e = LatencyStats()
    i = 0
    while i < len(lines):
        raw = lines[i]
        i += 1
        b = _BANNER.match(raw.strip())
        if b:
            if b.group(2) and not run.version:
                run.version = parse_version_code(b.group(2))
            if run.command is None:
                run.command = b.group(3).strip()
            continue
        m = _PREFIX.match(raw)
        if not m:
            info = _LOG_LAYER.match(raw)
            if info:  # --dumpLayerInfo rows are printed without the [time] [I] prefix
                if run.layer_info is None:
                    run.layer_info = LayerInfoSet(layers=[], bindings=[], detailed=True)
                tactic = _LOG_TACTIC.search(raw)
                name = tactic.group(1) if tactic else None
                run.layer_info.layers.append(
                    LayerInfo(
                        name=info.group(1), layer_type=info.group(2), tactic_name=name, tile=parse_tile(name)
                    )
                )
            continue
        level, msg = m.group(1), m.group(2)
        body = msg.strip()
        if level == "W" and not body.startswith("[TRT]"):
            if msg.startswith("  ") and run.warnings:  # continuation of the previous warning
                run.warnings[-1] += " " + body
            else:
                run.warnings.append(body)
            _classify_warning(run, body)
            continue
        if level != "I":
            continue
        built = _BUILT_IN.match(body)
        if built:
            run.build_s = float(built.group(1))
            continue
        # --- header facts
        key, sep, value = body.partition(": ")
        if sep:
            value = value.strip()
            if key == "TensorRT version":
                run.version = parse_version_code(value)
                continue
            if key == "Selected Device":
                run.device = value
                continue
            if key == "Compute Capability":
                run.compute_capability = value
                continue
            if key == "SMs" and value.isdigit():
                run.sms = int(value)
                continue
            if key == "Precision":
                run.precision = value
                continue
            if key in _HEADER_OPTIONS:
                run.options[key] = value
                continue
            if key == "Throughput":
                run.throughput_qps = float(value.split()[0])
                continue
            if key in _SUMMARY_KEYS and "=" in value:
                setattr(run, _SUMMARY_KEYS[key], _stats_from_line(value))
                legacy_section = None
                continue
            if key == "Total Host Walltime":
                run.total_host_walltime_s = float(value.split()[0])
                continue
            if key == "Total GPU Compute Time":
                run.total_gpu_compute_s = float(value.split()[0])
                continue
        w = re.match(rf"^Warmup completed (\d+) queries over ({_NUM}) ms", body)
        if w:
            run.warmup_queries = int(w.group(1))
            continue
        t = re.match(rf"^Timing trace has (\d+) queries over ({_NUM}) s", body)
        if t:
            run.queries = int(t.group(1))
            continue
        if body.startswith("The e2e network timing is not reported"):
            run.no_timing_reason = body
            continue
        if body.startswith("Skipped inference phase"):
            run.no_timing_reason = body
            continue
        p = re.match(r"^=== Profile \((\d+) iterations ?\) ===$", body)
        if p:
            run.profile_iterations = int(p.group(1))
            i = _parse_profile_table(lines, i, run)
            continue
        # --- legacy 7.x summary
        if body in _LEGACY_SECTIONS:
            legacy_section = _LEGACY_SECTIONS[body]
            legacy.setdefault(legacy_section, LatencyStats())
            continue
        if legacy_section is not None:
            ls = _LEGACY_STAT.match(body)
            if ls:
                name, value_s, pct, e2e = ls.groups()
                target = legacy[legacy_section]
                if name == "percentile":
                    target.percentiles[float(pct)] = float(value_s)
                    if e2e is not None:
                        legacy_e2e.percentiles[float(pct)] = float(e2e)
                else:
                    setattr(target, f"{name}_ms", float(value_s))
                    if e2e is not None:
                        setattr(legacy_e2e, f"{name}_ms", float(e2e))
                continue
            lt = re.match(rf"^(throughput|walltime|total compute time): ({_NUM}) (qps|s)$", body)
            if lt:
                v = float(lt.group(2))
                if lt.group(1) == "throughput":
                    run.throughput_qps = v
                elif lt.group(1) == "walltime":
                    run.total_host_walltime_s = v
                else:
                    run.total_gpu_compute_s = v
                continue
    for section, stats in legacy.items():
        setattr(run, section, stats)
    if legacy:
        run.notes.append("legacy TensorRT 7.x summary format (Host Latency / end to end / GPU Compute)")
        if legacy_e2e.median_ms is not None:
            run.end_to_end = legacy_e2e
        if run.queries == 0:
            run.notes.append(
                "the log says 0 queries in the timing trace, so its throughput (0 qps) is not usable"
            )
    if not run.has_timing and run.no_timing_reason is None:
        run.no_timing_reason = "the log has no performance summary"
    return run


def _classify_warning(run: TrtexecRun, body: str) -> None:
    if "bound by Enqueue Time" in body:
        run.flags.append("enqueue_bound")
    elif "bound by host-to-device transfers" in body:
        run.flags.append("h2d_bound")
    elif "bound by device-to-host transfers" in body:
        run.flags.append("d2h_bound")
    elif "GPU compute time is unstable" in body:
        run.flags.append("unstable")
        m = re.search(rf"coefficient of variance = ({_NUM})%", body)
        if m:
            run.gpu_cov_percent = float(m.group(1))
    elif "auxiliary streams" in body:
        run.flags.append("aux_streams")
    elif "--useCudaGraph flag has been ignored" in body:  # capture failed: timed without a graph
        run.flags.append("cuda_graph_ignored")


def _parse_profile_table(lines: list[str], i: int, run: TrtexecRun) -> int:
    """Rows after '=== Profile (N iterations ) ==='; two layouts:
    10.x   `Time(ms) Avg.(ms) Median(ms) Time(%) Layer`  (numbers first)
    8.x    `Layer  Time (ms)  Avg. Time (ms)  [Median Time (ms)]  Time %`  (name first, right-aligned)."""
    header = None
    rows: list[tuple[str, list[float]]] = []
    while i < len(lines):
        m = _PREFIX.match(lines[i])
        if not m or m.group(1) != "I":
            break
        body = m.group(2).strip()
        if header is None:
            header = body
            i += 1
            continue
        if not body:
            i += 1
            break
        ncols = 4 if "Median" in header else 3
        if header.startswith("Layer"):
            r = re.match(rf"^(.*?)\s+((?:{_NUM}\s+){{{ncols - 1}}}{_NUM})$", body)
            if not r:
                break
            name, nums = r.group(1), [float(x) for x in r.group(2).split()]
        else:
            r = re.match(rf"^((?:{_NUM}\s+){{{ncols}}})(.*)$", body)
            if not r:
                break
            nums, name = [float(x) for x in r.group(1).split()], r.group(2)
        rows.append((name, nums))
        i += 1
    for name, nums in rows:
        total_ms, avg_ms = nums[0], nums[1]
        median_ms = nums[2] if len(nums) == 4 else None
        pct = nums[-1]
        if name == "Total":
            run.profile_total_ms = avg_ms
            continue
        run.layers.append(_layer(name, total_ms, avg_ms, median_ms, pct))
    return i


def _layer(name: str, total_ms: float, avg_ms: float, median_ms: float | None, pct: float) -> LayerTime:
    per_query = median_ms if median_ms is not None else avg_ms
    extra: dict[str, Any] = {
        "total_ms": total_ms,
        "average_ms": avg_ms,
        "percentage": pct,
        "time_from": "median" if median_ms is not None else "average",
    }
    if median_ms is not None:
        extra["median_ms"] = median_ms
    return LayerTime(name=name, time_us=per_query * 1000.0, share=pct / 100.0, extra=extra)


# ---------------------------------------------------------------------------------------------
# exported JSON


def _load_json(source: PathLike | Any) -> Any:
    if isinstance(source, (str, Path)):
        try:
            return json.loads(read_text(source))
        except json.JSONDecodeError as exc:
            raise DataError(f"{source} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    return source


def parse_profile_json(source: PathLike | Any) -> tuple[int | None, list[LayerTime]]:
    """--exportProfile: `[{"count": N}, {"name", "timeMs", "averageMs", ["medianMs",] "percentage"}…]`.
    medianMs appears from about 8.2 on; where absent the per-query time is the average."""
    data = _load_json(source)
    if not isinstance(data, list):
        raise DataError("an --exportProfile file is a JSON list")
    count = None
    layers = []
    for entry in data:
        if "count" in entry and "name" not in entry:
            count = int(entry["count"])
            continue
        layers.append(
            _layer(
                entry["name"],
                float(entry["timeMs"]),
                float(entry["averageMs"]),
                float(entry["medianMs"]) if "medianMs" in entry else None,
                float(entry["percentage"]),
            )
        )
    return count, layers


#: The keys of one --exportTimes query in the recorded files (8.x: ../shared/fixtures/trtexec): each
#: stage's start and end since trtexec started, the stages' durations and the latency.
EXPORT_TIMES_KEYS = frozenset(
    {
        "startEnqMs",
        "endEnqMs",
        "startH2dMs",
        "endH2dMs",
        "startComputeMs",
        "endComputeMs",
        "startD2hMs",
        "endD2hMs",
        "h2dMs",
        "computeMs",
        "d2hMs",
        "latencyMs",
    }
)


def is_export_times(data: list[Any]) -> bool:
    """Whether a JSON list can be trtexec's --exportTimes: False when it holds objects and none of
    them has one of its keys (EXPORT_TIMES_KEYS). Any list of objects was read as one, and the error
    blamed the first field for not being a time: "--exportTimes entry 0: arch must be a finite time
    in ms" for a benchmark summary. A list of no objects at all is left to parse_times_json's own
    line ("entry 0 is 1")."""
    entries = [e for e in data if isinstance(e, dict)]
    return not entries or any(EXPORT_TIMES_KEYS.intersection(e) for e in entries)


#: Why a JSON list is not an --exportTimes file (is_export_times), after "X is a JSON list but".
NOT_EXPORT_TIMES = (
    "not a trtexec --exportTimes file (none of its objects has computeMs or another of its per-query times)"
)


def parse_times_json(source: PathLike | Any) -> list[Iteration]:
    """--exportTimes: one object per query with startEnqMs, endEnqMs, startComputeMs, endComputeMs,
    computeMs, latencyMs, h2dMs, d2hMs ... (whatever the version wrote)."""
    data = _load_json(source)
    if not isinstance(data, list):
        raise DataError("an --exportTimes file is a JSON list")
    if not is_export_times(data):
        raise DataError(f"a JSON list but {NOT_EXPORT_TIMES}")
    out = []
    for i, entry in enumerate(data):
        # a string, null, NaN or a negative time was a traceback, or a median of nan / -1000 µs
        if not isinstance(entry, dict):
            shown = json.dumps(entry)[:40]
            raise DataError(f"an --exportTimes file is a list of objects; entry {i} is {shown}")
        bad = next((k for k, v in entry.items() if not is_latency(v)), None)
        if bad is not None:
            raise DataError(
                f"--exportTimes entry {i}: {bad} must be a finite time in ms, 0 or more, not "
                f"{json.dumps(entry[bad])[:40]}"
            )
        out.append(Iteration({k: float(v) for k, v in entry.items()}))
    return out


_TYPE_WORDS = (  # data type words inside a <= 10.x "Format/Datatype" string, most specific first
    ("FP32", "Float"),
    ("Float", "Float"),
    ("FP16", "Half"),
    ("Half", "Half"),
    ("BF16", "BFloat16"),
    ("Int8", "Int8"),
    ("INT8", "Int8"),
    ("Int32", "Int32"),
    ("Int64", "Int64"),
    ("Bool", "Bool"),
)


def tensor_format(entry: dict[str, Any]) -> tuple[str | None, str | None]:
    """(format, data type) of one tensor of --exportLayerInfo, whichever schema wrote it. Up to
    10.x one "Format/Datatype" string ("Row major linear FP32", "Four wide channel vectorized row
    major Int8 format", or just "Float"): the format is that string and the type is read from its
    words; 11.x splits it into "Format" and "DataType" (the migration guide's I/O Tensors spell it
    DataType; "Datatype" is taken too)."""
    if "Format/Datatype" in entry:
        combined = str(entry["Format/Datatype"])
        words = combined.replace("-", " ").split()
        kind = next((name for word, name in _TYPE_WORDS if word in words), None)
        return combined, kind
    kind = entry.get("DataType", entry.get("Datatype"))
    fmt = entry.get("Format")
    return (None if fmt is None else str(fmt)), (None if kind is None else str(kind))


def _io_names(data: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """The engine's I/O tensor names: "Bindings" (a list of names, <= 10.x) or 11.x's "I/O
    Tensors" (a list of objects, kept as they are)."""
    if "Bindings" in data:
        return list(data["Bindings"]), []
    tensors = [t for t in data.get("I/O Tensors", []) if isinstance(t, dict)]
    return [str(t.get("Name", "")) for t in tensors], tensors


def parse_layer_info_json(source: PathLike | Any) -> LayerInfoSet:
    """--exportLayerInfo: {"Layers": [...], "Bindings": [...]} up to 10.x, {"Layers": [...],
    "I/O Tensors": [{"Name", "IOMode", "DataType", "Dimensions", ...}]} from 11.x; layers are dicts
    (detailed) or plain names (kLAYER_NAMES_ONLY)."""
    data = _load_json(source)
    if not isinstance(data, dict) or "Layers" not in data:
        raise DataError('an --exportLayerInfo file is a JSON object with "Layers"')
    layers = []
    detailed = False
    for entry in data["Layers"]:
        if isinstance(entry, str):
            layers.append(LayerInfo(name=entry))
            continue
        detailed = True
        tactic = entry.get("TacticName")
        layers.append(
            LayerInfo(
                name=entry.get("Name", ""),
                layer_type=entry.get("LayerType"),
                tactic_name=tactic,
                tactic_value=entry.get("TacticValue"),
                tile=parse_tile(tactic),
                inputs=list(entry.get("Inputs", [])),
                outputs=list(entry.get("Outputs", [])),
                raw=entry,
            )
        )
    bindings, io_tensors = _io_names(data)
    return LayerInfoSet(layers=layers, bindings=bindings, detailed=detailed, io_tensors=io_tensors)


def attach_layer_info(layers: list[LayerTime], info: LayerInfoSet) -> None:
    """Put each layer's tactic (and its tile) on the profiled layer of the same name."""
    by_name = info.by_name()
    for layer in layers:
        li = by_name.get(layer.name)
        if li is None:
            continue
        if li.layer_type:
            layer.extra["layer_type"] = li.layer_type
        if li.tactic_name:
            layer.extra["tactic"] = li.tactic_name
            layer.kernels = [KernelRecord(name=li.tactic_name, duration_us=layer.time_us, tile=li.tile)]


def drop_exported_warmups(run: TrtexecRun) -> None:
    """Leave out the warm-up queries an older trtexec wrote into --exportTimes. TensorRT 8.2's
    sampleReporting.cpp exports the whole trace (`exportJSONTrace(trace, ...)`) though its summary
    skips the warm-ups; 8.5's skips them in the export too. The log's two counts tell which: a file
    of warm-ups + timed queries holds both. Without that, a Nano's timing counted ~200 ms of
    cold, clock-ramping queries as samples (on a 0.5 ms model, 400 of them beside 100 timed)."""
    warm, timed = run.warmup_queries, run.queries
    if not warm or not timed or len(run.iterations) != warm + timed:
        return
    run.iterations = run.iterations[warm:]
    run.notes.append(
        f"this trtexec wrote its {warm} warm-up queries into --exportTimes too (as TensorRT 8.2's "
        f"does): left out, the {timed} timed queries kept"
    )


def load_run(
    log: PathLike | None = None,
    times: PathLike | None = None,
    profile: PathLike | None = None,
    layer_info: PathLike | None = None,
) -> TrtexecRun:
    """Combine a log and the JSON files of the same run; the JSON profile (more digits) wins over
    the log's table."""
    run = parse_log_file(log) if log is not None else TrtexecRun()
    if times is not None:
        run.iterations = parse_times_json(times)
        run.sources.append(str(times))
        drop_exported_warmups(run)
    if profile is not None:
        count, layers = parse_profile_json(profile)
        run.layers = layers
        run.profile_iterations = count
        run.sources.append(str(profile))
    if layer_info is not None:
        run.layer_info = parse_layer_info_json(layer_info)
        run.sources.append(str(layer_info))
        attach_layer_info(run.layers, run.layer_info)
    if run.iterations and run.no_timing_reason:
        run.notes.append(
            "the --exportTimes samples come from a run with the layer profiler on: they include its "
            "synchronizations (use --separateProfileRun)"
        )
    if log is None and not run.has_timing:
        run.no_timing_reason = "no log and no --exportTimes file"
    return run
