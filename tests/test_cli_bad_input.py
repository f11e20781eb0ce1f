"""Bad input found by a second audit: each case was a traceback, a silent wrong result or a hang
before; now one `error:` line, exit 2, and no output file."""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt.fidelity import preprocess_image

run = run_cli


def _one_error(code: int, out: str, err: str, message: str) -> None:
    assert code == 2, (code, err)
    assert err.startswith("error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


@pytest.fixture(scope="module")
def nano_profile(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`targets --target nano --json`, the form a user edits for a what-if."""
    from deployopt.targets import get_target

    return get_target("nano").to_json()


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"target": None}, "'target' must be an object of GPU facts, not null"),
        ({"target": "nano"}, "'target' must be an object of GPU facts, not string"),
        ({"target": [1, 2]}, "'target' must be an object of GPU facts, not array"),
    ],
)
def test_wrapped_profile_whose_target_is_not_an_object(monkeypatch, capsys, tmp_path, doc, message) -> None:
    """Was TypeError/ValueError from dict(doc["target"])."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    for args in (
        ["targets", "--target", str(path)],
        ["staircase", "--target", str(path), "--input", "1x16x8x8", "--out-channels", "16"],
    ):
        _one_error(*run(monkeypatch, capsys, *args), message)


@pytest.mark.parametrize("key", ["sources", "software"])
def test_profile_free_text_fields_of_the_wrong_type(monkeypatch, capsys, tmp_path, nano_profile, key) -> None:
    """Was TypeError / AttributeError while building the Target."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**nano_profile, key: [1, 2]}))
    _one_error(*run(monkeypatch, capsys, "targets", "--target", str(path)), f"{key} must be an object")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"macs_per_us_per_sm": 0}, "macs_per_us_per_sm must be a finite number > 0"),
        ({"fixed_us": -1}, "fixed_us must be a finite number >= 0"),
        ({"wave_us": "NaN"}, "wave_us must be a finite number >= 0"),
        ({"families": []}, "at least one kernel family"),
    ],
)
def test_fitted_params_the_model_cannot_predict_with(
    monkeypatch, capsys, tmp_path, zoo_model_path, nano_profile, change, message
) -> None:
    """macs_per_us_per_sm 0 was a ZeroDivisionError in `analyze --target`; negative costs predicted
    negative latencies without a word."""
    params = {**nano_profile["params"]["fp16"], "fitted": True, **change}
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**nano_profile, "params": {"fp16": params}}))
    model = zoo_model_path("resnet_projection")
    _one_error(*run(monkeypatch, capsys, "analyze", str(model), "--target", str(path)), message)
    # the unedited profile still loads: the checks pass real fits
    path.write_text(
        json.dumps({**nano_profile, "params": {"fp16": {**params, **nano_profile["params"]["fp16"]}}})
    )
    code, _, err = run(monkeypatch, capsys, "analyze", str(model), "--target", str(path))
    assert code == 0, err


def _run_capped(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a child capped at 2 GiB of address space, so a case that regresses into filling
    memory fails its test instead of the whole test run."""
    cap = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
    run_cli = (
        "import sys; from deployopt.cli.main import main; sys.argv = ['deployopt', *sys.argv[1:]]; main()"
    )
    return subprocess.run(
        [sys.executable, "-c", cap + run_cli, *args], capture_output=True, text=True, timeout=120
    )


def test_a_billion_widths_is_refused_before_the_list_is_built() -> None:
    """16:1000000000:1 built the whole list first (8 GB) and was killed for memory."""
    args = ["--target", "nano", "--input", "1x16x8x8", "--out-channels", "16:1000000000:1"]
    proc = _run_capped("staircase", *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "999999985 widths is too many" in proc.stderr


@pytest.mark.parametrize(
    ("dims", "widths", "tensor"),
    [
        ("8x128x28x28", "99999999999999999999", "weight"),  # predicted 5.9e20 µs before, exit 0
        ("999999999x128x28x28", "16:64:16", "input"),
        ("8x128x99999999x99999999", "16:64:16", "input"),
        ("1x1x40000x40000", "16:64:16", "output"),
    ],
)
def test_a_conv_no_gpu_library_runs_is_refused(
    monkeypatch, capsys, dims: str, widths: str, tensor: str
) -> None:
    code, out, err = run_cli(
        monkeypatch,
        capsys,
        "staircase",
        "--target",
        "orin-nano-8gb",
        "--input",
        dims,
        "--out-channels",
        widths,
    )
    assert code == 2 and out == "", out
    assert err.startswith(f"error: --input {dims} with ") and f"the {tensor} tensor would have" in err, err
    assert len(err.strip().splitlines()) == 1


def test_compare_environment_not_an_object(monkeypatch, capsys, tmp_path) -> None:
    """An environment of the wrong type was an AttributeError in the setup comparison; null is fine."""
    base = {"backend": "ort", "samples_us": [100.0 + i for i in range(10)], "environment": [1]}
    cur = {"backend": "ort", "samples_us": [100.0 + i for i in range(10)], "environment": None}
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "cur.json").write_text(json.dumps(cur))
    dest = tmp_path / "r.json"
    args = ["compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json"), "-o", str(dest)]
    _one_error(*run(monkeypatch, capsys, *args), "environment must be an object")
    assert not dest.exists()
    code, _, err = run(monkeypatch, capsys, "compare", str(tmp_path / "cur.json"), str(tmp_path / "cur.json"))
    assert code == 0 and "Traceback" not in err


def test_verify_negative_seed(monkeypatch, capsys, zoo_model_path) -> None:
    """Was numpy's ValueError traceback from default_rng(-5)."""
    m = str(zoo_model_path("resnet_projection"))
    _one_error(*run(monkeypatch, capsys, "verify", m, m, "--seed", "-5"), "--seed must be 0 or more")


def test_nan_in_calibration_arrays(monkeypatch, capsys, tmp_path, zoo_model_path) -> None:
    """verify reported a NaN cosine as a failed edit (exit 1); optimize called it an internal error
    and asked for a bug report, leaving a journal behind."""
    m = zoo_model_path("resnet_projection")
    data = np.zeros((2, 3, 32, 32), np.float32)
    data[1, 0, 0, 0] = np.nan
    np.save(tmp_path / "bad.npy", data)
    _one_error(
        *run(monkeypatch, capsys, "verify", str(m), str(m), "--calibration-data", str(tmp_path / "bad.npy")),
        "holds 1 NaN or infinite value(s)",
    )
    out = tmp_path / "out"
    args = ["optimize", str(m), "--target", "nano", "--backend", "model", "-o", str(out)]
    _one_error(*run(monkeypatch, capsys, *args, "--calibration-data", str(tmp_path / "bad.npy")), "NaN")
    assert not out.exists()


def test_timeout_that_is_not_a_number_of_seconds(monkeypatch, capsys) -> None:
    """`--timeout nan` passed `timeout <= 0`; inf overflowed the torch worker's queue wait."""
    for value in ("nan", "inf", "1e300"):
        _one_error(*run(monkeypatch, capsys, "bench", "unused.onnx", "--timeout", value), "--timeout")


def test_the_same_input_given_two_shapes(monkeypatch, capsys, zoo_model_path) -> None:
    """The last --input-shape won silently; the same shape twice is still fine."""
    m = str(zoo_model_path("resnet_projection"))
    a, b = "input:1x3x32x32", "input:1x3x16x16"
    _one_error(
        *run(monkeypatch, capsys, "analyze", m, "--input-shape", a, "--input-shape", b), "already given"
    )
    code, _, err = run(monkeypatch, capsys, "analyze", m, "--input-shape", a, "--input-shape", a)
    assert code == 0, err


def test_16_bit_png_keeps_its_range(tmp_path) -> None:
    """Pillow's convert() clipped a 16-bit grayscale PNG at 255: mid-grey came out white."""
    from PIL import Image

    Image.fromarray(np.full((4, 4), 32896, np.uint16)).save(tmp_path / "grey16.png")  # 128 × 257
    Image.fromarray(np.full((4, 4), 128, np.uint8)).save(tmp_path / "grey8.png")
    kw = {"channels": 3, "mean": [0.0], "std": [1.0]}
    a16 = preprocess_image(tmp_path / "grey16.png", (4, 4), **kw)
    a8 = preprocess_image(tmp_path / "grey8.png", (4, 4), **kw)
    assert math.isclose(float(a16.mean()), 128 / 255, rel_tol=1e-6)
    np.testing.assert_array_equal(a16, a8)


def _uint8_model(path: Path) -> Path:
    """A model that takes uint8 pixels and casts them itself (preprocessing exported inside); the
    inner 12-channel group is free, so optimize gets as far as its fidelity data."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.random((12, 3, 3, 3), np.float32), "W1")
    w2 = numpy_helper.from_array(rng.random((4, 12, 3, 3), np.float32), "W2")
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Conv", ["xf", "W1"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "W2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w1, w2],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_verify_a_model_with_an_integer_input(monkeypatch, capsys, tmp_path) -> None:
    """Was 'reference model failed on the calibration inputs: ... Unexpected input data type' for
    any data; uint8 arrays run, and random inputs are uint8 pixels over 0–255."""
    m = str(_uint8_model(tmp_path / "u8.onnx"))
    code, out, err = run(monkeypatch, capsys, "verify", m, m, "--json")
    assert code == 0, err
    assert "input 'x': uint8 0–255" in json.loads(out)["source"], out
    np.save(tmp_path / "u8.npy", np.random.default_rng(0).integers(0, 256, (4, 3, 8, 8)).astype(np.uint8))
    code, out, err = run(monkeypatch, capsys, "verify", m, m, "--calibration-data", str(tmp_path / "u8.npy"))
    assert code == 0 and "PASSED" in out, err
    np.save(tmp_path / "big.npy", np.full((1, 3, 8, 8), 300, np.int64))
    _one_error(
        *run(monkeypatch, capsys, "verify", m, m, "--calibration-data", str(tmp_path / "big.npy")),
        "holds other values",
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda lines: [*lines[:2], "[1, 2]", *lines[2:]], "line 3 is not a journal event"),
        (lambda lines: ['{"event": "start", "config": 5}', *lines[1:]], "'start' event is damaged"),
        (
            lambda lines: [*lines[:1], '{"event": "measured", "plan": {}}', *lines[1:]],
            "'measured' event is damaged (no 'timing')",
        ),
        (
            lambda lines: [*lines[:1], lines[1].replace('"samples_us":[', '"samples_us":["x",'), *lines[2:]],
            "samples_us must be finite",
        ),
    ],
)
def test_resume_from_a_hand_edited_journal(
    monkeypatch, capsys, tmp_path, zoo_model_path, edit, message
) -> None:
    """Each was a traceback (AttributeError, KeyError, TypeError from numpy) deep in --resume."""
    m = str(zoo_model_path("resnet_projection"))
    out = tmp_path / "run"
    args = ["optimize", m, "--target", "nano", "--backend", "model", "-o", str(out), "--max-evals", "4"]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    journal = out / "journal.jsonl"
    lines = journal.read_text().splitlines()
    assert '"samples_us":[' in lines[1]  # the edits above find what they change
    journal.write_text("\n".join(edit(lines)) + "\n")
    _one_error(*run(monkeypatch, capsys, *args, "--resume"), message)


def test_verify_input_shape_that_changes_a_static_dim(monkeypatch, capsys, zoo_model_path) -> None:
    """Was onnxruntime's cut-off 'Got invalid dimensions for input: input for the following indices';
    a dynamic batch still takes any --input-shape. A batch too large for memory is refused for what
    it is too, not by the memory check, which told the user to shrink a dim they cannot set."""
    m = str(zoo_model_path("resnet_projection"))
    _one_error(
        *run(monkeypatch, capsys, "verify", m, m, "--input-shape", "input:2x3x32x32"),
        "input 'input' is 1×3×32×32 in the file, the data fed is 2×3×32×32",
    )
    _one_error(
        *run(monkeypatch, capsys, "verify", m, m, "--input-shape", "input:100000000x3x32x32"),
        "input 'input' is 1×3×32×32 in the file, the data fed is 100000000×3×32×32",
    )
    dyn = str(zoo_model_path("resnet_projection_dynamic"))
    code, out, err = run(monkeypatch, capsys, "verify", dyn, dyn, "--input-shape", "input:2x3x32x32")
    assert code == 0 and "PASSED" in out, err


def test_analyze_unknown_dtype_without_target(monkeypatch, capsys, zoo_model_path) -> None:
    """`analyze M --dtype int4` exited 0 (the dtype was read only with --target)."""
    m = str(zoo_model_path("resnet_projection"))
    _one_error(*run(monkeypatch, capsys, "analyze", m, "--dtype", "int4"), "unknown dtype 'int4'")


def test_analyze_dtype_without_target(monkeypatch, capsys, zoo_model_path) -> None:
    """`analyze M --dtype fp32` printed the groups it prints for any dtype and exited 0, as if it had
    analyzed fp32 (only --target's wave table reads it); --sms without --target was refused already."""
    m = str(zoo_model_path("resnet_projection"))
    _one_error(*run(monkeypatch, capsys, "analyze", m, "--dtype", "fp32"), "--dtype needs --target")
    code, out, err = run(monkeypatch, capsys, "analyze", m, "--dtype", "fp32", "--target", "nano")
    assert code == 0 and "(1 SM, fp32)" in out, err


def test_images_over_pillows_size_limits(monkeypatch, capsys, tmp_path, zoo_model_path) -> None:
    """Over Pillow's decompression-bomb limit was a DecompressionBombError traceback; over half of it
    (a 90 MP photo) printed Python's two-line DecompressionBombWarning on an exit-0 run. The limit is
    lowered here so the images stay small."""
    from PIL import Image

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    m = str(zoo_model_path("resnet_projection"))
    (tmp_path / "big").mkdir()
    (tmp_path / "huge").mkdir()
    Image.new("RGB", (12, 12)).save(tmp_path / "big" / "a.png")  # 144 px: over 100, under 200
    Image.new("RGB", (20, 20)).save(tmp_path / "huge" / "a.png")  # 400 px: refused
    code, out, err = run(monkeypatch, capsys, "verify", m, m, "--calibration-data", str(tmp_path / "big"))
    assert code == 0 and "PASSED" in out and err == "", err
    _one_error(
        *run(monkeypatch, capsys, "verify", m, m, "--calibration-data", str(tmp_path / "huge")),
        "image is larger than Pillow decodes (200 pixels at most)",
    )


def test_optimize_a_model_with_an_integer_input_fails_before_the_search(
    monkeypatch, capsys, tmp_path
) -> None:
    """Random fidelity inputs for a uint8 input failed in onnxruntime at the end of the search, after
    the journal was written; they are uint8 pixels now, and a file of other values still fails at
    load, before OUTDIR exists. uint8 arrays optimize."""
    m = str(_uint8_model(tmp_path / "u8.onnx"))
    out = tmp_path / "run"
    args = ["optimize", m, "--target", "nano", "--backend", "model", "--max-evals", "4"]
    np.save(tmp_path / "big.npy", np.full((2, 3, 8, 8), 300, np.int64))
    _one_error(
        *run(monkeypatch, capsys, *args, "-o", str(out), "--calibration-data", str(tmp_path / "big.npy")),
        "holds other values",
    )
    assert not out.exists()
    code, _, err = run(monkeypatch, capsys, *args, "-o", str(tmp_path / "random"))
    assert code == 0 and (tmp_path / "random" / "model.onnx").exists(), err
    np.save(tmp_path / "u8.npy", np.random.default_rng(0).integers(0, 256, (2, 3, 8, 8)).astype(np.uint8))
    code, _, err = run(
        monkeypatch, capsys, *args, "-o", str(out), "--calibration-data", str(tmp_path / "u8.npy")
    )
    assert code == 0 and (out / "model.onnx").exists(), err


def test_a_device_as_the_model_is_refused_before_reading() -> None:
    """/dev/zero was read until memory ran out."""
    proc = _run_capped("analyze", "/dev/zero")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "error: /dev/zero: is a device, not a file; give an .onnx file", proc.stderr


def _feed_fifo(path: Path, data: bytes) -> threading.Thread:
    os.mkfifo(path)

    def write() -> None:
        with contextlib.suppress(BrokenPipeError), path.open("wb") as f:
            f.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


def test_a_pipe_is_read_as_the_model_and_an_endless_one_is_cut_off(
    monkeypatch, capsys, tmp_path, zoo_model_path
) -> None:
    """`analyze <(gunzip -c m.onnx.gz)` reads a pipe: it works, and one that sends more than
    protobuf's 2 GiB limit (scaled down here) ends in one line instead of filling memory."""
    from deployopt import model as model_module

    data = zoo_model_path("resnet_projection").read_bytes()
    writer = _feed_fifo(tmp_path / "ok", data)
    code, out, err = run(monkeypatch, capsys, "analyze", str(tmp_path / "ok"), "--json")
    writer.join(timeout=10)
    assert code == 0, err
    assert json.loads(out)["convs"], out
    monkeypatch.setattr(model_module, "MAX_PROTO_BYTES", len(data) - 1)
    writer = _feed_fifo(tmp_path / "long", data)
    _one_error(*run(monkeypatch, capsys, "analyze", str(tmp_path / "long")), "more than 2 GiB came through")
    writer.join(timeout=10)


@pytest.mark.parametrize(
    ("args", "label", "what"),
    [
        (
            ["optimize", "{model}", "-t", "t4", "--backend", "model", "--force", "-o", ""],
            "-o/--out",
            "folder",
        ),
        (["apply", "{model}", "--plan", "{plan}", "-o", ""], "-o/--output", "file"),
        (["compare", "{plan}", "{plan}", "--output", ""], "-o/--output", "file"),
        (["bench", "{model}", "--runs", "1", "-o", ""], "-o/--output", "file"),
        (["profile", "{model}", "--trace-dir", ""], "--trace-dir", "folder"),
        (
            ["staircase", "-t", "nano", "--input", "1x16x8x8", "--out-channels", "16", "--plot", ""],
            "--plot",
            "file",
        ),
        (["calibrate", "-t", "nano", "--measure", "torch", "-o", ""], "-o/--output", "file"),
    ],
)
def test_an_empty_output_path_is_refused_before_any_work(
    monkeypatch, capsys, tmp_path, zoo_model_path, args, label, what
) -> None:
    """typer reads '' as Path('.'): `optimize -o '' --force` ran into the current folder, `profile
    --trace-dir ''` kept its traces there, and the file options said '.' was a folder."""
    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {}}')
    model = zoo_model_path("resnet_projection")
    monkeypatch.chdir(tmp_path)
    argv = [a.format(model=model, plan=plan) for a in args]
    _one_error(*run(monkeypatch, capsys, *argv), f"error: {label}: empty path; give a {what} path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_output_dot_is_still_the_current_folder(monkeypatch, capsys, tmp_path, zoo_model_path) -> None:
    """Only '' is refused: an explicit `-o .` writes into the current folder, as before."""
    monkeypatch.chdir(tmp_path)
    model = zoo_model_path("resnet_projection")
    args = ["optimize", str(model), "-t", "t4", "--backend", "model", "--max-evals", "4", "-o", "."]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    assert (tmp_path / "plan.json").is_file() and (tmp_path / "report.json").is_file()


@pytest.mark.parametrize("cc", [[99, 9], [13, 0], [4, 0], [2, 1], [8, 10]])
def test_a_compute_capability_no_gpu_has_is_refused(monkeypatch, capsys, tmp_path, nano_profile, cc) -> None:
    """[99, 9] was accepted and predicted as a Hopper (the wave model's tables fall back to the
    nearest CC below); now one line naming the file and the field."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**nano_profile, "compute_capability": cc}))
    for args in (
        ["targets", "--target", str(path)],
        ["staircase", "--target", str(path), "--input", "1x16x8x8", "--out-channels", "16"],
    ):
        _one_error(
            *run(monkeypatch, capsys, *args),
            f"target profile {path}: compute_capability {cc} is no NVIDIA GPU's: the major is 3 or 5-12",
        )


@pytest.mark.parametrize(
    ("cc", "note"),
    [
        ([12, 0], "CC 12.0 is not in the peak table: CC 9.0's peak and kernel tiles are used"),
        ([3, 7], "CC 3.7 is not in the peak table: CC 5.3's peak is used"),
        ([8, 6], "CC 8.6 is not in the peak table: CC 8.0's peak is used"),
        ([5, 3], None),
    ],
)
def test_a_real_gpu_the_tables_lack_says_whose_figures_it_gets(
    monkeypatch, capsys, tmp_path, nano_profile, cc, note
) -> None:
    """Real CCs outside the peak table (Blackwell, Kepler, GA10x) still load, and their default
    parameters say which design they are predicted as, instead of falling back silently."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**nano_profile, "compute_capability": cc}))
    args = ["staircase", "--target", str(path), "--input", "1x16x8x8", "--out-channels", "16"]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    if note is None:
        assert "not in the peak table" not in out
    else:
        assert note in " ".join(out.split()), out


@pytest.mark.parametrize(
    ("args", "folder"),
    [
        (["analyze", "{gone}"], False),
        (["apply", "{gone}", "--plan", "{plan}", "-o", "{out}"], False),
        (["apply", "{model}", "--plan", "{gone}", "-o", "{out}"], False),
        (["verify", "{model}", "{gone}"], False),
        (["verify", "{model}", "{model}", "--calibration-data", "{gone}"], True),
        (["optimize", "{gone}", "-t", "t4", "--backend", "model", "-o", "{out}"], False),
        (["optimize", "{model}", "-t", "t4", "-b", "model", "--calibration-data", "{gone}"], True),
        (["apply", "{model}", "--plan", "{plan}", "-o", "{out}", "--calibration-data", "{gone}"], True),
        (["bench", "{gone}"], False),
        (["profile", "{gone}"], False),
        (
            [
                "bench",
                "{model}",
                "-b",
                "trtexec",
                "--remote",
                "u@h",
                "--dtype",
                "int8",
                "--calibration-data",
                "{gone}",
            ],
            True,
        ),
        (["compare", "{gone}", "{plan}"], True),
        (["targets", "--target", "{gone}"], False),
        (["staircase", "-t", "{gone}", "--input", "1x16x8x8", "--out-channels", "16"], False),
        (["calibrate", "-t", "{gone}", "--measure", "torch"], False),
        (["analyze", "{model}", "--target", "{gone}"], False),
    ],
)
def test_a_missing_input_is_worded_alike_in_every_command(
    monkeypatch, capsys, tmp_path, zoo_model_path, args, folder
) -> None:
    """bench/profile said 'no such model file', apply --plan 'no such plan file', compare 'not
    found: X', a --target profile 'target profile X does not exist', --calibration-data 'X:
    calibration data not found' or '--calibration-data X: no such file or folder': now one wording
    ('or folder' where a folder is taken too)."""
    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {}}')
    gone = tmp_path / "gone.json"
    names = {
        "model": zoo_model_path("resnet_projection"),
        "plan": plan,
        "out": tmp_path / "out",
        "gone": gone,
    }
    code, _, err = run(monkeypatch, capsys, *(a.format(**names) for a in args))
    assert (code, err) == (2, f"error: {gone}: no such file{' or folder' if folder else ''}\n")
    assert not (tmp_path / "out").exists()


def test_calibration_data_the_reference_model_overflows_on(
    monkeypatch, capsys, tmp_path, zoo_model_path
) -> None:
    """Finite inputs that overflow inside the model (1e38) gave NaN outputs on both sides: verify
    reported the model compared with itself as FAILED (exit 1), and optimize searched to the end and
    then called it an internal error ('please report this'), leaving a journal behind."""
    m = str(zoo_model_path("resnet_projection"))
    np.save(tmp_path / "big.npy", np.full((2, 3, 32, 32), 1e38, np.float32))
    data = str(tmp_path / "big.npy")
    message = "the reference model's outputs hold"
    _one_error(*run(monkeypatch, capsys, "verify", m, m, "--calibration-data", data), message)
    out = tmp_path / "run"
    args = ["optimize", m, "-t", "nano", "-b", "model", "--max-evals", "4", "-o", str(out)]
    _one_error(*run(monkeypatch, capsys, *args, "--calibration-data", data), message)
    assert not out.exists()


def _zip_with_a_png(path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        z.writestr("input", b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize(
    ("name", "write", "message"),
    [
        ("a.npy", lambda p: p.write_text("1 2 3\n"), "a.npy: not a NumPy .npy file (numpy.save)"),
        ("a.npz", lambda p: p.write_text("1 2 3\n"), "a.npz: not a NumPy .npz file (numpy.savez)"),
        ("a.npz", _zip_with_a_png, "a.npz: 'input' in it is not a .npy array"),
        ("a.npz", lambda p: p.write_bytes(b"PK\x03\x04" + bytes(60)), "a.npz: cannot read array file"),
        # numpy.savez() of no arrays: a valid empty zip, not "not a NumPy .npz file"
        ("a.npz", lambda p: __import__("numpy").savez(p), "a.npz: no array for input(s) input (keys: none)"),
    ],
)
def test_array_files_that_are_not_numpys(monkeypatch, capsys, tmp_path, zoo_model_path, name, write, message):
    """Text named .npy/.npz said 'contains pickled (object) data ... allow_pickle', advice the CLI
    cannot take; a zip of other files was AttributeError ('bytes' has no dtype), a broken zip
    zipfile.BadZipFile: each a traceback."""
    m = str(zoo_model_path("resnet_projection"))
    write(tmp_path / name)
    _one_error(*run(monkeypatch, capsys, "verify", m, m, "--calibration-data", str(tmp_path / name)), message)


def test_a_width_range_past_int64_is_counted_not_built() -> None:
    """len(range(16, 10**20)) is an OverflowError ('Python int too large to convert to C ssize_t'):
    a traceback where 16:1000000000:1 was one line."""
    from deployopt.cli.targets_cmd import parse_channels
    from deployopt.errors import DeployoptError

    with pytest.raises(
        DeployoptError, match=r"^--out-channels '16:99999999999999999999:1': 99999999999999999984 widths"
    ):
        parse_channels("16:99999999999999999999:1")
    assert parse_channels("16:99999999999999999999:99999999999999999000") == [16, 99999999999999999016]


def test_a_trim_ranked_on_activations_that_overflow(monkeypatch, capsys, tmp_path, zoo_model_path) -> None:
    """Channels ranked on NaN/inf activations (inputs of 1e38) sort anywhere: apply trimmed
    arbitrary channels, said it ranked them 'by least activation × weight on the data' and exited 0."""
    m = str(zoo_model_path("resnet_projection"))
    np.save(tmp_path / "big.npy", np.full((2, 3, 32, 32), 1e38, np.float32))
    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {"layer4.0.conv1.conv": 120}}')
    out = tmp_path / "out.onnx"
    args = ["apply", m, "--plan", str(plan), "-o", str(out), "--calibration-data", str(tmp_path / "big.npy")]
    _one_error(*run(monkeypatch, capsys, *args), "'layer4.0.conv1.relu.out' holds NaN or infinite values")
    assert not out.exists()


def test_a_plan_that_gives_a_group_twice(monkeypatch, capsys, tmp_path, zoo_model_path) -> None:
    """json.loads kept the last of two widths for one group without a word (a plan edited by
    adding a line); the same width twice is still fine."""
    m = str(zoo_model_path("resnet_projection"))
    plan, out = tmp_path / "plan.json", tmp_path / "out.onnx"
    plan.write_text('{"widths": {"stem.conv": 24, "stem.conv": 8}}')
    args = ["apply", m, "--plan", str(plan), "-o", str(out)]
    _one_error(
        *run(monkeypatch, capsys, *args), f"{plan}: 'stem.conv' is given twice (24 and 8); give it once"
    )
    assert not out.exists()
    plan.write_text('{"widths": {"stem.conv": 24, "stem.conv": 24}}')
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0 and out.exists(), err


def test_ctrl_c_while_the_cli_starts_is_one_line() -> None:
    """Importing the CLI takes seconds (onnx, numpy, rich): Ctrl-C then was a 20-line
    KeyboardInterrupt traceback. Here the interrupt comes deterministically, at one import."""
    code = (
        "import builtins, sys\n"
        "real = builtins.__import__\n"
        "def hook(name, *args, **kwargs):\n"
        "    if name == 'deployopt.surgery':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = hook\n"
        "from deployopt.cli.main import main\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (130, "interrupted\n"), proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["analyze", "{dyn}", "--input-shape", "input:{big}x3x32x32"], "has a dimension over 2^63 - 1"),
        (
            ["bench", "{model}", "-b", "ort", "--runs", "2", "--batch", "{big}"],
            "has a dimension over 2^63 - 1",
        ),
        (["verify", "{model}", "{model}", "--input-shape", "input:{big}x3x32x32"], "over 2^63 - 1"),
    ],
)
def test_a_dimension_past_int64(monkeypatch, capsys, zoo_model_path, args, message) -> None:
    """A dim past int64 was protobuf's 'ValueError: Value out of range' traceback (--batch and
    --input-shape, every command that loads a model)."""
    names = {
        "model": zoo_model_path("resnet_projection"),
        "dyn": zoo_model_path("resnet_projection_dynamic"),
        "big": "99999999999999999999",
    }
    _one_error(*run(monkeypatch, capsys, *(a.format(**names) for a in args)), message)


def test_graph_inputs_and_outputs_without_a_shape(monkeypatch, capsys, tmp_path, zoo_model) -> None:
    """onnx-graphsurgeon writes an output whose shape is None as a type with no shape, which
    onnxruntime runs; loading refused it with the checker's "Field 'shape' of 'type' is required
    but missing", and an input without one got that line too, even with --input-shape for it."""
    model = zoo_model("resnet_projection")
    model.graph.output[0].type.tensor_type.ClearField("shape")
    no_out = tmp_path / "no_out.onnx"
    onnx.save(model, str(no_out))
    code, out, err = run(monkeypatch, capsys, "analyze", str(no_out), "--json")
    assert code == 0, err
    assert json.loads(out)["convs"]
    model.graph.input[0].type.tensor_type.ClearField("shape")
    no_in = tmp_path / "no_in.onnx"
    onnx.save(model, str(no_in))
    _one_error(
        *run(monkeypatch, capsys, "analyze", str(no_in)),
        "input 'input' has no shape; give one with --input-shape input:1x3x224x224",
    )
    code, out, err = run(monkeypatch, capsys, "analyze", str(no_in), "--input-shape", "input:1x3x32x32")
    assert code == 0, err


def test_outputs_never_replace_the_weights_file_the_input_reads(
    monkeypatch, capsys, tmp_path, zoo_model
) -> None:
    """out/foo.onnx keeping its weights in out/model.onnx.data: `optimize out/foo.onnx -o out
    --force` (and `apply -o out/model.onnx`) renamed the answer's weights over that file, and
    foo.onnx then loaded fine and computed garbage (top-1 agreement 0 % against itself before)."""
    folder = tmp_path / "out"
    folder.mkdir()
    model = folder / "foo.onnx"
    onnx.save(
        zoo_model("resnet_projection"),
        str(model),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx.data",
        size_threshold=1024,
    )
    weights = folder / "model.onnx.data"
    before = weights.read_bytes()
    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {"layer4.0.conv1.conv": 120}}')
    message = f"cannot write {weights}: it is the weights file {model} reads"
    link = tmp_path / "link.onnx"  # a link to out/model.onnx: written there, weights beside it
    link.symlink_to(folder / "model.onnx")
    for args in (
        ["optimize", str(model), "-t", "t4", "-b", "model", "--max-evals", "4", "-o", str(folder), "--force"],
        ["apply", str(model), "--plan", str(plan), "-o", str(folder / "model.onnx")],
        ["apply", str(model), "--plan", str(plan), "-o", str(weights)],
        ["apply", str(model), "--plan", str(plan), "-o", str(link)],
    ):
        _one_error(*run(monkeypatch, capsys, *args), message)
        assert weights.read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["foo.onnx", "model.onnx.data"]
    # in place is still fine: foo.onnx.data is a new file
    code, _, err = run(monkeypatch, capsys, "apply", str(model), "--plan", str(plan), "-o", str(model))
    assert code == 0 and weights.read_bytes() == before, err


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["bench", "{model}", "-b", "ort", "--runs", "3", "-o", "{model}"], "model"),
        (["profile", "{model}", "-b", "ort", "--runs", "3", "-o", "{model}"], "model"),
        (["apply", "{model}", "--plan", "{plan}", "-o", "{plan}"], "plan"),
        (["compare", "{base}", "{base2}", "-o", "{base}"], "baseline"),
        (["compare", "{base}", "{base2}", "-o", "{base2}"], "current result"),
    ],
)
def test_an_output_that_is_the_commands_own_input(
    monkeypatch, capsys, tmp_path, zoo_model_path, args, what
) -> None:
    """`bench m.onnx -o m.onnx` wrote its JSON over the model, `compare base.json new.json -o
    base.json` its report over the baseline, `apply --plan p.json -o p.json` the model over the
    plan; each exited 0. Now one line before any work, and the input as it was."""
    from test_regression import write_timing

    model = tmp_path / "m.onnx"
    model.write_bytes(zoo_model_path("resnet_projection").read_bytes())
    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {}}')
    base, base2 = write_timing(tmp_path / "a.json", 100.0), write_timing(tmp_path / "b.json", 100.0, seed=1)
    names = {"model": model, "plan": plan, "base": base, "base2": base2}
    argv = [a.format(**names) for a in args]
    target = Path(argv[-1])
    before = target.read_bytes()
    _one_error(
        *run(monkeypatch, capsys, *argv), f"cannot write {target}: it is the {what} this command reads"
    )
    assert target.read_bytes() == before


def _fp16_model(path: Path) -> Path:
    """A model exported in float16 end to end (input included), as Jetson deployments often are."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.random((12, 3, 3, 3)).astype(np.float16), "W1")
    w2 = numpy_helper.from_array(rng.random((4, 12, 3, 3)).astype(np.float16), "W2")
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "W2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4, 8, 8])],
        [w1, w2],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_data_past_a_float16_inputs_range(monkeypatch, capsys, tmp_path) -> None:
    """1e5 cast to a float16 input is inf: numpy's two-line 'RuntimeWarning: overflow encountered
    in cast' came before the error line (verify, optimize) or before a trim ranked on inf (apply)."""
    m = str(_fp16_model(tmp_path / "fp16.onnx"))
    data = tmp_path / "big.npy"
    np.save(data, np.full((2, 3, 8, 8), 1e5, np.float32))
    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {"Conv_0": 8}}')
    message = "input 'x' takes float16, whose largest value is 65504; the data holds 100000: check its scale"
    for args in (
        ["verify", m, m],
        ["optimize", m, "-t", "t4", "-b", "model", "--max-evals", "4", "-o", str(tmp_path / "run")],
        ["apply", m, "--plan", str(plan), "-o", str(tmp_path / "out.onnx")],
    ):
        _one_error(*run(monkeypatch, capsys, *args, "--calibration-data", str(data)), message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.npy", "fp16.onnx", "plan.json"]


def test_profile_trace_dir(monkeypatch, capsys, tmp_path, zoo_model_path) -> None:
    """--trace-dir naming a file ended torch's profile, after it ran, in 'FILE: File exists'; ort
    accepted any --trace-dir, a file included, and kept nothing there (exit 0)."""
    m = str(zoo_model_path("resnet_projection"))
    afile = tmp_path / "afile"
    afile.write_text("x")
    for backend in ("ort", "torch"):
        args = ["profile", m, "-b", backend, "--runs", "2", "--warmup", "0", "--trace-dir"]
        _one_error(*run(monkeypatch, capsys, *args, str(afile)), f"cannot write into {afile}: it is a file")
    traces = tmp_path / "traces"
    code, out, err = run(
        monkeypatch, capsys, "profile", m, "-b", "ort", "--runs", "2", "--trace-dir", str(traces), "--json"
    )
    assert code == 0, err
    (trace,) = json.loads(out)["trace"]  # resnet_projection.<time>-<pid>.ort_profile.json
    assert Path(trace).parent == traces and Path(trace).name.startswith("resnet_projection.")
    events = json.loads(Path(trace).read_text())
    assert any(e.get("name") == "model_run" for e in events)
    # keeping the trace must not cost the node mapping (the copy once shadowed the folder the
    # optimized graph is read from: 'node names (approximate)', every fused conv half-mapped)
    assert json.loads(out)["onnx_nodes_mapped_by"] == "optimized graph"
    # a trace that cannot be written (a full disk) is one error, and the folders the command made
    # for it are gone again, where a failed run left them behind, empty
    import deployopt.backends.ort as ort_module

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ort_module.shutil, "copyfile", full_disk)
    deep = tmp_path / "new" / "traces"
    args = ["profile", m, "-b", "ort", "--runs", "2", "--warmup", "0", "--trace-dir", str(deep)]
    _one_error(*run(monkeypatch, capsys, *args), "No space left on device")
    assert not (tmp_path / "new").exists() and traces.is_dir()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bgr"], "--bgr: image preprocessing, and without --calibration-data the inputs are random"),
        (["--mean", "0.5,0.5,0.5", "--resize", "crop"], "--mean, --resize: image preprocessing"),
        (["--scale", "2"], "--scale: image preprocessing"),
        (["--seed", "3", "--calibration-data", "{data}"], "--seed seeds the random inputs"),
    ],
)
def test_verify_options_with_nothing_to_act_on(monkeypatch, capsys, tmp_path, zoo_model_path, extra, message):
    """Image preprocessing without images (random inputs) and a seed with data were ignored without a
    word: `verify --bgr` passed as if the colour order had been checked."""
    m = str(zoo_model_path("resnet_projection"))
    np.save(tmp_path / "a.npy", np.zeros((2, 3, 32, 32), np.float32))
    args = [a.format(data=tmp_path / "a.npy") for a in extra]
    _one_error(*run(monkeypatch, capsys, "verify", m, m, *args), message)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--runs", "5"], "--runs applies to --measure only (a prediction times nothing)"),
        (["--cudnn-engines", "0", "--no-cudnn-benchmark"], "--cudnn-engines, --no-cudnn-benchmark apply to"),
    ],
)
def test_staircase_measuring_options_without_measure(monkeypatch, capsys, extra, message) -> None:
    """They were ignored without a word: the staircase printed was the prediction either way."""
    args = ["staircase", "-t", "nano", "--input", "1x16x8x8", "--out-channels", "16:32:8", *extra]
    _one_error(*run(monkeypatch, capsys, *args), message)


def _half_a_png(path: Path) -> None:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, "PNG")
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])


@pytest.mark.parametrize(
    ("write", "why"),
    [
        (_half_a_png, "image file is truncated"),
        (lambda p: p.write_bytes(b""), "empty file"),
        (lambda p: p.write_text("not a picture"), "not an image Pillow can read"),
    ],
)
def test_images_that_cannot_be_read_say_why(
    monkeypatch, capsys, tmp_path, zoo_model_path, write, why
) -> None:
    """The line ended in the exception's class name: '(OSError)' for a truncated download,
    '(UnidentifiedImageError)' for an empty file."""
    m = str(zoo_model_path("resnet_projection"))
    (tmp_path / "imgs").mkdir()
    image = tmp_path / "imgs" / "a.png"
    write(image)
    args = ["verify", m, m, "--calibration-data", str(tmp_path / "imgs")]
    _one_error(*run(monkeypatch, capsys, *args), f"{image}: cannot read image ({why}")


def _conv1d_model(path: Path) -> Path:
    """Two Conv1d layers (audio, time series): the wave model prices 2-D convs only."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.random((12, 3, 3), np.float32), "W1")
    w2 = numpy_helper.from_array(rng.random((4, 12, 3), np.float32), "W2")
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c"], pads=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "W2"], ["y"], pads=[1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16])],
        [w1, w2],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def test_convs_the_wave_model_does_not_price(monkeypatch, capsys, tmp_path) -> None:
    """A Conv1d model: `optimize -b model` predicted every plan alike (the convs left out), wrote
    the input's widths as the answer and exited 0; `analyze --target` printed an empty table."""
    m = str(_conv1d_model(tmp_path / "c1d.onnx"))
    out = tmp_path / "run"
    _one_error(
        *run(monkeypatch, capsys, "optimize", m, "-t", "t4", "-b", "model", "-o", str(out)),
        "the wave model prices 2-D forward convs only, and its 2 conv(s) (Conv_0, Conv_2) are not",
    )
    assert not out.exists()
    code, text, err = run(monkeypatch, capsys, "analyze", m, "--target", "t4")
    assert code == 0, err
    flat = " ".join(text.split())
    assert "2 conv(s) the wave model does not price (not 2-D: Conv_0, Conv_2)" in flat
    # no empty waves table, no predictor named "n/a"
    assert "waves on" not in flat and "n/a" not in flat and "predicted by the wave model" not in flat
    code, text, err = run(monkeypatch, capsys, "analyze", m, "--target", "t4", "--json")
    assert code == 0, err  # the JSON says which convs it left out, and why, as the text does
    assert json.loads(text)["waves"]["unpriced"] == [
        {"name": "Conv_0", "reason": "not 2-D"},
        {"name": "Conv_2", "reason": "not 2-D"},
    ]


def test_a_conv_transpose_is_named_as_unpriced(monkeypatch, capsys, tmp_path) -> None:
    """A decoder's ConvTranspose is no implicit-GEMM forward conv: the waves table left it out
    without a word. The text and the JSON now name it; the predictor line says the target's
    parameters are defaults, not calibrated (as `staircase` does)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.random((16, 8, 3, 3), np.float32), "W1")
    w2 = numpy_helper.from_array(rng.random((16, 8, 2, 2), np.float32), "W2")
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("ConvTranspose", ["c", "W2"], ["y"], strides=[2, 2], name="up"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])],
        [w1, w2],
    )
    path = tmp_path / "up.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    code, text, err = run(monkeypatch, capsys, "analyze", str(path), "--target", "orin-nano-8gb")
    assert code == 0, err
    flat = " ".join(text.split())
    assert "1 conv(s) the wave model does not price and the table leaves out (ConvTranspose: up)" in flat
    assert "predicted by the wave model 'cc8.7-fp16 default' (default, not calibrated on hardware)" in flat
    code, text, err = run(monkeypatch, capsys, "analyze", str(path), "--target", "orin-nano-8gb", "--json")
    waves = json.loads(text)["waves"]
    assert [c["name"] for c in waves["convs"]] == ["conv"]
    assert waves["unpriced"] == [{"name": "up", "reason": "ConvTranspose"}]
    assert (waves["fitted"], waves["sms"], waves["full_sms"]) == (False, 8, 8)
    assert waves["predicted_by"] == "wave model 'cc8.7-fp16 default' (default, not calibrated on hardware)"


@pytest.mark.parametrize(
    ("args", "label", "what"),
    [
        (
            ["verify", "{model}", "{model}", "--calibration-data", ""],
            "--calibration-data",
            "a folder or file path",
        ),
        (
            ["optimize", "{model}", "-t", "t4", "-b", "model", "--calibration-data", ""],
            "--calibration-data",
            "a folder or file path",
        ),
        (
            ["apply", "{model}", "--plan", "p.json", "-o", "o.onnx", "--calibration-data", ""],
            "--calibration-data",
            "a folder or file path",
        ),
        (["bench", "{model}", "--calibration-data", ""], "--calibration-data", "a folder or file path"),
        (["profile", "{model}", "--calibration-data", ""], "--calibration-data", "a folder or file path"),
        (["apply", "{model}", "--plan", "", "-o", "out.onnx"], "--plan", "a plan file (.json)"),
        (["analyze", ""], "model", "an .onnx file"),
        (["verify", "{model}", ""], "candidate", "an .onnx file"),
        (["compare", "", "{model}"], "baseline", "a file or folder"),
    ],
)
def test_an_empty_input_path_is_not_the_current_folder(
    monkeypatch, capsys, tmp_path, zoo_model_path, args, label, what
) -> None:
    """typer reads '' as Path('.'): `verify --calibration-data "$DATA"` with DATA unset compared the
    models on the images in the current folder (exit 0), a model or plan given as '' was '.: is a
    folder'. `.` given on purpose still reads the current folder."""
    from PIL import Image

    Image.new("RGB", (32, 32), (200, 10, 10)).save(tmp_path / "holiday.png")
    monkeypatch.chdir(tmp_path)
    m = str(zoo_model_path("resnet_projection"))
    argv = [a.format(model=m) for a in args]
    _one_error(*run(monkeypatch, capsys, *argv), f"error: {label}: empty path; give {what}")
    code, out, err = run(monkeypatch, capsys, "verify", m, m, "--calibration-data", ".")
    assert code == 0 and "inputs: ." in out, err


def test_targets_with_an_empty_target_name(monkeypatch, capsys) -> None:
    """`targets --target "$T"` with T unset listed every target with exit 0; optimize, analyze and
    staircase already called '' an unknown target."""
    _one_error(*run(monkeypatch, capsys, "targets", "--target", ""), "unknown target ''")


def test_a_plan_or_data_path_that_is_a_device_or_pipe(monkeypatch, capsys, tmp_path, zoo_model_path) -> None:
    """--plan /dev/null said 'no such file' (and so did `--plan <(jq …)`, a pipe, which is now read);
    --calibration-data /dev/null said 'cannot list folder (Not a directory)'."""
    m = str(zoo_model_path("resnet_projection"))
    out = tmp_path / "out.onnx"
    _one_error(
        *run(monkeypatch, capsys, "apply", m, "--plan", "/dev/null", "-o", str(out)),
        "/dev/null: not a regular file (a device or socket); give a plan .json file",
    )
    _one_error(
        *run(monkeypatch, capsys, "verify", m, m, "--calibration-data", "/dev/null"),
        "/dev/null: not a regular file or folder; give a folder of images, a .npy or a .npz",
    )
    assert not out.exists()
    from deployopt.coupling import analyze
    from deployopt.model import load_model

    group = next(g for g in analyze(load_model(m).model).groups if not g.frozen)
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as f:
            json.dump({"widths": {group.id: group.width + 8}}, f)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    code, _, err = run(monkeypatch, capsys, "apply", m, "--plan", str(fifo), "-o", str(out))
    writer.join(timeout=10)
    assert code == 0, err
    assert {g.id: g.width for g in analyze(load_model(out).model).groups}[group.id] == group.width + 8


def test_ctrl_c_while_the_interpreter_shuts_down_keeps_the_exit_code(tmp_path: Path) -> None:
    """Ctrl-C landing after the command returned (module teardown, ~0.2 s after a finished
    optimize) exited 130 with no line, its results complete. The entry point ignores it there: the
    exit code and output are the command's. Here SIGINT is sent from an atexit callback."""
    code = (
        "import atexit, os, signal, sys\n"
        "atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))\n"
        "from deployopt.cli.main import entry\n"
        "sys.argv = ['deployopt', 'targets', '--target', 'nano', '--json']\n"
        "entry()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["name"] == "nano"
