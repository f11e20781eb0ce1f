"""A `--remote` step that outlives --timeout says what raises the limit, in its one line.

"runner.py on user@jetson did not finish within 3 s" gave no hint: a first engine build on a Jetson
Nano takes minutes, and --timeout is what lets it. Only where --timeout is the limit that ran out:
a quick step (mkdir, a copy, the version check, the copy back) is capped at 120 s whatever --timeout
says, and `targets --remote` has no --timeout; they were told "--timeout SECONDS raises the limit"
too. Played on the stand-in board of tests/test_tensorrt_remote.py: no real Jetson, ssh or TensorRT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
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
SLOW = (
    f"so long a wait for a quick step points at the connection or a busy board (`ssh {HOST} uptime` "
    "shows its load)"
)
CAPPED = f" (a quick step's limit, whatever --timeout says); {SLOW}"


def test_what_timed_out_says_what_raises_the_limit() -> None:
    """One line each, for a command whose --timeout is 3 s: the builds (the runner, trtexec) add
    that a first build takes minutes on a Nano; a copy or a mkdir only what raises the limit; a
    batch's limit (--timeout per conv) is raised by --timeout too."""
    board = Board(HOST, user_timeout_s=3)
    said = f"on {HOST} did not finish within"
    assert board.timed_out("runner.py", 3) == f"runner.py {said} 3 s; {RAISES}{BUILD}"
    assert board.timed_out("trtexec", 7.5) == f"trtexec {said} 7.5 s; {RAISES}{BUILD}"
    assert board.timed_out("scp of the model", 3) == f"scp of the model {said} 3 s; {RAISES}"


def test_a_limit_that_is_not_the_users_timeout_is_not_said_to_be_raised_by_it() -> None:
    """A quick step capped at 120 s under --timeout 1000, and any step of a command without
    --timeout (Board's default, as `targets --remote` makes it): the line says what the limit is and
    points at the connection and the board's load, not at --timeout."""
    said = f"on {HOST} did not finish within"
    capped = Board(HOST, user_timeout_s=1000).timed_out("scp of result-5eed5eed.json", 120)
    assert capped == f"scp of result-5eed5eed.json {said} 120 s{CAPPED}"
    assert Board(HOST).timed_out("runner.py --env-only", 120) == f"runner.py --env-only {said} 120 s; {SLOW}"
    assert RAISES not in capped


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
        Board(HOST, user_timeout_s=100).run_limited(["trtexec"], "trtexec", 100.0)
    assert str(exc.value) == (
        f"trtexec on {HOST} did not finish within 100 s, nor stop within {KILL_AFTER_S} s of its TERM: "
        f"the board's `timeout` KILLed it; {RAISES}{BUILD}"
    )


def hang_on(monkeypatch: pytest.MonkeyPatch, needle: Callable[[list[str]], bool]) -> None:
    """The ssh or scp that `needle` picks outlives its limit here (subprocess.run raises
    TimeoutExpired at once, as it does when the limit runs out)."""
    import deployopt.remote

    real = subprocess.run

    def run(cmd: object, *args: object, **kw: object) -> object:
        if isinstance(cmd, list) and needle(cmd):
            raise subprocess.TimeoutExpired(cmd, kw.get("timeout"))  # type: ignore[arg-type]
        return real(cmd, *args, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(deployopt.remote.subprocess, "run", run)


@pytest.mark.parametrize("backend", ["tensorrt", "trtexec"])
def test_cli_bench_remote_a_quick_step_capped_at_120s_says_so(
    backend: str,
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bench --remote --timeout 1000 whose mkdir on the board hangs: its limit is 120 s whatever
    --timeout says, and the line says that (it said --timeout SECONDS raises the limit, which was
    1000 already)."""
    play_the_board(tmp_path, monkeypatch)
    hang_on(monkeypatch, lambda cmd: cmd[0] == "ssh" and "mkdir -p" in cmd[-1])
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), "--backend", backend, "--remote", HOST,
        "--dtype", "fp32", "--runs", "3", "--timeout", "1000",
    )  # fmt: skip
    assert (code, stdout) == (2, "")
    assert err == f"error: mkdir on {HOST} did not finish within 120 s{CAPPED}\n"


def test_cli_bench_remote_the_copy_back_capped_at_120s_says_so(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runner's result copied back is a quick step too (the reviewer's case)."""
    play_the_board(tmp_path, monkeypatch)
    hang_on(
        monkeypatch, lambda cmd: cmd[0] == "scp" and any("/result" in a and a.endswith(".json") for a in cmd)
    )
    code, stdout, err = run_cli(
        monkeypatch,
        capsys,
        "bench",
        str(model),
        *REMOTE,
        "--dtype",
        "fp32",
        "--runs",
        "3",
        "--timeout",
        "1000",
    )
    assert (code, stdout) == (2, "") and err.count("\n") == 1, err
    assert err.endswith(f"did not finish within 120 s{CAPPED}\n") and RAISES not in err, err


def test_cli_targets_remote_has_no_timeout_to_raise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`targets --remote` has no --timeout option: a read of the board that hangs does not tell the
    user to give one (click refuses it: 'No such option')."""
    play_the_board(tmp_path, monkeypatch)
    hang_on(monkeypatch, lambda cmd: "--env-only" in " ".join(cmd))
    code, stdout, err = run_cli(monkeypatch, capsys, "targets", "--remote", HOST)
    assert (code, stdout) == (2, "")
    assert err == f"error: runner.py --env-only on {HOST} did not finish within 120 s; {SLOW}\n"
    code, _, err = run_cli(monkeypatch, capsys, "targets", "--remote", HOST, "--timeout", "300")
    assert code == 2 and "No such option" in err  # still none: the line above names none
