"""ssh and scp never get deployopt's stdin (Board.call), played with stand-ins that read their stdin as
OpenSSH's client does without -n (it forwards it to the board whether the command reads it or not).

Found by the read-only review of --remote: in `while read -r m; do deployopt bench "$m" --remote
…; done < models.txt` the first ssh swallowed the rest of the list, so only the first model was
benched and every exit status was 0; run in the background from a terminal, the first ssh was
stopped (SIGTTIN) and the run failed as a connection timeout. No real ssh or Jetson is involved.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_tensorrt_remote import HOST, play_the_board

from deployopt.remote import Board

#: The board these tests play is this machine (see tests/test_tensorrt_remote.py): one xdist worker.
pytestmark = pytest.mark.xdist_group("board")

LIST = "a.onnx\nb.onnx\n"


@contextmanager
def stdin_from(path: Path) -> Iterator[int]:
    """This process's fd 0 reads `path` (as a `while read` loop's commands do) for the block; yields
    the descriptor, whose offset tells how much of the file was read."""
    fd = os.open(path, os.O_RDONLY)
    saved = os.dup(0)
    os.dup2(fd, 0)
    try:
        yield fd
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(fd)


def reading_stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ssh and scp that first read all their stdin into tmp_path/read-ssh (read-scp), as OpenSSH's
    client does, then do what the tests' stand-ins do: ssh runs its command here, scp copies."""
    bindir = tmp_path / "readbin"
    bindir.mkdir()
    (bindir / "ssh").write_text(
        f'#!/bin/sh\ncat >> "{tmp_path}/read-ssh"\nshift 5\nexec sh -c "$*"\n'  # -o … -o … HOST
    )
    (bindir / "scp").write_text(
        f'#!/bin/sh\ncat >> "{tmp_path}/read-scp"\nshift 4\nfor dest; do :; done\ncp "$1" "${{dest#*:}}"\n'
    )
    for exe in bindir.iterdir():
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return bindir


def test_board_call_gives_ssh_and_scp_no_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Board.run and Board.put with fd 0 on a list of models: the stand-in ssh and scp read nothing
    (/dev/null), and the list is where it was, for the loop's next `read`."""
    reading_stand_ins(tmp_path, monkeypatch)
    listing = tmp_path / "models.txt"
    listing.write_text(LIST)
    local = tmp_path / "m.onnx"
    local.write_bytes(b"model")
    board = Board(HOST)
    with stdin_from(listing) as fd:
        said = board.run(["echo", "hello from the board"], "echo", 30)
        board.put(local, tmp_path / "copied.onnx", "scp of the model", 30)
        left_at = os.lseek(fd, 0, os.SEEK_CUR)
    assert said == "hello from the board\n"
    assert (tmp_path / "copied.onnx").read_bytes() == b"model"
    assert (tmp_path / "read-ssh").read_text() == ""  # it read the list before
    assert (tmp_path / "read-scp").read_text() == ""
    assert left_at == 0


def test_cli_bench_remote_in_a_while_read_loop_benches_every_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zoo_model_path: Callable[[str], Path]
) -> None:
    """Two `deployopt bench … --backend tensorrt --remote` in a `while read` loop over a list, the
    board's ssh reading its stdin as OpenSSH's does: both models benched (the first ssh took the
    rest of the list: one result, exit 0)."""
    play_the_board(tmp_path, monkeypatch)
    board_ssh = tmp_path / "sshbin" / "ssh"
    board_ssh.rename(tmp_path / "sshbin" / "board_ssh")
    board_ssh.write_text(
        f'#!/bin/sh\ncat >> "{tmp_path}/read-ssh"\nexec "{tmp_path}/sshbin/board_ssh" "$@"\n'
    )
    board_ssh.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    source = zoo_model_path("mobilenet_like")
    for name in ("a", "b"):
        (work / f"{name}.onnx").write_bytes(Path(source).read_bytes())
    (work / "models.txt").write_text(LIST)
    loop = (
        'while read -r m; do "$PY" -m deployopt bench "$m" --backend tensorrt --remote '
        f'{HOST} --runs 3 --warmup 1 -o "$m.json" >"$m.log" 2>&1 || echo "failed: $m"; done < models.txt'
    )
    env = {**os.environ, "PY": sys.executable}
    done = subprocess.run(["sh", "-c", loop], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    logs = {p.name: p.read_text() for p in work.glob("*.log")}
    assert done.returncode == 0 and done.stdout == "", (done.stdout, logs)
    assert sorted(p.name for p in work.glob("*.json")) == ["a.onnx.json", "b.onnx.json"], logs
    assert (tmp_path / "read-ssh").read_text() == ""
