"""The sdist carries the package, not half a test suite (bug bash 04).

With no MANIFEST.in, setuptools' default put tests/test*.py in the sdist and nothing else of tests/:
no conftest.py, no helper modules (131 of 213 shipped files imported one: `ModuleNotFoundError: No
module named 'ort_session'`), no tests/data. Shipped whole they would not run either: they read
benchmarks/ (47 MB of recorded results), docs/, calibration_data/, examples/ and ../shared from the
checkout. So MANIFEST.in prunes tests/, and the tests run from a git checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_sdist_has_the_package_and_no_tests(tmp_path: Path) -> None:
    """An sdist built (setuptools, as `python -m build --sdist` does) from a copy of the files it is
    made of, tests/ included: none of tests/ in it; the runner, the target data and the metadata are."""
    # pyproject's build-system pin (the dev extra installs it): older ones refuse the license field
    pytest.importorskip("setuptools", minversion="77")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        if (REPO / name).is_file():  # MANIFEST.in: what the fix added
            shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for folder in ("deployopt", "jetson"):
        shutil.copytree(REPO / folder, src / folder, ignore=ignore)
    (src / "tests" / "data").mkdir(parents=True)
    for name in ("conftest.py", "cli_runner.py", "test_batch.py", Path(__file__).name):
        shutil.copy2(REPO / "tests" / name, src / "tests" / name)
    (src / "tests" / "data" / "h200_conv_trace_heuristic.json").write_text("{}")
    dist = tmp_path / "dist"
    build = f"from setuptools import build_meta as b; print(b.build_sdist({str(dist)!r}))"
    proc = subprocess.run(
        [sys.executable, "-c", build], cwd=src, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sdist = dist / proc.stdout.strip().splitlines()[-1]
    with tarfile.open(sdist) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert [n for n in names if n == "tests" or n.startswith("tests/")] == []
    assert "jetson/runner.py" in names and "pyproject.toml" in names and "PKG-INFO" in names
    assert "deployopt/cli/main.py" in names and "deployopt/targets/data/nano.json" in names
    assert not [n for n in names if n.endswith((".pyc", ".pyo")) or "__pycache__" in n]
