"""Sweep real architectures through load → analyze → pad → trim → `deployopt optimize`.

For each architecture (torchvision classifiers and segmentation models, plus hand-written
deployment blocks: CBAM, Ghost module, RepVGG, a small UNet, PixelShuffle, YOLOv5 Focus/SPPF/C3,
ResNeXt bottlenecks with a grouped ConvTranspose),
export with torch's TorchScript exporter (opset 17, random weights, randomised BatchNorm
statistics) and check:

  (a) load_model + analyze raise nothing; free / frozen groups and the frozen reasons
  (b) every free group padded to the next multiple of 32 above its width: outputs equal on
      onnxruntime CPU within 1e-4 of the output's scale
  (c) every free group trimmed by 8 (at least to 1): onnx.checker full_check passes, it runs
  (d) `deployopt optimize M.onnx --target nano --backend model --max-evals 4` exits 0 (or a
      one-line error, never a traceback)
  (f) the torch backend's conversion (`onnx2torch` key): onnx2torch converts the model, rewritten
      to opset 17 where it is newer, and the module's output matches onnxruntime's within 1e-4

    python benchmarks/check_architectures.py [--only resnet18 cbam ...] [--no-cli] [--json out.json]

`--dynamo` exports with torch.export's exporter (torch.onnx.export's default since torch 2.9, needs
onnxscript) instead of the TorchScript one, into NAME_dynamo.onnx.
`--export-only` writes the ONNX files and checks nothing; with `--batch B --size S` that is how a
torchvision architecture is carried to a GPU machine without torchvision for
`bench_optimize.py --onnx NAME=PATH` (e.g. `--only regnet_x_400mf --batch 8 --size 224`).

Exports are cached in --workdir (default /tmp/deployopt_archs). Needs torch and torchvision.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# ----- hand-written deployment blocks ------------------------------------------------------------
def _blocks() -> dict[str, Callable[[], Any]]:
    import torch
    from torch import nn

    def cbr(c: int, k: int, r: int = 3, s: int = 1, g: int = 1, act: Any = nn.ReLU) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(c, k, r, s, r // 2, groups=g, bias=False), nn.BatchNorm2d(k), act())

    class CBAM(nn.Module):
        def __init__(self, c: int, r: int = 4) -> None:
            super().__init__()
            self.mlp = nn.Sequential(nn.Conv2d(c, c // r, 1), nn.ReLU(), nn.Conv2d(c // r, c, 1))
            self.spatial = nn.Conv2d(2, 1, 7, padding=3)

        def forward(self, x: Any) -> Any:
            avg = self.mlp(torch.mean(x, dim=(2, 3), keepdim=True))
            mx = self.mlp(torch.amax(x, dim=(2, 3), keepdim=True))
            x = x * torch.sigmoid(avg + mx)
            s = torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)
            return x * torch.sigmoid(self.spatial(s))

    class CBAMNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = cbr(3, 24, s=2)
            self.b1 = cbr(24, 40)
            self.att = CBAM(40)
            self.b2 = cbr(40, 56, s=2)
            self.att2 = CBAM(56)
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(56, 10))

        def forward(self, x: Any) -> Any:
            return self.head(self.att2(self.b2(self.att(self.b1(self.stem(x))))))

    class Ghost(nn.Module):
        def __init__(self, c: int, k: int, ratio: int = 2) -> None:
            super().__init__()
            self.k = k
            init = -(-k // ratio)
            self.primary = cbr(c, init, r=1)
            self.cheap = cbr(init, init * (ratio - 1), r=3, g=init)

        def forward(self, x: Any) -> Any:
            a = self.primary(x)
            return torch.cat([a, self.cheap(a)], 1)[:, : self.k]

    class GhostNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = cbr(3, 16, s=2)
            self.g1 = Ghost(16, 24)
            self.g2 = Ghost(24, 24)
            self.g3 = Ghost(24, 35)  # odd: the slice cuts the concat
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(35, 10))

        def forward(self, x: Any) -> Any:
            y = self.g1(self.stem(x))
            y = y + self.g2(y)
            return self.head(self.g3(y))

    class RepVGGBlock(nn.Module):
        def __init__(self, c: int, k: int, s: int = 1) -> None:
            super().__init__()
            self.dense = nn.Sequential(nn.Conv2d(c, k, 3, s, 1, bias=False), nn.BatchNorm2d(k))
            self.one = nn.Sequential(nn.Conv2d(c, k, 1, s, 0, bias=False), nn.BatchNorm2d(k))
            self.identity = nn.BatchNorm2d(c) if c == k and s == 1 else None

        def forward(self, x: Any) -> Any:
            y = self.dense(x) + self.one(x)
            if self.identity is not None:
                y = y + self.identity(x)
            return torch.relu(y)

    class RepVGG(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(
                RepVGGBlock(3, 24, 2), RepVGGBlock(24, 24), RepVGGBlock(24, 48, 2), RepVGGBlock(48, 48)
            )
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(48, 10))

        def forward(self, x: Any) -> Any:
            return self.head(self.body(x))

    class ResNeXtBlock(nn.Module):
        """ResNeXt's bottleneck: 1×1 → 3×3 with groups → 1×1, plus the residual."""

        def __init__(self, c: int, width: int, groups: int) -> None:
            super().__init__()
            self.body = nn.Sequential(
                cbr(c, width, r=1), cbr(width, width, g=groups), nn.Conv2d(width, c, 1, bias=False),
                nn.BatchNorm2d(c),
            )  # fmt: skip

        def forward(self, x: Any) -> Any:
            return torch.relu(x + self.body(x))

    class Grouped(nn.Module):
        """Two ResNeXt blocks (4 conv groups of 8, 8 of 6) and a grouped ConvTranspose (groups=4)
        on the residual stream, so the stream itself becomes 4 pieces of one group."""

        def __init__(self) -> None:
            super().__init__()
            self.stem = cbr(3, 24, s=2)
            self.blocks = nn.Sequential(ResNeXtBlock(24, 32, 4), ResNeXtBlock(24, 48, 8))
            self.up = nn.Sequential(nn.ConvTranspose2d(24, 32, 2, 2, groups=4), nn.ReLU())
            self.head = nn.Sequential(nn.Conv2d(32, 16, 3, 2, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                      nn.Linear(16, 10))  # fmt: skip

        def forward(self, x: Any) -> Any:
            return self.head(self.up(self.blocks(self.stem(x))))

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d1 = nn.Sequential(cbr(3, 16), cbr(16, 16))
            self.d2 = nn.Sequential(cbr(16, 32), cbr(32, 32))
            self.bott = nn.Sequential(cbr(32, 64), cbr(64, 64))
            self.up2 = nn.ConvTranspose2d(64, 32, 2, 2)
            self.u2 = nn.Sequential(cbr(64, 32), cbr(32, 32))
            self.up1 = nn.ConvTranspose2d(32, 16, 2, 2)
            self.u1 = nn.Sequential(cbr(32, 16), cbr(16, 16))
            self.out = nn.Conv2d(16, 2, 1)

        def forward(self, x: Any) -> Any:
            a = self.d1(x)
            b = self.d2(nn.functional.max_pool2d(a, 2))
            c = self.bott(nn.functional.max_pool2d(b, 2))
            b2 = self.u2(torch.cat([self.up2(c), b], 1))
            a2 = self.u1(torch.cat([self.up1(b2), a], 1))
            return self.out(a2)

    class ESPCN(nn.Module):
        def __init__(self, scale: int = 2) -> None:
            super().__init__()
            self.body = nn.Sequential(
                nn.Conv2d(3, 32, 5, padding=2), nn.Tanh(), nn.Conv2d(32, 24, 3, padding=1)
            )
            self.tail = nn.Sequential(nn.Tanh(), nn.Conv2d(24, 3 * scale * scale, 3, padding=1))
            self.shuffle = nn.PixelShuffle(scale)
            self.inner = nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16 * 4, 3, padding=1)
            )
            self.inner_shuffle = nn.PixelShuffle(2)
            self.out = nn.Conv2d(16, 3, 3, padding=1)

        def forward(self, x: Any) -> Any:
            y = self.shuffle(self.tail(self.body(x)))  # the sub-pixel output layer (ESPCN)
            return self.out(self.inner_shuffle(self.inner(y)))  # a PixelShuffle inside the net

    silu = nn.SiLU

    class Bottleneck(nn.Module):
        def __init__(self, c: int, shortcut: bool = True) -> None:
            super().__init__()
            self.cv1 = cbr(c, c, 1, act=silu)
            self.cv2 = cbr(c, c, 3, act=silu)
            self.add = shortcut

        def forward(self, x: Any) -> Any:
            return x + self.cv2(self.cv1(x)) if self.add else self.cv2(self.cv1(x))

    class C3(nn.Module):
        def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = True) -> None:
            super().__init__()
            c_ = c2 // 2
            self.cv1 = cbr(c1, c_, 1, act=silu)
            self.cv2 = cbr(c1, c_, 1, act=silu)
            self.cv3 = cbr(2 * c_, c2, 1, act=silu)
            self.m = nn.Sequential(*(Bottleneck(c_, shortcut) for _ in range(n)))

        def forward(self, x: Any) -> Any:
            return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))

    class SPPF(nn.Module):
        def __init__(self, c1: int, c2: int) -> None:
            super().__init__()
            c_ = c1 // 2
            self.cv1 = cbr(c1, c_, 1, act=silu)
            self.cv2 = cbr(c_ * 4, c2, 1, act=silu)
            self.m = nn.MaxPool2d(5, 1, 2)

        def forward(self, x: Any) -> Any:
            x = self.cv1(x)
            y1 = self.m(x)
            y2 = self.m(y1)
            return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))

    class Focus(nn.Module):
        def __init__(self, c1: int, c2: int) -> None:
            super().__init__()
            self.conv = cbr(c1 * 4, c2, 3, act=silu)

        def forward(self, x: Any) -> Any:
            return self.conv(
                torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]], 1)
            )

    class YoloV5Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.focus = Focus(3, 16)
            self.b1 = nn.Sequential(cbr(16, 32, 3, 2, act=silu), C3(32, 32, 1))
            self.b2 = nn.Sequential(cbr(32, 64, 3, 2, act=silu), C3(64, 64, 2))
            self.sppf = SPPF(64, 64)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.c3n = C3(64 + 32, 48, 1, shortcut=False)
            self.head = nn.Conv2d(48, 3 * 9, 1)

        def forward(self, x: Any) -> Any:
            p3 = self.b1(self.focus(x))
            p4 = self.sppf(self.b2(p3))
            return self.head(self.c3n(torch.cat([self.up(p4), p3], 1)))

    class SELinear(nn.Module):
        """The classic SENet code: view(b, c) → Linear → view(b, c, 1, 1) → expand_as."""

        def __init__(self, c: int, r: int = 4) -> None:
            super().__init__()
            self.fc = nn.Sequential(
                nn.Linear(c, c // r, bias=False), nn.ReLU(), nn.Linear(c // r, c, bias=False)
            )

        def forward(self, x: Any) -> Any:
            b, c = x.shape[:2]
            y = nn.functional.adaptive_avg_pool2d(x, 1).view(b, c)
            y = torch.sigmoid(self.fc(y)).view(b, c, 1, 1)
            return x * y.expand_as(x)

    class CBAMLinear(nn.Module):
        """CBAM's channel attention as most code writes it: Flatten → Linear MLP on avg and max."""

        def __init__(self, c: int, r: int = 4) -> None:
            super().__init__()
            self.mlp = nn.Sequential(nn.Flatten(), nn.Linear(c, c // r), nn.ReLU(), nn.Linear(c // r, c))

        def forward(self, x: Any) -> Any:
            att = self.mlp(nn.functional.adaptive_avg_pool2d(x, 1)) + self.mlp(
                nn.functional.adaptive_max_pool2d(x, 1)
            )
            return x * torch.sigmoid(att).unsqueeze(2).unsqueeze(3).expand_as(x)

    class ECA(nn.Module):
        def __init__(self, k: int = 3) -> None:
            super().__init__()
            self.conv = nn.Conv1d(1, 1, k, padding=k // 2, bias=False)

        def forward(self, x: Any) -> Any:
            y = nn.functional.adaptive_avg_pool2d(x, 1)
            y = self.conv(y.squeeze(-1).transpose(-1, -2)).transpose(-1, -2).unsqueeze(-1)
            return x * torch.sigmoid(y)

    class AttentionNet(nn.Module):
        """SE (Linear), CBAM (Linear MLP), ECA, an SCSE-style spatial gate, in one small net."""

        def __init__(self) -> None:
            super().__init__()
            self.stem = cbr(3, 24, s=2)
            self.b1 = cbr(24, 40)
            self.se = SELinear(40)
            self.b2 = cbr(40, 48)
            self.cbam = CBAMLinear(48)
            self.b3 = cbr(48, 56)
            self.eca = ECA()
            self.b4 = cbr(56, 40)
            self.gate = nn.Conv2d(40, 1, 1)
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(40, 10))

        def forward(self, x: Any) -> Any:
            y = self.se(self.b1(self.stem(x)))
            y = self.eca(self.b3(self.cbam(self.b2(y))))
            y = self.b4(y)
            y = y + y * torch.sigmoid(self.gate(y))  # SCSE's spatial squeeze, added back
            return self.head(y)

    class PSP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(cbr(3, 24, s=2), cbr(24, 40, s=2))
            self.stages = nn.ModuleList(
                nn.Sequential(nn.AdaptiveAvgPool2d(b), cbr(40, 10, r=1)) for b in (1, 2, 4)
            )
            self.fuse = cbr(40 + 30, 24)
            self.cls = nn.Conv2d(24, 5, 1)

        def forward(self, x: Any) -> Any:
            f = self.stem(x)
            size = f.shape[2:]
            ups = [
                nn.functional.interpolate(s(f), size=size, mode="bilinear", align_corners=True)
                for s in self.stages
            ]
            y = self.cls(self.fuse(torch.cat([f, *ups], 1)))
            return nn.functional.interpolate(y, scale_factor=4, mode="bilinear", align_corners=False)

    class CSPChunk(nn.Module):
        """YOLOv8's C2f as ultralytics writes it (chunk), and a torch.split with sizes."""

        def __init__(self) -> None:
            super().__init__()
            self.stem = cbr(3, 32, s=2, act=silu)
            self.cv1 = cbr(32, 32, 1, act=silu)
            self.m = nn.Sequential(cbr(16, 16, act=silu), cbr(16, 16, act=silu))
            self.cv2 = cbr(48, 40, 1, act=silu)
            self.cv3 = cbr(40, 40, 1, act=silu)
            self.tail = cbr(24, 24, act=silu)
            self.out = nn.Conv2d(40, 8, 1)

        def forward(self, x: Any) -> Any:
            y = list(self.cv1(self.stem(x)).chunk(2, 1))
            y.append(self.m(y[-1]))
            z = self.cv3(self.cv2(torch.cat(y, 1)))
            a, b = torch.split(z, [16, 24], 1)
            return self.out(torch.cat([a, self.tail(b)], 1))

    class Norms(nn.Module):
        """GroupNorm, InstanceNorm + reflection padding (style transfer), PReLU, LeakyReLU, Mish."""

        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(3, 32, 3, padding=1, padding_mode="reflect")
            self.gn = nn.GroupNorm(4, 32)
            self.c2 = nn.Conv2d(32, 24, 3, padding=1)
            self.inorm = nn.InstanceNorm2d(24, affine=True)
            self.prelu = nn.PReLU(24)
            self.c3 = nn.Conv2d(24, 20, 3, padding=1)
            self.leaky = nn.LeakyReLU(0.1)
            self.c4 = nn.Conv2d(20, 20, 3, padding=1)
            self.c5 = nn.Conv2d(20, 16, 3, padding=1)
            self.mish = nn.Mish()
            self.out = nn.Conv2d(16, 3, 3, padding=1)

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.gn(self.c1(x)))
            y = self.prelu(self.inorm(self.c2(y)))
            y = self.leaky(self.c3(y))
            y = y + 0.2 * self.c4(y)  # Inception-ResNet's scaled residual
            return self.out(self.mish(self.c5(y)))

    class Misc(nn.Module):
        """Depthwise with multiplier 2, ResNet-CIFAR's option-A shortcut (channel Pad), CoordConv,
        a non-local block (Reshape/MatMul/Softmax), an attention gate."""

        def __init__(self) -> None:
            super().__init__()
            self.stem = cbr(3, 16)
            self.dw2 = nn.Conv2d(16, 32, 3, padding=1, groups=16)
            self.b = cbr(32, 32)
            self.down = cbr(32, 48, s=2)
            self.coord = cbr(48 + 2, 40)
            self.theta = nn.Conv2d(40, 20, 1)
            self.phi = nn.Conv2d(40, 20, 1)
            self.g = nn.Conv2d(40, 20, 1)
            self.w = nn.Conv2d(20, 40, 1)
            self.out = nn.Conv2d(40, 6, 1)

        def forward(self, x: Any) -> Any:
            y = self.b(self.dw2(self.stem(x)))
            sc = nn.functional.pad(y[:, :, ::2, ::2], (0, 0, 0, 0, 8, 8))  # option A: 32 -> 48 channels
            y = self.down(y) + sc
            n, _, h, w = y.shape
            xx = torch.linspace(-1, 1, w).view(1, 1, 1, w).expand(n, 1, h, w)
            yy = torch.linspace(-1, 1, h).view(1, 1, h, 1).expand(n, 1, h, w)
            y = self.coord(torch.cat([y, xx, yy], 1))
            t = self.theta(y).flatten(2).transpose(1, 2)
            p = self.phi(y).flatten(2)
            g = self.g(y).flatten(2).transpose(1, 2)
            att = torch.softmax(t @ p, -1)
            nl = (att @ g).transpose(1, 2).reshape(n, 20, h, w)
            y = y + self.w(nl)
            return self.out(y)

    return {
        "attention": AttentionNet,
        "psp": PSP,
        "csp_chunk": CSPChunk,
        "norms": Norms,
        "misc": Misc,
        "cbam": CBAMNet,
        "ghost": GhostNet,
        "repvgg": RepVGG,
        "unet": UNet,
        "espcn_pixelshuffle": ESPCN,
        "yolov5_focus_sppf_c3": YoloV5Tiny,
        "grouped": Grouped,
    }


def build(name: str, size: int | None = None) -> tuple[Any, int]:
    """The torch module (eval, random weights) and its square input size (`size`, else its own)."""
    import torchvision
    from torch import nn

    blocks = _blocks()
    default = 96
    if name in blocks:
        net = blocks[name]()
        default = 64
    elif name in ("fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"):
        seg = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)

        class Seg(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = seg

            def forward(self, x: Any) -> Any:
                return self.m(x)["out"]

        net = Seg()
        default = 96
    elif name == "fpn_resnet18":
        from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

        fpn = resnet_fpn_backbone(backbone_name="resnet18", weights=None, trainable_layers=5)

        class FPN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = fpn

            def forward(self, x: Any) -> Any:
                return tuple(self.m(x).values())

        net = FPN()
        default = 128
    elif name == "googlenet":
        net = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=True)
    elif name == "inception_v3":
        net = torchvision.models.inception_v3(
            weights=None, aux_logits=False, init_weights=True, transform_input=False
        )
        default = 128
    else:
        net = getattr(torchvision.models, name)(weights=None)
        if name in ("vgg11_bn", "alexnet"):
            default = 224  # adaptive pooling to 7×7 / 6×6 exports only when the map divides
    return net.eval(), size or default


def export(
    name: str,
    workdir: Path,
    opset: int | None = 17,
    dynamic: bool = False,
    size: int | None = None,
    batch: int = 1,
    dynamo: bool = False,
) -> Path:
    """Export `name` to `workdir` (random weights, randomised BatchNorm statistics) at `batch`; cached
    by name (`_b{batch}` added past batch 1), re-exported when `size` is given and the cached
    file's input has another size. `dynamo`: torch.export's exporter, torch.onnx.export's default
    since torch 2.9 (needs onnxscript; opset None = its own default), what a user's plain export
    writes; as one file here (a user's own export puts the weights in NAME.onnx.data)."""
    import torch

    op = "" if opset == (None if dynamo else 17) else f"_op{opset}"
    stem = f"{name}{'_dynamo' if dynamo else ''}{op}{'_dyn' if dynamic else ''}"
    path = workdir / f"{stem}{'' if batch == 1 else f'_b{batch}'}.onnx"
    if path.exists() and (size is None or input_shape(path)[2:] == [size, size]):
        return path
    torch.manual_seed(0)
    net, size = build(name, size)
    for mod in net.modules():  # non-trivial BatchNorm statistics, as a trained net has
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
            if mod.bias is not None:
                mod.bias.data.uniform_(-0.1, 0.1)
    x = torch.randn(batch, 3, size, size)
    tmp = path.with_suffix(".tmp.onnx")
    axes = {"input": {0: "batch"}} if dynamic else None
    with torch.no_grad():
        if dynamo:
            torch.onnx.export(net, (x,), str(tmp), dynamo=True, opset_version=opset, input_names=["input"],
                              dynamic_axes=axes, external_data=False, verbose=False)  # fmt: skip
        else:
            torch.onnx.export(net, x, str(tmp), dynamo=False, opset_version=opset, input_names=["input"],
                              dynamic_axes=axes)  # fmt: skip
    os.replace(tmp, path)
    return path


def input_shape(path: Path) -> list[int | str]:
    """The exported model's input shape (a symbolic dimension by its name)."""
    import onnx

    dims = onnx.load(str(path), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    return [d.dim_value or d.dim_param for d in dims]


def run_ort(model: Any, seed: int = 1) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {}
    for inp in sess.get_inputs():
        feeds[inp.name] = np.random.default_rng(seed).standard_normal(inp.shape).astype(np.float32)
    return sess.run(None, feeds)


def scaled_error(ref: np.ndarray, out: np.ndarray) -> float:
    """The largest output difference over the output's scale (at least 1); inf if the shapes differ."""
    if ref.shape != out.shape:
        return float("inf")
    return float(np.abs(ref - out).max()) / max(1.0, float(np.abs(ref).max()))


def short_reason(reason: str) -> str:
    """A frozen reason with node names and numbers generalized, to count kinds of reasons."""
    r = re.sub(r"'[^']*'", "'…'", reason)
    r = re.sub(r"(?<=\s)/\S+|\b\S+/\S*\b", "N", r)
    r = re.sub(r"\b(?:node_\w+|n\d+_\d+)", "N", r)  # torch.export's names (node_view_3, n0_1)
    r = re.sub(r"\d+", "#", r)
    return r


ALWAYS_FROZEN = ("graph input '…'", "feeds the graph output '…'")


def markdown_row(res: dict[str, Any], label: str | None = None) -> str:
    """One row of docs/surgery.md's "Architectures checked" table from a check() result."""
    if "analyze" not in res or str(res.get("analyze", "")).startswith("FAIL"):
        return f"| {label or res['arch']} | — | {res.get('export') or res.get('analyze')} | | | | | |"
    reasons = "; ".join(
        f"{re.sub(r' N(?= |$)', '', r).replace('#', 'n')} ×{k}"
        for r, k in res["reasons"].items()
        if r not in ALWAYS_FROZEN
    )
    err = res.get("pad_err")
    pad = "—" if err is None else ("0" if err == 0 else f"{err:.0e}")
    side = res.get("input_shape", [0, 0, 0, "?"])[-1]
    cells = [label or res["arch"], str(side), f"{res['free']} / {res['frozen']}", reasons or "—", pad]
    cells += [res.get(k, "—") for k in ("trim", "pad_trim_back", "cli")]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def trim_width(group: Any) -> int:
    """The trim check's width: 8 less, at least 1; at least 2 per conv group of a grouped conv (at 1
    the conv becomes depthwise, valid, but analyzed again it joins its input and output groups, so
    the planned groups could not be looked up by id)."""
    return max(2 if group.repeat > 1 else 1, group.width - 8)


def check(name: str, path: Path, cli: bool, outdir: Path) -> dict[str, Any]:
    import onnx

    from deployopt.coupling import analyze
    from deployopt.model import load_model
    from deployopt.surgery import apply_plan

    res: dict[str, Any] = {"arch": name, "input_shape": input_shape(path)}
    t0 = time.time()
    try:
        loaded = load_model(path)
        analysis = analyze(loaded.model)
    except Exception as exc:
        res["analyze"] = f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        res["analyze_tb"] = traceback.format_exc()
        return res
    model = loaded.model
    free = analysis.free_groups()
    frozen = [g for g in analysis.groups if g.frozen]
    res["analyze"] = "ok"
    res["free"] = len(free)
    res["frozen"] = len(frozen)
    reasons: dict[str, int] = {}
    for g in frozen:
        reasons[short_reason(g.reason)] = reasons.get(short_reason(g.reason), 0) + 1
    res["reasons"] = reasons
    res["frozen_examples"] = {short_reason(g.reason): g.reason for g in frozen}
    ref = run_ort(model)
    # (b) pad
    if free:
        try:
            plan = {g.id: (g.width // 32 + 1) * 32 for g in free}
            padded = apply_plan(model, plan, analysis)
            out = run_ort(padded)
            errs = [scaled_error(r, o) for r, o in zip(ref, out)]
            res["pad_err"] = max(errs)
            res["pad"] = "ok" if max(errs) <= 1e-4 else f"FAIL output differs by {max(errs):.3g}× scale"
        except Exception as exc:
            res["pad"] = f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            res["pad_tb"] = traceback.format_exc()
        # (c) trim
        try:
            plan = {g.id: trim_width(g) for g in free}
            trimmed = apply_plan(model, plan, analysis)
            onnx.checker.check_model(trimmed, full_check=True)
            out = run_ort(trimmed)
            shapes_ok = all(r.shape == o.shape for r, o in zip(ref, out))
            finite = all(np.isfinite(o).all() for o in out)
            after = {g.id: g.width for g in analyze(trimmed).groups}
            widths_ok = all(after.get(gid) == w for gid, w in plan.items())
            weights = {t.name: tuple(t.dims) for t in trimmed.graph.initializer}
            convs_ok = True
            for conv, shape in analysis.conv_shapes(plan).items():  # predicted shapes are the real ones
                node = next(n for n in trimmed.graph.node if (n.name or "") == conv)
                dims = weights.get(node.input[1])
                convs_ok &= dims is not None and dims[0] == shape.k and dims[1] == shape.c // shape.groups
            ok = shapes_ok and finite and widths_ok and convs_ok
            res["trim"] = (
                "ok" if ok else f"FAIL shapes={shapes_ok} finite={finite} widths={widths_ok} convs={convs_ok}"
            )
        except Exception as exc:
            res["trim"] = f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            res["trim_tb"] = traceback.format_exc()
        # (e) pad, then trim back: exactly the padded channels are dead, outputs and weights come back
        try:
            from deployopt.surgery import apply_plan_report

            original = {g.id: g.width for g in free}
            padded = apply_plan(model, {g.id: (g.width // 32 + 1) * 32 for g in free}, analysis)
            back, changes = apply_plan_report(padded, original, analyze(padded))
            all_dead = all(c.trimmed == c.dead_trimmed for c in changes)
            err = max(scaled_error(r, o) for r, o in zip(ref, run_ort(back)))
            orig_w = {t.name: t.raw_data or bytes(t.SerializeToString()) for t in model.graph.initializer}
            same_w = all(
                (t.raw_data or bytes(t.SerializeToString())) == orig_w.get(t.name)
                for t in back.graph.initializer
            )
            ok = all_dead and err <= 1e-4 and same_w
            res["pad_trim_back"] = (
                "ok" if ok else f"FAIL all_dead={all_dead} err={err:.3g} same_weights={same_w}"
            )
        except Exception as exc:
            res["pad_trim_back"] = (
                f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
            res["pad_trim_back_tb"] = traceback.format_exc()
    else:
        res["pad"] = res["trim"] = "n/a (no free group)"
    # (f) the torch backend's conversion: onnx2torch reads opsets up to 17, so a newer model is
    # rewritten first (deployopt/backends/onnx2torch_opset.py); the module must compute the same
    try:
        import onnx2torch
        import torch

        from deployopt.backends.onnx2torch_opset import to_onnx2torch_opset

        dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]  # batch fixed
        x = np.random.default_rng(1).standard_normal(dims).astype(np.float32)
        with torch.no_grad():
            out = onnx2torch.convert(to_onnx2torch_opset(model, name)).eval()(torch.from_numpy(x))
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        err = max(scaled_error(r, o.numpy()) for r, o in zip(ref, outs))
        res["onnx2torch"] = "ok" if err <= 1e-4 else f"FAIL output differs by {err:.3g}× scale"
    except Exception as exc:
        res["onnx2torch"] = f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    # (d) CLI
    if cli:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        cmd = [sys.executable, "-m", "deployopt", "optimize", str(path), "--target", "nano", "--backend",
               "model", "--max-evals", "4", "-o", str(outdir / name), "--force"]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        err = p.stderr.strip()
        if p.returncode == 0:
            res["cli"] = "ok"
        elif "Traceback" in err or len(err.splitlines()) > 1:
            res["cli"] = f"FAIL rc={p.returncode} traceback/multi-line: {err.splitlines()[-1] if err else ''}"
            res["cli_tb"] = err[-3000:]
        else:
            res["cli"] = f"error rc={p.returncode}: {err}"
    res["seconds"] = round(time.time() - t0, 1)
    return res


ARCHS = [
    "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "mobilenet_v2", "mobilenet_v3_small",
    "mobilenet_v3_large", "efficientnet_b0", "efficientnet_v2_s", "regnet_x_400mf", "regnet_y_400mf",
    "mnasnet0_5", "shufflenet_v2_x0_5", "squeezenet1_1", "densenet121", "googlenet", "inception_v3",
    "vgg11_bn", "alexnet", "convnext_tiny", "fcn_resnet50", "deeplabv3_mobilenet_v3_large",
    "lraspp_mobilenet_v3_large", "fpn_resnet18", "cbam", "ghost", "repvgg", "unet", "espcn_pixelshuffle",
    "yolov5_focus_sppf_c3", "attention", "psp", "csp_chunk", "norms", "misc", "grouped",
]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--no-cli", action="store_true")
    ap.add_argument("--workdir", default="/tmp/deployopt_archs")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--opset", type=int, default=None, help="default 17; with --dynamo the exporter's own")
    ap.add_argument(
        "--dynamo",
        action="store_true",
        help="export with torch.export's exporter (torch.onnx.export's default since torch 2.9; needs "
        "onnxscript) instead of the TorchScript one",
    )
    ap.add_argument("--dynamic-batch", action="store_true", help="export with a dynamic batch dimension")
    ap.add_argument("--batch", type=int, default=1, help="export at this batch (files past 1: NAME_bB.onnx)")
    ap.add_argument("--size", type=int, default=None, help="input side (default: each architecture's own)")
    ap.add_argument(
        "--export-only",
        action="store_true",
        help="only write the ONNX files (e.g. for bench_optimize.py --onnx on a machine without torchvision)",
    )
    ap.add_argument("--markdown", action="store_true", help="end with the rows of docs/surgery.md's table")
    args = ap.parse_args()
    if args.batch < 1:
        ap.error(f"--batch must be >= 1, got {args.batch}")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results = []
    opset = args.opset if args.opset is not None or args.dynamo else 17  # the dynamo exporter's own
    for name in args.only or ARCHS:
        try:
            path = export(name, workdir, opset, args.dynamic_batch, args.size, args.batch, args.dynamo)
        except Exception as exc:
            res = {"arch": name, "export": f"FAIL {type(exc).__name__}: {str(exc).splitlines()[0]}"}
        else:
            if args.export_only:
                res = {"arch": name, "export": str(path), "input_shape": input_shape(path)}
            else:
                res = check(path.stem, path, not args.no_cli, workdir / "out")
        results.append(res)
        brief = {k: v for k, v in res.items() if not k.endswith("_tb") and k != "frozen_examples"}
        print(json.dumps(brief), flush=True)
        for k, v in res.items():
            if k.endswith("_tb"):
                print(v, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    if args.markdown:
        print("\n".join(markdown_row(r) for r in results))


if __name__ == "__main__":
    main()
