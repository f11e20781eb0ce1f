"""`deployopt compare` as a user runs it: the table, JSON, exit codes a release pipeline gates on."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path

import onnx
from cli_runner import run_cli
from test_regression import H200_CLI, write_timing

from deployopt.layers import ConvShape, conv_model

AUTOTUNED = str(H200_CLI / "bench_resnet56_autotuned_sm8.json")
HEURISTIC = str(H200_CLI / "bench_resnet56_heuristic_sm8.json")


def test_a_slower_model_exits_1_and_says_so(monkeypatch, capsys) -> None:
    code, out, err = run_cli(monkeypatch, capsys, "compare", AUTOTUNED, HEURISTIC)
    assert code == 1
    row = next(line for line in out.splitlines() if "bench_resnet56_heuristic_sm8" in line)
    assert "1054.2 (1.0, 200)" in row and "1081.2 (11.3, 200)" in row and "+2.6 %" in row
    assert "slower" in row and "cudnn.benchmark True → False" in row
    assert "1 regression in 1 compared" in out and "measured on: baseline torch" in out
    assert err.startswith("warning: bench_resnet56_heuristic_sm8: not like for like")


def test_faster_or_unchanged_exits_0(monkeypatch, capsys, tmp_path: Path) -> None:
    code, out, _ = run_cli(monkeypatch, capsys, "compare", HEURISTIC, AUTOTUNED)
    assert code == 0 and "faster" in out and "0 regressions in 1 compared" in out
    a = write_timing(tmp_path / "a.json", 500.0, {"board": "Orin"}, seed=1)
    b = write_timing(tmp_path / "b.json", 500.0, {"board": "Orin"}, seed=2)
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(a), str(b))
    assert code == 0 and "not significant" in out and err == ""
    assert "measured on: tensorrt, board Orin (both)" in out


def test_a_real_difference_under_min_effect_is_told_apart_from_noise(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """Both read "no change": a real 0.5 % shift (p ~1e-60) under --min-effect 1 %, and a noisy +53 %
    whose p missed alpha. The cell says which; the JSON's verdict is unchanged."""
    a = write_timing(tmp_path / "a.json", 500.0, {"board": "Orin"}, seed=1)
    b = write_timing(tmp_path / "b.json", 502.5, {"board": "Orin"}, seed=2)
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(a), str(b), "-o", str(tmp_path / "c.json"))
    row = next(line for line in out.splitlines() if line.startswith("│ b "))
    assert code == 0 and "+0.5 %" in row and "under min effect" in row
    assert json.loads((tmp_path / "c.json").read_text())["pairs"][0]["verdict"] == "no significant difference"
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(a), str(b), "--min-effect", "0.001")
    assert code == 1 and "slower" in out


def test_measured_on_is_one_line_in_a_log_80_columns_wide(monkeypatch, capsys) -> None:
    """A weekly job's log has no terminal: the `measured on:` line (both sides' setups) was folded
    over three lines there, so grep found a fragment of it."""
    code, out, _ = run_cli(monkeypatch, capsys, "compare", AUTOTUNED, HEURISTIC, columns=80)
    assert code == 1
    where = [ln for ln in out.splitlines() if ln.startswith("measured on: ")]
    assert len(where) == 1 and len(where[0]) > 80 and "; current torch" in where[0]


def test_json_and_output_file(monkeypatch, capsys, tmp_path: Path) -> None:
    dest = tmp_path / "out" / "regression.json"
    dest.parent.mkdir()
    code, out, _ = run_cli(monkeypatch, capsys, "compare", AUTOTUNED, HEURISTIC, "--json", "-o", str(dest))
    assert code == 1
    doc = json.loads(out)
    assert doc == json.loads(dest.read_text())
    assert doc["regressions"] == 1 and doc["rule"]["min_effect"] == 0.02
    pair = doc["pairs"][0]
    recorded = json.loads(Path(HEURISTIC).read_text())
    assert pair["current"]["median_us"] == recorded["median_us"] and pair["current"]["runs"] == 200
    assert pair["verdict"] == "slower" and pair["environment_differences"][-1].startswith(
        "what was timed differs: cudnn.benchmark"
    )
    # each median says what it was measured on, as the table's "measured on" line does
    assert pair["baseline"]["measured_on"] == (
        "torch, GPU NVIDIA H200, device NVIDIA H200, 8 SMs (green context), SMs 8, runtime torch "
        "2.11.0+cu130, cuDNN 91900, cudnn.benchmark True, cuDNN engines timed 10, dtype fp16"
    )
    assert pair["current"]["measured_on"].endswith("cudnn.benchmark False, dtype fp16")
    assert list(dest.parent.iterdir()) == [dest]  # no temp file left beside it


def test_a_report_written_into_the_results_folder_is_not_a_model(monkeypatch, capsys, tmp_path: Path) -> None:
    """`compare baselines/ results/ --strict -o results/compare.json` run again (a CI retry) found its
    own report 'in the current run only' and exited 1; once results/ became the next baseline, the
    report on both sides was read as a broken measurement (exit 2). Reports are left out of pairing."""
    base, cur = tmp_path / "baselines", tmp_path / "results"
    write_timing(base / "m.json", 500.0, seed=1)
    write_timing(cur / "m.json", 500.0, seed=2)
    args = ["compare", str(base), str(cur), "--strict", "-o", str(cur / "compare.json")]
    for _ in range(2):
        code, out, err = run_cli(monkeypatch, capsys, *args)
        assert code == 0 and err == "" and "0 regressions in 1 compared" in out
    (base / "compare.json").write_bytes((cur / "compare.json").read_bytes())  # results promoted
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and err == "" and "0 regressions in 1 compared" in out
    assert [p["name"] for p in json.loads((cur / "compare.json").read_text())["pairs"]] == ["m"]


def test_min_effect_option_and_strict(monkeypatch, capsys, tmp_path: Path) -> None:
    code, _, _ = run_cli(monkeypatch, capsys, "compare", AUTOTUNED, HEURISTIC, "--min-effect", "0.03")
    assert code == 0  # +2.6 % is below a 3 % minimum effect
    code, _, _ = run_cli(
        monkeypatch, capsys, "compare", AUTOTUNED, HEURISTIC, "--min-effect", "0.03", "--strict"
    )
    assert code == 1  # … but the setups differ
    write_timing(tmp_path / "base" / "m.json", 500.0, seed=1)
    write_timing(tmp_path / "cur" / "m.json", 500.0, seed=2)
    write_timing(tmp_path / "cur" / "extra.json", 500.0, seed=3)
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(tmp_path / "base"), str(tmp_path / "cur"))
    assert code == 0 and "note: extra: in the current run only" in err
    code, out, err = run_cli(
        monkeypatch, capsys, "compare", str(tmp_path / "base"), str(tmp_path / "cur"), "--strict"
    )
    # exit 1 under "0 regressions in 1 compared" said nowhere why; the last line now does
    assert code == 1 and "0 regressions in 1 compared" in out
    assert err.strip().splitlines()[-1] == (
        "FAILED (--strict): 1 file(s) without a counterpart, so exit 1 though no model got slower"
    ), err


def test_bad_input_is_one_line_exit_2_and_writes_nothing(monkeypatch, capsys, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    dest = tmp_path / "out.json"
    cases = [
        ([str(tmp_path / "missing.json"), AUTOTUNED], "missing.json: no such file or folder"),
        ([str(corrupt), AUTOTUNED], "is not JSON"),
        ([AUTOTUNED, str(tmp_path)], "two files or two folders"),
        ([AUTOTUNED, HEURISTIC, "--alpha", "0"], "alpha 0"),
        ([AUTOTUNED, HEURISTIC, "--min-effect", "5"], "min effect 5"),
    ]
    for args, message in cases:
        code, out, err = run_cli(monkeypatch, capsys, "compare", *args, "-o", str(dest))
        assert code == 2 and out == "", args
        assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
        assert "Traceback" not in err and not dest.exists()


def test_a_failed_run_removes_the_last_report_a_guard_would_read(monkeypatch, capsys, tmp_path: Path) -> None:
    """Before, exit 2 left last run's report at -o, and `jq '.regressions == 0'` passed on it."""
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    dest = tmp_path / "out.json"
    for args in ([str(corrupt), AUTOTUNED], [AUTOTUNED, HEURISTIC, "--alpha", "0"]):
        code, _, _ = run_cli(monkeypatch, capsys, "compare", AUTOTUNED, AUTOTUNED, "-o", str(dest))
        assert code == 0 and json.loads(dest.read_text())["regressions"] == 0
        code, out, err = run_cli(monkeypatch, capsys, "compare", *args, "-o", str(dest))
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert f"removed {dest}, the last run's report" in err and not dest.exists()
    # through a symlink, the report it points at goes (the link stays, dangling, as writing keeps it)
    real = tmp_path / "real.json"
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert run_cli(monkeypatch, capsys, "compare", AUTOTUNED, AUTOTUNED, "-o", str(link))[0] == 0
    assert real.is_file()
    assert run_cli(monkeypatch, capsys, "compare", str(corrupt), AUTOTUNED, "-o", str(link))[0] == 2
    assert not real.exists() and link.is_symlink()


def test_a_one_sample_baseline_exits_2_without_a_verdict(monkeypatch, capsys, tmp_path: Path) -> None:
    """Before, one sample against the 200 of HEURISTIC was 'slower' (p = 0), exit 1."""
    doc = json.loads(Path(AUTOTUNED).read_text())
    one = tmp_path / "one.json"
    one.write_text(json.dumps({**doc, "samples_us": doc["samples_us"][:1], "runs": 1}))
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(one), HEURISTIC)
    assert code == 2 and out == ""
    assert err == (
        f"error: {one} has 1 sample: one run is not a measurement the Mann-Whitney U test can judge (at "
        "--alpha 0.01 it needs 5 samples per side when both sides are alike); measure more runs\n"
    )
    five = tmp_path / "five.json"
    five.write_text(json.dumps({**doc, "samples_us": doc["samples_us"][:5], "runs": 5}))
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(five), HEURISTIC, "--json")
    assert code == 1  # five samples are enough at alpha 0.01: the regression is still found
    pair = json.loads(out)["pairs"][0]
    assert pair["verdict"] == "slower" and pair["baseline"]["runs"] == 5 and pair["p_value"] < 0.01


def test_a_short_side_is_judged_by_the_exact_smallest_p_of_its_pair(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """Four samples against 200 can reach p < 0.01 (the smallest p for 4 and 200 is ~1e-7), but
    compare refused any side under 5 samples and said the test could never find a difference."""
    doc = json.loads(Path(AUTOTUNED).read_text())
    four = tmp_path / "four.json"
    four.write_text(json.dumps({**doc, "samples_us": doc["samples_us"][:4], "runs": 4}))
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(four), HEURISTIC, "--json")
    assert code == 1  # the regression HEURISTIC is, found from four baseline samples
    pair = json.loads(out)["pairs"][0]
    assert pair["verdict"] == "slower" and pair["baseline"]["runs"] == 4 and pair["p_value"] < 0.01
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(four), str(four))
    assert code == 2 and out == ""  # four against four: the smallest p is 0.029
    assert err == (
        f"error: {four} (4 samples) and {four} (4 samples): the smallest p the Mann-Whitney U test gives "
        "for these counts is 0.029, not below --alpha 0.01, so it could never find a difference (with "
        "equal counts it needs 5 per side); measure more runs\n"
    )


def test_samples_that_are_not_latencies_are_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    doc = json.loads(Path(AUTOTUNED).read_text())
    for i, samples in enumerate([["fast", "slow"], [12.5, float("nan")], [12.5, -3.0], [True, 1.0], "12"]):
        bad = tmp_path / f"bad{i}.json"
        bad.write_text(json.dumps({**doc, "samples_us": samples}))
        code, out, err = run_cli(monkeypatch, capsys, "compare", str(bad), AUTOTUNED)
        assert code == 2 and out == "", samples
        assert err.startswith(f"error: {bad}: samples_us must be finite latencies"), err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_backend_and_measured_of_the_wrong_type_are_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    """A backend of 5 or null was a TypeError traceback in the 'measured on' line; a "measured"
    of "no" was read as true and compared."""
    doc = json.loads(Path(AUTOTUNED).read_text())
    for key, value, says in [
        ("backend", 5, '"backend" must be the name of a backend, not 5'),
        ("backend", None, '"backend" must be the name of a backend, not null'),
        ("measured", "no", '"measured" must be true or false, not "no"'),
    ]:
        bad = tmp_path / f"bad_{key}.json"
        bad.write_text(json.dumps({**doc, key: value}))
        code, out, err = run_cli(monkeypatch, capsys, "compare", str(bad), AUTOTUNED)
        assert (code, out, err) == (2, "", f"error: {bad}: {says}\n"), err


def test_export_times_that_are_not_latencies_are_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    """Before, NaN compute times compared as 'no change' (exit 0), -1 ms as 'faster', 1e400 as
    'slower': a corrupt trtexec file could pass the regression gate."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps([{"computeMs": 1.0 + i / 100} for i in range(10)]))
    for i, value in enumerate(["NaN", "-1", "1e400", "Infinity"]):
        bad = tmp_path / f"bad{i}.json"
        bad.write_text("[" + ", ".join(f'{{"computeMs": {value}}}' for _ in range(10)) + "]")
        code, out, err = run_cli(monkeypatch, capsys, "compare", str(good), str(bad))
        assert code == 2 and out == "", value
        assert err.startswith(
            f"error: {bad}: --exportTimes entry 0: computeMs must be a finite time in ms, 0 or more"
        ), err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps([{"latencyMs": 1.0}] * 10))
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(good), str(missing))
    assert code == 2 and err.startswith(f"error: {missing}: --exportTimes has no 'computeMs'"), err


def test_unwritable_output_is_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    a_file = tmp_path / "file.json"
    a_file.write_text("{}")
    for dest, message in [(tmp_path, "it is a folder"), (a_file / "out.json", "is a file, not a folder")]:
        code, out, err = run_cli(monkeypatch, capsys, "compare", AUTOTUNED, HEURISTIC, "-o", str(dest))
        assert code == 2 and out == ""
        assert err.startswith(f"error: cannot write {dest}: ") and message in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert [p.name for p in tmp_path.iterdir()] == ["file.json"]


def _identity(name: str, n: int) -> dict[str, str]:
    return {"file": name, "sha256": hashlib.sha256(str(n).encode()).hexdigest()}


def test_two_different_models_warn_and_strict_exits_3(monkeypatch, capsys, tmp_path: Path) -> None:
    """Before, resnet's baseline against vgg's result said 'slower', exit 1, and nothing else."""
    a = write_timing(tmp_path / "a.json", 500.0, seed=1, model=_identity("resnet.onnx", 1))
    b = write_timing(tmp_path / "b.json", 530.0, seed=2, model=_identity("vgg.onnx", 2))
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(a), str(b))
    assert code == 1  # the verdict's exit status; the warning says it is no regression check
    assert "DIFFERENT MODEL" in next(line for line in out.splitlines() if "slower" in line)
    assert "1 regression in 1 compared (1 not comparable: different models)" in out
    assert err.startswith("warning: b: not comparable: different models: baseline timed resnet.onnx")
    assert err.strip().endswith("its verdict is not a regression check (--strict exits 3)")
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(a), str(b), "--strict", "--json")
    assert code == 3 and "not comparable: different models" in err
    doc = json.loads(out)
    assert doc["not_comparable"] == ["b"] and doc["pairs"][0]["model_check"]["status"] == "different"
    same = write_timing(tmp_path / "c.json", 500.0, seed=3, model=_identity("resnet.onnx", 1))
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(b), str(same), "--strict")
    assert code == 3  # whichever side, and also when the current one is faster


def test_a_changed_model_or_no_identity_is_a_note_even_with_strict(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """A re-exported model under its old name is the regression check users mean to run; results
    from before identities were recorded (and trtexec --exportTimes files) cannot be checked."""
    base = write_timing(tmp_path / "base.json", 500.0, seed=1, model=_identity("resnet.onnx", 1))
    new = write_timing(tmp_path / "new.json", 500.0, seed=2, model=_identity("resnet.onnx", 2))
    old = write_timing(tmp_path / "old.json", 500.0, seed=3, model=None)
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(base), str(new), "--strict")
    assert code == 0 and err.startswith("note: new: model changed: resnet.onnx has other contents (sha256 ")
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(old), str(new), "--strict", "--json")
    assert code == 0
    assert err == (
        f"note: new: model identity not recorded ({old}: not recorded by the writer): "
        "cannot check both sides timed the same model\n"
    )
    assert json.loads(out)["pairs"][0]["model_check"]["status"] == "unknown"


def test_bench_results_carry_what_was_timed_into_compare(monkeypatch, capsys, tmp_path: Path) -> None:
    """End to end: `bench -o` records each model's name and sha256; a renamed copy is the same model,
    another model is flagged and --strict exits 3."""
    one, other = tmp_path / "conv.onnx", tmp_path / "wider.onnx"
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 16)), str(one))
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 24)), str(other))
    renamed = tmp_path / "conv_v2.onnx"
    shutil.copy(one, renamed)
    results = {}
    for model in (one, renamed, other):
        results[model.stem] = tmp_path / f"{model.stem}.json"
        args = ["bench", str(model), "--backend", "ort", "--runs", "20", "--warmup", "2"]
        code, _, err = run_cli(monkeypatch, capsys, *args, "-o", str(results[model.stem]))
        assert code == 0, err
    recorded = json.loads(results["conv"].read_text())["model"]
    assert recorded == {"file": "conv.onnx", "sha256": hashlib.sha256(one.read_bytes()).hexdigest()}
    code, out, err = run_cli(
        monkeypatch, capsys, "compare", str(results["conv"]), str(results["conv_v2"]), "--json"
    )
    assert json.loads(out)["pairs"][0]["model_check"]["status"] == "same" and "model" not in err
    code, out, err = run_cli(
        monkeypatch, capsys, "compare", str(results["conv"]), str(results["wider"]), "--strict", "--json"
    )
    assert code == 3 and "warning: wider: not comparable: different models: baseline timed conv.onnx" in err


def test_a_throttled_side_is_a_warning_and_fails_strict(monkeypatch, capsys, tmp_path: Path) -> None:
    """The pair's row and warning name the side whose GPU clock was held down; --strict exits 1 even
    when nothing got slower. Counters from an edited copy of the real H200 recording."""
    env = {"gpu": "NVIDIA H200"}
    a = write_timing(
        tmp_path / "a.json", 500.0, {**env, "clock_slowdown_us": {"hw_thermal_slowdown": 40_000}}
    )
    b = write_timing(tmp_path / "b.json", 500.0, {**env, "clock_slowdown_us": {}}, seed=1)
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(a), str(b))
    assert code == 0 and "not significant" in out
    row = next(line for line in out.splitlines() if line.startswith("│ b "))
    assert "baseline: GPU clock held down by HW thermal slowdown 40 ms" in row
    assert err == (
        "warning: b: not like for like (baseline: GPU clock held down by HW thermal slowdown 40 ms): the "
        "change need not be the model's\n"
    )
    code, _, _ = run_cli(monkeypatch, capsys, "compare", "--strict", str(a), str(b))
    assert code == 1


def test_an_optimize_report_says_what_to_compare_instead(monkeypatch, capsys, tmp_path: Path) -> None:
    """`compare` given optimize's report.json (what a user has after `optimize`; docs/regression.md
    names `--backend model` results as refused) said only "neither a deployopt bench / jetson
    runner result (no samples_us) nor a trtexec --exportTimes file": now it says what it is and
    which command gives a file it reads."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    out_dir = tmp_path / "opt"
    example = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"
    args = ("optimize", str(example), "--target", "nano", "--backend", "model", "--max-evals", "4")
    code, _, err = run_cli(monkeypatch, capsys, *args, "-o", str(out_dir))
    assert code == 0, err
    report = out_dir / "report.json"
    bench = write_timing(tmp_path / "bench.json", 500.0, {}, seed=1)
    measured = tmp_path / "measured" / "report.json"
    measured.parent.mkdir()
    measured.write_text(json.dumps(dict(json.loads(report.read_text()), measured=True, backend="ort")))
    for path, what in (
        (report, "predicted, not measured"),
        (measured, "measured medians, not per-run samples"),
    ):
        for pair in ((path, bench), (bench, path)):
            code, out, err = run_cli(monkeypatch, capsys, "compare", *map(str, pair))
            assert code == 2 and out == "", err
            model = path.parent / "model.onnx"
            assert err == (
                f"error: {path} is a deployopt optimize report (its latencies are {what}): time the model "
                f"it wrote with `deployopt bench {model} -o FILE.json` and compare that\n"
            )


def _weekly_blocks() -> list[list[str]]:
    """The fenced blocks of docs/regression.md that keep a first baseline."""
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "regression.md").read_text()
    blocks = [b.splitlines() for b in re.findall(r"^```\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)]
    return [b for b in blocks if any(line.startswith("if [ -d baselines ]") for line in b)]


def test_the_docs_keep_a_first_baseline_once_and_compare_checks_it(tmp_path: Path) -> None:
    """The weekly blocks kept the first baseline with `cp -r results/current baselines` after
    compare: in a script that stops at the first failure compare's exit 2 (no baseline) never reached
    it, and once baselines/ existed (a re-baseline after a JetPack upgrade) it copied into
    baselines/current/, which compare never reads, so the old baseline stayed in use. Then `--strict`
    came to fail on a stale pair, and the first week's compare of the result with its own copy is
    one; dropping `--strict` that week dropped its other checks too (a throttled first baseline was
    kept, exit 0). The blocks' keep-or-compare lines, run here as a script (`sh -e`) with a stand-in
    `deployopt` whose first-week `compare --strict -o first.json` fails with the reasons given: with
    `stale` alone (the copy) week 1 is kept, never nested, and week 2 gates with `--strict`; with
    another reason too (throttled), or compare's own exit 2 (no first.json), the script fails and
    no baselines/ is left to be used next week."""
    import os
    import subprocess

    blocks = _weekly_blocks()
    assert len(blocks) == 3  # from the host, by hand, shipped engines
    fake_compare = (
        '#!/bin/sh\necho "$@" >> "$CALLS"\nout=""; prev=""\n'
        'for a; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        'if [ -n "$out" ]; then\n'
        '  if [ "$CODE" = 2 ]; then rm -f "$out"; exit 2; fi\n'  # compare's bad input: no JSON left
        '  printf \'{"exit_code": %s, "failures": [%s]}\' "$CODE" "$REASONS" > "$out"; exit "$CODE"\n'
        "fi\nexit 0\n"
    )
    stale = '{"reason": "stale", "pairs": ["model"], "message": "..."}'
    throttled = '{"reason": "not_like_for_like", "pairs": ["model"], "message": "..."}'
    for n, block in enumerate(blocks):
        first = next(i for i, line in enumerate(block) if line.startswith("if [ -d baselines ]"))
        script = "\n".join(block[first : block.index("fi", first) + 1])
        for case, code, reasons in (
            ("stale", "1", stale),
            ("throttled", "1", f"{throttled}, {stale}"),
            ("bad input", "2", ""),
        ):
            work = tmp_path / str(n) / case.replace(" ", "_")
            current = work / "results" / "current" / "model.json"
            current.parent.mkdir(parents=True)
            fake = work / "bin" / "deployopt"
            fake.parent.mkdir()
            fake.write_text(fake_compare)
            fake.chmod(0o755)
            env = {
                **os.environ,
                "PATH": f"{fake.parent}:{os.environ['PATH']}",
                "CALLS": str(work / "calls"),
                "CODE": code,
                "REASONS": reasons,
            }
            current.write_text("week 1")
            week1 = subprocess.run(["sh", "-e", "-c", script], cwd=work, env=env, check=False)
            (call,) = (work / "calls").read_text().splitlines()
            assert call.startswith("compare baselines/ results/current/") and call.endswith(
                "--strict -o first.json"
            )
            if case != "stale":  # not kept: next week starts again from a first baseline
                assert week1.returncode != 0 and not (work / "baselines").exists(), (case, script)
                continue
            assert week1.returncode == 0, script
            current.write_text("week 2")
            subprocess.run(["sh", "-e", "-c", script], cwd=work, check=True, env=env)
            kept = sorted(p.relative_to(work).as_posix() for p in (work / "baselines").rglob("*"))
            assert kept == ["baselines/model.json"], (script, kept)
            assert (work / "baselines" / "model.json").read_text() == "week 1"
            week2 = (work / "calls").read_text().splitlines()[1]
            assert week2.startswith("compare baselines/ results/current/") and week2.endswith("--strict")


def test_the_docs_first_week_check_reads_what_compare_writes(tmp_path: Path) -> None:
    """The first-week line's python3 check, run on what the real compare writes with `--strict -o`
    for a result and its own copy: `stale` alone for a good result (kept), `not_like_for_like` too
    for one the board throttled mid-run (refused). Its reason names are compare's."""
    import subprocess
    import sys

    import pytest

    (block, *_) = _weekly_blocks()
    check = next(line.strip().removesuffix(" ||") for line in block if line.strip().startswith("python3 -c"))
    deployopt = Path(sys.executable).parent / "deployopt"
    if not deployopt.is_file():
        pytest.skip("no deployopt console script beside this python")
    for case, env, accepted in (
        ("good", {"board": "NVIDIA Jetson Orin Nano"}, True),
        (
            "throttled",
            {"board": "NVIDIA Jetson Orin Nano", "clock_slowdown_us": {"hw_thermal_slowdown": 40000}},
            False,
        ),
    ):
        work = tmp_path / case
        current = work / "results" / "current" / "model.json"
        write_timing(
            current, 500.0, env, seed=3, model=_identity("model.onnx", 1), measured_at="2026-12-02T09:00:00Z"
        )
        script = (
            f"cp -r results/current baselines && {{ {deployopt} compare baselines/ results/current/ --strict "
            f"-o first.json || {check} || {{ rm -r baselines; false; }}; }}"
        )
        done = subprocess.run(
            ["sh", "-e", "-c", script], cwd=work, capture_output=True, text=True, check=False
        )
        reasons = [f["reason"] for f in json.loads((work / "first.json").read_text())["failures"]]
        assert ("stale" in reasons) and (done.returncode == 0) == accepted, (case, reasons, done.stderr)
        assert (work / "baselines").exists() == accepted


def test_help_gives_every_exit_status_a_pipeline_gates_on(monkeypatch, capsys) -> None:
    """--help named exit 1 (and 3 under --strict) only: a CI script written from it read exit 2
    (no baseline yet, a result with too few runs) as a regression, or as nothing it knew."""
    code, out, _ = run_cli(monkeypatch, capsys, "compare", "--help", columns=100)
    text = " ".join(out.split())
    assert code == 0
    for status in (
        "Exit 0: none slower",
        "1: a regression",
        "2: bad input",
        "3: --strict and different models",
    ):
        assert status in text, status


#: What jetson/runner.py wrote as "timed" for a serialized engine before commit b70dbfb (`git show
#: b70dbfb^:jetson/runner.py`: precision_phrase(--dtype), as if it were the engine's precision), and
#: what it writes since for the same run.
RUNNER_TAIL = (
    "CUDA events around execute_async_v3 on one stream, inputs on the GPU (no copies timed), no CUDA graph"
)
OLD_ENGINE_TIMED = f"one forward pass (fp16), {RUNNER_TAIL}"
NEW_ENGINE_TIMED = (
    f"one forward pass of a prebuilt engine (precision as built, --dtype only a label), {RUNNER_TAIL}"
)


def test_an_engine_baseline_from_a_runner_older_than_b70dbfb_is_like_for_like(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """The weekly engine regression: the baseline came from the runner before b70dbfb, which said
    '(fp16)' of an engine, the current result from today's, which says 'of a prebuilt engine': only
    the wording changed, and `--strict` exited 1 ("what was timed differs") after the upgrade. A
    model built at fp16 against an engine still differs."""
    env = {"runner": "jetson/runner.py v1", "board": "NVIDIA Jetson Orin Nano", "tensorrt": "10.3.0"}
    engine = _identity("model.engine", 1)
    old_env = {**env, "engine": "model.engine", "engine_built_now": False}  # b70dbfb^: no prebuilt keys
    new_env = {**old_env, "prebuilt_engine": True, "dtype_label": "fp16"}
    base = write_timing(
        tmp_path / "base" / "m.json", 500.0, old_env, seed=1, model=engine, timed=OLD_ENGINE_TIMED
    )
    cur = write_timing(
        tmp_path / "cur" / "m.json", 500.0, new_env, seed=2, model=engine, timed=NEW_ENGINE_TIMED
    )
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(base.parent), str(cur.parent), "--strict")
    assert code == 0 and "what was timed" not in out + err and "FAILED" not in err
    # before identities were recorded: an engine given to the runner built nothing and has no key
    unnamed = write_timing(
        tmp_path / "unnamed.json", 500.0, old_env, seed=3, model=None, timed=OLD_ENGINE_TIMED
    )
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(unnamed), str(cur), "--strict")
    assert code == 0 and "what was timed" not in err
    # an ONNX model the runner built at fp16 says '(fp16)' today too: not an engine's line
    built = {
        **env,
        "engine": "engines/m-1.engine",
        "engine_built_now": True,
        "engine_key": "k",
        "dtype": "fp16",
    }
    onnx_base = write_timing(
        tmp_path / "onnx.json", 500.0, built, seed=4, model=_identity("model.onnx", 2), timed=OLD_ENGINE_TIMED
    )
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(onnx_base), str(cur), "--strict")
    assert (
        code == 1
        and "what was timed differs: one forward pass (fp16) → one forward pass of a prebuilt" in err
    )
    # the same old wording on a host backend's result (never an engine's before b70dbfb) is left alone
    host = write_timing(tmp_path / "host.json", 500.0, {}, seed=5, model=engine, timed=OLD_ENGINE_TIMED)
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(host), str(cur), "--strict")
    assert code == 1 and "what was timed differs" in err


WEEK1, WEEK2 = "2026-11-25T09:00:00Z", "2026-12-02T09:00:00Z"


def test_a_current_result_not_newer_than_its_baseline_is_a_warning(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """A bench or copy that failed leaves last week's result in place (never half-written), and
    compare judged it as this week's with no word: each side now says when it was measured, and a
    current side measured at the baseline's very time (the same file or a copy) or before it is
    warned about, in the JSON too. Files without "measured_at" read as before: no line, no warning."""
    base = write_timing(tmp_path / "base" / "m.json", 500.0, seed=1, measured_at=WEEK1)
    newer = write_timing(tmp_path / "new" / "m.json", 500.0, seed=2, measured_at=WEEK2)
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(base.parent), str(newer.parent), "--strict")
    assert code == 0 and err == ""
    assert f"measured at: m: baseline {WEEK1}, current {WEEK2}" in out
    copy = tmp_path / "copy" / "m.json"
    copy.parent.mkdir()
    shutil.copy(base, copy)
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(base.parent), str(copy.parent), "--json")
    assert code == 0  # a warning: the verdict's exit status
    assert err == (
        f"warning: m: the current result is not newer than its baseline: both sides are the same result, "
        f"measured at {WEEK1} (the same file or a copy); a bench or copy that failed leaves the last result "
        "in place, so this may not be this run's\n"
    )
    doc = json.loads(out)
    assert doc["stale"] == ["m"] and doc["pairs"][0]["stale"].startswith("both sides are the same result")
    assert doc["pairs"][0]["baseline"]["measured_at"] == doc["pairs"][0]["current"]["measured_at"] == WEEK1
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(newer), str(base))  # the wrong way round
    assert code == 0 and f"measured at: m: baseline {WEEK2}, current {WEEK1}" in out
    assert f"not newer than its baseline: it was measured at {WEEK1}, before its baseline ({WEEK2})" in err
    # two other runs within the same second (another offset is the same instant): one session, not stale
    same = write_timing(tmp_path / "same.json", 500.0, seed=3, measured_at="2026-11-25T10:00:00+01:00")
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(base), str(same))
    assert code == 0 and "not newer than its baseline" not in err
    # older files: one side without the field is no warning; neither side, no line at all
    old = write_timing(tmp_path / "old.json", 500.0, seed=4)
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(old), str(base))
    assert code == 0 and err == ""
    assert f"measured at: m: baseline not recorded, current {WEEK1}" in out
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(old), str(old), "--json")
    assert err == "" and json.loads(out)["stale"] == [] and json.loads(out)["pairs"][0]["stale"] is None
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(old), str(old))
    assert "measured at" not in out


def test_a_malformed_measured_at_is_bad_input(monkeypatch, capsys, tmp_path: Path) -> None:
    good = write_timing(tmp_path / "good.json", 500.0, measured_at=WEEK1)
    for i, bad in enumerate(["last week", "2026-12-02T09:00:00", 20261202, "2026-13-02T09:00:00Z"]):
        path = write_timing(tmp_path / f"bad{i}.json", 500.0, seed=1, measured_at=bad)
        code, out, err = run_cli(monkeypatch, capsys, "compare", str(good), str(path))
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert err == (
            f'error: {path}: "measured_at" must be a UTC time in ISO 8601 such as 2026-12-02T09:30:00Z, '
            f"not {json.dumps(bad)}\n"
        )


def test_a_weekly_bench_that_failed_leaves_last_weeks_result_and_compare_says_so(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """docs/regression.md's weekly lines run without `set -e`: week 2's bench fails (here the model
    is gone), results/current/model.json is week 1's, kept as the baseline, and compare said
    'no change', exit 0, as if week 2 had been measured."""
    import deployopt.backends.base as base  # every session records when it measured

    model = tmp_path / "model.onnx"
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 16)), str(model))
    current, baselines = tmp_path / "results" / "current", tmp_path / "baselines"
    bench = ["bench", str(model), "--backend", "ort", "--runs", "20", "--warmup", "2"]
    bench += ["-o", str(current / "model.json")]
    monkeypatch.setattr(base, "measured_now", lambda: WEEK1)
    code, _, err = run_cli(monkeypatch, capsys, *bench)
    assert code == 0, err
    assert json.loads((current / "model.json").read_text())["measured_at"] == WEEK1
    shutil.copytree(current, baselines)  # [ -d baselines ] || cp -r results/current baselines
    monkeypatch.setattr(base, "measured_now", lambda: WEEK2)
    model.rename(tmp_path / "gone.onnx")
    code, _, _ = run_cli(monkeypatch, capsys, *bench)
    assert code != 0  # the week-2 bench failed, last week's file stays
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(baselines), str(current), "--strict")
    assert f"measured at: model: baseline {WEEK1}, current {WEEK1}" in out
    assert err.startswith("warning: model: the current result is not newer than its baseline")
    (tmp_path / "gone.onnx").rename(model)
    code, _, err = run_cli(monkeypatch, capsys, *bench)
    assert code == 0, err
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(baselines), str(current), "--strict")
    assert f"measured at: model: baseline {WEEK1}, current {WEEK2}" in out and "not newer" not in err


def test_a_malformed_throttling_record_or_timed_line_is_one_line(monkeypatch, capsys, tmp_path: Path) -> None:
    """A "clock_slowdown_us" of "lots" (or an over-current count of "many") read as "checked, not held
    down", so the pair was compared with no throttling flag; a "timed" of 5 was a TypeError
    traceback with exit 1, which a CI gate reads as a regression."""
    doc = json.loads(Path(AUTOTUNED).read_text())
    env = doc["environment"]
    cases = [
        (
            {**doc, "environment": {**env, "clock_slowdown_us": "lots"}},
            '"clock_slowdown_us" must be an object',
        ),
        ({**doc, "environment": {**env, "clock_slowdown_us": {"sw_power_cap": -5}}}, "'sw_power_cap' is -5"),
        ({**doc, "environment": {**env, "oc_events": {"oc1": "many"}}}, "'oc1' is \"many\""),
        ({**doc, "environment": {**env, "oc_events": [1]}}, '"oc_events" must be an object'),
        # NaN and Infinity (Python's json reads both): a ValueError/OverflowError traceback, exit 1;
        # a fraction of an event read as 0 events, silently
        ({**doc, "environment": {**env, "oc_events": {"oc3": float("nan")}}}, "'oc3' is NaN"),
        ({**doc, "environment": {**env, "oc_events": {"oc3": 0.9}}}, "'oc3' is 0.9"),
        ({**doc, "environment": {**env, "clock_slowdown_us": {"hw_slowdown": float("inf")}}}, "is Infinity"),
        (
            {**doc, "environment": {**env, "gpu_clock_during_run": {"before": {"cur_hz": float("nan")}}}},
            '"gpu_clock_during_run.before.cur_hz" must be a clock in Hz, not NaN',
        ),
        ({**doc, "environment": {**env, "gpu_clock_during_run": "x"}}, '"gpu_clock_during_run" must be an'),
        (
            {**doc, "environment": {**env, "gpu_clock_during_run": {"before": {"cur_hz": "x"}, "after": {}}}},
            '"gpu_clock_during_run.before.cur_hz" must be a clock in Hz, not "x"',
        ),
        ({**doc, "timed": 5}, '"timed" must be a line saying what was timed, not 5'),
        ({**doc, "timed": ["a", "b"]}, '"timed" must be a line saying what was timed'),
    ]
    for i, (bad_doc, message) in enumerate(cases):
        bad = tmp_path / f"bad{i}.json"
        bad.write_text(json.dumps(bad_doc))
        code, out, err = run_cli(monkeypatch, capsys, "compare", AUTOTUNED, str(bad))
        assert code == 2 and out == "", message
        assert err.startswith(f"error: {bad}: ") and message in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    fine = tmp_path / "fine.json"  # the records a runner writes still pass
    fine.write_text(
        json.dumps(
            {
                **doc,
                "environment": {
                    **env,
                    "clock_slowdown_us": {},
                    "oc_events": {"oc1": 0},
                    "gpu_clock_during_run": {
                        "devfreq": "17000000.gv11b",
                        "before": {"cur_hz": 1377000000, "max_hz": 1377000000},
                        "after": {"cur_hz": 1377000000},
                    },
                },
            }
        )
    )
    code, _, err = run_cli(monkeypatch, capsys, "compare", AUTOTUNED, str(fine))
    assert code == 0 and "error" not in err, err


def test_output_into_a_compared_folder_never_replaces_a_measurement(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """`compare base cur -o cur/b.json` wrote the report over the measurement b.json, and every run
    after it left b out of the pairing ("in the baseline only"): its regression became a note and the
    gate exited 0. Now that is refused like `-o` naming a compared file; a report of its own in the
    folder may still be rewritten (compare never reads its reports as measurements)."""
    doc = json.loads(Path(AUTOTUNED).read_text())
    base, cur = tmp_path / "base", tmp_path / "cur"
    base.mkdir()
    cur.mkdir()
    (base / "b.json").write_text(json.dumps(doc))
    (cur / "b.json").write_text(Path(HEURISTIC).read_text())
    before = (cur / "b.json").read_bytes()
    for dest, what in ((cur / "b.json", "current result b.json"), (base / "b.json", "baseline b.json")):
        code, out, err = run_cli(monkeypatch, capsys, "compare", str(base), str(cur), "-o", str(dest))
        assert code == 2 and out == ""
        assert err.startswith(f"error: cannot write {dest}: it is the {what} in "), err
    assert (cur / "b.json").read_bytes() == before
    report = cur / "report.json"
    for _ in range(2):
        code, _, _ = run_cli(monkeypatch, capsys, "compare", str(base), str(cur), "-o", str(report))
        assert code == 1  # the regression is found, the second time too
    assert json.loads(report.read_text())["pairs"][0]["verdict"] == "slower"


def test_the_table_computes_no_confidence_interval_it_does_not_show(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """Bug bash: the table shows median, IQR and runs, yet compare built the JSON first, whose CIs
    bootstrap every sample: 50 s on a 1M-query trtexec --exportTimes file. Only --json and -o pay it."""
    import deployopt.timing as timing

    a = write_timing(tmp_path / "a.json", 500.0, {"board": "Orin"}, seed=1)
    b = write_timing(tmp_path / "b.json", 500.0, {"board": "Orin"}, seed=2)
    calls: list[int] = []
    real = timing.bootstrap_median_ci
    monkeypatch.setattr(
        timing, "bootstrap_median_ci", lambda s, *a, **k: calls.append(len(s)) or real(s, *a, **k)
    )
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(a), str(b))
    assert code == 0 and "0 regressions in 1 compared" in out and calls == []
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(a), str(b), "--json")
    assert code == 0 and len(calls) == 2 and json.loads(out)["pairs"][0]["baseline"]["ci95_us"]


def test_a_verdict_of_uncertain_size_is_marked(monkeypatch, capsys, tmp_path: Path) -> None:
    """Bimodal samples (a noisy host alternating ~2 ms and ~10 ms): the baseline's median in the slow
    mode, the current one's in the fast mode. Faster (each mode moved -20 %), but -84 % is no size
    the samples pin down: the medians' 95 % CIs overlap. The cell and the JSON say so."""
    from test_regression import MODEL
    from test_timing_uncertain import bug_bash_pair

    from deployopt.timing import Timing

    paths = []
    for name, t in zip(("a", "b"), bug_bash_pair()):
        t = Timing("tensorrt", t.samples_us, 50, "one forward pass (fp16)", {"board": "Orin"}, model=MODEL)
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(t.to_json()))
    code, out, _ = run_cli(monkeypatch, capsys, "compare", *map(str, paths))
    row = next(line for line in out.splitlines() if line.startswith("│ b "))
    assert code == 0 and "-83." in row and "faster (size uncertain)" in row
    code, out, _ = run_cli(monkeypatch, capsys, "compare", *map(str, paths), "--json")
    pair = json.loads(out)["pairs"][0]
    assert pair["verdict"] == "faster" and pair["size_uncertain"] is True
    assert list(pair).index("size_uncertain") == list(pair).index("verdict") + 1
    # a clean difference: no marker, the flag false
    code, out, _ = run_cli(monkeypatch, capsys, "compare", AUTOTUNED, HEURISTIC, "--json")
    assert json.loads(out)["pairs"][0]["size_uncertain"] is False
    code, out, _ = run_cli(monkeypatch, capsys, "compare", AUTOTUNED, HEURISTIC)
    assert "size uncertain" not in out


def test_equal_medians_at_min_effect_0_are_no_regression(monkeypatch, capsys, tmp_path: Path) -> None:
    """`--min-effect 0` on two medians of 100.0 µs whose runs mostly got faster: "slower", exit 1,
    at +0.0 %. Now no verdict: the row reads mixed, the JSON says so, exit 0."""
    env = {"backend": "ort", "timed": "x", "environment": {}}
    a, b = tmp_path / "eq_a.json", tmp_path / "eq_b.json"
    # shuffled into one steady run each: sorted, each side's first half drifted from its second, and
    # the pair is unstable (no verdict) before the ranks are looked at
    shuffled = random.Random(0).sample
    a.write_text(json.dumps({**env, "samples_us": shuffled([99.0] * 20 + [100.0] * 11 + [110.0] * 20, 51)}))
    b.write_text(json.dumps({**env, "samples_us": shuffled([90.0] * 20 + [100.0] * 11 + [101.0] * 20, 51)}))
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(a), str(b), "--min-effect", "0")
    row = next(line for line in out.splitlines() if line.startswith("│ eq_b "))
    assert code == 0 and "+0.0 %" in row and "mixed:" in row and "slower" not in row
    assert "0 regressions in 1 compared" in out
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(a), str(b), "--min-effect", "0", "--json")
    pair = json.loads(out)["pairs"][0]
    assert code == 0 and pair["verdict"] == "no significant difference" and pair["mixed"] is True
