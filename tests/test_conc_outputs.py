"""Concurrent and killed writers of one output (bug bash, concurrency): two `apply`s to one -o with
external weights left one's graph over the other's weights; a SIGKILLed apply left a hidden full
copy of the model beside its output for good, and optimize's work folders piled up in $TMPDIR."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from optimize_runner import run_model

import deployopt.fileio as fileio
import deployopt.model as model_module
from deployopt.errors import OutputError


def doubled(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same graph, other weights."""
    other = onnx.ModelProto()
    other.CopyFrom(model)
    for t in other.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 2, t.name))
    return other


def weights(path: Path) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_writer_of_an_external_data_output_is_refused_and_never_mixed(
    zoo_model: Callable[[str], onnx.ModelProto], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = zoo_model("resnet_projection")
    b = doubled(a)
    out = tmp_path / "race.onnx"
    real = model_module.publish
    second: list[BaseException | None] = []

    def publish(tmp, dest):  # type: ignore[no-untyped-def]
        real(tmp, dest)
        if not second and Path(dest).name == "race.onnx.data":  # A between its two renames
            second.append(None)
            try:
                model_module.save_model(b, out, external_data=True)  # B, whole, in that gap
            except OutputError as exc:
                second[0] = exc

    monkeypatch.setattr(model_module, "publish", publish)
    model_module.save_model(a, out, external_data=True)
    refusal = second[0]
    assert isinstance(refusal, OutputError), "the second writer wrote into the first one's output"
    assert "another deployopt run is writing it now" in str(refusal) and "\n" not in str(refusal)
    got, want = weights(out), {t.name: numpy_helper.to_array(t) for t in a.graph.initializer}
    assert all(np.array_equal(got[k], want[k]) for k in want)  # A's graph over A's weights
    assert sorted(p.name for p in tmp_path.iterdir()) == ["race.onnx", "race.onnx.data"]  # lock gone


def test_a_held_lock_refuses_apply_in_one_line(
    zoo_model: Callable[[str], onnx.ModelProto], tmp_path: Path
) -> None:
    import fcntl

    out = tmp_path / "m.onnx"
    lock = tmp_path / ".m.onnx.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(OutputError, match=r"m\.onnx: another deployopt run is writing it now"):
            model_module.save_model(zoo_model("resnet_projection"), out, external_data=True)
    assert not out.exists()


def test_the_temp_folder_a_killed_writer_left_is_removed_by_the_next_write(
    zoo_model: Callable[[str], onnx.ModelProto], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = tmp_path / "m.onnx"
    onnx.save(zoo_model("resnet_projection"), m)
    out = tmp_path / "k" / "out.onnx"
    # killed at its first rename (the OOM killer, a CI `kill -9`): its `finally` never ran
    killed = (
        "import os, signal, onnx, deployopt.model as m\n"
        "m.publish = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"m.save_model(onnx.load({str(m)!r}), {str(out)!r}, external_data=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", killed], capture_output=True)
    assert done.returncode == -9
    left = [p for p in out.parent.iterdir() if p.is_dir()]
    assert len(left) == 1 and (left[0] / "out.onnx").is_file()  # a whole model, hidden
    assert left[0].name.startswith(".out.onnx.")
    monkeypatch.setattr(fileio, "_STARTED_NS", time.time_ns(), raising=False)  # a later run (a new process)
    model_module.save_model(zoo_model("resnet_projection"), out, external_data=True)
    # (its lock file, left too, is this write's and goes with it)
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.onnx", "out.onnx.data"]


def test_only_folders_of_dead_unlocked_earlier_writers_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    pid = dead_pid()
    stale = tmp_path / f".out.onnx.{pid}-abcdefgh"
    locked = tmp_path / f".out.onnx.{pid}-lockedxx"  # a live writer whose pid means nothing here
    live = tmp_path / f".out.onnx.{os.getpid()}-livexxxx"
    newer = tmp_path / f".out.onnx.{pid}-newerxxx"
    other = tmp_path / f".other.onnx.{pid}-abcdefgh"
    for p in (stale, locked, live, newer, other):
        p.mkdir()
        (p / "out.onnx").write_bytes(b"x")
    monkeypatch.setattr(fileio, "_STARTED_NS", time.time_ns(), raising=False)
    newer.touch()
    os.utime(newer, ns=(time.time_ns() + 10**9,) * 2)
    fd = os.open(locked, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        fileio.remove_stale_temp_dirs(tmp_path, ".out.onnx.")
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (locked, live, newer, other))


def test_optimize_removes_work_folders_of_killed_runs(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    stale = tmp / f"deployopt-work-{dead_pid()}-abcdefgh"
    stale.mkdir()
    (stale / "candidate1.onnx").write_bytes(b"x" * 1000)
    monkeypatch.setattr(fileio, "_STARTED_NS", time.time_ns(), raising=False)
    seen: list[str] = []
    real = getattr(fileio, "owned_temp_dir", None)

    def watch(prefix, folder=None):  # type: ignore[no-untyped-def]
        made = real(prefix, folder)  # type: ignore[misc]
        seen.append(made.name)
        return made

    monkeypatch.setattr("deployopt.optimize.owned_temp_dir", watch, raising=False)
    run_model(zoo_model_path("resnet_projection"), tmp_path / "o", max_evals=2, fidelity=False)
    assert seen and seen[0].startswith(f"deployopt-work-{os.getpid()}-")  # the pid in its name
    assert not stale.exists()
    assert not [p for p in tmp.iterdir() if p.name.startswith("deployopt-work-")]  # its own removed too
