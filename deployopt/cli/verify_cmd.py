"""`deployopt verify`: does the edited model still compute what the original did?

Thin layer over deployopt.fidelity: load both models (clear errors, dynamic batch fixed), build
the calibration set, compare on onnxruntime CPU, render a table or JSON. Exit 0 when every
threshold holds, 1 when one is crossed, 2 on bad input.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table
from rich.text import Text

from deployopt.cli.app import (
    app,
    calibration_data_option,
    console,
    err_console,
    input_path,
    parse_input_shapes,
)
from deployopt.errors import DataError
from deployopt.fidelity import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    RESIZE_MODES,
    FidelityReport,
    Thresholds,
    check_threshold_range,
    compare_models,
    load_calibration,
)
from deployopt.memory import require_fidelity_memory

if TYPE_CHECKING:
    from deployopt.model import LoadedModel


def _floats(value: str, option: str) -> list[float]:
    try:
        vals = [float(v) for v in value.replace(" ", "").split(",") if v]
    except ValueError:
        raise DataError(
            f"{option} {value!r}: expected numbers separated by commas, e.g. 0.485,0.456,0.406"
        ) from None
    if not vals:
        raise DataError(f"{option} {value!r}: expected at least one number")
    return vals


def _load(path: Path, requested: dict[str, list[int]]) -> LoadedModel:
    """The model at `path` with static input shapes (load_model fixes a dynamic batch to 1, with a notice)."""
    from deployopt.model import load_model

    return load_model(path, requested)


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _render(report: FidelityReport, thresholds: Thresholds, failures: list[str]) -> None:
    table = Table(title="fidelity: candidate vs reference (onnxruntime CPU)")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("threshold", justify="right")
    table.add_column("", justify="center")

    def status(ok: bool | None) -> Text:
        return (
            Text("") if ok is None else (Text("ok", style="green") if ok else Text("FAIL", style="bold red"))
        )

    t = thresholds
    limits = report.output_limits(t)
    if limits:
        for name, err, _, allowed in limits:
            table.add_row(
                f"max abs error, {name}", _fmt(err, ".3g"), f"≤ {allowed:.3g}", status(err <= allowed)
            )
    else:
        table.add_row(
            "max abs error",
            _fmt(report.max_abs_error, ".3g"),
            "none" if t.max_abs_error is None else f"≤ {t.max_abs_error:g}",
            status(None if t.max_abs_error is None else report.max_abs_error <= t.max_abs_error),
        )
    table.add_row("mean abs error", _fmt(report.mean_abs_error, ".3g"), "", "")
    table.add_row(
        "cosine similarity (min)",
        _fmt(report.cosine_min, ".6f"),
        "none" if t.min_cosine is None else f"≥ {t.min_cosine:g}",
        status(None if t.min_cosine is None else report.cosine_min >= t.min_cosine),
    )
    table.add_row("cosine similarity (mean)", _fmt(report.cosine_mean, ".6f"), "", "")
    top1_ok = (
        None if (t.min_top1 is None or report.top1_agreement is None) else report.top1_agreement >= t.min_top1
    )
    table.add_row(
        "top-1 agreement",
        "n/a (first output is not N×classes)"
        if report.top1_agreement is None
        else f"{report.top1_agreement:.2%}",
        "none" if t.min_top1 is None else f"≥ {t.min_top1:.2%}",
        status(top1_ok),
    )
    table.add_row("samples (model runs) / rows", f"{report.n_samples} / {report.n_rows}", "", "")
    console.print(table)
    if report.random_inputs:
        console.print(
            "inputs: random inputs (no calibration data given): this shows whether the models "
            "compute the same function, not accuracy on real data; pass --calibration-data for that",
            style="yellow",
        )
    else:
        console.print(f"inputs: {report.source}", highlight=False)
    if failures:
        for f in failures:
            console.print(Text.assemble(("FAILED", "bold red"), f": {f}"), highlight=False)
    else:
        console.print(Text.assemble(("PASSED", "bold green"), ": all thresholds hold"))


@app.command("verify", rich_help_panel="Channel surgery")
def verify(
    reference: Path = typer.Argument(
        ..., help="The original model (.onnx).", parser=input_path("reference", "an .onnx file")
    ),
    candidate: Path = typer.Argument(
        ...,
        help="The edited model to check against it (.onnx).",
        parser=input_path("candidate", "an .onnx file"),
    ),
    calibration_data: Optional[Path] = calibration_data_option(
        "Folder of images (png/jpg/jpeg/bmp), .npy, .npz (keyed by input name) or folder of arrays; "
        "folders are searched recursively, hidden entries skipped. "
        "Random inputs when omitted (said so)."
    ),
    count: int = typer.Option(16, "--count", help="Calibration samples (model runs) at most."),
    mean: Optional[str] = typer.Option(
        None, "--mean", help=f"Per-channel image mean (default {','.join(map(str, IMAGENET_MEAN))})."
    ),
    std: Optional[str] = typer.Option(
        None, "--std", help=f"Per-channel image std (default {','.join(map(str, IMAGENET_STD))})."
    ),
    bgr: bool = typer.Option(False, "--bgr", help="Feed images as BGR (mean/std still given in RGB order)."),
    scale: Optional[float] = typer.Option(
        None, "--scale", help="Pixel scale applied before mean/std (default 1/255)."
    ),
    resize: Optional[str] = typer.Option(
        None,
        "--resize",
        help="stretch (default): resize to H×W; crop: shorter side to H/0.875, centre crop.",
    ),
    max_abs_error: Optional[float] = typer.Option(
        None, "--max-abs-error", help="Fail above this max abs error."
    ),
    rel_error: Optional[float] = typer.Option(
        None,
        "--rel-error",
        help="With --max-abs-error: each output may also differ by this fraction of its largest "
        "reference magnitude (abs + rel × magnitude, per output).",
    ),
    min_cosine: float = typer.Option(
        0.999, "--min-cosine", help="Fail below this per-image cosine similarity."
    ),
    min_top1: float = typer.Option(0.99, "--min-top1", help="Fail below this top-1 agreement (fraction)."),
    input_shape: Optional[list[str]] = typer.Option(
        None, "--input-shape", help="NAME:1x3x224x224 for inputs with dynamic dims (repeatable)."
    ),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the random inputs (default 0)."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Compare a candidate model's outputs with the reference's on calibration data."""
    mean_values = IMAGENET_MEAN if mean is None else _floats(mean, "--mean")
    std_values = IMAGENET_STD if std is None else _floats(std, "--std")
    # each was ignored without a word where it has nothing to act on
    given = {"--mean": mean, "--std": std, "--bgr": bgr or None, "--scale": scale, "--resize": resize}
    image_options = [name for name, value in given.items() if value is not None]
    if calibration_data is None and image_options:
        raise DataError(
            f"{', '.join(image_options)}: image preprocessing, and without --calibration-data the inputs "
            "are random; give images with --calibration-data"
        )
    if calibration_data is not None and seed is not None:
        raise DataError("--seed seeds the random inputs, and --calibration-data gives the data; give one")
    resize = "stretch" if resize is None else resize
    if resize not in RESIZE_MODES:
        raise DataError(f"--resize {resize!r}: expected one of {', '.join(RESIZE_MODES)}")
    check_threshold_range(min_cosine, min_top1)
    if max_abs_error is not None and not max_abs_error >= 0:  # NaN too: every comparison with it fails
        raise DataError(f"--max-abs-error {max_abs_error}: expected an error bound ≥ 0")
    if rel_error is not None and (max_abs_error is None or rel_error < 0):
        raise DataError(f"--rel-error {rel_error}: needs --max-abs-error, and a fraction ≥ 0")
    requested = parse_input_shapes(input_shape)
    from deployopt.model import require_model_file

    for path in (reference, candidate):  # loaded here, and again by onnxruntime
        require_model_file(path, "verify")
    ref, cand = _load(reference, requested), _load(candidate, requested)
    ref_inputs, cand_inputs = ref.input_shapes, cand.input_shapes
    notices, cand_notices = list(ref.notices), list(cand.notices)
    if list(ref_inputs.values()) != list(cand_inputs.values()):
        raise DataError(f"input shapes differ: reference {ref_inputs}, candidate {cand_inputs}")
    # random inputs are --count samples drawn at once; a data file may hold a single one
    require_fidelity_memory(
        ref.model,
        cand.model,
        count if calibration_data is None else 1,
        "try a smaller --input-shape or --count",
    )
    del ref, cand  # compare_models loads both again in onnxruntime
    calib = load_calibration(
        calibration_data,
        ref_inputs,
        count=count,
        mean=mean_values,
        std=std_values,
        channel_order="BGR" if bgr else "RGB",
        scale=1 / 255 if scale is None else scale,
        seed=0 if seed is None else seed,
        resize=resize,
    )
    for notice in dict.fromkeys(notices + cand_notices + calib.notices):
        err_console.print(f"notice: {notice}", style="yellow", markup=False, highlight=False)
    report = compare_models(reference, candidate, calib)
    thresholds = Thresholds(
        max_abs_error=max_abs_error, rel_error=rel_error, min_cosine=min_cosine, min_top1=min_top1
    )
    failures = report.check(thresholds)
    if json_out:
        typer.echo(json.dumps(report.to_json(thresholds), indent=2))
    else:
        _render(report, thresholds, failures)
    if failures:
        raise typer.Exit(1)
