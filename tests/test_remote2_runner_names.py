"""`--backend tensorrt --remote`: names the runner's command line cannot carry are refused in one line
before anything reaches the board, played on the stand-in board of tests/test_tensorrt_remote.py.

Found by the read-only review of --remote:
- a dynamic input named with ',' ("a,b", a legal ONNX name) went into the runner's --shapes list,
  which the runner splits on ',': "bad --shapes entry 'a'" on the board, after the copy, of a
  --shapes the user never gave; their own --input-shape 'a,b:…' likewise;
- `extra["remote_workdir"]` (library API) was used in scp's HOST:PATH as given: older scp runs it
  through the board's shell, so "/home/me/my work" made its folder and then failed the copy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path, PurePosixPath

import numpy as np
import onnx
import pytest
from cli_runner import one_error, run_cli
from onnx import TensorProto, helper, numpy_helper
from test_tensorrt_remote import HOST, REMOTE, play_the_board

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.errors import DeployoptError

#: The board these tests play is this machine (see tests/test_tensorrt_remote.py): one xdist worker.
pytestmark = pytest.mark.xdist_group("board")


def conv_model(path: Path, input_name: str, dynamic: bool = True) -> Path:
    """A one-Conv model whose input is `input_name`, its batch dynamic (or 1)."""
    batch: str | int = "N" if dynamic else 1
    x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [batch, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8, 8, 8])
    w = numpy_helper.from_array(np.random.default_rng(0).random((8, 3, 3, 3), dtype=np.float32), "w")
    node = helper.make_node("Conv", [input_name, "w"], ["y"], pads=[1, 1, 1, 1], name="conv")
    model = helper.make_model(
        helper.make_graph([node], "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 13)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(
    ("dynamic", "given"),
    [(True, ()), (False, ("--input-shape", "a,b:2x3x8x8"))],
    ids=["dynamic-input", "input-shape-given"],
)
def test_cli_bench_remote_refuses_an_input_named_with_a_comma_before_any_copy(
    dynamic: bool,
    given: tuple[str, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An input "a,b" that would go into the runner's --shapes (dynamic, or given --input-shape): one
    line naming the input and the ',' and exit 2, and nothing copied to the board (no scp at all)."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    model = conv_model(tmp_path / "m.onnx", "a,b", dynamic)
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *REMOTE, "--runs", "5", *given)
    assert one_error(code, err) == (
        "error: input 'a,b' of m.onnx has ',' in its name, which jetson/runner.py's --shapes cannot "
        "name: rename the input (onnx-graphsurgeon) or make its dims static in the model (and give "
        "it no --input-shape)\n"
    )
    calls = log.read_text().splitlines() if log.exists() else []
    assert not [c for c in calls if c.startswith("scp ")], calls


def test_cli_bench_remote_runs_a_static_input_named_with_a_comma_and_a_dynamic_one_with_a_colon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Guard (passes before the fix too): the refusal is for names that go into --shapes only. A
    static "a,b" gets no --shapes entry and is benched; a dynamic "images:0" (TF exports' names) is
    read by the runner up to its last ':' and is benched too."""
    play_the_board(tmp_path, monkeypatch)
    for name, dynamic, file in (("a,b", False, "static.onnx"), ("images:0", True, "colon.onnx")):
        model = conv_model(tmp_path / file, name, dynamic)
        code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *REMOTE, "--runs", "5")
        assert code == 0, (name, err)


@pytest.mark.parametrize(
    "workdir", ["my work", "~/deployopt", "-work", "w/-x", "w;rm -rf w", "", "/", "w/../..", "$HOME/w"]
)
def test_runner_session_refuses_a_workdir_scp_cannot_take_when_it_opens(
    workdir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`extra["remote_workdir"]` with a space, '~', a part starting with '-' or a shell character:
    one line when the session opens, naming the key and what it may hold; nothing ran on the board."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    extra = {"remote": HOST, "remote_workdir": workdir}
    with pytest.raises(DeployoptError) as info:
        get_backend("tensorrt").open(MeasureOptions(dtype="fp32", runs=5, extra=extra))
    assert str(info.value) == (
        f"remote_workdir {workdir!r}: give the board's work folder in letters, digits, '.', '_', '-', "
        "'+', '@' and '/' only, no part starting with '-', no '..', not '/' itself (older scp runs it "
        "through the board's shell, and a run's folders are removed under it); a relative path is in "
        "the login's home folder"
    )
    assert not log.exists() or log.read_text() == ""


@pytest.mark.parametrize("workdir", ["/home/me/c++/w", "/data/me@lab/w", "/home/José/w", "w", "./w"])
def test_a_workdir_of_shell_safe_characters_is_taken(workdir: str) -> None:
    """Review of d563a19: '+', '@' and letters of any script are nothing a shell reads as syntax."""
    from deployopt.remote import check_workdir

    assert str(check_workdir(workdir)) == str(PurePosixPath(workdir))


def test_runner_session_takes_a_plain_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zoo_model_path: Callable[[str], Path]
) -> None:
    """Guard (passes before the fix too): an absolute path of plain names is the board folder the
    model goes in, as before."""
    play_the_board(tmp_path, monkeypatch)
    work = tmp_path / "board_work" / "v1.2_x-y"
    model = tmp_path / "net.onnx"
    model.write_bytes(zoo_model_path("mobilenet_like").read_bytes())
    extra = {"remote": HOST, "remote_workdir": str(work)}
    with get_backend("tensorrt").open(MeasureOptions(dtype="fp32", runs=5, warmup=1, extra=extra)) as session:
        timing = session.measure(model)
    assert timing.runs == 5
    assert [p.name for p in work.glob("net-*/net.onnx")] == ["net.onnx"]
