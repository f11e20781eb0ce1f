"""The search's own claims: a conv reading a concat sees only the sum of its parts' widths, so its
per-layer table is exact while its distinct shapes stay few, however many assignments of the parts
there are (optimize._exact_rows); a budget that ends before the solver's plans says what it left."""

from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path

import onnx
import pytest
from test_coupling import Net

from deployopt.optimize import OptimizeConfig, Optimizer
from deployopt.waves import predict


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def test_a_two_part_concat_is_priced_exactly_and_the_solver_finds_the_optimum(tmp_path: Path) -> None:
    """conv 9 → (37 ‖ 20) → concat → conv 68: the reading conv's 8 × 8 × 8 assignments were more
    than 256, so its table was taken as separable (each part's misalignment charged apart, where
    only their sum of 57 matters), and the "exact" solver answered the input's widths, predicted
    13 % slower than the plan (40 ‖ 24) in its own candidate set. The table is exact now: the
    solver's optimum is the brute-force one, and the answer is it."""
    n = Net(c=3, hw=32, seed=1)
    a = n.cbr("x", 9)
    e = n.cbr(n.concat(n.cbr(a, 37), n.cbr(a, 20)), 68)
    path = tmp_path / "concat.onnx"
    onnx.save(n.build(n.fc(n.gap(e), 10)), str(path))
    cfg = OptimizeConfig(
        model_path=path,
        outdir=tmp_path / "out",
        target="xavier-nx",
        backend="model",
        dtype="int8",
        plots=False,
    )
    opt = Optimizer(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = opt.run()
    assert not [f.name for f in opt.conv_table.factors if f.name.endswith("[base]")]  # no separable table

    def priced(plan: dict[str, int]) -> float:
        return sum(predict(s, opt.target, "int8").predicted_us for s in opt.conv_shapes(plan).values())

    plans = (dict(zip(opt.domains, ws)) for ws in itertools.product(*opt.domains.values()))
    best = min(plans, key=priced)
    assert opt.table.solve().plan == best == result.best_plan
    assert priced(best) < 0.9 * priced({g: w for g, w in opt.original.items()})


def test_a_budget_that_stops_before_the_solver_says_what_it_left(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    """--max-evals 2 with the wave model: the two baselines took both evaluations, and the report
    said round-up-to-8 was "the same plan (no other widths were predicted at least 0.5 % faster …)"
    beside a solver plan its table put 7 % under it, never evaluated; nor did the run warn, as it
    does for a measured backend. Both say so now; --max-evals 3 evaluates the plan and answers it."""
    n = Net(c=3, hw=32, seed=0)
    c = n.cbr(n.cbr(n.cbr("x", 20), 20, group=4), 20)
    path = tmp_path / "grouped.onnx"
    onnx.save(n.build(n.fc(n.gap(c), 10)), str(path))

    def run(evals: int) -> dict:
        cfg = OptimizeConfig(
            model_path=path, outdir=tmp_path / str(evals), target="orin-nano-8gb", backend="model",
            max_evals=evals, plots=False,
        )  # fmt: skip
        Optimizer(cfg).run()
        return json.loads((tmp_path / str(evals) / "report.json").read_text())

    report = run(2)
    (warning,) = [str(w.message) for w in recwarn if "--max-evals" in str(w.message)]
    assert warning.startswith("--max-evals 2 leaves the search no evaluation: the two baselines take 2,")
    assert warning.endswith("give --max-evals 3 or more to search (6 to predict the solver's top 4 plans)")
    assert report["best_label"] == "round-up-to-8" and report["evaluations"]["budget_exhausted"]
    assert report["comparisons"]["vs_round_up_8"]["describe"] == (
        "the same plan: --max-evals 2 ran out before solver #1 was evaluated, which the per-layer table "
        "puts -7.1 % against it (give a larger --max-evals)"
    )
    recwarn.clear()
    report = run(3)
    assert report["best_label"] == "solver #1" and not [w for w in recwarn if "--max-evals" in str(w.message)]


def test_on_a_measured_backend_exact_concat_tables_stay_within_their_budget() -> None:
    """Exact concat tables price more shapes (a YOLO-like detector: 1637 where the separable sweep
    was 997), each one an engine build on a board: on a measured backend they may add at most
    EXACT_TABLE_BUDGET of the separable sweep, the convs that add fewest first; with the wave model,
    which prices a shape for nothing, every one is exact."""
    from types import SimpleNamespace

    from deployopt.optimize import EXACT_TABLE_BUDGET

    def shapes(*names: str) -> list[tuple[tuple[int, ...], SimpleNamespace]]:
        return [((i,), SimpleNamespace(signature=lambda n=n: n)) for i, n in enumerate(names)]

    def decide(measured: bool) -> dict[str, bool]:
        combos = {"plain": shapes(*(f"s{i}" for i in range(40))), "a": shapes("a"), "b": shapes("b")}
        separable = {"plain": False, "a": True, "b": True, "big": True, "small": True}
        wide = {
            "big": shapes(*(f"x{i}" for i in range(12))),
            "small": shapes("s1", *(f"y{i}" for i in range(5))),
        }
        fake = SimpleNamespace(_measures=lambda: measured)  # Optimizer._measures: the session's
        Optimizer._exact_within_budget(fake, wide, {**combos, "big": [], "small": []}, separable)  # type: ignore[arg-type]
        return separable

    assert EXACT_TABLE_BUDGET * 42 < 12 + 5  # the budget (10.5 of 42 shapes) fits one of the two
    assert decide(measured=True) == {"plain": False, "a": True, "b": True, "big": True, "small": False}
    assert decide(measured=False) == {"plain": False, "a": True, "b": True, "big": False, "small": False}


def test_the_budget_note_skips_plans_the_fidelity_gate_refused(tmp_path: Path) -> None:
    """Trim, the gate at cosine 0.99, --max-evals 2: solver #1 and #2 were refused by the gate, not
    left by the budget, and the note blamed the budget for #1 (a larger --max-evals would not
    have helped); it names #3, the plan the budget did stop."""
    n = Net(c=3, hw=32, seed=1)
    a = n.cbr("x", 9)
    e = n.cbr(n.concat(n.cbr(a, 37), n.cbr(a, 20)), 68)
    path = tmp_path / "m.onnx"
    onnx.save(n.build(n.fc(n.gap(e), 10)), str(path))
    cfg = OptimizeConfig(
        model_path=path, outdir=tmp_path / "out", target="xavier-nx", backend="model", dtype="int8",
        plots=False, mode="trim", max_evals=2, min_cosine=0.99, min_top1=0.0,
    )  # fmt: skip
    opt = Optimizer(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt.run()
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [v["label"] for v in opt._refused.values()] == ["solver #1", "solver #2"]
    assert report["comparisons"]["vs_input"]["describe"].startswith(
        "the same plan: --max-evals 2 ran out before solver #3 was evaluated, which the per-layer table puts "
    )


def test_widths_already_round_up_to_8_leave_the_search_an_evaluation(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    """Every width a multiple of 8: round-up-to-8 is the input, one baseline evaluation, not two, so
    --max-evals 2 leaves the search one, which it spends on solver #1; the warning had said
    "the two baselines take 2 … nothing searched"."""
    n = Net(c=3, hw=32, seed=1)
    path = tmp_path / "m.onnx"
    onnx.save(n.build(n.fc(n.gap(n.cbr(n.cbr(n.cbr("x", 16), 24), 32)), 10)), str(path))
    cfg = OptimizeConfig(
        model_path=path, outdir=tmp_path / "out", target="xavier-nx", backend="model", plots=False,
        mode="trim", max_evals=2, fidelity_gate=False,
    )  # fmt: skip
    opt = Optimizer(cfg)
    opt.run()
    assert [e.label for e in opt.evaluations] == ["input", "solver #1"]
    assert not [w for w in recwarn if "--max-evals" in str(w.message)]
