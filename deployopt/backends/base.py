"""One small interface every backend fills in, and the registry that names them.

A backend builds and times a model. Heavy libraries (torch, tensorrt, pycuda) are imported only
inside the backend's own module, so `deployopt backends` can report "unavailable: install X"
instead of crashing. Timing happens in a `Session` so a backend can keep a worker process (one
green context, one cuDNN handle, warm caches) across many models, which the optimizer needs.
"""

from __future__ import annotations

import functools
import importlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from deployopt.errors import BackendUnavailable, DeployoptError, reraise_interrupt
from deployopt.layers import ConvShape
from deployopt.timing import Timing, check_run_counts, measured_now

if TYPE_CHECKING:
    from collections.abc import Sequence

    import onnx

    from deployopt.fidelity import ImagePreprocess
    from deployopt.model import LoadedModel

DTYPES = ("fp32", "fp16", "int8")
#: The most --cudnn-engines may be: torch.backends.cudnn.benchmark_limit is a C int, where 2^31 was
#: read as -2^31 and 2^63 was a ValueError in the worker
CUDNN_ENGINES_MAX = 2**31 - 1


@dataclass(frozen=True)
class MeasureOptions:
    dtype: str = "fp16"
    batch: int | None = None  # overrides the model's batch dimension when set
    sms: int | None = None  # restrict the GPU to this many SMs (backends that can)
    runs: int = 100  # timed samples; one sample = one forward pass (or one graph replay)
    warmup: int = 20
    timeout_s: float = 600.0  # per model, for backends that run in a worker process
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    calibration_data: str | None = None  # INT8 calibration (TensorRT)
    # how calibration images become tensors (--mean/--std/--scale/--bgr/--resize); None: the defaults
    calibration_preprocess: ImagePreprocess | None = None
    workdir: Path | None = None  # where engines / traces / caches go
    # cuDNN engines cudnn.benchmark times per conv (torch): None = PyTorch's default (10), 0 = all.
    # Timing all finds faster kernels for some widths (up to 2x in fp16 on 8 SMs, docs/backends.md).
    cudnn_engines: int | None = None
    # False: no autotuning, cuDNN's heuristics pick each conv's kernel (PyTorch's own default,
    # torch.backends.cudnn.benchmark = False): what an untuned PyTorch program runs.
    cudnn_benchmark: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # backend-specific knobs


@dataclass
class KernelRecord:
    """One GPU kernel launch, as a profiler saw it (CUPTI trace, nsys export, trtexec layer info)."""

    name: str
    duration_us: float
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    registers_per_thread: int | None = None
    shared_memory_bytes: int | None = None
    blocks_per_sm: float | None = None
    tile: tuple[int, ...] | None = None  # parsed from the kernel name, e.g. (128, 128, 64)
    waves: int | None = None
    tail_fill: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class LayerTime:
    name: str  # backend's layer name
    time_us: float  # median per forward pass
    share: float  # fraction of the summed layer time
    onnx_nodes: list[str] = field(default_factory=list)  # mapped back where the backend allows
    kernels: list[KernelRecord] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. tactic name from trtexec
    #: the spread of `time_us` over the runs; None where the backend reports one number (trtexec's
    #: profile: an average and a median) or there was one run
    iqr_us: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "time_us": self.time_us,
            "iqr_us": self.iqr_us,
            "share": self.share,
            "onnx_nodes": self.onnx_nodes,
            "kernels": [k.to_json() for k in self.kernels],
            **({"extra": self.extra} if self.extra else {}),
        }


@dataclass
class Profile:
    backend: str
    layers: list[LayerTime]
    environment: dict[str, Any] = field(default_factory=dict)
    timed: str = ""
    runs: int = 0
    #: the files this profile kept under --trace-dir (not in its JSON: `profile` says them as
    #: "trace"); empty where the backend names none (TensorRT's engines)
    trace_files: list[str] = field(default_factory=list)

    @property
    def total_us(self) -> float:
        """The sum of the layers' medians: not an end-to-end latency (no median of sums, no gaps
        between layers); `bench` times that."""
        return sum(layer.time_us for layer in self.layers)

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "timed": self.timed,
            "runs": self.runs,
            "total_us": self.total_us,
            "environment": self.environment,
            "layers": [layer.to_json() for layer in self.layers],
        }


def _recording(measure: Any) -> Any:
    """A backend's `measure` that records on its result what was timed (the file's name and
    sha256) and, for a measured one, when: `compare` checks both. Only `bench` set them, so a
    result timed through the library was "written before results recorded the model" and a copy
    of it compared as a new run."""

    @functools.wraps(measure)
    def recorded(self: Session, model_path: Path) -> Timing:
        if self._recording:  # a backend's measure calling its parent's: recorded once, outermost
            return measure(self, model_path)
        from deployopt.regression import model_identity

        try:  # before timing, as bench does: the bytes that were timed
            identity: dict[str, str] | None = model_identity(Path(model_path))
        except (OSError, TypeError):  # the backend says in its own words that it cannot read it
            identity = None
        self._recording = True
        try:
            timing = measure(self, model_path)
        finally:
            self._recording = False
        return replace(
            timing,
            model=timing.model if timing.model is not None else identity,
            measured_at=timing.measured_at or (measured_now() if timing.measured else None),
        )

    recorded.records_identity = True  # type: ignore[attr-defined]
    return recorded


class Session(ABC):
    """An open backend: time many models with the same options. Use as a context manager.

    Every subclass's `measure` records the model and the time on its result (`_recording`)."""

    _recording = False  # inside a recording measure (per instance once set)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("measure")
        if own is not None and not any(
            getattr(own, a, False) for a in ("__isabstractmethod__", "records_identity")
        ):
            cls.measure = _recording(own)  # type: ignore[method-assign]

    def __init__(self, backend: Backend, options: MeasureOptions) -> None:
        self.backend = backend
        self.options = options
        self._said_once: set[str] = set()  # say_once's notices
        self._at_batch: dict[tuple[str, int, int], Path] = {}  # at_batch's files: (path, size, mtime) → run
        self._batch_dir: Any = None  # at_batch's copies: a TemporaryDirectory, made with the first

    @abstractmethod
    def measure(self, model_path: Path) -> Timing:
        """End-to-end latency of one model."""

    @property
    def runs_on_gpu(self) -> bool | None:
        """Whether this session times on a CUDA GPU (None: not known). `calibrate` and `optimize`
        read it: latencies from the host CPU say nothing about a GPU target's SMs."""
        return None

    def check_memory(self, loaded: LoadedModel) -> None:  # noqa: B027  (optional hook)
        """Fail with one line (InsufficientMemory) when `loaded` cannot fit where this backend runs
        it, before anything is allocated (deployopt.memory). The default checks nothing: a backend
        that runs nothing here (the wave model), or builds on a device it cannot query yet."""

    def preflight(self) -> None:  # noqa: B027  (optional hook)
        """Fail with one line now if this session cannot run anything (a board that does not answer
        over ssh), before a caller writes its outputs: optimize calls it before OUTDIR is made."""

    def profile(self, model_path: Path, kernels: bool = False) -> Profile:
        raise BackendUnavailable(f"backend {self.backend.name!r} has no per-layer profiler")

    def measure_convs(self, shapes: list[ConvShape]) -> list[Timing]:
        """Time single conv layers (the per-layer staircase the optimizer's cache is built from).

        The default builds a one-conv ONNX model per shape (`conv_model`) and times it with
        `measure`; backends with a faster path (torch: cuDNN directly, one process, same green
        context) override it.
        """
        import dataclasses

        from deployopt.fileio import owned_temp_dir, remove_owned_temp_dir

        out = []
        # a conv model's one input is static and named `x`: the model's --input-shape and --batch
        # are not its own (they refused it: "input shape given for 'img', but conv0.onnx has no such
        # input"), and its shape already carries the batch and H×W they gave the model
        whole = self.options
        self.options = dataclasses.replace(whole, input_shapes={}, batch=None)
        # a conv's timing is a table entry: `measure` records no temporary file's identity or time
        # on it (`_recording`), so it is what the backend's own batch gives (the runner's records
        # them, trtexec's none)
        recording, self._recording = self._recording, True
        tmp = None
        try:
            # `deployopt-conv-<pid>-<random>`, locked while used: one a run killed with SIGKILL left
            # is removed by the next sweep's (fileio.owned_temp_dir); a TemporaryDirectory stayed
            tmp = owned_temp_dir("deployopt-conv-")
            for i, shape in enumerate(shapes):
                path = tmp / f"conv{i}.onnx"
                path.write_bytes(self.conv_model(shape).SerializeToString())
                out.append(self.measure(path))
        finally:
            if tmp is not None:
                remove_owned_temp_dir(tmp)
            self.options = whole
            self._recording = recording
        return out

    def conv_model(self, shape: ConvShape) -> onnx.ModelProto:
        """The one-conv model `measure_convs` times for `shape`. With --dtype int8 the conv carries
        its own Q/DQ scales, so TensorRT builds INT8 kernels for it without calibration data, which
        fits the model's input, not a conv's. A backend that runs models as typed overrides it."""
        from deployopt.layers import conv_model

        return conv_model(shape, int8=self.options.dtype == "int8")

    def at_batch(self, model_path: Path) -> Path:
        """`model_path`, or where --batch N meets a batch its file fixes at another value, a copy of
        it at batch N (deployopt.batch.write_at_batch, in a folder of this session's), made and said
        once a session per file. For a backend that builds the file itself (TensorRT, trtexec, the
        board's runner): they refused `--batch 4` on a static batch-1 export that onnxruntime and
        torch ran rewritten; now every backend rewrites it, or refuses a graph that hard-codes its
        batch in the same line (`prepare_model`'s)."""
        from deployopt.batch import fixed_batch_differs, write_at_batch

        model_path = Path(model_path)
        if self.options.batch is None:  # nothing to rewrite: no stat, no entry
            return model_path
        try:
            st = model_path.stat()
        except OSError:  # the backend says in its own words that there is no such file
            return model_path
        key = (str(model_path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in self._at_batch:
            opts = self.options
            dest = model_path
            if fixed_batch_differs(model_path, opts.batch, opts.input_shapes):
                if self._batch_dir is None:
                    import tempfile

                    self._batch_dir = tempfile.TemporaryDirectory(prefix="deployopt-batch-")
                dest = Path(self._batch_dir.name) / str(len(self._at_batch)) / model_path.name
                self.say_once(write_at_batch(model_path, opts.batch, opts.input_shapes, dest))
            self._at_batch[key] = dest
        return self._at_batch[key]

    def say_once(self, notice: str) -> None:
        """`notice` as a warning (a `warning:` line), once a session: optimize and bench --repeat
        time the same file again, and the same line each time would bury the rest."""
        if notice and notice not in self._said_once:
            import warnings

            from deployopt.errors import DeployoptWarning

            self._said_once.add(notice)
            warnings.warn(notice, DeployoptWarning, 3)

    def keep_engine(self, timing: Timing, dest: Path) -> bool:
        """Copy the engine this session built for the model `timing` measured to `dest` (optimize
        keeps the chosen plan's engine beside its model); False when it built none. The default
        copies the file the timing's environment names; a board's session copies it back over scp."""
        return copy_local_engine(timing, dest)

    def close(self) -> None:  # noqa: B027  (optional hook)
        """Release workers, contexts, files."""

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def copy_local_engine(timing: Timing, dest: Path) -> bool:
    """Copy the engine file `timing`'s environment names (`engine`, on this machine) to `dest`."""
    import shutil

    engine = timing.environment.get("engine") if isinstance(timing.environment, dict) else None
    if not engine or not Path(engine).is_file():
        return False
    shutil.copyfile(engine, dest)
    return True


class Backend(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    dtypes: ClassVar[tuple[str, ...]] = ("fp32", "fp16")
    can_limit_sms: ClassVar[bool] = False
    can_choose_cudnn_engines: ClassVar[bool] = False  # honours cudnn_engines and cudnn_benchmark
    measured: ClassVar[bool] = True  # False for the analytic model: predicted, not measured
    #: Runs a model in the precision it is typed in (onnxruntime converts nothing): --dtype names
    #: that precision, and a model typed otherwise is refused, not timed under another name.
    runs_as_typed: ClassVar[bool] = False

    @abstractmethod
    def availability(self) -> tuple[bool, str]:
        """(available, why not / what it will use). Must not raise, must be quick."""

    @abstractmethod
    def open(self, options: MeasureOptions) -> Session:
        """Check options against this backend (dtype, sms …) and start a session."""

    def check_options(self, options: MeasureOptions) -> None:
        """Shared option checks: a clear one-line error before anything runs."""
        from deployopt.errors import DeployoptError

        ok, why = (True, "") if options.extra.get("remote") else self.availability()  # --remote: the board's
        if not ok:
            raise BackendUnavailable(f"backend {self.name!r} is unavailable: {why}")
        if options.dtype not in self.dtypes:
            raise DeployoptError(
                f"backend {self.name!r} cannot run {options.dtype} (it runs {', '.join(self.dtypes)})"
            )
        if options.sms is not None and not self.can_limit_sms:
            raise DeployoptError(f"backend {self.name!r} cannot limit the GPU's SMs (--sms)")
        check_run_counts(options.runs)
        if options.extra.get("timing_cache"):
            refuse_timing_cache(self.name)
        if options.cudnn_engines is not None:
            if not self.can_choose_cudnn_engines:
                raise DeployoptError(
                    f"--cudnn-engines: backend {self.name!r} does not run cudnn.benchmark "
                    "(the torch backend does)"
                )
            if options.cudnn_engines < 0:
                raise DeployoptError("--cudnn-engines must be 0 (all engines) or more")
            if options.cudnn_engines > CUDNN_ENGINES_MAX:  # torch keeps it in a C int: 2^31 became negative
                raise DeployoptError(
                    f"--cudnn-engines {options.cudnn_engines}: at most {CUDNN_ENGINES_MAX} "
                    "(0 times all engines)"
                )
        if not options.cudnn_benchmark:
            if not self.can_choose_cudnn_engines:
                raise DeployoptError(
                    f"--no-cudnn-benchmark: backend {self.name!r} does not run cuDNN's autotuner "
                    "(the torch backend does)"
                )
            if options.cudnn_engines is not None:
                raise DeployoptError(
                    "--cudnn-engines and --no-cudnn-benchmark: the first sets how many engines the "
                    "autotuner times, the second turns it off; give one"
                )


# name -> "module:Class". Modules are imported on first use so a missing torch or tensorrt only
# affects its own backend.
REGISTRY: dict[str, str] = {
    "ort": "deployopt.backends.ort:OrtBackend",
    "torch": "deployopt.backends.torch:TorchBackend",
    "tensorrt": "deployopt.backends.tensorrt:TensorRTBackend",
    "trtexec": "deployopt.backends.trtexec:TrtexecBackend",
    "model": "deployopt.backends.model:WaveModelBackend",
}


def default_dtype(
    backend: Backend, model_path: str | os.PathLike[str] | None = None, deployment: bool = False
) -> str:
    """The dtype a command uses when --dtype is not given: int8 for an explicitly quantized (Q/DQ)
    model on a backend that runs int8 (TensorRT builds it as INT8 from its own scales; another
    precision would time another engine than the one deployed); else the backend's own default;
    else, with `deployment` (optimize), fp16 where the backend runs it; else its first dtype. A
    backend that runs models as typed (`runs_as_typed`) takes the model's own precision (its first
    dtype without a model)."""
    from deployopt.model import file_has_qdq, file_typed_precision

    if getattr(backend, "runs_as_typed", False):  # onnxruntime: what the model is typed in
        return file_typed_precision(model_path) if model_path is not None else backend.dtypes[0]
    if model_path is not None and "int8" in backend.dtypes and file_has_qdq(model_path):
        return "int8"
    own = getattr(backend, "default_dtype", None)
    if callable(own):
        return str(own())
    return "fp16" if deployment and "fp16" in backend.dtypes else backend.dtypes[0]


def quantized_without_int8(model_name: str, gpu: str, instead: str) -> str:
    """The refusal for a Q/DQ model whose default dtype (int8, `default_dtype`) the GPU has no native
    INT8 for (Nano, TX2): it says the model is quantized, since "--dtype int8: ... use --dtype fp16"
    named an option the user never gave. `gpu` names the GPU, `instead` what to do."""
    return (
        f"{model_name} is quantized (Q/DQ nodes), so it runs in INT8, which {gpu} has no native "
        f"support for; {instead}"
    )


def refuse_int8_the_target_lacks(model: Path, gpu: Any, instead: str) -> None:
    """A Q/DQ model gets int8 by default (`default_dtype`); on a target (`gpu`) without INT8 (Nano,
    TX2) the target's refusal said "--dtype int8: ... use --dtype fp16" to a user who gave no
    --dtype, about a model TensorRT builds in INT8 from its Q/DQ nodes whatever the flag. Say where
    int8 came from (`instead`: what the user can do with this command). analyze and optimize."""
    from deployopt.errors import TargetError

    if "int8" not in gpu.dtypes():
        raise TargetError(
            quantized_without_int8(model.name, f"{gpu.display_name} (compute capability {gpu.cc})", instead)
        )


#: The backends that build TensorRT engines, and so take a TensorRT timing cache.
TIMING_CACHE_BACKENDS = ("tensorrt", "trtexec")


def refuse_timing_cache(backend: str, flag: str = "--timing-cache") -> None:
    """A timing cache asked of a backend that builds no TensorRT engine: one line, not a silent no-op."""
    if backend not in TIMING_CACHE_BACKENDS:
        raise DeployoptError(
            f"{flag}: backend {backend!r} builds no TensorRT engines (a timing cache is for "
            "--backend tensorrt or trtexec)"
        )


#: The backends that time a model (all but "model", which predicts): what bench's and profile's
#: --backend and staircase's and calibrate's --measure take.
MEASURING_BACKENDS = tuple(name for name in REGISTRY if name != "model")

#: Names a backend goes by elsewhere, for "did you mean" (onnxruntime is 'ort' here).
_BACKEND_ALIASES = {
    "onnxruntime": "ort",
    "onnx": "ort",
    "pytorch": "torch",
    "cudnn": "torch",
    "cuda": "torch",
    "trt": "tensorrt",
}


def unknown_backend(name: str, choices: Sequence[str], option: str | None = None) -> str:
    """The line for a backend name no backend has: the closest of `choices` (what the option takes
    in this command; an alias such as onnxruntime for ort), the choices, and the option. It listed
    every registered backend, 'model' too, to commands that refuse it, and named no option."""
    import difflib

    near = _BACKEND_ALIASES.get(name.lower())
    if near not in choices:
        near = next(iter(difflib.get_close_matches(name.lower(), list(choices), n=1)), None)
    guess = f"; did you mean {near!r}? choose" if near else "; choose"
    where = f" for {option}" if option else ""
    return f"unknown backend {name!r}{guess} one of: {', '.join(choices)}{where}"


def get_backend(name: str) -> Backend:
    """The backend registered as `name`; an unknown name is one line listing every registered one
    (a command that takes fewer, under an option, says `unknown_backend` itself)."""
    if name not in REGISTRY:
        raise BackendUnavailable(unknown_backend(name, list(REGISTRY)))
    module_name, _, cls_name = REGISTRY[name].partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, cls_name)()


def get_measuring_backend(name: str, option: str) -> Backend:
    """`get_backend` for a command that times with it: an unknown name lists only the backends
    that measure (MEASURING_BACKENDS), under `option` (--backend, --measure), not 'model' too."""
    try:
        return get_backend(name)
    except BackendUnavailable:
        if name in REGISTRY:
            raise
        raise BackendUnavailable(unknown_backend(name, MEASURING_BACKENDS, option)) from None


def list_backends() -> list[tuple[str, bool, str]]:
    """[(name, available, why)] for every registered backend."""
    rows = []
    for name in REGISTRY:
        try:
            ok, why = get_backend(name).availability()
        except ImportError as exc:  # a backend module itself failed to import
            reraise_interrupt(exc)
            ok, why = False, f"import failed: {exc}"
        rows.append((name, ok, why))
    return rows
