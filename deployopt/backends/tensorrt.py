"""Backend on the TensorRT Python API: parse ONNX, build (FP32/FP16/INT8), serialize, time.

Written against the documented APIs of TensorRT 8.2 (JetPack 4.6: Nano, TX2), 8.5 (JetPack 5:
Xavier), 10.x (JetPack 6: Orin) and 11.x (desktop; strongly typed only: fp16 from a model typed
fp16 by deployopt.precision, INT8 only from Q/DQ nodes, from NVIDIA's 10.x-to-11.x migration
guide). NOT RUN ON HARDWARE YET: no TensorRT could be installed where this was written; the calls
into TensorRT and CUDA run only against strict fakes of the four API surfaces
(tests/test_tensorrt_fake_api.py), never against the real libraries.

Why each choice:
- timing with CUDA events around `execute_async_v3` (>= 8.5) / `execute_async_v2` (8.2) on one
  stream, inputs uploaded once: the same quantity as trtexec's GPU Compute Time with
  --noDataTransfers, so the two backends can be compared;
- the engine is built in a child process by default (extra["isolate"]), so a build that crashes
  or hangs costs a one-line error and the timeout, not the caller's process;
- per-layer times via an IProfiler subclass; 8.2 only calls the profiler from synchronous
  execute_v2, 8.5+ also from enqueueV3;
- cuda-python or pycuda, whichever is importable, behind a five-method adapter.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from deployopt.backends.base import (
    Backend,
    LayerTime,
    MeasureOptions,
    Profile,
    Session,
    quantized_without_int8,
)
from deployopt.backends.trtexec import (
    built_precision,
    precision_phrase,
    refuse_implicit_int8,
    refuse_int8_calibration,
    strongly_typed,
)
from deployopt.backends.trtexec_parser import version_tuple
from deployopt.clocks import pci_bus_id, read_clocks, record_in_environment
from deployopt.errors import (
    BackendFailed,
    BackendUnavailable,
    CacheWarning,
    DataError,
    DeployoptError,
    DeployoptWarning,
    ModelError,
    OutputError,
    exit_phrase,
    no_such_file,
    oom_hint,
    reraise_interrupt,
    shorten,
)
from deployopt.prebuilt import (
    PREBUILT,
    is_engine_file,
    mark_prebuilt,
    prebuilt_profile_timed,
    refuse_engine_options,
)
from deployopt.timing import Timing, load_timing

#: the extra, not `pip install tensorrt`: that left the next line (no cuda-python) to follow; on a
#: Jetson the Python bindings are JetPack's package (a venv sees them with --system-site-packages)
TRT_HINT = (
    "tensorrt not installed: pip install 'deployopt[tensorrt]' (TensorRT and cuda-python); on a Jetson "
    "TensorRT comes with JetPack: sudo apt install python3-libnvinfer"
)
CUDA_HINT = (
    "neither cuda-python nor pycuda is installed: pip install 'deployopt[tensorrt]' (cuda-python; pin "
    "it to the driver's CUDA major, e.g. 'cuda-python>=12,<13'), or 'deployopt[pycuda]'; JetPack 4.6: "
    "sudo apt install python3-pycuda"
)
#: cudaErrorInsufficientDriver from cuda-python: a release newer than the driver's CUDA (a plain
#: `pip install cuda-python` fetches the newest major, which needs the newest driver)
NEWER_CUDA_PYTHON = (
    "this cuda-python is for a newer CUDA than the driver runs: install the release of the driver's CUDA "
    "major (nvidia-smi names it; e.g. pip install 'cuda-python>=12,<13'), or give --cuda pycuda"
)
DEFAULT_WORKSPACE_MIB = 1024
NO_FAST_INT8 = (
    "--dtype int8: this GPU has no native INT8 (TensorRT's platform_has_fast_int8 is False, as on Jetson "
    "Nano and TX2), so an INT8 engine runs slower than FP16; use --dtype fp16"
)
# INT8 calibration from data: this many samples at most, each one batch of the model (one TensorRT
# calibration run), not images: 512 at batch 1 is ~300 MB of 224² float32 tensors, at batch 8 eight times it
DEFAULT_CALIBRATION_COUNT = 512
# Part of every engine's key: raise it when build_engine starts building something else from the
# same inputs, so engines cached by the older recipe are rebuilt rather than reused.
BUILD_RECIPE = "1"
DEFAULT_ENGINE_DIR = Path("engines")


# ---------------------------------------------------------------------------------------------
# version dispatch (pure)


def api_for_version(version: str) -> str:
    """'v3' (name-based tensors, execute_async_v3: TensorRT >= 8.5) or 'v2' (bindings, 8.x < 8.5)."""
    v = version_tuple(version)
    if not v or v < (8, 0):
        raise BackendUnavailable(f"TensorRT {version} is too old: deployopt needs 8.0 or newer")
    return "v3" if v >= (8, 5) else "v2"


def workspace_api(version: str) -> str:
    """'memory_pool' (config.set_memory_pool_limit, 8.4+; the only one in 10.x) or
    'max_workspace_size' (8.0-8.3)."""
    return "memory_pool" if version_tuple(version) >= (8, 4) else "max_workspace_size"


def explicit_batch_flag(version: str) -> bool:
    """ONNX needs EXPLICIT_BATCH before 10.x; in 10.x it is the only mode and the flag is deprecated."""
    return version_tuple(version) < (10, 0)


def profiled_execution(version: str) -> str:
    """How to run for IProfiler: 'execute_v2' (8.2-8.4 call the profiler only from synchronous
    execution) or 'execute_async_v3' (8.5+ also call it from enqueueV3)."""
    return "execute_async_v3" if api_for_version(version) == "v3" else "execute_v2"


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):  # streamed: calibration sets can be large
                h.update(chunk)
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return h.hexdigest()


# A file's sha256, kept with the stat fingerprint it was read at (absolute path -> (fingerprint,
# digest)), so a calibration folder of thousands of files is read once per state, not once per
# engine key (optimize keys one engine per candidate). Only files whose last change is older than
# SETTLED_NS are kept: a file changed again within the same timestamp tick can keep its size and
# times, so a recently changed file is read every time until it has settled.
_sha_memo: dict[str, tuple[tuple[int, ...], str]] = {}
SETTLED_NS = 2_000_000_000


def _now_ns() -> int:
    return time.time_ns()


def _memo_sha256(path: Path) -> str:
    """_file_sha256, read again only when the file's device, inode, size, mtime or ctime changed."""
    now = _now_ns()  # before the stat: a change after it has a later timestamp than any kept one
    try:
        st = path.stat()
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    name = os.path.abspath(path)
    fingerprint = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    known = _sha_memo.get(name)
    if known is not None and known[0] == fingerprint:
        return known[1]
    digest = _file_sha256(path)
    if max(st.st_mtime_ns, st.st_ctime_ns) < now - SETTLED_NS:
        _sha_memo[name] = (fingerprint, digest)
    else:
        _sha_memo.pop(name, None)
    return digest


def content_digest(path: str | os.PathLike[str]) -> str:
    """sha256 of what `path` holds, so new contents under the same name are a different build: a
    file's bytes; for a folder, the sorted relative names of the files load_calibration lists (every
    non-hidden file, subfolders included) with each file's sha256. "absent" when nothing is there.
    Files whose stat is unchanged since an earlier call are not read again (see _sha_memo)."""
    from deployopt.fidelity import folder_files

    p = Path(path)
    if p.is_file():
        return _memo_sha256(p)
    if not p.is_dir():
        return "absent"
    h = hashlib.sha256(b"folder\n")
    for f in folder_files(p):
        h.update((json.dumps([f.relative_to(p).as_posix(), _memo_sha256(f)]) + "\n").encode("utf-8"))
    return h.hexdigest()


def hash_calibration(options: MeasureOptions) -> dict[str, tuple[tuple[int, ...], str]]:
    """Hash the calibration files an INT8 build is keyed on, in this process, and return the memo,
    for a worker process (build_and_time's `known`) to start from instead of reading them again."""
    if options.dtype == "int8":
        for path in (options.calibration_data, options.extra.get("calib_cache")):
            if path:
                content_digest(path)
    return dict(_sha_memo)


def table_only(options: MeasureOptions) -> str | None:
    """The calibration table an INT8 build reads instead of calibrating, with no data: calibration_data
    when it names a table, else extra["calib_cache"] when there is no calibration_data (as trtexec
    reads it, and the runner's --calib-cache alone). None for fp32/fp16 and for a build from data."""
    from deployopt.backends.trtexec import is_calibration_table

    if options.dtype != "int8":
        return None
    if options.calibration_data:
        data = str(options.calibration_data)
        return data if is_calibration_table(data) else None
    calib_cache = options.extra.get("calib_cache")
    return str(calib_cache) if calib_cache else None


def external_data_digests(model_path: str | os.PathLike[str], onnx_bytes: bytes) -> list[list[str]]:
    """[[location, sha256 or "absent"], ...] for each file the model keeps weights in, found as
    TensorRT's parser finds them (beside the model): new weights under the same file name are a
    new engine. The runner computes the same list without onnx (jetson/runner.py)."""
    import onnx
    from google.protobuf.message import DecodeError

    from deployopt.model import external_locations

    if b"location" not in onnx_bytes:  # no tensor kept outside: a large model is not parsed again
        return []
    model = onnx.ModelProto()
    try:
        model.ParseFromString(onnx_bytes)
    except (DecodeError, RuntimeError, ValueError):
        return []  # the parser says what is wrong with it
    folder = Path(model_path).parent
    return [[loc, content_digest(folder / loc)] for loc in external_locations(model)]


def build_facts(
    onnx_bytes: bytes,
    options: MeasureOptions,
    trt_version: str,
    shapes: dict[str, list[int]],
    external: list[list[str]] | None = None,
) -> dict[str, Any]:
    """Everything build_engine's result depends on, by contents. Left out on purpose:
    extra["timing_cache"] (it only saves tactic timings, and every build rewrites it, so keying on
    it would rebuild every time), "cuda", "isolate", runs and warmup; the calibration options when
    build_engine does not calibrate (fp32/fp16, or INT8 with neither calibration_data nor
    calib_cache: a Q/DQ model). A table the build only reads (table_only: calibration_data naming
    one, or calib_cache alone) is keyed by its bytes alone, the same either way: calibration_count
    and calib_cache (which a build from data fills) do not change that engine. On TensorRT >= 11 an
    fp16 build is keyed on the fp16 conversion's recipe too (it builds the converted model); the
    key is not there before 11, so engines cached on older versions keep their keys. Image
    preprocessing other than the defaults (calibration_preprocess) is keyed for a build from data.
    `external`: external_data_digests of the model's weight files, keyed only when there are any
    (the keys of models without them are unchanged)."""
    table = table_only(options)
    from_data = options.dtype == "int8" and bool(options.calibration_data) and table is None
    calib_cache = options.extra.get("calib_cache")
    if table is not None:
        calibration_sha256: str | None = content_digest(table)
    elif from_data:
        calibration_sha256 = content_digest(str(options.calibration_data))
    else:
        calibration_sha256 = None
    facts: dict[str, Any] = {
        "recipe": BUILD_RECIPE,
        "model_sha256": hashlib.sha256(onnx_bytes).hexdigest(),
        "dtype": options.dtype,
        "shapes": [[name, list(dims)] for name, dims in sorted(shapes.items())],
        "tensorrt": str(trt_version),
        "workspace_mib": int(options.extra.get("workspace_mib", DEFAULT_WORKSPACE_MIB)),
        "calibration_sha256": calibration_sha256,
        "calibration_count": (
            int(options.extra.get("calibration_count", DEFAULT_CALIBRATION_COUNT)) if from_data else None
        ),
        # a table beside the engine (no calib_cache) is named after the key, so it needs no entry
        "calib_cache_sha256": content_digest(calib_cache) if from_data and calib_cache else None,
    }
    if from_data and options.calibration_preprocess is not None and options.calibration_preprocess.changes():
        # images made into other tensors calibrate other ranges; only when not the defaults, so
        # engines calibrated before the image options existed keep their keys
        facts["calibration_preprocess"] = options.calibration_preprocess.changes()
    if strongly_typed(trt_version) and options.dtype == "fp16":
        from deployopt.precision import CONVERSION_RECIPE

        facts["fp16_conversion"] = CONVERSION_RECIPE
    if external:
        facts["external_data_sha256"] = external
    return facts


def facts_key(facts: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode("utf-8")).hexdigest()


def engine_key(
    onnx_bytes: bytes,
    options: MeasureOptions,
    trt_version: str,
    shapes: dict[str, list[int]],
    external: list[list[str]] | None = None,
) -> str:
    """Engines are cached under this key (see build_facts): different inputs never share a file."""
    return facts_key(build_facts(onnx_bytes, options, trt_version, shapes, external))


def engine_path_for(workdir: Path, model_path: str, dtype: str, key: str) -> Path:
    return workdir / f"{Path(model_path).stem}-{dtype}-{key[:16]}.engine"


#: An INT8 build with no scales (no calibration, no Q/DQ nodes): what TensorRT builds is fp16/fp32.
INT8_NEEDS_SCALES = "INT8 needs calibration data (--calibration-data) or a model with Q/DQ nodes"


def aggregate_layer_times(times: dict[str, list[float]], order: list[str]) -> list[LayerTime]:
    """Per-layer median and IQR over runs (ms reported by IProfiler -> µs), with its share of the sum."""
    from deployopt.timing import median_iqr

    stats = {name: median_iqr([t * 1000.0 for t in times[name]]) for name in order}
    total = sum(m for m, _ in stats.values()) or 1.0
    return [
        LayerTime(
            name=name,
            time_us=stats[name][0],
            share=stats[name][0] / total,
            extra={"runs": len(times[name])},
            iqr_us=stats[name][1],
        )
        for name in order
    ]


def load_runner_result(path: str | Path) -> Timing:
    """Read the JSON printed by jetson/runner.py (same schema as `deployopt bench --json`)."""
    return load_timing(path)


# ---------------------------------------------------------------------------------------------
# CUDA adapters


def check_cuda(result: Any, what: str) -> Any:
    """cuda-python returns (err, *values); turn a non-zero err into a one-line BackendFailed."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if int(err) != 0:
        name = str(getattr(err, "name", err))
        hint = f" ({NEWER_CUDA_PYTHON})" if "InsufficientDriver" in name else ""
        raise BackendFailed(f"CUDA error in {what}: {name}{hint}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def smi_bus_id(domain: Any, bus: Any, device: Any) -> str | None:
    """A CUDA binding's PCI ids as nvidia-smi names the GPU (deployopt.clocks.pci_bus_id, which
    reads torch's property names)."""
    return pci_bus_id(SimpleNamespace(pci_domain_id=domain, pci_bus_id=bus, pci_device_id=device))


class CudaPython:
    """cuda-python runtime API (cuda.bindings.runtime in 12.x+, cuda.cudart before)."""

    name = "cuda-python"

    def __init__(self) -> None:
        try:
            from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
        except ImportError:
            from cuda import cudart  # older cuda-python
        self.rt = cudart

    def alloc(self, nbytes: int) -> int:
        return int(check_cuda(self.rt.cudaMalloc(max(1, nbytes)), "cudaMalloc"))

    def free(self, ptr: int) -> None:
        check_cuda(self.rt.cudaFree(ptr), "cudaFree")

    def htod(self, ptr: int, array: np.ndarray) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        check_cuda(self.rt.cudaMemcpy(ptr, array.ctypes.data, array.nbytes, kind), "cudaMemcpy")

    def dtoh(self, array: np.ndarray, ptr: int) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        check_cuda(self.rt.cudaMemcpy(array.ctypes.data, ptr, array.nbytes, kind), "cudaMemcpy")

    def stream(self) -> Any:
        return check_cuda(self.rt.cudaStreamCreate(), "cudaStreamCreate")

    def handle(self, stream: Any) -> int:
        return int(stream)

    def event(self) -> Any:
        return check_cuda(self.rt.cudaEventCreate(), "cudaEventCreate")

    def record(self, event: Any, stream: Any) -> None:
        check_cuda(self.rt.cudaEventRecord(event, stream), "cudaEventRecord")

    def elapsed_ms(self, start: Any, end: Any) -> float:
        check_cuda(self.rt.cudaEventSynchronize(end), "cudaEventSynchronize")
        return float(check_cuda(self.rt.cudaEventElapsedTime(start, end), "cudaEventElapsedTime"))

    def synchronize(self, stream: Any) -> None:
        check_cuda(self.rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def device_facts(self) -> dict[str, Any]:
        prop = check_cuda(self.rt.cudaGetDeviceProperties(0), "cudaGetDeviceProperties")
        name = prop.name.decode(errors="replace") if isinstance(prop.name, bytes) else str(prop.name)
        return {
            "gpu": name.rstrip("\x00"),
            "sms": int(prop.multiProcessorCount),
            "compute_capability": f"{prop.major}.{prop.minor}",
        }

    def pci_bus_id(self) -> str | None:
        """nvidia-smi's name of CUDA's device 0, None where its properties do not give it."""
        prop = check_cuda(self.rt.cudaGetDeviceProperties(0), "cudaGetDeviceProperties")
        return smi_bus_id(*(getattr(prop, f"pci{n}ID", None) for n in ("Domain", "Bus", "Device")))


class PyCuda:
    """pycuda (what JetPack 4.6 users usually have); creates its context via pycuda.autoinit."""

    name = "pycuda"

    def __init__(self) -> None:
        import pycuda.autoinit  # noqa: F401  (creates the context TensorRT will use)
        import pycuda.driver as cuda

        self.cuda = cuda
        self._allocs: dict[int, Any] = {}

    def alloc(self, nbytes: int) -> int:
        mem = self.cuda.mem_alloc(max(1, nbytes))
        self._allocs[int(mem)] = mem
        return int(mem)

    def free(self, ptr: int) -> None:
        mem = self._allocs.pop(ptr, None)
        if mem is not None:
            mem.free()

    def htod(self, ptr: int, array: np.ndarray) -> None:
        self.cuda.memcpy_htod(ptr, array)

    def dtoh(self, array: np.ndarray, ptr: int) -> None:
        self.cuda.memcpy_dtoh(array, ptr)

    def stream(self) -> Any:
        return self.cuda.Stream()

    def handle(self, stream: Any) -> int:
        return int(stream.handle)

    def event(self) -> Any:
        return self.cuda.Event()

    def record(self, event: Any, stream: Any) -> None:
        event.record(stream)

    def elapsed_ms(self, start: Any, end: Any) -> float:
        end.synchronize()
        return float(end.time_since(start))

    def synchronize(self, stream: Any) -> None:
        stream.synchronize()

    def device_facts(self) -> dict[str, Any]:
        dev = self.cuda.Context.get_device()
        attr = self.cuda.device_attribute
        major, minor = dev.compute_capability()
        return {
            "gpu": dev.name(),
            "sms": int(dev.get_attribute(attr.MULTIPROCESSOR_COUNT)),
            "compute_capability": f"{major}.{minor}",
        }

    def pci_bus_id(self) -> str | None:
        """nvidia-smi's name of the context's device."""
        dev, attr = self.cuda.Context.get_device(), self.cuda.device_attribute
        return smi_bus_id(
            *(dev.get_attribute(getattr(attr, f"PCI_{n}_ID")) for n in ("DOMAIN", "BUS", "DEVICE"))
        )


#: the modules a CUDA binding is found by, and its name
CUDA_BINDINGS = (("cuda.bindings", "cuda-python"), ("cuda.cudart", "cuda-python"), ("pycuda", "pycuda"))


def cuda_binding_available() -> str | None:
    """Which CUDA binding is importable ('cuda-python', 'pycuda'), without importing it. cuda-python
    is the modules CudaPython imports (`cuda.bindings`, from 12.6; `cuda.cudart` before), not the
    `cuda` namespace, which cuda-pathfinder or cuda-core without the bindings also install: `backends`
    said "tensorrt + cuda-python" there, and the run ended in CUDA_HINT."""
    for module, name in CUDA_BINDINGS:
        if sys.modules.get(module) is not None:  # imported already (a module made in memory has no spec)
            return name
        try:
            if importlib.util.find_spec(module) is not None:
                return name
        except (ImportError, ValueError):  # no `cuda` package at all (find_spec imports the parent)
            continue
    return None


def cuda_api(prefer: str | None = None) -> CudaPython | PyCuda:
    order = [CudaPython, PyCuda]
    if prefer == "pycuda":
        order.reverse()
    for cls in order:
        try:
            return cls()
        except ImportError as exc:
            reraise_interrupt(exc)  # interrupted, not missing: the next binding is not tried
            continue
    raise BackendUnavailable(CUDA_HINT)


# ---------------------------------------------------------------------------------------------
# isolation: build + time in a child process with a timeout


def _child(target: str, args: tuple[Any, ...], queue: Any) -> None:
    """Run the work; deployopt's one-line warnings (an unsaved timing cache) travel back to the
    parent with the result, since the child's stderr would print them as Python warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeployoptWarning)
        try:
            module, _, func = target.rpartition(".")
            result = getattr(importlib.import_module(module), func)(*args)
            status: tuple[str, Any] = ("ok", result)
        except DeployoptError as exc:
            status = ("error", f"{type(exc).__name__}\t{exc}")
        except BaseException as exc:
            first = str(exc).splitlines()[0] if str(exc) else ""
            status = ("error", f"BackendFailed\t{type(exc).__name__}: {first}")
    lines = [
        (w.category.__name__, str(w.message)) for w in caught if issubclass(w.category, DeployoptWarning)
    ]
    queue.put((*status, lines))


def _rewarn(lines: list[tuple[str, str]]) -> None:
    import deployopt.errors as errs

    for kind, message in lines:
        category = getattr(errs, kind, None)
        if not (isinstance(category, type) and issubclass(category, DeployoptWarning)):
            category = DeployoptWarning
        warnings.warn(message, category, stacklevel=3)


def run_isolated(target: str, args: tuple[Any, ...], timeout_s: float) -> Any:
    """Call `module.function(*args)` in a spawned process; one-line errors for crash, hang, raise."""
    import multiprocessing as mp
    import queue as queue_mod

    ctx = mp.get_context("spawn")  # fresh CUDA state; fork after CUDA init is unsafe
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(target, args, q), daemon=True)
    proc.start()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            status, payload, lines = q.get(timeout=0.2)
            break
        except queue_mod.Empty:
            pass
        if not proc.is_alive():  # died without a result (segfault, abort, OOM kill)
            try:
                status, payload, lines = q.get(timeout=1.0)
                break
            except queue_mod.Empty:
                code = proc.exitcode
                hint = oom_hint(code)
                said = f": {hint}" if hint else ""
                raise BackendFailed(f"TensorRT worker {exit_phrase(code)} without a result{said}") from None
        if time.monotonic() > deadline:
            proc.kill()
            proc.join(5)
            raise BackendFailed(f"TensorRT worker did not finish within {timeout_s:g} s") from None
    proc.join(5)
    _rewarn(lines)
    if status == "ok":
        return payload
    kind, _, message = payload.partition("\t")
    errors = {
        "BackendUnavailable": BackendUnavailable,
        "ModelError": ModelError,
        "DataError": DataError,
    }
    raise errors.get(kind, BackendFailed)(message)


# ---------------------------------------------------------------------------------------------
# the TensorRT work (runs in the worker process)


def _import_trt() -> Any:
    try:
        return importlib.import_module("tensorrt")
    except ImportError as exc:
        reraise_interrupt(exc)
        raise BackendUnavailable(TRT_HINT) from None


def make_logger(trt: Any) -> Any:
    """A `trt.ILogger` writing TensorRT's warnings and errors to stderr. `trt.Logger` writes them to
    std::cout (the DefaultLogger in NVIDIA/TensorRT python/src/infer/pyCore.cpp, 8.2 to 10.x), which
    the worker shares with the caller: a parser warning landed in the JSON `bench --json` prints on
    stdout. TensorRT calls log() from noexcept C++, so it never raises (8.2 would abort)."""

    class StderrLogger(trt.ILogger):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.ILogger.__init__(self)  # pybind11 needs the explicit base init
            self.min_severity = int(trt.Logger.WARNING)

        def log(self, severity: Any, msg: str) -> None:
            with contextlib.suppress(Exception):
                if int(severity) <= self.min_severity:  # INTERNAL_ERROR 0 ... VERBOSE 4
                    sys.stderr.write(f"[TensorRT] {getattr(severity, 'name', severity)}: {msg}\n")

    return StderrLogger()


def _onnx_has_qdq(onnx_bytes: bytes) -> bool:
    import onnx

    from deployopt.model import has_qdq

    return has_qdq(onnx.load_from_string(onnx_bytes))


def refuse_strongly_typed_int8(
    version: str, options: MeasureOptions, model_path: str | os.PathLike[str], onnx_bytes: bytes | None = None
) -> None:
    """INT8 on TensorRT >= 11 (checked before anything is hashed or built): no calibration data or
    table (it cannot calibrate), and only for a model with Q/DQ nodes. One line either way."""
    if options.dtype != "int8" or not strongly_typed(version):
        return
    refuse_int8_calibration(version, options.calibration_data or options.extra.get("calib_cache"))
    data = Path(model_path).read_bytes() if onnx_bytes is None else onnx_bytes
    refuse_implicit_int8(version, Path(model_path).name, _onnx_has_qdq(data))


def build_engine(model_path: str, options: MeasureOptions, engine_path: str) -> dict[str, Any]:
    """Parse + build + serialize. Returns facts about the build. Called in the worker."""
    from deployopt.backends.tensorrt_calibrator import (
        CalibrationBatcher,
        CalibrationCache,
        CalibratorCore,
        TableCalibrator,
        load_samples,
        make_entropy_calibrator,
        raise_calibrator_error,
    )
    from deployopt.backends.trtexec import input_shapes
    from deployopt.fileio import write_bytes

    trt = _import_trt()
    version = trt.__version__
    typed = strongly_typed(version)
    data = Path(model_path).read_bytes()
    if typed:
        refuse_strongly_typed_int8(version, options, model_path, data)
    logger = make_logger(trt)
    builder = trt.Builder(logger)
    if options.dtype == "int8" and version_tuple(version) < (10, 0) and not builder.platform_has_fast_int8:
        # Jetson Nano and TX2 (JetPack 4.x): TensorRT would build it, slower than FP16. (The query is
        # deprecated in 10.x, which runs only on GPUs that have INT8.)
        if options.extra.get("int8_from_qdq"):  # not asked for: int8 is a Q/DQ model's default
            raise DeployoptError(
                quantized_without_int8(
                    Path(model_path).name,
                    "this GPU (TensorRT's platform_has_fast_int8 is False, as on Jetson Nano and TX2)",
                    "time the float model it was quantized from",
                )
            )
        raise DeployoptError(NO_FAST_INT8)
    flags = (
        (1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)) if explicit_batch_flag(version) else 0
    )
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if typed and options.dtype == "fp16":  # 11.x has no FP16 flag: the network is typed fp16 instead
        from deployopt.precision import to_fp16_bytes

        data = to_fp16_bytes(data, Path(model_path).parent)
    if not parser.parse(data, str(model_path)):
        errs = [str(parser.get_error(i)).strip().replace("\n", " ") for i in range(parser.num_errors)]
        raise ModelError(f"TensorRT cannot parse {Path(model_path).name}: {shorten('; '.join(errs))}")
    config = builder.create_builder_config()
    workspace = int(options.extra.get("workspace_mib", DEFAULT_WORKSPACE_MIB)) << 20
    if workspace_api(version) == "memory_pool":
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace)
    else:
        config.max_workspace_size = workspace
    if hasattr(trt, "ProfilingVerbosity"):  # layer names in profiles; 8.0/8.1 call it VERBOSE
        levels = trt.ProfilingVerbosity
        config.profiling_verbosity = levels.DETAILED if hasattr(levels, "DETAILED") else levels.VERBOSE
    if options.dtype in ("fp16", "int8") and not typed:
        config.set_flag(trt.BuilderFlag.FP16)  # int8: FP16 for layers without an INT8 kernel
    shapes = input_shapes(Path(model_path), options)
    profile = None
    dynamic = [
        network.get_input(i) for i in range(network.num_inputs) if -1 in tuple(network.get_input(i).shape)
    ]
    if dynamic:
        profile = builder.create_optimization_profile()
        for tensor in dynamic:
            shape = shapes.get(tensor.name)
            if shape is None:
                raise ModelError(
                    f"input {tensor.name!r} is dynamic: give its shape (--input-shape / --batch)"
                )
            profile.set_shape(tensor.name, shape, shape, shape)
        config.add_optimization_profile(profile)
    core: CalibratorCore | TableCalibrator | None = None
    calibrator = None
    notices: list[str] = []  # what the calibration data's loader assumed: the session says it
    if options.dtype == "int8" and not typed:  # 11.x: INT8 from the model's Q/DQ nodes, no flag
        config.set_flag(trt.BuilderFlag.INT8)
        table = table_only(options)
        if table is not None:
            core = TableCalibrator(table)  # a table, no data: TensorRT reads it, nothing to calibrate
        elif options.calibration_data:
            in_shapes, in_dtypes = {}, {}
            for i in range(network.num_inputs):
                t = network.get_input(i)
                in_shapes[t.name] = tuple(shapes.get(t.name, tuple(t.shape)))
                # TensorRT reads a calibration buffer as the input's own type: float32 bytes were
                # read as fp16 or uint8 values (and overran a buffer sized for them)
                in_dtypes[t.name] = _io_dtype(trt, t.name, True, t.dtype)
            count = int(options.extra.get("calibration_count", DEFAULT_CALIBRATION_COUNT))
            samples = load_samples(
                options.calibration_data, in_shapes, count, options.calibration_preprocess, notices
            )
            cache = CalibrationCache(
                options.extra.get("calib_cache") or str(Path(engine_path).with_suffix(".calib"))
            )
            # before any device memory: data the inputs' types cannot hold is one line (a uint8 input
            # was calibrated on normalised images wrapped round, as verify and optimize refuse them)
            batcher = CalibrationBatcher(samples, in_shapes, in_dtypes, str(options.calibration_data))
            core = CalibratorCore(batcher, cache, cuda_api(options.extra.get("cuda")))
        elif not _onnx_has_qdq(data):
            raise DataError(INT8_NEEDS_SCALES)
        if core is not None:
            calibrator = make_entropy_calibrator(trt, core)
            config.int8_calibrator = calibrator
            if profile is not None:
                config.set_calibration_profile(profile)
    cache_path = options.extra.get("timing_cache")
    timing_cache = None
    if cache_path:  # a timing cache only saves tactic timing: trouble with it is a warning, not a failure
        try:
            blob = Path(cache_path).read_bytes() if Path(cache_path).is_file() else b""
        except OSError as exc:
            warnings.warn(
                f"cannot read the TensorRT timing cache {cache_path} ({exc.strerror or exc}); "
                "building without it",
                CacheWarning,
                2,
            )
            blob = b""
        timing_cache = config.create_timing_cache(blob)
        if timing_cache is None and blob:  # TensorRT refused the blob (another version, corrupt)
            warnings.warn(
                f"TensorRT could not read the timing cache {cache_path}; building with a fresh one",
                CacheWarning,
                2,
            )
            timing_cache = config.create_timing_cache(b"")
        if timing_cache is not None and not config.set_timing_cache(timing_cache, False) and blob:
            # refused as another device's (a cache copied from another GPU): a fresh one
            warnings.warn(
                f"TensorRT refused the timing cache {cache_path} (another device's?); building with a "
                "fresh one",
                CacheWarning,
                2,
            )
            timing_cache = config.create_timing_cache(b"")
            if timing_cache is not None and not config.set_timing_cache(timing_cache, False):
                timing_cache = None
    try:
        serialized = builder.build_serialized_network(network, config)
    finally:
        if core is not None:  # the calibration buffers are only needed while building
            core.free()
    raise_calibrator_error(calibrator)  # before the engine is written: it may lack part of the data
    if serialized is None:
        raise BackendFailed("TensorRT could not build an engine for this model (its warnings say why)")
    write_bytes(engine_path, bytes(serialized))
    used = config.get_timing_cache() if cache_path and timing_cache is not None else None
    if used is not None:  # None: TensorRT kept none (nothing to save)
        try:
            write_bytes(cache_path, bytes(used.serialize()))
        except OutputError as exc:  # the engine is built and written: only the next build's speed-up is lost
            warnings.warn(f"{exc}; the TensorRT timing cache is not saved", CacheWarning, 2)
    facts: dict[str, Any] = {"tensorrt": version, "shapes": shapes}
    if notices:  # for the session to say (build_and_time, TensorRTSession._say)
        facts["calibration_notices"] = notices
    return facts


class _IO:
    def __init__(self, name: str, is_input: bool, shape: tuple[int, ...], dtype: Any) -> None:
        self.name, self.is_input, self.shape, self.dtype = name, is_input, shape, np.dtype(dtype)
        self.ptr = 0

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize


def _dims(dims: Any) -> str:
    return "x".join(str(d) for d in dims)


def profile0_bindings(engine: Any) -> int:
    """How many of a v2 engine's bindings are profile 0's. TensorRT 8.2-8.4 count every
    optimization profile's: with K profiles, profile p's n bindings are p*n .. p*n+n-1, named
    "x [profile p]" for p > 0 (NvInferRuntime.h, getNbBindings / getBindingName); the first
    execution context runs profile 0, so only those are set, allocated and listed. The v3 API lists
    each I/O tensor once."""
    return int(engine.num_bindings) // max(1, int(engine.num_optimization_profiles))


def v2_bindings(engine: Any, ptrs: list[int]) -> list[int]:
    """execute_async_v2 / execute_v2's list: enqueueV2 reads it by binding index (of every
    profile), profile 0's pointers first and 0 in the other profiles' slots, which it does not read."""
    return list(ptrs) + [0] * (int(engine.num_bindings) - len(ptrs))


def declared_inputs(trt: Any, engine: Any, api: str) -> dict[str, tuple[int, ...]]:
    """The engine's inputs as it declares them, -1 for a dimension its optimization profile sets."""
    if api == "v3":
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        return {n: tuple(engine.get_tensor_shape(n)) for n in inputs}
    return {
        engine.get_binding_name(i): tuple(engine.get_binding_shape(i))
        for i in range(profile0_bindings(engine))
        if engine.binding_is_input(i)
    }


def refuse_shapes_for_engine(
    engine_name: str, inputs: dict[str, tuple[int, ...]], shapes: dict[str, list[int]]
) -> None:
    """--input-shape for a prebuilt engine, checked against what it declares before anything is
    allocated (jetson/runner.py's check_shapes, in the host's option names): an entry must name an
    input, a static input only at its own shape (it runs at that shape whatever is asked), and a
    dynamic input needs one (the shape within its optimization profile to time)."""
    for name in sorted(shapes):
        given = f"--input-shape {name}:{_dims(shapes[name])}"
        if name not in inputs:
            known = ", ".join(inputs)
            raise DeployoptError(f"{given}: {engine_name} has no input {name!r} (its inputs: {known})")
        if -1 not in inputs[name] and list(inputs[name]) != list(shapes[name]):
            raise DeployoptError(
                f"{given}: input {name!r} of {engine_name} is static, {_dims(inputs[name])} (it was built "
                "for that shape; drop the entry, or build an engine with a dynamic-shape profile)"
            )
    for name, dims in inputs.items():
        if -1 in dims and name not in shapes:
            raise DeployoptError(
                f"input {name!r} of {engine_name} is dynamic ({_dims(dims)}): give --input-shape "
                f"{name}:SHAPE within the optimization profile it was built with"
            )


def _refused_shape(name: str, dims: list[int]) -> BackendFailed:
    """set_input_shape / set_binding_shape return False for a shape outside the engine's profile
    (pyCore.cpp binds the bool-returning setters; TensorRT logs which dimension); ignored, the
    outputs kept their -1 dimensions and were blamed on an NMS-like op."""
    return BackendFailed(
        f"--input-shape {name}:{_dims(dims)}: the engine does not take this shape (outside the optimization "
        "profile it was built with; TensorRT's error above says which dimension)"
    )


#: numpy's type for each TensorRT DataType numpy can hold, by the type's name. Not TensorRT's own
#: nptype: on 8.0-8.5 it reads np.bool on every call, which numpy 1.24-1.26 lacks, so every type,
#: fp32 included, was an AttributeError after the build (NVIDIA/TensorRT#2557; JetPack 5's Python
#: 3.8 gets numpy 1.24.4 from a plain `pip3 install -U numpy`). jetson/runner.py has the same table.
NUMPY_TYPES = {
    "FLOAT": "float32",
    "HALF": "float16",
    "INT8": "int8",
    "INT32": "int32",
    "INT64": "int64",
    "UINT8": "uint8",
    "BOOL": "bool",
}


def _io_dtype(trt: Any, name: str, is_input: bool, trt_type: Any) -> np.dtype:
    """numpy's type for an input or output: none for bf16, fp8, int4 or fp4 (nor a type newer than
    this table), one line naming the tensor where TensorRT's nptype raised a TypeError that named
    none. The same line as jetson/runner.py's io_dtype (a single file on the board: it cannot import
    this one)."""
    kind = getattr(trt_type, "name", None) or str(trt_type).rsplit(".", 1)[-1]
    if kind in NUMPY_TYPES:
        return np.dtype(NUMPY_TYPES[kind])
    raise BackendFailed(
        f"{'input' if is_input else 'output'} {name!r} is {kind}, which numpy has no type for: this "
        "backend cannot allocate or fill it; give the model fp32 or fp16 inputs and outputs (a Cast "
        "at its edges), or time it with --backend trtexec"
    )


def _bind(trt: Any, engine: Any, context: Any, api: str, shapes: dict[str, list[int]]) -> list[_IO]:
    """Set input shapes and list every I/O tensor with its final shape and dtype."""
    ios = []
    if api == "v3":
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            dynamic = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT and -1 in tuple(
                engine.get_tensor_shape(name)
            )
            if dynamic and not context.set_input_shape(name, shapes[name]):
                raise _refused_shape(name, shapes[name])
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            dtype = _io_dtype(trt, name, is_input, engine.get_tensor_dtype(name))
            ios.append(_IO(name, is_input, tuple(context.get_tensor_shape(name)), dtype))
    else:  # profile 0's bindings: the context's (the first one created runs it)
        for i in range(profile0_bindings(engine)):
            if engine.binding_is_input(i) and -1 in tuple(engine.get_binding_shape(i)):
                name = engine.get_binding_name(i)
                if not context.set_binding_shape(i, shapes[name]):
                    raise _refused_shape(name, shapes[name])
        for i in range(profile0_bindings(engine)):
            name, is_input = engine.get_binding_name(i), engine.binding_is_input(i)
            dtype = _io_dtype(trt, name, is_input, engine.get_binding_dtype(i))
            ios.append(_IO(name, is_input, tuple(context.get_binding_shape(i)), dtype))
    return ios


def refuse_data_dependent_outputs(ios: list[_IO]) -> None:
    """An output whose shape is still unknown once the inputs are set (NonMaxSuppression, NonZero:
    its size depends on the data) has no size to allocate; a 1-byte buffer would be written past.
    Refused in one line before anything is allocated; trtexec allocates such outputs itself."""
    for io in ios:
        if not io.is_input and any(d < 0 for d in io.shape):
            raise BackendFailed(
                f"output {io.name!r} has a data-dependent shape {list(io.shape)} (an NMS-like op): this "
                "backend cannot allocate it; time the model with --backend trtexec"
            )


def make_layer_profiler(trt: Any) -> Any:
    """An IProfiler collecting every report_layer_time call (subclass created here, lazily)."""

    class LayerProfiler(trt.IProfiler):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.times: dict[str, list[float]] = {}
            self.order: list[str] = []

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            if layer_name not in self.times:
                self.times[layer_name] = []
                self.order.append(layer_name)
            self.times[layer_name].append(float(ms))

    return LayerProfiler()


def smi_gpu(cuda: Any) -> str | None:
    """Which GPU nvidia-smi should read clocks of: the one the CUDA binding times on, by PCI bus id
    (CUDA's device 0 need not be nvidia-smi's 0). None where the binding cannot say: read_clocks
    then reads the machine's only GPU, and nothing where it has several."""
    try:
        return cuda.pci_bus_id()
    except Exception:  # optional, as the device facts are: a binding without it, a failing call
        return None


def time_engine(
    engine_path: str,
    options: MeasureOptions,
    shapes: dict[str, list[int]],
    per_layer: bool,
    prebuilt: bool = False,
    built: str | None = None,
) -> dict:
    """Deserialize and time; returns Timing JSON (and layers when per_layer). Called in the worker.
    `prebuilt`: the engine is the user's own (`bench FILE.engine`), not one built from options, so
    `shapes` are checked against what it declares and the result says its precision is as built.
    `built`: the precision the engine runs in where it is not options.dtype (built_precision)."""
    trt = _import_trt()
    version = trt.__version__
    api = api_for_version(version)
    cuda = cuda_api(options.extra.get("cuda"))
    logger = make_logger(trt)
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(Path(engine_path).read_bytes())
    if engine is None:
        raise BackendFailed(
            f"TensorRT {version} could not deserialize {engine_path} (built by another version?)"
        )
    context = engine.create_execution_context()
    if context is None:  # pybind returns nullptr as None, e.g. activation memory too large (TensorRT#3554)
        raise BackendFailed(
            f"TensorRT {version} could not create an execution context for {engine_path}"
            " (out of GPU memory? TensorRT's error on stderr says why)"
        )
    if prebuilt:
        refuse_shapes_for_engine(Path(engine_path).name, declared_inputs(trt, engine, api), shapes)
    ios = _bind(trt, engine, context, api, shapes)
    refuse_data_dependent_outputs(ios)
    from deployopt.fidelity import random_values

    rng = np.random.default_rng(0)
    for io in ios:
        io.ptr = cuda.alloc(io.nbytes)
        if io.is_input:  # uploaded once: like trtexec --noDataTransfers, copies are not timed
            # as the ort backend and verify feed them: uint8 pixels over 0–255, not all zeros
            host = random_values(rng, io.shape, io.dtype)
            cuda.htod(io.ptr, np.ascontiguousarray(host))
        if api == "v3":
            context.set_tensor_address(io.name, io.ptr)
    stream = cuda.stream()
    handle = cuda.handle(stream)
    bindings = v2_bindings(engine, [io.ptr for io in ios]) if api == "v2" else []

    def run() -> None:
        ok = context.execute_async_v3(handle) if api == "v3" else context.execute_async_v2(bindings, handle)
        if not ok:
            raise BackendFailed("TensorRT execution failed (execute_async returned False)")

    try:
        for _ in range(options.warmup):
            run()
        cuda.synchronize(stream)
        start, end = cuda.event(), cuda.event()
        samples = []
        gpu = smi_gpu(cuda)
        before = read_clocks(gpu)  # after the warm-up, right before the timed loop
        for _ in range(options.runs):
            cuda.record(start, stream)
            run()
            cuda.record(end, stream)
            samples.append(cuda.elapsed_ms(start, end) * 1000.0)
        after = None if before is None else read_clocks(gpu)  # at once, while the clock is still up
        # dtype: compare (LIKE_FOR_LIKE) names a dtype difference as such, not as "what was timed"
        env: dict[str, Any] = {"tensorrt": version, "cuda_binding": cuda.name, "api": api}
        # held down by power or heat during the loop, and how long; the busy SM clock (as torch's)
        record_in_environment(env, before, after)
        env["dtype"] = built or options.dtype
        # the shape each input ran at (batch included): compare flags a pair timed at others
        env["input_shapes"] = {io.name: [int(d) for d in io.shape] for io in ios if io.is_input}
        what = f"({precision_phrase(env['dtype'], version, options.dtype)})"
        if prebuilt:
            mark_prebuilt(env, options.dtype)
            what = f"of {PREBUILT}"
        with contextlib.suppress(Exception):  # facts are optional; timing is not
            env.update(cuda.device_facts())
        timing = Timing(
            backend="tensorrt",
            samples_us=samples,
            warmup=options.warmup,
            timed=(
                f"one forward pass {what}, CUDA events around execute_async_{api} on one stream, "
                "inputs on the GPU (no copies timed), no CUDA graph"
            ),
            environment=env,
        )
        out: dict[str, Any] = {"timing": timing.to_json()}
        if per_layer:
            profiler = make_layer_profiler(trt)
            context.profiler = profiler
            for _ in range(options.runs):
                if profiled_execution(version) == "execute_v2":
                    context.execute_v2(bindings)
                else:
                    run()
                    cuda.synchronize(stream)
            out["layers"] = [
                layer.to_json() for layer in aggregate_layer_times(profiler.times, profiler.order)
            ]
        return out
    finally:
        for io in ios:
            cuda.free(io.ptr)


def build_and_time(
    model_path: str,
    options: MeasureOptions,
    per_layer: bool,
    known: dict[str, tuple[tuple[int, ...], str]] | None = None,
    typing: str | None = None,
) -> dict:
    """Worker entry point: reuse a cached engine or build one, then time it. `known`: file digests
    the caller already has (hash_calibration), checked against each file's stat before use.
    `typing`: the model's file_typed_precision, read by the session (once per file, where the worker
    is a new process each call); read here from the bytes in hand where not given."""
    from deployopt.backends.trtexec import input_shapes
    from deployopt.model import typed_precision_of_bytes

    if known:
        _sha_memo.update(known)
    trt = _import_trt()
    data = Path(model_path).read_bytes()
    if typing is None:  # before any build, for every dtype: FP8/W8A16 Q/DQ is one ModelError line
        typing = typed_precision_of_bytes(data, Path(model_path).name)
    refuse_strongly_typed_int8(trt.__version__, options, model_path, data)  # before hashing the data
    shapes = input_shapes(Path(model_path), options)
    workdir = Path(options.workdir) if options.workdir is not None else DEFAULT_ENGINE_DIR
    facts = build_facts(data, options, trt.__version__, shapes, external_data_digests(model_path, data))
    key = facts_key(facts)
    engine_path = engine_path_for(workdir, model_path, options.dtype, key)
    built = False
    build_s = None
    notices: list[str] = []
    if not engine_path.is_file() or options.extra.get("rebuild"):
        start = time.perf_counter()
        notices = build_engine(model_path, options, str(engine_path)).get("calibration_notices", [])
        build_s = round(time.perf_counter() - start, 1)  # as the runner records it
        built = True
        if facts["calib_cache_sha256"] is not None:
            # The calibrator may just have written extra["calib_cache"]. The engine is keyed on the
            # table as it is now, as if it had been there before the build: an engine calibrated
            # from the data that wrote this table is the one a build reading the table makes, so
            # the next identical call (which finds the table) reuses it, and a table changed or
            # deleted afterwards no longer matches it. (Same rule as jetson/runner.py.)
            facts["calib_cache_sha256"] = content_digest(options.extra["calib_cache"])
            after = facts_key(facts)
            if after != key:
                moved = engine_path_for(workdir, model_path, options.dtype, after)
                os.replace(engine_path, moved)
                engine_path, key = moved, after
    built_as = built_precision(options.dtype, trt.__version__, typing)  # TensorRT 11: as typed
    out = time_engine(str(engine_path), options, shapes, per_layer, built=built_as)
    out["timing"]["environment"].update(
        {"engine": str(engine_path), "engine_built_now": built, "engine_key": key}
    )
    if build_s is not None:
        out["timing"]["environment"]["engine_build_s"] = build_s
    if notices:  # said by the session (TensorRTSession._say), once however many engines it builds
        out["calibration_notices"] = notices
    return out


def time_prebuilt(engine_path: str, options: MeasureOptions, per_layer: bool) -> dict:
    """Worker entry point for a serialized engine given as the model (`bench FILE.engine`): timed as
    it is, with the user's --input-shape entries only; nothing is parsed, built, keyed or converted
    (no TensorRT 11 fp16 typing: the engine's precision is the one it was built with)."""
    out = time_engine(engine_path, options, dict(options.input_shapes), per_layer, prebuilt=True)
    out["timing"]["environment"].update({"engine": engine_path, "engine_built_now": False})
    return out


# ---------------------------------------------------------------------------------------------
# backend


class TensorRTSession(Session):
    def __init__(self, backend: Backend, options: MeasureOptions) -> None:
        super().__init__(backend, options)
        self._said: set[str] = set()  # calibration notices already warned (_say)

    @property
    def runs_on_gpu(self) -> bool:
        return True  # TensorRT builds and runs engines on the GPU only

    def _call(self, model_path: Path, per_layer: bool) -> dict:
        out = self._build_and_time(model_path, per_layer)
        self._say(out.get("calibration_notices", []))
        return out

    def _say(self, notices: list[str]) -> None:
        """The calibration loader's notices as warnings, each once a session: optimize builds every
        candidate from the same data, and the same line for each would bury the rest."""
        from deployopt.backends.tensorrt_calibrator import calibration_notice

        for notice in notices:
            if notice not in self._said:
                self._said.add(notice)
                warnings.warn(calibration_notice(notice), DeployoptWarning, 3)

    def _build_and_time(self, model_path: Path, per_layer: bool) -> dict:
        model_path = Path(model_path)
        if not model_path.is_file():
            raise no_such_file(model_path, ModelError)
        if is_engine_file(model_path):
            refuse_engine_options(model_path, self.options.batch, self.options.calibration_data)
            args: tuple[Any, ...] = (str(model_path), self.options, per_layer)
            if self.options.extra.get("isolate", True):
                return run_isolated("deployopt.backends.tensorrt.time_prebuilt", args, self.options.timeout_s)
            return time_prebuilt(*args)
        model_path = self.at_batch(model_path)  # --batch N on a batch the file fixes: a copy at N
        from deployopt.model import file_typed_precision

        # read here once per file, before the worker starts: it refuses an FP8/W8A16 Q/DQ model
        # before anything is built, and each worker (a new process) would parse the model again
        typing = file_typed_precision(model_path)
        if self.options.extra.get("isolate", True):
            # hashed here, where the digests outlive the call: each worker is a new process
            args = (str(model_path), self.options, per_layer, hash_calibration(self.options), typing)
            return run_isolated("deployopt.backends.tensorrt.build_and_time", args, self.options.timeout_s)
        return build_and_time(str(model_path), self.options, per_layer, typing=typing)

    def measure(self, model_path: Path) -> Timing:
        return Timing.from_json(self._call(model_path, per_layer=False)["timing"])

    def profile(self, model_path: Path, kernels: bool = False) -> Profile:
        out = self._call(model_path, per_layer=True)
        layers = [
            LayerTime(
                name=d["name"],
                time_us=d["time_us"],
                share=d["share"],
                extra=d.get("extra", {}),
                iqr_us=d.get("iqr_us"),
            )
            for d in out["layers"]
        ]
        t = out["timing"]
        timed = "per-layer time reported by TensorRT's IProfiler, median over runs"
        return Profile(
            backend="tensorrt",
            layers=layers,
            environment=t["environment"],
            timed=prebuilt_profile_timed(timed) if t["environment"].get("prebuilt_engine") else timed,
            runs=t["runs"],
        )


class TensorRTBackend(Backend):
    name = "tensorrt"
    description = "TensorRT Python API: ONNX parser, FP16/INT8 build, CUDA-event timing, IProfiler"
    dtypes = ("fp32", "fp16", "int8")

    def availability(self) -> tuple[bool, str]:
        try:
            spec = importlib.util.find_spec("tensorrt")
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            return False, TRT_HINT
        binding = cuda_binding_available()
        if binding is None:
            return False, CUDA_HINT
        return True, f"tensorrt + {binding} (not run on hardware yet)"

    def open(self, options: MeasureOptions) -> Session:
        self.check_options(options)
        if options.extra.get("remote"):  # jetson/runner.py on the board over ssh
            from deployopt.backends.tensorrt_remote import RemoteRunnerSession

            return RemoteRunnerSession(self, options)
        return TensorRTSession(self, options)


__all__ = [
    "TensorRTBackend",
    "aggregate_layer_times",
    "api_for_version",
    "build_facts",
    "content_digest",
    "cuda_api",
    "engine_key",
    "explicit_batch_flag",
    "hash_calibration",
    "load_runner_result",
    "profiled_execution",
    "run_isolated",
    "table_only",
    "workspace_api",
]
