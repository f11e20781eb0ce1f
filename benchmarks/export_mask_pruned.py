"""Export torchvision ResNets pruned the way many Jetson users prune: `torch.nn.utils.prune.ln_structured`
zeroes a fraction of a conv's filters, `prune.remove` makes it permanent, and the model is exported
with its channel counts unchanged (the zeros are still computed). The exporter folds each BatchNorm
into its conv, so a pruned channel has a zero filter and the BatchNorm's shift as its bias: after
the ReLU it is 0 for every input where that bias is ≤ 0, a constant otherwise. deployopt's lossless
mode may remove the dead ones exactly (since 2026-12-06; before, only zero-bias ones counted).

Weights are random (torchvision's init), the BatchNorms given trained-looking statistics (running
mean U(-0.5, 0.5), variance U(0.5, 2), scale U(0.5, 1.5), shift U(-0.3, 0.3); seed 0): latency
only. Pruned: each BasicBlock's conv1 (ResNet18) or each Bottleneck's conv1 and conv2 (ResNet50),
`--amount` of their filters by L1 norm. Prints, per model, how many filters were zeroed and how many
of those are dead after the ReLU (folded bias ≤ 0).

    python benchmarks/export_mask_pruned.py --out DIR [--batch 8] [--size 224] [--amount 0.3]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def export(name: str, out: Path, batch: int, size: int, amount: float) -> dict[str, int | str]:
    import torch
    import torch.nn.utils.prune as prune
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            with torch.no_grad():
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.3, 0.3)
    pairs = []  # (pruned conv, the BatchNorm after it)
    for blk in model.modules():
        if isinstance(blk, torchvision.models.resnet.BasicBlock):
            pairs.append((blk.conv1, blk.bn1))
        elif isinstance(blk, torchvision.models.resnet.Bottleneck):
            pairs += [(blk.conv1, blk.bn1), (blk.conv2, blk.bn2)]
    zeroed = dead = total = 0
    for conv, bn in pairs:
        prune.ln_structured(conv, "weight", amount=amount, n=1, dim=0)
        prune.remove(conv, "weight")
        zero = conv.weight.detach().abs().sum((1, 2, 3)) == 0
        bias = bn.bias - bn.running_mean * bn.weight / torch.sqrt(bn.running_var + bn.eps)
        zeroed += int(zero.sum())
        dead += int((zero & (bias <= 0)).sum())
        total += conv.out_channels
    path = out / f"{name}_mask{int(amount * 100)}_b{batch}.onnx"
    torch.onnx.export(
        model,
        (torch.randn(batch, 3, size, size),),
        str(path),
        dynamo=False,
        opset_version=17,
        input_names=["input"],
        output_names=["logits"],
    )
    return {"model": name, "path": str(path), "pruned_convs_channels": total, "zeroed": zeroed, "dead": dead}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--amount", type=float, default=0.3)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [export(m, args.out, args.batch, args.size, args.amount) for m in args.models.split(",")]
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
