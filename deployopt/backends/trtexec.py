"""Backend that drives NVIDIA's `trtexec` binary and reads back what it exports.

Why trtexec and not only the Python API: it ships with every TensorRT (on a Jetson at
/usr/src/tensorrt/bin/trtexec, with no Python bindings needed), its timing loop is the reference
users compare against, and running it as a subprocess isolates crashes and hangs. We pass the flags
that make its numbers trustworthy (CUDA graphs, no H2D/D2H copies, spin-wait, a separate profiling
run so the profiler's synchronizations don't pollute end-to-end times) and read per-query samples
from --exportTimes, per-layer times from --exportProfile, tactics from --exportLayerInfo.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path, PurePath, PurePosixPath
from typing import TYPE_CHECKING, Any

from deployopt.backends.base import Backend, MeasureOptions, Profile, Session
from deployopt.backends.trtexec_parser import (
    NO_TIMING,
    NoTimingError,
    TrtexecRun,
    load_run,
    parse_version_code,
    version_tuple,
)
from deployopt.errors import (
    BackendFailed,
    BackendUnavailable,
    DataError,
    DeployoptError,
    ModelError,
    exit_phrase,
    no_such_file,
    oom_hint,
    shorten,
)
from deployopt.fileio import write_text
from deployopt.prebuilt import (
    PREBUILT,
    is_engine_file,
    mark_prebuilt,
    prebuilt_profile_timed,
    refuse_engine_options,
)
from deployopt.remote import (
    MODEL_KEY_HEX,
    QUICK_STEP_S,
    TRTEXEC_WORKDIR,
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
    tail,
)
from deployopt.timing import Timing

if TYPE_CHECKING:
    from deployopt.clocks import ClockState
    from deployopt.layers import ConvShape

JETSON_TRTEXEC = "/usr/src/tensorrt/bin/trtexec"
ENV_TRTEXEC = "DEPLOYOPT_TRTEXEC"
DEFAULT_WORKSPACE_MIB = 1024
DEFAULT_WARMUP_MS = 500
CALIB_SUFFIXES = (".cache", ".calib", ".table")
INSTALL_HINT = (
    "trtexec not found (set DEPLOYOPT_TRTEXEC, put it on PATH; on a Jetson it is "
    f"{JETSON_TRTEXEC} from JetPack; elsewhere it comes with the TensorRT tar/deb packages; "
    "bench and profile can run a board's own over ssh instead: --remote USER@HOST)"
)


def is_calibration_table(path: str | os.PathLike[str]) -> bool:
    """A file trtexec can read with --calib (by suffix, any case, as the data loader reads its
    suffixes; a folder of that name is data, not a table)."""
    return Path(path).suffix.lower() in CALIB_SUFFIXES and not Path(path).is_dir()


def calibration_table(options: MeasureOptions) -> str | None:
    """The table an INT8 build reads: extra["calib_cache"], else calibration_data when it names one.
    None means trtexec builds with placeholder dynamic ranges."""
    calib = options.extra.get("calib_cache")
    if not calib and options.calibration_data and is_calibration_table(options.calibration_data):
        calib = options.calibration_data
    return str(calib) if calib else None


def refuse_calibration_data(calibration_data: str | os.PathLike[str] | None) -> None:
    """Data trtexec cannot calibrate from is refused, not dropped: dropping it would build INT8 on
    placeholder ranges, right for timing but meaningless for accuracy, while the user believes the
    engine was calibrated."""
    if calibration_data is None or is_calibration_table(calibration_data):
        return
    raise DeployoptError(
        f"--calibration-data {calibration_data}: trtexec cannot calibrate INT8 from data, it only reads "
        "a calibration table; calibrate with --backend tensorrt (it calibrates on this data and keeps the "
        f"table as a .calib file beside its engine), or pass a calibration table ({'/'.join(CALIB_SUFFIXES)})"
    )


def refuse_warmup_runs(warmup: int, flag: str = "--warmup") -> None:
    """A number of warm-up runs asked of trtexec, which warms up by time (`--warmUp` in ms, trtexec
    has no count): one line, where it was dropped in silence (trtexec got --warmUp=500 whatever
    --warmup said). bench, profile and optimize call it only when --warmup was given. From Python,
    MeasureOptions.extra["warmup_ms"] sets that time; no CLI option does."""
    raise DeployoptError(
        f"{flag} {warmup}: backend 'trtexec' warms up by time, not by a number of runs: trtexec gets "
        f"--warmUp={DEFAULT_WARMUP_MS} (ms) whatever {flag} says, and no option changes it; leave {flag} "
        f"out, or time with --backend tensorrt, which runs {flag} untimed passes"
    )


#: TensorRT 11.0 removed weak typing: every network is strongly typed, trtexec has no --fp16,
#: --int8, --best or --calib, the Python API no BuilderFlag.FP16/INT8 nor INT8 calibrators
#: (NVIDIA's 10.x-to-11.x migration guide).
STRONG_TYPING = (11, 0)
QDQ_HINT = (
    "quantize the model explicitly with Q/DQ nodes (NVIDIA ModelOpt: python -m modelopt.onnx.quantization "
    "--onnx_path model.onnx --quantize_mode int8 --calibration_data calib.npy) and time that model with "
    "--dtype int8"
)


def strongly_typed(version: str | None) -> bool:
    """Whether this TensorRT builds every network in its model's own types (>= 11): `--dtype fp16`
    then needs a model typed fp16 (deployopt.precision), and INT8 comes only from Q/DQ nodes."""
    return version_tuple(version) >= STRONG_TYPING


def refuse_int8_calibration(version: str | None, calibration: str | os.PathLike[str] | None) -> None:
    """A calibration table or data for INT8 on TensorRT >= 11, which cannot calibrate, is refused in
    one line before anything is built, rather than dropped (the engine would not be what the user
    believes it is)."""
    if calibration and strongly_typed(version):
        raise DeployoptError(
            f"--dtype int8 with calibration {calibration}: TensorRT {version} cannot calibrate (11.0 "
            f"removed implicit INT8: --int8, --calib, BuilderFlag.INT8 and the calibrators); {QDQ_HINT}, "
            "without calibration data"
        )


def refuse_implicit_int8(version: str | None, model_name: str, has_qdq: bool) -> None:
    """INT8 on TensorRT >= 11 only for a model with Q/DQ nodes: without them there is nothing that
    makes any layer INT8, and an fp32 engine timed as 'int8' would be a wrong answer."""
    if strongly_typed(version) and not has_qdq:
        raise DeployoptError(
            f"--dtype int8: TensorRT {version} builds INT8 only from Q/DQ nodes in the model (11.0 removed "
            f"--int8 and INT8 calibration) and {model_name} has none; {QDQ_HINT}, or time it with "
            "--dtype fp16"
        )


def precision_phrase(dtype: str, version: str | None, asked: str | None = None) -> str:
    """The dtype as `timed` says it: on TensorRT >= 11 also where the precision came from.
    `asked`: the --dtype given, where `built_precision` recorded the model's own typing instead."""
    if asked is not None and asked != dtype:
        return f"{dtype} as typed in the model, asked {asked} (TensorRT 11 strong typing)"
    if strongly_typed(version) and dtype == "fp16":
        return "fp16: the model typed fp16 inside, fp32 I/O (TensorRT 11 strong typing)"
    if strongly_typed(version) and dtype == "int8":
        return "int8 from the model's Q/DQ nodes (TensorRT 11 strong typing)"
    return dtype


def built_precision(dtype: str, version: str | None, typing: str) -> str:
    """The precision a build asked for `dtype` runs in, for the record. On TensorRT >= 11 every layer
    runs in its model's own types and no flag changes them: --dtype fp32 of a model typed fp16,
    bf16 or mixed (or with Q/DQ nodes) built that model as typed, and the record said fp32. Its
    typing (`typing`: model.file_typed_precision's, read once before the build: "fp16", "mixed
    fp32/fp16", "int8") is recorded rather than refused: fp32 is these backends' default, so bench
    of an fp16-typed model without --dtype would be refused, and a mixed model, which no --dtype
    names, could not be timed as deployed at all. fp16 and int8 builds are what they say (typed
    fp16 here; INT8 only from Q/DQ nodes)."""
    if dtype != "fp32" or not strongly_typed(version):
        return dtype
    return typing


def board_table_name(name: str, model_path: Path) -> str:
    """The calibration table's file name in the board's work folder: its own, unless that is a file
    the run puts there too (extra["calib_cache"] may be named anything), which it must not replace."""
    model = board_name(model_path.name)
    taken = {model, Path(model).stem + ".engine", "times.json", "profile.json", "layer_info.json"}
    name = board_name(name)
    return f"calib_{name}" if name in taken else name


def find_trtexec() -> str | None:
    """DEPLOYOPT_TRTEXEC, then PATH, then the JetPack location."""
    env = os.environ.get(ENV_TRTEXEC)
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    found = shutil.which("trtexec")
    if found:
        return found
    if os.path.isfile(JETSON_TRTEXEC) and os.access(JETSON_TRTEXEC, os.X_OK):
        return JETSON_TRTEXEC
    return None


def detect_version(trtexec: str, timeout_s: float = 60.0, prefix: list[str] | None = None) -> str | None:
    """TensorRT version of `trtexec` here from its --help (version_in_help); None when it does not
    run. Never with deployopt's stdin (a `prefix` such as ssh would read it: see Board.call); the
    board's version is board_version's."""
    try:
        proc = subprocess.run(
            [*(prefix or []), trtexec, "--help"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return version_in_help(proc.stdout.decode("utf-8", "replace"))


def board_version(board: Board, trtexec: str, timeout_s: float) -> str | None:
    """The TensorRT version of `trtexec` on the board (extra["remote_trtexec"]), from its --help run
    as the build is: quoted for the board's shell (ssh joins its words and the shell splits them
    again: "/opt/trt 8/bin/trtexec" was not found, the version taken as unknown, 10.x flags sent to
    an 8.2 board), under the board's own `timeout`, stdin never read. An unreachable board or a
    check past its limit is Board's one line; a trtexec that is missing or exits non-zero, None
    (unknown), as here: the build then says what is wrong in the board's words."""
    try:
        out = board.run_limited([trtexec, "--help"], "the TensorRT version check", timeout_s)
        out += board.last_err
    except RemoteFailed as exc:
        out = exc.out + exc.err
    return version_in_help(out)


def version_in_help(out: str) -> str | None:
    """TensorRT version from the `&&&& RUNNING TensorRT.trtexec [TensorRT v8502]` banner of --help;
    "7" for a banner without the tag (7.x), None when there is no banner."""
    import re

    m = re.search(r"\[TensorRT v(\d+)\]", out)
    if m:
        return parse_version_code(m.group(1))
    if "&&&& RUNNING TensorRT.trtexec" in out:
        # 8.0 added the version tag to the banner (the recorded 7.x log has none, the 8.0.1 log has
        # it): without it the binary is 7.x, which needs --explicitBatch and --workspace for ONNX,
        # not the 10.x flags an unknown version gets
        return "7"
    return None


#: What trtexec's --shapes (sampleOptions.cpp) cannot hold in an input's name: it splits the list on
#: ',' first, and 8.x strips every "'" from a name (10.x refuses one).
TRTEXEC_SHAPES = (",'", "trtexec's --shapes")


def shapes_arg(shapes: dict[str, list[int]]) -> str:
    """{"input": [1, 3, 224, 224]} -> "input:1x3x224x224" (trtexec's --shapes syntax)."""
    return ",".join(f"{name}:{'x'.join(str(d) for d in dims)}" for name, dims in shapes.items())


def input_shapes(model_path: Path, options: MeasureOptions) -> dict[str, list[int]]:
    """Shapes for --shapes: the user's, then the batch override, then 1 for any other dynamic dim.

    Static inputs are left out: trtexec rejects --shapes for a static model."""
    shapes = {k: list(v) for k, v in options.input_shapes.items()}
    try:
        dims = _onnx_input_dims(model_path)
    except Exception:  # unreadable model: trtexec will say so in its own words
        return shapes
    for name, d in dims.items():
        if name in shapes:
            continue
        dynamic = any(x is None for x in d)
        if options.batch is not None and d:
            if not dynamic and d[0] != options.batch:
                raise DeployoptError(
                    f"input {name!r} has a fixed batch of {d[0]}; --batch {options.batch} needs a model "
                    "with a dynamic batch dimension"
                )
            if dynamic:
                shapes[name] = [options.batch] + [1 if x is None else x for x in d[1:]]
        elif dynamic:
            shapes[name] = [1 if x is None else x for x in d]
    return shapes


def ran_shapes(model_path: Path, shapes: dict[str, list[int]]) -> dict[str, list[int]]:
    """Each input's shape as trtexec runs the model: the --shapes given, else the model's static
    shape (the batch timed, which compare checks like for like; --shapes holds only dynamic ones)."""
    try:
        dims = _onnx_input_dims(model_path)
    except Exception:  # unreadable model: trtexec will say so in its own words
        return dict(shapes)
    out: dict[str, list[int]] = {}
    for name, d in dims.items():
        if name in shapes:
            out[name] = list(shapes[name])
        elif d and all(x is not None for x in d):
            out[name] = [int(x) for x in d if x is not None]
    return out


def onnx_graph_inputs(model_path: Path) -> list[Any]:
    """The model's real inputs (ValueInfoProto), read without external weights: graph inputs that
    are not initializers (older exporters list every weight as an input too)."""
    import onnx

    model = onnx.load(str(model_path), load_external_data=False)
    init = {i.name for i in model.graph.initializer}
    return [inp for inp in model.graph.input if inp.name not in init]


def _onnx_input_dims(model_path: Path, inputs: list[Any] | None = None) -> dict[str, list[int | None]]:
    """Each real input's dims, None where dynamic; `inputs`: onnx_graph_inputs read already."""
    out: dict[str, list[int | None]] = {}
    for inp in onnx_graph_inputs(model_path) if inputs is None else inputs:
        dims = inp.type.tensor_type.shape.dim
        out[inp.name] = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]
    return out


#: Where trtexec's models, exports and engines go on a board (--remote); /tmp, as trtexec users do.
DEFAULT_REMOTE_WORKDIR = TRTEXEC_WORKDIR


def saved_engine(cmd: list[str]) -> str | None:
    """The engine file a trtexec command line saves (`--saveEngine=PATH`), as that line names it."""
    return next((a.split("=", 1)[1] for a in cmd if a.startswith("--saveEngine=")), None)


def build_command(
    trtexec: str,
    model: Path,
    outdir: Path,
    options: MeasureOptions,
    version: str | None,
    shapes: dict[str, list[int]] | None = None,
    build_only: bool = False,
    tag: str = "",
    engine: PurePath | None = None,
) -> list[str]:
    """The trtexec command line for one model. Pure: tested per version and dtype. Its exports go in
    `outdir` as times.json, profile.json and layer_info.json, or with a `tag` (a session's token on a
    board, whose model folder other runs share) as own_name's times-<tag>.json …; its engine is
    `outdir`/<stem>.engine, or `engine` (a board's: board_engine).

    Version differences handled here: --workspace (MiB, <= 8.3) vs --memPoolSize=workspace:N (8.4+,
    the only form in 10.x); --explicitBatch (needed for ONNX on 7.x, removed in 10.x);
    --profilingVerbosity=detailed (8.2+; 8.0/8.1 have no such option, an unknown option fails the
    run: their --nvtxMode=verbose sets the same builder verbosity); --exportLayerInfo (8.2+);
    --buildOnly (< 8.6: 8.5.2's log says "Build only") vs --skipInference (8.6+); no precision
    flag at all on 11.x (strong typing: the caller passes a model typed fp16 for fp16, and only a
    Q/DQ model for int8; see TrtexecSession.build_model).

    A serialized engine as `model` (deployopt.prebuilt.is_engine_file) is loaded, not built:
    --loadEngine instead of --onnx/--saveEngine (trtexec refuses the two together), and none of the
    build options (workspace, --explicitBatch, precision, --calib, timing cache,
    --profilingVerbosity): they are fixed in the engine. --shapes sets a dynamic-shape engine's
    input shapes within its profile; the timing and export flags are the same."""
    v = version_tuple(version) or (10, 0, 0)
    extra = options.extra
    if is_engine_file(model):
        if build_only:
            raise ValueError(f"{model} is an engine already: there is nothing to build")
        cmd = [trtexec, f"--loadEngine={model}"]
        if shapes:
            cmd.append(f"--shapes={shapes_arg(shapes)}")
        if v >= (8, 2):
            cmd.append(f"--exportLayerInfo={export_path(outdir, 'layer_info.json', tag)}")
        return cmd + _inference_flags(outdir, options, tag)
    engine = engine or outdir / (model.stem + ".engine")
    cmd = [trtexec, f"--onnx={model}", f"--saveEngine={engine}"]
    if v < (8, 0):
        cmd.append("--explicitBatch")
    workspace = int(extra.get("workspace_mib", DEFAULT_WORKSPACE_MIB))
    cmd.append(f"--workspace={workspace}" if v < (8, 4) else f"--memPoolSize=workspace:{workspace}")
    if strongly_typed(version):
        pass  # 11.x has no --fp16/--int8/--calib: the precision is the model's own
    elif options.dtype == "fp16":
        cmd.append("--fp16")
    elif options.dtype == "int8":
        cmd.append("--int8")
        if extra.get("fp16_fallback", True):
            cmd.append("--fp16")  # let layers that have no INT8 kernel run in FP16, not FP32
        # trtexec cannot calibrate from data; it reads a calibration table. Without one it uses
        # placeholder ranges: right for timing, meaningless for accuracy (check_options refuses
        # data it cannot read, so a folder never gets here silently).
        calib = calibration_table(options)
        if calib:
            cmd.append(f"--calib={calib}")
    if shapes:
        cmd.append(f"--shapes={shapes_arg(shapes)}")
    cache = extra.get("timing_cache")
    if cache and v >= (8, 0):  # 7.x's trtexec has no timing cache file (the API came with 8.0)
        cmd.append(f"--timingCacheFile={cache}")
    if v >= (8, 2):
        cmd.append("--profilingVerbosity=detailed")
    elif v >= (8, 0):
        cmd.append("--nvtxMode=verbose")
    if v >= (8, 2):
        cmd.append(f"--exportLayerInfo={export_path(outdir, 'layer_info.json', tag)}")
    if build_only:
        cmd.append("--skipInference" if v >= (8, 6) else "--buildOnly")
        return cmd
    return cmd + _inference_flags(outdir, options, tag)


#: What trtexec exports for one run (build_command), as _collect reads them.
EXPORTS = ("times.json", "profile.json", "layer_info.json")


def export_path(outdir: PurePath, name: str, tag: str = "") -> PurePath:
    """`outdir`/`name`, or with a `tag` the session's own name for it (own_name: times-<tag>.json)."""
    return outdir / (own_name(name, tag) if tag else name)


def board_engine(
    trtexec: str,
    model: PurePath,
    rdir: PurePath,
    options: MeasureOptions,
    version: str | None,
    shapes: dict[str, list[int]] | None,
) -> PurePath:
    """The engine a build of `model` saves in its board folder `rdir`: named after the model and a
    hash of trtexec's build options (build_command's, less the files it writes, and
    extra["trtexec_args"]) and the board's TensorRT version, as the runner keys its engines. Named
    after the model alone, a run of the same file at other settings (another --dtype, shape or
    calibration table, which goes there named by its contents) replaced the engine a run beside it
    had just built and recorded, and optimize brought back the other's. Pure."""
    cmd = build_command(trtexec, PurePosixPath(model), PurePosixPath(rdir), options, version, shapes, True)
    flags = [a for a in cmd[1:] if not a.startswith(("--saveEngine=", "--exportLayerInfo="))]
    facts = repr((version, flags, [str(a) for a in options.extra.get("trtexec_args", [])]))
    key = hashlib.sha256(facts.encode("utf-8")).hexdigest()[:MODEL_KEY_HEX]
    return rdir / board_name(f"{PurePath(model).stem}-{key}.engine")


def _inference_flags(outdir: PurePath, options: MeasureOptions, tag: str = "") -> list[str]:
    """What makes trtexec's timing trustworthy and exported, the same for a built or a loaded engine:
    iterations, warm-up, exports, CUDA graph, no transfers, spin-wait, a separate profiling run."""
    extra = options.extra
    cmd: list[str] = []
    warmup_ms = int(extra.get("warmup_ms", DEFAULT_WARMUP_MS))
    duration_s = float(extra.get("duration_s", 0))
    cmd += [
        f"--iterations={options.runs}",
        f"--warmUp={warmup_ms}",
        f"--duration={duration_s:g}",
        f"--exportTimes={export_path(outdir, 'times.json', tag)}",
    ]
    if extra.get("use_cuda_graph", True):
        cmd.append("--useCudaGraph")
    cmd += ["--noDataTransfers", "--useSpinWait"]
    if extra.get("profile", True):
        cmd += ["--separateProfileRun", f"--exportProfile={export_path(outdir, 'profile.json', tag)}"]
    cmd += [str(a) for a in extra.get("trtexec_args", [])]
    return cmd


#: The line the sweep's batch script (sweep_script) writes to stderr for the conv whose trtexec
#: failed, before it stops: "<this> NAME status N".
SWEEP_FAILED = "deployopt: trtexec failed on"
#: The folder, in the board's batch folder, where each conv's log and exports wait for the one scp
#: back (one subfolder each: trtexec names its exports alike for every conv); its engine stays.
SWEEP_RESULTS = "results"
#: The most convs one batch script runs: the script is one argument of one command line on the
#: board, and Linux caps one argument at 128 KiB (MAX_ARG_STRLEN). A conv's part names its folder
#: about 20 times: 2.1 KiB under /home/nvidia, 3.7 KiB under a 138-character home folder. optimize's
#: sweep hands over 16 at a time (lut.LayerCache.fill); a longer list is cut here.
SWEEP_MAX_CONVS = 16


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One conv of the sweep's batch on the board: its file name, trtexec's command line (build_command's,
    its exports and engine in `outdir`), and the folder of SWEEP_RESULTS its log and exports go to."""

    name: str
    cmd: list[str]
    outdir: PurePath
    results: PurePath


def sweep_script(runs: list[SweepRun]) -> str:
    """The shell text that runs every conv's trtexec in turn on the board, in one ssh (`sh -c`, under
    the board's `timeout`). Each writes its stdout and stderr to `results`/trtexec.log, then its
    exports are moved there too. The first that fails (a non-zero status, or `&&&& FAILED`) stops
    it: its log to stdout, one SWEEP_FAILED line with its status to stderr, and that status as the
    script's (1 for a FAILED that exited 0; 137 stays 137, what Board.call reads as SIGKILL). The
    TERM trap keeps `timeout`'s KILL for a trtexec that outlives its TERM: the shell waits for it
    instead of dying first (`timeout` would then exit, and never KILL it). Pure."""
    lines = ["trap 'exit 143' TERM"]
    for run in runs:
        out, res = shlex.quote(str(run.outdir)), shlex.quote(str(run.results))
        log = shlex.quote(str(run.results / "trtexec.log"))
        failed = shlex.quote(f"{SWEEP_FAILED} {run.name} status")
        lines += [
            f"mkdir -p {out} {res} || exit",
            f"{shlex.join(run.cmd)} >{log} 2>&1",
            "s=$?",
            f"if [ $s -ne 0 ] || grep -qF '&&&& FAILED' {log}; then "
            f'cat {log}; echo {failed} "$s" >&2; [ $s -ne 0 ] || s=1; exit $s; fi',
            f'for f in {out}/*.json; do if [ -f "$f" ]; then mv "$f" {res}/ || exit; fi; done',
        ]
    return "; ".join(lines)  # one line: one command line on the board, as ssh passes one


def _kept_log(text: str, log_path: Path) -> Path:
    """A failed run's log copied to a folder of its own that no cleanup removes: the work folder
    (bench's, optimize's) is deleted when the session closes, and the error line named a log that
    was gone by the time it was printed."""
    keep = Path(tempfile.mkdtemp(prefix="deployopt-trtexec-failed-")) / log_path.name
    write_text(keep, text)
    return keep


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL trtexec's process group (its own session: the terminal's Ctrl-C never reaches it)."""
    import signal

    with contextlib.suppress(OSError):
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:  # no process groups (Windows): trtexec itself
            proc.kill()


def run_trtexec(cmd: list[str], timeout_s: float, log_path: Path) -> str:
    """Run trtexec in its own process group; one-line BackendFailed on timeout (the whole group is
    killed, so nothing keeps the GPU), crash or non-zero exit, naming a copy of the log that stays
    (`_kept_log`). Returns the log. Ctrl-C, SIGTERM (unwound as Ctrl-C) or any other exception
    while it runs kills the group too, then goes on: trtexec, in a session of its own, kept timing
    (and holding the GPU) after deployopt had exited."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    except FileNotFoundError:
        raise BackendUnavailable(INSTALL_HINT) from None
    except PermissionError:
        raise BackendUnavailable(f"{cmd[0]} is not executable") from None
    try:
        raw, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raw, _ = proc.communicate()
        text = raw.decode("utf-8", "replace") if raw else ""
        write_text(log_path, text)
        kept = _kept_log(text, log_path)
        raise BackendFailed(f"trtexec did not finish within {timeout_s:g} s (log: {kept})") from None
    except BaseException:
        _kill_group(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)  # reaped: no zombie left while the interrupt unwinds
        if proc.stdout is not None:
            proc.stdout.close()
        raise
    out = raw.decode("utf-8", "replace")
    write_text(log_path, out)
    if proc.returncode != 0:
        rc = proc.returncode
        said = oom_hint(rc) or tail(out) or "no output"
        raise BackendFailed(f"trtexec {exit_phrase(rc)}: {said} (log: {_kept_log(out, log_path)})")
    if "&&&& FAILED" in out:
        raise BackendFailed(f"trtexec reported FAILED: {tail(out)} (log: {_kept_log(out, log_path)})")
    return out


class TrtexecSession(Session):
    """One trtexec process per model; the work folder keeps the engine, log and JSON exports."""

    @property
    def runs_on_gpu(self) -> bool:
        return True  # trtexec times TensorRT engines on the GPU only

    def __init__(self, backend: TrtexecBackend, options: MeasureOptions, trtexec: str) -> None:
        super().__init__(backend, options)
        self.trtexec = trtexec
        self.remote: str | None = options.extra.get("remote")
        self.version: str | None = options.extra.get("trt_version")
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if options.workdir is not None:
            self.workdir = Path(options.workdir)
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="deployopt-trtexec-")
            self.workdir = Path(self._tmp.name)
        self.last_run: TrtexecRun | None = None
        self._last_log: Path | None = None  # the log last_run was read from (here, fetched with --remote)
        self._qdq = False  # the model run() was last given has Q/DQ nodes (read for int8 only)
        self._engine: str | None = None  # where the last run's engine is (on the board with --remote)
        self._prebuilt = False  # the last model run() was given is a serialized engine (--loadEngine)
        # the typing of the ONNX file run() was last given (file_typed_precision; None: an engine, convs)
        self._typing: str | None = None
        self._input_shapes: dict[str, list[int]] = {}  # what each input of that model ran at, where known
        # the board's paths are POSIX whatever the host's: a Windows host's Path gave the board
        # `\tmp\deployopt-trtexec\…` (one odd file name in its home folder, exports never found)
        given = options.extra.get("remote_workdir", DEFAULT_REMOTE_WORKDIR)
        # checked before anything reaches the board: scp takes it as it is
        root = check_workdir(given) if self.remote else PurePosixPath(given)
        run_dir = remote_run_dir(root, options) if self.remote else None  # optimize's, removed at close
        self.run_dir: PurePosixPath | None = run_dir
        self._removes = owned_run_dir(run_dir, options)  # removed at close, by one session of the run
        self.remote_workdir = self.run_dir or root
        self.remote_root = root  # the folder every run on the board shares
        # bench's and profile's look for another run at work on the board is still to come (with
        # its first mkdir); optimize's run looks in preflight
        self._look_for_others = self.run_dir is None
        self._convs: PurePosixPath | None = None  # this session's conv folder on the board (remote)
        # this session's exports in a model's board folder (own_name): another run of the same file
        # (same folder) at other settings writes its own, never this session's
        self.token = session_token()

    @property
    def placeholder_int8(self) -> bool:
        """INT8 without a calibration table: trtexec's placeholder ranges, so timing only. Not for a
        model with Q/DQ nodes (trtexec --int8 takes its scales from them) nor on TensorRT >= 11,
        which builds INT8 only from those."""
        return (
            self.options.dtype == "int8"
            and calibration_table(self.options) is None
            and not self._qdq
            and not self._prebuilt
            and not strongly_typed(self.version)
        )

    def _version(self) -> str | None:
        if self.version is None and self.remote is None:
            self.version = detect_version(self.trtexec, timeout_s=min(60.0, self.options.timeout_s))
        return self.version

    def run(self, model_path: Path) -> TrtexecRun:
        """Build + time one model with trtexec and parse everything it wrote."""
        model_path = Path(model_path)
        if not model_path.is_file():
            raise no_such_file(model_path, ModelError)
        outdir = self.workdir / model_path.stem
        outdir.mkdir(parents=True, exist_ok=True)
        for name in ("times.json", "profile.json", "layer_info.json"):
            (outdir / name).unlink(missing_ok=True)  # never read a previous run's exports
        self._prebuilt = is_engine_file(model_path)
        self._typing = None
        if not self._prebuilt:
            from deployopt.model import file_has_qdq, file_typed_precision

            model_path = self.at_batch(model_path)  # --batch N on a batch the file fixes: a copy at N

            # read once, before anything is built or copied, for every dtype: an FP8 or W8A16 Q/DQ
            # model is refused in one line here (it was built and timed as fp32, or refused only
            # after the build, for the record); the record and int8's Q/DQ check read it from here
            self._typing = file_typed_precision(model_path)
        if self._prebuilt:  # loaded as it is: no ONNX read, no Q/DQ check, no fp16 typing
            refuse_engine_options(model_path, self.options.batch, self.options.calibration_data)
            shapes = dict(self.options.input_shapes)
            self._input_shapes = dict(shapes)  # an engine's static inputs are not read here
        else:
            shapes = input_shapes(model_path, self.options)
            self._input_shapes = ran_shapes(model_path, shapes)
        from deployopt.backends.tensorrt_remote import refuse_unnamable_inputs

        refuse_unnamable_inputs(shapes, model_path.name, TRTEXEC_SHAPES)  # before any build or copy
        if self.options.dtype == "int8" and not self._prebuilt:
            # typed_precision says int8 for Q/DQ nodes and for onnxruntime's integer ops (ConvInteger:
            # quantize_dynamic), which TensorRT builds no INT8 from: Q/DQ read where it says int8
            self._qdq = self._typing == "int8" and file_has_qdq(model_path)
        if self.remote:
            return self._run_remote(model_path, outdir, shapes)
        version = self._version()
        build = model_path if self._prebuilt else self.build_model(model_path, outdir, version)
        cmd = build_command(self.trtexec, build, outdir, self.options, version, shapes)
        self._engine = str(model_path) if self._prebuilt else saved_engine(cmd)
        (outdir / "command.txt").write_text(shlex.join(cmd) + "\n")
        cache = self.options.extra.get("timing_cache")
        if cache:  # trtexec writes the cache where it is told, but makes no folder for it
            Path(cache).parent.mkdir(parents=True, exist_ok=True)
        run_trtexec(cmd, self.options.timeout_s, outdir / "trtexec.log")
        return self._collect(outdir)

    def build_model(self, model_path: Path, outdir: Path, version: str | None) -> Path:
        """The model trtexec builds. Up to 10.x the one given (--fp16/--int8 set the precision). On
        TensorRT >= 11 (strong typing): for fp16 the model typed fp16 by deployopt.precision,
        written beside the run's exports in the work folder (atomically: a temporary file, then a
        rename) and built instead; for int8 the one given, only when it has Q/DQ nodes (refused in
        one line otherwise, and with a calibration table, before trtexec runs)."""
        if not strongly_typed(version):
            return model_path
        if self.options.dtype == "int8":  # run() read whether the model has Q/DQ nodes
            refuse_int8_calibration(version, calibration_table(self.options))
            refuse_implicit_int8(version, model_path.name, self._qdq)
            return model_path
        if self.options.dtype == "fp16":
            from deployopt.precision import write_fp16

            return write_fp16(model_path, outdir / f"{model_path.stem}.fp16.onnx")
        return model_path

    # ---- remote mode: the ONNX goes to the board with scp, trtexec runs over ssh (deployopt.remote)
    def _board(self) -> Board:
        assert self.remote is not None
        connect = int(self.options.extra.get("ssh_connect_timeout_s", 10))
        return Board(self.remote, connect, self.options.timeout_s)

    def _run_remote(self, model_path: Path, outdir: Path, shapes: dict[str, list[int]]) -> TrtexecRun:
        assert self.remote is not None
        workdir = self.remote_workdir
        stem = model_path.stem  # the user's name: an fp16 copy typed here keeps it
        int8_build = self.options.dtype == "int8" and not self._prebuilt  # an engine is built already
        table = calibration_table(self.options) if int8_build else None
        if table is not None and not Path(table).is_file():  # before anything reaches the board
            raise no_such_file(table, DataError)
        board = self._board()
        short = min(QUICK_STEP_S, self.options.timeout_s)
        if self.version is None:  # first: the board's TensorRT decides what model goes there
            self.version = board_version(board, self.trtexec, short)
        if not self._prebuilt:  # an engine goes as it is, with no weights beside it
            model_path = self.build_model(model_path, outdir, self.version)  # converted here, on the host
        weights = [] if self._prebuilt else model_weights(model_path)  # checked before any copy
        from deployopt.backends.tensorrt import content_digest

        # a folder per file sent (its name and bytes): per name, two runs of different models named
        # model.onnx on one board replaced each other's model and exports there
        rdir = workdir / model_dir_name(stem, content_digest(model_path), sent_external(model_path, weights))
        board_model = rdir / board_name(model_path.name)
        tag = self.token  # the exports' names are this session's own: runs of this file share rdir
        stale = [
            own_name("*.json", tag)
        ]  # this session's last exports: a trtexec that wrote none handed them back
        if self._look_for_others:  # the first model of bench or profile: mkdir_warning_of_other_runs
            self._look_for_others = False
            mkdir_warning_of_other_runs(board, rdir, short, stale)
        else:
            board.mkdir(rdir, short, stale)
        board.put_model(model_path, board_model, self.options.timeout_s, weights)
        board_table = None
        if table is not None:
            # trtexec on the board reads --calib from the board's disk: the table goes beside the
            # model, named by its contents (another run's table of the same name must not replace
            # it), and --calib names that copy, not the host's path
            named = f"{Path(table).stem}-{content_digest(table)[:MODEL_KEY_HEX]}{Path(table).suffix}"
            board_table = rdir / board_table_name(named, model_path)
            board.put(table, board_table, "scp of the calibration table", self.options.timeout_s)
        options = self._board_options(board_table)
        engine = None
        if not self._prebuilt:  # keyed on what it is built from, as the runner's: shared by equal builds
            engine = board_engine(self.trtexec, board_model, rdir, options, self.version, shapes)
        cmd = build_command(
            self.trtexec, board_model, rdir, options, self.version, shapes, tag=tag, engine=engine
        )
        self._engine = str(board_model) if self._prebuilt else saved_engine(cmd)
        (outdir / "command.txt").write_text(f"ssh {self.remote} " + shlex.join(cmd) + "\n")
        ends_with = interrupt_ends(rdir, self.run_dir)
        log = board.run_limited(cmd, "trtexec", self.options.timeout_s, ends_with=ends_with)
        write_text(outdir / "trtexec.log", log)
        if "&&&& FAILED" in log:
            raise BackendFailed(f"trtexec on {self.remote} reported FAILED: {tail(log)}")
        # the exports (times, profile, layer info: before 8.2 none) in one scp, not one each: this
        # session's names (the folder and its files are board_name'd), read under trtexec's own here
        with contextlib.suppress(BackendFailed):  # none at all: _collect's caller says what is missing
            board.get_matching(rdir, own_name("*.json", tag), outdir, "scp of trtexec's exports", short)
        for name in EXPORTS:
            fetched = export_path(outdir, name, tag)
            if isinstance(fetched, Path) and fetched.is_file():
                fetched.replace(outdir / name)
        return self._collect(outdir)

    def _board_options(self, board_table: PurePath | None) -> MeasureOptions:
        """The options with the board's paths for what trtexec there reads: the calibration table's
        copy there (`board_table`) and the timing cache the board keeps (board_timing_cache)."""
        options = self.options
        if board_table is not None:
            options = dataclasses.replace(options, extra={**options.extra, "calib_cache": str(board_table)})
        board_cache = board_timing_cache(options, self.remote_root, self.run_dir)
        if board_cache is not None:
            options = dataclasses.replace(options, extra={**options.extra, "timing_cache": str(board_cache)})
        return options

    def _collect(self, outdir: Path) -> TrtexecRun:
        def present(name: str) -> Path | None:
            p = outdir / name
            return p if p.is_file() else None

        self._last_log = outdir / "trtexec.log"
        run = load_run(
            log=outdir / "trtexec.log",
            times=present("times.json"),
            profile=present("profile.json"),
            layer_info=present("layer_info.json"),
        )
        self.last_run = run
        return run

    def measure(self, model_path: Path) -> Timing:
        from deployopt.clocks import read_clocks

        # nvidia-smi here reads this machine's GPU: not a --remote board's, nor one of several
        # (which one trtexec runs on is CUDA's choice), so only where there is one
        before = None if self.remote else read_clocks(None)
        run = self.run(model_path)
        after = None if before is None else read_clocks(None)
        return self._timing(run, before, after)

    def _timing(self, run: TrtexecRun, before: ClockState | None, after: ClockState | None) -> Timing:
        """`run` as the Timing `measure` gives, for the model run() or the sweep's batch ran last
        (self._engine, self._prebuilt, self._qdq); `before`/`after`: the clock readings around it."""
        from deployopt.clocks import record_in_environment

        if not run.iterations:
            try:
                run.require_timing()
            except NoTimingError:
                raise BackendFailed(self._no_timing(run, None)) from None
            raise BackendFailed(self._no_timing(run, "but wrote no --exportTimes samples"))
        timing = run.timing("computeMs")
        timing.environment.update(self._env(run))
        built = self._built(run)  # compare names a dtype difference as such
        timing.environment["dtype"] = built
        if self._input_shapes:  # the batch timed: compare flags a pair timed at other shapes
            timing.environment["input_shapes"] = self._input_shapes
        if self._engine:  # optimize keeps the chosen plan's engine (keep_engine)
            timing.environment["engine"] = self._engine
        # around the whole trtexec run, engine build included: a slowdown then is flagged too. No SM
        # clock: trtexec has exited, the GPU is idle again
        record_in_environment(timing.environment, before, after, busy_clock=False)
        dtype = precision_phrase(built, self.version or run.version, self.options.dtype)
        dtype += ", placeholder INT8 ranges" if self.placeholder_int8 else ""
        what = f"({dtype})"
        if self._prebuilt:
            mark_prebuilt(timing.environment, self.options.dtype)
            what = f"of {PREBUILT}"
        timing.timed = (
            f"one query {what}, GPU compute time per trtexec --exportTimes, {self._graph_phrase(run)}, "
            "no H2D/D2H, spin-wait"
        )
        return timing

    def _no_timing(self, run: TrtexecRun, what: str | None) -> str:
        """The line for a trtexec that exited 0 but left nothing to time by (`what`; None: its log
        has no performance summary): which trtexec (or board), how its log ends, and a copy of the
        log that stays (`_kept_log`). It said "no end-to-end timing in this log", naming neither
        trtexec nor the log, which went with the work folder."""
        who = f"trtexec on {self.remote}" if self.remote else f"trtexec ({self.trtexec})"
        log = self._last_log
        text = ""
        if log is not None and log.is_file():
            with contextlib.suppress(OSError):
                text = log.read_text("utf-8", "replace")
        reason = run.no_timing_reason
        if what is None:
            said = f": {reason}" if reason and reason != "the log has no performance summary" else ""
            what = f"with {NO_TIMING}{said}"
        # its own lines, not the &&&& RUNNING / PASSED ones (the first repeats the whole command line)
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        own = [ln for ln in lines if not ln.startswith("&&&&")] or lines
        ends = f"; the log ends: {shorten(' | '.join(own[-3:]), 300)}" if own else "; its log is empty"
        kept = f" (log: {_kept_log(text, log)})" if log is not None and text.strip() else ""
        return f"{who} exited 0 {what}{ends}{kept}"

    def measure_convs(self, shapes: list[ConvShape]) -> list[Timing]:
        """With --remote: all of `shapes` timed on the board in one batch, four round trips whatever
        their number (five the first time: the board's version): the batch folder made empty, the
        conv models sent in one scp, one ssh whose shell runs trtexec once per conv in turn
        (sweep_script), every log and export fetched in one scp. `measure` per conv (the base
        class's way, kept here without --remote: a local process start is cheap) made a folder,
        copied, ran and fetched per conv. Each conv's command is what `measure` builds for it
        (build_command, in a folder of its own) and its Timing is read as `measure` reads one; the
        run gets --timeout per conv, the first conv that fails stops it, one line naming it. As the
        runner's batch: the same one-conv models (conv_model, Q/DQ for int8), named by place and
        shape (sweep_model_name), typed fp16 here on TensorRT >= 11 (build_model), and no --shapes
        (a conv's one input is static; --input-shape names the model's inputs)."""
        if not self.remote:
            return super().measure_convs(shapes)
        if not shapes:
            return []
        if len(shapes) > SWEEP_MAX_CONVS:
            cut = range(0, len(shapes), SWEEP_MAX_CONVS)
            return [t for i in cut for t in self.measure_convs(shapes[i : i + SWEEP_MAX_CONVS])]
        from deployopt.backends.tensorrt_remote import SWEEP_DIR, sweep_model_name
        from deployopt.layers import conv_model_inputs

        int8 = self.options.dtype == "int8"
        table = calibration_table(self.options) if int8 else None
        if table is not None and not Path(table).is_file():  # before anything reaches the board
            raise no_such_file(table, DataError)
        board = self._board()
        short = min(QUICK_STEP_S, self.options.timeout_s)
        long = self.options.timeout_s * len(shapes)  # what the convs had one by one
        if self.version is None:  # first: the board's TensorRT decides what model goes there
            self.version = board_version(board, self.trtexec, short)
        if self._convs is None:
            self._convs = sweep_convs_dir(PurePosixPath(self.remote_workdir) / SWEEP_DIR, self.run_dir)
        folder = self._convs
        here = self.workdir / SWEEP_DIR  # this batch's models, then its logs and exports
        shutil.rmtree(here, ignore_errors=True)  # never read a previous batch's exports
        (here / "models").mkdir(parents=True)
        send: list[Path] = []
        board_table = None
        if table is not None:  # every conv's --calib, as `measure` gives it, names one copy there
            # under a name no conv model (conv*) nor the results folder has; scp keeps the name
            copy = here / "models" / f"calib_{board_name(Path(table).name)}"
            shutil.copyfile(table, copy)
            send.append(copy)
            board_table = folder / copy.name
        options = self._board_options(board_table)
        self._prebuilt, self._typing = False, None  # conv models typed as the session's dtype
        runs: list[SweepRun] = []
        # per conv: Q/DQ nodes, the engine's path on the board, its input's shape (as measure records it)
        built: list[tuple[bool, str | None, dict[str, list[int]]]] = []
        for i, shape in enumerate(shapes):
            name = sweep_model_name(i, shape)
            written = here / "models" / f"{name}.onnx"
            written.write_bytes(self.conv_model(shape).SerializeToString())
            self._qdq = int8  # conv_model(int8=True) is a Q/DQ model: no need to read it back
            model = self.build_model(written, here / "models", self.version)  # 11.x: typed fp16 here
            send.append(model)
            cmd = build_command(self.trtexec, folder / model.name, folder / name, options, self.version, {})
            runs.append(SweepRun(model.name, cmd, folder / name, folder / SWEEP_RESULTS / name))
            built.append((self._qdq, saved_engine(cmd), conv_model_inputs(shape)))  # not read back
        script = sweep_script(runs)
        (here / "command.txt").write_text(f"ssh {self.remote} " + shlex.join(["sh", "-c", script]) + "\n")
        make_sweep_dir(board, folder, short, look=self._look_for_others)
        self._look_for_others = False
        board.put_many(send, folder, "scp of the conv models", long)
        try:
            board.run_limited(
                ["sh", "-c", script], "trtexec", long, ends_with=interrupt_ends(folder, self.run_dir)
            )
        except RemoteFailed as exc:
            raise BackendFailed(self._sweep_error(exc)) from None
        back = "scp of trtexec's logs and exports"
        board.get_folder(folder / SWEEP_RESULTS, here, back, self.options.timeout_s)
        timings = []
        for run, (qdq, engine, ran) in zip(runs, built):
            self._qdq, self._engine, self._input_shapes = qdq, engine, ran
            timings.append(self._timing(self._collect(here / SWEEP_RESULTS / run.results.name), None, None))
        return timings

    def _sweep_error(self, exc: RemoteFailed) -> str:
        """The sweep's batch failed: the conv whose trtexec failed (its SWEEP_FAILED line) and why, in
        one line as `measure`'s would say it, with the conv's name; else Board.call's line."""
        import re

        found = re.search(rf"^{re.escape(SWEEP_FAILED)} (\S+) status (\d+)$", exc.err, re.MULTILINE)
        if found is None:  # not a trtexec (a folder it could not make): the board's own words
            return str(exc)
        name, status = found.group(1), int(found.group(2))
        if status == 0:
            return f"trtexec on {self.remote} reported FAILED on {name}: {tail(exc.out)}"
        said = oom_hint(status, on_board=True) or tail(exc.out) or "no output"
        return f"trtexec on {self.remote} {exit_phrase(status)} on {name}: {said}"

    def _graph_phrase(self, run: TrtexecRun) -> str:
        """Whether the queries ran as a CUDA graph: asked for (extra["use_cuda_graph"]) and not
        dropped by trtexec, which times without one when the engine cannot be captured."""
        if not self.options.extra.get("use_cuda_graph", True):
            return "no CUDA graph"
        if "cuda_graph_ignored" in run.flags:
            return "no CUDA graph (trtexec could not capture this engine in one; launch gaps included)"
        return "CUDA graph"

    def profile(self, model_path: Path, kernels: bool = False) -> Profile:
        run = self.run(model_path)
        if not run.layers:
            raise BackendFailed("trtexec wrote no per-layer profile (--exportProfile)")
        prof = run.profile()
        prof.environment.update(self._env(run))
        prof.environment["dtype"] = self._built(run)  # the precision built, as bench's result says it
        if self._prebuilt:
            mark_prebuilt(prof.environment, self.options.dtype)
            prof.timed = prebuilt_profile_timed(prof.timed)
        return prof

    def _built(self, run: TrtexecRun) -> str:
        """The precision the last model was built in (built_precision: on TensorRT >= 11 an fp32
        build of a typed model runs as typed); --dtype for an engine or conv models."""
        if self._typing is None:
            return self.options.dtype
        return built_precision(self.options.dtype, self.version or run.version, self._typing)

    def _env(self, run: TrtexecRun) -> dict[str, Any]:
        env: dict[str, Any] = {"trtexec": self.remote + ":" + self.trtexec if self.remote else self.trtexec}
        if self.remote:  # the board that timed it, as the runner's results say it ("Orin at user@jetson")
            env["remote"] = self.remote
        for key in ("device", "version", "sms", "compute_capability", "precision"):
            if key == "precision" and self._prebuilt:
                continue  # 8.x logs its build options' default (FP32) for --loadEngine too: not the engine's
            value = getattr(run, key)
            if key == "version" and value is None:
                # 7.x logs name no version (no [TensorRT vNNNN] in the banner, no "TensorRT version"
                # line): the one detect_version read from --help ("7": all a 7.x banner tells) or
                # extra["trt_version"]. Not recorded, a TensorRT upgrade passed compare --strict
                value = self.version
            if value is not None:
                env["tensorrt" if key == "version" else key] = value
        if run.flags:
            env["trtexec_flags"] = list(run.flags)
        if run.build_s is not None:  # "Engine built in N sec." (none for a loaded engine)
            env["engine_build_s"] = run.build_s
        return env

    def preflight(self) -> None:
        """With --remote: the board answers and its work folder can be made (one ssh round trip;
        board_version, which the first model runs, reads the board's TensorRT)."""
        if not self.remote:
            return
        short = min(QUICK_STEP_S, self.options.timeout_s)
        if self.run_dir is not None:  # optimize's run: the look for another run rides on the mkdir
            mkdir_warning_of_other_runs(self._board(), self.run_dir, short, ours=True)
        else:
            self._board().mkdir(self.remote_workdir, short)

    def keep_engine(self, timing: Timing, dest: Path) -> bool:
        """The engine trtexec saved (--saveEngine), here or copied back from the board."""
        if not self.remote:
            return super().keep_engine(timing, dest)
        return fetch_engine(self._board(), timing, dest, self.options.timeout_s)

    def close(self) -> None:
        if self._removes is not None:
            remove_run_dir(self._board(), self._removes)
            self._removes = None
        if self._convs is not None:
            remove_sweep_dir(self._board(), self._convs, self.run_dir)
            self._convs = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class TrtexecBackend(Backend):
    name = "trtexec"
    description = "NVIDIA trtexec binary (TensorRT build + timing in a subprocess), parsed JSON exports"
    dtypes = ("fp32", "fp16", "int8")

    def availability(self) -> tuple[bool, str]:
        path = find_trtexec()
        if path is None:
            env = os.environ.get(ENV_TRTEXEC)
            if env:
                return False, f"{ENV_TRTEXEC}={env} is not an executable file"
            return False, INSTALL_HINT
        return True, path

    def check_options(self, options: MeasureOptions) -> None:
        if options.dtype == "int8":
            refuse_calibration_data(options.calibration_data)
            # a version known before any model (extra["trt_version"]) refuses a table here already
            refuse_int8_calibration(options.extra.get("trt_version"), calibration_table(options))
        if options.extra.get("remote"):  # the binary lives on the board, not here
            if options.dtype not in self.dtypes:
                raise DeployoptError(f"backend 'trtexec' cannot run {options.dtype}")
            if options.sms is not None:
                raise DeployoptError("backend 'trtexec' cannot limit the GPU's SMs (--sms)")
            return
        super().check_options(options)

    def open(self, options: MeasureOptions) -> TrtexecSession:
        self.check_options(options)
        trtexec = options.extra.get("remote_trtexec", JETSON_TRTEXEC) if options.extra.get("remote") else None
        return TrtexecSession(self, options, trtexec or find_trtexec() or "trtexec")
