"""INT8 entropy calibration for the TensorRT backend, with the batching kept in plain Python.

Why split it: the part that can go wrong quietly (which samples make which batch, when the data
runs out, whether a stale cache is reused) does not need TensorRT, so it is tested here without it.
The `trt.IInt8EntropyCalibrator2` subclass is created inside a factory, so this module imports
on machines without TensorRT, and only forwards to the pure parts.

With explicit-batch networks (the only kind ONNX gives), the batch size is part of each input's
shape; the calibrator reports 1 from get_batch_size(), as Polygraphy's does, and each batch is
shaped exactly like the engine input.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from deployopt.errors import BackendFailed, DataError, DeployoptError, reraise_interrupt
from deployopt.fileio import write_bytes

if TYPE_CHECKING:
    from deployopt.fidelity import ImagePreprocess


class DeviceMemory(Protocol):
    """What the calibrator needs from a CUDA binding (cuda-python or pycuda adapter)."""

    def alloc(self, nbytes: int) -> int: ...

    def htod(self, ptr: int, array: np.ndarray) -> None: ...

    def free(self, ptr: int) -> None: ...


class CalibrationBatcher:
    """Turns samples (each a {input name: array shaped like the model input, or like one item of it})
    into batches shaped exactly like the engine inputs, in sample order.

    A sample whose leading dimension is smaller than the engine batch is stacked with the next ones
    (e.g. eight [1,3,224,224] samples make one [8,3,224,224] batch). A last incomplete batch is
    dropped (counted in `dropped`): TensorRT needs full batches and padding would bias the ranges.

    Batches are cast to `dtypes` (each input's own type), so the samples must hold values those
    take, as verify checks (deployopt.fidelity.check_fed_types): normalised images cast to a uint8
    input wrapped round to 0, 1, 2, 255 and were calibrated on; values past float16's largest
    became inf. Refused in one DataError line naming `source`, before anything is built.
    """

    def __init__(
        self,
        samples: list[dict[str, np.ndarray]],
        shapes: dict[str, tuple[int, ...]],
        dtypes: dict[str, Any] | None = None,
        source: str = "calibration data",
    ) -> None:
        if not samples:
            raise DataError("no calibration samples")
        self.shapes = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
        self.dtypes = {k: np.dtype((dtypes or {}).get(k, np.float32)) for k in self.shapes}
        for i, sample in enumerate(samples):
            missing = sorted(set(self.shapes) - set(sample))
            if missing:
                raise DataError(f"calibration sample {i} has no input {missing[0]!r}")
            for name, shape in self.shapes.items():
                got = tuple(np.shape(sample[name]))
                if got[1:] != shape[1:] or not got or shape[0] % got[0] != 0:
                    raise DataError(
                        f"calibration sample {i} input {name!r} has shape {list(got)}; the engine input is "
                        f"{list(shape)}"
                    )
        if any(t != np.float32 for t in self.dtypes.values()):
            from deployopt.fidelity import CalibrationSet, check_fed_types

            check_fed_types(CalibrationSet(samples=samples, source=source, random=False), self.dtypes)
        self.samples = samples
        first = next(iter(self.shapes))
        self.per_batch = self.shapes[first][0] // int(np.shape(samples[0][first])[0])
        self.num_batches = len(samples) // self.per_batch
        self.dropped = len(samples) - self.num_batches * self.per_batch
        self.position = 0  # batches handed out so far

    def reset(self) -> None:
        self.position = 0

    def next_batch(self) -> dict[str, np.ndarray] | None:
        """The next full batch (C-contiguous, engine dtype), or None when the data is used up."""
        if self.position >= self.num_batches:
            return None
        lo = self.position * self.per_batch
        chunk = self.samples[lo : lo + self.per_batch]
        self.position += 1
        return {
            name: np.ascontiguousarray(
                np.concatenate([np.asarray(s[name]) for s in chunk], axis=0), dtype=self.dtypes[name]
            )
            for name in self.shapes
        }

    def nbytes(self, name: str) -> int:
        return int(np.prod(self.shapes[name])) * self.dtypes[name].itemsize


class CalibrationCache:
    """The calibration table TensorRT writes after calibrating; reused so INT8 builds are repeatable
    and fast. Written atomically; an empty or missing file reads as None (calibrate again)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None

    def read(self) -> bytes | None:
        if self.path is None or not self.path.is_file():
            return None
        data = self.path.read_bytes()
        return data or None

    def write(self, data: bytes) -> None:
        if self.path is not None:
            write_bytes(self.path, bytes(data))


class CalibratorCore:
    """Everything the TensorRT calibrator does, minus TensorRT: batches to device pointers."""

    def __init__(self, batcher: CalibrationBatcher, cache: CalibrationCache, memory: DeviceMemory) -> None:
        self.batcher = batcher
        self.cache = cache
        self.memory = memory
        self.buffers: dict[str, int] = {}

    def get_batch_size(self) -> int:
        return 1  # explicit batch: the batch is in the input shapes

    def get_batch(self, names: list[str]) -> list[int] | None:
        batch = self.batcher.next_batch()
        if batch is None:
            return None
        ptrs = []
        for name in names:
            if name not in batch:
                raise DataError(
                    f"TensorRT asked for calibration input {name!r}, which the data does not have"
                )
            if name not in self.buffers:
                self.buffers[name] = self.memory.alloc(self.batcher.nbytes(name))
            self.memory.htod(self.buffers[name], batch[name])
            ptrs.append(int(self.buffers[name]))
        return ptrs

    def read_calibration_cache(self) -> bytes | None:
        return self.cache.read()

    def write_calibration_cache(self, data: Any) -> None:
        self.cache.write(bytes(data))

    def free(self) -> None:
        for ptr in self.buffers.values():
            self.memory.free(ptr)
        self.buffers.clear()


class TableCalibrator:
    """INT8 from a calibration table alone (an earlier run's, trtexec's, the Jetson runner's), for
    users who have the table but not the data: TensorRT reads it and skips calibrating. It never
    writes: the table is the user's, so whatever TensorRT hands back is dropped. (Mirrors
    jetson/runner.py's make_npy_calibrator_from_cache.)"""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.table = self.path.read_bytes()
        except OSError as exc:
            reason = exc.strerror or exc
            raise DataError(f"calibration table {self.path}: cannot read it ({reason})") from None
        if not self.table:  # TensorRT would calibrate on no data and fail; say why first
            raise DataError(
                f"calibration table {self.path} is empty: give the data to calibrate on (a folder of "
                "images, .npy or .npz) instead"
            )

    def get_batch_size(self) -> int:
        return 1

    def get_batch(self, names: list[str]) -> list[int] | None:
        return None  # no data: the table is all there is

    def read_calibration_cache(self) -> bytes:
        return self.table

    def write_calibration_cache(self, data: Any) -> None:
        return None  # leave the user's table as it is

    def free(self) -> None:
        return None


def load_samples(
    path: str | Path,
    inputs: dict[str, tuple[int, ...]],
    count: int,
    preprocess: ImagePreprocess | None = None,
    notices: list[str] | None = None,
) -> list[dict[str, np.ndarray]]:
    """Calibration samples from calibration data (deployopt.fidelity reads the folder/file formats);
    images made into tensors by `preprocess` (None: the ImageNet defaults), as verify, apply and
    optimize make them, so INT8 ranges are calibrated on the inputs the model takes. What the loader
    assumed (images left out past the last full batch, a batch filled by repeating) is appended to
    `notices`, for the caller to say (calibration_notice): it was dropped without a word."""
    try:
        from deployopt.fidelity import DEFAULT_PREPROCESS, load_calibration
    except ImportError as exc:
        reraise_interrupt(exc)
        raise DataError(f"calibration data loader unavailable ({exc})") from None
    cal = load_calibration(
        path,
        inputs={k: list(v) for k, v in inputs.items()},
        count=count,
        preprocess=preprocess or DEFAULT_PREPROCESS,
    )
    if notices is not None:
        notices.extend(cal.notices)
    return list(cal.samples)


def calibration_notice(notice: str) -> str:
    """One loader notice as the `warning:` line INT8 calibration says it with (the backend warns,
    as commands print `notice:` for the same loader's notices)."""
    return f"INT8 calibration data: {notice}"


def make_entropy_calibrator(trt: Any, core: CalibratorCore | TableCalibrator) -> Any:
    """A `trt.IInt8EntropyCalibrator2` that forwards to `core` (created here so the module imports
    without TensorRT).

    TensorRT calls get_batch, read_calibration_cache and write_calibration_cache from C++ noexcept
    overrides (NVIDIA/TensorRT python/src/infer/pyInt8.cpp): on 8.2 (@0a4ed147) a Python exception
    escaping one reaches std::terminate and aborts the process; from 8.4 on (@768d994b; issue 3871
    shows 8.4 doing it) it is printed as "[ERROR] Exception caught in get_batch()" and taken as "no
    batch" / "no table", so a CUDA error at the third batch ends calibration on two and the build
    succeeds. Nothing escapes here: the first error is kept in `error`, every later callback does
    nothing (calibration ends, no table is written), and raise_calibrator_error raises it once the
    build returns.

    TensorRT >= 11 has no calibrators (the base class is gone): refused in one line here too, as a
    last guard behind the backend's own refusal, rather than an AttributeError traceback."""
    if not hasattr(trt, "IInt8EntropyCalibrator2"):
        raise DeployoptError(
            f"TensorRT {getattr(trt, '__version__', '?')} has no INT8 calibrators (removed in 11.0): "
            "quantize the model explicitly with Q/DQ nodes (NVIDIA ModelOpt) instead of calibrating"
        )

    class EntropyCalibrator(trt.IInt8EntropyCalibrator2):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)  # pybind11 needs the explicit base init
            self.core = core
            self.error: BaseException | None = None

        def _guarded(self, call: Any, *args: Any) -> Any:
            if self.error is not None:
                return None
            try:
                return call(*args)
            except BaseException as exc:  # kept, raised after the build (raise_calibrator_error)
                self.error = exc
                return None

        def get_batch_size(self) -> int:
            return self.core.get_batch_size()

        def get_batch(self, names: list[str], *args: Any) -> list[int] | None:
            return self._guarded(self.core.get_batch, list(names))

        def read_calibration_cache(self, *args: Any) -> bytes | None:
            return self._guarded(self.core.read_calibration_cache)

        def write_calibration_cache(self, cache: Any, *args: Any) -> None:
            self._guarded(self.core.write_calibration_cache, cache)

    return EntropyCalibrator()


def raise_calibrator_error(calibrator: Any) -> None:
    """Raise what a calibrator callback raised during the build (see make_entropy_calibrator): a
    deployopt error as it is, anything else (pycuda's LogicError) as one BackendFailed line."""
    error = getattr(calibrator, "error", None)
    if error is None:
        return
    if isinstance(error, DeployoptError) or not isinstance(error, Exception):
        raise error
    first = str(error).splitlines()[0] if str(error) else ""
    raise BackendFailed(f"INT8 calibration failed: {type(error).__name__}: {first}") from None
