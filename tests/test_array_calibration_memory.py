""".npy/.npz calibration data is held once, with one piece of a file beside it.

224² rows of a .npy (294 MB for 512) peaked at twice the data while loading: every row taken was
copied out of the file, then stacked into batches while the copy was alive; float64 rows (cast to
the float32 they are fed as) at five times, and an .npz member, read whole, twice. Rows now go
straight into their batches, a piece of the file at a time, as images do."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import deployopt.fidelity as fidelity
from deployopt.fidelity import load_calibration

#: each file is read this many bytes at a time in these tests, so that a piece is small beside the data
PIECE = 256 << 10


@pytest.fixture(autouse=True)
def _small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fidelity, "_READ_CHUNK_BYTES", PIECE, raising=False)


def _peak(load: Callable[[], Any]) -> tuple[Any, int]:
    """What `load` returns, and the most bytes it held at once (numpy's arrays included)."""
    load()  # imports and first-call caches, before measuring
    tracemalloc.start()
    try:
        out = load()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _fed_bytes(calib: fidelity.CalibrationSet) -> int:
    return sum(a.nbytes for s in calib.samples for a in s.values())


def _stacked(rows: np.ndarray, batch: int) -> list[np.ndarray]:
    """The batches the loader is to give: the rows stacked `batch` at a time, as float32."""
    full = len(rows) - len(rows) % batch
    return [rows[i : i + batch].astype(np.float32) for i in range(0, full, batch)]


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_npy_rows_go_straight_into_their_batches(tmp_path: Path, batch: int, dtype: Any) -> None:
    """513 rows of 3×32×32 (6.3 MB as fed): the peak is the batches and a piece of the file, not a
    copy of every row beside the batches (2×; float64 rows 5×, a float64 copy, its stack and the
    float32 cast)."""
    rows = np.random.default_rng(0).standard_normal((513, 3, 32, 32)).astype(dtype)
    np.save(tmp_path / "rows.npy", rows)
    shape = {"x": [batch, 3, 32, 32]}
    calib, peak = _peak(lambda: load_calibration(tmp_path / "rows.npy", shape, count=1000))
    fed = _fed_bytes(calib)
    assert fed == (513 - 513 % batch) * 3 * 32 * 32 * 4
    assert peak < fed + 4 * PIECE * (rows.itemsize // 4) + (1 << 20), f"peak {peak} B for {fed} B fed"
    assert len(calib.samples) == len(_stacked(rows, batch))
    for got, want in zip(calib.samples, _stacked(rows, batch)):
        assert got["x"].dtype == np.float32
        np.testing.assert_array_equal(got["x"], want)


def test_npy_samples_are_cast_a_piece_at_a_time(tmp_path: Path) -> None:
    """N×(input shape) float64 samples: one float32 array of those taken, not a float64 copy of
    them beside their float32 casts (3×)."""
    data = np.random.default_rng(1).standard_normal((140, 2, 3, 32, 32))
    np.save(tmp_path / "s.npy", data)
    calib, peak = _peak(lambda: load_calibration(tmp_path / "s.npy", {"x": [2, 3, 32, 32]}, count=128))
    fed = _fed_bytes(calib)
    assert len(calib) == 128 and fed == 128 * 2 * 3 * 32 * 32 * 4
    assert peak < fed + 4 * PIECE + (1 << 20), f"peak {peak} B for {fed} B fed"
    np.testing.assert_array_equal(np.stack([s["x"] for s in calib.samples]), data[:128].astype(np.float32))


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_members_are_streamed_into_their_batches(tmp_path: Path, save: Callable[..., None]) -> None:
    """An .npz member (stored or compressed) was read whole, then its rows stacked beside it (2×):
    it is streamed now, only the rows taken read, and the member no input takes never opened."""
    rows = np.random.default_rng(2).standard_normal((520, 3, 32, 32)).astype(np.float32)
    save(tmp_path / "d.npz", x=rows, unused=np.zeros((256, 1024), np.float32))
    shape = {"x": [2, 3, 32, 32]}
    calib, peak = _peak(lambda: load_calibration(tmp_path / "d.npz", shape, count=256))
    fed = _fed_bytes(calib)
    assert len(calib) == 256 and fed == 512 * 3 * 32 * 32 * 4
    assert peak < fed + 4 * PIECE + (1 << 20), f"peak {peak} B for {fed} B fed"
    assert len(calib.samples) == len(_stacked(rows[:512], 2))
    for got, want in zip(calib.samples, _stacked(rows[:512], 2)):
        np.testing.assert_array_equal(got["x"], want)


def test_rows_across_files_of_other_types_stack_as_before(tmp_path: Path) -> None:
    """A folder of float16, int64 and float64 rows: held once too, and a batch filled from files of
    different types is the stack of its rows, as numpy promotes them, then floats fed as float32
    and integers as they are: what stacking every row at the end gave."""
    rng = np.random.default_rng(3)
    parts = [
        rng.standard_normal((151, 3, 32, 32)).astype(np.float16),
        rng.integers(-(2**40), 2**40, (50, 3, 32, 32)),
        rng.standard_normal((301, 3, 32, 32)),
    ]
    for i, part in enumerate(parts):
        np.save(tmp_path / f"{i}.npy", part)
    calib, peak = _peak(lambda: load_calibration(tmp_path, {"x": [4, 3, 32, 32]}, count=1000))
    fed = _fed_bytes(calib)
    assert len(calib) == 125  # batches of int64 rows alone stay int64, as numpy stacks them
    assert calib.notices == ["502 rows of input 'x' do not fill batches of 4: the last 2 are left out"]
    assert peak < fed + 8 * PIECE + (1 << 20), f"peak {peak} B for {fed} B fed"
    rows = [r for part in parts for r in part]
    for k, got in enumerate(calib.samples):
        want = np.stack(rows[4 * k : 4 * k + 4])
        want = want if want.dtype.kind == "i" else want.astype(np.float32)
        assert got["x"].dtype == want.dtype
        np.testing.assert_array_equal(got["x"], want)


def test_a_truncated_npz_member_is_refused_though_its_first_rows_are_there(tmp_path: Path) -> None:
    """np.load read a member whole and refused a short one; streamed, only the rows taken are read,
    and a member cut in half gave its first 16 rows without a word (review)."""
    import io
    import zipfile

    from deployopt.errors import DataError

    buf = io.BytesIO()
    np.save(buf, np.arange(100 * 3 * 4, dtype=np.float32).reshape(100, 3, 4))
    raw = buf.getvalue()
    with zipfile.ZipFile(tmp_path / "t.npz", "w") as z:
        z.writestr("x.npy", raw[: len(raw) // 2])
    refused = r"cannot read array file \(x\.npy holds \d+ bytes, its header says \d+\)"
    with pytest.raises(DataError, match=refused):
        load_calibration(tmp_path / "t.npz", {"x": [3, 4]}, count=16)
