"""verify scores each batch as it goes: the reference's outputs are not kept to the end.

A segmentation model's outputs for 512 images (21×224² each, 2.1 GB) were all held through verify
(2.7 GB peak for 294 MB of data), though each is read once; the scores, verdicts and JSON are
the ones keeping them gave."""

from __future__ import annotations

import json
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import deployopt.fidelity as fidelity
from deployopt.fidelity import CalibrationSet, ReferenceRun, Thresholds, compare_models


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _heads(path: Path, w: np.ndarray, batch: int = 2) -> Path:
    """x [batch, 3, 4, 4] → a feature map y (cosine per row), logits m (top-1), one value a row s
    (relative error) and labels a (exact match): every way an output is scored."""
    nodes = [
        h.make_node("Conv", ["x", "w"], ["y"]),
        h.make_node("ReduceMean", ["y"], ["m"], axes=[2, 3], keepdims=0),
        h.make_node("ReduceMean", ["y"], ["r"], axes=[1, 2, 3], keepdims=0),
        h.make_node("Sigmoid", ["r"], ["s"]),
        h.make_node("ArgMax", ["m"], ["a"], axis=1, keepdims=0),
    ]
    graph = h.make_graph(
        nodes,
        "heads",
        [h.make_tensor_value_info("x", T.FLOAT, [batch, 3, 4, 4])],
        [
            h.make_tensor_value_info("y", T.FLOAT, [batch, 5, 4, 4]),
            h.make_tensor_value_info("m", T.FLOAT, [batch, 5]),
            h.make_tensor_value_info("s", T.FLOAT, [batch]),
            h.make_tensor_value_info("a", T.INT64, [batch]),
        ],
        [nh.from_array(w.astype(np.float32), "w")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


class _ReferenceOutputs:
    """fidelity._run, recording which samples' reference outputs are still alive at each run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.samples: list[list[weakref.ref[np.ndarray]]] = []
        self.most_alive = 0
        self.real = fidelity._run
        monkeypatch.setattr(fidelity, "_run", self)

    def __call__(self, sess: Any, feed: dict[str, np.ndarray], role: str, *data: Any) -> list[np.ndarray]:
        alive = sum(any(r() is not None for r in refs) for refs in self.samples)
        self.most_alive = max(self.most_alive, alive)
        out = self.real(sess, feed, role, *data)
        if role == "reference":  # an output of one value a row is kept for its score (a few bytes)
            self.samples.append([weakref.ref(o) for o in out if o.size > max(o.shape[:1], default=1)])
        return out


def test_verify_json_is_what_keeping_the_references_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """13 float64 rows, batch 2: six batches (the last row left out), each scored and let go before
    the next is run; the full JSON is that of the comparison that kept every reference output
    (its failures included) on the batches stacked by hand."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((5, 3, 1, 1))
    ref = _heads(tmp_path / "ref.onnx", w)
    cand = _heads(tmp_path / "cand.onnx", w + 0.3 * rng.standard_normal(w.shape))
    rows = rng.standard_normal((13, 3, 4, 4))
    np.save(tmp_path / "rows.npy", rows)
    spy = _ReferenceOutputs(monkeypatch)
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "verify",
        str(ref),
        str(cand),
        "--calibration-data",
        str(tmp_path / "rows.npy"),
        "--json",
    )
    assert code == 1, out + err
    assert "13 rows of input 'x' do not fill batches of 2: the last 1 is left out" in err
    got = json.loads(out)
    assert len(spy.samples) == 6 and spy.most_alive <= 2, spy.most_alive
    monkeypatch.setattr(fidelity, "_run", spy.real)
    batches = [rows[i : i + 2].astype(np.float32) for i in range(0, 12, 2)]
    calib = CalibrationSet([{"x": b} for b in batches], str(tmp_path / "rows.npy"), False)
    kept = ReferenceRun(str(ref))  # keeps every sample's outputs, as verify did
    want = compare_models(kept, str(cand), calib).to_json(Thresholds())
    assert got == json.loads(json.dumps(want))
    assert got["samples"] == 6 and got["rows"] == 12 and not got["passed"]
    assert [o["scored_by"] for o in got["per_output"]] == [
        "cosine",
        "cosine",
        "relative error",
        "exact match",
    ]


_PEAK_SCRIPT = """
import sys
from deployopt.fidelity import compare_models, load_calibration, replace


def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith(key + ":"))


model = sys.argv[1]
calib = load_calibration(None, {"x": [1, 1024]}, count=96)
compare_models(model, model, replace(calib, samples=calib.samples[:2]))  # imports, first calls
before = status("VmRSS")
compare_models(model, model, calib)
print(status("VmHWM") - before)
"""


def test_compare_models_holds_one_batch_of_reference_outputs(tmp_path: Path) -> None:
    """96 samples whose output is 4 MB each (384 MB of reference outputs in all): the peak of a
    comparison (resident, in a process of its own) is a few samples' work, not every reference
    output kept to the end (onnxruntime allocates them: tracemalloc does not see them)."""
    graph = h.make_graph(
        [h.make_node("Tile", ["x", "reps"], ["y"])],
        "wide",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 1024])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 1 << 20])],
        [nh.from_array(np.array([1, 1024], np.int64), "reps")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    outputs = 96 << 22
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(tmp_path / "m.onnx")],
        capture_output=True,
        text=True,
        check=True,
    )
    grew = int(done.stdout.split()[-1])
    assert grew < outputs / 3, f"resident memory grew {grew} B for {outputs} B of reference outputs"
