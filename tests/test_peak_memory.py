"""`apply` and `optimize` peaked at about 8× the model file (VGG16, 530 MB: 4.0 GB for `apply`).

Held at once were the input model, its copy, every edited weight as an array, the copy's replaced
weights (upb frees a message's memory all at once), and the whole model serialized twice by
SerializeToString (upb's buffer and the bytes copied out of it) at each count, check and write.
These tests bound what Python allocates (tracemalloc: numpy arrays and bytes objects, not upb's
own memory) while applying a plan and saving the result of a ~64 MB model, so they do not depend
on timing or on what else the machine runs; and check that what is written is byte for byte what
the whole-model calls wrote.
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from traced_memory import traced_peak

from deployopt.coupling import analyze
from deployopt.model import load_model, save_model
from deployopt.surgery import apply_plan

#: convs of the synthetic model: 24 × 256×256×3×3 float32 weights, 2.25 MiB each (54 MiB in all)
CONVS = 24
CHANNELS = 256


def _chain(constant_shape: bool = False, convs: int = CONVS, channels: int = CHANNELS) -> onnx.ModelProto:
    """A chain of 3×3 convs with ReLUs and a classifier: many medium weights, so a whole-model
    copy (what the old code made) is far larger than any one weight. `constant_shape` adds a
    Reshape whose target is a Constant node, so that loading folds it (onnx-graphsurgeon); a small
    `convs` and `channels` make a model for the tests of what is written."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = "input"
    for i in range(convs):
        c_in = 16 if i == 0 else channels
        w = rng.standard_normal((channels, c_in, 3, 3), dtype=np.float32)
        inits += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(np.zeros(channels, np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        x = f"r{i}"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="pool"))
    if constant_shape:
        shape = numpy_helper.from_array(np.array([1, channels], np.int64), "shape_value")
        nodes.append(helper.make_node("Constant", [], ["shape"], name="shape", value=shape))
    else:
        inits.append(numpy_helper.from_array(np.array([1, channels], np.int64), "shape"))
    nodes.append(helper.make_node("Reshape", ["pool", "shape"], ["flat"], name="flatten"))
    inits.append(numpy_helper.from_array(rng.standard_normal((10, channels), dtype=np.float32), "fc_w"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w"], ["output"], name="fc", transB=1))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def chain_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("peak") / "chain.onnx"
    onnx.save(_chain(), str(path))
    return path


def _pad_plan(analysis: Any) -> dict[str, int]:
    """Every free group padded to the next multiple of 32 above its width (all the weights edited)."""
    return {g.id: (g.width // 32 + 1) * 32 for g in analysis.free_groups()}


def test_apply_plan_holds_one_edited_weight_at_a_time(chain_path: Path) -> None:
    """Before: every edited weight as an array at once, then each weight's bytes, its tensor and
    its copy (1.3× the model above the input: 70 MB here); now a few of the largest weight (3 MB)."""
    loaded = load_model(chain_path)
    analysis = analyze(loaded.model)
    plan = _pad_plan(analysis)
    size = chain_path.stat().st_size
    edited, peak = traced_peak(lambda: apply_plan(loaded.model, plan, analysis))
    assert {g.id: g.width for g in analyze(edited).free_groups()} == plan
    assert peak < size // 5, f"apply_plan held {peak >> 20} MiB at once for a {size >> 20} MiB model"


def test_save_model_never_holds_the_model_serialized(chain_path: Path, tmp_path: Path) -> None:
    """Before: SerializeToString of the whole model (its size in one bytes object, and twice that
    in upb); now one weight's bytes at a time. The file is the same, byte for byte."""
    model = load_model(chain_path).model
    expected = hashlib.sha256(model.SerializeToString()).hexdigest()
    size = chain_path.stat().st_size
    _, peak = traced_peak(lambda: save_model(model, tmp_path / "out.onnx"))
    assert peak < size // 5, f"save_model held {peak >> 20} MiB at once for a {size >> 20} MiB model"
    assert hashlib.sha256((tmp_path / "out.onnx").read_bytes()).hexdigest() == expected


def test_save_model_with_external_data_writes_what_onnx_wrote(chain_path: Path, tmp_path: Path) -> None:
    """save_model no longer hands onnx a whole copy of the model to convert (upb's memory, which
    tracemalloc does not see: the 2.7 → 2.2 GB of `apply` on VGG16 with external data); each
    weight's bytes go to NAME.data as they are read. Both files are what onnx wrote, byte for byte,
    and no Python-level copy of the weights appears either."""
    model = load_model(chain_path).model
    size = chain_path.stat().st_size
    _, peak = traced_peak(lambda: save_model(model, tmp_path / "ext.onnx", external_data=True))
    assert peak < size // 5, f"save_model held {peak >> 20} MiB at once for a {size >> 20} MiB model"
    ref = tmp_path / "ref"
    ref.mkdir()
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save_model(copy, str(ref / "ext.onnx"), save_as_external_data=True, location="ext.onnx.data")
    for name in ("ext.onnx", "ext.onnx.data"):
        assert (tmp_path / name).read_bytes() == (ref / name).read_bytes(), name


def test_loading_frees_the_model_folding_replaced(tmp_path: Path) -> None:
    """onnx-graphsurgeon's graph is cyclic and holds the pre-folding model's weights: uncollected,
    it kept a second copy of them alive through analysis, surgery and the write (VGG16: 530 MB).
    With automatic collection off, nothing of it may be left for the collector to find."""
    import onnx_graphsurgeon as gs

    path = tmp_path / "folded.onnx"
    onnx.save(_chain(constant_shape=True, convs=2, channels=32), str(path))
    gc.collect()
    gc.disable()
    try:
        loaded = load_model(path)
        left = sum(isinstance(o, (gs.Graph, gs.Node)) for o in gc.get_objects())
    finally:
        gc.enable()
    assert any("folded constant subgraphs" in n for n in loaded.notices)
    assert left == 0, f"{left} onnx-graphsurgeon objects left for the collector after loading"


def _small() -> onnx.ModelProto:
    return _chain(convs=2, channels=32)


def _no_graph() -> onnx.ModelProto:
    return onnx.ModelProto(ir_version=8)


def _empty_graph() -> onnx.ModelProto:
    model = onnx.ModelProto(ir_version=8)
    model.graph.SetInParent()  # a graph with nothing set
    return model


def _unknown_field() -> onnx.ModelProto:
    """A field this onnx does not know (a newer one's), on the model."""
    model = _small()
    model.ParseFromString(model.SerializeToString() + UNKNOWN)
    return model


def _odd_weights() -> onnx.ModelProto:
    """An unknown field on one weight; another weight as float_data instead of raw bytes."""
    model = _small()
    model.graph.initializer[0].MergeFromString(UNKNOWN)
    model.graph.initializer[1].CopyFrom(helper.make_tensor("b0", TensorProto.FLOAT, [32], [0.5] * 32))
    return model


#: field 111, varint 5: a field no onnx schema has
UNKNOWN = bytes([0xF8, 0x06, 0x05])


@pytest.mark.parametrize("make", [_small, _no_graph, _empty_graph, _unknown_field, _odd_weights])
def test_serialized_pieces_are_serialize_to_string(make: Callable[[], onnx.ModelProto]) -> None:
    from deployopt.onnx_proto import serialized_pieces, serialized_size

    model = make()
    assert b"".join(serialized_pieces(model)) == model.SerializeToString()
    assert serialized_size(model) == model.ByteSize()


def test_apply_plan_keeps_fields_onnx_does_not_know(tmp_path: Path) -> None:
    """A model with a field this onnx does not know is copied whole, as before, and keeps it."""
    path = tmp_path / "small.onnx"
    onnx.save(_small(), str(path))
    model = load_model(path).model
    model.ParseFromString(model.SerializeToString() + UNKNOWN)
    analysis = analyze(model)
    edited = apply_plan(model, _pad_plan(analysis), analysis)
    assert edited.SerializeToString().endswith(UNKNOWN)


def test_an_external_data_save_ignores_a_data_file_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnx's converter looked for NAME.data in the current folder, not the output's: saving
    `out.onnx` again from the folder it is in failed ("External data file exists")."""
    model = _small()
    monkeypatch.chdir(tmp_path)
    save_model(model, "out.onnx", external_data=True)
    save_model(model, "out.onnx", external_data=True)
    back = {t.name: numpy_helper.to_array(t) for t in onnx.load("out.onnx").graph.initializer}
    assert all(np.array_equal(back[t.name], numpy_helper.to_array(t)) for t in model.graph.initializer)
