"""Figures for docs/wave_model_evaluation.md: measured staircases (PyTorch's default cuDNN search and all
engines timed) beside the shipped wave model's prediction, from the committed sweep JSON.

    python benchmarks/plot_sweeps.py            # writes docs/img/sweep_<id>.png
Every curve is labelled measured (H200, median of 7 samples) or predicted (which fit).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from eval_wave_model import load_sweeps  # noqa: E402

from deployopt.fileio import atomic_path  # noqa: E402
from deployopt.plots import wave_boundaries  # noqa: E402
from deployopt.targets import get_target  # noqa: E402
from deployopt.waves import _evaluate  # noqa: E402

FIGURES = ("h200_a_fp16_8sm", "h200_l_fp16_8sm", "h200_w_fp32_132sm", "h200_ae_fp16_8sm")
OUT = ROOT / "docs" / "img"


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    target = get_target("h200")
    default = {s["id"]: s for s in load_sweeps(ROOT / "benchmarks" / "staircases")}
    engines = {s["id"]: s for s in load_sweeps(ROOT / "benchmarks" / "staircases_all_engines")}
    OUT.mkdir(parents=True, exist_ok=True)
    for sid in FIGURES:
        s = default[sid]
        params = target.wave_params(s["dtype"])
        evals = [_evaluate(s["shape"].with_out_channels(k), target, params, s["sms"]) for k in s["ks"]]
        pred = [e.predicted_us for e in evals]
        sh = s["shape"]
        fig, ax = plt.subplots(figsize=(9, 4.2), dpi=100)
        ax.step(s["ks"], pred, where="mid", color="tab:blue", lw=1.6, label=f"predicted ({params.name})")
        ax.plot(s["ks"], s["measured"], "o-", ms=3.5, lw=0.8, color="tab:red",
                label="measured, PyTorch default (10 cuDNN engines timed)")  # fmt: skip
        if sid in engines:
            ax.plot(engines[sid]["ks"], engines[sid]["measured"], "s-", ms=3, lw=0.8, color="tab:green",
                    label="measured, all cuDNN engines timed")  # fmt: skip
        for x in wave_boundaries(s["ks"], [e.waves for e in evals]):
            ax.axvline(x, color="0.6", ls="--", lw=0.7)
        ax.set_title(
            f"{sh.n}×{sh.c}×{sh.h}×{sh.w}, {sh.r}×{sh.s} conv, {s['dtype']}, H200 at {s['sms']} SMs "
            "(dashed: predicted wave boundaries)",
            fontsize=10,
        )
        ax.set_xlabel("output channels K")
        ax.set_ylabel("µs per conv (median of 7 samples)")
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        dest = OUT / f"sweep_{sid.removeprefix('h200_')}.png"
        with atomic_path(dest) as tmp:
            fig.savefig(tmp, format="png")
        plt.close(fig)
        print(dest)


if __name__ == "__main__":
    # no options: --help prints this, rather than writing its outputs as a plain run does
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    main()
