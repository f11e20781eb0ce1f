"""The torch backend's settle step: what is timed runs back to back for SETTLE_S of wall clock
before its timed loop. On an H100 at 8 SMs every bench of the bundled ResNet56 got 2-2.5 % faster
over its first 100 of 200 timed replays after 20 eager warm-up passes and 3 replays."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from deployopt.backends import torch_worker


def fake_torch(log: list[str]) -> Any:
    return SimpleNamespace(cuda=SimpleNamespace(synchronize=lambda: log.append("sync")))


def test_settle_runs_for_its_seconds_and_ends_synchronized() -> None:
    log: list[str] = []
    t0 = time.perf_counter()
    torch_worker._settle(lambda: log.append("call"), fake_torch(log), seconds=0.05)
    assert time.perf_counter() - t0 >= 0.05
    assert log.count("call") >= 3 and log[-1] == "sync"


def test_settle_makes_at_least_three_calls_however_short() -> None:
    log: list[str] = []
    torch_worker._settle(lambda: log.append("call"), fake_torch(log), seconds=0.0)
    assert log.count("call") == 3


def test_the_timed_loop_starts_after_the_settle(monkeypatch: Any) -> None:
    """_event_samples settles what it times, then takes `runs` samples of it."""
    log: list[str] = []

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            pass

        def record(self) -> None:
            log.append("record")

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, other: Any) -> float:
            return 1.0

    torch = SimpleNamespace(cuda=SimpleNamespace(Event=Event, synchronize=lambda: log.append("sync")))
    monkeypatch.setattr(torch_worker, "SETTLE_S", 0.0)
    monkeypatch.setattr(torch_worker._settle, "__defaults__", (0.0,))
    worker = SimpleNamespace(torch=torch, replays=1, runs=2)
    samples, replays = torch_worker.Worker._event_samples(worker, lambda: log.append("call"))
    assert samples == [1000.0, 1000.0] and replays == 1
    first_record = log.index("record")
    assert log[:first_record].count("call") == 3 and log[first_record - 1] == "sync"
