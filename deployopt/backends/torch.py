"""PyTorch/cuDNN backend: onnx2torch → CUDA, fp16/fp32, channels_last, cudnn.benchmark, CUDA graphs.

Everything runs in one worker process per session (deployopt/backends/torch_worker.py): the green
context that limits SMs is one per process and must precede any cuDNN handle, a model can crash or
hang the CUDA context, and keeping one warm worker across the dozens of models an optimizer run
times saves the imports and cuDNN's autotuning. Each request has a timeout; a crashed or hung
worker is killed, reported as one line, and replaced on the next request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployopt import errors
from deployopt.backends import cuda_conv
from deployopt.backends.base import Backend, KernelRecord, LayerTime, MeasureOptions, Profile, Session
from deployopt.backends.torch_worker import DEATH_SIGNAL_ENV, PARENT_ENV
from deployopt.errors import BackendFailed, BackendUnavailable, DeployoptError, shorten
from deployopt.layers import ConvShape
from deployopt.timing import Timing

if TYPE_CHECKING:
    from deployopt.memory import RunEstimate
    from deployopt.model import LoadedModel

INSTALL_HINT = "pip install 'deployopt[torch]'"
NO_GPU_FOR_SMS = "--sms needs a CUDA GPU (green contexts); none is visible"


def _error_class(kind: str) -> type[DeployoptError]:
    cls = getattr(errors, kind, None)
    return cls if isinstance(cls, type) and issubclass(cls, DeployoptError) else BackendFailed


def profile_from_json(d: dict[str, Any]) -> Profile:
    """Rebuild a Profile from its to_json form (the worker sends profiles as JSON)."""
    layers = []
    for layer in d.get("layers", []):
        kernels = []
        for k in layer.get("kernels", []):
            kk = dict(k)
            for key in ("grid", "block", "tile"):
                if kk.get(key) is not None:
                    kk[key] = tuple(kk[key])
            kernels.append(KernelRecord(**kk))
        layers.append(
            LayerTime(
                name=layer["name"],
                time_us=layer["time_us"],
                share=layer["share"],
                onnx_nodes=list(layer.get("onnx_nodes", [])),
                kernels=kernels,
                extra=dict(layer.get("extra", {})),
                iqr_us=layer.get("iqr_us"),
            )
        )
    return Profile(
        backend=d["backend"],
        layers=layers,
        environment=d.get("environment", {}),
        timed=d.get("timed", ""),
        runs=d.get("runs", 0),
    )


#: The folder the deployopt package that runs here was imported from: the worker imports the same
#: one (the two speak one protocol), where its path would not find it otherwise.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def worker_command() -> list[str]:
    """How the worker is started: the module run as `python -m` runs it, but with the current folder
    taken off the front of sys.path (where `-m` and `-c` put it; Python >= 3.11's -P is not on
    3.9), as the deployopt console script has it. With `-m`, a user's copy.py, numpy.py or their own
    onnx2torch.py in the folder deployopt ran from was imported (and run) in place of the library's
    in the worker alone: "PyTorch is not installed" while `deployopt backends` said it was. The
    package's own folder (PACKAGE_ROOT) goes first where not on the path (a checkout run as
    `python -m deployopt` from its root): appended, an installed copy of deployopt in site-packages
    was the worker's while the checkout was its parent's (review of d563a19)."""
    code = (
        "import sys\n"  # built in: nothing read from the folder before it is off the path
        "if sys.path[:1] == ['']: del sys.path[0]\n"
        f"if {PACKAGE_ROOT!r} not in sys.path: sys.path.insert(0, {PACKAGE_ROOT!r})\n"
        "import runpy\n"
        "runpy.run_module('deployopt.backends.torch_worker', run_name='__main__', alter_sys=True)\n"
    )
    return [sys.executable, "-c", code]


class WorkerProcess:
    """One torch_worker child (worker_command) and its JSON-lines channel."""

    def __init__(self, config: dict[str, Any], timeout_s: float) -> None:
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (lives as long as the worker)
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        # who the worker outlives no longer (torch_worker.exit_with_parent); the death signal only
        # from the main thread, as Linux sends it when the thread that started the worker ends
        env[PARENT_ENV] = str(os.getpid())
        env[DEATH_SIGNAL_ENV] = "1" if threading.current_thread() is threading.main_thread() else ""
        self.proc = subprocess.Popen(
            worker_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            env=env,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.ready = self.request(config, timeout_s, "starting the worker")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def stderr_tail(self) -> str:
        """The last meaningful line the worker wrote to stderr (the crash reason, usually)."""
        try:
            self._stderr.seek(0)
            lines = [ln.strip() for ln in self._stderr.read().splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        lines = [ln for ln in lines if not ln.startswith(("USDT:", "STAGE:", "[W", "ERROR:20"))] or lines
        return shorten(lines[-1]) if lines else ""

    def request(self, req: dict[str, Any], timeout_s: float, what: str) -> dict[str, Any]:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the worker is gone; the reader reports it below
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            self.kill()
            raise BackendFailed(
                f"torch worker hung: no answer within {timeout_s:g} s while {what}; worker killed"
            ) from None
        if line is None:
            rc = self.proc.wait()
            tail = self.stderr_tail()
            self.kill()
            hint = errors.oom_hint(rc)
            if hint:  # no stderr of its own to quote: the kernel's log says who killed it
                raise BackendFailed(f"torch worker {errors.exit_phrase(rc)} while {what}: {hint}")
            raise BackendFailed(
                f"torch worker crashed (exit code {rc}) while {what}" + (f": {tail}" if tail else "")
            )
        resp = json.loads(line)
        # raised again here, where the CLI prints them (memory.MemoryRiskWarning), before a failure
        # they may explain
        if resp.get("warnings"):
            import warnings

            from deployopt.memory import MemoryRiskWarning

            for message in resp["warnings"]:
                warnings.warn(message, MemoryRiskWarning, stacklevel=2)
        if not resp.get("ok"):
            raise _error_class(resp.get("type", "BackendFailed"))(resp.get("error", "torch worker failed"))
        return resp

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()
        self._stderr.close()

    def close(self) -> None:
        if self.alive():
            with contextlib.suppress(DeployoptError):
                self.request({"op": "quit"}, 10.0, "closing")
        self.kill()


class TorchSession(Session):
    def __init__(self, backend: TorchBackend, options: MeasureOptions) -> None:
        super().__init__(backend, options)
        extra = options.extra
        self.config = {
            "dtype": options.dtype,
            "sms": options.sms,
            "runs": options.runs,
            "warmup": options.warmup,
            "device": extra.get("device", "auto"),
            "replays_per_sample": extra.get("replays_per_sample", 1),
            "profile_runs": extra.get("profile_runs", 20),
            "cudnn_benchmark_limit": options.cudnn_engines,
            "cudnn_benchmark": options.cudnn_benchmark,
        }
        self.worker: WorkerProcess | None = None
        self._host_checked: RunEstimate | None = None  # check_memory's estimate, for the next model
        self._start()  # fail here (no CUDA for fp16, bad --sms) rather than on the first model

    def _start(self) -> WorkerProcess:
        if self.worker is None or not self.worker.alive():
            self.worker = WorkerProcess(self.config, self.options.timeout_s)
        return self.worker

    @property
    def cuda(self) -> bool:
        return bool(self._start().ready.get("cuda"))

    @property
    def runs_on_gpu(self) -> bool:
        return self.cuda

    def _call(self, req: dict[str, Any], what: str) -> dict[str, Any]:
        worker = self._start()
        try:
            return worker.request(req, self.options.timeout_s, what)
        except BackendFailed:
            if not worker.alive():
                self.worker = None  # the next request starts a fresh one
            raise

    def _model_request(self, op: str, model_path: Path, **more: Any) -> dict[str, Any]:
        path = Path(model_path)
        if not path.is_file():
            raise errors.no_such_file(path, errors.ModelError)
        req = {
            "op": op,
            "path": str(path.resolve()),
            "batch": self.options.batch,
            "input_shapes": self.options.input_shapes,
            **more,
        }
        checked, self._host_checked = self._host_checked, None  # covers the next model only
        if checked is not None:  # the worker need not check (or warn about) it again
            req["host_checked"] = dataclasses.asdict(checked)
        resp = self._call(req, f"{'timing' if op == 'measure' else 'profiling'} {path.name}")
        self.say_once(resp.get("rebatched", ""))  # once it ran, as ort says it
        return resp

    def check_memory(self, loaded: LoadedModel) -> None:
        """Host memory only, here in the parent (on CUDA: the inputs and weights it stages), so that
        optimize fails before its output folder exists; the worker checks the GPU's free memory
        itself when it loads the model. The next model request (optimize's input model) carries
        this estimate, and the worker's own host check (what bench and profile rely on) skips a
        model of exactly that estimate: one host check and one warning for it per run, not two.
        Every later model is checked there."""
        from deployopt.memory import require_host_memory

        self._host_checked = require_host_memory(
            loaded.model, "torch, host memory", activations=not self.cuda
        )

    def measure(self, model_path: Path) -> Timing:
        return Timing.from_json(self._model_request("measure", model_path)["timing"])

    def profile(self, model_path: Path, kernels: bool = False) -> Profile:
        trace_path = None
        if self.options.workdir is not None:
            from deployopt.fileio import run_unique_path

            Path(self.options.workdir).mkdir(parents=True, exist_ok=True)
            # a name of this run's own: named after the model alone, same-named models' or two
            # batches' traces replaced each other (as ort's, fileio.run_unique_path)
            folder = Path(self.options.workdir).resolve()
            trace_path = str(run_unique_path(folder, Path(model_path).stem, ".trace.json"))
        resp = self._model_request("profile", model_path, kernels=kernels, trace_path=trace_path)
        profile = profile_from_json(resp["profile"])
        if trace_path is not None and Path(trace_path).is_file():
            # `profile --trace-dir` lists what the backend says it kept, not every new file in DIR
            kept = str(Path(self.options.workdir) / Path(trace_path).name)
            profile.trace_files = [kept]
        return profile

    def measure_convs(self, shapes: list[ConvShape]) -> list[Timing]:
        """cuDNN directly (deployopt.backends.cuda_conv) inside the worker, in its green context;
        on CPU the base class's one-conv ONNX models."""
        if not self.cuda:
            return super().measure_convs(shapes)
        resp = self._call(
            {"op": "convs", "shapes": [s.to_json() for s in shapes]}, f"timing {len(shapes)} convs"
        )
        out = []
        for shape, res in zip(shapes, resp["results"]):
            retimed = res.get(cuda_conv.RETIMED)
            again = (
                f"; timed {len(retimed)} times, being over {cuda_conv.SPIKE_OVER:g}× its neighbours "
                f"(medians {', '.join(f'{m:.1f}' for m in retimed)} µs), these samples from the lowest"
                if retimed
                else ""
            )
            out.append(
                Timing(
                    backend="torch",
                    samples_us=list(res["samples_us"]),
                    warmup=3,
                    timed=(
                        f"one cuDNN conv {shape.signature()} via torch.nn.Conv2d (no bias): CUDA graph of "
                        f"repeated convs, each sample the CUDA-event time of ~2 ms of replays divided by "
                        f"the convs in them, {resp['where']}{again}"
                    ),
                    environment={**resp["environment"], cuda_conv.RETIMED: retimed}
                    if retimed
                    else resp["environment"],
                )
            )
        return out

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


#: Files that show a CUDA GPU without importing torch. A discrete GPU's driver makes the first two
#: (and ships nvidia-smi). A Jetson's integrated GPU is driven by nvgpu, which makes neither, and
#: JetPack 4 and 5 have no nvidia-smi: there, the GPU's control node of the nvhost/nvgpu driver
#: (the node Jetson containers are given, `--device /dev/nvhost-ctrl-gpu`, from L4T r32 to r36)
#: tells. Paths are absolute; `cuda_visible(root=...)` reads them under another root (tests).
GPU_MARKERS = (
    "/proc/driver/nvidia/gpus",
    "/dev/nvidia0",
    "/dev/nvhost-ctrl-gpu",
    "/dev/nvhost-gpu",
)


def cuda_visible(root: str | os.PathLike[str] = "/") -> bool:
    """A cheap guess whether a CUDA GPU is present, without importing torch (seconds): a desktop
    or datacenter GPU, or a Jetson's (which has no /dev/nvidia0 and often no nvidia-smi: a Jetson
    read as GPU-less got fp32 by default, had fp16 and --sms refused, and `optimize`'s automatic
    backend passed torch by)."""
    if any(os.path.exists(os.path.join(root, marker.lstrip("/"))) for marker in GPU_MARKERS):
        return True
    return shutil.which("nvidia-smi") is not None


class TorchBackend(Backend):
    name = "torch"
    description = (
        "PyTorch/cuDNN via onnx2torch: CUDA graphs, channels_last, cudnn.benchmark, green-context SMs"
    )
    dtypes = ("fp32", "fp16")
    can_limit_sms = True
    can_choose_cudnn_engines = True

    def availability(self) -> tuple[bool, str]:
        missing = [m for m in ("torch", "onnx2torch", "torchvision") if importlib.util.find_spec(m) is None]
        if missing:
            return False, f"{', '.join(missing)} not installed: {INSTALL_HINT}"
        version = metadata.version("torch")
        if cuda_visible():
            return True, f"torch {version}, CUDA GPU present: fp16/fp32, --sms via green contexts"
        return True, f"torch {version}, no CUDA GPU visible: CPU, fp32 only"

    def default_dtype(self) -> str:
        return "fp16" if cuda_visible() else "fp32"

    def open(self, options: MeasureOptions) -> Session:
        self.check_options(options)
        # What needs no GPU is refused here, before a worker starts; the green-context granularity
        # depends on the compute capability, which only the worker reads (cuda_conv.green_context_rule)
        if options.sms is not None and options.sms < 1:
            raise DeployoptError(f"--sms {options.sms}: must be a positive integer")
        if options.sms is not None and not cuda_visible():
            raise DeployoptError(NO_GPU_FOR_SMS)
        if not importlib.util.find_spec("torch"):
            raise BackendUnavailable(f"PyTorch is not installed: {INSTALL_HINT}")
        return TorchSession(self, options)
