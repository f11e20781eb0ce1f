"""optimize --resume with a lower --max-evals than the interrupted run's.

Bug bash: a `--max-evals 14` run interrupted after its 10 search evaluations, resumed with
`--max-evals 10` (not below the 10 the journal holds, so accepted), answered unconfirmed while
report.md said "4 kept back for the confirmation rounds" and report.json reserved_for_confirmation 4:
nothing was kept back. An uninterrupted `--max-evals 10` run searches 6 and confirms with 4, so the
two could reach different answers. Now refused in one line naming the --max-evals that keeps them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_resume_journal_upgrade import three_convs

from deployopt.errors import DeployoptError
from deployopt.optimize import OptimizeConfig, OptimizeResult, optimize

pytestmark = pytest.mark.filterwarnings("ignore::deployopt.errors.HostTimingWarning")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def run(model: Path, outdir: Path, **kw: Any) -> OptimizeResult:
    opts: dict[str, Any] = dict(
        target="t4", backend="ort", dtype="fp32", runs=5, warmup=0, sweep_runs=1, max_evals=9,
        max_candidates=4, confirm_rounds=2, plots=False, fidelity_samples=2, min_effect=0.0, alpha=0.5,
    )  # fmt: skip
    opts.update(kw)
    return optimize(OptimizeConfig(model_path=model, outdir=outdir, **opts))


def before_confirmation(outdir: Path) -> int:
    """Cut OUTDIR's journal before its first confirmation rebuild (a run killed there); how many
    evaluations of the search it holds."""
    lines, searched = [], 0
    for line in (outdir / "journal.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if (ev["event"] == "measured" and ev.get("repeat")) or ev["event"] in (
            "confirmation",
            "fidelity",
            "done",
        ):
            break
        searched += ev["event"] == "measured"
        lines.append(line)
    (outdir / "journal.jsonl").write_text("\n".join(lines) + "\n")
    for name in ("model.onnx", "plan.json", "report.md", "report.json"):
        (outdir / name).unlink(missing_ok=True)
    return searched


def test_a_lower_max_evals_that_leaves_the_confirmation_nothing_is_refused(tmp_path: Path) -> None:
    model, out = three_convs(tmp_path / "m.onnx"), tmp_path / "out"
    run(model, out, max_evals=40)
    searched = before_confirmation(out)
    assert searched >= 3, searched  # the baselines and at least one searched plan
    before = (out / "journal.jsonl").read_bytes()
    with pytest.raises(DeployoptError) as exc:  # not below what the journal holds: accepted before
        run(model, out, max_evals=searched, resume=True)
    said = str(exc.value)
    assert "\n" not in said and said.startswith(f"--resume: {out / 'journal.jsonl'} holds {searched} "), said
    assert f"--max-evals {searched} keeps 4 back for the confirmation rounds" in said
    assert said.endswith(f"give --max-evals {searched + 4} or more"), said
    assert (out / "journal.jsonl").read_bytes() == before  # nothing measured, nothing written
    # one fewer kept back is refused too; at the count it names, all four are kept back
    with pytest.raises(DeployoptError, match=f"give --max-evals {searched + 4} or more"):
        run(model, out, max_evals=searched + 3, resume=True)
    res = run(model, out, max_evals=searched + 4, resume=True)
    ev = res.report["evaluations"]
    assert ev["from_journal"] == searched and ev["reserved_for_confirmation"] == 4


def test_the_wave_model_keeps_nothing_back_and_resumes_at_any_count_the_journal_fits(tmp_path: Path) -> None:
    """Guard (passes before the fix too): predictions are not confirmed, so nothing is kept back."""
    model, out = three_convs(tmp_path / "m.onnx"), tmp_path / "out"
    kw = dict(
        backend="model", target="h200", sms=8, dtype=None, runs=100, warmup=20, sweep_runs=None, alpha=0.01
    )
    run(model, out, max_evals=40, **kw)
    searched = before_confirmation(out)
    res = run(model, out, max_evals=searched, resume=True, **kw)
    assert res.report["evaluations"]["from_journal"] == searched
