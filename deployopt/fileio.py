"""Atomic writes: outputs appear whole or not at all (temp file in the same folder, then rename).

A set of outputs that belong together (optimize's model, plan and report) is staged in a folder
inside their destination and moved into place by `output_set`, a marker file last.

Every way an output path can be wrong (a folder where a file goes, a parent that is a file, a
read-only or full disk) is one OutputError naming the path, never an OSError traceback.

A symlink is written through (the temp file goes beside its target, so the link stays), and a
destination that is not a regular file (/dev/null, a FIFO, a character device, `/dev/stdout` into a
pipe, bash's `>(cmd)`) is written to directly: renaming a temp file over it would replace the device
node, not write to it. A path naming an open descriptor (`/dev/stdout`, `/dev/fd/N`, `/proc/PID/fd/N`)
is appended to, whatever it is: stdout redirected `>> log` to a regular file was renamed over, and
the log lost what it held. `-` is no file name here: it is refused rather than written as a file `-`.

Two readers too: `read_json` opens a JSON file plain or gzip-compressed, as the benchmark records are
committed; `read_json_input` reads a JSON file a user gives (a pipe, a device, a huge file: one line).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from deployopt.errors import DeployoptError, OutputError

STAGING_PREFIX = ".partial-"  # output_set's staging folders: `.partial-<pid>-<random>`
NAME_MAX = 255  # bytes in one file name, where the filesystem does not say (pathconf)
TEMP_RANDOM = 8  # the random characters mkstemp and mkdtemp put between prefix and suffix


def output_error(dest: str | os.PathLike[str], exc: OSError) -> OutputError:
    """`cannot write DEST: <why>`, the one line for an OSError met while writing `dest`."""
    return OutputError(f"cannot write {dest}: {exc.strerror or exc}")


def _existing_ancestor(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _name_max(folder: Path) -> int:
    """The longest file name `folder`'s filesystem takes, in bytes; NAME_MAX where it does not say.
    Windows has no os.pathconf (Unix only): looked up as an attribute, every write there ended in an
    AttributeError traceback (NTFS takes 255 UTF-16 units per name, NAME_MAX's bytes or more)."""
    pathconf = getattr(os, "pathconf", None)
    if pathconf is None:
        return NAME_MAX
    try:
        return int(pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return NAME_MAX


def temp_prefix(name: str, suffix: str, folder: Path) -> str:
    """`.NAME.`, the prefix of the temp file (or folder) an output NAME is written as in `folder`,
    NAME cut so that prefix, mkstemp's random part and `suffix` fit one file name: a valid name of
    242-255 bytes failed with "File name too long" only after the work was done."""
    room = _name_max(folder) - 2 - TEMP_RANDOM - len(os.fsencode(suffix))
    return f".{os.fsencode(name)[: max(room, 0)].decode('utf-8', 'ignore')}."


#: bytes a temp file's name keeps for its writer's pid and the dash after it (`.NAME.<pid>-<random>.tmp`;
#: a pid_t has at most 10 digits): the same for every writer, so NAME is cut alike whatever the pid,
#: and the next write of NAME finds what a killed writer left (atomic_path)
PID_ROOM = 11


def pid_temp_prefix(name: str, suffix: str, folder: Path) -> str:
    """`.NAME.`, temp_prefix's cut leaving room for the `<pid>-` written after it (PID_ROOM): the
    temp file of output NAME is `.NAME.<pid>-<random><suffix>`, which `remove_stale_temp_dirs`
    removes once its writer is gone."""
    return temp_prefix(name, "-" * PID_ROOM + suffix, folder)


def _probe_writable(folder: Path, dest: Path, name: str = "deployopt-probe") -> None:
    """Create and remove a file in `folder`, named as atomic_path names its temp file for output
    `name`: the only check that sees a read-only filesystem or a full quota for root too (root
    passes every permission bit, not EROFS), before the long work."""
    try:
        prefix = f"{pid_temp_prefix(name, '.tmp', folder)}{os.getpid()}-"
        fd, probe = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=folder)
    except OSError as exc:
        raise output_error(dest, exc) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


#: paths that name a descriptor the shell opened (`> f`, `>> f`, a pipe), not a file to replace
_FD_PATH = re.compile(
    r"/dev/(?P<std>stdout|stderr)|/dev/fd/(?P<fd>\d+)|/proc/(?:self|thread-self|(?P<pid>\d+))/fd/(?P<pfd>\d+)"
)


def names_a_descriptor(dest: str | os.PathLike[str]) -> bool:
    """Whether `dest`, as given, is /dev/stdout, /dev/stderr, /dev/fd/N or /proc/PID/fd/N."""
    return _FD_PATH.fullmatch(os.fspath(dest)) is not None


def _appends(dest: str | os.PathLike[str]) -> bool:
    """Whether the descriptor `dest` names (one of this process's) was opened for appending (`>>`);
    True where that cannot be told (another process's descriptor)."""
    found = _FD_PATH.fullmatch(os.fspath(dest))
    if found is None or (found["pid"] is not None and int(found["pid"]) != os.getpid()):
        return True
    number = {"stdout": 1, "stderr": 2}[found["std"]] if found["std"] else int(found["fd"] or found["pfd"])
    import fcntl

    try:
        return bool(fcntl.fcntl(number, fcntl.F_GETFL) & os.O_APPEND)
    except OSError:
        return True


def resolve_output(dest: str | os.PathLike[str]) -> tuple[Path, bool]:
    """(the path to write, whether to write it directly): a symlink resolves to its target, so the
    link survives; an existing FIFO or device is written in place (True), never renamed over; a
    folder, a socket or a name too long is one OutputError."""
    dest = Path(dest)
    try:
        # stat the path as given: it follows /proc's links (/dev/stdout, `>(cmd)`'s /dev/fd/63) to the
        # pipe, where realpath made them /proc/PID/fd/pipe:[N], no file, and the write failed
        mode = dest.stat().st_mode
    except OSError as exc:  # not there (yet): a regular file is made (a dangling link's target)
        if exc.errno == errno.ENAMETOOLONG:
            raise output_error(dest, exc) from None
        if names_a_descriptor(dest):  # `>&-`, or a number never opened: said "permission denied"
            raise OutputError(
                f"cannot write {dest}: not an open descriptor (closed, or never opened)"
            ) from None
        mode = stat.S_IFREG
    if stat.S_ISDIR(mode):
        raise OutputError(f"cannot write {dest}: it is a folder; give a file path")
    if stat.S_ISSOCK(mode):
        raise OutputError(f"cannot write {dest}: it is a socket, not a file")
    if not stat.S_ISREG(mode):
        return dest, True
    if names_a_descriptor(dest) and _appends(dest):  # `>> log`'s /dev/stdout: appended to, never renamed over
        return dest, True
    # a regular file behind `> out` is replaced whole, as a file path is: appended to through its path, the
    # write landed at the end while the shell's descriptor, at 0, wrote the command's own lines over it
    return (Path(os.path.realpath(dest)) if dest.is_symlink() else dest), False


def _dir_through_link(path: Path) -> Path:
    """The folder to make for `path`: `path`, or for a dangling symlink the folder it names, as a
    file output is written through a dangling link to its target (mkdir on the link itself said
    "File exists" of a name where nothing exists). A link that loops is one OutputError."""
    if not path.is_symlink() or path.exists():
        return path
    target = Path(os.path.realpath(path))
    if target.is_symlink():  # realpath stops where a link loops
        raise OutputError(f"cannot write into {path}: it is a symbolic link that loops")
    return target


def check_output_dir(path: str | os.PathLike[str], probe: bool = True) -> Path:
    """A folder outputs can go in (it may not exist yet; a dangling link: the folder it names), or a
    one-line OutputError; leaves nothing."""
    path = Path(path)
    target = _dir_through_link(path)
    anc = _existing_ancestor(target)
    if not anc.is_dir():
        where = "it is" if anc == target.absolute() else f"{anc} is"
        raise OutputError(f"cannot write into {path}: {where} a file, not a folder")
    if probe:
        _probe_writable(anc, path)
    return path


@contextlib.contextmanager
def removed_if_left_empty(folder: str | os.PathLike[str] | None) -> Iterator[None]:
    """The folders a command creates for `folder` (it and the parents it lacked) are removed again
    when the command fails and leaves them empty: a failed `profile --trace-dir` left its empty
    trace folder behind. Folders that were there before, or hold anything, stay."""
    if folder is None:
        yield
        return
    path = Path(folder).absolute()
    existed = _existing_ancestor(path)
    try:
        yield
    except BaseException:
        p = path
        while p != existed and p != p.parent:
            try:
                p.rmdir()  # only an empty folder; the first that is not (or is gone) stops the walk
            except OSError:
                break
            p = p.parent
        raise


def check_output_file(dest: str | os.PathLike[str], probe: bool = True, dash_hint: str = "") -> Path:
    """A path a file can be written to (checked before long work), or a one-line OutputError.

    Returns `dest` as given; the folder probed is that of a symlink's target. `dash_hint`: what to
    give instead of `-` (bench's "use --json for stdout"), said in the one refusal of `-`."""
    given = Path(dest)
    if str(given) == "-":  # a file named `-` was written where stdout was meant
        hint = f"; {dash_hint}" if dash_hint else ""
        raise OutputError(f"cannot write -: give a file name ('-' is not standard output here){hint}")
    target, direct = resolve_output(given)  # a folder or socket, a name too long: one line
    if direct:  # /dev/null, a FIFO: nothing is created beside it
        if not os.access(target, os.W_OK):
            raise OutputError(f"cannot write {given}: permission denied")
        return given
    anc = _existing_ancestor(target.parent)
    if not anc.is_dir():
        raise OutputError(f"cannot write {given}: {anc} is a file, not a folder")
    if len(os.fsencode(target.name)) > _name_max(anc):  # else found at the rename, after the work
        raise OutputError(f"cannot write {given}: {os.strerror(errno.ENAMETOOLONG)}")
    if probe:
        _probe_writable(anc, given, target.name)
    return given


def refuse_input_as_output(
    dest: str | os.PathLike[str], inputs: Sequence[tuple[str, str | os.PathLike[str]]], option: str
) -> None:
    """An output that is one of the command's own input files is one OutputError before any work:
    `bench m.onnx -o m.onnx` wrote its JSON over the model, `compare base.json new.json -o
    base.json` the report over the baseline, `apply --plan p.json -o p.json` the model over the plan.
    `inputs`: (what it is, its path)."""
    given = Path(dest)
    if not given.is_file():
        return
    for what, path in inputs:
        p = Path(path)
        if p.is_file() and given.samefile(p):
            raise OutputError(
                f"cannot write {given}: it is the {what} this command reads; give another {option}"
            )


def make_output_dir(path: str | os.PathLike[str]) -> Path:
    """Create the folder (and its parents) for outputs, through a dangling link the folder it names
    (the link stays, and `path` is returned as given); a one-line OutputError if that fails."""
    path = check_output_dir(path, probe=False)  # mkdir's own error says it as well
    try:
        _dir_through_link(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(path, exc) from None
    return path


def _umask() -> int:
    """The process umask (read by setting it and putting it back: there is no getter)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def publish(tmp: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """Rename a finished temp file onto `dest` with the mode the umask gives new files.

    Every output goes through here: mkstemp makes its file 0600, and so does onnx (1.23) for an
    external weights file, but a result is shared like any file the user writes (an engine or a
    model with its .data copied to a board, a report read by CI). An OSError propagates."""
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, dest)


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temp path beside `dest`; rename it onto `dest` only if the block succeeds.

    A symlink's target is replaced, not the link; a FIFO or device is yielded itself, to write to;
    a descriptor's path (/dev/stdout) gets a temp file appended to it at the end (see _appended)."""
    given = check_output_file(dest, probe=False)  # mkstemp below is the probe
    dest, direct = resolve_output(given)
    if direct and names_a_descriptor(given):
        with _appended(given, suffix or ".tmp") as tmp:
            yield tmp
        return
    if direct:
        try:
            yield dest
        except OSError as exc:
            raise output_error(given, exc) from None
        return
    make_output_dir(dest.parent)
    suffix = suffix or ".tmp"
    prefix = pid_temp_prefix(dest.name, suffix, dest.parent)
    # the temp files of this destination a killed writer left (SIGKILL skips _staged's `finally`),
    # `.NAME.<pid>-<random>.tmp`: removed once their pid is gone and no one holds their lock
    remove_stale_temp_dirs(dest.parent, prefix, suffix)
    prefix += f"{os.getpid()}-"
    with _staged(dest, lambda tmp: publish(tmp, dest), prefix=prefix, suffix=suffix, dir=dest.parent) as tmp:
        yield tmp


@contextlib.contextmanager
def _appended(dest: Path, suffix: str) -> Iterator[Path]:
    """Yield a temp file; append it to `dest` when the block succeeds. Opened for writing, the
    descriptor's path truncated a file the shell had opened `>>` (O_APPEND is the descriptor's, not
    the path's); for a pipe or a terminal, appending is writing (a `>` file is no descriptor here:
    resolve_output replaces it whole)."""

    def append(tmp: Path) -> None:
        with open(tmp, "rb") as src, open(dest, "ab") as out:
            shutil.copyfileobj(src, out)

    with _staged(dest, append, suffix=suffix) as tmp:
        yield tmp


@contextlib.contextmanager
def _staged(dest: Path, finish: Callable[[Path], None], **where: Any) -> Iterator[Path]:
    """A temp file made by mkstemp(**where), yielded, then given to `finish` (renamed onto `dest`,
    appended to it) if the block succeeds, and removed in any case; an OSError on the way (a full
    disk, a quota, the rename) is one line naming `dest`."""
    try:
        fd, tmp = tempfile.mkstemp(**where)
    except OSError as exc:
        raise output_error(dest, exc) from None
    try:  # locked while written: a live writer's file is never stale (remove_stale_temp_dirs)
        locked = _flock(fd)
    except ImportError:  # no flock (not POSIX)
        locked = False
    if not locked:
        os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        finish(tmp_path)
    except OSError as exc:
        raise output_error(dest, exc) from None
    finally:
        tmp_path.unlink(missing_ok=True)
        if locked:
            os.close(fd)


def run_unique_path(folder: str | os.PathLike[str], stem: str, suffix: str) -> Path:
    """`folder/STEM.<local time>-<pid>SUFFIX`, a name of this run's own for a file it keeps in a
    folder other runs write to too (`profile --trace-dir`): named after the model alone, two runs of
    same-named models (x/model.onnx, y/model.onnx), or one model at two batches, replaced each
    other's trace without a word. `-2`, `-3`, ... after the pid where that name is taken (one
    process writing twice in a second)."""
    folder = Path(folder)
    base = f"{stem}.{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    path = folder / f"{base}{suffix}"
    n = 1
    while path.exists() or path.is_symlink():
        n += 1
        path = folder / f"{base}-{n}{suffix}"
    return path


def write_bytes(dest: str | os.PathLike[str], data: bytes) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def write_pieces(dest: str | os.PathLike[str], pieces: Iterable[bytes]) -> None:
    """`write_bytes` of the pieces' concatenation, never held joined (a model written from
    deployopt.onnx_proto.serialized_pieces: its bytes at once were twice the model's size)."""
    with atomic_path(dest) as tmp, open(tmp, "wb") as f:
        for piece in pieces:
            f.write(piece)


def write_text(dest: str | os.PathLike[str], text: str) -> None:
    """`text` as UTF-8, whatever the locale; a character UTF-8 cannot hold is written `\\udce9`: a
    model file name that is not UTF-8 (`caf\\xe9.onnx`, its byte held as a surrogate) ended
    optimize with a traceback when report.md named it, the run's folder left with its journal."""
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8", errors="backslashreplace")


def write_json(dest: str | os.PathLike[str], obj: Any) -> None:
    write_text(dest, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def write_json_if_unchanged(dest: str | os.PathLike[str], obj: Any, expected: bytes | None) -> None:
    """`write_json` for a read-modify-write (`bench --append`): the new document is staged beside
    `dest` and renamed over it only if `dest` still holds `expected` (None: still absent), checked
    right before the rename. Two loops appending to one file, or a copy over it while a run was
    timed, would otherwise lose the other's runs without a word; the later one gets one OutputError
    line and `dest` keeps what the other wrote. (Not a lock: a write in the instant between the
    check and the rename is still lost.)"""
    with atomic_path(dest) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")
        try:
            now: bytes | None = Path(dest).read_bytes()
        except FileNotFoundError:
            now = None
        except OSError as exc:
            raise output_error(dest, exc) from None
        if now != expected:
            raise OutputError(
                f"cannot write {dest}: it changed while this ran (another bench appending to it, or a "
                "copy over it); left as it is: time this run again"
            )


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON document in `path`, `NAME.json` or gzip-compressed `NAME.json.gz` (by the suffix).

    Benchmark records of 300 KB or more are committed compressed (`gzip -n -9`): every GPU call ships
    the tracked tree under a 64 MiB limit (benchmarks/results/README.md). Their readers open both
    kinds here rather than each knowing which record is which."""
    path = Path(path)
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def read_json_input(path: Path, error: type[DeployoptError], what: str, max_bytes: int) -> bytes:
    """The bytes of a JSON file a user gives (a plan, a target profile, a measurement), for its
    reader to parse and word: `what` names it ("a plan .json file"). A named pipe (`--plan <(jq …)`)
    is read as the model loader reads one (`deployopt.model.read_pipe`), so one that no process
    opens for writing is one line after its wait where a blocking open waited forever; a device
    (/dev/zero) or socket is refused before reading, and more than `max_bytes` (a file's size, or
    what came through a pipe) is one line before it fills memory. OSError propagates
    (FileNotFoundError included): each reader words it its own way."""
    st = path.stat()
    if stat.S_ISREG(st.st_mode):
        if st.st_size > max_bytes:
            size = f"{st.st_size:,} bytes"
            raise error(f"{path}: more than {max_bytes >> 20} MiB ({size}), too large for {what}")
        return path.read_bytes()
    if not stat.S_ISFIFO(st.st_mode):
        raise error(f"{path}: not a regular file (a device or socket); give {what}")
    from deployopt.model import read_pipe  # the model module imports this one

    too_much = f"{path}: more than {max_bytes >> 20} MiB came through the pipe, too large for {what}"
    return read_pipe(path, max_bytes, error, what, too_much)


def json_name(path: str | os.PathLike[str]) -> str:
    """The name a JSON record was written under: `NAME.json` for `NAME.json.gz` too, so tables and
    derived records name a record the same whether or not it is stored compressed."""
    name = Path(path).name
    return name.removesuffix(".gz") if name.endswith(".json.gz") else name


def _remove(path: Path) -> None:
    """Remove a file, link or folder at `path` if there is one; an OSError propagates."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


#: when this process began (about: when deployopt was imported): a temp folder last changed before
#: it is one an earlier run left, never one a run started after this one is making
_STARTED_NS = time.time_ns()
#: the open descriptors that hold owned_temp_dir's folders locked, by path
_TEMP_LOCKS: dict[str, int] = {}


def _flock(fd: int) -> bool:
    """An exclusive flock on `fd` without waiting: False where another process holds one."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists here (one of another user's counts: EPERM). A pid no process
    can have (beyond pid_t: os.kill raises OverflowError) counts as alive: a name this cannot read
    is not taken for ours, so its folder is left alone."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True
    return True


def remove_stale_temp_dirs(folder: str | os.PathLike[str], prefix: str, suffix: str | None = None) -> None:
    """Remove the folders `owned_temp_dir(prefix, folder)` made that their run left (SIGKILL, the
    OOM killer, a power loss skip every `finally`): named `<prefix><pid>-<random>`, whose pid is no
    live process here, whose lock (an flock on the folder) no process holds, and last changed before
    this process began. A live writer holds its lock (in another container sharing the folder too,
    where its pid means nothing here); one that starts while this looks has just made its folder.
    `suffix`: files `<prefix><pid>-<random><suffix>` instead, atomic_path's temp files, held to the
    same rules (locked while written). Without flock (not POSIX) nothing is removed. Errors are
    ignored: a cleanup only saves space."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return
    folder = Path(folder)
    pattern = re.compile(
        re.escape(prefix) + rf"(\d+)-[A-Za-z0-9_]{{{TEMP_RANDOM}}}" + re.escape(suffix or "")
    )
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        found = pattern.fullmatch(entry.name) if entry.name.startswith(prefix) else None
        if found is None or _pid_alive(int(found[1])):
            continue
        with contextlib.suppress(OSError):
            if suffix is None and not entry.is_dir(follow_symlinks=False):
                continue
            if suffix is not None and not entry.is_file(follow_symlinks=False):
                continue
            flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
            fd = os.open(entry.path, flags | (getattr(os, "O_DIRECTORY", 0) if suffix is None else 0))
            try:
                if _flock(fd) and os.fstat(fd).st_mtime_ns < _STARTED_NS:
                    if suffix is None:
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)
            finally:
                os.close(fd)


def owned_temp_dir(prefix: str, folder: str | os.PathLike[str] | None = None) -> Path:
    """A new folder `<prefix><pid>-<random>` in `folder` (None: the temp dir), locked (an flock on
    it) until `remove_owned_temp_dir` or this process ends, after removing those earlier runs left
    there (`remove_stale_temp_dirs`): a run killed before its `finally` left a whole model (and its
    weights) beside its output, or its candidates in $TMPDIR, for good. An OSError propagates."""
    where = Path(folder) if folder is not None else Path(tempfile.gettempdir())
    remove_stale_temp_dirs(where, prefix)
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=where))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return path  # unlocked: a later run may take it for stale only once this process is gone
    try:
        locked = _flock(fd)
    except ImportError:  # no flock: nothing is removed as stale either
        locked = False
    if locked:
        _TEMP_LOCKS[str(path)] = fd
    else:
        os.close(fd)
    return path


def remove_owned_temp_dir(path: str | os.PathLike[str]) -> None:
    """Remove an `owned_temp_dir` folder and release its lock (errors ignored, as rmtree's)."""
    shutil.rmtree(path, ignore_errors=True)
    fd = _TEMP_LOCKS.pop(str(path), None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def hold_lock(
    path: str | os.PathLike[str], refusal: str, tries: int = 3, error: type[DeployoptError] = DeployoptError
) -> IO[str] | None:
    """An exclusive flock on the file `path` (made where missing), held until `release_lock`, or a
    one-line `error` (DeployoptError) saying `refusal` where another process holds it; None where
    the platform has no flock (nothing is then guarded). A holder that ends removes the file before
    releasing it: one opened before that removal is locked here while a third process may hold a
    new file under the name, so the name is opened again (at most `tries` times). An OSError
    opening it is an OutputError naming `path`. (optimize locks its OUTDIR with it.)"""
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    for _ in range(tries):
        try:
            handle = open(path, "a")  # noqa: SIM115 - held until release_lock
        except OSError as exc:
            raise output_error(path, exc) from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held
            handle.close()
            break
        try:
            if os.path.samestat(os.fstat(handle.fileno()), os.stat(path)):
                return handle
        except OSError:  # removed: the next open makes it anew
            pass
        handle.close()
    raise error(refusal)


def holds_lock(handle: IO[str] | None) -> bool:
    """Whether `handle` (`hold_lock`'s; None: no flock here) is still the file at its path: its
    folder removed meanwhile leaves it locking a deleted file, and a process started since locks a
    new one under the name."""
    if handle is None:
        return True
    try:
        return os.path.samestat(os.fstat(handle.fileno()), os.stat(handle.name))
    except OSError:
        return False


def release_lock(handle: IO[str] | None) -> None:
    """Remove the lock file `hold_lock` gave, then release it (a process waiting on it never waits:
    it refuses); only where the name is still that file (another holder's lock otherwise)."""
    if handle is None:
        return
    if holds_lock(handle):
        with contextlib.suppress(OSError):
            os.unlink(handle.name)
    handle.close()


def lock_name(dest: Path) -> Path:
    """`.NAME.lock` beside output `dest`: the lock its writers hold (NAME cut to fit one name)."""
    return dest.parent / f"{temp_prefix(dest.name, 'lock', dest.parent)}lock"


def remove_staging(folder: str | os.PathLike[str]) -> None:
    """Remove staging folders a killed run (SIGKILL, power loss) left in `folder`."""
    folder = Path(folder)
    if folder.is_dir():
        for path in folder.glob(f"{STAGING_PREFIX}*"):
            shutil.rmtree(path, ignore_errors=True)


def remove_outputs(folder: str | os.PathLike[str], names: Sequence[str]) -> None:
    """Remove `names` (files or folders) from `folder`, last name first (output_set's marker goes
    before the rest), and any staging leftovers; a one-line OutputError if one cannot be removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for name in reversed(names):
        try:
            _remove(folder / name)
        except OSError as exc:
            raise output_error(folder / name, exc) from None
    remove_staging(folder)


@contextlib.contextmanager
def output_set(folder: str | os.PathLike[str], names: Sequence[str]) -> Iterator[Path]:
    """Yield an empty staging folder inside `folder`; when the block succeeds, what it holds replaces
    the previous set of `names` in `folder`, `names[-1]` (the marker) moved in last.

    A reader never takes a mix of two runs for a complete set: a failure in the block (a full disk,
    an error, Ctrl-C) removes the staging folder and leaves the previous set as it was; once the
    block succeeded, the previous set is renamed aside (its marker first) into a folder of its own,
    then the new entries move in (renames in one folder), the marker last, and only then is the
    previous set removed; a failure in that step (on Windows, a previous file another process holds
    open) takes out what moved in and puts the previous set back as it was (_move_set). What is not
    in `names` (a journal, the user's own files) is never touched. An OutputError names the file in
    `folder`, not in the staging folder.
    """
    folder = make_output_dir(folder)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=folder))
    except OSError as exc:
        raise output_error(folder, exc) from None
    try:
        try:
            yield staging
        except OutputError as exc:  # name the file where the user will look for it, not in staging
            raise OutputError(str(exc).replace(str(staging), str(folder))) from None
        _move_set(staging, folder, names)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _present(path: Path) -> bool:
    """Whether there is a file, folder or link (a dangling one too) at `path`."""
    return path.exists() or path.is_symlink()


def _move_set(staging: Path, folder: Path, names: Sequence[str]) -> None:
    """Move the staged entries into `folder` in place of the previous set of `names`, nothing of
    which is deleted before the new set is in: it is first renamed aside into a staging folder of
    its own (the marker first), so a name that cannot go (on Windows a file another process holds
    open: neither deleted nor renamed) fails before anything is lost. A failure on the way takes out
    what moved in and puts the previous set back, its marker last: deleted name by name, one held
    file lost both the previous set and the new one (bug bash)."""
    staged = {p.name for p in staging.iterdir()}
    if staged - set(names):  # a name no later run would replace or remove: a bug, not a user error
        raise ValueError(f"output_set: {sorted(staged - set(names))} not among {list(names)}")
    previous = [name for name in (names[-1], *names[:-1]) if _present(folder / name)]
    aside: Path | None = None
    moved: list[str] = []  # the previous set's names now aside, in the order they went
    placed: list[str] = []  # the new entries now in `folder`
    dest = folder / names[-1]
    try:
        if previous:
            aside = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-previous-", dir=folder))
            for name in previous:  # the marker first: from here on the folder claims no complete set
                dest = folder / name
                os.replace(dest, aside / name)
                moved.append(name)
        for name in names:  # names[-1], the marker, last (os.replace cannot put a folder over a full one)
            if name in staged:
                dest = folder / name
                os.replace(staging / name, dest)
                placed.append(name)
    except BaseException as exc:
        kept = _put_back(folder, aside, moved, placed, names[-1])
        if isinstance(exc, OSError):
            error = output_error(dest, exc)
            if kept is not None:  # what could not go back (rare: a second failure)
                error = OutputError(f"{error}; the previous results are kept in {kept}")
            raise error from None
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _put_back(
    folder: Path, aside: Path | None, moved: Sequence[str], placed: Sequence[str], marker: str
) -> Path | None:
    """Undo a failed _move_set: remove the new entries that moved in, then move the previous set's
    back from `aside`, its `marker` (moved first) last, and only where nothing else is left out:
    never part of a set. Returns `aside` where it still holds something, else None (removed)."""
    whole = True
    for name in reversed(placed):
        try:
            _remove(folder / name)
        except OSError:
            whole = False
    if aside is None:
        return None
    for name in reversed(moved):
        if name == marker and not whole:  # the marker stays aside: the set here is not the previous one
            break
        try:
            os.replace(aside / name, folder / name)
        except OSError:
            whole = False
    try:
        aside.rmdir()
    except OSError:
        return aside
    return None


#: file_sha256's digests: absolute path -> (the file's stat fingerprint, its sha256), the most
#: recently hashed SHA_CACHE_FILES files. Every Session.measure records the sha256 of the file it
#: times, so `bench --repeat 5` of a 753 MiB model read it 6 times
_SHA_CACHE: dict[str, tuple[tuple[int, ...], str]] = {}
SHA_CACHE_FILES = 64
#: a file changed this recently is read every time: rewritten within one timestamp tick, it can
#: keep its size and times (as backends.tensorrt's calibration-data memo)
SETTLED_NS = 2_000_000_000


def _fingerprint(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def file_sha256(path: Path) -> str:
    """The file's sha256, read in 1 MiB blocks (models with their weights can be large); a regular
    file whose device, inode, size, mtime and ctime are as when this process last hashed it under
    this path is not read again (`_SHA_CACHE`), unless it changed within SETTLED_NS of that."""
    name = os.path.abspath(path)
    now = time.time_ns()  # before the stat: a later change has a later timestamp than any kept one
    try:
        before = os.stat(path)
    except OSError:
        before = None  # open says why, as before
    if before is not None and stat.S_ISREG(before.st_mode):
        known = _SHA_CACHE.get(name)
        if known is not None and known[0] == _fingerprint(before):
            _SHA_CACHE[name] = _SHA_CACHE.pop(name)  # the most recently used, kept longest
            return known[1]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        opened = os.fstat(f.fileno())
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
        after = os.fstat(f.fileno())
    hexdigest = digest.hexdigest()
    key = _fingerprint(after)
    # kept only for the file that was read, unchanged while it was, and settled
    if (
        stat.S_ISREG(after.st_mode)
        and before is not None
        and _fingerprint(before) == _fingerprint(opened) == key
        and max(after.st_mtime_ns, after.st_ctime_ns) < now - SETTLED_NS
    ):
        _SHA_CACHE.pop(name, None)
        _SHA_CACHE[name] = (key, hexdigest)
        while len(_SHA_CACHE) > SHA_CACHE_FILES:
            _SHA_CACHE.pop(next(iter(_SHA_CACHE)), None)
    else:
        _SHA_CACHE.pop(name, None)
    return hexdigest
