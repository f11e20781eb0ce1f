"""optimize records the hashes of the model bytes it loaded (bug bash, concurrency: it hashed the
file again after loading it, so a model re-exported in place meanwhile had its hash recorded for a
run of the old file, and a --resume with the new file replayed the old one's timings)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from optimize_runner import run_model

import deployopt.backends.ort as ort_backend
from deployopt.errors import DeployoptError


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def start_config(outdir: Path) -> dict:
    first = json.loads((outdir / "journal.jsonl").read_text().splitlines()[0])
    return first["config"]


@pytest.fixture
def two_models(zoo_model: Callable[[str], onnx.ModelProto], tmp_path: Path) -> tuple[Path, Path, Path]:
    m, v1, v2 = tmp_path / "m.onnx", tmp_path / "v1.onnx", tmp_path / "v2.onnx"
    onnx.save(zoo_model("resnet_projection"), v1)
    onnx.save(zoo_model("vgg16_pruned_b4"), v2)  # the "new export"
    shutil.copy(v1, m)
    return m, v1, v2


def swapping_load(monkeypatch: pytest.MonkeyPatch, src: Path, dest: Path, after: bool) -> None:
    """prepare_model that puts `src` in place of `dest` (a re-export by rename) just before or after
    it reads the model."""
    real = ort_backend.prepare_model

    def load(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not after:
            shutil.copy(src, dest.with_suffix(".tmp"))
            dest.with_suffix(".tmp").replace(dest)
        loaded = real(*args, **kwargs)
        if after:
            shutil.copy(src, dest.with_suffix(".tmp"))
            dest.with_suffix(".tmp").replace(dest)
        return loaded

    monkeypatch.setattr(ort_backend, "prepare_model", load)


def test_the_recorded_hash_is_of_the_model_loaded(
    two_models: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    m, v1, _ = two_models
    run_model(m, tmp_path / "o", max_evals=2, fidelity=False)
    assert start_config(tmp_path / "o")["model_sha256"] == sha(v1)


@pytest.mark.parametrize("after", [True, False], ids=["after-load", "before-load"])
def test_a_model_replaced_while_it_is_read_is_not_recorded_as_the_one_optimized(
    two_models: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: bool
) -> None:
    m, v1, v2 = two_models
    swapping_load(monkeypatch, v2, m, after=after)
    try:
        run_model(m, tmp_path / "o", max_evals=2, fidelity=False)
    except DeployoptError as exc:
        assert "changed while it was being read" in str(exc) and "\n" not in str(exc)
        assert not (tmp_path / "o" / "journal.jsonl").exists()
        return
    # (HEAD) it ran: the hash it recorded must be the one of the model it optimized
    optimized = v2 if not after else v1
    assert start_config(tmp_path / "o")["model_sha256"] == sha(optimized)
    assert after is False  # a swap after the load recorded the new file's hash for the old model


def test_external_weights_replaced_after_the_load_are_refused(
    zoo_model: Callable[[str], onnx.ModelProto], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = tmp_path / "m.onnx"
    onnx.save(zoo_model("resnet_projection"), m, save_as_external_data=True, location="m.onnx.data")
    other = tmp_path / "other"
    other.mkdir()
    model = onnx.load(str(m))
    for t in model.graph.initializer:  # other weights, same graph
        if t.data_type == onnx.TensorProto.FLOAT:
            arr = onnx.numpy_helper.to_array(t) * 2
            t.CopyFrom(onnx.numpy_helper.from_array(arr, t.name))
    onnx.save(model, other / "m.onnx", save_as_external_data=True, location="m.onnx.data")
    swapping_load(monkeypatch, other / "m.onnx.data", m.with_name("m.onnx.data"), after=True)
    with pytest.raises(DeployoptError, match="changed while it was being read"):
        run_model(m, tmp_path / "o", max_evals=2, fidelity=False)
