"""Kernel-level runtime analysis from the PyTorch profiler's chrome trace (CUPTI, FINDINGS §1b).

Pure functions over the trace JSON, so they are tested on CPU with a recorded trace. What a trace
gives per kernel: name, duration, grid, block, registers per thread, shared memory per block. What
this module adds: which layer launched it (through the launch's correlation id and the
record_function range of the module around the launch), the tile size parsed from the name, and
the measured waves and tail fill (`deployopt.waves.wave_count`).

A caution about the trace's own "blocks per SM": kineto computes it as grid blocks / the device's
SM count (0.91 for 120 blocks on 132 SMs), an average load, not how many blocks fit on an SM at
once — and it uses the whole device's SM count even inside a green context. Waves need the
resident limit, so it is computed here from the kernel's block size, registers and shared memory
against the per-SM limits of its compute capability (the CUDA occupancy rules).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from deployopt.backends.base import KernelRecord
from deployopt.waves import wave_count

PASS_PREFIX = "deployopt::forward#"
OTHER = "(outside any layer)"


@dataclass(frozen=True)
class SmLimits:
    """Per-SM limits of one compute capability (CUDA programming guide, FINDINGS §3)."""

    threads: int
    blocks: int
    warps: int
    shared_memory: int  # bytes usable by blocks on one SM
    registers: int = 65536
    reserved_shared_per_block: int = 0  # the driver keeps 1 KB per block from CC 8.0 on


SM_LIMITS: dict[str, SmLimits] = {
    "5.3": SmLimits(2048, 32, 64, 64 * 1024),
    "6.0": SmLimits(2048, 32, 64, 64 * 1024),
    "6.1": SmLimits(2048, 32, 64, 96 * 1024),
    "6.2": SmLimits(2048, 32, 64, 64 * 1024),
    "7.0": SmLimits(2048, 32, 64, 96 * 1024),
    "7.2": SmLimits(2048, 32, 64, 96 * 1024),
    "7.5": SmLimits(1024, 16, 32, 64 * 1024),
    "8.0": SmLimits(2048, 32, 64, 164 * 1024, reserved_shared_per_block=1024),
    "8.6": SmLimits(1536, 16, 48, 100 * 1024, reserved_shared_per_block=1024),
    "8.7": SmLimits(1536, 16, 48, 164 * 1024, reserved_shared_per_block=1024),
    "8.9": SmLimits(1536, 24, 48, 100 * 1024, reserved_shared_per_block=1024),
    "9.0": SmLimits(2048, 32, 64, 228 * 1024, reserved_shared_per_block=1024),
}

# "tilesize128x128x64" (cuDNN/TensorRT xmma kernels), else the first "_256x128_" field (cuDNN,
# cuBLAS, CUTLASS: ..._s1688cudnn_fp16_256x128_ldg8_..., cutlass_..._128x128_32x3_nhwc; cuBLASLt's
# nvjet_sm90_hsh_112x128_64x7_..., whose second field is K × stages). A tile side is a multiple of 8
# up to 512, which leaves out layer names that trtexec fuses into a tactic's name ("relu_3x3") and
# stage counts ("stages_64x5").
_TILESIZE = re.compile(r"tilesize(\d+)x(\d+)(?:x(\d+))?", re.IGNORECASE)
_TILE_FIELD = re.compile(r"(?:^|_)(\d{1,3})x(\d{1,3})(?:x(\d{1,3}))?(?=_|$)")


def _tile_side(v: str) -> bool:
    return int(v) % 8 == 0 and 8 <= int(v) <= 512


def parse_tile(kernel_name: str | None) -> tuple[int, ...] | None:
    """The CTA tile a GEMM/conv kernel's name announces, or None (elementwise/pool kernels, no
    name). One rule for CUPTI kernel names and trtexec tactic names alike. Warp/launch shapes
    (`warpsize2x1x1`, `tensor16x8x16`) are not fields of their own, so they are never read."""
    if not kernel_name:
        return None
    m = _TILESIZE.search(kernel_name)
    if m is None:
        fields = _TILE_FIELD.finditer(kernel_name)
        m = next((c for c in fields if _tile_side(c.group(1)) and _tile_side(c.group(2))), None)
    if m is None:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def resident_blocks_per_sm(
    threads_per_block: int,
    registers_per_thread: int | None,
    shared_memory_bytes: int | None,
    compute_capability: str | None,
) -> int | None:
    """How many blocks of this kernel fit on one SM at once (the occupancy calculation), or None
    when the compute capability is unknown. At least 1: a kernel that launched did fit."""
    limits = SM_LIMITS.get(compute_capability or "")
    if limits is None or threads_per_block < 1:
        return None
    warps = math.ceil(threads_per_block / 32)
    fits = [limits.blocks, limits.warps // warps, limits.threads // threads_per_block]
    if registers_per_thread:
        per_warp = math.ceil(registers_per_thread * 32 / 256) * 256  # allocated per warp, 256 at a time
        warps_by_regs = (limits.registers // 4 // per_warp) * 4  # four sub-partitions per SM
        fits.append(warps_by_regs // warps)
    if shared_memory_bytes:
        fits.append(limits.shared_memory // (shared_memory_bytes + limits.reserved_shared_per_block))
    return max(1, min(fits))


def _dims(value: Any) -> tuple[int, int, int] | None:
    if not isinstance(value, (list, tuple)) or not value:
        return None
    dims = [int(v) for v in value][:3]
    return (dims[0], ([*dims, 1, 1])[1], ([*dims, 1, 1])[2])


def events_of(trace: dict[str, Any] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The event list of a chrome trace (dict with traceEvents, or a bare list)."""
    if isinstance(trace, list):
        return trace
    return list(trace.get("traceEvents", []))


def device_properties(trace: dict[str, Any], device: int = 0) -> dict[str, Any]:
    """SM count and compute capability as the trace's deviceProperties record them."""
    props = trace.get("deviceProperties") if isinstance(trace, dict) else None
    for p in props or []:
        if int(p.get("id", 0)) == device:
            out: dict[str, Any] = {"name": p.get("name")}
            if "numSms" in p:
                out["sms"] = int(p["numSms"])
            if "computeMajor" in p:
                out["compute_capability"] = f"{p['computeMajor']}.{p.get('computeMinor', 0)}"
            return out
    return {}


def kernel_record(event: dict[str, Any], sms: int | None, compute_capability: str | None) -> KernelRecord:
    """One trace kernel event → KernelRecord, with measured waves when the grid and SM count are known.

    blocks_per_sm in the record is the resident limit computed from the kernel's resources (see the
    module docstring); when the compute capability is unknown it falls back to the floor of the
    trace's value, at least 1.
    """
    args = event.get("args") or {}
    grid = _dims(args.get("grid"))
    block = _dims(args.get("block"))
    regs = args.get("registers per thread")
    smem = args.get("shared memory")
    per_sm: float | None = None
    if block is not None:
        per_sm = resident_blocks_per_sm(block[0] * block[1] * block[2], regs, smem, compute_capability)
    if per_sm is None and args.get("blocks per SM") is not None:
        per_sm = max(1, math.floor(float(args["blocks per SM"])))
    waves = tail = None
    if grid is not None and sms:
        blocks = grid[0] * grid[1] * grid[2]
        if blocks >= 1:
            waves, tail = wave_count(blocks, sms, int(per_sm or 1))
    name = str(event.get("name", ""))
    return KernelRecord(
        name=name,
        duration_us=float(event.get("dur", 0.0)),
        grid=grid,
        block=block,
        registers_per_thread=int(regs) if regs is not None else None,
        shared_memory_bytes=int(smem) if smem is not None else None,
        blocks_per_sm=float(per_sm) if per_sm is not None else None,
        tile=parse_tile(name),
        waves=waves,
        tail_fill=tail,
    )


def _ranges_by_thread(
    events: Iterable[dict[str, Any]],
) -> dict[tuple[Any, Any], list[tuple[float, float, str]]]:
    out: dict[tuple[Any, Any], list[tuple[float, float, str]]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "user_annotation" and e.get("ph", "X") == "X":
            ts = float(e["ts"])
            out[(e.get("pid"), e.get("tid"))].append((ts, ts + float(e.get("dur", 0.0)), str(e.get("name"))))
    return out


def _enclosing(
    ranges: list[tuple[float, float, str]], points: list[tuple[float, Any]]
) -> dict[Any, list[str]]:
    """For each (ts, key) point, the names of the ranges that contain it, outermost first.

    One sweep over starts and points in time order with a stack of open ranges (ranges on one
    thread nest), so a trace of thousands of launches is cheap.
    """
    items: list[tuple[float, int, Any]] = [(s, 0, (s, e, n)) for s, e, n in ranges]
    items += [(ts, 1, key) for ts, key in points]
    items.sort(key=lambda it: (it[0], it[1], -it[2][1] if it[1] == 0 else 0))
    stack: list[tuple[float, float, str]] = []
    out: dict[Any, list[str]] = {}
    for ts, kind, payload in items:
        while stack and stack[-1][1] < ts:
            stack.pop()
        if kind == 0:
            stack.append(payload)
        else:
            out[payload] = [r[2] for r in stack if r[1] >= ts]
    return out


def _assign(names: list[str], layer_names: set[str], pass_prefix: str) -> tuple[int | None, str]:
    """(forward pass index, innermost layer) from the enclosing range names, outermost first."""
    pass_index = None
    layer = OTHER
    for n in names:
        if n.startswith(pass_prefix):
            tail = n[len(pass_prefix) :]
            if tail.isdigit():
                pass_index = int(tail)
        elif n in layer_names:
            layer = n
    return pass_index, layer


def attribute_kernels(
    trace: dict[str, Any] | list[dict[str, Any]], layer_names: Iterable[str], pass_prefix: str = PASS_PREFIX
) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """{forward pass: {layer: [kernel events]}}.

    A kernel belongs to the layer whose record_function range was open on the CPU thread when its
    launch call (cudaLaunchKernel & co., matched by the "correlation" arg) ran. Kernels without a
    launch record fall back to the GPU-side mirror of the ranges (gpu_user_annotation) that
    contains them in time. Kernels in no layer go to OTHER, so no GPU time is lost.
    """
    events = events_of(trace)
    layers = set(layer_names)
    launches = {}
    for e in events:
        args = e.get("args") or {}
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launches[args["correlation"]] = e
    kernels = [e for e in events if str(e.get("cat", "")).lower() == "kernel"]

    ranges = _ranges_by_thread(events)
    points: dict[tuple[Any, Any], list[tuple[float, Any]]] = defaultdict(list)
    unlaunched = []
    for i, k in enumerate(kernels):
        launch = launches.get((k.get("args") or {}).get("correlation"))
        if launch is None:
            unlaunched.append(i)
        else:
            points[(launch.get("pid"), launch.get("tid"))].append((float(launch["ts"]), i))
    where: dict[int, list[str]] = {}
    for thread, pts in points.items():
        where.update(_enclosing(ranges.get(thread, []), pts))
    if unlaunched:
        gpu_ranges = [
            (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0)), str(e.get("name")))
            for e in events
            if e.get("cat") == "gpu_user_annotation"
        ]
        where.update(_enclosing(gpu_ranges, [(float(kernels[i]["ts"]), i) for i in unlaunched]))

    out: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for i, k in enumerate(kernels):
        pass_index, layer = _assign(where.get(i, []), layers, pass_prefix)
        if pass_index is None:
            continue  # warm-up or profiler bookkeeping outside the timed passes
        out[pass_index][layer].append(k)
    return {p: dict(v) for p, v in sorted(out.items())}


def cpu_layer_times(
    trace: dict[str, Any] | list[dict[str, Any]], layer_names: Iterable[str], pass_prefix: str = PASS_PREFIX
) -> dict[int, dict[str, float]]:
    """{forward pass: {layer: µs}} from the layers' own record_function ranges (no GPU: the module's
    wall time on the CPU thread). Nested layer ranges are not expected (onnx2torch is flat)."""
    events = events_of(trace)
    layers = set(layer_names)
    out: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for thread_ranges in _ranges_by_thread(events).values():
        passes = sorted((s, e, n) for s, e, n in thread_ranges if n.startswith(pass_prefix))
        points = [(s, idx) for idx, (s, _e, n) in enumerate(thread_ranges) if n in layers]
        where = _enclosing(passes, points)
        for idx, enclosing in where.items():
            pass_index, _ = _assign(enclosing, set(), pass_prefix)
            if pass_index is None:
                continue
            s, e, n = thread_ranges[idx]
            out[pass_index][n] += e - s
    return {p: dict(v) for p, v in sorted(out.items())}


def gpu_layer_times(
    attributed: dict[int, dict[str, list[dict[str, Any]]]],
) -> dict[int, dict[str, float]]:
    """{forward pass: {layer: summed kernel µs}}: the GPU time each layer's kernels took."""
    return {
        p: {layer: sum(float(k.get("dur", 0.0)) for k in ks) for layer, ks in layers.items()}
        for p, layers in attributed.items()
    }
