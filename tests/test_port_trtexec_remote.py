"""`--backend trtexec --remote USER@HOST` from a Windows host: the board's paths stay POSIX.

On Windows `pathlib.Path` is WindowsPath, and the session built the board's folders with it:
`mkdir -p '\\tmp\\deployopt-trtexec\\…'` (one odd name in the board user's home), trtexec's exports
written there and never found, optimize's run folder never removed. Simulated on Linux by binding
the module's `Path` to PureWindowsPath (what str() of a Path gives there) while the session is made;
every ssh and scp is recorded instead of run (portability bug bash)."""

from __future__ import annotations

import pathlib
from pathlib import Path, PureWindowsPath
from typing import Any

import pytest

import deployopt.backends.trtexec as trtexec_module
from deployopt import remote
from deployopt.backends.base import MeasureOptions

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "resnet56_pruned_cifar.onnx"
HOST = "nvidia@jetson"
FLAVOURS = [pytest.param(pathlib.Path, id="posix-host"), pytest.param(PureWindowsPath, id="windows-host")]


@pytest.fixture
def board_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Every command for the board, (what, argv), answered as a passing trtexec would be."""
    calls: list[tuple[str, list[str]]] = []

    def call(self: Any, cmd: list[str], what: str, timeout_s: float, *a: Any, **k: Any) -> str:
        calls.append((what, [str(c) for c in cmd]))
        return "&&&& PASSED TensorRT.trtexec\n"

    monkeypatch.setattr(remote.Board, "call", call)
    return calls


def session(monkeypatch: pytest.MonkeyPatch, host_path: type, **extra: Any) -> Any:
    """A trtexec session for HOST, made on a host whose Path is `host_path`."""
    options = MeasureOptions(
        dtype="fp16", runs=5, warmup=1, extra={"remote": HOST, "trt_version": "8.5.2", **extra}
    )
    with monkeypatch.context() as m:
        m.setattr(trtexec_module, "Path", host_path)
        made = trtexec_module.TrtexecSession(
            trtexec_module.TrtexecBackend(), options, "/usr/src/tensorrt/bin/trtexec"
        )
    return made


def board_text(calls: list[tuple[str, list[str]]]) -> str:
    """What reaches the board: the ssh command lines and scp's board-side arguments."""
    parts = []
    for _, cmd in calls:
        if cmd[0] == "ssh":
            parts.append(cmd[-1])
        else:
            parts += [a.split(":", 1)[1] for a in cmd if a.startswith(f"{HOST}:")]
    return "\n".join(parts)


@pytest.mark.parametrize("host_path", FLAVOURS)
def test_a_run_sends_the_board_posix_paths_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, board_calls: list[tuple[str, list[str]]], host_path: type
) -> None:
    """bench/profile's run: the model's folder, the model's copy, trtexec's files and the fetch of
    its exports all under /tmp/deployopt-trtexec/, with no backslash (posix-host: a guard)."""
    s = session(monkeypatch, host_path)
    assert str(s.remote_workdir) == "/tmp/deployopt-trtexec"
    out = tmp_path / "out"
    out.mkdir()
    s._run_remote(EXAMPLE, out, {})  # the fake board wrote no exports: nothing timed, every call made
    s.close()
    text = board_text(board_calls)
    assert "\\" not in text, text
    whats = [what for what, _ in board_calls]
    assert whats[:2] == ["mkdir", "scp of the model"] and "trtexec" in whats
    mkdir = board_calls[0][1][-1]
    assert mkdir.startswith("mkdir -p /tmp/deployopt-trtexec/resnet56_pruned_cifar-")
    assert "'[.]/" not in mkdir  # the look for other runs matched any "./" on a Windows host
    model_copy = board_calls[1][1][-1]
    assert model_copy.startswith(f"{HOST}:/tmp/deployopt-trtexec/resnet56_pruned_cifar-")
    assert model_copy.endswith("/resnet56_pruned_cifar.onnx")
    trtexec = next(cmd[-1] for what, cmd in board_calls if what == "trtexec")
    assert "--onnx=/tmp/deployopt-trtexec/resnet56_pruned_cifar-" in trtexec
    assert "--exportTimes=/tmp/deployopt-trtexec/resnet56_pruned_cifar-" in trtexec
    fetch = next(cmd for what, cmd in board_calls if what == "scp of trtexec's exports")
    assert any(a.startswith(f"{HOST}:/tmp/deployopt-trtexec/resnet56_pruned_cifar-") for a in fetch), fetch


@pytest.mark.parametrize("host_path", FLAVOURS)
def test_optimizes_run_folder_is_made_and_removed_on_the_board(
    monkeypatch: pytest.MonkeyPatch, board_calls: list[tuple[str, list[str]]], host_path: type
) -> None:
    """optimize's run folder: made in preflight and removed at close (from a Windows host its
    backslash name was one "name" that remove_run_dir never took for a run's folder)."""
    s = session(monkeypatch, host_path, remote_run="optimize-123-abc")
    assert str(s.run_dir) == "/tmp/deployopt-trtexec/optimize-123-abc"
    s.preflight()
    s.close()
    text = board_text(board_calls)
    assert "\\" not in text, text
    assert board_calls[0][1][-1].startswith("mkdir -p /tmp/deployopt-trtexec/optimize-123-abc")
    removals = [cmd[-1] for what, cmd in board_calls if what == "removing the run's folder"]
    assert removals == ["rm -rf /tmp/deployopt-trtexec/optimize-123-abc"]
