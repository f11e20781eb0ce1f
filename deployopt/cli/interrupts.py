"""What a Ctrl-C or SIGTERM says once a command's output is complete.

`bench -o`, `profile -o`, `apply` and `fp16` put their file in place a second or so before they
exit (a table drawn, a note's imports): an interrupt there printed "interrupted", which reads as if
nothing were written, over a complete result. A command records its output here the moment it is
in place; the entry point (deployopt.cli.main) then says that it is complete, as optimize says of
its OUTDIR, with the same exit status (130, or 143 for SIGTERM).
"""

from __future__ import annotations

import os

_complete: list[str] = []  # this command's outputs in place, in the order written


def output_complete(path: str | os.PathLike[str]) -> None:
    """Record that `path`, an output of the running command, is written whole."""
    _complete.append(os.fspath(path))


def forget() -> None:
    """Start a command with nothing recorded (in-process callers run several in one process)."""
    _complete.clear()


def interrupted_line() -> str:
    """The line an interrupt prints: `interrupted`, or that the outputs already written are complete."""
    if not _complete:
        return "interrupted"
    return f"interrupted after the run finished: its result in {' and '.join(_complete)} is complete"
