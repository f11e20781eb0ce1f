"""Segmentation heads that upsample to the input's size (`F.interpolate(y, size=x.shape[-2:])`, as
torchvision's fcn_*, deeplabv3_* and lraspp_* do) keep the dynamic batch, height and width the file
had: loading folds their Resize `sizes` to [1, C, H, W], and the written model computes them from
the shapes again (deployopt.batch, deployopt.dynamic_dims). A Resize to a fixed size stays fixed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import ort_session
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt.batch import restore_dynamic_batch
from deployopt.coupling import analyze
from deployopt.model import load_model


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _export(tmp_path: Path, *, dims: str, opset: int, dynamo: bool = False, target: Any = None) -> Path:
    """An FCN-like net (a stride-4 backbone, a head of 7 classes upsampled bilinearly, an aux
    output at 1/4 size) exported with `dims` dynamic: "batch" or "batch_hw". `target`: upsample to
    that fixed size, not the input's."""
    torch = pytest.importorskip("torch")
    nn, functional = torch.nn, torch.nn.functional

    def cbr(i: int, o: int, s: int = 1) -> Any:
        return nn.Sequential(nn.Conv2d(i, o, 3, s, 1), nn.ReLU())

    class FCN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b1, self.b2, self.b3 = cbr(3, 19, 2), cbr(19, 37, 2), cbr(37, 61)
            self.head = nn.Sequential(cbr(61, 33), nn.Conv2d(33, 7, 1))
            self.aux = nn.Conv2d(37, 7, 1)

        def forward(self, x: Any) -> Any:
            f1 = self.b2(self.b1(x))
            y = self.head(self.b3(f1))
            size = target or x.shape[-2:]
            return functional.interpolate(y, size=size, mode="bilinear", align_corners=False), self.aux(f1)

    torch.manual_seed(0)
    hw = dims == "batch_hw"
    axes = {0: "batch", 2: "h", 3: "w"} if hw else {0: "batch"}
    out_axes = {0: "batch"} if target or not hw else axes
    aux_axes = {0: "batch", 2: "h4", 3: "w4"} if hw else {0: "batch"}
    path = tmp_path / f"fcn_{dims}_{opset}_{int(dynamo)}.onnx"
    kwargs: dict[str, Any] = {"dynamo": dynamo}
    if not dynamo:
        kwargs["opset_version"] = opset
    try:
        torch.onnx.export(
            FCN().eval(), (torch.randn(1, 3, 64, 64),), str(path), input_names=["images"],
            output_names=["out", "aux"], dynamic_axes={"images": axes, "out": out_axes, "aux": aux_axes},
            **kwargs,
        )  # fmt: skip
    except Exception as exc:  # torch.export's own error types
        if dynamo:
            pytest.skip(f"torch.export cannot export the net here: {str(exc).splitlines()[0]}")
        raise
    return path


def _apply_padded(src: Path, tmp_path: Path, capsys: Any, monkeypatch: Any) -> tuple[Path, str]:
    """`deployopt apply` with every free channel group padded by 5, at --input-shape 1x3x64x64;
    the written model and its notices (unwrapped)."""
    free = analyze(load_model(src, {"images": [1, 3, 64, 64]}).model).free_groups()
    assert free
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {g.id: g.width + 5 for g in free}}))
    out = tmp_path / "out.onnx"
    args = ["apply", str(src), "--plan", str(plan), "-o", str(out), "--input-shape", "images:1x3x64x64"]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    return out, " ".join(err.split())


def _run(path: Path, x: np.ndarray) -> list[np.ndarray]:
    return ort_session.cpu_session(onnx.load(str(path))).run(None, {"images": x})


def _dims(vi: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


def _same_as_file(src: Path, out: Path, shapes: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(0)
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        want, got = _run(src, x), _run(out, x)
        assert [g.shape for g in got] == [w.shape for w in want], shape
        for g, w in zip(got, want):
            assert np.allclose(g, w, rtol=1e-5, atol=1e-5), (shape, float(np.max(np.abs(g - w))))


@pytest.mark.parametrize(
    ("opset", "dynamo"), [(13, False), (17, False), pytest.param(18, True, marks=pytest.mark.slow)]
)
def test_an_upsample_to_the_input_size_keeps_batch_height_and_width(
    opset: int, dynamo: bool, tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    src = _export(tmp_path, dims="batch_hw", opset=opset, dynamo=dynamo)
    out, said = _apply_padded(src, tmp_path, capsys, monkeypatch)
    assert "written with the input's dynamic batch ('batch'), checked at batch 1 and 2" in said
    assert "written with the input's dynamic height, width ('h', 'w'), checked at 64×64 and 128×128" in said
    assert "runs at that size only" not in said and "static batch" not in said
    written = onnx.load(str(out))
    onnx.checker.check_model(written, full_check=True)
    assert _dims(written.graph.input[0]) == ["batch", 3, "h", "w"]
    assert [_dims(o)[0] for o in written.graph.output] == ["batch", "batch"]
    _same_as_file(src, out, [(1, 3, 64, 64), (4, 3, 64, 64), (2, 3, 96, 128), (1, 3, 40, 72)])


@pytest.mark.parametrize("opset", [13, 17])
def test_an_upsample_to_the_input_size_keeps_a_dynamic_batch(
    opset: int, tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """The repro: the file leaves only the batch dynamic; both outputs (the aux one has no Resize)
    were written at batch 1, even for a lossless padding."""
    src = _export(tmp_path, dims="batch", opset=opset)
    out, said = _apply_padded(src, tmp_path, capsys, monkeypatch)
    assert "written with the input's dynamic batch ('batch'), checked at batch 1 and 2" in said
    written = onnx.load(str(out))
    assert _dims(written.graph.input[0]) == ["batch", 3, 64, 64]
    assert [_dims(o) for o in written.graph.output] == [["batch", 7, 64, 64], ["batch", 7, 16, 16]]
    _same_as_file(src, out, [(1, 3, 64, 64), (4, 3, 64, 64)])


def test_an_upsample_to_a_fixed_size_stays_fixed(tmp_path: Path, capsys: Any, monkeypatch: Any) -> None:
    """`size=(64, 64)` on a net loaded at 64×64: the same numbers as the input's size, but the file
    fixes them, so at 96×128 the written model still gives 64×64, as the file does."""
    src = _export(tmp_path, dims="batch_hw", opset=17, target=(64, 64))
    out, said = _apply_padded(src, tmp_path, capsys, monkeypatch)
    assert "written with the input's dynamic height, width ('h', 'w')" in said, said
    written = onnx.load(str(out))
    assert _dims(written.graph.input[0]) == ["batch", 3, "h", "w"]
    assert _dims(written.graph.output[0])[0] == "batch"  # the rest as the file declares them
    _same_as_file(src, out, [(1, 3, 64, 64), (3, 3, 96, 128)])
    x = np.zeros((3, 3, 96, 128), np.float32)
    assert _run(out, x)[0].shape == (3, 7, 64, 64)


def test_an_upsample_to_a_feature_maps_size_keeps_height_and_width(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """An FPN's top-down step (torchvision's FeaturePyramidNetwork): the coarse map upsampled to
    the finer one's size, `size=f.shape[-2:]`, then added to it; also at sizes that do not halve
    evenly (90×130: 45×65 and 23×33)."""
    torch = pytest.importorskip("torch")
    nn, functional = torch.nn, torch.nn.functional

    class FPN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 11, 3, 2, 1), nn.Conv2d(11, 23, 3, 2, 1)
            self.lat, self.out = nn.Conv2d(23, 11, 1), nn.Conv2d(11, 5, 3, 1, 1)

        def forward(self, x: Any) -> Any:
            f = torch.relu(self.c1(x))
            up = functional.interpolate(self.lat(torch.relu(self.c2(f))), size=f.shape[-2:], mode="nearest")
            return self.out(up + f)

    torch.manual_seed(0)
    src = tmp_path / "fpn.onnx"
    axes = {0: "batch", 2: "h", 3: "w"}
    torch.onnx.export(
        FPN().eval(), (torch.randn(1, 3, 64, 64),), str(src), input_names=["images"], output_names=["y"],
        opset_version=17, dynamo=False, dynamic_axes={"images": axes, "y": {0: "batch", 2: "h2", 3: "w2"}},
    )  # fmt: skip
    out, said = _apply_padded(src, tmp_path, capsys, monkeypatch)
    assert "written with the input's dynamic height, width ('h', 'w'), checked at 64×64 and 128×128" in said
    assert _dims(onnx.load(str(out)).graph.input[0]) == ["batch", 3, "h", "w"]
    _same_as_file(src, out, [(1, 3, 64, 64), (4, 3, 64, 64), (2, 3, 90, 130)])


def test_a_resize_that_was_rebuilt_is_not_named_as_the_likely_cause(tmp_path: Path) -> None:
    """A Resize to [N, C, 16, 16] from Shape, then x[:1] on the batch: the Resize now follows the
    batch, so the reason is the Slice's, and the Resize is no longer blamed for it."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal([4, 3, 3, 3]).astype(np.float32), "w"),
        *(
            numpy_helper.from_array(np.array([v], np.int64), n)
            for n, v in (("zero", 0), ("one", 1), ("two", 2))
        ),
        numpy_helper.from_array(np.array([16, 16], np.int64), "hw"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
            helper.make_node("Shape", ["c"], ["s"], name="shape"),
            helper.make_node("Slice", ["s", "zero", "two"], ["nc"], name="nc"),
            helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0, name="sizes"),
            helper.make_node("Resize", ["c", "", "", "sizes"], ["r"], mode="linear", name="up"),
            helper.make_node("Slice", ["r", "zero", "one", "zero"], ["y"], name="first"),
        ],
        "resize_then_first_sample",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 16, 16])],
        inits,
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    loaded = load_model(path)
    result = restore_dynamic_batch(loaded.model, loaded.dynamic_batch, loaded.static_batch)
    assert not result.restored and result.model is loaded.model
    assert result.notice == (
        "written with a static batch of 1: the input's dynamic batch could not be restored "
        "(output 'y' does not follow the batch)"
    )
