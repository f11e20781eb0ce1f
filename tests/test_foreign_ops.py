"""Ops of another domain (onnxruntime's FusedConv in a file its graph optimizer saved) have no rule:
they freeze what they touch, and analyze and optimize say so, naming them and what to do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import helper
from test_coupling import Net

from deployopt.coupling import foreign_ops_note


def fused_model(tmp_path: Path) -> Path:
    """Conv → com.microsoft FusedConv ×2 → Conv, as onnxruntime's optimizer leaves a ResNet: every
    group touches a FusedConv."""
    n = Net()
    a = n.conv("x", 12)
    x = a
    for k in range(2):
        w = n.init(f"f{k}.w", n.rng.standard_normal((12, 12, 1, 1)))
        node = helper.make_node("FusedConv", [x, w], [f"fused{k}"], name=f"fused{k}", domain="com.microsoft")
        node.attribute.append(helper.make_attribute("activation", "Relu"))
        n.nodes.append(node)
        n.dims[f"fused{k}"] = n.dims[a]
        x = f"fused{k}"
    model = n.build(n.conv(x, 4), domains=("com.microsoft",))
    path = tmp_path / "ortopt.onnx"
    onnx.save(model, str(path))
    return path


def test_the_note_names_each_domain_and_op() -> None:
    n = Net()
    n.nodes.append(helper.make_node("Foo", ["x"], ["foo"], name="foo", domain="com.example"))
    n.dims["foo"] = n.dims["x"]
    model = n.build(n.conv("foo", 4), domains=("com.example",))
    assert foreign_ops_note(model) == (
        "1 op(s) outside the ONNX domain (com.example: Foo) have no channel rule and freeze every group "
        "they touch"
    )
    plain = Net()
    assert foreign_ops_note(plain.build(plain.conv("x", 4))) is None


def test_analyze_and_optimize_say_the_fused_ops_froze_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """optimize said only "no channel group is free to change", and analyze blamed what followed
    the fused ops; both now name them and say to give the model as exported."""
    path = fused_model(tmp_path)
    note = (
        "2 op(s) outside the ONNX domain (com.microsoft: FusedConv ×2) have no channel rule and freeze "
        "every group they touch (a file onnxruntime's graph optimizer saved? give deployopt the model "
        "as exported)"
    )
    code, out, err = run_cli(monkeypatch, capsys, "analyze", str(path))
    assert code == 0, err
    assert f"note: {note}" in out
    code, out, err = run_cli(
        monkeypatch, capsys, "optimize", str(path), "--target", "orin-nano-8gb", "-o", str(tmp_path / "out")
    )
    assert (
        code == 2
        and err == f"error: {path}: no channel group is free to change; nothing to optimize; {note}\n"
    )
    assert not (tmp_path / "out").exists()


def test_contrib_quantize_ops_get_their_own_advice() -> None:
    """onnxruntime's quantizer with use_qdq_contrib_ops=True writes com.microsoft Q/DQ: that file is
    as exported, so "give the model as exported" would be wrong advice."""
    n = Net()
    scale = n.init("scale", 0.1)
    zero = "zero"
    n.inits.append(onnx.numpy_helper.from_array(np.array(0, np.int8), zero))
    for op, src, dst in (("QuantizeLinear", "x", "q"), ("DequantizeLinear", "q", "dq")):
        n.nodes.append(helper.make_node(op, [src, scale, zero], [dst], name=dst, domain="com.microsoft"))
        n.dims[dst] = n.dims["x"]
    model = n.build(n.conv("dq", 4), domains=("com.microsoft",))
    assert foreign_ops_note(model) == (
        "2 op(s) outside the ONNX domain (com.microsoft: DequantizeLinear, QuantizeLinear) have no channel "
        "rule and freeze every group they touch (quantize with the standard-domain Q/DQ: onnxruntime's "
        "use_qdq_contrib_ops=False)"
    )
