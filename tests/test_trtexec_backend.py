"""The trtexec driver: command lines per version/dtype, and runs against a stand-in `trtexec` script.

The stand-in prints a real recorded trtexec log and copies real exported JSON files to the paths
it is given. It tests our subprocess handling and parsing; it does not build engines.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import statistics
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any
from unittest import mock

import onnx
import pytest
from cli_runner import run_cli
from ssh_fake import SWEEP_TOKEN, board_processes
from test_tensorrt_remote import interrupt_the_timed_run

from deployopt.backends.base import MeasureOptions, Session, get_backend
from deployopt.backends.trtexec import (
    JETSON_TRTEXEC,
    TrtexecBackend,
    build_command,
    detect_version,
    find_trtexec,
    input_shapes,
    shapes_arg,
)
from deployopt.errors import BackendFailed, BackendUnavailable, DeployoptError
from deployopt.layers import ConvShape, conv_model
from deployopt.remote import Board, model_dir_name

#: The board these tests play is this machine: its /tmp/deployopt-trtexec and deployopt-runner folders
#: are every such test's, and a run at work in one (optimize --remote) is what bench's and optimize's
#: look for other runs warns of. One xdist worker runs them all, in turn (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("board")


def _fixture_dir() -> Path:
    shared = os.environ.get("DEPLOYOPT_SHARED")
    base = Path(shared) if shared else Path(__file__).resolve().parents[1].parent / "shared"
    return base / "fixtures" / "trtexec"


FIX = _fixture_dir()


@pytest.fixture(autouse=True)
def _temp_in_tmp_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A failed run keeps a copy of its log in a temporary folder of its own (run_trtexec): here in
    the test's folder, not one more in /tmp per run of the suite."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


needs_fixtures = pytest.mark.skipif(not FIX.is_dir(), reason=f"trtexec fixtures not found at {FIX}")

M = Path("/m/model.onnx")
OUT = Path("/w/model")


# ------------------------------------------------------------------ command construction (pure)


def test_command_trt10_fp16() -> None:
    cmd = build_command("trtexec", M, OUT, MeasureOptions(dtype="fp16", runs=200), "10.3.0")
    assert cmd == [
        "trtexec",
        "--onnx=/m/model.onnx",
        "--saveEngine=/w/model/model.engine",
        "--memPoolSize=workspace:1024",
        "--fp16",
        "--profilingVerbosity=detailed",
        "--exportLayerInfo=/w/model/layer_info.json",
        "--iterations=200",
        "--warmUp=500",
        "--duration=0",
        "--exportTimes=/w/model/times.json",
        "--useCudaGraph",
        "--noDataTransfers",
        "--useSpinWait",
        "--separateProfileRun",
        "--exportProfile=/w/model/profile.json",
    ]


def test_command_trt82_jetpack46_int8_with_calibration_cache() -> None:
    opts = MeasureOptions(
        dtype="int8",
        runs=50,
        extra={"calib_cache": "/c/calib.cache", "timing_cache": "/c/timing.cache", "workspace_mib": 256},
    )
    cmd = build_command("/usr/src/tensorrt/bin/trtexec", M, OUT, opts, "8.2.1", {"x": [4, 3, 224, 224]})
    assert "--workspace=256" in cmd and not any(a.startswith("--memPoolSize") for a in cmd)
    assert cmd[cmd.index("--int8") + 1 : cmd.index("--int8") + 3] == ["--fp16", "--calib=/c/calib.cache"]
    assert "--shapes=x:4x3x224x224" in cmd
    assert "--timingCacheFile=/c/timing.cache" in cmd
    assert "--profilingVerbosity=detailed" in cmd and "--exportLayerInfo=/w/model/layer_info.json" in cmd
    assert "--explicitBatch" not in cmd


def test_command_int8_calibration_table_from_calibration_data() -> None:
    for name in ("model.cache", "model.calib", "model.table", "MODEL.CALIB"):
        table = MeasureOptions(dtype="int8", calibration_data=f"/c/{name}")
        cmd = build_command("trtexec", M, OUT, table, "10.3.0")
        assert cmd[cmd.index("--int8") + 1 : cmd.index("--int8") + 3] == ["--fp16", f"--calib=/c/{name}"]
    # extra["calib_cache"] (the library's way to name the table) wins over calibration_data
    both = MeasureOptions(dtype="int8", calibration_data="/c/a.calib", extra={"calib_cache": "/c/b.cache"})
    assert [a for a in build_command("trtexec", M, OUT, both, "10.3.0") if a.startswith("--calib")] == [
        "--calib=/c/b.cache"
    ]
    none = MeasureOptions(dtype="int8")  # no table: placeholder ranges, no --calib
    assert not any(a.startswith("--calib") for a in build_command("trtexec", M, OUT, none, "10.3.0"))


REFUSAL = (
    "trtexec cannot calibrate INT8 from data, it only reads a calibration table; calibrate with "
    "--backend tensorrt (it calibrates on this data and keeps the table as a .calib file beside its "
    "engine), or pass a calibration table (.cache/.calib/.table)"
)


def test_calibration_data_trtexec_cannot_read_is_refused(tmp_path: Path) -> None:
    """A folder, images or arrays would be dropped by build_command (trtexec cannot read them) and
    the engine built on placeholder ranges: check_options refuses them instead, locally and remote,
    whether or not trtexec is installed here; a table, or another dtype, passes."""
    folder = tmp_path / "images.cache"  # a folder, whatever its name says
    folder.mkdir()
    backend = TrtexecBackend()
    for data in ("/c/images", "/c/x.npy", "/c/x.npz", "/c/cat.jpg", str(folder)):
        for extra in ({}, {"remote": "user@jetson"}):
            with pytest.raises(DeployoptError) as exc:
                backend.check_options(MeasureOptions(dtype="int8", calibration_data=data, extra=extra))
            assert str(exc.value) == f"--calibration-data {data}: {REFUSAL}"
    remote = {"remote": "user@jetson"}
    backend.check_options(MeasureOptions(dtype="int8", calibration_data="/c/model.calib", extra=remote))
    backend.check_options(MeasureOptions(dtype="fp16", calibration_data="/c/images", extra=remote))


def test_placeholder_int8_is_named_in_what_was_timed(fake: dict[str, Path], tmp_path: Path) -> None:
    table = tmp_path / "model.cache"
    table.write_bytes(b"TRT-8601-EntropyCalibration2\n")
    for calib, placeholder in ((None, True), (str(table), False)):
        opts = MeasureOptions(dtype="int8", workdir=fake["workdir"], calibration_data=calib)
        with TrtexecBackend().open(opts) as session:
            timed = session.measure(fake["model"]).timed
            assert session.placeholder_int8 is placeholder
        dtype = "int8, placeholder INT8 ranges" if placeholder else "int8"
        assert timed.startswith(f"one query ({dtype}), ")
        args = fake["FAKE_ARGS"].read_text().split("\n")
        assert [a for a in args if a.startswith("--calib")] == ([] if placeholder else [f"--calib={table}"])
    # a Q/DQ model carries its own scales: trtexec --int8 uses them, no placeholder ranges
    qdq = tmp_path / "qdq.onnx"
    qdq.write_bytes((Path(__file__).parent / "data" / "modelopt_int8_mobilenet_like.onnx").read_bytes())
    with TrtexecBackend().open(MeasureOptions(dtype="int8", workdir=fake["workdir"])) as session:
        assert session.placeholder_int8  # nothing measured yet: said for a model without Q/DQ
        assert session.measure(qdq).timed.startswith("one query (int8), ")
        assert not session.placeholder_int8


def test_command_trt85_uses_mempool() -> None:
    cmd = build_command("trtexec", M, OUT, MeasureOptions(dtype="fp32"), "8.5.2")
    assert "--memPoolSize=workspace:1024" in cmd
    assert "--fp16" not in cmd and "--int8" not in cmd


def test_command_trt80_and_7x_differences() -> None:
    c80 = build_command("trtexec", M, OUT, MeasureOptions(), "8.0.1")
    # trtexec 8.0 has no --profilingVerbosity (its log says "NVTX verbosity"), and fails on an
    # unknown option: its --nvtxMode sets the builder's verbosity
    assert "--nvtxMode=verbose" in c80 and not any(a.startswith("--profilingVerbosity") for a in c80)
    assert not any(a.startswith("--exportLayerInfo") for a in c80)
    c7 = build_command("trtexec", M, OUT, MeasureOptions(), "7.1.3")
    assert "--explicitBatch" in c7 and not any(a.startswith("--profilingVerbosity") for a in c7)
    assert "--explicitBatch" not in build_command("trtexec", M, OUT, MeasureOptions(), "10.16.1")


def test_command_build_only_flag_by_version() -> None:
    new = build_command("trtexec", M, OUT, MeasureOptions(), "8.6.1", build_only=True)
    old = build_command("trtexec", M, OUT, MeasureOptions(), "8.2.1", build_only=True)
    assert new[-1] == "--skipInference" and old[-1] == "--buildOnly"
    # 8.4/8.5 know only --buildOnly (8.5.2's recorded log prints "Build only"); 8.6 renamed it
    jp5 = build_command("trtexec", M, OUT, MeasureOptions(), "8.5.2", build_only=True)
    assert jp5[-1] == "--buildOnly"
    assert not any(a.startswith("--exportTimes") or a.startswith("--iterations") for a in new)


@needs_fixtures
def test_the_recorded_logs_name_the_options_each_version_has() -> None:
    """What the version boundaries above rest on: trtexec 8.0.1 prints "NVTX verbosity" (set by
    --nvtxMode; 8.2 prints "Profiling verbosity"), and 8.5.2 "Build only" (--buildOnly; 8.6 prints
    "Skip inference" among its build options, set by --skipInference)."""
    logs = {
        v: (FIX / name).read_text()
        for v, name in (
            ("8.0", "trt8.0.1_jetson_nano_deepstream_yolo_fp16_loadEngine_log.txt"),
            ("8.2", "trt8.2.5_quickstart_qat-ptq_mobilenetv2_ptq_int8_log.txt"),
            ("8.5", "trt8.5.2_jetson_orin_yolo_int8_verbose_log_lines1-300.txt"),
        )
    }
    assert "NVTX verbosity" in logs["8.0"] and "Profiling verbosity" not in logs["8.0"]
    assert "Profiling verbosity" in logs["8.2"]
    assert "Build only:" in logs["8.5"] and "Skip inference" not in logs["8.5"]


def test_command_knobs() -> None:
    opts = MeasureOptions(
        extra={
            "use_cuda_graph": False,
            "profile": False,
            "warmup_ms": 200,
            "duration_s": 3,
            "trtexec_args": ["--x"],
        }
    )
    cmd = build_command("trtexec", M, OUT, opts, None)  # unknown version: assume current (10.x)
    assert "--useCudaGraph" not in cmd and "--separateProfileRun" not in cmd
    assert "--warmUp=200" in cmd and "--duration=3" in cmd and cmd[-1] == "--x"
    assert "--memPoolSize=workspace:1024" in cmd


def test_shapes(tmp_path: Path) -> None:
    assert shapes_arg({"a": [1, 3, 8, 8], "b": [2]}) == "a:1x3x8x8,b:2"
    import onnx

    model = conv_model(ConvShape(n=1, c=3, h=8, w=8, k=4))
    static = tmp_path / "static.onnx"
    onnx.save(model, static)
    assert input_shapes(static, MeasureOptions()) == {}
    with pytest.raises(DeployoptError, match="fixed batch of 1"):
        input_shapes(static, MeasureOptions(batch=8))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    dyn = tmp_path / "dyn.onnx"
    onnx.save(model, dyn)
    assert input_shapes(dyn, MeasureOptions()) == {"x": [1, 3, 8, 8]}
    assert input_shapes(dyn, MeasureOptions(batch=16)) == {"x": [16, 3, 8, 8]}
    assert input_shapes(dyn, MeasureOptions(input_shapes={"x": [2, 3, 8, 8]})) == {"x": [2, 3, 8, 8]}


# ------------------------------------------------------------------ availability


def test_registry_and_availability(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert isinstance(get_backend("trtexec"), TrtexecBackend)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("DEPLOYOPT_TRTEXEC", raising=False)
    if not os.path.exists(JETSON_TRTEXEC):
        ok, why = TrtexecBackend().availability()
        assert not ok and "trtexec not found" in why and JETSON_TRTEXEC in why and "--remote USER@HOST" in why
        with pytest.raises(BackendUnavailable, match="trtexec not found"):
            TrtexecBackend().open(MeasureOptions())
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(tmp_path / "nope"))
    ok, why = TrtexecBackend().availability()
    assert not ok and why.endswith("is not an executable file")


# ------------------------------------------------------------------ runs against a stand-in binary

FAKE = r"""#!/bin/sh
# stand-in for trtexec: replays a real recorded log and real exported JSON files
if [ "$1" = "--help" ]; then head -n 1 "$FAKE_LOG"; exit 0; fi
printf '%s\n' "$@" > "$FAKE_ARGS"
case "$FAKE_MODE" in
  hang) sleep 30 ;;
  fail) head -n 5 "$FAKE_LOG"
        echo "[12/01/2026-00:00:00] [E] Error[4]: [network.cpp::validate::3062] bad input"; exit 1 ;;
  crash) kill -SEGV $$ ;;
esac
for a in "$@"; do
  case "$a" in
    --exportTimes=*) [ -n "$FAKE_TIMES" ] && cp "$FAKE_TIMES" "${a#--exportTimes=}" ;;
    --exportProfile=*) cp "$FAKE_PROFILE" "${a#--exportProfile=}" ;;
    --exportLayerInfo=*) cp "$FAKE_INFO" "${a#--exportLayerInfo=}" ;;
    --saveEngine=*) echo "FAKE ENGINE of $FAKE_LOG" > "${a#--saveEngine=}" ;;
  esac
done
cat "$FAKE_LOG"
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    if not FIX.is_dir():
        pytest.skip(f"trtexec fixtures not found at {FIX}")
    exe = tmp_path / "bin" / "trtexec"
    exe.parent.mkdir()
    exe.write_text(FAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(exe))
    env = {
        "FAKE_LOG": FIX
        / (
            "trt10.16.1_h100pcie_cookbook_result-03_loadEngine_cudagraph_spinwait"
            "_noDataTransfers_verbose_log.txt"
        ),
        "FAKE_TIMES": FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportTimes_first300.json",
        "FAKE_PROFILE": FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportProfile.json",
        "FAKE_INFO": FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportLayerInfo_detailed.json",
        "FAKE_ARGS": tmp_path / "args.txt",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, str(v))
    monkeypatch.setenv("FAKE_MODE", "")
    model = tmp_path / "conv.onnx"
    model.write_bytes(conv_model(ConvShape(n=1, c=8, h=8, w=8, k=8)).SerializeToString())
    env["model"] = model
    env["workdir"] = tmp_path / "work"
    return env


def test_measure_reads_export_times(fake: dict[str, Path]) -> None:
    opts = MeasureOptions(dtype="fp16", runs=300, workdir=fake["workdir"])
    with TrtexecBackend().open(opts) as session:
        t = session.measure(fake["model"])
        run = session.last_run
    assert t.runs == 300 and t.samples_us[0] == pytest.approx(484.512)
    assert t.environment["tensorrt"] == "10.16.1" and t.environment["device"] == "NVIDIA H100 PCIe"
    assert t.environment["sms"] == 114
    assert t.environment["dtype"] == "fp16"  # compare names a dtype difference (LIKE_FOR_LIKE)
    assert t.warmup == 4792  # queries trtexec reports for its warm-up
    assert run is not None and run.throughput_qps == 24896.9
    args = fake["FAKE_ARGS"].read_text().split("\n")
    # version detected from the banner of --help (10.16.1) -> 10.x flags
    assert "--memPoolSize=workspace:1024" in args and "--fp16" in args and "--iterations=300" in args
    assert f"--exportTimes={fake['workdir'] / 'conv' / 'times.json'}" in args
    assert (fake["workdir"] / "conv" / "trtexec.log").is_file()
    assert (
        (fake["workdir"] / "conv" / "command.txt")
        .read_text()
        .startswith(str(os.environ["DEPLOYOPT_TRTEXEC"]))
    )


def test_the_shapes_timed_are_recorded_and_compared(fake: dict[str, Path], tmp_path: Path) -> None:
    """Each input's shape (the batch timed) is in the result: a dynamic-batch model at batch 1
    against batch 4, the same file and dtype, read as like for like before. A static model records
    its own shape, which trtexec is given no --shapes for."""
    from deployopt.regression import differences

    model = conv_model(ConvShape(n=1, c=3, h=8, w=8, k=4))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    dyn = tmp_path / "dyn.onnx"
    onnx.save(model, dyn)
    timings = []
    for batch in (1, 4):
        opts = MeasureOptions(dtype="fp16", runs=300, batch=batch, workdir=fake["workdir"])
        with TrtexecBackend().open(opts) as session:
            timings.append(session.measure(dyn))
    assert timings[1].environment["input_shapes"] == {"x": [4, 3, 8, 8]}
    assert differences(*timings) == ["input shapes x:1x3x8x8 → x:4x3x8x8"]
    with TrtexecBackend().open(MeasureOptions(dtype="fp16", runs=300, workdir=fake["workdir"])) as session:
        static = session.measure(fake["model"])
    assert static.environment["input_shapes"] == {"x": [1, 8, 8, 8]}


GRAPH_IGNORED = (
    "[07/07/2026-02:11:26] [W] The built TensorRT engine contains operations that are not permitted "
    "under CUDA graph capture mode.\n"
    "[07/07/2026-02:11:26] [W] The specified --useCudaGraph flag has been ignored. The inference will "
    "be launched without using CUDA graph launch.\n"
)  # trtexec's sampleInference.cpp (8.x to 10.x) when the engine cannot be captured


def test_what_was_timed_says_when_trtexec_dropped_the_cuda_graph(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trtexec times without a CUDA graph when capture fails, and says so in two warnings; the
    timing said 'CUDA graph' anyway (and also when extra["use_cuda_graph"] turned it off), so a
    regression compare saw no difference in what was timed."""
    real = Path(os.environ["FAKE_LOG"]).read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(real) if line.endswith("[I] Starting inference\n"))
    log = tmp_path / "graph_ignored.log"
    log.write_text("".join(real[: start + 1]) + GRAPH_IGNORED + "".join(real[start + 1 :]))
    with TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as session:
        assert ", CUDA graph, " in session.measure(fake["model"]).timed  # the recording as it is
    monkeypatch.setenv("FAKE_LOG", str(log))
    with TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as session:
        t = session.measure(fake["model"])
    assert "cuda_graph_ignored" in t.environment["trtexec_flags"]
    assert t.timed == (
        "one query (fp16), GPU compute time per trtexec --exportTimes, no CUDA graph (trtexec could not "
        "capture this engine in one; launch gaps included), no H2D/D2H, spin-wait"
    )
    off = MeasureOptions(workdir=fake["workdir"], extra={"use_cuda_graph": False})
    with TrtexecBackend().open(off) as session:
        assert ", no CUDA graph, " in session.measure(fake["model"]).timed
    assert "--useCudaGraph" not in fake["FAKE_ARGS"].read_text().split("\n")


def test_a_7x_trtexec_is_told_by_its_banner_and_gets_7x_flags(
    fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """trtexec's banner carries [TensorRT vNNNN] from 8.0 on (the recorded 8.0.1 log has it, the 7.x
    log has none). A 7.x binary was taken for an unknown version, which gets 10.x flags: no
    --explicitBatch (7.x needs it for ONNX) and --memPoolSize (7.x only has --workspace)."""
    logs = {
        "trt8.0.1_jetson_nano_deepstream_yolo_fp16_loadEngine_log.txt": "8.0.1",
        "trt7.x_teslaV100_quickstart_pytorch_resnet50_fp16_legacy_format_log.txt": "7",
    }
    for log, version in logs.items():
        lines = (FIX / log).read_text().splitlines(keepends=True)
        (tmp_path / log).write_text(next(line for line in lines if line.startswith("&&&& RUNNING")))
        monkeypatch.setenv("FAKE_LOG", str(tmp_path / log))  # --help prints the banner alone
        assert detect_version(os.environ["DEPLOYOPT_TRTEXEC"]) == version
    monkeypatch.setenv("FAKE_LOG", str(FIX / log))  # the 7.x run
    with TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as session:
        session.run(fake["model"])
    args = fake["FAKE_ARGS"].read_text().split("\n")
    assert "--explicitBatch" in args and "--workspace=1024" in args
    assert not any(a.startswith(("--memPoolSize", "--profilingVerbosity", "--exportLayerInfo")) for a in args)
    monkeypatch.setenv("FAKE_LOG", str(fake["model"]))  # not trtexec's banner: version unknown
    assert detect_version(os.environ["DEPLOYOPT_TRTEXEC"]) is None


def test_profile_joins_tactics(fake: dict[str, Path]) -> None:
    with TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as session:
        prof = session.profile(fake["model"])
    assert prof.runs == 6610 and len(prof.layers) == 73
    assert prof.layers[3].kernels[0].tile == (64, 32, 64)
    assert prof.environment["device"] == "NVIDIA H100 PCIe"


def test_cli_bench_and_profile_say_what_trtexec_measured_on(
    fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench's environment row names the GPU and TensorRT version trtexec ran (it said 'Python ?',
    which trtexec never records, and no TensorRT); profile says where it measured, and on an
    80-column terminal TensorRT's long fused layer names fold instead of squeezing the µs and share
    columns out of the table."""
    from deployopt.cli import app as cli_app

    code, out, err = run_cli(monkeypatch, capsys, "bench", str(fake["model"]), "--backend", "trtexec")
    assert code == 0, err
    env_row = " ".join(line for line in out.splitlines() if "environment" in line)
    assert "NVIDIA H100 PCIe" in env_row and "TensorRT 10.16.1" in env_row
    assert "Python ?" not in out

    monkeypatch.setattr(cli_app.console, "width", 80)
    monkeypatch.setattr(sys, "argv", ["deployopt", "profile", str(fake["model"]), "--backend", "trtexec"])
    from deployopt.cli.main import main

    try:
        main()
    except SystemExit as exc:
        assert exc.code in (0, None)
    out = capsys.readouterr().out
    assert "measured on: NVIDIA H100 PCIe, compute capability 9.0, sms 114, TensorRT 10.16.1" in out
    rows = [line for line in out.splitlines() if line.startswith("│ features.0.0.w")]
    # the exported profile's medianMs of that layer (4.544 µs for QuantizeLinear_2, 8.6 µs here);
    # trtexec's profile has no per-query spread: its IQR is n/a, and a line says why
    cells = [cell.strip() for cell in rows[0].split("│")] if rows else []
    assert cells[3:6] == ["8.6", "n/a", "1.9%"]
    assert "IQR n/a: the backend reports one number per layer (trtexec's profile" in out
    assert "sum of the layer medians" in out and "not an end-to-end latency" in out


def test_bench_and_profile_without_dtype_time_the_fp16_engine_that_deploys(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --dtype, bench and profile on trtexec build --fp16, as optimize and the on-board runner
    do (a Jetson deploys fp16): an fp32 default timed another engine than the one shipped, and a weekly
    `bench` beside `optimize`'s figure compared two precisions. ort keeps fp32 (what it runs)."""
    for command in ("bench", "profile"):
        out = tmp_path / f"{command}.json"
        code, _, err = run_cli(
            monkeypatch,
            capsys,
            command,
            str(fake["model"]),
            "--backend",
            "trtexec",
            "--runs",
            "3",
            "-o",
            str(out),
        )
        assert code == 0, err
        args = fake["FAKE_ARGS"].read_text().split("\n")
        assert "--fp16" in args and "--int8" not in args, command
        doc = json.loads(out.read_text())
        assert doc["environment"]["dtype"] == "fp16", command
    out = tmp_path / "ort.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(fake["model"]), "--backend", "ort", "-o", str(out)
    )
    assert code == 0, err
    assert ", fp32, batch 1, CPUExecutionProvider" in json.loads(out.read_text())["timed"]


def test_no_times_export_with_profile_only_log(
    fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_LOG", str(FIX / "trt10.14.1_rtx6000ada_cookbook_result-05_dumpProfile_log.txt"))
    monkeypatch.setenv("FAKE_TIMES", "")
    with (
        TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as s,
        pytest.raises(DeployoptError, match="no end-to-end timing in this log"),
    ):
        s.measure(fake["model"])


def test_timeout(fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "hang")
    opts = MeasureOptions(timeout_s=1.0, workdir=fake["workdir"], extra={"trt_version": "10.16.1"})
    with TrtexecBackend().open(opts) as s, pytest.raises(BackendFailed, match=r"did not finish within 1 s"):
        s.measure(fake["model"])


def test_nonzero_exit_is_one_line(fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "fail")
    with (
        TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as s,
        pytest.raises(BackendFailed) as exc,
    ):
        s.measure(fake["model"])
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("trtexec exited 1: ")
    assert "Error[4]: [network.cpp::validate::3062] bad input" in msg


def test_crash_by_signal(fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "crash")
    with (
        TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as s,
        pytest.raises(BackendFailed, match="killed by signal 11"),
    ):
        s.measure(fake["model"])


def test_missing_model_and_missing_binary(fake: dict[str, Path], tmp_path: Path) -> None:
    with TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as s:
        with pytest.raises(DeployoptError, match=r"absent\.onnx: no such file"):
            s.measure(tmp_path / "absent.onnx")
        s.trtexec = str(tmp_path / "gone" / "trtexec")
        s.version = "10.3.0"
        with pytest.raises(BackendUnavailable, match="trtexec not found"):
            s.measure(fake["model"])


def test_dtype_and_sms_checks(fake: dict[str, Path]) -> None:
    with pytest.raises(DeployoptError, match="cannot limit the GPU's SMs"):
        TrtexecBackend().open(MeasureOptions(sms=8))
    with pytest.raises(DeployoptError, match="cannot run bf16"):
        TrtexecBackend().open(MeasureOptions(dtype="bf16"))


def test_remote_unreachable_host(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssh = tmp_path / "bin" / "ssh"
    ssh.write_text(
        '#!/bin/sh\necho "ssh: connect to host jetson port 22: Connection timed out" >&2\nexit 255\n'
    )
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{ssh.parent}:{os.environ['PATH']}")
    opts = MeasureOptions(workdir=fake["workdir"], extra={"remote": "user@jetson", "trt_version": "8.2.1"})
    with TrtexecBackend().open(opts) as s, pytest.raises(BackendUnavailable) as exc:
        s.measure(fake["model"])
    assert str(exc.value) == (
        "cannot reach user@jetson over ssh: ssh: connect to host jetson port 22: Connection timed out"
    )


def test_find_trtexec_prefers_env(fake: dict[str, Path]) -> None:
    assert find_trtexec() == os.environ["DEPLOYOPT_TRTEXEC"]


def board_folder(model: Path, root: str | Path = "/tmp/deployopt-trtexec") -> Path:
    """`model`'s folder on the board: its stem and a hash of its bytes (model_dir_name)."""
    return Path(root) / model_dir_name(model.stem, hashlib.sha256(model.read_bytes()).hexdigest())


def content_named(path: Path) -> str:
    """A calibration table's name on the board: its stem, 12 hex digits of its sha256, its suffix
    (another run's table of the same name, other contents, must not replace it)."""
    return f"{path.stem}-{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}{path.suffix}"


#: What a session's trtexec exports are named in a model's board folder (remote.own_name), its token
#: pinned by conftest: times-<token>.json, ...
TAG = f"-{SWEEP_TOKEN}"


def play_a_trtexec_board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in trtexec (its 10.16.1 log and a recorded --exportTimes file, its arguments to
    tmp_path/args.txt; no profile or layer info) on a board played here (play_the_board): the
    returned ssh/scp log. Skips where the recorded fixtures are not found."""
    if not FIX.is_dir():
        pytest.skip(f"trtexec fixtures not found at {FIX}")
    exe = tmp_path / "bin" / "trtexec"
    exe.parent.mkdir()
    exe.write_text(FAKE)
    exe.chmod(0o755)
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(exe))
    times = FIX / "trt8.x_titan_rtx_mobilenet_qat_int8_exportTimes_first300.json"
    monkeypatch.setenv("FAKE_TIMES", str(times))
    monkeypatch.setenv("FAKE_LOG", str(next(FIX.glob("trt10.16.1_*_verbose_log.txt"))))
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "args.txt"))
    for name in ("FAKE_PROFILE", "FAKE_INFO", "FAKE_MODE"):
        monkeypatch.delenv(name, raising=False)
    return play_the_board(tmp_path, monkeypatch)


def play_the_board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stand-in ssh and scp that play the board on this machine (ssh runs the command here with the
    stand-in trtexec, scp copies), each writing its arguments as one line to the returned log;
    DEPLOYOPT_TRTEXEC is unset, so nothing local can run trtexec."""
    bindir = tmp_path / "sshbin"
    bindir.mkdir()
    log = tmp_path / "ssh_scp.log"
    board_trtexec = os.environ["DEPLOYOPT_TRTEXEC"]
    (bindir / "ssh").write_text(
        f'#!/bin/sh\necho "ssh $*" >> "{log}"\nshift 5\n'  # -o BatchMode=yes -o ConnectTimeout=N HOST
        f'exec sh -c "$(echo "$*" | sed "s#/usr/src/tensorrt/bin/trtexec#{board_trtexec}#g")"\n'
    )
    (bindir / "scp").write_text(
        # a HOST:PATH source is read as the board's shell (old scp) or SFTP scp reads it: a wildcard
        # expands there (get_matching); a local source is taken as it is (it may hold spaces)
        f'#!/bin/sh\necho "scp $*" >> "{log}"\nshift 4\n'
        'r=; if [ "$1" = -r ]; then r=-r; shift; fi\n'  # -r: a folder, all it holds (get_folder)
        'case "$1" in *:*) exec cp $r ${1#*:} "$2";; esac\n'
        # local sources, one or several (put_many), to HOST:DEST, the last argument
        "for dest; do :; done\n"
        'while [ $# -gt 1 ]; do cp "$1" "${dest#*:}" || exit 1; shift; done\n'
    )
    for exe in bindir.iterdir():
        exe.chmod(0o755)
    board_processes(bindir, str(tmp_path), monkeypatch)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.delenv("DEPLOYOPT_TRTEXEC")  # nothing local: the binary lives on the board
    return log


def test_cli_bench_remote_runs_trtexec_on_the_board(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`deployopt bench --backend trtexec --remote user@jetson` with ssh/scp stand-ins that play the
    board on this machine: the model goes over, trtexec runs there, its exports come back and are
    what bench prints (and profile's layers, from the same one scp back); no trtexec is needed on
    the host."""
    log = play_the_board(tmp_path, monkeypatch)
    model = tmp_path / f"remote_conv_{os.getpid()}.onnx"
    model.write_bytes(fake["model"].read_bytes())
    board_dir = board_folder(model)

    def on_the_board(command: str) -> tuple[int, str, str]:
        try:
            return run_cli(
                monkeypatch, capsys, command, str(model), "--backend", "trtexec", "--remote", "user@jetson",
                "--dtype", "fp16", "--json",
            )  # fmt: skip
        finally:
            shutil.rmtree(board_dir, ignore_errors=True)

    code, out, err = on_the_board("bench")
    assert code == 0, err
    doc = json.loads(out)
    raw = json.loads(Path(os.environ["FAKE_TIMES"]).read_text())
    assert doc["runs"] == len(raw) == 300
    assert doc["samples_us"][0] == pytest.approx(1000 * raw[0]["computeMs"])
    assert doc["environment"]["trtexec"] == "user@jetson:/usr/src/tensorrt/bin/trtexec"
    assert doc["environment"]["tensorrt"] == "10.16.1"
    # the three exports came back in one scp (a connection each before: six round trips a model)
    scps = [ln.split() for ln in log.read_text().splitlines() if ln.startswith("scp ")]
    back = [args[-2] for args in scps if args[-2].startswith("user@jetson:")]
    assert back == [f"user@jetson:{board_dir}/*{TAG}.json"]  # this session's own exports only
    code, out, err = on_the_board("profile")
    assert code == 0, err
    recorded = json.loads(Path(os.environ["FAKE_PROFILE"]).read_text())
    assert len(json.loads(out)["layers"]) == len([r for r in recorded if "name" in r]) > 0


def test_ctrl_c_on_bench_remote_ends_trtexecs_work_on_the_board(
    fake: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    board_processes: list[Any],
) -> None:
    """Ctrl-C while trtexec times the model on the board: what runs from the model's folder there is
    ended (one pkill) before exit 130, as for the runner (tests/test_tensorrt_remote.py); it held
    the GPU until its --timeout. A process of another folder is left alone."""
    log = play_the_board(tmp_path, monkeypatch)
    model = tmp_path / f"remote_ctrl_c_{os.getpid()}.onnx"
    model.write_bytes(fake["model"].read_bytes())
    board_dir = board_folder(model)
    ended, other = interrupt_the_timed_run(monkeypatch, tmp_path, str(board_dir), board_processes)
    try:
        code, _, err = run_cli(
            monkeypatch, capsys, "bench", str(model), "--backend", "trtexec", "--remote", "user@jetson",
        )  # fmt: skip
    finally:
        shutil.rmtree(board_dir, ignore_errors=True)
    assert code == 130, err
    assert ended() and other.poll() is None
    # what names this session's own exports there (another session's run of the file goes on)
    own = f"[/]{str(board_dir)[1:]}/layer_info{TAG}\\.json"
    assert log.read_text().splitlines()[-1] == f"ssh {SSH_OPTS} user@jetson pkill -f -- '{own}'"


def test_cli_remote_trtexec_says_which_board_measured(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A latency trtexec timed on the board says so, as the runner's does ("Orin at user@jetson"):
    the environment records the host, and bench's environment line and profile's `measured on:`
    name it. Before, both read as if the GPU named were this machine's."""
    log = play_the_board(tmp_path, monkeypatch)
    model = tmp_path / f"remote_where_{os.getpid()}.onnx"
    model.write_bytes(fake["model"].read_bytes())
    board_dir = board_folder(model)
    said = {}
    try:
        for command, *more in (("bench",), ("profile",), ("bench", "--json")):
            code, out, err = run_cli(
                monkeypatch, capsys, command, str(model), "--backend", "trtexec", "--remote", "user@jetson",
                "--dtype", "fp16", *more,
            )  # fmt: skip
            assert code == 0, err
            said[" ".join([command, *more])] = out
    finally:
        shutil.rmtree(board_dir, ignore_errors=True)
    assert " user@jetson " in log.read_text()  # timed on the (stand-in) board
    assert json.loads(said["bench --json"])["environment"]["remote"] == "user@jetson"
    assert "NVIDIA H100 PCIe at user@jetson, compute capability 9.0" in said["bench"]
    assert "measured on: NVIDIA H100 PCIe at user@jetson, compute capability 9.0" in said["profile"]


def test_remote_run_folder_engine_comes_back_and_the_folder_goes(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What optimize --remote --backend trtexec asks of a session: every model in a folder of the
    run's own on the board (`remote_run`), the engine trtexec saved there copied back on request
    (keep_engine), and the folder removed when the session closes; a local session keeps its engine
    file the same way, with no ssh."""
    log = play_the_board(tmp_path, monkeypatch)
    run = f"optimize-conv-{os.getpid()}"
    # the run's folder under this test's own root: in the shared /tmp/deployopt-trtexec, a bench test
    # on the other xdist worker saw it at work and warned of "another deployopt run" (a flaky stderr)
    root = tmp_path / "board_tmp"
    board = root / run
    extra = {"remote": "user@jetson", "remote_run": run, "remote_workdir": str(root)}
    opts = MeasureOptions(dtype="fp16", workdir=fake["workdir"], extra=extra)
    try:
        with TrtexecBackend().open(opts) as s:
            s.preflight()
            assert board.is_dir()  # the board answered: its folder is made before anything else
            timing = s.measure(fake["model"])
            engine = timing.environment["engine"]
            assert re.fullmatch(
                re.escape(f"{board_folder(fake['model'], board)}/conv-") + r"[0-9a-f]{12}\.engine", engine
            )
            assert Path(engine).is_file()
            kept = tmp_path / "kept.engine"
            assert s.keep_engine(timing, kept)
            assert kept.read_text().startswith("FAKE ENGINE of ")
        assert not board.exists()
        assert (
            log.read_text().splitlines()[-1]
            == f"ssh -o BatchMode=yes -o ConnectTimeout=10 user@jetson rm -rf {board}"
        )
    finally:
        shutil.rmtree(board, ignore_errors=True)
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(tmp_path / "bin" / "trtexec"))
    local = MeasureOptions(dtype="fp16", workdir=tmp_path / "local", extra={"trt_version": "10.16.1"})
    with TrtexecBackend().open(local) as s:
        timing = s.measure(fake["model"])
        assert timing.environment["engine"] == str(tmp_path / "local" / "conv" / "conv.engine")
        assert s.keep_engine(timing, tmp_path / "local.engine")
        assert (tmp_path / "local.engine").read_text().startswith("FAKE ENGINE of ")


def test_cli_remote_trtexec_runs_under_the_boards_timeout(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """trtexec on the board runs under the board's own coreutils `timeout` at --timeout, so a hung
    build ends there (killing the local ssh alone leaves it holding the board's GPU); the board's
    status 124 (its `timeout` ended trtexec, played here by the stand-in ssh) is the same one line
    a local timeout gives, and nothing is written."""
    log = play_the_board(tmp_path, monkeypatch)
    ssh = tmp_path / "sshbin" / "ssh"
    board_ssh = ssh.rename(ssh.with_name("board_ssh"))
    ssh.write_text(
        # the build's ssh (not the version check's, which runs under `timeout` too)
        '#!/bin/sh\ncase "$*" in *" timeout --kill-after="*--saveEngine=*)\n'
        f'  echo "ssh $*" >> "{log}"; exit 124;;\nesac\nexec "{board_ssh}" "$@"\n'
    )
    ssh.chmod(0o755)
    model = tmp_path / f"remote_hang_{os.getpid()}.onnx"
    model.write_bytes(fake["model"].read_bytes())
    board_dir = board_folder(model)
    out = tmp_path / "result.json"
    try:
        code, stdout, err = run_cli(
            monkeypatch, capsys, "bench", str(model), "--backend", "trtexec", "--remote", "user@jetson",
            "--dtype", "fp16", "--timeout", "7", "-o", str(out),
        )  # fmt: skip
    finally:
        shutil.rmtree(board_dir, ignore_errors=True)
    assert (code, stdout, err) == (
        2,
        "",
        "error: trtexec on user@jetson did not finish within 7 s; --timeout SECONDS raises the limit (a "
        "first engine build on a Jetson Nano can take minutes)\n",
    )
    assert not out.exists()
    run = log.read_text().splitlines()[-1]
    assert run.startswith(
        "ssh -o BatchMode=yes -o ConnectTimeout=10 user@jetson timeout --kill-after=10 7 "
        f"/usr/src/tensorrt/bin/trtexec --onnx={board_dir / model.name} "
    )


def test_cli_remote_int8_copies_the_calibration_table_to_the_board(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench --remote user@jetson --dtype int8 --calibration-data model.calib`: the table goes to
    the board beside the model (scp), and the board's trtexec gets --calib naming that copy, not
    the host path, which does not exist there."""
    log = play_the_board(tmp_path, monkeypatch)
    model = tmp_path / f"remote_int8_{os.getpid()}.onnx"
    model.write_bytes(fake["model"].read_bytes())
    table = tmp_path / "host" / "model.calib"
    table.parent.mkdir()
    table.write_bytes(b"TRT-8601-EntropyCalibration2\ninput: 3c000000\n")
    board_dir = board_folder(model)
    try:
        code, out, err = run_cli(
            monkeypatch, capsys, "bench", str(model), "--backend", "trtexec", "--remote", "user@jetson",
            "--dtype", "int8", "--calibration-data", str(table), "--json",
        )  # fmt: skip
        sent = board_dir / content_named(table)
        on_board = sent.read_bytes() if sent.is_file() else None
    finally:
        shutil.rmtree(board_dir, ignore_errors=True)
    assert code == 0, err
    opts = "-o BatchMode=yes -o ConnectTimeout=10"
    copies = [line for line in log.read_text().splitlines() if line.startswith("scp ")]
    assert copies[:2] == [
        f"scp {opts} {model} user@jetson:{board_dir / model.name}",
        f"scp {opts} {table} user@jetson:{sent}",
    ]
    assert on_board == table.read_bytes()
    args = fake["FAKE_ARGS"].read_text().split("\n")
    assert [a for a in args if a.startswith("--calib")] == [f"--calib={sent}"]
    assert json.loads(out)["timed"].startswith("one query (int8), ")


def test_cli_remote_bench_and_profile_name_another_run_at_work_on_the_board(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench (here of a prebuilt engine) and profile with trtexec on the board look for another run
    at work there, as optimize does, in the ssh that makes the model's folder: an optimize run left
    building in trtexec's work folder (its host killed) is one warning line naming its folder, its
    pid and the ssh that ends it, before trtexec times; a process of a folder outside the work
    folders, named like one, is not named. The board's pgrep sees only this test's processes
    (ssh_fake.board_processes), so no other test's run is seen."""
    import subprocess

    import deployopt.remote

    log = play_the_board(tmp_path, monkeypatch)
    workdir = tmp_path / "board_tmp" / "deployopt-trtexec"
    monkeypatch.setattr(deployopt.remote, "TRTEXEC_WORKDIR", str(workdir))
    stale = workdir / f"optimize-old-{os.getpid()}"
    (stale / "net").mkdir(parents=True)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    busy = subprocess.Popen([*sleeper, f"--onnx={stale}/net/net.onnx", "--fp16"])
    alike = subprocess.Popen([*sleeper, f"--onnx={workdir}-copy/{stale.name}/net.onnx", "--fp16"])
    model = tmp_path / f"remote_busy_{os.getpid()}.onnx"
    model.write_bytes(fake["model"].read_bytes())
    engine = tmp_path / f"remote_busy_engine_{os.getpid()}.engine"
    engine.write_bytes(b"an engine the board built")
    board_dirs = [board_folder(path) for path in (model, engine)]
    try:
        for command, path in (("bench", engine), ("profile", model)):
            log.write_text("")
            code, _, err = run_cli(
                monkeypatch, capsys, command, str(path), "--backend", "trtexec", "--remote", "user@jetson",
                "--dtype", "fp16", "--json",
            )  # fmt: skip
            assert code == 0, err
            said = [ln for ln in err.splitlines() if "another deployopt run" in ln]
            assert said == [
                f"warning: another deployopt run is still at work on user@jetson ({stale}: pid {busy.pid}): "
                "its GPU work would be timed with this run's. It ends at its own --timeout; to end it "
                f"now: ssh user@jetson kill {busy.pid}"
            ], err
            assert str(alike.pid) not in said[0]
            calls = log.read_text().splitlines()
            made = (
                f"user@jetson mkdir -p {board_folder(path)} && rm -f -- "
                f"{board_folder(path)}/*{TAG}.json || exit; echo deployopt-self $$ $PPID; "
                "pgrep -af -- '[/]tmp/deployopt-trtexec/|[d]eployopt-runner/|"
                f"[/]{str(workdir)[1:]}/' 2>/dev/null; exit 0"
            )
            assert "--help" in calls[0] and calls[1].endswith(made)  # the look rides on the mkdir
            assert any("--exportTimes" in c for c in calls[2:])  # timed after the warning
        assert busy.poll() is None and stale.is_dir()  # warned of, not touched
    finally:
        for proc in (busy, alike):
            proc.kill()
            proc.wait()
        for board_dir in board_dirs:
            shutil.rmtree(board_dir, ignore_errors=True)


def test_remote_calib_cache_keeps_the_board_files_apart_and_must_exist(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """extra["calib_cache"] may be named anything: a table named like the model is copied under
    another name (its contents' hash added, as every table's), so it replaces nothing on the board.
    A missing table is one line, before ssh."""
    log = play_the_board(tmp_path, monkeypatch)
    board = tmp_path / "board"
    table = tmp_path / "tables" / fake["model"].name  # conv.onnx, the model's own name
    table.parent.mkdir()
    table.write_bytes(b"TRT-8601-EntropyCalibration2\n")
    extra = {"remote": "user@jetson", "remote_workdir": str(board), "calib_cache": str(table)}
    opts = MeasureOptions(dtype="int8", runs=3, workdir=fake["workdir"], extra=extra)
    with TrtexecBackend().open(opts) as session:
        session.measure(fake["model"])
    rdir = board_folder(fake["model"], board)
    assert (rdir / fake["model"].name).read_bytes() == fake["model"].read_bytes()
    sent = rdir / content_named(table)
    assert sent.name != fake["model"].name and sent.read_bytes() == table.read_bytes()
    args = fake["FAKE_ARGS"].read_text().split("\n")
    assert [a for a in args if a.startswith("--calib")] == [f"--calib={sent}"]
    assert f"--onnx={rdir / fake['model'].name}" in args

    log.unlink()
    extra["calib_cache"] = str(tmp_path / "tables" / "missing.calib")
    with pytest.raises(DeployoptError) as exc, TrtexecBackend().open(opts) as session:
        session.measure(fake["model"])
    assert str(exc.value) == f"{tmp_path / 'tables' / 'missing.calib'}: no such file"
    assert not log.exists()  # nothing reached the board


def test_remote_timing_cache_lives_on_the_board(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """extra["timing_cache"] with --remote: the board's trtexec gets a path on the board (the work
    folder every model shares), not the host's, which does not exist there."""
    play_the_board(tmp_path, monkeypatch)
    board = tmp_path / "board"
    host_cache = tmp_path / "host" / "orin.timing"
    extra = {"remote": "user@jetson", "remote_workdir": str(board), "timing_cache": str(host_cache)}
    opts = MeasureOptions(dtype="fp16", runs=3, workdir=fake["workdir"], extra=extra)
    with TrtexecBackend().open(opts) as session:
        session.measure(fake["model"])
    args = fake["FAKE_ARGS"].read_text().split("\n")
    caches = [a for a in args if a.startswith("--timingCacheFile")]
    assert caches == [f"--timingCacheFile={board / 'orin.timing'}"]


def test_remote_names_on_the_board_are_plain(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model named with spaces and quotes: older scp hands the remote path to the board's shell,
    which would split it, so the board's folder and files get plain names, and trtexec is given
    those."""
    log = play_the_board(tmp_path, monkeypatch)
    board = tmp_path / "board"
    model = tmp_path / "my model (v2)'s.onnx"
    model.write_bytes(fake["model"].read_bytes())
    opts = MeasureOptions(dtype="fp16", runs=3, workdir=fake["workdir"], extra={"remote": "user@jetson",
                          "remote_workdir": str(board)})  # fmt: skip
    with TrtexecBackend().open(opts) as session:
        session.measure(model)
    rdir = board_folder(model, board)
    assert rdir.name.startswith("my_model__v2__s-")
    assert (rdir / "my_model__v2__s.onnx").read_bytes() == model.read_bytes()
    copies = [line for line in log.read_text().splitlines() if line.startswith("scp ")]
    copy = next(line for line in copies if str(model) in line)
    assert copy.endswith(f"user@jetson:{rdir / 'my_model__v2__s.onnx'}")
    args = fake["FAKE_ARGS"].read_text().split("\n")
    assert f"--onnx={rdir / 'my_model__v2__s.onnx'}" in args
    (engine,) = [a for a in args if a.startswith("--saveEngine=")]  # named after its build's options
    assert re.fullmatch(re.escape(f"--saveEngine={rdir}/my_model__v2__s-") + r"[0-9a-f]{12}\.engine", engine)


def test_cli_remote_needs_trtexec_and_reports_an_unreachable_board(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", str(fake["model"]), "--backend", "ort", "--remote", "user@jetson"
    )
    assert code == 2 and out == ""
    assert err.strip() == (
        "error: --remote runs on the board over ssh, trtexec (--backend trtexec) or jetson/runner.py "
        "(--backend tensorrt): use it with one of those, not 'ort'"
    )
    ssh = tmp_path / "bin" / "ssh"
    ssh.write_text('#!/bin/sh\necho "ssh: connect to host jetson port 22: No route to host" >&2\nexit 255\n')
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{ssh.parent}:{os.environ['PATH']}")
    dest = tmp_path / "result.json"
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", str(fake["model"]), "--backend", "trtexec", "--remote", "user@jetson",
        "-o", str(dest),
    )  # fmt: skip
    assert code == 2 and not dest.exists()
    assert (
        err.strip()
        == "error: cannot reach user@jetson over ssh: ssh: connect to host jetson port 22: No route to host"
    )


def test_cli_refuses_calibration_data_trtexec_cannot_read(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench|profile --backend trtexec --dtype int8 --calibration-data DIR|.npy`: one line, exit 2,
    before trtexec runs (locally or on a board) and before -o is written; a table is passed on as
    --calib and the run goes through."""
    images = tmp_path / "images"
    images.mkdir()
    arrays = tmp_path / "calib.npy"
    arrays.write_bytes(b"")
    dest = tmp_path / "result.json"
    for command in ("bench", "profile"):
        for data in (images, arrays):
            for remote in ([], ["--remote", "user@jetson"]):
                code, out, err = run_cli(
                    monkeypatch, capsys, command, str(fake["model"]), "--backend", "trtexec",
                    "--dtype", "int8", "--calibration-data", str(data), *remote, "-o", str(dest),
                )  # fmt: skip
                assert (code, out) == (2, ""), err
                assert err == f"error: --calibration-data {data}: {REFUSAL}\n"
                assert not dest.exists() and not fake["FAKE_ARGS"].exists()
    table = tmp_path / "model.calib"
    table.write_bytes(b"TRT-8601-EntropyCalibration2\n")
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", str(fake["model"]), "--backend", "trtexec", "--dtype", "int8",
        "--calibration-data", str(table), "--json",
    )  # fmt: skip
    assert code == 0, err
    args = fake["FAKE_ARGS"].read_text().split("\n")
    assert args[args.index("--int8") + 1 : args.index("--int8") + 3] == ["--fp16", f"--calib={table}"]
    assert json.loads(out)["timed"].startswith("one query (int8), ")


@pytest.mark.slow
def test_optimize_int8_says_trtexec_engines_had_placeholder_ranges(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`optimize --backend trtexec --dtype int8 --calibration-data DIR`: the data still feeds the
    fidelity check, trtexec never gets it (nor any --calib), and report.json, report.md and the
    console all say the engines ran on placeholder INT8 ranges. fp16 says nothing of the kind."""
    import numpy as np

    from deployopt.report import PLACEHOLDER_INT8_NOTE
    from deployopt.zoo.graphs import resnet_projection

    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    model = tmp_path / "tiny.onnx"
    model.write_bytes(resnet_projection((12,), blocks_per_stage=1, image_size=8).SerializeToString())
    data = tmp_path / "calib"
    data.mkdir()
    np.save(data / "x.npy", np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32))
    argv = ["optimize", str(model), "--target", "h200", "--backend", "trtexec", "--max-evals", "4",
            "--sweep-runs", "2", "--calibration-data", str(data)]  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, *argv, "--dtype", "int8", "-o", str(tmp_path / "int8"))
    assert code == 0, err
    args = fake["FAKE_ARGS"].read_text().split("\n")  # the last trtexec command optimize ran
    assert "--int8" in args and not any(a.startswith("--calib") for a in args)
    report = json.loads((tmp_path / "int8" / "report.json").read_text())
    assert report["measured"] is True and report["note"] == PLACEHOLDER_INT8_NOTE
    assert f"INT8: {PLACEHOLDER_INT8_NOTE}" in report["what_was_measured"]
    assert report["fidelity"]["source"].startswith(str(data))
    assert f"**Note: {PLACEHOLDER_INT8_NOTE}.**" in (tmp_path / "int8" / "report.md").read_text()
    assert f"note: {PLACEHOLDER_INT8_NOTE}" in " ".join(out.split())
    code, out, err = run_cli(monkeypatch, capsys, *argv, "--dtype", "fp16", "-o", str(tmp_path / "fp16"))
    assert code == 0, err
    report = json.loads((tmp_path / "fp16" / "report.json").read_text())
    assert report["note"] is None and not any("INT8" in w for w in report["what_was_measured"])
    assert "placeholder" not in out


# ------------------------------------------------------------------ TensorRT 11.x: strong typing
# Written from NVIDIA's 10.x-to-11.x trtexec migration guide (--fp16, --int8, --best and --calib
# removed; strong typing always on); no TensorRT 11 trtexec has been run here.

V11 = "11.4.1"
PRECISION_FLAGS = ("--fp16", "--int8", "--best", "--bf16", "--fp8", "--int4", "--stronglyTyped")
TABLE_OPTS = {"calib_cache": "/c/calib.cache"}


@pytest.mark.parametrize(
    ("version", "fp16", "int8"),
    [
        ("8.2.1", ["--fp16"], ["--int8", "--fp16", "--calib=/c/calib.cache"]),
        ("8.5.2", ["--fp16"], ["--int8", "--fp16", "--calib=/c/calib.cache"]),
        ("10.3.0", ["--fp16"], ["--int8", "--fp16", "--calib=/c/calib.cache"]),
        ("10.16.1", ["--fp16"], ["--int8", "--fp16", "--calib=/c/calib.cache"]),
        (V11, [], []),
        ("11.0.0", [], []),
    ],
)
def test_precision_flags_per_version(version: str, fp16: list[str], int8: list[str]) -> None:
    """Up to 10.x the precision is a flag; 11.x has none (the model carries it), nor --calib."""

    def flags(dtype: str) -> list[str]:
        cmd = build_command("trtexec", M, OUT, MeasureOptions(dtype=dtype, extra=TABLE_OPTS), version)
        return [a for a in cmd if a.startswith(PRECISION_FLAGS) or a.startswith("--calib")]

    assert flags("fp16") == fp16 and flags("int8") == int8 and flags("fp32") == []


def test_trt11_command_is_the_10x_command_less_the_precision_flags() -> None:
    for dtype in ("fp16", "int8"):
        opts = MeasureOptions(dtype=dtype, runs=50, extra=TABLE_OPTS)
        ten = build_command("trtexec", M, OUT, opts, "10.16.1", {"x": [1, 3, 8, 8]})
        eleven = build_command("trtexec", M, OUT, opts, V11, {"x": [1, 3, 8, 8]})
        assert eleven == [a for a in ten if not a.startswith(("--fp16", "--int8", "--calib"))]
        assert build_command("trtexec", M, OUT, opts, V11, build_only=True)[-1] == "--skipInference"


@pytest.fixture
def fake11(fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The stand-in trtexec with a SYNTHETIC 11.4.1 banner: the recorded 10.16.1 log whose first line
    (what `trtexec --help` prints) names TensorRT v110401. Not a recording of TensorRT 11."""
    lines = Path(os.environ["FAKE_LOG"]).read_text().splitlines(keepends=True)
    log = tmp_path / "trt11_synthetic_log.txt"
    log.write_text(lines[0].replace("[TensorRT v101601]", "[TensorRT v110401]") + "".join(lines[1:]))
    monkeypatch.setenv("FAKE_LOG", str(log))
    return fake


def test_trt11_fp16_builds_the_model_typed_fp16(fake11: dict[str, Path]) -> None:
    """fp16 on 11.x: the model typed fp16 (deployopt.precision) is written in the run's work folder
    and given to trtexec instead, with no --fp16; what was timed says where fp16 came from."""
    from deployopt.precision import is_low_precision

    opts = MeasureOptions(dtype="fp16", runs=300, workdir=fake11["workdir"])
    with TrtexecBackend().open(opts) as session:
        timing = session.measure(fake11["model"])
        assert session.version == V11 and not session.placeholder_int8
    typed = fake11["workdir"] / "conv" / "conv.fp16.onnx"
    args = fake11["FAKE_ARGS"].read_text().split("\n")
    assert f"--onnx={typed}" in args and f"--saveEngine={typed.with_suffix('.engine')}" in args
    assert not any(a.startswith(PRECISION_FLAGS) for a in args)
    model = onnx.load(typed)
    assert is_low_precision(model)
    source = onnx.load(fake11["model"])
    assert [(v.name, v.type) for v in (*model.graph.input, *model.graph.output)] == [
        (v.name, v.type) for v in (*source.graph.input, *source.graph.output)
    ]  # fp32 I/O, same names and shapes
    assert timing.timed.startswith("one query (fp16: the model typed fp16 inside, fp32 I/O (TensorRT 11 ")
    assert timing.runs == 300


def test_trt11_int8_needs_qdq_and_no_calibration(fake11: dict[str, Path], tmp_path: Path) -> None:
    """int8 on 11.x: a model without Q/DQ nodes, or a calibration table, is refused in one line
    before trtexec builds anything; a Q/DQ model (ModelOpt's) is built as it is, with no --int8."""
    opts = MeasureOptions(dtype="int8", runs=300, workdir=fake11["workdir"])
    with TrtexecBackend().open(opts) as session, pytest.raises(DeployoptError) as exc:
        session.measure(fake11["model"])
    message = str(exc.value)
    assert message.startswith(f"--dtype int8: TensorRT {V11} builds INT8 only from Q/DQ nodes in the model")
    assert "conv.onnx has none" in message and "modelopt.onnx.quantization" in message
    assert "\n" not in message and not fake11["FAKE_ARGS"].exists()  # trtexec never ran a build
    table = tmp_path / "model.calib"
    table.write_bytes(b"TRT-8601-EntropyCalibration2\n")
    qdq = Path(__file__).parent / "data" / "modelopt_int8_se_net.onnx"
    for calib in ({"calibration_data": str(table)}, {"extra": {"calib_cache": str(table)}}):
        refused = rf"^--dtype int8 with calibration {table}: TensorRT {V11}"
        options = MeasureOptions(dtype="int8", workdir=fake11["workdir"], **calib)
        with TrtexecBackend().open(options) as s, pytest.raises(DeployoptError, match=refused):
            s.measure(qdq)
    assert not fake11["FAKE_ARGS"].exists()
    with pytest.raises(DeployoptError, match=r"cannot calibrate \(11\.0 removed implicit INT8"):
        TrtexecBackend().check_options(
            MeasureOptions(dtype="int8", calibration_data=str(table), extra={"trt_version": V11})
        )
    with TrtexecBackend().open(opts) as session:
        timing = session.measure(qdq)
        assert not session.placeholder_int8
    args = fake11["FAKE_ARGS"].read_text().split("\n")
    assert f"--onnx={qdq}" in args and not any(a.startswith(PRECISION_FLAGS) for a in args)
    assert timing.timed.startswith("one query (int8 from the model's Q/DQ nodes (TensorRT 11 ")


def test_cli_int8_on_trt11_is_one_line(
    fake11: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`deployopt bench model.onnx --backend trtexec --dtype int8` on TensorRT 11: exit 2, one
    line, no traceback; with a calibration table too."""
    table = tmp_path / "model.calib"
    table.write_bytes(b"TRT-8601-EntropyCalibration2\n")
    base = ["bench", str(fake11["model"]), "--backend", "trtexec", "--dtype", "int8", "--runs", "3"]
    for extra in ([], ["--calibration-data", str(table)]):
        code, out, err = run_cli(monkeypatch, capsys, *base, *extra)
        assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: --dtype int8"), err
        assert "Traceback" not in err and f"TensorRT {V11}" in err and "Q/DQ" in err


def test_cli_remote_trt11_converts_on_the_host_before_pushing(
    fake11: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Remote fp16 on a board whose trtexec is 11.x: its version is asked first, the model is typed
    fp16 on the host and that file is what scp copies; the board's trtexec gets no --fp16."""
    log = play_the_board(tmp_path, monkeypatch)
    model = tmp_path / f"remote11_{os.getpid()}.onnx"
    model.write_bytes(fake11["model"].read_bytes())
    folders = Path("/tmp/deployopt-trtexec")
    try:
        code, _, err = run_cli(
            monkeypatch, capsys, "bench", str(model), "--backend", "trtexec", "--remote", "user@jetson",
            "--dtype", "fp16", "--json",
        )  # fmt: skip
        # the folder of the file sent: the typed copy's bytes, the model's name
        (board_dir,) = folders.glob(f"{model.stem}-*")
        on_board = sorted(p.name for p in board_dir.iterdir())
    finally:
        for folder in folders.glob(f"{model.stem}-*"):
            shutil.rmtree(folder, ignore_errors=True)
    assert code == 0, err
    calls = log.read_text().splitlines()
    assert "--help" in calls[0] and "mkdir" in calls[1]  # the version before anything reaches the board
    typed = f"{model.stem}.fp16.onnx"
    scp = [c for c in calls if c.startswith("scp ") and ".onnx" in c]
    assert len(scp) == 1 and scp[0].endswith(f"user@jetson:{board_dir / typed}")
    assert typed in on_board
    args = fake11["FAKE_ARGS"].read_text().split("\n")
    assert f"--onnx={board_dir / typed}" in args and not any(a.startswith(PRECISION_FLAGS) for a in args)


def test_a_local_trtexec_run_records_clock_slowdown(
    fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """nvidia-smi (a stand-in printing the real H200 recording, then an edited copy of it that says
    SW thermal slowdown held the clock down 1.2 s) is read before and after trtexec, of the
    machine's only GPU: the timing records the slowdown, and bench warns. No SM clock: trtexec has
    exited by then, and the GPU is idle again."""
    from nvidia_smi_fake import h200_readings, install_fake_nvidia_smi, throttled_after

    before, after = h200_readings()
    args = install_fake_nvidia_smi(monkeypatch, tmp_path, [before, throttled_after()])
    with TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as session:
        t = session.measure(fake["model"])
    held = {"sw_thermal_slowdown": 1_200_000, "hw_power_brake_slowdown": 5000}
    assert t.environment["clock_slowdown_us"] == held and "clocks" not in t.environment
    assert args.read_text().splitlines() == ["-q -d CLOCK,PERFORMANCE"] * 2
    (tmp_path / "fake-smi" / "count").unlink()
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(fake["model"]), "--backend", "trtexec")
    assert code == 0 and err.startswith(
        "warning: the GPU's clock was held down while this was timed (SW thermal"
    )
    # the real recording on both sides: checked, and nothing held the clock down
    (tmp_path / "fake-smi" / "count").unlink()
    (tmp_path / "fake-smi" / "last.txt").write_text(after)
    (tmp_path / "fake-smi" / "reading1.txt").write_text(after)
    with TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as session:
        assert session.measure(fake["model"]).environment["clock_slowdown_us"] == {}


# ------------------------------------------------------------------ killed by SIGKILL (the OOM killer)

OOM_LINE = (
    "was killed (SIGKILL): most often the kernel's out-of-memory killer (a Jetson's GPU shares the "
    "system's memory): `sudo dmesg | grep -i -E 'killed process|out of memory'`"
)


def trtexec_that(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, body: str) -> Path:
    """A stand-in trtexec that answers --help as the recorded one does (the version check), and
    otherwise runs `body` (sh) instead of building."""
    exe = tmp_path / "bin" / "trtexec_then"
    real = os.environ["DEPLOYOPT_TRTEXEC"]
    exe.write_text(f'#!/bin/sh\nif [ "$1" = "--help" ]; then exec "{real}" "$@"; fi\n{body}\n')
    exe.chmod(0o755)
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(exe))
    return exe


def test_a_trtexec_killed_by_sigkill_points_at_the_oom_killer(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """trtexec here ended by SIGKILL (a real process killing itself with `kill -KILL`, as the kernel's
    OOM killer ends a build, with no word of its own): one line that says what usually sends it and
    where to look, not `killed by signal 9` and its last log line; the kept log still named."""
    trtexec_that(monkeypatch, tmp_path, 'echo "[I] [TRT] Building engine..."; kill -KILL $$')
    with (
        TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"])) as s,
        pytest.raises(BackendFailed) as exc,
    ):
        s.measure(fake["model"])
    msg = str(exc.value)
    assert msg.startswith(f"trtexec {OOM_LINE} tells; stop other programs, add swap or try a smaller --batch")
    assert msg.endswith("trtexec.log)") and "(log: " in msg and "\n" not in msg
    out = tmp_path / "result.json"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(fake["model"]), "--backend", "trtexec", "-o", str(out)
    )
    assert (code, stdout) == (2, "") and not out.exists()
    assert err.startswith(f"error: trtexec {OOM_LINE} tells; ") and err.count("\n") == 1


def test_cli_remote_trtexec_killed_on_the_board_points_at_its_oom_killer(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """trtexec killed by SIGKILL on the board, behind an ssh that ends as OpenSSH's does: the board's
    shell keeps its status (a command list) and passes 137 on, which is one line naming the host and
    the board's kernel log. A shell that exec'd the command, as one given a single command does,
    died with it, and ssh's 255 read as an unreachable board."""
    from ssh_fake import end_as_openssh

    from deployopt.remote import PASS_STATUS

    trtexec_that(monkeypatch, tmp_path, 'echo "[I] [TRT] Building engine..."; kill -KILL $$')
    log = play_the_board(tmp_path, monkeypatch)
    end_as_openssh(tmp_path / "sshbin" / "ssh")
    model = tmp_path / f"remote_oom_{os.getpid()}.onnx"
    model.write_bytes(fake["model"].read_bytes())
    out = tmp_path / "result.json"
    try:
        code, stdout, err = run_cli(
            monkeypatch, capsys, "bench", str(model), "--backend", "trtexec", "--remote", "user@jetson",
            "--dtype", "fp16", "-o", str(out),
        )  # fmt: skip
    finally:
        shutil.rmtree(board_folder(model), ignore_errors=True)
    assert (code, stdout) == (2, "") and not out.exists()
    assert err == (
        f"error: trtexec on user@jetson {OOM_LINE} on the board tells; stop other programs, add swap or "
        "try a smaller --batch\n"
    )
    run = log.read_text().splitlines()[-1]
    assert run.startswith("ssh -o BatchMode=yes -o ConnectTimeout=10 user@jetson timeout --kill-after=10 ")
    assert run.endswith(PASS_STATUS)


def test_cli_remote_trtexec_that_outlives_its_term_reads_as_timed_out(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The board's `timeout` KILLs what ignored its TERM for --kill-after seconds: 137 as well, from
    the board's shell, but only once the limit and the grace have passed here, so it is the timeout's
    line (saying it was KILLed), not the OOM killer's. Played with the real coreutils `timeout` and
    a grace of 1 s."""
    from ssh_fake import end_as_openssh

    import deployopt.remote

    monkeypatch.setattr(deployopt.remote, "KILL_AFTER_S", 1)
    trtexec_that(monkeypatch, tmp_path, "trap '' TERM; sleep 30")
    play_the_board(tmp_path, monkeypatch)
    end_as_openssh(tmp_path / "sshbin" / "ssh")
    model = tmp_path / f"remote_stubborn_{os.getpid()}.onnx"
    model.write_bytes(fake["model"].read_bytes())
    try:
        code, stdout, err = run_cli(
            monkeypatch, capsys, "bench", str(model), "--backend", "trtexec", "--remote", "user@jetson",
            "--dtype", "fp16", "--timeout", "1",
        )  # fmt: skip
    finally:
        shutil.rmtree(board_folder(model), ignore_errors=True)
    assert (code, stdout) == (2, "")
    assert err == (
        "error: trtexec on user@jetson did not finish within 1 s, nor stop within 1 s of its TERM: "
        "the board's `timeout` KILLed it; --timeout SECONDS raises the limit (a first engine build on a "
        "Jetson Nano can take minutes)\n"
    )


@pytest.mark.slow
def test_optimize_reports_how_long_its_engines_took_to_build(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each evaluation's build time is trtexec's "Engine built in N sec." (here a recorded H100 log's
    8.09138 s for every build), in report.json's evaluations and summed in report.md: on a board the
    user sees what a search's builds cost, and what the timing cache saves after the first."""
    from deployopt.zoo.graphs import resnet_projection

    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_LOG", str(FIX / "trt10.16.1_h100pcie_cookbook_result-01_onnx_default_log.txt"))
    model = tmp_path / "tiny.onnx"
    model.write_bytes(resnet_projection((12,), blocks_per_stage=1, image_size=8).SerializeToString())
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(model), "--target", "h200", "--backend", "trtexec",
        "--max-evals", "4", "--sweep-runs", "2", "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    builds = [e["build_s"] for e in report["evaluations"]["list"]]
    assert builds == [8.09138] * report["evaluations"]["measured_this_run"] and len(builds) >= 2
    md = (tmp_path / "out" / "report.md").read_text()
    total = sum(builds)
    assert (
        f"- engine builds, end to end: {len(builds)}, {total:.1f} s in all (measured wall time); "
        "the first 8.1 s, the others a median 8.1 s"
    ) in md


def test_bench_says_how_long_the_engine_took_to_build(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench's table has trtexec's "Engine built in N sec." (a recorded H100 build log's 8.09138 s);
    a loaded engine's log (the stand-in's own) has none, and the row is left out."""
    loaded = os.environ["FAKE_LOG"]
    monkeypatch.setenv("FAKE_LOG", str(FIX / "trt10.16.1_h100pcie_cookbook_result-01_onnx_default_log.txt"))
    argv = ["bench", str(fake["model"]), "--backend", "trtexec", "--dtype", "fp16"]
    code, out, err = run_cli(monkeypatch, capsys, *argv)
    assert code == 0, err
    row = next(ln for ln in out.splitlines() if "engine build" in ln)
    assert "8.1 s (measured wall time, before the timed runs)" in row
    code, out, err = run_cli(monkeypatch, capsys, *argv, "--json")
    assert code == 0, err
    assert json.loads(out)["environment"]["engine_build_s"] == 8.09138
    monkeypatch.setenv("FAKE_LOG", loaded)
    code, out, err = run_cli(monkeypatch, capsys, *argv)
    assert code == 0, err
    assert "engine build" not in out


# ------------------------------------------------------------------ --remote: the sweep in one batch
# Session.measure_convs on the stand-in board (play_the_board): no real board, ssh, scp or trtexec.

SWEEP_HOST = "user@jetson"
SSH_OPTS = "-o BatchMode=yes -o ConnectTimeout=10"
BOARD_TRTEXEC = "/usr/src/tensorrt/bin/trtexec"
CONVS = [ConvShape(1, 8, 16, 16, 8), ConvShape(1, 8, 16, 16, 24), ConvShape(1, 16, 8, 8, 16, groups=16)]


def names(shapes: list[ConvShape], suffix: str = ".onnx") -> list[str]:
    """The conv models' names in a batch, as the runner's batch names them (sweep_model_name)."""
    return [f"conv{i:05d}-{shape.signature()}{suffix}" for i, shape in enumerate(shapes)]


def sweep_session(fake: dict[str, Path], board: Path, **options: Any) -> Session:
    """The session `optimize --remote --backend trtexec` sweeps with, its board folder `board`."""
    extra = {"remote": SWEEP_HOST, "remote_workdir": str(board), **options.pop("extra", {})}
    return TrtexecBackend().open(MeasureOptions(workdir=fake["workdir"], extra=extra, **options))


def counting_trtexec(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, every: int) -> Path:
    """A stand-in trtexec (install before play_the_board) that writes each build's arguments as one
    line to the returned file, and gives the k-th of every `every` builds the recorded --exportTimes
    samples times k + 1, so each conv's Timing can be told from the others'. A build whose
    arguments hold $FAIL_ON fails as trtexec does (an [E] line, `&&&& FAILED`, status 1, or
    $FAIL_STATUS)."""
    recorded = json.loads(Path(os.environ["FAKE_TIMES"]).read_text())
    for k in range(every):
        scaled = [{**entry, "computeMs": (k + 1) * entry["computeMs"]} for entry in recorded]
        (tmp_path / f"times{k}.json").write_text(json.dumps(scaled))
    calls = tmp_path / "trtexec_calls.txt"
    exe = tmp_path / "bin" / "trtexec_counting"
    real = os.environ["DEPLOYOPT_TRTEXEC"]
    exe.write_text(
        f'#!/bin/sh\nif [ "$1" = "--help" ]; then exec "{real}" "$@"; fi\n'
        f'echo "$*" >> "{calls}"\n'
        f'n=$(wc -l < "{calls}")\n'
        'case "$*" in *"$FAIL_ON"*) if [ -n "$FAIL_ON" ]; then\n'
        '  echo "[12/01/2026-00:00:00] [E] Error[4]: [network.cpp::validate::3062] bad input"\n'
        '  echo "&&&& FAILED TensorRT.trtexec"; exit "${FAIL_STATUS:-1}"; fi;; esac\n'
        f'export FAKE_TIMES="{tmp_path}/times$(( (n - 1) % {every} )).json"\n'
        f'exec "{real}" "$@"\n'
    )
    exe.chmod(0o755)
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(exe))
    return calls


def ssh_scp(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_a_remote_sweep_is_one_batch_on_the_board_whatever_its_size(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """measure_convs with --remote: the batch folder made empty, every conv model in one scp, one
    ssh whose shell runs trtexec once per conv (under the board's `timeout` at --timeout per conv,
    `; exit $?` after it), every log and export back in one scp -r: four connections for one conv
    or six (five the first time: the board's version). Per conv, it was a mkdir, an scp up, an ssh
    and an scp back. Without --remote each conv is still a trtexec run of its own here."""
    from deployopt.remote import PASS_STATUS

    log = play_the_board(tmp_path, monkeypatch)
    board = tmp_path / "board"
    folder = board / "_sweep" / f"convs-{SWEEP_TOKEN}"  # the session's own, removed when it closes
    six = CONVS * 2
    with sweep_session(fake, board, dtype="fp16", runs=300, timeout_s=50) as session:
        session.measure_convs(CONVS[:1])
        first = ssh_scp(log)
        timings = session.measure_convs(six)
        later = ssh_scp(log)[len(first) :]
        results = folder / "results"
        on_board = sorted(p.name for p in results.iterdir())
        exports = sorted(p.name for p in (results / names(six)[5].removesuffix(".onnx")).iterdir())
        assert all(Path(t.environment["engine"]).is_file() for t in timings)
    assert len(first) == 5 and first[0].endswith(f" {BOARD_TRTEXEC} --help; exit $?")
    # the first batch makes the session's folder and, in the same ssh, looks for other runs there
    looked = f"ssh {SSH_OPTS} {SWEEP_HOST} mkdir -p {folder} || exit; echo deployopt-self $$ $PPID; pgrep "
    made = f"ssh {SSH_OPTS} {SWEEP_HOST} rm -rf {folder} && mkdir -p {folder}"
    assert len(later) == 4 and first[1].startswith(looked) and later[0] == made
    sent = later[1].split()
    assert sent[:5] == ["scp", *SSH_OPTS.split()] and sent[-1] == f"{SWEEP_HOST}:{folder}"
    assert [Path(p).name for p in sent[5:-1]] == names(six)
    run = later[2]
    assert run.startswith(f"ssh {SSH_OPTS} {SWEEP_HOST} timeout --kill-after=10 300 sh -c ") and run.endswith(
        PASS_STATUS
    )
    assert run.count(f"{BOARD_TRTEXEC} --onnx=") == 6
    assert later[3] == f"scp {SSH_OPTS} -r {SWEEP_HOST}:{folder}/results {fake['workdir'] / '_sweep'}"
    assert len(timings) == 6 and all(t.runs == 300 for t in timings)
    # on the board: this batch's models and each conv's folder (its engine), its logs and exports
    # apart, in results/; the first batch's gone
    assert on_board == sorted(n.removesuffix(".onnx") for n in names(six))
    assert exports == ["layer_info.json", "profile.json", "times.json", "trtexec.log"]
    # closed: the session's folder removed from the board
    assert not folder.exists() and ssh_scp(log)[-1] == f"ssh {SSH_OPTS} {SWEEP_HOST} rm -rf {folder}"

    # no --remote: each conv a trtexec process of its own here (the base class's measure per conv)
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(tmp_path / "bin" / "trtexec"))
    log.unlink()
    local = MeasureOptions(dtype="fp16", workdir=tmp_path / "local", extra={"trt_version": "10.16.1"})
    with TrtexecBackend().open(local) as session:
        assert len(session.measure_convs(CONVS)) == 3
    assert not log.exists() and not (tmp_path / "local" / "_sweep").exists()
    assert all((tmp_path / "local" / f"conv{i}" / "trtexec.log").is_file() for i in range(3))


def normalized(command: str, model: str, outdir: str) -> str:
    """A trtexec command line with its conv's paths made alike: the model file (`model`.onnx), the
    engine (a model folder's is named after its build's options too) and the exports in `outdir`
    (a model folder's are the session's own: times-<token>.json)."""
    engine = re.escape(f"{outdir}/{Path(model).name}") + r"(-[0-9a-f]{12})?\.engine"
    command = re.sub(engine, "ENGINE", command.replace(f"{model}.onnx", "MODEL.onnx")).replace(
        TAG + ".json", ".json"
    )
    return command.replace(f"{outdir}/", "DIR/")


def test_a_remote_sweep_times_each_conv_as_measure_does(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each conv's trtexec command is what `measure` on it gives (build_command: the same flags, its
    files in a folder of its own), and its Timing is what `measure` reads from the same recorded
    output: the same samples (here each conv's own, the k-th conv's median k + 1 times the
    recording's), environment and `timed`; only the engine's path differs, in its conv's folder."""
    calls = counting_trtexec(monkeypatch, tmp_path, len(CONVS))
    play_the_board(tmp_path, monkeypatch)
    board = tmp_path / "board"
    folder = board / "_sweep" / f"convs-{SWEEP_TOKEN}"
    extra = {"timing_cache": str(tmp_path / "host" / "orin.timing")}
    with sweep_session(fake, board, dtype="fp16", runs=300, extra=extra) as session:
        batch = session.measure_convs(CONVS)
        one_by_one = Session.measure_convs(session, CONVS)  # `measure` per conv, as before
    recorded = [1000 * entry["computeMs"] for entry in json.loads(Path(os.environ["FAKE_TIMES"]).read_text())]
    commands = calls.read_text().splitlines()
    assert len(commands) == 6
    for k, (mine, theirs) in enumerate(zip(batch, one_by_one)):
        stem = names(CONVS, "")[k]
        assert mine.median_us == pytest.approx((k + 1) * statistics.median(recorded))
        a, b = mine.to_json(), theirs.to_json()
        assert a["environment"].pop("engine") == f"{folder}/{stem}/{stem}.engine"
        alone = str(Path(b["environment"].pop("engine")).parent)  # measure's folder for the conv
        assert re.fullmatch(rf"{re.escape(str(board))}/conv{k}-[0-9a-f]{{12}}", alone)  # conv{k}.onnx's
        assert a == b
        assert normalized(commands[k], f"{folder}/{stem}", f"{folder}/{stem}") == normalized(
            commands[3 + k], f"{alone}/conv{k}", alone
        )
        made_alike = normalized(commands[k], f"{folder}/{stem}", f"{folder}/{stem}").split()
        assert (
            made_alike[:2] == ["--onnx=MODEL.onnx", "--saveEngine=ENGINE"]
            and "--exportTimes=DIR/times.json" in made_alike
        )
        assert f"--timingCacheFile={board / 'orin.timing'}" in commands[k].split()


def test_a_conv_that_fails_mid_sweep_is_one_line_naming_it(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trtexec fails on the second conv of three: the batch stops there (the third never runs, nothing
    is fetched), and the error is one line naming that conv, with trtexec's own error line."""
    calls = counting_trtexec(monkeypatch, tmp_path, len(CONVS))
    log = play_the_board(tmp_path, monkeypatch)
    failing = names(CONVS)[1]
    monkeypatch.setenv("FAIL_ON", f"/{failing}")
    with (
        sweep_session(fake, tmp_path / "board", dtype="fp16") as session,
        pytest.raises(BackendFailed) as exc,
    ):
        session.measure_convs(CONVS)
    assert str(exc.value) == (
        f"trtexec on {SWEEP_HOST} exited 1 on {failing}: [12/01/2026-00:00:00] [E] Error[4]: "
        "[network.cpp::validate::3062] bad input"
    )
    assert len(calls.read_text().splitlines()) == 2
    *_, batch, close = ssh_scp(log)  # the batch's ssh was the last but the close's rm
    assert " sh -c " in batch and close.endswith(f" rm -rf {tmp_path}/board/_sweep/convs-{SWEEP_TOKEN}")
    # `&&&& FAILED` with status 0 stops the batch too, in `measure`'s words
    calls.unlink()
    monkeypatch.setenv("FAIL_STATUS", "0")
    with (
        sweep_session(fake, tmp_path / "board", dtype="fp16") as session,
        pytest.raises(BackendFailed) as exc,
    ):
        session.measure_convs(CONVS)
    assert str(exc.value) == (
        f"trtexec on {SWEEP_HOST} reported FAILED on {failing}: [12/01/2026-00:00:00] [E] Error[4]: "
        "[network.cpp::validate::3062] bad input"
    )
    assert len(calls.read_text().splitlines()) == 2


def optimize_remote_trtexec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, Path]:
    """`optimize net.onnx --remote SWEEP_HOST --backend trtexec --target orin-nano-8gb` on the
    stand-in board (play_the_board, installed first), the board's login folder `home` the current
    one (the runner's --env-only goes there): (exit code, stderr, OUTDIR)."""
    from test_optimize_remote import two_convs

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(model), "--remote", SWEEP_HOST, "--backend", "trtexec",
        "--target", "orin-nano-8gb", "--max-evals", "4", "--sweep-runs", "3", "-o", str(out),
    )  # fmt: skip
    return code, err, out


@pytest.mark.slow
def test_cli_optimize_remote_trtexec_names_the_conv_that_failed(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`optimize --remote user@jetson --backend trtexec` whose sweep fails on its second conv: exit 2,
    one line naming that conv, no report written (the journal stays, for --resume); the sweep's convs
    went in one batch (one ssh that runs trtexec for several convs), the candidates one by one. The
    run's folder on the board is ended and removed once (it was twice: once per session)."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    calls = counting_trtexec(monkeypatch, tmp_path, 1)
    log = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAIL_ON", "/_sweep/convs/conv00001-")
    code, err, out = optimize_remote_trtexec(tmp_path, monkeypatch, capsys)
    assert code == 2
    assert sorted(p.name for p in out.iterdir()) == ["journal.jsonl"]  # what --resume reads, no report
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err
    failed = next(c for c in calls.read_text().splitlines() if "/_sweep/convs/conv00001-" in c)
    name = Path(failed.split()[0].removeprefix("--onnx=")).name
    assert lines[0] == (
        f"error: trtexec on {SWEEP_HOST} exited 1 on {name}: [12/01/2026-00:00:00] [E] Error[4]: "
        "[network.cpp::validate::3062] bad input"
    )
    batches = [ln for ln in ssh_scp(log) if " sh -c " in ln]
    assert len(batches) == 1 and batches[0].count(f"{BOARD_TRTEXEC} --onnx=") >= 2
    # the run's folder ended and removed once, by the end-to-end session (the sweep's leaves it)
    run_dir = failed.split()[0].removeprefix("--onnx=").split("/_sweep/")[0]
    assert ssh_scp(log)[-2:] == [
        f"ssh {SSH_OPTS} {SWEEP_HOST} pkill -f -- '[/]{run_dir[1:]}/'",
        f"ssh {SSH_OPTS} {SWEEP_HOST} rm -rf {run_dir}",
    ]
    assert sum(" pkill " in ln or ln.endswith(f" rm -rf {run_dir}") for ln in ssh_scp(log)) == 2
    assert not Path(run_dir).exists()


@pytest.mark.slow
def test_cli_optimize_remote_trtexec_with_target_needs_no_python3_on_the_board(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the error for a board with no python3 says (without --target, the read of which Jetson
    the board is needs it: tests/test_optimize_remote.py) holds: with --target, `optimize --backend
    trtexec --remote` runs to the end on such a board, its read of the board failing quietly."""
    from deployopt.remote import PASS_STATUS

    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    log = play_the_board(tmp_path, monkeypatch)
    no_python = tmp_path / "board_without_python3"
    no_python.mkdir()
    (no_python / "python3").write_text(
        '#!/bin/sh\necho "bash: line 1: python3: command not found" >&2\nexit 127\n'
    )
    (no_python / "python3").chmod(0o755)
    monkeypatch.setenv("PATH", f"{no_python}:{os.environ['PATH']}")  # the board's shell finds none
    code, err, out = optimize_remote_trtexec(tmp_path, monkeypatch, capsys)
    assert code == 0, err
    assert (out / "model.onnx").is_file() and "python3" not in err
    tried = [ln for ln in ssh_scp(log) if " python3 " in ln]
    assert len(tried) == 1 and tried[0].endswith("--env-only" + PASS_STATUS)  # the read, and only it


@pytest.mark.parametrize(
    ("version", "dtype", "suffix", "precision"),
    [
        ("10.16.1", "int8", ".onnx", {"--int8", "--fp16"}),
        (V11, "fp16", ".fp16.onnx", set()),
        (V11, "int8", ".onnx", set()),
        ("7.1.3", "fp16", ".onnx", {"--fp16"}),
    ],
)
def test_a_remote_sweep_builds_the_model_measure_builds(
    version: str,
    dtype: str,
    suffix: str,
    precision: set[str],
    fake: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """int8: each conv carries its own Q/DQ scales (--int8 --fp16 up to 10.x, its scales, not
    placeholder ranges; nothing on 11.x); fp16 on TensorRT 11: each conv typed fp16 here and that
    file sent, with no --fp16; 7.x: --explicitBatch and --workspace, no timing cache nor layer-info
    export (and no export missing is an error)."""
    from deployopt.model import has_qdq
    from deployopt.precision import is_low_precision

    if version.startswith("7."):
        monkeypatch.setenv(
            "FAKE_LOG", str(FIX / "trt7.x_teslaV100_quickstart_pytorch_resnet50_fp16_legacy_format_log.txt")
        )
    calls = counting_trtexec(monkeypatch, tmp_path, len(CONVS))
    log = play_the_board(tmp_path, monkeypatch)
    board = tmp_path / "board"
    folder = board / "_sweep" / f"convs-{SWEEP_TOKEN}"
    extra = {"trt_version": version, "timing_cache": str(tmp_path / "orin.timing")}
    sent = [folder / n for n in names(CONVS, suffix)]
    with sweep_session(fake, board, dtype=dtype, runs=300, extra=extra) as session:
        timings = session.measure_convs(CONVS)
        models = [onnx.load(str(p)) for p in sent]  # before the close removes the session's folder
    scps = [ln for ln in ssh_scp(log) if ln.startswith("scp ") and ".onnx" in ln]
    assert len(scps) == 1 and scps[0].split()[5:-1] == [
        str(fake["workdir"] / "_sweep" / "models" / p.name) for p in sent
    ]
    assert all(has_qdq(m) == (dtype == "int8") for m in models)
    assert all(is_low_precision(m) == (suffix == ".fp16.onnx") for m in models)
    commands = [c.split() for c in calls.read_text().splitlines()]
    assert [c[0] for c in commands] == [f"--onnx={p}" for p in sent]
    flags = {a for c in commands for a in c if a.startswith(PRECISION_FLAGS)}
    assert flags == precision
    assert all(
        not t.timed.endswith("placeholder INT8 ranges") and ", placeholder INT8" not in t.timed
        for t in timings
    )
    old = version.startswith("7.")
    assert all(
        ("--explicitBatch" in c) == old and any(a.startswith("--timingCacheFile") for a in c) != old
        for c in commands
    )
    assert all(any(a.startswith("--exportLayerInfo") for a in c) != old for c in commands)
    assert len(timings) == 3 and all(t.runs == 300 for t in timings)
    if version == V11:
        assert all(
            t.timed.startswith(f"one query ({dtype}") and "(TensorRT 11 strong typing)" in t.timed
            for t in timings
        )


def test_a_conv_killed_mid_sweep_points_at_the_boards_oom_killer(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trtexec of the second conv killed by SIGKILL on the board, behind an ssh that ends as
    OpenSSH's does: the batch's shell passes 137 on (`; exit $?` after the board's `timeout`), one
    line naming the conv and the board's kernel log, not an unreachable board."""
    from ssh_fake import end_as_openssh

    calls = counting_trtexec(monkeypatch, tmp_path, len(CONVS))
    counting = Path(os.environ["DEPLOYOPT_TRTEXEC"])
    counting.write_text(
        counting.read_text().replace(
            'case "$*" in', 'case "$*" in *conv00001-*) kill -KILL $$;; esac\ncase "$*" in', 1
        )
    )
    play_the_board(tmp_path, monkeypatch)
    end_as_openssh(tmp_path / "sshbin" / "ssh")
    with (
        sweep_session(fake, tmp_path / "board", dtype="fp16") as session,
        pytest.raises(BackendFailed) as exc,
    ):
        session.measure_convs(CONVS)
    said = OOM_LINE.removeprefix("was killed (SIGKILL): ")
    assert str(exc.value) == (
        f"trtexec on {SWEEP_HOST} was killed (SIGKILL) on {names(CONVS)[1]}: {said} on the board tells; "
        "stop other programs, add swap or try a smaller --batch"
    )
    assert len(calls.read_text().splitlines()) == 2


def test_a_sweep_that_outlives_its_term_is_killed_on_the_board(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conv's trtexec that ignores the board's `timeout` TERM (the batch's limit: --timeout per
    conv): the batch's shell waits for it rather than dying first, so `timeout` KILLs it and says so,
    as for a single model, and nothing is left running on the board. Played with the real coreutils
    `timeout` and a grace of 1 s."""
    from ssh_fake import end_as_openssh

    import deployopt.remote

    monkeypatch.setattr(deployopt.remote, "KILL_AFTER_S", 1)
    pid_file = tmp_path / "trtexec.pid"
    real = os.environ["DEPLOYOPT_TRTEXEC"]
    exe = tmp_path / "bin" / "trtexec_stubborn"
    exe.write_text(
        f'#!/bin/sh\nif [ "$1" = "--help" ]; then exec "{real}" "$@"; fi\n'
        f"echo $$ > \"{pid_file}\"\ntrap '' TERM\nsleep 30\n"
    )
    exe.chmod(0o755)
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(exe))
    play_the_board(tmp_path, monkeypatch)
    end_as_openssh(tmp_path / "sshbin" / "ssh")
    with (
        sweep_session(fake, tmp_path / "board", dtype="fp16", timeout_s=1) as session,
        pytest.raises(BackendFailed) as exc,
    ):
        session.measure_convs(CONVS[:2])
    assert str(exc.value) == (
        f"trtexec on {SWEEP_HOST} did not finish within 2 s, nor stop within 1 s of its TERM: "
        "the board's `timeout` KILLed it; --timeout SECONDS raises the limit (a first engine build on a "
        "Jetson Nano can take minutes)"
    )
    status = Path(f"/proc/{int(pid_file.read_text())}/status")
    # gone, or a zombie no init has reaped yet: not running either way
    assert not status.exists() or "\nState:\tZ" in status.read_text()


def test_a_long_remote_sweep_is_cut_into_batches_the_boards_command_line_holds(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's script is one argument of one command line on the board, and Linux takes no
    argument over 128 KiB (MAX_ARG_STRLEN): a list of convs longer than SWEEP_MAX_CONVS (staircase
    or calibrate through the API; optimize hands over 16) goes in several batches, its timings in
    order; and a full batch's script, with long paths and every export, fits with room to spare."""
    from deployopt.backends import trtexec as trtexec_module

    log = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setattr(trtexec_module, "SWEEP_MAX_CONVS", 4)
    six = CONVS * 2
    with sweep_session(fake, tmp_path / "board", dtype="fp16", runs=300, timeout_s=50) as session:
        timings = session.measure_convs(six)
    calls = ssh_scp(log)
    # the version, then two batches (4 convs and 2) of four each, then the close's rm of the folder
    assert len(calls) == 1 + 4 + 4 + 1
    assert [c.count(f"{BOARD_TRTEXEC} --onnx=") for c in calls if " sh -c " in c] == [4, 2]
    engines = [Path(t.environment["engine"]).name for t in timings]  # in order, numbered per batch
    assert engines == [f"conv{i % 4:05d}-{shape.signature()}.engine" for i, shape in enumerate(six)]

    # a full batch on a long board path, int8 with a calibration table and a timing cache
    monkeypatch.undo()
    deep = PurePosixPath("/home/jetson-user/" + "x" * 120) / "deployopt-runner" / "run-0123456789abcdef"
    options = MeasureOptions(dtype="int8", runs=300, extra={"timing_cache": str(deep / "timing.cache")})
    runs = []
    for i in range(trtexec_module.SWEEP_MAX_CONVS):
        name = f"conv{i:05d}-1x512x14x14-k512x512x3x3-s2x2-p1x1-d1x1-g1"
        out = deep / "_sweep" / "convs-0123abcd" / name
        cmd = build_command(BOARD_TRTEXEC, out.with_suffix(".onnx"), out, options, "8.2.1", {})
        runs.append(trtexec_module.SweepRun(f"{name}.onnx", cmd, out, deep / "results" / name))
    script = trtexec_module.sweep_script(runs)
    assert len(script.encode()) < 80 * 1024  # a 138-character home folder: 60 KiB
    board = Board(SWEEP_HOST, 10)
    with mock.patch.object(board, "call") as call:  # what goes over ssh, `timeout` and quoting added
        board.run_limited(["sh", "-c", script], "trtexec", 50.0)
    assert max(len(arg.encode()) for arg in call.call_args.args[0]) < 100 * 1024


# ------------------------------------------------------------------ bug bash 2 (2026-12-06)

TRT7_LOG = "trt7.x_teslaV100_quickstart_pytorch_resnet50_fp16_legacy_format_log.txt"


def test_a_7x_result_records_the_tensorrt_version_its_banner_gives(
    fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The recorded 7.x log (JetPack 4.4/4.5 era) has no [TensorRT vNNNN] in its banner and no
    "TensorRT version" line: the result recorded no TensorRT at all, so a TensorRT upgrade passed
    `compare --strict` unflagged. It records what the banner of --help told (7), for bench and
    profile alike; an 8.x+ log's own version is still the one recorded."""
    from deployopt.regression import differences
    from deployopt.timing import Timing

    monkeypatch.setenv("FAKE_LOG", str(FIX / TRT7_LOG))
    with TrtexecBackend().open(MeasureOptions(runs=300, workdir=fake["workdir"])) as session:
        t = session.measure(fake["model"])
        prof = session.profile(fake["model"])
        assert session.last_run is not None and session.last_run.version is None  # the log names none
    assert t.environment["tensorrt"] == "7" and prof.environment["tensorrt"] == "7"
    assert t.environment["device"] == "Tesla V100-DGXS-16GB"
    upgraded = Timing.from_json({**t.to_json(), "environment": {**t.environment, "tensorrt": "8.2.1"}})
    assert "TensorRT 7 → 8.2.1" in differences(t, upgraded)
    # extra["trt_version"], where the caller knows it better, is what a 7.x log is recorded with
    known = MeasureOptions(runs=300, workdir=fake["workdir"], extra={"trt_version": "7.1.3"})
    with TrtexecBackend().open(known) as session:
        assert session.measure(fake["model"]).environment["tensorrt"] == "7.1.3"
    monkeypatch.setenv("FAKE_LOG", str(FIX / "trt8.0.1_jetson_nano_deepstream_yolo_fp16_loadEngine_log.txt"))
    with TrtexecBackend().open(known) as session:  # the log's own version wins
        assert session.measure(fake["model"]).environment["tensorrt"] == "8.0.1"


WARMUP_REFUSED = (
    "backend 'trtexec' warms up by time, not by a number of runs: trtexec gets --warmUp=500 (ms) "
    "whatever --warmup says, and no option changes it; leave --warmup out, or time with --backend "
    "tensorrt, which runs --warmup untimed passes\n"
)


def test_warmup_given_to_trtexec_is_refused_in_one_line(
    fake: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`bench --backend trtexec --warmup 5000` ran trtexec with --warmUp=500 (ms) and said nothing:
    trtexec warms up by time and the count was dropped, here and with --remote. bench, profile and
    optimize refuse a --warmup given, before trtexec runs; without one they run as before."""
    model = str(fake["model"])
    for argv in (
        ["bench", model, "-b", "trtexec", "--warmup", "5000"],
        ["bench", model, "-b", "trtexec", "--warmup", "20"],  # the default's value, given: as unused
        ["profile", model, "-b", "trtexec", "--warmup", "10"],
        ["bench", model, "-b", "trtexec", "--remote", "user@jetson", "--warmup", "50"],
        ["profile", model, "-b", "trtexec", "--remote", "user@jetson", "--warmup", "50"],
    ):
        fake["FAKE_ARGS"].unlink(missing_ok=True)
        code, out, err = run_cli(monkeypatch, capsys, *argv)
        assert (code, out, err) == (2, "", f"error: --warmup {argv[-1]}: {WARMUP_REFUSED}"), argv
        assert not fake["FAKE_ARGS"].exists()  # trtexec never ran (nor ssh: user@jetson is no host)
    argv = [
        "optimize",
        model,
        "--target",
        "h200",
        "--backend",
        "trtexec",
        "--max-evals",
        "4",
        "--warmup",
        "5",
    ]
    code, out, err = run_cli(monkeypatch, capsys, *argv, "-o", str(tmp_path / "out"))
    assert (code, err) == (2, f"error: --warmup 5: {WARMUP_REFUSED}") and not (tmp_path / "out").exists()
    argv[-1] = "20"  # optimize's default, given: as unused (the config alone cannot tell it given)
    code, out, err = run_cli(monkeypatch, capsys, *argv, "-o", str(tmp_path / "out"))
    assert (code, err) == (2, f"error: --warmup 20: {WARMUP_REFUSED}") and not (tmp_path / "out").exists()
    # not given: trtexec's own warm-up by time, as always
    code, out, err = run_cli(monkeypatch, capsys, "bench", model, "-b", "trtexec", "--runs", "300", "--json")
    assert code == 0, err
    assert "--warmUp=500" in fake["FAKE_ARGS"].read_text().split("\n")
    code, out, err = run_cli(monkeypatch, capsys, "profile", model, "-b", "trtexec", "--json")
    assert code == 0, err
