"""Candidate widths per channel group, and the solver over the per-layer table cost.

The cost of a plan is a sum over convs of table[conv](widths of the groups the conv touches): a
conv's latency depends on its input channels C (the width of the group(s) it reads) and its output
channels K (the width of the group it writes), so changing one width moves its producers AND its
consumers. Each conv is a *factor* over at most a few groups; the sum is minimised exactly by
variable elimination (min-sum dynamic programming): a chain (VGG) eliminates in O(n·d²) (plus
O(n·log n) to choose the order), a star or a few coupled stages (ResNet) stays small too. When a
model's factors would make an intermediate table too large, coordinate descent from several starts
takes over (cheap, no device time, not exact). The runners-up (`top_plans`) cost about k more solves.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

MODES = ("lossless", "trim", "grow")
ELIMINATION_LIMIT = 2_000_000  # largest intermediate table (entries) variable elimination may build


def ceil_to(x: int, multiple: int) -> int:
    return -(-int(x) // multiple) * multiple


def group_align(repeat: int, align: int = 8) -> int:
    """The step of a group's width that keeps `repeat` × width a multiple of `align`.

    A grouped conv's group (ChannelGroup.repeat = g conv groups) has its width per conv group, and
    the GPU sees g × width channels: with 32 conv groups any width is 8-aligned (step 1), with 4 every
    even one (step 2). Rounding the per-group width itself up to 8 would double ResNeXt's 4-wide
    groups. Every other group: `align`.
    """
    return align // math.gcd(align, max(1, int(repeat)))


def width_range(width: int, dead: int, mode: str, max_trim: float = 0.10, repeat: int = 1) -> tuple[int, int]:
    """(lowest, highest) width a group may take in `mode`.

    Upward: to the next multiple of 64 or +12.5 %, whichever is larger (FINDINGS §1: a layer up to
    64 channels wider was often faster). Downward: lossless removes only dead (all-zero) channels;
    trim may also remove up to max_trim of the width; grow never goes below the original. A
    grouped conv's group (`repeat` = g > 1) has its width per conv group: the upper bound is taken
    on the g × width channels the GPU sees, then divided back (at least the width itself); dead
    channels and the trim fraction are per conv group already.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    total = width * max(1, int(repeat))
    hi = max(width, max(ceil_to(total, 64), math.ceil(1.125 * total)) // max(1, int(repeat)))
    if mode == "grow":
        lo = width
    elif mode == "lossless":
        lo = max(1, width - dead)
    else:
        lo = max(1, min(width - dead, math.ceil((1.0 - max_trim) * width)))
    return lo, hi


def candidate_widths(
    width: int,
    dead: int = 0,
    mode: str = "lossless",
    max_trim: float = 0.10,
    align: int = 8,
    extra: Iterable[int] = (),
    score: Callable[[int], float] | None = None,
    max_candidates: int | None = 8,
    repeat: int = 1,
) -> list[int]:
    """Widths worth tabulating for one group, ascending.

    Always kept: the original width (outputs unchanged), its round-up to `align`, and in trim mode
    the lowest aligned width allowed (the full trim budget). Then wave-aligned widths (`extra`,
    from the wave model), then the remaining multiples of `align` ranked by `score` (predicted µs;
    lower first) when given, else by how aligned they are (64 > 32 > 16 > 8). Capped at
    `max_candidates` so the per-layer tables stay affordable on the device.

    For a grouped conv's group (`repeat` = g > 1) widths are per conv group: pass
    `align=group_align(g)` so g × width is what gets aligned; the range and the alignment ranking
    are taken on g × width too.
    """
    lo, hi = width_range(width, dead, mode, max_trim, repeat)
    repeat = max(1, int(repeat))
    aligned = [w for w in range(ceil_to(lo, align), hi + 1, align)]
    must: list[int] = []
    if lo <= width <= hi:
        must.append(width)
    must.append(ceil_to(width, align))
    if mode == "trim" and aligned:
        must.append(aligned[0])
    if mode == "lossless" and dead and lo < width:
        must.append(lo)  # all dead channels gone, unaligned
    wave = sorted({int(w) for w in extra if lo <= int(w) <= hi})

    def alignment(w: int) -> int:
        return max(m for m in (64, 32, 16, 8, 1) if (w * repeat) % m == 0)

    rest = [w for w in aligned if w not in must and w not in wave]
    if score is not None:
        rest.sort(key=lambda w: (score(w), -alignment(w), w))
        wave.sort(key=lambda w: (score(w), w))
    else:
        rest.sort(key=lambda w: (-alignment(w), w))
    ordered: list[int] = []
    for w in [*must, *wave, *rest]:
        if w not in ordered:
            ordered.append(w)
    if max_candidates is not None:
        ordered = ordered[: max(max_candidates, len(dict.fromkeys(must)))]
    return sorted(ordered)


@dataclass
class Factor:
    """One conv's table: latency (µs) for each combination of the widths of the groups in `scope`."""

    name: str
    scope: tuple[str, ...]
    values: dict[tuple[int, ...], float]


@dataclass
class Move:
    group: str
    width: int
    predicted_delta_us: float  # table cost after the move minus before (negative = predicted gain)


@dataclass
class Solution:
    plan: dict[str, int]
    cost_us: float
    method: str  # "variable elimination (exact)" | "coordinate descent"


@dataclass
class _Step:
    """One elimination step: `var` summed out of the tables over `union` (var first)."""

    var: str
    union: tuple[str, ...]
    argmin: np.ndarray  # var's best index for each combination of union[1:]
    inputs: list[tuple[tuple[str, ...], np.ndarray, str | None]]  # (kept) tables summed, and their maker
    total: np.ndarray | None  # (kept) their sum over union


@dataclass
class TableCost:
    """Σ over convs of their table values; `domains` are the candidate widths of each free group."""

    domains: dict[str, list[int]]
    factors: list[Factor]
    default: dict[str, int] = field(default_factory=dict)  # widths for groups no factor depends on

    def __post_init__(self) -> None:
        self.largest_table = 0  # entries of the largest intermediate table of the last solve()
        self._arrays: list[tuple[tuple[str, ...], np.ndarray]] | None = None
        self._by_group: dict[str, list[Factor]] = {g: [] for g in self.domains}
        for f in self.factors:
            for g in f.scope:
                if g not in self.domains:
                    raise ValueError(f"factor {f.name} depends on unknown group {g}")
                self._by_group[g].append(f)

    # ------------------------------------------------------------------ evaluation
    def factor_value(self, f: Factor, plan: dict[str, int]) -> float:
        return f.values[tuple(plan[g] for g in f.scope)]

    def cost(self, plan: dict[str, int]) -> float:
        return float(sum(self.factor_value(f, plan) for f in self.factors))

    def per_factor(self, plan: dict[str, int]) -> dict[str, float]:
        return {f.name: self.factor_value(f, plan) for f in self.factors}

    def local_cost(self, group: str, plan: dict[str, int]) -> float:
        return float(sum(self.factor_value(f, plan) for f in self._by_group[group]))

    def moves(self, plan: dict[str, int]) -> list[Move]:
        """Every single-group change with its predicted cost change, best predicted first."""
        out = []
        for g, dom in self.domains.items():
            base = self.local_cost(g, plan)
            for w in dom:
                if w != plan[g]:
                    out.append(Move(g, w, self.local_cost(g, {**plan, g: w}) - base))
        out.sort(key=lambda m: (m.predicted_delta_us, m.group, m.width))
        return out

    # ------------------------------------------------------------------ exact solver
    def solve(self, exclude: dict[str, int] | None = None, limit: int = ELIMINATION_LIMIT) -> Solution | None:
        """Exact minimum by variable elimination; None when an intermediate table would exceed `limit`.

        `exclude` forbids one width per named group (used to find the next-best distinct plans).
        """
        run = self._eliminate(exclude, limit, keep=False)
        if run is None:
            return None
        steps, left, largest = run
        if not np.isfinite(sum(float(a) for a in left)):
            return None  # every width of some group excluded
        idx: dict[str, int] = {}
        for step in reversed(steps):
            rest = step.union[1:]
            idx[step.var] = int(step.argmin[tuple(idx[x] for x in rest)]) if rest else int(step.argmin)
        plan = {g: self.domains[g][idx[g]] if g in idx else self._default(g) for g in self.domains}
        self.largest_table = largest
        return Solution(plan, self.cost(plan), "variable elimination (exact)")

    def _eliminate(
        self, exclude: dict[str, int] | None, limit: int, keep: bool
    ) -> tuple[list[_Step], list[np.ndarray], int] | None:
        """Variable elimination, smallest table first (ties by group name): the steps, the tables
        left over (scalars: their sum is the minimum) and the largest table built; None past `limit`.
        `keep` also records each step's summed inputs, for `_runner_up_gaps`."""
        arrays = list(self._factor_arrays())
        for g, w in (exclude or {}).items():
            unary = np.zeros(len(self.domains[g]))
            unary[self.domains[g].index(w)] = np.inf
            arrays.append(((g,), unary))

        free = [g for g in self.domains if self._by_group[g] or (exclude and g in exclude)]
        # each group's neighbours (itself and every group it shares a table with), kept up to date
        # as groups are eliminated, so choosing the next one does not rescan every table: with
        # hundreds of groups (DenseNet-201: 200) that rescan was most of an optimize run's time
        neighbours: dict[str, set[str]] = {g: {g} for g in free}
        for scope, _ in arrays:
            for x in scope:
                neighbours[x].update(scope)
        sizes = {g: math.prod(len(self.domains[x]) for x in neighbours[g]) for g in free}
        # the next group is the smallest (size, name) in a heap with lazy invalidation: an entry
        # whose size is no longer the group's is skipped. Sorting every remaining group at each
        # step made one solve quadratic in the groups (a 1000-way concat: minutes)
        heap = [(size, g) for g, size in sizes.items()]
        heapq.heapify(heap)
        # the tables still to be summed, by number (with the group whose elimination made it, if
        # any), and the numbers of those holding each group
        tables: dict[int, tuple[tuple[str, ...], np.ndarray, str | None]] = {
            i: (scope, arr, None) for i, (scope, arr) in enumerate(arrays)
        }
        holding: dict[str, set[int]] = {g: set() for g in free}
        for i, (scope, _, _) in tables.items():
            for x in scope:
                holding[x].add(i)
        next_number = len(tables)
        steps: list[_Step] = []
        remaining = set(free)
        largest = 0
        while remaining:
            size, v = heapq.heappop(heap)
            if v not in remaining or size != sizes[v]:
                continue  # stale entry
            union_set = neighbours.pop(v)
            if size > limit:
                return None
            largest = max(largest, size)
            union = (v, *sorted(union_set - {v}))
            for x in union[1:]:
                neighbours[x].discard(v)
                neighbours[x].update(union[1:])
                sizes[x] = math.prod(len(self.domains[y]) for y in neighbours[x])
                heapq.heappush(heap, (sizes[x], x))
            total = np.zeros([len(self.domains[x]) for x in union])
            inputs = []
            for i in sorted(holding.pop(v)):  # in the order the tables were made
                scope, arr, origin = tables.pop(i)
                total = total + _expand(scope, arr, union)
                if keep:
                    inputs.append((scope, arr, origin))
                for x in scope:
                    if x != v:
                        holding[x].discard(i)
            steps.append(_Step(v, union, np.argmin(total, axis=0), inputs, total if keep else None))
            tables[next_number] = (union[1:], np.min(total, axis=0), v)
            for x in union[1:]:
                holding[x].add(next_number)
            next_number += 1
            remaining.discard(v)
        return steps, [arr for _, arr, _ in tables.values()], largest

    def _runner_up_gaps(self, limit: int = ELIMINATION_LIMIT) -> dict[str, float] | None:
        """For each eliminated group, how much more the best plan that changes its width from the
        optimum costs (min-marginals: one elimination and one pass back down the tree it made,
        instead of one solve per group); None when elimination is past `limit`."""
        run = self._eliminate(None, limit, keep=True)
        if run is None:
            return None
        steps, _, _ = run
        down: dict[str, np.ndarray] = {}  # the rest of the model, as a table over a step's union[1:]
        gaps: dict[str, float] = {}
        for step in reversed(steps):
            assert step.total is not None
            rest = step.union[1:]
            outside = _expand(rest, down[step.var], step.union) if step.var in down else 0.0
            belief = step.total + outside
            marginal = np.min(belief.reshape(belief.shape[0], -1), axis=1)
            best = float(np.min(marginal))
            second = np.partition(marginal, 1)[1] if marginal.size > 1 else np.inf
            gaps[step.var] = float(second) - best
            for k, (scope, _, origin) in enumerate(step.inputs):
                if origin is None:
                    continue
                acc = np.zeros(step.total.shape) + outside
                for j, (s2, a2, _) in enumerate(step.inputs):
                    if j != k:
                        acc = acc + _expand(s2, a2, step.union)
                down[origin] = _min_onto(acc, step.union, scope)
        return gaps

    def _factor_arrays(self) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """Each factor as an array over its groups' domains (built once: `top_plans` solves once
        per group)."""
        if self._arrays is None:
            self._arrays = []
            for f in self.factors:
                shape = tuple(len(self.domains[g]) for g in f.scope)
                arr = np.empty(shape, dtype=float)
                for idx in itertools.product(*(range(n) for n in shape)):
                    arr[idx] = f.values[tuple(self.domains[g][i] for g, i in zip(f.scope, idx))]
                self._arrays.append((f.scope, arr))
        return self._arrays

    def _default(self, g: str) -> int:
        return self.default.get(g, self.domains[g][0])

    # ------------------------------------------------------------------ fallback solver
    def coordinate_descent(self, starts: Sequence[dict[str, int]], max_passes: int = 50) -> Solution:
        """Best local minimum over `starts`: each group in turn takes its best width given the others."""
        best: Solution | None = None
        for start in starts:
            plan = dict(start)
            for _ in range(max_passes):
                changed = False
                for g, dom in self.domains.items():
                    if not self._by_group[g]:
                        continue
                    costs = [(self.local_cost(g, {**plan, g: w}), w) for w in dom]
                    c, w = min(costs)
                    if w != plan[g] and c < self.local_cost(g, plan) - 1e-12:
                        plan[g] = w
                        changed = True
                if not changed:
                    break
            sol = Solution(plan, self.cost(plan), "coordinate descent")
            if best is None or sol.cost_us < best.cost_us - 1e-12:
                best = sol
        assert best is not None, "coordinate_descent needs at least one start"
        return best

    def best(self, starts: Sequence[dict[str, int]]) -> Solution:
        """Exact when tractable, else coordinate descent from `starts`."""
        return self.solve() or self.coordinate_descent(starts)

    def top_plans(self, k: int, starts: Sequence[dict[str, int]]) -> list[Solution]:
        """The optimum, then distinct runners-up: for each group, the best plan that changes that
        group's width from the optimum (exact), ranked by table cost. Diverse by construction, which
        is what end-to-end verification needs when the table is off for one layer.

        When the optimum is exact, each group's runner-up cost is known first from min-marginals
        (`_runner_up_gaps`), so only the groups that can still reach the top `k` are solved, cheapest
        first (about k solves instead of one per group: a 1000-group chain took minutes)."""
        first = self.best(starts)
        out = [first]
        seen = {_key(first.plan)}
        runners: list[Solution] = []
        groups = [g for g, dom in self.domains.items() if len(dom) >= 2 and self._by_group[g]]
        gaps = self._runner_up_gaps() if first.method.startswith("variable elimination") else None
        if gaps is not None:
            # same runners as solving every group: a group is skipped only when its runner-up costs
            # more (beyond float noise) than the k-1 best distinct plans already found
            groups.sort(key=lambda g: gaps[g])
            tol = 1e-6 * (1.0 + abs(first.cost_us))
        for g in groups:
            if gaps is not None:
                if k <= 1:
                    break
                if len(runners) >= k - 1:
                    bound = sorted(s.cost_us for s in runners)[k - 2]
                    if first.cost_us + gaps[g] > bound + tol:
                        break
            sol = self.solve(exclude={g: first.plan[g]})
            if sol is None:
                dom = self.domains[g]
                sol = self.coordinate_descent(
                    [{**s, g: next(w for w in dom if w != first.plan[g])} for s in starts]
                )
            if _key(sol.plan) not in seen:
                seen.add(_key(sol.plan))
                runners.append(sol)
        runners.sort(key=lambda s: (s.cost_us, _key(s.plan)))
        return out + runners[: max(0, k - 1)]


def _key(plan: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(plan.items()))


def _min_onto(arr: np.ndarray, union: tuple[str, ...], scope: tuple[str, ...]) -> np.ndarray:
    """Minimum of `arr` (axes in `union` order) over the groups not in `scope`, axes in `scope` order."""
    axes = tuple(i for i, x in enumerate(union) if x not in scope)
    out = np.min(arr, axis=axes) if axes else arr
    kept = [x for x in union if x in scope]
    return np.transpose(out, [kept.index(x) for x in scope])


def _expand(scope: tuple[str, ...], arr: np.ndarray, union: tuple[str, ...]) -> np.ndarray:
    """View `arr` (axes in `scope` order) as broadcastable over `union`'s axes."""
    if not scope:
        return arr
    perm = [scope.index(x) for x in union if x in scope]
    shape = [arr.shape[scope.index(x)] if x in scope else 1 for x in union]
    return np.transpose(arr, perm).reshape(shape)
