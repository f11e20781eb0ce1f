"""Pre-flight memory check: refuse a run that cannot fit before it allocates anything.

A too-large --batch or --input-shape seldom raises MemoryError on Linux: the kernel's OOM killer
ends the process (exit 137, no message), often minutes into a run. So before a backend builds its
inputs, `require_memory` compares a lower bound of what the run needs (`estimate_run`) with what
the device has free, and fails with one line when even the bound does not fit.

The bound is deliberately a floor, not a prediction: the check only refuses runs that cannot
succeed, never one that might. A run above what is free but below the floor's real peak (2.4–2.6×
the floor measured with onnxruntime CPU: a runtime's own copy of the weights, arena rounding,
workspaces, the float64 random numbers the inputs are drawn as) can still be killed: a floor above
WARN_SHARE of what is free is announced with one line (MemoryRiskWarning), and the run goes on.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import onnx

from deployopt.errors import DeployoptWarning, InsufficientMemory

GIB = 1 << 30
#: A floor above this share of the free memory is warned about: onnxruntime CPU peaked at 2.4–2.6×
#: the floor on the bundled ResNet56 (bench at batch 2000 and 8000, optimize's fidelity check at
#: 2000 and 20000), so such a run would fill three quarters of what is free or more.
WARN_SHARE = 0.3


class MemoryRiskWarning(DeployoptWarning):
    """The run fits the floor but may not fit its real peak (the CLI prints it as one line)."""


#: Ops whose output may be a view of their first input (no new buffer): a view counts as its input.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
#: Ops whose output can never share its data input's buffer, in onnxruntime, onnx2torch or cuDNN:
#: while one runs, its inputs and outputs are all alive. Any other op (elementwise ops may run in
#: place, a Concat may be written into its output) counts only its largest single output.
DISJOINT_OPS = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "ConvInteger",
        "QLinearConv",
        "MaxPool",
        "AveragePool",
        "LpPool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "Gemm",
        "MatMul",
        "Resize",
        "Upsample",
    }
)


@dataclass(frozen=True)
class RunEstimate:
    """A lower bound of the bytes one forward pass holds at once, by what holds them."""

    inputs: int  # every graph input, at the requested shapes
    weights: int  # every initializer
    activations: int  # the most the graph keeps alive at once, in its node order (see estimate_run)

    @property
    def total(self) -> int:
        return self.inputs + self.weights + self.activations


def _tensor_bytes(tensor_type: onnx.TypeProto.Tensor, float_bytes: int | None) -> int | None:
    """Bytes of a tensor with a static shape; None when a dim or the element size is unknown."""
    if not tensor_type.HasField("shape") or tensor_type.elem_type == onnx.TensorProto.UNDEFINED:
        return None
    dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor_type.shape.dim]
    if any(d < 1 for d in dims):
        return None
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
    except (KeyError, ValueError, TypeError):
        return None
    if dtype.kind == "O":  # strings: no fixed size
        return None
    size = float_bytes if float_bytes is not None and dtype.kind == "f" else dtype.itemsize
    return math.prod(dims) * size


def estimate_run(model: onnx.ModelProto, float_bytes: int | None = None) -> RunEstimate | None:
    """Lower bound of the memory one forward pass of `model` needs; None when a shape is unknown.

    `model` must have been through shape inference (deployopt.model.load_model does it), so every
    tensor's shape is in the graph. `float_bytes` counts floating tensors at another width (2: a
    backend that runs fp32 weights in fp16). The bound is

        inputs + weights + max over nodes of the activations alive while that node runs

    run in the graph's node order: every buffer written earlier and still to be read (a
    residual block's shortcut while its convs run) plus the node's outputs; a node not in
    DISJOINT_OPS (elementwise ops) may write its output over an input it reads for the last time,
    so that input's bytes are not counted twice. A view (VIEW_OPS) is its input's buffer, and graph
    inputs are counted once, in `inputs`. No safety factor is applied: the real peak is higher (the
    runtime's copy of the weights, workspaces, allocator rounding, the host copy of inputs a GPU
    backend uploads), which this ignores.

    A dynamic or unknown dim anywhere (a tensor shape inference could not resolve, a string
    tensor) gives None: the caller skips the check rather than refuse on a guess.
    """
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    sizes: dict[str, int] = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.name in inits:
            continue
        n = _tensor_bytes(vi.type.tensor_type, float_bytes)
        if n is None:
            return None
        sizes[vi.name] = n
    weights = 0
    for t in inits.values():
        tt = onnx.TypeProto.Tensor(elem_type=t.data_type)
        tt.shape.SetInParent()  # a scalar has a shape, with no dims
        for d in t.dims:
            tt.shape.dim.add().dim_value = d
        n = _tensor_bytes(tt, float_bytes)
        if n is None:
            return None
        weights += n
    graph_inputs = {i.name for i in graph.input if i.name not in inits}
    not_activations = set(inits) | graph_inputs
    root: dict[str, str] = {}  # a view's buffer is that of the tensor it views
    for node in graph.node:
        if node.op_type in VIEW_OPS and node.domain in ("", "ai.onnx") and node.input and node.input[0]:
            base = root.get(node.input[0], node.input[0])
            for out in node.output[:1]:
                root[out] = base
    # a buffer lives from its producer to its last reader (a graph output to the end)
    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for i in node.input:
            if i:
                last_use[root.get(i, i)] = index
    for o in graph.output:
        last_use[root.get(o.name, o.name)] = len(graph.node)
    live: dict[str, int] = {}  # buffers written and still to be read, by bytes
    activations = 0
    for index, node in enumerate(graph.node):
        if node.op_type in VIEW_OPS and node.domain in ("", "ai.onnx") and node.input and node.input[0]:
            continue
        outs = [o for o in node.output if o]
        if any(o not in sizes for o in outs):
            return None
        reads = {root.get(i, i) for i in node.input if i} - not_activations
        if any(t not in sizes for t in reads):
            return None
        new = sum(sizes[o] for o in outs)
        if not (node.op_type in DISJOINT_OPS and node.domain in ("", "ai.onnx")):
            # an elementwise op may write its output over an input read for the last time here
            dying = [sizes[t] for t in reads if last_use.get(t, index) <= index]
            new -= min(max(dying, default=0), max((sizes[o] for o in outs), default=0))
        activations = max(activations, sum(live.values()) + new)
        for o in outs:
            if last_use.get(o, index) > index:
                live[o] = sizes[o]
        for t in reads:
            if last_use.get(t, index) <= index:
                live.pop(t, None)
    inputs = sum(sizes[name] for name in graph_inputs)
    return RunEstimate(inputs=inputs, weights=weights, activations=activations)


# ---------------------------------------------------------------------------------------------
# What is free


def _meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    out = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, rest = line.partition(":")
                fields = rest.split()
                if fields and fields[0].isdigit():
                    out[key] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    except OSError:
        return {}
    return out


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, ValueError):
        return None
    return int(text) if text.isdigit() else None


def _cgroup_free(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Room left under this container's cgroup memory limit (v2, else v1); None when unlimited.

    Usage minus the inactive file cache, as `docker stats` counts it: the kernel reclaims that
    cache before it kills anything."""
    for limit_file, usage_file, stat_file, cache_key in (
        ("memory.max", "memory.current", "memory.stat", "inactive_file"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat",
         "total_inactive_file"),
    ):  # fmt: skip
        limit = _read_int(root / limit_file)
        usage = _read_int(root / usage_file)
        if limit is None or usage is None or limit >= 1 << 60:  # "max", or v1's "no limit"
            continue
        cache = 0
        try:
            for line in (root / stat_file).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == cache_key and value.strip().isdigit():
                    cache = int(value)
        except OSError:
            pass
        return max(limit - max(usage - cache, 0), 0)
    return None


def available_host_bytes() -> int | None:
    """Host memory a new allocation can still get: MemAvailable plus free swap (Linux), capped by
    the cgroup limit a container runs under; elsewhere the physical memory as a ceiling (os.sysconf);
    None when nothing says (the check is then skipped)."""
    info = _meminfo()
    if "MemAvailable" in info:
        free = info["MemAvailable"] + info.get("SwapFree", 0)
        cgroup = _cgroup_free()
        return free if cgroup is None else min(free, cgroup)
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def check_enabled() -> bool:
    """False when DEPLOYOPT_MEMORY_CHECK is 0/off/no/false: for hosts whose free memory reads low,
    e.g. VMs whose memory grows as it is used (MemTotal starts far below the real limit)."""
    return os.environ.get("DEPLOYOPT_MEMORY_CHECK", "").strip().lower() not in {"0", "off", "no", "false"}


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / (1 << 20):.1f} MiB"


def _what(model: onnx.ModelProto) -> str:
    """'batch 100000' when every input has that batch, else the input shapes."""
    inits = {t.name for t in model.graph.initializer}
    shapes = [
        [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input if i.name not in inits
    ]
    batches = {s[0] for s in shapes if s}
    if len(batches) == 1 and all(shapes):
        return f"batch {batches.pop()}"
    return "input shape " + ", ".join("x".join(map(str, s)) for s in shapes)


def require_memory(
    needed: RunEstimate | None,
    available: int | None,
    model: onnx.ModelProto,
    where: str,
    hint: str = "try a smaller --batch or --input-shape",
) -> None:
    """Raise InsufficientMemory when `needed` is more than `available` bytes, and warn
    (MemoryRiskWarning) when it is more than WARN_SHARE of them; None for either skips the check.
    `where` names the backend and the memory, e.g. "onnxruntime, host memory"."""
    if needed is None or available is None or not check_enabled():
        return
    parts = ["inputs"] + ["weights"] * bool(needed.weights) + ["activations"] * bool(needed.activations)
    what = f"{', '.join(parts[:-1])} and {parts[-1]}" if len(parts) > 1 else parts[0]
    line = (
        f"{_what(model)} needs at least {_gib(needed.total)} for {what} ({where}), "
        f"{_gib(available)} available"
    )
    if needed.total > available:
        raise InsufficientMemory(f"{line}; {hint}")
    if needed.total > WARN_SHARE * available:
        # a floor: the real peak is about 2.5× it, and the OOM killer ends a process without a word
        warnings.warn(f"{line}; the run may be killed for memory ({hint})", MemoryRiskWarning, stacklevel=2)


def require_host_memory(
    model: onnx.ModelProto,
    where: str,
    *,
    activations: bool = True,
    hint: str = "try a smaller --batch or --input-shape",
    checked: RunEstimate | None = None,
) -> RunEstimate | None:
    """The host check a backend makes before it builds its inputs (see the module docstring);
    returns the estimate it checked. `activations=False`: they live on a device (a GPU backend);
    only the inputs and weights the host holds are counted. `checked`: an estimate this run already
    checked (the torch backend's parent, before optimize's output folder exists); a model whose
    estimate is that one is not checked, nor warned about, a second time."""
    est = estimate_run(model)
    if est is not None and not activations:
        est = RunEstimate(est.inputs, est.weights, 0)
    if est is None or est != checked:
        require_memory(est, available_host_bytes(), model, where, hint)
    return est


def require_fidelity_memory(
    reference: onnx.ModelProto,
    candidate: onnx.ModelProto | None,
    samples: int,
    hint: str = "try a smaller --batch or --input-shape",
) -> None:
    """The host check before a fidelity comparison (deployopt.fidelity.compare_models) draws its
    inputs: `samples` input sets held at once, each once (images and array rows are read straight
    into their batches), and both models' onnxruntime sessions alive through the comparison, each
    with its weights and its activations (onnxruntime's arena keeps the peak of a run allocated
    after it; the outputs of one run are among them: verify keeps none of the reference's past
    its sample, optimize those of its gate's few). `candidate` None: not built yet; it will be the
    reference's size give or take a few channels, so the reference's activations count twice."""
    ref = estimate_run(reference)
    cand = (
        estimate_run(candidate) if candidate is not None else RunEstimate(0, 0, ref.activations if ref else 0)
    )
    if ref is None or cand is None:
        return
    est = RunEstimate(ref.inputs * samples, ref.weights + cand.weights, ref.activations + cand.activations)
    where = "onnxruntime fidelity check" + (f", {samples} input samples held at once" if samples > 1 else "")
    require_memory(est, available_host_bytes(), reference, f"{where}, host memory", hint)
