"""Kernel-level analysis on a chrome trace written by hand with the fields the PyTorch profiler's
CUPTI trace carries on the H200 (FINDINGS §1b: cat "kernel", args grid/block/"registers per
thread"/"shared memory"/"blocks per SM", launches linked by "correlation")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deployopt import kernels as kz

CONV_KERNEL = "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroup"
RELU_KERNEL = (
    "void at::native::vectorized_elementwise_kernel<4, "
    "at::native::(anonymous namespace)::launch_clamp_scalar>"
)


def _range(name: str, ts: float, dur: float, tid: int = 100, cat: str = "user_annotation") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _launch(corr: int, ts: float, tid: int = 100) -> dict[str, Any]:
    return {
        "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": tid, "ts": ts,
        "dur": 2, "args": {"cbid": 211, "correlation": corr},
    }  # fmt: skip


def _kernel(corr: int, ts: float, dur: float, name: str = CONV_KERNEL, grid: list[int] | None = None) -> dict:
    return {
        "ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
        "args": {
            "External id": corr, "device": 0, "stream": 7, "correlation": corr,
            "registers per thread": 168, "shared memory": 231424, "blocks per SM": 0.909091,
            "warps per SM": 10.909091, "grid": grid or [30, 4, 1], "block": [384, 1, 1],
        },
    }  # fmt: skip


def make_trace() -> dict[str, Any]:
    ev = [
        # warm-up call outside any forward-pass range: ignored
        _range("conv", 0, 10), _launch(1, 5), _kernel(1, 1000, 50),
        # pass 0: conv launches two kernels, relu one, one launch outside any layer
        _range("deployopt::forward#0", 100, 100),
        _range("conv", 110, 30), _launch(2, 115), _launch(3, 120),
        _range("relu", 150, 20), _launch(4, 155),
        _launch(5, 180),
        _kernel(2, 1100, 10), _kernel(3, 1111, 5, grid=[132, 1, 1]), _kernel(4, 1117, 3, name=RELU_KERNEL),
        _kernel(5, 1121, 1, name=RELU_KERNEL),
        # another thread launching while conv is open on thread 100: not conv's kernel
        _launch(8, 120, tid=200), _kernel(8, 1130, 7),
        # pass 1: relu's kernel has no launch record, found through the GPU-side ranges
        _range("deployopt::forward#1", 300, 100),
        _range("conv", 310, 30), _launch(6, 315),
        _range("relu", 350, 20),
        _range("deployopt::forward#1", 1290, 40, tid=7, cat="gpu_user_annotation"),
        _range("relu", 1300, 10, tid=7, cat="gpu_user_annotation"),
        _kernel(6, 1295, 12), _kernel(99, 1302, 4, name=RELU_KERNEL),
    ]  # fmt: skip
    trace = {
        "deviceProperties": [
            {"id": 0, "name": "NVIDIA H200", "numSms": 132, "computeMajor": 9, "computeMinor": 0}
        ],
        "traceEvents": ev,
    }
    return json.loads(json.dumps(trace))  # exactly what json.load of an exported trace gives


@pytest.mark.parametrize(
    ("name", "tile"),
    [
        (CONV_KERNEL, (128, 128, 64)),
        (
            "sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4"
            "_warpsize2x2x1_g1_tensor16x8x16",
            (64, 64, 64),
        ),
        ("turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1", (256, 128)),
        ("cutlass_80_tensorop_s1688gemm_128x128_32x3_nhwc_align4", (128, 128)),
        ("ampere_fp16_s16816gemm_fp16_64x64_sliced1x2_ldg8_f2f_stages_64x5_nn", (64, 64)),
        (RELU_KERNEL, None),
        ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>", None),
        # cuBLASLt's nvjet kernels (H200 traces): the first field is the tile, the second K × stages
        ("nvjet_sm90_hsh_24x64_64x16_2x1_v_bz_TNN", (24, 64)),
        ("nvjet_sm90_hsh_112x128_64x7_2x1_v_bz_TNN", (112, 128)),
        ("nvjet_sm90_hsh_64x8_64x16_1x2_h_bz_TNT", (64, 8)),
    ],
)
def test_parse_tile(name: str, tile: tuple[int, ...] | None) -> None:
    assert kz.parse_tile(name) == tile


def test_resident_blocks_per_sm() -> None:
    # FINDINGS §1b kernel: shared memory (231424 B + 1 KB reserved) and registers allow one block.
    assert kz.resident_blocks_per_sm(384, 168, 231424, "9.0") == 1
    assert kz.resident_blocks_per_sm(256, 32, 0, "9.0") == 8  # warps: 64 // 8
    assert kz.resident_blocks_per_sm(128, 64, 49152, "8.7") == 3  # 164 KB // (48 KB + 1 KB)
    # registers: 255 → 8192 per warp, 2 warps per sub-partition, 8 per SM, two blocks of 4 warps
    assert kz.resident_blocks_per_sm(128, 255, None, "8.7") == 2
    assert kz.resident_blocks_per_sm(64, None, None, "7.5") == 16  # the 7.5 block limit
    assert kz.resident_blocks_per_sm(128, 32, 0, "12.0") is None  # unknown capability


def test_kernel_record_measured_waves() -> None:
    ev = make_trace()["traceEvents"][2]
    rec = kz.kernel_record(ev, sms=132, compute_capability="9.0")
    assert rec.grid == (30, 4, 1) and rec.block == (384, 1, 1)
    assert rec.registers_per_thread == 168 and rec.shared_memory_bytes == 231424
    assert rec.blocks_per_sm == 1.0 and rec.tile == (128, 128, 64)
    assert rec.waves == 1 and rec.tail_fill == pytest.approx(120 / 132)
    eight = kz.kernel_record(ev, sms=8, compute_capability="9.0")  # a green context of 8 SMs
    assert (eight.waves, eight.tail_fill) == (15, 1.0)
    # Unknown capability: the trace's "blocks per SM" (0.91, grid/SMs) floored, at least 1.
    fallback = kz.kernel_record(ev, sms=16, compute_capability=None)
    assert fallback.blocks_per_sm == 1.0 and (fallback.waves, fallback.tail_fill) == (8, 0.5)
    assert kz.kernel_record(ev, sms=None, compute_capability="9.0").waves is None
    assert rec.to_json()["grid"] == [30, 4, 1]


def test_device_properties() -> None:
    assert kz.device_properties(make_trace()) == {
        "name": "NVIDIA H200",
        "sms": 132,
        "compute_capability": "9.0",
    }
    assert kz.device_properties({"traceEvents": []}) == {}


def test_attribute_kernels_by_launch_correlation_and_gpu_ranges() -> None:
    got = kz.attribute_kernels(make_trace(), ["conv", "relu"])
    names = {
        p: {layer: [k["args"]["correlation"] for k in ks] for layer, ks in layers.items()}
        for p, layers in got.items()
    }
    assert names == {
        0: {"conv": [2, 3], "relu": [4], kz.OTHER: [5]},
        1: {"conv": [6], "relu": [99]},
    }
    times = kz.gpu_layer_times(got)
    assert times == {0: {"conv": 15.0, "relu": 3.0, kz.OTHER: 1.0}, 1: {"conv": 12.0, "relu": 4.0}}


def test_cpu_layer_times_from_ranges() -> None:
    assert kz.cpu_layer_times(make_trace(), ["conv", "relu"]) == {
        0: {"conv": 30.0, "relu": 20.0},
        1: {"conv": 30.0, "relu": 20.0},
    }


def test_events_of_accepts_a_bare_list() -> None:
    ev = make_trace()["traceEvents"]
    assert kz.events_of(ev) is ev
    assert len(kz.events_of({"traceEvents": ev})) == len(ev)
