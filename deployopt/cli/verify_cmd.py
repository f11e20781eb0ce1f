"""`deployopt verify`: does the edited model still compute what the original did?

Thin layer over deployopt.fidelity: load both models (clear errors, dynamic batch fixed), build
the calibration set, compare on onnxruntime CPU, render a table or JSON. Exit 0 when every
threshold holds, 1 when one is crossed, 2 on bad input.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table
from rich.text import Text

from deployopt.cli.app import (
    app,
    bgr_option,
    calibration_data_option,
    console,
    image_preprocess,
    input_path,
    mean_option,
    parse_input_shapes,
    print_json,
    print_notices,
    print_table,
    resize_option,
    scale_option,
    std_option,
)
from deployopt.errors import DataError
from deployopt.fidelity import (
    EXACT,
    RELATIVE,
    TOP1_TIE_EPS,
    FidelityReport,
    ImagePreprocess,
    Thresholds,
    check_same_inputs,
    check_threshold_range,
    load_calibration,
    parse_top1_outputs,
    relative_error_limit,
    samples_held,
    shown_against,
    shown_threshold,
    verify_models,
)
from deployopt.memory import require_fidelity_memory

if TYPE_CHECKING:
    from deployopt.model import LoadedModel


def _load(path: Path, requested: dict[str, list[int]], role: str) -> LoadedModel:
    """The model at `path` with static input shapes (load_model fixes a dynamic batch to 1, with a
    notice). An --input-shape that changes the batch the file fixes is refused here, as
    compare_models refuses it later: before, the memory check ran first, and a batch of 10**8 on a
    static-batch model was told to shrink a dim it could not set at all."""
    from deployopt.errors import StaticDimsError
    from deployopt.fidelity import static_dims_error
    from deployopt.model import load_model

    try:
        loaded = load_model(path, requested)
    except StaticDimsError as exc:  # its line says --input-shape sets the batch, which verify does not
        raise static_dims_error(role, exc.name, exc.have, exc.want) from None
    for name, batch in loaded.file_batch.items():
        dims = requested.get(name)
        if dims and dims[0] != batch:
            raise static_dims_error(role, name, [batch, *dims[1:]], dims)
    return loaded


def _fmt(x: float | None, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _render(
    report: FidelityReport, thresholds: Thresholds, failures: list[str], preprocess: ImagePreprocess | None
) -> None:
    table = Table(title="fidelity: candidate vs reference (onnxruntime CPU)")
    # print_table: a figure whole at any width (`0.999999…` was cut at 40 columns); names fold
    table.add_column("metric", overflow="fold")
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
    cosine, cosine_limit = _pair(
        report.cosine_min, t.min_cosine, 6, none="n/a (no float output of 2+ values a row)"
    )
    table.add_row(
        "cosine similarity (min)",
        cosine,
        "none" if t.min_cosine is None else f"≥ {cosine_limit}",
        status(
            None if t.min_cosine is None or report.cosine_min is None else report.cosine_min >= t.min_cosine
        ),
    )
    table.add_row("cosine similarity (mean)", _fmt(report.cosine_mean, ".6f"), "", "")
    limit = relative_error_limit(t.min_cosine)
    # the scale a cosine cannot see: each row's ‖candidate‖ / ‖reference‖ − 1, held as a row of one value
    change = report.scale_change_max
    if change is not None:
        got, allowed = _pair(change, limit, 2, percent=True, computed=True)
        table.add_row(
            "row scale change (max)",
            got,
            "none" if limit is None else f"≤ {allowed}",
            status(None if limit is None else change <= limit),
        )
    # outputs a per-row cosine cannot judge (fidelity._scoring): one value per row, and integers
    for name, rel in zip(report.output_names, report.output_relative_error):
        if rel is not None:
            got, allowed = _pair(rel, limit, 2, percent=True, computed=True)
            table.add_row(
                f"relative error, {name}",
                got,
                "none" if limit is None else f"≤ {allowed}",
                status(None if limit is None else rel <= limit),
            )
    top1_ok = (
        None if (t.min_top1 is None or report.top1_agreement is None) else report.top1_agreement >= t.min_top1
    )
    top1, top1_limit = _pair(
        report.top1_agreement, t.min_top1, 2, percent=True, none="not applied (no class-score output)"
    )
    applied = report.top1_outputs()  # named where the model has several outputs (fidelity.Top1Choice)
    label = (
        f"top-1 agreement, {', '.join(applied)}"
        if applied and len(report.output_names) > 1
        else "top-1 agreement"
    )
    table.add_row(label, top1, "none" if t.min_top1 is None else f"≥ {top1_limit}", status(top1_ok))
    exact = zip(
        report.output_names,
        report.output_exact_match(),
        report.output_values_equal,
        report.output_values_compared,
    )
    for name, share, equal, n in exact:
        if share is not None:
            got, least = _pair(share, t.min_top1, 2, percent=True)
            table.add_row(
                f"exact match, {name}",
                f"{equal}/{n} ({got})",
                "none" if t.min_top1 is None else f"≥ {least}",
                status(None if t.min_top1 is None else share >= t.min_top1),
            )
    for c in report.low_precision:
        limit = "|x| ≤ " + " / ".join(_LOW_LIMITS[x] for x in c.typed.split("/"))
        if c.skipped is not None:
            table.add_row(f"{c.typed} overflow, {c.model}", "not checked", limit, "")
            continue
        names = ", ".join(o.tensor for o in c.overflows[:2]) + (" …" if len(c.overflows) > 2 else "")
        table.add_row(
            f"{c.typed} overflow, {c.model}",
            f"{len(c.overflows)}/{c.tensors} tensors" + (f" ({names})" if names else ""),
            limit,
            status(not c.overflows),
        )
    table.add_row("samples (model runs) / rows", f"{report.n_samples} / {report.n_rows}", "", "")
    print_table(table)
    for line in _scoring_notes(report, t) + _low_precision_notes(report):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if report.random_inputs:
        console.print(
            "inputs: random inputs (no calibration data given): this shows whether the models "
            "compute the same function, not accuracy on real data; pass --calibration-data for that",
            style="yellow",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    else:
        chosen = f" ({report.samples_chosen})" if report.samples_chosen else ""  # as report.md says it
        console.print(f"inputs: {report.source}{chosen}", markup=False, highlight=False, soft_wrap=True)
    if preprocess is not None:  # as optimize says it: other options make other tensors of the same images
        console.print(
            f"calibration images made into tensors by: {preprocess.describe()}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if failures:
        for f in failures:
            console.print(Text.assemble(("FAILED", "bold red"), f": {f}"), highlight=False, soft_wrap=True)
    else:
        console.print(Text.assemble(("PASSED", "bold green"), ": all thresholds hold"), soft_wrap=True)


def _pair(
    value: float | None,
    threshold: float | None,
    decimals: int,
    *,
    percent: bool = False,
    computed: bool = False,
    none: str = "n/a",
) -> tuple[str, str]:
    """A figure and its threshold's cells, printed so they compare as the numbers do
    (`fidelity.shown_against`: 0.999987 against 0.99999 is not "1.000000"); `none` for no figure."""
    if value is None:
        return none, "" if threshold is None else shown_threshold(threshold, percent, 2 if percent else None)
    return shown_against(
        value,
        threshold,
        decimals,
        percent=percent,
        threshold_decimals=2 if percent else None,
        computed=computed,
    )


def _scoring_notes(report: FidelityReport, t: Thresholds) -> list[str]:
    """One sentence per way of scoring other than the cosine, where an output is scored so, and
    one where top-1 counted rows whose argmaxes differ between tied classes, and which outputs
    top-1 was applied to where the model has several (or some were left out, or named)."""
    by = report.scored_by()
    notes = []
    if len(report.output_names) > 1 or report.top1_given or any(report.output_top1_skipped):
        notes.append(report.top1_note())
    tied = sum(n for n in report.output_top1_tied if n)
    if tied:
        at = "" if t.min_cosine is None else f" at {t.min_cosine:g}"
        notes.append(
            f"top-1: {tied} row(s) whose argmaxes differ count as agreeing: one model ties the two "
            f"classes within {TOP1_TIE_EPS} epsilons (of the coarsest float either model holds) of "
            f"their value, the other ranks them within {report.top1_tie_limit:.2%}{at} "
            "(√(2·(1 − min cosine)), the relative error --min-cosine allows, at most 14.14 %), and an "
            "argmax of tied values is the first of them, which rounding picks"
        )
    one_value = [n for n, how in zip(report.output_names, by) if how == RELATIVE]
    if one_value:
        limit = relative_error_limit(t.min_cosine)
        allowed = "" if limit is None else f" ({limit:.2%} at {t.min_cosine:g})"
        notes.append(
            f"relative error: {_outputs(one_value)} one value per row, whose cosine is ±1 by its sign "
            "alone, so each row is scored by |reference − candidate| / |reference| (at least 1 % of "
            "the output's largest |reference|), allowed what two equal-length vectors at the "
            f"--min-cosine threshold differ by, √(2·(1 − min cosine)){allowed}"
        )
    integers = [n for n, how in zip(report.output_names, by) if how == EXACT]
    if integers:
        notes.append(
            f"exact match: {_outputs(integers)} integers (labels, indices, counts), so it is scored by "
            "the share of its values equal to the reference's, held to --min-top1"
        )
    return notes


_LOW_LIMITS = {"fp16": "65504", "bf16": "3.39e38"}


def _low_precision_notes(report: FidelityReport) -> list[str]:
    """One line per model with fp16/bf16 intermediates: what onnxruntime CPU computes them in, and
    how far the overflow check went."""
    notes = []
    for c in report.low_precision:
        how = (
            f"not checked for overflow: {c.skipped}"
            if c.skipped is not None
            else f"overflow checked by reading its {c.tensors} {c.typed} tensors back in {c.typed} on the "
            f"first {c.samples} sample(s)"
        )
        notes.append(
            f"{c.typed}: the {c.model} holds {c.typed} tensors; onnxruntime CPU computes most {c.typed} "
            f"ops in fp32 (weights rounded, activations mostly not), so its errors here are smaller than "
            f"on an {c.typed} engine; {how}"
        )
    return notes


def _outputs(names: list[str]) -> str:
    """'output prob holds' / 'outputs a, b hold'."""
    if len(names) == 1:
        return f"output {names[0]} holds"
    return f"outputs {', '.join(names)} each hold"


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
    count: int = typer.Option(
        16,
        "--count",
        metavar="N",
        help="Calibration samples (model runs) at most; from more data, N at an even stride over it.",
    ),
    mean: Optional[str] = mean_option(),
    std: Optional[str] = std_option(),
    bgr: bool = bgr_option(),
    scale: Optional[float] = scale_option(),
    resize: Optional[str] = resize_option(),
    max_abs_error: Optional[float] = typer.Option(
        None, "--max-abs-error", metavar="FLOAT", help="Fail above this max abs error."
    ),
    rel_error: Optional[float] = typer.Option(
        None,
        "--rel-error",
        metavar="FLOAT",
        help="With --max-abs-error: each output may also differ by this fraction of its largest "
        "reference magnitude (abs + rel × magnitude, per output).",
    ),
    min_cosine: float = typer.Option(
        0.999,
        "--min-cosine",
        metavar="FLOAT",
        help="Fail below this per-image cosine similarity; an output of one value per row may "
        "differ by √(2·(1 − FLOAT)) of each row's value (4.47 % at 0.999), each row's length "
        "(the scale a cosine cannot see) may change by as much, and where one model ties two top "
        "classes the other may rank them as far apart for top-1 to agree.",
    ),
    min_top1: float = typer.Option(
        0.99,
        "--min-top1",
        metavar="FLOAT",
        help="Fail below this top-1 agreement (fraction), or this share of an integer output's values equal.",
    ),
    top1_outputs: Optional[str] = typer.Option(
        None,
        "--top1-outputs",
        metavar="NAME[,NAME...]",
        help="The outputs that are class scores, held to --min-top1, or none (default: every [N, classes] "
        "output but a box-like [N, 2..4] beside other outputs, one named box/emb/feat…, and one whose "
        "rows are L2-normalised).",
    ),
    input_shape: Optional[list[str]] = typer.Option(
        None,
        "--input-shape",
        metavar="NAME:SHAPE",
        help="NAME:1x3x224x224 for inputs with dynamic dims (repeatable).",
    ),
    seed: Optional[int] = typer.Option(
        None, "--seed", metavar="N", help="Seed of the random inputs (default 0)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Compare a candidate model's outputs with the reference's on calibration data."""
    preprocess = image_preprocess(calibration_data, mean, std, bgr, scale, resize)
    if calibration_data is not None and seed is not None:
        raise DataError("--seed seeds the random inputs, and --calibration-data gives the data; give one")
    check_threshold_range(min_cosine, min_top1)
    top1_names = parse_top1_outputs(top1_outputs)
    if max_abs_error is not None and not max_abs_error >= 0:  # NaN too: every comparison with it fails
        raise DataError(f"--max-abs-error {max_abs_error}: expected an error bound ≥ 0")
    # NaN passed `< 0` and failed every output (exit 1, identical models too); inf × an all-zero
    # output's magnitude is NaN as well
    if rel_error is not None and (max_abs_error is None or not 0 <= rel_error < math.inf):
        raise DataError(f"--rel-error {rel_error}: needs --max-abs-error, and a fraction ≥ 0")
    requested = parse_input_shapes(input_shape)
    from deployopt.model import require_model_file

    for path in (reference, candidate):  # loaded here, and again by onnxruntime
        require_model_file(path, "verify")
    ref, cand = _load(reference, requested, "reference"), _load(candidate, requested, "candidate")
    ref_inputs, cand_inputs = ref.input_shapes, cand.input_shapes
    notices, cand_notices = list(ref.notices), list(cand.notices)
    check_same_inputs(ref_inputs, cand_inputs)  # at the shapes run: before the memory check and the data
    # every sample is held through the comparison: --count random ones, or as many as the data
    # gives (counted as one, 1000 batches of 512² images, 3.0 GB, went without a warning)
    require_fidelity_memory(
        ref.model,
        cand.model,
        samples_held(calibration_data, ref_inputs, count),
        "try a smaller --input-shape or --count",
    )
    del ref, cand  # compare_models loads both again in onnxruntime
    # from data holding more than --count samples, --count of them at an even stride over it, as
    # optimize's fidelity gate takes its own: the first ones of a class-per-folder set (ImageNet's
    # val/) were its first class alone
    calib = load_calibration(
        calibration_data,
        ref_inputs,
        count=count,
        preprocess=preprocess,
        seed=0 if seed is None else seed,
        spread=True,
    )
    said = list(dict.fromkeys(notices + cand_notices + calib.notices))
    print_notices(said)
    # the library's verify: repeated node names, the inputs, the outputs, fp16 overflow
    given = {} if top1_names is None else {"top1_outputs": top1_names}  # None: chosen per output
    report = verify_models(reference, candidate, calib, min_cosine=min_cosine, **given)
    # and what fitting the data to the inputs' types added (a uint8 input's raw pixels: --mean unused)
    print_notices([n for n in dict.fromkeys(calib.notices) if n not in said])
    thresholds = Thresholds(
        max_abs_error=max_abs_error, rel_error=rel_error, min_cosine=min_cosine, min_top1=min_top1
    )
    failures = report.check(thresholds)
    if json_out:
        # image_preprocess in it: how images became tensors, as optimize's report.json and apply
        # --json say it (null: none read)
        print_json(report.to_json(thresholds))
    else:
        _render(report, thresholds, failures, calib.preprocess)
    if failures:
        raise typer.Exit(1)
