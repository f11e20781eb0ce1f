"""How fast a GPU's SM clock drops once a timed loop ends, against how long nvidia-smi takes to start.

The torch backend reads `nvidia-smi -q -d CLOCK,PERFORMANCE` right after its timed loop and
records that SM clock as the one the loop ran at (deployopt/clocks.py). That is only true if the
clock is still the busy one when nvidia-smi gets to read it. This script measures both sides on
the GPU it runs on (no deployopt code involved, so it says nothing of the backend's own plumbing;
`deployopt bench --json` is run beside it for that):

- busy: a matmul loop keeps the GPU at work for --busy seconds;
- then, with the GPU idle, nvidia-smi is started again and again for --watch seconds and each
  answer's SM clock is recorded with the time since the loop ended (start and end of the call).

Writes JSON: the nvidia-smi start-to-answer times, and every (time after the loop, SM clock) pair.
Run on the device machine: `python3 benchmarks/clock_after_loop_gpu.py --out $OUT/clock_after_loop.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from pathlib import Path


def read_sm_clock(exe: str) -> tuple[float, float, float | None]:
    """(started, ended, SM clock MHz) of one `nvidia-smi --query-gpu=clocks.sm` call."""
    t0 = time.perf_counter()
    out = subprocess.run(
        [exe, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    t1 = time.perf_counter()
    try:
        mhz: float | None = float(out.splitlines()[0])
    except (ValueError, IndexError):
        mhz = None
    return t0, t1, mhz


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--busy", type=float, default=5.0, help="seconds of matmuls before each watch")
    ap.add_argument("--watch", type=float, default=3.0, help="seconds of nvidia-smi reads after it")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch

    exe = shutil.which("nvidia-smi")
    if exe is None or not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU and nvidia-smi")
    # The full `-q -d CLOCK,PERFORMANCE` report is what the backend runs; time it too.
    full = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([exe, "-q", "-d", "CLOCK,PERFORMANCE"], capture_output=True, check=False)
        full.append(time.perf_counter() - t0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    repeats = []
    for _ in range(args.repeats):
        _, _, idle = read_sm_clock(exe)
        end = time.perf_counter() + args.busy
        while time.perf_counter() < end:
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
        loop_end = time.perf_counter()
        reads = []
        while time.perf_counter() - loop_end < args.watch:
            t0, t1, mhz = read_sm_clock(exe)
            reads.append(
                {"start_s": round(t0 - loop_end, 4), "end_s": round(t1 - loop_end, 4), "sm_mhz": mhz}
            )
        repeats.append({"idle_before_mhz": idle, "reads_after_loop": reads})
    # One read while the GPU is busy, for the busy clock itself.
    torch.cuda.synchronize()
    for _ in range(2000):  # about 3 s of queued work: nvidia-smi answers while it runs
        a @ b
    _, _, busy = read_sm_clock(exe)
    torch.cuda.synchronize()
    result = {
        "gpu": torch.cuda.get_device_name(0),
        "driver_and_smi": subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip(),
        "nvidia_smi_q_clock_performance_s": [round(v, 4) for v in full],
        "busy_sm_mhz": busy,
        "busy_seconds": args.busy,
        "repeats": repeats,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for i, rep in enumerate(repeats):
        first = rep["reads_after_loop"][:6]
        print(
            f"repeat {i}: idle {rep['idle_before_mhz']} MHz; after the loop:",
            ", ".join(f"{r['end_s']:.2f}s {r['sm_mhz']}" for r in first),
            "…",
            f"last {rep['reads_after_loop'][-1]['sm_mhz']}",
        )
    print(
        "busy",
        busy,
        "MHz; nvidia-smi -q -d CLOCK,PERFORMANCE took",
        result["nvidia_smi_q_clock_performance_s"],
        "s",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
