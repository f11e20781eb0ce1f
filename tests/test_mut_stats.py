"""The p-values `compare` judges by, pinned against scipy's own computations.

Why: a mutation run found two lines of deployopt.timing that no test would miss. A one-sided p in
`replicate_t_test` (half the true p) made `compare` call 3-against-3 replicates whose two-sided p
is 0.015 "slower" at --alpha 0.01 (exit 1); an exact/asymptotic choice of the Mann-Whitney test
that went asymptotic when *either* side had more than 8 samples made 2 runs against 30 that never
overlap (exact p 0.004, "slower") a refusal ("could never find a difference", exit 2). Every case
here is checked against an independent scipy call, or a hand count, not against the code itself.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_cli
from scipy.stats import mannwhitneyu, ttest_ind

from deployopt.timing import (
    Replicate,
    Timing,
    compare,
    compare_replicates,
    replicate_t_test,
    smallest_p_value,
    u_test,
)

#: 3 against 3 replicate medians whose two-sided pooled t-test on the logs gives p = 0.0151: between
#: alpha 0.01 and 2 × alpha, where a one-sided p (0.0075) would cross alpha
BASE_MEDIANS = [1000.0, 1010.0, 990.0]
SLOWER_MEDIANS = [1035.0, 1046.0, 1024.0]


def _replicated(medians: list[float]) -> Timing:
    """A `bench --repeat` result: 5 samples around each replicate median (that median exactly)."""
    samples = [m + d for m in medians for d in (-2.0, -1.0, 0.0, 1.0, 2.0)]
    return Timing(
        "ort",
        samples,
        warmup=5,
        timed="fake",
        environment={"device": "cpu"},
        replicates=[Replicate(5) for _ in medians],
    )


def _save(path: Path, t: Timing) -> str:
    path.write_text(json.dumps(t.to_json()))
    return str(path)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (BASE_MEDIANS, SLOWER_MEDIANS),
        ([1000.0, 1010.0, 990.0], [980.0, 1001.0, 975.0, 990.0]),
        ([500.0], [510.0, 530.0, 520.0]),  # a baseline of one run: judged by the other side's spread
        ([2333.6, 2176.2, 2148.2], [2169.4, 2343.9, 2177.8]),  # the H100's A/A medians
    ],
)
def test_replicate_t_test_is_scipys_two_sided_pooled_t_on_the_logs(a: list[float], b: list[float]) -> None:
    t, df, p, diff, se = replicate_t_test(a, b)
    ref = ttest_ind(np.log(b), np.log(a), equal_var=True, alternative="two-sided")
    assert t == pytest.approx(ref.statistic, rel=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=1e-9)
    assert df == len(a) + len(b) - 2
    assert diff == pytest.approx(np.log(b).mean() - np.log(a).mean(), rel=1e-12)
    assert se == pytest.approx(diff / ref.statistic, rel=1e-12)


def test_a_replicate_p_between_alpha_and_twice_alpha_is_no_verdict() -> None:
    """Two-sided p 0.0151: not significant at alpha 0.01, slower at 0.02 (not halved, nor doubled)."""
    a, b = _replicated(BASE_MEDIANS), _replicated(SLOWER_MEDIANS)
    expected = ttest_ind(np.log(SLOWER_MEDIANS), np.log(BASE_MEDIANS)).pvalue
    assert expected == pytest.approx(0.0151, abs=5e-5)
    at_001 = compare_replicates(a, b, alpha=0.01, min_effect=0.01)
    assert at_001.verdict == "no significant difference"
    assert at_001.p_value == pytest.approx(expected, rel=1e-9)
    assert compare_replicates(a, b, alpha=0.02, min_effect=0.01).verdict == "slower"


def test_compare_cli_does_not_call_a_replicated_p_of_0015_a_regression(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base = _save(tmp_path / "base.json", _replicated(BASE_MEDIANS))
    cur = _save(tmp_path / "cur.json", _replicated(SLOWER_MEDIANS))
    code, out, err = run_cli(monkeypatch, capsys, "compare", base, cur)
    assert code == 0, out + err
    row = next(line for line in out.splitlines() if line.startswith("│ cur"))
    assert "│ 0.015 │ not significant │" in row, row
    assert "0 regressions in 1 compared" in out
    code, out, err = run_cli(monkeypatch, capsys, "compare", base, cur, "--alpha", "0.02")
    assert code == 1, out + err
    assert "1 regression in 1 compared; slower: cur" in out


@pytest.mark.parametrize(("n1", "n2"), [(2, 30), (30, 2), (5, 20), (8, 9), (3, 12), (8, 40)])
def test_u_test_is_exact_when_either_side_has_8_or_fewer(n1: int, n2: int) -> None:
    """scipy's own rule for tie-free samples: exact unless both sides have more than 8."""
    rng = np.random.default_rng(n1 * 100 + n2)
    a = list(1000.0 + rng.permutation(n1 + n2)[:n1] * 1.5)  # interleaved, tie-free
    b = sorted(set(1000.0 + np.arange(n1 + n2) * 1.5) - set(a))
    assert len(b) == n2
    u, p = u_test(a, b)
    ref = mannwhitneyu(a, b, alternative="two-sided", method="exact")
    assert (u, p) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-12)
    apart = u_test(list(range(n1)), [100.0 + i for i in range(n2)])[1]
    assert apart == pytest.approx(2 / math.comb(n1 + n2, n1), rel=1e-12)  # no overlap: 2 of every split
    assert smallest_p_value(n1, n2) == pytest.approx(2 / math.comb(n1 + n2, n1), rel=1e-12)


@pytest.mark.parametrize(("n1", "n2"), [(9, 9), (9, 30)])
def test_u_test_is_asymptotic_when_both_sides_have_more_than_8(n1: int, n2: int) -> None:
    a, b = list(range(n1)), [100.0 + i for i in range(n2)]
    ref = mannwhitneyu(a, b, alternative="two-sided", method="asymptotic").pvalue
    assert u_test(a, b)[1] == pytest.approx(ref, rel=1e-12)
    assert smallest_p_value(n1, n2) == pytest.approx(ref, rel=1e-12)


def test_two_runs_against_thirty_that_never_overlap_are_slower() -> None:
    """Exact p = 2 / C(32, 2) = 0.004 < 0.01: a verdict (the normal approximation said 0.022)."""
    base = Timing("ort", [1000.0, 1001.0], warmup=5, timed="fake")
    cur = Timing("ort", [1050.0 + 0.5 * i for i in range(30)], warmup=5, timed="fake")
    c = compare(base, cur, alpha=0.01)
    assert c.verdict == "slower"
    assert c.p_value == pytest.approx(2 / math.comb(32, 2), rel=1e-12)


def test_compare_cli_reports_a_regression_of_2_runs_against_30(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = {"device": "cpu"}
    base = _save(tmp_path / "base.json", Timing("ort", [1000.0, 1001.0], 5, "fake", env))
    cur = _save(tmp_path / "cur.json", Timing("ort", [1050.0 + 0.5 * i for i in range(30)], 5, "fake", env))
    code, out, err = run_cli(monkeypatch, capsys, "compare", base, cur)
    assert code == 1, out + err
    assert "could never find a difference" not in err
    row = next(line for line in out.splitlines() if line.startswith("│ cur"))
    assert "│ 0.004 │ slower" in row, row
    assert "1 regression in 1 compared; slower: cur" in out
