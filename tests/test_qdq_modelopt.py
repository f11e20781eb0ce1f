"""INT8 QDQ models as NVIDIA Model Optimizer writes them for TensorRT (recorded files, see
tests/data/make_modelopt_fixtures.py): as free as their float twins, padded bit for bit.

Model Optimizer's output differs from onnxruntime's quantize_static (tests/test_coupling_qdq.py):
opset 19, fp16 weights quantized at run time by a per-channel QuantizeLinear (no int8
initializers), a Cast to fp16 after the input and back to fp32 before the output, BatchNorms left
in place, and Q/DQ placed for TensorRT's fusions (one input of a residual Add quantized, the other
not).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ort_session import LEVELS, cpu_session
from zoo_models import MODELOPT_FLOAT_TWINS

from deployopt.coupling import Analysis, analyze
from deployopt.model import load_model
from deployopt.surgery import apply_plan

DATA = Path(__file__).resolve().parent / "data"
NAMES = sorted(MODELOPT_FLOAT_TWINS)


def _run(model: onnx.ModelProto, level: ort.GraphOptimizationLevel, x: np.ndarray) -> np.ndarray:
    sess = cpu_session(model, level)
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _input(model: onnx.ModelProto, seed: int = 1) -> np.ndarray:
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(seed).standard_normal(dims).astype(np.float32)


def _producer_sets(analysis: Analysis) -> set[frozenset[str]]:
    return {frozenset(g.producers) for g in analysis.free_groups()}


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.fixture(scope="module", params=NAMES)
def recorded(request: pytest.FixtureRequest) -> tuple[str, onnx.ModelProto, Analysis]:
    name = request.param
    path = DATA / f"modelopt_int8_{name}.onnx"
    loaded = load_model(path)
    qdq = ("QuantizeLinear", "DequantizeLinear")
    kept = Counter(n.op_type for n in loaded.model.graph.node if n.op_type in qdq)
    assert kept == Counter(n.op_type for n in onnx.load(path).graph.node if n.op_type in qdq)  # none folded
    return name, loaded.model, analyze(loaded.model)


def test_recorded_files_are_model_optimizer_int8() -> None:
    """The fixtures are what the docstring says, so the tests below test that form."""
    for name in NAMES:
        model = onnx.load(DATA / f"modelopt_int8_{name}.onnx")
        ops = Counter(n.op_type for n in model.graph.node)
        assert ops["QuantizeLinear"] == ops["DequantizeLinear"] > ops["Conv"] > 0, name
        assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 19
        weights = [
            n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0].endswith("weight")
        ]
        assert weights and all(onnx.helper.get_attribute_value(n.attribute[0]) == 0 for n in weights)
        inits = _inits(model)
        assert inits[weights[0].input[0]].dtype == np.float16  # fp16 weights, quantized at run time
        assert ops["Cast"] == 2


def test_as_free_as_the_float_twin(recorded: tuple[str, onnx.ModelProto, Analysis], tmp_path: Path) -> None:
    name, _, analysis = recorded
    if name.startswith("yolo"):
        pytest.importorskip("torch")
    onnx.save(MODELOPT_FLOAT_TWINS[name](), tmp_path / "float.onnx")
    float_analysis = analyze(load_model(tmp_path / "float.onnx").model)
    assert analysis.free_groups(), name
    assert _producer_sets(analysis) == _producer_sets(float_analysis)
    frozen = sorted(g.reason for g in analysis.groups if g.frozen)
    assert frozen == sorted(g.reason for g in float_analysis.groups if g.frozen)


def test_pad_is_exact_and_pads_back(recorded: tuple[str, onnx.ModelProto, Analysis]) -> None:
    name, model, analysis = recorded
    free = analysis.free_groups()
    padded = apply_plan(model, {g.id: g.width + 3 + i % 5 for i, g in enumerate(free)}, analysis)
    onnx.checker.check_model(padded, full_check=True)
    # ORT maps a padded 0/0 to 0 whatever the scale; TensorRT refuses a scale that is not > 0 and a
    # zero point that is not 0, so check what the engine builder will read
    inits = _inits(padded)
    for node in (n for n in padded.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")):
        assert (inits[node.input[1]] > 0).all(), node.name
        assert len(node.input) < 3 or not inits[node.input[2]].any(), node.name
    x = _input(model)
    for level in LEVELS:
        got, want = _run(padded, level, x), _run(model, level, x)
        if any(n.op_type == "Concat" for n in model.graph.node):
            # zero channels inside a Concat change the order of the next conv's float sums (as in
            # the float twin); a wrong quantization step would be ~1e-2 here, not ~1e-6
            np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
    back = apply_plan(padded, {g.id: g.width for g in free}, analyze(padded))
    restored, old = _inits(back), _inits(model)
    assert restored.keys() == old.keys()
    assert all(np.array_equal(restored[k], v) and restored[k].dtype == v.dtype for k, v in old.items())


def test_trim_gives_a_valid_model(recorded: tuple[str, onnx.ModelProto, Analysis]) -> None:
    name, model, analysis = recorded
    trimmed = apply_plan(model, {g.id: max(1, g.width - 2) for g in analysis.free_groups()}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    x = _input(model)
    out = _run(trimmed, LEVELS[1], x)
    assert out.shape == _run(model, LEVELS[1], x).shape and np.isfinite(out).all(), name
