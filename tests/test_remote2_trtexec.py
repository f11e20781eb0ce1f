"""trtexec's side of the --remote review's findings (/tmp/remote_other.patch: deployopt/backends/trtexec.py),
played with the stand-in trtexec and board of tests/test_trtexec_backend.py: no real trtexec, ssh or
Jetson.

- the board's version check (`ssh HOST trtexec --help`) and the local one got deployopt's stdin:
  OpenSSH's client reads it, so a `while read` loop over models lost the rest of its list;
- the version check appended `extra["remote_trtexec"]` to ssh unquoted: "/opt/trt 8/bin/trtexec" was
  not found by it (the build, quoted, found it), the version was taken as unknown and 10.x flags
  went to an 8.2 board;
- `extra["remote_workdir"]` went to scp as given (see tests/test_remote2_runner_names.py);
- an input named with ',' or "'" went into trtexec's --shapes, which splits on ',' and strips or
  refuses "'": the build failed in trtexec's words, after the copy.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from cli_runner import one_error, run_cli
from test_remote2_runner_names import conv_model
from test_remote2_stdin import LIST, stdin_from
from test_trtexec_backend import FIX, play_a_trtexec_board
from test_trtexec_backend import fake as fake  # the stand-in trtexec (a fixture)

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.backends.trtexec import detect_version
from deployopt.errors import DeployoptError

#: The board these tests play is this machine (see tests/test_tensorrt_remote.py): one xdist worker.
pytestmark = pytest.mark.xdist_group("board")

HOST = "user@jetson"
#: A recorded TensorRT 8.2.5 log: its first line is the --help banner the stand-in prints.
LOG_82 = FIX / "trt8.2.5_quickstart_qat-ptq_mobilenetv2_ptq_int8_log.txt"


def test_detect_version_gives_trtexec_no_stdin(fake: dict[str, Path], tmp_path: Path) -> None:
    """A trtexec (or an ssh before it) that reads its stdin reads nothing of a list on fd 0."""
    reads = tmp_path / "reading_trtexec"
    reads.write_text(f'#!/bin/sh\ncat >> "{tmp_path}/read"\nexec "{os.environ["DEPLOYOPT_TRTEXEC"]}" "$@"\n')
    reads.chmod(0o755)
    listing = tmp_path / "models.txt"
    listing.write_text(LIST)
    with stdin_from(listing) as fd:
        version = detect_version(str(reads))
        left_at = os.lseek(fd, 0, os.SEEK_CUR)
    assert version == "10.16.1"
    assert (tmp_path / "read").read_text() == "" and left_at == 0


def test_remote_trtexec_session_gives_ssh_no_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote trtexec measure (its version check, mkdir, copy, run, copy back) with fd 0 on a list
    and an ssh that reads its stdin as OpenSSH's does: nothing of the list read."""
    play_a_trtexec_board(tmp_path, monkeypatch)
    ssh = tmp_path / "sshbin" / "ssh"
    ssh.rename(tmp_path / "sshbin" / "board_ssh")
    ssh.write_text(f'#!/bin/sh\ncat >> "{tmp_path}/read"\nexec "{tmp_path}/sshbin/board_ssh" "$@"\n')
    ssh.chmod(0o755)
    listing = tmp_path / "models.txt"
    listing.write_text(LIST)
    extra = {"remote": HOST, "remote_workdir": str(tmp_path / "board")}
    with stdin_from(listing) as fd:
        with get_backend("trtexec").open(MeasureOptions(dtype="fp16", runs=5, extra=extra)) as session:
            timing = session.measure(conv_model(tmp_path / "m.onnx", "x", dynamic=False))
        left_at = os.lseek(fd, 0, os.SEEK_CUR)
    assert timing.runs == 300  # the recorded export's samples
    assert (tmp_path / "read").read_text() == "" and left_at == 0


def test_remote_trtexec_with_a_space_in_its_path_is_version_checked_as_it_is_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`extra["remote_trtexec"]` = ".../trt 8/bin/trtexec" (an 8.2.5 stand-in): the version check
    finds it (quoted, under the board's `timeout`), so the build gets 8.2's --workspace, not 10.x's
    --memPoolSize that 8.2 refuses."""
    play_a_trtexec_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_LOG", str(LOG_82))
    spaced = tmp_path / "trt 8" / "bin" / "trtexec"
    spaced.parent.mkdir(parents=True)
    shutil.copy(tmp_path / "bin" / "trtexec", spaced)
    extra = {"remote": HOST, "remote_trtexec": str(spaced), "remote_workdir": str(tmp_path / "board")}
    with get_backend("trtexec").open(MeasureOptions(dtype="fp16", runs=5, extra=extra)) as session:
        session.run(conv_model(tmp_path / "m.onnx", "x", dynamic=False))
        version = session.version
    args = (tmp_path / "args.txt").read_text().splitlines()
    assert version == "8.2.5"
    assert "--workspace=1024" in args and not [a for a in args if a.startswith("--memPoolSize")], args
    help_call = [ln for ln in (tmp_path / "ssh_scp.log").read_text().splitlines() if "--help" in ln]
    assert len(help_call) == 1 and "timeout --kill-after=" in help_call[0], help_call


@pytest.mark.parametrize("workdir", ["/tmp/my work", "~/trt", "-w"])
def test_remote_trtexec_session_refuses_a_workdir_scp_cannot_take_when_it_opens(
    workdir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One line when the session opens, before anything ran on the board."""
    log = play_a_trtexec_board(tmp_path, monkeypatch)
    extra = {"remote": HOST, "remote_workdir": workdir}
    with pytest.raises(DeployoptError, match=r"^remote_workdir .*: give the board's work folder in letters"):
        get_backend("trtexec").open(MeasureOptions(dtype="fp16", runs=5, extra=extra))
    assert not log.exists() or log.read_text() == ""


@pytest.mark.parametrize(("name", "char"), [("a,b", ","), ("in'put", "'")])
def test_cli_bench_trtexec_refuses_an_input_its_shapes_cannot_name(
    name: str,
    char: str,
    fake: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A dynamic input named with ',' or "'" on the local trtexec: one line naming the input and the
    character, exit 2, trtexec never ran (it wrote no arguments)."""
    model = conv_model(tmp_path / "m.onnx", name)
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), "--backend", "trtexec", "--runs", "5")
    assert one_error(code, err).startswith(
        f"error: input {name!r} of m.onnx has {char!r} in its name, which trtexec's --shapes cannot name: "
        "rename the input"
    )
    assert not (tmp_path / "args.txt").exists()


def test_remote_trtexec_refuses_an_input_named_with_a_comma_before_any_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on the board: refused before the version check, the mkdir or any scp."""
    log = play_a_trtexec_board(tmp_path, monkeypatch)
    model = conv_model(tmp_path / "m.onnx", "a,b")
    extra = {"remote": HOST, "remote_workdir": str(tmp_path / "board")}
    refused = pytest.raises(DeployoptError, match=r"^input 'a,b' of m\.onnx has ',' in its name")
    with get_backend("trtexec").open(MeasureOptions(dtype="fp16", runs=5, extra=extra)) as session, refused:
        session.measure(model)
    assert not log.exists() or log.read_text() == ""


def test_trtexec_runs_a_dynamic_input_named_with_a_colon(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Guard (passes before the fix too): trtexec takes a name up to the last ':' of its --shapes
    entry, so "images:0" (TF exports' name) is run, with --shapes=images:0:1x3x8x8."""
    model = conv_model(tmp_path / "m.onnx", "images:0")
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), "--backend", "trtexec", "--runs", "5")
    assert code == 0, err
    assert "--shapes=images:0:1x3x8x8" in (tmp_path / "args.txt").read_text().splitlines()
