"""`deployopt optimize`: the main job. Parses options, runs deployopt.optimize, renders with rich."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from deployopt.cli.app import (
    Interrupted,
    app,
    bgr_option,
    calibration_data_option,
    check_timeout,
    console,
    cudnn_benchmark_option,
    cudnn_engines_option,
    err_console,
    escape_controls,
    image_preprocess,
    input_path,
    mean_option,
    note_cudnn_search,
    option_given,
    output_option,
    parse_input_shapes,
    print_json,
    print_table,
    progress_bar,
    refuse_empty_backend,
    remote_option,
    remote_target_option,
    resize_option,
    resolve_target,
    scale_option,
    std_option,
    timeout_option,
    timing_cache_option,
)
from deployopt.cli.progress import LineProgress
from deployopt.errors import DeployoptError
from deployopt.report import clock_slowdown_note, describe_gate, gate_checks
from deployopt.targets import sm_count


def _progress_callback(progress: Progress) -> Any:
    tasks: dict[str, Any] = {}

    def on_event(kind: str, **info: Any) -> None:
        if kind == "sweep":
            total = info.get("total") or 0
            if "sweep" not in tasks:
                tasks["sweep"] = progress.add_task("per-layer sweep", total=max(total, 1))
            progress.update(
                tasks["sweep"], completed=info.get("done", 0) if total else 1, total=max(total, 1)
            )
        elif kind == "eval":
            if "eval" not in tasks:
                tasks["eval"] = progress.add_task("end-to-end evaluations", total=info.get("total"))
            timing = info.get("timing")
            label = info.get("label", "")
            if len(label) > 48:  # cut, a move's table value would lose its "measured"/"predicted"
                label = label.split(" (", 1)[0][:48]
            desc = f"end-to-end: {label}"
            if timing is not None:  # the live line is printed too: it says which it is
                desc += f" {timing.median_us:.1f} µs {'measured' if timing.measured else 'predicted'}"
            progress.update(tasks["eval"], completed=info.get("done", 0), description=desc)
        elif kind == "traffic":
            fit = info["fit"]
            how = "priced in the table" if fit.used else "not priced"
            progress.console.print(
                Text.assemble(("traffic", "cyan"), f" non-conv ops: {fit.why}; {how}"), soft_wrap=True
            )
        elif kind == "confirm":  # the answer rebuilt against the faster baseline: kept or not
            from deployopt.report import confirmation_line

            progress.console.print(
                Text.assemble(
                    ("confirm", "green" if info.get("kept") else "yellow"), f" {confirmation_line(info)}"
                ),
                soft_wrap=True,
            )
        elif kind == "refused":
            progress.console.print(
                Text.assemble(("refused", "yellow"), f" {info.get('label')}: {info.get('reason')}"),
                soft_wrap=True,
            )

    return on_event


#: optimize's timing options and their defaults, which the model backend does not use (it measures
#: nothing): a value given other than these gets a note (`_note_unused_timing_options`)
TIMING_DEFAULTS = {"--runs": 100, "--warmup": 20, "--sweep-runs": 10}


@app.command("optimize", rich_help_panel="Optimize")
def optimize_command(
    ctx: typer.Context,
    model: Path = typer.Argument(
        ..., help="The ONNX model to optimize.", parser=input_path("model", "an .onnx file")
    ),
    target: Optional[str] = remote_target_option("GPU target (see `deployopt targets`)"),
    backend: str = typer.Option(
        "auto",
        "--backend",
        "-b",
        metavar="BACKEND",
        help="auto | tensorrt | trtexec | torch | ort | model (predicted only).",
    ),
    sms: Optional[int] = typer.Option(
        None, "--sms", metavar="N", help="Limit the GPU (green context) and the model to N SMs."
    ),
    input_shape: Optional[list[str]] = typer.Option(
        None, "--input-shape", metavar="NAME:SHAPE", help="NAME:1x3x224x224 (repeatable)."
    ),
    batch: Optional[int] = typer.Option(None, "--batch", metavar="N", help="Batch size to optimize for."),
    dtype: Optional[str] = typer.Option(
        None,
        "--dtype",
        metavar="DTYPE",
        help="fp16 | fp32 | int8 (default: int8 for a Q/DQ model where the backend runs int8, else fp16 "
        "where the backend runs it).",
    ),
    mode: str = typer.Option("lossless", "--mode", metavar="MODE", help="lossless | trim | grow."),
    max_trim: Optional[float] = typer.Option(
        None,
        "--max-trim",
        metavar="FLOAT",
        help="trim: largest share of a group's channels removed (default 0.10).",
    ),
    min_cosine: Optional[float] = typer.Option(
        None,
        "--min-cosine",
        metavar="FLOAT",
        help="trim: refuse a plan whose outputs' cosine to the input model's falls below this on any "
        "of the fidelity gate's calibration samples (4, spread over --calibration-data, none of them "
        "among those the trims are ranked on; default 0.99).",
    ),
    min_top1: Optional[float] = typer.Option(
        None,
        "--min-top1",
        metavar="FLOAT",
        help="trim: refuse a plan whose top-1 agrees with the input model's on less than this share "
        "of the rows of the fidelity gate's calibration samples (default 0.99; classifiers only).",
    ),
    top1_outputs: Optional[str] = typer.Option(
        None,
        "--top1-outputs",
        metavar="NAME[,NAME...]",
        help="trim: the outputs that are class scores, held to --min-top1, or none (default: every "
        "[N, classes] output but a box-like [N, 2..4] beside other outputs, one named box/emb/feat…, "
        "and one whose rows are L2-normalised).",
    ),
    fidelity_gate: bool = typer.Option(
        True,
        "--fidelity-gate/--no-fidelity-gate",
        help="trim: --no-fidelity-gate reports each plan's fidelity without refusing any, for widths "
        "you will fine-tune (the answer may change the outputs; the report says by how much).",
    ),
    max_evals: int = typer.Option(
        40, "--max-evals", metavar="N", help="End-to-end evaluations at most (baselines included)."
    ),
    runs: int = typer.Option(
        TIMING_DEFAULTS["--runs"], "--runs", metavar="N", help="Timed runs per measurement."
    ),
    warmup: int = typer.Option(
        TIMING_DEFAULTS["--warmup"], "--warmup", metavar="N", help="Warm-up runs per measurement."
    ),
    sweep_runs: int = typer.Option(
        TIMING_DEFAULTS["--sweep-runs"],
        "--sweep-runs",
        metavar="N",
        help="Samples per conv in the per-layer sweep.",
    ),
    cudnn_engines: Optional[int] = cudnn_engines_option(),
    cudnn_benchmark: bool = cudnn_benchmark_option(),
    traffic_term: bool = typer.Option(
        True,
        "--traffic-term/--no-traffic-term",
        help="Price the memory traffic of the ops between the convs (Add, Relu, Concat …) at a µs/MB "
        "fitted to this run's end-to-end measurements, once they establish it; --no-traffic-term "
        "searches on the per-layer conv table alone.",
    ),
    calibration_data: Optional[Path] = calibration_data_option(
        "Images or .npy/.npz for fidelity checks (random inputs if omitted); with --mode trim also "
        "what the trimmed channels are ranked on (least activation × reader weight first; by filter "
        "L1 if omitted); with --dtype int8 also what TensorRT calibrates on (trtexec cannot: its "
        "engines use placeholder ranges, and the report says so). Images are made into tensors by "
        "--scale/--mean/--std/--bgr/--resize; .npy/.npz are fed as they are."
    ),
    mean: Optional[str] = mean_option(),
    std: Optional[str] = std_option(),
    bgr: bool = bgr_option(),
    scale: Optional[float] = scale_option(),
    resize: Optional[str] = resize_option(),
    remote: Optional[str] = remote_option(),
    timing_cache: Optional[Path] = timing_cache_option(
        "tensorrt/trtexec: a TensorRT timing cache every build reads and updates, kept for the next "
        "run (default: one of the run's own, removed at the end); with --remote the board keeps it "
        "under this file's name."
    ),
    no_timing_cache: bool = typer.Option(
        False,
        "--no-timing-cache",
        help="tensorrt/trtexec: every build times its tactics afresh (no cache shared between the "
        "candidates' builds).",
    ),
    timeout: float = timeout_option(
        "Seconds per model built and timed before it is given up (ort runs in-process, with no limit)."
    ),
    outdir: Optional[Path] = output_option(
        None, "-o", "--out", help="Output folder (default <model>.deployopt/).", folder=True
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run from its journal."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing output folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Find channel widths with the lowest measured latency on the target; write model, plan, report."""
    from dataclasses import replace

    from deployopt.backends.base import get_backend
    from deployopt.optimize import (
        OptimizeConfig,
        Optimizer,
        check_before_measuring,
        resolve_backend_name,
        resumed_target,
    )

    trim_only = (max_trim, min_cosine, min_top1, top1_outputs)
    if mode != "trim" and (any(v is not None for v in trim_only) or not fidelity_gate):
        # --max-trim 0.3 without --mode trim ran lossless without a word
        raise DeployoptError(
            "--max-trim, --min-cosine, --min-top1, --top1-outputs and --no-fidelity-gate apply to "
            "--mode trim only (lossless and grow keep the outputs equal)"
        )
    from deployopt.fidelity import parse_top1_outputs

    top1_names = parse_top1_outputs(top1_outputs)
    shapes = parse_input_shapes(input_shape)  # --batch against them: check_config, below
    preprocess = image_preprocess(calibration_data, mean, std, bgr, scale, resize)
    check_timeout(timeout)
    _check_backend_and_dtype(backend, dtype)
    backend_name = resolve_backend_name(backend, remote)  # --remote: auto is the runner on the board
    b = get_backend(backend_name)
    if not remote:  # no board to ask: click's missing --target first, as before
        target = resolve_target(ctx, target, remote, timeout)
    cfg = OptimizeConfig(
        model_path=model,
        target=target or "",  # --remote without --target: the board's, read below
        backend=backend_name,
        sms=sms,
        input_shapes=shapes,
        batch=batch,
        dtype=dtype,  # None: the library's default (int8 for a Q/DQ model, else fp16 where it runs)
        mode=mode,
        **({} if max_trim is None else {"max_trim": max_trim}),
        max_evals=max_evals,
        runs=runs,
        warmup=warmup,
        sweep_runs=sweep_runs,
        cudnn_engines=cudnn_engines,
        cudnn_benchmark=cudnn_benchmark,
        traffic_term=traffic_term,
        calibration_data=str(calibration_data) if calibration_data else None,
        preprocess=preprocess,
        fidelity_gate=fidelity_gate,
        **({} if min_cosine is None else {"min_cosine": min_cosine}),
        **({} if min_top1 is None else {"min_top1": min_top1}),
        top1_outputs=top1_names,
        remote=remote,
        timeout_s=timeout,
        timing_cache=str(timing_cache) if timing_cache is not None else None,
        no_timing_cache=no_timing_cache,
        outdir=outdir,
        resume=resume,
        force=force,
    )
    if backend_name == "trtexec" and option_given("warmup"):  # check_config sees only a value other than 20
        from deployopt.backends.trtexec import refuse_warmup_runs

        refuse_warmup_runs(warmup)
    # a typo or a missing backend before "OUTDIR already exists"; no board asked
    check_before_measuring(cfg, cli=True)
    if remote:
        journal_target = resumed_target(cfg) if resume and target is None else None
        if journal_target:  # the run resumed asked the board already
            err_console.print(
                f"target: {journal_target} (the resumed run's, from its journal)",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        cfg = replace(cfg, target=journal_target or resolve_target(ctx, target, remote, timeout))
    progress = progress_bar(disable=as_json)
    # a Q/DQ model's default int8 on a target without INT8 is refused there (when the run loads it)
    optimizer = Optimizer(cfg, progress=_progress_callback(progress), cli=True)
    try:
        with progress:
            result = optimizer.run()
            if isinstance(progress, LineProgress):  # a search over short of --max-evals: done, not stopped
                progress.finish()
        # after the run, not before it: an option the backend refuses stays a one-line error
        note_cudnn_search(b, sms, cudnn_engines, cudnn_benchmark)  # stderr: --json output stays clean
        _note_unused_timing_options(b, {"--runs": runs, "--warmup": warmup, "--sweep-runs": sweep_runs})
        if as_json:
            print_json(result.report)
            return
        _render(result)
    except KeyboardInterrupt:
        # in the cleanup after the results, or while they are said: "resume" (or a bare
        # "interrupted") over a finished run
        if optimizer.finished:
            raise Interrupted(
                f"interrupted after the run finished: its results in {optimizer.outdir} are complete"
            ) from None
        if optimizer.journal is None and not resume:  # before the journal: --resume found nothing
            raise Interrupted("interrupted before the run began (no journal written): run it again") from None
        raise Interrupted("interrupted; resume with --resume") from None
    except DeployoptError:
        raise


def _check_backend_and_dtype(backend: str, dtype: str | None) -> None:
    """An empty --backend or a --dtype no backend runs, in bench's words before any backend is asked:
    `--dtype ''` was "backend 'model' cannot run  (it runs ...)", a blank where the dtype goes."""
    from deployopt.backends.base import DTYPES
    from deployopt.optimize import BACKEND_CHOICES

    refuse_empty_backend("--backend", backend, BACKEND_CHOICES)  # an unset shell variable
    if dtype is not None and dtype not in DTYPES:
        raise DeployoptError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPES)}")


def _note_unused_timing_options(backend: Any, given: dict[str, int]) -> None:
    """One stderr note naming the timing options given other than their defaults, when the backend
    predicts: `--runs 300` (to tighten a search) had no effect and no word said so."""
    if getattr(backend, "measured", True):
        return
    changed = [opt for opt, value in given.items() if value != TIMING_DEFAULTS[opt]]
    if changed:
        err_console.print(
            f"note: {', '.join(changed)} unused: backend {backend.name} predicts every latency, "
            "it times nothing",
            style="yellow",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _say(text: Any, style: str | None = None) -> None:
    """One line of the summary, never folded: in a log (80 columns) a `notice:` or the `wrote` line
    was cut mid-phrase, so `grep notice:` found half of it."""
    console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


def _render(result: Any) -> None:
    rep = result.report
    if not rep["measured"]:
        _say("All latencies below are predicted by the wave model, not measured.", "bold yellow")
    elif rep.get("note"):
        _say(f"note: {rep['note']}", "bold yellow")
    table = Table(
        title=f"deployopt optimize ({rep['mode']}, {rep['backend']}, {rep['target']['name']} "
        f"{sm_count(rep['target']['sms'])})"
    )
    table.add_column("model")
    table.add_column("latency")  # wraps between words; print_table keeps each word (a figure) whole
    for label, key in (("input", "input"), ("round-up-to-8", "round_up_8"), ("deployopt", "best")):
        table.add_row(label, rep["latency"][key]["describe"])
    print_table(table)
    _say(f"vs input: {rep['comparisons']['vs_input']['describe']}")
    _say(f"vs round-up-to-8: {rep['comparisons']['vs_round_up_8']['describe']}")
    if rep.get("confirmation"):  # in report.md too; a fallback to a baseline is said, not left silent
        from deployopt.report import confirmation_line, confirmations

        for conf in confirmations(rep):  # two where round-up-to-8 was put to the input in turn
            _say(confirmation_line(conf), None if conf["kept"] else "yellow")
    ev, sw = rep["evaluations"], rep["per_layer_sweep"]
    verb = "timed" if rep["measured"] else "predicted"
    _say(
        f"{ev['count']} end-to-end evaluations ({ev['measured_this_run']} this run); per-layer sweep: "
        f"{sw['shapes']} shapes, {sw['measured']} {verb} in {sw['seconds']:.1f} s, {sw['cached']} cached"
        # a resumed run's journal values (counted in `cached`): said as such, as report.md does
        + (f" ({sw['from_journal']} from the journal)" if sw.get("from_journal") else "")
    )
    tr = rep.get("traffic")
    if tr and tr.get("enabled") and rep["measured"]:
        how = "priced in the search's table" if tr["used"] else "not priced (table of convs alone)"
        _say(f"non-conv memory traffic: {tr['why']}; {how}")
    if rep.get("image_preprocess"):  # what the gate, the ranking and INT8 calibration were fed
        from deployopt.fidelity import describe_preprocess

        _say(f"calibration images made into tensors by: {describe_preprocess(rep['image_preprocess'])}")
    gate, fid = rep.get("trim_gate"), rep.get("fidelity")
    if gate and fid:
        _say(_fidelity_line(fid, gate), "yellow" if fid.get("failures") else None)
    slow_note = clock_slowdown_note(rep.get("clock_slowdowns") or [])
    if slow_note:
        _say(f"warning: {slow_note}", "bold yellow")
    # convs the wave model could not shape; model.onnx's batch; an engine not kept
    once = [rep.get("unpriced_notice"), rep.get("written_batch"), rep.get("engine_notice")]
    notes = [*rep.get("load_notices", []), *rep.get("calibration_notices", []), *[n for n in once if n]]
    for note in notes:
        _say(f"notice: {escape_controls(note)}", "yellow")  # one line: a name's newline as \n
    _say(f"wrote {result.outdir}/ ({', '.join(written_files(rep))})")


def _fidelity_line(fid: dict[str, Any], gate: dict[str, Any]) -> Text:
    """What trim did to the outputs: the answer against the input model, and the gate it passed
    (or, with --no-fidelity-gate, did not need to pass)."""
    from deployopt.fidelity import relative_error_limit, shown_against

    # each figure with the digits it takes to show which side of the gate's threshold it is on
    cosine, top1, limit = gate["min_cosine"], gate["min_top1"], relative_error_limit(gate["min_cosine"])
    figures = []
    if fid.get("cosine_min") is not None:
        figures.append(f"min cosine {shown_against(fid['cosine_min'], cosine, 4)[0]}")
    if fid.get("top1_agreement") is not None:
        figures.append(f"top-1 agreement {shown_against(fid['top1_agreement'], top1, 0, percent=True)[0]}")
    if fid.get("relative_error_max") is not None:  # outputs of one value per row
        worst = shown_against(fid["relative_error_max"], limit, 2, percent=True, computed=True)[0]
        figures.append(f"max relative error {worst}")
    if fid.get("exact_match") is not None:  # integer outputs
        figures.append(f"exact match {shown_against(fid['exact_match'], top1, 0, percent=True)[0]}")
    n = fid.get("samples")
    # how many inputs it rests on: the check takes a few, not the whole set (the rest rank trims)
    on = f", {n} sample{'' if n == 1 else 's'}" if n else ""
    source = fid.get("source") or "calibration set"
    line = (
        f"fidelity of the answer vs the input (onnxruntime CPU, {source}{on}): "
        f"{', '.join(figures) or 'outputs compared'}; "
        f"gate: {describe_gate(gate, **gate_checks(fid))}"
    )
    if fid.get("failures"):
        line += " — past the thresholds: fine-tune before deploying"
    return Text(line)


def written_files(rep: dict[str, Any]) -> list[str]:
    """What this run left in OUTDIR, for the closing line: the fixed files, then the staircase
    PNGs and the TensorRT engine when the run wrote them."""
    files = ["model.onnx", *(["model.onnx.data"] if rep.get("external_data") else []), "plan.json"]
    files += ["report.md", "report.json", "journal.jsonl"]
    if rep.get("staircases"):
        n = len(rep["staircases"])
        files.append(f"staircases/ ({n} PNG{'' if n == 1 else 's'})")
    if rep.get("engine"):
        files.append(str(rep["engine"]))
    return files
