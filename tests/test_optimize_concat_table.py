"""A conv reading a concat sees only the sum of its parts' widths: its per-layer table is exact while
its distinct shapes stay few, however many assignments of the parts there are (optimize._exact_rows)."""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import onnx
import pytest
from test_coupling import Net

from deployopt.optimize import OptimizeConfig, Optimizer
from deployopt.waves import predict


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def test_a_two_part_concat_is_priced_exactly_and_the_solver_finds_the_optimum(tmp_path: Path) -> None:
    """conv 9 → (37 ‖ 20) → concat → conv 68: the reading conv's 8 × 8 × 8 assignments were more
    than 256, so its table was taken as separable (each part's misalignment charged apart, where
    only their sum of 57 matters), and the "exact" solver answered the input's widths, predicted
    13 % slower than the plan (40 ‖ 24) in its own candidate set. The table is exact now: the
    solver's optimum is the brute-force one, and the answer is it."""
    n = Net(c=3, hw=32, seed=1)
    a = n.cbr("x", 9)
    e = n.cbr(n.concat(n.cbr(a, 37), n.cbr(a, 20)), 68)
    path = tmp_path / "concat.onnx"
    onnx.save(n.build(n.fc(n.gap(e), 10)), str(path))
    cfg = OptimizeConfig(
        model_path=path,
        outdir=tmp_path / "out",
        target="xavier-nx",
        backend="model",
        dtype="int8",
        plots=False,
    )
    opt = Optimizer(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = opt.run()
    assert not [f.name for f in opt.conv_table.factors if f.name.endswith("[base]")]  # no separable table

    def priced(plan: dict[str, int]) -> float:
        return sum(predict(s, opt.target, "int8").predicted_us for s in opt.conv_shapes(plan).values())

    plans = (dict(zip(opt.domains, ws)) for ws in itertools.product(*opt.domains.values()))
    best = min(plans, key=priced)
    assert opt.table.solve().plan == best == result.best_plan
    assert priced(best) < 0.9 * priced({g: w for g, w in opt.original.items()})
