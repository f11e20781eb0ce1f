"""Staircase plots: latency against channel count, with the model's wave boundaries marked.

Used by `deployopt staircase --plot` and by the optimizer's report (per-layer staircases), so it
takes plain lists, not CLI objects.
"""

from __future__ import annotations

import os
import sys
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deployopt.errors import DeployoptError, first_line, reraise_interrupt
from deployopt.fileio import atomic_path

#: What a plot may be written as, by its file name's suffix (no suffix: PNG).
PLOT_FORMATS = {"": "png", ".png": "png", ".svg": "svg", ".pdf": "pdf"}

#: Colour and line style of each marked width, in the order given (the report: original,
#: round-up to 8, chosen): two identical green lines left the reader guessing which was which.
MARK_STYLES = (("0.25", "-"), ("tab:purple", ":"), ("tab:red", "--"), ("tab:brown", "-."))

#: Longest conv or group name a title or axis label shows whole (short_name cuts the middle): a
#: 190-character TF export name stretched the picture to 3839 pixels, the plot a box in its middle.
NAME_LIMIT = 60

#: Characters a title, axis label and legend entry are wrapped at (a 180-character legend entry in
#: one line widened the picture and squashed the axes).
TITLE_WIDTH, LEGEND_WIDTH = 100, 58

#: Latency units of the y axis: the first under which the largest value stays below 10,000 (a
#: Nano's 1e6 µs read "0.2 … 1.2" with a small "1e6" in the corner).
UNITS = (("µs", 1.0), ("ms", 1e3), ("s", 1e6))


#: the metadata key each format stamps with the time of writing (SVG's dc:date, PDF's
#: /CreationDate): left out, so two identical runs write the same bytes
_NO_DATE: dict[str, dict[str, None]] = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}


def plot_format(path: str | os.PathLike[str]) -> str:
    """The image format a plot path asks for; another suffix is a one-line error, before any work
    (a PNG written under a .txt or .jpg name would only surprise whoever opens it)."""
    suffix = Path(path).suffix.lower()
    if suffix not in PLOT_FORMATS:
        raise DeployoptError(f"--plot {path}: name it .png, .svg or .pdf (got {suffix!r})")
    return PLOT_FORMATS[suffix]


def load_matplotlib() -> None:
    """Import matplotlib, or a one-line DeployoptError saying why not; `staircase --plot` calls it
    before any timing. An MPLBACKEND that matplotlib rejects ('inline', a typo, 'agg ') made its
    import raise ValueError: a traceback after the sweep, or at the end of optimize with its results
    lost. The plots draw on the Agg canvas directly and never use the backend, so such a value is
    left out of the import (and put back after it); a valid one (a notebook's) is kept."""
    try:
        try:
            import matplotlib
        except ValueError:  # rcParams refused MPLBACKEND (or a value like it): import without it
            # afresh: the submodules the failed import loaded hold the failed package's rcParams
            for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
                del sys.modules[name]
            saved = os.environ.pop("MPLBACKEND", None)
            try:
                import matplotlib  # noqa: F401
            finally:
                if saved is not None:
                    os.environ["MPLBACKEND"] = saved
    except ImportError as exc:
        reraise_interrupt(exc)  # interrupted, not missing
        raise DeployoptError(f"plots need matplotlib (pip install matplotlib): {first_line(exc)}") from exc
    except ValueError as exc:
        raise DeployoptError(f"plots need matplotlib, whose import failed: {first_line(exc)}") from exc


def short_name(name: str, limit: int = NAME_LIMIT) -> str:
    """`name` cut in the middle to at most `limit` characters ('…' where it was cut): a deep export's
    names share long prefixes and differ at the end, so both ends stay."""
    if len(name) <= limit:
        return name
    head = (limit - 1) // 2
    return f"{name[:head]}…{name[len(name) - (limit - 1 - head) :]}"


def _wrapped(text: str, width: int) -> str:
    """`text` in lines of at most `width` characters (a name without spaces is broken too)."""
    return "\n".join(textwrap.wrap(text, width, break_on_hyphens=False)) or text


def wave_boundaries(out_channels: Sequence[int], waves: Sequence[int]) -> list[float]:
    """x positions (midway between two widths) where the predicted wave count changes."""
    return [
        (out_channels[i] + out_channels[i + 1]) / 2
        for i in range(len(out_channels) - 1)
        if waves[i] != waves[i + 1]
    ]


def wave_label(waves: int) -> str:
    """'1 wave', '3 waves': a plot's mark after each predicted wave boundary ('1 waves' before)."""
    return f"{waves} wave{'' if waves == 1 else 's'}"


def plot_staircase(
    out_channels: Sequence[int],
    path: str | os.PathLike[str],
    *,
    predicted_us: Sequence[float] | None = None,
    waves: Sequence[int] | None = None,
    measured_us: Sequence[float | None] | None = None,
    measured_quartiles_us: Sequence[tuple[float, float] | None] | None = None,
    title: str = "",
    predicted_label: str = "predicted",
    measured_label: str = "measured (median, bars from the first to the third quartile)",
    xlabel: str = "output channels",
    marks: Sequence[int | tuple[str, int]] = (),
) -> Path:
    """Write a PNG: predicted staircase (steps), measured medians with bars over the interquartile
    range (first to third quartile: skewed timings put it off-centre, so not median ± IQR/2), dashed
    lines at the predicted wave boundaries (with the wave count after each, where it fits), marked
    widths (`(label, width)`: in the legend as 'label width', each in a style of its own).

    Titles, labels and legend entries are shown as given, never as mathtext: a conv named
    `price$\\frac{a$` ended optimize with a traceback after its search, and `a$x^2$b` was drawn
    as 'ax²b'. Glyphs the font lacks (a name in Chinese) draw as boxes without a warning each."""
    if predicted_us is None and measured_us is None:
        raise ValueError("plot_staircase needs predicted_us or measured_us")
    load_matplotlib()
    import matplotlib

    # svg.hashsalt: the SVG's element ids from a fixed salt, not random ones; with no date in its
    # metadata (below) the same plot is the same bytes, to diff and keep in git, as PNGs were
    rc = {"text.usetex": False, "svg.hashsalt": "deployopt"}
    with warnings.catch_warnings(), matplotlib.rc_context(rc):
        # matplotlib's own 'Glyph 21367 (...) missing from font(s) DejaVu Sans.', one per glyph and
        # two lines each on stderr, with plots.py's source line: the picture shows a box instead
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
        fig = _figure(
            list(out_channels),
            predicted_us=predicted_us,
            waves=waves,
            measured_us=measured_us,
            measured_quartiles_us=measured_quartiles_us,
            title=title,
            predicted_label=predicted_label,
            measured_label=measured_label,
            xlabel=xlabel,
            marks=marks,
        )
        dest = Path(path)
        fmt = plot_format(dest)
        with atomic_path(dest, suffix=f".{fmt}") as tmp:
            fig.savefig(tmp, format=fmt, bbox_inches="tight", metadata=_NO_DATE.get(fmt))  # legend too
    return dest


def _figure(
    ks: list[int],
    *,
    predicted_us: Sequence[float] | None,
    waves: Sequence[int] | None,
    measured_us: Sequence[float | None] | None,
    measured_quartiles_us: Sequence[tuple[float, float] | None] | None,
    title: str,
    predicted_label: str,
    measured_label: str,
    xlabel: str,
    marks: Sequence[int | tuple[str, int]],
) -> Any:
    """The staircase Figure (plot_staircase's drawing, under its warning filter and rc settings)."""
    # a Figure of its own on the Agg canvas, not pyplot: matplotlib.use("Agg") switched the whole
    # process's backend (a notebook's inline plots, a GUI's windows) when a library call plotted
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    seen = [v for v in predicted_us or () if v is not None] + [v for v in measured_us or () if v is not None]
    seen += [q[1] for q in measured_quartiles_us or () if q is not None]
    top = max(seen, default=0.0)
    unit, scale = next(((u, s) for u, s in UNITS if top < 1e4 * s), UNITS[-1])
    if predicted_us is not None:
        # one width: a step of one point is a line of no length, so a marker shows it
        ax.step(
            ks,
            [v / scale for v in predicted_us],
            where="mid",
            color="tab:blue",
            lw=1.6,
            marker="o" if len(ks) == 1 else None,
            ms=4,
            label=predicted_label,
        )
    if measured_us is not None:
        pts = [
            (k, m, (measured_quartiles_us[i] if measured_quartiles_us else None) or (m, m))
            for i, (k, m) in enumerate(zip(ks, measured_us))
            if m is not None
        ]
        if pts and not any(measured_quartiles_us or ()):  # no spread: dots, and no bar in the legend
            ax.plot(
                [p[0] for p in pts],
                [p[1] / scale for p in pts],
                "o",
                ms=3.5,
                color="tab:orange",
                label=measured_label,
            )
        elif pts:
            ax.errorbar(
                [p[0] for p in pts],
                [p[1] / scale for p in pts],
                yerr=[[(p[1] - p[2][0]) / scale for p in pts], [(p[2][1] - p[1]) / scale for p in pts]],
                fmt="o",
                ms=3.5,
                color="tab:orange",
                ecolor="0.5",
                capsize=2,
                label=measured_label,
            )
    labels = []
    if waves is not None:
        waves = list(waves)
        for i, x in enumerate(wave_boundaries(ks, waves)):
            ax.axvline(x, color="0.6", ls="--", lw=0.8, label="predicted wave boundary" if i == 0 else None)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.08)  # room for the wave counts above the data
        ytext = ax.get_ylim()[1] * 0.985
        # each count at its boundary (the first at the first width), just right of the dashed line
        starts = [(float(ks[0]), waves[0])] + [
            ((ks[i - 1] + ks[i]) / 2, waves[i]) for i in range(1, len(ks)) if waves[i] != waves[i - 1]
        ]
        for x, n in starts:
            labels.append(
                ax.annotate(
                    wave_label(n),
                    (x, ytext),
                    xytext=(2, 0),
                    textcoords="offset points",
                    fontsize=7,
                    color="0.4",
                    va="top",
                    ha="left",
                    # over the dashed lines, which crowd where a sweep's count flips back and forth
                    bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85},
                    zorder=5,
                )
            )
    for label, x, style in _merged_marks(marks):
        color, ls = MARK_STYLES[style % len(MARK_STYLES)]
        ax.axvline(x, color=color, ls=ls, lw=1.2, alpha=0.85, label=label or None)
    ax.set_xlabel(_wrapped(xlabel, TITLE_WIDTH), parse_math=False)
    ax.set_ylabel(f"latency ({unit})")
    ax.set_ylim(bottom=0)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    if title:
        ax.set_title(_wrapped(title, TITLE_WIDTH), fontsize=10, parse_math=False)
    ax.grid(alpha=0.3)
    # below the axes, never inside them: measured points far above the predicted steps (a CPU
    # timed against a GPU's model) left no corner free, and "lower right" hid the steps there
    handles, texts = ax.get_legend_handles_labels()
    legend = ax.legend(
        handles,
        [_wrapped(t, LEGEND_WIDTH) for t in texts],
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=2,
        frameon=False,
    )
    for text in legend.get_texts():
        text.set_parse_math(False)
    fig.tight_layout()
    _thin(fig, ax, labels)
    return fig


def _merged_marks(marks: Sequence[int | tuple[str, int]]) -> list[tuple[str, int, int]]:
    """`(legend label, width, style)` for each marked width, the labels of one width joined:
    'original, round-up to 8 128' (an original already a multiple of 8), in the style of the first
    mark given at that width (MARK_STYLES by position: each kind of mark keeps its own)."""
    merged: dict[int, tuple[int, list[str]]] = {}
    for i, mark in enumerate(marks):
        label, x = mark if isinstance(mark, tuple) else ("", mark)
        names = merged.setdefault(x, (i, []))[1]
        if label:
            names.append(label)
    return [(f"{', '.join(names)} {x}" if names else "", x, i) for x, (i, names) in merged.items()]


def _thin(fig: Any, ax: Any, labels: list[Any]) -> None:
    """Drop the wave counts that would print over the one before (a step-1 sweep changes its wave
    count dozens of times: 70 of 76 labels overlapped into a smear) or repeat it (once those
    between are dropped, '686 waves' twice says nothing), and end one at its boundary where it
    would run past the axes' right edge."""
    if not labels:
        return
    renderer = fig.canvas.get_renderer()
    right = ax.get_window_extent(renderer).x1
    edge, last = float("-inf"), None  # right end and text of the last count kept
    for label in labels:
        box = label.get_window_extent(renderer)
        if box.x1 > right:
            label.set_horizontalalignment("right")
            label.xyann = (-2, 0)
            box = label.get_window_extent(renderer)
        if box.x0 < edge + 3 or label.get_text() == last:
            label.remove()
            continue
        edge, last = box.x1, label.get_text()
