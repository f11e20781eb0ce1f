"""Staircase plots: latency against channel count, with the model's wave boundaries marked.

Used by `deployopt staircase --plot` and by the optimizer's report (per-layer staircases), so it
takes plain lists, not CLI objects.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from deployopt.errors import DeployoptError
from deployopt.fileio import atomic_path

#: What a plot may be written as, by its file name's suffix (no suffix: PNG).
PLOT_FORMATS = {"": "png", ".png": "png", ".svg": "svg", ".pdf": "pdf"}


def plot_format(path: str | os.PathLike[str]) -> str:
    """The image format a plot path asks for; another suffix is a one-line error, before any work
    (a PNG written under a .txt or .jpg name would only surprise whoever opens it)."""
    suffix = Path(path).suffix.lower()
    if suffix not in PLOT_FORMATS:
        raise DeployoptError(f"--plot {path}: name it .png, .svg or .pdf (got {suffix!r})")
    return PLOT_FORMATS[suffix]


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
    marks: Sequence[int] = (),
) -> Path:
    """Write a PNG: predicted staircase (steps), measured medians with bars over the interquartile
    range (first to third quartile: skewed timings put it off-centre, so not median ± IQR/2), dashed
    lines at the predicted wave boundaries (with the wave count after each), optional marked widths."""
    # a Figure of its own on the Agg canvas, not pyplot: matplotlib.use("Agg") switched the whole
    # process's backend (a notebook's inline plots, a GUI's windows) when a library call plotted
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if predicted_us is None and measured_us is None:
        raise ValueError("plot_staircase needs predicted_us or measured_us")
    ks = list(out_channels)
    fig = Figure(figsize=(9, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    if predicted_us is not None:
        ax.step(ks, list(predicted_us), where="mid", color="tab:blue", lw=1.6, label=predicted_label)
    if measured_us is not None:
        pts = [
            (k, m, (measured_quartiles_us[i] if measured_quartiles_us else None) or (m, m))
            for i, (k, m) in enumerate(zip(ks, measured_us))
            if m is not None
        ]
        if pts:
            ax.errorbar(
                [p[0] for p in pts],
                [p[1] for p in pts],
                yerr=[[p[1] - p[2][0] for p in pts], [p[2][1] - p[1] for p in pts]],
                fmt="o",
                ms=3.5,
                color="tab:orange",
                ecolor="0.5",
                capsize=2,
                label=measured_label,
            )
    if waves is not None:
        waves = list(waves)
        for i, x in enumerate(wave_boundaries(ks, waves)):
            ax.axvline(x, color="0.6", ls="--", lw=0.8, label="predicted wave boundary" if i == 0 else None)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.08)  # room for the wave counts above the data
        ytext = ax.get_ylim()[1] * 0.985
        for i in range(len(ks)):
            if i == 0 or waves[i] != waves[i - 1]:
                ax.annotate(
                    wave_label(waves[i]), (ks[i], ytext), fontsize=7, color="0.4", va="top", ha="left"
                )
    for k in marks:
        ax.axvline(k, color="tab:green", lw=1.0, alpha=0.7)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("latency (µs)")
    ax.set_ylim(bottom=0)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    # below the axes, never inside them: measured points far above the predicted steps (a CPU
    # timed against a GPU's model) left no corner free, and "lower right" hid the steps there
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.tight_layout()
    dest = Path(path)
    fmt = plot_format(dest)
    with atomic_path(dest, suffix=f".{fmt}") as tmp:
        fig.savefig(tmp, format=fmt, bbox_inches="tight")  # the legend outside the axes too
    return dest
