"""`run_model`: optimize() as the optimize tests run it, the wave model at 8 SMs of an H200 (fast,
deterministic), without plots, with a 2-sample fidelity check; keyword arguments override."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deployopt.optimize import OptimizeConfig, OptimizeResult, optimize


def run_model(path: Path, outdir: Path, **kw: Any) -> OptimizeResult:
    opts: dict[str, Any] = dict(target="h200", sms=8, backend="model", plots=False, fidelity_samples=2)
    opts.update(kw)
    return optimize(OptimizeConfig(model_path=path, outdir=outdir, **opts))
