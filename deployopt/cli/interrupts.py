"""What a Ctrl-C or SIGTERM says once a command's output is complete; a reader gone as an interrupt.

`bench -o`, `profile -o`, `apply` and `fp16` put their file in place a second or so before they
exit (a table drawn, a note's imports): an interrupt there printed "interrupted", which reads as if
nothing were written, over a complete result. A command records its output here the moment it is
in place; the entry point (deployopt.cli.main) then says that it is complete, as optimize says of
its OUTDIR, with the same exit status (130, or 143 for SIGTERM).
"""

from __future__ import annotations

import _thread
import contextlib
import errno
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

_complete: list[str] = []  # this command's outputs in place, in the order written


def output_complete(path: str | os.PathLike[str]) -> None:
    """Record that `path`, an output of the running command, is written whole."""
    _complete.append(os.fspath(path))


def forget() -> None:
    """Start a command with nothing recorded (in-process callers run several in one process)."""
    global _hung_up
    _complete.clear()
    _closed.clear()
    _hung_up = False


def interrupted_line() -> str:
    """The line an interrupt prints: `interrupted`, or that the outputs already written are complete."""
    if not _complete:
        return "interrupted"
    return f"interrupted after the run finished: its result in {' and '.join(_complete)} is complete"


# A reader that goes away (`deployopt ... | head`, `2>&1 | head -2`, `| true`) is an interrupt too.
# Python ignores SIGPIPE, so the next write raised BrokenPipeError, which rich turned into a silent
# SystemExit(1) wherever it printed (optimize stopped mid-run, its folder holding only the journal)
# and typer into exit 1 (for compare: "a regression"). Now the command unwinds as for Ctrl-C
# (optimize keeps its journal and says how to resume, where stderr is still open) and exits 141,
# 128 + SIGPIPE, as a tool that SIGPIPE ends does.

_closed: set[str] = set()  # "stdout" / "stderr": closed by their reader during this command
_NAMES = ("stdout", "stderr")
_hung_up = False  # a write to the terminal this command started on failed with EIO: it hung up


class OutputClosed(KeyboardInterrupt):
    """stdout or stderr closed by its reader: raised where the write failed, and unwound as Ctrl-C
    is (a KeyboardInterrupt: no `except Exception` on the way swallows it, and optimize's cleanup
    and journal see the interrupt they handle); the entry point then exits 141."""


def closed_streams() -> set[str]:
    """The standard streams whose reader went away during this command."""
    return set(_closed)


class TerminalHungUp(KeyboardInterrupt):
    """A write to the terminal the command started on failed with EIO: the terminal hung up, and
    the write came before SIGHUP's handler ran (under load it did; the run then ended as
    "error: Input/output error", exit 2, without optimize's resume line). Unwound as that SIGHUP."""


def terminal_hung_up() -> bool:
    """Whether this command's terminal hung up under a write (`TerminalHungUp`)."""
    return _hung_up


class _Watched:
    """A stream (`target`) whose write or flush to a reader that has gone is its `owner`'s to handle
    (ReaderStream._gone), once: after that, everything written goes nowhere."""

    def __init__(self, target: Any, owner: ReaderStream) -> None:
        self._target = target
        self._owner = owner

    def write(self, data: Any) -> int:
        if self._owner._gone_away:  # its descriptor is on /dev/null (a test's capture has none): no more
            return len(data)
        try:
            return int(self._target.write(data))
        except BrokenPipeError:
            self._owner._gone()
            return len(data)
        except OSError as exc:
            self._owner._hangup(exc)
            return len(data)

    def flush(self) -> None:
        if self._owner._gone_away:
            return
        try:
            self._target.flush()
        except BrokenPipeError:
            self._owner._gone()
        except OSError as exc:
            self._owner._hangup(exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


class ReaderStream(_Watched):
    """A standard stream (`name`: stdout or stderr) whose write or flush to a reader that has gone
    marks it closed, points its descriptor at /dev/null and raises OutputClosed, once: what is still
    buffered, and every later line (the unwinding's, the interpreter's flush at exit), goes nowhere
    rather than failing again. In another thread (a progress line's timer) it interrupts the main
    thread instead. Everything else is the stream's own (rich and click read its encoding, isatty,
    fileno, buffer)."""

    def __init__(self, stream: Any, name: str) -> None:
        super().__init__(stream, self)
        self._stream = stream
        self._name = name
        self._gone_away = False
        self._terminal = False  # a terminal when the command started: EIO there is its hangup
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self._terminal = bool(stream.isatty())

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    @property
    def buffer(self) -> Any:
        """The stream's bytes, watched alike: click (typer.echo) writes there, through a text
        stream of its own, where this one's encoding is ASCII."""
        return _Watched(self._stream.buffer, self)

    def _gone(self) -> None:
        _closed.add(self._name)
        self._to_devnull()
        if threading.current_thread() is threading.main_thread():
            raise OutputClosed
        _thread.interrupt_main()  # the timer's thread ends quietly; the command unwinds in its own

    def _hangup(self, exc: OSError) -> None:
        """EIO from the terminal the command started on: it hung up (`TerminalHungUp`); on Windows
        EINVAL or EPIPE from a stream that is no terminal: its reader went away (`_gone`); any other
        failure (a disk's EIO under a redirected stream, ENOSPC) is raised as it was."""
        global _hung_up
        if _windows_pipe_gone(exc) and not self._terminal:
            self._gone()
            return
        if exc.errno != errno.EIO or not self._terminal:
            raise exc
        self._to_devnull()
        if _hangup_ignored():  # nohup: the run goes on, its lines to the gone terminal go nowhere
            return
        _hung_up = True
        if threading.current_thread() is threading.main_thread():
            raise TerminalHungUp
        _thread.interrupt_main()

    def _to_devnull(self) -> None:
        """Everything written from now on goes nowhere, the descriptor too (Python's last flush)."""
        self._gone_away = True
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no descriptor (a test's capture)
            point_at_devnull(self._stream.fileno())


def _windows_pipe_gone(exc: OSError) -> bool:
    """Whether `exc`, from a write or flush, is how Windows says a pipe's reader went away: EINVAL
    (CPython issue 79935, bpo-35754) or EPIPE, not BrokenPipeError. `deployopt … | head` there
    printed "error: Invalid argument" and a chained traceback, exit 120 (optimize: no resume line)."""
    return sys.platform == "win32" and exc.errno in (errno.EINVAL, errno.EPIPE)


def point_at_devnull(fd: int) -> None:
    """Descriptor `fd` writes to /dev/null from now on (a reader or a terminal that has gone)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _hangup_ignored() -> bool:
    """Whether SIGHUP is ignored (`nohup`): a hangup is then no interrupt."""
    import signal

    with contextlib.suppress(AttributeError, ValueError):
        return signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    return False


@contextlib.contextmanager
def readers_watched() -> Iterator[None]:
    """sys.stdout and sys.stderr as ReaderStreams for the block, what is still buffered flushed at
    its end (a reader gone by then is found there, not as a traceback at interpreter exit), the
    streams put back afterwards (in-process callers). One that is None (`>&-`: Python has none
    for a descriptor closed when it started; rich prints nowhere then) stays None."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (None if s is None else ReaderStream(s, n) for s, n in zip(saved, _NAMES))
    try:
        try:
            yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
    finally:
        sys.stdout, sys.stderr = saved
