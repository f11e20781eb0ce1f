"""Add(Concat(a, b), Concat(b, a)): the union cuts both sides until they agree, down to the gcd."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from fuzz_graphs import assert_same, const, model, run
from onnx import helper

from deployopt.coupling import analyze
from deployopt.surgery import apply_plan, apply_plan_report


def reordered(wa: int, wb: int) -> onnx.ModelProto:
    r = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], name="conv_a", kernel_shape=[1, 1]),
        helper.make_node("Conv", ["x", "wb"], ["b"], name="conv_b", kernel_shape=[1, 1]),
        helper.make_node("Concat", ["a", "b"], ["ab"], name="cat_ab", axis=1),
        helper.make_node("Concat", ["b", "a"], ["ba"], name="cat_ba", axis=1),
        helper.make_node("Add", ["ab", "ba"], ["s"], name="add"),
        helper.make_node("Conv", ["s", "wc"], ["y"], name="conv_c", kernel_shape=[1, 1]),
    ]
    inits = [
        const("wa", r.standard_normal([wa, 3, 1, 1])),
        const("wb", r.standard_normal([wb, 3, 1, 1])),
        const("wc", r.standard_normal([4, wa + wb, 1, 1])),
    ]
    return model(nodes, inits, [1, 4, 8, 8])


@pytest.mark.parametrize(("wa", "wb"), [(3, 5), (2, 4), (4, 6), (1, 2), (5, 8), (1, 64), (3, 100)])
def test_reordered_concats_added_are_one_group_that_pads_exactly(wa: int, wb: int) -> None:
    m = reordered(wa, wb)
    analysis = analyze(m)
    free = analysis.free_groups()
    # channel i of a·b meets channel i of b·a: every channel is tied to all others in steps of
    # the gcd, so one free group of gcd channels, a piece of it every gcd channels of either conv
    assert len(free) == 1 and free[0].width == math.gcd(wa, wb)
    gid = free[0].id
    ref = run(m)
    padded = apply_plan(m, {gid: free[0].width + 3}, analysis)
    assert_same(run(padded), ref)
    back, changes = apply_plan_report(padded, {gid: free[0].width}, analyze(padded))
    assert [(c.trimmed, c.dead_trimmed) for c in changes] == [(3, 3)]
    assert_same(run(back), ref)
    if free[0].width > 1:
        trimmed = apply_plan(m, {gid: 1}, analysis)
        onnx.checker.check_model(trimmed, full_check=True)
        assert run(trimmed).shape == ref.shape


def test_sets_too_uneven_to_match_in_time_freeze_saying_so() -> None:
    """1 and 1024 channels take 1024 rounds of cuts: with no cap that was a RecursionError
    traceback (and seconds at 512); past the cap the sets freeze, saying why (review)."""
    groups = analyze(reordered(1, 1024)).groups
    reasons = [g.reason for g in groups if g.frozen]
    assert any("split too unevenly to match meet at add" in (r or "") for r in reasons), reasons
