"""optimize's staircase PNGs show each measured per-layer point with its spread and sample count
where the layer cache holds them, and say "median" with no bars where it does not.

The bug bash: OUTDIR/staircases/*.png drew bare medians, no spread and no count, and replaced the
default legend "median, bars from the first to the third quartile". Synthetic samples only.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import deployopt.plots
from deployopt.layers import ConvShape
from deployopt.lut import LayerCache
from deployopt.report import write_staircases
from deployopt.timing import Timing

WIDTHS = [12, 16, 24]


def shape(k: int) -> ConvShape:
    return ConvShape(1, 8, 8, 8, k)


def stub(cache: LayerCache | None, medians: dict[int, float]) -> Any:
    return SimpleNamespace(
        deps={"conv1": {"g"}},
        conv_shapes=lambda plan: {"conv1": shape(plan["g"])},
        conv_shape=lambda conv, plan: shape(plan["g"]),
        layer_values={shape(k).signature(): m for k, m in medians.items()},
        _predict=None,
        _layer_cache=cache,
    )


REPORT = {
    "measured": True,
    "measured_on": "ort (CPUExecutionProvider)",
    "backend": "ort",
    "plan": {"g": 24},
    "groups": [
        {
            "id": "g",
            "producers": ["conv1"],
            "best": 24,
            "round_up_8": 16,
            "original": 12,
            "candidates": WIDTHS,
        }
    ],
}


@pytest.fixture
def plotted(monkeypatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(deployopt.plots, "plot_staircase", lambda widths, path, **kw: calls.append(kw))
    return calls


def test_cached_samples_give_bars_and_a_count(tmp_path: Path, plotted: list[dict[str, Any]]) -> None:
    cache = LayerCache("ort-test", "fp32", root=tmp_path)
    timings = {k: Timing("ort", [10.0 * k + i for i in (0, 3, 1, 4, 2, 9, 5, 7, 6, 8)]) for k in WIDTHS}
    for k, t in timings.items():
        cache.put(shape(k), t)
    write_staircases(tmp_path, REPORT, stub(cache, {k: t.median_us for k, t in timings.items()}))
    (kw,) = plotted
    assert kw["measured_quartiles_us"] == [timings[k].quartiles_us for k in WIDTHS]
    assert kw["measured_label"] == (
        "per-layer table, measured on ort (CPUExecutionProvider) (median of 10 samples, bars from the "
        "first to the third quartile)"
    )


def test_no_cached_samples_say_median_and_draw_no_bars(tmp_path: Path, plotted: list[dict[str, Any]]) -> None:
    write_staircases(tmp_path, REPORT, stub(None, {k: 100.0 + k for k in WIDTHS}))
    (kw,) = plotted
    assert kw["measured_quartiles_us"] is None
    assert kw["measured_label"].endswith(
        "(median; the layer cache holds no samples for these points, so no spread shown)"
    )
    assert "quartile" not in kw["measured_label"]
