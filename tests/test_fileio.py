"""Atomic writes and output sets, on their own: whole or nothing, and nothing left behind."""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path

import onnx
import pytest
from zoo_models import conv_16x3x3x3

from deployopt import fileio
from deployopt.errors import OutputError
from deployopt.fileio import atomic_path, output_set, remove_outputs, write_text

NAMES = ["model.onnx", "plan.json", "report.json"]  # report.json: the marker, moved in last


def disk_full() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_atomic_write_replaces_the_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    dest = tmp_path / "out" / "report.md"
    write_text(dest, "first")
    write_text(dest, "second")
    assert dest.read_text() == "second"
    assert [p.name for p in dest.parent.iterdir()] == ["report.md"]


@pytest.mark.parametrize(
    ("error", "raised"),
    [(disk_full(), OutputError), (KeyboardInterrupt(), KeyboardInterrupt)],
    ids=["oserror", "ctrl-c"],
)
def test_a_failed_atomic_write_keeps_the_old_file_and_removes_the_temp_file(
    tmp_path: Path, error: BaseException, raised: type[BaseException]
) -> None:
    dest = tmp_path / "report.md"
    dest.write_text("old")
    with pytest.raises(raised) as caught, atomic_path(dest) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".report.md.")
        tmp.write_text("half of the new")
        raise error
    if raised is OutputError:  # one line naming the file the user asked for
        assert str(caught.value) == f"cannot write {dest}: No space left on device"
    assert dest.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


def test_output_set_replaces_the_previous_set_and_keeps_other_files(tmp_path: Path) -> None:
    for name in [*NAMES, "journal.jsonl"]:
        (tmp_path / name).write_text("old")
    with output_set(tmp_path, NAMES) as staging:
        assert staging.parent == tmp_path and staging.name.startswith(fileio.STAGING_PREFIX)
        (staging / "plan.json").write_text("new")
        (staging / "report.json").write_text("new")
    # model.onnx belonged to the previous set and was not rewritten: it goes, the journal stays
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.jsonl", "plan.json", "report.json"]
    assert (tmp_path / "plan.json").read_text() == (tmp_path / "report.json").read_text() == "new"
    assert (tmp_path / "journal.jsonl").read_text() == "old"


def test_output_set_moves_the_marker_in_last_after_taking_the_old_one_away_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous set is renamed aside, its marker first, and nothing of it deleted before the new
    set is in (on Windows a file held open cannot go: fileio._move_set; tests/test_port_fileio.py)."""
    for name in NAMES:
        (tmp_path / name).write_text("old")
    events: list[str] = []
    real_remove, real_replace = fileio._remove, os.replace
    monkeypatch.setattr(fileio, "_remove", lambda p: (events.append(f"remove {p.name}"), real_remove(p)))

    def replace(a: str, b: str) -> None:
        events.append(f"{'move' if Path(b).parent == tmp_path else 'aside'} {Path(b).name}")
        real_replace(a, b)

    monkeypatch.setattr(os, "replace", replace)
    with output_set(tmp_path, NAMES) as staging:
        for name in NAMES:
            (staging / name).write_text("new")
    assert events[0] == "aside report.json"
    assert events[-1] == "move report.json"
    assert [e for e in events if e.startswith("move")] == [f"move {n}" for n in NAMES]
    assert not [e for e in events if e.startswith("remove")]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(NAMES)


def test_a_failure_inside_the_block_leaves_the_previous_set_and_no_staging(tmp_path: Path) -> None:
    for name in NAMES:
        (tmp_path / name).write_text("old")
    with pytest.raises(OutputError) as caught, output_set(tmp_path, NAMES) as staging:
        (staging / "model.onnx").write_text("new")
        write_text(staging / "plan.json", "x")
        raise fileio.output_error(staging / "report.json", disk_full())
    # the error names the file where the user looks for it, not the staging folder
    assert str(caught.value) == f"cannot write {tmp_path / 'report.json'}: No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(NAMES)
    assert all((tmp_path / n).read_text() == "old" for n in NAMES)


def test_a_failed_move_leaves_no_part_of_a_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "journal.jsonl").write_text("mine")
    real_replace = os.replace

    def marker_fails(a: str, b: str) -> None:
        if Path(b).name == "report.json":
            raise disk_full()
        real_replace(a, b)

    monkeypatch.setattr(os, "replace", marker_fails)
    with (
        pytest.raises(OutputError, match=r"report\.json: No space left on device"),
        output_set(tmp_path, NAMES) as staging,
    ):
        for name in NAMES:
            (staging / name).write_text("new")
    assert [p.name for p in tmp_path.iterdir()] == ["journal.jsonl"]


def test_a_staged_name_outside_the_set_is_a_bug(tmp_path: Path) -> None:
    with (
        pytest.raises(ValueError, match=r"\['stray\.txt'\] not among"),
        output_set(tmp_path, NAMES) as staging,
    ):
        (staging / "stray.txt").write_text("x")
    assert list(tmp_path.iterdir()) == []


def test_remove_outputs_takes_the_marker_first_and_staging_leftovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [*NAMES, "notes.txt"]:
        (tmp_path / name).write_text("x")
    (tmp_path / ".partial-99-killed").mkdir()
    (tmp_path / ".partial-99-killed" / "model.onnx").write_text("half")
    removed: list[str] = []
    real_remove = fileio._remove
    monkeypatch.setattr(fileio, "_remove", lambda p: (removed.append(p.name), real_remove(p)))
    remove_outputs(tmp_path, NAMES)
    assert removed == list(reversed(NAMES))
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def _fifo_reader(path: Path) -> int:
    """A FIFO's read end, opened without blocking, so a writer can open it and a test never hangs."""
    os.mkfifo(path)
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK)


def _save_onnx(dest: Path, text: str) -> None:
    """save_model (apply -o) with `text` as the model's producer, so the bytes can be recognised."""
    from deployopt.model import save_model

    save_model(onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []), producer_name=text), dest)


WRITERS = {"write_text": write_text, "save_model": _save_onnx}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_symlink_is_written_through_and_stays_a_link(tmp_path: Path, writer: str) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    WRITERS[writer](link, "new")
    assert link.is_symlink() and link.resolve() == target
    assert b"new" in target.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real"]
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_fifo_is_written_to_not_replaced(tmp_path: Path, writer: str) -> None:
    """The same path as /dev/null or /dev/full: renaming over it would replace the device node."""
    fifo = tmp_path / "out.fifo"
    fd = _fifo_reader(fifo)
    try:
        WRITERS[writer](fifo, "through the pipe")
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a file"
        assert b"through the pipe" in os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    assert [p.name for p in tmp_path.iterdir()] == ["out.fifo"]


def test_a_folder_and_a_socket_stay_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="it is a folder"):
        write_text(tmp_path, "x")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s"))
        with pytest.raises(OutputError, match="it is a socket"):
            write_text(tmp_path / "s", "x")
    finally:
        sock.close()


def test_the_output_check_probes_a_read_only_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root passes every permission bit but not a read-only filesystem: only creating a file tells."""
    ro = tmp_path / "ro"
    ro.mkdir()
    real_mkstemp = fileio.tempfile.mkstemp

    def mkstemp(*args: object, **kwargs: object) -> tuple[int, str]:
        if Path(str(kwargs.get("dir"))) == ro:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real_mkstemp(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fileio.tempfile, "mkstemp", mkstemp)
    for dest in (ro / "x.json", ro / "new" / "x.json"):
        with pytest.raises(OutputError) as caught:
            fileio.check_output_file(dest)
        assert str(caught.value) == f"cannot write {dest}: Read-only file system"
    with pytest.raises(OutputError, match="Read-only file system"):
        fileio.check_output_dir(ro / "outdir")
    assert fileio.check_output_file(tmp_path / "x.json") == tmp_path / "x.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ro"] and not list(ro.iterdir())


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)], ids=["umask022", "umask027"])
def test_every_written_file_gets_the_umask_mode_external_weights_too(
    tmp_path: Path, umask: int, mode: int
) -> None:
    """onnx (1.23) creates an external .data file 0600, as mkstemp does: the weights of `apply -o`
    and optimize's model.onnx.data were unreadable to whoever the model was handed to."""
    from deployopt.model import save_model

    old = os.umask(umask)
    try:
        write_text(tmp_path / "report.md", "x")
        save_model(conv_16x3x3x3(), tmp_path / "m.onnx", external_data=True)
        save_model(conv_16x3x3x3(), tmp_path / "inline.onnx")
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inline.onnx", "m.onnx", "m.onnx.data", "report.md"]
    for name in ("report.md", "m.onnx", "m.onnx.data", "inline.onnx"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


def test_a_folder_where_the_weights_go_is_named_not_the_model(tmp_path: Path) -> None:
    """`apply -o out/x.onnx` of an external-data model where out/x.onnx.data is a folder: the error
    named out/x.onnx, which was no folder and did not exist. Nothing is left behind."""
    from deployopt.errors import OutputError
    from deployopt.model import save_model

    (tmp_path / "x.onnx.data").mkdir()
    with pytest.raises(OutputError) as err:
        save_model(conv_16x3x3x3(), tmp_path / "x.onnx", external_data=True)
    assert str(err.value).startswith(f"cannot write {tmp_path / 'x.onnx.data'}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.onnx.data"]


def test_read_json_opens_plain_and_gzip_compressed_records_alike(tmp_path: Path) -> None:
    """Benchmark records of 300 KB or more are committed as NAME.json.gz (gzip -n -9): read_json
    gives the same document for both, chosen by the suffix, and json_name the name it was written
    under."""
    import gzip
    import json

    doc = {"cases": {"vgg16_seed0": {"median_us": 481.79200291633606, "note": "µs, 8 SMs"}}}
    text = json.dumps(doc, indent=2) + "\n"
    plain = tmp_path / "optimize_sms8.json"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / "packed" / "optimize_sms8.json.gz"
    packed.parent.mkdir()
    packed.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
    assert fileio.read_json(plain) == fileio.read_json(str(packed)) == doc
    assert fileio.json_name(plain) == fileio.json_name(packed) == "optimize_sms8.json"
    assert fileio.json_name("notes.txt.gz") == "notes.txt.gz"  # only a compressed JSON loses its .gz
    plain.write_bytes(packed.read_bytes())  # the suffix decides: gzip bytes under .json do not parse
    with pytest.raises(UnicodeDecodeError):
        fileio.read_json(plain)
