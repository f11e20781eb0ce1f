"""A zero Pad of the channel axis (the CIFAR ResNets' option-A shortcut) adds zero channels that a
plan may pad or trim: the Pad's `pads` entries follow the widths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from test_coupling import Net
from test_surgery import padded_plan, run

from deployopt.coupling import analyze
from deployopt.importance import dead_channels_many
from deployopt.model import load_model
from deployopt.surgery import apply_plan, apply_plan_report


def ints(n: Net, name: str, values: list[int]) -> str:
    n.inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
    return name


def option_a(opset: int = 17, before: int = 8, after: int = 8, **pad_attrs: object) -> onnx.ModelProto:
    """A stem conv (3→16), then a downsampling block: conv(16→32, stride 2) + BN beside the shortcut
    x[:, :, ::2, ::2] padded on the channel axis by (before, after), added, Relu, a next conv."""
    n = Net(opset=opset)
    h = n.cbr("x", 16)
    k = 16 + before + after
    name = f"conv{n.n + 1}"
    wt = n.init(f"{name}.w", n.rng.standard_normal((k, 16, 3, 3)) * 0.3)
    b = n.init(f"{name}.b", n.rng.standard_normal(k) * 0.1)
    c = n.op("Conv", [h, wt, b], (k, 4, 4), kernel_shape=[3, 3], pads=[1] * 4, strides=[2, 2])
    branch = n.bn(c)
    steps = [ints(n, f"sl.{p}", v) for p, v in (("starts", [0, 0]), ("ends", [8, 8]), ("axes", [2, 3]))]
    sub = n.op("Slice", [h, *steps, ints(n, "sl.steps", [2, 2])], (16, 4, 4))
    pads = [0, before, 0, 0, 0, after, 0, 0]
    if opset < 11:
        p = n.op("Pad", [sub], (k, 4, 4), pads=pads, **pad_attrs)
    else:
        p = n.op("Pad", [sub, ints(n, "pads", pads)], (k, 4, 4), **pad_attrs)
    out = n.op("Relu", [n.op("Add", [branch, p])])
    return n.build(n.conv(out, 5))


def pad_entries(model: onnx.ModelProto) -> list[int]:
    node = next(nd for nd in model.graph.node if nd.op_type == "Pad")
    for a in node.attribute:
        if a.name == "pads":
            return list(a.ints)
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "pads")).tolist()


def same_output(out: np.ndarray, ref: np.ndarray) -> None:
    """Equal up to float32 rounding: the new channels are zero filters (the conv's pieces) and zeros
    (the Pad), so every term they add is 0, but the next conv sums over more input channels, moved
    to other positions, and onnxruntime's blocked kernels then add the same terms in another order
    (seen: 6e-6 on outputs of about 15). 1e-6 of the output's scale is far below any real change."""
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-6 * float(np.abs(ref).max()))


def check_pad_trim_and_back(model: onnx.ModelProto, plan: dict[str, int], pads_after: list[int]) -> None:
    analysis = analyze(model)
    ref = run(model)
    padded = apply_plan(model, plan, analysis)
    assert pad_entries(padded) == pads_after
    same_output(run(padded), ref)
    trimmed = apply_plan(model, {g: max(1, analysis.group(g).width - 3) for g in plan}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    onnx.shape_inference.infer_shapes(trimmed, strict_mode=True)
    assert run(trimmed).shape == ref.shape
    back, changes = apply_plan_report(padded, {g: analysis.group(g).width for g in plan}, analyze(padded))
    assert all(c.trimmed == c.dead_trimmed > 0 for c in changes)
    assert pad_entries(back) == pad_entries(model)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for t in back.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(t), inits[t.name], err_msg=t.name)
    same_output(run(back), ref)


def test_option_a_shortcut_frees_the_stage_width() -> None:
    """The stage's 32 channels are the Pad's 8 zeros + the 16 shortcut channels + 8 zeros, added to
    the conv's 32: the conv's output is cut into three pieces, each joined to what it is added to.
    The middle piece moves with the stem (16), the outer ones with the Pad's zero blocks: the stage
    width is 8 + 16 + 8, all free (before: one group, frozen by the Pad)."""
    model = option_a()
    analysis = analyze(model)
    free = {g.id: g.width for g in analysis.free_groups()}
    assert free == {"conv1": 16, "conv4[0]": 8, "conv4[2]": 8}
    frozen = [g.reason for g in analysis.groups if g.frozen]
    assert frozen == ["graph input 'x'", "feeds the graph output 'conv10'"]
    assert analysis.group("conv4[0]").producers == ["pad7", "conv4"]
    check_pad_trim_and_back(model, {"conv4[0]": 12, "conv4[2]": 11}, [0, 12, 0, 0, 0, 11, 0, 0])


def test_padding_every_stage_group_together_is_exact() -> None:
    """32 → 40 over the three groups: 10 + 20 + 10; the stem's group grows the shortcut too."""
    model = option_a()
    check_pad_trim_and_back(model, {"conv4[0]": 10, "conv1": 20, "conv4[2]": 10}, [0, 10, 0, 0, 0, 10, 0, 0])


def test_one_sided_pad_makes_one_atom() -> None:
    """F.pad(x, (…, 0, 8)): no channels before, so one zero block and one edited entry."""
    model = option_a(before=0, after=8)
    free = {g.id: g.width for g in analyze(model).free_groups()}
    assert free == {"conv1": 16, "conv4[1]": 8}
    check_pad_trim_and_back(model, {"conv4[1]": 9}, [0, 0, 0, 0, 0, 9, 0, 0])


def test_opset_10_pads_attribute_follows_the_plan() -> None:
    """Before opset 11 the pads are an attribute: the channel entries of the list are edited."""
    model = option_a(opset=10)
    assert {g.id for g in analyze(model).free_groups()} == {"conv1", "conv4[0]", "conv4[2]"}
    check_pad_trim_and_back(model, {"conv4[0]": 9, "conv4[2]": 13}, [0, 9, 0, 0, 0, 13, 0, 0])


def test_pad_zeros_feeding_a_conv_alone_are_dead() -> None:
    """Without the residual Add, a zero block is a group of its own: all of its channels are dead,
    so trimming it is exact."""
    n = Net()
    a = n.cbr("x", 8)
    p = n.op("Pad", [a, ints(n, "pads", [0, 2, 0, 0, 0, 3, 0, 0])], (13, 8, 8))
    model = n.build(n.conv(p, 4))
    analysis = analyze(model)
    assert {g.id: g.width for g in analysis.free_groups()} == {"conv1": 8, "pad4.before": 2, "pad4.after": 3}
    dead = dead_channels_many(model, analysis, ["conv1", "pad4.before", "pad4.after"])
    assert dead == {"conv1": [], "pad4.before": [0, 1], "pad4.after": [0, 1, 2]}
    trimmed, changes = apply_plan_report(model, {"pad4.before": 1, "pad4.after": 1}, analysis)
    assert [(c.trimmed, c.dead_trimmed) for c in changes] == [(1, 1), (2, 2)]
    assert pad_entries(trimmed) == [0, 1, 0, 0, 0, 1, 0, 0]
    same_output(run(trimmed), run(model))


def test_opset_18_axes_input_edits_the_channel_entries() -> None:
    """Pad-18's `axes` input: `pads` has two entries per listed axis, the channel's at its position."""
    n = Net(opset=18)
    a = n.cbr("x", 8)
    p = n.op("Pad", [a, ints(n, "pads", [2, 1, 3, 0]), "", ints(n, "axes", [1, 2])], (13, 9, 8))
    model = n.build(n.conv(p, 4))
    analysis = analyze(model)
    assert {g.id: g.width for g in analysis.free_groups()} == {"conv1": 8, "pad4.before": 2, "pad4.after": 3}
    padded = apply_plan(model, {"pad4.before": 5, "pad4.after": 1}, analysis)
    assert pad_entries(padded) == [5, 1, 1, 0]
    same_output(run(padded), run(model))


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("reflect", "Pad pad4 pads the channel axis in reflect mode"),
        ("edge", "Pad pad4 pads the channel axis in edge mode"),
        ("value", "Pad pad4 pads the channel axis with 0.5, not 0"),
        ("computed", "Pad pad5 has computed pads"),
        ("negative", "Pad pad4 crops the channel axis (negative pads)"),
        ("negative after", "Pad pad4 crops the channel axis (negative pads)"),
        ("computed value", "Pad pad5 pads the channel axis with a computed value"),
    ],
)
def test_other_channel_pads_still_freeze(kind: str, reason: str) -> None:
    n = Net()
    a = n.cbr("x", 8)
    if kind in ("reflect", "edge"):
        p = n.op("Pad", [a, ints(n, "pads", [0, 2, 0, 0, 0, 2, 0, 0])], (12, 8, 8), mode=kind)
    elif kind == "value":
        value = n.init("value", np.array(0.5))
        p = n.op("Pad", [a, ints(n, "pads", [0, 2, 0, 0, 0, 2, 0, 0]), value], (12, 8, 8))
    elif kind == "computed":
        pads = n.op("Identity", [ints(n, "pads", [0, 2, 0, 0, 0, 2, 0, 0])], (8, 0, 0))  # not a constant
        p = n.op("Pad", [a, pads], (12, 8, 8))
    elif kind == "computed value":
        value = n.op("Identity", [n.init("value", np.array(0.0))], (8, 0, 0))  # 0, but not a constant
        p = n.op("Pad", [a, ints(n, "pads", [0, 2, 0, 0, 0, 2, 0, 0]), value], (12, 8, 8))
    elif kind == "negative after":
        p = n.op("Pad", [a, ints(n, "pads", [0, 0, 0, 0, 0, -2, 0, 0])], (6, 8, 8))
    else:
        p = n.op("Pad", [a, ints(n, "pads", [0, -2, 0, 0, 0, 0, 0, 0])], (6, 8, 8))
    model = n.build(n.conv(n.conv(p, 4), 3))
    reasons = {g.reason for g in analyze(model).groups if g.frozen}
    assert reason in reasons


def test_torch_option_a_resnet_stage_widths_are_free(tmp_path: Path) -> None:
    """akamaster/pytorch_resnet_cifar10's shortcut, exported by torch (opset 17, dynamo=False): a
    Slice with steps 2 on H and W, then a Pad whose `pads` is a Constant. Two stages of one block
    each (16 → 32 channels). Before this change the Pad froze the whole 32-channel stream ("Pad …
    pads the channel axis": 2 frozen groups besides the input's and the classifier's, the first
    stage's 16-channel stream and the second stage's 32); now the second stage's width is the Pad's
    two zero blocks (8 + 8, each joined with the piece of the block's last conv it is added to) plus
    the first stage's stream (16, which the middle piece joins), and only the input and the
    classifier's output stay frozen."""
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, inp: int, planes: int, stride: int) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False), nn.BatchNorm2d(planes)
            self.c2, self.b2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False), nn.BatchNorm2d(planes)
            self.planes, self.down = planes, stride != 1 or inp != planes

        def forward(self, x: Any) -> Any:
            y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
            if self.down:  # option A
                p = self.planes // 4
                x = F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, p, p), "constant", 0)
            return F.relu(y + x)

    class ResNetA(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c, self.b = nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16)
            self.s1, self.s2 = Block(16, 16, 1), Block(16, 32, 2)
            self.fc = nn.Linear(32, 10)

        def forward(self, x: Any) -> Any:
            y = self.s2(self.s1(F.relu(self.b(self.c(x)))))
            return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))

    torch.manual_seed(0)
    net = ResNetA()
    for m in net.modules():  # trained-looking BatchNorm statistics, so no channel is near zero
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    path = tmp_path / "resnet_a.onnx"
    torch.onnx.export(net.eval(), torch.randn(1, 3, 16, 16), str(path), dynamo=False, opset_version=17)
    model = load_model(path).model
    assert "Pad" in {n.op_type for n in model.graph.node}
    analysis = analyze(model)
    frozen = [g for g in analysis.groups if g.frozen]
    assert [g.width for g in frozen] == [3, 10] and not any("Pad" in g.reason for g in frozen)
    free = analysis.free_groups()
    pad_groups = [g for g in free if any(p.endswith("Pad") for p in g.producers)]
    assert sorted(g.width for g in pad_groups) == [8, 8]
    stem = analysis.group("/c/Conv")
    assert not stem.frozen and stem.width == 16
    # the second stage's 32 channels: the two zero blocks and the stem's 16, all free
    assert sum(g.width for g in pad_groups) + stem.width == 32
    ref = run(model)
    padded = apply_plan(model, padded_plan(analysis), analysis)
    # float32 rounding only: the padded channels add zero terms, but the convs' and the classifier's
    # sums run over more (and moved) channels, so onnxruntime adds the same terms in another order
    np.testing.assert_allclose(run(padded), ref, rtol=0, atol=1e-5 * float(np.abs(ref).max()))
    trimmed = apply_plan(model, {g.id: g.width - 3 for g in free}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    onnx.shape_inference.infer_shapes(trimmed, strict_mode=True)
    assert run(trimmed).shape == ref.shape
    back, changes = apply_plan_report(padded, {g.id: g.width for g in free}, analyze(padded))
    assert all(c.trimmed == c.dead_trimmed > 0 for c in changes)
    np.testing.assert_allclose(run(back), ref, rtol=0, atol=1e-5 * float(np.abs(ref).max()))


def test_pad_with_axes_of_a_tensor_of_unknown_shape_freezes() -> None:
    """Pad-18's axes input on the output of an op shape inference does not know (no rank): the
    pads cannot be expanded to full rank, so the Pad freezes instead of failing the analysis."""
    n = Net(opset=18)
    a = n.cbr("x", 8)
    f = n.op("Foo", [a], (8, 8, 8), domain="custom")
    p = n.op("Pad", [f, ints(n, "pads", [2, 2]), "", ints(n, "axes", [1])], (12, 8, 8))
    model = n.build(n.conv(n.conv(p, 4), 3), domains=("custom",))
    assert not any(vi.name == f for vi in model.graph.value_info)  # its shape is unknown
    groups = {g.id: g for g in analyze(model).groups}
    assert groups["conv1"].reason == "unknown op Foo"
