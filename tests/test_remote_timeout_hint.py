"""A `--remote` step that outlives --timeout says what raises the limit, in its one line.

"runner.py on user@jetson did not finish within 3 s" gave no hint: a first engine build on a Jetson
Nano takes minutes, and --timeout is what lets it. Played on the stand-in board of
tests/test_tensorrt_remote.py: no real Jetson, ssh or TensorRT.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from cli_runner import run_cli
from test_tensorrt_remote import HOST, REMOTE, alive, play_the_board
from test_tensorrt_remote import model as model  # the model on the host (a fixture)

from deployopt.remote import KILL_AFTER_S, Board

#: The board these tests play is this machine (see tests/test_tensorrt_remote.py): one xdist worker.
pytestmark = pytest.mark.xdist_group("board")

RAISES = "--timeout SECONDS raises the limit"
BUILD = " (a first engine build on a Jetson Nano can take minutes)"


def test_what_timed_out_says_what_raises_the_limit() -> None:
    """One line each: the builds (the runner, trtexec) add that a first build takes minutes on a
    Nano; a copy or a mkdir only what raises the limit; a build KILLed after its TERM, the same."""
    board = Board(HOST)
    said = f"on {HOST} did not finish within"
    assert board.timed_out("runner.py", 3) == f"runner.py {said} 3 s; {RAISES}{BUILD}"
    assert board.timed_out("trtexec", 7.5) == f"trtexec {said} 7.5 s; {RAISES}{BUILD}"
    assert board.timed_out("scp of the model", 120) == (
        f"scp of the model on {HOST} did not finish within 120 s; {RAISES}"
    )


def test_cli_bench_remote_timeout_says_what_raises_it(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench --remote --timeout 1 with a runner that hangs on the board: one line, exit 2, nothing
    written, and the line says --timeout raises the limit and why a first run may need more."""
    play_the_board(tmp_path, monkeypatch)
    pidfile = tmp_path / "hung.pid"
    monkeypatch.setenv("FAKE_BOARD_HANG", str(pidfile))
    out = tmp_path / "result.json"
    try:
        code, stdout, err = run_cli(
            monkeypatch, capsys, "bench", str(model), *REMOTE, "--timeout", "1", "-o", str(out)
        )
    finally:
        for _ in range(50):
            if not (pidfile.is_file() and alive(int(pidfile.read_text()))):
                break
            time.sleep(0.1)
        if pidfile.is_file() and alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the stand-in board's own child
    assert (code, stdout) == (2, "") and not out.exists()
    assert err == f"error: runner.py on {HOST} did not finish within 1 s; {RAISES}{BUILD}\n"


def test_a_build_killed_after_its_term_says_what_raises_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The board's `timeout` KILLed what outlived its TERM (status 137 once the limit and the KILL's
    delay have passed): the line says so, then what raises the limit, still one line."""
    from deployopt.errors import BackendFailed
    from deployopt.remote import KILLED, RemoteFailed

    def killed(self: Board, cmd: list[str], what: str, timeout_s: float, *args: object, **kw: object) -> str:
        raise RemoteFailed(f"{what} on {HOST} exited {KILLED}", KILLED, "", "")

    clock = iter([0.0, 100.0 + KILL_AFTER_S])
    monkeypatch.setattr(Board, "call", killed)
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    with pytest.raises(BackendFailed) as exc:
        Board(HOST).run_limited(["trtexec"], "trtexec", 100.0)
    assert str(exc.value) == (
        f"trtexec on {HOST} did not finish within 100 s, nor stop within {KILL_AFTER_S} s of its TERM: "
        f"the board's `timeout` KILLed it; {RAISES}{BUILD}"
    )
