"""`bench --append`: one more replicate (or --repeat N more) added to the result in -o FILE.

Why: three back-to-back replicates share one stretch of a shared host's load, so two such results
differ by the load (A/A false alarms stayed at 29 % on a 2-core CPU); replicates interleaved in
time with the other side's brought that to 1.5 % (benchmarks/results/cpu_aa_replicates). Benching
baseline and current in turns, each into its own file, needs bench to add a run to a result. A run
added to the wrong file (another model, backend, --runs or setup) would pool unlike runs as one
side's, so such a FILE is refused in one line, before anything is timed where it can be, and is
left byte for byte as it was; so is FILE when the timing fails or is interrupted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from ort_session import count_sessions

from deployopt.errors import BackendFailed
from deployopt.layers import ConvShape, conv_model
from deployopt.regression import staleness
from deployopt.timing import REPLICATE_TEST, Replicate, Timing, load_timing

RUNS = ("--backend", "ort", "--runs", "6", "--warmup", "1")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("append")
    a, b = folder / "conv.onnx", folder / "wide.onnx"
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 16)), str(a))
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 24)), str(b))
    return a, b


def bench(monkeypatch, capsys, model: Path, dest: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, "bench", str(model), *RUNS, "-o", str(dest), *extra)


def test_append_creates_then_extends_and_compare_reads_it_replicated(
    monkeypatch, capsys, models: tuple[Path, Path], tmp_path: Path
) -> None:
    model, _ = models
    dest = tmp_path / "new" / "conv.json"  # neither the file nor its folder exists: the loop's first round
    code, out, err = bench(monkeypatch, capsys, model, dest, "--append")
    assert code == 0, err
    assert "wrote 1 replicate to" in out and "(1 replicate now)" in out
    first = json.loads(dest.read_text())
    assert [r["runs"] for r in first["replicates"]] == [6]
    code, out, err = bench(monkeypatch, capsys, model, dest, "--append", "--repeat", "2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert json.loads(dest.read_text()) == doc
    assert [r["runs"] for r in doc["replicates"]] == [6, 6, 6] and doc["runs"] == 18
    assert doc["samples_us"][:6] == first["samples_us"]  # the file's runs first, the new ones after
    assert doc["replicates"][0]["measured_at"] == first["measured_at"]
    assert doc["measured_at"] == max(r["measured_at"] for r in doc["replicates"])
    assert doc["model"] == first["model"] and list(doc)[-1] == "replicates"
    for i, r in enumerate(doc["replicates"]):
        assert r["median_us"] == pytest.approx(float(np.median(doc["samples_us"][6 * i : 6 * i + 6])))
    assert load_timing(dest).replicate_count == 3
    # a second file benched in turns with it: compare judges the pair on replicate medians
    other = tmp_path / "other" / "conv.json"
    for _ in range(2):
        code, _, err = bench(monkeypatch, capsys, model, other, "--append")
        assert code == 0, err
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(dest), str(other), "--json")
    assert code in (0, 1), err
    pair = json.loads(out)["pairs"][0]
    assert pair["test"]["name"] == REPLICATE_TEST and pair["one_run_per_side"] is False
    assert pair["test"]["replicates"] == {"baseline": 3, "current": 2}


def test_an_old_single_run_file_becomes_its_first_replicate(
    monkeypatch, capsys, models: tuple[Path, Path], tmp_path: Path
) -> None:
    model, _ = models
    dest = tmp_path / "old.json"
    code, _, err = bench(monkeypatch, capsys, model, dest)  # no --append: the file as before
    assert code == 0, err
    old = json.loads(dest.read_text())
    assert "replicates" not in old
    code, _, err = bench(monkeypatch, capsys, model, dest, "--append")
    assert code == 0, err
    doc = json.loads(dest.read_text())
    assert [r["runs"] for r in doc["replicates"]] == [6, 6]
    assert doc["samples_us"][:6] == old["samples_us"]
    assert doc["replicates"][0]["measured_at"] == old["measured_at"]
    assert doc["environment"] == old["environment"]  # the file's: the new run's matched it


def edited(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=2))


def _env(key: str, value: Any) -> Any:
    return lambda d: d["environment"].__setitem__(key, value)


def _set(key: str, value: Any) -> Any:
    return lambda d: d.__setitem__(key, value)


def _runtime(d: dict[str, Any]) -> None:
    # the onnxruntime that ran (recorded since 2026-12-07, what `compare` reads first) and its
    # distribution's version, as a run of another onnxruntime records them
    d["environment"]["onnxruntime"] = "1.20.0"
    d["environment"]["libraries"]["onnxruntime"] = "1.20.0"


def _batch_8(d: dict[str, Any]) -> None:
    d["timed"] = d["timed"].replace("batch 1", "batch 8")


BACKEND = "holds runs timed by backend 'torch', and this bench uses 'ort'"


@pytest.mark.parametrize(
    "change, message, timed",
    [
        (_set("backend", "torch"), BACKEND, 0),
        (_set("warmup", 5), "--runs 6 --warmup 5, and this bench asks --runs 6 --warmup 1", 0),
        (lambda d: d.pop("model"), "records no model", 0),
        # the setup the backend records as it measures: the first new run is timed, not the others
        (_env("cpu_cores", 64), "holds runs of another setup than this one (usable CPU cores 64 → ", 1),
        (_runtime, "another setup than this one (runtime onnxruntime 1.20.0 → onnxruntime ", 1),
        (_env("intra_op_threads", 4), "(onnxruntime intra-op threads 4 → default (0))", 1),
        (_batch_8, "what was timed differs: batch 8 → batch 1", 1),
    ],
)  # fmt: skip
def test_a_file_of_another_backend_runs_or_setup_is_refused_and_left_as_it_was(
    monkeypatch, capsys, models: tuple[Path, Path], tmp_path: Path, change: Any, message: str, timed: int
) -> None:
    model, _ = models
    dest = tmp_path / "r.json"
    code, _, err = bench(monkeypatch, capsys, model, dest)
    assert code == 0, err
    edited(dest, change)
    before = dest.read_bytes()
    opened = count_sessions(monkeypatch)
    code, out, err = bench(monkeypatch, capsys, model, dest, "--append", "--repeat", "3")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"error: --append: {dest} ") and message in err, err
    assert len(opened) == timed  # refused before timing where the file alone shows it
    assert dest.read_bytes() == before


def test_another_model_is_refused_before_anything_is_timed(
    monkeypatch, capsys, models: tuple[Path, Path], tmp_path: Path
) -> None:
    model, wide = models
    dest = tmp_path / "conv.json"
    code, _, err = bench(monkeypatch, capsys, model, dest, "--append")
    assert code == 0, err
    before = dest.read_bytes()
    opened = count_sessions(monkeypatch)
    code, out, err = bench(monkeypatch, capsys, wide, dest, "--append")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "holds runs of conv.onnx (sha256" in err and "this bench times wide.onnx" in err
    assert "another model" in err and "(nothing was timed)" in err
    assert opened == [] and dest.read_bytes() == before
    # a renamed copy of the same bytes is the same model (identity is the sha256)
    copy = tmp_path / "renamed.onnx"
    copy.write_bytes(model.read_bytes())
    code, _, err = bench(monkeypatch, capsys, copy, dest, "--append")
    assert code == 0, err
    doc = json.loads(dest.read_text())
    assert len(doc["replicates"]) == 2 and doc["model"]["file"] == "conv.onnx"


def _compare_report(tmp_path: Path, monkeypatch, capsys, model: Path) -> str:
    a = tmp_path / "a.json"
    assert bench(monkeypatch, capsys, model, a)[0] == 0
    out = tmp_path / "report.json"
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(a), str(a), "-o", str(out))
    assert code == 0, err
    return out.read_text()


@pytest.mark.parametrize(
    "content, what",
    [
        ("compare", "is a deployopt compare report, not a bench result"),
        (json.dumps([{"computeMs": 1.0}] * 10), "is a JSON list (a trtexec --exportTimes"),
        (json.dumps({"tool": "deployopt optimize", "measured": True}), "is a deployopt optimize report"),
        (json.dumps({"backend": "ort", "layers": [], "runs": 20}), "is a profile result"),
        ("", "is empty, not a deployopt bench result"),
        ("trtexec log\n", "is not JSON, not a deployopt bench result"),
        (json.dumps({"backend": "ort", "samples_us": [1.0, float("nan")]}), "must be finite latencies"),
        (json.dumps({"backend": "ort", "samples_us": [1.0] * 10, "model": "m.onnx"}), '"model" must be'),
    ],
)  # fmt: skip
def test_a_file_that_is_no_bench_result_is_refused_before_anything_is_timed(
    monkeypatch, capsys, models: tuple[Path, Path], tmp_path: Path, content: str, what: str
) -> None:
    model, _ = models
    if content == "compare":
        content = _compare_report(tmp_path, monkeypatch, capsys, model)
    dest = tmp_path / "x.json"
    dest.write_text(content)
    before = dest.read_bytes()
    opened = count_sessions(monkeypatch)
    code, out, err = bench(monkeypatch, capsys, model, dest, "--append")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: --append: ") and what in err, err
    assert opened == [] and dest.read_bytes() == before


def test_append_without_o_or_to_a_device_is_one_line(monkeypatch, capsys, models: tuple[Path, Path]) -> None:
    model, _ = models
    opened = count_sessions(monkeypatch)
    code, out, err = run_cli(monkeypatch, capsys, "bench", str(model), *RUNS, "--append")
    assert (code, out) == (2, "")
    assert err == "error: --append adds runs to the bench result in a file: give it with -o FILE\n"
    code, out, err = run_cli(monkeypatch, capsys, "bench", str(model), *RUNS, "--append", "-o", "/dev/null")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "--append: /dev/null is not a regular file" in err
    assert opened == []


@pytest.mark.parametrize("failure, exit_code", [(KeyboardInterrupt, 130), (BackendFailed, 2)])
def test_a_timing_that_fails_or_is_interrupted_leaves_the_file_as_it_was(
    monkeypatch, capsys, models: tuple[Path, Path], tmp_path: Path, failure: type, exit_code: int
) -> None:
    model, _ = models
    dest = tmp_path / "f.json"
    code, _, err = bench(monkeypatch, capsys, model, dest, "--append")
    assert code == 0, err
    before = dest.read_bytes()
    from deployopt.backends.ort import OrtSession

    real, calls = OrtSession.measure, []

    def measure(self, path):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:  # the second of three new replicates
            raise failure("the run broke off") if failure is BackendFailed else failure()
        return real(self, path)

    monkeypatch.setattr(OrtSession, "measure", measure)
    code, _, err = bench(monkeypatch, capsys, model, dest, "--append", "--repeat", "3")
    assert code == exit_code and len(calls) == 2
    assert dest.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]  # no temp file left beside it


def test_a_file_changed_while_timing_is_not_written_over(
    monkeypatch, capsys, models: tuple[Path, Path], tmp_path: Path
) -> None:
    """Two loops appending to one file: the one whose file changed under it writes nothing."""
    model, _ = models
    dest = tmp_path / "f.json"
    assert bench(monkeypatch, capsys, model, dest, "--append")[0] == 0
    from deployopt.backends.ort import OrtSession

    real = OrtSession.measure
    theirs = b""

    def measure(self, path):  # type: ignore[no-untyped-def]
        nonlocal theirs
        t = real(self, path)
        edited(dest, lambda d: d["environment"].__setitem__("note", "another writer's"))
        theirs = dest.read_bytes()
        return t

    monkeypatch.setattr(OrtSession, "measure", measure)
    code, _, err = bench(monkeypatch, capsys, model, dest, "--append")
    assert code == 2 and err.count("\n") == 1 and "it changed while this ran" in err
    assert dest.read_bytes() == theirs


def rep(median: float, when: str) -> Timing:
    return Timing("ort", [median] * 6, 1, "one pass", {}, measured_at=when)


def test_timing_appended_keeps_a_held_down_environment_and_the_latest_time() -> None:
    base = Timing.from_replicates([rep(100.0, "2026-12-07T05:00:00Z"), rep(101.0, "2026-12-07T05:00:10Z")])
    held = rep(130.0, "2026-12-07T04:59:00Z")  # a board clock behind the host's: not the latest
    held.environment = {"clock_slowdown_us": {"sw_thermal_slowdown": 1.2e6}}
    out = base.appended([held])
    assert out.replicates == [*base.replicates, Replicate(6, "2026-12-07T04:59:00Z")]
    assert out.samples_us == base.samples_us + held.samples_us
    assert out.environment == held.environment  # compare still flags the throttled run
    assert out.measured_at == "2026-12-07T05:00:10Z"
    single = rep(90.0, "2026-12-07T04:00:00Z").appended([rep(91.0, "2026-12-07T04:00:05Z")])
    assert single.replicates == [Replicate(6, "2026-12-07T04:00:00Z"), Replicate(6, "2026-12-07T04:00:05Z")]


def test_interleaved_sides_are_not_stale_whichever_came_last() -> None:
    """A loop of current-then-baseline rounds ends on the baseline: its last run is the latest, yet
    the current side's runs are this loop's (they came after the baseline's first)."""
    t = [f"2026-12-07T05:00:0{i}Z" for i in range(4)]
    current = Timing.from_replicates([rep(100.0, t[0]), rep(100.0, t[2])])
    baseline = Timing.from_replicates([rep(100.0, t[1]), rep(100.0, t[3])])
    assert staleness(baseline, current) is None
    # a current side all before the baseline's first run is still left over
    early = Timing.from_replicates([rep(100.0, "2026-12-06T05:00:00Z"), rep(100.0, "2026-12-06T05:00:05Z")])
    assert "before its baseline" in staleness(baseline, early)
