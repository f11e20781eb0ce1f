"""Loading: the forms real exports take all end up as one normalized model; bad files are one-line errors."""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import ort_session
import pytest
from onnx import numpy_helper
from zoo_models import VARIANT_OF

from deployopt.coupling import analyze
from deployopt.errors import ModelError, OutputError
from deployopt.model import load_model, save_model


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    sess = ort_session.session(model)
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _input(model: onnx.ModelProto) -> np.ndarray:
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(0).standard_normal(dims).astype(np.float32)


@pytest.mark.parametrize("variant", sorted(VARIANT_OF))
def test_variants_load_to_the_same_function(variant: str, zoo_model_path: Callable[[str], Path]) -> None:
    loaded = load_model(zoo_model_path(variant))
    base = load_model(zoo_model_path(VARIANT_OF[variant]))
    ops = {n.op_type for n in loaded.model.graph.node}
    assert not ops & {"Constant", "ConstantOfShape", "Shape"}  # folded into initializers
    assert all(d.HasField("dim_value") for d in loaded.model.graph.input[0].type.tensor_type.shape.dim)
    x = _input(base.model)
    np.testing.assert_allclose(run(loaded.model, x), run(base.model, x), atol=1e-5, rtol=0)
    original = onnx.load(str(zoo_model_path(variant)))
    assert loaded.model.opset_import == original.opset_import


def test_dynamic_batch_fixed_to_one_with_a_notice(zoo_model_path: Callable[[str], Path]) -> None:
    loaded = load_model(zoo_model_path("resnet_projection_dynamic"))
    assert loaded.notices == [
        "batch dimension of 'input' (batch) was dynamic; fixed to 1 here (another batch: --input-shape "
        "input:Nx3x32x32); a model written from it gets the dynamic batch back where it checks out"
    ]
    assert loaded.input_shapes == {"input": [1, 3, 32, 32]}
    assert loaded.dynamic_batch == {"input": "batch"} and loaded.static_batch == 1
    out_dims = [d.dim_value for d in loaded.model.graph.output[0].type.tensor_type.shape.dim]
    assert out_dims == [1, 10]


def test_input_shapes_set_the_batch(zoo_model_path: Callable[[str], Path]) -> None:
    loaded = load_model(zoo_model_path("resnet_projection_dynamic"), {"input": [4, 3, 32, 32]})
    assert loaded.notices == [] and loaded.input_shapes == {"input": [4, 3, 32, 32]}
    assert loaded.dynamic_batch == {"input": "batch"} and loaded.static_batch == 4  # the file's, still
    assert [d.dim_value for d in loaded.model.graph.output[0].type.tensor_type.shape.dim] == [4, 10]


def test_unknown_input_name_lists_the_real_inputs(zoo_model_path: Callable[[str], Path]) -> None:
    path = zoo_model_path("se_net")
    with pytest.raises(ModelError, match=re.escape("has no such input; its inputs: input")) as err:
        load_model(path, {"image": [1, 3, 32, 32]})
    assert "\n" not in str(err.value) and "'image'" in str(err.value)


def test_wrong_rank_input_shape(zoo_model_path: Callable[[str], Path]) -> None:
    with pytest.raises(ModelError, match="has 2 dims, the model's input has 4"):
        load_model(zoo_model_path("se_net"), {"input": [1, 3]})


def test_dynamic_spatial_dims_need_an_input_shape(
    tmp_path: Path, zoo_model: Callable[[str], onnx.ModelProto]
) -> None:
    model = zoo_model("se_net")
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "height"
    path = tmp_path / "dyn_hw.onnx"
    onnx.save(model, str(path))
    with pytest.raises(ModelError, match=re.escape("dimension 2 of input 'input' is dynamic; give a static")):
        load_model(path)


def test_a_dynamic_dim_hint_is_one_the_input_takes(tmp_path: Path) -> None:
    """The hint was always `--input-shape NAME:1x3x224x224`, which a 12-channel (or 3-D) input
    then refused ("is 1×12×?×? in the file"); it now keeps the file's static dims and names the
    dynamic ones, and replacing those gives a shape that loads."""
    from onnx import TensorProto, helper

    weight = numpy_helper.from_array(np.ones((8, 12, 3, 3), np.float32), "W")
    x = helper.make_tensor_value_info("feat", TensorProto.FLOAT, ["batch", 12, "height", None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["feat", "W"], ["y"], pads=[1] * 4)], "g", [x], [y], [weight]
    )
    path = tmp_path / "dyn12.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    with pytest.raises(ModelError, match=re.escape("--input-shape feat:1x12x<height>x<dim3>")):
        load_model(path)
    loaded = load_model(path, {"feat": [1, 12, 16, 20]})
    assert loaded.input_shapes == {"feat": [1, 12, 16, 20]}


def test_opset9_loads_and_keeps_its_opset(zoo_model_path: Callable[[str], Path]) -> None:
    loaded = load_model(zoo_model_path("mobilenet_like_opset9"))
    assert loaded.model.opset_import[0].version == 9


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"", "empty file"),
        (b"\xff\xfe this is not a protobuf \x00\x01", "not an ONNX model"),
        ("truncated", "not an ONNX model"),
        (b"hello", "not an ONNX model"),
    ],
)
def test_bad_files_are_one_line_errors(
    content: bytes | str | None, message: str, tmp_path: Path, zoo_model_path: Callable[[str], Path]
) -> None:
    path = tmp_path / "bad.onnx"
    if content == "truncated":
        data = zoo_model_path("se_net").read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelError, match=re.escape(message)) as err:
        load_model(path)
    assert "\n" not in str(err.value)


def test_a_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="is a directory"):
        load_model(tmp_path)


def _cli_in_child(*args: str, pipe_wait_s: float = 0.3) -> subprocess.CompletedProcess[str]:
    """`deployopt ARGS` in a child killed after 60 s (a regression into a hang fails, never blocks
    the test run), with loading's wait for a pipe's writer cut to `pipe_wait_s`."""
    run_cli = (
        f"import sys; import deployopt.model as m; m.PIPE_WRITER_WAIT_S = {pipe_wait_s}; "
        "from deployopt.cli.main import main; sys.argv = ['deployopt', *sys.argv[1:]]; main()"
    )
    return subprocess.run([sys.executable, "-c", run_cli, *args], capture_output=True, text=True, timeout=60)


def test_a_pipe_nothing_writes_to_is_one_line_after_a_short_wait(tmp_path: Path) -> None:
    """`analyze fifo` with no process feeding it blocked in open() forever."""
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)
    proc = _cli_in_child("analyze", str(fifo))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f"error: {fifo}: is a pipe nothing writes to (waited 0.3 s); "
        "start its writer first, or give an .onnx file"
    ), proc.stderr


def test_a_pipe_whose_writer_is_slow_to_start_sending_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zoo_model_path: Callable[[str], Path]
) -> None:
    """`<(ssh board cat m.onnx)`: the writer holds the pipe open but sends its first byte after the
    wait for a writer; that is a writer, not an empty pipe."""
    from deployopt import model as model_module

    monkeypatch.setattr(model_module, "PIPE_WRITER_WAIT_S", 0.2)
    data = zoo_model_path("resnet_projection").read_bytes()
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)

    def write() -> None:
        with fifo.open("wb") as f:  # returns once load_model opened the read end
            time.sleep(0.6)
            f.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    loaded = load_model(fifo)
    writer.join(timeout=10)
    assert len(loaded.model.graph.node) == len(
        load_model(zoo_model_path("resnet_projection")).model.graph.node
    )


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("verify ref", "pipe"),  # loaded, then opened again by onnxruntime: hung
        ("verify cand", "pipe"),
        ("bench", "pipe"),  # the worker opens the path: "no such file"
        ("profile", "pipe"),
        ("bench", "device"),  # "/dev/null: no such file"
        ("profile", "device"),
    ],
)
def test_commands_that_read_the_model_twice_refuse_a_pipe_or_device_at_once(
    tmp_path: Path, zoo_model_path: Callable[[str], Path], command: str, kind: str
) -> None:
    """A pipe gives its bytes once; these commands read the model by path more than once, so they
    say so in one line before reading (a device is refused as loading refuses it)."""
    model = str(zoo_model_path("resnet_projection"))
    if kind == "pipe":
        bad = tmp_path / "model.onnx"
        os.mkfifo(bad)
    else:
        bad = Path(os.devnull)
    args = {
        "verify ref": ["verify", str(bad), model],
        "verify cand": ["verify", model, str(bad)],
        "bench": ["bench", str(bad), "--backend", "ort", "--runs", "1"],
        "profile": ["profile", str(bad), "--backend", "ort"],
    }[command]
    proc = _cli_in_child(*args, pipe_wait_s=30)  # a wait for a writer would be seen: none is wanted
    name = command.split()[0]
    want = (
        f"error: {bad}: is a pipe; {name} reads the model more than once: give an .onnx file"
        if kind == "pipe"
        else f"error: {bad}: is a device, not a file; give an .onnx file"
    )
    assert proc.returncode == 2 and proc.stderr.strip() == want, proc.stderr


def test_optimize_reads_a_named_pipe_once(tmp_path: Path, zoo_model_path: Callable[[str], Path]) -> None:
    """optimize loaded the model, then hashed it again for its journal: with a named pipe fed once
    (`mkfifo p; gunzip -c m.onnx.gz > p &`) that second open waited for a writer forever."""
    data = zoo_model_path("resnet_projection").read_bytes()
    fifo = tmp_path / "model.onnx"
    os.mkfifo(fifo)

    def write() -> None:
        with contextlib.suppress(BrokenPipeError), fifo.open("wb") as f:
            f.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    out = tmp_path / "o"
    proc = _cli_in_child(
        "optimize", str(fifo), "-t", "nano", "--backend", "model", "--max-evals", "3", "-o", str(out)
    )
    writer.join(timeout=10)
    assert proc.returncode == 0, proc.stderr
    start = json.loads((out / "journal.jsonl").read_text().splitlines()[0])
    assert start["config"]["model_sha256"] is None  # nothing to hash again: a pipe gives its bytes once


def test_external_data_round_trip(tmp_path: Path, zoo_model: Callable[[str], onnx.ModelProto]) -> None:
    model = zoo_model("se_net")
    src = tmp_path / "src" / "ext.onnx"
    src.parent.mkdir()
    onnx.save(
        zoo_model("se_net"), str(src), save_as_external_data=True, location="ext.onnx.data", size_threshold=0
    )
    loaded = load_model(src)
    assert loaded.external_data
    x = _input(loaded.model)
    np.testing.assert_allclose(run(loaded.model, x), run(model, x), atol=1e-6, rtol=0)
    dest = tmp_path / "out" / "edited.onnx"
    save_model(loaded.model, dest, external_data=True)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["edited.onnx", "edited.onnx.data"]
    assert dest.stat().st_size < 100_000 < (dest.parent / "edited.onnx.data").stat().st_size
    again = load_model(dest)
    assert again.external_data
    np.testing.assert_allclose(run(again.model, x), run(model, x), atol=1e-6, rtol=0)
    # saving twice replaces the data file instead of appending to it
    size = (dest.parent / "edited.onnx.data").stat().st_size
    save_model(loaded.model, dest, external_data=True)
    assert (dest.parent / "edited.onnx.data").stat().st_size == size


def test_missing_external_data_is_an_error(
    tmp_path: Path, zoo_model: Callable[[str], onnx.ModelProto]
) -> None:
    path = tmp_path / "ext.onnx"
    onnx.save(zoo_model("se_net"), str(path), save_as_external_data=True, location="w.data", size_threshold=0)
    (tmp_path / "w.data").unlink()
    with pytest.raises(ModelError, match="cannot read its external weight data"):
        load_model(path)


def test_save_is_atomic(
    tmp_path: Path, zoo_model: Callable[[str], onnx.ModelProto], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_save(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(onnx, "save_model", broken_save)
    # save_model writes a model's bytes itself (deployopt.model.write_model_file), in pieces
    monkeypatch.setattr("deployopt.model.write_model_file", broken_save)
    dest = tmp_path / "out.onnx"
    with pytest.raises(OutputError, match=r"cannot write .*out\.onnx: disk full"):  # one line, no traceback
        save_model(zoo_model("se_net"), dest)
    assert list(tmp_path.iterdir()) == []


def test_metadata_and_doc_strings_survive_folding(
    tmp_path: Path, zoo_model: Callable[[str], onnx.ModelProto]
) -> None:
    from deployopt.zoo import weights_as_constants

    model = weights_as_constants(zoo_model("se_net"))
    onnx.helper.set_model_props(model, {"source": "unit test"})
    model.doc_string = "a doc"
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    conv.doc_string = "conv doc"
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    loaded = load_model(path).model
    assert {p.key: p.value for p in loaded.metadata_props} == {"source": "unit test"}
    assert loaded.doc_string == "a doc"
    assert next(n for n in loaded.graph.node if n.name == conv.name).doc_string == "conv doc"
    assert not any(n.op_type == "Constant" for n in loaded.graph.node)
    assert numpy_helper.to_array(loaded.graph.initializer[0]).dtype == np.float32


def test_input_shape_overrides_a_static_batch(zoo_model_path) -> None:
    """A batch-1 export read at batch 16: the stale static output dims must not block inference."""
    loaded = load_model(zoo_model_path("resnet56_pruned"), {"input": [16, 3, 32, 32]})
    out = loaded.model.graph.output[0].type.tensor_type.shape
    assert [d.dim_value for d in out.dim] == [16, 10]
    assert loaded.input_shapes == {"input": [16, 3, 32, 32]}


def test_written_results_get_the_umask_mode_not_mkstemps_0600(
    tmp_path: Path, zoo_model: Callable[[str], onnx.ModelProto]
) -> None:
    # an engine or report is copied to a board or read by CI like any file the user writes
    from deployopt.fileio import write_bytes, write_json

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "report.json", {"a": 1})
        write_bytes(tmp_path / "model.engine", b"\0" * 8)
        save_model(zoo_model("se_net"), tmp_path / "m.onnx")
    finally:
        os.umask(old)
    for name in ("report.json", "model.engine", "m.onnx"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


def _twin_c2f(path: Path) -> onnx.ModelProto:
    """Two C2f-like branches whose Splits read ONE sizes constant [8, 8] (as the TorchScript
    exporter merges equal constants), summed into the output."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)

    def w(name: str, k: int, c: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal((k, c, 1, 1)).astype(np.float32), name)

    inits = [w("wa", 16, 4), w("wb", 16, 4), w("wa2", 6, 16), w("wb2", 6, 16),
             numpy_helper.from_array(np.array([8, 8], np.int64), "sizes")]  # fmt: skip
    nodes = []
    for br in ("a", "b"):
        nodes += [
            helper.make_node("Conv", ["x", f"w{br}"], [f"{br}c"], name=f"conv_{br}"),
            helper.make_node("Split", [f"{br}c", "sizes"], [f"{br}0", f"{br}1"], name=f"split_{br}", axis=1),
            helper.make_node("Concat", [f"{br}1", f"{br}0"], [f"{br}cat"], name=f"cat_{br}", axis=1),
            helper.make_node("Conv", [f"{br}cat", f"w{br}2"], [f"{br}y"], name=f"conv_{br}2"),
        ]
    nodes.append(helper.make_node("Add", ["ay", "by"], ["y"], name="sum"))
    graph = helper.make_graph(
        nodes, "twin_c2f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return model


def test_a_constant_two_splits_share_gets_a_copy_per_reader_and_frees_both_groups(tmp_path: Path) -> None:
    """Exporters merge equal constants (YOLOv8 C2f blocks of equal width share their Split sizes);
    editing the shared one for one Split would change the other, so both groups were frozen.
    Loading gives each reader its own copy: both groups are free, and padding them is exact."""
    from deployopt.coupling import analyze
    from deployopt.surgery import apply_plan

    _twin_c2f(tmp_path / "twin.onnx")
    loaded = load_model(tmp_path / "twin.onnx")
    assert "gave 1 readers of shared constants their own copies (same values)" in loaded.notices
    split_inputs = {n.name: n.input[1] for n in loaded.model.graph.node if n.op_type == "Split"}
    assert split_inputs == {"split_a": "sizes", "split_b": "sizes__1"}
    analysis = analyze(loaded.model)
    free = {g.id: g.width for g in analysis.free_groups()}
    assert free == {"conv_a[0]": 8, "conv_a[1]": 8, "conv_b[0]": 8, "conv_b[1]": 8}
    padded = apply_plan(loaded.model, {"conv_a[0]": 16, "conv_b[1]": 12}, analysis)
    onnx.checker.check_model(padded, full_check=True)
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    sessions = [ort_session.session(m)
                for m in (loaded.model, padded)]  # fmt: skip
    ref, out = (s.run(None, {"x": x}) for s in sessions)
    np.testing.assert_allclose(out[0], ref[0], rtol=0, atol=1e-5)


def _c2f_equal_split(path: Path, opset: int) -> onnx.ModelProto:
    """One C2f-like block whose Split cuts 16 channels into two equal halves without naming them,
    as each opset allows: `num_outputs` (18+, torch.export's `chunk`), no sizes input (13–17), no
    `split` attribute (before 13)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((0.2 * rng.standard_normal(s)).astype(np.float32), n)
             for n, s in (("w1", (16, 4, 1, 1)), ("w2", (6, 24, 3, 3)))]  # fmt: skip
    attrs = {"axis": 1, **({"num_outputs": 2} if opset >= 18 else {})}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c"], name="conv1"),
        helper.make_node("Split", ["c"], ["h0", "h1"], name="split", **attrs),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu"),
        helper.make_node("Concat", ["r1", "h0", "h1"], ["cat"], name="cat", axis=1),
        helper.make_node("Conv", ["cat", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "c2f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return model


@pytest.mark.parametrize("opset", [11, 13, 18, 20])
def test_an_equal_split_gets_its_sizes_and_its_halves_become_free(tmp_path: Path, opset: int) -> None:
    """torch's default exporter (torch.export, torch >= 2.9) writes `chunk(2, 1)` as
    Split(num_outputs=2); a Split that names no sizes stays equal whatever the plan, so coupling froze
    the halves (and YOLOv8's C2f widths with them). Loading spells the sizes out (the outputs'
    inferred widths: the same function), and the halves can change on their own, exactly."""
    from deployopt.surgery import apply_plan

    original = _c2f_equal_split(tmp_path / "c2f.onnx", opset)
    loaded = load_model(tmp_path / "c2f.onnx")
    assert "gave an equal Split its sizes as a constant (same function)" in loaded.notices
    (split,) = [n for n in loaded.model.graph.node if n.op_type == "Split"]
    if opset >= 13:
        sizes = numpy_helper.to_array(
            next(t for t in loaded.model.graph.initializer if t.name == split.input[1])
        )
        assert sizes.tolist() == [8, 8] and "num_outputs" not in {a.name for a in split.attribute}
    else:
        assert onnx.helper.get_attribute_value(next(a for a in split.attribute if a.name == "split")) == [
            8,
            8,
        ]
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    ref = run(original, x)
    np.testing.assert_array_equal(run(loaded.model, x), ref)
    analysis = analyze(loaded.model)
    assert {g.id: g.width for g in analysis.free_groups()} == {"conv1[0]": 8, "conv1[1]": 8}
    padded = apply_plan(loaded.model, {"conv1[0]": 13, "conv1[1]": 9}, analysis)
    onnx.checker.check_model(padded, full_check=True)
    np.testing.assert_allclose(run(padded, x), ref, rtol=0, atol=1e-5)
    trimmed = apply_plan(loaded.model, {"conv1[0]": 5, "conv1[1]": 8}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert run(trimmed, x).shape == ref.shape


def test_a_split_with_its_sizes_named_is_left_as_it_is(tmp_path: Path) -> None:
    """Only Splits that name no sizes are touched: the TorchScript exporter's Split(x, [a, b])
    keeps its own constant, and no notice is given."""
    _twin_c2f(tmp_path / "twin.onnx")
    loaded = load_model(tmp_path / "twin.onnx")
    assert not any("equal Split" in n for n in loaded.notices)
    assert [n.input[1] for n in loaded.model.graph.node if n.op_type == "Split"] == ["sizes", "sizes__1"]


def test_large_shared_initializers_stay_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only small constants are copied (shape vectors, per-channel parameters): a shared tensor
    above UNSHARE_MAX_ELEMENTS keeps one copy, and the groups that read it stay frozen."""
    import deployopt.model as dm
    from deployopt.coupling import analyze

    monkeypatch.setattr(dm, "UNSHARE_MAX_ELEMENTS", 1)
    _twin_c2f(tmp_path / "twin.onnx")
    loaded = load_model(tmp_path / "twin.onnx")
    assert not any("shared constants" in n for n in loaded.notices)
    assert not analyze(loaded.model).free_groups()


def shape_chain(blocks: int) -> onnx.ModelProto:
    """Conv → Relu → Reshape blocks, each Reshape's target computed from the shape of its input
    (Shape → Gather → Div → Cast → Unsqueeze → Concat, as torch's exporter writes `x.view(...)`),
    with a dynamic batch: each block's shape is known only after the block before it is folded."""
    rng = np.random.default_rng(0)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs: object) -> str:
        nodes.append(onnx.helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    one, axes0 = const("one", np.array(1, dtype=np.int64)), const("axes0", np.array([0], dtype=np.int64))
    rest = const("rest", np.array([8, 8, 8], dtype=np.int64))
    x = "x"
    for i in range(blocks):
        w = const(f"w{i}", (rng.standard_normal((8, 3 if i == 0 else 8, 3, 3)) * 0.3).astype(np.float32))
        r = node("Relu", [node("Conv", [x, w], f"conv{i}", pads=[1] * 4)], f"relu{i}")
        n = node("Gather", [node("Shape", [r], f"shape{i}"), const(f"i{i}", np.array(0))], f"n{i}", axis=0)
        n = node("Cast", [node("Div", [n, one], f"div{i}")], f"cast{i}", to=onnx.TensorProto.INT64)
        target = node("Concat", [node("Unsqueeze", [n, axes0], f"unsqueeze{i}"), rest], f"target{i}", axis=0)
        x = node("Reshape", [r, target], f"reshape{i}")
    node("Conv", [x, const("head.w", np.ones((4, 8, 1, 1), dtype=np.float32))], "head")
    graph = onnx.helper.make_graph(
        nodes,
        "chain",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [onnx.helper.make_tensor_value_info("head", onnx.TensorProto.FLOAT, ["batch", 4, 8, 8])],
        inits,
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_folding_runs_until_nothing_is_left_to_fold(tmp_path: Path) -> None:
    """A dynamic-batch ShuffleNetV2 exported at opset 11 needs 29 folding passes (one per channel
    shuffle, whose Reshape target is computed from the previous block's shape). Loading stopped
    after 16: the rest kept their Shape ops and unknown shapes, so the analysis froze their groups
    with misleading reasons ("grouped conv (groups=96)" for a depthwise conv whose input width was
    unknown, "Shape … reads the channel count")."""
    path = tmp_path / "chain.onnx"
    onnx.save(shape_chain(20), str(path))
    loaded = load_model(path)
    model = loaded.model
    assert not {n.op_type for n in model.graph.node} & {"Shape", "Gather", "Cast", "Concat"}
    shapes = {vi.name: vi.type.tensor_type.shape.dim for vi in model.graph.value_info}
    assert all(d.HasField("dim_value") for n in model.graph.node for d in shapes.get(n.output[0], []))
    assert [d.dim_value for d in shapes["reshape19"]] == [1, 8, 8, 8]
    assert not [g.reason for g in analyze(model).groups if "Shape" in g.reason]
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run(model, x), run(onnx.load(str(path)), x), atol=1e-5, rtol=0)


def _flatten_to_batch_one(tmp_path: Path, reshape: list[int]) -> Path:
    """conv → Reshape(`reshape`) → MatMul, exported at batch 1: a Reshape to [1, -1] fixes the batch
    inside the graph, as a traced `x.view(1, -1)` does."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.array(reshape, dtype=np.int64), "shape"),
        numpy_helper.from_array(rng.standard_normal((16 * 8 * 8, 10)).astype(np.float32), "fc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["c", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_batch_the_graph_fixes_is_named_as_such(tmp_path: Path) -> None:
    """--batch 4 on a model whose Reshape was traced at batch 1: one line saying the graph fixes the
    batch (onnx's own line only named the MatMul); the same model at its own batch loads, and one
    whose batch is a Reshape's -1 loads at batch 4."""
    fixed = _flatten_to_batch_one(tmp_path, [1, -1])
    with pytest.raises(ModelError) as err:
        load_model(fixed, {"x": [4, 3, 8, 8]})
    line = str(err.value)
    assert line.startswith("m.onnx: its shapes do not infer at x 4×3×8×8, though they do at the file's own")
    assert "(op_type:MatMul)" in line and "\n" not in line
    assert load_model(fixed).input_shapes == {"x": [1, 3, 8, 8]}
    free = _flatten_to_batch_one(tmp_path, [-1, 16 * 8 * 8])
    assert load_model(free, {"x": [4, 3, 8, 8]}).input_shapes == {"x": [4, 3, 8, 8]}


def test_a_channel_shuffle_traced_at_batch_one_is_refused_at_another_batch(tmp_path: Path) -> None:
    """ShuffleNet's channel shuffle: a Reshape to a constant [1, groups, C/groups, H, W]. At
    --input-shape batch 2 onnx's inference took that constant as it is (no error), and `apply`
    wrote a model onnxruntime could not run, exit 0. Now one line names the Reshape and the element
    counts; at its own batch it loads and runs."""
    from onnx import TensorProto, helper

    conv = helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])
    shuffle = [
        helper.make_node("Reshape", ["c", "split"], ["g"]),
        helper.make_node("Transpose", ["g"], ["t"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t", "merge"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.ones((8, 3, 3, 3), np.float32), "w"),
        numpy_helper.from_array(np.array([1, 2, 4, 8, 8], np.int64), "split"),
        numpy_helper.from_array(np.array([1, 8, 8, 8], np.int64), "merge"),
    ]
    graph = helper.make_graph(
        [conv, *shuffle],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        inits,
    )
    path = tmp_path / "shuffle.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ModelError) as err:
        load_model(path, {"x": [2, 3, 8, 8]})
    assert str(err.value) == (
        "shuffle.onnx: cannot run at x 2×3×8×8: Reshape 'Reshape_1' makes [2, 8, 8, 8] into "
        "[1, 2, 4, 8, 8], 1024 elements into 512; the graph fixes its batch or size (a Reshape's shape "
        "traced at export): export it with a dynamic batch, or run it at its own"
    )
    loaded = load_model(path)
    out = ort_session.session(loaded.model).run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})[0]
    assert out.shape == (1, 8, 8, 8)


def test_a_shape_with_start_and_end_folds_to_its_slice_not_the_whole_shape(tmp_path: Path) -> None:
    """torch.export writes `x.size(0)` as Shape(x, start=0, end=1) → Squeeze; onnx-graphsurgeon 0.6
    folds a Shape to the whole shape whatever its start and end, so with the batch fixed the Range it
    feeds got [1, 4, 8, 8] for a limit and the loaded model broke. Loading writes such a Shape as a
    Slice of the whole shape first: the folded model computes what the file does."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((0.2 * rng.standard_normal((6, 4, 3, 3))).astype(np.float32), "w"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([-1, 1, 1, 1], np.int64), "col"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Shape", ["x"], ["n1"], name="size0", start=0, end=1),
        helper.make_node("Squeeze", ["n1"], ["n"], name="squeeze"),
        helper.make_node("Range", ["zero", "n", "one"], ["idx"], name="range"),
        helper.make_node("Cast", ["idx"], ["f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["f", "col"], ["f4"], name="col4"),
        helper.make_node("Add", ["c", "f4"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes, "size0", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6, 8, 8])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(tmp_path / "size0.onnx"))
    loaded = load_model(tmp_path / "size0.onnx")
    assert not any(n.op_type in ("Shape", "Range") for n in loaded.model.graph.node)  # folded
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(run(loaded.model, x), run(model, x))


def test_constant_value_floats_and_ints_fold_to_their_onnx_types(tmp_path: Path) -> None:
    """Constant(value_float=0.5) is a float32 scalar in ONNX; onnx-graphsurgeon folded it to a
    float64 initializer, so `Mul(conv, 0.5)` became float × double and every model written from it
    failed to load in onnxruntime, exit 0. A per-channel value_floats and a value_ints Reshape shape
    likewise: loaded as float32 and int64, padded exactly, and the padded model loads."""
    from onnx import TensorProto
    from onnx import helper as h

    from deployopt.surgery import apply_plan

    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        h.make_node("Conv", ["x", "aw", "ab"], ["t"], name="a", pads=[1] * 4),
        h.make_node("Constant", [], ["half"], value_float=0.5),
        h.make_node("Mul", ["t", "half"], ["m"], name="mul"),
        h.make_node("Constant", [], ["shift"], value_floats=[0.1 * i for i in range(8)]),
        h.make_node("Constant", [], ["shape"], value_ints=[8, 1, 1]),
        h.make_node("Reshape", ["shift", "shape"], ["shift3"], name="reshape"),
        h.make_node("Add", ["m", "shift3"], ["s"], name="add"),
        h.make_node("Conv", ["s", "bw", "bb"], ["y"], name="b"),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [weight("aw", 8, 3, 3, 3), weight("ab", 8), weight("bw", 4, 8, 1, 1), weight("bb", 4)],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    loaded = load_model(path).model
    types = {t.name: t.data_type for t in loaded.graph.initializer}
    assert TensorProto.DOUBLE not in types.values(), types
    assert types["half"] == TensorProto.FLOAT
    analysis = analyze(loaded)
    assert not analysis.group("a").frozen
    padded = apply_plan(loaded, {"a": 11}, analysis)
    x = _input(model)
    np.testing.assert_allclose(run(padded, x), run(model, x), atol=1e-5, rtol=0)


def _conv_op_conv(middle: onnx.NodeProto, constants: list[onnx.TensorProto], opset: int) -> onnx.ModelProto:
    """Conv a (3→8, 8×8) → `middle` (reads "t", writes "m", with `constants`) → Conv b (8→4)."""
    from onnx import TensorProto
    from onnx import helper as h

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
        for n, s in (("aw", (8, 3, 3, 3)), ("bw", (4, 8, 1, 1)))
    ]
    nodes = [
        h.make_node("Conv", ["x", "aw"], ["t"], name="a", pads=[1] * 4),
        middle,
        h.make_node("Conv", ["m", "bw"], ["y"], name="b"),
    ]
    graph = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [*inits, *constants],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def test_apply_refuses_to_write_a_model_whose_types_clash() -> None:
    """The edited model's shape inference now checks types too: a float × double Mul (what the
    folding above made) validated, was written, and onnxruntime refused to load it."""
    from onnx import helper as h

    from deployopt.surgery import apply_plan

    half = numpy_helper.from_array(np.array(0.5, dtype=np.float64), "half")
    model = _conv_op_conv(h.make_node("Mul", ["t", "half"], ["m"], name="mul"), [half], opset=13)
    with pytest.raises(ModelError, match=r"does not validate.*double"):
        apply_plan(model, {"a": 11})


def test_a_group_norm_21_model_loads(tmp_path: Path) -> None:
    """GroupNormalization-21 is valid ONNX, but onnx's shape inference gives its output no type, and
    loading failed on the next Conv ("Input 0 expected to have type"), naming the wrong op. Its
    output now gets its input's type; its channels are frozen (it normalizes across them)."""
    from onnx import helper as h

    affine = [numpy_helper.from_array(np.ones(2, np.float32), n) for n in ("scale", "bias")]
    gn = h.make_node("GroupNormalization", ["t", "scale", "bias"], ["m"], name="gn", num_groups=2)
    model = _conv_op_conv(gn, affine, opset=21)
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    path = tmp_path / "gn21.onnx"
    onnx.save(model, str(path))
    loaded = load_model(path).model
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in loaded.graph.value_info}
    assert shapes["m"] == [1, 8, 8, 8]
    group = analyze(loaded).group("a")
    assert group.frozen and "GroupNormalization gn normalizes across channels" in group.reason


def test_a_graph_out_of_topological_order_is_sorted_with_a_notice(
    zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """onnxruntime runs a graph whose nodes are out of order; the ONNX checker refuses it, and its
    message, cut to its first line, stopped mid-sentence ("... however input 'f' of node: "). Such a
    model now loads sorted, with a notice, computes the same, and a sorted graph is left alone.
    A cycle, which no order fixes, is still one whole line."""
    src = zoo_model_path("se_net")
    model = onnx.load(str(src))
    nodes = list(model.graph.node)[::-1]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    path = tmp_path / "reversed.onnx"
    onnx.save(model, str(path))
    loaded = load_model(path)
    assert any("not in topological order" in n for n in loaded.notices), loaded.notices
    onnx.checker.check_model(loaded.model)
    x = np.random.default_rng(0).standard_normal(loaded.input_shapes["input"]).astype(np.float32)
    a, b = (ort_session.session(m).run(None, {"input": x})[0] for m in (str(src), loaded.model))
    np.testing.assert_array_equal(a, b)
    assert not any("topological" in n for n in load_model(src).notices)

    helper = onnx.helper
    cyc = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
            "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2])],
            [helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1, 2])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    onnx.save(cyc, str(tmp_path / "cycle.onnx"))
    with pytest.raises(
        ModelError, match=r"invalid ONNX model: .*topologically sorted.*previous nodes"
    ) as exc:
        load_model(tmp_path / "cycle.onnx")
    assert "\n" not in str(exc.value)


def _ir3_unet(tmp_path: Path, ir_version: int) -> Path:
    """A U-Net-like graph as pre-IR-4 exporters wrote it (every initializer also a graph input)
    with an Upsample whose scales come from a Constant node, which loading folds."""
    from onnx import TensorProto
    from onnx import helper as h

    r = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(r.standard_normal(dims).astype(np.float32), name)
        for name, dims in [
            ("w1", (13, 3, 3, 3)),
            ("b1", (13,)),
            ("w2", (8, 13, 3, 3)),
            ("w3", (5, 3, 3, 3)),
            ("w4", (4, 13, 1, 1)),
        ]
    ]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")
    nodes = [
        h.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
        h.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        h.make_node("Constant", [], ["scales"], name="k", value=scales),
        h.make_node("Upsample", ["r1", "scales"], ["u"], name="up", mode="nearest"),
        h.make_node("Conv", ["u", "w2"], ["c2"], name="conv2", pads=[1] * 4),
        h.make_node("Conv", ["x", "w3"], ["c3"], name="conv3", pads=[1] * 4),
        h.make_node("Upsample", ["c3", "scales"], ["u3"], name="up3", mode="nearest"),
        h.make_node("Concat", ["c2", "u3"], ["cat"], name="cat", axis=1),
        h.make_node("Conv", ["cat", "w4"], ["y"], name="conv4"),
    ]
    inputs = [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])] + [
        h.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in inits
    ]
    y = h.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])
    m = h.make_model(h.make_graph(nodes, "g", inputs, [y], inits), opset_imports=[h.make_opsetid("", 9)])
    m.ir_version = ir_version
    onnx.checker.check_model(m, full_check=True)
    path = tmp_path / f"ir{ir_version}.onnx"
    onnx.save(m, path)
    return path


def test_an_ir3_model_whose_constants_fold_keeps_its_shapes_and_pads_exactly(tmp_path: Path) -> None:
    """Folding exported the real inputs only, and the model kept IR 3: shape inference then ignored
    the weights (groups met by the Concat frozen "output shape unknown") and `apply` failed as an
    internal error ("w1 in initializer but not in graph input"). It reads as its IR-4 twin."""
    from deployopt.surgery import apply_plan

    def groups(path: Path) -> list[tuple[str, bool, str]]:
        return [(g.id, g.frozen, g.reason) for g in analyze(load_model(path).model).groups]

    ir3, ir4 = _ir3_unet(tmp_path, 3), _ir3_unet(tmp_path, 4)
    assert groups(ir3) == groups(ir4)
    assert not any("shape unknown" in reason for _, _, reason in groups(ir3)), groups(ir3)
    loaded = load_model(ir3)
    free = {g.id: g.width + 3 for g in analyze(loaded.model).groups if not g.frozen}
    assert {"conv1", "conv3"} <= set(free), free
    padded = apply_plan(loaded.model, free)
    onnx.checker.check_model(padded, full_check=True)
    x = _input(loaded.model)
    want = run(onnx.load(ir3), x)  # equal up to fp32 summation order (zeros added to each reduction)
    np.testing.assert_allclose(run(padded, x), want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_no_folding_notice_where_nothing_folded(tmp_path: Path) -> None:
    """A Shape of a data-dependent tensor (NonZero's, an NMS's boxes) cannot fold: load tried, and
    said "folded constant subgraphs: 3 → 3 nodes" (a model apply wrote said it on every load)."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    w = nh.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [
        h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        h.make_node("NonZero", ["c"], ["nz"], name="nonzero"),
        h.make_node("Shape", ["nz"], ["s"], name="shape"),
    ]
    outputs = [
        h.make_tensor_value_info("c", T.FLOAT, [1, 4, 8, 8]),
        h.make_tensor_value_info("s", T.INT64, [2]),
    ]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])], outputs, [w])
    path = tmp_path / "nonzero.onnx"
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), str(path))
    loaded = load_model(path)
    assert len(loaded.model.graph.node) == 3 and loaded.notices == []
