"""Plain descriptions of conv layers, shared by the coupling analysis, the wave model and the LUT."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class ConvShape:
    """One 2-D convolution: input N×C×H×W, K output channels, R×S kernel.

    Kept independent of ONNX and torch so the wave model, the per-layer staircase cache and the
    coupling analysis can all speak about the same layer.
    """

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int = 3
    s: int = 3
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1

    @property
    def p(self) -> int:
        """Output height."""
        return (self.h + 2 * self.pad[0] - self.dilation[0] * (self.r - 1) - 1) // self.stride[0] + 1

    @property
    def q(self) -> int:
        """Output width."""
        return (self.w + 2 * self.pad[1] - self.dilation[1] * (self.s - 1) - 1) // self.stride[1] + 1

    @property
    def gemm(self) -> tuple[int, int, int]:
        """Implicit-GEMM dims per group: (M = N·P·Q, N = K/groups, K = C/groups·R·S)."""
        return (
            self.n * self.p * self.q,
            self.k // self.groups,
            (self.c // self.groups) * self.r * self.s,
        )

    @property
    def flops(self) -> int:
        """Multiply-adds × 2 over all groups."""
        m, n, k = self.gemm
        return 2 * m * n * k * self.groups

    @property
    def is_depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.c and self.k % self.c == 0

    def with_channels(self, c: int | None = None, k: int | None = None) -> ConvShape:
        """The same layer with other channel counts; a depthwise conv keeps groups == channels."""
        new_c = self.c if c is None else c
        new_k = self.k if k is None else k
        groups = self.groups
        if self.is_depthwise:
            mult = self.k // self.c
            groups = new_c
            new_k = new_c * mult if k is None else new_k
        return replace(self, c=new_c, k=new_k, groups=groups)

    def with_out_channels(self, k: int) -> ConvShape:
        """The same layer with `k` output channels, as a width sweep means it: a depthwise conv stays
        depthwise (its input channels and groups follow, K = multiplier × C), any other conv keeps
        its input channels."""
        if not self.is_depthwise:
            return self.with_channels(k=k)
        mult = self.k // self.c
        if k % mult:
            raise ValueError(f"a depthwise conv with channel multiplier {mult} cannot have {k} outputs")
        return self.with_channels(c=k // mult)

    def signature(self) -> str:
        """A stable key for caches: every field that changes the kernels cuDNN/TensorRT pick."""
        return (
            f"n{self.n}_c{self.c}_h{self.h}_w{self.w}_k{self.k}_r{self.r}x{self.s}"
            f"_st{self.stride[0]}x{self.stride[1]}_p{self.pad[0]}x{self.pad[1]}"
            f"_d{self.dilation[0]}x{self.dilation[1]}_g{self.groups}"
        )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for key in ("stride", "pad", "dilation"):
            d[key] = list(d[key])
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ConvShape:
        d = dict(d)
        for key in ("stride", "pad", "dilation"):
            if key in d:
                d[key] = tuple(d[key])
        return cls(**d)


def conv_shape_from_onnx(x: Sequence[int], weight: Sequence[int], attrs: Mapping[str, Any]) -> ConvShape:
    """The ConvShape of an ONNX Conv: input dims `x` (N, C, H, W), weight dims (K, C/g, R, S) and
    its attributes (`pads`, `auto_pad`, `strides`, `dilations`, `group`), as ONNX defines them.

    ConvShape's pad is symmetric. An asymmetric pad is kept as its total: half of it on each side,
    and an odd one left over becomes one more input row or column, so the output size, the
    implicit GEMM and the work are the conv's own (TF-style SAME at stride 2 on an even input pads
    0 before, 1 after: folded as (0 + 1) // 2 it lost a row, 7×7 became 6×6, gemm_m 49 became 36)."""
    strides = [int(v) for v in attrs.get("strides", [1, 1])]
    dil = [int(v) for v in attrs.get("dilations", [1, 1])]
    r, s = int(weight[2]), int(weight[3])
    auto_pad = attrs.get("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        totals = []
        for size, k, st, d in zip(x[2:], (r, s), strides, dil):
            out = -(-int(size) // st)
            totals.append(max(0, (out - 1) * st + (k - 1) * d + 1 - int(size)))
    elif auto_pad == "VALID":
        totals = [0, 0]
    else:
        pads = [int(v) for v in attrs.get("pads", [0, 0, 0, 0])]
        totals = [pads[0] + pads[2], pads[1] + pads[3]]
    return ConvShape(
        n=int(x[0]), c=int(x[1]), h=int(x[2]) + totals[0] % 2, w=int(x[3]) + totals[1] % 2,
        k=int(weight[0]), r=r, s=s, stride=(strides[0], strides[1]), pad=(totals[0] // 2, totals[1] // 2),
        dilation=(dil[0], dil[1]), groups=int(attrs.get("group", 1)),
    )  # fmt: skip


def conv_model_inputs(shape: ConvShape) -> dict[str, list[int]]:
    """conv_model's one input and its static shape, as a run of it records `input_shapes` (and as
    deployopt.precision's fp16 typing keeps them: fp32 inputs, same names)."""
    return {"x": [shape.n, shape.c, shape.h, shape.w]}


def conv_model(shape: ConvShape, opset: int = 17, seed: int = 0, int8: bool = False) -> onnx.ModelProto:
    """A one-conv ONNX model (random weights, bias) for timing a layer on any backend.

    `int8`: the conv quantized explicitly, as a Q/DQ model's convs are (QuantizeLinear and
    DequantizeLinear on its input, per-tensor; int8 weights with a per-output-channel
    DequantizeLinear): TensorRT builds it with INT8 kernels from its own scales, no calibration.
    The plain conv built with --dtype int8 has no ranges, so TensorRT up to 10.x ran it in fp16 (an
    int8 sweep timed the wrong kernels) and 11.x, which builds INT8 only from Q/DQ nodes, refused it."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((shape.k, shape.c // shape.groups, shape.r, shape.s)).astype(np.float32)
    bias = rng.standard_normal(shape.k).astype(np.float32)
    inits = [numpy_helper.from_array(bias, "b")]
    nodes = []
    (x,), w = conv_model_inputs(shape), "w"  # the input's name
    if int8:  # scales of standard-normal data: about 3 sigma over 127 steps
        x_scale, w_scale = np.float32(3.0 / 127), np.full(shape.k, 3.0 / 127, dtype=np.float32)
        weight_q = np.clip(np.round(weight / w_scale[:, None, None, None]), -127, 127).astype(np.int8)
        inits += [
            numpy_helper.from_array(np.array(x_scale), "x_scale"),
            numpy_helper.from_array(np.array(0, dtype=np.int8), "x_zero"),
            numpy_helper.from_array(weight_q, "w_q"),
            numpy_helper.from_array(w_scale, "w_scale"),
            numpy_helper.from_array(np.zeros(shape.k, dtype=np.int8), "w_zero"),
        ]
        nodes += [
            helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"], name="x_quant"),
            helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"], name="x_dequant"),
            helper.make_node(
                "DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w_dq"], name="w_dequant", axis=0
            ),
        ]
        x, w = "x_dq", "w_dq"
    else:
        inits.append(numpy_helper.from_array(weight, "w"))
    nodes.append(
        helper.make_node(
            "Conv",
            [x, w, "b"],
            ["y"],
            name="conv",
            kernel_shape=[shape.r, shape.s],
            strides=list(shape.stride),
            pads=[shape.pad[0], shape.pad[1], shape.pad[0], shape.pad[1]],
            dilations=list(shape.dilation),
            group=shape.groups,
        )
    )
    graph = helper.make_graph(
        nodes,
        "conv",
        [
            helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)
            for name, dims in conv_model_inputs(shape).items()
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [shape.n, shape.k, shape.p, shape.q])],
        inits,
    )
    opsets = [helper.make_opsetid("", opset)]
    # the oldest IR version the opset allows, not the installed onnx's newest: an onnxruntime older
    # than onnx (Python 3.9's last: onnx 1.19 writes IR 12, onnxruntime 1.19 reads up to IR 10)
    # refused every one-conv model, and a board's older TensorRT parser gets what it knows
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))
