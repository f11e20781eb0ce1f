"""Plans as users write them (a bug bash of `apply --plan`): malformed JSON the parser raises other
errors for, a misspelled key, one group named twice, and widths whose growth is outside the convs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"


def apply(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, model: Path, plan: Path, out: Path
) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, "apply", str(model), "--plan", str(plan), "-o", str(out))


@pytest.mark.parametrize(
    "text",
    [
        '{"widths": {"stem.conv": 1' + "0" * 5000 + "}}",  # past Python's 4300-digit int limit
        "[" * 100_000,  # deeper than the parser recurses
    ],
    ids=["5000-digit width", "deep nesting"],
)
def test_malformed_json_is_one_line(monkeypatch, capsys, tmp_path: Path, text: str) -> None:
    """Both were a 54-line traceback, exit 1 (ValueError, RecursionError): only JSONDecodeError was
    caught."""
    plan = tmp_path / "p.json"
    plan.write_text(text)
    code, _, err = apply(monkeypatch, capsys, EXAMPLE, plan, tmp_path / "o.onnx")
    assert code == 2 and err.startswith(f"error: {plan}: not valid JSON (") and err.count("\n") == 1, err
    assert not (tmp_path / "o.onnx").exists()


def test_an_unknown_key_is_refused(monkeypatch, capsys, tmp_path: Path) -> None:
    """`"kept"` for `"keep"` was dropped in silence and the trim re-ranked by filter L1."""
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"widths": {"stem.conv": 12}, "kept": {"stem.conv": list(range(12))}}))
    code, _, err = apply(monkeypatch, capsys, EXAMPLE, plan, tmp_path / "o.onnx")
    assert code == 2 and "unknown key 'kept'" in err and err.count("\n") == 1, err
    assert not (tmp_path / "o.onnx").exists()


def test_a_group_named_twice_is_counted_once(monkeypatch, capsys, tmp_path: Path) -> None:
    """`stem.conv` and `layer1.0.conv2.conv` name one group: "1 planned group(s) already at their
    width" was said of a plan that changed its only group."""
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"widths": {"stem.conv": 24, "layer1.0.conv2.conv": 24}}))
    code, out, err = apply(monkeypatch, capsys, EXAMPLE, plan, tmp_path / "o.onnx")
    assert code == 0, err
    said = " ".join(out.split())
    assert "(1 group(s) changed)" in said and "already at their width" not in said, said


def test_a_classifier_over_a_flattened_map_counts_in_the_size_check(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """Conv 8→12, Flatten of 12×16×16, Gemm 3072×10: a width of 220 000 grows the Gemm's weight to
    8.4 GB; only conv weights were counted, and it ran 16 s at 7.2 GB to fail as an internal error."""
    r = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(r.standard_normal((12, 8, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(r.standard_normal((3072, 10)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="c1", pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
        helper.make_node("Flatten", ["r1"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "w2"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "fcnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, plan = tmp_path / "fcnet.onnx", tmp_path / "p.json"
    onnx.save(model, path)
    plan.write_text(json.dumps({"widths": {"c1": 220_000}}))
    code, _, err = apply(monkeypatch, capsys, path, plan, tmp_path / "o.onnx")
    assert code == 2 and "the edited model would be about" in err and "smaller widths" in err, err
    assert not (tmp_path / "o.onnx").exists()
    plan.write_text(json.dumps({"widths": {"c1": 16}}))  # a plain pad still goes through
    code, _, err = apply(monkeypatch, capsys, path, plan, tmp_path / "o.onnx")
    assert code == 0, err


def test_a_width_past_an_int32_dim_is_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    """A 310-digit width (under JSON's 4300-digit limit) overflowed the size check's float: a
    traceback; `apply_plan` from Python likewise."""
    from deployopt.errors import PlanError
    from deployopt.model import load_model
    from deployopt.surgery import apply_plan

    plan = tmp_path / "p.json"
    plan.write_text('{"widths": {"stem.conv": 1' + "0" * 310 + "}}")
    code, _, err = apply(monkeypatch, capsys, EXAMPLE, plan, tmp_path / "o.onnx")
    assert code == 2 and "311 digits long; at most 2147483647" in err and err.count("\n") == 1, err
    with pytest.raises(PlanError, match="311 digits long"):
        apply_plan(load_model(EXAMPLE).model, {"stem.conv": 10**310})


def test_the_size_check_counts_a_qdq_convs_weight_once() -> None:
    """A QDQ conv reads its weight through a DequantizeLinear: the constants' count did not know it
    as a conv weight, so the conv loop and it both counted it (649 152 bytes over the scales, for
    layer3's group of the Model Optimizer ResNet56 grown 24 → 192; the scales and biases are 26 880)."""
    from deployopt import surgery
    from deployopt.coupling import analyze
    from deployopt.model import load_model

    model = load_model(Path(__file__).parent / "data" / "modelopt_int8_resnet56.onnx").model
    analysis = analyze(model)
    assert analysis.state is not None
    inits = {t.name: t for t in model.graph.initializer}
    nodes = dict(zip(analysis.state.node_names, model.graph.node))
    gid = analysis.group("layer3.0.downsample.conv").id
    growth = surgery._other_constants_growth(analysis, inits, nodes, {gid: 192})
    assert 0 < growth < 50_000, growth
