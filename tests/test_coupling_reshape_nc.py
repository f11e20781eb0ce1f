"""A Reshape that keeps the batch and the channel axis and merges or splits only the axes after it
(`x.view(n, c, -1)`, `x.flatten(2)`: [N, C, H, W] → [N, C, H·W]) keeps every channel's values
together on axis 1: the conv feeding it stays free (it froze as "Reshape … mixes channels with
other axes", a bug bash's finding 02), and the ops reading the reshaped tensor see the channels
on the right axis (a per-channel constant, a Conv1d, a Transpose to tokens and a MatMul)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ort_session import LEVELS, cpu_session

from deployopt.coupling import analyze
from deployopt.model import load_model
from deployopt.surgery import apply_plan


class G:
    """A hand-built graph: nodes named `Op_i` after their index, random constants, shapes inferred."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def c(self, arr: Any, dtype: Any = np.float32) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype), name))
        return name

    def ints(self, values: list[int]) -> str:
        return self.c(values, np.int64)

    def node(self, op: str, ins: list[str], **kw: Any) -> str:
        out = f"{op}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    def conv(self, x: str, ci: int, co: int, k: int = 1, pad: bool = True, rank: int = 2) -> str:
        w = self.c(self.rng.standard_normal((co, ci, *[k] * rank)) * 0.3)
        b = self.c(self.rng.standard_normal(co) * 0.1)
        return self.node("Conv", [x, w, b], kernel_shape=[k] * rank, pads=[k // 2 if pad else 0] * 2 * rank)

    def build(self, out: str, in_shape: list[int], opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
            self.inits,
        )
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        onnx.checker.check_model(m, full_check=True)
        return m


def groups(model: onnx.ModelProto) -> dict[str, tuple[int, str]]:
    """Every group but the graph input's: id → (width, "" if free else the reason)."""
    return {g.id: (g.width, g.reason) for g in analyze(model).groups if not g.id.startswith("input:")}


def run(model: onnx.ModelProto, optimized: bool = True) -> np.ndarray:
    """The model's output on a fixed random input (onnxruntime CPU; without its graph optimizations
    where `optimized` is False)."""
    level = LEVELS[1] if optimized else LEVELS[0]
    sess = cpu_session(model, level)
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(1).standard_normal(inp.shape).astype(np.float32)
    return sess.run(None, {inp.name: x})[0]


def pad_and_trim(model: onnx.ModelProto, gids: list[str], optimized: bool = True) -> None:
    """Padding the groups to the next multiple of 32 computes exactly what the model does (the
    padded channels add exact zeros); trimming them by 3 (to 1 at least) gives a valid model that
    runs; both give the groups the widths asked for."""
    analysis = analyze(model)
    ref = run(model, optimized)
    plan = {g: (analysis.group(g).width // 32 + 1) * 32 for g in gids}
    padded = apply_plan(model, plan, analysis)
    onnx.checker.check_model(padded, full_check=True)
    onnx.shape_inference.infer_shapes(padded, strict_mode=True)
    assert {g.id: g.width for g in analyze(padded).groups if g.id in plan} == plan
    np.testing.assert_array_equal(run(padded, optimized), ref)
    cut = {g: max(1, analysis.group(g).width - 3) for g in gids}
    trimmed = apply_plan(model, cut, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    onnx.shape_inference.infer_shapes(trimmed, strict_mode=True)
    assert {g.id: g.width for g in analyze(trimmed).groups if g.id in cut} == cut
    out = run(trimmed, optimized)
    assert out.shape == ref.shape and np.isfinite(out).all()


def se_view(target: list[int]) -> onnx.ModelProto:
    """conv(4→13) → Relu → SE whose squeeze is Reshape(target) → ReduceMean(-1) (`x.view(n, c,
    -1).mean(-1)`), its gate viewed back as [N, 13, 1, 1] → residual conv → a 1×1 head."""
    g = G()
    a = g.node("Relu", [g.conv("x", 4, 13, 3)])
    s = g.node("ReduceMean", [g.node("Reshape", [a, g.ints(target)])], axes=[-1], keepdims=0)
    fc1 = g.node("Gemm", [s, g.c(g.rng.standard_normal((5, 13)) * 0.3), g.c(np.zeros(5))], transB=1)
    fc2 = g.node("Gemm", [g.node("Relu", [fc1]), g.c(g.rng.standard_normal((13, 5)) * 0.3)], transB=1)
    gate = g.node("Reshape", [g.node("Sigmoid", [fc2]), g.ints([1, 13, 1, 1])])
    x = g.node("Mul", [a, gate])
    x = g.node("Add", [x, g.node("Relu", [g.conv(x, 13, 13, 3)])])
    return g.build(g.conv(x, 13, 4), [1, 4, 8, 8])


# torch's `x.view(n, c, -1)` folded ([1, 13, -1]), spelled out, with 0s (copy), and `flatten(2)`
TARGETS = [[1, 13, -1], [1, 13, 64], [0, 0, -1], [1, -1, 64], [-1, 13, 64]]


@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_view_nc_minus_one_keeps_the_producer_free(target: list[int]) -> None:
    model = se_view(target)
    assert groups(model) == {
        # was frozen: "Reshape Reshape_2 mixes channels with other axes"; the SE's expand Gemm
        # and the residual conv join it
        "Conv_0": (13, ""),
        "Gemm_4": (5, ""),
        "Conv_13": (4, "feeds the graph output 'Conv_13'"),
    }
    pad_and_trim(model, ["Conv_0", "Gemm_4"])


def test_the_target_follows_the_channels_where_it_spells_them_out() -> None:
    model = se_view([1, 13, 64])
    padded = apply_plan(model, {"Conv_0": 32}, analyze(model))
    inits = padded.graph.initializer
    targets = [numpy_helper.to_array(t).tolist() for t in inits if t.data_type == TensorProto.INT64]
    assert targets == [[1, 32, 64], [1, 32, 1, 1]]


def tokens() -> onnx.ModelProto:
    """A map read after `view(n, c, -1)` by ops that each need the channel axis: a per-channel
    scale [C, 1], a Conv1d, a Softmax over the positions, and a Transpose to [N, H·W, C] tokens
    times constant [C, D] weights (a non-local / GCNet block's projections)."""
    g = G(1)
    a = g.node("Relu", [g.conv("x", 3, 10, 3)])
    v = g.node("Reshape", [a, g.ints([1, 10, -1])])  # [1, 10, 64]
    v = g.node("Mul", [v, g.c(g.rng.uniform(0.5, 1.5, (10, 1)))])  # per channel on axis 1 of 3
    v = g.node("Softmax", [v], axis=-1)  # over the positions: per channel
    c1 = g.conv(v, 10, 7, 3, rank=1)  # Conv1d: [1, 7, 64]
    t = g.node("Transpose", [c1], perm=[0, 2, 1])  # [1, 64, 7]: tokens
    m = g.node("MatMul", [t, g.c(g.rng.standard_normal((7, 6)) * 0.3)])  # [1, 64, 6]
    back = g.node("Reshape", [g.node("Transpose", [m], perm=[0, 2, 1]), g.ints([1, 6, 8, 8])])
    return g.build(g.conv(back, 6, 2), [1, 3, 8, 8])


def test_ops_reading_the_reshaped_map_see_the_channels_on_axis_1() -> None:
    model = tokens()
    assert groups(model) == {
        "Conv_0": (10, ""),
        "Conv_5": (7, ""),
        "MatMul_7": (6, ""),
        "Conv_10": (2, "feeds the graph output 'Conv_10'"),
    }
    pad_and_trim(model, ["Conv_0", "Conv_5", "MatMul_7"])


def nhwc_tokens() -> onnx.ModelProto:
    """A channels-last map merged into tokens: NCHW → Transpose → [N, H, W, C] → Reshape
    [N, H·W, C] → MatMul [C, D]: the channels stay on the last axis."""
    g = G(2)
    a = g.node("Relu", [g.conv("x", 3, 9, 3)])
    t = g.node("Reshape", [g.node("Transpose", [a], perm=[0, 2, 3, 1]), g.ints([1, -1, 9])])
    m = g.node("MatMul", [t, g.c(g.rng.standard_normal((9, 5)) * 0.3)])
    return g.build(g.node("ReduceMean", [m], axes=[1], keepdims=0), [1, 3, 6, 6])


def test_channels_last_tokens_keep_their_channels_on_the_last_axis() -> None:
    model = nhwc_tokens()
    assert groups(model) == {"Conv_0": (9, ""), "MatMul_4": (5, "feeds the graph output 'ReduceMean_5'")}
    pad_and_trim(model, ["Conv_0"])


@pytest.mark.parametrize(
    ("target", "in_shape", "why"),
    [
        ([1, 2, 2, -1], [1, 4, 8, 8], "splits C (a channel shuffle's [N, g, C/g, …])"),
        ([1, 16, 16], [1, 4, 8, 8], "merges C with H"),
        ([0, 1, 0, -1], [1, 4, 4, 1], "a 0 copies H where the channels land"),
    ],
    ids=["split", "merge", "zero-copies-H"],
)
def test_reshapes_that_move_the_channels_otherwise_still_freeze(
    target: list[int], in_shape: list[int], why: str
) -> None:
    g = G(3)
    a = g.node("Relu", [g.conv("x", in_shape[1], 4, 1)])
    r = g.node("Reshape", [a, g.ints(target)])
    model = g.build(g.node("Relu", [r]), in_shape)
    conv = analyze(model).group("Conv_0")
    assert conv.frozen and conv.reason == "Reshape Reshape_2 mixes channels with other axes", why


def test_torch_view_and_flatten_exports_keep_the_se_producer_free(tmp_path: Path) -> None:
    """The finding's own modules: torch exports `view(n, c, -1)` and `flatten(2)` (TorchScript
    exporter: the target is computed at run time from Shape, and folded at load)."""
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class SE(nn.Module):
        def __init__(self, flat: bool) -> None:
            super().__init__()
            self.fc1, self.fc2, self.flat = nn.Linear(13, 5), nn.Linear(5, 13), flat

        def forward(self, x: Any) -> Any:
            n, c = x.shape[:2]
            y = (x.flatten(2) if self.flat else x.view(n, c, -1)).mean(-1)
            return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(y)))).view(n, c, 1, 1)

    for flat in (False, True):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Conv2d(3, 13, 3, padding=1), nn.ReLU(), SE(flat), nn.Conv2d(13, 4, 1)).eval()
        path = tmp_path / f"se_{flat}.onnx"
        torch.onnx.export(net, (torch.randn(1, 3, 8, 8),), str(path), opset_version=17, dynamo=False,
                          input_names=["x"], output_names=["y"])  # fmt: skip
        model = load_model(path).model
        assert any(n.op_type == "ReduceMean" for n in model.graph.node)  # not a GlobalAveragePool
        conv = next(g for g in analyze(model).groups if g.width == 13)
        assert conv.producers[0] == "/0/Conv" and not conv.frozen, conv.reason
        pad_and_trim(model, [conv.id])
