"""`deployopt optimize --remote USER@HOST`: the search runs here, every model is built and timed on the
board (jetson/runner.py, or trtexec there), and the chosen plan's engine comes back beside its model.

The board is tests/test_tensorrt_remote.py's stand-in (ssh and scp play it on this machine; its
python3 runs the real runner against the fake TensorRT). No real Jetson, ssh or TensorRT.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import re
from pathlib import Path
from typing import Any

import jetson_sysfs_fake as sysfs_fake
import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper
from test_tensorrt_remote import HOST, OPTS, RUNNER, play_the_board

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.lut import LayerCache
from deployopt.optimize import OptimizeConfig
from deployopt.remote import PASS_STATUS
from deployopt.targets import get_target, measured_elsewhere

#: The board these tests play is this machine: its /tmp/deployopt-trtexec and deployopt-runner folders
#: are every such test's, and a run at work in one (optimize --remote) is what bench's and optimize's
#: look for other runs warns of. One xdist worker runs them all, in turn (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("board")

#: What `optimize --remote` (and `targets --remote`) sends first, to read which Jetson the board is:
#: the runner into the shared work folder, as `bench --remote` does, and one `--env-only` under the
#: board's own `timeout`. With --target too, only to compare (tests/test_board_target.py).
ENV_ONLY_LINES = [
    f"ssh {OPTS} {HOST} mkdir -p deployopt-runner",
    f"scp {OPTS} {RUNNER} {HOST}:deployopt-runner/runner.py",
    f"ssh {OPTS} {HOST} timeout --kill-after=10 120 python3 deployopt-runner/runner.py --env-only"
    + PASS_STATUS,
]


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def two_convs(path: Path, hidden: int = 20) -> Path:
    """conv(3→hidden) → relu → conv(hidden→8): one free group (the hidden width), two conv shapes."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((hidden, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((8, hidden, 3, 3)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"], name="relu1"),
        helper.make_node("Conv", ["b", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        inits,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


#: optimize's warning for a --max-evals that leaves the search nothing (these tests' budget of 4, to
#: stay quick): tested on its own in test_cli_optimize.py, left out where a test counts warnings.
BUDGET_NOTE = "leaves the search no evaluation"


def without_budget_note(err: str) -> str:
    return "".join(ln for ln in err.splitlines(keepends=True) if BUDGET_NOTE not in ln)


def optimize_remote(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], model: Path, out: Path, *more: str
) -> tuple[int, str, str]:
    return run_cli(
        monkeypatch, capsys, "optimize", str(model), "--remote", HOST, "--max-evals", "4",
        "--runs", "8", "--warmup", "1", "--sweep-runs", "3", "-o", str(out), *more,
    )  # fmt: skip


def test_optimize_remote_runs_every_model_on_the_board_and_brings_the_engine_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --backend: with --remote, auto is the runner on the board. Every candidate and every conv of
    the per-layer sweep is copied to one folder of this run's own there and timed by the runner
    (copied once per session, not once per model): a candidate by a runner of its own, the sweep's
    convs by one runner per batch (--batch-dir), sent in one scp; the chosen plan's engine comes
    back as OUTDIR/model.engine, byte for byte, and the run's folder on the board is removed at the end."""
    log, home = play_the_board(tmp_path, monkeypatch)
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, stdout, err = optimize_remote(
        monkeypatch, capsys, model, out, "--target", "agx-orin-64gb", "--json"
    )
    assert code == 0, err
    assert "is not agx-orin-64gb" not in err  # the fake board's GPU: 16 SMs, 8.7, as the target
    report = json.loads(stdout)
    assert report["backend"] == "tensorrt" and report["measured"] is True
    assert report["measured_on"] == f"tensorrt (Orin (fake) at {HOST})"
    assert report["measured_elsewhere"] is None
    best_env = report["timings"]["best"]["environment"]
    assert best_env["remote"] == HOST and best_env["runner"].startswith("jetson/runner.py v")

    assert "warning: --target" not in err  # the board says it is agx-orin-64gb too
    lines = log.read_text().splitlines()
    assert lines[:3] == ENV_ONLY_LINES  # which Jetson the board is, read first
    lines = lines[3:]
    runs = [ln for ln in lines if " python3 " in ln and "/runner.py " in ln]
    batches = [ln for ln in runs if " --batch-dir " in ln]
    version_reads = [ln for ln in lines if " python3 -c " in ln]
    assert len(version_reads) == 2  # once per session (TensorRT 11 types fp16 on the host)
    swept = report["per_layer_sweep"]["measured"]
    # the sweep's convs go to the board in batches of LayerCache.fill's chunk, one runner per batch
    chunk = inspect.signature(LayerCache.fill).parameters["chunk"].default
    assert swept > 1 and len(batches) == math.ceil(swept / chunk)
    assert len(runs) == report["evaluations"]["measured_this_run"] + len(batches)
    run_dir = runs[0].split(" python3 ")[1].split()[0].rsplit("/", 1)[0]  # .../runner.py's folder
    assert run_dir.startswith("deployopt-runner/optimize-net-")
    assert all(f" python3 {run_dir}/runner.py {run_dir}/" in ln for ln in runs if ln not in batches)
    assert all(f" python3 {run_dir}/runner.py --batch-dir {run_dir}/_sweep/convs " in ln for ln in batches)
    sent = [
        ln
        for ln in lines
        if ln.startswith(f"scp {OPTS} /") and ln.endswith(f" {HOST}:{run_dir}/_sweep/convs")
    ]
    assert len(sent) == len(batches) and sum(ln.count(".onnx ") for ln in sent) == swept  # one scp a batch
    sent = [ln for ln in lines if ln.startswith(f"scp {OPTS} {RUNNER} ")]
    assert len(sent) == 2  # one per session: the end-to-end one and the per-layer sweep's

    engine = best_env["engine"]
    assert engine.startswith(f"{run_dir}/") and report["engine"] == "model.engine"
    fetched = [ln for ln in lines if ln.startswith(f"scp {OPTS} {HOST}:{engine} ")]
    assert len(fetched) == 1
    # ended and removed once, by the end-to-end session: both sessions removing it cost four ssh
    assert lines[-2:] == [
        f"ssh {OPTS} {HOST} pkill -f -- '[d]{run_dir[1:]}/'",
        f"ssh {OPTS} {HOST} rm -rf {run_dir}",
    ]
    assert sum(" pkill " in ln or ln.endswith(f" rm -rf {run_dir}") for ln in lines) == 2
    assert not (home / run_dir).exists() and (home / "deployopt-runner").is_dir()
    kept = (out / "model.engine").read_bytes()
    assert kept.startswith(b"FAKETRT\n") and json.loads(kept[8:])["inputs"][0][0] == "x"  # the fake's engine
    onnx.checker.check_model(onnx.load(str(out / "model.onnx")))
    assert "model.engine" in (out / "report.json").read_text()


def test_optimize_remote_input_shape_is_not_given_to_the_sweeps_convs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--input-shape names the model's inputs: the candidates get it as the runner's --shapes, the
    sweep's one-conv models (one static input each, also named x) do not. Passed on, the runner
    refused the first conv whose input was not the model's: `input 'x' is static, 1x20x16x16`."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    model = two_convs(tmp_path / "host" / "net.onnx")
    code, _, err = optimize_remote(
        monkeypatch, capsys, model, tmp_path / "out", "--target", "agx-orin-64gb",
        "--input-shape", "x:1x3x16x16",
    )  # fmt: skip
    assert code == 0, err
    lines = log.read_text().splitlines()
    assert lines[:3] == ENV_ONLY_LINES  # --env-only, to compare the board with --target: no --shapes
    runs = [ln for ln in lines[3:] if " python3 " in ln and "/runner.py " in ln]
    batches = [ln for ln in runs if " --batch-dir " in ln]
    assert batches and not any("--shapes" in ln for ln in batches)
    assert all("--shapes x:1x3x16x16 " in ln for ln in runs if ln not in batches)


def test_optimize_remote_says_when_the_board_is_not_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--target orin-nano-8gb (8 SMs) measured on a board whose GPU has 16: the candidate widths come
    from one GPU and the latencies from another, so a warning says so at once (the board's read, before
    anything is timed; the first timing's SM count is not said a second time) and report.md again;
    the same for a board whose clock follows DVFS (jetson_clocks not run)."""
    play_the_board(tmp_path, monkeypatch)
    low = 612_000_000  # the board left to DVFS (no jetson_clocks): devfreq 612 MHz – max
    monkeypatch.setenv("FAKE_BOARD_ROOT", str(sysfs_fake.orin(tmp_path / "dvfs", min_hz=low, cur_hz=low)))
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = optimize_remote(monkeypatch, capsys, model, out, "--target", "orin-nano-8gb")
    assert code == 0, err
    said = f"Orin (fake) at {HOST} is not orin-nano-8gb (16 SMs, the target 8)"
    unlocked = "the board's GPU clock was not locked (devfreq 612–1300.5 MHz)"
    board_said = f"warning: --target orin-nano-8gb, but the board at {HOST} is agx-orin-64gb ("
    assert err.count(board_said) == 1 and said not in err and err.count(unlocked) == 1
    assert said in (out / "report.md").read_text() and unlocked in (out / "report.md").read_text()
    report = json.loads((out / "report.json").read_text())
    assert said in report["measured_elsewhere"] and unlocked in report["clock_unlocked"]


@pytest.mark.parametrize("backend", ["torch", "ort", "model"])
def test_optimize_remote_refuses_a_backend_that_runs_here(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log, _ = play_the_board(tmp_path, monkeypatch)
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = optimize_remote(monkeypatch, capsys, model, out, "--target", "nano", "--backend", backend)
    assert code == 2 and err.strip().count("\n") == 0
    assert f"use it with one of those, not {backend!r}" in err
    assert not out.exists() and not log.exists()  # nothing written, nothing run on the board


def test_optimize_remote_unreachable_board_is_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ssh = tmp_path / "bin" / "ssh"
    ssh.parent.mkdir()
    ssh.write_text('#!/bin/sh\necho "ssh: connect to host jetson port 22: No route to host" >&2\nexit 255\n')
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{ssh.parent}:{os.environ['PATH']}")
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = optimize_remote(monkeypatch, capsys, model, out, "--target", "nano")
    assert code != 0 and "Traceback" not in err
    assert err.strip() == (
        f"error: cannot reach {HOST} over ssh: ssh: connect to host jetson port 22: No route to host"
    )
    assert not out.exists()  # refused before OUTDIR is made: no journal of a run that never ran


@pytest.mark.parametrize(
    ("broken", "said"),
    [
        ("FAKE_BOARD_TRT", "runner.py on user@jetson: tensorrt is not importable (it comes with JetPack"),
        ("FAKE_BOARD_NO_PYTHON", "python3 not found on user@jetson: runner.py needs Python 3.6+ there"),
    ],
)
def test_a_board_without_tensorrt_or_python3_is_refused_before_outdir_is_made(
    broken: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The board's TensorRT version is read in the preflight, before OUTDIR is made (fp16 and int8
    read it at the first model anyway: no ssh more): a board without tensorrt or python3 is one line
    and nothing written. Before, OUTDIR was left holding a journal of a run that measured nothing,
    and the same command, once the board was fixed, was refused: `OUT already exists; use --resume`."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv(broken, "none" if broken == "FAKE_BOARD_TRT" else "1")
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = optimize_remote(monkeypatch, capsys, model, out, "--target", "agx-orin-64gb")
    err = without_budget_note(err)
    assert code == 2 and err.startswith(f"error: {said}") and err.count("\n") == 1, err
    assert not out.exists()
    assert not any("candidate" in ln for ln in log.read_text().splitlines())  # nothing copied to time


def test_no_python3_for_reading_the_board_says_that_target_skips_the_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`optimize --backend trtexec --remote` without --target on a board with no python3: trtexec
    needs none, only the read of which Jetson the board is (runner.py --env-only) does. The line
    said only `python3 not found`, as if the run needed it; now it says --target skips the read.
    `targets --remote`, which is that read, says no such thing."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_NO_PYTHON", "1")
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = run_cli(  # optimize_remote's but its --warmup, which trtexec refuses (it warms up by time)
        monkeypatch, capsys, "optimize", str(model), "--remote", HOST, "--backend", "trtexec", "--max-evals",
        "4", "--runs", "8", "--sweep-runs", "3", "-o", str(out),
    )  # fmt: skip
    assert (code, without_budget_note(err)) == (
        2,
        f"error: python3 not found on {HOST}: runner.py needs Python 3.6+ there (JetPack ships it as "
        "python3); it reads which Jetson the board is, as no --target was given: --target T skips "
        "that read (`deployopt targets` lists them), and --backend trtexec needs no python3 on the "
        "board otherwise\n",
    )
    assert not out.exists()
    assert log.read_text().splitlines()[:3] == ENV_ONLY_LINES  # failed at the read, nothing else done

    code, _, err = run_cli(monkeypatch, capsys, "targets", "--remote", HOST)
    assert code == 2 and err == (
        f"error: python3 not found on {HOST}: runner.py needs Python 3.6+ there (JetPack ships it as "
        "python3)\n"
    )


def test_optimize_timeout_is_checked_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log, _ = play_the_board(tmp_path, monkeypatch)
    model = two_convs(tmp_path / "host" / "net.onnx")
    code, _, err = optimize_remote(
        monkeypatch, capsys, model, tmp_path / "out", "--target", "nano", "--timeout", "0"
    )
    assert code == 2 and "--timeout 0: must be a number of seconds above 0" in err
    assert not log.exists()


def test_remote_is_part_of_what_a_resumed_run_must_match() -> None:
    """A journal measured on one board must not resume on another (nor here); a run without --remote
    keeps the signature it had, so journals written before the option resume."""
    plain = OptimizeConfig(model_path=Path("absent.onnx"), target="nano")
    board = OptimizeConfig(model_path=Path("absent.onnx"), target="nano", remote=HOST)
    assert "remote" not in plain.signature() and board.signature()["remote"] == HOST


def test_measured_elsewhere_compares_sms_and_compute_capability() -> None:
    nano, orin = get_target("nano"), get_target("agx-orin-64gb")
    assert measured_elsewhere(orin, {"gpu": "Orin", "sms": 16, "compute_capability": "8.7"}) is None
    assert measured_elsewhere(orin, {"tensorrt": "10.3"}) is None  # says nothing of its GPU
    said = measured_elsewhere(nano, {"gpu": "Orin", "sms": 16, "compute_capability": "8.7", "remote": HOST})
    assert said is not None and said.startswith(
        f"Orin at {HOST} is not nano (16 SMs, the target 1; compute capability 8.7, the target 5.3)"
    )
    # --sms limits the wave model, not the GPU TensorRT reports: the full count is what it is compared to
    assert measured_elsewhere(get_target("agx-orin-64gb", sms=8), {"sms": 16}) is None
    # torch in a green context of --sms N reports N: what was asked for, not another GPU
    assert measured_elsewhere(get_target("h200", sms=8), {"sms": 8, "compute_capability": "9.0"}) is None
    assert "(8 SMs, the target 132)" in str(measured_elsewhere(get_target("h200"), {"sms": 8}))


def test_closing_ends_what_still_runs_in_the_run_folder_then_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C mid-build kills the local ssh only (no tty: the board gets no hangup), so the runner
    would hold the board's GPU until its `timeout`: closing the session ends every process whose
    command line names a file in the run's folder, then removes the folder. A process of another
    folder, and the pkill's own shell, are left alone."""
    import subprocess
    import sys
    import time

    from deployopt.remote import Board, remove_run_dir

    log, home = play_the_board(tmp_path, monkeypatch)
    run_dir = f"deployopt-runner/optimize-net-{os.getpid()}"
    (home / run_dir).mkdir(parents=True)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    mine = subprocess.Popen([*sleeper, f"{run_dir}/runner.py"], cwd=home)
    other = subprocess.Popen([*sleeper, f"{run_dir}-other/runner.py"], cwd=home)
    try:
        remove_run_dir(Board(HOST), run_dir)
        assert mine.wait(timeout=10) != 0  # ended by pkill
        time.sleep(0.2)
        assert other.poll() is None  # another run's folder: untouched
        assert not (home / run_dir).exists()
        assert log.read_text().splitlines() == [
            f"ssh {OPTS} {HOST} pkill -f -- '[d]eployopt-runner/optimize-net-{os.getpid()}/'",
            f"ssh {OPTS} {HOST} rm -rf {run_dir}",
        ]
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("backend", ["tensorrt", "trtexec"])
def test_the_sweeps_session_leaves_the_run_folder_to_the_end_to_end_one(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """optimize's two sessions (end to end, and the per-layer sweep's with fewer runs) work in one
    folder on the board: the sweep's, closing (first, here), touches nothing there, not even with a
    connection; the end-to-end one's close ends what runs there and removes the folder, once."""
    from deployopt.remote import SHARED_RUN

    log, home = play_the_board(tmp_path, monkeypatch)
    run = f"optimize-net-{os.getpid()}"
    extra = {"remote": HOST, "remote_workdir": "work", "remote_run": run}
    opts = MeasureOptions(dtype="fp32", extra=extra)
    main = get_backend(backend).open(opts)
    sweep = get_backend(backend).open(dataclasses.replace(opts, extra={**extra, SHARED_RUN: True}))
    (home / "work" / run).mkdir(parents=True)
    sweep.close()
    assert (home / "work" / run).is_dir() and not log.exists()
    main.close()
    assert not (home / "work" / run).exists()
    assert log.read_text().splitlines() == [
        f"ssh {OPTS} {HOST} pkill -f -- '[w]ork/{run}/'",
        f"ssh {OPTS} {HOST} rm -rf work/{run}",
    ]


def test_ctrl_c_in_the_sweep_ends_and_removes_the_run_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while the sweep's batch runs on the board: exit 130, and the run's folder is still
    ended (pkill) and removed, once, though the sweep's own session never removes it."""
    from deployopt.remote import Board

    log, home = play_the_board(tmp_path, monkeypatch)
    real_call = Board.call

    def interrupted(self: Board, cmd: list[str], *args: Any, **kwargs: Any) -> str:
        if "--batch-dir" in cmd[-1]:
            raise KeyboardInterrupt
        return real_call(self, cmd, *args, **kwargs)

    monkeypatch.setattr(Board, "call", interrupted)
    model = two_convs(tmp_path / "host" / "net.onnx")
    code, _, err = optimize_remote(monkeypatch, capsys, model, tmp_path / "out", "--target", "agx-orin-64gb")
    assert code == 130 and "interrupted" in err
    lines = log.read_text().splitlines()
    made = next(ln for ln in lines if " mkdir -p deployopt-runner/optimize-net-" in ln)
    run_dir = made.split(" mkdir -p ")[1].split()[0]
    assert lines[-2:] == [
        f"ssh {OPTS} {HOST} pkill -f -- '[d]{run_dir[1:]}/'",
        f"ssh {OPTS} {HOST} rm -rf {run_dir}",
    ]
    assert sum(" pkill " in ln or ln.endswith(f" rm -rf {run_dir}") for ln in lines) == 2
    assert not (home / run_dir).exists()


def test_another_run_still_at_work_on_the_board_is_a_warning_with_the_command_that_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose host was killed (kill -9) or lost its connection goes on timing on the board until
    its own `timeout` (no tty: no hangup there); a run started beside it would time their GPU work
    together. optimize says so before its first measurement, naming the pids and the ssh that ends
    them, and goes on. A leftover folder with nothing running from it, and a process of a folder
    outside the work folders, are not named. The look rides on the ssh that makes the run's folder."""
    import subprocess
    import sys

    log, home = play_the_board(tmp_path, monkeypatch)
    stale = f"deployopt-runner/optimize-old-{os.getpid()}"
    for folder in (stale, f"deployopt-runner/optimize-done-{os.getpid()}", "my-deployopt-runner/elsewhere"):
        (home / folder).mkdir(parents=True)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    busy = subprocess.Popen([*sleeper, f"{stale}/runner.py", "--runs", "100"], cwd=home)
    unrelated = subprocess.Popen([*sleeper, "my-deployopt-runner/elsewhere/runner.py"], cwd=home)
    try:
        model = two_convs(tmp_path / "host" / "net.onnx")
        code, _, err = optimize_remote(monkeypatch, capsys, model, tmp_path / "out", "--json")
        assert code == 0, err
        said = [ln for ln in err.splitlines() if "another deployopt run" in ln]
        assert len(said) == 1, err
        assert said[0].startswith(
            f"warning: another deployopt run is still at work on {HOST} ({stale}: pid {busy.pid}): "
        )
        assert str(unrelated.pid) not in said[0] and "optimize-done-" not in said[0]
        assert said[0].endswith(f"to end it now: ssh {HOST} kill {busy.pid}")
        assert busy.poll() is None and (home / stale).is_dir()  # another run's: warned of, not touched
        looked = [ln for ln in log.read_text().splitlines() if " pgrep " in ln]
        made = f"ssh {OPTS} {HOST} mkdir -p deployopt-runner/optimize-"
        assert len(looked) == 1 and looked[0].startswith(made)  # the look rides on the mkdir
    finally:
        for proc in (busy, unrelated):
            proc.kill()
            proc.wait()


def test_a_board_with_no_other_run_costs_one_round_trip_and_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No other run at work on the board: one ssh looks and finds none. What runs from the run's own
    folder (its other session's work) is not another run, nor the look's own shell, whose command
    line names the work folders too."""
    import subprocess
    import sys

    from deployopt.remote import Board, other_runs_at_work

    log, home = play_the_board(tmp_path, monkeypatch)
    own = f"deployopt-runner/optimize-net-{os.getpid()}"
    (home / own).mkdir(parents=True)
    (home / "deployopt-runner" / "old-model").mkdir()  # an earlier bench's folder, nothing running
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen([*sleeper, f"{own}/runner.py"], cwd=home)
    try:
        look = ["deployopt-runner", "/nonexistent-dir", "deployopt-runner/old-model"]
        assert other_runs_at_work(Board(HOST), own, look, 30) == {}
        lines = log.read_text().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"ssh {OPTS} {HOST} echo deployopt-self ")
    finally:
        ours.kill()
        ours.wait()


def test_what_the_look_found_is_told_apart_by_the_folder_each_command_names_first() -> None:
    """runs_at_work_among on a board's answer: each process is named by the first work-folder
    subfolder its command line names (relative, or inside an absolute path to the home), never the
    look's own shell or its parent (SELF_MARK's pids), nor a file in a work folder's root (the
    runner itself), nor a folder whose name only ends like a work folder; the caller's own run
    folder is left out when given, and is another run's when not (a bench of the same model)."""
    from deployopt.remote import SELF_MARK, runs_at_work_among

    answer = "\n".join(
        [
            f"{SELF_MARK} 100 99",
            "100 sh -c mkdir -p deployopt-runner/net || exit; echo ...",
            "99 python3 ssh user@jetson mkdir -p deployopt-runner/net",
            "201 python3 deployopt-runner/runner.py deployopt-runner/optimize-a/c1.onnx --out x",
            "202 python3 /home/u/deployopt-runner/runner.py /home/u/deployopt-runner/resnet/r.onnx",
            "203 /usr/src/tensorrt/bin/trtexec --onnx=/tmp/deployopt-trtexec/optimize-b/m.onnx",
            "204 python3 deployopt-runner/runner.py --version",
            "205 python3 my-deployopt-runner/net/runner.py",
            "206 python3 deployopt-runner/runner.py deployopt-runner/net/net.onnx",
            "not a pid line",
        ]
    )
    workdirs = ["deployopt-runner", "/tmp/deployopt-trtexec"]
    others = {
        "deployopt-runner/optimize-a": ["201"],
        "deployopt-runner/resnet": ["202"],
        "/tmp/deployopt-trtexec/optimize-b": ["203"],
    }
    assert runs_at_work_among(answer, "deployopt-runner/net", workdirs) == others
    assert runs_at_work_among(answer, None, workdirs) == {**others, "deployopt-runner/net": ["206"]}


def test_a_trtexec_run_in_an_absolute_folder_is_found_by_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trtexec works in /tmp/deployopt-trtexec (an absolute folder) and names its files with
    --onnx=PATH: such a run is found too, beside the runner's folder."""
    import subprocess
    import sys

    from deployopt.remote import Board, other_runs_at_work

    _, home = play_the_board(tmp_path, monkeypatch)
    trtexec_dir = home / "tmp" / f"deployopt-trtexec-{os.getpid()}"
    stale = trtexec_dir / "optimize-net-2"
    stale.mkdir(parents=True)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    busy = subprocess.Popen([*sleeper, f"--onnx={stale}/model.onnx", "--fp16"])
    try:
        found = other_runs_at_work(
            Board(HOST), "deployopt-runner/optimize-net-1", ["deployopt-runner", str(trtexec_dir)], 30
        )
        assert found == {str(stale): [str(busy.pid)]}
    finally:
        busy.kill()
        busy.wait()


def test_a_second_run_on_the_same_board_reuses_the_sweep_though_the_board_is_warmer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The per-layer cache is keyed on the board (GPU, TensorRT, power mode), not on what one timed
    loop read: the runner records the temperatures and the devfreq clock around every loop, and a
    real board is never at the same temperature twice. With them in the key a second run timed
    every conv again; here it sends no conv to the board at all."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    model = two_convs(tmp_path / "host" / "net.onnx")
    code, stdout, err = optimize_remote(monkeypatch, capsys, model, tmp_path / "first", "--json")
    assert code == 0, err
    first = json.loads(stdout)["per_layer_sweep"]
    assert first["measured"] > 0 and first["cached"] == 0
    # an hour later: hotter, and the loop's devfreq reading taken at another moment of its ramp
    warm = sysfs_fake.orin(tmp_path / "warm", gpu_c=67.5, oc_events=(1, 0, 0))
    monkeypatch.setenv("FAKE_BOARD_ROOT", str(warm))
    log.write_text("")
    code, stdout, err = optimize_remote(monkeypatch, capsys, model, tmp_path / "second", "--json")
    assert code == 0, err
    second = json.loads(stdout)["per_layer_sweep"]
    assert (second["measured"], second["cached"]) == (0, first["measured"])
    assert " --batch-dir " not in log.read_text()  # no conv went to the board


def test_optimize_remote_a_qdq_model_on_a_tensorrt_11_board(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Q/DQ model is optimized as int8 (its default), and TensorRT 11 builds INT8 only from Q/DQ
    nodes: the sweep's convs carry their own, so the run goes through. Before, the first conv of
    the sweep was refused (`conv00000-….onnx has none`), a file the user never made."""
    from test_tensorrt_remote import QDQ_MODEL, V11

    play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_TRT", V11)
    model = tmp_path / "host" / "qdq.onnx"
    model.parent.mkdir()
    model.write_bytes(QDQ_MODEL.read_bytes())
    code, stdout, err = optimize_remote(monkeypatch, capsys, model, tmp_path / "out", "--json")
    assert code == 0, err
    report = json.loads(stdout)
    assert report["dtype"] == "int8" and report["per_layer_sweep"]["measured"] > 0
    assert report["timings"]["best"]["environment"]["tensorrt"] == V11


def test_a_resumed_run_whose_answer_was_timed_before_builds_its_engine_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--resume replays what the journal holds; when the answer was measured before the interruption,
    the engine of that build went with its run's folder on the board. The resumed run builds the
    chosen plan once more for its engine and says so (it replaced OUTDIR's model.engine with none,
    silently, before). Resuming a finished run replays every evaluation."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = optimize_remote(monkeypatch, capsys, model, out)
    assert code == 0, err
    first = json.loads((out / "report.json").read_text())
    assert first["engine"] == "model.engine" and first["engine_notice"] is None
    assert (
        "- model.engine: the chosen plan's engine, built by tensorrt (Orin (fake) at "
        in (out / "report.md").read_text()
    )
    log.write_text("")
    code, stdout, err = optimize_remote(monkeypatch, capsys, model, out, "--resume")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["evaluations"]["measured_this_run"] == 0  # every evaluation replayed
    assert report["engine"] == "model.engine" and (out / "model.engine").read_bytes().startswith(b"FAKETRT\n")
    said = (
        "model.engine is a new build of the chosen plan: the plan was timed before --resume, and the "
        "engine of that build went with its run's folder"
    )
    assert report["engine_notice"] == said and f"notice: {said}" in stdout
    assert f"- notice: {said}" in (out / "report.md").read_text()
    runs = [ln for ln in log.read_text().splitlines() if " python3 " in ln and "/runner.py " in ln]
    runs = [ln for ln in runs if "--env-only" not in ln]
    # the one build, of the chosen plan (in its folder: its name and a hash of its bytes)
    assert len(runs) == 1 and re.search(r"/chosen-[0-9a-f]{12}/chosen\.onnx ", runs[0])


def test_an_engine_that_did_not_come_back_is_fetched_by_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The board went away as the chosen plan's engine was to come back: the rest is written, and
    the notice says how to get the engine of that board without timing anything again (--resume
    rebuilds the chosen plan there), which the same command then does. It said only `build it from
    model.onnx`, which leaves the user to build by hand what the board had built."""
    play_the_board(tmp_path, monkeypatch)
    scp = tmp_path / "sshbin" / "scp"
    board_scp = scp.rename(scp.with_name("board_scp"))
    scp.write_text(
        f'#!/bin/sh\nfor a; do case "$a" in {HOST}:*.engine)\n'
        '  echo "ssh: connect to host jetson port 22: Connection timed out" >&2; exit 255;; esac; done\n'
        f'exec "{board_scp}" "$@"\n'
    )
    scp.chmod(0o755)
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, stdout, err = optimize_remote(monkeypatch, capsys, model, out, "--target", "agx-orin-64gb")
    assert code == 0, err
    notice = json.loads((out / "report.json").read_text())["engine_notice"]
    assert notice.startswith("the chosen plan's engine was not kept (cannot reach user@jetson over ssh: ")
    assert notice.endswith(
        "rerun this command with --resume once the board answers: it builds the chosen plan on the board "
        "again, nothing else is timed again"
    )
    assert f"notice: {notice}" in stdout and not (out / "model.engine").exists()

    scp.unlink()
    board_scp.rename(scp)  # the board answers again
    code, stdout, err = optimize_remote(
        monkeypatch, capsys, model, out, "--target", "agx-orin-64gb", "--resume"
    )
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["engine"] == "model.engine" and report["evaluations"]["measured_this_run"] == 0
    assert (out / "model.engine").read_bytes().startswith(b"FAKETRT\n")
