"""CastLike, as torch's dynamo exporter writes it without its optimizer
(`torch.onnx.export(..., dynamo=True, optimize=False)`): `Expand(CastLike(0.0, x), Shape(W)[0:1])`
as the zero bias of every `bias=False` conv, `CastLike(6.0, x)` as ReLU6's bounds, `CastLike(0.0,
cat)` before a conv that reads a Concat. CastLike reads its second input for its type only, so
these are constants: load_model folds them (the conv's bias froze its channels as "reads 'val_5'
per channel, and it is not a constant"), and the CastLike rule passes channels like Cast (the
others froze as "unknown op CastLike"): a bug bash's finding 01."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_coupling_reshape_nc import G, groups, pad_and_trim

from deployopt.coupling import analyze
from deployopt.model import load_model


def unoptimized_dynamo(opset: int = 20, saturate: bool = False) -> onnx.ModelProto:
    """The finding's network as the dynamo exporter writes it unoptimized: a bias-free stem conv
    (13) with a CastLike zero bias, BatchNorm, ReLU6 with CastLike bounds; two branch convs (11, 6)
    concatenated; a bias-free projection (13) with a CastLike zero bias read off the Concat, added
    to the stem; a mean over H, W and a Linear."""
    g = G()
    kw: dict[str, Any] = {"saturate": 1} if saturate else {}
    zero = g.node("Constant", [], value=helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]))

    def bias_free_conv(x: str, ci: int, co: int, k: int) -> str:
        w = g.c(g.rng.standard_normal((co, ci, k, k)) * 0.3)
        k_out = g.node("Shape", [w], start=0, end=1)
        size = g.node("Expand", [k_out, g.node("Constant", [], value_ints=[1])])
        bias = g.node("Expand", [g.node("CastLike", [zero, x], **kw), size])
        return g.node("Conv", [x, w, bias], kernel_shape=[k, k], pads=[k // 2] * 4)

    bn = [g.c(v) for v in (g.rng.uniform(0.5, 1.5, 13), g.rng.standard_normal(13) * 0.1,
                           g.rng.standard_normal(13) * 0.1, g.rng.uniform(0.5, 1.5, 13))]  # fmt: skip
    s = g.node("BatchNormalization", [bias_free_conv("x", 3, 13, 3), *bn])
    lo = g.node("CastLike", [g.node("Constant", [], value_float=0.0), s], **kw)
    hi = g.node("CastLike", [g.node("Constant", [], value_float=6.0), s], **kw)
    s = g.node("Clip", [s, lo, hi])
    cat = g.node("Concat", [g.conv(s, 13, 11), g.conv(s, 13, 6, 3)], axis=1)
    y = g.node("Add", [s, bias_free_conv(cat, 17, 13, 1)])
    if opset >= 18:
        y = g.node("ReduceMean", [y, g.ints([2, 3])], keepdims=0)
    else:
        y = g.node("ReduceMean", [y], axes=[2, 3], keepdims=0)
    out = g.node("Gemm", [y, g.c(g.rng.standard_normal((10, 13)) * 0.3), g.c(np.zeros(10))], transB=1)
    return g.build(out, [1, 3, 8, 8], opset)


@pytest.mark.parametrize(("opset", "saturate"), [(15, False), (19, True), (20, False)])
def test_load_folds_castlike_of_constants_and_every_group_is_free(
    tmp_path: Path, opset: int, saturate: bool
) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(unoptimized_dynamo(opset, saturate), path)
    model = load_model(path).model
    assert not [n.name for n in model.graph.node if n.op_type in ("CastLike", "Cast", "Expand", "Shape")]
    biases = [n.input[2] for n in model.graph.node if n.op_type == "Conv" and len(n.input) > 2]
    assert all(t in {i.name for i in model.graph.initializer} for t in biases)  # zero biases, as constants
    assert groups(model) == {
        # was frozen: "Conv Conv_6 reads 'Expand_5' per channel, and it is not a constant"
        "Conv_6": (13, ""),
        "Conv_13": (11, ""),  # were frozen: "unknown op CastLike"
        "Conv_14": (6, ""),
        "Gemm_24": (10, "feeds the graph output 'Gemm_24'"),
    }
    pad_and_trim(model, ["Conv_6", "Conv_13", "Conv_14"])


def castlike_chain() -> onnx.ModelProto:
    """conv(3→9) → Relu → CastLike(·, a float constant) → Clip(·, CastLike(0, ·), CastLike(6, ·))
    → conv(9→4): analysed as it is, not loaded (nothing folded)."""
    g = G(1)
    a = g.node("CastLike", [g.node("Relu", [g.conv("x", 3, 9, 3)]), g.c(np.zeros(1))])
    lo = g.node("CastLike", [g.node("Constant", [], value_float=0.0), a])
    hi = g.node("CastLike", [g.node("Constant", [], value_float=6.0), a])
    return g.build(g.conv(g.node("Clip", [a, lo, hi]), 9, 4), [1, 3, 8, 8], 15)


def test_castlike_passes_its_first_input_s_channels_and_only_reads_the_second_s_type() -> None:
    model = castlike_chain()
    assert groups(model) == {"Conv_0": (9, ""), "Conv_8": (4, "feeds the graph output 'Conv_8'")}
    pad_and_trim(model, ["Conv_0"])


@pytest.mark.slow
def test_dynamo_export_without_its_optimizer_frees_what_the_optimized_one_does(tmp_path: Path) -> None:
    """The finding's module, exported with `optimize=False` and with the default: the same widths
    are free (0 of 3 were, unoptimized)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 13, 3, 2, 1, bias=False), nn.BatchNorm2d(13), nn.ReLU6())
            self.b1 = nn.Sequential(nn.Conv2d(13, 13, 3, 1, 1, bias=False), nn.BatchNorm2d(13), nn.ReLU())
            self.a, self.b = nn.Conv2d(13, 11, 1), nn.Conv2d(13, 6, 3, padding=1)
            self.proj = nn.Conv2d(17, 13, 1, bias=False)
            self.fc = nn.Linear(13, 10)

        def forward(self, x: Any) -> Any:
            x = self.stem(x)
            x = x + self.b1(x)
            x = x + self.proj(torch.cat([self.a(x), self.b(x)], 1))
            return self.fc(x.mean((2, 3)))

    torch.manual_seed(0)
    net, x = Net().eval(), torch.randn(1, 3, 16, 16)
    free = {}
    for optimize in (True, False):
        path = tmp_path / f"opt_{optimize}.onnx"
        torch.onnx.export(net, (x,), str(path), dynamo=True, optimize=optimize, input_names=["x"],
                          output_names=["y"])  # fmt: skip
        model = load_model(path).model
        free[optimize] = sorted(g.width for g in analyze(model).free_groups())
        if not optimize:
            assert not [n for n in model.graph.node if n.op_type == "CastLike"]
            pad_and_trim(model, [g.id for g in analyze(model).free_groups()])
    assert free[False] == free[True] == [6, 11, 13]
