"""compare's within-run stability check: a side whose latency moved between the first and second
half of its run (in time order) by at least the pair's change leaves the pair without a verdict.

The bug bash: 60 back-to-back ort benches of one model on a shared 2-core host, compared in
disjoint A/A pairs at the defaults, got "faster"/"slower" in 16 of 30 (e.g. +354 %, p 6.8e-08):
one run's samples are serially correlated under host load, so the U test, which takes them as
independent, is anti-conservative. Synthetic samples only: no timing, no host load.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli

from deployopt.regression import compare_paths, compare_timings
from deployopt.timing import DRIFT_MIN_RUNS, Timing, within_run_drift

MODEL = {"file": "m.onnx", "sha256": "ab" * 32}


def steady(median: float, n: int = 200, seed: int = 0, rel: float = 0.002) -> list[float]:
    """A stationary, GPU-like run: iid samples around `median` (spread `rel` of it)."""
    rng = np.random.default_rng(seed)
    return list(median + rng.normal(0.0, median * rel, n))


def stepped(first: float, second: float, n: int = 200, seed: int = 1) -> list[float]:
    """A run whose host load stepped halfway: its first half around `first`, the rest around `second`."""
    return steady(first, n // 2, seed) + steady(second, n - n // 2, seed + 100)


def write(path: Path, samples: list[float]) -> Path:
    t = Timing("ort", samples, 5, "one forward pass", {"cpu": "AMD EPYC"}, model=MODEL)
    path.write_text(json.dumps(t.to_json()))
    return path


def test_a_steady_run_does_not_drift_and_a_stepped_one_does() -> None:
    d = within_run_drift(Timing("ort", steady(1000.0)), alpha=0.01, min_effect=0.02)
    assert d is not None and not d.drifted and d.runs == 200
    d = within_run_drift(Timing("ort", stepped(1000.0, 1120.0)), alpha=0.01, min_effect=0.02)
    assert d is not None and d.drifted and d.p_value < 0.01
    assert d.change_pct == pytest.approx(12.0, abs=0.5)
    # a step under --min-effect is not drift, however significant
    d = within_run_drift(Timing("ort", stepped(1000.0, 1010.0)), alpha=0.01, min_effect=0.02)
    assert d is not None and d.p_value < 0.01 and not d.drifted
    # too few samples to halve: not checked (None), not "steady"
    assert within_run_drift(Timing("ort", stepped(1000.0, 1500.0, n=DRIFT_MIN_RUNS - 1)), 0.01, 0.02) is None


def test_a_slower_side_that_drifted_gets_no_verdict() -> None:
    """The old rule called this pair "slower" (exit 1) on the strength of the current run's second
    half; now no verdict, with both sides' drift figures."""
    base, cur = Timing("ort", steady(1000.0)), Timing("ort", stepped(1000.0, 1300.0))
    c = compare_timings(base, cur)
    assert c.unstable and c.verdict == "no significant difference" and not c.size_uncertain
    assert c.drift is not None
    d_base, d_cur = c.drift
    assert d_base is not None and not d_base.drifted
    assert d_cur is not None and d_cur.drifted and d_cur.change_pct == pytest.approx(30.0, abs=1.0)
    assert "current drifted +30" in c.describe() and "baseline drifted" not in c.describe()


def test_steady_gpu_like_runs_keep_their_verdicts() -> None:
    """The quiet case: stationary samples never trip the check, so a real +5 % stays "slower"
    and two runs of the same latency stay "not significant"."""
    for seed in range(20):
        a, b = Timing("torch", steady(1000.0, seed=seed)), Timing("torch", steady(1050.0, seed=seed + 50))
        c = compare_timings(a, b)
        assert c.verdict == "slower" and not c.unstable
        same = compare_timings(a, Timing("torch", steady(1000.0, seed=seed + 99)))
        assert same.verdict == "no significant difference" and not same.unstable


def test_cli_says_which_side_drifted_and_strict_fails(monkeypatch, capsys, tmp_path: Path) -> None:
    a = write(tmp_path / "base.json", steady(1000.0))
    b = write(tmp_path / "cur.json", stepped(1000.0, 1123.0))
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(a), str(b))
    row = next(line for line in out.splitlines() if line.startswith("│ cur "))
    assert "unstable: current drifted +12" in row and "within its run (first half → second half)" in row
    assert "slower" not in row and code == 0  # no verdict: the "no verdict" convention (as mixed)
    assert "(1 unstable: no verdict)" in out and "warning: cur: unstable, no verdict" in err
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(a), str(b), "--strict")
    assert code == 1 and "FAILED (--strict)" in err and "1 pair(s) unstable within a run" in err
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(a), str(b), "--json")
    doc = json.loads(out)
    pair = doc["pairs"][0]
    assert code == 0 and pair["unstable"] is True and pair["verdict"] == "no significant difference"
    assert doc["unstable"] == ["cur"] and "stability" in doc["rule"]
    assert pair["drift"]["baseline"]["drifted"] is False
    cur = pair["drift"]["current"]
    assert cur["drifted"] is True and cur["runs"] == 200 and cur["p_value"] < 0.01
    assert cur["change_pct"] == pytest.approx(12.3, abs=0.5)
    assert cur["second_half_median_us"] > cur["first_half_median_us"]


def test_short_sides_are_not_checked(tmp_path: Path) -> None:
    """Fewer than DRIFT_MIN_RUNS samples: no check, drift null, the verdict as before."""
    a = write(tmp_path / "a.json", steady(1000.0, n=8))
    b = write(tmp_path / "b.json", steady(1300.0, n=8, seed=3))
    pair = compare_paths(a, b).pairs[0].to_json()
    assert pair["verdict"] == "slower" and pair["unstable"] is False
    assert pair["drift"] == {"baseline": None, "current": None}


def test_a_drift_smaller_than_the_change_keeps_the_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On an H100 every torch run slowed its first 100 of 200 runs by about 2 % (a warm-up too
    short): withholding every such pair's verdict hid a 30 % regression too. A drift smaller than
    the change keeps the verdict, with a note; one as large as it still withholds it."""
    warm = [s * (1.025 if i < 100 else 1.0) for i, s in enumerate(steady(2300.0, seed=3))]
    slow = [s * 1.3 for s in warm]
    c = compare_timings(Timing("torch", warm), Timing("torch", slow))
    assert c.drift is not None and c.drift[0] is not None and c.drift[0].drifted
    assert not c.unstable and c.verdict == "slower"
    a, b = write(tmp_path / "a.json", warm), write(tmp_path / "b.json", slow)
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(a), str(b))
    assert code == 1, out + err
    assert "less than the change between the runs, so the verdict stands" in out + err
    # a change no larger than the drift: no verdict
    close = [s * 1.02 for s in steady(2300.0, seed=4)]
    c = compare_timings(Timing("torch", warm), Timing("torch", close))
    assert c.unstable and c.verdict == "no significant difference"


def test_a_half_of_zeros_is_not_checked_and_no_traceback(tmp_path: Path) -> None:
    """A current run whose first half reads 0 µs passes check_samples (its median is 50 µs); the
    drift's change from 0 µs was a ZeroDivisionError traceback (review)."""
    cur = [0.0] * 10 + steady(100.0, n=10, seed=5)
    assert within_run_drift(Timing("ort", cur), 0.01, 0.02) is None
    report = compare_paths(write(tmp_path / "a.json", steady(100.0, n=20)), write(tmp_path / "b.json", cur))
    assert json.loads(json.dumps(report.to_json(), allow_nan=False))["pairs"][0]["drift"]["current"] is None
    # a second half of zeros is a drift all the same (-100 %), as before
    d = within_run_drift(Timing("ort", steady(100.0, n=11, seed=6) + [0.0] * 10), 0.01, 0.02)
    assert d is not None and d.drifted and d.change_pct == -100.0
