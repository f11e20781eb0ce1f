"""Markdown tables for docs/backends.md from gpu_backends.py's committed H200 results.

Why a script: every number in docs/backends.md's Results section is read from
benchmarks/results/h200_backends/*.json by this file, so anyone can re-derive them:

  python benchmarks/summarize_backends.py [--dir benchmarks/results/h200_backends] [--kernels 2]
  python benchmarks/summarize_backends.py --wave-model   # docs/wave_model_evaluation.md's "On the GPU" tables

Nothing is measured or predicted here; the JSON holds the measured Timings (samples included).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "h200_backends"
CLI_RESULTS = Path(__file__).resolve().parent / "results" / "h200_cli"
CONFIGS = [("full", 1), ("full", 16), ("sms8", 1), ("sms8", 16)]


def load(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def sms_text(env: dict[str, Any]) -> str:
    sms = env.get("sms")
    if sms is None or sms == env.get("device_sms"):
        return f"{env.get('device_sms')} (full)"
    return f"{sms} (green context)"


def short_kernel(name: str, width: int = 70) -> str:
    """A kernel name short enough for a table cell (template arguments and parameters cut)."""
    name = re.sub(r"^void ", "", name)
    m = re.match(r"cutlass\S*::Kernel<([^>(]+)", name)
    if m:
        name = m.group(1)
    name = name.split("(")[0].split("<")[0]
    return name if len(name) <= width else name[: width - 1] + "…"


def bench_table(root: Path) -> list[str]:
    out = [
        "| GPU | SMs | batch | median µs | IQR µs | 95 % CI µs | runs | warm-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for config, batch in CONFIGS:
        d = load(root / f"mobilenetv2_fp16_b{batch}_{config}_bench.json")
        env = d["environment"]
        lo, hi = d["ci95_us"]
        out.append(
            f"| {env['gpu']} | {sms_text(env)} | {batch} | {d['median_us']:.1f} | {d['iqr_us']:.1f} "
            f"| [{lo:.1f}, {hi:.1f}] | {d['runs']} | {d['warmup']} |"
        )
    return out


def profile_table(root: Path) -> list[str]:
    out = [
        "| SMs | batch | layers | layer sum µs (median of passes) | passes | end-to-end median µs "
        "| sum / end-to-end |",
        "|---|---|---|---|---|---|---|",
    ]
    for config, batch in CONFIGS:
        p = load(root / f"mobilenetv2_fp16_b{batch}_{config}_profile.json")
        b = load(root / f"mobilenetv2_fp16_b{batch}_{config}_bench.json")
        total = sum(layer["time_us"] for layer in p["layers"])
        out.append(
            f"| {sms_text(p['environment'])} | {batch} | {len(p['layers'])} | {total:.1f} | {p['runs']} "
            f"| {b['median_us']:.1f} | {total / b['median_us']:.3f} |"
        )
    return out


def kernel_table(root: Path, per_config: int) -> list[str]:
    """Every kernel of the `per_config` slowest layers, batch 16, full GPU and 8 SMs."""
    out = [
        "| SMs | layer (share) | kernel (µs) | grid | block | blocks/SM | tile | waves | tail fill |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for config, batch in CONFIGS:
        if batch != 16:
            continue
        p = load(root / f"mobilenetv2_fp16_b{batch}_{config}_profile.json")
        layers = sorted(p["layers"], key=lambda layer: -layer["time_us"])[:per_config]
        for layer in layers:
            for k in layer["kernels"]:
                tile = "×".join(str(t) for t in k["tile"]) if k.get("tile") else "—"
                out.append(
                    f"| {sms_text(p['environment'])} | `{layer['name']}` ({100 * layer['share']:.1f} %) "
                    f"| `{short_kernel(k['name'])}` ({k['duration_us']:.1f}) "
                    f"| {k['grid']} | {k['block']} | {k['blocks_per_sm']:g} | {tile} | {k['waves']} "
                    f"| {100 * k['tail_fill']:.0f} % |"
                )
    return out


def staircase_table(root: Path) -> list[str]:
    out = [
        "| SMs | conv (N, C, H×W, R×S) | K | median µs | IQR µs | 95 % CI µs | runs | K=400 vs K=384 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for config in ("full", "sms8"):
        rows = load(root / f"staircase_fp16_{config}.json")
        by_k = {r["shape"]["k"]: r for r in rows}
        for r in rows:
            s = r["shape"]
            lo, hi = r["ci95_us"]
            ratio = ""
            if s["k"] == 400 and 384 in by_k:
                ratio = f"{100 * (r['median_us'] / by_k[384]['median_us'] - 1):+.1f} % (channels +4.2 %)"
            sms = "132 (full)" if config == "full" else "8 (green context)"
            out.append(
                f"| {sms} | {s['n']}, {s['c']}, {s['h']}×{s['w']}, {s['r']}×{s['s']} | {s['k']} "
                f"| {r['median_us']:.1f} | {r['iqr_us']:.2f} | [{lo:.2f}, {hi:.2f}] | {r['runs']} | {ratio} |"
            )
    return out


def environment_line(root: Path) -> str:
    env = load(root / "mobilenetv2_fp16_b1_full_bench.json")["environment"]
    libs = env.get("libraries", {})
    clocks = env.get("clocks", {})
    cudnn = env.get("cudnn")
    cudnn_s = f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if isinstance(cudnn, int) else cudnn
    return (
        f"{env['gpu']} ({env['device_sms']} SMs, compute capability {env['compute_capability']}), driver "
        f"{clocks.get('driver')}, SM clock {clocks.get('sm_clock_mhz'):g} MHz (max "
        f"{clocks.get('max_sm_clock_mhz'):g}), memory clock {clocks.get('mem_clock_mhz'):g} MHz, power limit "
        f"{clocks.get('power_limit_w'):g} W, persistence mode {clocks.get('persistence_mode')}; torch "
        f"{env['torch']} (CUDA {env['torch_cuda']}), cuDNN {cudnn_s}, onnx2torch {libs.get('onnx2torch')}, "
        f"onnx {libs.get('onnx')}, Python {env['python']}"
    )


def render(root: Path, kernels: int = 2) -> str:
    b1 = load(root / "mobilenetv2_fp16_b1_full_bench.json")
    p1 = load(root / "mobilenetv2_fp16_b1_full_profile.json")
    st = load(root / "staircase_fp16_sms8.json")[0]
    parts = [
        "Environment (from the JSON): " + environment_line(root) + ".",
        "",
        "**End-to-end** (`bench`), measured: " + b1["timed"].split(", fp16")[0] + "; fp16, channels_last, "
        "cudnn.benchmark.",
        "",
        *bench_table(root),
        "",
        "**Per layer** (`profile --kernels`), measured: " + p1["timed"].split(", fp16")[0] + ".",
        "",
        *profile_table(root),
        "",
        f"**Example kernels** (every kernel of the {kernels} slowest layers, batch 16, one profiled pass; "
        "waves and tail fill are measured: grid and blocks/SM from the CUPTI trace, SMs of the run):",
        "",
        *kernel_table(root, kernels),
        "",
        "**Staircase check** through `measure_convs`, measured: " + st["timed"].split(", fp16")[0] + ".",
        "",
        *staircase_table(root),
        "",
    ]
    return "\n".join(parts)


def calibrate_table(root: Path) -> list[str]:
    """What `deployopt calibrate --measure torch --sms 8` fitted, from the profile it wrote."""
    d = load(root / "calibrated_h200_sm8.json")
    out = []
    for dtype, prm in d["params"].items():
        sweeps = [sw for sw in d["sweeps"] if sw["dtype"] == dtype]
        pts = [pt for sw in sweeps for pt in sw["points"]]
        shapes = sorted(
            {(pt["id"], pt["shape"]["n"], pt["shape"]["c"], pt["shape"]["h"], pt["shape"]["r"]) for pt in pts}
        )
        ks = sorted({pt["shape"]["k"] for pt in pts})
        out.append(
            f"Fitted ({prm['source']}; {dtype}, {sweeps[0]['sms']} SMs, {sweeps[0]['backend']} backend, "
            f"median of {sweeps[0]['runs']} runs per point; {len(shapes)} shapes "
            + ", ".join(f"N={n} C={c} {h}×{h} {r}×{r}" for _, n, c, h, r in shapes)
            + f", K = {ks[0]}…{ks[-1]} step {ks[1] - ks[0]}):"
        )
        out.append("")
        out.append(
            "| dtype | fixed µs | MACs/µs/SM | wave µs | tail floor | small-tile s | family efficiencies |"
        )
        out.append("|---|---|---|---|---|---|---|")
        fams = ", ".join(f"{f['name']} {f['efficiency']:.3f}" for f in prm["families"])
        out.append(
            f"| {dtype} | {prm['fixed_us']:.2f} | {prm['macs_per_us_per_sm'] / 1e6:.2f} M "
            f"| {prm['wave_us']:.2f} | {prm['tail_floor']:.2f} | {prm['small_tile']:.4f} | {fams} |"
        )
    return out


def staircase_cli_table(root: Path) -> list[str]:
    """`deployopt staircase --measure torch --json` at 8 SMs: predicted vs measured per width."""
    d = load(root / "staircase_measured_sm8.json")
    kern = {k["out_channels"]: k for k in d["predicted_kernels"]}
    runs = d["measured"]["runs"]
    out = [
        "| K | predicted blocks (tile, family) | predicted waves (tail fill) | predicted µs | measured µs "
        "(median) | IQR µs | runs | predicted − measured |",
        "|---|---|---|---|---|---|---|---|",
    ]
    errs = []
    for i, pt in enumerate(d["points"]):
        k = kern[pt["out_channels"]]
        err = 100 * (pt["predicted_us"] / pt["measured_us"] - 1)
        errs.append(abs(err))
        out.append(
            f"| {pt['out_channels']} | {k['blocks']} ({k['tile'][0]}×{k['tile'][1]}, {k['family']}) "
            f"| {pt['waves']} ({100 * pt['tail_fill']:.1f} %) | {pt['predicted_us']:.1f} "
            f"| {pt['measured_us']:.1f} | {pt['measured_iqr_us']:.2f} | {runs[i]} | {err:+.1f} % |"
        )
    out.append("")
    out.append(
        f"Predictor: {d['predictor']['model']} model, {d['predictor']['params']} "
        f"({d['predictor']['source']}); measured on {d['measured']['environment']['device']}, "
        f"{d['measured']['backend']} backend, "
        f"{d['dtype']}. Mean |predicted − measured| {sum(errs) / len(errs):.1f} %, max {max(errs):.1f} %."
    )
    return out


def render_wave_model(root: Path) -> str:
    return "\n".join([*calibrate_table(root), "", *staircase_cli_table(root), ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, default=RESULTS, help="gpu_backends.py --out folder")
    ap.add_argument("--kernels", type=int, default=2, help="slowest layers per configuration to show")
    ap.add_argument(
        "--wave-model",
        action="store_true",
        help="print the h200_cli tables (calibrate, measured staircase) of docs/wave_model_evaluation.md, "
        '"On the GPU"',
    )
    ap.add_argument("--cli-dir", type=Path, default=CLI_RESULTS, help="folder of the CLI runs' JSON")
    args = ap.parse_args(argv)
    if args.wave_model:
        sys.stdout.write(render_wave_model(args.cli_dir))
        return 0
    sys.stdout.write(render(args.dir, args.kernels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
