"""optimize's OUTDIR against other runs and its own end: a run that ends between another's checks
and its lock, the lock file's name reused, a model among the files a run removes, and a Ctrl-C or
SIGTERM after the results are in place or inside the cleanup."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import onnx
import pytest
from cli_runner import run_cli
from optimize_runner import run_model

import deployopt.optimize as optimize_module
from deployopt.backends.model import WaveModelSession
from deployopt.errors import DeployoptError
from deployopt.journal import Journal
from deployopt.optimize import LOCK_NAME


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def base_args(model: Path, outdir: Path) -> list[str]:
    return ["optimize", str(model), "--target", "h200", "--sms", "8", "--backend", "model", "-o", str(outdir)]


def files(outdir: Path) -> dict[str, bytes]:
    """What OUTDIR holds, but the lock file (a run's own, removed when it ends)."""
    return {
        p.relative_to(outdir).as_posix(): p.read_bytes()
        for p in sorted(outdir.rglob("*"))
        if p.is_file() and p.name != LOCK_NAME
    }


def another_run_before_the_lock(
    monkeypatch: pytest.MonkeyPatch, other: Callable[[], Any]
) -> dict[str, bytes]:
    """The next run checks OUTDIR (and replays its journal) as usual, then `other`, a whole run,
    starts and ends before it takes the lock: the seconds a real run spends loading its model and
    opening its backend there. Returns (once filled) what OUTDIR held after `other`."""
    real = optimize_module._lock_outdir
    after: dict[str, bytes] = {}

    def late(outdir: Path) -> IO[str] | None:
        monkeypatch.setattr(optimize_module, "_lock_outdir", real)  # `other` locks as usual
        other()
        after.update(files(outdir))
        return real(outdir)

    monkeypatch.setattr(optimize_module, "_lock_outdir", late)
    return after


def test_a_run_another_finished_before_its_lock_does_not_write_over_it(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two plain runs into a new OUTDIR both exited 0: the second's results replaced the first's and
    its `start` went into the first's journal (a later --resume then mixed both runs' timings). The
    folder is checked again under the lock: the same "already exists", nothing touched."""
    model, out = zoo_model_path("vgg16_pruned_b4"), tmp_path / "out"
    after = another_run_before_the_lock(monkeypatch, lambda: run_model(model, out, max_evals=4))
    with pytest.raises(DeployoptError, match="already exists; use --resume to continue or --force"):
        run_model(model, out, max_evals=6, mode="trim")
    assert "report.json" in after and files(out) == after
    assert [e["event"] for e in Journal.read(out / "journal.jsonl")].count("start") == 1


def test_a_resume_whose_journal_another_run_replaced_is_refused(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --resume overlapping a --force run (which started over, and ended, while the resume loaded)
    appended its `resume` and `done` to the new run's journal. It replays the journal again under
    the lock, and refuses one that changed."""
    model, out = zoo_model_path("vgg16_pruned_b4"), tmp_path / "out"
    run_model(model, out, max_evals=4)
    after = another_run_before_the_lock(monkeypatch, lambda: run_model(model, out, max_evals=4, force=True))
    with pytest.raises(DeployoptError) as exc:
        run_model(model, out, max_evals=6, resume=True)
    assert str(exc.value) == (
        f"--resume: {out / 'journal.jsonl'} changed since it was read: another run wrote to {out} "
        "meanwhile; run --resume again, or use --force to start over"
    )
    assert files(out) == after
    assert "resume" not in [e["event"] for e in Journal.read(out / "journal.jsonl")]


def test_a_lock_file_renamed_over_before_it_is_locked_is_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run ending removes its lock file, then releases it: a run that opened the file before the
    removal locked the removed file while a third run created and locked a new one, and both went
    on. The lock taken must be on the file the name still gives."""
    import fcntl

    real_flock = fcntl.flock
    lock = tmp_path / LOCK_NAME
    third: list[IO[str]] = []

    def flock_after_the_swap(fd: Any, op: int) -> None:
        if not third:  # between this run's open and its flock: the holder ends, a third run starts
            lock.unlink()
            third.append(open(lock, "a"))  # noqa: SIM115 - closed below
            real_flock(third[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_the_swap)
    try:
        with pytest.raises(
            DeployoptError, match=re.escape(f"{tmp_path} is in use by another `deployopt optimize` run")
        ):
            optimize_module._lock_outdir(tmp_path)
        assert os.path.samestat(lock.stat(), os.fstat(third[0].fileno()))  # the third run keeps its lock
    finally:
        for handle in third:
            handle.close()


def test_a_folder_holding_only_the_lock_file_is_new(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A run SIGKILLed between creating OUTDIR and writing its journal leaves only the lock file: a
    plain run said "already exists; use --resume", and --resume "nothing to resume"."""
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).touch()
    code, _, err = run_cli(
        monkeypatch, capsys, *base_args(zoo_model_path("vgg16_pruned_b4"), out), "--max-evals", "4"
    )
    assert code == 0, err
    assert (out / "report.json").is_file() and not (out / LOCK_NAME).exists()


@pytest.mark.parametrize(
    "where", ["staircases/mine.onnx", "report.md", "plan.json", "report.json", "journal.jsonl", LOCK_NAME]
)
def test_force_refuses_an_input_model_among_the_files_it_removes(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, where: str
) -> None:
    """`optimize od/staircases/mine.onnx -o od --force` deleted its input (staircases/ goes whole);
    so did a model at od/report.md, od/plan.json or od/journal.jsonl. Only model.onnx and
    model.onnx.data were guarded."""
    out = tmp_path / "od"
    model = out / where
    model.parent.mkdir(parents=True)
    model.write_bytes(zoo_model_path("vgg16_pruned_b4").read_bytes())
    before = files(out) | {where: model.read_bytes()}
    with pytest.raises(DeployoptError) as exc:
        run_model(model, out, max_evals=4, force=True)
    head = f"{model} would be removed" if where.startswith("staircases/") else f"cannot write {model}"
    assert str(exc.value) == (
        f"{head}: it is the model this command reads; give another -o/--out (or move the model out of "
        "that folder)"
    )
    assert files(out) | ({where: model.read_bytes()} if where == LOCK_NAME else {}) == before


def test_force_refuses_a_model_whose_weights_are_in_staircases(
    zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """An external-data model reading od/staircases/w.bin: --force removed the weights it reads."""
    out = tmp_path / "od"
    (out / "staircases").mkdir(parents=True)
    model = out / "mine.onnx"
    proto = onnx.load(zoo_model_path("vgg16_pruned_b4"))
    onnx.save_model(proto, model, save_as_external_data=True, location="staircases/w.bin", size_threshold=0)
    before = files(out)
    with pytest.raises(
        DeployoptError,
        match=re.escape(f"cannot write {out / 'staircases' / 'w.bin'}: it is the weights file"),
    ):
        run_model(model, out, max_evals=4, force=True)
    assert files(out) == before


def test_ctrl_c_while_done_is_written_says_the_results_are_complete(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The results were in place, but `finished` was set only after the journal's `done` line
    (fsync'd: a while on a slow disk): a Ctrl-C there said "resume with --resume"."""
    real = Journal.write

    def interrupted_at_done(self: Journal, event: str, **data: Any) -> None:
        if event == "done":
            raise KeyboardInterrupt
        real(self, event, **data)

    monkeypatch.setattr(Journal, "write", interrupted_at_done)
    out = tmp_path / "out"
    code, _, err = run_cli(
        monkeypatch, capsys, *base_args(zoo_model_path("vgg16_pruned_b4"), out), "--max-evals", "4"
    )
    assert code == 130 and err.strip().splitlines()[-1] == (
        f"interrupted after the run finished: its results in {out} are complete"
    )
    assert (out / "report.json").is_file()


def test_ctrl_c_while_the_summary_prints_says_the_results_are_complete(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """After run() returned, a Ctrl-C was a bare "interrupted": were the results there or not?"""
    import deployopt.cli.optimize_cmd as optimize_cmd

    def interrupted(result: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(optimize_cmd, "_render", interrupted)
    out = tmp_path / "out"
    code, _, err = run_cli(
        monkeypatch, capsys, *base_args(zoo_model_path("vgg16_pruned_b4"), out), "--max-evals", "4"
    )
    assert code == 130 and err.strip().splitlines()[-1] == (
        f"interrupted after the run finished: its results in {out} are complete"
    )


def test_ctrl_c_in_the_cleanup_still_removes_the_work_folder_and_closes_the_session(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The cleanup closed the journal, released the lock, removed the work folder and closed the
    backend one after another: a Ctrl-C in the first step left the candidate models in the temp dir
    and the backend's worker running."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    real = Journal.close
    closed: list[Any] = []

    def interrupted_close(self: Journal) -> None:
        real(self)
        raise KeyboardInterrupt  # landing just as it returns

    monkeypatch.setattr(Journal, "close", interrupted_close)
    monkeypatch.setattr(WaveModelSession, "close", lambda self: closed.append(self))
    out = tmp_path / "out"
    code, _, err = run_cli(
        monkeypatch, capsys, *base_args(zoo_model_path("vgg16_pruned_b4"), out), "--max-evals", "4"
    )
    assert code == 130 and err.strip().splitlines()[-1] == (
        f"interrupted after the run finished: its results in {out} are complete"
    )
    assert list((tmp_path / "tmp").iterdir()) == [] and closed
    assert not (out / LOCK_NAME).exists()


def test_sigterm_is_ignored_while_python_shuts_down_as_ctrl_c_is(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """docs/optimize.md: a Ctrl-C or SIGTERM landing while Python shuts down is ignored; entry()
    ignored SIGINT only, and SIGTERM (its handler put back by main()) killed it with no line."""
    from deployopt.cli.main import entry

    monkeypatch.setattr(sys, "argv", ["deployopt", "targets"])
    # SIGHUP too, which entry() also ignores: left ignored, this worker's later children inherited
    # it, and the pty hangup tests' runs went on after their terminal hung up
    shutdown = (signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []))
    saved = {s: signal.getsignal(s) for s in shutdown}
    try:
        with contextlib.suppress(SystemExit):
            entry()
        after = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    capsys.readouterr()
    assert after == {signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: signal.SIG_IGN}


def test_force_keeps_the_previous_results_until_its_own_replace_them(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--force` into a release folder removed its results as the run started: interrupted (or
    failed) before its end, it left a new journal alone there, the shipped model and engine gone.
    Now it removes only the old journal: the previous results stay, whole, beside the new run's
    journal (for --resume), until a run completes and replaces them as one set."""
    model, out = zoo_model_path("vgg16_pruned_b4"), tmp_path / "out"
    run_model(model, out, max_evals=4)
    before = {k: v for k, v in files(out).items() if k != "journal.jsonl"}
    assert "report.json" in before and "model.onnx" in before

    def interrupted(self: Any) -> Any:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(optimize_module.Optimizer, "search", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run_model(model, out, max_evals=6, mode="trim", force=True)
    after = files(out)
    assert {k: v for k, v in after.items() if k != "journal.jsonl"} == before
    assert [e["event"] for e in Journal.read(out / "journal.jsonl")] == ["start"]  # the new run's alone
    done = run_model(model, out, max_evals=6, mode="trim", resume=True)
    assert done is not None and files(out)["report.json"] != before["report.json"]
