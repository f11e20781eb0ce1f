"""The per-layer sweep's conv models go to `deployopt-conv-<pid>-<random>` in $TMPDIR, locked while
used (fileio.owned_temp_dir): one a run killed with SIGKILL left is removed by the next sweep. A
TemporaryDirectory (`deployopt-conv-<random>`) stayed for good, no pid to tell it was stale."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from deployopt import fileio
from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.layers import ConvShape


def test_a_dead_sweeps_conv_folder_is_removed_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    stale = tmp_path / f"deployopt-conv-{proc.pid}-abcdefgh"
    stale.mkdir()
    (stale / "conv0.onnx").write_bytes(b"x")
    live = tmp_path / f"deployopt-conv-{os.getpid()}-abcdefgh"
    live.mkdir()
    monkeypatch.setattr(fileio, "_STARTED_NS", time.time_ns() + 1)  # a later run
    seen: list[str] = []
    session = get_backend("ort").open(MeasureOptions(dtype="fp32", runs=2, warmup=0))
    real = session.measure
    monkeypatch.setattr(session, "measure", lambda p: (seen.append(Path(p).parent.name), real(p))[1])
    session.measure_convs([ConvShape(n=1, c=8, h=8, w=8, k=8)])
    assert seen and seen[0].startswith(f"deployopt-conv-{os.getpid()}-")
    assert not stale.exists() and live.is_dir()
    assert not (tmp_path / seen[0]).exists()  # its own, removed at the end
