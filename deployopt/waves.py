"""The wave model: implicit GEMM → tiles → thread blocks → waves over the SMs.

This module is the one place wave arithmetic lives; kernel-level analysis of measured grids calls
`wave_count` so measured and predicted waves are computed the same way.

The model (docs/wave_model.md has the long form):
  a conv is a GEMM per group: M = N·P·Q rows, N = K/groups columns, depth K = C/groups·R·S;
  the library picks a kernel *family* by channel alignment (the largest power of two dividing K),
  each family offers a few tile shapes; tiles = ceil(M/tm)·ceil(N/tn)·groups; blocks per SM follow
  from the family's threads, registers and shared memory against the SM's limits;
  waves = ceil(tiles / (SMs × blocks per SM));
  latency = fixed + (waves − 1 + floor + (1 − floor)·tail_fill) × (wave_us + tile work / SM rate)
  and the predicted kernel is the fastest allowed (tile, family), as cudnn.benchmark / TensorRT pick
  the fastest measured one. Depthwise convs (groups = C) are no GEMM: they run on direct kernels,
  blocks of 1024 outputs streamed over the SMs (`_evaluate_depthwise`).
It ignores: heuristics beyond alignment, memory-bound layers (bandwidth), split-K, fusion.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from deployopt.errors import DataError, DeployoptError, ModelError, TargetError, range_error
from deployopt.layers import ConvShape

if TYPE_CHECKING:
    from deployopt.targets import Target

DTYPES = ("fp16", "fp32", "int8")
ELEMENT_BYTES = {"fp16": 2, "fp32": 4, "int8": 1}
# Channel multiple below which tensor-core kernels need padding (16-byte vectors per channel run).
VECTOR = {"fp16": 8, "fp32": 4, "int8": 16}


def wave_count(blocks: int, sms: int, blocks_per_sm: int = 1) -> tuple[int, float]:
    """(waves, tail_fill): waves = ceil(blocks / (SMs × blocks per SM)); tail_fill is the fraction
    of the last wave's slots that hold a block (1.0 = the last wave is full)."""
    if blocks < 1 or sms < 1 or blocks_per_sm < 1:
        raise ValueError("blocks, sms and blocks_per_sm must be positive")
    slots = sms * blocks_per_sm
    waves = math.ceil(blocks / slots)
    tail = blocks - (waves - 1) * slots
    return waves, tail / slots


def fill_percent(fraction: float) -> int:
    """A tail fill as a whole percent, halves rounded up: fills are often eighths (3 of 8 SMs), and
    Python's rounding printed 12.5 % as 12 but 37.5 % as 38 (round half to even). A last wave that
    is neither empty nor full is 1 to 99 %: 1 block of 216 slots printed 0 %, 215 of them 100 %."""
    percent = math.floor(100 * fraction + 0.5)
    return min(max(percent, 1), 99) if 0 < fraction < 1 else percent


def pow2_align(n: int, cap: int = 256) -> int:
    """Largest power of two dividing n (capped): what decides which kernel family may run."""
    if n < 1:
        return 1
    return min(n & -n, cap)


@dataclass(frozen=True)
class KernelFamily:
    """Kernels a library may pick when the channel counts are multiples of `min_align`.

    `efficiency` is the family's throughput relative to the fastest one (fitted); threads,
    registers and shared memory per block are read off the kernels cuDNN ran (traces), and give
    blocks per SM through the target's occupancy limits.
    """

    name: str
    min_align: int
    tiles: tuple[tuple[int, int], ...]
    efficiency: float = 1.0
    epilogue_us: float = 0.0  # extra µs per 1000 outputs a tile writes (unaligned stores)
    threads: int = 256
    registers_per_thread: int = 128
    shared_mem_bytes: int = 65536

    def offered(self, align: int) -> bool:
        """Whether a library offers this family for channels aligned to `align`."""
        return align % self.min_align == 0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["tiles"] = [list(t) for t in self.tiles]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> KernelFamily:
        if not isinstance(d, dict):  # families "x" was "dictionary update sequence element #0 …"
            raise ValueError(f"each family must be an object, not {shown_as_json(d)}")
        d = dict(d)
        if not isinstance(d.get("name"), str):  # a null name printed as 'None' in every error
            raise ValueError(f"family name must be a string, not {shown_as_json(d.get('name'))}")
        for key in ("efficiency", "epilogue_us"):  # true ran as 1.0, "1" was a TypeError
            if key in d and not _is_number(d[key]):
                raise ValueError(f"family {d['name']!r}: {key} must be a number, not {shown_as_json(d[key])}")
        tiles = d["tiles"]
        for t in tiles if isinstance(tiles, (list, tuple)) else [tiles]:  # [128] was an unpack traceback
            if not (isinstance(t, (list, tuple)) and len(t) == 2 and all(_whole(x) for x in t)):
                raise ValueError(
                    f"family {d.get('name')!r}: each tile must be [rows, columns], two whole numbers, "
                    f"not {t!r}"
                )
        d["tiles"] = tuple(tuple(int(x) for x in t) for t in tiles)
        if _whole(d.get("min_align")):  # 8.0 aligns as 8 (and is written back as 8); 2.5 is refused later
            d["min_align"] = int(d["min_align"])
        # profiles written before the sm80-small family was dropped carry its size limits
        d.pop("max_rows_depth", None)
        d.pop("min_rows_depth", None)
        return cls(**d)


#: Generous but physical bounds of the model's parameters, and why (the shipped H200 fp16 fit: 5.7 µs
#: fixed, 0.9 µs a wave, 4.5 M MACs/µs an SM, small_tile 7): outside them a hand edit predicted
#: 1e305 µs or Infinity (no JSON), and a small_tile of 1e308 divided by zero.
PARAM_RANGES: dict[str, tuple[float, float, str]] = {
    "fixed_us": (0.0, 1e6, "µs; a second per launch"),
    "wave_us": (0.0, 1e6, "µs; a second per wave"),
    "small_tile": (0.0, 1024.0, "rows and columns of overhead a tile; a tile has at most 1024 a side"),
    "dw_fixed_us": (0.0, 1e6, "µs; a second per launch"),
    "dw_ns_per_output": (0.0, 1e6, "ns; a millisecond per output"),
    "dw_ns_per_tap": (0.0, 1e6, "ns; a millisecond per tap"),
    "macs_per_us_per_sm": (10.0, 1e10, "1 MAC a clock at 10 MHz to a million a clock at 10 GHz"),
}
#: The same for each kernel family (efficiency is relative to the fastest family's 1; fits keep it
#: above 0.02 a family, so 1e-6 leaves room for a chain of them). Threads, registers and shared
#: memory are checked against the target's SM (targets._check_families_fit).
FAMILY_RANGES: dict[str, tuple[float, float, str]] = {
    "efficiency": (1e-6, 1e3, "relative to the fastest family's 1"),
    "epilogue_us": (0.0, 1e6, "µs per 1000 outputs"),
    "tiles": (1, 1024, "rows or columns, each side; cuDNN's are at most 256"),
}


def _is_number(value: Any) -> bool:
    """A JSON number: int or float, not a bool (Python's True is 1, JSON's true is no number)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def shown_as_json(value: Any) -> str:
    """A profile value as its JSON reader sees it, for an error: null, true, the string '5'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return repr(value)


def _whole(value: Any) -> bool:
    """A whole number as JSON gives one (128 or 128.0; not "128", true or 128.5)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, int) or (math.isfinite(value) and value.is_integer())


def _check_range(key: str, value: float, lo: float, hi: float, why: str) -> None:
    """A ValueError naming `key` when `value` is outside [lo, hi] (said in the message, with why)."""
    if message := range_error(key, value, lo, hi, why):
        raise ValueError(message)


def _check_family(fam: KernelFamily) -> None:
    """A ValueError naming the family and key for what no kernel has: no tile, a tile of 1e9 rows, an
    alignment no channel count has (2.5, 48), a block of 0 threads."""
    if not (math.isfinite(fam.efficiency) and fam.efficiency > 0) or not fam.tiles:
        raise ValueError(f"family {fam.name!r}: needs efficiency > 0 and at least one tile")
    align = fam.min_align
    if not _whole(align) or not 1 <= align <= 256 or int(align) & (int(align) - 1):
        # conv_alignment is a power of two up to 256: any other min_align is never offered
        raise ValueError(
            f"family {fam.name!r}: min_align must be a power of two from 1 to 256, not {align!r}"
        )
    if any(x < 1 for t in fam.tiles for x in t):
        raise ValueError(f"family {fam.name!r}: tile sizes must be >= 1")
    counts = {"threads": 1, "registers_per_thread": 0, "shared_mem_bytes": 0}
    for key, least in counts.items():  # threads 0 and shared memory of 1 GB were priced as
        value = getattr(fam, key)  # one block per SM: a kernel that cannot launch
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"family {fam.name!r}: {key} must be a whole number >= {least}, not {value!r}")
    if not (math.isfinite(fam.epilogue_us) and fam.epilogue_us >= 0):  # a cost, as fixed_us
        raise ValueError(
            f"family {fam.name!r}: epilogue_us must be a finite number >= 0, not {fam.epilogue_us!r}"
        )
    values = {
        "efficiency": fam.efficiency,
        "epilogue_us": fam.epilogue_us,
        "tiles": max(x for t in fam.tiles for x in t),
    }
    for key, (lo, hi, why) in FAMILY_RANGES.items():
        try:
            _check_range(key, values[key], lo, hi, why)
        except ValueError as exc:
            raise ValueError(f"family {fam.name!r}: {exc}") from None


@dataclass(frozen=True)
class WaveParams:
    """The model's parameters for one (GPU design, dtype): few, so they transfer across shapes."""

    name: str  # e.g. "h200-fp16 fit" — printed beside every predicted latency
    dtype: str
    fixed_us: float  # launch + prologue that does not scale with work
    macs_per_us_per_sm: float  # multiply-adds one SM retires per µs on the fastest family
    wave_us: float  # per-wave fixed cost (tile prologue/epilogue, pipeline fill)
    tail_floor: float  # share of a full wave's time a nearly empty last wave still costs
    small_tile: float  # per-tile overhead s: tile efficiency = tm·tn/((tm+s)(tn+N_OVERHEAD·s))
    families: tuple[KernelFamily, ...]
    fitted: bool = False
    source: str = ""
    fitted_on: tuple[str, ...] = field(default=(), compare=False)
    # Depthwise convs (groups = C) are not GEMMs: cuDNN runs them on direct kernels that stream the
    # tensor, DW_OUTPUTS_PER_BLOCK outputs a block. µs = dw_fixed_us + the busiest SM's blocks ×
    # DW_OUTPUTS_PER_BLOCK × (dw_ns_per_output + dw_ns_per_tap · R·S) / 1000 (docs/wave_model.md).
    dw_fixed_us: float = 5.0
    dw_ns_per_output: float = 0.1
    dw_ns_per_tap: float = 0.02
    dw_source: str = "generic start values, not fitted"

    def describe(self) -> str:
        how = "fitted" if self.fitted else "default, not calibrated on hardware"
        return f"wave model '{self.name}' ({how})"

    def source_for(self, depthwise: bool) -> str:
        """Where the terms that price a conv come from: a depthwise conv is priced by the depthwise
        terms (`dw_source`), which may be fitted elsewhere than the GEMM terms (`source`)."""
        return self.dw_source if depthwise else self.source

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "fixed_us": self.fixed_us,
            "macs_per_us_per_sm": self.macs_per_us_per_sm,
            "wave_us": self.wave_us,
            "tail_floor": self.tail_floor,
            "small_tile": self.small_tile,
            "families": [f.to_json() for f in self.families],
            "fitted": self.fitted,
            "source": self.source,
            "fitted_on": list(self.fitted_on),
            "dw_fixed_us": self.dw_fixed_us,
            "dw_ns_per_output": self.dw_ns_per_output,
            "dw_ns_per_tap": self.dw_ns_per_tap,
            "dw_source": self.dw_source,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WaveParams:
        """Parse a profile's params; a value the model cannot predict with (a throughput of 0 divides
        by it, a negative cost or NaN predicts nonsense, a wave of 1e308 µs predicts Infinity, which
        is no JSON) is a ValueError naming the key. Bounds: PARAM_RANGES, FAMILY_RANGES."""
        params = cls._from_json(d)
        for key in _NON_NEGATIVE:
            value = getattr(params, key)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{key} must be a finite number >= 0, not {value!r}")
        for key in ("fixed_us", "dw_fixed_us"):  # size classes are multiples of it: 0 divided by zero
            if getattr(params, key) == 0:
                raise ValueError(f"{key} must be above 0 (every launch costs something), not 0")
        if params.tail_floor > 1:  # a share of a full wave: above 1 an emptier last wave cost more
            raise ValueError(
                f"tail_floor must be a share of a full wave's time, 0 to 1, not {params.tail_floor!r}"
            )
        if not (math.isfinite(params.macs_per_us_per_sm) and params.macs_per_us_per_sm > 0):
            raise ValueError(
                f"macs_per_us_per_sm must be a finite number > 0, not {params.macs_per_us_per_sm!r}"
            )
        for key, (lo, hi, why) in PARAM_RANGES.items():
            _check_range(key, getattr(params, key), lo, hi, why)
        if not params.families:
            raise ValueError("families must name at least one kernel family")
        for fam in params.families:
            _check_family(fam)
        if not any(fam.min_align == 1 for fam in params.families):  # was a ValueError traceback at K = 17
            raise ValueError(
                "families must include one with min_align 1 (the default 'padded' one): a conv whose "
                "output channels are odd has no other kernel to run"
            )
        return params

    @classmethod
    def _from_json(cls, d: dict[str, Any]) -> WaveParams:
        """Strict JSON types, so a hand edit is refused rather than coerced: float() took
        "fixed_us": true as 1.0 and "5" as 5.0, bool("false") was True, str(None) named a fit 'None'."""
        if not isinstance(d, dict):
            raise ValueError(f"params must be an object, not {shown_as_json(d)}")

        def number(key: str, default: float | None = None) -> float:
            value = d[key] if default is None else d.get(key, default)
            if not _is_number(value):
                raise ValueError(
                    f"{key} must be {_NUMBER_NEED.get(key, 'a number')}, not {shown_as_json(value)}"
                )
            return float(value)

        def text(key: str, default: str | None = None) -> str:
            value = d[key] if default is None else d.get(key, default)
            if not isinstance(value, str):
                raise ValueError(f"{key} must be a string, not {shown_as_json(value)}")
            return value

        fitted = d.get("fitted", False)
        if not isinstance(fitted, bool):
            raise ValueError(f"fitted must be true or false, not {shown_as_json(fitted)}")
        fitted_on = d.get("fitted_on", [])
        if not (isinstance(fitted_on, list) and all(isinstance(x, str) for x in fitted_on)):
            # "abc" was three sweep ids, 'a', 'b' and 'c'
            raise ValueError(
                f"fitted_on must be an array of sweep ids (strings), not {shown_as_json(fitted_on)}"
            )
        families = d["families"]
        if not isinstance(families, list):
            raise ValueError(f"families must be an array of kernel families, not {shown_as_json(families)}")
        return cls(
            name=text("name"),
            dtype=text("dtype"),
            fixed_us=number("fixed_us"),
            macs_per_us_per_sm=number("macs_per_us_per_sm"),
            wave_us=number("wave_us"),
            tail_floor=number("tail_floor"),
            small_tile=number("small_tile", 0.0),
            families=tuple(KernelFamily.from_json(f) for f in families),
            fitted=fitted,
            source=text("source", ""),
            fitted_on=tuple(fitted_on),
            # profiles written before the depthwise path keep its start values
            dw_fixed_us=number("dw_fixed_us", cls.dw_fixed_us),
            dw_ns_per_output=number("dw_ns_per_output", cls.dw_ns_per_output),
            dw_ns_per_tap=number("dw_ns_per_tap", cls.dw_ns_per_tap),
            dw_source=text("dw_source", cls.dw_source),
        )


#: What each number of a profile's params must be, as the range checks say it (a type error and a
#: value error of one key read alike).
_NON_NEGATIVE = (
    "fixed_us",
    "wave_us",
    "tail_floor",
    "small_tile",
    "dw_fixed_us",
    "dw_ns_per_output",
    "dw_ns_per_tap",
)
_NUMBER_NEED = {
    **{key: "a finite number >= 0" for key in _NON_NEGATIVE},
    "macs_per_us_per_sm": "a finite number > 0",
}


# Dense multiply-adds per clock per SM, by (CC, dtype): the tensor-core (or CUDA-core) peak that
# per-SM throughput ratios between GPUs come from. fp32 on CC >= 8.0 is TF32 (cuDNN's default).
PEAK_MACS_PER_CLK = {
    (5, 3): {"fp32": 128, "fp16": 256, "int8": 256},
    (6, 1): {"fp32": 128, "fp16": 128, "int8": 512},
    (6, 2): {"fp32": 128, "fp16": 256, "int8": 256},
    (7, 2): {"fp32": 64, "fp16": 512, "int8": 1024},
    (7, 5): {"fp32": 64, "fp16": 512, "int8": 1024},
    (8, 0): {"fp32": 512, "fp16": 1024, "int8": 2048},
    (8, 7): {"fp32": 512, "fp16": 1024, "int8": 2048},
    (9, 0): {"fp32": 1024, "fp16": 2048, "int8": 4096},
}
REFERENCE_CC = (9, 0)  # the design our shipped fit was measured on
REFERENCE_CLOCK_MHZ = 1980.0


def peak_cc(cc: tuple[int, int]) -> tuple[int, int]:
    """The CC whose PEAK_MACS_PER_CLK row stands for `cc`: its own, else the nearest known one below
    it (the oldest known for an older GPU). default_params says when it is another CC's."""
    cc = (int(cc[0]), int(cc[1]))
    if cc in PEAK_MACS_PER_CLK:
        return cc
    known = sorted(k for k in PEAK_MACS_PER_CLK if k <= cc) or [min(PEAK_MACS_PER_CLK)]
    return known[-1]


def _peak(cc: tuple[int, int], dtype: str) -> int:
    return PEAK_MACS_PER_CLK[peak_cc(cc)][dtype]


def _borrowed_note(cc: tuple[int, int]) -> str:
    """'; CC 12.0 is not in the peak table: CC 9.0's peak and kernel tiles are used' ('' for a known
    CC): a GPU newer or older than the tables is predicted as another design, and says so."""
    used = peak_cc(cc)
    if used == tuple(cc):
        return ""
    what = "peak and kernel tiles are" if tuple(cc) > max(PEAK_MACS_PER_CLK) else "peak is"
    return f"; CC {cc[0]}.{cc[1]} is not in the peak table: CC {used[0]}.{used[1]}'s {what} used"


# Hopper implicit-GEMM kernels cuDNN 9 ran in the H200 sweeps (`sm90_xmma_fprop_implicit_gemm_...
# _tilesizeMxNxK`): one 384-thread block per SM with ~226 KB of shared memory, persistent (the grid
# is at most one block per SM and loops over tiles). Their tiles (M × N) also include 64×192, 128×192, 256×64,
# 256×96 and 64×256; the model keeps the four that cover the others' staircases (with all nine the
# fit chased noise and agreement fell from 74 % to 66 %: docs/wave_model.md).
SM90_TILES = ((128, 128), (128, 64), (64, 128), (64, 64))
# TF32 (fp32) sweeps also ran 64×32 (K = 16…368, 32 points), 256×32 (12 of the 52 points with
# K = 16 or 32) and 64×192 widely; keeping the three raised fp32 agreement and lowered its regret
# in every split (docs/wave_model.md). In fp16 none of the extra tiles helped held-out shapes.
SM90_TF32_TILES = (*SM90_TILES, (64, 32), (64, 192), (256, 32))
# Ampere-style tensor-core kernels (sm80_xmma / CUTLASS 2.x): 128-256 threads, 40-80 KB per block.
SM80_TILES = ((128, 128), (128, 64), (64, 128), (64, 64))
# Channel multiple that unlocks the fastest kernels, fitted per dtype on the H200 sweeps by
# agreement/regret on the training half (benchmarks/eval_wave_model.py): 64 in fp16, 32 in TF32.
FAST_ALIGN = {"fp16": 64, "fp32": 32, "int8": 64}
# A middle family between the fast and the vector-aligned one, where the sweeps supported it: in
# fp16, widths that are multiples of 32 (not 64) are more often faster than their neighbours ≡ 16
# mod 32 than slower (8/16 SMs: 17 % vs 9 % of the pairs into them step down / up by > 8 %, and the
# other way round 6 % vs 18 %), so they get their own fitted efficiency and epilogue. In TF32 a
# family at 16 changed no prediction, so it has none (docs/wave_model.md).
MID_ALIGN: dict[str, int] = {"fp16": 32}
# Narrow-N tiles cost more per MAC than narrow-M ones (each tile column re-reads the input rows
# and writes its own output channels): tile efficiency = tm·tn / ((tm + s)(tn + N_OVERHEAD·s)).
# Fitted per dtype on the 8 shapes of the first sweep round it came out 2.1 (fp16) and 2.4 (TF32);
# fixed at 2 it raised agreement on the 22 shapes of both rounds in both dtypes (docs/wave_model.md).
N_OVERHEAD = 2.0


def _default_families(cc: tuple[int, int], dtype: str) -> tuple[KernelFamily, ...]:
    """Kernel families before any fit: channel counts that are multiples of FAST_ALIGN get the fast
    tensor-core kernels, multiples of the vector width slower ones, anything else a padded path."""
    vec = VECTOR[dtype]
    cc = tuple(cc)
    tensor_cores = cc >= (7, 0) and not (dtype == "fp32" and cc < (8, 0))
    if not tensor_cores:
        simt = ((128, 128), (128, 64), (64, 64), (64, 32))
        return (KernelFamily("simt", 1, simt, threads=256, registers_per_thread=128, shared_mem_bytes=32768),)
    if cc >= (9, 0):
        tiles = SM90_TF32_TILES if dtype == "fp32" else SM90_TILES
        threads, regs, smem = 384, 168, 231424
    else:
        # Volta / Turing SMs hold 64-96 KB: their kernels' blocks fit in 64 KB (a T4 SM has 64 KB in
        # all, so 72 KB was a block that could never run; every cc 7.x prediction is unchanged: one
        # such block per SM either way)
        tiles, threads, regs, smem = SM80_TILES, 256, 128, 73728 if cc >= (8, 0) else 65536
    occupancy = {"threads": threads, "registers_per_thread": regs, "shared_mem_bytes": smem}
    mid = [MID_ALIGN[dtype]] if dtype in MID_ALIGN else []
    return (
        KernelFamily(f"tc-aligned{FAST_ALIGN[dtype]}", FAST_ALIGN[dtype], tiles, 1.0, **occupancy),
        *(KernelFamily(f"tc-aligned{a}", a, tiles, 0.95, 0.0, **occupancy) for a in mid),
        KernelFamily(f"tc-aligned{vec}", vec, tiles, 0.95, 0.0, **occupancy),
        KernelFamily("padded", 1, tiles, 0.5, 0.1, **occupancy),
    )


def _carry_efficiencies(families: tuple[KernelFamily, ...], ref: WaveParams) -> tuple[KernelFamily, ...]:
    """Another design's tiles and occupancy with the reference fit's family efficiencies (families
    matched by name)."""
    by_name = {r.name: r for r in ref.families}
    return tuple(
        replace(f, efficiency=by_name[f.name].efficiency, epilogue_us=by_name[f.name].epilogue_us)
        if f.name in by_name
        else f
        for f in families
    )


@functools.lru_cache(maxsize=256)
def default_params(cc: tuple[int, int], dtype: str, clock_mhz: float) -> WaveParams:
    """Parameters for a GPU with no fit of its own: the reference fit (H200, same dtype) scaled by
    per-SM peak throughput × clock. Not calibrated on that hardware — docs/wave_model.md says so.
    Cached: `predict` asks for them on every call, and they come from a file."""
    from deployopt.targets import FITTED_DIR  # lazy: targets imports this module

    ref: WaveParams | None = None
    borrowed = False  # INT8 from the fp16 fit: its families align to fp16's 8, not INT8's 16 channels
    basis = f"the H200 {dtype} fit"
    path = FITTED_DIR / "h200.json"
    if path.exists():
        import json

        doc = json.loads(path.read_text())
        if dtype in doc.get("params", {}):
            ref = WaveParams.from_json(doc["params"][dtype])
        elif dtype == "int8" and "fp16" in doc.get("params", {}):
            ref = WaveParams.from_json(doc["params"]["fp16"])
            ref = replace(ref, macs_per_us_per_sm=ref.macs_per_us_per_sm * 2)
            basis = "the H200 fp16 fit at twice its rate (no INT8 fit exists)"
            borrowed = True
    scale = (_peak(cc, dtype) * clock_mhz) / (_peak(REFERENCE_CC, dtype) * REFERENCE_CLOCK_MHZ)
    slow = REFERENCE_CLOCK_MHZ / max(clock_mhz, 1.0)
    name = f"cc{cc[0]}.{cc[1]}-{dtype} default"
    source = (
        f"derived from {basis} scaled by per-SM peak MACs/clock × clock "
        f"({_peak(cc, dtype)} vs {_peak(REFERENCE_CC, dtype)} MACs/clk/SM; {clock_mhz:g} vs "
        f"{REFERENCE_CLOCK_MHZ:g} MHz{_borrowed_note(cc)})"  # describe() says it is not calibrated
    )
    same_design = tuple(cc) == REFERENCE_CC
    if ref is not None:
        return replace(
            ref,
            name=name,
            dtype=dtype,  # INT8 starts from the fp16 fit: it must not keep that label
            fixed_us=ref.fixed_us * (1.0 if same_design else max(1.0, slow**0.5)),
            dw_fixed_us=ref.dw_fixed_us * (1.0 if same_design else max(1.0, slow**0.5)),
            # depthwise kernels stream memory on CUDA cores: scaled by clock alone (no tensor cores)
            dw_ns_per_output=ref.dw_ns_per_output * slow,
            dw_ns_per_tap=ref.dw_ns_per_tap * slow,
            macs_per_us_per_sm=ref.macs_per_us_per_sm * scale,
            wave_us=ref.wave_us * slow,
            # INT8 on the H200's own design too takes INT8's families (a 16-channel vector): with
            # the fp16 fit's, 24 channels were aligned on an H100 and padded on a T4
            families=ref.families
            if same_design and not borrowed
            else _carry_efficiencies(_default_families(cc, dtype), ref),
            fitted=False,
            source=source,
            fitted_on=(),
            # the reference's own label ("fitted on 864 measured depthwise points") read as if this
            # GPU's depthwise convs had been measured
            dw_source=(
                f"derived from the H200 {ref.dtype} fit's depthwise terms ({ref.dw_source}"
                f"{'; no INT8 fit exists' if borrowed else ''}) scaled by clock ({clock_mhz:g} vs "
                f"{REFERENCE_CLOCK_MHZ:g} MHz); not measured on this GPU"
            ),
        )
    return generic_params(cc, dtype, clock_mhz)


def generic_params(cc: tuple[int, int], dtype: str, clock_mhz: float) -> WaveParams:
    """Start values that depend on no fit (half of peak throughput, round overheads): where every
    fit starts, so the shipped fit is reproducible from the sweeps alone."""
    peak = _peak(cc, dtype) * clock_mhz  # MACs per µs per SM
    return WaveParams(
        name=f"cc{cc[0]}.{cc[1]}-{dtype} generic",
        dtype=dtype,
        fixed_us=5.0,
        macs_per_us_per_sm=0.5 * peak,
        wave_us=1.0,
        tail_floor=0.8,
        small_tile=16.0,
        families=_default_families(cc, dtype),
        fitted=False,
        source=f"generic start values (half of peak {_peak(cc, dtype)} MACs/clk/SM); not calibrated",
    )


@dataclass(frozen=True)
class WavePrediction:
    """What the model says about one conv on one target: the kernel it expects and its waves."""

    tile: tuple[int, int]
    blocks: int
    blocks_per_sm: int
    waves: int
    tail_fill: float
    predicted_us: float
    aligned: bool  # K fills its last tile column and runs on the fastest kernel family
    family: str = ""
    gemm: tuple[int, int, int] = (0, 0, 0)
    out_channels: int = 0
    predictor: str = ""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["tile"] = list(self.tile)
        d["gemm"] = list(self.gemm)
        return d


def blocks_per_sm(family: KernelFamily, target: Target) -> int:
    """Occupancy: how many of the family's blocks fit on one SM at once (at least one)."""
    limits = [target.max_blocks_per_sm, target.max_threads_per_sm // max(family.threads, 1)]
    if family.shared_mem_bytes:
        limits.append(target.shared_mem_per_sm // family.shared_mem_bytes)
    regs = family.registers_per_thread * family.threads
    if regs:
        limits.append(target.registers_per_sm // regs)
    return max(1, min(limits))


def conv_alignment(shape: ConvShape) -> int:
    """The alignment kernel families are offered by: the power of two dividing the output channels
    per group (GEMM N). Input channels only gate vector loads: below 8 (an RGB stem) they limit it.

    Why not the input side too: on the H200, shape af (C = 96) ran sm90 kernels at K ≡ 0 and 48
    mod 64 and slower CUTLASS ones at K ≡ 16 and 32 (docs/wave_model_evaluation.md, round four), so the
    fast family follows K's alignment whatever C's is, once C allows vector loads.
    """
    a_k = pow2_align(shape.k // shape.groups)
    a_c = pow2_align(shape.c // shape.groups)
    return a_k if a_c >= 8 else min(a_k, a_c)


def _as_target(target: Target | str | os.PathLike[str]) -> Target:
    """`target`, or the Target a name or profile path gives (`get_target`), as `analyze` takes the
    LoadedModel: predict(shape, 'nano') was an AttributeError on the str, deep inside."""
    if isinstance(target, (str, os.PathLike)):
        from deployopt.targets import get_target

        return get_target(target)
    if not hasattr(target, "wave_params"):
        raise TargetError(
            "expected a Target (deployopt.targets.get_target('nano')) or a target's name, "
            f"not a {type(target).__name__}"
        )
    return target


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        from deployopt.errors import DeployoptError

        raise DeployoptError(f"unknown dtype {dtype!r}; choose one of: {', '.join(DTYPES)}")


def _evaluate(shape: ConvShape, target: Target, params: WaveParams, sms: int | None = None) -> WavePrediction:
    """One conv's prediction, for `predict`, `staircase` and `analyze`'s wave columns. One that is no
    finite number is a one-line TargetError: `--json` wrote Infinity, which is no JSON. A profile's
    params are checked at load (PARAM_RANGES); this catches parameters made in code."""
    if not all(d > 0 for d in shape.gemm):  # wave_count refused 0 blocks with a ValueError
        raise ModelError(
            f"a zero-size conv ({shape.signature()}: no output channels, or a kernel larger than its padded "
            "input): nothing to predict"
        )
    sms = target.sms if sms is None else sms
    if shape.is_depthwise:
        pred = _evaluate_depthwise(shape, target, params, sms)
    else:
        pred = _evaluate_gemm(shape, target, params, sms)
    if not math.isfinite(pred.predicted_us):
        raise TargetError(
            f"{target.name}: the wave model '{params.name}' predicts {pred.predicted_us} µs for a conv "
            f"with {shape.k} output channels: its parameters are out of any GPU's range"
        )
    return pred


def _evaluate_gemm(shape: ConvShape, target: Target, params: WaveParams, sms: int) -> WavePrediction:
    """A conv as an implicit GEMM per group: the fastest (family, tile) allowed."""
    m, n, kdepth = shape.gemm
    align = conv_alignment(shape)
    best: WavePrediction | None = None
    for fam in params.families:
        if not fam.offered(align):
            continue
        bps = blocks_per_sm(fam, target)
        for tm, tn in fam.tiles:
            tiles = math.ceil(m / tm) * math.ceil(n / tn) * shape.groups
            waves, tail = wave_count(tiles, sms, bps)
            s = params.small_tile
            tile_eff = (tm * tn) / ((tm + s) * (tn + N_OVERHEAD * s))
            work_us = (
                bps
                * tm
                * tn
                * (
                    kdepth / (params.macs_per_us_per_sm * fam.efficiency * tile_eff)
                    + fam.epilogue_us / 1000.0
                )
            )
            eff_waves = waves - 1 + params.tail_floor + (1 - params.tail_floor) * tail
            us = params.fixed_us + eff_waves * (params.wave_us + work_us)
            if best is None or us < best.predicted_us - 1e-12:
                best = WavePrediction(
                    tile=(tm, tn),
                    blocks=tiles,
                    blocks_per_sm=bps,
                    waves=waves,
                    tail_fill=tail,
                    predicted_us=us,
                    aligned=(n % tn == 0 and fam is params.families[0]),
                    family=fam.name,
                    gemm=(m, n, kdepth),
                    out_channels=shape.k,
                    predictor=params.name,
                )
    if best is None:
        raise ValueError(f"no kernel family of {params.name} accepts alignment {align}")
    return best


# cuDNN 9's depthwise kernel on the H200 (`conv2d_c1_k1_nhwc`, traced in every fp32 and most fp16
# depthwise sweeps, benchmarks/results/h200_depthwise/): 256 threads, grid = ceil(N·P·Q·K / 1024).
DW_OUTPUTS_PER_BLOCK = 1024
DW_THREADS = 256
DW_FAMILY = KernelFamily(
    "depthwise-direct", 1, (), threads=DW_THREADS, registers_per_thread=32, shared_mem_bytes=0
)


def _depthwise_work(shape: ConvShape, sms: int) -> tuple[int, int]:
    """(blocks, the busiest SM's blocks): a depthwise kernel's blocks stream memory, so blocks
    sharing an SM share its throughput and the busiest SM sets the time."""
    outputs = shape.n * shape.p * shape.q * shape.k
    blocks = math.ceil(outputs / DW_OUTPUTS_PER_BLOCK)
    return blocks, math.ceil(blocks / sms)


def _evaluate_depthwise(shape: ConvShape, target: Target, params: WaveParams, sms: int) -> WavePrediction:
    """Depthwise convs are no GEMM (one output channel per group): blocks of outputs over the SMs,
    time linear in the busiest SM's share, steps of `sms` blocks (fine-grained: a tail costs what
    it holds). As GEMMs they were predicted a median 23× too slow on H200 sweeps (docs/wave_model.md)."""
    blocks, per_sm = _depthwise_work(shape, sms)
    bps = blocks_per_sm(DW_FAMILY, target)
    waves, tail = wave_count(blocks, sms, bps)
    per_output_ns = params.dw_ns_per_output + params.dw_ns_per_tap * shape.r * shape.s
    us = params.dw_fixed_us + per_sm * DW_OUTPUTS_PER_BLOCK * per_output_ns / 1000.0
    return WavePrediction(
        tile=(DW_OUTPUTS_PER_BLOCK, 1),
        blocks=blocks,
        blocks_per_sm=bps,
        waves=waves,
        tail_fill=tail,
        predicted_us=us,
        aligned=True,
        family=DW_FAMILY.name,
        gemm=shape.gemm,
        out_channels=shape.k,
        predictor=params.name,
    )


def _check_points(points: list[dict[str, Any]]) -> None:
    """A DataError naming the point (its "id", else its index) that has no shape or no positive,
    finite "measured_us": a failed timing's 0 or NaN reached scipy as "Residuals are not finite in
    the initial point" (after numpy's divide-by-zero warning), a missing one as a KeyError."""
    if isinstance(points, (str, bytes)) or not hasattr(points, "__iter__"):
        raise DataError(f"fit takes a list of measured points, not a {type(points).__name__}")
    for i, p in enumerate(points):
        if not isinstance(p, Mapping):
            raise DataError(f"point {i} is a {type(p).__name__}, not a dict with 'shape' and 'measured_us'")
        label = f"point {p['id']!r}" if p.get("id") is not None else f"point {i}"
        for key in ("shape", "measured_us"):
            if key not in p:
                raise DataError(f"{label} has no {key!r}")
        us = p["measured_us"]
        try:
            value = float(us)
        except (TypeError, ValueError):
            value = math.nan
        if isinstance(us, bool) or not (math.isfinite(value) and value > 0):
            raise DataError(
                f"{label}: measured_us {us!r} is no latency (a finite number of µs above 0; a failed "
                "timing?): leave the point out"
            )


def _point_shapes(points: list[dict[str, Any]]) -> list[ConvShape]:
    """Each point's shape, given as a ConvShape or its JSON."""
    return [s if isinstance(s, ConvShape) else ConvShape.from_json(s) for s in (p["shape"] for p in points)]


def fit_depthwise(points: list[dict[str, Any]], target: Target, params: WaveParams) -> WaveParams:
    """`params` with the depthwise terms fitted to measured depthwise points (non-negative least
    squares on relative error; the model is linear in its three terms). `points` as for `fit`."""
    import numpy as np
    from scipy.optimize import nnls

    _check_points(points)
    shapes = _point_shapes(points)
    if not all(s.is_depthwise for s in shapes):
        raise ValueError("fit_depthwise takes depthwise convs only")
    if len(points) < 3:
        from deployopt.errors import DeployoptError

        raise DeployoptError(f"a depthwise fit needs at least 3 measured points, got {len(points)}")
    y = np.array([float(p["measured_us"]) for p in points])
    rows = []
    for shape, p in zip(shapes, points):
        per_sm = _depthwise_work(shape, int(p.get("sms") or target.sms))[1] * DW_OUTPUTS_PER_BLOCK / 1000.0
        rows.append([1.0, per_sm, per_sm * shape.r * shape.s])
    a = np.array(rows) / y[:, None]  # relative error: small layers count as much as large ones
    (fixed, per_out, per_tap), _ = nnls(a, np.ones(len(y)))
    ids = sorted({str(p["id"]) for p in points if "id" in p})
    return replace(
        params,
        dw_fixed_us=float(fixed),
        dw_ns_per_output=float(per_out),
        dw_ns_per_tap=float(per_tap),
        dw_source=f"fitted on {len(points)} measured depthwise points ({len(ids)} sweeps)",
    )


def predict(shape: ConvShape, target: Target | str, dtype: str = "fp16") -> WavePrediction:
    """Predicted kernel, blocks, waves, tail fill and latency of one conv on `target` (a Target,
    or a name get_target resolves)."""
    _check_dtype(dtype)
    target = _as_target(target)
    return _evaluate(shape, target, target.wave_params(dtype))


def staircase(
    shape: ConvShape, target: Target | str, dtype: str, out_channels: list[int]
) -> list[WavePrediction]:
    """The predicted per-layer staircase: one prediction per output-channel count."""
    _check_dtype(dtype)
    target = _as_target(target)
    params = target.wave_params(dtype)
    return [_evaluate(shape.with_out_channels(k), target, params) for k in out_channels]


#: which width `aligned_widths` varies: the conv's output channels (K) or its input channels (C)
ROLES = ("out", "in")


def _vary(shape: ConvShape, width: int, role: str) -> ConvShape:
    if role == "out":
        return shape.with_out_channels(width)
    if role == "in":
        return shape.with_channels(c=width)
    raise DeployoptError(f"role must be 'out' or 'in', not {role!r}")


def aligned_widths(
    shape: ConvShape, target: Target | str, dtype: str, width: int, role: str = "out"
) -> tuple[int | None, int | None]:
    """Nearest wave-aligned widths: (largest one below `width`, smallest one at or above it).

    A width is wave-aligned when it ends a predicted step: one vector more (8 channels in fp16)
    costs more. Candidates are multiples of the dtype's vector; the search spans width/2 … 2·width.
    Use `predict` on the returned widths for the latency change.
    """
    _check_dtype(dtype)
    if role not in ROLES:  # was a ValueError from the first width tried
        raise DeployoptError(f"role must be 'out' or 'in', not {role!r}")
    target = _as_target(target)
    params = target.wave_params(dtype)
    vec = VECTOR[dtype]
    if shape.is_depthwise and role == "in":
        role = "out"

    def us(w: int) -> float:
        return _evaluate(_vary(shape, w, role), target, params).predicted_us

    return _step_ends(us, width, vec)


def _step_ends(us_of: Any, width: int, vec: int) -> tuple[int | None, int | None]:
    """(largest step end below `width` and no slower than it, smallest at or above it) among
    multiples of `vec` in width/2 … 2·width, the span reaching up to one vector at least
    (`search_span`); a step end is a width one vector below a more expensive one. Where a side
    has none but `width` is off the vector and its nearest multiple on that side is predicted
    cheaper (an unaligned width's slower kernel), that multiple: a pruned 11 in a flat span was
    'flat 8–22 (no step)', though 8 and 16 were each predicted 16 % faster."""
    cache: dict[int, float] = {}

    def us(w: int) -> float:
        if w not in cache:
            cache[w] = us_of(w)
        return cache[w]

    def is_end(w: int) -> bool:
        return us(w + vec) > us(w) * (1 + 1e-9)

    below = None
    w = (width - 1) // vec * vec
    while w >= search_span(width, vec)[0]:
        # a step end that costs more than `width` is no width to trim to: per conv group of a
        # grouped conv, 20 of 24 channels ends a step of the unaligned kernel, 53 % slower than 24
        if is_end(w) and us(w) <= us(width) * (1 + 1e-9):
            below = w
            break
        w -= vec
    above = None
    w = -(-width // vec) * vec
    while w <= search_span(width, vec)[1]:
        if is_end(w):
            above = w
            break
        w += vec
    if width % vec:
        down, up = width // vec * vec, -(-width // vec) * vec
        if below is None and down >= max(vec, width // 2) and us(down) < us(width) * (1 - 1e-9):
            below = down
        if above is None and us(up) < us(width) * (1 - 1e-9):
            above = up
    return below, above


def search_span(width: int, vec: int) -> tuple[int, int]:
    """(lowest, highest) width `_step_ends` may answer for `width`: width/2 … 2·width, each end at
    least one vector. A width under half a vector (1–3 channels in fp16) had an empty span, shown
    as 'flat 8–2 (no step)': now it reaches up to the first vector, the nearest aligned width."""
    return max(vec, width // 2), max(2 * width, vec)


class _CandidateGrid:
    """Every (family, tile) candidate of every point, precomputed once, so that a fit evaluates the
    model for all points in a few numpy operations instead of one `_evaluate` call per point (the
    same formula; `predicted_us` equals `_evaluate(...).predicted_us`, which tests check)."""

    def __init__(
        self, shapes: list[ConvShape], sms: list[int], target: Target, families: tuple[KernelFamily, ...]
    ) -> None:
        import numpy as np

        rows: list[list[tuple[int, int, int, int, float, int, int]]] = []
        for shape, n_sms in zip(shapes, sms):
            m, n, kdepth = shape.gemm
            align = conv_alignment(shape)
            cands = []
            for fi, fam in enumerate(families):
                if not fam.offered(align):
                    continue
                bps = blocks_per_sm(fam, target)
                for tm, tn in fam.tiles:
                    tiles = math.ceil(m / tm) * math.ceil(n / tn) * shape.groups
                    waves, tail = wave_count(tiles, n_sms, bps)
                    cands.append((fi, tm, tn, waves, tail, bps, kdepth))
            if not cands:
                raise ValueError(f"no kernel family accepts alignment {align}")
            rows.append(cands)
        width = max(len(r) for r in rows)
        pad = [r + [r[0]] * (width - len(r)) for r in rows]  # repeats never change the minimum
        arr = np.array(pad, dtype=float)  # points × candidates × 7
        self.family = arr[..., 0].astype(int)
        self.tm, self.tn, self.waves, self.tail, self.bps, self.depth = (arr[..., i] for i in range(1, 7))

    def predicted_us(self, params: WaveParams) -> Any:
        import numpy as np

        eff = np.array([f.efficiency for f in params.families])[self.family]
        epi = np.array([f.epilogue_us for f in params.families])[self.family]
        s = params.small_tile
        tile_eff = (self.tm * self.tn) / ((self.tm + s) * (self.tn + N_OVERHEAD * s))
        work = (
            self.bps
            * self.tm
            * self.tn
            * (self.depth / (params.macs_per_us_per_sm * eff * tile_eff) + epi / 1000.0)
        )
        eff_waves = self.waves - 1 + params.tail_floor + (1 - params.tail_floor) * self.tail
        return (params.fixed_us + eff_waves * (params.wave_us + work)).min(axis=1)


def fit(
    points: list[dict[str, Any]],
    target: Target | str,
    dtype: str,
    name: str | None = None,
    step_weight: float = 3.0,
    max_eff: float = 0.98,
) -> WaveParams:
    """Fit the continuous parameters (fixed cost, SM rate, per-wave cost, tail floor, tile
    overhead, family efficiencies) to measured points by robust least squares on log latency.

    `points`: dicts with "shape" (ConvShape or its JSON), "measured_us", optional "sms" (the SM
    count the point ran on; default the target's) and optional "id" (recorded in `fitted_on`).
    Tile candidates and alignment rules stay those of the start parameters: they come from the
    kernels traced on the device, not from the fit. Depthwise points fit the depthwise terms
    (`fit_depthwise`), the others the GEMM ones; each kind keeps its start values when absent.
    A point without a positive, finite "measured_us" is a DataError (`_check_points`).
    """
    _check_dtype(dtype)
    _check_points(points)
    target = _as_target(target)
    shapes = _point_shapes(points)
    dw = [p for p, s in zip(points, shapes) if s.is_depthwise]
    gemm = [p for p, s in zip(points, shapes) if not s.is_depthwise]
    params = target.wave_params(dtype)
    if gemm or not dw:
        params = _fit_gemm(gemm, target, dtype, name, step_weight, max_eff)
    elif name:
        params = replace(params, name=name)
    if dw:
        return fit_depthwise(dw, target, params)
    start = target.wave_params(dtype)
    if start.fitted and params.name != start.name:
        # the depthwise terms are the start fit's, not this one's: a calibrated profile said
        # "fitted on 864 measured depthwise points" though it measured no depthwise conv
        kept = f"kept from '{start.name}' ({start.dw_source}): no depthwise conv in this fit"
        params = replace(params, dw_source=kept)
    return params


def _fit_gemm(
    points: list[dict[str, Any]],
    target: Target,
    dtype: str,
    name: str | None,
    step_weight: float,
    max_eff: float,
) -> WaveParams:
    """`fit` for convs run as implicit GEMMs (every conv but depthwise ones)."""
    import numpy as np
    from scipy.optimize import least_squares

    if len(points) < 4:
        from deployopt.errors import DeployoptError

        raise DeployoptError(f"fitting needs at least 4 measured points, got {len(points)}")
    start = target.wave_params(dtype)
    shapes = _point_shapes(points)
    sms = [int(p.get("sms") or target.sms) for p in points]
    y = np.log(np.array([float(p["measured_us"]) for p in points]))
    # Free: the efficiency and epilogue of every aligned family after the first (the reference),
    # each family no faster than the better-aligned one before it (efficiency a factor ≤ 1 of it,
    # epilogue an increment ≥ 0): a wider alignment never buys a slower kernel, so a width aligned
    # to 32 always runs the 32 family, not the 8 one. The padded path (min_align 1), which sweeps
    # over multiples of 8 never exercise, keeps its ratio to the last free family.
    free = [i for i, f in enumerate(start.families) if i > 0 and f.min_align > 1]

    def unpack(x: np.ndarray) -> WaveParams:
        fams = list(start.families)
        eff = epi = 0.0
        for j, i in enumerate(free):
            a, b = float(x[5 + 2 * j]), float(x[6 + 2 * j])
            eff, epi = (a, b) if j == 0 else (eff * a, epi + b)
            fams[i] = replace(fams[i], efficiency=eff, epilogue_us=epi)
        if free:
            last = free[-1]
            ratio = fams[last].efficiency / max(start.families[last].efficiency, 1e-9)
            for i in range(last + 1, len(fams)):
                fams[i] = replace(fams[i], efficiency=min(1.0, start.families[i].efficiency * ratio))
        return replace(
            start,
            fixed_us=float(x[0]),
            macs_per_us_per_sm=float(np.exp(x[1])),
            wave_us=float(x[2]),
            tail_floor=float(x[3]),
            small_tile=float(x[4]),
            families=tuple(fams),
        )

    # Adjacent points of one sweep (same id, widths in order): their latency ratios are what a
    # staircase is about, so they get their own residuals beside the level ones.
    order = sorted(range(len(points)), key=lambda i: (str(points[i].get("id", "")), shapes[i].k))
    pairs = np.array(
        [
            (a, b)
            for a, b in zip(order, order[1:])
            if points[a].get("id") is not None and points[a].get("id") == points[b].get("id")
        ],
        dtype=int,
    ).reshape(-1, 2)

    grid = _CandidateGrid(shapes, sms, target, start.families)

    def residuals(x: np.ndarray) -> np.ndarray:
        logp = np.log(grid.predicted_us(unpack(x)))
        level = logp - y
        if not len(pairs) or step_weight == 0:
            return level
        steps = (logp[pairs[:, 1]] - logp[pairs[:, 0]]) - (y[pairs[:, 1]] - y[pairs[:, 0]])
        return np.concatenate([level, step_weight * steps])

    x0 = np.array(
        [
            start.fixed_us,
            math.log(start.macs_per_us_per_sm),
            start.wave_us,
            start.tail_floor,
            start.small_tile,
            *_relative_start(start.families, free),
        ]
    )
    extra_lo = [0.02, 0.0] * len(free)
    extra_hi = [v for j in range(len(free)) for v in ((max_eff if j == 0 else 1.0), 10.0)]
    lo = np.array([0.0, x0[1] - 5, 0.0, 0.0, 0.0, *extra_lo])
    hi = np.array([200.0, x0[1] + 5, 100.0, 1.0, 256.0, *extra_hi])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    res = least_squares(residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.05, diff_step=1e-3)
    ids = tuple(sorted({str(p["id"]) for p in points if p.get("id")}))
    return replace(
        unpack(res.x),
        name=name or f"{target.name}-{dtype} fit",
        fitted=True,
        source=f"least-squares fit on {len(points)} measured points",
        fitted_on=ids,
    )


def _relative_start(families: tuple[KernelFamily, ...], free: list[int]) -> list[float]:
    """Start values of the free families in fit's terms: the first one's efficiency and
    epilogue, then each next one's efficiency factor and epilogue increment over its predecessor."""
    out: list[float] = []
    prev: KernelFamily | None = None
    for i in free:
        f = families[i]
        if prev is None:
            out += [f.efficiency, f.epilogue_us]
        else:
            ratio = min(1.0, f.efficiency / max(prev.efficiency, 1e-9))
            out += [ratio, max(0.0, f.epilogue_us - prev.epilogue_us)]
        prev = f
    return out


def conv_rows(analysis: Any, target: Target | str, dtype: str = "fp16") -> list[dict[str, Any]]:
    """Per-conv wave columns for `deployopt analyze --target`: implicit-GEMM dims, blocks, waves,
    tail fill, and for each free channel group the conv touches, the nearest wave-aligned widths of
    that group below/above with this conv's predicted latency change.

    `analysis` is a deployopt.coupling.Analysis: `.convs` (ConvLayer: name, shape, out_group,
    in_groups as (group id, width) segments) and `.groups` (ChannelGroup: id, width, frozen). A
    group's width is turned into this conv's shape by `analysis.conv_shapes({id: width})` when the
    analysis has it (concat segments, depthwise convs), else by setting K (output) or C (input).
    A grouped conv's group (`repeat` = g) has its width per conv group; its candidates step so that
    g × width moves by whole vectors.
    """
    _check_dtype(dtype)
    target = _as_target(target)
    groups = _groups_by_id(getattr(analysis, "groups", []))
    params = target.wave_params(dtype)
    vec = VECTOR[dtype]
    # one conv's shape at a width: every conv's shape per candidate width (conv_shapes) made this
    # table convs² × widths (18 s for DenseNet-201's 200 convs; 2.5 s without --target)
    shape_of = getattr(analysis, "conv_shape", None)
    rows = []
    for conv in analysis.convs:
        shape: ConvShape = conv.shape
        m, n, kd = shape.gemm
        if not (m > 0 and n > 0 and kd > 0):  # wave_count refused 0 blocks with a ValueError
            raise ModelError(
                f"conv {conv.name!r} is zero-size (implicit GEMM {m}×{n}×{kd}: no output channels, or "
                "a kernel larger than its padded input): nothing to predict"
            )
        pred = _evaluate(shape, target, params)
        row: dict[str, Any] = {
            "name": conv.name,
            "gemm_m": m,
            "gemm_n": n,
            "gemm_k": kd,
            "tile": list(pred.tile),
            "blocks": pred.blocks,
            "blocks_per_sm": pred.blocks_per_sm,
            "waves": pred.waves,
            "tail_fill": pred.tail_fill,
            "predicted_us": pred.predicted_us,
            "size_class": size_class(pred.predicted_us, params, shape.is_depthwise),
            "predictor": params.name,
            "widths": [],
        }
        touched: list[tuple[str, Any]] = []
        if getattr(conv, "out_group", None) is not None:
            touched.append(("out", conv.out_group))
        for seg in getattr(conv, "in_groups", None) or []:
            gid = seg[0] if isinstance(seg, (tuple, list)) else seg
            if gid is not None:
                touched.append(("in", gid))
        seen: set[Any] = set()
        for role, gid in touched:
            group = groups.get(gid)
            if gid in seen or not _is_free(group):
                continue
            seen.add(gid)
            width = _group_width(group, conv, role, gid)

            def shape_at(
                w: int, role: str = role, gid: Any = gid, name: str = conv.name, base: ConvShape = shape
            ) -> ConvShape:
                if callable(shape_of):
                    return shape_of(name, {gid: w})
                return _vary(base, w, role)

            def us_at(w: int, shape_at: Any = shape_at) -> float:
                return _evaluate(shape_at(w), target, params).predicted_us

            # a grouped conv's group has its width per conv group: step so that repeat × width
            # moves by whole vectors (every width for 32 conv groups in fp16), not 8 per conv group
            step = vec // math.gcd(vec, _group_repeat(group))
            below, above = _step_ends(us_at, width, step)
            entry: dict[str, Any] = {
                "group": gid,
                "role": role,
                "width": width,
                "searched": list(search_span(width, step)),  # the span _step_ends looks in
            }
            for key, w in (("below", below), ("above", above)):
                entry[key] = w
                entry[f"{key}_delta_us"] = None if w is None else us_at(w) - pred.predicted_us
            row["widths"].append(entry)
        rows.append(row)
    return rows


def _group_width(group: Any, conv: Any, role: str, gid: Any) -> int:
    """The group's current width: from the group, else from the conv's segment, else K or C."""
    width = group.get("width") if isinstance(group, dict) else getattr(group, "width", None)
    if width:
        return int(width)
    segs = getattr(conv, "out_groups" if role == "out" else "in_groups", None) or []
    for seg in segs:
        if isinstance(seg, (tuple, list)) and seg[0] == gid:
            return int(seg[1])
    return conv.shape.k if role == "out" else conv.shape.c


def _group_repeat(group: Any) -> int:
    """ChannelGroup.repeat (g for a grouped conv's group, whose width is per conv group), else 1."""
    rep = group.get("repeat", 1) if isinstance(group, dict) else getattr(group, "repeat", 1)
    return max(1, int(rep or 1))


def _group_id(g: Any) -> Any:
    if isinstance(g, dict):
        return g.get("id", g.get("name"))
    return getattr(g, "id", getattr(g, "name", None))


def _groups_by_id(groups: Any) -> dict[Any, Any]:
    if isinstance(groups, dict):
        return dict(groups)
    return {_group_id(g): g for g in groups}


def _is_free(group: Any) -> bool:
    """A group the optimizer may resize. Unknown groups count as free (analysis without groups)."""
    if group is None:
        return True
    if isinstance(group, dict):
        if "free" in group:
            return bool(group["free"])
        return not group.get("frozen", False)
    if hasattr(group, "free"):
        return bool(group.free)
    return not bool(getattr(group, "frozen", False))


# --- how far a conv's width staircase is the model's to predict ---

# A conv whose predicted latency is mostly the fixed cost (launch, prologue) has no wave structure
# worth aligning to: its measured staircase is cuDNN's pick among near-equal kernels, run to run.
# In multiples of the fixed cost so the bounds carry to GPUs with other launch costs (untested off
# the H200, where fixed ≈ 6 µs: launch-bound below ≈ 10 µs, wave-bound from ≈ 24 µs). Chosen on
# held-out rounds eight and nine, checked on four to seven and on round ten, measured to test them
# (`benchmarks/score_rounds.py --by-size`; docs/wave_model_evaluation.md, "By conv size").
LAUNCH_BOUND_BELOW = 1.75  # predicted latency / fixed cost
WAVE_BOUND_FROM = 4.0
SIZE_CLASSES = ("launch-bound", "small", "wave-bound")


def fixed_cost_us(params: WaveParams, depthwise: bool = False) -> float:
    """The fixed cost size classes are measured against: a depthwise conv's own path has its own."""
    return params.dw_fixed_us if depthwise else params.fixed_us


def size_class(predicted_us: float, params: WaveParams, depthwise: bool = False) -> str:
    """'launch-bound', 'small' or 'wave-bound': where a conv of this predicted latency sits
    between fixed cost and waves (its width staircase is predictable only in the last). Depthwise
    convs are measured against their own fixed cost; the bounds were measured on dense convs."""
    ratio = predicted_us / fixed_cost_us(params, depthwise)
    if ratio < LAUNCH_BOUND_BELOW:
        return "launch-bound"
    return "small" if ratio < WAVE_BOUND_FROM else "wave-bound"


SIZE_CLASS_MEANING = {
    "launch-bound": "mostly fixed cost; such a conv's measured staircase follows cuDNN's kernel picks, "
    "not waves, so no width is predictably faster (on the H200 a second measurement of such a staircase "
    "agrees with the first on under half of width pairs)",
    "small": "part fixed cost; waves show in such a conv's staircase, blurred by kernel picks (on the H200 a "
    "second measurement agrees with the first on about two width pairs in three)",
    "wave-bound": "waves set the staircase; its steps are the model's to predict",
}


# --- scoring a staircase model against a measured sweep (benchmarks/eval_wave_model.py, tests) ---

FLAT_BELOW = 0.03  # adjacent widths whose latency differs by less than this are "flat"
STEP_ABOVE = 0.08  # … and by more than this a "step" (up or down)


def classify_change(before_us: float, after_us: float) -> str:
    """'flat', 'up', 'down', or 'between' (3–8 %: neither a plateau nor a step)."""
    r = after_us / before_us - 1.0
    if abs(r) < FLAT_BELOW:
        return "flat"
    if r > STEP_ABOVE:
        return "up"
    if r < -STEP_ABOVE:
        return "down"
    return "between"


def pair_agreement(measured_us: list[float], predicted_us: list[float]) -> tuple[int, int]:
    """(agreeing, counted) adjacent pairs: a pair counts when the measured change is flat or a
    step; it agrees when the model's change gets the same class (a model change of 3–8 % agrees
    with nothing)."""
    agree = counted = 0
    for i in range(len(measured_us) - 1):
        mc = classify_change(measured_us[i], measured_us[i + 1])
        if mc == "between":
            continue
        counted += 1
        agree += mc == classify_change(predicted_us[i], predicted_us[i + 1])
    return agree, counted


def recommend(
    widths: list[int], predicted_us: list[float], k: int, trim: float = 0.1, prefer_aligned: int = 1
) -> int:
    """The width a model recommends for a layer of width `k`: the fastest predicted width within
    [(1 − trim)·k, k]; ties go to the wider one (keep channels when nothing is gained).

    `prefer_aligned` > 1 breaks ties first toward the larger power of two dividing the width,
    counted up to that cap — a prior on alignment the model itself does not predict, studied in
    benchmarks/eval_wave_model.py (it lowers the baselines' regret more than the model's)."""
    lo = (1.0 - trim) * k

    def aligned(w: int) -> int:
        return pow2_align(w, cap=prefer_aligned)  # cap 1: every width alike, ties go to the wider

    best_w, best_us = k, math.inf
    for w, us in zip(widths, predicted_us):
        if not lo - 1e-9 <= w <= k:
            continue
        tie = abs(us - best_us) <= 1e-9 * best_us
        if us < best_us * (1 - 1e-9) or (tie and (aligned(w), w) > (aligned(best_w), best_w)):
            best_w, best_us = w, us
    return best_w


def regret_per_width(
    widths: list[int],
    measured_us: list[float],
    predicted_us: list[float],
    trim: float = 0.1,
    prefer_aligned: int = 1,
) -> list[tuple[int, float]]:
    """For every swept k: (the width the model recommends, its measured latency over the measured
    best in [(1 − trim)·k, k], minus one)."""
    meas = dict(zip(widths, measured_us))
    out = []
    for k in widths:
        rec = recommend(widths, predicted_us, k, trim, prefer_aligned)
        best = min(m for w, m in meas.items() if (1.0 - trim) * k - 1e-9 <= w <= k)
        out.append((rec, meas[rec] / best - 1.0))
    return out


def regret(
    widths: list[int],
    measured_us: list[float],
    predicted_us: list[float],
    trim: float = 0.1,
    prefer_aligned: int = 1,
) -> float:
    """Mean over every swept k of measured(recommended) / measured best in [(1 − trim)·k, k] − 1."""
    per = regret_per_width(widths, measured_us, predicted_us, trim, prefer_aligned)
    return sum(r for _, r in per) / len(per)
