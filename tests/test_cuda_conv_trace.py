"""Kernel attribution of `cuda_conv.trace_kernels` (what staircase sweeps and `--measure torch`
record per width) on a real trace: benchmarks/record_conv_trace.py on the H200, cudnn.benchmark
off. The 1×1 conv ran a cuBLAS (nvjet) kernel launched through the driver API (cuLaunchKernelEx);
the 3×3 conv an sm90 xmma kernel launched through the runtime (cudaLaunchKernelExC)."""

from __future__ import annotations

import json
from pathlib import Path

from deployopt.backends import cuda_conv

TRACE = Path(__file__).parent / "data" / "h200_conv_trace_heuristic.json"
NAMES = [cuda_conv.TRACE_RANGE.format(i) for i in range(2)]


def _trace() -> dict:
    return json.loads(TRACE.read_text())


def test_each_conv_gets_its_recorded_kernel() -> None:
    conv1x1, conv3x3 = cuda_conv.kernels_by_range(_trace(), NAMES)
    assert [k["name"] for k in conv1x1] == ["nvjet_sm90_hsh_64x64_64x13_4x2_h_bz_TNT"]
    assert conv1x1[0]["grid"] == [8, 13, 1]
    assert conv1x1[0]["block"] == [384, 1, 1]
    assert conv1x1[0]["duration_us"] == 3.168
    assert conv1x1[0]["shared_memory_bytes"] == 229772
    assert len(conv3x3) == 1
    assert conv3x3[0]["name"].startswith(
        "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x128x64"
    )
    assert conv3x3[0]["grid"] == [25, 4, 1]
    assert conv3x3[0]["registers_per_thread"] == 168


def test_driver_api_launch_is_attributed_without_gpu_side_ranges() -> None:
    """The bug this guards: only cuda_runtime launches were matched, so every 1×1 fp16 conv of
    the first heuristic sweeps recorded no kernel. Without the GPU-side range mirror, the
    cuLaunchKernelEx record alone must place the kernel."""
    trace = _trace()
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e.get("cat") != "gpu_user_annotation"]
    launches = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "cuda_driver"}
    assert launches == {"cuLaunchKernelEx"}
    conv1x1, conv3x3 = cuda_conv.kernels_by_range(trace, NAMES)
    assert [k["grid"] for k in conv1x1] == [[8, 13, 1]]
    assert [k["grid"] for k in conv3x3] == [[25, 4, 1]]


def test_kernels_outside_the_pass_are_not_counted() -> None:
    trace = _trace()
    for e in trace["traceEvents"]:
        if e.get("name") == cuda_conv.TRACE_PASS:
            e["name"] = "something_else"
    assert cuda_conv.kernels_by_range(trace, NAMES) == [[], []]
