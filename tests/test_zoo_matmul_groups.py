"""`optimize --backend model` keeps the groups no conv touches (MatMul/Gemm widths) at their
widths: every width of them was predicted alike, and the tie rule padded them ("+0.0 %" vs input:
a ConvNeXt MLP 100 → 104, MobileNetV3's classifier 1020 → 1024), with no notice (bug bash)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(11)
NOTICE = (
    "the wave model prices convs only; 1 group(s) (fc1) read only by MatMul/Gemm kept at the input's "
    "widths; measure (--backend torch, ort, tensorrt or trtexec) to size them"
)


def _w(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def _model(path: Path, conv_group_frozen: bool = False) -> Path:
    """c1 (3 → 10) → Relu → c2 (10 → 12) → pooled → Gemm fc1 (12 → 100) → Relu → Gemm fc2
    (100 → 5): no conv reads or writes fc1's 100 channels. `conv_group_frozen`: c1 and c2 are
    graph outputs too, so only fc1 is free."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], "c1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], "relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], "c2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"], "gap"),
        helper.make_node("Flatten", ["g"], ["f"], "flat"),
        helper.make_node("Gemm", ["f", "wf1", "bf1"], ["h"], "fc1", transB=1),
        helper.make_node("Relu", ["h"], ["rh"], "relu_h"),
        helper.make_node("Gemm", ["rh", "wf2", "bf2"], ["y"], "fc2", transB=1),
    ]
    inits = [_w("w1", 10, 3, 3, 3), _w("w2", 12, 10, 3, 3), _w("wf1", 100, 12), _w("bf1", 100)]
    inits += [_w("wf2", 5, 100), _w("bf2", 5)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])]
    if conv_group_frozen:  # a graph output's channels cannot change
        outputs += [
            helper.make_tensor_value_info(c, TensorProto.FLOAT, [1, k, 16, 16])
            for c, k in (("c1", 10), ("c2", 12))
        ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    graph = helper.make_graph(nodes, "mlp_head", [x], outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _optimize(monkeypatch, capsys, model: Path, out: Path, backend: str = "model") -> tuple[int, str, str]:
    return run_cli(
        monkeypatch, capsys, "optimize", str(model), "-t", "orin-nano-8gb", "-b", backend, "-o", str(out)
    )


def test_a_prediction_keeps_groups_no_conv_touches(monkeypatch, capsys, tmp_path: Path) -> None:
    """fc1 was searched with the convs, every width of it predicted alike, and padded 100 → 104."""
    out = tmp_path / "run"
    code, text, err = _optimize(monkeypatch, capsys, _model(tmp_path / "m.onnx"), out)
    assert code == 0, err
    assert f"notice: {NOTICE}" in " ".join(text.split())
    report = json.loads((out / "report.json").read_text())
    assert report["unpriced_notice"] == NOTICE
    assert f"- notice: {NOTICE}" in (out / "report.md").read_text()
    # the convs' groups are still searched; fc1 is neither searched nor in the plan
    assert sorted(g["id"] for g in report["groups"]) == ["c1", "c2"]
    assert "fc1" not in json.loads((out / "plan.json").read_text())["widths"]


def test_a_prediction_with_only_matmul_groups_free_is_refused(monkeypatch, capsys, tmp_path: Path) -> None:
    """Every free group outside the convs: nothing the prediction could rank, so it says to measure
    (it padded fc1 100 → 104 for "+0.0 %")."""
    out = tmp_path / "run"
    code, _, err = _optimize(monkeypatch, capsys, _model(tmp_path / "m.onnx", conv_group_frozen=True), out)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert (
        "the wave model prices convs only, and its 1 group(s) (fc1) are read only by MatMul/Gemm; measure "
        "instead (--backend torch, ort, tensorrt or trtexec)" in err
    )
    assert not out.exists()


def test_a_measured_run_still_sizes_matmul_groups(monkeypatch, capsys, tmp_path: Path) -> None:
    """Measured end to end, a Gemm width is timed: it stays in the search, with no notice."""
    out = tmp_path / "run"
    model = _model(tmp_path / "m.onnx")
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "optimize",
        str(model),
        "-t",
        "orin-nano-8gb",
        "-b",
        "ort",
        "--runs",
        "5",
        "--warmup",
        "1",
        "--max-evals",
        "3",
        "-o",
        str(out),
    )
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert "fc1" in [g["id"] for g in report["groups"]]
    assert report["unpriced_notice"] is None
