"""JSON inputs (a plan, a target profile, a measurement) read as the model is: a named pipe no
process writes to is one line after a short wait (it hung forever), a pipe with a writer is read,
and a device or a file too large to be one is one line before it is read (it filled memory)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import run_cli
from test_regression import write_timing

import deployopt.model
from deployopt.errors import DataError, DeployoptError, PlanError, TargetError
from deployopt.regression import compare_paths
from deployopt.surgery import read_plan
from deployopt.targets import get_target, load_profile

#: Long enough for a hang to show, short enough for a failing test not to hold the run up.
HANG_S = 20


def _within(fn: Callable[[], object], fifo: Path) -> object:
    """fn()'s result (or the exception it raised), failing the test where it blocks: the pipe is
    then given a writer that comes and goes, so the blocked open sees end of file and returns."""
    box: dict[str, object] = {}

    def call() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test to judge
            box["value"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(HANG_S)
    if thread.is_alive():
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
        pytest.fail(f"still blocked on {fifo} after {HANG_S} s")
    return box["value"]


@pytest.fixture
def silent_pipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A named pipe nothing writes to, and the loader's wait for a writer cut to 0.2 s."""
    monkeypatch.setattr(deployopt.model, "PIPE_WRITER_WAIT_S", 0.2)
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    return fifo


def _fed_pipe(path: Path, text: str) -> threading.Thread:
    """A named pipe at `path` that a writer thread fills with `text` once a reader opens it."""
    os.mkfifo(path)

    def write() -> None:
        with contextlib.suppress(BrokenPipeError), path.open("w") as f:
            f.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


@pytest.mark.parametrize(
    ("read", "error", "what"),
    [
        (read_plan, PlanError, "a plan .json file"),
        (load_profile, TargetError, "a target profile (.json)"),
        (get_target, TargetError, "a target profile (.json)"),
        (lambda p: compare_paths(p, p), DataError, "a measurement file (JSON)"),
    ],
    ids=["plan", "profile", "target", "compare"],
)
def test_a_pipe_nothing_writes_to_is_one_line_not_a_hang(silent_pipe: Path, read, error, what) -> None:
    got = _within(lambda: read(silent_pipe), silent_pipe)
    assert isinstance(got, error), got
    assert str(got) == (
        f"{silent_pipe}: is a pipe nothing writes to (waited 0.2 s); start its writer first, or give {what}"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["apply", "MODEL", "--plan", "PIPE", "-o", "OUT"],
        ["targets", "--target", "PIPE"],
        ["analyze", "MODEL", "--target", "PIPE"],
        ["compare", "PIPE", "B"],
    ],
    ids=["apply", "targets", "analyze", "compare"],
)
def test_each_command_says_so_in_one_line(
    monkeypatch, capsys, tmp_path: Path, silent_pipe: Path, zoo_model_path, args: list[str]
) -> None:
    """The commands of the report: each hung until interrupted."""
    b = write_timing(tmp_path / "b.json", 500.0, seed=1)
    subs = {"MODEL": str(zoo_model_path("resnet_projection")), "PIPE": str(silent_pipe), "B": str(b)}
    subs["OUT"] = str(tmp_path / "out.onnx")
    code, _, err = _within(lambda: run_cli(monkeypatch, capsys, *[subs.get(a, a) for a in args]), silent_pipe)
    assert code == 2 and err.startswith(f"error: {silent_pipe}: is a pipe nothing writes to"), err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out.onnx").exists()


def test_a_pipe_with_a_writer_is_still_read(tmp_path: Path) -> None:
    """`--plan <(jq …)`, `--target <(…)`, `compare <(ssh board cat r.json) b.json` keep working."""
    _fed_pipe(tmp_path / "plan.json", json.dumps({"widths": {"g0": 16}, "keep": {"g0": [0, 1]}}))
    plan = _within(lambda: read_plan(tmp_path / "plan.json"), tmp_path / "plan.json")
    assert not isinstance(plan, BaseException) and (plan.widths, plan.keep) == ({"g0": 16}, {"g0": [0, 1]})

    _fed_pipe(tmp_path / "t.json", json.dumps(get_target("nano").to_json()))
    target = _within(lambda: load_profile(tmp_path / "t.json"), tmp_path / "t.json")
    assert not isinstance(target, BaseException) and (target.name, target.sms) == ("nano", 1)

    a = write_timing(tmp_path / "a.json", 500.0, seed=1)
    _fed_pipe(tmp_path / "b.json", write_timing(tmp_path / "b0.json", 600.0, seed=2).read_text())
    report = _within(lambda: compare_paths(a, tmp_path / "b.json"), tmp_path / "b.json")
    assert not isinstance(report, BaseException), report
    assert report.pairs[0].comparison.verdict == "slower"


def _run_capped(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a child capped at 2 GiB of address space: reading /dev/zero fails there, not here."""
    cap = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
    run = "import sys; from deployopt.cli.main import main; sys.argv = ['deployopt', *sys.argv[1:]]; main()"
    return subprocess.run(
        [sys.executable, "-c", cap + run, *args], capture_output=True, text=True, timeout=120
    )


def _sparse(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk (and, read whole, that much memory)."""
    with path.open("wb") as f:
        f.truncate(size)
    return path


def test_a_file_too_large_to_be_a_plan_or_profile_is_refused_before_reading(tmp_path: Path) -> None:
    """A 65 MiB --plan was read whole and parsed (a 10 GB one filled memory first)."""
    plan = _sparse(tmp_path / "plan.json", (64 << 20) + 1)
    with pytest.raises(PlanError) as exc:
        read_plan(plan)
    assert str(exc.value) == f"{plan}: more than 64 MiB (67,108,865 bytes), too large for a plan .json file"
    profile = _sparse(tmp_path / "t.json", 17 << 20)
    with pytest.raises(TargetError) as exc:
        get_target(str(profile))
    assert str(exc.value) == (
        f"{profile}: more than 16 MiB (17,825,792 bytes), too large for a target profile (.json)"
    )


def test_a_measurement_too_large_or_a_device_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compare read /dev/zero until memory ran out (and any file whole, whatever its size)."""
    import deployopt.timing

    b = write_timing(tmp_path / "b.json", 500.0, seed=1)
    for args, what in (
        (["compare", "/dev/zero", str(b)], "a measurement file (JSON)"),
        (["targets", "--target", "/dev/zero"], "a target profile (.json)"),
    ):
        proc = _run_capped(*args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == f"error: /dev/zero: not a regular file (a device or socket); give {what}\n"
    monkeypatch.setattr(deployopt.timing, "MEASUREMENT_MAX_BYTES", 1 << 20)
    big = _sparse(tmp_path / "a.json", 3 << 20)
    with pytest.raises(DataError) as exc:
        compare_paths(big, b)
    assert str(exc.value) == (
        f"{big}: more than 1 MiB (3,145,728 bytes), too large for a measurement file (JSON)"
    )


def test_a_pipe_that_sends_too_much_is_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import deployopt.surgery

    monkeypatch.setattr(deployopt.surgery, "PLAN_MAX_BYTES", 1 << 20)
    fifo = tmp_path / "plan.json"
    _fed_pipe(fifo, " " * (3 << 20))
    got = _within(lambda: read_plan(fifo), fifo)
    assert isinstance(got, DeployoptError)
    assert str(got) == f"{fifo}: more than 1 MiB came through the pipe, too large for a plan .json file"
