"""Shape errors that blamed the wrong thing (bug bash, error messages 01 and 06).

01: a model whose traced Reshape pins batch 1 and whose graph output has a type but no shape (legal
ONNX, onnxruntime runs it) was told at --batch 2 that "graph output 'y' has no shape ... export the
model with its output shapes": untrue (inference finds it at the file's batch), and a re-export only
led to the real cause. It now gets the line the same model with a declared output shape gets.

06: verify refused an H/W change with "--input-shape sets its batch and its dynamic (?) dims only",
and then the batch it said it sets with "verify runs the files as they are". One rule, verify's.
"""

from __future__ import annotations

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


def _batch_pinned(path: Path, out_shape: list[int] | None) -> Path:
    """Conv, Relu, Conv, Reshape to a traced [1, -1], MatMul: batch 1 only."""
    r = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(r.standard_normal((16, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(r.standard_normal((10, 16, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "shp"),
        numpy_helper.from_array(r.standard_normal((10 * 16 * 16, 5)).astype(np.float32), "fcw"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1] * 4),
        helper.make_node("Relu", ["a"], ["b"], name="r"),
        helper.make_node("Conv", ["b", "w2"], ["c"], name="c2", pads=[1] * 4),
        helper.make_node("Reshape", ["c", "shp"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "fcw"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize(
    "args",
    [["bench", "--batch", "2", "--runs", "2", "--warmup", "0"], ["analyze", "--input-shape", "x:2x3x16x16"]],
    ids=["bench-batch", "analyze-input-shape"],
)
def test_an_output_without_shape_is_not_blamed_for_a_batch_the_graph_fixes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str]
) -> None:
    model = _batch_pinned(tmp_path / "noshape.onnx", None)
    code, _, err = run_cli(monkeypatch, capsys, "analyze", str(model))
    assert code == 0, err  # at its own batch it loads: the missing output shape is inferred
    command, *rest = args
    err = one_error(*run_cli(monkeypatch, capsys, command, str(model), *rest)[::2])
    assert "has no shape" not in err and "export the model with its output shapes" not in err, err
    assert "noshape.onnx: its shapes do not infer at x 2×3×16×16, though they do at the file's own" in err
    assert "export it with a dynamic batch, or run it at its own" in err
    assert "op_type:MatMul, node name: fc" in err  # onnx's own line names the op that broke
    # the same words as the model that declares its output shape
    declared = _batch_pinned(tmp_path / "withshape.onnx", [1, 5])
    other = one_error(*run_cli(monkeypatch, capsys, command, str(declared), *rest)[::2])
    assert other.replace("withshape", "noshape") == err


def test_a_missing_output_shape_inference_cannot_find_is_still_said(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """An output no inference types, at the file's own shapes too: the old line, which is true."""
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name="c"),
        helper.make_node("MyOp", ["a"], ["y"], name="custom", domain="com.me"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.me", 1)]
    )
    model.ir_version = 8
    path = tmp_path / "custom.onnx"
    onnx.save(model, str(path))
    err = one_error(*run_cli(monkeypatch, capsys, "analyze", str(path), "--input-shape", "x:2x3x8x8")[::2])
    assert "graph output 'y' has no shape, and shape inference finds none" in err, err


@pytest.mark.parametrize("shape", ["input:1x3x64x64", "input:2x3x32x32"], ids=["size", "batch"])
def test_verify_says_one_rule_for_every_static_dim(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    m = str(EXAMPLE)
    err = one_error(*run_cli(monkeypatch, capsys, "verify", m, m, "--input-shape", shape)[::2])
    assert "sets its batch" not in err, err
    assert "reference model input 'input' is 1×3×32×32 in the file" in err, err
    assert "verify runs the files as they are, so --input-shape can set only dynamic (?) dims" in err, err
    assert "×".join(shape.split(":")[1].split("x")) in err


def test_bench_still_says_input_shape_sets_the_batch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench does rewrite the batch: its line (model.py's) is unchanged."""
    err = one_error(
        *run_cli(monkeypatch, capsys, "bench", str(EXAMPLE), "--input-shape", "input:1x3x64x64")[::2]
    )
    assert "--input-shape sets its batch and its dynamic (?) dims only, got 1×3×64×64" in err, err
