"""One exception root for what the user got wrong.

The CLI prints a DeployoptError as one line and exits non-zero; any other exception is a bug
and keeps its traceback.
"""

from __future__ import annotations

import errno
import re
import tempfile
from typing import Any


class DeployoptError(Exception):
    """A problem with the user's input or environment, reported as one line."""

    exit_code = 2


class ModelError(DeployoptError):
    """The model file is missing, corrupt, or uses something we cannot handle."""


class StaticDimsError(ModelError):
    """An --input-shape that changes a dim the model file fixes (not its batch): `name` the input,
    `have` its dims as the file gives them (None for a dynamic one), `want` those asked for. A
    command that runs the files as they are (verify) words it its own way."""

    def __init__(
        self,
        message: str,
        name: str = "",
        have: list[int | None] | None = None,
        want: list[int] | None = None,
    ) -> None:
        super().__init__(message)
        self.name, self.have, self.want = name, list(have or []), list(want or [])

    def __reduce__(self) -> tuple[Any, ...]:  # whole through a worker's pickle, not its message alone
        return (type(self), (str(self), self.name, self.have, self.want))


class PlanError(DeployoptError):
    """A width plan names unknown or frozen groups, or impossible widths."""


class BackendUnavailable(DeployoptError):
    """A backend's library or device is missing; the message says what to install."""


class BackendFailed(DeployoptError):
    """A backend crashed, hung past its timeout, or could not run the model."""


class TargetError(DeployoptError):
    """An unknown target, or options the target cannot satisfy."""


class DataError(DeployoptError):
    """Calibration data missing, unreadable, or of the wrong shape."""


class OutputError(DeployoptError):
    """An output path cannot be written: a folder, under a file, read-only, no space."""


class InsufficientMemory(DeployoptError):
    """A run would need more memory than is free (a pre-flight lower bound, deployopt.memory)."""


class DeployoptWarning(UserWarning):
    """Something the user should know about a run that still goes on (the CLI prints one line)."""


class HostTimingWarning(DeployoptWarning):
    """A GPU target measured on the host CPU: the latencies (and the plan) describe the CPU."""


class TargetMismatchWarning(DeployoptWarning):
    """A GPU target measured on another GPU (SM count or compute capability differ)."""


class UnlockedClockWarning(DeployoptWarning):
    """A Jetson measured with its GPU clock free to follow DVFS (not locked by jetson_clocks)."""


class BoardWarning(DeployoptWarning):
    """A warning TensorRT or the runner printed on the board, during a run that succeeded (an engine
    built for another device, a timing cache it could not read): with --remote only the host sees it."""


class CacheWarning(DeployoptWarning):
    """A cache entry could not be written or read: the run goes on without it (one `warning:` line)."""


def interrupt_in_chain(exc: BaseException) -> bool:
    """Whether `exc` is, or was raised from or while handling, a KeyboardInterrupt (Ctrl-C, or
    SIGTERM as the CLI maps it). An extension module whose initialization a signal interrupts
    raises `ImportError: initialization failed` from it (pybind11: onnxruntime, matplotlib's
    kiwisolver), and a one-line error raised in such an `except ImportError` keeps it as context:
    both were read as "not installed", or printed a traceback."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        todo += [e.__cause__, e.__context__]
    return False


def reraise_interrupt(exc: BaseException) -> None:
    """In an `except ImportError` that reads the error as "not installed" (or goes on without the
    module): raise KeyboardInterrupt instead when the import failed because it was interrupted, so
    the command ends as interrupted (exit 130; 143 for SIGTERM), not with a wrong diagnosis."""
    if interrupt_in_chain(exc):
        raise KeyboardInterrupt from exc


def no_such_file(
    path: object, error: type[DeployoptError] = DeployoptError, folder: bool = False
) -> DeployoptError:
    """`PATH: no such file` (`... or folder` for an input that may be a folder): the one wording
    every command uses for a missing input path, raised as the error type of what it was to be."""
    return error(f"{path}: no such file{' or folder' if folder else ''}")


def trace_failed(profiler: str, exc: OSError | ValueError) -> str:
    """The one line for a profiler trace that TMPDIR could not hold (a truncated JSON, most often),
    `profiler` naming whose ("onnxruntime's profiler"): one wording for the ort backend and the torch
    worker. ENOENT (the trace never written) says nothing more than the line."""
    why = exc.strerror if isinstance(exc, OSError) and exc.errno != errno.ENOENT else None
    return (
        f"{profiler} trace could not be written or read in {tempfile.gettempdir()} (TMPDIR; disk full?)"
        + (f": {why}" if why else "")
    )


def shown_number(number: float) -> str:
    """A number for an error line: an integer as written, a float in `:g`, and a 400-digit integer
    (a hand-edited profile) said, not printed."""
    if isinstance(number, int) and abs(number) >= 10**15:
        return f"a {len(str(abs(number)))}-digit number"
    return repr(number) if isinstance(number, int) else f"{number:g}"


def range_error(key: str, value: float, lo: float, hi: float, why: str) -> str:
    """'' when `value` is in [lo, hi], else "KEY must be from LO to HI (WHY), not VALUE": the one
    wording of a target profile's bounds, for its facts (targets) and its fitted params (waves)."""
    if lo <= value <= hi:
        return ""
    return f"{key} must be from {shown_number(lo)} to {shown_number(hi)} ({why}), not {shown_number(value)}"


def first_line(exc: BaseException, empty: str | None = None) -> str:
    """The first line of `exc`'s message, for a one-line error built around what a library said
    (onnx, onnxruntime, Pillow print paragraphs); `empty` (default: the exception's type name) when
    the message is blank, so the line never ends in nothing."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__ if empty is None else empty
    return text.splitlines()[0]


def shorten(text: str, limit: int = 300) -> str:
    """`text` if at most `limit` characters, else cut at the last space before it with ` …`: a cut
    at the character left a word half there (`outermos)`) and no sign that more was said. A word
    longer than half the limit (a tensor's path-like name) is cut within, not dropped whole."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    space = head.rfind(" ")
    if space >= limit // 2:
        head = head[:space]
    return head.rstrip(" ,;:") + " …"


def onnxruntime_reason(exc: BaseException) -> str:
    """onnxruntime's message on one line, without its code and C++ location: `Reshape 'flat': The
    input tensor cannot be reshaped to the requested shape. Input shape:{1,4,80,80}, requested
    shape:{1,1024}`, where its first 300 characters said only where in onnxruntime's source it
    failed. All lines: a wrong input dim is said on the second (`index: 0 Got: 2 Expected: 1`)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    node = re.match(
        r"Non-zero status code returned while running (\w+) node\. Name:'([^']*)' Status Message: ", text
    )
    if node:
        text = f"{node[1]} {node[2]!r}: {text[node.end() :]}"
    text = re.sub(r"\S+\.(?:h|cc|cpp):\d+ .*? was false\. ", "", text)
    return shorten(re.sub(r"\S+\.(?:h|cc|cpp):\d+ \w+ ", "", text))  # `upsamplebase.h:553 ScalesValidation `


#: A process ended by SIGKILL, as its status reads: -9 from Python's subprocess and multiprocessing,
#: 137 (128 + 9) from a shell, from coreutils `timeout` and, through the board's shell, from ssh.
SIGKILL_STATUSES = frozenset({-9, 137})


def exit_phrase(returncode: int | None) -> str:
    """How a program ended, after its name in a one-line error: `exited N`, `was killed by signal N`,
    or `was killed (SIGKILL)` (SIGKILL_STATUSES), which oom_hint explains."""
    if returncode in SIGKILL_STATUSES:
        return "was killed (SIGKILL)"
    if returncode is not None and returncode < 0:
        return f"was killed by signal {-returncode}"
    return f"exited {returncode}"


def oom_hint(returncode: int | None, on_board: bool = False) -> str | None:
    """What a SIGKILL usually means and what helps, for the error line (None for another status).
    The kernel's out-of-memory killer sends it, with no message to the process: on a Jetson, whose
    CPU and GPU share one memory, the most common way a TensorRT engine build dies. Only the
    kernel's log can tell it from a `kill -9`, so the line says where to look (`on_board`: the
    command is run there, not here)."""
    if returncode not in SIGKILL_STATUSES:
        return None
    where = " on the board" if on_board else ""
    return (
        "most often the kernel's out-of-memory killer (a Jetson's GPU shares the system's memory): "
        f"`sudo dmesg | grep -i -E 'killed process|out of memory'`{where} tells; "
        "stop other programs, add swap or try a smaller --batch"
    )
