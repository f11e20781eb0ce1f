"""Which `--sms N` a green context can have, by compute capability (NVIDIA's guideline, CUDA 12.4
Driver API, Green Contexts), and where that is checked: in the torch worker, which alone reads the
GPU's compute capability, and in `cuda_conv.set_sm_limit`. No GPU here: torch's CUDA side is a
stand-in. Only the 9.0 rule was seen on hardware (the H200); the others are NVIDIA's word."""

from __future__ import annotations

import io
import json
import queue
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import onnx
import pytest
from cli_runner import run_cli

from deployopt.backends import cuda_conv
from deployopt.backends import torch as torch_module
from deployopt.backends.cuda_conv import green_context_refusal, green_context_rule
from deployopt.backends.torch_worker import Worker, WorkerError, serve
from deployopt.errors import DeployoptError
from deployopt.layers import ConvShape, conv_model

H200 = "--sms 6: green contexts on this GPU (NVIDIA H200, compute capability 9.0) come in multiples of 8 SMs, at least 8 (a request off that is silently rounded up); ask for 8, 16, 24 …"  # noqa: E501


@pytest.mark.parametrize(
    ("cc", "rule"),
    [
        ("6.1", (1, 1)),  # Pascal (GTX 10xx, Jetson TX2 is 6.2)
        ("7.5", (2, 2)),  # Turing
        ("8.6", (4, 2)),  # Ampere (RTX 30xx)
        ("8.7", (4, 2)),  # Orin
        ("9.0", (8, 8)),  # Hopper: the H200, the one rule seen on hardware here
        ("10.0", (8, 8)),  # Blackwell: "9.0+"
        ((12, 0), (8, 8)),
        ("5.3", None),  # below 6.0 the guideline says nothing
    ],
)
def test_rule_per_compute_capability(cc: Any, rule: tuple[int, int] | None) -> None:
    assert green_context_rule(cc) == rule


@pytest.mark.parametrize(
    ("cc", "device_sms", "accepted", "refused"),
    [
        ("6.1", 20, [1, 3, 5, 20], []),
        ("7.5", 40, [2, 4, 6], [1, 3, 5]),  # --sms 2: a TX2's count
        ("8.6", 84, [4, 6, 8, 10], [1, 2, 3, 5, 7]),  # 4: Orin Nano 4GB, 6: Xavier NX
        ("8.7", 16, [4, 6, 8, 16], [2, 3, 9]),
        ("9.0", 132, [8, 16, 128], [1, 2, 4, 6, 12, 132]),
        ("10.0", 148, [8, 16, 24], [4, 6, 12]),
    ],
)
def test_refusal_follows_the_rule(cc: str, device_sms: int, accepted: list[int], refused: list[int]) -> None:
    for sms in accepted:
        assert green_context_refusal(sms, cc, "GPU", device_sms) is None, sms
    for sms in refused:
        said = green_context_refusal(sms, cc, "GPU", device_sms)
        assert said is not None and said.startswith(f"--sms {sms}: green contexts on this GPU (GPU, "), sms


def test_refusal_wording() -> None:
    assert green_context_refusal(6, "9.0", "NVIDIA H200", 132) == H200
    assert green_context_refusal(6, (9, 0), "NVIDIA H200") == H200  # no SM count known: the same list
    assert green_context_refusal(5, "8.6", "NVIDIA GeForce RTX 3080", 68) == (
        "--sms 5: green contexts on this GPU (NVIDIA GeForce RTX 3080, compute capability 8.6) come in "
        "multiples of 2 SMs, at least 4 (a request off that is silently rounded up); ask for 4, 6, 8 …"
    )
    # a GPU of 8 SMs (an Orin Nano 8GB): only what fits is offered
    assert green_context_refusal(3, "8.7", None, 8) == (
        "--sms 3: green contexts on this GPU (compute capability 8.7) come in multiples of 2 SMs, "
        "at least 4 (a request off that is silently rounded up); ask for 4, 6, 8"
    )
    assert green_context_refusal(3, "7.5", "T4", 40).endswith("at least 2 (a request off that is silently rounded up); ask for 2, 4, 6 …")  # fmt: skip  # noqa: E501
    assert green_context_refusal(2, "8.6", "GPU", 2).endswith("; none fits its 2 SMs")
    assert green_context_refusal(136, "9.0", "NVIDIA H200", 132) == "--sms 136: this GPU has only 132 SMs"
    assert green_context_refusal(0, "9.0") == "--sms 0: must be a positive integer"


def _stand_in_worker(gpu: str, cc: str, device_sms: int) -> Worker:
    """A Worker with only what `_set_green_context` reads: no torch import, no CUDA."""
    worker = Worker.__new__(Worker)
    worker.torch = SimpleNamespace(__version__="2.14.0", cuda=SimpleNamespace(GreenContext=object))
    worker.gpu_name, worker.compute_capability, worker.device_sms = gpu, cc, device_sms
    worker.green_context = None
    return worker


@pytest.mark.parametrize(
    ("gpu", "cc", "device_sms", "refused", "accepted"),
    [
        ("NVIDIA H200", "9.0", 132, 6, 8),
        ("NVIDIA GeForce RTX 3080", "8.6", 68, 5, 6),
        ("NVIDIA A100-SXM4-80GB", "8.0", 108, 2, 4),
        ("Tesla T4", "7.5", 40, 3, 2),
    ],
)
def test_worker_refuses_off_rule_counts_before_the_green_context(
    monkeypatch: pytest.MonkeyPatch, gpu: str, cc: str, device_sms: int, refused: int, accepted: int
) -> None:
    made: list[int] = []
    monkeypatch.setattr(cuda_conv, "set_sm_limit", lambda n: made.append(n) or f"ctx{n}")
    worker = _stand_in_worker(gpu, cc, device_sms)
    with pytest.raises(WorkerError) as caught:
        worker._set_green_context(refused)
    assert caught.value.kind == "DeployoptError"
    assert str(caught.value) == green_context_refusal(refused, cc, gpu, device_sms)
    assert f"({gpu}, compute capability {cc})" in str(caught.value)
    assert made == []  # refused before any green context
    worker._set_green_context(accepted)
    assert made == [accepted] and worker.green_context == f"ctx{accepted}"


def test_set_sm_limit_refuses_before_creating(monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/staircase_sweeps.py and network_convs.py call set_sm_limit directly."""
    made: list[int] = []

    class GreenContext:
        @staticmethod
        def create(num_sms: int, device_id: int) -> Any:
            made.append(num_sms)
            return SimpleNamespace(set_context=lambda: None)

    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132)
    cuda = SimpleNamespace(
        GreenContext=GreenContext, init=lambda: None, get_device_properties=lambda i: props
    )
    monkeypatch.setattr(cuda_conv, "_torch", lambda: SimpleNamespace(__version__="2.14.0", cuda=cuda))
    monkeypatch.setattr(cuda_conv, "_GREEN_CONTEXT", None)
    with pytest.raises(DeployoptError, match=r"^--sms 6: green contexts on this GPU \(NVIDIA H200, "):
        cuda_conv.set_sm_limit(6)
    assert made == []
    cuda_conv.set_sm_limit(16)
    assert made == [16]


def _fake_torch(props: SimpleNamespace) -> SimpleNamespace:
    """What Worker.__init__ touches of torch before the green context, on a GPU."""
    cuda = SimpleNamespace(
        is_available=lambda: True, get_device_properties=lambda i: props, GreenContext=object
    )
    return SimpleNamespace(__version__="2.14.0", cuda=cuda)


class InProcessWorker(torch_module.WorkerProcess):
    """The parent's side of the worker channel (request, error classes) over the real `serve` run
    in this process with a stand-in GPU, instead of a child process."""

    props: SimpleNamespace
    monkeypatch: pytest.MonkeyPatch

    def __init__(self, config: dict[str, Any], timeout_s: float) -> None:
        out = io.StringIO()
        with self.monkeypatch.context() as m:
            m.setitem(sys.modules, "torch", _fake_torch(self.props))
            self.code = serve(io.StringIO(json.dumps(config) + "\n"), out)
        self._lines: queue.Queue[str | None] = queue.Queue()
        for line in out.getvalue().splitlines(keepends=True):
            self._lines.put(line)
        self._lines.put(None)
        self.proc = SimpleNamespace(stdin=io.StringIO(), poll=lambda: self.code, wait=lambda: self.code)
        self.ready = self.request(config, timeout_s, "starting the worker")


def test_the_workers_refusal_reaches_the_cli_as_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The parent no longer refuses --sms 6 (it cannot know the GPU's rule); the worker does, and
    its answer travels like "this GPU has only N SMs": one line, exit 2, no traceback."""
    pytest.importorskip("onnx2torch")
    path = tmp_path / "conv.onnx"
    onnx.save(conv_model(ConvShape(1, 8, 8, 8, 16)), str(path))
    monkeypatch.setattr(torch_module, "cuda_visible", lambda: True)
    InProcessWorker.monkeypatch = monkeypatch
    InProcessWorker.props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132)
    monkeypatch.setattr(torch_module, "WorkerProcess", InProcessWorker)
    code, out, err = run_cli(monkeypatch, capsys, "bench", str(path), "--backend", "torch", "--sms", "6")
    assert (code, out, err) == (2, "", f"error: {H200}\n")
    code, out, err = run_cli(monkeypatch, capsys, "bench", str(path), "--backend", "torch", "--sms", "140")
    assert (code, out, err) == (2, "", "error: --sms 140: this GPU has only 132 SMs\n")
    InProcessWorker.props = SimpleNamespace(name="NVIDIA A2", major=8, minor=6, multi_processor_count=10)
    code, out, err = run_cli(monkeypatch, capsys, "bench", str(path), "--backend", "torch", "--sms", "5")
    assert (code, out) == (2, "") and err.count("\n") == 1 and "Traceback" not in err
    assert err == (
        "error: --sms 5: green contexts on this GPU (NVIDIA A2, compute capability 8.6) come in multiples "
        "of 2 SMs, at least 4 (a request off that is silently rounded up); ask for 4, 6, 8 …\n"
    )
