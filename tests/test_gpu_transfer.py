"""Sweeps measured on another GPU: file names from the GPU's name (split_sweeps.py), and the H200 fit
scored on them beside the H200's own measurement of the same sweeps (score_gpu_transfer.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
ROUND11 = ROOT / "benchmarks" / "results" / "h200_round11" / "default_limit"


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("Tesla T4", "t4"),
        ("Quadro P6000", "p6000"),
        ("Orin", "orin"),
        ("NVIDIA GeForce RTX 4090", "nvidia-geforce-rtx-4090"),
    ],
)
def test_sweep_files_are_named_after_the_gpu_that_measured_them(name: str, prefix: str) -> None:
    split = load_script("benchmarks/split_sweeps.py", "split_sweeps")
    assert split.gpu_prefix(name) == prefix


def test_split_sweeps_writes_one_file_per_sweep_under_the_gpus_prefix(tmp_path: Path, monkeypatch) -> None:
    split = load_script("benchmarks/split_sweeps.py", "split_sweeps")
    doc = {
        "gpu": "NVIDIA H100 80GB HBM3",
        "sms": 8,
        "torch": "2.11",
        "sweeps": [
            {"id": "by_fp16_8sm", "dtype": "fp16", "shape": {"n": 1}, "points": [{"out_channels": 16}]},
            {
                "id": "by_fp32_8sm",
                "dtype": "fp32",
                "shape": {"n": 1},
                "clock_slowdown_us": {"sw_power_cap": 1200},
                "points": [{"out_channels": 16}],
            },
        ],
    }
    (tmp_path / "round11_8.json").write_text(json.dumps(doc))
    monkeypatch.setattr(
        "sys.argv", ["split_sweeps.py", str(tmp_path / "round11_8.json"), "--out", str(tmp_path / "o")]
    )
    split.main()
    written = json.loads((tmp_path / "o" / "h100_by_fp16_8sm.json").read_text())
    assert written == {"gpu": doc["gpu"], "sms": 8, "torch": "2.11", "dtype": "fp16", "shape": {"n": 1},
                       "points": [{"out_channels": 16}]}  # fmt: skip
    assert "clock_slowdown_us" not in written  # an older record: none recorded, none made up
    slowed = json.loads((tmp_path / "o" / "h100_by_fp32_8sm.json").read_text())
    assert slowed["clock_slowdown_us"] == {"sw_power_cap": 1200}  # the sweep's own, kept
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "h100_by_fp16_8sm.json",
        "h100_by_fp32_8sm.json",
    ]


def _copy_round11(dest: Path, scale: float) -> None:
    """Round eleven's H200 default-search sweeps as if another GPU had measured them, `scale` times slower."""
    (dest / "default").mkdir(parents=True)
    for path in sorted(ROUND11.glob("h200_*.json")):
        if path.stem.endswith("_repeat"):
            continue
        doc = json.loads(path.read_text())
        for p in doc["points"]:
            p["median_us"] *= scale
        (dest / "default" / ("h100" + path.name.removeprefix("h200"))).write_text(json.dumps(doc))


def test_another_gpu_measuring_what_the_h200_measured_scores_as_the_h200_did(
    tmp_path: Path, monkeypatch
) -> None:
    """The same staircases, 1.25x slower: the fit scores them as it scores the H200's (round eleven's
    documented 71.2 % / 2.50 %, wave-bound 78.6 % / 1.63 %), the H200 as a model of them agrees on
    every pair, and the latency ratio is the scale."""
    transfer = load_script("benchmarks/score_gpu_transfer.py", "score_gpu_transfer")
    records = tmp_path / "h100_rounds"
    _copy_round11(records, 1.25)
    out = tmp_path / "score.json"
    monkeypatch.setattr("sys.argv", ["score_gpu_transfer.py", "--records", str(records), "--out", str(out)])
    transfer.main()
    figures = json.loads(out.read_text())["modes"]["default"]
    every = figures["all"]
    assert every["sweeps"] == 48 and every["model"]["pairs"] == 1262
    assert every["model"] == pytest.approx(every["model_on_h200"], rel=1e-12)  # scaled: last digits differ
    assert every["model"]["agreement"] == pytest.approx(0.712, abs=5e-4)
    assert every["model"]["regret"] == pytest.approx(0.0250, abs=5e-5)
    assert every["h200_as_model"] == {"agreement": 1.0, "regret": 0.0}
    assert every["latency_ratio"]["median"] == pytest.approx(1.25)
    assert every["latency_ratio"]["points"] == 48 * 32
    wave = figures["wave-bound"]
    assert wave["sweeps"] == 32
    assert (wave["model"]["agreement"], wave["model"]["regret"]) == (
        pytest.approx(0.786, abs=5e-4),
        pytest.approx(0.0163, abs=5e-5),
    )
    assert {k for k in figures if "SMs" in k} >= {"8 SMs", "16 SMs", "132 SMs"}


def test_a_sweep_with_no_h200_counterpart_is_scored_alone(tmp_path: Path, monkeypatch) -> None:
    transfer = load_script("benchmarks/score_gpu_transfer.py", "score_gpu_transfer")
    records = tmp_path / "h100_rounds"
    _copy_round11(records, 1.0)
    for path in (records / "default").glob("*_132sm.json"):  # an H100 PCIe has 114 SMs
        doc = json.loads(path.read_text())
        doc["sms"] = 114
        path.with_name(path.name.replace("_132sm", "_114sm")).write_text(json.dumps(doc))
        path.unlink()
    out = tmp_path / "score.json"
    monkeypatch.setattr("sys.argv", ["score_gpu_transfer.py", "--records", str(records), "--out", str(out)])
    transfer.main()
    figures = json.loads(out.read_text())["modes"]["default"]
    assert figures["all"]["sweeps"] == 48
    assert figures["all"]["latency_ratio"]["points"] == 32 * 32  # only the 8- and 16-SM sweeps pair up
    assert "h200_as_model" not in figures["114 SMs"] and figures["114 SMs"]["sweeps"] == 16


H100 = ROOT / "benchmarks" / "results" / "h100_rounds"


def test_recorded_h100_rounds_score_as_documented(tmp_path: Path, monkeypatch) -> None:
    """The H100's committed sweeps, scored again: the figures docs/wave_model.md and score.json give
    (the borrowed fit on the H100 beside the same sweeps on the H200), and the 27 widths of one GPU
    only that --drop-interfered leaves out."""
    transfer = load_script("benchmarks/score_gpu_transfer.py", "score_gpu_transfer")
    out = tmp_path / "score.json"
    monkeypatch.setattr("sys.argv", ["score_gpu_transfer.py", "--out", str(out)])
    transfer.main()
    figures = json.loads(out.read_text())["modes"]
    assert figures == json.loads((H100 / "score.json").read_text())["modes"]

    def pct(d: dict) -> tuple[float, float]:
        return round(100 * d["agreement"], 1), round(100 * d["regret"], 2)

    default, every = figures["default"], figures["all_engines"]
    assert (default["wave-bound"]["sweeps"], default["all"]["sweeps"]) == (76, 144)
    assert pct(default["wave-bound"]["model"]) == (78.3, 2.54)
    assert pct(default["wave-bound"]["model_on_h200"]) == (80.9, 1.58)
    assert pct(default["wave-bound"]["h200_as_model"]) == (83.2, 1.29)
    assert pct(default["all"]["model"]) == (65.6, 6.33) and pct(default["all"]["model_on_h200"]) == (
        70.3,
        2.62,
    )
    assert round(default["all"]["latency_ratio"]["median"], 3) == 0.991
    assert default["all"]["latency_ratio"]["points"] == 4608
    assert (every["wave-bound"]["sweeps"], every["all"]["sweeps"]) == (23, 26)
    assert pct(every["wave-bound"]["model"]) == (84.4, 1.21) and pct(
        every["wave-bound"]["model_on_h200"]
    ) == (87.6, 0.75)

    monkeypatch.setattr("sys.argv", ["score_gpu_transfer.py", "--drop-interfered", "--out", str(out)])
    transfer.main()
    dropped = json.loads(out.read_text())["modes"]
    assert dropped == json.loads((H100 / "score_without_interfered.json").read_text())["modes"]
    left_out = dropped["default"]["interfered_widths_left_out"]
    assert sum(len(v) for v in left_out.values()) == 27 and all(k.startswith("h100_") for k in left_out)
    assert left_out["h100_bl_fp16_132sm"] == [256]  # 117.9 µs between 6.4 and 6.6, its kernel 5.2 µs
    assert pct(dropped["default"]["wave-bound"]["model"]) == (78.6, 1.76)
    assert pct(dropped["default"]["all"]["model"]) == (66.5, 3.30)
    assert dropped["default"]["wave-bound"]["sweeps"] == 76  # a sweep's class is its whole sweep's


def test_interfered_points_are_spikes_the_kernel_itself_did_not_take() -> None:
    """A width far above its neighbours counts only when its conv kernel ran in far less than the
    timed median: a real step (the kernel slow too) is the staircase, not interference."""
    transfer = load_script("benchmarks/score_gpu_transfer.py", "score_gpu_transfer")

    def sweep(measured: list[float], kernel: list[float]) -> dict:
        kernels = [[{"duration_us": k}] if k else [] for k in kernel]
        return {"ks": [16 * (i + 1) for i in range(len(measured))], "measured": measured, "kernels": kernels}

    assert transfer.interfered(sweep([6, 6, 100, 6, 6], [5, 5, 5, 5, 5])) == [2]
    assert transfer.interfered(sweep([6, 6, 100, 6, 6], [5, 5, 90, 5, 5])) == []  # the kernel was slow
    assert transfer.interfered(sweep([6, 6, 14, 6, 6], [5, 5, 5, 5, 5])) == []  # 2.3x: under 2.5x
    assert transfer.interfered(sweep([6, 6, 100, 6, 6], [5, 5, 0, 5, 5])) == []  # no profile: not judged
    s = sweep([6, 6, 100, 6, 6], [5, 5, 5, 5, 5])
    assert (
        transfer.without(s, {2})["ks"] == [16, 32, 64, 80] and len(transfer.without(s, {2})["kernels"]) == 4
    )


def test_round_twelve_on_the_h100_scores_as_documented_with_the_preregistered_classes(
    tmp_path: Path, monkeypatch
) -> None:
    """Round twelve, pre-registered for the H200 and measured on the H100 (same fit, same 132 SMs):
    every sweep's size class is the one committed before measuring, and the figures are the docs'
    (wave-bound 83.6 % / 1.13 %, all 48 76.8 % / 1.47 %), none interfered, no clock held down."""

    transfer = load_script("benchmarks/score_gpu_transfer.py", "score_gpu_transfer")
    ev = transfer.ev
    from deployopt.targets import get_target

    records = ROOT / "benchmarks" / "results" / "h100_round12"
    predicted = json.loads((ROOT / "benchmarks/results/h200_round12/prediction.json").read_text())["classes"]
    target = get_target("h100")
    sweeps = ev.load_sweeps(records / "default")
    assert len(sweeps) == len(predicted) == 48
    for s in sweeps:
        got = ev.sweep_class(s, target, target.params[s["dtype"]])
        assert got == predicted["h200" + s["id"].removeprefix("h100")], s["id"]
        assert transfer.interfered(s) == []
    for path in (records / "default").glob("*.json"):
        assert json.loads(path.read_text())["clock_slowdown_us"] == {}

    out = tmp_path / "score.json"
    monkeypatch.setattr("sys.argv", ["score_gpu_transfer.py", "--records", str(records), "--out", str(out)])
    transfer.main()
    figures = json.loads(out.read_text())["modes"]["default"]
    assert figures == json.loads((records / "score.json").read_text())["modes"]["default"]
    wave, every = figures["wave-bound"], figures["all"]
    assert (wave["sweeps"], every["sweeps"]) == (32, 48)
    assert (round(100 * wave["model"]["agreement"], 1), round(100 * wave["model"]["regret"], 2)) == (
        83.6,
        1.13,
    )
    assert (round(100 * every["model"]["agreement"], 1), round(100 * every["model"]["regret"], 2)) == (
        76.8,
        1.47,
    )


@pytest.mark.parametrize(("mode", "first_folder"), [("repeats", "default"), ("all_repeats", "all_engines")])
def test_a_repeat_is_paired_with_its_own_first_measurement_and_scored_against_it(
    tmp_path: Path, mode: str, first_folder: str
) -> None:
    """repeats/ sweeps pair by id (`_repeat` dropped) with default/'s, all_repeats/ ones with
    all_engines/'s (never across searches); a repeat whose widths differ from its first
    measurement's is not paired; the first measurement as "model" of an identical repeat agrees on
    every counted pair with no regret."""
    transfer = load_script("benchmarks/score_gpu_transfer.py", "score_gpu_transfer")
    source = ROOT / "benchmarks" / "results" / "h100_round12" / "default"
    for folder in ("default", "all_engines", mode):
        (tmp_path / folder).mkdir(exist_ok=True)
    names = ["h100_cj_fp16_8sm", "h100_ci_fp32_16sm"]
    for name in names:
        doc = json.loads((source / f"{name}.json").read_text())
        (tmp_path / first_folder / f"{name}.json").write_text(json.dumps(doc))
        if name == names[1]:
            doc["points"] = doc["points"][:-1]  # one width fewer: not the same sweep
        (tmp_path / mode / f"{name}_repeat.json").write_text(json.dumps(doc))
    pairs = {rep["id"]: first for rep, first in transfer.pairs_with_first(tmp_path, mode)}
    assert set(pairs) == {f"{n}_repeat" for n in names}
    assert pairs[f"{names[0]}_repeat"]["id"] == names[0]
    assert pairs[f"{names[1]}_repeat"] is None
    other = "repeats" if mode == "all_repeats" else "all_repeats"
    (tmp_path / other).mkdir()
    assert transfer.pairs_with_first(tmp_path, other) == []
    rep, first = next((r, f) for r, f in transfer.pairs_with_first(tmp_path, mode) if f is not None)
    assert transfer.cross([(rep, first)]) == {"agreement": 1.0, "regret": 0.0}
    assert transfer.ratio([(rep, first)])["median"] == 1.0


def test_round_twelve_repeat_and_every_engine_on_the_h100_score_as_documented(
    tmp_path: Path, monkeypatch
) -> None:
    """The second default-search measurement of round twelve (another H100, new processes) and the
    every-engine one (41 sweeps: the 8-SM run was cut by its limit) rescore to the recorded figures
    the docs quote: the model on the repeat, wave-bound 80.2 % / 1.81 %; the first measurement as
    "model" of the repeat 86.1 % / 0.81 %; every engine, wave-bound 81.2 % / 2.43 % (1.33 % without
    the interfered widths)."""
    transfer = load_script("benchmarks/score_gpu_transfer.py", "score_gpu_transfer")
    records = ROOT / "benchmarks" / "results" / "h100_round12"
    for name, extra in (("score.json", []), ("score_without_interfered.json", ["--drop-interfered"])):
        out = tmp_path / name
        monkeypatch.setattr(
            "sys.argv", ["score_gpu_transfer.py", "--records", str(records), "--out", str(out), *extra]
        )
        transfer.main()
        assert json.loads(out.read_text()) == json.loads((records / name).read_text())
    figures = json.loads((records / "score.json").read_text())["modes"]
    pct = lambda d: (round(100 * d["agreement"], 1), round(100 * d["regret"], 2))  # noqa: E731
    wave = figures["repeats"]["wave-bound"]
    assert wave["sweeps"] == 32
    assert pct(wave["model"]) == (80.2, 1.81)
    assert pct(wave["first_as_model"]) == (86.1, 0.81)
    assert pct(wave["model_on_first"]) == pct(figures["default"]["wave-bound"]["model"]) == (83.6, 1.13)
    assert figures["all_engines"]["all"]["sweeps"] == 41
    assert pct(figures["all_engines"]["wave-bound"]["model"]) == (81.2, 2.43)
    dropped = json.loads((records / "score_without_interfered.json").read_text())["modes"]["all_engines"]
    assert pct(dropped["wave-bound"]["model"]) == (81.4, 1.33)
    assert sum(len(v) for v in dropped["interfered_widths_left_out"].values()) == 4


def test_round_twelve_every_engine_again_on_a_fourth_h100_scores_as_documented() -> None:
    """Every engine timed again on a fourth H100 (all_repeats/: 16 sweeps at 8 SMs, 16 on the full
    GPU; none re-timed, no clock held down), scored in score.json (rescored by the test above): the
    model at 8 SMs 86.3 % / 0.83 %, wave-bound 83.6 % / 1.19 %. On the 25 sweeps the first machine
    also timed every engine for, the model predicts this measurement's steps better than the first
    measurement does (wave-bound 83.9 % against 75.4 %; 8 SMs 88.8 % against 80.4 %), though with
    more regret (1.16 % against 0.67 %)."""
    records = ROOT / "benchmarks" / "results" / "h100_round12"
    docs = [json.loads(p.read_text()) for p in sorted((records / "all_repeats").glob("*.json"))]
    assert sorted(d["sms"] for d in docs) == [8] * 16 + [132] * 16
    assert all(d["retime"] == 2 and d["clock_slowdown_us"] == {} for d in docs)
    assert not any("retimed_medians_us" in p for d in docs for p in d["points"])
    figures = json.loads((records / "score.json").read_text())["modes"]["all_repeats"]
    pct = lambda d: (round(100 * d["agreement"], 1), round(100 * d["regret"], 2))  # noqa: E731
    assert (figures["all"]["sweeps"], figures["wave-bound"]["sweeps"]) == (32, 19)
    assert pct(figures["8 SMs"]["model"]) == (86.3, 0.83)
    assert pct(figures["wave-bound"]["model"]) == (83.6, 1.19)
    assert pct(figures["wave-bound"]["first_as_model"]) == (75.4, 0.67)
    assert pct(figures["wave-bound"]["model_on_first"]) == (81.4, 3.52)
    assert pct(figures["wave-bound"]["model_on_paired"]) == (83.9, 1.16)
    assert pct(figures["8 SMs"]["model_on_paired"]) == (88.8, 0.51)
    assert pct(figures["8 SMs"]["first_as_model"]) == (80.4, 0.38)
    every_repeat_paired = json.loads((records / "score.json").read_text())["modes"]["repeats"]["all"]
    assert "model_on_paired" not in every_repeat_paired


def test_round_twelve_retimed_on_a_third_h100_records_its_retimes_and_scores_as_documented(
    tmp_path: Path, monkeypatch
) -> None:
    """The third measurement ran with spikes re-timed: every file says `retime` 2, each re-timed
    width kept the lowest of its medians and none of its kept times is a spike any more except the
    one that stayed slow three times; the figures are the docs' (wave-bound 81.1 % / 1.34 %;
    every engine on the full GPU 53.5 % / 4.71 %, against 15.23 % regret before re-timing)."""
    transfer = load_script("benchmarks/score_gpu_transfer.py", "score_gpu_transfer")
    from deployopt.backends.cuda_conv import spikes

    records = ROOT / "benchmarks" / "results" / "h100_round12_retimed"
    retimed, still_slow = 0, []
    for path in sorted(records.glob("*/*.json")):
        doc = json.loads(path.read_text())
        assert doc["retime"] == 2 and doc["clock_slowdown_us"] == {}
        medians = [p["median_us"] for p in doc["points"]]
        for point in doc["points"]:
            if "retimed_medians_us" in point:
                retimed += 1
                assert 2 <= len(point["retimed_medians_us"]) <= 3
                assert point["median_us"] == min(point["retimed_medians_us"])
        still_slow += [(path.stem, doc["points"][i]["out_channels"]) for i in spikes(medians)]
    assert retimed == 14
    assert still_slow == [("h100_cm_fp32_132sm", 288)]

    out = tmp_path / "score.json"
    monkeypatch.setattr("sys.argv", ["score_gpu_transfer.py", "--records", str(records), "--out", str(out)])
    transfer.main()
    figures = json.loads(out.read_text())["modes"]
    assert figures == json.loads((records / "score.json").read_text())["modes"]
    pct = lambda d: (round(100 * d["agreement"], 1), round(100 * d["regret"], 2))  # noqa: E731
    assert figures["default"]["wave-bound"]["sweeps"] == 32
    assert pct(figures["default"]["wave-bound"]["model"]) == (81.1, 1.34)
    assert pct(figures["default"]["all"]["model"]) == (72.8, 1.77)
    assert pct(figures["all_engines"]["132 SMs"]["model"]) == (53.5, 4.71)
    before = json.loads((ROOT / "benchmarks/results/h100_round12/score.json").read_text())["modes"]
    assert pct(before["all_engines"]["132 SMs"]["model"]) == (54.7, 15.23)


def test_an_h100_fit_of_its_own_scores_as_the_borrowed_one_on_round_twelve(
    tmp_path: Path, monkeypatch
) -> None:
    """Why the h100 target keeps the H200's fit: fitted on the H100's 144 default-search sweeps of
    rounds nine to eleven, the model scores on round twelve's first H100 measurement (seen by
    neither fit) within half a point of the borrowed fit, and the recorded study says the same."""
    study = load_script("benchmarks/h100_own_fit_study.py", "h100_own_fit_study")
    out = tmp_path / "study.json"
    monkeypatch.setattr("sys.argv", ["h100_own_fit_study.py", "--out", str(out)])
    study.main()
    got = json.loads(out.read_text())
    assert got["fitted_on"] == "144 sweeps"
    first = got["scores"]["round 12, first measurement"]
    borrowed, own = first["borrowed (the H200's, shipped)"], first["own (H100 rounds 9-11)"]
    assert borrowed["wave-bound"]["agreement"] == pytest.approx(0.836, abs=5e-4)
    for key in ("all", "wave-bound"):
        assert own[key]["agreement"] == pytest.approx(borrowed[key]["agreement"], abs=0.005)
        assert own[key]["regret"] == pytest.approx(borrowed[key]["regret"], abs=0.001)
    recorded = json.loads((ROOT / "benchmarks/results/h100_round12/own_fit_study.json").read_text())
    assert recorded["scores"].keys() == got["scores"].keys()
    for name, fits in recorded["scores"].items():
        for label, row in fits.items():
            for key in ("all", "wave-bound"):
                assert row[key]["agreement"] == pytest.approx(
                    got["scores"][name][label][key]["agreement"], abs=1e-3
                )


ROUND13 = ROOT / "benchmarks" / "results" / "h100_round13"


def test_round_thirteen_on_two_h100s_scores_as_documented(tmp_path: Path, monkeypatch) -> None:
    """Round thirteen's committed H100 sweeps scored again give its score.json, and the figures
    docs/wave_model_evaluation.md quotes: a second machine's default search (other_machine/) set
    beside the first's agrees on 75.8 % of pairs over all 48 sweeps, under the goal's 80 %, and the
    model scores 88.8 % / 0.73 % on its 21 wave-bound sweeps."""
    transfer = load_script("benchmarks/score_gpu_transfer.py", "score_gpu_transfer")
    out = tmp_path / "score.json"
    monkeypatch.setattr("sys.argv", ["score_gpu_transfer.py", "--records", str(ROUND13), "--out", str(out)])
    transfer.main()
    figures = json.loads(out.read_text())["modes"]
    assert figures == json.loads((ROUND13 / "score.json").read_text())["modes"]
    other = figures["other_machine"]
    assert other["all"]["sweeps"] == 48
    assert other["all"]["first_as_model"]["agreement"] == pytest.approx(0.758, abs=5e-4)
    assert other["all"]["first_as_model"]["regret"] == pytest.approx(0.0125, abs=5e-5)
    wave = other["wave-bound"]
    assert wave["sweeps"] == 21
    assert wave["model"]["agreement"] == pytest.approx(0.888, abs=5e-4)
    assert wave["model"]["regret"] == pytest.approx(0.0073, abs=5e-5)
