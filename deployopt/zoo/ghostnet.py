"""GhostNet 1.0 (Han et al., CVPR 2020) in plain torch, exported to ONNX: ghost modules as a free
channel group test and latency benchmark.

The definition follows huawei-noah/ghostnet's pytorch `ghostnet.py` (module names too): a ghost
module computes half its outputs with a 1×1 conv and the other half with a cheap depthwise 3×3 on
them, `cat([x1, x2], 1)[:, :oup]`. Its published widths are multiples of 4, not 8: the ghost halves
of the expansions (36, 60, 92, 100) and the narrow SE reductions (20) are the irregular widths a
GPU pads or rounds. Random weights (seeded) with randomised BatchNorm statistics: for surgery tests
and latency benchmarks, not accuracy. torch only, no torchvision (the GPU machines have none);
torch is imported only inside these functions.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployopt.zoo.torch_export import export_classifier, require_torch

if TYPE_CHECKING:
    import torch

# One list per stage of (dw kernel k, expansion width exp, output width c, SE ratio se, stride s).
CFGS: tuple[tuple[tuple[int, int, int, float, int], ...], ...] = (
    ((3, 16, 16, 0, 1),),
    ((3, 48, 24, 0, 2),),
    ((3, 72, 24, 0, 1),),
    ((5, 72, 40, 0.25, 2),),
    ((5, 120, 40, 0.25, 1),),
    ((3, 240, 80, 0, 2),),
    (
        (3, 200, 80, 0, 1),
        (3, 184, 80, 0, 1),
        (3, 184, 80, 0, 1),
        (3, 480, 112, 0.25, 1),
        (3, 672, 112, 0.25, 1),
    ),
    ((5, 672, 160, 0.25, 2),),
    ((5, 960, 160, 0, 1), (5, 960, 160, 0.25, 1), (5, 960, 160, 0, 1), (5, 960, 160, 0.25, 1)),
)
STEM_WIDTH = 16
LAST_WIDTH = 960  # ConvBnAct after the stages: the last cfg's expansion width
HEAD_WIDTH = 1280


def _make_divisible(v: float, divisor: int, min_value: int | None = None) -> int:
    """The nearest multiple of `divisor` to v, at least min_value and not below 90 % of v
    (the tensorflow/models rule every MobileNet-family definition uses)."""
    min_value = divisor if min_value is None else min_value
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _torch() -> Any:
    return require_torch("GhostNet")


def build_ghostnet(num_classes: int = 1000, width: float = 1.0) -> torch.nn.Module:
    """An untrained GhostNet (huawei-noah's definition and module names), in train mode."""
    torch = _torch()
    nn = torch.nn
    F = nn.functional

    def hard_sigmoid(x: torch.Tensor) -> torch.Tensor:
        return F.relu6(x + 3.0) / 6.0

    class SqueezeExcite(nn.Module):
        def __init__(self, in_chs: int, se_ratio: float = 0.25, divisor: int = 4) -> None:
            super().__init__()
            reduced = _make_divisible(in_chs * se_ratio, divisor)
            self.avg_pool = nn.AdaptiveAvgPool2d(1)
            self.conv_reduce = nn.Conv2d(in_chs, reduced, 1, bias=True)
            self.act1 = nn.ReLU(inplace=True)
            self.conv_expand = nn.Conv2d(reduced, in_chs, 1, bias=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            gate = self.conv_expand(self.act1(self.conv_reduce(self.avg_pool(x))))
            return x * hard_sigmoid(gate)

    class ConvBnAct(nn.Module):
        def __init__(self, in_chs: int, out_chs: int, kernel_size: int, stride: int = 1) -> None:
            super().__init__()
            self.conv = nn.Conv2d(in_chs, out_chs, kernel_size, stride, kernel_size // 2, bias=False)
            self.bn1 = nn.BatchNorm2d(out_chs)
            self.act1 = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act1(self.bn1(self.conv(x)))

    class GhostModule(nn.Module):
        def __init__(
            self, inp: int, oup: int, kernel_size: int = 1, ratio: int = 2, dw_size: int = 3,
            stride: int = 1, relu: bool = True,
        ) -> None:  # fmt: skip
            super().__init__()
            self.oup = oup
            init = math.ceil(oup / ratio)
            new = init * (ratio - 1)
            self.primary_conv = nn.Sequential(
                nn.Conv2d(inp, init, kernel_size, stride, kernel_size // 2, bias=False),
                nn.BatchNorm2d(init),
                nn.ReLU(inplace=True) if relu else nn.Sequential(),
            )
            self.cheap_operation = nn.Sequential(
                nn.Conv2d(init, new, dw_size, 1, dw_size // 2, groups=init, bias=False),
                nn.BatchNorm2d(new),
                nn.ReLU(inplace=True) if relu else nn.Sequential(),
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x1 = self.primary_conv(x)
            x2 = self.cheap_operation(x1)
            return torch.cat([x1, x2], dim=1)[:, : self.oup, :, :]

    class GhostBottleneck(nn.Module):
        def __init__(
            self, in_chs: int, mid_chs: int, out_chs: int, dw_kernel_size: int = 3, stride: int = 1,
            se_ratio: float = 0.0,
        ) -> None:  # fmt: skip
            super().__init__()
            self.stride = stride
            pad = (dw_kernel_size - 1) // 2
            self.ghost1 = GhostModule(in_chs, mid_chs, relu=True)
            if stride > 1:
                self.conv_dw = nn.Conv2d(
                    mid_chs, mid_chs, dw_kernel_size, stride=stride, padding=pad, groups=mid_chs, bias=False
                )
                self.bn_dw = nn.BatchNorm2d(mid_chs)
            self.se = SqueezeExcite(mid_chs, se_ratio=se_ratio) if se_ratio > 0 else None
            self.ghost2 = GhostModule(mid_chs, out_chs, relu=False)
            if in_chs == out_chs and stride == 1:
                self.shortcut = nn.Sequential()
            else:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(in_chs, in_chs, dw_kernel_size, stride=stride, padding=pad, groups=in_chs,
                              bias=False),
                    nn.BatchNorm2d(in_chs),
                    nn.Conv2d(in_chs, out_chs, 1, stride=1, padding=0, bias=False),
                    nn.BatchNorm2d(out_chs),
                )  # fmt: skip

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            residual = x
            x = self.ghost1(x)
            if self.stride > 1:
                x = self.bn_dw(self.conv_dw(x))
            if self.se is not None:
                x = self.se(x)
            return self.ghost2(x) + self.shortcut(residual)

    class GhostNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            out = _make_divisible(STEM_WIDTH * width, 4)
            self.conv_stem = nn.Conv2d(3, out, 3, 2, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(out)
            self.act1 = nn.ReLU(inplace=True)
            cin = out
            stages: list[nn.Module] = []
            for cfg in CFGS:
                layers = []
                for k, exp, c, se, s in cfg:
                    out = _make_divisible(c * width, 4)
                    hidden = _make_divisible(exp * width, 4)
                    layers.append(GhostBottleneck(cin, hidden, out, k, s, se_ratio=se))
                    cin = out
                stages.append(nn.Sequential(*layers))
            out = _make_divisible(LAST_WIDTH * width, 4)
            stages.append(nn.Sequential(ConvBnAct(cin, out, 1)))
            self.blocks = nn.Sequential(*stages)
            self.global_pool = nn.AdaptiveAvgPool2d((1, 1))
            self.conv_head = nn.Conv2d(out, HEAD_WIDTH, 1, 1, 0, bias=True)
            self.act2 = nn.ReLU(inplace=True)
            # huawei-noah's dropout(0.2) before the classifier is a no-op in eval mode: left out
            self.classifier = nn.Linear(HEAD_WIDTH, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.blocks(self.act1(self.bn1(self.conv_stem(x))))
            x = self.act2(self.conv_head(self.global_pool(x)))
            return self.classifier(torch.flatten(x, 1))

    return GhostNet()


def export_ghostnet(
    path: str | os.PathLike[str], batch: int = 1, size: int = 224, seed: int = 0, num_classes: int = 1000
) -> Path:
    """Build GhostNet 1.0 with random weights (`seed`) and export it to ONNX, atomically.

    Weights are not left at torch's defaults: with them the activations fade through the 16
    bottlenecks and the logits barely depend on the input (every image the same top-1), so an
    output comparison would check constants. Convs get He init (fan-out, as torchvision's mobile
    nets), BatchNorm random affine parameters and running statistics measured on a seeded random
    batch, as a trained net's BN statistics match its data.

    Opset 17, TorchScript exporter: input "input" [batch, 3, size, size], output "logits"
    [batch, num_classes]. BatchNorm folds into the convs; each ghost module's slice is a Slice of
    the channel axis with constant bounds, each hard sigmoid Add → Clip → Div."""
    if batch < 1 or size < 32:
        raise ValueError(f"export_ghostnet: need batch >= 1 and size >= 32, got batch {batch}, size {size}")
    torch = _torch()
    nn = torch.nn
    torch.manual_seed(seed)
    model = build_ghostnet(num_classes)
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):
            nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)
        elif isinstance(mod, nn.BatchNorm2d):
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.1, 0.1)
            mod.momentum = None  # cumulative average: the calibration batch's own statistics
            mod.reset_running_stats()
    with torch.no_grad():
        model.train()(torch.randn(8, 3, size, size))
    model.eval()
    dest = Path(path)
    dummy = torch.randn(batch, 3, size, size)
    return export_classifier(model, dest, dummy)
