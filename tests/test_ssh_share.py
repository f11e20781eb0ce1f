"""One shared ssh connection per board (deployopt.remote.SHARED): OpenSSH's multiplexing, on for
these tests only (conftest turns it off for the rest, whose stand-in ssh and scp read a fixed number
of leading options).

The stand-in ssh here does what OpenSSH does with deployopt's options: `-f -N` with ControlMaster=yes
makes the socket and returns 0 (or fails with 255), `-O exit` removes it; a call runs its command
here (through the master or not: the argument list tells which). The real OpenSSH client on this
machine checks the options themselves (`ssh -G` resolves them without connecting) and that it
falls back to its own connection when the socket is missing or dead; no sshd is ever reached."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import run_cli
from test_trtexec_backend import fake, play_the_board  # noqa: F401  (fake: the stand-in trtexec fixture)

from deployopt import remote
from deployopt.backends.trtexec import detect_version
from deployopt.errors import BackendUnavailable
from deployopt.remote import SHARE_ENV, SHARED, Board

#: The board these tests play is this machine: its /tmp/deployopt-trtexec and deployopt-runner folders
#: are every such test's, and a run at work in one (optimize --remote) is what bench's and optimize's
#: look for other runs warns of. One xdist worker runs them all, in turn (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("board")

BASE = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
NO_ROUTE = "ssh: connect to host jetson port 22: No route to host"

#: The stand-in ssh and scp (one script, by its name). FAKE_MASTER: ok (the socket made, exit 0),
#: fail (255), slow (a login that never ends), linger (ok, leaving a child that holds its stdio);
#: FAKE_REACH=unreachable: every call fails as ssh's own failure; BOARD_SSH/BOARD_SCP: the stand-ins
#: a call goes on to, the multiplexing options taken off (play_the_board's read fixed positions).
STAND_IN = r"""
import json, os, shutil, subprocess, sys, time
name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
with open(os.environ["SSH_LOG"], "a") as log:
    log.write(json.dumps([name, *args]) + "\n")
opts, op, i = {}, None, 0
while i < len(args) and args[i] in ("-o", "-O", "-f", "-N"):
    if args[i] == "-o":
        key, _, value = args[i + 1].partition("=")
        opts[key] = value
    elif args[i] == "-O":
        op = args[i + 1]
    i += 2 if args[i] in ("-o", "-O") else 1
rest = args[i:]
path = opts.get("ControlPath", "")
if op == "exit":
    if os.path.exists(path):
        os.unlink(path)
        sys.exit(0)
    print(f"Control socket connect({path}): No such file or directory", file=sys.stderr)
    sys.exit(255)
if opts.get("ControlMaster") == "yes":
    with open(os.environ["SSH_LOG"] + ".fds", "w") as f:
        f.write(json.dumps([os.readlink(f"/proc/self/fd/{n}") for n in range(3)]))
    mode = os.environ.get("FAKE_MASTER", "ok")
    if mode == "slow":
        time.sleep(60)
    if mode in ("fail", "slow") or os.environ.get("FAKE_REACH") == "unreachable":
        print("ssh: connect to host jetson port 22: No route to host", file=sys.stderr)
        sys.exit(255)
    open(path, "w").close()
    if mode == "linger":  # a master in the background, holding what it was given as stdio
        child = subprocess.Popen(["sleep", "60"])
        with open(os.environ["SSH_LOG"] + ".pid", "w") as f:
            f.write(str(child.pid))
    sys.exit(0)
if os.environ.get("FAKE_REACH") == "unreachable":
    print("ssh: connect to host jetson port 22: No route to host", file=sys.stderr)
    sys.exit(255)
if opts.get("ControlMaster") == "no":  # deployopt's two options: off, for the board's stand-in
    at = args.index("ControlMaster=no") - 1
    args = args[:at] + args[at + 4:]
board = os.environ.get("BOARD_" + name.upper())
if board:
    os.execv(board, [board, *args])
if name == "ssh":
    os.execvp("sh", ["sh", "-c", " ".join(rest[1:])])
recursive = rest[0] == "-r"
*sources, dest = rest[1:] if recursive else rest
for src in sources:
    src, to = src.partition(":")[2] or src, dest.partition(":")[2] or dest
    if recursive:
        shutil.copytree(src, os.path.join(to, os.path.basename(src)))
    else:
        for one in __import__("glob").glob(src):
            shutil.copy(one, to)
"""


def install_stand_ins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, master: str = "ok") -> Path:
    """The stand-in ssh and scp first on PATH; the log of their argument lists (one JSON list a line)."""
    bindir = tmp_path / "muxbin"
    bindir.mkdir()
    for name in ("ssh", "scp"):
        (bindir / name).write_text(f"#!{sys.executable}\n{STAND_IN}")
        (bindir / name).chmod(0o755)
    log = tmp_path / "mux.log"
    log.touch()
    monkeypatch.setenv("SSH_LOG", str(log))
    monkeypatch.setenv("FAKE_MASTER", master)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def masters(log: Path, host: str = "user@jetson") -> list[list[str]]:
    return [c for c in calls(log) if "ControlMaster=yes" in c and c[-1] == host]


def master_argv(host: str, path: str) -> list[str]:
    """The master's command line, written out: what OpenSSH is given."""
    return [
        "ssh", *BASE, "-o", "ControlMaster=yes", "-o", "ControlPersist=120", "-o", f"ControlPath={path}",
        "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4", "-f", "-N", host,
    ]  # fmt: skip


def socket_of(argv: list[str]) -> str:
    return next(a.partition("=")[2] for a in argv if a.startswith("ControlPath="))


def multiplexed(argv: list[str]) -> bool:
    return any(a.startswith("Control") for a in argv)


@pytest.fixture
def share_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Sharing on for one test; every master it started stopped after it (the process's atexit, as
    a run ends, does not come between tests)."""
    monkeypatch.setenv(SHARE_ENV, "1")
    SHARED.close()
    yield
    SHARED.close()


def test_one_master_per_host_and_every_later_call_through_it(
    share_on: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call starts the host's master (in the background: that call connects on its own),
    once for every Board of that host; every ssh and scp after it carries `-o ControlMaster=no -o
    ControlPath=SOCKET`, SOCKET in a 0700 folder of ours; another host gets a master of its own;
    close() stops both (`ssh -O exit`) and removes the folder. The files still go and come."""
    log = install_stand_ins(tmp_path, monkeypatch)
    here = tmp_path / "here"
    here.mkdir()
    (here / "a.txt").write_text("a")
    board_dir = tmp_path / "board"

    assert Board("user@jetson").run(["echo", "first"], "echo", 30) == "first\n"
    assert SHARED.settle("user@jetson", 10)
    for _ in range(3):  # a Board per call, as TrtexecSession._board() makes them
        Board("user@jetson").run(["true"], "true", 30)
    board = Board("user@jetson")
    board.fresh_dir(board_dir, 30)
    board.put(here / "a.txt", board_dir / "a.txt", "scp", 30)
    board.put_many([here / "a.txt"], board_dir, "scp", 30)
    assert board.run_limited(["cat", str(board_dir / "a.txt")], "cat", 30) == "a"
    board.get(board_dir / "a.txt", here / "back.txt", "scp back", 30)
    board.get_matching(board_dir, "*.txt", here, "scp back", 30)
    board.get_folder(board_dir, here, "scp -r back", 30)
    detect_version("trtexec", timeout_s=30, prefix=board.ssh_prefix())
    other = Board("user@other")
    other.run(["true"], "true", 30)
    assert SHARED.settle("user@other", 10)
    other.run(["true"], "true", 30)
    assert (here / "back.txt").read_text() == "a" and (here / "board" / "a.txt").read_text() == "a"

    (jetson_master,) = masters(log)
    (other_master,) = masters(log, "user@other")
    path = socket_of(jetson_master)
    assert jetson_master == master_argv("user@jetson", path)
    assert other_master == master_argv("user@other", socket_of(other_master))
    folder = Path(path).parent
    assert socket_of(other_master) != path and Path(socket_of(other_master)).parent == folder
    assert folder.parent == Path("/tmp") and folder.name.startswith("dpo-")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and len(path.encode()) < 104
    first, *later = [
        c for c in calls(log) if c != jetson_master and any(a.startswith("user@jetson") for a in c)
    ]
    assert first == ["ssh", *BASE, "user@jetson", "echo first"]  # before the master was up: as ever
    assert len(later) == 11 and sum(c[0] == "scp" for c in later) == 5
    for argv in later:
        assert argv[1:9] == [*BASE, "-o", "ControlMaster=no", "-o", f"ControlPath={path}"], argv

    SHARED.close()
    stops = [c for c in calls(log) if "-O" in c]
    assert stops == [
        ["ssh", "-O", "exit", "-o", f"ControlPath={path}", "user@jetson"],
        ["ssh", "-O", "exit", "-o", f"ControlPath={socket_of(other_master)}", "user@other"],
    ]
    assert not folder.exists()


def test_cli_bench_remote_through_the_shared_connection(
    share_on: None,
    fake: dict[str, Path],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`deployopt bench --backend trtexec --remote user@jetson` with the host's master up: every ssh
    and scp of it goes through that master, none starts another, and the result is the one the
    stand-in board gives without sharing."""
    board_log = play_the_board(tmp_path, monkeypatch)
    bindir = tmp_path / "sshbin"
    monkeypatch.setenv("BOARD_SSH", str(bindir / "ssh"))
    monkeypatch.setenv("BOARD_SCP", str(bindir / "scp"))
    log = install_stand_ins(tmp_path, monkeypatch)
    model = tmp_path / f"shared_conv_{os.getpid()}.onnx"
    model.write_bytes(fake["model"].read_bytes())
    Board("user@jetson").ssh_opts()
    assert SHARED.settle("user@jetson", 10)
    try:
        code, out, err = run_cli(
            monkeypatch, capsys, "bench", str(model), "--backend", "trtexec", "--remote", "user@jetson",
            "--dtype", "fp16", "--json",
        )  # fmt: skip
    finally:
        shutil.rmtree(Path("/tmp/deployopt-trtexec") / model.stem, ignore_errors=True)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["runs"] == 300 and doc["environment"]["tensorrt"] == "10.16.1"
    (master,) = masters(log)
    path = socket_of(master)
    made = [c for c in calls(log) if c != master]
    assert len(made) >= 5 and len(made) == len(board_log.read_text().splitlines())
    for argv in made:
        assert argv[1:9] == [*BASE, "-o", "ControlMaster=no", "-o", f"ControlPath={path}"], argv


def test_a_master_that_fails_leaves_every_call_as_it_was(
    share_on: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A master that cannot start (ssh's 255): the host's calls carry no option of it, byte for byte
    the command lines without sharing, and no second master is tried; close() has none to stop."""
    log = install_stand_ins(tmp_path, monkeypatch, master="fail")
    board = Board("user@jetson")
    board.run(["true"], "true", 30)
    assert not SHARED.settle("user@jetson", 10)
    for _ in range(4):
        Board("user@jetson").run(["echo", "hi"], "echo", 30)
    board.put(log, "/dev/null", "scp", 30)
    assert len(masters(log)) == 1
    made = [c for c in calls(log) if "ControlMaster=yes" not in c]
    assert made == [
        ["ssh", *BASE, "user@jetson", "true"],
        *[["ssh", *BASE, "user@jetson", "echo hi"]] * 4,
        ["scp", *BASE, str(log), "user@jetson:/dev/null"],
    ]
    SHARED.close()
    assert not any("-O" in c for c in calls(log))


@pytest.mark.parametrize("master", ["fail", "slow"])
def test_cli_unreachable_host_the_same_line_no_later(
    share_on: None,
    master: str,
    fake: dict[str, Path],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An unreachable host with sharing on: `bench --remote` is the one line and exit code it was,
    no later: the master tries in the background (`slow`: a login that never ends, as a host that
    times out), the calls connect on their own and fail as ever; close() ends the master still
    trying, at once."""
    log = install_stand_ins(tmp_path, monkeypatch, master=master)
    monkeypatch.setenv("FAKE_REACH", "unreachable")
    dest = tmp_path / "result.json"
    start = time.monotonic()
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", str(fake["model"]), "--backend", "trtexec", "--remote", "user@jetson",
        "-o", str(dest),
    )  # fmt: skip
    assert time.monotonic() - start < 20  # the slow master takes 60 s
    assert code == 2 and out == "" and not dest.exists()
    assert err.strip() == f"error: cannot reach user@jetson over ssh: {NO_ROUTE}"
    # the master is started in the background, and the run can fail before its stand-in has logged
    # its start (the board's first call is now the trtexec version check, which fails at once)
    deadline = time.monotonic() + 5
    while not masters(log) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(masters(log)) == 1
    assert not any(multiplexed(c) for c in calls(log) if "ControlMaster=yes" not in c)
    start = time.monotonic()
    SHARED.close()
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("value", ["0", "off", "No", " false "])
def test_opt_out_no_master_no_option(
    share_on: None, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DEPLOYOPT_SSH_SHARE=0 (off, no, false): no master, and the calls as without sharing."""
    log = install_stand_ins(tmp_path, monkeypatch)
    monkeypatch.setenv(SHARE_ENV, value)
    for _ in range(3):
        Board("user@jetson").run(["true"], "true", 30)
    assert not SHARED.settle("user@jetson", 1)
    assert calls(log) == [["ssh", *BASE, "user@jetson", "true"]] * 3


def test_windows_openssh_gets_no_master(
    share_on: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows' OpenSSH has no multiplexing: no master there, the calls as they were."""
    log = install_stand_ins(tmp_path, monkeypatch)
    monkeypatch.setattr(remote.sys, "platform", "win32")
    Board("user@jetson").run(["true"], "true", 30)
    Board("user@jetson").run(["true"], "true", 30)
    assert calls(log) == [["ssh", *BASE, "user@jetson", "true"]] * 2


def test_master_has_devnull_stdio_and_one_holding_it_hangs_nothing(
    share_on: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The master's ssh gets /dev/null as stdin, stdout and stderr (read in the stand-in's /proc),
    so a master left running in the background, holding them, keeps no call waiting (a pipe of ours
    would: the ControlPersist hang); the run and its close take seconds, the master's child a minute."""
    if not Path("/proc/self/fd/0").exists():
        pytest.skip("needs /proc")
    log = install_stand_ins(tmp_path, monkeypatch, master="linger")
    seen: list[dict[str, object]] = []
    real_popen = subprocess.Popen

    def popen(argv: list[str], *args: object, **kwargs: object) -> object:
        if "ControlMaster=yes" in argv:
            seen.append(kwargs)
        return real_popen(argv, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(remote.subprocess, "Popen", popen)
    try:
        start = time.monotonic()
        Board("user@jetson").run(["true"], "true", 30)
        assert SHARED.settle("user@jetson", 10)
        for _ in range(3):
            Board("user@jetson").run(["true"], "true", 30)
        SHARED.close()
        assert time.monotonic() - start < 20
    finally:
        pid = Path(f"{log}.pid")
        if pid.exists():
            os.kill(int(pid.read_text()), signal.SIGKILL)
    assert json.loads(Path(f"{log}.fds").read_text()) == ["/dev/null"] * 3
    assert [{k: kw.get(k) for k in ("stdin", "stdout", "stderr")} for kw in seen] == [
        dict.fromkeys(("stdin", "stdout", "stderr"), subprocess.DEVNULL)
    ]
    assert sum(multiplexed(c) for c in calls(log) if c[0] == "ssh" and "-O" not in c) == 4  # master, 3 calls


def test_a_master_gone_is_started_again_a_few_times(
    share_on: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A master that exited (idle past ControlPersist, a lost link: its socket gone): the next call
    connects on its own and starts another; at most MAX_MASTER_STARTS in all, then none."""
    log = install_stand_ins(tmp_path, monkeypatch)
    board = Board("user@jetson")
    for n in range(1, remote.MAX_MASTER_STARTS + 2):
        board.run(["true"], "true", 30)
        up = SHARED.settle("user@jetson", 10)
        assert up == (n <= remote.MAX_MASTER_STARTS)
        assert len(masters(log)) == min(n, remote.MAX_MASTER_STARTS)
        if up:
            Path(socket_of(masters(log)[-1])).unlink()  # as a master that exited removes it
    assert not any(multiplexed(c) for c in calls(log) if "ControlMaster=yes" not in c)
    assert len(calls(log)) == remote.MAX_MASTER_STARTS + 1 + remote.MAX_MASTER_STARTS


EXIT_SCRIPT = """
import sys
from deployopt.remote import SHARED, Board
Board("user@jetson").run(["true"], "true", 30)
assert SHARED.settle("user@jetson", 10)
Board("user@jetson").run(["true"], "true", 30)
if sys.argv[1] == "interrupt":
    raise KeyboardInterrupt
"""


@pytest.mark.parametrize("how", ["exit", "interrupt"])
def test_the_master_stopped_at_exit_and_on_ctrl_c(
    share_on: None, how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployopt process that ends, normally or by Ctrl-C (KeyboardInterrupt), stops its master
    (`ssh -O exit`) and removes its folder on the way out."""
    log = install_stand_ins(tmp_path, monkeypatch)
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, how], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == (0 if how == "exit" else -signal.SIGINT), proc.stderr
    (master,) = masters(log)
    path = socket_of(master)
    assert calls(log)[-1] == ["ssh", "-O", "exit", "-o", f"ControlPath={path}", "user@jetson"]
    assert not Path(path).parent.exists()


# ---- the real OpenSSH client (no connection is made: `ssh -G`, or a port nothing listens on)

REAL_SSH = shutil.which("ssh", path="/usr/bin:/bin:/usr/local/bin")
REAL_SCP = shutil.which("scp", path="/usr/bin:/bin:/usr/local/bin")
needs_openssh = pytest.mark.skipif(REAL_SSH is None or REAL_SCP is None, reason="needs OpenSSH's ssh and scp")


def resolved(argv: list[str]) -> dict[str, str]:
    """`ssh -G ARGV`: OpenSSH's options as it resolves them (exit 0 asserted), nothing connected."""
    assert REAL_SSH is not None
    proc = subprocess.run([REAL_SSH, "-G", *argv], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return dict(line.partition(" ")[::2] for line in proc.stdout.splitlines())


@needs_openssh
def test_real_openssh_takes_the_exact_options(
    share_on: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command lines deployopt made (logged by the stand-ins) given to this machine's OpenSSH:
    `ssh -G` accepts each and resolves them as meant (the master's, a call's, `-O exit`'s), and scp
    hands its options on to ssh as they are (`scp -S` runs `ssh -G` in ssh's place); the socket path,
    with nothing for ssh to expand, stays under the 104 bytes of a unix socket's."""
    log = install_stand_ins(tmp_path, monkeypatch)
    board = Board("user@jetson")
    board.run(["true"], "true", 30)
    assert SHARED.settle("user@jetson", 10)
    board.run(["true"], "true", 30)
    board.put(log, "/dev/null", "scp", 30)
    SHARED.close()
    (master,) = masters(log)
    _, call, scp, stop = [c for c in calls(log) if c != master]
    path = socket_of(master)

    got = resolved(master[1:])
    assert got["controlmaster"] == "true" and got["controlpersist"] == "120" and got["controlpath"] == path
    assert (got["serveraliveinterval"], got["serveralivecountmax"]) == ("15", "4")
    assert (got["batchmode"], got["connecttimeout"], got["user"], got["hostname"]) == (
        "yes",
        "10",
        "user",
        "jetson",
    )
    got = resolved(call[1:])
    assert (got["controlmaster"], got["controlpath"], got["controlpersist"]) == ("false", path, "no")
    assert resolved(stop[1:])["controlpath"] == path
    assert "%" not in path and len(path.encode()) < 104

    as_ssh = tmp_path / "ssh_G"
    as_ssh.write_text(f'#!/bin/sh\n"{REAL_SSH}" -G "$@" > "{tmp_path}/scp_G"\nexit 1\n')
    as_ssh.chmod(0o755)
    assert scp[0] == "scp" and REAL_SCP is not None
    subprocess.run([REAL_SCP, "-S", str(as_ssh), *scp[1:]], capture_output=True, timeout=30, check=False)
    got = dict(line.partition(" ")[::2] for line in (tmp_path / "scp_G").read_text().splitlines())
    assert (got["controlmaster"], got["controlpath"], got["batchmode"]) == ("false", path, "yes")


@needs_openssh
def test_real_openssh_connects_on_its_own_without_a_live_master(tmp_path: Path) -> None:
    """This machine's ssh, to a port nothing listens on: with the call's options and no socket, or a
    dead one, it connects on its own and fails as without them (exit 255, the same last line, the
    one Board.call quotes); the master itself fails with 255 and leaves no socket."""
    assert REAL_SSH is not None
    target = [*BASE, "-p", "1", "user@127.0.0.1", "true"]
    dead = tmp_path / "dead"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(dead))  # a socket file nothing listens on: a master killed with kill -9

    def ssh(*options: str) -> tuple[int, list[str]]:
        proc = subprocess.run(
            [REAL_SSH, *options, *target], capture_output=True, text=True, timeout=30, check=False
        )
        return proc.returncode, proc.stderr.splitlines()

    code, said = ssh()
    assert code == 255 and said == ["ssh: connect to host 127.0.0.1 port 1: Connection refused"]
    assert ssh(*remote.client_options(str(tmp_path / "absent"))) == (code, said)
    dead_code, dead_said = ssh(*remote.client_options(str(dead)))
    assert dead_code == 255 and dead_said[-1] == said[-1]
    path = tmp_path / "m"
    master = [REAL_SSH, *remote.master_command("user@127.0.0.1", [*BASE, "-p", "1"], str(path))[1:]]
    proc = subprocess.run(
        master, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30
    )
    assert proc.returncode == 255 and not path.exists()


@needs_openssh
def test_real_openssh_unreachable_board_reads_the_same_shared_or_not(
    share_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Board.run with this machine's ssh to a port nothing listens on (an `ssh://` destination): the
    same one-line BackendUnavailable with sharing on as off; the real master fails, and later calls
    carry none of its options."""
    assert REAL_SSH is not None
    monkeypatch.setenv("PATH", f"{Path(REAL_SSH).parent}:{os.environ['PATH']}")
    # a port only ssh can be given this way (--remote refuses URLs: scp takes HOST:PATH); the
    # check is the CLI's concern, not what this test is about
    import deployopt.remote

    monkeypatch.setattr(deployopt.remote, "check_host", lambda host: None)
    host = "ssh://user@127.0.0.1:1"
    said = []
    for share in ("0", "1"):
        monkeypatch.setenv(SHARE_ENV, share)
        with pytest.raises(BackendUnavailable) as exc:
            Board(host).run(["true"], "true", 30)
        said.append(str(exc.value))
    assert (
        said
        == [f"cannot reach {host} over ssh: ssh: connect to host 127.0.0.1 port 1: Connection refused"] * 2
    )
    assert not SHARED.settle(host, 30)
    assert Board(host).ssh_opts() == BASE
