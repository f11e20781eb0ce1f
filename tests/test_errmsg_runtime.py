"""Runtime and conversion failures that named no culprit or the wrong one (bug bash, error
messages 03, 07, 09).

09: a model that fails on every input (a Gather index out of range baked into the graph): verify
said the reference "failed on the calibration inputs" when none were given, and bench's line named
no file; both kept onnxruntime's "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status
code ..." prefix. 07: `deployopt fp16` said "shape inference left 'b' without a type", not which op
makes it nor what to do. 03: a trtexec that exits 0 without a performance summary said "no
end-to-end timing in this log": neither trtexec nor the log named, and the log deleted with the
work folder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import one_error, run_cli
from onnx import TensorProto, helper, numpy_helper

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _gather_model(path: Path) -> Path:
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32), "w"
    )
    idx = numpy_helper.from_array(np.array([0, 1, 2, 99], np.int64), "idx")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="conv", pads=[1] * 4),
        helper.make_node("Gather", ["a", "idx"], ["y"], name="/head/Gather", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
        [w, idx],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


REASON = (
    "Gather '/head/Gather': indices element out of data bounds, idx=99 must be within the inclusive range"
)


def test_verify_names_the_failing_node_not_calibration_inputs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    m = str(_gather_model(tmp_path / "gather.onnx"))
    err = one_error(*run_cli(monkeypatch, capsys, "verify", m, m)[::2])
    assert "calibration inputs" not in err and "[ONNXRuntimeError]" not in err, err
    assert "Non-zero status code" not in err, err
    assert (
        err.startswith("error: reference model cannot run: onnxruntime fails inside it, in ")
        and REASON in err
    )
    assert "check that node of the model" in err


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_bench_names_the_file_and_the_node(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    m = str(_gather_model(tmp_path / "gather.onnx"))
    err = one_error(*run_cli(monkeypatch, capsys, command, m, "--runs", "2", "--warmup", "0")[::2])
    assert err.startswith("error: onnxruntime cannot run gather.onnx (on random inputs): " + REASON), err
    assert "[ONNXRuntimeError]" not in err


def test_fp16_names_the_op_whose_output_has_no_type_and_what_to_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    r = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(r.standard_normal((16, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(r.standard_normal((10, 16, 3, 3)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1] * 4),
        helper.make_node("MyPlugin", ["a"], ["b"], name="plugin_0", domain="com.me"),
        helper.make_node("Conv", ["b", "w2"], ["y"], name="c2", pads=[1] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10, 16, 16])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.me", 1)]
    )
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "plugin.onnx"))
    out = tmp_path / "plugin_fp16.onnx"
    err = one_error(*run_cli(monkeypatch, capsys, "fp16", str(tmp_path / "plugin.onnx"), "-o", str(out))[::2])
    assert "'b', the output of com.me MyPlugin 'plugin_0' (an op onnx's shape inference does not know)" in err
    assert "declare it in the graph's value_info (type and shape) and convert again" in err, err
    assert not out.exists()
    # and the advice works: declared, it converts
    model.graph.value_info.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 16, 16, 16]))
    onnx.save(model, str(tmp_path / "plugin_vi.onnx"))
    code, _, err = run_cli(monkeypatch, capsys, "fp16", str(tmp_path / "plugin_vi.onnx"), "-o", str(out))
    assert code == 0 and out.is_file(), err


_NO_SUMMARY = """#!/bin/sh
if [ "$1" = "--help" ]; then
  echo "&&&& RUNNING TensorRT.trtexec [TensorRT v8502] # trtexec --help"; exit 0
fi
echo "&&&& RUNNING TensorRT.trtexec [TensorRT v8502] # trtexec $*"
echo "[I] Skipped inference phase since --skipInference is added."
echo "&&&& PASSED TensorRT.trtexec [TensorRT v8502] # trtexec $*"
"""


def test_trtexec_without_a_summary_names_trtexec_and_keeps_its_log(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake = tmp_path / "trtexec_ok_no_summary"
    fake.write_text(_NO_SUMMARY)
    fake.chmod(0o755)
    kept_in = tmp_path / "tmp"
    kept_in.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(kept_in))  # where the kept log goes
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(fake))
    err = one_error(
        *run_cli(monkeypatch, capsys, "bench", str(EXAMPLE), "--backend", "trtexec", "--runs", "5")[::2]
    )
    assert err.startswith(f"error: trtexec ({fake}) exited 0 with no end-to-end timing in this log; "), err
    assert "the log ends: [I] Skipped inference phase since --skipInference is added. (log: " in err, err
    log = Path(err.rsplit("(log: ", 1)[1].rstrip(")\n"))
    assert log.is_file() and log.parent.parent == kept_in, err
    assert "Skipped inference phase" in log.read_text()
