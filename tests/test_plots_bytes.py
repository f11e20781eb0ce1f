"""The same plot is the same bytes in every format it can be written in, so users can diff plots
and keep them in git. PNGs always were; SVG carried a <dc:date> of the time of writing and random
element ids, PDF a /CreationDate, so two identical runs wrote different files."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployopt.plots import plot_staircase


def _draw(path: Path) -> bytes:
    ks = list(range(32, 129, 8))
    plot_staircase(
        ks, path, predicted_us=[10.0 + k // 64 for k in ks], waves=[1 + k // 64 for k in ks], title="conv"
    )
    return path.read_bytes()


@pytest.mark.parametrize("fmt", ["svg", "pdf", "png"])
def test_the_same_plot_twice_is_the_same_bytes(tmp_path: Path, fmt: str) -> None:
    first, second = _draw(tmp_path / f"a.{fmt}"), _draw(tmp_path / f"b.{fmt}")
    assert first == second
    assert b"<dc:date>" not in first and b"/CreationDate" not in first
