"""verify reads an fp16 model's intermediates back in fp16: onnxruntime CPU computes fp16 Conv/Relu in
fp32 (casts in, casts out, and drops the fp32→fp16→fp32 pair between two such ops), so an activation
past 65504, inf on TensorRT in fp16, compared as finite and passed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from deployopt.cli.main import app
from deployopt.fidelity import CalibrationSet
from deployopt.precision import to_fp16

try:  # click before 8.2 mixes stderr into stdout unless told not to
    runner = CliRunner(mix_stderr=False)
except TypeError:
    runner = CliRunner()


def _overflowing() -> onnx.ModelProto:
    """Conv (its output 108000 on ones: past fp16's 65504) → Mul 1e-3 → Conv: finite in fp32."""
    inits = [
        numpy_helper.from_array(np.full((8, 3, 3, 3), 4000.0, np.float32), "w"),
        numpy_helper.from_array(np.array(1e-3, np.float32), "k"),
        numpy_helper.from_array(np.full((4, 8, 1, 1), 0.1, np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["big"], name="conv_big"),
        helper.make_node("Mul", ["big", "k"], ["scaled"], name="scale"),
        helper.make_node("Conv", ["scaled", "w2"], ["y"], name="conv_out"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _save(model: onnx.ModelProto, path: Path) -> str:
    onnx.save(model, str(path))
    return str(path)


def _ones(tmp_path: Path) -> str:
    path = tmp_path / "ones.npy"
    np.save(path, np.ones((2, 3, 8, 8), np.float32))
    return str(path)


def test_fp16_overflow_fails_verify_naming_the_tensor(tmp_path: Path) -> None:
    model = _overflowing()
    ref = _save(model, tmp_path / "ref.onnx")
    cand = _save(to_fp16(model), tmp_path / "cand.onnx")
    data = _ones(tmp_path)
    result = runner.invoke(app, ["verify", ref, cand, "--calibration-data", data])
    assert result.exit_code == 1, result.output
    assert "FAILED: candidate: 1 fp16 tensor(s) overflow" in result.output
    assert "big (Conv 'conv_big'" in result.output and "1.08e+05 computed in fp32" in result.output
    assert "fp16 overflow, candidate" in result.output and "FAIL" in result.output
    assert "onnxruntime CPU computes most fp16 ops in fp32" in result.output
    # the outputs alone agree: the overflow is the only failure
    assert result.output.count("FAILED") == 1

    result = runner.invoke(app, ["verify", ref, cand, "--calibration-data", data, "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert not doc["passed"] and len(doc["failures"]) == 1
    assert doc["fp16_check"] == [
        {
            "model": "candidate",
            "typed": "fp16",
            "tensors_checked": doc["fp16_check"][0]["tensors_checked"],
            "samples": 2,
            "skipped": None,
            "overflows": 1,
        }
    ]
    (over,) = doc["fp16_overflow"]
    assert over["model"] == "candidate" and over["tensor"] == "big" and over["node"] == "conv_big"
    assert over["op"] == "Conv" and over["type"] == "fp16"
    assert over["nonfinite_values"] == over["values"] == 2 * 8 * 6 * 6
    assert over["max_abs_fp32"] == 108000.0


def test_fp16_reference_is_checked_too(tmp_path: Path) -> None:
    """Both models fp16: the reference's overflow is named as the reference's."""
    cand = _save(to_fp16(_overflowing()), tmp_path / "cand.onnx")
    result = runner.invoke(app, ["verify", cand, cand, "--calibration-data", _ones(tmp_path), "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert [o["model"] for o in doc["fp16_overflow"]] == ["reference", "candidate"]


def test_normal_fp16_model_passes_with_its_tensors_checked(zoo_model_path, tmp_path: Path) -> None:
    src = zoo_model_path("resnet56_pruned")
    cand = _save(to_fp16(onnx.load(str(src))), tmp_path / "cand.onnx")
    result = runner.invoke(app, ["verify", str(src), cand, "--count", "2"])
    assert result.exit_code == 0, result.output
    assert "fp16 overflow, candidate" in result.output and "FAIL" not in result.output
    assert "PASSED" in result.output
    result = runner.invoke(app, ["verify", str(src), cand, "--count", "2", "--json"])
    doc = json.loads(result.stdout)
    assert doc["passed"] and doc["fp16_overflow"] == []
    (check,) = doc["fp16_check"]
    assert check["model"] == "candidate" and check["skipped"] is None and check["samples"] == 2
    assert check["tensors_checked"] > 50 and check["overflows"] == 0


def test_fp32_models_are_not_checked(zoo_model_path) -> None:
    src = str(zoo_model_path("resnet56_pruned"))
    result = runner.invoke(app, ["verify", src, src, "--count", "1", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["fp16_check"] == [] and doc["fp16_overflow"] == []
    assert "fp16" not in runner.invoke(app, ["verify", src, src, "--count", "1"]).output


def test_samples_are_bounded_and_external_data_is_skipped(tmp_path: Path) -> None:
    from deployopt.fidelity import low_precision_overflow

    fp16 = to_fp16(_overflowing())
    calib = CalibrationSet([{"x": np.ones((1, 3, 8, 8), np.float32)} for _ in range(6)], "ones", False)
    check = low_precision_overflow(fp16, calib, "candidate", ["x"])
    assert check is not None and check.samples == 4 and [o.tensor for o in check.overflows] == ["big"]
    path = tmp_path / "ext.onnx"
    onnx.save(fp16, str(path), save_as_external_data=True, size_threshold=0)
    check = low_precision_overflow(path, calib, "candidate", ["x"])
    assert check is not None and check.skipped == "its weights are in external data" and not check.overflows
    assert low_precision_overflow(_overflowing(), calib, "reference", ["x"]) is None


def test_fp32_model_is_decided_without_loading_its_weights(tmp_path: Path, monkeypatch) -> None:
    """An fp32 model holds no fp16: decided from its types alone, the ModelProto neither
    serialized, sized (ByteSize) nor copied; and verify reads each file once, handing the check
    the model it read (0.4 s and +520 MB a 274 MB model, twice per verify, before)."""
    from deployopt.fidelity import low_precision_overflow, runnable_model

    model = _overflowing()
    calib = CalibrationSet([{"x": np.ones((1, 3, 8, 8), np.float32)}], "ones", False)
    path = _save(model, tmp_path / "fp32.onnx")
    loads: list[str] = []
    real_load = onnx.load

    def counted_load(f, *args, **kwargs):
        loads.append(str(f))
        return real_load(f, *args, **kwargs)

    def refuse(*args, **kwargs):
        raise AssertionError("the fp32 check loaded, sized or copied the model")

    with monkeypatch.context() as patch:
        for name in ("load", "load_model", "load_model_from_string"):
            patch.setattr(onnx, name, refuse)
        for name in ("ByteSize", "SerializeToString", "CopyFrom"):
            patch.setattr(onnx.ModelProto, name, refuse)
        assert low_precision_overflow(model, calib, "reference", ["x"]) is None
    monkeypatch.setattr(onnx, "load", counted_load)
    feed, read = runnable_model(path)
    assert feed == path and loads == [str(path)]
    assert low_precision_overflow(read, calib, "reference", ["x"]) is None and loads == [str(path)]


def _masked_fp16() -> onnx.ModelProto:
    """fp16 model adding an -inf mask built by Where from constants (by design), then Softmax."""
    cond = np.zeros((1, 1, 1, 8), np.bool_)
    cond[..., -1] = True
    inits = [
        numpy_helper.from_array(cond, "cond"),
        numpy_helper.from_array(np.array(-np.inf, np.float16), "neg_inf"),
        numpy_helper.from_array(np.array(0, np.float16), "zero"),
    ]
    nodes = [
        helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16, name="cast_in"),
        helper.make_node("Where", ["cond", "neg_inf", "zero"], ["mask"], name="mask"),
        helper.make_node("Add", ["x16", "mask"], ["masked"], name="apply_mask"),
        helper.make_node("Softmax", ["masked"], ["p16"], axis=-1, name="softmax"),
        helper.make_node("Cast", ["p16"], ["y"], to=TensorProto.FLOAT, name="cast_out"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_constant_mask_in_fp16_is_not_an_overflow(tmp_path: Path) -> None:
    from deployopt.fidelity import low_precision_overflow

    model = _masked_fp16()
    calib = CalibrationSet([{"x": np.ones((1, 3, 8, 8), np.float32)} for _ in range(2)], "ones", False)
    for given in (model, _save(model, tmp_path / "masked.onnx")):
        check = low_precision_overflow(given, calib, "candidate", ["x"])
        assert check is not None and check.skipped is None and check.samples == 2
        assert check.overflows == [] and check.failure() is None
        assert check.tensors == 3  # x16, masked, p16: the constant mask is not checked
    path = _save(model, tmp_path / "ref.onnx")
    result = runner.invoke(app, ["verify", path, path, "--calibration-data", _ones(tmp_path)])
    assert result.exit_code == 0, result.output
