"""verify compares outputs per image, whatever other outputs the model has (fidelity.compare_models).

The batch was read off the first output, and one output without it (a 0-d mean beside [2, 10]
logits) made every output compared per batch: an edit spoiling image 0 of each batch passed
`--min-cosine 0.99` at 0.9919 (its images at 0.985), "rows" counted batches, and a [2, 1]
probability beside the mean was scored by a cosine of its two values (0.99996) instead of its
relative error (18 %). An infinite candidate value also printed numpy's RuntimeWarning."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_runner import run_cli
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from deployopt.fidelity import (
    CalibrationSet,
    ReferenceRun,
    Thresholds,
    compare_models,
    identical_report,
    load_calibration,
    output_scoring,
)

COSINE, RELATIVE = "cosine", "relative error"
SHAPE = [2, 3, 16, 16]


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _model(path: Path, mask: np.ndarray, prob_scale: np.ndarray) -> Path:
    """img [2, 3, 16, 16] → pre [2, 10]; outputs logits = pre + mask [2, 10], prob =
    sigmoid(pre[:, :1]) · prob_scale [2, 1], avg = mean(pre) (0-d, no batch)."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w2 = (rng.standard_normal((10, 8)) * 4.5).astype(np.float32)
    arrays = {
        "W1": w1,
        "W2": w2,
        "mask": mask.astype(np.float32),
        "ps": prob_scale.astype(np.float32),
        "starts": np.array([0], np.int64),
        "ends": np.array([1], np.int64),
        "axes": np.array([1], np.int64),
    }
    nodes = [
        h.make_node("Conv", ["img", "W1"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c"], ["r"]),
        h.make_node("GlobalAveragePool", ["r"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Gemm", ["f", "W2"], ["pre"], transB=1),
        h.make_node("Add", ["pre", "mask"], ["logits"]),
        h.make_node("Slice", ["pre", "starts", "ends", "axes"], ["first"]),
        h.make_node("Sigmoid", ["first"], ["s"]),
        h.make_node("Mul", ["s", "ps"], ["prob"]),
        h.make_node("ReduceMean", ["pre"], ["avg"], keepdims=0),
    ]
    outs = [
        h.make_tensor_value_info("logits", T.FLOAT, [2, 10]),
        h.make_tensor_value_info("prob", T.FLOAT, [2, 1]),
        h.make_tensor_value_info("avg", T.FLOAT, []),
    ]
    graph = h.make_graph(
        nodes,
        path.stem,
        [h.make_tensor_value_info("img", T.FLOAT, SHAPE)],
        outs,
        [nh.from_array(a, n) for n, a in arrays.items()],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


ZERO_MASK, ONES = np.zeros((2, 10)), np.ones((2, 1))


def _data(tmp_path: Path) -> Path:
    path = tmp_path / "b.npy"
    np.save(path, np.random.default_rng(0).standard_normal((8, 3, 16, 16)))
    return path


def _row0_spoiled(tmp_path: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """The reference, a candidate whose mask spoils row 0 of every batch, and the cosines of the
    logits per image (8) and per batch (4), computed here."""
    ref = _model(tmp_path / "ref.onnx", ZERO_MASK, ONES)
    mask = ZERO_MASK.copy()
    mask[0] = 9 * np.random.default_rng(1).standard_normal(10)
    cand = _model(tmp_path / "cand.onnx", mask, ONES)
    x = np.load(_data(tmp_path)).astype(np.float32)
    sess = ort.InferenceSession(str(ref), providers=["CPUExecutionProvider"])
    logits = np.concatenate([sess.run(["logits"], {"img": x[i : i + 2]})[0] for i in range(0, 8, 2)])
    spoiled = logits + np.tile(mask, (4, 1))
    return ref, cand, _cosines(logits, spoiled), _cosines(logits.reshape(4, 20), spoiled.reshape(4, 20))


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_an_output_without_the_batch_leaves_the_others_per_image(tmp_path: Path) -> None:
    ref, cand, per_image, per_batch = _row0_spoiled(tmp_path)
    assert np.sum(per_image < 0.99) == 4 and per_batch.min() > 0.99  # one image of each batch, hidden
    calib = load_calibration(_data(tmp_path), {"img": SHAPE}, count=16)
    report = compare_models(str(ref), str(cand), calib)
    assert (report.n_samples, report.n_rows) == (4, 8)
    assert report.output_scored_by == [COSINE, RELATIVE, RELATIVE]
    assert report.cosine_min == pytest.approx(per_image.min(), abs=1e-5)
    assert report.cosine_mean == pytest.approx(per_image.mean(), abs=1e-5)
    assert any("min cosine similarity" in f for f in report.check(Thresholds(min_cosine=0.99)))


def test_a_one_value_row_beside_a_0d_output_is_held_to_its_relative_error(tmp_path: Path) -> None:
    ref = _model(tmp_path / "ref.onnx", ZERO_MASK, ONES)
    cand = _model(tmp_path / "cand.onnx", ZERO_MASK, np.array([[1.0], [0.82]]))
    calib = load_calibration(_data(tmp_path), {"img": SHAPE}, count=16)
    report = compare_models(str(ref), str(cand), calib)
    assert report.output_scored_by == [COSINE, RELATIVE, RELATIVE]
    assert report.output_relative_error[1] == pytest.approx(0.18, abs=1e-5)
    assert report.cosine_min == pytest.approx(1.0, abs=1e-6)
    assert any("prob" in f for f in report.check(Thresholds(min_cosine=0.99)))
    # the reference against itself: the same scoring and the input's rows
    run = ReferenceRun(str(ref))
    same = identical_report(run, calib)
    assert (same.n_rows, same.output_scored_by) == (8, [COSINE, RELATIVE, RELATIVE])
    assert output_scoring(run, calib) == [COSINE, RELATIVE, RELATIVE]


def test_verify_fails_the_bug_bash_repro(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    ref, cand, *_ = _row0_spoiled(tmp_path)
    args = ("verify", str(ref), str(cand), "--calibration-data", str(_data(tmp_path)), "--min-cosine", "0.99")
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 1, out + err
    said = " ".join(out.split())
    assert "samples (model runs) / rows │ 4 / 8" in said and "FAILED: min cosine similarity" in said
    code, out, _ = run_cli(monkeypatch, capsys, *args, "--json")
    rep = json.loads(out)
    assert code == 1 and not rep["passed"] and (rep["samples"], rep["rows"]) == (4, 8)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_an_infinite_candidate_fails_without_numpy_warnings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """inf · 0 and inf / inf in the cosine printed `RuntimeWarning: invalid value encountered`."""
    ref = _model(tmp_path / "ref.onnx", ZERO_MASK, ONES)
    mask = ZERO_MASK.copy()
    mask[0, :5] = np.inf
    cand = _model(tmp_path / "inf.onnx", mask, ONES)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = compare_models(str(ref), str(cand), CalibrationSet([{"img": x}], "test", False))
    assert report.cosine_min is not None and np.isnan(report.cosine_min) and report.check()
    code, out, err = run_cli(
        monkeypatch, capsys, "verify", str(ref), str(cand), "--calibration-data", str(_data(tmp_path))
    )
    assert code == 1 and "FAILED" in out
    assert "RuntimeWarning" not in err + out and "Traceback" not in err


def _with_boxes(path: Path) -> Path:
    """img [2, 3, 16, 16] → logits [2, 10] and a box list [32, 4] (a conv's map reshaped, as an
    SSD's head leaves its boxes after NMS: K rows, not the batch's)."""
    rng = np.random.default_rng(1)
    arrays = {
        "W1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
        "W2": rng.standard_normal((10, 8)).astype(np.float32),
        "Wb": rng.standard_normal((1, 3, 3, 3)).astype(np.float32),
        "shape": np.array([-1, 4], np.int64),
    }
    nodes = [
        h.make_node("Conv", ["img", "W1"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("GlobalAveragePool", ["c"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Gemm", ["f", "W2"], ["logits"], transB=1),
        h.make_node("Conv", ["img", "Wb"], ["b"], pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("Reshape", ["b", "shape"], ["boxes"]),
    ]
    outs = [
        h.make_tensor_value_info("logits", T.FLOAT, [2, 10]),
        h.make_tensor_value_info("boxes", T.FLOAT, [32, 4]),
    ]
    graph = h.make_graph(
        nodes, "boxes", [h.make_tensor_value_info("img", T.FLOAT, SHAPE)], outs,
        [nh.from_array(a, n) for n, a in arrays.items()],
    )  # fmt: skip
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    return path


def test_a_box_list_is_not_scored_as_logits(tmp_path: Path) -> None:
    """A [K, 4] box list beside the logits was scored as K rows of 4 "classes" (verify on an SSD
    said top-1 agreement 100 % for its boxes, and counted 48 rows for 16 images): only an output
    with the input's batch first is top-1 scored."""
    model = _with_boxes(tmp_path / "m.onnx")
    calib = load_calibration(None, {"img": SHAPE}, count=2)
    report = compare_models(str(model), str(model), calib)
    assert report.output_names == ["logits", "boxes"]
    assert report.output_top1_agreement == [1.0, None]
    same = identical_report(ReferenceRun(str(model)), calib)
    assert same.output_top1_agreement == [1.0, None]


def test_logits_of_a_clip_fed_as_a_batch_are_still_top1_scored(tmp_path: Path) -> None:
    """TSN-style: 8 frames fed as a batch of 8, averaged into one row of logits [1, 10]. Requiring
    dim 0 to be the input's batch (against box lists) dropped their top-1 check, and the gate
    said "no output is N×classes"; a dim 0 that divides the batch is logits still."""
    arrays = {
        "W1": np.random.default_rng(1).standard_normal((8, 3, 3, 3)).astype(np.float32),
        "W2": np.random.default_rng(2).standard_normal((10, 8)).astype(np.float32),
        "shape": np.array([1, 8, 8], np.int64),
    }
    nodes = [
        h.make_node("Conv", ["img", "W1"], ["c"], pads=[1, 1, 1, 1]),
        h.make_node("GlobalAveragePool", ["c"], ["g"]),
        h.make_node("Flatten", ["g"], ["f"]),
        h.make_node("Reshape", ["f", "shape"], ["seg"]),
        h.make_node("ReduceMean", ["seg"], ["avg"], axes=[1], keepdims=0),
        h.make_node("Gemm", ["avg", "W2"], ["logits"], transB=1),
    ]
    inputs = [h.make_tensor_value_info("img", T.FLOAT, [8, 3, 16, 16])]
    outputs = [h.make_tensor_value_info("logits", T.FLOAT, [1, 10])]
    graph = h.make_graph(nodes, "tsn", inputs, outputs, [nh.from_array(a, n) for n, a in arrays.items()])
    path = tmp_path / "tsn.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]), str(path))
    report = compare_models(str(path), str(path), load_calibration(None, {"img": [8, 3, 16, 16]}, count=2))
    assert report.output_top1_agreement == [1.0] and report.top1_agreement == 1.0
