"""optimize --resume of journals written by older versions, and the per-layer cache's fingerprint.

Older journals record some options only when they are not the default, or not at all (the sweep's
samples per conv before 63bb8cf, the fidelity checks' sample count before 2026-12-07), or record
a default ("traffic_term": true from b275dca to 2a4aae7): a resume compares what each run resolved,
and where a journal does not say, what its events or the layer cache show. The layer cache is keyed
on what changes a conv's timing on the device, not on the model's input names or the --target name.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deployopt.errors import DeployoptError
from deployopt.journal import Journal
from deployopt.lut import device_fingerprint
from deployopt.optimize import OptimizeConfig, Optimizer, OptimizeResult, optimize
from deployopt.timing import Timing

#: ort times on this CPU for a GPU target: said once per run, as it should be, and not what is tested
pytestmark = pytest.mark.filterwarnings("ignore::deployopt.errors.HostTimingWarning")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def three_convs(path: Path, input_name: str = "x") -> Path:
    """conv(3→20) → relu → conv(20→12) → relu → conv(12→8): two free groups, a few conv shapes."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((20, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((12, 20, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal((8, 12, 3, 3)).astype(np.float32), "w3"),
    ]
    nodes = [
        helper.make_node("Conv", [input_name, "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"], name="relu1"),
        helper.make_node("Conv", ["b", "w2"], ["c"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["d"], name="relu2"),
        helper.make_node("Conv", ["d", "w3"], ["y"], name="conv3", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "three_convs",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def run_ort(model: Path, outdir: Path, lut: Path, **kw: Any) -> OptimizeResult:
    """A small measured run on onnxruntime (CPU): a few samples, a handful of convs."""
    opts: dict[str, Any] = dict(
        target="t4", backend="ort", dtype="fp32", runs=5, warmup=0, max_evals=3, max_candidates=2,
        confirm_rounds=0, plots=False, fidelity_samples=2, cache_root=lut,
    )  # fmt: skip
    opts.update(kw)
    return optimize(OptimizeConfig(model_path=model, outdir=outdir, **opts))


def run_wave(model: Path, outdir: Path, **kw: Any) -> OptimizeResult:
    """The wave model (nothing timed): what the resume check sees without a device."""
    opts: dict[str, Any] = dict(
        target="h200", sms=8, backend="model", max_evals=3, plots=False, fidelity_samples=2
    )
    opts.update(kw)
    return optimize(OptimizeConfig(model_path=model, outdir=outdir, **opts))


def rewrite_journal(outdir: Path, edit: Any) -> None:
    """Each event through `edit(event) -> event or None (dropped)`: a journal as an older version wrote it."""
    path = outdir / "journal.jsonl"
    events = [edit(json.loads(line)) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(e) + "\n" for e in events if e is not None))


def as_before_sweep_runs_were_recorded(event: dict[str, Any]) -> dict[str, Any]:
    """A journal from before 63bb8cf: no sweep_runs in its config (whatever --sweep-runs said), none
    of the sweep's counts in its sweep events, and no fidelity_samples."""
    if event["event"] == "start":
        event["config"].pop("sweep_runs", None)
        event["config"].pop("fidelity_samples", None)
    if event["event"] == "sweep":
        event.pop("sweep_runs", None)
        event.pop("samples_per_conv", None)
    return event


def per_layer_line(outdir: Path) -> str:
    return next(ln for ln in (outdir / "report.md").read_text().splitlines() if "per-layer tables:" in ln)


def test_an_old_journal_resumes_at_the_sweep_count_its_cached_values_were_timed_with(tmp_path: Path) -> None:
    """A journal written before optimize recorded --sweep-runs 3: resuming it with --sweep-runs 3 was
    refused ("sweep_runs was the default, now 3"), and without it accepted, its report saying "10
    samples per conv" over the journal's 3-sample medians. The cache entries holding the journal's
    values say 3: resumed at 3 it goes on, at 10 it is refused (they have fewer than 10 samples);
    with those entries gone nothing says, and it is refused in one line."""
    model = three_convs(tmp_path / "m.onnx")
    lut = tmp_path / "lut"
    run_ort(model, tmp_path / "out", lut, sweep_runs=3)
    rewrite_journal(tmp_path / "out", as_before_sweep_runs_were_recorded)
    for name in ("a", "b", "c"):
        shutil.copytree(tmp_path / "out", tmp_path / name)

    res = run_ort(model, tmp_path / "a", lut, sweep_runs=3, resume=True, max_evals=4)
    assert res.sweep["from_journal"] == res.sweep["shapes"] and res.sweep["samples_per_conv"] == [3, 3]
    assert per_layer_line(tmp_path / "a").endswith("3 samples per conv (replayed from the journal)")
    # what it journals now says the count: no cache needed for the next resume
    sweeps = [e for e in Journal.read(tmp_path / "a" / "journal.jsonl") if e["event"] == "sweep"]
    assert sweeps[-1]["sweep_runs"] == 3 and sweeps[-1]["samples_per_conv"] == [3, 3]

    with pytest.raises(DeployoptError, match=r"as few as 3 samples per conv .*resume with --sweep-runs 3"):
        run_ort(model, tmp_path / "b", lut, resume=True, max_evals=4)

    shutil.rmtree(lut)
    with pytest.raises(DeployoptError, match=r"does not record how many samples per conv .*use --force"):
        run_ort(model, tmp_path / "c", lut, sweep_runs=3, resume=True, max_evals=4)
    # the resumed journal recorded it: no cache needed
    run_ort(model, tmp_path / "a", lut, sweep_runs=3, resume=True, max_evals=5)
    with pytest.raises(DeployoptError, match=r"different run \(sweep_runs was 3, now 10\)"):
        run_ort(model, tmp_path / "a", lut, resume=True, max_evals=5)


def test_a_journal_that_records_the_traffic_term_at_its_default_resumes(tmp_path: Path) -> None:
    """Journals written between b275dca and 2a4aae7 record "traffic_term": true, the default, and
    could never resume: "traffic_term was true, now the default". A value equal to what a key left
    out means is the same run; the term off is still another."""
    model = three_convs(tmp_path / "m.onnx")
    run_wave(model, tmp_path / "out")

    def with_term(event: dict[str, Any]) -> dict[str, Any]:
        if event["event"] == "start":
            assert "traffic_term" not in event["config"]
            event["config"]["traffic_term"] = True
        return event

    rewrite_journal(tmp_path / "out", with_term)
    run_wave(model, tmp_path / "out", resume=True, max_evals=4)
    with pytest.raises(DeployoptError, match=r"different run \(traffic_term was true, now false\)"):
        run_wave(model, tmp_path / "out", resume=True, max_evals=5, traffic_term=False)


def test_resume_refuses_another_fidelity_sample_count(tmp_path: Path) -> None:
    """The signature left fidelity_samples out: a run resumed with another gate size replayed the
    journal's verdicts, decided on other samples. A journal from before the key is judged by the
    sample count its fidelity reports give."""
    model = three_convs(tmp_path / "m.onnx")
    run_wave(model, tmp_path / "out")
    with pytest.raises(DeployoptError, match=r"different run \(fidelity_samples was 2, now 3\)"):
        run_wave(model, tmp_path / "out", resume=True, max_evals=4, fidelity_samples=3)
    assert Journal.replay(tmp_path / "out" / "journal.jsonl").config["fidelity_samples"] == 2

    rewrite_journal(tmp_path / "out", as_before_sweep_runs_were_recorded)
    reports = [e for e in Journal.read(tmp_path / "out" / "journal.jsonl") if e["event"] == "fidelity"]
    assert reports and {e["report"]["samples"] for e in reports} == {2}
    with pytest.raises(DeployoptError, match=r"different run \(fidelity_samples was 2, now 4\)"):
        run_wave(model, tmp_path / "out", resume=True, max_evals=4, fidelity_samples=4)
    run_wave(model, tmp_path / "out", resume=True, max_evals=4)  # 2, as its reports were on


def journal_of_an_older_backend(model: Path, outdir: Path, lut: Path) -> None:
    """A run whose backend reported fewer facts than today's (as one from before cpu_cores was
    recorded): the fingerprint made from its journal's environment names no folder of this device."""
    run_ort(model, outdir, lut)

    def fewer_facts(event: dict[str, Any]) -> dict[str, Any]:
        if event["event"] == "measured":
            event["timing"]["environment"].pop("cpu_cores")
        return event

    rewrite_journal(outdir, fewer_facts)


def test_a_resumed_old_journal_says_its_per_layer_values_were_replayed(tmp_path: Path) -> None:
    """report.md said "cached per device in <folder>" of a folder that did not exist (the
    fingerprint made today from the old journal's environment): every value was the journal's."""
    model = three_convs(tmp_path / "m.onnx")
    journal_of_an_older_backend(model, tmp_path / "out", tmp_path / "old_lut")
    lut = tmp_path / "lut"
    res = run_ort(model, tmp_path / "out", lut, resume=True, max_evals=4)
    assert per_layer_line(tmp_path / "out").endswith("10 samples per conv (replayed from the journal)")
    shapes = res.sweep["shapes"]
    assert (
        f"0 timed (0.0 s), 0 from the cache, {shapes} from the journal"
        in (tmp_path / "out" / "report.md").read_text()
    )
    assert res.sweep["from_journal"] == shapes and res.sweep["measured"] == 0
    assert not lut.exists()  # nothing read, nothing written


def _resume_cut_old_journal_then_run_fresh(tmp_path: Path, max_evals: int) -> tuple[Path, Path]:
    """An older backend's journal cut after its two baselines (no sweep in it), resumed with
    `max_evals`: it times every conv; then a fresh run with the same layer cache times none.
    Returns (the resumed OUTDIR, the layer cache)."""
    model = three_convs(tmp_path / "m.onnx")
    cut = tmp_path / "cut"
    journal_of_an_older_backend(model, cut, tmp_path / "old_lut")
    rewrite_journal(
        cut, lambda e: e if e["event"] in ("start", "measured") and e.get("index", 0) <= 2 else None
    )
    lut = tmp_path / "lut"
    resumed = run_ort(model, cut, lut, resume=True, max_evals=max_evals)
    assert resumed.sweep["measured"] == resumed.sweep["shapes"] > 0
    fresh = run_ort(model, tmp_path / "fresh", lut)
    assert fresh.sweep["measured"] == 0 and fresh.sweep["cached"] == fresh.sweep["shapes"]
    return cut, lut


def test_what_a_resumed_old_journal_times_is_saved_where_a_fresh_run_looks(tmp_path: Path) -> None:
    """The same journal cut after its two baselines (no sweep in it): the resumed run timed every
    conv and saved it under the journal environment's fingerprint, where no fresh run on this device
    looks (it timed them all again). Now it saves them where its first conv's timing says, this
    device's folder, and never in the journal's: that is another setup's table (this one's cores
    were not recorded), which the next run of that setup read as its own."""
    cut, lut = _resume_cut_old_journal_then_run_fresh(tmp_path, max_evals=4)
    where = per_layer_line(tmp_path / "fresh").rsplit(" (cached per device in ", 1)[1]
    assert per_layer_line(cut).endswith(f" (cached per device in {where}")  # that folder alone
    assert len([p for p in lut.iterdir() if p.is_dir()]) == 1  # not the journal's


def test_the_layer_cache_is_shared_across_input_names_and_targets(tmp_path: Path) -> None:
    """The fingerprint held the model's input names and shapes and the --target name: the same
    model with its input renamed, or `-t a100` after `-t t4` on the same CPU, timed every conv
    again into a table of its own (docs: other models with the same layer shapes re-use every point)."""
    lut = tmp_path / "lut"
    first = run_ort(three_convs(tmp_path / "m.onnx"), tmp_path / "a", lut)
    assert first.sweep["measured"] == first.sweep["shapes"] > 0
    renamed = run_ort(
        three_convs(tmp_path / "img.onnx", input_name="img"), tmp_path / "b", lut, target="a100"
    )
    assert renamed.sweep["measured"] == 0 and renamed.sweep["cached"] == first.sweep["shapes"]
    assert len([p for p in lut.iterdir() if p.is_dir()]) == 1


def test_the_fingerprint_keeps_the_sm_limit_and_drops_the_models_inputs() -> None:
    """A torch run on a green context: its SM count (environment and --sms) keys the table, so two
    targets at the same SM count share it and two counts do not; the model's input shapes do not."""
    gpu = {
        "device": "NVIDIA H100 80GB HBM3, 8 SMs (green context)",
        "torch": "2.14",
        "sms": 8,
        "sms_requested": 8,
    }
    fp = device_fingerprint("torch", {**gpu, "input_shapes": {"x": [1, 3, 224, 224]}}, 8)
    assert device_fingerprint("torch", {**gpu, "input_shapes": {"img": [8, 3, 64, 64]}}, 8) == fp
    sixteen = {
        **gpu,
        "device": "NVIDIA H100 80GB HBM3, 16 SMs (green context)",
        "sms": 16,
        "sms_requested": 16,
    }
    assert device_fingerprint("torch", sixteen, 16) != fp
    # the optimizer keys its table on what the backend reported, with no target name added
    timing = Timing("torch", [1.0, 2.0], environment=gpu)
    assert Optimizer._fingerprint_environment(timing) == gpu


def test_a_damaged_sweep_count_is_one_line(tmp_path: Path) -> None:
    """The sweep event's new counts are read back: a hand-edited one is the journal's one-line error."""
    model = three_convs(tmp_path / "m.onnx")
    run_ort(model, tmp_path / "out", tmp_path / "lut", sweep_runs=3)

    def spoil(event: dict[str, Any]) -> dict[str, Any]:
        if event["event"] == "sweep":
            event["samples_per_conv"] = [3, "many"]
        return event

    rewrite_journal(tmp_path / "out", spoil)
    with pytest.raises(DeployoptError, match=r"'sweep' event is damaged \(samples_per_conv is not"):
        Journal.replay(tmp_path / "out" / "journal.jsonl")


def test_a_resumed_run_that_times_nothing_end_to_end_saves_where_a_fresh_run_looks(tmp_path: Path) -> None:
    """Resumed at the journal's own evaluation count, the run times its sweep and nothing end to end:
    its convs went to the journal environment's folder alone, and a fresh run timed them all again
    (the test above failed so in CI when the resumed search met only plans it had measured)."""
    _resume_cut_old_journal_then_run_fresh(tmp_path, max_evals=2)
