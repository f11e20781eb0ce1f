"""Bad input found by running every command against every kind of bad input (a matrix of about
1,000 cases: models, output paths, numeric options, plans, results, profiles, calibration data).
Each case here was a traceback, numpy's warning lines, exit 0 or an error naming a deleted file
before; now one `error:` line, exit 2, and no output file."""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper
from test_cli_bad_input import _one_error
from test_regression import write_timing

CIFAR = Path(__file__).resolve().parents[1] / "calibration_data" / "cifar10"


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    ("command", "option", "value", "message"),
    [
        # float32 rounded it to 0: every image the same grey, PASSED with exit 0
        ("verify", "--scale", "1e-50", "--scale 1e-50: outside float32's range"),
        ("verify", "--scale", "1e300", "--scale 1e+300: outside float32's range"),
        ("verify", "--std", "1e-50", "--std 1e-50: outside float32's range"),
        ("verify", "--mean", "1e39", "--mean 1e+39: outside float32's range"),
        # each value fits, their product does not: inf pixels behind numpy's RuntimeWarning lines
        ("verify", "--scale", "1e38", "--mean and --std make pixel values past float32's largest"),
        # flipped every pixel's sign without a word: verify PASSED, apply ranked its trim on that
        ("verify", "--std", "-1", "--std values must be above 0, got -1.0"),
        ("apply", "--std", "0.2,-0.2,0.2", "--std values must be above 0, got 0.2,-0.2,0.2"),
    ],
)
def test_image_options_float32_cannot_carry(
    monkeypatch, capsys, tmp_path, zoo_model_path, command, option, value, message
) -> None:
    m = str(zoo_model_path("resnet_projection"))
    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {"layer4.0.conv1.conv": 120}}')
    out = tmp_path / "out.onnx"
    args = [m, m] if command == "verify" else [m, "--plan", str(plan), "-o", str(out)]
    _one_error(
        *run_cli(monkeypatch, capsys, command, *args, "--calibration-data", str(CIFAR), option, value),
        message,
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("median", "side", "message"),
    [
        (0.0, "baseline", "samples_us have a median of 0 µs: not a measured latency"),  # ZeroDivisionError
        (0.0, "current", "samples_us have a median of 0 µs: not a measured latency"),  # '-100 %, faster'
        (1e307, "current", "samples_us are too large to be latencies (their sum overflows)"),  # inf, warnings
        # an infinite ratio, written `Infinity` in --json (no strict JSON reader takes it)
        (5e-324, "baseline", "samples_us have a median of 4.94e-324 µs, under a nanosecond: not a measured"),
    ],
)
def test_compare_latencies_the_statistics_cannot_take(
    monkeypatch, capsys, tmp_path, median, side, message
) -> None:
    good = write_timing(tmp_path / "good.json", 100.0)
    bad = write_timing(tmp_path / "bad.json", median, seed=1)
    pair = (bad, good) if side == "baseline" else (good, bad)
    dest = tmp_path / "report.json"
    _one_error(
        *run_cli(monkeypatch, capsys, "compare", *map(str, pair), "-o", str(dest)), f"error: {bad}: {message}"
    )
    assert not dest.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["apply", "{model}", "--plan", "{plan}", "-o", "{dest}"],
        ["fp16", "{model}", "-o", "{dest}"],
        ["bench", "{model}", "-b", "ort", "--runs", "2", "--warmup", "0", "-o", "{dest}"],
        ["profile", "{model}", "-b", "ort", "--runs", "2", "--warmup", "0", "-o", "{dest}"],
        ["compare", "{base}", "{base}", "-o", "{dest}"],
        ["staircase", "-t", "nano", "--input", "1x16x8x8", "--out-channels", "16", "--plot", "{dest}"],
    ],
)
def test_a_file_output_ending_in_a_slash_is_a_folder(monkeypatch, capsys, tmp_path, zoo_model_path, args):
    """`-o out/` wrote a file named `out` (the slash dropped by Path) and exited 0; folder outputs
    (optimize -o, profile --trace-dir) still take one."""
    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {}}')
    base = write_timing(tmp_path / "base.json", 100.0)
    dest = f"{tmp_path / 'out'}/"
    names = {"model": zoo_model_path("resnet_projection"), "plan": plan, "base": base, "dest": dest}
    _one_error(
        *run_cli(monkeypatch, capsys, *(a.format(**names) for a in args)),
        f"cannot write {dest}: a path ending in '/' is a folder; give a file path",
    )
    assert not (tmp_path / "out").exists()


def test_a_folder_output_still_takes_a_trailing_slash(monkeypatch, capsys, tmp_path, zoo_model_path) -> None:
    m = str(zoo_model_path("resnet_projection"))
    args = ["optimize", m, "-t", "t4", "-b", "model", "--max-evals", "4", "-o", f"{tmp_path / 'run'}/"]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and (tmp_path / "run" / "plan.json").is_file(), err


def test_optimize_a_model_whose_only_conv_takes_its_weights_as_an_input(
    monkeypatch, capsys, tmp_path
) -> None:
    """Nothing free and nothing priced: `-b model` said 'its 0 conv(s) () are not' 2-D."""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
            helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3, 3, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
    )
    m = tmp_path / "w_input.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(m))
    out = tmp_path / "run"
    _one_error(
        *run_cli(monkeypatch, capsys, "optimize", str(m), "-t", "t4", "-b", "model", "-o", str(out)),
        f"error: {m}: no channel group is free to change; nothing to optimize",
    )
    assert not out.exists()


def test_a_failed_trtexec_run_names_a_log_that_is_there(monkeypatch, capsys, tmp_path, zoo_model_path):
    """The line named trtexec.log in bench's work folder, deleted by the time it was printed."""
    fake = tmp_path / "trtexec"
    fake.write_text("#!/bin/sh\necho 'some build output'\necho '[E] no kernel for this layer' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(fake))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the kept log goes here, not /tmp
    m = str(zoo_model_path("resnet_projection"))
    code, out, err = run_cli(monkeypatch, capsys, "bench", m, "-b", "trtexec", "--runs", "2")
    _one_error(code, out, err, "trtexec exited 3: [E] no kernel for this layer (log: ")
    log = Path(err.strip().rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.is_file() and "some build output" in log.read_text(), err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("deployopt-trtexec-") and p != log.parent]


def test_numbers_that_float32_rounds_are_still_fine(monkeypatch, capsys, tmp_path, zoo_model_path) -> None:
    """The checks refuse what float32 cannot hold, not small or odd values: a tiny mean is ~0."""
    m = str(zoo_model_path("resnet_projection"))
    for extra in (["--mean", "-1e-39"], ["--scale", "1e-30", "--std", "1e-3"]):
        code, out, err = run_cli(
            monkeypatch, capsys, "verify", m, m, "--calibration-data", str(CIFAR), *extra
        )
        assert code == 0 and "PASSED" in out, (extra, err)
