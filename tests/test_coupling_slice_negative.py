"""Channel Slices whose negative bounds land on 0: they still count from the end after a pad."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fuzz_graphs import const, model, run
from onnx import helper, numpy_helper

from deployopt.coupling import analyze
from deployopt.surgery import apply_plan


def sliced(start: int, end: int, step: int | None = None, width: int = 8) -> onnx.ModelProto:
    """Conv(width) → x[:, start:end(:step)] → PRelu (per-channel slope) → Conv."""
    r = np.random.default_rng(0)
    out = len(range(width)[start:end:step])
    ins = ["c", "st", "en", "ax"] + (["sp"] if step is not None else [])
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], name="conv1", kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Slice", ins, ["s"], name="slice"),
        helper.make_node("PRelu", ["s", "slope"], ["p"], name="prelu"),
        helper.make_node("Conv", ["p", "w2"], ["y"], name="conv2", kernel_shape=[1, 1]),
    ]
    inits = [
        const("w1", r.standard_normal([width, 3, 3, 3])),
        const("b1", r.standard_normal(width)),
        const("st", [start], np.int64),
        const("en", [end], np.int64),
        const("ax", [1], np.int64),
        const("slope", r.random([out, 1, 1])),
        const("w2", r.standard_normal([5, out, 1, 1])),
    ] + ([const("sp", [step], np.int64)] if step is not None else [])
    return model(nodes, inits, [1, 5, 8, 8])


def bounds(m: onnx.ModelProto) -> tuple[int, int]:
    v = {t.name: int(numpy_helper.to_array(t)[0]) for t in m.graph.initializer if t.name in ("st", "en")}
    return v["st"], v["en"]


@pytest.mark.parametrize(
    ("start", "end", "plan", "want"),
    [
        (-8, -4, {"conv1[1]": 7}, (-11, -7)),  # the pieces after the window grow: both bounds move
        (-8, -4, {"conv1[0]": 6}, (-10, -4)),  # the window itself grows
        (-8, -4, {"conv1[0]": 8}, (-12, -4)),
        (-8, 4, {"conv1[0]": 6}, (-10, 6)),  # a positive end: the new width before it
        (-8, 100, {"conv1": 11}, (-11, 11)),  # one piece; 100 clamps to 8, becomes the new width
    ],
)
def test_start_of_exactly_minus_width_counts_from_the_end(
    start: int, end: int, plan: dict[str, int], want: tuple[int, int]
) -> None:
    m = sliced(start, end)
    analysis = analyze(m)
    ref = run(m)
    out = apply_plan(m, plan, analysis)
    assert bounds(out) == want
    np.testing.assert_array_equal(run(out), ref)


def test_trimming_a_window_that_starts_at_minus_width() -> None:
    m = sliced(-8, -4)
    trimmed = apply_plan(m, {"conv1[0]": 2, "conv1[1]": 1}, analyze(m))
    onnx.checker.check_model(trimmed, full_check=True)
    assert bounds(trimmed) == (-3, -1)
    assert run(trimmed).shape == (1, 5, 8, 8)
