"""Time single conv layers on CUDA through PyTorch/cuDNN: the measured per-layer staircase.

Used by the torch backend's worker (`Session.measure_convs`), `deployopt staircase --measure torch`,
`deployopt calibrate`, and benchmarks/staircase_sweeps.py. It runs in the calling process, which
must already hold its green context when SMs are limited (`set_sm_limit`, before any CUDA work).

Method (FINDINGS §1): cudnn.benchmark picks the kernel, channels_last, the conv captured `reps`
times in a CUDA graph, and each sample is the CUDA-event time of enough graph replays to run for
about 2 ms, divided by the number of convs in them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from typing import Any

from deployopt.errors import BackendUnavailable, DeployoptError, reraise_interrupt
from deployopt.layers import ConvShape

TORCH_DTYPES = {"fp16": "float16", "fp32": "float32"}
_GREEN_CONTEXT: Any = None


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        reraise_interrupt(exc)
        raise BackendUnavailable("PyTorch is not installed: pip install 'deployopt[torch]'") from None
    if not torch.cuda.is_available():
        raise BackendUnavailable("PyTorch sees no CUDA GPU")
    return torch


# The CUDA driver API's guideline for green-context SM partitions (CUDA 12.4 Driver API, Green
# Contexts, cuDevSmResourceSplitByCount: https://docs.nvidia.com/cuda/archive/12.4.0/cuda-driver-api/
# group__CUDA__GREEN__CONTEXTS.html), "subject to change". A count off it is rounded up silently.
# Only the 9.0 line was seen on hardware here (the H200: 2 SMs asked, 8 given, FINDINGS §1); the
# others are NVIDIA's word, not run.


def green_context_rule(compute_capability: str | tuple[int, int]) -> tuple[int, int] | None:
    """(fewest SMs, multiple) a green context can have on a GPU of this compute capability ("8.6"
    or (8, 6)), per NVIDIA's guideline above: 6.x (1, 1); 7.x (2, 2); 8.x (4, 2); 9.0 and later
    (8, 8). None below 6.0, which the guideline does not cover (the driver decides)."""
    if isinstance(compute_capability, str):
        major = int(compute_capability.split(".")[0])
    else:
        major = int(compute_capability[0])
    if major >= 9:
        return 8, 8
    return {8: (4, 2), 7: (2, 2), 6: (1, 1)}.get(major)


def green_context_refusal(
    sms: int,
    compute_capability: str | tuple[int, int],
    gpu: str | None = None,
    device_sms: int | None = None,
) -> str | None:
    """Why `--sms sms` cannot be a green context on this GPU, as the one line the user sees; None
    when it can. Refused rather than rounded up: the driver would silently give more SMs than asked,
    and every latency would be labelled with the wrong count."""
    if sms < 1:
        return f"--sms {sms}: must be a positive integer"
    if device_sms is not None and sms > device_sms:
        return f"--sms {sms}: this GPU has only {device_sms} SMs"
    rule = green_context_rule(compute_capability)
    if rule is None:
        return None
    fewest, step = rule
    if sms >= fewest and sms % step == 0:
        return None
    cc = compute_capability if isinstance(compute_capability, str) else ".".join(map(str, compute_capability))
    which = f"{gpu}, compute capability {cc}" if gpu else f"compute capability {cc}"
    top = device_sms if device_sms is not None else fewest + 3 * step
    fits = list(range(fewest, top + 1, step))
    ask = f"ask for {', '.join(map(str, fits[:3]))}{' …' if len(fits) > 3 else ''}"
    return (
        f"--sms {sms}: green contexts on this GPU ({which}) come in multiples of {step} SMs, "
        f"at least {fewest} (a request off that is silently rounded up); "
        + (ask if fits else f"none fits its {device_sms} SMs")
    )


def set_sm_limit(num_sms: int) -> Any:
    """Restrict this process's kernels to `num_sms` SMs with a green context (one per process).

    Must run before any model, tensor or cuDNN handle exists. A count off the GPU's green-context
    granularity (`green_context_rule`) is refused: the driver would round it up silently.
    """
    import warnings

    global _GREEN_CONTEXT
    torch = _torch()
    if not hasattr(torch.cuda, "GreenContext"):
        raise BackendUnavailable(f"torch {torch.__version__} has no torch.cuda.GreenContext (need >= 2.10)")
    torch.cuda.init()  # the green context needs the primary context to exist first
    props = torch.cuda.get_device_properties(0)
    refusal = green_context_refusal(
        num_sms, (props.major, props.minor), props.name, props.multi_processor_count
    )
    if refusal:
        raise DeployoptError(refusal)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # set_context is deprecated in torch 2.14, still works
        try:
            ctx = torch.cuda.GreenContext.create(num_sms=num_sms, device_id=0)
        except TypeError:  # torch <= 2.13 signature: create(num_sms, device_id)
            ctx = torch.cuda.GreenContext.create(num_sms, 0)
        ctx.set_context()
    _GREEN_CONTEXT = ctx  # the context dies with this object: keep it for the process's life
    return ctx


def _build(shape: ConvShape, dtype: str) -> tuple[Any, Any]:
    torch = _torch()
    dt = getattr(torch, TORCH_DTYPES[dtype])
    conv = torch.nn.Conv2d(
        shape.c,
        shape.k,
        (shape.r, shape.s),
        stride=shape.stride,
        padding=shape.pad,
        dilation=shape.dilation,
        groups=shape.groups,
        bias=False,
    )
    conv = conv.to(device="cuda", dtype=dt, memory_format=torch.channels_last).eval()
    x = torch.randn(shape.n, shape.c, shape.h, shape.w, device="cuda", dtype=dt)
    x = x.contiguous(memory_format=torch.channels_last)
    return conv, x


def _time_one(shape: ConvShape, dtype: str, samples: int, target_ms: float) -> list[float]:
    torch = _torch()
    conv, x = _build(shape, dtype)
    with torch.no_grad():
        for _ in range(3):  # cudnn.benchmark (when on) autotunes on the first call
            conv(x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        conv(x)
        end.record()
        end.synchronize()
        one_ms = max(start.elapsed_time(end), 1e-3)
        reps = max(1, min(50, math.ceil(0.2 / one_ms)))  # ~200 µs of work per graph
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                conv(x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(reps):
                conv(x)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        replays = max(1, math.ceil(target_ms / (one_ms * reps)))
        out = []
        for _ in range(samples):
            start.record()
            for _ in range(replays):
                graph.replay()
            end.record()
            end.synchronize()
            out.append(1000.0 * start.elapsed_time(end) / (replays * reps))
    del graph, conv, x
    return out


TRACE_PASS_PREFIX = "deployopt_trace#"
TRACE_PASS = TRACE_PASS_PREFIX + "0"  # the one "pass" range around every traced conv
TRACE_RANGE = "deployopt_conv_{}"


def trace_kernels(shapes: list[ConvShape], dtype: str) -> list[list[dict[str, Any]]]:
    """Kernels each conv launches (name, grid, block, registers, shared memory, blocks/SM), read
    from the PyTorch profiler's CUPTI trace (FINDINGS §1b). One profiler session for all shapes."""
    trace = record_trace(shapes, dtype)
    return kernels_by_range(trace, [TRACE_RANGE.format(i) for i in range(len(shapes))])


def record_trace(shapes: list[ConvShape], dtype: str) -> dict[str, Any]:
    """The profiler's chrome trace of one call of each conv, each inside its own
    record_function range (TRACE_RANGE), all inside TRACE_PASS."""
    torch = _torch()
    from torch.profiler import ProfilerActivity, profile, record_function

    layers = [_build(s, dtype) for s in shapes]
    with torch.no_grad():
        for conv, x in layers:
            conv(x)
        torch.cuda.synchronize()
        # nested, not parenthesized: that form of `with` needs Python 3.10 and we support 3.9
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:  # noqa: SIM117
            with record_function(TRACE_PASS):
                for i, (conv, x) in enumerate(layers):
                    with record_function(TRACE_RANGE.format(i)):
                        conv(x)
                    torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def kernels_by_range(trace: dict[str, Any], range_names: list[str]) -> list[list[dict[str, Any]]]:
    """The kernels each record_function range launched, attributed by `deployopt.kernels`
    (runtime and driver-API launches alike: cuDNN's cuBLAS path for 1×1 convs launches through
    the driver API, and a runtime-only match lost those kernels)."""
    from deployopt.kernels import attribute_kernels

    by_range = attribute_kernels(trace, range_names, pass_prefix=TRACE_PASS_PREFIX).get(0, {})
    out = []
    for name in range_names:
        rows = []
        for e in by_range.get(name, []):
            args = e.get("args", {})
            rows.append(
                {
                    "name": e.get("name", ""),
                    "duration_us": float(e.get("dur", 0.0)),
                    "grid": args.get("grid"),
                    "block": args.get("block"),
                    "registers_per_thread": args.get("registers per thread"),
                    "shared_memory_bytes": args.get("shared memory"),
                    "blocks_per_sm": args.get("blocks per SM"),
                }
            )
        out.append(rows)
    return out


#: A conv timed over SPIKE_OVER × the median of its neighbours' times (two each side among the
#: widths of the same conv, by width) is timed again, up to RETIMES more times, and keeps its lowest
#: median.
#: Something outside the conv (another context on a shared GPU, a stall) only ever adds time: on
#: lent H100s, 0.2–0.6 % of a sweep's widths were timed 2.5–40× their neighbours while their own
#: kernel, profiled, ran at its usual speed (benchmarks/results/h100_rounds, h100_round12). A real
#: step of the staircase times the same again, so re-timing it costs a few milliseconds and changes
#: nothing; a staircase step is not 2× the median of the widths around it.
SPIKE_OVER = 2.0
RETIMES = 2
#: the key of a re-timed conv's medians, first one first: in its time_convs result, and in the
#: environment of the Timing the torch backend makes of it (`staircase --json` shows them per width)
RETIMED = "retimed_medians_us"


def neighbours(values: list[float], i: int) -> list[float]:
    """The values beside values[i] in a sweep: two each side, fewer at the ends."""
    return values[max(0, i - 2) : i] + values[i + 1 : i + 3]


def spikes(medians: list[float], over: float = SPIKE_OVER) -> list[int]:
    """Indices of the times over `over` × the median of their neighbours' (two each side)."""
    import statistics

    out = []
    for i, us in enumerate(medians):
        near = neighbours(medians, i)
        if near and us > over * statistics.median(near):
            out.append(i)
    return out


def sweep_of(shape: ConvShape) -> ConvShape:
    """The conv a width belongs to: the shape with its output channels (a depthwise conv's input
    channels and groups too, which move with them) blanked out."""
    if shape.is_depthwise:
        return dataclasses.replace(shape, c=0, k=0, groups=0)
    return dataclasses.replace(shape, k=0)


def spikes_by_conv(shapes: list[ConvShape], medians: list[float]) -> list[int]:
    """`spikes` within each conv's widths, ordered by width: a list of several layers (optimize's
    per-layer sweep) never compares one layer's time with another's."""
    sweeps: dict[ConvShape, list[int]] = {}
    for i, shape in enumerate(shapes):
        sweeps.setdefault(sweep_of(shape), []).append(i)
    out = []
    for members in sweeps.values():
        members.sort(key=lambda i: shapes[i].k)
        out += [members[j] for j in spikes([medians[i] for i in members])]
    return sorted(out)


def time_convs(
    shapes: list[ConvShape],
    dtype: str = "fp16",
    samples: int = 7,
    trace: bool = False,
    target_ms: float = 2.0,
    benchmark: bool = True,
    retime: int = RETIMES,
) -> list[dict[str, Any]]:
    """Median/IQR (µs per conv) and raw samples for each shape; kernel records when `trace`.

    `benchmark=False` lets cuDNN's heuristics pick the kernel without timing any (PyTorch's own
    default, `torch.backends.cudnn.benchmark = False`): what an untuned PyTorch program runs.
    A spike (`spikes_by_conv`) is timed again up to `retime` times and keeps the timing with the lowest
    median; its result then lists every timing's median in `retimed_medians_us`, first one first.
    """
    import numpy as np

    torch = _torch()
    if dtype not in TORCH_DTYPES:
        raise BackendUnavailable(f"cuDNN timing runs fp16 or fp32, not {dtype}")
    torch.backends.cudnn.benchmark = benchmark

    def timed(shape: ConvShape) -> dict[str, Any]:
        s = _time_one(shape, dtype, samples, target_ms)
        q1, med, q3 = np.percentile(s, [25, 50, 75])
        return {"samples_us": s, "median_us": float(med), "iqr_us": float(q3 - q1), "kernels": []}

    results = [timed(shape) for shape in shapes]
    for _ in range(retime):
        again = spikes_by_conv(shapes, [r["median_us"] for r in results])
        if not again:
            break
        for i in again:
            first = results[i]
            new = timed(shapes[i])
            medians = [*first.get(RETIMED, [first["median_us"]]), new["median_us"]]
            results[i] = {
                **(new if new["median_us"] < first["median_us"] else first),
                RETIMED: medians,
            }
    if trace:
        try:
            for res, kernels in zip(results, trace_kernels(shapes, dtype)):
                res["kernels"] = kernels
        except Exception as exc:  # tracing is diagnostic; timings stand without it
            for res in results:
                res["kernels_error"] = f"{type(exc).__name__}: {exc}"
    torch.cuda.empty_cache()
    return results
