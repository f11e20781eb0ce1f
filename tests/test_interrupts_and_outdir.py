"""Interrupts and OUTDIR, where they were misread: a Ctrl-C or SIGTERM inside an extension's import
(a traceback, or "not installed"), one after an output was complete ("interrupted" over a complete
file), an OUTDIR removed or replaced while optimize ran (one run's results beside another's
journal), and an OUTDIR that is a dangling symlink ("File exists")."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest
from cli_runner import run_cli
from optimize_runner import run_model

from deployopt.errors import OutputError
from deployopt.fileio import check_output_dir, make_output_dir
from deployopt.layers import ConvShape, conv_model
from deployopt.optimize import LOCK_NAME, Optimizer


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def conv(tmp_path: Path) -> Path:
    path = tmp_path / "conv.onnx"
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 16)), str(path))
    return path


class _InterruptedInit:
    """A meta path finder whose module fails to import as an extension module does when a signal
    lands while it initializes: pybind11 raises `ImportError: initialization failed` from the
    KeyboardInterrupt (onnxruntime, matplotlib's kiwisolver). `sigterm`: the interrupt is a real
    SIGTERM to this process, which the CLI's handler turns into one."""

    def __init__(self, name: str, sigterm: bool) -> None:
        self.name, self.sigterm = name, sigterm

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname != self.name:
            return None
        try:
            if self.sigterm:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10)  # the handler raises KeyboardInterrupt at once
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc


def interrupted_import(monkeypatch: pytest.MonkeyPatch, name: str, sigterm: bool = False) -> None:
    """`import NAME` (and of its submodules) fails as if interrupted inside its initialization,
    until the test ends: a submodule already imported would be taken from sys.modules."""
    for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setattr(sys, "meta_path", [_InterruptedInit(name, sigterm), *sys.meta_path])


def test_an_interrupt_is_found_through_cause_and_context() -> None:
    from deployopt.errors import interrupt_in_chain

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise ImportError("initialization failed") from ki
    except ImportError as exc:
        made_of_ctrl_c = exc
    try:
        try:
            raise made_of_ctrl_c
        except ImportError:
            raise RuntimeError("not installed") from None  # context kept, only not shown
    except RuntimeError as exc:
        said_over_it = exc
    assert interrupt_in_chain(made_of_ctrl_c) and interrupt_in_chain(said_over_it)
    assert not interrupt_in_chain(ImportError("No module named 'x'"))
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a  # a cycle ends the walk
    assert not interrupt_in_chain(a)


def test_ctrl_c_inside_an_extension_import_is_interrupted_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, conv: Path
) -> None:
    """verify imports onnxruntime with no `except ImportError`: the ImportError onnxruntime's
    extension makes of a Ctrl-C was a 63-line traceback and exit 1."""
    interrupted_import(monkeypatch, "onnxruntime")
    code, _, err = run_cli(monkeypatch, capsys, "verify", str(conv), str(conv))
    assert (code, err) == (130, "interrupted\n"), err


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="SIGTERM's handler needs the main thread",
)
def test_sigterm_inside_the_ort_import_is_interrupted_not_not_installed(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, conv: Path, tmp_path: Path
) -> None:
    """OrtBackend.availability read the interrupted import as "onnxruntime is not installed", exit 2."""
    interrupted_import(monkeypatch, "onnxruntime", sigterm=True)
    out = tmp_path / "b.json"
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(conv), "--backend", "ort", "-o", str(out))
    assert (code, err) == (143, "interrupted\n"), err
    assert not out.exists()


def _ort_availability() -> Any:
    from deployopt.backends.ort import OrtBackend

    return OrtBackend().availability()


def _nvml_probe() -> Any:
    from deployopt.targets.local import _from_nvml

    return _from_nvml()


def _cuda_binding() -> Any:
    from deployopt.backends.tensorrt import cuda_api

    return cuda_api()


def _backend_list() -> Any:
    from deployopt.backends.base import list_backends

    return list_backends()


@pytest.mark.parametrize(
    "module, call",
    [
        ("onnxruntime", _ort_availability),  # "onnxruntime is not installed"
        ("pynvml", _nvml_probe),  # --target local: "not installed"
        ("cuda", _cuda_binding),  # the next binding tried, then "install cuda-python"
        ("onnxruntime", _backend_list),  # `deployopt backends`: ort "no"
    ],
)
def test_an_interrupted_import_is_no_missing_module(
    monkeypatch: pytest.MonkeyPatch, module: str, call: Callable[[], Any]
) -> None:
    interrupted_import(monkeypatch, module)
    with pytest.raises(KeyboardInterrupt):
        call()


def test_an_interrupted_matplotlib_import_writes_no_report_without_pictures(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """write_report took it for matplotlib missing: the run went on and exited 0, its report
    without the staircases it should have had."""
    import deployopt.report as report_module

    def interrupted(*args: Any) -> list[str]:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise ImportError("initialization failed") from ki

    monkeypatch.setattr(report_module, "write_staircases", interrupted)
    monkeypatch.setattr(report_module, "render_markdown", lambda report: "")  # a report of nothing
    with pytest.raises(KeyboardInterrupt):
        report_module.write_report(tmp_path, {}, opt=object())  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


# --- an interrupt once the output is complete --------------------------------------------------


def test_bench_interrupted_after_its_file_is_written_says_it_is_complete(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, conv: Path, tmp_path: Path
) -> None:
    """The file was renamed into place ~1 s before bench exited (the table drawn, scipy imported
    for a note): a Ctrl-C there printed "interrupted" over a complete result. One before the file
    is written, in the same process afterwards, is still a bare "interrupted"."""
    import deployopt.cli.backends_cmd as backends_cmd

    def interrupt(*args: Any) -> None:
        raise KeyboardInterrupt

    out = tmp_path / "b.json"
    args = ["bench", str(conv), "--backend", "ort", "--runs", "3", "--warmup", "0", "-o", str(out)]
    with monkeypatch.context() as m:
        m.setattr(backends_cmd, "note_too_few_to_compare", interrupt)
        code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 130 and err.strip().splitlines()[-1] == (
        f"interrupted after the run finished: its result in {out} is complete"
    ), err
    assert json.loads(out.read_text())["runs"] == 3
    out.unlink()
    import deployopt.backends.base as base

    monkeypatch.setattr(base, "measured_now", interrupt)  # before the write
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert (code, err) == (130, "interrupted\n") and not out.exists()


def test_apply_and_fp16_interrupted_after_the_model_is_written_say_it_is_complete(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, conv: Path, tmp_path: Path
) -> None:
    import deployopt.cli.precision_cmd as precision_cmd
    import deployopt.cli.surgery_cmd as surgery_cmd

    def interrupt(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {}}')
    out = tmp_path / "applied.onnx"
    monkeypatch.setattr(surgery_cmd, "print_notices", interrupt)
    code, _, err = run_cli(monkeypatch, capsys, "apply", str(conv), "--plan", str(plan), "-o", str(out))
    assert (code, err) == (130, f"interrupted after the run finished: its result in {out} is complete\n")
    onnx.checker.check_model(onnx.load(str(out)))
    out16 = tmp_path / "fp16.onnx"
    monkeypatch.setattr(precision_cmd, "console", type("C", (), {"print": interrupt})())
    code, _, err = run_cli(monkeypatch, capsys, "fp16", str(conv), "-o", str(out16))
    assert (code, err) == (130, f"interrupted after the run finished: its result in {out16} is complete\n")
    assert out16.is_file()


# --- OUTDIR removed or replaced while optimize runs ----------------------------------------------


def optimize_args(model: Path, outdir: Path) -> list[str]:
    return ["optimize", str(model), "--target", "h200", "--sms", "8", "--backend", "model", "-o", str(outdir)]


REPLACED = "was removed or replaced during the run; nothing written (its journal went with it): run it again"


def before_the_results(monkeypatch: pytest.MonkeyPatch, act: Callable[[], Any]) -> None:
    """`act` runs once the search is over, before the results are written (the seconds a real run
    spends on its final checks, where `rm -rf OUTDIR` and a second run came in); once: a run
    `act` starts finishes as usual."""
    real = Optimizer._final_fidelity

    def then_act(self: Optimizer, best: Any) -> Any:
        result = real(self, best)
        monkeypatch.setattr(Optimizer, "_final_fidelity", real)
        act()
        return result

    monkeypatch.setattr(Optimizer, "_final_fidelity", then_act)


def test_an_outdir_removed_during_the_run_is_not_made_again_with_its_results(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The run wrote its journal to a deleted file and, at the end, made OUTDIR anew for its
    results (exit 0, "wrote journal.jsonl", which was not there)."""
    out = tmp_path / "out"
    before_the_results(monkeypatch, lambda: shutil.rmtree(out))
    code, _, err = run_cli(
        monkeypatch, capsys, *optimize_args(zoo_model_path("vgg16_pruned_b4"), out), "--max-evals", "4"
    )
    assert (code, err) == (2, f"error: {out} {REPLACED}\n")
    assert not out.exists()


def test_an_outdir_another_run_made_again_keeps_that_runs_files_and_lock(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`rm -rf out`, then a second run into out: both exited 0, out holding the second's journal
    beside the first's results; the first, ending, removed the lock file of a third run."""
    model = zoo_model_path("vgg16_pruned_b4")
    out = tmp_path / "out"
    held: list[Any] = []

    def replaced() -> None:
        shutil.rmtree(out)
        run_model(model, out, max_evals=4, mode="trim")
        third = open(out / LOCK_NAME, "a")  # noqa: SIM115 - closed below
        fcntl.flock(third, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.append(third)

    before_the_results(monkeypatch, replaced)
    try:
        code, _, err = run_cli(monkeypatch, capsys, *optimize_args(model, out), "--max-evals", "4")
        after = {p.name: p.read_bytes() for p in out.iterdir()}
    finally:
        for handle in held:
            handle.close()
    assert (code, err) == (2, f"error: {out} {REPLACED}\n")
    assert json.loads(after["report.json"])["mode"] == "trim"  # the second run's results, untouched
    assert LOCK_NAME in after  # the third run's lock file is still there


def test_an_outdir_removed_while_the_results_are_staged_says_so(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Removed with the staging folder inside it, the staged report.json made both again, and the
    run moved a set without its model in and exited 0. (The folder its write made again is left,
    empty: a run that removed it could race another run making it.)"""
    import deployopt.report as report_module

    out = tmp_path / "out"
    real = report_module.write_report

    def removed_first(folder: Path, *args: Any) -> None:
        shutil.rmtree(out)
        real(folder, *args)

    monkeypatch.setattr(report_module, "write_report", removed_first)
    code, _, err = run_cli(
        monkeypatch, capsys, *optimize_args(zoo_model_path("vgg16_pruned_b4"), out), "--max-evals", "4"
    )
    assert (code, err) == (2, f"error: {out} {REPLACED}\n")
    assert list(out.iterdir()) == []


def test_an_outdir_removed_mid_search_stops_at_the_next_journal_line(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Not minutes of measuring for a journal in a deleted file: the next line written stops it."""
    out = tmp_path / "out"
    real = Optimizer.evaluate
    evaluated: list[str] = []

    def evaluate(self: Optimizer, plan: dict[str, int], label: str, repeat: int = 0) -> Any:
        result = real(self, plan, label, repeat)
        evaluated.append(label)
        if len(evaluated) == 1:
            shutil.rmtree(out)
        return result

    monkeypatch.setattr(Optimizer, "evaluate", evaluate)
    code, _, err = run_cli(
        monkeypatch, capsys, *optimize_args(zoo_model_path("vgg16_pruned_b4"), out), "--max-evals", "12"
    )
    assert (code, err) == (2, f"error: {out} {REPLACED}\n")
    assert len(evaluated) <= 2 and not out.exists()


# --- OUTDIR a dangling symlink --------------------------------------------------------------------


def test_an_outdir_that_is_a_dangling_link_is_made_where_it_points(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """mkdir on the link said "cannot write out: File exists" where nothing exists; a file output
    (`apply -o dangling.onnx`) was already written through to the link's target."""
    link = tmp_path / "out"
    link.symlink_to("results/run1")
    code, _, err = run_cli(
        monkeypatch, capsys, *optimize_args(zoo_model_path("vgg16_pruned_b4"), link), "--max-evals", "4"
    )
    assert code == 0, err
    assert link.is_symlink() and (tmp_path / "results" / "run1" / "report.json").is_file()
    # the folder functions alike; a link that loops is one line saying so
    other = tmp_path / "other"
    other.symlink_to(tmp_path / "file" / "sub")
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match=f"cannot write into {other}: .*file is a file, not a folder"):
        check_output_dir(other)
    fresh = tmp_path / "fresh"
    fresh.symlink_to("made/here")
    assert make_output_dir(fresh) == fresh and (tmp_path / "made" / "here").is_dir()
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OutputError, match=f"^cannot write into {loop}: it is a symbolic link that loops$"):
        make_output_dir(loop)
