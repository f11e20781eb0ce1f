"""Calibration images are held once, and verify's memory pre-flight counts what the data gives.

A folder of 10 000 PNGs fed to a [1, 3, 512, 512] model with --count 1000 peaked at 6.2 GB without a
warning: every image was decoded into a list, then stacked into batches while the list was alive
(3.0 GB twice), and the pre-flight counted one sample for any --calibration-data."""

from __future__ import annotations

import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto as T
from onnx import helper as h
from PIL import Image

import deployopt.cli.verify_cmd as verify_cmd
import deployopt.fidelity as fidelity
from deployopt.fidelity import load_calibration


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _images(folder: Path, n: int, size: int = 64) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(folder / f"{i:03d}.png")
    return folder


def _identity(path: Path, shape: list[int]) -> Path:
    graph = h.make_graph(
        [h.make_node("Relu", ["x"], ["y"])],
        "relu",
        [h.make_tensor_value_info("x", T.FLOAT, shape)],
        [h.make_tensor_value_info("y", T.FLOAT, shape)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_images_are_not_held_twice(tmp_path: Path) -> None:
    """16 images into 4 batches of 4: the peak is the batches and one image's work, not a list of
    every image beside the batches stacked from it (2× the tensors)."""
    folder = _images(tmp_path / "imgs", 16)
    shape = {"x": [4, 3, 64, 64]}
    tensors = 16 * 3 * 64 * 64 * 4
    load_calibration(folder, shape, count=4)  # imports and Pillow's plugins, before measuring
    tracemalloc.start()
    try:
        calib = load_calibration(folder, shape, count=4)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(calib) == 4 and calib.samples[0]["x"].shape == (4, 3, 64, 64)
    assert peak < 1.5 * tensors, f"peak {peak} B for {tensors} B of tensors"


def test_images_past_the_last_batch_are_not_decoded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """5 images, batch 2: two batches, the fifth image left out (said so) and never read; the
    batches hold the images in order, as stacking a list of them did."""
    folder = _images(tmp_path / "imgs", 5, size=8)
    real, read = fidelity.preprocess_image, []

    def counted(path: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        read.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(fidelity, "preprocess_image", counted)
    calib = load_calibration(folder, {"x": [2, 3, 8, 8]}, count=16)
    assert read == ["000.png", "001.png", "002.png", "003.png"]
    assert calib.notices == ["5 images do not fill batches of 2: the last 1 is left out"]
    for k, name in enumerate(read):
        np.testing.assert_array_equal(calib.samples[k // 2]["x"][k % 2], real(folder / name, (8, 8)))
    one = load_calibration(folder, {"x": [8, 3, 8, 8]}, count=1)  # fewer than a batch: repeated
    np.testing.assert_array_equal(one.samples[0]["x"][5:], one.samples[0]["x"][:3])


def test_the_memory_preflight_counts_the_samples_the_data_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """verify's pre-flight is told how many samples the data gives (at most --count), not 1."""
    folder = _images(tmp_path / "imgs", 10, size=8)
    model = _identity(tmp_path / "m.onnx", [2, 3, 8, 8])
    told: list[int] = []
    monkeypatch.setattr(verify_cmd, "require_fidelity_memory", lambda ref, cand, n, *a: told.append(n))
    arrays = tmp_path / "a.npy"
    np.save(arrays, np.zeros((7, 2, 3, 8, 8), np.float32))
    runs = [
        ("--calibration-data", str(folder), "--count", "3"),  # 3 batches of 2 of the 10 images
        ("--calibration-data", str(folder), "--count", "100"),  # the 10 images make 5
        ("--calibration-data", str(arrays)),  # 7 samples, --count 16
        ("--calibration-data", str(folder / "000.png")),
        ("--count", "6"),  # random inputs: --count
    ]
    for args in runs:
        code, out, err = run_cli(monkeypatch, capsys, "verify", str(model), str(model), *args)
        assert code == 0, out + err
    assert told == [3, 5, 7, 1, 6]


def test_samples_held_reads_only_listings_and_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted with every way to read an array's data failing: comparing the counts alone passed an
    implementation that loads the arrays."""
    x = {"x": [2, 3, 4, 4]}
    np.save(tmp_path / "rows.npy", np.zeros((9, 3, 4, 4), np.float16))  # 9 rows: 4 batches
    np.savez(tmp_path / "s.npz", x=np.zeros((3, 2, 3, 4, 4)), other=np.zeros(2))
    np.savez_compressed(tmp_path / "one.npz", np.zeros((2, 3, 4, 4)))  # one sample, any key

    def held(*args: Any) -> int:  # np.load, a .npz member's read: an AssertionError
        with monkeypatch.context() as m:
            for owner, name in ((np, "load"), (np, "fromfile"), (np.lib.format, "read_array")):
                m.setattr(owner, name, _no_data_read)
            m.setattr(zipfile.ZipFile, "read", _no_data_read)
            return fidelity.samples_held(*args)

    assert held(tmp_path / "rows.npy", x, 16) == 4 and held(tmp_path / "rows.npy", x, 2) == 2
    assert held(tmp_path / "s.npz", x, 16) == 3 and held(tmp_path / "one.npz", x, 16) == 1
    folder = tmp_path / "arrays"
    folder.mkdir()
    for i in range(5):  # one image row per file: 5 rows, 2 batches
        np.save(folder / f"{i}.npy", np.zeros((3, 4, 4), np.float32))
    assert held(folder, x, 16) == 2
    assert held(None, x, 16) == 16
    (tmp_path / "bad.npy").write_text("not an array")
    assert held(tmp_path / "bad.npy", x, 16) == 1  # the loader says what is wrong
    for f in (tmp_path / "rows.npy", tmp_path / "s.npz", tmp_path / "one.npz", folder):
        assert held(f, x, 16) == len(load_calibration(f, x, count=16))


def _no_data_read(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("samples_held read an array's data")


def test_optimize_memory_preflight_counts_the_samples_the_data_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zoo_model_path: Any
) -> None:
    """optimize's fidelity pre-flight counted one sample for any --calibration-data, as verify's did."""
    import deployopt.memory as memory
    from deployopt.optimize import OptimizeConfig, optimize

    src = zoo_model_path("vgg16_pruned_b4")
    dims = [d.dim_value for d in onnx.load(str(src)).graph.input[0].type.tensor_type.shape.dim]
    arrays = tmp_path / "a.npy"
    np.save(arrays, np.random.default_rng(0).standard_normal((3, *dims)).astype(np.float32))
    told: list[int] = []
    monkeypatch.setattr(memory, "require_fidelity_memory", lambda ref, cand, n, *a: told.append(n))
    common = dict(target="h200", sms=8, backend="model", plots=False, max_evals=2)
    optimize(OptimizeConfig(model_path=src, outdir=tmp_path / "o1", calibration_data=arrays, **common))
    optimize(OptimizeConfig(model_path=src, outdir=tmp_path / "o2", fidelity_samples=6, **common))
    assert told == [3, 6]  # the data's 3 samples (of the default 4); 6 random ones
