"""The paper's benchmark networks with CIFAR shapes: VGG16 and ResNet56, any widths.

Widths are arguments so the same builder gives the unpruned network, an irregularly pruned one
(`pruning.random_prune`) and a rounded one; weights are random (He init, seeded), which is all a
latency benchmark or an exactness test of channel surgery needs.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from deployopt.zoo.builder import DEFAULT_OPSET, GraphBuilder

VGG16_WIDTHS: tuple[int, ...] = (64, 64, 128, 128, 256, 256, 256, 512, 512, 512, 512, 512, 512)
# MaxPool 2×2 after these convs (1-based), taking 32×32 down to 1×1.
VGG16_POOL_AFTER: tuple[int, ...] = (2, 4, 7, 10, 13)

RESNET56_STAGE_WIDTHS: tuple[int, int, int] = (16, 32, 64)
RESNET56_BLOCKS_PER_STAGE = 9
RESNET56_INNER_WIDTHS: tuple[int, ...] = tuple(w for w in RESNET56_STAGE_WIDTHS for _ in range(9))


def _check_widths(widths: Sequence[int], expected_len: int, what: str) -> list[int]:
    widths = [int(w) for w in widths]
    if len(widths) != expected_len:
        raise ValueError(f"{what}: expected {expected_len} widths, got {len(widths)}")
    if any(w < 1 for w in widths):
        raise ValueError(f"{what}: widths must be >= 1, got {widths}")
    return widths


def vgg16_cifar(
    widths: Sequence[int] | None = None,
    batch: int = 1,
    seed: int = 0,
    num_classes: int = 10,
    opset: int = DEFAULT_OPSET,
) -> onnx.ModelProto:
    """VGG16 for 32×32 inputs: 13 × (3×3 Conv → BN → Relu), 5 MaxPools, Flatten, Gemm(last → classes).

    Node names: `features.<i>.conv|bn|relu` (i = 0..12), `features.pool<j>`, `classifier.fc`.
    """
    widths = _check_widths(VGG16_WIDTHS if widths is None else widths, 13, "vgg16_cifar")
    b = GraphBuilder(seed=seed, opset=opset, batch=batch, image_size=32)
    x = b.input_name
    for i, w in enumerate(widths):
        x = b.conv_bn(x, w, 3, name=f"features.{i}")
        if i + 1 in VGG16_POOL_AFTER:
            x = b.maxpool(x, 2, name=f"features.pool{VGG16_POOL_AFTER.index(i + 1)}")
    x = b.classifier(x, num_classes, pool=False)
    return b.build(x, graph_name="vgg16_cifar")


def resnet56_cifar(
    inner_widths: Sequence[int] | None = None,
    batch: int = 1,
    seed: int = 0,
    num_classes: int = 10,
    opset: int = DEFAULT_OPSET,
    stage_widths: Sequence[int] = RESNET56_STAGE_WIDTHS,
) -> onnx.ModelProto:
    """ResNet56 for CIFAR: stem 3→16, 3 stages × 9 BasicBlocks, GAP, Flatten, Gemm(64 → classes).

    `inner_widths` (27) are the outputs of each block's first conv, the only widths the paper
    prunes. The first block of stages 2 and 3 has stride 2 and a 1×1 Conv+BN projection shortcut,
    so each stage's width is its own coupled group (stage 1 is coupled to the stem by identity
    shortcuts). The second BN of each block has gamma scaled by 0.5 so 27 residual additions
    keep the logits in a sensible range with random weights.
    Node names: `stem`, `layer<s>.<b>.conv1|conv2|downsample`, `layer<s>.<b>.add|relu`, `classifier.fc`.
    """
    inner = _check_widths(
        RESNET56_INNER_WIDTHS if inner_widths is None else inner_widths, 27, "resnet56_cifar"
    )
    stage_widths = _check_widths(stage_widths, 3, "resnet56_cifar stage_widths")
    b = GraphBuilder(seed=seed, opset=opset, batch=batch, image_size=32)
    return basic_block_resnet(
        b, stage_widths, RESNET56_BLOCKS_PER_STAGE, inner, num_classes, graph_name="resnet56_cifar"
    )


def basic_block_resnet(
    b: GraphBuilder,
    stage_widths: Sequence[int],
    blocks_per_stage: int,
    inner: Sequence[int],
    num_classes: int,
    *,
    graph_name: str,
) -> onnx.ModelProto:
    """Stem conv, stages of BasicBlocks, classifier, on `b`'s input: the one ResNet that both
    `resnet56_cifar` and `zoo.graphs.resnet_projection` build (other depths, sizes), so both keep
    the same node names. The first block of every stage after the first has stride 2; `inner`
    holds one width per block."""
    x = b.conv_bn(b.input_name, stage_widths[0], 3, name="stem")
    k = 0
    for s, width in enumerate(stage_widths):
        for blk in range(blocks_per_stage):
            stride = 2 if (s > 0 and blk == 0) else 1
            x = basic_block(b, x, inner[k], width, stride=stride, name=f"layer{s + 1}.{blk}")
            k += 1
    x = b.classifier(x, num_classes)
    return b.build(x, graph_name=graph_name)


def basic_block(b: GraphBuilder, x: str, inner: int, out: int, *, stride: int, name: str) -> str:
    """ResNet BasicBlock: conv3×3(inner)→BN→Relu→conv3×3(out)→BN, + shortcut, Relu.

    A 1×1 Conv+BN projection replaces the identity when the stride or the width changes.
    """
    y = b.conv_bn(x, inner, 3, stride=stride, name=f"{name}.conv1")
    y = b.conv_bn(y, out, 3, act=None, name=f"{name}.conv2", gamma_scale=0.5)
    return residual_join(b, x, y, stride=stride, name=name)


def residual_join(b: GraphBuilder, x: str, y: str, *, stride: int, name: str) -> str:
    """Relu(y + shortcut(x)): how a residual block of `x` ends once its branch `y` is built, shared
    by the BasicBlock and zoo.graphs.se_net's gated block. The shortcut is the identity, or a 1×1
    Conv+BN projection when the stride or the width changes."""
    out = b.channels[y]
    shortcut = x
    if stride != 1 or b.channels[x] != out:
        shortcut = b.conv_bn(x, out, 1, stride=stride, act=None, name=f"{name}.downsample")
    y = b.add(y, shortcut, name=f"{name}.add")
    return b.relu(y, name=f"{name}.relu")
