"""The wave model: implicit GEMM → tiles → thread blocks → waves over the SMs.

This module is the one place wave arithmetic lives; kernel-level analysis of measured grids calls
`wave_count` so measured and predicted waves are computed the same way.
"""

from __future__ import annotations

import math


def wave_count(blocks: int, sms: int, blocks_per_sm: int = 1) -> tuple[int, float]:
    """(waves, tail_fill): waves = ceil(blocks / (SMs × blocks per SM)); tail_fill is the fraction
    of the last wave's slots that hold a block (1.0 = the last wave is full)."""
    if blocks < 1 or sms < 1 or blocks_per_sm < 1:
        raise ValueError("blocks, sms and blocks_per_sm must be positive")
    slots = sms * blocks_per_sm
    waves = math.ceil(blocks / slots)
    tail = blocks - (waves - 1) * slots
    return waves, tail / slots
