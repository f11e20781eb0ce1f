"""The TensorRT backend and the Jetson runner, run end to end against strict fake `tensorrt` modules.

No TensorRT can be installed here, so each supported API surface (8.2: JetPack 4.6, 8.5: JetPack 5,
10.x: JetPack 6) is a fake that has only the members that version's Python bindings define (any
other name raises AttributeError, on read and on write), checks the argument types the bindings
check, records what it is asked to do, and behaves like TensorRT where deployopt depends on it
(explicit batch, optimization profiles, calibration, profiler reports, tensor addresses). CUDA is a
fake cuda-python runtime (`cuda.bindings.runtime`, or `cuda.cudart` before 12.6) or a fake pycuda,
on one fake GPU whose streams keep a clock, so a timed sample can be checked against what ran.

Where each surface comes from (read from the sources, not from memory):
- 8.2: NVIDIA/TensorRT python/src/infer/pyCore.cpp @052281f0 (the 8.2 bindings: IBuilderConfig has
  max_workspace_size and no set_memory_pool_limit, no MemoryPoolType; ICudaEngine has only the
  binding API (num_bindings, binding_is_input, get_binding_shape/dtype/name); IExecutionContext has
  execute_v2(bindings), execute_async_v2(bindings, stream_handle, input_consumed=None),
  set/get_binding_shape, no set_input_shape / set_tensor_address / execute_async_v3, no
  TensorIOMode; ProfilingVerbosity LAYER_NAMES_ONLY, DETAILED, NONE (+ deprecated DEFAULT,
  VERBOSE); Builder.build_engine deprecated in favour of build_serialized_network; int8_calibrator
  and profiler setters keep the Python object alive); python/src/parsers/pyOnnx.cpp @052281f0
  (parse(model, path=None), num_errors, get_error); python/src/infer/pyFoundationalTypes.cpp
  (lists and tuples convert to Dims; Dims iterates); the 8.2.3 Python docs, Profiler page (the
  profiler is called for execute(); "execute_async() does not currently support profiling").
  Several optimization profiles: include/NvInferRuntime.h (8.x): getNbBindings counts every
  profile's bindings, profile p's at p*n .. p*n+n-1 and named "x [profile p]" for p > 0; the first
  execution context runs profile 0; setBindingDimensions fails for a binding outside the active
  profile, getBindingDimensions "corrects" one to it; getNbIOTensors (8.5+) lists each tensor once.
- 8.5: pyCore.cpp @768d994b (PreviewFeature FASTER_DYNAMIC_SHAPES_0805): the name-based API
  (num_io_tensors, get_tensor_name/mode/shape/dtype, set_input_shape, set_tensor_address,
  execute_async_v3(stream_handle)) beside the binding API, which is now deprecated; TensorIOMode;
  set_memory_pool_limit(pool, pool_size) with MemoryPoolType.WORKSPACE, max_workspace_size
  deprecated. C++ docs 8.5.3, IProfiler: called "for each invocation of
  executeV2()/enqueueV2()/enqueueV3()".
- 10.x: pyCore.cpp of the 10.x line (2025 copyright, with IRuntimeConfig): IExecutionContext keeps
  execute_v2 and the name-based API only (no execute_async_v2, set_binding_shape,
  get_binding_shape); ICudaEngine has no num_bindings / binding_is_input / get_binding_*;
  IBuilderConfig has no max_workspace_size; Builder has no build_engine or max_batch_size;
  ProfilingVerbosity is LAYER_NAMES_ONLY, DETAILED, NONE; int8_calibrator and
  set_calibration_profile are "Deprecated in TensorRT 10.1" but present. Consistent with the 8.x
  to 10.x migration guide (binding-based buffers replaced by num_io_tensors / get_tensor_name /
  get_tensor_mode) and NVIDIA/TensorRT issue 3948 (binding_is_input gone in 10.0.1). C++ docs
  10.5, IProfiler: called "for each invocation of executeV2()/enqueueV3()".
- 11.x: NVIDIA's 10.x-to-11.x Python migration guide ("Removed Python APIs and Replacements", 11.4):
  strong typing only, so no BuilderFlag.FP16/INT8/BF16/INT4/FP4/OBEY_PRECISION_CONSTRAINTS/
  PREFER_PRECISION_CONSTRAINTS/DIRECT_IO, no IBuilderConfig.int8_calibrator,
  set/get_calibration_profile, quantization flags, no Builder.platform_has_fast_fp16/int8, no
  IInt8*Calibrator classes; otherwise the 10.x surface. No 11.x binding source was read (none is
  in the stored sources): only what the guide says was removed is removed. A network runs in its
  model's own types: the fake records whether the parsed model was typed fp16 and had Q/DQ nodes,
  and its engine's I/O tensors have the model's I/O types.
- Calibrators, 8.2 to 10.x: python/src/infer/pyInt8.cpp: TensorRT calls get_batch(names) with one
  argument and copies one pointer per input; None or an empty list ends calibration;
  read_calibration_cache() returns None or a buffer; write_calibration_cache gets a memoryview.
  pybind11 refuses a subclass whose __init__ skips the base __init__ ("must be called when
  overriding __init__"), which the docs' IProfiler / IOutputAllocator examples warn about. The
  trampolines are noexcept: a Python exception escaping one reaches std::terminate on 8.2
  (pyInt8.cpp @0a4ed147, no try/catch); from 8.4 on it is printed and the default returned, None
  from get_batch ending calibration (@768d994b; NVIDIA/TensorRT issue 3871 shows 8.4 doing it).
- CUDA: the CUDA runtime API docs (cudaEventElapsedTime in milliseconds; an event must have
  completed); cuda-python returns (err, *values), as NVIDIA's samples/python/common_runtime.py
  unpacks it; pycuda's doc/source/driver.rst (mem_alloc, Event.record(stream=None),
  end.time_since(start) in milliseconds) and src/wrapper/wrap_cudadrv.cpp (Stream.handle).
"""

from __future__ import annotations

import ctypes
import enum
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import re
import statistics
import sys
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from scripts import load_script
from test_tensorrt_backend import counting_hashes

from deployopt.backends import tensorrt as trt_backend
from deployopt.backends import tensorrt_calibrator
from deployopt.backends.base import MeasureOptions
from deployopt.backends.tensorrt import TensorRTBackend, build_and_time, build_engine, time_engine
from deployopt.backends.trtexec_parser import version_tuple
from deployopt.errors import (
    BackendFailed,
    CacheWarning,
    DataError,
    DeployoptError,
    DeployoptWarning,
    ModelError,
    OutputError,
)
from deployopt.regression import compare_paths, differences
from deployopt.timing import load_timing

V82, V85, V10 = "8.2.1.8", "8.5.2.2", "10.3.0.26"
#: the numpy type of the bytes TensorRT reads for a tensor of each DataType (a calibration batch)
BUFFER_TYPES = {
    "FLOAT": np.float32,
    "HALF": np.float16,
    "INT8": np.int8,
    "INT32": np.int32,
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "INT64": np.int64,
}
#: the numpy the fakes' nptype reads np.bool from (numpy_without_bool: 1.24-1.26's, which has none)
NPTYPE_NUMPY: Any = np
V11 = "11.4.1.2"  # desktop only (no JetPack has it): strongly typed, the migration guide's surface
V80 = "8.0.1.6"  # JetPack 4.6.0: the 8.2 surface here, but for ProfilingVerbosity's older names
# The CUDA binding each board generation typically has: pycuda on JetPack 4.6, cuda-python 11.x
# (cuda.cudart) on JetPack 5, cuda-python >= 12.6 (cuda.bindings.runtime) on JetPack 6.
SURFACES = [(V82, "pycuda"), (V85, "cudart"), (V10, "bindings")]
SURFACE_IDS = ["trt8.2", "trt8.5", "trt10"]
ENGINE_MAGIC = b"FAKETRT\n"
RUNNER = Path(__file__).resolve().parents[1] / "jetson" / "runner.py"


class FakeMisuse(AssertionError):
    """Something that is undefined behaviour on a real GPU (a buffer too small, an unknown stream)."""


class FakeAbort(FakeMisuse):
    """What aborts a real process: a Python exception escaping a TensorRT 8.2 callback (std::terminate)."""


# ================================================================================================
# the fake GPU: memory with contents, streams with a clock, events


class FakeGpu:
    """One device shared by the CUDA fakes and the TensorRT fake, recording everything in order."""

    def __init__(self, name: str, sms: int, cc: tuple[int, int]) -> None:
        self.name, self.sms, self.cc = name, sms, cc
        self.memory: dict[int, bytearray] = {}
        self.written: set[int] = set()
        self.freed: list[int] = []
        self.next_ptr = 0x7F00_0000_0000
        self.clocks: dict[int, float] = {0: 0.0}  # stream handle -> ms of work queued on it
        self.next_stream = 0x5000
        self.events: dict[int, dict[str, Any]] = {}
        self.log: list[tuple[str, tuple[Any, ...]]] = []  # every CUDA and TensorRT call, in order
        self.runs: list[dict[str, Any]] = []  # every TensorRT execution
        self.bindings: list[list[int]] = []  # the bindings list of each execute_v2 / execute_async_v2
        self.reported: dict[str, list[float]] = {}  # layer -> ms handed to IProfiler
        self.deprecated: list[str] = []  # deprecated TensorRT members that were used
        self.trt_errors: list[str] = []  # what the fake TensorRT logged as errors
        self.calibration_batches: list[dict[str, np.ndarray]] = []
        self.get_batch_results: list[Any] = []
        self.callback_errors: list[str] = []  # what TensorRT >= 8.4 caught from a calibrator callback
        self.context_memory_left = True  # False: create_execution_context fails (a board out of memory)

    def call(self, name: str, *args: Any) -> None:
        self.log.append((name, args))

    def names(self) -> list[str]:
        return [name for name, _ in self.log]

    # memory
    def alloc(self, nbytes: int) -> int:
        ptr = self.next_ptr
        self.next_ptr += (nbytes + 0xFFF) // 0x1000 * 0x1000 + 0x1000
        self.memory[ptr] = bytearray(nbytes)
        self.call("alloc", ptr, nbytes)
        return ptr

    def free(self, ptr: int) -> bool:
        if ptr not in self.memory:
            return False
        del self.memory[ptr]
        self.written.discard(ptr)
        self.freed.append(ptr)
        self.call("free", ptr)
        return True

    def size_of(self, ptr: int) -> int:
        return len(self.memory[ptr]) if ptr in self.memory else -1

    def write(self, ptr: int, data: bytes) -> bool:
        if ptr not in self.memory or len(data) > len(self.memory[ptr]):
            return False
        self.memory[ptr][: len(data)] = data
        self.written.add(ptr)
        self.call("htod", ptr, len(data))
        return True

    def read(self, ptr: int, nbytes: int, what: str) -> bytes:
        if ptr not in self.memory or nbytes > len(self.memory[ptr]):
            raise FakeMisuse(
                f"{what}: {nbytes} bytes at {ptr:#x} are not an allocation (sizes {self.sizes()})"
            )
        if ptr not in self.written:
            raise FakeMisuse(f"{what}: device memory at {ptr:#x} was never written")
        return bytes(self.memory[ptr][:nbytes])

    def sizes(self) -> dict[int, int]:
        return {p: len(m) for p, m in self.memory.items()}

    # streams and events
    def new_stream(self) -> int:
        self.next_stream += 0x10
        self.clocks[self.next_stream] = 0.0
        self.call("stream", self.next_stream)
        return self.next_stream

    def execute(self, handle: int) -> float:
        """Queue one forward pass; durations are multiples of 1/256 ms, exact in float32."""
        if handle not in self.clocks:
            raise FakeMisuse(f"stream handle {handle:#x} was never created")
        ms = 0.25 + (len(self.runs) % 5) / 256
        self.clocks[handle] += ms
        return ms

    def new_event(self) -> int:
        eid = len(self.events) + 1
        self.events[eid] = {"t": None, "stream": None, "seq": -1, "done": False}
        return eid

    def record(self, eid: int, handle: int) -> bool:
        if eid not in self.events or handle not in self.clocks:
            return False
        self.events[eid].update(t=self.clocks[handle], stream=handle, seq=len(self.log), done=False)
        self.call("record", eid, handle)
        return True

    def sync_event(self, eid: int) -> None:
        ev = self.events[eid]
        for other in self.events.values():  # completing an event completes what was queued before it
            if other["stream"] == ev["stream"] and other["seq"] <= ev["seq"]:
                other["done"] = other["t"] is not None
        self.call("sync_event", eid)

    def sync_stream(self, handle: int) -> None:
        for ev in self.events.values():
            if ev["stream"] == handle:
                ev["done"] = ev["t"] is not None
        self.call("sync_stream", handle)

    def elapsed(self, start: int, end: int) -> float | None:
        a, b = self.events[start], self.events[end]
        if not (a["done"] and b["done"]):
            return None  # cudaErrorNotReady
        return float(np.float32(b["t"] - a["t"]))


# ================================================================================================
# CUDA fakes: cuda-python's runtime module and pycuda


def make_cuda_runtime(gpu: FakeGpu, module_name: str) -> types.ModuleType:
    """cuda-python's runtime API: every call returns (cudaError_t, *outputs)."""
    rt = types.ModuleType(module_name)

    class cudaError_t(enum.IntEnum):
        cudaSuccess = 0
        cudaErrorInvalidValue = 1
        cudaErrorInsufficientDriver = 35
        cudaErrorInvalidResourceHandle = 400
        cudaErrorNotReady = 600

    class cudaMemcpyKind(enum.IntEnum):
        cudaMemcpyHostToHost = 0
        cudaMemcpyHostToDevice = 1
        cudaMemcpyDeviceToHost = 2
        cudaMemcpyDeviceToDevice = 3
        cudaMemcpyDefault = 4

    class cudaStream_t:
        __slots__ = ("_h",)

        def __init__(self, handle: int = 0) -> None:
            self._h = handle

        def __int__(self) -> int:
            return self._h

        def getPtr(self) -> int:
            return self._h

    class cudaEvent_t:
        __slots__ = ("_id",)

        def __init__(self, eid: int) -> None:
            self._id = eid

    class cudaDeviceProp:
        __slots__ = ("major", "minor", "multiProcessorCount", "name")

    ok = cudaError_t.cudaSuccess

    def stream_handle(stream: Any) -> int:
        if isinstance(stream, cudaStream_t):
            return stream._h
        if isinstance(stream, int) and not isinstance(stream, bool):
            return stream
        raise TypeError(
            f"Argument 'stream' is not instance of type (expected int or cudaStream_t): {stream!r}"
        )

    def host_bytes(src: Any, count: int) -> bytes:
        if isinstance(src, int):
            return ctypes.string_at(src, count)
        return bytes(memoryview(src).cast("B")[:count])

    def cudaMalloc(size: int) -> tuple[Any, ...]:
        if not isinstance(size, int) or size < 0:
            raise TypeError(f"cudaMalloc(size: int), got {size!r}")
        return ok, gpu.alloc(size)

    def cudaFree(devPtr: Any) -> tuple[Any, ...]:
        return (ok,) if gpu.free(int(devPtr)) else (cudaError_t.cudaErrorInvalidValue,)

    def cudaMemcpy(dst: Any, src: Any, count: int, kind: Any) -> tuple[Any, ...]:
        if not isinstance(kind, cudaMemcpyKind):
            raise TypeError(f"cudaMemcpy kind must be a cudaMemcpyKind, got {kind!r}")
        if kind == cudaMemcpyKind.cudaMemcpyHostToDevice:
            done = gpu.write(int(dst), host_bytes(src, count))
            return (ok,) if done else (cudaError_t.cudaErrorInvalidValue,)
        if kind == cudaMemcpyKind.cudaMemcpyDeviceToHost:
            data = gpu.read(int(src), count, "cudaMemcpy device to host")
            ctypes.memmove(dst if isinstance(dst, int) else np.asarray(dst).ctypes.data, data, count)
            return (ok,)
        raise FakeMisuse(f"cudaMemcpy kind {kind.name} is not modelled")

    def cudaStreamCreate() -> tuple[Any, ...]:
        return ok, cudaStream_t(gpu.new_stream())

    def cudaStreamSynchronize(stream: Any) -> tuple[Any, ...]:
        gpu.sync_stream(stream_handle(stream))
        return (ok,)

    def cudaEventCreate() -> tuple[Any, ...]:
        return ok, cudaEvent_t(gpu.new_event())

    def cudaEventRecord(event: Any, stream: Any = 0) -> tuple[Any, ...]:
        if not isinstance(event, cudaEvent_t):
            raise TypeError(f"cudaEventRecord(event: cudaEvent_t, ...), got {event!r}")
        done = gpu.record(event._id, stream_handle(stream))
        return (ok,) if done else (cudaError_t.cudaErrorInvalidResourceHandle,)

    def cudaEventSynchronize(event: Any) -> tuple[Any, ...]:
        gpu.sync_event(event._id)
        return (ok,)

    def cudaEventElapsedTime(start: Any, end: Any) -> tuple[Any, ...]:
        ms = gpu.elapsed(start._id, end._id)
        return (cudaError_t.cudaErrorNotReady, None) if ms is None else (ok, ms)

    def cudaGetDeviceProperties(device: int) -> tuple[Any, ...]:
        prop = cudaDeviceProp()
        prop.name = gpu.name.encode().ljust(256, b"\x00")
        prop.multiProcessorCount, (prop.major, prop.minor) = gpu.sms, gpu.cc
        return ok, prop

    for obj in (cudaError_t, cudaMemcpyKind, cudaStream_t, cudaEvent_t, cudaDeviceProp):
        setattr(rt, obj.__name__, obj)
    for fn in (
        cudaMalloc,
        cudaFree,
        cudaMemcpy,
        cudaStreamCreate,
        cudaStreamSynchronize,
        cudaEventCreate,
        cudaEventRecord,
        cudaEventSynchronize,
        cudaEventElapsedTime,
        cudaGetDeviceProperties,
    ):
        setattr(rt, fn.__name__, fn)
    return rt


def make_pycuda(gpu: FakeGpu) -> dict[str, types.ModuleType]:
    """pycuda.driver and pycuda.autoinit, as far as deployopt uses them."""
    driver = types.ModuleType("pycuda.driver")

    class LogicError(RuntimeError):
        pass

    class DeviceAllocation:
        __slots__ = ("_ptr",)

        def __init__(self, ptr: int) -> None:
            self._ptr = ptr

        def __int__(self) -> int:
            return self._ptr

        def free(self) -> None:
            if not gpu.free(self._ptr):
                raise LogicError("cuMemFree failed: invalid argument")

    def mem_alloc(nbytes: int) -> DeviceAllocation:
        if not isinstance(nbytes, int) or nbytes < 1:
            raise LogicError("cuMemAlloc failed: invalid argument")
        return DeviceAllocation(gpu.alloc(nbytes))

    def memcpy_htod(dest: Any, src: Any) -> None:
        if not gpu.write(int(dest), bytes(memoryview(src).cast("B"))):
            raise LogicError("cuMemcpyHtoD failed: invalid argument")

    def memcpy_dtoh(dest: Any, src: Any) -> None:
        view = memoryview(dest).cast("B")
        view[:] = gpu.read(int(src), len(view), "memcpy_dtoh")

    class Stream:
        __slots__ = ("_h",)

        def __init__(self, flags: int = 0) -> None:
            self._h = gpu.new_stream()

        @property
        def handle(self) -> int:
            return self._h

        def synchronize(self) -> None:
            gpu.sync_stream(self._h)

    class Event:
        __slots__ = ("_id",)

        def __init__(self, flags: int = 0) -> None:
            self._id = gpu.new_event()

        def record(self, stream: Stream | None = None) -> Event:
            if stream is not None and not isinstance(stream, Stream):
                raise TypeError(f"Event.record(stream: Stream = None), got {stream!r}")
            gpu.record(self._id, 0 if stream is None else stream._h)
            return self

        def synchronize(self) -> Event:
            gpu.sync_event(self._id)
            return self

        def time_since(self, event: Event) -> float:
            ms = gpu.elapsed(event._id, self._id)
            if ms is None:
                raise LogicError("cuEventElapsedTime failed: device not ready")
            return ms

    class device_attribute(enum.IntEnum):
        MAX_THREADS_PER_BLOCK = 1
        MULTIPROCESSOR_COUNT = 16

    class Device:
        __slots__ = ()

        def name(self) -> str:
            return gpu.name

        def compute_capability(self) -> tuple[int, int]:
            return gpu.cc

        def get_attribute(self, attr: Any) -> int:
            if not isinstance(attr, device_attribute):
                raise TypeError(f"get_attribute(attr: device_attribute), got {attr!r}")
            return gpu.sms if attr == device_attribute.MULTIPROCESSOR_COUNT else 1024

    class Context:
        @staticmethod
        def get_device() -> Device:
            return Device()

    for obj in (
        LogicError,
        DeviceAllocation,
        mem_alloc,
        memcpy_htod,
        memcpy_dtoh,
        Stream,
        Event,
        device_attribute,
    ):
        setattr(driver, obj.__name__, obj)
    driver.Context, driver.Device = Context, Device
    autoinit = types.ModuleType("pycuda.autoinit")
    autoinit.device = Device()
    autoinit.context = Context()
    package = types.ModuleType("pycuda")
    package.__path__ = []
    package.__spec__ = importlib.machinery.ModuleSpec("pycuda", None, is_package=True)
    package.driver, package.autoinit = driver, autoinit
    return {"pycuda": package, "pycuda.driver": driver, "pycuda.autoinit": autoinit}


# ================================================================================================
# the fake TensorRT, one per API surface


IO = tuple[str, tuple[int, ...], int]  # name, dims (-1 for a symbolic dim), ONNX element type


def onnx_io(data: bytes) -> tuple[list[IO], list[IO], list[str], list[tuple[str, str, list[int]]]]:
    """Inputs and outputs, the layers a build would keep (convs, GEMMs), and every node as the parser
    makes a layer of it: (name, op type, ONNX element types of its outputs)."""
    model = onnx.load_from_string(data)
    init = {t.name for t in model.graph.initializer}
    types = {
        vi.name: vi.type.tensor_type.elem_type
        for vi in onnx.shape_inference.infer_shapes(model).graph.value_info
    }

    def io(vi: onnx.ValueInfoProto) -> IO:
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim)
        return vi.name, dims, vi.type.tensor_type.elem_type

    inputs = [io(vi) for vi in model.graph.input if vi.name not in init]
    outputs = [io(vi) for vi in model.graph.output]
    types.update({name: kind for name, _, kind in (*inputs, *outputs)})
    layers = [n.name for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")]
    nodes = [(n.name, n.op_type, [types.get(o, 0) for o in n.output]) for n in model.graph.node]
    return inputs, outputs, layers, nodes


def layer_ms(layer: int, call: int) -> float:
    """What the fake IProfiler reports: a float (TensorRT passes a C float), varying per call."""
    return float(np.float32(0.010 * (layer + 1) * (1.0 + 0.05 * ((call % 3) - 1))))


def make_tensorrt(version: str, gpu: FakeGpu) -> types.ModuleType:
    """A `tensorrt` module with the members of `version`'s Python bindings and nothing else."""
    v = version_tuple(version)
    binding_api = v < (10, 0)  # ICudaEngine.num_bindings & co., execute_async_v2: removed in 10.0
    tensor_api = v >= (8, 5)  # num_io_tensors, set_tensor_address, execute_async_v3: added in 8.5
    memory_pool = v >= (8, 4)  # set_memory_pool_limit, MemoryPoolType: added in 8.4
    workspace_size = v < (10, 0)  # max_workspace_size: deprecated in 8.4, removed in 10.0
    profiler_on_enqueue = v >= (8, 5)  # 8.2: "execute_async() does not currently support profiling"
    weak_typing = v < (11, 0)  # precision flags, calibrators, platform_has_fast_*: removed in 11.0
    surface = f"fake TensorRT {version}"

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise TypeError(f"incompatible function arguments: {what} ({surface})")

    def deprecated(name: str) -> None:
        gpu.deprecated.append(name)

    def is_int(x: Any) -> bool:
        return isinstance(x, (int, np.integer)) and not isinstance(x, bool)

    def dims_arg(x: Any, what: str) -> tuple[int, ...]:
        if isinstance(x, Dims):
            return x._d
        need(
            isinstance(x, (list, tuple)) and all(is_int(d) for d in x),
            f"{what} must be Dims or a list of ints",
        )
        return tuple(int(d) for d in x)

    def handle_arg(x: Any, what: str) -> int:
        # size_t in the bindings: an int, or an object with __int__ such as cuda-python's
        # cudaStream_t (NVIDIA's samples/python/common_runtime.py passes one to execute_async_v3)
        need(is_int(x) or (hasattr(type(x), "__int__") and not isinstance(x, (float, bool))), what)
        return int(x)

    def volume(shape: Any) -> int:
        return int(np.prod(list(shape), dtype=np.int64))

    def enum_of(name: str, members: list[str], aliases: dict[str, str] | None = None) -> type[enum.IntEnum]:
        items = [(m, i) for i, m in enumerate(members)]
        items += [(a, members.index(target)) for a, target in (aliases or {}).items()]
        return enum.IntEnum(name, items)  # type: ignore[return-value]

    severity = enum_of("Severity", ["INTERNAL_ERROR", "ERROR", "WARNING", "INFO", "VERBOSE"])
    DataType = enum_of(
        "DataType",
        ["FLOAT", "HALF", "INT8", "INT32", "BOOL"]
        + (["UINT8"] if v >= (8, 5) else [])
        + (["FP8", "BF16", "INT64", "INT4"] if v >= (10, 0) else []),
    )
    NetworkDefinitionCreationFlag = enum_of(
        "NetworkDefinitionCreationFlag",
        ["EXPLICIT_BATCH", "STRONGLY_TYPED"] if v >= (10, 0) else ["EXPLICIT_BATCH", "EXPLICIT_PRECISION"],
    )
    flags = ["FP16", "INT8", "DEBUG", "GPU_FALLBACK", "REFIT", "DISABLE_TIMING_CACHE", "TF32"]
    flags += ["SPARSE_WEIGHTS", "SAFETY_SCOPE", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS"]
    flags += ["DIRECT_IO", "REJECT_EMPTY_ALGORITHMS"]
    if v < (10, 0):
        flags.append("STRICT_TYPES")
    if v >= (8, 5):
        flags.append("ENABLE_TACTIC_HEURISTIC" if v < (10, 0) else "BF16")
    if not weak_typing:  # the migration guide's "Removed Python APIs" (TensorRT 11)
        removed = {"FP16", "INT8", "BF16", "INT4", "FP4", "DIRECT_IO"}
        removed |= {"OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS"}
        flags = [f for f in flags if f not in removed]
    BuilderFlag = enum_of("BuilderFlag", flags)
    LayerType = enum_of("LayerType", ["CONVOLUTION", "CAST", "ACTIVATION", "QUANTIZE", "DEQUANTIZE", "OTHER"])
    _LAYER_TYPES = {"Conv": "CONVOLUTION", "Cast": "CAST", "Relu": "ACTIVATION", "Sigmoid": "ACTIVATION"}
    _LAYER_TYPES.update({"QuantizeLinear": "QUANTIZE", "DequantizeLinear": "DEQUANTIZE"})
    if v >= (8, 2):
        ProfilingVerbosity = enum_of(
            "ProfilingVerbosity",
            ["LAYER_NAMES_ONLY", "NONE", "DETAILED"],
            {"DEFAULT": "LAYER_NAMES_ONLY", "VERBOSE": "DETAILED"} if v < (10, 0) else None,
        )
    else:  # 8.0/8.1: kDEFAULT, kNONE, kVERBOSE (renamed kLAYER_NAMES_ONLY / kDETAILED in 8.2)
        ProfilingVerbosity = enum_of("ProfilingVerbosity", ["DEFAULT", "NONE", "VERBOSE"])
    pools = ["WORKSPACE", "DLA_MANAGED_SRAM", "DLA_LOCAL_DRAM", "DLA_GLOBAL_DRAM"]
    MemoryPoolType = enum_of(
        "MemoryPoolType", pools + (["TACTIC_DRAM", "TACTIC_SHARED_MEMORY"] if v >= (10, 0) else [])
    )
    TensorIOMode = enum_of("TensorIOMode", ["NONE", "INPUT", "OUTPUT"])
    CalibrationAlgoType = enum_of(
        "CalibrationAlgoType",
        ["LEGACY_CALIBRATION", "ENTROPY_CALIBRATION", "ENTROPY_CALIBRATION_2", "MINMAX_CALIBRATION"],
    )
    explicit_bit = 1 << int(NetworkDefinitionCreationFlag.EXPLICIT_BATCH)

    class Binding:
        """A pybind11-style object: no instance dict, so a member this version lacks fails."""

        __slots__ = ()

        def __getattr__(self, name: str) -> Any:
            raise AttributeError(
                f"'tensorrt.{type(self).__name__}' object has no attribute {name!r} ({surface})"
            )

    class PybindMeta(type):
        """pybind11 refuses a Python subclass whose __init__ did not call the base __init__."""

        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            obj = super().__call__(*args, **kwargs)
            if not obj.__dict__.get("_pybind_init"):
                raise TypeError(f"{cls.__name__}.__init__() must be called when overriding __init__")
            return obj

    class Dims(Binding):
        __slots__ = ("_d",)

        def __init__(self, shape: Any = ()) -> None:
            self._d = tuple(int(x) for x in shape)

        def __len__(self) -> int:
            return len(self._d)

        def __iter__(self) -> Any:
            return iter(self._d)

        def __getitem__(self, i: int) -> int:
            return self._d[i]

        def __eq__(self, other: object) -> bool:
            return isinstance(other, (list, tuple, Dims)) and tuple(other) == self._d

        __hash__ = None  # type: ignore[assignment]

        def __repr__(self) -> str:
            return repr(self._d)

    class ILogger(metaclass=PybindMeta):
        """The trampoline base (PyLogger): subclassable, log() pure virtual; Severity exported into it."""

        Severity = severity
        INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = tuple(severity)

        def __init__(self) -> None:
            self._pybind_init = True

        def log(self, severity: Any, msg: str) -> None:
            raise RuntimeError('Tried to call pure virtual function "ILogger::log"')

    class Logger(ILogger):
        """pyCore.cpp's DefaultLogger: prints what is at least as severe as min_severity to std::cout."""

        def __init__(self, min_severity: Any = severity.WARNING) -> None:
            ILogger.__init__(self)
            need(isinstance(min_severity, severity), "Logger(min_severity: ILogger.Severity)")
            self.min_severity = min_severity

        def log(self, level: Any, msg: str) -> None:
            if level <= self.min_severity:
                sys.stdout.write(f"[TRT] [{'FEWIV'[int(level)]}] {msg}\n")

    def error(logger: Any, msg: str) -> None:
        gpu.trt_errors.append(msg)
        logger.log(severity.ERROR, msg)

    def warning(logger: Any, msg: str) -> None:
        logger.log(severity.WARNING, msg)

    class IProfiler(metaclass=PybindMeta):
        def __init__(self) -> None:
            self._pybind_init = True

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            raise RuntimeError('Tried to call pure virtual function "IProfiler::report_layer_time"')

    class IInt8Calibrator(metaclass=PybindMeta):
        def __init__(self) -> None:
            self._pybind_init = True

        def get_batch_size(self) -> int:
            raise RuntimeError('Tried to call pure virtual function "IInt8Calibrator::getBatchSize"')

        def get_algorithm(self) -> Any:
            raise RuntimeError('Tried to call pure virtual function "IInt8Calibrator::getAlgorithm"')

        def get_batch(self, names: list[str]) -> list[int]:  # documentation-only binding
            return []

        def read_calibration_cache(self) -> Any:
            return None

        def write_calibration_cache(self, cache: Any) -> None:
            return None

    class IInt8EntropyCalibrator2(IInt8Calibrator):
        def get_algorithm(self) -> Any:
            return CalibrationAlgoType.ENTROPY_CALIBRATION_2

    class IInt8MinMaxCalibrator(IInt8Calibrator):
        def get_algorithm(self) -> Any:
            return CalibrationAlgoType.MINMAX_CALIBRATION

    _DATA_TYPES = {
        onnx.TensorProto.FLOAT: "FLOAT",
        onnx.TensorProto.FLOAT16: "HALF",
        onnx.TensorProto.INT8: "INT8",
        onnx.TensorProto.INT32: "INT32",
        onnx.TensorProto.BOOL: "BOOL",
    }
    if v >= (10, 0):
        _DATA_TYPES.update({onnx.TensorProto.INT64: "INT64", onnx.TensorProto.BFLOAT16: "BF16"})

    def data_type(onnx_type: int) -> Any:
        return DataType[_DATA_TYPES.get(onnx_type, "INT32")]  # 8.x casts INT64 down to INT32

    class ITensor(Binding):
        __slots__ = ("_dtype", "_name", "_shape")

        def __init__(
            self, name: str, shape: tuple[int, ...], onnx_type: int = onnx.TensorProto.FLOAT
        ) -> None:
            self._name, self._shape, self._dtype = name, shape, data_type(onnx_type)

        name = property(lambda self: self._name)
        shape = property(lambda self: Dims(self._shape))
        dtype = property(lambda self: self._dtype)

    class ILayer(Binding):
        __slots__ = ("_name", "_outputs", "_type")

        def __init__(self, name: str, op: str, output_types: list[int]) -> None:
            self._name, self._type = name, LayerType[_LAYER_TYPES.get(op, "OTHER")]
            self._outputs = [ITensor(f"{name}:{i}", (), t) for i, t in enumerate(output_types)]

        name = property(lambda self: self._name)
        type = property(lambda self: self._type)
        num_outputs = property(lambda self: len(self._outputs))

        def get_output(self, index: int) -> ITensor:
            need(is_int(index), "get_output(index: int)")
            return self._outputs[index]

    class INetworkDefinition(Binding):
        __slots__ = ("_all", "_flags", "_inputs", "_layers", "_outputs")

        def __init__(self, flags: int) -> None:
            self._flags, self._inputs, self._outputs, self._layers = flags, [], [], []
            self._all: list[ILayer] = []  # every parsed node; _layers: those a build keeps

        num_inputs = property(lambda self: len(self._inputs))
        num_outputs = property(lambda self: len(self._outputs))
        num_layers = property(lambda self: len(self._all))

        def get_layer(self, index: int) -> ILayer:
            need(is_int(index), "get_layer(index: int)")
            return self._all[index]

        def get_input(self, index: int) -> ITensor:
            need(is_int(index), "get_input(index: int)")
            return self._inputs[index]

        def get_output(self, index: int) -> ITensor:
            need(is_int(index), "get_output(index: int)")
            return self._outputs[index]

        if v < (10, 0):
            has_implicit_batch_dimension = property(lambda self: not self._flags & explicit_bit)

    class ParserError(Binding):
        __slots__ = ("_desc",)

        def __init__(self, desc: str) -> None:
            self._desc = desc

        def desc(self) -> str:
            return self._desc

        def __str__(self) -> str:
            return f"In node -1 (parseGraph): INVALID_GRAPH: {self._desc}"

    class OnnxParser(Binding):
        __slots__ = ("_errors", "_logger", "_network")

        def __init__(self, network: Any, logger: Any) -> None:
            need(isinstance(network, INetworkDefinition), "OnnxParser(network: INetworkDefinition, ...)")
            need(isinstance(logger, ILogger), "OnnxParser(..., logger: ILogger)")
            self._network, self._logger, self._errors = network, logger, []

        def parse(self, model: Any, path: str | None = None) -> bool:
            data = bytes(memoryview(model))  # TypeError unless a buffer, as py::buffer
            need(path is None or isinstance(path, str), "parse(model: buffer, path: str = None)")
            gpu.call("OnnxParser.parse", len(data), path)
            if v < (10, 0) and not self._network._flags & explicit_bit:
                self._errors.append(
                    ParserError("the ONNX parser needs a network with an explicit batch dimension")
                )
                return False
            try:
                inputs, outputs, layers, nodes = onnx_io(data)
            except Exception as exc:
                self._errors.append(ParserError(f"failed to parse the ONNX model: {type(exc).__name__}"))
                return False
            if v < (10, 0) and any(
                t.data_type == onnx.TensorProto.INT64 for t in onnx.load_from_string(data).graph.initializer
            ):  # what TensorRT 8.x's ONNX parser says about nearly every PyTorch export (Reshape shapes)
                warning(
                    self._logger,
                    "onnx2trt_utils.cpp:366: Your ONNX model has been generated with INT64 weights, while "
                    "TensorRT does not natively support INT64. Attempting to cast down to INT32.",
                )
            if not inputs:
                self._errors.append(ParserError("the graph has no inputs"))
                return False
            self._network._inputs = [ITensor(n, s, t) for n, s, t in inputs]
            self._network._outputs = [ITensor(n, s, t) for n, s, t in outputs]
            self._network._layers = layers
            self._network._all = [ILayer(*node) for node in nodes]
            return True

        num_errors = property(lambda self: len(self._errors))

        def get_error(self, index: int) -> ParserError:
            need(is_int(index), "get_error(index: int)")
            return self._errors[index]

    class IOptimizationProfile(Binding):
        __slots__ = ("_shapes",)

        def __init__(self) -> None:
            self._shapes: dict[str, tuple[tuple[int, ...], ...]] = {}

        def set_shape(self, input: str, min: Any, opt: Any, max: Any) -> None:
            need(isinstance(input, str), "set_shape(input: str, min: Dims, opt: Dims, max: Dims)")
            lo, mid, hi = dims_arg(min, "min"), dims_arg(opt, "opt"), dims_arg(max, "max")
            if not len(lo) == len(mid) == len(hi) or any(a > b or b > c for a, b, c in zip(lo, mid, hi)):
                raise RuntimeError("Shape provided for min is inconsistent with other shapes.")
            gpu.call("IOptimizationProfile.set_shape", input, lo, mid, hi)
            self._shapes[input] = (lo, mid, hi)

        def get_shape(self, input: str) -> list[Dims]:
            return [Dims(s) for s in self._shapes.get(input, ())]

    class ITimingCache(Binding):
        __slots__ = ("_builds", "foreign")

        def __init__(self, builds: int, foreign: bool = False) -> None:
            self._builds = builds
            self.foreign = foreign  # another device's: set_timing_cache(..., False) refuses it

        def serialize(self) -> IHostMemory:
            return IHostMemory(f"FAKE-TIMING-CACHE {version} builds={self._builds}".encode())

        def combine(self, input_cache: Any, ignore_mismatch: bool) -> bool:
            return True

        def reset(self) -> bool:
            self._builds = 0
            return True

    class IHostMemory(Binding):
        __slots__ = ("_data",)

        def __init__(self, data: bytes) -> None:
            self._data = data

        nbytes = property(lambda self: len(self._data))

        def __bytes__(self) -> bytes:  # the real one exposes the buffer protocol; bytes() works on both
            return self._data

    class IBuilderConfig(Binding):
        __slots__ = ("_cache", "_calib_profile", "_calibrator", "_flags", "_pool", "_profiles", "_verbosity")

        def __init__(self) -> None:
            self._flags: set[Any] = set()
            self._pool: dict[str, int] = {}
            self._verbosity = ProfilingVerbosity(0)  # LAYER_NAMES_ONLY (8.0/8.1: DEFAULT)
            self._calibrator, self._calib_profile, self._cache = None, None, None
            self._profiles: list[IOptimizationProfile] = []

        def set_flag(self, flag: Any) -> None:
            need(isinstance(flag, BuilderFlag), "set_flag(flag: BuilderFlag)")
            gpu.call("IBuilderConfig.set_flag", flag.name)
            self._flags.add(flag)

        def get_flag(self, flag: Any) -> bool:
            need(isinstance(flag, BuilderFlag), "get_flag(flag: BuilderFlag)")
            return flag in self._flags

        def clear_flag(self, flag: Any) -> None:
            need(isinstance(flag, BuilderFlag), "clear_flag(flag: BuilderFlag)")
            self._flags.discard(flag)

        def _get_verbosity(self) -> Any:
            return self._verbosity

        def _set_verbosity(self, value: Any) -> None:
            need(isinstance(value, ProfilingVerbosity), "profiling_verbosity: ProfilingVerbosity")
            gpu.call("IBuilderConfig.profiling_verbosity=", value.name)
            self._verbosity = value

        profiling_verbosity = property(_get_verbosity, _set_verbosity)

        if weak_typing:  # removed in 11.0 (explicit quantization only)

            def _get_calibrator(self) -> Any:
                return self._calibrator

            def _set_calibrator(self, value: Any) -> None:
                need(value is None or isinstance(value, IInt8Calibrator), "int8_calibrator: IInt8Calibrator")
                if v >= (10, 1):
                    deprecated("IBuilderConfig.int8_calibrator")
                gpu.call("IBuilderConfig.int8_calibrator=", type(value).__name__)
                self._calibrator = value

            int8_calibrator = property(_get_calibrator, _set_calibrator)

        def add_optimization_profile(self, profile: Any) -> int:
            need(
                isinstance(profile, IOptimizationProfile),
                "add_optimization_profile(profile: IOptimizationProfile)",
            )
            gpu.call("IBuilderConfig.add_optimization_profile")
            self._profiles.append(profile)
            return len(self._profiles) - 1

        num_optimization_profiles = property(lambda self: len(self._profiles))

        if weak_typing:  # removed in 11.0 (explicit quantization only)

            def set_calibration_profile(self, profile: Any) -> bool:
                need(
                    isinstance(profile, IOptimizationProfile),
                    "set_calibration_profile(profile: IOptimizationProfile)",
                )
                if v >= (10, 1):
                    deprecated("IBuilderConfig.set_calibration_profile")
                gpu.call("IBuilderConfig.set_calibration_profile")
                self._calib_profile = profile
                return True

            def get_calibration_profile(self) -> Any:
                return self._calib_profile

        def create_timing_cache(self, serialized_timing_cache: Any) -> ITimingCache:
            blob = bytes(memoryview(serialized_timing_cache))
            head = f"FAKE-TIMING-CACHE {version} builds=".encode()
            builds = int(blob[len(head) :]) if blob.startswith(head) else 0
            gpu.call("IBuilderConfig.create_timing_cache", len(blob), builds)
            return ITimingCache(builds, foreign=blob.startswith(FOREIGN_TIMING_CACHE))

        def set_timing_cache(self, cache: Any, ignore_mismatch: bool) -> bool:
            """False, leaving none set, for another device's cache unless mismatches are ignored (the
            API's bool: "true if set successfully")."""
            need(isinstance(cache, ITimingCache), "set_timing_cache(cache: ITimingCache, ...)")
            need(isinstance(ignore_mismatch, bool), "set_timing_cache(..., ignore_mismatch: bool)")
            if cache.foreign and not ignore_mismatch:
                return False
            self._cache = cache
            return True

        def get_timing_cache(self) -> Any:
            return self._cache

        if workspace_size:

            def _get_workspace(self) -> int:
                return self._pool.get("WORKSPACE", 0)

            def _set_workspace(self, value: int) -> None:
                need(is_int(value) and value >= 0, "max_workspace_size: int")
                if v >= (8, 4):
                    deprecated("IBuilderConfig.max_workspace_size")
                gpu.call("IBuilderConfig.max_workspace_size=", int(value))
                self._pool["WORKSPACE"] = int(value)

            max_workspace_size = property(_get_workspace, _set_workspace)

        if memory_pool:

            def set_memory_pool_limit(self, pool: Any, pool_size: int) -> None:
                need(isinstance(pool, MemoryPoolType), "set_memory_pool_limit(pool: MemoryPoolType, ...)")
                need(is_int(pool_size) and pool_size >= 0, "set_memory_pool_limit(..., pool_size: int)")
                gpu.call("IBuilderConfig.set_memory_pool_limit", pool.name, int(pool_size))
                self._pool[pool.name] = int(pool_size)

            def get_memory_pool_limit(self, pool: Any) -> int:
                need(isinstance(pool, MemoryPoolType), "get_memory_pool_limit(pool: MemoryPoolType)")
                return self._pool.get(pool.name, 0)

    def callback(name: str, default: Any, method: Callable[..., Any], *args: Any) -> Any:
        """pyInt8.cpp's noexcept overrides around the Python methods. 8.2 (@0a4ed147) has no
        try/catch there: an exception reaches std::terminate. From 8.4 on (@768d994b; NVIDIA/TensorRT
        issue 3871 on 8.4) it is printed and the default returned: no batch (calibration ends, on
        whatever came before), no table, nothing written."""
        try:
            return method(*args)
        except Exception as exc:
            if v < (8, 4):
                raise FakeAbort(f"std::terminate: {name}() raised {type(exc).__name__}: {exc}") from exc
            gpu.callback_errors.append(f"{name}: {type(exc).__name__}: {exc}")
            sys.stderr.write(f"[ERROR] Exception caught in {name}(): {exc}\n")
            return default

    def calibrate(logger: Any, network: INetworkDefinition, config: IBuilderConfig) -> str | None:
        """What the builder does with an IInt8Calibrator (pyInt8.cpp's trampoline, then TensorRT)."""
        cal = config._calibrator
        batch_size = callback("get_batch_size", -1, cal.get_batch_size)
        need(is_int(batch_size) and batch_size >= 1, "get_batch_size() must return a positive int")
        cached = callback("read_calibration_cache", None, cal.read_calibration_cache)
        if cached is not None and bytes(memoryview(cached)):
            gpu.call("calibration: table read", len(bytes(memoryview(cached))))
            return "cache"
        profile = config._calib_profile or (config._profiles[0] if config._profiles else None)
        shapes = {
            t._name: (profile._shapes[t._name][1] if -1 in t._shape else t._shape) for t in network._inputs
        }
        names = [t._name for t in network._inputs]
        types_of = {t._name: t._dtype for t in network._inputs}
        while True:
            got = callback("get_batch", None, cal.get_batch, list(names))
            gpu.get_batch_results.append(got)
            if got is None or len(got) == 0:
                break
            need(len(got) == len(names), f"get_batch must return one device pointer per input ({len(names)})")
            batch = {}
            for name, ptr in zip(names, got):
                need(is_int(ptr), f"get_batch must return device pointers (ints), got {ptr!r}")
                # read as the input's own type (float32 bytes for an fp16 input are read as fp16)
                dt = np.dtype(BUFFER_TYPES[types_of[name].name])
                nbytes = volume(shapes[name]) * dt.itemsize
                data = gpu.read(int(ptr), nbytes, f"calibration batch for {name!r}")
                batch[name] = np.frombuffer(data, dt).reshape(shapes[name]).copy()
            gpu.calibration_batches.append(batch)
        if not gpu.calibration_batches:
            error(logger, "Calibration failure occurred with no scaling factors detected.")
            return None
        code = v[0] * 1000 + v[1] * 100 + v[2]
        table = f"TRT-{code}-EntropyCalibration2\n".encode() + b"".join(
            f"{n}: 3c010a14\n".encode() for n in names
        )
        callback("write_calibration_cache", None, cal.write_calibration_cache, memoryview(table))
        return "data"

    class Builder(Binding):
        __slots__ = ("_logger",)

        def __init__(self, logger: Any) -> None:
            need(isinstance(logger, ILogger), "Builder(logger: ILogger)")
            self._logger = logger

        def create_network(self, flags: int = 0) -> INetworkDefinition:
            need(is_int(flags) and flags >= 0, "create_network(flags: int = 0)")
            if v >= (10, 0) and flags & explicit_bit:
                deprecated("NetworkDefinitionCreationFlag.EXPLICIT_BATCH")
            gpu.call("Builder.create_network", int(flags))
            return INetworkDefinition(int(flags))

        def create_builder_config(self) -> IBuilderConfig:
            return IBuilderConfig()

        def create_optimization_profile(self) -> IOptimizationProfile:
            gpu.call("Builder.create_optimization_profile")
            return IOptimizationProfile()

        if weak_typing:  # removed in 11.0
            platform_has_fast_fp16 = property(lambda self: True)
            platform_has_fast_int8 = property(lambda self: True)

        def build_serialized_network(self, network: Any, config: Any) -> IHostMemory | None:
            need(
                isinstance(network, INetworkDefinition),
                "build_serialized_network(network: INetworkDefinition, ...)",
            )
            need(isinstance(config, IBuilderConfig), "build_serialized_network(..., config: IBuilderConfig)")
            gpu.call("Builder.build_serialized_network")
            if not network._inputs:
                error(self._logger, "Network must have at least one output")
                return None
            for t in network._inputs:
                if -1 not in t._shape:
                    continue
                for p in config._profiles or [None]:
                    ranges = p._shapes.get(t._name) if p is not None else None
                    fits = ranges is not None and all(
                        len(s) == len(t._shape) and all(d == -1 or d == x for d, x in zip(t._shape, s))
                        for s in ranges
                    )
                    if not fits:
                        error(
                            self._logger, f"{t._name}: dynamic input without a fitting optimization profile"
                        )
                        return None
            calibration = None
            if weak_typing and BuilderFlag.INT8 in config._flags and config._calibrator is not None:
                calibration = calibrate(self._logger, network, config)
                if calibration is None:
                    return None
            if config._cache is not None:
                config._cache._builds += 1
            blob = {
                "version": version,
                "inputs": [[t._name, list(t._shape), t._dtype.name] for t in network._inputs],
                "outputs": [[t._name, list(t._shape), t._dtype.name] for t in network._outputs],
                "layers": network._layers,
                # what a network runs in: its own types (11.x) or, up to 10.x, also what flags allow
                "typed_fp16": any(t.dtype == DataType.HALF for layer in network._all for t in layer._outputs),
                "qdq": any(
                    layer.type in (LayerType.QUANTIZE, LayerType.DEQUANTIZE) for layer in network._all
                ),
                "profiles": [
                    {k: [list(s) for s in r] for k, r in p._shapes.items()} for p in config._profiles
                ],
                "calibration_profile": (
                    config._profiles.index(config._calib_profile)
                    if config._calib_profile is not None
                    else None
                ),
                "flags": sorted(f.name for f in config._flags),
                "workspace": config._pool.get("WORKSPACE"),
                "profiling_verbosity": config._verbosity.name,
                "calibration": calibration,
            }
            return IHostMemory(ENGINE_MAGIC + json.dumps(blob).encode())

        if v < (10, 0):

            def build_engine(self, network: Any, config: Any) -> Any:
                deprecated("Builder.build_engine")
                serialized = self.build_serialized_network(network, config)
                return (
                    None
                    if serialized is None
                    else Runtime(self._logger).deserialize_cuda_engine(bytes(serialized))
                )

            def _get_max_batch(self) -> int:
                if v >= (8, 5):
                    deprecated("Builder.max_batch_size")
                return 1

            max_batch_size = property(_get_max_batch)

    class Runtime(Binding):
        __slots__ = ("_logger",)

        def __init__(self, logger: Any) -> None:
            need(isinstance(logger, ILogger), "Runtime(logger: ILogger)")
            self._logger = logger

        def deserialize_cuda_engine(self, serialized_engine: Any) -> ICudaEngine | None:
            data = bytes(memoryview(serialized_engine))
            gpu.call("Runtime.deserialize_cuda_engine", len(data))
            if not data.startswith(ENGINE_MAGIC):
                error(
                    self._logger,
                    "1: [stdArchiveReader.cpp::StdArchiveReader::32] Error Code 1: Serialization",
                )
                return None
            blob = json.loads(data[len(ENGINE_MAGIC) :])
            if blob["version"] != version:
                msg = "The engine plan file is not compatible with this version of TensorRT"
                error(self._logger, f"{msg}, expecting {version}, got {blob['version']}")
                return None
            return ICudaEngine(blob)

    def _dep(name: str) -> None:
        if tensor_api:  # 8.5: the binding API still works, deprecated
            deprecated(f"ICudaEngine.{name}")

    class ICudaEngine(Binding):
        __slots__ = ("_blob", "_dtypes", "_io")

        def __init__(self, blob: dict[str, Any]) -> None:
            self._blob = blob
            self._io = [(n, True, tuple(s)) for n, s, _ in blob["inputs"]]
            self._io += [(n, False, tuple(s)) for n, s, _ in blob["outputs"]]
            self._dtypes = {n: DataType[t] for n, _, t in (*blob["inputs"], *blob["outputs"])}

        def _index(self, key: Any) -> int:
            """A binding index over every profile's bindings (a name of profile p > 0 ends " [profile p]")."""
            if isinstance(key, str):
                return [self._name(i) for i in range(self._all())].index(key)
            need(is_int(key) and 0 <= int(key) < self._all(), "binding index: int in range (or name: str)")
            return int(key)

        def _all(self) -> int:
            """Bindings over every optimization profile: 8.2-8.4 give each profile its own n, profile
            p's at p*n .. p*n+n-1 (NvInferRuntime.h 8.x, getNbBindings / getBindingIndex)."""
            return len(self._io) * self.num_optimization_profiles

        def _name(self, index: int) -> str:
            """getBindingName: profile k > 0 appends " [profile k]" ("foo [profile 3]")."""
            profile, i = divmod(index, len(self._io))
            return self._io[i][0] + (f" [profile {profile}]" if profile else "")

        def _tensor(self, key: Any) -> tuple[str, bool, tuple[int, ...]]:
            """The network tensor a binding of any profile stands for."""
            return self._io[self._index(key) % len(self._io)]

        def _by_name(self, name: Any) -> tuple[str, bool, tuple[int, ...]] | None:
            need(isinstance(name, str), "tensor name: str")
            return next((io for io in self._io if io[0] == name), None)

        def create_execution_context(self) -> IExecutionContext | None:
            gpu.call("ICudaEngine.create_execution_context")
            if not gpu.context_memory_left:  # pybind hands back nullptr as None (NVIDIA/TensorRT#3554)
                gpu.trt_errors.append("1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime")
                return None
            return IExecutionContext(self)

        num_layers = property(lambda self: len(self._blob["layers"]))
        num_optimization_profiles = property(lambda self: max(1, len(self._blob["profiles"])))

        if binding_api:

            def _num_bindings(self) -> int:
                _dep("num_bindings")
                return self._all()

            num_bindings = property(_num_bindings)

            def get_binding_name(self, index: int) -> str:
                _dep("get_binding_name")
                return self._name(self._index(index))

            def get_binding_index(self, name: str) -> int:
                _dep("get_binding_index")
                return self._index(name)

            def binding_is_input(self, index: Any) -> bool:
                _dep("binding_is_input")
                return self._tensor(index)[1]

            def get_binding_shape(self, index: Any) -> Dims:
                _dep("get_binding_shape")
                return Dims(self._tensor(index)[2])

            def get_binding_dtype(self, index: Any) -> Any:
                _dep("get_binding_dtype")
                return self._dtypes[self._tensor(index)[0]]

            has_implicit_batch_dimension = property(lambda self: False)

        if tensor_api:
            num_io_tensors = property(lambda self: len(self._io))

            def get_tensor_name(self, index: int) -> str | None:
                need(is_int(index), "get_tensor_name(index: int)")
                return self._io[index][0] if 0 <= index < len(self._io) else None

            def get_tensor_mode(self, name: str) -> Any:
                io = self._by_name(name)
                return (
                    TensorIOMode.NONE
                    if io is None
                    else (TensorIOMode.INPUT if io[1] else TensorIOMode.OUTPUT)
                )

            def get_tensor_shape(self, name: str) -> Dims:
                io = self._by_name(name)
                return Dims(() if io is None else io[2])

            def get_tensor_dtype(self, name: str) -> Any:
                io = self._by_name(name)
                return DataType.FLOAT if io is None else self._dtypes[name]

    class IExecutionContext(Binding):
        __slots__ = ("_addresses", "_e", "_profiled_calls", "_profiler", "_shapes")

        def __init__(self, engine: ICudaEngine) -> None:
            self._e = engine
            self._shapes: dict[str, tuple[int, ...]] = {}  # input shapes set on this context
            self._addresses: dict[str, int] = {}  # set_tensor_address
            self._profiler: Any = None
            self._profiled_calls = 0

        engine = property(lambda self: self._e)

        def _get_profiler(self) -> Any:
            return self._profiler

        def _set_profiler(self, value: Any) -> None:
            need(value is None or isinstance(value, IProfiler), "profiler: IProfiler")
            gpu.call("IExecutionContext.profiler=", type(value).__name__)
            self._profiler = value

        profiler = property(_get_profiler, _set_profiler)
        enqueue_emits_profile = property(lambda self: True)

        def _shape(self, name: str) -> tuple[int, ...]:
            io = self._e._by_name(name)
            assert io is not None
            if io[1]:
                return self._shapes.get(name, io[2])
            first = self._e._io[0][0]
            batch = self._shapes.get(first, self._e._io[0][2])[0]
            return tuple(batch if d == -1 else d for d in io[2])

        def _set_shape(self, name: str, shape: tuple[int, ...]) -> bool:
            io = self._e._by_name(name)
            if io is None or not io[1]:
                return False
            profile = self._e._blob["profiles"][0] if self._e._blob["profiles"] else {}
            lo, _, hi = profile.get(name, (io[2], io[2], io[2]))
            if len(shape) != len(io[2]) or not all(a <= d <= b or a == -1 for a, d, b in zip(lo, shape, hi)):
                gpu.trt_errors.append(f"{name}: shape {list(shape)} is outside the optimization profile")
                return False
            self._shapes[name] = shape
            return True

        def _run(self, kind: str, handle: int, pointers: dict[str, int]) -> bool:
            for name, _, _ in self._e._io:
                shape = self._shape(name)
                if -1 in shape:
                    gpu.trt_errors.append(f"{kind}: the shape of input {name!r} is not set")
                    return False
                ptr = pointers.get(name, 0)
                if not ptr:
                    gpu.trt_errors.append(f"{kind}: tensor {name!r} has no address")
                    return False
                if gpu.size_of(ptr) < volume(shape) * 4:
                    raise FakeMisuse(
                        f"{kind}: {name!r} {list(shape)} needs {volume(shape) * 4} bytes at {ptr:#x}"
                    )
            inputs_written = all(pointers[n] in gpu.written for n, is_input, _ in self._e._io if is_input)
            ms = gpu.execute(handle)
            profiled = self._profiler is not None and (kind == "execute_v2" or profiler_on_enqueue)
            gpu.runs.append(
                {
                    "kind": kind,
                    "stream": handle,
                    "ms": ms,
                    "profiled": profiled,
                    "addresses": dict(pointers),
                    "shapes": {n: self._shape(n) for n, _, _ in self._e._io},
                    "inputs_written": inputs_written,
                }
            )
            gpu.call(kind, handle)
            if profiled:
                for j, layer in enumerate(self._e._blob["layers"]):
                    ms_layer = layer_ms(j, self._profiled_calls)
                    gpu.reported.setdefault(layer, []).append(ms_layer)
                    self._profiler.report_layer_time(layer, ms_layer)
                self._profiled_calls += 1
            return True

        def _bindings(self, bindings: Any, what: str) -> dict[str, int]:
            """enqueueV2 reads the array by binding index, the active profile's (0: the first context's,
            NvInferRuntime.h createExecutionContext) slots p*n .. p*n+n-1: one for every binding of
            every profile, or TensorRT reads past the list's end (pyCore.cpp passes bindings.data())."""
            need(
                isinstance(bindings, list) and all(is_int(b) for b in bindings),
                f"{what}(bindings: List[int], ...)",
            )
            n, total = len(self._e._io), self._e._all()
            if len(bindings) != total:
                raise FakeMisuse(f"{what}: {len(bindings)} bindings for an engine with {total}")
            gpu.bindings.append([int(b) for b in bindings])
            return {name: int(b) for (name, _, _), b in zip(self._e._io, bindings[:n])}

        def execute_v2(self, bindings: Any) -> bool:
            return self._run("execute_v2", 0, self._bindings(bindings, "execute_v2"))

        if binding_api:

            def execute_async_v2(self, bindings: Any, stream_handle: int, input_consumed: Any = None) -> bool:
                handle = handle_arg(stream_handle, "execute_async_v2(..., stream_handle: int, ...)")
                return self._run("execute_async_v2", handle, self._bindings(bindings, "execute_async_v2"))

            def set_binding_shape(self, binding: int, shape: Any) -> bool:
                need(is_int(binding), "set_binding_shape(binding: int, shape: Dims)")
                if tensor_api:
                    deprecated("IExecutionContext.set_binding_shape")
                dims = dims_arg(shape, "shape")
                gpu.call("IExecutionContext.set_binding_shape", int(binding), dims)
                if not 0 <= int(binding) < len(self._e._io):  # "out of range for the ... selected profile"
                    gpu.trt_errors.append(f"set_binding_shape: binding {binding} not of the active profile")
                    return False
                return self._set_shape(self._e._io[int(binding)][0], dims)

            def get_binding_shape(self, binding: int) -> Dims:
                need(is_int(binding), "get_binding_shape(binding: int)")
                if tensor_api:
                    deprecated("IExecutionContext.get_binding_shape")
                # another profile's binding "is corrected" to the active profile's (NvInferRuntime.h 8.x)
                return Dims(self._shape(self._e._tensor(binding)[0]))

        if tensor_api:

            def set_input_shape(self, name: str, shape: Any) -> bool:
                need(isinstance(name, str), "set_input_shape(name: str, shape: Dims)")
                dims = dims_arg(shape, "shape")
                gpu.call("IExecutionContext.set_input_shape", name, dims)
                return self._set_shape(name, dims)

            def get_tensor_shape(self, name: str) -> Dims:
                need(isinstance(name, str), "get_tensor_shape(name: str)")
                return Dims(self._shape(name))

            def set_tensor_address(self, name: str, memory: int) -> bool:
                need(isinstance(name, str) and is_int(memory), "set_tensor_address(name: str, memory: int)")
                if self._e._by_name(name) is None:
                    return False
                gpu.call("IExecutionContext.set_tensor_address", name, int(memory))
                self._addresses[name] = int(memory)
                return True

            def get_tensor_address(self, name: str) -> int:
                return self._addresses.get(name, 0)

            def execute_async_v3(self, stream_handle: int) -> bool:
                handle = handle_arg(stream_handle, "execute_async_v3(stream_handle: int)")
                return self._run("execute_async_v3", handle, dict(self._addresses))

    def nptype(trt_type: Any) -> Any:
        """The real body: the table is built on every call, and 8.0-8.5's reads np.bool (numpy
        1.24-1.26 have none: an AttributeError for every type, NVIDIA/TensorRT#2557); 8.6 maps
        UINT8 and reads np.bool_, 10.x maps INT64 too; bf16, fp8 and int4 it maps to nothing."""
        need(isinstance(trt_type, DataType), "nptype(trt_type: DataType)")
        table = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "INT32": np.int32}
        table["BOOL"] = np.bool_ if v >= (8, 6) else NPTYPE_NUMPY.bool
        if v >= (8, 6):
            table["UINT8"] = np.uint8
        if v >= (10, 0):
            table["INT64"] = np.int64
        if trt_type.name not in table:
            raise TypeError("Could not resolve TensorRT datatype to an equivalent numpy datatype.")
        return table[trt_type.name]

    mod = types.ModuleType("tensorrt")
    mod.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
    mod.__version__ = version
    members: dict[str, Any] = {
        "Logger": Logger,
        "ILogger": ILogger,
        "Builder": Builder,
        "Runtime": Runtime,
        "OnnxParser": OnnxParser,
        "IBuilderConfig": IBuilderConfig,
        "INetworkDefinition": INetworkDefinition,
        "ITensor": ITensor,
        "ICudaEngine": ICudaEngine,
        "IExecutionContext": IExecutionContext,
        "IOptimizationProfile": IOptimizationProfile,
        "IHostMemory": IHostMemory,
        "ITimingCache": ITimingCache,
        "IProfiler": IProfiler,
        "Dims": Dims,
        "DataType": DataType,
        "BuilderFlag": BuilderFlag,
        "NetworkDefinitionCreationFlag": NetworkDefinitionCreationFlag,
        "ProfilingVerbosity": ProfilingVerbosity,
        "LayerType": LayerType,
        "nptype": nptype,
        "volume": volume,
    }
    if weak_typing:  # the calibrators went with implicit INT8 in 11.0
        members["IInt8Calibrator"] = IInt8Calibrator
        members["IInt8EntropyCalibrator2"] = IInt8EntropyCalibrator2
        members["IInt8MinMaxCalibrator"] = IInt8MinMaxCalibrator
        members["CalibrationAlgoType"] = CalibrationAlgoType
    if memory_pool:
        members["MemoryPoolType"] = MemoryPoolType
    if tensor_api:
        members["TensorIOMode"] = TensorIOMode
    for name, obj in members.items():
        setattr(mod, name, obj)
    return mod


# ================================================================================================
# installing the fakes


DEVICES = {
    V80: ("NVIDIA Tegra X1 (fake)", 1, (5, 3)),
    V82: ("NVIDIA Tegra X1 (fake)", 1, (5, 3)),
    V85: ("Xavier (fake)", 8, (7, 2)),
    V11: ("NVIDIA RTX PRO 6000 (fake)", 188, (12, 0)),
    V10: ("Orin (fake)", 16, (8, 7)),
}


def install(monkeypatch: pytest.MonkeyPatch, version: str, cuda: str) -> tuple[types.ModuleType, FakeGpu]:
    """Put the fake `tensorrt` and one fake CUDA binding in sys.modules (undone after the test)."""
    gpu = FakeGpu(*DEVICES[version])
    trt = make_tensorrt(version, gpu)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    for name in [m for m in sys.modules if m == "cuda" or m.startswith(("cuda.", "pycuda"))]:
        monkeypatch.delitem(sys.modules, name)
    if cuda == "pycuda":
        monkeypatch.setitem(sys.modules, "cuda", None)  # import cuda -> ImportError
        for name, module in make_pycuda(gpu).items():
            monkeypatch.setitem(sys.modules, name, module)
        return trt, gpu
    monkeypatch.setitem(sys.modules, "pycuda", None)
    package = types.ModuleType("cuda")
    package.__path__ = []
    package.__spec__ = importlib.machinery.ModuleSpec("cuda", None, is_package=True)
    monkeypatch.setitem(sys.modules, "cuda", package)
    if cuda == "bindings":  # cuda-python >= 12.6
        runtime = make_cuda_runtime(gpu, "cuda.bindings.runtime")
        bindings = types.ModuleType("cuda.bindings")
        bindings.__path__ = []
        bindings.runtime = runtime
        package.bindings = bindings
        monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
        monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", runtime)
    else:  # cuda-python 11.x / early 12.x: cuda.cudart
        runtime = make_cuda_runtime(gpu, "cuda.cudart")
        package.cudart = runtime
        monkeypatch.setitem(sys.modules, "cuda.bindings", None)
        monkeypatch.setitem(sys.modules, "cuda.cudart", runtime)
    return trt, gpu


def engine_blob(path: Path) -> dict[str, Any]:
    data = Path(path).read_bytes()
    assert data.startswith(ENGINE_MAGIC), "not an engine the fake built"
    return json.loads(data[len(ENGINE_MAGIC) :])


def calls(gpu: FakeGpu, name: str) -> list[tuple[Any, ...]]:
    return [args for n, args in gpu.log if n == name]


def opts(tmp_path: Path, dtype: str = "fp16", **kwargs: Any) -> MeasureOptions:
    extra = {"isolate": False, "workspace_mib": 64, **kwargs.pop("extra", {})}
    return MeasureOptions(dtype=dtype, runs=5, warmup=3, workdir=tmp_path / "engines", extra=extra, **kwargs)


def timed_runs(gpu: FakeGpu, warmup: int) -> list[dict[str, Any]]:
    """The executions inside CUDA events: the async ones without a profiler, after the warm-up."""
    return [r for r in gpu.runs if r["kind"] != "execute_v2" and not r["profiled"]][warmup:]


@pytest.fixture(params=SURFACES, ids=SURFACE_IDS)
def surface(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, types.ModuleType, FakeGpu]:
    version, cuda = request.param
    trt, gpu = install(monkeypatch, version, cuda)
    return version, trt, gpu


# ================================================================================================
# the fakes themselves: the version differences they encode (so a test below can fail)


ABSENT = {
    V82: {
        "module": ["MemoryPoolType", "TensorIOMode"],
        "IBuilderConfig": ["set_memory_pool_limit"],
        "ICudaEngine": ["num_io_tensors", "get_tensor_name", "get_tensor_mode", "get_tensor_shape"],
        "IExecutionContext": ["set_input_shape", "set_tensor_address", "execute_async_v3"],
    },
    V85: {"module": [], "IBuilderConfig": [], "ICudaEngine": [], "IExecutionContext": []},
    V10: {
        "module": [],
        "IBuilderConfig": ["max_workspace_size"],
        "ICudaEngine": ["num_bindings", "get_binding_shape", "binding_is_input", "get_binding_name"],
        "IExecutionContext": ["execute_async_v2", "set_binding_shape", "get_binding_shape"],
        "Builder": ["build_engine", "max_batch_size"],
        "ProfilingVerbosity": ["DEFAULT", "VERBOSE"],
    },
}
PRESENT_EVERYWHERE = {
    "module": [
        "Logger",
        "Builder",
        "Runtime",
        "OnnxParser",
        "IProfiler",
        "IInt8EntropyCalibrator2",
        "nptype",
    ],
    "IBuilderConfig": ["set_flag", "int8_calibrator", "add_optimization_profile", "set_calibration_profile"],
    "ICudaEngine": ["create_execution_context"],
    "IExecutionContext": ["execute_v2", "profiler"],
    "Builder": ["build_serialized_network", "create_network", "create_optimization_profile"],
    "ProfilingVerbosity": ["DETAILED"],
}


@pytest.mark.parametrize("version", [V82, V85, V10], ids=SURFACE_IDS)
def test_fake_surfaces_have_what_each_version_documents(version: str) -> None:
    trt = make_tensorrt(version, FakeGpu(*DEVICES[version]))
    owner = {"module": trt}
    owner.update(
        {k: getattr(trt, k) for k in ("IBuilderConfig", "ICudaEngine", "IExecutionContext", "Builder")}
    )
    owner["ProfilingVerbosity"] = trt.ProfilingVerbosity
    for kind, names in PRESENT_EVERYWHERE.items():
        for name in names:
            assert hasattr(owner[kind], name), f"{kind}.{name} should exist in {version}"
    for kind, names in ABSENT[version].items():
        for name in names:
            assert not hasattr(owner[kind], name), f"{kind}.{name} should not exist in {version}"
    config = trt.Builder(trt.Logger(trt.Logger.WARNING)).create_builder_config()
    with pytest.raises(AttributeError):
        config.workspace = 1  # a misspelt member fails on write too (no instance dict)
    assert hasattr(trt.IBuilderConfig, "max_workspace_size") == (version != V10)
    assert hasattr(trt.IBuilderConfig, "set_memory_pool_limit") == (version != V82)


def test_tensorrt_80_builds_with_its_own_profiling_verbosity(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """TensorRT 8.0/8.1 (JetPack 4.6.0 ships 8.0.1) have ProfilingVerbosity.VERBOSE, not DETAILED:
    the backend and the runner both build there with the older name."""
    trt, gpu = install(monkeypatch, V80, "pycuda")
    assert not hasattr(trt.ProfilingVerbosity, "DETAILED")
    model = zoo_model_path("mobilenet_like")
    engine = tmp_path / "m.engine"
    build_engine(str(model), opts(tmp_path), str(engine))
    assert engine_blob(engine)["profiling_verbosity"] == "VERBOSE"
    result = run_runner([str(model), "--runs", "2", "--warmup", "1", "--cuda", "pycuda"], tmp_path, capsys)
    assert engine_blob(Path(result["environment"]["engine"]))["profiling_verbosity"] == "VERBOSE"
    assert result["environment"]["tensorrt"] == V80 and result["environment"]["api"] == "v2"
    assert not gpu.trt_errors and gpu.memory == {}


def test_fake_refuses_a_subclass_that_skips_the_base_init() -> None:
    trt = make_tensorrt(V85, FakeGpu(*DEVICES[V85]))

    class Profiler(trt.IProfiler):
        def __init__(self) -> None:  # no trt.IProfiler.__init__(self): pybind11 raises
            self.times: list[float] = []

    with pytest.raises(TypeError, match=r"Profiler.__init__\(\) must be called when overriding __init__"):
        Profiler()
    assert isinstance(trt_backend.make_layer_profiler(trt), trt.IProfiler)  # deployopt's calls the base


# ================================================================================================
# build_engine + time_engine on each surface


@pytest.mark.parametrize("per_layer", [False, True], ids=["timing", "per_layer"])
def test_fp16_static_build_then_time(
    surface: tuple[str, types.ModuleType, FakeGpu],
    per_layer: bool,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    version, _, gpu = surface
    model = zoo_model_path("mobilenet_like")
    options = opts(tmp_path)
    engine = tmp_path / "m.engine"
    facts = build_engine(str(model), options, str(engine))
    assert facts == {"tensorrt": version, "shapes": {}}  # static input: no shapes to set

    blob = engine_blob(engine)
    v10 = version == V10
    # explicit batch: the flag before 10.x, nothing in 10.x (where it is the only mode)
    assert calls(gpu, "Builder.create_network") == ([(0,)] if v10 else [(1 << 0,)])
    # the workspace reached the config through the version's own API
    if version == V82:
        assert calls(gpu, "IBuilderConfig.max_workspace_size=") == [(64 << 20,)]
    else:
        assert calls(gpu, "IBuilderConfig.set_memory_pool_limit") == [("WORKSPACE", 64 << 20)]
    assert blob["workspace"] == 64 << 20
    assert blob["flags"] == ["FP16"] and blob["profiling_verbosity"] == "DETAILED"
    assert blob["profiles"] == [] and blob["calibration"] is None
    assert calls(gpu, "OnnxParser.parse") == [(model.stat().st_size, str(model))]

    out = time_engine(str(engine), options, facts["shapes"], per_layer)
    kinds = {r["kind"] for r in gpu.runs}
    api = "v2" if version == V82 else "v3"
    expected_kinds = {"execute_async_v2"} if api == "v2" else {"execute_async_v3"}
    if per_layer and api == "v2":
        expected_kinds.add("execute_v2")  # 8.2 reports layer times from synchronous execution only
    assert kinds == expected_kinds
    assert not gpu.trt_errors and gpu.deprecated == []  # no deprecated call on 8.5 / 10.x either

    # every execution had both tensors bound to buffers of the right size, input uploaded first
    sizes = {"input": 1 * 3 * 32 * 32 * 4, "logits": 1 * 10 * 4}
    for run in gpu.runs:
        assert set(run["addresses"]) == set(sizes) and run["inputs_written"]
    allocs = {ptr: n for ptr, n in calls(gpu, "alloc")}
    assert sorted(allocs.values()) == sorted(sizes.values())
    if api == "v3":
        bound = dict(calls(gpu, "IExecutionContext.set_tensor_address"))
        assert {allocs[p] for p in bound.values()} == set(sizes.values())
        names = gpu.names()
        last_bind = max(i for i, n in enumerate(names) if n == "IExecutionContext.set_tensor_address")
        assert last_bind < names.index("execute_async_v3")  # every address set before the first run
    assert len(calls(gpu, "htod")) == 1  # uploaded once, never timed

    # each sample is one forward pass between two events on the stream it ran on, ms -> µs
    timing = out["timing"]
    timed = timed_runs(gpu, options.warmup)
    assert len(timed) == options.runs
    assert timing["samples_us"] == [r["ms"] * 1000.0 for r in timed]
    assert timing["warmup"] == options.warmup and timing["runs"] == options.runs
    streams = {r["stream"] for r in gpu.runs if r["kind"] != "execute_v2"}
    assert len(streams) == 1 and {h for _, h in calls(gpu, "record")} == streams
    env = timing["environment"]
    name, sms, cc = DEVICES[version]
    assert env["tensorrt"] == version and env["api"] == api
    assert (env["gpu"], env["sms"], env["compute_capability"]) == (name, sms, f"{cc[0]}.{cc[1]}")
    assert env["cuda_binding"] == ("pycuda" if version == V82 else "cuda-python")
    assert f"execute_async_{api}" in timing["timed"]

    if per_layer:
        layers = out["layers"]
        assert [row["name"] for row in layers] == blob["layers"] and len(layers) == 17
        for row in layers:  # the profiler's medians, ms -> µs
            assert row["time_us"] == pytest.approx(
                statistics.median(gpu.reported[row["name"]]) * 1000.0, rel=1e-12
            )
            assert row["extra"] == {"runs": options.runs}
        assert sum(row["share"] for row in layers) == pytest.approx(1.0)
        assert len([r for r in gpu.runs if r["profiled"]]) == options.runs
    else:
        assert "layers" not in out and not gpu.reported
    assert gpu.memory == {} and sorted(gpu.freed) == sorted(allocs)  # every buffer freed


def write_calibration(tmp_path: Path, items: int) -> tuple[Path, np.ndarray]:
    data = (np.arange(items * 3 * 32 * 32, dtype=np.float32).reshape(items, 3, 32, 32) % 97) / 97.0
    path = tmp_path / "calib.npy"
    np.save(path, data)
    return path, data


@pytest.mark.parametrize("per_layer", [False, True], ids=["timing", "per_layer"])
def test_int8_dynamic_batch_with_calibration(
    surface: tuple[str, types.ModuleType, FakeGpu],
    per_layer: bool,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    version, _, gpu = surface
    model = zoo_model_path("mobilenet_like_dynamic")
    calib, data = write_calibration(tmp_path, items=6)
    options = opts(tmp_path, dtype="int8", batch=2, calibration_data=str(calib))
    engine = tmp_path / "m.engine"
    facts = build_engine(str(model), options, str(engine))
    assert facts["shapes"] == {"input": [2, 3, 32, 32]}

    blob = engine_blob(engine)
    assert blob["flags"] == ["FP16", "INT8"]  # INT8, with FP16 for layers without INT8 kernels
    assert blob["profiles"] == [{"input": [[2, 3, 32, 32]] * 3}] and blob["calibration_profile"] == 0
    assert blob["calibration"] == "data"
    assert calls(gpu, "IBuilderConfig.int8_calibrator=") == [("EntropyCalibrator",)]
    # the calibrator handed out device pointers to the data, batch by batch, then None
    results = gpu.get_batch_results
    assert [type(r).__name__ for r in results] == ["list", "list", "list", "NoneType"]
    assert all(len(r) == 1 and isinstance(r[0], int) for r in results[:3])
    assert len(gpu.calibration_batches) == 3
    for i, batch in enumerate(gpu.calibration_batches):
        np.testing.assert_array_equal(batch["input"], data[2 * i : 2 * i + 2])
    table = engine.with_suffix(".calib").read_bytes()
    code = {V82: 8201, V85: 8502, V10: 10300}[version]
    assert table.startswith(f"TRT-{code}-EntropyCalibration2\n".encode())
    calib_ptrs = {r[0] for r in results[:3]}
    assert calib_ptrs <= set(gpu.freed) and not calib_ptrs & set(gpu.memory)  # freed after the build
    # 10.1 deprecated implicit calibration; it is still the only way to calibrate from data
    assert set(gpu.deprecated) <= {"IBuilderConfig.int8_calibrator", "IBuilderConfig.set_calibration_profile"}
    assert bool(gpu.deprecated) == (version == V10)

    start = len(gpu.runs)
    out = time_engine(str(engine), options, facts["shapes"], per_layer)
    if version == V82:
        assert calls(gpu, "IExecutionContext.set_binding_shape") == [(0, (2, 3, 32, 32))]
    else:
        assert calls(gpu, "IExecutionContext.set_input_shape") == [("input", (2, 3, 32, 32))]
    allocs = dict(calls(gpu, "alloc"))
    for run in gpu.runs[start:]:
        assert run["shapes"] == {"input": (2, 3, 32, 32), "logits": (2, 10)}
        assert allocs[run["addresses"]["logits"]] == 2 * 10 * 4 and run["inputs_written"]
    assert out["timing"]["samples_us"] == [r["ms"] * 1000.0 for r in timed_runs(gpu, options.warmup)]
    assert "one forward pass (int8)" in out["timing"]["timed"]
    assert ("layers" in out) == per_layer
    assert not gpu.trt_errors and gpu.memory == {}


def test_bench_cli_calibrates_int8_on_the_given_data(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`deployopt bench --backend tensorrt --dtype int8 --calibration-data F`: the data reaches the
    build (the calibrator hands out its batches), and the table lands beside the engine."""
    from cli_runner import run_cli

    trt, gpu = install(monkeypatch, V10, "bindings")
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)  # importable, for availability()
    monkeypatch.setattr(trt_backend, "run_isolated", lambda target, args, timeout: build_and_time(*args))
    monkeypatch.chdir(tmp_path)  # engines/ goes here
    calib, data = write_calibration(tmp_path, items=4)
    model = zoo_model_path("mobilenet_like_dynamic")
    args = [
        "bench",
        str(model),
        "--backend",
        "tensorrt",
        "--dtype",
        "int8",
        "--input-shape",
        "input:2x3x32x32",
    ]
    code, out, err = run_cli(
        monkeypatch, capsys, *args, "--calibration-data", str(calib), "--runs", "3", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["runs"] == 3
    assert len(gpu.calibration_batches) == 2
    for i, batch in enumerate(gpu.calibration_batches):
        np.testing.assert_array_equal(batch["input"], data[2 * i : 2 * i + 2])
    assert [p.suffix for p in sorted((tmp_path / "engines").iterdir())] == [".calib", ".engine"]
    # without data the same command is refused in one line, naming the flag that exists
    code, _, err = run_cli(monkeypatch, capsys, *args, "--runs", "3")
    assert code == 2 and err.count("\n") == 1
    assert "INT8 needs calibration data (--calibration-data)" in err
    code, _, err = run_cli(monkeypatch, capsys, *args, "--calibration-data", str(tmp_path / "none.npy"))
    assert code == 2 and err == f"error: {tmp_path / 'none.npy'}: no such file or folder\n"
    # a calibration table instead of data (trtexec's, the Jetson runner's): read, not calibrated on
    table = tmp_path / "trtexec.cache"
    table.write_bytes(TABLE)
    code, out, err = run_cli(
        monkeypatch, capsys, *args, "--calibration-data", str(table), "--runs", "3", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["runs"] == 3 and calls(gpu, "calibration: table read") == [(len(TABLE),)]
    assert len(gpu.calibration_batches) == 2 and table.read_bytes() == TABLE
    table.write_bytes(b"")
    code, _, err = run_cli(monkeypatch, capsys, *args, "--calibration-data", str(table), "--runs", "3")
    assert code == 2 and err.count("\n") == 1 and f"calibration table {table} is empty" in err


def test_int8_calibration_says_what_its_loader_left_out_once_a_session(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rows that do not fill a batch are left out of calibration, as verify and optimize say with a
    `notice:` line: the tensorrt backend said nothing (load_samples dropped the loader's notices).
    One `warning:` line, once a session however many engines it calibrates."""
    from cli_runner import run_cli

    trt, gpu = install(monkeypatch, V10, "bindings")
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)  # importable, for availability()
    monkeypatch.setattr(trt_backend, "run_isolated", lambda target, args, timeout: build_and_time(*args))
    monkeypatch.chdir(tmp_path)  # engines/ goes here
    calib, _ = write_calibration(tmp_path, items=5)
    model = zoo_model_path("mobilenet_like_dynamic")
    said = "INT8 calibration data: 5 rows of input 'input' do not fill batches of 2: the last 1 is left out"
    args = [
        "bench",
        str(model),
        "--backend",
        "tensorrt",
        "--dtype",
        "int8",
        "--input-shape",
        "input:2x3x32x32",
    ]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--calibration-data", str(calib), "--runs", "5")
    assert code == 0, err
    assert len(gpu.calibration_batches) == 2 and err.count(f"warning: {said}\n") == 1, err

    other = tmp_path / "other.onnx"
    other.write_bytes(model.read_bytes())  # another engine (its own name), the same data
    options = opts(tmp_path, dtype="int8", batch=2, calibration_data=str(calib))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with trt_backend.TensorRTBackend().open(options) as session:
            session.measure(model)
            session.measure(other)
    assert len(gpu.calibration_batches) == 6  # both built and calibrated in the session
    assert [str(w.message) for w in caught if issubclass(w.category, DeployoptWarning)] == [said]


def test_int8_calibration_buffers_are_in_the_inputs_own_type(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TensorRT reads a calibration buffer as the input's type: an fp16 input got float32 bytes (in
    a buffer twice the size), read as fp16 they were noise. The batches are cast to it."""
    _, gpu = install(monkeypatch, V85, "cudart")
    h = onnx.helper
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, [1, 3, 8, 8])
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8])
    graph = h.make_graph([h.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.FLOAT)], "half", [x], [y])
    model = tmp_path / "half.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(model))
    data = (np.arange(3 * 3 * 8 * 8, dtype=np.float32).reshape(3, 3, 8, 8) % 64) / 8.0  # exact in fp16
    np.save(tmp_path / "calib.npy", data)
    options = opts(tmp_path, dtype="int8", calibration_data=str(tmp_path / "calib.npy"))
    build_engine(str(model), options, str(tmp_path / "half.engine"))
    assert len(gpu.calibration_batches) == 3
    for i, batch in enumerate(gpu.calibration_batches):
        assert batch["x"].dtype == np.float16
        np.testing.assert_array_equal(batch["x"], data[i : i + 1].astype(np.float16))


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_bench_and_profile_calibrate_on_images_made_by_the_image_options(
    command: str,
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`bench/profile --calibration-data IMAGES --mean 0 --std 1` (a YOLO model's pixels × 1/255):
    the calibrator gets those tensors, not ImageNet-normalised ones, and the engine calibrated on
    them is another engine (its key, and the table beside it, differ from the defaults')."""
    from cli_runner import run_cli
    from PIL import Image

    trt, gpu = install(monkeypatch, V10, "bindings")
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)  # importable, for availability()
    monkeypatch.setattr(trt_backend, "run_isolated", lambda target, args, timeout: build_and_time(*args))
    monkeypatch.chdir(tmp_path)  # engines/ goes here
    cifar = Path(__file__).resolve().parents[1] / "calibration_data" / "cifar10"
    images = sorted(cifar.iterdir())
    model = zoo_model_path("mobilenet_like_dynamic")
    args = [
        command,
        str(model),
        "--backend",
        "tensorrt",
        "--dtype",
        "int8",
        "--input-shape",
        "input:2x3x32x32",
    ]
    args += ["--calibration-data", str(cifar), "--runs", "3", "--json"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--mean", "0", "--std", "1")
    assert code == 0, err
    first = np.stack(
        [np.asarray(Image.open(f).convert("RGB"), np.float32).transpose(2, 0, 1) for f in images[:2]]
    )
    np.testing.assert_allclose(gpu.calibration_batches[0]["input"], first / 255, atol=1e-6)
    assert len(list((tmp_path / "engines").glob("*.calib"))) == 1
    gpu.calibration_batches.clear()
    code, _, err = run_cli(monkeypatch, capsys, *args)  # the defaults: ImageNet mean/std, as before
    assert code == 0, err
    imagenet = (first / 255 - np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]) / np.array(
        [0.229, 0.224, 0.225], np.float32
    )[:, None, None]
    np.testing.assert_allclose(gpu.calibration_batches[0]["input"], imagenet, atol=1e-5)
    assert len(list((tmp_path / "engines").glob("*.calib"))) == 2  # another engine, another table


def test_the_engine_key_holds_image_preprocessing_other_than_the_defaults(tmp_path: Path) -> None:
    from deployopt.fidelity import ImagePreprocess

    calib, _ = write_calibration(tmp_path, items=2)
    data = b"onnx bytes"
    plain = opts(tmp_path, dtype="int8", calibration_data=str(calib))
    defaults = opts(
        tmp_path, dtype="int8", calibration_data=str(calib), calibration_preprocess=ImagePreprocess()
    )
    bgr = opts(
        tmp_path,
        dtype="int8",
        calibration_data=str(calib),
        calibration_preprocess=ImagePreprocess(channel_order="BGR"),
    )
    key = trt_backend.engine_key
    assert key(data, plain, V10, {}) == key(data, defaults, V10, {})  # engines cached before keep their keys
    assert key(data, bgr, V10, {}) != key(data, plain, V10, {})
    assert trt_backend.build_facts(data, bgr, V10, {})["calibration_preprocess"] == {"channel_order": "BGR"}
    fp16 = opts(tmp_path, calibration_preprocess=ImagePreprocess(channel_order="BGR"))
    assert "calibration_preprocess" not in trt_backend.build_facts(data, fp16, V10, {})  # nothing calibrated


def test_int8_reuses_the_calibration_table(
    surface: tuple[str, types.ModuleType, FakeGpu], zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    _, _, gpu = surface
    model = zoo_model_path("mobilenet_like")
    calib, _ = write_calibration(tmp_path, items=4)
    options = opts(tmp_path, dtype="int8", calibration_data=str(calib))
    build_engine(str(model), options, str(tmp_path / "a.engine"))
    assert len(gpu.calibration_batches) == 4 and engine_blob(tmp_path / "a.engine")["profiles"] == []
    options.extra["calib_cache"] = str(tmp_path / "a.calib")
    build_engine(str(model), options, str(tmp_path / "b.engine"))
    assert engine_blob(tmp_path / "b.engine")["calibration"] == "cache"
    assert len(gpu.get_batch_results) == 5  # no get_batch on the second build: the table was read
    assert calls(gpu, "calibration: table read") == [(len((tmp_path / "a.calib").read_bytes()),)]


def fail_upload(monkeypatch: pytest.MonkeyPatch, gpu: FakeGpu, number: int) -> Callable[[], None]:
    """Make the fake GPU refuse its `number`-th host-to-device copy (cudaErrorInvalidValue in
    cuda-python, LogicError in pycuda), as a real one does on a bad pointer or a lost context.
    Returns what puts the working copy back."""
    real, count = gpu.write, [0]

    def write(ptr: int, data: bytes) -> bool:
        count[0] += 1
        return count[0] != number and real(ptr, data)

    monkeypatch.setattr(gpu, "write", write)
    return lambda: monkeypatch.setattr(gpu, "write", real)


CALLBACK_CUDA_ERROR = r"^(CUDA error in cudaMemcpy: cudaErrorInvalidValue|INT8 calibration failed: LogicError: cuMemcpyHtoD failed: invalid argument)$"  # noqa: E501


def test_an_error_in_a_calibrator_callback_stops_the_build_in_one_line(
    surface: tuple[str, types.ModuleType, FakeGpu],
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """TensorRT calls the calibrator from C++ noexcept code (pyInt8.cpp): an exception escaping it
    aborted the process on 8.2, and from 8.4 on was printed and taken as the end of the data, so a
    CUDA error at the second batch built an INT8 engine calibrated on the first batch alone and
    wrote its table; a table that could not be written was dropped with the engine built anyway.
    Both now stop the build with their own one-line error, before an engine or a table is written."""
    _, _, gpu = surface
    model = str(zoo_model_path("mobilenet_like"))
    calib, _ = write_calibration(tmp_path, items=4)
    options = opts(tmp_path, dtype="int8", calibration_data=str(calib))
    engine = tmp_path / "m.engine"
    restore = fail_upload(monkeypatch, gpu, 2)
    with pytest.raises(BackendFailed, match=CALLBACK_CUDA_ERROR):
        build_engine(model, options, str(engine))
    assert len(gpu.calibration_batches) == 1 and gpu.get_batch_results[-1] is None  # ended there
    assert not engine.exists() and not engine.with_suffix(".calib").exists()
    assert gpu.callback_errors == [] and gpu.memory == {}  # nothing reached TensorRT; buffers freed

    restore()
    (tmp_path / "a_file").write_text("")
    options.extra["calib_cache"] = str(tmp_path / "a_file" / "m.calib")
    with pytest.raises(OutputError) as exc:
        build_engine(model, options, str(engine))
    assert "a_file" in str(exc.value) and "\n" not in str(exc.value)
    assert len(gpu.calibration_batches) == 5  # calibrated, then the table could not be written
    assert not engine.exists() and gpu.callback_errors == [] and gpu.memory == {}


def test_int8_without_data_or_qdq_is_refused_before_building(
    surface: tuple[str, types.ModuleType, FakeGpu], zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    _, _, gpu = surface
    with pytest.raises(DataError, match="INT8 needs calibration data"):
        build_engine(
            str(zoo_model_path("mobilenet_like")), opts(tmp_path, dtype="int8"), str(tmp_path / "m.engine")
        )
    assert calls(gpu, "Builder.build_serialized_network") == []


def test_timing_cache_is_read_and_written_back(
    surface: tuple[str, types.ModuleType, FakeGpu], zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    version, _, gpu = surface
    cache = tmp_path / "timing.cache"
    options = opts(tmp_path, extra={"timing_cache": str(cache)})
    for i in (1, 2):
        build_engine(str(zoo_model_path("mobilenet_like")), options, str(tmp_path / f"{i}.engine"))
        assert cache.read_bytes() == f"FAKE-TIMING-CACHE {version} builds={i}".encode()
    assert [args[1] for args in calls(gpu, "IBuilderConfig.create_timing_cache")] == [0, 1]


#: A timing cache blob the fake TensorRT reads as another device's (set_timing_cache refuses it).
FOREIGN_TIMING_CACHE = b"FAKE-TIMING-CACHE from another device"


def test_another_devices_timing_cache_is_a_warning_and_replaced(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """set_timing_cache refuses another device's cache (returns False; get_timing_cache is then
    None): the build goes on with a fresh cache, which is saved in its place, in the backend and
    in the runner. Its return value was ignored, and the runner's None.serialize() a traceback."""
    version = surface[0]
    cache = tmp_path / "timing.cache"
    cache.write_bytes(FOREIGN_TIMING_CACHE)
    options = opts(tmp_path, extra={"timing_cache": str(cache)})
    with pytest.warns(CacheWarning, match=f"TensorRT refused the timing cache {cache}"):
        build_engine(str(zoo_model_path("mobilenet_like")), options, str(tmp_path / "m.engine"))
    assert cache.read_bytes() == f"FAKE-TIMING-CACHE {version} builds=1".encode()
    cache.write_bytes(FOREIGN_TIMING_CACHE)
    cuda = ["--cuda", "pycuda"] if version == V82 else []
    args = [str(zoo_model_path("mobilenet_like")), "--runs", "2", "--timing-cache", str(cache), *cuda]
    run_runner(args, tmp_path, capsys)  # asserts exit 0
    assert cache.read_bytes() == f"FAKE-TIMING-CACHE {version} builds=1".encode()


def test_an_unwritable_timing_cache_is_a_warning_not_a_failed_build(
    surface: tuple[str, types.ModuleType, FakeGpu], zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """The cache only saves the next build's tactic timing: the engine is still built and written."""
    (tmp_path / "a_file").write_text("")
    options = opts(tmp_path, extra={"timing_cache": str(tmp_path / "a_file" / "timing.cache")})
    with pytest.warns(CacheWarning, match="the TensorRT timing cache is not saved"):
        build_engine(str(zoo_model_path("mobilenet_like")), options, str(tmp_path / "m.engine"))
    assert (tmp_path / "m.engine").stat().st_size > 0


def test_session_measures_then_profiles_from_the_cached_engine(
    surface: tuple[str, types.ModuleType, FakeGpu], zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    version, _, gpu = surface
    options = opts(tmp_path, batch=4)
    session = TensorRTBackend().open(options)  # availability() finds the fake modules
    timing = session.measure(zoo_model_path("mobilenet_like_dynamic"))
    assert timing.environment["engine_built_now"] is True and timing.runs == options.runs
    assert timing.samples_us == [r["ms"] * 1000.0 for r in timed_runs(gpu, options.warmup)]
    profile = session.profile(zoo_model_path("mobilenet_like_dynamic"))
    assert profile.environment["engine_built_now"] is False
    assert len(calls(gpu, "Builder.build_serialized_network")) == 1  # the second call reused the engine
    assert [layer.name for layer in profile.layers] == engine_blob(Path(profile.environment["engine"]))[
        "layers"
    ]
    assert profile.layers[0].time_us == pytest.approx(
        statistics.median(gpu.reported[profile.layers[0].name]) * 1e3
    )
    shape_calls = (
        "IExecutionContext.set_binding_shape" if version == V82 else "IExecutionContext.set_input_shape"
    )
    assert [args[-1] for args in calls(gpu, shape_calls)] == [(4, 3, 32, 32)] * 2


def test_the_timed_loop_records_clock_slowdown_as_torch_and_trtexec_do(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nvidia-smi (a stand-in printing the real H200 recording, then an edited copy that says SW
    thermal slowdown held the clock down 1.2 s) is read right after the warm-up and right after the
    last timed pass, before the per-layer passes: the environment records the slowdown and the busy
    SM clock, as the torch backend's does. The fake CUDA bindings give no PCI ids, so it reads the
    machine's only GPU. The tensorrt backend recorded nothing."""
    from nvidia_smi_fake import h200_readings, install_fake_nvidia_smi, throttled_after

    from deployopt import clocks

    _, _, gpu = surface
    options = opts(tmp_path)
    engine = tmp_path / "m.engine"
    facts = build_engine(str(zoo_model_path("mobilenet_like")), options, str(engine))
    before, after = h200_readings()
    args = install_fake_nvidia_smi(monkeypatch, tmp_path, [before, throttled_after()])
    seen: list[int] = []

    def read_clocks(which: object = 0, timeout_s: float = 10.0) -> object:
        seen.append(len([r for r in gpu.runs if not r["profiled"] and r["kind"] != "execute_v2"]))
        return clocks.read_clocks(which, timeout_s)

    monkeypatch.setattr(trt_backend, "read_clocks", read_clocks, raising=False)
    env = time_engine(str(engine), options, facts["shapes"], per_layer=True)["timing"]["environment"]
    assert seen == [options.warmup, options.warmup + options.runs]
    assert args.read_text().splitlines() == ["-q -d CLOCK,PERFORMANCE"] * 2
    assert env["clock_slowdown_us"] == {"sw_thermal_slowdown": 1_200_000, "hw_power_brake_slowdown": 5000}
    assert env["clocks"] == {
        "sm_clock_mhz": 1410.0,
        "sm_clock_read": "right after the timed loop",
        "max_sm_clock_mhz": 1980.0,
    }
    (tmp_path / "fake-smi" / "count").unlink()  # the real recording on both sides: checked, none
    (tmp_path / "fake-smi" / "reading1.txt").write_text(after)
    env = time_engine(str(engine), options, facts["shapes"], per_layer=False)["timing"]["environment"]
    assert env["clock_slowdown_us"] == {}
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no nvidia-smi: not checked, not a failure
    env = time_engine(str(engine), options, facts["shapes"], per_layer=False)["timing"]["environment"]
    assert "clock_slowdown_us" not in env and "clocks" not in env


def test_bench_warns_when_the_tensorrt_backend_timed_a_throttled_gpu(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """End to end, `bench --backend tensorrt -o`: the result records the slowdown, bench warns, and
    compare flags that side (an edited copy of the real H200 recording: nothing throttled there)."""
    from cli_runner import run_cli
    from nvidia_smi_fake import h200_readings, install_fake_nvidia_smi, throttled_after

    trt, _ = install(monkeypatch, V10, "bindings")
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)  # importable, for availability()
    monkeypatch.setattr(trt_backend, "run_isolated", lambda target, args, timeout: build_and_time(*args))
    monkeypatch.chdir(tmp_path)  # engines/ goes here
    before, _ = h200_readings()
    install_fake_nvidia_smi(monkeypatch, tmp_path, [before, throttled_after()])
    out = tmp_path / "r.json"
    args = ["bench", str(zoo_model_path("mobilenet_like")), "--backend", "tensorrt", "--runs", "5"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "-o", str(out))
    held = "(SW thermal slowdown 1.2 s, HW power brake 5 ms)"
    assert code == 0 and err.startswith(f"warning: the GPU's clock was held down while this was timed {held}")
    assert json.loads(out.read_text())["environment"]["clock_slowdown_us"]["sw_thermal_slowdown"] == 1_200_000
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(out), str(out), "--strict")
    assert code == 1 and "baseline: GPU clock held down by SW thermal slowdown 1.2 s" in err


def test_the_cuda_bindings_name_the_gpu_as_nvidia_smi_does() -> None:
    """nvidia-smi -i takes the PCI bus id of the GPU CUDA times on (CUDA's device 0 need not be
    nvidia-smi's 0): cuda-python's properties and pycuda's attributes give it, else None."""
    prop = types.SimpleNamespace(pciDomainID=0, pciBusID=0x1A, pciDeviceID=0)
    binding = trt_backend.CudaPython.__new__(trt_backend.CudaPython)
    binding.rt = types.SimpleNamespace(cudaGetDeviceProperties=lambda device: (0, prop))
    assert trt_backend.smi_gpu(binding) == "00000000:1A:00.0"
    binding.rt = types.SimpleNamespace(cudaGetDeviceProperties=lambda device: (0, types.SimpleNamespace()))
    assert trt_backend.smi_gpu(binding) is None
    attrs = {"PCI_DOMAIN_ID": 1, "PCI_BUS_ID": 6, "PCI_DEVICE_ID": 0}
    device = types.SimpleNamespace(get_attribute=lambda a: attrs[a])
    pycuda = trt_backend.PyCuda.__new__(trt_backend.PyCuda)
    pycuda.cuda = types.SimpleNamespace(
        Context=types.SimpleNamespace(get_device=lambda: device),
        device_attribute=types.SimpleNamespace(**{k: k for k in attrs}),
    )
    assert trt_backend.smi_gpu(pycuda) == "00000001:06:00.0"
    assert trt_backend.smi_gpu(object()) is None  # a binding that cannot say


def backend_builds(model: Path, options: MeasureOptions, gpu: FakeGpu) -> tuple[bool, dict[str, Any]]:
    """One build_and_time call: (did TensorRT build an engine, the timing's environment)."""
    before = len(calls(gpu, "Builder.build_serialized_network"))
    env = build_and_time(str(model), options, False)["timing"]["environment"]
    built = len(calls(gpu, "Builder.build_serialized_network")) - before
    assert built in (0, 1) and env["engine_built_now"] is bool(built)
    # the build's wall time where one was built, as the runner records it (optimize's report sums them)
    assert ("engine_build_s" in env) is bool(built)
    assert not built or (isinstance(env["engine_build_s"], float) and env["engine_build_s"] >= 0)
    return bool(built), env


def test_backend_reuses_an_engine_only_for_the_same_inputs(
    monkeypatch: pytest.MonkeyPatch, zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """The backend's engine cache in workdir: a second identical call builds nothing; a changed model
    at the same path or another workspace builds again; the timing cache and rebuild do not enter
    the key (rebuild still builds)."""
    _, gpu = install(monkeypatch, V85, "cudart")
    model = tmp_path / "model.onnx"
    model.write_bytes(zoo_model_path("mobilenet_like").read_bytes())
    options = opts(tmp_path)

    built, first = backend_builds(model, options, gpu)
    assert built and Path(first["engine"]).name == f"model-fp16-{first['engine_key'][:16]}.engine"
    built, second = backend_builds(model, options, gpu)
    assert not built and second["engine"] == first["engine"]
    assert second["engine_key"] == first["engine_key"]

    options.extra["workspace_mib"] = 128
    built, env = backend_builds(model, options, gpu)
    assert built and engine_blob(Path(env["engine"]))["workspace"] == 128 << 20
    assert not backend_builds(model, options, gpu)[0]

    layers = engine_blob(Path(env["engine"]))["layers"]
    model.write_bytes(zoo_model_path("resnet_projection").read_bytes())  # same path, another model
    built, env = backend_builds(model, options, gpu)
    assert built and engine_blob(Path(env["engine"]))["layers"] != layers

    options.extra["timing_cache"] = str(tmp_path / "timing.cache")  # speeds builds up, same engine
    assert not backend_builds(model, options, gpu)[0]
    options.extra["rebuild"] = True
    assert backend_builds(model, options, gpu)[0]


def test_backend_int8_engine_follows_the_calibration_contents(
    monkeypatch: pytest.MonkeyPatch, zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """INT8 with a folder of .npy data and extra["calib_cache"]: the table the first build writes
    does not make the next identical call rebuild; new contents in the table or in the data
    (same file names) do, and so does another workspace."""
    _, gpu = install(monkeypatch, V10, "bindings")
    model = zoo_model_path("mobilenet_like")
    _, data = write_calibration(tmp_path, items=4)
    folder = tmp_path / "calib"
    folder.mkdir()
    np.save(folder / "a.npy", data[:2])
    np.save(folder / "b.npy", data[2:])
    table = tmp_path / "model.calib"
    options = opts(tmp_path, dtype="int8", calibration_data=str(folder), extra={"calib_cache": str(table)})

    built, env = backend_builds(model, options, gpu)
    assert built and engine_blob(Path(env["engine"]))["calibration"] == "data"
    assert table.read_bytes().startswith(b"TRT-") and len(gpu.calibration_batches) == 4
    assert sorted(p.name for p in (tmp_path / "engines").iterdir()) == [Path(env["engine"]).name]
    built, again = backend_builds(model, options, gpu)  # the table it wrote is now there
    assert not built and again["engine"] == env["engine"]

    table.write_bytes(b"TRT-100300-EntropyCalibration2\ninput: 3c000000\n")  # a new table, same name
    built, env = backend_builds(model, options, gpu)
    assert built and engine_blob(Path(env["engine"]))["calibration"] == "cache"
    assert calls(gpu, "calibration: table read")[-1] == (len(table.read_bytes()),)
    assert not backend_builds(model, options, gpu)[0]

    np.save(folder / "b.npy", data[2:][::-1])  # new data, same file names
    assert backend_builds(model, options, gpu)[0]
    table.unlink()  # to calibrate on the new data, the old table goes
    built, env = backend_builds(model, options, gpu)
    assert built and engine_blob(Path(env["engine"]))["calibration"] == "data"
    assert len(gpu.calibration_batches) == 8
    np.testing.assert_array_equal(gpu.calibration_batches[-1]["input"], data[2:3])
    assert not backend_builds(model, options, gpu)[0]
    (folder / ".notes").write_text("not a sample")  # hidden: the loader skips it, so does the key
    assert not backend_builds(model, options, gpu)[0]

    options.extra["workspace_mib"] = 128
    assert backend_builds(model, options, gpu)[0]
    assert not backend_builds(model, options, gpu)[0]


def test_a_session_hashes_its_calibration_folder_once_per_state(
    monkeypatch: pytest.MonkeyPatch, zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """optimize builds one engine per candidate with the same calibration folder: its files are
    hashed (for the engine key) by the first build only, in the caller's process, and the spawned
    worker starts from those digests instead of reading the folder again; a changed file is hashed
    again, alone, and changes the key."""
    trt, gpu = install(monkeypatch, V10, "bindings")
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)  # importable, for availability()
    read = counting_hashes(monkeypatch)
    later = trt_backend.time.time_ns() + 10**10  # the files settled long ago
    monkeypatch.setattr(trt_backend, "_now_ns", lambda: later, raising=False)
    workers: list[tuple[Any, ...]] = []

    def spawned(target: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        """What run_isolated does, in this process: a worker starts with an empty memo."""
        assert target == "deployopt.backends.tensorrt.build_and_time"
        workers.append(args)
        parent = trt_backend._sha_memo
        monkeypatch.setattr(trt_backend, "_sha_memo", {})
        try:
            return build_and_time(*args)
        finally:
            monkeypatch.setattr(trt_backend, "_sha_memo", parent)

    monkeypatch.setattr(trt_backend, "run_isolated", spawned)
    _, data = write_calibration(tmp_path, items=4)
    folder = tmp_path / "calib"
    folder.mkdir()
    names = [f"{i}.npy" for i in range(4)]
    for name, item in zip(names, data):
        np.save(folder / name, item[None])
    options = opts(tmp_path, dtype="int8", calibration_data=str(folder), extra={"isolate": True})
    models = [zoo_model_path("mobilenet_like"), zoo_model_path("resnet_projection")]

    with TensorRTBackend().open(options) as session:
        keys = [session.measure(m).environment["engine_key"] for m in models]
        assert sorted(read) == names and len(workers) == 2
        assert len(calls(gpu, "Builder.build_serialized_network")) == 2
        read.clear()
        assert session.measure(models[0]).environment["engine_key"] == keys[0] and read == []
        np.save(folder / "2.npy", data[2][None] + 1)  # new contents, same name and size
        os.utime(folder / "2.npy", ns=(later - 5 * 10**9, later - 5 * 10**9))  # settled
        assert session.measure(models[0]).environment["engine_key"] != keys[0]
        assert read == ["2.npy"]
    options.extra["isolate"] = False  # in this process, the same memo
    read.clear()
    with TensorRTBackend().open(options) as session:
        session.measure(models[1])
        assert read == [] and len(workers) == 4  # no worker: isolate is off


TABLE = b"TRT-8502-EntropyCalibration2\ninput: 3c010a14\n"


def test_int8_from_a_calibration_table_alone(
    surface: tuple[str, types.ModuleType, FakeGpu],
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """calibration_data naming a table (an earlier run's, trtexec's, the Jetson runner's) and no
    data: the build reads the table and calibrates on nothing, the table stays as it was and no
    .calib is written beside the engine; the same call again reuses the engine (the sample count
    does not matter), a changed table builds again."""
    _, _, gpu = surface
    made: list[Any] = []
    real = tensorrt_calibrator.make_entropy_calibrator

    def recording(trt: Any, core: Any) -> Any:
        made.append(real(trt, core))
        return made[-1]

    monkeypatch.setattr(tensorrt_calibrator, "make_entropy_calibrator", recording)
    model = zoo_model_path("mobilenet_like_dynamic")
    table = tmp_path / "model.calib"
    table.write_bytes(TABLE)
    options = opts(tmp_path, dtype="int8", batch=2, calibration_data=str(table))

    built, env = backend_builds(model, options, gpu)
    blob = engine_blob(Path(env["engine"]))
    assert built and blob["flags"] == ["FP16", "INT8"] and blob["calibration"] == "cache"
    assert blob["profiles"] == [{"input": [[2, 3, 32, 32]] * 3}] and blob["calibration_profile"] == 0
    assert calls(gpu, "IBuilderConfig.int8_calibrator=") == [("EntropyCalibrator",)]
    assert calls(gpu, "calibration: table read") == [(len(TABLE),)]
    assert gpu.get_batch_results == [] and gpu.calibration_batches == []
    [calibrator] = made
    assert calibrator.read_calibration_cache() == TABLE and calibrator.get_batch(["input"]) is None
    calibrator.write_calibration_cache(memoryview(b"TRT-8502-EntropyCalibration2\n"))
    assert table.read_bytes() == TABLE  # the user's table is never written over
    assert sorted(p.name for p in (tmp_path / "engines").iterdir()) == [Path(env["engine"]).name]
    assert not gpu.trt_errors

    options.extra["calibration_count"] = 3  # nothing is sampled: the same engine
    built, again = backend_builds(model, options, gpu)
    assert not built and again["engine"] == env["engine"]
    table.write_bytes(TABLE.replace(b"3c010a14", b"3c000000"))  # a new table, same name
    built, changed = backend_builds(model, options, gpu)
    assert built and changed["engine"] != env["engine"]
    assert engine_blob(Path(changed["engine"]))["calibration"] == "cache"
    assert not backend_builds(model, options, gpu)[0]


def test_int8_from_a_calib_cache_alone(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """extra["calib_cache"] naming a table, and no calibration_data (as trtexec takes it, and the
    runner's --calib-cache alone): the calibrator returns the table's bytes and no batch, so
    TensorRT builds INT8 from it without calibrating; the table is left as it was; the same call
    reuses the engine, a changed table builds again; a missing one is refused before building."""
    _, _, gpu = surface
    model = zoo_model_path("mobilenet_like_dynamic")
    table = tmp_path / "model.calib"
    table.write_bytes(TABLE)
    options = opts(tmp_path, dtype="int8", batch=2, extra={"calib_cache": str(table)})

    built, env = backend_builds(model, options, gpu)
    blob = engine_blob(Path(env["engine"]))
    assert built and blob["flags"] == ["FP16", "INT8"] and blob["calibration"] == "cache"
    assert blob["calibration_profile"] == 0
    assert calls(gpu, "IBuilderConfig.int8_calibrator=") == [("EntropyCalibrator",)]
    assert calls(gpu, "calibration: table read") == [(len(TABLE),)]
    assert gpu.get_batch_results == [] and gpu.calibration_batches == []
    assert table.read_bytes() == TABLE
    assert sorted(p.name for p in (tmp_path / "engines").iterdir()) == [Path(env["engine"]).name]
    assert not gpu.trt_errors

    built, again = backend_builds(model, options, gpu)
    assert not built and again["engine"] == env["engine"]
    table.write_bytes(TABLE.replace(b"3c010a14", b"3c000000"))  # a new table, same name
    built, changed = backend_builds(model, options, gpu)
    assert built and changed["engine"] != env["engine"]
    assert calls(gpu, "calibration: table read")[-1] == (len(table.read_bytes()),)
    assert not backend_builds(model, options, gpu)[0]

    options.extra["calib_cache"] = str(tmp_path / "none.calib")
    builds = len(calls(gpu, "Builder.build_serialized_network"))
    with pytest.raises(DataError, match=r"^calibration table .*none\.calib: cannot read it \(No such file"):
        build_and_time(str(model), options, False)
    assert len(calls(gpu, "Builder.build_serialized_network")) == builds


def test_int8_from_an_empty_or_missing_table_is_refused_before_building(
    surface: tuple[str, types.ModuleType, FakeGpu], zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    _, _, gpu = surface
    table = tmp_path / "model.calib"
    table.write_bytes(b"")
    model, engine = str(zoo_model_path("mobilenet_like")), str(tmp_path / "m.engine")
    with pytest.raises(DataError) as info:
        build_engine(model, opts(tmp_path, dtype="int8", calibration_data=str(table)), engine)
    assert str(info.value) == (
        f"calibration table {table} is empty: give the data to calibrate on (a folder of images, .npy or "
        ".npz) instead"
    )
    missing = tmp_path / "none.cache"
    with pytest.raises(DataError, match=r"^calibration table .*none\.cache: cannot read it \(No such file"):
        build_engine(model, opts(tmp_path, dtype="int8", calibration_data=str(missing)), engine)
    assert calls(gpu, "Builder.build_serialized_network") == [] and not (tmp_path / "m.engine").exists()


# ================================================================================================
# failures are one line, and the fakes catch a wrong dispatch


def test_unparsable_model_is_a_model_error(
    surface: tuple[str, types.ModuleType, FakeGpu], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf at all")
    with pytest.raises(ModelError, match=r"TensorRT cannot parse bad.onnx: In node -1 .*failed to parse"):
        build_engine(str(bad), opts(tmp_path), str(tmp_path / "m.engine"))


def test_engine_of_another_version_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    install(monkeypatch, V85, "cudart")
    build_engine(str(zoo_model_path("mobilenet_like")), opts(tmp_path), str(tmp_path / "m.engine"))
    install(monkeypatch, V10, "bindings")
    with pytest.raises(BackendFailed, match=r"TensorRT 10.3.0.26 could not deserialize .*another version"):
        time_engine(str(tmp_path / "m.engine"), opts(tmp_path), {}, False)


@pytest.mark.parametrize(("version", "cuda", "wrong"), [(V10, "bindings", "v2"), (V82, "pycuda", "v3")])
def test_a_wrong_api_dispatch_fails_on_the_fakes(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    version: str,
    cuda: str,
    wrong: str,
) -> None:
    install(monkeypatch, version, cuda)
    engine = tmp_path / "m.engine"
    build_engine(str(zoo_model_path("mobilenet_like")), opts(tmp_path), str(engine))
    monkeypatch.setattr(trt_backend, "api_for_version", lambda _v: wrong)
    missing = "num_bindings" if wrong == "v2" else "num_io_tensors"
    with pytest.raises(AttributeError, match=rf"'tensorrt.ICudaEngine' object has no attribute '{missing}'"):
        time_engine(str(engine), opts(tmp_path), {}, False)


# ================================================================================================
# jetson/runner.py on each surface (its own CUDA adapters, Python 3.6 code)


def load_runner() -> types.ModuleType:
    return load_script(RUNNER, "jetson_runner_fake_api")


def run_runner(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    out = tmp_path / "result.json"
    rc = load_runner().main([*args, "--engine-dir", str(tmp_path / "engines"), "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    return json.loads(out.read_text())


def test_runner_fp16_with_per_layer_times(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    version, _, gpu = surface
    cuda = ["--cuda", "pycuda"] if version == V82 else []
    args = [str(zoo_model_path("mobilenet_like")), "--runs", "4", "--warmup", "2", "--workspace-mib", "32"]
    result = run_runner([*args, "--per-layer", *cuda], tmp_path, capsys)
    engine = Path(result["environment"]["engine"])
    blob = engine_blob(engine)
    assert blob["workspace"] == 32 << 20 and blob["flags"] == ["FP16"]
    assert blob["profiling_verbosity"] == "DETAILED"
    assert result["samples_us"] == [r["ms"] * 1000.0 for r in timed_runs(gpu, 2)] and result["runs"] == 4
    api = "v2" if version == V82 else "v3"
    assert result["environment"]["api"] == api and result["environment"]["tensorrt"] == version
    assert result["environment"]["sms"] == DEVICES[version][1]
    assert [row["name"] for row in result["layers"]] == blob["layers"]
    for row in result["layers"]:
        assert row["time_us"] == pytest.approx(
            statistics.median(gpu.reported[row["name"]]) * 1000.0, rel=1e-12
        )
        assert row["runs"] == 4
    assert not gpu.trt_errors and gpu.deprecated == [] and gpu.memory == {}
    assert trt_backend.load_runner_result(tmp_path / "result.json").median_us == result["median_us"]


def test_runner_reads_the_board_right_before_and_right_after_the_timed_loop(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The GPU clock, temperatures and over-current counters are read after the warm-up, before the
    first timed pass, and again right after the last one (before the per-layer passes), and the
    result's environment records both: here a fake Orin tree whose oc2 counter grows and whose
    clock drops while the loop runs. The host's rule then flags it (deployopt.clocks)."""
    import jetson_sysfs_fake as sysfs_fake

    from deployopt.clocks import held_down_phrase

    version, _, gpu = surface
    runner = load_runner()
    board = sysfs_fake.orin(tmp_path / "board")
    monkeypatch.setattr(runner, "SYSFS", str(board / "sys"))
    monkeypatch.setattr(runner, "PROCFS", str(board / "proc"))
    read = runner.board_state
    seen: list[int] = []

    def board_state(sysfs: str | None = None, procfs: str | None = None) -> dict[str, Any]:
        seen.append(len([r for r in gpu.runs if not r["profiled"]]))  # passes run so far
        state = read(sysfs, procfs)
        if len(seen) == 1:  # the board throttles while the loop runs
            sysfs_fake.orin(tmp_path / "board", cur_hz=1_032_750_000, oc_events=(0, 2, 0))
        return state

    monkeypatch.setattr(runner, "board_state", board_state)
    cuda = ["--cuda", "pycuda"] if version == V82 else []
    args = [str(zoo_model_path("mobilenet_like")), "--runs", "4", "--warmup", "2", "--per-layer", *cuda]
    rc = runner.main([*args, "--engine-dir", str(tmp_path / "engines"), "--out", str(tmp_path / "r.json")])
    assert rc == 0, capsys.readouterr().err
    assert seen == [2, 6]  # after the 2 warm-up passes; after the 4 timed ones, before per-layer
    env = json.loads((tmp_path / "r.json").read_text())["environment"]
    assert env["gpu_clock_during_run"]["before"]["cur_hz"] == 1_300_500_000
    assert env["gpu_clock_during_run"]["after"]["cur_hz"] == 1_032_750_000
    assert env["oc_events"] == {"oc1": 0, "oc2": 2, "oc3": 0}
    assert set(env["temperatures_c"]) == {"before", "after"}
    assert held_down_phrase(trt_backend.load_runner_result(tmp_path / "r.json").environment) == (
        "over-current throttling: 2 oc2 event(s), a cap below the locked clock: 1032.75 of 1300.5 MHz "
        "right after the timed loop"
    )


def test_runner_stamps_its_result_right_after_the_timed_loop(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The time a result records ("measured_at") is read once, after the last timed pass and before
    the per-layer passes, and the host reads it back (compare warns when a current result is not
    newer than its baseline). The runner wrote no time: a result left from last week read as new."""
    version, _, gpu = surface
    runner = load_runner()
    seen: list[int] = []

    def measured_now() -> str:
        seen.append(len([r for r in gpu.runs if not r["profiled"]]))
        return "2026-12-02T09:30:00Z"

    monkeypatch.setattr(runner, "measured_now", measured_now, raising=False)
    cuda = ["--cuda", "pycuda"] if version == V82 else []
    args = [str(zoo_model_path("mobilenet_like")), "--runs", "4", "--warmup", "2", "--per-layer", *cuda]
    rc = runner.main([*args, "--engine-dir", str(tmp_path / "engines"), "--out", str(tmp_path / "r.json")])
    assert rc == 0, capsys.readouterr().err
    assert seen == [6]
    assert json.loads((tmp_path / "r.json").read_text())["measured_at"] == "2026-12-02T09:30:00Z"
    assert trt_backend.load_runner_result(tmp_path / "r.json").measured_at == "2026-12-02T09:30:00Z"


def test_runner_int8_dynamic_batch_with_calibration(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    version, _, gpu = surface
    calib, data = write_calibration(tmp_path, items=6)
    table = tmp_path / "model.calib"
    args = [str(zoo_model_path("mobilenet_like_dynamic")), "--dtype", "int8", "--shapes", "input:2x3x32x32"]
    args += ["--calib-npy", str(calib), "--calib-cache", str(table), "--runs", "3", "--warmup", "1"]
    result = run_runner([*args, *(["--cuda", "pycuda"] if version == V82 else [])], tmp_path, capsys)
    blob = engine_blob(Path(result["environment"]["engine"]))
    assert blob["flags"] == ["FP16", "INT8"] and blob["calibration"] == "data"
    assert blob["profiles"] == [{"input": [[2, 3, 32, 32]] * 3}] and blob["calibration_profile"] == 0
    assert [type(r).__name__ for r in gpu.get_batch_results] == ["list"] * 3 + ["NoneType"]
    assert len(gpu.calibration_batches) == 3
    for i, batch in enumerate(gpu.calibration_batches):
        np.testing.assert_array_equal(batch["input"], data[2 * i : 2 * i + 2])
    assert table.read_bytes().startswith(b"TRT-")
    assert result["samples_us"] == [r["ms"] * 1000.0 for r in timed_runs(gpu, 1)]
    assert all(r["shapes"]["logits"] == (2, 10) for r in gpu.runs)
    assert not gpu.trt_errors
    assert all(ptr in gpu.freed for r in gpu.runs for ptr in r["addresses"].values())
    assert gpu.memory == {}  # the calibrator's batch buffer too, once the engine is built


def test_runner_an_error_in_a_calibrator_callback_is_one_line(
    surface: tuple[str, types.ModuleType, FakeGpu],
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The runner's calibrator, like the backend's: a CUDA error while uploading a batch or a
    --calib-cache that cannot be written ended in std::terminate on 8.2 (a core dump on the board)
    and, from 8.4 on, in an engine calibrated on part of the data or without its table, exit 0.
    Now: one line, exit 2, no engine written."""
    version, _, gpu = surface
    calib, _ = write_calibration(tmp_path, items=4)
    args = [str(zoo_model_path("mobilenet_like")), "--dtype", "int8", "--calib-npy", str(calib)]
    args += ["--runs", "2", "--engine-dir", str(tmp_path / "engines")]
    args += ["--cuda", "pycuda"] if version == V82 else []
    restore = fail_upload(monkeypatch, gpu, 2)
    assert load_runner().main(args) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(CALLBACK_CUDA_ERROR.replace("^", "^error: ").replace("$", "\n$"), err), err
    assert len(gpu.calibration_batches) == 1 and not (tmp_path / "engines").exists()
    assert gpu.callback_errors == [] and gpu.memory == {}

    restore()
    (tmp_path / "a_file").write_text("")
    table = tmp_path / "a_file" / "model.calib"
    assert load_runner().main([*args, "--calib-cache", str(table)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: cannot write --calib-cache {table}: Not a directory\n"
    assert len(gpu.calibration_batches) == 5 and not (tmp_path / "engines").exists()
    assert gpu.callback_errors == [] and gpu.memory == {}


def test_runner_a_shape_the_engine_refuses_is_named(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A serialized engine timed with --shapes outside the profile it was built with: TensorRT's
    set_input_shape / set_binding_shape return False, which the runner ignored; the outputs kept
    their -1 batch and it blamed "a data-dependent shape (an NMS-like op)". Now the --shapes entry
    is named, before anything is allocated."""
    version, _, gpu = surface
    engine = tmp_path / "m.engine"
    cuda = ["--cuda", "pycuda"] if version == V82 else []
    args = [str(zoo_model_path("mobilenet_like_dynamic")), "--save-engine", str(engine), *cuda]
    run_runner([*args, "--shapes", "input:2x3x32x32", "--runs", "2", "--warmup", "1"], tmp_path, capsys)
    allocs = len(calls(gpu, "alloc"))
    rc = load_runner().main([str(engine), "--shapes", "input:4x3x32x32", "--runs", "2", *cuda])
    assert rc == 2 and capsys.readouterr().err == (
        "error: --shapes input:4x3x32x32: the engine does not take this shape (outside the optimization "
        "profile it was built with; TensorRT's error above says which dimension)\n"
    )
    assert gpu.trt_errors == ["input: shape [4, 3, 32, 32] is outside the optimization profile"]
    assert len(calls(gpu, "alloc")) == allocs and gpu.memory == {}


def test_runner_shapes_must_name_an_input_at_a_shape_it_takes(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--shapes on a static input, or naming no input, was ignored: the build and the timing used
    the model's own shape while the result and the engine's key recorded the --shapes entry (a
    rebuild for nothing). Now it is one line before the build, for a .onnx and for a saved engine;
    the static input's own shape is still accepted."""
    version, _, gpu = surface
    cuda = ["--cuda", "pycuda"] if version == V82 else []
    model = str(zoo_model_path("mobilenet_like"))
    result = run_runner(
        [model, "--shapes", "input:1x3x32x32", "--runs", "2", "--warmup", "1", *cuda], tmp_path, capsys
    )
    engine = Path(result["environment"]["engine"])
    dirs = ["--engine-dir", str(tmp_path / "engines")]
    for target in (model, str(engine)):
        rc = load_runner().main([target, "--shapes", "input:4x3x32x32", "--runs", "2", *dirs, *cuda])
        assert rc == 2 and capsys.readouterr().err == (
            "error: --shapes input:4x3x32x32: input 'input' is static, 1x3x32x32 (drop the entry, or export "
            "the model with that dimension dynamic)\n"
        )
        rc = load_runner().main([target, "--shapes", "images:1x3x32x32", "--runs", "2", *dirs, *cuda])
        assert rc == 2 and capsys.readouterr().err == (
            "error: --shapes images:1x3x32x32: the model has no input 'images' (its inputs: input)\n"
        )
    assert len(gpu.runs) == 3  # warm-up and timed runs of the first call only


def int64_weights_model(tmp_path: Path) -> Path:
    """What a PyTorch export looks like to TensorRT 8.x's parser: a Reshape whose target shape is an
    INT64 initializer (it warns that it casts such weights down to INT32)."""
    h = onnx.helper
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 192])
    shape = h.make_tensor("shape", onnx.TensorProto.INT64, [2], [1, -1])
    graph = h.make_graph([h.make_node("Reshape", ["x", "shape"], ["y"])], "reshape", [x], [y], [shape])
    path = tmp_path / "reshape.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    return path


def test_tensorrt_messages_go_to_stderr_not_into_the_json(
    surface: tuple[str, types.ModuleType, FakeGpu], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """trt.Logger prints TensorRT's messages on stdout (pyCore.cpp's DefaultLogger writes to
    std::cout, 8.2 to 10.x), so the parser's INT64 warning came before the JSON the runner prints
    there (and into the worker's, hence `deployopt bench --json`'s, stdout). Both log through an
    ILogger subclass to stderr now: stdout is the JSON alone."""
    version, _, _ = surface
    model = int64_weights_model(tmp_path)
    int64 = "onnx2trt_utils.cpp:366: Your ONNX model has been generated with INT64 weights"
    build_engine(str(model), opts(tmp_path), str(tmp_path / "m.engine"))
    out, err = capsys.readouterr()
    assert out == "" and (f"[TensorRT] WARNING: {int64}" in err) == (version != V10)

    cuda = ["--cuda", "pycuda"] if version == V82 else []
    rc = load_runner().main([str(model), "--runs", "2", *cuda, "--engine-dir", str(tmp_path / "engines")])
    out, err = capsys.readouterr()
    assert rc == 0 and json.loads(out)["runs"] == 2
    assert (f"[TensorRT] WARNING: {int64}" in err) == (version != V10)


def runner_builds(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], gpu: FakeGpu
) -> tuple[bool, dict[str, Any], str]:
    """Run the runner once: (did TensorRT build an engine, the result JSON, its stderr)."""
    before = len(calls(gpu, "Builder.build_serialized_network"))
    out = tmp_path / "result.json"
    rc = load_runner().main([*args, "--engine-dir", str(tmp_path / "engines"), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    built = len(calls(gpu, "Builder.build_serialized_network")) - before
    assert built in (0, 1)
    result = json.loads(out.read_text())
    assert result["environment"]["engine_built_now"] is bool(built)
    return bool(built), result, err


def test_runner_reuses_an_engine_only_for_the_same_inputs(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--save-engine FILE: a second identical run times FILE without a build (and says so); a
    changed model at the same path, another dtype or workspace, a missing FILE.key, or --rebuild
    build again. The cached names in --engine-dir follow the same key."""
    _, gpu = install(monkeypatch, V85, "cudart")
    model = tmp_path / "model.onnx"
    model.write_bytes(zoo_model_path("mobilenet_like").read_bytes())
    engine = tmp_path / "out" / "model.engine"
    args = [str(model), "--runs", "5", "--warmup", "1", "--save-engine", str(engine)]

    built, first, err = runner_builds(args, tmp_path, capsys, gpu)
    assert built and err == f"built engine {engine} in {first['environment']['engine_build_s']:.1f} s\n"
    sidecar = json.loads((tmp_path / "out" / "model.engine.key").read_text())
    assert sidecar["key"] == first["environment"]["engine_key"] and sidecar["dtype"] == "fp16"
    built, second, err = runner_builds(args, tmp_path, capsys, gpu)
    assert not built and second["environment"]["engine"] == str(engine)
    assert err.startswith(f"reusing engine {engine}: built earlier from the same model")
    assert "engine_build_s" not in second["environment"]
    assert second["environment"]["engine_key"] == first["environment"]["engine_key"]

    layers = engine_blob(engine)["layers"]
    model.write_bytes(zoo_model_path("resnet_projection").read_bytes())  # same path, another model
    built, third, _ = runner_builds(args, tmp_path, capsys, gpu)
    assert built and engine_blob(engine)["layers"] != layers
    assert third["environment"]["engine_key"] != first["environment"]["engine_key"]
    assert not runner_builds(args, tmp_path, capsys, gpu)[0]

    assert runner_builds([*args, "--dtype", "fp32"], tmp_path, capsys, gpu)[0]
    assert engine_blob(engine)["flags"] == []
    assert runner_builds([*args, "--workspace-mib", "64"], tmp_path, capsys, gpu)[0]
    assert engine_blob(engine)["workspace"] == 64 << 20
    (tmp_path / "out" / "model.engine.key").unlink()  # an engine of unknown origin is not timed
    assert runner_builds([*args, "--workspace-mib", "64"], tmp_path, capsys, gpu)[0]
    assert not runner_builds([*args, "--workspace-mib", "64"], tmp_path, capsys, gpu)[0]
    assert runner_builds([*args, "--workspace-mib", "64", "--rebuild"], tmp_path, capsys, gpu)[0]
    # options that do not change the engine do not rebuild it
    extra = ["--workspace-mib", "64", "--per-layer", "--timing-cache", str(tmp_path / "t.cache")]
    assert not runner_builds([*args, *extra], tmp_path, capsys, gpu)[0]

    cached = [str(model), "--runs", "5", "--warmup", "1"]  # no --save-engine: cached names
    built, result, _ = runner_builds(cached, tmp_path, capsys, gpu)
    name = tmp_path / "engines" / f"model-fp16-{result['environment']['engine_key'][:16]}.engine"
    assert built and result["environment"]["engine"] == str(name)
    assert not runner_builds(cached, tmp_path, capsys, gpu)[0]
    assert not Path(f"{name}.key").exists()  # the name carries the key


def external_weights_model(src: Path, folder: Path) -> tuple[Path, Path]:
    """`src` saved as folder/model.onnx with every initializer in folder/weights.data."""
    model = onnx.load(str(src))
    path = folder / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="weights.data", size_threshold=0)
    return path, folder / "weights.data"


def new_weights(data: Path) -> None:
    """Other weights under the same file name, as a fine-tuned model re-saved over the old one."""
    raw = bytearray(data.read_bytes())
    raw[:64] = bytes(255 - b for b in raw[:64])
    data.write_bytes(bytes(raw))


def test_engines_follow_the_contents_of_external_weights(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A model whose weights are in a .data file: new weights there (the .onnx unchanged) build a
    new engine, in the backend's cache and in the runner's (which reads the file names without
    onnx); the same weights again reuse it."""
    _, gpu = install(monkeypatch, V85, "cudart")
    (tmp_path / "m").mkdir()
    model, data = external_weights_model(zoo_model_path("mobilenet_like"), tmp_path / "m")
    options = opts(tmp_path)
    built, first = backend_builds(model, options, gpu)
    assert built and not backend_builds(model, options, gpu)[0]
    onnx_bytes = model.read_bytes()
    new_weights(data)
    assert model.read_bytes() == onnx_bytes
    built, again = backend_builds(model, options, gpu)
    assert built and again["engine_key"] != first["engine_key"]

    args = [str(model), "--runs", "5", "--warmup", "1"]
    built, result, _ = runner_builds(args, tmp_path, capsys, gpu)
    assert built and not runner_builds(args, tmp_path, capsys, gpu)[0]
    new_weights(data)
    built, other, _ = runner_builds(args, tmp_path, capsys, gpu)
    assert built and other["environment"]["engine_key"] != result["environment"]["engine_key"]
    # a model without external data keeps the key it had before weights files were keyed
    plain = tmp_path / "plain.onnx"
    plain.write_bytes(zoo_model_path("mobilenet_like").read_bytes())
    facts = load_runner().build_facts(
        types.SimpleNamespace(
            model=str(plain), dtype="fp16", workspace_mib=1024, calib_npy=None, calib_cache=None
        ),
        V85,
        {},
    )
    assert "external_data_sha256" not in facts


def test_runner_finds_external_weights_without_onnx(tmp_path: Path) -> None:
    """The runner's protobuf walk finds what onnx finds: initializers, a Constant's value and an If
    branch's initializer kept outside the file, each once; [] for a model with none and for bytes
    that are not ONNX."""
    from deployopt.model import external_locations

    h = onnx.helper
    f32 = onnx.TensorProto.FLOAT
    weights = [onnx.numpy_helper.from_array(np.full((64,), i, np.float32), f"w{i}") for i in range(3)]
    branch = h.make_graph(
        [h.make_node("Add", ["x", "w2"], ["b_out"])],
        "then",
        [],
        [h.make_tensor_value_info("b_out", f32, [64])],
        [weights[2]],
    )
    const = onnx.numpy_helper.from_array(np.ones((64,), np.float32), "c")
    nodes = [
        h.make_node("Constant", [], ["c"], value=const),
        h.make_node("Add", ["x", "w0"], ["a"]),
        h.make_node("Add", ["a", "c"], ["b"]),
        h.make_node("Add", ["b", "w1"], ["y0"]),
        h.make_node("Greater", ["y0", "y0"], ["cond_all"]),
        h.make_node("ReduceMax", ["y0"], ["m"], keepdims=0),
        h.make_node("Cast", ["m"], ["cond"], to=onnx.TensorProto.BOOL),
        h.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", f32, [64])],
        [h.make_tensor_value_info("y", f32, [64])],
        weights[:2],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    g = model.graph  # make_graph and make_model copy: edit the model's own tensors
    branches = [a.g.initializer[0] for a in g.node[-1].attribute]  # then and else
    for i, tensor in enumerate([*g.initializer, g.node[0].attribute[0].t, *branches]):
        onnx.external_data_helper.set_external_data(tensor, f"part{i % 2}.bin" if i < 3 else "branch.bin")
        tensor.ClearField("raw_data")
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    runner = load_runner()
    found = runner.external_data_locations(str(path))  # in the file's order: nodes before initializers
    assert sorted(found) == ["branch.bin", "part0.bin", "part1.bin"] and len(found) == 3
    assert sorted(external_locations(onnx.load(str(path), load_external_data=False))) == sorted(found)
    (tmp_path / "part0.bin").write_bytes(b"x")
    digests = dict(runner.external_data_digests(str(path)))
    assert digests == {
        "part0.bin": hashlib.sha256(b"x").hexdigest(),
        "part1.bin": "absent",
        "branch.bin": "absent",
    }
    plain = tmp_path / "plain.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(plain))
    assert runner.external_data_locations(str(plain)) == []
    for junk in (b"", b"\xff" * 40, b"not an onnx model at all"):
        (tmp_path / "junk.onnx").write_bytes(junk)
        assert runner.external_data_locations(str(tmp_path / "junk.onnx")) == []


def test_runner_int8_engine_follows_the_calibration_contents(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The table the first build writes to --calib-cache does not make the next identical run
    rebuild; new contents in the table or in the --calib-npy data (same file names) do."""
    _, gpu = install(monkeypatch, V10, "bindings")
    calib, data = write_calibration(tmp_path, items=4)
    table = tmp_path / "model.calib"
    engine = tmp_path / "model.engine"
    args = [str(zoo_model_path("mobilenet_like")), "--dtype", "int8", "--runs", "2", "--warmup", "1"]
    args += ["--calib-npy", str(calib), "--calib-cache", str(table), "--save-engine", str(engine)]

    assert runner_builds(args, tmp_path, capsys, gpu)[0]
    assert engine_blob(engine)["calibration"] == "data" and table.read_bytes().startswith(b"TRT-")
    assert len(gpu.calibration_batches) == 4
    assert not runner_builds(args, tmp_path, capsys, gpu)[0]  # the table it wrote is now there

    table.write_bytes(b"TRT-100300-EntropyCalibration2\ninput: 3c000000\n")  # a new table, same name
    assert runner_builds(args, tmp_path, capsys, gpu)[0]
    assert engine_blob(engine)["calibration"] == "cache"  # built from the new table
    assert calls(gpu, "calibration: table read")[-1] == (len(table.read_bytes()),)
    assert not runner_builds(args, tmp_path, capsys, gpu)[0]

    np.save(calib, data[::-1])  # new data, same file name
    assert runner_builds(args, tmp_path, capsys, gpu)[0]
    table.unlink()  # to calibrate on the new data, the old table goes
    assert runner_builds(args, tmp_path, capsys, gpu)[0]
    assert engine_blob(engine)["calibration"] == "data" and len(gpu.calibration_batches) == 8
    np.testing.assert_array_equal(gpu.calibration_batches[-1]["input"], data[:1])
    assert not runner_builds(args, tmp_path, capsys, gpu)[0]

    # --calib-cache alone reads the table; its contents are the key
    alone = [a for a in args if a != str(calib) and a != "--calib-npy"]
    assert runner_builds(alone, tmp_path, capsys, gpu)[0]
    assert not runner_builds(alone, tmp_path, capsys, gpu)[0]
    table.write_bytes(table.read_bytes() + b"conv: 3c010a14\n")
    assert runner_builds(alone, tmp_path, capsys, gpu)[0]


def test_a_data_dependent_output_is_refused_before_allocating(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An output whose shape TensorRT reports as -1 after the inputs are set (NonMaxSuppression in a
    YOLO export) got a 1-byte buffer (max(1, negative size)) that the engine would write past; the
    backend and the runner now refuse it in one line before allocating anything."""
    version, trt, gpu = surface
    real_shape = trt.IExecutionContext._shape

    def data_dependent(self: Any, name: str) -> tuple[int, ...]:
        shape = real_shape(self, name)
        return shape if self._e._by_name(name)[1] else (-1, *shape[1:])

    monkeypatch.setattr(trt.IExecutionContext, "_shape", data_dependent)
    model = zoo_model_path("mobilenet_like")
    options = opts(tmp_path, extra={"cuda": "pycuda"} if version == V82 else {})
    engine = tmp_path / "m.engine"
    build_engine(str(model), options, str(engine))
    with pytest.raises(BackendFailed) as exc:
        time_engine(str(engine), options, {}, False)
    assert str(exc.value).startswith("output 'logits' has a data-dependent shape [-1, 10] (an NMS-like op)")
    assert gpu.memory == {} and calls(gpu, "alloc") == []

    cuda = ["--cuda", "pycuda"] if version == V82 else []
    rc = load_runner().main([str(model), "--runs", "2", *cuda, "--engine-dir", str(tmp_path / "engines")])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and err[-1].startswith("error: output 'logits' has a data-dependent shape [-1, 10]")
    assert gpu.memory == {} and calls(gpu, "alloc") == []


def bf16_input_model(tmp_path: Path, input_type: int = onnx.TensorProto.BFLOAT16) -> Path:
    """A conv whose input `x` is bf16 (Cast to fp32 inside): an I/O tensor numpy has no type for."""
    h = onnx.helper
    weights = onnx.numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = h.make_graph(
        [
            h.make_node("Cast", ["x"], ["xf"], to=onnx.TensorProto.FLOAT, name="cast"),
            h.make_node("Conv", ["xf", "w"], ["y"], pads=[1, 1, 1, 1], name="conv"),
        ],
        "bf16_in",
        [h.make_tensor_value_info("x", input_type, [1, 3, 8, 8])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [weights],
    )
    model = tmp_path / "bf16_in.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(model))
    return model


def test_runner_an_io_tensor_numpy_cannot_hold_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model whose input is bf16 (or fp8, int4: TensorRT's nptype maps none of them) made the
    runner die in trt.nptype with a traceback that named no tensor; from the host, `--remote` relayed
    it as `exited 1: raise TypeError("Could not resolve TensorRT datatype ...")`. Now one line naming
    the tensor and what to do, exit 2, before any buffer is allocated."""
    _, gpu = install(monkeypatch, V10, "bindings")
    model = bf16_input_model(tmp_path)
    rc = load_runner().main([str(model), "--runs", "2", "--engine-dir", str(tmp_path / "engines")])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith("error: input 'x' is BF16, which numpy has no type for: ")
    assert gpu.memory == {} and calls(gpu, "alloc") == []


def test_the_backend_says_which_io_tensor_numpy_cannot_hold_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The local backend, as the runner: a bf16 input (TensorRT 10's; the older surfaces have no
    type numpy cannot hold) died in trt.nptype with a TypeError traceback that named no tensor. Now
    one BackendFailed line naming the tensor and what to do, the runner's words, before any buffer
    is allocated."""
    _, gpu = install(monkeypatch, V10, "cudart")
    options = opts(tmp_path, dtype="fp32")
    engine = tmp_path / "m.engine"
    build_engine(str(bf16_input_model(tmp_path)), options, str(engine))
    with pytest.raises(BackendFailed) as exc:
        time_engine(str(engine), options, {}, False)
    assert str(exc.value) == (
        "input 'x' is BF16, which numpy has no type for: this backend cannot allocate or fill it; "
        "give the model fp32 or fp16 inputs and outputs (a Cast at its edges), or time it with "
        "--backend trtexec"
    )
    assert gpu.memory == {} and calls(gpu, "alloc") == []


@pytest.fixture
def numpy_without_bool(monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy 1.24-1.26, which removed the np.bool alias (numpy 2.0 has it again): TensorRT 8.0-8.5's
    nptype reads it on every call (NVIDIA/TensorRT#2557)."""
    monkeypatch.setattr(sys.modules[__name__], "NPTYPE_NUMPY", types.SimpleNamespace())


@pytest.mark.parametrize("version", [V82, V85])
def test_tensorrt_8_with_numpy_1_24_times_a_model(
    version: str, numpy_without_bool: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TensorRT 8.0-8.5's own nptype fails for every type under numpy 1.24-1.26 (an
    AttributeError: np.bool): every bench and INT8 calibration from data died after the build with
    `BackendFailed: AttributeError: module 'numpy' has no attribute 'bool'`. The backend maps the
    types itself: a model builds and is timed, and every type the surface has maps to numpy's."""
    trt, _ = install(monkeypatch, version, "pycuda" if version == V82 else "cudart")
    with pytest.raises(AttributeError):
        trt.nptype(trt.DataType.FLOAT)  # the fake is as broken as the real one here
    model = bf16_input_model(tmp_path, onnx.TensorProto.FLOAT)
    options = opts(tmp_path, dtype="fp32", extra={"cuda": "pycuda"} if version == V82 else {})
    engine = tmp_path / "m.engine"
    build_engine(str(model), options, str(engine))
    timing = time_engine(str(engine), options, {}, False)["timing"]
    assert timing["runs"] == 5
    dtypes = {trt_backend._io_dtype(trt, "t", True, t).name for t in trt.DataType}
    assert dtypes == (
        {"float32", "float16", "int8", "int32", "bool"} | ({"uint8"} if version == V85 else set())
    )


def test_a_cuda_python_newer_than_the_driver_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain `pip install cuda-python` fetches the newest major, which an older driver cannot run:
    every call is cudaErrorInsufficientDriver, and the line named only the error. It now says to
    install the release of the driver's CUDA major, or to give --cuda pycuda, on the host and on the
    board."""
    install(monkeypatch, V10, "bindings")
    runtime = sys.modules["cuda.bindings.runtime"]
    monkeypatch.setattr(
        runtime, "cudaMalloc", lambda size: (runtime.cudaError_t.cudaErrorInsufficientDriver, 0)
    )
    options = opts(tmp_path, dtype="fp32")
    engine = tmp_path / "m.engine"
    model = bf16_input_model(tmp_path, onnx.TensorProto.FLOAT)
    build_engine(str(model), options, str(engine))
    with pytest.raises(BackendFailed) as exc:
        time_engine(str(engine), options, {}, False)
    assert str(exc.value) == (
        "CUDA error in cudaMalloc: cudaErrorInsufficientDriver (this cuda-python is for a newer CUDA "
        "than the driver runs: install the release of the driver's CUDA major (nvidia-smi names it; e.g. "
        "pip install 'cuda-python>=12,<13'), or give --cuda pycuda)"
    )
    rc = load_runner().main([str(model), "--runs", "2", "--engine-dir", str(tmp_path / "engines")])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and err[-1] == (
        "error: CUDA error in cudaMalloc: cudaErrorInsufficientDriver (this cuda-python is for a newer CUDA "
        "than JetPack's: JetPack 5: pip3 install 'cuda-python>=11.4,<12'; JetPack 6: pip3 install "
        "'cuda-python>=12.2,<13'; or --cuda pycuda)"
    )


def test_runner_on_tensorrt_8_with_numpy_1_24_times_a_model(
    numpy_without_bool: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The runner, as the backend: under numpy 1.24-1.26 on a JetPack 5 board (TensorRT 8.5) it
    died in trt.nptype after every build, a traceback and exit 1 (relayed by --remote as a bare
    failure). Now it times the model."""
    install(monkeypatch, V85, "cudart")
    model = bf16_input_model(tmp_path, onnx.TensorProto.FLOAT)
    out = tmp_path / "r.json"
    runner = load_runner()
    rc = runner.main(
        [str(model), "--runs", "2", "--engine-dir", str(tmp_path / "engines"), "--out", str(out)]
    )
    assert rc == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["runs"] == 2
    assert {runner.io_dtype(None, "t", True, t).name for t in ("FLOAT", "HALF", "INT64", "UINT8")} == {
        "float32",
        "float16",
        "int64",
        "uint8",
    }


def test_runner_out_in_a_new_folder_and_unwritable_paths(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/regression.md runs `runner.py ... --out results/current/model.json`: the folder is made
    (as `bench -o` makes it). An --out that cannot be written is one line, exit 2, before any build
    or timed run; so is an --engine-dir or --save-engine that cannot be written (it failed after the
    build, minutes on a Nano, naming the engine's temporary file)."""
    _, gpu = install(monkeypatch, V85, "cudart")
    model = str(zoo_model_path("mobilenet_like"))
    runner = load_runner()
    out = tmp_path / "results" / "current" / "model.json"
    engines = ["--engine-dir", str(tmp_path / "engines")]
    assert runner.main([model, "--runs", "2", "--warmup", "1", *engines, "--out", str(out)]) == 0
    assert json.loads(out.read_text())["runs"] == 2
    capsys.readouterr()

    in_the_way = tmp_path / "results.txt"
    in_the_way.write_text("a file where a folder should be\n")
    before = len(gpu.log)
    rc = runner.main([model, "--runs", "2", *engines, "--out", str(in_the_way / "model.json")])
    err = capsys.readouterr().err
    assert rc == 2 and err == (
        f"error: cannot write --out {in_the_way / 'model.json'}: {in_the_way} is a file, not a folder\n"
    )
    assert len(gpu.log) == before  # nothing built, nothing timed
    rc = runner.main([model, "--runs", "2", *engines, "--out", str(tmp_path)])
    assert (
        rc == 2
        and capsys.readouterr().err
        == f"error: cannot write --out {tmp_path}: it is a folder; give a file path\n"
    )

    rc = runner.main([model, "--runs", "2", "--engine-dir", str(in_the_way / "engines")])
    err = capsys.readouterr().err
    prefix = f"error: cannot write --engine-dir {in_the_way / 'engines'}/mobilenet_like-"
    assert rc == 2 and err.startswith(prefix)
    assert err.endswith(f".engine: {in_the_way} is a file, not a folder\n") and err.count("\n") == 1
    assert len(gpu.log) == before  # refused before the build
    rc = runner.main([model, "--runs", "2", "--save-engine", str(in_the_way / "m.engine")])
    err = capsys.readouterr().err
    assert rc == 2 and err == (
        f"error: cannot write --save-engine {in_the_way / 'm.engine'}: {in_the_way} is a file, not a folder\n"
    )
    assert len(gpu.log) == before
    assert not (tmp_path / "engines_later").exists()
    # the engine folder is made only when an engine is written, not by the check
    assert runner.main([model, "--runs", "5", "--engine-dir", str(tmp_path / "engines_later" / "a")]) == 0
    assert len(list((tmp_path / "engines_later" / "a").glob("*.engine"))) == 1
    assert not list(tmp_path.glob("**/.runner-probe-*"))


def test_runner_a_full_disk_when_the_engine_is_written_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A board whose disk fills up while the engine is written (ENOSPC from its open, as the stand-in
    board's FAKE_BOARD_DISK_FULL gives it): one line naming the engine and the error, exit 2, no
    traceback, no temporary file left, nothing timed; the host adds what to do
    (tests/test_tensorrt_remote.py)."""
    from fake_board_python import disk_full_for_engines

    _, gpu = install(monkeypatch, V10, "bindings")
    runner = load_runner()
    monkeypatch.setattr(runner, "open", disk_full_for_engines, raising=False)
    engines = tmp_path / "engines"
    rc = runner.main([str(zoo_model_path("mobilenet_like")), "--runs", "2", "--engine-dir", str(engines)])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"error: cannot read or write {engines}/mobilenet_like-")
    assert err[-1].endswith(".engine: No space left on device")
    assert not [p for p in engines.iterdir() if ".tmp" in p.name]
    assert calls(gpu, "alloc") == []


def test_runner_timing_cache_trouble_is_a_warning_and_the_engine_is_kept(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--timing-cache only speeds the next build up, as in the backend: one that cannot be written
    is a warning after the build, and the engine is written and timed. It was a failed run (exit 2,
    naming the cache's temporary file) that threw away a build of minutes."""
    _, gpu = install(monkeypatch, V10, "bindings")
    (tmp_path / "a_file").write_text("")
    cache = tmp_path / "a_file" / "timing.cache"
    out = tmp_path / "result.json"
    args = [str(zoo_model_path("mobilenet_like")), "--runs", "5", "--engine-dir", str(tmp_path / "engines")]
    rc = load_runner().main([*args, "--timing-cache", str(cache), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert err.splitlines()[0] == (
        f"warning: cannot write {cache}: Not a directory; the TensorRT timing cache is not saved"
    )
    engine = Path(json.loads(out.read_text())["environment"]["engine"])
    assert engine.stat().st_size > 0 and not list(tmp_path.glob("a_file*/*.tmp*"))
    # a folder in the cache's place: not read, and not written over (a warning again)
    rc = load_runner().main([*args, "--rebuild", "--timing-cache", str(tmp_path), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert err.startswith(f"warning: cannot write {tmp_path}: ")
    assert len(calls(gpu, "Builder.build_serialized_network")) == 2


def test_runner_says_when_compare_cannot_judge_its_result(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--runs 3` on the board: the result is written, and a note says now, in `bench`'s words, what
    `deployopt compare` says only once the file is back on the host (it refuses it)."""
    install(monkeypatch, V10, "bindings")
    args = [str(zoo_model_path("mobilenet_like")), "--engine-dir", str(tmp_path / "engines")]
    out = tmp_path / "result.json"
    assert load_runner().main([*args, "--runs", "3", "--out", str(out)]) == 0
    note = capsys.readouterr().err.splitlines()[-1]
    assert note == (
        "note: 3 runs: `deployopt compare` needs at least 5 per side (at its default --alpha 0.01) to "
        "judge a difference between two results this short; use --runs 5 or more to compare this"
    )
    assert json.loads(out.read_text())["runs"] == 3
    with pytest.raises(
        DeployoptError, match=r"\(3 samples\): the smallest p .* is 0\.1, not below --alpha 0\.01"
    ):
        compare_paths(out, out)
    assert load_runner().main([*args, "--runs", "5", "--out", str(out)]) == 0
    assert "note:" not in capsys.readouterr().err


def test_a_dtype_difference_is_named_by_compare(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The runner and the tensorrt backend record the dtype they built, so compare says `dtype fp16 →
    fp32` where it said only "what was timed differs" (bench's fp32 default against the runner's
    fp16 is the likely mix-up); a serialized engine's dtype is only a label and is not recorded."""
    install(monkeypatch, V10, "bindings")
    model = str(zoo_model_path("mobilenet_like"))
    runner = load_runner()
    results = {}
    for dtype in ("fp16", "fp32"):
        out = tmp_path / f"{dtype}.json"
        args = [model, "--dtype", dtype, "--runs", "5", "--engine-dir", str(tmp_path / "engines")]
        assert runner.main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
        results[dtype] = load_timing(out)
    assert results["fp16"].environment["dtype"] == "fp16"
    assert differences(results["fp16"], results["fp32"])[0] == "dtype fp16 → fp32"
    backend = build_and_time(model, opts(tmp_path, dtype="fp32"), per_layer=False)
    assert backend["timing"]["environment"]["dtype"] == "fp32"
    engine = results["fp16"].environment["engine"]
    assert runner.main([engine, "--runs", "5", "--out", str(tmp_path / "engine.json")]) == 0
    assert "dtype" not in load_timing(tmp_path / "engine.json").environment


def test_a_batch_difference_is_named_by_compare(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The runner and the tensorrt backend record the shape each input ran at: a dynamic-batch
    model timed at batch 1 against batch 4 (the same file, the same dtype) read as like for like,
    and its 4x slower median as the model's regression."""
    install(monkeypatch, V10, "bindings")
    model = str(zoo_model_path("mobilenet_like_dynamic"))
    runner = load_runner()
    results = {}
    for batch in (1, 4):
        out = tmp_path / f"b{batch}.json"
        args = [model, "--shapes", f"input:{batch}x3x32x32", "--runs", "5"]
        assert runner.main([*args, "--engine-dir", str(tmp_path / "engines"), "--out", str(out)]) == 0
        results[batch] = load_timing(out)
    assert results[4].environment["input_shapes"] == {"input": [4, 3, 32, 32]}
    assert differences(results[1], results[4]) == ["input shapes input:1x3x32x32 → input:4x3x32x32"]
    backend = build_and_time(model, opts(tmp_path, batch=2), per_layer=False)
    assert backend["timing"]["environment"]["input_shapes"] == {"input": [2, 3, 32, 32]}
    static = build_and_time(str(zoo_model_path("mobilenet_like")), opts(tmp_path), per_layer=False)
    assert static["timing"]["environment"]["input_shapes"] == {"input": [1, 3, 32, 32]}


def test_runner_workspace_out_of_range_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A negative --workspace-mib reached TensorRT's size_t setter: a TypeError traceback, exit 1."""
    _, gpu = install(monkeypatch, V10, "bindings")
    model = str(zoo_model_path("mobilenet_like"))
    for value in ("-1", "0", str((1 << 20) + 1)):
        rc = load_runner().main([model, "--workspace-mib", value, "--engine-dir", str(tmp_path / "engines")])
        assert rc == 2 and not gpu.log
        assert capsys.readouterr().err == f"error: --workspace-mib {value}: must be between 1 and 1,048,576\n"


def test_runner_refuses_a_float_npy_for_an_integer_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--calib-npy's data go to TensorRT as float32 bytes, which it reads as the input's own type:
    an INT32 input (token ids) got float bit patterns as ids. One line before any build."""
    _, gpu = install(monkeypatch, V85, "cudart")
    h = onnx.helper
    x = h.make_tensor_value_info("ids", onnx.TensorProto.INT32, [1, 3, 8, 8])
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8])
    graph = h.make_graph([h.make_node("Cast", ["ids"], ["y"], to=onnx.TensorProto.FLOAT)], "ids", [x], [y])
    model = tmp_path / "ids.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(model))
    calib, _ = write_calibration(tmp_path, items=2)
    args = [str(model), "--dtype", "int8", "--calib-npy", str(calib), "--out", str(tmp_path / "r.json")]
    assert load_runner().main([*args, "--engine-dir", str(tmp_path / "engines")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--calib-npy feeds float32 data, and input 'ids' is INT32" in err
    assert calls(gpu, "Builder.build_serialized_network") == [] and gpu.memory == {}


def test_runner_refuses_one_npy_for_a_model_with_two_inputs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One .npy can feed one input: a two-input model gets a one-line error before any build."""
    _, gpu = install(monkeypatch, V85, "cudart")
    h = onnx.helper
    x = [h.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1, 3, 8, 8]) for n in ("a", "b")]
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 8, 8])
    graph = h.make_graph([h.make_node("Add", ["a", "b"], ["y"])], "two_inputs", x, [y])
    model = tmp_path / "two.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(model))
    calib, _ = write_calibration(tmp_path, items=2)
    args = [str(model), "--dtype", "int8", "--calib-npy", str(calib), "--out", str(tmp_path / "r.json")]
    assert load_runner().main([*args, "--engine-dir", str(tmp_path / "engines")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--calib-npy calibrates single-input models; this one has 2" in err
    assert calls(gpu, "Builder.build_serialized_network") == [] and gpu.memory == {}


@pytest.mark.parametrize("version", [V82, V85, V10])
def test_runner_int8_without_scales_is_refused_before_building(
    version: str,
    zoo_model_path: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--dtype int8 with no --calib-npy, no --calib-cache and no Q/DQ nodes: TensorRT has no scale
    for any tensor, says 'Missing scale and zero-point' per tensor and builds it fp16/fp32, which
    was timed and labelled int8. One line, nothing built; a Q/DQ model still builds."""
    _, gpu = install(monkeypatch, version, "pycuda" if version == V82 else "cudart")
    model = str(zoo_model_path("mobilenet_like"))
    args = [model, "--dtype", "int8", "--out", str(tmp_path / "r.json"), "--engine-dir", str(tmp_path / "e")]
    assert load_runner().main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dtype int8 needs --calib-npy or --calib-cache, or a model with" in err
    assert calls(gpu, "Builder.build_serialized_network") == [] and not (tmp_path / "r.json").exists()
    result = run_runner([str(QDQ_MODEL), "--dtype", "int8", "--runs", "2", "--warmup", "0"], tmp_path, capsys)
    assert result["environment"]["dtype"] == "int8"


def test_runner_pycuda_failures_are_one_line(
    zoo_model_path: Callable[[str], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """pycuda (JetPack 4.6's only binding) raises its own errors, not ImportError, where CUDA does
    not start (cuInit failed: a user outside the video group) or memory runs out: each was a
    traceback and exit 1; now the runner's one line and exit 2."""
    import importlib.abc

    install(monkeypatch, V82, "pycuda")
    model = str(zoo_model_path("mobilenet_like"))
    args = [model, "--cuda", "pycuda", "--out", str(tmp_path / "r.json"), "--engine-dir", str(tmp_path / "e")]
    driver = sys.modules["pycuda.driver"]

    def out_of_memory(nbytes: int) -> Any:
        raise driver.LogicError("cuMemAlloc failed: out of memory")

    monkeypatch.setattr(driver, "mem_alloc", out_of_memory)
    assert load_runner().main(args) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "error: cannot allocate 12288 bytes on the GPU through pycuda: cuMemAlloc failed: out of memory"
    )
    assert "Traceback" not in err and not (tmp_path / "r.json").exists()

    class NoCuInit(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            return importlib.machinery.ModuleSpec(name, self) if name == "pycuda.autoinit" else None

        def create_module(self, spec: Any) -> None:
            return None

        def exec_module(self, module: Any) -> None:
            raise driver.LogicError("cuInit failed: no CUDA-capable device is detected")

    monkeypatch.delitem(sys.modules, "pycuda.autoinit")
    monkeypatch.setattr(sys, "meta_path", [NoCuInit(), *sys.meta_path])
    assert load_runner().main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CUDA did not start through pycuda: cuInit failed" in err


def test_int8_on_a_gpu_without_native_int8_is_refused_before_building(
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Jetson Nano and TX2 (JetPack 4.6, TensorRT 8.2) report platform_has_fast_int8 False: TensorRT
    would build an INT8 engine that runs slower than FP16, so the backend and the board runner
    refuse it in one line, before parsing or building anything."""
    trt, gpu = install(monkeypatch, V82, "pycuda")
    monkeypatch.setattr(trt.Builder, "platform_has_fast_int8", property(lambda self: False))
    calib, _ = write_calibration(tmp_path, items=4)
    model = str(zoo_model_path("mobilenet_like"))
    int8 = opts(tmp_path, dtype="int8", calibration_data=str(calib))
    with pytest.raises(DeployoptError) as exc:
        build_engine(model, int8, str(tmp_path / "m.engine"))
    assert str(exc.value).startswith("--dtype int8: this GPU has no native INT8 (TensorRT's")
    assert calls(gpu, "Builder.build_serialized_network") == [] and not (tmp_path / "m.engine").exists()
    rc = load_runner().main([model, "--dtype", "int8", "--calib-npy", str(calib), "--cuda", "pycuda",
                             "--engine-dir", str(tmp_path / "engines")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("error: --dtype int8: this GPU has no native INT8")
    assert calls(gpu, "Builder.build_serialized_network") == []
    # fp16 on the same board builds as before
    build_engine(model, opts(tmp_path), str(tmp_path / "f.engine"))
    assert (tmp_path / "f.engine").is_file()


def test_a_quantized_model_on_a_gpu_without_int8_says_where_int8_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench`/`profile --backend tensorrt` give a Q/DQ model --dtype int8 by default; on a GPU
    without native INT8 the refusal said "--dtype int8: ... use --dtype fp16" to a user who gave no
    --dtype. Now it says the model is quantized, in optimize's words (73c4c53); asked for, int8
    keeps the backend's own."""
    from cli_runner import run_cli
    from test_coupling_qdq import qdq_net

    trt, gpu = install(monkeypatch, V82, "pycuda")
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)  # importable, for availability()
    monkeypatch.setattr(trt.Builder, "platform_has_fast_int8", property(lambda self: False))
    monkeypatch.setattr(trt_backend, "run_isolated", lambda target, args, timeout: build_and_time(*args))
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "q.onnx"
    onnx.save(qdq_net(), str(model))
    for command in ("bench", "profile"):
        args = [command, str(model), "--backend", "tensorrt", "--runs", "5"]
        code, out, err = run_cli(monkeypatch, capsys, *args)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert err.startswith("error: q.onnx is quantized (Q/DQ nodes), so it runs in INT8, which this GPU ")
        assert err.rstrip().endswith("time the float model it was quantized from")
        code, _, err = run_cli(monkeypatch, capsys, *args, "--dtype", "int8")  # asked for
        assert code == 2 and err.startswith("error: --dtype int8: this GPU has no native INT8"), err
    assert calls(gpu, "Builder.build_serialized_network") == []


def test_an_execution_context_tensorrt_cannot_create_is_one_line(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """create_execution_context returns None when TensorRT cannot make one (a Nano out of memory;
    NVIDIA/TensorRT#3554 on 8.5). The backend and the runner used it anyway: an AttributeError
    traceback at the first binding call. Now each stops in one line, nothing allocated."""
    version, _, gpu = surface
    engine = tmp_path / "m.engine"
    build_engine(str(zoo_model_path("mobilenet_like")), opts(tmp_path), str(engine))
    gpu.context_memory_left = False
    with pytest.raises(BackendFailed, match=rf"^TensorRT {version} could not create an execution context "):
        time_engine(str(engine), opts(tmp_path), {}, False)
    cuda = ["--cuda", "pycuda"] if version == V82 else []
    rc = load_runner().main([str(engine), "--runs", "2", *cuda])
    err = capsys.readouterr().err
    assert rc == 2 and err.endswith(
        f"error: TensorRT could not create an execution context for {engine} (out of GPU memory? "
        "TensorRT's error above says why)\n"
    )
    assert gpu.memory == {} and calls(gpu, "alloc") == []


# ================================================================================================
# TensorRT 11.x: strongly typed only (the fake is written from NVIDIA's migration guide)

QDQ_MODEL = Path(__file__).parent / "data" / "modelopt_int8_se_net.onnx"  # ModelOpt's, fp16 casts
WEAK_TYPING = {
    "module": ["IInt8Calibrator", "IInt8EntropyCalibrator2", "IInt8MinMaxCalibrator", "CalibrationAlgoType"],
    "IBuilderConfig": ["int8_calibrator", "set_calibration_profile", "get_calibration_profile"],
    "Builder": ["platform_has_fast_fp16", "platform_has_fast_int8"],
    "BuilderFlag": ["FP16", "INT8", "BF16", "OBEY_PRECISION_CONSTRAINTS", "PREFER_PRECISION_CONSTRAINTS"],
}


@pytest.fixture
def trt11(monkeypatch: pytest.MonkeyPatch) -> tuple[types.ModuleType, FakeGpu]:
    return install(monkeypatch, V11, "bindings")


def test_fake_11_has_no_weak_typing_and_10_has_it() -> None:
    for version, present in ((V10, True), (V11, False)):
        trt = make_tensorrt(version, FakeGpu(*DEVICES[version]))
        owner = {"module": trt, "IBuilderConfig": trt.IBuilderConfig, "Builder": trt.Builder}
        owner["BuilderFlag"] = trt.BuilderFlag
        for kind, names in WEAK_TYPING.items():
            for name in names:
                assert hasattr(owner[kind], name) is present, f"{kind}.{name} on {version}"
    trt = make_tensorrt(V11, FakeGpu(*DEVICES[V11]))
    assert hasattr(trt.BuilderFlag, "TF32") and hasattr(trt.IBuilderConfig, "set_memory_pool_limit")


def test_trt11_fp16_builds_the_model_typed_fp16_without_a_flag(
    trt11: tuple[types.ModuleType, FakeGpu], zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """--dtype fp16 on 11.x: the parser gets the model typed fp16 (deployopt.precision), no
    BuilderFlag is set, the engine's I/O stays fp32, and it is timed like any other engine."""
    _, gpu = trt11
    model = zoo_model_path("resnet_projection_constantofshape")
    engine = tmp_path / "m.engine"
    facts = build_engine(str(model), opts(tmp_path), str(engine))
    blob = engine_blob(engine)
    assert blob["flags"] == [] and blob["typed_fp16"] and not blob["qdq"]
    assert [t for _, _, t in blob["inputs"] + blob["outputs"]] == ["FLOAT", "FLOAT"]
    assert calls(gpu, "IBuilderConfig.set_flag") == []
    (parsed,) = calls(gpu, "OnnxParser.parse")
    assert parsed[0] != model.stat().st_size and parsed[1] == str(model)  # the converted bytes
    out = time_engine(str(engine), opts(tmp_path), facts["shapes"], per_layer=True)
    timing = out["timing"]
    assert len(timing["samples_us"]) == 5 and timing["environment"]["tensorrt"] == V11
    assert timing["timed"].startswith(
        "one forward pass (fp16: the model typed fp16 inside, fp32 I/O (TensorRT 11"
    )
    assert [row["name"] for row in out["layers"]] == blob["layers"]
    assert not gpu.trt_errors and gpu.memory == {}
    # fp32 builds the model as it is
    build_engine(str(model), opts(tmp_path, dtype="fp32"), str(tmp_path / "f.engine"))
    blob32 = engine_blob(tmp_path / "f.engine")
    assert blob32["flags"] == [] and not blob32["typed_fp16"]
    assert calls(gpu, "OnnxParser.parse")[-1][0] == model.stat().st_size


def test_trt11_engine_keys_name_the_conversion(
    trt11: tuple[types.ModuleType, FakeGpu], zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """A strongly typed fp16 engine is keyed on the conversion recipe too; 10.x keys are as before
    (no new field), and fp16 / fp32 / another TensorRT never share an engine."""
    from deployopt.precision import CONVERSION_RECIPE

    data = zoo_model_path("mobilenet_like").read_bytes()
    fp16, fp32 = opts(tmp_path), opts(tmp_path, dtype="fp32")
    assert trt_backend.build_facts(data, fp16, V11, {})["fp16_conversion"] == CONVERSION_RECIPE
    assert "fp16_conversion" not in trt_backend.build_facts(data, fp16, V10, {})
    assert "fp16_conversion" not in trt_backend.build_facts(data, fp32, V11, {})
    keys = {trt_backend.engine_key(data, o, v, {}) for o in (fp16, fp32) for v in (V10, V11)}
    assert len(keys) == 4
    model = zoo_model_path("mobilenet_like")
    first = build_and_time(str(model), fp16, per_layer=False)["timing"]["environment"]
    again = build_and_time(str(model), fp16, per_layer=False)["timing"]["environment"]
    assert first["engine_built_now"] and not again["engine_built_now"]
    assert first["engine_key"] == again["engine_key"] == trt_backend.engine_key(data, fp16, V11, {})


def test_trt11_int8_only_from_qdq_nodes(
    trt11: tuple[types.ModuleType, FakeGpu], zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """int8 on 11.x: a Q/DQ model builds with no flag and no calibrator (none exists to subclass);
    a model without Q/DQ, or calibration data / a table, is refused in one line before the parser,
    the builder or the hashing of the data runs."""
    _, gpu = trt11
    engine = tmp_path / "q.engine"
    build_engine(str(QDQ_MODEL), opts(tmp_path, dtype="int8"), str(engine))
    blob = engine_blob(engine)
    assert blob["flags"] == [] and blob["qdq"] and blob["calibration"] is None
    parsed = len(calls(gpu, "OnnxParser.parse"))
    model = zoo_model_path("mobilenet_like")
    with pytest.raises(DeployoptError) as exc:
        build_and_time(str(model), opts(tmp_path, dtype="int8"), per_layer=False)
    assert str(exc.value).startswith(f"--dtype int8: TensorRT {V11} builds INT8 only from Q/DQ nodes")
    assert "mobilenet_like.onnx has none" in str(exc.value) and "\n" not in str(exc.value)
    calib, _ = write_calibration(tmp_path, items=4)
    table = tmp_path / "m.calib"
    table.write_bytes(TABLE)
    for options in (
        opts(tmp_path, dtype="int8", calibration_data=str(calib)),
        opts(tmp_path, dtype="int8", calibration_data=str(table)),
        opts(tmp_path, dtype="int8", extra={"calib_cache": str(table)}),
    ):
        with pytest.raises(
            DeployoptError, match=rf"^--dtype int8 with calibration .*: TensorRT {V11} cannot"
        ):
            build_and_time(str(QDQ_MODEL), options, per_layer=False)
    assert len(calls(gpu, "OnnxParser.parse")) == parsed  # nothing more was parsed or built
    with pytest.raises(DeployoptError, match=r"^TensorRT 11\.4\.1\.2 has no INT8 calibrators"):
        tensorrt_calibrator.make_entropy_calibrator(sys.modules["tensorrt"], object())


def test_cli_on_trt11(
    trt11: tuple[types.ModuleType, FakeGpu],
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`deployopt bench --backend tensorrt`: fp16 builds and times; int8 of an fp32 model is one
    line on stderr with exit 2 and no traceback."""
    from cli_runner import run_cli

    trt, _ = trt11
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)  # importable, for availability()
    monkeypatch.setattr(trt_backend, "run_isolated", lambda target, args, timeout: build_and_time(*args))
    monkeypatch.chdir(tmp_path)
    base = ["bench", str(zoo_model_path("se_net")), "--backend", "tensorrt", "--runs", "3"]
    code, out, err = run_cli(monkeypatch, capsys, *base, "--dtype", "fp16", "--json")
    assert code == 0, err
    assert json.loads(out)["environment"]["tensorrt"] == V11
    (engine,) = (tmp_path / "engines").iterdir()
    assert engine_blob(engine)["typed_fp16"] and engine_blob(engine)["flags"] == []
    code, out, err = run_cli(monkeypatch, capsys, *base, "--dtype", "int8")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: --dtype int8: TensorRT {V11} builds INT8 only from Q/DQ nodes")


def test_runner_on_trt11(
    trt11: tuple[types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """jetson/runner.py on 11.x cannot retype a model: an fp32 model with --dtype fp16 is refused in
    one line naming the host-side conversion; the converted model builds with no flag, fp32 I/O;
    int8 takes only a Q/DQ model and no calibration files."""
    from deployopt.precision import write_fp16

    _, gpu = trt11
    runner = load_runner()
    model = zoo_model_path("mobilenet_like")
    common = ["--runs", "2", "--warmup", "1", "--engine-dir", str(tmp_path / "engines")]

    def refused(*args: str) -> str:
        assert runner.main([*args, *common]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ")
        return err

    err = refused(str(model), "--dtype", "fp16")
    assert f"TensorRT {V11} has no FP16 build flag" in err and "mobilenet_like.onnx is typed fp32" in err
    assert "deployopt fp16 model.onnx -o model_fp16.onnx" in err
    assert not (tmp_path / "engines").exists()  # refused before an engine was written
    typed = write_fp16(model, tmp_path / "mobilenet_fp16.onnx")
    result = run_runner([str(typed), "--dtype", "fp16", "--runs", "2", "--warmup", "1"], tmp_path, capsys)
    blob = engine_blob(Path(result["environment"]["engine"]))
    assert blob["flags"] == [] and blob["typed_fp16"]
    assert [t for _, _, t in blob["inputs"] + blob["outputs"]] == ["FLOAT", "FLOAT"]
    assert result["timed"].startswith("one forward pass (fp16 as typed in the model (TensorRT 11 ")
    err = refused(str(model), "--dtype", "int8")
    assert "builds INT8 only from Q/DQ nodes" in err and "modelopt.onnx.quantization" in err
    calib, _ = write_calibration(tmp_path, items=2)
    err = refused(str(QDQ_MODEL), "--dtype", "int8", "--calib-npy", str(calib))
    assert err.startswith(f"error: --calib-npy/--calib-cache: TensorRT {V11} cannot calibrate")
    err = refused(str(QDQ_MODEL), "--dtype", "fp16")
    assert "has Q/DQ nodes" in err and "--dtype int8" in err
    result = run_runner([str(QDQ_MODEL), "--dtype", "int8", "--runs", "2", "--warmup", "1"], tmp_path, capsys)
    blob = engine_blob(Path(result["environment"]["engine"]))
    assert blob["flags"] == [] and blob["qdq"] and blob["calibration"] is None
    assert not gpu.trt_errors and gpu.memory == {}


# ------------------------------------------------------------------------------------------------
# jetson/runner.py --batch-dir: many models in one process


def write_convs(folder: Path, widths: dict[str, int]) -> None:
    """One-conv models (deployopt.layers.conv_model, as the per-layer sweep writes them), by name."""
    from deployopt.layers import ConvShape, conv_model

    folder.mkdir(exist_ok=True)
    for name, k in widths.items():
        (folder / f"{name}.onnx").write_bytes(conv_model(ConvShape(1, 8, 16, 16, k)).SerializeToString())


def test_runner_batch_dir_times_each_model_as_a_run_of_its_own_would(
    surface: tuple[str, types.ModuleType, FakeGpu],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--batch-dir: every DIR/*.onnx in name order, in one process whose CUDA binding is set up
    once; each result is DIR/<stem>.json, the document the single-model mode writes for that model
    with the same flags (same samples, same engine key), its path printed as it is written. A
    result an earlier batch left for one of the models is removed first; all GPU memory is freed."""
    version, _, gpu = surface
    runner = load_runner()
    made: list[str | None] = []
    cuda_api = runner.cuda_api
    monkeypatch.setattr(runner, "cuda_api", lambda prefer=None: made.append(prefer) or cuda_api(prefer))
    folder = tmp_path / "batch"
    write_convs(folder, {"b": 16, "a": 8, "c": 24})
    (folder / "b.json").write_text("left by an earlier batch\n")
    cuda = ["--cuda", "pycuda"] if version == V82 else []
    # 10 passes a model: the fake's pass durations repeat every 5, so a model's samples do not
    # depend on how many passes the process ran before it
    flags = ["--dtype", "fp32", "--runs", "6", "--warmup", "4", *cuda]
    rc = runner.main(["--batch-dir", str(folder), *flags, "--engine-dir", str(tmp_path / "batch_engines")])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.splitlines() == [str(folder / f"{n}.json") for n in "abc"]
    assert made == [cuda[1] if cuda else None]  # one CUDA binding for the three models
    assert err.count("built engine ") == 3 and not gpu.trt_errors and gpu.memory == {}
    for name in "abc":
        batch = json.loads((folder / f"{name}.json").read_text())
        single = run_runner([str(folder / f"{name}.onnx"), *flags], tmp_path, capsys)
        for doc in (batch, single):
            doc["environment"].pop("engine_build_s")  # the wall time of a build
            doc.pop("measured_at")  # when each was timed (a batch result records it as a single run's)
        assert batch["environment"].pop("engine") == str(tmp_path / "batch_engines" / Path(
            single["environment"].pop("engine")).name)  # fmt: skip
        assert batch == single and batch["model"]["file"] == f"{name}.onnx"


def test_runner_batch_dir_stops_at_the_first_model_that_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One line naming the model, exit 2; the results written before it stay, none after it (an
    earlier batch's result for a later model is not left to be taken for this one's)."""
    install(monkeypatch, V10, "bindings")
    folder = tmp_path / "batch"
    write_convs(folder, {"a": 8, "b": 16, "c": 24})
    broken = onnx.load(str(folder / "b.onnx"))
    del broken.graph.input[:]
    onnx.save(broken, str(folder / "b.onnx"))
    (folder / "c.json").write_text("left by an earlier batch\n")
    rc = load_runner().main(["--batch-dir", str(folder), "--runs", "5", "--engine-dir", str(tmp_path / "e")])
    out, err = capsys.readouterr()
    assert rc == 2 and out == f"{folder / 'a.json'}\n"
    assert err.splitlines()[-1] == (
        f"error: b.onnx: TensorRT cannot parse {folder / 'b.onnx'}: In node -1 (parseGraph): "
        "INVALID_GRAPH: the graph has no inputs"
    )
    assert [line for line in err.splitlines() if line.startswith("error")] == [err.splitlines()[-1]]
    assert load_timing(folder / "a.json").runs == 5
    assert sorted(p.name for p in folder.glob("*.json")) == ["a.json"]


# ================================================================================================
# an engine built with several optimization profiles (users push prebuilt ones)

#: profile 0 takes batch 1 to 4, profile 1 batch 8 to 16 (as a user's engine for two batch ranges)
TWO_PROFILES = [
    {"input": [[1, 3, 32, 32], [2, 3, 32, 32], [4, 3, 32, 32]]},
    {"input": [[8, 3, 32, 32], [8, 3, 32, 32], [16, 3, 32, 32]]},
]


def two_profile_engine(version: str, model: Path, engine: Path) -> Path:
    """An engine of the fake `version` for the dynamic-batch `model` with the two profiles above:
    built with one (deployopt builds no other), its plan then given the second, as a user's own
    build with two add_optimization_profile calls would have it."""
    gpu = FakeGpu(*DEVICES[version])
    with pytest.MonkeyPatch.context() as m:
        m.setitem(sys.modules, "tensorrt", make_tensorrt(version, gpu))
        options = opts(engine.parent, input_shapes={"input": [2, 3, 32, 32]})
        build_engine(str(model), options, str(engine))
    blob = engine_blob(engine)
    blob["profiles"] = TWO_PROFILES
    engine.write_bytes(ENGINE_MAGIC + json.dumps(blob).encode())
    return engine


def test_fake_82_lists_the_bindings_of_every_optimization_profile(
    monkeypatch: pytest.MonkeyPatch, zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """The fake's 8.2 binding API as NvInferRuntime.h (8.x) documents it for K profiles:
    getNbBindings counts every profile's bindings, profile p's at p*n .. p*n+n-1 and named
    "x [profile p]" for p > 0; the first context runs profile 0 (createExecutionContext), so
    setBindingDimensions of another profile's binding fails; enqueueV2 reads the array by binding
    index, a slot for every binding (a shorter list is read past its end, pyCore.cpp hands TensorRT
    bindings.data()). The name-based API of 8.5 and 10.x lists each I/O tensor once."""
    engine = two_profile_engine(V82, zoo_model_path("mobilenet_like_dynamic"), tmp_path / "two.engine")
    trt, gpu = install(monkeypatch, V82, "pycuda")
    e = trt.Runtime(trt.Logger()).deserialize_cuda_engine(engine.read_bytes())
    names = ["input", "logits", "input [profile 1]", "logits [profile 1]"]
    assert e.num_optimization_profiles == 2 and e.num_bindings == 4
    assert [e.get_binding_name(i) for i in range(4)] == names
    assert [e.binding_is_input(i) for i in range(4)] == [True, False, True, False]
    assert e.get_binding_index("logits [profile 1]") == 3 and tuple(e.get_binding_shape(2)) == (-1, 3, 32, 32)
    context = e.create_execution_context()
    assert not context.set_binding_shape(2, (8, 3, 32, 32))
    assert gpu.trt_errors == ["set_binding_shape: binding 2 not of the active profile"]
    assert context.set_binding_shape(0, (2, 3, 32, 32)) and tuple(context.get_binding_shape(3)) == (2, 10)
    x, y = gpu.alloc(2 * 3 * 32 * 32 * 4), gpu.alloc(2 * 10 * 4)
    gpu.write(x, bytes(2 * 3 * 32 * 32 * 4))
    stream = gpu.new_stream()
    with pytest.raises(FakeMisuse, match="2 bindings for an engine with 4"):
        context.execute_async_v2([x, y], stream)
    assert not context.execute_async_v2([0, 0, x, y], stream)  # profile 1's slots, not profile 0's
    assert not context.execute_async_v2([x, 0, 0, 0], stream)
    assert gpu.trt_errors[1:] == [
        "execute_async_v2: tensor 'input' has no address",
        "execute_async_v2: tensor 'logits' has no address",
    ]
    with pytest.raises(FakeMisuse, match=r"'input' \[2, 3, 32, 32\] needs 24576 bytes"):
        context.execute_async_v2([y, x, 0, 0], stream)
    assert context.execute_async_v2([x, y, 0, 0], stream)
    assert gpu.runs[-1]["addresses"] == {"input": x, "logits": y}
    for version in (V85, V10):
        v3 = make_tensorrt(version, FakeGpu(*DEVICES[version]))
        engine = two_profile_engine(version, zoo_model_path("mobilenet_like_dynamic"), tmp_path / "v3.engine")
        e = v3.Runtime(v3.Logger()).deserialize_cuda_engine(engine.read_bytes())
        assert e.num_optimization_profiles == 2 and e.num_io_tensors == 2
        assert [e.get_tensor_name(i) for i in range(2)] == ["input", "logits"]


@pytest.mark.parametrize("per_layer", [False, True], ids=["timing", "per_layer"])
def test_the_backend_times_profile_0_of_a_two_profile_engine(
    surface: tuple[str, types.ModuleType, FakeGpu],
    per_layer: bool,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """A prebuilt engine with two optimization profiles: on 8.2-8.4 its num_bindings counts both,
    and the backend took "input [profile 1]" for a second input (a dynamic one --input-shape did not
    name, and a binding the active profile 0 cannot be given a shape for). Now it sets and
    allocates profile 0's bindings only and hands execute_async_v2 / execute_v2 a slot for each
    binding, 0 in profile 1's. The name-based API (8.5, 10.x) lists each tensor once."""
    version, _, gpu = surface
    engine = two_profile_engine(version, zoo_model_path("mobilenet_like_dynamic"), tmp_path / "two.engine")
    shapes = {"input": [2, 3, 32, 32]}
    out = time_engine(str(engine), opts(tmp_path), shapes, per_layer, prebuilt=True)
    assert out["timing"]["environment"]["input_shapes"] == shapes
    sizes = {"input": 2 * 3 * 32 * 32 * 4, "logits": 2 * 10 * 4}
    allocs = dict(calls(gpu, "alloc"))
    assert sorted(allocs.values()) == sorted(sizes.values())
    for run in gpu.runs:
        assert {n: allocs[p] for n, p in run["addresses"].items()} == sizes
    if version == V82:
        assert calls(gpu, "IExecutionContext.set_binding_shape") == [(0, (2, 3, 32, 32))]
        assert len(gpu.bindings) == len(gpu.runs)
        assert all(len(b) == 4 and b[2:] == [0, 0] for b in gpu.bindings)
        assert ("execute_v2" in {r["kind"] for r in gpu.runs}) == per_layer
    else:
        assert calls(gpu, "IExecutionContext.set_input_shape") == [("input", (2, 3, 32, 32))]
    assert not gpu.trt_errors and gpu.memory == {}
    if per_layer:
        assert [row["name"] for row in out["layers"]] == engine_blob(engine)["layers"]


def test_runner_times_profile_0_of_a_two_profile_engine(
    surface: tuple[str, types.ModuleType, FakeGpu],
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The runner on the board, the same engine: on 8.2 it asked --shapes for "input [profile 1]";
    now profile 0's bindings are set, allocated and listed, the others' slots 0."""
    version, _, gpu = surface
    engine = two_profile_engine(version, zoo_model_path("mobilenet_like_dynamic"), tmp_path / "two.engine")
    cuda = ["--cuda", "pycuda"] if version == V82 else []
    args = [str(engine), "--shapes", "input:4x3x32x32", "--runs", "3", "--warmup", "1", "--per-layer", *cuda]
    result = run_runner(args, tmp_path, capsys)
    assert result["environment"]["input_shapes"] == {"input": [4, 3, 32, 32]}
    assert [row["name"] for row in result["layers"]] == engine_blob(engine)["layers"]
    allocs = dict(calls(gpu, "alloc"))
    assert sorted(allocs.values()) == sorted([4 * 3 * 32 * 32 * 4, 4 * 10 * 4])
    if version == V82:
        assert calls(gpu, "IExecutionContext.set_binding_shape") == [(0, (4, 3, 32, 32))]
        assert len(gpu.bindings) == len(gpu.runs) == 7
        assert all(len(b) == 4 and b[2:] == [0, 0] and set(b[:2]) == set(allocs) for b in gpu.bindings)
    assert not gpu.trt_errors and gpu.memory == {}
