"""Models of one file name on one board (`bench|profile --remote`): each model file has a board folder
of its own, named after it and a hash of its bytes (deployopt.remote.model_dir_name), and the
runner's result is checked to be the file's that was sent.

Keyed on the name alone, every model.onnx shared `deployopt-runner/model/`: a second bench of another
model.onnx on the same board, started while the first waited for its result, replaced the first's
model and result.json there, and the first wrote the second's timing and engine under its own
model's identity, exit 0. Played on the stand-in board of tests/test_tensorrt_remote.py (and
tests/test_trtexec_backend.py's for trtexec): no real Jetson, ssh or TensorRT.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from test_tensorrt_remote import HOST, REMOTE, play_the_board

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.remote import Board
from deployopt.timing import Timing

#: The board these tests play is this machine (see tests/test_tensorrt_remote.py): one xdist worker.
pytestmark = pytest.mark.xdist_group("board")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_of(path: Path) -> str:
    """`path`'s board folder as model_dir_name names it: its stem and 12 hex digits of its sha256
    (spelled out here, so the tests also read on code without model_dir_name)."""
    return f"{path.stem}-{sha256(path)[:12]}"


@pytest.fixture
def two_models(zoo_model_path: Callable[[str], Path], tmp_path: Path) -> tuple[Path, Path]:
    """Two different models, both named model.onnx (a baseline and a release, in two folders)."""
    a, b = tmp_path / "a" / "model.onnx", tmp_path / "b" / "model.onnx"
    for path, name in ((a, "mobilenet_like"), (b, "se_net")):
        path.parent.mkdir()
        path.write_bytes(zoo_model_path(name).read_bytes())
    return a, b


def before_the_first_result_comes_back(monkeypatch: pytest.MonkeyPatch, act: Callable[[str], None]) -> None:
    """Board.get calls `act(the board path)` once, before the first result is copied back: what
    another run does on the board while this one's runner has finished and its copy back waits."""
    real_get = Board.get
    done: list[bool] = []

    def get(self: Board, remote: Any, local: Any, what: str, timeout_s: float) -> None:
        if re.search(r"/result(-[0-9a-f]+)?\.json$", str(remote)) and not done:
            done.append(True)
            act(str(remote))
        real_get(self, remote, local, what, timeout_s)

    monkeypatch.setattr(Board, "get", get)


def test_model_dir_name_is_the_stem_and_a_hash_of_what_is_sent(tmp_path: Path) -> None:
    """The stem, board_name's safety rules kept (no '..', no leading '-', plain characters), and 12
    hex digits of the sha256; external data files, by name and contents (the engine key's list,
    sent_external), join the hash."""
    from deployopt.remote import board_name, model_dir_name, sent_external

    digest = "0123456789abcdef" * 4
    assert model_dir_name("model", digest) == "model-0123456789ab"
    assert model_dir_name("net:v2 x", digest) == "net_v2_x-0123456789ab"
    assert model_dir_name("-rf", digest) == "_-rf-0123456789ab"
    assert model_dir_name("..", digest) == "..-0123456789ab" == board_name("..-0123456789ab")
    with_one = model_dir_name("model", digest, [["w.bin", "1" * 64]])
    assert with_one != model_dir_name("model", digest, [["w.bin", "2" * 64]]) != "model-0123456789ab"
    assert re.fullmatch(r"model-[0-9a-f]{12}", with_one)
    assert sent_external(tmp_path / "unread.onnx", []) == []  # no weights: the model is not read


def test_two_models_of_one_name_on_one_board_keep_their_own_results(
    two_models: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bench of a/model.onnx, and while it waits for its result a bench of another model.onnx on the
    same board: each has its own folder, so a.json holds A's timing and A's engine (it held B's,
    exit 0, under A's sha256). A rerun of A still finds its engine in its folder."""
    a, b = two_models
    _, home = play_the_board(tmp_path, monkeypatch)
    other: list[Timing] = []

    def bench_b(_: str) -> None:
        options = MeasureOptions(dtype="fp32", runs=3, warmup=1, extra={"remote": HOST})
        with get_backend("tensorrt").open(options) as session:
            other.append(session.measure(b))

    before_the_first_result_comes_back(monkeypatch, bench_b)
    out = tmp_path / "a.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(a), *REMOTE, "--dtype", "fp32", "--runs", "3", "-o", str(out)
    )
    assert code == 0, err
    doc = json.loads(out.read_text())
    engine = home / doc["environment"]["engine"]  # deployopt-runner/model-<hash>/engines/<key>.engine
    (b_timing,) = other
    assert doc["environment"]["engine_key"] != b_timing.environment["engine_key"]  # it was B's
    assert (engine.parent.parent / "model.onnx").read_bytes() == a.read_bytes()  # A's engine, A's folder
    assert engine.parent.parent.name == folder_of(a)
    assert Path(b_timing.environment["engine"]).parent.parent.name == folder_of(b)
    assert b_timing.model is not None and b_timing.model["sha256"] == sha256(b)
    assert doc["model"]["sha256"] == sha256(a)
    folders = sorted(p.name for p in (home / "deployopt-runner").iterdir() if p.name.startswith("model"))
    assert folders == sorted(folder_of(p) for p in (a, b))

    monkeypatch.undo()  # Board.get as it is, and the stand-in board again
    play_again = tmp_path / "again"
    play_again.mkdir()
    _, home2 = play_the_board(play_again, monkeypatch)
    assert home2 != home
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(a), *REMOTE, "--dtype", "fp32", "--runs", "3")
    assert code == 0, err
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(a), *REMOTE, "--dtype", "fp32", "--runs", "3", "--json"
    )
    assert code == 0, err
    assert json.loads(stdout)["environment"]["engine_built_now"] is False  # reused in its folder


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_a_result_another_run_replaced_is_one_line_and_nothing_is_written(
    command: str,
    two_models: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The runner records the sha256 of the file it timed: a result.json on the board that is another
    file's (another run replaced the model or the result between the copy and the copy back) is one
    line, and no output file; it was written as this model's timing, exit 0."""
    a, b = two_models
    _, home = play_the_board(tmp_path, monkeypatch)
    code, stdout, err = run_cli(
        monkeypatch, capsys, command, str(b), *REMOTE, "--dtype", "fp32", "--runs", "3", "--json"
    )
    assert code == 0, err
    (b_result,) = (home / "deployopt-runner").glob("model*/result-*.json")
    b_doc = b_result.read_text()
    assert json.loads(b_doc)["model"]["sha256"] == sha256(b)

    def replace_the_result(remote: str) -> None:
        (home / remote).write_text(b_doc)

    before_the_first_result_comes_back(monkeypatch, replace_the_result)
    out = tmp_path / "a.json"
    more = ["-o", str(out)] if command == "bench" else ["--json"]
    code, stdout, err = run_cli(
        monkeypatch, capsys, command, str(a), *REMOTE, "--dtype", "fp32", "--runs", "3", *more
    )
    assert (code, stdout) == (2, "") and err.count("\n") == 1, err
    rdir = f"deployopt-runner/{folder_of(a)}"
    assert err == (
        f"error: runner.py on {HOST} handed back a result for another file (sha256 {sha256(b)[:12]}…) "
        f"than the {rdir}/model.onnx it was sent ({sha256(a)[:12]}…): another run on the board replaced "
        "the model or its result; run again\n"
    )
    assert not out.exists()


def test_trtexec_remote_gives_each_model_file_its_own_folder(
    two_models: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trtexec --remote keyed its board folder on the stem too (/tmp/deployopt-trtexec/model/): two
    model.onnx of different bytes went to one folder and read each other's exports there."""
    from test_trtexec_backend import play_a_trtexec_board

    log = play_a_trtexec_board(tmp_path, monkeypatch)
    work = tmp_path / "board_tmp" / "deployopt-trtexec"  # the board's /tmp folder, here
    extra = {"remote": HOST, "remote_workdir": str(work)}
    with get_backend("trtexec").open(MeasureOptions(dtype="fp32", runs=3, warmup=1, extra=extra)) as session:
        for model in (Path(a) for a in two_models):
            session.measure(model)
    folders = [work / folder_of(m) for m in two_models]
    assert folders[0] != folders[1]
    for folder, model in zip(folders, two_models):
        assert (folder / "model.onnx").read_bytes() == model.read_bytes()
    sent = [
        ln.split()[-1] for ln in log.read_text().splitlines() if ln.startswith("scp ") and "model.onnx" in ln
    ]
    assert sent == [f"{HOST}:{folder}/model.onnx" for folder in folders]
