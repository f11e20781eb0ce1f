"""Generated model zoo: the networks deployopt is tested and benchmarked on.

Pure numpy + onnx.helper, deterministic from a seed, fp32, input "input", output "logits".
`mobilenetv2` (real ImageNet weights), `yolo` and `ghostnet` (random weights) need torch and are
imported separately, lazily.
"""

from __future__ import annotations

from deployopt.zoo.builder import DEFAULT_OPSET, GraphBuilder, conv_widths
from deployopt.zoo.cifar import (
    RESNET56_INNER_WIDTHS,
    RESNET56_STAGE_WIDTHS,
    VGG16_WIDTHS,
    resnet56_cifar,
    vgg16_cifar,
)
from deployopt.zoo.graphs import densenet_like, inception_like, mobilenet_like, resnet_projection, se_net
from deployopt.zoo.pruning import random_prune, round_up
from deployopt.zoo.variants import (
    bias_from_constantofshape,
    weights_as_constants,
    with_dynamic_batch,
    with_sum,
)

__all__ = [
    "DEFAULT_OPSET",
    "RESNET56_INNER_WIDTHS",
    "RESNET56_STAGE_WIDTHS",
    "VGG16_WIDTHS",
    "GraphBuilder",
    "bias_from_constantofshape",
    "conv_widths",
    "densenet_like",
    "inception_like",
    "mobilenet_like",
    "random_prune",
    "resnet56_cifar",
    "resnet_projection",
    "round_up",
    "se_net",
    "vgg16_cifar",
    "weights_as_constants",
    "with_dynamic_batch",
    "with_sum",
]
