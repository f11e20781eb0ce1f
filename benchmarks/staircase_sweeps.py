"""Measure per-layer staircases on a real GPU: one conv, output channels swept (issue 3 data).

Run on the GPU machine, one process per SM setting (a green context is one per process):
    python3 benchmarks/staircase_sweeps.py --sms 0 --out sweeps_full.json
    python3 benchmarks/staircase_sweeps.py --sms 8 --out sweeps_sm8.json
    python3 benchmarks/staircase_sweeps.py --sms 8 --heuristic --out heur_sm8.json  # cudnn.benchmark off
Results are rewritten after every sweep, so a run cut short keeps what it finished.
`benchmarks/split_sweeps.py` turns the combined file into one JSON per sweep under
benchmarks/staircases/.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deployopt.backends import cuda_conv
from deployopt.clocks import read_clocks, slowdown_between
from deployopt.fileio import write_json
from deployopt.layers import ConvShape

# (n, c, h, w, kernel, stride): CIFAR- and ImageNet-like layers, 1×1 and 3×3, stride 1 and 2.
SHAPES = {
    "a": (8, 128, 28, 28, 3, 1),
    "b": (1, 256, 56, 56, 3, 1),
    "c": (16, 64, 32, 32, 3, 1),
    "d": (8, 256, 14, 14, 1, 1),
    "e": (32, 128, 16, 16, 3, 2),
    "f": (8, 512, 7, 7, 3, 1),
    "g": (16, 256, 28, 28, 1, 1),
    "h": (1, 64, 112, 112, 3, 2),
    # second round (more shapes for the fp16 kernel-choice rules; M·depth from 0.03 M to 11 M)
    "i": (1, 128, 28, 28, 3, 1),
    "j": (1, 256, 14, 14, 3, 1),
    "k": (4, 64, 56, 56, 1, 1),
    "l": (32, 32, 32, 32, 3, 1),
    "m": (8, 256, 28, 28, 1, 2),
    "n": (4, 512, 14, 14, 1, 1),
    "o": (8, 96, 56, 56, 3, 2),
    "p": (2, 384, 14, 14, 3, 1),
    "q": (64, 64, 8, 8, 3, 1),
    "r": (16, 128, 14, 14, 1, 1),
    "s": (8, 192, 28, 28, 3, 1),
    "t": (32, 64, 28, 28, 1, 1),
    "u": (4, 128, 56, 56, 3, 2),
    "v": (1, 512, 7, 7, 1, 1),
    # third round: convs big enough for several waves on the full GPU (132 SMs), never fitted on
    "w": (32, 128, 56, 56, 3, 1),
    "x": (64, 256, 28, 28, 1, 1),
    "y": (16, 256, 28, 28, 3, 1),
    "z": (128, 64, 32, 32, 3, 1),
    "aa": (64, 256, 28, 28, 3, 2),
    "ab": (32, 64, 112, 112, 1, 1),
    # fourth round: layers of networks shipped to Jetsons (ResNet-18/50, MobileNetV2, YOLO-style
    # necks), measured after the fit of 72e76e9 was shipped and scored before any refit
    "ac": (8, 64, 56, 56, 3, 1),
    "ad": (16, 128, 28, 28, 3, 2),
    "ae": (8, 512, 28, 28, 1, 1),
    "af": (32, 96, 14, 14, 1, 1),
    "ag": (4, 256, 40, 40, 3, 1),
    "ah": (16, 32, 80, 80, 3, 2),
    # fifth round (2026-12-02): more deployment layers (MobileNetV2 expand, ResNet-50 3×3 at 14×14,
    # YOLO downsample and SPP, a stride-2 stem, a detection head), measured after commit d5f5956
    # and scored with the fit shipped there before any change
    "ai": (8, 24, 56, 56, 1, 1),
    "aj": (8, 256, 14, 14, 3, 1),
    "ak": (4, 128, 40, 40, 3, 2),
    "al": (8, 32, 112, 112, 3, 2),
    "am": (8, 512, 20, 20, 1, 1),
    "an": (1, 64, 80, 80, 3, 1),
    # sixth round (2026-12-02): measured after commit f1dd72a (the fp16 family at 32) and scored
    # with the fit shipped there before any change: ResNet-50's 1×1 reduce at 56×56, a YOLO neck
    # 3×3 at 52×52, a ResNet downsample, a YOLO 1×1 at 26×26, a narrow stride-2 stage (C = 48),
    # MobileNetV2's last projection (C = 960)
    "ao": (16, 256, 56, 56, 1, 1),
    "ap": (8, 128, 52, 52, 3, 1),
    "aq": (4, 256, 28, 28, 3, 2),
    "ar": (2, 512, 26, 26, 1, 1),
    "as": (16, 48, 40, 40, 3, 2),
    "at": (8, 960, 7, 7, 1, 1),
    # seventh round (2026-12-02, small): input channels that are not multiples of 64, as in
    # EfficientNet / MobileNetV3 / YOLO-nano layers, measured after the refit of 9f1a9e1 and scored
    # with it before any change
    "au": (16, 40, 56, 56, 1, 1),
    "av": (8, 80, 28, 28, 3, 1),
    "aw": (16, 32, 104, 104, 3, 2),
    "ax": (8, 112, 14, 14, 1, 1),
    # eighth round (2026-12-02, held out): more layers people ship to Jetsons — a YOLOv8n 1×1 at
    # 80×80 (batch 1), an EfficientDet-style 3×3 on C = 160, a U-Net 3×3 at 128×128, SSD-MobileNet's
    # 1×1 at 19×19 (batch 1), a pose-net 3×3 at 64×48, a YOLO downsample on C = 192, a 1×1 on C =
    # 384, a stride-2 3×3 on a 480×640 detector's 60×80 map; measured with the fit of 9f1a9e1
    # shipped (rounds one to six) and scored with it, not fitted on
    "ay": (1, 64, 80, 80, 1, 1),
    "az": (4, 160, 32, 32, 3, 1),
    "ba": (2, 64, 128, 128, 3, 1),
    "bb": (1, 576, 19, 19, 1, 1),
    "bc": (8, 128, 64, 48, 3, 1),
    "bd": (4, 192, 20, 20, 3, 2),
    "be": (16, 384, 14, 14, 1, 1),
    "bf": (2, 128, 60, 80, 3, 2),
    # ninth round (2026-12-03, held out): batch-1 layers, as a Jetson runs them — ResNet-18's
    # layer1 3×3 at 56×56, ResNet-50's 1×1 expand at 28×28, a YOLOv8s C2f 3×3 at 40×40,
    # MobileNetV2's last 1×1 (C = 320), an SSD300 3×3 at 38×38, ResNet-18's stride-2 downsample,
    # a YOLOv8n stride-2 3×3 at 160×160 (C = 32), a detection head's 1×1 at 10×10; measured with
    # the fit of 9f1a9e1 shipped (unchanged since) and scored with it, not fitted on
    "bg": (1, 64, 56, 56, 3, 1),
    "bh": (1, 128, 28, 28, 1, 1),
    "bi": (1, 128, 40, 40, 3, 1),
    "bj": (1, 320, 7, 7, 1, 1),
    "bk": (1, 256, 38, 38, 3, 1),
    "bl": (1, 64, 56, 56, 3, 2),
    "bm": (1, 32, 160, 160, 3, 2),
    "bn": (1, 512, 10, 10, 1, 1),
    # tenth round (2026-12-03, held out, chosen after size_class was fixed and committed, to test it):
    # mostly layers the shipped fit predicts wave-bound at 8/16 SMs — YOLOv8s 3×3s at 160×160 and
    # 80×80, a YOLO 1×1 at 40×40, a batch-4 1×1 at 56×56 (C = 96), a batch-2 3×3 on C = 256 at
    # 32×32, a segmentation 3×3 at 128×256 (C = 48), a batch-2 stride-2 3×3 on C = 192 at 52×52,
    # a 3×3 at 120×160 (C = 96, a 480×640 detector at stride 4)
    "bo": (1, 64, 160, 160, 3, 1),
    "bp": (1, 128, 80, 80, 3, 1),
    "bq": (1, 256, 40, 40, 1, 1),
    "br": (4, 96, 56, 56, 1, 1),
    "bs": (2, 256, 32, 32, 3, 1),
    "bt": (1, 48, 128, 256, 3, 1),
    "bv": (2, 192, 52, 52, 3, 2),
    "bx": (1, 96, 120, 160, 3, 1),
    # eleventh round (2026-12-04, held out, a second pre-registered test of size_class with the fit
    # unchanged since round ten): a 384×640 detector's 3×3 at stride 4 (C = 128), ResNet-50's 1×1 on
    # C = 64 at batch 8, a YOLOv8m 1×1 at 80×80 (C = 256), a U-Net stride-2 3×3 at 64×64 (batch 2),
    # a YOLOv8m 3×3 at 20×20 (batch 4, C = 384), a segmentation 3×3 at 240×320 (C = 32),
    # MobileNetV2's 1×1 on C = 144 at 28×28 (batch 8), a 480×640 detector's 3×3 at stride 8 (C = 192)
    "by": (1, 128, 96, 160, 3, 1),
    "bz": (8, 64, 56, 56, 1, 1),
    "ca": (1, 256, 80, 80, 1, 1),
    "cb": (2, 128, 64, 64, 3, 2),
    "cc": (4, 384, 20, 20, 3, 1),
    "cd": (1, 32, 240, 320, 3, 1),
    "ce": (8, 144, 28, 28, 1, 1),
    "cf": (1, 192, 60, 80, 3, 1),
    # twelfth round (2026-12-05, held out, a third pre-registered test of size_class, the fit unchanged
    # since round ten): a 1×1 at 128×128 (batch 1, C = 64), a batch-2 3×3 at 80×80 (C = 96), a 3×3 on
    # C = 512 at 40×40 (batch 1), a YOLOv4-tiny-style 3×3 at 104×104 (batch 4), a 1×1 on C = 160 at
    # 48×64, a batch-8 3×3 on C = 320 at 14×14, a stride-2 3×3 on C = 256 at 64×64, MobileNetV2's
    # first expand-like 1×1 on C = 24 at 224×224 (batch 2)
    "cg": (1, 64, 128, 128, 1, 1),
    "ch": (2, 96, 80, 80, 3, 1),
    "ci": (1, 512, 40, 40, 3, 1),
    "cj": (4, 64, 104, 104, 3, 1),
    "ck": (1, 160, 48, 64, 1, 1),
    "cl": (8, 320, 14, 14, 3, 1),
    "cm": (1, 256, 64, 64, 3, 2),
    "cn": (2, 24, 224, 224, 1, 1),
    # thirteenth round (2026-12-05, held out, a fourth pre-registered test of size_class, the fit
    # unchanged since round ten): a 480×640 detector's 1×1 at stride 4 (C = 128), YOLOv3-tiny's 3×3
    # at 26×26 (batch 4, C = 256), a stride-2 3×3 on C = 64 at 160×160 (batch 2), MobileNetV2's 1×1
    # on C = 192 at 14×14 (batch 8), a 384×640 detector's 3×3 at stride 4 on C = 64, a batch-16 3×3
    # on C = 128 at 14×14, a YOLOv8s SPPF-style 1×1 on C = 384 at 20×20, a stride-2 3×3 on C = 160
    # at 40×40 (batch 2)
    "co": (1, 128, 120, 160, 1, 1),
    "cp": (4, 256, 26, 26, 3, 1),
    "cq": (2, 64, 160, 160, 3, 2),
    "cr": (8, 192, 14, 14, 1, 1),
    "cs": (1, 64, 96, 160, 3, 1),
    "ct": (16, 128, 14, 14, 3, 1),
    "cu": (1, 384, 20, 20, 1, 1),
    "cv": (2, 160, 40, 40, 3, 2),
}

# Depthwise (groups = input = output channels, swept together): the 3×3 and 5×5 depthwise layers
# of MobileNetV2/V3, EfficientNet and YOLO-nano heads, (n, h, w, kernel, stride). Measured
# 2026-12-02 to test the wave model's depthwise path, which no earlier round covered.
DEPTHWISE = {
    "dwa": (1, 112, 112, 3, 1),
    "dwb": (8, 56, 56, 3, 2),
    "dwc": (8, 28, 28, 3, 1),
    "dwd": (1, 14, 14, 3, 1),
    "dwe": (8, 14, 14, 5, 1),
    "dwf": (4, 28, 28, 5, 2),
}


def sweep_shapes(key: str, ks: list[int]) -> tuple[list[ConvShape], dict[str, int | bool]]:
    """The swept ConvShapes of one key and the JSON record of its shape (first width for c/groups)."""
    if key in DEPTHWISE:
        n, h, w, r, st = DEPTHWISE[key]
        shapes = [ConvShape(n, k, h, w, k, r, r, (st, st), (r // 2, r // 2), groups=k) for k in ks]
        c, groups = ks[0], ks[0]
    else:
        n, c, h, w, r, st = SHAPES[key]
        shapes = [ConvShape(n, c, h, w, k, r, r, (st, st), (r // 2, r // 2)) for k in ks]
        groups = 1
    record = {"n": n, "c": c, "h": h, "w": w, "r": r, "s": r, "stride": st, "pad": r // 2, "groups": groups}
    if key in DEPTHWISE:
        record["depthwise"] = True  # c = groups = out_channels at every point
    return shapes, record


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sms", type=int, default=0, help="0 = the whole GPU")
    ap.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help="keys of SHAPES, comma-separated (or one string of one-letter keys)",
    )
    ap.add_argument("--dtypes", default="fp16,fp32")
    ap.add_argument("--out-channels", default="16:512:16")
    ap.add_argument("--samples", type=int, default=7)
    ap.add_argument("--no-trace", action="store_true")
    ap.add_argument(
        "--benchmark-limit",
        type=int,
        default=None,
        help="torch.backends.cudnn.benchmark_limit (PyTorch's default: 10 engines timed; 0 = all)",
    )
    ap.add_argument(
        "--heuristic",
        action="store_true",
        help="cudnn.benchmark off: cuDNN's heuristics pick each kernel untimed (PyTorch's default)",
    )
    ap.add_argument(
        "--retime",
        type=int,
        default=cuda_conv.RETIMES,
        help="times a width over twice its neighbours' median is timed again, keeping the lowest "
        "median (cuda_conv.spikes; 0: never, as every sweep before 2026-12-05)",
    )
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    if args.sms:
        cuda_conv.set_sm_limit(args.sms)
    import torch

    if args.benchmark_limit is not None:
        torch.backends.cudnn.benchmark_limit = args.benchmark_limit
    a, b, s = (int(v) for v in args.out_channels.split(":"))
    ks = list(range(a, b + 1, s))
    props = torch.cuda.get_device_properties(0)
    doc = {
        "gpu": props.name,
        "gpu_sms": props.multi_processor_count,
        "sms": args.sms or props.multi_processor_count,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": not args.heuristic,
        "cudnn_benchmark_limit": None if args.heuristic else torch.backends.cudnn.benchmark_limit,
        "method": ("cuDNN heuristics (cudnn.benchmark off)" if args.heuristic else "cudnn.benchmark")
        + ", channels_last, CUDA-graph replay timed with CUDA events; "
        f"{args.samples} samples of ~2 ms of replays each; µs per conv"
        + (
            f"; a width over {cuda_conv.SPIKE_OVER:g}× its neighbours' median timed again up to "
            f"{args.retime} times, lowest median kept (retimed_medians_us)"
            if args.retime
            else ""
        ),
        "retime": args.retime,
        "sweeps": [],
    }
    t0 = time.time()
    known = {**SHAPES, **DEPTHWISE}
    keys = args.shapes.split(",") if "," in args.shapes or args.shapes in known else list(args.shapes)
    unknown = [k for k in keys if k not in known]
    if unknown:
        sys.exit(f"unknown shape keys {unknown}; known: {','.join(known)}")
    for key in keys:
        shapes, record = sweep_shapes(key, ks)
        for dtype in args.dtypes.split(","):
            t1 = time.time()
            before = read_clocks(0)
            res = cuda_conv.time_convs(
                shapes,
                dtype,
                samples=args.samples,
                trace=not args.no_trace,
                benchmark=not args.heuristic,
                retime=args.retime,
            )
            # how long power or heat held the clock down during the sweep ({}: checked, never; None:
            # nvidia-smi could not say): a width timed far above its own kernel's duration, with {}
            # here, lost its time to something other than the clock (the H100 rounds' 27 widths)
            slowdown = slowdown_between(before, read_clocks(0))
            points = [{"out_channels": k, **rr} for k, rr in zip(ks, res)]
            doc["sweeps"].append(
                {
                    "id": f"{key}_{dtype}_{doc['sms']}sm",
                    "dtype": dtype,
                    "shape": record,
                    "seconds": round(time.time() - t1, 2),
                    "clock_slowdown_us": slowdown,
                    "points": points,
                }
            )
            write_json(args.out, doc)  # after every sweep, whole: a run cut short keeps what it finished
            print(
                f"{key} {dtype} sms={doc['sms']}: {time.time() - t1:.1f}s "
                f"[{min(p['median_us'] for p in points):.1f}..{max(p['median_us'] for p in points):.1f} µs]",
                flush=True,
            )
    print(f"total {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
