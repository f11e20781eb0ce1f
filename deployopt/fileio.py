"""Atomic writes: outputs appear whole or not at all (temp file in the same folder, then rename)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside `dest`; rename it onto `dest` only if the block succeeds."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=suffix or ".tmp", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, dest)
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
