"""Load one of the repository's scripts (benchmarks/, jetson/, examples/) as a module by its path:
they are run as files, not imported from a package, and the tests call their functions."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(path: str | Path, name: str) -> types.ModuleType:
    """A fresh module from `path` (relative to the repository root, or absolute), registered as
    `name` in sys.modules first, as an import would (dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
