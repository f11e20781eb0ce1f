"""How many onnxruntime sessions and runs optimize's fidelity checks cost: the reference model gets
one session and one run per sample (the load-time finiteness check and every comparison share
them), and an answer that is the input's own plan is not compared with itself."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import deployopt.fidelity as fidelity
from deployopt.optimize import OptimizeConfig, OptimizeResult, optimize

SAMPLES = 2


class _Counted:
    """A session that counts its runs (everything else is the session's)."""

    def __init__(self, sess: Any, role: str, runs: Counter[str]) -> None:
        self._sess, self._role, self._runs = sess, role, runs

    def run(self, *args: Any, **kwargs: Any) -> Any:
        self._runs[self._role] += 1
        return self._sess.run(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sess, name)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], Counter[str]]:
    """(sessions, runs) per role ("reference", "candidate") of deployopt.fidelity's sessions."""
    sessions: Counter[str] = Counter()
    runs: Counter[str] = Counter()
    made = fidelity._session

    def session(model: Any, role: str, **kw: Any) -> Any:
        sessions[role] += 1
        return _Counted(made(model, role, **kw), role, runs)

    monkeypatch.setattr(fidelity, "_session", session)
    return sessions, runs


def _run(path: Path, outdir: Path, **kw: Any) -> OptimizeResult:
    opts: dict[str, Any] = dict(target="h200", sms=8, backend="model", plots=False, fidelity_samples=SAMPLES)
    opts.update(kw)
    return optimize(OptimizeConfig(model_path=path, outdir=outdir, **opts))


def test_answer_of_the_input_plan_is_not_compared_with_itself(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, counted: tuple[Counter[str], Counter[str]]
) -> None:
    sessions, runs = counted
    res = _run(zoo_model_path("mobilenet_like"), tmp_path / "out")
    assert res.best_plan == res.original  # the premise: the answer is the input's own plan
    # one reference session, one run per sample (the finiteness check's and the report's alike),
    # and no candidate: the answer's model is the input model
    assert sessions == Counter(reference=1)
    assert runs == Counter(reference=SAMPLES)
    fid = json.loads((tmp_path / "out" / "report.json").read_text())["fidelity"]
    assert fid["max_abs_error"] == 0.0 and fid["mean_abs_error"] == 0.0
    assert fid["cosine_min"] == 1.0 and fid["cosine_mean"] == 1.0
    assert fid["passed"] is True and fid["failures"] == [] and fid["lossless_plan"] is True
    assert fid["samples"] == SAMPLES and fid["rows"] >= SAMPLES
    for out in fid["per_output"]:
        assert out["max_abs_error"] == 0.0 and out["cosine_min"] == 1.0
        assert out["max_abs_reference"] > 0.0  # the reference's own magnitude, not a placeholder
        assert out["top1_agreement"] in (None, 1.0)


def test_identical_report_matches_compare_models_keys(zoo_model: Callable[[str], Any]) -> None:
    """The report of the input's own plan has the keys, counts and magnitudes a comparison gives."""
    from deployopt.fidelity import ReferenceRun, compare_models, identical_report, load_calibration

    model = zoo_model("resnet56_cifar")
    shapes = {i.name: [d.dim_value or 1 for d in i.type.tensor_type.shape.dim] for i in model.graph.input}
    calib = load_calibration(None, shapes, count=SAMPLES)
    ref = ReferenceRun(model)
    same = identical_report(ref, calib).to_json()
    compared = compare_models(ref, model, calib).to_json()
    assert same.keys() == compared.keys()
    for key in (
        "samples",
        "rows",
        "outputs",
        "source",
        "random_inputs",
        "passed",
        "failures",
        "top1_agreement",
    ):
        assert same[key] == compared[key], key
    assert compared["max_abs_error"] == 0.0 and same["max_abs_error"] == 0.0
    assert [o["max_abs_reference"] for o in same["per_output"]] == [
        o["max_abs_reference"] for o in compared["per_output"]
    ]


def test_trim_search_runs_the_reference_once_per_sample(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, counted: tuple[Counter[str], Counter[str]]
) -> None:
    sessions, runs = counted
    out = tmp_path / "out"
    res = _run(zoo_model_path("resnet56_pruned"), out, mode="trim")
    compared = [
        e
        for e in map(json.loads, (out / "journal.jsonl").read_text().splitlines())
        if e["event"] == "fidelity"
    ]
    assert compared  # the premise: the gate compared candidates with the reference
    # every candidate against the one reference session and its outputs, kept from the load check
    assert sessions["reference"] == 1
    assert runs["reference"] == SAMPLES
    candidates = sum(1 for e in compared if e["plan"] != res.original)
    assert sessions["candidate"] == candidates
    assert runs["candidate"] == SAMPLES * candidates
