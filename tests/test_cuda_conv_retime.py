"""Re-timing of spikes in `cuda_conv.time_convs`: a width timed far over its neighbours (something
outside the conv held the GPU, as on the lent H100s of benchmarks/results/h100_rounds) is timed
again and keeps its lowest median; a real step of the staircase, timed the same again, stays. No
GPU here: torch and the timing of one conv are stood in for."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from deployopt.backends import cuda_conv
from deployopt.layers import ConvShape


@pytest.mark.parametrize(
    ("medians", "expected"),
    [
        ([5, 5, 20, 5, 5], [2]),
        ([5, 5, 5, 10, 10, 10], []),  # a step up that stays up: not a spike
        ([5, 5, 10, 5, 5], []),  # 2× exactly: not over
        ([5, 5, 30, 30, 5, 5], [2, 3]),  # two together: the median of the neighbours still sees both
        ([40, 5, 5, 5], [0]),  # at the edge, with neighbours on one side only
        ([5.0], []),
    ],
)
def test_spikes_are_times_over_twice_the_median_of_their_neighbours(
    medians: list[float], expected: list[int]
) -> None:
    assert cuda_conv.spikes(medians) == expected


def _shapes(n: int) -> list[ConvShape]:
    return [ConvShape(1, 64, 28, 28, 16 * (i + 1), 3, 3, (1, 1), (1, 1)) for i in range(n)]


def _stand_in(monkeypatch: pytest.MonkeyPatch, script: dict[int, list[float]]) -> list[int]:
    """torch stood in for; `_time_one` gives shape k's next scripted median (7 equal samples), 5 µs
    when nothing is scripted. Returns the out-channel counts in the order they were timed."""
    fake_torch = SimpleNamespace(
        backends=SimpleNamespace(cudnn=SimpleNamespace(benchmark=None)),
        cuda=SimpleNamespace(empty_cache=lambda: None),
    )
    monkeypatch.setattr(cuda_conv, "_torch", lambda: fake_torch)
    calls: list[int] = []

    def time_one(shape: ConvShape, dtype: str, samples: int, target_ms: float) -> list[float]:
        calls.append(shape.k)
        queue = script.get(shape.k, [])
        return [queue.pop(0) if queue else 5.0] * samples

    monkeypatch.setattr(cuda_conv, "_time_one", time_one)
    return calls


def test_a_spike_is_timed_again_and_keeps_the_lower_median(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stand_in(monkeypatch, {48: [60.0, 5.2]})
    results = cuda_conv.time_convs(_shapes(5))
    assert calls == [16, 32, 48, 64, 80, 48]  # the spike once more; its neighbours are not re-timed
    assert results[2]["median_us"] == 5.2
    assert results[2]["samples_us"] == [5.2] * 7
    assert results[2]["retimed_medians_us"] == [60.0, 5.2]
    assert all("retimed_medians_us" not in r for i, r in enumerate(results) if i != 2)


def test_a_width_slow_every_time_keeps_its_first_timing_after_the_retimes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real step (the same time again) is timed RETIMES more times and stays; `retime=0` times once."""
    calls = _stand_in(monkeypatch, {48: [30.0, 31.0, 30.5]})
    results = cuda_conv.time_convs(_shapes(5))
    assert calls.count(48) == 1 + cuda_conv.RETIMES
    assert results[2]["median_us"] == 30.0
    assert results[2]["retimed_medians_us"] == [30.0, 31.0, 30.5]

    calls = _stand_in(monkeypatch, {48: [30.0]})
    results = cuda_conv.time_convs(_shapes(5), retime=0)
    assert calls == [16, 32, 48, 64, 80]
    assert results[2]["median_us"] == 30.0 and "retimed_medians_us" not in results[2]


def test_the_torch_session_says_when_a_conv_was_timed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `staircase --measure torch` and `calibrate` print and record as how a width was timed."""
    from deployopt.backends.torch import TorchSession

    session: Any = object.__new__(TorchSession)
    monkeypatch.setattr(TorchSession, "cuda", property(lambda self: True))
    results = [
        {"samples_us": [5.0] * 3, "median_us": 5.0, "iqr_us": 0.0, "kernels": []},
        {
            "samples_us": [5.2] * 3,
            "median_us": 5.2,
            "iqr_us": 0.0,
            "kernels": [],
            "retimed_medians_us": [60.0, 5.2],
        },
    ]
    session._call = lambda req, what: {"results": results, "environment": {}, "where": "on a GPU"}
    plain, again = session.measure_convs(_shapes(2))
    assert "timed 2 times" not in plain.timed
    assert again.median_us == 5.2
    assert "timed 2 times, being over 2× its neighbours (medians 60.0, 5.2 µs)" in again.timed
    assert again.environment[cuda_conv.RETIMED] == [60.0, 5.2]  # what `staircase --json` shows
    assert cuda_conv.RETIMED not in plain.environment


def test_only_widths_of_the_same_conv_are_neighbours(monkeypatch: pytest.MonkeyPatch) -> None:
    """A list of several layers (optimize's per-layer sweep): a slow layer after fast ones is not a
    spike, widths are compared in width order whatever order they come in, and a depthwise conv's
    widths (C = K = groups, all moving) are one sweep."""
    fast = _shapes(4)  # C = 64, K = 16…64
    slow = ConvShape(8, 512, 56, 56, 256, 3, 3, (1, 1), (1, 1))  # another layer, alone
    shuffled = [fast[2], slow, fast[0], fast[3], fast[1]]
    assert cuda_conv.spikes_by_conv(shuffled, [5.0, 400.0, 5.0, 5.0, 5.0]) == []
    assert cuda_conv.spikes_by_conv(shuffled, [40.0, 400.0, 5.0, 5.0, 5.0]) == [0]  # K = 48 of the fast conv
    depthwise = [ConvShape(1, k, 28, 28, k, 3, 3, (1, 1), (1, 1), groups=k) for k in (32, 48, 64, 80, 96)]
    assert cuda_conv.spikes_by_conv(depthwise, [5.0, 5.0, 30.0, 5.0, 5.0]) == [2]

    calls = _stand_in(monkeypatch, {256: [400.0]})
    cuda_conv.time_convs([*fast, slow])
    assert calls == [16, 32, 48, 64, 256]  # the slow layer, alone in its sweep, is timed once
