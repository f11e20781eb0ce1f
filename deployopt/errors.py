"""One exception root for what the user got wrong.

The CLI prints a DeployoptError as one line and exits non-zero; any other exception is a bug
and keeps its traceback.
"""

from __future__ import annotations


class DeployoptError(Exception):
    """A problem with the user's input or environment, reported as one line."""

    exit_code = 2


class ModelError(DeployoptError):
    """The model file is missing, corrupt, or uses something we cannot handle."""


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


def no_such_file(
    path: object, error: type[DeployoptError] = DeployoptError, folder: bool = False
) -> DeployoptError:
    """`PATH: no such file` (`... or folder` for an input that may be a folder): the one wording
    every command uses for a missing input path, raised as the error type of what it was to be."""
    return error(f"{path}: no such file{' or folder' if folder else ''}")


def first_line(exc: BaseException, empty: str | None = None) -> str:
    """The first line of `exc`'s message, for a one-line error built around what a library said
    (onnx, onnxruntime, Pillow print paragraphs); `empty` (default: the exception's type name) when
    the message is blank, so the line never ends in nothing."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__ if empty is None else empty
    return text.splitlines()[0]
