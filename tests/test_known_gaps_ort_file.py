"""A big model in memory goes to onnxruntime as a file, not as bytes, where the caller keeps it.

onnxruntime's Python InferenceSession keeps the bytes it is built from for as long as it lives.
`bench --backend ort` already handed a model over RELEASE_BYTES over as a temporary file (and
dropped its weights); optimize's fidelity reference (one session for the whole run, the model kept
for every candidate built from it) and `profile --backend ort` (the model kept to map the layers)
still gave the serialized model, so its weights were held once more for the session's life.
RELEASE_BYTES is set small here, so the test models count as big.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import onnxruntime
import pytest
from cli_runner import run_cli

import deployopt.fidelity as fidelity
import deployopt.onnxruntime_compat
from deployopt.optimize import OptimizeConfig, optimize


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deployopt.onnxruntime_compat, "RELEASE_BYTES", 1000)


def test_optimizes_fidelity_reference_gets_a_file_and_the_model_keeps_its_weights(
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    sessions: list[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _small_threshold(monkeypatch)
    by_role: list[tuple[str, Any, Any]] = []  # (role, what fidelity was given, what onnxruntime got)
    made = fidelity._session

    def session(model: Any, role: str, **kw: Any) -> Any:
        before = len(sessions)
        sess = made(model, role, **kw)
        by_role.append((role, model, sessions[before] if len(sessions) > before else None))
        return sess

    monkeypatch.setattr(fidelity, "_session", session)
    src = zoo_model_path("mobilenet_like")
    out = tmp_path / "out"
    res = optimize(
        OptimizeConfig(
            model_path=src, outdir=out, target="h200", sms=8, backend="model", plots=False,
            fidelity_samples=2, max_evals=6,
        )
    )  # fmt: skip
    refs = [(m, s) for role, m, s in by_role if role == "reference"]
    assert refs, by_role
    for model, source in refs:
        assert isinstance(model, onnx.ModelProto)  # optimize's input, in memory
        # a temporary model file, gone once the session holds it; not the serialized bytes
        assert isinstance(source, str) and not isinstance(source, bytes), type(source)
        assert Path(source).name == "model.onnx" and not Path(source).exists()
        # and optimize's model kept its weights: every candidate is built from it
        assert len(model.graph.initializer) > 0
    report = json.loads((out / "report.json").read_text())
    assert report["fidelity"]["passed"] is True and report["fidelity"]["samples"] == 2
    written = onnx.load(str(out / "model.onnx"))
    assert len(written.graph.initializer) == len(onnx.load(str(src)).graph.initializer)
    assert res.best_plan  # the run finished with an answer


def _profile(monkeypatch: pytest.MonkeyPatch, capsys: Any, path: Path) -> dict[str, Any]:
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "profile",
        str(path),
        "--backend",
        "ort",
        "--runs",
        "2",
        "--warmup",
        "1",
        "--json",
    )
    assert code == 0, err
    return json.loads(out)


def test_profile_ort_gives_onnxruntime_a_file_above_the_threshold_and_maps_the_same_layers(
    zoo_model_path: Callable[[str], Path],
    sessions: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    path = zoo_model_path("resnet_projection")
    small = _profile(monkeypatch, capsys, path)  # below the threshold: bytes, as before
    assert sessions and all(isinstance(s, bytes) for s in sessions), [type(s) for s in sessions]
    sessions.clear()
    _small_threshold(monkeypatch)
    big = _profile(monkeypatch, capsys, path)
    assert sessions and all(isinstance(s, str) for s in sessions), [type(s) for s in sessions]
    assert all(s != str(path) and not Path(s).exists() for s in sessions)  # a temporary copy, gone
    # the same graph profiled, mapped to the same ONNX nodes (the model kept its weights for that)
    assert small["layers"] and small["onnx_nodes_mapped_by"] == "optimized graph"
    assert [layer["name"] for layer in big["layers"]] == [layer["name"] for layer in small["layers"]]
    for key in ("onnx_nodes_mapped_by", "onnx_nodes_removed", "onnx_nodes_unmapped"):
        assert big[key] == small[key], key


def test_as_file_keeps_the_callers_weights_and_a_full_tmpdir_falls_back_to_bytes(
    zoo_model: Callable[[str], onnx.ModelProto], sessions: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    import deployopt.model
    from deployopt.onnxruntime_compat import inference_session

    _small_threshold(monkeypatch)
    model = zoo_model("resnet_projection")
    inits = len(model.graph.initializer)
    opts = onnxruntime.SessionOptions()
    sess = inference_session(onnxruntime, model, opts, ["CPUExecutionProvider"], as_file=True)
    assert isinstance(sessions[-1], str) and len(model.graph.initializer) == inits
    name = sess.get_inputs()[0].name
    shape = [d if isinstance(d, int) else 1 for d in sess.get_inputs()[0].shape]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ref = onnxruntime.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, {name: x})[0], ref.run(None, {name: x})[0])

    # TMPDIR full: the bytes, as a smaller model goes, not a failure the model is not to blame for
    def full(*a: Any, **kw: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(deployopt.model, "_save_with_external_data", full)
    sessions.clear()
    again = inference_session(onnxruntime, model, opts, ["CPUExecutionProvider"], as_file=True)
    assert [type(s) for s in sessions] == [bytes] and len(model.graph.initializer) == inits
    np.testing.assert_array_equal(again.run(None, {name: x})[0], ref.run(None, {name: x})[0])
