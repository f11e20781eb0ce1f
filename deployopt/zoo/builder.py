"""A tiny ONNX graph builder: Conv/BN/Relu/... nodes with seeded numpy weights.

Why not torch: the zoo must build fast on a CPU-only CI machine, be bit-identical from a seed,
and emit exactly the ops we want to test (real BatchNormalization nodes, Clip, Sum ...) without
an exporter's rewrites in between.

Why a numpy forward pass: random weights alone make deep nets degenerate (residual sums blow up,
every input gets the same argmax). The builder evaluates each op on a seeded probe batch while it
builds, and uses those activations the way training would: BatchNorm running mean/var are the
probe statistics (times a random factor, so BN is not an identity on any data), and the classifier
is standardised on the probe features. Logits then stay O(1) and vary with the input, so top-1
agreement is a meaningful fidelity check. `GraphBuilder.values` doubles as a reference output.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEFAULT_OPSET = 17
PROBE_BATCH = 8


def _np_conv(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, pad: int, groups: int
) -> np.ndarray:
    """Reference Conv (NCHW, symmetric padding) by im2col + matmul per group."""
    n = x.shape[0]
    k_out, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    ho, wo = win.shape[2], win.shape[3]
    kg = k_out // groups
    win = win.reshape(n, groups, cg, ho, wo, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    cols = win.reshape(groups, n * ho * wo, cg * kh * kw)
    wg = w.reshape(groups, kg, cg * kh * kw)
    out = np.matmul(cols, wg.transpose(0, 2, 1))  # groups, n*ho*wo, kg
    out = out.reshape(groups, n, ho, wo, kg).transpose(1, 0, 4, 2, 3).reshape(n, k_out, ho, wo)
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return out.astype(np.float32)


def _np_pool(x: np.ndarray, kernel: int, stride: int, pad: int, mode: str) -> np.ndarray:
    xp = np.pad(
        x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-np.inf if mode == "max" else 0.0
    )
    win = np.lib.stride_tricks.sliding_window_view(xp, (kernel, kernel), axis=(2, 3))[
        :, :, ::stride, ::stride
    ]
    return (win.max(axis=(4, 5)) if mode == "max" else win.mean(axis=(4, 5))).astype(np.float32)


class GraphBuilder:
    """Accumulates nodes and initializers; tracks each tensor's channels, spatial size and probe value.

    Tensors are referred to by name (a str). Every op method returns the name of its output.
    Node names are `<prefix>` so `analyze` tables stay readable; outputs are `<prefix>.out`.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        opset: int = DEFAULT_OPSET,
        batch: int = 1,
        in_channels: int = 3,
        image_size: int | tuple[int, int] = 32,
        input_name: str = "input",
        probe_batch: int = PROBE_BATCH,
    ) -> None:
        if opset < 9:
            raise ValueError(f"opset {opset} is not supported by the zoo (9 or newer)")
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.batch = batch
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.channels: dict[str, int] = {}
        self.hw: dict[str, tuple[int, int]] = {}
        self.values: dict[str, np.ndarray] = {}
        self._names: set[str] = set()
        self._counter = 0
        h, w = (image_size, image_size) if isinstance(image_size, int) else image_size
        self.input_name = input_name
        self.input_shape = [batch, in_channels, h, w]
        self.channels[input_name] = in_channels
        self.hw[input_name] = (h, w)
        # Probe inputs from their own stream, so weights do not depend on the probe size.
        probe_rng = np.random.default_rng([seed, 1])
        self.probe = probe_rng.standard_normal((probe_batch, in_channels, h, w)).astype(np.float32)
        self.values[input_name] = self.probe

    # ---------------------------------------------------------------- plumbing
    def _unique(self, name: str) -> str:
        if name not in self._names:
            self._names.add(name)
            return name
        while True:
            self._counter += 1
            cand = f"{name}_{self._counter}"
            if cand not in self._names:
                self._names.add(cand)
                return cand

    def const(self, name: str, array: np.ndarray) -> str:
        """Add an initializer; returns its (unique) name."""
        name = self._unique(name)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def _node(self, op: str, inputs: Sequence[str], name: str, value: np.ndarray, **attrs: object) -> str:
        name = self._unique(name)
        out = name + ".out"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name, **attrs))
        self.values[out] = value.astype(np.float32)
        self.channels[out] = int(value.shape[1])
        self.hw[out] = (int(value.shape[2]), int(value.shape[3])) if value.ndim == 4 else (1, 1)
        return out

    # ---------------------------------------------------------------- ops
    def conv(
        self,
        x: str,
        out_channels: int,
        kernel: int = 3,
        *,
        stride: int = 1,
        pad: int | None = None,
        groups: int = 1,
        bias: bool = False,
        name: str = "conv",
    ) -> str:
        """Conv with He-initialised weights (std = sqrt(2 / fan_in)), symmetric padding."""
        cin = self.channels[x]
        if cin % groups or out_channels % groups:
            raise ValueError(f"{name}: channels {cin}->{out_channels} not divisible by groups {groups}")
        pad = kernel // 2 if pad is None else pad
        fan_in = (cin // groups) * kernel * kernel
        w = (
            self.rng.standard_normal((out_channels, cin // groups, kernel, kernel)) * np.sqrt(2.0 / fan_in)
        ).astype(np.float32)
        inputs = [x, self.const(f"{name}.weight", w)]
        b = None
        if bias:
            b = (self.rng.standard_normal(out_channels) * 0.1).astype(np.float32)
            inputs.append(self.const(f"{name}.bias", b))
        value = _np_conv(self.values[x], w, b, stride, pad, groups)
        return self._node(
            "Conv",
            inputs,
            name,
            value,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
            dilations=[1, 1],
            group=groups,
        )

    def bn(self, x: str, *, name: str = "bn", gamma_scale: float = 1.0) -> str:
        """BatchNormalization with non-trivial parameters, so a wrong pad/trim changes outputs.

        Running mean/var are the probe batch's statistics (as after training) with the variance
        scaled by a random 0.7–1.4; gamma ~ U(0.5, 1.5)·gamma_scale, beta ~ N(0, 0.2).
        """
        v = self.values[x]
        c = v.shape[1]
        axes = (0, 2, 3) if v.ndim == 4 else (0,)
        gamma = (self.rng.uniform(0.5, 1.5, c) * gamma_scale).astype(np.float32)
        beta = self.rng.normal(0.0, 0.2, c).astype(np.float32)
        mean = v.mean(axis=axes).astype(np.float32)
        var = (np.maximum(v.var(axis=axes), 1e-2) * self.rng.uniform(0.7, 1.4, c)).astype(np.float32)
        inputs = [
            x,
            self.const(f"{name}.weight", gamma),
            self.const(f"{name}.bias", beta),
            self.const(f"{name}.running_mean", mean),
            self.const(f"{name}.running_var", var),
        ]
        shape = (1, c, 1, 1) if v.ndim == 4 else (1, c)
        value = (v - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-5) * gamma.reshape(
            shape
        ) + beta.reshape(shape)
        return self._node("BatchNormalization", inputs, name, value, epsilon=1e-5)

    def relu(self, x: str, *, name: str = "relu") -> str:
        return self._node("Relu", [x], name, np.maximum(self.values[x], 0.0))

    def relu6(self, x: str, *, name: str = "relu6") -> str:
        """Clip(0, 6): attributes before opset 11, inputs from 11 on (as exporters emit it)."""
        value = np.clip(self.values[x], 0.0, 6.0)
        if self.opset < 11:
            return self._node("Clip", [x], name, value, min=0.0, max=6.0)
        lo = self.const(f"{name}.min", np.array(0.0, dtype=np.float32))
        hi = self.const(f"{name}.max", np.array(6.0, dtype=np.float32))
        return self._node("Clip", [x, lo, hi], name, value)

    def sigmoid(self, x: str, *, name: str = "sigmoid") -> str:
        return self._node("Sigmoid", [x], name, 1.0 / (1.0 + np.exp(-self.values[x])))

    def conv_bn(
        self,
        x: str,
        out_channels: int,
        kernel: int = 3,
        *,
        stride: int = 1,
        groups: int = 1,
        act: str | None = "relu",
        name: str = "conv",
        gamma_scale: float = 1.0,
    ) -> str:
        """Conv → BN → activation (relu, relu6 or None), the unit every zoo network is made of."""
        y = self.conv(x, out_channels, kernel, stride=stride, groups=groups, name=f"{name}.conv")
        y = self.bn(y, name=f"{name}.bn", gamma_scale=gamma_scale)
        if act == "relu":
            y = self.relu(y, name=f"{name}.relu")
        elif act == "relu6":
            y = self.relu6(y, name=f"{name}.relu6")
        elif act is not None:
            raise ValueError(f"unknown activation {act!r}")
        return y

    def maxpool(
        self, x: str, kernel: int = 2, *, stride: int | None = None, pad: int = 0, name: str = "pool"
    ) -> str:
        stride = kernel if stride is None else stride
        value = _np_pool(self.values[x], kernel, stride, pad, "max")
        return self._node(
            "MaxPool",
            [x],
            name,
            value,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
        )

    def avgpool(self, x: str, kernel: int = 2, *, name: str = "avgpool") -> str:
        value = _np_pool(self.values[x], kernel, kernel, 0, "avg")
        return self._node(
            "AveragePool", [x], name, value, kernel_shape=[kernel, kernel], strides=[kernel, kernel]
        )

    def gap(self, x: str, *, name: str = "gap") -> str:
        return self._node("GlobalAveragePool", [x], name, self.values[x].mean(axis=(2, 3), keepdims=True))

    def add(self, a: str, b: str, *, name: str = "add") -> str:
        if self.channels.get(a) != self.channels.get(b):
            raise ValueError(f"{name}: adding {self.channels.get(a)} and {self.channels.get(b)} channels")
        return self._node("Add", [a, b], name, self.values[a] + self.values[b])

    def mul(self, a: str, b: str, *, name: str = "mul") -> str:
        """Elementwise Mul with broadcasting (an N×C×1×1 gate on N×C×H×W)."""
        return self._node("Mul", [a, b], name, self.values[a] * self.values[b])

    def concat(self, xs: Sequence[str], *, name: str = "concat") -> str:
        hws = {self.hw[x] for x in xs}
        if len(hws) != 1:
            raise ValueError(f"{name}: concatenating different spatial sizes {hws}")
        return self._node(
            "Concat", list(xs), name, np.concatenate([self.values[x] for x in xs], axis=1), axis=1
        )

    def flatten(self, x: str, *, name: str = "flatten") -> str:
        v = self.values[x]
        return self._node("Flatten", [x], name, v.reshape(v.shape[0], -1), axis=1)

    def gemm(self, x: str, out_features: int, *, name: str = "fc", standardize: bool = True) -> str:
        """Gemm with transB=1 (torch's Linear layout [out, in]) and a bias.

        With `standardize`, weights are divided by the probe features' std and the bias absorbs
        their mean, so logits are O(1) and differ between inputs (a random net's pooled features
        are nearly constant otherwise, and every input would get the same class).
        """
        f = self.values[x]
        fin = f.shape[1]
        w = self.rng.standard_normal((out_features, fin)) * np.sqrt(1.0 / fin)
        b = self.rng.standard_normal(out_features) * 0.1
        if standardize:
            mu, sd = f.mean(axis=0), np.maximum(f.std(axis=0), 1e-3)
            w = w / sd
            b = b - w @ mu
        w, b = w.astype(np.float32), b.astype(np.float32)
        inputs = [x, self.const(f"{name}.weight", w), self.const(f"{name}.bias", b)]
        return self._node("Gemm", inputs, name, f @ w.T + b, transB=1)

    def classifier(self, x: str, num_classes: int, *, pool: bool = True, name: str = "classifier") -> str:
        """[GlobalAveragePool →] Flatten → Gemm, the usual CNN head."""
        if pool:
            x = self.gap(x, name=f"{name}.gap")
        x = self.flatten(x, name=f"{name}.flatten")
        return self.gemm(x, num_classes, name=f"{name}.fc")

    # ---------------------------------------------------------------- finish
    def build(self, output: str, *, graph_name: str, output_name: str = "logits") -> onnx.ModelProto:
        """Rename `output` to `output_name`, wrap into a checked ModelProto."""
        for node in self.nodes:
            node.input[:] = [output_name if i == output else i for i in node.input]
            node.output[:] = [output_name if o == output else o for o in node.output]
        self.values[output_name] = self.values[output]
        out_dims = [self.batch, self.channels[output]]
        graph = helper.make_graph(
            self.nodes,
            graph_name,
            [helper.make_tensor_value_info(self.input_name, TensorProto.FLOAT, self.input_shape)],
            [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, out_dims)],
            initializer=self.initializers,
        )
        opsets = [helper.make_opsetid("", self.opset)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="deployopt.zoo")
        model.ir_version = max(helper.find_min_ir_version_for(opsets), 8)
        onnx.checker.check_model(model)
        return model


def conv_widths(model: onnx.ModelProto) -> list[int]:
    """Output channels of every Conv, in node order, read from the weight shapes.

    Handles weights stored as initializers or as Constant nodes (the `weights_as_constants`
    variant), which is how tests check that a builder honoured the widths it was asked for.
    """
    shapes: dict[str, tuple[int, ...]] = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    shapes[node.output[0]] = tuple(attr.t.dims)
    return [int(shapes[n.input[1]][0]) for n in model.graph.node if n.op_type == "Conv"]
