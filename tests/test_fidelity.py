"""Calibration loading and output comparison: exact numbers on known perturbations, clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import ort_session
import pytest
from onnx import helper, numpy_helper
from PIL import Image

from deployopt.errors import DataError, ModelError
from deployopt.fidelity import (
    RANDOM_SOURCE,
    CalibrationSet,
    ImagePreprocess,
    Thresholds,
    compare_models,
    load_calibration,
    preprocess_image,
)

CIFAR = Path(__file__).resolve().parents[1] / "calibration_data" / "cifar10"
SHAPE = {"input": [4, 3, 32, 32]}


def _shift_logit(model: onnx.ModelProto, cls: int, delta: float) -> onnx.ModelProto:
    """The same model with `delta` added to one class's Gemm bias: logits differ by exactly delta there."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.name == "classifier.fc.bias":
            b = numpy_helper.to_array(t).copy()
            b[cls] += delta
            t.CopyFrom(numpy_helper.from_array(b, t.name))
    return out


def _negate_logits(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.name in ("classifier.fc.weight", "classifier.fc.bias"):
            t.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(t), t.name))
    return out


def _logits(model: onnx.ModelProto, calib: CalibrationSet) -> np.ndarray:
    sess = ort_session.session(model)
    return np.concatenate([sess.run(None, s)[0] for s in calib.samples])


def _then(*steps: object) -> object:
    """Evaluate set-up steps in a lambda, return the last (the path under test)."""
    return steps[-1]


@pytest.fixture(scope="module")
def cifar_b4() -> CalibrationSet:
    return load_calibration(CIFAR, SHAPE)


# ---------------------------------------------------------------------------- comparison
def test_identical_models_agree_exactly(zoo_model, zoo_model_path, cifar_b4: CalibrationSet) -> None:
    path = zoo_model_path("vgg16_pruned_b4")
    report = compare_models(path, zoo_model("vgg16_pruned_b4"), cifar_b4)
    assert report.max_abs_error == 0.0 and report.mean_abs_error == 0.0
    assert report.cosine_min == pytest.approx(1.0, abs=1e-12) and report.cosine_mean == pytest.approx(
        1.0, abs=1e-12
    )
    assert report.top1_agreement == 1.0
    assert (report.n_samples, report.n_rows) == (5, 20)
    assert report.output_names == ["logits"] and report.source == str(CIFAR) and not report.random_inputs
    assert report.check() == []
    assert report.check(Thresholds(max_abs_error=0.0, min_cosine=0.999999, min_top1=1.0)) == []


def test_shifted_logit_gives_exact_errors_and_the_right_failures(zoo_model, cifar_b4: CalibrationSet) -> None:
    ref = zoo_model("vgg16_pruned_b4")
    cand = _shift_logit(ref, cls=3, delta=2.5)
    report = compare_models(ref, cand, cifar_b4)
    assert report.max_abs_error == pytest.approx(2.5, abs=1e-5)
    assert report.mean_abs_error == pytest.approx(0.25, abs=1e-6)  # one of ten logits moved
    a, b = _logits(ref, cifar_b4), _logits(cand, cifar_b4)
    assert report.top1_agreement == pytest.approx(np.mean(a.argmax(1) == b.argmax(1)))
    assert report.top1_agreement < 1.0  # 2.5 on one class flips some of the 20 real images
    cos = [
        float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)) for x, y in zip(a.astype(float), b.astype(float))
    ]
    assert report.cosine_min == pytest.approx(min(cos), abs=1e-6)
    assert report.cosine_mean == pytest.approx(np.mean(cos), abs=1e-6)
    failures = report.check(Thresholds(max_abs_error=1.0, min_cosine=0.999, min_top1=0.99))
    assert len(failures) == 4
    assert failures[0].startswith("max abs error 2.5 > 1")
    assert failures[1].startswith("min cosine similarity") and failures[3].startswith("top-1 agreement")
    # 2.5 on one logit lengthens its rows too, past the 4.47 % a cosine of 0.999 allows a row's scale
    assert failures[2].startswith("output logits: row scale changed by ")
    assert report.check(Thresholds(max_abs_error=3.0, min_cosine=None, min_top1=None)) == []


def test_negated_logits_have_cosine_minus_one(zoo_model, cifar_b4: CalibrationSet) -> None:
    ref = zoo_model("vgg16_pruned_b4")
    report = compare_models(ref, _negate_logits(ref), cifar_b4)
    assert report.cosine_min == pytest.approx(-1.0, abs=1e-6) and report.cosine_mean == pytest.approx(
        -1.0, abs=1e-6
    )
    assert report.top1_agreement == 0.0
    assert report.max_abs_error == pytest.approx(2 * np.abs(_logits(ref, cifar_b4)).max(), rel=1e-6)


def test_outputs_are_matched_by_position_when_names_differ(zoo_model) -> None:
    ref = zoo_model("se_net")
    cand = zoo_model("se_net")
    for node in cand.graph.node:
        node.output[:] = ["scores" if o == "logits" else o for o in node.output]
    cand.graph.output[0].name = "scores"
    calib = load_calibration(None, {"input": [1, 3, 32, 32]}, count=3)
    report = compare_models(ref, cand, calib)
    assert report.max_abs_error == 0.0 and report.candidate_output_names == ["scores"]
    assert report.random_inputs and report.source == RANDOM_SOURCE


def test_different_output_count_is_a_data_error(zoo_model) -> None:
    ref = zoo_model("se_net")
    cand = zoo_model("se_net")
    cand.graph.output.append(
        helper.make_tensor_value_info("classifier.flatten.out", onnx.TensorProto.FLOAT, None)
    )
    calib = load_calibration(None, {"input": [1, 3, 32, 32]}, count=1)
    with pytest.raises(DataError, match=r"reference has 1 outputs \(logits\), candidate has 2"):
        compare_models(ref, cand, calib)


def test_nan_output_fails_every_check(zoo_model) -> None:
    ref = zoo_model("se_net")
    cand = _shift_logit(ref, cls=0, delta=float("nan"))
    report = compare_models(ref, cand, load_calibration(None, {"input": [1, 3, 32, 32]}, count=2))
    assert np.isnan(report.max_abs_error)
    assert any(f.startswith("max abs error") for f in report.check(Thresholds(max_abs_error=1.0)))
    assert report.to_json()["max_abs_error"] is None and report.to_json()["passed"] is False


def test_unloadable_candidate_is_a_model_error(zoo_model, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    calib = load_calibration(None, {"input": [1, 3, 32, 32]}, count=1)
    with pytest.raises(ModelError, match="candidate model: onnxruntime cannot load it"):
        compare_models(zoo_model("se_net"), bad, calib)
    with pytest.raises(ModelError, match="no such file"):
        compare_models(tmp_path / "missing.onnx", zoo_model("se_net"), calib)


def test_report_json_has_the_documented_keys(zoo_model) -> None:
    calib = load_calibration(None, {"input": [1, 3, 32, 32]}, count=2)
    js = compare_models(zoo_model("se_net"), zoo_model("se_net"), calib).to_json()
    assert set(js) >= {
        "max_abs_error",
        "mean_abs_error",
        "cosine_min",
        "cosine_mean",
        "top1_agreement",
        "samples",
        "source",
        "random_inputs",
        "passed",
        "failures",
    }
    assert (
        js["samples"] == 2 and js["random_inputs"] is True and js["passed"] is True and js["failures"] == []
    )


def _seg_and_logits(logits_first: bool, logit_noise: float) -> onnx.ModelProto:
    """A 5-channel 32×32 segmentation map and 10 class logits from one input; `logit_noise`
    perturbs the classifier only (what a trim of the branch feeding it does)."""
    rng = np.random.default_rng(0)
    seg_w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    fc_w = rng.standard_normal((3, 10)).astype(np.float32)
    fc_w += logit_noise * np.random.default_rng(1).standard_normal(fc_w.shape).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["input", "seg_w"], ["seg"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["input"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "fc_w"], ["logits"]),
    ]
    seg = helper.make_tensor_value_info("seg", onnx.TensorProto.FLOAT, [4, 5, 32, 32])
    logits = helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [4, 10])
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [4, 3, 32, 32])],
        [logits, seg] if logits_first else [seg, logits],
        [numpy_helper.from_array(seg_w, "seg_w"), numpy_helper.from_array(fc_w, "fc_w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("logits_first", [False, True])
def test_a_damaged_small_output_is_not_hidden_by_a_large_one(
    logits_first: bool, cifar_b4: CalibrationSet
) -> None:
    """One cosine over both outputs joined let the 5×32×32 map outweigh the 10 logits (0.99998
    while the logits' own was 0.95), and top-1 was read off the first output only: a trim that
    damaged the classifier passed the gate. Each output now counts, the worst one's figures."""
    ref = _seg_and_logits(logits_first, 0.0)
    cand = _seg_and_logits(logits_first, 0.5)
    report = compare_models(ref, cand, cifar_b4)
    names = ["logits", "seg"] if logits_first else ["seg", "logits"]
    per = dict(zip(names, report.to_json()["per_output"]))
    assert per["seg"]["cosine_min"] == pytest.approx(1.0) and per["seg"]["top1_agreement"] is None
    ref_logits, cand_logits = (
        _logits_of(ref, cifar_b4, names.index("logits")),
        _logits_of(cand, cifar_b4, names.index("logits")),
    )
    cos = [
        float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(ref_logits, cand_logits)
    ]
    assert report.cosine_min == pytest.approx(min(cos)) == pytest.approx(per["logits"]["cosine_min"])
    assert report.cosine_min < 0.99  # what the gate must see
    top1 = float(np.mean(np.argmax(ref_logits, 1) == np.argmax(cand_logits, 1)))
    assert report.top1_agreement == pytest.approx(top1) == pytest.approx(per["logits"]["top1_agreement"])
    failures = report.check(Thresholds(max_abs_error=None, min_cosine=0.99, min_top1=None))
    assert failures[0] == f"min cosine similarity {report.cosine_min:.6f} < 0.99 (output logits)"
    # the damage changes the logits' scale as well (the map's stays): held to 14.1 % at 0.99
    assert len(failures) == 2 and failures[1].startswith("output logits: row scale changed by ")
    assert per["seg"]["scale_change"] == pytest.approx(0.0, abs=1e-6)


def _logits_of(model: onnx.ModelProto, calib: CalibrationSet, index: int) -> np.ndarray:
    sess = ort_session.session(model)
    return np.concatenate([sess.run(None, s)[index] for s in calib.samples]).astype(np.float64)


# ---------------------------------------------------------------------------- loading
def test_random_inputs_are_seeded_and_shaped() -> None:
    a = load_calibration(None, {"input": [2, 3, 8, 8], "aux": [2, 5]}, count=3, seed=4)
    assert a.random and a.source == RANDOM_SOURCE and len(a) == 3
    assert a.samples[0]["input"].shape == (2, 3, 8, 8) and a.samples[2]["aux"].shape == (2, 5)
    assert a.samples[0]["input"].dtype == np.float32
    b = load_calibration(None, {"input": [2, 3, 8, 8], "aux": [2, 5]}, count=3, seed=4)
    np.testing.assert_array_equal(a.samples[1]["input"], b.samples[1]["input"])


def test_image_folder_is_normalised_and_stacked_into_batches(cifar_b4: CalibrationSet) -> None:
    assert len(cifar_b4) == 5 and not cifar_b4.random and cifar_b4.notices == []
    x = cifar_b4.samples[0]["input"]
    assert x.shape == (4, 3, 32, 32) and x.dtype == np.float32
    px = np.asarray(Image.open(CIFAR / "cifar10_01_8.png").convert("RGB"), dtype=np.float64)
    expected = (px / 255 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    np.testing.assert_allclose(x[1], expected.transpose(2, 0, 1), atol=1e-5)
    # Images are taken in name order: the last batch holds images 16..19.
    last = np.asarray(Image.open(CIFAR / "cifar10_19_6.png").convert("RGB"), dtype=np.float64)
    np.testing.assert_allclose(
        cifar_b4.samples[4]["input"][3, 0], (last[:, :, 0] / 255 - 0.485) / 0.229, atol=1e-5
    )


def test_image_options_count_bgr_resize_gray() -> None:
    calib = load_calibration(
        CIFAR,
        {"input": [3, 3, 16, 16]},
        count=2,
        preprocess=ImagePreprocess(mean=(0.5,), std=(0.5,), channel_order="BGR"),
    )
    assert len(calib) == 2 and calib.samples[0]["input"].shape == (3, 3, 16, 16)
    img = Image.open(CIFAR / "cifar10_00_3.png").convert("RGB").resize((16, 16), Image.BILINEAR)
    blue = np.asarray(img, dtype=np.float64)[:, :, 2]
    np.testing.assert_allclose(calib.samples[0]["input"][0, 0], (blue / 255 - 0.5) / 0.5, atol=1e-5)
    # 20 images in batches of 8: two batches, the last 4 images left out, none repeated (a repeat
    # weighed an image twice, and optimize's ranking samples took the gate's first images)
    short = load_calibration(CIFAR, {"input": [8, 3, 32, 32]})
    assert len(short) == 2 and short.notices == [
        "20 images do not fill batches of 8: the last 4 are left out"
    ]
    each = [x["input"][0] for x in load_calibration(CIFAR, {"input": [1, 3, 32, 32]}, count=20).samples]
    np.testing.assert_array_equal(short.samples[1]["input"], each[8:16])
    one = load_calibration(CIFAR, {"input": [32, 3, 32, 32]})  # fewer than a batch: it repeats them
    assert len(one) == 1 and one.notices == ["20 images do not fill a batch of 32: the batch repeats them"]
    np.testing.assert_array_equal(one.samples[0]["input"][20:], one.samples[0]["input"][:12])
    gray = load_calibration(CIFAR, {"input": [1, 1, 32, 32]}, count=1)
    assert gray.samples[0]["input"].shape == (1, 1, 32, 32)
    crop = preprocess_image(CIFAR / "cifar10_00_3.png", (28, 28), resize="crop")
    assert crop.shape == (3, 28, 28)


def test_bundled_calibration_folder_loads_through_its_subfolder() -> None:
    """`--calibration-data calibration_data/` (the repository's own folder) finds the 20 images in
    calibration_data/cifar10/, in name order, exactly as pointing at the subfolder does."""
    top = load_calibration(CIFAR.parent, {"input": [1, 3, 32, 32]}, count=100)
    sub = load_calibration(CIFAR, {"input": [1, 3, 32, 32]}, count=100)
    assert len(top) == 20 and top.source == str(CIFAR.parent) and top.notices == []
    for a, b in zip(top.samples, sub.samples):
        np.testing.assert_array_equal(a["input"], b["input"])


def _png(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("L", (2, 2), color=value).save(path)


def test_nested_images_load_in_relative_path_order_and_hidden_entries_are_skipped(tmp_path: Path) -> None:
    """Images in class subfolders are found, sorted by relative path (a folder's files before a
    later sibling); hidden files and everything under hidden folders are ignored."""
    _png(tmp_path / "b" / "x.png", 30)
    _png(tmp_path / "a" / "z.png", 10)
    _png(tmp_path / "a" / "deep" / "y.png", 20)
    _png(tmp_path / "c.png", 40)
    _png(tmp_path / ".cache" / "junk.png", 250)
    _png(tmp_path / "a" / ".hidden.png", 251)
    (tmp_path / ".git").mkdir()
    np.save(tmp_path / ".git" / "stray.npy", np.zeros(3))  # would be "mixes" if it were read
    raw = ImagePreprocess(mean=(0.0,), std=(1.0,), scale=1.0)
    calib = load_calibration(tmp_path, {"input": [1, 1, 2, 2]}, count=10, preprocess=raw)
    values = [float(s["input"][0, 0, 0, 0]) for s in calib.samples]
    assert values == [20.0, 10.0, 30.0, 40.0]  # a/deep/y, a/z, b/x, c


def test_nested_mix_of_images_and_arrays_is_refused_in_one_line(tmp_path: Path) -> None:
    _png(tmp_path / "imgs" / "a.png", 0)
    (tmp_path / "arrays").mkdir()
    np.save(tmp_path / "arrays" / "b.npy", np.zeros((1, 1, 2, 2)))
    message = r"mixes images and \.npy/\.npz files \(imgs/a\.png, arrays/b\.npy\); keep one kind"
    with pytest.raises(DataError, match=message) as info:
        load_calibration(tmp_path, {"input": [1, 1, 2, 2]})
    assert "\n" not in str(info.value)


def test_folder_with_only_hidden_or_other_files_has_no_data_even_nested(tmp_path: Path) -> None:
    _png(tmp_path / ".hidden" / "a.png", 0)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no data here")
    with pytest.raises(
        DataError, match=r"only 1 other file\(s\) such as notes/readme.txt \(subfolders searched"
    ):
        load_calibration(tmp_path, {"input": [1, 1, 2, 2]})


def test_unlistable_subfolder_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """os.walk reports listing errors through onerror (it would otherwise skip the folder silently)."""
    import deployopt.fidelity as fidelity

    def walk(top, onerror=None):
        onerror(PermissionError(13, "Permission denied", str(tmp_path / "locked")))
        yield from ()

    monkeypatch.setattr(fidelity.os, "walk", walk)
    with pytest.raises(DataError, match=r"locked: cannot list folder \(Permission denied\)$"):
        load_calibration(tmp_path, {"input": [1, 1, 2, 2]})


def test_nested_array_files_concatenate_in_relative_path_order(tmp_path: Path) -> None:
    (tmp_path / "p2").mkdir()
    (tmp_path / "p1").mkdir()
    np.save(tmp_path / "p2" / "a.npy", np.full((2, 1, 3), 2.0))
    np.save(tmp_path / "p1" / "z.npy", np.full((1, 1, 3), 1.0))
    calib = load_calibration(tmp_path, {"x": [1, 3]})
    assert [float(s["x"][0, 0]) for s in calib.samples] == [1.0, 2.0, 2.0]


def test_a_folder_of_per_image_arrays_fills_batches_across_files(tmp_path: Path) -> None:
    """One preprocessed image per .npy (3×8×8 or 1×3×8×8), model batch 4: the docs said the files
    are concatenated, but each file was stacked on its own, one image repeated 4 times per batch.
    Now the rows of all files make full batches, the rest left out with a notice."""
    rng = np.random.default_rng(0)
    images = rng.standard_normal((10, 3, 8, 8)).astype(np.float32)
    for i, image in enumerate(images):
        np.save(tmp_path / f"img{i:02d}.npy", image[None] if i % 2 else image)  # both layouts
    calib = load_calibration(tmp_path, {"x": [4, 3, 8, 8]})
    assert len(calib) == 2
    np.testing.assert_array_equal(calib.samples[0]["x"], images[0:4])
    np.testing.assert_array_equal(calib.samples[1]["x"], images[4:8])
    assert calib.notices == ["10 rows of input 'x' do not fill batches of 4: the last 2 are left out"]
    one = load_calibration(tmp_path / "img03.npy", {"x": [4, 3, 8, 8]})
    assert one.notices == ["1 row of input 'x' does not fill a batch of 4: the batch repeats it"]
    assert load_calibration(tmp_path / "img03.npy", {"x": [1, 3, 8, 8]}).notices == []  # an exact sample


def test_array_files(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((6, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "rows.npy", rows)
    calib = load_calibration(tmp_path / "rows.npy", {"x": [4, 3, 8, 8]})
    assert len(calib) == 1 and calib.source == str(tmp_path / "rows.npy")
    np.testing.assert_array_equal(calib.samples[0]["x"], rows[:4])  # rows 4, 5 left out, not repeated
    calib = load_calibration(tmp_path / "rows.npy", {"x": [8, 3, 8, 8]})
    np.testing.assert_array_equal(calib.samples[0]["x"], rows[[0, 1, 2, 3, 4, 5, 0, 1]])  # under a batch
    batches = rng.standard_normal((3, 2, 3, 8, 8))
    np.save(tmp_path / "batches.npy", batches)
    calib = load_calibration(tmp_path / "batches.npy", {"x": [2, 3, 8, 8]}, count=2)
    assert len(calib) == 2 and calib.samples[1]["x"].dtype == np.float32
    np.testing.assert_allclose(calib.samples[1]["x"], batches[1], rtol=1e-6)
    np.savez(tmp_path / "two.npz", x=rows[:2], y=np.arange(10, dtype=np.float32).reshape(2, 5))
    calib = load_calibration(tmp_path / "two.npz", {"x": [1, 3, 8, 8], "y": [1, 5]})
    assert len(calib) == 2
    np.testing.assert_array_equal(calib.samples[1]["y"], [[5, 6, 7, 8, 9]])
    # one array for a one-input model: numpy.savez's own name fits quietly, another name is said
    np.savez(tmp_path / "positional.npz", rows[:2])
    calib = load_calibration(tmp_path / "positional.npz", {"x": [1, 3, 8, 8]})
    assert len(calib) == 2 and calib.notices == []
    np.savez(tmp_path / "named.npz", mask=rows[:2])
    calib = load_calibration(tmp_path / "named.npz", {"x": [1, 3, 8, 8]})
    np.testing.assert_array_equal(calib.samples[1]["x"][0], rows[1])
    assert calib.notices == [
        f"{tmp_path / 'named.npz'}: its one array 'mask' is fed to input 'x' (no key of that name)"
    ]
    folder = tmp_path / "arrays"
    folder.mkdir()
    np.save(folder / "a.npy", rows[:3])
    np.save(folder / "b.npy", rows[3:])
    calib = load_calibration(folder, {"x": [1, 3, 8, 8]})
    assert len(calib) == 6
    np.testing.assert_array_equal(calib.samples[5]["x"][0], rows[5])


@pytest.mark.parametrize(
    "setup, inputs, message",
    [
        (lambda d: d / "missing", SHAPE, r"missing: no such file or folder"),
        (lambda d: (d / "empty").mkdir() or d / "empty", SHAPE, r"empty: empty folder"),
        (
            lambda d: np.save(d / "bad.npy", np.zeros((2, 3, 28, 28))) or d / "bad.npy",
            {"input": [1, 3, 32, 32]},
            r"bad\.npy: input 'input' expects 1×3×32×32 or N×3×32×32 rows, got 2×3×28×28",
        ),
        (
            lambda d: np.savez(d / "k.npz", other=np.zeros((1, 3))) or d / "k.npz",
            {"a": [1, 3], "b": [1, 3]},
            r"k\.npz: no array for input\(s\) a, b \(keys: other\)",
        ),
        (
            lambda d: _then((d / "junk.npy").write_bytes(b"\x93NUMPY garbage"), d / "junk.npy"),
            SHAPE,
            r"junk\.npy: cannot read array file",
        ),
        (
            lambda d: _then(
                (d / "imgs").mkdir(), (d / "imgs" / "x.png").write_bytes(b"not a png"), d / "imgs"
            ),
            SHAPE,
            r"x\.png: cannot read image",
        ),
        (
            lambda d: _then((d / "notes.txt").write_text("hi"), d / "notes.txt"),
            SHAPE,
            r"notes\.txt: not calibration data",
        ),
        (
            lambda d: CIFAR,
            {"input": [1, 3, 32, 32], "mask": [1, 1]},
            r"images can feed a model with one input",
        ),
        (lambda d: CIFAR, {"input": [1, 32]}, r"images need a 4-D N×C×H×W input"),
        (lambda d: None, {"input": [0, 3, 32, 32]}, r"non-static shape"),
    ],
)
def test_bad_calibration_data_is_one_line(setup, inputs, message: str, tmp_path: Path) -> None:
    with pytest.raises(DataError, match=message) as info:
        load_calibration(setup(tmp_path), inputs)
    assert "\n" not in str(info.value)


def test_mixed_folder_and_bad_options(tmp_path: Path) -> None:
    Image.new("RGB", (4, 4)).save(tmp_path / "a.png")
    np.save(tmp_path / "b.npy", np.zeros((1, 3, 4, 4)))
    with pytest.raises(DataError, match=r"mixes images and \.npy/\.npz"):
        load_calibration(tmp_path, {"input": [1, 3, 4, 4]})
    with pytest.raises(DataError, match="--count must be >= 1"):
        load_calibration(None, SHAPE, count=0)
    with pytest.raises(DataError, match=r"--mean 0.5,0.5: expected 1 value \(every channel\) or 3"):
        load_calibration(CIFAR, SHAPE, preprocess=ImagePreprocess(mean=(0.5, 0.5)))


def _scaled_head(scale: list[float]) -> onnx.ModelProto:
    """x [2, 5, 10] → x · scale per channel: a stand-in for a detector's [4 box + classes, anchors]
    output, boxes in pixels (×500), one class score (×±1)."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["y"])],
        "scaled_head",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 5, 10])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 5, 10])],
        [numpy_helper.from_array(np.array(scale, np.float32).reshape(1, 5, 1), "s")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_changed_score_channel_shows_beside_pixel_boxes() -> None:
    """Boxes in pixels are ~99.99 % of a detector output's norm: unscaled, a cosine would not see the
    class score negated. Each channel is scaled by the reference's RMS, so the four agreeing box
    channels and the one negated score channel give (4 − 1) / 5 = 0.6."""
    x = np.abs(np.random.default_rng(0).standard_normal((2, 5, 10))).astype(np.float32) + 0.5
    calib = CalibrationSet(samples=[{"x": x}], source="test", random=False)
    ref, cand = _scaled_head([500, 500, 500, 500, 1]), _scaled_head([500, 500, 500, 500, -1])
    report = compare_models(ref, cand, calib)
    assert report.cosine_min == pytest.approx(0.6, abs=1e-9) and report.n_rows == 2
    assert report.top1_agreement is None  # not N×classes
    assert compare_models(ref, ref, calib).cosine_min == pytest.approx(1.0, abs=1e-12)
    # YOLOv5/v7 lay the same out as [anchors, 5 + classes]: channels last, scaled the same way
    xt = np.ascontiguousarray(x.transpose(0, 2, 1))
    ref_t, cand_t = (_transposed(m) for m in (ref, cand))
    calib_t = CalibrationSet(samples=[{"xt": xt}], source="test", random=False)
    assert compare_models(ref_t, cand_t, calib_t).cosine_min == pytest.approx(0.6, abs=1e-9)


def _transposed(model: onnx.ModelProto) -> onnx.ModelProto:
    """The scaled head on a [2, 10, 5] input: x → Transpose → head → Transpose, output [2, 10, 5]."""
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["xt"], ["x"], perm=[0, 2, 1]), *model.graph.node,
         helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1])],
        "scaled_head_t",
        [helper.make_tensor_value_info("xt", onnx.TensorProto.FLOAT, [2, 10, 5])],
        [helper.make_tensor_value_info("yt", onnx.TensorProto.FLOAT, [2, 10, 5])],
        list(model.graph.initializer),
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _boxes_and_scores(box_offset: float, score_offset: float) -> onnx.ModelProto:
    """boxes = x × 640 + box_offset (pixels), scores = x + score_offset (0–1): a detector's two scales."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1, 8]) for n in ("boxes", "scores")]
    consts = [
        numpy_helper.from_array(np.array(v, np.float32), n)
        for n, v in (("px", 640.0), ("bo", box_offset), ("so", score_offset))
    ]
    nodes = [
        helper.make_node("Mul", ["x", "px"], ["b0"]),
        helper.make_node("Add", ["b0", "bo"], ["boxes"]),
        helper.make_node("Add", ["x", "so"], ["scores"]),
    ]
    graph = helper.make_graph(nodes, "g", [x], outs, consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_rel_error_scales_each_outputs_limit_by_its_own_magnitude() -> None:
    """An error of 2e-4 on boxes near 640 px is ~3 fp32 ulps there and passes 1e-4 + 1e-5 × 640;
    the same error on 0–1 scores fails, and the failure names that output."""
    calib = CalibrationSet(
        samples=[{"x": np.linspace(0.0, 1.0, 8, dtype=np.float32)[None]}], source="t", random=False
    )
    ref = _boxes_and_scores(0.0, 0.0)
    boxes_off = compare_models(ref, _boxes_and_scores(2e-4, 0.0), calib)
    assert boxes_off.output_max_abs_reference == pytest.approx([640.0, 1.0])
    assert boxes_off.output_max_abs_error[1] == 0.0 and boxes_off.output_max_abs_error[0] > 1e-4
    lossless = Thresholds(max_abs_error=1e-4, rel_error=1e-5, min_cosine=None, min_top1=None)
    assert boxes_off.check(lossless) == []
    assert boxes_off.check(Thresholds(max_abs_error=1e-4, min_cosine=None, min_top1=None)) != []
    scores_off = compare_models(ref, _boxes_and_scores(0.0, 2e-4), calib)
    failures = scores_off.check(lossless)
    assert len(failures) == 1 and failures[0].startswith(
        "output scores: max abs error 0.0002 > 0.0001 + 1e-05"
    )
    js = scores_off.to_json(lossless)
    assert [o["name"] for o in js["per_output"]] == ["boxes", "scores"] and js["passed"] is False
    assert js["per_output"][1]["max_abs_reference"] == 1.0


def _fp16_convs(shift: float = 0.0) -> onnx.ModelProto:
    """An fp16 export: float16 input, weights and output (x → Conv 3→6 → Relu → Conv 6→4)."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((6, 3, 3, 3)).astype(np.float16)
    w2 = (rng.standard_normal((4, 6, 3, 3)) * 0.3).astype(np.float16)
    b2 = np.full(4, shift, np.float16)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w2", "b2"], ["y"], kernel_shape=[3, 3], pads=[1] * 4),
    ]
    graph = helper.make_graph(
        nodes,
        "fp16",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT16, [1, 4, 8, 8])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (b2, "b2"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_an_fp16_model_gets_its_inputs_as_float16() -> None:
    """Calibration data is float32; onnxruntime refused it for a float16 input ("Unexpected input data
    type"), so `verify` and optimize's lossless check failed on every fp16 export."""
    calib = load_calibration(None, {"x": [1, 3, 8, 8]}, count=2)
    report = compare_models(_fp16_convs(), _fp16_convs(), calib)
    assert report.max_abs_error == 0.0 and report.cosine_min == 1.0 and not report.check()
    shifted = compare_models(_fp16_convs(), _fp16_convs(shift=0.5), calib)
    assert shifted.max_abs_error == pytest.approx(0.5, abs=1 / 32)  # fp16 rounds outputs near 23 to 1/64


def test_outputs_of_the_same_names_pair_by_name_in_any_order(cifar_b4: CalibrationSet) -> None:
    """The same model with its outputs listed the other way round compared logits with the map by
    position: FAILED, cosine and top-1 off, blamed on the wrong output. Names pair them now."""
    ref, cand = _seg_and_logits(False, 0.0), _seg_and_logits(True, 0.0)
    report = compare_models(ref, cand, cifar_b4)
    assert report.check(Thresholds()) == [] and report.max_abs_error == 0.0
    assert report.top1_agreement == 1.0 and report.candidate_output_names == ["seg", "logits"]


def test_a_reference_run_is_made_once_for_every_comparison(
    zoo_model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """optimize compares each candidate with the same input model on the same samples: it built a
    reference session (serializing the model) and ran it for every check. A ReferenceRun runs it
    once per sample, and its reports are the ones a fresh reference gives."""
    import deployopt.fidelity as fidelity
    from deployopt.fidelity import ReferenceRun

    ref = zoo_model("se_net")
    calib = load_calibration(None, {"input": [1, 3, 32, 32]}, count=3)
    runs: list[str] = []
    real_run = fidelity._run
    monkeypatch.setattr(
        fidelity, "_run", lambda s, feeds, role, *data: runs.append(role) or real_run(s, feeds, role, *data)
    )
    shared = ReferenceRun(ref)
    first = compare_models(shared, ref, calib).to_json()
    second = compare_models(shared, _negate_logits(ref), calib).to_json()
    assert runs.count("reference") == 3 and runs.count("candidate") == 6
    assert first == compare_models(ref, ref, calib).to_json()
    assert second == compare_models(ref, _negate_logits(ref), calib).to_json()
    assert second != first


def _logits_c11(bias: list[float]) -> onnx.ModelProto:
    """x [4, 5, 1, 1] → x + bias per channel: a SqueezeNet/Caffe-style classifier's N×classes×1×1."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"])],
        "c11_head",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 5, 1, 1])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 5, 1, 1])],
        [numpy_helper.from_array(np.array(bias, np.float32).reshape(1, 5, 1, 1), "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_n_classes_1_1_logits_are_compared_unscaled_and_count_for_top1() -> None:
    """[N, C, 1, 1] logits had every channel scaled by its own RMS (one position: each logit divided
    by its own magnitude, so the cosine saw only signs) and no top-1 (only 2-D outputs counted)."""
    x = np.random.default_rng(3).standard_normal((4, 5, 1, 1)).astype(np.float32)
    bias = [1.5, 0.0, 0.0, 0.0, 0.0]
    calib = CalibrationSet(samples=[{"x": x}], source="test", random=False)
    report = compare_models(_logits_c11([0.0] * 5), _logits_c11(bias), calib)
    ref, cand = x.reshape(4, 5).astype(np.float64), (x.reshape(4, 5) + np.array(bias)).astype(np.float64)
    cos = [float(r @ c / np.linalg.norm(r) / np.linalg.norm(c)) for r, c in zip(ref, cand)]
    assert report.cosine_min == pytest.approx(min(cos), abs=1e-6)
    top1 = float(np.mean(ref.argmax(1) == cand.argmax(1)))
    assert 0.0 < top1 < 1.0 and report.top1_agreement == pytest.approx(top1)
    assert compare_models(_logits_c11(bias), _logits_c11(bias), calib).top1_agreement == 1.0


def test_files_of_other_types_in_a_folder_are_counted_in_a_notice(tmp_path: Path) -> None:
    """20 .webp and one .png loaded as "1 sample" without a word: the files not read are counted
    by extension; hidden files and text/metadata (README.md, labels.txt) are not mentioned."""
    _png(tmp_path / "a.png", 10)
    for i in range(3):
        (tmp_path / f"img{i}.webp").write_bytes(b"RIFF")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.TIF").write_bytes(b"II*\0")
    for quiet in (".DS_Store", "README.md", "labels.txt", "LICENSE"):
        (tmp_path / quiet).write_text("x")
    calib = load_calibration(tmp_path, {"input": [1, 3, 8, 8]}, count=4)
    said = "4 file(s) not read: .webp ×3, .tif ×1 (images are png/jpg/jpeg/bmp; arrays .npy/.npz)"
    assert len(calib.samples) == 1 and calib.notices == [said]
    arrays = tmp_path / "arrays"
    arrays.mkdir()
    np.save(arrays / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    (arrays / "y.npy.gz").write_bytes(b"\x1f\x8b")
    assert load_calibration(arrays, {"input": [1, 3, 8, 8]}).notices == [
        "1 file(s) not read: .gz ×1 (images are png/jpg/jpeg/bmp; arrays .npy/.npz)"
    ]
    assert load_calibration(CIFAR.parent, SHAPE).notices == []  # its README.md and LICENSE: no notice


def test_integer_arrays_keep_their_values_and_float64_past_float32_is_one_line(tmp_path: Path) -> None:
    """Arrays were cast to float32 before any check: int64 ids past 2**24 were rounded
    (16777217 → 16777216) and 1e300 became inf, with numpy's two-line RuntimeWarning, the error
    then blaming the reference model's outputs."""
    import warnings

    ids = np.array([[16777217, 123456789, 2**40 + 1, 7]], np.int64)
    np.save(tmp_path / "ids.npy", ids)
    sample = load_calibration(tmp_path / "ids.npy", {"ids": [1, 4]}).samples[0]["ids"]
    assert sample.dtype.kind == "i" and sample.tolist() == ids.tolist()
    graph = helper.make_graph(
        [helper.make_node("Identity", ["ids"], ["out"])],
        "ids",
        [helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("out", onnx.TensorProto.INT64, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    calib = load_calibration(tmp_path / "ids.npy", {"ids": [1, 4]})
    assert compare_models(model, model, calib).max_abs_error == 0.0
    np.save(tmp_path / "huge.npy", np.full((1, 3, 4, 4), 1e300))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(
            DataError, match=r"huge\.npy: array for input 'x' holds 1e\+300, past float32"
        ) as exc:
            load_calibration(tmp_path / "huge.npy", {"x": [1, 3, 4, 4]})
    assert "\n" not in str(exc.value)
    np.save(tmp_path / "ok.npy", np.full((1, 3, 4, 4), 1e30))  # float64 within float32's range: fed
    assert load_calibration(tmp_path / "ok.npy", {"x": [1, 3, 4, 4]}).samples[0]["x"].dtype == np.float32


def test_crop_keeps_the_aspect_ratio_and_square_inputs_crop_as_before(tmp_path: Path) -> None:
    """`--resize crop` into a 32×64 input scaled the short side to 32/0.875 and stretched the other
    to 64: a round circle came out twice as wide as tall. One factor now covers both axes."""
    from PIL import ImageDraw

    im = Image.new("RGB", (512, 512))
    ImageDraw.Draw(im).ellipse((156, 156, 356, 356), fill=(255, 255, 255))
    im.save(tmp_path / "circle.png")
    x = preprocess_image(tmp_path / "circle.png", (32, 64), resize="crop", mean=(0,), std=(1,))[0]
    rows, cols = np.where(x.max(1) > 0.5)[0], np.where(x.max(0) > 0.5)[0]
    assert abs(len(rows) - len(cols)) <= 1 and len(rows) > 20
    # a square input resizes exactly as the old recipe did (shorter side to round(S/0.875))
    photo = Image.open(CIFAR / "cifar10_00_3.png").convert("RGB").resize((45, 30), Image.BILINEAR)
    photo.save(tmp_path / "wide.png")
    for s in (28, 224):
        short = round(s / 0.875)
        ratio = short / 30
        old = photo.resize((max(s, round(45 * ratio)), max(s, round(30 * ratio))), Image.BILINEAR)
        left, top = (old.size[0] - s) // 2, (old.size[1] - s) // 2
        old = np.asarray(old.crop((left, top, left + s, top + s)), np.float32).transpose(2, 0, 1)
        new = preprocess_image(tmp_path / "wide.png", (s, s), resize="crop", mean=(0,), std=(1,), scale=1.0)
        assert np.array_equal(new, old)


def test_an_input_with_no_image_channels_is_refused_for_images_before_any_is_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An input with 4 channels either way was "images can feed inputs with 1 or 3 channels, the
    model's has 32", blaming the first image: the layout is the model's, said once, before reading
    an image (N×H×W×C with 1 or 3 channels is read: test_inputs_users_bring)."""
    import deployopt.fidelity as fidelity

    monkeypatch.setattr(fidelity, "preprocess_image", lambda *a, **k: pytest.fail("an image was read"))
    with pytest.raises(DataError) as exc:
        load_calibration(CIFAR, {"input": [1, 32, 32, 4]})
    msg = str(exc.value)
    assert "N×C×H×W or N×H×W×C inputs with 1 or 3 channels" in msg and "1×32×32×4" in msg
    assert ".npy/.npz" in msg and "\n" not in msg


def test_a_palette_png_with_transparency_is_read_without_a_warning(tmp_path: Path) -> None:
    """Pillow warned in two lines on stderr ("Palette images with Transparency expressed in bytes
    should be converted to RGBA images") for each such image: it is read via RGBA."""
    import warnings

    rgb = Image.open(CIFAR / "cifar10_00_3.png").convert("RGB")
    rgb.convert("P").save(tmp_path / "p.png", transparency=bytes([0] * 10 + [255] * 246))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = preprocess_image(tmp_path / "p.png", (32, 32), mean=(0,), std=(1,), scale=1.0)
        gray = preprocess_image(tmp_path / "p.png", (32, 32), channels=1, mean=(0,), std=(1,), scale=1.0)
    palette = Image.open(tmp_path / "p.png").convert("RGBA")
    assert np.array_equal(got, np.asarray(palette.convert("RGB"), np.float32).transpose(2, 0, 1))
    assert np.array_equal(gray[0], np.asarray(palette.convert("L"), np.float32))
