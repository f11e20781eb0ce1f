"""What a measurement ran on: Python, libraries, CPU, GPU, clocks.

A latency number without its environment cannot be compared with another one, so every Timing and
Profile carries this dict. Nothing here may fail: an unreadable fact is left out, not guessed.
"""

from __future__ import annotations

import functools
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from typing import Any

LIBRARIES = ("onnx", "onnxruntime", "onnxruntime-gpu", "torch", "onnx2torch", "tensorrt")


def cudnn_engines_phrase(limit: int | None) -> str | None:
    """How many engines cudnn.benchmark timed (torch.backends.cudnn.benchmark_limit), in words."""
    if limit is None:
        return None
    return "all engines timed" if limit == 0 else f"{limit} engines timed"


def cudnn_search_phrase(env: dict[str, Any]) -> str | None:
    """How cuDNN chose kernels in a torch measurement's environment, in words (None: not cuDNN)."""
    if env.get("cudnn_benchmark") is False and env.get("device_sms"):
        return "cuDNN heuristics, no autotuning (cudnn.benchmark off)"
    engines = cudnn_engines_phrase(env.get("cudnn_benchmark_limit"))
    return engines and f"cuDNN: {engines}"


def where_measured(env: dict[str, Any]) -> str:
    """'device; how cuDNN chose kernels' from a measurement's environment ('' when it says neither):
    the parenthesis every measured latency prints after its backend."""
    device = env.get("device") or env.get("gpu")
    if device and env.get("device_sms") and "sms_requested" in env and env["sms_requested"] is None:
        # torch on the whole GPU: a green context names its SM count in `device`, the full GPU did not,
        # so 'measured on torch (NVIDIA H200; …)' left out what an 8-SM line says
        device = f"{device}, full GPU ({env['device_sms']} SMs)"
    if env.get("remote"):  # a board over ssh (--remote): which one, as the user named it
        device = f"{device} at {env['remote']}" if device else str(env["remote"])
    parts = [device, cudnn_search_phrase(env)]
    return "; ".join(str(x) for x in parts if x)


def library_versions() -> dict[str, str]:
    """Installed versions from package metadata (no imports, so it is cheap and cannot crash)."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def cpu_model() -> str | None:
    """The CPU's model name: /proc/cpuinfo's on Linux, sysctl's on macOS, the registry's on Windows,
    else platform.processor(). That last is `uname -p` on macOS, "arm" on every Apple-silicon Mac
    (M1 to M4 Max alike) and "i386" on every Intel one: the CPU of a measured latency told nothing,
    and a journal or layer cache shared by two Macs passed for one setup (bug bash)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    system = platform.system()
    named = _darwin_cpu() if system == "Darwin" else _windows_cpu() if system == "Windows" else None
    return named or platform.processor() or None


#: seconds sysctl may take to name the CPU (it answers in about 10 ms)
SYSCTL_TIMEOUT_S = 2.0


@functools.cache
def _darwin_cpu() -> str | None:
    """macOS's CPU name, `sysctl -n machdep.cpu.brand_string` ("Apple M2 Pro", "Intel(R) Core(TM)
    i9-9880H CPU @ 2.30GHz"); None where it cannot tell. Asked once a process (every measurement
    records it; a sysctl that hangs costs its timeout once)."""
    exe = shutil.which("sysctl") or "/usr/sbin/sysctl"
    try:
        proc = subprocess.run(
            [exe, "-n", "machdep.cpu.brand_string"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            errors="replace",
            timeout=SYSCTL_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    name = proc.stdout.strip() if proc.returncode == 0 else ""
    return name or None


@functools.cache
def _windows_cpu() -> str | None:
    """Windows' CPU name, the registry's ProcessorNameString ("13th Gen Intel(R) Core(TM) i7-1365U",
    where platform.processor() gives "Intel64 Family 6 Model 186 Stepping 3, GenuineIntel");
    None where it cannot be read."""
    try:
        import winreg  # type: ignore[import-not-found,unused-ignore]

        key = r"HARDWARE\DESCRIPTION\System\CentralProcessor\0"
        with winreg.OpenKey(winreg.HKEY_LOCAL_MACHINE, key) as handle:
            value, _ = winreg.QueryValueEx(handle, "ProcessorNameString")
    except (ImportError, OSError):
        return None
    name = str(value).strip() if value else ""
    return name or None


def usable_cores() -> int | None:
    """The CPU cores this process may run on: its affinity mask where the OS has one (`taskset -c 0`
    leaves 1 of a host's 2), else the host's count. A CPU backend's latency depends on it, and two
    runs of the same model under different masks recorded identical environments (bug bash)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return os.cpu_count()


def _query_gpus(fields: Sequence[str], *more: str) -> list[str]:
    """nvidia-smi's CSV lines for `--query-gpu=FIELDS` (`more`: its other options, as `--id=0`), or
    [] where there is no nvidia-smi or it failed: the one place nvidia-smi is queried here."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        proc = subprocess.run(
            [exe, *more, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            errors="replace",  # a stray byte that is not UTF-8 raised UnicodeDecodeError here
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    return proc.stdout.strip().splitlines() if proc.returncode == 0 else []


def nvidia_smi(index: int = 0) -> dict[str, Any]:
    """GPU name, driver and clocks as nvidia-smi reports them (empty where there is no nvidia-smi)."""
    fields = {
        "name": "gpu",
        "driver_version": "driver",
        "clocks.sm": "sm_clock_mhz",
        "clocks.max.sm": "max_sm_clock_mhz",
        "clocks.mem": "mem_clock_mhz",
        "power.limit": "power_limit_w",
        "persistence_mode": "persistence_mode",
    }
    lines = _query_gpus(list(fields), f"--id={index}")
    if not lines:
        return {}
    values = [v.strip() for v in lines[0].split(",")]
    out: dict[str, Any] = {}
    for key, value in zip(fields.values(), values):
        if value in ("", "[N/A]", "N/A", "[Not Supported]"):
            continue
        try:
            out[key] = float(value) if key.endswith(("_mhz", "_w")) else value
        except ValueError:  # no number: left out (a string here broke bench's 'SM clock {:g} MHz')
            continue
    return out


def torch_cuda_facts() -> dict[str, Any]:
    """GPU facts through torch, only if torch is already imported (importing it costs seconds)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    out: dict[str, Any] = {}
    try:
        out["torch_cuda"] = torch.version.cuda
        # cuDNN only where a GPU runs it: a CUDA build of torch ships the library, and a CPU run
        # listed "cuDNN 92400" among what timed it
        if torch.cuda.is_available() and torch.backends.cudnn.is_available():
            out["cudnn"] = torch.backends.cudnn.version()
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            out["gpu"] = props.name
            out["device_sms"] = props.multi_processor_count
            out["compute_capability"] = f"{props.major}.{props.minor}"
    except Exception:  # a broken CUDA install must not break a report
        pass
    return out


def collect(backend: str, **extra: Any) -> dict[str, Any]:
    """The environment dict that goes into every Timing/Profile; `extra` adds backend facts
    (e.g. sms=8, device="cuda", provider="CPUExecutionProvider")."""
    from deployopt import __version__

    env: dict[str, Any] = {
        "backend": backend,
        # the tool that measured: what a bench feeds and records changes between versions, and a
        # baseline months older than the compare reading it could not say so (regression.tool_versions)
        "deployopt": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "libraries": library_versions(),
    }
    env.update(torch_cuda_facts())
    smi = nvidia_smi()
    if smi:
        gpu = smi.pop("gpu", None)
        env.setdefault("gpu", gpu)
        env["clocks"] = smi
    env.update({k: v for k, v in extra.items() if v is not None})
    return {k: v for k, v in env.items() if v is not None}


def nvidia_gpus() -> tuple[list[str], str | None]:
    """The names of every GPU nvidia-smi lists, and the driver's version ([], None: no nvidia-smi, or
    it failed). Every GPU, not one index: which one a measurement ran on depends on
    CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, which nvidia-smi's numbering does not follow."""
    names, drivers = [], set()
    for line in _query_gpus(["name", "driver_version"]):
        name, _, driver = (v.strip() for v in line.rpartition(","))
        if name and name not in ("[N/A]", "N/A"):
            names.append(name)
        if driver and driver not in ("[N/A]", "N/A"):
            drivers.add(driver)
    return names, (drivers.pop() if len(drivers) == 1 else None)


def host_facts() -> dict[str, Any]:
    """What a measurement on this machine records of the machine itself (as `collect` and the
    backends' extras do) and can be read without timing anything: Python, the OS, the CPU and the
    cores this process may use, the installed libraries, the GPUs and their driver. What --resume
    holds a journal's measurements against (`setup_changes`)."""
    names, driver = nvidia_gpus()
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_cores": usable_cores(),
        "libraries": library_versions(),
        "gpus": names,
        "driver": driver,
    }
    return {k: v for k, v in facts.items() if v not in (None, [])}


def python_series(version: str) -> str:
    """`3.11` of `3.11.9`: the release series whose patch releases (3.11.8 → 3.11.9: fixes, no new
    interpreter) time alike; anything else is the whole string: a pre-release (`3.12.0rc1`,
    `3.13.0a1`) is no patch release of its final one, so any change to or from it counts."""
    found = re.fullmatch(r"(\d+\.\d+)\.\d+", version)
    return found[1] if found else version


#: the machine names `platform.platform()` ends with before its C library (`-x86_64-with-glibc2.39`)
_MACHINE = r"x86_64|amd64|AMD64|i[3-6]86|aarch64|arm64|armv\w+|ppc64\w*|s390x|riscv64|loongarch64|mips\w*"


def os_series(platform_string: str) -> str:
    """The OS of a `platform.platform()` string less its kernel's patch level: `Linux 6.8 generic
    x86_64-with-glibc2.39` of both `Linux-6.8.0-45-generic-x86_64-with-glibc2.39` and `...-6.8.0-47-...`
    (a kernel update of the same series). The kernel's major.minor, its flavour's words, the machine
    and the C library stay: another series, flavour or distribution is another OS. A string this
    cannot split is its own series (any change of it counts)."""
    found = re.fullmatch(rf"([^-]+)-(\d+)\.(\d+)([^ ]*?)-((?:{_MACHINE})(?:-.*)?)", platform_string)
    if found is None:
        return platform_string
    system, major, minor, release, rest = found.groups()
    words = [w for w in re.split(r"[-.+]", release) if w and not w.isdigit()]
    return " ".join([system, f"{major}.{minor}", *words, rest])


#: The facts of a measurement's environment `setup_changes` compares with this machine's, in the
#: words it says them in, and the series a value belongs to where only a change of series refuses a
#: resume (`python_series`, `os_series`; None: any change). All are part of the layer cache's device
#: fingerprint (lut.device_fingerprint), where a change of any, a patch release too, starts a fresh
#: table: a cache entry is reused without a word, and refilling a table costs minutes, while a
#: resumed run says the patch release it pools (`patch_changes`) and is the user's own run. The same
#: identity, less what only a timing reports (its thread counts: a resumed run compares those with
#: what its session says before it times anything, journal.THREAD_FACTS).
HOST_FACT_WORDS: tuple[tuple[str, str, Callable[[str], str] | None], ...] = (
    ("cpu", "CPU", None),
    ("cpu_cores", "usable CPU cores", None),
    ("python", "Python", python_series),
    ("platform", "OS", os_series),
)


def _host_fact_changes(recorded: dict[str, Any], here: dict[str, Any]) -> Iterator[tuple[str, bool]]:
    """Each HOST_FACT_WORDS fact both sides hold that differs, in words (`Python 3.11.8 → 3.11.9`),
    and whether the change is within its series (a patch release, a kernel update)."""
    for key, word, series in HOST_FACT_WORDS:
        was, now = recorded.get(key), here.get(key)
        if was is not None and now is not None and was != now:
            within = series is not None and series(str(was)) == series(str(now))
            yield f"{word} {was} → {now}", within


def patch_changes(recorded: dict[str, Any], here: dict[str, Any] | None = None) -> list[str]:
    """The differences `setup_changes` lets pass, in its words: a Python patch release or a kernel
    update of the same series (`python_series`, `os_series`), which a resumed run says in a warning."""
    here = host_facts() if here is None else here
    return [change for change, within in _host_fact_changes(recorded, here) if within]


def setup_changes(recorded: dict[str, Any], here: dict[str, Any] | None = None) -> list[str]:
    """What differs between the machine a measurement recorded (its Timing's environment) and this
    one (`host_facts`), in words ('onnxruntime 1.31.0 → 1.32.0'). Only facts both sides hold are
    compared: an older deployopt recorded fewer (no cpu_cores before 2026-12-07), and a fact not
    recorded is unknown, no difference. Python and the OS differ by series only (3.11 → 3.12, kernel
    6.8 → 6.11): a patch release is `patch_changes`'. Its GPU differs where this machine has GPUs and
    none of them is the one recorded."""
    here = host_facts() if here is None else here
    out = [change for change, within in _host_fact_changes(recorded, here) if not within]
    was_libs = recorded.get("libraries") if isinstance(recorded.get("libraries"), dict) else {}
    now_libs = here.get("libraries") or {}
    for name in sorted(set(was_libs) & set(now_libs)):
        if was_libs[name] != now_libs[name]:
            out.append(f"{name} {was_libs[name]} → {now_libs[name]}")
    gpu, gpus = recorded.get("gpu"), here.get("gpus") or []
    # torch names the device it ran on, nvidia-smi the board: one may carry more words than the other
    # (a MIG slice's profile), never another GPU's model
    if isinstance(gpu, str) and gpus and not any(gpu.startswith(g) or g.startswith(gpu) for g in gpus):
        out.append(f"GPU {gpu} → {' / '.join(dict.fromkeys(gpus))}")
    clocks = recorded.get("clocks") if isinstance(recorded.get("clocks"), dict) else {}
    driver = clocks.get("driver")
    if driver is not None and here.get("driver") is not None and str(driver) != here["driver"]:
        out.append(f"NVIDIA driver {driver} → {here['driver']}")
    return out
