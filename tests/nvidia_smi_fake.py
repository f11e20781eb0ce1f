"""nvidia-smi -q readings for the clock tests: the real H200 recording
(benchmarks/results/h200_traffic/clocks/nvidia_smi_smsfull_ghostnet.txt, before and after a
5-minute benchmark), an edited copy that says the clock was held down, and a stand-in
`nvidia-smi` on PATH that prints given readings in turn."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

CLOCKS_DIR = Path(__file__).resolve().parents[1] / "benchmarks/results/h200_traffic/clocks"
H200_Q = CLOCKS_DIR / "nvidia_smi_smsfull_ghostnet.txt"


def h200_readings() -> tuple[str, str]:
    """(before, after): the two `nvidia-smi -q` outputs of the real recording."""
    before, after = H200_Q.read_text().split("== after\n")
    return before.removeprefix("== before\n"), after


def _edit(text: str, label: str, old: str, new: str) -> str:
    lines = text.splitlines(keepends=True)
    hits = [
        i for i, line in enumerate(lines) if line.strip().startswith(label) and line.rstrip().endswith(old)
    ]
    assert hits, f"{label!r} ending in {old!r} not in the recording"
    i = hits[0]
    lines[i] = lines[i].rstrip()[: -len(old)] + new + "\n"
    return "".join(lines)


def throttled_after() -> str:
    """EDITED copy of the real 'after' reading (not a recording: nothing throttled on the H200):
    SW thermal slowdown 1.2 s, HW power braking 5 ms and sync boost 2 s more on the counters, SW
    thermal slowdown active, the SM clock at 1410 MHz."""
    _, after = h200_readings()
    counters = after.split("    Clocks Event Reasons Counters\n")
    head, tail = counters[0], counters[1]
    tail = _edit(tail, "SW Thermal Slowdown", "0 us", "1200000 us")
    tail = _edit(tail, "HW Power Braking", "0 us", "5000 us")
    tail = _edit(tail, "Sync Boost", "0 us", "2000000 us")
    head = _edit(head, "SW Thermal Slowdown", "Not Active", "Active")
    text = head + "    Clocks Event Reasons Counters\n" + tail
    clocks, rest = text.split("    Clocks\n", 1)
    return clocks + "    Clocks\n" + _edit(rest, "SM", "1980 MHz", "1410 MHz")


FAKE = """#!/bin/sh
# stand-in nvidia-smi: `-q ...` prints the next reading file; anything else fails
echo "$@" >> "$FAKE_SMI_ARGS"
[ "$1" = "-q" ] || exit 1
n=$(cat "$FAKE_SMI_COUNT" 2>/dev/null || echo 0)
echo $((n + 1)) > "$FAKE_SMI_COUNT"
f="$FAKE_SMI_DIR/reading$n.txt"
[ -f "$f" ] || f="$FAKE_SMI_DIR/last.txt"
cat "$f"
"""


def install_fake_nvidia_smi(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, readings: list[str | bytes]
) -> Path:
    """Put a stand-in nvidia-smi first on PATH that prints `readings` in turn (the last one again
    after that); returns the file its arguments are appended to, one call a line."""
    folder = tmp_path / "fake-smi"
    folder.mkdir(parents=True)
    for i, text in enumerate(readings):
        data = text.encode() if isinstance(text, str) else text
        (folder / f"reading{i}.txt").write_bytes(data)
        (folder / "last.txt").write_bytes(data)
    exe = folder / "nvidia-smi"
    exe.write_text(FAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_SMI_DIR", str(folder))
    monkeypatch.setenv("FAKE_SMI_COUNT", str(folder / "count"))
    monkeypatch.setenv("FAKE_SMI_ARGS", str(folder / "args.txt"))
    return folder / "args.txt"
