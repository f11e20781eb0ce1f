"""DenseNet-201 through `deployopt optimize` on a GPU: torchvision's network as published and pruned
the way the benchmark prunes (every free width a random 35–90 %, `random_prune`, trimmed by L1),
timed with the torch backend. What produced benchmarks/results/h200_cli/densenet201_sms8_2026-12-03/
(run on the H200 with `--sms 8`; random weights: latency only).

    python benchmarks/run_densenet201.py --out OUT [--sms 8] [--seed 0] [--max-evals 12] [--runs 50]

Writes OUT/published/, OUT/pruned_seed<seed>_lossless/ and OUT/pruned_seed<seed>_trim/ (each an
optimize output folder) and the printed tables beside them (*_stdout.txt).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def export(dest: Path) -> None:
    import torch
    import torchvision

    warnings.filterwarnings("ignore")
    net = torchvision.models.densenet201().eval()
    torch.onnx.export(net, torch.randn(1, 3, 224, 224), str(dest), dynamo=False, opset_version=17)


def prune(src: Path, dest: Path, seed: int) -> None:
    import onnx

    from deployopt.coupling import analyze
    from deployopt.model import load_model
    from deployopt.surgery import apply_plan
    from deployopt.zoo.pruning import random_prune

    loaded = load_model(src)
    analysis = analyze(loaded.model)
    free = analysis.free_groups()
    widths = random_prune([g.width for g in free], seed=seed)
    onnx.save(apply_plan(loaded.model, {g.id: w for g, w in zip(free, widths)}, analysis), dest)


def optimize(model: Path, outdir: Path, mode: str, args: argparse.Namespace) -> None:
    cmd = [sys.executable, "-m", "deployopt", "optimize", str(model), "--target", args.target]
    cmd += ["--backend", "torch", "--batch", "1", "--mode", mode, "-o", str(outdir), "--force"]
    cmd += ["--max-evals", str(args.max_evals), "--runs", str(args.runs)]
    if args.sms:
        cmd += ["--sms", str(args.sms)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    (outdir.parent / f"{outdir.name}_stdout.txt").write_text(done.stdout + done.stderr)
    print(done.stdout[-2500:], done.stderr[-500:], flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sms", type=int, default=8)
    ap.add_argument("--target", default="orin-nano-8gb")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-evals", type=int, default=12)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        published, pruned = Path(tmp) / "densenet201.onnx", Path(tmp) / "densenet201_pruned.onnx"
        export(published)
        prune(published, pruned, args.seed)
        optimize(published, args.out / "published", "lossless", args)
        for mode in ("lossless", "trim"):
            optimize(pruned, args.out / f"pruned_seed{args.seed}_{mode}", mode, args)


if __name__ == "__main__":
    main()
