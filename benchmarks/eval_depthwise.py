"""Depthwise convs against the wave model: measured H200 staircases (C = K = groups swept, the 3×3
and 5×5 depthwise layers of MobileNetV2/V3 and EfficientNet) scored with the model as shipped and
with its depthwise terms fitted leave-one-shape-out; prints the table in docs/wave_model.md.

    python benchmarks/eval_depthwise.py                  # score, write the JSON beside the sweeps
    python benchmarks/eval_depthwise.py --write-fitted   # also fit on all of them and write the
                                                         # depthwise terms into the shipped H200 fit
Scores are issue 3's (agreement of flat / step classes of adjacent widths, regret within [0.9·K, K])
plus the level: the median of |predicted / measured − 1| over every point.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import eval_wave_model as ev  # noqa: E402

from deployopt.fileio import write_json  # noqa: E402
from deployopt.targets import FITTED_DIR, get_target  # noqa: E402
from deployopt.waves import WaveParams, _evaluate_gemm, fit_depthwise, pair_agreement, regret  # noqa: E402

RECORD = ROOT / "benchmarks" / "results" / "h200_depthwise"
DTYPES = ("fp16", "fp32")


def gemm_scores(sweeps: list[dict[str, Any]], params: dict[str, WaveParams], target: Any) -> dict[str, Any]:
    """The model before its depthwise path: every depthwise conv as one GEMM per group."""
    rows, level = [], []
    for s in sweeps:
        shapes = [s["shape"].with_out_channels(k) for k in s["ks"]]
        pred = [_evaluate_gemm(x, target, params[s["dtype"]], s["sms"]).predicted_us for x in shapes]
        agree, counted = pair_agreement(s["measured"], pred)
        rows.append({"agree": agree, "pairs": counted, "points": len(pred),
                     "regret": regret(s["ks"], s["measured"], pred)})  # fmt: skip
        level += [abs(p / m - 1.0) for p, m in zip(pred, s["measured"])]
    return {**ev.totals(rows), "level_error": statistics.median(level),
            "median_ratio": statistics.median(p for p in level)}  # fmt: skip


def dw_terms(params: WaveParams) -> dict[str, Any]:
    """The depthwise terms of a fit (what --write-fitted puts into the shipped file)."""
    return {k: v for k, v in params.to_json().items() if k.startswith("dw_")}


def level_error(sweeps: list[dict[str, Any]], params: dict[str, WaveParams], target: Any) -> float:
    """Median over every point of |predicted / measured − 1|."""
    errs = [
        abs(p / m - 1.0)
        for s in sweeps
        for p, m in zip(ev.predictions("wave", s, target, params[s["dtype"]]), s["measured"])
    ]
    return statistics.median(errs)


def scores(sweeps: list[dict[str, Any]], params: dict[str, WaveParams], target: Any) -> dict[str, Any]:
    """Agreement / regret per model (ev.score) and the wave model's level error, pooled."""
    by_model = ev.score(sweeps, target, params)
    out = {m: {k: by_model[m][k] for k in ("pairs", "agreement", "regret")} for m in ev.MODELS}
    out["wave"]["level_error"] = level_error(sweeps, params, target)
    return out


def fitted_without(
    sweeps: list[dict[str, Any]], base: dict[str, WaveParams], target: Any, shape: str | None
) -> dict[str, WaveParams]:
    """The depthwise terms fitted per dtype on every sweep whose shape key is not `shape`."""
    out = {}
    for dt in DTYPES:
        train = [s for s in sweeps if s["dtype"] == dt and ev.shape_key(s) != shape]
        out[dt] = fit_depthwise(ev.fit_points(train), target, base[dt])
    return out


PROFILES = ROOT / "benchmarks" / "results" / "h200_backends"


def layer_rows(layers: list[tuple[Any, float]], target: Any, params: WaveParams, sms: int) -> dict[str, Any]:
    """(ConvShape, measured µs) of a network's convs → per kind (depthwise / other): summed time
    measured and predicted before (one GEMM per group) and after, and the median per-layer error."""
    from deployopt.waves import _evaluate

    row: dict[str, Any] = {}
    for kind, pick in (("depthwise", True), ("other", False)):
        mine = [(sh, m) for sh, m in layers if sh.is_depthwise == pick]
        before = [_evaluate_gemm(sh, target, params, sms).predicted_us for sh, _ in mine]
        after = [_evaluate(sh, target, params, sms).predicted_us for sh, _ in mine]
        meas = [m for _, m in mine]
        row[kind] = {
            "layers": len(mine),
            "measured_us": sum(meas),
            "before_us": sum(before),
            "after_us": sum(after),
            "level_error_before": statistics.median(abs(b / m - 1) for b, m in zip(before, meas)),
            "level_error_after": statistics.median(abs(a / m - 1) for a, m in zip(after, meas)),
        }
    return row


def print_rows(title: str, rows: dict[str, dict[str, Any]]) -> None:
    print(title)
    for name, row in rows.items():
        for kind in ("depthwise", "other"):
            r = row[kind]
            print(f"  {name:<32} {kind:<9} {r['layers']:>2} convs: measured {r['measured_us']:7.1f} µs, "
                  f"before {r['before_us']:8.1f}, after {r['after_us']:7.1f}; per layer median error "
                  f"{r['level_error_before']:.0%} -> {r['level_error_after']:.0%}")  # fmt: skip


def network_check(target: Any, params: dict[str, WaveParams]) -> dict[str, Any]:
    """MobileNetV2 (fp16, 224², batch 1 and 16, 8 SMs and the full GPU) as profiled on the H200 per
    layer (`deployopt profile`, benchmarks/results/h200_backends/, measured before this path and
    never fitted on): each Conv's measured time (its conv kernels, not the bias add) against the
    model's prediction, depthwise and other convs apart, before (GEMM per group) and after."""
    import tempfile

    import onnx
    import torch

    from deployopt.coupling import analyze

    out: dict[str, Any] = {}
    for name in ("b1_sms8", "b16_sms8", "b1_full", "b16_full"):
        prof = json.loads((PROFILES / f"mobilenetv2_fp16_{name}_profile.json").read_text())
        batch = int(name.split("_")[0][1:])
        sms = 8 if name.endswith("sms8") else target.sms
        with tempfile.TemporaryDirectory() as tmp:
            from deployopt.zoo.mobilenetv2 import build_mobilenetv2

            path = Path(tmp) / "mbv2.onnx"
            torch.onnx.export(build_mobilenetv2().eval(), (torch.zeros(batch, 3, 224, 224),), str(path),
                              dynamo=False, opset_version=17, input_names=["input"])  # fmt: skip
            convs = {c.name: c.shape for c in analyze(onnx.load(str(path))).convs}
        # the conv's own kernels: eager PyTorch adds the bias in a separate elementwise kernel,
        # which the model does not predict (a fused bias in TensorRT / CUDA graphs of onnx2torch)
        measured = {
            layer["name"]: sum(k["duration_us"] for k in layer["kernels"] if "elementwise" not in k["name"])
            for layer in prof["layers"]
            if layer["name"] in convs
        }
        out[name] = layer_rows([(convs[n], m) for n, m in measured.items()], target, params["fp16"], sms)
    return out


NETWORKS = ROOT / "benchmarks" / "results" / "h200_networks"


def networks_check(target: Any, params: dict[str, WaveParams]) -> dict[str, Any]:
    """EfficientNet-B0 and MobileNetV3-Large (torchvision layer shapes), each conv timed alone on
    the H200 by benchmarks/network_convs.py after the depthwise terms were fitted: per network,
    batch and SM count, summed conv time measured vs predicted (depthwise before/after, others),
    and the median per-layer level error."""
    from deployopt.layers import ConvShape

    out: dict[str, Any] = {}
    for path in sorted(NETWORKS.glob("convs_*.json")):
        doc = json.loads(path.read_text())
        for net in doc["networks"]:
            layers = [(ConvShape.from_json(c["shape"]), c["median_us"]) for c in net["convs"]]
            out[f"{net['model']} b{net['batch']} {doc['sms']} SMs"] = layer_rows(
                layers, target, params[doc["dtype"]], doc["sms"]
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-fitted", action="store_true")
    ap.add_argument("--out", type=Path, default=RECORD / "eval_depthwise.json")
    args = ap.parse_args()
    target = get_target("h200")
    shipped = {dt: target.wave_params(dt) for dt in DTYPES}
    sweeps = ev.load_sweeps(RECORD / "default_limit")
    keys = sorted({ev.shape_key(s) for s in sweeps})

    # leave-one-shape-out: each shape's sweeps predicted by terms fitted on the other shapes
    loso: list[dict[str, Any]] = []
    per_shape_params = {k: fitted_without(sweeps, shipped, target, k) for k in keys}
    preds: dict[str, dict[str, Any]] = {}
    for s in sweeps:
        params = per_shape_params[ev.shape_key(s)][s["dtype"]]
        pred = ev.predictions("wave", s, target, params)
        agree, counted = pair_agreement(s["measured"], pred)
        loso.append({"sweep": s["id"], "dtype": s["dtype"], "sms": s["sms"], "agree": agree, "pairs": counted,
                     "regret": regret(s["ks"], s["measured"], pred), "points": len(s["ks"]),
                     "level": [abs(p / m - 1) for p, m in zip(pred, s["measured"])]})  # fmt: skip
        preds[s["id"]] = pred
    all_fit = fitted_without(sweeps, shipped, target, None)

    doc: dict[str, Any] = {"sweeps": sorted(s["id"] for s in sweeps), "shapes": keys}
    doc["shipped"] = scores(sweeps, shipped, target)
    doc["before"] = gemm_scores(sweeps, shipped, target)
    pairs = sum(r["pairs"] for r in loso)
    npts = sum(r["points"] for r in loso)
    doc["depthwise_loso"] = {
        "pairs": pairs,
        "agreement": sum(r["agree"] for r in loso) / pairs,
        "regret": sum(r["regret"] * r["points"] for r in loso) / npts,
        "level_error": statistics.median(x for r in loso for x in r["level"]),
        "by_setting": {},
    }
    for dt in DTYPES:
        for sms in sorted({s["sms"] for s in sweeps}):
            rows = [r for r in loso if r["dtype"] == dt and r["sms"] == sms]
            if rows:
                t = ev.totals(rows)
                t["level_error"] = statistics.median(x for r in rows for x in r["level"])
                doc["depthwise_loso"]["by_setting"][f"{dt} {sms} SMs"] = t
    doc["all_fit"] = {dt: dw_terms(all_fit[dt]) for dt in DTYPES}
    doc["all_fit_scores"] = scores(sweeps, all_fit, target)
    for folder in ("repeats", "all_engines"):
        other = ev.load_sweeps(RECORD / folder)
        if other:
            doc[f"{folder}_all_fit"] = scores(other, all_fit, target)
    # a second measurement of the same sweeps, as a "model" of the first
    originals = {s["id"]: s for s in sweeps}
    rep_rows = []
    for r in ev.load_sweeps(RECORD / "repeats"):
        first = originals.get(r["id"].removesuffix("_repeat"))
        if first and first["ks"] == r["ks"]:
            agree, counted = pair_agreement(first["measured"], r["measured"])
            rep = regret(first["ks"], first["measured"], r["measured"])
            rep_rows.append({"agree": agree, "pairs": counted, "regret": rep, "points": len(r["ks"])})
    if rep_rows:
        doc["repeat_as_model"] = ev.totals(rep_rows)

    def line(name: str, t: dict[str, Any]) -> None:
        lvl = f", level error {100 * t['level_error']:.1f} %" if "level_error" in t else ""
        print(f"{name:<44} {ev.fmt(t)} ({t['pairs']} pairs){lvl}")

    print(f"{len(sweeps)} depthwise sweeps, shapes {', '.join(keys)}")
    line("model before (depthwise as GEMM per group)", doc["before"])
    for m in ("flops", "constant", "tile128"):
        line(f"  baseline {m}", doc["shipped"][m])
    line("depthwise path, leave-one-shape-out", doc["depthwise_loso"])
    for k, t in doc["depthwise_loso"]["by_setting"].items():
        line(f"  {k}", t)
    line("depthwise path fitted on all (in-sample)", doc["all_fit_scores"]["wave"])
    for folder in ("repeats", "all_engines"):
        if f"{folder}_all_fit" in doc:
            line(f"  on the {folder} sweeps", doc[f"{folder}_all_fit"]["wave"])
    if "repeat_as_model" in doc:
        line("a repeat measurement as a model of the first", doc["repeat_as_model"])
    doc["mobilenetv2"] = network_check(target, all_fit)
    print_rows("MobileNetV2, per-layer profile (fp16, H200): summed conv µs", doc["mobilenetv2"])
    doc["networks"] = networks_check(target, all_fit)
    print_rows("Networks, each conv timed alone (fp16, H200): summed conv µs", doc["networks"])
    write_json(args.out, doc)
    if args.write_fitted:
        path = FITTED_DIR / "h200.json"
        fitted = json.loads(path.read_text())
        for dt in DTYPES:
            ours = WaveParams.from_json(fitted["params"][dt])
            fitted["params"][dt] = replace(ours, **dw_terms(all_fit[dt])).to_json()
        folder = (RECORD / "default_limit").relative_to(ROOT)
        fitted["depthwise_sweeps"] = [f"{folder}/{i}.json" for i in doc["sweeps"]]
        fitted["depthwise_how"] = "python benchmarks/eval_depthwise.py --write-fitted (waves.fit_depthwise)"
        write_json(path, fitted)
        print(f"wrote the depthwise terms into {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
