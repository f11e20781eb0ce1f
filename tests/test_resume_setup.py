"""optimize --resume of a journal measured on another machine, or before a library upgrade.

Bug bash: an `optimize --backend ort` interrupted on one host (an EPYC, onnxruntime 1.31.0) and
resumed on another (a Xeon, 1.32.0) went on without a word: both machines' timings in one search and
one confirmation, the report calling them all "this machine's CPU". The layer cache starts a fresh
table for such a change (lut.device_fingerprint); --resume now refuses it in one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deployopt.errors import DeployoptError
from deployopt.optimize import OptimizeConfig, OptimizeResult, optimize
from deployopt.timing import Timing

pytestmark = pytest.mark.filterwarnings("ignore::deployopt.errors.HostTimingWarning")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def two_convs(path: Path) -> Path:
    """conv(3→20) → relu → conv(20→8): one free group, a couple of conv shapes."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((20, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((8, 20, 3, 3)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"], name="relu1"),
        helper.make_node("Conv", ["b", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def run(model: Path, outdir: Path, backend: str = "ort", **kw: Any) -> OptimizeResult:
    opts: dict[str, Any] = dict(
        target="t4", backend=backend, dtype="fp32", runs=5, warmup=0, sweep_runs=1, max_evals=3,
        max_candidates=2, confirm_rounds=0, plots=False, fidelity_samples=2,
    )  # fmt: skip
    opts.update(kw)
    return optimize(OptimizeConfig(model_path=model, outdir=outdir, **opts))


def interrupted(outdir: Path, keep: int, edit=None) -> bytes:
    """Cut OUTDIR's journal after its first `keep` measured evaluations (a run killed there), each
    timing's environment passed through `edit`; the journal's new bytes."""
    lines, measured = [], 0
    for line in (outdir / "journal.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if ev["event"] == "measured":
            measured += 1
            if measured > keep:
                break
            if edit is not None:
                edit(ev["timing"]["environment"])
        if ev["event"] in ("confirmation", "fidelity", "done"):
            break
        lines.append(json.dumps(ev, separators=(",", ":")))
    data = ("\n".join(lines) + "\n").encode()
    (outdir / "journal.jsonl").write_bytes(data)
    for name in ("model.onnx", "plan.json", "report.md", "report.json"):
        (outdir / name).unlink(missing_ok=True)
    return data


def elsewhere(env: dict[str, Any]) -> None:
    """What the bug bash wrote into the journal: another host, an older onnxruntime."""
    env["cpu"] = "AMD EPYC 7763 64-Core Processor"
    env["cpu_cores"] = 64
    env["libraries"]["onnxruntime"] = "1.31.0"
    env["platform"] = "Linux-5.15.0-1050-azure-x86_64-with-glibc2.35"


def test_a_journal_measured_on_another_machine_is_refused_in_one_line(tmp_path: Path) -> None:
    import onnxruntime

    model, out = two_convs(tmp_path / "m.onnx"), tmp_path / "out"
    run(model, out)
    before = interrupted(out, keep=2, edit=elsewhere)
    with pytest.raises(DeployoptError) as exc:
        run(model, out, resume=True)
    said = str(exc.value)
    assert "\n" not in said and said.startswith(f"--resume: {out / 'journal.jsonl'} "), said
    assert "measured on another setup than this machine's" in said
    assert f"onnxruntime 1.31.0 → {onnxruntime.__version__}" in said
    assert "CPU AMD EPYC 7763 64-Core Processor → " in said and "usable CPU cores 64 → " in said
    assert "use --force to start over here, or resume where it was measured" in said
    # nothing measured, nothing written: the journal resumes where it was measured
    assert (out / "journal.jsonl").read_bytes() == before
    assert sorted(p.name for p in out.iterdir()) == ["journal.jsonl"]


def test_one_upgraded_library_is_enough(tmp_path: Path) -> None:
    model, out = two_convs(tmp_path / "m.onnx"), tmp_path / "out"
    run(model, out)
    interrupted(out, keep=2, edit=lambda env: env["libraries"].update(onnx="1.0.0"))
    with pytest.raises(DeployoptError, match=r"\(onnx 1\.0\.0 → [0-9.]+\)"):
        run(model, out, resume=True)


def test_this_machines_journal_still_resumes(tmp_path: Path) -> None:
    """Guard (passes before the fix too): the same machine's journal resumes, the two evaluations
    it holds replayed, and so does one from an older deployopt that recorded fewer facts (a fact
    one side lacks is no difference)."""
    model, out = two_convs(tmp_path / "m.onnx"), tmp_path / "out"
    run(model, out)

    def older(env: dict[str, Any]) -> None:
        for key in ("cpu_cores", "platform", "cpu"):
            env.pop(key, None)
        env["libraries"].pop("onnxruntime", None)

    for edit in (None, older):
        interrupted(out, keep=2, edit=edit)
        res = run(model, out, resume=True)
        assert sum(ev.replayed for ev in res.evaluations) == 2


def test_predictions_resume_anywhere(tmp_path: Path) -> None:
    """Guard: the wave model's timings describe no machine."""
    model, out = two_convs(tmp_path / "m.onnx"), tmp_path / "out"
    kw = dict(backend="model", target="h200", sms=8, dtype=None, runs=100, warmup=20, sweep_runs=None)
    run(model, out, **kw)
    interrupted(out, keep=2, edit=lambda env: env.update(cpu="elsewhere", libraries={"onnx": "0.1"}))
    res = run(model, out, resume=True, **kw)
    assert sum(ev.replayed for ev in res.evaluations) == 2


def test_measured_elsewhere_compares_recorded_facts_with_this_machines() -> None:
    from deployopt.environment import setup_changes
    from deployopt.journal import Replay, measured_elsewhere

    here = {
        "python": "3.11.7",
        "cpu": "Xeon",
        "cpu_cores": 2,
        "libraries": {"onnxruntime": "1.32.0", "torch": "2.14.1"},
        "gpus": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"],
        "driver": "580.1",
    }
    same = {
        "backend": "torch",
        "python": "3.11.7",
        "gpu": "NVIDIA H100 80GB HBM3",
        "clocks": {"driver": "580.1"},
    }
    assert setup_changes(same, here) == []
    assert setup_changes({**same, "gpu": "NVIDIA H100 80GB HBM3 MIG 1g.10gb"}, here) == []  # torch's name
    assert setup_changes({**same, "gpu": "NVIDIA H200", "clocks": {"driver": "570.2"}}, here) == [
        "GPU NVIDIA H200 → NVIDIA H100 80GB HBM3",
        "NVIDIA driver 570.2 → 580.1",
    ]
    assert setup_changes({"libraries": {"torch": "2.13.0", "tensorrt": "10.0"}}, here) == [
        "torch 2.13.0 → 2.14.1"
    ]

    def replay(env: dict[str, Any], measured: bool = True) -> Replay:
        t = Timing(backend="x", samples_us=[1.0], timed="t", environment=env, measured=measured)
        return Replay(timings={"{}": t})

    assert measured_elsewhere(replay({"cpu": "EPYC"}), here)
    assert measured_elsewhere(replay({"cpu": "EPYC"}, measured=False), here) is None  # a prediction
    assert measured_elsewhere(replay({"cpu": "Cortex-A78AE", "remote": "me@orin"}), here) is None  # a board
    assert measured_elsewhere(replay({"cpu": "Xeon"}), here) is None
