"""Writing outputs on Windows, simulated on Linux in-process (portability bug bash).

Two rules of Windows that Linux does not have: there is no `os.pathconf` (every write asked it for
the longest file name, and ended in an AttributeError traceback), and a file another process holds
open can be neither deleted nor renamed, nor can a folder holding one (optimize's result set was
replaced name by name: one held file lost both the previous set and the new one)."""

from __future__ import annotations

import errno
import json
import os
import pathlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import one_error, run_cli

from deployopt import fileio
from deployopt.errors import OutputError
from deployopt.fileio import NAME_MAX, output_set, write_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "resnet56_pruned_cifar.onnx"
NAMES = ["model.onnx", "plan.json", "staircases", "report.json"]  # report.json: the marker
HELD = "The process cannot access the file because it is being used by another process"


# ---- no os.pathconf (Windows) -----------------------------------------------------------------


def test_name_max_without_pathconf_is_name_max(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delattr(os, "pathconf")
    assert fileio._name_max(tmp_path) == NAME_MAX


def test_optimize_and_fp16_write_their_outputs_where_os_has_no_pathconf(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`optimize` (every write: checks, temp names, the output set, the lock) and `fp16 -o`, as on
    Windows: an AttributeError traceback and nothing written before."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delattr(os, "pathconf")
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "optimize", str(EXAMPLE), "-t", "nano", "-b", "model", "-o", str(out)
    )
    assert code == 0, err
    assert "Traceback" not in err and f"wrote {out}/ (model.onnx" in stdout
    assert {"model.onnx", "plan.json", "report.md", "report.json"} <= {p.name for p in out.iterdir()}
    code, _, err = run_cli(monkeypatch, capsys, "fp16", str(EXAMPLE), "-o", str(tmp_path / "half.onnx"))
    assert code == 0, err
    assert (tmp_path / "half.onnx").stat().st_size > 0


# ---- a file held open (Windows' sharing rule) ---------------------------------------------------


def hold_open(monkeypatch: pytest.MonkeyPatch, held: Path) -> Callable[[], None]:
    """Windows' rule for `held`, a file another process has open: deleting or renaming it fails
    (PermissionError, WinError 32), and so does renaming a folder it is in. Returns the release."""
    held = held.absolute()
    state = {"held": True}

    def is_held(path: Any, dir_fd: int | None = None, folder_too: bool = False) -> bool:
        if not state["held"]:
            return False
        p = os.fspath(path)
        if dir_fd is not None and not os.path.isabs(p):  # rmtree's: relative to an open folder
            try:
                p = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), p)
            except OSError:  # no /proc (macOS): rmtree never meets the held file here anyway
                return False
        p = os.path.abspath(p)
        return p == str(held) or (folder_too and str(held).startswith(p + os.sep))

    def denied(path: Any) -> PermissionError:
        return PermissionError(errno.EACCES, HELD, os.fspath(path))

    real_unlink, real_replace, real_rename = os.unlink, os.replace, os.rename
    real_path_unlink = pathlib.Path.unlink

    def unlink(path: Any, *a: Any, dir_fd: int | None = None, **k: Any) -> None:
        if is_held(path, dir_fd):
            raise denied(path)
        real_unlink(path, *a, dir_fd=dir_fd, **k)

    def moved(real: Callable[..., None]) -> Callable[..., None]:
        def move(src: Any, dst: Any, *a: Any, **k: Any) -> None:
            if is_held(src, folder_too=True) or is_held(dst):
                raise denied(src)
            real(src, dst, *a, **k)

        return move

    def path_unlink(self: pathlib.Path, missing_ok: bool = False) -> None:
        if is_held(self):
            raise denied(self)
        real_path_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(os, "unlink", unlink)
    monkeypatch.setattr(os, "remove", unlink)
    monkeypatch.setattr(os, "replace", moved(real_replace))
    monkeypatch.setattr(os, "rename", moved(real_rename))
    monkeypatch.setattr(pathlib.Path, "unlink", path_unlink)
    return lambda: state.update(held=False)


def previous_set(folder: Path) -> dict[str, str]:
    """A previous result set (and a journal, which is not part of it) in `folder`: what it holds."""
    folder.mkdir(exist_ok=True)
    for name in ("model.onnx", "plan.json", "report.json", "journal.jsonl"):
        (folder / name).write_text(f"old {name}")
    (folder / "staircases").mkdir()
    (folder / "staircases" / "conv1.csv").write_text("old conv1")
    return contents(folder)


def contents(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): p.read_text() if p.is_file() else "<folder>"
        for p in sorted(folder.rglob("*"))
    }


def write_new_set(staging: Path) -> None:
    for name in ("model.onnx", "plan.json", "report.json"):
        (staging / name).write_text(f"new {name}")
    (staging / "staircases").mkdir()
    (staging / "staircases" / "conv1.csv").write_text("new conv1")


@pytest.mark.parametrize(
    "held", ["model.onnx", "report.json", "staircases/conv1.csv"], ids=["model", "marker", "in-a-folder"]
)
def test_a_held_previous_file_leaves_the_previous_set_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, held: str
) -> None:
    """The previous model mapped by an app that runs it, report open in an editor, a shell inside
    staircases/: one line naming the file, and the previous set exactly as it was (before: every
    name of it removed, the new set thrown away with its staging folder; the held marker, removed
    first, failed before anything changed then too: a guard)."""
    before = previous_set(tmp_path)
    hold_open(monkeypatch, tmp_path / held)
    with pytest.raises(OutputError) as caught, output_set(tmp_path, NAMES) as staging:
        write_new_set(staging)
    where = tmp_path / held.split("/")[0]
    assert str(caught.value) == f"cannot write {where}: {HELD}"
    assert contents(tmp_path) == before  # nothing lost, nothing new, no staging or aside folder left


def test_the_set_moves_in_once_the_file_is_released(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Guard (passes before too): once the file is closed, the next write puts the new set in whole."""
    previous_set(tmp_path)
    release = hold_open(monkeypatch, tmp_path / "model.onnx")
    with pytest.raises(OutputError), output_set(tmp_path, NAMES) as staging:
        write_new_set(staging)
    release()
    with output_set(tmp_path, NAMES) as staging:
        write_new_set(staging)
    assert contents(tmp_path) == {
        "journal.jsonl": "old journal.jsonl",
        "model.onnx": "new model.onnx",
        "plan.json": "new plan.json",
        "report.json": "new report.json",
        "staircases": "<folder>",
        "staircases/conv1.csv": "new conv1",
    }


def test_a_failure_moving_the_new_set_in_puts_the_previous_one_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A rename of the new set that fails half way (any OS): what moved in goes, and the previous
    set, moved aside until then, comes back whole, marker included (before: every name removed)."""
    before = previous_set(tmp_path)
    real_replace = os.replace

    def plan_fails(src: Any, dst: Any) -> None:
        if Path(dst) == tmp_path / "plan.json" and Path(src).read_text().startswith("new"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", plan_fails)
    with (
        pytest.raises(OutputError, match=r"plan\.json: No space left on device$"),
        output_set(tmp_path, NAMES) as staging,
    ):
        write_new_set(staging)
    assert contents(tmp_path) == before


def test_the_previous_set_is_moved_aside_before_anything_is_deleted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Nothing of the previous set is deleted until the new set is in, its marker last."""
    previous_set(tmp_path)
    events: list[str] = []
    real_replace, real_rmtree = os.replace, fileio.shutil.rmtree

    def replace(src: Any, dst: Any) -> None:
        into = "aside" if Path(dst).parent != tmp_path else "in"
        events.append(f"{into} {Path(dst).name}")
        real_replace(src, dst)

    def rmtree(path: Any, *a: Any, **k: Any) -> None:
        events.append(f"rmtree {'staging' if Path(path).name.startswith(fileio.STAGING_PREFIX) else path}")
        real_rmtree(path, *a, **k)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(fileio.shutil, "rmtree", rmtree)
    monkeypatch.setattr(fileio, "_remove", lambda p: events.append(f"remove {p.name}"))
    with output_set(tmp_path, NAMES) as staging:
        write_new_set(staging)
    assert events[:4] == ["aside report.json", "aside model.onnx", "aside plan.json", "aside staircases"]
    assert events[4:8] == ["in model.onnx", "in plan.json", "in staircases", "in report.json"]
    assert events[8:] == ["rmtree staging", "rmtree staging"]  # the previous set's folder, then staging
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*NAMES, "journal.jsonl"])


# ---- the whole command ------------------------------------------------------------------------


def test_optimize_over_a_held_previous_model_keeps_the_previous_results_and_resume_finishes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`optimize -o out --force` again while out/model.onnx is held open (Windows): one line, exit 2,
    the previous results byte for byte (before: only the journal and the held file were left); once
    it is released, --resume writes the new run's results from its journal."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    args = ["optimize", str(EXAMPLE), "-b", "model", "-o", str(out), "--force"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "-t", "nano")
    assert code == 0, err
    results = ("model.onnx", "plan.json", "report.md", "report.json")
    first = {name: (out / name).read_bytes() for name in results}
    release = hold_open(monkeypatch, out / "model.onnx")
    code, _, err = run_cli(monkeypatch, capsys, *args, "-t", "orin-nano-8gb")
    assert one_error(code, err) == f"error: cannot write {out / 'model.onnx'}: {HELD}\n"
    assert {name: (out / name).read_bytes() for name in results} == first
    assert not [p.name for p in out.iterdir() if p.name.startswith(fileio.STAGING_PREFIX)]
    release()
    code, _, err = run_cli(monkeypatch, capsys, *args[:-1], "-t", "orin-nano-8gb", "--resume")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["target"]["name"] != json.loads(first["report.json"])["target"]["name"]


def test_write_text_over_a_held_file_is_one_line_and_keeps_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Guard: a single file (bench -o) held open is one line, the old one kept (passes before too)."""
    dest = tmp_path / "bench.json"
    dest.write_text("old")
    hold_open(monkeypatch, dest)
    with pytest.raises(OutputError, match="being used by another process"):
        write_text(dest, "new")
    assert dest.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]
