"""deployopt.timing on samples whose statistics are known by hand."""

from __future__ import annotations

import numpy as np
import pytest

from deployopt.timing import Timing, bootstrap_median_ci, compare


def test_median_and_iqr_of_known_samples() -> None:
    t = Timing("ort", [5.0, 1.0, 4.0, 2.0, 3.0], warmup=2)
    assert t.runs == 5
    assert t.median_us == 3.0
    assert t.iqr_us == 2.0  # quartiles 2 and 4 (linear interpolation)
    even = Timing("ort", [10.0, 20.0, 30.0, 40.0])
    assert even.median_us == 25.0
    assert even.iqr_us == pytest.approx(32.5 - 17.5)  # quartiles at positions 0.75 and 2.25


def test_bootstrap_ci_is_seeded_and_brackets_the_median() -> None:
    samples = [100.0 + i for i in range(21)]  # median 110
    lo, hi = bootstrap_median_ci(samples)
    assert (lo, hi) == bootstrap_median_ci(samples)  # reproducible
    assert 100.0 <= lo < 110.0 < hi <= 120.0
    lo50, hi50 = bootstrap_median_ci(samples, level=0.5)
    assert lo <= lo50 and hi50 <= hi and (hi50 - lo50) < (hi - lo)


def test_bootstrap_ci_bounds_are_the_two_sided_quantiles_of_the_resampled_median() -> None:
    """Samples 0..40: the median of a resample is its 21st order statistic, so
    P(median <= k) = P(Binomial(41, (k + 1) / 41) >= 21), which is 0.018, 0.039 at k = 13, 14 and
    0.961, 0.982 at k = 25, 26. The 2.5 % and 97.5 % quantiles are 14 and 26 whatever the seed; a
    one-sided 5 % split would give the 90 % interval [15, 25]."""
    samples = [float(i) for i in range(41)]
    for seed in (0, 1, 2):
        assert bootstrap_median_ci(samples, seed=seed) == (14.0, 26.0)
    assert bootstrap_median_ci(samples, level=0.90) == (15.0, 25.0)


def test_bootstrap_ci_degenerate_cases() -> None:
    assert bootstrap_median_ci([7.5]) == (7.5, 7.5)
    assert bootstrap_median_ci([3.0] * 12) == (3.0, 3.0)


def test_timing_needs_samples() -> None:
    with pytest.raises(ValueError, match="at least one sample"):
        Timing("ort", [])


def test_to_json_round_trip_and_keys() -> None:
    t = Timing("torch", [1.0, 2.0, 3.0, 2.5, 1.5, 2.0], warmup=4, timed="x", environment={"gpu": "H200"})
    d = t.to_json()
    assert list(d) == [
        "backend", "measured", "median_us", "iqr_us", "ci95_us", "runs", "warmup", "samples_us", "timed",
        "environment",
    ]  # fmt: skip
    assert d["median_us"] == 2.0 and d["runs"] == 6 and d["warmup"] == 4
    assert d["ci95_us"] == list(t.ci95_us)
    back = Timing.from_json(d)
    assert back.samples_us == t.samples_us and back.timed == "x" and back.environment == {"gpu": "H200"}
    assert "measured on torch (H200): 2.0 µs median" in t.describe()
    # how cuDNN chose kernels is part of where it was measured (torch worker environments)
    env = {"device": "H200, 8 SMs (green context)", "device_sms": 132, "cudnn_benchmark": False}
    heur = Timing("torch", [1.0, 2.0, 3.0], environment=env)
    assert heur.describe().startswith(
        "measured on torch (H200, 8 SMs (green context); "
        "cuDNN heuristics, no autotuning (cudnn.benchmark off)):"
    )
    tuned = Timing("torch", [1.0], environment={**env, "cudnn_benchmark": True, "cudnn_benchmark_limit": 0})
    assert "(H200, 8 SMs (green context); cuDNN: all engines timed)" in tuned.describe()
    # on the whole GPU the SM count is said too (the device name alone read like any GPU of that name)
    full = {
        "device": "NVIDIA H200",
        "device_sms": 132,
        "sms": 132,
        "sms_requested": None,
        "cudnn_benchmark": True,
    }
    assert (
        Timing("torch", [1.0], environment={**full, "cudnn_benchmark_limit": 0})
        .describe()
        .startswith("measured on torch (NVIDIA H200, full GPU (132 SMs); cuDNN: all engines timed):")
    )
    assert (
        "(H200, 8 SMs (green context); cuDNN"
        in Timing("torch", [1.0], environment={**env, "sms_requested": 8}).describe()
    )


def test_fewer_runs_than_a_95_percent_ci_of_the_median_needs_have_none() -> None:
    """Of n samples even their range [min, max] holds the median only with probability
    1 - 2 * 0.5**n (93.75 % at 5 runs, 96.9 % at 6): below 6 runs there is no 95 % CI, and the
    bootstrap's interval, which was exactly that range for 2 to 5 runs, is not shown as one. The
    IQR still is."""
    from deployopt.timing import CI_MIN_RUNS

    assert CI_MIN_RUNS == 6
    assert 1 - 2 * 0.5**5 < 0.95 <= 1 - 2 * 0.5**6
    for n in range(2, 6):
        samples = [float(100 + 7 * i % 11) for i in range(n)]
        t = Timing("ort", samples)
        assert t.ci95_us == (min(samples), max(samples))  # what was labelled a 95 % CI
        assert t.spread_known and not t.ci_known
        d = t.to_json()
        assert d["ci95_us"] is None and d["iqr_us"] == t.iqr_us
        assert t.ci_text() == f"n/a ({n} runs; a 95% CI of the median needs 6)"
        assert "no 95% CI (a CI of the median needs 6 runs)" in t.describe()
    six = Timing("ort", [100.0, 101.0, 99.0, 102.0, 98.0, 100.5])
    assert six.ci_known and six.to_json()["ci95_us"] == list(six.ci95_us)
    assert "95% CI [" in six.describe()


def test_one_measured_sample_has_no_spread() -> None:
    """One run gives an IQR of 0 and a CI [x, x] that only look exact: not available, null in JSON."""
    one = Timing("ort", [7.5])
    assert not one.spread_known and one.spread_text() == "n/a (1 run)"
    d = one.to_json()
    assert d["iqr_us"] is None and d["ci95_us"] is None and d["median_us"] == 7.5
    assert Timing.from_json(d).samples_us == [7.5]  # still loads (compare refuses it on its count)
    assert one.describe() == "measured on ort: 7.5 µs, IQR and CI n/a (1 run)"
    two = Timing("ort", [7.0, 8.0])
    assert two.spread_known and two.to_json()["iqr_us"] == 0.5
    predicted = Timing("model", [12.0], measured=False, predictor="wave model")
    assert predicted.spread_known  # deterministic: tables show no spread missing


def test_predicted_timing_says_so() -> None:
    t = Timing("model", [12.0], measured=False, predictor="wave model")
    assert t.describe() == "predicted by wave model: 12.0 µs (not measured)"
    d = t.to_json()
    assert d["predictor"] == "wave model"
    # no spread, runs or warmup: `runs: 1, iqr_us: 0, ci95_us: [12, 12]` read as one exact sample,
    # beside the optimize report's own row of the same latency saying null (bug bash)
    assert d["iqr_us"] is None and d["ci95_us"] is None and d["runs"] is None and d["warmup"] is None
    back = Timing.from_json(d)  # the journal and the layer cache read it back
    assert back == t and back.to_json() == d


def _noisy(center: float, n: int = 40, seed: int = 1) -> Timing:
    rng = np.random.default_rng(seed)
    return Timing("torch", list(center + rng.normal(0, center * 0.002, n)))


def test_compare_faster_slower_and_no_difference() -> None:
    a = _noisy(100.0)
    faster = compare(a, _noisy(90.0, seed=2))
    assert faster.verdict == "faster"
    assert faster.ratio == pytest.approx(0.9, abs=0.002)
    assert faster.describe().startswith("faster: -10.0%")
    assert compare(a, _noisy(110.0, seed=3)).verdict == "slower"
    same = compare(a, _noisy(100.0, seed=4))
    assert same.verdict == "no significant difference"


def test_compare_ignores_significant_but_tiny_differences() -> None:
    a = _noisy(100.0)
    b = _noisy(100.5, seed=5)  # 0.5 % slower: significant with 40 samples, below the 1 % minimum effect
    c = compare(a, b)
    assert c.p_value < 0.01
    assert c.verdict == "no significant difference"
    assert compare(a, b, min_effect=0.001).verdict == "slower"


def test_compare_single_samples() -> None:
    assert compare(Timing("m", [10.0]), Timing("m", [8.0])).verdict == "faster"
    same = compare(Timing("m", [10.0]), Timing("m", [10.0]))
    assert same.verdict == "no significant difference" and same.p_value == 1.0
    assert compare(Timing("m", [10.0]), Timing("m", [8.0])).p_value == 0.0
    # equal single samples are no difference even when any effect counts (the p-value alone decides)
    assert (
        compare(Timing("m", [10.0]), Timing("m", [10.0]), min_effect=0.0).verdict
        == "no significant difference"
    )


def test_build_median_ci_includes_the_spread_between_builds() -> None:
    from deployopt.timing import bootstrap_median_ci, build_median_ci

    rng = np.random.default_rng(1)
    # three builds of one model whose medians differ by ~0.3 % (as two H200 builds did), tight within
    builds = [1000.0 + shift + rng.normal(0, 0.5, 100) for shift in (0.0, 3.0, -1.5)]
    pooled = np.concatenate(builds)
    lo_s, hi_s = bootstrap_median_ci(pooled)
    lo_b, hi_b = build_median_ci(builds)
    assert lo_b <= np.median(pooled) <= hi_b
    assert (hi_b - lo_b) > 3 * (hi_s - lo_s)  # the per-sample CI ignores the build spread
    assert lo_b <= 998.6 and hi_b >= 1002.9  # reaches towards the lowest and highest build
    # one build: the plain bootstrap; seeded, so the same on every run
    assert build_median_ci([builds[0]]) == bootstrap_median_ci(builds[0])
    assert build_median_ci(builds) == (lo_b, hi_b)
    with pytest.raises(ValueError, match="no samples"):
        build_median_ci([])


def test_build_median_ci_of_builds_of_different_sizes_matches_the_equal_size_draw() -> None:
    """Builds of different sizes take the per-resample loop instead of the vectorised draw: one
    sample fewer in one build must give (nearly) the same interval, and it still spans the builds."""
    from deployopt.timing import build_median_ci

    rng = np.random.default_rng(1)
    builds = [1000.0 + shift + rng.normal(0, 0.5, 100) for shift in (0.0, 3.0, -1.5)]
    equal = build_median_ci(builds)
    unequal = build_median_ci([builds[0], builds[1], builds[2][:99]])
    assert unequal == pytest.approx(equal, abs=0.05)
    assert unequal[0] <= 998.6 and unequal[1] >= 1002.9
    assert build_median_ci([builds[0], builds[1], builds[2][:99]]) == unequal  # seeded


def test_counted_puts_the_noun_in_the_right_number() -> None:
    """One shared wording for counts in CLI and report text: `--runs 1` printed '1 runs'."""
    from deployopt.timing import counted

    assert [counted(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert counted(1, "sample") == "1 sample"


def test_tied_samples_at_the_fewest_runs_still_reach_a_verdict() -> None:
    """Timer samples are quantized, so ties are common; with any tie scipy's "auto" used the normal
    approximation, whose smallest p at 5 against 5 is 0.012: every current run 1.5× every baseline
    run was "not significant" at --alpha 0.01, though the count check (tie-free) let it through."""
    from deployopt.timing import smallest_p_value

    base = [100.0, 100.0, 101.0, 101.0, 102.0]
    result = compare(Timing("torch", base), Timing("torch", [1.5 * x for x in base]), alpha=0.01)
    assert result.verdict == "slower" and result.p_value == pytest.approx(smallest_p_value(5, 5))
    assert smallest_p_value(5, 5) < 0.01


def test_a_change_of_exactly_min_effect_counts() -> None:
    """1025.61 / 1005.5 is 1.0199999…: a +2.000 % change at --min-effect 0.02 was "under min
    effect", though the docs say a change of at least it counts."""

    def around(median: float) -> list[float]:
        samples = [median - 5 + i * 0.5 for i in range(21)]
        samples[10] = median
        return samples

    result = compare(
        Timing("ort", around(1005.5)), Timing("ort", around(1025.61)), alpha=0.01, min_effect=0.02
    )
    assert result.verdict == "slower"


def test_a_median_that_moves_against_the_ranks_gives_no_verdict() -> None:
    """Bimodal samples: the current median is 3 % higher, but most current runs beat most baseline
    runs (p 2.7e-6 two-sided). It was "slower", exit 1, on a test that found the current faster."""
    base = [50.0 + i * 0.01 for i in range(45)] + [100.0 + i * 0.01 for i in range(11)]
    base += [1000.0 + i for i in range(44)]
    cur = [10.0 + i * 0.01 for i in range(45)] + [103.0 + i * 0.01 for i in range(11)]
    cur += [104.0 + i * 0.01 for i in range(44)]
    result = compare(Timing("ort", base), Timing("ort", cur), alpha=0.01, min_effect=0.02)
    assert result.ratio == pytest.approx(1.03, abs=1e-3) and result.p_value < 0.01
    assert result.verdict == "no significant difference" and result.mixed
    plain = compare(Timing("ort", base), Timing("ort", [2 * x for x in base]), alpha=0.01)
    assert plain.verdict == "slower" and not plain.mixed


def test_a_sample_too_large_for_a_float_is_not_a_latency() -> None:
    """10**400 is valid JSON; math.isfinite raised OverflowError on it: a traceback and exit 1,
    which CI reads as a regression."""
    from deployopt.timing import is_latency

    assert not is_latency(10**400) and is_latency(10**6) and not is_latency(float("inf"))


def test_the_bootstrap_ci_is_drawn_in_blocks_with_the_same_result() -> None:
    """One (2000, n) index draw took 4.8 GB for two 100 000-run records: the resamples are drawn in
    blocks of ~4M indices now (here 3 blocks for 5000 runs), and the CI is the one a single draw
    gives, value for value, so recorded CIs reproduce."""
    x = np.random.default_rng(1).standard_normal(5000) + 100.0
    idx = np.random.default_rng(0).integers(0, x.size, size=(2000, x.size))
    lo, hi = np.quantile(np.median(x[idx], axis=1), [0.025, 0.975])
    assert bootstrap_median_ci(x) == (float(lo), float(hi))


def test_equal_medians_give_no_direction_at_any_min_effect() -> None:
    """Two medians of 100.0 µs, most current runs faster (p 0.006): at --min-effect 0 the pair was
    "slower" (ratio < 1 is false), exit 1, for a change of +0.0 %. Equal medians moved neither way,
    so the ranks that did disagree with them: no verdict, read as mixed, at every min effect."""
    base = [99.0] * 20 + [100.0] * 11 + [110.0] * 20
    cur = [90.0] * 20 + [100.0] * 11 + [101.0] * 20
    for min_effect in (0.0, 0.02):
        result = compare(Timing("ort", base), Timing("ort", cur), alpha=0.01, min_effect=min_effect)
        assert result.ratio == 1.0 and result.p_value < 0.01
        assert result.verdict == "no significant difference" and result.mixed, min_effect
    # the same samples give no verdict at all where the test finds nothing (p >= alpha): not mixed
    same = compare(Timing("ort", base), Timing("ort", list(base)), alpha=0.01, min_effect=0.0)
    assert same.verdict == "no significant difference" and not same.mixed
    # a verdict still needs only a change of at least min effect: 0 counts any moved median
    moved = compare(Timing("ort", base), Timing("ort", [x - 1 for x in base]), alpha=0.01, min_effect=0.0)
    assert moved.verdict == "faster"


def test_few_tied_samples_get_the_exact_p_of_every_split() -> None:
    """Quantized timer samples tie. scipy's exact Mann-Whitney assumes no ties: [100]*4+[110]*2
    against [110]*2+[120]*4 got p = 0.0087, a verdict at --alpha 0.01, where counting every one
    of the 924 splits of the pooled samples (by U) gives 12/924 = 0.013: not significant."""
    from itertools import combinations

    a = [100.0] * 4 + [110.0] * 2
    b = [110.0] * 2 + [120.0] * 4
    pooled = a + b

    def u(xs: list[float], ys: list[float]) -> float:
        return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in xs for y in ys)

    seen = u(a, b)
    splits = [
        u([pooled[i] for i in pick], [pooled[i] for i in range(12) if i not in pick])
        for pick in combinations(range(12), 6)
    ]
    want = 2 * min(np.mean([s <= seen for s in splits]), np.mean([s >= seen for s in splits]))
    result = compare(Timing("torch", a), Timing("torch", b), alpha=0.01)
    assert result.p_value == pytest.approx(want) and want == pytest.approx(12 / 924)
    assert result.verdict != "slower"
