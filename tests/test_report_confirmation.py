"""optimize's report where the answer is a baseline: what it says about a searched plan measured
faster in the search and then not confirmed by the rebuild rounds.

The bug bash (`optimize vgg_small_s0.onnx --backend ort --mode trim …`): solver #4 was measured
-13.6 % (p 0.006) against round-up-to-8 in the search, failed the confirmation rounds, and the
report said "the same plan (no other widths were measured significantly and at least 0.5 % faster
than rounding up to multiples of 8)"; the terminal printed nothing of the confirmation.
Synthetic samples only.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress

from deployopt.cli.optimize_cmd import _progress_callback
from deployopt.optimize import Evaluation
from deployopt.report import same_plan, same_plan_phrase
from deployopt.timing import Timing

R8 = {"a": 16, "b": 8}
SEARCHED = {"a": 16, "b": 16}
INPUT = {"a": 11, "b": 8}


def timing(median: float, seed: int) -> Timing:
    """31 samples in shuffled order, spread ±1.5 % around exactly `median`."""
    offsets = np.random.default_rng(seed).permutation(np.arange(-15, 16))
    return Timing("ort", list(median * (1 + 0.001 * offsets)))


def ev(index: int, label: str, plan: dict[str, int], median: float, accepted: bool = False) -> Evaluation:
    return Evaluation(index, label, dict(plan), timing(median, index), None, False, accepted)


CONFIRMATION = {
    "baseline": "round-up-to-8",
    "rounds": 3,
    "best_round_medians_us": [326.0, 225.0, 329.2],
    "baseline_round_medians_us": [377.4, 199.4, 369.1],
    "pooled_gain": -0.0125,
    "kept": False,
}


def optimizer(evaluations: list[Evaluation], confirmation: dict[str, Any] | None) -> Any:
    cfg = SimpleNamespace(alpha=0.01, min_effect=0.005)
    return SimpleNamespace(cfg=cfg, evaluations=evaluations, confirmation=confirmation)


def test_an_unconfirmed_searched_plan_is_named_not_denied() -> None:
    evs = [
        ev(1, "input", INPUT, 494.5),
        ev(2, "round-up-to-8", R8, 377.4, accepted=True),
        ev(3, "solver #4", SEARCHED, 326.0, accepted=True),
        ev(4, "round-up-to-8 (confirm 1)", R8, 199.4),
        ev(5, "solver #4 (confirm 1)", SEARCHED, 225.0),
        ev(6, "round-up-to-8 (confirm 2)", R8, 369.1),
        ev(7, "solver #4 (confirm 2)", SEARCHED, 329.2),
    ]
    said = same_plan_phrase(optimizer(evs, CONFIRMATION), "vs_round_up_8", evs[1], measured=True)
    assert said.startswith("the same plan: solver #4 measured -13.6 % against it in the search (faster, p=")
    assert "not confirmed in 2 rebuilds of each" in said and "so the answer is round-up-to-8" in said
    # the pooled gain of -1.25 % is a change of +1.25 %: slower, negative = faster as everywhere else
    assert "pooled medians +1.25 % (slower, not the 0.5 % faster the min effect asks)" in said
    assert "its slowest rebuild not faster than the baseline's fastest" in said
    assert "no other widths" not in said


def test_other_plans_measured_faster_are_not_denied_either() -> None:
    """No confirmation ran, yet a plan was measured faster than the baseline in one build and not
    accepted: "no other widths were measured … faster" would be untrue."""
    evs = [
        ev(1, "input", INPUT, 500.0),
        ev(2, "round-up-to-8", R8, 400.0, accepted=True),
        ev(3, "move b→16", SEARCHED, 300.0),
    ]
    said = same_plan_phrase(optimizer(evs, None), "vs_round_up_8", evs[1], measured=True)
    assert said.startswith("the same plan (1 other plan measured significantly and at least 0.5 % faster")
    assert "move b→16: -25.0 %" in said and "none accepted" in said


def test_the_old_words_stand_where_they_are_true() -> None:
    evs = [
        ev(1, "input", INPUT, 500.0),
        ev(2, "round-up-to-8", R8, 400.0, accepted=True),
        ev(3, "solver #1", SEARCHED, 420.0),
    ]
    said = same_plan_phrase(optimizer(evs, None), "vs_round_up_8", evs[1], measured=True)
    assert said == same_plan("vs_round_up_8", 0.005, True)


def test_the_terminal_prints_the_confirmation_outcome() -> None:
    console = Console(record=True, width=300)
    with Progress(console=console) as progress:
        _progress_callback(progress)("confirm", **CONFIRMATION)
    out = console.export_text()
    assert "confirm confirmation (3 builds each, searched plan vs round-up-to-8" in out
    assert "pooled medians +1.25 % (slower)): not confirmed, so the answer is round-up-to-8" in out
