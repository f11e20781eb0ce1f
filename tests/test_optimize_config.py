"""optimize.check_config's one-line refusals of OptimizeConfig fields that no CLI option sets (the
library's way in): an alpha out of range was a raw ValueError once the run had begun, and a negative
min effect, top_k 0, max_candidates 0 or negative confirm rounds were taken as they were."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployopt.errors import DeployoptError
from deployopt.optimize import OptimizeConfig, check_config

MODEL = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"


def config(**fields: object) -> OptimizeConfig:
    return OptimizeConfig(model_path=MODEL, target="h200", backend="model", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"alpha": 2.0}, "alpha 2: must be a p-value threshold between 0 and 1, e.g. 0.01"),
        ({"alpha": 0.0}, "alpha 0: must be a p-value threshold between 0 and 1, e.g. 0.01"),
        ({"alpha": float("nan")}, "alpha nan: must be a p-value threshold between 0 and 1, e.g. 0.01"),
        (
            {"min_effect": -0.1},
            "min_effect -0.1: must be a fraction from 0 up to 1, e.g. 0.005 (0.5 % faster)",
        ),
        ({"min_effect": 1.0}, "min_effect 1: must be a fraction from 0 up to 1, e.g. 0.005 (0.5 % faster)"),
        ({"top_k": 0}, "top_k 0: must be at least 1 (solver plans measured end to end)"),
        ({"max_candidates": 0}, "max_candidates 0: must be at least 1 (widths tabulated per group)"),
        (
            {"confirm_rounds": -1},
            "confirm_rounds -1: must be at least 0 (extra measurements of the answer and the best "
            "baseline; 0: none)",
        ),
    ],
)
def test_search_settings_out_of_range_are_one_deployopt_error(fields: dict, message: str) -> None:
    with pytest.raises(DeployoptError) as info:
        check_config(config(**fields))
    assert str(info.value) == message


def test_search_settings_in_range_pass() -> None:
    for fields in (
        {},
        {"alpha": 0.05, "min_effect": 0.0, "top_k": 1, "max_candidates": 1, "confirm_rounds": 0},
    ):
        check_config(config(**fields))


def test_warmup_for_trtexec_is_refused_and_its_default_passes() -> None:
    """trtexec warms up by time: a --warmup other than the default was dropped in silence (the
    config cannot tell the default given from the default not given; the CLI's bench and profile can)."""
    check_config(OptimizeConfig(model_path=MODEL, target="h200", backend="trtexec"))
    check_config(OptimizeConfig(model_path=MODEL, target="h200", backend="tensorrt", warmup=5))
    with pytest.raises(DeployoptError, match=r"^--warmup 5: backend 'trtexec' warms up by time"):
        check_config(OptimizeConfig(model_path=MODEL, target="h200", backend="trtexec", warmup=5))
