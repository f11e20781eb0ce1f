"""`deployopt optimize`: find the channel widths with the lowest *measured* latency, and prove it.

load → analyze → candidates → per-layer tables → solver → end-to-end verification → outputs.

1. Baselines first: the input model and round-up-to-8 (each free width padded to a multiple of 8,
   lossless; a grouped conv's group, whose width is per conv group, padded until its g × width
   channels are). The search starts from whichever measured faster (FINDINGS §2: a greedy search
   started from the irregular point ended above round-up-to-8).
2. Candidate widths per free group (search.candidate_widths), ranked by the wave model; for a
   grouped conv's group they are widths per conv group (ChannelGroup.repeat × width channels).
3. A table per conv over the (C, K) pairs its groups can take, filled from the on-disk per-layer
   cache (lut.py) or timed with `session.measure_convs` (predicted with the `model` backend).
4. The table cost Σ_conv table[conv](C, K) is minimised exactly by variable elimination
   (search.TableCost); the best few distinct plans are measured end to end, then single-group moves
   the table ranks best are tried. A plan replaces the incumbent only when `timing.compare` calls
   it faster (Mann-Whitney p < alpha and at least `min_effect` faster): the answer is never a
   plan that merely got lucky once, and never slower than the baselines beyond noise.
5. Everything measured goes to OUTDIR/journal.jsonl first; `resume=True` replays it and measures
   only what is missing. The outputs are written at the end into a staging folder inside OUTDIR
   and moved into place as one set, report.json last (fileio.output_set): a folder with a
   report.json holds one run's complete results, and a failure while writing them leaves the
   previous results (if any) as they were and the journal ready for --resume.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from deployopt.backends.base import TIMING_CACHE_BACKENDS, refuse_timing_cache
from deployopt.errors import (
    BackendFailed,
    BackendUnavailable,
    DataError,
    DeployoptError,
    OutputError,
    StaticDimsError,
    reraise_interrupt,
)
from deployopt.fidelity import GATE_SAMPLES, ImagePreprocess
from deployopt.fileio import (
    STAGING_PREFIX,
    check_output_dir,
    check_output_file,
    file_sha256,
    hold_lock,
    holds_lock,
    make_output_dir,
    owned_temp_dir,
    refuse_input_as_output,
    release_lock,
    remove_outputs,
    remove_owned_temp_dir,
    remove_staging,
)
from deployopt.journal import JOURNAL_VERSION, Journal, Replay, outdir_replaced, plan_key
from deployopt.layers import ConvShape
from deployopt.lut import LayerCache, SweepResult, device_fingerprint
from deployopt.search import MODES, Factor, TableCost, candidate_widths, ceil_to, group_align
from deployopt.timing import Timing, check_run_counts, compare
from deployopt.traffic import MB, NOT_FITTED, SlopeFit, Traffic, fit_slope, traffic

BACKEND_CHOICES = ("auto", "tensorrt", "trtexec", "torch", "ort", "model")
RUN_TIMING_CACHE = "timing.cache"  # the run's own TensorRT timing cache, in its work folder
LOSSLESS_ATOL = 1e-4
# ... plus this fraction of each output's largest magnitude: ~100 fp32 ulps of it. Padding changes
# the summation order of the convs, so a detector's boxes decoded in pixels (up to 640) differ by
# an ulp or two (1.2e-4 measured); a surgery error shows at the output's own scale, 1e5 times more.
LOSSLESS_RTOL = 1e-5
# A model that computes in fp16/bf16 rounds each conv's sum to ~3 (bf16: ~2) significant digits, and
# padding reorders the sums: a seeded 5-conv fp16 net differed by 2^-12 at an output of magnitude
# 2.3 (~1e-4 of it) and every optimize of it stopped at "internal check failed". Four of its
# epsilons of each output's largest magnitude; a surgery error is still ~1 of it.
LOSSLESS_RTOL_LOW_PRECISION = {"fp16": 4 * 2.0**-10, "bf16": 4 * 2.0**-7}
SWEEP_RUNS = 10  # samples per conv in the per-layer sweep, unless --sweep-runs says otherwise
MAX_TABLE_COMBOS = 256  # distinct conv shapes a conv's exact table may price; beyond, separable
#: assignments of a conv's groups its exact table may hold: a conv reading a concat sees only the
#: parts' sum, so 8 × 8 × 8 assignments of two parts and its output are far fewer shapes
MAX_TABLE_ASSIGNMENTS = 4096
#: on a measured backend, the shapes exact concat tables may add to the separable sweep, as a share
#: of it (each an engine build on a board): a YOLO-like detector swept 1637 shapes, not 997, to
#: gain nothing; the wave model prices them all
EXACT_TABLE_BUDGET = 0.25
# The results in OUTDIR, in the order they are moved into place; report.json, last, marks a complete set.
OUTPUTS = (
    "model.onnx.data",  # the weights, when the input model kept them in an external data file
    "model.onnx",
    "plan.json",
    "report.md",
    "staircases",
    "model.engine",
    "report.json",
)

ProgressFn = Callable[..., None]


# trim's fidelity gate, against the input model on the calibration data (--min-cosine, --min-top1)
TRIM_MIN_COSINE = 0.99
TRIM_MIN_TOP1 = 0.99
DEFAULT_GATE = {"min_cosine": TRIM_MIN_COSINE, "min_top1": TRIM_MIN_TOP1, "enforced": True}


@dataclass
class OptimizeConfig:
    """Everything that defines a run; the part that changes results is checked on --resume."""

    model_path: str | os.PathLike[str]
    target: str
    backend: str = "auto"
    sms: int | None = None
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    batch: int | None = None
    # None: what `deployopt optimize` takes without --dtype (backends.base.default_dtype as a
    # deployment: int8 for a Q/DQ model where the backend runs int8, the model's own typing on ort,
    # else fp16 where the backend runs it); Optimizer resolves it before anything is measured
    dtype: str | None = None
    mode: str = "lossless"
    max_trim: float = 0.10
    max_evals: int = 40
    runs: int = 100
    warmup: int = 20
    sweep_runs: int | None = SWEEP_RUNS  # samples per conv in the per-layer sweep (None: `runs`)
    cudnn_engines: int | None = None  # torch: engines cudnn.benchmark times (None: PyTorch's 10, 0: all)
    cudnn_benchmark: bool = True  # torch: False = no autotuning, cuDNN's heuristics pick (PyTorch's default)
    calibration_data: str | None = None
    # how calibration images become tensors, for the fidelity checks, the trim ranking and INT8
    # calibration alike (--mean/--std/--scale/--bgr/--resize); arrays are fed as they are
    preprocess: ImagePreprocess = field(default_factory=ImagePreprocess)
    outdir: str | os.PathLike[str] | None = None
    resume: bool = False
    force: bool = False
    max_candidates: int = 8  # widths tabulated per group (cost of the per-layer sweep ~ this²)
    top_k: int = 4  # solver plans measured end to end before the refinement moves
    patience: int = 8  # stop refining after this many rejected moves in a row
    alpha: float = 0.01  # significance for "faster"
    min_effect: float = 0.005  # and at least this much faster (relative)
    confirm_rounds: int = 2  # re-measure the answer and the best baseline this many more times each
    fidelity: bool = True  # check outputs on onnxruntime (lossless: equal; trim: thresholds)
    fidelity_gate: bool = True  # trim: refuse plans past the thresholds (False: report only)
    fidelity_samples: int = GATE_SAMPLES
    min_top1: float = TRIM_MIN_TOP1  # trim thresholds
    min_cosine: float = TRIM_MIN_COSINE
    # trim: the outputs that are class scores, held to min_top1 (--top1-outputs; [] none); None:
    # chosen per output (fidelity.Top1Choice: never a box or an embedding)
    top1_outputs: list[str] | None = None
    cache_root: str | os.PathLike[str] | None = None  # None: lut.cache_root()
    plots: bool = True
    # price the non-conv ops' memory traffic at a slope fitted to the run's own measurements (traffic.py)
    traffic_term: bool = True
    # USER@HOST: build and time every model on that board over ssh (trtexec there, or jetson/runner.py
    # for the tensorrt backend); the host edits the models and runs the search
    remote: str | None = None
    timeout_s: float = 600.0  # per model built and timed (a Nano builds a large engine for minutes)
    # TensorRT backends: every engine the run builds shares one timing cache, so a layer shape's
    # tactics are timed once, not once per candidate (a file of the run's own, gone with it; or this
    # file, kept for the next run); no_timing_cache: every build times its tactics afresh
    timing_cache: str | None = None
    no_timing_cache: bool = False

    def signature(self, model_sha256: str | None = None) -> dict[str, Any]:
        """What must match for --resume to continue this run (max_evals may grow). `model_sha256`:
        the hash of the bytes the run loaded (Optimizer._load); without it, the file's as it is now."""
        gate = self.trim_gate()
        if model_sha256 is None and Path(self.model_path).is_file():
            model_sha256 = file_sha256(self.model_path)
        return {
            "journal_version": JOURNAL_VERSION,
            # a pipe (`<(gunzip -c m.onnx.gz)`) gives its bytes once, to loading: hashing it again
            # waited forever for a new writer of a named one, and hashed an anonymous one as empty
            "model_sha256": model_sha256,
            "target": self.target,
            "sms": self.sms,
            "cudnn_engines": self.cudnn_engines,
            # only when off, so journals written before the option existed still resume
            **({} if self.cudnn_benchmark else {"cudnn_benchmark": False}),
            "input_shapes": self.input_shapes,
            "batch": self.batch,
            "dtype": self.dtype,
            "mode": self.mode,
            "max_trim": self.max_trim if self.mode == "trim" else None,
            "runs": self.runs,
            "warmup": self.warmup,
            # the per-layer values the journal replays were timed with these samples; only when not
            # the default, so journals written before the key resume
            **({} if self.sweep_runs == SWEEP_RUNS else {"sweep_runs": self.sweep_runs}),
            "max_candidates": self.max_candidates,
            "top_k": self.top_k,
            "patience": self.patience,
            "alpha": self.alpha,
            "min_effect": self.min_effect,
            "confirm_rounds": self.confirm_rounds,
            # the journal's fidelity verdicts (trim refusals, the final check) were decided on this many
            # samples; a journal from before the key: its reports' counts (Optimizer._resume_keys)
            "fidelity_samples": self.fidelity_samples,
            # only when off (the default prices the non-conv ops' traffic, traffic.py): a journal from
            # before the term resumes, its measurements replayed where the search meets them again;
            # one searched without it does not resume into a search with it, nor the reverse
            **({} if self.traffic_term else {"traffic_term": False}),
            # measurements of one board do not resume on another (only when set: older journals resume)
            **({"remote": self.remote} if self.remote else {}),
            # trimmed channels are ranked on the calibration data when there is some (a journal from
            # before, ranked by filter L1, must not resume into models ranked differently)
            **({"trim_order": "activation"} if self.mode == "trim" and self.calibration_data else {}),
            # the journal keeps each plan's failures under the thresholds it ran with; only when not
            # the defaults, so journals written before the options existed still resume
            **({"trim_gate": gate} if self.mode == "trim" and gate != DEFAULT_GATE else {}),
            # which outputs top-1 scores, where --top1-outputs named them (journals from before resume)
            **(
                {"top1_outputs": self.top1_outputs}
                if self.mode == "trim" and self.top1_outputs is not None
                else {}
            ),
            # the gate's reports, the trim ranking and INT8 ranges come from the tensors the images
            # make; only what differs from the defaults, so journals from before the options resume
            **({"image_preprocess": self.preprocess.changes()} if self.image_preprocessed() else {}),
        }

    def image_preprocessed(self) -> bool:
        """Whether the run's images are made into tensors other than by the defaults."""
        return bool(self.calibration_data) and bool(self.preprocess.changes())

    def trim_gate(self) -> dict[str, Any]:
        """The fidelity gate a trim plan must pass: thresholds, and whether a failure refuses it."""
        return {"min_cosine": self.min_cosine, "min_top1": self.min_top1, "enforced": self.fidelity_gate}


@dataclass
class Evaluation:
    index: int  # 1-based order of first measurement in the run
    label: str
    plan: dict[str, int]
    timing: Timing
    table_us: float | None
    replayed: bool
    accepted: bool = False


@dataclass
class OptimizeResult:
    outdir: Path
    mode: str
    backend: str
    measured: bool
    original: dict[str, int]
    round_up: dict[str, int]
    best_plan: dict[str, int]
    best_label: str
    timings: dict[str, Timing]  # "input", "round_up_8", "best"
    evaluations: list[Evaluation]
    sweep: dict[str, Any]
    fidelity: dict[str, Any] | None
    report: dict[str, Any]

    @property
    def evaluation_count(self) -> int:
        return len(self.evaluations)


def _pool(timings: list[Timing]) -> Timing:
    """One Timing holding every sample of several builds of the same model, each build recorded
    as a replicate (Timing.from_replicates): the report tests a difference on the builds' medians
    (timing.compare_replicates), since the build, not the sample, is what varies from one build of
    a model to the next; a test on the pooled samples took 200 of them from 2 builds as independent
    and gave p = 1e-50 to build-to-build noise (bug bash)."""
    pooled = Timing.from_replicates(timings)
    n = len(timings)
    return replace(pooled, timed=pooled.timed + (f" (pooled over {n} builds)" if n > 1 else ""))


class _Budget(Exception):
    """Internal: the end-to-end evaluation budget is spent."""


# ------------------------------------------------------------------------------------------ setup


def resolve_backend_name(name: str, remote: str | None = None) -> str:
    """`auto`: TensorRT where it imports and sees a GPU, else torch on CUDA, else the wave model;
    with --remote, jetson/runner.py on the board (`tensorrt`: it records the board's clocks too)."""
    if name not in BACKEND_CHOICES:  # in bench's and profile's words, naming the option (a guess too)
        from deployopt.backends.base import unknown_backend

        raise BackendUnavailable(unknown_backend(name, BACKEND_CHOICES, "--backend"))
    if remote:
        from deployopt.remote import check_remote_backend

        name = "tensorrt" if name == "auto" else name
        check_remote_backend(name, remote)
    if name != "auto":
        return name
    from deployopt.backends.base import get_backend

    for candidate in ("tensorrt", "torch"):
        try:
            ok, _ = get_backend(candidate).availability()
            if ok and candidate == "torch":  # torch runs on a CPU too; auto wants it only on CUDA
                from deployopt.backends import torch as torch_backend

                ok = bool(torch_backend.cuda_visible())
        except Exception:  # a backend module that fails to import is simply not chosen
            ok = False
        if ok:
            return candidate
    return "model"


def default_outdir(model_path: Path) -> Path:
    return model_path.with_name(f"{model_path.stem}.deployopt")


#: The CLI option (`--flag VALUE`) that sets an OptimizeConfig field, or the journal signature key of
#: the same name: for the checks that name it by the caller (`deployopt optimize`'s errors say
#: `--mode trim`, a library caller's `mode='trim'`: it wrote no option), and for what --resume
#: refuses (`_resume_flags`: only signature keys reach it, so input_shapes, which it words its own
#: way, is not here; check_config and Optimizer._load name it themselves).
CLI_OPTIONS = {
    "target": "--target",
    "backend": "--backend",
    "remote": "--remote",
    "sms": "--sms",
    "cudnn_engines": "--cudnn-engines",
    "batch": "--batch",
    "dtype": "--dtype",
    "mode": "--mode",
    "max_trim": "--max-trim",
    "runs": "--runs",
    "warmup": "--warmup",
    "sweep_runs": "--sweep-runs",
    "top1_outputs": "--top1-outputs",
    "max_evals": "--max-evals",
    "min_cosine": "--min-cosine",
    "min_top1": "--min-top1",
    "resume": "--resume",
    "force": "--force",
    "timing_cache": "--timing-cache",
    "no_timing_cache": "--no-timing-cache",
}


def setting(name: str, value: Any, cli: bool, quoted: bool = False) -> str:
    """A setting as an error names it: the CLI's option and value as typed (`--max-trim 0.3`) when
    `cli`, else the OptimizeConfig field (`max_trim=0.3`) a library caller wrote. `quoted`: the
    CLI's value in quotes too (`--mode 'lossy'`)."""
    if cli:
        return f"{CLI_OPTIONS[name]} {value!r}" if quoted else f"{CLI_OPTIONS[name]} {value}"
    return f"{name}={value!r}"


def setting_name(name: str, cli: bool) -> str:
    """A setting's name alone, as `setting` words it: `--max-evals` when `cli`, else `max_evals`."""
    return CLI_OPTIONS[name] if cli else name


def _default(cfg: OptimizeConfig, name: str) -> Any:
    """A field's default: what a caller who left it alone has (a config cannot tell them apart)."""
    from dataclasses import fields

    return next(f.default for f in fields(cfg) if f.name == name)


def check_config(cfg: OptimizeConfig, cli: bool = False) -> None:
    """One-line errors for bad options, before anything is loaded or measured. `cli`: a setting is
    named as `deployopt optimize`'s option (CLI_OPTIONS), else as the OptimizeConfig field a library
    caller wrote (`max_evals=1`, not `--max-evals`); trtexec's warm-up and a calibration table given
    as data still name the option either way (docs/optimize.md)."""
    if cfg.mode not in MODES:
        raise DeployoptError(
            f"{setting('mode', cfg.mode, cli, quoted=True)}: choose one of {', '.join(MODES)}"
        )
    if not 0.0 < cfg.max_trim < 1.0:
        raise DeployoptError(
            f"{setting('max_trim', cfg.max_trim, cli)}: must be between 0 and 1 (exclusive), e.g. 0.10"
        )
    if cfg.mode != "trim" and cfg.max_trim != _default(cfg, "max_trim"):
        # max_trim=0.3 without mode="trim" ran lossless without a word. The gate's fields are not
        # refused: unused outside trim, and a caller running both modes on one config sets them
        # for both (benchmarks/bench_optimize.py). The CLI refuses those too, and an option given
        # at its default, which a config cannot tell from one left alone.
        raise DeployoptError(
            f"{setting('max_trim', cfg.max_trim, cli)} applies to {setting('mode', 'trim', cli)} only "
            f"(mode {cfg.mode!r} keeps the outputs equal)"
        )
    if cfg.max_evals < 2:
        said = CLI_OPTIONS["max_evals"] if cli else f"{setting('max_evals', cfg.max_evals, cli)}:"
        raise DeployoptError(f"{said} must be at least 2 (the two baselines)")
    from deployopt.fidelity import check_threshold_range

    check_threshold_range(
        cfg.min_cosine,
        cfg.min_top1,
        cosine_flag=setting_name("min_cosine", cli),
        top1_flag=setting_name("min_top1", cli),
    )
    check_run_counts(
        cfg.runs, cfg.warmup, flag=setting_name("runs", cli), warmup_flag=setting_name("warmup", cli)
    )
    check_run_counts(cfg.sweep_runs, flag=setting_name("sweep_runs", cli))
    if cfg.backend == "trtexec" and cfg.warmup != _default(cfg, "warmup"):
        from deployopt.backends.trtexec import refuse_warmup_runs

        refuse_warmup_runs(cfg.warmup)  # trtexec warms up by time: --warmup was dropped in silence
    from deployopt.model import check_batch_agrees

    check_batch_agrees(cfg.batch, cfg.input_shapes, cli)
    # the search's own settings, which no CLI option sets (named as OptimizeConfig's fields): an alpha
    # out of range was a raw ValueError once the run had begun, the others were taken as they were
    if not 0.0 < cfg.alpha < 1.0:
        raise DeployoptError(f"alpha {cfg.alpha:g}: must be a p-value threshold between 0 and 1, e.g. 0.01")
    if not 0.0 <= cfg.min_effect < 1.0:
        raise DeployoptError(
            f"min_effect {cfg.min_effect:g}: must be a fraction from 0 up to 1, e.g. 0.005 (0.5 % faster)"
        )
    for name, least, what in (
        ("max_candidates", 1, "widths tabulated per group"),
        ("top_k", 1, "solver plans measured end to end"),
        ("confirm_rounds", 0, "extra measurements of the answer and the best baseline; 0: none"),
        # fidelity's own check said "--count must be >= 1", an option optimize does not have
        ("fidelity_samples", 1, "calibration samples the fidelity check runs"),
    ):
        if getattr(cfg, name) < least:
            raise DeployoptError(f"{name} {getattr(cfg, name)}: must be at least {least} ({what})")
    if not cfg.timeout_s > 0:  # NaN too; the CLI's --timeout is checked (and capped) before this
        raise DeployoptError(f"timeout_s {cfg.timeout_s:g}: must be a number of seconds above 0")
    if cfg.resume and cfg.force:
        raise DeployoptError(
            f"{setting_name('resume', cli)} and {setting_name('force', cli)} exclude each other"
        )
    if cfg.sms is not None and cfg.sms < 1:
        said = CLI_OPTIONS["sms"] if cli else f"{setting('sms', cfg.sms, cli)}:"
        raise DeployoptError(f"{said} must be a positive integer")
    if cfg.timing_cache and cfg.no_timing_cache:
        raise DeployoptError(
            f"{setting_name('timing_cache', cli)} and {setting_name('no_timing_cache', cli)} "
            "exclude each other"
        )
    if cfg.timing_cache:  # with --remote the board keeps it under its name: nothing is written here
        check_output_file(cfg.timing_cache, probe=not cfg.remote)
    if cfg.fidelity and cfg.calibration_data:
        from deployopt.backends.trtexec import is_calibration_table

        if is_calibration_table(cfg.calibration_data):  # said here, not as "not calibration data" later
            raise DataError(
                f"--calibration-data {cfg.calibration_data} is a calibration table: optimize checks each "
                "plan's outputs on real inputs, so give the data (a folder of images, .npy or .npz); "
                "--backend tensorrt calibrates on it and keeps the table beside each engine for reuse "
                "(bench and profile take a table alone)"
            )
    if not Path(cfg.model_path).exists():
        from deployopt.errors import ModelError, no_such_file

        raise no_such_file(cfg.model_path, ModelError)


def resolve_dtype(cfg: OptimizeConfig, backend_name: str) -> OptimizeConfig:
    """`cfg` with its dtype given (unchanged), or else the dtype `deployopt optimize` takes without
    --dtype (backends.base.default_dtype as a deployment): an OptimizeConfig with the dataclass's
    literal "fp16" timed a Q/DQ model in fp16 where the CLI timed it in int8, and refused ort's fp32."""
    if cfg.dtype is not None:
        return cfg
    from deployopt.backends.base import default_dtype, get_backend

    backend = get_backend(backend_name)
    dtype = default_dtype(backend, cfg.model_path, deployment=True)
    if dtype not in backend.dtypes:  # the model's own typing (ort: bf16, mixed fp32/fp16): bench's words
        from deployopt.precision import cannot_run_typed

        raise DeployoptError(cannot_run_typed(backend.name, backend.dtypes, Path(cfg.model_path).name, dtype))
    return replace(cfg, dtype=dtype)


def check_before_measuring(cfg: OptimizeConfig, cli: bool = False) -> None:
    """The one-line refusals that need no board (options, the target's name, the backend, the input
    model, the output folder), in the order a user mends them: a typo in --target or a backend not
    installed is said before "OUTDIR already exists", which --force would only have traded for it.
    For `optimize --remote` without --target (cfg.target ''), before the board is asked which
    target it is: a folder that exists, or a typo, cost an ssh round trip first. `Optimizer`
    checks them again; they are cheap. `cli`: as check_config's."""
    check_config(cfg, cli)
    if cfg.target:
        from deployopt.targets import get_target

        get_target(cfg.target, sms=cfg.sms)
    # the backend's checks (installed, dtype, --sms, --cudnn-engines); with --remote, not the board's
    from deployopt.backends.base import MeasureOptions, get_backend

    backend_name = resolve_backend_name(cfg.backend, cfg.remote)
    options = MeasureOptions(
        dtype=str(resolve_dtype(cfg, backend_name).dtype),
        sms=cfg.sms,
        runs=cfg.runs,
        cudnn_engines=cfg.cudnn_engines,
        cudnn_benchmark=cfg.cudnn_benchmark,
        extra={"remote": cfg.remote} if cfg.remote else {},
    )
    get_backend(backend_name).check_options(options)
    _check_outdir(cfg)


def resumed_target(cfg: OptimizeConfig) -> str | None:
    """--resume with --remote and no --target: the target of the run being resumed, from its journal,
    so the board is not asked again (its answer was checked when the run began); a journal of another
    board is refused here, before any ssh. None when the journal names no target."""
    outdir = _check_outdir(cfg)
    journal_path = outdir / "journal.jsonl"
    old = Journal.replay(journal_path).config or {}
    if old.get("remote") != cfg.remote:
        changed = _resume_diff(["remote"], old, {"remote": cfg.remote}, cli=True)
        raise DeployoptError(
            f"--resume: {journal_path} was written by a different run ({changed}); use --force to start over"
        )
    target = old.get("target")
    return str(target) if target else None


def _check_outdir(cfg: OptimizeConfig) -> Path:
    """The output folder, or a one-line error; nothing is deleted here (see _clear_outdir)."""
    outdir = Path(cfg.outdir) if cfg.outdir else default_outdir(Path(cfg.model_path))
    journal = outdir / "journal.jsonl"
    check_output_dir(outdir)  # OUTDIR or a parent is a file: one line now, not a traceback at the end
    _refuse_input_among_outputs(cfg, outdir)
    if cfg.resume:
        if not journal.exists():
            raise DeployoptError(f"--resume: {journal} does not exist; nothing to resume")
    elif not cfg.force:
        _refuse_existing(outdir)
    return outdir


def _refuse_existing(outdir: Path) -> None:
    """A plain run's OUTDIR must be new. One holding only the lock file counts as new: a run killed
    before its journal left it, and "already exists; use --resume" then met "nothing to resume"."""
    if outdir.exists() and any(p.name != LOCK_NAME for p in outdir.iterdir()):
        raise DeployoptError(f"{outdir} already exists; use --resume to continue or --force to start over")


def _refuse_input_among_outputs(cfg: OptimizeConfig, outdir: Path) -> None:
    """The input model must not be one of the files a run replaces or removes: `optimize
    out/model.onnx -o out --force` deleted the model it was optimizing and wrote the answer in its
    place (and the run could not be resumed: its model_sha256 had changed); a model at out/plan.json,
    out/journal.jsonl or in out/staircases/ was deleted the same way."""
    from deployopt.model import refuse_replacing_weights

    model = Path(cfg.model_path)
    hint = "-o/--out (or move the model out of that folder)"
    named, inside = _files_a_run_removes(outdir)
    for path in named:  # written through a link (the journal appended to, the results' names)
        refuse_input_as_output(path, [("model", model)], hint)
    for path in inside:  # removed as themselves: a link there goes, not what it points to
        if _is_entry_of(path, model):
            raise OutputError(
                f"{path} would be removed: it is the model this command reads; give another {hint}"
            )
    # the weights file an external-data model reads (out/foo.onnx beside out/model.onnx.data):
    # --force replaced it, and foo.onnx then computed garbage with the answer's weights
    refuse_replacing_weights(
        model, [*named, *(p for p in inside if not p.is_symlink())], f"give another {hint}"
    )


def _is_entry_of(entry: Path, model: Path) -> bool:
    """Whether removing `entry` (not following it) removes the model file or the name it is given by."""
    try:
        gone = os.lstat(entry)
        return os.path.samestat(gone, os.lstat(model)) or os.path.samestat(gone, os.stat(model))
    except OSError:
        return False


def _files_a_run_removes(outdir: Path) -> tuple[list[Path], list[Path]]:
    """The files in OUTDIR that --force (_clear_outdir), the results moving in (output_set) or the
    lock's release may delete: (the names they remove or write, the entries of the folders among
    them: staircases/, a staging folder, removed whole by rmtree, links in them but not what those
    point to)."""
    paths = [outdir / name for name in ("journal.jsonl", LOCK_NAME, *OUTPUTS)]
    named: list[Path] = []
    inside: list[Path] = []
    for path in [*paths, *outdir.glob(f"{STAGING_PREFIX}*")]:
        if path.is_dir() and not path.is_symlink():
            inside += [Path(root) / name for root, _, names in os.walk(path) for name in names]
        else:
            named.append(path)
    return named, inside


#: Held (flock) by the run writing an OUTDIR, removed when it ends.
LOCK_NAME = ".deployopt.lock"


def _lock_outdir(outdir: Path) -> IO[str] | None:
    """An exclusive lock on OUTDIR for this run, or a one-line error when another run holds it: two
    runs into one folder both exited 0 with their journals interleaved (a `--resume` then refused
    either setup), and a second run's --force deleted the journal of one still running. None where
    the platform has no flock (the folder is then not guarded)."""
    return hold_lock(
        outdir / LOCK_NAME,
        f"{outdir} is in use by another `deployopt optimize` run (it holds {LOCK_NAME} there); "
        "wait for it to end, or give another -o",
        LOCK_TRIES,
    )


#: how often _lock_outdir opens the lock file again when the one it locked was removed meanwhile
LOCK_TRIES = 3


def _recheck_outdir(cfg: OptimizeConfig, outdir: Path, replay: Replay) -> None:
    """Under the lock, what _check_outdir and the journal's replay saw again: another run can begin
    and end while this one loads its model and opens its backend (seconds). Two plain runs both
    exited 0, the second's results and `start` over the first's; a --resume appended its lines to
    the journal of a --force run that had started over."""
    journal = outdir / "journal.jsonl"
    if cfg.resume:
        try:  # its bytes, not a second replay of them (a long journal parsed again under the lock)
            digest = hashlib.sha256(Journal.read_bytes(journal)).hexdigest()
        except DeployoptError:  # removed, or no journal now
            digest = None
        if digest is None or digest != replay.digest:
            raise DeployoptError(
                f"--resume: {journal} changed since it was read: another run wrote to {outdir} meanwhile; "
                "run --resume again, or use --force to start over"
            )
    elif not cfg.force:
        _refuse_existing(outdir)


def _check_outdir_ours(outdir: Path, journal: Journal | None, lock: IO[str] | None) -> None:
    """A one-line error, exit 2, unless this run's journal and lock file are still the ones in
    OUTDIR: checked before the results are written (output_set would make a removed OUTDIR anew)
    and again right before they move in, so a run whose OUTDIR was removed or replaced writes
    nothing there (its results beside another run's journal, both runs exiting 0)."""
    if (journal is not None and not journal.in_place()) or not holds_lock(lock):
        raise outdir_replaced(outdir)


def _unlock_outdir(handle: IO[str] | None) -> None:
    """Remove the lock file, then release it (a run waiting on it never waits: it refuses). Only
    the file this run locked: OUTDIR removed and made again meanwhile, the name is another run's lock."""
    release_lock(handle)


def _run_every(*steps: Callable[[], object] | None) -> None:
    """Run each step (None: nothing to do) even when one before it fails or is interrupted, then
    raise the first such exception: a Ctrl-C or SIGTERM landing in one step of the cleanup skipped
    the rest, leaving the work folder in the temp dir or the backend's worker running."""
    first: BaseException | None = None
    for step in steps:
        if step is None:
            continue
        try:
            step()
        except BaseException as exc:  # re-raised below, once every step has run
            if first is None:
                first = exc
    if first is not None:
        raise first


def _clear_outdir(outdir: Path) -> None:
    """--force: remove the previous run's journal and any staging folder a killed run left, once the
    new run is known to start. Its results stay until this run's replace them as one set
    (output_set): `--force` into a release folder, interrupted or failed, had left only a new
    journal there, the shipped model.engine gone with the rest."""
    remove_outputs(outdir, ("journal.jsonl",))


def plan_json(doc: dict[str, Any]) -> str:
    """plan.json's text: indented as JSON is, but each group's kept channels on one line (a list of
    512 channels, one per line, buried the widths a user edits by hand)."""
    body = []
    for key, value in doc.items():
        if key == "keep":
            rows = [f"    {json.dumps(g)}: {json.dumps(v)}" for g, v in value.items()]
            text = "{\n" + ",\n".join(rows) + "\n  }" if rows else "{}"
        else:
            text = json.dumps(value, indent=2).replace("\n", "\n  ")
        body.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(body) + "\n}\n"


def _group_id(g: Any) -> str:
    return str(g.id if hasattr(g, "id") else g)


def _groups_said(groups: list[Any]) -> str:
    """The "N group(s) (ids, …)" of a notice or an error: the first three ids name them."""
    ids = [_group_id(g) for g in groups]
    return f"{len(ids)} group(s) ({', '.join(ids[:3])}{', …' if len(ids) > 3 else ''})"


# ------------------------------------------------------------------------------------------ main


#: journal signature keys whose values are digests: named by what they stand for, not by value
_DIGEST_KEYS = {
    "model_sha256": "the model file's contents",
    "target_sha256": "the target profile's contents",
    "calibration_sha256": "the calibration data",
    "external_data_sha256": "the model's external weights file",
}


#: what a journal signature key left out means (a journal from before the key, or a writer that
#: records it only when it is not the default): compared as that value, so a journal that records the
#: default ("traffic_term": true, written from b275dca to 2a4aae7) is the same run as one leaving it out
_ABSENT_MEANS: dict[str, Any] = {"traffic_term": True, "cudnn_benchmark": True}


def _recorded(key: str, config: dict[str, Any]) -> Any:
    """A signature's value for `key`, a key left out read as what it means (_ABSENT_MEANS)."""
    return config[key] if key in config else _ABSENT_MEANS.get(key)


def _shown(value: Any) -> str:
    """A journal signature's value in words: None (left out) is the option at its default."""
    return "the default" if value is None else json.dumps(value)


#: signature keys recorded False where a `--no-...` switch was given (else left out, or true)
_RESUME_SWITCHES = {"traffic_term": "--no-traffic-term", "cudnn_benchmark": "--no-cudnn-benchmark"}


def _resume_word(value: Any) -> str:
    """A journal value as the command line gives it: a name as its shell word (no JSON quotes)."""
    import shlex

    if value is None:
        return "the default"
    return shlex.quote(value) if isinstance(value, str) else json.dumps(value)


def _resume_flags(key: str, old: dict[str, Any], new: dict[str, Any]) -> list[str] | None:
    """`key`'s difference in terms of optimize's options (`--min-cosine was 0.5, now 0.6`), or None
    where `key` is no option's: the refusal named config keys (`trim_gate changed` for any of
    --min-cosine, --min-top1, --no-fidelity-gate; `traffic_term was the default, now false` for
    --no-traffic-term) the user could not map to what to give again."""
    was, now = old.get(key), new.get(key)
    if key == "remote" and None in (was, now):  # "--remote was the default": no board is no default
        return [
            f"--remote {_resume_word(now)} was not given before"
            if was is None
            else f"--remote {_resume_word(was)} was given before, not now"
        ]
    if key in CLI_OPTIONS:
        return [f"{CLI_OPTIONS[key]} was {_resume_word(was)}, now {_resume_word(now)}"]
    if key in _RESUME_SWITCHES:
        had = was is False
        return [
            f"{_RESUME_SWITCHES[key]}: the journal's run "
            + ("had it, this one does not" if had else "did not have it, this one does")
        ]
    if key == "trim_gate":  # recorded only where it is not the default
        was_gate, now_gate = was or DEFAULT_GATE, now or DEFAULT_GATE
        parts = []
        for name in ("min_cosine", "min_top1"):
            a, b = was_gate.get(name), now_gate.get(name)
            if a != b:
                flag = "--" + name.replace("_", "-")
                default = DEFAULT_GATE[name]
                shown = [f"the default ({default:g})" if v == default else _resume_word(v) for v in (a, b)]
                parts.append(f"{flag} was {shown[0]}, now {shown[1]}")
        if was_gate.get("enforced", True) != now_gate.get("enforced", True):
            had = was_gate.get("enforced", True) is False
            parts.append(
                "--no-fidelity-gate: the journal's run "
                + ("had it, this one does not" if had else "did not have it, this one does")
            )
        return parts
    if key == "input_shapes":
        from deployopt.errors import shorten
        from deployopt.model import input_shape_arg

        def shapes(value: Any) -> str:
            if not value:
                return "the default"
            return " ".join(input_shape_arg(n, "x".join(map(str, d))) for n, d in value.items())

        return [shorten(f"--input-shape was {shapes(was)}, now {shapes(now)}", 240)]
    if key == "calibration_sha256" and (was is None) != (now is None):
        return [
            "--calibration-data: the journal's run "
            + ("had it, this one does not" if now is None else "did not have it, this one does")
        ]
    return None


def _resume_diff(keys: list[str], old: dict[str, Any], new: dict[str, Any], cli: bool = False) -> str:
    """`target was nano, now orin-nano-8gb; mode was lossless, now trim`: what --resume refuses
    over, in words (it said `model_sha256, target differ`, internal keys without their values).
    `cli`: in optimize's options (`--min-cosine was 0.5, now 0.6`), not the config's fields."""
    parts = []
    for key in keys:
        if key == "max_trim" and "mode" in keys and None in (old.get(key), new.get(key)):
            continue  # recorded in trim mode only: "max_trim was the default, now 0.1" was no change
        if cli and key == "trim_order" and ({"calibration_sha256", "mode"} & set(keys)):
            continue  # follows from --calibration-data (or --mode), said by that key
        if cli and key == "trim_order":
            by = ("activation on --calibration-data", "filter L1")
            was_by, now_by = by[not old.get(key)], by[not new.get(key)]
            parts.append(f"trimmed channels were ranked by {was_by}, now by {now_by}")
            continue
        flags = _resume_flags(key, old, new) if cli else None
        if flags is not None:
            parts += flags
            continue
        if key in _DIGEST_KEYS:
            parts.append(f"{_DIGEST_KEYS[key]} changed")
            continue
        if key == "image_preprocess":  # field by field: the whole set was too long to show
            was_set, now_set = old.get(key) or {}, new.get(key) or {}
            parts += [
                f"image {name} was {_shown(was_set.get(name))}, now {_shown(now_set.get(name))}"
                for name in dict.fromkeys([*was_set, *now_set])
                if was_set.get(name) != now_set.get(name)
            ]
            continue
        # a key a signature leaves out, or None, is an option at its default (not given)
        was, now = (json.dumps(v) if v is not None else "the default" for v in (old.get(key), new.get(key)))
        # no option sets it: a journal of another deployopt version, or of a Python API caller
        named = f"{key} (no option sets it)" if cli and key not in _DIGEST_KEYS else key
        if len(was) + len(now) > 80:  # a long value (input shapes of many inputs): the name says enough
            parts.append(f"{named} changed")
        else:
            parts.append(f"{named} was {was}, now {now}")
    return "; ".join(parts)


def _untimed_environment(session: Any) -> dict[str, Any]:
    """What `session`'s timings will record of where they run, read before it times anything: the
    torch worker's first answer (its `ready` environment), or onnxruntime's own, which it builds
    for every timing; {} for a session that tells only as it times (a caller's)."""
    ready = getattr(getattr(session, "worker", None), "ready", None)
    if isinstance(ready, dict) and isinstance(ready.get("environment"), dict):
        return dict(ready["environment"])
    own = getattr(session, "_environment", None)
    options = getattr(session, "options", None)
    if callable(own) and options is not None:
        env = own(options.dtype)
        return dict(env) if isinstance(env, dict) else {}
    return {}


class Optimizer:
    """One optimize run. `run()` does everything; the pieces are methods so tests can poke them."""

    def __init__(
        self,
        cfg: OptimizeConfig,
        session: Any | None = None,
        layer_cache: LayerCache | None = None,
        progress: ProgressFn | None = None,
        sweep_session: Any | None = None,
        cli: bool = False,
    ) -> None:
        """`cli`: errors name `deployopt optimize`'s options (check_config), not the config's fields."""
        check_config(cfg, cli)
        self._cli = cli
        self.backend_name = resolve_backend_name(cfg.backend, cfg.remote)
        #: the dtype was left to the default: a Q/DQ model's int8 is then no choice of the caller's
        self.dtype_defaulted = cfg.dtype is None
        self.cfg = cfg = resolve_dtype(cfg, self.backend_name)
        if cfg.timing_cache or cfg.no_timing_cache:
            flag = setting_name("timing_cache" if cfg.timing_cache else "no_timing_cache", cli)
            refuse_timing_cache(self.backend_name, flag)
        self.progress = progress or (lambda *a, **k: None)
        self._external_session = session
        self._external_sweep_session = sweep_session
        self._sweep_session: Any | None = None
        self._own_sweep_session = False
        self._layer_cache = layer_cache
        self.evaluations: list[Evaluation] = []
        self._by_key: dict[str, Evaluation] = {}
        self._reserved = 0  # evaluations the search leaves for the confirmation rounds
        self.baselines: list[Evaluation] = []
        self.confirmation: dict[str, Any] | None = None  # the last confirmation: its decision is the answer
        self.confirmations: list[dict[str, Any]] = []  # every confirmation, in order (one or two)
        # why round-up-to-8, the answer, has no confirmation against the input (no round of it fitted)
        self.unconfirmed_vs_input: str | None = None
        self._pooled: dict[str, Timing] = {}  # plan key -> its confirmation rebuilds, as replicates
        # plan key -> a move label's predicted change in parts: measured conv table, fitted traffic
        self.move_parts: dict[str, dict[str, Any]] = {}
        self.measured_now = 0
        #: the results are in OUTDIR, complete (what a Ctrl-C after it leaves, in the journal's
        #: `done` line or the cleanup: nothing to resume)
        self.finished = False
        # None until run() opens it: a Ctrl-C before then (scipy's import in _check_runs takes a
        # second) was an AttributeError traceback where "run it again" belonged
        self.journal: Journal | None = None
        self._lock: IO[str] | None = None  # OUTDIR's lock file, held from its creation to the end
        self.sweep = SweepResult()
        self.sweep_shapes = 0
        self._sweep_runs_refusal: str | None = None  # _resume_keys
        self._patch_changes: list[str] = []  # _check_resume: said by _check_resumed_session
        # samples per conv of the journal's per-layer values, from the layer-cache entries holding them
        # (None: not all are held), and how many of those values no entry holds
        self._entry_counts: list[int] | None = None
        self._entries_missing = 0
        self._entry_counts_read = False
        self._refused: dict[str, dict[str, Any]] = {}
        self._refused_floor: dict[str, int] = {}  # group -> highest single-group trim refused
        self._refuted: set[tuple[str, int]] = set()  # single-group moves measured and not faster
        self.table: TableCost | None = None  # what the search minimises: convs, plus traffic once fitted
        self.conv_table: TableCost | None = None  # the per-layer table alone (an evaluation's table_us)
        self.traffic_fit: SlopeFit = NOT_FITTED
        self.traffic_fits: list[dict[str, Any]] = []  # every change of the fit, in order (report.json)

    # -------------------------------------------------------------- loading and analysis
    def _load(self) -> None:
        from deployopt.backends.ort import prepare_model
        from deployopt.coupling import analyze
        from deployopt.targets import get_target

        cfg = self.cfg
        self.target = get_target(cfg.target, sms=cfg.sms)
        if self.dtype_defaulted and cfg.dtype == "int8":
            # the target's refusal said "--dtype int8: ... use --dtype fp16" of a dtype never given
            from deployopt.backends.base import refuse_int8_the_target_lacks

            fp16 = setting("dtype", "fp16", self._cli)
            refuse_int8_the_target_lacks(
                Path(cfg.model_path),
                self.target,
                f"optimize the float model it was quantized from ({fp16} predicts fp16 widths for this one's "
                "convs)",
            )
        if cfg.dtype:  # measured backends too: an INT8 engine on a GPU without INT8 is a slow engine
            self.target.check_dtype(cfg.dtype)
        # the hashes the journal records (--resume's check) are of the bytes loaded: hashed before
        # the load and again after it, the model refused where they differ. Hashed once after it, a
        # model re-exported in place meanwhile had its hash recorded for a run of the old file, and a
        # --resume with the new one replayed the old one's timings (bug bash)
        before = self._file_digests(None)
        try:
            self.loaded = prepare_model(cfg.model_path, cfg.batch, cfg.input_shapes)
        except StaticDimsError as exc:
            if self._cli:
                raise
            # a library caller wrote input_shapes, not --input-shape
            from deployopt.model import static_dims_message

            said = static_dims_message(exc.name, exc.have, exc.want, "input_shapes")
            raise StaticDimsError(said, exc.name, exc.have, exc.want) from None
        self._digests = self._file_digests(bool(getattr(self.loaded, "external_data", False)))
        if "external_data_sha256" not in before:  # an .onnx too large to look into before the load
            before = {**before, **{k: v for k, v in self._digests.items() if k == "external_data_sha256"}}
        if before != self._digests:
            raise DeployoptError(
                f"{cfg.model_path}: the model changed while it was being read (written again meanwhile?); "
                "run again once it is written"
            )
        self.model = self.loaded.model
        if cfg.top1_outputs is not None:  # a name the model has no output of: before any measurement
            from deployopt.fidelity import check_top1_outputs

            check_top1_outputs(cfg.top1_outputs, [o.name for o in self.model.graph.output])
        if cfg.fidelity:  # every sample is held at once: the random ones, or as many as the data gives
            from deployopt.fidelity import samples_held
            from deployopt.memory import require_fidelity_memory

            shapes = dict(self.loaded.input_shapes)
            require_fidelity_memory(
                self.model, None, samples_held(cfg.calibration_data, shapes, cfg.fidelity_samples)
            )
        self.analysis = analyze(self.model)
        # first: a model whose one conv takes its weights as an input has nothing free and nothing
        # priced, and the wave model's line below read "its 0 conv(s) () are not" 2-D
        free = list(self.analysis.free_groups())
        if not free:
            from deployopt.coupling import foreign_ops_note

            why = foreign_ops_note(self.model)
            raise DeployoptError(
                f"{cfg.model_path}: no channel group is free to change; nothing to optimize"
                + (f"; {why}" if why else "")
            )
        if self.backend_name == "model" and not self.analysis.convs:  # every plan predicted alike
            unpriced = self.analysis.unpriced_convs()
            raise DeployoptError(
                f"{cfg.model_path}: the wave model prices 2-D forward convs only, and its "
                f"{len(unpriced)} conv(s) ({', '.join(unpriced[:3])}{', …' if len(unpriced) > 3 else ''}) "
                "are not; measure "
                "instead (--backend torch, ort, tensorrt or trtexec)"
            )
        free, self.unpriced_notice = self._priced_only(free)
        self.groups = {_group_id(g): g for g in free}
        self.original = {gid: int(g.width) for gid, g in self.groups.items()}
        # a grouped conv's group: its width is per conv group, and the GPU sees repeat × width
        # channels; round-up-to-8 and the candidate steps align that total (search.group_align)
        self.repeat = {gid: int(getattr(g, "repeat", 1) or 1) for gid, g in self.groups.items()}
        self.align = {gid: group_align(r) for gid, r in self.repeat.items()}
        self.round_up = {gid: ceil_to(w, self.align[gid]) for gid, w in self.original.items()}
        self.dead = self._dead_channels()
        self._predict = self._wave_predictor()
        self.traffic: Traffic = traffic(self.analysis, cfg.dtype or "fp32")
        if cfg.fidelity:
            from deployopt.fidelity import ReferenceRun, check_feedable, check_reference_finite

            # a calibration set that does not fit the model fails here, before any timing; the
            # reference's session and outputs are kept for every comparison (fidelity_of)
            check_feedable(self._calibration(), self.loaded.model)
            self._reference = ReferenceRun(self.model)
            check_reference_finite(self._reference, self._calibration())

    def _priced_only(self, free: list[Any]) -> tuple[list[Any], str]:
        """The free groups the search may resize, and a notice of what the prediction leaves out.
        With --backend model a free group no priced conv reads or writes is kept at its width:
        every width of it is predicted alike, and the tie rule ("round-up-to-8 wins ties") padded
        it for "+0.0 %". Two kinds: a group whose every conv the wave model cannot shape
        (unpriced_reasons: an input size unknown after an If, channels untraced after a Loop,
        Conv1d; 13 → 16 "because rounding up was the fastest found"), and one no conv touches at
        all, whose width only MatMul/Gemm weights set (ConvNeXt's MLP 100 → 104, MobileNetV3's
        classifier 1020 → 1024; this check once ran only when some conv was unpriced). Measured,
        the end-to-end timings include them all."""
        unpriced = self.analysis.unpriced_reasons()
        by_why = {why: [n for n, w in unpriced if w == why] for why in dict.fromkeys(w for _, w in unpriced)}
        said = "; ".join(
            f"{why}: {', '.join(names[:3])}{', …' if len(names) > 3 else ''}" for why, names in by_why.items()
        )
        convs = f"{len(unpriced)} conv(s) the wave model cannot shape ({said})"
        if self.backend_name != "model":
            if not unpriced:
                return free, ""
            return free, f"the per-layer table leaves out {convs}; the end-to-end timings include them"
        touched: set[str] = set()
        for conv in self.analysis.convs:
            outs = [g for g, _ in getattr(conv, "out_groups", None) or []] or [conv.out_group]
            touched.update(str(g) for g in [*outs, *(g for g, _ in conv.in_groups)] if g is not None)
        kept = [g for g in free if str(_group_id(g)) not in touched]
        if not kept:
            return free, f"the prediction leaves out {convs}" if unpriced else ""
        # a kept group an unpriced conv writes or reads, or else one only MatMul/Gemm weights size
        # (the coupling rules let no other op set a channel count)
        names = {n for n, _ in unpriced}
        reads = [bool(names & {*getattr(g, "producers", ()), *getattr(g, "consumers", ())}) for g in kept]
        of_unpriced = [g for g, r in zip(kept, reads) if r]
        outside = [g for g, r in zip(kept, reads) if not r]
        measure = "(--backend torch, ort, tensorrt or trtexec)"
        if len(kept) == len(free):
            why = [f"none of the convs of its {_groups_said(of_unpriced)}: {convs}"] if of_unpriced else []
            if outside:
                why.append(f"convs only, and its {_groups_said(outside)} are read only by MatMul/Gemm")
            raise DeployoptError(
                f"{self.cfg.model_path}: the wave model prices {'; and '.join(why)}; "
                f"measure instead {measure}"
            )
        notices = []
        if of_unpriced:
            notices.append(
                f"kept {_groups_said(of_unpriced)} at the input's widths: the wave model prices none of "
                f"their convs, {convs}"
            )
        elif unpriced:
            notices.append(f"the prediction leaves out {convs}")
        if outside:
            notices.append(
                f"the wave model prices convs only; {_groups_said(outside)} read only by MatMul/Gemm kept at "
                "the input's widths"
            )
        priced = [g for g in free if str(_group_id(g)) in touched]
        return priced, f"{'; '.join(notices)}; measure {measure} to size them"

    def _dead_channels(self) -> dict[str, int]:
        if self.cfg.mode == "grow":
            return dict.fromkeys(self.groups, 0)
        from deployopt.importance import dead_channels_many

        dead = dead_channels_many(self.model, self.analysis, list(self.groups))
        return {gid: len(dead[gid]) for gid in self.groups}

    def _wave_predictor(self) -> Callable[[ConvShape], float] | None:
        try:
            from deployopt.waves import predict
        except ImportError as exc:
            reraise_interrupt(exc)  # interrupted, not missing
            return None
        target, dtype = self.target, self.cfg.dtype

        def run(shape: ConvShape) -> float:
            return float(predict(shape, target, dtype).predicted_us)

        return run

    def conv_shapes(self, widths: dict[str, int], only: Iterable[str] | None = None) -> dict[str, ConvShape]:
        # unchecked: the search's plans are free groups' candidate widths (a check per plan in the hot loops)
        return self.analysis.conv_shapes_unchecked({**self.original, **widths}, only)

    def conv_shape(self, name: str, widths: dict[str, int]) -> ConvShape:
        return self.analysis.conv_shape_unchecked(name, {**self.original, **widths})

    def _conv_deps(self) -> dict[str, tuple[str, ...]]:
        deps = {}
        for conv in self.analysis.convs:
            # Output: one group, or several segments when a Split cuts the conv's output channels.
            outs = [g for g, _ in getattr(conv, "out_groups", None) or []] or [conv.out_group]
            ids = [*outs, *(g for g, _ in conv.in_groups)]
            deps[conv.name] = tuple(
                dict.fromkeys(str(g) for g in ids if g is not None and str(g) in self.groups)
            )
        return deps

    # -------------------------------------------------------------- candidates
    def _candidates(self) -> dict[str, list[int]]:
        cfg = self.cfg
        deps = self._conv_deps()
        touching = {gid: [c for c, d in deps.items() if gid in d] for gid in self.groups}
        out = {}
        for gid, width in self.original.items():
            score = None
            extra: list[int] = []
            if self._predict is not None and touching[gid]:
                cache: dict[int, float] = {}

                def score(w: int, gid: str = gid, cache: dict[int, float] = cache) -> float:
                    if w not in cache:
                        shapes = self.conv_shapes({**self.round_up, gid: w}, touching[gid])
                        cache[w] = sum(self._predict(s) for s in shapes.values())  # type: ignore[misc]
                    return cache[w]

                extra = self._wave_aligned(gid, score)
            out[gid] = candidate_widths(
                width,
                self.dead[gid],
                cfg.mode,
                cfg.max_trim,
                align=self.align[gid],
                extra=extra,
                score=score,
                max_candidates=cfg.max_candidates,
                repeat=self.repeat[gid],
            )
        return out

    def _wave_aligned(self, gid: str, score: Callable[[int], float]) -> list[int]:
        """Widths that end a predicted step: one step more (8 channels; for a grouped conv's group
        the per-conv-group step that adds a multiple of 8 channels) would cost more."""
        from deployopt.search import width_range

        step, repeat = self.align[gid], self.repeat[gid]
        lo, hi = width_range(self.original[gid], self.dead[gid], self.cfg.mode, self.cfg.max_trim, repeat)
        ws = list(range(ceil_to(lo, step), hi + 1, step))
        return [w for w in ws if score(w + step) > score(w) * (1 + 1e-6)]

    # -------------------------------------------------------------- per-layer tables
    def _build_table(self, domains: dict[str, list[int]], replay: Replay, journal: Journal) -> TableCost:
        deps = self._conv_deps()
        combos: dict[str, list[tuple[tuple[int, ...], ConvShape]]] = {}
        separable: dict[str, bool] = {}
        wide: dict[str, list[tuple[tuple[int, ...], ConvShape]]] = {}  # exact, beyond MAX_TABLE_COMBOS
        for conv_name, scope in deps.items():
            if not scope:
                separable[conv_name] = False
                continue
            rows = self._exact_rows(conv_name, scope, domains)
            if rows is not None and math.prod(len(domains[g]) for g in scope) > MAX_TABLE_COMBOS:
                wide[conv_name], rows = rows, None  # exact only within the budget below
            separable[conv_name] = rows is None
            if rows is None:  # Σ of one-group-at-a-time changes, each priced at round-up-to-8 elsewhere
                rows = []
                for g in scope:
                    for w in domains[g]:
                        assign = tuple(w if x == g else self.round_up[x] for x in scope)
                        rows.append((assign, self.conv_shape(conv_name, dict(zip(scope, assign)))))
            combos[conv_name] = rows
        self._exact_within_budget(wide, combos, separable)
        shapes = [s for rows in combos.values() for _, s in rows]
        self.sweep_shapes = len({s.signature() for s in shapes})
        cache = self._get_layer_cache()
        self.progress("sweep", done=0, total=self.sweep_shapes)
        result = cache.fill(
            self._measure_convs,
            shapes,
            known=replay.layer_values,
            on_progress=lambda done, total: self.progress("sweep", done=done, total=total),
        )
        self.sweep = result
        self.layer_values = result.values
        span = self.sweep_samples_span()
        journal.write(
            "sweep",
            shapes=self.sweep_shapes,
            measured=result.measured,
            cached=result.cached,
            seconds=result.seconds,
            fingerprint=cache.fingerprint,
            values=result.values,
            # the samples per conv asked for and those of the values: a resume compares the one and
            # its report says the other (before, neither was recorded at the default, see
            # _journal_sweep_runs); a prediction has none
            **({"samples_per_conv": list(span)} if span else {}),
            **({"sweep_runs": asked} if span and (asked := self._sweep_samples()) else {}),
        )
        factors = []
        for conv_name, rows in combos.items():
            scope = deps[conv_name]
            if not separable[conv_name]:
                values = {assign: result.values[s.signature()] for assign, s in rows}
                factors.append(Factor(conv_name, scope, values))
                continue
            base_assign = tuple(self.round_up[x] for x in scope)
            part = {assign: result.values[s.signature()] for assign, s in rows}
            base = part[base_assign]
            for g in scope:  # Σ of one-at-a-time changes: exact when the conv's cost is separable
                vals = {
                    (w,): part[tuple(w if x == g else self.round_up[x] for x in scope)] - base
                    for w in domains[g]
                }
                factors.append(Factor(f"{conv_name}[{g}]", (g,), vals))
            factors.append(Factor(f"{conv_name}[base]", (), {(): base}))
        self.deps = deps
        self._conv_factors = factors
        return TableCost(domains, factors, default=self.round_up)

    def _exact_rows(
        self, conv_name: str, scope: tuple[str, ...], domains: dict[str, list[int]]
    ) -> list[tuple[tuple[int, ...], ConvShape]] | None:
        """Every assignment of the conv's groups with its shape, where the exact table stays within
        MAX_TABLE_COMBOS distinct shapes (and MAX_TABLE_ASSIGNMENTS assignments); None: separable.
        Counting assignments instead, a conv reading a concat of just two free groups (Inception,
        GhostNet, C2f) was taken as separable, though it sees only their sum: its misalignment
        penalty, charged per part, missed plans 13 % faster that move both parts."""
        n = math.prod(len(domains[g]) for g in scope)
        if n > MAX_TABLE_ASSIGNMENTS:
            return None
        rows = [
            (assign, self.conv_shape(conv_name, dict(zip(scope, assign))))
            for assign in itertools.product(*(domains[g] for g in scope))
        ]
        if n > MAX_TABLE_COMBOS and len({s.signature() for _, s in rows}) > MAX_TABLE_COMBOS:
            return None
        return rows

    def _exact_within_budget(
        self,
        wide: dict[str, list[tuple[tuple[int, ...], ConvShape]]],
        combos: dict[str, list[tuple[tuple[int, ...], ConvShape]]],
        separable: dict[str, bool],
    ) -> None:
        """Make the `wide` convs' tables exact (a conv reading a concat: every assignment of its
        groups, priced by the sum of the parts), those that add the fewest shapes first, within
        EXACT_TABLE_BUDGET of the separable sweep on a measured backend (each shape one timed conv:
        an engine build on a board); all of them where the wave model prices them, for nothing."""
        seen = {s.signature() for rows in combos.values() for _, s in rows}
        budget = EXACT_TABLE_BUDGET * len(seen) if self._measures() else math.inf
        for name, rows in sorted(wide.items(), key=lambda kv: len({s.signature() for _, s in kv[1]})):
            extra = {s.signature() for _, s in rows} - seen
            if len(extra) > budget:
                continue
            budget -= len(extra)
            seen |= extra
            combos[name], separable[name] = rows, False

    def separable_table_us(self, conv_name: str, plan: dict[str, int]) -> float | None:
        """A conv's value in the per-layer table under `plan` where its table is taken as separable
        (a wide concat: base + Σ one-at-a-time changes, never one timed shape), as an evaluation's
        table_us counts it; None where the conv has no such table or `plan` leaves its domains."""
        scope = getattr(self, "deps", {}).get(conv_name, ())
        names = {f"{conv_name}[base]", *(f"{conv_name}[{g}]" for g in scope)}
        parts = [f for f in getattr(self, "_conv_factors", []) if f.name in names]
        keys = [tuple(plan.get(g) for g in f.scope) for f in parts]
        if not parts or any(key not in f.values for f, key in zip(parts, keys)):
            return None
        return float(sum(f.values[key] for f, key in zip(parts, keys)))

    # -------------------------------------------------------------- memory traffic (traffic.py)
    def _measures(self) -> bool:
        """Whether the session measures (a device) or predicts (the wave model): what traffic fits,
        confirmation rounds and the budget for exact concat tables are for."""
        return bool(getattr(self.session.backend, "measured", True)) and not hasattr(
            self.session, "predict_shapes"
        )

    def _fits_traffic(self) -> bool:
        """Fitted on measured end-to-end latencies only: a prediction has no traffic to find."""
        return self.cfg.traffic_term and self._measures()

    def _refit_traffic(self) -> bool:
        """Fit µs per MB of non-conv traffic to measured − table of every plan measured so far, and
        price it in the search's table. True when that changed the table (the solver's plans with it)."""
        if self.conv_table is None or not self._fits_traffic():
            return False
        seen: set[str] = set()
        xs, ys = [], []
        for ev in self.evaluations:
            key = plan_key(ev.plan)
            if ev.table_us is None or key in seen:
                continue
            seen.add(key)
            xs.append(self.traffic.bytes(ev.plan))
            ys.append(ev.timing.median_us - ev.table_us)
        fit = fit_slope(xs, ys, reference=[self.traffic.bytes(ev.plan) for ev in self.baselines])
        old = self.traffic_fit.us_per_mb
        self.traffic_fit = fit
        changed = (fit.us_per_mb > 0) != (old > 0) or abs(fit.us_per_mb - old) > 0.1 * max(old, 1e-9)
        if not changed:
            return False
        self.traffic_fits.append({"after_evaluation": len(self.evaluations), **fit.to_json()})
        self.table = self._priced_table()
        self.progress("traffic", fit=fit)
        return True

    def _priced_table(self) -> TableCost:
        """The per-layer table plus, per free group, its non-conv traffic at the fitted slope."""
        assert self.conv_table is not None
        per_byte = self.traffic_fit.us_per_mb / MB
        if per_byte <= 0:
            return self.conv_table
        extra = [
            Factor(f"traffic[{g}]", (g,), {(w,): per_byte * self.traffic.group_bytes(g, w) for w in dom})
            for g, dom in self.conv_table.domains.items()
            if self.traffic.per_channel.get(g)
        ]
        return TableCost(self.conv_table.domains, [*self._conv_factors, *extra], default=self.round_up)

    def _measure_convs(self, shapes: list[ConvShape]) -> list[Any]:
        """Per-layer timings, from a session with `sweep_runs` samples per conv (opened on first
        use, only if something is not cached): a staircase point needs far fewer samples than an
        end-to-end comparison, and the sweep is most of the device time."""
        if self._sweep_session is None:
            cfg = self.cfg
            if self._external_sweep_session is not None:
                self._sweep_session = self._external_sweep_session
            elif (
                self._external_session is not None  # the caller's session: we cannot open its twin
                or not self.session.backend.measured
                or (cfg.sweep_runs in (None, cfg.runs) and not self._engine_calibration())
            ):
                self._sweep_session = self.session
            else:
                runs = cfg.sweep_runs or cfg.runs
                self._sweep_session = self._open_session(
                    runs=runs, warmup=self._sweep_warmup(), calibrate=False, owns_run=False
                )
                self._own_sweep_session = True
        return self._sweep_session.measure_convs(shapes)

    @property
    def layer_cache(self) -> LayerCache | None:
        """The per-layer table this run used; pass it to the next run on the same session to share it."""
        return self._layer_cache

    def _get_layer_cache(self) -> LayerCache:
        if self._layer_cache is not None:
            return self._layer_cache
        env = self._session_environment()
        fp = device_fingerprint(self.backend_name, env, self.cfg.sms)
        self._layer_cache = LayerCache(
            fp,
            self.cfg.dtype,
            root=self.cfg.cache_root,
            persist=bool(self.session.backend.measured),
            min_runs=self._sweep_samples(),
            # the layer cache times again an entry that had fewer; trtexec warms up by time, its
            # entries recording the queries that took: not held to a count
            min_warmup=0 if self.backend_name == "trtexec" else self._sweep_warmup(),
        )
        if not any(not ev.replayed for ev in self.evaluations):
            # a resumed run that has timed nothing yet: the journal's environment, as the backend of
            # the run that wrote it reported it, may name another folder than this device's today
            # (an older run reported fewer facts, a patch release passes): read, never written; what
            # it times goes where its first conv's timing says (LayerCache.hold), and again under an
            # end-to-end timing of its own's (_settle_layer_cache)
            self._layer_cache.hold(self._timing_fingerprint)
        return self._layer_cache

    def _timing_fingerprint(self, timing: Timing) -> str:
        """The layer cache's folder for what `timing` (one this run measured) says of the device."""
        return device_fingerprint(self.backend_name, self._fingerprint_environment(timing), self.cfg.sms)

    def _settle_layer_cache(self, timing: Timing | None = None) -> None:
        """Write a held layer cache's entries again under the fingerprint `timing` (one this run
        measured end to end) gives, which a fresh run on this device looks up. Without one (a resumed
        run that timed nothing end to end) they stay where its sweep's first conv put them."""
        cache = self._layer_cache
        if cache is not None and cache.holding:
            cache.settle(self._timing_fingerprint(timing) if timing is not None else None)

    def sweep_samples_span(self) -> tuple[int, int] | None:
        """Fewest and most samples per conv of the table's values: those timed or read from the
        cache, and those replayed from the journal (as it records them); None for a prediction."""
        if not self._measures():
            return None
        counts = list(self.sweep.samples)
        if self.sweep.known:
            span = self._journal_sweep_span(self.replay.config or {})
            counts += list(span) if span else [n for n in [self._sweep_samples()] if n]  # (resumed at it)
        return (min(counts), max(counts)) if counts else None

    def _sweep_samples(self) -> int:
        """Samples per conv the per-layer sweep times (`_measure_convs`'s session): a caller's
        session times its own count, ours `--sweep-runs` (or `--runs`)."""
        for given in (self._external_sweep_session, self._external_session):
            if given is not None:
                return int(getattr(getattr(given, "options", None), "runs", 0) or 0)
        return self.cfg.sweep_runs or self.cfg.runs

    def _sweep_warmup(self) -> int:
        """Warm-up runs per conv the per-layer sweep asks for (`_measure_convs`'s session): a caller's
        session its own; ours --warmup, at most 3 where --sweep-runs differs from --runs."""
        for given in (self._external_sweep_session, self._external_session):
            if given is not None:
                return int(getattr(getattr(given, "options", None), "warmup", 0) or 0)
        cfg = self.cfg
        return cfg.warmup if (cfg.sweep_runs or cfg.runs) == cfg.runs else min(cfg.warmup, 3)

    def _session_environment(self) -> dict[str, Any]:
        """What the backend said about itself when it timed the first evaluation this run measured,
        else the first one the journal replays (a resumed run's table is then held, _get_layer_cache)."""
        fresh = [ev for ev in self.evaluations if not ev.replayed] or self.evaluations
        return self._fingerprint_environment(fresh[0].timing) if fresh else {}

    @staticmethod
    def _fingerprint_environment(timing: Timing) -> dict[str, Any]:
        """The environment the layer cache's fingerprint is made of. Not the target's name: only
        the wave model reads it, and it says so in its own environment; measured backends time the
        same convs on the same device for any --target (`-t t4` and `-t a100` on one CPU each timed
        every conv into a table of their own). An SM limit (--sms) is in the fingerprint anyway."""
        return dict(timing.environment)

    # -------------------------------------------------------------- end-to-end evaluation
    def evaluate(self, plan: dict[str, int], label: str, repeat: int = 0) -> Evaluation:
        """Latency of `plan` end to end: from the journal if it was measured before, else measured.

        `repeat` > 0 measures the same plan again, on a freshly built model (confirmation rounds)."""
        key = plan_key(plan, repeat)
        if key in self._by_key:
            return self._by_key[key]
        replayed = key in self.replay.timings
        reserved = self._reserved if self.baselines else 0  # the baselines are always measured
        if not replayed and len(self.evaluations) >= self.cfg.max_evals - reserved:
            raise _Budget
        if replayed:
            timing = self.replay.timings[key]
        elif hasattr(self.session, "predict_shapes"):  # the wave model: same number, no model built
            shapes = self.conv_shapes(plan)
            timing = self.session.predict_shapes(
                list(shapes.values()), len(self.model.graph.node) - len(shapes)
            )
            self.measured_now += 1
        else:
            path = self.workdir / f"candidate{len(self.evaluations) + 1}.onnx"
            self._write_candidate(plan, path)
            timing = self.session.measure(path)
            path.unlink(missing_ok=True)
            self.measured_now += 1
            self._warn_if_elsewhere(timing)
            self._settle_layer_cache(timing)  # a resumed run's first timing: this device's table
        table = self.conv_table
        table_us = table.cost(plan) if table is not None and self._in_domains(plan) else None
        ev = Evaluation(len(self.evaluations) + 1, label, dict(plan), timing, table_us, replayed)
        if not replayed:
            extra = {"repeat": repeat} if repeat else {}
            self.journal.write(
                "measured",
                index=ev.index,
                label=label,
                plan=plan,
                table_us=table_us,
                timing=timing.to_json(),
                **extra,
            )
        self.evaluations.append(ev)
        self._by_key[key] = ev
        self._refit_traffic()  # every new measurement is a point of the fit, whichever step asked for it
        self.progress(
            "eval", done=len(self.evaluations), total=self.cfg.max_evals, label=label, timing=timing
        )
        return ev

    def _in_domains(self, plan: dict[str, int]) -> bool:
        return all(plan[g] in self.table.domains[g] for g in self.table.domains)

    def build_model(self, plan: dict[str, int]) -> Any:
        if plan == self.original:
            return self.model
        from deployopt.surgery import apply_plan_report

        model, changes = apply_plan_report(self.model, dict(plan), self.analysis, self._importance_for(plan))
        # the channels each trim kept, for plan.json: ranking them again costs the dead-channel run
        self._kept = (plan_key(plan), {c.id: list(c.kept) for c in changes if c.kept is not None})
        return model

    def _importance_for(self, plan: dict[str, int]) -> dict[str, Any] | None:
        """The channel ranking `plan`'s trims go by; a plan that trims nothing (the round-up, every
        padding) needs none, and no model run is spent on it."""
        trims = any(plan[g] < self.original[g] for g in plan)
        return self._trim_importance() if trims else None

    def plan_document(self, plan: dict[str, int]) -> dict[str, Any]:
        """plan.json: the widths, each group's width in the input model (`original`: `apply` refuses
        the plan for a model where one differs, as in the same model saved in another node order,
        whose unnamed convs' `<op>_<index>` ids name other convs), each group's fingerprint there
        (`fingerprint`, surgery.group_fingerprints: projections of its producers' weights, which catch
        two such convs of equal width swapped), and for each trimmed group the channels it keeps
        (`keep`), so that `deployopt apply --plan` rebuilds the very model.onnx written, with no
        data and no ranking."""
        from deployopt.surgery import group_fingerprints, kept_channels

        doc: dict[str, Any] = {"widths": {g: int(w) for g, w in sorted(plan.items())}}
        doc["original"] = {g: int(self.original[g]) for g in sorted(plan) if g in self.original}
        if getattr(self, "_fingerprints", None) is None:  # the input's weights, read once per run
            self._fingerprints = group_fingerprints(self.model, self.analysis, list(self.original))
        doc["fingerprint"] = {g: self._fingerprints[g] for g in sorted(plan) if g in self._fingerprints}
        built = getattr(self, "_kept", None)  # the last plan build_model built, and what it kept
        if plan == self.original:
            keep = {}
        elif built is not None and built[0] == plan_key(plan):
            keep = dict(sorted(built[1].items()))
        else:
            keep = kept_channels(self.model, dict(plan), self.analysis, self._importance_for(plan))
        if keep:
            doc["keep"] = keep
        return doc

    def _trim_importance(self) -> dict[str, Any] | None:
        """`--mode trim` with --calibration-data: every free group's channels ranked once on that data
        (mean |activation| × reader weight norm, deployopt.importance), so trimmed plans drop what
        the data shows matters least; None otherwise (filter L1: random inputs are not data, and
        data of one sample is the gate's alone, fidelity.load_trim_samples)."""
        if self.cfg.mode != "trim" or not self.cfg.calibration_data:
            return None
        if getattr(self, "_importance", None) is None:
            from deployopt.importance import activation_importance

            samples, _ = self._ranking_samples()
            if not samples:
                return None
            self._importance = activation_importance(self.model, self.analysis, list(self.groups), samples)
        return self._importance

    def _trim_samples(self) -> Any:
        """`--mode trim` with data: the gate's samples and the ranking's, spread over the data and
        never the same sample (fidelity.load_trim_samples), loaded once."""
        if getattr(self, "_trim_set", None) is None:
            from deployopt.fidelity import load_trim_samples

            self._trim_set = load_trim_samples(
                self.cfg.calibration_data,
                dict(self.loaded.input_shapes),
                self.cfg.preprocess,
                gate=self.cfg.fidelity_samples,
            )
        return self._trim_set

    def _ranking_samples(self) -> tuple[list[dict[str, Any]], str]:
        """The samples trims are ranked on, none of them the fidelity gate's (ranked and gated on the
        same 4 MobileNetV2 images, trims kept ≥ 0.993 cosine there and 0.973–0.992 on the other 16),
        and report.json's trim_order, which says how and on which; none where the data holds one
        sample (ranked by filter L1, said so)."""
        if getattr(self, "_rank_set", None) is not None:
            return self._rank_set
        from deployopt.fidelity import check_feedable

        split = self._trim_samples()
        if split.ranking is not None:
            # as the gate's at load: an integer input's other samples (another file) may hold floats,
            # which the ranking would cast to noise without a word
            check_feedable(split.ranking, self.loaded.model)
        self._rank_notices = [] if split.ranking is None else split.ranking.notices
        ranked = [] if split.ranking is None else split.ranking.samples
        self._rank_set = (ranked, split.ranked_on())  # loaded once: the resume check hashes them too
        return self._rank_set

    def calibration_notices(self) -> list[str]:
        """What loading --calibration-data said (images left out past the last full batch, a batch
        filled by repeating), for the gate's samples and the ranking's, each once; [] without data."""
        if not self.cfg.calibration_data:
            return []
        notes = [*self._calibration().notices, *getattr(self, "_rank_notices", [])]  # loaded at start
        return list(dict.fromkeys(notes))

    def _image_preprocess(self) -> dict[str, Any] | None:
        """How the calibration images became tensors (fidelity checks, trim ranking, INT8
        calibration), for the report; None when no images were read (random inputs, arrays)."""
        if not self.cfg.calibration_data:
            return None
        if self.cfg.fidelity:
            pre = self._calibration().preprocess  # None for .npy/.npz, fed as they are
            return None if pre is None else pre.to_json()
        from deployopt.backends.trtexec import is_calibration_table
        from deployopt.fidelity import holds_arrays

        data = self.cfg.calibration_data
        return None if is_calibration_table(data) or holds_arrays(data) else self.cfg.preprocess.to_json()

    def _data_signature(self) -> dict[str, str]:
        """`--mode trim` with --calibration-data: a sha256 of the samples the gate checks and the trims
        are ranked on, for the resume check. The journal's fidelity reports and the channels each
        trimmed model keeps come from them; the path alone would not see another file there."""
        if self.cfg.mode != "trim" or not self.cfg.calibration_data:
            return {}
        import hashlib

        import numpy as np

        digest = hashlib.sha256()
        for sample in [*self._calibration().samples, *self._ranking_samples()[0]]:
            for name in sorted(sample):
                arr = np.ascontiguousarray(sample[name])
                digest.update(f"{name}:{arr.dtype.str}:{arr.shape}".encode())
                digest.update(arr.tobytes())
        return {"calibration_sha256": digest.hexdigest()}

    #: an .onnx of at most this many bytes is looked into for external weights before it is loaded
    #: (_file_digests): its weights files are hashed before and after the load, as the .onnx is. A
    #: larger one holds (most of) its weights itself, and parsing it once more costs a load
    _PEEK_BYTES = 64 << 20

    def _file_digests(self, external: bool | None) -> dict[str, str]:
        """The sha256 of the model file (`model_sha256`) and of its external weights files
        (`external_data_sha256`, where `external`; None: where it has some and is at most
        _PEEK_BYTES), as they are now; {} for a pipe (its bytes come once, to loading) or a file
        that cannot be read (the load says why)."""
        from deployopt.model import external_data_sha256

        path = Path(self.cfg.model_path)
        try:
            if not path.is_file():
                return {}
            out = {"model_sha256": file_sha256(path)}
            if external is None:
                external = path.stat().st_size <= self._PEEK_BYTES
        except OSError:  # a file that cannot be read: the load says why, in its own words
            return {}
        try:
            digest = external_data_sha256(path) if external else None
        except DeployoptError:  # not a model: the load refuses it in its own words
            digest = None
        return {**out, "external_data_sha256": digest} if digest else out

    def _weights_signature(self) -> dict[str, str]:
        """A model whose weights are in an external file: a sha256 of that file, for the resume check
        (model_sha256 hashes the .onnx, which stays the same when only the weights are replaced), of
        the bytes loaded: `_load` hashed them (`_file_digests`, only where the model has such a file
        and is a file, not a pipe)."""
        return {k: v for k, v in self._digests.items() if k == "external_data_sha256"}

    def _check_resume(self, journal_path: Path, old: dict[str, Any], config: dict[str, Any]) -> None:
        """Refuse a journal written by another run, saying what differs. Values are compared as
        each run resolved them, not by presence: a key missing from an older journal counts as None
        (options added since default to None) or as _ABSENT_MEANS says; the sweep's and the fidelity
        checks' sample counts as the journal's events (or the layer cache) show them where its
        config leaves them out."""
        keys, was, now = self._resume_keys(old, config)
        if keys:
            raise DeployoptError(
                f"--resume: {journal_path} was written by a different run "
                f"({_resume_diff(keys, was, now, self._cli)}); "
                "use --force to start over"
            )
        if self._sweep_runs_refusal:
            raise DeployoptError(f"--resume: {journal_path} {self._sweep_runs_refusal}")
        # the journal's timings must have been taken on this machine as it is now, or a resume pools
        # two setups' (journal.measured_elsewhere); with --remote they are the board's, which `remote`
        # in the config stands for. A patch release between is said once the session is open
        # (_check_resumed_session), after every refusal that needs none
        if self.cfg.remote:
            return
        from deployopt.environment import host_facts
        from deployopt.journal import measured_elsewhere, patch_level_changes

        here = host_facts()
        elsewhere = measured_elsewhere(self.replay, here)
        if elsewhere:
            raise DeployoptError(f"--resume: {journal_path} {elsewhere}")
        self._patch_changes = patch_level_changes(self.replay, here)

    def _check_resumed_session(self, journal_path: Path) -> None:
        """Before anything is timed: refuse a resumed run whose session measures at another thread
        count than the journal's timings (journal.threads_refusal: it came at the first fresh
        end-to-end timing, after the resumed sweep had timed every conv at the new count), and say
        in one warning line each what the resume cannot check (timings that recorded no thread or
        core count) or lets pass (a patch release). Not with --remote: the timings are the board's."""
        import warnings

        from deployopt.errors import DeployoptWarning
        from deployopt.journal import recorded_threads, threads_refusal, unchecked_facts

        if not self.cfg.resume or self.cfg.remote:
            return
        env = _untimed_environment(self.session) if self._measures() else {}
        refusal = threads_refusal(journal_path, recorded_threads(self.replay), env)
        if refusal is not None:
            raise refusal
        notes = [unchecked_facts(journal_path, self.replay, env)]
        if self._patch_changes:
            notes.append(
                f"--resume: {journal_path} holds timings measured before {'; '.join(self._patch_changes)} "
                "(a patch release of the same series): resumed, they are pooled with this run's"
            )
        for note in filter(None, notes):
            warnings.warn(note, DeployoptWarning, stacklevel=2)

    def _resume_keys(
        self, old: dict[str, Any], config: dict[str, Any]
    ) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
        """The keys on which the journal's run and this one differ, and both sides' values as the
        refusal shows them; sets `_sweep_runs_refusal` where the journal replays per-conv values
        timed with a sample count it does not record, and the layer cache does not show them timed
        with at least this run's (_inferred_sweep_runs_refusal)."""
        self._sweep_runs_refusal = None
        special = ("sweep_runs", "fidelity_samples")
        keys = [
            k
            for k in sorted(set(old) | set(config))
            if k not in special
            and _recorded(k, old) != _recorded(k, config)
            and not self._same_run_spelled_otherwise(k, old, config)
        ]
        was, now = dict(old), dict(config)  # as the refusal shows them ("was false, now the default")
        from deployopt.backends.base import get_backend

        # a prediction times nothing; a caller's session that does not say its runs: the caller's to
        # match, unless the journal names a count
        told = "sweep_runs" in old or self._sweep_samples()
        if getattr(get_backend(self.backend_name), "measured", True) and told:
            was["sweep_runs"], now["sweep_runs"] = self._journal_sweep_runs(old)
            if was["sweep_runs"] is not None and was["sweep_runs"] != now["sweep_runs"]:
                keys.append("sweep_runs")
            # where the journal replays no per-conv value, nothing was timed at another count
            if was["sweep_runs"] is None and self.replay.layer_values:
                self._sweep_runs_refusal = self._inferred_sweep_runs_refusal(old, now["sweep_runs"])
        if "fidelity_samples" not in old:  # a journal from before the key: as its fidelity reports say
            was["fidelity_samples"] = now["fidelity_samples"]
            if self.cfg.fidelity and "calibration_sha256" not in config:  # (that digest covers the samples)
                counts = {ev["report"].get("samples") for ev in self.replay.fidelity.values()} - {None}
                held = len(self._calibration().samples)
                if counts and counts != {held}:  # none: no verdict replayed was decided on samples
                    was["fidelity_samples"], now["fidelity_samples"] = sorted(counts)[0], held
        if was["fidelity_samples"] != now["fidelity_samples"]:
            keys.append("fidelity_samples")
        return keys, was, now

    def _journal_sweep_runs(self, old: dict[str, Any]) -> tuple[int | None, int]:
        """Samples per conv the journal's per-layer sweep asked for (None: not told) and this run's.
        Before 63bb8cf a journal recorded no count, and after it only one other than the default:
        a journal without the key is not taken to have used the default (its 3-sample values were
        resumed as 10, and `--sweep-runs 3` was refused), nor the count its values hold (a default
        run reads an earlier `--sweep-runs 50` run's entries: "sweep_runs was 50, now 10"); what
        those values hold is judged by _inferred_sweep_runs_refusal."""
        if "sweep_runs" in old:
            return old["sweep_runs"] or old.get("runs"), self.cfg.sweep_runs or self.cfg.runs
        return self.replay.sweep_runs, self._sweep_samples()

    def _inferred_sweep_runs_refusal(self, old: dict[str, Any], now: int) -> str | None:
        """Why a journal that records no sweep count does not resume at `now` samples per conv, or
        None where it does: its values, as its sweep events or the layer-cache entries holding them
        say, each have at least `now` samples (a fresh run at `now` takes any cached entry that
        has). A run at the default reads an earlier `--sweep-runs 50` run's entries, so its
        journal's values may hold 50, or 10 and 50: the one was refused as "sweep_runs was 50, now
        10", the other as values the layer cache "no longer holds" (it held them all)."""
        span = self._journal_sweep_span(old)
        if span is None:
            total = len(self.replay.layer_values)
            held = (
                f"the layer cache no longer holds {self._entries_missing} of its {total} per-conv values"
                if self._entries_missing
                else "it names no layer-cache folder its per-conv values were saved in"
            )
            return (
                "does not record how many samples per conv its per-layer sweep timed (a journal from "
                f"before optimize recorded it), and {held}; use --force to start over"
            )
        if now > span[0]:
            said = "its sweep events say" if self.replay.sweep_samples else "their layer-cache entries say"
            return (
                "does not record how many samples per conv its per-layer sweep asked for (a journal from "
                f"before optimize recorded it), and its per-conv values were timed with as few as "
                f"{span[0]} samples per conv ({said}), fewer than this run's {now}; resume with "
                f"--sweep-runs {span[0]} or use --force to start over"
            )
        return None

    def _journal_sweep_span(self, old: dict[str, Any]) -> tuple[int, int] | None:
        """Fewest and most samples per conv of the journal's per-layer values: as its sweep events
        record them, else as the layer-cache entries holding those values do, else the count its
        config names; None where nothing tells."""
        if self.replay.sweep_samples:
            lo, hi = self.replay.sweep_samples
            return lo, hi
        if not self.replay.layer_values:
            return None
        if not self._entry_counts_read:
            self._entry_counts_read = True
            from deployopt.lut import DTYPE_FOLDER, cache_root, entry_samples

            root = Path(self.cfg.cache_root) if self.cfg.cache_root else cache_root()
            dtype = str(old.get("dtype") or self.cfg.dtype)
            folders = [
                root / fp / sub
                for fp in self.replay.sweep_fingerprints
                for sub in dict.fromkeys([DTYPE_FOLDER.get(dtype, dtype), dtype])
            ]
            found = entry_samples(self.replay.layer_values, folders) if folders else {}
            self._entries_missing = len(self.replay.layer_values) - len(found) if folders else 0
            self._entry_counts = None if self._entries_missing or not found else list(found.values())
        if self._entry_counts:
            return min(self._entry_counts), max(self._entry_counts)
        if "sweep_runs" in old and (n := old["sweep_runs"] or old.get("runs")):
            return int(n), int(n)
        return None

    def _same_run_spelled_otherwise(self, key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """Whether a journal key that differs names the same run another way, so --resume goes on:
        `--batch N` against no --batch where N is the batch the model runs at without it (the file's,
        or 1 where the file leaves it dynamic) on every input --input-shape does not fix; `--sms N`
        against no --sms where N is the target's whole SM count; and a target profile file under
        another path whose contents (target_sha256) are the same; and the timing options
        (--runs, --warmup, --sweep-runs) of a run whose backend predicts, which times nothing (it
        said they were unused, and --resume then refused over them)."""
        if key in ("runs", "warmup", "sweep_runs") and old.get("backend") == new.get("backend"):
            from deployopt.backends.base import get_backend

            return not getattr(get_backend(str(new.get("backend"))), "measured", True)
        if key == "target":
            digest = new.get("target_sha256")
            return digest is not None and digest == old.get("target_sha256")
        if key == "sms":  # --sms 40 on a 40-SM T4 against no --sms ("sms was the default, now 40")
            given = [v for v in (old.get(key), new.get(key)) if v is not None]
            return len(given) == 1 and given[0] == (self.target.full_sms or self.target.sms)
        if key != "batch":
            return False
        spelled = [v for v in (old.get(key), new.get(key)) if v is not None]
        free = [n for n, dims in self.loaded.input_shapes.items() if dims and n not in self.cfg.input_shapes]
        return len(spelled) == 1 and {self.loaded.file_batch.get(n, 1) for n in free} == {spelled[0]}

    def _target_signature(self) -> dict[str, str]:
        """A target read from a profile file (a path, or a name calibrated into the user cache): a
        sha256 of what it tells the wave model, for the resume check. The name alone would not see
        the file edited (a what-if clock or SM count) or a profile saved under that name since, and
        the resumed run would mix the journal's predictions (and candidate widths) with new ones."""
        origin = self.target.origin
        if origin == "built-in" or origin.startswith("local GPU"):
            return {}
        import hashlib
        import json

        skip = ("origin", "sources", "notes", "software")  # provenance and prose: no prediction uses them
        facts = {k: v for k, v in self.target.to_json().items() if k not in skip}
        text = json.dumps(facts, sort_keys=True, separators=(",", ":"))
        return {"target_sha256": hashlib.sha256(text.encode()).hexdigest()}

    def _write_candidate(self, plan: dict[str, int], path: Path) -> None:
        import onnx

        onnx.save(self.build_model(plan), str(path))

    def _faster(self, incumbent: Evaluation, ev: Evaluation) -> bool:
        c = compare(incumbent.timing, ev.timing, alpha=self.cfg.alpha, min_effect=self.cfg.min_effect)
        return c.verdict == "faster"

    # -------------------------------------------------------------- fidelity
    def _calibration(self) -> Any:
        """The fidelity gate's samples: spread over --calibration-data (a class-per-folder set gave
        its first class alone), and with --mode trim none of those the trims are ranked on."""
        if getattr(self, "_calib", None) is None:
            from deployopt.fidelity import load_calibration

            if self.cfg.mode == "trim" and self.cfg.calibration_data:
                self._calib = self._trim_samples().gate
            else:
                self._calib = load_calibration(
                    self.cfg.calibration_data,
                    inputs=dict(self.loaded.input_shapes),
                    count=self.cfg.fidelity_samples,
                    preprocess=self.cfg.preprocess,
                    spread=True,
                )
        return self._calib

    def _is_lossless(self, plan: dict[str, int]) -> bool:
        return all(plan[g] >= self.original[g] - self.dead[g] for g in plan)

    def _lossless_rtol(self) -> float:
        """LOSSLESS_RTOL, or the wider bound of a model that computes in fp16/bf16."""
        if getattr(self, "_rtol", None) is None:
            from deployopt.precision import rounding_precision, typed_precision

            # a mixed fp32/fp16 model's fp16 ops round as an fp16 model's do
            typed = rounding_precision(typed_precision(self.model))
            self._rtol = LOSSLESS_RTOL_LOW_PRECISION.get(typed, LOSSLESS_RTOL)
        return self._rtol

    def fidelity_of(self, plan: dict[str, int]) -> dict[str, Any]:
        """Outputs of `plan` against the input model on onnxruntime (journaled, so never recomputed).

        A lossless plan must match to LOSSLESS_ATOL + LOSSLESS_RTOL × each output's largest
        magnitude (LOSSLESS_RTOL_LOW_PRECISION for a model computing in fp16/bf16); a trim plan
        must keep cosine and top-1 agreement above the configured thresholds (an output of one
        value per row its relative error, an integer output its exact match: compare_models)."""
        key = plan_key(plan)
        if key in self.replay.fidelity and not self._scored_otherwise(self.replay.fidelity[key]["report"]):
            return self.replay.fidelity[key]["report"]
        from deployopt.fidelity import ReferenceRun, Thresholds, compare_models, identical_report

        if self._is_lossless(plan):
            thresholds = Thresholds(
                max_abs_error=LOSSLESS_ATOL, rel_error=self._lossless_rtol(), min_cosine=None, min_top1=None
            )
        else:
            thresholds = Thresholds(min_cosine=self.cfg.min_cosine, min_top1=self.cfg.min_top1)
        if getattr(self, "_reference", None) is None:
            self._reference = ReferenceRun(self.model)  # one session and one run per sample, for every check
        if plan == self.original:
            # the input's own plan: build_model returns the input model, outputs identical by
            # construction (comparing it with itself ran the reference twice per sample)
            report = identical_report(
                self._reference,
                self._calibration(),
                min_cosine=self.cfg.min_cosine,
                top1_outputs=self.cfg.top1_outputs,
            )
        else:
            report = compare_models(
                self._reference,
                self.build_model(plan),
                self._calibration(),
                min_cosine=self.cfg.min_cosine,
                top1_outputs=self.cfg.top1_outputs,
            )
        data = report.to_json(thresholds)
        data["lossless_plan"] = self._is_lossless(plan)
        self.journal.write("fidelity", plan=plan, report=data)
        self.replay.fidelity[key] = {"report": data}
        return data

    def _scored_otherwise(self, data: dict[str, Any]) -> bool:
        """Whether a journaled report scored the outputs otherwise than this run would: by cosine
        alone (`_scored_as_cosine`), or top-1 on other outputs (a journal from before
        fidelity.Top1Choice held an embedding or a box to top-1): --resume compares that plan again."""
        if self._scored_as_cosine(data):
            return True
        from deployopt.fidelity import ReferenceRun, identical_report, journaled_top1_outputs

        if getattr(self, "_top1_names", None) is None:
            if getattr(self, "_reference", None) is None:
                self._reference = ReferenceRun(self.model)
            chosen = identical_report(
                self._reference, self._calibration(), top1_outputs=self.cfg.top1_outputs
            )
            self._top1_names = chosen.top1_outputs()
        return journaled_top1_outputs(data) != self._top1_names

    def _scored_as_cosine(self, data: dict[str, Any]) -> bool:
        """Whether a journaled report predates scoring outputs by kind (fidelity.compare_models) on a
        model with an output a cosine cannot judge (one value per row, integers): it passed such an
        output at cosine ±1, so --resume compares that plan again instead of replaying it."""
        if all("scored_by" in p for p in data.get("per_output") or []):
            return False
        if getattr(self, "_cosine_only", None) is None:
            from deployopt.fidelity import COSINE, ReferenceRun, output_scoring

            if getattr(self, "_reference", None) is None:
                self._reference = ReferenceRun(self.model)
            kinds = output_scoring(self._reference, self._calibration())
            self._cosine_only = all(k == COSINE for k in kinds)
        return not self._cosine_only

    def _refusal(self, plan: dict[str, int]) -> str | None:
        """Why a trim plan may not be used (fidelity past the thresholds), checked *before* it costs
        a device evaluation; None when it may."""
        if self.cfg.mode != "trim" or not self.cfg.fidelity or not self.cfg.fidelity_gate:
            return None
        if self._is_lossless(plan):
            return None  # outputs unchanged by construction
        failures = self.fidelity_of(plan)["failures"]
        return "; ".join(failures) if failures else None

    # -------------------------------------------------------------- the search
    def _accept(self, ev: Evaluation) -> Evaluation:
        ev.accepted = True
        self.incumbent = ev
        done = {e.get("index") for e in self.replay.events if e.get("event") == "accepted"}
        if ev.index not in done:
            self.journal.write(
                "accepted", index=ev.index, label=ev.label, plan=ev.plan, median_us=ev.timing.median_us
            )
        return ev

    def _try(self, incumbent: Evaluation, plan: dict[str, int], label: str) -> Evaluation:
        key = plan_key(plan)
        if key not in self._by_key:
            why = self._refusal(plan)
            if why is not None:
                changed = [g for g in plan if plan[g] != self.incumbent.plan[g]]
                if len(changed) == 1 and plan[changed[0]] < self.incumbent.plan[changed[0]]:
                    g = changed[0]
                    self._refused_floor[g] = max(self._refused_floor.get(g, 0), plan[g])
                if key not in self._refused:
                    self._refused[key] = {"label": label, "plan": dict(plan), "reason": why}
                    self.progress("refused", label=label, reason=why)
                return incumbent
        ev = self.evaluate(plan, label)
        if ev is incumbent:
            return incumbent
        if self._faster(incumbent, ev):
            return self._accept(ev)
        changed = [g for g in plan if plan[g] != incumbent.plan[g]]
        if len(changed) == 1:  # a single-group move refuted end to end is not tried again
            self._refuted.add((changed[0], plan[changed[0]]))
        return incumbent

    def search(self) -> Evaluation:
        cfg = self.cfg
        self.table = self.conv_table = None
        base = self.evaluate(self.original, "input")
        r8 = self.evaluate(self.round_up, "round-up-to-8") if self.round_up != self.original else base
        self.baselines = [r8, base]  # round-up-to-8 first: it wins ties, as the search start does
        # Start from the faster baseline (lower median; both are valid lossless points).
        incumbent = r8 if r8.timing.median_us <= base.timing.median_us else base
        incumbent.accepted = True
        self.incumbent = incumbent
        domains = self._candidates()
        self.domains = domains
        self.table = self.conv_table = self._build_table(domains, self.replay, self.journal)
        for ev in (base, r8):
            if self._in_domains(ev.plan):
                ev.table_us = self.conv_table.cost(ev.plan)
        self._refit_traffic()
        starts = [self._clamp(self.round_up), self._clamp(self.original)]
        if self._predict is not None:
            starts.append(self._wave_start(domains))
        if cfg.mode == "grow":
            return self._grow(incumbent, starts)
        self.solutions = self.table.top_plans(cfg.top_k, starts)
        # For the record (and docs/optimize.md): what coordinate descent reaches on the same table.
        self.solver_check = {
            "solver_us": self.solutions[0].cost_us,
            "largest_table": self.table.largest_table,
            "cd_from_round_up_us": self.table.coordinate_descent([starts[0]]).cost_us,
            "cd_from_original_us": self.table.coordinate_descent([starts[1]]).cost_us,
            "cd_multistart_us": self.table.coordinate_descent(starts).cost_us,
        }
        solutions, optimum, i = list(self.solutions), self.solutions[0], 0
        while i < len(solutions):
            table = self.table
            incumbent = self._try(incumbent, solutions[i].plan, f"solver #{i + 1}")
            i += 1
            if self.table is not table:  # the traffic fit changed what the table prefers: solve again
                fresh = self.table.top_plans(cfg.top_k, starts)
                optimum = fresh[0]
                # the new plans not measured yet, at most top_k more than the first solve gave
                fresh = [s for s in fresh if plan_key(s.plan) not in self._by_key]
                solutions = solutions[:i] + fresh[: max(0, 2 * cfg.top_k - i)]
                self.solutions = solutions
        incumbent = self._partial(incumbent, optimum.plan)
        rejected = 0
        tried: set[str] = set(self._by_key)
        while rejected < cfg.patience:
            move = self._next_move(incumbent, tried)
            if move is None:
                break
            plan, label = move
            tried.add(plan_key(plan))
            new = self._try(incumbent, plan, label)
            if new is incumbent:
                rejected += 1
            else:
                incumbent, rejected = new, 0
        return incumbent

    def final_timing(self, ev: Evaluation) -> Timing:
        """The timing a report shows for `ev`: its confirmation rebuilds (each a replicate) where
        it was confirmed, so the answer and its baseline are compared on the same footing; else
        the search's one build. The search's own build of a confirmed plan is not among them: it
        was chosen for measuring fast (winner's curse)."""
        return self._pooled.get(plan_key(ev.plan), ev.timing)

    @property
    def confirm_reserve(self) -> int:
        """Evaluations of --max-evals kept back for the confirmation rounds (the report says so)."""
        opened = getattr(self, "session", None) is not None  # set by run()
        return 2 * self.cfg.confirm_rounds if opened and self._confirms() else 0

    def _warn_if_no_search_left(self) -> None:
        """One warning when --max-evals leaves the search nothing once the two baselines and the
        confirmation rounds have theirs: the run would end on the faster baseline, having searched
        nothing, and only report.md said why."""
        if self.cfg.mode == "grow":
            return
        import warnings

        from deployopt.errors import DeployoptWarning

        verb = "measure" if self._measures() else "predict"
        if getattr(self, "round_up", None) == getattr(self, "original", None):  # one baseline, not two
            if self.cfg.max_evals - 1 - self._reserved <= 0:
                kept = f" and {self.cfg.max_evals - 1} kept back to confirm" if self.cfg.max_evals > 1 else ""
                warnings.warn(
                    f"--max-evals {self.cfg.max_evals} leaves the search no evaluation: the input's widths "
                    f"are round-up-to-8's, its one evaluation taken{kept}, so the answer is the input; give "
                    f"--max-evals {1 + self._reserved + 1} or more to search ({1 + self._reserved + 4} to "
                    f"{verb} the solver's top 4 plans)",
                    DeployoptWarning,
                    stacklevel=2,
                )
            return
        left = self.cfg.max_evals - 2 - self._reserved
        if left <= 0:
            kept = self.cfg.max_evals - 2  # what the baselines leave, all of it held back (or none)
            why = (
                f"the two baselines take {min(2, self.cfg.max_evals)}"
                if kept <= 0
                else f"the two baselines take 2 and {kept} are kept back to confirm a searched plan "
                "against them"
                if kept > 1
                else "the two baselines take 2 and 1 is kept back to confirm a searched plan against them"
            )
            # with a rebuild round of each kept back (2), they confirm round-up-to-8 against the input
            # when it is the faster baseline (its "vs input" is no single build's word); with fewer,
            # nothing is: a round is measured whole or not at all
            what = (
                "nothing searched, nothing to confirm"
                if kept <= 0
                else "nothing searched; round-up-to-8, if the faster, confirmed against the input"
                if kept >= 2
                else "nothing searched; too few left for a rebuild round of each, so round-up-to-8, "
                "if the faster, is not confirmed against the input"
            )
            warnings.warn(
                f"--max-evals {self.cfg.max_evals} leaves the search no evaluation: {why}, so the "
                f"answer is the faster baseline ({what}); give --max-evals "
                f"{2 + self._reserved + 1} or more to search ({2 + self._reserved + 4} to {verb} the "
                "solver's top 4 plans)",
                DeployoptWarning,
                stacklevel=2,
            )

    def _confirms(self) -> bool:
        """Confirmation rounds are for measured backends; a prediction does not drift."""
        return self.cfg.confirm_rounds > 0 and self.cfg.mode != "grow" and self._measures()

    def _confirm(self, best: Evaluation) -> Evaluation:
        """Re-measure the answer against the best baseline before it stands.

        Every search step compared models built and tuned at different moments; a rebuilt model can
        land a little faster or slower (cuDNN re-times its algorithms, clocks drift), more than the
        samples of one build show. So the answer and the faster of input / round-up-to-8 are rebuilt
        and timed again in interleaved rounds, and the answer is kept only if it is faster in every
        round and its pooled median is at least `min_effect` lower; otherwise the baseline is the
        answer. This is what makes "never slower than round-up-to-8" hold on the device.

        An answer that is round-up-to-8 itself (another plan than the input) is confirmed the same
        way against the input: its "vs input: faster" rested on one build of each (bug bash: -22 %
        claimed, faster in 7 of 10 interleaved re-benches). Unconfirmed, the answer is the input,
        valid in every mode (round-up-to-8 only pads it). So is round-up-to-8 when it becomes the
        answer because a searched plan failed against it: it was measured against the input once.
        Where no round of that fits, round-up-to-8 stays only if its rebuilds measured no slower
        than the input's build; else the answer is the input ("behind").
        """
        baselines = self.baselines
        if not baselines or not self._confirms():
            return best
        r8, base = baselines
        r8_is_input = plan_key(r8.plan) == plan_key(base.plan)
        if any(plan_key(best.plan) == plan_key(b.plan) for b in baselines):
            if plan_key(best.plan) != plan_key(r8.plan) or r8_is_input:
                return best  # the input itself: nothing to confirm
            return self._confirm_against(best, base, answer_is_baseline=True)
        baseline = min(baselines, key=lambda e: e.timing.median_us)
        # refuted against round-up-to-8 (another plan than the input), the answer would be
        # round-up-to-8 on one build's word against the input: it is confirmed against it in turn
        fallback_to = base if plan_key(baseline.plan) == plan_key(r8.plan) and not r8_is_input else None
        chosen = self._confirm_against(best, baseline, answer_is_baseline=False, fallback_to=fallback_to)
        if fallback_to is None or self.confirmation is None or self.confirmation["kept"]:
            return chosen
        if self.confirmation.get("fallback_vs_input") != "rounds":
            # no rebuild round of each left: said in the confirmation and "vs input"; the answer is
            # round-up-to-8, or the input where round-up-to-8's rebuilds measured behind it
            return chosen
        return self._confirm_against(r8, base, answer_is_baseline=True, after=best.label)

    def _next_repeat(self, plan: dict[str, int]) -> int:
        """The `repeat` of `plan`'s next rebuild: 1, or one past its rebuilds so far (round-up-to-8
        is rebuilt against a searched plan, then again against the input when that plan failed)."""
        n = 1
        while plan_key(plan, n) in self._by_key:
            n += 1
        return n

    def _round_fits(self, items: list[tuple[dict[str, int], int]]) -> bool:
        """Whether one interleaved round (each plan at its `repeat`) fits in --max-evals whole: a half
        round (the baseline rebuilt, the answer not) decided nothing and spent an evaluation.
        Rounds in the journal, or measured already, cost nothing, so a resumed run decides alike."""
        keys = {plan_key(plan, repeat) for plan, repeat in items}
        new = [k for k in keys if k not in self._by_key and k not in self.replay.timings]
        return len(self.evaluations) + len(new) <= self.cfg.max_evals

    def _unconfirmed_phrase(self, r8: Evaluation) -> str:
        """What "vs input" adds where round-up-to-8 is the answer and no rebuild round put it to
        the input: the claim rests on one build of the input."""
        return (
            f"{r8.label} was not confirmed against the input (built once: no evaluation of "
            f"--max-evals {self.cfg.max_evals} was left for a rebuild round of each)"
        )

    def _confirm_against(
        self,
        best: Evaluation,
        baseline: Evaluation,
        answer_is_baseline: bool,
        fallback_to: Evaluation | None = None,
        after: str | None = None,
    ) -> Evaluation:
        """The interleaved rebuild rounds of `best` against `baseline`, and the rule's decision.

        Every round is an evaluation with `repeat` set, so a resumed run replays them from the
        journal and reaches the same decision without measuring again. Round-up-to-8 confirmed
        against the input needs one rebuild round at least: with none (--max-evals spent on the
        baselines, as the warning says) there is nothing new to decide on, and the report says its
        "vs input" is unconfirmed. `fallback_to`: the input, where `baseline` is round-up-to-8 and
        is confirmed against it if `best` fails (the record says whether a round of that fits);
        `after`: the searched plan that failed, where this confirms round-up-to-8 in its place.

        The decision and the timings the report shows rest on the rebuilds alone: the search's own
        build of `best` is the one that measured it fast enough to be chosen (winner's curse: in a
        bug bash's world where every plan was equally fast, kept answers' search builds measured
        970–983 µs against 987–1001 µs for their rebuilds), so counting it biased the pooled gain
        and the answer's latency; the baseline's is left out alike (it was picked for being the
        faster baseline, and each side keeps builds of the same interleaved stretch)."""
        rounds: dict[str, list[Timing]] = {"best": [], "baseline": []}
        first = {"baseline": self._next_repeat(baseline.plan), "best": self._next_repeat(best.plan)}
        try:
            with self._fresh_tactics():
                for r in range(self.cfg.confirm_rounds):
                    pairs = (("baseline", baseline), ("best", best))
                    if not self._round_fits([(ev.plan, first[name] + r) for name, ev in pairs]):
                        break
                    for name, ev in pairs:
                        repeat = first[name] + r
                        again = self.evaluate(ev.plan, f"{ev.label} (confirm {repeat})", repeat=repeat)
                        rounds[name].append(again.timing)
        except _Budget:
            pass  # decide on the rounds there are
        if answer_is_baseline and not rounds["best"]:
            self.unconfirmed_vs_input = self._unconfirmed_phrase(best)
            return best
        pooled = {k: _pool(v) if v else None for k, v in rounds.items()}
        # the rebuilds of this confirmation: a second one (round-up-to-8 against the input) replaces
        # round-up-to-8's pool from the first, so each plan is shown as its deciding rounds saw it
        self._pooled.update(
            {plan_key(e.plan): pooled[k] for k, e in (("best", best), ("baseline", baseline)) if pooled[k]}
        )
        if pooled["best"] is not None and pooled["baseline"] is not None:
            worst_best = max(t.median_us for t in rounds["best"])
            best_base = min(t.median_us for t in rounds["baseline"])
            gain = 1 - pooled["best"].median_us / pooled["baseline"].median_us
            kept = worst_best < best_base and gain >= self.cfg.min_effect
        else:  # no rebuild round fitted (the reserve keeps one; defensive): nothing confirms it
            gain, kept = 0.0, False
        self.confirmation = {
            "baseline": baseline.label,
            # the rebuild rounds that decided, each a build of both (the search's builds are not
            # among them: see search_build_medians_us)
            "rounds": len(rounds["best"]),
            "best_round_medians_us": [t.median_us for t in rounds["best"]],
            "baseline_round_medians_us": [t.median_us for t in rounds["baseline"]],
            "pooled_gain": gain,
            "kept": kept,
            # added: the search's own builds of the two, for the record only (not in the rounds,
            # the gain or the decision); before this field, the rounds counted them as the first
            "search_build_medians_us": {"best": best.timing.median_us, "baseline": baseline.timing.median_us},
            # added fields: what was confirmed (a searched plan, or round-up-to-8 against the input)
            "answer": best.label,
            "answer_is_baseline": answer_is_baseline,
            # added: the searched plan that failed against round-up-to-8, where this confirmation
            # puts round-up-to-8 to the input in its place (else null)
            "after": after,
            # added: where a searched plan failed against round-up-to-8, what became of
            # round-up-to-8's claim against the input: "rounds" (the next confirmation decides it),
            # "budget" (no rebuild round of each fitted: the answer is round-up-to-8, unconfirmed
            # against the input), "behind" (none fitted, and round-up-to-8's rebuilds measured
            # behind the input's build: the answer is the input); null where nothing follows
            "fallback_vs_input": None,
        }
        chosen = best if kept else baseline
        if fallback_to is not None and not kept:
            nxt = [
                (baseline.plan, self._next_repeat(baseline.plan)),
                (fallback_to.plan, self._next_repeat(fallback_to.plan)),
            ]
            fits = self.cfg.confirm_rounds > 0 and self._round_fits(nxt)
            if fits:
                self.confirmation["fallback_vs_input"] = "rounds"
            elif self.final_timing(baseline).median_us > self.final_timing(fallback_to).median_us:
                # round-up-to-8 stood on one build's word against the input and its rebuilds measured
                # behind it: the model written would be one its own report calls slower (bug bash:
                # "slower: +0.7 %"); the input is valid in every mode
                self.confirmation["fallback_vs_input"] = "behind"
                chosen = fallback_to
            else:
                self.confirmation["fallback_vs_input"] = "budget"
                self.unconfirmed_vs_input = self._unconfirmed_phrase(baseline)
        self.confirmations.append(self.confirmation)
        self.journal.write("confirmation", plan=best.plan, **self.confirmation)
        self.progress("confirm", **self.confirmation)
        return replace(chosen, timing=self.final_timing(chosen))

    @contextlib.contextmanager
    def _fresh_tactics(self) -> Iterator[None]:
        """The confirmation rebuilds without the run's TensorRT timing cache: with it, a rebuild
        takes every tactic the first build chose, so the rounds would not see how a build of the
        user's own (tactics timed afresh) lands. The session's options are read at each build."""
        session = self.session
        options = getattr(session, "options", None)
        extra = getattr(options, "extra", None)
        if not extra or not extra.get("timing_cache"):
            yield
            return
        fresh = {k: v for k, v in extra.items() if not k.startswith("timing_cache")}
        session.options = replace(options, extra=fresh)
        try:
            yield
        finally:
            session.options = options

    def _partial(self, incumbent: Evaluation, target: dict[str, int]) -> Evaluation:
        """When the table optimum was not confirmed end to end, apply part of it: its changes ranked
        by their own predicted gain, the best half, then the best quarter, then three quarters.

        Many small per-group gains (each below the 0.5 % a single move must show) add up only
        together, while one mispredicted group can spoil the whole plan; halving finds the part
        that holds in ≤ 3 evaluations (a single bad group spoils one half, not the other)."""
        changed = [g for g in target if target[g] != incumbent.plan[g]]
        if len(changed) < 2:
            return incumbent
        base = self.table.cost(incumbent.plan) if self._in_domains(incumbent.plan) else None
        if base is None:
            return incumbent
        gain = {g: self.table.cost({**incumbent.plan, g: target[g]}) - base for g in changed}
        ranked = sorted(changed, key=lambda g: (gain[g], g))
        n, half = len(ranked), len(ranked) // 2
        parts = [(ranked[: n - half], "best"), (ranked[n - half :], "other")]
        if n >= 4:
            parts.append((ranked[: max(1, n // 4)], "best"))
        for groups, which in parts:
            plan = {**incumbent.plan, **{g: target[g] for g in groups}}
            new = self._try(incumbent, plan, f"solver #1, {which} {len(groups)} of {n} changes")
            if new is not incumbent:
                return new
        return incumbent

    def _next_move(self, incumbent: Evaluation, tried: set[str]) -> tuple[dict[str, int], str] | None:
        """The most promising untried single-group change of the incumbent.

        First the moves the table predicts to gain, best first; then moves back to round-up-to-8 for
        groups the incumbent changed (is the table's gain real end to end?); then moves the table
        predicts to cost less than 0.5 % (fusion can hide a layer's step). A (group, width) move
        already refuted end to end from an earlier incumbent is not repeated."""
        plan = incumbent.plan
        if not self._in_domains(plan):
            return None
        total = self.table.cost(plan)
        moves = self.table.moves(plan)
        ordered = [m for m in moves if m.predicted_delta_us < 0]
        ordered += [m for m in moves if m.width == self.round_up[m.group] and m.predicted_delta_us >= 0]
        ordered += [m for m in moves if 0 <= m.predicted_delta_us <= 0.005 * total]
        for m in ordered:
            cand = {**plan, m.group: m.width}
            if m.width <= self._refused_floor.get(m.group, 0):
                continue  # trimming this group to a width as low was refused for fidelity already
            if (m.group, m.width) in self._refuted:
                continue  # measured from an earlier incumbent and not faster
            if plan_key(cand) not in tried:
                label = f"move {m.group}→{m.width} ({self._move_value(plan, cand, m.predicted_delta_us)})"
                return cand, label
        return None

    def _move_value(self, plan: dict[str, int], cand: dict[str, int], delta_us: float) -> str:
        """A move's predicted change as its label says it. The search's table may price non-conv
        traffic at a slope fitted to end-to-end medians on top of the per-layer (conv) table; the
        label called the sum "per-layer measured" (bug bash: "gain 29.3 µs" = conv table +65.1 µs
        measured + traffic -94.4 µs fitted), so the two parts are given apart, and kept for
        report.json (each evaluation's `move_parts`)."""
        sign = "gain" if delta_us < 0 else "cost"
        source = self._table_source()
        conv_table = self.conv_table
        if conv_table is None or self.table is conv_table or not self._in_domains(cand):
            return f"table {sign} {abs(delta_us):.1f} µs, {source}"
        conv = conv_table.cost(cand) - conv_table.cost(plan)
        traffic = delta_us - conv
        self.move_parts[plan_key(cand)] = {
            "table_delta_us": delta_us,
            "conv_table_delta_us": conv,
            "conv_table_source": source,
            "traffic_delta_us": traffic,
            "traffic_source": "fitted slope",
            "traffic_us_per_mb": self.traffic_fit.us_per_mb,
        }
        where = source.replace("per-layer ", "per-layer, ")
        return (
            f"table {sign} {abs(delta_us):.1f} µs = conv table {conv:+.1f} µs ({where}) "
            f"+ traffic {traffic:+.1f} µs (fitted slope)"
        )

    def _table_source(self) -> str:
        """What a table value printed in a label rests on (every latency printed says measured or
        predicted): the per-layer sweep's timings, or the wave model's predictions."""
        return "per-layer measured" if self.session.backend.measured else "predicted"

    def _grow(self, incumbent: Evaluation, starts: list[dict[str, int]]) -> Evaluation:
        """Widen groups into capacity the table says is free: largest widths whose table cost stays at
        or below the incumbent's; verified end to end (not slower beyond noise), backed off if not."""
        ref_cost = self.table.cost(self._clamp(incumbent.plan))
        plan = dict(self.table.best(starts).plan)
        for gid in sorted(self.groups, key=lambda g: -self.original[g]):
            for w in sorted(self.domains[gid], reverse=True):
                if w <= plan[gid]:
                    break
                if self.table.cost({**plan, gid: w}) <= ref_cost + 1e-9:
                    plan[gid] = w
                    break
        grown = incumbent
        while plan != incumbent.plan:
            ev = self.evaluate(plan, "grown")
            c = compare(incumbent.timing, ev.timing, alpha=self.cfg.alpha, min_effect=self.cfg.min_effect)
            if c.verdict != "slower":
                grown = self._accept(ev)
                break
            # back off the group whose widening the table charges most
            widened = [g for g in plan if plan[g] > incumbent.plan[g]]
            if not widened:
                break
            worst = max(
                widened, key=lambda g: self.table.cost(plan) - self.table.cost({**plan, g: incumbent.plan[g]})
            )
            plan = {**plan, worst: incumbent.plan[worst]}
        return grown

    def _clamp(self, plan: dict[str, int]) -> dict[str, int]:
        """The nearest candidate width for each group (round-up-to-8 is always one in lossless/trim)."""
        return {g: min(self.domains[g], key=lambda w: (abs(w - plan[g]), w)) for g in self.domains}

    def _wave_start(self, domains: dict[str, list[int]]) -> dict[str, int]:
        out = {}
        deps = self._conv_deps()
        for gid, dom in domains.items():
            convs = [c for c, d in deps.items() if gid in d]
            if not convs or self._predict is None:
                out[gid] = self.round_up[gid] if self.round_up[gid] in dom else dom[0]
                continue
            best = min(
                dom,
                key=lambda w: (
                    sum(map(self._predict, self.conv_shapes({**self.round_up, gid: w}, convs).values())),
                    w,
                ),
            )
            out[gid] = best
        return out

    # -------------------------------------------------------------- run
    def run(self) -> OptimizeResult:
        cfg = self.cfg
        self.outdir = _check_outdir(cfg)
        journal_path = self.outdir / "journal.jsonl"
        self._check_sessions()  # before the model is loaded: the mismatch costs no time
        self.replay = Journal.replay(journal_path) if cfg.resume else Replay()
        self._load()
        config = {
            **cfg.signature(getattr(self, "_digests", {}).get("model_sha256")),
            "backend": self.backend_name,
            **self._data_signature(),
            **self._target_signature(),
            **self._weights_signature(),
        }
        if cfg.resume and self.replay.config is not None:
            self._check_resume(journal_path, self.replay.config, config)
        recorded = len(self.replay.timings)  # replayed evaluations count, but the budget never stops them
        if cfg.resume and recorded > cfg.max_evals:
            raise DeployoptError(
                f"--resume: {journal_path} holds {recorded} end-to-end evaluations, more than --max-evals "
                f"{cfg.max_evals}; give --max-evals {recorded} or more"
            )
        # An uninterrupted run at this --max-evals searches only what its confirmation rounds leave
        # (confirm_reserve: 2 a round, measured backends). A journal whose search went further (a run
        # at a higher --max-evals) left them nothing: the resumed run answered unconfirmed, saying 4
        # were kept back, where the same flags uninterrupted confirm (bug bash: 10 searched, resumed
        # at --max-evals 10). Refused, as a run at these flags would never have searched that far.
        if cfg.resume:
            from deployopt.backends.base import get_backend

            searched = len(
                {
                    plan_key(e["plan"])
                    for e in self.replay.events
                    if e.get("event") == "measured" and not e.get("repeat")  # repeat: a confirmation rebuild
                }
            )
            given = self._external_session
            if given is not None:
                measures = not hasattr(given, "predict_shapes") and getattr(given.backend, "measured", True)
            else:
                measures = getattr(get_backend(self.backend_name), "measured", True)
            kept = 2 * cfg.confirm_rounds if measures and cfg.confirm_rounds > 0 and cfg.mode != "grow" else 0
            # the baselines are measured before anything is kept back
            reach = max(1 if self.round_up == self.original else 2, cfg.max_evals - kept)
            if kept and searched > reach:
                raise DeployoptError(
                    f"--resume: {journal_path} holds {searched} evaluations of the search, and --max-evals "
                    f"{cfg.max_evals} keeps {kept} back for the confirmation rounds, so a run at it searches "
                    f"at most {reach}: resumed, the confirmation would have "
                    f"{max(0, cfg.max_evals - searched)} of its {kept}; "
                    f"give --max-evals {searched + kept} or more"
                )
        self._check_runs()
        self._warn_if_opset_beyond_tensorrt()
        session_cm = None
        self.journal = None
        self._lock = lock = None
        workdir: Path | None = None
        try:
            # Candidate models (and TensorRT engines) live in a private folder removed at the end,
            # `deployopt-work-<pid>-<random>`, locked while this runs: those of runs killed before
            # their `finally` (SIGKILL, the OOM killer) are removed here (fileio.owned_temp_dir)
            self.workdir = workdir = owned_temp_dir("deployopt-work-")
            # The backend is opened before OUTDIR is touched: an unavailable backend leaves nothing behind.
            if self._external_session is not None:
                self.session = self._external_session
            else:
                session_cm = self._open_session()
                self.session = session_cm
            # a batch that cannot fit fails before OUTDIR exists (a duck-typed session may lack the hook);
            # ort's refusal of a --dtype the model is not typed in too, before any warning is said
            check_memory = getattr(self.session, "check_memory", None)
            if check_memory is not None:
                check_memory(self.loaded)
            self._check_resumed_session(journal_path)
            self._warn_if_on_host()
            preflight = getattr(self.session, "preflight", None)  # a board that does not answer, now
            if preflight is not None:
                preflight()
            make_output_dir(self.outdir)
            # before --force clears anything: not another run's files
            self._lock = lock = _lock_outdir(self.outdir)
            _recheck_outdir(cfg, self.outdir, self.replay)
            if cfg.force and not cfg.resume:
                _clear_outdir(self.outdir)
            elif cfg.resume:
                remove_staging(self.outdir)  # left by a run killed while it wrote its results
            self.journal = Journal(journal_path, self.replay)
            if self.replay.config is None:
                self.journal.write("start", config=config, model=str(cfg.model_path), time=time.time())
            else:
                self.journal.write("resume", previous_evaluations=len(self.replay.timings), time=time.time())
            budget_hit = False
            # evaluations kept back for the confirmation rounds (measured backends only)
            self._reserved = self.confirm_reserve
            self._warn_if_no_search_left()
            try:
                best = self.search()
            except _Budget:
                budget_hit = True
                best = self.incumbent
            self._reserved = 0
            best = self._confirm(best)
            fidelity = self._final_fidelity(best)
            result = self._finish(best, fidelity, budget_hit)  # sets self.finished
            self.journal.write(
                "done",
                check=False,  # the results are in place, checked just before they moved in
                best=best.plan,
                label=best.label,
                evaluations=len(self.evaluations),
                measured_now=self.measured_now,
            )
            return result
        finally:
            journal = self.journal
            sweep_session = self._sweep_session if self._own_sweep_session else None
            _run_every(
                journal.close if journal is not None else None,
                lambda: _unlock_outdir(lock),
                (lambda: remove_owned_temp_dir(workdir)) if workdir is not None else None,
                session_cm.close if session_cm is not None else None,
                sweep_session.close if sweep_session is not None else None,
            )

    def _warn_if_opset_beyond_tensorrt(self) -> None:
        """Once: the target's TensorRT (a Jetson's JetPack) documents no ops of the model's opset,
        and the model written keeps its input's opset."""
        import warnings

        from deployopt.errors import DeployoptWarning
        from deployopt.targets import opset_beyond_tensorrt

        why = opset_beyond_tensorrt(self.target, self.model)
        if why:
            warnings.warn(why, DeployoptWarning, stacklevel=2)

    def _warn_if_on_host(self) -> None:
        """Every target is a GPU: a measured backend timing on the host CPU (ort's CPU provider,
        torch without CUDA) picks widths for that CPU, so say so once (HostTimingWarning)."""
        import warnings

        from deployopt.errors import HostTimingWarning
        from deployopt.targets import measured_on_host

        if getattr(self.session, "runs_on_gpu", None) is False:
            warnings.warn(
                measured_on_host(
                    f"--backend {self.backend_name}",
                    self.target,
                    "the latencies and the widths chosen fit the CPU, not the target",
                ),
                HostTimingWarning,
                stacklevel=2,
            )

    def _warn_if_elsewhere(self, timing: Timing) -> None:
        """Once, at the first measurement: the GPU that timed it is not the target's
        (TargetMismatchWarning; the report says it too, `measured_elsewhere`), or is a board whose
        clock was not locked (UnlockedClockWarning; the report's `clock_unlocked`)."""
        if getattr(self, "_elsewhere_checked", False):
            return
        self._elsewhere_checked = True
        import warnings

        from deployopt.clocks import unlocked_phrase
        from deployopt.errors import TargetMismatchWarning, UnlockedClockWarning
        from deployopt.targets import measured_elsewhere

        why = measured_elsewhere(self.target, timing.environment)
        if why:
            warnings.warn(why, TargetMismatchWarning, stacklevel=2)
        unlocked = unlocked_phrase(timing.environment)
        if unlocked:
            warnings.warn(unlocked, UnlockedClockWarning, stacklevel=2)

    def _check_runs(self) -> None:
        """A measured candidate is kept only when the Mann-Whitney U test says p < alpha; with fewer
        runs than that test can ever reach, the search could keep nothing (or, through the
        one-sample rule meant for predictions, keep noise). One line now, before any measuring."""
        from deployopt.backends import get_backend
        from deployopt.timing import min_samples

        session = self._external_session
        measured = (session.backend if session is not None else get_backend(self.backend_name)).measured
        need = min_samples(self.cfg.alpha)
        if measured and self.cfg.runs < need:
            raise DeployoptError(
                f"--runs {self.cfg.runs}: deciding 'faster' at alpha {self.cfg.alpha:g} needs at least "
                f"{need} measured runs per candidate; use --runs {need} or more"
            )

    def _check_sessions(self) -> None:
        """A caller's session (and sweep session) opened with options other than the config's: the
        session timed with its own (7 samples a plan) while report.md and the journal's start record,
        which --resume trusts, said the config's (50 runs). Refused, naming each field that differs;
        a duck-typed session (not a backends.base.Session) is the caller's to keep consistent."""
        from deployopt.backends.base import Session

        cfg = self.cfg
        for session, fields in (
            (self._external_session, ("dtype", "sms", "batch", "input_shapes", "runs", "warmup")),
            # the sweep times convs alone, with samples of its own: only what changes a conv's time
            (self._external_sweep_session, ("dtype", "sms")),
        ):
            if not isinstance(session, Session):
                continue
            opts = session.options
            if not getattr(session.backend, "measured", True):  # the wave model times nothing
                fields = tuple(f for f in fields if f not in ("runs", "warmup"))
            have = {f: getattr(opts, f) for f in fields}
            want = {f: getattr(cfg, f) for f in fields}
            for shapes in (have, want):
                if "input_shapes" in shapes:
                    shapes["input_shapes"] = {n: list(d) for n, d in (shapes["input_shapes"] or {}).items()}
            differ = [f"{f} {have[f]!r} (config: {want[f]!r})" for f in fields if have[f] != want[f]]
            if differ:
                which = "session" if session is self._external_session else "sweep_session"
                raise DeployoptError(
                    f"the {which} given was opened with other options than the config's: "
                    f"{', '.join(differ)}; open it with the config's options, or give the config the "
                    "session's"
                )

    def _keep_engine(self, best: Evaluation, folder: Path) -> str | None:
        """The engine a TensorRT backend built for the chosen plan, copied to `folder`/model.engine
        (the backend builds it in this run's work folder, which is removed at the end; with --remote
        it is on the board, and comes back over scp: the engine to deploy on that board)."""
        from deployopt.backends.base import copy_local_engine

        keep = getattr(self.session, "keep_engine", copy_local_engine)  # a caller's duck-typed session
        dest = folder / "model.engine"  # `folder` is the staging folder: OUTDIR gets all or nothing
        timing = best.timing
        try:
            if best.replayed:  # measured before --resume: its engine went with that run's work folder
                if not timing.environment.get("engine"):
                    return None  # a backend that builds no engine
                timing = self._build_again(best.plan)
            if keep(timing, dest):
                if best.replayed:
                    self.engine_notice = (
                        "model.engine is a new build of the chosen plan: the plan was timed before "
                        "--resume, and the engine of that build went with its run's folder"
                    )
                return "model.engine"
        except (BackendFailed, BackendUnavailable) as exc:  # the board went away: the rest stands
            # --resume replays every evaluation and builds the chosen plan once more (_build_again):
            # the engine of that board, with nothing timed again
            when, where = (" once the board answers", "on the board") if self.cfg.remote else ("", "here")
            self.engine_notice = (
                f"the chosen plan's engine was not kept ({exc}); rerun this command with --resume{when}: "
                f"it builds the chosen plan {where} again, nothing else is timed again"
            )
        dest.unlink(missing_ok=True)
        return None

    def _build_again(self, plan: dict[str, int]) -> Any:
        """The chosen plan built and timed once more by this run's session, for its engine only: a
        resumed run whose answer was measured before the interruption had no engine to keep (and
        replaced the one OUTDIR held with none). Its timing is not reported."""
        path = self.workdir / "chosen.onnx"
        self._write_candidate(plan, path)
        try:
            return self.session.measure(path)
        finally:
            path.unlink(missing_ok=True)

    def _engine_calibration(self) -> str | None:
        """What INT8 engines of whole models calibrate on: the data the fidelity check reads (None
        for fp32/fp16, and for trtexec given data: it reads only a table, so the data still feeds
        the fidelity check, the engines get placeholder ranges, and the report says so)."""
        calibration = self.cfg.calibration_data if self.cfg.dtype == "int8" else None
        if calibration is not None and self.backend_name == "trtexec":
            from deployopt.backends.trtexec import is_calibration_table

            if not is_calibration_table(calibration):
                calibration = None
        return calibration

    def _open_session(
        self,
        runs: int | None = None,
        warmup: int | None = None,
        calibrate: bool = True,
        owns_run: bool = True,
    ) -> Any:
        """A session with this run's options. `calibrate=False` for the per-layer sweep: its INT8
        convs carry their own Q/DQ scales (conv_model(int8=True)), and the model's calibration data,
        shaped like the model's inputs, does not fit a conv's input at all. `owns_run=False` for the
        sweep's too: with --remote the end-to-end session removes the run's folder on the board, once."""
        from deployopt.backends.base import MeasureOptions, get_backend
        from deployopt.remote import SHARED_RUN

        cfg = self.cfg
        backend = get_backend(self.backend_name)
        calibration = self._engine_calibration() if calibrate else None
        opts = MeasureOptions(
            dtype=cfg.dtype,
            batch=cfg.batch,
            sms=cfg.sms,
            runs=cfg.runs if runs is None else runs,
            warmup=cfg.warmup if warmup is None else warmup,
            input_shapes=dict(cfg.input_shapes),
            workdir=self.workdir,
            cudnn_engines=cfg.cudnn_engines,
            cudnn_benchmark=cfg.cudnn_benchmark,
            calibration_data=calibration,
            calibration_preprocess=cfg.preprocess if calibration is not None else None,
            timeout_s=cfg.timeout_s,
            extra={
                "target": self.target,
                **self._remote_extra(),
                **self._timing_cache_extra(),
                **({SHARED_RUN: True} if self.cfg.remote and not owns_run else {}),
            },
        )
        return backend.open(opts)

    def _timing_cache_extra(self) -> dict[str, Any]:
        """The TensorRT timing cache every build of this run reads and updates. Candidates differ in
        a few layers' widths: with one cache the layers they share keep the tactics timed for the
        first build (faster builds, and no re-timing noise between two builds of the same layer),
        and only changed shapes are timed. By default a file of the run's own (in its work folder,
        or with --remote in its folder on the board), gone when the run ends."""
        if self.backend_name not in TIMING_CACHE_BACKENDS or self.cfg.no_timing_cache:
            return {}
        if self.cfg.timing_cache:
            return {"timing_cache": str(self.cfg.timing_cache)}
        return {"timing_cache": str(self.workdir / RUN_TIMING_CACHE), "timing_cache_per_run": True}

    def timing_cache_phrase(self) -> str | None:
        """What report.md says of the timing cache, or None where nothing builds TensorRT engines."""
        if self.backend_name not in TIMING_CACHE_BACKENDS:
            return None
        if self.cfg.no_timing_cache:
            return "TensorRT timing cache: none (--no-timing-cache: every build timed its tactics afresh)"
        shared = (
            "shared by every build but the confirmation rounds' (a layer shape's tactics were timed "
            "once; the confirmation rebuilt with tactics timed afresh, as a build of your own would)"
        )
        if self.cfg.timing_cache:
            kept = f"on the board, kept as {Path(self.cfg.timing_cache).name}" if self.cfg.remote else "kept"
            return f"TensorRT timing cache: {self.cfg.timing_cache} ({kept}), {shared}"
        return (
            "TensorRT timing cache: one of this run's own, removed at the end (--timing-cache FILE "
            f"keeps one), {shared}"
        )

    def _remote_extra(self) -> dict[str, Any]:
        """--remote: the board, and a folder of this run's own there (`remote_run`, under the backend's
        usual one), which the sessions remove when they close: a search builds an engine per
        candidate, tens of MB each for a detector, on a board with a 16-64 GB disk."""
        if not self.cfg.remote:
            return {}
        if getattr(self, "_remote_run", None) is None:
            from deployopt.remote import board_name

            token = self.workdir.name.removeprefix("deployopt-work-")  # unique per run, as the workdir
            self._remote_run = board_name(f"optimize-{Path(self.cfg.model_path).stem}-{token}")
        return {"remote": self.cfg.remote, "remote_run": self._remote_run}

    def _final_fidelity(self, best: Evaluation) -> dict[str, Any] | None:
        if not self.cfg.fidelity:
            return None
        data = self.fidelity_of(best.plan)
        if self._is_lossless(best.plan) and data["failures"]:
            raise DeployoptError(
                "internal check failed: the lossless plan changed the outputs "
                f"({data['failures'][0]}); nothing was written — please report this"
            )
        return data

    def _rebatched(self) -> str:
        """What model.onnx's batch is, when --batch / --input-shape rewrote a batch the file fixed:
        `--batch 4` on a static batch-1 export wrote a static batch-4 model without a word, and a
        pipeline feeding it batch 1 failed."""
        shapes = getattr(self.loaded, "input_shapes", {})
        changed = [
            (name, old, shapes[name][0])
            for name, old in getattr(self.loaded, "file_batch", {}).items()
            if shapes.get(name) and shapes[name][0] != old
        ]
        if not changed:
            return ""
        name, old, new = changed[0]
        return (
            f"written with a static batch of {new} ({name!r} is static batch {old} in the input file, "
            f"set to {new} by --batch/--input-shape): a caller feeding batch {old} cannot run it; export "
            "the model with a dynamic batch to keep any"
        )

    def _finish(self, best: Evaluation, fidelity: dict[str, Any] | None, budget_hit: bool) -> OptimizeResult:
        from deployopt.dynamic_dims import restore_dynamic_dims
        from deployopt.fileio import output_set, write_text
        from deployopt.model import save_model
        from deployopt.report import build_report, write_report

        # the fidelity checks are done (fidelity_of would make it again): the reference's onnxruntime
        # session holds the weights twice over (1.2 GB for VGG16's 530 MB), not needed for the write
        self._reference = None
        base = self._by_key[plan_key(self.original)]
        r8 = self._by_key[plan_key(self.round_up)]
        timings = {"input": self.final_timing(base), "round_up_8": self.final_timing(r8), "best": best.timing}
        self._settle_layer_cache()  # nothing measured end to end this run: as its sweep's convs say
        span = self.sweep_samples_span()
        sweep = {
            "shapes": self.sweep_shapes,
            "measured": self.sweep.measured,
            "cached": self.sweep.cached,  # from the journal included
            "from_journal": self.sweep.known,
            "seconds": self.sweep.seconds,
            # [fewest, most] samples per conv of the values timed, read from the cache or replayed
            "samples_per_conv": list(span) if span else None,
            "measured_by": "model (predicted)" if not self.session.backend.measured else self.backend_name,
        }
        # the batch, height and width a dynamic export left open
        written = restore_dynamic_dims(self.build_model(best.plan), self.loaded)
        report = build_report(self, best, fidelity, sweep, budget_hit)
        said = [n for n in (written.batch.notice or self._rebatched(), written.size.notice) if n]
        report["written_batch"] = "; ".join(said) or None
        report["unpriced_notice"] = getattr(self, "unpriced_notice", "") or None
        # what loading changed before the search (constants folded, nodes renamed, shared constants
        # copied, the batch fixed): the written model carries it, so say it as apply does
        report["load_notices"] = list(self.loaded.notices)
        if self.cfg.calibration_data:
            report["calibration_notices"] = self.calibration_notices()
        report["image_preprocess"] = self._image_preprocess()
        if self.cfg.mode == "trim":
            # the rule any trim of this run uses; saying it needs no ranking (no trim may have been built)
            report["trim_order"] = (
                self._ranking_samples()[1]
                if self.cfg.calibration_data
                else "dead channels, then L1 of the producing filters"
            )
            if self.cfg.calibration_data:
                # the gate's sample count the ranking's samples were dealt around (load_trim_samples):
                # `apply` ranks a plan from this OUTDIR that lists no kept channels on the same ones
                report["fidelity_samples"] = self.cfg.fidelity_samples
        # the weights go to model.onnx.data when the input kept them in an external file
        report["external_data"] = bool(getattr(self.loaded, "external_data", False))
        plan_doc = self.plan_document(best.plan)
        # All or nothing: written into a staging folder, then moved into OUTDIR as one set, and
        # only into the OUTDIR this run holds (not one made anew after its removal)
        _check_outdir_ours(self.outdir, self.journal, self._lock)
        try:
            with output_set(self.outdir, OUTPUTS) as staging:
                save_model(written.model, staging / "model.onnx", external_data=report["external_data"])
                write_text(staging / "plan.json", plan_json(plan_doc))
                report["engine"] = self._keep_engine(best, staging)
                report["engine_notice"] = getattr(self, "engine_notice", None)
                write_report(staging, report, self if self.cfg.plots else None)
                _check_outdir_ours(self.outdir, self.journal, self._lock)  # writing took seconds
        except OutputError:  # "No such file" of a staged file: say why, where OUTDIR went meanwhile
            _check_outdir_ours(self.outdir, self.journal, self._lock)
            raise
        self.finished = True  # the results are in place: a Ctrl-C from here on has nothing to resume
        return OptimizeResult(
            outdir=self.outdir,
            mode=self.cfg.mode,
            backend=self.backend_name,
            measured=bool(self.session.backend.measured),
            original=self.original,
            round_up=self.round_up,
            best_plan=best.plan,
            best_label=best.label,
            timings=timings,
            evaluations=self.evaluations,
            sweep=sweep,
            fidelity=fidelity,
            report=report,
        )


def optimize(
    cfg: OptimizeConfig,
    session: Any | None = None,
    layer_cache: LayerCache | None = None,
    progress: ProgressFn | None = None,
    sweep_session: Any | None = None,
) -> OptimizeResult:
    """Run the search; `session` (and `sweep_session`, for the per-layer sweep) let a caller (the
    benchmark) keep backend processes open across many runs."""
    return Optimizer(
        cfg, session=session, layer_cache=layer_cache, progress=progress, sweep_session=sweep_session
    ).run()
