"""The non-conv traffic term (deployopt/traffic.py): its bytes against an independent count on the
padded models themselves, its slope fit, and the optimizer pricing it when end to end pays for bytes."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from deployopt.coupling import analyze
from deployopt.model import load_model
from deployopt.optimize import OptimizeConfig, optimize
from deployopt.surgery import apply_plan
from deployopt.traffic import MIN_LEVERS, fit_slope, traffic

VIEWS = {"Conv", "Constant", "Shape", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}


def nonconv_bytes(model: onnx.ModelProto, size: int = 2) -> int:
    """Bytes every non-conv, non-view op reads and writes, from onnx shape inference on the model
    as written (not from the channel analysis)."""
    m = onnx.shape_inference.infer_shapes(model)
    shapes = {
        vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
        for vi in [*m.graph.value_info, *m.graph.input, *m.graph.output]
    }
    consts = {i.name for i in m.graph.initializer}
    consts |= {o for n in m.graph.node if n.op_type == "Constant" for o in n.output}
    total = 0
    for n in m.graph.node:
        if n.op_type in VIEWS:
            continue
        for t in [*n.input, *n.output]:
            if t and t not in consts and t in shapes and all(d > 0 for d in shapes[t]):
                total += math.prod(shapes[t]) * size
    return total


NAMES = ["resnet56_pruned", "resnet_projection", "vgg16_pruned", "densenet_like", "mobilenet_like"]
NAMES += ["se_net", "inception_like", "yolo_detect_small"]


@pytest.mark.parametrize("name", NAMES)
def test_bytes_change_as_the_padded_models_bytes_do(
    zoo_model: Callable[[str], onnx.ModelProto], name: str
) -> None:
    """Residual adds, concats (a tensor of several groups), depthwise convs (one group repeated),
    SE blocks, Flatten into a Gemm, the detector's Splits, Resizes and Detect head: the change in
    bytes the term predicts between two plans is the change counted on the two models apply_plan
    writes."""
    from zoo_models import yolo_detect_small

    if name == "yolo_detect_small":
        pytest.importorskip("torch")  # built by exporting a torch module (the torch extra)
    model = load_model_proto(yolo_detect_small() if name == "yolo_detect_small" else zoo_model(name))
    analysis = analyze(model)
    tr = traffic(analysis, "fp16")
    free = analysis.free_groups()
    assert free and all(tr.per_channel[g.id] > 0 for g in free if g.consumers)
    rng = np.random.default_rng(0)
    widths = {g.id: g.width + 8 * int(rng.integers(1, 4)) for g in free}
    original = {g.id: g.width for g in free}
    counted = nonconv_bytes(apply_plan(model, widths, analysis)) - nonconv_bytes(
        apply_plan(model, original, analysis)
    )
    predicted = tr.bytes(widths) - tr.bytes(original)
    assert counted > 0
    assert predicted == pytest.approx(counted, rel=1e-9)


def load_model_proto(model: onnx.ModelProto) -> onnx.ModelProto:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.onnx"
        onnx.save(model, str(path))
        return load_model(path).model


def test_the_fit_finds_a_slope_and_says_when_it_cannot() -> None:
    rng = np.random.default_rng(1)
    base = [160e6, 161e6]  # two baselines, 1 MB apart (rounding to 8)
    far = [200e6, 240e6, 275e6]
    xs = base + far
    ys = [2.1 * x / 1e6 + 400 + rng.normal(0, 3) for x in xs]
    fit = fit_slope(xs, ys, reference=base)
    assert fit.used and fit.fitted_us_per_mb == pytest.approx(2.1, abs=0.15) and fit.points == 5
    # priced at the one-sided 95 % lower bound of the slope (t on 3 degrees of freedom: 2.353)
    assert fit.us_per_mb == pytest.approx(fit.fitted_us_per_mb - 2.353 * fit.stderr_us_per_mb, abs=1e-3)
    assert 0 < fit.us_per_mb < fit.fitted_us_per_mb and "lower bound" in fit.why
    # one plan away from the baselines: its own surprise is not a slope
    one = fit_slope(xs[:3], ys[:3], reference=base)
    assert not one.used and one.us_per_mb == 0 and f"needs {MIN_LEVERS}" in one.why
    # plans near the baselines only (rounding moves a few %): no lever at all
    near = fit_slope([160e6, 161e6, 162e6, 163e6], [0, 50, 10, 80], reference=base)
    assert not near.used and near.fitted_us_per_mb is None
    # a negative or an uncertain slope is not used
    neg = fit_slope(xs, [-y for y in ys], reference=base)
    assert not neg.used and neg.fitted_us_per_mb < 0 and "not positive" in neg.why
    # a positive slope the scatter does not establish (t = 0.8 on 3 degrees of freedom)
    noisy = fit_slope(xs, [400, 470, 380, 480, 430], reference=base)
    assert noisy.fitted_us_per_mb > 0 and not noisy.used and noisy.us_per_mb == 0
    assert "not above 0 with 95% confidence" in noisy.why


class _TrafficSession:
    """Per layer: `designed_us` (tests/test_optimize.py: 64-channel steps, a penalty off multiples
    of 64). End to end: the same plus 20 µs per MB the non-conv ops move, counted on the model
    file: a table of convs alone pads every group to 64 and pays for it in the Adds and Relus."""

    US_PER_MB = 20.0
    backend = type("TrafficBackend", (), {"name": "designed", "measured": True})()

    def measure(self, path: Path) -> Any:
        from test_optimize import designed_us

        from deployopt.backends.model import conv_shapes_from_model
        from deployopt.timing import Timing

        model = load_model(path).model
        convs = sum(designed_us(s) for s in conv_shapes_from_model(model).values())
        return Timing(
            "designed", [convs + self.US_PER_MB * nonconv_bytes(model) / 1e6], environment={"gpu": "x"}
        )

    def measure_convs(self, shapes: list[Any]) -> Any:
        from test_optimize import designed_us

        from deployopt.timing import Timing

        return [Timing("designed", [designed_us(s)]) for s in shapes]


def _optimize(src: Path, tmp_path: Path, out: str, **settings: Any) -> Any:
    """optimize on _TrafficSession (ResNet56-sized tables, 16 candidates per group, no fidelity)."""
    cfg = OptimizeConfig(
        model_path=src,
        target="h200",
        sms=8,
        outdir=tmp_path / out,
        max_candidates=16,
        fidelity=False,
        plots=False,
        cache_root=tmp_path / "lut",
        backend="model",
        **settings,
    )
    return optimize(cfg, session=_TrafficSession())


@pytest.mark.slow
def test_the_search_prices_traffic_once_measured(
    zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    src = zoo_model_path("resnet56_pruned")
    conv_only = _optimize(src, tmp_path, "out_False", traffic_term=False)
    priced = _optimize(src, tmp_path, "out_True")
    # the fit recovers the session's price from its own measurements …
    tr = priced.report["traffic"]
    assert tr["used"] and tr["us_per_mb"] == pytest.approx(_TrafficSession.US_PER_MB, rel=1e-6)
    assert tr["fits"][0]["after_evaluation"] >= 4  # two levers past the baselines first
    assert conv_only.report["traffic"]["used"] is False and conv_only.report["traffic"]["fits"] == []
    # … and the answer, confirmed end to end, is faster than the conv-only table's by 5 % or more
    assert priced.timings["best"].median_us < 0.95 * conv_only.timings["best"].median_us
    assert priced.report["traffic"]["mb_best"] < conv_only.report["traffic"]["mb_best"]
    md = (tmp_path / "out_True" / "report.md").read_text()
    assert "non-conv memory traffic:" in md and "priced in the search's table" in md
    # the resume signature names the term only when it is off (journals from before it still resume)
    start = json.loads((tmp_path / "out_True" / "journal.jsonl").read_text().splitlines()[0])
    assert "traffic_term" not in start["config"]
    start = json.loads((tmp_path / "out_False" / "journal.jsonl").read_text().splitlines()[0])
    assert start["config"]["traffic_term"] is False


@pytest.mark.slow
def test_a_resumed_run_refits_as_the_uninterrupted_one(
    zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """The fit is made from the evaluations, replayed ones too: a run stopped at 10 evaluations and
    resumed takes the turns the uninterrupted run took."""
    src = zoo_model_path("resnet56_pruned")
    whole = _optimize(src, tmp_path, "whole")
    _optimize(src, tmp_path, "parts", max_evals=10)
    resumed = _optimize(src, tmp_path, "parts", resume=True)
    assert [e.label for e in resumed.evaluations] == [e.label for e in whole.evaluations]
    assert resumed.best_plan == whole.best_plan
    assert resumed.report["traffic"]["fits"] == whole.report["traffic"]["fits"]
