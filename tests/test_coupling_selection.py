"""Comparisons, logic and Where: per element, so their channels join as Add's do (rules/elementwise.py).

The dynamo exporter spells Softplus as Softplus → Greater → Where, and `torch.where(x > t, a, b)` is
the same pattern in a user's module: both froze every group they touched ("unknown op Greater").
A padded channel there holds a bool, or one of Where's finite operands, read with zero weights.
"""

from __future__ import annotations

import numpy as np
from test_coupling import Net
from test_coupling_slice import check_exact_and_trimmable

from deployopt.coupling import analyze


def free_widths(n: Net, out: str) -> dict[str, int]:
    model = n.build(out)
    check_exact_and_trimmable(model)
    return {g.id: g.width for g in analyze(model).free_groups()}


def test_softplus_with_its_threshold_is_free_and_pads_exactly() -> None:
    """Where(x > 20, x, Softplus(x)), as the dynamo exporter writes nn.Softplus."""
    n = Net()
    c = n.conv("x", 10)
    cond = n.op("Greater", [c, n.init("threshold", np.array(0.3, np.float32))])
    out = n.op("Where", [cond, c, n.op("Softplus", [c])])
    assert free_widths(n, n.conv(out, 5)) == {"conv1": 10}


def test_per_channel_thresholds_and_branches_follow_the_plan() -> None:
    """A [1, C, 1, 1] threshold and a [1, C, 1, 1] constant branch are padded with the group; two
    traced channel sets compared and selected between join (as an Add joins them)."""
    n = Net()
    a, b = n.conv("x", 10), n.conv("x", 10)
    rng = np.random.default_rng(1)
    cond = n.op("LessOrEqual", [a, n.init("t", rng.standard_normal((1, 10, 1, 1)))])
    both = n.op("And", [cond, n.op("Not", [n.op("Equal", [a, b])])])
    picked = n.op("Where", [both, b, n.init("fill", rng.standard_normal((1, 10, 1, 1)))])
    assert free_widths(n, n.conv(picked, 5)) == {"conv1": 10}  # conv2 joined to conv1's group


def test_a_mask_of_one_channel_keeps_its_channel() -> None:
    """A spatial mask ([N, 1, H, W], a 1-channel conv's sign) selecting over every channel broadcasts:
    its conv keeps its one channel, and the selected channels stay free."""
    n = Net()
    feat = n.conv("x", 10)
    mask = n.op("Greater", [n.conv("x", 1), n.init("zero", np.array(0.0, np.float32))], (1, 8, 8))
    out = n.op("Where", [mask, feat, n.init("zero2", np.array(0.0, np.float32))], (10, 8, 8))
    assert free_widths(n, n.conv(out, 5)) == {"conv1": 10}


def test_a_fill_that_is_not_finite_freezes() -> None:
    """x.masked_fill(x <= 0, -inf) before a Softmax over the width: a padded channel (0) is filled
    with -inf whole, its Softmax row is NaN, and the next conv's zero weight spread the NaN to every
    output. A constant that is not finite freezes the op's channels."""
    n = Net()
    c = n.conv("x", 10)
    mask = n.op("LessOrEqual", [c, n.init("zero", np.array(0.0, np.float32))])
    filled = n.op("Where", [mask, n.init("ninf", np.array(-np.inf, np.float32)), c])
    model = n.build(n.conv(n.op("Softmax", [filled], axis=-1), 5, r=1))
    (group,) = [g for g in analyze(model).groups if g.id == "conv1"]
    assert group.frozen and group.reason == "Where where3 has a constant that is not finite"
