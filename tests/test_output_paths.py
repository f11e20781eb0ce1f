"""Output paths a bug bash found written wrong: the model's weights file, a pipe by its /proc link, a
long valid name, the weights a replaced model read, and `-o -`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from cli_runner import run_cli
from onnx import helper
from zoo_models import conv_16x3x3x3

from deployopt import fileio
from deployopt.errors import DeployoptWarning, OutputError
from deployopt.layers import ConvShape, conv_model
from deployopt.model import save_model


@pytest.fixture
def no_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench and profile fail the test if they time anything."""
    from deployopt.backends import ort as ort_backend

    def timed(*a: object, **k: object) -> None:
        raise AssertionError("timed although -o cannot be written")

    monkeypatch.setattr(ort_backend.OrtSession, "measure", timed)
    monkeypatch.setattr(ort_backend.OrtSession, "profile", timed)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "conv.onnx"
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 16)), str(path))
    return path


@pytest.fixture
def pipe() -> Iterator[tuple[int, str]]:
    """(read end, the write end's /dev/fd path): what `-o /dev/stdout | cmd` and `-o >(cmd)` give."""
    r, w = os.pipe()
    try:
        yield r, f"/dev/fd/{w}"
    finally:
        os.close(r)
        os.close(w)


def _save_external(model: onnx.ModelProto, path: Path, location: str) -> None:
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location)


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_bench_and_profile_refuse_the_models_weights_file_as_output(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    no_timing: None,
    command: str,
) -> None:
    """`bench in.onnx -o w.data` wrote its JSON over the weights in.onnx reads, and said "wrote"."""
    src = tmp_path / "in.onnx"
    _save_external(conv_model(ConvShape(1, 8, 8, 8, 16)), src, "w.data")
    weights = (tmp_path / "w.data").read_bytes()
    (tmp_path / "link.json").symlink_to(tmp_path / "w.data")
    for dest in (tmp_path / "w.data", tmp_path / "link.json"):
        code, out, err = run_cli(monkeypatch, capsys, command, str(src), "--runs", "2", "-o", str(dest))
        assert code == 2 and out == "", err
        assert (
            err
            == f"error: cannot write {dest}: it is the weights file {src} reads; give another -o/--output\n"
        )
    assert (tmp_path / "w.data").read_bytes() == weights


@pytest.mark.parametrize("writer", ["write_text", "save_model"])
def test_a_pipe_given_by_its_proc_link_is_written_in_place(pipe: tuple[int, str], writer: str) -> None:
    """/dev/stdout into a pipe and bash's `>(cmd)` are /proc links to `pipe:[N]`: realpath made that a
    file path that does not exist, and the write failed with "No such file or directory"."""
    r, path = pipe
    if writer == "write_text":
        fileio.write_text(path, "through the pipe")
    else:
        save_model(
            helper.make_model(helper.make_graph([], "g", [], []), producer_name="through the pipe"), path
        )
    assert b"through the pipe" in os.read(r, 1 << 16)


def test_bench_writes_its_json_into_a_pipe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], model: Path, pipe: tuple[int, str]
) -> None:
    r, path = pipe
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), "--runs", "2", "--warmup", "1", "-o", path
    )
    assert code == 0, err
    assert json.loads(os.read(r, 1 << 16))["runs"] == 2


def test_a_long_valid_name_is_written_and_a_too_long_one_refused_first(tmp_path: Path) -> None:
    """A name of 242-255 bytes is valid, but its temp name `.NAME.XXXXXXXX.tmp` was not: the write
    failed with "File name too long" once the work was done. One over 255 is refused by the check."""
    longest = "é" * 120 + "a" * 10 + ".json"  # 255 bytes: a cut temp name must not split the é
    fileio.write_text(tmp_path / longest, "x")
    with fileio.atomic_path(tmp_path / ("b" * 251 + ".png"), suffix=".png") as tmp:
        tmp.write_text("png")
    save_model(conv_16x3x3x3(), tmp_path / ("c" * 250 + ".onnx"))
    save_model(conv_16x3x3x3(), tmp_path / ("d" * 245 + ".onnx"), external_data=True)  # its .data: 255 bytes
    names = sorted(p.name for p in tmp_path.iterdir())  # written, no temp file left
    d = "d" * 245 + ".onnx"
    assert names == sorted([longest, "b" * 251 + ".png", "c" * 250 + ".onnx", d, d + ".data"])
    for dest in (tmp_path / ("a" * 256), tmp_path / "new" / ("a" * 256)):
        with pytest.raises(OutputError) as caught:
            fileio.check_output_file(dest)
        assert str(caught.value) == f"cannot write {dest}: File name too long"
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_bench_writes_a_long_valid_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path
) -> None:
    dest = tmp_path / ("r" * 250 + ".json")
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), "--runs", "2", "--warmup", "1", "-o", str(dest)
    )
    assert code == 0, err
    assert json.loads(dest.read_text())["runs"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([model.name, dest.name])


def test_bench_refuses_a_too_long_name_before_timing(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    model: Path,
    tmp_path: Path,
    no_timing: None,
) -> None:
    dest = tmp_path / ("r" * 252 + ".json")
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), "--runs", "2", "-o", str(dest))
    assert code == 2 and err == f"error: cannot write {dest}: File name too long\n"


def test_replacing_a_model_names_each_weights_file_the_new_one_does_not_read(tmp_path: Path) -> None:
    """b.onnx read w.data; the external-data model written over it reads b.onnx.data: w.data stayed
    without a word (only a model with its weights inside warned, and only of b.onnx.data)."""
    dest = tmp_path / "b.onnx"
    _save_external(conv_16x3x3x3(), dest, "w.data")
    with pytest.warns(DeployoptWarning) as caught:
        save_model(conv_16x3x3x3(), dest, external_data=True)
    assert [str(w.message) for w in caught] == [
        f"{tmp_path / 'w.data'} is left beside {dest}: it holds the weights of the model this replaced, "
        "which the new b.onnx (weights in b.onnx.data) does not read; delete it unless another model does"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.onnx", "b.onnx.data", "w.data"]  # warned, kept
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_model(
            conv_16x3x3x3(), dest, external_data=True
        )  # its own b.onnx.data, written over: nothing said


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_dash_as_json_output_is_refused_pointing_at_json(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    model: Path,
    tmp_path: Path,
    no_timing: None,
    command: str,
) -> None:
    """`-o -` wrote a file named `-`, where the JSON on stdout was meant: --json does that."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(monkeypatch, capsys, command, str(model), "--runs", "2", "-o", "-")
    said = "cannot write -: give a file name ('-' is not standard output here); use --json for stdout"
    assert code == 2 and out == "" and err == f"error: {said}\n"
    assert not Path("-").exists()
    code, out, _ = run_cli(monkeypatch, capsys, command, "--help")
    assert code == 0 and "--json prints it to stdout" in out


def test_dash_is_no_file_name_for_a_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for write in (lambda: fileio.check_output_file("-"), lambda: save_model(conv_16x3x3x3(), "-")):
        with pytest.raises(
            OutputError, match=r"^cannot write -: give a file name \('-' is not standard output"
        ):
            write()
    assert list(tmp_path.iterdir()) == []


def test_optimize_refuses_a_dash_as_its_folder(monkeypatch, capsys, tmp_path: Path) -> None:
    """`-o -` is refused for files (bench, apply, fp16, compare); optimize created a folder named
    `-` and exited 0 (docs bash). Refused the same way, before anything runs, nothing created."""
    src = tmp_path / "m.onnx"
    save_model(conv_model(ConvShape(1, 3, 8, 8, 8, 3)), src)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(monkeypatch, capsys, "optimize", str(src), "--target", "nano", "-o", "-")
    assert code == 2 and err.count("\n") == 1, err
    assert "cannot write into -" in err and "not standard output" in err
    assert not (tmp_path / "-").exists()


def test_a_folder_named_dash_given_as_a_path_is_written(monkeypatch, capsys, tmp_path: Path) -> None:
    """Review: the `-o -` refusal, made inside fileio, also refused `fp16 -o -/a.onnx` (an existing
    folder named `-`, written before) and `optimize -o ./-`. Only the bare `-` is refused."""
    src = tmp_path / "m.onnx"
    save_model(conv_model(ConvShape(1, 3, 8, 8, 8, 3)), src)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").mkdir()
    code, _, err = run_cli(monkeypatch, capsys, "fp16", str(src), "-o", "-/a.onnx")
    assert code == 0, err
    assert (tmp_path / "-" / "a.onnx").is_file()
    example = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"
    code, _, err = run_cli(monkeypatch, capsys, "optimize", str(example), "--target", "nano", "-o", "./-/run")
    assert code == 0, err
    assert (tmp_path / "-" / "run" / "model.onnx").is_file()
