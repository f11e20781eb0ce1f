"""The one catalogue of model fixtures every test file uses (see conftest.py: `zoo_model_path`).

Names map to zero-argument builders so a test asks for a model by name and all test files share
the same bytes. Widths recorded here are what each model must contain (test_zoo checks them).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import onnx

from deployopt import zoo
from deployopt.zoo.pruning import random_prune

VGG16_PRUNED_WIDTHS = random_prune(zoo.VGG16_WIDTHS, seed=0)
RESNET56_PRUNED_INNER = random_prune(zoo.RESNET56_INNER_WIDTHS, seed=0)

MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    # The paper's benchmark networks (CIFAR shapes).
    "vgg16_cifar": lambda: zoo.vgg16_cifar(),
    "vgg16_pruned": lambda: zoo.vgg16_cifar(VGG16_PRUNED_WIDTHS),
    "vgg16_pruned_b4": lambda: zoo.vgg16_cifar(VGG16_PRUNED_WIDTHS, batch=4),
    "resnet56_cifar": lambda: zoo.resnet56_cifar(),
    "resnet56_pruned": lambda: zoo.resnet56_cifar(RESNET56_PRUNED_INNER),
    # One per coupling pattern.
    "resnet_projection": lambda: zoo.resnet_projection(),
    "resnet_projection_64": lambda: zoo.resnet_projection(image_size=64),
    "densenet_like": lambda: zoo.densenet_like(),
    "se_net": lambda: zoo.se_net(),
    "inception_like": lambda: zoo.inception_like(),
    "mobilenet_like": lambda: zoo.mobilenet_like(),
    # The forms exporters produce (same outputs as the base model).
    "resnet_projection_constants": lambda: zoo.weights_as_constants(zoo.resnet_projection()),
    "resnet_projection_constantofshape": lambda: zoo.bias_from_constantofshape(zoo.resnet_projection()),
    "resnet_projection_sum": lambda: zoo.with_sum(zoo.resnet_projection()),
    "resnet_projection_dynamic": lambda: zoo.with_dynamic_batch(zoo.resnet_projection()),
    "se_net_constantofshape": lambda: zoo.bias_from_constantofshape(zoo.se_net()),
    "mobilenet_like_dynamic": lambda: zoo.with_dynamic_batch(zoo.mobilenet_like()),
    "mobilenet_like_opset9": lambda: zoo.mobilenet_like(opset=9),
    "resnet56_opset9": lambda: zoo.resnet56_cifar(opset=9),
    "densenet_like_sum_constants": lambda: zoo.weights_as_constants(zoo.with_sum(zoo.densenet_like())),
}

# Variant name -> the base model whose outputs it must reproduce.
VARIANT_OF: dict[str, str] = {
    "resnet_projection_constants": "resnet_projection",
    "resnet_projection_constantofshape": "resnet_projection",
    "resnet_projection_sum": "resnet_projection",
    "resnet_projection_dynamic": "resnet_projection",
    "se_net_constantofshape": "se_net",
    "mobilenet_like_dynamic": "mobilenet_like",
    "mobilenet_like_opset9": "mobilenet_like",
    "resnet56_opset9": "resnet56_cifar",
    "densenet_like_sum_constants": "densenet_like",
}

# Small, fast models for tests that loop over "every architecture".
SMALL = [
    "resnet56_pruned",
    "resnet_projection",
    "densenet_like",
    "se_net",
    "inception_like",
    "mobilenet_like",
]


def yolo_detect_small() -> onnx.ModelProto:
    """A narrow YOLOv8-style detector with ultralytics' Detect head (3 classes, 64², batch 1),
    as torch exports it (needs torch; deterministic from its seed on one torch version)."""
    from deployopt.zoo.yolo import export_yolo_like

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "yolo.onnx"
        export_yolo_like(path, widths=(4, 8, 16, 24, 32), size=64, batch=1, head="detect", nc=3)
        return onnx.load(path)


# Float nets whose INT8 QDQ twins, quantized by NVIDIA Model Optimizer, are recorded in tests/data
# (tests/data/make_modelopt_fixtures.py writes them; tests/test_qdq_modelopt.py checks them).
MODELOPT_FLOAT_TWINS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet56": lambda: zoo.resnet56_cifar(
        inner_widths=[4] * 9 + [6] * 9 + [12] * 9, stage_widths=(8, 16, 24)
    ),
    "mobilenet_like": MODELS["mobilenet_like"],
    "densenet_like": MODELS["densenet_like"],
    "se_net": MODELS["se_net"],
    "inception_like": MODELS["inception_like"],
    "yolo_detect": yolo_detect_small,  # C2f Splits, SiLU, SPPF, Resize, Concats, the Detect head
}


def conv_16x3x3x3() -> onnx.ModelProto:
    """One Conv whose 16×3×3×3 weights (1.7 kB) are over save_model's 1 kB external-data threshold."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((16, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
