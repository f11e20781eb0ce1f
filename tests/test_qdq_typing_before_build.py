"""A model's typing is read once, before any build, for every dtype: an FP8 or W8A16 Q/DQ model with
the default --dtype fp32 was built and timed as "fp32" on TensorRT 10 (trtexec and the API backend)
and, on TensorRT 11, refused only after the build, for the record (built_precision). The typing was
also parsed again for every record of an fp32 run on TensorRT 11 (0.87 s for a 415 MB model)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto
from test_qdq_fp8 import FP8, fp8_conv
from test_tensorrt_fake_api import V10, V11, install, opts
from test_trtexec_backend import fake, fake11  # noqa: F401 (fixtures)

import deployopt.precision
from deployopt.backends import tensorrt as trt_backend
from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.backends.tensorrt import build_and_time
from deployopt.backends.trtexec import TrtexecBackend
from deployopt.errors import ModelError
from deployopt.precision import to_fp16

#: the remote tests play the board on this machine, as tests/test_tensorrt_remote.py's (one worker)
pytestmark = pytest.mark.xdist_group("board")

W8A16 = r"quantizes activations to uint16: 16-bit Q/DQ \(W8A16\)"
UNPRICED = {"fp8": (TensorProto.FLOAT8E4M3FN, FP8), "w8a16": (TensorProto.UINT16, W8A16)}


@pytest.fixture(params=sorted(UNPRICED))
def unpriced(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str]:
    """(an FP8 or W8A16 Q/DQ model file, the refusal's words)."""
    elem, words = UNPRICED[request.param]
    path = tmp_path / f"{request.param}.onnx"
    onnx.save(fp8_conv(elem), path)
    return path, words


def _engines(tmp_path: Path) -> list[Path]:
    eng = tmp_path / "engines"
    return list(eng.rglob("*")) if eng.exists() else []


@pytest.mark.parametrize("fx", ["fake", "fake11"])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_trtexec_refuses_an_unpriced_qdq_model_before_running(
    fx: str, dtype: str, unpriced: tuple[Path, str], request: pytest.FixtureRequest
) -> None:
    f = request.getfixturevalue(fx)
    path, words = unpriced
    options = MeasureOptions(dtype=dtype, runs=300, workdir=f["workdir"])
    with (
        TrtexecBackend().open(options) as session,
        pytest.raises(ModelError, match=f"^{path.name}: QuantizeLinear 'x_q' {words}"),
    ):
        session.measure(path)
    assert not f["FAKE_ARGS"].exists()  # trtexec never ran


@pytest.mark.parametrize("version", [V10, V11])
def test_tensorrt_refuses_an_unpriced_qdq_model_before_building(
    version: str, unpriced: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    install(monkeypatch, version, "bindings")
    path, words = unpriced
    with pytest.raises(ModelError, match=f"^{path.name}: QuantizeLinear 'x_q' {words}"):
        build_and_time(str(path), opts(tmp_path, dtype="fp32"), per_layer=False)
    assert _engines(tmp_path) == []
    monkeypatch.setattr(trt_backend, "run_isolated", lambda *a: pytest.fail("a worker was started"))
    with (
        get_backend("tensorrt").open(opts(tmp_path, dtype="fp32")) as session,
        pytest.raises(ModelError, match=words),
    ):
        session.measure(path)
    assert _engines(tmp_path) == []


def test_remote_runner_refuses_an_unpriced_qdq_model_before_the_board(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unpriced: tuple[Path, str]
) -> None:
    from test_tensorrt_remote import HOST, play_the_board

    log, _ = play_the_board(tmp_path, monkeypatch)
    path, words = unpriced
    options = MeasureOptions(dtype="fp32", runs=3, warmup=1, extra={"remote": HOST})
    with (
        get_backend("tensorrt").open(options) as session,
        pytest.raises(ModelError, match=f"^{path.name}: QuantizeLinear 'x_q' {words}"),
    ):
        session.measure(path)
    assert not log.exists() or not log.read_text().strip()  # no ssh, no scp


# ---- the typing is read once per model file, not once per run


def _count_typings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of precision.typed_precision (one per parse of a model for its typing)."""
    calls: list[int] = []
    real = deployopt.precision.typed_precision

    def counted(model: onnx.ModelProto) -> str:
        calls.append(1)
        return real(model)

    monkeypatch.setattr(deployopt.precision, "typed_precision", counted)
    return calls


@pytest.fixture
def fp16_model(zoo_model_path: Callable[[str], Path], tmp_path: Path) -> Path:
    path = tmp_path / "m16.onnx"
    onnx.save(to_fp16(onnx.load(zoo_model_path("mobilenet_like"))), path)
    return path


def _runs(session: Any, path: Path) -> list[str]:
    """Three bench runs and a profile of one model: the dtype each recorded."""
    dtypes = [session.measure(path).environment["dtype"] for _ in range(3)]
    return [*dtypes, session.profile(path).environment["dtype"]]


def test_trtexec_reads_the_typing_once_per_model(
    fake11: dict[str, Path],  # noqa: F811
    fp16_model: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _count_typings(monkeypatch)
    with TrtexecBackend().open(MeasureOptions(dtype="fp32", runs=300, workdir=fake11["workdir"])) as session:
        assert _runs(session, fp16_model) == ["fp16"] * 4
    assert len(calls) == 1


def test_tensorrt_reads_the_typing_once_per_model(
    fp16_model: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    install(monkeypatch, V11, "bindings")
    monkeypatch.setattr(trt_backend, "run_isolated", lambda target, args, timeout: build_and_time(*args))
    calls = _count_typings(monkeypatch)
    with get_backend("tensorrt").open(opts(tmp_path, dtype="fp32")) as session:
        assert _runs(session, fp16_model) == ["fp16"] * 4
    assert len(calls) == 1


def test_remote_runner_reads_the_typing_once_per_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fp16_model: Path
) -> None:
    from test_tensorrt_remote import HOST, play_the_board

    play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_TRT", V11)
    calls = _count_typings(monkeypatch)
    options = MeasureOptions(dtype="fp32", runs=3, warmup=1, extra={"remote": HOST})
    with get_backend("tensorrt").open(options) as session:
        assert [session.measure(fp16_model).environment["dtype"] for _ in range(3)] == ["fp16"] * 3
    assert len(calls) == 1


def test_a_model_rewritten_in_place_is_read_again(
    fake11: dict[str, Path],  # noqa: F811
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
) -> None:
    """The memo is keyed by the file as it is (size, mtime, inode): a model replaced by its fp16
    typing under the same name records fp16, not the fp32 read before."""
    path = tmp_path / "m.onnx"
    plain = onnx.load(zoo_model_path("mobilenet_like"))
    onnx.save(plain, path)
    with TrtexecBackend().open(MeasureOptions(dtype="fp32", runs=300, workdir=fake11["workdir"])) as session:
        assert session.measure(path).environment["dtype"] == "fp32"
        onnx.save(to_fp16(plain), tmp_path / "m.tmp")
        (tmp_path / "m.tmp").replace(path)
        assert session.measure(path).environment["dtype"] == "fp16"


def test_the_docs_say_what_an_fp32_record_depends_on() -> None:
    """docs/tensorrt.md said fp32 "reads no version (nothing depends on it)": on TensorRT 11 the
    record is the model's own typing. Its trtexec version table says which boundaries were read
    from logs and sources only."""
    doc = (Path(__file__).parents[1] / "docs" / "tensorrt.md").read_text()
    assert "nothing depends on it" not in doc
    fp32_row = next(ln for ln in doc.splitlines() if ln.startswith("| `fp32` |"))
    assert "as typed in the model, asked fp32" in fp32_row
    rows = {
        ln.split("|")[1].strip(): ln for ln in doc.splitlines() if ln.startswith(("| 8.0–8.1 |", "| < 8.6 |"))
    }
    assert '"NVTX verbosity"' in rows["8.0–8.1"] and "not run on a device" in rows["8.0–8.1"]
    assert '"Skip inference"' in rows["< 8.6"] and "sampleOptions.cpp" in rows["< 8.6"]


def test_input_dims_and_dtypes_share_one_reading_of_the_inputs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """model_input_dtypes (remote calibration) repeated _onnx_input_dims' load-and-skip-initializers
    loop: both read trtexec.onnx_graph_inputs, which leaves out weights listed as inputs."""
    from deployopt.backends import trtexec
    from deployopt.backends.tensorrt_remote import model_input_dtypes

    model = fp8_conv(TensorProto.INT8)
    model.graph.input.append(onnx.helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert [i.name for i in trtexec.onnx_graph_inputs(path)] == ["x"]
    seen: list[Path] = []
    real = trtexec.onnx_graph_inputs
    monkeypatch.setattr(trtexec, "onnx_graph_inputs", lambda p: seen.append(p) or real(p))
    assert trtexec._onnx_input_dims(path) == {"x": [1, 3, 8, 8]}
    assert {n: t.__name__ for n, t in model_input_dtypes(path).items()} == {"x": "float32"}
    assert seen == [path, path]


def test_a_same_size_rewrite_in_place_with_its_mtime_set_back_is_read_again(tmp_path: Path) -> None:
    """An int8 Q/DQ model overwritten in place (same inode) by its FP8 twin of the same size, its
    mtime set back as `cp -p` or a coarse clock leaves it: the memo must not answer int8."""
    import os

    from deployopt.model import file_typed_precision

    int8, fp8 = (fp8_conv(t).SerializeToString() for t in (TensorProto.INT8, TensorProto.FLOAT8E4M3FN))
    assert len(int8) == len(fp8)
    path = tmp_path / "m.onnx"
    path.write_bytes(int8)
    before = os.stat(path)
    assert file_typed_precision(path) == "int8"
    with open(path, "r+b") as f:
        f.write(fp8)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_ino == before.st_ino
    with pytest.raises(ModelError, match=r"m\.onnx: .*float8"):
        file_typed_precision(path)
