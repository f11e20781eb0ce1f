"""A Clip whose constant min is ≥ 0 (ReLU6) never outputs a negative value, so a Sqrt or a Pow by
0.5 after it cannot read a negative padded channel and its group stays free.

Why: a mutation run found the Clip branch of `_never_negative` unguarded: with `low > 0` in place
of `low >= 0` (or the whole branch returning False), conv → ReLU6 → Sqrt → conv froze the first
conv's group ("Sqrt … could read a negative padded channel"), so `analyze` showed 0 free groups
and optimize could do nothing for it. Both Clip spellings: min as an input (opset ≥ 11) and as an
attribute (opset 10).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from test_coupling import Net
from test_surgery import run

from deployopt.coupling import analyze
from deployopt.surgery import apply_plan

SQRT_REASON = "could read a negative padded channel (NaN)"


def clip_then(low: float | None, opset: int, op: str = "Sqrt") -> onnx.ModelProto:
    """conv1 (10 channels) → Clip(low, 6) → Sqrt (or Pow by 0.5) → conv (4); `low` None: no min."""
    n = Net(opset=opset)
    a = n.conv("x", 10)
    if opset >= 11:
        lo = n.init("lo", np.array(low)) if low is not None else ""
        c = n.op("Clip", [a, lo, n.init("hi", np.array(6.0))])
    else:
        c = n.op("Clip", [a], **({} if low is None else {"min": low}), max=6.0)
    half = [n.init("half", np.array(0.5))] if op == "Pow" else []
    return n.build(n.conv(n.op(op, [c, *half]), 4))


@pytest.mark.parametrize("opset", [17, 10])
@pytest.mark.parametrize("op", ["Sqrt", "Pow"])
@pytest.mark.parametrize(("low", "free"), [(0.0, True), (0.5, True), (-0.1, False), (None, False)])
def test_a_clip_with_a_nonnegative_min_keeps_a_sqrt_free(
    low: float | None, free: bool, op: str, opset: int
) -> None:
    model = clip_then(low, opset, op)
    analysis = analyze(model)
    assert [g.id for g in analysis.free_groups()] == (["conv1"] if free else [])
    conv1 = next(g for g in analysis.groups if g.id == "conv1")
    if free:
        # and padding it is output-exact: ReLU6 of a padded 0 is 0, its square root 0
        padded = apply_plan(model, {"conv1": 13}, analysis)
        np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    else:
        assert SQRT_REASON in conv1.reason


def test_analyze_shows_conv1_free_before_relu6_and_sqrt(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "relu6_sqrt.onnx"
    onnx.save(clip_then(0.0, 17), path)
    code, out, err = run_cli(monkeypatch, capsys, "analyze", str(path))
    assert code == 0, out + err
    assert "relu6_sqrt.onnx: 3 channel groups, 1 free" in out
    row = next(line for line in out.splitlines() if line.startswith("│ conv1 "))
    assert row.split("│")[3].strip() == "free", row
    assert SQRT_REASON not in out
