"""The tree every GPU call ships stays under its 64 MiB limit: a benchmark record of 300 KB or more is
committed gzip-compressed (benchmarks/results/README.md), never as plain JSON, and so is every sweep
in the benchmarks/staircases*/ folders (1052 small files: 17.7 MB plain, 3.9 MB compressed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from deployopt.fileio import read_json

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 300_000  # bytes: a JSON record this large is committed as NAME.json.gz


def _tracked(folder: str) -> list[Path]:
    """The files git tracks under `folder` (present in the working tree)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: which files are tracked is unknown")
    proc = subprocess.run(["git", "ls-files", "-z", "--", folder], cwd=ROOT, capture_output=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout: which files are tracked is unknown")
    return [ROOT / name for name in proc.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_tracked_json_of_300_kb_or_more_under_benchmarks() -> None:
    big = [
        f"{p.relative_to(ROOT)} ({p.stat().st_size} bytes)"
        for p in _tracked("benchmarks")
        if p.suffix == ".json" and p.stat().st_size >= LIMIT
    ]
    assert big == [], f"commit these as NAME.json.gz (`gzip -n -9 FILE`, benchmarks/results/README.md): {big}"


def test_compressed_records_are_reproducible_gzip_of_json() -> None:
    """Each committed NAME.json.gz holds JSON, made with `gzip -n` (no file name, no time stamp
    inside: compressing the same record again gives the same bytes)."""
    packed = [p for p in _tracked("benchmarks") if p.name.endswith(".json.gz")]
    assert packed  # the large optimize records and eval_wave_model*.json are stored so
    for p in packed:
        head = p.read_bytes()[:10]
        assert head[:3] == b"\x1f\x8b\x08", p  # gzip, deflate
        assert not head[3] & 0x08 and head[4:8] == b"\0\0\0\0", f"{p}: compress with gzip -n"
        assert isinstance(read_json(p), dict), p


def test_the_staircase_folders_hold_compressed_sweeps_only() -> None:
    """benchmarks/staircases*/ are read whole (eval_wave_model.load_sweeps, either kind); committed
    plain, they were 17.7 MB of the 64 MiB a GPU call may ship."""
    sweeps = [p for d in ("staircases", "staircases_heuristic", "staircases_all_engines")
              for p in _tracked(f"benchmarks/{d}")]  # fmt: skip
    assert len(sweeps) == 1052
    plain = [str(p.relative_to(ROOT)) for p in sweeps if not p.name.endswith(".json.gz")]
    assert plain == [], f"commit these as NAME.json.gz (`gzip -n -9 FILE`): {plain}"
