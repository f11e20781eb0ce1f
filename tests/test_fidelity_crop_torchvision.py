"""`--resize crop` is torchvision's ImageNet evaluation recipe, Resize(256) + CenterCrop(224), to the
pixel (fidelity.preprocess_image). It rounded the long side (a 1024×683 photo became 384×256,
torchvision's 383×256: 1.73 off after normalisation) and put odd margins' crop a pixel left of
torchvision's (686×512: left 59, not 60), though the docs said it was that recipe."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from deployopt.fidelity import IMAGENET_MEAN, IMAGENET_STD, preprocess_image

FOOLBOX_JPG = "imagenet_10_541.jpg"  # 1024×683, from foolbox's sample images


def _torchvision(path: Path, size: int) -> np.ndarray:
    """torchvision's own pipeline: PIL loader, Resize(round(size / 0.875)), CenterCrop, ToTensor,
    Normalize."""
    transforms = pytest.importorskip("torchvision.transforms")
    recipe = transforms.Compose(
        [
            transforms.Resize(round(size / 0.875)),
            transforms.CenterCrop(size),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    with Image.open(path) as img:
        return recipe(img.convert("RGB")).numpy()


@pytest.mark.parametrize("size", [224, 32])
@pytest.mark.parametrize("wh", [(1024, 683), (640, 427), (686, 512), (500, 375), (683, 1024), (37, 50)])
def test_crop_is_torchvision_resize_and_center_crop(tmp_path: Path, wh: tuple[int, int], size: int) -> None:
    rng = np.random.default_rng(wh[0] * 7 + wh[1])
    path = tmp_path / f"{wh[0]}x{wh[1]}.png"
    Image.fromarray(rng.integers(0, 256, (wh[1], wh[0], 3), dtype=np.uint8)).save(path)
    ours = preprocess_image(path, (size, size), resize="crop")
    np.testing.assert_allclose(ours, _torchvision(path, size), rtol=0, atol=1e-5)


def test_crop_of_a_foolbox_photo_is_torchvision_s() -> None:
    """The bug bash's photo (JPEG, 1024×683), where the rounded long side showed."""
    spec = importlib.util.find_spec("foolbox")  # found, not imported: it needs eagerpy
    path = Path(spec.origin).parent / "data" / FOOLBOX_JPG if spec and spec.origin else None
    if path is None or not path.is_file():
        pytest.skip(f"no foolbox with {FOOLBOX_JPG} installed")
    ours = preprocess_image(path, (224, 224), resize="crop")
    np.testing.assert_allclose(ours, _torchvision(path, 224), rtol=0, atol=1e-5)


def test_a_non_square_input_covers_it_with_one_factor(tmp_path: Path) -> None:
    """H ≠ W: the axis needing the larger factor becomes its H/0.875 or W/0.875 exactly, the other
    is truncated as torchvision truncates the long side, and the centre is cut as its CenterCrop."""
    transforms = pytest.importorskip("torchvision.transforms")
    rng = np.random.default_rng(3)
    path = tmp_path / "wide.png"
    Image.fromarray(rng.integers(0, 256, (300, 500, 3), dtype=np.uint8)).save(path)  # 500×300
    ours = preprocess_image(path, (64, 160), resize="crop", mean=(0,), std=(1,))
    # 160 / 0.875 → 183 wide needs the larger factor (183/500 > 73/300): 183 × int(183·300/500) = 109
    with Image.open(path) as img:
        resized = transforms.functional.resize(img.convert("RGB"), [109, 183])
        want = transforms.functional.to_tensor(transforms.functional.center_crop(resized, [64, 160]))
    np.testing.assert_allclose(ours, want.numpy(), rtol=0, atol=1e-6)
