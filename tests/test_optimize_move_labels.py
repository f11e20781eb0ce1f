"""A move's label gave "table gain X µs, per-layer measured" for the search's table, which adds to
the per-layer conv table (measured) a non-conv traffic term priced at a slope fitted to end-to-end
medians. Bug bash (/tmp/honesty/opt1, eval 18): "gain 29.3 µs" where the conv table said +65.12 µs
and the fitted traffic -94.41 µs. Now the two parts are given apart, in the label and report.json.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from deployopt.journal import plan_key
from deployopt.optimize import Evaluation, Optimizer
from deployopt.search import Factor, TableCost
from deployopt.timing import Timing

DOMAINS = {"a": [16, 24]}
PLAN = {"a": 16}


def fake_optimizer(priced: bool) -> Any:
    """An Optimizer's state as `_next_move` reads it: the conv table moves a→24 +65.12 µs, the
    fitted traffic -94.41 µs (470.69 µs/MB)."""
    conv = TableCost(DOMAINS, [Factor("conv", ("a",), {(16,): 100.0, (24,): 165.12})], default=PLAN)
    traffic = Factor("traffic[a]", ("a",), {(16,): 200.0, (24,): 105.59})
    table = TableCost(DOMAINS, [*conv.factors, traffic], default=PLAN) if priced else conv
    opt = SimpleNamespace(
        conv_table=conv,
        table=table,
        round_up=dict(PLAN),
        _refused_floor={},
        _refuted=set(),
        move_parts={},
        traffic_fit=SimpleNamespace(us_per_mb=470.69),
        session=SimpleNamespace(backend=SimpleNamespace(measured=True)),
    )
    opt._in_domains = lambda plan: all(plan[g] in DOMAINS[g] for g in DOMAINS)
    opt._table_source = lambda: Optimizer._table_source(opt)
    opt._move_value = lambda *a: Optimizer._move_value(opt, *a)
    return opt


def test_a_move_label_gives_the_measured_and_the_fitted_parts_apart() -> None:
    opt = fake_optimizer(priced=True)
    incumbent = Evaluation(2, "round-up-to-8", dict(PLAN), Timing("ort", [1000.0]), 100.0, False, True)
    move = Optimizer._next_move(opt, incumbent, set())
    assert move is not None
    plan, label = move
    assert plan == {"a": 24}
    assert label == (
        "move a→24 (table gain 29.3 µs = conv table +65.1 µs (per-layer, measured) "
        "+ traffic -94.4 µs (fitted slope))"
    )
    assert "gain 29.3 µs, per-layer measured" not in label
    parts = opt.move_parts[plan_key(plan)]
    assert parts["conv_table_delta_us"] == pytest.approx(65.12)
    assert parts["traffic_delta_us"] == pytest.approx(-94.41)
    assert parts["table_delta_us"] == pytest.approx(-29.29)
    assert parts["traffic_source"] == "fitted slope" and parts["traffic_us_per_mb"] == 470.69
    # report.json: the measuring evaluation carries the parts (an added field); others null
    from deployopt.report import _move_parts

    ev = Evaluation(3, label, plan, Timing("ort", [990.0]), 165.12, False, False)
    assert _move_parts(opt, ev) == parts
    assert _move_parts(opt, incumbent) is None

    # no slope priced (or a prediction): the table is the conv table, and its old words are true
    opt = fake_optimizer(priced=False)
    incumbent = Evaluation(2, "round-up-to-8", {"a": 24}, Timing("ort", [1000.0]), 165.12, False, True)
    move = Optimizer._next_move(opt, incumbent, set())
    assert move is not None and move[1] == "move a→16 (table gain 65.1 µs, per-layer measured)"
    assert opt.move_parts == {}
