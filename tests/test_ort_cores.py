"""The ort backend records the CPU cores it may use and onnxruntime's intra-op thread setting, and
compare flags a pair where they differ.

The bug bash: `taskset -c 0 deployopt bench …` and a bench on both cores of a 2-core host recorded
identical environments, so `compare --strict` saw a like-for-like pair (torch says "2 threads" in
what it timed; ort said nothing).
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx

from deployopt.backends import MeasureOptions, get_backend
from deployopt.layers import ConvShape, conv_model
from deployopt.regression import differences, setup
from deployopt.timing import Timing

ENV = {"cpu": "AMD EPYC", "provider": "CPUExecutionProvider", "device": "CPUExecutionProvider"}


def ort_timing(**env: object) -> Timing:
    return Timing("ort", [100.0 + i for i in range(10)], 2, "one forward pass", {**ENV, **env})


def test_ort_records_usable_cores_and_intra_op_threads(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "conv.onnx"
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 16)), str(path))
    with get_backend("ort").open(MeasureOptions(dtype="fp32", runs=2, warmup=1)) as session:
        env = session.measure(path).environment
        assert env["intra_op_threads"] == 0  # SessionOptions' default: onnxruntime chooses
        if hasattr(os, "sched_getaffinity"):
            assert env["cpu_cores"] == len(os.sched_getaffinity(0))
        # a narrower affinity mask (taskset -c 0) is what the record says
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
        assert session.measure(path).environment["cpu_cores"] == 1


def test_compare_flags_other_cores_or_threads() -> None:
    two, one = ort_timing(cpu_cores=2, intra_op_threads=0), ort_timing(cpu_cores=1, intra_op_threads=0)
    assert differences(two, one) == ["usable CPU cores 2 → 1"]
    four = ort_timing(cpu_cores=2, intra_op_threads=4)
    assert differences(two, four) == ["onnxruntime intra-op threads default (0) → 4"]
    assert "usable CPU cores 2" in setup(two)
    # a result written before these facts were recorded: unknown, compared as before (no difference)
    old = ort_timing()
    for recorded in (one, four):
        assert differences(old, recorded) == [] and differences(recorded, old) == []
    # the cores matter to a CPU measurement; ort on a GPU names its GPU and is not flagged by them
    a = Timing("ort", [100.0] * 10, 0, "x", {"gpu": "NVIDIA H200", "cpu_cores": 16})
    b = Timing("ort", [100.0] * 10, 0, "x", {"gpu": "NVIDIA H200", "cpu_cores": 8})
    assert differences(a, b) == []
