"""Surgery: padding is exact, dead-channel trimming is exact, any trim gives a valid running model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import ort_session
import pytest
from onnx import numpy_helper
from ort_session import cpu_session
from scripts import load_script
from test_coupling import Net, tiny_mixed
from zoo_models import MODELS

from deployopt.coupling import analyze
from deployopt.errors import PlanError
from deployopt.importance import dead_channels_many, filter_l1
from deployopt.model import load_model
from deployopt.surgery import apply_plan, apply_plan_report, channel_order, dead_channels, load_plan


def run(model: onnx.ModelProto, seed: int = 1) -> np.ndarray:
    sess = cpu_session(model)
    feeds = {}
    for inp in sess.get_inputs():
        feeds[inp.name] = np.random.default_rng(seed).standard_normal(inp.shape).astype(np.float32)
    return sess.run(None, feeds)[0]


def padded_plan(analysis: Any) -> dict[str, int]:
    """Every free group padded to the next multiple of 32 above its width (always a real pad)."""
    return {g.id: (g.width // 32 + 1) * 32 for g in analysis.free_groups()}


def widths(model: onnx.ModelProto) -> dict[str, int]:
    return {g.id: g.width for g in analyze(model).groups}


def loaded(path: Path) -> onnx.ModelProto:
    return load_model(path).model


# VGG16 at full width (15 M weights) takes seconds per run on 2 cores: those cases are marked slow
PAD_MODELS = [pytest.param(m, marks=pytest.mark.slow) if m.startswith("vgg16") else m for m in sorted(MODELS)]


@pytest.mark.parametrize("name", PAD_MODELS)
def test_pad_every_free_group_is_exact(name: str, zoo_model_path: Callable[[str], Path]) -> None:
    model = loaded(zoo_model_path(name))
    analysis = analyze(model)
    plan = padded_plan(analysis)
    assert plan, "every zoo model has free groups"
    padded = apply_plan(model, plan, analysis)
    onnx.checker.check_model(padded)
    onnx.shape_inference.infer_shapes(padded, strict_mode=True)
    after = widths(padded)
    assert {gid: after[gid] for gid in plan} == plan
    np.testing.assert_allclose(run(padded), run(model), atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    "name", ["resnet56_pruned", "densenet_like", "se_net", "inception_like", "mobilenet_like"]
)
def test_trimming_padded_channels_back_is_exact(name: str, zoo_model_path: Callable[[str], Path]) -> None:
    model = loaded(zoo_model_path(name))
    original = {g.id: g.width for g in analyze(model).free_groups()}
    padded = apply_plan(model, padded_plan(analyze(model)))
    panalysis = analyze(padded)
    dead = dead_channels_many(padded, panalysis, list(original))  # one onnxruntime run for all groups
    for gid, w in original.items():  # the padded channels are the dead ones, nothing else
        assert dead[gid] == list(range(w, panalysis.group(gid).width))
    first = next(iter(original))
    assert dead_channels(padded, panalysis, first) == dead[first]
    back, changes = apply_plan_report(padded, original, panalysis)
    assert all(c.trimmed == c.dead_trimmed > 0 for c in changes)
    np.testing.assert_allclose(run(back), run(model), atol=1e-5, rtol=0)
    # the trim keeps the surviving channels in order: weights come back bit for bit
    orig_w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for t in back.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(t), orig_w[t.name])


TRIM_MODELS = [
    "resnet56_pruned",
    "densenet_like",
    "se_net",
    "inception_like",
    "mobilenet_like",
    "resnet_projection",
]


@pytest.mark.parametrize("name", [*TRIM_MODELS, "vgg16_pruned"])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_trims_give_valid_running_models(
    name: str, seed: int, zoo_model_path: Callable[[str], Path]
) -> None:
    model = loaded(zoo_model_path(name))
    analysis = analyze(model)
    rng = np.random.default_rng(seed)
    plan = {g.id: int(rng.integers(1, g.width + 1)) for g in analysis.free_groups()}
    trimmed = apply_plan(model, plan, analysis)
    onnx.checker.check_model(trimmed)
    assert {gid: w for gid, w in widths(trimmed).items() if gid in plan} == plan
    for conv, shape in analysis.conv_shapes(plan).items():  # the plan's predicted shapes are the real ones
        node = next(n for n in trimmed.graph.node if n.name == conv)
        w = next(t for t in trimmed.graph.initializer if t.name == node.input[1])
        assert w.dims[0] == shape.k and w.dims[1] == shape.c // shape.groups
    out = run(trimmed)
    assert out.shape == run(model).shape and np.isfinite(out).all()


def _zero_channel(model: onnx.ModelProto, conv: str, channel: int, bn_shift: bool) -> onnx.ModelProto:
    """Zero one output filter (and bias) of a conv; keep or cancel the BatchNorm shift after it."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    node = next(n for n in out.graph.node if n.name == conv)
    bn = next(n for n in out.graph.node if n.input and n.input[0] == node.output[0])
    inits = {t.name: t for t in out.graph.initializer}

    def edit(name: str, fn: Callable[[np.ndarray], None]) -> None:
        arr = numpy_helper.to_array(inits[name]).copy()
        fn(arr)
        inits[name].CopyFrom(numpy_helper.from_array(arr, name))

    edit(node.input[1], lambda a: a.__setitem__(channel, 0.0))
    edit(node.input[2], lambda a: a.__setitem__(channel, 0.0))
    edit(bn.input[2], lambda a: a.__setitem__(channel, 1.0 if bn_shift else 0.0))  # beta (Relu(1) = 1)
    edit(bn.input[3], lambda a: a.__setitem__(channel, 0.0))  # mean
    return out


def test_zero_filter_with_bn_shift_is_not_dead() -> None:
    model = tiny_mixed()
    shifted = _zero_channel(model, "conv9", 5, bn_shift=True)
    assert (
        dead_channels(shifted, analyze(shifted), "conv9") == []
    )  # a constant channel: the next conv sees it
    dead = _zero_channel(model, "conv9", 5, bn_shift=False)
    assert dead_channels(dead, analyze(dead), "conv9") == [5]
    trimmed, changes = apply_plan_report(dead, {"conv9": 23})
    assert changes[0].dead_trimmed == 1
    np.testing.assert_allclose(run(trimmed), run(dead), atol=1e-5, rtol=0)


@pytest.mark.parametrize("bias, dead", [(-0.5, True), (0.0, True), (0.5, False)])
def test_a_pruned_filter_with_a_bias_is_dead_where_the_relu_zeroes_it(bias: float, dead: bool) -> None:
    """torch.nn.utils.prune zeroes filters; exported, the BatchNorm is folded into the conv, so
    the pruned channel has a zero filter and a nonzero bias. Only a zero bias counted as dead:
    the 293 such channels of a mask-pruned ResNet18 were kept by every lossless search. A negative
    bias after a ReLU is 0 for every input, dead and trimmed exactly; a positive one is a constant
    the next conv reads, not dead."""
    n = Net(c=2)
    w = np.random.default_rng(0).standard_normal((4, 2, 3, 3)).astype(np.float32)
    w[1] = 0.0
    b = np.ones(4, np.float32)
    b[1] = bias
    c = n.op(
        "Conv", ["x", n.init("c.w", w), n.init("c.b", b)], (4, 8, 8), kernel_shape=[3, 3], pads=[1, 1, 1, 1]
    )
    r = n.op("Relu", [c], (4, 8, 8))
    model = n.build(n.conv(r, 2))
    analysis = analyze(model)
    gid = analysis.convs[0].out_group
    assert dead_channels(model, analysis, gid) == ([1] if dead else [])
    if dead:
        trimmed, changes = apply_plan_report(model, {gid: 3}, analysis)
        assert changes[0].dead_trimmed == 1
        np.testing.assert_array_equal(run(trimmed), run(model))


def test_channel_order_dead_first_then_l1() -> None:
    n = Net(c=2)
    w = np.zeros((4, 2, 1, 1), dtype=np.float32)
    w[0], w[1], w[2], w[3] = 3.0, 0.0, 1.0, 2.0
    c = n.op("Conv", ["x", n.init("c.w", w)], (4, 8, 8), kernel_shape=[1, 1])
    model = n.build(n.conv(c, 2))
    analysis = analyze(model)
    gid = analysis.convs[0].out_group
    assert channel_order(model, analysis, gid) == [1, 2, 3, 0]
    trimmed = apply_plan(model, {gid: 2}, analysis)  # drops dead 1 and weakest 2, keeps 0 and 3 in order
    kept = numpy_helper.to_array(next(t for t in trimmed.graph.initializer if t.name == "c.w"))
    assert kept[:, 0, 0, 0].tolist() == [3.0, 2.0]


def test_padding_writes_neutral_parameters() -> None:
    model = tiny_mixed()
    padded = apply_plan(model, {"conv9": 32})
    inits = {t.name: numpy_helper.to_array(t) for t in padded.graph.initializer}
    assert inits["conv9.w"].shape == (32, 16, 3, 3) and not inits["conv9.w"][24:].any()
    assert not inits["conv9.b"][24:].any()
    bn = "batchnormalization10"
    assert inits[f"{bn}.scale"][24:].tolist() == [0.0] * 8 and inits[f"{bn}.var"][24:].tolist() == [1.0] * 8
    assert not inits[f"{bn}.bias"][24:].any() and not inits[f"{bn}.mean"][24:].any()
    # the conv after the concat [conv1 16 | conv9 24→32] gets zero input weights at offsets 40..47
    w13 = inits["conv13.w"]
    assert w13.shape == (30, 48, 3, 3) and not w13[:, 40:].any()
    np.testing.assert_array_equal(w13[:, :40], numpy_helper.to_array(
        next(t for t in model.graph.initializer if t.name == "conv13.w")))  # fmt: skip


def test_depthwise_group_attribute_follows() -> None:
    padded = apply_plan(tiny_mixed(), {"conv1": 24})
    dw = next(n for n in padded.graph.node if n.name == "conv8")
    assert onnx.helper.get_attribute_value(next(a for a in dw.attribute if a.name == "group")) == 24
    np.testing.assert_allclose(run(padded), run(tiny_mixed()), atol=1e-5, rtol=0)


def test_per_channel_constants_are_resized() -> None:
    n = Net()
    a = n.cbr("x", 16)
    m = n.op("Mul", [a, n.init("scale", np.linspace(1, 2, 16).reshape(16, 1, 1))])
    s = n.op("Add", [m, n.init("shift", np.linspace(-1, 1, 16).reshape(1, 16, 1, 1))])
    model = n.build(n.conv(s, 4))
    padded = apply_plan(model, {"conv1": 20})
    inits = {t.name: numpy_helper.to_array(t) for t in padded.graph.initializer}
    assert inits["scale"].shape == (20, 1, 1) and inits["scale"][16:].ravel().tolist() == [1.0] * 4
    assert inits["shift"].shape == (1, 20, 1, 1) and not inits["shift"][0, 16:].any()
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    trimmed = apply_plan(model, {"conv1": 9})
    assert numpy_helper.to_array(next(t for t in trimmed.graph.initializer if t.name == "shift")).shape == (
        1, 9, 1, 1)  # fmt: skip


def test_per_channel_constants_held_by_constant_nodes_are_resized() -> None:
    """Exporters also write constants as Constant nodes (not initializers): their `value` follows."""
    n = Net()
    a = n.cbr("x", 16)
    scale = np.linspace(1, 2, 16, dtype=np.float32).reshape(1, 16, 1, 1)
    n.nodes.append(
        onnx.helper.make_node("Constant", [], ["scale"], name="scale_c", value=numpy_helper.from_array(scale))
    )
    model = n.build(n.conv(n.op("Mul", [a, "scale"]), 4))
    assert not analyze(model).group("conv1").frozen

    def value(m: onnx.ModelProto) -> np.ndarray:
        node = next(x for x in m.graph.node if x.name == "scale_c")
        return numpy_helper.to_array(node.attribute[0].t)

    padded = apply_plan(model, {"conv1": 20})
    assert value(padded).shape == (1, 20, 1, 1) and value(padded)[0, 16:].ravel().tolist() == [1.0] * 4
    np.testing.assert_array_equal(value(padded)[:, :16], scale)
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    trimmed = apply_plan(model, {"conv1": 9})
    assert value(trimmed).shape == (1, 9, 1, 1) and run(trimmed).shape == run(model).shape


def test_names_opset_metadata_and_doc_strings_survive() -> None:
    model = tiny_mixed()
    onnx.helper.set_model_props(model, {"author": "me", "task": "cls"})
    model.doc_string = "model doc"
    model.producer_name = "unit-test"
    model.graph.node[0].doc_string = "first conv"
    before = onnx.ModelProto()
    before.CopyFrom(model)
    padded = apply_plan(model, {"conv1": 32, "conv13": 40})
    assert model == before  # the input is not touched
    assert [n.name for n in padded.graph.node] == [n.name for n in model.graph.node]
    assert {p.key: p.value for p in padded.metadata_props} == {"author": "me", "task": "cls"}
    assert padded.doc_string == "model doc" and padded.producer_name == "unit-test"
    assert padded.graph.node[0].doc_string == "first conv"
    assert padded.opset_import == model.opset_import and padded.ir_version == model.ir_version


def test_unchanged_plan_returns_an_equal_copy() -> None:
    model = tiny_mixed()
    same = apply_plan(model, {"conv1": 16})
    assert same == model and same is not model


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ({"nope": 8}, "unknown channel group 'nope'"),
        ({"input:x": 8}, "group 'input:x' is frozen (graph input 'x'); it cannot change width"),
        ({"gemm24": 16}, "group 'gemm24' is frozen (feeds the graph output 'gemm24')"),
        ({"conv1": 0}, "width of group 'conv1' must be at least 1, got 0"),
        ({"conv1": 8.5}, "width of group 'conv1' must be an integer, got 8.5"),
    ],
)
def test_bad_plans_are_plan_errors(plan: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError, match=re.escape(message)):
        apply_plan(tiny_mixed(), plan)


def test_a_plan_past_protobufs_2_gib_is_refused_before_any_array_is_built() -> None:
    """A fresh-user audit's width of a million took 11 GB of memory, then failed to serialize."""
    model = tiny_mixed()
    with pytest.raises(
        PlanError, match=r"about \d+\.\d GiB .*over the 2 GiB one protobuf message can hold \(an ONNX file"
    ):
        apply_plan(model, {"conv1": 1_000_000})  # conv4 (in and out in that group): 9e12 weights
    # a plan far under the limit goes through
    padded = apply_plan(model, {"conv1": 64})
    assert padded.ByteSize() < 1 << 20


def test_load_plan(tmp_path: Path) -> None:
    good = tmp_path / "plan.json"
    good.write_text(json.dumps({"widths": {"a": 32, "b": 64}}))
    assert load_plan(good) == {"a": 32, "b": 64}
    cases = {
        "missing.json": (None, "missing.json: no such file"),
        "folder.json": ("", "folder.json: is a folder, expected a plan file (.json)"),  # "" makes a folder
        "bad.json": ("{not json", "not valid JSON"),
        "list.json": ("[1, 2]", 'expected {"widths"'),
        "float.json": ('{"widths": {"a": 1.5}}', "width of group 'a' must be an integer, got 1.5"),
        "bool.json": ('{"widths": {"a": true}}', "width of group 'a' must be an integer, got True"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        if text == "":
            path.mkdir()
        elif text is not None:
            path.write_text(text)
        with pytest.raises(PlanError, match=re.escape(message)):
            load_plan(path)


@pytest.mark.slow
def test_mobilenetv2_real_weights_top1_unchanged_after_padding(
    mobilenetv2_path: Path, imagenet_images: list[tuple[Path, int]]
) -> None:
    from deployopt.fidelity import preprocess_image

    images = [path for path, _ in imagenet_images]
    assert len(images) == 20
    model = load_model(mobilenetv2_path).model
    analysis = analyze(model)
    assert len(analysis.free_groups()) == 25 and len(analysis.groups) == 27  # only input and logits frozen
    # round up to a multiple of 32 (4 groups change: 16, 24, 144, 144) and pad every group past it
    ceil = {g.id: -(-g.width // 32) * 32 for g in analysis.free_groups()}
    assert sum(w != analysis.group(g).width for g, w in ceil.items()) == 4
    sessions = [
        ort_session.session(m)
        for m in (
            model,
            apply_plan(model, ceil, analysis),
            apply_plan(model, padded_plan(analysis), analysis),
        )
    ]
    for path in images:
        x = preprocess_image(path, (224, 224), resize="crop")[None]
        ref, *padded = [s.run(None, {"input": x})[0] for s in sessions]
        for out in padded:
            assert out.argmax() == ref.argmax()
            np.testing.assert_allclose(out, ref, atol=1e-3, rtol=0)


def _int64(n: Net, name: str, values: list[int]) -> str:
    n.inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
    return name


def test_resize_with_sizes_pad_and_mlp_head_are_exact() -> None:
    n = Net(hw=4)
    a = n.cbr("x", 12)
    sizes = _int64(n, "sizes", [1, 12, 8, 8])
    r = n.op("Resize", [a, "", "", sizes], (12, 8, 8), mode="nearest")
    pads = _int64(n, "pads", [0, 0, 1, 1, 0, 0, 1, 1])
    p = n.op("Pad", [r, pads], (12, 10, 10))
    c = n.cbr(p, 10)
    h = n.op("Relu", [n.fc(n.gap(c), 20)], (20, 0, 0))
    w2 = n.init("head.w", np.random.default_rng(3).standard_normal((20, 5)))
    model = n.build(n.op("MatMul", [h, w2], (5, 0, 0)))
    analysis = analyze(model)
    assert {g.id for g in analysis.free_groups()} == {"conv1", "conv6", "gemm11"}
    padded = apply_plan(model, {"conv1": 16, "conv6": 32, "gemm11": 24}, analysis)
    sizes_after = numpy_helper.to_array(next(t for t in padded.graph.initializer if t.name == "sizes"))
    assert sizes_after.tolist() == [1, 16, 8, 8]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    trimmed = apply_plan(model, {"conv1": 5, "conv6": 3, "gemm11": 7}, analysis)
    assert run(trimmed).shape == (1, 5)


def test_opset9_upsample_and_bn_pad_exactly() -> None:
    n = Net(hw=4, opset=9)
    a = n.cbr("x", 12)
    scales = n.init("scales", [1.0, 1.0, 2.0, 2.0])
    u = n.op("Upsample", [a, scales], (12, 8, 8), mode="nearest")
    model = n.build(n.conv(u, 4))
    analysis = analyze(model)
    assert not analysis.group("conv1").frozen
    padded = apply_plan(model, {"conv1": 32}, analysis)
    assert padded.opset_import[0].version == 9
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)


def test_depthwise_conv_over_a_concat() -> None:
    n = Net()
    a, b = n.cbr("x", 8), n.cbr("x", 6)
    cat = n.concat(a, b)
    dw = n.op("Relu", [n.conv(cat, 14, group=14)])
    model = n.build(n.conv(dw, 4))
    analysis = analyze(model)
    padded = apply_plan(model, {"conv1": 16, "conv4": 8}, analysis)
    dwnode = next(x for x in padded.graph.node if x.name == "conv8")
    assert onnx.helper.get_attribute_value(next(t for t in dwnode.attribute if t.name == "group")) == 24
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    assert run(apply_plan(model, {"conv1": 3, "conv4": 2}, analysis)).shape == run(model).shape


def test_initializers_listed_as_inputs_are_resized(tmp_path: Path) -> None:
    model = tiny_mixed()
    for t in model.graph.initializer:  # IR 3 style: every weight is also a graph input
        model.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    model.ir_version = 3
    del model.opset_import[:]
    model.opset_import.append(onnx.helper.make_opsetid("", 9))
    padded = apply_plan(model, {"conv9": 32})
    decl = next(i for i in padded.graph.input if i.name == "conv9.w")
    assert [d.dim_value for d in decl.type.tensor_type.shape.dim] == [32, 16, 3, 3]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)


def conv_transpose_net() -> onnx.ModelProto:
    """A UNet up-step: ConvTranspose (weights [C, K, R, S], bias) → Relu → Conv."""
    n = Net(hw=4)
    a = n.cbr("x", 12)
    w = n.init("up.w", np.random.default_rng(5).standard_normal((12, 6, 2, 2)) * 0.3)
    b = n.init("up.b", np.random.default_rng(6).standard_normal(6) * 0.1)
    up = n.op("ConvTranspose", [a, w, b], (6, 8, 8), kernel_shape=[2, 2], strides=[2, 2])
    return n.build(n.conv(n.op("Relu", [up]), 4))


def test_conv_transpose_pads_and_trims() -> None:
    model = conv_transpose_net()
    analysis = analyze(model)
    assert {g.id for g in analysis.free_groups()} == {"conv1", "convtranspose4"}
    padded = apply_plan(model, {"conv1": 16, "convtranspose4": 8}, analysis)
    shape = next(t for t in padded.graph.initializer if t.name == "up.w").dims
    assert list(shape) == [16, 8, 2, 2]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    assert run(apply_plan(model, {"conv1": 5, "convtranspose4": 3}, analysis)).shape == (1, 4, 8, 8)


def test_conv_transpose_channels_are_ranked_by_their_own_filters() -> None:
    """A ConvTranspose's output channels are its weights' axis 1. Importance ignored ConvTranspose
    producers, so every channel scored 0 and trimming dropped the first channels by index: the
    UNet's pad-then-trim-back dropped 32 real channels of a 64-wide up-conv and kept the padded ones."""
    model = conv_transpose_net()
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "up.w"))
    b = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "up.b"))
    expected = np.abs(w).sum(axis=(0, 2, 3)) + np.abs(b)
    np.testing.assert_allclose(filter_l1(analyze(model), "convtranspose4"), expected, rtol=1e-6)
    padded = apply_plan(model, {"convtranspose4": 9})
    panalysis = analyze(padded)
    assert dead_channels(padded, panalysis, "convtranspose4") == [6, 7, 8]
    back, changes = apply_plan_report(padded, {"convtranspose4": 6}, panalysis)
    assert [(c.trimmed, c.dead_trimmed) for c in changes] == [(3, 3)]
    np.testing.assert_allclose(run(back), run(model), atol=1e-6, rtol=0)
    # the smallest filter goes first when nothing is dead
    order = channel_order(model, analyze(model), "convtranspose4")
    assert order == [int(i) for i in np.argsort(expected, kind="stable")]


def grouped_net() -> onnx.ModelProto:
    """ResNeXt's bottleneck in small: conv1 (16 = 4 × 4) → BN → ReLU → conv4 (groups=4, 32 = 4 × 8)
    → BN → ReLU → conv7 (1×1 back to 16), plus the residual around the three."""
    n = Net()
    a = n.cbr("x", 16)
    b = n.cbr(n.cbr(a, 16, r=1), 32, group=4)
    c = n.bn(n.conv(b, 16, r=1))
    return n.build(n.conv(n.op("Relu", [n.op("Add", [a, c])]), 4))


def test_grouped_conv_pads_exactly_and_trims_every_conv_group_alike() -> None:
    model = grouped_net()
    analysis = analyze(model)
    inner = {g.id: (g.width, g.repeat) for g in analysis.free_groups() if g.repeat > 1}
    assert inner == {"conv4": (4, 4), "conv7": (8, 4)}
    padded = apply_plan(model, {"conv4": 7, "conv7": 11}, analysis)
    dims = {t.name: list(t.dims) for t in padded.graph.initializer}
    assert dims["conv4.w"][0] == 28 and dims["conv7.w"] == [44, 7, 3, 3] and dims["conv10.w"][1] == 44
    node = next(x for x in padded.graph.node if x.name == "conv7")
    assert onnx.helper.get_attribute_value(next(a for a in node.attribute if a.name == "group")) == 4
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    # padded channels sit at the end of every conv group: exactly they are dead, and trimming
    # them back gives the original weights bit for bit
    panalysis = analyze(padded)
    dead = dead_channels_many(padded, panalysis, ["conv4", "conv7"])
    assert dead == {"conv4": [4, 5, 6], "conv7": [8, 9, 10]}
    back, changes = apply_plan_report(padded, {"conv4": 4, "conv7": 8}, panalysis)
    assert [(c.trimmed, c.dead_trimmed) for c in changes] == [(3, 3), (3, 3)]
    np.testing.assert_array_equal(run(back), run(model))
    orig = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for t in back.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(t), orig[t.name])
    # any trim: a valid model with the shapes conv_shapes predicts, `group` still 4
    trimmed = apply_plan(model, {"conv4": 3, "conv7": 5}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    shapes = analysis.conv_shapes({"conv4": 3, "conv7": 5})
    assert (shapes["conv7"].c, shapes["conv7"].k, shapes["conv7"].groups) == (12, 20, 4)
    assert [t.dims for t in trimmed.graph.initializer if t.name == "conv7.w"] == [[20, 3, 3, 3]]
    assert run(trimmed).shape == run(model).shape


def test_grouped_conv_channel_dead_in_every_conv_group_is_trimmed_exactly() -> None:
    """Channel 1 of a grouped conv's output group is rows 1, 9, 17, 25 of its filters. Zeroed in all
    four conv groups it is dead (every offset where conv10 reads it is zero) and a trim drops it
    from each conv group, outputs unchanged; zeroed in one conv group only, it is alive."""
    model = grouped_net()
    for row in (1, 9, 17, 25):
        model = _zero_channel(model, "conv7", row, bn_shift=False)
    analysis = analyze(model)
    assert dead_channels(model, analysis, "conv7") == [1]
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "conv7.w"))
    b = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "conv7.b"))
    l1 = (np.abs(w).sum(axis=(1, 2, 3)) + np.abs(b)).reshape(4, 8).sum(axis=0)  # summed over conv groups
    np.testing.assert_allclose(filter_l1(analysis, "conv7"), l1, rtol=1e-6)
    trimmed, changes = apply_plan_report(model, {"conv7": 7}, analysis)
    assert changes[0].dead_trimmed == 1
    kept = numpy_helper.to_array(next(t for t in trimmed.graph.initializer if t.name == "conv7.w"))
    np.testing.assert_array_equal(kept, np.delete(w, [1, 9, 17, 25], axis=0))
    np.testing.assert_allclose(run(trimmed), run(model), atol=1e-5, rtol=0)
    one = _zero_channel(grouped_net(), "conv7", 9, bn_shift=False)
    assert dead_channels(one, analyze(one), "conv7") == []


def grouped_conv_transpose_net() -> onnx.ModelProto:
    """A ConvTranspose with groups=2: weights [C, K/g, R, S] = [8, 3, 2, 2], 8 → 6 channels."""
    n = Net(hw=4)
    a = n.cbr("x", 8)
    w = n.init("up.w", np.random.default_rng(5).standard_normal((8, 3, 2, 2)) * 0.3)
    b = n.init("up.b", np.random.default_rng(6).standard_normal(6) * 0.1)
    up = n.op("ConvTranspose", [a, w, b], (6, 8, 8), kernel_shape=[2, 2], strides=[2, 2], group=2)
    return n.build(n.conv(n.op("Relu", [up]), 4))


def test_grouped_conv_transpose_pads_and_trims() -> None:
    model = grouped_conv_transpose_net()
    analysis = analyze(model)
    assert {g.id: (g.width, g.repeat) for g in analysis.free_groups()} == {
        "conv1": (4, 2),
        "convtranspose4": (3, 2),
    }
    padded = apply_plan(model, {"conv1": 5, "convtranspose4": 4}, analysis)
    assert [t.dims for t in padded.graph.initializer if t.name == "up.w"] == [[10, 4, 2, 2]]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    # output channel j·3 + i of conv group j is w[4j : 4j + 4, i]; a channel sums its two groups
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "up.w"))
    b = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "up.b"))
    per_channel = [
        np.abs(w[4 * j : 4 * j + 4, i]).sum() + abs(b[3 * j + i]) for j in range(2) for i in range(3)
    ]
    expected = np.array(per_channel).reshape(2, 3).sum(axis=0)
    np.testing.assert_allclose(filter_l1(analysis, "convtranspose4"), expected, rtol=1e-6)
    panalysis = analyze(padded)
    assert dead_channels_many(padded, panalysis, ["conv1", "convtranspose4"]) == {
        "conv1": [4],
        "convtranspose4": [3],
    }
    back = apply_plan(padded, {"conv1": 4, "convtranspose4": 3}, panalysis)
    np.testing.assert_array_equal(run(back), run(model))
    trimmed = apply_plan(model, {"conv1": 3, "convtranspose4": 2}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert run(trimmed).shape == (1, 4, 8, 8)


def _torch_outputs(model: onnx.ModelProto) -> list[np.ndarray]:
    sess = ort_session.session(model)
    x = np.random.default_rng(1).standard_normal(sess.get_inputs()[0].shape).astype(np.float32)
    return sess.run(None, {sess.get_inputs()[0].name: x})


@pytest.mark.slow
def test_resnext_blocks_exported_by_torch_pad_and_trim_exactly(tmp_path: Path) -> None:
    """The sweep's `grouped` module (torch export): two ResNeXt bottlenecks (4 conv groups of 8, 8 of
    6) and a grouped ConvTranspose on the residual stream. Every grouped width + 3 (8 → 11 per conv
    group): outputs equal; padding then trimming back: exactly the padded channels are dead and
    outputs and weights come back bit for bit; a trim gives a valid model."""
    pytest.importorskip("torch")
    model = load_model(_architectures().export("grouped", tmp_path)).model
    analysis = analyze(model)
    grouped = {g.id: (g.width, g.repeat) for g in analysis.free_groups() if g.repeat > 1}
    assert sorted(grouped.values()) == [(6, 4), (6, 8), (6, 8), (8, 4), (8, 4), (8, 4)]
    assert len(analysis.free_groups()) == 7
    ref = _torch_outputs(model)
    plan = {gid: w + 3 for gid, (w, _) in grouped.items()}
    padded = apply_plan(model, plan, analysis)
    np.testing.assert_allclose(_torch_outputs(padded)[0], ref[0], atol=1e-5, rtol=0)
    original = {gid: w for gid, (w, _) in grouped.items()}
    panalysis = analyze(padded)
    dead = dead_channels_many(padded, panalysis, list(original))
    assert dead == {gid: list(range(w, w + 3)) for gid, w in original.items()}
    back = apply_plan(padded, original, panalysis)
    np.testing.assert_array_equal(_torch_outputs(back)[0], ref[0])
    orig = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for t in back.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(t), orig[t.name])
    trimmed = apply_plan(model, {gid: w - 2 for gid, w in original.items()}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert _torch_outputs(trimmed)[0].shape == ref[0].shape


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arch", "free", "grouped"), [("regnet_x_400mf", 49, 44), ("resnext50_32x4d", 37, 32)]
)
def test_torchvision_grouped_widths_are_free_and_pad_exactly(
    arch: str, free: int, grouped: int, tmp_path: Path
) -> None:
    """RegNetX-400MF (groups of 16 channels) and ResNeXt50-32x4d (32 conv groups): the groups that
    grouped convs froze (44 and 32) are free, widths per conv group; every free group + 3 pads
    exactly (1e-4 of the output's scale)."""
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    model = load_model(_architectures().export(arch, tmp_path, size=64)).model
    analysis = analyze(model)
    assert len(analysis.free_groups()) == free
    assert len([g for g in analysis.free_groups() if g.repeat > 1]) == grouped
    ref = _torch_outputs(model)[0]
    padded = apply_plan(model, {g.id: g.width + 3 for g in analysis.free_groups()}, analysis)
    np.testing.assert_allclose(_torch_outputs(padded)[0], ref, atol=1e-4 * max(1.0, float(np.abs(ref).max())))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arch", "free", "frozen_reason"),
    [
        ("efficientnet_b0", 40, None),  # SE blocks with SiLU (Sigmoid·Mul), depthwise convs
        ("shufflenet_v2_x0_5", 18, "mixes channels with other axes"),  # channel shuffle = Reshape/Transpose
    ],
)
def test_torchvision_exports_pad_exactly(
    arch: str, free: int, frozen_reason: str | None, tmp_path: Path
) -> None:
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    net = getattr(torchvision.models, arch)(weights=None).eval()
    for mod in net.modules():  # non-trivial BatchNorm statistics, as a trained net has
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.1, 0.1)
    path = tmp_path / f"{arch}.onnx"
    x = torch.randn(1, 3, 224, 224)
    axes = {"input": {0: "n"}, "logits": {0: "n"}}
    torch.onnx.export(net, x, str(path), dynamo=False, opset_version=17, input_names=["input"],
                      output_names=["logits"], dynamic_axes=axes)  # fmt: skip
    loaded = load_model(path)
    assert not any(n.op_type in ("Shape", "Constant") for n in loaded.model.graph.node)  # folded in passes
    analysis = analyze(loaded.model)
    assert len(analysis.free_groups()) == free
    if frozen_reason:
        assert any(frozen_reason in g.reason for g in analysis.groups)
    padded = apply_plan(loaded.model, padded_plan(analysis), analysis)
    sess = [ort_session.session(m)
            for m in (loaded.model, padded)]  # fmt: skip
    ref, out = (s.run(None, {"input": x.numpy()})[0] for s in sess)
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=0)


def c2f_block(opset: int = 17, residual: bool = False, sizes: list[int] | None = None) -> onnx.ModelProto:
    """YOLOv8's C2f pattern: conv → Split on channels → one half through a conv → Concat of all."""
    n = Net(opset=opset)
    a = n.cbr("x", 16)
    if residual:  # the split tensor has two producers: both are cut alike
        a = n.op("Add", [a, n.cbr("x", 16)])
    if sizes is None:
        n.nodes.append(onnx.helper.make_node("Split", [a], ["y0", "y1"], name="split", axis=1))
    elif opset >= 13:
        n.inits.append(numpy_helper.from_array(np.array(sizes, dtype=np.int64), "split_sizes"))
        n.nodes.append(onnx.helper.make_node("Split", [a, "split_sizes"], ["y0", "y1"], name="split", axis=1))
    else:
        n.nodes.append(onnx.helper.make_node("Split", [a], ["y0", "y1"], name="split", axis=1, split=sizes))
    first = sizes[0] if sizes else 8
    n.dims["y0"], n.dims["y1"] = (first, 8, 8), (16 - first, 8, 8)
    y2 = n.cbr("y1", 10)
    return n.build(n.conv(n.concat("y0", "y1", y2), 4))


@pytest.mark.parametrize(("opset", "residual"), [(17, False), (11, False), (17, True)])
def test_split_on_channels_cuts_the_producer_into_groups(opset: int, residual: bool) -> None:
    model = c2f_block(opset, residual, sizes=[6, 10])
    analysis = analyze(model)
    producers = ["conv1", "conv4"] if residual else ["conv1"]
    pieces = {g.id: (g.width, g.producers) for g in analysis.free_groups() if g.id.startswith("conv1[")}
    assert pieces == {"conv1[0]": (6, producers), "conv1[1]": (10, producers)}
    conv1 = next(c for c in analysis.convs if c.name == "conv1")
    assert conv1.out_group is None and conv1.out_groups == [("conv1[0]", 6), ("conv1[1]", 10)]
    plan = {"conv1[0]": 8, "conv1[1]": 13}
    assert analysis.conv_shapes(plan)["conv1"].k == 21
    padded = apply_plan(model, plan, analysis)
    split = next(x for x in padded.graph.node if x.op_type == "Split")
    if opset >= 13:
        sizes = numpy_helper.to_array(next(t for t in padded.graph.initializer if t.name == "split_sizes"))
        assert sizes.tolist() == [8, 13]
    else:
        assert list(
            onnx.helper.get_attribute_value(next(a for a in split.attribute if a.name == "split"))
        ) == [8, 13]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    panalysis = analyze(padded)  # the same ids on the edited model: pad, then trim back exactly
    assert dead_channels(padded, panalysis, "conv1[0]") == [6, 7]
    back = apply_plan(padded, {"conv1[0]": 6, "conv1[1]": 10}, panalysis)
    np.testing.assert_allclose(run(back), run(model), atol=1e-6, rtol=0)
    assert run(apply_plan(model, {"conv1[0]": 2, "conv1[1]": 3}, analysis)).shape == (1, 4, 8, 8)


def test_equal_split_without_sizes_freezes() -> None:
    """The rule on its own; load_model spells such sizes out first where the outputs' widths are
    known (tests/test_model_load.py), so only a Split of unknown widths reaches this."""
    analysis = analyze(c2f_block(opset=17, sizes=None))
    g = analysis.group("conv1")
    assert g.frozen and g.reason == "Split split cuts channels at sizes it does not spell out"


@pytest.mark.slow
def test_yolov8_style_detector_pads_exactly_and_trims_to_a_valid_model(tmp_path: Path) -> None:
    """The C2f Split, SPPF's 4-way Concat, the upsampled PAN Concats and the residual adds couple
    channels across the whole detector; padding every free group changes no output, and a trim
    of every free group leaves a model onnx and onnxruntime accept with the planned widths."""
    pytest.importorskip("torch")
    from deployopt.zoo.yolo import export_yolo_like

    path = tmp_path / "yolo.onnx"
    x = export_yolo_like(path)
    model = load_model(path).model
    analysis = analyze(model)
    free = analysis.free_groups()
    # every group but the input and the heads' 65 outputs: the C2f Split pieces too, whose sizes
    # constants torch's exporter shares between blocks of equal width (copied per reader at load)
    assert len(free) == 47
    assert {g.width for g in analysis.groups if g.frozen} == {3, 65}
    sess = [ort_session.session(m)
            for m in (model, apply_plan(model, padded_plan(analysis), analysis))]  # fmt: skip
    ref, out = (s.run(None, {"images": x}) for s in sess)
    for r, o in zip(ref, out):
        np.testing.assert_allclose(o, r, atol=1e-4, rtol=0)
    trim = {g.id: max(1, g.width - 8) for g in free}
    trimmed = apply_plan(model, trim, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert {g.id: g.width for g in analyze(trimmed).free_groups()} == trim
    outs = ort_session.session(trimmed).run(None, {"images": x})
    assert [o.shape for o in outs] == [r.shape for r in ref]


@pytest.mark.slow
def test_yolov8_detect_head_pads_exactly_and_trims_to_a_valid_model(yolo_detect: tuple[Path, Any]) -> None:
    """ultralytics' Detect head (box branch cv2, class branch cv3, per-level Concat → Reshape over
    anchors, DFL softmax, dist2bbox with constant anchors, sigmoid scores): the branches' inner
    widths are free; their 64 / nc outputs are one group per branch over the levels (the Reshape
    over the anchors keeps the channels, the Concat of the levels joins them), frozen: the box
    outputs by the DFL's Reshape that splits 64 into 4 × 16, the scores by the graph output.
    Padding every free group changes no output (boxes are in pixels: tolerance relative to their
    scale), a trim of every free group is a valid model, and onnx2torch converts the export."""
    path, x = yolo_detect
    model = load_model(path).model
    analysis = analyze(model)
    groups = {g.id: g for g in analysis.groups}
    c2, c3, nc = 64, 80, 80  # ch[0] = 50: c2 = max(16, 50 // 4, 64), c3 = max(50, min(80, 100))
    why = {"cv2": "Reshape /detect/dfl/Reshape mixes channels with other axes",
           "cv3": "feeds the graph output 'output0'"}  # fmt: skip
    for level in range(3):
        for branch, inner, out in (("cv2", c2, 64), ("cv3", c3, nc)):
            for j in (0, 1):  # Conv 3×3 → Conv 3×3: BN folded, SiLU as Sigmoid·Mul
                g = groups[f"/detect/{branch}.{level}/{branch}.{level}.{j}/conv/Conv"]
                assert not g.frozen and g.width == inner
            last = analysis.group(f"/detect/{branch}.{level}/{branch}.{level}.2/Conv")
            assert last.frozen and last.width == out and last.reason == why[branch]
            assert last.producers == [f"/detect/{branch}.{k}/{branch}.{k}.2/Conv" for k in range(3)]
    assert groups["/detect/dfl/conv/Conv"].frozen  # the fixed arange(16) conv: 1 channel, reshaped
    free = analysis.free_groups()
    assert len([g for g in free if g.id.startswith("/detect/")]) == 12  # 3 levels × 2 branches × 2
    assert len(free) == 59  # the plain-head detector's 47 + those 12
    sess = [ort_session.session(m)
            for m in (model, apply_plan(model, padded_plan(analysis), analysis))]  # fmt: skip
    (ref,), (out,) = (s.run(None, {"images": x}) for s in sess)
    assert ref.shape == (2, 4 + nc, 20 * 20 + 10 * 10 + 5 * 5)  # xywh + class scores per anchor
    boxes, scores = ref[:, :4], ref[:, 4:]
    np.testing.assert_allclose(out[:, :4], boxes, atol=1e-5 * np.abs(boxes).max(), rtol=0)
    np.testing.assert_allclose(out[:, 4:], scores, atol=1e-4, rtol=0)
    trim = {g.id: max(1, g.width - 8) for g in free}
    trimmed = apply_plan(model, trim, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert {g.id: g.width for g in analyze(trimmed).free_groups()} == trim
    (cut,) = ort_session.session(trimmed).run(None, {"images": x})
    assert cut.shape == ref.shape and np.isfinite(cut).all()
    # the torch backend converts with onnx2torch; the shape constants it must keep on the host
    # (CUDA-graph capture) include the DFL's Reshape targets
    pytest.importorskip("onnx2torch")
    import torch
    from onnx2torch import convert

    from deployopt.backends.torch_worker import host_constants

    module = convert(model).eval()
    assert [2, 4, 16, 525] in [v.tolist() for v in host_constants(module).values()]
    with torch.no_grad():
        got = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got[:, :4], boxes, atol=1e-5 * np.abs(boxes).max(), rtol=0)
    np.testing.assert_allclose(got[:, 4:], scores, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_a_dynamic_yolov8_export_needs_an_input_shape_then_is_the_static_one(tmp_path: Path) -> None:
    """`yolo export dynamic=True`: batch and image size symbolic, anchors computed in the graph from
    Shape ops. Loading refuses it in one line until it is given a shape; with one, folding leaves
    the same 59 free groups as the static export, and padding them all is output-exact."""
    pytest.importorskip("torch")
    from deployopt.errors import ModelError
    from deployopt.zoo.yolo import export_yolo_like

    path = tmp_path / "dyn.onnx"
    x = export_yolo_like(path, head="detect", dynamic=True, batch=1)
    assert "Shape" in {n.op_type for n in onnx.load(str(path)).graph.node}
    with pytest.raises(ModelError, match="input 'images' is dynamic; give a static shape"):
        load_model(path)
    fixed = load_model(path, input_shapes={"images": [1, 3, 160, 160]})
    assert any(n.startswith("folded constant subgraphs") for n in fixed.notices)
    assert "Shape" not in {n.op_type for n in fixed.model.graph.node}
    analysis = analyze(fixed.model)
    assert len(analysis.free_groups()) == 59
    padded = apply_plan(fixed.model, padded_plan(analysis), analysis)
    sessions = [ort_session.session(m)
                for m in (fixed.model, padded)]  # fmt: skip
    ref, out = (s.run(None, {"images": x})[0] for s in sessions)
    np.testing.assert_allclose(out[:, :4], ref[:, :4], atol=1e-5 * np.abs(ref[:, :4]).max(), rtol=0)
    np.testing.assert_allclose(out[:, 4:], ref[:, 4:], atol=1e-4, rtol=0)


def test_spatial_attention_map_keeps_its_one_channel() -> None:
    """CBAM's spatial attention: a 1-channel Conv's sigmoid map multiplies every channel of the
    features ([N,1,H,W] × [N,C,H,W]). Its one channel broadcasts, so padding it would break the Mul:
    it is frozen (before, it was free and the padded model failed validation), and padding the
    features is exact."""
    n = Net()
    a = n.cbr("x", 12)
    s = n.op("Sigmoid", [n.conv(a, 1)], (1, 8, 8))
    model = n.build(n.conv(n.op("Mul", [a, s], (12, 8, 8)), 4))
    analysis = analyze(model)
    (attention,) = [g for g in analysis.groups if g.width == 1]
    assert attention.frozen and re.fullmatch(r"Mul \S+ broadcasts it over 12 channels", attention.reason)
    assert [g.width for g in analysis.free_groups()] == [12]
    padded = apply_plan(model, padded_plan(analysis), analysis)
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)


def _architectures() -> Any:
    """benchmarks/check_architectures.py: the torch modules of the architecture sweep."""
    return load_script("benchmarks/check_architectures.py", "check_architectures")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arch", "free", "frozen_reason"),
    [
        ("resnet18", 12, None),
        ("mobilenet_v3_small", 27, None),  # Hardswish, SE with Hardsigmoid
        ("regnet_y_400mf", 53, None),  # grouped convs + SE (the gate cut to the conv groups)
        ("grouped", 7, None),  # ResNeXt blocks, a grouped ConvTranspose on the residual stream
        ("squeezenet1_1", 25, None),  # Fire modules: concat of 1×1 and 3×3 expands
        ("lraspp_mobilenet_v3_large", 30, None),  # segmentation head: bilinear Resize, sigmoid gate
        ("unet", 12, None),  # ConvTranspose up-steps, skip Concats
        ("cbam", 5, "reduces over channels"),  # channel mean/max of the spatial attention
        ("ghost", 4, None),  # cheap depthwise + Concat + Slice to the output width
        ("espcn_pixelshuffle", 3, "DepthToSpace"),  # PixelShuffle
        ("yolov5_focus_sppf_c3", 19, None),  # Focus slices, SPPF, C3, nearest upsampling
        ("googlenet", 57, None),  # Inception branches into Concats
        ("psp", 6, None),  # pyramid pooling: AveragePool → 1×1 conv → bilinear Resize → Concat
        ("csp_chunk", 9, None),  # YOLOv8's C2f written with chunk (Slices), torch.split with sizes
        (
            "attention",
            7,
            "expects channels on axis 1",
        ),  # SE (Linear, expand_as), CBAM MLP, ECA (Conv1d), a gate
    ],
)
def test_architectures_pad_exactly_and_trim_to_valid_models(
    arch: str, free: int, frozen_reason: str | None, tmp_path: Path
) -> None:
    """The architecture sweep (docs/surgery.md, "Architectures checked") on a fast subset at 64×64:
    every free group padded past the next multiple of 32 leaves every output equal (1e-4 of its
    scale); every free group trimmed by 8 (at least to 1; 2 per conv group of a grouped conv) gives
    a model that passes the full checker, runs, has the
    planned widths and the conv shapes `conv_shapes` predicts; padding then trimming back finds
    exactly the padded channels dead."""
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    model = load_model(_architectures().export(arch, tmp_path, size=64)).model
    analysis = analyze(model)
    assert len(analysis.free_groups()) == free
    if frozen_reason:
        assert any(frozen_reason in g.reason for g in analysis.groups)

    def outputs(m: onnx.ModelProto) -> list[np.ndarray]:
        sess = ort_session.session(m)
        x = np.random.default_rng(1).standard_normal(sess.get_inputs()[0].shape).astype(np.float32)
        return sess.run(None, {sess.get_inputs()[0].name: x})

    ref = outputs(model)
    padded = apply_plan(model, padded_plan(analysis), analysis)
    for r, o in zip(ref, outputs(padded)):
        np.testing.assert_allclose(o, r, atol=1e-4 * max(1.0, float(np.abs(r).max())), rtol=0)
    plan = {g.id: _architectures().trim_width(g) for g in analysis.free_groups()}
    trimmed = apply_plan(model, plan, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert [o.shape for o in outputs(trimmed)] == [r.shape for r in ref]
    assert {gid: w for gid, w in widths(trimmed).items() if gid in plan} == plan
    weights = {t.name: list(t.dims) for t in trimmed.graph.initializer}
    for conv, shape in analysis.conv_shapes(plan).items():
        node = next(n for n in trimmed.graph.node if n.name == conv)
        assert weights[node.input[1]][:2] == [shape.k, shape.c // shape.groups]
    original = {g.id: g.width for g in analysis.free_groups()}
    back, changes = apply_plan_report(padded, original, analyze(padded))
    assert all(c.trimmed == c.dead_trimmed > 0 for c in changes)
    for r, o in zip(ref, outputs(back)):
        np.testing.assert_allclose(o, r, atol=1e-4 * max(1.0, float(np.abs(r).max())), rtol=0)


def test_se_with_linear_and_expand_as_is_free_and_pads_exactly() -> None:
    """The classic SENet code: GAP → view(b, c) → Linear → ReLU → Linear → Sigmoid → view(b, c, 1, 1)
    → expand_as(x) → x * scale. Expand had no rule, so the whole block's width froze ("unknown op
    Expand"); its target spells out C, which now follows the plan."""
    n = Net()
    a = n.cbr("x", 12)
    s = n.op("Sigmoid", [n.fc(n.op("Relu", [n.fc(n.gap(a), 4)]), 12)])
    for name, value in (("se.shape", [1, 12, 1, 1]), ("se.target", [1, 12, 8, 8])):
        n.inits.append(numpy_helper.from_array(np.array(value, dtype=np.int64), name))
    e = n.op("Expand", [n.op("Reshape", [s, "se.shape"], (12, 1, 1)), "se.target"], (12, 8, 8))
    model = n.build(n.conv(n.op("Mul", [a, e]), 4))
    analysis = analyze(model)
    assert {g.id: g.width for g in analysis.free_groups()} == {"conv1": 12, "gemm6": 4}
    padded = apply_plan(model, {"conv1": 32, "gemm6": 5}, analysis)
    target = numpy_helper.to_array(next(t for t in padded.graph.initializer if t.name == "se.target"))
    assert target.tolist() == [1, 32, 8, 8]
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    trimmed = apply_plan(model, {"conv1": 7, "gemm6": 3}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert run(trimmed).shape == (1, 4, 8, 8)


def test_expand_of_one_channel_over_many_freezes() -> None:
    """An Expand that broadcasts a 1-channel map over C channels (its target spells out C): the map
    and the features it multiplies stay frozen."""
    n = Net()
    a = n.cbr("x", 12)
    m = n.op("Sigmoid", [n.conv(a, 1)], (1, 8, 8))
    n.inits.append(numpy_helper.from_array(np.array([1, 12, 8, 8], dtype=np.int64), "target"))
    model = n.build(n.conv(n.op("Mul", [a, n.op("Expand", [m, "target"], (12, 8, 8))]), 4))
    reasons = {g.id: g.reason for g in analyze(model).groups}
    assert reasons["conv4"] == reasons["conv1"] == "Expand expand6 broadcasts 1 channel(s) over 12"


@pytest.mark.parametrize("head", ["Gemm", "MatMul"])
def test_a_head_reading_nonzero_padded_features_gets_zero_weights(head: str) -> None:
    """Sigmoid(0) = 0.5: padded channels reach the head's GAP as 0.5, not 0, so only zero rows in
    the head's weights keep the output exact (elsewhere a padded feature is 0 and any row passes)."""
    n = Net()
    feats = n.op("Flatten", [n.gap(n.op("Sigmoid", [n.conv("x", 12)]))], (12, 0, 0), axis=1)
    w = n.init("head.w", np.random.default_rng(5).standard_normal((12, 5)) * 0.3)
    if head == "Gemm":
        out = n.op("Gemm", [feats, w, n.init("head.b", np.zeros(5))], (5, 0, 0))
    else:
        out = n.op("MatMul", [feats, w], (5, 0, 0))
    model = n.build(out)
    padded = apply_plan(model, {"conv1": 16})
    w_after = numpy_helper.to_array(next(t for t in padded.graph.initializer if t.name == "head.w"))
    assert w_after.shape == (16, 5) and not w_after[12:].any()
    np.testing.assert_allclose(run(padded), run(model), atol=1e-6, rtol=0)


def test_instance_norm_pads_with_neutral_parameters_and_trims_back_exactly() -> None:
    """A padded channel is constant, so InstanceNorm maps it to its bias: scale and bias 0 keep it
    dead (a bias of 1 would still give the same output, but the channel could not be trimmed back)."""
    n = Net()
    a = n.conv("x", 8)
    scale = n.init("in.scale", np.random.default_rng(2).uniform(0.5, 1.5, 8))
    bias = n.init("in.bias", np.random.default_rng(3).uniform(0.5, 1.5, 8))
    model = n.build(n.conv(n.op("Relu", [n.op("InstanceNormalization", [a, scale, bias])]), 4))
    analysis = analyze(model)
    assert not analysis.group("conv1").frozen
    padded = apply_plan(model, {"conv1": 16}, analysis)
    inits = {t.name: numpy_helper.to_array(t) for t in padded.graph.initializer}
    assert inits["in.scale"].shape == inits["in.bias"].shape == (16,)
    assert not inits["in.scale"][8:].any() and not inits["in.bias"][8:].any()
    np.testing.assert_allclose(run(padded), run(model), atol=1e-5, rtol=0)
    back, changes = apply_plan_report(padded, {"conv1": 8})
    assert [(c.trimmed, c.dead_trimmed) for c in changes] == [(8, 8)]
    np.testing.assert_allclose(run(back), run(model), atol=1e-5, rtol=0)


@pytest.mark.parametrize("op", ["InstanceNormalization", "LayerNormalization"])
def test_a_normalization_without_epsilon_freezes(op: str) -> None:
    """With epsilon 0 a padded channel (constant over what it normalizes: variance 0) normalizes to
    0/0 = NaN, and the next conv's zero weights keep it (NaN·0 = NaN): padded InstanceNorm and
    LayerNorm-over-W models gave NaN in every output, written with exit 0. Such a group is frozen;
    with the default epsilon it stays free and pads exactly."""
    for eps, frozen in ((0.0, True), (1e-5, False)):
        n = Net(opset=17)
        a = n.conv("x", 8)
        if op == "LayerNormalization":  # over W: each channel normalized on its own
            params = [n.init("ln.scale", np.full(8, 1.2)), n.init("ln.bias", np.full(8, 0.3))]
            norm = n.op(op, [a, *params], axis=-1, epsilon=eps)
        else:
            params = [n.init("in.scale", np.full(8, 1.2)), n.init("in.bias", np.full(8, 0.3))]
            norm = n.op(op, [a, *params], epsilon=eps)
        model = n.build(n.conv(n.op("Relu", [norm]), 4))
        group = analyze(model).group("conv1")
        assert group.frozen == frozen, group.reason
        if frozen:
            assert group.reason.endswith("has epsilon 0: a padded channel's variance 0 would give NaN")
            with pytest.raises(PlanError, match="frozen"):
                apply_plan(model, {"conv1": 16})
        else:
            np.testing.assert_allclose(run(apply_plan(model, {"conv1": 16})), run(model), atol=1e-5, rtol=0)


def test_architecture_table_rows_are_rendered_from_the_sweep_results() -> None:
    """check_architectures.py --markdown: node names and numbers in the reasons generalized, the
    input and output freezes left out, the pad error rounded as docs/surgery.md shows it."""
    row = _architectures().markdown_row(
        {
            "arch": "cbam", "input_shape": [1, 3, 64, 64], "analyze": "ok", "free": 5, "frozen": 10,
            "reasons": {"graph input '…'": 1, "ReduceMean N reduces over channels": 4,
                        "Mul N broadcasts it over # channels": 2, "feeds the graph output '…'": 1},
            "pad_err": 7.2e-09, "pad": "ok", "trim": "ok", "pad_trim_back": "ok", "cli": "ok",
        }
    )  # fmt: skip
    assert row == (
        "| cbam | 64 | 5 / 10 | ReduceMean reduces over channels ×4; Mul broadcasts it over n channels ×2 "
        "| 7e-09 | ok | ok | ok |"
    )
