"""Atomic writes: outputs appear whole or not at all (temp file in the same folder, then rename).

Every way an output path can be wrong (a folder where a file goes, a parent that is a file, a
read-only or full disk) is one OutputError naming the path, never an OSError traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from deployopt.errors import OutputError


def output_error(dest: str | os.PathLike[str], exc: OSError) -> OutputError:
    """`cannot write DEST: <why>`, the one line for an OSError met while writing `dest`."""
    return OutputError(f"cannot write {dest}: {exc.strerror or exc}")


def _existing_ancestor(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_dir(path: str | os.PathLike[str]) -> Path:
    """A folder outputs can go in (it may not exist yet), or a one-line OutputError; creates nothing."""
    path = Path(path)
    anc = _existing_ancestor(path)
    if not anc.is_dir():
        where = "it is" if anc == path.absolute() else f"{anc} is"
        raise OutputError(f"cannot write into {path}: {where} a file, not a folder")
    return path


def check_output_file(dest: str | os.PathLike[str]) -> Path:
    """A path a file can be written to (checked before long work), or a one-line OutputError."""
    dest = Path(dest)
    if dest.is_dir():
        raise OutputError(f"cannot write {dest}: it is a folder; give a file path")
    anc = _existing_ancestor(dest.parent)
    if not anc.is_dir():
        raise OutputError(f"cannot write {dest}: {anc} is a file, not a folder")
    return dest


def make_output_dir(path: str | os.PathLike[str]) -> Path:
    """Create the folder (and its parents) for outputs; a one-line OutputError if that fails."""
    path = check_output_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(path, exc) from None
    return path


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside `dest`; rename it onto `dest` only if the block succeeds."""
    dest = check_output_file(dest)
    make_output_dir(dest.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=suffix or ".tmp", dir=dest.parent)
    except OSError as exc:
        raise output_error(dest, exc) from None
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, dest)
    except OSError as exc:  # writing the temp file (a full disk, a quota) or renaming it
        raise output_error(dest, exc) from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_bytes(dest: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def write_text(dest: str | os.PathLike[str], text: str) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_text(text)


def write_json(dest: str | os.PathLike[str], obj: Any) -> None:
    write_text(dest, json.dumps(obj, indent=2, sort_keys=False) + "\n")
