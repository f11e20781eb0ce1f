"""The zoo: every model valid, runnable, non-degenerate, with the widths asked for; variants exact."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import ort_session
import pytest
from onnx import numpy_helper
from zoo_models import MODELS, RESNET56_PRUNED_INNER, VARIANT_OF, VGG16_PRUNED_WIDTHS

from deployopt import zoo
from deployopt.zoo.builder import GraphBuilder


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort_session.session(model, opts)


def _inputs(model: onnx.ModelProto, n: int, seed: int = 1) -> list[np.ndarray]:
    dims = model.graph.input[0].type.tensor_type.shape.dim
    shape = [d.dim_value if d.dim_value > 0 else 2 for d in dims]
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def _run(model: onnx.ModelProto, xs: list[np.ndarray]) -> np.ndarray:
    sess = _session(model)
    return np.concatenate([sess.run(None, {"input": x})[0] for x in xs])


def _widths_by_name(model: onnx.ModelProto) -> dict[str, int]:
    return dict(zip([n.name for n in model.graph.node if n.op_type == "Conv"], zoo.conv_widths(model)))


def _attr(node: onnx.NodeProto, name: str):
    return next(onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_is_valid_runs_and_is_not_degenerate(name: str, zoo_model_path) -> None:
    path = zoo_model_path(name)
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))
    assert [i.name for i in model.graph.input] == ["input"]
    assert [o.name for o in model.graph.output] == ["logits"]
    logits = _run(model, _inputs(model, 6))
    assert logits.shape[1] == 10
    assert np.isfinite(logits).all()
    assert 0.1 < np.abs(logits).max() < 50
    # Different inputs must give different predictions, or top-1 agreement would test nothing.
    assert len(set(logits.argmax(axis=1).tolist())) >= 3


def test_vgg16_widths_and_structure(zoo_model) -> None:
    model = zoo_model("vgg16_cifar")
    assert zoo.conv_widths(model) == [64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512]
    ops = _ops(model)
    assert ops.count("BatchNormalization") == 13 and ops.count("Relu") == 13 and ops.count("MaxPool") == 5
    assert ops[-2:] == ["Flatten", "Gemm"]
    fc = {t.name: t for t in model.graph.initializer}["classifier.fc.weight"]
    assert list(fc.dims) == [10, 512]  # 32×32 pooled five times to 1×1
    assert zoo.conv_widths(zoo_model("vgg16_pruned")) == VGG16_PRUNED_WIDTHS


def test_vgg16_batch_is_static(zoo_model) -> None:
    model = zoo_model("vgg16_pruned_b4")
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [4, 3, 32, 32]
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [4, 10]


@pytest.mark.parametrize(
    "name, inner",
    [("resnet56_cifar", list(zoo.RESNET56_INNER_WIDTHS)), ("resnet56_pruned", RESNET56_PRUNED_INNER)],
)
def test_resnet56_widths_and_structure(name: str, inner: list[int], zoo_model) -> None:
    model = zoo_model(name)
    widths = _widths_by_name(model)
    assert len(widths) == 1 + 27 * 2 + 2  # stem, two convs per block, two projections
    got_inner = [widths[f"layer{s}.{b}.conv1.conv"] for s in (1, 2, 3) for b in range(9)]
    assert got_inner == inner
    assert [widths[f"layer{s}.{b}.conv2.conv"] for s in (1, 2, 3) for b in range(9)] == [16] * 9 + [
        32
    ] * 9 + [64] * 9
    assert widths["stem.conv"] == 16
    assert widths["layer2.0.downsample.conv"] == 32 and widths["layer3.0.downsample.conv"] == 64
    ops = _ops(model)
    assert ops.count("Add") == 27 and ops.count("GlobalAveragePool") == 1 and ops[-1] == "Gemm"
    strided = [n.name for n in model.graph.node if n.op_type == "Conv" and _attr(n, "strides") == [2, 2]]
    assert sorted(strided) == sorted(
        ["layer2.0.conv1.conv", "layer2.0.downsample.conv", "layer3.0.conv1.conv", "layer3.0.downsample.conv"]
    )


def test_batchnorm_parameters_are_not_trivial(zoo_model) -> None:
    model = zoo_model("resnet56_pruned")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    assert len(bns) == 1 + 27 * 2 + 2
    for bn in bns:
        gamma, beta, mean, var = (inits[i] for i in bn.input[1:])
        assert not np.allclose(gamma, 1) and not np.allclose(beta, 0)
        assert not np.allclose(mean, 0) and not np.allclose(var, 1) and (var > 0).all()


def test_coupling_patterns_are_present(zoo_model) -> None:
    dn = zoo_model("densenet_like")
    producers = {o: n for n in dn.graph.node for o in n.output}
    bn_on_concat = [
        n
        for n in dn.graph.node
        if n.op_type == "BatchNormalization" and producers[n.input[0]].op_type == "Concat"
    ]
    assert len(bn_on_concat) == 2 * 3 + 1 + 1  # layers 2-4 of both blocks, the transition, the final BN
    assert _widths_by_name(dn)["block2.layer4.conv"] == 8
    assert zoo.conv_widths(zoo.densenet_like(growth=[3, 4, 5, 6, 7, 8, 9, 10]))[1:5] == [3, 4, 5, 6]

    se = zoo_model("se_net")
    assert _ops(se).count("Sigmoid") == 3 and _ops(se).count("Mul") == 3
    w = _widths_by_name(se)
    assert (w["layer2.0.se.fc1"], w["layer2.0.se.fc2"]) == (8, 32)

    inc = zoo_model("inception_like")
    concats = [n for n in inc.graph.node if n.op_type == "Concat"]
    assert [len(n.input) for n in concats] == [4, 4]
    kernels = {n.name: _attr(n, "kernel_shape") for n in inc.graph.node if n.op_type == "Conv"}
    assert kernels["inception1.branch3.conv"] == [5, 5]

    mb = zoo_model("mobilenet_like")
    depthwise = [n for n in mb.graph.node if n.op_type == "Conv" and _attr(n, "group") > 1]
    assert [_attr(n, "group") for n in depthwise] == [16, 96, 144, 144, 192]
    assert _ops(mb).count("Add") == 3 and _ops(mb).count("Clip") == 1 + 2 * 5 - 1 + 1
    rp64 = zoo_model("resnet_projection_64")
    assert [d.dim_value for d in rp64.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 64, 64]


@pytest.mark.parametrize("variant", sorted(VARIANT_OF))
def test_variants_reproduce_their_base_model(variant: str, zoo_model) -> None:
    base, var = zoo_model(VARIANT_OF[variant]), zoo_model(variant)
    xs = _inputs(base, 3, seed=7)
    np.testing.assert_allclose(_run(var, xs), _run(base, xs), rtol=1e-4, atol=1e-4)
    assert zoo.conv_widths(var) == zoo.conv_widths(base)


def test_variants_have_the_promised_form(zoo_model) -> None:
    const = zoo_model("resnet_projection_constants")
    assert len(const.graph.initializer) == 0 and "Constant" in _ops(const)
    cos = zoo_model("resnet_projection_constantofshape")
    assert _ops(cos).count("ConstantOfShape") >= 5
    gemm = next(n for n in cos.graph.node if n.op_type == "Gemm")
    assert gemm.input[2] not in {t.name for t in cos.graph.initializer}  # computed, not stored
    assert "Add" not in _ops(zoo_model("resnet_projection_sum")) and "Sum" in _ops(
        zoo_model("resnet_projection_sum")
    )
    dyn = zoo_model("mobilenet_like_dynamic")
    assert dyn.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert _run(dyn, [np.zeros((5, 3, 32, 32), np.float32)]).shape == (5, 10)
    old = zoo_model("mobilenet_like_opset9")
    assert old.opset_import[0].version == 9
    clip = next(n for n in old.graph.node if n.op_type == "Clip")
    assert len(clip.input) == 1 and {a.name for a in clip.attribute} == {"min", "max"}


def test_builder_is_deterministic_and_seeded() -> None:
    a = zoo.se_net(seed=3).SerializeToString()
    assert a == zoo.se_net(seed=3).SerializeToString()
    assert a != zoo.se_net(seed=4).SerializeToString()


def test_numpy_reference_matches_onnxruntime() -> None:
    """The builder's own forward pass (used for BN statistics) agrees with onnxruntime."""
    b = GraphBuilder(seed=0, batch=8, probe_batch=8, image_size=16)
    x = b.conv_bn(b.input_name, 12, 3, stride=2, name="c1")
    y = b.conv_bn(x, 12, 3, groups=12, act="relu6", name="dw")
    z = b.concat([x, b.maxpool(y, 3, stride=1, pad=1, name="mp")], name="cat")
    g = b.sigmoid(b.conv(b.gap(z), 24, 1, bias=True, name="fc1"))
    z = b.add(b.mul(z, g), z)
    z = b.concat([b.avgpool(z, 2), b.avgpool(b.conv(b.input_name, 4, 1, stride=2, bias=True, name="p"), 2)])
    out = b.classifier(z, 5)
    model = b.build(out, graph_name="t")
    got = _session(model).run(None, {"input": b.probe})[0]
    np.testing.assert_allclose(got, b.values["logits"], rtol=1e-4, atol=1e-4)


def test_bad_widths_are_refused() -> None:
    with pytest.raises(ValueError, match="expected 13 widths"):
        zoo.vgg16_cifar([64] * 12)
    with pytest.raises(ValueError, match=">= 1"):
        zoo.resnet56_cifar([0] + [16] * 26)


def test_random_prune_and_round_up() -> None:
    pruned = zoo.random_prune(zoo.VGG16_WIDTHS, seed=0)
    assert pruned == zoo.random_prune(zoo.VGG16_WIDTHS, seed=0) != zoo.random_prune(zoo.VGG16_WIDTHS, seed=1)
    for full, kept in zip(zoo.VGG16_WIDTHS, pruned):
        assert round(0.35 * full) <= kept <= round(0.9 * full)
    assert zoo.random_prune([1, 2], seed=0) == [max(1, w) for w in zoo.random_prune([1, 2], seed=0)]
    assert min(zoo.random_prune([1] * 50, seed=5)) == 1
    assert zoo.round_up([1, 8, 9, 52, 63, 64]) == [8, 8, 16, 56, 64, 64]
    assert zoo.round_up([33], multiple=32) == [64]
    with pytest.raises(ValueError):
        zoo.random_prune([8], seed=0, lo=0.9, hi=0.5)


def test_bundled_example_is_what_its_generator_builds() -> None:
    from scripts import ROOT, load_script

    gen = load_script("examples/make_examples.py", "make_examples")
    path = ROOT / "examples" / "resnet56_pruned_cifar.onnx"
    assert path.stat().st_size < 3_000_000
    committed = onnx.load(str(path))
    onnx.checker.check_model(committed)
    widths = _widths_by_name(committed)
    inner = [widths[f"layer{s}.{b}.conv1.conv"] for s in (1, 2, 3) for b in range(9)]
    assert inner == gen.example_widths() == zoo.random_prune(zoo.RESNET56_INNER_WIDTHS, seed=0)
    assert inner[:3] == [11, 8, 6] and inner[-1] == 58
    rebuilt = gen.build_example()
    assert zoo.conv_widths(rebuilt) == zoo.conv_widths(committed)
    # Seeded draws (conv weights, BN gamma/beta) must be bit-identical. BN running statistics and
    # the standardised classifier come from a numpy forward pass of a probe batch, whose float32
    # sums differ in the last bits between numpy releases (2.4's SIMD reductions moved them by
    # ~1e-6 relative): those are compared to 1e-4.
    probe_derived = (".running_mean", ".running_var", "classifier.fc.weight", "classifier.fc.bias")
    ours = {i.name: numpy_helper.to_array(i) for i in rebuilt.graph.initializer}
    theirs = {i.name: numpy_helper.to_array(i) for i in committed.graph.initializer}
    assert ours.keys() == theirs.keys()
    for name, value in theirs.items():
        if name.endswith(probe_derived):
            np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
        else:
            np.testing.assert_array_equal(ours[name], value, err_msg=name)
    xs = _inputs(committed, 4, seed=3)
    np.testing.assert_allclose(_run(committed, xs), _run(rebuilt, xs), rtol=1e-4, atol=1e-4)


def test_custom_widths_are_honoured_everywhere() -> None:
    rp = _widths_by_name(zoo.resnet_projection((8, 12), blocks_per_stage=2, inner_widths=[3, 5, 7, 9]))
    assert [rp[f"layer{s}.{b}.conv1.conv"] for s in (1, 2) for b in (0, 1)] == [3, 5, 7, 9]
    assert (rp["stem.conv"], rp["layer2.0.downsample.conv"], rp["layer2.1.conv2.conv"]) == (8, 12, 12)
    se = _widths_by_name(zoo.se_net((8, 24), reduction=8))
    assert (se["layer1.0.se.fc1"], se["layer2.0.se.fc1"], se["layer2.0.se.fc2"]) == (1, 3, 24)
    inc = _widths_by_name(zoo.inception_like(stem_width=10, branch_widths=(1, 2, 3, 4, 5, 6)))
    assert [inc[f"inception2.{b}.conv"] for b in ("branch1", "branch2", "branch3", "branch4")] == [1, 3, 5, 6]
    assert inc["inception2.branch3.reduce.conv"] == 4
    mb = zoo.mobilenet_like(stem_width=8, settings=[(1, 8, 1, 1), (4, 12, 2, 2)], last_width=20)
    assert zoo.conv_widths(mb) == [8, 8, 8, 32, 32, 12, 48, 48, 12, 20]
    assert _ops(mb).count("Add") == 2
    assert zoo.conv_widths(zoo.vgg16_cifar(list(range(1, 14))))[-1] == 13


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"head": "yolov5"}, "head must be one of plain, detect, got 'yolov5'"),
     ({"head": "detect", "nc": 0}, r"nc \(number of classes\) must be >= 1, got 0"),
     ({"widths": (8, 16, 32)}, r"need five widths >= 2")],
)  # fmt: skip
def test_yolo_like_bad_arguments_are_one_line_before_torch_runs(kwargs: dict, message: str, tmp_path) -> None:
    from deployopt.zoo.yolo import export_yolo_like

    with pytest.raises(ValueError, match=message):
        export_yolo_like(tmp_path / "yolo.onnx", **kwargs)
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def ghostnet_64(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    """GhostNet 1.0 exported at 64×64, batch 1 (the architecture is the same at any size)."""
    pytest.importorskip("torch")
    from deployopt.model import load_model
    from deployopt.zoo.ghostnet import export_ghostnet

    return load_model(export_ghostnet(tmp_path_factory.mktemp("ghostnet") / "ghostnet.onnx", size=64)).model


def test_ghostnet_structure(ghostnet_64: onnx.ModelProto) -> None:
    """16 ghost bottlenecks: 2 ghost modules each (1×1 primary, depthwise 3×3 cheap, Concat, Slice),
    4 strided depthwise convs, 7 SE blocks, 5 projection shortcuts; BatchNorm folded."""
    model = ghostnet_64
    ops = _ops(model)
    counts = {
        op: ops.count(op) for op in ("Conv", "Concat", "Slice", "Add", "Mul", "Clip", "GlobalAveragePool")
    }
    assert counts == {
        "Conv": 1 + 16 * 4 + 4 + 7 * 2 + 5 * 2 + 2,
        "Concat": 32,
        "Slice": 32,
        "Add": 16 + 7,  # residuals, hard sigmoid's x + 3
        "Mul": 7,
        "Clip": 7,
        "GlobalAveragePool": 7 + 1,
    }
    assert "BatchNormalization" not in ops and ops[-2:] == ["Flatten", "Gemm"]
    depthwise = [n for n in model.graph.node if n.op_type == "Conv" and _attr(n, "group") > 1]
    assert len(depthwise) == 32 + 4 + 5  # cheap operations, strided conv_dw, shortcut depthwise
    widths = _widths_by_name(model)
    assert widths["/conv_stem/Conv"] == 16 and widths["/conv_head/Conv"] == 1280

    def ghost(block: str, module: int) -> int:  # the primary conv's width: half the ghost module's
        stage = block.split(".")[0]
        return widths[f"/blocks/blocks.{stage}/blocks.{block}/ghost{module}/primary_conv/primary_conv.0/Conv"]

    # huawei-noah's cfgs: exp 72/200/184 → ghost halves 36/100/92; out 24/80 → 12/40
    assert [ghost("2.0", 1), ghost("6.0", 1), ghost("6.1", 1), ghost("2.0", 2), ghost("6.0", 2)] == [
        36, 100, 92, 12, 40,
    ]  # fmt: skip
    assert widths["/blocks/blocks.3/blocks.3.0/se/conv_reduce/Conv"] == 20  # _make_divisible(72 / 4, 4)
    dims = [
        [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in (model.graph.input[0], model.graph.output[0])
    ]
    assert dims == [[1, 3, 64, 64], [1, 1000]]
    logits = _run(model, _inputs(model, 4))
    assert np.isfinite(logits).all() and 0.1 < np.abs(logits).max() < 50
    # the output follows the input (torch's default init gave input-independent logits)
    assert logits.std(axis=0).mean() > 0.1 * logits.std(axis=1).mean()


def test_ghostnet_free_groups_and_exact_padding(ghostnet_64: onnx.ModelProto) -> None:
    """The constant-bound Slice frees the ghost modules; where a ghost Concat meets one conv's whole
    output (the residual stream from the stem and the projection shortcuts, the SE gate) that
    output is cut into the Concat's two halves: every width but the input and the logits is free."""
    from deployopt.coupling import analyze
    from deployopt.surgery import apply_plan

    analysis = analyze(ghostnet_64)
    free = analysis.free_groups()
    assert len(free) == 31
    assert sorted(g.width for g in free if g.width % 8) == [12, 20, 20, 36, 36, 60, 92, 92, 100]
    frozen = {g.id: g.reason for g in analysis.groups if g.frozen}
    logits = "feeds the graph output 'logits'"
    assert frozen == {"input:input": "graph input 'input'", "/classifier/Gemm": logits}
    padded = apply_plan(ghostnet_64, {g.id: (g.width // 32 + 1) * 32 for g in free}, analysis)
    xs = _inputs(ghostnet_64, 2, seed=3)
    ref = _run(ghostnet_64, xs)
    assert np.abs(_run(padded, xs) - ref).max() <= 1e-4 * np.abs(ref).max()


def test_ghostnet_bad_arguments_are_one_line_before_torch_runs(tmp_path) -> None:
    from deployopt.zoo.ghostnet import _make_divisible, export_ghostnet

    with pytest.raises(ValueError, match="need batch >= 1 and size >= 32, got batch 1, size 16"):
        export_ghostnet(tmp_path / "g.onnx", size=16)
    assert not list(tmp_path.iterdir())
    assert [_make_divisible(v, 4) for v in (18, 30, 168, 240, 3)] == [20, 32, 168, 240, 4]
