"""What a writer killed with SIGKILL leaves beside an output: atomic_path's temp file is named after
its writer's pid (`.NAME.<pid>-<random>.tmp`) and locked while written, and the next atomic write of
the same output removes those whose writer is gone and which are older than itself. They stayed
for good (`.NAME.<random>.tmp`, no pid to tell a dead writer's from a live one's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from deployopt import fileio


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_temp_file_is_named_after_its_writer(tmp_path: Path) -> None:
    with fileio.atomic_path(tmp_path / "out.json") as tmp:
        assert tmp.name.startswith(f".out.json.{os.getpid()}-") and tmp.name.endswith(".tmp"), tmp.name
        tmp.write_text("{}")
    assert (tmp_path / "out.json").read_text() == "{}" and not tmp.exists()


def test_a_killed_writers_temp_file_is_removed_by_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SIGKILL mid-write: its temp file stays; the next write of the same output (a later
    run: a process started after it) removes it, and nothing else."""
    writer = textwrap.dedent(
        f"""
        import sys, time
        from deployopt.fileio import atomic_path
        with atomic_path({str(tmp_path / "out.json")!r}) as tmp:
            tmp.write_text("half")
            print(tmp, flush=True)
            time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    try:
        left = Path(proc.stdout.readline().strip())  # type: ignore[union-attr]
        assert left.name.startswith(f".out.json.{proc.pid}-"), left
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert left.exists()  # what SIGKILL leaves
    other = tmp_path / f".other.json.{proc.pid}-abcdefgh.tmp"  # another output's: not this write's to take
    other.write_text("x")
    time.sleep(0.01)
    fileio.write_json(tmp_path / "out.json", {"a": 1})
    assert left.exists()  # written after this process began: it may be a run starting now
    monkeypatch.setattr(fileio, "_STARTED_NS", time.time_ns())  # a later run
    fileio.write_json(tmp_path / "out.json", {"a": 2})
    assert not left.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "out.json"]


def test_only_a_dead_unlocked_older_writers_file_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = dead_pid()
    stale = tmp_path / f".out.json.{dead}-abcdefgh.tmp"
    live = tmp_path / f".out.json.{os.getpid()}-abcdefgh.tmp"  # this process: a write going on
    folder = tmp_path / f".out.json.{dead}-ABCDEFGH.tmp"  # no file: not atomic_path's
    for path in (stale, live):
        path.write_text("x")
    folder.mkdir()
    monkeypatch.setattr(fileio, "_STARTED_NS", time.time_ns() + 1)  # a later run
    fileio.write_text(tmp_path / "out.json", "new")
    assert not stale.exists() and live.exists() and folder.is_dir()


def test_a_locked_temp_file_is_not_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard (nothing was removed before either): a writer in another container, whose pid means
    nothing here, holds its file's lock."""
    held = tmp_path / f".out.json.{dead_pid()}-abcdefgh.tmp"
    held.write_text("x")
    monkeypatch.setattr(fileio, "_STARTED_NS", time.time_ns() + 1)
    hold = f"import fcntl, time; f = open({str(held)!r}); fcntl.flock(f, fcntl.LOCK_EX); print(1, flush=True)"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold + "; time.sleep(60)"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "1"  # type: ignore[union-attr]
        fileio.write_text(tmp_path / "out.json", "new")
        assert held.exists()
    finally:
        holder.kill()
        holder.wait()
