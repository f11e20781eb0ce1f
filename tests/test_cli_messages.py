"""Messages of a bug bash of the CLI: notices never folded in a log, models the torch backend or the
fidelity check cannot feed or convert refused in one line naming the tensor, --input-shape's dims
in ASCII digits, a dynamic-dims notice cut between words with its likely cause, and analyze's
depthwise rows naming the depthwise terms' source."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """`deployopt ARGS` in a log 80 columns wide (stderr and stdout not a terminal)."""

    def go(*args: str, columns: int = 80) -> tuple[int, str, str]:
        return run_cli(monkeypatch, capsys, *args, columns=columns)

    return go


def one_line_each(text: str, prefixes: tuple[str, ...]) -> list[str]:
    """The lines of `text` starting with one of `prefixes`, after checking that none of them was
    folded: a folded line leaves a piece starting with none of the words a line starts with."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert all(line.startswith(prefixes) for line in lines), text
    return lines


def conv_chain(
    extra_inputs: list[onnx.ValueInfoProto] | None = None,
    extra_nodes: list[onnx.NodeProto] | None = None,
    extra_outputs: list[onnx.ValueInfoProto] | None = None,
    extra_inits: list[onnx.TensorProto] | None = None,
) -> onnx.ModelProto:
    """x (1×3×8×8) → conv 12 → relu → conv 4 → y, plus what a test adds beside it."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
        *(extra_nodes or []),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]), *(extra_inputs or [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8]), *(extra_outputs or [])],
        [weight("w1", 12, 3, 3, 3), weight("b1", 12), weight("w2", 4, 12, 3, 3), *(extra_inits or [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def string_input_model() -> onnx.ModelProto:
    """The chain with a string input `s` passed through to an output."""
    return conv_chain(
        extra_inputs=[helper.make_tensor_value_info("s", TensorProto.STRING, [1])],
        extra_nodes=[helper.make_node("Identity", ["s"], ["so"], name="pass")],
        extra_outputs=[helper.make_tensor_value_info("so", TensorProto.STRING, [1])],
    )


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


# -- 1. notices, progress and result lines are one line each in a log -----------------------------


def test_apply_notices_are_not_folded_at_80_columns(
    run: Run, zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {"stem.conv": 8}}))  # a trim, no kept channels listed
    code, _, err = run(
        "apply", str(zoo_model_path("resnet_projection")), "--plan", str(plan), "-o", str(tmp_path / "o.onnx")
    )
    assert code == 0, err
    (notice,) = one_line_each(err, ("notice:",))
    assert "ranked by filter L1" in notice and len(notice) > 80


def test_verify_notice_and_inputs_line_are_not_folded_at_80_columns(
    run: Run, zoo_model_path: Callable[[str], Path]
) -> None:
    model = str(zoo_model_path("resnet_projection_dynamic"))
    code, out, err = run("verify", model, model)
    assert code == 0, err
    notices = one_line_each(err, ("notice:",))
    assert any("batch dimension of 'input'" in n and "dynamic batch back" in n for n in notices), err
    inputs = [line for line in out.splitlines() if line.startswith("inputs:")]
    assert len(inputs) == 1 and inputs[0].endswith("pass --calibration-data for that"), out


def test_optimize_traffic_and_refused_lines_are_not_folded() -> None:
    from rich.console import Console

    from deployopt.cli.optimize_cmd import _progress_callback
    from deployopt.cli.progress import LineProgress

    buffer = io.StringIO()
    progress = LineProgress(Console(file=buffer, width=80, markup=False, emoji=False))
    on_event = _progress_callback(progress)
    why = "fitted 546.40 ± 81.62 µs/MB over 3 measured plans, priced at 31.06 (its one-sided 95% lower bound)"
    on_event("traffic", fit=SimpleNamespace(why=why, used=True))
    on_event("refused", label="solver #3", reason="its fidelity is below the gate: " + "cosine 0.91 " * 8)
    lines = one_line_each(buffer.getvalue(), ("traffic", "refused"))
    assert lines[0] == f"traffic non-conv ops: {why}; priced in the table"
    assert lines[1].startswith("refused solver #3: its fidelity") and len(lines) == 2


# -- 2, 3. the torch backend: outputs no node computes, string inputs ------------------------------

CONSTANT_OUTPUTS = {
    "constant_node": conv_chain(
        extra_nodes=[
            helper.make_node(
                "Constant", [], ["k"], value=numpy_helper.from_array(np.ones(2, np.float32), "kv")
            )
        ],
        extra_outputs=[helper.make_tensor_value_info("k", TensorProto.FLOAT, [2])],
    ),
    "initializer": conv_chain(
        extra_inits=[numpy_helper.from_array(np.ones(2, np.float32), "k")],
        extra_outputs=[helper.make_tensor_value_info("k", TensorProto.FLOAT, [2])],
    ),
    "zero_size_initializer": conv_chain(
        extra_inits=[numpy_helper.from_array(np.zeros(0, np.float32), "z")],
        extra_nodes=[helper.make_node("Concat", ["z", "z"], ["k"], name="cat", axis=0)],
        extra_outputs=[helper.make_tensor_value_info("k", TensorProto.FLOAT, [0])],
    ),
}


@pytest.mark.parametrize("how", sorted(CONSTANT_OUTPUTS))
def test_torch_refuses_a_constant_output_before_conversion(how: str, tmp_path: Path) -> None:
    from deployopt.backends.ort import prepare_model
    from deployopt.backends.torch_worker import refuse_unconvertible
    from deployopt.errors import ModelError

    loaded = prepare_model(save(CONSTANT_OUTPUTS[how], tmp_path / "m.onnx"))
    with pytest.raises(ModelError, match=r"^graph output 'k' of m\.onnx is a constant .*no node computes it"):
        refuse_unconvertible(loaded.model, "m.onnx")


def test_torch_refuses_the_graph_input_as_an_output(tmp_path: Path) -> None:
    from deployopt.backends.ort import prepare_model
    from deployopt.backends.torch_worker import refuse_unconvertible
    from deployopt.errors import ModelError

    model = conv_chain(extra_outputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])])
    loaded = prepare_model(save(model, tmp_path / "m.onnx"))
    with pytest.raises(ModelError, match=r"^graph output 'x' of m\.onnx is the graph input 'x' itself"):
        refuse_unconvertible(loaded.model, "m.onnx")


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (
            CONSTANT_OUTPUTS["constant_node"],
            "error: graph output 'k' of m.onnx is a constant once constants are folded",
        ),
        (string_input_model(), "error: input 's' of m.onnx takes strings, which torch has no tensors for"),
    ],
    ids=["constant_output", "string_input"],
)
def test_bench_torch_refuses_in_one_line(
    run: Run, tmp_path: Path, model: onnx.ModelProto, expected: str
) -> None:
    pytest.importorskip("onnx2torch")
    path = save(model, tmp_path / "m.onnx")
    code, _, err = run("bench", str(path), "--backend", "torch", "--runs", "2", "--warmup", "1", columns=200)
    assert code != 0
    assert err.startswith(expected) and err.count("\n") == 1, err
    assert "--backend ort" in err and "Traceback" not in err


# -- 3. verify and optimize: a string input -----------------------------------------------------


def test_verify_refuses_a_string_input_in_one_line(run: Run, tmp_path: Path) -> None:
    path = str(save(string_input_model(), tmp_path / "m.onnx"))
    code, _, err = run("verify", path, path, columns=200)
    assert code != 0
    assert err.startswith("error: reference model input 's' takes strings") and err.count("\n") == 1, err
    assert "ONNXRuntimeError" not in err


def test_optimize_refuses_a_string_input_in_one_line(run: Run, tmp_path: Path) -> None:
    path = str(save(string_input_model(), tmp_path / "m.onnx"))
    out = tmp_path / "out"
    code, _, err = run("optimize", path, "-b", "model", "-t", "h100", "-o", str(out), columns=200)
    assert code != 0
    assert err.startswith("error: the model input 's' takes strings") and err.count("\n") == 1, err
    assert not out.exists()


# -- 4. --input-shape: ASCII digits only -------------------------------------------------------


@pytest.mark.parametrize("dims", ["1x3x1_6x16", "1x3x\uff11\uff16x16", "1x3x16x16.0"])
def test_input_shape_takes_ascii_digits_only(
    run: Run, zoo_model_path: Callable[[str], Path], dims: str
) -> None:
    code, out, err = run(
        "analyze", str(zoo_model_path("resnet_projection")), "--input-shape", f"input:{dims}"
    )
    assert code != 0 and not out
    assert err == (
        f"error: --input-shape 'input:{dims}': dimensions must be integers in ASCII digits joined by "
        "'x', such as input:1x3x224x224\n"
    )


def test_input_shape_still_takes_plain_dims() -> None:
    from deployopt.cli.app import parse_input_shapes

    assert parse_input_shapes(["input:1X3x 16 x16"]) == {"input": [1, 3, 16, 16]}


# -- 5. the dynamic-dims notice: cut between words, its likely cause -----------------------------


def resize_model(
    dynamic: tuple[str | int, ...], scale_from_shape: bool, joined: bool = False
) -> onnx.ModelProto:
    """conv → Resize (linear) → conv, the Resize's sizes computed from the conv output's shape as
    exporters write them: N and C taken from it, H and W either fixed 16×16 or twice its own.
    `joined`: the Resize reads the conv output joined to itself on the batch axis, so its folded
    sizes[0] is twice the batch (one equal to the batch, restoring computes from the shape again)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((4, 8, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([2], np.int64), "two"),
        numpy_helper.from_array(np.array([4], np.int64), "four"),
        numpy_helper.from_array(np.array([16, 16], np.int64), "hw16"),
        numpy_helper.from_array(np.array([2, 2], np.int64), "twice"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c" if joined else "y"], name="conv", pads=[1, 1, 1, 1]),
        *([helper.make_node("Concat", ["c", "c"], ["y"], name="join", axis=0)] if joined else []),
        helper.make_node("Shape", ["y"], ["shape"], name="shape"),
        helper.make_node("Slice", ["shape", "zero", "two"], ["nc"], name="nc"),
    ]
    if scale_from_shape:
        nodes += [
            helper.make_node("Slice", ["shape", "two", "four"], ["hw"], name="hw"),
            helper.make_node("Mul", ["hw", "twice"], ["hw2"], name="hw2"),
            helper.make_node("Concat", ["nc", "hw2"], ["sizes"], name="sizes", axis=0),
        ]
    else:
        nodes.append(helper.make_node("Concat", ["nc", "hw16"], ["sizes"], name="sizes", axis=0))
    nodes += [
        helper.make_node("Resize", ["y", "", "", "sizes"], ["r"], name="up", mode="linear"),
        helper.make_node("Conv", ["r", "w2"], ["out"], name="head", pads=[1, 1, 1, 1]),
    ]
    n, h, w = dynamic
    out_hw = [f"{h}2", f"{w}2"] if isinstance(h, str) else [16, 16]
    graph = helper.make_graph(
        nodes,
        "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 3, h, w])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [f"{n}2" if joined else n, 4, *out_hw])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # opset 17's own: a newer onnx writes IR 14, which onnxruntime 1.23 cannot read
    onnx.checker.check_model(model)
    return model


def test_dynamic_batch_notice_is_cut_between_words_and_names_the_resize(run: Run, tmp_path: Path) -> None:
    path = save(resize_model(("N", 8, 8), scale_from_shape=False, joined=True), tmp_path / "m.onnx")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {"conv": 16}}))
    code, _, err = run("apply", str(path), "--plan", str(plan), "-o", str(tmp_path / "o.onnx"), columns=200)
    assert code == 0, err
    (notice,) = [n for n in one_line_each(err, ("notice:",)) if "static batch" in n]
    reason = notice.split("could not be restored (", 1)[1]
    said, _, cause = reason.partition(" …; likely cause: ")
    assert said.startswith("Resize 'up': 'Linear' mode only supports") and " " in said, notice
    assert said.split()[-1] in onnx_resize_message_words(), notice  # a whole word before the cut
    assert cause == (
        "Resize 'up' has constant output sizes 2×16×16×16, computed for the shape loaded, which fit "
        "no other batch)"
    )


def onnx_resize_message_words() -> set[str]:
    """The words of onnxruntime's Linear-mode Resize refusal (as it says them at batch 2)."""
    import onnxruntime as ort

    model = resize_model((2, 8, 8), scale_from_shape=False)
    sizes = numpy_helper.from_array(np.array([1, 8, 16, 16], np.int64), "fixed")
    model.graph.initializer.append(sizes)
    for node in model.graph.node:
        if node.op_type == "Resize":
            node.input[3] = "fixed"
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    try:
        sess.run(None, {"x": np.zeros((2, 3, 8, 8), np.float32)})
    except Exception as exc:  # onnxruntime's own error type
        return set(str(exc).split())
    raise AssertionError("onnxruntime ran a Resize to batch 1 of a batch of 2")


def test_dynamic_size_notice_names_a_resize_folded_to_constant_sizes(run: Run, tmp_path: Path) -> None:
    path = save(resize_model((1, "H", "W"), scale_from_shape=True), tmp_path / "m.onnx")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {"conv": 16}}))
    code, _, err = run(
        *("apply", str(path), "--input-shape", "x:1x3x8x8"),
        *("--plan", str(plan), "-o", str(tmp_path / "o.onnx")),
        columns=200,
    )
    assert code == 0, err
    (notice,) = [n for n in one_line_each(err, ("notice:",)) if "dynamic size could not be kept" in n]
    assert notice.endswith(
        "; likely cause: Resize 'up' has constant output sizes 1×16×16×16, computed for the shape "
        "loaded, which fit no other size)"
    ), notice


def test_onnxruntime_reason_cuts_between_words() -> None:
    from deployopt.errors import onnxruntime_reason

    text = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : " + " ".join(["outermost"] * 60)
    reason = onnxruntime_reason(RuntimeError(text))
    assert reason.endswith("outermost …") and len(reason) <= 302


def test_resize_hint_names_the_resize_the_reason_names_and_skips_empty_sizes() -> None:
    """Of two folded Resizes, the one onnxruntime's reason names, also where the size check's reason
    starts with the size it ran (`at x 1x3x8x8: …`); an empty `sizes` (scales given) is no cause."""
    from deployopt.batch import constant_resize_hint

    inits = [
        numpy_helper.from_array(np.array([1, 3, 8, 8], np.int64), "s1"),
        numpy_helper.from_array(np.array([1, 3, 16, 16], np.int64), "s2"),
        numpy_helper.from_array(np.array([], np.int64), "none"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    two = helper.make_model(
        helper.make_graph(
            [
                helper.make_node("Resize", ["x", "", "", "s1"], ["a"], name="up1"),
                helper.make_node("Resize", ["a", "", "", "s2"], ["y"], name="up2"),
            ],
            "g",
            [x],
            [y],
            inits,
        )
    )
    for why, dims in (
        ("Resize 'up2': bad scales", "batch"),
        ("at x 1x3x8x8: the written model fails: Resize 'up2': bad scales", "size"),
    ):
        hint = constant_resize_hint(two, why, dims)
        assert "Resize 'up2' (and 1 more Resize) has constant output sizes 1×3×16×16" in hint, hint
    scales_only = helper.make_model(
        helper.make_graph(
            [helper.make_node("Resize", ["x", "", "scales", "none"], ["y"], name="up")], "g", [x], [y], inits
        )
    )
    assert constant_resize_hint(scales_only, "Add 'add': broadcast", "size") == ""


# -- 6. analyze --json: a depthwise row's source ----------------------------------------------


def test_analyze_json_depthwise_rows_name_the_depthwise_source(
    run: Run, zoo_model_path: Callable[[str], Path]
) -> None:
    from deployopt.targets import get_target

    code, out, err = run("analyze", str(zoo_model_path("mobilenet_like")), "--target", "h200", "--json")
    assert code == 0, err
    waves = json.loads(out)["waves"]
    params = get_target("h200").wave_params(waves["dtype"])
    assert waves["source"] == params.source  # the table's GEMM fit, as before
    sources = {row["name"]: row["source"] for row in waves["convs"]}
    depthwise = {n for n in sources if ".dw." in n}
    assert depthwise and len(depthwise) < len(sources)
    assert params.dw_source != params.source
    assert all(sources[n] == params.dw_source for n in depthwise)
    assert all(s == params.source for n, s in sources.items() if n not in depthwise)


def test_quoted_library_messages_are_cut_between_words(tmp_path: Path) -> None:
    """Every one-line error quoting a library's long message cuts it between words with ` …`: a
    cut at a fixed length left half a word (`outermos`) and no sign that more was said."""
    from deployopt.backends.ort import _first_line
    from deployopt.errors import ModelError, shorten
    from deployopt.fidelity import _run
    from deployopt.model import load_model
    from deployopt.remote import tail

    words = " ".join(["outermost"] * 80)

    class Failing:
        def run(self, *_: object) -> None:
            raise RuntimeError(words)

    with pytest.raises(Exception) as failed_run:
        _run(Failing(), {}, "candidate")
    # the checker's message quotes a tensor no node computes, here named at length
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    add = helper.make_node("Add", ["x", words], ["y"], name="add")
    bad = helper.make_model(
        helper.make_graph([add], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    bad.ir_version = 8
    onnx.save(bad, tmp_path / "bad.onnx")
    with pytest.raises(ModelError) as invalid:
        load_model(tmp_path / "bad.onnx")
    quoted = [
        str(failed_run.value),
        _first_line(RuntimeError(words)),
        tail("[E] " + words),
        str(invalid.value),
    ]
    for text in quoted:
        assert text.endswith("outermost …"), text
    # one long word (a path-like name) is cut within, not dropped whole
    assert shorten("at " + "x" * 500, 50) == "at " + "x" * 47 + " …"
