"""Shared fixtures: zoo models written once per test session (catalogue in tests/zoo_models.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
# No shared ssh connection (deployopt.remote.SHARED) unless a test turns it on: the stand-in ssh and
# scp read a fixed number of leading options, and tests count the connections and their arguments.
os.environ["DEPLOYOPT_SSH_SHARE"] = "0"

from zoo_models import MODELS

_cache: dict[str, onnx.ModelProto] = {}


def get_zoo_model(name: str) -> onnx.ModelProto:
    """The catalogue's model `name`, built once per process (treat it as read-only)."""
    if name not in MODELS:
        raise KeyError(f"no zoo model {name!r}; known: {', '.join(sorted(MODELS))}")
    if name not in _cache:
        _cache[name] = MODELS[name]()
    return _cache[name]


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.fixture(scope="session")
def zoo_model_path(zoo_dir: Path) -> Callable[[str], Path]:
    """`zoo_model_path("resnet56_pruned")` -> Path of that model saved as .onnx (written once)."""

    def get(name: str) -> Path:
        path = zoo_dir / f"{name}.onnx"
        if not path.exists():
            onnx.save(get_zoo_model(name), str(path))
        return path

    return get


@pytest.fixture(scope="session")
def zoo_model() -> Callable[[str], onnx.ModelProto]:
    """`zoo_model("se_net")` -> a fresh copy of that ModelProto (safe to mutate)."""

    def get(name: str) -> onnx.ModelProto:
        copy = onnx.ModelProto()
        copy.CopyFrom(get_zoo_model(name))
        return copy

    return get


@pytest.fixture(scope="session")
def mobilenetv2_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MobileNetV2 with its real ImageNet weights, exported to ONNX once (needs torch + the weights)."""
    pytest.importorskip("torch")
    from deployopt.zoo.mobilenetv2 import export_mobilenetv2

    return export_mobilenetv2(tmp_path_factory.mktemp("mobilenetv2") / "mobilenetv2.onnx")


@pytest.fixture(scope="session")
def imagenet_images() -> list[tuple[Path, int]]:
    """foolbox's 20 labelled ImageNet photos as (path, label) in file-name order, the label from the
    name (imagenet_<i>_<label>.jpg); found without importing foolbox, which pulls eagerpy."""
    spec = importlib.util.find_spec("foolbox")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("foolbox (its data/ folder holds the labelled ImageNet images) is not installed")
    files = sorted((Path(next(iter(spec.submodule_search_locations))) / "data").glob("imagenet_*.jpg"))
    return [(f, int(f.stem.rsplit("_", 1)[1])) for f in files]


@pytest.fixture(scope="session")
def yolo_detect(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """(path, traced input) of the YOLOv8-style detector with ultralytics' Detect head, exported once."""
    pytest.importorskip("torch")
    from deployopt.zoo.yolo import export_yolo_like

    path = tmp_path_factory.mktemp("yolo_detect") / "yolo_detect.onnx"
    return path, export_yolo_like(path, head="detect")


@pytest.fixture
def board_processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts on the stand-in board (tests/test_tensorrt_remote.py), killed at its
    end whatever happened."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.fixture(autouse=True)
def _no_progress_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command whose stderr is not a terminal prints `progress:` lines of a task that runs past
    deployopt.cli.progress.PROGRESS_INTERVAL_S (30 s): a measured run on a loaded 2-core CI host
    can, and a test of its exact stderr would fail now and then. Off here; tests/test_cli_progress.py
    sets the interval it tests."""
    import deployopt.cli.progress

    monkeypatch.setattr(deployopt.cli.progress, "PROGRESS_INTERVAL_S", 1e6)  # a Timer takes no inf


@pytest.fixture(autouse=True)
def _pinned_sweep_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """A calibrate's or staircase's conv folder on the board is named at random
    (deployopt.remote.sweep_token); pinned to ssh_fake.SWEEP_TOKEN so that tests can name it."""
    from ssh_fake import SWEEP_TOKEN

    import deployopt.remote

    monkeypatch.setattr(deployopt.remote, "sweep_token", lambda: SWEEP_TOKEN)


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each onnxruntime session was built from, in order (bytes, a path): a spy on
    onnxruntime.InferenceSession, for the tests of how a model is handed over."""
    import onnxruntime

    given: list[Any] = []
    real = onnxruntime.InferenceSession

    def spy(source: Any, *a: Any, **kw: Any) -> Any:
        given.append(source)
        return real(source, *a, **kw)

    monkeypatch.setattr(onnxruntime, "InferenceSession", spy)
    return given


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every matplotlib Figure saved, in order (its texts and artists read after the file is
    written): a spy on Figure.savefig, for the tests of what the pictures show."""
    from matplotlib.figure import Figure

    saved: list[Any] = []
    savefig = Figure.savefig

    def spy(self: Any, *args: Any, **kw: Any) -> Any:
        saved.append(self)
        return savefig(self, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", spy)
    return saved
