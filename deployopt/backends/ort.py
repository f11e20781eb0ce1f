"""onnxruntime backend: the one that runs everywhere (CPU here; the CUDA EP where installed).

Timing: warm-up runs, then `runs` calls of `InferenceSession.run`, each timed on the host with
`time.perf_counter` (inputs already in host memory, outputs copied back: what an application
calling onnxruntime sees). Per-layer times come from onnxruntime's own profiler, whose node names
are those of the *optimized* graph (fused Conv+BN+ReLU, NCHWc reorders); they are mapped back to
the ONNX nodes they cover where the names allow.
"""

from __future__ import annotations

import bisect
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import TYPE_CHECKING, Any

from deployopt.backends.base import Backend, LayerTime, MeasureOptions, Profile, Session
from deployopt.errors import BackendFailed, BackendUnavailable, DeployoptError
from deployopt.timing import Timing

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from deployopt.model import LoadedModel

NODE_SUFFIX = "_kernel_time"


def prepare_model(
    path: str | os.PathLike[str], batch: int | None = None, input_shapes: dict[str, list[int]] | None = None
) -> LoadedModel:
    """Load through deployopt.model (constants folded, static shapes), with the batch overridden.

    `batch` replaces dim 0 of every graph input whose shape was not given explicitly in
    `input_shapes`; shape inference then checks that the graph really takes that batch (a Reshape
    with a hard-coded batch fails here, as a ModelError, not later inside a backend).
    """
    import onnx

    from deployopt.errors import ModelError
    from deployopt.model import load_model

    requested = {k: list(v) for k, v in (input_shapes or {}).items()}
    if batch is None and not requested:
        return load_model(path, requested)
    if batch is not None and batch < 1:
        raise DeployoptError("--batch must be at least 1")
    try:
        raw = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise ModelError(f"{path}: not a readable ONNX model ({_first_line(exc)})") from None
    inits = {t.name for t in raw.graph.initializer}
    current = {}
    for inp in raw.graph.input:
        if inp.name in inits:
            continue
        dims = inp.type.tensor_type.shape.dim
        current[inp.name] = [d.dim_value if d.HasField("dim_value") else 0 for d in dims]
        if batch is None or inp.name in requested or not dims:
            continue
        rest = current[inp.name][1:]
        if any(d < 1 for d in rest):
            raise ModelError(
                f"input {inp.name!r} has dynamic non-batch dims; give them with "
                f"--input-shape {inp.name}:{batch}x3x224x224"
            )
        requested[inp.name] = [batch, *rest]
    return load_model(path, requested)


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs for every graph input (latency does not depend on the values for CNNs)."""
    import numpy as np
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        ttype = inp.type.tensor_type
        dims = [d.dim_value for d in ttype.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(ttype.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[inp.name] = rng.standard_normal(dims).astype(dtype)
        else:
            feeds[inp.name] = np.zeros(dims, dtype=dtype)
    return feeds


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


# ---------------------------------------------------------------------------------------------
# Profile parsing: pure functions over onnxruntime's profiler JSON (a list of chrome-trace events).


def node_durations(events: list[dict[str, Any]], runs: int) -> dict[str, list[float]]:
    """{optimized-graph node name: [µs per run]} over the last `runs` `model_run` events.

    onnxruntime records every run since the session was created (warm-up included), so events are
    assigned to runs by time and only the last `runs` runs are kept. A node that runs several
    times in one run (a loop) has its durations summed within the run.
    """
    run_ranges = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    )
    if not run_ranges:
        raise BackendFailed("onnxruntime profile has no model_run events")
    kept = run_ranges[-runs:]
    starts = [r[0] for r in kept]
    per_run: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(kept))
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith(NODE_SUFFIX):
            continue
        ts = float(e["ts"])
        i = bisect.bisect_right(starts, ts) - 1
        if i < 0 or ts > kept[i][1]:
            continue
        per_run[e["name"][: -len(NODE_SUFFIX)]][i] += float(e.get("dur", 0))
    return dict(per_run)


def map_to_onnx_nodes(ort_names: list[str], model: onnx.ModelProto) -> dict[str, list[str]]:
    """ONNX nodes each optimized-graph node covers.

    An optimized node keeps the name of an ONNX node, or is named after the tensor it produces
    (NCHWc: "<tensor>_nchwc"). Its ONNX node is then extended backwards through producers that have
    no profiler entry of their own and feed only that chain: the Conv and BatchNormalization a
    fused Conv+BN+ReLU swallowed. Names that match nothing (layout reorders) map to [].
    """
    nodes = list(model.graph.node)
    by_name = {n.name: n for n in nodes if n.name}
    producer = {o: n for n in nodes for o in n.output if o}
    consumers: dict[str, int] = defaultdict(int)
    for n in nodes:
        for i in n.input:
            consumers[i] += 1
    graph_outputs = {o.name for o in model.graph.output}
    tensor_names = sorted(producer, key=len, reverse=True)

    direct: dict[str, Any] = {}
    for name in ort_names:
        node = by_name.get(name)
        if node is None:
            for t in tensor_names:  # longest tensor name that prefixes the node name
                if name.startswith(t):
                    node = producer[t]
                    break
        if node is not None:
            direct[name] = node
    claimed = {id(n) for n in direct.values()}
    out: dict[str, list[str]] = {}
    for name in ort_names:
        node = direct.get(name)
        if node is None:
            out[name] = []
            continue
        chain = [node]
        cur = node
        while True:
            data_inputs = [i for i in cur.input if i in producer]
            if len(data_inputs) != 1:
                break
            prev = producer[data_inputs[0]]
            if id(prev) in claimed or any(consumers[o] != 1 or o in graph_outputs for o in prev.output):
                break
            claimed.add(id(prev))
            chain.append(prev)
            cur = prev
        out[name] = [n.name or n.op_type for n in reversed(chain)]
    return out


def layers_from_profile(
    events: list[dict[str, Any]], runs: int, model: onnx.ModelProto | None = None
) -> list[LayerTime]:
    """Per-node LayerTime (median µs per run, share of the summed node time), in execution order."""
    durations = node_durations(events, runs)
    order: dict[str, float] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") == "Node" and name.endswith(NODE_SUFFIX):
            order.setdefault(name[: -len(NODE_SUFFIX)], float(e["ts"]))
    names = sorted(durations, key=lambda n: order.get(n, 0.0))
    op_types = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") == "Node" and name.endswith(NODE_SUFFIX):
            op_types.setdefault(name[: -len(NODE_SUFFIX)], (e.get("args") or {}).get("op_name"))
    mapping = map_to_onnx_nodes(names, model) if model is not None else {n: [] for n in names}
    times = {n: float(median(durations[n])) for n in names}
    total = sum(times.values()) or 1.0
    return [
        LayerTime(
            name=n,
            time_us=times[n],
            share=times[n] / total,
            onnx_nodes=mapping[n],
            extra={"op": op_types[n]} if op_types.get(n) else {},
        )
        for n in names
    ]


# ---------------------------------------------------------------------------------------------


class OrtSession(Session):
    def __init__(self, backend: OrtBackend, options: MeasureOptions) -> None:
        super().__init__(backend, options)
        import onnxruntime as ort

        self._ort = ort
        self.providers = backend.providers()

    @property
    def runs_on_gpu(self) -> bool:
        return self.providers[0] != "CPUExecutionProvider"

    def _session(self, model: onnx.ModelProto, profile_dir: str | None = None) -> Any:
        ort = self._ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 4  # errors come back as one-line exceptions; the log would repeat them
        if profile_dir is not None:
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(profile_dir, "ort_profile")
        try:
            return ort.InferenceSession(model.SerializeToString(), so, providers=self.providers)
        except Exception as exc:
            raise BackendFailed(f"onnxruntime cannot load the model: {_first_line(exc)}") from None

    def _run(self, sess: Any, feeds: dict[str, Any], n: int) -> list[float]:
        samples = []
        try:
            for _ in range(n):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                samples.append((time.perf_counter() - t0) * 1e6)
        except Exception as exc:
            raise BackendFailed(f"onnxruntime failed running the model: {_first_line(exc)}") from None
        return samples

    def _timed(self, batch: int | None, what: str) -> str:
        b = f", batch {batch}" if batch else ""
        return (
            f"{what}, fp32{b}, {self.providers[0]}, ORT_ENABLE_ALL graph optimizations, "
            f"host wall clock (time.perf_counter), inputs in host memory"
        )

    def _environment(self) -> dict[str, Any]:
        from deployopt.environment import collect

        return collect(self.backend.name, provider=self.providers[0], device=self.providers[0])

    @staticmethod
    def _batch(loaded: LoadedModel) -> int | None:
        dims = next(iter(loaded.input_shapes.values()), [])
        return dims[0] if dims else None

    def check_memory(self, loaded: LoadedModel) -> None:
        """Host memory: everything on the CPU provider; with the CUDA EP the activations live on the
        GPU, which is not queried (only the inputs and weights the host holds are checked)."""
        from deployopt.memory import require_host_memory

        on_host = self.providers[0] == "CPUExecutionProvider"
        require_host_memory(loaded.model, "onnxruntime, host memory", activations=on_host)

    def measure(self, model_path: Path) -> Timing:
        opts = self.options
        loaded = prepare_model(model_path, opts.batch, opts.input_shapes)
        self.check_memory(loaded)
        sess = self._session(loaded.model)
        feeds = random_inputs(loaded.model)
        self._run(sess, feeds, opts.warmup)
        samples = self._run(sess, feeds, opts.runs)
        return Timing(
            backend=self.backend.name,
            samples_us=samples,
            warmup=opts.warmup,
            timed=self._timed(self._batch(loaded), "one InferenceSession.run call (one forward pass)"),
            environment=self._environment(),
        )

    def profile(self, model_path: Path, kernels: bool = False) -> Profile:
        if kernels:
            raise DeployoptError(
                "backend 'ort' has no kernel-level trace (--kernels needs the torch backend on CUDA)"
            )
        opts = self.options
        loaded = prepare_model(model_path, opts.batch, opts.input_shapes)
        self.check_memory(loaded)
        feeds = random_inputs(loaded.model)
        with tempfile.TemporaryDirectory(prefix="deployopt-ort-") as tmp:
            sess = self._session(loaded.model, profile_dir=tmp)
            self._run(sess, feeds, opts.warmup)
            self._run(sess, feeds, opts.runs)
            path = sess.end_profiling()
            with open(path) as f:
                events = json.load(f)
        layers = layers_from_profile(events, opts.runs, loaded.model)
        return Profile(
            backend=self.backend.name,
            layers=layers,
            environment=self._environment(),
            timed=self._timed(
                self._batch(loaded),
                "per optimized-graph node: median over runs of onnxruntime's profiler node time",
            ),
            runs=opts.runs,
        )


class OrtBackend(Backend):
    name = "ort"
    description = "onnxruntime (CPU execution provider; CUDA EP where onnxruntime-gpu is installed)"
    dtypes = ("fp32",)
    can_limit_sms = False

    def providers(self) -> list[str]:
        import onnxruntime as ort

        available = ort.get_available_providers()
        chosen = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        return chosen or ["CPUExecutionProvider"]

    def availability(self) -> tuple[bool, str]:
        try:
            import onnxruntime as ort
        except ImportError:
            return False, "onnxruntime is not installed: pip install onnxruntime"
        return True, f"onnxruntime {ort.__version__}, {self.providers()[0]}, fp32"

    def open(self, options: MeasureOptions) -> Session:
        ok, why = self.availability()
        if not ok:
            raise BackendUnavailable(f"backend 'ort' is unavailable: {why}")
        if options.dtype != "fp32":
            raise DeployoptError(
                f"backend 'ort' runs fp32 only (asked for {options.dtype}); "
                "fp16/int8 need the torch or tensorrt backend"
            )
        self.check_options(options)
        return OrtSession(self, options)
