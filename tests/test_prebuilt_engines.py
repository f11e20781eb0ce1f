"""`deployopt bench|profile FILE.engine`: a serialized TensorRT engine timed as it was built.

Users ship engines (`optimize --remote` brings the chosen plan's back as OUTDIR/model.engine) and
time them every week. Here: the tensorrt backend on the strict fake TensorRT of
tests/test_tensorrt_fake_api.py, the runner on the stand-in board of tests/test_tensorrt_remote.py,
trtexec as the stand-in binary of tests/test_trtexec_backend.py (here and on its stand-in board),
the refusals, and `compare` of engine results. No real TensorRT, trtexec or Jetson is involved.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from scripts import load_script
from test_tensorrt_fake_api import (
    RUNNER,
    V10,
    V11,
    FakeGpu,
    build_engine,
    calls,
    engine_blob,
    install,
    opts,
    two_profile_engine,
)
from test_tensorrt_remote import HOST, OPTS, RESULT, made_and_looked
from test_tensorrt_remote import board_dir as runner_dir  # a model's folder on the board
from test_tensorrt_remote import play_the_board as play_the_runner_board
from test_trtexec_backend import OUT, M
from test_trtexec_backend import fake as fake  # the stand-in trtexec (a fixture)
from test_trtexec_backend import play_the_board as play_the_trtexec_board

from deployopt.backends import tensorrt as trt_backend
from deployopt.backends.base import MeasureOptions
from deployopt.backends.trtexec import TrtexecBackend, build_command
from deployopt.backends.trtexec_parser import version_tuple
from deployopt.prebuilt import ENGINE_SUFFIXES, PREBUILT, is_engine_file
from deployopt.remote import PASS_STATUS

#: The board these tests play is this machine: its /tmp/deployopt-trtexec and deployopt-runner folders
#: are every such test's, and a run at work in one (optimize --remote) is what bench's and optimize's
#: look for other runs warns of. One xdist worker runs them all, in turn (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("board")

AS_BUILT = "of a prebuilt engine (precision as built, --dtype only a label)"
TIMED_TRT = (
    f"one forward pass {AS_BUILT}, CUDA events around execute_async_v3 on one stream, inputs on the GPU "
    "(no copies timed), no CUDA graph"
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_error(code: int, out: str, err: str) -> str:
    """The message of a refusal: exit 2, nothing on stdout, one `error:` line, no traceback."""
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: "), (code, out, err)
    return err[len("error: ") : -1]


def local_tensorrt(monkeypatch: pytest.MonkeyPatch, version: str = V10, cuda: str = "bindings") -> Any:
    """The fake TensorRT here, importable for availability(), and the worker called in this process
    (a spawned one would not have the fake); returns (gpu, the worker targets called)."""
    trt, gpu = install(monkeypatch, version, cuda)
    trt.__spec__ = importlib.machinery.ModuleSpec("tensorrt", None)
    targets: list[str] = []

    def in_process(target: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        targets.append(target)
        module, _, func = target.rpartition(".")
        return getattr(importlib.import_module(module), func)(*args)

    monkeypatch.setattr(trt_backend, "run_isolated", in_process)
    return gpu, targets


def built_engine(
    monkeypatch: pytest.MonkeyPatch, model: Path, engine: Path, version: str = V10, **options: Any
) -> Path:
    """An engine the fake TensorRT `version` built from `model` (the fake undone afterwards, so the
    host of a --remote test has no TensorRT)."""
    with monkeypatch.context() as m:
        install(m, version, "bindings" if version == V10 else "cudart")
        build_engine(str(model), opts(engine.parent, **options), str(engine))
    return engine


def builds(gpu: FakeGpu) -> int:
    """ONNX parses and engine builds the fake TensorRT did so far."""
    return len(calls(gpu, "OnnxParser.parse")) + len(calls(gpu, "Builder.build_serialized_network"))


# ================================================================================================
# --backend tensorrt, here


def test_bench_and_profile_time_a_local_engine_without_building(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The engine is deserialized and timed as it is (the worker's time_prebuilt): nothing parsed or
    built, no engines/ cache; the result says it timed a prebuilt engine whose precision is as built
    (--dtype kept only as a label, not as the `dtype` compare reads) and names the engine's bytes."""
    gpu, targets = local_tensorrt(monkeypatch)
    engine = tmp_path / "net.plan"
    build_engine(str(zoo_model_path("mobilenet_like")), opts(tmp_path), str(engine))
    before = builds(gpu)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "result.json"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(engine), "--backend", "tensorrt", "--dtype", "int8",
        "--runs", "6", "--warmup", "2", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert targets == ["deployopt.backends.tensorrt.time_prebuilt"]
    assert builds(gpu) == before and not (tmp_path / "engines").exists()
    doc = json.loads(out.read_text())
    assert doc["timed"] == TIMED_TRT and doc["runs"] == len(doc["samples_us"]) == 6
    env = doc["environment"]
    assert env["prebuilt_engine"] is True and env["dtype_label"] == "int8" and "dtype" not in env
    assert env["engine"] == str(engine) and env["engine_built_now"] is False and "engine_key" not in env
    assert doc["model"] == {"file": "net.plan", "sha256": sha256(engine)}
    assert "prebuilt engine" in stdout and "(measured)" in stdout
    assert gpu.memory == {} and not gpu.trt_errors

    code, stdout, err = run_cli(
        monkeypatch, capsys, "profile", str(engine), "--backend", "tensorrt", "--json"
    )
    assert code == 0, err
    prof = json.loads(stdout)
    assert [row["name"] for row in prof["layers"]] == engine_blob(engine)["layers"]
    assert prof["timed"] == f"per-layer time reported by TensorRT's IProfiler, median over runs, {AS_BUILT}"
    assert prof["environment"]["prebuilt_engine"] is True and builds(gpu) == before


@pytest.mark.parametrize(("version", "cuda"), [(V10, "bindings"), ("8.2.1.8", "pycuda")], ids=["v3", "v2"])
def test_input_shapes_of_a_local_engine_are_checked_against_what_it_declares(
    version: str,
    cuda: str,
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--input-shape sets a dynamic-shape engine's inputs (within the profile it was built with);
    a dynamic input without one, a shape outside the profile, a static input at another shape or a
    name the engine has not are one line each, before any buffer is allocated. --batch is refused
    before the engine is even read: its input names are not known without TensorRT."""
    gpu, _ = local_tensorrt(monkeypatch, version, cuda)
    dynamic = tmp_path / "dyn.engine"
    shape = {"input": [2, 3, 32, 32]}
    build_engine(
        str(zoo_model_path("mobilenet_like_dynamic")), opts(tmp_path, input_shapes=shape), str(dynamic)
    )
    static = tmp_path / "static.engine"
    build_engine(str(zoo_model_path("mobilenet_like")), opts(tmp_path), str(static))
    bench = ["bench", "--backend", "tensorrt", "--runs", "5"]

    def refused(*args: str) -> str:
        allocs = len(calls(gpu, "alloc"))
        message = one_line_error(*run_cli(monkeypatch, capsys, *bench, *args))
        assert len(calls(gpu, "alloc")) == allocs and gpu.memory == {}
        return message

    code, out, err = run_cli(
        monkeypatch, capsys, *bench, str(dynamic), "--input-shape", "input:2x3x32x32", "--json"
    )
    assert code == 0, err
    set_shape = (
        "IExecutionContext.set_input_shape" if version == V10 else "IExecutionContext.set_binding_shape"
    )
    assert calls(gpu, set_shape)[-1] == (("input" if version == V10 else 0), (2, 3, 32, 32))
    assert json.loads(out)["timed"].startswith(f"one forward pass {AS_BUILT}")

    assert refused(str(dynamic)) == (
        "input 'input' of dyn.engine is dynamic (-1x3x32x32): give --input-shape input:SHAPE within the "
        "optimization profile it was built with"
    )
    assert refused(str(dynamic), "--input-shape", "input:4x3x32x32") == (
        "--input-shape input:4x3x32x32: the engine does not take this shape (outside the optimization "
        "profile it was built with; TensorRT's error above says which dimension)"
    )
    assert gpu.trt_errors == ["input: shape [4, 3, 32, 32] is outside the optimization profile"]
    assert refused(str(static), "--input-shape", "input:4x3x32x32") == (
        "--input-shape input:4x3x32x32: input 'input' of static.engine is static, 1x3x32x32 (it was built "
        "for that shape; drop the entry, or build an engine with a dynamic-shape profile)"
    )
    assert refused(str(static), "--input-shape", "images:1x3x32x32") == (
        "--input-shape images:1x3x32x32: static.engine has no input 'images' (its inputs: input)"
    )
    deserialized = len(calls(gpu, "Runtime.deserialize_cuda_engine"))
    assert refused(str(dynamic), "--batch", "2").startswith(
        "--batch: dyn.engine is a prebuilt engine, whose input names and shapes are not known before "
        "TensorRT loads it; for an engine built with a dynamic-shape optimization profile give "
        "--input-shape NAME:SHAPE"
    )
    assert len(calls(gpu, "Runtime.deserialize_cuda_engine")) == deserialized  # refused before reading it


@pytest.mark.parametrize(("version", "cuda"), [(V10, "bindings"), ("8.2.1.8", "pycuda")], ids=["v3", "v2"])
def test_an_engine_with_two_optimization_profiles_is_timed_at_profile_0(
    version: str,
    cuda: str,
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A user's engine built with two optimization profiles: 8.2-8.4 list every profile's bindings
    (profile 1's named "input [profile 1]"), which bench took for another dynamic input to give
    --input-shape for. Its inputs are profile 0's (the one the execution context runs): a shape
    within it is timed, one only profile 1 takes is TensorRT's refusal, and the inputs named in a
    refusal are the network's."""
    gpu, _ = local_tensorrt(monkeypatch, version, cuda)
    engine = two_profile_engine(version, zoo_model_path("mobilenet_like_dynamic"), tmp_path / "two.engine")
    bench = ["bench", "--backend", "tensorrt", "--runs", "5", str(engine)]
    code, out, err = run_cli(monkeypatch, capsys, *bench, "--input-shape", "input:4x3x32x32", "--json")
    assert code == 0, err
    assert json.loads(out)["environment"]["input_shapes"] == {"input": [4, 3, 32, 32]}
    assert one_line_error(*run_cli(monkeypatch, capsys, *bench, "--input-shape", "input:8x3x32x32")) == (
        "--input-shape input:8x3x32x32: the engine does not take this shape (outside the optimization "
        "profile it was built with; TensorRT's error above says which dimension)"
    )
    assert one_line_error(*run_cli(monkeypatch, capsys, *bench, "--input-shape", "x:4x3x32x32")) == (
        "--input-shape x:4x3x32x32: two.engine has no input 'x' (its inputs: input)"
    )
    assert gpu.trt_errors == ["input: shape [8, 3, 32, 32] is outside the optimization profile"]
    assert gpu.memory == {}


# ================================================================================================
# refusals before anything runs


@pytest.mark.parametrize("backend", ["torch", "ort", "model"])
@pytest.mark.parametrize("command", ["bench", "profile"])
def test_an_engine_on_a_backend_that_reads_onnx_is_one_line(
    backend: str,
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    engine = tmp_path / "net.engine"
    engine.write_bytes(b"not read")
    message = one_line_error(*run_cli(monkeypatch, capsys, command, str(engine), "--backend", backend))
    assert message == (
        "net.engine is a serialized TensorRT engine: only --backend tensorrt or trtexec can time it (here "
        f"or with --remote), not {backend!r}, which reads the ONNX graph: give the ONNX model it was built "
        "from"
    )


@pytest.mark.parametrize(
    "where",
    [["--backend", "tensorrt"], ["--backend", "trtexec"], ["--backend", "tensorrt", "--remote", "u@nowhere"],
     ["--backend", "trtexec", "--remote", "u@nowhere"]],
    ids=["tensorrt", "trtexec", "tensorrt-remote", "trtexec-remote"],
)  # fmt: skip
def test_calibration_and_batch_are_refused_for_an_engine_before_anything_runs(
    where: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An engine's INT8 ranges and batch were fixed when it was built: --dtype int8 with calibration
    data, or --batch, is one line before anything runs (no ssh: a stand-in that would say so is on
    PATH), whether TensorRT or trtexec is installed here or not."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("ssh", "scp"):
        (bindir / tool).write_text('#!/bin/sh\necho "$0 was run" >&2\nexit 1\n')
        (bindir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    engine = tmp_path / "net.engine"
    engine.write_bytes(b"not read")
    table = tmp_path / "net.calib"
    table.write_bytes(b"TRT-8601-EntropyCalibration2\n")
    for data in (table, tmp_path):  # a table, or a folder of data
        args = ["bench", str(engine), *where, "--dtype", "int8", "--calibration-data", str(data)]
        assert one_line_error(*run_cli(monkeypatch, capsys, *args)) == (
            "--calibration-data: net.engine is a prebuilt engine, its precision and INT8 ranges were fixed "
            "when it was built; time it without calibration data, or calibrate when building it from the "
            "ONNX model"
        )
    message = one_line_error(*run_cli(monkeypatch, capsys, "profile", str(engine), *where, "--batch", "4"))
    assert message.startswith("--batch: net.engine is a prebuilt engine")


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{e}"],
        ["analyze", "{e}", "--target", "orin-nano-8gb"],
        ["optimize", "{e}", "--target", "orin-nano-8gb", "--backend", "model", "-o", "{d}/out"],
        ["apply", "{e}", "--plan", "{d}/plan.json", "-o", "{d}/out.onnx"],
        ["verify", "{e}", "{e}"],
    ],
    ids=["analyze", "analyze-target", "optimize", "apply", "verify"],
)
def test_commands_that_read_the_onnx_graph_refuse_an_engine_in_one_line(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An engine cannot be analyzed or edited: the loader says so (it said "not an ONNX model (no IR
    version or empty graph)"), names the ONNX model to give, and nothing is written."""
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"FAKETRT\n{}")
    (tmp_path / "plan.json").write_text(json.dumps({"widths": {"g0": 8}}))
    argv = [a.format(e=engine, d=tmp_path) for a in args]
    message = one_line_error(*run_cli(monkeypatch, capsys, *argv))
    assert message == (
        f"{engine}: a serialized TensorRT engine, not an ONNX model: an engine cannot be analyzed or edited "
        "(its layers are compiled for one GPU); give the ONNX model it was built from (`deployopt bench` and "
        "`profile` time an engine as it is, --backend tensorrt or trtexec)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.engine", "plan.json"]


# ================================================================================================
# --backend tensorrt --remote: the runner on the (stand-in) board


@pytest.mark.parametrize("board", [V10, V11], ids=["trt10", "trt11"])
def test_bench_and_profile_remote_copy_the_engine_and_run_the_runner_on_it(
    board: str,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The engine goes to the board's work folder and the runner loads it there: no TensorRT version
    check (even for --dtype fp16, and on TensorRT 11 no fp16 typing on the host), no ONNX read here,
    no weights beside it, no engine built on the board; the result says prebuilt."""
    log, home = play_the_runner_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_TRT", board)
    host = tmp_path / "host"
    host.mkdir()
    engine = built_engine(
        monkeypatch, zoo_model_path("mobilenet_like"), host / "net.engine", board, dtype="fp32"
    )
    out = tmp_path / "result.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(engine), "--backend", "tensorrt", "--remote", HOST,
        "--dtype", "fp16", "--runs", "6", "--warmup", "2", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    lines = log.read_text().splitlines()
    rdir = runner_dir(engine)  # the engine's name and a hash of its bytes
    assert lines[:4] == [
        made_and_looked(home, rdir),
        f"scp {OPTS} {RUNNER} {HOST}:deployopt-runner/runner.py",
        f"scp {OPTS} {engine} {HOST}:{rdir}/net.engine",
        f"ssh {OPTS} {HOST} timeout --kill-after=10 600 python3 deployopt-runner/runner.py "
        f"{rdir}/net.engine --dtype fp16 --runs 6 --warmup 2 --workspace-mib 1024 "
        f"--engine-dir {rdir}/engines --out {rdir}/{RESULT}" + PASS_STATUS,
    ]
    assert lines[4].startswith(f"scp {OPTS} {HOST}:{rdir}/{RESULT} /") and len(lines) == 5
    board_dir = home / rdir
    assert (board_dir / "net.engine").read_bytes() == engine.read_bytes()
    assert sorted(p.name for p in board_dir.iterdir()) == ["net.engine", RESULT]  # nothing built there
    doc = json.loads(out.read_text())
    assert doc["timed"] == TIMED_TRT
    env = doc["environment"]
    assert env["tensorrt"] == board and env["remote"] == HOST
    assert env["prebuilt_engine"] is True and env["dtype_label"] == "fp16" and "dtype" not in env
    assert env["engine"] == f"{rdir}/net.engine" and env["engine_built_now"] is False
    assert "fp16_typed_by" not in env
    assert doc["model"] == {"file": "net.engine", "sha256": sha256(engine)}

    code, stdout, err = run_cli(
        monkeypatch, capsys, "profile", str(engine), "--backend", "tensorrt", "--remote", HOST, "--json"
    )
    assert code == 0, err
    prof = json.loads(stdout)
    assert prof["timed"] == (
        f"per-layer time reported by TensorRT's IProfiler, median over runs, on the board, {AS_BUILT}"
    )
    assert [row["name"] for row in prof["layers"]] == engine_blob(engine)["layers"]


def test_what_tensorrt_says_on_the_board_reaches_the_host(
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An engine built on another Jetson of the same TensorRT loads there, and TensorRT says so on the
    runner's stderr, which a successful run over ssh dropped: the number came back as any other.
    Its warnings (and the runner's own `warning:` lines) are one `warning:` line each on the host,
    once a session; the runner's progress lines are not."""
    _, _ = play_the_runner_board(tmp_path, monkeypatch)
    host = tmp_path / "host"
    host.mkdir()
    engine = built_engine(
        monkeypatch, zoo_model_path("mobilenet_like"), host / "net.engine", V10, dtype="fp16"
    )
    elsewhere = (
        "[TensorRT] WARNING: Using an engine plan file across different models of devices is not "
        "recommended and is likely to affect performance or even cause errors."
    )
    monkeypatch.setenv("FAKE_BOARD_SAYS", f"built engine x in 1.0 s\n{elsewhere}\n{elsewhere}")
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(engine), "--backend", "tensorrt", "--remote", HOST, "--runs", "5",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(stdout)["runs"] == 5
    assert err.splitlines() == [f"warning: runner.py on {HOST}: {elsewhere}"]


def test_runner_says_prebuilt_in_the_hosts_words() -> None:
    """The runner (one file, no deployopt import) and the host say the same of an engine, so a result
    of the runner run by hand and one of `bench --remote` time "the same thing" for compare; and
    both take the same names for an engine, in any case."""
    runner = load_script(RUNNER, "jetson_runner_prebuilt")
    assert runner.PREBUILT == PREBUILT
    for name in ("m.engine", "m.plan", "m.trt", "M.ENGINE", "m.Plan", "m.onnx", "m.engine.onnx", "engine"):
        assert runner.is_serialized_engine(name) == is_engine_file(name), name
    assert all(is_engine_file("m" + s) for s in ENGINE_SUFFIXES)


# ================================================================================================
# --backend trtexec: --loadEngine, here and on the (stand-in) board


def test_trtexec_command_for_an_engine_loads_it_and_sets_no_build_option() -> None:
    """--loadEngine instead of --onnx/--saveEngine (trtexec refuses --loadEngine with --saveEngine),
    none of the build options a version would get (workspace, --explicitBatch, precision, --calib,
    timing cache, --profilingVerbosity), the same timing and export flags."""
    options = MeasureOptions(
        dtype="int8",
        runs=50,
        extra={"calib_cache": "/c/calib.cache", "timing_cache": "/c/timing.cache", "workspace_mib": 256},
    )
    engine = Path("/m/model.engine")
    for version in ("7.1.3", "8.0.1", "8.2.1", "10.3.0", "11.4.1"):
        cmd = build_command("trtexec", engine, OUT, options, version, {"x": [4, 3, 224, 224]})
        info = [f"--exportLayerInfo={OUT / 'layer_info.json'}"] if version_tuple(version) >= (8, 2) else []
        assert cmd == [
            "trtexec", "--loadEngine=/m/model.engine", "--shapes=x:4x3x224x224", *info, "--iterations=50",
            "--warmUp=500", "--duration=0", f"--exportTimes={OUT / 'times.json'}", "--useCudaGraph",
            "--noDataTransfers", "--useSpinWait", "--separateProfileRun",
            f"--exportProfile={OUT / 'profile.json'}",
        ], version  # fmt: skip
    onnx = build_command("trtexec", M, OUT, options, "10.3.0", {"x": [4, 3, 224, 224]})
    assert onnx[1:3] == ["--onnx=/m/model.onnx", "--saveEngine=/w/model/model.engine"]  # unchanged
    with pytest.raises(ValueError, match="nothing to build"):
        build_command("trtexec", engine, OUT, options, "10.3.0", build_only=True)


def test_bench_and_profile_with_trtexec_load_the_engine(
    fake: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    engine = tmp_path / "net.trt"
    engine.write_bytes(b"an engine trtexec built elsewhere")
    out = tmp_path / "result.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(engine), "--backend", "trtexec", "--dtype", "fp16",
        "--input-shape", "x:4x1x28x28", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    args = fake["FAKE_ARGS"].read_text().split("\n")
    assert args[:2] == [f"--loadEngine={engine}", "--shapes=x:4x1x28x28"]
    building = (
        "--onnx",
        "--saveEngine",
        "--fp16",
        "--int8",
        "--memPoolSize",
        "--profilingVerbosity",
        "--timing",
    )
    assert not [a for a in args if a.startswith(building)]
    doc = json.loads(out.read_text())
    assert doc["timed"] == (
        f"one query {AS_BUILT}, GPU compute time per trtexec --exportTimes, CUDA graph, no H2D/D2H, spin-wait"
    )
    env = doc["environment"]
    assert env["prebuilt_engine"] is True and env["dtype_label"] == "fp16" and "dtype" not in env
    assert env["engine"] == str(engine) and env["tensorrt"] == "10.16.1"
    assert doc["model"] == {"file": "net.trt", "sha256": sha256(engine)}

    code, stdout, err = run_cli(monkeypatch, capsys, "profile", str(engine), "--backend", "trtexec", "--json")
    assert code == 0, err
    prof = json.loads(stdout)
    assert prof["timed"].endswith(f", {AS_BUILT}") and prof["environment"]["prebuilt_engine"] is True
    assert len(prof["layers"]) == 73

    # 8.x prints its build options for --loadEngine too ("Precision: FP32", its default, whatever the
    # engine holds): not recorded as the engine's precision
    log_86 = (
        fake["FAKE_LOG"].parent / "trt8.6.0_rtx3090_cookbook_result-03_loadEngine_verbose_log_lines1-300.txt"
    )
    assert "[I] Precision: FP32\n" in log_86.read_text()
    monkeypatch.setenv("FAKE_LOG", str(log_86))
    with TrtexecBackend().open(MeasureOptions(dtype="fp16", workdir=tmp_path / "work")) as session:
        env = session.measure(engine).environment
    assert env["tensorrt"] == "8.6.0" and "precision" not in env


def test_trtexec_on_tensorrt_11_loads_the_engine_without_typing_anything_fp16(
    fake: dict[str, Path], tmp_path: Path
) -> None:
    """On 11.x an ONNX model for --dtype fp16 is typed fp16 on the host first; an engine is not."""
    engine = tmp_path / "net.engine"
    engine.write_bytes(b"an engine")
    options = MeasureOptions(dtype="fp16", workdir=tmp_path / "work", extra={"trt_version": "11.4.1"})
    with TrtexecBackend().open(options) as session:
        timing = session.measure(engine)
    assert timing.environment["prebuilt_engine"] is True
    assert [p.name for p in (tmp_path / "work" / "net").iterdir() if p.suffix == ".onnx"] == []
    assert fake["FAKE_ARGS"].read_text().split("\n")[0] == f"--loadEngine={engine}"


def test_trtexec_remote_copies_the_engine_and_loads_it_on_the_board(
    fake: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = play_the_trtexec_board(tmp_path, monkeypatch)
    engine = tmp_path / f"remote_net_{os.getpid()}.engine"
    engine.write_bytes(b"an engine the board built")
    board_dir = Path(runner_dir(engine, root="/tmp/deployopt-trtexec"))
    try:
        code, stdout, err = run_cli(
            monkeypatch, capsys, "bench", str(engine), "--backend", "trtexec", "--remote", "user@jetson",
            "--dtype", "int8", "--json",
        )  # fmt: skip
        copied = (board_dir / engine.name).read_bytes()
    finally:
        shutil.rmtree(board_dir, ignore_errors=True)
    assert code == 0, err
    assert copied == engine.read_bytes()
    lines = log.read_text().splitlines()
    board_engine = f"{board_dir}/{engine.name}"
    assert f"scp {OPTS} {engine} user@jetson:{board_engine}" in lines
    (run,) = [ln for ln in lines if "--exportTimes" in ln]
    assert f"/usr/src/tensorrt/bin/trtexec --loadEngine={board_engine} --exportLayerInfo=" in run
    assert "--onnx" not in run and "--saveEngine" not in run and "--int8" not in run
    doc = json.loads(stdout)
    assert doc["timed"].startswith(f"one query {AS_BUILT}, ")
    assert doc["environment"]["engine"] == board_engine and doc["environment"]["dtype_label"] == "int8"
    assert doc["model"]["sha256"] == sha256(engine)


# ================================================================================================
# compare: two runs of one engine, and different engines


def test_compare_two_runs_of_the_same_engine_and_flags_another(
    monkeypatch: pytest.MonkeyPatch,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The weekly job: the same engine benched twice compares like for like (--dtype is only a label:
    two labels are no setup difference); another engine is not comparable (--strict exits 3); the
    same name with other bytes (OUTDIR/model.engine rebuilt) is said to be a changed engine."""
    import deployopt.backends.base as base  # every session records when it measured

    local_tensorrt(monkeypatch)
    monkeypatch.chdir(tmp_path)
    days = iter(range(1, 29))  # a day apart: benches within one second could not be told apart by compare
    monkeypatch.setattr(base, "measured_now", lambda: f"2026-11-{next(days):02d}T09:00:00Z")
    week1, week2 = tmp_path / "week1", tmp_path / "week2"
    week1.mkdir()
    week2.mkdir()
    engine = week1 / "model.engine"
    build_engine(str(zoo_model_path("mobilenet_like")), opts(tmp_path), str(engine))

    def bench(path: Path, out: Path, dtype: str) -> Path:
        args = [
            "bench",
            str(path),
            "--backend",
            "tensorrt",
            "--dtype",
            dtype,
            "--runs",
            "10",
            "--warmup",
            "0",
        ]
        code, _, err = run_cli(monkeypatch, capsys, *args, "-o", str(out))
        assert code == 0, err
        return out

    a = bench(engine, tmp_path / "a.json", "fp16")
    b = bench(engine, tmp_path / "b.json", "fp32")
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(a), str(b), "--strict", "--json")
    assert code == 0, err
    (pair,) = json.loads(out)["pairs"]
    assert pair["model_check"]["status"] == "same" and pair["environment_differences"] == []
    assert pair["verdict"] == "no significant difference" and err == ""

    other = week1 / "model_fp32.engine"
    build_engine(str(zoo_model_path("mobilenet_like")), opts(tmp_path, dtype="fp32"), str(other))
    c = bench(other, tmp_path / "c.json", "fp16")
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(a), str(c), "--strict")
    assert code == 3
    assert "warning: c: not comparable: different models: baseline timed model.engine" in err

    rebuilt = week2 / "model.engine"  # next week's engine under the same name
    rebuilt.write_bytes(other.read_bytes())
    d = bench(rebuilt, tmp_path / "d.json", "fp16")
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(a), str(d))
    assert code in (0, 1), err
    assert f"note: d: engine changed: model.engine has other contents (sha256 {sha256(engine)[:12]}…" in err
    assert "rebuilt (TensorRT may pick other tactics even from the same ONNX model)" in err
