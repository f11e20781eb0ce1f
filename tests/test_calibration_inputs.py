"""Calibration data as the models take it: INT8 calibration refuses what an input's type cannot
hold (as verify does), array files are read only as far as --count needs, symlinked folders are
followed, and a bool input is fed bools."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image
from test_tensorrt_fake_api import V10, install, opts

import deployopt.fidelity as fidelity
from deployopt.backends.tensorrt import build_engine
from deployopt.backends.tensorrt_calibrator import CalibrationBatcher, load_samples
from deployopt.errors import DataError
from deployopt.fidelity import (
    ReferenceRun,
    check_feedable,
    compare_models,
    folder_files,
    input_dtypes,
    load_calibration,
)

ROOT = Path(__file__).resolve().parents[1]
CIFAR = ROOT / "calibration_data" / "cifar10"


def _cast_model(path: Path, elem: int, shape: list[int]) -> Path:
    """x (of type `elem`) → Cast to float → y: a model that takes uint8 pixels or fp16 itself."""
    x = helper.make_tensor_value_info("x", elem, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], "cast", [x], [y]
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


# ---------------------------------------------------------------------------- bug 2: INT8 calibration
def test_int8_calibration_refuses_normalised_images_for_a_uint8_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """verify refused normalised images for a uint8 input, but the tensorrt backend cast them to the
    input's type and calibrated on the wrapped values (0, 1, 2, 255): one line now, nothing built."""
    _, gpu = install(monkeypatch, V10, "bindings")
    model = _cast_model(tmp_path / "u8.onnx", TensorProto.UINT8, [1, 3, 32, 32])
    options = opts(tmp_path, dtype="int8", calibration_data=str(CIFAR))
    with pytest.raises(DataError, match=r"takes (uint8|int32), the data holds other values") as info:
        build_engine(str(model), options, str(tmp_path / "u8.engine"))
    assert str(CIFAR) in str(info.value) and "\n" not in str(info.value)
    assert gpu.calibration_batches == [] and not (tmp_path / "u8.engine").exists()


def test_int8_calibration_feeds_a_uint8_input_the_integers_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, gpu = install(monkeypatch, V10, "bindings")
    model = _cast_model(tmp_path / "u8.onnx", TensorProto.UINT8, [1, 3, 4, 4])
    pixels = np.random.default_rng(0).integers(0, 256, (3, 1, 3, 4, 4)).astype(np.uint8)
    np.save(tmp_path / "px.npy", pixels)
    options = opts(tmp_path, dtype="int8", calibration_data=str(tmp_path / "px.npy"))
    build_engine(str(model), options, str(tmp_path / "u8.engine"))
    assert len(gpu.calibration_batches) == 3
    for got, want in zip(gpu.calibration_batches, pixels):
        np.testing.assert_array_equal(got["x"], want)


def test_int8_calibration_refuses_values_past_a_float16_input(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """1e5 in a float16 buffer is inf: TensorRT was handed inf to take ranges from."""
    _, gpu = install(monkeypatch, V10, "bindings")
    model = _cast_model(tmp_path / "f16.onnx", TensorProto.FLOAT16, [1, 3, 4, 4])
    np.save(tmp_path / "big.npy", np.full((2, 1, 3, 4, 4), 1e5, np.float32))
    options = opts(tmp_path, dtype="int8", calibration_data=str(tmp_path / "big.npy"))
    with pytest.raises(
        DataError, match=r"takes float16, whose largest value is 65504; the data holds 100000"
    ):
        build_engine(str(model), options, str(tmp_path / "f16.engine"))
    assert gpu.calibration_batches == []


def test_the_batcher_refuses_what_an_input_type_cannot_hold() -> None:
    shape = {"img": (1, 3, 32, 32)}
    images = load_samples(str(CIFAR), shape, 4)  # normalised floats
    with pytest.raises(
        DataError, match=r"^calibration data: the model input 'img' takes uint8, the data holds other values"
    ):
        CalibrationBatcher(images, shape, {"img": np.uint8})
    with pytest.raises(
        DataError, match=r"^calibration data: the model input 'img' takes float16, whose largest"
    ):
        CalibrationBatcher([{"img": np.full((1, 3, 32, 32), 7e4, np.float32)}], shape, {"img": np.float16})
    with pytest.raises(DataError, match=r"^calibration data: the model input 'm' takes bool"):
        CalibrationBatcher([{"m": np.full((1, 4), 0.5, np.float32)}], {"m": (1, 4)}, {"m": np.bool_})
    pixels = [{"img": np.full((1, 3, 32, 32), v, np.float32)} for v in (0, 17, 255)]
    batcher = CalibrationBatcher(pixels, shape, {"img": np.uint8})  # whole numbers in range: fine
    assert [int(batcher.next_batch()["img"].max()) for _ in range(3)] == [0, 17, 255]
    fine = CalibrationBatcher([{"img": np.full((1, 3, 32, 32), 6e4, np.float32)}], shape, {"img": np.float16})
    assert np.isfinite(fine.next_batch()["img"]).all()


# ---------------------------------------------------------------------------- bug 3: only what --count needs
class _LoadSpy:
    """np.load, recording each file it opens and with which mmap_mode."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.real = np.load
        monkeypatch.setattr(np, "load", self)

    def __call__(self, file: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((Path(file).name, kwargs.get("mmap_mode")))
        return self.real(file, *args, **kwargs)


def test_a_folder_of_npy_files_is_read_only_up_to_count_times_batch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """verify --count 2 on 3000 per-image .npy files read all of them (3.6 GB resident for 1.7 GB):
    files past count × batch rows are not opened now, and each .npy is memory-mapped."""
    rng = np.random.default_rng(0)
    images = rng.standard_normal((6, 3, 4, 4)).astype(np.float32)
    for i, image in enumerate(images):
        np.save(tmp_path / f"s{i:02d}.npy", image)
    for i in range(6, 12):  # broken files: reading any of them is an error
        (tmp_path / f"s{i:02d}.npy").write_bytes(b"\x93NUMPY broken")
    opened: list[str] = []
    header = fidelity._check_array_header
    monkeypatch.setattr(fidelity, "_check_array_header", lambda p: (opened.append(p.name), header(p))[1])
    spy = _LoadSpy(monkeypatch)
    calib = load_calibration(tmp_path, {"x": [2, 3, 4, 4]}, count=2)
    assert len(calib) == 2 and calib.notices == []
    np.testing.assert_array_equal(calib.samples[0]["x"], images[0:2])
    np.testing.assert_array_equal(calib.samples[1]["x"], images[2:4])
    assert opened == [f"s{i:02d}.npy" for i in range(4)]
    assert spy.calls == [(f"s{i:02d}.npy", "r") for i in range(4)]
    # fewer rows than count × batch: every good file is read, the leftover said as before
    for i in range(6, 12):
        (tmp_path / f"s{i:02d}.npy").unlink()
    calib = load_calibration(tmp_path, {"x": [4, 3, 4, 4]}, count=16)
    assert len(calib) == 1
    assert calib.notices == ["6 rows of input 'x' do not fill batches of 4: the last 2 are left out"]


def test_a_big_npy_is_memory_mapped_and_only_the_rows_used_are_copied(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One 1.7 GB .npy with --count 2 was read whole (and checked whole): rows past those used
    are not read now (a NaN there is no error), and the samples are copies, not views of the map."""
    rows = np.random.default_rng(1).standard_normal((50, 3, 4, 4)).astype(np.float32)
    rows[10:] = np.nan  # never read
    np.save(tmp_path / "big.npy", rows)
    spy = _LoadSpy(monkeypatch)
    calib = load_calibration(tmp_path / "big.npy", {"x": [4, 3, 4, 4]}, count=2)
    assert spy.calls == [("big.npy", "r")]
    assert len(calib) == 2 and calib.notices == []
    np.testing.assert_array_equal(np.concatenate([s["x"] for s in calib.samples]), rows[:8])
    assert all(type(s["x"]) is np.ndarray and not isinstance(s["x"].base, np.memmap) for s in calib.samples)
    batches = np.arange(5 * 2 * 3, dtype=np.float32).reshape(5, 2, 3)  # N whole batches
    batches[3:] = np.inf
    np.save(tmp_path / "batches.npy", batches)
    calib = load_calibration(tmp_path / "batches.npy", {"x": [2, 3]}, count=3)
    np.testing.assert_array_equal(np.stack([s["x"] for s in calib.samples]), batches[:3])


def test_an_npz_reads_only_the_arrays_the_inputs_take(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """np.load of an .npz cannot map; every member was read, those no input takes too."""
    x = np.arange(8 * 3, dtype=np.float32).reshape(8, 1, 3)
    np.savez(tmp_path / "d.npz", x=x, labels=np.zeros((8, 1000), np.float32), y=x * 2)
    read: list[str] = []  # the members opened (streamed, not read through NpzFile.__getitem__)
    real = zipfile.ZipFile.open

    def opened(z: zipfile.ZipFile, member: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(member)
        return real(z, member, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", opened)
    calib = load_calibration(tmp_path / "d.npz", {"x": [1, 3], "y": [1, 3]}, count=2)
    assert sorted(set(read)) == ["x.npy", "y.npy"] and len(calib) == 2
    np.testing.assert_array_equal(calib.samples[1]["y"], x[1] * 2)


def test_inputs_with_different_counts_are_said_only_where_they_limit(tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", x=np.zeros((5, 1, 3), np.float32), y=np.zeros((3, 1, 2), np.float32))
    calib = load_calibration(tmp_path / "d.npz", {"x": [1, 3], "y": [1, 2]}, count=16)
    assert len(calib) == 3
    assert calib.notices == ["inputs have different sample counts {'x': 5, 'y': 3}: using the first 3"]
    assert load_calibration(tmp_path / "d.npz", {"x": [1, 3], "y": [1, 2]}, count=2).notices == []


def test_a_scalar_input_is_fed_from_an_npy(tmp_path: Path) -> None:
    """A 0-d input's batch was shape[0] of an empty shape: an IndexError traceback."""
    np.save(tmp_path / "s.npy", np.array([1.5, 2.5, 3.5], np.float32))
    calib = load_calibration(tmp_path / "s.npy", {"t": []}, count=2)
    assert [(s["t"].shape, float(s["t"])) for s in calib.samples] == [((), 1.5), ((), 2.5)]


# ---------------------------------------------------------------------------- bug 4: symlinked folders
def test_symlinked_subfolders_are_followed_once_each(tmp_path: Path) -> None:
    """A dataset linked in class by class was skipped without a word, then "empty folder"."""
    photos = tmp_path / "photos"
    (photos / "deep").mkdir(parents=True)
    for name in ("b.png", "a.png", "deep/c.png"):
        Image.new("RGB", (8, 8), (len(name) * 20, 0, 0)).save(photos / name)
    data = tmp_path / "data"
    data.mkdir()
    os.symlink(photos, data / "class_a")
    os.symlink(photos, data / "class_b")  # the same folder again: listed once
    os.symlink(data, data / "loop")  # back up the tree: ends there
    os.symlink(data / "class_a", data / "class_a_again")
    files = [str(p.relative_to(data)) for p in folder_files(data)]
    assert files == ["class_a/a.png", "class_a/b.png", "class_a/deep/c.png"]
    calib = load_calibration(data, {"input": [1, 3, 8, 8]})
    assert len(calib) == 3


def test_a_folder_linked_in_beside_real_ones_keeps_the_sorted_order(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    np.save(outside / "m.npy", np.full((1, 2), 2.0, np.float32))
    data = tmp_path / "data"
    (data / "a").mkdir(parents=True)
    (data / "z").mkdir()
    np.save(data / "a" / "x.npy", np.full((1, 2), 1.0, np.float32))
    np.save(data / "z" / "x.npy", np.full((1, 2), 3.0, np.float32))
    os.symlink(outside, data / "m")
    calib = load_calibration(data, {"v": [1, 2]})
    assert [float(s["v"][0, 0]) for s in calib.samples] == [1.0, 2.0, 3.0]


# ---------------------------------------------------------------------------- bug 5: bool inputs
def _bool_model(path: Path) -> Path:
    """y = Where(mask, x, 0): a model with a bool input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    node = helper.make_node("Where", ["mask", "x", "zero"], ["y"])
    graph = helper.make_graph([node], "masked", [x, mask], [y], [zero])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_bool_input_is_fed_bool_arrays(tmp_path: Path) -> None:
    """Bools were made float32 at load and input_dtypes had no tensor(bool): onnxruntime refused
    the float for the bool input, so such a model could not be checked on any data."""
    model = _bool_model(tmp_path / "m.onnx")
    x = np.arange(12, dtype=np.float32).reshape(3, 1, 4) + 1
    mask = np.array([[[True, False, True, False]]] * 3)
    np.savez(tmp_path / "d.npz", x=x, mask=mask)
    calib = load_calibration(tmp_path / "d.npz", {"x": [1, 4], "mask": [1, 4]})
    assert calib.samples[0]["mask"].dtype == np.bool_
    ref = ReferenceRun(str(model))
    assert input_dtypes(ref.session)["mask"] is np.bool_
    np.testing.assert_array_equal(ref.outputs(calib.samples[0])[0], [[1, 0, 3, 0]])
    report = compare_models(str(model), str(model), calib)
    assert report.n_samples == 3 and report.max_abs_error == 0 and not report.check()
    check_feedable(calib, onnx.load(str(model)))


def test_a_bool_input_gets_random_bools_and_refuses_other_values(tmp_path: Path) -> None:
    """Random inputs were refused for a bool input ('random inputs are floats'): it gets seeded
    random bools now, as an integer input gets integers (fidelity.random_values), both values."""
    model = _bool_model(tmp_path / "m.onnx")
    random = load_calibration(None, {"x": [1, 4], "mask": [1, 4]}, count=4)
    report = compare_models(str(model), str(model), random)
    assert not report.check() and report.source.endswith("input 'mask': bool False/True)")
    masks = np.concatenate([s["mask"] for s in random.samples])
    assert masks.dtype == np.bool_ and masks.any() and not masks.all()
    again = load_calibration(None, {"x": [1, 4], "mask": [1, 4]}, count=4)
    check_feedable(again, onnx.load(str(model)))
    np.testing.assert_array_equal(np.concatenate([s["mask"] for s in again.samples]), masks)
    np.savez(tmp_path / "half.npz", x=np.ones((2, 1, 4), np.float32), mask=np.full((2, 1, 4), 0.5))
    half = load_calibration(tmp_path / "half.npz", {"x": [1, 4], "mask": [1, 4]})
    with pytest.raises(DataError, match=r"input 'mask' takes bool, the data holds other values"):
        check_feedable(half, onnx.load(str(model)))
    np.savez(tmp_path / "ones.npz", x=np.ones((2, 1, 4), np.float32), mask=np.eye(2, 4)[:, None])
    ones = load_calibration(tmp_path / "ones.npz", {"x": [1, 4], "mask": [1, 4]})
    assert not compare_models(str(model), str(model), ones).check()  # 0/1 floats are fed as bools


# ---------------------------------------------------------------------------- bugs 6, 7: docs
def test_the_image_docs_say_what_crop_and_exif_do(tmp_path: Path) -> None:
    """The README said images are resized 'when they differ (... or crop ...)'; crop always zooms
    to H/0.875 and takes the centre, and EXIF orientation is ignored (as torchvision's loader)."""
    readme = " ".join((ROOT / "calibration_data" / "README.md").read_text().split())
    models = " ".join((ROOT / "docs" / "models.md").read_text().split())
    assert "when they differ (`--resize stretch`, or `crop`" not in readme
    assert "`--resize crop` always scales it" in readme and "an image already H×W is zoomed" in readme
    assert "EXIF orientation is ignored" in readme and "EXIF orientation is ignored" in models
    # what they say: an H×W image is still cropped; a tagged photo is read as stored
    Image.fromarray(np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)).save(tmp_path / "p.png")
    crop = fidelity.preprocess_image(tmp_path / "p.png", (8, 8), resize="crop")
    stretch = fidelity.preprocess_image(tmp_path / "p.png", (8, 8))
    assert not np.allclose(crop, stretch)
    tall = np.zeros((8, 4, 3), np.uint8)
    tall[:4] = 255  # top half white
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90° to display
    Image.fromarray(tall).save(tmp_path / "t.jpg", exif=exif.tobytes(), quality=100)
    fed = fidelity.preprocess_image(tmp_path / "t.jpg", (8, 4), mean=(0,), std=(1,))
    assert fed.shape == (3, 8, 4) and fed[:, :3].mean() > 0.9 and fed[:, 5:].mean() < 0.1


def test_zip_member_read_only_when_needed(tmp_path: Path) -> None:
    """A member no input takes is not read, so a stray non-.npy member there is no error; one an
    input takes still is."""
    with zipfile.ZipFile(tmp_path / "d.npz", "w") as z:
        with z.open("x.npy", "w") as f:
            np.lib.format.write_array(f, np.ones((2, 1, 3), np.float32))
        z.writestr("notes", b"hello")
    assert len(load_calibration(tmp_path / "d.npz", {"x": [1, 3]})) == 2
    with pytest.raises(DataError, match=r"'notes' in it is not a \.npy array"):
        load_calibration(tmp_path / "d.npz", {"notes": [1, 3]})
