"""The trtexec parser on 27 real recordings (../shared/fixtures/trtexec, see SOURCES.md there).

Every expected number below was read from the fixture file itself.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deployopt.backends import trtexec_parser as P
from deployopt.errors import DataError, DeployoptError


def _fixture_dir() -> Path:
    shared = os.environ.get("DEPLOYOPT_SHARED")
    base = Path(shared) if shared else Path(__file__).resolve().parents[1].parent / "shared"
    return base / "fixtures" / "trtexec"


FIX = _fixture_dir()
pytestmark = pytest.mark.skipif(
    not FIX.is_dir(),
    reason=f"trtexec fixtures not found at {FIX} (set DEPLOYOPT_SHARED to the shared folder)",
)
approx = pytest.approx


def log(name: str) -> P.TrtexecRun:
    return P.parse_log_file(FIX / name)


def stats(s: P.LatencyStats | None) -> tuple:
    assert s is not None
    return (s.min_ms, s.max_ms, s.mean_ms, s.median_ms, dict(s.percentiles))


# ------------------------------------------------------------------ console logs with a summary


def test_legacy_7x_host_latency_format() -> None:
    r = log("trt7.x_teslaV100_quickstart_pytorch_resnet50_fp16_legacy_format_log.txt")
    assert r.version is None  # the 7.x banner carries no version
    assert (r.device, r.sms, r.compute_capability, r.precision) == (
        "Tesla V100-DGXS-16GB",
        80,
        "7.0",
        "FP32+FP16",
    )
    assert stats(r.latency) == (6.16092, 6.2887, 6.22352, 6.22021, {99.0: 6.28583})
    assert stats(r.end_to_end) == (6.17383, 10.8184, 9.90214, 10.6108, {99.0: 10.7902})
    assert stats(r.enqueue) == (0.424072, 0.49585, None, 0.445618, {})
    assert stats(r.gpu_compute) == (5.30127, 5.42108, 5.35895, 5.35571, {99.0: 5.41693})
    assert r.h2d is None and r.d2h is None
    assert r.throughput_qps == 0.0 and r.queries == 0  # as printed; flagged in notes
    assert any("0 qps" in n for n in r.notes)
    assert (r.total_host_walltime_s, r.total_gpu_compute_s) == (2.9909, 2.00961)
    assert r.has_timing and r.no_timing_reason is None
    assert r.command is not None and r.command.startswith("trtexec --onnx=resnet50_pytorch.onnx")


def test_801_jetson_nano_enqueue_bound() -> None:
    r = log("trt8.0.1_jetson_nano_deepstream_yolo_fp16_loadEngine_log.txt")
    assert (r.version, r.device, r.sms, r.compute_capability) == ("8.0.1", "NVIDIA Tegra X1", 1, "5.3")
    assert r.throughput_qps == 24.5583
    assert stats(r.latency) == (40.5005, 40.8591, 40.6326, 40.6337, {99.0: 40.8591})
    assert stats(r.end_to_end) == (40.5388, 40.9277, 40.6771, 40.6718, {99.0: 40.9277})
    assert stats(r.enqueue) == (40.2849, 40.6204, 40.4274, 40.4176, {99.0: 40.6204})
    assert stats(r.h2d) == (0.487671, 0.590698, 0.544677, 0.543213, {99.0: 0.590698})
    assert stats(r.gpu_compute) == (39.8569, 40.1931, 40.0027, 39.9982, {99.0: 40.1931})
    assert stats(r.d2h) == (0.0678711, 0.150146, 0.0852185, 0.079834, {99.0: 0.150146})
    assert (r.total_host_walltime_s, r.total_gpu_compute_s) == (4.07195, 4.00027)
    assert (r.queries, r.warmup_queries) == (100, 1)
    assert r.enqueue_bound and not r.transfer_bound
    assert r.warnings == [
        "* Throughput may be bound by Enqueue Time rather than GPU Compute and the GPU may be "
        "under-utilized. If not already in use, --useCudaGraph (utilize CUDA graphs where possible) "
        "may increase the throughput."
    ]
    assert r.options["CUDA Graph"] == "Disabled" and r.options["Data transfers"] == "Enabled"


def test_825_int8_transfer_bound() -> None:
    r = log("trt8.2.5_quickstart_qat-ptq_mobilenetv2_ptq_int8_log.txt")
    assert (r.version, r.device, r.sms, r.precision) == ("8.2.5", "NVIDIA Graphics Device", 124, "FP32+INT8")
    assert r.throughput_qps == 321.422
    assert stats(r.latency) == (4.61383, 5.11646, 4.71056, 4.71863, {99.0: 4.80322})
    assert stats(r.end_to_end) == (4.62366, 5.13928, 4.72723, 4.73462, {99.0: 4.81934})
    assert stats(r.enqueue) == (0.337158, 1.83459, 1.28084, 1.0896, {99.0: 1.71924})
    assert stats(r.h2d) == (3.01642, 3.51599, 3.09767, 3.10742, {99.0: 3.1925})
    assert stats(r.gpu_compute) == (1.56671, 1.6599, 1.59911, 1.59741, {99.0: 1.63635})
    assert stats(r.d2h) == (0.00561523, 0.0314941, 0.0137833, 0.0134277, {99.0: 0.0292969})
    assert (r.total_host_walltime_s, r.total_gpu_compute_s) == (3.00851, 1.54634)
    assert (r.queries, r.warmup_queries) == (967, 64)
    assert r.flags == ["h2d_bound"] and r.transfer_bound and not r.enqueue_bound
    assert r.warnings[-1].endswith("Add --noDataTransfers flag to disable data transfers.")


def test_device_to_host_bound_warning_is_its_own_flag() -> None:
    """No recording has trtexec's device-to-host variant of the warning above; this line is the
    recorded host-to-device one with trtexec's wording for outputs."""
    line = (
        "[07/25/2022-16:44:24] [W] * Throughput may be bound by device-to-host transfers for the outputs "
        "rather than GPU Compute and the GPU may be under-utilized."
    )
    r = P.parse_log(line)
    assert r.flags == ["d2h_bound"] and r.transfer_bound and not r.enqueue_bound


@pytest.mark.parametrize(
    "name",
    [
        "trt8.6.0_rtx3090_cookbook_result-03_loadEngine_verbose_log_lines6380-end.txt",
        "trt8.6.0_rtx3090_cookbook_result-03_loadEngine_verbose_full_log.txt.gz",
    ],
)
def test_860_percentiles_and_unstable_warning(name: str) -> None:
    r = log(name)
    assert r.version == "8.6.0"
    assert r.throughput_qps == 21009.2
    pct = {90.0: 0.0532227, 95.0: 0.053772, 99.0: 0.0630798}
    assert stats(r.latency) == (0.0490112, 0.617065, 0.0533242, 0.0517578, pct)
    assert stats(r.gpu_compute) == (
        0.041748,
        0.609253,
        0.0451127,
        0.0439453,
        {90.0: 0.0449219, 95.0: 0.045105, 99.0: 0.0521851},
    )
    assert r.enqueue.median_ms == 0.0253906 and r.h2d.max_ms == 0.131775 and r.d2h.mean_ms == 0.00392396
    assert r.end_to_end is None
    assert (r.total_host_walltime_s, r.total_gpu_compute_s) == (3.00012, 2.84346)
    assert r.flags == ["unstable"] and r.gpu_cov_percent == 44.3558
    if name.endswith(".gz"):  # the whole log also has the header
        assert (r.device, r.sms, r.queries, r.warmup_queries) == ("NVIDIA GeForce RTX 3090", 82, 63030, 4141)
    else:
        assert r.device is None


def test_860_head_only_has_no_timing() -> None:
    r = log("trt8.6.0_rtx3090_cookbook_result-03_loadEngine_verbose_log_lines1-300.txt")
    assert (r.version, r.device, r.sms, r.precision) == ("8.6.0", "NVIDIA GeForce RTX 3090", 82, "FP32")
    assert not r.has_timing and r.throughput_qps is None and r.gpu_compute is None
    with pytest.raises(P.NoTimingError, match="no end-to-end timing in this log"):
        r.require_timing()


def test_1030_intro_fp32() -> None:
    r = log("trt10.3.0_rtxA5000_quickstart_intro_resnet50_build_and_bench_log.txt")
    assert (r.version, r.device, r.sms, r.compute_capability, r.precision) == (
        "10.3.0",
        "NVIDIA RTX A5000",
        64,
        "8.6",
        "FP32",
    )
    assert r.throughput_qps == 873.17
    assert stats(r.latency) == (
        1.18591,
        1.36273,
        1.20476,
        1.2041,
        {90.0: 1.21265, 95.0: 1.21558, 99.0: 1.22229},
    )
    assert stats(r.gpu_compute) == (
        1.12744,
        1.30353,
        1.14253,
        1.14185,
        {90.0: 1.1499, 95.0: 1.151, 99.0: 1.15405},
    )
    assert r.enqueue.mean_ms == 0.682948 and r.h2d.median_ms == 0.0571289 and r.d2h.max_ms == 0.0123291
    assert (r.total_host_walltime_s, r.total_gpu_compute_s) == (3.00285, 2.99571)
    assert (r.queries, r.warmup_queries) == (2622, 177)
    assert r.flags == [] and r.warnings == []


def test_1030_pytorch_fp16_unstable() -> None:
    r = log("trt10.3.0_rtxA5000_quickstart_pytorch_resnet50_fp16_build_and_bench_log.txt")
    assert (r.version, r.precision) == ("10.3.0", "FP32+FP16")
    assert r.throughput_qps == 191.317
    assert stats(r.latency) == (
        5.94817,
        6.54626,
        6.02724,
        6.0061,
        {90.0: 6.11475, 95.0: 6.14783, 99.0: 6.44324},
    )
    assert stats(r.gpu_compute) == (
        5.13742,
        5.73645,
        5.21617,
        5.1947,
        {90.0: 5.30127, 95.0: 5.33813, 99.0: 5.63098},
    )
    assert r.enqueue.median_ms == 0.602783 and r.h2d.mean_ms == 0.80143 and r.d2h.median_ms == 0.00958252
    assert (r.total_host_walltime_s, r.total_gpu_compute_s) == (3.01593, 3.00973)
    assert r.flags == ["unstable"] and r.gpu_cov_percent == 1.57058


def test_10141_default() -> None:
    r = log("trt10.14.1_rtx6000ada_cookbook_result-01_onnx_default_log.txt")
    assert (r.version, r.device, r.sms) == ("10.14.1", "NVIDIA RTX 6000 Ada Generation", 142)
    assert r.throughput_qps == 23188.6
    assert stats(r.latency) == (
        0.0333252,
        0.26416,
        0.0385501,
        0.0383301,
        {90.0: 0.0395508, 95.0: 0.0400391, 99.0: 0.046875},
    )
    assert stats(r.gpu_compute) == (
        0.0266113,
        0.255997,
        0.0287623,
        0.0285645,
        {90.0: 0.0297241, 95.0: 0.0302734, 99.0: 0.0368652},
    )
    assert r.enqueue.min_ms == 0.0212402 and r.h2d.median_ms == 0.00450134 and r.d2h.mean_ms == 0.00548477
    assert (r.total_host_walltime_s, r.total_gpu_compute_s) == (3.00014, 2.00097)
    assert (r.queries, r.warmup_queries) == (69569, 3930)
    assert r.flags == ["unstable"] and r.gpu_cov_percent == 12.8763
    assert r.warnings[0].startswith("Dynamic dimensions required for input: x")


def test_10161_default() -> None:
    r = log("trt10.16.1_h100pcie_cookbook_result-01_onnx_default_log.txt")
    assert (r.version, r.device, r.sms, r.compute_capability) == ("10.16.1", "NVIDIA H100 PCIe", 114, "9.0")
    assert r.throughput_qps == 15374.3
    assert stats(r.latency) == (
        0.0410156,
        0.14917,
        0.0441053,
        0.0440674,
        {90.0: 0.0450439, 95.0: 0.0458984, 99.0: 0.0512695},
    )
    assert stats(r.gpu_compute) == (
        0.0331421,
        0.140381,
        0.0359588,
        0.0361328,
        {90.0: 0.0368652, 95.0: 0.0371094, 99.0: 0.041748},
    )
    assert r.enqueue.max_ms == 0.137939 and r.h2d.min_ms == 0.00341797 and r.d2h.median_ms == 0.00415039
    assert (r.total_host_walltime_s, r.total_gpu_compute_s) == (3.00013, 1.6586)
    assert (r.queries, r.warmup_queries) == (46125, 3057)
    assert r.gpu_cov_percent == 6.58751


def test_10161_cudagraph_spinwait_no_transfers() -> None:
    r = log(
        "trt10.16.1_h100pcie_cookbook_result-03_loadEngine_cudagraph_spinwait_noDataTransfers_verbose_log.txt"
    )
    assert r.options == {
        "Data transfers": "Disabled",
        "Spin-wait": "Enabled",
        "CUDA Graph": "Enabled",
        "Separate profiling": "Disabled",
    }
    assert r.throughput_qps == 24896.9
    gpu = (0.0383301, 0.0651855, 0.0387646, 0.0388184, {90.0: 0.0388489, 95.0: 0.0389404, 99.0: 0.0390625})
    assert stats(r.gpu_compute) == gpu and stats(r.latency) == gpu  # no transfers: latency == compute
    assert stats(r.h2d) == (0.0, 0.0, 0.0, 0.0, {90.0: 0.0, 95.0: 0.0, 99.0: 0.0})
    assert r.enqueue.median_ms == 0.00195312
    assert (r.total_host_walltime_s, r.total_gpu_compute_s) == (3.00005, 2.89541)
    assert (r.queries, r.warmup_queries) == (74692, 4792)
    # the verbose "Explanations of the performance metrics" block must not be read as numbers
    assert r.flags == [] and r.warnings == []


# ------------------------------------------------------------------ logs with no end-to-end timing


def test_10141_dump_profile_has_table_not_timing() -> None:
    r = log("trt10.14.1_rtx6000ada_cookbook_result-05_dumpProfile_log.txt")
    assert r.version == "10.14.1" and not r.has_timing
    assert r.throughput_qps is None and r.latency is None and r.gpu_compute is None
    assert r.no_timing_reason.startswith("The e2e network timing is not reported")
    with pytest.raises(DeployoptError, match="no end-to-end timing in this log"):
        r.timing()
    assert r.profile_iterations == 21248 and r.profile_total_ms == 0.071
    assert len(r.layers) == 16
    first = r.layers[0]
    assert first.name == "Reformatting CopyNode for Input Tensor 0 to node_conv2d + node_relu"
    assert first.extra == {
        "total_ms": 141.32,
        "average_ms": 0.0067,
        "median_ms": 0.006,
        "percentage": 9.4,
        "time_from": "median",
    }
    assert first.time_us == approx(6.0) and first.share == approx(0.094)
    assert r.layers[7].name == "node_linear_myl7_1" and r.layers[7].extra["median_ms"] == 0.0092
    assert r.layers[-1].name == "__myl_CastReshCast_myl15_1" and r.layers[-1].extra["total_ms"] == 64.0
    assert "aux_streams" in r.flags


def test_10161_dump_profile_export_log() -> None:
    r = log("trt10.16.1_h100pcie_cookbook_result-05_dumpProfile_exportTimes_exportProfile_log.txt")
    assert (r.version, r.device) == ("10.16.1", "NVIDIA H100 PCIe")
    assert not r.has_timing and r.profile_iterations == 18362 and r.profile_total_ms == 0.0833
    assert [layer.name for layer in r.layers][:3] == [
        "__mye59_0_myl0_0",
        "node_conv2d_myl0_1",
        "node_max_pool2d",
    ]
    assert len(r.layers) == 15
    conv = r.layers[5]
    assert conv.name == "node_conv2d_1_myl3_1"
    assert (
        conv.extra["total_ms"],
        conv.extra["average_ms"],
        conv.extra["median_ms"],
        conv.extra["percentage"],
    ) == (
        209.98,
        0.0114,
        0.0113,
        13.7,
    )
    assert (
        r.layers[3].name
        == "Reformatting CopyNode for Input Tensor 0 to {ForeignNode[node_conv2d_1...node_relu_1]}"
    )


def test_10161_skip_inference_layer_info() -> None:
    r = log("trt10.16.1_h100pcie_cookbook_result-04_dumpLayerInfo_skipInference_log.txt")
    assert r.version == "10.16.1" and not r.has_timing
    assert r.no_timing_reason == "Skipped inference phase since --skipInference is added."
    assert r.options["Skip inference"] == "Enabled"
    assert r.layers == []
    info = r.layer_info
    assert info is not None and len(info.layers) == 9
    assert (info.layers[0].name, info.layers[0].layer_type, info.layers[0].tile) == (
        "node_conv2d + node_relu",
        "CaskConvolution",
        (32, 32, 8),
    )
    assert info.layers[4].tactic_name.startswith("sm50_xmma_cublas_gemvx_f32f32")
    assert info.layers[4].tile is None  # launch_param4x32x32 is not a tile
    with pytest.raises(P.NoTimingError):
        r.require_timing()


@pytest.mark.parametrize(
    "name",
    [
        "trt8.5.2_jetson_orin_yolo_int8_verbose_log_lines12830-end.txt",
        "trt8.5.2_jetson_orin_yolo_int8_verbose_full_log.txt.gz",
    ],
)
def test_852_orin_profile_table_names_first(name: str) -> None:
    r = log(name)
    assert r.version == "8.5.2" and not r.has_timing
    assert r.profile_iterations == 11 and r.profile_total_ms == 403.8158
    assert len(r.layers) == 77
    assert r.layers[0].name == "[trainStation1]"
    assert r.layers[0].extra == {
        "total_ms": 16.72,
        "average_ms": 1.52,
        "median_ms": 1.089,
        "percentage": 0.4,
        "time_from": "median",
    }
    conv1 = r.layers[2]
    assert conv1.name == (
        "backbone.conv1.weight + /backbone/conv1/_weight_quantizer/QuantizeLinear + /backbone/conv1/Conv"
    )
    assert (conv1.extra["total_ms"], conv1.extra["average_ms"], conv1.extra["median_ms"]) == (
        657.65,
        59.7861,
        58.6879,
    )
    assert r.layers[-1].name == "[trainStation3]" and r.layers[-1].extra["median_ms"] == 0.0543
    if name.endswith(".gz"):
        assert (r.device, r.sms, r.compute_capability, r.precision) == ("Orin", 4, "8.7", "FP32+INT8")


def test_852_orin_head_only() -> None:
    r = log("trt8.5.2_jetson_orin_yolo_int8_verbose_log_lines1-300.txt")
    assert (r.version, r.device, r.sms, r.precision) == ("8.5.2", "Orin", 4, "FP32+INT8")
    assert not r.has_timing and r.layers == []
    assert r.no_timing_reason == "the log has no performance summary"


# ------------------------------------------------------------------ --exportProfile JSON


def test_profile_json_orin_with_median() -> None:
    count, layers = P.parse_profile_json(FIX / "trt8.5.2_jetson_orin_yolo_int8_exportProfile.json")
    assert count == 11 and len(layers) == 86
    assert layers[0].name == "[trainStation1]"
    assert layers[0].extra == {
        "total_ms": 16.72,
        "average_ms": 1.52,
        "median_ms": 1.08902,
        "percentage": 0.376409,
        "time_from": "median",
    }
    assert layers[0].time_us == approx(1089.02)
    assert layers[1].time_us == approx(4063.84)
    assert layers[2].time_us == 0.0  # constant folded away: recorded as 0, kept as 0
    assert layers[-1].name == "[trainStation3]" and layers[-1].time_us == approx(54.336)


def test_profile_json_titan_rtx() -> None:
    count, layers = P.parse_profile_json(FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportProfile.json")
    assert count == 6610 and len(layers) == 73
    assert (layers[0].name, layers[0].extra["median_ms"], layers[0].extra["percentage"]) == (
        "QuantizeLinear_2",
        0.004544,
        1.00949,
    )
    assert layers[1].extra["total_ms"] == 57.6562 and layers[1].extra["average_ms"] == 0.00872257


def test_profile_json_rtx3090_one_iteration() -> None:
    count, layers = P.parse_profile_json(FIX / "trt8.x_rtx3090_tf_resnet50_fp32_exportProfile.json")
    assert count == 1 and len(layers) == 103
    assert layers[0].name == "resnet50/conv1_conv/Conv2D__6" and layers[0].time_us == approx(87.04)
    assert layers[-1].name == "resnet50/predictions/Softmax" and layers[-1].share == approx(0.000330329)


@pytest.mark.parametrize(
    ("name", "count", "n", "first", "first_avg", "last", "last_pct"),
    [
        (
            "trt7.1.3_jetson_xavier_agx_googlenet_dla_exportProfile_no_medianMs.json",
            11290,
            8,
            "data to nvm",
            0.0361183,
            "prob",
            0.184491,
        ),
        (
            "trt7.1.3_jetson_xavier_agx_googlenet_gpu_exportProfile_no_medianMs.json",
            12485,
            84,
            "conv1/7x7_s2 + conv1/relu_7x7 input reformatter 0",
            0.022264,
            "prob output reformatter 0",
            0.215384,
        ),
    ],
)
def test_profile_json_old_format_without_median(name, count, n, first, first_avg, last, last_pct) -> None:
    c, layers = P.parse_profile_json(FIX / name)
    assert (c, len(layers)) == (count, n)
    assert layers[0].name == first and layers[0].extra["average_ms"] == first_avg
    assert "median_ms" not in layers[0].extra and layers[0].extra["time_from"] == "average"
    assert layers[0].time_us == approx(first_avg * 1000)  # average stands in, and says so
    assert layers[-1].name == last and layers[-1].extra["percentage"] == last_pct


# ------------------------------------------------------------------ --exportTimes JSON


def test_times_json_rtx3090_full() -> None:
    its = P.parse_times_json(FIX / "trt8.x_rtx3090_tf_resnet50_fp32_exportTimes_full.json")
    assert len(its) == 263
    assert its[0].values == {
        "startEnqMs": 16.6644,
        "endEnqMs": 16.9316,
        "startH2dMs": 16.6236,
        "endH2dMs": 16.6236,
        "startComputeMs": 16.6236,
        "endComputeMs": 29.6417,
        "startD2hMs": 29.6417,
        "endD2hMs": 29.6417,
        "h2dMs": 0.0,
        "computeMs": 13.0181,
        "d2hMs": 0.0,
        "latencyMs": 13.0181,
    }
    assert its[0].enqueue_ms == approx(0.2672)
    assert its[-1].compute_ms == 12.1631 and its[-1]["startEnqMs"] == 3209.2


def test_times_json_titan_first300_to_timing() -> None:
    run = P.load_run(times=FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportTimes_first300.json")
    assert len(run.iterations) == 300
    assert run.iterations[0].compute_ms == 0.484512 and run.iterations[-1].latency_ms == 0.352478
    t = run.timing()
    assert t.runs == 300 and t.backend == "trtexec"
    assert t.samples_us[0] == approx(484.512) and t.samples_us[-1] == approx(352.478)
    import numpy as np

    assert t.median_us == approx(float(np.median([it.compute_ms for it in run.iterations])) * 1000)
    lat = run.timing("latencyMs")
    assert lat.samples_us[1] == approx(470.4)


def _log_with_counts(tmp_path: Path, warmups: int, timed: int) -> Path:
    """TensorRT 8.2.5's recorded log with its two query counts set to those of another run (the
    recorded --exportTimes files have no log of their own)."""
    text = (FIX / "trt8.2.5_quickstart_qat-ptq_mobilenetv2_ptq_int8_log.txt").read_text()
    text = text.replace("Warmup completed 64 queries", f"Warmup completed {warmups} queries")
    text = text.replace("Timing trace has 967 queries", f"Timing trace has {timed} queries")
    assert f"completed {warmups} queries" in text and f"has {timed} queries" in text
    path = tmp_path / "trtexec.log"
    path.write_text(text)
    return path


RTX3090_TIMES = "trt8.x_rtx3090_tf_resnet50_fp32_exportTimes_full.json"


def test_warmups_an_older_trtexec_exported_are_left_out(tmp_path: Path) -> None:
    """TensorRT 8.2's trtexec writes its whole trace to --exportTimes, warm-ups first (its summary
    skips them; 8.5's export does too). The recorded RTX 3090 file is such a trace: its first 15
    queries start their compute within the 200 ms warm-up (the 16th at 208.7 ms) and take 12.8 ms,
    where the timed ones end near 12.2. With the log's counts, those 15 are not samples."""
    entries = json.loads((FIX / RTX3090_TIMES).read_text())
    assert len(entries) == 263 and sum(e["startComputeMs"] < 200 for e in entries) == 15
    run = P.load_run(log=_log_with_counts(tmp_path, 15, 248), times=FIX / RTX3090_TIMES)
    t = run.timing()
    assert t.runs == 248 and t.warmup == 15
    assert t.samples_us == approx([e["computeMs"] * 1000 for e in entries[15:]])
    assert any("15 warm-up queries" in n and "248 timed queries kept" in n for n in run.notes)
    whole = P.load_run(times=FIX / RTX3090_TIMES).timing()  # no log: nothing tells them apart
    assert whole.runs == 263


def test_an_export_of_the_timed_queries_only_is_kept_whole(tmp_path: Path) -> None:
    """8.5 and later export the timed queries only: as many as the log's trace count, none dropped."""
    entries = json.loads((FIX / RTX3090_TIMES).read_text())[15:]
    times = tmp_path / "times.json"
    times.write_text(json.dumps(entries))
    run = P.load_run(log=_log_with_counts(tmp_path, 15, 248), times=times)
    assert run.timing().runs == 248 and not any("warm-up" in n for n in run.notes)


def test_times_from_a_run_with_the_layer_profiler_on_say_so() -> None:
    """A log without e2e timing (--dumpProfile) beside --exportTimes samples: the samples include the
    profiler's synchronizations. (The two recordings are of different runs; only the note is read.)"""
    times = FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportTimes_first300.json"
    profiled = P.load_run(
        log=FIX / "trt10.14.1_rtx6000ada_cookbook_result-05_dumpProfile_log.txt", times=times
    )
    assert profiled.has_timing and len(profiled.iterations) == 300
    assert any("layer profiler on" in n and "--separateProfileRun" in n for n in profiled.notes)
    plain = P.load_run(log=FIX / "trt10.14.1_rtx6000ada_cookbook_result-01_onnx_default_log.txt", times=times)
    assert not any("layer profiler" in n for n in plain.notes)


def test_summary_only_run_gives_no_samples() -> None:
    r = log("trt8.2.5_quickstart_qat-ptq_mobilenetv2_ptq_int8_log.txt")
    with pytest.raises(P.NoTimingError, match="summary statistics only"):
        r.timing()
    assert r.gpu_compute.median_us == approx(1597.41)


# ------------------------------------------------------------------ --exportLayerInfo JSON and tiles


def test_layer_info_names_only() -> None:
    info = P.parse_layer_info_json(FIX / "trt8.5.2_jetson_orin_yolo_int8_exportLayerInfo_layernames.json")
    assert not info.detailed and len(info.layers) == 86 and info.bindings == ["input", "output"]
    assert info.layers[0].name == "[trainStation1]" and info.layers[0].tactic_name is None
    assert info.layers[-2].name == "{ForeignNode[/Split_2.../Concat_1]}"


def test_layer_info_detailed_titan() -> None:
    info = P.parse_layer_info_json(FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportLayerInfo_detailed.json")
    assert info.detailed and len(info.layers) == 73 and info.bindings == ["input1", "1179"]
    assert sum(1 for layer in info.layers if layer.tactic_name) == 36
    l1 = info.layers[1]
    assert l1.layer_type == "CaskConvolution"
    assert l1.tactic_name == "volta_int8x4_icudnn_int8x4_128x32_relu_xregs_medium_c32_nn_v1"
    assert l1.tactic_value == "0x10d7116a3fad9b7a" and l1.tile == (128, 32)
    assert info.layers[3].tile == (64, 32, 64)  # ..._tilesize64x32x64_stage1_warpsize2x1x1_...
    assert info.layers[6].tile == (128, 128)  # turing_fp16_i8816cudnn_int8_128x128_ldg16_...
    assert info.layers[2].layer_type == "CudaDepthwiseConvolution" and info.layers[2].tile is None
    assert info.layers[0].inputs[0]["Dimensions"] == [1, 3, 224, 224]


def test_layer_info_detailed_h100() -> None:
    info = P.parse_layer_info_json(FIX / "trt10.16.1_h100pcie_cookbook_exportLayerInfo_detailed.json")
    assert len(info.layers) == 9 and info.bindings == ["x", "y", "z"]
    assert info.layers[0].tactic_name == (
        "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3_warpsize1x2x1_g1"
        "_ffma_t1r5s5_aligna4_alignc4"
    )
    assert info.layers[0].tile == (32, 32, 8)
    assert [layer.tile for layer in info.layers[1:]] == [None] * 8


def test_profile_joined_with_layer_info() -> None:
    run = P.load_run(
        profile=FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportProfile.json",
        layer_info=FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportLayerInfo_detailed.json",
    )
    conv = run.layers[3]
    assert conv.name == "features.1.conv.1.weight + QuantizeLinear_42 + Conv_46"
    assert conv.extra["tactic"].startswith("sm75_xmma_fprop_implicit_gemm_interleaved_i8i8")
    assert conv.kernels[0].tile == (64, 32, 64) and conv.kernels[0].duration_us == approx(6.88)
    prof = run.profile()
    assert prof.runs == 6610 and len(prof.layers) == 73
    assert not run.has_timing and run.no_timing_reason == "no log and no --exportTimes file"


@pytest.mark.parametrize(
    ("kernel", "tile"),
    [
        (
            "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroup",
            (128, 128, 64),
        ),
        ("ampere_fp16_s16816gemm_fp16_256x64_ldg8_f2f_stages_32x5_nn", (256, 64)),
        ("cutlass_tensorop_f16_s16816gemm_f16_256x128_32x3_nhwc_align8", (256, 128)),
        (
            "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize256x64x32_stage3_warpsize4x1x1_tensor16x8x16",
            (256, 64, 32),
        ),
        ("__myl_MulSum_0xf51780477f7b66bae3896079c053d676", None),
        # fused layer names in a recorded GoogLeNet profile: filter sizes, not tiles
        ("conv2/3x3 + conv2/relu_3x3", None),
        ("conv1/7x7_s2 + conv1/relu_7x7", None),
        ("sm50_xmma_pooling_tiled_FP32NCHW_kMAX_tP2_tQ16_tR2_tS2_tU2_tV2_tUnroll4_tThreads128", None),
        (None, None),
    ],
)
def test_parse_tile(kernel, tile) -> None:
    assert P.parse_tile(kernel) == tile


@pytest.mark.parametrize(
    ("code", "version"),
    [
        ("8001", "8.0.1"),
        ("8205", "8.2.5"),
        ("8502", "8.5.2"),
        ("8600", "8.6.0"),
        ("8510", "8.5.10"),  # MAJOR*1000 + MINOR*100 + PATCH: a two-digit patch
        ("100000", "10.0.0"),  # the first code in the 10.x scheme
        ("100300", "10.3.0"),
        ("101401", "10.14.1"),
        ("101601", "10.16.1"),
        ("8.2.1", "8.2.1"),
    ],
)
def test_version_codes(code: str, version: str) -> None:
    assert P.parse_version_code(code) == version


def test_every_fixture_is_covered() -> None:
    """A new recording in the folder must get a test here."""
    names = {p.name for p in FIX.iterdir() if p.name != "SOURCES.md"}
    src = Path(__file__).read_text()
    missing = sorted(n for n in names if n not in src)
    assert missing == [] and len(names) == 27


def test_to_json_round_trip_is_plain() -> None:
    import json

    r = log("trt8.0.1_jetson_nano_deepstream_yolo_fp16_loadEngine_log.txt")
    d = json.loads(json.dumps(r.to_json()))
    assert d["gpu_compute"]["percentiles"] == {"99": 40.1931}
    assert d["flags"] == ["enqueue_bound"] and d["version"] == "8.0.1"


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    from deployopt.errors import DataError

    with pytest.raises(DataError, match="cannot read trtexec output"):
        P.parse_log_file(tmp_path / "missing.txt")
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(DataError, match="not valid JSON"):
        P.parse_times_json(bad)
    with pytest.raises(DataError, match="is a JSON list"):
        P.parse_profile_json({"Layers": []})


# ------------------------------------------------------------------ TensorRT 11.x inspector JSON

#: SYNTHETIC, not a recording (no TensorRT 11 was run): the shape NVIDIA's 10.x-to-11.x
#: IEngineInspector migration page gives ("I/O Tensors" objects instead of "Bindings" names, the
#: layers' "Format/Datatype" split into "Format" and "DataType"), for a model typed fp16 inside with
#: fp32 I/O, as deployopt.precision writes it. "Datatype" in one place: spellings differ between
#: NVIDIA's own pages, and the parser takes both.
TRT11_LAYER_INFO = {
    "Layers": [
        {
            "Name": "input_cast_fp16",
            "LayerType": "Reformat",
            "Inputs": [{"Name": "input", "Location": "Device", "Dimensions": [1, 3, 32, 32],
                        "Format": "Row major linear FP32 format (kLINEAR)", "DataType": "Float"}],
            "Outputs": [{"Name": "input_fp16", "Location": "Device", "Dimensions": [1, 3, 32, 32],
                         "Format": "Row major linear FP16 format (kLINEAR)", "DataType": "Half"}],
            "TacticValue": "0x0000000000000000",
        },
        {
            "Name": "stem.conv + stem.relu",
            "LayerType": "CaskConvolution",
            "Inputs": [{"Name": "input_fp16", "Location": "Device", "Dimensions": [1, 3, 32, 32],
                        "Format": "Row major linear FP16 format (kLINEAR)", "DataType": "Half"}],
            "Outputs": [{"Name": "stem.relu", "Location": "Device", "Dimensions": [1, 16, 32, 32],
                         "Format": "Channel major FP16 format where channel % 8 == 0 (kHWC8)",
                         "Datatype": "Half"}],
            "TacticName": "sm80_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize64x64x64"
            "_stage4_warpsize2x2x1_g1_tensor16x8x16",
            "TacticValue": "0x1234",
        },
    ],
    "I/O Tensors": [
        {"Name": "input", "IOMode": "Input", "DataType": "Float", "Dimensions": [1, 3, 32, 32],
         "Location": "Device", "IsShapeInferenceIO": False,
         "ProfileInfo": [{"MinShape": [1, 3, 32, 32], "OptShape": [1, 3, 32, 32], "MaxShape": [1, 3, 32, 32],
                          "Format": "Row major linear FP32 format (kLINEAR)"}]},
        {"Name": "logits", "IOMode": "Output", "DataType": "Float", "Dimensions": [1, 10],
         "Location": "Device", "IsShapeInferenceIO": False},
    ],
}  # fmt: skip


def test_layer_info_trt11_io_tensors_and_split_format(tmp_path: Path) -> None:
    info = P.parse_layer_info_json(TRT11_LAYER_INFO)
    assert info.detailed and info.bindings == ["input", "logits"]
    assert info.io_types() == {"input": "Float", "logits": "Float"}  # fp32 I/O around an fp16 network
    conv = info.layers[1]
    assert conv.layer_type == "CaskConvolution" and conv.tile == (64, 64, 64)
    assert P.tensor_format(conv.inputs[0]) == ("Row major linear FP16 format (kLINEAR)", "Half")
    assert P.tensor_format(conv.outputs[0])[1] == "Half"  # "Datatype" spelling
    assert info.to_json()["io_tensors"][1]["IOMode"] == "Output"
    # through a file and joined with a profile, as the trtexec backend reads it
    path = tmp_path / "layer_info.json"
    path.write_text(json.dumps(TRT11_LAYER_INFO))
    profile = [{"count": 10}, {"name": "stem.conv + stem.relu", "timeMs": 1.0, "averageMs": 0.1,
                               "medianMs": 0.1, "percentage": 100.0}]  # fmt: skip
    (tmp_path / "profile.json").write_text(json.dumps(profile))
    run = P.load_run(profile=tmp_path / "profile.json", layer_info=path)
    assert run.layers[0].extra["tactic"].startswith("sm80_xmma_fprop_implicit_gemm_f16f16")
    assert run.layers[0].kernels[0].tile == (64, 64, 64)


def test_layer_info_up_to_10x_reads_as_before_with_types_from_the_combined_field() -> None:
    """The recorded <= 10.x exports: no io_tensors (and none in to_json), bindings as before, and
    the one "Format/Datatype" string read for its data type."""
    titan = P.parse_layer_info_json(FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportLayerInfo_detailed.json")
    h100 = P.parse_layer_info_json(FIX / "trt10.16.1_h100pcie_cookbook_exportLayerInfo_detailed.json")
    for info in (titan, h100):
        assert info.io_tensors == [] and "io_tensors" not in info.to_json() and info.io_types() == {}
    q = titan.layers[0]
    assert P.tensor_format(q.inputs[0]) == ("Row major linear FP32", "Float")
    assert P.tensor_format(q.outputs[0]) == ("Four wide channel vectorized row major Int8 format", "Int8")
    assert P.tensor_format(h100.layers[0].inputs[0]) == ("Float", "Float")
    kinds = {P.tensor_format(t)[1] for layer in titan.layers for t in (*layer.inputs, *layer.outputs)}
    assert kinds == {"Float", "Half", "Int8"}


@pytest.mark.parametrize(
    ("name", "seconds"),
    [
        ("trt7.x_teslaV100_quickstart_pytorch_resnet50_fp16_legacy_format_log.txt", 105.672),
        ("trt8.2.5_quickstart_qat-ptq_mobilenetv2_ptq_int8_log.txt", 24.535),
        ("trt8.5.2_jetson_orin_yolo_int8_verbose_log_lines12830-end.txt", 320.636),  # a Jetson Orin's
        ("trt10.16.1_h100pcie_cookbook_result-01_onnx_default_log.txt", 8.09138),
        (
            "trt10.16.1_h100pcie_cookbook_result-03_loadEngine_cudagraph_spinwait_noDataTransfers_verbose_log.txt",
            None,
        ),
        ("trt8.0.1_jetson_nano_deepstream_yolo_fp16_loadEngine_log.txt", None),
    ],
    ids=["7.x", "8.2.5", "8.5.2-orin", "10.16.1", "10.16.1-loadEngine", "8.0.1-nano-loadEngine"],
)
def test_engine_build_time_is_trtexecs_own(name: str, seconds: float | None) -> None:
    """ "Engine built in N sec." as the recording says it (not TensorRT's "[TRT] Engine generation
    completed", which leaves out trtexec's share); a loaded engine was not built."""
    assert log(name).build_s == seconds


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [{"startComputeMs": "x"}],
            "--exportTimes entry 0: startComputeMs must be a finite time in ms, 0 or more",
        ),
        (
            [{"computeMs": None}],
            "--exportTimes entry 0: computeMs must be a finite time in ms, 0 or more, not null",
        ),
        ([1, 2], "an --exportTimes file is a list of objects; entry 0 is 1"),
        ([{"computeMs": 1.0}, {"computeMs": -1.0}], "--exportTimes entry 1: computeMs must be"),
        (
            [{"computeMs": True}],
            "--exportTimes entry 0: computeMs must be a finite time in ms, 0 or more, not true",
        ),
    ],
)
def test_export_times_that_are_not_times_are_one_data_error(entries: list, message: str) -> None:
    """The trtexec backend (local and --remote) read these with float(): a string or null was a
    traceback, NaN a median of nan µs and -1 ms a median of -1000 µs, exit 0."""
    with pytest.raises(DataError) as info:
        P.parse_times_json(entries)
    assert str(info.value).startswith(message)


def test_a_list_with_no_export_times_key_is_not_read_as_one() -> None:
    """A benchmark summary ([{"config": "full", ...}]) was parsed entry by entry and refused for its
    first field: "--exportTimes entry 0: config must be a finite time in ms". None of its objects
    has an --exportTimes key, so it is not one; a real file's keys all are."""
    with pytest.raises(DataError) as info:
        P.parse_times_json([{"config": "full", "median_us": 398.9}])
    assert str(info.value) == (
        "a JSON list but not a trtexec --exportTimes file (none of its objects has computeMs or another "
        "of its per-query times)"
    )
    recorded = json.loads((FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportTimes_first300.json").read_text())
    assert set(recorded[0]) <= P.EXPORT_TIMES_KEYS and P.is_export_times(recorded)
    assert len(P.parse_times_json([{"latencyMs": 1.0}])) == 1  # one known key is enough to read it as one
