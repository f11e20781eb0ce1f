"""Split the combined sweep files from staircase_sweeps.py into one JSON per sweep.

    python3 benchmarks/split_sweeps.py benchmarks/raw/sweeps_*.json --out benchmarks/staircases
Each output: {"gpu","sms","dtype","torch","cudnn","allow_tf32","method","shape","points"}.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.files:
        doc = json.loads(Path(name).read_text())
        suffix = "_repeat" if "repeat" in Path(name).stem else ""
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
            )
            record = {k: doc[k] for k in keys if k in doc}
            record.update(dtype=sweep["dtype"], shape=sweep["shape"], points=sweep["points"])
            path = out / f"h200_{sweep['id']}{suffix}.json"
            # compact: the records are data, and the repository travels to the GPU under a size limit
            path.write_text(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")
            print(path)


if __name__ == "__main__":
    main()
