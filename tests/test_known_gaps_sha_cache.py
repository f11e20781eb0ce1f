"""Every Session.measure records the sha256 of the file it times (regression.model_identity), so
`bench --repeat N` read the model N + 1 times (a 753 MiB model: N + 1 full reads). fileio.file_sha256
now reads a file once per process while its device, inode, size, mtime and ctime are unchanged,
and reads a changed one again."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli

import deployopt.fileio as fileio
from deployopt.backends.base import MeasureOptions
from deployopt.backends.ort import OrtBackend
from deployopt.fileio import file_sha256


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files count as settled at once (a test's files were all written a moment ago)."""
    monkeypatch.setattr(fileio, "SETTLED_NS", 0, raising=False)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times deployopt.fileio opened each file to read it, by resolved path."""
    counted: dict[str, int] = {}

    def counting_open(file: Any, mode: str = "r", *a: Any, **kw: Any) -> Any:
        if "r" in mode and isinstance(file, (str, os.PathLike)):
            key = os.path.realpath(file)
            counted[key] = counted.get(key, 0) + 1
        return open(file, mode, *a, **kw)

    monkeypatch.setattr(fileio, "open", counting_open, raising=False)
    return counted


def _model(zoo_model_path: Callable[[str], Path], tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    path.write_bytes(zoo_model_path("resnet_projection").read_bytes())
    return path


def test_bench_repeat_reads_the_model_for_its_hash_once(
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    settled: None,
    reads: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    path = _model(zoo_model_path, tmp_path)
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", str(path), "--backend", "ort", "--runs", "2", "--warmup", "1",
        "--repeat", "3", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert file_sha256(path) in out  # the hash recorded is the file's
    assert reads.get(os.path.realpath(path)) == 1, reads


def test_repeated_measures_hash_once_and_a_changed_file_is_hashed_again(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, settled: None, reads: dict[str, int]
) -> None:
    import hashlib

    path = _model(zoo_model_path, tmp_path)
    key = os.path.realpath(path)
    with OrtBackend().open(MeasureOptions(runs=2, warmup=1, dtype="fp32")) as session:
        timings = [session.measure(path) for _ in range(4)]
        first = hashlib.sha256(path.read_bytes()).hexdigest()
        assert {t.model["sha256"] for t in timings if t.model} == {first}
        assert reads[key] == 1, reads
        # the same name, new bytes (another model written over it): read again, a new hash
        other = zoo_model_path("mobilenet_like").read_bytes()
        path.write_bytes(other)
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 1_000_000_000))  # another mtime, in the past
        again = session.measure(path)
        assert again.model["sha256"] == hashlib.sha256(other).hexdigest() != first
        assert reads[key] == 2, reads
        session.measure(path)
        assert reads[key] == 2, reads


def test_same_size_rewrite_and_a_replaced_file_get_new_hashes(
    tmp_path: Path, settled: None, reads: dict[str, int]
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 4096)
    a = file_sha256(path)
    assert file_sha256(path) == a and reads[os.path.realpath(path)] == 1
    # same size, the mtime set back to what it was: the ctime still moves
    st = path.stat()
    path.write_bytes(b"b" * 4096)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    b = file_sha256(path)
    assert b != a
    # another file renamed over it (another inode)
    new = tmp_path / "g.bin"
    new.write_bytes(b"c" * 4096)
    os.replace(new, path)
    c = file_sha256(path)
    assert c not in (a, b)


def test_a_file_changed_just_now_is_read_every_time(tmp_path: Path, reads: dict[str, int]) -> None:
    # rewritten within one timestamp tick, a file can keep its size and times: one changed within
    # SETTLED_NS is never taken from the cache
    path = tmp_path / "fresh.bin"
    path.write_bytes(b"x" * 100)
    for _ in range(3):
        file_sha256(path)
    assert reads[os.path.realpath(path)] == 3
