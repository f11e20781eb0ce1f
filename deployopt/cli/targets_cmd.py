"""`deployopt targets`, `deployopt staircase`, `deployopt calibrate`: GPUs and the wave model.

Thin layer: parse options, call deployopt.targets / deployopt.waves, render with rich. Every
latency printed says whether it was predicted (model and parameters) or measured (backend,
median, IQR, runs).
"""

from __future__ import annotations

import os
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich import box
from rich.table import Table

from deployopt.backends.cuda_conv import RETIMED, SPIKE_OVER
from deployopt.cli.app import (
    app,
    check_timeout,
    console,
    cudnn_benchmark_option,
    cudnn_engines_option,
    err_console,
    measure_extra,
    missing_option,
    note_cudnn_search,
    output_option,
    print_json,
    print_table,
    progress_bar,
    refuse_empty_backend,
    remote_option,
    remote_target_option,
    resolve_target,
    timeout_option,
    timing_cache_option,
    whole_number,
)
from deployopt.errors import DeployoptError
from deployopt.fileio import check_output_file
from deployopt.layers import ConvShape, conv_shape_from_onnx
from deployopt.targets import PROFILE_VERSION, builtin_names, sm_count
from deployopt.timing import check_run_counts, counted
from deployopt.waves import DW_OUTPUTS_PER_BLOCK, fill_percent

# A short calibration sweep: (n, c, h, w, kernel, stride) × output channels 16…256 step 16.
CALIBRATION_SHAPES = [
    (8, 128, 28, 28, 3, 1),
    (8, 256, 14, 14, 1, 1),
    (16, 64, 32, 32, 3, 2),
    (1, 256, 56, 56, 3, 1),
]
CALIBRATION_KS = "16:256:16"
#: Convs handed to the backend at a time, as optimize's sweep hands them (lut.LayerCache.fill): on a
#: board each chunk is one batch of engine builds there, and the progress bar moves once a chunk.
SWEEP_CHUNK = 16
#: What calibrate's profile keeps of a board's environment (jetson/runner.py records them; trtexec
#: only its binary and TensorRT version): which board, which software, which power mode and clocks.
BOARD_FACTS = (
    "runner",
    "trtexec",
    "tensorrt",
    "board",
    "compatible",
    "l4t",
    "nvpmodel",
    "nvpmodel_id",
    "clocks_locked",
    "gpu_governor",
    "gpu_min_freq_mhz",
    "gpu_max_freq_mhz",
    "jetson_clocks",
)
#: The help of calibrate's and staircase's --timing-cache.
SWEEP_TIMING_CACHE_HELP = (
    "tensorrt/trtexec: a TensorRT timing cache every conv's build reads and updates; it saves tactic "
    "timing when the same convs are built again (a rerun), not within one sweep (every conv differs). "
    "With --remote the board keeps it under this file's name."
)
#: The help of calibrate's and staircase's --timeout: a sweep builds and times one conv at a time.
SWEEP_TIMEOUT_HELP = (
    "Seconds per conv built and timed before it is given up (with --remote, a batch of convs on the "
    "board gets this per conv)"
)


def parse_dims(value: str, option: str = "--input") -> tuple[int, int, int, int]:
    """'8x128x28x28' → (8, 128, 28, 28): batch, channels, height, width."""
    try:
        dims = [whole_number(d) for d in value.lower().split("x")]
    except ValueError:
        raise DeployoptError(f"{option} {value!r}: expected NxCxHxW such as 8x128x28x28") from None
    if len(dims) != 4 or any(d < 1 for d in dims):
        raise DeployoptError(
            f"{option} {value!r}: expected four positive integers NxCxHxW such as 8x128x28x28"
        )
    return dims[0], dims[1], dims[2], dims[3]


#: Widths one sweep may take: each is a conv predicted (or timed) on its own.
MAX_WIDTHS = 4096


def parse_channels(value: str, option: str = "--out-channels") -> list[int]:
    """'a:b:s' (b included), 'a:b' (step 1), or a comma list '64,96,128' → sorted unique widths."""
    text = value.strip()
    try:
        if ":" in text:
            parts = [whole_number(p) for p in text.split(":")]
            if len(parts) not in (2, 3):
                raise ValueError
            a, b = parts[0], parts[1]
            s = parts[2] if len(parts) == 3 else 1
            if s < 1 or a < 1 or b < a:
                raise DeployoptError(
                    f"{option} {value!r}: need 1 <= start <= stop and step >= 1 (a:b:s includes b)"
                )
            # counted before the list exists (16:1000000000:1 would fill the RAM), and not by
            # len(range): past 2^63 that is an OverflowError
            count = (b - a) // s + 1
            if count > MAX_WIDTHS:
                raise DeployoptError(f"{option} {value!r}: {count} widths is too many (at most {MAX_WIDTHS})")
            widths = list(range(a, b + 1, s))
        else:
            if any(not p.strip() for p in text.split(",")):  # 8,,16: a width left out, not skipped
                raise DeployoptError(
                    f"{option} {value!r}: an empty item in the list (two commas, or one at an end)"
                )
            widths = [whole_number(p) for p in text.split(",")]
    except ValueError:
        raise DeployoptError(
            f"{option} {value!r}: expected start:stop:step (e.g. 16:512:16) or a list 64,128"
        ) from None
    if not widths or any(w < 1 for w in widths):
        raise DeployoptError(f"{option} {value!r}: channel counts must be positive integers")
    if len(widths) > MAX_WIDTHS:
        raise DeployoptError(f"{option} {value!r}: {len(widths)} widths is too many (at most {MAX_WIDTHS})")
    return sorted(set(widths))


def parse_kernel(value: str) -> tuple[int, int]:
    try:
        parts = [whole_number(p) for p in value.lower().split("x")]
    except ValueError:
        raise DeployoptError(f"--kernel {value!r}: expected a size such as 3 or 3x3") from None
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or min(parts) < 1:
        raise DeployoptError(f"--kernel {value!r}: expected a positive size such as 3 or 3x3")
    return parts[0], parts[1]


def _check_dtype(dtype: str) -> None:
    from deployopt.waves import DTYPES

    if dtype not in DTYPES:
        raise DeployoptError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")


def _check_sms(sms: int | None) -> None:
    if sms is not None and sms < 1:
        raise DeployoptError(f"--sms {sms}: must be a positive integer")


def _check_remote(remote: str | None, measure: str | None, sms: int | None) -> str | None:
    """--measure with --remote: the runner on the board (`tensorrt`) when not given, as bench's
    --backend; one that runs here (torch, ort, the wave model) and --sms are one line each. An empty
    --measure is one line too: staircase took it as no --measure and measured nothing, without a word."""
    from deployopt.backends.base import MEASURING_BACKENDS

    refuse_empty_backend("--measure", measure, MEASURING_BACKENDS)  # an unset shell variable
    if not remote:  # None, or '' (an unset shell variable): no board, as everywhere else
        return measure
    from deployopt.cli.backends_cmd import default_backend
    from deployopt.remote import check_remote_backend

    if sms is not None:
        raise DeployoptError(
            "--sms with --remote: a board's SM count is its own, and its GPU is timed whole; drop --sms"
        )
    measure = default_backend(measure, remote)
    check_remote_backend(measure, remote, "--measure")
    return measure


def _timed_in_chunks(
    session: Any,
    shapes: list[ConvShape],
    what: str,
    as_json: bool,
    check: Callable[[list[Any]], None] | None = None,
) -> list[Any]:
    """session.measure_convs over `shapes`, SWEEP_CHUNK at a time, with a progress bar on stderr:
    on a board every conv is a TensorRT engine build (seconds each on a Nano), and a sweep of 64
    said nothing for its whole length. --json (`as_json`) turns it off, as optimize's: no bar on a
    terminal, no `progress:` lines in a log. `check(timings)` runs on the first chunk's timings,
    so a sweep on the wrong GPU stops before the rest of it is timed."""
    timings: list[Any] = []
    with progress_bar(disable=as_json) as progress:
        task = progress.add_task(what, total=len(shapes))
        for start in range(0, len(shapes), SWEEP_CHUNK):
            timings += session.measure_convs(shapes[start : start + SWEEP_CHUNK])
            if check is not None and start == 0:
                check(timings)
            progress.update(task, completed=len(timings))
    return timings


def _check_calibrated_gpu(target: Any, profile_name: str, to_cache: bool, timings: list[Any]) -> None:
    """Refuse, in one line, timings of another GPU (its SM count or compute capability, as the
    backend records them) saved as a built-in target's profile in the user cache: every later
    `--target NAME` would load it, and `calibrate --target orin-nano-8gb` on an H200 made that name
    predict the H200's 14.6 µs for a conv predicted at 452.5 µs on the Orin, silently."""
    from deployopt.targets import gpu_differences, measured_gpu

    if not (to_cache and profile_name in builtin_names() and timings):
        return
    env = timings[0].environment or {}
    differs = gpu_differences(target, env)
    if differs:
        raise DeployoptError(
            f"calibrate --target {target.name}: the timings are {measured_gpu(env)}'s "
            f"({'; '.join(differs)}), and saved as {profile_name} they would replace what --target "
            f"{profile_name} predicts; give --name NAME or -o FILE for this GPU's profile, or the "
            "--target that matches it (deployopt targets)"
        )


def _measuring_backend(measure: str) -> Any:
    """The backend --measure names; one that predicts rather than times real kernels is one line."""
    from deployopt.backends.base import get_measuring_backend

    backend = get_measuring_backend(measure, "--measure")  # 'model' predicts: refused just below
    if not getattr(backend, "measured", True):
        raise DeployoptError(f"--measure {backend.name}: that backend predicts, it does not measure")
    return backend


def _sweep_dtype(backend: Any) -> str:
    """staircase's dtype with --measure and no --dtype: the measuring backend's own default where it
    runs no fp16 here (ort; torch without CUDA), else fp16, as unmeasured; said in one note when not
    fp16. The predictions are of that dtype too, so the two columns stay comparable."""
    from deployopt.backends.base import default_dtype

    dtype = default_dtype(backend, deployment=True)
    if dtype != "fp16":
        err_console.print(
            f"note: --dtype {dtype}: what backend {backend.name!r} runs here (predicted and measured alike); "
            "give --dtype to choose",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return dtype


def _kb(n: int) -> str:
    return f"{n // 1024} KB"


@app.command("targets", rich_help_panel="GPU targets and the wave model")
def targets_command(
    target: Optional[str] = typer.Option(
        None, "--target", "-t", metavar="TARGET", help="Show one target (name, 'local' or profile path)."
    ),
    sms: Optional[int] = typer.Option(None, "--sms", metavar="N", help="What-if: override the SM count."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    remote: Optional[str] = typer.Option(
        None,
        "--remote",
        metavar="USER@HOST",
        help="Ask a Jetson over ssh which built-in target it is (jetson/runner.py --env-only there: "
        "device-tree model and compatible, MemTotal).",
    ),
) -> None:
    """List built-in GPU targets (SMs, compute capability, per-SM limits, clock, sources)."""
    from deployopt.targets import FIT_BORROWED, get_target, list_targets

    if remote is not None:
        if not remote.strip():  # an unset shell variable: not a board
            raise DeployoptError("--remote '': give the board as USER@HOST")
        if target is not None or sms is not None:
            raise DeployoptError(
                "--remote reads which target the board is: give it without --target and --sms"
            )
        _board_target(remote, as_json)
        return
    _check_sms(sms)
    if target is not None:  # "" is an unknown target, not every target (an unset shell variable)
        targets = [get_target(target, sms=sms)]
    else:  # what-if over the list: only GPUs that have that many SMs
        everything = [_as_resolved(t) for t in list_targets()] + _cached_targets()
        targets = [t.with_sms(sms) if sms else t for t in everything if sms is None or t.sms >= sms]
        if not targets:
            largest = max(everything, key=lambda t: t.sms)
            raise DeployoptError(
                f"--sms {sms}: no built-in target has that many SMs (the largest, {largest.name}, has "
                f"{largest.sms})"
            )
    if as_json:
        print_json(targets[0].to_json() if target else [t.to_json() for t in targets])
        return
    # no vertical rules, and nothing cut: in 80 columns (a pipe, a CI log) the limits column printed
    # '2048/32…' and the shared memory '164/163' with its unit on another line; at 60 a MHz of 1300
    # read 130. Names and figures stay whole (print_table), the model column folds
    table = Table(
        title="GPU targets" + (f" (--sms {sms})" if sms else ""),
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for col in ("name", "CC", "SMs", "MHz", "SM\nthr/blk/warp", "smem\nSM/blk", "regs\nSM/blk", "model"):
        table.add_column(
            col,
            justify="left" if col in ("name", "model") else "right",
            no_wrap=col != "model",
            overflow="fold" if col == "model" else "ellipsis",
        )
    for t in targets:
        fitted = sorted(dt for dt, p in t.params.items() if p.fitted)
        table.add_row(
            t.name,
            t.cc,
            f"{t.sms}" + (f"/{t.full_sms}" if t.full_sms else ""),
            f"{t.clock_mhz:g}",
            f"{t.max_threads_per_sm}/{t.max_blocks_per_sm}/{t.max_warps_per_sm}",
            f"{t.shared_mem_per_sm // 1024}/{t.shared_mem_per_block // 1024} KB",
            f"{t.registers_per_sm // 1024}K/{t.registers_per_block // 1024}K",
            _model_column(t, fitted, FIT_BORROWED),
        )
    print_table(table)
    left_out = [] if target or not sms else [t.name for t in everything if t.sms < sms]
    if left_out:
        console.print(
            f"note: left out, fewer than {sms} SMs: {', '.join(left_out)}", highlight=False, soft_wrap=True
        )
    if target:
        t = targets[0]
        console.print(f"origin: {t.origin}", highlight=False, soft_wrap=True)
        if t.software:
            console.print(
                "software: " + ", ".join(f"{k} {v}" for k, v in t.software.items()),
                highlight=False,
                soft_wrap=True,
            )
        if t.notes:
            console.print(f"notes: {t.notes}", highlight=False, soft_wrap=True)
        for key, src in t.sources.items():
            console.print(f"source of {key}: {src}", highlight=False, soft_wrap=True)
        for dt in ("fp16", "fp32", "int8"):
            if dt not in t.dtypes():
                console.print(f"{dt}: none (no native INT8 on compute capability {t.cc})", highlight=False)
                continue
            p = t.wave_params(dt)
            console.print(f"{dt}: {p.describe()} — {p.source}", highlight=False, soft_wrap=True)
            console.print(f"{dt} depthwise: {p.dw_source}", highlight=False, soft_wrap=True)
    else:
        console.print(
            "model: wave-model parameters fitted on that GPU, a profile from `deployopt calibrate` in "
            "the user cache (what --target NAME loads), or defaults derived from the H200 fit by per-SM "
            "throughput (not calibrated). Sources of every figure: deployopt targets --target NAME.",
            highlight=False,
            soft_wrap=True,
        )


def _board_target(host: str, as_json: bool) -> None:
    """`targets --remote HOST`: the board, the built-in target it is and why; one-line error where
    the board cannot be reached or names no module deployopt has a target for. With --json
    (`as_json`) a board that was read is always a JSON object on stdout, `target` null where it is
    none (the error line and exit status still follow): a script reading stdout got nothing to
    parse for exactly the board it most needed to hear about."""
    from deployopt.errors import TargetError
    from deployopt.targets import get_target
    from deployopt.targets.board import detect_remote_target, read_summary

    env, match = detect_remote_target(host)
    if as_json:
        facts = ("board", "compatible", "mem_total_kib", "l4t", "nvpmodel")
        read = {key: env[key] for key in facts if key in env}
        print_json({"remote": host, "target": match.target, "why": match.why, "read": read})
    if match.target is None:
        raise TargetError(f"the board at {host} is no built-in target: {match.why}")
    if as_json:
        return
    t = get_target(match.target)
    console.print(f"board at {host}: {read_summary(env)}", highlight=False, soft_wrap=True)
    console.print(
        f"target: {t.name} ({t.display_name}, {sm_count(t.sms)}, CC {t.cc}): {match.why}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"use --target {t.name}; optimize, calibrate and staircase with `--remote {host}` and no "
        "--target read it from the board",
        highlight=False,
        soft_wrap=True,
    )


def _as_resolved(builtin: Any) -> Any:
    """The target `--target NAME` resolves to: a calibrated profile of that name in the user cache
    replaces the built-in one, so the list must show that one. A broken profile is a warning and
    the built-in row: it made the whole list one error line, every other target unlisted."""
    from deployopt.targets import TargetError, cached_profile, get_target

    if cached_profile(builtin.name) is not None:  # a cache that cannot be read holds none (a warning)
        try:
            return get_target(builtin.name)
        except TargetError as exc:
            err_console.print(
                f"warning: {builtin.name}: {exc}; listed as built in, and `--target {builtin.name}` "
                "fails until that file is fixed or removed",
                style="yellow",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    return builtin


def _cached_targets() -> list[Any]:
    """The user cache's profiles under names no built-in target has (`calibrate --name mine`):
    `--target mine` loads them, and the list left them out. A broken one is a warning, as for a
    built-in name's profile."""
    from deployopt.targets import TargetError, cached_profiles, get_target

    found = []
    for name in cached_profiles():
        try:
            found.append(get_target(name))
        except TargetError as exc:
            err_console.print(
                f"warning: {name}: {exc}; not listed, and `--target {name}` fails until that file is "
                "fixed or removed",
                style="yellow",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    return found


def _model_column(t: Any, fitted: list[str], borrowed: dict[str, str]) -> str:
    """Where the wave-model parameters come from: a calibrated profile, a shipped fit, defaults.
    A profile file without fitted parameters (an edited `targets --json`, a what-if power mode) or
    the local GPU uncalibrated is not calibrated, and must not read as if it were."""
    if t.origin != "built-in":
        if not fitted:
            return f"default ({t.origin})"
        if t.calibrated:
            return f"calibrated: {t.origin}"
        # a `targets --target h200 --json` copy (the built-in fit carried into a file) or the local
        # GPU's borrowed fit: fitted, but not on this GPU by this user
        names = sorted({t.params[dt].name for dt in fitted})
        return f"{', '.join(names)} (from {t.origin})"
    return f"{borrowed.get(t.name, t.name)} fit" if fitted else "default"


def _base_shape(input_dims: str, kernel: str, stride: int, groups: int, first_k: int) -> ConvShape:
    n, c, h, w = parse_dims(input_dims)
    r, s = parse_kernel(kernel)
    if stride < 1:
        raise DeployoptError(f"--stride {stride}: must be a positive integer")
    if stride > max(h, w):  # one output pixel whatever the stride: 2^63 and past was an onnx traceback
        raise DeployoptError(
            f"--stride {stride}: more than the input's height and width ({h}x{w}): past them the output is "
            f"one pixel whatever the stride; at most {max(h, w)}"
        )
    if groups < 1 or c % groups:
        raise DeployoptError(f"--groups {groups}: must be a positive divisor of the input channels ({c})")
    k = first_k
    if groups > 1 and groups == c:  # depthwise: a width sweep moves C = K = groups together
        # from the input's width where the sweep starts at 1 (one channel is groups 1: the base
        # would not be depthwise, and every point a 1-channel-input conv); the points are its
        c = groups = k = first_k if first_k > 1 else c
    # 'same' padding: k - 1 in all (output ceil(H / stride) × ceil(W / stride)), an odd total split
    # as an ONNX conv's is (0 before, 1 after for k = 2) and kept as conv_shape_from_onnx keeps it:
    # half each side and one more input row or column, the output, GEMM and work the conv's own.
    # k // 2 each side padded an even kernel by k: -k 2 on 17x19 priced an 18x20 output.
    pads = [(r - 1) // 2, (s - 1) // 2, r - 1 - (r - 1) // 2, s - 1 - (s - 1) // 2]
    attrs = {"pads": pads, "strides": [stride, stride], "group": groups}
    shape = conv_shape_from_onnx((n, c, h, w), (k, c // groups, r, s), attrs)
    if shape.p < 1 or shape.q < 1:
        raise DeployoptError(f"--input {input_dims}: too small for a {r}x{s} kernel with stride {stride}")
    return shape


#: cuDNN limits a tensor to 2 giga-elements (cudnnSetTensorNdDescriptor) and TensorRT indexes
#: with 32-bit integers: a larger conv is not one either runs, and predicting it is noise.
MAX_TENSOR_ELEMENTS = 2**31 - 1


def _check_tensor_sizes(widest: ConvShape, input_dims: str) -> None:
    """The sweep's widest conv must have input, weights and output under MAX_TENSOR_ELEMENTS."""
    s = widest
    sizes = {
        "input": s.n * s.c * s.h * s.w,
        "weight": s.k * (s.c // s.groups) * s.r * s.s,
        "output": s.n * s.k * s.p * s.q,
    }
    for what, count in sizes.items():
        if count > MAX_TENSOR_ELEMENTS:
            raise DeployoptError(
                f"--input {input_dims} with {s.k} output channels: the {what} tensor would have "
                f"{count:.3g} elements; cuDNN and TensorRT take at most 2^31 - 1 per tensor"
            )


def staircase_doc(
    target: Any,
    shape: ConvShape,
    dtype: str,
    ks: list[int],
    timings: list[Any] | None = None,
    backend: str | None = None,
) -> dict[str, Any]:
    """The staircase as JSON: points (out_channels, waves, tail_fill, predicted_us, measured_*)."""
    from deployopt.waves import LAUNCH_BOUND_BELOW, WAVE_BOUND_FROM, fixed_cost_us, size_class, staircase

    params = target.wave_params(dtype)
    preds = staircase(shape, target, dtype, ks)
    points = []
    kernels = []
    for i, (k, p) in enumerate(zip(ks, preds)):
        pt: dict[str, Any] = {
            "out_channels": k,
            "waves": p.waves,
            "tail_fill": p.tail_fill,
            "predicted_us": p.predicted_us,
        }
        if timings is not None:
            pt["measured_us"] = timings[i].median_us
            pt["measured_iqr_us"] = timings[i].iqr_us if timings[i].spread_known else None
            retimed = timings[i].environment.get(RETIMED)
            if retimed:  # timed again as a spike (cuda_conv.spikes_by_conv): every median, first one first
                pt["measured_retimed_medians_us"] = list(retimed)
        points.append(pt)
        kernels.append(
            {
                "out_channels": k,
                "tile": list(p.tile),
                "blocks": p.blocks,
                "blocks_per_sm": p.blocks_per_sm,
                "family": p.family,
            }
        )
    median_us = statistics.median(p.predicted_us for p in preds)
    doc: dict[str, Any] = {
        "points": points,
        "predicted_kernels": kernels,
        # where this conv sits between fixed cost and waves: how far its staircase is predictable
        "size_class": {
            "class": size_class(median_us, params, shape.is_depthwise),
            "predicted_median_us": median_us,
            "fixed_us": fixed_cost_us(params, shape.is_depthwise),
            "launch_bound_below": LAUNCH_BOUND_BELOW,
            "wave_bound_from": WAVE_BOUND_FROM,
        },
        "target": {
            "name": target.name,
            "display_name": target.display_name,
            "sms": target.sms,
            "full_sms": target.full_sms or target.sms,  # above sms: an --sms what-if
            "compute_capability": list(target.compute_capability),
            "origin": target.origin,
        },
        "shape": {k: v for k, v in shape.to_json().items() if k != "k"},
        "dtype": dtype,
        "predictor": {
            "model": "wave",
            "params": params.name,
            "fitted": params.fitted,
            # a depthwise conv is priced by the depthwise terms, not by the GEMM fit
            "source": params.source_for(shape.is_depthwise),
        },
    }
    if timings is not None:
        # one width's re-timing is that width's (its point says so), not the run's
        env = {k: v for k, v in (timings[0].environment if timings else {}).items() if k != RETIMED}
        doc["measured"] = {
            "backend": backend,
            "statistic": "median, IQR",
            "runs": [t.runs for t in timings],
            "environment": env,
        }
    return doc


def _measured_where(measure: str, timings: list[Any] | None) -> str:
    """'torch (CPU (no CUDA device))': the backend and the device its timings record, as the table's
    note names them; the plot's legend said only 'measured on torch' under the target's name."""
    from deployopt.environment import where_measured

    what = where_measured(timings[0].environment) if timings else ""
    return f"{measure} ({what})" if what else measure


def _warn_measured_elsewhere(
    session: Any, measure: str, target: Any, env: dict[str, Any] | None = None
) -> None:
    """One `warning:` line when the measured column is not the target's GPU: a session on the host CPU
    (before the sweep), or timings whose GPU is another (after it), as optimize warns."""
    import warnings

    from deployopt.errors import HostTimingWarning, TargetMismatchWarning
    from deployopt.targets import measured_elsewhere, measured_on_host

    if session is not None and getattr(session, "runs_on_gpu", None) is False:
        consequence = "the measured column is the CPU's, the predicted one the target's"
        warnings.warn(
            measured_on_host(f"--measure {measure}", target, consequence), HostTimingWarning, stacklevel=2
        )
    why = measured_elsewhere(target, env) if env else None
    if why:
        warnings.warn(why, TargetMismatchWarning, stacklevel=2)


@app.command("staircase", rich_help_panel="GPU targets and the wave model")
def staircase_command(
    ctx: typer.Context,
    target: Optional[str] = remote_target_option("Built-in name, 'local', or a profile path"),
    input_dims: str = typer.Option(
        ..., "--input", metavar="NxCxHxW", help="Input NxCxHxW, e.g. 8x128x28x28."
    ),
    out_channels: str = typer.Option(
        ..., "--out-channels", metavar="a:b:s", help="start:stop:step (stop included) or a list 64,96,128."
    ),
    kernel: str = typer.Option(
        "3",
        "--kernel",
        "-k",
        metavar="K",
        help="Kernel size (3 or 3x3); padding is 'same': the output is H/stride x W/stride rounded "
        "up (an even kernel pads one more row and column after than before).",
    ),
    stride: int = typer.Option(1, "--stride", metavar="N", help="Stride in both directions."),
    groups: int = typer.Option(
        1,
        "--groups",
        metavar="N",
        help="Conv groups: a divisor of C and of every width; C means depthwise (C = K = groups at every "
        "width).",
    ),
    dtype: Optional[str] = typer.Option(
        None,
        "--dtype",
        metavar="DTYPE",
        help="fp16, fp32 or int8 (int8: predicted only). Default fp16; with --measure, what that "
        "backend runs by default (fp32 on ort and on torch without CUDA).",
    ),
    sms: Optional[int] = typer.Option(
        None, "--sms", metavar="N", help="Use only N SMs (model; and the backend if measuring)."
    ),
    measure: Optional[str] = typer.Option(
        None,
        "--measure",
        "--backend",
        "-b",
        metavar="BACKEND",
        help="Also measure on this backend (e.g. torch; with --remote tensorrt, the default, or trtexec); "
        "-b/--backend: the same, as bench and optimize spell it.",
    ),
    runs: Optional[int] = typer.Option(
        None, "--runs", metavar="N", help="Timed runs per width when measuring (default 100)."
    ),
    cudnn_engines: Optional[int] = cudnn_engines_option(),
    cudnn_benchmark: bool = cudnn_benchmark_option(),
    remote: Optional[str] = remote_option(sweep=True),
    timing_cache: Optional[Path] = timing_cache_option(SWEEP_TIMING_CACHE_HELP),
    timeout: Optional[float] = timeout_option(
        f"{SWEEP_TIMEOUT_HELP}; --measure only (default 600).", default=None
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    plot: Optional[Path] = output_option(
        None, "--plot", help="Write the staircase as an image (.png, .svg or .pdf)."
    ),
) -> None:
    """Predicted (and optionally measured) latency of one conv as its output channels grow."""
    from deployopt.backends.base import MeasureOptions
    from deployopt.targets import get_target

    if not remote and target is None:  # click's missing-option error, as when --target was required
        raise missing_option(ctx, "target")
    if dtype is not None:
        _check_dtype(dtype)
    _check_sms(sms)
    measure = _check_remote(remote, measure, sms)
    if plot is not None:  # before measuring: a bad --plot must not cost a sweep
        from deployopt.plots import load_matplotlib, plot_format

        plot_format(plot)
        check_output_file(plot)
        load_matplotlib()  # a broken matplotlib (or MPLBACKEND) is one line now, not after the sweep
    ks = parse_channels(out_channels)
    shape = _base_shape(input_dims, kernel, stride, groups, ks[0])
    if groups > 1 and not shape.is_depthwise and any(k % groups for k in ks):
        raise DeployoptError(f"--out-channels: every width must be a multiple of --groups {groups}")
    _check_tensor_sizes(shape.with_out_channels(ks[-1]), input_dims)
    if measure and dtype == "int8":  # --remote implies --measure: name what was given
        given = "--remote" if remote else "--measure"
        raise DeployoptError(f"{given} with --dtype int8: INT8 staircases are predicted only")
    timings = None
    measuring = {
        "--runs": runs,
        "--cudnn-engines": cudnn_engines,
        "--no-cudnn-benchmark": not cudnn_benchmark or None,
        "--timing-cache": timing_cache,
        "--timeout": timeout,
    }
    if not measure and any(v is not None for v in measuring.values()):  # ignored without a word
        given = [k for k, v in measuring.items() if v is not None]
        verb = "applies" if len(given) == 1 else "apply"
        raise DeployoptError(f"{', '.join(given)} {verb} to --measure only (a prediction times nothing)")
    runs = 100 if runs is None else runs
    timeout = MeasureOptions().timeout_s if timeout is None else timeout
    backend = opts = None
    if measure:  # before the backend is looked up: a bad count or limit costs no probe
        check_run_counts(runs)
        check_timeout(timeout)
        backend = _measuring_backend(measure)
        if dtype is None:  # --measure ort said "runs fp32 only (asked for fp16)", a dtype never given
            dtype = _sweep_dtype(backend)
        opts = MeasureOptions(
            dtype=dtype,
            sms=sms,
            runs=runs,
            cudnn_engines=cudnn_engines,
            cudnn_benchmark=cudnn_benchmark,
            timeout_s=timeout,
            extra=measure_extra(remote, timing_cache),
        )
        if remote:  # what needs no board is refused before the board is asked which target it is
            backend.check_options(opts)
    dtype = dtype or "fp16"
    # with --remote the board's own target, said on stderr; with --target, a warning where it disagrees
    tgt = get_target(resolve_target(ctx, target, remote, timeout), sms=sms)
    if measure:
        assert backend is not None and opts is not None
        with backend.open(opts) as session:  # the note once the session stands: errors stay one line
            note_cudnn_search(backend, sms, cudnn_engines, cudnn_benchmark)
            _warn_measured_elsewhere(session, measure, tgt)
            where = f"{measure} at {remote}" if remote else measure
            sweep = [shape.with_out_channels(k) for k in ks]
            timings = _timed_in_chunks(session, sweep, f"timing {len(sweep)} convs on {where}", as_json)
        _warn_measured_elsewhere(None, measure, tgt, timings[0].environment if timings else None)
    doc = staircase_doc(tgt, shape, dtype, ks, timings, measure)
    params = tgt.wave_params(dtype)
    if plot is not None:
        from deployopt.plots import plot_staircase

        pts = doc["points"]
        plot_staircase(
            ks,
            plot,
            predicted_us=[p["predicted_us"] for p in pts],
            waves=[p["waves"] for p in pts],
            measured_us=[p["measured_us"] for p in pts] if timings else None,
            measured_quartiles_us=[t.quartiles_us if t.spread_known else None for t in timings]
            if timings
            else None,
            title=(
                f"{tgt.display_name}, {sm_count(tgt.sms)}, {dtype}: "
                f"conv {input_dims} k{kernel} s{stride} g{groups}"
            ),
            predicted_label=f"predicted ({params.describe()})",
            measured_label=f"measured on {_measured_where(measure, timings)} "
            f"(median of {counted(runs, 'run')}, "
            + (
                "bars from the first to the third quartile)"
                if timings and any(t.spread_known for t in timings)
                else "no spread)"  # --runs 1: no bar is drawn, so none is promised
            ),
        )
    if as_json:
        print_json(doc)
        return
    m, _, kd = shape.gemm
    how = (
        f"depthwise (C = K = groups at every width): {DW_OUTPUTS_PER_BLOCK} outputs a block"
        if shape.is_depthwise
        else f"groups {groups}: implicit GEMM M={m}, depth={kd}"
    )
    console.print(
        f"{tgt.display_name} ({tgt.name}, {sm_count(tgt.sms)}, CC {tgt.cc}), {dtype}, conv {input_dims} "
        f"kernel {shape.r}x{shape.s} stride {stride} {how}",
        highlight=False,
        soft_wrap=True,
    )
    # no vertical rules and headers of two short lines: nine columns fit 80 characters (a pipe, a
    # CI log); each cell one number that never wraps (print_table: a column as wide as its widest),
    # where folding split `31739.8` and a `128x128` tile over two lines
    table = Table(box=box.SIMPLE_HEAD)
    cols = ["out\nch", "tile", "blocks", "blk/\nSM", "waves", "tail\nfill", "pred\nµs"]
    for col in cols + (["meas\nµs", "IQR\nµs"] if timings else []):
        table.add_column(col, justify="right", no_wrap=True)
    for p, kern in zip(doc["points"], doc["predicted_kernels"]):
        row = [
            str(p["out_channels"]),
            "x".join(map(str, kern["tile"])),
            str(kern["blocks"]),
            str(kern["blocks_per_sm"]),
            str(p["waves"]),
            f"{fill_percent(p['tail_fill'])}%",
            f"{p['predicted_us']:.1f}",
        ]
        if timings:
            iqr = p["measured_iqr_us"]
            row += [f"{p['measured_us']:.1f}", "n/a" if iqr is None else f"{iqr:.1f}"]
        table.add_row(*row)
    print_table(table)
    source = ("its depthwise terms: " if shape.is_depthwise else "") + params.source_for(shape.is_depthwise)
    console.print(f"pred µs: predicted, {params.describe()}; {source}", highlight=False, soft_wrap=True)
    if timings:
        from deployopt.environment import where_measured

        what = where_measured(timings[0].environment)
        console.print(
            f"meas µs: measured on backend {measure}, median and IQR of "
            f"{counted(timings[0].runs, 'run')} per width" + (f" ({what})" if what else ""),
            highlight=False,
            soft_wrap=True,
        )
    retimed = [p for p in doc["points"] if "measured_retimed_medians_us" in p]
    if retimed:
        each = "; ".join(
            f"{p['out_channels']}: {' → '.join(f'{m:.1f}' for m in p['measured_retimed_medians_us'])} µs"
            for p in retimed
        )
        console.print(
            f"note: timed again, being over {SPIKE_OVER:g}× their neighbours' median (something else "
            f"may have held the GPU), each keeping its lowest median: {each}",
            highlight=False,
            soft_wrap=True,
        )
    sc = doc["size_class"]
    if sc["class"] != "wave-bound":
        from deployopt.waves import SIZE_CLASS_MEANING

        console.print(
            f"note: {sc['class']} (predicted median {sc['predicted_median_us']:.1f} µs, "
            f"{sc['predicted_median_us'] / sc['fixed_us']:.1f}× the fixed cost of {sc['fixed_us']:.1f} µs; "
            f"wave-bound from {sc['wave_bound_from']:g}×): {SIZE_CLASS_MEANING[sc['class']]}",
            highlight=False,
            soft_wrap=True,
        )
    if plot is not None:
        console.print(f"plot written to {plot}", highlight=False)


@app.command("calibrate", rich_help_panel="GPU targets and the wave model")
def calibrate_command(
    ctx: typer.Context,
    target: Optional[str] = remote_target_option("The target these measurements describe"),
    measure: Optional[str] = typer.Option(
        None,
        "--measure",
        "--backend",
        "-b",
        metavar="BACKEND",
        help="Backend that times convs on this device (e.g. torch); required, except with --remote: "
        "tensorrt (jetson/runner.py on the board, the default) or trtexec. -b/--backend: the same, "
        "as bench and optimize spell it.",
        show_default=False,
    ),
    sms: Optional[int] = typer.Option(None, "--sms", metavar="N", help="Restrict to N SMs while measuring."),
    dtype: str = typer.Option(
        "fp16", "--dtype", metavar="DTYPES", help="Comma list of dtypes to fit (fp16,fp32)."
    ),
    runs: int = typer.Option(30, "--runs", metavar="N", help="Timed runs per conv."),
    out_channels: str = typer.Option(
        CALIBRATION_KS,
        "--out-channels",
        metavar="a:b:s",
        help="Widths swept per shape (start:stop:step, stop included); 4 shapes × 16 widths by default.",
    ),
    output: Optional[Path] = output_option(
        None, "--output", "-o", help="Profile path (default: user cache)."
    ),
    name: Optional[str] = typer.Option(
        None, "--name", metavar="NAME", help="Profile name (default: the target's name)."
    ),
    cudnn_engines: Optional[int] = cudnn_engines_option(),
    cudnn_benchmark: bool = cudnn_benchmark_option(),
    remote: Optional[str] = remote_option(sweep=True),
    timing_cache: Optional[Path] = timing_cache_option(SWEEP_TIMING_CACHE_HELP),
    timeout: float = timeout_option(f"{SWEEP_TIMEOUT_HELP}."),
) -> None:
    """Time a short sweep on the device, fit the wave model, save a profile --target can load."""
    from deployopt.backends.base import MeasureOptions
    from deployopt.fileio import write_json
    from deployopt.targets import cache_dir, get_target
    from deployopt.waves import fit

    if not remote:  # click's missing-option errors, in the options' order, as when both were required
        for option, value in (("target", target), ("measure", measure)):
            if value is None:
                raise missing_option(ctx, option)
    _check_sms(sms)
    check_timeout(timeout)
    measure = _check_remote(remote, measure, sms)
    assert measure is not None  # given, or with --remote the runner
    dtypes = [d.strip() for d in dtype.split(",") if d.strip()]
    if not dtypes:
        raise DeployoptError(f"--dtype {dtype!r}: give at least one of fp16, fp32 (comma list)")
    if name is not None and (not name.strip() or name in (".", "..") or "/" in name or "\\" in name):
        raise DeployoptError(
            f"--name {name!r}: a profile name, not a path (--output chooses where the profile goes)"
        )
    if name == "local" or (name or "").endswith(".json"):  # --target NAME could never find it
        what = "reads the GPU present" if name == "local" else "is read as a file path"
        raise DeployoptError(f"--name {name!r}: --target {name} {what}, so no --target could name it")
    for dt in dtypes:
        _check_dtype(dt)
        if dt == "int8":
            raise DeployoptError("--dtype int8: calibration needs measured convs, and INT8 is predicted only")
    ks = parse_channels(out_channels)
    extra = measure_extra(remote, timing_cache)

    def options(dt: str) -> Any:
        return MeasureOptions(
            dtype=dt,
            sms=sms,
            runs=runs,
            cudnn_engines=cudnn_engines,
            cudnn_benchmark=cudnn_benchmark,
            timeout_s=timeout,
            extra=extra,
        )

    backend = None
    if remote:  # what needs no board is refused before the board is asked which target it is
        backend = _measuring_backend(measure)
        if output is not None:
            check_output_file(output)
        for dt in dtypes:
            backend.check_options(options(dt))
        # the board's own target, said on stderr; with --target, a warning where the board disagrees
        target = resolve_target(ctx, target, remote, timeout)
    assert target is not None
    tgt = get_target(target, sms=sms)
    if name in builtin_names() and (tgt.name != name or sms is not None):
        # a profile of another GPU (or of fewer SMs) under a built-in name: every later --target NAME
        # would predict for it, silently (calibrating the built-in target itself keeps its name)
        what = tgt.name if sms is None else f"{tgt.name} at {tgt.sms} SMs"
        raise DeployoptError(
            f"--name {name!r}: a built-in target's name; a profile of {what} under it would change what "
            f"--target {name} predicts; choose another name"
        )
    profile_name = name or (tgt.name if sms is None else f"{tgt.name}-{tgt.sms}sm")
    dest = check_output_file(output or cache_dir() / f"{profile_name}.json")
    backend = backend or _measuring_backend(measure)
    where = f"{measure} at {remote}" if remote else measure
    sweeps = []
    params = {}
    envs: list[dict[str, Any]] = []
    for dt in dtypes:
        shapes = []
        for n, c, h, w, r, st in CALIBRATION_SHAPES:
            base = ConvShape(n, c, h, w, ks[0], r, r, (st, st), (r // 2, r // 2))
            shapes += [base.with_out_channels(k) for k in ks]
        with _open_on_gpu(backend, options(dt), measure) as session:
            if dt == dtypes[0]:  # once, and only once the session stands (errors stay one line)
                note_cudnn_search(backend, sms, cudnn_engines, cudnn_benchmark)
            each = ", a TensorRT engine build each on the board" if remote else ""
            console.print(
                f"measuring {len(shapes)} convs ({dt}) on {where}{each} …", highlight=False, soft_wrap=True
            )
            # calibrate has no --json: its stdout is the notes and the profile's path
            timings = _timed_in_chunks(
                session,
                shapes,
                f"{dt}: timing convs on {where}",
                as_json=False,
                check=lambda t: _check_calibrated_gpu(tgt, profile_name, output is None, t),
            )
        env = timings[0].environment if timings else {}
        envs += [t.environment for t in timings]
        points = []
        for i, (shape, t) in enumerate(zip(shapes, timings)):
            points.append(
                {
                    "id": f"calib_{dt}_{i // len(ks)}",
                    "shape": shape.to_json(),
                    "measured_us": t.median_us,
                    "iqr_us": t.iqr_us,
                    "sms": tgt.sms,
                }
            )
        params[dt] = fit(points, tgt, dt, name=f"{profile_name}-{dt} calibrated").to_json()
        sweeps.append({"dtype": dt, "sms": tgt.sms, "backend": measure, "runs": runs, "points": points})
    target_json = tgt.to_json()
    target_json.pop("params", None)
    target_json["name"] = profile_name
    doc = {
        "deployopt_profile": PROFILE_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "target": target_json,
        "params": params,
        "measured_with": _measured_with(measure, runs, env, remote),
        "sweeps": sweeps,
    }
    write_json(dest, doc)
    if output is None:
        use = f"use --target {profile_name} or --target {dest}"
    else:  # a file outside the cache: --target NAME would not find it, its path does
        use = f"use --target {_as_profile_arg(dest)}"
    console.print(f"profile {profile_name!r} written to {dest}; {use}", highlight=False, soft_wrap=True)
    _note_clocks(envs)


def _measured_with(measure: str, runs: int, env: dict[str, Any], remote: str | None) -> dict[str, Any]:
    """What a profile says it was measured with: the backend, runs and device, and with --remote the
    board (`where`: 'GPU at USER@HOST', as bench's results name it) and what its environment
    recorded of it (BOARD_FACTS: TensorRT, power mode, clocks), so a profile of one power mode is
    not taken for another's."""
    doc: dict[str, Any] = {
        "backend": measure,
        "runs": runs,
        "statistic": "median",
        "device": env.get("gpu") or env.get("device"),
    }
    if remote:
        from deployopt.environment import where_measured

        doc["remote"] = remote
        doc["where"] = where_measured({**env, "remote": remote})
        doc.update({key: env[key] for key in BOARD_FACTS if env.get(key) not in (None, "", [])})
    return doc


def _note_clocks(envs: list[dict[str, Any]]) -> None:
    """bench's lines about the clocks (held down while timed; a board left to DVFS), once for the
    whole sweep: the first conv whose clock was held down, else the first conv."""
    if not envs:
        return
    from deployopt.cli.backends_cmd import warn_clock_slowdown
    from deployopt.clocks import held_down_phrase

    warn_clock_slowdown(next((e for e in envs if held_down_phrase(e)), envs[0]))


def _as_profile_arg(path: Path) -> str:
    """`path` as --target reads it as a profile file: a .json name or one with a folder in it
    (a bare 'myprofile' would be looked up as a target name)."""
    text = str(path)
    return text if text.endswith(".json") or os.sep in text else os.path.join(".", text)


def _open_on_gpu(backend: Any, options: Any, measure: str) -> Any:
    """Open the session calibrate times on, refusing a CPU one first: a CPU-only torch or ort refuses
    fp16 or --sms on opening, and its advice (`use --dtype fp32`) would only lead to the CPU refusal.
    So when opening fails, a plain fp32 session says whether the backend runs on the CPU here."""
    from deployopt.backends.base import MeasureOptions

    try:
        session = backend.open(options)
    except DeployoptError:
        if options.extra.get("remote"):  # a board's session refused: nothing here to probe
            raise
        try:
            probe_options = MeasureOptions(dtype="fp32", runs=options.runs, timeout_s=options.timeout_s)
            with backend.open(probe_options) as probe:
                _check_on_gpu(probe, measure)
        except DeployoptError as cpu:
            if "runs on the CPU here" in str(cpu):
                raise
        raise
    try:
        _check_on_gpu(session, measure)  # before the sweep: CPU timings must not become a GPU fit
    except BaseException:
        session.close()
        raise
    return session


def _check_on_gpu(session: Any, measure: str) -> None:
    """The wave model describes a GPU's SMs: a fit to host-CPU timings would silently replace what
    the target predicts (ort on its CPU provider, torch without CUDA). Unknown (None) passes."""
    if getattr(session, "runs_on_gpu", None) is False:
        raise DeployoptError(
            f"--measure {measure}: this backend runs on the CPU here, and the wave model describes a "
            "GPU's SMs; calibrate on the target GPU (e.g. --measure torch on CUDA, or tensorrt / "
            "trtexec on the Jetson)"
        )
