"""`deployopt backends / bench / profile` end to end on the ort backend (in-process, as a user runs it)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import run_cli

from deployopt.backends.base import REGISTRY
from deployopt.layers import ConvShape, conv_model
from deployopt.timing import measured_time

BENCH_KEYS = [
    "backend",
    "median_us",
    "iqr_us",
    "ci95_us",
    "runs",
    "warmup",
    "samples_us",
    "timed",
    "environment",
    "model",
    "measured_at",
]


run = run_cli


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "conv.onnx"
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 16)), str(path))
    return path


def test_backends_lists_every_registered_backend(monkeypatch, capsys) -> None:
    code, out, _ = run(monkeypatch, capsys, "backends", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["name"] for r in rows] == list(REGISTRY)
    ort_row = rows[0]
    assert ort_row["available"] is True and ort_row["detail"].startswith("onnxruntime ")
    code, out, _ = run(monkeypatch, capsys, "backends")
    assert code == 0 and "deployopt backends" in out and "ort" in out


def test_bench_json_schema_and_output_file(monkeypatch, capsys, model: Path, tmp_path: Path) -> None:
    dest = tmp_path / "res" / "result.json"
    start = datetime.now(timezone.utc).replace(microsecond=0)
    code, out, err = run(
        monkeypatch, capsys, "bench", str(model), "--backend", "ort", "--runs", "6", "--warmup", "1",
        "--json", "-o", str(dest),
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert list(doc) == BENCH_KEYS
    # when it was measured, UTC to the second: compare tells last week's file left in place from it
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["measured_at"])
    assert start <= measured_time(doc["measured_at"]) <= datetime.now(timezone.utc)
    assert doc["backend"] == "ort" and doc["runs"] == 6 and doc["warmup"] == 1
    assert len(doc["samples_us"]) == 6
    assert doc["median_us"] == pytest.approx(float(np.median(doc["samples_us"])))
    q1, q3 = np.percentile(doc["samples_us"], [25, 75])
    assert doc["iqr_us"] == pytest.approx(q3 - q1)
    lo, hi = doc["ci95_us"]
    assert min(doc["samples_us"]) <= lo <= doc["median_us"] <= hi <= max(doc["samples_us"])
    assert doc["timed"].startswith("one InferenceSession.run call (one forward pass), fp32, batch 1")
    assert doc["environment"]["backend"] == "ort"
    assert doc["model"] == {"file": "conv.onnx", "sha256": hashlib.sha256(model.read_bytes()).hexdigest()}
    assert json.loads(dest.read_text()) == doc
    assert [p.name for p in dest.parent.iterdir()] == ["result.json"]  # no temp files left


def test_bench_table(monkeypatch, capsys, model: Path) -> None:
    code, out, _ = run(
        monkeypatch, capsys, "bench", str(model), "--runs", "3", "--warmup", "0", "--batch", "2"
    )
    assert code == 0
    for text in ("conv.onnx on ort (measured)", "median", "IQR", "95% CI of median", "3 / 0", "batch 2"):
        assert text in out
    # 3 runs: an IQR, but no 95 % CI of the median (their range holds it 75 % of the time)
    rows = {c[1].strip(): c[2].strip() for c in (ln.split("│") for ln in out.splitlines() if "│" in ln)}
    assert rows["IQR"].endswith(" µs") and rows["95% CI of median"].startswith("n/a (3 runs; a 95% CI")
    assert "(bootstrap)" not in out


def test_one_run_shows_no_spread_and_compare_refuses_it(
    monkeypatch, capsys, model: Path, tmp_path: Path
) -> None:
    """--runs 1: IQR 0.0 and a CI [x, x] would look exact; the table says n/a, the JSON null, and
    compare still refuses the file for its sample count."""
    code, out, err = run(monkeypatch, capsys, "bench", str(model), "--runs", "1", "--warmup", "0")
    assert code == 0, err
    cells = [line.split("│") for line in out.splitlines() if "│" in line]
    rows = {c[1].strip(): c[2].strip() for c in cells}
    assert rows["IQR"] == "n/a (1 run)" and rows["95% CI of median"] == "n/a (1 run)"
    assert "(bootstrap)" not in out and "0.0 µs" not in rows["IQR"]
    one = tmp_path / "one.json"
    code, out, err = run(monkeypatch, capsys, "bench", str(model), "--runs", "1", "--json", "-o", str(one))
    doc = json.loads(out)
    assert code == 0 and list(doc) == BENCH_KEYS and doc["iqr_us"] is None and doc["ci95_us"] is None
    code, out, err = run(monkeypatch, capsys, "compare", str(one), str(one))
    assert code == 2 and out == "" and f"error: {one} has 1 sample" in err and err.count("\n") == 1


def test_batch_and_input_shape_that_agree_are_fine(monkeypatch, capsys, model: Path) -> None:
    args = ["--input-shape", "x:2x8x8x8", "--batch", "2", "--runs", "2", "--warmup", "0", "--json"]
    code, out, err = run(monkeypatch, capsys, "bench", str(model), *args)
    assert code == 0 and "batch 2" in json.loads(out)["timed"], err


def test_profile_json_and_table(monkeypatch, capsys, model: Path) -> None:
    code, out, _ = run(monkeypatch, capsys, "profile", str(model), "--runs", "3", "--warmup", "1", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["backend"] == "ort" and doc["runs"] == 3
    assert sum(layer["share"] for layer in doc["layers"]) == pytest.approx(1.0)
    assert doc["total_us"] == pytest.approx(sum(layer["time_us"] for layer in doc["layers"]))
    assert ["conv"] in [layer["onnx_nodes"] for layer in doc["layers"]]
    assert {"backend", "timed", "runs", "total_us", "environment", "layers"} <= set(doc)  # fields kept
    assert doc["onnx_nodes_mapped_by"] == "optimized graph"
    assert doc["onnx_nodes_removed"] == [] and doc["onnx_nodes_unmapped"] == []
    code, out, _ = run(monkeypatch, capsys, "profile", str(model), "--runs", "2", "--warmup", "0")
    assert code == 0 and "per-layer time on ort (measured, 2 runs)" in out and "share" in out
    code, out, _ = run(monkeypatch, capsys, "profile", str(model), "--runs", "1", "--warmup", "0")
    assert code == 0 and "per-layer time on ort (measured, 1 run)" in out  # was '1 runs'


def test_profile_table_names_nodes_in_no_layer(monkeypatch, capsys, tmp_path: Path) -> None:
    """An Identity onnxruntime deletes has no kernel: the JSON listed it, the table said nothing."""
    w = onnx.numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
            onnx.helper.make_node("Identity", ["c"], ["i"], name="passthrough"),
            onnx.helper.make_node("Relu", ["i"], ["y"], name="relu"),
        ],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
    )
    path = tmp_path / "identity.onnx"
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)]), str(path))
    code, out, _ = run(monkeypatch, capsys, "profile", str(path), "--runs", "2", "--warmup", "0", "--json")
    assert code == 0 and json.loads(out)["onnx_nodes_removed"] == ["passthrough"]
    code, out, _ = run(monkeypatch, capsys, "profile", str(path), "--runs", "2", "--warmup", "0")
    assert code == 0 and "ONNX nodes removed by onnxruntime (folded, no kernel): passthrough\n" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sms", "8"], "error: --sms: backend 'ort' cannot limit the GPU's SMs"),
        (
            ["--dtype", "int8"],
            "error: conv.onnx is an fp32 model, and backend 'ort' runs a model as it is typed: for int8, "
            "quantize it first (Q/DQ nodes",
        ),
        (
            ["--dtype", "fp16"],
            "error: conv.onnx is an fp32 model, and backend 'ort' runs a model as it is typed: for fp16, "
            "type it with `deployopt fp16` first, or use the torch or tensorrt backend",
        ),
        (["--dtype", "fp8"], "error: --dtype 'fp8': choose one of fp32, fp16, int8"),
        (["--backend", "nope"], "error: unknown backend 'nope'; choose one of: ort, torch"),
        (["--runs", "0"], "error: --runs 0: must be between 1 and 100,000"),
        # an absurd count used to time until Ctrl-C
        (["--runs", "99999999999999999999"], "error: --runs 99999999999999999999: must be between 1 and"),
        (["--warmup", "-1"], "error: --warmup -1: must be between 0 and 100,000"),
        (["--warmup", "1000001"], "error: --warmup 1000001: must be between 0 and 100,000"),
        (
            ["--calibration-data", "calib.npy"],
            "error: --calibration-data calibrates INT8: use it with --dtype int8",
        ),
        (["--cudnn-engines", "0"], "error: --cudnn-engines: backend 'ort' does not run cudnn.benchmark"),
        (["--no-cudnn-benchmark"], "error: --no-cudnn-benchmark: backend 'ort' does not run cuDNN's"),
        (["--input-shape", "x:1xAx8"], "error: --input-shape 'x:1xAx8': dimensions must be integers"),
        (["--input-shape", "nope:1x8x8x8"], "error: input shape given for 'nope', but"),
        (
            ["--input-shape", "x:2x8x8x8", "--batch", "4"],
            "error: --batch 4 and --input-shape x:2x8x8x8 disagree on the batch of 'x' (2); give one",
        ),
        # said as without --input-shape, not as a disagreement with it
        (["--input-shape", "x:1x8x8x8", "--batch", "0"], "error: --batch must be at least 1"),
    ],
)
def test_bench_errors_are_one_line_and_write_nothing(
    monkeypatch, capsys, model: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    dest = tmp_path / "result.json"
    code, _, err = run(monkeypatch, capsys, "bench", str(model), *args, "-o", str(dest))
    assert code == 2
    assert err.startswith(message) and err.count("\n") == 1
    assert not dest.exists() and list(tmp_path.iterdir()) == []


def test_model_backend_says_where_it_can_be_used(monkeypatch, capsys, model: Path) -> None:
    """bench and profile have no --target, so the model backend cannot predict there: the error
    names the commands that can, not an option these commands lack."""
    for command in ("bench", "profile"):
        code, _, err = run(monkeypatch, capsys, command, str(model), "--backend", "model")
        assert code == 2 and err.count("\n") == 1, err
        assert "(--target NAME)" not in err and "bench / profile have no --target" in err
        assert "optimize MODEL --backend model --target T" in err and "staircase --target T" in err


def test_missing_model_and_unreadable_model(monkeypatch, capsys, tmp_path: Path) -> None:
    code, _, err = run(monkeypatch, capsys, "bench", str(tmp_path / "none.onnx"))
    assert code == 2 and err == f"error: {tmp_path / 'none.onnx'}: no such file\n"
    folder = tmp_path / "exported.onnx"  # a folder (an export that wrote a directory): say so
    folder.mkdir()
    for command in ("bench", "profile", "analyze"):
        code, _, err = run(monkeypatch, capsys, command, str(folder))
        assert code == 2 and err == f"error: {folder}: is a directory, expected an .onnx file\n", err
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00garbage")
    code, _, err = run(monkeypatch, capsys, "profile", str(bad), "-o", str(tmp_path / "p.json"))
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert not (tmp_path / "p.json").exists()


def test_unwritable_output_is_one_line_before_anything_is_timed(
    monkeypatch, capsys, model: Path, tmp_path: Path
) -> None:
    from deployopt.backends import ort as ort_backend

    def no_timing(*a: object, **k: object) -> None:
        raise AssertionError("timed although -o cannot be written")

    monkeypatch.setattr(ort_backend.OrtSession, "measure", no_timing)
    monkeypatch.setattr(ort_backend.OrtSession, "profile", no_timing)
    a_file = tmp_path / "file.json"
    a_file.write_text("{}")
    cases = [(tmp_path, "it is a folder; give a file path"), (a_file / "r.json", "is a file, not a folder")]
    for command in ("bench", "profile"):
        for dest, message in cases:
            code, out, err = run(monkeypatch, capsys, command, str(model), "--runs", "2", "-o", str(dest))
            assert code == 2 and out == "", err
            assert err.startswith(f"error: cannot write {dest}: ") and message in err, err
            assert err.count("\n") == 1 and "Traceback" not in err
    assert [p.name for p in tmp_path.iterdir()] == ["file.json"]


def test_out_of_memory_is_one_line(monkeypatch, capsys, model: Path) -> None:
    from deployopt.backends import ort as ort_backend

    def huge(*a: object, **k: object) -> None:
        raise MemoryError("Unable to allocate 229. GiB for an array with shape (10000000, 8, 8, 8)")

    monkeypatch.setattr(ort_backend, "random_inputs", huge)
    # the pre-flight check (deployopt.memory) would refuse first: this is where nothing says what is free
    monkeypatch.setattr("deployopt.memory.available_host_bytes", lambda: None)
    code, out, err = run(monkeypatch, capsys, "bench", str(model), "--batch", "10000000", "--runs", "2")
    assert code == 2 and out == ""
    assert err.startswith("error: out of memory: Unable to allocate 229. GiB") and err.count("\n") == 1


def test_onnxruntime_log_does_not_add_lines(monkeypatch, capfd, tmp_path: Path) -> None:
    # an op onnxruntime lacks: the session fails, and onnxruntime's own logger (writing to fd 2,
    # past sys.stderr) must not print its copy of the error above ours
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.acme")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
    )
    path = tmp_path / "custom.onnx"
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.acme", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    for command in ("bench", "profile"):
        code, _, err = run(monkeypatch, capfd, command, str(path), "--runs", "2", "--warmup", "0")
        assert code == 2
        assert err.startswith("error: onnxruntime cannot load the model: ") and err.count("\n") == 1, err


def test_unavailable_torch_says_what_to_install(monkeypatch, capsys, model: Path) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *a: object, **k: object) -> object:
        return None if name in ("torch", "onnx2torch", "torchvision") else real(name, *a, **k)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    code, _, err = run(monkeypatch, capsys, "bench", str(model), "--backend", "torch")
    assert code == 2
    assert err == (
        "error: backend 'torch' is unavailable: torch, onnx2torch, torchvision not installed: "
        "pip install 'deployopt[torch]'\n"
    )


def test_kernels_on_ort_is_refused(monkeypatch, capsys, model: Path) -> None:
    code, _, err = run(monkeypatch, capsys, "profile", str(model), "--kernels")
    assert code == 2 and "no kernel-level trace" in err


def test_kernel_table_renders_every_field(capsys) -> None:
    from deployopt.backends.base import KernelRecord, LayerTime, Profile
    from deployopt.cli.backends_cmd import render_profile

    k = KernelRecord(
        "sm90_xmma_fprop_implicit_gemm_tilesize128x128x64", 17.5, (30, 4, 1), (384, 1, 1), 168, 231424, 1.0,
        (128, 128, 64), 15, 1.0,
    )  # fmt: skip
    prof = Profile("torch", [LayerTime("conv1", 17.5, 1.0, ["conv1"], [k], {"op": "Conv"})], {}, "t", 10)
    render_profile(prof, kernels=True)
    out = capsys.readouterr().out
    for text in ("conv1", "30×4×1", "384×1×1", "168", "226K", "128×128×64", "15", "100%", "17.5"):
        assert text in out


def test_a_read_only_output_folder_is_one_line_before_anything_is_timed(
    monkeypatch, capsys, model: Path, tmp_path: Path
) -> None:
    """As root every permission bit passes, a read-only filesystem does not: the check must try."""
    import errno
    import os

    from deployopt import fileio
    from deployopt.backends import ort as ort_backend

    def no_timing(*a: object, **k: object) -> None:
        raise AssertionError("timed although -o cannot be written")

    real_mkstemp = fileio.tempfile.mkstemp

    def read_only(*args: object, **kwargs: object) -> tuple[int, str]:
        if Path(str(kwargs.get("dir"))) == tmp_path:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real_mkstemp(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ort_backend.OrtSession, "measure", no_timing)
    monkeypatch.setattr(ort_backend.OrtSession, "profile", no_timing)
    monkeypatch.setattr(fileio.tempfile, "mkstemp", read_only)
    dest = tmp_path / "x.json"
    for command in ("bench", "profile"):
        code, out, err = run(monkeypatch, capsys, command, str(model), "--runs", "2", "-o", str(dest))
        assert code == 2 and out == "", err
        assert err == f"error: cannot write {dest}: Read-only file system\n"


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys, model: Path, command: str) -> None:
    """typer turns Ctrl-C in a command into a silent exit 130; the user must still be told."""
    from deployopt.backends import ort as ort_backend

    def ctrl_c(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ort_backend.OrtSession, "measure", ctrl_c)
    monkeypatch.setattr(ort_backend.OrtSession, "profile", ctrl_c)
    code, out, err = run(monkeypatch, capsys, command, str(model), "--runs", "2")
    assert (code, out, err) == (130, "", "interrupted\n")


def test_an_os_error_nothing_else_caught_is_one_line(monkeypatch, capsys, model: Path) -> None:
    """The entry point's safety net: a write error no code path named is still no traceback."""
    import errno
    import os

    from deployopt.backends import ort as ort_backend

    def full(*a: object, **k: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/some/cache")

    monkeypatch.setattr(ort_backend.OrtSession, "measure", full)
    code, out, err = run(monkeypatch, capsys, "bench", str(model), "--runs", "2")
    assert (code, out, err) == (2, "", "error: /some/cache: No space left on device\n")


def test_version(monkeypatch, capsys) -> None:
    import deployopt

    code, out, err = run(monkeypatch, capsys, "--version")
    assert (code, err) == (0, "") and out == f"deployopt {deployopt.__version__}\n"


def _measured_with(monkeypatch, extra_env: dict) -> None:
    """ort's real measurement, with what the torch worker records around its timed loop on a GPU
    (deployopt.clocks) added to its environment: no GPU here."""
    from deployopt.backends import ort as ort_backend

    measure = ort_backend.OrtSession.measure

    def with_clocks(self: object, path: Path) -> object:
        timing = measure(self, path)  # type: ignore[arg-type]
        timing.environment.update(extra_env)
        return timing

    monkeypatch.setattr(ort_backend.OrtSession, "measure", with_clocks)


def test_bench_warns_when_the_gpu_clock_was_held_down(
    monkeypatch, capsys, model: Path, tmp_path: Path
) -> None:
    """One stderr line, longest reason first, with --json too (the JSON keeps the counters); the
    environment row says the SM clock was read right after the timed loop. Numbers from an edited
    copy of the real H200 recording (nothing throttled there)."""
    slowdown = {"sw_thermal_slowdown": 1_200_000, "hw_power_brake_slowdown": 5000}
    clocks = {"sm_clock_mhz": 1410.0, "sm_clock_read": "right after the timed loop"}
    _measured_with(monkeypatch, {"clock_slowdown_us": slowdown, "clocks": clocks})
    code, out, err = run(monkeypatch, capsys, "bench", str(model), "--runs", "5", "--warmup", "0")
    assert code == 0
    assert err == (
        "warning: the GPU's clock was held down while this was timed (SW thermal slowdown 1.2 s, HW power "
        "brake 5 ms): the latency may be slower than this GPU's; check its cooling and power limit, and "
        "time again\n"
    )
    env_row = " ".join(line for line in out.splitlines() if "environment" in line or "│" in line)
    assert "SM clock 1410 MHz right after the timed loop" in env_row
    dest = tmp_path / "r.json"
    code, out, err = run(monkeypatch, capsys, "bench", str(model), "--runs", "5", "--json", "-o", str(dest))
    assert code == 0 and err.startswith("warning: the GPU's clock was held down") and err.count("\n") == 1
    assert json.loads(out)["environment"]["clock_slowdown_us"] == slowdown
    assert json.loads(dest.read_text())["environment"]["clock_slowdown_us"] == slowdown


#: What jetson/runner.py records around its timed loop when an Orin's oc3 over-current counter grew
#: by 2 with its throttling on (tests/test_jetson_runner.py builds such records from fake trees).
JETSON_OC_RECORD = {"oc_events": {"oc1": 0, "oc2": 0, "oc3": 2}, "oc_throttle_enabled": {"oc3": True}}


def test_bench_warns_on_a_jetson_record_the_same_way(monkeypatch, capsys, model: Path) -> None:
    """The warning reads the Jetson runner's record of its timed loop too (deployopt.clocks
    held_down_phrase), so a measurement carrying one warns in the same line; bench's own backends
    do not record it on a Jetson (only the runner does), so this is the shared rule, not a board."""
    _measured_with(monkeypatch, JETSON_OC_RECORD)
    code, _, err = run(monkeypatch, capsys, "bench", str(model), "--runs", "5", "--warmup", "0")
    assert code == 0
    assert err == (
        "warning: the GPU's clock was held down while this was timed (over-current throttling: 2 oc3 "
        "event(s)): the latency may be slower than this GPU's; check its cooling and power limit, and "
        "time again\n"
    )


def test_bench_says_nothing_when_checked_and_not_held_down(monkeypatch, capsys, model: Path) -> None:
    """{}: checked, no slowdown (what the H200 recorded over 5 minutes); an SM clock read when the
    environment was collected says so, for it may be an idle GPU's."""
    _measured_with(monkeypatch, {"clock_slowdown_us": {}, "clocks": {"sm_clock_mhz": 345.0}})
    code, out, err = run(monkeypatch, capsys, "bench", str(model), "--runs", "5", "--warmup", "0")
    assert code == 0 and err == ""
    assert "SM clock 345 MHz (read outside the timed run)" in " ".join(out.split())


def test_bench_notes_a_result_too_short_for_compare(monkeypatch, capsys, model: Path, tmp_path: Path) -> None:
    """`bench --runs 3` is fine alone, but `compare` refuses fewer than 5 samples per side (at its
    default --alpha 0.01) and said so only when the two files met: bench now says it in one stderr
    line, --json and -o too (stdout stays the JSON); at 5 runs nothing is said."""
    dest = tmp_path / "r.json"
    code, out, err = run(monkeypatch, capsys, "bench", str(model), "--runs", "3", "--json", "-o", str(dest))
    assert code == 0 and json.loads(out)["runs"] == 3
    assert err == (
        "note: 3 runs: `deployopt compare` needs at least 5 per side (at its default --alpha 0.01) to "
        "judge a difference between two results this short; use --runs 5 or more to compare this\n"
    )
    code, _, err = run(monkeypatch, capsys, "compare", str(dest), str(dest))
    assert code == 2 and "is 0.1, not below --alpha 0.01, so it could never find a difference" in err
    code, _, err = run(monkeypatch, capsys, "bench", str(model), "--runs", "5", "--warmup", "1")
    assert code == 0 and err == ""


def test_compare_flags_a_resolution_change_bench_recorded(monkeypatch, capsys, tmp_path: Path) -> None:
    """ort and torch results named only the batch ("fp32, batch 1"), so a model timed at 16×16 and
    then at 64×64 compared as like for like: a "+1900 %, slower" verdict with no hint why. Each
    result now records the input shapes it timed, as the TensorRT backends and the runner do."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")],
        "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])],
        [w],
    )
    path = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    results = []
    for side in ("16", "64"):
        dest = tmp_path / f"r{side}.json"
        shape = f"x:1x3x{side}x{side}"
        code, _, err = run(
            monkeypatch, capsys, "bench", str(path), "--input-shape", shape, "--runs", "8", "-o", str(dest)
        )
        assert code == 0, err
        assert json.loads(dest.read_text())["environment"]["input_shapes"] == {
            "x": [1, 3, int(side), int(side)]
        }
        results.append(str(dest))
    code, _, err = run(monkeypatch, capsys, "compare", *results, "--strict")
    assert code == 1
    assert "not like for like (input shapes x:1x3x16x16 → x:1x3x64x64)" in " ".join(err.split()), err
