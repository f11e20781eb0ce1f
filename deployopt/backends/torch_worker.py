"""The torch backend's worker process: `python -m deployopt.backends.torch_worker`.

Why a process of its own: a green context (the SM limit) can be set once per process and must
exist before any cuDNN handle; a model can crash the CUDA context or hang; and the optimizer times
dozens of models, so one warm worker (imports, cuDNN autotuning caches) is reused for all of them.

Protocol: JSON lines. stdin: first a config {"dtype", "sms", "runs", "warmup", "device",
"replays_per_sample", "profile_runs"}, then requests {"op": "measure" | "profile" | "convs" |
"quit", ...}. stdout: one JSON answer per line, {"ok": true, ...} or {"ok": false, "type": error
class name, "error": one line}. Anything libraries print goes to stderr, so stdout carries only
the protocol. "_sleep" and "_exit" exist to test the parent's timeout and crash handling.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

PASS_PREFIX = "deployopt::forward#"
#: environment the parent (deployopt.backends.torch) starts the worker with: its pid, and "1" where
#: it started the worker from its main thread (exit_with_parent)
PARENT_ENV = "DEPLOYOPT_WORKER_PARENT"
DEATH_SIGNAL_ENV = "DEPLOYOPT_WORKER_DEATH_SIGNAL"
PARENT_POLL_S = 0.5
# onnx2torch modules that read some arguments' *values* on the host (.tolist(), .item(),
# torch.Size(...)): Resize's scales, Split's sizes (C2f, YOLOv8), Reshape's shape... On the GPU
# each such read is a device-to-host copy, which CUDA-graph capture refuses. {class name: the
# positions and keywords of those arguments}; a constant that feeds only these stays on the host.
HOST_VALUE_ARGS: dict[str, tuple[int | str, ...]] = {
    "OnnxSplit13": (1, "split"),
    "OnnxResize": (1, 2, 3, "roi", "scales", "sizes"),
    "OnnxResizeV10": (1, "scales"),
    "OnnxReshape": (1, "shape"),
    "OnnxPadDynamic": (1, "pads"),
    "OnnxUnsqueezeDynamicAxes": (1, "axes"),
    "OnnxReduceSumDynamicAxes": (1, "axes"),
    "OnnxSlice": (1, 2, 3, 4, "starts", "ends", "axes", "steps"),
    "OnnxTile": (1, "repeats"),
    "OnnxExpand": (1, "shape"),
}


#: Seconds of back-to-back calls of what is timed, right before its timed loop (trtexec's --warmUp
#: default is 200 ms). On an H100 at 8 SMs, 20 eager warm-up passes and 3 replays left every bench
#: of the bundled ResNet56 2-2.5 % slower over its first 100 of 200 timed replays (~0.25 s), so
#: each run's median sat between a warming and a warm GPU.
SETTLE_S = 0.5


def _settle(run_once: Any, torch: Any, seconds: float = SETTLE_S) -> None:
    """Call `run_once` back to back for `seconds` of wall clock (at least 3 calls), synchronizing
    every few calls, so the timed loop starts on a GPU that has settled."""
    t0 = time.perf_counter()
    calls = 0
    while calls < 3 or time.perf_counter() - t0 < seconds:
        run_once()
        calls += 1
        if calls % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()


class WorkerError(Exception):
    """An error the parent turns into the named deployopt.errors class."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class CaptureFailed(Exception):
    """CUDA-graph capture of a forward pass failed; the model can still be timed eagerly."""


def host_constants(module: Any) -> dict[str, Any]:
    """{attribute path: tensor} of the converted model's constants whose every use is a value
    argument in HOST_VALUE_ARGS, read before the model moves to the GPU so they can be put back."""
    graph = getattr(module, "graph", None)
    if graph is None:  # not an fx GraphModule
        return {}
    mods = dict(module.named_modules())

    def value_use(user: Any, node: Any) -> bool:
        keys = HOST_VALUE_ARGS.get(type(mods.get(user.target)).__name__) if user.op == "call_module" else None
        if not keys:
            return False
        used = [i for i, a in enumerate(user.args) if a is node]
        used += [k for k, a in user.kwargs.items() if a is node]
        return bool(used) and all(u in keys for u in used)

    only_values: dict[str, bool] = {}  # one attribute can back several nodes (one per use)
    for node in graph.nodes:
        if node.op == "call_module" and type(mods.get(node.target)).__name__ == "OnnxConstant":
            path = f"{node.target}.value"
        elif node.op == "get_attr":
            path = str(node.target)
        else:
            continue
        ok = bool(node.users) and all(value_use(u, node) for u in node.users)
        only_values[path] = only_values.get(path, True) and ok
    out = {}
    for path, ok in only_values.items():
        owner, _, attr = path.rpartition(".")
        value = getattr(module.get_submodule(owner) if owner else module, attr, None)
        if ok and hasattr(value, "device"):
            out[path] = value
    return out


def restore_host_constants(module: Any, constants: dict[str, Any]) -> None:
    """Put the constants `host_constants` found back as they were (on the host, original dtype)."""
    for path, value in constants.items():
        owner, _, attr = path.rpartition(".")
        setattr(module.get_submodule(owner) if owner else module, attr, value)


_OOM_ASKED = re.compile(r"Tried to allocate ([\d.]+ [KMGT]?i?B)")
_OOM_FREE = re.compile(r"total capacity of ([\d.]+ [KMGT]?i?B) of which ([\d.]+ [KMGT]?i?B) is free")


def _batch_of(shapes: dict[str, list[int]]) -> int | None:
    """The first input's batch (dim 0), as the "what was timed" line names it."""
    dims = next(iter(shapes.values()), [])
    return dims[0] if dims else None


def refuse_typed_fp16(model: Any, name: str) -> None:
    """A model whose convs/matmuls take fp16 or bf16 (`deployopt fp16`'s output for TensorRT >= 11,
    an fp16 classifier after fp32 convs) is refused in one line: the worker casts every weight to
    the session's dtype, and the model's fp16 Casts feeding those ops met fp32 weights ("torch
    failed running m.onnx: expected scalar type Half but found Float", on the CPU). An fp32 model
    with a Cast to fp16 and back (a mask, a post-processing step) runs: no conv/matmul takes fp16,
    and it was refused for holding any fp16 tensor, though onnx2torch runs it."""
    from deployopt.errors import ModelError
    from deployopt.precision import low_precision_compute

    found = low_precision_compute(model)
    if found is not None:
        typed, what = found
        if typed == "fp16":
            alt = ", or this one with --backend ort"
        elif typed == "mixed fp32/fp16":
            alt = ", or type it fp16 throughout with `deployopt fp16` and time that with --backend ort"
        else:  # bf16: onnxruntime's backend does not run it either
            alt = ""
        raise ModelError(
            f"{name} is typed {typed} inside: the torch backend times fp32 models (making them fp16 "
            f"itself with --dtype fp16), casting every weight to that one dtype, and {what}; time "
            f"the fp32 model it came from{alt}"
        )


def refuse_unconvertible(model: Any, name: str) -> None:
    """Before onnx2torch: a model it cannot take is refused in one line naming the tensor and why.
    A string input (torch has no string tensors) failed after conversion with numpy's "can't
    convert np.ndarray of type numpy.object_"; a graph output no node computes, once constants are
    folded (a Constant's output, an initializer, one computed from 0-size initializers only, the
    graph input itself), failed inside onnx2torch with a bare KeyError: "onnx2torch failed on m.onnx:
    'k'"."""
    from onnx import TensorProto

    from deployopt.errors import ModelError

    graph = model.graph
    inits = {t.name for t in graph.initializer}
    inputs = {i.name for i in graph.input if i.name not in inits}
    for inp in graph.input:
        if inp.name in inputs and inp.type.tensor_type.elem_type == TensorProto.STRING:
            raise ModelError(
                f"input {inp.name!r} of {name} takes strings, which torch has no tensors for: the "
                "torch backend cannot feed it; time the model with --backend ort, or export it "
                "without the string input"
            )
    computed = {out for node in graph.node for out in node.output}
    for out in graph.output:
        if out.name in computed:
            continue
        if out.name in inputs:
            what, why = f"is the graph input {out.name!r} itself", "the caller has it already"
        else:
            what = (
                "is a constant once constants are folded (a Constant node's output, an initializer, "
                "or computed from constants only)"
            )
            why = "it is the same for every input"
        raise ModelError(
            f"graph output {out.name!r} of {name} {what}, and no node computes it: onnx2torch cannot "
            f"convert such an output; remove it from the graph's outputs ({why}), or time the model "
            "with --backend ort"
        )


def _first_line(exc: BaseException) -> str:
    """One line for the user: torch's CUDA out-of-memory text (a paragraph) is cut to what it
    asked for and what was free; any other message to its first line, at most ~300 characters,
    cut between words."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    if "CUDA out of memory" in text:
        asked, free = _OOM_ASKED.search(text), _OOM_FREE.search(text)
        detail = [f"tried to allocate {asked.group(1)}"] if asked else []
        if free:
            detail.append(f"{free.group(2)} of {free.group(1)} free")
        said = f" ({', '.join(detail)})" if detail else ""
        return f"CUDA out of memory{said}; try a smaller --batch"
    line = text.splitlines()[0]
    from deployopt.errors import shorten

    return shorten(line)


class Worker:
    #: load's: the --batch rewrite of the model it loaded last (batch.rebatched_notice), or ""
    rebatched = ""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.dtype_name = config.get("dtype", "fp32")
        self.runs = int(config.get("runs", 100))
        self.warmup = int(config.get("warmup", 20))
        self.sms_requested = config.get("sms")
        self.replays = config.get("replays_per_sample", 1)
        self.profile_runs = int(config.get("profile_runs", 20))
        self.green_context = None
        try:
            import torch
        except ImportError as exc:
            from deployopt.errors import reraise_interrupt

            reraise_interrupt(exc)  # Ctrl-C during the import: not "not installed"
            raise WorkerError(
                "BackendUnavailable", "PyTorch is not installed: pip install 'deployopt[torch]'"
            ) from None
        self.torch = torch
        want = config.get("device", "auto")
        cuda = torch.cuda.is_available() and want != "cpu"
        if want == "cuda" and not cuda:
            raise WorkerError("BackendUnavailable", "PyTorch sees no CUDA GPU")
        self.cuda = cuda
        if not cuda and self.dtype_name != "fp32":
            raise WorkerError(
                "DeployoptError",
                f"backend 'torch' runs {self.dtype_name} only on a CUDA GPU and none is visible; "
                "use --dtype fp32",
            )
        if not cuda and self.sms_requested is not None:
            from deployopt.backends.torch import NO_GPU_FOR_SMS

            raise WorkerError("DeployoptError", NO_GPU_FOR_SMS)
        if not cuda and config.get("cudnn_benchmark_limit") is not None:
            raise WorkerError("DeployoptError", "--cudnn-engines needs a CUDA GPU (cuDNN); none is visible")
        if not cuda and not config.get("cudnn_benchmark", True):
            raise WorkerError(
                "DeployoptError", "--no-cudnn-benchmark needs a CUDA GPU (cuDNN); none is visible"
            )
        self.device_sms = None
        self.smi_gpu: str | None = None
        self.compute_capability = None
        self.gpu_name: str | None = None
        self.cudnn_benchmark = False
        if cuda:
            props = torch.cuda.get_device_properties(0)
            from deployopt.clocks import pci_bus_id

            self.smi_gpu = pci_bus_id(props)  # which GPU nvidia-smi reads clocks of
            self.device_sms = props.multi_processor_count
            self.compute_capability = f"{props.major}.{props.minor}"
            self.gpu_name = props.name
            if self.sms_requested is not None:
                self._set_green_context(int(self.sms_requested))
            # off: cuDNN's heuristics pick each kernel untimed (PyTorch's default, --no-cudnn-benchmark)
            self.cudnn_benchmark = bool(config.get("cudnn_benchmark", True))
            torch.backends.cudnn.benchmark = self.cudnn_benchmark
            limit = config.get("cudnn_benchmark_limit")
            if limit is not None:  # engines cudnn.benchmark times per conv; 0 = all of them
                torch.backends.cudnn.benchmark_limit = int(limit)
        self.dtype = {"fp16": torch.float16, "fp32": torch.float32}[self.dtype_name]
        self.sms = int(self.sms_requested) if self.sms_requested is not None else self.device_sms
        torch.set_grad_enabled(False)

    def _set_green_context(self, sms: int) -> None:
        """Limit every later kernel of this process to `sms` SMs. Before any model or cuDNN handle.
        Here, not in the parent, the count is checked against this GPU's green-context granularity:
        only the worker knows the compute capability."""
        from deployopt.backends.cuda_conv import green_context_refusal, set_sm_limit

        torch = self.torch
        refusal = green_context_refusal(
            sms, self.compute_capability or "0.0", self.gpu_name, self.device_sms or 0
        )
        if refusal:
            raise WorkerError("DeployoptError", refusal)
        if not hasattr(torch.cuda, "GreenContext"):
            raise WorkerError(
                "BackendUnavailable",
                f"torch {torch.__version__} has no torch.cuda.GreenContext (need >= 2.10)",
            )
        self.green_context = set_sm_limit(sms)

    # -- environment and descriptions -------------------------------------------------------

    def environment(self) -> dict[str, Any]:
        from deployopt.environment import collect, usable_cores

        torch = self.torch
        if self.cuda:
            gpu = torch.cuda.get_device_name(0)
            limit = f", {self.sms} SMs (green context)" if self.sms_requested is not None else ""
            device = f"{gpu}{limit}"
        else:
            device = "CPU (no CUDA device)"
        return collect(
            "torch",
            device=device,
            torch=torch.__version__,
            dtype=self.dtype_name,
            sms=self.sms,
            sms_requested=self.sms_requested,
            device_sms=self.device_sms,
            compute_capability=self.compute_capability,
            channels_last=self.cuda,
            cudnn_benchmark=self.cuda and self.cudnn_benchmark,
            cudnn_benchmark_limit=(
                torch.backends.cudnn.benchmark_limit if self.cuda and self.cudnn_benchmark else None
            ),
            cpu_threads=None if self.cuda else torch.get_num_threads(),
            # on the CPU the cores this process may run on, as ort records them (usable_cores): a run
            # under `taskset -c 0` with OMP_NUM_THREADS=2 recorded what a run on both cores did, and
            # shared its per-layer table (the fingerprint's folder). Not on CUDA: the GPU times there
            cpu_cores=None if self.cuda else usable_cores(),
        )

    def _where(self, batch: int | None) -> str:
        b = f", batch {batch}" if batch else ""
        if not self.cuda:
            return f"fp32{b}, CPU (no CUDA device), {self.torch.get_num_threads()} threads"
        sms = (
            f", {self.sms} SMs (green context)"
            if self.sms_requested is not None
            else f", full GPU ({self.device_sms} SMs)"
        )
        from deployopt.environment import cudnn_engines_phrase

        if not self.cudnn_benchmark:
            return f"{self.dtype_name}{b}, channels_last, cuDNN heuristics (cudnn.benchmark off){sms}"
        engines = cudnn_engines_phrase(self.torch.backends.cudnn.benchmark_limit)
        return f"{self.dtype_name}{b}, channels_last, cudnn.benchmark ({engines}){sms}"

    # -- models -----------------------------------------------------------------------------

    def check_memory(self, model: Any, host_checked: dict[str, int] | None = None) -> None:
        """Before converting: host memory for the inputs and weights (and on CPU the activations);
        on CUDA everything at the run's dtype against the GPU's free memory, counting what
        PyTorch's caching allocator holds unused (earlier models') as free. A green context
        limits SMs, not memory: the whole GPU's memory is what there is. `host_checked`: the host
        estimate the parent checked just before this request (optimize's input model): a model of
        that estimate is not checked again. The parent sends it with one request only."""
        from deployopt.memory import RunEstimate, estimate_run, require_host_memory, require_memory

        checked = RunEstimate(**host_checked) if host_checked else None
        require_host_memory(model, "torch, host memory", activations=not self.cuda, checked=checked)
        if self.cuda:
            cuda = self.torch.cuda
            free, _ = cuda.mem_get_info()
            free += cuda.memory_reserved() - cuda.memory_allocated()
            est = estimate_run(model, float_bytes=2 if self.dtype_name == "fp16" else None)
            require_memory(est, free, model, "torch, GPU memory")

    def load(self, req: dict[str, Any]) -> tuple[Any, list[Any], Any, dict[str, list[int]]]:
        """(torch module, inputs, onnx model converted, the inputs' shapes as timed) for a request's
        model. The module's ONNX_NAMES attribute maps the nodes renamed for onnx2torch back."""
        from deployopt.backends.ort import prepare_model
        from deployopt.errors import DeployoptError

        try:
            loaded = prepare_model(req["path"], req.get("batch"), req.get("input_shapes") or {})
            from deployopt.batch import rebatched_notice

            # a batch the file fixes, timed rewritten to --batch: the parent says it once a session
            self.rebatched = rebatched_notice(loaded, req.get("input_shapes") or {})
            refuse_typed_fp16(loaded.model, os.path.basename(req["path"]))
            refuse_unconvertible(loaded.model, os.path.basename(req["path"]))
            self.check_memory(loaded.model, req.get("host_checked"))
        except DeployoptError as exc:
            raise WorkerError(type(exc).__name__, str(exc)) from None
        try:
            from onnx2torch import convert
        except ImportError as exc:
            from deployopt.errors import reraise_interrupt

            reraise_interrupt(exc)
            raise WorkerError(
                "BackendUnavailable",
                f"onnx2torch cannot be imported ({_first_line(exc)}): pip install 'deployopt[torch]'",
            ) from None
        name = os.path.basename(req["path"])
        from deployopt.backends.onnx2torch_opset import to_onnx2torch_opset, torch_safe_node_names

        try:  # what torch's default exporter writes (opset 18-20) in the opset-17 ops onnx2torch reads
            model = to_onnx2torch_opset(loaded.model, name)
        except DeployoptError as exc:
            raise WorkerError(type(exc).__name__, str(exc)) from None
        model, renamed = torch_safe_node_names(model)  # a node named `half` or as an input: not the module's
        try:
            module = convert(model)
        except NotImplementedError as exc:
            m = re.search(r"operation_type='([^']+)', version=(\d+)", str(exc))
            what = f"op {m.group(1)} (version {m.group(2)})" if m else _first_line(exc)
            raise WorkerError("BackendFailed", f"onnx2torch cannot convert {what} in {name}") from None
        except Exception as exc:
            raise WorkerError("BackendFailed", f"onnx2torch failed on {name}: {_first_line(exc)}") from None
        torch = self.torch
        device = "cuda" if self.cuda else "cpu"
        host = host_constants(module)
        module = module.eval().to(device=device, dtype=self.dtype)
        if self.cuda:
            module = module.to(memory_format=torch.channels_last)
        restore_host_constants(module, host)
        from deployopt.backends.ort import random_inputs

        inputs = []
        for arr in random_inputs(loaded.model).values():
            t = torch.from_numpy(arr).to(device)
            if t.is_floating_point():
                t = t.to(self.dtype)
                if self.cuda and t.dim() == 4:
                    t = t.contiguous(memory_format=torch.channels_last)
            inputs.append(t)
        setattr(module, ONNX_NAMES, renamed)  # with the module it names: load's callers stub load
        return module, inputs, model, dict(loaded.input_shapes)  # model: its node names are the module's

    def _forward(self, module: Any, inputs: list[Any], name: str) -> Any:
        try:
            return module(*inputs)
        except Exception as exc:
            raise WorkerError("BackendFailed", f"torch failed running {name}: {_first_line(exc)}") from None

    # -- ops --------------------------------------------------------------------------------

    def measure(self, req: dict[str, Any]) -> dict[str, Any]:
        from deployopt.timing import Timing

        torch = self.torch
        name = os.path.basename(req["path"])
        module, inputs, _, shapes = self.load(req)
        batch = _batch_of(shapes)
        for _ in range(max(self.warmup, 1)):
            self._forward(module, inputs, name)
        before = after = None  # nvidia-smi readings around the timed loop (CUDA only)
        if not self.cuda:
            samples = []
            for _ in range(self.runs):
                t0 = time.perf_counter()
                module(*inputs)
                samples.append((time.perf_counter() - t0) * 1e6)
            timed = f"one eager forward pass, host wall clock (time.perf_counter), {self._where(batch)}"
        else:
            before = self._read_clocks()  # after the warm-up, just before capture and the timed loop
            try:
                samples, replays = self._graph_samples(module, inputs, name)
                what, unit, units = "CUDA-graph replay of one forward pass", "CUDA-graph replay", "replays"
            except CaptureFailed as exc:
                # Ops that read tensor values on the host (shape arithmetic computed on the GPU)
                # cannot be captured; eager passes still time the GPU, plus any launch gaps.
                samples, replays = self._eager_samples(module, inputs, name)
                what = f"eager forward pass (no CUDA graph: {exc}; launch gaps included)"
                unit, units = "eager pass", "passes"
            after = self._read_clocks()  # at once, while the clock is still up (a capped one climbs back)
            per = (
                f"one {unit} per sample"
                if replays == 1
                else f"{replays} back-to-back {units} per sample, divided by {replays}"
            )
            timed = f"{what}, timed with CUDA events ({per}), inputs already on the GPU, {self._where(batch)}"
        del module, inputs
        if self.cuda:
            torch.cuda.empty_cache()
        env = {**self.environment(), "input_shapes": shapes}  # compare flags a resolution change
        if self.cuda:
            from deployopt.clocks import record_in_environment

            record_in_environment(env, before, after)  # the busy SM clock; held down, and how long
        timing = Timing(backend="torch", samples_us=samples, warmup=self.warmup, timed=timed, environment=env)
        return {"timing": timing.to_json(), "rebatched": self.rebatched}

    def _read_clocks(self) -> Any:
        """nvidia-smi's clock reading of this worker's GPU (None: no nvidia-smi, or it failed), taken
        around the timed loop of `measure` only: a per-conv sweep would pay a call per conv."""
        from deployopt.clocks import read_clocks

        gpu = getattr(self, "smi_gpu", None)
        return read_clocks(0 if gpu is None else gpu)

    def _graph_samples(self, module: Any, inputs: list[Any], name: str) -> tuple[list[float], int]:
        torch = self.torch
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    module(*inputs)
            torch.cuda.current_stream().wait_stream(stream)
        except Exception as exc:
            raise WorkerError("BackendFailed", f"torch failed running {name}: {_first_line(exc)}") from None
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                module(*inputs)
        except Exception as exc:
            del graph
            try:
                torch.cuda.synchronize()
            except Exception as sync_exc:  # the capture broke the CUDA context: nothing to time
                raise WorkerError(
                    "BackendFailed", f"CUDA-graph capture failed for {name}: {_first_line(sync_exc)}"
                ) from None
            root = exc  # leaving the capture block raises its own error; the cause is the first one
            while root.__context__ is not None:
                root = root.__context__
            raise CaptureFailed(_first_line(root)) from None
        try:
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
        except Exception as exc:
            raise WorkerError(
                "BackendFailed", f"CUDA-graph replay failed for {name}: {_first_line(exc)}"
            ) from None
        samples, replays = self._event_samples(graph.replay)
        del graph
        return samples, replays

    def _eager_samples(self, module: Any, inputs: list[Any], name: str) -> tuple[list[float], int]:
        def forward() -> None:
            self._forward(module, inputs, name)

        for _ in range(3):  # the failed capture left a fresh allocator pool behind: settle first
            forward()
        self.torch.cuda.synchronize()
        return self._event_samples(forward)

    def _event_samples(self, run_once: Any) -> tuple[list[float], int]:
        """`self.runs` samples (µs per call) of `run_once` (a graph replay or an eager pass), each
        sample `replays` calls back to back between two CUDA events."""
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        replays = self.replays
        if replays == "auto":
            start.record()
            run_once()
            end.record()
            end.synchronize()
            one_us = max(1000.0 * start.elapsed_time(end), 1e-3)
            replays = max(1, min(100, math.ceil(200.0 / one_us)))  # ~200 µs of GPU work per sample
        replays = int(replays)
        _settle(run_once, torch)
        samples = []
        for _ in range(self.runs):
            start.record()
            for _ in range(replays):
                run_once()
            end.record()
            end.synchronize()
            samples.append(1000.0 * start.elapsed_time(end) / replays)
        return samples, replays

    def profile(self, req: dict[str, Any]) -> dict[str, Any]:
        from deployopt import kernels as kz
        from deployopt.backends.base import LayerTime, Profile

        torch = self.torch
        from torch.profiler import ProfilerActivity, profile, record_function

        want_kernels = bool(req.get("kernels"))
        if want_kernels and not self.cuda:
            raise WorkerError("DeployoptError", "--kernels needs a CUDA GPU (no kernel trace on the CPU)")
        name = os.path.basename(req["path"])
        module, inputs, model, shapes = self.load(req)
        renamed: dict[str, str] = getattr(module, ONNX_NAMES, {})
        batch = _batch_of(shapes)
        node_of = {m: renamed.get(n, n) for m, n in module_to_onnx_node(model).items()}
        children = [(n, m) for n, m in module.named_children() if n in node_of]
        stack: list[Any] = []

        def pre(mod: Any, _inp: Any) -> None:
            rf = record_function(mod._deployopt_name)
            rf.__enter__()
            stack.append(rf)

        def post(_mod: Any, _inp: Any, _out: Any) -> None:
            stack.pop().__exit__(None, None, None)

        handles = []
        for n, m in children:
            m._deployopt_name = n
            handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
        for _ in range(max(self.warmup, 1)):
            self._forward(module, inputs, name)
        passes = max(1, min(self.runs, self.profile_runs))
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        if self.cuda:
            torch.cuda.synchronize()
        with profile(activities=activities) as prof:
            for i in range(passes):
                with record_function(f"{PASS_PREFIX}{i}"):
                    module(*inputs)
                if self.cuda:
                    torch.cuda.synchronize()
        for h in handles:
            h.remove()
        trace = _chrome_trace(prof, req.get("trace_path"))
        names = [n for n, _ in children]
        if self.cuda:
            attributed = kz.attribute_kernels(trace, names)
            per_pass = kz.gpu_layer_times(attributed)
            what = "GPU time of each layer's kernels (CUPTI trace, torch profiler), eager forward passes"
        else:
            attributed = {}
            per_pass = kz.cpu_layer_times(trace, names)
            what = "wall time of each layer's module call (torch profiler record_function ranges)"
        ordered = names + ([kz.OTHER] if any(kz.OTHER in p for p in per_pass.values()) else [])
        from deployopt.timing import median_iqr

        stats = {n: median_iqr([p.get(n, 0.0) for p in per_pass.values()] or [0.0]) for n in ordered}
        times = {n: m for n, (m, _) in stats.items()}
        total = sum(times.values()) or 1.0
        last = attributed[max(attributed)] if attributed else {}
        op_of = {renamed.get(n.name, n.name): n.op_type for n in model.graph.node}
        layers = []
        for n in ordered:
            node = node_of.get(n)
            records = [kz.kernel_record(k, self.sms, self.compute_capability) for k in last.get(n, [])]
            layers.append(
                LayerTime(
                    name=node if node else n,
                    time_us=float(times[n]),
                    share=float(times[n]) / total,
                    onnx_nodes=[node] if node else [],
                    kernels=records if want_kernels else [],
                    extra={"module": n, **({"op": op_of[node]} if node in op_of else {})},
                    iqr_us=stats[n][1],
                )
            )
        del module, inputs, trace
        if self.cuda:
            torch.cuda.empty_cache()
        timed = f"{what}; median over {passes} profiled passes, {self._where(batch)}"
        prof_obj = Profile(
            backend="torch", layers=layers, environment=self.environment(), timed=timed, runs=passes
        )
        return {"profile": prof_obj.to_json(), "rebatched": self.rebatched}

    def convs(self, req: dict[str, Any]) -> dict[str, Any]:
        if not self.cuda:
            raise WorkerError("DeployoptError", "direct cuDNN conv timing needs a CUDA GPU")
        from deployopt.backends import cuda_conv
        from deployopt.layers import ConvShape

        shapes = [ConvShape.from_json(s) for s in req["shapes"]]
        results = cuda_conv.time_convs(
            shapes, self.dtype_name, samples=self.runs, benchmark=self.cudnn_benchmark
        )
        return {"results": results, "environment": self.environment(), "where": self._where(None)}


def _chrome_trace(prof: Any, trace_path: str | None) -> Any:
    """The profiler's Chrome trace, read back, and kept at `trace_path` (--trace-dir) if given.

    Exported into a private folder in TMPDIR, so that torch's own `<path>.tmp` (left behind when a
    full disk stops its write) goes with it; kept by a copy renamed within the trace folder, which
    may be on another filesystem than TMPDIR (a rename across them is EXDEV)."""
    from deployopt.errors import DeployoptError, trace_failed
    from deployopt.fileio import atomic_path

    try:
        with tempfile.TemporaryDirectory(prefix="deployopt-trace-") as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)  # a full disk: a truncated .tmp and no trace, no error
            with open(path) as f:
                trace = json.load(f)
            if trace_path:
                with atomic_path(trace_path) as dst:
                    shutil.copyfile(path, dst)
    except DeployoptError as exc:  # the trace folder: cannot write …
        raise WorkerError(type(exc).__name__, str(exc)) from None
    except (OSError, ValueError) as exc:
        raise WorkerError("BackendFailed", trace_failed("the torch profiler's", exc)) from None
    return trace


#: the attribute of a loaded module holding {node name in the model converted: the file's name}
#: for the nodes torch_safe_node_names renamed (a node named `half` clashes with Module.half)
ONNX_NAMES = "_deployopt_onnx_names"


def module_to_onnx_node(model: Any) -> dict[str, str]:
    """{onnx2torch submodule name: ONNX node name}, by the names onnx2torch gives its submodules
    (node name with '.' → '/', '_1', '_2' … for repeats, op type for unnamed nodes)."""
    try:
        from onnx2torch.onnx_graph import OnnxGraph

        make = OnnxGraph.generate_node_name
    except (ImportError, AttributeError):

        def make(node: Any) -> str:
            return (f"{node.domain}/" + (node.name.replace(".", "/") or node.op_type)).lstrip("/")

    counters: dict[str, int] = {}
    out = {}
    for node in model.graph.node:
        base = make(node)
        k = counters.get(base, 0)
        counters[base] = k + 1
        out[base + (f"_{k}" if k else "")] = node.name or node.op_type
    return out


def _with_warnings(fn: Any, req: dict[str, Any]) -> dict[str, Any]:
    """`fn(req)`, with the memory warnings it raised as "warnings" (one line each): the parent
    raises them again, so a run close to the GPU's memory says so on the user's terminal."""
    import warnings

    from deployopt.memory import MemoryRiskWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MemoryRiskWarning)
        try:
            answer = fn(req)
        except Exception as exc:  # the warning matters most when the run then fails: keep it
            exc.memory_warnings = _memory_lines(caught)  # type: ignore[attr-defined]
            raise
    lines = _memory_lines(caught)
    return {**answer, "warnings": lines} if lines else answer


def _memory_lines(caught: list[Any]) -> list[str]:
    from deployopt.memory import MemoryRiskWarning

    return [str(w.message) for w in caught if issubclass(w.category, MemoryRiskWarning)]


def serve(stdin: Any, proto: Any) -> int:
    def send(obj: dict[str, Any]) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    def fail(kind: str, message: str, exc: BaseException | None = None) -> None:
        lines = getattr(exc, "memory_warnings", None)
        send({"ok": False, "type": kind, "error": message, **({"warnings": lines} if lines else {})})

    line = stdin.readline()
    if not line:
        return 0
    try:
        worker = Worker(json.loads(line))
        send({"ok": True, "environment": worker.environment(), "cuda": worker.cuda})
    except WorkerError as exc:
        fail(exc.kind, str(exc))
        return 1
    except Exception as exc:
        traceback.print_exc()
        fail("BackendFailed", f"torch worker failed to start: {type(exc).__name__}: {_first_line(exc)}")
        return 1
    for line in stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        op = req.get("op")
        try:
            if op == "quit":
                send({"ok": True})
                return 0
            if op == "_sleep":
                time.sleep(float(req.get("seconds", 3600)))
                send({"ok": True})
            elif op == "_exit":
                os._exit(int(req.get("code", 3)))
            elif op in ("measure", "profile", "convs"):
                send({"ok": True, **_with_warnings(getattr(worker, op), req)})
            else:
                fail("BackendFailed", f"unknown worker op {op!r}")
        except WorkerError as exc:
            fail(exc.kind, str(exc), exc)
        except Exception as exc:
            traceback.print_exc()
            fail("BackendFailed", f"torch worker error: {type(exc).__name__}: {_first_line(exc)}", exc)
    return 0


def _death_signal() -> None:
    """Linux: SIGKILL this process when the thread that started it ends (prctl PR_SET_PDEATHSIG),
    at once, even while a CUDA call holds the GIL. Anywhere else, or without prctl: nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def exit_with_parent() -> None:
    """End the worker when deployopt does. It learned only at its next stdin read or answer write,
    so a parent killed with SIGKILL (the OOM killer, `timeout -s KILL`) left it timing its model,
    holding the GPU, for as long as that took. On Linux a death signal (when the parent started it
    from its main thread: Linux sends it when that thread ends); on every POSIX system a thread
    that exits once the parent is not the one it started with. A parent already gone when this
    runs (the race prctl leaves) is told by its pid, from the environment: the parent starts
    sys.executable itself, so on POSIX the worker's parent is that pid while it lives. Elsewhere
    (Windows): nothing."""
    if os.name != "posix":
        return
    parent = os.getppid()
    claimed = os.environ.get(PARENT_ENV, "")
    if claimed.isdigit() and int(claimed) != parent:
        os._exit(1)  # reparented before it started: its parent is dead already
    if claimed and os.environ.get(DEATH_SIGNAL_ENV) == "1":
        _death_signal()
    if os.getppid() != parent:  # died between the first look and prctl
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="deployopt-parent-watch", daemon=True).start()


def main() -> None:
    exit_with_parent()
    # Keep the protocol channel clean: our answers go to a private copy of stdout, and fd 1 (which
    # C libraries and print() write to) is pointed at stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.exit(serve(sys.stdin, proto))


if __name__ == "__main__":
    main()
