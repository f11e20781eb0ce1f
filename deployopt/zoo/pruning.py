"""Width lists for the benchmark: irregular pruning as the paper does it, and plain rounding."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def random_prune(widths: Sequence[int], seed: int, lo: float = 0.35, hi: float = 0.9) -> list[int]:
    """Keep a uniformly random fraction in [lo, hi] of each width (at least 1 channel).

    This is the irregular pruning of the benchmark (FINDINGS §2): widths end up on no particular
    multiple, which is what makes cuDNN/TensorRT slow on them.
    """
    if not 0.0 < lo <= hi <= 1.0:
        raise ValueError(f"random_prune: need 0 < lo <= hi <= 1, got lo={lo}, hi={hi}")
    rng = np.random.default_rng(seed)
    fractions = rng.uniform(lo, hi, len(widths))
    return [max(1, round(int(w) * float(f))) for w, f in zip(widths, fractions)]


def round_up(widths: Sequence[int], multiple: int = 8) -> list[int]:
    """Each width padded up to the next multiple (the lossless round-up-to-8 baseline)."""
    if multiple < 1:
        raise ValueError(f"round_up: multiple must be >= 1, got {multiple}")
    return [-(-int(w) // multiple) * multiple for w in widths]
