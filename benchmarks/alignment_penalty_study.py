"""A tried-and-not-adopted variant of the wave model (docs/wave_model_evaluation.md, round eleven): in fp16
with PyTorch's default search, widths that are not a multiple of 32 often run a slower kernel on
shallow GEMMs (CUTLASS, cuBLAS or a 64×192 tile in the traces), reproducibly. This scores the
obvious proxy, a latency factor on such widths when depth = C·R·S ≤ D, on rounds four to eleven
(each round's new shapes, each with the fit shipped before it), for both search modes:

    python benchmarks/alignment_penalty_study.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_wave_model as ev  # noqa: E402
import score_rounds as sr  # noqa: E402

from deployopt.targets import get_target  # noqa: E402
from deployopt.waves import pair_agreement, regret, size_class  # noqa: E402

ROUNDS = range(4, 12)


def load(mode: str) -> list[tuple[dict[str, Any], list[float], int, str]]:
    """(sweep, shipped-fit prediction, GEMM depth, size class) for each held-out sweep of `mode`."""
    target = get_target("h200")
    out = []
    for n in ROUNDS:
        ids, params, new = sr.load_round(n)
        wanted = {i for i in ids[mode] if not i.endswith("_repeat") and i.split("_")[1] in new}
        for s in ev.load_sweeps(sr._folders(n)[mode]):
            if s["id"] in wanted:
                pred = ev.predictions("wave", s, target, params[s["dtype"]])
                sh = s["shape"]
                cls = size_class(statistics.median(pred), params[s["dtype"]])
                out.append((s, pred, sh.c // sh.groups * sh.r * sh.s, cls))
    return out


def score(
    rows: list[tuple[dict[str, Any], list[float], int, str]], factor: float, depth: int
) -> tuple[float, float]:
    """Pooled agreement and point-weighted regret with fp16 widths not a multiple of 32 slowed by
    `factor` on GEMMs no deeper than `depth`."""
    agree = pairs = 0
    weighted = points = 0.0
    for s, pred, d, _ in rows:
        slow = s["dtype"] == "fp16" and d <= depth
        q = [v * factor if slow and k % 32 else v for k, v in zip(s["ks"], pred)]
        a, c = pair_agreement(s["measured"], q)
        agree, pairs = agree + a, pairs + c
        weighted += regret(s["ks"], s["measured"], q) * len(s["ks"])
        points += len(s["ks"])
    return agree / pairs, weighted / points


def main() -> None:
    for mode in ("default_limit", "all_engines"):
        rows = load(mode)
        for name, subset in (("all", rows), ("wave-bound", [r for r in rows if r[3] == "wave-bound"])):
            a0, r0 = score(subset, 1.0, 0)
            print(f"{mode} {name} ({len(subset)} sweeps): shipped {100 * a0:.1f} % / {100 * r0:.2f} %")
            for depth in (128, 300):
                for factor in (1.08, 1.10):
                    a, r = score(subset, factor, depth)
                    print(f"  depth ≤ {depth}, ×{factor}: {100 * a:.1f} % / {100 * r:.2f} %")


if __name__ == "__main__":
    main()
