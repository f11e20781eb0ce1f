"""TensorRT backend: what can be checked without TensorRT (none is installable here).

Version dispatch, engine cache keys, per-layer aggregation, runner-result loading, availability
messages, the isolated worker (with standard-library targets), and INT8 calibration batching.
Nothing here builds an engine.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import types
from pathlib import Path

import numpy as np
import pytest

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.backends.tensorrt import (
    CUDA_HINT,
    DEFAULT_WORKSPACE_MIB,
    TRT_HINT,
    TensorRTBackend,
    aggregate_layer_times,
    api_for_version,
    build_facts,
    check_cuda,
    content_digest,
    engine_key,
    explicit_batch_flag,
    load_runner_result,
    profiled_execution,
    run_isolated,
    workspace_api,
)
from deployopt.backends.tensorrt_calibrator import (
    CalibrationBatcher,
    CalibrationCache,
    CalibratorCore,
    TableCalibrator,
    load_samples,
    make_entropy_calibrator,
)
from deployopt.errors import BackendFailed, BackendUnavailable, DataError
from deployopt.timing import Timing

HAS_TRT = importlib.util.find_spec("tensorrt") is not None


# ------------------------------------------------------------------ version dispatch


@pytest.mark.parametrize(
    ("version", "api", "workspace", "explicit", "profiled"),
    [
        ("8.0.1", "v2", "max_workspace_size", True, "execute_v2"),  # JetPack 4.6.0 era
        ("8.2.1", "v2", "max_workspace_size", True, "execute_v2"),  # Nano / TX2, JetPack 4.6.x
        ("8.4.1", "v2", "memory_pool", True, "execute_v2"),  # JetPack 5.0.2
        ("8.5.2", "v3", "memory_pool", True, "execute_async_v3"),  # Xavier / Orin, JetPack 5.1
        ("8.6.1.6", "v3", "memory_pool", True, "execute_async_v3"),
        ("10.3.0", "v3", "memory_pool", False, "execute_async_v3"),  # Orin, JetPack 6
        ("10.16.1", "v3", "memory_pool", False, "execute_async_v3"),
    ],
)
def test_version_dispatch(version: str, api: str, workspace: str, explicit: bool, profiled: str) -> None:
    assert api_for_version(version) == api
    assert workspace_api(version) == workspace
    assert explicit_batch_flag(version) is explicit
    assert profiled_execution(version) == profiled


def test_too_old_version() -> None:
    with pytest.raises(BackendUnavailable, match=r"TensorRT 7\.1\.3 is too old"):
        api_for_version("7.1.3")


def test_engine_key_changes_with_what_changes_the_engine() -> None:
    base = engine_key(b"onnx", MeasureOptions(dtype="fp16"), "8.2.1", {"x": [1, 3, 8, 8]})
    assert base == engine_key(b"onnx", MeasureOptions(dtype="fp16", runs=7), "8.2.1", {"x": [1, 3, 8, 8]})
    others = {
        engine_key(b"onnx2", MeasureOptions(dtype="fp16"), "8.2.1", {"x": [1, 3, 8, 8]}),
        engine_key(b"onnx", MeasureOptions(dtype="int8"), "8.2.1", {"x": [1, 3, 8, 8]}),
        engine_key(b"onnx", MeasureOptions(dtype="fp16"), "10.3.0", {"x": [1, 3, 8, 8]}),
        engine_key(b"onnx", MeasureOptions(dtype="fp16"), "8.2.1", {"x": [2, 3, 8, 8]}),
        engine_key(
            b"onnx", MeasureOptions(dtype="fp16", extra={"workspace_mib": 64}), "8.2.1", {"x": [1, 3, 8, 8]}
        ),
    }
    assert base not in others and len(others) == 5 and len(base) == 64
    # the default workspace is the one build_engine uses
    spelled = MeasureOptions(dtype="fp16", extra={"workspace_mib": DEFAULT_WORKSPACE_MIB})
    assert base == engine_key(b"onnx", spelled, "8.2.1", {"x": [1, 3, 8, 8]})
    # what the build does not read is not in the key
    ignored = {"timing_cache": "t.cache", "cuda": "pycuda", "isolate": False, "rebuild": True}
    assert base == engine_key(
        b"onnx", MeasureOptions(dtype="fp16", extra=ignored), "8.2.1", {"x": [1, 3, 8, 8]}
    )


def test_int8_engine_key_follows_calibration_contents_not_names(tmp_path: Path) -> None:
    shapes = {"x": [1, 3, 8, 8]}
    data = tmp_path / "calib.npy"
    table = tmp_path / "model.calib"
    np.save(data, np.zeros((4, 3, 8, 8), np.float32))

    def key(dtype: str = "int8", calibration: Path | None = data, **extra: object) -> str:
        options = MeasureOptions(dtype=dtype, calibration_data=str(calibration) if calibration else None)
        options.extra.update(extra)
        return engine_key(b"onnx", options, "10.3.0", shapes)

    first = key(calib_cache=str(table))  # no table yet
    table.write_bytes(b"TRT-100300-EntropyCalibration2\ninput: 3c000000\n")
    with_table = key(calib_cache=str(table))
    assert with_table != first and with_table == key(calib_cache=str(table))
    table.write_bytes(b"TRT-100300-EntropyCalibration2\ninput: 3c010a14\n")  # same name, new table
    assert key(calib_cache=str(table)) not in (first, with_table)

    plain = key()
    np.save(data, np.ones((4, 3, 8, 8), np.float32))  # same name, new data
    assert key() != plain
    assert key(calibration_count=2) != key()  # another number of samples calibrates differently
    moved = tmp_path / "elsewhere.npy"
    moved.write_bytes(data.read_bytes())
    assert key(calibration=moved) == key()  # the same data under another name: the same engine
    # builds that do not calibrate ignore the calibration options (fp16; a Q/DQ INT8 model with no
    # calib_cache: a calib_cache alone is a table the build reads, see the test after the next)
    assert key(calibration=None, calibration_count=2) == key(calibration=None)
    assert key(dtype="fp16") == key(dtype="fp16", calibration=None, calibration_count=2)


def test_int8_engine_key_of_a_table_given_as_calibration_data(tmp_path: Path) -> None:
    """A table as calibration_data is only read: its bytes are the key; the sample count and
    calib_cache (what a build from data uses and fills) are left out, and the facts say so."""
    table = tmp_path / "model.calib"
    table.write_bytes(b"TRT-100300-EntropyCalibration2\ninput: 3c000000\n")

    def facts(path: Path = table, **extra: object) -> dict:
        options = MeasureOptions(dtype="int8", calibration_data=str(path))
        options.extra.update(extra)
        return build_facts(b"onnx", options, "10.3.0", {"x": [1, 3, 8, 8]})

    first = facts()
    assert first["calibration_sha256"] == content_digest(table)
    assert first["calibration_count"] is None and first["calib_cache_sha256"] is None
    other = tmp_path / "other.calib"
    other.write_bytes(b"TRT-100300-EntropyCalibration2\ninput: 3c010a14\n")
    assert facts(calibration_count=2, calib_cache=str(other)) == first
    renamed = tmp_path / "from-trtexec.cache"
    renamed.write_bytes(table.read_bytes())
    assert facts(renamed) == first  # the same table under another name
    assert facts(other) != first


def test_int8_engine_key_of_a_table_given_as_calib_cache_alone(tmp_path: Path) -> None:
    """extra["calib_cache"] without calibration_data: the build reads that table, so its bytes are
    the key, as for the same table given as calibration_data; a build that reads no table (fp16)
    ignores it."""
    table = tmp_path / "model.calib"
    table.write_bytes(b"TRT-100300-EntropyCalibration2\ninput: 3c000000\n")

    def facts(dtype: str = "int8", calibration: Path | None = None, **extra: object) -> dict:
        options = MeasureOptions(dtype=dtype, calibration_data=str(calibration) if calibration else None)
        options.extra.update(extra)
        return build_facts(b"onnx", options, "10.3.0", {"x": [1, 3, 8, 8]})

    alone = facts(calib_cache=str(table))
    assert alone["calibration_sha256"] == content_digest(table) and alone != facts()
    assert alone == facts(calibration=table)  # the same table, either way: the same engine
    assert facts(calib_cache=str(table), calibration_count=2) == alone  # nothing is sampled
    table.write_bytes(b"TRT-100300-EntropyCalibration2\ninput: 3c010a14\n")  # same name, new table
    assert facts(calib_cache=str(table)) != alone
    assert facts("fp16", calib_cache=str(table)) == facts("fp16")


def test_content_digest_of_a_folder(tmp_path: Path) -> None:
    """A folder of calibration data is its files' relative names and bytes, the files
    load_calibration reads: hidden files do not count, a renamed or changed file does."""
    folder = tmp_path / "calib"
    (folder / "cats").mkdir(parents=True)
    (folder / "a.npy").write_bytes(b"a" * 3_000_000)  # larger than one read chunk
    (folder / "cats" / "b.npy").write_bytes(b"b")
    base = content_digest(folder)
    assert base == content_digest(str(folder)) and len(base) == 64
    (folder / ".DS_Store").write_bytes(b"litter")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_bytes(b"ref")
    assert content_digest(folder) == base
    copy = tmp_path / "copy"
    (copy / "cats").mkdir(parents=True)
    (copy / "a.npy").write_bytes(b"a" * 3_000_000)
    (copy / "cats" / "b.npy").write_bytes(b"b")
    assert content_digest(copy) == base  # names inside the folder, not the folder's own path
    (folder / "cats" / "b.npy").rename(folder / "cats" / "c.npy")
    renamed = content_digest(folder)
    assert renamed != base
    (folder / "a.npy").write_bytes(b"a" * 2_999_999 + b"A")
    assert content_digest(folder) not in (base, renamed)
    assert content_digest(folder / "cats" / "c.npy") == hashlib.sha256(b"b").hexdigest()
    assert content_digest(tmp_path / "missing") == "absent"


def counting_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every file tensorrt.py reads to hash (by name), with an empty digest memo."""
    from deployopt.backends import tensorrt as trt_mod

    read: list[str] = []
    real = trt_mod._file_sha256

    def counting(path: Path) -> str:
        read.append(Path(path).name)
        return real(path)

    monkeypatch.setattr(trt_mod, "_file_sha256", counting)
    monkeypatch.setattr(trt_mod, "_sha_memo", {}, raising=False)
    return read


def test_content_digest_reads_a_file_again_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder's digest reads each file once per state of the file (path, inode, size, mtime,
    ctime): the same folder again reads nothing; a rewritten, replaced or added file is read again,
    alone, and still changes the digest."""
    from deployopt.backends import tensorrt as trt_mod

    read = counting_hashes(monkeypatch)
    later = trt_mod.time.time_ns() + 10**10  # the files settled long ago (see the next test)
    monkeypatch.setattr(trt_mod, "_now_ns", lambda: later, raising=False)
    folder = tmp_path / "calib"
    (folder / "cats").mkdir(parents=True)
    for name in ("a.npy", "b.npy", "cats/c.npy"):
        (folder / name).write_bytes(name.encode())
    base = content_digest(folder)
    assert sorted(read) == ["a.npy", "b.npy", "c.npy"]
    read.clear()
    assert content_digest(folder) == base and content_digest(str(folder)) == base
    assert read == []  # nothing read: the same files in the same state

    st = (folder / "b.npy").stat()
    (folder / "b.npy").write_bytes(b"B.npy")  # same size, a later mtime
    os.utime(folder / "b.npy", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    changed = content_digest(folder)
    assert changed != base and read == ["b.npy"]
    read.clear()
    assert content_digest(folder) == changed and read == []

    tmp = folder / "a.tmp"  # an atomic replace: same size, same mtime, another inode
    tmp.write_bytes(b"A.npy")
    st = (folder / "a.npy").stat()
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, folder / "a.npy")
    replaced = content_digest(folder)
    assert replaced not in (base, changed) and read == ["a.npy"]
    read.clear()
    (folder / "d.npy").write_bytes(b"d")
    assert content_digest(folder) not in (base, changed, replaced) and read == ["d.npy"]
    read.clear()
    assert content_digest(folder / "cats" / "c.npy") == hashlib.sha256(b"cats/c.npy").hexdigest()
    assert read == []  # a file given alone shares the memo


def test_content_digest_rereads_files_changed_too_recently_to_trust_their_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file changed within the last two seconds may change again within the same timestamp tick,
    leaving size and times as they were: it is read every time until it has settled."""
    read = counting_hashes(monkeypatch)
    data = tmp_path / "calib.npy"
    data.write_bytes(b"one")
    st = data.stat()
    first = content_digest(data)
    data.write_bytes(b"two")  # same size; mtime (and ctime, within a tick) as before
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert content_digest(data) != first and read == ["calib.npy", "calib.npy"]


def test_aggregate_layer_times() -> None:
    layers = aggregate_layer_times({"conv": [0.010, 0.030, 0.020], "relu": [0.005, 0.005]}, ["conv", "relu"])
    assert [layer.name for layer in layers] == ["conv", "relu"]
    assert layers[0].time_us == pytest.approx(20.0) and layers[1].time_us == pytest.approx(5.0)
    assert layers[0].share == pytest.approx(0.8) and layers[1].share == pytest.approx(0.2)
    assert layers[0].extra == {"runs": 3}


def test_check_cuda() -> None:
    assert check_cuda((0, 1234), "cudaMalloc") == 1234
    assert check_cuda((0,), "cudaFree") is None
    assert check_cuda((0, 1, 2), "x") == (1, 2)

    class Err(int):  # cuda-python's error enums are ints with a .name
        name = "cudaErrorMemoryAllocation"

    with pytest.raises(BackendFailed, match="CUDA error in cudaMalloc: cudaErrorMemoryAllocation"):
        check_cuda((Err(2), 0), "cudaMalloc")


# ------------------------------------------------------------------ availability, options


def test_registry_and_availability() -> None:
    backend = get_backend("tensorrt")
    assert isinstance(backend, TensorRTBackend) and backend.dtypes == ("fp32", "fp16", "int8")
    ok, why = backend.availability()
    if not HAS_TRT:
        assert (ok, why) == (False, TRT_HINT)
        # the extra (TensorRT and cuda-python in one step), not `pip install tensorrt` alone
        assert "pip install 'deployopt[tensorrt]'" in why and "JetPack" in why
        with pytest.raises(BackendUnavailable, match=r"pip install 'deployopt\[tensorrt\]'"):
            backend.open(MeasureOptions())
    else:  # pragma: no cover - only where TensorRT exists
        assert ok or why == CUDA_HINT


@pytest.mark.skipif(HAS_TRT, reason="checks the message shown where TensorRT is missing")
def test_sms_refused_before_anything_runs() -> None:
    with pytest.raises(BackendUnavailable):
        TensorRTBackend().open(MeasureOptions(sms=8))


# ------------------------------------------------------------------ runner results


def test_load_runner_result_round_trip(tmp_path: Path) -> None:
    t = Timing(
        backend="tensorrt-jetson",
        samples_us=[100.0, 110.0, 105.0],
        warmup=10,
        timed="one forward pass",
        environment={"sms": 8, "nvpmodel": "MODE_15W"},
    )
    path = tmp_path / "r.json"
    path.write_text(json.dumps(t.to_json()))
    back = load_runner_result(path)
    assert back.samples_us == [100.0, 110.0, 105.0] and back.median_us == 105.0
    assert back.environment["nvpmodel"] == "MODE_15W" and back.warmup == 10


def test_load_runner_result_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"none\.json: no such file"):
        load_runner_result(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(DataError, match="is not JSON"):
        load_runner_result(bad)
    bad.write_text('{"backend": "x"}')
    with pytest.raises(DataError, match="no samples_us"):
        load_runner_result(bad)
    bad.write_text('{"samples_us": [1.0]}')
    with pytest.raises(DataError, match="is not a measurement"):
        load_runner_result(bad)


# ------------------------------------------------------------------ isolated worker


def test_run_isolated_returns_result() -> None:
    assert run_isolated("math.sqrt", (16.0,), timeout_s=60) == 4.0


def test_run_isolated_exception_is_one_line() -> None:
    with pytest.raises(BackendFailed, match=r"^ValueError: math domain error$"):
        run_isolated("math.sqrt", (-1.0,), timeout_s=60)


def test_run_isolated_keeps_deployopt_error_types() -> None:
    with pytest.raises(BackendUnavailable, match="too old"):
        run_isolated("deployopt.backends.tensorrt.api_for_version", ("7.0.0",), timeout_s=60)


@pytest.mark.slow
def test_run_isolated_forwards_deployopt_warnings() -> None:
    """A warning in the worker (an unsaved timing cache) reaches the parent as the same class, once."""
    from deployopt.errors import CacheWarning

    with pytest.warns(CacheWarning, match="cache not saved") as record:
        assert run_isolated("warnings.warn", ("cache not saved", CacheWarning), timeout_s=60) is None
    assert len([w for w in record if issubclass(w.category, CacheWarning)]) == 1


def test_run_isolated_timeout_and_crash() -> None:
    with pytest.raises(BackendFailed, match=r"did not finish within 3 s"):
        run_isolated("time.sleep", (60,), timeout_s=3)
    with pytest.raises(BackendFailed, match=r"killed by signal 6 without a result"):
        run_isolated("os.abort", (), timeout_s=60)


def test_run_isolated_worker_killed_by_sigkill_points_at_the_oom_killer() -> None:
    """A worker ended by SIGKILL (it sends itself one, as the kernel's OOM killer ends a build): one
    line that says what usually sends it and where to look, not `killed by signal 9`."""
    with pytest.raises(BackendFailed) as exc:
        run_isolated("signal.raise_signal", (9,), timeout_s=60)
    assert str(exc.value) == (
        "TensorRT worker was killed (SIGKILL) without a result: most often the kernel's out-of-memory "
        "killer (a Jetson's GPU shares the system's memory): `sudo dmesg | grep -i -E 'killed process|out "
        "of memory'` tells; stop other programs, add swap or try a smaller --batch"
    )


# ------------------------------------------------------------------ INT8 calibration batching


def _samples(n: int, batch: int = 1) -> list[dict[str, np.ndarray]]:
    return [{"x": np.full((batch, 3, 2, 2), float(i))} for i in range(n)]


def test_batcher_one_sample_per_batch_in_order() -> None:
    b = CalibrationBatcher(_samples(3), {"x": (1, 3, 2, 2)})
    assert (b.num_batches, b.per_batch, b.dropped) == (3, 1, 0)
    got = [b.next_batch() for _ in range(4)]
    assert [float(g["x"][0, 0, 0, 0]) for g in got[:3]] == [0.0, 1.0, 2.0]
    assert got[3] is None  # exhausted
    assert got[0]["x"].dtype == np.float32 and got[0]["x"].flags["C_CONTIGUOUS"]
    b.reset()
    assert float(b.next_batch()["x"][0, 0, 0, 0]) == 0.0


def test_batcher_stacks_items_and_drops_partial_batch() -> None:
    b = CalibrationBatcher(_samples(10), {"x": (4, 3, 2, 2)}, dtypes={"x": np.float16})
    assert (b.num_batches, b.per_batch, b.dropped) == (2, 4, 2)
    first = b.next_batch()["x"]
    assert first.shape == (4, 3, 2, 2) and first.dtype == np.float16
    assert first[:, 0, 0, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert b.next_batch()["x"][:, 0, 0, 0].tolist() == [4.0, 5.0, 6.0, 7.0]
    assert b.next_batch() is None
    assert b.nbytes("x") == 4 * 3 * 2 * 2 * 2


def test_batcher_rejects_wrong_shapes() -> None:
    with pytest.raises(DataError, match=r"sample 0 input 'x' has shape \[1, 3, 4, 4\]; the engine input is"):
        CalibrationBatcher([{"x": np.zeros((1, 3, 4, 4))}], {"x": (1, 3, 2, 2)})
    with pytest.raises(DataError, match="has no input 'y'"):
        CalibrationBatcher(_samples(1), {"x": (1, 3, 2, 2), "y": (1, 1)})
    with pytest.raises(DataError, match="no calibration samples"):
        CalibrationBatcher([], {"x": (1, 3, 2, 2)})


def test_calibration_cache(tmp_path: Path) -> None:
    cache = CalibrationCache(tmp_path / "sub" / "model.calib")
    assert cache.read() is None
    cache.write(b"TRT-8201-EntropyCalibration2\n")
    assert cache.read() == b"TRT-8201-EntropyCalibration2\n"
    (tmp_path / "sub" / "model.calib").write_bytes(b"")
    assert cache.read() is None  # empty file: calibrate again
    assert CalibrationCache(None).read() is None
    CalibrationCache(None).write(b"x")  # no path: nothing written, no error


class RecordingMemory:
    """Host-side stand-in for device memory: records what the calibrator uploads."""

    def __init__(self) -> None:
        self.next_ptr = 0x1000
        self.uploads: list[tuple[int, list[float]]] = []
        self.freed: list[int] = []

    def alloc(self, nbytes: int) -> int:
        self.next_ptr += 0x1000
        return self.next_ptr

    def htod(self, ptr: int, array: np.ndarray) -> None:
        self.uploads.append((ptr, array[:, 0, 0, 0].tolist()))

    def free(self, ptr: int) -> None:
        self.freed.append(ptr)


def test_calibrator_core_hands_out_pointers_then_none(tmp_path: Path) -> None:
    mem = RecordingMemory()
    core = CalibratorCore(
        CalibrationBatcher(_samples(4), {"x": (2, 3, 2, 2)}), CalibrationCache(tmp_path / "c"), mem
    )
    assert core.get_batch_size() == 1
    assert core.get_batch(["x"]) == [0x2000]
    assert core.get_batch(["x"]) == [0x2000]  # same buffer reused
    assert core.get_batch(["x"]) is None
    assert mem.uploads == [(0x2000, [0.0, 1.0]), (0x2000, [2.0, 3.0])]
    assert core.read_calibration_cache() is None
    core.write_calibration_cache(memoryview(b"table"))
    assert (tmp_path / "c").read_bytes() == b"table" and core.read_calibration_cache() == b"table"
    core.free()
    assert mem.freed == [0x2000]


def test_calibrator_core_unknown_input() -> None:
    core = CalibratorCore(
        CalibrationBatcher(_samples(1), {"x": (1, 3, 2, 2)}), CalibrationCache(None), RecordingMemory()
    )
    with pytest.raises(DataError, match="asked for calibration input 'images'"):
        core.get_batch(["images"])


def test_entropy_calibrator_subclass_forwards() -> None:
    """The subclass is created from whatever module is passed as `trt`; here a namespace whose base
    class only records that its __init__ ran (as pybind11 requires)."""

    class Base:
        def __init__(self) -> None:
            self.base_init = True

    trt = types.SimpleNamespace(IInt8EntropyCalibrator2=Base)
    core = CalibratorCore(
        CalibrationBatcher(_samples(1), {"x": (1, 3, 2, 2)}), CalibrationCache(None), RecordingMemory()
    )
    calib = make_entropy_calibrator(trt, core)
    assert isinstance(calib, Base) and calib.base_init
    assert calib.get_batch_size() == 1
    assert calib.get_batch(["x"]) == [0x2000] and calib.get_batch(["x"]) is None
    assert calib.read_calibration_cache() is None


def test_table_calibrator_reads_the_table_and_never_writes(tmp_path: Path) -> None:
    """A table without data: TensorRT gets the table's bytes and no batch, and what it hands back
    is dropped, so the user's file stays as it was (as jetson/runner.py does)."""
    table = tmp_path / "t.calib"
    table.write_bytes(b"TRT-8502-EntropyCalibration2\nx: 3c010a14\n")
    trt = types.SimpleNamespace(IInt8EntropyCalibrator2=type("Base", (), {"__init__": lambda self: None}))
    calib = make_entropy_calibrator(trt, TableCalibrator(table))
    assert calib.get_batch_size() == 1 and calib.get_batch(["x"]) is None
    assert calib.read_calibration_cache() == table.read_bytes()
    calib.write_calibration_cache(memoryview(b"something else"))
    assert table.read_bytes() == b"TRT-8502-EntropyCalibration2\nx: 3c010a14\n"
    table.write_bytes(b"")
    with pytest.raises(DataError, match=r"^calibration table .*t\.calib is empty: give the data"):
        TableCalibrator(table)
    with pytest.raises(DataError, match=r"^calibration table .*none\.calib: cannot read it"):
        TableCalibrator(tmp_path / "none.calib")


def test_load_samples_from_npy(tmp_path: Path) -> None:
    pytest.importorskip("deployopt.fidelity")
    data = np.arange(4 * 3 * 2 * 2, dtype=np.float32).reshape(4, 3, 2, 2)
    np.save(tmp_path / "cal.npy", data)
    samples = load_samples(tmp_path / "cal.npy", {"x": (1, 3, 2, 2)}, count=3)
    assert len(samples) == 3 and samples[0]["x"].shape == (1, 3, 2, 2)
    b = CalibrationBatcher(samples, {"x": (1, 3, 2, 2)})
    assert np.array_equal(b.next_batch()["x"], data[:1])
