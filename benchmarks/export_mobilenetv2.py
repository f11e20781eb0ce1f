"""Export MobileNetV2 (224², opset 17) for the GPU benchmarks: real ImageNet weights, or random ones.

The device machine cannot take the weights package (the upload limit), so the MobileNetV2 GPU
records time an untrained copy exported there with a fixed seed: the same graph and widths, hence
the same latency. Usage on the device, before bench_optimize.py --onnx mobilenetv2=OUT:

    python benchmarks/export_mobilenetv2.py /tmp/m/mobilenetv2_b8.onnx --batch 8 --random-seed 0
"""

from __future__ import annotations

import argparse
from pathlib import Path

from deployopt.zoo.mobilenetv2 import export_mobilenetv2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the .onnx file to write (atomically)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument(
        "--random-seed", type=int, default=None, help="untrained weights from this torch seed (default: real)"
    )
    args = ap.parse_args()
    if args.batch < 1 or args.image_size < 32:
        ap.error("--batch must be ≥ 1 and --image-size ≥ 32")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    export_mobilenetv2(args.out, batch=args.batch, image_size=args.image_size, random_seed=args.random_seed)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
