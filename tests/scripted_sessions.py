"""Scripted measured sessions for optimize's confirmation tests: a latency per model and per build.

optimize measures the input first and round-up-to-8 second; a stand-in that knows which model it
times (in that order: 0 the input, 1 round-up-to-8, 2 and on every other plan) and which build of
it this is (1 the first, then each rebuild) can script a lucky first build that its rebuilds
refute, which is what the confirmation rounds are for.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from deployopt.optimize import OptimizeConfig


class BuildScriptedSession:
    """A measured backend's session whose medians come from `latency(which, build)` (subclasses
    say it); every sample is that plus 0.1 µs steps, 11 of them, so a difference is significant."""

    backend = type("ScriptedBackend", (), {"name": "scripted", "measured": True})()

    def __init__(self) -> None:
        self.builds: dict[str, int] = {}
        self.order: list[str] = []
        self.calls = 0

    def latency(self, which: int, build: int) -> float:
        raise NotImplementedError

    def measure(self, path: Path) -> Any:
        from deployopt.backends.model import conv_shapes_from_model
        from deployopt.model import load_model
        from deployopt.timing import Timing

        self.calls += 1
        key = repr(sorted((n, s.c, s.k) for n, s in conv_shapes_from_model(load_model(path).model).items()))
        if key not in self.order:
            self.order.append(key)  # the input is measured first, round-up-to-8 second
        n = self.builds[key] = self.builds.get(key, 0) + 1
        base = self.latency(self.order.index(key), n)
        return Timing("scripted", [base + 0.1 * i for i in range(11)], environment={"gpu": "scripted"})

    def measure_convs(self, shapes: list[Any]) -> Any:
        from deployopt.timing import Timing

        return [Timing("scripted", [10.0 + 0.01 * s.k + 0.01 * s.c]) for s in shapes]


def confirm_config(zoo_model_path: Callable[[str], Path], tmp_path: Path, **kw: Any) -> OptimizeConfig:
    """optimize of the pruned VGG16 at 8 SMs of an H200, scripted (backend "model" stands in for the
    session's), without fidelity, plots or traffic term, `--max-evals 12`; keywords override."""
    opts: dict[str, Any] = dict(
        model_path=zoo_model_path("vgg16_pruned_b4"),
        target="h200",
        sms=8,
        outdir=tmp_path / "out",
        max_evals=12,
        fidelity=False,
        plots=False,
        cache_root=tmp_path / "lut",
        backend="model",
        traffic_term=False,
    )
    opts.update(kw)
    return OptimizeConfig(**opts)
