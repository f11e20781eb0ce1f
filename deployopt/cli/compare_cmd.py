"""`deployopt compare`: regression timing of measured results (bench, jetson runner, trtexec).

Thin layer over deployopt.regression. Exit 0 when nothing got slower, 1 when a model is slower
than its baseline beyond the rule (or, with --strict, when setups differ, a pair has no verdict (a
side drifted within its run by as much as the pair's change, or by a trend that, carried over the
gap between the runs, makes it; or its replicates showed no spread), a
current result is not newer than its baseline, a side is dated after this machine's clock, or a file
has no counterpart; or a current result older than --max-age), 2 on bad
input, 3 with --strict when a pair timed two different models (not comparable) — so a release
pipeline can gate on it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from deployopt.cli.app import app, console, err_console, input_path, output_option, print_json, print_table
from deployopt.errors import DeployoptError
from deployopt.regression import (
    DEFAULT_ALPHA,
    MIN_EFFECT,
    NOT_COMPARABLE,
    REPLICATE_SPAN_MAX,
    Pair,
    RegressionReport,
    compare_paths,
    measurement_files,
    parse_duration,
    setup,
)
from deployopt.timing import Timing, replicate_center


def _cell(t: Timing, replicated: bool) -> str:
    """median µs (IQR µs, runs); on a pair judged on replicate medians, the geometric mean of the
    side's replicate medians (what its change is of) with their range and count."""
    if not replicated:
        return f"{t.median_us:.1f} ({t.iqr_us:.1f}, {t.runs})"
    meds = t.replicate_medians_us
    center = replicate_center(meds)
    if len(meds) == 1:
        return f"{center:.1f} (1×, {t.runs})"
    return f"{center:.1f} ({len(meds)}× {min(meds):.1f}–{max(meds):.1f}, {t.runs})"


def _tests(report: RegressionReport) -> str:
    """The tests the table's verdicts come from, for its title."""
    used = []
    if report.one_run_per_side:
        used.append("Mann-Whitney U on one run a side")
    if len(report.one_run_per_side) < len(report.pairs):
        used.append("t-test on log replicate medians")
    return " or ".join(used)


def _verdict(p: Pair, alpha: float) -> Text:
    """The verdict cell. Neither slower nor faster is one of two things, said apart: a difference
    that may be noise (p ≥ alpha) or a real one under --min-effect. Both read "no change", beside
    a +53 % whose p was 0.015 at alpha 0.01."""
    v = p.comparison.verdict
    if p.comparison.unstable:  # a side's latency moved within its run: no verdict either way
        return Text(f"unstable: {p.comparison.unstable_text()}", style="yellow")
    if v in ("slower", "faster"):
        # the medians' 95 % CIs overlap (bimodal samples): the direction holds, the change's size not
        shown = f"{v} (size uncertain)" if p.comparison.size_uncertain else v
        return Text(shown, style="red" if v == "slower" else "green")
    if p.comparison.mixed:  # the median moved one way, the bulk of the samples the other
        return Text("mixed: ranks disagree")
    return Text("under min effect" if p.comparison.p_value < alpha else "not significant")


def _render(report: RegressionReport) -> None:
    replicated = len(report.one_run_per_side) < len(report.pairs)
    table = Table(
        title=f"Measured medians, µs ({_tests(report)}, alpha {report.alpha:g}, min effect "
        f"{100 * report.min_effect:g} %)",
        caption="cells: median µs (IQR µs, runs)"
        + (
            "; a replicated pair: geometric mean of each side's replicate medians µs (replicates× "
            "their range, runs in all)"
            if replicated
            else ""
        ),
    )
    # nothing cut with '…' (a pipe or CI log is 80 columns): a name folds, so two pairs never read
    # alike (`resnet56…` twice), and print_table keeps each number whole (`(1214…` of 12149.7)
    for col in ("model", "baseline", "current", "change", "p", "verdict", "setup differs"):
        justify = "right" if col in ("change", "p") else "left"
        table.add_column(col, justify=justify, overflow="fold" if col == "model" else "ellipsis")
    for p in report.pairs:
        table.add_row(
            p.name,
            _cell(p.baseline, p.comparison.replicated is not None),
            _cell(p.current, p.comparison.replicated is not None),
            f"{100 * (p.comparison.ratio - 1):+.1f} %",
            # no p where the replicates showed no spread (it read 1: certainty of no change)
            f"{p.comparison.p_value:.2g}" if math.isfinite(p.comparison.p_value) else "none",
            _verdict(p, report.alpha),
            "; ".join(([] if p.model.comparable else ["DIFFERENT MODEL"]) + p.differences) or "-",
        )
    print_table(table)
    # one line where every pair shares one setup; else one a model, in table order and named as the
    # "measured at" lines are (a sorted set of unnamed setups could not tell which model ran where)
    setups = [(p.name, setup(p.baseline), setup(p.current)) for p in report.pairs]
    shared = len({(b, c) for _, b, c in setups}) == 1
    for name, b, c in setups[:1] if shared else setups:
        where = f"{b} (both)" if b == c else f"baseline {b}; current {c}"
        named = "" if shared else f"{name}: "  # grep-able, never folded
        console.print(f"measured on: {named}{where}", markup=False, highlight=False, soft_wrap=True)
    for p in report.pairs:  # when each side was measured, where recorded (older files: not)
        if p.baseline.measured_at or p.current.measured_at:
            when = [
                f"{side} {t.measured_at or 'not recorded'}"
                for side, t in (("baseline", p.baseline), ("current", p.current))
            ]
            console.print(
                f"measured at: {p.name}: {', '.join(when)}", markup=False, highlight=False, soft_wrap=True
            )
    for p in report.pairs:  # a replicated pair: the test and each side's run-to-run spread
        r = p.comparison.replicated
        if r is not None:
            lo, hi = (100 * (x - 1) for x in r.ratio_ci95)
            ci = (
                f"95% CI {lo:+.1f} … {hi:+.1f} %"
                if r.spread_measured
                else "no p, no 95% CI: every replicate median alike on each side, no spread between runs"
            )
            sides = "; ".join(
                f"{side} {t.replicate_text() or '1 run, median ' + format(t.median_us, '.1f') + ' µs'}"
                for side, t in (("baseline", p.baseline), ("current", p.current))
            )
            console.print(
                f"replicates: {p.name}: t-test on {r.counts[0]} + {r.counts[1]} replicate medians "
                f"({r.df} df), change {100 * (p.comparison.ratio - 1):+.1f} % "
                f"({ci}); "
                f"{sides}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    single = report.one_run_per_side
    if single:  # once, under the table (JSON: one_run_per_side): every older result is one run
        which = "every verdict" if len(single) == len(report.pairs) else f"{len(single)} of the verdicts"
        console.print(
            f"one run per side: {which} rests on one run per side, so how much a model's median moves "
            "between runs (a new process, a new kernel search, the host's load) is unseen; on the hosts "
            "measured it exceeded --min-effect (docs/regression.md). Bench each side with `deployopt bench "
            "--repeat 3` (or, on a host whose load moves, alternate the two sides' benches with `-o FILE "
            "--append`) and compare tests the replicates' medians",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    for name in report.only_in_baseline:
        err_console.print(f"note: {name}: in the baseline only", style="yellow", markup=False, soft_wrap=True)
    for name in report.only_in_current:
        err_console.print(
            f"note: {name}: in the current run only", style="yellow", markup=False, soft_wrap=True
        )
    n = len(report.slower)
    wrong = len(report.not_comparable)
    shaky = len(report.unstable)
    tail = "".join(
        [
            f" ({wrong} not comparable: different models)" if wrong else "",
            f" ({shaky} unstable: no verdict)" if shaky else "",
        ]
    )
    # the slower models named: in a log the table's name column may be folded over several lines
    slower = f"; slower: {', '.join(p.name for p in report.slower)}" if n else ""
    console.print(
        f"{n} regression{'s' if n != 1 else ''} in {len(report.pairs)} compared{tail}{slower}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _line(text: str, style: str) -> None:
    """One stderr line, never folded (a pipeline greps it; a path would split it)."""
    err_console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)


@app.command("compare", rich_help_panel="Measure")
def compare_command(
    baseline: Path = typer.Argument(
        ...,
        help="Baseline measurement (or a folder of them).",
        parser=input_path("baseline", "a file or folder"),
    ),
    current: Path = typer.Argument(
        ...,
        help="Current measurement (or a folder: files pair by name).",
        parser=input_path("current", "a file or folder"),
    ),
    alpha: float = typer.Option(
        DEFAULT_ALPHA,
        "--alpha",
        metavar="FLOAT",
        help="Significance level: of the Mann-Whitney U test on the samples where each side is one run, "
        "of the t-test on the replicates' medians where a side has several (bench --repeat).",
    ),
    min_effect: float = typer.Option(
        MIN_EFFECT,
        "--min-effect",
        metavar="FLOAT",
        help="Smallest change that counts, as a fraction (0.02 = 2 %); keep it above what a rebuild "
        "of the same model moves (1.4 % measured on the H200 at 8 SMs).",
    ),
    strict: bool = typer.Option(
        False,
        "--strict",
        help="Also fail when setups differ (GPU, SMs, TensorRT, ...), a pair has no verdict (unstable: a "
        "side drifted within its run by as much as the change, or at a rate that makes it between the "
        "runs, or no spread between replicates), a "
        "current result is not newer than its baseline (stale), a side is dated after this machine's clock "
        "(future) or a file has no counterpart (exit 1), or "
        "when a pair timed different models (exit 3).",
    ),
    max_age: Optional[str] = typer.Option(
        None,
        "--max-age",
        metavar="DURATION",
        help="Fail (reason too_old, exit 1) when a current result was measured longer ago than this (8d, "
        "36h, 90m): a bench or copy that failed leaves the last result in place, newer than its baseline.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    output: Optional[Path] = output_option(None, "--output", "-o", help="Write the JSON result here."),
) -> None:
    """Regression timing: is each model slower than its baseline? Reads `bench -o`, jetson runner or
    trtexec --exportTimes JSON. Exit 0: none slower; 1: a regression (or --strict's failures); 2: bad
    input (a missing or unreadable file, too few runs); 3: --strict and different models."""
    from deployopt.fileio import check_output_file, refuse_input_as_output, write_json

    if output is not None:
        check_output_file(output)
        inputs = [("baseline", baseline), ("current result", current)]
        for what, folder in list(inputs):  # folders: every measurement compare would pair
            if folder.is_dir():
                inputs += [(f"{what} {p.name} in {folder}", p) for p in measurement_files(folder)]
        refuse_input_as_output(output, inputs, "-o/--output")
    try:
        limit = None if max_age is None else parse_duration(max_age)
        report = compare_paths(baseline, current, alpha=alpha, min_effect=min_effect, max_age=limit)
    except DeployoptError as exc:
        if output is not None and _remove_last_report(output):
            note = f"removed {output}, the last run's report, so that no guard reads it as this run's"
            exc.args = (f"{exc}; {note}",)
        raise
    if output is not None or as_json:  # its CIs bootstrap every sample: 50 s for a 1M-query trtexec file
        doc = report.to_json(strict)  # with the exit status this run returns, and why
        if output is not None:
            write_json(output, doc)
        if as_json:
            print_json(doc)
    if not as_json:
        _render(report)
    # most severe first: a wrong pair, then setups that differ, then what could not be checked
    for p in report.not_comparable:
        _line(
            f"warning: {p.name}: not comparable: {p.model.message}: its verdict is not a regression "
            f"check{'' if strict else ' (--strict exits 3)'}",
            "bold red",
        )
    for p in report.stale:
        _line(
            f"warning: {p.name}: the current result is not newer than its baseline: {p.stale}; a bench or "
            "copy that failed leaves the last result in place, so this may not be this run's",
            "bold red",
        )
    for p in report.too_old:  # a gate's own limit: a failure with or without --strict
        _line(f"warning: {p.name}: {p.too_old}", "bold red")
    for p in report.future:
        for note in p.future:
            _line(f"warning: {p.name}: {note}{'' if strict else ' (--strict exits 1)'}", "bold red")
    for p in report.long_span:  # weeks appended into one result: a change among them is diluted
        days = REPLICATE_SPAN_MAX.total_seconds() / 86400
        _line(
            f"warning: {p.name}: {'; '.join(p.long_spans)}, more than {days:g} day apart: replicates are "
            "meant to be one measurement session, and a drift across them (a change in the last of them) is "
            "diluted in the test on their medians; bench each session into its own file (docs/regression.md)",
            "yellow",
        )
    for p in report.unstable:
        why = (
            "the replicate test cannot judge the pair; time more runs, or more samples a run"
            if p.comparison.no_spread
            else "its samples are not one steady run, so the test cannot judge the pair; time it again, "
            "or replicate runs and judge their medians"
        )
        _line(
            f"warning: {p.name}: unstable, no verdict: {p.comparison.unstable_text()}: {why} "
            f"(docs/regression.md){'' if strict else ' (--strict exits 1)'}",
            "yellow",
        )
    for p in report.pairs:
        drifts = [d for d in p.comparison.drift or () if d is not None and d.drifted]
        if p.comparison.replicated is not None and drifts and all(d.replicate is not None for d in drifts):
            _line(
                f"note: {p.name}: {p.comparison.drift_text()}: the test on replicate medians counts it as "
                "variation between runs, so the verdict stands; a longer warm-up (or locked clocks) "
                "makes steady runs",
                "yellow",
            )
        elif not p.comparison.unstable and p.comparison.drift_text():  # smaller than the change: it stands
            _line(
                f"note: {p.name}: {p.comparison.drift_text()}, less than the change between the runs, "
                "so the verdict stands; a longer warm-up (or locked clocks) makes steady runs",
                "yellow",
            )
    for p in report.not_like_for_like:
        _line(
            f"warning: {p.name}: not like for like ({'; '.join(p.differences)}): "
            "the change need not be the model's",
            "yellow",
        )
    for p in report.pairs:
        if p.model.comparable and p.model.message:  # changed (same name, new bytes) or not recorded
            _line(f"note: {p.name}: {p.model.message}", "yellow")
        for note in p.notes:
            _line(f"note: {p.name}: {note}", "yellow")
    # report.exit_code: the JSON's exit_code. An unstable pair could hide a regression (it gets no
    # verdict), a stale one may be last week's result: --strict fails on them as on a setup that
    # differs or a clock held down, which are cases the test cannot judge either
    code = report.exit_code(strict)
    if code == NOT_COMPARABLE:
        raise typer.Exit(NOT_COMPARABLE)
    if code and not report.slower:  # else exit 1 under "0 regressions in N compared"
        _line(f"FAILED{' (--strict)' if strict else ''}: {_strict_reasons(report, strict)}", "red")
    if code:
        raise typer.Exit(code)


def _remove_last_report(output: Path) -> bool:
    """A failed compare removes the report an earlier run left at -o: a CI guard such as `jq
    '.regressions == 0'` would otherwise pass on last run's verdict. Only a regular file goes (a
    symlink's target, as writing it would replace; never a FIFO or device)."""
    from deployopt.fileio import resolve_output

    try:
        target, direct = resolve_output(output)
        if not direct and target.is_file():
            target.unlink()
            return True
    except (OSError, DeployoptError):
        pass
    return False


def _strict_reasons(report: RegressionReport, strict: bool = True) -> str:
    """Why --strict fails a run with no regression: the line a CI log ends on, so exit 1 is not
    read against the "0 regressions" above it (the JSON's failures, in the same words)."""
    reasons = [f["message"] for f in report.failures(strict)]
    return "; ".join(reasons) + ", so exit 1 though no model got slower"
