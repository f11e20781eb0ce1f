"""A newline in a model's name printed in a table cell is written `\\n`, as notices and error
lines write it: kept, it broke the row into two, the name's second half read as another row. The
code's own multi-line headers (`median\\nµs`) and multi-line cells (CellLines) keep their lines."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from cli_runner import run_cli
from model_names import renamed
from rich.table import Table
from rich.text import Text

from deployopt.cli.app import _console, print_table


def _console_to(buf: io.StringIO) -> object:
    console = _console()
    console.file = buf
    console.width = 120
    return console


def test_a_cell_newline_is_escaped_and_the_row_stays_one_line() -> None:
    buf = io.StringIO()
    console = _console_to(buf)
    table = Table(title="t\nitle")
    table.add_column("layer")
    table.add_column("median\nµs", justify="right")
    table.add_row("conv\nX", "1.0")
    table.add_row(Text.assemble(("frozen", "red"), ": shared 'b\nY'"), "2.0")
    print_table(table, console)  # type: ignore[arg-type]
    lines = buf.getvalue().splitlines()
    row = [line for line in lines if "conv" in line]
    assert len(row) == 1 and "conv\\nX" in row[0] and "1.0" in row[0], lines
    assert any("frozen: shared 'b\\nY'" in line and "2.0" in line for line in lines), lines
    assert any("t\\nitle" in line for line in lines), lines  # the title holds a model's name too
    # the header's own newline is kept: two header lines, `median` over `µs`
    median = next(i for i, line in enumerate(lines) if "median" in line)
    assert "µs" in lines[median + 1] and "\\n" not in lines[median]


def test_console_print_of_a_table_escapes_cells_too() -> None:
    """optimize's and verify's tables go through console.print, not print_table."""
    buf = io.StringIO()
    console = _console_to(buf)
    table = Table("plan", "latency")
    table.add_row("input\r\nmodel", "5 µs")
    console.print(table)  # type: ignore[attr-defined]
    out = buf.getvalue()
    assert "input\\r\\nmodel" in out
    assert not any(line.strip("│ ").startswith("model") for line in out.splitlines()), out


def test_cell_lines_keep_their_lines_and_escape_inside_each() -> None:
    from deployopt.cli.app import CellLines

    buf = io.StringIO()
    console = _console_to(buf)
    table = Table("conv", "tips")
    table.add_row("c", CellLines(["a\nb 16: ↓8", "c\x1b 8: ↑16"]))
    print_table(table, console)  # type: ignore[attr-defined]
    lines = buf.getvalue().splitlines()
    first = next(i for i, line in enumerate(lines) if "a\\nb 16: ↓8" in line)
    assert "c\\x1b 8: ↑16" in lines[first + 1], lines
    assert "\x1b" not in buf.getvalue()


def test_analyze_tables_print_a_newline_in_names_as_backslash_n(
    tmp_path: Path,
    zoo_model: Callable[[str], onnx.ModelProto],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "nl.onnx"
    onnx.save(renamed(zoo_model("mobilenet_like_dynamic"), lambda n: n + "\nX" if n else n), path)
    code, out, err = run_cli(monkeypatch, capsys, "analyze", str(path), "--input-shape", "input\nX:1x3x32x32")
    assert code == 0, err
    assert "features.0.conv\\nX" in out, out
    # no row of the tables starts with the name's second half
    assert not any(line.strip("│ ").startswith("X") for line in out.splitlines()), out
