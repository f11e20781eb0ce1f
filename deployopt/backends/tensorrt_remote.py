"""`--backend tensorrt --remote USER@HOST`: jetson/runner.py run on the board over ssh, in one command.

Why the runner and not trtexec: its result records more (per-run CUDA-event samples, the board's
nvpmodel / jetson_clocks / devfreq, and the GPU clock, temperatures and over-current counters
around the timed loop, which `compare` reads to flag a throttled run), and it is what users
already copied to the board by hand. This session does that by hand-work in one go: the runner and
the model (and an INT8 calibration table or .npy) go to a work folder on the board with scp,
`python3 runner.py ...` runs there over ssh (ssh and scp from deployopt.remote), and its result
JSON comes back and is read with load_runner_result. Each model file has a folder of its own there
(its name and a hash of its bytes: model_dir_name), and its result is checked to be that file's.
Runs of the same file at other settings share that folder, so each session writes its result there
under a name of its own (result-<token>.json: own_name). Engines stay cached in the folder (the
runner keys them on their inputs), so a rerun of the same model reuses its engine.

TensorRT >= 11 (strongly typed) has no FP16 build flag and the runner cannot retype a model (no onnx
on the board), so for fp16/int8 the session reads the board's TensorRT version once, before the
first model goes there, and on 11.x types the model fp16 here (deployopt.precision, as trtexec
--remote does) or refuses in one line what 11.x cannot build, before anything is copied.

NEVER RUN AGAINST A REAL JETSON: tested with stand-in ssh/scp that play the board on this machine,
running the real runner against the fake TensorRT of tests/test_tensorrt_fake_api.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import warnings
from pathlib import Path, PurePosixPath
from typing import Any

from deployopt.backends.base import Backend, LayerTime, MeasureOptions, Profile, Session
from deployopt.errors import (
    BackendFailed,
    BackendUnavailable,
    DataError,
    DeployoptError,
    DeployoptWarning,
    ModelError,
    no_such_file,
)
from deployopt.layers import ConvShape
from deployopt.remote import (
    MODEL_KEY_HEX,
    QUICK_STEP_S,
    RUNNER_WORKDIR,
    Board,
    RemoteFailed,
    board_name,
    board_timing_cache,
    check_workdir,
    fetch_engine,
    interrupt_ends,
    make_sweep_dir,
    mkdir_warning_of_other_runs,
    model_dir_name,
    model_weights,
    own_name,
    owned_run_dir,
    remote_run_dir,
    remove_run_dir,
    remove_sweep_dir,
    sent_external,
    session_token,
    sweep_convs_dir,
)
from deployopt.timing import Timing

ENV_RUNNER = "DEPLOYOPT_RUNNER"
#: Relative, so in the login's home on the board (ssh starts there, and scp resolves a relative
#: remote path there, old and new scp alike): unlike /tmp it survives a reboot, and so do the engines.
DEFAULT_REMOTE_WORKDIR = RUNNER_WORKDIR
#: The shell's status for a command it cannot find (POSIX): here python3 missing on the board.
NOT_FOUND = 127
#: jetson/runner.py's import_trt refusal, word for word (a test keeps the two equal): a board whose
#: tensorrt does not import reads the same whether the version check or the runner found it.
TENSORRT_NOT_IMPORTABLE = "tensorrt is not importable (it comes with JetPack: python3-libnvinfer)"
#: What the runner's `timed` says for a model typed fp16 (its precision_phrase); replaced by
#: trtexec's phrase when this host typed the model, as that is then what was built.
RUNNER_TYPED_FP16 = "fp16 as typed in the model (TensorRT 11 strong typing)"

#: `extra` key of a caller without a --timeout option (`targets --remote`): a step that times out
#: does not say --timeout raises its limit (Board.timed_out).
NO_TIMEOUT_OPTION = "no_timeout_option"
#: The runner's result in a model's board folder, as each session names its own (own_name).
RESULT = "result.json"

#: The per-layer sweep's folder in the work folder: `convs/` holds one batch's conv models and
#: results (emptied at each batch), `engines/` the runner's engines for them (kept, so a rerun of
#: the same convs reuses them).
SWEEP_DIR = "_sweep"


#: Where an installed deployopt keeps jetson/runner.py: pyproject.toml maps the private subpackage
#: deployopt._jetson to the jetson/ folder, so a wheel carries the file without a second copy in git
#: (and without a top-level `jetson` package, a name NVIDIA's jetson-inference owns).
PACKAGED_RUNNER = ("_jetson", "runner.py")


def find_runner() -> Path:
    """The runner.py to copy to the board: $DEPLOYOPT_RUNNER, else the one installed inside the
    deployopt package (a wheel or a normal `pip install .`), else the checkout's jetson/runner.py
    (an editable install or a source tree, where the package folder holds no copy)."""
    env = os.environ.get(ENV_RUNNER)
    if env:
        if not Path(env).is_file():
            raise BackendUnavailable(
                f"--backend tensorrt --remote needs jetson/runner.py: not found at {ENV_RUNNER}={env}"
            )
        return Path(env)
    from importlib.resources import files

    packaged = files("deployopt").joinpath(PACKAGED_RUNNER[0]).joinpath(PACKAGED_RUNNER[1])
    checkout = Path(__file__).resolve().parents[2] / "jetson" / "runner.py"
    for path in (Path(str(packaged)), checkout):
        if path.is_file():
            return path
    raise BackendUnavailable(
        f"--backend tensorrt --remote needs jetson/runner.py: not found in the installed package "
        f"({packaged}) nor at {checkout}; reinstall deployopt or set {ENV_RUNNER}"
    )


#: calibration_file's flag for calibration data (a folder of images, an .npz, a folder of arrays,
#: a .npy too): made into one .npy of the model's input here (calibration_npy), sent as --calib-npy.
MADE_HERE = "--calib-data"


def calibration_file(options: MeasureOptions) -> tuple[str, str] | None:
    """What an INT8 build on the board calibrates from, as (runner flag, host file): a calibration
    table (--calib-cache, read as the tensorrt backend reads one) or data (MADE_HERE: a folder of
    images, an .npz, a .npy), made into the runner's .npy here per model (calibration_npy). A .npy
    went as it was, so one the host's loader reads (N x 1x3x32x32 with the batch axis, a single
    3x32x32 item) was refused by the runner after ssh, uncapped and unchecked for NaN."""
    from deployopt.backends.tensorrt import table_only

    if options.dtype != "int8":
        return None
    table = table_only(options)
    if table is not None:
        if not Path(table).is_file():  # before anything reaches the board
            raise no_such_file(table, DataError)
        return ("--calib-cache", table)
    if not options.calibration_data:
        return None
    data = str(options.calibration_data)
    if not Path(data).exists():  # before anything reaches the board
        raise no_such_file(data, DataError)
    return (MADE_HERE, data)


def model_input_dims(
    model_path: Path, options: MeasureOptions, inputs: list[Any] | None = None
) -> dict[str, list[int]]:
    """Every input of the model as it is built: the shapes given (--input-shape, --batch), else its
    own dims with a dynamic one taken as 1. `inputs`: trtexec.onnx_graph_inputs, where read already."""
    from deployopt.backends.trtexec import _onnx_input_dims, input_shapes

    given = input_shapes(model_path, options)
    return {
        name: given.get(name) or [1 if x is None else x for x in d]
        for name, d in _onnx_input_dims(model_path, inputs).items()
    }


def model_input_dtypes(model_path: Path, inputs: list[Any] | None = None) -> dict[str, Any]:
    """Each graph input's numpy dtype, read from the file's header (no weight data): what the
    calibration data must be able to hold (deployopt.fidelity.check_fed_types). `inputs`:
    trtexec.onnx_graph_inputs, where read already."""
    import onnx

    from deployopt.backends.trtexec import onnx_graph_inputs

    return {
        inp.name: onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type).type
        for inp in (onnx_graph_inputs(model_path) if inputs is None else inputs)
        if inp.type.tensor_type.elem_type
    }


def calibration_npy(
    options: MeasureOptions,
    model_name: str,
    dims: dict[str, list[int]],
    dest: Path,
    dtypes: dict[str, Any] | None = None,
) -> Path:
    """The calibration data made into the one .npy the runner's --calib-npy reads (N items shaped
    like one batch item of the model's input, `dims`: model_input_dims), written to `dest`: the
    samples the local tensorrt backend calibrates on (deployopt.fidelity's loader,
    --mean/--std/--scale/--bgr/--resize for images, at most DEFAULT_CALIBRATION_COUNT), stacked.
    The runner calibrates a single input from one .npy: a model with more is one line.

    `dtypes` (model_input_dims' inputs' types): the samples are checked as the local backend's
    CalibrationBatcher checks them (check_fed_types), before anything goes to the board: normalised
    images for a uint8 input were sent and refused only by the runner, after the copies."""
    import numpy as np

    from deployopt.backends.tensorrt import DEFAULT_CALIBRATION_COUNT
    from deployopt.backends.tensorrt_calibrator import calibration_notice, load_samples
    from deployopt.fidelity import CalibrationSet, check_fed_types

    data = str(options.calibration_data)
    if len(dims) != 1:
        raise DataError(
            f"--calibration-data {data}: with --remote the board's runner calibrates a single-input model "
            f"from one .npy; {model_name} has {len(dims)} inputs: give a calibration table "
            "(.cache/.calib/.table) made for it"
        )
    ((name, shape),) = dims.items()
    count = int(options.extra.get("calibration_count", DEFAULT_CALIBRATION_COUNT))
    notices: list[str] = []
    samples = load_samples(data, {name: tuple(shape)}, count, options.calibration_preprocess, notices)
    if dtypes and any(t != np.float32 for t in dtypes.values()):  # the local path's check and words
        check_fed_types(CalibrationSet(samples=samples, source=data, random=False), dtypes)
    np.save(dest, np.concatenate([np.asarray(s[name], dtype=np.float32) for s in samples]))
    for notice in notices:  # as the local tensorrt backend says them (once a session: made once)
        warnings.warn(calibration_notice(notice), DeployoptWarning, 2)
    return dest


#: What the runner's --shapes (NAME:DIMS[,NAME:DIMS…], split on ',') cannot hold in an input's name,
#: and the tool refuse_unnamable_inputs names.
RUNNER_SHAPES = (",", "jetson/runner.py's --shapes")


def refuse_unnamable_inputs(shapes: dict[str, list[int]], model_name: str, tool: tuple[str, str]) -> None:
    """One ModelError line, before anything is built or copied, for an input of `shapes` (what goes
    into a --shapes list: the dynamic inputs and those given --input-shape) whose name holds one of
    the characters `tool`[0], which that list (`tool`[1]) cannot name: an ONNX input may be named
    "a,b", and the runner split it into 'a' and 'b:1x3x8x8' on the board after the copy ("bad
    --shapes entry 'a'", of a --shapes the user never gave)."""
    chars, where = tool
    for name in shapes:
        bad = next((c for c in name if c in chars), None)
        if bad is not None:
            raise ModelError(
                f"input {name!r} of {model_name} has {bad!r} in its name, which {where} cannot name: "
                "rename the input (onnx-graphsurgeon) or make its dims static in the model (and give "
                "it no --input-shape)"
            )


def runner_flags(
    options: MeasureOptions, shapes: dict[str, list[int]], engine_dir: PurePosixPath
) -> list[str]:
    """How the runner builds and times, for one model or a batch: dtype, runs, shapes, workspace,
    where engines are cached. Pure."""
    from deployopt.backends.trtexec import DEFAULT_WORKSPACE_MIB, shapes_arg

    flags = ["--dtype", options.dtype, "--runs", str(options.runs), "--warmup", str(options.warmup)]
    if shapes:
        flags += ["--shapes", shapes_arg(shapes)]
    flags += ["--workspace-mib", str(int(options.extra.get("workspace_mib", DEFAULT_WORKSPACE_MIB)))]
    if options.extra.get("timing_cache"):  # a path on the board (RemoteRunnerSession put it there)
        flags += ["--timing-cache", str(options.extra["timing_cache"])]
    return [*flags, "--engine-dir", str(engine_dir)]


def batch_command(
    runner: PurePosixPath,
    folder: PurePosixPath,
    options: MeasureOptions,
    shapes: dict[str, list[int]],
    engine_dir: PurePosixPath,
) -> list[str]:
    """The runner's command line for every model in `folder` at once (--batch-dir). Pure."""
    return ["python3", str(runner), "--batch-dir", str(folder), *runner_flags(options, shapes, engine_dir)]


def runner_command(
    runner: PurePosixPath,
    model: PurePosixPath,
    rdir: PurePosixPath,
    options: MeasureOptions,
    shapes: dict[str, list[int]],
    calib: tuple[str, PurePosixPath] | None,
    per_layer: bool,
    result: str = RESULT,
) -> list[str]:
    """The runner's command line on the board: every path in the board's work folder, its result
    written as `rdir`/`result` (the session's own name for it: own_name). Pure."""
    cmd = ["python3", str(runner), str(model), *runner_flags(options, shapes, rdir / "engines")]
    if calib is not None:
        cmd += [calib[0], str(calib[1])]
    if per_layer:
        cmd.append("--per-layer")
    return [*cmd, "--out", str(rdir / result)]


def sweep_model_name(index: int, shape: ConvShape) -> str:
    """A conv's file stem in a batch: its place (the runner times them in name order) and its
    shape, so the runner's one-line error for it says which conv failed."""
    return board_name(f"conv{index:05d}-{shape.signature()}")


def python3_missing(exc: RemoteFailed) -> bool:
    """The board's shell could not find python3 (its status 127, and python3 named in its words)."""
    return exc.returncode == NOT_FOUND and any("python3" in ln for ln in exc.err.splitlines())


class RemoteRunnerSession(Session):
    """jetson/runner.py on one board, per model: copy, run, copy the result back."""

    @property
    def runs_on_gpu(self) -> bool:
        return True  # the runner times TensorRT engines on the board's GPU only

    def __init__(self, backend: Backend, options: MeasureOptions) -> None:
        super().__init__(backend, options)
        self.host: str = options.extra["remote"]
        given = None if options.extra.get(NO_TIMEOUT_OPTION) else options.timeout_s
        self.board = Board(self.host, int(options.extra.get("ssh_connect_timeout_s", 10)), given)
        # this session's result in a model's board folder: another run of the same file (same
        # folder) at other settings writes its own, never this one's
        self.result_name = own_name(RESULT, session_token())
        self.runner = find_runner()
        self.calib = calibration_file(options)
        self.workdir = check_workdir(options.extra.get("remote_workdir", DEFAULT_REMOTE_WORKDIR))
        self.run_dir = remote_run_dir(self.workdir, options)  # optimize's own folder
        self._removes = owned_run_dir(self.run_dir, options)  # removed at close, by one session of the run
        board_cache = board_timing_cache(options, self.workdir, self.run_dir)
        if board_cache is not None:  # the runner reads and updates the board's copy, not the host path
            self.options = dataclasses.replace(
                options, extra={**options.extra, "timing_cache": str(board_cache)}
            )
        if self.run_dir is not None:
            self.workdir = self.run_dir
        self._runner_sent = False
        # bench's and profile's look for another run at work on the board is still to come (with
        # its first mkdir); optimize's run looks in preflight
        self._look_for_others = self.run_dir is None
        self._convs: PurePosixPath | None = None  # this session's conv folder, made by its first sweep
        self.trt_version: str | None = None  # the board's, read once (fp16/int8 only): _for_board
        self._here: tempfile.TemporaryDirectory[str] | None = None  # models typed fp16, .npy made here
        self._calib_npys: dict[str, Path] = {}  # calibration data made into .npy here, per input shape
        self._calib_sent: dict[str, PurePosixPath] = {}  # calibration files on the board: _send_calibration
        self._relayed: set[str] = set()  # the board's warnings already said (_relay_warnings)

    def _run(self, model_path: Path, per_layer: bool) -> dict[str, Any]:
        """Copy, run, copy back: the runner's result document (read back as load_runner_result reads it)."""
        from deployopt.backends.trtexec import input_shapes
        from deployopt.prebuilt import is_engine_file, refuse_engine_options

        model_path = Path(model_path)
        if not model_path.is_file():
            raise no_such_file(model_path, ModelError)
        engine = is_engine_file(model_path)
        typing = None
        if not engine:
            from deployopt.model import file_typed_precision

            model_path = self.at_batch(model_path)  # --batch N on a batch the file fixes: a copy at N

            # read once, before anything goes to the board, for every dtype: an FP8 or W8A16 Q/DQ
            # model is one line here (fp32 sent it and recorded it fp32); the record reads it too
            typing = file_typed_precision(model_path)
        if engine:  # timed as it is: no ONNX read here, no version check, no fp16 typing, no weights
            refuse_engine_options(model_path, self.options.batch, self.options.calibration_data)
            shapes, send, weights = dict(self.options.input_shapes), model_path, []
            refuse_unnamable_inputs(shapes, model_path.name, RUNNER_SHAPES)
        else:
            shapes = input_shapes(model_path, self.options)
            refuse_unnamable_inputs(shapes, model_path.name, RUNNER_SHAPES)  # before the version check too
            send = self._for_board(
                model_path, typing
            )  # typed fp16 here on TensorRT >= 11; refusals before any copy
            weights = model_weights(send)  # its external data goes along: checked before any copy
        from deployopt.backends.tensorrt import content_digest

        sent_sha = content_digest(send)  # the runner records it: the result is checked against it
        rdir = self.workdir / model_dir_name(model_path.stem, sent_sha, sent_external(send, weights))
        board_model = rdir / board_name(send.name)
        short = self.short_s
        long = self.options.timeout_s
        calib_here = self.calib
        if calib_here is not None and calib_here[0] == MADE_HERE:  # before anything goes to the board
            calib_here = ("--calib-npy", str(self._calibration_npy(model_path)))
        result = self.result_name
        stale = [result]  # a runner that wrote none must not hand back this session's last one
        if self._look_for_others:  # the first model of bench or profile: mkdir_warning_of_other_runs
            self._look_for_others = False
            mkdir_warning_of_other_runs(self.board, rdir, short, stale)
        else:
            self.board.mkdir(rdir, short, stale)
        board_runner = self._send_runner(short)
        self.board.put_model(send, board_model, long, weights)
        calib = None
        if calib_here is not None:
            calib = self._send_calibration(*calib_here, rdir, board_model.name, long)
        cmd = runner_command(board_runner, board_model, rdir, self.options, shapes, calib, per_layer, result)
        try:
            self.board.run_limited(cmd, "runner.py", long, ends_with=interrupt_ends(rdir, self.run_dir))
        except RemoteFailed as exc:
            raise BackendFailed(self._runner_error(exc)) from None
        self._relay_warnings()
        with tempfile.TemporaryDirectory(prefix="deployopt-runner-") as tmp:
            local = Path(tmp) / RESULT
            self.board.get(rdir / result, local, f"scp of {result}", short)
            from deployopt.backends.tensorrt import load_runner_result

            try:
                timing = load_runner_result(local)  # one-line DataError for a result it cannot read
            except DataError as exc:  # named as the board's file, not this temporary copy
                where = f"runner.py's result {rdir / result} on {self.host}"
                raise DataError(str(exc).replace(str(local), where)) from None
            doc = json.loads(local.read_text())
        self._check_timed(timing, sent_sha, board_model)
        timing.environment["remote"] = self.host  # "runner" already names the runner's version
        if send != model_path:
            self._typed_here(timing)
        elif typing is not None:
            self._built_as_typed(timing, typing)
        return {"timing": timing, "layers": doc.get("layers")}

    def _send_calibration(
        self, flag: str, local: str, rdir: PurePosixPath, model_name: str, timeout_s: float
    ) -> tuple[str, PurePosixPath]:
        """The runner's calibration flag and the board's copy of `local`, sent beside the first model
        that needs it and read from there by every later one of this session (the runner only reads
        it): optimize calibrates every candidate on the same data, up to 512 inputs, which went to
        the board again beside each candidate."""
        if local not in self._calib_sent:
            from deployopt.backends.tensorrt import content_digest

            # named by its contents: another run of the same model (same folder) with other data
            # under the same name (calib1.npy, made here by every session) must not replace it
            path = Path(local)
            name = board_name(f"{path.stem}-{content_digest(path)[:MODEL_KEY_HEX]}{path.suffix}")
            board = rdir / (name if name != model_name else f"calib_{name}")
            self.board.put(local, board, "scp of the calibration file", timeout_s)
            self._calib_sent[local] = board
        return (flag, self._calib_sent[local])

    def _calibration_npy(self, model_path: Path) -> Path:
        """calibration_npy of `model_path`, made once per input shape in this session (optimize's
        candidates share their input: the images are decoded once, not once a candidate)."""
        from deployopt.backends.trtexec import onnx_graph_inputs

        inputs = onnx_graph_inputs(model_path)  # one read of the file for both, once a candidate
        dims = model_input_dims(model_path, self.options, inputs)
        dtypes = model_input_dtypes(model_path, inputs)
        # all the .npy and its check depend on, besides the session's options
        key = repr((sorted(dims.items()), sorted((n, str(t)) for n, t in dtypes.items())))
        if key not in self._calib_npys:
            dest = self._made_here() / f"calib{len(self._calib_npys) + 1}.npy"
            self._calib_npys[key] = calibration_npy(self.options, model_path.name, dims, dest, dtypes)
        return self._calib_npys[key]

    def _for_board(self, model_path: Path, typing: str | None = None) -> Path:
        """The model file to copy. On TensorRT >= 11 (the board's version, read on the first call)
        with --dtype fp16: the model typed fp16 here by deployopt.precision (one ModelError line for
        a Q/DQ model), as trtexec --remote does; with int8, calibration or a model without Q/DQ
        nodes is refused in trtexec's words. Up to 10.x, and for fp32, the model given. `typing`:
        the model's file_typed_precision where read already (a conv sweep's models: read here)."""
        if self.options.dtype not in ("fp16", "int8"):
            return model_path  # nothing to decide: no version check, no extra ssh
        if self.trt_version is None:
            self.trt_version = self._board_version()
        from deployopt.backends.tensorrt import INT8_NEEDS_SCALES
        from deployopt.backends.trtexec import refuse_implicit_int8, refuse_int8_calibration, strongly_typed
        from deployopt.model import file_has_qdq

        def qdq() -> bool:  # typed_precision's int8 is Q/DQ nodes or integer ops (ConvInteger): read it
            return (typing is None or typing == "int8") and file_has_qdq(model_path)

        if not strongly_typed(self.trt_version):
            # INT8 with no scales: before anything is copied (the runner refuses it too)
            if self.options.dtype == "int8" and self.calib is None and not qdq():
                raise DataError(
                    f"{INT8_NEEDS_SCALES}: {model_path.name} has neither, and TensorRT would build it "
                    "fp16/fp32, timed as int8"
                )
            return model_path
        if self.options.dtype == "int8":
            refuse_int8_calibration(self.trt_version, self.calib[1] if self.calib else None)
            refuse_implicit_int8(self.trt_version, model_path.name, qdq())
            return model_path
        from deployopt.precision import write_fp16

        return write_fp16(model_path, self._made_here() / f"{model_path.stem}.fp16.onnx")

    def _made_here(self) -> Path:
        """This session's folder for what it makes on the host for the board, removed at close."""
        if self._here is None:
            self._here = tempfile.TemporaryDirectory(prefix="deployopt-runner-here-")
        return Path(self._here.name)

    def _board_version(self) -> str:
        """The board's TensorRT version (`python3 -c`, one ssh, under the board's own `timeout`).
        tensorrt not importable or python3 missing: the runner's own one-line errors."""
        cmd = ["python3", "-c", "import tensorrt; print(tensorrt.__version__)"]
        try:
            out = self.board.run_limited(cmd, "the TensorRT version check", self.short_s)
        except RemoteFailed as exc:
            last = [ln.strip() for ln in exc.err.splitlines() if ln.strip()][-1:]
            if exc.returncode == 1 and last and last[0].startswith(("ImportError", "ModuleNotFoundError")):
                raise BackendFailed(f"runner.py on {self.host}: {TENSORRT_NOT_IMPORTABLE}") from None
            raise BackendFailed(self._runner_error(exc)) from None
        return (out.strip().splitlines() or [""])[-1].strip()

    def _built_as_typed(self, timing: Timing, typing: str) -> None:
        """On TensorRT >= 11 an fp32 build of a model typed fp16 or mixed runs as typed (the runner
        records the --dtype it was given): the record says the model's typing (built_precision)."""
        from deployopt.backends.trtexec import built_precision, precision_phrase

        version = timing.environment.get("tensorrt") or self.trt_version
        built = built_precision(self.options.dtype, version, typing)
        if built != self.options.dtype:
            timing.environment["dtype"] = built
            phrase = precision_phrase(built, version, self.options.dtype)
            timing.timed = timing.timed.replace(f"({self.options.dtype})", f"({phrase})", 1)

    def _typed_here(self, timing: Timing) -> None:
        """Say that this host typed the model fp16, in `timed` as trtexec says it (the runner only
        saw a model already typed fp16) and in the environment (profile keeps that too)."""
        from deployopt.backends.trtexec import precision_phrase
        from deployopt.precision import CONVERSION_RECIPE

        timing.timed = timing.timed.replace(RUNNER_TYPED_FP16, precision_phrase("fp16", self.trt_version), 1)
        timing.environment["fp16_typed_by"] = f"deployopt.precision on the host (recipe {CONVERSION_RECIPE})"

    def close(self) -> None:
        """The models typed fp16 here, and optimize's folder on the board (best effort)."""
        if self._here is not None:
            self._here.cleanup()
            self._here = None
        remove_run_dir(self.board, self._removes)
        self._removes = None
        remove_sweep_dir(self.board, self._convs, self.run_dir)
        self._convs = None

    def measure_convs(self, shapes: list[ConvShape]) -> list[Timing]:
        """All of `shapes` timed by one runner process on the board (--batch-dir), in four round
        trips whatever their number (five the first time: runner.py goes too): the batch folder
        made empty, the conv models sent in one scp, the runner run once (python3, `import
        tensorrt` and the CUDA context paid once: seconds on a Nano), every result fetched in one
        scp. The base class's `measure` per conv paid all of that per conv. Same one-conv models
        (conv_model), same flags and so the same timings as `measure` on each. The copy up and the
        run get --timeout per conv, so one batch's limit is what its convs had one by one; the
        runner stops at the first conv that fails, one line naming it."""
        if not shapes:
            return []
        from deployopt.backends.tensorrt import content_digest, load_runner_result

        short = self.short_s
        long = self.options.timeout_s
        if self._convs is None:
            self._convs = sweep_convs_dir(self.workdir / SWEEP_DIR, self.run_dir)
        folder = self._convs
        with tempfile.TemporaryDirectory(prefix="deployopt-convs-") as tmp:
            written = [Path(tmp) / f"{sweep_model_name(i, shape)}.onnx" for i, shape in enumerate(shapes)]
            for path, shape in zip(written, shapes):  # int8: Q/DQ convs, INT8 with no calibration
                path.write_bytes(self.conv_model(shape).SerializeToString())
            models = [self._for_board(path) for path in written]  # typed fp16 here on TensorRT >= 11
            names = [path.stem for path in models]  # the runner names each result after its model
            # the runner times every .onnx it finds there
            make_sweep_dir(self.board, folder, short, look=self._look_for_others)
            self._look_for_others = False
            runner = self._send_runner(short)
            self.board.put_many(models, folder, "scp of the conv models", long * len(models))
            # no --shapes: a conv model's one input is static, and the user's --input-shape names the
            # whole model's inputs (passed on, the runner refused every conv it did not fit)
            cmd = batch_command(runner, folder, self.options, {}, self.workdir / SWEEP_DIR / "engines")
            try:
                self.board.run_limited(
                    cmd,
                    "runner.py",
                    long * len(models),
                    ends_with=interrupt_ends(folder, self.run_dir),  # this session's runner only
                )
            except RemoteFailed as exc:
                raise BackendFailed(self._runner_error(exc)) from None
            self._relay_warnings()
            results = Path(tmp) / "results"
            results.mkdir()
            self.board.get_matching(folder, "*.json", results, "scp of the results", long)
            timings = []
            for name, sent, given in zip(names, models, written):
                timing = load_runner_result(results / f"{name}.json")  # one-line DataError if unreadable
                self._check_timed(timing, content_digest(sent), folder / sent.name)
                timing.environment["remote"] = self.host
                if sent != given:
                    self._typed_here(timing)
                timings.append(timing)
        return timings

    def _check_timed(self, timing: Timing, sha256: str, board_model: PurePosixPath) -> None:
        """The result the runner handed back is for the file sent (`sha256`, now `board_model` on the
        board): the runner records the sha256 of the file it timed. Another run on the board that
        replaced the model or its result.json between the copy and the copy back would otherwise be
        recorded as this model's timing (exit 0). A result that records no model (a runner older
        than the record) is taken as it is."""
        recorded = timing.model.get("sha256") if isinstance(timing.model, dict) else None
        if isinstance(recorded, str) and recorded.lower() != sha256:
            other, sent = recorded[:MODEL_KEY_HEX], sha256[:MODEL_KEY_HEX]
            raise BackendFailed(
                f"runner.py on {self.host} handed back a result for another file (sha256 {other}…) than "
                f"the {board_model} it was sent ({sent}…): another run on the board replaced the model "
                "or its result; run again"
            )

    def _send_runner(self, timeout_s: float) -> PurePosixPath:
        """runner.py's path on the board, copied there first if this session has not yet (once a
        session, and always this host's version)."""
        board_runner = self.workdir / "runner.py"
        if not self._runner_sent:
            self.board.put(self.runner, board_runner, "scp of runner.py", timeout_s)
            self._runner_sent = True
        return board_runner

    def _relay_warnings(self) -> None:
        """TensorRT's warnings and the runner's `warning:` lines from the board's stderr, each once a
        session, as BoardWarning: run here they reach the terminal; over ssh a successful run's
        stderr was dropped, and with it TensorRT's word that an engine was built for another device
        ("Using an engine plan file across different models of devices is not recommended ...")."""
        import warnings

        from deployopt.errors import BoardWarning

        for line in self.board.last_err.splitlines():
            line = line.strip()
            said = line.startswith(("[TensorRT] WARNING: ", "[TensorRT] ERROR: ", "warning: "))
            if said and line not in self._relayed:
                self._relayed.add(line)
                text = line.removeprefix("warning: ")
                warnings.warn(f"runner.py on {self.host}: {text}", BoardWarning, stacklevel=2)

    def _runner_error(self, exc: RemoteFailed) -> str:
        """The board's failure in its own words, one line: the runner's `error: ...` (status 2, its
        one-line refusals: tensorrt not importable, a bad --shapes), or python3 missing."""
        lines = [ln.strip() for ln in exc.err.splitlines() if ln.strip()]
        if exc.returncode == 2:
            said = [ln.removeprefix("error: ") for ln in lines if ln.startswith("error: ")]
            if said:
                return f"runner.py on {self.host}: {said[-1]}"
        if python3_missing(exc):
            return (
                f"python3 not found on {self.host}: runner.py needs Python 3.6+ there "
                "(JetPack ships it as python3)"
            )
        return str(exc)

    def measure(self, model_path: Path) -> Timing:
        timing: Timing = self._run(model_path, per_layer=False)["timing"]
        return timing

    def preflight(self) -> None:
        """The board answers and its work folder can be made (one ssh round trip); for optimize's run,
        in the same ssh, the look for another run still at work there (a round trip more if one is),
        and, for fp16/int8, the board's TensorRT version, which the first model reads anyway: a board
        without tensorrt or python3 is refused before optimize makes OUTDIR (else left holding the
        journal of a run that measured nothing). Not for `targets --remote`, which needs no TensorRT."""
        if self.run_dir is not None:
            mkdir_warning_of_other_runs(self.board, self.run_dir, self.short_s, ours=True)
            if self.options.dtype in ("fp16", "int8") and self.trt_version is None:
                self.trt_version = self._board_version()
        else:
            self.board.mkdir(self.workdir, self.short_s)

    @property
    def short_s(self) -> float:
        """The limit of a quick step on the board (mkdir, the runner's copy, the version check,
        fetching results): --timeout, at most QUICK_STEP_S (120 s)."""
        return min(QUICK_STEP_S, self.options.timeout_s)

    def keep_engine(self, timing: Timing, dest: Path) -> bool:
        """The engine the runner built on the board (its path there is in the result), copied back."""
        return fetch_engine(self.board, timing, dest, self.options.timeout_s)

    def profile(self, model_path: Path, kernels: bool = False) -> Profile:
        """The runner's --per-layer table (IProfiler medians), as the local tensorrt backend's profile."""
        if kernels:
            raise DeployoptError("--kernels: the runner on the board reports layers, not kernels")
        out = self._run(model_path, per_layer=True)
        try:
            layers = [
                LayerTime(
                    name=str(d["name"]),
                    time_us=float(d["time_us"]),
                    share=float(d["share"]),
                    extra={"runs": int(d["runs"])},
                    # a runner older than 2026-12-06 wrote no spread
                    iqr_us=None if d.get("iqr_us") is None else float(d["iqr_us"]),
                )
                for d in out["layers"]
            ]
        except (TypeError, KeyError, ValueError):
            raise DataError(f"runner.py on {self.host} returned no per-layer table (--per-layer)") from None
        timing: Timing = out["timing"]
        timed = "per-layer time reported by TensorRT's IProfiler, median over runs, on the board"
        if timing.environment.get("prebuilt_engine"):
            from deployopt.prebuilt import prebuilt_profile_timed

            timed = prebuilt_profile_timed(timed)
        return Profile(
            backend="tensorrt",
            layers=layers,
            environment=timing.environment,
            timed=timed,
            runs=timing.runs,
        )
