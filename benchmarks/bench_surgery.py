"""How long `analyze` + `apply` take on a ~50-conv model (the issue asks for < 1 s on 2 CPU cores).

Times each stage separately on the zoo's ResNet56 (CIFAR, 57 convs incl. 2 projection shortcuts)
and any other zoo models named ("mobilenetv2": the real-weight export, needs torch), median and
IQR over --runs repetitions after one warm-up:

    python benchmarks/bench_surgery.py [--runs 20] [--models resnet56_pruned mobilenet_like] [--json out.json]

Stages: load (parse, shape inference, folding when needed), analyze (coupling), apply-pad (every
free group padded to the next multiple of 32 above its width), apply-trim (every free group
trimmed by a quarter: importance order, slicing), each apply including onnx.checker and strict
shape inference of the result.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import onnx

from deployopt.coupling import analyze
from deployopt.model import load_model
from deployopt.surgery import apply_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _stats(samples: list[float]) -> dict[str, Any]:
    q = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return {"median_ms": round(1e3 * statistics.median(samples), 2), "iqr_ms": round(1e3 * (q[2] - q[0]), 2),
            "min_ms": round(1e3 * min(samples), 2), "runs": len(samples)}  # fmt: skip


def _time(fn: Callable[[], Any], runs: int) -> list[float]:
    fn()  # warm-up: imports, onnxruntime initialisation
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _cli(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def bench(name: str, runs: int) -> dict[str, Any]:
    from zoo_models import MODELS

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.onnx"
        if name == "mobilenetv2":  # real torchvision-layout network, exported (needs torch)
            from deployopt.zoo.mobilenetv2 import export_mobilenetv2

            export_mobilenetv2(path)
        else:
            onnx.save(MODELS[name](), str(path))
        model = load_model(path).model
        analysis = analyze(model)
        pad = {g.id: (g.width // 32 + 1) * 32 for g in analysis.free_groups()}
        trim = {g.id: max(1, g.width - g.width // 4) for g in analysis.free_groups()}
        n_convs = sum(n.op_type == "Conv" for n in model.graph.node)
        plan_path = Path(tmp) / "plan.json"
        plan_path.write_text(json.dumps({"widths": pad}))
        exe = [sys.executable, "-m", "deployopt"]
        cli_runs = max(1, min(runs, 5))
        stages = {
            "load": _time(lambda: load_model(path), runs),
            "analyze": _time(lambda: analyze(model), runs),
            "apply_pad": _time(lambda: apply_plan(model, pad, analysis), runs),
            "apply_trim": _time(lambda: apply_plan(model, trim, analysis), runs),
            "analyze+apply_pad": _time(lambda: apply_plan(model, pad, analyze(model)), runs),
            "analyze+apply_trim": _time(lambda: apply_plan(model, trim, analyze(model)), runs),
            # what a user waits for, Python start-up and imports included
            "cli: deployopt analyze": _time(lambda: _cli([*exe, "analyze", str(path), "--json"]), cli_runs),
            "cli: deployopt apply": _time(
                lambda: _cli(
                    [*exe, "apply", str(path), "--plan", str(plan_path), "-o", str(Path(tmp) / "o.onnx")]
                ),
                cli_runs,
            ),
            # the floor under both: Python and onnx's import (ml_dtypes 0.7.0's alone took 0.46 s here)
            "cli: import onnx": _time(lambda: _cli([sys.executable, "-c", "import onnx"]), cli_runs),
        }
    return {
        "model": name,
        "convs": n_convs,
        "free_groups": len(pad),
        "stages": {k: _stats(v) for k, v in stages.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--models", nargs="*", default=["resnet56_cifar", "mobilenet_like", "densenet_like"])
    parser.add_argument("--json", type=Path, default=None, help="write the results here (atomically)")
    args = parser.parse_args()
    import ml_dtypes  # its version sets most of the CLI rows: 0.7.0 took 0.8 s to import here

    results = {
        "machine": {"cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
                    "python": platform.python_version(), "onnx": onnx.__version__,
                    "ml_dtypes": ml_dtypes.__version__, "load_average": list(os.getloadavg())},
        "results": [bench(m, args.runs) for m in args.models],
    }  # fmt: skip
    for r in results["results"]:
        print(f"{r['model']}: {r['convs']} convs, {r['free_groups']} free groups")
        for stage, s in r["stages"].items():
            line = f"  {stage:24s} median {s['median_ms']:8.1f} ms  IQR {s['iqr_ms']:6.1f} ms"
            print(f"{line}  ({s['runs']} runs)")
    if args.json:
        from deployopt.fileio import write_json

        write_json(args.json, results)


if __name__ == "__main__":
    main()
