"""optimize's report.md / report.json read as `analyze`, the terminal and `verify` do (bug bash on the
deliverables, /tmp/bb_deliver/findings 01–04):

1. a grouped conv's group was shown per conv group with no ×g ("6 → 8" for a 30-channel layer that
   became 40), and report.json's groups had no conv-group count to turn a width into channels;
2. the confirmation's "pooled gain" was positive = faster where every other change is negative =
   faster ("pooled gain -12.05 %" meant 12 % slower beside "-76.4 % … (faster)");
3. the staircase pictures' alt text was their file path, their facts pixels only;
4. the Fidelity section printed top-1 agreement as a fraction (0.250000) beside thresholds in
   percent, and a failed row-scale check had no value line.

Backend `model` runs (seconds) on small ONNX graphs built here, and render_markdown on their reports.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt.report import confirmation_line, measured_comparison_row, render_markdown, unconfirmed_plan
from deployopt.timing import Timing


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _model(path: Path, convs: list[tuple[str, int, int, int, int]], size: int = 32) -> Path:
    """Conv-Relu layers (name, in channels, out channels, kernel, conv groups) on 1×C×size×size,
    then GlobalAveragePool, Flatten and a Gemm to 10 classes (so the last conv's group is free)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i, (name, c, k, kernel, groups) in enumerate(convs):
        w = (rng.standard_normal((k, c // groups, kernel, kernel)) * 0.2).astype(np.float32)
        inits += [
            numpy_helper.from_array(w, f"W{i}"),
            numpy_helper.from_array(np.zeros(k, np.float32), f"B{i}"),
        ]
        pads = [kernel // 2] * 4
        nodes.append(
            helper.make_node(
                "Conv",
                [prev, f"W{i}", f"B{i}"],
                [f"o{i}"],
                name=name,
                pads=pads,
                group=groups,
                kernel_shape=[kernel, kernel],
            )
        )
        nodes.append(helper.make_node("Relu", [f"o{i}"], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    k = convs[-1][2]
    fc = (rng.standard_normal((10, k)) * 0.2).astype(np.float32)
    inits += [numpy_helper.from_array(fc, "FC"), numpy_helper.from_array(np.zeros(10, np.float32), "FCB")]
    nodes += [
        helper.make_node("GlobalAveragePool", [prev], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flat"),
        helper.make_node("Gemm", ["flat", "FC", "FCB"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, convs[0][1], size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _optimize(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, model: Path, out: Path, *extra: str
) -> dict[str, Any]:
    args = ["optimize", str(model), "--target", "orin-nano-8gb", "--backend", "model", "-o", str(out), *extra]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    return json.loads((out / "report.json").read_text())


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}")[1].split("\n## ")[0]


# --- 1: grouped convs' widths as analyze gives them, and the repeat in report.json ------------------------


GROUPED = [("a", 3, 30, 3, 1), ("b", 30, 30, 3, 5), ("c", 30, 21, 1, 1), ("d", 21, 45, 3, 3)]


def _conv_out_channels(path: Path) -> dict[str, int]:
    m = onnx.load(str(path))
    inits = {i.name: i for i in m.graph.initializer}
    return {n.name: inits[n.input[1]].dims[0] for n in m.graph.node if n.op_type == "Conv"}


def test_grouped_widths_say_the_conv_groups_as_analyze_does(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    model = _model(tmp_path / "grouped.onnx", GROUPED)
    report = _optimize(monkeypatch, capsys, model, tmp_path / "out")
    groups = {g["id"]: g for g in report["groups"]}
    assert {gid: g["repeat"] for gid, g in groups.items()} == {"a": 5, "b": 5, "c": 3, "d": 3}
    # a program turns each width back into channels: the model's and the per-layer table's
    before, after = _conv_out_channels(model), _conv_out_channels(tmp_path / "out" / "model.onnx")
    for gid, g in groups.items():
        assert g["original"] * g["repeat"] == before[gid]
        assert g["best"] * g["repeat"] == after[gid]
    # report.md's Widths table in analyze's notation: "6 ×5" where analyze says "6 ×5"
    code, said, err = run_cli(monkeypatch, capsys, "analyze", str(model))
    assert code == 0, err
    shown = dict(re.findall(r"│ ([abcd]) +│ +(\d+ ×\d+) +│", said))
    assert shown == {"a": "6 ×5", "b": "6 ×5", "c": "7 ×3", "d": "15 ×3"}
    md = (tmp_path / "out" / "report.md").read_text()
    widths = _section(md, "Widths")
    for gid, g in groups.items():
        r = g["repeat"]
        row = f"| {gid} | {shown[gid]} | 0 | {g['round_up_8']} ×{r} | **{g['best']} ×{r}** | "
        assert row in widths, widths
    assert "6 ×5 is 6 channels in each of 5 conv groups, 30 in all" in widths


def test_a_model_without_grouped_convs_keeps_bare_widths(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """Guard: repeat 1 everywhere, no ×, no note (a plain model's table reads as before)."""
    model = _model(tmp_path / "plain.onnx", [("a", 3, 30, 3, 1), ("b", 30, 21, 3, 1)])
    report = _optimize(monkeypatch, capsys, model, tmp_path / "out")
    assert [g["repeat"] for g in report["groups"]] == [1, 1]
    widths = _section((tmp_path / "out" / "report.md").read_text(), "Widths")
    assert "×" not in widths and "| a | 30 | 0 | 32 |" in widths


# --- 2: one sign convention: negative = faster, and the two estimates named ------------------------------


def _confirmation(gain: float, kept: bool) -> dict[str, Any]:
    return {
        "baseline": "input",
        "rounds": 2,
        "best_round_medians_us": [13756.2, 24523.1],
        "baseline_round_medians_us": [15100.2, 21744.5],
        "search_build_medians_us": {"best": 2972.8, "baseline": 12622.9},
        "pooled_gain": gain,
        "kept": kept,
    }


def test_the_pooled_gain_prints_as_a_change_negative_faster() -> None:
    """pooled_gain -0.1205 (12 % slower) was printed "pooled gain -12.05 %" beside "-76.4 % (faster)"."""
    slower = confirmation_line(_confirmation(-0.1205, False))
    assert "pooled medians +12.05 % (slower)" in slower and "-12.05" not in slower
    faster = confirmation_line(_confirmation(0.2708, True))
    assert "pooled medians -27.08 % (faster)" in faster and "+27.08" not in faster
    assert "pooled gain" not in slower + faster
    said = unconfirmed_plan(_confirmation(-0.1205, False), 0.005, "solver #1", None)
    assert "pooled medians +12.05 % (slower, not the 0.5 % faster the min effect asks)" in said
    small = unconfirmed_plan(_confirmation(0.003, False), 0.005, "solver #1", None)
    assert "pooled medians -0.30 % (faster, by less than the 0.5 % min effect)" in small
    assert "pooled medians +0.00 % (no change" in confirmation_line(_confirmation(-1e-7, False))


def _builds(*medians: float) -> Timing:
    rng = np.random.default_rng(1)
    return Timing.from_replicates(
        [Timing("ort", list(m * (1 + 0.01 * rng.standard_normal(20)))) for m in medians]
    )


def test_a_build_level_change_names_its_estimate_and_keeps_its_json() -> None:
    """The t-test row said "ratio 0.311" (a ratio, not a change) with no word on what it is the ratio of."""
    ref, answer = _builds(100.0, 103.0), _builds(70.0, 90.0)
    row = measured_comparison_row(ref, answer, 0.01, 0.005, "the input")
    change = f"{100 * (row['ratio'] - 1):+.1f}% between the build medians' geometric means"
    assert change in row["describe"] and "(ratio " not in row["describe"]
    assert row["ratio"] == pytest.approx(np.sqrt(70.0 * 90.0 / (100.0 * 103.0)), rel=0.02)  # as before
    assert set(row) >= {"verdict", "ratio", "p_value", "change_ci_pct", "test", "builds"}


def test_report_md_keys_the_two_estimates(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    model = _model(tmp_path / "plain.onnx", [("a", 3, 30, 3, 1), ("b", 30, 21, 3, 1)])
    report = _optimize(monkeypatch, capsys, model, tmp_path / "out")
    report["confirmations"] = [_confirmation(-0.1205, False)]
    latency = _section(render_markdown(report), "Latency")
    assert "pooled medians +12.05 % (slower)" in latency
    assert (
        "- how to read the changes: every change is a plan against its baseline, negative = faster" in latency
    )
    assert '"pooled medians" (a confirmation)' in latency


# --- 3: staircase pictures say in words what they show ------------------------------------------------------


def test_staircase_alt_text_and_caption_give_the_widths_and_their_us(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """The wave model moves conv0 off 130 and off its round-up 136: one picture."""
    model = _model(tmp_path / "m.onnx", [("conv0", 16, 130, 3, 1), ("second", 130, 16, 3, 1)], size=56)
    out = tmp_path / "out"
    report = _optimize(monkeypatch, capsys, model, out, "--mode", "trim", "--no-fidelity-gate")
    (fact,) = [f for f in report["staircase_facts"] if f["group"] == "conv0"]
    png = fact["file"]
    assert png in report["staircases"] and (out / png).is_file()
    (g,) = [g for g in report["groups"] if g["id"] == "conv0"]
    (row,) = [r for r in report["layers"] if r["conv"] == "conv0"]
    assert fact["file"] == png and fact["group"] == "conv0" and fact["conv"] == "conv0"
    us = {k: fact["marks"][k]["us"] for k in ("original", "round_up_8", "chosen")}
    # the plotted conv's table values at the three widths: the per-layer table's of the same report
    assert us == pytest.approx(
        {
            "original": row["table_before_us"],
            "round_up_8": row["table_round_up_8_us"],
            "chosen": row["table_after_us"],
        }
    )
    at = (
        f"original 130 ({us['original']:.1f} µs), round-up-to-8 136 ({us['round_up_8']:.1f} µs), "
        f"chosen {g['best']} ({us['chosen']:.1f} µs)"
    )
    section = _section((out / "report.md").read_text(), "Staircases behind the decisions")
    images = re.findall(r"!\[(.*)\]\((.*)\)", section)
    assert len(images) == len(report["staircases"])
    held = "the other groups at their chosen widths"
    assert (f"Staircase of conv0, output channels: {at}, predicted, {held}", png) in images
    assert all(alt != path for alt, path in images)
    assert "Shown: conv0, output channels over widths " in section
    assert f": {at}, {held} (predicted by the wave model, not measured)." in section


def test_an_old_report_without_facts_still_renders() -> None:
    """Guard: a report.json written before `staircase_facts` renders its pictures by path."""
    from deployopt.report import _staircase_lines

    lines = _staircase_lines({"staircases": ["staircases/staircase_a[1].png"]})
    assert "![staircases/staircase_a\\[1\\].png](staircases/staircase_a[1].png)" in lines


# --- 4: fidelity figures in the unit the terminal and verify use -----------------------------------------


def test_fidelity_figures_in_percent_and_each_failure_has_its_line(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """The bug bash's run: resnet56 trimmed, random inputs, top-1 25 % and the row scale 158 % off."""
    out = tmp_path
    example = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"
    report = _optimize(monkeypatch, capsys, example, out / "o", "--mode", "trim", "--no-fidelity-gate")
    fid = report["fidelity"]
    assert fid["failures"] and not fid["passed"]
    md = (out / "o" / "report.md").read_text()
    section = _section(md, "Fidelity (onnxruntime, reference = input model)")
    figures = dict(re.findall(r"^- ([a-z1 -]+): (.*)$", section, flags=re.M))
    top1 = f"{100 * fid['top1_agreement']:.2f}%"
    assert figures["top-1 agreement"] == f"{top1} (≥ 99.00%: FAIL)"
    assert re.search(rf"top-1 agreement {re.escape(top1)} < 99\.00%", section)  # the failure line's figure
    assert not re.search(r"agreement: 0\.\d", section)
    scale = f"{100 * fid['scale_change_max']:.2f}%"
    assert figures["row scale change max"] == f"{scale} (≤ {100 * fid['scale_change_limit']:.2f}%: FAIL)"
    assert figures["cosine min"].endswith("(≥ 0.99: FAIL)")
    # every failure names a figure that has its own line
    named = {
        "min cosine": "cosine min",
        "top-1 agreement": "top-1 agreement",
        "row scale": "row scale change max",
    }
    for failure in fid["failures"]:
        (label,) = [v for k, v in named.items() if k in failure]
        assert label in figures
