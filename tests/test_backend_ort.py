"""The onnxruntime backend: end-to-end timing, profiler parsing, mapping back to ONNX nodes, errors."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deployopt.backends import MeasureOptions, get_backend
from deployopt.backends.ort import (
    map_through_optimized_graph,
    map_to_onnx_nodes,
    node_durations,
    prepare_model,
    profile_layers,
)
from deployopt.errors import DeployoptError, ModelError
from deployopt.layers import ConvShape, conv_model
from deployopt.zoo.builder import GraphBuilder
from deployopt.zoo.cifar import basic_block_resnet

OPTS = MeasureOptions(dtype="fp32", runs=7, warmup=2)


@pytest.fixture(scope="module")
def conv_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ort") / "conv.onnx"
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 16)), str(path))
    return path


def test_one_conv_models_carry_the_oldest_ir_version_their_opset_allows() -> None:
    """Not the installed onnx's newest IR: on Python 3.9 the last wheels are onnx 1.19 (IR 12) and
    onnxruntime 1.19 (reads up to IR 10), which refused every one-conv model (staircase --measure
    ort, the ort sweeps); a board's older TensorRT parser gets an IR it knows too."""
    for int8 in (False, True):
        model = conv_model(ConvShape(1, 8, 8, 8, 16), int8=int8)
        assert model.ir_version == onnx.helper.find_min_ir_version_for(list(model.opset_import)) == 8
        onnx.checker.check_model(model, full_check=True)


def test_a_model_typed_fp16_or_quantized_is_recorded_in_the_precision_it_ran_in(
    conv_path: Path, tmp_path: Path
) -> None:
    """onnxruntime runs a model as it is typed: an fp16-typed model (`deployopt fp16`) or a Q/DQ one
    is recorded so, in the environment's dtype (compare's like-for-like check) and in "what was
    timed", for measure and profile alike. Before, both said fp32, and compare took an fp16 model's
    timing for a like-for-like one of the fp32 model's."""
    from deployopt.backends.base import default_dtype
    from deployopt.precision import write_fp16

    typed = write_fp16(conv_path, tmp_path / "conv16.onnx")
    qdq = Path(__file__).parent / "data" / "modelopt_int8_se_net.onnx"  # ModelOpt's INT8 Q/DQ export
    expected = {conv_path: ("fp32", "fp32, batch 1"), typed: ("fp16", "fp16 as typed in the model, batch 1")}
    expected[qdq] = ("int8", "int8 from the model's Q/DQ nodes, batch ")
    for path, (dtype, phrase) in expected.items():
        assert default_dtype(get_backend("ort"), path) == dtype  # bench's and optimize's default
        with get_backend("ort").open(dataclasses.replace(OPTS, dtype=dtype)) as session:
            for record in (session.measure(path), session.profile(path)):
                assert record.environment["dtype"] == dtype
                assert phrase in record.timed
        other = "fp16" if dtype == "fp32" else "fp32"  # never timed under another precision's name
        session = get_backend("ort").open(dataclasses.replace(OPTS, dtype=other))
        with session, pytest.raises(DeployoptError, match="backend 'ort' runs a model as it is typed"):
            session.measure(path)


def test_measure_gives_consistent_statistics(conv_path: Path) -> None:
    with get_backend("ort").open(OPTS) as session:
        t = session.measure(conv_path)
    assert t.backend == "ort" and t.measured
    assert t.runs == 7 and t.warmup == 2
    assert all(s > 0 for s in t.samples_us)
    assert t.median_us == float(np.median(t.samples_us))
    q1, q3 = np.percentile(t.samples_us, [25, 75])
    assert t.iqr_us == pytest.approx(q3 - q1)
    lo, hi = t.ci95_us
    assert min(t.samples_us) <= lo <= t.median_us <= hi <= max(t.samples_us)
    assert "one InferenceSession.run call" in t.timed and "fp32" in t.timed and "batch 1" in t.timed
    assert "CPUExecutionProvider" in t.timed
    assert t.environment["provider"] == "CPUExecutionProvider"
    assert "onnxruntime" in t.environment["libraries"]
    assert t.environment["dtype"] == "fp32"  # compare names a dtype difference as such


def test_batch_override(zoo_model_path: Callable[[str], Path]) -> None:
    loaded = prepare_model(zoo_model_path("resnet_projection"), batch=3)
    assert loaded.input_shapes == {"input": [3, 3, 32, 32]}
    out_dims = [d.dim_value for d in loaded.model.graph.output[0].type.tensor_type.shape.dim]
    assert out_dims[0] == 3
    dynamic = prepare_model(zoo_model_path("resnet_projection_dynamic"), batch=2)
    assert dynamic.input_shapes == {"input": [2, 3, 32, 32]}
    explicit = prepare_model(
        zoo_model_path("resnet_projection"), batch=5, input_shapes={"input": [2, 3, 32, 32]}
    )
    assert explicit.input_shapes == {"input": [2, 3, 32, 32]}  # an explicit shape wins over --batch
    with get_backend("ort").open(MeasureOptions(dtype="fp32", runs=2, warmup=1, batch=3)) as session:
        assert "batch 3" in session.measure(zoo_model_path("resnet_projection")).timed


def test_profile_maps_fused_nodes_back_to_onnx(zoo_model_path: Callable[[str], Path]) -> None:
    path = zoo_model_path("resnet56_cifar")
    with get_backend("ort").open(MeasureOptions(dtype="fp32", runs=3, warmup=1)) as session:
        prof = session.profile(path)
    assert prof.backend == "ort" and prof.runs == 3
    assert prof.environment["dtype"] == "fp32"
    # its clock is onnxruntime's profiler, not bench's time.perf_counter (which it said)
    assert "onnxruntime's profiler clock" in prof.timed and "perf_counter" not in prof.timed
    assert sum(layer.share for layer in prof.layers) == pytest.approx(1.0)
    assert prof.total_us == pytest.approx(sum(layer.time_us for layer in prof.layers))
    model = onnx.load(str(path))
    convs = [n.name for n in model.graph.node if n.op_type == "Conv"]
    covered = [n for layer in prof.layers for n in layer.onnx_nodes]
    assert len(covered) == len(set(covered))  # no ONNX node in two layers
    assert sorted(n for n in covered if n in convs) == sorted(convs)  # every conv found
    stem = next(layer for layer in prof.layers if "stem.conv" in layer.onnx_nodes)
    assert stem.onnx_nodes == ["stem.conv", "stem.bn", "stem.relu"]  # Conv+BN+ReLU fused by onnxruntime
    assert stem.extra == {"op": "Conv"}
    assert prof.to_json()["layers"][0]["name"] == prof.layers[0].name


def _events() -> list[dict]:
    def run(ts: float) -> dict:
        return {"cat": "Session", "name": "model_run", "ts": ts, "dur": 50, "ph": "X", "args": {}}

    def node(name: str, ts: float, dur: float, op: str = "Conv") -> dict:
        return {
            "cat": "Node",
            "name": f"{name}_kernel_time",
            "ts": ts,
            "dur": dur,
            "ph": "X",
            "args": {"op_name": op},
        }

    fence = {"cat": "Node", "name": "b_fence_before", "ts": 219, "dur": 1, "ph": "X", "args": {}}
    return [
        {"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 90, "ph": "X", "args": {}},
        run(100), node("a", 101, 99), node("b", 120, 99, "Relu"),  # warm-up run, dropped
        run(200), node("a", 201, 10), node("b", 220, 4, "Relu"), fence,
        run(300), node("a", 301, 14), node("b", 320, 6, "Relu"),
        run(400), node("a", 401, 12), node("b", 420, 2, "Relu"), node("b", 430, 3, "Relu"),
    ]  # fmt: skip


def test_node_durations_keep_the_last_runs_and_sum_within_a_run() -> None:
    assert node_durations(_events(), runs=3) == {"a": [10.0, 14.0, 12.0], "b": [4.0, 6.0, 5.0]}
    assert node_durations(_events(), runs=1) == {"a": [12.0], "b": [5.0]}


def test_layers_from_profile_medians_and_shares() -> None:
    layers = profile_layers(_events(), runs=3)[0]
    assert [(layer.name, layer.time_us, layer.extra) for layer in layers] == [
        ("a", 12.0, {"op": "Conv"}),
        ("b", 5.0, {"op": "Relu"}),
    ]
    assert [round(layer.share, 6) for layer in layers] == [round(12 / 17, 6), round(5 / 17, 6)]
    # each layer's spread over the runs: a: 10, 14, 12 → quartiles 11 and 13; b: 4, 6, 5 → 4.5, 5.5
    assert [layer.iqr_us for layer in layers] == [2.0, 1.0]
    assert profile_layers(_events(), runs=1)[0][0].iqr_us is None  # one run: no spread


def test_map_to_onnx_nodes() -> None:
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    s = numpy_helper.from_array(np.ones(4, np.float32), "s")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("BatchNormalization", ["c", "s", "s", "s", "s"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["c2"], name="conv2"),
        helper.make_node("Relu", ["c2"], ["y"], name="relu2"),
    ]
    w2 = numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w2")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [w, s, w2],
    )
    model = helper.make_model(graph)
    got = map_to_onnx_nodes(["r_nchwc", "conv2", "relu2", "ReorderOutput"], model)
    assert got == {
        "r_nchwc": ["conv", "bn", "relu"],  # named after its output tensor; swallowed conv and bn
        "conv2": ["conv2"],
        "relu2": ["relu2"],  # conv2 has its own entry, so it is not folded into relu2
        "ReorderOutput": [],
    }


def test_nodes_folded_at_load_are_listed_in_the_profile(tmp_path: Path) -> None:
    """A Shape → Gather → Unsqueeze → Concat chain feeding a Reshape (a traced flatten) is folded
    when deployopt loads the model: those nodes were in no layer and no list of the profile, only
    counted in a notice. They are listed now (by name; an unnamed one by its op and place), and
    every node of the file is in exactly one layer or one list."""
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Shape", ["c"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["b"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),  # unnamed
        helper.make_node("Concat", ["b1", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["c", "target"], ["y"], name="flatten"),
    ]
    inits = [
        w,
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([0], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        inits,
    )
    path = tmp_path / "flatten.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    with get_backend("ort").open(MeasureOptions(dtype="fp32", runs=2, warmup=1)) as session:
        doc = session.profile(path).to_json()
    folded = ["shape", "gather", "Unsqueeze (unnamed, node 3 of the file)", "concat"]
    assert doc["onnx_nodes_folded_at_load"] == folded
    listed = [n for layer in doc["layers"] for n in layer["onnx_nodes"]]
    listed += doc["onnx_nodes_removed"] + doc["onnx_nodes_unmapped"]
    assert sorted(listed) == ["conv", "flatten"]  # the rest of the file, once each


def test_a_hardswish_onnxruntime_inlines_belongs_to_its_kernels_layer(tmp_path: Path) -> None:
    """After a Gemm onnxruntime inlines HardSwish as its function body, HardSigmoid and Mul, which
    the saved optimized graph leaves unnamed and the profiler calls HardSigmoid_<i> and Mul_<j>:
    MobileNetV3's classifier HardSwish was in no layer ("in no layer (not traced to a kernel)")."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
        helper.make_node("HardSwish", ["h"], ["a"], name="act"),
        helper.make_node("Gemm", ["a", "w2", "b2"], ["y"], name="fc2", transB=1),
    ]
    inits = [
        numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((10, 32)).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "b2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    path = tmp_path / "hardswish.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with get_backend("ort").open(MeasureOptions(dtype="fp32", runs=2, warmup=1)) as session:
        doc = session.profile(path).to_json()
    assert doc["onnx_nodes_mapped_by"] == "optimized graph" and doc["onnx_nodes_unmapped"] == []
    owner = {n: layer["name"] for layer in doc["layers"] for n in layer["onnx_nodes"]}
    assert sorted(owner) == ["act", "fc1", "fc2"]
    assert owner["act"] not in ("fc1", "fc2")  # the inlined body's kernel, not a Gemm


def test_options_the_backend_cannot_honour(conv_path: Path) -> None:
    ort_backend = get_backend("ort")
    fp32_model = "conv.onnx is an fp32 model, and backend 'ort' runs a model as it is typed: for fp16"
    with ort_backend.open(MeasureOptions(dtype="fp16")) as session, pytest.raises(DeployoptError) as err:
        session.measure(conv_path)  # fp16 is a model's own typing, never a conversion
    assert str(err.value).startswith(fp32_model)
    with pytest.raises(DeployoptError, match="calibrates nothing"):
        ort_backend.open(MeasureOptions(dtype="int8", calibration_data="calib.npy"))
    with pytest.raises(DeployoptError, match="cannot limit the GPU's SMs"):
        ort_backend.open(MeasureOptions(dtype="fp32", sms=8))
    with get_backend("ort").open(OPTS) as session:
        with pytest.raises(DeployoptError, match="no kernel-level trace"):
            session.profile(conv_path, kernels=True)
        with pytest.raises(ModelError, match=r"missing\.onnx: no such file"):
            session.measure(conv_path.parent / "missing.onnx")
        bad = conv_path.parent / "bad.onnx"
        bad.write_bytes(b"not a model")
        with pytest.raises(ModelError, match=r"bad\.onnx: not an ONNX model"):
            session.measure(bad)


def _tiny_residual() -> onnx.ModelProto:
    """Stem, two stages of two Conv+BN(+Relu) BasicBlocks (Add, Relu; a 1×1 projection shortcut in
    stage 2), GAP, Flatten, Gemm: on the CPU EP onnxruntime turns each block's second conv into an
    NCHWc Conv with a fused Sum input and Relu, named after the BN output it computed."""
    b = GraphBuilder(seed=0, image_size=8)
    return basic_block_resnet(b, [8, 16], 2, [8, 16, 8, 16], 10, graph_name="tiny_residual")


@pytest.mark.parametrize("which", ["tiny_residual", "resnet56_pruned"])
def test_profile_attributes_every_onnx_node_to_its_fused_kernel(
    which: str, zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """On a real onnxruntime profile every ONNX node lands in exactly one kernel, and a residual
    block's Add and Relu belong to the conv kernel that fused them (FusedConv or NCHWc Conv with a
    Sum input), not to the pooling layer after the last block (QA: 54 of 199 nodes were dropped)."""
    if which == "tiny_residual":
        path = tmp_path / "tiny.onnx"
        onnx.save(_tiny_residual(), str(path))
    else:
        path = zoo_model_path(which)
    with get_backend("ort").open(MeasureOptions(dtype="fp32", runs=2, warmup=1)) as session:
        prof = session.profile(path)
    doc = prof.to_json()
    assert doc["onnx_nodes_mapped_by"] == "optimized graph"
    assert doc["onnx_nodes_removed"] == [] and doc["onnx_nodes_unmapped"] == []
    model = onnx.load(str(path))
    names = [n.name for n in model.graph.node]
    covered = [n for layer in prof.layers for n in layer.onnx_nodes]
    assert sorted(covered) == sorted(names)  # each ONNX node in exactly one layer, none dropped
    layer_of = {n: layer for layer in prof.layers for n in layer.onnx_nodes}
    assert layer_of["classifier.gap"].onnx_nodes == ["classifier.gap"]
    adds = [n for n in names if n.endswith(".add")]
    fused = 0
    for add in adds:
        block = add[: -len(".add")]
        kernel = layer_of[add]
        if kernel.name == add:  # not fused: the Add is its own kernel, and so is the Relu
            assert layer_of[f"{block}.relu"].onnx_nodes == [f"{block}.relu"]
            continue
        fused += 1
        assert kernel.extra["op"] in ("Conv", "FusedConv")
        assert kernel.onnx_nodes == [f"{block}.conv2.conv", f"{block}.conv2.bn", add, f"{block}.relu"]
    assert fused > 0  # the case QA hit: Conv+BN+Add+Relu fused into one kernel


def test_map_through_optimized_graph() -> None:
    """A hand-written optimized graph: an NCHWc Conv named after the tensor it computes, its
    ReorderOutput, a FusedConv (Conv+BN+Add+Relu) named after its Conv, an Identity onnxruntime
    deleted, and a node the optimized graph no longer mentions at all."""
    w = numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")
    s = numpy_helper.from_array(np.ones(4, np.float32), "s")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c1.out"], name="c1"),
        helper.make_node("BatchNormalization", ["c1.out", "s", "s", "s", "s"], ["bn1.out"], name="bn1"),
        helper.make_node("Relu", ["bn1.out"], ["r1.out"], name="r1"),
        helper.make_node("Identity", ["r1.out"], ["id.out"], name="id"),
        helper.make_node("Conv", ["id.out", "w"], ["c2.out"], name="c2"),
        helper.make_node("BatchNormalization", ["c2.out", "s", "s", "s", "s"], ["bn2.out"], name="bn2"),
        helper.make_node("Add", ["bn2.out", "r1.out"], ["add.out"], name="add"),
        helper.make_node("Relu", ["add.out"], ["r2.out"], name="r2"),
        helper.make_node("GlobalAveragePool", ["r2.out"], ["gap.out"], name="gap"),
        helper.make_node("Flatten", ["gap.out"], ["y"], name="flat"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w, s]))
    nchwc = "com.microsoft.nchwc"
    onodes = [
        helper.make_node(
            "Conv", ["x", "w", "s"], ["t0"], name="r1.out_nchwc", domain=nchwc, activation="Relu"
        ),
        helper.make_node("ReorderOutput", ["t0"], ["r1.out"], name="ReorderOutput_token_3", domain=nchwc),
        helper.make_node(
            "FusedConv", ["r1.out", "w", "s", "r1.out"], ["r2.out"], name="c2", domain="com.microsoft",
            activation="Relu",
        ),
        helper.make_node("GlobalAveragePool", ["r2.out"], ["gap.out"], name="gap"),
        helper.make_node("Flatten", ["gap.out"], ["y"], name="flat_renamed"),
    ]  # fmt: skip
    optimized = helper.make_model(helper.make_graph(onodes, "o", [x], [y], [w, s]))
    kernels = ["r1.out_nchwc", "ReorderOutput_token_3", "c2", "gap", "flat_renamed"]
    got = map_through_optimized_graph(kernels, model, optimized)
    assert got.layers == {
        "r1.out_nchwc": ["c1", "bn1", "r1"],
        "ReorderOutput_token_3": [],
        "c2": ["c2", "bn2", "add", "r2"],  # not the Add and Relu in the next layer, "gap"
        "gap": ["gap"],
        "flat_renamed": ["flat"],  # writes the graph output "y" that "flat" wrote
    }
    assert got.removed == ["id"] and got.unmapped == []
    less = map_through_optimized_graph(["r1.out_nchwc", "ReorderOutput_token_3", "c2"], model, optimized)
    assert less.unmapped == ["gap", "flat"]  # kernels without profiler entries: listed, not dropped


def test_profile_without_the_optimized_graph_lists_what_names_miss(
    zoo_model_path: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """When onnxruntime could not write its optimized graph the mapping falls back to node names,
    says so, and lists the ONNX nodes no layer claims instead of dropping them."""
    from deployopt.backends import ort as ort_backend

    monkeypatch.setattr(ort_backend, "_load_optimized", lambda path: None)
    path = zoo_model_path("resnet56_pruned")
    with get_backend("ort").open(MeasureOptions(dtype="fp32", runs=1, warmup=0)) as session:
        doc = session.profile(path).to_json()
    assert doc["onnx_nodes_mapped_by"] == "node names (approximate)"
    covered = [n for layer in doc["layers"] for n in layer["onnx_nodes"]]
    names = [n.name for n in onnx.load(str(path)).graph.node]
    assert doc["onnx_nodes_unmapped"]  # the FusedConvs' BN, Add and Relu, seen from names only
    assert sorted(covered + doc["onnx_nodes_unmapped"]) == sorted(names)
