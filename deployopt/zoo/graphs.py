"""Small generated networks, one per coupling pattern met in real CNNs.

Each is tiny (runs in milliseconds on onnxruntime CPU) but structurally real: projection
shortcuts, DenseNet concat chains with BN over the concatenation, squeeze-excitation gates,
Inception branches, MobileNetV2 inverted residuals with depthwise convs. Channel surgery that is
exact on all of them is exact on the patterns, not on one toy.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from deployopt.zoo.builder import DEFAULT_OPSET, GraphBuilder
from deployopt.zoo.cifar import basic_block_resnet, residual_join


def resnet_projection(
    stage_widths: Sequence[int] = (16, 32, 64, 128),
    blocks_per_stage: int = 2,
    batch: int = 1,
    seed: int = 0,
    image_size: int = 32,
    num_classes: int = 10,
    opset: int = DEFAULT_OPSET,
    inner_widths: Sequence[int] | None = None,
) -> onnx.ModelProto:
    """ResNet-18-like (4 stages × 2 BasicBlocks by default) with 1×1 projection shortcuts.

    Every stage after the first starts with stride 2 and a projection; `inner_widths` (one per
    block) default to the stage width.
    """
    nblocks = len(stage_widths) * blocks_per_stage
    inner = (
        list(inner_widths)
        if inner_widths is not None
        else [w for w in stage_widths for _ in range(blocks_per_stage)]
    )
    if len(inner) != nblocks:
        raise ValueError(f"resnet_projection: expected {nblocks} inner widths, got {len(inner)}")
    b = GraphBuilder(seed=seed, opset=opset, batch=batch, image_size=image_size)
    return basic_block_resnet(
        b, stage_widths, blocks_per_stage, inner, num_classes, graph_name="resnet_projection"
    )


def densenet_like(
    growth: int | Sequence[int] = 8,
    layers_per_block: int = 4,
    blocks: int = 2,
    stem_width: int = 16,
    batch: int = 1,
    seed: int = 0,
    image_size: int = 32,
    num_classes: int = 10,
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """DenseNet-style: each layer is BN → Relu → Conv3×3(growth) on the concat of all earlier features.

    The BatchNormalization runs over a Concat, so its channels belong to several producers at
    offsets: exactly what channel surgery must handle for real DenseNets. Between blocks a
    transition BN → Relu → Conv1×1 (halving) → AveragePool 2×2. `growth` is one int or one width
    per layer (blocks × layers_per_block).
    """
    n_layers = blocks * layers_per_block
    growths = [int(growth)] * n_layers if isinstance(growth, int) else [int(g) for g in growth]
    if len(growths) != n_layers:
        raise ValueError(f"densenet_like: expected {n_layers} growth widths, got {len(growths)}")
    b = GraphBuilder(seed=seed, opset=opset, batch=batch, image_size=image_size)
    x = b.conv(b.input_name, stem_width, 3, name="stem.conv")
    k = 0
    for blk in range(blocks):
        features = [x]
        for layer in range(layers_per_block):
            name = f"block{blk + 1}.layer{layer + 1}"
            cat = features[0] if len(features) == 1 else b.concat(features, name=f"{name}.concat")
            y = b.relu(b.bn(cat, name=f"{name}.bn"), name=f"{name}.relu")
            features.append(b.conv(y, growths[k], 3, name=f"{name}.conv"))
            k += 1
        x = b.concat(features, name=f"block{blk + 1}.concat")
        if blk < blocks - 1:
            name = f"transition{blk + 1}"
            y = b.relu(b.bn(x, name=f"{name}.bn"), name=f"{name}.relu")
            y = b.conv(y, max(1, b.channels[y] // 2), 1, name=f"{name}.conv")
            x = b.avgpool(y, 2, name=f"{name}.pool")
    x = b.relu(b.bn(x, name="final.bn"), name="final.relu")
    x = b.classifier(x, num_classes)
    return b.build(x, graph_name="densenet_like")


def se_net(
    stage_widths: Sequence[int] = (16, 32, 64),
    blocks_per_stage: int = 1,
    reduction: int = 4,
    batch: int = 1,
    seed: int = 0,
    image_size: int = 32,
    num_classes: int = 10,
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """ResNet blocks with squeeze-excitation: GAP → 1×1 conv → Relu → 1×1 conv → Sigmoid → Mul(trunk).

    The gate's second conv must keep the trunk's width (coupled through the Mul); its squeeze
    width (trunk / reduction) is free.
    """
    b = GraphBuilder(seed=seed, opset=opset, batch=batch, image_size=image_size)
    x = b.conv_bn(b.input_name, stage_widths[0], 3, name="stem")
    for s, width in enumerate(stage_widths):
        for blk in range(blocks_per_stage):
            name = f"layer{s + 1}.{blk}"
            stride = 2 if (s > 0 and blk == 0) else 1
            y = b.conv_bn(x, width, 3, stride=stride, name=f"{name}.conv1")
            y = b.conv_bn(y, width, 3, act=None, name=f"{name}.conv2", gamma_scale=0.5)
            g = b.gap(y, name=f"{name}.se.gap")
            g = b.conv(g, max(1, width // reduction), 1, bias=True, name=f"{name}.se.fc1")
            g = b.relu(g, name=f"{name}.se.relu")
            g = b.conv(g, width, 1, bias=True, name=f"{name}.se.fc2")
            g = b.sigmoid(g, name=f"{name}.se.sigmoid")
            y = b.mul(y, g, name=f"{name}.se.mul")
            x = residual_join(b, x, y, stride=stride, name=name)
    x = b.classifier(x, num_classes)
    return b.build(x, graph_name="se_net")


def inception_like(
    stem_width: int = 32,
    branch_widths: Sequence[int] = (16, 24, 32, 8, 16, 8),
    batch: int = 1,
    seed: int = 0,
    image_size: int = 32,
    num_classes: int = 10,
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """Two Inception modules: 1×1 | 1×1→3×3 | 1×1→5×5 | MaxPool3×3→1×1 branches, concatenated.

    `branch_widths` = (b1, b2_reduce, b2, b3_reduce, b3, pool_proj), used for both modules; a
    MaxPool 2×2 sits between the modules.
    """
    b1, b2r, b2, b3r, b3, bp = (int(w) for w in branch_widths)
    b = GraphBuilder(seed=seed, opset=opset, batch=batch, image_size=image_size)
    x = b.conv_bn(b.input_name, stem_width, 3, name="stem")
    for m in range(2):
        name = f"inception{m + 1}"
        y1 = b.conv_bn(x, b1, 1, name=f"{name}.branch1")
        y2 = b.conv_bn(b.conv_bn(x, b2r, 1, name=f"{name}.branch2.reduce"), b2, 3, name=f"{name}.branch2")
        y3 = b.conv(b.conv_bn(x, b3r, 1, name=f"{name}.branch3.reduce"), b3, 5, name=f"{name}.branch3.conv")
        y3 = b.relu(b.bn(y3, name=f"{name}.branch3.bn"), name=f"{name}.branch3.relu")
        p = b.maxpool(x, 3, stride=1, pad=1, name=f"{name}.branch4.pool")
        y4 = b.conv_bn(p, bp, 1, name=f"{name}.branch4")
        x = b.concat([y1, y2, y3, y4], name=f"{name}.concat")
        if m == 0:
            x = b.maxpool(x, 2, name="pool1")
    x = b.classifier(x, num_classes)
    return b.build(x, graph_name="inception_like")


# (expansion t, output channels c, repeats n, first stride s), MobileNetV2's table scaled down.
MOBILENET_LIKE_SETTINGS: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 2, 2),
)


def mobilenet_like(
    stem_width: int = 16,
    settings: Sequence[tuple[int, int, int, int]] = MOBILENET_LIKE_SETTINGS,
    last_width: int = 64,
    batch: int = 1,
    seed: int = 0,
    image_size: int = 32,
    num_classes: int = 10,
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """MobileNetV2-style inverted residuals: 1×1 expand → Clip(0,6), depthwise 3×3 → Clip, 1×1 project.

    A residual Add joins blocks with stride 1 and equal widths; the depthwise conv passes its
    input's channel count through (groups == channels), so expand and depthwise are coupled.
    """
    b = GraphBuilder(seed=seed, opset=opset, batch=batch, image_size=image_size)
    x = b.conv_bn(b.input_name, stem_width, 3, act="relu6", name="features.0")
    idx = 1
    for t, c, n, s in settings:
        for i in range(n):
            stride = s if i == 0 else 1
            name = f"features.{idx}"
            cin = b.channels[x]
            hidden = cin * t
            y = x
            if t != 1:
                y = b.conv_bn(y, hidden, 1, act="relu6", name=f"{name}.expand")
            y = b.conv_bn(y, hidden, 3, stride=stride, groups=hidden, act="relu6", name=f"{name}.dw")
            y = b.conv_bn(y, c, 1, act=None, name=f"{name}.project", gamma_scale=0.5)
            if stride == 1 and cin == c:
                y = b.add(x, y, name=f"{name}.add")
            x = y
            idx += 1
    x = b.conv_bn(x, last_width, 1, act="relu6", name=f"features.{idx}")
    x = b.classifier(x, num_classes)
    return b.build(x, graph_name="mobilenet_like")
