"""`deployopt analyze` and `deployopt apply`: channel groups of a model, and a width plan applied.

Thin layer: load, call deployopt.coupling / deployopt.surgery, render with rich. The tables are
built by `groups_table` and `convs_table` so other commands (and per-conv columns such as predicted
waves for a target) can reuse and extend them without touching the analysis.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from rich.table import Table

from deployopt.cli.app import app, console, err_console, parse_input_shapes
from deployopt.coupling import Analysis, ConvLayer, analyze
from deployopt.model import LoadedModel, load_model, save_model
from deployopt.surgery import GroupChange, apply_plan_report, load_plan

#: An extra per-conv column: (header, cell text for one conv). E.g. predicted waves on a target.
ConvColumn = tuple[str, Callable[[ConvLayer], str]]


def _names(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" … (+{len(names) - limit})" if len(names) > limit else "")


def groups_table(analysis: Analysis, title: Optional[str] = None) -> Table:
    """One row per channel group: id, width, free/frozen and why, producers, consumers."""
    table = Table(title=title, show_lines=False)
    table.add_column("group", overflow="fold")
    table.add_column("width", justify="right")
    table.add_column("status", overflow="fold")
    table.add_column("producers", overflow="fold")
    table.add_column("consumers", overflow="fold")
    for g in analysis.groups:
        status = f"[red]frozen[/]: {g.reason}" if g.frozen else "[green]free[/]"
        table.add_row(g.id, str(g.width), status, _names(g.producers), _names(g.consumers))
    return table


def convs_table(
    analysis: Analysis, extra_columns: Sequence[ConvColumn] = (), title: Optional[str] = None
) -> Table:
    """One row per conv: shape and the groups of its input/output channels, plus any extra columns."""
    table = Table(title=title)
    for header in ("conv", "N×C×H×W → K", "kernel", "groups", "in groups", "out group"):
        table.add_column(header, overflow="fold")
    for header, _ in extra_columns:
        table.add_column(header, justify="right")
    for conv in analysis.convs:
        s = conv.shape
        row = [
            conv.name,
            f"{s.n}×{s.c}×{s.h}×{s.w} → {s.k}",
            f"{s.r}×{s.s}/{s.stride[0]}",
            str(s.groups),
            ", ".join(f"{g}[{w}]" for g, w in conv.in_groups),
            conv.out_group or "-",
        ]
        row += [fn(conv) for _, fn in extra_columns]
        table.add_row(*row)
    return table


def analysis_json(loaded: LoadedModel, analysis: Analysis, include_convs: bool = True) -> dict[str, Any]:
    """`{"groups": [...], "convs": [...], "notices": [...]}` as `analyze --json` prints it."""
    data = analysis.to_json()
    if not include_convs:
        data.pop("convs", None)
    data["notices"] = list(loaded.notices)
    return data


def _print_notices(notices: Sequence[str]) -> None:
    for note in notices:
        err_console.print(f"note: {note}", style="yellow", markup=False, highlight=False)


@app.command("analyze")
def analyze_cmd(
    model: Path = typer.Argument(..., help="ONNX model to analyze."),
    input_shape: Optional[list[str]] = typer.Option(
        None, "--input-shape", help="Static shape for an input, NAME:1x3x224x224 (repeatable)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the groups (and convs) as JSON."),
    show_convs: bool = typer.Option(False, "--convs", help="Also list every conv with its groups."),
) -> None:
    """Show which channel counts can change, and which must change together."""
    loaded = load_model(model, parse_input_shapes(input_shape))
    analysis = analyze(loaded.model)
    if as_json:
        typer.echo(json.dumps(analysis_json(loaded, analysis), indent=2))
        return
    _print_notices(loaded.notices)
    free = len(analysis.free_groups())
    console.print(
        groups_table(analysis, title=f"{model.name}: {len(analysis.groups)} channel groups, {free} free")
    )
    if show_convs:
        console.print(convs_table(analysis, title=f"{len(analysis.convs)} convs"))


def changes_table(changes: Sequence[GroupChange]) -> Table:
    table = Table(title="changed groups")
    for header in ("group", "width", "change"):
        table.add_column(header, overflow="fold")
    for c in changes:
        if c.padded:
            what = f"pad +{c.padded} (zero filters)"
        else:
            exact = " — exact" if c.dead_trimmed == c.trimmed else ""
            what = f"trim −{c.trimmed} ({c.dead_trimmed} dead, rest by smallest L1){exact}"
        table.add_row(c.id, f"{c.old} → {c.new}", what)
    return table


@app.command("apply")
def apply_cmd(
    model: Path = typer.Argument(..., help="ONNX model to edit."),
    plan: Path = typer.Option(..., "--plan", help='Width plan: {"widths": {"<group id>": <width>, ...}}.'),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the edited model."),
    input_shape: Optional[list[str]] = typer.Option(
        None, "--input-shape", help="Static shape for an input, NAME:1x3x224x224 (repeatable)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the changes as JSON."),
) -> None:
    """Pad or trim channel groups to the widths of a plan, and write the edited model."""
    widths = load_plan(plan)
    loaded = load_model(model, parse_input_shapes(input_shape))
    analysis = analyze(loaded.model)
    edited, changes = apply_plan_report(loaded.model, widths, analysis)
    save_model(edited, output, external_data=loaded.external_data)
    if as_json:
        out = {"output": str(output), "changes": [c.to_json() for c in changes], "notices": loaded.notices}
        typer.echo(json.dumps(out, indent=2))
        return
    _print_notices(loaded.notices)
    if changes:
        console.print(changes_table(changes))
    unchanged = len(widths) - len(changes)
    tail = f"; {unchanged} planned group(s) already at their width" if unchanged else ""
    console.print(f"wrote {output} ({len(changes)} group(s) changed{tail})", highlight=False, soft_wrap=True)
