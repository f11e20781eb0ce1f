"""Run the torch backend for real: MobileNetV2 (real ImageNet weights), fp16, full GPU and 8 SMs.

For each SM setting (full GPU, then a green context of 8 SMs: separate worker processes, since a
green context is one per process) and each batch: `bench` (end-to-end CUDA-graph replays) and
`profile --kernels` (per-layer GPU time and the kernels with grids, tiles, measured waves), plus a
two-conv staircase check through `measure_convs` (FINDINGS §1: K=384 vs K=400 at N=8 C=128 28×28).
Results go to --out as JSON (one file per run plus summary.json) and a markdown table on stdout
for docs/backends.md.

    python benchmarks/gpu_backends.py --out benchmarks/results/h200
    python benchmarks/gpu_backends.py --out /tmp/cpu --device cpu --dtype fp32 --runs 5  # smoke test

Needs torch, onnx2torch and either the weights package (see deployopt.zoo.mobilenetv2) or
--model with an already exported MobileNetV2 ONNX file. Total GPU time on the H200: well under
three minutes (two worker starts, ~200 graph replays and 10 profiled passes per configuration).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from deployopt.backends import MeasureOptions, get_backend
from deployopt.cli.backends_cmd import bench_json
from deployopt.errors import DeployoptError
from deployopt.fileio import write_json
from deployopt.layers import ConvShape

STAIRCASE = [ConvShape(8, 128, 28, 28, 384), ConvShape(8, 128, 28, 28, 400)]


def _model_for_batch(args: argparse.Namespace, batch: int, tmp: Path) -> tuple[Path, int | None]:
    """(model path, batch override): an export per batch, or --model with the batch overridden."""
    if args.model is not None:
        return args.model, batch
    from deployopt.zoo.mobilenetv2 import export_mobilenetv2

    path = tmp / f"mobilenetv2_b{batch}.onnx"
    if not path.exists():
        export_mobilenetv2(path, batch=batch)
    return path, None


def _top_layers(profile: dict[str, Any], n: int = 5) -> list[dict[str, Any]]:
    layers = sorted(profile["layers"], key=lambda layer: -layer["time_us"])[:n]
    out = []
    for layer in layers:
        k = max(layer["kernels"], key=lambda k: k["duration_us"]) if layer["kernels"] else {}
        out.append(
            {
                "layer": layer["name"],
                "time_us": layer["time_us"],
                "share": layer["share"],
                "kernel": k.get("name"),
                "grid": k.get("grid"),
                "tile": k.get("tile"),
                "waves": k.get("waves"),
                "tail_fill": k.get("tail_fill"),
            }
        )
    return out


def run_config(args: argparse.Namespace, sms: int | None, tmp: Path, summary: list[dict[str, Any]]) -> None:
    label = "full" if sms is None else f"sms{sms}"
    opts = MeasureOptions(
        dtype=args.dtype,
        sms=sms,
        runs=args.runs,
        warmup=args.warmup,
        timeout_s=args.timeout,
        extra={"device": args.device, "profile_runs": args.profile_runs},
    )
    t0 = time.time()
    with get_backend("torch").open(opts) as session:
        print(f"[{label}] worker ready in {time.time() - t0:.1f} s", file=sys.stderr)
        for batch in args.batches:
            model, override = _model_for_batch(args, batch, tmp)
            session.options = MeasureOptions(**{**opts.__dict__, "batch": override})
            stem = f"mobilenetv2_{args.dtype}_b{batch}_{label}"
            row: dict[str, Any] = {"config": label, "batch": batch, "sms": sms, "dtype": args.dtype}
            try:
                timing = session.measure(model)
                doc = bench_json(timing)
                write_json(args.out / f"{stem}_bench.json", doc)
                row.update(
                    median_us=doc["median_us"], iqr_us=doc["iqr_us"], ci95_us=doc["ci95_us"], runs=doc["runs"]
                )
                row["timed"] = doc["timed"]
                print(f"[{label}] b{batch}: {timing.describe()}", file=sys.stderr)
            except DeployoptError as exc:
                row["bench_error"] = str(exc)
                print(f"[{label}] b{batch} bench failed: {exc}", file=sys.stderr)
            try:
                cuda = session.cuda
                profile = session.profile(model, kernels=cuda)
                pdoc = profile.to_json()
                write_json(args.out / f"{stem}_profile.json", pdoc)
                row["profile_total_us"] = pdoc["total_us"]
                row["top_layers"] = _top_layers(pdoc)
            except DeployoptError as exc:
                row["profile_error"] = str(exc)
                print(f"[{label}] b{batch} profile failed: {exc}", file=sys.stderr)
            summary.append(row)
        if session.cuda:
            try:
                convs = session.measure_convs(STAIRCASE)
                doc = [{"shape": s.to_json(), **bench_json(t)} for s, t in zip(STAIRCASE, convs)]
                write_json(args.out / f"staircase_{args.dtype}_{label}.json", doc)
                summary.append(
                    {
                        "config": label,
                        "staircase": {s.signature(): t.median_us for s, t in zip(STAIRCASE, convs)},
                    }
                )
            except DeployoptError as exc:
                summary.append({"config": label, "staircase_error": str(exc)})


def markdown(summary: list[dict[str, Any]]) -> str:
    lines = [
        "| SMs | batch | median µs | IQR µs | 95% CI µs | runs | profiled layer sum µs |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary:
        if "batch" not in row:
            continue
        if "median_us" not in row:
            lines.append(f"| {row['config']} | {row['batch']} | failed: {row.get('bench_error')} | | | | |")
            continue
        lo, hi = row["ci95_us"]
        total = row.get("profile_total_us")
        lines.append(
            f"| {row['config']} | {row['batch']} | {row['median_us']:.1f} | {row['iqr_us']:.1f} | "
            f"[{lo:.1f}, {hi:.1f}] | {row['runs']} | {'' if total is None else f'{total:.1f}'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the JSON results")
    p.add_argument("--model", type=Path, help="an exported MobileNetV2 ONNX (default: export one)")
    p.add_argument("--dtype", default="fp16", choices=["fp16", "fp32"])
    p.add_argument("--batches", default="1,16", help="comma list (default 1,16)")
    p.add_argument("--sms", default="full,8", help="comma list of 'full' or SM counts (default full,8)")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--profile-runs", type=int, default=10)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    args = p.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    sms_list = [None if s == "full" else int(s) for s in args.sms.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    summary: list[dict[str, Any]] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="deployopt-bench-") as tmp:
        for sms in sms_list:
            try:
                run_config(args, sms, Path(tmp), summary)
            except DeployoptError as exc:
                failed = True
                summary.append({"config": "full" if sms is None else f"sms{sms}", "error": str(exc)})
                print(f"configuration sms={sms} failed: {exc}", file=sys.stderr)
    failed = failed or any(any(k.endswith("error") for k in row) for row in summary)
    write_json(args.out / "summary.json", summary)
    print(markdown(summary))
    print(json.dumps([r for r in summary if "staircase" in r], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
