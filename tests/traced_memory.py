"""What Python holds at its peak while a function runs (tracemalloc): the memory tests' bound."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from typing import Any


def traced_peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(fn(), the most bytes Python held at once while it ran, above what it held before)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result, peak
