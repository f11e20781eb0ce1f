"""A reader that goes away: `deployopt ... | head`, `| true`, `2>&1 | head -2` (a log peeked at).

Python ignores SIGPIPE, so the next write raised BrokenPipeError: rich made it a silent exit 1
wherever it printed (compare's "a regression"; optimize stopped mid-run, its folder holding only
the journal, with no word), typer too. Now the command unwinds as for Ctrl-C and exits 141
(128 + SIGPIPE), as a tool SIGPIPE ends does; optimize keeps its journal for --resume."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_cli
from test_terminal_output import EXAMPLE, compare_folders, deployopt


def reader_gone() -> int:
    """The write end of a pipe whose reader has already gone (its read end closed)."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize("json_flag", [(), ("--json",)], ids=["table", "json"])
def test_compare_into_a_pipe_closed_early_exits_141_not_1(tmp_path: Path, json_flag: tuple[str, ...]) -> None:
    """`compare ... | true`: 1 read as "a regression" (and failed a CI step under pipefail) where
    nothing got slower; 141 is the pipe's, and nothing is said on stderr."""
    base, cur = compare_folders(tmp_path, slower=1.0)
    assert deployopt(tmp_path, "compare", base, cur).returncode == 0  # no regression
    out = reader_gone()
    try:
        done = deployopt(tmp_path, "compare", base, cur, *json_flag, stdout=out)
    finally:
        os.close(out)
    assert (done.returncode, done.stderr) == (141, b"")


def test_targets_into_a_pipe_closed_early_exits_141(tmp_path: Path) -> None:
    out = reader_gone()
    try:
        done = deployopt(tmp_path, "targets", stdout=out)
    finally:
        os.close(out)
    assert (done.returncode, done.stderr) == (141, b"")


def test_optimize_json_into_a_pipe_closed_early_says_its_results_are_complete(tmp_path: Path) -> None:
    """stdout gone by the time the report is printed: the run's outputs are in place, and stderr
    (still open) says so, as after a Ctrl-C there."""
    out = reader_gone()
    try:
        args = ("optimize", EXAMPLE, "-t", "tx2", "-b", "model", "-o", "res", "--json")
        done = deployopt(tmp_path, *args, stdout=out)
    finally:
        os.close(out)
    assert done.returncode == 141
    assert done.stderr.decode().splitlines() == [
        "standard output closed by its reader after the run finished: its results in res are complete"
    ]
    assert {"model.onnx", "plan.json", "report.md", "report.json"} <= {
        p.name for p in (tmp_path / "res").iterdir()
    }


def test_optimize_whose_log_is_closed_exits_141(tmp_path: Path) -> None:
    """`2>&1 | head -0`: the first stderr line (ort's CPU warning, before the run begins) finds no
    reader. The run stops there, exit 141, no output folder left behind."""
    err = reader_gone()
    try:
        args = ("optimize", EXAMPLE, "-t", "tx2", "-b", "ort", "--max-evals", "5", "-o", "res")
        done = deployopt(tmp_path, *args, stdout=subprocess.DEVNULL, stderr=err)
    finally:
        os.close(err)
    assert done.returncode == 141
    assert not (tmp_path / "res" / "model.onnx").exists()


class LogThatCloses(io.StringIO):
    """stderr piped to a reader that leaves (`2>&1 | head`) once the search moves its first width,
    after the baselines and the sweep: every write from then on raises EPIPE, as a write to such a
    pipe does."""

    def __init__(self) -> None:
        super().__init__()
        self.gone = False

    def write(self, text: str) -> int:
        self.gone = self.gone or "progress: end-to-end: move " in text
        if self.gone:
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
        return super().write(text)

    def isatty(self) -> bool:
        return False


def test_optimize_whose_log_reader_goes_mid_run_keeps_its_journal_for_resume(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The reader of the log goes while the search runs (a progress line at every step, so one
    falls there): rich's silent exit 1 left the run's folder as it was and no word of --resume.
    Now it unwinds as a Ctrl-C does: exit 141, the journal kept and nothing else, and --resume
    finishes the run."""
    import deployopt.cli.progress as progress

    monkeypatch.setattr(progress, "PROGRESS_INTERVAL_S", 0)
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "res"
    args = ["optimize", str(EXAMPLE), "-t", "tx2", "-b", "model", "-o", str(out)]
    captured = sys.stderr
    log = LogThatCloses()
    monkeypatch.setattr(sys, "stderr", log)
    code, _, _ = run_cli(monkeypatch, capsys, *args)
    assert code == 141
    assert "progress: per-layer sweep 423/423" in log.getvalue() and log.gone  # closed mid-run
    assert sorted(p.name for p in out.iterdir()) == ["journal.jsonl"]
    monkeypatch.setattr(sys, "stderr", captured)
    code, stdout, err = run_cli(monkeypatch, capsys, *args, "--resume")
    assert code == 0, err
    assert f"wrote {out}/ (model.onnx" in stdout


def test_json_into_a_closed_pipe_on_an_ascii_stdout_exits_141(tmp_path: Path) -> None:
    """typer.echo (analyze --json) on a stdout whose encoding is ASCII: click writes its bytes past
    the text stream, and the broken pipe there was typer's exit 1."""
    out = reader_gone()
    try:
        done = deployopt(
            tmp_path, "analyze", EXAMPLE, "--json", stdout=out, env={"PYTHONIOENCODING": "ascii"}
        )
    finally:
        os.close(out)
    assert (done.returncode, done.stderr) == (141, b"")


@pytest.mark.parametrize(("args", "code"), [(("targets", "--json"), 0), (("bench", "missing.onnx"), 2)])
def test_a_stream_closed_before_the_start_is_still_no_error(
    tmp_path: Path, args: tuple[str, ...], code: int
) -> None:
    """`deployopt ... >&-` (or `2>&-`): Python starts with no sys.stdout (sys.stderr), and rich
    prints nowhere; the closed-reader check wraps the streams there are, and no other."""
    for fd in (1, 2):
        done = deployopt(tmp_path, *args, stdout=None, stderr=None, preexec_fn=lambda fd=fd: os.close(fd))
        assert done.returncode == code, fd
