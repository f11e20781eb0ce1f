"""The pre-flight memory check (deployopt.memory): the estimate by hand, and one-line refusals
before anything is allocated, with the available memory monkeypatched (nothing here allocates
more than a few MiB)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt import memory
from deployopt.backends.ort import prepare_model
from deployopt.errors import BackendFailed, InsufficientMemory
from deployopt.layers import ConvShape, conv_model
from deployopt.memory import RunEstimate, estimate_run


def tiny_cnn(batch: int | str = 1) -> onnx.ModelProto:
    """x[N,3,8,8] → Conv 3→4 (3×3, pad 1) → Relu → MaxPool 2×2 → Flatten → Gemm 64→10."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.zeros(4, np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((10, 64)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(np.zeros(10, np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_estimate_of_a_tiny_cnn_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn("N"), str(path))
    n = 5
    model = prepare_model(path, batch=n).model
    # inputs: x = N·3·8·8 floats
    # weights: 4·3·3·3 + 4 + 10·64 + 10 = 762 floats
    # per node: Conv: its output c (x is a graph input, counted once) = N·4·8·8;
    #   Relu: its output = N·4·8·8 (may run in place); MaxPool: r + p = N·256 + N·64;
    #   Flatten: a view of p; Gemm: f (= p) + y = N·64 + N·10. Largest: MaxPool, N·320 floats.
    assert estimate_run(model) == RunEstimate(inputs=4 * n * 192, weights=4 * 762, activations=4 * n * 320)
    assert estimate_run(model).total == 13288
    # fp16 on a GPU: every floating tensor at 2 bytes
    assert estimate_run(model, float_bytes=2) == RunEstimate(2 * n * 192, 2 * 762, 2 * n * 320)
    # the one-conv model the CLI tests time: input 8·8·8, output 16·8·8, weights 16·8·3·3 + 16
    conv = prepare_model(_save(tmp_path / "conv.onnx", conv_model(ConvShape(1, 8, 8, 8, 16))), batch=3).model
    assert estimate_run(conv) == RunEstimate(
        inputs=3 * 512 * 4, weights=(1152 + 16) * 4, activations=3 * 1024 * 4
    )


def test_unknown_shapes_skip_the_check() -> None:
    model = onnx.shape_inference.infer_shapes(tiny_cnn("N"))  # batch left symbolic
    assert estimate_run(model) is None
    memory.require_memory(None, 1, model, "onnxruntime, host memory")  # nothing to compare: no error
    memory.require_memory(RunEstimate(10, 0, 0), None, model, "onnxruntime, host memory")


def test_available_host_memory_reads_meminfo_and_a_cgroup_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 8000 kB\nMemFree: 1000 kB\nMemAvailable: 3000 kB\nSwapFree: 1000 kB\n")
    real_meminfo, real_cgroup = memory._meminfo, memory._cgroup_free
    monkeypatch.setattr(memory, "_meminfo", lambda: real_meminfo(str(meminfo)))
    monkeypatch.setattr(memory, "_cgroup_free", lambda: None)
    assert memory.available_host_bytes() == 4000 * 1024  # available RAM + free swap
    monkeypatch.setattr(memory, "_cgroup_free", lambda: 1_000_000)  # a container's limit is lower
    assert memory.available_host_bytes() == 1_000_000
    v2 = tmp_path / "cgroup"
    v2.mkdir()
    (v2 / "memory.max").write_text("3000000\n")
    (v2 / "memory.current").write_text("2500000\n")
    (v2 / "memory.stat").write_text("anon 1000000\ninactive_file 1000000\n")
    assert real_cgroup(v2) == 3000000 - 1500000  # the inactive file cache is reclaimable
    (v2 / "memory.max").write_text("max\n")
    assert real_cgroup(v2) is None
    v1 = tmp_path / "cgroup1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    (v1 / "memory.usage_in_bytes").write_text("5000\n")
    assert real_cgroup(v1.parent) is None
    (v1 / "memory.limit_in_bytes").write_text("8000\n")
    (v1 / "memory.stat").write_text("cache 3000\ntotal_inactive_file 1000\n")
    assert real_cgroup(v1.parent) == 8000 - 4000
    monkeypatch.setattr(memory, "_meminfo", lambda: {})  # not Linux: the physical memory, a ceiling
    pages = {"SC_PHYS_PAGES": 1000, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(memory.os, "sysconf", lambda name: pages[name])
    assert memory.available_host_bytes() == 4096000
    monkeypatch.setattr(memory.os, "sysconf", lambda name: int("not on this system"))
    assert memory.available_host_bytes() is None  # nothing says: the check is skipped


def _save(path: Path, model: onnx.ModelProto) -> Path:
    onnx.save(model, str(path))
    return path


@pytest.fixture
def conv_path(tmp_path: Path) -> Path:
    return _save(tmp_path / "conv.onnx", conv_model(ConvShape(1, 8, 8, 8, 16)))


def _one_line_refusal(code: int, out: str, err: str, where: str, hint: str) -> None:
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: batch 4096 needs at least 24.0 MiB for inputs, weights and activations ")
    assert f"({where}), 1.0 MiB available; {hint}\n" in err, err


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_a_batch_that_cannot_fit_is_one_line_before_anything_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, conv_path: Path, tmp_path: Path, command: str
) -> None:
    from deployopt.backends import ort as ort_backend

    def no_inputs(*a: object, **k: object) -> None:
        raise AssertionError("inputs built although they cannot fit")

    monkeypatch.setattr(ort_backend, "random_inputs", no_inputs)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 1 << 20)
    out_file = tmp_path / "result.json"
    code, out, err = run_cli(
        monkeypatch, capsys, command, str(conv_path), "--batch", "4096", "--runs", "2", "-o", str(out_file)
    )
    _one_line_refusal(code, out, err, "onnxruntime, host memory", "try a smaller --batch or --input-shape")
    assert not out_file.exists()


def test_the_check_can_be_turned_off(monkeypatch: pytest.MonkeyPatch, capsys: Any, conv_path: Path) -> None:
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 1 << 20)
    monkeypatch.setenv("DEPLOYOPT_MEMORY_CHECK", "0")
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(conv_path), "--batch", "4096", "--runs", "2")
    assert code == 0, err
    monkeypatch.setenv("DEPLOYOPT_MEMORY_CHECK", "1")  # anything else keeps it on
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(conv_path), "--batch", "4096", "--runs", "2")
    assert code == 2 and "needs at least 24.0 MiB" in err


def test_a_batch_that_fits_still_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, conv_path: Path, tmp_path: Path
) -> None:
    asked = []
    need = estimate_run(prepare_model(conv_path, batch=4096).model).total

    def exactly_enough() -> int:
        asked.append(need)
        return need

    monkeypatch.setattr(memory, "available_host_bytes", exactly_enough)
    out_file = tmp_path / "result.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(conv_path), "--batch", "4096", "--runs", "2", "-o", str(out_file)
    )
    assert code == 0, err
    assert asked, "the check was not made"
    assert "batch 4096" in json.loads(out_file.read_text())["timed"]


def test_verify_refuses_inputs_that_cannot_fit(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    model = conv_model(ConvShape(1, 8, 8, 8, 16))
    for value in (*model.graph.input, *model.graph.output):  # a dynamic batch --input-shape may set
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    path = _save(tmp_path / "conv.onnx", model)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: 1 << 20)

    def no_inputs(*a: object, **k: object) -> None:
        raise AssertionError("calibration inputs drawn although they cannot fit")

    monkeypatch.setattr("deployopt.cli.verify_cmd.load_calibration", no_inputs)
    code, out, err = run_cli(
        monkeypatch, capsys, "verify", str(path), str(path), "--input-shape", "x:4096x8x8x8", "--count", "2"
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    # 2 input sets of 8 MiB, both models' weights, both models' outputs (16 MiB each)
    assert err.startswith("error: batch 4096 needs at least 48.0 MiB for inputs, weights and activations ")
    assert err.endswith(
        "(onnxruntime fidelity check, 2 input samples held at once, host memory), 1.0 MiB available; "
        "try a smaller --input-shape or --count\n"
    )


@pytest.mark.parametrize("backend", ["model", "ort"])
def test_optimize_refuses_before_its_output_folder_exists(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, zoo_model_path: Any, backend: str
) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    model = zoo_model_path("vgg16_pruned_b4")
    need = estimate_run(prepare_model(model, batch=64).model)
    assert need is not None
    if backend == "model":  # runs nothing: the fidelity check's 4 random input sets are what cannot fit
        available = RunEstimate(4 * need.inputs, need.weights, need.activations).total - 1
        where = "onnxruntime fidelity check, 4 input samples held at once, host memory"
    else:  # the ort backend's own run (the fidelity check, larger, is let through here)
        monkeypatch.setattr(memory, "require_fidelity_memory", lambda *a, **k: None)
        available = need.total - 1
        where = "onnxruntime, host memory"
    monkeypatch.setattr(memory, "available_host_bytes", lambda: available)
    outdir = tmp_path / "out"
    args = [
        "optimize",
        str(model),
        "--target",
        "h200",
        "--backend",
        backend,
        "--batch",
        "64",
        "-o",
        str(outdir),
    ]
    args += ["--runs", "5", "--dtype", "fp32"] if backend == "ort" else ["--sms", "8"]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    # the refusal alone: ort's warning that it times a GPU target on the CPU is for a run that begins
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("error: batch 64 needs at least "), err
    assert err.endswith(
        f"({where}), {memory._gib(available)} available; try a smaller --batch or --input-shape\n"
    )
    assert not outdir.exists()


class _FakeCuda:
    """torch.cuda as the worker's check reads it: 1 GiB free, 256 MiB cached by PyTorch, unused."""

    @staticmethod
    def mem_get_info() -> tuple[int, int]:
        return 1 << 30, 80 << 30

    @staticmethod
    def memory_reserved() -> int:
        return 512 << 20

    @staticmethod
    def memory_allocated() -> int:
        return 256 << 20


def test_torch_worker_checks_host_and_gpu_memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from deployopt.backends.torch import _error_class
    from deployopt.backends.torch_worker import Worker, WorkerError

    # the worker's check, in this process (no torch needed for it): a bare Worker on the CPU
    worker = Worker.__new__(Worker)
    worker.cuda, worker.dtype_name = False, "fp32"
    path = _save(tmp_path / "tiny.onnx", tiny_cnn("N"))
    n = 1 << 20
    model = prepare_model(path, batch=n).model
    need = estimate_run(model)
    assert need is not None and need.total == 4 * (512 * n + 762)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: need.total - 1)
    with pytest.raises(WorkerError) as sent:  # what load() sends the parent
        worker.load({"path": str(path), "batch": n, "input_shapes": {}})
    assert sent.value.kind == "InsufficientMemory" and "(torch, host memory)" in str(sent.value)
    assert _error_class("InsufficientMemory") is InsufficientMemory  # what the parent raises
    # on CUDA the host holds only the inputs and weights; the GPU all of it, at 2 bytes in fp16
    monkeypatch.setattr(memory, "available_host_bytes", lambda: need.inputs + need.weights)
    worker.cuda, worker.dtype_name = True, "fp16"
    worker.torch = type("FakeTorch", (), {"cuda": _FakeCuda})
    worker.check_memory(model)  # fp16: 2 GiB / 2 + 1.5 KiB fits in 1 GiB free + 256 MiB cached
    worker.dtype_name = "fp32"
    with pytest.raises(InsufficientMemory) as info:
        worker.check_memory(model)
    assert str(info.value) == (
        "batch 1048576 needs at least 2.0 GiB for inputs, weights and activations (torch, GPU memory), "
        "1.2 GiB available; try a smaller --batch or --input-shape"
    )


def test_the_torch_worker_skips_the_host_check_optimize_made_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """optimize checks host memory in the parent (before OUTDIR exists) and the worker checked the
    same input model again, so a run close to its memory warned twice. The parent now sends what it
    checked with the next request: the worker skips a model of that estimate, and checks every other
    one (a candidate of other widths; a later model, whose request carries nothing; bench/profile's
    models)."""
    import dataclasses

    from deployopt.backends.torch_worker import Worker

    path = _save(tmp_path / "tiny.onnx", tiny_cnn("N"))
    model = prepare_model(path, batch=1 << 16).model
    need = estimate_run(model)
    assert need is not None
    monkeypatch.setattr(memory, "available_host_bytes", lambda: need.total - 1)  # any check refuses
    worker = Worker.__new__(Worker)
    worker.cuda, worker.dtype_name = False, "fp32"
    checked = dataclasses.asdict(need)
    worker.check_memory(model, checked)  # the parent's model: not checked again
    with pytest.raises(InsufficientMemory, match="torch, host memory"):
        worker.check_memory(model)  # once only: a later request carries nothing, the memory free then counts
    other = prepare_model(path, batch=(1 << 16) + 1).model
    with pytest.raises(InsufficientMemory, match="torch, host memory"):
        worker.check_memory(other, checked)  # another estimate: checked
    with pytest.raises(InsufficientMemory, match="torch, host memory"):
        worker.check_memory(model)  # bench / profile: the parent checked nothing


def test_the_torch_session_sends_what_its_host_check_covered(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Model requests carry the parent's host estimate only after check_memory (optimize); bench
    and profile never call it, so their worker checks host memory itself."""
    import dataclasses

    from deployopt.backends.base import MeasureOptions
    from deployopt.backends.torch import TorchSession

    class _Worker:  # a CPU worker, as TorchSession.cuda asks it
        def __init__(self) -> None:
            self.ready = {"cuda": False}

        def alive(self) -> bool:
            return True

    path = _save(tmp_path / "tiny.onnx", tiny_cnn(1))
    session = TorchSession.__new__(TorchSession)  # no worker process: the requests are captured
    session.options, session.worker, session._host_checked = MeasureOptions(dtype="fp32"), _Worker(), None
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(session, "_call", lambda req, what: sent.append(req) or {})
    session._model_request("measure", path)
    assert "host_checked" not in sent[-1]
    loaded = prepare_model(path)
    session.check_memory(loaded)
    session._model_request("measure", path)
    assert sent[-1]["host_checked"] == dataclasses.asdict(estimate_run(loaded.model))
    json.dumps(sent[-1])  # it travels to the worker as JSON
    session._model_request("measure", path)
    assert "host_checked" not in sent[-1]  # once only: the next model is checked in the worker


def test_a_batch_close_to_the_memory_it_has_runs_with_a_one_line_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, conv_path: Path
) -> None:
    """Above WARN_SHARE (0.35) of what is free the floor still fits, but the real peak (about 2.5×
    the floor) may not: the run goes on, and says so in one line first. Below it: no word."""
    need = estimate_run(prepare_model(conv_path, batch=4096).model).total
    monkeypatch.setattr(memory, "available_host_bytes", lambda: need + need // 2)
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(conv_path), "--batch", "4096", "--runs", "2")
    assert code == 0, err
    # the file fixes batch 1: --batch 4096 is timed rewritten, said in a line of its own
    lines = [x for x in err.splitlines() if x.startswith("warning:") and "fixed at batch 1" not in x]
    assert "is fixed at batch 1 in the file; timed rewritten to --batch 4096" in err, err
    assert lines == [
        "warning: batch 4096 needs at least 24.0 MiB for inputs, weights and activations (onnxruntime, "
        "host memory), 36.0 MiB available; the run may be killed for memory (try a smaller --batch or "
        "--input-shape)"
    ], err
    monkeypatch.setattr(memory, "available_host_bytes", lambda: int(need / memory.WARN_SHARE) + 1)
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(conv_path), "--batch", "4096", "--runs", "2")
    assert code == 0 and "warning: batch" not in err, err


def test_the_torch_workers_memory_warnings_reach_the_parent() -> None:
    """The worker is another process: its MemoryRiskWarning travels in the answer ("warnings") and
    is raised again in the parent, where the CLI prints it."""
    import io
    import queue
    import warnings

    from deployopt.backends.torch import WorkerProcess
    from deployopt.backends.torch_worker import _with_warnings

    def measure(req: dict[str, Any]) -> dict[str, Any]:
        warnings.warn(
            "batch 8 needs at least 1.0 GiB … (torch, GPU memory)", memory.MemoryRiskWarning, stacklevel=1
        )
        warnings.warn("something else", DeprecationWarning, stacklevel=1)
        return {"median_us": 1.0}

    with warnings.catch_warnings(record=True):
        answer = _with_warnings(measure, {})
    assert answer == {"median_us": 1.0, "warnings": ["batch 8 needs at least 1.0 GiB … (torch, GPU memory)"]}
    assert _with_warnings(lambda req: {"median_us": 2.0}, {}) == {"median_us": 2.0}

    parent = WorkerProcess.__new__(WorkerProcess)
    parent.proc = type("FakeProc", (), {"stdin": io.StringIO()})()
    parent._lines = queue.Queue()
    parent._lines.put(json.dumps({"ok": True, **answer}))
    with pytest.warns(memory.MemoryRiskWarning, match=r"1\.0 GiB … \(torch, GPU memory\)"):
        assert parent.request({"op": "measure"}, 1.0, "measuring")["median_us"] == 1.0


def test_a_view_of_a_view_of_a_graph_input_is_that_input() -> None:
    """Reshape → Flatten of x: both are x's buffer, counted once in `inputs`, not again by MatMul."""
    inits = [
        numpy_helper.from_array(np.zeros((192, 10), np.float32), "w"),
        numpy_helper.from_array(np.array([4, 3, 64], np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["v1"]),
        helper.make_node("Flatten", ["v1"], ["v2"]),
        helper.make_node("MatMul", ["v2", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "views",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])],
        inits,
    )
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), strict_mode=True
    )
    # MatMul keeps only its output alive: its data input is x itself
    assert estimate_run(model) == RunEstimate(
        inputs=4 * 192 * 4, weights=1920 * 4 + 3 * 8, activations=4 * 10 * 4
    )


@pytest.mark.parametrize("value", ["0", "off", "OFF", " no ", "false", "False"])
def test_every_spelling_of_off_turns_the_check_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("DEPLOYOPT_MEMORY_CHECK", value)
    assert not memory.check_enabled()
    memory.require_memory(RunEstimate(10, 0, 0), 1, tiny_cnn(1), "onnxruntime, host memory")  # no error


@pytest.mark.parametrize("value", ["", "1", "on", "yes", "true"])
def test_anything_else_keeps_the_check_on(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("DEPLOYOPT_MEMORY_CHECK", value)
    assert memory.check_enabled()
    with pytest.raises(InsufficientMemory):
        memory.require_memory(RunEstimate(10, 0, 0), 1, tiny_cnn(1), "onnxruntime, host memory")


def test_the_fidelity_check_counts_every_sample_and_both_models_weights_and_activations(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import warnings

    model = prepare_model(_save(tmp_path / "tiny.onnx", tiny_cnn("N")), batch=2).model
    one = estimate_run(model)
    assert one is not None
    need = RunEstimate(3 * one.inputs, 2 * one.weights, 2 * one.activations).total
    monkeypatch.setattr(memory, "available_host_bytes", lambda: need - 1)
    with pytest.raises(InsufficientMemory):
        memory.require_fidelity_memory(model, model, 3)
    monkeypatch.setattr(memory, "available_host_bytes", lambda: math.ceil(need / memory.WARN_SHARE))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        memory.require_fidelity_memory(model, model, 3)  # exactly the share: no error, no warning
    monkeypatch.setattr(memory, "available_host_bytes", lambda: need - one.weights)  # no candidate yet
    with pytest.warns(memory.MemoryRiskWarning):
        memory.require_fidelity_memory(model, None, 3)


def test_a_memory_warning_reaches_the_user_before_the_failure_it_foretold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen on the H200: `bench --batch 1500000` (bound 94 GiB of 139 free) warned inside the worker,
    then ran out of GPU memory; the failure answer dropped the warning, so the user saw only the
    error. The warning now travels with the failure and is raised before the error."""
    import io
    import queue
    import warnings

    from deployopt.backends.torch import WorkerProcess
    from deployopt.backends.torch_worker import WorkerError, serve

    oom = (
        "CUDA out of memory. Tried to allocate 31.47 GiB. GPU 0 has a total capacity of 139.80 GiB of "
        "which 30.46 GiB is free. Including non-PyTorch memory, this process has 109.33 GiB memory in "
        "use. Of the allocated memory 85.83 GiB is allocated by PyTorch, and 22.89 GiB is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )

    class FakeWorker:
        def __init__(self, config: dict[str, Any]) -> None:
            pass

        def environment(self) -> dict[str, Any]:
            return {}

        cuda = True

        def measure(self, req: dict[str, Any]) -> dict[str, Any]:
            warnings.warn("batch 1500000 needs at least 94.4 GiB …", memory.MemoryRiskWarning, stacklevel=1)
            from deployopt.backends.torch_worker import _first_line

            raise WorkerError(
                "BackendFailed", f"torch failed running m.onnx: {_first_line(RuntimeError(oom))}"
            )

    import deployopt.backends.torch_worker as tw

    monkeypatch.setattr(tw, "Worker", FakeWorker)
    requests = io.StringIO(json.dumps({}) + "\n" + json.dumps({"op": "measure"}) + "\n")
    answers = io.StringIO()
    with warnings.catch_warnings(record=True):
        serve(requests, answers)
    failure = json.loads(answers.getvalue().splitlines()[1])
    assert failure["ok"] is False and failure["warnings"] == ["batch 1500000 needs at least 94.4 GiB …"]
    assert failure["error"] == (
        "torch failed running m.onnx: CUDA out of memory (tried to allocate 31.47 GiB, 30.46 GiB of "
        "139.80 GiB free); try a smaller --batch"
    )

    parent = WorkerProcess.__new__(WorkerProcess)
    parent.proc = type("FakeProc", (), {"stdin": io.StringIO()})()
    parent._lines = queue.Queue()
    parent._lines.put(json.dumps(failure))
    with (
        pytest.warns(memory.MemoryRiskWarning, match="94.4 GiB"),
        pytest.raises(BackendFailed, match="out of"),
    ):
        parent.request({"op": "measure"}, 1.0, "measuring")


def test_long_worker_errors_are_cut_between_words() -> None:
    from deployopt.backends.torch_worker import _first_line

    line = _first_line(RuntimeError("word " * 100 + "\nsecond line"))
    assert line.endswith("word …") and len(line) <= 302 and "second" not in line
    assert _first_line(RuntimeError("short\nmore")) == "short"
    assert _first_line(RuntimeError("")) == "RuntimeError"


def test_a_shortcut_stays_alive_while_its_block_runs() -> None:
    """x → conv1 → a; a → Relu → b; b → conv2 → c; y = a + c. While conv2 runs, a (read later by
    the Add), b and c are all alive: 3 buffers, where the largest single node holds only 2. The
    Relu may write b over nothing (a is read again later), the Add may write y over c."""
    n = 2 * 4 * 8 * 8 * 4  # one [2, 4, 8, 8] fp32 activation
    w = numpy_helper.from_array(np.zeros((4, 4, 3, 3), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["a", "c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8, 8])],
        [w],
    )
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), strict_mode=True
    )
    assert estimate_run(model) == RunEstimate(inputs=n, weights=4 * 4 * 9 * 4, activations=3 * n)
    # the same chain without the shortcut: a dies at the Relu, which may overwrite it
    nodes[3] = helper.make_node("Relu", ["c"], ["y"])
    graph = helper.make_graph(nodes, "chain", graph.input, graph.output, [w])
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), strict_mode=True
    )
    assert estimate_run(model) == RunEstimate(inputs=n, weights=4 * 4 * 9 * 4, activations=2 * n)


def test_the_ort_session_checks_optimizes_input_model_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """optimize checks host memory through check_memory before OUTDIR exists, then measures the
    same input model: that measure must not check (and warn) again; the next model, and every
    model of a session check_memory was never called on (bench, profile), is checked."""
    from deployopt.backends.base import MeasureOptions
    from deployopt.backends.ort import OrtBackend

    path = _save(tmp_path / "tiny.onnx", tiny_cnn(1))
    session = OrtBackend().open(MeasureOptions(dtype="fp32", runs=1, warmup=0))
    calls: list[int] = []
    real = memory.require_memory
    monkeypatch.setattr(memory, "require_memory", lambda est, *a, **k: calls.append(1) or real(est, *a, **k))
    session.check_memory(prepare_model(path))
    assert len(calls) == 1
    session.measure(path)  # the input model optimize already checked
    assert len(calls) == 1
    session.measure(path)  # once only: a later model is checked against the memory free then
    assert len(calls) == 2
    fresh = OrtBackend().open(MeasureOptions(dtype="fp32", runs=1, warmup=0))
    fresh.measure(path)  # bench: nothing checked before
    assert len(calls) == 3
