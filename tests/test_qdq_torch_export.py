"""QDQ models as a PyTorch QAT / fake-quant export writes them (pytorch-quantization's export path).

NVIDIA's pytorch-quantization exports a quantized layer through torch's own fake-quant ops: the
weight per output channel, `fake_quantize_per_channel_affine(w, amax / 127, zeros(int32), axis=0,
-128, 127)`, the input per tensor, `fake_quantize_per_tensor_affine(x, amax / 127, 0, -128, 127)`.
torch.onnx.export writes each as a QuantizeLinear → DequantizeLinear pair: a float weight
initializer → Q → DQ → Conv with its per-channel scale and int8 zero point as Constant nodes, one
scalar pair per activation (Model Optimizer's torch path writes the same pairs from its own
symbolic, its zero points a Constant cast to int8). The modules below mimic the toolkit's
`TensorQuantizer._fb_fake_quant` without it, in a small ResNet (identity and stride-2 projection
Adds) with a Concat block holding a depthwise conv. Each net is also exported with its quantizers
off: its float twin, whose channel groups the QDQ model must match (there torch folds the
BatchNorms into the convs; it cannot fold them into a conv whose weight is a DequantizeLinear).
Export variants: see `EXPORTS`."""

from __future__ import annotations

import io
import warnings
from collections import Counter
from typing import NamedTuple

import numpy as np
import onnx
import onnxruntime as ort
import ort_session
import pytest
from onnx import numpy_helper

from deployopt.coupling import Analysis, analyze
from deployopt.importance import dead_channels_many
from deployopt.model import load_model
from deployopt.surgery import apply_plan, apply_plan_report

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

LEVELS = (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
INPUT = (1, 3, 16, 16)


class TensorQuantizer(nn.Module):
    """pytorch-quantization's TensorQuantizer on its export path (`_fb_fake_quant`): a calibrated
    amax buffer, full int8 range (torch's exporter refuses -127..127), zero points 0. With `dynamic`,
    a hand-written fake-quant instead: a weight's scale computed from it in `forward`, which the
    export keeps as nodes (the toolkit's `.data` makes even a computed amax a Constant)."""

    def __init__(self, amax: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("_amax", amax)
        self.enabled = True
        self.dynamic = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        amax, bound = self._amax, 127
        if amax.numel() == 1:
            return torch.fake_quantize_per_tensor_affine(x, amax.item() / bound, 0, -bound - 1, bound)
        if self.dynamic:
            scale = _weight_amax(x).flatten() / bound
            zero_point = torch.zeros(scale.shape, dtype=torch.int32)
            return torch.fake_quantize_per_channel_affine(x, scale, zero_point, 0, -bound - 1, bound)
        squeezed = amax.squeeze().detach()
        axis = list(amax.shape).index(squeezed.shape[0])
        scale = squeezed / bound
        zero_point = torch.zeros_like(scale, dtype=torch.int32)
        return torch.fake_quantize_per_channel_affine(x, scale.data, zero_point.data, axis, -bound - 1, bound)


def _weight_amax(w: torch.Tensor) -> torch.Tensor:
    """Max calibration of a weight per output channel, kept in the weight's rank ([K, 1, 1, 1])."""
    return w.detach().abs().amax(dim=tuple(range(1, w.dim())), keepdim=True)


class QuantConv2d(nn.Conv2d):
    """quant_nn.QuantConv2d: the input per tensor, the weight per output channel, then F.conv2d."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.input_quantizer = TensorQuantizer(torch.tensor(4.0))
        self.weight_quantizer = TensorQuantizer(_weight_amax(self.weight))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight_quantizer(self.weight)
        return F.conv2d(self.input_quantizer(x), w, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)  # fmt: skip


class QuantLinear(nn.Linear):
    """quant_nn.QuantLinear: the input per tensor, the weight per output row."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.input_quantizer = TensorQuantizer(torch.tensor(2.0))
        self.weight_quantizer = TensorQuantizer(_weight_amax(self.weight))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.input_quantizer(x), self.weight_quantizer(self.weight), self.bias)


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        QuantConv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)
    )


class BasicBlock(nn.Module):
    """torchvision's BasicBlock as pytorch-quantization's ResNet example quantizes it: the shortcut
    (identity or a stride-2 1×1 projection) goes through its own quantizer before the Add."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = _conv_bn(cin, cout, 3, stride), _conv_bn(cout, cout, 3)
        self.downsample = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None
        self.residual_quantizer = TensorQuantizer(torch.tensor(3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv2(F.relu(self.conv1(x)))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(y + self.residual_quantizer(shortcut))


class ConcatBlock(nn.Module):
    """Two branches concatenated: a 1×1 conv, and a 1×1 conv then a depthwise 3×3; a quantized
    Concat (one shared scale, as TensorRT wants for a Concat's inputs) then a 1×1 fuse conv."""

    def __init__(self, cin: int, a: int, b: int, cout: int) -> None:
        super().__init__()
        self.branch_a = _conv_bn(cin, a, 1)
        self.branch_b = nn.Sequential(_conv_bn(cin, b, 1), nn.ReLU(), _conv_bn(b, b, 3, groups=b))
        self.concat_quantizer = TensorQuantizer(torch.tensor(3.0))
        self.fuse = QuantConv2d(a + b, cout, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([F.relu(self.branch_a(x)), F.relu(self.branch_b(x))], dim=1)
        return self.fuse(self.concat_quantizer(y))


class QuantNet(nn.Module):
    """stem → BasicBlock(8→8) → BasicBlock(8→16, stride 2, projection) → ConcatBlock → pool → fc."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = _conv_bn(3, 8, 3)
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2)
        self.mix = ConcatBlock(16, 6, 10, 12)
        self.pool_quantizer = TensorQuantizer(torch.tensor(3.0))  # QuantAdaptiveAvgPool2d's input
        self.fc = QuantLinear(12, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mix(self.layer2(self.layer1(F.relu(self.stem(x)))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.pool_quantizer(x), 1), 1))


def _net() -> QuantNet:
    torch.manual_seed(0)
    net = QuantNet()
    for m in net.modules():  # BatchNorm statistics and affine parameters that are not 0 and 1
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
        if isinstance(m, (QuantConv2d, QuantLinear)):  # calibrate the weights' amax after the init
            m.weight_quantizer._amax.copy_(_weight_amax(m.weight))
    return net.eval()


def _export(net: nn.Module, quantize: bool, opset: int, fold: bool, dynamic: bool = False) -> onnx.ModelProto:
    """torch.onnx.export (TorchScript exporter: the dynamo one needs onnxscript) with every quantizer
    on or off."""
    for m in net.modules():
        if isinstance(m, TensorQuantizer):
            m.enabled, m.dynamic = quantize, dynamic
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation, amax.item()'s trace warning
        torch.onnx.export(net, torch.randn(*INPUT), buf, opset_version=opset, dynamo=False,
                          do_constant_folding=fold, input_names=["x"], output_names=["y"])  # fmt: skip
    return onnx.load_from_string(buf.getvalue())


def _weights_to_int8(model: onnx.ModelProto) -> onnx.ModelProto:
    """Model Optimizer's `qdq_to_dq`: each weight's float initializer → QuantizeLinear becomes the
    int8 initializer it computes (round half to even, saturated), read by the DequantizeLinear."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {t.name: t for t in out.graph.initializer}
    keep = []
    for node in out.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] in inits:
            w, s, zp = (numpy_helper.to_array(inits[n]) for n in node.input[:3])
            shape = [-1] + [1] * (w.ndim - 1)  # per output channel: axis 0
            q = np.clip(np.rint(w / s.reshape(shape)) + zp.reshape(shape).astype(np.int32), -128, 127)
            out.graph.initializer.append(numpy_helper.from_array(q.astype(np.int8), node.output[0]))
        else:
            keep.append(node)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    return out


class Variant(NamedTuple):
    opset: int
    fold: bool  # torch.onnx.export's do_constant_folding
    int8: bool  # weights folded into int8 initializers afterwards (`_weights_to_int8`)
    dynamic: bool  # weights' scales computed in the graph (Abs → ReduceMax → Div of the weight)

    @property
    def id(self) -> str:
        extra = ("-int8" if self.int8 else "") + ("-dynamic" if self.dynamic else "")
        return f"opset{self.opset}-{'fold' if self.fold else 'nofold'}{extra}"


#: the default export (scales and zero points are Constant nodes); one whose zero points come through
#: Cast nodes (as Model Optimizer writes them: a Constant cast to int8); the first with its weights
#: folded into int8 initializers; and one whose weight scales the graph computes
EXPORTS = [
    Variant(13, True, False, False),
    Variant(17, False, False, False),
    Variant(13, True, True, False),
    Variant(13, True, False, True),
]


class Export(NamedTuple):
    raw: onnx.ModelProto  # the QDQ model as torch.onnx.export wrote it
    qdq: onnx.ModelProto  # the same, loaded (constants folded into initializers)
    float_model: onnx.ModelProto  # its float twin (quantizers off), loaded
    variant: Variant


@pytest.fixture(
    scope="module",
    params=EXPORTS,
    ids=[v.id for v in EXPORTS],
)
def exported(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Export:
    """One export variant: the QDQ model as written and loaded, and its float twin."""
    v: Variant = request.param
    folder = tmp_path_factory.mktemp("torch_qdq")
    net = _net()
    raw = _export(net, True, v.opset, v.fold, v.dynamic)
    onnx.save(raw, folder / "qdq.onnx")
    onnx.save(_export(net, False, v.opset, v.fold), folder / "float.onnx")
    qdq = load_model(folder / "qdq.onnx").model
    if v.int8:
        onnx.save(_weights_to_int8(qdq), folder / "qdq_int8.onnx")
        qdq = load_model(folder / "qdq_int8.onnx").model
    return Export(raw, qdq, load_model(folder / "float.onnx").model, v)


def _run(model: onnx.ModelProto, level: ort.GraphOptimizationLevel = LEVELS[1]) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    sess = ort_session.session(model, opts)
    x = np.random.default_rng(1).standard_normal(INPUT).astype(np.float32)
    return sess.run(None, {"x": x})[0]


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _producer_sets(analysis: Analysis) -> set[frozenset[str]]:
    return {frozenset(g.producers) for g in analysis.free_groups()}


def _quantized_weights(model: onnx.ModelProto) -> dict[str, tuple[str, str, str]]:
    """Per Conv/Gemm: (weight initializer, scale, zero point) its weight DequantizeLinear reads,
    through the QuantizeLinear of a float weight where there is one."""
    producer = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            dq = producer[node.input[1]]
            assert dq.op_type == "DequantizeLinear", node.name
            source = producer.get(dq.input[0])
            names = source.input if source is not None else dq.input
            assert source is None or source.op_type == "QuantizeLinear"
            out[node.name] = (names[0], names[1], names[2])
    return out


def test_torch_export_writes_per_channel_weights_and_per_tensor_activations(exported: Export) -> None:
    raw, qdq = exported.raw, exported.qdq
    kinds = Counter(n.op_type for n in raw.graph.node)
    assert kinds["QuantizeLinear"] == kinds["DequantizeLinear"] > 11 and "Constant" in kinds
    raw_inits = _inits(raw)
    # in the export every weight is a float initializer → QuantizeLinear(axis 0) → DequantizeLinear
    weight_qs = [n for n in raw.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in raw_inits]
    assert len(weight_qs) == 11  # 10 convs (one depthwise) and the Linear
    assert all(raw_inits[n.input[0]].dtype == np.float32 for n in weight_qs)
    assert all(onnx.helper.get_node_attr_value(n, "axis") == 0 for n in weight_qs)
    # ... and its scale and zero point are computed by nodes (Constant, Constant → Cast, or the
    # weight's Abs → ReduceMax → Div); loading folds them into initializers
    assert not any(n.input[1] in raw_inits or n.input[2] in raw_inits for n in weight_qs)
    assert ("ReduceMax" in kinds) == exported.variant.dynamic and ("Cast" in kinds) != exported.variant.fold
    inits = _inits(qdq)
    weights = _quantized_weights(qdq)
    assert len(weights) == 11
    for name, (w, scale, zp) in weights.items():
        k = inits[w].shape[0]
        assert inits[scale].shape == (k,) and inits[scale].dtype == np.float32, name
        assert inits[zp].dtype == np.int8 and not inits[zp].any(), name
        assert inits[w].dtype == (np.int8 if exported.variant.int8 else np.float32), name
    # every activation Q/DQ has one scale and a zero point of 0
    producer = {o: n for n in qdq.graph.node for o in n.output}
    for node in qdq.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            dq = producer[node.input[0]]
            assert dq.op_type == "DequantizeLinear" and producer[dq.input[0]].op_type == "QuantizeLinear"
            assert inits[dq.input[1]].shape == () and inits[dq.input[2]].item() == 0


def test_torch_qdq_export_is_as_free_as_its_float_twin(exported: Export) -> None:
    analysis, float_analysis = analyze(exported.qdq), analyze(exported.float_model)
    # stem + layer1 (the identity Add), layer1.conv1, layer2.conv1, layer2 (the Add of conv2 and the
    # stride-2 projection), the Concat's two pieces (the 1×1 conv; the 1×1 conv the depthwise conv
    # follows) and the fuse conv
    assert len(analysis.free_groups()) == len(float_analysis.free_groups()) == 7
    assert _producer_sets(analysis) == _producer_sets(float_analysis)
    widths = {frozenset(g.producers): g.width for g in analysis.free_groups()}
    assert widths == {frozenset(g.producers): g.width for g in float_analysis.free_groups()}
    frozen = sorted(g.reason for g in analysis.groups if g.frozen)
    assert frozen == ["feeds the graph output 'y'", "graph input 'x'"]
    assert len(analysis.convs) == len(float_analysis.convs) == 10


@pytest.mark.parametrize("level", LEVELS, ids=["no-ort-optimizations", "ort-optimizations"])
def test_torch_qdq_pad_is_exact_and_trims_back(exported: Export, level: ort.GraphOptimizationLevel) -> None:
    qdq = exported.qdq
    analysis = analyze(qdq)
    free = analysis.free_groups()
    assert len(free) == 7
    plan = {g.id: g.width + 1 + i % 4 for i, g in enumerate(free)}
    padded = apply_plan(qdq, plan, analysis)
    # bit-identical: a padded weight is 0 (float 0 → Q → 0, or int8 0) × scale 1.0, a padded
    # activation is 0 through every per-tensor pair (zero point 0)
    np.testing.assert_array_equal(_run(padded, level), _run(qdq, level))
    assert [n.op_type for n in padded.graph.node] == [n.op_type for n in qdq.graph.node]
    new, old = _inits(padded), _inits(qdq)
    for conv, (w, scale, zp) in _quantized_weights(qdq).items():
        k = old[w].shape[0]
        assert new[w].dtype == old[w].dtype and new[scale].shape == new[zp].shape == new[w].shape[:1], conv
        assert not new[w][k:].any() and np.all(new[scale][k:] == 1.0) and not new[zp][k:].any(), conv
        # only zeros were added (rows of new filters, columns of new input channels, wherever the
        # Concat puts them): the same nonzero values
        assert np.array_equal(np.sort(new[w][new[w] != 0]), np.sort(old[w][old[w] != 0])), conv
        assert np.array_equal(new[scale][:k], old[scale]), conv
    again = analyze(padded)
    assert dead_channels_many(padded, again, list(plan)) == {
        g.id: list(range(g.width, plan[g.id])) for g in free
    }
    back, report = apply_plan_report(padded, {g.id: g.width for g in free}, again)
    assert len(report) == len(free)
    assert all(c.trimmed == c.dead_trimmed == plan[c.id] - c.new for c in report)
    restored = _inits(back)
    assert restored.keys() == old.keys()
    for name, value in old.items():
        assert restored[name].dtype == value.dtype and np.array_equal(restored[name], value), name


def test_torch_qdq_trim_validates_and_runs(exported: Export) -> None:
    qdq = exported.qdq
    analysis = analyze(qdq)
    plan = {g.id: max(1, g.width // 2) for g in analysis.free_groups()}
    assert len(plan) == 7
    trimmed = apply_plan(qdq, plan, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    onnx.shape_inference.infer_shapes(trimmed, strict_mode=True)
    for level in LEVELS:
        assert _run(trimmed, level).shape == (1, 5)
    assert Counter(n.op_type for n in trimmed.graph.node) == Counter(n.op_type for n in qdq.graph.node)
    assert {g.id: g.width for g in analyze(trimmed).free_groups()} == plan
