"""The CPU a measurement names, on macOS and Windows (simulated on Linux; portability bug bash).

Without /proc/cpuinfo, cpu_model() fell back to platform.processor(): `uname -p`, "arm" on every
Apple-silicon Mac (M1 to M4 Max alike) and "i386" on every Intel one. "measured on: … CPU arm" told
nothing, and a journal or layer cache shared by two Macs passed for one setup."""

from __future__ import annotations

import platform
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from deployopt import environment
from deployopt.environment import cpu_model, host_facts


@pytest.fixture(autouse=True)
def _asked_anew() -> Iterator[None]:
    """Each test asks the OS anew (the answers are kept for the process)."""
    for name in ("_darwin_cpu", "_windows_cpu"):
        cached = getattr(environment, name, None)
        if cached is not None:
            cached.cache_clear()
    yield
    for name in ("_darwin_cpu", "_windows_cpu"):
        cached = getattr(environment, name, None)
        if cached is not None:
            cached.cache_clear()


def no_proc(file: Any, *args: Any, **kwargs: Any) -> Any:
    raise FileNotFoundError(2, "No such file or directory", str(file))


def as_host(monkeypatch: pytest.MonkeyPatch, system: str, processor: str) -> None:
    """This host as `system`: no /proc/cpuinfo, platform.system() and platform.processor() as there."""
    monkeypatch.setattr(environment, "open", no_proc, raising=False)  # the module's open(), not the test's
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "processor", lambda: processor)


def fake_sysctl(monkeypatch: pytest.MonkeyPatch, answer: Any) -> list[dict[str, Any]]:
    """subprocess.run of `sysctl -n machdep.cpu.brand_string` as it answers: a string (its stdout,
    exit 0), an int (an exit status with no output), or an exception it raises. Returns its calls,
    with their arguments."""
    calls: list[dict[str, Any]] = []
    real_run = subprocess.run

    def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if "machdep.cpu.brand_string" not in cmd:  # platform's own `uname -p` and the like
            return real_run(cmd, **kwargs)
        calls.append({"cmd": list(cmd), **kwargs})
        if isinstance(answer, BaseException):
            raise answer
        if isinstance(answer, int):
            return subprocess.CompletedProcess(cmd, answer, "", "")
        return subprocess.CompletedProcess(cmd, 0, answer, "")

    monkeypatch.setattr(environment.subprocess, "run", run)
    return calls


@pytest.mark.parametrize(
    ("processor", "brand"),
    [("arm", "Apple M2 Pro"), ("i386", "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz")],
    ids=["apple-silicon", "intel"],
)
def test_macos_names_the_cpu_from_sysctl(monkeypatch: pytest.MonkeyPatch, processor: str, brand: str) -> None:
    as_host(monkeypatch, "Darwin", processor)
    calls = fake_sysctl(monkeypatch, brand + "\n")
    assert cpu_model() == brand
    assert host_facts()["cpu"] == brand  # what --resume and the layer cache hold a setup to
    assert len(calls) == 1  # asked once a process: every measurement records it
    assert calls[0]["cmd"][-2:] == ["-n", "machdep.cpu.brand_string"]
    assert 0 < calls[0]["timeout"] <= 5


@pytest.mark.parametrize(
    "answer",
    [subprocess.TimeoutExpired(["sysctl"], 2.0), FileNotFoundError(2, "No such file"), 1, "\n"],
    ids=["timeout", "no-sysctl", "fails", "says-nothing"],
)
def test_macos_falls_back_to_platform_processor(monkeypatch: pytest.MonkeyPatch, answer: Any) -> None:
    """Guard (passes before the fix too): a sysctl that hangs, is missing, fails or says nothing
    leaves platform.processor()'s answer, never an error."""
    as_host(monkeypatch, "Darwin", "arm")
    fake_sysctl(monkeypatch, answer)
    assert cpu_model() == "arm"


def fake_winreg(monkeypatch: pytest.MonkeyPatch, name: str | None) -> list[tuple[Any, ...]]:
    """A `winreg` module whose CentralProcessor\\0 key holds ProcessorNameString `name` (None: the
    key cannot be opened). Returns the keys and values read."""
    read: list[tuple[Any, ...]] = []

    class Key:
        def __enter__(self) -> Key:
            return self

        def __exit__(self, *exc: Any) -> None:
            return None

    def open_key(root: Any, sub: str) -> Key:
        read.append(("key", root, sub))
        if name is None:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return Key()

    def query(key: Key, value: str) -> tuple[str, int]:
        read.append(("value", value))
        return name or "", 1

    module = types.SimpleNamespace(HKEY_LOCAL_MACHINE="HKLM", OpenKey=open_key, QueryValueEx=query)
    monkeypatch.setitem(sys.modules, "winreg", module)
    return read


def test_windows_names_the_cpu_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    as_host(monkeypatch, "Windows", "Intel64 Family 6 Model 186 Stepping 3, GenuineIntel")
    read = fake_winreg(monkeypatch, "13th Gen Intel(R) Core(TM) i7-1365U  ")
    fake_sysctl(monkeypatch, AssertionError("no sysctl on Windows"))
    assert cpu_model() == "13th Gen Intel(R) Core(TM) i7-1365U"
    assert read == [
        ("key", "HKLM", r"HARDWARE\DESCRIPTION\System\CentralProcessor\0"),
        ("value", "ProcessorNameString"),
    ]


def test_windows_without_the_registry_key_keeps_platform_processor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard (passes before the fix too): an unreadable key leaves platform.processor()'s answer."""
    as_host(monkeypatch, "Windows", "Intel64 Family 6 Model 154 Stepping 3, GenuineIntel")
    fake_winreg(monkeypatch, None)
    assert cpu_model() == "Intel64 Family 6 Model 154 Stepping 3, GenuineIntel"


def test_linux_reads_proc_cpuinfo_and_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard (passes before the fix too): Linux keeps /proc/cpuinfo's model name, no subprocess."""
    lines = ["processor\t: 0\n", "model name\t: AMD EPYC 7B13 64-Core Processor\n"]

    class CpuInfo:
        def __enter__(self) -> list[str]:
            return lines

        def __exit__(self, *exc: Any) -> None:
            return None

    monkeypatch.setattr(environment, "open", lambda f, *a, **k: CpuInfo(), raising=False)
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    fake_sysctl(monkeypatch, AssertionError("no subprocess on Linux"))
    assert cpu_model() == "AMD EPYC 7B13 64-Core Processor"
