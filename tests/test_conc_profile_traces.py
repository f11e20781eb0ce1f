"""profile --trace-dir lists only the trace this run kept, under a name of its own (bug bash,
concurrency: a run listed another run's trace, written into the same folder meanwhile, as its own,
and same-named models, or one model at two batches, replaced each other's trace)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_runner import run_cli

import deployopt.backends.ort as ort_backend


def profile(monkeypatch, capsys, model: Path, traces: Path, *more: str) -> list[str]:  # type: ignore[no-untyped-def]
    args = ["profile", str(model), "-b", "ort", "--runs", "2", "--warmup", "0", "--trace-dir", str(traces)]
    code, out, err = run_cli(monkeypatch, capsys, *args, *more, "--json")
    assert code == 0, err
    return json.loads(out)["trace"]


def test_same_named_models_and_batches_keep_a_trace_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    zoo_model_path: Callable[[str], Path],
) -> None:  # fmt: skip
    traces = tmp_path / "tr"
    x, y = tmp_path / "x" / "model.onnx", tmp_path / "y" / "model.onnx"
    for path, name in ((x, "resnet_projection"), (y, "se_net")):
        path.parent.mkdir()
        shutil.copy(zoo_model_path(name), path)
    kept = [profile(monkeypatch, capsys, x, traces), profile(monkeypatch, capsys, y, traces)]
    kept.append(profile(monkeypatch, capsys, x, traces, "--batch", "2"))
    assert all(len(k) == 1 for k in kept)
    names = [k[0] for k in kept]
    assert len(set(names)) == 3  # none replaced another
    assert sorted(str(p) for p in traces.iterdir()) == sorted(names)
    assert all(Path(n).name.startswith("model.") and n.endswith(".ort_profile.json") for n in names)


def test_a_trace_another_run_writes_meanwhile_is_not_listed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    zoo_model_path: Callable[[str], Path],
) -> None:  # fmt: skip
    traces = tmp_path / "tr"
    real = ort_backend.OrtSession.profile

    def with_a_neighbour(self, model_path, kernels=False):  # type: ignore[no-untyped-def]
        result = real(self, model_path, kernels)
        (traces / "b.ort_profile.json").write_text("[]")  # a concurrent run's, into the same DIR
        return result

    monkeypatch.setattr(ort_backend.OrtSession, "profile", with_a_neighbour)
    (trace,) = profile(monkeypatch, capsys, zoo_model_path("resnet_projection"), traces)
    assert Path(trace).name.startswith("resnet_projection.") and Path(trace).is_file()


def test_run_unique_path_takes_no_existing_name(tmp_path: Path) -> None:
    from deployopt.fileio import run_unique_path

    first = run_unique_path(tmp_path, "m", ".json")
    first.write_text("{}")
    second = run_unique_path(tmp_path, "m", ".json")
    assert second != first and second.name.startswith(first.name.removesuffix(".json"))
