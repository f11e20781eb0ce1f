"""Every conv of a torchvision network timed alone on the GPU, the way the staircase sweeps time
one conv (cuda_conv.time_convs: cudnn.benchmark, channels_last, CUDA-graph replays): a per-layer
check of the wave model on whole networks no fit has seen. Run on the GPU machine:

    python3 benchmarks/network_convs.py --sms 8 --models efficientnet_b0,mobilenet_v3_large \\
        --batches 1,8 --out convs_sm8.json
Needs torch and torchvision (untrained networks: only the layer shapes matter). Scored on the CPU
by `python benchmarks/eval_depthwise.py` (the section "networks").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deployopt.backends import cuda_conv
from deployopt.fileio import write_json
from deployopt.layers import ConvShape


def conv_shapes(model_name: str, batch: int) -> list[tuple[str, ConvShape]]:
    """(module name, ConvShape) of every Conv2d, in forward order, read by forward hooks on CPU."""
    import torch
    import torchvision

    net = getattr(torchvision.models, model_name)(weights=None).eval()
    found: list[tuple[str, ConvShape]] = []

    def hook(name: str):
        def record(mod: torch.nn.Conv2d, args: tuple, _out: torch.Tensor) -> None:
            n, c, h, w = args[0].shape
            found.append((name, ConvShape(n, c, h, w, mod.out_channels, *mod.kernel_size, mod.stride,
                                          mod.padding, mod.dilation, mod.groups)))  # fmt: skip

        return record

    for name, mod in net.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            mod.register_forward_hook(hook(name))
    with torch.no_grad():
        net(torch.zeros(batch, 3, 224, 224))
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=0, help="0 = the whole GPU")
    ap.add_argument("--models", default="efficientnet_b0,mobilenet_v3_large")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.sms:
        cuda_conv.set_sm_limit(args.sms)
    import torch

    props = torch.cuda.get_device_properties(0)
    doc = {"gpu": props.name, "sms": args.sms or props.multi_processor_count, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "dtype": args.dtype, "networks": []}  # fmt: skip
    for model in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            t0 = time.time()
            layers = conv_shapes(model, batch)
            unique = sorted({s for _, s in layers}, key=lambda s: s.signature())
            timed = dict(zip(unique, cuda_conv.time_convs(unique, args.dtype, trace=True)))
            doc["networks"].append({
                "model": model, "batch": batch,
                "convs": [{"name": n, "shape": s.to_json(), "median_us": timed[s]["median_us"],
                           "iqr_us": timed[s]["iqr_us"], "kernels": timed[s]["kernels"]} for n, s in layers],
            })  # fmt: skip
            write_json(args.out, doc)
            took = time.time() - t0
            print(f"{model} b{batch}: {len(layers)} convs ({len(unique)} shapes) {took:.1f}s", flush=True)


if __name__ == "__main__":
    main()
