"""`deployopt analyze` and `deployopt apply`: channel groups of a model, and a width plan applied.

Thin layer: load, call deployopt.coupling / deployopt.surgery, render with rich. The tables are
built by `groups_table` and `convs_table` so other commands (and per-conv columns such as predicted
waves for a target) can reuse and extend them without touching the analysis.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.table import Table
from rich.text import Text

from deployopt.backends.base import refuse_int8_the_target_lacks
from deployopt.cli.app import (
    CellLines,
    app,
    bgr_option,
    calibration_data_option,
    console,
    image_preprocess,
    input_path,
    mean_option,
    output_option,
    parse_input_shapes,
    print_json,
    print_notices,
    print_table,
    resize_option,
    scale_option,
    std_option,
)
from deployopt.cli.interrupts import output_complete
from deployopt.coupling import Analysis, ConvLayer, analyze, foreign_ops_note
from deployopt.errors import DeployoptError
from deployopt.fidelity import ImagePreprocess
from deployopt.fileio import check_output_file, refuse_input_as_output
from deployopt.model import (
    LoadedModel,
    check_weights_name,
    layer_labels,
    load_model,
    refuse_replacing_weights,
)
from deployopt.surgery import GroupChange, apply_plan_report, read_plan, save_edited
from deployopt.targets import sm_count
from deployopt.waves import fill_percent

#: An extra per-conv column: (header, cell text for one conv). E.g. predicted waves on a target.
ConvColumn = tuple[str, Callable[[ConvLayer], str]]


def _names(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" … (+{len(names) - limit})" if len(names) > limit else "")


def _labelled(name: str, labels: Mapping[str, str]) -> str:
    """A node name with its module path where torch's default exporter gave it none."""
    return f"{name} ({labels[name]})" if name in labels else name


def groups_table(
    analysis: Analysis, title: Optional[str] = None, labels: Mapping[str, str] | None = None
) -> Table:
    """One row per channel group: id, width, free/frozen and why, producers, consumers. One-channel
    statistics (a LayerNorm's mean over the channels) are not rows: they are width 1 by nature.
    `labels` (model.layer_labels) adds the module path to a group named after such a layer."""
    table = Table(title=title, show_lines=False)
    table.add_column("group", overflow="fold")
    table.add_column("width", justify="right")  # figures: never folded (print_table)
    table.add_column("status", overflow="fold")
    table.add_column("producers", overflow="fold")
    table.add_column("consumers", overflow="fold")
    for g in analysis.groups:
        if g.statistic:
            continue
        status = (
            Text.assemble(("frozen", "red"), f": {g.reason}") if g.frozen else Text("free", style="green")
        )
        # a grouped conv's group: its width per conv group, × the conv's groups
        width = f"{g.width} ×{g.repeat}" if g.repeat > 1 else str(g.width)
        table.add_row(_labelled(g.id, labels or {}), width, status, _names(g.producers), _names(g.consumers))
    return table


#: convs_table's columns of names (folded where narrow); the others hold figures, kept whole
_NAME_COLUMNS = frozenset({"conv", "in groups", "out group"})


def convs_table(
    analysis: Analysis,
    extra_columns: Sequence[ConvColumn] = (),
    title: Optional[str] = None,
    labels: Mapping[str, str] | None = None,
) -> Table:
    """One row per conv: shape and the groups of its input/output channels, plus any extra columns."""
    table = Table(title=title)
    for header in ("conv", "N×C×H×W → K", "kernel", "groups", "in groups", "out group"):
        # names fold; a shape, kernel or count stays whole (print_table gives it its longest word)
        table.add_column(header, overflow="fold" if header in _NAME_COLUMNS else "ellipsis")
    for header, _ in extra_columns:
        table.add_column(header, justify="right")
    for conv in analysis.convs:
        s = conv.shape
        row = [
            _labelled(conv.name, labels or {}),
            f"{s.n}×{s.c}×{s.h}×{s.w} → {s.k}",
            f"{s.r}×{s.s}/{s.stride[0]}",
            str(s.groups),
            _segments(conv.in_groups),
            conv.out_group or "-",
        ]
        row += [fn(conv) for _, fn in extra_columns]
        table.add_row(*row)
    return table


def _segments(segs: Sequence[tuple[Optional[str], int]]) -> str:
    """`a[16], b[8]`; runs of one group (a grouped conv's pieces, one per conv group) as `a[4]×32`."""
    runs: list[list[Any]] = []
    for g, w in segs:
        if runs and runs[-1][0] == (g, w):
            runs[-1][1] += 1
        else:
            runs.append([(g, w), 1])
    return ", ".join(f"{g}[{w}]" + (f"×{n}" if n > 1 else "") for (g, w), n in runs)


def analysis_json(loaded: LoadedModel, analysis: Analysis, include_convs: bool = True) -> dict[str, Any]:
    """`{"groups": [...], "convs": [...], "notices": [...]}` as `analyze --json` prints it."""
    data = analysis.to_json()
    if not include_convs:
        data.pop("convs", None)
    data["notices"] = list(loaded.notices)
    labels = layer_labels(loaded.model)
    if labels:  # torch's default exporter: node_conv2d_1 → features.3
        data["layers"] = labels
    return data


@app.command("analyze", rich_help_panel="Channel surgery")
def analyze_cmd(
    model: Path = typer.Argument(
        ..., help="ONNX model to analyze.", parser=input_path("model", "an .onnx file")
    ),
    input_shape: Optional[list[str]] = typer.Option(
        None,
        "--input-shape",
        metavar="NAME:SHAPE",
        help="Static shape for an input, NAME:1x3x224x224 (repeatable).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the groups (and convs) as JSON."),
    show_convs: bool = typer.Option(False, "--convs", help="Also list every conv with its groups."),
    target: Optional[str] = typer.Option(
        None,
        "--target",
        "-t",  # as optimize, staircase, calibrate and targets take it
        metavar="TARGET",
        help="Add per-conv waves and tail fill predicted for this GPU (see `targets`).",
    ),
    sms: Optional[int] = typer.Option(None, "--sms", metavar="N", help="Override the target's SM count."),
    dtype: Optional[str] = typer.Option(
        None,
        "--dtype",
        metavar="DTYPE",
        help="fp16, fp32 or int8: the precision --target predicts (default: int8 for a Q/DQ model, "
        "else fp16, as optimize).",
    ),
) -> None:
    """Show which channel counts can change, and which must change together."""
    from deployopt.waves import DTYPES

    if dtype is not None and dtype not in DTYPES:  # checked without --target too: a typo is named
        raise DeployoptError(f"unknown dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")
    if target is None and (sms is not None or dtype is not None):
        # the groups depend on neither: `analyze M --dtype fp32` printed the same groups and exited
        # 0, as if it had analyzed the model in fp32
        raise DeployoptError(f"{'--sms' if sms is not None else '--dtype'} needs --target")
    gpu = None
    if target is not None:
        from deployopt.targets import get_target

        gpu = get_target(target, sms=sms)
        if dtype is None:  # optimize's default, so analyze predicts what optimize would search in
            from deployopt.backends.base import default_dtype, get_backend

            dtype = default_dtype(get_backend("model"), model, deployment=True)
            if dtype == "int8":
                refuse_int8_the_target_lacks(
                    model,
                    gpu,
                    "analyze the float model it was quantized from (--dtype fp16 predicts fp16 waves "
                    "for this one's convs)",
                )
    loaded = load_model(model, parse_input_shapes(input_shape))
    analysis = analyze(loaded.model)
    rows = None
    if gpu is not None and dtype is not None:
        from deployopt.waves import conv_rows

        rows = conv_rows(analysis, gpu, dtype)
    if as_json:
        data = analysis_json(loaded, analysis)
        if rows is not None and gpu is not None:
            params = gpu.wave_params(dtype)
            data["waves"] = {
                "target": gpu.name,
                "sms": gpu.sms,
                "full_sms": gpu.full_sms or gpu.sms,
                "dtype": dtype,
                "predicted_by": params.describe(),
                "fitted": params.fitted,
                "source": params.source,
                "convs": _with_sources(rows, analysis, params),
                # convs the table leaves out, and why (the text says so; the JSON said nothing)
                "unpriced": [{"name": n, "reason": why} for n, why in analysis.unpriced_reasons()],
            }
        print_json(data)
        return
    print_notices(loaded.notices)
    free = len(analysis.free_groups())
    stats = sum(g.statistic for g in analysis.groups)
    title = f"{model.name}: {len(analysis.groups) - stats} channel groups, {free} free"
    if stats:  # ConvNeXt at opset < 17 spells each LayerNorm out: two per norm
        title += f" (+{stats} one-channel statistics over channels, not listed)"
    labels = layer_labels(loaded.model)
    print_table(groups_table(analysis, title=title, labels=labels))
    foreign = foreign_ops_note(loaded.model)
    if foreign:
        console.print(f"note: {foreign}", markup=False, highlight=False, soft_wrap=True)
    if show_convs:
        print_table(convs_table(analysis, title=f"{len(analysis.convs)} convs", labels=labels))
    if rows is not None and gpu is not None:
        if rows:  # a model of 1-D or 3-D convs only has none: no empty table, no "(n/a)" predictor
            title = f"waves on {gpu.name} ({sm_count(gpu.sms)}, {dtype})"
            print_table(waves_table(rows, title=title, labels=labels))
            console.print(
                f"Latencies are predicted by the {gpu.wave_params(dtype).describe()}, not measured.",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        _print_size_classes(rows)
        unpriced = analysis.unpriced_reasons()
        if unpriced:  # the table left them out without a word (a Conv1d model printed an empty one)
            left_out = " and the table leaves out" if rows else ""
            parts = []
            for why in dict.fromkeys(w for _, w in unpriced):
                names = [n for n, w in unpriced if w == why]
                parts.append(f"{why}: {', '.join(names[:8])}{', …' if len(names) > 8 else ''}")
            console.print(
                f"{len(unpriced)} conv(s) the wave model does not price{left_out} ({'; '.join(parts)})",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


def _with_sources(rows: Sequence[dict[str, Any]], analysis: Analysis, params: Any) -> list[dict[str, Any]]:
    """Each row with the `source` of what priced it: a depthwise conv is priced by the wave model's
    depthwise terms (`dw_source`), not by the GEMM fit that `waves.source` names, as staircase's
    `predictor.source` says for a depthwise conv."""
    depthwise = {c.name for c in analysis.convs if c.shape.is_depthwise}
    return [{**r, "source": params.source_for(r["name"] in depthwise)} for r in rows]


def _print_size_classes(rows: Sequence[dict[str, Any]], most: int = 8) -> None:
    """Which convs are not wave-bound, and what that means: a launch-bound conv's "nearest
    wave-aligned widths" are not worth acting on. (Per conv in --json: `size_class`.)"""
    from deployopt.waves import LAUNCH_BOUND_BELOW, SIZE_CLASS_MEANING, WAVE_BOUND_FROM

    for cls, bound in (("launch-bound", LAUNCH_BOUND_BELOW), ("small", WAVE_BOUND_FROM)):
        names = [r["name"] for r in rows if r["size_class"] == cls]
        if not names:
            continue
        shown = ", ".join(names[:most]) + (f", … ({len(names) - most} more)" if len(names) > most else "")
        console.print(
            f"{len(names)} of {len(rows)} convs are {cls} (predicted under {bound:g}× the fixed cost"
            f"{': ' + shown if cls == 'launch-bound' else ''}): {SIZE_CLASS_MEANING[cls]}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def waves_table(rows: Sequence[dict[str, Any]], title: str, labels: Mapping[str, str] | None = None) -> Table:
    """Per conv: implicit-GEMM dims, tile, blocks, waves, tail fill, and the wave-aligned widths of
    each free group it touches, so layers that waste a half-empty last wave stand out."""
    table = Table(title=title)
    for header in ("conv", "GEMM M×N×K", "tile", "blocks", "waves", "tail fill", "pred. µs"):
        # the conv's name folds; a figure (GEMM 1024×16×27) was split over two lines at 80 columns
        table.add_column(
            header,
            justify="left" if header == "conv" else "right",
            overflow="fold" if header == "conv" else "ellipsis",
        )
    table.add_column("nearest wave-aligned widths (Δ pred. µs)", overflow="fold")
    for r in rows:
        tips = []
        for w in r["widths"]:
            parts = [f"{w['group']} ({w['role']}) {w['width']}:"]
            for key, arrow in (("below", "↓"), ("above", "↑")):
                if key == "above" and w.get(key) == w["width"]:
                    # "↑16 (+0.0)" for a width of 16 read as a move up to where it already is
                    parts.append(f"={w['width']} (ends a step)")
                elif w.get(key) is not None:
                    parts.append(f"{arrow}{w[key]} ({w[key + '_delta_us']:+.1f})")
            if w.get("below") is None and w.get("above") is None:
                lo, hi = w.get("searched") or (w["width"] // 2, 2 * w["width"])
                parts.append(f"flat {lo}–{hi} (no step)")
            tips.append(" ".join(parts))
        table.add_row(
            _labelled(r["name"], labels or {}),
            f"{r['gemm_m']}×{r['gemm_n']}×{r['gemm_k']}",
            "×".join(str(t) for t in r["tile"]),
            str(r["blocks"]),
            str(r["waves"]),
            f"{fill_percent(r['tail_fill'])} %",
            f"{r['predicted_us']:.1f}",
            CellLines(tips) if tips else "-",  # a tip a line; a newline in a group's name escaped
        )
    return table


def changes_table(
    changes: Sequence[GroupChange], ranked_by: str = "smallest L1", listed: Collection[str] = ()
) -> Table:
    """One row per changed group; `ranked_by` says how a trim chose the live channels it dropped,
    except for the groups in `listed`, which kept the channels the plan lists."""
    table = Table(title="changed groups")
    for header in ("group", "width", "change"):  # `16 → 24` whole; a name, or prose, folds
        table.add_column(header, overflow="ellipsis" if header == "width" else "fold")
    for c in changes:
        if c.padded:
            what = f"pad +{c.padded} (zero filters)"
        elif c.id in listed:
            what = f"trim −{c.trimmed} ({c.dead_trimmed} dead; keeps the channels the plan lists)"
        else:
            exact = " — exact" if c.dead_trimmed == c.trimmed else ""
            what = f"trim −{c.trimmed} ({c.dead_trimmed} dead, rest by {ranked_by}){exact}"
        table.add_row(c.id, f"{c.old} → {c.new}", what)
    return table


def _trim_importance(
    loaded: LoadedModel,
    analysis: Analysis,
    groups: Sequence[str],
    data: Path,
    count: Optional[int],
    preprocess: ImagePreprocess,
    recorded: Optional[tuple[int, Path]] = None,
) -> tuple[Optional[dict[str, Any]], list[str], str, Optional[ImagePreprocess]]:
    """The channel ranking of `groups` on `data` (deployopt.importance.activation_importance),
    images made into tensors by `preprocess`; None when there are none (no model run then). The
    samples are those `optimize --mode trim` ranks on (fidelity.load_trim_samples: none of its
    fidelity gate's), so a plan that lists no kept channels trims as optimize did (a group's
    scores are the same ranked alone or with all, as optimize ranks them: checked bit for bit on
    the zoo's models), by filter L1 where it does (data of one sample); `count` given: the first
    `count`. `recorded`: the gate's sample count the optimize run recorded, and its report (a
    library run with another `fidelity_samples` dealt its ranking samples around a gate of that
    many; `_recorded_gate`); None: the default gate's. Also what loading the data said, which
    samples (or why L1), and the preprocessing the images got (None: arrays)."""
    from deployopt.fidelity import check_feedable, load_calibration, load_trim_samples
    from deployopt.importance import activation_importance

    if count is None:
        gate = {} if recorded is None else {"gate": recorded[0]}
        split = load_trim_samples(data, dict(loaded.input_shapes), preprocess, **gate)
        if split.ranking is None:  # as optimize: one sample is its gate's, the trims go by filter L1
            why = "ranked by filter L1, as optimize ranks when the calibration data holds one sample"
            return None, split.notices, why, None
        calib = split.ranking
        said = "" if recorded is None else f"; a gate of {recorded[0]} sample(s), as {recorded[1]} records"
        where = (
            f"ranked on {len(calib)} calibration sample(s), those optimize ranks on (its fidelity "
            f"gate checks the other {len(split.gate)} of {split.taken}{said})"
        )
    else:
        calib = load_calibration(data, dict(loaded.input_shapes), count=count, preprocess=preprocess)
        where = f"ranked on the first {len(calib)} calibration sample(s) (--count; optimize ranks on others)"
    if not groups:
        return None, calib.notices, where, calib.preprocess
    check_feedable(calib, loaded.model)
    scores = activation_importance(loaded.model, analysis, list(groups), calib.samples)
    return scores, calib.notices, where, calib.preprocess


def _recorded_gate(plan: Path) -> Optional[tuple[int, Path]]:
    """The fidelity gate's sample count recorded by the optimize run whose OUTDIR holds `plan`
    (report.json's `fidelity_samples`, with --mode trim and data), and that report: its ranking's
    samples were dealt around a gate of that many (fidelity.load_trim_samples), and a library run
    with another `fidelity_samples` than the default 4 ranked on other samples than apply did.
    None, for the default gate, where no optimize report is beside the plan (a plan kept elsewhere,
    one read from a pipe) or it records no usable count (an older optimize)."""
    import json

    report = plan.parent / "report.json"
    try:
        if not plan.is_file() or not report.is_file():
            return None
        data = json.loads(report.read_text())
    except (OSError, ValueError, RecursionError):  # unreadable or not JSON: nothing recorded
        return None
    if not isinstance(data, dict) or data.get("tool") != "deployopt optimize":
        return None
    n = data.get("fidelity_samples")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        return None
    return n, report


def _check_plan(
    plan: Path,
    analysis: Analysis,
    widths: dict[str, int],
    keep: dict[str, list[int]],
    original: Optional[dict[str, int]] = None,
    fingerprint: Optional[dict[str, list[float]]] = None,
    model: Any = None,
) -> dict[str, list[int]]:
    """The plan's groups, widths, recorded original widths and fingerprints (of `model`) and kept
    channels checked against the model, each error naming the plan file (an unknown group read as
    if the model were wrong), as read_plan's own errors do; the kept channels by group id."""
    from deployopt.errors import PlanError
    from deployopt.surgery import validate_fingerprint, validate_keep, validate_original, validate_plan

    try:
        validate_plan(analysis, widths)
        validate_original(analysis, original or {})  # another model, or its nodes reordered
        if fingerprint and model is not None:  # groups of equal width swapped: their weights differ
            validate_fingerprint(model, analysis, fingerprint, keep)
        analysis.plan_by_id(widths)
        return validate_keep(analysis, widths, keep)
    except PlanError as exc:
        raise PlanError(f"{plan}: {exc}") from None


def _unlisted_notice(unlisted: Sequence[str], ranked_on: Optional[str]) -> str:
    """One line: trimmed groups whose kept channels the plan does not list are ranked again, and how
    (a plan written by hand, or by an optimize from before plans listed them)."""
    how = ranked_on or "ranked by filter L1, as optimize without --calibration-data"
    return (
        f"the plan lists no kept channels for {len(unlisted)} trimmed group(s) ({_names(list(unlisted))}; "
        f"written by hand or by an older optimize): {how}"
    )


@app.command("apply", rich_help_panel="Channel surgery")
def apply_cmd(
    model: Path = typer.Argument(
        ..., help="ONNX model to edit.", parser=input_path("model", "an .onnx file")
    ),
    plan: Path = typer.Option(
        ...,
        "--plan",
        help='Width plan: {"widths": {"<group id>": <width>, ...}}, optionally with "keep": {"<group id>": '
        "[channel, ...]} for trimmed groups (optimize's plan.json lists them: applied again, it gives "
        'the model optimize wrote), "original": {"<group id>": <width>}, the widths of the model '
        'it was written for, and "fingerprint": {"<group id>": [8 numbers]}, projections of each '
        "group's weights there (a model whose weights differ where the plan keeps channels is refused).",
        parser=input_path("--plan", "a plan file (.json)"),
        metavar="FILE",
    ),
    output: Path = output_option(..., "-o", "--output", help="Where to write the edited model."),
    input_shape: Optional[list[str]] = typer.Option(
        None,
        "--input-shape",
        metavar="NAME:SHAPE",
        help="Static shape for an input, NAME:1x3x224x224 (repeatable).",
    ),
    calibration_data: Optional[Path] = calibration_data_option(
        "Images (png/jpg/jpeg/bmp, made into tensors by --scale/--mean/--std/--bgr/--resize), .npy "
        "or .npz (fed as they are): a trim "
        "drops the channels that add least to the next layers on this data (mean |activation| × "
        "reader weight norm) instead of the smallest filters (L1), for trimmed groups whose kept "
        "channels the plan does not list. Dead channels go first either way."
    ),
    count: Optional[int] = typer.Option(
        None,
        "--count",
        metavar="N",
        help="With --calibration-data: rank on the first N samples (model runs) instead of those "
        "optimize ranks on (up to 16 spread over the data, none of those its fidelity gate checks).",
    ),
    mean: Optional[str] = mean_option(),
    std: Optional[str] = std_option(),
    bgr: bool = bgr_option(),
    scale: Optional[float] = scale_option(),
    resize: Optional[str] = resize_option(),
    as_json: bool = typer.Option(False, "--json", help="Print the changes as JSON."),
) -> None:
    """Pad or trim channel groups to the widths of a plan, and write the edited model."""
    if count is not None and calibration_data is None:  # it counts data samples: alone it did nothing
        raise DeployoptError("--count needs --calibration-data")
    preprocess = image_preprocess(calibration_data, mean, std, bgr, scale, resize)
    check_output_file(output)
    refuse_input_as_output(
        output,
        [("plan", plan), *([("calibration data", calibration_data)] if calibration_data else [])],
        "-o/--output",
    )
    planned = read_plan(plan)
    widths = planned.widths
    loaded = load_model(model, parse_input_shapes(input_shape))
    if loaded.external_data:  # OUTPUT (or OUTPUT.data) renamed over the weights the input reads
        check_weights_name(output)  # before the work, not when the edited model is saved
        written_files = [output, output.with_name(output.name + ".data")]
        refuse_replacing_weights(model, written_files, "give another -o/--output")
    analysis = analyze(loaded.model)
    keep = _check_plan(
        plan, analysis, widths, planned.keep, planned.original, planned.fingerprint, loaded.model
    )
    by_id = analysis.plan_by_id(widths)
    trimmed = [g for g, w in by_id.items() if int(w) < analysis.group(g).width]
    unlisted = [g for g in trimmed if g not in keep]  # ranked again (a hand-written or older plan)
    importance, data_notices, samples_used, fed = None, [], None, None
    if calibration_data is not None:
        # a plan from an OUTDIR: ranked on the samples that run ranked on, its gate's count recorded
        recorded = _recorded_gate(plan) if unlisted and count is None else None
        importance, data_notices, samples_used, fed = _trim_importance(
            loaded, analysis, unlisted, calibration_data, count, preprocess, recorded
        )
    edited, changes = apply_plan_report(loaded.model, widths, analysis, importance, keep)
    # the batch, height and width a dynamic export left open given back, as a library caller's
    restored = save_edited(edited, output, loaded)
    output_complete(output)  # a Ctrl-C from here on (notices, the table) says it is complete
    said = []
    if unlisted:
        said.append(_unlisted_notice(unlisted, samples_used))
    elif trimmed and calibration_data is not None:
        said.append("--calibration-data unused: the plan lists the channels each trimmed group keeps")
    notices = [*loaded.notices, *data_notices, *said, *restored]
    # the image options the ranking's tensors were made with, as applied (a 1-channel input's
    # grayscale values); null: no ranking on images
    ranked_on = None if importance is None else fed
    if as_json:
        # how the trimmed live channels were chosen; null when the plan trims none (nothing ranked),
        # "plan" when every trimmed group kept the channels the plan lists (none was ranked)
        order = "l1" if importance is None else "activation"
        if not any(c.trimmed for c in changes):
            order = None
        elif not unlisted:
            order = "plan"
        out = {
            "output": str(output),
            "changes": [c.to_json() for c in changes],
            "trim_order": order,
            "image_preprocess": None if ranked_on is None else ranked_on.to_json(),
            "notices": notices,
        }
        print_json(out)
        return
    print_notices(notices)
    if changes:
        ranked_by = "smallest L1" if importance is None else "least activation × weight on the data"
        if ranked_on is not None:
            ranked_by += f" (images: {ranked_on.describe()})"
        print_table(changes_table(changes, ranked_by, listed=keep))
    unchanged = len(by_id) - len(changes)  # a group named twice (id and producer) is one group
    tail = f"; {unchanged} planned group(s) already at their width" if unchanged else ""
    console.print(f"wrote {output} ({len(changes)} group(s) changed{tail})", highlight=False, soft_wrap=True)
