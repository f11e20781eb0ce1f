"""Record a real profiler trace of two convs for the tests of kernel attribution (run on a GPU).

    python3 benchmarks/record_conv_trace.py --out tests/data/h200_conv_trace_heuristic.json

The convs run with cudnn.benchmark off (cuDNN's heuristics pick the kernel): a 1×1 fp16 conv,
which cuDNN runs through cuBLAS with a driver-API launch, and a 3×3 fp16 conv (runtime launch).
The trace is trimmed to what attribution reads (ranges, launches, kernels, device properties) so
it stays small enough to commit; the kernels attributed to each conv are printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deployopt.backends import cuda_conv
from deployopt.fileio import write_json
from deployopt.layers import ConvShape

SHAPES = [
    ConvShape(8, 256, 14, 14, 256, 1, 1, (1, 1), (0, 0)),  # sweep d, K = 256
    ConvShape(8, 128, 28, 28, 128, 3, 3, (1, 1), (1, 1)),  # sweep a, K = 128
]
CPU_SIDE = ("user_annotation", "cuda_runtime", "cuda_driver")  # ranges and launch calls


def trim(trace: dict) -> dict:
    events = trace["traceEvents"]
    pass_ev = next(
        e for e in events if e.get("name") == cuda_conv.TRACE_PASS and e.get("cat") == "user_annotation"
    )
    lo, hi = pass_ev["ts"], pass_ev["ts"] + pass_ev["dur"]
    cpu = [e for e in events if e.get("cat") in CPU_SIDE and lo <= e["ts"] <= hi]
    corr = {e["args"]["correlation"] for e in cpu if "correlation" in e.get("args", {})}
    gpu = [
        e
        for e in events
        if (e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in corr)
        or (e.get("cat") == "gpu_user_annotation" and e.get("name", "").startswith("deployopt_"))
    ]
    return {"deviceProperties": trace.get("deviceProperties", []), "traceEvents": cpu + gpu}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch

    torch.backends.cudnn.benchmark = False
    trace = trim(cuda_conv.record_trace(SHAPES, "fp16"))
    write_json(args.out, trace)
    names = [cuda_conv.TRACE_RANGE.format(i) for i in range(len(SHAPES))]
    for shape, kernels in zip(SHAPES, cuda_conv.kernels_by_range(trace, names)):
        print(shape, [(k["name"][:90], k["grid"]) for k in kernels])
    launches = sorted(
        {e["name"] for e in trace["traceEvents"] if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    )
    print("launch calls:", launches)


if __name__ == "__main__":
    main()
