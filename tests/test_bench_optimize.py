"""benchmarks/bench_optimize.py's --onnx cases end to end on the wave-model backend (no GPU): the
JSON shape summarize_optimize.py reads, resuming, and the one-line refusals before any device time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest
from scripts import load_script

from deployopt import zoo

bench = load_script("benchmarks/bench_optimize.py", "bench_optimize")
so = load_script("benchmarks/summarize_optimize.py", "summarize_optimize")

TINY = ["--sms", "8", "--backend", "model", "--max-evals", "2", "--runs", "2", "--warmup", "0"]
TINY += ["--rounds", "1", "--sweep-runs", "1", "--no-fidelity"]
RECORD_KEYS = {"verdict", "ratio", "p_value", "size_uncertain", "cis_us"}


def _main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["bench_optimize.py", *TINY, *args])
    return bench.main()


def test_onnx_case_runs_records_its_input_and_resumes(tmp_path: Path, monkeypatch, capsys) -> None:
    model = tmp_path / "mb.onnx"
    onnx.save(zoo.mobilenet_like(batch=2), str(model))
    out, work = tmp_path / "r.json", tmp_path / "work"
    assert _main(monkeypatch, "--onnx", f"mb={model}", "--workdir", str(work), "--out", str(out)) == 0
    data = json.loads(out.read_text())
    assert list(data["cases"]) == ["onnx:mb"] and data["incomplete"] == []
    case = data["cases"]["onnx:mb"]
    assert (case["model"], case["name"], case["batch"], case["sms"]) == ("onnx", "mb", 2, 8)
    assert case["input_shapes"] == {"input": [2, 3, 32, 32]} and len(case["sha256"]) == 64
    assert set(case["final"]) == {"input", "round_up_8", "deployopt_lossless", "deployopt_trim"}
    assert set(case["final"]["deployopt_trim"]) >= {"median_us", "vs_input", "vs_round_up_8"}
    assert case["lossless"]["evaluations"] <= 2 and "wall_s" in case["trim"]
    (row,) = so.published_rows(so.load(out), out.name, "")
    assert row.case == "onnx:mb" and row.batch == 2
    assert _main(monkeypatch, "--onnx", f"mb={model}", "--workdir", str(work), "--out", str(out)) == 0
    assert "onnx:mb: done before, skipped" in capsys.readouterr().out
    # the same NAME for another file: refused before any run, the folder's journals are another model's
    other = tmp_path / "other.onnx"
    onnx.save(zoo.mobilenet_like(batch=1), str(other))
    out.unlink()
    with pytest.raises(SystemExit, match="holds runs of another file"):
        _main(monkeypatch, "--onnx", f"mb={other}", "--workdir", str(work), "--out", str(out))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--onnx", "mb"], "expected NAME=PATH"),
        (["--onnx", "a/b=x.onnx"], "expected NAME=PATH"),
        (["--onnx", "mb=missing.onnx"], "no such file missing.onnx"),
        (["--onnx", "mb={dyn}"], "has shape batchx3x32x32; export it with a fixed batch"),
        (["--onnx", "mb={static}", "--onnx", "mb={static}"], "NAME 'mb' given twice"),
        (["--models", "resnet18"], "--models: unknown resnet18"),
        (["--models", ""], "nothing to run"),
        (["--onnx", "mb={static}", "--pruned-only"], "--pruned-only needs --prune-seeds"),
        (["--models", "vgg16", "--prune-seeds", "0", "--pruned-only"], "and --onnx or ghostnet"),
    ],
)
def test_bad_arguments_are_one_line(
    args: list[str], message: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    dyn, static = tmp_path / "dyn.onnx", tmp_path / "static.onnx"
    onnx.save(zoo.with_dynamic_batch(zoo.mobilenet_like()), str(dyn))
    onnx.save(zoo.mobilenet_like(), str(static))
    args = [a.format(dyn=dyn, static=static) for a in args]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        _main(monkeypatch, *args, "--out", str(tmp_path / "r.json"))
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_case_ids_and_order() -> None:
    args = bench.argparse.Namespace(
        model_list=["ghostnet", "vgg16", "mobilenetv2", "yolo_detect"],
        seeds="0,2",
        onnx_cases=[("regnet", Path("r.onnx"))],
        prune_seed_list=[1],
    )
    assert [cid for cid, _ in bench.case_list(args)] == [
        "ghostnet", "vgg16_seed0", "vgg16_seed2", "mobilenetv2", "yolo_detect_seed0", "yolo_detect_seed2",
        "onnx:regnet", "ghostnet_pruned_seed1", "onnx:regnet_pruned_seed1",
    ]  # fmt: skip
    args.pruned_only = True  # ghostnet's and the --onnx model's own cases go, their pruned seeds stay
    assert [cid for cid, _ in bench.case_list(args)] == [
        "vgg16_seed0", "vgg16_seed2", "mobilenetv2", "yolo_detect_seed0", "yolo_detect_seed2",
        "ghostnet_pruned_seed1", "onnx:regnet_pruned_seed1",
    ]  # fmt: skip


def test_pruned_onnx_case_prunes_every_free_group_and_compares_to_it(tmp_path: Path, monkeypatch) -> None:
    """--prune-seeds: the --onnx model irregularly pruned (random_prune of every free group), then
    unpruned / pruned / round-up-to-8 / lossless / trim with the pruned model as the reference."""
    model = tmp_path / "mb.onnx"
    onnx.save(zoo.mobilenet_like(batch=2), str(model))
    out, work = tmp_path / "r.json", tmp_path / "work"
    args = ("--onnx", f"mb={model}", "--prune-seeds", "3", "--workdir", str(work), "--out", str(out))
    assert _main(monkeypatch, *args) == 0
    case = json.loads(out.read_text())["cases"]["onnx:mb_pruned_seed3"]
    assert (case["model"], case["seed"], case["batch"]) == ("onnx:mb_pruned", 3, 2)
    assert set(case["final"]) == {"unpruned", "pruned", "round_up_8", "deployopt_lossless", "deployopt_trim"}
    assert set(case["final"]["deployopt_trim"]) >= {"vs_pruned", "vs_round_up_8"}
    from deployopt.coupling import analyze
    from deployopt.model import load_model
    from deployopt.zoo.pruning import random_prune

    free = {g.id: g.width for g in analyze(load_model(model).model).free_groups()}
    assert [case["pruned_widths"][g] for g in free] == random_prune(list(free.values()), seed=3)
    pruned = load_model(work / "sms8" / "onnx_mb_pruned_seed3" / "pruned.onnx").model
    assert {g.id: g.width for g in analyze(pruned).free_groups()} == case["pruned_widths"]


def test_ab_traffic_times_the_conv_only_answer_beside(tmp_path: Path, monkeypatch) -> None:
    """--ab-traffic: a second lossless run with the conv-only table, its model in the final rounds and
    compared with the traffic-priced answer; each run records its traffic fit."""
    model = tmp_path / "mb.onnx"
    onnx.save(zoo.mobilenet_like(batch=2), str(model))
    out, work = tmp_path / "r.json", tmp_path / "work"
    args = ["--onnx", f"mb={model}", "--workdir", str(work), "--out", str(out), "--ab-traffic"]
    assert _main(monkeypatch, *args) == 0
    case = json.loads(out.read_text())["cases"]["onnx:mb"]
    assert "deployopt_lossless_conv_only" in case["final"]
    assert set(case["traffic_ab"]) == RECORD_KEYS
    assert case["lossless"]["traffic"]["enabled"] is True
    assert case["lossless_conv_only"]["traffic"]["enabled"] is False
    assert "bytes_per_channel" not in case["lossless"]["traffic"]


def test_ab_traffic_trim_also_times_trim_with_the_conv_only_table(tmp_path: Path, monkeypatch) -> None:
    """--ab-traffic-trim (implies --ab-traffic): trim is searched a second time with the conv-only
    table, its answer timed beside the traffic-priced trim and compared with it, as lossless is."""
    model = tmp_path / "mb.onnx"
    onnx.save(zoo.mobilenet_like(batch=2), str(model))
    out, work = tmp_path / "r.json", tmp_path / "work"
    args = ["--onnx", f"mb={model}", "--workdir", str(work), "--out", str(out), "--ab-traffic-trim"]
    assert _main(monkeypatch, *args) == 0
    case = json.loads(out.read_text())["cases"]["onnx:mb"]
    assert {"deployopt_lossless_conv_only", "deployopt_trim_conv_only"} <= set(case["final"])
    assert set(case["traffic_ab"]) == set(case["traffic_ab_trim"]) == RECORD_KEYS
    assert case["trim"]["traffic"]["enabled"] is True
    assert case["trim_conv_only"]["traffic"]["enabled"] is False
    assert (work / "sms8" / "onnx_mb" / "trim_conv_only" / "model.onnx").exists()


def test_a_comparison_record_keeps_size_uncertain_and_the_cis() -> None:
    """The records said "faster, ratio 0.16" where the two medians' CIs overlapped (bimodal samples,
    each mode 20 % faster): the record now keeps the flag and both CIs, as report.json does."""
    from test_timing_uncertain import bug_bash_pair

    from deployopt.timing import Timing, compare

    a, b = bug_bash_pair()
    rec = bench.comparison_record(compare(a, b))
    assert rec["verdict"] == "faster" and rec["size_uncertain"] is True
    assert rec["cis_us"] == [list(a.ci95_us), list(b.ci95_us)]
    json.dumps(rec)  # the record is written as JSON
    plain = bench.comparison_record(compare(Timing("ort", [100.0] * 20), Timing("ort", [50.0] * 20)))
    assert plain["size_uncertain"] is False and plain["cis_us"] is None
    row = bench.timing_table({"input": a, "round_up_8": b}, "input")["round_up_8"]
    assert row["vs_input"] == rec
