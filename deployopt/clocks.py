"""Was the GPU's clock held down (power cap, heat, power brake) while a model was timed?

A desktop or datacenter GPU that throttles during a measurement runs slower than its own clock
allows, and the latency says nothing about it. nvidia-smi keeps cumulative counters, in µs, of how
long each power or thermal reason held the clock down ("Clocks Event Reasons Counters" in
`nvidia-smi -q -d PERFORMANCE`), so a reading before and one after the timed loop tell whether it
happened during the loop and for how long. One reading of the SM clock at environment time says
little: the H200 idles at 345 MHz and runs at 1980 MHz
(benchmarks/results/h200_traffic/clocks/nvidia_smi_smsfull_ghostnet.txt).

Jetsons have no such counters: jetson/runner.py reads the GPU's devfreq clock, the thermal zones
and the over-current event counters right before and right after its timed loop, and
jetson_held_down reads that record by its own rule (below). held_down_phrase says what either kind
of record shows, for bench's warning, compare's flag and optimize's report.
Nothing here may fail: an unreadable value is left out, a missing or failing nvidia-smi gives None.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from dataclasses import dataclass, field

#: nvidia-smi's reason labels, under "Clocks Event Reasons" (driver 580) or "Clocks Throttle
#: Reasons" (older drivers), and under "... Counters", by one snake_case name each, the same for a
#: reason and its counter (NVML's bit in the comment).
REASONS = {
    "Idle": "gpu_idle",  # 0x1
    "GPU Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",  # 0x2
    "SW Power Cap": "sw_power_cap",  # 0x4
    "SW Power Capping": "sw_power_cap",  # its counter's label
    "HW Slowdown": "hw_slowdown",  # 0x8 (HW thermal or power brake)
    "Sync Boost": "sync_boost",  # 0x10
    "SW Thermal Slowdown": "sw_thermal_slowdown",  # 0x20
    "HW Thermal Slowdown": "hw_thermal_slowdown",  # 0x40
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",  # 0x80
    "HW Power Braking": "hw_power_brake_slowdown",  # its counter's label
    "Display Clock Setting": "display_clock_setting",  # 0x100
}

#: The counters that mean power or heat held the clock down. Not sync boost (GPUs of a sync-boost
#: group held at one clock on purpose, by their setup) and not idle (no work to slow).
SLOWDOWN = ("sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")

#: Each SLOWDOWN reason in words, for a warning line.
SLOWDOWN_WORDS = {
    "sw_power_cap": "SW power cap",
    "sw_thermal_slowdown": "SW thermal slowdown",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake",
}

#: "clocks"."sm_clock_read" of a reading taken right after the timed loop (absent: read when the
#: environment was collected, before or after the run, maybe on an idle GPU).
SM_CLOCK_AFTER_LOOP = "right after the timed loop"

_KEY_VALUE = re.compile(r"^( *)(\S[^:]*?)\s+: ?(.*?)\s*$")
_US = re.compile(r"^(\d+) us$")
_MHZ = re.compile(r"^(\d+(?:\.\d+)?) MHz$")


@dataclass(frozen=True)
class ClockState:
    """One `nvidia-smi -q -d CLOCK,PERFORMANCE` reading of one GPU; None / absent: not reported."""

    active_reasons: tuple[str, ...] = ()  # the reasons nvidia-smi says are Active, snake_case
    inactive_reasons: tuple[str, ...] = ()  # the ones it says are Not Active
    counters_us: dict[str, int] = field(default_factory=dict)  # cumulative, since the driver loaded
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    applications_clock_mhz: float | None = None  # graphics clock set by `nvidia-smi -ac`
    default_applications_clock_mhz: float | None = None


def _snake(label: str) -> str:
    """A stable key for a label REASONS does not know (a newer driver's), so it is kept, not lost."""
    return REASONS.get(label) or re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_")


def _mhz(value: str) -> float | None:
    m = _MHZ.match(value)
    return float(m.group(1)) if m else None


def gpu_count(text: str) -> int:
    """How many GPUs a `nvidia-smi -q` output describes (their 'GPU 00000000:00:06.0' lines)."""
    return sum(1 for line in str(text).splitlines() if re.match(r"^GPU [0-9A-Fa-f]+:", line))


def parse_clocks(text: str) -> ClockState:
    """The first GPU of a `nvidia-smi -q` output (any -d sections; others are skipped). Values that
    are N/A, Not Found or otherwise unreadable are left out; odd input gives an empty reading."""
    active: list[str] = []
    inactive: list[str] = []
    counters: dict[str, int] = {}
    clocks: dict[str, float] = {}
    headers: list[tuple[int, str]] = []  # the open section headers, by indent
    seen_gpu = False
    for line in str(text).splitlines():
        if not line.strip():
            continue
        if re.match(r"^GPU [0-9A-Fa-f]+:", line):
            if seen_gpu:
                break  # the next GPU's block
            seen_gpu = True
        indent = len(line) - len(line.lstrip(" "))
        while headers and headers[-1][0] >= indent:
            headers.pop()
        m = _KEY_VALUE.match(line)
        if m is None:
            headers.append((indent, line.strip()))
            continue
        if not headers:
            continue
        section, label, value = headers[-1][1], m.group(2), m.group(3)
        if section.startswith(("Clocks Event Reasons", "Clocks Throttle Reasons")):
            if section.endswith("Counters"):
                n = _US.match(value)
                if n:
                    counters[_snake(label)] = int(n.group(1))
            elif value == "Active":
                active.append(_snake(label))
            elif value == "Not Active":
                inactive.append(_snake(label))
        elif label in ("SM", "Graphics"):
            mhz = _mhz(value)
            if mhz is not None:
                clocks[f"{section}/{label}"] = mhz
    return ClockState(
        active_reasons=tuple(active),
        inactive_reasons=tuple(inactive),
        counters_us=counters,
        sm_clock_mhz=clocks.get("Clocks/SM"),
        max_sm_clock_mhz=clocks.get("Max Clocks/SM"),
        applications_clock_mhz=clocks.get("Applications Clocks/Graphics"),
        default_applications_clock_mhz=clocks.get("Default Applications Clocks/Graphics"),
    )


def read_clocks(gpu: int | str | None = 0, timeout_s: float = 10.0) -> ClockState | None:
    """`nvidia-smi -q -d CLOCK,PERFORMANCE` now, for `gpu` (nvidia-smi's index, UUID or PCI bus id;
    None: the machine's only GPU, so None where it has several). None when nvidia-smi is missing,
    fails or times out."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    cmd = [exe, "-q", "-d", "CLOCK,PERFORMANCE"] + ([] if gpu is None else ["-i", str(gpu)])
    try:
        proc = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if proc.returncode != 0 or gpu_count(proc.stdout) != 1:
        return None
    return parse_clocks(proc.stdout)


def slowdown_between(before: ClockState | None, after: ClockState | None) -> dict[str, int] | None:
    """{reason: µs} by which each SLOWDOWN counter grew from `before` to `after`: how long power or
    heat held the clock down in between. Empty: checked, none did. None: cannot tell (a reading or
    its counters missing). A counter that went down (driver reloaded) counts as no slowdown."""
    if before is None or after is None:
        return None
    known = [k for k in SLOWDOWN if k in before.counters_us and k in after.counters_us]
    if not known:
        return None
    grown = {k: after.counters_us[k] - before.counters_us[k] for k in known}
    return {k: us for k, us in grown.items() if us > 0}


def duration_phrase(us: float) -> str:
    """'850 µs', '12 ms', '1.2 s': a counter's µs as a person reads it."""
    if us < 1000:
        return f"{us:.0f} µs"
    if us < 1_000_000:
        return f"{us / 1000:.0f} ms"
    return f"{us / 1e6:.1f} s"


def recorded_slowdown(env: dict[str, object]) -> dict[str, float]:
    """The positive {reason: µs} a measurement's environment recorded as "clock_slowdown_us" (empty:
    none recorded, or checked and none; a malformed value is read as nothing, never an error)."""
    raw = env.get("clock_slowdown_us") if isinstance(env, dict) else None
    if not isinstance(raw, dict):
        return {}
    return {
        str(k): float(v)
        for k, v in raw.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
    }


def throttle_record_problem(env: dict[str, object]) -> str | None:
    """What is malformed in a result's record of clock throttling, or None. The readers above take a
    malformed value as "nothing recorded", which is right for a display but not for `compare`: a
    hand-edited or corrupted "clock_slowdown_us": "lots" read as "checked, and not held down", and
    removed the flag a regression gate relies on. Absent keys are fine (not recorded)."""

    def counts(value: object, what: str, unit: str, whole: bool = False) -> str | None:
        if not isinstance(value, dict):
            return f'"{what}" must be an object of {unit}, not {_json_text(value)}'
        bad = next((k for k, v in value.items() if _count(v, whole) is None), None)
        if bad is not None:
            return f'"{what}" must hold {unit}; {bad!r} is {_json_text(value[bad])}'
        return None

    if "clock_slowdown_us" in env and env["clock_slowdown_us"] is not None:
        problem = counts(env["clock_slowdown_us"], "clock_slowdown_us", "{reason: µs held down} (0 or more)")
        if problem:
            return problem
    if "oc_events" in env:
        problem = counts(env["oc_events"], "oc_events", "{counter: events} (whole numbers, 0 or more)", True)
        if problem:
            return problem
    if "gpu_clock_during_run" in env:
        clock = env["gpu_clock_during_run"]
        if not isinstance(clock, dict):
            return f'"gpu_clock_during_run" must be an object (before, after), not {_json_text(clock)}'
        for when in ("before", "after"):
            if when not in clock:
                continue
            reading, where = clock[when], f"gpu_clock_during_run.{when}"
            if not isinstance(reading, dict):
                return f'"{where}" must be an object of clocks in Hz, not {_json_text(reading)}'
            bad = next((k for k, v in reading.items() if k.endswith("_hz") and _count(v) is None), None)
            if bad is not None:
                return f'"{where}.{bad}" must be a clock in Hz, not {_json_text(reading[bad])}'
    return None


def _json_text(value: object) -> str:
    return json.dumps(value)[:40]


_JETSON_CLOCKS_GPU = re.compile(r"^GPU MinFreq=(\d+) MaxFreq=(\d+)")


def clocks_locked(env: dict[str, object]) -> bool | None:
    """Whether the GPU clock was pinned (jetson_clocks sets its devfreq minimum to the maximum; an
    unpinned clock follows DVFS). jetson/runner.py records it as clocks_locked; older runner results
    are read by the same rule from devfreq's min/max (readable without root) or `jetson_clocks
    --show`'s GPU line (root only). None when nothing says."""
    if isinstance(env.get("clocks_locked"), bool):
        return env["clocks_locked"]
    lo, hi = env.get("gpu_min_freq_mhz"), env.get("gpu_max_freq_mhz")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lo, hi)):
        return lo == hi
    lines = env.get("jetson_clocks")
    for line in lines if isinstance(lines, list) else []:
        m = _JETSON_CLOCKS_GPU.match(str(line).strip())
        if m:
            return m.group(1) == m.group(2)
    return None


def unlocked_phrase(env: dict[str, object]) -> str | None:
    """What to say of a Jetson measurement taken with the GPU clock free to follow DVFS (devfreq
    minimum below its maximum, `clocks_locked` false), or None (locked, or not a board's record).
    The governor ramps the clock with load, so such a latency depends on what ran before it; NVIDIA's
    benchmarking guides lock it with jetson_clocks first."""
    if clocks_locked(env) is not False:
        return None
    lo, hi = env.get("gpu_min_freq_mhz"), env.get("gpu_max_freq_mhz")
    span = (
        f" (devfreq {lo:g}–{hi:g} MHz)"
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lo, hi))
        else ""
    )
    return (
        f"the board's GPU clock was not locked{span}: the latency follows the DVFS governor, which "
        "ramps the clock with load; run `sudo jetson_clocks` on the board (in a fixed nvpmodel mode) "
        "before timing"
    )


def _count(value: object, whole: bool = False) -> int | None:
    """A JSON number that is a count (bool, negatives, NaN and infinities are not: `compare` crashed
    with exit 1, its 'slower' code, on an "oc3": NaN); `whole`: a fraction is not either (0.9
    over-current events read as 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    if isinstance(value, float) and (not math.isfinite(value) or (whole and not value.is_integer())):
        return None
    return int(value)


def _mhz_text(hz: float) -> str:
    return f"{hz / 1e6:g}"


def jetson_held_down(env: dict[str, object]) -> list[str]:
    """What jetson/runner.py's record of its timed loop says held the GPU clock down, one phrase a
    cause (empty: nothing did, or nothing was recorded). The rule:

    - an over-current counter grew during the loop ("oc_events": Orin's soctherm_oc oc1..oc3, the
      Nano's soctherm_edp interrupt), unless the board said that counter's throttling is off
      ("oc_throttle_enabled" false): the board cut its clocks for power, which devfreq's cur_freq
      need not show;
    - the clock was locked (devfreq min = max before the loop, else the environment's
      clocks_locked) and cur_freq read right after the warm-up or right after the loop is below
      the locked clock: something capped a clock jetson_clocks pinned;
    - devfreq's max_freq fell during the loop: a cap lowered the ceiling while it ran.

    Temperatures are recorded but never judged: trip points differ per module and JetPack and are
    not in the record, a board warming under load is normal, and heat that does throttle shows up
    in the clock, which is what the latency depends on. A clock below its maximum on an unlocked
    board is DVFS doing its job, not a slowdown (and compare already flags an unlocked side
    against a locked one)."""
    out: list[str] = []
    oc = env.get("oc_events") if isinstance(env, dict) else None
    enabled = env.get("oc_throttle_enabled") if isinstance(env, dict) else None
    enabled = enabled if isinstance(enabled, dict) else {}
    if isinstance(oc, dict):
        fired = {str(k): n for k, v in oc.items() if (n := _count(v)) and enabled.get(k) is not False}
        if fired:
            events = " and ".join(f"{n} {k}" for k, n in sorted(fired.items()))
            out.append(f"over-current throttling: {events} event(s)")
    clock = env.get("gpu_clock_during_run") if isinstance(env, dict) else None
    if not isinstance(clock, dict):
        return out
    before, after = clock.get("before"), clock.get("after")
    if not isinstance(before, dict) or not isinstance(after, dict):
        return out
    ceiling = _count(before.get("max_hz"))
    floor = _count(before.get("min_hz"))
    locked = floor == ceiling if floor is not None and ceiling is not None else clocks_locked(env)
    if ceiling and locked:
        low = [
            (hz, when)
            for when, reading in (("right after the warm-up", before), ("right after the timed loop", after))
            if (hz := _count(reading.get("cur_hz"))) is not None and hz < ceiling
        ]
        if low:
            hz, when = min(low)
            out.append(f"a cap below the locked clock: {_mhz_text(hz)} of {_mhz_text(ceiling)} MHz {when}")
    lowered = _count(after.get("max_hz"))
    if ceiling and lowered is not None and lowered < ceiling:
        out.append(
            f"a lowered devfreq ceiling: {_mhz_text(ceiling)} → {_mhz_text(lowered)} MHz during the loop"
        )
    return out


def held_down_phrase(env: dict[str, object]) -> str | None:
    """Everything a measurement's environment records about its GPU clock being held down while it
    was timed, in words: nvidia-smi's counters ("clock_slowdown_us") and the Jetson runner's record
    (jetson_held_down). None: nothing was, or nothing was recorded."""
    slowdown = recorded_slowdown(env)
    parts = ([slowdown_phrase(slowdown)] if slowdown else []) + jetson_held_down(env)
    return ", ".join(parts) or None


def slowdown_phrase(slowdown: dict[str, float]) -> str:
    """'SW thermal slowdown 1.2 s, SW power cap 300 ms', longest first."""
    ordered = sorted(slowdown.items(), key=lambda kv: -kv[1])
    words = [(SLOWDOWN_WORDS.get(k, k.replace("_", " ")), us) for k, us in ordered]
    return ", ".join(f"{word} {duration_phrase(us)}" for word, us in words)


def pci_bus_id(props: object) -> str | None:
    """nvidia-smi's PCI bus id ('00000000:00:06.0') of a torch.cuda device's properties: names the
    GPU CUDA calls device 0 whatever CUDA_VISIBLE_DEVICES or CUDA's device order say (nvidia-smi's
    own index follows neither). None when torch does not report it."""
    ids = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        return None
    domain, bus, device = ids
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def record_in_environment(
    env: dict[str, object], before: ClockState | None, after: ClockState | None, busy_clock: bool = True
) -> dict[str, object]:
    """Add what two readings around a timed loop say to a measurement's environment, in place:
    "clock_slowdown_us" ({reason: µs} the clock was held down, {} checked and none, absent: not
    checked); with `busy_clock`, the SM clock read right after the loop as "clocks"."sm_clock_mhz"
    in place of the reading taken when the environment was collected, which an idle GPU makes low,
    with "sm_clock_read" saying so (absent in older files). Informative only: on the H200 the clock
    stays up for seconds after a loop, but after a power-capped one it climbs back to the maximum
    in about 0.15 s while nvidia-smi takes 50 ms, so it can read above what the loop ran at; the
    counters are what says the clock was held down (benchmarks/results/h200_clocks/)."""
    slowdown = slowdown_between(before, after)
    if slowdown is not None:
        env["clock_slowdown_us"] = slowdown
    if busy_clock and after is not None and after.sm_clock_mhz is not None:
        clocks = env.get("clocks")
        clocks = dict(clocks) if isinstance(clocks, dict) else {}
        clocks["sm_clock_mhz"] = after.sm_clock_mhz
        clocks["sm_clock_read"] = SM_CLOCK_AFTER_LOOP
        if after.max_sm_clock_mhz is not None:
            clocks.setdefault("max_sm_clock_mhz", after.max_sm_clock_mhz)
        env["clocks"] = clocks
    return env
