"""Entry point: register every command module, turn user errors into one line and an exit code."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import warnings
from collections.abc import Iterator
from typing import Any

try:  # Ctrl-C in the seconds these imports take (onnx, numpy, rich) was a 20-line traceback
    import typer

    # Each module registers its commands on `app`; import order is the order of `deployopt --help`.
    # isort: off
    from deployopt.cli import optimize_cmd  # noqa: F401
    from deployopt.cli import surgery_cmd  # noqa: F401
    from deployopt.cli import verify_cmd  # noqa: F401
    from deployopt.cli import targets_cmd  # noqa: F401
    from deployopt.cli import backends_cmd  # noqa: F401
    from deployopt.cli import compare_cmd  # noqa: F401
    from deployopt.cli import precision_cmd  # noqa: F401

    # isort: on
    from deployopt.cli.app import Interrupted, app, err_console
    from deployopt.cli.interrupts import (
        OutputClosed,
        TerminalHungUp,
        closed_streams,
        forget,
        interrupted_line,
        point_at_devnull,
        readers_watched,
        terminal_hung_up,
    )
    from deployopt.errors import DeployoptError, DeployoptWarning, reraise_interrupt
except KeyboardInterrupt:  # what _interrupted says, before rich is there to say it
    sys.stderr.write("interrupted\n")
    sys.exit(130)
except ImportError as _exc:  # an extension's initialization interrupted (pybind11 wraps Ctrl-C)
    if not any(isinstance(e, KeyboardInterrupt) for e in (_exc.__cause__, _exc.__context__)):
        raise
    sys.stderr.write("interrupted\n")
    sys.exit(130)

#: click's base of every usage error (unknown option, bad value, missing argument); taken from
#: typer's own BadParameter, as typer ships click vendored or depends on it, by version.
_CLICK_EXCEPTION = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


#: click's suggestion, a sentence of its own after the message ("No such command 'anal'. Did you
#: mean 'analyze'?"), which ended the line in "?; see ..."
_SUGGESTION = re.compile(r"\.? Did you mean (.+)\?$")


def _usage_line(exc: Exception) -> str:
    """`No such option: --foo; see 'deployopt bench --help'`: click's message without its box. A
    suggestion goes in parentheses: `No such command 'anal' (did you mean 'analyze'?); see ...`."""
    message = " ".join(exc.format_message().split()).rstrip(".")  # type: ignore[attr-defined]
    message = _SUGGESTION.sub(r" (did you mean \1?)", message)
    ctx = getattr(exc, "ctx", None)
    other = _other_spelling(exc, ctx)
    if other is not None:  # click proposed `--mean` for bench's `--measure`
        message = f"{' '.join(str(exc.message).split())} (did you mean {other}?)"  # type: ignore[attr-defined]
    return f"{message}; see '{ctx.command_path if ctx is not None else _command_path()} --help'"


#: an option some commands spell otherwise: `--measure BACKEND` (staircase, calibrate; they take
#: `-b/--backend` too) is `--backend` in bench, profile and optimize
_OTHER_SPELLING = {"--measure": "--backend"}


def _other_spelling(exc: Exception, ctx: Any) -> str | None:
    """This command's name for an unknown option that another command takes (`--backend` for
    `bench --measure`), where click's own guess was an unrelated option or none."""
    other = _OTHER_SPELLING.get(str(getattr(exc, "option_name", "")))
    command = getattr(ctx, "command", None)
    if type(exc).__name__ != "NoSuchOption" or other is None or command is None:
        return None
    names = {opt for param in command.params for opt in getattr(param, "opts", ())}
    return other if other in names else None


def _command_path() -> str:
    """`deployopt bench`, for a usage error click raised with no context (an option given without
    its value: its parser does not attach one): the command named on the command line, else the
    group (the group's own options are flags, so the command is the first word not an option)."""
    word = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    with contextlib.suppress(Exception):  # the group as click sees it; the path, whatever it says
        if word is not None and word in getattr(typer.main.get_command(app), "commands", {}):
            return f"deployopt {word}"
    return "deployopt"


def _fail(message: str, code: int) -> None:
    """The one line every user error ends in, and its exit code: a newline inside it (a node name
    holding one, said unquoted) is written `\\n`, so the line stays one."""
    message = message.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\r")
    err_console.print(
        f"error: {message}", style="red", markup=False, highlight=False, emoji=False, soft_wrap=True
    )
    sys.exit(code)


INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
HUNG_UP = 129  # 128 + SIGHUP: a terminal that hung up under a write, before its signal came
OUTPUT_CLOSED = 141  # 128 + SIGPIPE: what `yes | head` reports for `yes`
_signalled: int | None = None  # SIGTERM or SIGHUP this run got: its KeyboardInterrupt exits 128 + it
_STREAM_WORDS = {"stdout": "standard output", "stderr": "standard error"}


def _interrupted(message: str | None = None) -> None:
    """Ctrl-C (or SIGTERM, SIGHUP) in any command: one line, exit 130 (143, 129), no traceback. Without a
    message of the command's own: `interrupted`, or that the output it already wrote is complete.
    Where the interrupt was a reader that went away (deployopt.cli.interrupts), `_output_closed`."""
    if closed_streams():
        _output_closed(message)
    message = message or interrupted_line()
    # a terminal hung up after the signal's look (EIO): no one reads
    with contextlib.suppress(OSError, TerminalHungUp):
        err_console.print(message, style="red", markup=False, highlight=False, emoji=False, soft_wrap=True)
    if _signalled:
        sys.exit(128 + _signalled)
    sys.exit(HUNG_UP if terminal_hung_up() else INTERRUPTED)


def _output_closed(message: str | None = None) -> None:
    """Exit 141, quietly, as a tool SIGPIPE ends does: `deployopt targets | head -3` is no failure
    to report. What the user needs still goes to stderr where that is open: a command's own line
    (optimize: how to resume) or that an output written is complete, as Ctrl-C says them."""
    closed = closed_streams()
    complete = interrupted_line()
    message = message or (complete if complete != "interrupted" else None)
    if message and "stderr" not in closed:
        gone = " and ".join(_STREAM_WORDS[name] for name in sorted(closed, reverse=True))
        if message.startswith("interrupted"):
            message = f"{gone} closed by its reader{message.removeprefix('interrupted')}"
        with contextlib.suppress(OutputClosed):
            err_console.print(message, style="red", markup=False, highlight=False, soft_wrap=True)
    sys.exit(OUTPUT_CLOSED)


def _unwinding_signals() -> list[signal.Signals]:
    """The signals unwound as Ctrl-C: SIGTERM, and SIGHUP where the system has one (not Windows)."""
    return [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]


def _hung_up_terminals(ttys: set[int]) -> None:
    """Point stdout/stderr at /dev/null where they were a terminal that has since hung up (its
    descriptors answer EIO, isatty no longer holds): what the unwinding prints, and Python's last
    flush, went nowhere but as an OSError each. One still a terminal (`kill -HUP` sent from
    elsewhere) keeps its lines."""
    for fd in sorted(ttys):
        if os.isatty(fd):
            continue
        with contextlib.suppress(OSError):
            point_at_devnull(fd)


@contextlib.contextmanager
def _signals_as_ctrl_c() -> Iterator[None]:
    """SIGTERM (`kill`, `timeout`, a CI job cancelled) and SIGHUP (the terminal or ssh session
    closed) unwind like Ctrl-C: optimize keeps its journal, says how to resume and removes its work
    folder, its lock and its worker processes; the exit status is 128 + the signal (143, 129).
    Python's default died on the spot, leaving the candidate models (TensorRT engines) in /tmp, the
    lock in OUTDIR and no line. A signal inherited as ignored (`nohup`) stays ignored."""
    global _signalled
    _signalled = None
    ttys = set()
    for fd in (1, 2):
        with contextlib.suppress(OSError, ValueError):
            if os.isatty(fd):
                ttys.add(fd)

    def on_signal(signum: int, frame: Any) -> None:
        global _signalled
        _signalled = signum
        if signum == getattr(signal, "SIGHUP", None):
            _hung_up_terminals(ttys)
        raise KeyboardInterrupt

    previous: dict[signal.Signals, Any] = {}
    try:
        for signum in _unwinding_signals():
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, on_signal)
    except ValueError:  # not the main thread (an in-process caller): its signals are its own
        yield
        return
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _memory_hint() -> str:
    """What to make smaller: `apply` allocates the plan's widths, every other command its inputs."""
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
    if command == "apply":
        return "are the plan's widths what you meant?"
    return "try a smaller --batch or --input-shape"


def _show_warning(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    """deployopt's own warnings (a run close to the memory it has, a cache it cannot write, a GPU
    target timed on the CPU) as one `warning:` line; others as Python prints them."""
    if issubclass(category, DeployoptWarning):
        err_console.print(
            f"warning: {message}", style="yellow", markup=False, highlight=False, soft_wrap=True
        )
    else:
        _python_show_warning(message, category, *args, **kwargs)


_python_show_warning = warnings.showwarning


#: error handlers that raise on a character the encoding lacks (not a lone surrogate): a stream with
#: one of these is made to write `\\xb5` instead
_RAISING_HANDLERS = frozenset({"strict", "surrogateescape", "surrogatepass"})


@contextlib.contextmanager
def _any_encoding() -> Iterator[None]:
    """stdout and stderr write what their encoding cannot hold as `\\xb5`, not as a traceback:
    under PYTHONIOENCODING=ascii (or a Latin-1 console) a table's `µs` or `…` ended `analyze`, a
    passing `verify` (exit 1) and `optimize` after its files were written; and a model file name
    that is not UTF-8 (its bytes held as surrogates) could not be printed to a UTF-8 stdout
    either. Only a stream that would raise is changed, and put back afterwards: `strict`, and
    `surrogateescape` (Python's choice for a C/POSIX locale with UTF-8 mode off), which passes
    only lone surrogates and raised on `µ` as `strict` does."""
    changed: list[tuple[Any, str]] = []
    for stream in (sys.stdout, sys.stderr):
        errors = getattr(stream, "errors", None)
        if errors in _RAISING_HANDLERS and hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError):  # closed, or a stream of its own kind
                stream.reconfigure(errors="backslashreplace")
                changed.append((stream, errors))
    try:
        yield
    finally:
        for stream, errors in changed:
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors=errors)


def main() -> None:
    # each restores what it replaces afterwards (in-process callers, tests)
    forget()  # an earlier command's outputs (in-process callers) are not this one's
    with warnings.catch_warnings(), _signals_as_ctrl_c(), _any_encoding():
        # every run says so (a run close to its memory, a cache it cannot write: LayerCache warns once)
        warnings.simplefilter("always", DeployoptWarning)
        warnings.showwarning = _show_warning
        try:
            with readers_watched():  # a reader gone: unwound as an interrupt, then exit 141
                _main()
        except OutputClosed:  # one raised past every handler (the error line itself, the last flush)
            _output_closed()
        except TerminalHungUp:  # the same, where the terminal hung up (exit 129)
            _interrupted()


def entry() -> None:
    """The `deployopt` command (and `python -m deployopt`): main(), then Ctrl-C, SIGTERM and SIGHUP
    ignored while the interpreter shuts down. One landing there (~0.2 s of module teardown after a
    finished optimize) exited 130 with no line, its results complete (SIGTERM, whose handler main()
    has put back, killed it with no line); in-process callers use main()."""
    try:
        main()
    finally:
        with contextlib.suppress(ValueError):  # not the main thread
            for signum in (signal.SIGINT, *_unwinding_signals()):
                signal.signal(signum, signal.SIG_IGN)


def _app() -> Any:
    """Run the command; an exception made of an interrupt is that interrupt: onnxruntime's (or
    matplotlib's) extension interrupted while it initializes raises `ImportError: initialization
    failed` from the KeyboardInterrupt, which was a 60-line traceback and exit 1, and a one-line
    error raised while handling such an ImportError ("not installed") was a wrong diagnosis."""
    try:
        # not standalone: a usage error comes here as an exception, not as rich's multi-line box
        return app(prog_name="deployopt", standalone_mode=False)
    except Interrupted:  # a command's own interrupt line, raised from the KeyboardInterrupt it says
        raise
    except Exception as exc:
        reraise_interrupt(exc)
        raise


def _main() -> None:
    try:
        code = _app()
    except _CLICK_EXCEPTION as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # `deployopt` alone: the help, as before
            exc.show()  # type: ignore[attr-defined]
        else:
            _fail(_usage_line(exc), exc.exit_code)  # type: ignore[attr-defined]
        sys.exit(exc.exit_code)  # type: ignore[attr-defined]
    except DeployoptError as exc:
        _fail(str(exc), exc.exit_code)
    except OSError as exc:
        # a write no code path turned into an OutputError: still one line, never a traceback
        where = f"{exc.filename}: " if exc.filename else ""
        _fail(f"{where}{exc.strerror or exc}", 2)
    except RecursionError:  # a file nested past Python's stack (JSON '[' × 100 000) no reader caught
        _fail("an input is nested too deeply to read (JSON or protobuf past Python's recursion limit)", 2)
    except MemoryError as exc:  # a --batch or --input-shape (apply: a plan width) too large here
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else "allocation failed"
        _fail(f"out of memory: {detail}; {_memory_hint()}", 2)
    except Interrupted as exc:
        _interrupted(str(exc))
    except (KeyboardInterrupt, typer.Abort):
        _interrupted()
    if code == INTERRUPTED:  # typer turns Ctrl-C in a command into a silent Exit(130)
        _interrupted()
    if isinstance(code, int) and code:  # typer.Exit(n) from a command (verify, compare: 1)
        sys.exit(code)


if __name__ == "__main__":
    entry()
