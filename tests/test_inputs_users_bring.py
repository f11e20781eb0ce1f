"""Inputs users bring: a model with its preprocessing inside (uint8 pixels, cast and scaled in the
graph) runs on random inputs and on image folders, and an N×H×W×C input takes images laid out as it
declares. Both were refused: random inputs are floats, images were N×C×H×W normalised floats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from deployopt.backends.ort import random_inputs
from deployopt.coupling import analyze
from deployopt.errors import DataError
from deployopt.fidelity import (
    ReferenceRun,
    check_feedable,
    compare_models,
    folder_files,
    load_calibration,
    preprocess_image,
)
from deployopt.model import load_model

ROOT = Path(__file__).resolve().parents[1]
CIFAR = ROOT / "calibration_data" / "cifar10"


def _pixels_model(path: Path, shape: list[int], elem: int = TensorProto.UINT8) -> Path:
    """x (uint8 pixels, N×C×H×W or N×H×W×C) → Cast → Div 255 (→ Transpose to N×C×H×W) → Conv 12 →
    Relu → Conv 4: the preprocessing exported inside, and a 12-channel group to pad."""
    last = shape[3] == 3
    h, w = (shape[1], shape[2]) if last else (shape[2], shape[3])
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((12, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((4, 12, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array(255.0, np.float32), "s"),
    ]
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["xf", "s"], ["xs"]),
    ]
    if last:
        nodes.append(helper.make_node("Transpose", ["xs"], ["xt"], perm=[0, 3, 1, 2]))
    nodes += [
        helper.make_node("Conv", ["xt" if last else "xs", "w1"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "pixels_inside",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [shape[0], 4, h, w])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def _cast_model(path: Path, shape: list[int], elem: int = TensorProto.UINT8) -> Path:
    """y = float(x): the model's output is what it was fed."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
        "cast",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    """The output on onnxruntime CPU without graph optimizations, where a pad's zero terms leave
    every sum as it was (the blocked kernels of a fused graph add them in another order: 2e-5 of
    outputs about 60, the rounding `verify` allows)."""
    from ort_session import LEVELS, cpu_session

    return cpu_session(onnx.load(str(path)), LEVELS[0]).run(None, {"x": x})[0]


def _raw(image: Path, size: tuple[int, int] | None = None) -> np.ndarray:
    """The image's 8-bit RGB pixels, H×W×3 (bilinear to `size` (h, w) as the loader resizes)."""
    with Image.open(image) as img:
        rgb = img.convert("RGB")
        if size is not None and rgb.size != (size[1], size[0]):
            rgb = rgb.resize((size[1], size[0]), Image.BILINEAR)
        return np.asarray(rgb)


# ---------------------------------------------------------------------------- random inputs
def test_optimize_and_verify_run_a_uint8_model_and_the_pad_is_exact(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """`optimize` and `verify` of a model that takes uint8 pixels were 'takes uint8, and random
    inputs are floats'; they run on random pixels over 0–255 (said in the report), and a padded
    model's outputs equal the input's exactly on onnxruntime CPU."""
    src = _pixels_model(tmp_path / "u8.onnx", [1, 3, 8, 8])
    out = tmp_path / "run"
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(src), "--target", "nano", "--backend", "model",
        "--max-evals", "4", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["fidelity"]["source"] == (
        "random inputs (no calibration data given; input 'x': uint8 0–255)"
    )
    assert (
        "- inputs: random inputs (no calibration data given; input 'x': uint8 0–255)"
        in (out / "report.md").read_text()
    )
    free = analyze(load_model(src).model).free_groups()
    assert [g.width for g in free] == [12]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {free[0].id: 16}}))
    padded = tmp_path / "padded.onnx"
    code, _, err = run_cli(monkeypatch, capsys, "apply", str(src), "--plan", str(plan), "-o", str(padded))
    assert code == 0, err
    assert [
        numpy_helper.to_array(t).shape[0] for t in onnx.load(str(padded)).graph.initializer if t.name == "w1"
    ] == [16]
    code, stdout, err = run_cli(monkeypatch, capsys, "verify", str(src), str(padded), "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["passed"] and doc["random_inputs"] and doc["cosine_min"] == pytest.approx(1.0, abs=1e-9)
    assert doc["source"] == "random inputs (no calibration data given; input 'x': uint8 0–255)"
    assert 0 <= doc["max_abs_error"] <= 1e-6 * doc["per_output"][0]["max_abs_reference"]
    pixels = np.random.default_rng(1).integers(0, 256, (1, 3, 8, 8)).astype(np.uint8)
    for model in (padded, out / "model.onnx"):
        np.testing.assert_array_equal(_ort(model, pixels), _ort(src, pixels))


def test_random_inputs_cover_an_integer_types_range_in_its_own_type(tmp_path: Path) -> None:
    """uint8 and int8 inputs get their whole range, a wider integer 0–15, a bool both values: one
    sample differs from the next (zeros made every sample alike, so two models that differ on
    real pixels compared equal), the same values each run, and the same for every model."""
    calib = load_calibration(None, {"x": [2, 3, 16, 16]}, count=3)
    check_feedable(calib, onnx.load(str(_cast_model(tmp_path / "u8.onnx", [2, 3, 16, 16]))))
    x = [s["x"] for s in calib.samples]
    assert (
        all(a.dtype == np.uint8 for a in x)
        and min(a.min() for a in x) == 0
        and max(a.max() for a in x) == 255
    )
    assert not np.array_equal(x[0], x[1])
    again = load_calibration(None, {"x": [2, 3, 16, 16]}, count=3)
    check_feedable(again, onnx.load(str(tmp_path / "u8.onnx")))
    assert all(np.array_equal(a, s["x"]) for a, s in zip(x, again.samples))
    # --seed picks them, as it picks float inputs' (a review found every seed gave the same pixels)
    other = load_calibration(None, {"x": [2, 3, 16, 16]}, count=3, seed=7)
    check_feedable(other, onnx.load(str(tmp_path / "u8.onnx")))
    assert not any(np.array_equal(a, s["x"]) for a, s in zip(x, other.samples))
    for elem, lo, hi, said in [
        (TensorProto.INT8, -128, 127, "int8 -128–127"),
        (TensorProto.INT64, 0, 15, "int64 0–15"),
        (TensorProto.INT32, 0, 15, "int32 0–15"),
        (TensorProto.BOOL, 0, 1, "bool False/True"),
    ]:
        model = _cast_model(tmp_path / f"m{elem}.onnx", [2, 3, 16, 16], elem)
        calib = load_calibration(None, {"x": [2, 3, 16, 16]}, count=2)
        report = compare_models(str(model), str(model), calib)
        assert report.max_abs_error == 0.0 and report.random_inputs
        assert report.source == f"random inputs (no calibration data given; input 'x': {said})"
        values = np.concatenate([ReferenceRun(str(model)).outputs(s)[0].ravel() for s in calib.samples])
        assert (values.min(), values.max()) == (lo, hi), said


def test_timing_inputs_of_a_uint8_model_are_pixels_over_0_to_255(tmp_path: Path) -> None:
    """The ort backend timed (and its dead-channel probe ran) a uint8 model on zeros: a blank
    picture, on which a detector's NMS has nothing to do."""
    feeds = random_inputs(onnx.load(str(_pixels_model(tmp_path / "u8.onnx", [1, 3, 32, 32]))))
    x = feeds["x"]
    assert x.dtype == np.uint8 and x.shape == (1, 3, 32, 32)
    assert x.min() < 10 and x.max() > 245 and len(np.unique(x)) > 200


@pytest.mark.parametrize(("elem", "dtype"), [(TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64)])
def test_the_tensorrt_backend_uploads_integer_inputs_over_their_range(
    elem: int, dtype: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The input uploaded once before timing was zeros for an integer input, as on the ort
    backend; now verify's random values (the fake TensorRT runs 4- and 8-byte I/O only, so no
    uint8 input here: `random_values` is the one function both backends and verify use)."""
    from test_tensorrt_fake_api import V10, install, opts

    from deployopt.backends.tensorrt import build_and_time

    _, gpu = install(monkeypatch, V10, "bindings")
    uploads: list[bytes] = []
    write = gpu.write

    def record(ptr: int, data: bytes) -> bool:
        uploads.append(bytes(data))
        return write(ptr, data)

    monkeypatch.setattr(gpu, "write", record)
    model = _cast_model(tmp_path / "ints.onnx", [1, 3, 16, 16], elem)
    build_and_time(str(model), opts(tmp_path, dtype="fp32"), per_layer=False)
    (upload,) = uploads
    values = np.frombuffer(upload, dtype)
    assert values.size == 3 * 16 * 16 and (values.min(), values.max()) == (0, 15)


def test_the_dynamic_batch_check_feeds_a_uint8_input_samples_that_differ(tmp_path: Path) -> None:
    """Restoring a dynamic batch checks that batch 2 gives each sample what batch 1 gives it; a
    uint8 input was fed zeros, two equal samples, so a model that mixes its samples (a mean over
    the batch) passed and was written to take any batch."""
    from deployopt.batch import restore_dynamic_batch

    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
            helper.make_node("ReduceMean", ["xf"], ["m"], axes=[0], keepdims=1),
            helper.make_node("Sub", ["xf", "m"], ["y"]),
        ],
        "mixes_samples",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, ["n", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, 4, 4])],
    )
    path = tmp_path / "mix.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    loaded = load_model(path)
    result = restore_dynamic_batch(loaded.model, loaded.dynamic_batch, loaded.static_batch)
    assert not result.restored
    assert result.notice == (
        "written with a static batch of 1: the input's dynamic batch could not be restored "
        "(output 'y' of a sample changes with the batch)"
    )


# ---------------------------------------------------------------------------- image folders
def test_images_feed_a_channels_last_uint8_input_its_raw_pixels(tmp_path: Path) -> None:
    """A Keras-style [N, H, W, 3] uint8 input: the images go in channels last, as pixels 0–255
    (the model normalises them itself), resized as for any input; was refused for the layout."""
    model = _cast_model(tmp_path / "nhwc.onnx", [2, 24, 20, 3])
    calib = load_calibration(CIFAR, {"x": [2, 24, 20, 3]}, count=2)
    check_feedable(calib, onnx.load(str(model)))
    files = folder_files(CIFAR)[:4]
    ref = ReferenceRun(str(model))
    for k, sample in enumerate(calib.samples):
        got = ref.outputs(sample)[0]
        want = np.stack([_raw(f, (24, 20)) for f in files[2 * k : 2 * k + 2]])
        np.testing.assert_array_equal(got, want.astype(np.float32))
    assert calib.preprocess is not None and calib.preprocess.describe().startswith("scale 1, mean 0, std 1")
    assert any("images fed as their raw pixels, 0–255" in n for n in calib.notices)


def test_images_feed_a_channels_first_uint8_input_its_raw_pixels(tmp_path: Path) -> None:
    """The same for an N×C×H×W uint8 input: 'takes uint8, the data holds other values (images are
    normalised floats)' before. BGR order still applies: it is the layout, not a normalisation."""
    from deployopt.fidelity import ImagePreprocess

    model = _cast_model(tmp_path / "nchw.onnx", [1, 3, 32, 32])
    calib = load_calibration(
        CIFAR, {"x": [1, 3, 32, 32]}, count=1, preprocess=ImagePreprocess(channel_order="BGR")
    )
    check_feedable(calib, onnx.load(str(model)))
    got = ReferenceRun(str(model)).outputs(calib.samples[0])[0]
    want = _raw(folder_files(CIFAR)[0])[:, :, ::-1].transpose(2, 0, 1)[None]
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_images_feed_a_channels_last_float_input_as_the_channels_first_path_does() -> None:
    """A float [N, H, W, 3] input gets the very tensors an N×C×H×W one gets, transposed."""
    nhwc = load_calibration(CIFAR, {"x": [2, 32, 32, 3]}, count=1)
    nchw = load_calibration(CIFAR, {"x": [2, 3, 32, 32]}, count=1)
    assert nhwc.channels_last and not nchw.channels_last
    np.testing.assert_array_equal(nhwc.samples[0]["x"], nchw.samples[0]["x"].transpose(0, 2, 3, 1))
    first = preprocess_image(folder_files(CIFAR)[0], (32, 32))
    np.testing.assert_array_equal(nhwc.samples[0]["x"][0], first.transpose(1, 2, 0))
    gray = load_calibration(CIFAR, {"x": [1, 8, 8, 1]}, count=1)
    assert gray.samples[0]["x"].shape == (1, 8, 8, 1)


@pytest.mark.parametrize(
    "shape, words",
    [
        ([1, 3, 8, 3], "channels could be dim 1 (N×C×H×W) or dim 3 (N×H×W×C)"),
        ([1, 1, 16, 1], "channels could be dim 1 (N×C×H×W) or dim 3 (N×H×W×C)"),
        ([1, 4, 8, 8], "with 1 or 3 channels"),
        ([1, 8, 8, 4], "with 1 or 3 channels"),
    ],
)
def test_a_layout_images_cannot_tell_is_one_line_that_says_to_give_arrays(
    shape: list[int], words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[1, 3, 8, 3] was fed N×C×H×W without a word; it could as well be three 3-pixel-high rows of
    an N×H×W×C picture. Refused before any image is read."""
    import deployopt.fidelity as fidelity

    monkeypatch.setattr(fidelity, "preprocess_image", lambda *a, **k: pytest.fail("an image was read"))
    with pytest.raises(DataError) as info:
        load_calibration(CIFAR, {"x": shape})
    msg = str(info.value)
    assert words in msg and ".npy" in msg and "\n" not in msg


def test_verify_and_optimize_a_channels_last_uint8_model_on_an_image_folder(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """The CLI end to end: verify passes and says how the images became tensors (raw pixels);
    optimize --mode trim ranks and gates on them."""
    src = _pixels_model(tmp_path / "keras.onnx", [1, 16, 16, 3])
    code, stdout, err = run_cli(
        monkeypatch, capsys, "verify", str(src), str(src), "--calibration-data", str(CIFAR)
    )
    assert code == 0 and "PASSED" in stdout, err
    assert "calibration images made into tensors by: scale 1, mean 0, std 1, RGB, resize stretch" in stdout
    # said on stderr too, where --mean/--std would otherwise go unused without a word (review)
    code, _, err = run_cli(
        monkeypatch, capsys, "verify", str(src), str(src), "--calibration-data", str(CIFAR), "--mean", "0.5"
    )
    assert code == 0 and "--scale, --mean and --std do not apply" in " ".join(err.split()), err
    out = tmp_path / "run"
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(src), "--target", "nano", "--backend", "model", "--mode", "trim",
        "--max-evals", "4", "--calibration-data", str(CIFAR), "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert report["fidelity"]["source"] == str(CIFAR) and report["fidelity"]["passed"]
    assert any("images fed as their raw pixels" in n for n in report["calibration_notices"])


def test_normalised_floats_in_arrays_are_still_refused_for_a_uint8_input(tmp_path: Path) -> None:
    """Arrays are fed as they are: normalised floats for a uint8 input are the user's mistake,
    said in one line (only random inputs and images are made into pixels)."""
    model = _cast_model(tmp_path / "u8.onnx", [1, 3, 8, 8])
    np.save(
        tmp_path / "norm.npy", np.random.default_rng(0).standard_normal((2, 1, 3, 8, 8)).astype(np.float32)
    )
    calib = load_calibration(tmp_path / "norm.npy", {"x": [1, 3, 8, 8]})
    with pytest.raises(DataError, match=r"takes uint8, the data holds other values"):
        check_feedable(calib, onnx.load(str(model)))
