"""`deployopt backends`, `deployopt bench`, `deployopt profile`: time a model on a backend.

Thin layer: parse options into MeasureOptions, open a backend session, render with rich. Every
number printed says it was measured, on what, with its spread and run count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from deployopt.backends.base import (
    DTYPES,
    MEASURING_BACKENDS,
    Backend,
    MeasureOptions,
    Profile,
    default_dtype,
    get_backend,
    get_measuring_backend,
    list_backends,
)
from deployopt.cli.app import (
    app,
    bgr_option,
    calibration_data_option,
    check_timeout,
    console,
    cudnn_benchmark_option,
    cudnn_engines_option,
    err_console,
    image_preprocess,
    input_path,
    mean_option,
    measure_extra,
    note_cudnn_search,
    option_given,
    output_option,
    parse_input_shapes,
    print_json,
    print_table,
    refuse_empty_backend,
    remote_option,
    resize_option,
    scale_option,
    std_option,
    timeout_option,
    timing_cache_option,
)
from deployopt.cli.interrupts import output_complete
from deployopt.errors import DataError, DeployoptError, no_such_file, reraise_interrupt
from deployopt.fidelity import ImagePreprocess
from deployopt.fileio import (
    check_output_dir,
    check_output_file,
    refuse_input_as_output,
    removed_if_left_empty,
    write_json,
    write_json_if_unchanged,
)
from deployopt.prebuilt import is_engine_file, refuse_engine_backend, refuse_engine_options
from deployopt.remote import check_remote_backend
from deployopt.timing import Timing, check_repeat, check_run_counts, counted
from deployopt.waves import fill_percent

TIMING_CACHE_HELP = (
    "tensorrt/trtexec: a TensorRT timing cache the build reads and updates, so the tactics of layer "
    "shapes timed before are not timed again (faster builds, the same tactics); with --remote the "
    "board keeps it under this file's name."
)

OUTPUT_HELP = "Write the JSON result to this file (not '-': --json prints it to stdout)."

BENCH_KEYS = (
    "backend",
    "median_us",
    "iqr_us",
    "ci95_us",
    "runs",
    "warmup",
    "samples_us",
    "timed",
    "environment",
    "model",
    "measured_at",
    "replicates",
)

#: What one replicate of `bench --repeat` does anew, per backend (render_bench, docs/backends.md)
REPLICATE_UNIT = {
    "ort": "a new InferenceSession (graph optimization, memory arena, thread pool)",
    "torch": "a new worker process (CUDA context, green context, model conversion, cuDNN's kernel search)",
    "tensorrt": "a new process that deserializes the engine (built once, by the first if not cached)",
    # trtexec is given the ONNX model each time (--onnx, --saveEngine): it builds the engine again
    "trtexec": "a new trtexec process that builds the engine again (a prebuilt one: loads it)",
}
#: The same with --remote (the result's environment names the board): the runner or trtexec on it.
REMOTE_REPLICATE_UNIT = {
    "tensorrt": "jetson/runner.py run again on the board (a new process that loads the engine)",
    "trtexec": "a new trtexec process on the board that builds the engine again (a prebuilt one: loads it)",
}


@app.command("backends", rich_help_panel="Measure")
def backends_command(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List every measurement backend: available, or why not and what to install."""
    rows = list_backends()
    if any(name == "ort" and ok for name, ok, _ in rows):
        # onnxruntime and onnxruntime-gpu both installed (the CPU one written over the GPU one by
        # `pip install deployopt`): the table's `CPUExecutionProvider` alone did not say why
        from deployopt.backends.ort import warn_mixed_install

        warn_mixed_install(again=True)
    if as_json:
        print_json([{"name": n, "available": ok, "detail": why} for n, ok, why in rows])
        return
    table = Table(title="deployopt backends")
    table.add_column("backend", no_wrap=True)
    table.add_column("available")
    table.add_column("uses / why not")
    for name, ok, why in rows:
        table.add_row(name, Text("yes", style="green") if ok else Text("no", style="red"), why)
    print_table(table)


def _backend(name: str) -> Backend:
    """The named backend, available, or a one-line error that says what to install."""
    from deployopt.errors import BackendUnavailable

    try:
        b = get_measuring_backend(name, "--backend")  # 'model' is refused above
    except ImportError as exc:
        reraise_interrupt(exc)  # a Ctrl-C during the backend's import: interrupted, not broken
        raise BackendUnavailable(f"backend {name!r} cannot be loaded: {exc}") from None
    ok, why = b.availability()
    if not ok:
        raise BackendUnavailable(f"backend {name!r} is unavailable: {why}")
    return b


@contextmanager
def _session(
    backend_name: str, model: Path, *settings: Any, command: str, output: Path | None, **options: Any
) -> Iterator[Any]:
    """The backend session `bench` and `profile` measure in (`settings`, `options`: `_options`'s
    arguments after the backend): -o, the options and the model file checked before anything
    starts (a bad -o must not cost a measurement), the --sms note printed only once the session
    stands (so a refused option stays a one-line error)."""
    b, opts = _checked(backend_name, model, *settings, command=command, output=output, **options)
    with b.open(opts) as session:
        note_cudnn_search(b, opts.sms, opts.cudnn_engines, opts.cudnn_benchmark)
        yield session


def _checked(
    backend_name: str, model: Path, *settings: Any, command: str, output: Path | None, **options: Any
) -> tuple[Backend, MeasureOptions]:
    """`_session`'s checks, and the backend and options a session opens with (`bench --repeat`
    opens one afresh for each replicate)."""
    if output is not None:
        check_output_file(output, dash_hint="use --json for stdout")  # `-` wrote a file named `-`
        refuse_input_as_output(output, [("model", model)], "-o/--output")
        from deployopt.model import refuse_replacing_weights

        # the JSON renamed over the weights file the model reads (external data) ruined the model
        refuse_replacing_weights(model, [output], "give another -o/--output")
    # an engine: refused here, before the backend is looked for, so the line is the same whether
    # TensorRT or trtexec is installed or not (settings are _options' dtype, batch, ...)
    refuse_engine_backend(model, backend_name)
    refuse_engine_options(model, settings[1], options.get("calibration_data"))
    if options.get("timing_cache") is not None and is_engine_file(model):
        raise DeployoptError(
            f"--timing-cache: {model.name} is a prebuilt engine, timed as it was built: nothing is "
            "built, so no tactic is timed; give the ONNX model to build with the cache"
        )
    if backend_name == "model":  # it predicts for a target, and bench / profile take none
        raise DeployoptError(
            "backend 'model' predicts per-conv latency for a GPU target, and bench / profile have no "
            "--target: use `deployopt optimize MODEL --backend model --target T`, `deployopt analyze "
            "MODEL --target T` or `deployopt staircase --target T`"
        )
    remote = options.get("remote")
    check_remote_backend(backend_name, remote)
    if backend_name == "trtexec" and option_given("warmup"):  # local and --remote alike
        from deployopt.backends.trtexec import refuse_warmup_runs

        refuse_warmup_runs(settings[4])
    b = get_backend(backend_name) if remote else _backend(backend_name)  # TensorRT lives on the board
    opts = _options(b, *settings, model_path=model, **options)
    from deployopt.model import require_model_file

    require_model_file(model, command)  # the loader's wording; a device or pipe was "no such file"
    return b, opts


def _options(
    backend: Backend,
    dtype: str | None,
    batch: int | None,
    sms: int | None,
    runs: int,
    warmup: int,
    input_shape: list[str] | None,
    timeout: float,
    workdir: Path | None = None,
    cudnn_engines: int | None = None,
    cudnn_benchmark: bool = True,
    calibration_data: Path | None = None,
    remote: str | None = None,
    model_path: Path | None = None,
    calibration_preprocess: ImagePreprocess | None = None,
    timing_cache: Path | None = None,
) -> MeasureOptions:
    extra = measure_extra(remote, timing_cache)  # a backend without TensorRT engines refuses a cache
    from_model = dtype is None
    if dtype is None:
        dtype = default_dtype(backend, model_path, deployment=True)
        if dtype == "int8":  # a Q/DQ model's: a GPU without INT8 then says the model is quantized
            extra["int8_from_qdq"] = True
    if dtype not in DTYPES:
        if from_model and model_path is not None:  # the model's own typing (ort: bf16, mixed fp32/fp16)
            from deployopt.precision import cannot_run_typed

            raise DeployoptError(cannot_run_typed(backend.name, backend.dtypes, Path(model_path).name, dtype))
        raise DeployoptError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if dtype == "int8" and "int8" not in backend.dtypes:
        raise DeployoptError(
            f"--dtype int8: backend {backend.name!r} cannot run int8; INT8 runs only on TensorRT "
            "(--backend tensorrt or trtexec)"
        )
    if sms is not None and not backend.can_limit_sms:
        raise DeployoptError(
            f"--sms: backend {backend.name!r} cannot limit the GPU's SMs (the torch backend can, "
            "through green contexts)"
        )
    if batch is not None and batch < 1:
        raise DeployoptError("--batch must be at least 1")
    check_run_counts(runs, warmup)
    check_timeout(timeout)
    if calibration_data is not None:
        if dtype != "int8":
            raise DeployoptError("--calibration-data calibrates INT8: use it with --dtype int8")
        if not calibration_data.exists():
            raise no_such_file(calibration_data, DataError, folder=True)
        if backend.name == "trtexec":  # before the model is read: trtexec reads only a table
            from deployopt.backends.trtexec import refuse_calibration_data

            refuse_calibration_data(calibration_data)
    shapes = parse_input_shapes(input_shape)
    from deployopt.model import check_batch_agrees

    check_batch_agrees(batch, shapes, cli=True)  # the library's check, in the options' words
    return MeasureOptions(
        dtype=dtype,
        batch=batch,
        sms=sms,
        runs=runs,
        warmup=warmup,
        timeout_s=timeout,
        input_shapes=shapes,
        workdir=workdir,
        cudnn_engines=cudnn_engines,
        cudnn_benchmark=cudnn_benchmark,
        calibration_data=str(calibration_data) if calibration_data is not None else None,
        calibration_preprocess=calibration_preprocess if calibration_data is not None else None,
        extra=extra,
    )


def bench_json(timing: Timing) -> dict[str, Any]:
    """The bench result document: exactly the documented keys, in order ("model", what was timed,
    where the timing recorded it: `bench` always does, so `compare` can check a pair's identity;
    "measured_at", when the timed run returned, on this machine's clock: with --remote the host's,
    as for every other backend)."""
    full = timing.to_json()
    return {k: full[k] for k in BENCH_KEYS if k in full}


def _environment_line(env: dict[str, Any]) -> str:
    libs = env.get("libraries", {})
    parts = [str(env.get("device") or env.get("gpu") or "")]
    if env.get("remote"):  # --remote: which board, as optimize's "measured on" says it
        parts[0] = f"{parts[0] or 'the GPU'} at {env['remote']}"
    for key in ("compute_capability", "sms"):
        if env.get(key) is not None:
            parts.append(f"{key.replace('_', ' ')} {env[key]}")
    for key, word in (("board", "board"), ("nvpmodel", "power mode")):  # the Jetson runner's
        if env.get(key):
            parts.append(f"{word} {env[key]}")
    clocks = env.get("clocks") or {}
    if clocks.get("sm_clock_mhz"):
        # a reading taken when the environment was collected may be of an idle GPU (the H200 idles
        # at 345 MHz, runs at 1980): the line says when it was read
        when = clocks.get("sm_clock_read") or "(read outside the timed run)"
        parts.append(f"SM clock {clocks['sm_clock_mhz']:g} MHz {when}")
    if env.get("tensorrt"):  # the tensorrt and trtexec backends record no Python or libraries
        parts.append(f"TensorRT {env['tensorrt']}")
    if env.get("cpu"):
        parts.append(f"CPU {env['cpu']}")
    if env.get("python"):
        parts.append(f"Python {env['python']}")
    parts += [f"{k} {v}" for k, v in libs.items()]
    if env.get("cudnn"):
        parts.append(f"cuDNN {env['cudnn']}")
    return ", ".join(p for p in parts if p)


def _backend_option() -> Any:
    """bench's and profile's options that mean the same in both (one declaration each)."""
    return typer.Option(
        None,
        "--backend",
        "-b",
        metavar="BACKEND",
        help="ort | torch | tensorrt | trtexec (default: ort; with --remote, tensorrt: jetson/runner.py on "
        "the board)",
        show_default=False,
    )


def default_backend(backend: str | None, remote: str | None) -> str:
    """--backend as given, else ort here and, with --remote, the runner on the board (`tensorrt`), as
    optimize's auto picks: ort cannot run there, and `bench --remote HOST` was refused with
    "not 'ort'", a backend the user never named. An empty --backend (an unset shell variable) is one
    line, as optimize's and staircase's: it timed ort without a word."""
    refuse_empty_backend("--backend", backend, MEASURING_BACKENDS)  # 'model' is refused here
    if backend:
        return backend
    return "tensorrt" if remote else "ort"


def _dtype_option() -> Any:
    return typer.Option(
        None,
        "--dtype",
        metavar="DTYPE",
        help="fp16 | fp32 | int8 (default: int8 for a Q/DQ model, else fp16 where the backend runs it, as "
        "deployed; ort runs a model as it is typed: fp32, or fp16/int8 for a model typed so)",
    )


def _batch_option() -> Any:
    return typer.Option(None, "--batch", metavar="N", help="Override the batch dimension.")


def _sms_option() -> Any:
    return typer.Option(None, "--sms", metavar="N", help="Limit the GPU to N SMs (torch: green context).")


def _input_shape_option() -> Any:
    return typer.Option(
        None, "--input-shape", metavar="NAME:SHAPE", help="NAME:1x3x224x224 (repeatable) for dynamic inputs."
    )


@app.command("bench", rich_help_panel="Measure")
def bench_command(
    model: Path = typer.Argument(
        ...,
        help="ONNX model to time, or a serialized TensorRT engine (.engine/.plan/.trt) to time as it was "
        "built (--backend tensorrt or trtexec).",
        parser=input_path("model", "an .onnx or .engine file"),
    ),
    backend: Optional[str] = _backend_option(),
    dtype: Optional[str] = _dtype_option(),
    batch: Optional[int] = _batch_option(),
    sms: Optional[int] = _sms_option(),
    runs: int = typer.Option(
        100, "--runs", metavar="N", help="Timed samples (one forward pass / graph replay each)."
    ),
    warmup: int = typer.Option(20, "--warmup", metavar="N", help="Untimed runs first."),
    repeat: int = typer.Option(
        1,
        "--repeat",
        metavar="N",
        help="Independent measurements, each in a fresh session (ort: a new InferenceSession; torch: a "
        "new worker process; tensorrt, trtexec: a new process loading the engine; --remote: the runner "
        "again), each with its own warm-up and --runs; compare then tests the replicates' medians, "
        "which shows how much runs vary.",
    ),
    append: bool = typer.Option(
        False,
        "--append",
        help="Add this run (or the --repeat N runs) as replicates to the bench result in -o FILE (written "
        "new where absent): bench the baseline and the current model in turns, each into its own file, "
        "and each side's replicates span the same host load or board temperature. FILE must hold runs "
        "of the same model (sha256), backend, --runs, --warmup and setup.",
    ),
    input_shape: Optional[list[str]] = _input_shape_option(),
    timeout: float = timeout_option(),
    cudnn_engines: Optional[int] = cudnn_engines_option(),
    cudnn_benchmark: bool = cudnn_benchmark_option(),
    calibration_data: Optional[Path] = calibration_data_option(),
    mean: Optional[str] = mean_option(),
    std: Optional[str] = std_option(),
    bgr: bool = bgr_option(),
    scale: Optional[float] = scale_option(),
    resize: Optional[str] = resize_option(),
    remote: Optional[str] = remote_option(),
    timing_cache: Optional[Path] = timing_cache_option(TIMING_CACHE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    output: Optional[Path] = output_option(None, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Time a model end to end: median, IQR, 95 % CI, runs, what was timed, environment."""
    check_repeat(repeat)  # before anything starts: a typo must not cost a measurement
    if append and output is None:
        raise DeployoptError("--append adds runs to the bench result in a file: give it with -o FILE")
    backend = default_backend(backend, remote)
    settings = (dtype, batch, sms, runs, warmup, input_shape, timeout)
    preprocess = image_preprocess(calibration_data, mean, std, bgr, scale, resize)
    b, opts = _checked(
        backend,
        model,
        *settings,
        command="bench",
        output=output,
        cudnn_engines=cudnn_engines,
        cudnn_benchmark=cudnn_benchmark,
        calibration_data=calibration_data,
        calibration_preprocess=preprocess,
        remote=remote,
        timing_cache=timing_cache,
    )
    target, identity = None, None
    if append:  # FILE checked before anything is timed: another model's or backend's, not a result
        from deployopt.regression import append_target, check_append_setup

        assert output is not None  # refused above
        identity = _model_identity(model)
        target = append_target(output, b.name, identity, opts.runs, opts.warmup)
    parts = []
    for i in range(repeat):  # each replicate a fresh session, closed before the next one opens
        with b.open(opts) as session:
            if i == 0:
                note_cudnn_search(b, opts.sms, opts.cudnn_engines, opts.cudnn_benchmark)
                if identity is None:  # before timing: a file that cannot be read costs no run
                    identity = _model_identity(model)
            part = session.measure(model)  # with its model and measured_at (Session records them)
        # the setup the backend recorded, of every run (the first's refused before the rest): a
        # board's clock lock or power mode can change between the runner's processes
        if target is not None:
            check_append_setup(target, part)
        elif parts:
            check_replicate_setup(parts[0], part, i + 1, repeat)
        parts.append(part)
    if target is not None:
        timing = target.timing.appended(parts)  # its model record kept: the same sha256, checked
    else:
        timing = parts[0] if repeat == 1 and not append else Timing.from_replicates(parts)
        timing.model = identity

    def render() -> None:
        render_bench(timing, f"{model.name} on {backend}")

    if not append:
        _emit(bench_json(timing), as_json, output, render)
    else:  # FILE rewritten whole, and only if no other run changed it while this one was timed
        expected = None if target is None else target.data
        done = "added" if target is not None else "wrote"
        _emit(
            bench_json(timing),
            as_json,
            output,
            render,
            write=partial(write_json_if_unchanged, expected=expected),
            wrote=f"{done} {counted(repeat, 'replicate')} to {output} "
            f"({counted(timing.replicate_count, 'replicate')} now)",
        )
    warn_clock_slowdown(timing.environment)
    note_too_few_to_compare(timing)


def check_replicate_setup(first: Timing, part: Timing, number: int, repeat: int) -> None:
    """`bench --repeat`: one DataError line, nothing written, where replicate `number` was timed in
    another setup than the first (what `compare --strict` flags: setup_differences). The result
    keeps one environment, so a board whose clock was unlocked (or power mode changed) between the
    runner's processes read as locked throughout, and compare --strict passed it."""
    from deployopt.regression import setup_differences

    diffs = setup_differences(first, part)
    if diffs:
        raise DataError(
            f"--repeat {repeat}: replicate {number} was timed in another setup than replicate 1 "
            f"({'; '.join(diffs)}): nothing written (the replicates of one result must share a setup); "
            "bench again once the setup holds"
        )


def note_too_few_to_compare(timing: Timing) -> None:
    """One stderr note when a bench result has fewer samples than `compare` (at its default
    --alpha) can ever judge: bench accepts `--runs 3`, and compare refused the file only later.

    A result of several replicates (`--repeat`, `--append`) is judged on their medians, not on its
    samples, so its note counts replicates and says what that test needs (timing.
    REPLICATE_MIN_PER_SIDE: 2 a side; until 2026-12-07 also 1 against 3): `--runs 1 --repeat 3` was
    told to use --runs 5, which compare does not ask of it. Said where its runs are as short as a
    one-run result's note is about."""
    from deployopt.regression import DEFAULT_ALPHA
    from deployopt.timing import REPLICATE_MIN_PER_SIDE, min_samples

    need = min_samples(DEFAULT_ALPHA)
    k = timing.replicate_count
    if k < 2:
        if timing.runs >= need:
            return
        text = (
            f"note: {counted(timing.runs, 'run')}: `deployopt compare` needs at least {need} per side (at "
            f"its default --alpha {DEFAULT_ALPHA:g}) to judge a difference between two results this short; "
            f"use --runs {need} or more to compare this"
        )
    else:
        sizes = sorted({r.runs for r in timing.replicates or []})
        if sizes[0] >= need:
            return
        each = counted(sizes[0], "run") if len(sizes) == 1 else f"{sizes[0]}–{sizes[-1]} runs"
        need_k = REPLICATE_MIN_PER_SIDE  # 2: every replicated result has enough of its own
        text = (
            f"note: {k} replicates of {each}: `deployopt compare` judges a result of several replicates by "
            f"a t-test on their medians, not on the runs within each, and needs {need_k} replicates a "
            f"side: {k} is enough against another result of {need_k} or more, not against a result of one "
            "run (bench that side with --repeat too)"
        )
    err_console.print(text, style="yellow", markup=False, highlight=False, soft_wrap=True)


def warn_clock_slowdown(env: dict[str, Any]) -> None:
    """One stderr line when power or heat held the GPU's clock down during the timed run
    (deployopt.clocks): the latency is then slower than this GPU's, and nothing else would say so;
    and a note when a board's clock was not locked (it then follows DVFS)."""
    from deployopt.clocks import held_down_phrase, unlocked_phrase

    held = held_down_phrase(env)
    if held:
        err_console.print(
            f"warning: the GPU's clock was held down while this was timed ({held}): "
            "the latency may be slower than this GPU's; check its cooling and power limit, and time again",
            style="yellow",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    unlocked = unlocked_phrase(env)
    if unlocked:
        err_console.print(f"note: {unlocked}", style="yellow", markup=False, highlight=False, soft_wrap=True)


def _model_identity(model: Path) -> dict[str, str]:
    """What `bench -o` timed (file name, sha256), for `compare`'s same-model check."""
    from deployopt.errors import ModelError
    from deployopt.regression import model_identity

    try:
        return model_identity(model)
    except OSError as exc:
        raise ModelError(f"cannot read {model}: {exc.strerror or exc}") from None


def render_bench(timing: Timing, title: str) -> None:
    """`bench`'s table: the median with its spread, runs, what was timed and where."""
    table = Table(title=f"{title} (measured)", show_header=False)
    table.add_column("what", no_wrap=True)
    table.add_column("value")
    pooled = " (all replicates' runs together)" if timing.replicate_count > 1 else ""
    table.add_row("median", f"{timing.median_us:.1f} µs{pooled}")
    if timing.spread_known:
        table.add_row("IQR", f"{timing.iqr_us:.1f} µs")
        # replicates: a t-interval on their medians (Timing.ci95_us), which says so; the pooled
        # samples' bootstrap left the variation between runs out ([1019.9, 1021.1] µs beside
        # replicate medians 982.8, 1020.9, 1025.3)
        if timing.ci_known:
            lo, hi = timing.ci95_us
            ci = f"[{lo:.1f}, {hi:.1f}] µs {timing.ci_phrase()}"
        else:
            ci = timing.ci_text()
        table.add_row("95% CI of median", ci)
    else:  # one sample: a spread of 0 and a CI [x, x] would look exact
        table.add_row("IQR", timing.spread_text())
        table.add_row("95% CI of median", timing.spread_text())
    table.add_row("runs / warm-up", f"{timing.runs} / {timing.warmup}")
    if timing.replicate_count > 1:  # bench --repeat: each one's median, and how far apart they are
        units = REMOTE_REPLICATE_UNIT if timing.environment.get("remote") else REPLICATE_UNIT
        unit = units.get(timing.backend, "a fresh session")
        table.add_row("replicates", f"{timing.replicate_text()}; each {unit}, with its own warm-up")
    build_s = timing.environment.get("engine_build_s")
    if build_s is not None:  # TensorRT built the engine for this run (not reused, not prebuilt)
        table.add_row("engine build", f"{build_s:.1f} s (measured wall time, before the timed runs)")
    table.add_row("timed", timing.timed)
    table.add_row("environment", _environment_line(timing.environment))
    print_table(table)


def _emit(
    doc: dict[str, Any],
    as_json: bool,
    output: Path | None,
    render: Callable[[], None],
    write: Callable[[Path, Any], None] = write_json,
    wrote: str | None = None,
) -> None:
    """How `bench` and `profile` end: the JSON written to -o (by `write`), then printed (--json) or
    `render`ed as a table followed by where the file went (`wrote`: the line that says so)."""
    if output is not None:
        write(output, doc)
        output_complete(output)  # a Ctrl-C from here on (the table, the notes) says it is complete
    if as_json:
        print_json(doc)
        return
    render()
    if output is not None:
        console.print(wrote or f"wrote {output}", highlight=False)


def _fmt_dims(d: Any) -> str:
    return "×".join(str(x) for x in d) if d else "-"


def render_profile(profile: Profile, kernels: bool) -> None:
    table = Table(title=f"per-layer time on {profile.backend} (measured, {counted(profile.runs, 'run')})")
    # names folded, not cut: TensorRT's fused layer names run past any terminal, a no-wrap name
    # column squeezed the µs and share columns to nothing, and cut with '…' three ONNX nodes read
    # `layer1.0.conv…` alike; print_table keeps each folded column FOLD_MIN_WIDTH wide (at 40
    # columns the layer and op went to nothing) and the numbers whole
    table.add_column("layer", overflow="fold")
    table.add_column("op", overflow="fold")
    table.add_column("median\nµs", justify="right", no_wrap=True)
    table.add_column("IQR\nµs", justify="right", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    table.add_column("ONNX nodes", overflow="fold")
    for layer in profile.layers:
        table.add_row(
            layer.name,
            str(layer.extra.get("op") or layer.extra.get("layer_type") or ""),
            f"{layer.time_us:.1f}",
            "n/a" if layer.iqr_us is None else f"{layer.iqr_us:.1f}",
            f"{100 * layer.share:.1f}%",
            ", ".join(layer.onnx_nodes) if layer.onnx_nodes != [layer.name] else "=",
        )
    print_table(table)
    # a sum of medians, which read as an end-to-end time: gaps between layers and run-to-run
    # correlation are not in it
    console.print(
        f"sum of the layer medians {profile.total_us:.1f} µs (not an end-to-end latency: `deployopt "
        f"bench` times that) — {profile.timed}",
        highlight=False,
        soft_wrap=True,
    )
    if any(layer.iqr_us is None for layer in profile.layers) and profile.layers:
        console.print(
            "IQR n/a: the backend reports one number per layer (trtexec's profile: an average and a "
            "median over its queries) or the layer ran once",
            highlight=False,
            soft_wrap=True,
        )
    where = _environment_line(profile.environment)
    if where:
        console.print(f"measured on: {where}", highlight=False, soft_wrap=True, markup=False)
    lists = (
        ("removed by onnxruntime (folded, no kernel)", "onnx_nodes_removed"),
        ("in no layer (not traced to a kernel)", "onnx_nodes_unmapped"),
        ("folded at load by deployopt (constant subgraphs)", "onnx_nodes_folded_at_load"),
    )
    for label, key in lists:
        nodes = getattr(profile, key, None)
        if nodes:
            console.print(f"ONNX nodes {label}: {', '.join(nodes)}", highlight=False, soft_wrap=True)
    if not kernels:
        return
    # One block per kernel rather than a table: kernel names are long and the numbers are many.
    console.print(
        Text.assemble(
            "\n", ("kernels per layer", "bold"), " (last profiled pass; waves over the SMs the run had)"
        )
    )
    for layer in profile.layers:
        if not layer.kernels:
            continue
        console.print(layer.name, style="bold", highlight=False, soft_wrap=True)
        for k in layer.kernels:
            regs = "-" if k.registers_per_thread is None else str(k.registers_per_thread)
            smem = "-" if k.shared_memory_bytes is None else f"{k.shared_memory_bytes / 1024:.0f}K"
            per_sm = "-" if k.blocks_per_sm is None else f"{k.blocks_per_sm:g}"
            waves = "-" if k.waves is None else str(k.waves)
            tail = "-" if k.tail_fill is None else f"{fill_percent(k.tail_fill)}%"
            console.print(f"  {k.name}", highlight=False, soft_wrap=True, markup=False)
            console.print(
                f"    {k.duration_us:.1f} µs  grid {_fmt_dims(k.grid)}  block {_fmt_dims(k.block)}  "
                f"regs {regs}  smem {smem}  blocks/SM {per_sm}  tile {_fmt_dims(k.tile)}  "
                f"waves {waves}  tail fill {tail}",
                highlight=False,
                soft_wrap=True,
            )


@app.command("profile", rich_help_panel="Measure")
def profile_command(
    model: Path = typer.Argument(
        ...,
        help="ONNX model to profile, or a serialized TensorRT engine (.engine/.plan/.trt) as it was built "
        "(--backend tensorrt or trtexec).",
        parser=input_path("model", "an .onnx or .engine file"),
    ),
    backend: Optional[str] = _backend_option(),
    dtype: Optional[str] = _dtype_option(),
    batch: Optional[int] = _batch_option(),
    sms: Optional[int] = _sms_option(),
    runs: int = typer.Option(20, "--runs", metavar="N", help="Profiled forward passes."),
    warmup: int = typer.Option(10, "--warmup", metavar="N", help="Untimed runs first."),
    input_shape: Optional[list[str]] = _input_shape_option(),
    kernels: bool = typer.Option(False, "--kernels", help="GPU kernels per layer (torch on CUDA)."),
    timeout: float = timeout_option(),
    cudnn_engines: Optional[int] = cudnn_engines_option(),
    cudnn_benchmark: bool = cudnn_benchmark_option(),
    calibration_data: Optional[Path] = calibration_data_option(),
    mean: Optional[str] = mean_option(),
    std: Optional[str] = std_option(),
    bgr: bool = bgr_option(),
    scale: Optional[float] = scale_option(),
    resize: Optional[str] = resize_option(),
    remote: Optional[str] = remote_option(),
    timing_cache: Optional[Path] = timing_cache_option(TIMING_CACHE_HELP),
    trace_dir: Optional[Path] = output_option(
        None,
        "--trace-dir",
        help="Keep the profiler trace here (torch, ort: chrome trace JSON; tensorrt: its engines too).",
        folder=True,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    output: Optional[Path] = output_option(None, "--output", "-o", help=OUTPUT_HELP),
) -> None:
    """Per-layer time with share of total; --kernels adds grid/block/registers/tile/waves per kernel."""
    backend = default_backend(backend, remote)
    settings = (dtype, batch, sms, runs, warmup, input_shape, timeout)
    preprocess = image_preprocess(calibration_data, mean, std, bgr, scale, resize)
    if trace_dir is not None:  # a file there was "File exists" once the profile had run (torch)
        check_output_dir(trace_dir)
    session_cm = _session(
        backend,
        model,
        *settings,
        command="profile",
        output=output,
        workdir=trace_dir,
        cudnn_engines=cudnn_engines,
        cudnn_benchmark=cudnn_benchmark,
        calibration_data=calibration_data,
        calibration_preprocess=preprocess,
        remote=remote,
        timing_cache=timing_cache,
    )
    before = _files_in(trace_dir)
    with removed_if_left_empty(trace_dir), session_cm as session:
        profile = session.profile(model, kernels=kernels)
    doc = profile.to_json()
    # the files the backend says it kept (ort, torch); every file new or changed in DIR since the
    # run began only where it says none (TensorRT's engines), which took another run's trace
    # written into the same DIR meanwhile for this one's
    told = profile.trace_files
    traces = [str(p) for p in told] if told else _written_since(trace_dir, before)
    if trace_dir is not None:  # what --trace-dir kept, which was said nowhere (DIR/m.ort_profile.json)
        doc["trace"] = traces

    def render() -> None:
        render_profile(profile, kernels)
        if traces:
            console.print(f"wrote {', '.join(traces)}", highlight=False, soft_wrap=True, markup=False)

    _emit(doc, as_json, output, render)
    warn_clock_slowdown(profile.environment)  # as bench: a board left to DVFS, a clock held down


def _files_in(folder: Path | None) -> dict[Path, tuple[int, int]]:
    """Every file under `folder` with its mtime and size (none where there is no folder)."""
    if folder is None or not folder.is_dir():
        return {}
    found = {}
    for path in sorted(folder.rglob("*")):
        with suppress(OSError):  # gone meanwhile
            if path.is_file():
                st = path.stat()
                found[path] = (st.st_mtime_ns, st.st_size)
    return found


def _written_since(folder: Path | None, before: dict[Path, tuple[int, int]]) -> list[str]:
    """The files under `folder` new or changed since `before` (`_files_in`): what the backend
    wrote there (onnxruntime's and torch's trace, TensorRT's engines), whichever backend ran."""
    return [str(path) for path, stamp in _files_in(folder).items() if before.get(path) != stamp]
