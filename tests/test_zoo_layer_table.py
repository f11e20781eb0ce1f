"""report.md's per-layer table: each column sums to the evaluation's table µs. A conv whose every
group is frozen is not in the search's table, yet it showed a value wherever a swept conv had its
shape (ShuffleNetV2's branch1 convs: "before" summed to 801.3 µs, evaluation #1 said 747.7)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(5)


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _model(path: Path) -> Path:
    """x (13 ch) → `side` (13 → 13, a graph output: both its groups frozen) and x → c1 (13 → 13,
    free) → c2 (13 → 6): at the input's widths c1 has `side`'s shape, which the sweep prices."""
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    nodes = [
        helper.make_node("Conv", ["x", "ws"], ["side"], "side", **conv),
        helper.make_node("Conv", ["x", "w1"], ["c1"], "c1", **conv),
        helper.make_node("Relu", ["c1"], ["r1"], "relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["y"], "c2", **conv),
    ]
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 16, 16]),
        helper.make_tensor_value_info("side", TensorProto.FLOAT, [1, 13, 16, 16]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 13, 16, 16])
    inits = [_w("ws", 13, 13, 3, 3), _w("w1", 13, 13, 3, 3), _w("w2", 6, 13, 3, 3)]
    graph = helper.make_graph(nodes, "frozen_twin", [x], outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_each_column_sums_to_the_evaluations_table_us(monkeypatch, capsys, tmp_path: Path) -> None:
    out = tmp_path / "run"
    model = str(_model(tmp_path / "m.onnx"))
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", model, "-t", "orin-nano-8gb", "-b", "model", "-o", str(out)
    )
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    rows = {row["conv"]: row for row in report["layers"]}
    assert set(rows) == {"side", "c1", "c2"}
    side = rows["side"]
    assert (side["table_before_us"], side["table_round_up_8_us"], side["table_after_us"]) == (
        None,
        None,
        None,
    )
    assert side["in_table"] is False and rows["c1"]["in_table"] is True
    by_label = {e["label"]: e for e in report["evaluations"]["list"]}
    for column, label in (("table_before_us", "input"), ("table_round_up_8_us", "round-up-to-8")):
        total = sum(row[column] or 0 for row in report["layers"])
        assert total == pytest.approx(by_label[label]["table_us"], rel=1e-9), column
    assert rows["c1"]["table_before_us"] > 0
    md = (out / "report.md").read_text()
    assert "| side | 13×13 | 13×13 | — | — | — |" in md
    assert "1 of 3 convs out of the search's table (—): every group they read or write is frozen" in md
