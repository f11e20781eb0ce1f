"""Runs of the SAME model file with other settings (--dtype, shapes, calibration) on one board: they
share the file's board folder (deployopt.remote.model_dir_name keys it on the file's bytes), so each
session names its results there its own (remote.own_name: result-<token>.json, times-<token>.json,
…), and trtexec's engine is named after what it is built from, as the runner's are.

With one result.json per folder, a bench at --dtype fp16 started while one at fp32 waited for its
copy back replaced it: the fp32 run recorded the fp16 timing and engine as its own, exit 0 (the
sha256 check passes: same file). trtexec's times.json and --saveEngine file were shared the same way,
and a calibration table was copied over another run's of the same name. Played on the stand-in
boards of tests/test_tensorrt_remote.py and tests/test_trtexec_backend.py: no real Jetson, ssh or
TensorRT.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli
from test_remote_model_folders import before_the_first_result_comes_back
from test_tensorrt_remote import HOST, REMOTE, play_the_board
from test_tensorrt_remote import model as model  # the model on the host (a fixture)

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.layers import ConvShape, conv_model
from deployopt.remote import Board
from deployopt.timing import Timing

#: The board these tests play is this machine (see tests/test_tensorrt_remote.py): one xdist worker.
pytestmark = pytest.mark.xdist_group("board")


def tokens_per_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each session its own token, as outside the tests (conftest pins one for all)."""
    import deployopt.remote

    count = itertools.count(1)
    monkeypatch.setattr(deployopt.remote, "sweep_token", lambda: f"{next(count):08x}")


def test_same_file_two_dtypes_on_one_board_keep_their_own_results(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench --dtype fp32 of net.onnx, and while it waits for its result a bench of the same file at
    fp16 on the same board: each records its own timing and engine (the fp32 one recorded fp16's)."""
    _, home = play_the_board(tmp_path, monkeypatch)
    tokens_per_session(monkeypatch)
    other: list[Timing] = []

    def bench_fp16(_: str) -> None:
        options = MeasureOptions(dtype="fp16", runs=3, warmup=1, extra={"remote": HOST})
        with get_backend("tensorrt").open(options) as session:
            other.append(session.measure(model))

    before_the_first_result_comes_back(monkeypatch, bench_fp16)
    out = tmp_path / "fp32.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "fp32", "--runs", "3", "-o", str(out)
    )
    assert code == 0, err
    doc = json.loads(out.read_text())
    (fp16,) = other
    assert doc["environment"]["dtype"] == "fp32" and fp16.environment["dtype"] == "fp16"
    assert doc["environment"]["engine_key"] != fp16.environment["engine_key"]
    assert doc["environment"]["engine"] != fp16.environment["engine"]
    assert Path(doc["environment"]["engine"]).parent == Path(fp16.environment["engine"]).parent  # shared
    folder = home / Path(doc["environment"]["engine"]).parent.parent
    results = sorted(p.name for p in folder.glob("result*.json"))
    assert results == ["result-00000001.json", "result-00000002.json"]  # one per session


def test_trtexec_same_file_two_dtypes_keep_their_own_exports_and_engines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trtexec --remote: a session at fp16 of the same file, run while an fp32 one waits for its
    exports, neither removes nor replaces them (its stale clearing removed every *.json there), and
    each build saves its own engine (both saved model.engine, the fp32 run recording fp16's)."""
    from test_trtexec_backend import play_a_trtexec_board

    play_a_trtexec_board(tmp_path, monkeypatch)
    tokens_per_session(monkeypatch)
    model = tmp_path / "host" / "model.onnx"
    model.parent.mkdir()
    model.write_bytes(conv_model(ConvShape(1, 8, 16, 16, 16, 3, 3)).SerializeToString())
    work = tmp_path / "board_tmp" / "deployopt-trtexec"
    commands: list[list[str]] = []
    real_get = Board.get_matching
    other: list[Timing] = []

    def fp16_meanwhile(self: Board, remote_dir: Any, pattern: str, *args: Any, **kw: Any) -> None:
        if not commands:  # the fp32 run's trtexec is done, its exports wait on the board
            commands.append((tmp_path / "args.txt").read_text().split("\n"))
            options = MeasureOptions(
                dtype="fp16", runs=3, warmup=1, extra={"remote": HOST, "remote_workdir": str(work)}
            )
            with get_backend("trtexec").open(options) as session:
                other.append(session.measure(model))
            commands.append((tmp_path / "args.txt").read_text().split("\n"))
        real_get(self, remote_dir, pattern, *args, **kw)

    monkeypatch.setattr(Board, "get_matching", fp16_meanwhile)
    options = MeasureOptions(
        dtype="fp32", runs=3, warmup=1, extra={"remote": HOST, "remote_workdir": str(work)}
    )
    with get_backend("trtexec").open(options) as session:
        fp32 = session.measure(model)
    (fp16,) = other
    assert fp32.environment["dtype"] == "fp32" and fp16.environment["dtype"] == "fp16"
    assert fp32.environment["engine"] != fp16.environment["engine"]
    assert Path(fp32.environment["engine"]).parent == Path(fp16.environment["engine"]).parent  # one folder

    def exported(args: list[str]) -> str:
        return next(a for a in args if a.startswith("--exportTimes="))

    assert exported(commands[0]) != exported(commands[1])
    assert "--fp16" not in commands[0] and "--fp16" in commands[1]


def test_trtexec_calibration_tables_of_one_name_go_to_the_board_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tables named model.calib with other contents, for the same model: each goes to the board
    under its own name (its contents' hash), so a run beside another does not calibrate on the
    other's table (the second replaced the first's model.calib)."""
    from test_trtexec_backend import play_a_trtexec_board

    args_file = tmp_path / "args.txt"
    play_a_trtexec_board(tmp_path, monkeypatch)
    model = tmp_path / "host" / "model.onnx"
    model.parent.mkdir()
    model.write_bytes(conv_model(ConvShape(1, 8, 16, 16, 16, 3, 3)).SerializeToString())
    work = tmp_path / "board_tmp" / "deployopt-trtexec"
    calibs = []
    for content in (
        b"TRT-8601-EntropyCalibration2\ninput: 3c000000\n",
        b"TRT-8601-EntropyCalibration2\ninput: 3d000000\n",
    ):
        table = tmp_path / f"t{len(calibs)}" / "model.calib"
        table.parent.mkdir()
        table.write_bytes(content)
        extra = {"remote": HOST, "remote_workdir": str(work), "calib_cache": str(table)}
        with get_backend("trtexec").open(MeasureOptions(dtype="int8", runs=3, extra=extra)) as session:
            session.measure(model)
        (calib,) = [a for a in args_file.read_text().split("\n") if a.startswith("--calib=")]
        board_table = Path(calib.partition("=")[2])
        digest = hashlib.sha256(content).hexdigest()[:12]
        assert board_table.name == f"model-{digest}.calib" and board_table.read_bytes() == content
        calibs.append(board_table)
    assert calibs[0] != calibs[1] and calibs[0].read_bytes() != calibs[1].read_bytes()


def test_the_board_folder_keys_external_data_as_the_engine_key_does(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder of a model with external data is keyed on deployopt.backends.tensorrt's
    external_data_digests, the list the engine key reads: the two cannot drift apart (model_dir_name
    built its own list)."""
    import onnx

    import deployopt.backends.tensorrt as trt_backend
    from deployopt.remote import model_dir_name

    log, _ = play_the_board(tmp_path, monkeypatch)
    big = tmp_path / "host" / "big.onnx"
    onnx.save(
        onnx.load(str(model)), str(big), save_as_external_data=True, location="big.weights", size_threshold=0
    )
    real = trt_backend.external_data_digests
    seen: list[list[list[str]]] = []

    def digests(path: Any, data: bytes) -> list[list[str]]:
        out = [[*row, "marked"] for row in real(path, data)]  # what the engine key would read
        seen.append(out)
        return out

    monkeypatch.setattr(trt_backend, "external_data_digests", digests)
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(big), *REMOTE, "--dtype", "fp32", "--runs", "5")
    assert code == 0, err
    assert seen
    sha = hashlib.sha256(big.read_bytes()).hexdigest()
    rdir = f"deployopt-runner/{model_dir_name('big', sha, seen[0])}"
    assert any(line.endswith(f"{HOST}:{rdir}/big.onnx") for line in log.read_text().splitlines())
    assert re.fullmatch(r"big-[0-9a-f]{12}", Path(rdir).name)
