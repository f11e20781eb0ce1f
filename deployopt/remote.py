"""ssh and scp to a board, shared by the backends that run there (`--remote USER@HOST`).

Why one module: the trtexec backend (trtexec on the board) and the tensorrt backend (jetson/runner.py
on the board) both copy files over and run one command, and an unreachable host, a missing ssh or a
command that fails must read the same way from either: one line naming the host. Only OpenSSH's
client is used (key-based login, BatchMode: a password prompt would hang a timed run).

Every ssh and scp to one host shares one connection (OpenSSH's multiplexing, SharedConnections):
a run makes hundreds of calls, each a key exchange and a login otherwise (0.3-1 s on a Nano's CPU).
Wherever that cannot work (the master fails to start, Windows, DEPLOYOPT_SSH_SHARE=0), the calls
are made exactly as without it. NEVER RUN AGAINST A REAL sshd: tested with stand-in ssh/scp and
the real OpenSSH client's `ssh -G` (which resolves the options without connecting).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath
from typing import TYPE_CHECKING, Any

from deployopt.errors import (
    BackendFailed,
    BackendUnavailable,
    BoardWarning,
    DeployoptError,
    ModelError,
    exit_phrase,
    oom_hint,
    shorten,
)

if TYPE_CHECKING:
    from deployopt.timing import Timing

#: ssh's own exit status for its failures (host unreachable, login refused): a remote command's
#: status is passed through otherwise.
SSH_FAILED = 255
#: coreutils `timeout`'s status for a command it ended at its limit.
TIMED_OUT = 124
#: The board's shell's status for a command that died of SIGKILL (128 + 9): the kernel's OOM killer,
#: or the board's `timeout` KILLing a command that outlived its TERM.
KILLED = 128 + 9
#: Follows a command run under the board's `timeout`: a shell given one command execs it, and when
#: that dies of a signal (`timeout` dies of the one that killed its command, and of its own KILL),
#: sshd sends an exit-signal that OpenSSH's client ignores: ssh exits 255, its own failure's status,
#: which read as an unreachable board. A command list keeps the shell, which passes the end on as
#: 128 + N (KILLED).
PASS_STATUS = "; exit $?"
#: The board's `timeout` sends TERM at the limit, then KILL this much later (a build stuck in a
#: driver call may not end on TERM).
KILL_AFTER_S = 10
#: The local ssh waits this much beyond the board's limit and its KILL, so the board's own `timeout`
#: ends the command first: killing the local ssh alone leaves it running there (ssh without a tty
#: sends the board no hangup), holding the board's GPU.
SSH_GRACE_S = 30
#: The limit of a quick step on a board (mkdir, a copy of runner.py or of a result, a version check):
#: --timeout, at most this. Board.timed_out says so rather than that --timeout raises it.
QUICK_STEP_S = 120.0
#: What Board.timed_out names for the commands that build engines on the board (trtexec, the
#: runner): their timeout line says a first build can take minutes.
BUILDS = ("trtexec", "runner.py")
#: How the quick steps (QUICK_STEP_S at most) are named to Board.timed_out, as prefixes: at
#: --timeout 120 exactly a quick step's limit and a build's are both 120 s, and only the name tells
#: which one raising --timeout would raise.
QUICK_STEPS = (
    "mkdir",
    "scp of runner.py",
    "scp of result-",  # the runner's result, the session's own name (own_name)
    "scp of trtexec's exports",
    "the TensorRT version check",
    "runner.py --env-only",
    "looking for other runs",
)
#: The backends that build and time on a board over ssh: trtexec there, or jetson/runner.py
#: (`--backend tensorrt`).
REMOTE_BACKENDS = ("trtexec", "tensorrt")


def check_remote_backend(backend_name: str, remote: str | None, flag: str = "--backend") -> None:
    """--remote names a board that builds and times with TensorRT: only trtexec and the runner run
    there; torch, ort or the wave model would have run here, silently ignoring the board. `flag`:
    the option that names the backend (calibrate's and staircase's is --measure)."""
    if remote and backend_name not in REMOTE_BACKENDS:
        raise DeployoptError(
            f"--remote runs on the board over ssh, trtexec ({flag} trtexec) or jetson/runner.py "
            f"({flag} tensorrt): use it with one of those, not {backend_name!r}"
        )


def check_host(host: str) -> None:
    """--remote as ssh and scp can take it: USER@HOST or HOST (an ssh config name too). An empty
    user or host, a space, or a leading '-' (which ssh reads as one of its options) was ssh's usage
    text or 'hostname contains invalid characters' after 'cannot reach ... over ssh'."""
    user, at, name = host.rpartition("@")
    # a host part starting with '-' too (user@-oProxyCommand=...): only some ssh builds refuse it
    dash = host.startswith("-") or name.startswith("-")
    if not name or (at and not user) or dash or any(c.isspace() for c in host):
        raise DeployoptError(f"--remote {host!r}: give the board as USER@HOST (or a host name ssh knows)")
    if ":" in host or "/" in host:
        # ssh reads host:2222 as a host name (port 22) and scp as HOST:PATH, ssh://host as an
        # unknown host: both failed later in ssh's words, or copied to a path named 2222:...
        raise DeployoptError(
            f"--remote {host!r}: give the board as USER@HOST, no port or URL; for another port (or an "
            "IPv6 address) add a Host entry to ~/.ssh/config (Host jetson / HostName … / Port 2222) "
            "and give --remote USER@jetson"
        )


def seconds_arg(timeout_s: float) -> str:
    """A duration `timeout` reads: plain decimal, no exponent (`:g` gives 1e+06), never 0 (which
    `timeout` takes as no limit at all)."""
    return f"{max(timeout_s, 0.001):.3f}".rstrip("0").rstrip(".")


def board_name(name: str) -> str:
    """A file or folder name for the board: letters, digits, '.', '_' and '-' only. Older scp runs
    the remote path through the board's shell (a space or quote splits or breaks it), newer scp
    does not (quoting would then be taken literally): a plain name is right for both. Nor '.' or
    '..' (a model named `...onnx` has the stem '..': its folder was the work folder's parent, whose
    result.json was deleted and overwritten), nor a leading '-' (an option to rm or scp)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"
    if set(safe) == {"."} or safe.startswith("-"):
        safe = "_" + safe
    return safe


#: What a board work folder (extra["remote_workdir"]) may hold: letters (any script), digits, '.',
#: '_', '-', '+', '@' and '/': nothing a POSIX shell reads as syntax (`/home/me/c++/w`,
#: `/data/me@lab/w`, `/home/José/w` are fine where older scp runs the path through it)
WORKDIR_CHARS = re.compile(r"[\w.+@/-]+")


def check_workdir(workdir: str | os.PathLike[str]) -> PurePosixPath:
    """`extra["remote_workdir"]` (library API: the CLI sets none) as a board path, checked when a
    session opens, before anything reaches the board: WORKDIR_CHARS only, no part starting with '-',
    no '..', not the root itself. The folders and files under it are board_name'd because older scp (OpenSSH
    < 9.0's default) runs a remote path through the board's shell, but the root was used as given:
    "/home/me/my work" made its folder (mkdir quotes) and then failed scp's copy ("ambiguous
    target"), and a '~' was a literal folder to the quoted mkdir but the home folder to that scp."""
    text = os.fspath(workdir)
    parts = text.split("/")
    if (
        not WORKDIR_CHARS.fullmatch(text)
        or any(part.startswith("-") or part == ".." for part in parts)
        or not any(part not in ("", ".") for part in parts)  # "/", ".": a folder deployopt's own? no
    ):
        raise DeployoptError(
            f"remote_workdir {text!r}: give the board's work folder in letters, digits, '.', '_', '-', "
            "'+', '@' and '/' only, no part starting with '-', no '..', not '/' itself (older scp runs it "
            "through the board's shell, and a run's folders are removed under it); a relative path is in "
            "the login's home folder"
        )
    return PurePosixPath(text)


#: Hex digits of the model's sha256 in its board folder's name (model_dir_name): 48 bits, so two
#: files of one name on one board never meet by chance.
MODEL_KEY_HEX = 12


def model_dir_name(stem: str, sha256: str, external: Sequence[Sequence[str]] = ()) -> str:
    """The board folder of one model file: its stem and the first MODEL_KEY_HEX hex digits of the
    sha256 of what goes there (`sha256`: the file sent's; with `external`, the [[location, sha256],
    …] of its external data files as the engine key reads them: sent_external), board_name'd.
    Keyed on the stem alone, every model named model.onnx shared one folder: two runs of different
    ones on a board replaced each other's model, and each recorded the other's timing as its own.
    The same file keeps its folder, and so its engines, which the runner reuses. Results are each
    session's own in it (own_name): two runs of one file with other settings share the folder."""
    key = sha256
    if external:  # one .onnx header can go with other weights (same names, other contents)
        data = [[str(part) for part in row] for row in external]
        key = hashlib.sha256(repr((sha256, data)).encode("utf-8")).hexdigest()
    return board_name(f"{stem}-{key[:MODEL_KEY_HEX]}")


def sent_external(model: str | os.PathLike[str], weights: Sequence[Weights]) -> list[list[str]]:
    """The external data of `model` (the file sent, whose `weights` model_weights listed) as the
    engine key reads it (deployopt.backends.tensorrt.external_data_digests): model_dir_name's key
    and the engine key cannot drift apart. [] for a model that keeps its weights inside (not read)."""
    if not weights:
        return []
    from deployopt.backends.tensorrt import external_data_digests

    return external_data_digests(model, Path(model).read_bytes())


def local_arg(path: str | os.PathLike[str]) -> str:
    """A path here as scp must be given it: absolute. scp reads `net:v2.onnx` (a colon before any
    '/') as HOST:PATH, a copy from a machine named net, and a leading '-' as an option."""
    return str(Path(path).absolute())


def tail(text: str, n: int = 3) -> str:
    """The last `n` error lines of a log (else its last lines), joined as one line of at most 400
    characters: what a one-line error quotes of a tool's output."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "[E]" in ln or "Error" in ln or "error" in ln]
    pick = (errors or lines)[-n:]
    return shorten(" | ".join(pick), 400)


#: strerror(ENOSPC), as scp, the board's shell, trtexec and jetson/runner.py print it.
DISK_FULL = "No space left on device"


def disk_full_hint(host: str, said: str) -> str | None:
    """What to do when a command on the board failed on a full disk (`said`, its output, holds
    DISK_FULL), or None: scp's own line says only that a write failed, not that the disk to look at
    is the board's nor what deployopt keeps there (RUNNER_WORKDIR, TRTEXEC_WORKDIR: bench's models
    and engines, timing caches named with --timing-cache, the optimize-* folders of killed runs).
    The commands are quoted for the user's shell, so its `~` is the board's."""
    if DISK_FULL not in said:
        return None
    return (
        f"the board's disk is full (`ssh {host} 'df -h ~ /tmp'` shows it): deployopt keeps models, "
        f"engines and timing caches there in ~/{RUNNER_WORKDIR}/ (runner.py) and {TRTEXEC_WORKDIR}/ "
        "(trtexec), and a killed run's optimize-* folders in them; remove the old engines and "
        f"folders you no longer need (`ssh {host} 'rm -rf ~/{RUNNER_WORKDIR} {TRTEXEC_WORKDIR}'` "
        "removes all of it, timing caches too)"
    )


class RemoteFailed(BackendFailed):
    """A command on the board exited non-zero (ssh itself worked): the caller may read its status
    and output to say what went wrong in the board's own words."""

    def __init__(self, message: str, returncode: int, out: str, err: str) -> None:
        super().__init__(message)
        self.returncode, self.out, self.err = returncode, out, err


#: `DEPLOYOPT_SSH_SHARE=0` (or off, no, false): no shared connection, every ssh and scp connects on
#: its own, as they did before it (for an sshd that refuses multiplexing, or to let a ControlPath of
#: the user's own ~/.ssh/config apply: deployopt's options come first and override it).
SHARE_ENV = "DEPLOYOPT_SSH_SHARE"
#: The master's idle time (OpenSSH's ControlPersist): with no ssh or scp through it for this long it
#: exits on its own. What a deployopt killed before its exit handler ran (kill -9) leaves running.
CONTROL_PERSIST_S = 120
#: The master's keepalives: over a link that died (a board powered off), it exits after about a
#: minute, and later calls connect on their own again and fail as they always did (one line);
#: without them every later call would wait out its whole limit on the dead master.
SERVER_ALIVE_INTERVAL_S = 15
SERVER_ALIVE_COUNT_MAX = 4
#: A master not up (its `ssh -f` not returned) this long past its ConnectTimeout is ended and the host
#: gets none: a login that hangs costs the calls nothing, they connect on their own meanwhile.
MASTER_START_GRACE_S = 60.0
#: Masters one host may get in a process: one that exited (idle past ControlPersist, a lost link) is
#: started again, at most this many times in all.
MAX_MASTER_STARTS = 3
#: The wait for `ssh -O exit` at the end.
STOP_TIMEOUT_S = 5.0
#: A unix socket's path is at most 104 bytes on macOS (108 on Linux), the terminating NUL included.
SOCKET_PATH_MAX = 103


def share_enabled() -> bool:
    """False under SHARE_ENV=0/off/no/false, and on Windows, whose OpenSSH has no multiplexing."""
    if sys.platform == "win32":
        return False
    return os.environ.get(SHARE_ENV, "").strip().lower() not in {"0", "off", "no", "false"}


def client_options(path: str) -> list[str]:
    """What every ssh and scp gets while the master is up: use its socket, never become a master.
    With ControlMaster=no, OpenSSH connects on its own when the socket is gone or dead."""
    return ["-o", "ControlMaster=no", "-o", f"ControlPath={path}"]


def master_command(host: str, base: list[str], path: str) -> list[str]:
    """The master: logs in (`base`: BatchMode, ConnectTimeout), listens on `path`, goes to the
    background (-f) with no command (-N), exits after CONTROL_PERSIST_S idle."""
    return [
        "ssh", *base,
        "-o", "ControlMaster=yes", "-o", f"ControlPersist={CONTROL_PERSIST_S}", "-o", f"ControlPath={path}",
        "-o", f"ServerAliveInterval={SERVER_ALIVE_INTERVAL_S}",
        "-o", f"ServerAliveCountMax={SERVER_ALIVE_COUNT_MAX}",
        "-f", "-N", host,
    ]  # fmt: skip


def stop_command(host: str, path: str) -> list[str]:
    """Asks the master listening on `path` to exit."""
    return ["ssh", "-O", "exit", "-o", f"ControlPath={path}", host]


@dataclass
class _Master:
    """One host's master connection, as SharedConnections knows it."""

    host: str
    path: str  # its socket (ControlPath)
    base: list[str]  # the options it was started with, for a restart
    proc: subprocess.Popen[bytes] | None = None  # the `ssh -f` while it has not returned
    deadline: float = 0.0  # when a `proc` still running is given up
    up: bool = False  # `ssh -f` returned 0 and the socket is there: calls use it
    failed: bool = False  # no (more) sharing for this host: calls as without it
    starts: int = 0


class SharedConnections:
    """One OpenSSH master connection per host per process, for every Board of that host (Boards are
    made per call in places, so this lives outside them, keyed by USER@HOST; BatchMode and
    ConnectTimeout, the only other options, do not change which connection it is).

    Started at the host's first call, in the background: that call, and any before the master is
    up, connect on their own with no option added, so a host the master cannot reach fails as it
    did without it, in the same words and no later. A master that fails to start leaves the host as
    it was. Its ssh has /dev/null for stdin, stdout and stderr: one holding our pipes would keep
    subprocess.run waiting until it exits. Its socket is in a 0700 folder of ours in /tmp (short: a
    unix socket path has ~104 bytes); close() (at exit, Ctrl-C too) stops every master and removes
    the folder."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._folder: str | None = None
        self._masters: dict[str, _Master] = {}
        self._made = 0  # sockets named so far: the next one's name
        self._at_exit = False

    def options(self, host: str, base: list[str]) -> list[str]:
        """The options a call to `host` adds: client_options while its master is up, else none (the
        master started here at the host's first call)."""
        if not share_enabled():
            return []
        with self._lock:
            master = self._masters.get(host)
            if master is None:
                master = self._masters[host] = _Master(host, self._socket_path(), list(base))
                self._start(master)
            else:
                self._update(master)
            return client_options(master.path) if master.up else []

    def settle(self, host: str, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for `host`'s master to come up or fail; whether it is up. Calls
        never wait for it (tests do, to know which calls use it)."""
        with self._lock:
            master = self._masters.get(host)
            proc = master.proc if master is not None else None
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout_s)
        with self._lock:
            if master is None or self._masters.get(host) is not master:
                return False
            self._update(master)
            return master.up

    def _socket_path(self) -> str:
        """A new socket path in our folder (made on first use), or "" where none can be had."""
        if self._folder is None:
            try:
                self._folder = tempfile.mkdtemp(prefix="dpo-", dir="/tmp")  # 0700; short, unlike $TMPDIR
            except OSError:
                return ""
        path = f"{self._folder}/{self._made}"
        self._made += 1
        return path if len(path.encode()) <= SOCKET_PATH_MAX else ""

    def _start(self, master: _Master) -> None:
        """Start `master`'s ssh in the background (not waited for); a failure to start leaves it failed."""
        master.up = False
        if not master.path or master.starts >= MAX_MASTER_STARTS:
            master.failed = True
            return
        if not self._at_exit:
            atexit.register(self.close)
            self._at_exit = True
        master.starts += 1
        try:
            master.proc = subprocess.Popen(
                master_command(master.host, master.base, master.path),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError:  # no ssh at all: the call itself says so, as it did
            master.failed = True
            return
        master.deadline = time.monotonic() + connect_timeout(master.base) + MASTER_START_GRACE_S

    def _update(self, master: _Master) -> None:
        """What became of `master` since it was last looked at: its `ssh -f` returned (0 and the socket
        there: up; else failed), took too long (ended: failed), or, once up, its socket went (it
        exited: started again, within MAX_MASTER_STARTS)."""
        if master.failed:
            return
        if master.proc is not None:
            code = master.proc.poll()
            if code is None:
                if time.monotonic() > master.deadline:
                    _end(master.proc)
                    master.proc, master.failed = None, True
                return
            master.proc = None
            master.up = code == 0 and os.path.exists(master.path)
            master.failed = not master.up
        elif master.up and not os.path.exists(master.path):
            self._start(master)

    def close(self) -> None:
        """Stop every master (`ssh -O exit`, a still-starting one killed) and remove the folder.
        Best effort: a master that does not answer exits by itself after CONTROL_PERSIST_S."""
        with self._lock:
            masters, folder = list(self._masters.values()), self._folder
            self._masters, self._folder = {}, None
        for master in masters:
            if master.proc is not None:
                _end(master.proc)
            if master.path and os.path.exists(master.path):  # up, or came up as it was ended
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    subprocess.run(
                        stop_command(master.host, master.path),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        timeout=STOP_TIMEOUT_S,
                        check=False,
                    )
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def connect_timeout(base: list[str]) -> float:
    """The ConnectTimeout among ssh options `base` (10 s when none)."""
    for opt in base:
        if opt.startswith("ConnectTimeout="):
            return float(opt.partition("=")[2])
    return 10.0


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Kill `proc` (a master's `ssh -f` that has not returned) and reap it."""
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(STOP_TIMEOUT_S)


#: This process's masters, one per host (SharedConnections).
SHARED = SharedConnections()


#: An external-data file a model reads: (the file here, its name beside the model).
Weights = tuple[Path, str]


class Board:
    """One board reached as `host` (USER@HOST) with ssh and scp."""

    def __init__(self, host: str, connect_timeout_s: int = 10, user_timeout_s: float | None = None) -> None:
        check_host(host)
        self.host = host
        self.connect_timeout_s = connect_timeout_s
        # the command's --timeout (None: a command that has none, `targets --remote`): what timed_out
        # says raises a limit, where it is the one that ran out
        self.user_timeout_s = user_timeout_s
        self.last_err = ""  # the stderr of the last command that succeeded (its warnings)

    def ssh_opts(self) -> list[str]:
        """No password prompt (it would wait forever), a bounded wait for the connection, and the
        host's shared connection where it is up (SHARED; the first call starts it)."""
        base = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout_s}"]
        return [*base, *SHARED.options(self.host, base)]

    def ssh_prefix(self) -> list[str]:
        """`ssh OPTIONS HOST`: a command appended to it runs on the board."""
        return ["ssh", *self.ssh_opts(), self.host]

    def call(
        self,
        cmd: list[str],
        what: str,
        timeout_s: float,
        limit_s: float | None = None,
        writes_board: bool = True,
    ) -> str:
        """Run `cmd` (ssh or scp) here; its stdout. One-line errors: BackendUnavailable for a missing
        OpenSSH or an unreachable host, BackendFailed for a timeout (naming `limit_s`, the user's
        limit, where the local wait is longer) and for a full disk on the board (disk_full_hint;
        not for a copy back, `writes_board` False, whose full disk is this machine's), RemoteFailed
        for another non-zero exit. Never with deployopt's stdin: OpenSSH's client (without -n) reads
        its stdin and sends it to the board whether the command reads it or not, so in a
        `while read m; do deployopt bench "$m" --remote …; done < list` the first ssh swallowed the
        rest of the list (one model benched, exit 0), and a run in the background (`… > log &`) was
        stopped at its first ssh by the terminal (SIGTTIN), then failed as a connection timeout."""
        try:
            proc = subprocess.run(
                cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, check=False
            )
        except FileNotFoundError:
            raise BackendUnavailable(f"{cmd[0]} not found: remote mode needs OpenSSH (ssh, scp)") from None
        except subprocess.TimeoutExpired:
            raise BackendFailed(self.timed_out(what, limit_s or timeout_s)) from None
        err = proc.stderr.decode("utf-8", "replace")
        if proc.returncode == SSH_FAILED:
            raise BackendUnavailable(f"cannot reach {self.host} over ssh: {tail(err, 1) or 'no message'}")
        out = proc.stdout.decode("utf-8", "replace")
        if proc.returncode != 0:
            rc = proc.returncode
            said = oom_hint(rc, on_board=True) or tail(out + err) or "no output"  # not a bare colon
            full = disk_full_hint(self.host, out + err) if writes_board else None
            if full is not None:  # not RemoteFailed: a caller's own phrasing of it would drop the hint
                raise BackendFailed(f"{what} on {self.host} {exit_phrase(rc)}: {said}; {full}")
            raise RemoteFailed(f"{what} on {self.host} {exit_phrase(rc)}: {said}", rc, out, err)
        self.last_err = err
        return out

    def run(self, argv: list[str], what: str, timeout_s: float, limit_s: float | None = None) -> str:
        """Run `argv` on the board (quoted for its shell, as ssh hands it one string); its stdout."""
        return self.call([*self.ssh_prefix(), shlex.join(argv)], what, timeout_s, limit_s)

    def run_limited(
        self, argv: list[str], what: str, timeout_s: float, ends_with: str | PurePath | None = None
    ) -> str:
        """Run `argv` on the board under the board's own `timeout` (coreutils, on every L4T), so a
        hung build or run ends there at `timeout_s` and frees the GPU, not only the local ssh; the
        local ssh waits a little longer. The board's 124 reads as a local timeout does, and so does
        its 137 (KILLED) once the limit and KILL_AFTER_S have passed here: `timeout` KILLed what
        outlived its TERM. Sooner, 137 cannot be `timeout`'s (it started after this clock did): a
        SIGKILL from elsewhere, most often the OOM killer (Board.call's line). `ends_with`: a folder
        whose work a Ctrl-C here ends on the board too (end_work_in), as bench's and calibrate's
        do; optimize's run folder is ended when its session closes instead. In a model's folder,
        which every run of that file shares, only what this command runs is ended (own_files_in)."""
        limited = ["timeout", f"--kill-after={KILL_AFTER_S}", seconds_arg(timeout_s), *argv]
        command = shlex.join(limited) + PASS_STATUS
        start = time.monotonic()
        try:
            return self.call(
                [*self.ssh_prefix(), command], what, timeout_s + KILL_AFTER_S + SSH_GRACE_S, timeout_s
            )
        except KeyboardInterrupt:
            if ends_with is not None:
                end_work_in(self, ends_with, own=own_files_in(argv, ends_with))
            raise
        except RemoteFailed as exc:
            if exc.returncode == TIMED_OUT:
                raise BackendFailed(self.timed_out(what, timeout_s)) from None
            if exc.returncode == KILLED and time.monotonic() - start >= timeout_s + KILL_AFTER_S:
                more = f", nor stop within {KILL_AFTER_S} s of its TERM: the board's `timeout` KILLed it"
                raise BackendFailed(self.timed_out(what, timeout_s, more)) from None
            raise

    def timed_out(self, what: str, timeout_s: float, more: str = "") -> str:
        """`what` on the board did not finish within `timeout_s` (and `more`), and what to do: the
        bare line gave no hint, and a first engine build takes minutes on a small board. Only where
        the limit is the user's --timeout (`user_timeout_s`; a batch's, a multiple of it) does the
        line say --timeout raises it: a quick step (QUICK_STEPS: mkdir, a copy of runner.py or of a
        result, a version check) is capped at QUICK_STEP_S whatever --timeout says, at --timeout
        QUICK_STEP_S too, and `targets --remote` has no --timeout at all; those point at the
        connection and the board's load instead."""
        said = f"{what} on {self.host} did not finish within {timeout_s:g} s{more}"
        slow = (
            f"so long a wait for a quick step points at the connection or a busy board (`ssh {self.host} "
            "uptime` shows its load)"
        )
        if self.user_timeout_s is None:
            return f"{said}; {slow}"
        # a quick step's limit is min(--timeout, QUICK_STEP_S): at QUICK_STEP_S it is the cap, which
        # a larger --timeout leaves as it is (--timeout 120 named --timeout for a mkdir's 120 s)
        capped = what.startswith(QUICK_STEPS) and timeout_s >= QUICK_STEP_S
        if timeout_s < self.user_timeout_s or capped:
            return f"{said} (a quick step's limit, whatever --timeout says); {slow}"
        builds = " (a first engine build on a Jetson Nano can take minutes)" if what in BUILDS else ""
        return f"{said}; --timeout SECONDS raises the limit{builds}"

    def mkdir(self, path: str | Path, timeout_s: float, stale: Sequence[str] = ()) -> None:
        """mkdir -p `path`, and in the same ssh remove the `stale` files (globs) a run before this
        one left there (clear_stale)."""
        command = f"mkdir -p {shlex.quote(str(path))}{clear_stale(path, stale)}"
        self.call([*self.ssh_prefix(), command], "mkdir", timeout_s)

    def put(self, local: str | Path, remote: str | Path, what: str, timeout_s: float) -> None:
        """Copy a file here to `remote` on the board."""
        self.call(["scp", *self.ssh_opts(), local_arg(local), f"{self.host}:{remote}"], what, timeout_s)

    def put_model(
        self, model: str | Path, remote: str | PurePosixPath, timeout_s: float, weights: list[Weights]
    ) -> None:
        """Copy an ONNX model to `remote` on the board with the external-data files it reads
        (`model_weights`, checked before anything went to the board), same names, beside it: where
        TensorRT's parser looks for them."""
        self.put(model, remote, "scp of the model", timeout_s)
        for local, name in weights:
            self.put(local, PurePosixPath(remote).parent / name, "scp of the model's weights", timeout_s)

    def get(self, remote: str | Path, local: str | Path, what: str, timeout_s: float) -> None:
        """Copy `remote` on the board to a file here."""
        cmd = ["scp", *self.ssh_opts(), f"{self.host}:{remote}", local_arg(local)]
        self.call(cmd, what, timeout_s, writes_board=False)

    def fresh_dir(self, path: str | PurePosixPath, timeout_s: float) -> None:
        """`path` on the board made anew and empty (whatever it held removed), in one round trip."""
        quoted = shlex.quote(str(path))
        self.call([*self.ssh_prefix(), f"rm -rf {quoted} && mkdir -p {quoted}"], "mkdir", timeout_s)

    def put_many(
        self, local: list[Path], remote_dir: str | PurePosixPath, what: str, timeout_s: float
    ) -> None:
        """Copy files here into the folder `remote_dir` on the board, in one scp (old scp and the
        SFTP one both send every source over one connection)."""
        sources = [local_arg(path) for path in local]
        self.call(["scp", *self.ssh_opts(), *sources, f"{self.host}:{remote_dir}"], what, timeout_s)

    def get_matching(
        self, remote_dir: str | PurePosixPath, pattern: str, local_dir: Path, what: str, timeout_s: float
    ) -> None:
        """Copy every `remote_dir`/`pattern` on the board into the folder `local_dir` here, in one scp
        and one connection (several remote sources would cost old scp an ssh each). Both expand the
        wildcard on the board: old scp through the board's shell, SFTP scp itself (OpenSSH's
        sink_sftp globs remote paths because "SFTP can not depend on remote shell expansions"), so
        `remote_dir` must be a plain name (board_name) and `pattern` a plain `*.ext`."""
        remote = f"{self.host}:{PurePosixPath(remote_dir) / pattern}"
        cmd = ["scp", *self.ssh_opts(), remote, local_arg(local_dir)]
        self.call(cmd, what, timeout_s, writes_board=False)

    def get_folder(
        self, remote_dir: str | PurePosixPath, local_dir: Path, what: str, timeout_s: float
    ) -> None:
        """Copy the folder `remote_dir` on the board, subfolders and all, into the folder `local_dir`
        here (as `local_dir`/its name), in one scp (-r) and one connection: what files of the same
        name in several folders need, which get_matching would copy onto each other. `remote_dir` a
        plain name (board_name), as get_matching's."""
        remote = f"{self.host}:{PurePosixPath(remote_dir)}"
        self.call(
            ["scp", *self.ssh_opts(), "-r", remote, local_arg(local_dir)], what, timeout_s, writes_board=False
        )


#: What a session's run folder must look like before close() removes it on the board: a name
#: optimize made (`remote_run`), never a path a user could have given.
RUN_DIR_PREFIX = "optimize-"
#: Removing the run folder is tidying, not part of the result: a board gone by then costs this much.
CLEANUP_TIMEOUT_S = 30.0


def remote_run_dir(workdir: str | PurePosixPath, options: Any) -> PurePosixPath | None:
    """`workdir`/RUN when the caller (optimize) gave a run of its own in `extra["remote_run"]`: every
    model and engine of that run goes there, and the session removes it when it closes."""
    run = options.extra.get("remote_run")
    if not run:
        return None
    name = board_name(str(run))
    if not name.startswith(RUN_DIR_PREFIX):
        raise ValueError(f"remote_run {run!r} must start with {RUN_DIR_PREFIX!r}")
    return PurePosixPath(workdir) / name


def sweep_convs_dir(sweep_dir: PurePosixPath, run_dir: PurePosixPath | None) -> PurePosixPath:
    """The board folder a session's conv sweeps go in (`sweep_dir`/convs…). Inside optimize's run
    folder (`run_dir`) it is that run's alone; otherwise (calibrate, staircase) one of this session
    alone, `convs-<random>`, which the session removes when it closes: with one `convs` folder for
    all, a second calibrate emptied the first's mid-batch, could fetch its results (the same names),
    and its Ctrl-C ended the other's runner."""
    return sweep_dir / ("convs" if run_dir is not None else f"convs-{sweep_token()}")


#: Hex digits of a session's token (sweep_token): own_files_in knows a session's own file by them.
TOKEN_HEX = 8


def sweep_token() -> str:
    """A session's own random suffix on the board (the tests pin it): its conv folder's
    (`convs-<token>`) and its result files' in a model's folder (own_name)."""
    import secrets

    return secrets.token_hex(TOKEN_HEX // 2)


def session_token() -> str:
    """A new session's token (sweep_token's, looked up at each call: what the tests pin holds for
    the modules that import this one by name)."""
    return sweep_token()


def own_name(name: str, token: str) -> str:
    """`name` (result.json, times.json, …) as one session's own in a shared board folder:
    result-<token>.json. A model's folder is shared by every run of that file (model_dir_name), with
    any settings: with one result.json there, a bench of it at --dtype fp16 started while one at
    fp32 waited for its copy back replaced it, and the fp32 run recorded the fp16 timing and engine
    as its own (exit 0). `token`: the session's session_token."""
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}-{token}.{suffix}" if dot else f"{name}-{token}"


def make_sweep_dir(board: Board, folder: PurePosixPath, timeout_s: float, look: bool) -> None:
    """`folder` made anew and empty for a conv batch; the first batch of a session that has not yet
    looked (`look`: calibrate, staircase) looks for another run at work on the board in the same
    ssh and warns of it, as bench does (a calibration fitted to timings taken beside another run's
    GPU work said nothing of it)."""
    if look:
        mkdir_warning_of_other_runs(board, folder, timeout_s)  # a new folder: empty already
    else:
        board.fresh_dir(folder, timeout_s)


def remove_sweep_dir(board: Board, folder: PurePosixPath | None, run_dir: PurePosixPath | None) -> None:
    """The session's own conv folder (sweep_convs_dir) removed, best effort; optimize's run folder
    goes whole, with its sweeps, when its session closes."""
    if folder is None or run_dir is not None:
        return
    with contextlib.suppress(BackendFailed, BackendUnavailable):
        board.run(["rm", "-rf", str(folder)], "removing the sweep's folder", CLEANUP_TIMEOUT_S)


#: `extra` key optimize sets on its per-layer sweep's session: the run's folder is the end-to-end
#: session's too, and that one removes it (see owned_run_dir).
SHARED_RUN = "remote_run_shared"


def owned_run_dir(run_dir: PurePosixPath | None, options: Any) -> PurePosixPath | None:
    """`run_dir` when this session removes it at close, None when another session owns it
    (`extra[SHARED_RUN]`): optimize's two sessions (end to end, and the sweep's with fewer runs) work
    in one folder, and removing it from both cost a pkill and an rm each twice at the end of every
    run; nor may the sweep's session, closing, remove the folder the other still uses. The owner's
    close runs on Ctrl-C too, and its pkill ends the sweep's work there as well."""
    return None if options.extra.get(SHARED_RUN) else run_dir


def board_timing_cache(
    options: Any, root: str | PurePosixPath, run_dir: str | PurePosixPath | None
) -> PurePosixPath | None:
    """Where a TensorRT timing cache (`extra["timing_cache"]`, a host path) lives on the board: it
    holds the tactic timings of the GPU that ran them, so the board keeps it, under its host file's
    name (the host path does not exist there). A cache of optimize's own run
    (`extra["timing_cache_per_run"]`) goes in the run's folder, removed with it; one the user named,
    in the folder every run shares, so the next run reuses it. None without a cache."""
    cache = options.extra.get("timing_cache")
    if not cache:
        return None
    per_run = options.extra.get("timing_cache_per_run") and run_dir is not None
    return PurePosixPath(run_dir if per_run else root) / board_name(Path(str(cache)).name)


#: Where the two board backends work by default: jetson/runner.py (relative to the login's home)
#: and trtexec (/tmp, as trtexec users do). Another run's folder is looked for in both.
RUNNER_WORKDIR = "deployopt-runner"
TRTEXEC_WORKDIR = "/tmp/deployopt-trtexec"

#: What POSIX extended regular expressions (pkill -f) treat as special.
ERE_SPECIAL = re.compile(r"([.^$*+?()|{}\[\]\\])")


def own_text_pattern(text: str) -> str:
    """An ERE for pkill -f that matches a command line holding `text`, but not the command line of
    pkill (or of the shell running it) that carries the pattern: the first character goes in
    brackets, "[d]eployopt-runner/...", which that text itself does not match."""
    return f"[{text[0]}]" + ERE_SPECIAL.sub(r"\\\1", text[1:])


def own_path_pattern(folder: str) -> str:
    """own_text_pattern of a command line naming a file in `folder`."""
    return own_text_pattern(folder) + "/"


def own_files_in(argv: Sequence[str], folder: str | PurePath) -> list[str]:
    """The files of `folder` that `argv` (a command for the board) names by a session's own name
    (own_name: NAME-<token>.json; the runner's --out, trtexec's --exportTimes=): every process that
    command starts on the board carries them in its command line (the board's `timeout`, its shell,
    the runner or trtexec) and another session's never does, though a model's folder is shared by
    every run of that file (model_dir_name), at any settings. [] for a command that names none (a
    batch in a conv folder of the session's own)."""
    path = re.escape(str(folder).rstrip("/"))
    own = re.compile(rf"(?:^|=)({path}/[^/\s]+-[0-9a-f]{{{TOKEN_HEX}}}\.json)$")
    return [m.group(1) for arg in argv if (m := own.search(arg))]


def remove_run_dir(board: Board, run_dir: str | PurePosixPath | None) -> None:
    """End what still runs from the run's folder (a build left by Ctrl-C: ssh without a tty sends
    the board no hangup, so it would hold the GPU until its `timeout`), then remove the folder.
    Best effort: an unreachable board at the end leaves the folder (named in the docs), never an
    error over a finished result."""
    if run_dir is None or not PurePosixPath(run_dir).name.startswith(RUN_DIR_PREFIX):
        return
    folder = str(run_dir)
    end_work_in(board, folder, "the run's folder")
    with contextlib.suppress(BackendFailed, BackendUnavailable):
        board.run(["rm", "-rf", folder], "removing the run's folder", CLEANUP_TIMEOUT_S)


def interrupt_ends(folder: PurePath, run_dir: str | PurePath | None) -> PurePath | None:
    """Board.run_limited's `ends_with` for work in `folder`: the folder itself for bench, profile,
    calibrate and staircase; None inside optimize's run folder (`run_dir`), which its closing
    session ends and removes."""
    return folder if run_dir is None else None


def end_work_in(
    board: Board, folder: str | PurePath, what: str = "the model's folder", own: Sequence[str] = ()
) -> None:
    """End every process on the board whose command line names a file in `folder`, or with `own`
    (own_files_in: this session's files there) only those that name its first: after a Ctrl-C here
    (ssh without a tty sends the board no hangup) the runner or trtexec would hold the GPU until its
    `timeout`, and be timed beside the next run. A model's folder is shared by every run of that
    file: ending all that named it also ended another session's run of it at other settings.
    Best effort, as cleanup is."""
    # "[d]eployopt-..." matches the path in a command line, not pkill's own (or its shell's)
    pattern = own_text_pattern(own[0]) if own else own_path_pattern(str(folder))
    with contextlib.suppress(BackendFailed, BackendUnavailable):  # pkill exits 1 when nothing matched
        board.run(["pkill", "-f", "--", pattern], f"ending what runs in {what}", CLEANUP_TIMEOUT_S)


#: The first line the board prints in a look for other runs: the pids of the shell running that ssh
#: command and of its parent, whose command lines carry the folders' names themselves.
SELF_MARK = "deployopt-self"


def other_runs_look(workdirs: list[str | PurePosixPath]) -> str:
    """Shell text that prints SELF_MARK with its shell's pid and parent pid, then `pgrep -af` of every
    process whose command line names a file in a folder of `workdirs` (an optimize run's, bench's or
    profile's model folder, calibrate's), and exits 0, pgrep found something, nothing or is missing:
    a board's answer never fails on it. One pattern for every folder of a work folder: bench's and
    profile's folders (named after their models) stay on the board, so listing folders first to
    look for only theirs would cost a second round trip on nearly every board."""
    pattern = "|".join(own_path_pattern(str(w).rstrip("/")) for w in dict.fromkeys(map(str, workdirs)))
    return f"echo {SELF_MARK} $$ $PPID; pgrep -af -- {shlex.quote(pattern)} 2>/dev/null; exit 0"


def runs_at_work_among(
    answer: str, own_run: str | PurePosixPath | None, workdirs: list[str | PurePosixPath]
) -> dict[str, list[str]]:
    """{folder: the pids running from it} of the processes `other_runs_look` printed (`answer`), by
    the folder of `workdirs` each one's command line names first: not the look's own shell (nor the
    shell that ran it), nor what runs in `own_run`, the caller's optimize run folder."""
    lines = answer.splitlines()
    mark = next((ln.split() for ln in lines if ln.startswith(SELF_MARK + " ")), [])
    own_pids = set(mark[1:])
    own = PurePosixPath(str(own_run).rstrip("/")) if own_run is not None else None
    folders = [
        re.compile(r"(?:^|(?<=[\s=:'\"/]))(" + re.escape(str(w).rstrip("/")) + r"/[^/\s'\"]+)/")
        for w in dict.fromkeys(map(str, workdirs))
    ]
    busy: dict[str, list[str]] = {}
    for line in lines:
        pid, _, command = line.strip().partition(" ")
        if not pid.isdigit() or pid in own_pids:
            continue
        found = [m for f in folders for m in f.finditer(command)]
        if not found:
            continue
        folder = min(found, key=lambda m: m.start()).group(1)
        if own is not None and PurePosixPath(folder) == own:
            continue
        busy.setdefault(folder, []).append(pid)
    return busy


def other_runs_at_work(
    board: Board, own_run: str | PurePosixPath | None, workdirs: list[str | PurePosixPath], timeout_s: float
) -> dict[str, list[str]]:
    """{another run's folder on the board: the pids running from it}, its folders looked for in
    `workdirs`: a run whose host was killed (kill -9) or lost its connection goes on building and
    timing there until its own `timeout`, since ssh without a tty sends the board no hangup; a
    second optimize, bench or profile on the same board does too. Timed beside them, this run's
    latencies would include their GPU work. One ssh round trip; the sessions look in the ssh that
    makes their folder instead (mkdir_warning_of_other_runs). Best effort: {} when the board cannot
    say (no pgrep, a failed call)."""
    try:
        out = board.call(
            [*board.ssh_prefix(), other_runs_look(workdirs)], "looking for other runs", timeout_s
        )
    except (BackendFailed, BackendUnavailable):
        return {}
    return runs_at_work_among(out, own_run, workdirs)


def other_runs_phrase(host: str, busy: dict[str, list[str]]) -> str:
    """The warning for `other_runs_at_work`'s answer, with the command that ends them."""
    runs = "; ".join(f"{folder}: pid {', '.join(pids)}" for folder, pids in busy.items())
    every = " ".join(pid for pids in busy.values() for pid in pids)
    return (
        f"another deployopt run is still at work on {host} ({runs}): its GPU work would be timed "
        f"with this run's. It ends at its own --timeout; to end it now: ssh {host} kill {every}"
    )


def warn_of_busy(board: Board, busy: dict[str, list[str]]) -> None:
    """other_runs_phrase as one BoardWarning line, when another run is at work (`busy`)."""
    if busy:
        warnings.warn(other_runs_phrase(board.host, busy), BoardWarning, stacklevel=4)


def usual_workdirs(own: str | PurePosixPath) -> list[str | PurePosixPath]:
    """Where another run's folder is looked for: beside this run's own folder `own`, and in both
    backends' usual work folders (a run of the other backend, or one given another work folder)."""
    return [PurePosixPath(str(own)).parent, RUNNER_WORKDIR, TRTEXEC_WORKDIR]


def clear_stale(folder: str | PurePath, stale: Sequence[str]) -> str:
    """` && rm -f -- 'folder'/result-<token>.json …`: the results this session left in the board
    folder at an earlier measure of the same file (optimize's confirmation rounds rebuild a plan),
    removed before it writes
    them again. The copy back takes whatever is there: a runner that exited 0 without writing its
    result, or trtexec writing no --exportTimes file, handed back the last run's numbers as this
    run's (exit 0). Only the session's own names (own_name): another session's, in the same folder,
    may be waiting for its copy back. "" when there is nothing to clear."""
    if not stale:
        return ""
    quoted = shlex.quote(str(folder))
    return " && rm -f -- " + " ".join(f"{quoted}/{pattern}" for pattern in stale)


def mkdir_warning_of_other_runs(
    board: Board,
    folder: str | PurePosixPath,
    timeout_s: float,
    stale: Sequence[str] = (),
    ours: bool = False,
) -> None:
    """Board.mkdir of `folder` (optimize's run folder, before its first measurement; bench's or
    profile's work folder for its model), and in the same ssh the look for another run at work on
    the board (other_runs_at_work's, beside `folder` and in both backends' usual folders): a
    BoardWarning naming it, before this run times beside it. No round trip more than the mkdir.
    What runs in `folder` itself is another run's too (a bench of the same model file,
    model_dir_name, at these settings or others: its results have names of their own, own_name, but
    its GPU work would be timed with this run's), unless `ours`: optimize's run folder, where the
    run's other session works. A failed mkdir reads as Board.mkdir's."""
    quoted = shlex.quote(str(folder))
    workdirs = usual_workdirs(folder)
    command = f"mkdir -p {quoted}{clear_stale(folder, stale)} || exit; {other_runs_look(workdirs)}"
    answer = board.call([*board.ssh_prefix(), command], "mkdir", timeout_s)
    warn_of_busy(board, runs_at_work_among(answer, folder if ours else None, workdirs))


def fetch_engine(board: Board, timing: Timing, dest: str | Path, timeout_s: float) -> bool:
    """Copy back the engine a board built for `timing`'s model (its board path is the environment's
    `engine`); False when the result names none."""
    engine = timing.environment.get("engine") if isinstance(timing.environment, dict) else None
    if not engine:
        return False
    board.get(str(engine), dest, "scp of the engine", timeout_s)
    return True


def model_weights(model: str | Path) -> list[Weights]:
    """The external-data files `model` reads, as (file here, name beside it) for Board.put_model:
    one-line ModelError, before anything is copied, when one is missing, kept in a subfolder, or
    named so that older scp would split it in the board's shell."""
    from deployopt.model import external_data_files

    weights = external_data_files(model)
    for _, name in weights:
        if board_name(name) != name:
            raise ModelError(
                f"{Path(model).name} keeps weights in {name!r}: rename it to letters, digits, '.', '_' "
                "and '-' (re-save the model) to copy it to a board"
            )
    return weights
