"""Loose ends of `--remote`, played on the stand-in boards of tests/test_tensorrt_remote.py and
tests/test_trtexec_backend.py (ssh and scp played on this machine, the real runner on a fake
TensorRT and a fake sysfs tree): no real Jetson, ssh or TensorRT.

- `targets --remote HOST --json` on a board no built-in target covers printed only the error line:
  a script reading --json got nothing to parse for the board it most needed to hear about.
- `--timeout 120` (QUICK_STEP_S exactly): a quick step's timeout line said --timeout raises the
  limit, though quick steps are capped at 120 s whatever --timeout says.
- Ctrl-C ended every process on the board naming the model's folder: another session's run of the
  same file at other settings (the folder is the file's, shared) was killed with this one.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jetson_sysfs_fake as sysfs_fake
import pytest
from cli_runner import run_cli
from ssh_fake import SWEEP_TOKEN
from test_remote_timeout_hint import CAPPED, RAISES, SLOW, hang_on
from test_tensorrt_remote import HOST, OPTS, REMOTE, board_dir, play_the_board
from test_tensorrt_remote import model as model  # the model on the host (a fixture)
from test_trtexec_backend import fake as fake  # the stand-in trtexec (a fixture)

from deployopt.remote import QUICK_STEP_S, Board

#: The board these tests play is this machine (see tests/test_tensorrt_remote.py): one xdist worker.
pytestmark = pytest.mark.xdist_group("board")

#: What target_for_board says of the TX1's device tree (tests/jetson_sysfs_fake.BOARDS["tx1"]).
TX1_WHY = "compatible names jetson-cv: Jetson TX1: no built-in target has its GPU"


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


# ------------------------------------------------------------------ targets --remote --json


def test_cli_targets_remote_json_on_a_board_with_no_target_still_prints_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A TX1 (no built-in target has its GPU): --json prints the object anyway, target null, why and
    what was read, then the same one error line on stderr and exit 2; without --json, as before,
    nothing on stdout."""
    play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_ROOT", str(sysfs_fake.orin(tmp_path / "tx1", board="tx1")))
    code, stdout, err = run_cli(monkeypatch, capsys, "targets", "--remote", HOST, "--json")
    assert code == 2, err
    doc = json.loads(stdout)  # it printed nothing: json.loads('') failed
    why = doc.pop("why")
    assert why.startswith(TX1_WHY) and "deployopt calibrate --remote user@jetson --target nano" in why
    error = f"error: the board at {HOST} is no built-in target: {why}\n"
    assert err == error
    assert doc == {
        "remote": HOST,
        "target": None,
        "read": {
            "board": "jetson_tx1",
            "compatible": ["nvidia,jetson-cv", "nvidia,tegra210"],
            "nvpmodel": "MODE_30W",
        },
    }
    code, stdout, err = run_cli(monkeypatch, capsys, "targets", "--remote", HOST)
    assert (code, stdout, err) == (2, "", error)


def test_cli_targets_remote_json_on_an_unreachable_board_is_the_error_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A board that was never read has nothing to print: the one line, stdout empty."""
    play_the_board(tmp_path, monkeypatch)
    (tmp_path / "sshbin" / "ssh").write_text(
        '#!/bin/sh\necho "ssh: connect to host jetson port 22: No route to host" >&2\nexit 255\n'
    )
    code, stdout, err = run_cli(monkeypatch, capsys, "targets", "--remote", HOST, "--json")
    assert (code, stdout) == (2, "")
    assert (
        err == f"error: cannot reach {HOST} over ssh: ssh: connect to host jetson port 22: No route to host\n"
    )


# ------------------------------------------------------------------ --timeout 120: the quick steps' cap


def test_at_timeout_120_a_quick_step_is_not_said_to_be_raised_by_it() -> None:
    """--timeout 120 is QUICK_STEP_S: a quick step's limit (min of the two) is the cap, which a
    larger --timeout leaves at 120 s; a build's and a model's copy are --timeout's own, 120 s too."""
    assert QUICK_STEP_S == 120
    board = Board(HOST, user_timeout_s=120)
    said = f"on {HOST} did not finish within 120 s"
    for quick in (
        "mkdir",
        f"scp of result-{SWEEP_TOKEN}.json",
        "scp of runner.py",
        "scp of trtexec's exports",
        "the TensorRT version check",
    ):
        assert board.timed_out(quick, 120) == f"{quick} {said}{CAPPED}", quick
    build = " (a first engine build on a Jetson Nano can take minutes)"
    assert board.timed_out("runner.py", 120) == f"runner.py {said}; {RAISES}{build}"
    assert board.timed_out("trtexec", 120) == f"trtexec {said}; {RAISES}{build}"
    assert board.timed_out("scp of the model", 120) == f"scp of the model {said}; {RAISES}"
    assert board.timed_out("scp of the results", 120) == f"scp of the results {said}; {RAISES}"
    # below the cap the quick step's limit is --timeout's: raising it does raise the limit
    assert (
        Board(HOST, user_timeout_s=60).timed_out("mkdir", 60)
        == f"mkdir on {HOST} did not finish within 60 s; {RAISES}"
    )
    assert SLOW in CAPPED


@pytest.mark.parametrize("backend", ["tensorrt", "trtexec"])
def test_cli_bench_remote_timeout_120_a_hung_mkdir_says_it_is_capped(
    backend: str,
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bench --remote --timeout 120 whose mkdir hangs: the line says the limit is a quick step's (it
    said --timeout SECONDS raises the limit: --timeout 1000 would have left it at 120 s)."""
    play_the_board(tmp_path, monkeypatch)
    hang_on(monkeypatch, lambda cmd: cmd[0] == "ssh" and "mkdir -p" in cmd[-1])
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), "--backend", backend, "--remote", HOST,
        "--dtype", "fp32", "--runs", "3", "--timeout", "120",
    )  # fmt: skip
    assert (code, stdout) == (2, "")
    assert err == f"error: mkdir on {HOST} did not finish within 120 s{CAPPED}\n"
    assert RAISES not in err


# ------------------------------------------------------------------ Ctrl-C: this session's work only

#: Another session's token (conftest pins this one's to SWEEP_TOKEN).
OTHER_TOKEN = "0000000b"


def interrupted_beside_another_session(
    monkeypatch: pytest.MonkeyPatch, cwd: Path, folder: str, procs: list[subprocess.Popen[bytes]]
) -> list[subprocess.Popen[bytes]]:
    """Board.call raises KeyboardInterrupt at the timed run in `folder` (the model's, shared by every
    run of that file), after starting on the board what would go on running there once the local
    ssh is gone: a process with this session's command line, and one with another session's of the
    same file in the same folder (its token, another --dtype), as two benches at once leave them.
    Returns [this session's, the other's] (both in `procs` too)."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    started: list[subprocess.Popen[bytes]] = []
    real_call = Board.call

    def interrupted(self: Board, cmd: list[str], *args: Any, **kwargs: Any) -> str:
        if " --kill-after=" in cmd[-1] and f"{folder}/" in cmd[-1] and not started:
            ours = shlex.split(cmd[-1].rpartition(";")[0])[3:]  # less `timeout --kill-after=10 N`
            assert any(SWEEP_TOKEN in arg for arg in ours), ours  # this session's own file is named
            theirs = [a.replace(SWEEP_TOKEN, OTHER_TOKEN).replace("fp32", "fp16") for a in ours]
            for argv in (ours, theirs):
                started.append(subprocess.Popen([*sleeper, *argv], cwd=cwd))
                procs.append(started[-1])
            raise KeyboardInterrupt
        return real_call(self, cmd, *args, **kwargs)

    monkeypatch.setattr(Board, "call", interrupted)
    return started


def ended(proc: subprocess.Popen[bytes], wait_s: float = 10.0) -> bool:
    """Whether `proc` was ended, waiting up to `wait_s` for the pkill's signal to land (the pkill
    has returned, but a signalled process exits a moment later)."""
    try:
        return proc.wait(timeout=wait_s) != 0
    except subprocess.TimeoutExpired:
        return False


def test_ctrl_c_on_bench_remote_ends_this_sessions_runner_not_anothers_of_the_same_file(
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    board_processes: list[subprocess.Popen[bytes]],
) -> None:
    """Two benches of net.onnx on one board, at fp32 and fp16: they share the file's folder. Ctrl-C
    on the fp32 one ends its runner there (one pkill naming its own result file) and leaves the
    fp16 session's runner running (the pkill of the folder's path ended both)."""
    log, home = play_the_board(tmp_path, monkeypatch)
    rdir = board_dir(model)
    started = interrupted_beside_another_session(monkeypatch, home, rdir, board_processes)
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "fp32", "--runs", "5"
    )
    assert code == 130, err
    ours, theirs = started
    assert ended(ours), "this session's runner outlived its Ctrl-C on the board"
    assert not ended(theirs, 3.0), "another session's runner of the same file was ended"
    own = f"{rdir}/result-{SWEEP_TOKEN}.json"
    pattern = "[d]" + own[1:].replace(".", "\\.")
    assert log.read_text().splitlines()[-1] == f"ssh {OPTS} {HOST} pkill -f -- {shlex.quote(pattern)}"


def test_ctrl_c_on_bench_remote_trtexec_ends_this_sessions_trtexec_not_anothers_of_the_same_file(
    fake: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    board_processes: list[subprocess.Popen[bytes]],
) -> None:
    """The same with trtexec on the board: its command line names the session's own exports
    (--exportTimes=…/times-TOKEN.json), which the pkill matches; the other session's trtexec, same
    folder, goes on."""
    from test_trtexec_backend import board_folder
    from test_trtexec_backend import play_the_board as play_a_board

    log = play_a_board(tmp_path, monkeypatch)
    # the board's /tmp/deployopt-trtexec is this machine's: a folder no other test's run names
    model = tmp_path / "host" / f"loose_ends_{os.getpid()}.onnx"
    model.parent.mkdir()
    model.write_bytes(fake["model"].read_bytes())
    folder = board_folder(model)
    started = interrupted_beside_another_session(monkeypatch, tmp_path, str(folder), board_processes)
    try:
        code, _, err = run_cli(
            monkeypatch, capsys, "bench", str(model), "--backend", "trtexec", "--remote", HOST,
            "--dtype", "fp32", "--runs", "5",
        )  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert code == 130, err
    ours, theirs = started
    assert ended(ours), "this session's trtexec outlived its Ctrl-C on the board"
    assert not ended(theirs, 3.0), "another session's trtexec of the same file was ended"
    pkill = log.read_text().splitlines()[-1]  # one of the session's own exports: all are named
    assert pkill.startswith(f"ssh {OPTS} {HOST} pkill -f -- '[/]{str(folder)[1:]}/"), pkill
    assert pkill.endswith(f"-{SWEEP_TOKEN}\\.json'"), pkill
