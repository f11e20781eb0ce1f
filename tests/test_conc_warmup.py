"""The layer cache holds its entries to the run's warm-up as to its sample count (bug bash,
concurrency: a `--warmup 0` smoke run's cold per-conv medians were the whole table of a later
`--warmup 20` run on the same cache, its report saying "after 20 warm-up")."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from deployopt.layers import ConvShape
from deployopt.lut import LayerCache
from deployopt.optimize import OptimizeConfig, optimize
from deployopt.timing import Timing


class Measure:
    """Stand-in for Session.measure_convs timing with `warmup` runs first (recorded as `records`)."""

    def __init__(self, warmup: int, records: int | None = None) -> None:
        self.warmup, self.records = warmup, records
        self.timed: list[str] = []

    def __call__(self, shapes: list[ConvShape]) -> list[Timing]:
        self.timed += [s.signature() for s in shapes]
        warm = self.warmup if self.records is None else self.records
        return [Timing("stub", [s.k + 1.0, s.k + 2.0, s.k + 3.0], warmup=warm) for s in shapes]


def shapes(ks: list[int]) -> list[ConvShape]:
    return [ConvShape(n=1, c=16, h=8, w=8, k=k) for k in ks]


def test_an_entry_timed_with_less_warmup_than_asked_is_timed_again(tmp_path: Path) -> None:
    cold = LayerCache("fp", "fp32", root=tmp_path, min_warmup=0).fill(Measure(0), shapes([8, 16]))
    assert cold.measured == 2
    warm = Measure(20)
    again = LayerCache("fp", "fp32", root=tmp_path, min_warmup=20).fill(warm, shapes([8, 16]))
    assert again.measured == 2 and again.cached == 0 and len(warm.timed) == 2  # not the cold medians
    entries = list(tmp_path.rglob("*.json"))
    assert {json.loads(p.read_text())["timing"]["warmup"] for p in entries} == {20}  # replaced
    # as much or less warm-up than the entries had: read
    for asked in (20, 3, 0):
        read = LayerCache("fp", "fp32", root=tmp_path, min_warmup=asked).fill(Measure(asked), shapes([8, 16]))
        assert read.measured == 0 and read.cached == 2


def test_a_backend_that_warms_convs_its_own_way_is_asked_once(tmp_path: Path) -> None:
    """torch's CUDA-graph convs record 3 warm-up runs whatever was asked: the entry keeps the
    warm-up its run asked of the sweep, so a run asking 20 times them once, not every time."""
    first = LayerCache("fp", "fp32", root=tmp_path, min_warmup=20).fill(Measure(20, records=3), shapes([8]))
    assert first.measured == 1
    entry = json.loads(next(tmp_path.rglob("*.json")).read_text())
    assert entry["timing"]["warmup"] == 3 and entry["sweep_warmup"] == 20
    second = LayerCache("fp", "fp32", root=tmp_path, min_warmup=20).fill(Measure(20, records=3), shapes([8]))
    assert second.measured == 0 and second.cached == 1


def test_an_entry_that_records_no_warmup_counts_as_cold(tmp_path: Path) -> None:
    LayerCache("fp", "fp32", root=tmp_path).fill(Measure(5), shapes([8]))
    path = next(tmp_path.rglob("*.json"))
    entry = json.loads(path.read_text())
    del entry["sweep_warmup"]
    entry["timing"].pop("warmup")
    path.write_text(json.dumps(entry))
    assert LayerCache("fp", "fp32", root=tmp_path, min_warmup=0).fill(Measure(0), shapes([8])).cached == 1
    again = LayerCache("fp", "fp32", root=tmp_path, min_warmup=1).fill(Measure(1), shapes([8]))
    assert again.measured == 1 and again.cached == 0


def test_optimize_times_the_table_again_for_a_run_that_asks_for_warmup(
    zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    src = zoo_model_path("resnet_projection")

    def run(outdir: str, warmup: int, sweep_runs: int | None = 2) -> dict:
        cfg = OptimizeConfig(
            model_path=src, target="nano", backend="ort", dtype="fp32", outdir=tmp_path / outdir, runs=5,
            warmup=warmup, sweep_runs=sweep_runs, max_evals=2, max_candidates=2, plots=False, fidelity=False,
            cache_root=tmp_path / "lut", confirm_rounds=0,
        )  # fmt: skip
        return optimize(cfg).sweep

    smoke = run("smoke", warmup=0)
    assert smoke["measured"] == smoke["shapes"] > 0
    entries = list((tmp_path / "lut").rglob("*.json"))
    assert {json.loads(p.read_text())["timing"]["warmup"] for p in entries} == {0}
    # --warmup 20 with --sweep-runs 2 warms each conv 3 times: the cold entries are timed again
    real = run("real", warmup=20)
    assert real["measured"] == real["shapes"] and real["cached"] == 0
    assert {json.loads(p.read_text())["timing"]["warmup"] for p in entries} == {3}
    assert run("rerun", warmup=20)["measured"] == 0  # and then read
    # the sweep in the end-to-end session (--sweep-runs = --runs = 5) warms each conv --warmup times
    full = run("full", warmup=5, sweep_runs=5)
    assert full["measured"] == full["shapes"]
    assert {json.loads(p.read_text())["timing"]["warmup"] for p in entries} == {5}
