"""`profile`'s profiler traces in TMPDIR: kept in a --trace-dir on another filesystem (a rename
across filesystems is EXDEV), and a TMPDIR too full to hold them is one line that leaves nothing."""

from __future__ import annotations

import errno
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper


def _tiny(path: Path) -> Path:
    """conv → relu on 1×3×8×8, written to `path`."""
    weights = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    w = numpy_helper.from_array(weights, "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private TMPDIR for this process, to see what a profile leaves there."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def _left_in(folder: Path) -> list[str]:
    """What a profile left in `folder` (torch's own torchinductor cache aside)."""
    return sorted(n for n in os.listdir(folder) if not n.startswith("torchinductor"))


def _serve(requests: list[dict]) -> list[dict]:
    """The torch worker's answers to `requests`, served in this process (CPU, fp32)."""
    pytest.importorskip("onnx2torch")
    from deployopt.backends.torch_worker import serve

    config = {"dtype": "fp32", "runs": 2, "warmup": 1, "profile_runs": 2, "device": "cpu"}
    stdin = io.StringIO("".join(json.dumps(r) + "\n" for r in [config, *requests, {"op": "quit"}]))
    proto = io.StringIO()
    serve(stdin, proto)
    return [json.loads(line) for line in proto.getvalue().splitlines()][1:-1]


def test_torch_trace_dir_on_another_filesystem_than_tmpdir(
    tmp_path: Path, tmpdir_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trace was exported in TMPDIR and os.replace'd into --trace-dir: `[Errno 18] Invalid
    cross-device link` where /tmp is a tmpfs and the trace folder on disk. A rename out of another
    folder fails here as it would there."""
    real_replace = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if os.path.dirname(os.path.abspath(src)) != os.path.dirname(os.path.abspath(dst)):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    model = _tiny(tmp_path / "tiny.onnx")
    kept = tmp_path / "tr" / "tiny.trace.json"
    kept.parent.mkdir()
    (answer,) = _serve([{"op": "profile", "path": str(model), "trace_path": str(kept)}])
    assert answer["ok"], answer
    assert "traceEvents" in json.loads(kept.read_text())
    assert os.listdir(kept.parent) == [kept.name] and _left_in(tmpdir_env) == []


def test_torch_trace_a_full_tmpdir_cut_short_is_one_line_and_leaves_nothing(
    tmp_path: Path, tmpdir_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's export writes `<path>.tmp` and renames it when done; a full disk stops it short,
    without an error: the worker said `JSONDecodeError: Expecting value` (of its own empty temp
    file) and left the `.tmp` in TMPDIR."""
    pytest.importorskip("torch")
    from torch.profiler import profile

    def export_chrome_trace(self: object, path: str) -> None:
        Path(path + ".tmp").write_text('{"traceEvents": [{"name": "conv", "ph"')

    monkeypatch.setattr(profile, "export_chrome_trace", export_chrome_trace)
    model = _tiny(tmp_path / "tiny.onnx")
    (answer,) = _serve([{"op": "profile", "path": str(model)}])
    assert answer == {
        "ok": False,
        "type": "BackendFailed",
        "error": f"the torch profiler's trace could not be written or read in {tmpdir_env} "
        "(TMPDIR; disk full?)",
    }
    assert _left_in(tmpdir_env) == []


def test_ort_trace_a_full_tmpdir_cut_short_is_one_line(
    tmp_path: Path,
    tmpdir_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """onnxruntime writes a truncated trace on a full disk and says nothing: json.load's
    JSONDecodeError was a full traceback."""
    import onnxruntime as ort

    real_end = ort.InferenceSession.end_profiling

    def end_profiling(self: object) -> str:
        path = real_end(self)
        with open(path, "r+") as f:
            f.truncate(os.path.getsize(path) // 2)
        return path

    monkeypatch.setattr(ort.InferenceSession, "end_profiling", end_profiling)
    model = _tiny(tmp_path / "tiny.onnx")
    code, _out, err = run_cli(monkeypatch, capsys, "profile", str(model), "--runs", "2")
    assert code == 2
    assert err.strip() == (
        f"error: onnxruntime's profiler trace could not be written or read in {tmpdir_env} "
        "(TMPDIR; disk full?)"
    )
    assert _left_in(tmpdir_env) == []
