"""Bytes the ops between the convs move, per channel of each free group: what the per-layer table misses.

The optimizer's table times each conv alone, so it prices a plan by its convs only. The ops between
them (BatchNormalization, Relu, Add, Concat, pooling, the SE block's Mul) run as kernels of their own
on most backends and read and write whole activations: their cost grows with every width they
carry. On the bundled pruned ResNet56 (8 SMs of an H200) the table put a plan that doubles the
32×32 trunk 7 % under round-up-to-8; it measured 5.9 % over it, because every Add and Relu of the
trunk moved twice the bytes. Over the recorded optimize runs (benchmarks/traffic_fit_study.py),
measured − table had a spread of 88–101 µs on ResNet56 seeds 0–1 at 8 SMs; a straight line in these
bytes left 7–9 µs (docs/optimize.md, "Memory traffic").

The bytes are linear in the widths, so the term is one table entry per group and costs the exact
solver nothing. Its price per byte is not assumed (fusion decides it: TensorRT folds BatchNorm, Relu
and a residual Add into the conv, PyTorch eager runs each as its own kernel): `fit_slope` fits it
to the run's own end-to-end measurements, and the optimizer prices it at the slope's 95 % lower
bound once that is above 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from deployopt.waves import ELEMENT_BYTES

#: Ops that move no data on any backend we run (views, shape arithmetic, constants).
VIEW_OPS = frozenset(
    {
        "Constant",
        "ConstantOfShape",
        "Dropout",
        "Flatten",
        "Identity",
        "Reshape",
        "Shape",
        "Size",
        "Squeeze",
        "Unsqueeze",
    }
)
#: Ops the per-layer table already times (their reads and writes are in their table entries).
TIMED_OPS = frozenset({"Conv"})
MB = 1e6


@dataclass(frozen=True)
class Traffic:
    """Bytes moved by the non-conv ops: `per_channel[g]` per channel of free group g, plus `fixed`
    (frozen channels); a plan's total is linear in its widths."""

    per_channel: dict[str, float]
    fixed: float

    def bytes(self, plan: dict[str, int]) -> float:
        return self.fixed + sum(self.per_channel.get(g, 0.0) * w for g, w in plan.items())

    def group_bytes(self, group: str, width: int) -> float:
        return self.per_channel.get(group, 0.0) * width


def traffic(analysis: Any, dtype: str = "fp16") -> Traffic:
    """The bytes each non-conv op of the analysed model reads and writes, split by channel group.

    A tensor's size is its channel count times what one channel holds (batch × H × W, or what a
    Flatten spread into its axis), so a tensor whose channels are segments of several groups (a
    Concat's output, a grouped conv's g copies) gives each segment its share. Constants and
    tensors the analysis did not trace (no channel axis it knows) count for nothing: no plan
    changes them."""
    st = analysis.state
    if st is None:
        raise ValueError("an Analysis from deployopt.coupling.analyze is needed")
    free = {g.id: g for g in analysis.free_groups()}
    size = ELEMENT_BYTES.get(dtype, 4)
    per_channel = dict.fromkeys(free, 0.0)
    fixed = 0.0
    for node in st.nodes:
        if node.op_type in TIMED_OPS or node.op_type in VIEW_OPS:
            continue
        for t in [*node.input, *node.output]:
            layout = st.layouts.get(t) if t else None
            shape = st.shapes.get(t)
            if not layout or not shape or st.is_const(t):
                continue
            if any(not isinstance(d, int) or d <= 0 for d in shape):
                continue
            channels = sum(w for _, w in layout)
            if channels <= 0:
                continue
            per_unit = math.prod(shape) / channels * size
            for atom, w in layout:
                # an atom no group was made for is counted as fixed: this term must never stop a run
                gid = analysis.atom_group.get(st.find(atom))
                if gid in free:
                    per_channel[gid] += per_unit * w / free[gid].width
                else:
                    fixed += per_unit * w
    return Traffic(per_channel, fixed)


@dataclass(frozen=True)
class SlopeFit:
    """µs per MB of non-conv traffic, fitted to (bytes, measured − table) of the run's plans."""

    us_per_mb: float  # what the optimizer uses: the slope's lower confidence bound, or 0 when not established
    fitted_us_per_mb: float | None  # the least-squares slope itself (None: too few points)
    stderr_us_per_mb: float | None
    points: int
    used: bool
    why: str  # one line: why it is used or not

    def to_json(self) -> dict[str, Any]:
        return {
            "us_per_mb": self.us_per_mb,
            "fitted_us_per_mb": self.fitted_us_per_mb,
            "stderr_us_per_mb": self.stderr_us_per_mb,
            "points": self.points,
            "used": self.used,
            "why": self.why,
        }


NOT_FITTED = SlopeFit(0.0, None, None, 0, False, "not fitted yet")
#: a plan is a lever for the fit when its traffic differs from every baseline's by at least this
#: fraction: rounding to 8 moves a few %, and a slope from so short a lever is the table's noise
MIN_LEVER = 0.03
#: levers the fit needs: with one, a single plan's own surprise (a kernel choice, a fusion the
#: table cannot see) would be read as a slope and steer every later plan
MIN_LEVERS = 2


def fit_slope(
    bytes_: list[float], residual_us: list[float], reference: list[float] | None = None, alpha: float = 0.05
) -> SlopeFit:
    """Least squares of residual = a + s·bytes over the measured plans. It is used when at least
    MIN_LEVERS plans' traffic lies MIN_LEVER away from every `reference` plan's (the baselines';
    default: the first point), and s is positive with 1 − alpha confidence (one-sided t-test,
    n − 2 degrees of freedom); then at that confidence's lower bound, not at s itself: a weak fit
    (VGG16 at 8 SMs, whose non-conv ops move little: 8.1 ± 2.4 µs/MB) steered its search 1 % slower
    than the conv table alone did, while strong ones (ResNet56: 2.1 ± 0.1) hardly change."""
    from scipy import stats

    x = np.asarray(bytes_, dtype=float) / MB
    y = np.asarray(residual_us, dtype=float)
    n = len(x)
    ref = np.asarray(reference if reference else bytes_[:1], dtype=float) / MB
    if n == 0 or not len(ref):
        return SlopeFit(0.0, None, None, n, False, "no measured plans")
    far = np.min(np.abs(x[:, None] - ref[None, :]), axis=1) >= MIN_LEVER * float(np.mean(ref))
    levers = int(far.sum())
    if levers < MIN_LEVERS:
        why = (
            f"{levers} measured plan(s) with traffic {MIN_LEVER:.0%} or more from the baselines'; "
            f"a slope needs {MIN_LEVERS}"
        )
        return SlopeFit(0.0, None, None, n, False, why)
    dx = x - x.mean()
    slope = float(dx @ (y - y.mean()) / (dx @ dx))
    resid = y - y.mean() - slope * dx
    dof = n - 2
    se = math.sqrt(float(resid @ resid) / dof / float(dx @ dx)) if dof > 0 else math.inf
    if slope <= 0:
        return SlopeFit(0.0, slope, se, n, False, f"fitted {slope:.2f} µs/MB: not positive")
    t_crit = float(stats.t.ppf(1 - alpha, dof))
    low = slope - t_crit * se
    if low <= 0:
        why = f"fitted {slope:.2f} ± {se:.2f} µs/MB: not above 0 with {1 - alpha:.0%} confidence"
        return SlopeFit(0.0, slope, se, n, False, why)
    why = (
        f"fitted {slope:.2f} ± {se:.2f} µs/MB over {n} measured plans, priced at {low:.2f} "
        f"(its one-sided {1 - alpha:.0%} lower bound)"
    )
    return SlopeFit(low, slope, se, n, True, why)
