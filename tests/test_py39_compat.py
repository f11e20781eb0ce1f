"""Python 3.9 is the oldest the package claims (pyproject's requires-python): nothing in the package,
its tests or its benchmarks may need a newer one. CI runs 3.11 and 3.10 only, and ruff's py39 target
does not flag library calls such as `zip(strict=True)` (3.10), which once broke 7 tests on 3.9;
vermin (the dev extra's) reads every file for them. jetson/runner.py has its own 3.6 check
(test_jetson_runner)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_nothing_needs_a_python_newer_than_39() -> None:
    exe = Path(sys.executable).parent / "vermin"
    vermin = str(exe) if exe.is_file() else shutil.which("vermin")
    if vermin is None:
        pytest.skip("vermin not installed (it belongs in the dev extra)")
    proc = subprocess.run(
        # a fake TensorRT class's `__name__`, which vermin takes for 3.13's property.__name__
        [vermin, "-t=3.9-", "--no-tips", "--violations", "--exclude", "property.__name__",
         "deployopt", "tests", "benchmarks"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


#: builtins a module-level `A | B` may name: such a union is evaluated at import, which needs
#: Python 3.10 (`from __future__ import annotations` covers annotations only), and vermin does not
#: see it (it cannot tell a type from a number there)
_TYPES = {"int", "str", "float", "bytes", "bool", "list", "dict", "tuple", "set", "frozenset", "None", "Path"}


def _names_a_type(node: object) -> bool:
    import ast

    if isinstance(node, ast.Subscript):
        node = node.value
    return (isinstance(node, ast.Name) and node.id in _TYPES) or (
        isinstance(node, ast.Constant) and node.value is None
    )


def test_no_module_level_union_of_types_with_a_bar() -> None:
    """`ShapeEntry = int | tuple[str, int]` (deployopt/batch.py) made `import deployopt.batch` a
    TypeError on Python 3.9; vermin and CI's 3.10/3.11 legs passed it."""
    import ast

    found = []
    for path in sorted((ROOT / "deployopt").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp):
                op = node.value
                if isinstance(op.op, ast.BitOr) and (_names_a_type(op.left) or _names_a_type(op.right)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
