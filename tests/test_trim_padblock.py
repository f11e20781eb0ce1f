"""Pad, then trim back, of a channel-axis Pad's zero block that a nonlinearity makes nonzero.

Every channel of the block has L1 0 (the Pad is a producer with zero filters) and none is 0 where
the next conv reads it (Sigmoid(0) = 0.5, 0 + 1 = 1), so before, the tie went to the lowest index
and the trim dropped the block's original channels. The padded ones are read with the zero weights
the pad wrote: they add nothing, so they are dead, and only they are.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fuzz_graphs import assert_same, const, model, run
from onnx import helper, numpy_helper

from deployopt.coupling import analyze
from deployopt.importance import dead_channels_many
from deployopt.surgery import apply_plan, apply_plan_report


def padblock(act: str) -> onnx.ModelProto:
    """Conv(4) → Pad 2 zero channels before → act → Conv(5)."""
    r = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1", kernel_shape=[1, 1]),
        helper.make_node("Pad", ["c", "pads"], ["p"], name="pad", mode="constant"),
        helper.make_node("Sigmoid", ["p"], ["q"], name="act")
        if act == "Sigmoid"
        else helper.make_node("Add", ["p", "one"], ["q"], name="act"),
        helper.make_node("Conv", ["q", "w2"], ["y"], name="conv2", kernel_shape=[1, 1]),
    ]
    inits = [
        const("w1", r.standard_normal([4, 3, 1, 1])),
        const("pads", [0, 2, 0, 0, 0, 0, 0, 0], np.int64),
        const("one", 1.0),
        const("w2", r.standard_normal([5, 6, 1, 1])),
    ]
    return model(nodes, inits, [1, 5, 8, 8])


def initializers(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


@pytest.mark.parametrize("act", ["Sigmoid", "Add"])
def test_pad_then_trim_back_of_a_zero_block_made_nonzero_is_exact(act: str) -> None:
    m = padblock(act)
    analysis = analyze(m)
    assert not analysis.group("pad.before").frozen
    # the block's own channels: L1 0, but 0.5 (or 1) where the conv reads them with its weights
    assert dead_channels_many(m, analysis, ["pad.before"]) == {"pad.before": []}
    trimmed = apply_plan(m, {"pad.before": 1}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert initializers(trimmed)["pads"].tolist() == [0, 1, 0, 0, 0, 0, 0, 0]
    ref = run(m)
    padded = apply_plan(m, {"pad.before": 4}, analysis)
    assert_same(run(padded), ref)
    again = analyze(padded)
    assert dead_channels_many(padded, again, ["pad.before"]) == {"pad.before": [2, 3]}
    back, changes = apply_plan_report(padded, {"pad.before": 2}, again)
    assert [(c.trimmed, c.dead_trimmed) for c in changes] == [(2, 2)]
    np.testing.assert_array_equal(run(back), ref)
    want, got = initializers(m), initializers(back)
    assert set(want) == set(got)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
