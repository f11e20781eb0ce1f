"""`--top1-outputs` on optimize and verify, and what they say of top-1 (finding
01_top1_on_non_classifier_outputs). NEEDS /tmp/top1_other.patch (the options' plumbing in
deployopt/optimize.py, deployopt/cli/optimize_cmd.py and deployopt/cli/verify_cmd.py).

A tracker-style model (a heat map, an L2-normalised embedding [N, 64], a box [N, 4]) had its trims
refused on the embedding's argmax ("top-1 agreement 25.00% < 99.00% (output emb)"), and its
report gave a top-1 figure to each of emb and box, for a model with no classifier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import one_error, run_cli
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from test_top1_choice import DETECTOR, _model, _rows

TRIM = ["--target", "orin-nano-8gb", "--backend", "model", "--mode", "trim", "--min-cosine", "0.98"]


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _tracker(path: Path) -> Path:
    """img [1, 3, 32, 32] → two convs (40, 35 channels) → heat [1, 3, 32, 32] (1×1 conv), and from
    their pooled features emb [1, 64] (L2-normalised) and box [1, 4] (× 32): the repro's DetEmb."""
    rng = np.random.default_rng(0)

    def w(name: str, *shape: int) -> Any:
        return nh.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [
        w("W1", 40, 3, 3, 3),
        w("W2", 35, 40, 3, 3),
        w("WH", 3, 35, 1, 1),
        w("WE", 64, 35),
        w("WB", 4, 35),
    ]
    inits.append(nh.from_array(np.float32(32.0).reshape(()), "K"))
    nodes = [
        h.make_node("Conv", ["img", "W1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        h.make_node("Relu", ["c2"], ["r2"]),
        h.make_node("Conv", ["r2", "WH"], ["heat"], name="head"),
        h.make_node("GlobalAveragePool", ["r2"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Gemm", ["f", "WE"], ["e"], transB=1),
        h.make_node("LpNormalization", ["e"], ["emb"], axis=1, p=2),
        h.make_node("Gemm", ["f", "WB"], ["b"], transB=1),
        h.make_node("Mul", ["b", "K"], ["box"]),
    ]
    outs = [
        h.make_tensor_value_info("heat", T.FLOAT, [1, 3, 32, 32]),
        h.make_tensor_value_info("emb", T.FLOAT, [1, 64]),
        h.make_tensor_value_info("box", T.FLOAT, [1, 4]),
    ]
    img = h.make_tensor_value_info("img", T.FLOAT, [1, 3, 32, 32])
    model = h.make_model(
        h.make_graph(nodes, "tracker", [img], outs, inits), opset_imports=[h.make_opsetid("", 17)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _verify_pair(tmp_path: Path, outputs: dict[str, str]) -> list[str]:
    ref = _model(tmp_path / "ref.onnx", outputs)
    cand = _model(tmp_path / "cand.onnx", outputs, nudge=1.04)
    np.savez(tmp_path / "rows.npz", x=_rows())
    return [str(ref), str(cand), "--calibration-data", str(tmp_path / "rows.npz")]


def test_verify_scores_top1_on_the_logits_alone_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    args = _verify_pair(tmp_path, DETECTOR)
    code, out, err = run_cli(monkeypatch, capsys, "verify", *args, "--min-cosine", "0.99")
    assert code == 0, out + err
    said = " ".join(out.replace("│", " ").split())
    assert "top-1 agreement, logits 100.00% ≥ 99.00% ok" in said
    assert (
        "top-1: applied to logits; left out: emb (its name says emb), box ([N, 4] beside other outputs"
        in said
    )
    code, out, _ = run_cli(monkeypatch, capsys, "verify", *args, "--min-cosine", "0.99", "--json")
    rep = json.loads(out)
    assert rep["top1_outputs"] == ["logits"] and rep["passed"]
    assert [p["top1_agreement"] for p in rep["per_output"]] == [1.0, None, None]


def test_verify_obeys_top1_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    args = _verify_pair(tmp_path, DETECTOR)
    code, out, err = run_cli(monkeypatch, capsys, "verify", *args, "--top1-outputs", "emb")
    assert code == 1, out + err
    assert "FAILED: top-1 agreement 0.00% < 99.00% (output emb)" in out
    assert "top-1: applied to emb (--top1-outputs)" in out
    code, out, err = run_cli(monkeypatch, capsys, "verify", *args, "--top1-outputs", "none", "--json")
    rep = json.loads(out)
    assert code == 0 and rep["top1_agreement"] is None and rep["top1_selection"] == "given", err
    err = one_error(*run_cli(monkeypatch, capsys, "verify", *args, "--top1-outputs", "logits,nope")[::2])
    assert err == "error: --top1-outputs nope: no such output; the model's outputs are logits, emb, box\n"


def test_verify_of_a_model_without_class_scores_prints_no_top1_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    args = _verify_pair(tmp_path, {"emb": "emb", "box": "box"})
    code, out, err = run_cli(monkeypatch, capsys, "verify", *args, "--min-cosine", "0.99")
    assert code == 0, out + err
    said = " ".join(out.replace("│", " ").split())
    assert "top-1 agreement not applied (no class-score output)" in said
    assert "top-1: not applied (no class-score output); left out: emb" in said
    assert "PASSED" in out


def test_optimize_trim_of_a_tracker_holds_no_output_to_top1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The repro: report.json gave emb and box a top-1 figure, and the console line said
    "top-1 agreement 100%; gate: ..., top-1 agreement ≥ 99%" for a model with no classifier."""
    model = _tracker(tmp_path / "tracker.onnx")
    code, out, err = run_cli(monkeypatch, capsys, "optimize", str(model), *TRIM, "-o", str(tmp_path / "o"))
    assert code == 0, err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    fid = report["fidelity"]
    assert fid["top1_agreement"] is None and fid["top1_outputs"] == []
    assert {p["name"]: p["top1_agreement"] for p in fid["per_output"]} == {
        "heat": None,
        "emb": None,
        "box": None,
    }
    assert not any("top-1" in e["reason"] for e in report["refused"])
    said = " ".join(out.split())
    assert "gate: min cosine ≥ 0.98, top-1: not applied (no class-score output), enforced" in said
    assert "top-1 agreement" not in said
    md = (tmp_path / "o" / "report.md").read_text()
    assert "- top-1: not applied (no class-score output); left out: emb (its name says emb)" in md
    assert "top-1 agreement" not in md


def test_optimize_refuses_unknown_top1_outputs_and_outside_trim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    model = str(_tracker(tmp_path / "tracker.onnx"))
    out = str(tmp_path / "o")
    err = one_error(
        *run_cli(monkeypatch, capsys, "optimize", model, *TRIM, "--top1-outputs", "nope", "-o", out)[::2]
    )
    assert err == "error: --top1-outputs nope: no such output; the model's outputs are heat, emb, box\n"
    assert not Path(out).exists()
    lossless = ["--target", "orin-nano-8gb", "--backend", "model", "--top1-outputs", "emb", "-o", out]
    err = one_error(*run_cli(monkeypatch, capsys, "optimize", model, *lossless)[::2])
    assert "--top1-outputs" in err and "--mode trim only" in err


def test_optimize_top1_outputs_is_obeyed_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    model = _tracker(tmp_path / "tracker.onnx")
    out_dir = tmp_path / "o"
    code, out, err = run_cli(
        monkeypatch, capsys, "optimize", str(model), *TRIM, "--top1-outputs", "emb", "-o", str(out_dir)
    )
    assert code == 0, err
    fid = json.loads((out_dir / "report.json").read_text())["fidelity"]
    assert fid["top1_outputs"] == ["emb"] and fid["top1_selection"] == "given"
    said = " ".join(out.split())
    assert "top-1 agreement ≥ 99% (output emb)" in said
    assert "- top-1: applied to emb (--top1-outputs)" in (out_dir / "report.md").read_text()
    # another choice than the journal's is refused on --resume, in the option's words
    code, _, err = run_cli(monkeypatch, capsys, "optimize", str(model), *TRIM, "-o", str(out_dir), "--resume")
    assert code == 2 and "--top1-outputs was" in err, err


def test_resume_of_a_journal_that_held_an_embedding_to_top1_compares_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A journal from before the fix: its reports hold top-1 figures (and a refusal) for emb. The
    journal still replays; those plans are compared again rather than refused on the old verdict."""
    model = _tracker(tmp_path / "tracker.onnx")
    out_dir = tmp_path / "o"
    code, _, err = run_cli(monkeypatch, capsys, "optimize", str(model), *TRIM, "-o", str(out_dir))
    assert code == 0, err
    journal = out_dir / "journal.jsonl"
    lines = []
    doctored = 0
    for line in journal.read_text().splitlines():
        ev = json.loads(line)
        if ev.get("event") == "fidelity" and not ev["report"].get("lossless_plan"):
            rep = ev["report"]
            for key in ("top1_outputs", "top1_selection", "top1_note"):
                rep.pop(key, None)
            for p in rep["per_output"]:
                p.pop("top1_skipped", None)
                if p["name"] in ("emb", "box"):
                    p["top1_agreement"] = 0.25 if p["name"] == "emb" else 1.0
            rep["top1_agreement"] = 0.25
            rep["failures"] = ["top-1 agreement 25.00% < 99.00% (output emb)"]
            rep["passed"] = False
            doctored += 1
        lines.append(json.dumps(ev))
    assert doctored, "the run compared no trim plan"
    journal.write_text("\n".join(lines) + "\n")
    code, _, err = run_cli(monkeypatch, capsys, "optimize", str(model), *TRIM, "-o", str(out_dir), "--resume")
    assert code == 0, err
    report = json.loads((out_dir / "report.json").read_text())
    assert not any("top-1" in e["reason"] for e in report["refused"])
    assert report["fidelity"]["top1_outputs"] == []
