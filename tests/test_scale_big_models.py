"""Models past protobuf's 2 GiB (weights in external data), without writing 2 GiB: every 2 GiB
constant is lowered to a few kB, so a 30 kB model stands in for a 2.3 GB one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

import deployopt.model
import deployopt.onnx_proto
import deployopt.onnxruntime_compat
import deployopt.surgery
from deployopt.coupling import analyze
from deployopt.errors import PlanError
from deployopt.model import load_model
from deployopt.surgery import apply_plan

LIMIT = 20_000  # bytes: the model's weights are 30 kB


def _external_model(folder: Path) -> Path:
    """Three 3×3 convs of 20 channels, every weight in `m.onnx.data` beside the model."""
    nodes, inits, x, cin = [], [], "x", 3
    for i in range(3):
        w = np.random.default_rng(i).standard_normal((20, cin, 3, 3)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1] * 4))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        x, cin = f"r{i}", 20
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 20, 8, 8])],
        inits,
    )
    path = folder / "m.onnx"
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.onnx.data",
        size_threshold=0,
    )
    assert (folder / "m.onnx.data").stat().st_size > LIMIT
    return path


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Protobuf's 2 GiB, as onnx's checker and deployopt count it, lowered to LIMIT bytes."""
    monkeypatch.setattr(onnx.checker, "MAXIMUM_PROTOBUF", LIMIT)
    monkeypatch.setattr(deployopt.model, "MAX_PROTO_BYTES", LIMIT)
    monkeypatch.setattr(deployopt.onnx_proto, "MAX_PROTO_BYTES", LIMIT)
    monkeypatch.setattr(deployopt.onnxruntime_compat, "_MAX_BYTES", LIMIT)


def test_a_model_over_2_gib_in_external_data_loads(tmp_path: Path, small_limit: None) -> None:
    # its weights read into memory make one message over the limit: the checker refused it as
    # "invalid ONNX model: This protobuf of onnx model is too large (>2GB)", though onnx's checker
    # by path and onnxruntime both take the file
    path = _external_model(tmp_path)
    loaded = load_model(path)
    assert [t.name for t in loaded.model.graph.initializer] == ["w0", "w1", "w2"]
    assert loaded.model.ByteSize() > LIMIT
    # a model held in one file is still checked whole (the checker's own refusal)
    inline = onnx.load(str(path))
    with pytest.raises(ValueError, match="too large"):
        deployopt.onnx_proto.check_skeleton(inline)
    deployopt.onnx_proto.check_skeleton(inline, external=True)


def test_analyze_bench_and_verify_read_it_and_onnxruntime_gets_a_path(
    tmp_path: Path, small_limit: None, sessions: list[Any], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    path = _external_model(tmp_path)
    code, out, err = run_cli(monkeypatch, capsys, "analyze", str(path))
    assert code == 0 and "invalid ONNX model" not in err and "conv1" in out, err
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", str(path), "--backend", "ort", "--runs", "2", "--warmup", "1"
    )
    assert code == 0, err
    code, out, err = run_cli(monkeypatch, capsys, "verify", str(path), str(path))
    assert code == 0 and "PASSED" in out, err
    # a model over the limit cannot go to onnxruntime as bytes (protobuf refuses to serialize it):
    # each session was given a model file, its weights beside it, gone once the session exists
    assert sessions and all(isinstance(s, str) for s in sessions), [type(s) for s in sessions]
    temporary = [s for s in sessions if s != str(path)]
    assert temporary and not any(Path(s).exists() for s in temporary)


def test_the_session_of_an_over_limit_model_computes_what_the_file_does(
    tmp_path: Path, small_limit: None, sessions: list[Any]
) -> None:
    from deployopt.onnxruntime_compat import inference_session

    path = _external_model(tmp_path)
    model = load_model(path).model
    opts = onnxruntime.SessionOptions()
    sess = inference_session(onnxruntime, model, opts, ["CPUExecutionProvider"])
    assert isinstance(sessions[-1], str) and sessions[-1].endswith("model.onnx")
    ref = inference_session(onnxruntime, str(path), opts, ["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0])


def _tiny() -> onnx.ModelProto:
    from test_coupling import tiny_mixed

    return tiny_mixed()


def test_the_2_gib_refusal_says_how_far_over(monkeypatch: pytest.MonkeyPatch) -> None:
    # a plan 2 kB over the limit said "about 2.0 GiB ..., over the 2 GiB"
    model = _tiny()
    limit = deployopt.surgery.PROTOBUF_LIMIT
    monkeypatch.setattr(deployopt.surgery, "_model_bytes", lambda m, a: limit - 100)
    with pytest.raises(PlanError) as err:
        apply_plan(model, {"conv1": 64})
    msg = str(err.value)
    assert re.search(
        r"^the edited model would be about 2\.00 GiB \(2,147,\d{3},\d{3} bytes\) counting", msg
    ), msg
    assert "over the 2 GiB one protobuf message can hold" in msg


def test_a_model_already_over_2_gib_is_refused_as_such_not_for_its_widths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # read from external data it loads, but no edit of it can be checked: "use smaller widths" was
    # no advice for a trim
    model = _tiny()
    monkeypatch.setattr(deployopt.surgery, "_model_bytes", lambda m, a: int(2.3 * (1 << 30)))
    free = analyze(model).free_groups()[0].id
    with pytest.raises(PlanError) as err:
        apply_plan(model, {free: 8})
    msg = str(err.value)
    assert msg.startswith("the model is about 2.3 GiB with its weights: an edited model must fit the 2 GiB")
    assert "use smaller widths" not in msg and "\n" not in msg


def test_bench_ort_hands_a_big_models_weights_to_onnxruntime_once(
    tmp_path: Path, sessions: list[Any], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # the session was built from model.SerializeToString() while the loaded model stayed alive: the
    # weights three times at once (a 753 MiB model peaked at 3.5 GB, onnxruntime alone at 1.4 GB)
    monkeypatch.setattr(deployopt.onnxruntime_compat, "RELEASE_BYTES", 1000, raising=False)
    path = tmp_path / "inline.onnx"
    onnx.save(onnx.load(str(_external_model(tmp_path))), str(path))  # weights inside the file
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(path), "--backend", "ort", "--runs", "2", "--warmup", "1"
    )
    assert code == 0, err
    assert sessions and all(isinstance(s, str) and s != str(path) for s in sessions), [
        type(s) for s in sessions
    ]
    assert not any(Path(s).exists() for s in sessions)  # the temporary copy is gone
    # a small model still goes as bytes (writing it out would cost more than it saves)
    monkeypatch.setattr(deployopt.onnxruntime_compat, "RELEASE_BYTES", 1 << 30)
    sessions.clear()
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(path), "--backend", "ort", "--runs", "2", "--warmup", "1"
    )
    assert code == 0 and sessions and all(isinstance(s, bytes) for s in sessions), err
