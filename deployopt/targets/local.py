"""`--target local`: read the GPU present through whichever library is installed.

Tried in order: PyTorch, cuda-python, nvidia-ml-py (pynvml). Each gives the SM count and compute
capability (NVML gives cores, from which SMs follow); per-SM limits the library does not report
come from the built-in table for that compute capability. A Jetson in a low power mode shows
fewer SMs: what is read here is what the kernels will get.
"""

from __future__ import annotations

from typing import Any, Callable

from deployopt.errors import TargetError, reraise_interrupt

# CUDA cores per SM by compute capability major.minor (NVML reports cores, not SMs).
CORES_PER_SM = {
    (5, 3): 128,
    (6, 1): 128,
    (6, 2): 128,
    (7, 0): 64,
    (7, 2): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
}


class ProbeMiss(Exception):
    """A reader found no GPU for a stated reason ('not installed', 'CPU-only build', …): the
    error for --target local gives each reader's own reason, not 'no GPU' for all."""


def _from_torch() -> dict[str, Any] | None:
    try:
        import torch
    except ImportError as exc:
        reraise_interrupt(exc)  # interrupted, not missing
        raise ProbeMiss("not installed") from None
    if getattr(torch.version, "cuda", None) is None:
        raise ProbeMiss(f"CPU-only build (torch {torch.__version__})")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        return None
    p = torch.cuda.get_device_properties(0)
    d: dict[str, Any] = {
        "display_name": p.name,
        "compute_capability": (p.major, p.minor),
        "sms": p.multi_processor_count,
        "via": "torch",
    }
    for ours, theirs in (
        ("max_threads_per_sm", "max_threads_per_multi_processor"),
        ("shared_mem_per_sm", "shared_memory_per_multiprocessor"),
        ("shared_mem_per_block", "shared_memory_per_block_optin"),
        ("registers_per_sm", "regs_per_multiprocessor"),
    ):
        value = getattr(p, theirs, None)
        if value:
            d[ours] = int(value)
    clock = getattr(p, "clock_rate", None)  # kHz, where torch reports it
    if clock:
        d["clock_mhz"] = clock / 1000.0
    return d


def _from_cuda_python() -> dict[str, Any] | None:
    try:
        try:
            from cuda.bindings import runtime as cudart
        except ImportError as exc:
            reraise_interrupt(exc)
            from cuda import cudart  # type: ignore[no-redef]
    except ImportError as exc:
        reraise_interrupt(exc)
        raise ProbeMiss("not installed") from None
    err, count = cudart.cudaGetDeviceCount()
    if int(err) != 0 or count < 1:
        return None
    err, p = cudart.cudaGetDeviceProperties(0)
    if int(err) != 0:
        return None
    name = p.name.decode(errors="replace").rstrip("\x00") if isinstance(p.name, bytes) else str(p.name)
    d = {
        "display_name": name,
        "compute_capability": (p.major, p.minor),
        "sms": p.multiProcessorCount,
        "max_threads_per_sm": p.maxThreadsPerMultiProcessor,
        "max_blocks_per_sm": getattr(p, "maxBlocksPerMultiProcessor", 0) or None,
        "shared_mem_per_sm": p.sharedMemPerMultiprocessor,
        "shared_mem_per_block": getattr(p, "sharedMemPerBlockOptin", 0) or p.sharedMemPerBlock,
        "registers_per_sm": p.regsPerMultiprocessor,
        "registers_per_block": p.regsPerBlock,
        "via": "cuda-python",
    }
    clock = getattr(p, "clockRate", 0)
    if clock:
        d["clock_mhz"] = clock / 1000.0
    return {k: v for k, v in d.items() if v is not None}


def _from_nvml() -> dict[str, Any] | None:
    try:
        import pynvml
    except ImportError as exc:
        reraise_interrupt(exc)
        raise ProbeMiss("not installed") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVML present but no driver / no GPU
        raise ProbeMiss(f"no NVIDIA driver or GPU (nvmlInit: {exc})") from None
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            return None
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        cc = tuple(pynvml.nvmlDeviceGetCudaComputeCapability(h))
        cores = pynvml.nvmlDeviceGetNumGpuCores(h)
        per_sm = CORES_PER_SM.get(cc, 128)
        return {
            "display_name": name,
            "compute_capability": cc,
            "sms": cores // per_sm,
            "cuda_cores": cores,
            "clock_mhz": float(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
            "via": "nvidia-ml-py",
        }
    finally:
        pynvml.nvmlShutdown()


READERS: list[tuple[str, Callable[[], dict[str, Any] | None]]] = [
    ("torch", _from_torch),
    ("cuda-python", _from_cuda_python),
    ("nvidia-ml-py", _from_nvml),
]


def _limits_for(cc: tuple[int, int]) -> tuple[dict[str, int], str]:
    """Per-SM limits for a GPU of compute capability `cc`, and whose they are: its CC's (a built-in
    target's, else the CUDA guide's table), else those of the nearest CC below that has them (the
    oldest known for an older GPU), as the wave model's peak table does; never an H100's for any
    CC without a built-in target."""
    from deployopt.kernels import SM_LIMITS
    from deployopt.targets import cc_limits

    own = cc_limits(cc)
    if own is not None:
        return own, f"the CUDA guide's limits for CC {cc[0]}.{cc[1]}"
    known = sorted((int(k.split(".")[0]), int(k.split(".")[1])) for k in SM_LIMITS)
    used = ([k for k in known if k <= cc] or known[:1])[-1]
    limits = cc_limits(used)
    assert limits is not None  # every SM_LIMITS entry gives limits
    which = "the nearest below" if used < cc else "the oldest known"
    return limits, f"CC {used[0]}.{used[1]}'s limits (CC {cc[0]}.{cc[1]} is in no table; {which})"


def read_local_target() -> Any:
    """The GPU present as a Target (params: the shipped fit for its CC, else derived defaults)."""
    from deployopt.targets import Target, fitted_for_cc, list_targets

    tried = []
    info = None
    for name, reader in READERS:
        try:
            info = reader()
        except ProbeMiss as miss:
            tried.append(f"{name}: {miss}")
            info = None
        except Exception as exc:  # a broken install must not hide the other readers
            tried.append(f"{name} failed: {type(exc).__name__}: {exc}")
            info = None
        else:
            tried.append(f"{name}: {'no GPU' if info is None else 'ok'}")
        if info:
            break
    if not info:
        raise TargetError(
            "--target local: no CUDA GPU found (tried torch, cuda-python, nvidia-ml-py: "
            + "; ".join(tried)
            + "); name a built-in target instead (deployopt targets)"
        )
    cc = (int(info["compute_capability"][0]), int(info["compute_capability"][1]))
    limits, basis = _limits_for(cc)
    sms = int(info["sms"])
    per_sm = CORES_PER_SM.get(cc, 128)
    via = info["via"]
    fields = {k: info.get(k, limits.get(k)) for k in limits}
    clock, clock_source = _clock(info, cc, list_targets())
    if info.get("cuda_cores"):
        cores_source = f"read from the device via {via}"
    elif cc in CORES_PER_SM:
        cores_source = f"{sms} SMs × {per_sm} cores an SM, the CUDA guide's figure for CC {cc[0]}.{cc[1]}"
    else:  # no table row: the sources must not read as if the device had said
        cores_source = f"assumed: {sms} SMs × {per_sm} cores an SM (CC {cc[0]}.{cc[1]} is in no table here)"
    return Target(
        name="local",
        display_name=str(info["display_name"]),
        compute_capability=cc,
        sms=sms,
        cuda_cores=int(info.get("cuda_cores", sms * per_sm)),
        clock_mhz=float(clock),
        sources={
            "sms": f"read from the device via {via}",
            "cuda_cores": cores_source,
            "clock_mhz": clock_source,
            "compute_capability": f"read from the device via {via}",
            "per_sm_limits": f"{via} where reported, else {basis}",
        },
        params=fitted_for_cc(cc),
        kind="local",
        origin=f"local GPU ({via})",
        **{k: int(v) for k, v in fields.items()},
    )


def _clock(info: dict[str, Any], cc: tuple[int, int], targets: list[Any]) -> tuple[float, str]:
    """(clock in MHz, its source): the reader's, else assumed — the fastest built-in target of the
    same compute capability, else 1000 MHz. The clock scales every default parameter, and the
    guess had no source line (`targets --target local` listed none for clock_mhz)."""
    via = info["via"]
    if info.get("clock_mhz"):
        return float(info["clock_mhz"]), f"read from the device via {via}"
    same = [t for t in targets if t.compute_capability == cc]
    if same:
        fastest = max(same, key=lambda t: t.clock_mhz)
        return float(fastest.clock_mhz), (
            f"assumed: {via} reported no clock; {fastest.clock_mhz:g} MHz is built-in target "
            f"{fastest.name}'s, the fastest of compute capability {cc[0]}.{cc[1]}"
        )
    return 1000.0, (
        f"assumed: {via} reported no clock, and no built-in target has compute capability "
        f"{cc[0]}.{cc[1]}; 1000 MHz is a round guess (predicted latencies scale with it)"
    )
