"""`bench`'s note on a result too short for `compare`, for a result of several replicates.

Why: `bench --runs 1 --warmup 2 --repeat 3 -o s1.json` said "3 runs: compare needs at least 5 per side
… use --runs 5", counting the replicates' samples as one run, but compare judges such a result by a
t-test on its replicates' medians (timing.REPLICATE_MIN_PER_SIDE: 2 replicates a side; 1 against
3 until 2026-12-07), and --runs does not enter that test's count.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from cli_runner import run_cli

from deployopt.layers import ConvShape, conv_model

RUNS = ("--backend", "ort", "--runs", "1", "--warmup", "2")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("note") / "conv.onnx"
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 16)), str(path))
    return path


def test_a_replicated_result_is_noted_by_its_replicates_not_its_runs(
    monkeypatch, capsys, model: Path, tmp_path: Path
) -> None:
    s1 = tmp_path / "s1.json"
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *RUNS, "--repeat", "3", "-o", str(s1))
    assert code == 0
    assert err == (
        "note: 3 replicates of 1 run: `deployopt compare` judges a result of several replicates by a t-test "
        "on their medians, not on the runs within each, and needs 2 replicates a side: 3 is enough against "
        "another result of 2 or more, not against a result of one run (bench that side with --repeat too)\n"
    )
    assert "--runs 5" not in err
    # and compare does judge it, on the replicates, against another such result
    s2 = tmp_path / "s2.json"
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *RUNS, "--repeat", "2", "-o", str(s2))
    assert code == 0
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(s2), str(s1), "--json")
    assert code in (0, 1), err
    assert json.loads(out)["pairs"][0]["test"]["replicates"] == {"baseline": 2, "current": 3}
    # not against a result of one run of 5 samples (1 against 3 was judged until 2026-12-07)
    one = tmp_path / "one.json"
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "bench",
        str(model),
        "--backend",
        "ort",
        "--runs",
        "5",
        "--warmup",
        "2",
        "-o",
        str(one),
    )
    assert code == 0 and err == ""
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(one), str(s1), "--json")
    assert code == 2 and out == "" and err.count("\n") == 1 and "too few replicates" in err


def test_two_replicates_say_they_cannot_meet_a_one_run_result(
    monkeypatch, capsys, model: Path, tmp_path: Path
) -> None:
    two = tmp_path / "two.json"
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *RUNS, "--repeat", "2", "-o", str(two))
    assert code == 0
    assert err.startswith("note: 2 replicates of 1 run: `deployopt compare` judges a result of several")
    assert err.endswith(
        "2 is enough against another result of 2 or more, not against a result of one run (bench that side "
        "with --repeat too)\n"
    )
    # --append counts the file's replicates and the new one: three now, and still not against one run
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *RUNS, "--append", "-o", str(two))
    assert code == 0 and err.startswith("note: 3 replicates of 1 run:")
    assert "3 is enough against another" in err
    # one run: the note as before
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *RUNS)
    assert code == 0 and err.startswith("note: 1 run: `deployopt compare` needs at least 5 per side")
