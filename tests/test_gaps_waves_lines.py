"""analyze's waves table puts one width tip a line in its last cell (CellLines): the table's cells
are printed with a newline escaped (a name's newline broke its row), and the tips' own newlines,
joined as a plain string, would have been printed `\\n` too; a newline in a group's name still is."""

from __future__ import annotations

import io

from deployopt.cli.app import _console, print_table
from deployopt.cli.surgery_cmd import waves_table


def _width(group: str, role: str) -> dict[str, object]:
    return {
        "group": group,
        "role": role,
        "width": 12,
        "below": 8,
        "above": 16,
        "below_delta_us": -1.0,
        "above_delta_us": -2.0,
    }


def test_the_tips_are_lines_and_a_names_newline_is_escaped() -> None:
    row = {
        "name": "conv\nA",
        "gemm_m": 64,
        "gemm_n": 12,
        "gemm_k": 72,
        "tile": [64, 32],
        "blocks": 1,
        "waves": 1,
        "tail_fill": 0.5,
        "predicted_us": 3.0,
        "widths": [_width("g\nX", "out"), _width("h", "in")],
    }
    buf = io.StringIO()
    console = _console()
    console.file = buf
    console.width = 200
    print_table(waves_table([row], title="t"), console)
    lines = buf.getvalue().splitlines()
    first = next(i for i, line in enumerate(lines) if "g\\nX (out) 12: ↓8 (-1.0) ↑16 (-2.0)" in line)
    assert "conv\\nA" in lines[first], lines
    assert "h (in) 12: ↓8 (-1.0) ↑16 (-2.0)" in lines[first + 1], lines
    assert not any(line.strip("│ ").startswith(("A", "X")) for line in lines), lines
