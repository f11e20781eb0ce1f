"""Benchmark of `deployopt optimize` against plain rounding (issue 5), on a GPU with the torch backend.

For each case (VGG16 or ResNet56 with CIFAR shapes, irregularly pruned with random_prune seed 0/1/2)
and one SM setting, in ONE backend session (one worker process, one green context):
  1. deployopt lossless and deployopt trim-10 % on the pruned model (their per-layer table is the
     same on-disk cache, so the trim run re-uses every layer the lossless run timed);
  2. then a final comparison measured in interleaved rounds (drift hits every model alike):
     unpruned, irregular pruned, round-up-to-8, deployopt lossless, deployopt trim-10 %.
MobileNetV2 (real ImageNet weights, 224×224) gets the lossless run, the same final comparison (input,
round-up-to-8, lossless), and a top-1 check of the lossless plan on the foolbox ImageNet images.
`yolo` is a YOLOv8s-style detector at 640×640 (deployopt/zoo/yolo.py, random weights, exported by
torch): its five base widths irregularly pruned (seed 0/1/2), then lossless and trim-10 % runs as for
the CIFAR models; its round-up-to-8 is the optimizer's own (every free group, the C2f halves too).
`yolo_detect` is the same detector with ultralytics' Detect head as `yolo export` writes it (cv2/cv3
branches, DFL, dist2bbox; 80 classes): the head's own widths are free groups too.
`ghostnet` is GhostNet 1.0 at 224×224 (deployopt/zoo/ghostnet.py, random weights) at its published
widths, not pruned: its ghost-module halves (36, 92, 100) and SE reductions (20) are the irregular
widths. Lossless and trim-10 % runs on it, round-up-to-8 from the lossless run's own round-up plan,
then input / round-up-to-8 / lossless / trim in interleaved rounds. `--onnx NAME=PATH` (repeatable)
does the same for an already exported model (its batch is fixed in the file; case "onnx:NAME"):
how a torchvision architecture is benchmarked on a machine without torchvision, e.g.

  python benchmarks/check_architectures.py --only regnet_x_400mf --batch 8 --size 224 \\
      --export-only --workdir onnx_models        # here, with torchvision
  python benchmarks/bench_optimize.py --sms 8 --models ghostnet \\
      --onnx regnet_x_400mf=onnx_models/regnet_x_400mf_b8.onnx --workdir $OUT/work --out $OUT/r.json

Resumable: every optimize run journals into --workdir, the results JSON is rewritten after each
case, finished cases are skipped, and --deadline stops cleanly (journals intact) so the same
command continues where it stopped. Example (lead, on the H200):

  python benchmarks/bench_optimize.py --sms 8 --models vgg16 --seeds 0,1,2 \\
      --workdir $OUT/work --out $OUT/optimize_sms8.json --deadline 500

The trim runs use random-weight models, so fidelity is reported, not enforced (fidelity_gate off):
this measures latency, as FINDINGS §2 did; accuracy after trimming needs the real model's retraining.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.fileio import file_sha256, write_json
from deployopt.optimize import OptimizeConfig, Optimizer, OptimizeResult
from deployopt.timing import Comparison, Timing, compare

BATCH = {
    "full": {"vgg16": 128, "resnet56": 256, "mobilenetv2": 64, "yolo": 8, "yolo_detect": 8, "ghostnet": 64},
    "8": {"vgg16": 16, "resnet56": 32, "mobilenetv2": 8, "yolo": 1, "yolo_detect": 1, "ghostnet": 8},
}
BATCH["16"] = BATCH["8"]  # AGX Orin-sized (16 SMs): the same deployment batches as the 8-SM boards
YOLO_SIZE = 640  # the input side YOLOv8 is trained and deployed at
GHOSTNET_SIZE = 224  # ImageNet, as published
MODELS = ("vgg16", "resnet56", "mobilenetv2", "yolo", "yolo_detect", "ghostnet")
SINGLE = ("mobilenetv2", "ghostnet")  # one case each, no seeds (published widths, not pruned)


SHARED: dict[str, Any] = {}


class Deadline(Exception):
    """Raised from the optimizer's progress callback: stop now, the journal has everything so far."""


def build_models(model: str, seed: int, batch: int) -> dict[str, onnx.ModelProto]:
    """unpruned, pruned (irregular, random_prune(seed)) and round_up_8 (pruned widths to multiples of 8)."""
    from deployopt import zoo
    from deployopt.zoo.pruning import random_prune, round_up

    builders = {
        "vgg16": (zoo.vgg16_cifar, zoo.VGG16_WIDTHS),
        "resnet56": (zoo.resnet56_cifar, zoo.RESNET56_INNER_WIDTHS),
    }
    if model not in builders:
        raise ValueError(model)
    build, published = builders[model]
    widths = random_prune(published, seed=seed)
    return {
        "unpruned": build(None, batch=batch),
        "pruned": build(widths, batch=batch),
        "round_up_8": build(round_up(widths, 8), batch=batch),
    }


def interleaved(session: Any, paths: dict[str, Path], rounds: int) -> dict[str, Timing]:
    """Each model measured `rounds` times in turn; samples pooled per model."""
    pooled: dict[str, Timing] = {}
    for _ in range(rounds):
        for name, path in paths.items():
            t = session.measure(path)
            if name in pooled:
                pooled[name].samples_us.extend(t.samples_us)
            else:
                pooled[name] = t
    return pooled


def summarize(res: OptimizeResult) -> dict[str, Any]:
    return {
        "best_plan": res.best_plan,
        "best_label": res.best_label,
        "original": res.original,
        "round_up": res.round_up,
        "evaluations": res.evaluation_count,
        "evaluations_list": res.report["evaluations"]["list"],
        "per_layer_sweep": res.sweep,
        "optimize_timings": {k: t.to_json() for k, t in res.timings.items()},
        "fidelity": res.fidelity,
        "solver": res.report["solver"]["method"],
        "solver_check": res.report["solver"]["check"],
        # the non-conv traffic term: its fitted µs/MB and every change of the fit (bytes per group left out)
        "traffic": {k: v for k, v in (res.report.get("traffic") or {}).items() if k != "bytes_per_channel"},
    }


def optimize_config(args: argparse.Namespace, src: Path, mode: str, **settings: Any) -> OptimizeConfig:
    """The OptimizeConfig the command line gives for one model and mode, shared by the optimize
    runs and the solver study so both search the same way; `settings` are the fields either adds."""
    return OptimizeConfig(
        model_path=src,
        target=args.target,
        backend=args.backend,
        sms=args.sms_int,
        dtype=args.dtype,
        mode=mode,
        max_candidates=args.max_candidates,
        cache_root=Path(args.workdir) / "lut",
        **{"traffic_term": not args.no_traffic_term, **settings},
    )


def run_optimize(
    args: argparse.Namespace, session: Any, src: Path, outdir: Path, mode: str, check: Any, **settings: Any
) -> Any:
    journal = outdir / "journal.jsonl"
    if outdir.exists() and not journal.exists():
        shutil.rmtree(outdir)  # created but nothing measured: start clean
    cfg = optimize_config(
        args,
        src,
        mode,
        # a lossless config refuses a max_trim other than the default (it would be unused)
        **({"max_trim": args.max_trim} if mode == "trim" else {}),
        max_evals=args.max_evals,
        runs=args.runs,
        warmup=args.warmup,
        sweep_runs=args.sweep_runs,
        cudnn_engines=args.cudnn_engines,
        outdir=outdir,
        resume=journal.exists(),
        fidelity=not args.no_fidelity,
        fidelity_gate=False,
        fidelity_samples=1,
        plots=False,
        **settings,
    )
    # One per-layer table per session (= one device, one SM setting): the trim run and later cases
    # re-use every conv the earlier runs timed, whatever the environment dict says.
    opt = Optimizer(
        cfg, session=session, layer_cache=SHARED.get("cache"), progress=check, sweep_session=SHARED["sweep"]
    )
    result = opt.run()
    SHARED["cache"] = opt.layer_cache
    return result


def comparison_record(c: Comparison) -> dict[str, Any]:
    """A comparison as the records keep it. size_uncertain (the two medians' 95 % CIs overlap) says
    the ratio is no size the samples pin down, though the verdict stands; the CIs are kept so a
    reader of the record can see by how much (timing.Comparison)."""
    return {
        "verdict": c.verdict,
        "ratio": c.ratio,
        "p_value": c.p_value,
        "size_uncertain": c.size_uncertain,
        "cis_us": [list(ci) for ci in c.cis_us] if c.cis_us is not None else None,
    }


def timing_table(timings: dict[str, Timing], ref: str) -> dict[str, Any]:
    out = {}
    for name, t in timings.items():
        row = t.to_json()
        for other in (ref, "round_up_8"):
            if other in timings and other != name:
                c = compare(timings[other], t)
                row[f"vs_{other}"] = comparison_record(c)
        out[name] = row
    return out


def cifar_case(args: argparse.Namespace, session: Any, model: str, seed: int, check: Any) -> dict[str, Any]:
    batch = BATCH[args.sms][model]
    case_dir = Path(args.workdir) / f"sms{args.sms}" / f"{model}_seed{seed}"
    case_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, m in build_models(model, seed, batch).items():
        paths[name] = case_dir / f"{name}.onnx"
        if not paths[name].exists():
            onnx.save(m, str(paths[name]))
    return {
        "model": model,
        "seed": seed,
        "batch": batch,
        "sms": args.sms_int,
        **optimize_and_compare(args, session, paths["pruned"], case_dir, check, paths, "pruned"),
    }


def lossless_and_trim(
    args: argparse.Namespace, session: Any, pruned: Path, case_dir: Path, check: Any
) -> tuple[Any, dict[str, Any]]:
    """deployopt lossless, then trim-10 %, on the pruned model (the trim run re-uses the lossless
    run's per-layer table): (the lossless result, both runs summarized with their wall time)."""
    t0 = time.perf_counter()
    lossless = run_optimize(args, session, pruned, case_dir / "lossless", "lossless", check)
    t1 = time.perf_counter()
    trim = run_optimize(args, session, pruned, case_dir / "trim", "trim", check)
    t2 = time.perf_counter()
    runs = {
        "lossless": {**summarize(lossless), "wall_s": t1 - t0},
        "trim": {**summarize(trim), "wall_s": t2 - t1},
    }
    # --ab-traffic: the same searches with the conv-only table (lossless; trim too with
    # --ab-traffic-trim), each answer timed in the final comparison against its traffic-priced twin
    for mode in ("lossless", "trim") if args.ab_traffic else ():
        if mode == "trim" and not args.ab_traffic_trim:
            continue
        t = time.perf_counter()
        conv_only = run_optimize(
            args, session, pruned, case_dir / f"{mode}_conv_only", mode, check, traffic_term=False
        )
        runs[f"{mode}_conv_only"] = {**summarize(conv_only), "wall_s": time.perf_counter() - t}
    return lossless, runs


YOLO_HEADS = {"yolo": "plain", "yolo_detect": "detect"}


def yolo_case(
    args: argparse.Namespace, session: Any, seed: int, check: Any, model: str = "yolo"
) -> dict[str, Any]:
    """The detector: unpruned YOLOv8s widths, irregularly pruned ones, the optimizer's round-up-to-8
    of the pruned model, and deployopt lossless / trim-10 % of it, timed in interleaved rounds.
    `model` "yolo_detect" gives it the real Detect head instead of plain 1×1 output convs."""
    from deployopt.zoo.pruning import random_prune
    from deployopt.zoo.yolo import YOLOV8S_WIDTHS, export_yolo_like

    batch = BATCH[args.sms][model]
    widths = random_prune(YOLOV8S_WIDTHS, seed=seed)
    case_dir = Path(args.workdir) / f"sms{args.sms}" / f"{model}_seed{seed}"
    case_dir.mkdir(parents=True, exist_ok=True)
    paths = {"unpruned": case_dir / "unpruned.onnx", "pruned": case_dir / "pruned.onnx"}
    for name, w in (("unpruned", YOLOV8S_WIDTHS), ("pruned", widths)):
        if not paths[name].exists():
            export_yolo_like(paths[name], widths=w, size=YOLO_SIZE, batch=batch, head=YOLO_HEADS[model])
    return {
        "model": model,
        "head": YOLO_HEADS[model],
        "seed": seed,
        "batch": batch,
        "input_size": YOLO_SIZE,
        "base_widths": {"unpruned": list(YOLOV8S_WIDTHS), "pruned": widths},
        "sms": args.sms_int,
        **optimize_and_compare(args, session, paths["pruned"], case_dir, check, paths, "pruned"),
    }


def copy_imagenet_images(dest: Path) -> tuple[Path, list[int]]:
    """foolbox's 20 labelled ImageNet images (label in the file name), copied into `dest`, and their
    labels in file-name order (found without importing foolbox, which pulls eagerpy)."""
    import importlib.util

    spec = importlib.util.find_spec("foolbox")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("foolbox (its data/ folder of labelled images) is not installed")
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    dest.mkdir(parents=True, exist_ok=True)
    for p in sorted(data.glob("imagenet_*")):
        shutil.copy(p, dest / p.name)
    return dest, [int(p.stem.split("_")[-1]) for p in sorted(dest.iterdir())]


def top1_predictions(model: onnx.ModelProto, samples: list[dict[str, Any]]) -> list[int]:
    """The class each sample's logits rank first (onnxruntime CPU; input "input")."""
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [int(np.argmax(sess.run(None, {"input": s["input"]})[0])) for s in samples]


def mobilenet_case(args: argparse.Namespace, session: Any, check: Any) -> dict[str, Any]:
    from deployopt.fidelity import compare_models, load_calibration
    from deployopt.model import load_model
    from deployopt.surgery import apply_plan
    from deployopt.zoo.mobilenetv2 import export_mobilenetv2

    batch = BATCH[args.sms]["mobilenetv2"]
    case_dir = Path(args.workdir) / f"sms{args.sms}" / "mobilenetv2"
    case_dir.mkdir(parents=True, exist_ok=True)
    src = case_dir / "mobilenetv2.onnx"
    if not src.exists():
        export_mobilenetv2(src, batch=batch)
    t0 = time.perf_counter()
    res = run_optimize(args, session, src, case_dir / "lossless", "lossless", check)
    wall = time.perf_counter() - t0
    loaded = load_model(src)
    r8 = case_dir / "round_up_8.onnx"
    onnx.save(apply_plan(loaded.model, res.round_up), str(r8))
    final = interleaved(
        session,
        {"input": src, "round_up_8": r8, "deployopt_lossless": case_dir / "lossless" / "model.onnx"},
        args.rounds,
    )
    # Top-1 on the real ImageNet images, batch 1, with the plan found at the benchmark batch.
    top1: dict[str, Any] = {}
    try:
        b1 = case_dir / "mobilenetv2_b1.onnx"
        if not b1.exists():
            export_mobilenetv2(b1, batch=1)
        ref = load_model(b1).model
        from deployopt.coupling import analyze

        cand = apply_plan(ref, res.best_plan, analyze(ref))
        images, labels = copy_imagenet_images(case_dir / "imagenet_images")
        calib = load_calibration(images, inputs={"input": [1, 3, 224, 224]}, count=len(labels))
        rep = compare_models(ref, cand, calib)
        top1 = rep.to_json()
        preds = {
            name: top1_predictions(m, calib.samples)
            for name, m in (("input", ref), ("deployopt_lossless", cand))
        }
        top1["labels"] = labels
        top1["predictions"] = preds
        top1["correct"] = {k: sum(int(a == b) for a, b in zip(v, labels)) for k, v in preds.items()}
    except Exception as exc:  # the latency result stands; say why the accuracy check did not run
        top1 = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "model": "mobilenetv2",
        "batch": batch,
        "sms": args.sms_int,
        "final": timing_table(final, "input"),
        "lossless": {**summarize(res), "wall_s": wall},
        "top1": top1,
    }


def published_widths_case(
    args: argparse.Namespace, session: Any, src: Path, case_dir: Path, check: Any
) -> dict[str, Any]:
    """A model at the widths it ships with (no pruning): deployopt lossless and trim-10 % on it, the
    optimizer's round-up-to-8 of every free group, then input / round-up-to-8 / lossless / trim
    timed in interleaved rounds. Shared by `ghostnet` and the `--onnx` cases."""
    return optimize_and_compare(args, session, src, case_dir, check, {"input": src}, "input")


def optimize_and_compare(
    args: argparse.Namespace,
    session: Any,
    model: Path,
    case_dir: Path,
    check: Any,
    before: dict[str, Path],
    ref: str,
) -> dict[str, Any]:
    """lossless and trim-10 % on `model`, the optimizer's round-up-to-8 of it, then `before` (the
    models the answers are compared with), round-up-to-8, lossless and trim timed in interleaved
    rounds, each against `ref` and round-up-to-8: how every case but MobileNetV2's ends. A
    "round_up_8" in `before` (the CIFAR builders' own) is timed in its place."""
    from deployopt.fileio import atomic_path
    from deployopt.model import load_model
    from deployopt.surgery import apply_plan

    lossless, runs = lossless_and_trim(args, session, model, case_dir, check)
    paths = dict(before)
    if "round_up_8" not in paths:
        r8 = paths["round_up_8"] = case_dir / "round_up_8.onnx"
        if not r8.exists():
            with atomic_path(r8, suffix=".onnx") as tmp:
                onnx.save(apply_plan(load_model(model).model, lossless.round_up), str(tmp))
    paths["deployopt_lossless"] = case_dir / "lossless" / "model.onnx"
    paths["deployopt_trim"] = case_dir / "trim" / "model.onnx"
    for mode in ("lossless", "trim"):
        if f"{mode}_conv_only" in runs:
            paths[f"deployopt_{mode}_conv_only"] = case_dir / f"{mode}_conv_only" / "model.onnx"
    final = interleaved(session, paths, args.rounds)
    out = {"final": timing_table(final, ref), **runs}
    for mode, key in (("lossless", "traffic_ab"), ("trim", "traffic_ab_trim")):
        if f"deployopt_{mode}_conv_only" in final:  # --ab-traffic: traffic-priced vs conv-only answer
            c = compare(final[f"deployopt_{mode}_conv_only"], final[f"deployopt_{mode}"])
            out[key] = comparison_record(c)
    return out


def prune_free_groups(src: Path, dst: Path, seed: int) -> dict[str, int]:
    """Irregular pruning of every free group of an exported model: random_prune's fractions (the
    paper's, as for the other models), at least 2 per conv group of a grouped conv (1 would make it
    depthwise). Written atomically to `dst`; returns the plan."""
    from deployopt.coupling import analyze
    from deployopt.fileio import atomic_path
    from deployopt.model import load_model
    from deployopt.surgery import apply_plan
    from deployopt.zoo.pruning import random_prune

    model = load_model(src).model
    analysis = analyze(model)
    free = analysis.free_groups()
    widths = random_prune([g.width for g in free], seed=seed)
    plan = {g.id: max(2 if g.repeat > 1 else 1, w) for g, w in zip(free, widths)}
    if not dst.exists():
        with atomic_path(dst, suffix=".onnx") as tmp:
            onnx.save(apply_plan(model, plan, analysis), str(tmp))
    return plan


def pruned_case(
    args: argparse.Namespace, session: Any, src: Path, case_dir: Path, seed: int, check: Any
) -> dict[str, Any]:
    """`src` irregularly pruned (prune_free_groups), then as the other pruned cases: lossless and
    trim-10 % of the pruned model, the optimizer's round-up-to-8 of it, and unpruned / pruned /
    round-up-to-8 / lossless / trim in interleaved rounds."""
    case_dir.mkdir(parents=True, exist_ok=True)
    pruned = case_dir / "pruned.onnx"
    plan = prune_free_groups(src, pruned, seed)
    before = {"unpruned": src, "pruned": pruned}
    return {
        "seed": seed,
        "pruned_widths": plan,
        **optimize_and_compare(args, session, pruned, case_dir, check, before, "pruned"),
    }


def ghostnet_source(args: argparse.Namespace) -> Path:
    from deployopt.zoo.ghostnet import export_ghostnet

    src = Path(args.workdir) / f"sms{args.sms}" / "ghostnet" / "ghostnet.onnx"
    if not src.exists():
        src.parent.mkdir(parents=True, exist_ok=True)
        export_ghostnet(src, batch=BATCH[args.sms]["ghostnet"], size=GHOSTNET_SIZE)
    return src


def _pruned(
    args: argparse.Namespace, session: Any, check: Any, *, base: str, src: Path | None, seed: int
) -> dict[str, Any]:
    if src is None:  # ghostnet: exported here, in its own case folder
        src = ghostnet_source(args)
    case_dir = Path(args.workdir) / f"sms{args.sms}" / f"{base.replace(':', '_')}_pruned_seed{seed}"
    shapes = static_input_shapes(src)
    return {
        "model": f"{base}_pruned",
        "source": str(src),
        "input_shapes": shapes,
        "batch": next(iter(shapes.values()))[0],
        "sms": args.sms_int,
        **pruned_case(args, session, src, case_dir, seed, check),
    }


def ghostnet_case(args: argparse.Namespace, session: Any, check: Any) -> dict[str, Any]:
    """GhostNet 1.0 at 224×224 and its published widths (deployopt/zoo/ghostnet.py, random weights)."""
    src = ghostnet_source(args)
    return {
        "model": "ghostnet",
        "batch": BATCH[args.sms]["ghostnet"],
        "input_size": GHOSTNET_SIZE,
        "input_shapes": static_input_shapes(src),
        "sms": args.sms_int,
        **published_widths_case(args, session, src, src.parent, check),
    }


def static_input_shapes(path: Path) -> dict[str, list[int]]:
    """The graph inputs' shapes; ValueError when a dimension is not a fixed number (the benchmark
    times the batch the file holds, so it must be in the file)."""
    model = onnx.load(str(path), load_external_data=False)
    weights = {t.name for t in model.graph.initializer}
    shapes: dict[str, list[int]] = {}
    for value in model.graph.input:
        if value.name in weights:
            continue
        dims = value.type.tensor_type.shape.dim
        if not dims or any(d.dim_value < 1 for d in dims):
            shown = "x".join(d.dim_param or (str(d.dim_value) if d.dim_value else "?") for d in dims)
            raise ValueError(
                f"{path}: input {value.name!r} has shape {shown or '?'}; export it with a fixed batch"
            )
        shapes[value.name] = [int(d.dim_value) for d in dims]
    return shapes


def onnx_case_dir(args: argparse.Namespace, name: str, src: Path) -> tuple[Path, str]:
    """The case folder of --onnx NAME=PATH and the file's sha256. The folder remembers the hash of
    the file its journals are of: runs of another model under the same NAME are never resumed
    (SystemExit, before any device time when main calls this first)."""
    case_dir = Path(args.workdir) / f"sms{args.sms}" / f"onnx_{name}"
    sha = file_sha256(src)
    stamp = case_dir / "source.json"
    if stamp.exists():
        before = json.loads(stamp.read_text())
        if before["sha256"] != sha:
            raise SystemExit(
                f"onnx:{name}: {case_dir} holds runs of another file ({before['source']}, sha256 "
                f"{before['sha256'][:12]}…); give this model another NAME or --workdir"
            )
    else:
        case_dir.mkdir(parents=True, exist_ok=True)
        write_json(stamp, {"source": str(src), "sha256": sha})
    return case_dir, sha


def onnx_case(args: argparse.Namespace, session: Any, name: str, src: Path, check: Any) -> dict[str, Any]:
    """An exported model given as --onnx NAME=PATH, at its own widths and batch."""
    case_dir, sha = onnx_case_dir(args, name, src)
    shapes = static_input_shapes(src)
    return {
        "model": "onnx",
        "name": name,
        "source": str(src),
        "sha256": sha,
        "input_shapes": shapes,
        "batch": next(iter(shapes.values()))[0],
        "sms": args.sms_int,
        **published_widths_case(args, session, src, case_dir, check),
    }


def parse_onnx_cases(ap: argparse.ArgumentParser, specs: list[str]) -> list[tuple[str, Path]]:
    """--onnx NAME=PATH values, checked before any device time is spent."""
    out: list[tuple[str, Path]] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not path:
            ap.error(f"--onnx {spec!r}: expected NAME=PATH, NAME of letters, digits, '_', '.', '-'")
        if name in [n for n, _ in out]:
            ap.error(f"--onnx: NAME {name!r} given twice")
        if not Path(path).is_file():
            ap.error(f"--onnx {spec!r}: no such file {path}")
        try:
            static_input_shapes(Path(path))
        except Exception as exc:  # a one-line reason: not ONNX, or a symbolic dimension
            ap.error(f"--onnx {spec!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        out.append((name, Path(path)))
    return out


def case_list(args: argparse.Namespace) -> list[tuple[str, Callable[[Any, Any], dict[str, Any]]]]:
    """(case id, run(session, check)) for every case the command asks for, in order."""
    todo: list[tuple[str, Callable[[Any, Any], dict[str, Any]]]] = []
    pruned_only = getattr(args, "pruned_only", False)
    for model in args.model_list:
        if model == "ghostnet" and pruned_only:
            continue  # its --prune-seeds cases stay (below)
        if model == "mobilenetv2":
            todo.append((model, functools.partial(mobilenet_case, args)))
        elif model == "ghostnet":
            todo.append((model, functools.partial(ghostnet_case, args)))
        else:
            for seed in [int(s) for s in args.seeds.split(",")]:
                if model in YOLO_HEADS:
                    run = functools.partial(_yolo, args, seed=seed, model=model)
                else:
                    run = functools.partial(_cifar, args, model=model, seed=seed)
                todo.append((f"{model}_seed{seed}", run))
    for name, path in [] if pruned_only else args.onnx_cases:
        todo.append((f"onnx:{name}", functools.partial(_onnx, args, name=name, src=path)))
    bases = [("ghostnet", None)] if "ghostnet" in args.model_list else []
    bases += [(f"onnx:{name}", path) for name, path in args.onnx_cases]
    for seed in args.prune_seed_list:
        for base, path in bases:
            run = functools.partial(_pruned, args, base=base, src=path, seed=seed)
            todo.append((f"{base}_pruned_seed{seed}", run))
    return todo


def _yolo(args: argparse.Namespace, session: Any, check: Any, *, seed: int, model: str) -> dict[str, Any]:
    return yolo_case(args, session, seed, check, model)


def _cifar(args: argparse.Namespace, session: Any, check: Any, *, model: str, seed: int) -> dict[str, Any]:
    return cifar_case(args, session, model, seed, check)


def _onnx(args: argparse.Namespace, session: Any, check: Any, *, name: str, src: Path) -> dict[str, Any]:
    return onnx_case(args, session, name, src, check)


class _NullJournal:
    def write(self, *args: Any, **kwargs: Any) -> None:
        pass


def solver_study(args: argparse.Namespace) -> dict[str, Any]:
    """Exact variable elimination vs coordinate descent on the same per-layer tables (no device time
    with --backend model): table cost reached and solver wall time, per case and mode."""
    from deployopt.journal import Replay
    from deployopt.targets import get_target

    rows = []
    target = get_target(args.target, sms=args.sms_int)
    opts = MeasureOptions(dtype=args.dtype, sms=args.sms_int, runs=1, warmup=0, extra={"target": target})
    tmp = Path(args.workdir) / "solver_study"
    tmp.mkdir(parents=True, exist_ok=True)
    with get_backend(args.backend).open(opts) as session:
        for model in [m for m in args.model_list if m not in (*SINGLE, *YOLO_HEADS)]:
            for seed in [int(s) for s in args.seeds.split(",")]:
                src = tmp / f"{model}_seed{seed}.onnx"
                onnx.save(build_models(model, seed, BATCH[args.sms][model])["pruned"], str(src))
                for mode in ("lossless", "trim"):
                    cfg = optimize_config(args, src, mode, fidelity=False)
                    opt = Optimizer(cfg, session=session)
                    opt.replay, opt.evaluations, opt.table = Replay(), [], None
                    opt._load()
                    opt.session = session
                    opt.domains = opt._candidates()
                    table = opt._build_table(opt.domains, Replay(), _NullJournal())
                    r8, orig = opt._clamp(opt.round_up), opt._clamp(opt.original)
                    t0 = time.perf_counter()
                    exact = table.solve()
                    t1 = time.perf_counter()
                    cd_r8 = table.coordinate_descent([r8])
                    cd_orig = table.coordinate_descent([orig])
                    cd_multi = table.coordinate_descent([r8, orig, opt._wave_start(opt.domains)])
                    t2 = time.perf_counter()
                    assert exact is not None
                    rows.append(
                        {
                            "case": f"{model}_seed{seed}",
                            "mode": mode,
                            "groups": len(opt.domains),
                            "candidates": sum(len(d) for d in opt.domains.values()),
                            "table_round_up_8_us": table.cost(r8),
                            "table_original_us": table.cost(orig),
                            "exact_us": exact.cost_us,
                            "cd_from_round_up_us": cd_r8.cost_us,
                            "cd_from_original_us": cd_orig.cost_us,
                            "cd_multistart_us": cd_multi.cost_us,
                            "exact_s": t1 - t0,
                            "largest_table": table.largest_table,
                            "cd_all_s": t2 - t1,
                        }
                    )
                    r = rows[-1]
                    print(
                        f"{r['case']:<16} {mode:<8} r8 {r['table_round_up_8_us']:8.1f} exact "
                        f"{r['exact_us']:8.1f} ({r['exact_s'] * 1e3:.0f} ms)  "
                        f"CD r8 {r['cd_from_round_up_us']:8.1f} "
                        f"CD orig {r['cd_from_original_us']:8.1f} CD multi {r['cd_multistart_us']:8.1f}"
                    )
        predictor = getattr(session, "predictor", None)
    return {
        "backend": args.backend,
        "predictor": predictor,
        "target": args.target,
        "sms": args.sms_int,
        "command": sys.argv,
        "rows": rows,
    }


def print_summary(results: dict[str, Any]) -> None:
    print(
        f"\n{'case':<22} {'pruned':>9} {'r8':>9} {'lossless':>9} {'trim':>9} {'trim/pruned':>11} "
        f"{'trim/r8':>8} {'evals L/T':>10} {'sweep s':>8}"
    )
    for cid, case in sorted(results["cases"].items()):
        f = case["final"]
        if case["model"] == "mobilenetv2":
            print(
                f"{cid:<22} input {f['input']['median_us']:.1f} r8 {f['round_up_8']['median_us']:.1f} "
                f"lossless {f['deployopt_lossless']['median_us']:.1f} µs; top-1 {case['top1'].get('correct')}"
            )
            continue
        if "input" in f:  # published widths (ghostnet, --onnx): the input in the pruned column
            i, r8 = f["input"]["median_us"], f["round_up_8"]["median_us"]
            lo, tr = f["deployopt_lossless"]["median_us"], f["deployopt_trim"]["median_us"]
            sweep = (
                case["lossless"]["per_layer_sweep"]["seconds"] + case["trim"]["per_layer_sweep"]["seconds"]
            )
            print(
                f"{cid:<22} {i:9.1f} {r8:9.1f} {lo:9.1f} {tr:9.1f} {100 * (tr / i - 1):+10.1f}% "
                f"{100 * (tr / r8 - 1):+7.1f}% "
                f"{case['lossless']['evaluations']:>4}/{case['trim']['evaluations']:<4} "
                f"{sweep:8.1f}  (pruned column: the input, not pruned)"
            )
            continue
        p, r8 = f["pruned"]["median_us"], f["round_up_8"]["median_us"]
        lo, tr = f["deployopt_lossless"]["median_us"], f["deployopt_trim"]["median_us"]
        sweep = case["lossless"]["per_layer_sweep"]["seconds"] + case["trim"]["per_layer_sweep"]["seconds"]
        print(
            f"{cid:<22} {p:9.1f} {r8:9.1f} {lo:9.1f} {tr:9.1f} {100 * (tr / p - 1):+10.1f}% "
            f"{100 * (tr / r8 - 1):+7.1f}% "
            f"{case['lossless']['evaluations']:>4}/{case['trim']['evaluations']:<4} "
            f"{sweep:8.1f}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--sms",
        choices=["full", "8", "16"],
        required=True,
        help="full GPU, or a green context of 8 SMs (Orin Nano/NX, AGX Xavier) or 16 (AGX Orin 64GB)",
    )
    ap.add_argument(
        "--models",
        default=None,
        help=f"comma-separated, of {', '.join(MODELS)} "
        "(default vgg16,resnet56,mobilenetv2; none when --onnx is given)",
    )
    ap.add_argument(
        "--onnx",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="also benchmark this exported model at its own widths and (fixed) batch; repeatable",
    )
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument(
        "--prune-seeds",
        default="",
        help="also prune ghostnet and the --onnx models irregularly (every free group, random_prune "
        "with these seeds) and compare as for the pruned models",
    )
    ap.add_argument(
        "--pruned-only",
        action="store_true",
        help="skip the --onnx models' and ghostnet's own cases and run only their --prune-seeds cases "
        "(one seed per device call when a sweep is slow, as with --cudnn-engines 0)",
    )
    ap.add_argument("--out", required=True, help="results JSON (rewritten after every case)")
    ap.add_argument(
        "--workdir", default="benchmarks/results/optimize_work", help="models, journals, LUT cache"
    )
    ap.add_argument("--backend", default="torch")
    ap.add_argument("--target", default="h200")
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the final comparison")
    ap.add_argument("--sweep-runs", type=int, default=10, help="samples per conv in the per-layer sweeps")
    ap.add_argument(
        "--single-session",
        action="store_true",
        help="time the per-layer sweeps in the main session too (one worker; sweeps then use --runs)",
    )
    ap.add_argument(
        "--cudnn-engines",
        type=int,
        default=None,
        help="torch: engines cudnn.benchmark times per conv (0 = all, as TensorRT times every tactic; "
        "default PyTorch's 10)",
    )
    ap.add_argument("--max-evals", type=int, default=40)
    ap.add_argument("--max-trim", type=float, default=0.10)
    ap.add_argument("--max-candidates", type=int, default=8)
    ap.add_argument(
        "--no-fidelity", action="store_true", help="skip the onnxruntime output checks (CPU time)"
    )
    ap.add_argument(
        "--no-traffic-term",
        action="store_true",
        help="search with the per-layer table alone (no fitted non-conv traffic term; deployopt/traffic.py)",
    )
    ap.add_argument(
        "--ab-traffic",
        action="store_true",
        help="also run lossless with the conv-only table and time its answer in the final comparison",
    )
    ap.add_argument(
        "--ab-traffic-trim",
        action="store_true",
        help="with --ab-traffic, also run trim with the conv-only table and time its answer (trim vs trim)",
    )
    ap.add_argument("--deadline", type=float, default=500.0, help="stop cleanly after this many seconds")
    ap.add_argument("--solver-study", action="store_true", help="compare solvers on the tables only")
    args = ap.parse_args()
    args.sms_int = None if args.sms == "full" else int(args.sms)
    args.ab_traffic = args.ab_traffic or args.ab_traffic_trim
    if args.models is None:
        args.models = "" if args.onnx else "vgg16,resnet56,mobilenetv2"
    args.model_list = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.model_list if m not in MODELS]
    if unknown:
        ap.error(f"--models: unknown {', '.join(unknown)}; known: {', '.join(MODELS)}")
    args.onnx_cases = parse_onnx_cases(ap, args.onnx)
    args.prune_seed_list = [int(v) for v in args.prune_seeds.split(",") if v.strip()]
    if not args.model_list and not args.onnx_cases:
        ap.error("nothing to run: give --models or --onnx")
    if args.pruned_only and not ((args.onnx_cases or "ghostnet" in args.model_list) and args.prune_seed_list):
        ap.error("--pruned-only needs --prune-seeds and --onnx or ghostnet")
    if args.solver_study:
        write_json(Path(args.out), solver_study(args))
        return 0
    start = time.perf_counter()

    def check(kind: str, **info: Any) -> None:
        if time.perf_counter() - start > args.deadline:
            raise Deadline
        if kind == "eval":
            print(f"  eval {info['done']}: {info['label']} {info['timing'].median_us:.1f} µs", flush=True)

    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {"cases": {}}
    results.update(
        {
            "sms": args.sms_int,
            "target": args.target,
            "backend": args.backend,
            "dtype": args.dtype,
            "runs": args.runs,
            "warmup": args.warmup,
            "sweep_runs": args.sweep_runs,
            "cudnn_engines": args.cudnn_engines,
            "rounds": args.rounds,
            "max_evals": args.max_evals,
            "max_trim": args.max_trim,
            "max_candidates": args.max_candidates,
            "single_session": args.single_session,
            "command": sys.argv,
        }
    )
    todo = case_list(args)
    for name, path in args.onnx_cases:  # a NAME re-used for another file stops here, not mid-run
        if f"onnx:{name}" not in results["cases"]:
            onnx_case_dir(args, name, path)
    from deployopt.targets import get_target

    target = get_target(args.target, sms=args.sms_int)
    opts = MeasureOptions(
        dtype=args.dtype,
        sms=args.sms_int,
        runs=args.runs,
        warmup=args.warmup,
        extra={"target": target},
        cudnn_engines=args.cudnn_engines,
    )
    stopped = None
    # A second session (its own worker, same SM limit) times the per-layer sweeps with fewer samples.
    sweep_opts = MeasureOptions(
        dtype=args.dtype,
        sms=args.sms_int,
        runs=args.sweep_runs,
        warmup=3,
        extra={"target": target},
        cudnn_engines=args.cudnn_engines,
    )
    with get_backend(args.backend).open(opts) as session:
        sweep = session if args.single_session else get_backend(args.backend).open(sweep_opts)
        SHARED["sweep"] = sweep
        try:
            for cid, run in todo:
                if cid in results["cases"]:
                    print(f"{cid}: done before, skipped")
                    continue
                print(f"{cid}: running ({time.perf_counter() - start:.0f} s elapsed)", flush=True)
                try:
                    results["cases"][cid] = run(session, check)
                except Deadline:
                    stopped = cid
                    break
                write_json(out, results)
        finally:
            if sweep is not session:
                sweep.close()
    results["incomplete"] = [] if stopped is None else [cid for cid, _ in todo if cid not in results["cases"]]
    write_json(out, results)
    print_summary(results)
    if stopped:
        print(f"\nstopped at the deadline in {stopped}; run the same command again to continue")
    return 0


if __name__ == "__main__":
    sys.exit(main())
