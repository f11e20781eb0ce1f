"""A YOLOv8-style detector in PyTorch (Conv-BN-SiLU, C2f with a channel Split, SPPF, nearest
upsampling, a PAN neck, three 1×1 heads): the network family Jetson users ship most, exported the
way they export it (TorchScript exporter, opset 17). Random weights: for surgery tests and latency
benchmarks, not accuracy. torch is imported only inside `export_yolo_like`.

The five widths are the stem, P2, P3, P4 and P5 channels (YOLOv8s: `YOLOV8S_WIDTHS`); every other
width derives from them as in ultralytics (C2f's hidden width is half its output, SPPF's half its
input), so irregular base widths give irregular widths throughout, as a pruned detector has.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deployopt.fileio import atomic_path

YOLOV8S_WIDTHS: tuple[int, ...] = (32, 64, 128, 256, 512)
HEAD_OUTPUTS = 65  # 64 box-distribution bins + 1 class per anchor point, as a one-class YOLOv8 head


def export_yolo_like(
    path: Path,
    widths: Sequence[int] = (13, 27, 50, 101, 203),
    size: int = 160,
    batch: int = 2,
    seed: int = 0,
) -> Any:
    """Build, randomise BatchNorm statistics (as a trained net has), export to `path` (written
    whole or not at all); returns the random input it was traced with (numpy, batch×3×size×size)."""
    import torch
    from torch import nn

    class Conv(nn.Module):
        def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1) -> None:
            super().__init__()
            self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
            self.bn = nn.BatchNorm2d(c2)
            self.act = nn.SiLU()

        def forward(self, x: Any) -> Any:
            return self.act(self.bn(self.conv(x)))

    class Bottleneck(nn.Module):
        def __init__(self, c: int, shortcut: bool) -> None:
            super().__init__()
            self.cv1, self.cv2, self.add = Conv(c, c, 3), Conv(c, c, 3), shortcut

        def forward(self, x: Any) -> Any:
            y = self.cv2(self.cv1(x))
            return x + y if self.add else y

    class C2f(nn.Module):
        def __init__(self, c1: int, c2: int, n: int = 1, shortcut: bool = False) -> None:
            super().__init__()
            self.c = c2 // 2
            self.cv1 = Conv(c1, 2 * self.c)
            self.cv2 = Conv((2 + n) * self.c, c2)
            self.m = nn.ModuleList(Bottleneck(self.c, shortcut) for _ in range(n))

        def forward(self, x: Any) -> Any:
            y = list(self.cv1(x).split((self.c, self.c), 1))
            y.extend(m(y[-1]) for m in self.m)
            return self.cv2(torch.cat(y, 1))

    class SPPF(nn.Module):
        def __init__(self, c1: int, c2: int) -> None:
            super().__init__()
            self.cv1, self.cv2, self.m = Conv(c1, c1 // 2), Conv(c1 // 2 * 4, c2), nn.MaxPool2d(5, 1, 2)

        def forward(self, x: Any) -> Any:
            x = self.cv1(x)
            y1 = self.m(x)
            y2 = self.m(y1)
            return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))

    class Net(nn.Module):
        def __init__(self, w: tuple[int, ...]) -> None:
            super().__init__()
            a, b, c, d, e = w
            self.stem = nn.Sequential(Conv(3, a, 3, 2), Conv(a, b, 3, 2), C2f(b, b, 1, True))
            self.p3 = nn.Sequential(Conv(b, c, 3, 2), C2f(c, c, 2, True))
            self.p4 = nn.Sequential(Conv(c, d, 3, 2), C2f(d, d, 2, True))
            self.p5 = nn.Sequential(Conv(d, e, 3, 2), C2f(e, e, 1, True), SPPF(e, e))
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.n4, self.n3 = C2f(e + d, d), C2f(d + c, c)
            self.down3, self.o4 = Conv(c, c, 3, 2), C2f(c + d, d)
            self.down4, self.o5 = Conv(d, d, 3, 2), C2f(d + e, e)
            self.heads = nn.ModuleList(nn.Conv2d(ch, HEAD_OUTPUTS, 1) for ch in (c, d, e))

        def forward(self, x: Any) -> list[Any]:
            p3 = self.p3(self.stem(x))
            p4 = self.p4(p3)
            p5 = self.p5(p4)
            n4 = self.n4(torch.cat((self.up(p5), p4), 1))
            o3 = self.n3(torch.cat((self.up(n4), p3), 1))
            o4 = self.o4(torch.cat((self.down3(o3), n4), 1))
            o5 = self.o5(torch.cat((self.down4(o4), p5), 1))
            return [h(o) for h, o in zip(self.heads, (o3, o4, o5))]

    if len(widths) != 5 or min(widths) < 2:
        raise ValueError(f"export_yolo_like: need five widths >= 2 (stem, P2..P5), got {list(widths)}")
    torch.manual_seed(seed)
    net = Net(tuple(int(w) for w in widths)).eval()
    for mod in net.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.2, 0.2)
    x = torch.randn(batch, 3, size, size)
    with atomic_path(Path(path), suffix=".onnx") as tmp, torch.no_grad():
        torch.onnx.export(net, x, str(tmp), dynamo=False, opset_version=17, input_names=["images"],
                          output_names=["o3", "o4", "o5"])  # fmt: skip
    return x.numpy()
