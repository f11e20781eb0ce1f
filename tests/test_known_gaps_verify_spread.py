"""`verify --count N` takes N samples at an even stride over data holding more, as optimize's
fidelity gate takes its own (fidelity.load_calibration(spread=True)): it took the first N, and of
a class-per-folder set (ImageNet's val/) that was its first class alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper

import deployopt.cli.verify_cmd as verify_cmd
import deployopt.fidelity as fidelity
from deployopt.fidelity import spread_indices

ROOT = Path(__file__).resolve().parents[1]
CIFAR = ROOT / "calibration_data" / "cifar10"
RESNET = ROOT / "examples" / "resnet56_pruned_cifar.onnx"


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, np.ndarray]]]:
    """The samples each verify compared the models on."""
    seen: list[list[dict[str, np.ndarray]]] = []
    real = verify_cmd.verify_models

    def spy(reference: Any, candidate: Any, calib: Any, *a: Any, **kw: Any) -> Any:
        seen.append([dict(s) for s in calib.samples])
        return real(reference, candidate, calib, *a, **kw)

    monkeypatch.setattr(verify_cmd, "verify_models", spy)
    return seen


def _scale_model(path: Path) -> Path:
    """y = 2·x on a 1×1×2×2 input: a sample is known by its values."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"], name="scale")],
        "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 2])],
        [two],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_verify_count_takes_array_samples_at_an_even_stride(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, compared: list[Any]
) -> None:
    model = _scale_model(tmp_path / "scale.onnx")
    data = tmp_path / "data"
    data.mkdir()
    for i in range(8):  # sample i holds the value i + 1 throughout, one file each, in order
        np.save(data / f"s{i:02d}.npy", np.full((1, 1, 2, 2), i + 1, np.float32))
    args = ["verify", str(model), str(model), "--calibration-data", str(data), "--count", "3"]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    ((used),) = compared
    values = [float(s["x"].flat[0]) for s in used]
    want = [i + 1.0 for i in spread_indices(8, 3)]  # [1, 3, 6]
    assert values == want and values != [1.0, 2.0, 3.0], values
    report = json.loads(out)
    assert report["samples"] == 3
    assert report["samples_chosen"] == "3 of the data's 8 samples, at an even stride in file order"
    assert report["per_output"][0]["max_abs_reference"] == 2 * max(want)  # the outputs of those samples
    # the console says which, as report.md says the gate's
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert f"inputs: {data} (3 of the data's 8 samples, at an even stride in file order)" in out, out
    # data holding no more than --count: all of it, in order, and nothing said about a choice
    compared.clear()
    code, out, err = run_cli(monkeypatch, capsys, *args[:-1], "8", "--json")
    assert code == 0, err
    assert [float(s["x"].flat[0]) for s in compared[0]] == [i + 1.0 for i in range(8)]
    assert json.loads(out)["samples_chosen"] is None


def test_verify_count_of_a_class_per_folder_set_is_not_its_first_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, compared: list[Any]
) -> None:
    data = tmp_path / "val"
    for png in sorted(CIFAR.glob("*.png")):  # cifar10_<index>_<label>.png → val/<label>/
        label = png.stem.rsplit("_", 1)[1]
        (data / label).mkdir(parents=True, exist_ok=True)
        shutil.copy(png, data / label / png.name)
    files = sorted(p.relative_to(data).as_posix() for p in data.rglob("*.png"))
    assert len(files) == 20
    read: list[str] = []
    real = fidelity.preprocess_image

    def spy(path: Any, *a: Any, **kw: Any) -> Any:
        read.append(Path(path).relative_to(data).as_posix())
        return real(path, *a, **kw)

    monkeypatch.setattr(fidelity, "preprocess_image", spy)
    code, out, err = run_cli(
        monkeypatch, capsys, "verify", str(RESNET), str(RESNET), "--calibration-data", str(data),
        "--count", "4", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert read == [files[i] for i in spread_indices(20, 4)], read
    classes = {f.split("/")[0] for f in read}
    first = {f.split("/")[0] for f in files[:4]}
    assert len(classes) > len(first), (classes, first)  # more classes than the first 4 files hold
    assert len(compared[0]) == 4
    report = json.loads(out)
    assert report["samples_chosen"] == "4 of the data's 20 images, at an even stride over its sorted files"
