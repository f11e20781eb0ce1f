"""plots.plot_staircase and `staircase --plot` from the bug bash on the plots: names are text, not
mathtext; a rejected MPLBACKEND or a missing matplotlib costs no sweep and no traceback; one width
is drawn; --runs 1 promises no bars; dense sweeps keep their wave counts readable and their y axis
in units without an offset; a glyph the font lacks is no warning on stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_runner import run_cli
from PIL import Image

from deployopt.plots import plot_staircase


def svg_text(path: Path, **kw: Any) -> str:
    """The SVG plot_staircase writes, its texts kept as text (not glyph paths)."""
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none"}):
        plot_staircase([16, 32, 48], path, predicted_us=[1.0, 1.0, 2.0], waves=[1, 1, 2], **kw)
    return path.read_text()


# --- 1: names are drawn as written ------------------------------------------------------------------


def test_a_name_with_dollars_is_text_not_mathtext(tmp_path: Path) -> None:
    """`a$x^2$b` was drawn as 'ax²b', and `price$\\frac{a$` raised ParseSyntaxException."""
    svg = svg_text(
        tmp_path / "s.svg",
        title="a$x^2$b: output channels",
        xlabel="output channels (group price$\\frac{a$)",
        predicted_label="predicted $5 fit$",
        marks=[("chosen $", 32)],
    )
    for text in ("a$x^2$b: output channels", "output channels (group price$\\frac{a$)", "predicted $5 fit$"):
        assert f">{text}<" in svg, text
    assert ">chosen $ 32<" in svg


# --- 2: MPLBACKEND and a missing matplotlib ------------------------------------------------------------


def _fresh(tmp_path: Path, backend: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A new interpreter (matplotlib not yet imported) under MPLBACKEND=`backend`."""
    env = dict(os.environ, MPLBACKEND=backend, HOME=str(tmp_path), MPLCONFIGDIR=str(tmp_path / "mpl"))
    env["DEPLOYOPT_CACHE_DIR"] = str(tmp_path / "cache")
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("backend", ["inline", "agg "])
def test_a_rejected_mplbackend_still_plots_and_is_put_back(tmp_path: Path, backend: str) -> None:
    """matplotlib's import raised ValueError for it: the plot a traceback after the sweep. The plots
    never use the backend, so the value is left out of the import and put back after it."""
    code = (
        "import os, sys; from deployopt.plots import plot_staircase; "
        "plot_staircase([16, 32], sys.argv[1], predicted_us=[1.0, 2.0]); "
        "import matplotlib; print(repr(os.environ['MPLBACKEND']), matplotlib.rcParams['font.size'])"
    )
    done = _fresh(tmp_path, backend, sys.executable, "-c", code, str(tmp_path / "p.png"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{backend!r} 10.0"
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_staircase_plot_under_a_rejected_mplbackend(tmp_path: Path) -> None:
    """`MPLBACKEND=inline deployopt staircase --plot`: a 50-line traceback after the table."""
    deployopt = str(Path(sys.executable).with_name("deployopt"))
    args = ["staircase", "--target", "h200", "--input", "1x32x14x14", "--out-channels", "16:64:16"]
    done = _fresh(tmp_path, "inline", deployopt, *args, "--plot", str(tmp_path / "s.png"))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_staircase_plot_without_matplotlib_is_one_line_before_measuring(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """Only the suffix was checked first: the import failed after the sweep was measured."""
    from deployopt.backends import base

    def no_backend(name: str) -> Any:
        raise AssertionError("measured although nothing can be plotted")

    monkeypatch.setattr(base, "get_backend", no_backend)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    code, _, err = run_cli(
        monkeypatch, capsys, "staircase", "--target", "h200", "--input", "8x128x28x28",
        "--out-channels", "16:64:16", "--measure", "fake", "--plot", str(tmp_path / "s.png"),
    )  # fmt: skip
    assert code != 0 and err.startswith("error: plots need matplotlib (pip install matplotlib): "), err
    assert err.strip().count("\n") == 0
    assert not (tmp_path / "s.png").exists()


# --- 4: one width ---------------------------------------------------------------------------------------


def test_one_width_is_drawn(tmp_path: Path) -> None:
    """A step of one point is a line of no length: the PNG showed empty axes under 'predicted'."""
    plot_staircase([64], tmp_path / "s.png", predicted_us=[6.8], waves=[1])
    pixels = np.asarray(Image.open(tmp_path / "s.png").convert("RGB")).astype(int)
    axes = pixels[: int(pixels.shape[0] * 0.8)]  # above the legend, which sits below the axes
    blue = (np.abs(axes - (31, 119, 180)) < 25).all(axis=2).sum()  # tab:blue
    assert blue > 20, blue


# --- 5: --runs 1 -------------------------------------------------------------------------------------------


def test_runs_1_legend_promises_no_bars(monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path) -> None:
    """One run has no spread (the table says IQR n/a) and no bar is drawn, but the legend said
    'median of 1 run, bars from the first to the third quartile'."""
    from deployopt import plots

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(plots, "plot_staircase", lambda *a, **kw: calls.append(kw))
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    base = ["staircase", "--target", "h200", "--input", "1x32x14x14", "--out-channels", "16:48:16"]
    code, _, err = run_cli(monkeypatch, capsys, *base, "--measure", "ort", "--runs", "1", "--plot", "p.png")
    assert code == 0, err
    (kw,) = calls
    assert kw["measured_label"].endswith("(median of 1 run, no spread)"), kw["measured_label"]
    assert all(q is None for q in kw["measured_quartiles_us"])


# --- 7: dense sweeps ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "dims", "unit"), [("h200", "8x128x28x28", "µs"), ("nano", "8x256x56x56", "ms")]
)
def test_a_dense_sweep_keeps_its_wave_counts_apart(
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    tmp_path: Path,
    figures: list[Any],
    target: str,
    dims: str,
    unit: str,
) -> None:
    """1:4096:1: 70 of 76 wave counts printed over each other, the last past the axes' right edge;
    the Nano's ~1e6 µs read '0.2 … 1.2' with a small '1e6' in the corner."""
    args = ["staircase", "--target", target, "--input", dims, "--out-channels", "1:4096:1"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--plot", str(tmp_path / "s.png"))
    assert code == 0, err
    (fig,) = figures
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    labels = [c for c in ax.get_children() if type(c).__name__ == "Annotation"]
    boxes = [a.get_window_extent(renderer) for a in labels]
    assert len(labels) >= 5
    assert not any(b.overlaps(c) for i, b in enumerate(boxes) for c in boxes[i + 1 :])
    assert all(b.x1 <= ax.get_window_extent(renderer).x1 + 1 for b in boxes)
    texts = [a.get_text() for a in labels]
    assert all(a != b for a, b in zip(texts, texts[1:])), texts  # no count twice in a row
    assert ax.get_ylabel() == f"latency ({unit})"
    assert ax.yaxis.get_offset_text().get_text() == ""


# --- 8, 9: long and non-Latin names ----------------------------------------------------------------------


def test_short_name_cuts_the_middle() -> None:
    from deployopt.plots import short_name

    name = "StatefulPartitionedCall/model/" + "backbone_stage" * 11 + "conv2d"
    cut = short_name(name)
    assert len(cut) == 60 and cut.startswith("StatefulPartitionedCall/") and cut.endswith("stageconv2d")
    assert "…" in cut and short_name("conv0") == "conv0"


def test_a_glyph_the_font_lacks_is_no_warning(tmp_path: Path) -> None:
    """A conv named 卷积层 printed matplotlib's 'UserWarning: Glyph 21367 ... missing from font(s)'
    with a source line, two lines on stderr per glyph."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        plot_staircase(
            [16, 32], tmp_path / "s.png", predicted_us=[1.0, 2.0], title="卷积层_первый: output channels"
        )
    assert [str(w.message) for w in seen] == []
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_marks_at_one_width_share_one_legend_entry(tmp_path: Path, figures: list[Any]) -> None:
    """An original already a multiple of 8 is its own round-up: one line, both names in its entry."""
    marks = [("original", 128), ("round-up to 8", 128), ("chosen", 120)]
    plot_staircase([120, 128, 136], tmp_path / "s.png", predicted_us=[1.0, 2.0, 2.0], marks=marks)
    (fig,) = figures
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["predicted", "original, round-up to 8 128", "chosen 120"]
