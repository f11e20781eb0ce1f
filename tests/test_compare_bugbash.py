"""`deployopt compare` after the Jetson-week bug bash: what a fleet's folder compare, a replicated pair
with no spread, a stale result under --strict, weeks of appended replicates, a script reading --json
and an optimize report given as a side each got wrong, pinned as the user sees it (table, stderr,
JSON, exit status). Result files are written by hand, as the other compare tests do."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_runner import run_cli

from deployopt.regression import compare_paths
from deployopt.timing import REPLICATE_TEST, Replicate, Timing, replicate_t_test

MODEL = {"file": "m.onnx", "sha256": "ab" * 32}
WEEK1, WEEK2 = "2026-11-25T09:00:00Z", "2026-12-02T09:00:00Z"


def one_run(
    median: float, seed: int = 0, env: dict[str, Any] | None = None, at: str | None = WEEK2
) -> Timing:
    """One steady run of 200 samples around `median` (a GPU-like spread of 0.2 %)."""
    rng = np.random.default_rng(seed)
    samples = list(median + rng.normal(0.0, median * 0.002, 200))
    return Timing("tensorrt", samples, 50, "one forward pass (fp16)", env or {}, model=MODEL, measured_at=at)


def flat_replicates(median: float, k: int, at: str = WEEK2) -> Timing:
    """k replicates of 10 identical samples each (a deterministic fake, a coarse timer): no spread."""
    parts = [
        Timing("ort", [median] * 10, 2, "one forward pass", {}, model=MODEL, measured_at=at) for _ in range(k)
    ]
    return Timing.from_replicates(parts)


def write(path: Path, t: Timing) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(t.to_json()))
    return path


# ---------------------------------------------------------------------------------------------
# B2: the "measured on:" lines of a folder compare name their model, in table order


def test_a_fleet_folder_names_each_models_setup_in_table_order(monkeypatch, capsys, tmp_path: Path) -> None:
    """Nano and Orin results in one folder compare: the lines under the table were a sorted set of
    setups with no model named, so which model ran where could not be told (and "Nano" came first
    though its model is the table's second row)."""
    orin = {"board": "NVIDIA Jetson Orin Nano", "tensorrt": "10.3.0"}
    nano = {"board": "NVIDIA Jetson Nano", "tensorrt": "8.2.1"}
    for side, seed in (("base", 1), ("cur", 2)):
        write(tmp_path / side / "alpha.json", one_run(500.0, seed, orin, WEEK1 if side == "base" else WEEK2))
        write(
            tmp_path / side / "beta.json", one_run(900.0, seed + 5, nano, WEEK1 if side == "base" else WEEK2)
        )
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(tmp_path / "base"), str(tmp_path / "cur"))
    assert code == 0, err
    lines = [ln for ln in out.splitlines() if ln.startswith("measured on: ")]
    assert lines == [
        "measured on: alpha: tensorrt, board NVIDIA Jetson Orin Nano, TensorRT 10.3.0 (both)",
        "measured on: beta: tensorrt, board NVIDIA Jetson Nano, TensorRT 8.2.1 (both)",
    ]
    # the same setup for every pair: one line, unnamed, as for one pair
    for side, seed in (("base2", 1), ("cur2", 2)):
        for name in ("alpha", "beta"):
            write(tmp_path / side / f"{name}.json", one_run(500.0, seed, orin))
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(tmp_path / "base2"), str(tmp_path / "cur2"))
    lines = [ln for ln in out.splitlines() if ln.startswith("measured on: ")]
    assert lines == ["measured on: tensorrt, board NVIDIA Jetson Orin Nano, TensorRT 10.3.0 (both)"]


# ---------------------------------------------------------------------------------------------
# B3: replicates with no spread between them: no p, no CI, and --strict says why


@pytest.mark.parametrize("value", [100.0, 1000.0, 1234.567, 2077.3, 7.51])
@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_alike_replicate_medians_give_no_p_whatever_the_float_rounding(value: float, k: int) -> None:
    """The mean of k equal logs can round off them: se came out 1e-16 rather than 0, and 3 × 1000 µs
    against 3 × 1300 µs was "slower, p=2e-58"; where it was 0, p read 1. Neither is a p."""
    t, _, p, _, se = replicate_t_test([value] * k, [1.3 * value] * k)
    assert math.isnan(p) and math.isnan(t) and se == 0


@pytest.mark.parametrize("median", [100.0, 1000.0])  # old code: p = 1 at 100 µs, "slower" at 1000 µs
def test_a_replicated_pair_with_no_spread_has_no_p_and_strict_names_why(
    monkeypatch, capsys, tmp_path: Path, median: float
) -> None:
    """`bench --repeat 3` on a deterministic fake: +30 % read p = 1 (`"p_value": 1.0`, "no significant
    difference", exit 0), certainty to a script reading p; docs/regression.md says such a pair is
    unstable with no p and no CI. --strict's failure line named "unstable within a run"."""
    base = write(tmp_path / "base" / "m.json", flat_replicates(median, 3, WEEK1))
    cur = write(tmp_path / "cur" / "m.json", flat_replicates(1.3 * median, 3, WEEK2))
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(base), str(cur), "--json")
    assert code == 0, err  # unstable: no verdict, no regression (without --strict)
    pair = json.loads(out)["pairs"][0]
    assert pair["p_value"] is None and pair["unstable"] is True
    assert pair["test"]["name"] == REPLICATE_TEST and pair["test"]["change_ci95_pct"] is None
    assert pair["verdict"] == "no significant difference" and pair["change_pct"] == pytest.approx(30.0)
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(base), str(cur))
    row = next(ln for ln in out.splitlines() if ln.startswith("│ m "))
    assert "+30.0 %" in row and "│ none │" in row and "unstable: every" in row
    assert "no p, no 95% CI" in out
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(base), str(cur), "--strict")
    assert code == 1
    failed = err.strip().splitlines()[-1]
    assert failed == (
        "FAILED (--strict): 1 pair(s) with no spread between replicates (no verdict, no p), so exit 1 "
        "though no model got slower"
    )


# ---------------------------------------------------------------------------------------------
# UX2: --strict fails on a stale current result


def test_strict_fails_on_a_current_result_not_newer_than_its_baseline(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """A bench that failed left last week's result in place: --strict exited 0 and the docs told CI to
    add `jq -e '.stale == []'`. It fails now, with a line saying why; without --strict, a warning."""
    base = write(tmp_path / "base" / "m.json", one_run(500.0, 1, at=WEEK1))
    copy = write(tmp_path / "cur" / "m.json", Timing.from_json(json.loads(base.read_text())))
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(base), str(copy))
    assert code == 0 and "not newer than its baseline" in err and "FAILED" not in err
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(base), str(copy), "--strict")
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "FAILED (--strict): 1 pair(s) whose current result is not newer than its baseline (maybe not this "
        "run's), so exit 1 though no model got slower"
    )
    older = write(tmp_path / "older.json", one_run(500.0, 2, at="2026-11-18T09:00:00Z"))
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(base), str(older), "--strict")
    assert code == 1 and "before its baseline" in err and "not newer than its baseline (maybe" in err
    newer = write(tmp_path / "newer.json", one_run(500.0, 3, at=WEEK2))
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(base), str(newer), "--strict")
    assert code == 0 and err == ""


# ---------------------------------------------------------------------------------------------
# UX3: replicates appended over weeks are warned about


def weekly(medians: list[float], start_day: int = 4, step_days: int = 7) -> Timing:
    """One replicate a week (bench --append from a weekly job), 200 samples each."""
    parts = []
    for i, m in enumerate(medians):
        day = start_day + i * step_days
        parts.append(one_run(m, 10 + i, at=f"2026-11-{day:02d}T09:00:00Z"))
    return Timing.from_replicates(parts)


def test_replicates_appended_across_weeks_are_warned_about(monkeypatch, capsys, tmp_path: Path) -> None:
    """Four weekly runs appended into one result, the last 10 % slower: "+2.4 %, not significant",
    with no word that the change was diluted among weeks of replicates."""
    base = write(
        tmp_path / "base.json",
        Timing.from_replicates(
            [one_run(1000.0 * f, i, at="2026-11-01T09:00:00Z") for i, f in enumerate((1.0, 1.01, 0.99))]
        ),
    )
    cur = write(tmp_path / "cur.json", weekly([1000.0, 1010.0, 990.0, 1100.0]))
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(base), str(cur), "--json")
    assert code == 0, err
    doc = json.loads(out)
    pair = doc["pairs"][0]
    assert pair["verdict"] == "no significant difference" and 1 < pair["change_pct"] < 4
    assert pair["long_replicate_span"] is True and doc["long_replicate_span"] == ["cur"]
    assert pair["replicate_span_days"]["current"] == pytest.approx(21.0)
    assert pair["replicate_span_days"]["baseline"] == 0.0
    warning = next(ln for ln in err.splitlines() if "replicates are meant to be one" in ln)
    assert warning == (
        "warning: cur: current: 4 replicates measured over 21.0 days (2026-11-04T09:00:00Z → "
        "2026-11-25T09:00:00Z), more than 1 day apart: replicates are meant to be one measurement "
        "session, and a drift across them (a change in the last of them) is diluted in the test on their "
        "medians; bench each session into its own file (docs/regression.md)"
    )
    # replicates of one session (an interleaved loop of an hour) are not warned about
    hourly = Timing.from_replicates(
        [one_run(m, 20 + i, at=f"2026-12-02T0{i}:30:00Z") for i, m in enumerate((1000.0, 1010.0, 990.0))]
    )
    cur2 = write(tmp_path / "cur2.json", hourly)
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(base), str(cur2))
    assert code == 0 and "measurement session" not in err
    assert compare_paths(base, cur2).pairs[0].long_spans == []


# ---------------------------------------------------------------------------------------------
# UX6: --json says the exit status compare returns, and why


def test_json_has_the_exit_status_and_its_reasons_with_and_without_strict(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """A script gating on `compare --json` had to rebuild --strict's rule: the JSON now carries the
    exit status the command returns and each reason for it, and every existing key stays."""
    base = write(tmp_path / "base.json", one_run(500.0, 1, at=WEEK1))
    cases = {
        "same": one_run(500.0, 2),
        "slower": one_run(560.0, 3),
        "setup": one_run(500.0, 4, env={"sms": 16}),
        "stale": one_run(500.0, 5, at=WEEK1.replace("25T", "20T")),
        "other_model": Timing(
            "tensorrt",
            one_run(500.0, 6).samples_us,
            50,
            "one forward pass (fp16)",
            {},
            model={"file": "vgg.onnx", "sha256": "cd" * 32},
            measured_at=WEEK2,
        ),
    }
    base_env = write(tmp_path / "base_env.json", one_run(500.0, 1, env={"sms": 8}, at=WEEK1))
    expect = {
        ("same", False): (0, []),
        ("same", True): (0, []),
        ("slower", False): (1, ["regression"]),
        ("slower", True): (1, ["regression"]),
        ("setup", False): (0, []),
        ("setup", True): (1, ["not_like_for_like"]),
        ("stale", False): (0, []),
        ("stale", True): (1, ["stale"]),
        ("other_model", False): (0, []),
        ("other_model", True): (3, ["not_comparable"]),
    }
    for (name, strict), (want, reasons) in expect.items():
        cur = write(tmp_path / f"{name}.json", cases[name])
        b = base_env if name == "setup" else base
        args = ["compare", str(b), str(cur), "--json", *(["--strict"] if strict else [])]
        code, out, err = run_cli(monkeypatch, capsys, *args)
        doc = json.loads(out)
        assert (code, doc["exit_code"], doc["strict"]) == (want, want, strict), (name, strict, err)
        assert [f["reason"] for f in doc["failures"]] == reasons, (name, strict)
        assert all(f["pairs"] == [name] and f["message"] for f in doc["failures"])
        for key in ("rule", "regressions", "not_comparable", "stale", "unstable", "pairs"):
            assert key in doc
        out_file = tmp_path / "report" / f"{name}-{strict}.json"
        out_file.parent.mkdir(exist_ok=True)
        with_o = ["compare", str(b), str(cur), "-o", str(out_file), *(["--strict"] if strict else [])]
        code, _, _ = run_cli(monkeypatch, capsys, *with_o)
        assert json.loads(out_file.read_text())["exit_code"] == code == want


# ---------------------------------------------------------------------------------------------
# UX7: an optimize report as a side suggests the bench that times what it chose, where


def optimize_report(folder: Path, backend: str, remote: str | None, engine: bool) -> Path:
    folder.mkdir(parents=True)
    env = {"remote": remote} if remote else {}
    doc = {
        "tool": "deployopt optimize",
        "backend": backend,
        "measured": True,
        "dtype": "fp16",
        "timings": {"input": {"backend": backend, "environment": env}},
    }
    if engine:
        doc["engine"] = "model.engine"
        (folder / "model.engine").write_bytes(b"plan")
    (folder / "model.onnx").write_bytes(b"onnx")
    (folder / "report.json").write_text(json.dumps(doc))
    return folder / "report.json"


BOARD = "--remote user@jetson"


@pytest.mark.parametrize(
    ("backend", "remote", "engine", "suggested"),
    [
        ("tensorrt", "user@jetson", True, f"model.engine --backend tensorrt {BOARD}"),
        ("trtexec", "user@jetson", True, f"model.engine --backend trtexec {BOARD}"),
        # no engine beside it (copied away): the ONNX model, built on the board at the report's dtype
        ("tensorrt", "user@jetson", False, f"model.onnx --backend tensorrt {BOARD} --dtype fp16"),
        ("tensorrt", None, True, "model.engine --backend tensorrt"),
        ("ort", None, False, "model.onnx"),
    ],
)
def test_an_optimize_report_suggests_the_bench_of_its_backend_and_board(
    monkeypatch, capsys, tmp_path: Path, backend: str, remote: str | None, engine: bool, suggested: str
) -> None:
    """A `--remote` optimize's report (TensorRT on the board, OUT/model.engine written) was answered
    with `deployopt bench OUT/model.onnx -o FILE.json`: ort on the host CPU, another device."""
    out_dir = tmp_path / "OUT"
    report = optimize_report(out_dir, backend, remote, engine)
    other = write(tmp_path / "cur.json", one_run(500.0, 1))
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(report), str(other))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert (
        f"time the model it wrote with `deployopt bench {out_dir}/{suggested} -o FILE.json` and compare"
        in err
    )


def test_replicate_records_are_unchanged_by_the_span_check() -> None:
    """A result whose replicates recorded no times (hand-written) has no span and no warning."""
    t = Timing("ort", [1.0] * 20, replicates=[Replicate(10), Replicate(10)], model=MODEL)
    from deployopt.regression import long_replicate_spans, replicate_span

    assert replicate_span(t) is None and long_replicate_spans(t, t) == []
