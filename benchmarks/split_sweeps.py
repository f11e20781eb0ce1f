"""Split the combined sweep files from staircase_sweeps.py into one JSON per sweep.

    python3 benchmarks/split_sweeps.py benchmarks/raw/sweeps_*.json --out benchmarks/staircases
Each output: {"gpu","sms","dtype","torch","cudnn","allow_tf32","method","shape","points"}, named
<gpu>_<shape>_<dtype>_<sms>sm.json, <gpu> from the GPU's name ("NVIDIA H100 80GB HBM3" → h100) unless
--prefix gives it. Into benchmarks/staircases*/ they are committed compressed (`gzip -n -9 *.json`
there: benchmarks/results/README.md); the readers take both kinds.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def gpu_prefix(name: str) -> str:
    """The short GPU name the sweep files start with: the first model number in the name (H100, A100,
    T4, P6000), lower-case; the whole name, slugged, when there is none."""
    m = re.search(r"\b([A-Za-z]{1,2}\d{1,4})\b", name.removeprefix("NVIDIA "))
    return m.group(1).lower() if m else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--prefix", help="file-name prefix (default: from the GPU's name)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.files:
        doc = json.loads(Path(name).read_text())
        suffix = "_repeat" if "repeat" in Path(name).stem else ""
        prefix = args.prefix or gpu_prefix(doc["gpu"])
        for sweep in doc["sweeps"]:
            keys = (
                "gpu",
                "sms",
                "torch",
                "cudnn",
                "allow_tf32",
                "cudnn_benchmark",
                "cudnn_benchmark_limit",
                "method",
                "retime",
            )
            record = {k: doc[k] for k in keys if k in doc}
            record.update(dtype=sweep["dtype"], shape=sweep["shape"])
            if "clock_slowdown_us" in sweep:  # recorded by staircase_sweeps.py since 2026-12-05
                record["clock_slowdown_us"] = sweep["clock_slowdown_us"]
            record["points"] = sweep["points"]
            path = out / f"{prefix}_{sweep['id']}{suffix}.json"
            # compact: the records are data, and the repository travels to the GPU under a size limit
            path.write_text(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")
            print(path)


if __name__ == "__main__":
    main()
