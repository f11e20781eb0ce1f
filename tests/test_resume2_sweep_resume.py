"""optimize --resume and the per-layer sweep: what an interrupted resumed sweep timed is on disk, and
an older journal's samples per conv are judged by the fewest its cached values hold.

A resumed run that had measured nothing end to end kept its sweep's timings in memory until its
first measurement (641e3a4): a Ctrl-C, an ssh drop or a conv that failed lost every conv it had
timed, where the sweep promises to lose one chunk. And a journal from before optimize recorded
its sweep's count was read as the count its cache entries hold, all of one count or refused: a
default run that had read an earlier `--sweep-runs 50` run's entries resumed as "sweep_runs was 50,
now 10", and one holding 10 and 50 as values the cache "no longer holds" (it held them all).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_resume_journal_upgrade import (
    as_before_sweep_runs_were_recorded,
    per_layer_line,
    rewrite_journal,
    run_ort,
    three_convs,
)

from deployopt.errors import DeployoptError
from deployopt.optimize import OptimizeConfig, Optimizer

#: ort times on this CPU for a GPU target: said once per run, as it should be, and not what is tested
pytestmark = pytest.mark.filterwarnings("ignore::deployopt.errors.HostTimingWarning")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def entries(lut: Path) -> int:
    return sum(1 for _ in lut.rglob("*.json"))


def stopped_after(convs: int) -> Callable[..., None]:
    """A progress callback that is a Ctrl-C once the sweep has timed `convs` convs (one chunk: 16)."""

    def progress(stage: str, **kw: Any) -> None:
        if stage == "sweep" and kw.get("done", 0) >= convs:
            raise KeyboardInterrupt

    return progress


def interrupted_sweep(model: Path, outdir: Path, lut: Path, resume: bool) -> None:
    """An ort run (71 conv shapes) stopped by Ctrl-C after one chunk of its sweep."""
    cfg = OptimizeConfig(
        model_path=model, outdir=outdir, target="t4", backend="ort", dtype="fp32", runs=5, warmup=0,
        max_evals=3, max_candidates=8, confirm_rounds=0, plots=False, fidelity_samples=2,
        cache_root=lut, resume=resume,
    )  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        Optimizer(cfg, progress=stopped_after(16)).run()


def test_an_interrupted_resumed_sweep_keeps_the_convs_it_timed(tmp_path: Path) -> None:
    """A fresh run stopped after one chunk keeps 16 entries; its resume, stopped after one more
    chunk, kept none of it (still 16): what it timed waited in memory for an end-to-end timing."""
    model = three_convs(tmp_path / "m.onnx")
    lut = tmp_path / "lut"
    interrupted_sweep(model, tmp_path / "out", lut, resume=False)
    assert entries(lut) == 16
    interrupted_sweep(model, tmp_path / "out", lut, resume=True)
    assert entries(lut) == 32
    done = run_ort(model, tmp_path / "out", lut, resume=True, max_candidates=8)
    assert done.sweep["cached"] == 32 and done.sweep["measured"] == done.sweep["shapes"] - 32


def test_an_interrupted_resume_of_an_older_backends_journal_keeps_its_convs(tmp_path: Path) -> None:
    """The journal's environment names another folder than this device's (its backend reported
    fewer facts): the resumed sweep writes to this device's folder as it goes (its first conv's
    timing names it), never to the journal's, and a resume of it times that one conv again and
    reads the other 15 there."""
    model = three_convs(tmp_path / "m.onnx")
    cut = tmp_path / "cut"
    run_ort(model, cut, tmp_path / "old_lut", max_candidates=8)

    def baselines_of_fewer_facts(event: dict[str, Any]) -> dict[str, Any] | None:
        """Its two baselines (no sweep), as a backend from before cpu_cores was recorded timed them."""
        if event["event"] == "measured" and event["index"] <= 2:
            event["timing"]["environment"].pop("cpu_cores")
            return event
        return event if event["event"] == "start" else None

    rewrite_journal(cut, baselines_of_fewer_facts)
    lut = tmp_path / "lut"
    interrupted_sweep(model, cut, lut, resume=True)
    assert entries(lut) == 16
    done = run_ort(model, cut, lut, resume=True, max_evals=4, max_candidates=8)
    assert done.sweep["cached"] == 15 and done.sweep["measured"] == done.sweep["shapes"] - 15
    # everything both resumed runs timed is in this device's folder: a fresh run times nothing (the
    # first chunk was in the journal's folder alone, and a fresh run timed it again)
    fresh = run_ort(model, tmp_path / "fresh", lut, max_candidates=8)
    assert fresh.sweep["measured"] == 0 and fresh.sweep["cached"] == fresh.sweep["shapes"]


def old_default_journal(tmp_path: Path, drop: int = 0) -> tuple[Path, Path, Path]:
    """An older optimize's default run (10 samples per conv) after a `--sweep-runs 50` run on
    the same cache, `drop` of whose entries were gone by then: the journal's values hold 50 samples
    each, or 10 and 50. Returns the model, the journal's folder and the cache."""
    model = three_convs(tmp_path / "m.onnx")
    lut = tmp_path / "lut"
    run_ort(model, tmp_path / "pre", lut, sweep_runs=50)
    for path in sorted(lut.rglob("*.json"))[:drop]:
        path.unlink()
    old = tmp_path / "old"
    run_ort(model, old, lut)
    rewrite_journal(old, as_before_sweep_runs_were_recorded)
    return model, old, lut


def test_an_old_default_journal_over_more_samples_resumes_at_its_count(tmp_path: Path) -> None:
    """It read the 50-sample entries, as a fresh default run does: resumed at the default it was
    refused as "sweep_runs was 50, now 10". It resumes, its report saying the 50 samples its values
    hold; at more than 50 it is refused, naming the count to resume with."""
    model, old, lut = old_default_journal(tmp_path)
    shutil.copytree(old, tmp_path / "more")
    res = run_ort(model, old, lut, resume=True, max_evals=3)
    assert res.sweep["from_journal"] == res.sweep["shapes"] and res.sweep["samples_per_conv"] == [50, 50]
    assert per_layer_line(old).endswith("50 samples per conv (replayed from the journal)")
    with pytest.raises(DeployoptError, match=r"as few as 50 samples per conv .*fewer than this run's 60; "):
        run_ort(model, tmp_path / "more", lut, sweep_runs=60, resume=True, max_evals=3)


def test_an_old_journal_over_mixed_sample_counts_resumes_where_each_has_enough(tmp_path: Path) -> None:
    """Some of its values were timed at 10, the rest read at 50: the cache holds every one, and it was
    refused as values "the layer cache no longer holds". At 10 it resumes ("10–50 samples"); at 20 it
    is refused for the 10-sample ones; with entries gone, for those, counted."""
    model, old, lut = old_default_journal(tmp_path, drop=4)
    for name in ("ten", "gone"):
        shutil.copytree(old, tmp_path / name)
    res = run_ort(model, old, lut, resume=True, max_evals=3)
    assert res.sweep["samples_per_conv"] == [10, 50]
    assert per_layer_line(old).endswith("10–50 samples per conv (replayed from the journal)")
    with pytest.raises(DeployoptError, match=r"as few as 10 samples per conv .*resume with --sweep-runs 10 "):
        run_ort(model, tmp_path / "ten", lut, sweep_runs=20, resume=True, max_evals=3)
    for path in sorted(lut.rglob("*.json"))[:3]:
        path.unlink()
    with pytest.raises(DeployoptError, match=r"the layer cache no longer holds 3 of its \d+ per-conv values"):
        run_ort(model, tmp_path / "gone", lut, resume=True, max_evals=3)
