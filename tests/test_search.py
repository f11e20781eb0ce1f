"""Candidate widths and the solver over the per-layer table cost (no model, no device)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

from deployopt.search import Factor, Solution, TableCost, candidate_widths, ceil_to, group_align, width_range


def test_width_range_per_mode() -> None:
    assert width_range(434, 0, "lossless") == (434, 489)  # +12.5 % (488.25) beats the next multiple of 64
    assert width_range(100, 0, "lossless") == (100, 128)  # next multiple of 64 beats +12.5 % (113)
    assert width_range(64, 0, "lossless") == (64, 72)
    assert width_range(434, 3, "lossless") == (431, 489)  # only dead channels may go
    assert width_range(434, 0, "trim", 0.10) == (391, 489)  # ceil(0.9 · 434)
    assert width_range(434, 50, "trim", 0.10) == (384, 489)  # dead channels beyond the budget go too
    assert width_range(434, 3, "grow") == (434, 489)
    with pytest.raises(ValueError, match="unknown mode 'shrink'"):
        width_range(10, 0, "shrink")


def test_candidates_keep_the_must_haves_and_rank_by_alignment() -> None:
    assert candidate_widths(434, 0, "lossless", max_candidates=8) == [434, 440, 448, 456, 464, 472, 480, 488]
    # Capped at 4: original, round-up-to-8, then the most aligned (448 = 7·64, 480 = 15·32).
    assert candidate_widths(434, 0, "lossless", max_candidates=4) == [434, 440, 448, 480]
    # Trim keeps the full-budget point (392, lowest multiple of 8 >= 391).
    assert candidate_widths(434, 0, "trim", 0.10, max_candidates=3) == [392, 434, 440]
    # Lossless with dead channels keeps "all dead removed" (431) as a candidate.
    assert candidate_widths(434, 3, "lossless", max_candidates=3) == [431, 434, 440]
    # A cap below the number of must-haves does not drop any of them.
    assert candidate_widths(434, 0, "trim", 0.10, max_candidates=2) == [392, 434, 440]
    assert candidate_widths(434, 3, "lossless", max_candidates=1) == [431, 434, 440]


def test_candidates_follow_the_score_and_wave_aligned_extras() -> None:
    score = {440: 5.0, 448: 9.0, 456: 1.0, 464: 2.0, 472: 9.0, 480: 9.0, 488: 9.0}
    got = candidate_widths(434, 0, "lossless", score=lambda w: score.get(w, 9.0), max_candidates=4)
    assert got == [434, 440, 456, 464]  # must-haves, then the two lowest predicted
    got = candidate_widths(
        434, 0, "lossless", extra=[472, 999], score=lambda w: score.get(w, 9.0), max_candidates=4
    )
    assert got == [434, 440, 456, 472]  # the wave-aligned 472 outranks plain multiples; 999 is out of range
    assert ceil_to(433, 8) == 440 and ceil_to(440, 8) == 440


def test_grouped_conv_widths_are_per_conv_group_and_align_their_total() -> None:
    """A grouped conv's group: width per conv group, repeat = its conv groups; the GPU sees
    repeat × width channels, so that total is what is aligned and bounded."""
    assert [group_align(r) for r in (1, 2, 4, 6, 25, 32)] == [8, 4, 2, 4, 8, 1]
    assert width_range(4, 0, "lossless", repeat=32) == (4, 4)  # 128 channels: +12.5 % is not one more each
    assert width_range(16, 0, "lossless", repeat=25) == (16, 18)  # 400 → 450 channels
    assert width_range(11, 0, "lossless", repeat=4) == (11, 16)  # 44 → 64 channels
    assert width_range(11, 2, "trim", 0.10, repeat=4) == (9, 16)  # dead channels are per conv group
    # step 2 keeps 4 × width a multiple of 8; ranked by the alignment of the total: 64 = 4·16, 48 = 4·12
    assert candidate_widths(11, 0, "lossless", align=group_align(4), repeat=4, max_candidates=3) == [
        11,
        12,
        16,
    ]
    assert candidate_widths(11, 0, "lossless", align=group_align(4), repeat=4) == [11, 12, 14, 16]


def _random_problem(rng: np.random.Generator, groups: int, edges: list[tuple[int, ...]]) -> TableCost:
    domains = {
        f"g{i}": sorted(rng.choice(np.arange(8, 200, 8), size=3, replace=False).tolist())
        for i in range(groups)
    }
    factors = []
    for j, scope_idx in enumerate(edges):
        scope = tuple(f"g{i}" for i in scope_idx)
        values = {
            combo: float(rng.uniform(1, 100)) for combo in itertools.product(*(domains[g] for g in scope))
        }
        factors.append(Factor(f"conv{j}", scope, values))
    return TableCost(domains, factors)


def _brute_force(cost: TableCost, exclude: dict[str, int] | None = None) -> tuple[float, dict[str, int]]:
    names = list(cost.domains)
    best = None
    for combo in itertools.product(*(cost.domains[g] for g in names)):
        plan = dict(zip(names, combo))
        if exclude and any(plan[g] == w for g, w in exclude.items()):
            continue
        c = cost.cost(plan)
        if best is None or c < best[0]:
            best = (c, plan)
    assert best is not None
    return best


@pytest.mark.parametrize(
    "edges",
    [
        [(0,), (0, 1), (1, 2), (2, 3), (3, 4), (4,)],  # a VGG-like chain
        [(0, 1), (1, 2), (2, 0), (2, 3), (0, 3)],  # cycles (ResNet stages with projections)
        [(0, 1, 2), (2, 3), (3, 4, 0), (1, 4)],  # 3-group factors (a conv reading a concat)
    ],
)
def test_variable_elimination_is_exact(edges: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(len(edges))
    for _ in range(5):
        cost = _random_problem(rng, 5, edges)
        sol = cost.solve()
        assert sol is not None
        want_cost, want_plan = _brute_force(cost)
        assert sol.cost_us == pytest.approx(want_cost)
        assert sol.plan == want_plan
        # With one width excluded: still the exact optimum of the restricted problem.
        g = "g2"
        restricted = cost.solve(exclude={g: sol.plan[g]})
        assert restricted is not None
        rc, rp = _brute_force(cost, {g: sol.plan[g]})
        assert restricted.cost_us == pytest.approx(rc) and restricted.plan == rp


def test_exact_solver_escapes_the_local_minimum_coordinate_descent_sticks_in() -> None:
    # Widening both layers together pays off, widening either alone costs: a greedy trap.
    f = Factor("conv", ("a", "b"), {(8, 8): 0.0, (8, 16): 1.0, (16, 8): 1.0, (16, 16): -1.0})
    cost = TableCost({"a": [8, 16], "b": [8, 16]}, [f])
    sol = cost.solve()
    assert sol is not None and sol.plan == {"a": 16, "b": 16} and sol.cost_us == -1.0
    cd = cost.coordinate_descent([{"a": 8, "b": 8}])
    assert cd.plan == {"a": 8, "b": 8} and cd.cost_us == 0.0
    # Too large for elimination: `best` falls back to coordinate descent from the given starts.
    assert cost.solve(limit=1) is None
    assert cost.best([{"a": 16, "b": 8}]).plan == {"a": 16, "b": 16}


def test_moves_are_ranked_by_predicted_change() -> None:
    fa = Factor("c1", ("a",), {(8,): 10.0, (16,): 7.0, (24,): 12.0})
    fab = Factor("c2", ("a", "b"), {(x, y): x + y / 8 for x in (8, 16, 24) for y in (8, 16)})
    cost = TableCost({"a": [8, 16, 24], "b": [8, 16]}, [fa, fab])
    plan = {"a": 8, "b": 8}
    assert cost.cost(plan) == 10.0 + 9.0
    moves = [(m.group, m.width, m.predicted_delta_us) for m in cost.moves(plan)]
    assert moves == [("b", 16, 1.0), ("a", 16, 5.0), ("a", 24, 18.0)]
    assert cost.per_factor(plan) == {"c1": 10.0, "c2": 9.0}


def test_top_plans_are_distinct_and_ordered() -> None:
    rng = np.random.default_rng(7)
    cost = _random_problem(rng, 4, [(0, 1), (1, 2), (2, 3)])
    start = {g: d[0] for g, d in cost.domains.items()}
    plans = cost.top_plans(4, [start])
    keys = [tuple(sorted(p.plan.items())) for p in plans]
    assert len(plans) == 4 and len(set(keys)) == 4
    assert plans[0].cost_us == pytest.approx(_brute_force(cost)[0])
    assert [p.cost_us for p in plans[1:]] == sorted(p.cost_us for p in plans[1:])
    assert all(p.cost_us >= plans[0].cost_us for p in plans)


def test_groups_without_factors_keep_their_default() -> None:
    cost = TableCost(
        {"a": [8, 16], "lonely": [24, 32]},
        [Factor("c", ("a",), {(8,): 2.0, (16,): 1.0})],
        default={"lonely": 32},
    )
    sol = cost.solve()
    assert sol is not None and sol.plan == {"a": 16, "lonely": 32}


def _every_group_runners(cost: TableCost, k: int) -> list[tuple[dict[str, int], float]]:
    """top_plans' definition, the long way: one exact solve per group (what it did before)."""
    first = cost.solve()
    assert first is not None
    runners, seen = [], {tuple(sorted(first.plan.items()))}
    for g, dom in cost.domains.items():
        if len(dom) < 2 or not any(g in f.scope for f in cost.factors):
            continue  # nothing to trade: a group no conv reads or writes
        sol = cost.solve(exclude={g: first.plan[g]})
        assert sol is not None
        if tuple(sorted(sol.plan.items())) not in seen:
            seen.add(tuple(sorted(sol.plan.items())))
            runners.append(sol)
    runners.sort(key=lambda s: (s.cost_us, tuple(sorted(s.plan.items()))))
    return [(s.plan, s.cost_us) for s in [first, *runners[: max(0, k - 1)]]]


@pytest.mark.parametrize("ties", [False, True])
def test_top_plans_solve_only_the_groups_that_can_rank_and_give_the_same_plans(ties: bool) -> None:
    rng = np.random.default_rng(11 + ties)
    for _ in range(40):
        n = int(rng.integers(3, 8))
        edges = [
            tuple(sorted({int(x) for x in rng.choice(n, size=int(rng.integers(1, 4)))})) for _ in range(n + 2)
        ]
        cost = _random_problem(rng, n, edges)
        if ties:  # few distinct values: many equal-cost runners-up, ranked by their plans
            for f in cost.factors:
                f.values = {c: float(round(v / 40)) for c, v in f.values.items()}
        start = {g: d[0] for g, d in cost.domains.items()}
        for k in (1, 2, 4, 9):
            got = [(s.plan, s.cost_us) for s in cost.top_plans(k, [start])]
            assert got == _every_group_runners(cost, k)


class _Name(str):
    """A group name that counts how often it is ordered (sorting every remaining group per step)."""

    compared = 0

    def __lt__(self, other: object) -> bool:
        _Name.compared += 1
        return str.__lt__(self, other)  # type: ignore[arg-type]

    def __hash__(self) -> int:
        return str.__hash__(self)


def _chain(n: int, names: Callable[[int], str] = lambda i: f"g{i:04d}") -> TableCost:
    rng = np.random.default_rng(n)
    dom = list(range(8, 72, 8))
    domains = {names(i): list(dom) for i in range(n)}
    factors = [
        Factor(
            f"conv{i}",
            (names(i), names(i + 1)),
            {(x, y): float(rng.uniform(1, 100)) for x in dom for y in dom},
        )
        for i in range(n - 1)
    ]
    return TableCost(domains, factors)


def test_one_solve_of_a_long_chain_does_not_sort_every_group_per_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ~n·log n name comparisons for the elimination order (a heap); sorting the remaining groups
    # at each step was ~n²·log n (10⁷ here) and made a 2000-conv chain take minutes
    n, budget = 1000, 100_000

    def counted(self: _Name, other: object) -> bool:
        _Name.compared += 1
        if _Name.compared > budget:
            raise AssertionError(f"over {budget} name comparisons choosing the elimination order")
        return str.__lt__(self, other)  # type: ignore[arg-type]

    monkeypatch.setattr(_Name, "__lt__", counted)
    cost = _chain(n, lambda i: _Name(f"g{i:04d}"))
    _Name.compared = 0
    sol = cost.solve()
    assert sol is not None and sol.method == "variable elimination (exact)"
    assert cost.largest_table == 64  # a chain stays the Viterbi DP (8 widths)
    # the same order as before (smallest table, ties by name) on a small chain: exact and the same plan
    small = _chain(6)
    assert small.solve() is not None and small.solve().plan == _brute_force(small)[1]  # type: ignore[union-attr]


def test_top_plans_on_a_long_chain_solve_about_k_times(monkeypatch: pytest.MonkeyPatch) -> None:
    # one solve per group (1000 here) was cubic in the groups: a 1000-way concat spent minutes here
    cost = _chain(1000)
    solves = 0
    solve = TableCost.solve

    def counted(self: TableCost, *a: object, **kw: object) -> Solution | None:
        nonlocal solves
        solves += 1
        if solves > 50:
            raise AssertionError("more than 50 solves for the top 4 plans")
        return solve(self, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(TableCost, "solve", counted)
    plans = cost.top_plans(4, [{g: d[0] for g, d in cost.domains.items()}])
    assert len(plans) == 4 and len({tuple(sorted(p.plan.items())) for p in plans}) == 4
    assert [p.cost_us for p in plans] == sorted(p.cost_us for p in plans)
    assert solves <= 50
