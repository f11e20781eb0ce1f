"""Review findings on outputs: a link in staircases/ under --force, parses and replays a --resume
repeated, a lock file removed between open and flock, a .data name over 255 bytes, /dev/stdout
redirected `>>`, and the parse of a large destination save_model replaces."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

import deployopt.model as model_module
import deployopt.optimize as optimize_module
from deployopt.errors import OutputError
from deployopt.journal import Journal
from deployopt.model import save_model
from deployopt.optimize import LOCK_NAME, OptimizeConfig, optimize


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def _args(model: Path, out: Path) -> list[str]:
    return ["optimize", str(model), "--target", "h200", "--sms", "8", "--backend", "model", "-o", str(out)]


def _run(model: Path, out: Path, **kw: Any) -> None:
    opts: dict[str, Any] = dict(target="h200", sms=8, backend="model", plots=False, fidelity_samples=2)
    optimize(OptimizeConfig(model_path=model, outdir=out, max_evals=4, **opts, **kw))


def _weights_model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(4 * 3 * 3 * 3, dtype=np.float32).reshape(4, 3, 3, 3), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_force_removes_a_link_in_staircases_to_the_model_not_the_model(
    zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """rmtree removes the link only: --force refused it as "the model this command reads"."""
    model = tmp_path / "m.onnx"
    model.write_bytes(zoo_model_path("vgg16_pruned_b4").read_bytes())
    before = model.read_bytes()
    out = tmp_path / "out"
    _run(model, out)
    (out / "staircases").mkdir(exist_ok=True)
    (out / "staircases" / "mine.onnx").symlink_to(model)
    _run(model, out, force=True)
    assert model.read_bytes() == before and not (out / "staircases" / "mine.onnx").is_symlink()


def test_resume_parses_the_model_for_its_weights_once_and_replays_the_journal_once(
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each --resume parsed the whole model twice for refuse_replacing_weights, and replayed the
    journal a second time under the lock."""
    model, out = zoo_model_path("vgg16_pruned_b4"), tmp_path / "out"
    code, _, err = run_cli(monkeypatch, capsys, *_args(model, out), "--max-evals", "4")
    assert code == 0, err
    monkeypatch.setattr(model_module, "_LOCATIONS", {}, raising=False)
    inside: list[bool] = [False]
    parses: list[Path] = []
    real_parse, real_refuse = model_module._parse, model_module.refuse_replacing_weights

    def parse(path: Path) -> onnx.ModelProto:
        if inside[0]:
            parses.append(path)
        return real_parse(path)

    def refuse(*a: Any, **k: Any) -> None:
        inside[0] = True
        try:
            real_refuse(*a, **k)
        finally:
            inside[0] = False

    replays: list[Any] = []
    real_replay = Journal.replay.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        Journal, "replay", classmethod(lambda cls, p: replays.append(p) or real_replay(cls, p))
    )
    monkeypatch.setattr(model_module, "_parse", parse)
    monkeypatch.setattr(model_module, "refuse_replacing_weights", refuse)
    code, _, err = run_cli(monkeypatch, capsys, *_args(model, out), "--max-evals", "6", "--resume")
    assert code == 0, err
    assert len(parses) == 1 and len(replays) == 1


def test_a_lock_file_removed_before_it_is_locked_is_opened_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder removed the lock and released it between this run's open and flock: the flock
    took the removed file and the run said "in use by another run" when no run held it."""
    real_flock = fcntl.flock
    lock = tmp_path / LOCK_NAME
    calls: list[int] = []

    def flock_after_the_holder_ended(fd: Any, op: int) -> None:
        if not calls:
            lock.unlink()
        calls.append(op)
        real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock_after_the_holder_ended)
    handle = optimize_module._lock_outdir(tmp_path)
    assert handle is not None
    try:
        assert os.path.samestat(lock.stat(), os.fstat(handle.fileno())) and len(calls) == 2
    finally:
        handle.close()


def test_a_data_name_over_255_bytes_is_one_line(tmp_path: Path) -> None:
    """A model name of 251-255 bytes is valid, its NAME.data not: onnx's ValidationError paragraph."""
    dest = tmp_path / ("e" * 246 + ".onnx")
    with pytest.raises(OutputError) as exc:
        save_model(_weights_model(), dest, external_data=True)
    assert str(exc.value).startswith(f"cannot write {dest}.data: ") and "\n" not in str(exc.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["apply", "fp16"])
def test_apply_and_fp16_refuse_a_data_name_over_255_bytes_before_their_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, command: str
) -> None:
    """An external-data model written to a name of 251-255 bytes: its NAME.data is too long, which
    save_model found only once the plan was applied or the model converted."""
    import deployopt.cli.surgery_cmd as surgery_cmd
    import deployopt.precision as precision

    src = tmp_path / "in" / "m.onnx"
    src.parent.mkdir()
    onnx.save(_weights_model(), src, save_as_external_data=True, location="m.data", size_threshold=0)
    plan = tmp_path / "p.json"
    plan.write_text('{"widths": {}}')

    def work(*_: Any, **__: Any) -> None:
        raise AssertionError("the work began")

    monkeypatch.setattr(surgery_cmd, "apply_plan_report", work)
    monkeypatch.setattr(precision, "write_fp16", work)
    dest = tmp_path / ("e" * 246 + ".onnx")
    args = ["--plan", str(plan)] if command == "apply" else []
    code, _, err = run_cli(monkeypatch, capsys, command, str(src), *args, "-o", str(dest))
    assert code == 2 and err == f"error: cannot write {dest}.data: File name too long (the weights file)\n", (
        err
    )


def test_dev_stdout_appended_to_keeps_what_the_file_held(tmp_path: Path) -> None:
    """`-o /dev/stdout >> log.txt`: the log was renamed over and held the new text alone."""
    log = tmp_path / "log.txt"
    log.write_text("old\n")
    code = "from deployopt.fileio import write_text; write_text('/dev/stdout', 'new\\n')"
    with open(log, "ab") as stdout:
        subprocess.run([sys.executable, "-c", code], stdout=stdout, check=True)
    assert log.read_text() == "old\nnew\n"


def test_apply_to_dev_stdout_redirected_to_a_file_writes_a_model_that_loads(tmp_path: Path) -> None:
    """`apply M --plan P -o /dev/stdout > out.onnx`: appended through the path, the model landed after
    the file's start, where the command's own table (written through the shell's descriptor, at 0)
    then overwrote its first bytes: "Wire format was corrupt". A `>` file is replaced whole."""
    example = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"
    plan, out = tmp_path / "p.json", tmp_path / "out.onnx"
    plan.write_text('{"widths": {"stem.conv": 24}}')
    with open(out, "wb") as stdout:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "deployopt",
                "apply",
                str(example),
                "--plan",
                str(plan),
                "-o",
                "/dev/stdout",
            ],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert len(onnx.load(str(out)).graph.node) > 100


def test_a_descriptor_not_open_is_said_so(tmp_path: Path) -> None:
    """`-o /dev/fd/9` with no descriptor 9 was "permission denied"."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from deployopt.fileio import check_output_file; check_output_file('/dev/fd/9')",
        ],
        capture_output=True,
        text=True,
        check=False,
        close_fds=True,
    )
    assert "not an open descriptor" in done.stderr, done.stderr


def test_save_model_reads_a_large_replaced_destination_only_with_a_data_file_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each save over a 256 MB model parsed it (0.5 s) to find weights files it cannot read."""
    dest = tmp_path / "m.onnx"
    save_model(_weights_model(), dest)
    monkeypatch.setattr(model_module, "REPLACED_PARSE_MAX_BYTES", 16, raising=False)
    parses: list[Path] = []
    real_parse = model_module._parse
    monkeypatch.setattr(model_module, "_parse", lambda p: parses.append(p) or real_parse(p))
    save_model(_weights_model(), dest)
    assert parses == []
