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


def test_optimize_over_before_max_evals_ends_its_evaluations_done(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A search that ends short of --max-evals (13 of 200 here) finished: its evaluations' last
    line is `done` at its count of the 200, not `stopped` (what a task left short of its total
    says, as one of a run interrupted does)."""
    every_step(monkeypatch)
    code, out, err = optimize(monkeypatch, capsys, tmp_path, "--max-evals", "200")
    assert code == 0, err
    (summary,) = [m for m in map(SUMMARY.match, out.splitlines()) if m]
    evals = int(summary["evals"])
    assert evals < 200
    last = [ln for ln in progress_lines(err) if ln["what"].startswith("end-to-end")][-1]
    assert (last["done"], last["total"], last["end"]) == (evals, 200, "done"), err
    assert "stopped" not in err


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


def test_staircase_json_prints_no_progress_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """staircase --measure --json in a log, as optimize --json: no `progress:` line on stderr even
    with the interval at 0 (its sweep printed them, whatever --json said), stdout the JSON alone.
    The same run without --json (the control) prints them."""
    from test_cli_targets import fake_backend

    from deployopt.backends import base
    from deployopt.targets import get_target

    every_step(monkeypatch)
    backend = fake_backend(get_target("h200"), on_gpu=True)
    monkeypatch.setattr(base, "get_backend", lambda name: backend)
    args = ["staircase", "--target", "h200", "--input", "8x128x28x28", "--out-channels", "64:128:32"]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--measure", "fake", "--json")
    assert code == 0, err
    assert "progress" not in err, err
    assert len(json.loads(out)["points"]) == 3
    code, _, err = run_cli(monkeypatch, capsys, *args, "--measure", "fake")
    assert code == 0, err
    assert "progress: timing 3 convs on fake 3/3 (" in err, err


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


def test_a_task_that_hangs_keeps_printing_a_line_each_interval() -> None:
    """A task stuck midway (fake clock, interval 30 s; the timer's callback called as its thread
    would): the timer printed the first line and then nothing until the end, so a hung run went
    silent after 30 s. Now a line each 30 s after the last, the same count with the elapsed time,
    never two within 30 s of each other; an advance in between moves the next one on."""
    from rich.console import Console

    from deployopt.cli.progress import LineProgress

    out = io.StringIO()
    clock = FakeClock()
    progress = LineProgress(Console(file=out, width=200), interval=30, get_time=clock)

    def said() -> list[str]:
        text = out.getvalue()
        out.seek(0)
        out.truncate()
        return text.splitlines()

    with progress:
        task = progress.add_task("per-layer sweep", total=10)
        for at, expected in (
            (31, ["progress: per-layer sweep 0/10 (31.0 s)"]),
            (31, []),  # once at a time
            (60.9, []),  # 29.9 s after the last line
            (61, ["progress: per-layer sweep 0/10 (1 min 01 s)"]),  # no advance, yet a line: hung
            (91, ["progress: per-layer sweep 0/10 (1 min 31 s)"]),
        ):
            clock.now = 1000 + at
            progress._overdue(task)
            assert said() == expected, at
        clock.now = 1100
        progress.advance(task, 3)  # 9 s after the last line: none
        assert said() == []
        clock.now = 1121
        progress._overdue(task)
        assert said() == ["progress: per-layer sweep 3/10 (2 min 01 s)"]
        clock.now = 1155
        progress.advance(task, 1)  # 34 s after the last: this change's line, and the next 30 s on
        assert said() == ["progress: per-layer sweep 4/10 (2 min 35 s)"]
        clock.now = 1180
        progress._overdue(task)
        assert said() == []
        clock.now = 1185
        progress._overdue(task)
        assert said() == ["progress: per-layer sweep 4/10 (3 min 05 s)"]
        clock.now = 1190
        progress.update(task, completed=10)
        assert said() == ["progress: per-layer sweep 10/10 (3 min 10 s, done)"]
        clock.now = 1300
        progress._overdue(task)  # ended: no line more
        assert said() == []


class _Stamped(io.StringIO):
    """A console file that notes the monotonic time of each write."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def write(self, text: str) -> int:
        import time

        self.at.append(time.monotonic())
        return super().write(text)


def test_a_task_stuck_at_its_start_gets_a_heartbeat_on_a_real_clock() -> None:
    """The reviewer's repro on the real clock, interval 0.05 s, a task stuck at 0/10 for 0.6 s:
    it printed `stuck 0/10 (0.1 s)` and then only its end. Now a line at least every few
    intervals (timer threads; the bound generous for a loaded machine), at most one per interval,
    all 0/10, and the end `stopped`: the task was left short of its total."""
    import time

    from rich.console import Console

    from deployopt.cli.progress import LineProgress

    out = _Stamped()
    with LineProgress(Console(file=out, width=200), interval=0.05) as progress:
        progress.add_task("stuck", total=10)
        time.sleep(0.6)
    lines = progress_lines(out.getvalue())
    assert len(lines) >= 4, out.getvalue()  # 3 or more heartbeats (11 on an idle machine), the end
    assert all(ln["what"] == "stuck" and (ln["done"], ln["total"]) == (0, 10) for ln in lines)
    assert [ln["end"] for ln in lines] == [None] * (len(lines) - 1) + ["stopped"]
    heartbeats = out.at[: len(lines) - 1]
    assert all(b - a >= 0.045 for a, b in zip(heartbeats, heartbeats[1:])), heartbeats
    time.sleep(0.15)
    assert len(progress_lines(out.getvalue())) == len(lines)  # nothing after the end


def test_a_task_left_short_of_its_total_ends_stopped_not_done() -> None:
    """A `with` block left without an exception, a task at 3/10: its end line said `done`. Now
    `stopped`; a task of no total still ends `done`, as does one that reached its total."""
    from rich.console import Console

    from deployopt.cli.progress import LineProgress

    out = io.StringIO()
    clock = FakeClock()
    with LineProgress(Console(file=out, width=200), interval=30, get_time=clock) as progress:
        short = progress.add_task("sweep", total=10)
        open_ended = progress.add_task("evaluations", total=None)
        whole = progress.add_task("convs", total=4)
        clock.now = 1031
        for task in (short, open_ended, whole):
            progress._overdue(task)
        progress.update(short, completed=3)
        progress.update(open_ended, completed=5)
        progress.update(whole, completed=3)
        clock.now = 1040
        progress.update(whole, completed=4)
    assert out.getvalue().splitlines() == [
        "progress: sweep 0/10 (31.0 s)",
        "progress: evaluations 0 (31.0 s)",
        "progress: convs 0/4 (31.0 s)",
        "progress: convs 4/4 (40.0 s, done)",
        "progress: sweep 3/10 (40.0 s, stopped)",
        "progress: evaluations 5 (40.0 s, done)",
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


class _SlowFirstWrite(_Stamped):
    """The first line's write held up 0.03 s before it lands (a loaded machine), the rest not."""

    def write(self, text: str) -> int:
        import time

        if not self.at:
            time.sleep(0.03)
        return super().write(text)


def test_a_line_written_late_pushes_the_next_one_back() -> None:
    """The next line was due `interval` after the last one was begun: a write held up 0.03 s put the
    next line 0.02 s behind it, two lines within one interval (the heartbeat test failed under a
    loaded CI). It is due `interval` after the last one was written."""
    import time

    from rich.console import Console

    from deployopt.cli.progress import LineProgress

    out = _SlowFirstWrite()
    with LineProgress(Console(file=out, width=200), interval=0.05) as progress:
        progress.add_task("stuck", total=10)
        time.sleep(0.3)
    stamps = out.at[:-1]  # the heartbeats, the end apart
    assert len(stamps) >= 2, out.getvalue()
    assert all(b - a >= 0.05 for a, b in zip(stamps, stamps[1:])), stamps
