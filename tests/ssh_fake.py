"""Make the tests' stand-in board answer as a Jetson's sshd and OpenSSH's client do when the board's
command dies of a signal.

The stand-in ssh (play_the_board in tests/test_trtexec_backend.py and tests/test_tensorrt_remote.py)
becomes the board's shell (`exec sh -c "$*"`): here `sh` is dash, which forks a single command and
passes its end on as 128 + N. A Jetson's sshd runs the command with the login's shell, bash (Ubuntu's
default), which execs a single command in its place; when that dies of a signal, sshd sends an
`exit-signal` message, which OpenSSH's client does not handle (clientloop.c's
client_input_channel_req reads only `exit-status`, and client_loop's exit_status stays -1): ssh
exits 255, the status of its own failures. A status the shell exits with passes through as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The random part of a calibrate's or staircase's conv folder on the board, `convs-<token>`
#: (deployopt.remote.sweep_token), as conftest pins it for every test.
SWEEP_TOKEN = "5eed5eed"


def end_as_openssh(ssh: Path) -> None:
    """Wrap the stand-in `ssh`: the board's `sh` is bash, and a board shell killed by a signal makes
    ssh exit 255."""
    board_ssh = ssh.rename(ssh.with_name("board_ssh"))
    login = ssh.parent / "login_shell"
    login.mkdir()
    (login / "sh").write_text('#!/bin/sh\nexec bash "$@"\n')  # bash by its own name: not its POSIX mode
    (login / "sh").chmod(0o755)
    ssh.write_text(
        f"#!{sys.executable}\n"
        "import os, subprocess, sys\n"
        f"env = {{**os.environ, 'PATH': {str(login)!r} + os.pathsep + os.environ['PATH']}}\n"
        f"code = subprocess.run([{str(board_ssh)!r}, *sys.argv[1:]], env=env).returncode\n"
        "sys.exit(255 if code < 0 else code)\n"
    )
    ssh.chmod(0o755)


#: Set in the tests' environment by board_processes: every process the stand-in board starts (and
#: any a test starts as "another run") inherits it, and the board's pgrep sees only those.
BOARD_MARK = "DEPLOYOPT_FAKE_BOARD"


def board_processes(bindir: Path, board_id: str, monkeypatch: object) -> None:
    """A `pgrep` and a `pkill` in `bindir` (on the stand-in board's PATH) that see only the
    processes of this test's board: the board is this machine, whose process table also holds the
    other xdist worker's stand-in boards, running from folders of the same names
    (deployopt-runner/net/)."""
    import shutil

    real = shutil.which("pgrep")
    assert real is not None, "the stand-in board needs this machine's pgrep"
    (bindir / "pgrep").write_text(
        "#!/bin/sh\n"
        f'"{real}" "$@" | while read -r pid rest; do\n'
        f'  tr "\\000" "\\n" < "/proc/$pid/environ" 2>/dev/null | grep -qxF "{BOARD_MARK}={board_id}" '
        '&& echo "$pid $rest"\n'
        "done\n"
    )
    (bindir / "pgrep").chmod(0o755)
    # and a `pkill` that ends only this board's processes: the real one, given `-f -- [d]eployopt-
    # runner/net/`, also ended the other worker's stand-in runner of the same folder name (a test
    # waiting for its board's `timeout` saw its ssh killed by signal 15 instead)
    (bindir / "pkill").write_text(  # the pgrep above picks the processes (pkill's -f and pattern)
        "#!/bin/sh\nstatus=1\n"
        f'for pid in $("{bindir / "pgrep"}" "$@"); do kill "$pid" 2>/dev/null && status=0; done\n'
        'exit "$status"\n'
    )
    (bindir / "pkill").chmod(0o755)
    monkeypatch.setenv(BOARD_MARK, board_id)  # type: ignore[attr-defined]
