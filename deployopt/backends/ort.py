"""onnxruntime backend: the one that runs everywhere (CPU here; the CUDA EP where installed).

Timing: warm-up runs, then `runs` calls of `InferenceSession.run`, each timed on the host with
`time.perf_counter` (inputs already in host memory, outputs copied back: what an application
calling onnxruntime sees). Per-layer times come from onnxruntime's own profiler, whose node names
are those of the *optimized* graph (fused Conv+BN+Add+ReLU, NCHWc reorders); onnxruntime writes
that graph next to the profile, and every ONNX node is mapped through it to the one kernel that
computes it (or listed as removed or unmapped).
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployopt.backends.base import Backend, LayerTime, MeasureOptions, Profile, Session
from deployopt.batch import rebatched_notice
from deployopt.errors import (
    BackendFailed,
    BackendUnavailable,
    DeployoptError,
    first_line,
    onnxruntime_reason,
    reraise_interrupt,
    shorten,
    trace_failed,
)
from deployopt.precision import typed_precision
from deployopt.timing import Timing, median_iqr

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from deployopt.layers import ConvShape
    from deployopt.memory import RunEstimate
    from deployopt.model import LoadedModel

#: What a record's "timed" line says of a model onnxruntime ran in a precision it is typed in
#: (precision.typed_precision), where an fp32 model's says "fp32".
TYPED_PHRASES = {
    "fp16": "fp16 as typed in the model",
    "bf16": "bf16 as typed in the model",
    "int8": "int8 from the model's Q/DQ nodes",
}
NODE_SUFFIX = "_kernel_time"
OPTIMIZED_NAME = "optimized.onnx"


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
    from deployopt.model import input_shape_arg, load_model

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
                f"--input-shape {input_shape_arg(inp.name, f'{batch}x3x224x224')}"
            )
        requested[inp.name] = [batch, *rest]
    return load_model(path, requested)


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs for every graph input (latency does not depend on the values for CNNs):
    deployopt.fidelity.random_values, as verify's random inputs: standard normals for float inputs,
    integers over the type's range for a uint8 one (pixels a model with its preprocessing inside
    casts itself; 0–15 for wider integers), a dynamic dim as 1. Also what importance's
    dead-channel probe feeds."""
    import numpy as np
    from onnx import helper

    from deployopt.fidelity import random_values

    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        ttype = inp.type.tensor_type
        dims = [max(d.dim_value, 1) for d in ttype.shape.dim]
        feeds[inp.name] = random_values(rng, dims, helper.tensor_dtype_to_np_dtype(ttype.elem_type))
    return feeds


def _first_line(exc: BaseException) -> str:
    return shorten(first_line(exc))


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
    """ONNX nodes each optimized-graph node covers, from node names alone (the fallback when
    onnxruntime could not write its optimized graph; `map_through_optimized_graph` is exact).

    An optimized node keeps the name of an ONNX node, or is named after the tensor it produces
    (NCHWc: "<tensor>_nchwc"). Its ONNX node is then extended backwards through producers that have
    no profiler entry of their own and feed only that chain: the Conv and BatchNormalization a
    fused Conv+BN+ReLU swallowed. Ops fused *after* a kept name (a FusedConv's Add and Relu) are not
    seen from names; names that match nothing (layout reorders) map to [].
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


#: Optimized-graph ops that move data between layouts or devices and compute no ONNX node.
LAYOUT_OPS = frozenset({"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost"})
#: ONNX ops onnxruntime deletes outright (no kernel computes them) when their output disappears.
ELIMINATED_OPS = frozenset({"Identity", "Dropout"})


@dataclass
class NodeMapping:
    """Where every ONNX node of the profiled model went in onnxruntime's optimized graph."""

    layers: dict[str, list[str]]  # profiled (optimized-graph) node -> ONNX nodes, in graph order
    removed: list[str] = field(default_factory=list)  # no kernel: eliminated or constant-folded
    unmapped: list[str] = field(default_factory=list)  # computed somewhere the graph does not tell


def _name_inlined_nodes(onodes: list[onnx.NodeProto], ort_names: list[str]) -> None:
    """Give the optimized graph's unnamed nodes the names the profiler knows them by. A function op
    onnxruntime inlines (a HardSwish after a Gemm becomes HardSigmoid and Mul) has unnamed nodes in
    the saved graph, and the profiler calls them "<op>_<node index>" (HardSigmoid_158, Mul_159),
    an index the saved graph does not keep: so the HardSwish was left in no layer. Per op, the
    profiled names no node has, in index order, go to that op's unnamed nodes, in graph order,
    when the two counts agree (else nothing is named: a guess could charge the wrong kernel)."""
    named = {n.name for n in onodes if n.name}
    by_op: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for name in dict.fromkeys(ort_names):
        op, _, index = name.rpartition("_")
        if name not in named and op and index.isdigit():
            by_op[op].append((int(index), name))
    for op, names in by_op.items():
        unnamed = [n for n in onodes if not n.name and n.op_type == op]
        if len(unnamed) == len(names):
            for node, (_, name) in zip(unnamed, sorted(names)):
                node.name = name


def map_through_optimized_graph(
    ort_names: list[str], model: onnx.ModelProto, optimized: onnx.ModelProto
) -> NodeMapping:
    """Attribute every ONNX node of `model` to the one profiled node of `optimized` that computes it.

    onnxruntime's fusions keep the tensors at their boundaries, and their names point at a node
    inside: a FusedConv is named after its Conv and writes the Relu's output tensor; an NCHWc Conv
    is named "<tensor>_nchwc" after the ONNX tensor it computed when it was converted, and writes
    an internal tensor that a ReorderOutput turns back into an ONNX one. So, in this order:

    1. anchors: the ONNX node of the kernel's name, the node whose output tensor the kernel writes
       (through layout reorders) or names;
    2. a fused conv's tail: a Conv/FusedConv kernel with a Sum input also computed the Add that
       consumes its result, and with an `activation` attribute the activation after it (NCHWc
       fuses these after naming the kernel, so the names do not show them);
    3. a node whose output the optimized graph no longer has belongs to the kernel all its
       consumers belong to (the Conv and BN in front of an anchor), or, when its consumers are
       in different kernels, to the one kernel that feeds it.

    Nodes whose output became an initializer (constant-folded) or that onnxruntime deletes
    (Identity, Dropout) have no kernel and are listed as removed; any node still without a kernel
    is listed as unmapped, never dropped.
    """
    from onnx import helper

    profiled = set(ort_names)
    onodes = list(optimized.graph.node)
    _name_inlined_nodes(onodes, ort_names)
    oby_name = {n.name: n for n in onodes if n.name}
    oproducer = {t: n for n in onodes for t in n.output if t}
    oinits = {t.name for t in optimized.graph.initializer}
    nodes = list(model.graph.node)
    onnx_names = {n.name for n in nodes if n.name}

    def kernel_of(tensor: str) -> str | None:
        seen: set[str] = set()
        while tensor in oproducer and tensor not in seen:
            seen.add(tensor)
            node = oproducer[tensor]
            if node.op_type not in LAYOUT_OPS or node.name in onnx_names:
                return node.name if node.name in profiled else None
            data = [i for i in node.input if i]
            if len(data) != 1:
                return None
            tensor = data[0]
        return None

    tensors = sorted({o for n in nodes for o in n.output if o}, key=len, reverse=True)
    tensor_kernel: dict[str, str] = {}
    for onode in onodes:  # "<tensor>_nchwc" (possibly uniquified with a suffix) computed <tensor>
        if onode.name in profiled and "_nchwc" in onode.name and onode.op_type not in LAYOUT_OPS:
            for t in tensors:
                if onode.name.startswith(t + "_nchwc"):
                    tensor_kernel.setdefault(t, onode.name)
                    break
    for t in tensors:
        if t not in tensor_kernel and (k := kernel_of(t)) is not None:
            tensor_kernel[t] = k

    consumers: dict[str, list[int]] = defaultdict(list)
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for t in n.input:
            consumers[t].append(i)
        for t in n.output:
            producer[t] = i
    graph_outputs = {o.name for o in model.graph.output}
    inits = {t.name for t in model.graph.initializer}

    # 1. anchors
    owner: dict[int, str] = {}
    for i, n in enumerate(nodes):
        onode = oby_name.get(n.name) if n.name in profiled else None
        if onode is not None and onode.op_type not in LAYOUT_OPS:
            owner[i] = n.name  # fusions keep the name of a node they computed (FusedConv: the Conv)
        elif (k := next((tensor_kernel[o] for o in n.output if o in tensor_kernel), None)) is not None:
            owner[i] = k
    removed = {
        i
        for i, n in enumerate(nodes)
        if i not in owner
        and (
            any(o in oinits for o in n.output)
            or n.op_type in ELIMINATED_OPS
            or n.op_type == "Constant"
            or all(not t or t in inits for t in n.input)  # from initializers only: folded
        )
    }

    def fused_away(i: int) -> bool:
        """Its outputs are gone from the optimized graph (computed inside some kernel)."""
        return (
            i not in owner
            and i not in removed
            and not any(o in oproducer or o in graph_outputs for o in nodes[i].output)
        )

    # 2. a fused conv's tail: folded BN, the Add of its Sum input, its activation
    for kernel in ort_names:
        onode = oby_name.get(kernel)
        if onode is None or onode.op_type not in ("Conv", "FusedConv"):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in onode.attribute}
        act = attrs.get("activation", b"")
        act = act.decode() if isinstance(act, bytes) else str(act)
        want_sum = len(onode.input) > 3 and bool(onode.input[3])
        changed = True
        while changed:
            changed = False
            region = [i for i, k in owner.items() if k == kernel]
            have_act = any(nodes[i].op_type == act for i in region)
            for i in region:
                for o in nodes[i].output:
                    users = consumers[o]
                    if len(users) != 1 or o in oproducer or o in graph_outputs:
                        continue  # a tensor the optimized graph keeps is the kernel's output
                    c = users[0]
                    op = nodes[c].op_type
                    ok = op == "BatchNormalization" or (want_sum and op in ("Add", "Sum"))
                    ok = ok or (bool(act) and op == act and not have_act)
                    if c in owner or c in removed or not ok:
                        continue
                    owner[c] = kernel
                    want_sum = want_sum and op not in ("Add", "Sum")
                    changed = True

    # 3. fused-away nodes: with their consumers' kernel, else with the one kernel feeding them
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(nodes))):  # ONNX graphs are topologically sorted
            if not fused_away(i):
                continue
            users = [c for o in nodes[i].output for c in consumers[o] if c not in removed]
            kinds = {owner.get(c) for c in users}
            if users and len(kinds) == 1 and None not in kinds:
                owner[i] = kinds.pop()  # type: ignore[assignment]
                changed = True
            elif len(kinds - {None}) > 1:
                feeders = {owner.get(producer[t]) for t in nodes[i].input if t in producer}
                if len(feeders) == 1 and None not in feeders:
                    owner[i] = feeders.pop()  # type: ignore[assignment]
                    changed = True

    layers: dict[str, list[str]] = {name: [] for name in ort_names}
    unmapped = []
    for i, n in enumerate(nodes):
        if i in removed:
            continue
        if i in owner:
            layers[owner[i]].append(n.name or n.op_type)
        else:
            unmapped.append(n.name or n.op_type)
    return NodeMapping(
        layers=layers,
        removed=[nodes[i].name or nodes[i].op_type for i in sorted(removed)],
        unmapped=unmapped,
    )


def profile_layers(
    events: list[dict[str, Any]],
    runs: int,
    model: onnx.ModelProto | None = None,
    optimized: onnx.ModelProto | None = None,
) -> tuple[list[LayerTime], NodeMapping]:
    """Per-node LayerTime (median µs per run, share of the summed node time), in execution order,
    and where every ONNX node went: mapped through onnxruntime's optimized graph when it is given,
    else guessed from node names (`map_to_onnx_nodes`), in which case the ONNX nodes no layer
    claims are listed as unmapped rather than dropped."""
    durations = node_durations(events, runs)
    order: dict[str, float] = {}
    op_types: dict[str, Any] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") == "Node" and name.endswith(NODE_SUFFIX):
            order.setdefault(name[: -len(NODE_SUFFIX)], float(e["ts"]))
            op_types.setdefault(name[: -len(NODE_SUFFIX)], (e.get("args") or {}).get("op_name"))
    names = sorted(durations, key=lambda n: order.get(n, 0.0))
    if model is None:
        mapping = NodeMapping(layers={n: [] for n in names})
    elif optimized is not None:
        mapping = map_through_optimized_graph(names, model, optimized)
    else:
        by_names = map_to_onnx_nodes(names, model)
        claimed = {n for nodes in by_names.values() for n in nodes}
        every = [n.name or n.op_type for n in model.graph.node]
        mapping = NodeMapping(layers=by_names, unmapped=[n for n in every if n not in claimed])
    stats = {n: median_iqr(durations[n]) for n in names}
    total = sum(m for m, _ in stats.values()) or 1.0
    layers = [
        LayerTime(
            name=n,
            time_us=stats[n][0],
            share=stats[n][0] / total,
            onnx_nodes=mapping.layers[n],
            extra={"op": op_types[n]} if op_types.get(n) else {},
            iqr_us=stats[n][1],
        )
        for n in names
    ]
    return layers, mapping


@dataclass
class OrtProfile(Profile):
    """A Profile whose JSON also says how the layers were mapped to ONNX nodes and which ONNX
    nodes no profiled kernel computes (so a node is never silently missing from `layers`)."""

    mapped_by: str = ""
    onnx_nodes_removed: list[str] = field(default_factory=list)
    onnx_nodes_unmapped: list[str] = field(default_factory=list)
    onnx_nodes_folded_at_load: list[str] = field(default_factory=list)  # model.folded_at_load

    def to_json(self) -> dict[str, Any]:
        return {
            **super().to_json(),
            "onnx_nodes_mapped_by": self.mapped_by,
            "onnx_nodes_removed": self.onnx_nodes_removed,
            "onnx_nodes_unmapped": self.onnx_nodes_unmapped,
            "onnx_nodes_folded_at_load": self.onnx_nodes_folded_at_load,
        }


# ---------------------------------------------------------------------------------------------


class OrtSession(Session):
    def __init__(self, backend: OrtBackend, options: MeasureOptions) -> None:
        super().__init__(backend, options)
        from deployopt.onnxruntime_compat import import_onnxruntime

        ort = import_onnxruntime()  # without its import's telemetry line

        self._ort = ort
        self.providers = backend.providers()
        self._host_checked: RunEstimate | None = None  # check_memory's estimate, not yet re-met

    @property
    def runs_on_gpu(self) -> bool:
        return self.providers[0] != "CPUExecutionProvider"

    def _session(
        self,
        model: onnx.ModelProto,
        profile_dir: str | None = None,
        save_optimized: bool = False,
        release: bool = False,
        as_file: bool = False,
    ) -> Any:
        """`save_optimized` (with `profile_dir`) also writes the optimized graph the profiler's node
        names come from to `profile_dir`/optimized.onnx, weights in a side file (graph only, small).
        `release`: `model`'s weights are not needed after (`inference_session` may drop them);
        `as_file`: they are, but a big model goes to onnxruntime as a file all the same, not as
        bytes the session would hold as long as it lives (`inference_session`)."""
        ort = self._ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 4  # errors come back as one-line exceptions; the log would repeat them
        if profile_dir is not None:
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(profile_dir, "ort_profile")
            if save_optimized:
                so.optimized_model_filepath = os.path.join(profile_dir, OPTIMIZED_NAME)
                so.add_session_config_entry(
                    "session.optimized_model_external_initializers_file_name", "optimized.weights"
                )
                so.add_session_config_entry(
                    "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
                )
        from deployopt.onnxruntime_compat import inference_session

        try:
            return inference_session(ort, model, so, self.providers, release=release, as_file=as_file)
        except Exception as exc:
            raise BackendFailed(f"onnxruntime cannot load the model: {_first_line(exc)}") from None

    def _run(self, sess: Any, feeds: dict[str, Any], n: int, model_path: Path) -> list[float]:
        """`n` timed runs; a failure names the file and onnxruntime's reason (the op and node that
        failed, without its error code's prefix), on the random inputs fed."""
        samples = []
        try:
            for _ in range(n):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                samples.append((time.perf_counter() - t0) * 1e6)
        except Exception as exc:
            name = Path(model_path).name
            raise BackendFailed(
                f"onnxruntime cannot run {name} (on random inputs): {onnxruntime_reason(exc)}"
            ) from None
        return samples

    def _timed(
        self,
        batch: int | None,
        what: str,
        dtype: str,
        clock: str = "host wall clock (time.perf_counter)",
        model: onnx.ModelProto | None = None,
    ) -> str:
        """`clock`: what read the time (profile's layers: onnxruntime's profiler, not bench's clock).
        `model`: the model run, for what makes an int8 one int8 (a quantize_dynamic model's
        ConvInteger nodes, not Q/DQ nodes: precision.quantized_by)."""
        b = f", batch {batch}" if batch else ""
        phrase = TYPED_PHRASES.get(dtype, dtype)
        if dtype == "int8" and model is not None:
            from deployopt.precision import quantized_by

            phrase = f"int8 from the model's {quantized_by(model)}"
        return (
            f"{what}, {phrase}{b}, {self.providers[0]}, ORT_ENABLE_ALL graph "
            f"optimizations, {clock}, inputs in host memory"
        )

    def _environment(self, dtype: str) -> dict[str, Any]:
        from deployopt.environment import collect, usable_cores

        # dtype: compare (LIKE_FOR_LIKE) names a dtype difference as such, as for the other backends;
        # onnxruntime runs the model as it is typed (typed_precision), whatever --dtype said.
        # cpu_cores and intra_op_threads: a CPU run's latency depends on the cores it may use and the
        # threads onnxruntime runs an op on, and `taskset -c 0` against a 2-core run
        # recorded the same environment, so `compare --strict` saw no difference. _session leaves
        # intra_op_num_threads at SessionOptions' default, so a fresh SessionOptions reads the
        # setting every session uses (0: onnxruntime's own choice, one thread per physical core).
        # onnxruntime: the version of the module that ran, as the torch backend records `torch`: the
        # libraries' versions are distributions' metadata, and with onnxruntime and onnxruntime-gpu
        # both installed (one module, the last written) `compare` named the runtime by the one whose
        # files were overwritten (regression.runtime_version). Recorded only where the distributions
        # would name another version: the key is in the layer cache's device fingerprint, and on a
        # clean install adding it re-keyed every existing ort table (a full re-sweep) for nothing.
        env = collect(
            self.backend.name,
            provider=self.providers[0],
            device=self.providers[0],
            dtype=dtype,
            cpu_cores=usable_cores(),
            intra_op_threads=int(self._ort.SessionOptions().intra_op_num_threads),
        )
        ran = str(getattr(self._ort, "__version__", "")) or None
        libs = env.get("libraries") if isinstance(env.get("libraries"), dict) else {}
        if ran and ran != (libs.get("onnxruntime-gpu") or libs.get("onnxruntime")):
            env["onnxruntime"] = ran
        return env

    @staticmethod
    def _batch(loaded: LoadedModel) -> int | None:
        dims = next(iter(loaded.input_shapes.values()), [])
        return dims[0] if dims else None

    def check_memory(self, loaded: LoadedModel) -> None:
        """Host memory: everything on the CPU provider; with the CUDA EP the activations live on the
        GPU, which is not queried (only the inputs and weights the host holds are checked).
        optimize calls this for its input model before OUTDIR exists; the next model this session
        loads, the same input model, is then not checked (nor warned about) a second time. The
        model's typing is checked here too, before OUTDIR exists."""
        self._check_typed(loaded)
        self._host_checked = self._check_host(loaded, None)

    def _check_typed(self, loaded: LoadedModel) -> str:
        """The precision `loaded` runs in (typed_precision), which --dtype must name: onnxruntime
        converts nothing, and a record must not say fp16 of an fp32 run (nor fp32 of an int8 one)."""
        typed, asked = typed_precision(loaded.model), self.options.dtype
        if typed == asked:
            return typed
        name = loaded.path.name
        if typed not in self.backend.dtypes:  # bf16, mixed fp32/fp16: no --dtype names it
            from deployopt.precision import cannot_run_typed

            raise DeployoptError(cannot_run_typed(self.backend.name, self.backend.dtypes, name, typed))
        if typed != "fp32":
            from deployopt.precision import quantized_by

            what = quantized_by(loaded.model) if typed == "int8" else f"typed {typed} inside"
            raise DeployoptError(
                f"{name} runs in {typed} ({what}): backend 'ort' runs a model as it is typed, so "
                f"--dtype {typed} (its default for this model), not {asked}"
            )
        how = (
            "type it with `deployopt fp16` first, or use the torch or tensorrt backend"
            if asked == "fp16"
            else "quantize it first (Q/DQ nodes, e.g. onnxruntime.quantization.quantize_static), or "
            "use the tensorrt backend"
        )
        raise DeployoptError(
            f"{name} is an fp32 model, and backend 'ort' runs a model as it is typed: for {asked}, {how}"
        )

    def conv_model(self, shape: ConvShape) -> onnx.ModelProto:
        """Single convs in the session's precision, as the model it optimizes is typed: fp16 convs
        typed as `deployopt fp16` types a model, int8 ones with Q/DQ nodes (the base's). An int8
        or fp16 model's per-layer table was timed in fp32 convs, its header said fp32."""
        if self.options.dtype != "fp16":
            return super().conv_model(shape)
        from deployopt.layers import conv_model
        from deployopt.precision import to_fp16

        return to_fp16(conv_model(shape))

    def _check_host(self, loaded: LoadedModel, checked: RunEstimate | None) -> RunEstimate | None:
        from deployopt.memory import require_host_memory

        on_host = self.providers[0] == "CPUExecutionProvider"
        return require_host_memory(
            loaded.model, "onnxruntime, host memory", activations=on_host, checked=checked
        )

    def _check_loaded(self, loaded: LoadedModel) -> None:
        """measure / profile: check_memory's estimate covers the first model after it, once."""
        checked, self._host_checked = self._host_checked, None
        self._check_host(loaded, checked)

    def measure(self, model_path: Path) -> Timing:
        opts = self.options
        loaded = prepare_model(model_path, opts.batch, opts.input_shapes)
        dtype = self._check_typed(loaded)
        self._check_loaded(loaded)
        feeds = random_inputs(loaded.model)
        # its weights go to onnxruntime and are dropped here (nothing below reads them): held, they
        # were a second copy of the model for the whole run
        sess = self._session(loaded.model, release=True)
        self._run(sess, feeds, opts.warmup, model_path)
        samples = self._run(sess, feeds, opts.runs, model_path)
        # once it ran: a run that fails (out of memory at that batch) is its one error line alone
        self.say_once(rebatched_notice(loaded, opts.input_shapes))
        return Timing(
            backend=self.backend.name,
            samples_us=samples,
            warmup=opts.warmup,
            timed=self._timed(
                self._batch(loaded),
                "one InferenceSession.run call (one forward pass)",
                dtype,
                model=loaded.model,
            ),
            # the shapes timed: compare flags a resolution change (the timed line names the batch only)
            environment={**self._environment(dtype), "input_shapes": dict(loaded.input_shapes)},
        )

    def profile(self, model_path: Path, kernels: bool = False) -> Profile:
        from deployopt.model import folded_at_load

        if kernels:
            raise DeployoptError(
                "backend 'ort' has no kernel-level trace (--kernels needs the torch backend on CUDA)"
            )
        opts = self.options
        loaded = prepare_model(model_path, opts.batch, opts.input_shapes)
        dtype = self._check_typed(loaded)
        self._check_loaded(loaded)
        feeds = random_inputs(loaded.model)
        try:
            workdir = tempfile.TemporaryDirectory(prefix="deployopt-ort-")
        except OSError as exc:
            raise _trace_failed(exc) from None
        with workdir as tmp:
            # a big model goes as a file, not as bytes, and keeps its weights: the layers are mapped
            # to its nodes and initializers below, and a second session may be needed
            try:
                sess = self._session(loaded.model, profile_dir=tmp, save_optimized=True, as_file=True)
            except BackendFailed:  # writing the optimized graph failed; a plain session says why not
                sess = self._session(loaded.model, profile_dir=tmp, as_file=True)
            self._run(sess, feeds, opts.warmup, model_path)
            self._run(sess, feeds, opts.runs, model_path)
            try:  # a full disk: onnxruntime writes a truncated trace and says nothing
                path = sess.end_profiling()
                with open(path) as f:
                    events = json.load(f)
            except (OSError, ValueError) as exc:
                raise _trace_failed(exc) from None
            kept = []
            if opts.workdir is not None:  # --trace-dir: was accepted and nothing kept
                from deployopt.fileio import atomic_path, run_unique_path

                # a name of this run's own (the model's stem, the time, the pid): named after the
                # model alone, same-named models' or two batches' traces replaced each other
                trace = run_unique_path(opts.workdir, Path(model_path).stem, ".ort_profile.json")
                with atomic_path(trace) as dst:
                    shutil.copyfile(path, dst)  # (not `tmp`: the optimized graph is read from tmp below)
                kept.append(str(trace))
            optimized = _load_optimized(Path(tmp) / OPTIMIZED_NAME)
        layers, mapping = profile_layers(events, opts.runs, loaded.model, optimized)
        self.say_once(rebatched_notice(loaded, opts.input_shapes))  # once it ran, as measure says it
        return OrtProfile(
            backend=self.backend.name,
            layers=layers,
            environment=self._environment(dtype),
            timed=self._timed(
                self._batch(loaded),
                "per optimized-graph node: median over runs of onnxruntime's profiler node time",
                dtype,
                clock="onnxruntime's profiler clock",
                model=loaded.model,
            ),
            runs=opts.runs,
            mapped_by="optimized graph" if optimized is not None else "node names (approximate)",
            onnx_nodes_removed=mapping.removed,
            onnx_nodes_unmapped=mapping.unmapped,
            onnx_nodes_folded_at_load=folded_at_load(model_path, loaded.model),
            trace_files=kept,
        )


def _trace_failed(exc: OSError | ValueError) -> BackendFailed:
    """The one line for a profiler trace that TMPDIR could not hold (errors.trace_failed)."""
    return BackendFailed(trace_failed("onnxruntime's profiler", exc))


def _load_optimized(path: Path) -> onnx.ModelProto | None:
    """The optimized graph onnxruntime wrote (weights left out: only the graph is read), or None."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception:
        return None


class OrtBackend(Backend):
    name = "ort"
    description = "onnxruntime (CPU execution provider; CUDA EP where onnxruntime-gpu is installed)"
    dtypes = ("fp32", "fp16", "int8")
    can_limit_sms = False
    runs_as_typed = True  # fp16 and int8 are a model's own typing, never a conversion

    def providers(self) -> list[str]:
        from deployopt.onnxruntime_compat import import_onnxruntime

        ort = import_onnxruntime()  # without its import's telemetry line

        available = ort.get_available_providers()
        chosen = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        return chosen or ["CPUExecutionProvider"]

    def availability(self) -> tuple[bool, str]:
        try:
            from deployopt.onnxruntime_compat import import_onnxruntime

            ort = import_onnxruntime()  # without its import's telemetry line
        except ImportError as exc:
            reraise_interrupt(exc)  # Ctrl-C or SIGTERM during the import: not "not installed"
            from deployopt.onnxruntime_compat import mixed_install_warning

            # onnxruntime-gpu's metadata left without its files (the CPU distribution's uninstall
            # removed them): the command that brings it back, not a CPU onnxruntime over it
            missing = "onnxruntime is not installed: pip install onnxruntime"
            return False, mixed_install_warning(None) or missing
        return True, (
            f"onnxruntime {ort.__version__}, {self.providers()[0]}, fp32; fp16 and int8 as a model is "
            "typed (fp16 inside, Q/DQ nodes)"
        )

    def open(self, options: MeasureOptions) -> Session:
        ok, why = self.availability()
        if not ok:
            raise BackendUnavailable(f"backend 'ort' is unavailable: {why}")
        if options.calibration_data is not None:
            raise DeployoptError(
                "--calibration-data: backend 'ort' runs a Q/DQ model with its own scales; the data "
                "calibrates nothing here (it calibrates TensorRT's INT8: --backend tensorrt or trtexec)"
            )
        self.check_options(options)
        warn_mixed_install()
        return OrtSession(self, options)


#: the mixed-install lines said in this process: `bench --repeat` opens a session per replicate
_MIXED_SAID: set[str] = set()


def warn_mixed_install(again: bool = False) -> None:
    """One `warning:` line, once a process (`again`: said even so, as `deployopt backends` asks),
    where onnxruntime's install is broken for a GPU run (onnxruntime_compat.mixed_install_warning:
    onnxruntime and onnxruntime-gpu both installed, or the GPU one's files overwritten), with the
    commands that fix it: the CUDA EP was lost without a word and the run timed on the CPU."""
    from deployopt.onnxruntime_compat import mixed_install_warning

    line = mixed_install_warning()
    if line and (again or line not in _MIXED_SAID):
        import warnings

        from deployopt.errors import DeployoptWarning

        _MIXED_SAID.add(line)
        warnings.warn(line, DeployoptWarning, stacklevel=3)
