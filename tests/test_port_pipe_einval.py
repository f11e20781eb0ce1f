"""Windows: a write to a pipe whose reader has gone fails with OSError(EINVAL), not BrokenPipeError
(CPython issue 79935, bpo-35754). `deployopt targets | head -3` there printed "error: Invalid
argument" and a 100-line chained traceback, exit 120, and optimize skipped its resume line. Now it
is the reader gone, as on Linux: exit 141, quiet. Simulated on Linux: sys.platform "win32" and a
stdout that raises EINVAL once its reader has taken 3 lines (portability bug bash)."""

from __future__ import annotations

import errno
import io
import sys
import sysconfig
import tempfile
import zoneinfo  # noqa: F401 - imported on the real platform: its import reads sysconfig

import pytest
from cli_runner import run_cli

from deployopt.cli import interrupts
from deployopt.cli.interrupts import OutputClosed, ReaderStream

sysconfig.get_config_vars()  # read for this platform before sys.platform says win32
tempfile.gettempdir()


class ClosedPipe(io.StringIO):
    """A pipe (no terminal) whose reader leaves after `lines` lines: every write or flush from then
    on fails with `error` (EINVAL: Windows' word for it)."""

    def __init__(self, lines: int = 3, error: int = errno.EINVAL, terminal: bool = False) -> None:
        super().__init__()
        self.lines, self.error, self.terminal = lines, error, terminal

    def _check(self) -> None:
        if self.getvalue().count("\n") >= self.lines:
            raise OSError(self.error, "Invalid argument")

    def write(self, text: str) -> int:
        self._check()
        return super().write(text)

    def flush(self) -> None:
        self._check()

    def isatty(self) -> bool:
        return self.terminal


@pytest.fixture(autouse=True)
def _fresh() -> None:
    interrupts.forget()


# epipe: a guard (Python makes OSError(EPIPE) a BrokenPipeError, handled before too)
@pytest.mark.parametrize("error", [errno.EINVAL, errno.EPIPE], ids=["einval", "epipe"])
def test_on_windows_einval_from_a_pipe_is_its_reader_gone(
    monkeypatch: pytest.MonkeyPatch, error: int
) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    stream = ReaderStream(ClosedPipe(lines=0, error=error), "stdout")
    with pytest.raises(OutputClosed):
        stream.write("a line\n")
    assert interrupts.closed_streams() == {"stdout"}
    assert stream.write("more\n") == len("more\n")  # from then on it goes nowhere
    stream.flush()


def test_on_windows_einval_from_a_terminal_is_still_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard (passes before too): a console is no pipe; its EINVAL is raised as it was."""
    monkeypatch.setattr(sys, "platform", "win32")
    stream = ReaderStream(ClosedPipe(lines=0, terminal=True), "stdout")
    with pytest.raises(OSError) as caught:
        stream.write("a line\n")
    assert caught.value.errno == errno.EINVAL and not isinstance(caught.value, OutputClosed)
    assert interrupts.closed_streams() == set()


def test_on_linux_einval_is_still_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard (passes before too): Linux says a gone reader with EPIPE; EINVAL there is something else."""
    monkeypatch.setattr(sys, "platform", "linux")
    stream = ReaderStream(ClosedPipe(lines=0), "stdout")
    with pytest.raises(OSError) as caught:
        stream.flush()
    assert caught.value.errno == errno.EINVAL and not isinstance(caught.value, OutputClosed)


def test_targets_into_a_closed_pipe_on_windows_exits_141_quietly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`deployopt targets | head -3` on Windows: exit 141 and nothing on stderr, as on Linux (before:
    "error: Invalid argument", a chained traceback, exit 120)."""
    pipe = ClosedPipe(lines=3)
    monkeypatch.setattr(sys, "stdout", pipe)
    monkeypatch.setattr(sys, "platform", "win32")
    code, _, err = run_cli(monkeypatch, capsys, "targets")
    monkeypatch.setattr(sys, "platform", "linux")
    assert (code, err) == (141, "")
    assert "GPU targets" in pipe.getvalue()  # what went before the reader left
