"""`deployopt calibrate --remote USER@HOST` and `staircase --remote`: the conv sweep timed on a board.

The board is tests/test_tensorrt_remote.py's stand-in (ssh and scp play it on this machine; its
python3 runs the real jetson/runner.py against the fake TensorRT, on a fake sysfs tree) or
tests/test_trtexec_backend.py's (ssh runs the stand-in trtexec here). Played as a Jetson Nano on
JetPack 4.6 (TensorRT 8.2, the fake Tegra X1): the board deployopt cannot be installed on. No real
Jetson, ssh or TensorRT is involved.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import jetson_sysfs_fake as sysfs_fake
import pytest
import test_trtexec_backend as trtexec_board
from cli_runner import run_cli
from test_tensorrt_fake_api import V82
from test_tensorrt_remote import HOST, play_the_board
from test_trtexec_backend import fake as fake  # the stand-in trtexec (a fixture)

from deployopt.targets import get_target

#: One xdist worker runs every test that plays the board, in turn (its folders are this machine's).
pytestmark = pytest.mark.xdist_group("board")

#: 4 shapes × 4 widths: 16 convs, one batch on the board (the default sweep is 4 × 16 = 64).
WIDTHS = ("--out-channels", "16:64:16", "--runs", "5")
NANO_GPU = "NVIDIA Tegra X1 (fake)"  # what the fake TensorRT 8.2 reports: the Nano's GPU


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(cache))
    return cache


def play_a_nano(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, min_hz: int = sysfs_fake.NANO_MAX_HZ
) -> tuple[Path, Path]:
    """The stand-in board as a Jetson Nano on JetPack 4.6: its device tree and devfreq (clock locked
    unless `min_hz` is below the maximum), TensorRT 8.2 (whose fake GPU is a 1-SM Tegra X1).
    Returns (the ssh/scp log, the board's home)."""
    log, home = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_ROOT", str(sysfs_fake.nano(tmp_path / "nano_sysfs", min_hz=min_hz)))
    monkeypatch.setenv("FAKE_BOARD_TRT", V82)
    return log, home


def ssh_runs(log: Path) -> list[str]:
    """The runner's command lines on the board (ssh), in order."""
    return [ln for ln in log.read_text().splitlines() if ln.startswith("ssh ") and "runner.py" in ln]


def test_calibrate_remote_reads_the_board_and_writes_a_profile_target_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], _private_cache: Path
) -> None:
    """No --target, no --measure: the board says it is a Nano (one stderr line), the runner times the
    sweep there in one batch, and the profile saved under `nano` names the board, its TensorRT and
    clocks; `--target nano` then loads it, with fitted parameters unlike the built-in defaults."""
    log, _ = play_a_nano(tmp_path, monkeypatch)
    default = get_target("nano").wave_params("fp16")
    assert not default.fitted
    code, out, err = run_cli(monkeypatch, capsys, "calibrate", "--remote", HOST, *WIDTHS)
    assert code == 0, err
    assert f"target: nano, read from the board at {HOST} (" in err and "warning" not in err
    assert f"measuring 16 convs (fp16) on tensorrt at {HOST}, a TensorRT engine build each" in out
    runs = ssh_runs(log)
    assert runs[0].endswith("runner.py --env-only; exit $?")  # which board: read first
    assert len([r for r in runs if " --batch-dir " in r]) == 1  # 16 convs, one batch
    assert any(" --dtype fp16 --runs 5 " in r for r in runs)
    path = _private_cache / "targets" / "nano.json"
    assert f"profile 'nano' written to {path}" in out
    doc = json.loads(path.read_text())
    with_ = doc["measured_with"]
    assert with_["backend"] == "tensorrt" and with_["remote"] == HOST and with_["runs"] == 5
    assert with_["device"] == NANO_GPU and with_["where"] == f"{NANO_GPU} at {HOST}"
    assert with_["tensorrt"] == V82 and with_["runner"].startswith("jetson/runner.py v")
    assert with_["board"] == "NVIDIA Jetson Nano Developer Kit" and with_["nvpmodel"] == "MODE_30W"
    assert with_["clocks_locked"] is True and with_["gpu_max_freq_mhz"] == sysfs_fake.NANO_MAX_HZ / 1e6
    assert len(doc["sweeps"][0]["points"]) == 16

    loaded = get_target("nano")
    fitted = loaded.wave_params("fp16")
    assert loaded.origin == str(path) and fitted.fitted and fitted.name == "nano-fp16 calibrated"
    assert fitted.to_json() != default.to_json()
    assert (fitted.fixed_us, fitted.macs_per_us_per_sm) != (default.fixed_us, default.macs_per_us_per_sm)
    code, out, err = run_cli(
        monkeypatch, capsys, "staircase", "--target", str(path), "--input", "8x128x28x28",
        "--out-channels", "16:64:16", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["predictor"]["params"] == "nano-fp16 calibrated"


def test_calibrate_remote_with_another_target_warns_and_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], _private_cache: Path
) -> None:
    """--target given: kept, with optimize's warning where the board says it is another; the profile
    is that target's, still recording the board it was timed on. A board left to DVFS (jetson_clocks
    not run) gets bench's note: a fit to a clock that followed the load is not the board's."""
    play_a_nano(tmp_path, monkeypatch, min_hz=sysfs_fake.NANO_MIN_HZ)
    out_file = tmp_path / "tx2.json"
    code, out, err = run_cli(
        monkeypatch, capsys, "calibrate", "--remote", HOST, "--target", "tx2", "-o", str(out_file), *WIDTHS
    )
    assert code == 0, err
    assert f"warning: --target tx2, but the board at {HOST} is nano (" in err and err.count("warning") == 1
    assert "keeping --target tx2" in err and "read from the board" not in err
    assert "note: the board's GPU clock was not locked (devfreq 76.8–921.6 MHz)" in err
    doc = json.loads(out_file.read_text())
    assert doc["target"]["name"] == "tx2" and doc["measured_with"]["where"] == f"{NANO_GPU} at {HOST}"
    assert doc["measured_with"]["clocks_locked"] is False
    assert out.strip().endswith(f"use --target {out_file}")


def test_calibrate_remote_refusals_are_one_line_before_the_board_is_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], _private_cache: Path
) -> None:
    """--sms (a board's SM count is its own), a backend that runs here, cuDNN's options: one line,
    exit 2, no ssh at all and nothing written."""
    log, _ = play_a_nano(tmp_path, monkeypatch)
    cases = [
        (["--sms", "1"], "--sms with --remote: a board's SM count is its own"),
        (["--sms", "1", "--measure", "trtexec"], "--sms with --remote: a board's SM count is its own"),
        (["--measure", "torch"], "(--measure tensorrt): use it with one of those, not 'torch'"),
        (["--cudnn-engines", "0"], "--cudnn-engines: backend 'tensorrt' does not run cudnn.benchmark"),
    ]
    for extra, message in cases:
        code, out, err = run_cli(monkeypatch, capsys, "calibrate", "--remote", HOST, *extra)
        assert (code, out) == (2, ""), (extra, err)
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, (extra, err)
    assert not log.exists() and not _private_cache.exists()


@pytest.mark.parametrize("board", ["unreachable", "no_tensorrt", "disk_full"])
@pytest.mark.parametrize("given", [False, True])
def test_calibrate_remote_board_failures_are_one_line_and_write_no_profile(
    board: str,
    given: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    _private_cache: Path,
) -> None:
    """A board that does not answer, one without TensorRT, a build that fails there (its disk full
    when the engine is written): one line, a non-zero exit, no profile, with or without --target."""
    play_a_nano(tmp_path, monkeypatch)
    if board == "unreachable":
        (tmp_path / "sshbin" / "ssh").write_text(
            '#!/bin/sh\necho "ssh: connect to host jetson port 22: No route to host" >&2\nexit 255\n'
        )
        message = f"cannot reach {HOST} over ssh: ssh: connect to host jetson port 22: No route to host"
    elif board == "no_tensorrt":
        monkeypatch.setenv("FAKE_BOARD_TRT", "none")
        message = f"runner.py on {HOST}: tensorrt is not importable"
    else:
        monkeypatch.setenv("FAKE_BOARD_DISK_FULL", "1")
        message = "No space left on device"
    target = ["--target", "nano"] if given else []
    code, out, err = run_cli(monkeypatch, capsys, "calibrate", "--remote", HOST, *target, *WIDTHS)
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1].startswith("error: ") and message in lines[-1], err
    assert all(ln.startswith("target: nano, read from the board") for ln in lines[:-1]), err  # no traceback
    assert "Traceback" not in err and "written" not in out
    assert not (_private_cache / "targets").exists()


def test_calibrate_remote_with_trtexec_on_the_board(
    fake: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--measure trtexec: the sweep runs as trtexec on the board (one ssh a batch), and the profile
    names the board, trtexec there and its TensorRT; nothing needs trtexec on this machine."""
    log = trtexec_board.play_the_board(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)  # this board's home is the current folder (its target read goes there)
    out_file = tmp_path / "h100.json"
    try:
        code, _, err = run_cli(
            monkeypatch, capsys, "calibrate", "--remote", HOST, "--measure", "trtexec", "--target", "h100",
            "-o", str(out_file), *WIDTHS,
        )  # fmt: skip
    finally:
        shutil.rmtree("/tmp/deployopt-trtexec/_sweep", ignore_errors=True)
    assert code == 0, err
    sweeps = [ln for ln in log.read_text().splitlines() if ln.startswith("ssh ") and " sh -c " in ln]
    assert len(sweeps) == 1 and sweeps[0].count("/usr/src/tensorrt/bin/trtexec") >= 16
    doc = json.loads(out_file.read_text())
    with_ = doc["measured_with"]
    assert with_["backend"] == "trtexec" and with_["where"] == f"NVIDIA H100 PCIe at {HOST}"
    assert with_["trtexec"] == f"{HOST}:/usr/src/tensorrt/bin/trtexec" and with_["tensorrt"] == "10.16.1"
    fitted = get_target(str(out_file)).wave_params("fp16")
    assert fitted.fitted and fitted.to_json() != get_target("h100").wave_params("fp16").to_json()


def test_staircase_measured_on_the_board_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`staircase --remote HOST`: the measured column is the board's (the runner, --measure's default
    with --remote), and its note and the JSON name the board."""
    log, _ = play_a_nano(tmp_path, monkeypatch)
    args = ["staircase", "--target", "nano", "--input", "1x64x28x28", "--out-channels", "16:48:16"]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--remote", HOST, "--runs", "5")
    assert code == 0, err
    note = " ".join(out.split())
    where = f"({NANO_GPU} at {HOST})"
    assert f"meas µs: measured on backend tensorrt, median and IQR of 5 runs per width {where}" in note
    assert len([r for r in ssh_runs(log) if " --batch-dir " in r]) == 1
    code, out, err = run_cli(monkeypatch, capsys, *args, "--remote", HOST, "--measure", "tensorrt", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["measured"]["backend"] == "tensorrt" and doc["measured"]["environment"]["remote"] == HOST
    assert len(doc["points"]) == 3 and all(p["measured_us"] > 0 for p in doc["points"])
    code, _, err = run_cli(monkeypatch, capsys, *args, "--remote", HOST, "--sms", "1")
    assert code == 2 and "--sms with --remote: a board's SM count is its own" in err


def test_the_sweep_goes_in_chunks_with_a_progress_bar(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """calibrate hands the backend 16 convs at a time (on a board: a batch of engine builds each)
    and, on a terminal, a progress bar counts them; the default sweep is 4 shapes × 16 widths."""
    from test_cli_targets import fake_backend

    from deployopt.backends import base
    from deployopt.cli import app, targets_cmd

    bars: list[Any] = []
    real_bar = getattr(app, "progress_bar", None)  # none before the sweep had one

    def progress_bar(disable: bool) -> Any:
        assert real_bar is not None
        bars.append(real_bar(disable))
        return bars[-1]

    backend = fake_backend(get_target("h200"), on_gpu=True)
    asked: list[tuple[int, float | None]] = []  # (convs asked for, how many the bar said were done then)
    opened = backend.open

    def open_(options: base.MeasureOptions) -> base.Session:
        session = opened(options)
        measure = session.measure_convs

        def measure_convs(shapes: list[Any]) -> list[Any]:
            asked.append((len(shapes), bars[-1].tasks[0].completed if bars else None))
            return measure(shapes)

        session.measure_convs = measure_convs  # type: ignore[method-assign]
        return session

    monkeypatch.setattr(backend, "open", open_)
    monkeypatch.setattr(base, "get_backend", lambda name: backend)
    monkeypatch.setattr(targets_cmd, "progress_bar", progress_bar, raising=False)
    monkeypatch.setattr(app.err_console, "_force_terminal", True)
    args = ["calibrate", "--target", "h200", "--measure", "fake", "-o", str(tmp_path / "p.json")]
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "measuring 64 convs (fp16) on fake …" in out and (tmp_path / "p.json").is_file()
    assert asked == [(16, 0), (16, 16), (16, 32), (16, 48)]
    (bar,) = bars
    task = bar.tasks[0]
    assert not bar.disable and task.description == "fp16: timing convs on fake"
    assert task.total == task.completed == 64


#: staircase's sweep on the board: 3 widths, one batch.
STAIRCASE = ("staircase", "--input", "1x64x28x28", "--out-channels", "16:48:16", "--runs", "5")


def test_staircase_remote_without_target_reads_the_boards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`staircase --remote HOST` without --target (and without --measure: the runner, as before) is
    the board's target, said in one stderr line, as calibrate and optimize read it; with --target,
    kept, and one warning where the board says it is another. Without --remote, --target is still
    click's missing option."""
    log, _ = play_a_nano(tmp_path, monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, *STAIRCASE, "--remote", HOST, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["target"]["name"] == "nano" and doc["measured"]["backend"] == "tensorrt"
    assert doc["measured"]["environment"]["remote"] == HOST and len(doc["points"]) == 3
    said = [ln for ln in err.splitlines() if ln.startswith("target: ")]
    assert len(said) == 1 and said[0].startswith(f"target: nano, read from the board at {HOST} (compatible")
    assert "warning" not in err
    runs = ssh_runs(log)
    assert runs[0].endswith("runner.py --env-only; exit $?")  # which board: asked before the sweep
    assert len([r for r in runs if " --batch-dir " in r]) == 1

    code, out, err = run_cli(monkeypatch, capsys, *STAIRCASE, "--remote", HOST, "--target", "tx2", "--json")
    assert code == 0, err
    assert json.loads(out)["target"]["name"] == "tx2"
    warned = [
        ln for ln in err.splitlines() if ln.startswith(f"warning: --target tx2, but the board at {HOST}")
    ]
    assert len(warned) == 1 and f"the board at {HOST} is nano (compatible" in warned[0], err
    assert err.count("warning") == 1  # the first timing's GPU (1 SM, not tx2's 2) is not said again
    assert warned[0].endswith("; keeping --target tx2") and "read from the board" not in err

    code, out, err = run_cli(monkeypatch, capsys, *STAIRCASE[:5])
    assert (code, out, err) == (
        2,
        "",
        "error: Missing option '--target' / '-t'; see 'deployopt staircase --help'\n",
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--input", "1x64"], "--input '1x64': expected four positive integers NxCxHxW"),
        (["--out-channels", "64:16"], "--out-channels '64:16': need 1 <= start <= stop"),
        (["--plot", "{tmp}/staircase.txt"], "staircase.txt"),
        (["--dtype", "int8"], "--remote with --dtype int8: INT8 staircases are predicted only"),
        (["--dtype", "fp64"], "--dtype 'fp64': choose one of"),
        (["--runs", "0"], "--runs"),
        (["--timeout", "0"], "--timeout 0: must be a number of seconds above 0"),
        (["--timeout", "-1"], "--timeout -1: must be a number of seconds above 0"),
        (["--timeout", "nan"], "--timeout nan: must be a number of seconds above 0"),
        (["--measure", "torch"], "(--measure tensorrt): use it with one of those, not 'torch'"),
        (["--measure", "model"], "(--measure tensorrt): use it with one of those, not 'model'"),
        (["--cudnn-engines", "0"], "--cudnn-engines: backend 'tensorrt' does not run cudnn.benchmark"),
        (["--sms", "1"], "--sms with --remote: a board's SM count is its own"),
    ],
)
def test_staircase_remote_bad_input_is_one_line_before_the_board_is_asked(
    extra: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without --target the board is asked which it is; what needs no board is refused first, in
    one line, exit 2, with no ssh or scp at all (the stand-in's log is never written)."""
    log, _ = play_a_nano(tmp_path, monkeypatch)
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]  # the last --input etc. is the one read
    code, out, err = run_cli(monkeypatch, capsys, *STAIRCASE, *extra, "--remote", HOST)
    assert (code, out) == (2, ""), err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not log.exists()
    assert not (tmp_path / "staircase.txt").exists()


def test_timeout_is_the_boards_limit_per_conv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], _private_cache: Path
) -> None:
    """--timeout reaches the board: the target's read runs under `timeout 7` (at most 120 s there),
    a batch of N convs under 7 × N, as optimize's sweep; the default stays 600 per conv (16 convs:
    9600 s)."""
    log, _ = play_a_nano(tmp_path, monkeypatch)
    calibrate = ["calibrate", *WIDTHS]
    for args, timeout, batch_limit in [(STAIRCASE, "7", 21), (calibrate, "7", 112), (calibrate, None, 9600)]:
        log.unlink(missing_ok=True)
        given = [] if timeout is None else ["--timeout", timeout]
        code, _, err = run_cli(monkeypatch, capsys, *args, "--remote", HOST, *given)
        assert code == 0, err
        runs = ssh_runs(log)
        read_limit = 120 if timeout is None else timeout
        assert (
            f" timeout --kill-after=10 {read_limit} python3 deployopt-runner/runner.py --env-only" in runs[0]
        )
        (batch,) = [r for r in runs if " --batch-dir " in r]
        assert (
            f" timeout --kill-after=10 {batch_limit} python3 deployopt-runner/runner.py --batch-dir " in batch
        )


def test_timeout_reaches_a_local_backend_and_a_bad_one_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], _private_cache: Path
) -> None:
    """Here too: every session calibrate and `staircase --measure` open gets --timeout (600 s when
    not given); 0, -1, NaN, inf or a week and more are one line before any session opens, with or
    without --remote (no ssh); staircase refuses --timeout without --measure, as --runs."""
    from test_cli_targets import fake_backend

    from deployopt.backends import base

    opened: list[base.MeasureOptions] = []
    backend = fake_backend(get_target("h200"), opened, on_gpu=True)
    monkeypatch.setattr(base, "get_backend", lambda name: backend)
    calibrate = [
        "calibrate",
        "--target",
        "h200",
        "--measure",
        "fake",
        *WIDTHS,
        "-o",
        str(tmp_path / "p.json"),
    ]
    staircase = [*STAIRCASE, "--target", "h200", "--measure", "fake"]
    for args in (calibrate, staircase):
        opened.clear()
        code, _, err = run_cli(monkeypatch, capsys, *args, "--timeout", "42.5")
        assert code == 0, err
        assert opened and all(o.timeout_s == 42.5 for o in opened)
        opened.clear()
        code, _, err = run_cli(monkeypatch, capsys, *args)
        assert code == 0, err
        assert opened and all(o.timeout_s == 600.0 for o in opened)

    log, _ = play_a_nano(tmp_path, monkeypatch)
    (tmp_path / "p.json").unlink()
    remote = ["calibrate", "--remote", HOST, *WIDTHS]
    for args in (calibrate, staircase, remote):
        for bad in ("0", "-1", "nan", "inf", "604801"):
            opened.clear()
            code, out, err = run_cli(monkeypatch, capsys, *args, "--timeout", bad)
            assert (code, out) == (2, ""), (args, bad, err)
            assert err.startswith(f"error: --timeout {float(bad):g}: must be a number of seconds above 0")
            assert err.count("\n") == 1 and not opened, (args, bad, err)
    assert not log.exists() and not (tmp_path / "p.json").exists() and not _private_cache.exists()

    predicted = [*STAIRCASE[:5], "--target", "h200"]
    code, out, err = run_cli(monkeypatch, capsys, *predicted, "--timeout", "30")
    assert (code, out, err) == (
        2,
        "",
        "error: --timeout applies to --measure only (a prediction times nothing)\n",
    )
    code, out, err = run_cli(monkeypatch, capsys, *predicted, "--timeout", "30", "--runs", "5")
    assert (
        code == 2 and err == "error: --runs, --timeout apply to --measure only (a prediction times nothing)\n"
    )


def test_calibrate_remote_on_a_board_no_target_has_names_the_command_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], _private_cache: Path
) -> None:
    """A TX1 (no built-in target has its GPU): `calibrate --remote` without --target cannot read a
    target from the board, and its line said to calibrate a profile with `deployopt calibrate`, the
    very command that failed. It names the command that works now, with this board, the nearest
    built-in target (the Nano's, a Tegra X1 too) and --name; run as said, it writes a profile
    --target loads, and so does the other form it names (an edited `targets --json` copy)."""
    play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_ROOT", str(sysfs_fake.orin(tmp_path / "tx1_sysfs", board="tx1")))
    monkeypatch.setenv("FAKE_BOARD_TRT", V82)  # a Tegra X1 (fake), as a TX1's
    code, out, err = run_cli(monkeypatch, capsys, "calibrate", "--remote", HOST, *WIDTHS)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"error: --target not given and the board at {HOST} does not say which it is: ")
    commands = re.findall(r"`(deployopt [^`]*)`", err)
    assert commands == [
        f"deployopt calibrate --remote {HOST} --target nano --name NAME",
        "deployopt targets --target nano --json",
    ], err
    code, out, err = run_cli(
        monkeypatch, capsys, *shlex.split(commands[0].replace("NAME", "tx1"))[1:], *WIDTHS
    )
    assert code == 0, err
    assert "profile 'tx1' written to " in out and get_target("tx1").origin.endswith("tx1.json")

    # the other form: the nearest target's facts, edited to this GPU's (a TX1 has 2 SMs at 998 MHz)
    code, out, err = run_cli(monkeypatch, capsys, *shlex.split(commands[1])[1:])
    assert code == 0, err
    facts = json.loads(out)
    facts.update(sms=2, cuda_cores=256, clock_mhz=998.4)
    edited = tmp_path / "tx1_facts.json"
    edited.write_text(json.dumps(facts))
    argv = shlex.split(commands[0].replace("nano", str(edited)).replace("NAME", "tx1-2sm"))[1:]
    code, out, err = run_cli(monkeypatch, capsys, *argv, *WIDTHS)
    assert code == 0, err
    assert get_target("tx1-2sm").sms == 2 and get_target("tx1-2sm").clock_mhz == 998.4
