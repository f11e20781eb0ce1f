"""The torch backend on CPU tensors (fp32): one worker process per session, its crash and timeout
handling, per-layer profiles named after the ONNX nodes. Kept few: every worker imports torch."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnx2torch")

from deployopt.backends import MeasureOptions, get_backend
from deployopt.backends.base import KernelRecord, LayerTime, Profile
from deployopt.backends.torch import TorchSession, profile_from_json
from deployopt.backends.torch_worker import module_to_onnx_node
from deployopt.errors import BackendFailed, DeployoptError
from deployopt.layers import ConvShape

CPU = MeasureOptions(dtype="fp32", runs=3, warmup=1, timeout_s=120, extra={"device": "cpu"})


def tiny_model() -> onnx.ModelProto:
    """conv → bn → relu on 1×3×8×8: enough layers to name, small enough to run in milliseconds."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(np.ones(8, np.float32), "scale"),
        numpy_helper.from_array(np.zeros(8, np.float32), "shift"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="block.conv", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c", "scale", "shift", "shift", "scale"], ["n"], name="block.bn"
        ),
        helper.make_node("Relu", ["n"], ["y"], name="block.relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("torch") / "tiny.onnx"
    onnx.save(tiny_model(), str(path))
    return path


@pytest.fixture(scope="module")
def session() -> Iterator[TorchSession]:
    s = get_backend("torch").open(CPU)
    assert isinstance(s, TorchSession)
    yield s
    s.close()


def test_measure_on_cpu_says_what_was_timed(session: TorchSession, tiny_path: Path) -> None:
    t = session.measure(tiny_path)
    assert t.backend == "torch" and t.runs == 3 and t.warmup == 1
    assert all(s > 0 for s in t.samples_us)
    assert t.timed.startswith(
        "one eager forward pass, host wall clock (time.perf_counter), fp32, batch 1, CPU"
    )
    assert t.environment["device"] == "CPU (no CUDA device)"
    assert t.environment["dtype"] == "fp32" and "torch" in t.environment


def test_profile_layers_are_the_onnx_nodes(session: TorchSession, tiny_path: Path) -> None:
    path = tiny_path
    prof = session.profile(path)
    nodes = [n.name for n in onnx.load(str(path)).graph.node]
    assert [layer.name for layer in prof.layers] == nodes
    assert all(layer.onnx_nodes == [layer.name] for layer in prof.layers)
    assert nodes == ["block.conv", "block.bn", "block.relu"]
    assert [layer.extra for layer in prof.layers] == [
        {"module": "block/conv", "op": "Conv"},
        {"module": "block/bn", "op": "BatchNormalization"},
        {"module": "block/relu", "op": "Relu"},
    ]
    assert sum(layer.share for layer in prof.layers) == pytest.approx(1.0)
    assert all(layer.time_us > 0 for layer in prof.layers)
    assert prof.runs == 3 and "median over 3 profiled passes" in prof.timed
    with pytest.raises(DeployoptError, match="--kernels needs a CUDA GPU"):
        session.profile(path, kernels=True)


def test_measure_convs_falls_back_to_one_conv_models_on_cpu(session: TorchSession) -> None:
    timings = session.measure_convs(
        [ConvShape(1, 8, 8, 8, 16), ConvShape(1, 8, 8, 8, 24, r=1, s=1, pad=(0, 0))]
    )
    assert [t.runs for t in timings] == [3, 3]
    assert all("one eager forward pass" in t.timed for t in timings)


def test_a_model_onnx2torch_cannot_convert_names_the_op(session: TorchSession, tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], name="hm", axis=1)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    path = tmp_path / "hardmax.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    with pytest.raises(
        BackendFailed, match=r"^onnx2torch cannot convert op Hardmax \(version 13\) in hardmax.onnx$"
    ):
        session.measure(path)


def test_a_model_typed_fp16_inside_is_refused_in_one_line(
    session: TorchSession, tiny_path: Path, tmp_path: Path
) -> None:
    """`deployopt fp16`'s output: the worker's fp32 weights met its fp16 Casts ("torch failed
    running m.onnx: expected scalar type Half but found Float"); now one line saying what to time.
    The fp32 model it came from still times."""
    from deployopt.errors import ModelError
    from deployopt.precision import write_fp16

    typed = write_fp16(tiny_path, tmp_path / "tiny.fp16.onnx")
    with pytest.raises(ModelError, match=r"^tiny.fp16.onnx is typed fp16 inside: the torch backend times"):
        session.measure(typed)
    assert session.measure(tiny_path).runs > 0


@pytest.mark.slow
def test_a_crashed_worker_is_one_line_and_replaced(session: TorchSession, tiny_path: Path) -> None:
    first = session.worker
    with pytest.raises(BackendFailed, match=r"torch worker crashed \(exit code 3\) while testing"):
        session._call({"op": "_exit", "code": 3}, "testing")
    assert session.worker is None and first is not None and not first.alive()
    assert session.measure(tiny_path).runs == 3  # a fresh worker


@pytest.mark.slow
def test_a_worker_killed_by_sigkill_points_at_the_oom_killer(session: TorchSession, tiny_path: Path) -> None:
    """The worker ended by SIGKILL mid-request (as the kernel's OOM killer ends it, with no word on
    its stderr): one line that says what usually sends it, not `crashed (exit code -9)`."""
    import os
    import signal
    import threading

    worker = session._start()
    threading.Timer(1.0, os.kill, (worker.proc.pid, signal.SIGKILL)).start()
    with pytest.raises(BackendFailed) as exc:
        session._call({"op": "_sleep", "seconds": 60}, "testing")
    assert str(exc.value).startswith(
        "torch worker was killed (SIGKILL) while testing: most often the kernel's out-of-memory killer"
    )
    assert session.worker is None
    assert session.measure(tiny_path).runs == 3  # a fresh worker


@pytest.mark.slow
def test_options_rejected_before_or_at_worker_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from deployopt.backends import torch as torch_module

    torch_backend = get_backend("torch")
    monkeypatch.setattr(torch_module, "cuda_visible", lambda: True)
    # --sms 6 is a green context on an Ampere GPU, not on the H200: the parent cannot tell (it reads
    # no compute capability), so the worker answers; here torch sees no CUDA device, and says so
    with pytest.raises(DeployoptError, match=r"^--sms needs a CUDA GPU \(green contexts\); none is visible$"):
        torch_backend.open(dataclasses.replace(CPU, sms=6))
    monkeypatch.undo()
    with pytest.raises(DeployoptError, match="cannot run int8"):
        torch_backend.open(dataclasses.replace(CPU, dtype="int8"))
    with pytest.raises(
        DeployoptError, match=r"runs fp16 only on a CUDA GPU and none is visible; use --dtype fp32"
    ):
        torch_backend.open(dataclasses.replace(CPU, dtype="fp16"))
    with pytest.raises(DeployoptError, match=r"--cudnn-engines must be 0 \(all engines\) or more"):
        torch_backend.open(dataclasses.replace(CPU, cudnn_engines=-1))
    with pytest.raises(DeployoptError, match=r"--cudnn-engines needs a CUDA GPU \(cuDNN\); none is visible"):
        torch_backend.open(dataclasses.replace(CPU, cudnn_engines=0))
    with pytest.raises(DeployoptError, match=r"--no-cudnn-benchmark needs a CUDA GPU \(cuDNN\); none is"):
        torch_backend.open(dataclasses.replace(CPU, cudnn_benchmark=False))


@pytest.mark.parametrize("sms", [4, 6])
def test_sms_without_a_gpu_says_so_whatever_the_count(monkeypatch: pytest.MonkeyPatch, sms: int) -> None:
    """On a laptop with no GPU, `--sms 4` (an Orin Nano 4GB's count) was refused with the H200's
    green-context granularity ("ask for 8, 16, 24 …"), and `--sms 8` then with "needs a CUDA GPU":
    every count now gets the second line, the one that is true here, before a worker starts."""
    from deployopt.backends import torch as torch_module

    monkeypatch.setattr(torch_module, "cuda_visible", lambda: False)
    monkeypatch.setattr(torch_module, "TorchSession", lambda *a: pytest.fail("a worker was started"))
    with pytest.raises(DeployoptError, match=r"^--sms needs a CUDA GPU \(green contexts\); none is visible$"):
        get_backend("torch").open(dataclasses.replace(CPU, sms=sms))


def test_a_visible_gpu_leaves_the_sm_granularity_to_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent refused every count but multiples of 8 (the H200's rule) before a worker started,
    so `--sms 4` (an Orin Nano 4GB) and `--sms 6` (a Xavier NX) were refused on an Ampere GPU, whose
    green contexts come in multiples of 2 from 4: the worker, which reads the compute capability,
    now decides (tests/test_green_context.py)."""
    from deployopt.backends import torch as torch_module

    started: list[int | None] = []
    monkeypatch.setattr(torch_module, "cuda_visible", lambda: True)
    monkeypatch.setattr(torch_module, "TorchSession", lambda backend, options: started.append(options.sms))
    for sms in (2, 4, 6, 8, 12):
        get_backend("torch").open(dataclasses.replace(CPU, sms=sms))
    assert started == [2, 4, 6, 8, 12]


@pytest.mark.parametrize("visible", [True, False])
def test_a_count_below_one_is_refused_before_a_worker(monkeypatch: pytest.MonkeyPatch, visible: bool) -> None:
    from deployopt.backends import torch as torch_module

    monkeypatch.setattr(torch_module, "cuda_visible", lambda: visible)
    monkeypatch.setattr(torch_module, "TorchSession", lambda *a: pytest.fail("a worker was started"))
    for sms in (0, -8):
        with pytest.raises(DeployoptError, match=rf"^--sms {sms}: must be a positive integer$"):
            get_backend("torch").open(dataclasses.replace(CPU, sms=sms))


def test_module_names_follow_onnx2torch() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="block.relu"),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Relu", ["b"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"], name="block.relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    assert module_to_onnx_node(helper.make_model(graph)) == {
        "block/relu": "block.relu",
        "Relu": "Relu",
        "Relu_1": "Relu",
        "block/relu_1": "block.relu",
    }


def test_profile_json_round_trip() -> None:
    k = KernelRecord("k", 3.5, (30, 4, 1), (384, 1, 1), 168, 231424, 1.0, (128, 128, 64), 1, 120 / 132)
    prof = Profile("torch", [LayerTime("conv", 3.5, 1.0, ["conv"], [k], {"op": "Conv"})], {"sms": 8}, "t", 5)
    back = profile_from_json(prof.to_json())
    assert back.to_json() == prof.to_json()
    assert back.layers[0].kernels[0].grid == (30, 4, 1)


def test_a_hung_worker_is_killed_after_its_timeout(session: TorchSession) -> None:
    saved = session.options
    session._start()
    hung = session.worker
    session.options = dataclasses.replace(saved, timeout_s=0.5)
    try:
        with pytest.raises(BackendFailed, match=r"torch worker hung: no answer within 0.5 s while testing"):
            session._call({"op": "_sleep", "seconds": 60}, "testing")
    finally:
        session.options = saved
    assert hung is not None and not hung.alive()
    assert session.worker is None


def _resize_split_model(scales_also_as_data: bool) -> onnx.ModelProto:
    """x → Resize(scales) → Split(sizes) → Concat, the upsample-and-split of a YOLO neck; with
    `scales_also_as_data` the scales initializer also feeds a Mul, as data."""
    inits = [
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        numpy_helper.from_array(np.array([3, 5], np.int64), "sizes"),
    ]
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["r"], name="up", mode="nearest"),
        helper.make_node("Split", ["r", "sizes"], ["a", "b"], name="split", axis=1),
        helper.make_node("Concat", ["b", "a"], ["y"], name="cat", axis=1),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])]
    if scales_also_as_data:  # a Constant node: one module, its output used twice (initializers are
        # copied per use by onnx2torch, so only a shared node can couple a value use and a data use)
        inits = inits[1:]
        value = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32))
        nodes.insert(0, helper.make_node("Constant", [], ["scales"], name="scales_const", value=value))
        nodes.append(helper.make_node("Mul", ["scales", "scales"], ["s2"], name="square"))
        outputs.append(helper.make_tensor_value_info("s2", TensorProto.FLOAT, [4]))
    graph = helper.make_graph(
        nodes, "resize_split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])], outputs,
        inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_constants_stay_on_the_host_so_cuda_graphs_can_capture() -> None:
    """Resize's scales and Split's sizes are read with .tolist(): on the GPU that is a copy CUDA-graph
    capture refuses (a YOLO detector failed this way on the H200). They stay behind, with their
    dtype, when the model moves; weights move; a constant that is also data moves too."""
    import torch
    from onnx2torch import convert

    from deployopt.backends.torch_worker import host_constants, restore_host_constants

    module = convert(_resize_split_model(False))
    kept = host_constants(module)
    assert sorted(str(v.dtype) for v in kept.values()) == ["torch.float32", "torch.int64"]
    assert sorted(v.tolist() for v in kept.values()) == [[1.0, 1.0, 2.0, 2.0], [3, 5]]
    x = torch.arange(128, dtype=torch.float32).reshape(1, 8, 4, 4)
    expected = module(x)
    moved = module.to(dtype=torch.float16).to("meta")  # stands in for .to("cuda", fp16) on a CPU machine
    restore_host_constants(moved, kept)
    for path, value in kept.items():
        owner, _, attr = path.rpartition(".")
        now = getattr(moved.get_submodule(owner) if owner else moved, attr)
        assert now.device.type == "cpu" and now.dtype == value.dtype
    assert moved(x.to("meta", torch.float16)).shape == expected.shape  # runs with host constants
    both = host_constants(convert(_resize_split_model(True)))
    assert [v.tolist() for v in both.values()] == [[3, 5]]  # the scales feed a Mul too: they move


class _FakeCuda:
    """Just enough of torch.cuda for the worker's timing loops, on a machine with no GPU: capture
    fails the way PyTorch fails it (the op raises inside the block, then leaving the block raises
    its own error), events say 0.25 ms between them."""

    def __init__(self) -> None:
        self.capturing = False
        self.synchronized = 0

    class _Ctx:
        def __init__(self, cuda: _FakeCuda, graph: bool) -> None:
            self.cuda, self.graph = cuda, graph

        def __enter__(self) -> None:
            self.cuda.capturing = self.graph

        def __exit__(self, kind: object, *_: object) -> None:
            self.cuda.capturing = False
            if self.graph and kind is not None:
                raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    class _Event:
        def __init__(self, enable_timing: bool = False) -> None:
            pass

        def record(self) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, other: object) -> float:
            return 0.25

    class _Stream:
        def wait_stream(self, other: object) -> None:
            pass

    Event = _Event

    def Stream(self) -> object:
        return self._Stream()

    def current_stream(self) -> object:
        return self._Stream()

    def stream(self, s: object) -> object:
        return self._Ctx(self, graph=False)

    def CUDAGraph(self) -> object:
        return object()

    def graph(self, g: object) -> object:
        return self._Ctx(self, graph=True)

    def synchronize(self) -> None:
        self.synchronized += 1

    def empty_cache(self) -> None:
        pass


def test_a_model_cuda_graphs_cannot_capture_is_timed_eagerly_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A model whose shape arithmetic runs on the GPU (Shape → Gather → Reshape) cannot be captured;
    on the H200 it was timed with eager passes (benchmarks/results/h200_backends/
    bench_dynamic_reshape_eager.json). The timing says so, with the first error, not the one
    leaving the capture block raised."""
    import types

    from deployopt.backends import torch_worker
    from deployopt.backends.torch_worker import Worker
    from deployopt.timing import Timing

    monkeypatch.setattr(torch_worker._settle, "__defaults__", (0.0,))  # its 3 calls, not 0.5 s of them
    cuda = _FakeCuda()
    calls = []

    def module(*inputs: object) -> None:
        if cuda.capturing:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        calls.append(inputs)

    worker = Worker.__new__(Worker)
    worker.torch = types.SimpleNamespace(cuda=cuda)
    worker.cuda, worker.warmup, worker.runs, worker.replays = True, 2, 4, 1
    worker.load = lambda req: (module, ["x"], None, {"x": [8, 3, 32, 32]})  # type: ignore[method-assign]
    worker._where = lambda batch: f"batch {batch}"  # type: ignore[method-assign]
    worker.environment = lambda: {}  # type: ignore[method-assign]
    timing = Timing.from_json(worker.measure({"path": "dyn.onnx"})["timing"])
    assert timing.samples_us == [250.0] * 4
    assert timing.timed == (
        "eager forward pass (no CUDA graph: CUDA error: operation not permitted when stream is "
        "capturing; launch gaps included), timed with CUDA events (one eager pass per sample), "
        "inputs already on the GPU, batch 8"
    )
    # warm-up 2 + 3 on the side stream + 3 to settle after the failed capture + 3 settling right
    # before the timed loop + 4 timed
    assert len(calls) == 15


def _fake_cuda_worker(cuda: _FakeCuda, env: dict) -> object:
    """A Worker on _FakeCuda whose model is a no-op that CUDA graphs capture."""
    import types

    from deployopt.backends.torch_worker import Worker

    cuda.CUDAGraph = lambda: types.SimpleNamespace(replay=lambda: None)  # type: ignore[method-assign]
    worker = Worker.__new__(Worker)
    worker.torch = types.SimpleNamespace(cuda=cuda)
    worker.cuda, worker.warmup, worker.runs, worker.replays = True, 1, 4, 1
    worker.smi_gpu = "00000000:00:06.0"
    worker.load = lambda req: (lambda *inputs: None, ["x"], None, {"x": [1, 3, 32, 32]})  # type: ignore[method-assign]
    worker._where = lambda batch: f"batch {batch}"  # type: ignore[method-assign]
    worker.environment = lambda: dict(env)  # type: ignore[method-assign]
    return worker


def test_measure_records_clock_slowdown_and_the_busy_sm_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA, nvidia-smi is read just before and right after the timed loop, for the worker's GPU
    (by PCI bus id): the environment then says {} (checked, none held the clock down) and the SM
    clock of the busy GPU, not the one collected with the environment (the H200's idle 345 MHz).
    The readings are the real H200 recording, then an edited copy of it that says SW thermal
    slowdown held the clock down for 1.2 s."""
    from nvidia_smi_fake import h200_readings, throttled_after

    from deployopt import clocks
    from deployopt.timing import Timing

    before, after = (clocks.parse_clocks(t) for t in h200_readings())
    readings: list[object] = []
    asked: list[object] = []

    def read_clocks(gpu: object = 0, timeout_s: float = 10.0) -> object:
        asked.append(gpu)
        return readings.pop(0)

    monkeypatch.setattr(clocks, "read_clocks", read_clocks)
    env = {"gpu": "NVIDIA H200", "clocks": {"sm_clock_mhz": 345.0, "max_sm_clock_mhz": 1980.0}}
    readings[:] = [before, after]
    timing = Timing.from_json(_fake_cuda_worker(_FakeCuda(), env).measure({"path": "m.onnx"})["timing"])
    assert asked == ["00000000:00:06.0"] * 2 and readings == []
    assert timing.environment["clock_slowdown_us"] == {}
    assert timing.environment["clocks"] == {
        "sm_clock_mhz": 1980.0,
        "max_sm_clock_mhz": 1980.0,
        "sm_clock_read": "right after the timed loop",
    }
    readings[:] = [before, clocks.parse_clocks(throttled_after())]
    timing = Timing.from_json(_fake_cuda_worker(_FakeCuda(), env).measure({"path": "m.onnx"})["timing"])
    assert timing.environment["clock_slowdown_us"] == {
        "sw_thermal_slowdown": 1_200_000,
        "hw_power_brake_slowdown": 5000,
    }
    assert timing.environment["clocks"]["sm_clock_mhz"] == 1410.0
    readings[:] = [None, None]  # no nvidia-smi: nothing said, the collected reading kept as it was
    timing = Timing.from_json(_fake_cuda_worker(_FakeCuda(), env).measure({"path": "m.onnx"})["timing"])
    assert "clock_slowdown_us" not in timing.environment and timing.environment["clocks"] == env["clocks"]


def test_cpu_measurements_do_not_call_nvidia_smi(
    session: TorchSession, tiny_path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from nvidia_smi_fake import h200_readings, install_fake_nvidia_smi

    args = install_fake_nvidia_smi(monkeypatch, tmp_path, list(h200_readings()))
    session.close()  # the next request starts a worker that sees the stand-in on PATH
    t = session.measure(tiny_path)
    assert "clock_slowdown_us" not in t.environment
    assert not args.exists() or all(not line.startswith("-q") for line in args.read_text().splitlines())


@pytest.mark.parametrize(
    ("present", "visible"),
    [
        ((), False),  # a laptop: no driver files, no nvidia-smi
        (("proc/driver/nvidia/gpus/0000:01:00.0",), True),  # a desktop GPU's driver
        (("dev/nvidia0",), True),
        (("dev/nvhost-ctrl-gpu", "dev/nvhost-gpu", "dev/nvmap"), True),  # a Jetson (nvgpu): JetPack 4–6
        (("dev/nvmap",), False),  # nvmap alone is memory, not the GPU
    ],
)
def test_cuda_visible_sees_a_jetsons_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, present: tuple[str, ...], visible: bool
) -> None:
    """A Jetson has no /dev/nvidia0 and (JetPack 4 and 5) no nvidia-smi: the guess read it as a
    machine without a GPU, so the torch backend defaulted to fp32 there and refused fp16 and --sms."""
    from deployopt.backends import torch as torch_module

    for rel in present:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).touch()
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no nvidia-smi
    assert torch_module.cuda_visible(root=tmp_path) is visible
