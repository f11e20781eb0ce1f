"""A YOLOv8-style detector in PyTorch (Conv-BN-SiLU, C2f with a channel Split, SPPF, nearest
upsampling, a PAN neck, three 1×1 heads): the network family Jetson users ship most, exported the
way they export it (TorchScript exporter, opset 17). Random weights: for surgery tests and latency
benchmarks, not accuracy. torch is imported only inside `export_yolo_like`.

`head="plain"` (the default, what the committed benchmarks measured) ends in three 1×1 convs with
65 outputs each. `head="detect"` ends in ultralytics' YOLOv8 Detect head as `yolo export
format=onnx` exports it (static shapes, anchors cached by the exporter's dry runs so they become
constants): per level a box branch cv2 (Conv 3×3, Conv 3×3, Conv2d 1×1 to 64) and a class branch
cv3 (the same to `nc`), concatenated, flattened over anchors, DFL softmax decoding, dist2bbox
times the strides, sigmoid scores; one output `output0` of shape batch × (4 + nc) × anchors.

The five widths are the stem, P2, P3, P4 and P5 channels (YOLOv8s: `YOLOV8S_WIDTHS`); every other
width derives from them as in ultralytics (C2f's hidden width is half its output, SPPF's half its
input), so irregular base widths give irregular widths throughout, as a pruned detector has.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deployopt.fileio import atomic_path

YOLOV8S_WIDTHS: tuple[int, ...] = (32, 64, 128, 256, 512)
HEAD_OUTPUTS = 65  # 64 box-distribution bins + 1 class per anchor point, as a one-class YOLOv8 head
HEADS = ("plain", "detect")
REG_MAX = 16  # DFL bins per box side (ultralytics' reg_max)


def export_yolo_like(
    path: Path,
    widths: Sequence[int] = (13, 27, 50, 101, 203),
    size: int = 160,
    batch: int = 2,
    seed: int = 0,
    head: str = "plain",
    nc: int = 80,
    dynamic: bool = False,
) -> Any:
    """Build, randomise BatchNorm statistics (as a trained net has), export to `path` (written
    whole or not at all); returns the random input it was traced with (numpy, batch×3×size×size).

    `head="detect"` gives the real YOLOv8 Detect head with `nc` classes (see the module doc).
    `dynamic=True` exports as `yolo export dynamic=True` does: batch and image size symbolic, and
    the Detect head recomputes its anchors from the feature-map shapes in the graph."""
    if len(widths) != 5 or min(widths) < 2:
        raise ValueError(f"export_yolo_like: need five widths >= 2 (stem, P2..P5), got {list(widths)}")
    if head not in HEADS:
        raise ValueError(f"export_yolo_like: head must be one of {', '.join(HEADS)}, got {head!r}")
    if nc < 1:
        raise ValueError(f"export_yolo_like: nc (number of classes) must be >= 1, got {nc}")
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

    def make_anchors(feats: list[Any], strides: Any, offset: float = 0.5) -> tuple[Any, Any]:
        # ultralytics.utils.tal.make_anchors: one (x, y) cell centre and one stride per anchor
        points, stride_list = [], []
        for f, stride in zip(feats, strides):
            _, _, h, w = f.shape
            sx = torch.arange(end=w, dtype=f.dtype) + offset
            sy = torch.arange(end=h, dtype=f.dtype) + offset
            sy, sx = torch.meshgrid(sy, sx, indexing="ij")
            points.append(torch.stack((sx, sy), -1).view(-1, 2))
            stride_list.append(torch.full((h * w, 1), float(stride), dtype=f.dtype))
        return torch.cat(points), torch.cat(stride_list)

    def dist2bbox(distance: Any, anchor_points: Any, dim: int = 1) -> Any:
        # ultralytics.utils.tal.dist2bbox with xywh=True
        lt, rb = distance.chunk(2, dim)
        x1y1 = anchor_points - lt
        x2y2 = anchor_points + rb
        return torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), dim)

    class DFL(nn.Module):
        """Expected value of the 16-bin distribution per box side: a fixed 1×1 conv with weights 0..15."""

        def __init__(self, c1: int = REG_MAX) -> None:
            super().__init__()
            self.conv = nn.Conv2d(c1, 1, 1, bias=False).requires_grad_(False)
            self.conv.weight.data[:] = torch.arange(c1, dtype=torch.float).view(1, c1, 1, 1)
            self.c1 = c1

        def forward(self, x: Any) -> Any:
            b, _, a = x.shape
            return self.conv(x.view(b, 4, self.c1, a).transpose(2, 1).softmax(1)).view(b, 4, a)

    class Detect(nn.Module):
        """ultralytics' YOLOv8 Detect head in export mode (static shapes, anchors cached)."""

        def __init__(self, nc: int, ch: tuple[int, ...], strides: tuple[float, ...]) -> None:
            super().__init__()
            self.nc, self.nl, self.reg_max = nc, len(ch), REG_MAX
            self.no = nc + 4 * REG_MAX
            self.stride = torch.tensor(strides)
            c2, c3 = max((16, ch[0] // 4, 4 * REG_MAX)), max(ch[0], min(nc, 100))
            self.cv2 = nn.ModuleList(
                nn.Sequential(Conv(x, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * REG_MAX, 1)) for x in ch
            )
            self.cv3 = nn.ModuleList(
                nn.Sequential(Conv(x, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for x in ch
            )
            self.dfl = DFL(REG_MAX)
            self.shape: Any = None
            self.anchors, self.strides = torch.empty(0), torch.empty(0)

        def forward(self, x: list[Any]) -> Any:
            x = [torch.cat((self.cv2[i](x[i]), self.cv3[i](x[i])), 1) for i in range(self.nl)]
            shape = x[0].shape
            x_cat = torch.cat([xi.view(shape[0], self.no, -1) for xi in x], 2)
            if dynamic or self.shape != shape:  # the dry runs fill this cache: constants in the graph
                self.anchors, self.strides = (a.transpose(0, 1) for a in make_anchors(x, self.stride))
                self.shape = shape
            box, cls = x_cat.split((4 * self.reg_max, self.nc), 1)
            dbox = dist2bbox(self.dfl(box), self.anchors.unsqueeze(0), dim=1) * self.strides
            return torch.cat((dbox, cls.sigmoid()), 1)

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
            if head == "detect":
                self.detect = Detect(nc, (c, d, e), (8.0, 16.0, 32.0))  # P3/P4/P5 strides
            else:
                self.heads = nn.ModuleList(nn.Conv2d(ch, HEAD_OUTPUTS, 1) for ch in (c, d, e))

        def forward(self, x: Any) -> Any:
            p3 = self.p3(self.stem(x))
            p4 = self.p4(p3)
            p5 = self.p5(p4)
            n4 = self.n4(torch.cat((self.up(p5), p4), 1))
            o3 = self.n3(torch.cat((self.up(n4), p3), 1))
            o4 = self.o4(torch.cat((self.down3(o3), n4), 1))
            o5 = self.o5(torch.cat((self.down4(o4), p5), 1))
            if head == "detect":
                return self.detect([o3, o4, o5])
            return [h(o) for h, o in zip(self.heads, (o3, o4, o5))]

    torch.manual_seed(seed)
    net = Net(tuple(int(w) for w in widths)).eval()
    for mod in net.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.2, 0.2)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.2, 0.2)
    x = torch.randn(batch, 3, size, size)
    outputs = ["output0"] if head == "detect" else ["o3", "o4", "o5"]
    with atomic_path(Path(path), suffix=".onnx") as tmp, torch.no_grad(), warnings.catch_warnings():
        # the anchor cache's shape test is a Python bool in the trace: meant, as in ultralytics
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        for _ in range(2):  # dry runs, as ultralytics' exporter does: they cache the anchors
            net(x)
        axes = None
        if dynamic:  # ultralytics: images {0: batch, 2: height, 3: width}, outputs {0: batch, 2: anchors}
            axes = {"images": {0: "batch", 2: "height", 3: "width"}}
            per_output = {0: "batch", 2: "anchors"} if head == "detect" else {0: "batch"}
            axes.update({o: per_output for o in outputs})
        torch.onnx.export(net, x, str(tmp), dynamo=False, opset_version=17, input_names=["images"],
                          output_names=outputs, dynamic_axes=axes)  # fmt: skip
    return x.numpy()
