"""Progress when stderr is not a terminal (`nohup deployopt optimize ... > log 2>&1`, a CI log):
the live bar was off there and a run of an hour said nothing until its end, hung or slow alike.
Now plain `progress:` lines, throttled (deployopt.cli.progress); on a terminal the bar as before."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"
LINE = re.compile(
    r"^progress: (?P<what>.+) (?P<done>\d+)/(?P<total>\d+) \((?P<elapsed>[^,)]+)(?:, (?P<end>\w+))?\)$"
)
SUMMARY = re.compile(
    r"^(?P<evals>\d+) end-to-end evaluations .*; per-layer sweep: (?P<shapes>\d+) shapes, "
    r"(?P<measured>\d+) predicted in [\d.]+ s, (?P<cached>\d+) cached$"
)


def progress_lines(err: str) -> list[dict[str, Any]]:
    """Every `progress:` line of `err`, parsed; one that does not parse fails the test."""
    lines = []
    for ln in err.splitlines():
        if ln.startswith("progress:"):
            m = LINE.match(ln)
            assert m, f"not a progress line: {ln!r}"
            lines.append({**m.groupdict(), "done": int(m["done"]), "total": int(m["total"])})
    return lines


def every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress interval 0: a line at every step. (A tree without deployopt.cli.progress, before
    the lines, runs on and fails on what it prints.)"""
    try:
        import deployopt.cli.progress as progress
    except ImportError:
        return
    monkeypatch.setattr(progress, "PROGRESS_INTERVAL_S", 0)


def optimize(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, *extra: str
) -> tuple[int, str, str]:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))  # nothing cached: all swept
    args = ["optimize", str(EXAMPLE), "--target", "nano", "--max-evals", "8", "--force"]
    return run_cli(monkeypatch, capsys, *args, "-o", str(tmp_path / "out"), *extra)


def test_optimize_in_a_log_prints_progress_lines_whose_numbers_are_the_summarys(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """optimize with stderr a pipe (capsys): with the interval at 0 every step is a line, plain
    text; the sweep's lines count up to the shapes the summary says it swept, ending `done`, and
    the evaluations' last line counts the evaluations the summary counts, of --max-evals. At the
    default interval a run of a second prints no progress line at all (its summary says it)."""
    code, out, err = optimize(monkeypatch, capsys, tmp_path)
    assert code == 0, err
    assert "progress:" not in err  # quick: all in the summary; the one-line-error runs stay one line

    every_step(monkeypatch)
    code, out, err = optimize(monkeypatch, capsys, tmp_path)
    assert code == 0, err
    assert "\x1b" not in err  # plain text: no colour, no cursor moves
    (summary,) = [m for m in map(SUMMARY.match, out.splitlines()) if m]
    shapes, evals = int(summary["shapes"]), int(summary["evals"])
    assert int(summary["measured"]) == shapes and int(summary["cached"]) == 0

    lines = progress_lines(err)
    sweep = [ln for ln in lines if ln["what"] == "per-layer sweep"]
    assert sweep, f"no progress line of the sweep on stderr: {err!r}"
    assert sweep[0]["done"] == 0 and sweep[0]["end"] is None  # its start, at once with interval 0
    assert all(ln["total"] == shapes for ln in sweep)
    counts = [ln["done"] for ln in sweep]
    assert counts == sorted(counts) and any(0 < c < shapes for c in counts)  # it said how far it got
    assert [ln["end"] for ln in sweep] == [None] * (len(sweep) - 1) + ["done"]
    assert sweep[-1]["done"] == shapes  # 423: the shapes the summary counts
    assert shapes == 423

    evals_lines = [ln for ln in lines if ln["what"].startswith("end-to-end")]
    assert evals_lines[0]["what"] == "end-to-end evaluations" and evals_lines[0]["done"] == 0
    assert all(ln["total"] == 8 for ln in evals_lines)  # --max-evals
    steps = list(range(1, evals + 1))  # a line a step; the end line a step's (8/8) or its own after
    assert [ln["done"] for ln in evals_lines[1:]] in (steps, [*steps, evals])
    last = evals_lines[-1]
    assert last["end"] == "done" and last["done"] == evals
    assert all(ln["end"] is None for ln in evals_lines[:-1])
    assert len(lines) == len(sweep) + len(evals_lines)


def test_optimize_json_prints_no_progress_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """--json keeps progress off in a log as on a terminal: stderr holds no `progress:` line, even
    with the interval at 0, and stdout is the report alone. The same run without --json (the
    control) prints them."""
    every_step(monkeypatch)
    code, out, err = optimize(monkeypatch, capsys, tmp_path, "--json")
    assert code == 0, err
    assert "progress" not in err
    assert json.loads(out)["per_layer_sweep"]["shapes"] == 423
    code, _, err = optimize(monkeypatch, capsys, tmp_path)
    assert code == 0 and "progress: per-layer sweep 423/423 (" in err, err


def test_calibrate_in_a_log_prints_its_sweeps_progress(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """calibrate's convs (64 for fp16, 16 at a time) in a log: a line at its start, one a chunk,
    the last 64/64 and `done`."""
    from test_cli_targets import fake_backend

    from deployopt.backends import base
    from deployopt.targets import get_target

    every_step(monkeypatch)
    backend = fake_backend(get_target("h200"), on_gpu=True)
    monkeypatch.setattr(base, "get_backend", lambda name: backend)
    args = ["calibrate", "--target", "h200", "--measure", "fake", "-o", str(tmp_path / "p.json")]
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert "measuring 64 convs (fp16) on fake" in out
    lines = progress_lines(err)
    assert {ln["what"] for ln in lines} == {"fp16: timing convs on fake"}
    assert [(ln["done"], ln["total"], ln["end"]) for ln in lines] == [
        (0, 64, None),
        (16, 64, None),
        (32, 64, None),
        (48, 64, None),
        (64, 64, "done"),
    ]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_lines_are_throttled_and_a_quick_task_prints_none() -> None:
    """LineProgress on a fake clock, interval 30 s: no line before 30 s; then a line at an advance
    30 s or more after the last, none at a change of description alone; the end line marked done.
    A task over within 30 s prints nothing. The timer's line (a task still at 0 after 30 s) comes
    once, and a `with` block left on an exception ends the open task `stopped`."""
    from rich.console import Console

    from deployopt.cli.progress import LineProgress, format_elapsed

    out = io.StringIO()
    clock = FakeClock()
    progress = LineProgress(Console(file=out, width=40), interval=30, get_time=clock)

    def said() -> list[str]:
        text = out.getvalue()
        out.seek(0)
        out.truncate()
        return text.splitlines()

    with progress:
        task = progress.add_task("per-layer sweep", total=423)
        for at, done in ((10, 16), (29.9, 32)):
            clock.now = 1000 + at
            progress.update(task, completed=done)
        assert said() == []
        clock.now = 1030
        progress.advance(task, 16)
        assert said() == ["progress: per-layer sweep 48/423 (30.0 s)"]  # one line, never folded at 40
        for at in (45, 59.9):
            clock.now = 1000 + at
            progress.advance(task, 16)
        assert said() == []  # under 30 s since the last line
        clock.now = 1061
        progress.advance(task, 16)
        assert said() == ["progress: per-layer sweep 96/423 (1 min 01 s)"]
        clock.now = 1100
        progress.update(task, description="per-layer sweep")  # no step since the last line: none
        assert said() == []
        clock.now = 1000 + 3725
        progress.update(task, completed=423)
        assert said() == ["progress: per-layer sweep 423/423 (1 h 02 min, done)"]
        progress.advance(task)  # past its end: nothing more
        quick = progress.add_task("end-to-end evaluations", total=8)
        clock.now += 29
        progress.update(quick, completed=3)
        progress.update(quick, completed=8)
    assert said() == []  # over within 30 s: no line, its end included

    clock.now = 5000
    progress = LineProgress(Console(file=out, width=200), interval=30, get_time=clock)
    with pytest.raises(KeyboardInterrupt), progress:
        task = progress.add_task("fp16: timing convs on nano", total=64)
        clock.now = 5031
        progress._overdue(task)  # what its timer does, 30 s of wall time after the start
        progress._overdue(task)  # once
        assert said() == ["progress: fp16: timing convs on nano 0/64 (31.0 s)"]
        clock.now = 5040
        progress.advance(task, 16)  # 9 s after the line: none
        raise KeyboardInterrupt
    assert said() == ["progress: fp16: timing convs on nano 16/64 (40.0 s, stopped)"]
    assert [format_elapsed(s) for s in (0, 59.94, 60, 3599, 3600)] == [
        "0.0 s",
        "59.9 s",
        "1 min 00 s",
        "59 min 59 s",
        "1 h 00 min",
    ]


def test_a_terminal_keeps_the_live_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """progress_bar on a terminal is rich's transient live bar, as before (--json: off); not on a
    terminal, the line printer, except with --json, still off."""
    from rich.progress import Progress

    from deployopt.cli import app
    from deployopt.cli.progress import LineProgress

    monkeypatch.setattr(app.err_console, "_force_terminal", True)
    bar = app.progress_bar(disable=False)
    assert type(bar) is Progress and not bar.disable and bar.live.transient
    assert app.progress_bar(disable=True).disable
    monkeypatch.setattr(app.err_console, "_force_terminal", False)
    assert isinstance(app.progress_bar(disable=False), LineProgress)
    bar = app.progress_bar(disable=True)
    assert type(bar) is Progress and bar.disable
