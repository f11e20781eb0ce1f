"""plan.json records a fingerprint of each group (a hash of its producers' weights), and `apply`
refuses the plan, in one line, for a model where one differs for a group whose kept channels it
lists (chosen on those weights). Its `original` widths cannot tell two UNNAMED convs of equal width
apart: the same model saved with the two in the other order gives `Conv_0` to the other conv, and
until the fix a `keep` trim written for one trimmed the other's channels there (outputs changed,
exit 0). Pads, and trims left to `apply` to rank, hold for another checkpoint of the model too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from ort_session import session
from two_convs import parallel_convs

from deployopt.coupling import analyze
from deployopt.errors import PlanError
from deployopt.surgery import (
    FINGERPRINT_SIZE,
    apply_plan,
    group_fingerprints,
    read_plan,
    same_fingerprint,
)


def _model(order: str, seed: int = 0) -> onnx.ModelProto:
    """Two UNNAMED parallel convs A and B of 12 filters each (other weights) into a Concat and a
    1×1 conv; `order` "ab" or "ba" says which comes first in the node list; another `seed`: another
    checkpoint of the same model."""
    return parallel_convs(order, 12, 12, seed)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    ab, ba = tmp_path / "ab.onnx", tmp_path / "ba.onnx"
    onnx.save(_model("ab"), str(ab))
    onnx.save(_model("ba"), str(ba))
    return ab, ba


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _plan_for(model: Path, tmp_path: Path) -> dict[str, Any]:
    """optimize's plan.json for trimming Conv_0 (12 → 8, channels by L1) of `model`."""
    from deployopt.optimize import OptimizeConfig, Optimizer

    cfg = OptimizeConfig(model_path=model, target="h200", backend="model", mode="trim", outdir=tmp_path / "o")
    opt = Optimizer(cfg)
    opt._load()
    return opt.plan_document({"Conv_0": 8, "Conv_1": 12})


def _apply(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, model: Path, plan: Path, out: Path
) -> tuple[int, str]:
    code, _, err = run_cli(monkeypatch, capsys, "apply", str(model), "--plan", str(plan), "-o", str(out))
    return code, err


def test_fingerprints_follow_the_weights_not_the_node_order() -> None:
    ab, ba = _model("ab"), _model("ba")
    fa, fb = (group_fingerprints(m, analyze(m), ["Conv_0", "Conv_1"]) for m in (ab, ba))
    assert not same_fingerprint(fa["Conv_0"], fa["Conv_1"])  # equal widths, other weights
    assert fa["Conv_0"] == fb["Conv_1"] and fa["Conv_1"] == fb["Conv_0"]  # the swap, seen
    assert all(len(v) == FINGERPRINT_SIZE for v in fa.values())
    again = _model("ab")
    assert group_fingerprints(again, analyze(again), ["Conv_0", "Conv_1"]) == fa  # stable


def test_a_trim_plan_for_a_swapped_equal_width_conv_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, files: tuple[Path, Path]
) -> None:
    ab, ba = files
    doc = _plan_for(ab, tmp_path)
    assert doc["original"] == {"Conv_0": 12, "Conv_1": 12}  # the widths cannot tell the swap
    assert set(doc["fingerprint"]) == {"Conv_0", "Conv_1"} and "Conv_0" in doc["keep"]
    assert list(doc)[:3] == ["widths", "original", "fingerprint"]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    out = tmp_path / "out.onnx"
    code, err = _apply(monkeypatch, capsys, ba, plan, out)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(
        f"error: {plan}: group 'Conv_0': the plan keeps channels chosen on other weights than this "
    )
    assert 'delete its "keep"' in err and 'delete its "fingerprint"' in err, err
    assert not out.exists()
    # the model it was written for: applied, the very trim optimize would write
    code, err = _apply(monkeypatch, capsys, ab, plan, out)
    assert code == 0, err
    want = apply_plan(_model("ab"), doc["widths"], keep=doc["keep"])
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_array_equal(
        session(str(out)).run(None, {"x": x})[0], session(want.SerializeToString()).run(None, {"x": x})[0]
    )
    with pytest.raises(PlanError, match="group 'Conv_0': the plan keeps channels chosen on other"):
        apply_plan(_model("ba"), doc["widths"], keep=doc["keep"], fingerprint=doc["fingerprint"])


def test_a_plan_without_fingerprints_applies_as_before(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, files: tuple[Path, Path]
) -> None:
    """Hand-written and older plans are not checked: the swap goes through, as it did, trimming
    the other conv (B's filters, where the plan was written to trim A's)."""
    _, ba = files
    doc = _plan_for(files[0], tmp_path)
    doc.pop("fingerprint", None)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    code, err = _apply(monkeypatch, capsys, ba, plan, tmp_path / "out.onnx")
    assert code == 0, err
    shapes = {t.name: tuple(t.dims) for t in onnx.load(str(tmp_path / "out.onnx")).graph.initializer}
    assert shapes["wb"][0] == 8 and shapes["wa"][0] == 12  # the wrong conv: why plans carry fingerprints
    assert getattr(read_plan(plan), "fingerprint", {}) == {}


def test_optimize_writes_fingerprints_that_its_input_passes(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, files: tuple[Path, Path]
) -> None:
    ab, ba = files
    out = tmp_path / "o"
    args = ["optimize", str(ab), "--target", "h200", "--sms", "8", "--backend", "model", "-o", str(out)]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    plan = json.loads((out / "plan.json").read_text())
    model = _model("ab")
    assert plan["fingerprint"] == group_fingerprints(model, analyze(model), sorted(plan["widths"]))
    dest = tmp_path / "again.onnx"
    code, err = _apply(monkeypatch, capsys, ab, out / "plan.json", dest)
    assert code == 0, err
    assert dest.read_bytes() == (out / "model.onnx").read_bytes()
    # a lossless plan (no `keep`) only pads: as exact on the swapped file as on its own
    assert "keep" not in plan and all(plan["widths"][g] >= w for g, w in plan["original"].items()), plan
    code, err = _apply(monkeypatch, capsys, ba, out / "plan.json", tmp_path / "other.onnx")
    assert code == 0, err
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_array_equal(
        session(str(tmp_path / "other.onnx")).run(None, {"x": x})[0],
        session(str(ba)).run(None, {"x": x})[0],
    )


def test_another_checkpoint_takes_pads_and_unlisted_trims_but_not_a_keep(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, files: tuple[Path, Path]
) -> None:
    """A fine-tuned checkpoint (same graph, other weights): a pad is as exact on it, and a trim
    without `keep` is ranked on its own weights; only kept channels chosen on the old weights are
    refused (a hash that refused every other checkpoint stopped users re-applying a plan)."""
    tuned = tmp_path / "tuned.onnx"
    onnx.save(_model("ab", seed=5), str(tuned))
    doc = _plan_for(files[0], tmp_path)
    assert "Conv_0" in doc["keep"]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    code, err = _apply(monkeypatch, capsys, tuned, plan, tmp_path / "t.onnx")
    assert code == 2 and "the plan keeps channels chosen on other weights" in err, err
    assert not (tmp_path / "t.onnx").exists()
    unlisted = {k: v for k, v in doc.items() if k != "keep"}
    plan.write_text(json.dumps(unlisted))
    code, err = _apply(monkeypatch, capsys, tuned, plan, tmp_path / "t.onnx")
    assert code == 0, err
    shapes = {t.name: tuple(t.dims) for t in onnx.load(str(tmp_path / "t.onnx")).graph.initializer}
    assert shapes["wa"][0] == 8 and shapes["wb"][0] == 12
    padded = dict(doc, widths={"Conv_0": 16, "Conv_1": 16})
    padded.pop("keep")
    plan.write_text(json.dumps(padded))
    code, err = _apply(monkeypatch, capsys, tuned, plan, tmp_path / "p.onnx")
    assert code == 0, err
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_array_equal(
        session(str(tmp_path / "p.onnx")).run(None, {"x": x})[0], session(str(tuned)).run(None, {"x": x})[0]
    )


@pytest.mark.parametrize(
    ("fingerprint", "said"),
    [
        ('["ab"]', '"fingerprint" must map group ids to lists of 8 numbers'),
        ('{"Conv_0": 12}', '"fingerprint" must map group ids to lists of 8 numbers'),
        ('{"Conv_0": "0123456789abcdef"}', '"fingerprint" must map group ids to lists of 8 numbers'),
        ('{"Conv_0": [1, 2]}', '"fingerprint" must map group ids to lists of 8 numbers'),
        ('{"Conv_0": [0, 0, 0, 0, 0, 0, 0, true]}', '"fingerprint" must map group ids to lists of 8 numbers'),
    ],
)
def test_a_malformed_fingerprint_is_one_line(tmp_path: Path, fingerprint: str, said: str) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {"Conv_0": 16}, "fingerprint": ' + fingerprint + "}")
    with pytest.raises(PlanError, match=said):
        read_plan(plan)


def test_an_unknown_group_in_the_fingerprints_is_named(files: tuple[Path, Path]) -> None:
    model = _model("ab")
    with pytest.raises(PlanError, match="unknown channel group 'Conv_9'"):
        apply_plan(model, {"Conv_0": 16}, fingerprint={"Conv_9": [0.0] * FINGERPRINT_SIZE})


def test_the_same_weights_in_fp16_or_quantized_keep_their_fingerprint(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, files: tuple[Path, Path]
) -> None:
    """A plan with `keep` applies to the model's fp16 twin and its Q/DQ twin (docs/surgery.md: a
    plan for a float model applies to its Q/DQ twin): a hash of the weights' bytes refused both
    (review); rounding moves a projection by about its relative error, far under the tolerance."""
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

    from deployopt.optimize import OptimizeConfig, Optimizer

    named = _model("ab")  # named convs: fp16's Casts shift the position names of unnamed ones
    for node, name in zip(named.graph.node, ("a", "b", "cat", "c")):
        node.name = name
    ab = tmp_path / "named.onnx"
    onnx.save(named, str(ab))
    cfg = OptimizeConfig(model_path=ab, target="h200", backend="model", mode="trim", outdir=tmp_path / "o")
    opt = Optimizer(cfg)
    opt._load()
    doc = opt.plan_document({"a": 8, "b": 12})
    assert "a" in doc["keep"]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    half = tmp_path / "half.onnx"
    code, _, err = run_cli(monkeypatch, capsys, "fp16", str(ab), "-o", str(half))
    assert code == 0, err

    class Feed(CalibrationDataReader):
        def __init__(self) -> None:
            rng = np.random.default_rng(4)
            rows = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
            self.rows = iter([{"x": x} for x in rows])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.rows, None)

    qdq = tmp_path / "qdq.onnx"
    model = named
    model.ir_version = min(model.ir_version, 8)  # onnxruntime 1.23 (Python 3.10) reads IR 11 at most
    onnx.save(model, str(tmp_path / "ab8.onnx"))
    quantize_static(str(tmp_path / "ab8.onnx"), str(qdq), Feed(), weight_type=QuantType.QInt8)
    for twin in (half, qdq):
        out = tmp_path / f"{twin.stem}_trim.onnx"
        code, err = _apply(monkeypatch, capsys, twin, plan, out)
        assert code == 0, (twin.name, err)
        assert out.is_file()
    other = _model("ab", seed=5)  # another checkpoint, named alike: still refused
    for node, name in zip(other.graph.node, ("a", "b", "cat", "c")):
        node.name = name
    onnx.save(other, str(tmp_path / "other.onnx"))
    code, err = _apply(monkeypatch, capsys, tmp_path / "other.onnx", plan, tmp_path / "other_trim.onnx")
    assert code == 2 and "the plan keeps channels chosen on other weights" in err, err
