"""Graphs at the edges of what the coupling rules see. Each must either pad exactly and trim to a
valid model, or freeze with its reason."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper
from test_coupling import Net

from deployopt.coupling import analyze
from deployopt.errors import PlanError
from deployopt.surgery import apply_plan


def _groups(model: onnx.ModelProto) -> dict[str, object]:
    return {g.id: g for g in analyze(model).groups}


@pytest.mark.parametrize("param", ["bias", "bn_scale"])
def test_a_per_channel_parameter_fed_at_run_time_freezes(param: str) -> None:
    """A conv bias or BatchNorm scale that is a graph input (not an initializer) cannot be resized
    with the channels: the group freezes with that reason, and a plan for it is a PlanError (it was
    free, and apply failed on an assertion)."""
    n = Net()
    a = n.bn(n.conv("x", 8))
    model = n.build(n.conv(a, 4))
    name = "conv1.b" if param == "bias" else "batchnormalization2.scale"
    (init,) = [t for t in model.graph.initializer if t.name == name]
    model.graph.initializer.remove(init)
    model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [8]))
    onnx.checker.check_model(model)
    group = _groups(model)["conv1"]
    assert group.frozen and group.reason.endswith(f"reads {name!r} per channel, and it is not a constant")
    with pytest.raises(PlanError, match="frozen"):
        apply_plan(model, {"conv1": 11})
