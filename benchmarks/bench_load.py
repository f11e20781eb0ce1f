"""How long `load_model` takes on a deep generated graph (~9,000 nodes) and on examples/*.onnx, and
how many times it runs onnx's shape inference; optionally against another checkout, interleaved.

    python benchmarks/bench_load.py [--runs 5] [--rounds 3] [--baseline /tmp/old_ld] [--json out.json]

The deep graph is the zoo's `resnet_projection` at 320 BasicBlocks a stage, narrow (16, 16, 32, 32
channels: 8,972 nodes, 62 MB), so that what is timed is the per-node work of loading (its checks,
copies and inference passes), not reading weights. Each round runs one worker process per code
(`--baseline`'s checkout, then this one's), each timing `--runs` loads after a warm-up: on a machine
shared with other work, interleaving keeps both codes under the same load, and the CPU time each
load takes (`time.process_time`, the loading is one thread) moves less with the load than its wall
time does. Medians and IQRs over all rounds' runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEEP = "resnet_projection_320x4_narrow"


def _deep_model(work: Path) -> Path:
    """The ~9,000-node chain, built once into `work`."""
    path = work / f"{DEEP}.onnx"
    if not path.exists():
        import onnx

        from deployopt import zoo

        model = zoo.resnet_projection(stage_widths=(16, 16, 32, 32), blocks_per_stage=320)
        work.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(path))
    return path


def _worker(paths: list[Path], runs: int) -> dict[str, Any]:
    """Times `load_model` on each path in this process (the code on sys.path); counts
    infer_shapes calls in one load."""
    import onnx.shape_inference

    import deployopt
    from deployopt.model import load_model

    real = onnx.shape_inference.infer_shapes
    calls: list[dict[str, Any]] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return real(*args, **kwargs)

    out: dict[str, Any] = {"deployopt": str(Path(deployopt.__file__).parent), "models": {}}
    for path in paths:
        load_model(path)  # warm-up
        onnx.shape_inference.infer_shapes = counting
        try:
            load_model(path)
        finally:
            onnx.shape_inference.infer_shapes = real
        samples, cpu = [], []
        for _ in range(runs):
            t0, c0 = time.perf_counter(), time.process_time()
            load_model(path)
            samples.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        out["models"][path.stem] = {
            "seconds": samples,
            "cpu_seconds": cpu,
            "infer_shapes_calls": [sorted(c) for c in calls],
        }
        calls.clear()
    return out


def _stats(samples: list[float]) -> dict[str, Any]:
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return {
        "median_s": round(statistics.median(samples), 4),
        "iqr_s": round(q[2] - q[0], 4),
        "min_s": round(min(samples), 4),
        "runs": len(samples),
    }


def _run_worker(code: Path, paths: list[Path], runs: int) -> dict[str, Any]:
    """One worker process importing deployopt from `code` (a checkout's root)."""
    env = dict(os.environ, PYTHONPATH=str(code))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--runs", str(runs), *map(str, paths)]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd="/")
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", type=Path, help="models (default: the deep graph, examples/*.onnx)")
    ap.add_argument("--runs", type=int, default=5, help="timed loads per model per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout's root to time too")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_load"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.paths, args.runs)))
        return
    paths = args.paths or [_deep_model(args.work), *sorted((ROOT / "examples").glob("*.onnx"))]
    codes = {"current": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    samples: dict[str, dict[str, list[float]]] = {c: {} for c in codes}
    cpu: dict[str, dict[str, list[float]]] = {c: {} for c in codes}
    calls: dict[str, dict[str, Any]] = {c: {} for c in codes}
    for _ in range(args.rounds):
        for code in sorted(codes, reverse=True):  # baseline first in each round
            got = _run_worker(codes[code], paths, args.runs)
            for name, res in got["models"].items():
                samples[code].setdefault(name, []).extend(res["seconds"])
                cpu[code].setdefault(name, []).extend(res["cpu_seconds"])
                calls[code][name] = res["infer_shapes_calls"]
    results = {
        code: {
            name: {**_stats(s), "cpu": _stats(cpu[code][name]), "infer_shapes_calls": calls[code][name]}
            for name, s in by_model.items()
        }
        for code, by_model in samples.items()
    }
    for code, models in results.items():
        for name, r in models.items():
            print(
                f"{code:8s} {name:34s} median {r['median_s']:.3f} s (IQR {r['iqr_s']:.3f}, "
                f"min {r['min_s']:.3f}, n={r['runs']}; CPU median {r['cpu']['median_s']:.3f} s), "
                f"{len(r['infer_shapes_calls'])} inference passes"
            )
    if args.json:
        import onnx

        machine = {
            "cpus": os.cpu_count(),
            "cpu": platform.machine(),
            "python": platform.python_version(),
            "onnx": onnx.__version__,
            "load_average": list(os.getloadavg()),
        }
        doc = {
            "machine": machine,
            "codes": {code: str(where) for code, where in codes.items()},
            "runs": args.runs,
            "rounds": args.rounds,
            "results": results,
        }
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.replace(args.json)


if __name__ == "__main__":
    main()
