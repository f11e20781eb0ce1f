"""`--batch N` on a model whose file fixes its batch: the same on every backend. onnxruntime (and
torch, and the wave model) ran it rewritten to batch N without a word; TensorRT, trtexec and the
board's runner refused it ("has a fixed batch of 1; --batch 4 needs a model with a dynamic batch
dimension"). Now each runs a copy at batch N and says so once, or refuses a graph whose Reshapes
hard-code the batch in one and the same line."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper
from test_tensorrt_fake_api import V10, engine_blob, install, opts
from test_trtexec_backend import fake  # noqa: F401  (the stand-in trtexec binary, a fixture)

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.errors import DeployoptWarning, ModelError

NOTICE = (
    "{name}: input 'x' is fixed at batch 1 in the file; timed rewritten to --batch 4, at which its "
    "shapes check out (the file itself takes batch 1)"
)


def _fixed_batch_model(path: Path, flatten_batch: int) -> Path:
    """x [1, 3, 8, 8] → Conv 4 → Reshape [flatten_batch, 256] → MatMul → y [1, 5]: -1 follows any
    batch (torch's `x.view(-1, 256)`), 1 is the export's batch written in (`x.view(1, -1)`)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array([flatten_batch, 256], np.int64), "target"),
        numpy_helper.from_array(rng.standard_normal((256, 5)).astype(np.float32), "fc"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Reshape", ["c", "target"], ["f"]),
            helper.make_node("MatMul", ["f", "fc"], ["y"]),
        ],
        "fixed_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


@pytest.fixture
def models(tmp_path: Path) -> tuple[Path, Path]:
    """(a static batch-1 model that runs at batch 4, one whose Reshape hard-codes batch 1)."""
    return (
        _fixed_batch_model(tmp_path / "free.onnx", -1),
        _fixed_batch_model(tmp_path / "hardcoded.onnx", 1),
    )


def _refusal(hardcoded: Path) -> str:
    """The line every backend refuses the hard-coded batch with: onnxruntime's, which was its own."""
    with (
        pytest.raises(ModelError) as info,
        get_backend("ort").open(MeasureOptions(dtype="fp32", batch=4)) as s,
    ):
        s.measure(hardcoded)
    line = str(info.value)
    assert "Reshape" in line and "fixes its batch" in line and "\n" not in line
    return line


def test_ort_says_it_ran_a_fixed_batch_rewritten_once_a_session(
    models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """onnxruntime rewrote the batch without a word: a caller feeding the file batch 4 fails."""
    free, hardcoded = models
    out = tmp_path / "r.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(free), "--batch", "4", "--runs", "5", "--warmup", "1",
        "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    said = " ".join(err.split())
    assert said.count(f"warning: {NOTICE.format(name='free.onnx')}") == 1
    assert json.loads(out.read_text())["environment"]["input_shapes"] == {"x": [4, 3, 8, 8]}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with get_backend("ort").open(MeasureOptions(dtype="fp32", batch=4, runs=5, warmup=1)) as session:
            session.measure(free)
            session.profile(free)
    assert [str(w.message) for w in seen if issubclass(w.category, DeployoptWarning)] == [
        NOTICE.format(name="free.onnx")
    ]
    pytest.importorskip("onnx2torch")
    with warnings.catch_warnings(record=True) as seen:  # the torch worker rewrote it without a word
        warnings.simplefilter("always")
        with get_backend("torch").open(MeasureOptions(dtype="fp32", batch=4, runs=5, warmup=1)) as session:
            session.measure(free)
            session.measure(free)
    assert [str(w.message) for w in seen if issubclass(w.category, DeployoptWarning)] == [
        NOTICE.format(name="free.onnx")
    ]
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(hardcoded), "--batch", "4", "--runs", "5")
    assert code != 0 and " ".join(err.split()) == f"error: {_refusal(hardcoded)}"
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(free), "--batch", "1", "--runs", "5")
    assert code == 0 and "warning" not in err  # the file's own batch: nothing rewritten


def test_tensorrt_builds_a_copy_at_the_batch_asked(
    models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before with 'input 'x' has a fixed batch of 1; --batch 4 needs a model with a dynamic
    batch dimension'. The engine is built from a copy at batch 4 (the user's file untouched), said
    once a session; a graph that hard-codes its batch is onnxruntime's line, before any build."""
    _, gpu = install(monkeypatch, V10, "bindings")
    free, hardcoded = models
    before = free.read_bytes()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with get_backend("tensorrt").open(opts(tmp_path, batch=4)) as session:
            timings = [session.measure(free) for _ in range(2)]
    assert [str(w.message) for w in seen if issubclass(w.category, DeployoptWarning)] == [
        NOTICE.format(name="free.onnx")
    ]
    assert all(t.environment["input_shapes"] == {"x": [4, 3, 8, 8]} for t in timings)
    engine = engine_blob(Path(timings[0].environment["engine"]))
    assert [(n, s) for n, s, _ in engine["inputs"]] == [("x", [4, 3, 8, 8])]
    assert [(n, s) for n, s, _ in engine["outputs"]] == [("y", [4, 5])]
    assert free.read_bytes() == before
    builds = len([c for c in gpu.log if c[0] == "Builder.build_serialized_network"])
    with pytest.raises(ModelError) as info, get_backend("tensorrt").open(opts(tmp_path, batch=4)) as session:
        session.measure(hardcoded)
    assert str(info.value) == _refusal(hardcoded)
    assert len([c for c in gpu.log if c[0] == "Builder.build_serialized_network"]) == builds


def test_trtexec_builds_a_copy_at_the_batch_asked(
    fake: dict[str, Path],  # noqa: F811
    models: tuple[Path, Path],
) -> None:
    free, hardcoded = models
    options = MeasureOptions(dtype="fp16", runs=300, batch=4, workdir=fake["workdir"])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with get_backend("trtexec").open(options) as session:
            timing = session.measure(free)
    assert [str(w.message) for w in seen if issubclass(w.category, DeployoptWarning)] == [
        NOTICE.format(name="free.onnx")
    ]
    assert timing.environment["input_shapes"] == {"x": [4, 3, 8, 8]}
    args = fake["FAKE_ARGS"].read_text().split("\n")
    (built,) = [a.split("=", 1)[1] for a in args if a.startswith("--onnx=")]
    assert Path(built).name == "free.onnx" and Path(built) != free
    dims = [d.dim_value for d in onnx.load(built).graph.input[0].type.tensor_type.shape.dim]
    assert dims == [4, 3, 8, 8] and not any(a.startswith("--shapes") for a in args)
    with pytest.raises(ModelError) as info, get_backend("trtexec").open(options) as session:
        session.measure(hardcoded)
    assert str(info.value) == _refusal(hardcoded)


@pytest.mark.xdist_group("board")
def test_the_boards_runner_gets_a_copy_at_the_batch_asked(
    models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from test_tensorrt_remote import REMOTE, play_the_board

    _, home = play_the_board(tmp_path, monkeypatch)
    free, hardcoded = models
    out = tmp_path / "r.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(free), *REMOTE, "--batch", "4", "--dtype", "fp16",
        "--runs", "6", "--warmup", "2", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert f"warning: {NOTICE.format(name='free.onnx')}" in " ".join(err.split())
    sent = list((home / "deployopt-runner").glob("free-*/free.onnx"))
    assert len(sent) == 1
    assert [d.dim_value for d in onnx.load(str(sent[0])).graph.input[0].type.tensor_type.shape.dim] == [
        4,
        3,
        8,
        8,
    ]
    assert json.loads(out.read_text())["environment"]["input_shapes"] == {"x": [4, 3, 8, 8]}
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(hardcoded), *REMOTE, "--batch", "4", "--runs", "6"
    )
    assert code != 0 and " ".join(err.split()) == f"error: {_refusal(hardcoded)}"
    assert not list((home / "deployopt-runner").glob("hardcoded-*"))  # nothing went to the board
