"""Wall time and peak memory of the CLI on large torchvision models, on this machine's CPU.

A performance bug bash (2026-12-06) found `analyze --target` quadratic in the number of convs and
the trim search serializing the whole model several times per candidate; this script is the record
of what each command costs at the sizes users ship, to be rerun after a change:

    python benchmarks/bench_large_models.py [--models densenet201 resnet152 regnet_y_16gf]
        [--work /tmp/bench_large] [--json out.json]

Each model is exported once (torchvision, random weights, 1×3×224×224, opset 17, the TorchScript
exporter) into --work, then each command runs once as a user runs it (`python -m deployopt ...`):
analyze, analyze --target orin-nano-8gb, apply of a plan padding every free group by 1 to 8
channels, and optimize --backend model (predicted, no GPU), lossless and trim. Peak memory is the
child's ru_maxrss (os.wait4). One run each, so no spread is measured: run it twice to see how much
two runs differ, and say the load average beside the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = "orin-nano-8gb"
MODELS = ("densenet201", "resnet152", "regnet_y_16gf")


def export(name: str, work: Path) -> Path:
    """torchvision's `name` as ONNX in `work` (kept: exporting takes longer than most commands)."""
    path = work / f"{name}.onnx"
    if not path.exists():
        import torch
        import torchvision

        model = getattr(torchvision.models, name)(weights=None).eval()
        tmp = path.with_suffix(".tmp.onnx")
        torch.onnx.export(
            model, torch.randn(1, 3, 224, 224), str(tmp), dynamo=False, opset_version=17,
            input_names=["input"], output_names=["output"],
        )  # fmt: skip
        tmp.rename(path)
    return path


def timed(args: list[str]) -> dict[str, Any]:
    """One CLI run: wall seconds, peak RSS (MiB) and exit status. Its output goes to files, not
    pipes: waiting on a child whose pipe is full (analyze --json writes megabytes) never ends."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "deployopt", *args], stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        out.seek(0, os.SEEK_END)
        err.seek(0)
        tail = err.read().decode(errors="replace").strip().splitlines()[-1:]
        return {
            "args": args,
            "wall_s": round(wall, 2),
            "max_rss_mib": round(usage.ru_maxrss / 1024),
            "exit": code,
            "stderr_tail": tail if code else [],
            "stdout_bytes": out.tell(),
        }


def pad_plan(model: Path, work: Path) -> Path:
    """A plan padding every free group by 1 … 8 channels (from `analyze --json`)."""
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "deployopt", "analyze", str(model), "--json"],
            check=True, capture_output=True, text=True,
        ).stdout
    )  # fmt: skip
    free = [g for g in doc["groups"] if not g["frozen"]]
    plan = work / f"{model.stem}.plan.json"
    plan.write_text(json.dumps({"widths": {g["id"]: g["width"] + 1 + i % 8 for i, g in enumerate(free)}}))
    return plan


def bench(name: str, work: Path) -> dict[str, Any]:
    import onnx

    model = export(name, work)
    proto = onnx.load(str(model), load_external_data=False)
    plan = pad_plan(model, work)
    out = work / name
    runs = {
        "analyze": ["analyze", str(model), "--json"],
        "analyze_target": ["analyze", str(model), "--target", TARGET, "--json"],
        "apply_pad": ["apply", str(model), "--plan", str(plan), "-o", str(out / "padded.onnx")],
        "optimize_lossless": ["optimize", str(model), "--target", TARGET, "--backend", "model", "-o",
                              str(out / "lossless"), "--force"],
        "optimize_trim": ["optimize", str(model), "--target", TARGET, "--backend", "model", "--mode", "trim",
                          "-o", str(out / "trim"), "--force"],
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "model": name,
        "file_mib": round(model.stat().st_size / 2**20),
        "nodes": len(proto.graph.node),
        "convs": sum(n.op_type == "Conv" for n in proto.graph.node),
    }
    for key, args in runs.items():
        result[key] = timed(args)
        print(f"{name:<16} {key:<18} {result[key]['wall_s']:7.1f} s {result[key]['max_rss_mib']:6d} MiB"
              f"  exit {result[key]['exit']}", flush=True)  # fmt: skip
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_large"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    doc = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load_average_before": os.getloadavg(),
            "python": platform.python_version(),
        },
        "git": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "results": [bench(name, args.work) for name in args.models],
    }
    doc["machine"]["load_average_after"] = os.getloadavg()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
