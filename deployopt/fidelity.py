"""Calibration data and output comparison: is the edited model still the same model?

Padding must be exact and trimming close; both are judged the same way, by running reference and
candidate on onnxruntime CPU over the same inputs and comparing outputs (max/mean abs error,
cosine similarity per image, top-1 agreement). Inputs come from a folder of images, .npy/.npz
arrays, or, when none are given, seeded random inputs — and the report says so, since random
inputs cannot show a drop in accuracy on real data.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
import zipfile
import zlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from deployopt.errors import DataError, ModelError, first_line, no_such_file, shorten

if TYPE_CHECKING:
    from deployopt.model import LoadedModel

RANDOM_SOURCE = "random inputs (no calibration data given)"
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp"})
ARRAY_SUFFIXES = frozenset({".npy", ".npz"})
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RESIZE_MODES = ("stretch", "crop")
CHANNEL_ORDERS = ("RGB", "BGR")
#: the channel order of the preprocessing a 1-channel input gets (`ImagePreprocess.for_channels`):
#: images are read as grayscale, whatever order was asked for
GRAYSCALE = "grayscale"
#: images become float32 tensors: a --scale or --std it rounds to 0, or a value past its largest,
#: made one grey image for every picture (exit 0) or inf behind numpy's two-line RuntimeWarnings
_F32_TINY, _F32_MAX = float(np.finfo(np.float32).tiny), float(np.finfo(np.float32).max)
_F32_RANGE = f"outside float32's range ({_F32_TINY:.3g} to {_F32_MAX:.3g}), the type images become"


@dataclass(frozen=True)
class ImagePreprocess:
    """How calibration images become input tensors: (pixel·scale − mean) / std per channel, in
    `channel_order`, resized by `resize` (`preprocess_image`). One value for every command that
    reads images (verify, apply, optimize, bench/profile INT8), so a YOLO model (scale 1/255, no
    mean/std) or a BGR Caffe-style one is ranked, gated and calibrated on the inputs it takes.
    The defaults are torchvision's ImageNet recipe. mean/std are given in RGB order, even for BGR."""

    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    scale: float = 1 / 255
    channel_order: str = "RGB"
    resize: str = "stretch"

    def check(self) -> None:
        """One-line DataErrors for values no model can take (NaN or all-zero images were reported
        as a failed comparison, exit 1, rather than bad input). The channel count is checked
        against the model when the images are read (`_per_channel`)."""
        # NaN or infinity here made NaN inputs, which compared as a failed check (exit 1), not bad input
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise DataError(f"--scale must be a finite number above 0, got {self.scale}")
        if not _F32_TINY <= self.scale <= _F32_MAX:
            raise DataError(f"--scale {self.scale:g}: {_F32_RANGE}")
        for what, values in (("mean", self.mean), ("std", self.std)):
            if not all(math.isfinite(float(v)) for v in values):
                raise DataError(f"--{what} values must be finite numbers, got {','.join(map(str, values))}")
            if len(values) not in (1, 3):  # images feed 1 or 3 channels: 2 or 4 values fit neither
                raise DataError(
                    f"--{what} {','.join(map(str, values))}: expected 1 value (every channel) or 3 (R,G,B), "
                    f"got {len(values)}"
                )
        # a negative std flipped the sign of every pixel without a word (and ranked trims on that)
        if any(float(v) <= 0 for v in self.std):
            raise DataError(f"--std values must be above 0, got {','.join(map(str, self.std))}")
        for what, values, low in (("mean", self.mean, 0.0), ("std", self.std, _F32_TINY)):
            out = next((float(v) for v in values if not low <= abs(float(v)) <= _F32_MAX), None)
            if out is not None:
                raise DataError(f"--{what} {out:g}: {_F32_RANGE}")
        if self.channel_order.upper() not in CHANNEL_ORDERS and self.order() != GRAYSCALE:
            raise DataError(f"channel order {self.channel_order!r}: expected RGB or BGR")
        if self.resize not in RESIZE_MODES:
            raise DataError(f"--resize {self.resize!r}: expected one of {', '.join(RESIZE_MODES)}")

    def order(self) -> str:
        """The channel order as reported: "RGB", "BGR" or "grayscale"."""
        order = self.channel_order.upper()
        return GRAYSCALE if order == GRAYSCALE.upper() else order

    def for_channels(self, channels: int) -> ImagePreprocess:
        """The values `preprocess_image` applies to an input of `channels`: a 1-channel input's
        images are read as grayscale, normalised by the mean of three mean/std values (their one
        value as it is), so it is described so; report.json and the console said "RGB" and
        ImageNet's three means for the grayscale images of an MNIST model. 3 channels: itself."""
        if channels != 1 or self.order() == GRAYSCALE:
            return self

        def one(values: Sequence[float]) -> tuple[float]:  # as `_per_channel` makes it for 1 channel
            return (sum(float(v) for v in values) / len(values),)

        return replace(self, mean=one(self.mean), std=one(self.std), channel_order=GRAYSCALE)

    def changes(self) -> dict[str, Any]:
        """The fields that differ from the defaults, as JSON: what optimize's journal keys on, so
        a journal from before these options (all defaults) still resumes."""
        full, default = self.to_json(), ImagePreprocess().to_json()
        return {k: v for k, v in full.items() if v != default[k]}

    def to_json(self) -> dict[str, Any]:
        return {
            "mean": [float(v) for v in self.mean],
            "std": [float(v) for v in self.std],
            "scale": float(self.scale),
            "channel_order": self.order(),
            "resize": self.resize,
        }

    def describe(self) -> str:
        """`scale 1/255, mean 0.485,0.456,0.406, std 0.229,0.224,0.225, RGB, resize stretch`."""
        return describe_preprocess(self.to_json())


def describe_preprocess(doc: dict[str, Any]) -> str:
    """An `ImagePreprocess.to_json()` in one phrase, for the CLI and report.md."""
    scale = float(doc["scale"])
    shown = "1/255" if scale == 1 / 255 else f"{scale:g}"
    mean = ",".join(f"{float(v):g}" for v in doc["mean"])
    std = ",".join(f"{float(v):g}" for v in doc["std"])
    return f"scale {shown}, mean {mean}, std {std}, {doc['channel_order']}, resize {doc['resize']}"


DEFAULT_PREPROCESS = ImagePreprocess()


@dataclass
class CalibrationSet:
    """Model-ready inputs: each sample maps every input name to an array of the input's exact shape."""

    samples: list[dict[str, np.ndarray]]
    source: str
    random: bool
    notices: list[str] = field(default_factory=list)
    # how images became these samples; None for arrays and random inputs (fed as they are)
    preprocess: ImagePreprocess | None = None
    # images fed N×H×W×C (an input with its channels last: TF/Keras exports), else N×C×H×W
    channels_last: bool = False
    # random inputs' seed (--seed): an integer input's values are drawn from it too (fit_input_types)
    seed: int = 0
    # how the samples were chosen from the data, where not all of it nor simply its first ones
    # (`load_calibration(spread=True)`, `load_trim_samples`): said in the reports ("" otherwise)
    chosen: str = ""

    def __len__(self) -> int:
        return len(self.samples)


# ---------------------------------------------------------------------------- images
def preprocess_image(
    path: str | os.PathLike[str],
    size: tuple[int, int],
    *,
    channels: int = 3,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    channel_order: str = "RGB",
    scale: float = 1 / 255,
    resize: str = "stretch",
) -> np.ndarray:
    """One image file → float32 C×H×W: (pixel·scale − mean) / std.

    `resize="stretch"` resizes straight to H×W (bilinear); `"crop"` resizes, aspect ratio kept, so
    the picture covers H/0.875 × W/0.875, and takes the centre H×W (the ImageNet evaluation recipe,
    256 → 224, as torchvision computes it: `_cover`, `_center_crop`; it used to stretch a
    non-square input's picture).
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    h, w = size
    if resize not in RESIZE_MODES:
        raise DataError(f"resize mode {resize!r}: expected one of {', '.join(RESIZE_MODES)}")
    order = channel_order.upper()
    if order not in CHANNEL_ORDERS and not (order == GRAYSCALE.upper() and channels == 1):
        raise DataError(f"channel order {channel_order!r}: expected RGB or BGR")
    if channels not in (1, 3):
        raise DataError(f"{path}: images can feed inputs with 1 or 3 channels, the model's has {channels}")
    try:
        with warnings.catch_warnings():
            # a large photo (90 MP and up) is the user's own data, resized to H×W at once: Pillow's
            # DecompressionBombWarning (raised by open) would be two lines of noise on every image
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = _decode(path, channels)
        if resize == "crop":
            img = _center_crop(_cover(img, round(h / 0.875), round(w / 0.875)), h, w)
        elif img.size != (w, h):
            img = img.resize((w, h), Image.BILINEAR)
        arr = np.asarray(img, dtype=np.float32)
    except Image.DecompressionBombError:  # over twice the warning's limit: Pillow refuses to decode it
        raise DataError(
            f"{path}: image is larger than Pillow decodes ({Image.MAX_IMAGE_PIXELS * 2} pixels at most); "
            "downscale it first"
        ) from None
    except (OSError, UnidentifiedImageError, ValueError) as exc:  # "(OSError)" alone said nothing
        if isinstance(exc, UnidentifiedImageError):  # its message repeats the path
            why = "empty file" if _is_empty(path) else "not an image Pillow can read"
        else:  # "image file is truncated (32 bytes not processed)", "Permission denied"
            text = str(exc).strip()
            why = getattr(exc, "strerror", None) or (text.splitlines()[0] if text else exc.__class__.__name__)
        raise DataError(f"{path}: cannot read image ({why})") from None
    arr = arr[:, :, None] if arr.ndim == 2 else arr
    if order == "BGR" and channels == 3:
        arr = arr[:, :, ::-1]
    mean_a = _per_channel(mean, channels, "mean")
    std_a = _per_channel(std, channels, "std")
    if order == "BGR" and channels == 3:
        mean_a, std_a = mean_a[::-1], std_a[::-1]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # checked below, in one line
        arr = (arr * np.float32(scale) - mean_a) / std_a
    if not np.isfinite(arr).all():
        raise DataError(
            f"{path}: --scale {scale:g}, --mean and --std make pixel values past float32's largest "
            f"({_F32_MAX:.3g}); check them"
        )
    return np.ascontiguousarray(arr.transpose(2, 0, 1), dtype=np.float32)


def _cover(img: Any, h: int, w: int) -> Any:
    """`img` resized (bilinear, Pillow's antialiased filter), aspect ratio kept, to cover h×w: the
    axis that needs the larger factor becomes exactly its target and the other truncates, as
    torchvision's Resize(size) (`_compute_resized_output_size`) makes the short side `size` and
    the long `int(size · long / short)`; h == w is that very recipe. Rounding the long side made a
    1024×683 photo 384×256, torchvision's 383×256 (1.7 off after normalisation)."""
    from PIL import Image

    iw, ih = img.size
    if w * ih >= h * iw:  # the width needs the larger factor (w / iw ≥ h / ih, in integers)
        size = (w, int(w * ih / iw))
    else:
        size = (int(h * iw / ih), h)
    return img if size == img.size else img.resize(size, Image.BILINEAR)


def _center_crop(img: Any, h: int, w: int) -> Any:
    """The centre h×w of `img`, which covers it: torchvision's center_crop offsets,
    `round((size − crop) / 2)` (half to even), where `//` put odd margins a pixel off."""
    iw, ih = img.size
    top, left = round((ih - h) / 2.0), round((iw - w) / 2.0)
    return img.crop((left, top, left + w, top + h))


def _is_empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0
    except OSError:
        return False


def _decode(path: Path, channels: int) -> Any:
    """The image's pixels as 8-bit RGB (3 channels) or L (1), read in full so the file can close."""
    from PIL import Image

    with Image.open(path) as img:
        if img.mode == "P" and "transparency" in img.info:
            # via RGBA, as Pillow asks: straight to RGB/L it printed a two-line UserWarning
            # ("Palette images with Transparency expressed in bytes ...") for every such image
            img = img.convert("RGBA")
        return _to_8bit(img).convert("RGB" if channels == 3 else "L")


def _to_8bit(img: Any) -> Any:
    """A 16-bit grayscale image (PNG, Pillow mode I;16 or I) as 8-bit L, full range kept: Pillow's
    own convert("RGB"/"L") clips every value above 255, turning a 16-bit picture almost white, and
    --scale/--mean/--std are given for 8-bit pixels."""
    from PIL import Image

    if not (img.mode.startswith("I;16") or img.mode == "I"):
        return img
    arr = np.asarray(img).astype(np.float64)
    if img.mode == "I" and arr.size and arr.max() <= 255:  # 32-bit container of 8-bit values
        return Image.fromarray(arr.astype(np.uint8), "L")
    return Image.fromarray(np.clip(np.rint(arr / 257.0), 0, 255).astype(np.uint8), "L")


def _per_channel(values: Sequence[float], channels: int, what: str) -> np.ndarray:
    vals = [float(v) for v in values]
    if len(vals) == 1:
        vals = vals * channels
    if channels == 1 and len(vals) == 3:
        vals = [sum(vals) / 3]
    if len(vals) != channels:
        raise DataError(f"--{what} has {len(vals)} values, the model's input has {channels} channels")
    if what == "std" and any(v <= 0 for v in vals):
        raise DataError(f"--std values must be above 0, got {','.join(map(str, vals))}")
    return np.array(vals, dtype=np.float32)


# ---------------------------------------------------------------------------- arrays
def _fmt(shape: Sequence[int]) -> str:
    return "×".join(str(int(d)) for d in shape) if len(shape) else "scalar"


#: An array file is read this many bytes at a time (at least one row or sample): each piece is
#: checked and cast on its way into its samples or batches, so it is all that loading holds beside
#: them (a copy of every row taken, then the batches stacked from it, held the data twice: 588 MB
#: for 294 MB of 224² rows; float64 rows five times).
_READ_CHUNK_BYTES = 32 << 20


class _ArrayRows:
    """One array of an array file, read along its first axis in order, a piece at a time.

    From `stream` (a .npy file or an .npz member, C order, positioned at its data) only the bytes
    of the rows read are read, into arrays of their own: not through a memory map, whose pages
    count as the process's memory while it is alive, and not the whole .npz member (a compressed
    one is decompressed as it is read). From `array` (read whole: an array numpy's own reader must
    read, or a Fortran-order .npy's memory map) the rows are its slices, copied out of a map."""

    def __init__(
        self, shape: Sequence[int], dtype: Any, *, stream: Any = None, array: np.ndarray | None = None
    ) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.stream, self.array = stream, array
        self._next = 0

    @property
    def in_memory(self) -> bool:
        """Whether the data is already an array in memory (a view of it costs nothing)."""
        return self.array is not None and not isinstance(self.array, np.memmap)

    def add_axis(self) -> None:
        """Read as one row of a leading axis of 1 (one sample or row saved without its axis)."""
        self.shape = (1, *self.shape)
        if self.array is not None:
            self.array = self.array[None]

    def read(self, n: int) -> np.ndarray:
        """The next `n` rows: a view of an in-memory array, else an array of their own."""
        start, self._next = self._next, self._next + n
        if self.array is not None:
            part = self.array[start : start + n]
            return np.array(part) if isinstance(self.array, np.memmap) else part
        out = np.empty((n, *self.shape[1:]), self.dtype)
        raw = out.reshape(-1).view(np.uint8)
        got = 0
        while got < raw.size:
            k = self.stream.readinto(raw[got:])
            if not k:
                raise ValueError(f"EOF: reading array data, expected {raw.size} bytes got {got}")
            got += k
        return out


class _ValueCheck:
    """The checks on the values taken from one array, a piece at a time: NaN or infinity (counted
    over every piece, for the message), and float64 values past float32's range."""

    def __init__(self) -> None:
        self.bad = 0
        self.biggest = 0.0

    def see(self, part: np.ndarray) -> bool:
        """Count `part`'s bad values; True while every value seen is fine (safe to cast)."""
        if part.dtype.kind != "f" or not part.size:
            return not self.bad
        # NaN would pass through both models and compare as a failed cosine, inf overflow: the
        # data is broken, not the edit (optimize would otherwise call it an internal error)
        self.bad += int(np.size(part) - np.count_nonzero(np.isfinite(part)))
        if not self.bad and part.itemsize > 4:
            self.biggest = max(self.biggest, float(np.max(np.abs(part))))
        return not self.bad and not self.biggest > _F32_MAX

    def raise_bad(self, origin: str, name: str) -> None:
        if self.bad:
            raise DataError(f"{origin}: array for input {name!r} holds {self.bad} NaN or infinite value(s)")
        if self.biggest > _F32_MAX:
            # samples are float32: the cast made such values inf (numpy's two-line RuntimeWarning),
            # and the reference model's outputs were blamed for them
            raise DataError(
                f"{origin}: array for input {name!r} holds {self.biggest:g}, past float32's "
                f"largest ({_F32_MAX:.3g}), the type the models are fed"
            )


def _fed_dtype(dtype: np.dtype) -> np.dtype:
    """The type `_as_fed` gives an array of `dtype`."""
    return dtype if dtype.kind in "iub" else np.dtype(np.float32)


@dataclass(frozen=True)
class _Pick:
    """The samples and rows an input takes of its array files (`load_calibration(spread=True)`),
    by their positions over the files in order: samples counted apart from rows, as they are fed."""

    samples: frozenset[int]
    rows: frozenset[int]

    @classmethod
    def of(cls, units: Sequence[int], n_samples: int, batch: int) -> _Pick:
        """Units in the order the loader feeds them (the samples, then batches of rows) → positions."""
        rows = (range((u - n_samples) * batch, (u - n_samples + 1) * batch) for u in units if u >= n_samples)
        return cls(
            frozenset(u for u in units if u < n_samples),
            frozenset(r for batch_rows in rows for r in batch_rows),
        )

    def left(self, samples: bool, start: int) -> int:
        """How many positions from `start` on reach the last one picked (0: none left)."""
        picked = self.samples if samples else self.rows
        return max(0, max(picked, default=-1) + 1 - start)

    def mask(self, samples: bool, start: int, n: int) -> np.ndarray:
        """Which of the `n` positions from `start` on are picked."""
        picked = self.samples if samples else self.rows
        return np.fromiter((start + i in picked for i in range(n)), bool, n)


class _InputData:
    """One input's data as the array files are read (`_assemble_arrays`): whole samples, and rows
    stacked into a batch as soon as it is full, as images go straight into theirs: a list of every
    row beside the batches stacked from it held each row twice."""

    def __init__(self, shape: list[int], pick: _Pick | None = None) -> None:
        self.shape = shape
        self.batch = shape[0] if shape else 1
        self.samples: list[np.ndarray] = []
        self.batches: list[np.ndarray] = []  # full batches of rows, in order, as fed
        self.pending: list[np.ndarray] = []  # rows of the batch being filled
        self.rows = 0  # rows taken
        self.held = [0, 0]  # the samples and rows of the files read, taken or not
        self.pick = pick  # None: the first ones

    def add_rows(self, rows: np.ndarray) -> None:
        """Rows taken, in order: each full batch stacked as `_stack_rows` stacks it."""
        for i in range(rows.shape[0]):
            self.pending.append(rows[i, ...])
            if len(self.pending) == self.batch:
                self.batches.append(_as_fed(np.stack(self.pending)))
                self.pending = []
        self.rows += int(rows.shape[0])

    def fed(self, count: int, name: str) -> tuple[list[np.ndarray], list[str]]:
        """The samples, then as many row batches as `count` leaves them (`_stack_rows` of the rows
        it leaves: all of them, at most `count` less the samples, times the batch), and the notice
        on those rows where they do not fill their batches."""
        kept = self.samples[:count]
        n = min(self.rows, max(0, count - len(kept)) * self.batch)
        if not n:
            return kept, []
        if n < self.batch:  # every row taken, fewer than one batch: it repeats them
            batches = _stack_rows(self.pending, self.batch)
        else:
            batches = self.batches[: n // self.batch]
        return kept + batches, _rows_notice(n, self.batch, "row", f" of input {name!r}")


def _take_array(
    src: _ArrayRows,
    shape: list[int],
    origin: str,
    name: str,
    wanted: tuple[int, int] | None,
    data: _InputData,
) -> tuple[int, int]:
    """An array's samples (of exactly `shape`) or rows (of one batch item) into `data`; returns how
    many (samples, rows) the array holds, taken or not.

    Accepted: N×(input shape) (N samples), one exact sample, N rows of one batch item
    (N×shape[1:]) or one such row without the N axis (shape[1:]). Rows go into batches across
    files (`_InputData`), so that a folder of per-image files makes full batches, not one batch of
    repeats per file. `wanted`: at most (samples, rows) to take, the first ones (None: all); only
    those are read (out of a .npy or an .npz member, which is read no further) and checked, a
    piece at a time, each cast to the type it is fed (`_as_fed`) as it is read.
    """
    if src.dtype.kind not in "fiub":
        raise DataError(f"{origin}: array for input {name!r} has dtype {src.dtype}, expected numbers")
    shape = [int(d) for d in shape]
    dims = list(src.shape)
    if dims == shape:  # one exact sample
        samples = True
        src.add_axis()
    elif len(dims) == len(shape) + 1 and dims[1:] == shape:
        samples = True
    elif len(dims) == len(shape) and len(shape) >= 1 and dims[1:] == shape[1:] and dims[0] > 0:
        samples = False
    elif len(shape) >= 1 and dims == shape[1:]:  # one batch item saved without its axis
        samples = False
        src.add_axis()
    else:
        rows = f" or N×{_fmt(shape[1:])} rows" if shape else ""
        raise DataError(f"{origin}: input {name!r} expects {_fmt(shape)}{rows}, got {_fmt(dims)}")
    held = src.shape[0]
    take = held if wanted is None else max(0, min(held, wanted[0 if samples else 1]))
    per_row = math.prod(src.shape[1:]) * src.dtype.itemsize
    step = max(1, _READ_CHUNK_BYTES // max(1, per_row))
    check = _ValueCheck()
    # spread (data.pick): only the picked ones of the positions read are kept, and checked
    keep = None if data.pick is None else data.pick.mask(samples, data.held[0 if samples else 1], take)
    kept = take if keep is None else int(np.count_nonzero(keep))
    if samples and src.in_memory:  # read whole already: its own slices (a copy of a part taken)
        if keep is not None:
            block = np.asarray(src.array[:take][keep])  # a copy of the picked ones
        else:
            block = np.array(src.array[:take]) if take < held else np.asarray(src.array)
        check.see(block)
        items = [block[i, ...] for i in range(kept)]  # arrays, 0-d ones too (list() made numpy scalars)
    elif samples:  # into one array of the fed type, a piece at a time
        block = np.empty((kept, *shape), _fed_dtype(src.dtype))
        at = 0
        for i in range(0, take, step):
            part = src.read(min(step, take - i))
            part = part if keep is None else part[keep[i : i + len(part)]]
            if check.see(part):
                block[at : at + len(part)] = part
            at += len(part)
        items = [block[i, ...] for i in range(kept)]
    else:
        done = 0
        while done < take:  # a piece holds at least what the batch being filled lacks
            part = src.read(min(take - done, max(step, data.batch - len(data.pending))))
            n = len(part)
            part = part if keep is None else part[keep[done : done + n]]
            if check.see(part):
                data.add_rows(part)
            done += n
        items = []
    check.raise_bad(origin, name)
    data.samples += items
    return (held, 0) if samples else (0, held)


def _stack_rows(rows: list[np.ndarray], batch: int) -> list[np.ndarray]:
    """Rows → batches of `batch`, each row in one batch once: rows past the last full batch are left
    out. A fixed-batch model takes no smaller batch, and filling it with repeats weighed those rows
    twice in the checks and the channel ranking (and optimize's ranking samples, the ones after the
    gate's, repeated the gate's first images). Fewer rows than one batch: it repeats them."""
    if len(rows) < batch:
        return [np.stack([rows[j % len(rows)] for j in range(batch)])]
    return [np.stack(rows[i : i + batch]) for i in range(0, len(rows) - batch + 1, batch)]


def _rows_notice(n: int, batch: int, noun: str, of: str = "") -> list[str]:
    """The notice on `n` rows that do not fill their batches of `batch`, if any ("12 images do not
    fill …", `noun` "image"; "1 row of input 'x' does not …", `noun` "row", `of` " of input 'x'")."""
    left = n % batch
    what = f"{n} {noun}{'' if n == 1 else 's'}{of}"
    if n < batch:
        it = "it" if n == 1 else "them"
        return [f"{what} {'does' if n == 1 else 'do'} not fill a batch of {batch}: the batch repeats {it}"]
    if not left:
        return []
    return [f"{what} do not fill batches of {batch}: the last {left} {'is' if left == 1 else 'are'} left out"]


#: the first bytes of a .npy file and of an .npz (a zip): anything else np.load reads as a pickle
#: and refuses with "contains pickled (object) data ... allow_pickle", advice the CLI cannot take
_NPY_MAGIC, _ZIP_MAGIC = b"\x93NUMPY", b"PK\x03\x04"
_EMPTY_ZIP = b"PK\x05\x06"  # numpy.savez with no arrays: a zip of no members, said as such below


def _check_array_header(path: Path) -> None:
    """A text file, a pickle or an image named .npy/.npz is one line that says what it is not."""
    try:
        with path.open("rb") as f:
            head = f.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise DataError(f"{path}: cannot read array file ({exc.strerror or exc})") from None
    want = _NPY_MAGIC if path.suffix.lower() == ".npy" else _ZIP_MAGIC
    if not head.startswith(want) and not (want is _ZIP_MAGIC and head.startswith(_EMPTY_ZIP)):
        kind = "a NumPy .npy file (numpy.save)" if want is _NPY_MAGIC else "a NumPy .npz file (numpy.savez)"
        raise DataError(f"{path}: not {kind}")


def _npy_rows(path: Path, arr: np.ndarray, opened: contextlib.ExitStack) -> _ArrayRows:
    """A .npy np.load gave `arr` for (a memory map, or the array where it could not map one): read
    from the file at the map's offset when it is in C order, else through `arr`."""
    if isinstance(arr, np.memmap) and arr.flags.c_contiguous and not arr.dtype.hasobject:
        f = opened.enter_context(path.open("rb"))
        f.seek(arr.offset)
        return _ArrayRows(arr.shape, arr.dtype, stream=f)
    return _ArrayRows(arr.shape, arr.dtype, array=arr)


def _npz_rows(npz: Any, key: str, opened: contextlib.ExitStack) -> _ArrayRows | None:
    """The .npz member `key` names (as np.load's NpzFile resolves it), streamed from the zip: its
    header read here, its rows as they are taken; None for a member that is not a .npy (NpzFile
    gives its raw bytes). A header numpy's public readers do not take (format 3.0), object or
    Fortran-order data is read whole by NpzFile, with its own errors."""
    fmt = np.lib.format
    names = npz.zip.namelist()
    members = {**dict(zip((n.removesuffix(".npy") for n in names), names)), **{n: n for n in names}}
    with npz.zip.open(members[key]) as f:
        if f.read(len(fmt.MAGIC_PREFIX)) != fmt.MAGIC_PREFIX:
            return None
    f = opened.enter_context(npz.zip.open(members[key]))
    version = fmt.read_magic(f)
    if version in ((1, 0), (2, 0)):
        read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        if not dtype.hasobject and not (fortran and len(shape) > 1):
            # the member's size against its header's, as np.load's read of it refused a short one:
            # streamed, only the rows taken are read, and a truncated member passed unseen
            size, need = npz.zip.getinfo(members[key]).file_size, f.tell() + math.prod(shape) * dtype.itemsize
            if size != need:
                raise ValueError(f"{members[key]} holds {size} bytes, its header says {need}")
            return _ArrayRows(shape, dtype, stream=f)
    arr = npz[key]
    return _ArrayRows(arr.shape, arr.dtype, array=arr) if isinstance(arr, np.ndarray) else None


def _load_array_file(
    path: Path,
    data: dict[str, _InputData],
    notices: list[str],
    wanted: dict[str, tuple[int, int]] | None = None,
) -> dict[str, tuple[int, int]]:
    """One .npy/.npz's samples and rows into `data`, per input (`_take_array`: at most
    `wanted[name]` (samples, rows) of each); returns how many (samples, rows) it holds per input.
    What was assumed goes to `notices`.

    Only the samples or rows taken are read, a piece at a time, into the samples and batches
    themselves: from a .npy at the offset its memory map gives, from an .npz member as a stream
    (decompressed as it is read where it is compressed); members no input takes are not opened."""
    _check_array_header(path)
    wanted = wanted or {}
    with contextlib.ExitStack() as opened:
        try:
            if path.suffix.lower() == ".npy":
                if len(data) != 1:
                    raise DataError(
                        f"{path}: a .npy holds one array but the model has {len(data)} inputs "
                        f"({', '.join(data)}); use an .npz keyed by input name"
                    )
                try:
                    arr = np.load(path, mmap_mode="r", allow_pickle=False)
                except ValueError:  # not mappable (object dtype, a truncated file): np.load's own reason
                    arr = np.load(path, allow_pickle=False)
                sources = {next(iter(data)): _npy_rows(path, arr, opened)}
                del arr  # a map's pages would count as this process's memory once read
            else:
                npz = opened.enter_context(np.load(path, allow_pickle=False))
                keys = list(npz.files)
                missing = [n for n in data if n not in keys]
                if missing and len(data) == 1 and len(keys) == 1:
                    key, name = keys[0], next(iter(data))
                    if key != "arr_0":  # numpy.savez(f, x)'s own name says nothing; another may be a mix-up
                        notices.append(
                            f"{path}: its one array {key!r} is fed to input {name!r} (no key of that name)"
                        )
                    chosen = {name: key}
                elif missing:
                    listed = ", ".join(keys) or "none"
                    raise DataError(f"{path}: no array for input(s) {', '.join(missing)} (keys: {listed})")
                else:
                    chosen = {n: n for n in data}
                members = {name: _npz_rows(npz, key, opened) for name, key in chosen.items()}  # only these
                # a zip member that is not a .npy comes back as its raw bytes
                raw = next((chosen[n] for n, v in members.items() if v is None), None)
                if raw is not None:
                    raise DataError(
                        f"{path}: {raw!r} in it is not a .npy array; write the file with numpy.savez"
                    )
                sources = {n: v for n, v in members.items() if v is not None}
            return {
                name: _take_array(sources[name], d.shape, str(path), name, wanted.get(name), d)
                for name, d in data.items()
            }
        except DataError:
            raise
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            first = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
            raise DataError(f"{path}: cannot read array file ({first})") from None


def _spread_arrays(
    files: list[Path],
    inputs: dict[str, list[int]],
    count: int,
    source: str,
    notices: list[str],
    spread: bool,
) -> CalibrationSet:
    """`_assemble_arrays`; `spread`, where the files hold more than `count` samples (counted from
    their headers, `_array_units`): `count` of them at an even stride, the same ones of every input."""
    if not spread:
        return _assemble_arrays(files, inputs, count, source, notices)
    units = _array_units(files, inputs)
    batch = {n: int(s[0]) if s else 1 for n, s in inputs.items()}
    held = min((s + r // batch[n] for n, (s, r) in units.items()), default=0) if units else 0
    if held <= count:  # all of them, or a header the loader will say is wrong
        return _assemble_arrays(files, inputs, count, source, notices)
    units_picked = spread_indices(held, count)
    pick = {n: _Pick.of(units_picked, units[n][0], batch[n]) for n in inputs}
    calib = _assemble_arrays(files, inputs, count, source, notices, pick)
    calib.chosen = _spread_phrase(count, held, "samples", "in file order")
    return calib


def _array_units(files: list[Path], inputs: dict[str, list[int]]) -> dict[str, tuple[int, int]] | None:
    """The (samples, rows) each input's arrays hold over `files`, from their headers (as
    `samples_held` counts them); None where one cannot be read so (the loader says why)."""
    shapes = {n: [int(d) for d in s] for n, s in inputs.items()}
    found = {n: (0, 0) for n in shapes}
    try:
        for f in files:
            for n, dims in _array_shapes(f, list(shapes)).items():
                s, r = _samples_and_rows(dims, shapes[n])
                found[n] = (found[n][0] + s, found[n][1] + r)
    except (DataError, OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    return found


def spread_indices(n: int, k: int) -> list[int]:
    """`k` of `range(n)` at an even stride, the first included (⌊i·n/k⌋): every n/k-th, the same
    each run; all of them where `k` ≥ `n`."""
    if k >= n:
        return list(range(n))
    return [i * n // k for i in range(k)]


def _spread_phrase(k: int, n: int, noun: str, over: str, batch: int = 1) -> str:
    """'20 of the data's 62 images, at an even stride over its sorted files' (', in batches of 8')."""
    what = f"{k} of the data's {n} {noun}, at an even stride {over}"
    return what if batch == 1 else f"{what}, in batches of {batch}"


def _assemble_arrays(
    files: list[Path],
    inputs: dict[str, list[int]],
    count: int,
    source: str,
    notices: list[str] | None = None,
    pick: dict[str, _Pick] | None = None,
) -> CalibrationSet:
    """The array files' samples, in file order, then their rows stacked into full batches.

    Files are read in order only until every input has `count` samples (each a sample, or `batch`
    rows), and only the samples and rows those take: a folder of 3000 per-image .npy files given
    --count 2 was read in full (3.6 GB resident for 1.7 GB of files) to feed two. As for images
    (cut to count × batch files), the notice on rows that do not fill a batch then speaks only of
    data that ran out, and differing sample counts only where the shorter input limits the count.
    `_load_array_file` says what a .npy and an .npz cost to read: the data once, and a piece."""
    notices = list(notices or [])
    data = {name: _InputData(shape, (pick or {}).get(name)) for name, shape in inputs.items()}

    def short(name: str) -> int:  # samples `name` still needs
        d = data[name]
        return count - len(d.samples) - d.rows // d.batch

    for f in files:
        if all(short(name) <= 0 for name in inputs):
            break  # the files left are not opened
        # samples come before rows in the set: rows past what `count` leaves them are never fed
        wanted = {}
        for n, d in data.items():
            room = count - len(d.samples)
            wanted[n] = (room, room * d.batch - d.rows)
            if d.pick is not None:  # as far as the last one picked (`_take_array` keeps only those)
                wanted[n] = (d.pick.left(True, d.held[0]), d.pick.left(False, d.held[1]))
        for name, in_file in _load_array_file(f, data, notices, wanted).items():
            data[name].held = [data[name].held[0] + in_file[0], data[name].held[1] + in_file[1]]
    per_input: dict[str, list[np.ndarray]] = {}
    for name, d in data.items():
        per_input[name], said = d.fed(count, name)
        notices += said
    available = {
        name: d.held[0] + (max(1, d.held[1] // d.batch) if d.held[1] else 0) for name, d in data.items()
    }
    return _assemble(per_input, count, source, notices, available)


# ---------------------------------------------------------------------------- loading
def load_calibration(
    path: str | os.PathLike[str] | None,
    inputs: dict[str, list[int]],
    *,
    count: int = 16,
    preprocess: ImagePreprocess = DEFAULT_PREPROCESS,
    seed: int = 0,
    spread: bool = False,
) -> CalibrationSet:
    """Calibration samples shaped exactly like the model's inputs (batch included).

    `path`: a folder of images (png/jpg/jpeg/bmp, sorted by relative path, resized to the input's
    H×W and normalised, in its layout, N×C×H×W or N×H×W×C (`_channels_last`); an integer input
    gets their raw pixels at the check, `fit_input_types`; `count × batch` images at most, stacked
    into the model's batch), a .npy
    (N×input shape, N rows of one batch item, or one sample), a .npz keyed by input name, or a
    folder of .npy/.npz files (concatenated in relative-path order, read only until `count`
    samples are found; `_assemble_arrays`). Images and rows past the last full batch are left out
    (no image counts twice); fewer than one batch fill it by repeating.
    Folders are searched recursively, skipping hidden files and folders, and must hold one kind
    (images or arrays).
    None: `count` seeded standard-normal samples, marked `random=True` (made into an integer
    input's own values at the check, `fit_input_types`). `preprocess` turns images
    into tensors (arrays are fed as they are); the set's `preprocess` is what a 1-channel input's
    images got (`ImagePreprocess.for_channels`). Every problem is a one-line DataError naming the file.

    `spread`: where the data holds more than `count` samples, `count` of them at an even stride
    over it (`spread_indices`: images one by one over the sorted files, then batched; arrays sample
    by sample, or row by row in batches, in file order, the rows between not kept) instead of the
    first ones: a class-per-folder dataset (ImageNet's val/) gave its first class alone. `chosen`
    then says so.
    """
    if count < 1:
        raise DataError(f"--count must be >= 1, got {count}")
    preprocess.check()
    if seed < 0:  # numpy takes any non-negative seed; a negative one was a traceback
        raise DataError(f"--seed must be 0 or more, got {seed}")
    if not inputs:
        raise DataError("the model has no inputs to feed")
    for name, shape in inputs.items():
        if any(int(d) < 1 for d in shape):
            raise DataError(f"input {name!r} has a non-static shape {shape}: give it with --input-shape")
    inputs = {n: [int(d) for d in s] for n, s in inputs.items()}
    if path is None:
        rng = np.random.default_rng(seed)
        samples = [
            {n: rng.standard_normal(s).astype(np.float32) for n, s in inputs.items()} for _ in range(count)
        ]
        return CalibrationSet(samples=samples, source=RANDOM_SOURCE, random=True, seed=seed)

    path = Path(path)
    unread: list[str] = []  # a folder's files of other types, said in one notice
    if not path.exists():
        raise no_such_file(path, DataError, folder=True)
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in ARRAY_SUFFIXES:
            return _spread_arrays([path], inputs, count, str(path), [], spread)
        if suffix in IMAGE_SUFFIXES:
            files = [path]
        else:
            raise DataError(f"{path}: not calibration data (expected a folder, .npy, .npz or an image)")
    elif not path.is_dir():  # /dev/null, a pipe, a socket: was "cannot list folder (Not a directory)"
        raise DataError(f"{path}: not a regular file or folder; give a folder of images, a .npy or a .npz")
    else:
        entries = folder_files(path)
        files = [p for p in entries if p.suffix.lower() in IMAGE_SUFFIXES]
        arrays = [p for p in entries if p.suffix.lower() in ARRAY_SUFFIXES]
        if files and arrays:
            raise DataError(
                f"{path}: mixes images and .npy/.npz files ({files[0].relative_to(path)}, "
                f"{arrays[0].relative_to(path)}); keep one kind per folder"
            )
        if not files and not arrays:
            if not entries:
                raise DataError(
                    f"{path}: empty folder (no png/jpg/jpeg/bmp images and no .npy/.npz arrays, "
                    "subfolders searched too)"
                )
            # a folder of .webp or .tif images is not empty: say what was found and not read
            raise DataError(
                f"{path}: no png/jpg/jpeg/bmp images and no .npy/.npz arrays, only {len(entries)} other "
                f"file(s) such as {entries[0].relative_to(path)} (subfolders searched too)"
            )
        unread = _unread_notice(
            [p for p in entries if p.suffix.lower() not in IMAGE_SUFFIXES | ARRAY_SUFFIXES]
        )
        if arrays:
            return _spread_arrays(arrays, inputs, count, str(path), unread, spread)

    # Images: one 4-D input (N, C, H, W or N, H, W, C) fed with resized, normalised pictures.
    if len(inputs) != 1:
        raise DataError(
            f"{path}: images can feed a model with one input, this one has {len(inputs)} "
            f"({', '.join(inputs)}); use .npz arrays keyed by input name"
        )
    name, shape = next(iter(inputs.items()))
    last = _channels_last(path, name, shape)
    batch, channels, h, w = (shape[0], shape[3], shape[1], shape[2]) if last else shape
    chosen = ""
    if spread and len(files) // batch > count:  # images one by one, at an even stride, then batched
        chosen = _spread_phrase(count * batch, len(files), "images", "over its sorted files", batch)
        files = [files[i] for i in spread_indices(len(files), count * batch)]
    files = files[: count * batch]
    notices = _rows_notice(len(files), batch, "image")
    # each image goes straight into its batch, as `_stack_rows` would place it: a list of them all
    # beside the batches stacked from it held every tensor twice (1000 batches of 512² images:
    # 6.2 GB for 3.0 GB); images past the last full batch are not read
    used = files if len(files) < batch else files[: len(files) - len(files) % batch]
    batches: list[np.ndarray] = []
    for k, f in enumerate(used):
        if k % batch == 0:
            batches.append(np.empty((batch, h, w, channels) if last else (batch, channels, h, w), np.float32))
        tensor = preprocess_image(
            f,
            (h, w),
            channels=channels,
            mean=preprocess.mean,
            std=preprocess.std,
            channel_order=preprocess.channel_order,
            scale=preprocess.scale,
            resize=preprocess.resize,
        )
        batches[-1][k % batch] = tensor.transpose(1, 2, 0) if last else tensor
    for j in range(len(used), batch):  # fewer than one batch: it repeats them
        batches[0][j] = batches[0][j % len(used)]
    return CalibrationSet(
        samples=[{name: b} for b in batches],
        source=str(path),
        random=False,
        notices=unread + notices,
        preprocess=preprocess.for_channels(channels),
        channels_last=last,
        chosen=chosen,
    )


def _channels_last(path: Path, name: str, shape: list[int]) -> bool:
    """Whether images feed input `name` (of `shape`) channels last, N×H×W×C (TF/Keras exports, a
    model with its preprocessing inside), rather than N×C×H×W: the dim of 1 or 3 channels that
    images have. A shape where both could be (1×3×8×3), or neither, is one DataError that says to
    give the tensors as arrays: guessing would feed pictures in the wrong layout."""
    if len(shape) != 4:
        raise DataError(
            f"{path}: images need a 4-D N×C×H×W input (or N×H×W×C), {name!r} is {_fmt(shape)}; "
            "give .npy/.npz arrays of its shape"
        )
    first, last = shape[1] in (1, 3), shape[3] in (1, 3)
    if first and last:
        raise DataError(
            f"{path}: {name!r} is {_fmt(shape)}, whose channels could be dim 1 (N×C×H×W) or dim 3 "
            "(N×H×W×C); give its tensors as a .npy of that shape (numpy.save) instead of images"
        )
    if not first and not last:  # checked once, here: the error blamed the first image for the layout
        raise DataError(
            f"{path}: images feed N×C×H×W or N×H×W×C inputs with 1 or 3 channels, {name!r} is "
            f"{_fmt(shape)}; give .npy/.npz arrays of its shape"
        )
    return last


#: files a dataset folder holds beside its data (READMEs, licences, labels, annotations, scripts),
#: skipped without a notice: the bundled calibration_data/ has a README.md and a LICENSE
_NOT_DATA_SUFFIXES = frozenset(
    {
        "",
        ".md",
        ".txt",
        ".rst",
        ".json",
        ".csv",
        ".tsv",
        ".yaml",
        ".yml",
        ".xml",
        ".html",
        ".py",
        ".sh",
        ".log",
    }
)


def _unread_notice(files: list[Path]) -> list[str]:
    """One notice for a folder's files of other types, which are not read ("20 file(s) not read:
    .webp ×20 ..."): a folder of .webp photos and one .png was "1 sample" without a word. Text
    and metadata files (`_NOT_DATA_SUFFIXES`) are not mentioned."""
    counts: dict[str, int] = {}
    for f in files:
        ext = f.suffix.lower()
        if ext not in _NOT_DATA_SUFFIXES:
            counts[ext] = counts.get(ext, 0) + 1
    if not counts:
        return []
    kinds = ", ".join(f"{ext} ×{n}" for ext, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return [
        f"{sum(counts.values())} file(s) not read: {kinds} (images are png/jpg/jpeg/bmp; arrays .npy/.npz)"
    ]


#: The samples `optimize`'s fidelity gate checks (the first ones of --calibration-data)
GATE_SAMPLES = 4
#: Ranking trimmed channels: model runs at most beyond the fidelity gate's, and the bytes their
#: inputs may hold in memory at once (at least one sample is always used).
RANK_SAMPLES = 16
RANK_INPUT_BYTES = 256 << 20


@dataclass(frozen=True)
class TrimSamples:
    """The calibration samples `optimize --mode trim` checks with its fidelity gate, and those it
    ranks the trimmed channels on: never the same sample (`load_trim_samples`)."""

    gate: CalibrationSet  # its notices: loading's, then `notice`
    ranking: CalibrationSet | None  # None: ranked by filter L1 (the data holds one sample, the gate's)
    taken: str  # which of the data's samples both come from ("the data's 6 samples", a spread of them)
    notices: list[str] = field(default_factory=list)  # what loading the data said
    notice: str = ""  # how the data was split where it holds too few samples for both, else ""

    def ranked_on(self) -> str:
        """What the trims are ranked by, and on which samples: report.json's trim_order."""
        if self.ranking is None:
            return (
                "dead channels, then L1 of the producing filters: the calibration data holds one "
                "sample, which the fidelity gate checks (ranked on it too, the gate would pass trims "
                "that fail on data the ranking did not see)"
            )
        r, g = len(self.ranking), len(self.gate)
        return (
            f"dead channels, then mean |activation| × reader weight norm, on {r} calibration "
            f"sample{'' if r == 1 else 's'} the fidelity gate does not check (it checks the other {g} "
            f"of {self.taken})"
        )


def load_trim_samples(
    path: str | os.PathLike[str],
    inputs: dict[str, list[int]],
    preprocess: ImagePreprocess = DEFAULT_PREPROCESS,
    gate: int = GATE_SAMPLES,
) -> TrimSamples:
    """The samples `optimize --mode trim` gates and ranks on: `gate` for the fidelity gate and up
    to RANK_SAMPLES (fewer where their inputs would pass RANK_INPUT_BYTES) for the ranking, loaded
    spread over the data (`load_calibration(spread=True)`: a class-per-folder dataset gave its
    first class alone) and dealt out so that the gate's are spread among the ranking's.

    Never a sample in both: the gate must judge a ranking on data it was not made from (ranked and
    gated on the same 4 MobileNetV2 images, trims kept ≥ 0.993 cosine there and 0.973–0.992 on the
    other 16; a gate passed a model agreeing on 8 of 20 held-out images). Data holding fewer than
    twice `gate` samples is split between them (half, the odd one to the gate), with a notice;
    one sample goes to the gate, and the trims are ranked by filter L1 (`ranking` None), which
    needs no data: a gate on the sample the ranking was made from checks nothing, and refusing the
    run would leave the user nothing to try. One function for optimize and `apply`, so a plan
    re-applied without recorded channels is ranked on the very samples optimize ranked it on."""
    per_sample = sum(math.prod(int(d) for d in shape) * 4 for shape in inputs.values())
    wanted = max(1, min(RANK_SAMPLES, RANK_INPUT_BYTES // max(per_sample, 1)))
    data = load_calibration(path, inputs=inputs, count=gate + wanted, preprocess=preprocess, spread=True)
    n = len(data.samples)
    taken = f"the {n} samples taken: {data.chosen}" if data.chosen else f"the data's {n} samples"
    said = list(data.notices)
    if n == 1:
        notice = (
            "the calibration data holds one sample: the fidelity gate checks it, and the trims are "
            "ranked by filter L1, not on it (a gate on the sample the ranking was made from passes "
            "trims that fail on other data); give 2 or more samples to rank on data"
        )
        chosen = "the data's one sample; the trims are ranked by filter L1"
        gate_set = replace(data, notices=[*said, notice], chosen=chosen)
        return TrimSamples(gate=gate_set, ranking=None, taken=taken, notices=said, notice=notice)
    # split only where the data ran out: a ranking held under RANK_INPUT_BYTES to fewer samples
    # than the gate (inputs past 64 MiB a sample) had cut the gate to half of what was loaded
    g = gate if n >= gate + wanted else min(gate, -(-n // 2))
    on_gate = spread_indices(n, g)
    gated = set(on_gate)
    rest = [i for i in range(n) if i not in gated]
    on_rank = [rest[i] for i in spread_indices(len(rest), min(wanted, len(rest)))]
    notice = ""
    if g < gate:
        notice = (
            f"the calibration data holds {n} samples, fewer than the fidelity gate's {gate} and the {wanted} "
            f"to rank the trims on: the gate checks {g} of them and the trims are ranked on the "
            f"other {len(on_rank)} (none shared: a gate on the samples the ranking was made from "
            f"passes trims that fail on other data); give {min(2 * gate - 1, gate + wanted)} or more for a "
            f"gate of {gate}"
        )
    gate_set = replace(
        data,
        samples=[data.samples[i] for i in on_gate],
        notices=[*said, *([notice] if notice else [])],
        chosen=f"{g} spread over {taken}; the trims are ranked on the other {len(on_rank)}",
    )
    rank_set = replace(
        data,
        samples=[data.samples[i] for i in on_rank],
        notices=list(said),
        chosen=f"{len(on_rank)} of {taken}; the fidelity gate checks the other {g}",
    )
    return TrimSamples(gate=gate_set, ranking=rank_set, taken=taken, notices=said, notice=notice)


def samples_held(path: str | os.PathLike[str] | None, inputs: dict[str, list[int]], count: int) -> int:
    """How many samples `load_calibration(path, inputs, count=count)` holds at once, from the
    folder's listing and the arrays' headers, no data read: what verify's memory pre-flight
    counts (it counted one for any data, and 1000 batches of 512² images, 3.0 GB, ran without a
    warning). Data it cannot size counts 1: loading it says what is wrong, in one line."""
    if path is None:
        return count
    shapes = {n: [int(d) for d in s] for n, s in inputs.items()}
    if not shapes:  # min(count, *()) raised TypeError; the loader says the model has no inputs
        return 1
    batch = {n: s[0] if s else 1 for n, s in shapes.items()}
    try:
        p = Path(path)
        files = folder_files(p) if p.is_dir() else [p]
        arrays = [f for f in files if f.suffix.lower() in ARRAY_SUFFIXES]
        if not arrays:  # images: `count` batches of the one input at most, fewer than a batch is one
            images = sum(f.suffix.lower() in IMAGE_SUFFIXES for f in files)
            return max(1, min(count, images // max(1, next(iter(batch.values()), 1))))
        found = {n: [0, 0] for n in shapes}  # samples and rows, read in file order as the loader reads

        def held(n: str) -> int:
            return found[n][0] + (max(1, found[n][1] // batch[n]) if found[n][1] else 0)

        for f in arrays:
            if all(held(n) >= count for n in shapes):
                break
            for n, dims in _array_shapes(f, list(shapes)).items():
                found[n] = [a + b for a, b in zip(found[n], _samples_and_rows(dims, shapes[n]))]
        return max(1, min(count, *(held(n) for n in shapes)))
    except (DataError, OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return 1


def _array_shapes(path: Path, names: list[str]) -> dict[str, tuple[int, ...]]:
    """The shape of the array each input takes from a .npy/.npz (`_load_array_file`'s choice),
    read from the .npy headers alone; KeyError where an input has none."""
    if path.suffix.lower() == ".npy":
        if len(names) != 1:
            raise KeyError(path)
        with path.open("rb") as f:
            return {names[0]: _npy_shape(f)}
    with zipfile.ZipFile(path) as z:
        members = {m[: -len(".npy")]: m for m in z.namelist() if m.endswith(".npy")}
        if len(names) == 1 and names[0] not in members and len(members) == 1:
            members = {names[0]: next(iter(members.values()))}
        shapes = {}
        for n in names:
            with z.open(members[n]) as f:
                shapes[n] = _npy_shape(f)
        return shapes


def _npy_shape(f: Any) -> tuple[int, ...]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return tuple(np.lib.format.read_array_header_1_0(f)[0])
    return tuple(np.lib.format.read_array_header_2_0(f)[0])


def _samples_and_rows(dims: Sequence[int], shape: list[int]) -> tuple[int, int]:
    """The (samples, rows) an array of `dims` gives an input of `shape`, as `_take_array` splits
    it; (0, 0) for one it refuses."""
    dims = [int(d) for d in dims]
    if dims == shape:
        return 1, 0
    if len(dims) == len(shape) + 1 and dims[1:] == shape:
        return dims[0], 0
    if shape and len(dims) == len(shape) and dims[1:] == shape[1:]:
        return 0, dims[0]
    return (0, 1) if shape and dims == shape[1:] else (0, 0)


def holds_arrays(path: str | os.PathLike[str]) -> bool:
    """Whether calibration data at `path` is .npy/.npz arrays (a file, or a folder of them), which
    are fed as they are: the image options have nothing to act on there (the CLI says so)."""
    p = Path(path)
    if p.is_file():
        return p.suffix.lower() in ARRAY_SUFFIXES
    if not p.is_dir():
        return False
    try:
        suffixes = {f.suffix.lower() for f in folder_files(p)}
    except DataError:  # an unreadable folder: the loader says so in its own words
        return False
    return bool(suffixes & ARRAY_SUFFIXES) and not suffixes & IMAGE_SUFFIXES


def folder_files(folder: Path) -> list[Path]:
    """Every non-hidden file under `folder`, subfolders included, sorted by relative path.

    Recursive because datasets are usually laid out one folder per class (the bundled images are
    in calibration_data/cifar10/); hidden files and folders (.git, .ipynb_checkpoints) are skipped
    so tool litter never becomes a sample. Symlinked files and folders are followed (a dataset
    linked in class by class was skipped without a word, then called an empty folder); each real
    folder is listed once, so a link back up the tree ends there, and a link to a folder the walk
    lists anyway adds nothing.
    """

    def refuse(exc: OSError) -> None:
        raise DataError(f"{exc.filename or folder}: cannot list folder ({exc.strerror or exc})") from None

    found = []
    seen: set[str] = set()  # real paths of the folders listed
    tops = [Path(folder)]  # the folder, then each symlinked folder met, in the (sorted) order met
    while tops:
        top = tops.pop(0)
        if os.path.realpath(top) in seen:
            continue
        for root, dirs, names in os.walk(top, onerror=refuse):
            seen.add(os.path.realpath(root))
            kept = []
            for d in sorted(dirs):
                sub = os.path.join(root, d)
                if d.startswith("."):
                    continue
                if os.path.islink(sub):  # os.walk lists it but does not go in: after this walk
                    tops.append(Path(sub))
                elif os.path.realpath(sub) not in seen:
                    kept.append(d)
            dirs[:] = kept
            for name in names:
                p = Path(root) / name
                if not name.startswith(".") and p.is_file():
                    found.append(p)
    return sorted(found, key=lambda p: p.relative_to(folder).parts)


def _assemble(
    per_input: dict[str, list[np.ndarray]],
    count: int,
    source: str,
    notices: list[str],
    available: dict[str, int] | None = None,
) -> CalibrationSet:
    """`count` samples at most, each input's i-th together. `available`: how many samples each
    input's data holds (None: those in `per_input`); inputs with different counts are said where
    the shorter one leaves fewer than `count`."""
    counts = available or {n: len(v) for n, v in per_input.items()}
    n = min(len(v) for v in per_input.values())
    if n == 0:
        raise DataError(f"{source}: no samples found")
    notices = list(notices)
    fewest = min(counts.values())
    if len(set(counts.values())) > 1 and fewest < count:
        notices.append(f"inputs have different sample counts {counts}: using the first {fewest}")
    n = min(n, count)
    samples = [{name: _as_fed(per_input[name][i]) for name in per_input} for i in range(n)]
    return CalibrationSet(samples=samples, source=source, random=False, notices=notices)


def _as_fed(arr: np.ndarray) -> np.ndarray:
    """Floats as float32; integers and bools keep their type and values: through float32, int64
    ids past 2**24 were rounded (16777217 → 16777216) before the integer-input check could see
    them, and a bool input was fed float32 (onnxruntime refused it). `feed_inputs` casts to the
    type each input takes."""
    return arr if arr.dtype.kind in "iub" else arr.astype(np.float32, copy=False)


# ---------------------------------------------------------------------------- comparison
@dataclass(frozen=True)
class Thresholds:
    """Pass/fail limits; None disables a check. Cosine and top-1 defaults suit exact edits."""

    max_abs_error: float | None = None
    # With max_abs_error: each output may also differ by this fraction of its largest reference
    # magnitude (numpy's atol + rtol, taken over the output's range rather than per element, so a
    # zero crossing does not tighten it). Boxes decoded in pixels round at ~6e-5 near 640.
    rel_error: float | None = None
    min_cosine: float | None = 0.999
    min_top1: float | None = 0.99


def check_threshold_range(
    min_cosine: float | None,
    min_top1: float | None,
    cosine_flag: str = "--min-cosine",
    top1_flag: str = "--min-top1",
) -> None:
    """One-line errors for a cosine outside [-1, 1] or a top-1 share outside [0, 1] (NaN too), for
    verify's thresholds and optimize's trim gate alike. `cosine_flag`, `top1_flag`: what the caller
    calls them, CLI options or config fields (`min_cosine=2.0: ...`, timing.shown_setting)."""
    from deployopt.timing import shown_setting

    if min_top1 is not None and not 0.0 <= min_top1 <= 1.0:
        raise DataError(f"{shown_setting(top1_flag, min_top1)}: expected a fraction between 0 and 1")
    if min_cosine is not None and not -1.0 <= min_cosine <= 1.0:
        raise DataError(f"{shown_setting(cosine_flag, min_cosine)}: expected a value between -1 and 1")


def shown_threshold(value: float, percent: bool = False, decimals: int | None = None) -> str:
    """A threshold as given (12 significant digits at most): --min-top1 0.999 is "99.9%", which
    `:.0%` printed "100%", and --min-cosine 0.99999 "0.99999". `decimals`: at least these, where
    they show it exactly ("99.00%")."""
    scale, unit = (100.0, "%") if percent else (1.0, "")
    exact = f"{value * scale:.12g}"
    if decimals is not None:
        fixed = f"{value * scale:.{decimals}f}"
        if float(fixed) == float(exact):
            return fixed + unit
    return exact + unit


def shown_against(
    value: float,
    threshold: float | None,
    decimals: int,
    *,
    percent: bool = False,
    threshold_decimals: int | None = None,
    computed: bool = False,
) -> tuple[str, str]:
    """(`value`, `threshold`) printed so that they compare as the numbers do: `value` with
    `decimals` decimals, or as many more as it takes (a min cosine 0.999987 against 0.99999 was
    "1.0000", a top-1 agreement of 98 % against 0.999 "≥ 100%"). The threshold is as given
    (`shown_threshold`); `computed` (a limit derived from one, √(2·(1 − c))) it takes the value's
    decimals, growing with them. A share or cosine below 1 is never shown as 1 ("100%", "1.0000"),
    the figure of every row agreeing. NaN, infinity and no threshold: `decimals` as they are."""
    scale, unit = (100.0, "%") if percent else (1.0, "")
    if threshold is None:
        return f"{value * scale:.{decimals}f}{unit}", ""
    if not math.isfinite(value):
        return f"{value * scale:.{decimals}f}{unit}", shown_threshold(threshold, percent, threshold_decimals)
    for d in range(decimals, 16):
        limit = (
            f"{threshold * scale:.{d}f}{unit}"
            if computed
            else shown_threshold(threshold, percent, threshold_decimals)
        )
        text = f"{value * scale:.{d}f}"
        v, t = float(text), float(limit.rstrip("%"))
        perfect = 0 <= value < 1 and v >= scale  # 0.9995 is not "100%", 0.99999 not "1.0000"
        if (v >= t) == (value >= threshold) and (v <= t) == (value <= threshold) and not perfect:
            return text + unit, limit
    return f"{value * scale!r}{unit}", f"{threshold * scale!r}{unit}"


# how compare_models scores an output (FidelityReport.output_scored_by, "scored_by" in the JSON)
COSINE = "cosine"  # per batch row, held to --min-cosine
RELATIVE = "relative error"  # one value per row: |ref − cand| / |ref| per row (_relative_error)
EXACT = "exact match"  # integers and bools (labels, indices, counts): share of values equal, --min-top1


def relative_error_limit(min_cosine: float | None) -> float | None:
    """The relative error --min-cosine allows each row of an output of one value per row (see
    compare_models): two vectors of equal length at cosine c differ by √(2·(1 − c)) of that
    length, so 0.999 allows 4.47 % of the row's value and trim's 0.99 14.1 %; None where the cosine
    check is off. A vector row's length, which a cosine never sees, may change by as much
    (`FidelityReport.output_scale_change`): a one-value row's relative error is its change of
    scale, so both kinds of row are held to the same change of scale."""
    if min_cosine is None:
        return None
    return math.sqrt(max(0.0, 2.0 * (1.0 - min_cosine)))


#: top-1: two classes whose values lie within this many epsilons of the larger |value| of the two
#: are tied (the epsilon of the coarsest float either model holds: `_tie_epsilon`); an argmax of
#: tied values is the first of them, which rounding picks, not the model (4, as optimize's lossless
#: check allows a model computing in fp16 4 of its epsilons)
TOP1_TIE_EPS = 4
#: top-1: where one model ties two classes, the other may rank them apart by at most this share of
#: the larger |value| of the two (at least RELATIVE_FLOOR of its row's largest |value|) for the row
#: to agree: the relative error the default --min-cosine 0.999 allows (`relative_error_limit`,
#: 4.47 %). A saturated sigmoid's 1.0 against 0.99999 agrees; a tie at 12.0 that the other model
#: breaks by 2.96 at 14.96 (20 %) does not: judged by the tie alone, it agreed
TOP1_TIE_OTHER = relative_error_limit(Thresholds().min_cosine) or 0.0
#: top-1's tie limit never exceeds the trim gate's (min cosine 0.99: 14.1 %): a looser --min-cosine
#: must not loosen top-1 with it. Uncapped, --min-cosine 0.95 let an fp16 candidate that lifted
#: another class 20 % over a tied top agree in every row, and at 0 (141 %) a 3.5× winner agreed
TOP1_TIE_MAX = relative_error_limit(0.99) or 0.0


def top1_tie_limit(min_cosine: float | None) -> float:
    """The share within which the other model must rank two classes one model ties
    (`_top1_agreeing`): the relative error `min_cosine` allows (`relative_error_limit`), as the
    scale check uses, so verify's --min-cosine and the trim gate's limit move both alike (4.47 %
    at verify's 0.999, 14.1 % at trim's 0.99), at most TOP1_TIE_MAX (14.1 %) whatever the cosine;
    TOP1_TIE_OTHER, the default's, where the cosine check is off (None). Until 2026-12-07 it was
    TOP1_TIE_OTHER whatever the cosine in force."""
    limit = relative_error_limit(min_cosine)
    return TOP1_TIE_OTHER if limit is None else min(limit, TOP1_TIE_MAX)


@dataclass
class FidelityReport:
    max_abs_error: float
    mean_abs_error: float
    cosine_min: float | None  # over the outputs scored by cosine; None when none is (see compare_models)
    cosine_mean: float | None
    # the worst top-1 scored output's (`Top1Choice`: class scores); None when top-1 was applied to none
    top1_agreement: float | None
    n_samples: int  # calibration samples (model runs)
    n_rows: int  # batch rows compared (images)
    output_names: list[str]
    candidate_output_names: list[str]
    source: str = ""
    random_inputs: bool = False
    # per output, over every sample: max |reference - candidate| and max |reference|
    output_max_abs_error: list[float] = field(default_factory=list)
    output_max_abs_reference: list[float] = field(default_factory=list)
    # per output: its worst row's cosine (None: not scored by cosine), and its top-1 agreement
    # (None: not N×classes)
    output_cosine_min: list[float | None] = field(default_factory=list)
    output_top1_agreement: list[float | None] = field(default_factory=list)
    # per output, how it is scored: COSINE, RELATIVE (one value per row) or EXACT (integers, bools);
    # empty: every output by cosine
    output_scored_by: list[str] = field(default_factory=list)
    # per EXACT output: how many of its values are equal, of how many (None for the others)
    output_values_equal: list[int | None] = field(default_factory=list)
    output_values_compared: list[int | None] = field(default_factory=list)
    # per RELATIVE output: its worst row's relative error (`_relative_error`) and that row's
    # (reference, candidate) values (None for the others)
    output_relative_error: list[float | None] = field(default_factory=list)
    output_relative_worst: list[tuple[float, float] | None] = field(default_factory=list)
    # per COSINE output: its worst row's change of length, |‖candidate‖ / ‖reference‖ − 1| over the
    # row the cosine reads (`_cosine_and_ratio`), and that row's ‖candidate‖ / ‖reference‖ (None
    # for the others; empty: not computed, a report built before the check)
    output_scale_change: list[float | None] = field(default_factory=list)
    output_norm_ratio: list[float | None] = field(default_factory=list)
    # per N×classes output: rows counted as agreeing whose two argmaxes differ, each model's top
    # class tied with the other's within TOP1_TIE_EPS epsilons (`_top1_agreeing`; None: not N×classes)
    output_top1_tied: list[int | None] = field(default_factory=list)
    # the share within which the other model had to rank a tie's two classes (`top1_tie_limit` of
    # the min cosine compare_models was given)
    top1_tie_limit: float = TOP1_TIE_OTHER
    # verify's fp16 overflow check of each model with fp16/bf16 intermediates (`low_precision_overflow`)
    low_precision: list[LowPrecisionCheck] = field(default_factory=list)
    # which of the data's samples were compared, where not all nor the first (CalibrationSet.chosen)
    samples_chosen: str = ""
    # how images became the inputs (ImagePreprocess.to_json, a 1-channel input's grayscale values);
    # None for arrays and random inputs
    image_preprocess: dict[str, Any] | None = None
    # per output, why an N×classes one was not top-1 scored (`Top1Choice`: a box, an embedding;
    # None: scored, or not N×classes); empty: a report built before the choice
    output_top1_skipped: list[str | None] = field(default_factory=list)
    # whether --top1-outputs named the outputs top-1 scores (else they were chosen, `Top1Choice`)
    top1_given: bool = False

    def scored_by(self) -> list[str]:
        return self.output_scored_by or [COSINE] * len(self.output_names)

    def top1_outputs(self) -> list[str]:
        """The outputs top-1 was applied to: those with a top-1 figure."""
        return [n for n, t in zip(self.output_names, self.output_top1_agreement) if t is not None]

    def top1_note(self) -> str:
        """`top-1: applied to logits`, or TOP1_NOT_APPLIED, with the outputs left out and why."""
        return top1_note(
            self.output_names,
            self.top1_outputs(),
            self.output_top1_skipped or [None] * len(self.output_names),
            self.top1_given,
        )

    def output_exact_match(self) -> list[float | None]:
        """Per EXACT output: the fraction of its values equal (1.0 with none to compare)."""
        return [
            None if how != EXACT or n is None else (e / n if n else 1.0)
            for how, e, n in zip(
                self.scored_by(),
                self.output_values_equal or [None] * len(self.output_names),
                self.output_values_compared or [None] * len(self.output_names),
            )
        ]

    @property
    def relative_error_max(self) -> float | None:
        """The worst RELATIVE output's relative error; None when no output is one value per row."""
        scored = [x for x in self.output_relative_error if x is not None]
        return max(scored, key=_nan_last) if scored else None

    @property
    def scale_change_max(self) -> float | None:
        """The worst COSINE output's change of row length; None when none is scored by cosine."""
        scored = [x for x in self.output_scale_change if x is not None]
        return max(scored, key=_nan_last) if scored else None

    @property
    def exact_match(self) -> float | None:
        """The worst EXACT output's share of equal values; None when no output is integers."""
        scored = [x for x in self.output_exact_match() if x is not None]
        return min(scored) if scored else None

    def output_limits(self, t: Thresholds) -> list[tuple[str, float, float, float]]:
        """(output, its max abs error, its largest |reference|, the error it may have) when the
        limit is per output (rel_error with max_abs_error); empty when it is one absolute limit."""
        if t.max_abs_error is None or t.rel_error is None:
            return []
        return [
            (name, err, ref, t.max_abs_error + t.rel_error * ref)
            for name, err, ref in zip(
                self.output_names, self.output_max_abs_error, self.output_max_abs_reference
            )
        ]

    def check(self, thresholds: Thresholds | None = None) -> list[str]:
        """Failures as one line each; empty when every enabled threshold holds (NaN always fails)."""
        t = thresholds or Thresholds()
        failures = []
        limits = self.output_limits(t)
        if limits:
            for name, err, ref, allowed in limits:
                if not err <= allowed:
                    failures.append(
                        f"output {name}: max abs error {err:.3g} > {t.max_abs_error:.3g} + "
                        f"{t.rel_error:.3g} × {ref:.4g} (its largest magnitude)"
                    )
        elif t.max_abs_error is not None and not self.max_abs_error <= t.max_abs_error:
            failures.append(f"max abs error {self.max_abs_error:.3g} > {t.max_abs_error:.3g}")
        if t.min_cosine is not None and self.cosine_min is not None and not self.cosine_min >= t.min_cosine:
            got, limit_text = shown_against(self.cosine_min, t.min_cosine, 6)
            failures.append(
                f"min cosine similarity {got} < {limit_text}"
                + self._which(self.output_cosine_min, self.cosine_min)
            )
        limit = relative_error_limit(t.min_cosine)
        nothing = [None] * len(self.output_names)
        for name, rel, worst in zip(
            self.output_names,
            self.output_relative_error or nothing,
            self.output_relative_worst or nothing,
        ):
            if rel is not None and limit is not None and not rel <= limit:
                at = "" if worst is None else f", at worst {worst[0]:.4g} → {worst[1]:.4g}"
                got, limit_text = shown_against(rel, limit, 2, percent=True, computed=True)
                failures.append(
                    f"output {name}: relative error {got} > {limit_text} (|reference − candidate| "
                    f"over |reference| per row{at}; one value per row, so held to what --min-cosine "
                    f"{t.min_cosine:g} allows instead of a cosine)"
                )
        for name, change, ratio in zip(
            self.output_names,
            self.output_scale_change or nothing,
            self.output_norm_ratio or nothing,
        ):
            if change is not None and limit is not None and not change <= limit:
                at = "" if ratio is None else f", at worst ‖candidate‖ = {ratio:.4g} × ‖reference‖"
                got, limit_text = shown_against(change, limit, 2, percent=True, computed=True)
                failures.append(
                    f"output {name}: row scale changed by {got} > {limit_text} (‖candidate‖ / "
                    f"‖reference‖ − 1 per row{at}; a cosine cannot see scale, so each row's length is "
                    f"held to the relative error --min-cosine {t.min_cosine:g} allows a row of one value)"
                )
        if (
            t.min_top1 is not None
            and self.top1_agreement is not None
            and not self.top1_agreement >= t.min_top1
        ):
            got, limit_text = shown_against(
                self.top1_agreement, t.min_top1, 2, percent=True, threshold_decimals=2
            )
            failures.append(
                f"top-1 agreement {got} < {limit_text}"
                + self._which(self.output_top1_agreement, self.top1_agreement)
            )
        for name, share, equal, n in zip(
            self.output_names,
            self.output_exact_match(),
            self.output_values_equal or [None] * len(self.output_names),
            self.output_values_compared or [None] * len(self.output_names),
        ):
            if share is not None and t.min_top1 is not None and not share >= t.min_top1:
                got, limit_text = shown_against(share, t.min_top1, 2, percent=True, threshold_decimals=2)
                failures.append(
                    f"output {name}: exact match {got} < {limit_text} (--min-top1; "
                    f"{equal} of {n} integer values equal)"
                )
        failures += [f for f in (c.failure() for c in self.low_precision) if f]
        return failures

    def _which(self, per_output: Sequence[float | None], worst: float) -> str:
        """' (output logits)' naming the output a figure is, when the model has several."""
        if len(self.output_names) < 2:
            return ""
        for name, value in zip(self.output_names, per_output):
            if value is not None and (value == worst or (math.isnan(value) and math.isnan(worst))):
                return f" (output {name})"
        return ""

    def to_json(self, thresholds: Thresholds | None = None) -> dict[str, Any]:
        failures = self.check(thresholds)

        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else float(x)

        limit = relative_error_limit((thresholds or Thresholds()).min_cosine)  # both kinds of row
        return {
            "max_abs_error": num(self.max_abs_error),
            "mean_abs_error": num(self.mean_abs_error),
            "cosine_min": num(self.cosine_min),
            "cosine_mean": num(self.cosine_mean),
            "top1_agreement": num(self.top1_agreement),
            # what the other model's gap between a tie's two classes could be; None: no N×classes output
            "top1_tie_limit": None if self.top1_agreement is None else self.top1_tie_limit,
            # the outputs top-1 was applied to ([]: none), whether --top1-outputs named them, in words
            "top1_outputs": self.top1_outputs(),
            "top1_selection": "given" if self.top1_given else "auto",
            "top1_note": self.top1_note(),
            # outputs of one value per row (relative error) and of integers (exact match); None: none
            "relative_error_max": num(self.relative_error_max),
            "relative_error_limit": None if self.relative_error_max is None else limit,
            "exact_match": num(self.exact_match),
            # outputs scored by cosine: the worst row's change of length, and what it may be
            "scale_change_max": num(self.scale_change_max),
            "scale_change_limit": None if self.scale_change_max is None else limit,
            "samples": self.n_samples,
            "rows": self.n_rows,
            "outputs": self.output_names,
            "source": self.source,
            "samples_chosen": self.samples_chosen or None,
            "random_inputs": self.random_inputs,
            "per_output": [
                {
                    "name": n,
                    "max_abs_error": num(e),
                    "max_abs_reference": num(r),
                    "cosine_min": num(c),
                    "top1_agreement": num(t),
                    "scored_by": how,
                    "relative_error": num(rel),
                    "exact_match": num(share),
                    "values_equal": equal,
                    "values_compared": compared,
                    "scale_change": num(change),
                    "norm_ratio": num(ratio),
                    "top1_tied_rows": tied,
                    "top1_skipped": skipped,
                }
                for n, e, r, c, t, how, rel, share, equal, compared, change, ratio, tied, skipped in zip(
                    self.output_names,
                    self.output_max_abs_error,
                    self.output_max_abs_reference,
                    self.output_cosine_min or [None] * len(self.output_names),
                    self.output_top1_agreement or [None] * len(self.output_names),
                    self.scored_by(),
                    self.output_relative_error or [None] * len(self.output_names),
                    self.output_exact_match(),
                    self.output_values_equal or [None] * len(self.output_names),
                    self.output_values_compared or [None] * len(self.output_names),
                    self.output_scale_change or [None] * len(self.output_names),
                    self.output_norm_ratio or [None] * len(self.output_names),
                    self.output_top1_tied or [None] * len(self.output_names),
                    self.output_top1_skipped or [None] * len(self.output_names),
                )
            ],
            # fp16/bf16 intermediates read back in their own type (verify); [] for an fp32 model
            "fp16_check": [c.to_json() for c in self.low_precision],
            "fp16_overflow": [
                {
                    "model": c.model,
                    "tensor": o.tensor,
                    "node": o.node,
                    "op": o.op,
                    "type": o.type,
                    "nonfinite_values": o.nonfinite_values,
                    "values": o.values,
                    "max_abs_fp32": num(o.max_abs_fp32),
                }
                for c in self.low_precision
                for o in c.overflows
            ],
            "passed": not failures,
            "failures": failures,
            "image_preprocess": self.image_preprocess,
        }


def _session(model: str | os.PathLike[str] | onnx.ModelProto, role: str, *, qdq: bool | None = None) -> Any:
    """A big model in memory goes to onnxruntime as a file (`cpu_session`'s `as_file`): as bytes,
    the session held them as long as it lived, and optimize's reference session lives the whole run."""
    return cpu_session(model, f"{role} model: onnxruntime cannot load it", as_file=True, qdq=qdq)


def has_qdq_nodes(model: str | os.PathLike[str] | onnx.ModelProto) -> bool:
    """Whether `model` (in memory, or its file) has QuantizeLinear/DequantizeLinear nodes
    (deployopt.model's `has_qdq`, `file_has_qdq`), in an If/Loop/Scan body or a model-local
    function too (`nested_qdq`: onnxruntime fuses them there as well): `cpu_session` computes such
    a model unfused. One quantized to a type deployopt refuses to price (W8A16) has them too; a
    file that cannot be read has none (its session says why in one line)."""
    from deployopt.model import file_has_qdq, has_qdq, nested_qdq

    try:
        if isinstance(model, onnx.ModelProto):
            return has_qdq(model) or nested_qdq(model)
        return Path(model).is_file() and file_has_qdq(model, nested=True)
    except ModelError:
        return True


def cpu_session(
    model: str | os.PathLike[str] | onnx.ModelProto,
    failure: str,
    *,
    optimize: bool = True,
    as_file: bool = False,
    qdq: bool | None = None,
) -> Any:
    """An onnxruntime CPU session that computes what the graph says (every check and ranking here
    uses one); a model onnxruntime cannot load (an op it lacks) is one ModelError line, `failure`
    and onnxruntime's first line. `optimize=False`: no graph optimizations (one quick run).
    `as_file`: a big model in memory goes to onnxruntime as a temporary file, not as bytes, though
    the caller keeps it (onnxruntime_compat.inference_session; a session kept long held them).

    A model with Q/DQ nodes (`qdq`; None: `has_qdq_nodes(model)`) runs at ORT_ENABLE_BASIC, its
    Q/DQ pairs computed as written: full optimization fuses DQ → Conv → Q into int8 kernels, which
    round otherwise than the float ops, and only where onnxruntime's checks let it (a padded conv's
    bias scale, not input × weight scale, stays unfused). An exact pad of a quantize_static
    MobileNetV2 so failed verify (max error 0.29, top-1 81 %), its original 0.23 off its own
    unfused run; BASIC (constant folding skips DQ, no fusion) gave 0.0. A float model keeps full
    optimization (speed); a comparison gives both of its sessions the same `qdq`."""
    from deployopt.onnxruntime_compat import import_onnxruntime

    ort = import_onnxruntime()  # without its import's telemetry line

    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # errors come back as exceptions; the log would repeat them
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif qdq if qdq is not None else has_qdq_nodes(model):
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    # On x86 CPUs without VNNI (AVX2, AVX-512F) onnxruntime's int8 convs sum product pairs in int16,
    # which saturates, and which pairs depends on the channel count. A Q/DQ model's convs stay
    # unfused (above), but a QOperator model's QLinearConv is an int8 kernel at every level: its
    # U8U8 kernels do not saturate; slower, but a fidelity check must see the edit, not the overflow.
    opts.add_session_config_entry("session.x64quantprecision", "1")
    from deployopt.onnxruntime_compat import inference_session

    try:
        if not isinstance(model, onnx.ModelProto) and not Path(model).is_file():
            raise no_such_file(Path(model), ModelError)
        return inference_session(ort, model, opts, ["CPUExecutionProvider"], as_file=as_file)
    except ModelError:
        raise
    except Exception as exc:  # onnxruntime raises its own exception types for bad models
        first = first_line(exc)
        raise ModelError(f"{failure}: {shorten(first)}") from None


#: onnxruntime's names of the floating input types, as numpy dtypes
_ORT_FLOAT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


#: ... and of the integer ones (a model that takes uint8 pixels and casts them itself)
_ORT_INT_TYPES = {
    f"tensor({t})": getattr(np, t) for t in ("uint8", "int8", "uint16", "int16", "uint32", "int32", "int64")
}


def input_dtypes(sess: Any) -> dict[str, Any]:
    """Each numeric (or bool) input's numpy dtype: calibration data is float32, an fp16 export takes
    float16, a model with its preprocessing inside takes uint8, a mask input bool."""
    types = {**_ORT_FLOAT_TYPES, **_ORT_INT_TYPES, "tensor(bool)": np.bool_}
    return {i.name: types[i.type] for i in sess.get_inputs() if i.type in types}


#: Random values for an integer input that is wider than 8 bits: indices, counts, sizes, which a
#: table of 16 entries takes (an 8-bit input, pixels, gets its type's whole range).
RANDOM_INT_RANGE = (0, 15)


def random_range(dtype: Any) -> tuple[int, int]:
    """The values random inputs give an integer or bool input of `dtype` (both ends included): a
    model with its preprocessing inside takes uint8 pixels, 0–255 (int8: −128–127); a wider
    integer type RANDOM_INT_RANGE; a bool False and True."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return 0, 1
    if dt.itemsize == 1:
        info = np.iinfo(dt)
        return int(info.min), int(info.max)
    return RANDOM_INT_RANGE


def random_values(rng: np.random.Generator, shape: Sequence[int], dtype: Any) -> np.ndarray:
    """Seeded random inputs of `dtype`: standard normals for a float type, integers (or bools) over
    `random_range` for another. Zeros, which integer inputs were fed, made every sample the same
    (nothing to compare between two models) and ran a data-dependent model (NMS) on nothing."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.standard_normal(list(shape)).astype(dt)
    lo, hi = random_range(dt)
    return rng.integers(lo, hi, size=list(shape), endpoint=True).astype(dt)


def _random_note(dtype: Any) -> str:
    lo, hi = random_range(dtype)
    return f"{np.dtype(dtype).name} {'False/True' if np.dtype(dtype).kind == 'b' else f'{lo}–{hi}'}"


def fit_input_types(calib: CalibrationSet, dtypes: dict[str, Any]) -> None:
    """Random inputs and images made, in place, into the values an integer (or bool) input of
    `dtypes` takes: the loader knows the inputs' shapes, not their types, and a model with its
    preprocessing inside (uint8 pixels, cast inside) was refused random inputs and images alike.
    Random ones become seeded `random_values` in its type (`source` says which); images become
    their raw 8-bit pixels (no --scale/--mean/--std: the model normalises them itself), recovered
    from the tensors (`_pixels`: the normalisation is exact to far below a pixel step), and
    `preprocess` then says so. Arrays, and what cannot be recovered, are left for the check."""
    for name, dtype in dtypes.items():
        dt = np.dtype(dtype)
        held = [s[name] for s in calib.samples if s.get(name) is not None]
        if dt.kind not in "iub" or not any(np.asarray(a).dtype.kind == "f" for a in held):
            continue
        if calib.random:
            for i, sample in enumerate(calib.samples):
                if name in sample and np.asarray(sample[name]).dtype.kind == "f":
                    rng = np.random.default_rng([calib.seed, i, zlib.crc32(name.encode())])
                    sample[name] = random_values(rng, np.shape(sample[name]), dt)
            calib.source = f"{calib.source[:-1]}; input {name!r}: {_random_note(dt)})"
        elif calib.preprocess is not None and dt.kind != "b" and np.can_cast(np.uint8, dt):
            pixels = [_pixels(np.asarray(a), calib.preprocess, calib.channels_last) for a in held]
            if any(p is None for p in pixels):
                continue  # not images as loaded here: the check says what the data holds
            for sample, p in zip((s for s in calib.samples if s.get(name) is not None), pixels):
                sample[name] = p
            calib.preprocess = replace(calib.preprocess, mean=(0.0,), std=(1.0,), scale=1.0)
            calib.notices.append(
                f"input {name!r} takes {dt.name}: images fed as their raw pixels, 0–255 (the model "
                "normalises them itself; --scale, --mean and --std do not apply)"
            )


def _pixels(arr: np.ndarray, preprocess: ImagePreprocess, channels_last: bool) -> np.ndarray | None:
    """The 8-bit pixels `preprocess_image` made the tensors `arr` from (`channels_last`: N×H×W×C),
    or None where `arr` is not such tensors (values off whole pixels by more than rounding)."""
    if arr.ndim != 4:
        return None
    axis = 3 if channels_last else 1
    channels = arr.shape[axis]
    if channels not in (1, 3):
        return None
    mean = _per_channel(preprocess.mean, channels, "mean")
    std = _per_channel(preprocess.std, channels, "std")
    if preprocess.channel_order.upper() == "BGR" and channels == 3:
        mean, std = mean[::-1], std[::-1]
    along = [channels if k == axis else 1 for k in range(4)]
    with np.errstate(over="ignore", invalid="ignore"):
        raw = (arr.astype(np.float64) * std.reshape(along) + mean.reshape(along)) / float(preprocess.scale)
    pixels = np.rint(raw)
    if not (np.isfinite(raw).all() and np.all(np.abs(raw - pixels) <= 0.01)):
        return None
    if pixels.size and (pixels.min() < 0 or pixels.max() > 255):
        return None
    return pixels.astype(np.uint8)


def _check_integer_inputs(calib: CalibrationSet, dtypes: dict[str, Any], role: str) -> None:
    """An integer input takes the integer values the data holds, a bool input 0/1 (or bools):
    random inputs and images are first made into such values (`fit_input_types`); normalised
    floats from arrays hold none, and casting them would feed noise (onnxruntime refused the
    float; INT8 calibration wrapped 0.5 to 0 and -1 to 255)."""
    fit_input_types(calib, dtypes)
    for name, dtype in dtypes.items():
        kind = np.dtype(dtype).kind
        if kind not in "iub":
            continue
        lo, hi = (0, 1) if kind == "b" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
        for sample in calib.samples:
            arr = sample.get(name)
            if arr is None or np.asarray(arr).dtype.kind == "b":  # bools are 0/1, which any of these takes
                continue
            arr = np.asarray(arr)
            if arr.size and not (np.all(arr == np.round(arr)) and arr.min() >= lo and arr.max() <= hi):
                raise DataError(
                    f"{calib.source}: {role} model input {name!r} takes {np.dtype(dtype).name}, the data "
                    f"holds other values (images are normalised floats): give .npy/.npz arrays of "
                    f"{np.dtype(dtype).name} values"
                )


def refuse_string_inputs(names: Sequence[str], role: str = "the") -> None:
    """A string input (`names`: a model's) takes text, and every sample fed here is numbers (random
    normals, or --calibration-data images and arrays, which must hold numbers): onnxruntime refused
    the float fed in its place with 'Unexpected input data type', which named neither the input nor
    what to do. One DataError naming the first, as an integer input fed random floats gets one."""
    if names:
        raise DataError(
            f"{role} model input {names[0]!r} takes strings, and the inputs fed here are numbers "
            "(random inputs, or --calibration-data images and arrays): export the model without the "
            "string input (handle the text outside the model)"
        )


def _string_inputs(sess: Any) -> list[str]:
    """An onnxruntime session's inputs of type string (`input_dtypes` leaves them out)."""
    return [i.name for i in sess.get_inputs() if i.type == "tensor(string)"]


def check_feedable(calib: CalibrationSet, model: onnx.ModelProto) -> None:
    """Before any work: the integer inputs of `model` (a graph input, not an initializer) get data
    they can take (random inputs and images made into it: `fit_input_types`), and it has no string
    input, or one DataError (optimize checks at load, not after the search)."""
    inits = {t.name for t in model.graph.initializer}
    strings = [
        i.name
        for i in model.graph.input
        if i.name not in inits and i.type.tensor_type.elem_type == onnx.TensorProto.STRING
    ]
    refuse_string_inputs(strings)
    dtypes = {}
    for inp in model.graph.input:
        elem = inp.type.tensor_type.elem_type
        if inp.name in inits or not elem:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
        if dtype.kind in "iub":
            dtypes[inp.name] = dtype.type
    _check_integer_inputs(calib, dtypes, "the")


def check_fed_types(calib: CalibrationSet, dtypes: dict[str, Any], role: str = "the") -> None:
    """Before the samples are cast to the types the inputs take (`dtypes`, numpy's), as INT8
    calibration casts them: an integer or bool input gets values it can hold (`_check_integer_inputs`,
    as verify checks), a float16 input none past its largest. Normalised images were calibrated on
    as uint8 0, 1, 2, 255 (wrapped), and 1e5 as inf. One DataError line."""
    _check_integer_inputs(calib, dtypes, role)
    for name, dtype in dtypes.items():
        dt = np.dtype(dtype)
        if dt.kind != "f" or dt.itemsize >= 4:
            continue
        top = float(np.finfo(dt).max)
        for sample in calib.samples:
            arr = None if sample.get(name) is None else np.asarray(sample[name])
            if arr is None or arr.dtype.kind != "f" or not arr.size:
                continue
            with np.errstate(over="ignore", invalid="ignore"):  # said below, in one line
                fed = arr.astype(dt)
            if not np.isfinite(fed).all() and np.isfinite(arr).all():
                biggest = float(np.max(np.abs(arr)))
                raise DataError(
                    f"{calib.source}: {role} model input {name!r} takes {dt.name}, whose largest value "
                    f"is {top:g}; the data holds {biggest:g}: check its scale"
                )


def _check_static_dims(calib: CalibrationSet, sess: Any, names: dict[str, str], role: str) -> None:
    """The data's shape against the dims the model file fixes: an --input-shape that changes a
    static dim (verify runs the files as they are) was onnxruntime's truncated 'Got invalid
    dimensions for input ... for the following indices'. An input the file gives no shape has no
    dims here (onnxruntime's [] for an unknown rank, as for a scalar, whose rank onnxruntime checks
    itself): --input-shape gives its shape; the line said it 'is  in the file'."""
    fixed = {i.name: i.shape for i in sess.get_inputs()}
    sample = calib.samples[0]
    for key, name in names.items():
        dims, arr = fixed.get(name), sample.get(key)
        if not dims or arr is None:
            continue
        if len(dims) != arr.ndim or any(isinstance(d, int) and d != a for d, a in zip(dims, arr.shape)):
            raise static_dims_error(role, name, dims, arr.shape)


def static_dims_error(role: str, name: str, dims: Sequence[Any], fed: Sequence[int]) -> DataError:
    """The one line for data (or an --input-shape) whose shape differs from dims the model file
    fixes: `dims` as the file gives them (a str or None for a dynamic one, shown "?")."""
    want = "×".join(str(d) if isinstance(d, int) else "?" for d in dims)
    return DataError(
        f"{role} model input {name!r} is {want} in the file, the data fed is {_fmt(tuple(fed))}; "
        "verify runs the files as they are, so --input-shape can set only dynamic (?) dims"
    )


def feed_inputs(
    sample: dict[str, np.ndarray], names: dict[str, str], dtypes: dict[str, Any]
) -> dict[str, np.ndarray]:
    """A session's feed from one sample: array `k` goes to input `names[k]`, in the dtype it takes.

    Values past a float16 input's range (±65504) were numpy's two-line RuntimeWarning on stderr
    ('overflow encountered in cast') and inf fed to the model: one DataError instead."""
    feed = {}
    for k, to in names.items():
        dtype = np.dtype(dtypes.get(to, sample[k].dtype))
        with np.errstate(over="ignore", invalid="ignore"):
            arr = sample[k].astype(dtype, copy=False)
        if dtype.kind == "f" and not np.isfinite(arr).all() and np.isfinite(sample[k]).all():
            biggest = float(np.max(np.abs(sample[k])))
            raise DataError(
                f"input {to!r} takes {dtype.name}, whose largest value is {float(np.finfo(dtype).max):g}; "
                f"the data holds {biggest:g}: check its scale"
            )
        feed[to] = arr
    return feed


def _run(sess: Any, feed: dict[str, np.ndarray], role: str, data: str | None = None) -> list[np.ndarray]:
    """The session's outputs for `feed`; a failure is one line with onnxruntime's reason (the op
    and node that failed, without its error code's prefix). It said "failed on the calibration
    inputs" where none were given (random ones) and the model fails on any input (a Gather index
    out of range baked into the graph), and the prefix ate the line's budget. `data`: where the
    inputs came from when they are the user's (CalibrationSet.source; None: random inputs): a node
    failing on them may be the data's fault (a class index past a table), so that line names the
    data and the node, not the model alone."""
    try:
        return [np.asarray(o) for o in sess.run(None, feed)]
    except Exception as exc:
        from deployopt.errors import onnxruntime_reason

        why = onnxruntime_reason(exc)
        if "Non-zero status code returned while running" in " ".join(str(exc).split()) and data:
            raise DataError(
                f"{role} model cannot run on {data}: onnxruntime fails on that data in {why}: "
                "check the data (a value out of the range that node takes, e.g. an index) or that node"
            ) from None
        if "Non-zero status code returned while running" in " ".join(str(exc).split()):
            raise DataError(
                f"{role} model cannot run: onnxruntime fails inside it, in {why} (its inputs were "
                "taken: check that node of the model)"
            ) from None
        raise DataError(f"{role} model cannot run on the inputs fed: {why}") from None


def _data(calib: CalibrationSet) -> str | None:
    """What `_run` takes as `data`: the source of the user's inputs, None for random ones."""
    return None if calib.random else calib.source


def _check_finite_reference(
    outputs: list[np.ndarray],
    calib: CalibrationSet,
    model: str | os.PathLike[str] | onnx.ModelProto | None = None,
) -> None:
    """The reference's outputs must be finite to compare against: values that overflow inside the
    model (an image fed unnormalised into an fp16 export, a stray 1e38) made every candidate
    "fail" (verify: exit 1; optimize: an internal error after the whole search). Where the
    reference `model`'s weights hold NaN (a diverged checkpoint), that is said, naming the weight:
    no data can help, and the line sent the user to give or rescale --calibration-data."""
    bad = sum(int(np.count_nonzero(~np.isfinite(o))) for o in outputs if o.dtype.kind in "fc")
    if not bad:
        return
    if model is not None:  # only on this failure: the weights are read (again) for it alone
        from deployopt.model_checks import describe_nonfinite, nonfinite_weights

        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(os.fspath(model))
        found = nonfinite_weights(proto)
        if found:
            raise ModelError(
                f"the reference model's outputs hold {bad} NaN or infinite value(s) on {calib.source}, "
                f"and its weights do ({describe_nonfinite(found)}): no data can fix that; fix or "
                "re-export the checkpoint"
            )
    if calib.random:
        hint = "give --calibration-data with the values the model takes"
    else:
        hint = "nothing to compare against: check the data's scale and the model"
    raise DataError(
        f"{calib.source}: the reference model's outputs hold {bad} NaN or infinite value(s) on this "
        f"data; {hint}"
    )


def check_reference_finite(
    model: str | os.PathLike[str] | onnx.ModelProto | ReferenceRun, calib: CalibrationSet
) -> None:
    """Before the search: run the reference once over `calib`, so optimize stops in one line on
    data the model cannot compute (non-finite outputs), not after every candidate was timed. Given
    a ReferenceRun, its session and its outputs are the ones kept for every later comparison (the
    check made its own session and ran each sample again: 4.4 s of a YOLOv8x optimize)."""
    ref_run = model if isinstance(model, ReferenceRun) else ReferenceRun(model, keep=False)
    for sample in calib.samples:
        _check_finite_reference(ref_run.outputs(sample, _data(calib)), calib, ref_run.source)


def _cosine_and_ratio(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """The cosine of reference row `a` and candidate row `b`, and ‖b‖ / ‖a‖: the cosine is their
    directions alone, so a candidate 5× the reference passed at 1.0; the ratio is the scale it
    cannot see (1.0 for two zero rows, inf for a zero reference row, whose cosine is 0 already)."""
    # an infinite candidate value makes the cosine NaN, a failure the report names: numpy's
    # two-line RuntimeWarning (inf · 0, inf / inf) on stderr said nothing more
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
        if na == 0.0 and nb == 0.0:
            return 1.0, 1.0
        if na == 0.0:
            return 0.0, math.inf
        if nb == 0.0:
            return 0.0, 0.0
        return float(np.dot(a, b) / (na * nb)), nb / na


#: the epsilons of the low-precision floats a model may compute in (fp16 2^-10, bf16 2^-7)
_LOW_EPS = {"fp16": 2.0**-10, "bf16": 2.0**-7}


def _tie_epsilon(dtypes: Sequence[Any], low_types: Collection[str] = ()) -> float:
    """The epsilon of the coarsest float among the outputs' `dtypes` and the models' fp16/bf16
    types (`_low_types_held`): an fp16 model with fp32 outputs (`deployopt fp16`'s) rounds its
    logits to fp16's steps, and a saturated fp16 sigmoid ties at 1.0 as an fp32 one does."""
    eps = [float(np.finfo(d).eps) for d in dtypes if np.dtype(d).kind == "f"]
    eps += [_LOW_EPS[t] for t in low_types if t in _LOW_EPS]
    return max(eps, default=float(np.finfo(np.float32).eps))


def _top1_agreeing(
    ref: np.ndarray, cand: np.ndarray, eps: float, tie_other: float = TOP1_TIE_OTHER
) -> tuple[int, int]:
    """Of the rows of two [rows, classes] outputs, how many agree on the top class, and how many
    of those agree only through a tie: a row agrees where the argmaxes are equal, or where one
    model ties the two top classes (the gap within TOP1_TIE_EPS × `eps` × the larger |value| of
    the two) and the other ranks them close too (its gap within `tie_other` of the larger of its two,
    at least RELATIVE_FLOOR of its row's largest |value|; `top1_tie_limit` of the min cosine in
    force, TOP1_TIE_OTHER at the default's). A sigmoid head saturating at
    exactly 1.0 has several tied maxima, whose argmax (the first) moved between them with a 1e-7
    change of the weights: top-1 98.44 % and FAILED at max abs error 1.1e-5, cosine
    0.9999999999. The other model's gap is checked since a tie alone let a clear winner through
    (an fp16 candidate lifting the reference's 11.96 past its 12.0 to 14.96: top-1 100 %); the
    tie is the pair's own scale, not the row's (a -60 logit widened fp16's window to 0.23). A NaN
    or infinite row ties nothing."""
    r, c = ref.astype(np.float64), cand.astype(np.float64)
    ra, ca = np.argmax(r, axis=1), np.argmax(c, axis=1)
    rows = np.arange(r.shape[0])
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(np.max(np.abs(r), axis=1)) & np.isfinite(np.max(np.abs(c), axis=1))

    def gap_within(
        x: np.ndarray, top: np.ndarray, other: np.ndarray, share: float, floor: float
    ) -> np.ndarray:
        """x's lead of class `top` over class `other`, per row, within `share` of the larger
        |value| of the two (at least `floor` of the row's largest |value|)."""
        with np.errstate(invalid="ignore", over="ignore"):
            hi, lo = x[rows, top], x[rows, other]
            scale = np.maximum(np.maximum(np.abs(hi), np.abs(lo)), floor * np.max(np.abs(x), axis=1))
            return hi - lo <= share * scale

    def tied(x: np.ndarray, top: np.ndarray, other: np.ndarray) -> np.ndarray:
        return gap_within(x, top, other, TOP1_TIE_EPS * eps, 0.0)

    def close(x: np.ndarray, top: np.ndarray, other: np.ndarray) -> np.ndarray:
        return gap_within(x, top, other, tie_other, RELATIVE_FLOOR)

    same = ra == ca
    by_tie = finite & ((tied(r, ra, ca) & close(c, ca, ra)) | (tied(c, ca, ra) & close(r, ra, ca)))
    agree = same | by_tie
    return int(np.count_nonzero(agree)), int(np.count_nonzero(agree & ~same))


def _channel_scaled(ref: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One batch row of an output, each channel divided by the reference's RMS of that channel,
    when the row has channels and positions: a feature map [C, H, W], a detector's
    [4 + classes, anchors] (YOLOv8) or [anchors, 5 + classes] (YOLOv5/v7: a 2-D row longer than
    wide has its channels last). Channels can carry different units: a YOLO head's box channels
    are pixels, its class scores 0–1, so unscaled the boxes make up ~99.99 % of the norm and a
    cosine would not see the scores change at all. A row of logits ([classes], or [classes, 1, 1]:
    one position per channel) is left as it is."""
    ref, cand = ref.astype(np.float64), cand.astype(np.float64)
    if ref.ndim == 2 and ref.shape[1] < ref.shape[0]:
        # [anchors, 4 + 1 + classes] (YOLOv5/v7 exports): the features are the last axis
        ref, cand = ref.T, cand.T
    if ref.ndim < 2 or ref.shape[0] < 2 or ref[0].size == 1:
        # one position per channel ([classes, 1, 1]: SqueezeNet/Caffe logits) is a row of logits:
        # scaled, every logit was divided by its own magnitude
        return ref.ravel(), cand.ravel()
    flat_r, flat_c = ref.reshape(ref.shape[0], -1), cand.reshape(cand.shape[0], -1)
    rms = np.sqrt(np.mean(flat_r**2, axis=1, keepdims=True))
    rms[rms == 0.0] = 1.0  # an all-zero reference channel: compare it unscaled
    return (flat_r / rms).ravel(), (flat_c / rms).ravel()


def _input_batch(sample: dict[str, np.ndarray], names: Sequence[str], outputs: Sequence[np.ndarray]) -> int:
    """The batch `sample` feeds: of the inputs' dim 0s (`names`, the model's), the one the most
    `outputs` have first; on a tie, that of the input of the most dims; 1 where all are scalars. An
    output is compared per row (per image) where its dim 0 is this (`_per_row`). Taken from the
    outputs alone, one output without it (a 0-d mean beside [N, 10] logits) made every output
    scored per batch, and a bad edit of one image in each passed; from the first input, a `thr [1]`
    before `x [4, 16]` did the same; from the input of the most dims, a `lut [16, 2, 2]` beside
    `x [4, 16]`, or an NHWC image of batch 1 beside [4, 16] features, hid the rows of a [4, 10]."""
    fed = [sample[n] for n in names if n in sample and np.ndim(sample[n]) >= 1]
    if not fed:
        return 1
    firsts = [o.shape[0] for o in outputs if np.ndim(o) >= 1]
    best = max(fed, key=lambda a: (firsts.count(a.shape[0]), np.ndim(a), a.shape[0]))
    return int(best.shape[0])


def _per_row(output: np.ndarray, batch: int) -> bool:
    """Whether `output` has the batch first, so is compared row by row; else it is one whole."""
    return output.ndim >= 1 and output.shape[0] == batch


def _scoring(outputs: list[np.ndarray], batch: int | None = None) -> list[str]:
    """How compare_models scores each output, from one sample's reference outputs: EXACT for
    integers and bools (labels, indices, counts: ArgMax, TopK, NMS), where a cosine of class ids
    means nothing; RELATIVE where each row it compares holds one value ([N, 1] probabilities or
    scores, a [1] or scalar output), whose cosine is ±1 by its sign alone; COSINE for the rest.
    `batch`: the inputs' (`_input_batch`); None: the first output's dim 0. Each output is judged
    on its own: a row is a batch row where its dim 0 is the batch, else the whole output."""
    if batch is None:
        batch = outputs[0].shape[0] if outputs and outputs[0].ndim >= 1 else 1
    kinds = []
    for o in outputs:
        per_row = o.size // batch if batch and _per_row(o, batch) else o.size
        kinds.append(EXACT if o.dtype.kind in "biu" else RELATIVE if per_row == 1 else COSINE)
    return kinds


# a row of a RELATIVE output is measured against at least this share of the output's largest
# |reference|: a value near zero (a score crossing it) is not held to its own tiny magnitude
RELATIVE_FLOOR = 0.01


def _relative_error(ref: np.ndarray, cand: np.ndarray) -> tuple[float, tuple[float, float] | None]:
    """An output of one value per row, every row over the calibration set: the worst row's
    |reference − candidate| / |reference| (the row's own magnitude, as a cosine is a row's own
    direction; at least RELATIVE_FLOOR of the output's largest |reference|), and that row's
    (reference, candidate). An all-zero reference: 0 where the candidate is zero too, else inf."""
    ref, cand = ref.astype(np.float64).ravel(), cand.astype(np.float64).ravel()
    if not ref.size:
        return 0.0, None
    diff = np.abs(ref - cand)
    scale = np.maximum(np.abs(ref), RELATIVE_FLOOR * float(np.max(np.abs(ref))))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(diff == 0.0, 0.0, diff / scale)  # a NaN candidate stays NaN, the worst
    worst = int(np.argmax(np.where(np.isnan(rel), np.inf, rel)))
    return float(rel[worst]), (float(ref[worst]), float(cand[worst]))


def _logits(out: np.ndarray, batch: int) -> bool:
    """Whether an output is N×classes logits, top-1 scored: its dim 0 the input's batch, or a
    divisor of it (a clip of 8 frames fed as a batch of 8, averaged into one row of logits: TSN),
    wherever it stands; N×classes×1×1 (SqueezeNet/Caffe) too. A [K, 4] box list (an SSD's after
    its NMS, K more than the batch) is not: its argmax over 4 coordinates was scored as "top-1
    agreement", its K boxes as rows."""
    rows = out.shape[0] if out.ndim >= 2 else 0
    return rows > 0 and batch % rows == 0 and out.shape[1] > 1 and all(d == 1 for d in out.shape[2:])


# ---------------------------------------------------------------------------- which outputs get top-1
#: top-1 is the argmax of a row of class scores; its phrase where no output is held to it
TOP1_NOT_APPLIED = "top-1: not applied (no class-score output)"
#: words of an output's name (split at non-letters and case changes) that say what it is when a
#: model has several outputs: a box, an embedding, a feature vector, coordinates. Their argmax is no
#: class, so top-1 is not applied to them by default, unless the name has a CLASS_WORDS word too
NOT_CLASS_WORDS = frozenset(
    {"box", "boxes", "bbox", "bboxes", "loc", "reg", "coord", "coords", "emb", "embed", "embeds"}
    | {"embedding", "embeddings", "feat", "feats", "feature", "features", "pooled", "pooler", "landmark"}
    | {"landmarks"}
    | {"keypoint", "keypoints", "kpt", "kpts"}
)
CLASS_WORDS = frozenset(
    {"logit", "logits", "cls", "class", "classes", "classifier", "score", "scores", "prob", "probs"}
    | {"label", "labels", "probabilities", "softmax"}
)
#: an output's rows are L2-normalised (an embedding) where each row's norm is within this of 1 in
#: every sample (fp16's rounding moves a unit norm by ~5e-4 at most) ...
UNIT_NORM_TOL = 1e-3
#: ... and some row's largest |value| is below this: a softmax row of norm ≈ 1 is one-hot (its
#: largest value ≥ 0.998), which top-1 must keep scoring
UNIT_NORM_SPREAD = 0.99


def parse_top1_outputs(text: str | None) -> list[str] | None:
    """--top1-outputs as given: None (not given: chosen per output, `Top1Choice`), [] for `none`,
    else the names (NAME[,NAME...], each once)."""
    if text is None:
        return None
    if text.strip().lower() == "none":
        return []
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise DataError(f"--top1-outputs {text!r}: expected NAME[,NAME...] (the class-score outputs) or none")
    return list(dict.fromkeys(names))


def check_top1_outputs(given: Sequence[str] | None, outputs: Sequence[str]) -> None:
    """One DataError naming the model's outputs where --top1-outputs names one it does not have."""
    unknown = [n for n in given or () if n not in outputs]
    if unknown:
        raise DataError(
            f"--top1-outputs {', '.join(unknown)}: no such output; "
            f"the model's outputs are {', '.join(outputs)}"
        )


def _name_words(name: str) -> set[str]:
    """`/head/boxReg_out` → {head, box, reg, out}: the words an output's name is made of."""
    import re

    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return {w.lower() for w in re.split(r"[^A-Za-z]+", spaced) if w}


class Top1Choice:
    """Which outputs top-1 scores (compare_models, identical_report). `given` (--top1-outputs):
    exactly those, each of which must be [N, classes] floats; None: every [N, classes] output
    (`_logits`) but those that cannot be class scores. Beside other float outputs, unless its name
    says class scores (CLASS_WORDS: a binary classifier's `logits` beside its `probs` is one): one
    of 2–4 values a row (a box, an xy, a wh) and one whose name says box/embedding/feature
    (NOT_CLASS_WORDS);
    with any number: one whose rows are all L2-normalised (an embedding, `scores`). The argmax of
    a box or an embedding is no class: a harmless trim that moved an embedding's argmax was
    refused ("top-1 agreement 25.00% < 99.00% (output emb)"). A single [N, K] output stays top-1
    scored, as before."""

    def __init__(self, names: Sequence[str], given: Sequence[str] | None) -> None:
        check_top1_outputs(given, names)
        self.names = list(names)
        self.given = None if given is None else set(given)
        #: per output, why an [N, classes] one is not top-1 scored (None: scored, or not that shape)
        self.skipped: list[str | None] = [None] * len(names)
        self._unit = [True] * len(names)  # every row's L2 norm ≈ 1 so far
        self._spread = [False] * len(names)  # some row not one-hot

    def first(self, outputs: Sequence[np.ndarray], kinds: Sequence[str], batch: int) -> None:
        """Read the first sample's reference outputs: a given output that is no [N, classes] of
        floats is a DataError; by default, the shape and name rules."""
        floats = sum(kind != EXACT for kind in kinds)
        for i, (name, out) in enumerate(zip(self.names, outputs)):
            shaped = kinds[i] == COSINE and _logits(out, batch)
            if self.given is not None:
                if name in self.given and not shaped:
                    what = "integers" if kinds[i] == EXACT else _fmt(out.shape)
                    raise DataError(
                        f"--top1-outputs {name}: output {name} is {what}, not [N, classes] scores; "
                        "top-1 takes the argmax of a row of class scores"
                    )
                continue
            if not shaped:
                continue
            k = out.shape[1]
            words = _name_words(name)
            # beside another float output (an int64 label beside it is no box; an [N, 1] score is
            # one), a name that says
            # class scores keeps it scored: a 2–4-class classifier exported with its softmax too
            if floats < 2 or words & CLASS_WORDS:
                continue
            if 2 <= k <= 4:
                self.skipped[i] = f"[N, {k}] beside other outputs: a box or coordinates"
            elif words & NOT_CLASS_WORDS:
                self.skipped[i] = f"its name says {sorted(words & NOT_CLASS_WORDS)[0]}"

    def scores(self, i: int, out: np.ndarray, batch: int) -> bool:
        """Whether output `i` of a sample is top-1 scored (read as it goes: its rows' norms)."""
        if self.given is not None:
            return self.names[i] in self.given and _logits(out, batch)
        if self.skipped[i] is not None or not _logits(out, batch):
            return False
        rows = out.reshape(out.shape[0], -1).astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            norms = np.linalg.norm(rows, axis=1)
            self._unit[i] = self._unit[i] and bool(np.all(np.abs(norms - 1.0) <= UNIT_NORM_TOL))
            self._spread[i] = self._spread[i] or bool(np.any(np.max(np.abs(rows), axis=1) < UNIT_NORM_SPREAD))
        return True

    def finish(self, counted: Sequence[int]) -> list[bool]:
        """Per output, whether its top-1 figure stands (`counted`: rows scored): an output whose rows
        were L2-normalised in every sample is an embedding, its figure dropped."""
        keep = []
        for i, n in enumerate(counted):
            if n and self.given is None and self._unit[i] and self._spread[i]:
                self.skipped[i] = "its rows are L2-normalised, norm 1 in every row: an embedding"
                n = 0
            keep.append(bool(n))
        return keep


def top1_note(
    names: Sequence[str], applied: Sequence[str], skipped: Sequence[str | None], given: bool
) -> str:
    """Which outputs top-1 was applied to, in one line: `top-1: applied to logits; left out: emb
    (its rows are L2-normalised ...)`, or TOP1_NOT_APPLIED, with the outputs left out and why."""
    if given:
        if applied:
            return f"top-1: applied to {', '.join(applied)} (--top1-outputs)"
        return f"{TOP1_NOT_APPLIED} (--top1-outputs none)"
    left = ", ".join(f"{n} ({why})" for n, why in zip(names, skipped) if why)
    if applied:
        return f"top-1: applied to {', '.join(applied)}" + (f"; left out: {left}" if left else "")
    if not left:
        return TOP1_NOT_APPLIED
    return f"{TOP1_NOT_APPLIED}; left out: {left}; name class-score outputs with --top1-outputs"


def journaled_top1_outputs(data: dict[str, Any]) -> list[str]:
    """The outputs a report's JSON (FidelityReport.to_json, as journaled) held to top-1: its
    `top1_outputs`, or, in a report from before that key, those with a top-1 figure."""
    if isinstance(data.get("top1_outputs"), list):
        return [str(n) for n in data["top1_outputs"]]
    return [
        str(p.get("name"))
        for p in data.get("per_output") or []
        if isinstance(p, dict) and p.get("top1_agreement") is not None
    ]


class ReferenceRun:
    """The reference model's onnxruntime session and its outputs per sample, made once: optimize
    compares every candidate with the same input model on the same samples, and built a session
    (serializing the whole model: 45 s of 158 for a wide ResNet50's trim search) and ran the
    reference again for each of them.

    `keep=False`: the outputs are not kept, for one comparison that scores each sample as it goes
    (compare_models given a model: verify). Kept, a segmentation model's outputs for 512 images
    (2.1 GB) were all held to the end of verify, which reads each once."""

    def __init__(
        self, model: str | os.PathLike[str] | onnx.ModelProto, *, keep: bool = True, qdq: bool | None = None
    ) -> None:
        #: whether the session computes Q/DQ unfused (`cpu_session`'s `qdq`): candidates get the same
        self.qdq = has_qdq_nodes(model) if qdq is None else qdq
        self.session = _session(model, "reference", qdq=self.qdq)
        #: the model: `low_types` reads its types once, and what its outputs' failures say names
        #: its weights (`_check_finite_reference`)
        self.source = model
        self._low_types: set[str] | None = None
        self.keep = keep
        self._outputs: dict[int, tuple[Any, list[np.ndarray]]] = {}

    @property
    def low_types(self) -> set[str]:
        """The fp16/bf16 types the model holds (`_file_low_types`), read once when first asked:
        top-1's ties are judged at their epsilon (`_tie_epsilon`)."""
        if self._low_types is None:
            self._low_types = _file_low_types(self.source)
        return self._low_types

    def outputs(self, sample: dict[str, np.ndarray], data: str | None = None) -> list[np.ndarray]:
        """The outputs for `sample`, its arrays fed to the inputs of the same names (as
        compare_models feeds the reference); `data` as `_run` takes it."""
        names = {i.name: i.name for i in self.session.get_inputs()}
        return self.run(sample, feed_inputs(sample, names, input_dtypes(self.session)), data)

    def checked_outputs(self, sample: dict[str, np.ndarray], calib: CalibrationSet) -> list[np.ndarray]:
        """`outputs(sample)` for a comparison over `calib`: a sample without an array for every
        input is a DataError naming them, and outputs that are not finite are one
        (`_check_finite_reference`). compare_models and identical_report run each sample so."""
        missing = [i.name for i in self.session.get_inputs() if i.name not in sample]
        if missing:
            raise DataError(f"calibration samples have no array for input(s) {', '.join(missing)}")
        out = self.outputs(sample, _data(calib))
        _check_finite_reference(out, calib, self.source)
        return out

    def run(
        self, sample: dict[str, np.ndarray], feeds: dict[str, np.ndarray], data: str | None = None
    ) -> list[np.ndarray]:
        """The outputs for `sample` (fed as `feeds`), computed the first time it is seen (every
        time, where they are not kept); `data` as `_run` takes it."""
        if not self.keep:
            return _run(self.session, feeds, "reference", data)
        kept = self._outputs.get(id(sample))
        if kept is None or kept[0] is not sample:  # the sample is kept too: its id stays its own
            kept = (sample, _run(self.session, feeds, "reference", data))
            self._outputs[id(sample)] = kept
        return kept[1]


def compare_models(
    reference: str | os.PathLike[str] | onnx.ModelProto | LoadedModel | ReferenceRun,
    candidate: str | os.PathLike[str] | onnx.ModelProto | LoadedModel,
    calib: CalibrationSet,
    *,
    low_types: Collection[str] | None = None,
    min_cosine: float | None = Thresholds().min_cosine,
    top1_outputs: Sequence[str] | None = None,
) -> FidelityReport:
    """Run both models on onnxruntime CPU over `calib` and compare their outputs.

    Outputs are matched by name when both models have the same names (in any order: a re-export
    may list them otherwise), else by position (names may differ after an edit); a different
    output count or shape is a DataError. Cosine similarity is per batch row (per image) and per output, each
    output whose dim 0 is the input's batch (`_input_batch`) compared row by row and any other (a 0-d
    mean, a box list) whole, in every row of its batch; each
    channel of an output with channels and positions scaled by the reference's RMS
    (`_channel_scaled`: boxes in pixels must not drown class scores), and a row's cosine is its
    worst output's; top-1 agreement is over the batch rows of every N×classes (or N×classes×1×1)
    output, and the worst output's counts. (One cosine over all outputs joined let a segmentation
    map outweigh the 10 logits beside it: a trim that took the logits to cosine 0.95 passed at
    0.99998, and top-1, read off the first output only, was never computed for logits second.)
    Errors are computed in float64.

    Outputs a per-row cosine cannot judge are scored otherwise (`_scoring`, `output_scored_by`):
    integers and bools (labels, indices, counts) by the share of their values equal, held to the
    top-1 threshold, as an in-graph ArgMax is top-1; floats with one value per row (an [N, 1]
    probability or score) by the worst row's relative error, |reference − candidate| over the
    row's own |reference| (`_relative_error`: as a cosine is each row's own direction; at least 1 %
    of the output's largest |reference|, so a value crossing zero is not held to its tiny
    magnitude), held to `relative_error_limit(min_cosine)`, the difference two equal-length vectors
    at that cosine have. Neither counts in the cosine: a one-value row's cosine is ±1 by its sign
    alone, so a sigmoid at 0.508 for the reference's 0.99999, an ArgMax agreeing on 0 of 16
    labels, and a trim moving a probability by 20–60 % of itself all passed at 1.0.

    A cosine is a row's direction alone: each COSINE row's length, ‖candidate‖ / ‖reference‖ over
    the row the cosine reads, is kept too (`output_scale_change`), held to the same
    `relative_error_limit` as a row of one value (every output 5× the reference's passed at
    cosine 1.0, top-1 100 %). A top-1 row whose argmaxes differ agrees where one model ties the
    two classes and the other ranks them close (`_top1_agreeing`: within TOP1_TIE_EPS epsilons of
    the coarsest float either model holds, `low_types` their fp16/bf16 types, read from the models
    when None; the other within `top1_tie_limit(min_cosine)`, the min cosine the report will be
    checked against: 4.47 % at the default 0.999, 14.1 % at trim's 0.99).

    `top1_outputs` (--top1-outputs): the outputs that are class scores, top-1 scored; None: every
    N×classes output but those that cannot be class scores (`Top1Choice`: boxes, embeddings).
    Either model may be the LoadedModel load_model returns (its `.model` is compared).
    """
    if not isinstance(reference, ReferenceRun):
        reference = model_argument(reference, "reference")
    candidate = model_argument(candidate, "candidate")
    check_calibration_set(calib)
    if not calib.samples:
        raise DataError("no calibration samples to compare on")
    # a reference of its own is read once per sample: its outputs go with the sample's scores. Both
    # sessions compute Q/DQ alike (`cpu_session`): unfused where either model has it; a ReferenceRun's
    # candidates (optimize's edits of its model) as it does
    if isinstance(reference, ReferenceRun):
        ref_run = reference
    else:
        ref_run = ReferenceRun(reference, keep=False, qdq=True if has_qdq_nodes(candidate) else None)
    if low_types is None:
        low_types = ref_run.low_types | _file_low_types(candidate)
    # a Q/DQ candidate is computed unfused whatever the reference: a kept ReferenceRun of a float
    # model (fully optimized: float ops only) gave a Q/DQ candidate its fused int8 kernels
    cand_qdq = True if ref_run.qdq else None
    ref_s, cand_s = ref_run.session, _session(candidate, "candidate", qdq=cand_qdq)
    ref_names = [o.name for o in ref_s.get_outputs()]
    cand_names = [o.name for o in cand_s.get_outputs()]
    tie_other = top1_tie_limit(min_cosine)
    choice = Top1Choice(ref_names, top1_outputs)  # an unknown name: said before any run
    if len(ref_names) != len(cand_names):
        raise DataError(
            f"reference has {len(ref_names)} outputs ({', '.join(ref_names)}), "
            f"candidate has {len(cand_names)} ({', '.join(cand_names)})"
        )
    # the same names in another order: pair by name (by position, identical models compared as
    # cosine -1 and top-1 0 %, the failure blamed on the wrong output)
    order = (
        [cand_names.index(n) for n in ref_names]
        if set(ref_names) == set(cand_names)
        and ref_names != cand_names
        and len(set(ref_names)) == len(ref_names)
        else None
    )
    if order is not None:
        cand_names = [cand_names[j] for j in order]
    ref_inputs = [i.name for i in ref_s.get_inputs()]
    cand_inputs = [i.name for i in cand_s.get_inputs()]
    if len(ref_inputs) != len(cand_inputs):
        raise DataError(f"reference has inputs {ref_inputs}, candidate has {cand_inputs}")
    rename = dict(zip(ref_inputs, cand_inputs)) if set(ref_inputs) != set(cand_inputs) else {}
    ref_types, cand_types = input_dtypes(ref_s), input_dtypes(cand_s)
    # calibration array → the input it feeds, in each model
    ref_input, cand_input = {n: n for n in ref_inputs}, {n: rename.get(n, n) for n in ref_inputs}
    refuse_string_inputs(_string_inputs(ref_s), "reference")
    refuse_string_inputs(_string_inputs(cand_s), "candidate")
    _check_integer_inputs(calib, ref_types, "reference")
    _check_static_dims(calib, ref_s, ref_input, "reference")
    _check_static_dims(calib, cand_s, cand_input, "candidate")
    from_cand = {c: r for r, c in rename.items()}  # the calibration arrays are keyed by reference names
    _check_integer_inputs(calib, {from_cand.get(n, n): t for n, t in cand_types.items()}, "candidate")

    max_err, err_sum, n_el = 0.0, 0.0, 0
    out_err, out_ref = [0.0] * len(ref_names), [0.0] * len(ref_names)
    cosines: list[float] = []
    kinds: list[str] = []  # per output, how it is scored (`_scoring`), from the first sample
    out_cos: list[float | None] = []  # per output, its worst row's cosine (None: not COSINE)
    # per COSINE output, its worst row's |‖cand‖ / ‖ref‖ − 1| and that ratio
    out_scale: list[float | None] = [None] * len(ref_names)
    out_ratio: list[float | None] = [None] * len(ref_names)
    agree, rows_top1 = [0] * len(ref_names), [0] * len(ref_names)
    tied = [0] * len(ref_names)  # rows agreeing through a tie alone
    equal, compared = [0] * len(ref_names), [0] * len(ref_names)  # EXACT outputs' values
    rel_pairs: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}  # RELATIVE outputs' values
    n_rows = 0
    for sample in calib.samples:
        ref_out = ref_run.checked_outputs(sample, calib)
        if not kinds:
            kinds = _scoring(ref_out, _input_batch(sample, ref_inputs, ref_out))
            out_cos = [1.0 if k == COSINE else None for k in kinds]
            choice.first(ref_out, kinds, _input_batch(sample, ref_inputs, ref_out))
        by_cos = [i for i, k in enumerate(kinds) if k == COSINE]
        cand_out = _run(cand_s, feed_inputs(sample, cand_input, cand_types), "candidate", _data(calib))
        if order is not None:
            cand_out = [cand_out[j] for j in order]
        for i, (r, c) in enumerate(zip(ref_out, cand_out)):
            if r.shape != c.shape:
                raise DataError(
                    f"output {i} ({ref_names[i]} vs {cand_names[i]}): reference shape {_fmt(r.shape)}, "
                    f"candidate {_fmt(c.shape)}"
                )
        diffs = [np.abs(r.astype(np.float64) - c.astype(np.float64)) for r, c in zip(ref_out, cand_out)]
        for i, (d, r) in enumerate(zip(diffs, ref_out)):
            if d.size:
                m = float(np.max(d))
                max_err = m if (math.isnan(m) or not max_err >= m) else max_err
                out_err[i] = m if (math.isnan(m) or not out_err[i] >= m) else out_err[i]
                out_ref[i] = max(out_ref[i], float(np.max(np.abs(r.astype(np.float64)))))
                err_sum += float(np.sum(d))
                n_el += d.size
        # per batch row of the input, each output with the batch first; one without it (a 0-d mean,
        # a [K, 6] box list) is compared whole and counts in every row of the batch it came from
        batch = _input_batch(sample, ref_inputs, ref_out)
        by_row = [i for i in by_cos if _per_row(ref_out[i], batch)]
        whole = {
            i: _cosine_and_ratio(
                ref_out[i].ravel().astype(np.float64), cand_out[i].ravel().astype(np.float64)
            )
            for i in by_cos
            if i not in by_row
        }
        rows = [
            {
                **{i: _cosine_and_ratio(*_channel_scaled(ref_out[i][row], cand_out[i][row])) for i in by_row},
                **whole,
            }
            for row in range(batch)
        ]
        n_rows += batch
        for per in rows:  # each row's cosine per COSINE output; the row counts its worst
            for i, (x, ratio) in per.items():
                out_cos[i] = x if out_cos[i] is None else _worse(out_cos[i], x)
                change = abs(ratio - 1.0)
                if out_scale[i] is None or _nan_last(change) > _nan_last(out_scale[i]):
                    out_scale[i], out_ratio[i] = change, ratio
            if per:
                cosines.append(min((x for x, _ in per.values()), key=_nan_first))
        for i, (r, c) in enumerate(zip(ref_out, cand_out)):
            if kinds[i] == EXACT:
                equal[i] += int(np.count_nonzero(r == c))
                compared[i] += r.size
            elif kinds[i] == RELATIVE:
                rel_pairs.setdefault(i, []).append((r.ravel(), c.ravel()))
            elif choice.scores(i, r, batch):
                r, c = r.reshape(r.shape[:2]), c.reshape(c.shape[:2])
                eps = _tie_epsilon([r.dtype, c.dtype], low_types)
                agreeing, by_tie = _top1_agreeing(r, c, eps, tie_other)
                agree[i] += agreeing
                tied[i] += by_tie
                rows_top1[i] += r.shape[0]
    cos = np.array(cosines)
    rows_top1 = [n if keep else 0 for n, keep in zip(rows_top1, choice.finish(rows_top1))]
    top1 = [a / n if n else None for a, n in zip(agree, rows_top1)]
    scored = [t for t in top1 if t is not None]
    any_cos = COSINE in kinds
    relative = {
        i: _relative_error(np.concatenate([r for r, _ in pairs]), np.concatenate([c for _, c in pairs]))
        for i, pairs in rel_pairs.items()
    }
    return FidelityReport(
        max_abs_error=max_err,
        mean_abs_error=err_sum / n_el if n_el else 0.0,
        cosine_min=(float(np.min(cos)) if cos.size else 1.0) if any_cos else None,
        cosine_mean=(float(np.mean(cos)) if cos.size else 1.0) if any_cos else None,
        top1_agreement=min(scored) if scored else None,
        n_samples=len(calib.samples),
        n_rows=n_rows,
        output_names=ref_names,
        candidate_output_names=cand_names,
        source=calib.source,
        random_inputs=calib.random,
        samples_chosen=calib.chosen,
        image_preprocess=None if calib.preprocess is None else calib.preprocess.to_json(),
        output_max_abs_error=out_err,
        output_max_abs_reference=out_ref,
        output_cosine_min=out_cos,
        output_top1_agreement=top1,
        output_scored_by=kinds,
        output_values_equal=[e if k == EXACT else None for e, k in zip(equal, kinds)],
        output_values_compared=[n if k == EXACT else None for n, k in zip(compared, kinds)],
        output_relative_error=[relative[i][0] if i in relative else None for i in range(len(ref_names))],
        output_relative_worst=[relative[i][1] if i in relative else None for i in range(len(ref_names))],
        output_scale_change=out_scale,
        output_norm_ratio=out_ratio,
        output_top1_tied=[t if n else None for t, n in zip(tied, rows_top1)],
        top1_tie_limit=tie_other,
        output_top1_skipped=choice.skipped,
        top1_given=top1_outputs is not None,
    )


def _file_low_types(model: str | os.PathLike[str] | onnx.ModelProto) -> set[str]:
    """The fp16/bf16 types `model` holds (`_low_types_held`), read from its file without the
    external data where it is one; none for a file that cannot be read (its session says why)."""
    if isinstance(model, onnx.ModelProto):
        return _low_types_held(model)
    from deployopt.model import peek_model

    read = peek_model(model)
    return set() if read is None else _low_types_held(read)


def verify_models(
    reference: str | os.PathLike[str] | onnx.ModelProto | LoadedModel,
    candidate: str | os.PathLike[str] | onnx.ModelProto | LoadedModel,
    calib: CalibrationSet,
    *,
    min_cosine: float | None = Thresholds().min_cosine,
    top1_outputs: Sequence[str] | None = None,
) -> FidelityReport:
    """Every check `deployopt verify` makes, in one call (`compare_models` alone is a weaker
    verify): each model as onnxruntime will load it (`runnable_model`: nodes that repeat a name,
    legal ONNX, renamed; onnxruntime refused them), their inputs against each other
    (`check_same_inputs`: dims both files fix must agree), the outputs compared
    (`compare_models`), and every fp16/bf16 intermediate of each model read back in its own type
    (`low_precision_overflow`, in `low_precision`: onnxruntime CPU computes fp16 ops in fp32, so
    an fp16 model whose activations overflow, inf on an fp16 engine, compared as equal).
    `report.check(Thresholds(...))` lists the failures, one line each, as verify prints them; the
    CLI calls this, so the library and the command judge alike. `min_cosine`: the cosine the
    report will be checked against, which sets how close the other model must rank a tie's two
    classes for top-1 (`top1_tie_limit`). `top1_outputs`: --top1-outputs (compare_models). Either
    model may be a path, a ModelProto or the LoadedModel load_model returns (as analyze and
    apply_plan take it)."""
    reference = model_argument(reference, "reference")
    candidate = model_argument(candidate, "candidate")
    check_calibration_set(calib)
    ref_model, ref_read = runnable_model(reference, "reference")
    cand_model, cand_read = runnable_model(candidate, "candidate")
    ref_inputs = declared_inputs(ref_read)
    check_same_inputs(ref_inputs, declared_inputs(cand_read))
    # the models as read already: their fp16/bf16 types widen top-1's ties (`_tie_epsilon`)
    report = compare_models(
        ref_model,
        cand_model,
        calib,
        low_types=_low_types_held(ref_read) | _low_types_held(cand_read),
        min_cosine=min_cosine,
        top1_outputs=top1_outputs,
    )
    checks = (
        low_precision_overflow(model, calib, role, list(ref_inputs))
        for model, role in ((ref_read, "reference"), (cand_read, "candidate"))
    )
    report.low_precision = [c for c in checks if c is not None]
    return report


def model_argument(model: Any, role: str) -> str | os.PathLike[str] | onnx.ModelProto:
    """`model` as the comparisons read it: a path or a ModelProto as given, a LoadedModel's `.model`
    (verify_models(loaded, edited, calib) was a TypeError from pathlib, though analyze and
    apply_plan take the LoadedModel); anything else is one ModelError line."""
    from deployopt.model import LoadedModel

    if isinstance(model, LoadedModel):
        return model.model
    if isinstance(model, (str, os.PathLike, onnx.ModelProto)):
        return model
    raise ModelError(
        f"the {role} model: expected a path, an onnx.ModelProto or the LoadedModel load_model "
        f"returns, not a {type(model).__name__}"
    )


def check_calibration_set(calib: Any) -> None:
    """A DataError unless `calib` is a CalibrationSet: None was an AttributeError on `.samples`."""
    if not isinstance(calib, CalibrationSet):
        raise DataError(
            "the inputs to compare on: expected the CalibrationSet load_calibration returns, "
            f"not a {type(calib).__name__}"
        )


def runnable_model(
    model: str | os.PathLike[str] | onnx.ModelProto, role: str = "the"
) -> tuple[str | os.PathLike[str] | onnx.ModelProto, onnx.ModelProto]:
    """`model` as onnxruntime will load it: as given, or, where nodes repeat a name (ONNX allows it,
    onnxruntime refuses it), a copy with the names every deployopt command gives them
    (`make_node_names_unique`; verify of a model against its own optimize output failed there).
    Second, the model as read (a file without its external data), for the checks that read its
    types rather than load the file again. A file that is not ONNX is one ModelError line."""
    from deployopt.model import make_node_names_unique, require_model_file

    if isinstance(model, onnx.ModelProto):
        read = model
    else:
        require_model_file(Path(model), "verify")
        read = _read_onnx(model, role, load_external_data=False)
    named = [n.name for n in read.graph.node if n.name]
    if len(set(named)) == len(named):
        return model, read
    if isinstance(model, onnx.ModelProto):  # the caller's model is left as it was
        renamed = onnx.ModelProto()
        renamed.CopyFrom(model)
    else:
        renamed = _read_onnx(model, role, load_external_data=True)
    make_node_names_unique(renamed)
    return renamed, renamed


def _read_onnx(path: str | os.PathLike[str], role: str, *, load_external_data: bool) -> onnx.ModelProto:
    try:
        return onnx.load(str(path), load_external_data=load_external_data)
    except Exception as exc:  # protobuf's DecodeError, a missing external data file
        raise ModelError(f"{role} model {path}: onnx cannot read it ({shorten(first_line(exc))})") from None


def declared_inputs(model: onnx.ModelProto) -> dict[str, list[int | None] | None]:
    """The graph's inputs (initializers listed as inputs left out), in order, each dim as the file
    declares it: a number, or None for a dynamic (named or unknown) one; None for an input the
    file gives no shape (its rank unknown)."""
    inits = {t.name for t in model.graph.initializer}
    shapes: dict[str, list[int | None] | None] = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        tt = i.type.tensor_type
        dims = tt.shape.dim if tt.HasField("shape") else None
        shapes[i.name] = (
            None if dims is None else [d.dim_value if d.HasField("dim_value") else None for d in dims]
        )
    return shapes


def check_same_inputs(
    reference: dict[str, Sequence[Any] | None], candidate: dict[str, Sequence[Any] | None]
) -> None:
    """One DataError unless the models have as many inputs, in order of the same ranks, and every
    dim both fix the same (None: a dynamic dim, or a shape the file leaves out, agrees with any):
    the edit changed what the model takes, which no comparison of outputs can judge."""
    ref, cand = list(reference.values()), list(candidate.values())
    same = len(ref) == len(cand) and all(
        a is None
        or b is None
        or (len(a) == len(b) and all(x is None or y is None or int(x) == int(y) for x, y in zip(a, b)))
        for a, b in zip(ref, cand)
    )
    if not same:
        raise DataError(f"input shapes differ: reference {_dims(reference)}, candidate {_dims(candidate)}")


def _dims(inputs: dict[str, Sequence[Any] | None]) -> str:
    """The inputs as "x 1×3×32×32, mask ?×16" (? a dynamic dim)."""
    shown = []
    for name, dims in inputs.items():
        shape = "?" if dims is None else "×".join("?" if d is None else str(d) for d in dims) or "scalar"
        shown.append(f"{name} {shape}")
    return ", ".join(shown)


def output_scoring(reference: ReferenceRun, calib: CalibrationSet) -> list[str]:
    """How compare_models scores each of the reference's outputs on `calib` (`_scoring`)."""
    if not calib.samples:
        return []
    names = [i.name for i in reference.session.get_inputs()]
    first = calib.samples[0]
    outputs = reference.checked_outputs(first, calib)
    return _scoring(outputs, _input_batch(first, names, outputs))


def identical_report(
    reference: ReferenceRun,
    calib: CalibrationSet,
    *,
    min_cosine: float | None = Thresholds().min_cosine,
    top1_outputs: Sequence[str] | None = None,
) -> FidelityReport:
    """The report of the reference compared with itself: optimize's answer is the input's own plan,
    whose model *is* the input model (Optimizer.build_model), so its outputs are identical by
    construction. No candidate session and no second run (compare_models ran the same model
    twice: 8.6 s of 18.8 for a YOLOv8x whose answer was its own plan): the reference's outputs,
    kept, give each output's largest magnitude and the rows; errors are zero, cosines 1, every
    N×classes output's top-1 agreement 100 %, and outputs scored otherwise (`_scoring`) exact.
    Top-1 goes to the outputs compare_models would give it (`top1_outputs`, `Top1Choice`)."""
    if not calib.samples:
        raise DataError("no calibration samples to compare on")
    sess = reference.session
    names = [o.name for o in sess.get_outputs()]
    choice = Top1Choice(names, top1_outputs)
    inputs = {i.name: i.name for i in sess.get_inputs()}
    types = input_dtypes(sess)
    refuse_string_inputs(_string_inputs(sess), "reference")
    _check_integer_inputs(calib, types, "reference")
    _check_static_dims(calib, sess, inputs, "reference")
    out_ref = [0.0] * len(names)
    rows_top1 = [0] * len(names)
    kinds: list[str] = []
    compared = [0] * len(names)
    n_rows = 0
    for sample in calib.samples:
        ref_out = reference.checked_outputs(sample, calib)
        batch = _input_batch(sample, list(inputs), ref_out)
        if not kinds:
            kinds = _scoring(ref_out, batch)
            choice.first(ref_out, kinds, batch)
        for i, r in enumerate(ref_out):
            if r.size:
                out_ref[i] = max(out_ref[i], float(np.max(np.abs(r.astype(np.float64)))))
            if kinds[i] == EXACT:
                compared[i] += r.size
            elif choice.scores(i, r, batch):
                rows_top1[i] += r.shape[0]  # as compare_models counts them
        n_rows += batch  # the input's rows, as compare_models counts them
    rows_top1 = [n if keep else 0 for n, keep in zip(rows_top1, choice.finish(rows_top1))]
    top1 = [1.0 if n else None for n in rows_top1]
    return FidelityReport(
        max_abs_error=0.0,
        mean_abs_error=0.0,
        cosine_min=1.0 if COSINE in kinds else None,
        cosine_mean=1.0 if COSINE in kinds else None,
        top1_agreement=1.0 if any(n for n in rows_top1) else None,
        n_samples=len(calib.samples),
        n_rows=n_rows,
        output_names=names,
        candidate_output_names=list(names),
        source=calib.source,
        random_inputs=calib.random,
        samples_chosen=calib.chosen,
        image_preprocess=None if calib.preprocess is None else calib.preprocess.to_json(),
        output_max_abs_error=[0.0] * len(names),
        output_max_abs_reference=out_ref,
        output_cosine_min=[1.0 if k == COSINE else None for k in kinds],
        output_top1_agreement=top1,
        output_scored_by=kinds,
        output_values_equal=[n if k == EXACT else None for n, k in zip(compared, kinds)],
        output_values_compared=[n if k == EXACT else None for n, k in zip(compared, kinds)],
        output_relative_error=[0.0 if k == RELATIVE else None for k in kinds],
        output_relative_worst=[None] * len(names),
        output_scale_change=[0.0 if k == COSINE else None for k in kinds],
        output_norm_ratio=[1.0 if k == COSINE else None for k in kinds],
        output_top1_tied=[0 if n else None for n in rows_top1],
        top1_tie_limit=top1_tie_limit(min_cosine),  # as compare_models records it
        output_top1_skipped=choice.skipped,
        top1_given=top1_outputs is not None,
    )


def _nan_first(x: float) -> float:
    """Sort key: a NaN cosine is the worst (min() would keep whichever came first)."""
    return -math.inf if math.isnan(x) else x


def _nan_last(x: float) -> float:
    """Sort key: a NaN error is the worst (max() would keep whichever came first)."""
    return math.inf if math.isnan(x) else x


def _worse(x: float, y: float) -> float:
    return min(x, y, key=_nan_first)


# ---------------------------------------------------------------------------- fp16 overflow
#: The fp16 overflow check (`low_precision_overflow`) runs a model once more on the first this many
#: calibration samples, one at a time, keeping only counts and magnitudes per tensor.
LOW_PRECISION_SAMPLES = 4
#: ... and is skipped (said so) where one run's fp16/bf16 intermediates, all held at once as outputs,
#: would take more than this, or where the model (copied and serialized for it) is bigger than
#: LOW_PRECISION_MAX_MODEL_BYTES or keeps its weights in external data.
LOW_PRECISION_MAX_BYTES = 2 << 30
LOW_PRECISION_MAX_MODEL_BYTES = 1 << 30
#: the low-precision float types, their names and their largest finite values
_LOW_TYPES = {onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.BFLOAT16: "bf16"}
_LOW_MAX = {"fp16": 65504.0, "bf16": 3.3895313892515355e38}
#: ops whose outputs are what the file says (an -inf mask is by design), not computed values
_CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})


@dataclass
class LowPrecisionOverflow:
    """An fp16/bf16 tensor holding inf or NaN when its computed value is rounded to its type, while
    every input of the node producing it held none: where the overflow starts."""

    tensor: str
    node: str  # its producer's name ("node 12" for an unnamed one)
    op: str
    type: str  # "fp16" or "bf16"
    nonfinite_values: int  # over the samples checked
    values: int
    max_abs_fp32: float | None  # the largest |value| onnxruntime computed (in fp32); None: not read


@dataclass
class LowPrecisionCheck:
    """One model's fp16/bf16 intermediates, each read back in its own type on the first samples."""

    model: str  # "reference" or "candidate"
    typed: str  # the low types it holds: "fp16", "bf16", "fp16/bf16"
    tensors: int  # fp16/bf16 tensors checked
    samples: int  # samples run (0 when skipped)
    overflows: list[LowPrecisionOverflow] = field(default_factory=list)
    skipped: str | None = None  # why it was not checked

    def failure(self) -> str | None:
        """The FAILED line, or None when no tensor overflowed."""
        if not self.overflows:
            return None
        shown = []
        for o in self.overflows[:3]:
            at = "" if o.max_abs_fp32 is None else f", |x| up to {o.max_abs_fp32:.4g} computed in fp32"
            shown.append(f"{o.tensor} ({o.op} {o.node!r}{at})")
        more = f" and {len(self.overflows) - 3} more" if len(self.overflows) > 3 else ""
        limit = " / ".join(f"±{_LOW_MAX[t]:.5g}" for t in self.typed.split("/"))
        return (
            f"{self.model}: {len(self.overflows)} {self.typed} tensor(s) overflow ({limit}; inf or NaN "
            f"on an engine that computes in {self.typed}) on the first {self.samples} sample(s): "
            f"{', '.join(shown)}{more}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "typed": self.typed,
            "tensors_checked": self.tensors,
            "samples": self.samples,
            "skipped": self.skipped,
            "overflows": len(self.overflows),
        }


def low_precision_overflow(
    model: str | os.PathLike[str] | onnx.ModelProto,
    calib: CalibrationSet,
    role: str,
    input_names: Sequence[str] | None = None,
    samples: int = LOW_PRECISION_SAMPLES,
) -> LowPrecisionCheck | None:
    """Whether the model's fp16/bf16 intermediates overflow on the first `samples` calibration
    samples; None for a model that has none (computed from the graph's inputs, see below).

    onnxruntime CPU has no fp16 kernels for most ops (Conv, Relu, ...): it casts their inputs to
    fp32, and removes the fp16→fp32 pair between two such ops, so an fp16 model's activations are
    computed in fp32 and a value past 65504 (inf on TensorRT in fp16) compared as finite. A copy of
    the model lists every fp16/bf16 tensor (types by onnx shape inference) as a graph output, which
    onnxruntime hands back rounded to its type: a value past the type's range is inf there. Tensors
    non-finite while every input of their node was finite are reported (where the overflow starts;
    those after it compute from onnxruntime's fp32 value), with the largest |value| onnxruntime
    computed, read by the same copy changed to cast only them to fp32. Tensors whose value does not
    depend on the graph's inputs (`_constant_tensors`: an -inf mask built from constants, by
    design) are not checked, and an input of theirs that holds inf or NaN counts as non-finite (an
    Add of such a mask is not where an overflow starts).

    An fp32 model costs no more than a look at its types: a ModelProto's fields are read in place
    (no copy, no serialization; verify hands over the model it read already), a file is loaded
    without its external data. Then, for an fp16/bf16 model: one copy of it, shape inference on a
    copy without its weights' data, one session and one run per sample (at most `samples`), all
    the fp16 intermediates of one run held at once, estimated
    from the inferred shapes at the fed input shapes (LOW_PRECISION_MAX_BYTES, else skipped with
    the reason); a tensor whose size stays unknown there (data-dependent: NonZero, a Resize to
    computed sizes) is counted as large as the largest known one (or the largest fed input when
    none is known), an estimate, not a bound. `input_names`: the calibration arrays' keys in input
    order, matched to the model's inputs by name, else by position (as compare_models feeds the
    candidate)."""
    from deployopt.model import uses_external_data, weightless

    owned = not isinstance(model, onnx.ModelProto)
    look = onnx.load(str(model), load_external_data=False) if owned else model
    held_types = _low_types_held(look)
    if not held_types:
        return None
    typed = "/".join(sorted(held_types))

    def skipped(why: str) -> LowPrecisionCheck:
        return LowPrecisionCheck(role, typed, 0, 0, skipped=why)

    if uses_external_data(look):
        return skipped("its weights are in external data")
    size = Path(model).stat().st_size if owned else look.ByteSize()
    if size > LOW_PRECISION_MAX_MODEL_BYTES:
        return skipped(f"the model is over {LOW_PRECISION_MAX_MODEL_BYTES >> 20} MiB")
    if not calib.samples:
        return skipped("no calibration samples")
    if owned:  # the one copy: changed below, then into the fp32-magnitude model
        m = look
        del look
    else:  # the caller's model: left as it was
        m = onnx.ModelProto()
        m.CopyFrom(model)
    keys = list(input_names) if input_names is not None else list(calib.samples[0])
    inits = {t.name for t in m.graph.initializer}
    graph_inputs = [i for i in m.graph.input if i.name not in inits]
    names = [i.name for i in graph_inputs]
    feeds_to = dict(zip(keys, names)) if set(keys) != set(names) else {k: k for k in keys}
    first = calib.samples[0]
    for inp in graph_inputs:  # the fed shapes, so that inference gives every tensor's size
        key = next((k for k, n in feeds_to.items() if n == inp.name), None)
        if key is None or key not in first or not inp.type.tensor_type.HasField("shape"):
            continue
        dims = inp.type.tensor_type.shape.dim
        if len(dims) == np.ndim(first[key]):
            for d, n in zip(dims, np.shape(first[key])):
                d.Clear()
                d.dim_value = int(n)
    try:  # types and shapes only: inferred on a copy without the weights' data
        inferred = onnx.shape_inference.infer_shapes(weightless(m))
    except Exception as exc:
        return skipped(f"onnx shape inference failed ({shorten(first_line(exc), 120)})")
    g = inferred.graph
    infos = {vi.name: vi.type.tensor_type for vi in (*m.graph.value_info, *m.graph.output)}
    infos.update({vi.name: vi.type.tensor_type for vi in (*g.value_info, *g.output)})
    del inferred, g
    const = _constant_tensors(m.graph)
    low = _low_precision_tensors(m.graph, infos, const)
    if low is None:  # fp16 weights, casts or constants, and no fp16 tensor computed from the inputs
        return None
    typed = "/".join(sorted(set(low.values())))
    producer = {o: (i, n) for i, n in enumerate(m.graph.node) for o in n.output if o}
    init_names = {t.name for t in m.graph.initializer}
    # constant float inputs of the checked nodes, computed by nodes: read back to see an -inf mask
    mask_like = {i for name in low for i in producer[name][1].input if i in const and i not in init_names}
    mask_like = {i for i in mask_like if infos.get(i) is not None and infos[i].elem_type in _ELEM_BYTES}
    held = _held_bytes([*low, *mask_like], infos, [np.size(a) for a in first.values()])
    if held > LOW_PRECISION_MAX_BYTES:
        return skipped(
            f"its {len(low)} {typed} tensors take {held / 2**30:.1f} GiB a run, over "
            f"{LOW_PRECISION_MAX_BYTES >> 30} GiB"
        )
    outputs = {o.name for o in m.graph.output}
    kept_outputs = len(m.graph.output)
    for name in [*low, *sorted(mask_like)]:
        if name not in outputs:
            m.graph.output.append(onnx.helper.make_tensor_value_info(name, infos[name].elem_type, None))
    try:
        sess = _session(m, role)
    except ModelError as exc:
        return skipped(str(exc))
    fetched = [o.name for o in sess.get_outputs()]
    types = input_dtypes(sess)
    inits = {t.name: t for t in m.graph.initializer}
    init_bad: dict[str, bool] = {}  # an initializer input's inf/NaN, read once and only when asked

    def nonfinite_init(name: str) -> bool:
        if name not in init_bad:
            t = inits.get(name)
            init_bad[name] = (
                t is not None
                and t.data_type in _ELEM_BYTES
                and not np.isfinite(onnx.numpy_helper.to_array(t).astype(np.float32)).all()
            )
        return init_bad[name]

    runs = calib.samples[: max(1, samples)]
    bad: dict[str, int] = {}
    total: dict[str, int] = {}
    starts: dict[str, None] = {}  # in the order first seen
    for sample in runs:
        feed = feed_inputs(sample, {k: n for k, n in feeds_to.items() if k in sample}, types)
        out = dict(zip(fetched, _run(sess, feed, role, _data(calib))))
        nonfinite = {i for i in mask_like if i in out and not np.isfinite(out[i]).all()}
        for name in low:
            arr = out.get(name)
            if arr is None or not arr.size:
                continue
            n_bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
            total[name] = total.get(name, 0) + int(arr.size)
            if n_bad:
                bad[name] = bad.get(name, 0) + n_bad
                nonfinite.add(name)
        for name in low:
            if name in nonfinite and not any(
                i in nonfinite or (i in inits and nonfinite_init(i)) for i in producer[name][1].input
            ):
                starts.setdefault(name)
        del out
    del sess
    overflows = []
    for name in starts:
        index = producer[name][0]
        overflows.append(
            LowPrecisionOverflow(
                tensor=name,
                node=producer[name][1].name or f"node {index}",
                op=producer[name][1].op_type,
                type=low[name],
                nonfinite_values=bad[name],
                values=total[name],
                max_abs_fp32=None,
            )
        )
    del producer
    inits.clear()  # references into the copy, which _fp32_magnitudes clears
    if overflows:  # the same copy, its added outputs replaced by fp32 casts of the overflowing ones
        del m.graph.output[kept_outputs:]
        fp32 = _fp32_magnitudes(m, list(starts), runs, feeds_to, role)
        for o in overflows:
            o.max_abs_fp32 = fp32.get(o.tensor)
    return LowPrecisionCheck(role, typed, len(low), len(runs), overflows)


def _elem(type_name: str) -> int:
    """The ONNX element type of "fp16" / "bf16"."""
    return next(k for k, v in _LOW_TYPES.items() if v == type_name)


#: the float element types read back (fp16/bf16 intermediates, constant masks), with their bytes a value
_ELEM_BYTES = {
    onnx.TensorProto.FLOAT16: 2,
    onnx.TensorProto.BFLOAT16: 2,
    onnx.TensorProto.FLOAT: 4,
    onnx.TensorProto.DOUBLE: 8,
}
_SUBGRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
#: ops whose output is not fixed by their inputs: never constant
_RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
)


def _held_bytes(names: list[str], infos: dict[str, Any], fed_sizes: list[int]) -> int:
    """The bytes of `names` held at once, by their inferred shapes (at the fed input shapes). A
    tensor whose shape stays unknown (no shape, a symbolic or missing dim) is counted as large as
    the largest known one, or the largest fed input where none is known: an estimate, not a bound
    (a data-dependent size cannot be known before the run)."""
    known: dict[str, int] = {}
    for name in names:
        tt = infos.get(name)
        if tt is not None and tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            known[name] = math.prod(d.dim_value for d in tt.shape.dim)
    largest = max(known.values(), default=0) or max(fed_sizes, default=0)
    held = 0
    for name in names:
        tt = infos.get(name)
        held += known.get(name, largest) * _ELEM_BYTES.get(tt.elem_type if tt is not None else 0, 2)
    return held


def _constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """The graph's tensors whose value does not depend on its inputs: initializers (an initializer
    also listed as an input is never fed by verify), outputs of Constant and ConstantOfShape (its
    value is the file's fill, whatever the shape), and outputs of every standard-domain node whose
    inputs are all constant (a Where/Mul/Expand of constants: an -inf mask built so is by design).
    Not constant: random ops, nodes with subgraphs (their bodies read outer tensors unlisted) and
    other domains' ops (unknown semantics). Nodes in file order, which ONNX requires topological."""
    const = {t.name for t in graph.initializer} | {s.values.name for s in graph.sparse_initializer}
    const.add("")  # an optional input left out
    for node in graph.node:
        computed = (
            node.domain in ("", "ai.onnx")
            and node.op_type not in _RANDOM_OPS
            and not any(a.type in _SUBGRAPH_ATTRS for a in node.attribute)
            and all(i in const for i in node.input)
        )
        if computed or (node.op_type in _CONSTANT_OPS and node.domain in ("", "ai.onnx")):
            const.update(o for o in node.output if o)
    const.discard("")
    return const


def _low_types_held(model: onnx.ModelProto) -> set[str]:
    """The fp16/bf16 types a model's weights, declared tensors, casts or constants hold, in its
    subgraphs and local functions too (no inference: a model with none computes no fp16 tensor).
    Reads types only, never a tensor's data."""
    held: set[int] = set()
    graphs = [model.graph]
    nodes = [n for f in model.functions for n in f.node]
    while graphs:
        g = graphs.pop()
        held |= {t.data_type for t in g.initializer}
        held |= {s.values.data_type for s in g.sparse_initializer}
        held |= {vi.type.tensor_type.elem_type for vi in (*g.input, *g.output, *g.value_info)}
        nodes += g.node
        while nodes:
            node = nodes.pop()
            for a in node.attribute:
                if a.type == onnx.AttributeProto.INT and a.name in ("to", "dtype", "output_dtype"):
                    held.add(a.i)
                elif a.type == onnx.AttributeProto.TENSOR:
                    held.add(a.t.data_type)
                elif a.type == onnx.AttributeProto.TENSORS:
                    held |= {t.data_type for t in a.tensors}
                elif a.type == onnx.AttributeProto.SPARSE_TENSOR:
                    held.add(a.sparse_tensor.values.data_type)
                elif a.type == onnx.AttributeProto.GRAPH:
                    graphs.append(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    graphs.extend(a.graphs)
    return {_LOW_TYPES[t] for t in held if t in _LOW_TYPES}


def _low_precision_tensors(
    graph: onnx.GraphProto, infos: dict[str, Any], const: set[str]
) -> dict[str, str] | None:
    """Each top-level node output typed fp16/bf16 (`infos`: the model's declared and inferred
    tensor types) and computed from the graph's inputs (not in `const`, `_constant_tensors`), to
    its type name; None when there is none."""
    produced = [o for n in graph.node for o in n.output if o and o not in const]
    typed = {o: infos[o].elem_type for o in produced if o in infos}
    low = {o: _LOW_TYPES[t] for o, t in typed.items() if t in _LOW_TYPES}
    return low or None


def _fp32_magnitudes(
    model: onnx.ModelProto,
    tensors: list[str],
    runs: list[dict[str, np.ndarray]],
    feeds_to: dict[str, str],
    role: str,
) -> dict[str, float]:
    """The largest |value| onnxruntime computes for each of `tensors` (fp16/bf16 ones) over `runs`,
    read through a Cast to fp32 of each (onnxruntime drops its fp32→fp16→fp32 pair, so the value is
    the one it computed); {} where the model cannot run. Best effort: a value onnxruntime did compute
    in fp16 reads inf. Changes `model` (low_precision_overflow's own copy) in place: its outputs
    become the casts, and it is cleared once the session holds it."""
    from deployopt.model import fresh_name, names_in_use

    m = model
    taken = names_in_use(m.graph)  # a cast's output named like a tensor of the graph replaced it
    del m.graph.output[:]
    wide = {}
    for name in tensors:
        wide[name] = fresh_name(f"{name}__deployopt_fp32", taken)
        m.graph.node.append(onnx.helper.make_node("Cast", [name], [wide[name]], to=onnx.TensorProto.FLOAT))
        m.graph.output.append(onnx.helper.make_tensor_value_info(wide[name], onnx.TensorProto.FLOAT, None))
    try:
        sess = _session(m, role)
        m.Clear()
        types = input_dtypes(sess)
        fetched = [o.name for o in sess.get_outputs()]
        top: dict[str, float] = {}
        for sample in runs:
            feed = feed_inputs(sample, {k: n for k, n in feeds_to.items() if k in sample}, types)
            out = dict(zip(fetched, _run(sess, feed, role)))
            for name in tensors:
                arr = out[wide[name]]
                if arr.size:
                    v = float(np.max(np.abs(arr.astype(np.float64))))
                    top[name] = v if math.isnan(v) else max(top.get(name, 0.0), v)
        return top
    except (ModelError, DataError):
        return {}
