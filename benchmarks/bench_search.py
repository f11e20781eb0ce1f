"""How long `optimize` takes with the model backend (no device) on deep, densely coupled nets,
where the search over the per-layer tables is the work: a DenseNet's every layer reads the
concatenation of all the block's earlier layers, so one conv's table spans many groups and the
exact solver's elimination tables grow with the block.

    python benchmarks/bench_search.py [--runs 3] [--onnx NAME=PATH ...] [--json out.json]

Models: the zoo's `densenet_like` with 4 blocks of 25 layers (100 dense layers, a DenseNet-201's
depth without its 1×1 bottlenecks), the zoo's pruned ResNet56, and any ONNX file named with
--onnx (e.g. torchvision's densenet201, exported with torch). Each run is a whole
`deployopt.optimize.optimize` call (load, analysis, candidates, tables, solver, refinement,
fidelity check, report; no plots), lossless mode, target orin-nano-8gb; median and spread of the
wall-clock seconds over --runs runs, on this machine's CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deployopt import zoo
from deployopt.optimize import OptimizeConfig, optimize
from deployopt.zoo.pruning import random_prune


def _time_one(path: Path, runs: int) -> dict[str, Any]:
    seconds, groups = [], 0
    for i in range(runs):
        with tempfile.TemporaryDirectory() as out:
            cfg = OptimizeConfig(
                model_path=path,
                target="orin-nano-8gb",
                backend="model",
                outdir=Path(out) / f"run{i}",
                plots=False,
                cache_root=Path(out) / "cache",
            )
            start = time.perf_counter()
            result = optimize(cfg)
            seconds.append(time.perf_counter() - start)
            groups = len(result.original)
    return {
        "free_groups": groups,
        "median_s": round(statistics.median(seconds), 2),
        "min_s": round(min(seconds), 2),
        "max_s": round(max(seconds), 2),
        "runs": runs,
        "seconds": [round(s, 2) for s in seconds],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--onnx", action="append", default=[], help="NAME=PATH of another model to time")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "densenet_like_4x25": zoo.densenet_like(blocks=4, layers_per_block=25),
            "resnet56_pruned": zoo.resnet56_cifar(random_prune(zoo.RESNET56_INNER_WIDTHS, seed=0)),
        }
        paths = {}
        for name, model in models.items():
            paths[name] = Path(tmp) / f"{name}.onnx"
            onnx.save(model, paths[name])
        for spec in args.onnx:
            name, _, path = spec.partition("=")
            paths[name] = Path(path)
        for name, path in paths.items():
            results[name] = _time_one(path, args.runs)
            r = results[name]
            spread = f"min {r['min_s']:.2f}, max {r['max_s']:.2f}, {args.runs} runs"
            line = f"{name:<24} {r['free_groups']:4d} groups  median {r['median_s']:7.2f} s  ({spread})"
            print(line, flush=True)
    record = {
        "what": "wall-clock seconds of one deployopt optimize call, model backend, lossless, orin-nano-8gb",
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "results": results,
    }
    if args.json:
        args.json.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
