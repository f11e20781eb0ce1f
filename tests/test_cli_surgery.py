"""`deployopt analyze` / `deployopt apply` end to end: output, exit status, no file left on errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import ort_session
import pytest
from cli_runner import run_cli

from deployopt.coupling import analyze
from deployopt.model import load_model


def cli(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, *args)


def widen_first_free_group(src: Path, tmp_path: Path) -> tuple[Any, Path]:
    """(the first free group, a plan file padding it by 8): the edit the output-path tests write."""
    free = analyze(load_model(src).model).free_groups()[0]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {free.id: free.width + 8}}))
    return free, plan


def run(path: Path) -> np.ndarray:
    sess = ort_session.session(str(path))
    x = np.random.default_rng(0).standard_normal([1, 3, 32, 32]).astype(np.float32)
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def test_analyze_json(zoo_model_path: Callable[[str], Path], capsys, monkeypatch) -> None:
    path = zoo_model_path("se_net")
    code, out, _ = cli(["analyze", str(path), "--json"], capsys, monkeypatch)
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"groups", "convs", "notices"}
    expected = analyze(load_model(path).model).to_json()
    assert data["groups"] == expected["groups"] and data["convs"] == expected["convs"]
    for g in data["groups"]:
        assert {"id", "width", "frozen", "reason", "producers", "consumers"} <= set(g)


def test_analyze_table_and_notice(zoo_model_path: Callable[[str], Path], capsys, monkeypatch) -> None:
    code, out, err = cli(
        ["analyze", str(zoo_model_path("resnet_projection_dynamic")), "--convs"], capsys, monkeypatch
    )
    assert code == 0
    assert "14 channel groups, 12 free" in out
    assert "frozen: feeds the graph output 'logits'" in out and "stem.conv" in out
    assert "20 convs" in out  # the --convs table
    assert "notice: batch dimension of 'input' (batch) was dynamic; fixed to 1" in err


@pytest.mark.slow
def test_analyze_yolov8_detect_head(yolo_detect: tuple[Path, object], capsys, monkeypatch) -> None:
    code, out, _ = cli(["analyze", str(yolo_detect[0]), "--convs"], capsys, monkeypatch)
    assert code == 0
    assert "channel groups, 59 free" in out and "/detect/cv3.2/cv3.2.1/conv/Conv" in out


def test_analyze_input_shape(zoo_model_path: Callable[[str], Path], capsys, monkeypatch) -> None:
    path = str(zoo_model_path("resnet_projection_dynamic"))
    code, out, _ = cli(["analyze", path, "--json", "--input-shape", "input:2x3x32x32"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["notices"] == []
    assert json.loads(out)["convs"][0]["shape"]["n"] == 2
    code, _, err = cli(["analyze", path, "--input-shape", "image:1x3x32x32"], capsys, monkeypatch)
    assert code == 2
    assert err.strip().endswith("has no such input; its inputs: input") and err.count("\n") == 1


@pytest.mark.parametrize(("make", "message"), [("missing", "no such file"), ("garbage", "not an ONNX model")])
def test_analyze_bad_file(make: str, message: str, tmp_path: Path, capsys, monkeypatch) -> None:
    path = tmp_path / "m.onnx"
    if make == "garbage":
        path.write_bytes(b"\x08\x07garbage")
    code, out, err = cli(["analyze", str(path)], capsys, monkeypatch)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1
    assert "Traceback" not in err


def test_apply_pads_and_output_is_equal(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, capsys, monkeypatch
) -> None:
    src = zoo_model_path("se_net")
    free = analyze(load_model(src).model).free_groups()
    plan = {"widths": {free[0].id: free[0].width + 16, free[1].id: free[1].width - 1}}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out_path = tmp_path / "out.onnx"
    code, out, _ = cli(
        ["apply", str(src), "--plan", str(tmp_path / "plan.json"), "-o", str(out_path)], capsys, monkeypatch
    )
    assert code == 0
    assert f"{free[0].width} → {free[0].width + 16}" in out and "pad +16 (zero filters)" in out
    assert "trim −1 (0 dead, rest by smallest L1)" in out and f"wrote {out_path}" in out
    widths = {g.id: g.width for g in analyze(load_model(out_path).model).groups}
    assert widths[free[0].id] == free[0].width + 16 and widths[free[1].id] == free[1].width - 1
    only_pad = tmp_path / "pad.json"
    only_pad.write_text(json.dumps({"widths": {free[0].id: free[0].width + 16}}))
    code, out, _ = cli(
        ["apply", str(src), "--plan", str(only_pad), "-o", str(out_path), "--json"], capsys, monkeypatch
    )
    assert code == 0 and json.loads(out)["changes"][0]["padded"] == 16
    assert json.loads(out)["trim_order"] is None  # a pad ranks no channel (it said "l1")
    np.testing.assert_allclose(run(out_path), run(src), atol=1e-4, rtol=0)


def test_apply_with_calibration_data_ranks_the_trim_on_it(tmp_path: Path, capsys, monkeypatch) -> None:
    """`apply --calibration-data`: the trim drops the channel that adds least on the data (read with
    zero weights, the largest filters), and says so; without it, the smallest filters (L1)."""
    from test_trim_order import kept_filters, two_convs

    model, gid = two_convs(read0=0.0)
    src, plan, data = tmp_path / "m.onnx", tmp_path / "plan.json", tmp_path / "calib.npy"
    onnx.save(model, str(src))
    plan.write_text(json.dumps({"widths": {gid: 3}}))
    np.save(data, np.random.default_rng(0).standard_normal((4, 2, 8, 8)).astype(np.float32))
    out_path = tmp_path / "out.onnx"
    args = ["apply", str(src), "--plan", str(plan), "-o", str(out_path)]
    code, out, _ = cli([*args, "--calibration-data", str(data), "--count", "2"], capsys, monkeypatch)
    assert code == 0 and "trim −1 (0 dead, rest by least activation × weight on the data)" in out
    assert kept_filters(onnx.load(str(out_path))) == [1.0, 2.0, 3.0]
    code, out, _ = cli([*args, "--json"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["trim_order"] == "l1"
    assert kept_filters(onnx.load(str(out_path))) == [5.0, 2.0, 3.0]
    out_path.unlink()
    missing = ["--calibration-data", str(tmp_path / "missing")]
    for bad in (missing, ["--calibration-data", str(data), "--count", "0"]):
        code, out, err = cli([*args, *bad], capsys, monkeypatch)
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
        assert not out_path.exists()
    code, _, err = cli([*args, "--count", "2"], capsys, monkeypatch)  # it was ignored: an L1 trim
    assert (code, err) == (2, "error: --count needs --calibration-data\n") and not out_path.exists()


def test_apply_says_which_calibration_images_it_left_out(tmp_path: Path, capsys, monkeypatch) -> None:
    """The 20 bundled CIFAR-10 images at batch 8: two batches, the last 4 left out. `apply` ranked
    on them without a word (only `verify` printed the loader's notices); now it prints and reports it."""
    from deployopt.coupling import analyze
    from deployopt.zoo.graphs import resnet_projection

    model = resnet_projection(stage_widths=(8, 16), blocks_per_stage=1, batch=8)
    gid = next(g.id for g in analyze(model).groups if not g.frozen and g.width > 4)
    src, plan, out_path = tmp_path / "m.onnx", tmp_path / "plan.json", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    plan.write_text(json.dumps({"widths": {gid: 4}}))
    cifar = Path(__file__).resolve().parents[1] / "calibration_data" / "cifar10"
    args = ["apply", str(src), "--plan", str(plan), "-o", str(out_path), "--calibration-data", str(cifar)]
    note = "20 images do not fill batches of 8: the last 4 are left out"
    code, out, _ = cli([*args, "--json"], capsys, monkeypatch)
    assert code == 0 and note in json.loads(out)["notices"] and json.loads(out)["trim_order"] == "activation"
    # which image options the ranking's tensors were made with: ImageNet's unless told otherwise
    assert json.loads(out)["image_preprocess"] == {
        "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "scale": 1 / 255,
        "channel_order": "RGB", "resize": "stretch",
    }  # fmt: skip
    code, out, err = cli(args, capsys, monkeypatch)
    assert code == 0 and f"notice: {note}\n" in err
    assert "(images: scale 1/255, mean 0.485,0.456,0.406" in out
    code, out, _ = cli([*args, "--json", "--mean", "0", "--std", "1"], capsys, monkeypatch)
    assert code == 0 and json.loads(out)["image_preprocess"]["mean"] == [0.0]


def test_apply_on_a_model_onnxruntime_cannot_load_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """A trim of a group with a zero filter runs the model to see whether that channel is dead; an op
    onnxruntime lacks past the group was a raw onnxruntime Fail traceback, with or without data."""
    from test_trim_order import unknown_op_model

    model, gid = unknown_op_model(zero_filter=True)
    src, plan, out_path = tmp_path / "m.onnx", tmp_path / "plan.json", tmp_path / "out.onnx"
    onnx.save(model, str(src))
    plan.write_text(json.dumps({"widths": {gid: 3}}))
    code, _, err = cli(["apply", str(src), "--plan", str(plan), "-o", str(out_path)], capsys, monkeypatch)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: finding dead channels: onnxruntime cannot load the model: ")
    assert not out_path.exists()


@pytest.mark.parametrize(
    ("widths", "message"),
    [
        ({"nope": 8}, "unknown channel group 'nope'"),
        ({"classifier.fc": 16}, "group 'classifier.fc' is frozen (feeds the graph output 'logits')"),
        ({"stem.conv": 0}, "width of group 'stem.conv' must be at least 1, got 0"),
    ],
)
def test_apply_bad_plan_leaves_no_file(
    widths: dict,
    message: str,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    capsys,
    monkeypatch,
) -> None:
    (tmp_path / "plan.json").write_text(json.dumps({"widths": widths}))
    out_path = tmp_path / "out" / "out.onnx"
    args = [
        "apply",
        str(zoo_model_path("se_net")),
        "--plan",
        str(tmp_path / "plan.json"),
        "-o",
        str(out_path),
    ]
    code, _, err = cli(args, capsys, monkeypatch)
    assert code == 2 and message in err and err.count("\n") == 1
    assert err.startswith(f"error: {tmp_path / 'plan.json'}: "), err  # which file is wrong
    assert not out_path.exists() and not (out_path.parent.exists() and any(out_path.parent.iterdir()))


def test_apply_no_conv_model(tmp_path: Path, capsys, monkeypatch) -> None:
    inp = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    out = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    graph = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "g", [inp], [out])
    onnx.save(onnx.helper.make_model(graph), str(tmp_path / "relu.onnx"))
    (tmp_path / "plan.json").write_text('{"widths": {}}')
    args = [
        "apply",
        str(tmp_path / "relu.onnx"),
        "--plan",
        str(tmp_path / "plan.json"),
        "-o",
        str(tmp_path / "o.onnx"),
    ]
    code, _, err = cli(args, capsys, monkeypatch)
    assert code == 2 and "no Conv node: nothing to optimize" in err
    assert not (tmp_path / "o.onnx").exists()


def test_apply_keeps_external_data_layout(
    zoo_model: Callable[[str], onnx.ModelProto],
    tmp_path: Path,
    capsys,
    monkeypatch,
) -> None:
    src = tmp_path / "ext.onnx"
    onnx.save(
        zoo_model("se_net"), str(src), save_as_external_data=True, location="ext.data", size_threshold=0
    )
    (tmp_path / "plan.json").write_text(json.dumps({"widths": {"stem.conv": 32}}))
    out_path = tmp_path / "out" / "padded.onnx"
    code, _, _ = cli(
        ["apply", str(src), "--plan", str(tmp_path / "plan.json"), "-o", str(out_path)], capsys, monkeypatch
    )
    assert code == 0
    assert sorted(p.name for p in out_path.parent.iterdir()) == ["padded.onnx", "padded.onnx.data"]
    assert load_model(out_path).external_data
    # an in-file model written over it: the old padded.onnx.data is the replaced model's weights,
    # which nothing written now reads; it was left without a word, and is now named (not deleted)
    inline = tmp_path / "inline.onnx"
    onnx.save(zoo_model("se_net"), str(inline))
    code, _, err = cli(
        ["apply", str(inline), "--plan", str(tmp_path / "plan.json"), "-o", str(out_path)],
        capsys,
        monkeypatch,
    )
    assert code == 0 and not load_model(out_path).external_data
    assert err.startswith(
        f"warning: {out_path}.data is left beside {out_path}: it holds the weights of the model"
    )


def test_analyze_target_adds_wave_columns(zoo_model_path: Callable[[str], Path], capsys, monkeypatch) -> None:
    from deployopt.targets import get_target
    from deployopt.waves import conv_rows

    path = zoo_model_path("vgg16_pruned")
    code, out, _ = cli(
        ["analyze", str(path), "--json", "--target", "h200", "--sms", "8"], capsys, monkeypatch
    )
    assert code == 0
    waves = json.loads(out)["waves"]
    assert (waves["target"], waves["sms"], waves["dtype"]) == ("h200", 8, "fp16")
    analysis = analyze(load_model(path).model)
    rows = [{k: v for k, v in r.items() if k != "source"} for r in waves["convs"]]  # what priced it
    assert rows == json.loads(json.dumps(conv_rows(analysis, get_target("h200", sms=8), "fp16")))
    assert [r["name"] for r in waves["convs"]] == [c.name for c in analysis.convs]
    code, out, _ = cli(["analyze", str(path), "--target", "h200", "--sms", "8"], capsys, monkeypatch)
    assert code == 0 and "waves on h200 (8 SMs, fp16)" in out and "predicted by the wave model" in out


def test_analyze_target_names_the_launch_bound_convs(
    zoo_model_path: Callable[[str], Path], capsys, monkeypatch
) -> None:
    """The CIFAR ResNet at batch 1 is small: on the full H200 every conv is mostly fixed cost, on
    an Orin Nano 8GB's 8 SMs about a third are (Orin's rate corrected 2026-12-06; a few before).
    Each row carries its size class, and the text names the
    launch-bound convs so nobody acts on their wave-aligned widths."""
    from deployopt.targets import get_target
    from deployopt.waves import size_class

    path = str(zoo_model_path("resnet56_pruned"))
    code, out, _ = cli(["analyze", path, "--json", "--target", "h200"], capsys, monkeypatch)
    rows = json.loads(out)["waves"]["convs"]
    assert code == 0 and {r["size_class"] for r in rows} == {"launch-bound"}
    code, out, _ = cli(["analyze", path, "--target", "h200"], capsys, monkeypatch)
    text = " ".join(out.split())
    first = ", ".join(r["name"] for r in rows[:8])
    n = len(rows)
    assert f"{n} of {n} convs are launch-bound (predicted under 1.75× the fixed cost: {first}, … " in text
    assert f"({len(rows) - 8} more)): mostly fixed cost" in text and "convs are small" not in text

    code, out, _ = cli(["analyze", path, "--json", "--target", "orin-nano-8gb"], capsys, monkeypatch)
    rows = json.loads(out)["waves"]["convs"]
    params = get_target("orin-nano-8gb").wave_params("fp16")
    assert [r["size_class"] for r in rows] == [size_class(r["predicted_us"], params) for r in rows]
    launch = [r["name"] for r in rows if r["size_class"] == "launch-bound"]
    small = sum(r["size_class"] == "small" for r in rows)
    assert len(launch) > 8 and small and len(launch) + small <= len(rows)
    code, out, _ = cli(["analyze", path, "--target", "orin-nano-8gb"], capsys, monkeypatch)
    text = " ".join(out.split())
    assert (
        f"{len(launch)} of {len(rows)} convs are launch-bound (predicted under 1.75× the fixed cost: " in text
    )
    assert ", ".join(launch[:8]) + f", … ({len(launch) - 8} more)): mostly fixed cost" in text
    assert f"{small} of {len(rows)} convs are small (predicted under 4× the fixed cost): part fixed" in text


def test_analyze_predicts_a_quantized_model_in_int8_as_optimize_searches_it(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """`analyze q.onnx --target T` predicted fp16 where `optimize` defaults a Q/DQ model to int8:
    both now take the dtype from one function (int8 for Q/DQ, else fp16), and the output says it.
    On a target without INT8 analyze says the model is quantized, as optimize does; --dtype fp16
    still predicts fp16 there."""
    from test_coupling_qdq import qdq_net

    model = tmp_path / "q.onnx"
    onnx.save(qdq_net(), str(model))
    code, out, err = cli(["analyze", str(model), "--target", "t4", "--json"], capsys, monkeypatch)
    assert code == 0, err
    assert json.loads(out)["waves"]["dtype"] == "int8"
    code, out, err = cli(["analyze", str(model), "--target", "t4"], capsys, monkeypatch)
    assert code == 0 and "waves on t4 (40 SMs, int8)" in out, err
    code, out, err = cli(["analyze", str(model), "--target", "nano"], capsys, monkeypatch)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: q.onnx is quantized (Q/DQ nodes), so it runs in INT8, which Jetson Nano")
    code, out, err = cli(["analyze", str(model), "--target", "nano", "--dtype", "fp16"], capsys, monkeypatch)
    assert code == 0 and "waves on nano (1 SM, fp16)" in out, err


def test_analyze_target_errors(zoo_model_path: Callable[[str], Path], capsys, monkeypatch) -> None:
    path = str(zoo_model_path("vgg16_pruned"))
    code, _, err = cli(["analyze", path, "--sms", "8"], capsys, monkeypatch)
    assert code == 2 and err.strip() == "error: --sms needs --target"
    code, _, err = cli(["analyze", path, "--target", "nosuchgpu"], capsys, monkeypatch)
    assert code == 2 and "unknown target 'nosuchgpu'" in err and err.count("\n") == 1


def test_waves_table_names_a_flat_span_instead_of_an_empty_cell() -> None:
    """A group whose predicted latency does not step anywhere in width/2 … 2·width gets "flat
    lo–hi (no step)": an empty cell read as missing data."""
    from rich.console import Console

    from deployopt.cli.surgery_cmd import waves_table
    from deployopt.targets import get_target
    from deployopt.waves import conv_rows

    path = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"
    rows = conv_rows(analyze(load_model(path).model), get_target("orin-nano-8gb"), "fp16")
    stem = rows[0]["widths"][0]
    assert (stem["group"], stem["width"], stem["below"], stem["above"]) == ("stem.conv", 16, None, None)
    assert stem["searched"] == [8, 32]
    console = Console(record=True, width=200)
    console.print(waves_table(rows, title="t"))
    text = console.export_text()
    assert "stem.conv (out) 16: flat 8–32 (no step)" in text
    assert "stem.conv (in) 16: ↓8 (" in text  # a step exists below 16 where stem.conv is an input
    # 16 itself ends a step there: it was shown as a move "↑16 (+0.0)" to the width it already has
    assert "stem.conv (in) 16: ↓8 (-2.2) =16 (ends a step)" in text
    assert "↑16 (+0.0)" not in text
    # a pruned 11 in a span flat at the aligned widths: not "flat 8–22 (no step)", but 8 and 16,
    # each predicted faster than 11's unaligned kernel (by what staircase predicts for the conv)
    conv = next(r for r in rows if r["name"] == "layer1.0.conv1.conv")
    out = next(w for w in conv["widths"] if w["role"] == "out")
    assert (out["width"], out["below"], out["above"]) == (11, 8, 16)
    from deployopt.waves import staircase

    target = get_target("orin-nano-8gb")
    shape = next(c.shape for c in analyze(load_model(path).model).convs if c.name == "layer1.0.conv1.conv")
    us = {p.out_channels: p.predicted_us for p in staircase(shape, target, "fp16", [8, 11, 16])}
    assert out["below_delta_us"] == pytest.approx(us[8] - us[11]) and out["below_delta_us"] < 0
    assert out["above_delta_us"] == pytest.approx(us[16] - us[11]) and out["above_delta_us"] < 0
    assert "layer1.0.conv1.conv (out) 11: ↓8 (-2.9) ↑16 (-2.9)" in text


def test_apply_unwritable_output_is_one_line_and_writes_nothing(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, capsys, monkeypatch
) -> None:
    src = zoo_model_path("se_net")
    _, plan = widen_first_free_group(src, tmp_path)
    folder = tmp_path / "folder"
    folder.mkdir()
    cases = [
        (folder, "it is a folder; give a file path"),
        (plan / "out.onnx", f"{plan} is a file, not a folder"),
        (plan / "sub" / "out.onnx", f"{plan} is a file, not a folder"),
    ]
    for dest, message in cases:
        code, out, err = cli(["apply", str(src), "--plan", str(plan), "-o", str(dest)], capsys, monkeypatch)
        assert code == 2 and out == "", err
        assert err.startswith(f"error: cannot write {dest}: ") and message in err, err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "plan.json"]
        assert list(folder.iterdir()) == []


def test_input_channels_the_weights_do_not_take_are_one_line(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, capsys, monkeypatch
) -> None:
    # ONNX shape inference accepts a Conv fed 4 channels whose weights take 3; nothing may run on it.
    # The file says 3 channels, so --input-shape may not change them (before: the conv check caught it)
    path = str(zoo_model_path("resnet_projection_dynamic"))
    code, out, err = cli(["analyze", path, "--input-shape", "input:1x4x32x32"], capsys, monkeypatch)
    assert code == 2 and out == ""
    assert err == (
        "error: input 'input' is ?×3×32×32 in the file; --input-shape sets its batch and its dynamic (?) "
        "dims only, got 1×4×32×32 (export the model at that size instead)\n"
    )
    assert err.count("\n") == 1 and "Traceback" not in err
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {}}))
    dest = tmp_path / "out.onnx"
    args = ["apply", path, "--plan", str(plan), "-o", str(dest), "--input-shape", "input:1x4x32x32"]
    code, _, err = cli(args, capsys, monkeypatch)
    assert code == 2 and "--input-shape sets its batch" in err and err.count("\n") == 1
    assert not dest.exists()


def test_input_shape_may_not_resize_a_static_input(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, capsys, monkeypatch
) -> None:
    """apply wrote a 1×3×64×64 model from a 1×3×32×32 export without a word (and verify then refused
    the pair); the batch, as --batch does, may still change."""
    path = str(zoo_model_path("resnet_projection"))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {}}))
    dest = tmp_path / "out.onnx"
    args = ["apply", path, "--plan", str(plan), "-o", str(dest), "--input-shape", "input:1x3x64x64"]
    code, out, err = cli(args, capsys, monkeypatch)
    assert code == 2 and out == "" and not dest.exists()
    assert err.startswith("error: input 'input' is 1×3×32×32 in the file; --input-shape sets its batch")
    args[-1] = "input:4x3x32x32"
    code, _, err = cli(args, capsys, monkeypatch)
    assert code == 0, err
    dims = onnx.load(str(dest)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [4, 3, 32, 32]


def _two_convs(opset: int) -> onnx.ModelProto:
    """x → Conv(3→5) → Relu → Conv(5→4) at the given default-domain opset."""
    rng = np.random.default_rng(0)
    inits = [
        onnx.numpy_helper.from_array(rng.standard_normal((5, 3, 3, 3)).astype(np.float32), "w1"),
        onnx.numpy_helper.from_array(rng.standard_normal((4, 5, 3, 3)).astype(np.float32), "w2"),
    ]
    nodes = [
        onnx.helper.make_node("Conv", ["x", "w1"], ["a"], kernel_shape=[3, 3], pads=[1] * 4),
        onnx.helper.make_node("Relu", ["a"], ["b"]),
        onnx.helper.make_node("Conv", ["b", "w2"], ["y"], kernel_shape=[3, 3], pads=[1] * 4),
    ]
    inp = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])
    out = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])
    graph = onnx.helper.make_graph(nodes, "g", [inp], [out], inits)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(
    ("opset", "message"),
    [
        (7, "error: opset 7 is older than the channel analysis reads (opsets 9 and newer)"),
        (99, f"opset 99 is newer than onnx {onnx.__version__} knows (opsets up to"),
    ],
)
def test_an_opset_out_of_range_is_one_line_and_writes_nothing(
    opset: int, message: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    # the checker accepts both; opset 99 was analyzed with today's schemas, opset 7 with rules for 9+
    path = tmp_path / "m.onnx"
    onnx.save(_two_convs(opset), str(path))
    code, out, err = cli(["analyze", str(path)], capsys, monkeypatch)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1
    (tmp_path / "plan.json").write_text(json.dumps({"widths": {"Conv_0": 8}}))
    dest = tmp_path / "out.onnx"
    args = ["apply", str(path), "--plan", str(tmp_path / "plan.json"), "-o", str(dest)]
    code, _, err = cli(args, capsys, monkeypatch)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not dest.exists()


def test_an_opset_in_range_is_analyzed(tmp_path: Path, capsys, monkeypatch) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_two_convs(9), str(path))
    code, out, _ = cli(["analyze", str(path), "--json"], capsys, monkeypatch)
    assert code == 0
    assert [(g["id"], g["width"], g["frozen"]) for g in json.loads(out)["groups"]] == [
        ("input:x", 3, True),
        ("Conv_0", 5, False),
        ("Conv_2", 4, True),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["targets", "x"], "error: Got unexpected extra argument(s) (x); see 'deployopt targets --help'"),
        (["bench"], "error: Missing argument 'model'; see 'deployopt bench --help'"),
        (["analyze", "m.onnx", "--frobnicate"], "error: No such option: --frobnicate"),
        (["staircase", "--target", "nano", "--runs", "abc"], "error: Invalid value for '--runs'"),
        (["nosuchcommand"], "error: No such command 'nosuchcommand'; see 'deployopt --help'"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], message: str, capsys, monkeypatch) -> None:
    # click's usage errors came as a multi-line box (Usage:, Try ..., a framed message)
    code, out, err = cli(args, capsys, monkeypatch)
    assert code == 2 and out == ""
    assert click_neutral(err).startswith(click_neutral(message)) and err.count("\n") == 1


def click_neutral(text: str) -> str:
    """click 8.1 (Python 3.9's last) writes "argument (x)" and 'MODEL' where 8.2 writes
    "argument(s) (x)" and 'model': the message is the same."""
    return text.replace("argument(s)", "argument").replace("'MODEL'", "'model'")


def test_help_and_a_failed_check_keep_their_exit_codes(
    zoo_model_path: Callable[[str], Path], capsys, monkeypatch
) -> None:
    code, out, _ = cli(["analyze", "--help"], capsys, monkeypatch)
    assert code == 0 and "Usage:" in out
    args = ["verify", str(zoo_model_path("resnet_projection")), str(zoo_model_path("densenet_like"))]
    code, out, _ = cli(args, capsys, monkeypatch)  # two different networks: a failed check, exit 1
    assert code == 1 and "FAILED" in out


def test_apply_out_of_memory_is_one_line_about_the_plan(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, capsys, monkeypatch
) -> None:
    """A plan width of 10⁸ makes numpy allocate the padded weights: one line that points at the plan
    (apply has no --batch or --input-shape to make smaller), and no output file."""
    from deployopt import surgery

    def huge(*a: object, **k: object) -> None:
        raise MemoryError("Unable to allocate 358. GiB for an array with shape (100000000, 480)")

    monkeypatch.setattr(surgery, "_take", huge)
    # a plan under protobuf's 2 GiB that still does not fit in memory (10⁸ itself is refused earlier,
    # by the size check: below)
    monkeypatch.setattr(surgery, "_check_size", lambda *a: None)
    src = zoo_model_path("se_net")
    gid = analyze(load_model(src).model).free_groups()[0].id
    (tmp_path / "plan.json").write_text(json.dumps({"widths": {gid: 100_000_000}}))
    out_path = tmp_path / "out.onnx"
    code, _, err = cli(
        ["apply", str(src), "--plan", str(tmp_path / "plan.json"), "-o", str(out_path)], capsys, monkeypatch
    )
    assert code == 2 and not out_path.exists()
    assert err == (
        "error: out of memory: Unable to allocate 358. GiB for an array with shape (100000000, 480); "
        "are the plan's widths what you meant?\n"
    )
    monkeypatch.undo()
    code, _, err = cli(
        ["apply", str(src), "--plan", str(tmp_path / "plan.json"), "-o", str(out_path)], capsys, monkeypatch
    )
    assert code == 2 and not out_path.exists() and err.count("\n") == 1
    assert "over the 2 GiB one protobuf message can hold (an ONNX file's limit, and that of the" in err


def test_apply_writes_through_a_symlink_and_into_a_fifo(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, capsys, monkeypatch
) -> None:
    """`-o link.onnx` keeps the link; `-o` a FIFO (as /dev/null) writes into it, never renames over it."""
    import os
    import select
    import stat
    import threading
    import time

    src = zoo_model_path("se_net")
    free, plan = widen_first_free_group(src, tmp_path)
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.onnx"
    link = tmp_path / "link.onnx"
    link.symlink_to(target)
    code, _, err = cli(["apply", str(src), "--plan", str(plan), "-o", str(link)], capsys, monkeypatch)
    assert code == 0, err
    assert link.is_symlink() and [p.name for p in target.parent.iterdir()] == ["out.onnx"]
    assert {g.id: g.width for g in analyze(load_model(target).model).groups}[free.id] == free.width + 8
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # never blocks, so a broken fix fails, not hangs
    chunks: list[bytes] = []
    stop = threading.Event()

    def drain() -> None:  # the model is larger than a pipe's buffer: read while apply writes
        # Read to end of file even after apply returns: up to a pipe's buffer may still be unread.
        while True:
            select.select([fd], [], [], 0.05)
            try:
                block = os.read(fd, 1 << 16)
            except BlockingIOError:  # a writer holds the FIFO open, nothing buffered
                if stop.is_set():
                    return  # apply returned yet a writer stays open: fail on the content, not hang
                continue
            if block:
                chunks.append(block)
            elif chunks or stop.is_set():
                return  # the writer closed (or never came)
            else:
                time.sleep(0.01)  # no writer yet

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        code, _, err = cli(["apply", str(src), "--plan", str(plan), "-o", str(fifo)], capsys, monkeypatch)
    finally:
        stop.set()
        reader.join(5)
        os.close(fd)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a file"
    assert code == 0, err
    model = onnx.load_from_string(b"".join(chunks))
    assert {g.id: g.width for g in analyze(model).groups}[free.id] == free.width + 8


def test_ctrl_c_in_apply_is_one_line_and_exit_130(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, capsys, monkeypatch
) -> None:
    """typer turns Ctrl-C in a command into a silent exit 130; every command must say `interrupted`."""
    import deployopt.surgery

    def ctrl_c(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    src = zoo_model_path("se_net")
    _, plan = widen_first_free_group(src, tmp_path)
    monkeypatch.setattr(deployopt.surgery, "save_model", ctrl_c)
    out_path = tmp_path / "out.onnx"
    code, out, err = cli(["apply", str(src), "--plan", str(plan), "-o", str(out_path)], capsys, monkeypatch)
    assert (code, out, err) == (130, "", "interrupted\n")
    assert not out_path.exists()


def test_readme_commands_row_for_analyze_names_its_options() -> None:
    """README's Commands table row for `analyze` named --target and --json but not --convs, --sms
    or --dtype. Every option of the command is in the row now, but --input-shape (common to every
    command, in no row) and --help."""
    import typer

    from deployopt.cli.main import app

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (row,) = [line for line in readme.splitlines() if line.startswith("| `deployopt analyze ")]
    command = typer.main.get_command(app).commands["analyze"]  # type: ignore[attr-defined]
    options = {o for p in command.params for o in p.opts if o.startswith("--")} - {"--input-shape", "--help"}
    assert options and sorted(o for o in options if f"[{o}" not in row) == []


def test_apply_says_which_dynamic_dims_it_wrote_at_a_fixed_size(tmp_path: Path, capsys, monkeypatch) -> None:
    """A detector exported with dynamic height and width, edited at --input-shape 1x3x16x16: the
    written model takes any size again (it was written 16×16 with a notice), checked at two sizes."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.random((12, 3, 3, 3), np.float32), "W1")
    w2 = numpy_helper.from_array(rng.random((4, 12, 1, 1), np.float32), "W2")
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c"], pads=[1, 1, 1, 1], name="c1"),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "W2"], ["y"], name="c2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])],
        [w1, w2],
    )
    src = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(src))
    (tmp_path / "plan.json").write_text(json.dumps({"widths": {"c1": 16}}))
    out = tmp_path / "out.onnx"
    args = ["apply", str(src), "--plan", str(tmp_path / "plan.json"), "-o", str(out)]
    code, stdout, err = cli([*args, "--input-shape", "x:1x3x16x16", "--json"], capsys, monkeypatch)
    assert code == 0, err
    notices = json.loads(stdout)["notices"]
    assert "written with the input's dynamic height, width ('H', 'W'), checked at 16×16 and 80×80" in notices
    assert not any("runs at that size only" in n for n in notices)
    dims = onnx.load(str(out)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", 3, "H", "W"]
