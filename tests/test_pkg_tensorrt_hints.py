"""The tensorrt backend's install hints and its CUDA-binding check (bug bash 05).

`pip install tensorrt`, as the hint said, left the next error (no cuda-python) to follow: the hints
name the extra that installs both, and JetPack's package on a Jetson. And `backends` took any `cuda`
namespace (cuda-pathfinder, cuda-core without the bindings) for cuda-python: it said "tensorrt +
cuda-python" where `from cuda.bindings import runtime` fails and the run ended in CUDA_HINT.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from cli_runner import one_error, run_cli
from two_convs import parallel_convs

from deployopt.backends.tensorrt import CUDA_HINT, TRT_HINT, TensorRTBackend, cuda_binding_available

REPO = Path(__file__).resolve().parents[1]


def extras() -> set[str]:
    """The extras pyproject.toml declares (read as text: tomllib is 3.11+)."""
    text = (REPO / "pyproject.toml").read_text()
    block = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=", block, re.M))


def test_the_hints_name_extras_that_exist_and_jetpacks_package() -> None:
    assert "pip install 'deployopt[tensorrt]'" in TRT_HINT
    assert "JetPack" in TRT_HINT and "sudo apt install python3-libnvinfer" in TRT_HINT
    assert "pip install 'deployopt[tensorrt]'" in CUDA_HINT and "'deployopt[pycuda]'" in CUDA_HINT
    named = set(re.findall(r"deployopt\[(\w+)\]", TRT_HINT + CUDA_HINT))
    assert named == {"tensorrt", "pycuda"} and named <= extras()
    assert "\n" not in TRT_HINT + CUDA_HINT


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="TensorRT is installed here")
def test_bench_without_tensorrt_names_the_extra(tmp_path: Path, monkeypatch, capsys) -> None:
    model = tmp_path / "m.onnx"
    onnx.save(parallel_convs("ab", 4, 4), str(model))
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), "--backend", "tensorrt")
    line = one_error(code, err)
    assert line == f"error: backend 'tensorrt' is unavailable: {TRT_HINT}\n"
    assert "pip install 'deployopt[tensorrt]'" in line


@pytest.fixture
def only_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An import path of `tmp_path` alone, with no `cuda`, `pycuda` or `tensorrt` imported: what is
    importable is what the test writes there (the venv has cuda-python's bindings, through torch).
    The modules imported from it are forgotten after."""

    def ours(name: str) -> bool:
        return name.split(".")[0] in ("cuda", "pycuda", "tensorrt")

    before = {name: mod for name, mod in sys.modules.items() if ours(name)}
    for name in before:
        del sys.modules[name]
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    importlib.invalidate_caches()
    try:
        yield tmp_path
    finally:
        for name in [n for n in sys.modules if ours(n)]:
            del sys.modules[name]
        sys.modules.update(before)


def write(root: Path, *files: str) -> None:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")


def test_a_cuda_namespace_without_bindings_is_no_cuda_python(only_path: Path) -> None:
    write(only_path, "cuda/pathfinder/__init__.py", "cuda/core/__init__.py")
    assert cuda_binding_available() is None


@pytest.mark.parametrize(
    ("files", "found"),
    [
        (("cuda/bindings/__init__.py", "cuda/bindings/runtime.py"), "cuda-python"),  # 12.6 and later
        (("cuda/__init__.py", "cuda/cudart.py"), "cuda-python"),  # 11.x to 12.5
        (("pycuda/__init__.py", "pycuda/driver.py"), "pycuda"),
        ((), None),
    ],
)
def test_the_bindings_are_found_by_the_modules_imported(
    only_path: Path, files: tuple[str, ...], found: str | None
) -> None:
    write(only_path, *files)
    assert cuda_binding_available() == found


def test_tensorrt_with_a_cuda_namespace_only_is_unavailable_for_want_of_cuda_python(only_path: Path) -> None:
    """`backends` said `tensorrt │ yes │ tensorrt + cuda-python` here (bug bash 05's stub)."""
    write(only_path, "tensorrt/__init__.py", "cuda/pathfinder/__init__.py")
    assert TensorRTBackend().availability() == (False, CUDA_HINT)
    write(only_path, "cuda/bindings/__init__.py")
    importlib.invalidate_caches()
    for name in [n for n in sys.modules if n.split(".")[0] == "cuda"]:
        del sys.modules[name]  # the namespace found again, with its bindings
    assert TensorRTBackend().availability() == (True, "tensorrt + cuda-python (not run on hardware yet)")
