"""Convs the wave model cannot shape: named with the true reason, and never sized by a prediction
that leaves them out (bug bash: an If or a Loop before a conv)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(4)


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _conv(x: str, w: str, y: str) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, w], [y], y, kernel_shape=[3, 3], pads=[1, 1, 1, 1])


def _if_model(path: Path) -> Path:
    """cA (10, free, priced) → cB (12) → an If whose branches differ in size (MaxPool or not) → c2
    (13, free) → c3 → a pooled head: c2 and c3 have no known input size."""
    then_g = helper.make_graph(
        [helper.make_node("MaxPool", ["rb"], ["t"], kernel_shape=[2, 2], strides=[2, 2])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["rb"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
    )
    nodes = [
        _conv("x", "wa", "cA"),
        helper.make_node("Relu", ["cA"], ["ra"]),
        _conv("ra", "wb", "cB"),
        helper.make_node("Relu", ["cB"], ["rb"]),
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"]),
        helper.make_node("If", ["cond"], ["ifo"], then_branch=then_g, else_branch=else_g),
        _conv("ifo", "w2", "c2"),
        helper.make_node("Relu", ["c2"], ["r2"]),
        _conv("r2", "w3", "c3"),
        helper.make_node("GlobalAveragePool", ["c3"], ["g"]),
        helper.make_node("Flatten", ["g"], ["y"]),
    ]
    inits = [_w("wa", 10, 3, 3, 3), _w("wb", 12, 10, 3, 3), _w("w2", 13, 12, 3, 3), _w("w3", 6, 13, 3, 3)]
    inits.append(numpy_helper.from_array(np.array(0, np.float32), "zero"))
    graph = helper.make_graph(
        nodes,
        "if_sizes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _plugin_model(path: Path) -> Path:
    """c1 → a plugin op (a custom domain: channels and size unknown) → c2 → c3."""
    nodes = [
        _conv("x", "w1", "c1"),
        helper.make_node("MyPlugin", ["c1"], ["p"], "plugin", domain="custom.trt"),
        _conv("p", "w2", "c2"),
        helper.make_node("Relu", ["c2"], ["r2"]),
        _conv("r2", "w3", "y"),
    ]
    graph = helper.make_graph(
        nodes,
        "plugin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 15, 15])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 15, 15])],
        [_w("w1", 13, 3, 3, 3), _w("w2", 11, 13, 3, 3), _w("w3", 6, 11, 3, 3)],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom.trt", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    return path


def test_analyze_says_why_each_conv_is_unpriced(monkeypatch, capsys, tmp_path: Path) -> None:
    """They were "not 2-D" (an unknown input size), or in neither list (untraced input channels)."""
    code, out, err = run_cli(
        monkeypatch, capsys, "analyze", str(_if_model(tmp_path / "if.onnx")), "--target", "orin-nano-8gb"
    )
    assert code == 0, err
    assert (
        "2 conv(s) the wave model does not price and the table leaves out (input size unknown: c2, c3)" in out
    )
    model = str(_plugin_model(tmp_path / "plugin.onnx"))
    code, out, err = run_cli(monkeypatch, capsys, "analyze", model, "--target", "orin-nano-8gb", "--json")
    assert code == 0, err
    assert json.loads(out)["waves"]["unpriced"] == [
        {"name": "c2", "reason": "input channels not traced"},
        {"name": "y", "reason": "input size unknown"},
    ]


def test_a_prediction_keeps_the_groups_of_unpriced_convs(monkeypatch, capsys, tmp_path: Path) -> None:
    """`optimize -b model` padded c2 13 → 16 on a prediction that left out both convs it touches
    ("rounding up … was the fastest found", every plan predicted alike). It keeps such a group at
    its width and says so; the priced group is still searched."""
    out = tmp_path / "run"
    code, text, err = run_cli(
        monkeypatch,
        capsys,
        "optimize",
        str(_if_model(tmp_path / "if.onnx")),
        "-t",
        "orin-nano-8gb",
        "-b",
        "model",
        "-o",
        str(out),
    )
    assert code == 0, err
    said = " ".join(text.split())
    assert (
        "notice: kept 1 group(s) (c2) at the input's widths: the wave model prices none of their convs, "
        "2 conv(s) the wave model cannot shape (input size unknown: c2, c3)" in said
    )
    report = json.loads((out / "report.json").read_text())
    assert report["unpriced_notice"].startswith("kept 1 group(s) (c2)")
    assert f"- notice: {report['unpriced_notice']}" in (out / "report.md").read_text()
    assert "c2" not in json.loads((out / "plan.json").read_text())["widths"]
    assert [g["id"] for g in report["groups"]] == ["cA"]


def test_a_prediction_that_prices_no_free_group_is_refused(monkeypatch, capsys, tmp_path: Path) -> None:
    model = str(_plugin_model(tmp_path / "plugin.onnx"))
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "optimize",
        model,
        "-t",
        "orin-nano-8gb",
        "-b",
        "model",
        "-o",
        str(tmp_path / "run"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the wave model prices none of the convs of its 1 group(s) (c2): 2 conv(s)" in err
    assert not (tmp_path / "run").exists()
