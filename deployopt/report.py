"""report.json and report.md for an optimize run, and the staircase PNGs that drove its decisions.

The report says, for every number, whether it was measured (backend, median, IQR, 95 % CI, runs) or
predicted (by which model) — a wave-model run says "predicted by the wave model, not measured" in
its first lines, because a predicted speed-up is a hypothesis, not a result.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deployopt.clocks import unlocked_phrase
from deployopt.errors import first_line, reraise_interrupt
from deployopt.fileio import write_json, write_text
from deployopt.model import layer_labels
from deployopt.targets import measured_elsewhere, sm_count
from deployopt.timing import (
    REPLICATE_TEST,
    Comparison,
    Timing,
    compare,
    compare_replicates,
    counted,
    replicate_t_test,
)
from deployopt.traffic import MB
from deployopt.waves import fill_percent

if TYPE_CHECKING:
    from deployopt.optimize import Evaluation, Optimizer

MAX_PLOTS = 12
PREDICTED_NOTE = "predicted by the wave model, not measured"
PLACEHOLDER_INT8_NOTE = (
    "trtexec built the INT8 engines with placeholder dynamic ranges, not calibrated ones (it cannot "
    "calibrate from data, only read a calibration table): their latencies hold, their INT8 accuracy "
    "means nothing (timing only)"
)


def _timing_row(t: Timing) -> dict[str, Any]:
    """One latency of the report. A predicted one has no spread and no runs (null, where a
    measurement has them) and names its predictor: `runs: 1, iqr_us: 0` read as one exact sample.
    A measured one says how many builds its samples come from (`builds`, `build_medians_us`;
    added): a confirmed plan's latency pools its rebuilds, each a replicate of the Timing, whose
    own CI and describe say how they treat replicates."""
    row = {
        "median_us": t.median_us,
        "iqr_us": t.iqr_us if t.measured else None,
        "ci95_us": list(t.ci95_us) if t.measured and t.ci_known else None,
        "runs": t.runs if t.measured else None,
        "measured": t.measured,
        "describe": t.describe(),
    }
    if not t.measured:
        row["predictor"] = t.predictor
    else:
        row["builds"] = t.replicate_count
        row["build_medians_us"] = t.replicate_medians_us
        if t.replicate_count >= 2:
            meds = ", ".join(f"{m:.1f}" for m in t.replicate_medians_us)
            row["describe"] += f", in {t.replicate_count} builds (build medians {meds} µs)"
    return row


def same_plan(name: str, min_effect: float, measured: bool) -> str:
    """A comparison whose two sides are one plan: what that means for the answer. A plan replaces
    the incumbent only when at least `min_effect` faster (and, measured, significantly so), so
    plans predicted 0.004–0.5 % faster may be in the evaluations: "rounding up … was the fastest
    found" was untrue beside them (bug bash)."""
    how = "measured significantly and" if measured else "predicted"
    than = "the input's" if name == "vs_input" else "rounding up to multiples of 8"
    return f"the same plan (no other widths were {how} at least {100 * min_effect:g} % faster than {than})"


CONFIRM_SUFFIX = " (confirm 1)"


def _searched_evaluation(opt: Optimizer, conf: dict[str, Any]) -> Evaluation | None:
    """The plan the confirmation rounds re-measured, as the search measured it (its first build):
    the evaluation named by the confirmation's `answer`, else (a record without it) the one whose
    label the first rebuild ("LABEL (confirm 1)") names, other than the confirmation's baseline.
    None where the rounds never ran (budget) or the labels changed."""
    from deployopt.journal import plan_key

    if conf.get("answer"):  # two confirmations rebuild round-up-to-8: its labels name no one plan
        return next((x for x in opt.evaluations if x.label == conf["answer"]), None)
    for e in opt.evaluations:
        if not e.label.endswith(CONFIRM_SUFFIX) or e.label == f"{conf['baseline']}{CONFIRM_SUFFIX}":
            continue
        label = e.label[: -len(CONFIRM_SUFFIX)]
        key = plan_key(e.plan)
        return next((x for x in opt.evaluations if x.label == label and plan_key(x.plan) == key), None)
    return None


def confirmations(opt_or_report: Any) -> list[dict[str, Any]]:
    """Every confirmation of a run, in order: `confirmations` where the run recorded it, else the
    one `confirmation` (an optimizer or report from before a second one could follow)."""
    get = opt_or_report.get if isinstance(opt_or_report, dict) else lambda k: getattr(opt_or_report, k, None)
    listed = get("confirmations")
    if listed:
        return list(listed)
    one = get("confirmation")
    return [one] if one else []


def rebuilds(conf: dict[str, Any]) -> int:
    """The rebuild rounds of a confirmation record: its `rounds`, or one less in a record from
    before `search_build_medians_us` (its rounds counted the search's builds as the first)."""
    return conf["rounds"] if "search_build_medians_us" in conf else conf["rounds"] - 1


def unconfirmed_plan(
    conf: dict[str, Any], min_effect: float, searched: str | None, search: Comparison | None
) -> str:
    """What to say where the answer is a baseline because a searched plan, measured faster than it
    in the search, failed the confirmation rounds: "the same plan (no other widths were measured
    significantly … faster)" was printed beside a plan measured -13.6 % (p 0.006) in the search
    (bug bash), which the rounds then did not confirm."""
    who = searched or "the searched plan"
    found = (
        f"{who} measured {100 * (search.ratio - 1):+.1f} % against it in the search "
        f"({search.verdict}, p={search.p_value:.3g})"
        if search is not None
        else f"{who} was measured faster than it in the search"
    )
    best, base = conf["best_round_medians_us"], conf["baseline_round_medians_us"]
    why = []
    if best and base and max(best) >= min(base):
        why.append("its slowest rebuild not faster than the baseline's fastest")
    why.append(pooled_change(conf, min_effect))
    builds = "" if "search_build_medians_us" in conf else f"{conf['rounds']} builds each: "
    return (
        f"the same plan: {found}, not confirmed in {counted(rebuilds(conf), 'rebuild')} of each "
        f"({builds}{'; '.join(why)}), so the answer is {conf['baseline']}"
    )


def pooled_change(conf: dict[str, Any], min_effect: float | None = None) -> str:
    """A confirmation's pooled gain as the report's other changes are printed, the answer against
    the baseline, negative = faster, and said in words: 'pooled medians -1.25 % (faster)'. The
    record's `pooled_gain` is 1 − the ratio of the two pooled medians (positive = faster): printed
    with its sign it read "-12.05 %" for 12 % slower beside "-76.4 %" for faster (bug bash).
    "Pooled medians": each side's median over all its rebuilds' runs together, an estimate other
    than a `vs` line's (the geometric means of the build medians). `min_effect`: where the change
    falls short of it, say so ('…, not the 0.5 % faster the min effect asks')."""
    change = round(-100 * conf["pooled_gain"], 2) + 0.0  # + 0.0: no "-0.00 %"
    word = "faster" if change < 0 else "slower" if change > 0 else "no change"
    text = f"{change:+.2f} %"
    if min_effect is not None and conf["pooled_gain"] < min_effect * (1 - 1e-9):
        short = f"{100 * min_effect:g} %"
        word += (
            f", by less than the {short} min effect"
            if word == "faster"
            else f", not the {short} faster the min effect asks"
        )
    return f"pooled medians {text} ({word})"


def _faster_in_search(
    opt: Optimizer, ref: Evaluation, alpha: float, min_effect: float, skip: set[str]
) -> list[tuple[Evaluation, Comparison]]:
    """The search's evaluations (confirmation rebuilds left out) that `compare` finds faster than
    `ref` by the run's rule, fastest first: a plan can be measured faster than a baseline and not be
    accepted (it was judged against the incumbent of its step), and the report may not say that
    no such plan was measured."""
    from deployopt.journal import plan_key

    out = []
    for e in opt.evaluations:
        if "(confirm " in e.label or plan_key(e.plan) in skip | {plan_key(ref.plan)}:
            continue
        c = compare(ref.timing, e.timing, alpha=alpha, min_effect=min_effect)
        if c.verdict == "faster":
            out.append((e, c))
    return sorted(out, key=lambda ec: ec[1].ratio)


def same_plan_phrase(opt: Optimizer, name: str, ref: Evaluation, measured: bool) -> str:
    """`same_plan`'s words where they are true; where a plan was measured faster than the baseline
    and then not confirmed against it, that (unconfirmed_plan): a searched plan against
    round-up-to-8, or round-up-to-8 against the input (possibly after a searched plan failed
    against round-up-to-8, which is said too); where other plans were measured faster than it in
    single builds and none was the answer, that."""
    from deployopt.journal import plan_key

    cfg = opt.cfg
    labels = {plan_key(e.plan): e.label for e in opt.evaluations if "(confirm " not in e.label}
    # the confirmation that fell back to `ref`: the last whose baseline is `ref` and kept nothing
    conf = next(
        (
            c
            for c in reversed(confirmations(opt))
            if not c["kept"] and c["baseline"] == labels.get(plan_key(ref.plan))
        ),
        None,
    )
    others = _faster_in_search(opt, ref, cfg.alpha, cfg.min_effect, set())
    how = "measured significantly and" if measured else "predicted"
    if conf is not None:
        searched = _searched_evaluation(opt, conf)
        search = (
            compare(ref.timing, searched.timing, alpha=cfg.alpha, min_effect=cfg.min_effect)
            if searched is not None
            else None
        )
        text = unconfirmed_plan(conf, cfg.min_effect, searched.label if searched else None, search)
        named = {plan_key(searched.plan)} if searched is not None else set()
        before = next(
            (c for c in confirmations(opt) if conf.get("after") and c["answer"] == conf["after"]), None
        )
        if before is not None:  # round-up-to-8 was put to the input because a searched plan failed
            refuted = next((e for e in opt.evaluations if e.label == before["answer"]), None)
            named |= {plan_key(refuted.plan)} if refuted is not None else set()
            text += (
                f"; before it, {before['answer']} was not confirmed against {before['baseline']} "
                f"({_rounds_each(before)})"
            )
        rest = [e for e, _ in others if plan_key(e.plan) not in named]
        if rest:
            text += (
                f"; {counted(len(rest), 'other plan')} {how} at least {100 * cfg.min_effect:g} % faster "
                f"than it in one build each, {_none_kept(rest)}"
            )
        return text
    if not others:
        return same_plan(name, cfg.min_effect, measured)
    (first, c), n = others[0], len(others)
    return (
        f"the same plan ({counted(n, 'other plan')} {how} at least {100 * cfg.min_effect:g} % faster "
        f"than it in one build each, {_none_kept([e for e, _ in others])}; the fastest, {first.label}: "
        f"{100 * (c.ratio - 1):+.1f} %{f', p={c.p_value:.3g}' if measured else ''})"
    )


def unevaluated_solver_plan(opt: Optimizer, ref: Evaluation) -> str | None:
    """Where --max-evals ran out before the solver's plans were evaluated and the answer is a
    baseline (`ref`): the best of them its per-layer table put at least the min effect under it.
    "The same plan (no other widths were predicted … faster)" was said beside a solver plan the
    table put 7 % under round-up-to-8, never evaluated, which --max-evals 3 then answered."""
    from deployopt.journal import plan_key

    if ref.table_us is None or ref.table_us <= 0:
        return None
    refused = getattr(opt, "_refused", {})
    for i, solution in enumerate(getattr(opt, "solutions", None) or []):
        key = plan_key(solution.plan)
        if key in opt._by_key or key in refused:  # evaluated, or the fidelity gate's, not the budget's
            continue
        # the conv table's, as ref.table_us (the solver's own table may price the traffic on top)
        change = opt.conv_table.cost(solution.plan) / ref.table_us - 1
        if change > -opt.cfg.min_effect:
            return None  # the solver's plans are in cost order: none further is better
        return (
            f"--max-evals {opt.cfg.max_evals} ran out before solver #{i + 1} was evaluated, which the "
            f"per-layer table puts {100 * change:+.1f} % against it (give a larger --max-evals)"
        )
    return None


def _none_kept(evs: list[Evaluation]) -> str:
    """'none accepted' where it is true; a plan accepted in the search and then superseded (or not
    confirmed) was accepted, so then only that none is the answer."""
    return "none the answer" if any(e.accepted for e in evs) else "none accepted"


def comparison_row(c: Comparison, measured: bool, same_plan: str | None = None) -> dict[str, Any]:
    """One of the report's comparisons (the answer against a baseline) as JSON. size_uncertain sits
    next to the verdict: true where the verdict stands but the two medians' 95 % CIs overlap, so the
    printed change is no size the samples pin down (Comparison.size_uncertain); null, as p_value,
    for predictions. `same_plan`: what to say instead where the answer is the baseline's plan."""
    if same_plan is not None:
        describe = same_plan
    elif not measured:
        describe = f"predicted {100 * (c.ratio - 1):+.1f}% (wave model, not measured)"
    else:
        describe = c.describe()
    return {
        "verdict": c.verdict if measured else "predicted",
        "size_uncertain": c.size_uncertain if measured else None,
        "ratio": c.ratio,
        "p_value": c.p_value if measured else None,
        "describe": describe,
    }


def _built_once(ref_name: str, ref: Timing, answer: Timing) -> str:
    """Which side of a comparison was built once: 'one build a side', 'the input built once'."""
    once = [who for who, t in ((ref_name, ref), ("the answer", answer)) if t.replicate_count < 2]
    return "one build a side" if len(once) == 2 else f"{once[0]} built once"


def measured_comparison_row(
    ref: Timing, answer: Timing, alpha: float, min_effect: float, ref_name: str
) -> dict[str, Any]:
    """The answer against a baseline, measured, as comparison_row's JSON with `test`, `builds`,
    `change_ci_pct` and `change_ci_level` added. Each side's builds are the unit that varies (a
    rebuild re-times its kernels), so where each side has 2 builds or more the verdict is the
    t-test on the build medians (timing.compare_replicates, as `compare` does for replicated
    results), with the change's CI at 1 - alpha, the level the verdict is taken at (a 95 % CI
    clear of 0 beside "no significant difference" at alpha 0.01 reads as a contradiction); where
    a side is one build, nothing measured how far a rebuild moves it:
    no p and no verdict ("not tested"), only the change of the medians. The Mann-Whitney test on
    samples pooled over 2–3 builds took them as independent and said "faster (p=4.6e-96)" where
    every plan was equally fast (bug bash: 10 of 40 null-world runs)."""
    builds = {"baseline": ref.replicate_count, "answer": answer.replicate_count}
    if min(builds.values()) >= 2:
        c = compare_replicates(ref, answer, alpha=alpha, min_effect=min_effect)
        if not c.no_spread and c.replicated is not None:
            from scipy.stats import t as student_t

            _, df, _, diff, se = replicate_t_test(ref.replicate_medians_us, answer.replicate_medians_us)
            half = float(student_t.ppf(1 - alpha / 2, df)) * se
            lo, hi = (100 * (math.exp(x) - 1) for x in (diff - half, diff + half))
            how = f"{100 * (1 - alpha):g}% CI {lo:+.1f} … {hi:+.1f} %; t-test on the build medians, "
            how += f"{builds['baseline']} + {builds['answer']} builds, p={c.p_value:.3g}"
            # the change named as the estimate it is (BUILD_MEDIANS): a confirmation line beside it
            # gives the pooled medians' (pooled_change), another figure of the same two plans
            change = f"{100 * (c.ratio - 1):+.1f}% {BUILD_MEDIANS}"
            if c.verdict == "no significant difference":
                under = f", under the {100 * min_effect:g} % min effect" if c.p_value < alpha else ""
                describe = f"no significant difference ({change}{under}, {how})"
            else:
                describe = f"{c.verdict}: {change} ({how})"
            return {
                "verdict": c.verdict,
                # the change's own CI (change_ci_pct) sizes it: no overlap of two CIs to judge by
                "size_uncertain": False,
                "ratio": c.ratio,
                "p_value": c.p_value,
                "describe": describe,
                "test": REPLICATE_TEST,
                "builds": builds,
                "change_ci_pct": [lo, hi],
                "change_ci_level": 1 - alpha,
            }
        why = f"every build median alike on each side ({builds['baseline']} + {builds['answer']} builds)"
    else:
        why = _built_once(ref_name, ref, answer)
    ratio = answer.median_us / ref.median_us
    return {
        "verdict": NOT_TESTED,
        "size_uncertain": None,
        "ratio": ratio,
        "p_value": None,
        "describe": (
            f"{100 * (ratio - 1):+.1f}% in the medians, not tested: {why}, so build-to-build variation "
            "is not measured (no p, no verdict)"
        ),
        "test": None,
        "builds": builds,
        "change_ci_pct": None,
        "change_ci_level": None,
    }


#: A measured comparison's verdict where a side is one build (or its builds showed no spread)
NOT_TESTED = "not tested"
#: what a build-level comparison's change is the change of (its `ratio`, what its t-test reads)
BUILD_MEDIANS = "between the build medians' geometric means"
#: report.md's key to the changes beside a confirmation: two estimates of one pair of plans
CHANGES_KEY = (
    "every change is a plan against its baseline, negative = faster; \"between the build medians' "
    "geometric means\" (the vs lines): each side's build medians, averaged on a log scale, as the "
    "t-test reads them; \"pooled medians\" (a confirmation): each side's median of all its rebuilds' runs "
    "together. Two estimates of one comparison, so they differ"
)


def behind_phrase(conf: dict[str, Any], r8: Timing, base: Timing, max_evals: int) -> str:
    """ "vs input" where round-up-to-8, the answer in place of a searched plan that failed against
    it, had no rebuild round against the input left and its rebuilds measured behind the input's
    build, so the answer is the input (fallback_vs_input "behind"): the report had said "slower:
    +0.7 %" of the model it wrote (bug bash)."""
    n = rebuilds(conf)
    return (
        f"the same plan: {conf['baseline']}, the answer in place of {conf['answer']} (not confirmed "
        f"against it), measured {100 * (r8.median_us / base.median_us - 1):+.1f} % against it in its "
        f"{counted(n, 'rebuild')} ({r8.median_us:.1f} µs against the input's one build, "
        f"{base.median_us:.1f} µs), and no evaluation of --max-evals {max_evals} was left for a "
        "rebuild round of each, so the answer is the input"
    )


def _samples_per_conv(span: list[int] | None, asked: int) -> str:
    """'10 samples', or '10–50 samples' where cached entries hold more than this run asked for;
    `span`: the fewest and most of the values used, those replayed from a journal included (a
    resumed run said the count it asked for over the journal's 3-sample values)."""
    lo, hi = span or (asked, asked)
    return counted(lo, "sample") if lo == hi else f"{lo}–{hi} samples"


def _table_source(opt: Optimizer, sweep: dict[str, Any]) -> str:
    """Where the per-layer values came from: the journal (a resumed run), the layer-cache folders
    read or written, or neither. It named the folder of a fingerprint made from a resumed journal's
    environment, which did not exist: the values were the journal's."""
    cache = opt.layer_cache
    parts = []
    if sweep.get("from_journal"):
        every = sweep["from_journal"] == sweep["shapes"]
        parts.append(f"{'' if every else str(sweep['from_journal']) + ' '}replayed from the journal")
    used = list(cache.used) if cache is not None else []
    if used:
        parts.append(f"cached per device in {', '.join(str(d) for d in used)}")
    elif cache is not None and cache.write_failed:
        parts.append("not cached: the layer cache could not be written")
    return f" ({'; '.join(parts)})" if parts else ""


def build_report(
    opt: Optimizer, best: Evaluation, fidelity: dict[str, Any] | None, sweep: dict[str, Any], budget_hit: bool
) -> dict[str, Any]:
    """Everything a reader (or a script) needs about one run, as plain JSON data."""
    from deployopt.journal import plan_key

    cfg = opt.cfg
    measured = bool(opt.session.backend.measured)
    # trtexec sessions say when their INT8 engines had no calibration table (sweep session included)
    sessions = (opt.session, opt._sweep_session)
    placeholder_int8 = any(getattr(s, "placeholder_int8", False) is True for s in sessions)
    base = opt._by_key[plan_key(opt.original)]
    r8 = opt._by_key[plan_key(opt.round_up)]
    timings = {"input": opt.final_timing(base), "round_up_8": opt.final_timing(r8), "best": best.timing}
    comparisons = {}
    behind = next((c for c in confirmations(opt) if c.get("fallback_vs_input") == "behind"), None)
    for name, ref in (("vs_input", timings["input"]), ("vs_round_up_8", timings["round_up_8"])):
        # said why, so that an answer which changes nothing does not read as a run that failed
        ref_ev = base if name == "vs_input" else r8
        same = plan_key(best.plan) == plan_key(ref_ev.plan)
        if not same and measured:  # on the builds (measured_comparison_row), not pooled samples
            comparisons[name] = measured_comparison_row(
                ref,
                best.timing,
                cfg.alpha,
                cfg.min_effect,
                "the input" if name == "vs_input" else "round-up-to-8",
            )
            continue
        c = compare(ref, best.timing, alpha=cfg.alpha, min_effect=cfg.min_effect)
        phrase = same_plan_phrase(opt, name, ref_ev, measured) if same else None
        if same and name == "vs_input" and behind is not None:
            phrase = behind_phrase(behind, timings["round_up_8"], timings["input"], cfg.max_evals)
        missed = unevaluated_solver_plan(opt, ref_ev) if same and budget_hit else None
        if phrase is not None and missed:  # in place of "no other widths were … faster", which only
            # the budget made true
            plain = phrase == same_plan(name, cfg.min_effect, measured)
            phrase = f"the same plan: {missed}" if plain else f"{phrase}; {missed}"
        comparisons[name] = comparison_row(c, measured, phrase)
        if measured:  # the keys of measured_comparison_row's: the same plan is tested on nothing
            builds = {"baseline": ref.replicate_count, "answer": best.timing.replicate_count}
            comparisons[name].update(test=None, builds=builds, change_ci_pct=None, change_ci_level=None)
    unconfirmed = getattr(opt, "unconfirmed_vs_input", None)
    if unconfirmed and plan_key(best.plan) == plan_key(r8.plan) != plan_key(base.plan):
        # round-up-to-8 is the answer and no round put it to the input: one build of the input
        comparisons["vs_input"]["describe"] += f"; {unconfirmed}"
    else:
        unconfirmed = None

    groups = []
    labels = layer_labels(opt.model)  # torch's default exporter: node_conv2d_3 → features.3
    for gid in opt.groups:  # analysis order (graph order), not alphabetical
        g = opt.groups[gid]
        groups.append(
            {
                "id": gid,
                **({"layer": labels[gid]} if gid in labels else {}),
                "original": opt.original[gid],
                "dead": opt.dead[gid],
                "round_up_8": opt.round_up[gid],
                "best": best.plan[gid],
                "candidates": opt.domains.get(gid, []),
                "producers": list(getattr(g, "producers", []) or []),
                # added: a grouped conv's group has its widths (original, dead, round_up_8, best,
                # candidates) per conv group, as `analyze` gives them; the GPU sees repeat × width
                # channels (1 for every other group)
                "repeat": int(getattr(g, "repeat", 1) or 1),
            }
        )
    layers = []
    before_shapes = opt.conv_shapes(opt.original)
    r8_shapes = opt.conv_shapes(opt.round_up)
    after_shapes = opt.conv_shapes(best.plan)
    params = opt.target.wave_params(cfg.dtype) if opt._predict is not None else None

    def in_table(name: str) -> bool:
        """Whether the search's table prices the conv: a free group is among those it reads or
        writes (_build_table leaves out a conv with none)."""
        deps = getattr(opt, "deps", None)
        return deps is None or bool(deps.get(name))

    def table_us(name: str, shape: Any, plan: dict[str, int]) -> float | None:
        """The conv's value as the table prices it, so that each column sums to the evaluation's
        table µs: a separable table's sum (a conv reading a wide concat, whose shape at `plan` was
        not timed whole, or was timed for another conv), else the conv's timed value. None ("—")
        for a conv no free group reaches (no scope in opt.deps): the table leaves it out, and it got
        a value only where a swept conv had its shape (ShuffleNetV2's branch1 convs: the "before"
        column summed to 801.3 µs against evaluation #1's 747.7)."""
        if not in_table(name):
            return None
        value = opt.separable_table_us(name, plan) if hasattr(opt, "separable_table_us") else None
        return value if value is not None else opt.layer_values.get(shape.signature())

    for name, after in after_shapes.items():
        before, rounded = before_shapes[name], r8_shapes[name]
        row: dict[str, Any] = {
            "conv": name,
            "before": {"c": before.c, "k": before.k},
            "round_up_8": {"c": rounded.c, "k": rounded.k},
            "after": {"c": after.c, "k": after.k},
            "table_before_us": table_us(name, before, opt.original),
            "table_round_up_8_us": table_us(name, rounded, opt.round_up),
            "table_after_us": table_us(name, after, best.plan),
            "in_table": in_table(name),  # added: false where every group of the conv is frozen
        }
        if params is not None:
            from deployopt.waves import predict, size_class

            pb, pa = predict(before, opt.target, cfg.dtype), predict(after, opt.target, cfg.dtype)
            row["waves_before"], row["tail_fill_before"] = pb.waves, pb.tail_fill
            row["waves_after"], row["tail_fill_after"] = pa.waves, pa.tail_fill
            # a launch-bound layer's width change is not the model's to explain
            # (docs/wave_model_evaluation.md, "By conv size")
            row["size_class_before"] = size_class(pb.predicted_us, params, before.is_depthwise)
        layers.append(row)

    evaluations = [
        {
            "index": e.index,
            "label": e.label,
            "median_us": e.timing.median_us,
            "iqr_us": e.timing.iqr_us if e.timing.measured else None,  # a prediction has no spread
            "runs": e.timing.runs if e.timing.measured else None,
            "table_us": e.table_us,
            # TensorRT's build of this evaluation's engine, in seconds (trtexec's "Engine built in",
            # the runner's or the backend's wall time); null where nothing was built or timed
            "build_s": e.timing.environment.get("engine_build_s") if not e.replayed else None,
            "accepted": e.accepted,
            "from_journal": e.replayed,
            "plan": e.plan,
            # a move's predicted change apart: the per-layer conv table's and the fitted traffic's
            # (added field; null where the label has no such split)
            "move_parts": _move_parts(opt, e),
        }
        for e in opt.evaluations
    ]
    solutions = [
        {"plan": s.plan, "table_us": s.cost_us, "method": s.method} for s in getattr(opt, "solutions", [])
    ]
    # what the console's latency lines say after the backend: where, and whether not on the target
    measured_on = f"{opt.backend_name}{_where(opt, best.timing)}"
    what = (
        [
            f"end-to-end latencies: measured on {measured_on} "
            f"({cfg.runs} runs each after {cfg.warmup} warm-up)",
            f"per-layer tables: measured on {measured_on}, "
            f"{_samples_per_conv(sweep.get('samples_per_conv'), cfg.sweep_runs or cfg.runs)} per conv"
            f"{_table_source(opt, sweep)}"
            if opt.layer_cache is not None
            else "per-layer tables: measured",
            "candidate ranking and wave/tail columns: predicted by the wave model",
            *([f"INT8: {PLACEHOLDER_INT8_NOTE}"] if placeholder_int8 else []),
            *([cache] if (cache := opt.timing_cache_phrase()) else []),
        ]
        if measured
        else [
            f"every latency here is {PREDICTED_NOTE} ({best.timing.predictor})",
            "wave/tail columns and candidate ranking: predicted by the wave model",
        ]
    )
    return {
        "tool": "deployopt optimize",
        "model": str(cfg.model_path),
        "target": {"name": opt.target.name, "sms": opt.target.sms},
        "backend": opt.backend_name,
        "measured": measured,
        "measured_on": measured_on if measured else None,
        "note": PREDICTED_NOTE if not measured else (PLACEHOLDER_INT8_NOTE if placeholder_int8 else None),
        "mode": cfg.mode,
        "max_trim": cfg.max_trim if cfg.mode == "trim" else None,
        "dtype": cfg.dtype,
        "batch": next(iter(opt.loaded.input_shapes.values()), [None])[0],
        "latency": {k: _timing_row(t) for k, t in timings.items()},
        "timings": {k: t.to_json() for k, t in timings.items()},
        "comparisons": comparisons,
        "best_label": best.label,
        "plan": {g: int(w) for g, w in sorted(best.plan.items())},
        "groups": groups,
        "layers": layers,
        "evaluations": {
            "count": len(opt.evaluations),
            "max": cfg.max_evals,
            "measured_this_run": opt.measured_now,
            "from_journal": sum(e.replayed for e in opt.evaluations),
            "budget_exhausted": budget_hit,
            # no more than the baselines leave of --max-evals (4 of a budget of 2 read as arithmetic)
            "reserved_for_confirmation": max(0, min(getattr(opt, "confirm_reserve", 0), cfg.max_evals - 2)),
            "list": evaluations,
        },
        "per_layer_sweep": sweep,
        "solver": {
            "method": solutions[0]["method"] if solutions else None,
            "top_plans": solutions,
            # the per-layer table's sum (as each evaluation's table_us); the traffic priced on top, if
            # any, is traffic.us_per_mb × traffic.mb_best
            "table_cost_best_us": opt.conv_table.cost(best.plan) if opt._in_domains(best.plan) else None,
            "check": getattr(opt, "solver_check", None),
        },
        # the non-conv ops' memory traffic: bytes per channel of each group, and the µs per MB fitted
        # to this run's measurements (0 until established); `fits` is every change, in order
        "traffic": _traffic_json(opt, best),
        # the last confirmation (its decision is the answer), and every one in order (added field:
        # round-up-to-8 is put to the input after a searched plan failed against it)
        "confirmation": opt.confirmation,
        "confirmations": list(getattr(opt, "confirmations", None) or []),
        # why round-up-to-8, the answer, stands unconfirmed against the input (added field; null
        # where it was confirmed, or is not the answer)
        "vs_input_unconfirmed": unconfirmed,
        # measurements during which power or heat held the GPU's clock down (torch, local trtexec)
        "clock_slowdowns": clock_slowdowns(opt, timings),
        # the GPU that measured is not the target (another SM count or compute capability), or the
        # board says it is another Jetson (its part number: --target kept against the board's word)
        "measured_elsewhere": _elsewhere(opt.target, best.timing.environment) if measured else None,
        # a board timed with its GPU clock following DVFS (jetson_clocks not run)
        "clock_unlocked": unlocked_phrase(best.timing.environment) if measured else None,
        "fidelity": fidelity,
        "trim_gate": cfg.trim_gate() if cfg.mode == "trim" and cfg.fidelity else None,
        "refused": list(opt._refused.values()),
        "what_was_measured": what,
        "staircases": [],
    }


def _move_parts(opt: Optimizer, e: Evaluation) -> dict[str, Any] | None:
    """The conv-table and fitted-traffic parts of a move's label value (Optimizer._move_value),
    for the evaluation that measured that move (not its confirmation rebuilds)."""
    from deployopt.journal import plan_key

    if not e.label.startswith("move ") or "(confirm " in e.label:
        return None
    parts = getattr(opt, "move_parts", None) or {}
    return parts.get(plan_key(e.plan))


def _traffic_json(opt: Optimizer, best: Evaluation) -> dict[str, Any] | None:
    tr = getattr(opt, "traffic", None)
    if tr is None:
        return None
    fit = opt.traffic_fit
    return {
        "enabled": bool(opt.cfg.traffic_term),
        "bytes_per_channel": {g: tr.per_channel[g] for g in sorted(tr.per_channel)},
        "mb_input": tr.bytes(opt.original) / MB,
        "mb_best": tr.bytes(best.plan) / MB,
        **fit.to_json(),
        "fits": list(opt.traffic_fits),
    }


def clock_slowdowns(opt: Optimizer, final: dict[str, Timing]) -> list[dict[str, Any]]:
    """The measurements during which power or heat held the GPU's clock down (each Timing's
    "clock_slowdown_us", or a Jetson runner's record of its timed loop: deployopt.clocks): their
    latencies are slower than the GPU's own, and a search decision made on one may be wrong.
    Evaluations in order, then the final timings. "slowdown_us" holds nvidia-smi's durations ({}
    for a Jetson's record, which has none); "describe" says what held the clock down."""
    from deployopt.clocks import held_down_phrase, recorded_slowdown

    seen = [(e.label, e.timing) for e in opt.evaluations]
    seen += [(f"{name} (final)", t) for name, t in final.items() if all(t is not s for _, s in seen)]
    out = []
    for label, timing in seen:
        held = held_down_phrase(timing.environment)
        if held:
            out.append(
                {"label": label, "slowdown_us": recorded_slowdown(timing.environment), "describe": held}
            )
    return out


def clock_slowdown_note(slowdowns: list[dict[str, Any]]) -> str | None:
    """One line for the console and report.md, or None when no measurement was held down."""
    if not slowdowns:
        return None
    shown = "; ".join(f"{s['label']}: {s['describe']}" for s in slowdowns[:3])
    more = f"; and {len(slowdowns) - 3} more" if len(slowdowns) > 3 else ""
    return (
        f"the GPU's clock was held down by power or heat during {len(slowdowns)} measurement(s) "
        f"({shown}{more}): those latencies are slower than this GPU's, so check its cooling and "
        "power limit and run again"
    )


def _where(opt: Optimizer, timing: Timing) -> str:
    """' (device)' as the console prints it, and on the host CPU that it is not the target's GPU:
    report.md said 'measured on ort' under 'target: orin-nano-8gb', which reads as the Jetson's
    latencies (the console's warning about it goes nowhere near the report)."""
    from deployopt.environment import where_measured

    where = where_measured(timing.environment)
    if getattr(opt.session, "runs_on_gpu", None) is False:
        where = f"{where}; " if where else ""
        where += f"this machine's CPU, not the GPU of {opt.target.name}"
    return f" ({where})" if where else ""


def write_staircases(outdir: Path, report: dict[str, Any], opt: Optimizer) -> list[str]:
    """One PNG per group the search moved off round-up-to-8: the producing conv's table over the
    group's candidate widths, with the wave model's staircase and the original, round-up and chosen
    widths. A picture that cannot be drawn is one `warning:` line and left out, never an error: it
    must not cost the run's results (a `$` in a conv name ended optimize after its search). Each
    picture drawn has its facts in `report["staircase_facts"]` (set here: `_staircase_fact`), for
    report.md's alt text and the line under it."""
    from deployopt.plots import plot_staircase, short_name

    measured = report["measured"]
    out: list[str] = []
    facts: list[dict[str, Any]] = []
    report["staircase_facts"] = facts  # what each picture shows, in words (render_markdown)
    taken: set[str] = set()
    failed: list[str] = []
    best = report["plan"]
    for g in staircase_groups(report)[:MAX_PLOTS]:
        gid = g["id"]
        producers = set(g["producers"])
        convs = [c for c in opt.deps if c in producers] or [c for c, deps in opt.deps.items() if gid in deps]
        conv = next((c for c in opt.conv_shapes(best) if c in convs), None)
        if conv is None:
            continue
        widths = sorted(g["candidates"])
        values, preds, waves, shapes = [], [], [], []
        for w in widths:
            shape = opt.conv_shape(conv, {**best, gid: w})
            shapes.append(shape)
            values.append(opt.layer_values.get(shape.signature()))
            if opt._predict is not None:
                from deployopt.waves import predict

                p = predict(shape, opt.target, opt.cfg.dtype)
                preds.append(p.predicted_us)
                waves.append(p.waves)
        name = _png_name(gid, taken)
        role = "output" if conv in producers else "input"
        quartiles, spread = _cached_spread(opt, shapes, values) if measured else (None, "")
        where = report["measured_on"] or report["backend"]
        r = _repeat(g)
        # a grouped conv's group: the x axis is its width per conv group, as analyze gives it
        per = f" per conv group, ×{r}" if r > 1 else ""
        try:
            plot_staircase(
                widths,
                outdir / "staircases" / name,
                predicted_us=preds or (values if not measured else None),
                waves=waves or None,
                measured_us=values if measured else None,
                measured_quartiles_us=quartiles,
                title=f"{short_name(conv)}: {role} channels"
                + (f" of group {short_name(gid)}" if gid != conv else "")  # 'conv0 … of group conv0'
                + f" (original {per_conv_group(g['original'], r)}, round-up to 8 "
                f"{per_conv_group(g['round_up_8'], r)}, chosen {per_conv_group(g['best'], r)})",
                predicted_label=_predicted_label(opt) if preds else "wave model (predicted)",
                measured_label=f"per-layer table, measured on {where} ({spread})",
                xlabel=f"{role} channels{per} (group {short_name(gid)})",
                marks=[
                    ("original", g["original"]),
                    ("round-up to 8", g["round_up_8"]),
                    ("chosen", g["best"]),
                ],
            )
        except Exception as exc:  # a picture never costs the results: said below, not hidden
            if isinstance(exc, ImportError):
                reraise_interrupt(exc)  # an interrupted import ends the run as interrupted
            failed.append(_why_not_drawn(exc))
            continue
        out.append(f"staircases/{name}")
        facts.append(_staircase_fact(opt, best, out[-1], g, conv, role, bool(preds), where, measured))
    if failed:
        import warnings

        from deployopt.errors import DeployoptWarning

        warnings.warn(
            f"{len(failed)} of {len(failed) + len(out)} staircase pictures not drawn ({failed[0]}); "
            "report.md goes on without them",
            DeployoptWarning,
            stacklevel=2,
        )
    return out


def _staircase_fact(
    opt: Optimizer,
    best: dict[str, int],
    path: str,
    g: dict[str, Any],
    conv: str,
    role: str,
    predicted: bool,
    where: str,
    measured: bool,
) -> dict[str, Any]:
    """What one staircase picture shows, as report.json → `staircase_facts` holds it and report.md
    says it (alt text and a line under the picture): the pictures' facts were pixels only, their alt
    text the file path (bug bash). `us`: the plotted conv's per-layer table value at the original,
    round-up-to-8 and chosen widths (measured, or the wave model's on a predicted run; null where the
    table has none); `predicted_us`: the wave model's at those widths beside measured values (else
    null)."""
    marks = {}
    for key, width in (("original", g["original"]), ("round_up_8", g["round_up_8"]), ("chosen", g["best"])):
        shape = opt.conv_shape(conv, {**best, g["id"]: width})
        us = opt.layer_values.get(shape.signature())
        pred = None
        if measured and predicted:
            from deployopt.waves import predict

            pred = float(predict(shape, opt.target, opt.cfg.dtype).predicted_us)
        marks[key] = {"width": width, "us": us, "predicted_us": pred}
    return {
        "file": path,
        "group": g["id"],
        "conv": conv,
        "channels": role,
        "repeat": _repeat(g),
        "candidates": [min(g["candidates"]), max(g["candidates"])] if g["candidates"] else None,
        "us_from": f"per-layer table, measured on {where}" if measured else PREDICTED_NOTE,
        "marks": marks,
    }


def staircase_groups(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The decisions beyond plain rounding, which get a staircase picture (MAX_PLOTS at most):
    the groups whose chosen width is neither their round-up to 8 nor their original."""
    return [g for g in report["groups"] if g["best"] not in (g["round_up_8"], g["original"])]


def _predicted_label(opt: Optimizer) -> str:
    """The predicted steps' legend entry: for which target, SMs and dtype, by which parameters
    (it said 'wave model (predicted)', not which fit nor for what GPU)."""
    target, dtype = opt.target, opt.cfg.dtype
    return (
        f"predicted for {target.display_name} ({sm_count(target.sms)}, {dtype}), "
        f"{target.wave_params(dtype).describe()}"
    )


def _png_name(gid: str, taken: set[str]) -> str:
    """A staircase file name of its own for group `gid`: an id cut to 80 characters, or with
    characters a file name cannot hold, gets a short hash of the whole id (two groups whose ids
    shared their first 80 characters wrote one file, and report.md linked it twice); a name this
    run already gave (any case: macOS folders ignore it) gets a counter too."""
    import hashlib

    stem = _safe(gid)
    if stem != gid:
        stem = f"{stem[:60]}_{hashlib.sha1(gid.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
    name, n = f"staircase_{stem}.png", 1
    while name.lower() in taken:
        n += 1
        name = f"staircase_{stem}_{n}.png"
    taken.add(name.lower())
    return name


def _cached_spread(
    opt: Optimizer, shapes: list[Any], values: list[float | None]
) -> tuple[list[tuple[float, float] | None] | None, str]:
    """Each plotted median's quartiles from its layer-cache entry, and the legend's words for them:
    'median of 10 samples, bars from the first to the third quartile'. The plots showed bare
    medians with no spread and no count (bug bash). A point whose entry is missing (no cache this
    run, a value it did not time, an entry since replaced) or holds one sample has no bar; where no
    point has one, the legend says 'median' and no bars are drawn."""
    cache = getattr(opt, "_layer_cache", None)
    quartiles: list[tuple[float, float] | None] = []
    counts: list[int] = []  # samples of each point whose entry gave its value
    for shape, value in zip(shapes, values):
        t = cache.get(shape) if cache is not None and value is not None else None
        if t is None or abs(t.median_us - value) > 1e-9 * max(1.0, abs(value)):  # not this value's entry
            quartiles.append(None)
            continue
        quartiles.append(t.quartiles_us if t.runs >= 2 else None)
        counts.append(t.runs)
    shown = sum(v is not None for v in values)
    if not counts:
        return None, "median; the layer cache holds no samples for these points, so no spread shown"
    n = counted(counts[0], "sample") if min(counts) == max(counts) else f"{min(counts)}–{max(counts)} samples"
    with_bars = sum(q is not None for q in quartiles)
    if not with_bars:
        return None, f"median of {n}, no spread shown"
    bars = "bars from the first to the third quartile"
    if with_bars < shown:
        bars += f" ({with_bars} of {shown} points; the others: no spread kept)"
    return quartiles, f"median of {n}, {bars}"


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:80]


def _budget_note(ev: dict[str, Any], every: list[dict[str, Any]]) -> str:
    """Why the search stopped at the budget: with a measured backend part of --max-evals is held
    back for the confirmation rounds, so "exhausted" alone would be untrue when those go unused.
    `every`: each confirmation (`confirmations`), its rounds counted (round-up-to-8 against the
    input, after a searched plan failed against it, takes more than the reserve: from what the
    search left)."""
    if not ev["budget_exhausted"]:
        return ""
    reserved = ev.get("reserved_for_confirmation") or 0
    if not reserved:
        return " — budget exhausted"
    if every:
        used = sum(2 * rebuilds(c) for c in every)
        return f" — search budget spent; {reserved} kept back for the confirmation rounds ({used} used)"
    return (
        f" — search budget spent; {reserved} kept back for the confirmation rounds, unused "
        "(the answer is a baseline: nothing to confirm, or no round of it fitted)"
    )


def _build_lines(evaluations: list[dict[str, Any]]) -> list[str]:
    """How long TensorRT took to build this run's end-to-end engines, where it reported it: the
    first build times every tactic; with the timing cache the later ones reuse what it timed."""
    times = [e["build_s"] for e in evaluations if e.get("build_s") is not None]
    if not times:
        return []
    line = f"- engine builds, end to end: {len(times)}, {sum(times):.1f} s in all (measured wall time)"
    if len(times) > 1:
        line += f"; the first {times[0]:.1f} s, the others a median {statistics.median(times[1:]):.1f} s"
    return [line]


def _fmt(t: dict[str, Any]) -> str:
    if not t["measured"]:
        return f"{t['median_us']:.1f} µs (predicted)"
    # a confirmed plan's latency pools its rebuilds: say how many
    runs = f"{t['runs']} runs" + (f" in {t['builds']} builds" if (t.get("builds") or 1) >= 2 else "")
    if t["ci95_us"] is None:  # fewer runs than a 95 % CI of the median needs (timing.CI_MIN_RUNS)
        return f"{t['median_us']:.1f} µs (IQR {t['iqr_us']:.1f}, no 95% CI, {runs})"
    lo, hi = t["ci95_us"]
    return f"{t['median_us']:.1f} µs (IQR {t['iqr_us']:.1f}, 95% CI [{lo:.1f}, {hi:.1f}], {runs})"


def confirmation_line(conf: dict[str, Any]) -> str:
    """The confirmation rounds in one line: the medians of each round, the pooled gain and whether
    the plan was kept; the report's and the terminal's words (optimize printed nothing of it, so an
    answer that fell back to a baseline read as if nothing had been found). A searched plan that
    failed against round-up-to-8 does not make round-up-to-8 the answer where round-up-to-8 is put
    to the input next: the line says so, not "so the answer is round-up-to-8"."""
    rounds = ", ".join(
        f"{b:.1f} vs {a:.1f}"
        for b, a in zip(conf["best_round_medians_us"], conf["baseline_round_medians_us"])
    )
    search = conf.get("search_build_medians_us")
    per = "rebuild" if search else "round"
    # the search's own builds: chosen for measuring fast, so not counted (said, not hidden)
    aside = (
        f"; the search's builds, {search['best']:.1f} vs {search['baseline']:.1f}, not counted"
        if search
        else ""
    )
    then = conf.get("fallback_vs_input")
    if conf["kept"]:
        verdict = "kept: its slowest rebuild faster than the baseline's fastest"
    elif then == "rounds":
        verdict = f"not confirmed, so {conf['baseline']}, in its place, is confirmed against the input next"
    elif then == "budget":
        verdict = (
            f"not confirmed, so the answer is {conf['baseline']} (itself not confirmed against the "
            "input: no evaluation of --max-evals was left for a rebuild round of each)"
        )
    elif then == "behind":
        verdict = (
            f"not confirmed, and {conf['baseline']}'s rebuilds measured behind the input's one build, "
            "with no evaluation of --max-evals left for a rebuild round of each, so the answer is the input"
        )
    else:
        verdict = f"not confirmed, so the answer is {conf['baseline']}"
    # round-up-to-8 confirmed against the input is named: it is no searched plan
    what = conf.get("answer") if conf.get("answer_is_baseline") else "searched plan"
    after = f", in place of {conf['after']}" if conf.get("after") else ""
    return (
        f"confirmation ({_rounds_each(conf)}, {what} vs {conf['baseline']}{after}, "
        f"median µs per {per}: {rounds}; {pooled_change(conf)}{aside}): {verdict}"
    )


def _rounds_each(conf: dict[str, Any]) -> str:
    """'2 rebuilds each', or '3 builds each' for a record whose rounds counted the search's builds."""
    if "search_build_medians_us" in conf:
        return f"{counted(conf['rounds'], 'rebuild')} each"
    return f"{counted(conf['rounds'], 'build')} each"


def _confirmation_lines(report: dict[str, Any]) -> list[str]:
    """Each confirmation's line, then (where there is one) what its change and the vs lines' are."""
    lines = [f"- {confirmation_line(conf)}" for conf in confirmations(report)]
    return [*lines, f"- how to read the changes: {CHANGES_KEY}."] if lines else []


def _traffic_lines(tr: dict[str, Any] | None, measured: bool) -> list[str]:
    if not tr or not tr.get("enabled"):
        return []
    if not measured:  # "not fitted yet" would read as if a fit were still to come
        return [
            f"- non-conv memory traffic: {tr['mb_input']:.1f} MB for the input's widths; not fitted "
            "(nothing was measured) and not priced"
        ]
    how = "priced in the search's table" if tr["used"] else "not priced (the table counts convs only)"
    return [
        f"- non-conv memory traffic: {tr['mb_input']:.1f} MB for the input's widths, {tr['mb_best']:.1f} MB "
        f"chosen; {tr['why']}: {how}"
    ]


def _from_cache(sw: dict[str, Any]) -> str:
    """'12 from the cache', or '0 from the cache, 423 from the journal' for a resumed run's values
    (its journal's were counted as the cache's)."""
    journal = sw.get("from_journal") or 0
    return f"{sw['cached'] - journal} from the cache" + (f", {journal} from the journal" if journal else "")


def _repeat(group: dict[str, Any]) -> int:
    """A report group's conv groups (`repeat`; 1 in a report written before the field)."""
    return int(group.get("repeat") or 1)


def per_conv_group(width: int, repeat: int) -> str:
    """A group's width as `deployopt analyze` prints it: '6 ×5' (6 channels in each of a grouped
    conv's 5 conv groups, 30 in all), or '6' where the group is no grouped conv's (repeat 1); 0 is
    '0' either way."""
    return f"{width} ×{repeat}" if repeat > 1 and width else str(width)


def render_markdown(report: dict[str, Any]) -> str:
    lat, ev, sw, tgt = report["latency"], report["evaluations"], report["per_layer_sweep"], report["target"]
    lines = [f"# deployopt optimize: {Path(report['model']).name}", ""]
    if not report["measured"]:
        lines += [f"**All latencies in this report are {PREDICTED_NOTE}.**", ""]
    elif report.get("note"):
        lines += [f"**Note: {report['note']}.**", ""]
    slow_note = clock_slowdown_note(report.get("clock_slowdowns") or [])
    if slow_note:
        lines += [f"**Warning: {slow_note}.**", ""]
    for key in ("measured_elsewhere", "clock_unlocked"):
        if report.get(key):
            lines += [f"**Warning: {report[key]}.**", ""]
    lines += [
        f"- target: {tgt['name']} ({sm_count(tgt['sms'])}); backend: {report['backend']}; "
        f"dtype: {report['dtype']}; batch: {report['batch']}",
        *([f"- latencies measured on {report['measured_on']}"] if report.get("measured_on") else []),
        f"- mode: {report['mode']}" + (f" (max trim {report['max_trim']:.0%})" if report["max_trim"] else ""),
        *([f"- model.onnx: {report['written_batch']}"] if report.get("written_batch") else []),
        *([f"- notice: {report['unpriced_notice']}"] if report.get("unpriced_notice") else []),
        *_engine_lines(report),
        f"- end-to-end evaluations: {ev['count']} of at most {ev['max']} "
        f"({ev['measured_this_run']} this run, {ev['from_journal']} from the journal)"
        + _budget_note(ev, confirmations(report)),
        *_build_lines(ev["list"]),
        f"- per-layer sweep: {sw['shapes']} conv shapes, {sw['measured']} "
        f"{'timed' if report['measured'] else 'predicted'} ({sw['seconds']:.1f} s), "
        f"{_from_cache(sw)}; by {sw['measured_by']}",
        *_traffic_lines(report.get("traffic"), report["measured"]),
        "",
        "## Latency",
        "",
        "| model | latency |",
        "|---|---|",
        f"| input | {_fmt(lat['input'])} |",
        f"| round-up-to-8 | {_fmt(lat['round_up_8'])} |",
        f"| deployopt ({report['best_label']}) | {_fmt(lat['best'])} |",
        "",
        f"- vs input: {report['comparisons']['vs_input']['describe']}",
        f"- vs round-up-to-8: {report['comparisons']['vs_round_up_8']['describe']}",
        *_confirmation_lines(report),
        "",
        "## Widths",
        "",
        "| group | original | dead | round-up-to-8 | chosen | candidates |",
        "|---|---|---|---|---|---|",
    ]
    for g in report["groups"]:
        name = f"{g['id']} ({g['layer']})" if "layer" in g else g["id"]
        r = _repeat(g)
        each = f" (×{r} each)" if r > 1 and g["candidates"] else ""
        lines.append(
            f"| {name} | {per_conv_group(g['original'], r)} | {per_conv_group(g['dead'], r)} "
            f"| {per_conv_group(g['round_up_8'], r)} | **{per_conv_group(g['best'], r)}** | "
            f"{', '.join(map(str, g['candidates']))}{each} |"
        )
    grouped = next((g for g in report["groups"] if _repeat(g) > 1), None)
    if grouped is not None:  # "6 → 8" for a 30-channel layer read as a trim to 8 channels (bug bash)
        w, r = grouped["original"], _repeat(grouped)
        lines += [
            "",
            "A grouped conv's group has its widths per conv group, as `deployopt analyze` prints them: "
            f"{w} ×{r} is {w} channels in each of {r} conv groups, {w * r} in all (report.json → "
            "groups → `repeat`).",
        ]
    what = "measured" if report["measured"] else "predicted"
    lines += [
        "",
        f"## Per layer (table values {what}, µs)",
        "",
        "| conv | C×K before | C×K after | before | round-up-8 | after | waves before → after |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["layers"]:

        def v(x: float | None) -> str:
            return "—" if x is None else f"{x:.1f}"

        waves = (
            f"{row['waves_before']} ({fill_percent(row['tail_fill_before'])}%) → "
            f"{row['waves_after']} ({fill_percent(row['tail_fill_after'])}%)"
            if "waves_before" in row
            else "—"
        )
        if row.get("size_class_before", "wave-bound") != "wave-bound":
            waves += f", {row['size_class_before']}"
        lines.append(
            f"| {row['conv']} | {row['before']['c']}×{row['before']['k']} "
            f"| {row['after']['c']}×{row['after']['k']} | {v(row['table_before_us'])} "
            f"| {v(row['table_round_up_8_us'])} | {v(row['table_after_us'])} | {waves} |"
        )
    outside = sum(1 for r in report["layers"] if r.get("in_table") is False)
    if outside:
        lines += [
            "",
            f"{outside} of {len(report['layers'])} convs out of the search's table (—): every group they "
            "read or write is frozen, so no plan changes them; each column sums to an evaluation's table µs.",
        ]
    classes = [r.get("size_class_before") for r in report["layers"]]
    for cls in ("launch-bound", "small"):
        if cls in classes:
            from deployopt.waves import SIZE_CLASS_MEANING

            lines += ["", f"{classes.count(cls)} of {len(classes)} layers {cls}: {SIZE_CLASS_MEANING[cls]}."]
    fid = report.get("fidelity")
    lines += ["", "## Fidelity (onnxruntime, reference = input model)", ""]
    if fid:
        lines += _fidelity_figures(fid, report.get("trim_gate") or {})
        if fid.get("top1_note"):  # which outputs top-1 was applied to, and those left out (not before)
            lines.append(f"- {_one_line(fid['top1_note'])}")
        source = fid.get("source") or "calibration set"
        random_note = fid.get("random_inputs") and "random" not in source  # say it once
        n = fid.get("samples")
        count = f", {n} sample{'' if n == 1 else 's'}" if n else ""
        chosen = f" ({fid['samples_chosen']})" if fid.get("samples_chosen") else ""  # which of the data's
        lines.append(f"- inputs: {source}{count}{chosen}" + (" (random inputs)" if random_note else ""))
        if report.get("image_preprocess"):
            from deployopt.fidelity import describe_preprocess

            lines.append(f"- images made into tensors by: {describe_preprocess(report['image_preprocess'])}")
        lines.append("- failures: " + ("; ".join(fid["failures"]) if fid.get("failures") else "none"))
        gate = report.get("trim_gate")
        if gate:
            lines.append(f"- trim gate: {describe_gate(gate, **gate_checks(fid))}")
    else:
        lines.append("- not checked in this run")
    if report.get("trim_order"):  # how trimmed channels were chosen, and on which samples
        lines.append(f"- trimmed channels ranked by: {report['trim_order']}")
    refused = report.get("refused", [])
    if refused:
        lines += ["", f"Plans refused for fidelity before measuring ({len(refused)}):", ""]
        lines += [f"- {e['label']}: {e['reason']}" for e in refused[:20]]
    lines += [
        "",
        "## Evaluations",
        "",
        f"| # | what | median µs ({what}) | IQR | table µs ({what}) | accepted |",
        "|---|---|---|---|---|---|",
    ]
    for e in report["evaluations"]["list"]:
        table = "—" if e["table_us"] is None else f"{e['table_us']:.1f}"
        lines.append(
            f"| {e['index']} | {e['label']} | {e['median_us']:.1f} | "
            f"{'—' if e['iqr_us'] is None else format(e['iqr_us'], '.1f')} | {table} | "
            f"{'yes' if e['accepted'] else ''} |"
        )
    if report["staircases"]:
        lines += ["", "## Staircases behind the decisions", ""]
        lines += _staircase_lines(report)
        left_out = len(staircase_groups(report)) - MAX_PLOTS
        if left_out > 0:  # the reader saw 12 pictures and could not know more groups had changed
            more = counted(left_out, "more group")
            lines += ["", f"({more} changed; pictures are drawn for the first {MAX_PLOTS} only.)"]
    lines += ["", "## What was measured, what was predicted", ""]
    lines += [f"- {w}" for w in report["what_was_measured"]]
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    """A name in report.md's running text, on one line: each control character as `\\x..`."""
    return "".join(f"\\x{ord(ch):02x}" if ord(ch) < 32 or 127 <= ord(ch) < 160 else ch for ch in text)


#: report.md's fidelity figures: (report.json key, label, limit key of the trim gate or of the
#: fidelity JSON, decimals, percent); shares and relative changes in percent, as `verify` and the
#: terminal print them (top-1 was "0.250000" beside "25.00% < 99.00%" and "≥ 99%": bug bash)
FIDELITY_FIGURES = (
    ("max_abs_error", "max abs error", None, None, False),
    ("cosine_min", "cosine min", "min_cosine", 6, False),
    ("top1_agreement", "top-1 agreement", "min_top1", 2, True),
    ("relative_error_max", "relative error max", "relative_error_limit", 2, True),
    ("scale_change_max", "row scale change max", "scale_change_limit", 2, True),
    ("exact_match", "exact match", "min_top1", 2, True),
)


def _fidelity_figures(fid: dict[str, Any], gate: dict[str, Any]) -> list[str]:
    """One line per figure of the fidelity check, its unit as `verify` gives it, against the
    threshold it was held to where that is known (a trim gate's, or the limit the fidelity JSON
    records), with the digits that show the side each falls on: every failure line has its figure
    here (the row scale's had none)."""
    from deployopt.fidelity import shown_against

    lines = []
    for key, label, limit_key, decimals, percent in FIDELITY_FIGURES:
        value = fid.get(key)
        if value is None:
            continue
        limit = None
        if limit_key in ("min_cosine", "min_top1"):
            limit = gate.get(limit_key)
        elif limit_key is not None:
            limit = fid.get(limit_key)
        if decimals is None:
            lines.append(f"- {label}: {value:.6g}")
            continue
        computed = limit_key in ("relative_error_limit", "scale_change_limit")  # √(2·(1 − min cosine))
        # a share or cosine below 1, with no threshold, is still not shown as 1 ("100.00%")
        ceiling = 1.0 if limit is None and limit_key in ("min_cosine", "min_top1") else None
        got, shown = shown_against(
            value,
            limit if ceiling is None else ceiling,
            decimals,
            percent=percent,
            threshold_decimals=2 if percent else None,
            computed=computed,
        )
        if limit is not None:  # as verify's table: the threshold, then ok or FAIL
            ok = value <= limit if computed else value >= limit
            got += f" ({'≤' if computed else '≥'} {shown}: {'ok' if ok else 'FAIL'})"
        lines.append(f"- {label}: {got}")
    return lines


def _alt(text: str) -> str:
    """`text` as a Markdown image's alt text: one line, its brackets and backslashes escaped."""
    return _one_line(text).replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def _us(x: float | None) -> str:
    return "not in the table" if x is None else f"{x:.1f} µs"


def _staircase_lines(report: dict[str, Any]) -> list[str]:
    """Each picture with alt text that says what it shows (group, plotted conv, the original /
    round-up-to-8 / chosen widths and their µs) and the same in a line under it, for a screen
    reader, `cat report.md` or a CI log: the alt text was the file path, and the facts pixels only
    (bug bash). A report without `staircase_facts` (written before it) keeps the path."""
    facts = {f["file"]: f for f in report.get("staircase_facts") or []}
    lines = [
        "Each picture plots one conv of a group, the one that writes it (else one that reads it), over "
        "the group's candidate widths, every other group held at its chosen width (so its µs at the "
        "original width can differ from the Per layer table's before, where every group is at its "
        "original); the chosen width also changes the group's other convs, whose values are in the "
        "Per layer table above.",
        "",
    ]
    for path in report["staircases"]:
        f = facts.get(path)
        if f is None:
            lines += [f"![{_alt(path)}]({path})", ""]
            continue
        r = f.get("repeat") or 1
        marks = f["marks"]
        at = ", ".join(
            f"{label} {per_conv_group(marks[key]['width'], r)} ({_us(marks[key]['us'])})"
            for key, label in (
                ("original", "original"),
                ("round_up_8", "round-up-to-8"),
                ("chosen", "chosen"),
            )
        )
        of = f"{f['channels']} channels" + (f" of group {f['group']}" if f["group"] != f["conv"] else "")
        how = "measured" if f["us_from"] != PREDICTED_NOTE else "predicted"
        alt = f"Staircase of {f['conv']}, {of}: {at}, {how}, the other groups at their chosen widths"
        span = f["candidates"]
        over = f" over widths {span[0]}–{span[1]}" if span and span[0] != span[1] else ""
        per = f" per conv group (×{r}: {r} conv groups)" if r > 1 else ""
        predicted = [marks[k].get("predicted_us") for k in ("original", "round_up_8", "chosen")]
        wave = (
            "; the wave model predicts " + " / ".join(_us(p) for p in predicted) + " for those three"
            if all(p is not None for p in predicted)
            else ""
        )
        lines += [
            f"![{_alt(alt)}]({path})",
            "",
            f"Shown: {_one_line(f['conv'])}, {_one_line(of)}{over}{per}: {at}, the other groups at "
            f"their chosen widths ({f['us_from']}){wave}.",
            "",
        ]
    return lines[:-1]


def _elsewhere(target: Any, env: dict[str, Any]) -> str | None:
    """measured_elsewhere, or where the GPU matches, the board's own word that it is another target."""
    from deployopt.targets.board import board_is_not

    return measured_elsewhere(target, env) or board_is_not(target.name, env)


def _engine_lines(report: dict[str, Any]) -> list[str]:
    """Where model.engine came from (it loads only on that GPU and TensorRT), or why there is none."""
    lines = []
    if report.get("engine"):
        lines.append(f"- {report['engine']}: the chosen plan's engine, built by {report['measured_on']}")
    if report.get("engine_notice"):
        lines.append(f"- notice: {report['engine_notice']}")
    return lines


def write_report(outdir: Path, report: dict[str, Any], opt: Optimizer | None = None) -> None:
    """report.json, report.md and (given the optimizer) the staircase PNGs, each written atomically
    (optimize writes them into its staging folder, so they appear in OUTDIR with the model, as one set)."""
    if opt is not None:
        try:
            report["staircases"] = write_staircases(outdir, report, opt)
        except Exception as exc:  # pictures never cost the results: a warning, no PNGs
            if isinstance(exc, ImportError):  # an interrupted import is no missing matplotlib
                reraise_interrupt(exc)
            _pictures_failed(exc)
            report["staircases"] = []
            report["staircase_facts"] = []
    write_json(outdir / "report.json", report)
    write_text(outdir / "report.md", render_markdown(report))


def _why_not_drawn(exc: BaseException) -> str:
    """'TypeName: first line of its message' (or the type name alone) for a picture's warning."""
    return f"{type(exc).__name__}: {first_line(exc)}" if str(exc).strip() else type(exc).__name__


def _pictures_failed(exc: Exception) -> None:
    """One `warning:` line for staircase pictures that could not be drawn at all (matplotlib
    missing or broken, ...): before, an ImportError was silent and anything else a traceback."""
    import warnings

    from deployopt.errors import DeployoptWarning

    warnings.warn(
        f"staircase pictures not drawn ({_why_not_drawn(exc)}); report.md goes on without them",
        DeployoptWarning,
        stacklevel=2,
    )


def describe_gate(
    gate: dict[str, Any],
    top1: bool | Sequence[str] = True,
    relative: bool = False,
    exact: bool = False,
    cosine: bool = True,
) -> str:
    """The trim gate in one phrase, for report.md and the CLI; `top1` False (or []) where top-1 was
    applied to no output (a detector's, an embedding's: fidelity.Top1Choice), so its bound checked
    nothing and is not quoted as if it had ("top-1: not applied (no class-score output)"); the
    names of the outputs it was applied to, where the model has several, are said with the bound.
    `relative`: an output of one value per row was held to the relative error --min-cosine allows;
    `exact`: an integer output to --min-top1's share of equal values (fidelity.compare_models);
    `cosine` False where no output was scored by cosine (each one value per row, or integers: the
    report's cosine_min is None), so no cosine bound is quoted as if it had checked one."""
    from deployopt.fidelity import TOP1_NOT_APPLIED, relative_error_limit, shown_threshold

    how = "enforced" if gate["enforced"] else "reported only (--no-fidelity-gate)"
    limit = relative_error_limit(gate["min_cosine"]) if relative else None
    parts = []
    if cosine:  # thresholds as given: --min-top1 0.999 was "≥ 100%"
        cos = f"min cosine ≥ {shown_threshold(gate['min_cosine'])}"
        if limit is not None:
            cos += f" (outputs of one value per row: relative error ≤ {limit:.2%})"
        parts.append(cos)
    elif limit is not None:
        per_row = f"outputs of one value per row, from min cosine {shown_threshold(gate['min_cosine'])}"
        parts.append(f"relative error ≤ {limit:.2%} ({per_row})")
    least = shown_threshold(gate["min_top1"], percent=True)
    tops = [f"top-1 agreement ≥ {least}"] if top1 else []
    if tops and not isinstance(top1, bool):
        tops[0] += f" ({'output' if len(top1) == 1 else 'outputs'} {', '.join(_one_line(n) for n in top1)})"
    if exact:
        tops.append(f"integer outputs' exact match ≥ {least}")
    parts.append(", ".join(tops) or TOP1_NOT_APPLIED)
    return ", ".join([*parts, how])


def gate_checks(fid: dict[str, Any]) -> dict[str, Any]:
    """describe_gate's `top1`, `relative`, `exact` and `cosine`, from a fidelity report's JSON:
    which checks the gate's thresholds applied to (older journals' reports hold no "scored_by":
    cosine). `top1`: whether top-1 was applied, or, for a model of several outputs (or outputs
    named by --top1-outputs), the names of those it was applied to (fidelity.journaled_top1_outputs:
    an older report's, those with a top-1 figure)."""
    from deployopt.fidelity import journaled_top1_outputs

    per_output = fid.get("per_output") or []
    scored = {p.get("scored_by") for p in per_output}
    top1: bool | list[str] = fid.get("top1_agreement") is not None
    if top1 and (len(per_output) > 1 or fid.get("top1_selection") == "given"):
        top1 = journaled_top1_outputs(fid) or True
    return {
        "top1": top1,
        "relative": "relative error" in scored,
        "exact": "exact match" in scored,
        "cosine": not scored or bool(scored & {None, "cosine"}),
    }
