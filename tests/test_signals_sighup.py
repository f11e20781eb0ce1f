"""SIGHUP (the terminal or ssh session closed) unwinds like Ctrl-C and SIGTERM: Python's default
ended optimize on the spot, exit 129 with no line, its work folder of candidate models left in
TMPDIR and its lock in OUTDIR. After a real hangup the terminal answers every write with EIO: the
unwinding's lines go nowhere then, never as a traceback."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli

from deployopt.backends.model import WaveModelSession
from deployopt.journal import Journal
from deployopt.optimize import LOCK_NAME

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this system")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _args(model: Path, outdir: Path) -> list[str]:
    return ["optimize", str(model), "--target", "h200", "--sms", "8", "--backend", "model", "-o", str(outdir)]


@contextlib.contextmanager
def _sighup_handler(handler: Any) -> Iterator[None]:
    previous = signal.signal(signal.SIGHUP, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)


def _default_would_kill(signum: int, frame: Any) -> None:  # what these tests stand in for SIG_DFL
    pytest.fail("SIGHUP was not handled: the process would have died here")


def _hup_on_fourth_prediction(monkeypatch: pytest.MonkeyPatch) -> None:
    real = WaveModelSession.predict_shapes
    calls: list[Any] = []

    def hung_up_on_fourth(self: WaveModelSession, *args: Any) -> Any:
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGHUP)
        calls.append(args)
        return real(self, *args)

    monkeypatch.setattr(WaveModelSession, "predict_shapes", hung_up_on_fourth)


def test_sighup_unwinds_like_ctrl_c_and_resume_finishes(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    model, out = zoo_model_path("vgg16_pruned_b4"), tmp_path / "out"
    with monkeypatch.context() as m:
        _hup_on_fourth_prediction(m)
        with _sighup_handler(_default_would_kill):
            code, _, err = run_cli(monkeypatch, capsys, *_args(model, out), "--max-evals", "8")
            assert signal.getsignal(signal.SIGHUP) is _default_would_kill  # put back as it was
    assert code == 129, err
    assert err.strip().splitlines()[-1] == "interrupted; resume with --resume"
    assert len([e for e in Journal.read(out / "journal.jsonl") if e["event"] == "measured"]) == 3
    assert not (out / LOCK_NAME).exists() and not (out / "report.json").exists()
    assert list((tmp_path / "tmp").iterdir()) == []
    code, _, err = run_cli(monkeypatch, capsys, *_args(model, out), "--max-evals", "8", "--resume")
    assert code == 0, err
    assert (out / "report.json").exists()


def test_sighup_ignored_by_nohup_stays_ignored(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`nohup deployopt optimize ...` starts it with SIGHUP ignored: the run goes on after a hangup."""
    _hup_on_fourth_prediction(monkeypatch)
    out = tmp_path / "out"
    with _sighup_handler(signal.SIG_IGN):
        code, _, err = run_cli(
            monkeypatch, capsys, *_args(zoo_model_path("vgg16_pruned_b4"), out), "--max-evals", "8"
        )
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    assert code == 0, err
    assert (out / "report.json").exists()


def test_sighup_is_ignored_while_python_shuts_down(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """As Ctrl-C and SIGTERM are (entry()): the run's own exit code stands."""
    from deployopt.cli.main import entry

    monkeypatch.setattr(sys, "argv", ["deployopt", "targets"])
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        with contextlib.suppress(SystemExit):
            entry()
        after = signal.getsignal(signal.SIGHUP)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    capsys.readouterr()
    assert after is signal.SIG_IGN


# A real hangup: optimize run with a pseudo-terminal as its controlling terminal, which then closes
# (the ssh session or terminal window gone): the kernel sends SIGHUP, and the terminal answers EIO.
_DRIVER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from deployopt.backends.model import WaveModelSession
    from deployopt.cli.main import entry

    marker = Path(sys.argv[1])
    real = WaveModelSession.predict_shapes

    def slow(self, *args):
        marker.touch()
        time.sleep(0.05)
        return real(self, *args)

    WaveModelSession.predict_shapes = slow
    sys.argv = ["deployopt", *sys.argv[2:]]
    entry()
    """
)


def _controlling_terminal() -> None:
    """The pty as the run's controlling terminal, and SIGHUP at its default, as a shell starts a
    command (this process's may be ignored: an in-process test of entry() left it so once)."""
    import fcntl
    import termios

    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def run_and_hang_up(
    argv: list[str], marker: Path, env: dict[str, str], *, stdout: Any = None, stderr: Any = None
) -> int:
    """Run `argv` with a new pty as its controlling terminal (its stdin, and its stdout and stderr
    where not given), read what it prints there as a terminal does until `marker` exists, then
    close the pty: the terminal hangs up (SIGHUP, then EIO on every write to it). Its exit code."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave if stdout is None else stdout,
        stderr=slave if stderr is None else stderr,
        env=env,
        start_new_session=True,
        preexec_fn=_controlling_terminal,
    )
    os.close(slave)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            if select.select([master], [], [], 0.05)[0]:
                with contextlib.suppress(OSError):
                    os.read(master, 65536)
        assert marker.exists(), f"optimize did not start (exit {proc.poll()})"
        time.sleep(0.3)
        os.close(master)
        master = -1
        return proc.wait(timeout=120)
    finally:
        if master >= 0:
            os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pty hangup as Linux does it")
@pytest.mark.parametrize("on_terminal", ["stdout", "stderr"])
def test_terminal_hangup_unwinds_without_a_traceback(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, on_terminal: str
) -> None:
    model, out, tmp = zoo_model_path("vgg16_pruned_b4"), tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    marker = tmp_path / "predicting"
    env = {**os.environ, "TMPDIR": str(tmp), "DEPLOYOPT_CACHE_DIR": str(tmp_path / "cache")}
    with (tmp_path / "log").open("w") as log:
        code = run_and_hang_up(
            [sys.executable, "-c", _DRIVER, str(marker), *_args(model, out), "--max-evals", "400"],
            marker,
            env,
            stdout=None if on_terminal == "stdout" else log,
            stderr=None if on_terminal == "stderr" else log,
        )
    said = (tmp_path / "log").read_text()
    assert code == 129, said
    assert "Traceback" not in said and "Exception ignored" not in said
    if on_terminal == "stdout":
        assert said.strip().splitlines()[-1] == "interrupted; resume with --resume"
    assert not (out / LOCK_NAME).exists() and (out / "journal.jsonl").is_file()
    assert list(tmp.glob("deployopt-*")) == []  # (onnxruntime's telemetry leaves a .ses file there)
