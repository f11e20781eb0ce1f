#!/usr/bin/env python3
"""deployopt on-device runner: build (or load) a TensorRT engine on a Jetson, time it, print JSON.

One file, Python 3.6+ (JetPack 4.6 ships 3.6.9), standard library plus what JetPack ships:
tensorrt, numpy, and pycuda or cuda-python. Copy it to the board, run it, copy the JSON back;
`deployopt.backends.tensorrt.load_runner_result(path)` reads it as a Timing.

Timing method (same as deployopt's `tensorrt` backend): inputs uploaded once, CUDA events around
each execute_async_v3 (TensorRT >= 8.5) / execute_async_v2 (8.2) on one stream, warm-up first;
one sample = one forward pass. NOT RUN ON HARDWARE YET.

Right before and right after the timed loop it reads the GPU's devfreq clock, every thermal zone
and the board's over-current event counters (Orin's soctherm_oc hwmon, the Nano's soctherm_edp
interrupt), and records them as "gpu_clock_during_run", "temperatures_c" and "oc_events" (the
sources of each path are cited where they are read). `deployopt compare` reads that record to tell
a board that throttled mid-run from a regression. Never run on a Jetson either: tested on fake
sysfs trees only.

TensorRT >= 11 (not in any JetPack yet) is strongly typed: no FP16/INT8 build flags, no
calibration. The runner cannot retype a model (no onnx here), so on 11 `--dtype fp16` takes a model
already typed fp16 (on the host: `deployopt fp16 model.onnx -o model_fp16.onnx`) and
`--dtype int8` one with Q/DQ nodes; anything else is refused in one line.

Example:
    python3 runner.py model.onnx --dtype fp16 --runs 200 --warmup 50 --out result.json
"""

import argparse
import glob
import hashlib
import json
import math
import os
import platform
import random
import re
import subprocess
import sys
import time

BOOTSTRAP_RESAMPLES = 2000
#: The fewest runs a 95 % CI of the median needs (deployopt.timing.CI_MIN_RUNS: [min, max] of 5
#: runs holds the median 93.75 % of the time)
CI_MIN_RUNS = 6
MAX_RUNS = 100000  # as deployopt.timing.MAX_RUNS (a test keeps the two equal)
MAX_REPEAT = 100  # as deployopt.timing.MAX_REPEAT, `bench --repeat`'s bound (a test keeps the two equal)
# deployopt.timing.min_samples at `deployopt compare`'s default alpha 0.01 (a test keeps them equal):
# fewer runs than this can never be judged slower or faster, and compare refuses such a file.
COMPARE_MIN_RUNS = 5
# 1 TiB: more than any Jetson or GPU has; a larger or negative value made TensorRT's size_t binding
# raise a TypeError traceback.
MAX_WORKSPACE_MIB = 1 << 20
RUNNER_VERSION = "1"
# Part of every engine's build key: raise it when build_engine starts building something else from
# the same inputs, so engines built by the older recipe are rebuilt rather than reused.
BUILD_RECIPE = "1"
KEY_SUFFIX = ".key"  # --save-engine FILE gets FILE.key: what it was built from


class RunnerError(Exception):
    """A problem reported as one line (exit status 2)."""


# ----------------------------------------------------------------------------------------------
# statistics (must agree with deployopt.timing: numpy's default linear-interpolation percentiles)


def percentile(values, q):
    """q in [0, 100]; linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(float(v) for v in values)
    if not xs:
        raise ValueError("no samples")
    pos = (len(xs) - 1) * (q / 100.0)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values):
    return percentile(values, 50.0)


def iqr(values):
    return percentile(values, 75.0) - percentile(values, 25.0)


def bootstrap_median_ci(values, level=0.95, seed=0):
    """Same as deployopt.timing.bootstrap_median_ci where numpy has default_rng (>= 1.17): the same
    draws, in blocks of at most ~4M indices (one (2000, n) draw took 4.9 GB at --runs 100000, on a
    Nano's 4 GB shared with the GPU). Older numpy (JetPack 4.6 has 1.13) draws as RandomState does,
    in the same blocks (same method, another random stream): 2000 pure-Python resamples took minutes."""
    xs = [float(v) for v in values]
    if len(xs) == 1:
        return xs[0], xs[0]
    alpha = (1 - level) / 2
    try:
        import numpy as np
    except ImportError:
        rnd = random.Random(seed)
        meds = [median([xs[rnd.randrange(len(xs))] for _ in xs]) for _ in range(BOOTSTRAP_RESAMPLES)]
        return percentile(meds, 100 * alpha), percentile(meds, 100 * (1 - alpha))
    x = np.asarray(xs, dtype=float)
    if hasattr(np.random, "default_rng"):
        draw = np.random.default_rng(seed).integers
    else:
        draw = np.random.RandomState(seed).randint
    rows = max(1, min(BOOTSTRAP_RESAMPLES, (1 << 22) // x.size))
    meds = np.concatenate(
        [
            np.median(x[draw(0, x.size, size=(min(rows, BOOTSTRAP_RESAMPLES - i), x.size))], axis=1)
            for i in range(0, BOOTSTRAP_RESAMPLES, rows)
        ]
    )
    lo, hi = np.percentile(meds, [100 * alpha, 100 * (1 - alpha)])
    return float(lo), float(hi)


def student_t_975(df):
    """The 97.5th percentile of Student's t with `df` (a whole number, 1 or more) degrees of freedom,
    as scipy.stats.t.ppf(0.975, df) gives it, without scipy (not on a board): P(|T| <= t) in closed
    form for whole df (Abramowitz & Stegun 26.7.3 and 26.7.4), solved for 0.95 by bisection."""

    def within(t):
        theta = math.atan(t / math.sqrt(df))
        c2 = math.cos(theta) ** 2
        if df == 1:
            return 2 * theta / math.pi
        if df % 2:
            term = total = math.cos(theta)
            for j in range(1, (df - 1) // 2):
                term *= c2 * (2 * j) / (2 * j + 1)
                total += term
            return 2 / math.pi * (theta + math.sin(theta) * total)
        term = total = 1.0
        for j in range(1, df // 2):
            term *= c2 * (2 * j - 1) / (2 * j)
            total += term
        return math.sin(theta) * total

    lo, hi = 0.0, 1000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if within(mid) < 0.95 else (lo, mid)
    return (lo + hi) / 2


def replicate_median_ci(medians):
    """deployopt.timing.replicate_median_ci: Student's t-interval (95 %) on the logs of replicate
    medians, back in µs, a CI of their geometric mean that counts each run once; None under 2
    medians, where they are all alike (the spread between runs unmeasured) or one is not above 0.
    The pooled samples' bootstrap left the variation between runs out (host bug bash 2026-12-07)."""
    if len(medians) < 2 or min(medians) <= 0:
        return None
    logs = [math.log(m) for m in medians]
    if max(logs) == min(logs):
        return None
    k = len(logs)
    mean = sum(logs) / k
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (k - 1))
    half = student_t_975(k - 1) * sd / math.sqrt(k)
    return math.exp(mean - half), math.exp(mean + half)


def measured_now():
    """Now as a result's "measured_at" (deployopt.timing.measured_now): UTC, ISO 8601, to the second,
    on the board's clock."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def summarize(samples_us, warmup, timed, environment, backend="tensorrt", model=None, measured_at=None):
    """The bench JSON schema (deployopt.timing.Timing.to_json): one run has no spread, so its IQR and
    CI are null rather than a 0 and [x, x] that look exact. `model` (model_identity) says what was
    timed, so `deployopt compare` can tell a wrong pair from a regression; `measured_at`
    (measured_now) when, so it can tell last week's result, left in place by a run that failed.
    The CI is null below CI_MIN_RUNS runs too (deployopt.timing.CI_MIN_RUNS)."""
    known = len(samples_us) >= 2
    out = {
        "backend": backend,
        "measured": True,
        "median_us": median(samples_us),
        "iqr_us": iqr(samples_us) if known else None,
        "ci95_us": list(bootstrap_median_ci(samples_us)) if len(samples_us) >= CI_MIN_RUNS else None,
        "runs": len(samples_us),
        "warmup": warmup,
        "samples_us": [float(s) for s in samples_us],
        "timed": timed,
        "environment": environment,
    }
    if model is not None:
        out["model"] = model
    if measured_at is not None:
        out["measured_at"] = measured_at
    return out


# ----------------------------------------------------------------------------------------------
# board facts (every one optional: an unreadable fact is left out, never guessed)


def _read(path):
    try:
        with open(path) as fh:
            return fh.read().strip().strip("\x00")
    except (OSError, IOError):
        return None


def _cmd(args, timeout=10):
    try:
        proc = subprocess.run(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=timeout
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def parse_nvpmodel(text):
    """`nvpmodel -q` prints 'NV Power Mode: MODE_15W' then the mode number."""
    out = {}
    if not text:
        return out
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("NV Power Mode:"):
            out["nvpmodel"] = line.split(":", 1)[1].strip()
        elif line.isdigit():
            out["nvpmodel_id"] = int(line)
    return out


# Where the board facts are read; tests point these at fake trees.
SYSFS = "/sys"
PROCFS = "/proc"

# The GPU's devfreq device, found by name rather than by a path per board (a name this matches:
# Nano 57000000.gpu, TX2 17000000.gp10b, Xavier 17000000.gv11b, Orin on JetPack 5 17000000.ga10b
# and on JetPack 6 17000000.gpu, Thor gpu-gpc-0; jetson_stats finds it the same way, by the
# device's of_node name: https://github.com/rbonghi/jetson_stats/blob/master/jtop/core/gpu.py).
# cur_freq, min_freq and max_freq are in Hz (Linux ABI:
# https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-class-devfreq).
GPU_DEVFREQ_NAMES = ("gpu", "gv11b", "ga10b", "gp10b", "gm20b")


def gpu_devfreq_path(sysfs=None):
    """The GPU's /sys/class/devfreq/<name> directory, or None."""
    for path in sorted(glob.glob(os.path.join(sysfs or SYSFS, "class", "devfreq", "*"))):
        dev = (_read(os.path.join(path, "device/of_node/name")) or "") + " " + os.path.basename(path)
        if any(k in dev for k in GPU_DEVFREQ_NAMES):
            return path
    return None


def _read_int(path):
    text = _read(path)
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def gpu_devfreq():
    """Current/min/max GPU clock and governor from devfreq (names differ per Jetson)."""
    path = gpu_devfreq_path()
    if path is None:
        return {}
    facts = {"gpu_devfreq": os.path.basename(path)}
    for key in ("cur_freq", "min_freq", "max_freq"):
        v = _read(os.path.join(path, key))
        if v and v.isdigit():
            facts["gpu_" + key + "_mhz"] = int(v) / 1e6
    gov = _read(os.path.join(path, "governor"))
    if gov:
        facts["gpu_governor"] = gov
    return facts


JETSON_CLOCKS_GPU = re.compile(r"^GPU MinFreq=(\d+) MaxFreq=(\d+)")


def clocks_locked(env):
    """Whether the GPU clock is pinned: jetson_clocks sets its devfreq minimum to the maximum, which
    devfreq shows without root; else `jetson_clocks --show`'s GPU line (root only). None when
    neither says. Same rule as deployopt.clocks.clocks_locked, which compare reads."""
    lo, hi = env.get("gpu_min_freq_mhz"), env.get("gpu_max_freq_mhz")
    if lo is not None and hi is not None:
        return lo == hi
    for line in env.get("jetson_clocks") or []:
        m = JETSON_CLOCKS_GPU.match(line.strip())
        if m:
            return m.group(1) == m.group(2)
    return None


# Which module the board is, readable without root (deployopt.targets.board maps these to a
# built-in target; `deployopt targets --remote` and `optimize --remote` without --target read them):
# - the device tree's model (free text) and compatible: a list of strings, most specific first,
#   NUL-separated in the file (Devicetree Specification, "compatible" is a <stringlist>:
#   https://www.devicetree.org/specifications/; /proc/device-tree is the kernel's view of it:
#   https://www.kernel.org/doc/html/latest/devicetree/usage-model.html). NVIDIA's own Jetson.GPIO
#   reads /proc/device-tree/compatible and splits it on NUL the same way to tell the modules apart
#   (https://github.com/NVIDIA/jetson-gpio/blob/master/lib/python/Jetson/GPIO/gpio_pin_data.py);
#   on Jetsons it names the module by part number, e.g. "nvidia,p3737-0000+p3701-0005",
#   "nvidia,p3701-0005", "nvidia,tegra234" (an AGX Orin 64GB, printed in
#   https://github.com/NVIDIA/jetson-gpio/issues/125);
# - /proc/meminfo's MemTotal, in kB: "physical RAM minus a few reserved bits and the kernel binary
#   code" (https://www.kernel.org/doc/Documentation/filesystems/proc.rst), which tells an 8 GB
#   module from a 16 GB one where the part number is not in the device tree.
MEM_TOTAL = re.compile(r"^MemTotal:\s+(\d+)\s*kB", re.M)


def device_tree_compatible(procfs=None):
    """The device tree's compatible strings, in their order ([] where there is none)."""
    text = _read(os.path.join(procfs or PROCFS, "device-tree", "compatible"))
    return [entry for entry in (text or "").split("\x00") if entry.strip()]


def mem_total_kib(procfs=None):
    """MemTotal from /proc/meminfo in kB (None: unreadable)."""
    m = MEM_TOTAL.search(_read(os.path.join(procfs or PROCFS, "meminfo")) or "")
    return int(m.group(1)) if m else None


def board_environment():
    env = {
        "runner": "jetson/runner.py v" + RUNNER_VERSION,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    model = _read(os.path.join(PROCFS, "device-tree", "model"))
    if model:
        env["board"] = model
    compatible = device_tree_compatible()
    if compatible:
        env["compatible"] = compatible
    memory = mem_total_kib()
    if memory is not None:
        env["mem_total_kib"] = memory
    release = _read("/etc/nv_tegra_release")
    if release:
        env["l4t"] = release.splitlines()[0]
    env.update(parse_nvpmodel(_cmd(["nvpmodel", "-q"])))
    clocks = _cmd(["jetson_clocks", "--show"])  # needs root; absent otherwise
    if clocks:
        lines = clocks.splitlines()
        # the GPU and EMC lines come after one line per CPU: an AGX Orin's 12 CPUs pushed them out
        env["jetson_clocks"] = lines[:12] + [x for x in lines[12:] if x.startswith(("GPU ", "EMC "))]
    env.update(gpu_devfreq())
    locked = clocks_locked(env)
    if locked is not None:
        env["clocks_locked"] = locked
    return env


# ----------------------------------------------------------------------------------------------
# what the GPU clock, temperatures and over-current counters did during the timed loop
#
# Read right before and right after the timed loop (cheap file reads; anything unreadable is left
# out, nothing here raises), so `deployopt compare` can tell a board that throttled mid-run from a
# real regression (deployopt.clocks.jetson_held_down decides; the runner only records):
# - the GPU's devfreq cur/min/max_freq (Hz), see GPU_DEVFREQ_NAMES;
# - every thermal zone's temperature: /sys/class/thermal/thermal_zone*/type and temp, in
#   millidegrees Celsius (https://www.kernel.org/doc/html/latest/driver-api/thermal/sysfs-api.html);
# - over-current events, where the board has a counter a user can read. Orin: the hwmon device
#   named "soctherm_oc", files oc1_event_cnt..oc3_event_cnt (events so far) and oc1_throt_en..
#   oc3_throt_en (whether that event throttles), from NVIDIA's tegra23x_oc_event driver in the
#   Jetson Linux kernel sources (compatible "nvidia,tegra234-oc-event", mode 0444); NVIDIA's Orin
#   "Platform Power and Performance" page describes the OC events
#   (https://docs.nvidia.com/jetson/archives/r36.3/DeveloperGuide/SD/PlatformPowerAndPerformance/JetsonOrinNanoSeriesJetsonOrinNxSeriesAndJetsonAgxOrinSeries.html)
#   and boards show the files in NVIDIA's forum
#   (https://forums.developer.nvidia.com/t/jetson-thor-cpu-permanently-throttled-to-242-mhz-after-oc3-event-at-boot/361188).
#   Nano (Tegra X1): the count of the "soctherm_edp" interrupt in /proc/interrupts, the IRQ the
#   soctherm driver requests for over-current alarms
#   (https://github.com/torvalds/linux/blob/master/drivers/thermal/tegra/soctherm.c); NVIDIA's own
#   L4T 32 over-current indicator counts the same line on tegra210 and watches nothing on tegra186
#   and tegra194. So for TX2 and Xavier no counter readable without root is known here:
#   only their clock and temperatures are recorded.
# Never run on a Jetson: written from the sources above and tested on fake trees.

OC_EVENT_FILE = re.compile(r"^(oc\d+)_event_cnt$")
EDP_IRQ = "soctherm_edp"


def thermal_zones(sysfs=None):
    """{zone type: degrees C} of every readable thermal zone, in zone order (a type seen twice is
    keyed 'type (thermal_zoneN)' the second time)."""
    def number(path):
        digits = re.sub(r"\D", "", os.path.basename(path))
        return int(digits) if digits else -1

    out = {}
    zones = glob.glob(os.path.join(sysfs or SYSFS, "class", "thermal", "thermal_zone*"))
    for path in sorted(zones, key=number):
        kind = _read(os.path.join(path, "type"))
        milli = _read_int(os.path.join(path, "temp"))
        if not kind or milli is None:
            continue
        key = kind if kind not in out else "%s (%s)" % (kind, os.path.basename(path))
        out[key] = milli / 1000.0
    return out


def edp_interrupts(text):
    """The soctherm over-current interrupt's count, summed over CPUs, from /proc/interrupts text
    (None: no such line)."""
    for line in (text or "").splitlines():
        fields = line.split()
        if not fields or not fields[0].endswith(":") or EDP_IRQ not in fields[1:]:
            continue
        total, seen = 0, False
        for field in fields[1:]:
            if not field.isdigit():
                break
            total, seen = total + int(field), True
        return total if seen else None
    return None


def oc_counters(sysfs=None, procfs=None):
    """({counter: events so far}, {counter: throttling enabled}) from the board's over-current
    counters (empty where it has none the runner can read)."""
    counts, enabled = {}, {}
    for hwmon in sorted(glob.glob(os.path.join(sysfs or SYSFS, "class", "hwmon", "hwmon*"))):
        if _read(os.path.join(hwmon, "name")) != "soctherm_oc":
            continue
        for path in sorted(glob.glob(os.path.join(hwmon, "oc*_event_cnt"))):
            m = OC_EVENT_FILE.match(os.path.basename(path))
            n = _read_int(path)
            if m is None or n is None:
                continue
            counts[m.group(1)] = n
            on = _read_int(os.path.join(hwmon, m.group(1) + "_throt_en"))
            if on is not None:
                enabled[m.group(1)] = on != 0
    try:
        with open(os.path.join(procfs or PROCFS, "interrupts")) as fh:
            edp = edp_interrupts(fh.read())
    except (OSError, IOError, UnicodeDecodeError):
        edp = None
    if edp is not None:
        counts[EDP_IRQ] = edp
    return counts, enabled


def board_state(sysfs=None, procfs=None):
    """One reading of the GPU clock, temperatures and over-current counters (see above)."""
    state = {"clock": {}, "temperatures_c": thermal_zones(sysfs)}
    path = gpu_devfreq_path(sysfs)
    if path is not None:
        state["devfreq"] = os.path.basename(path)
        for key in ("cur", "min", "max"):
            hz = _read_int(os.path.join(path, key + "_freq"))
            if hz is not None:
                state["clock"][key + "_hz"] = hz
    state["oc_counts"], state["oc_enabled"] = oc_counters(sysfs, procfs)
    return state


def during_run(before, after):
    """The environment keys two board_state readings around the timed loop give: the GPU clock
    before and after ("gpu_clock_during_run"), the temperatures before and after
    ("temperatures_c"), and by how much each over-current counter grew ("oc_events", with
    "oc_throttle_enabled" where the board says). A fact missing from either reading is left out."""
    env = {}
    if before.get("devfreq") and before.get("devfreq") == after.get("devfreq"):
        clock = {"devfreq": before["devfreq"]}
        for when, state in (("before", before), ("after", after)):
            if state["clock"]:
                clock[when] = dict(state["clock"])
        if "before" in clock and "after" in clock:
            env["gpu_clock_during_run"] = clock
    if before["temperatures_c"] and after["temperatures_c"]:
        env["temperatures_c"] = {"before": before["temperatures_c"], "after": after["temperatures_c"]}
    grown = dict((k, max(0, after["oc_counts"][k] - n)) for k, n in before["oc_counts"].items()
                 if k in after["oc_counts"])
    if grown:
        env["oc_events"] = grown
        enabled = dict((k, v) for k, v in after["oc_enabled"].items() if k in grown)
        if enabled:
            env["oc_throttle_enabled"] = enabled
    return env


# ----------------------------------------------------------------------------------------------
# TensorRT version dispatch (same rules as deployopt.backends.tensorrt)


def version_tuple(version):
    parts = []
    for p in str(version).split(".")[:3]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def api_for_version(version):
    v = version_tuple(version)
    if v < (8, 0):
        raise RunnerError("TensorRT " + str(version) + " is too old: the runner needs 8.0 or newer")
    return "v3" if v >= (8, 5) else "v2"


def strongly_typed(version):
    """TensorRT >= 11 builds every network in its model's own types (same rule as
    deployopt.backends.trtexec.strongly_typed)."""
    return version_tuple(version) >= (11, 0)


QDQ_HINT = ("quantize it on the host with NVIDIA ModelOpt (python -m modelopt.onnx.quantization --onnx_path model.onnx"
            " --quantize_mode int8 --calibration_data calib.npy), copy that model here and time it with --dtype int8")
FP16_HINT = ("type it fp16 on the host (deployopt fp16 model.onnx -o model_fp16.onnx, or ModelOpt: python -m"
             " modelopt.onnx.autocast --onnx_path model.onnx --output_path model_fp16.onnx), copy that model here and"
             " time it with --dtype fp16")


def refuse_calibration(version, args):
    """--calib-npy / --calib-cache on TensorRT >= 11, which cannot calibrate: one line, before any build."""
    if strongly_typed(version) and args.dtype == "int8" and (args.calib_npy or args.calib_cache):
        raise RunnerError("--calib-npy/--calib-cache: TensorRT %s cannot calibrate (11.0 removed implicit INT8 and"
                          " its calibrators); %s, without them" % (version, QDQ_HINT))


def network_precision(trt, network):
    """(typed in fp16 or bf16, has Q/DQ layers) of a parsed network: what a strongly typed build runs."""
    low = [getattr(trt.DataType, n) for n in ("HALF", "BF16") if hasattr(trt.DataType, n)]
    qdq = [getattr(trt.LayerType, n) for n in ("QUANTIZE", "DEQUANTIZE") if hasattr(trt.LayerType, n)]
    typed, quantized = False, False
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        quantized = quantized or layer.type in qdq
        typed = typed or any(layer.get_output(j).dtype in low for j in range(layer.num_outputs))
    return typed, quantized


def refuse_untyped(version, args, network, trt):
    """On TensorRT >= 11 --dtype must be what the model is typed in: fp16 needs a model typed fp16
    (the runner cannot retype one), int8 one with Q/DQ nodes. An fp32 engine timed as 'fp16' would
    be a wrong answer, so it is refused in one line saying what to do."""
    typed, quantized = network_precision(trt, network)
    name = os.path.basename(args.model)
    if args.dtype == "int8" and not quantized:
        raise RunnerError("--dtype int8: TensorRT %s builds INT8 only from Q/DQ nodes in the model (11.0 removed"
                          " INT8 calibration) and %s has none; %s" % (version, name, QDQ_HINT))
    if args.dtype == "fp16" and quantized:
        raise RunnerError("--dtype fp16: %s has Q/DQ nodes, so TensorRT %s builds it INT8 as its nodes say;"
                          " time it with --dtype int8" % (name, version))
    if args.dtype == "fp16" and not typed:
        raise RunnerError("--dtype fp16: TensorRT %s has no FP16 build flag (a network runs in its model's own"
                          " types) and %s is typed fp32; %s" % (version, name, FP16_HINT))


def precision_phrase(dtype, version):
    """The dtype as `timed` says it (on TensorRT >= 11 also where the precision came from)."""
    if strongly_typed(version) and dtype == "fp16":
        return "fp16 as typed in the model (TensorRT 11 strong typing)"
    if strongly_typed(version) and dtype == "int8":
        return "int8 from the model's Q/DQ nodes (TensorRT 11 strong typing)"
    return dtype


def parse_shapes(text):
    """'x:1x3x224x224,y:1x10' -> {'x': [1, 3, 224, 224], 'y': [1, 10]}"""
    shapes = {}
    if not text:
        return shapes
    for part in text.split(","):
        name, sep, dims = part.rpartition(":")
        if not sep or not name:
            raise RunnerError("bad --shapes entry " + repr(part) + " (expected name:1x3x224x224)")
        try:
            dims = [int(d) for d in dims.split("x")]
        except ValueError:
            raise RunnerError("bad --shapes entry " + repr(part) + " (dimensions must be integers)")
        if any(d < 1 for d in dims):  # 0 timed an empty batch; -1 failed as a "data-dependent" output
            raise RunnerError("bad --shapes entry " + repr(part) + " (dimensions must be positive)")
        if name in shapes:  # the last one silently won
            raise RunnerError("bad --shapes entry " + repr(part) + ": " + repr(name) +
                              " was already given; give each input once")
        shapes[name] = dims
    return shapes


# ----------------------------------------------------------------------------------------------
# CUDA: cuda-python or pycuda


class CudaPython(object):
    name = "cuda-python"

    def __init__(self):
        try:
            from cuda.bindings import runtime as cudart
        except ImportError:
            from cuda import cudart
        self.rt = cudart

    def _ok(self, result, what):
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            name = str(getattr(err, "name", err))
            # a cuda-python newer than the board's CUDA (an unpinned pip3 install): jetson/README.md, section 1
            hint = (" (this cuda-python is for a newer CUDA than JetPack's: JetPack 5: pip3 install"
                    " 'cuda-python>=11.4,<12'; JetPack 6: pip3 install 'cuda-python>=12.2,<13'; or --cuda pycuda)"
                    if "InsufficientDriver" in name else "")
            raise RunnerError("CUDA error in " + what + ": " + name + hint)
        rest = result[1:] if isinstance(result, tuple) else ()
        return rest[0] if len(rest) == 1 else (rest or None)

    def alloc(self, nbytes):
        return int(self._ok(self.rt.cudaMalloc(max(1, nbytes)), "cudaMalloc"))

    def free(self, ptr):
        self._ok(self.rt.cudaFree(ptr), "cudaFree")

    def htod(self, ptr, array):
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._ok(self.rt.cudaMemcpy(ptr, array.ctypes.data, array.nbytes, kind), "cudaMemcpy")

    def stream(self):
        return self._ok(self.rt.cudaStreamCreate(), "cudaStreamCreate")

    def handle(self, stream):
        return int(stream)

    def event(self):
        return self._ok(self.rt.cudaEventCreate(), "cudaEventCreate")

    def record(self, event, stream):
        self._ok(self.rt.cudaEventRecord(event, stream), "cudaEventRecord")

    def elapsed_ms(self, start, end):
        self._ok(self.rt.cudaEventSynchronize(end), "cudaEventSynchronize")
        return float(self._ok(self.rt.cudaEventElapsedTime(start, end), "cudaEventElapsedTime"))

    def synchronize(self, stream):
        self._ok(self.rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def device_facts(self):
        prop = self._ok(self.rt.cudaGetDeviceProperties(0), "cudaGetDeviceProperties")
        name = prop.name.decode("utf-8", "replace") if isinstance(prop.name, bytes) else str(prop.name)
        return {
            "gpu": name.rstrip("\x00"),
            "sms": int(prop.multiProcessorCount),
            "compute_capability": "%d.%d" % (prop.major, prop.minor),
        }


class PyCuda(object):
    name = "pycuda"

    def __init__(self):
        try:
            import pycuda.autoinit  # noqa: F401
        except ImportError:
            raise
        except Exception as exc:  # pycuda's own errors (cuInit failed: a user outside `video`)
            raise RunnerError("CUDA did not start through pycuda: %s (is this user in the video group?)"
                              % (str(exc).strip() or type(exc).__name__))
        import pycuda.driver as cuda

        self.cuda = cuda
        self.allocs = {}

    def alloc(self, nbytes):
        try:
            mem = self.cuda.mem_alloc(max(1, nbytes))
        except Exception as exc:  # pycuda's MemoryError/LogicError: one line, not a traceback
            raise RunnerError("cannot allocate %d bytes on the GPU through pycuda: %s"
                              % (nbytes, str(exc).strip() or type(exc).__name__))
        self.allocs[int(mem)] = mem
        return int(mem)

    def free(self, ptr):
        mem = self.allocs.pop(ptr, None)
        if mem is not None:
            mem.free()

    def htod(self, ptr, array):
        self.cuda.memcpy_htod(ptr, array)

    def stream(self):
        return self.cuda.Stream()

    def handle(self, stream):
        return int(stream.handle)

    def event(self):
        return self.cuda.Event()

    def record(self, event, stream):
        event.record(stream)

    def elapsed_ms(self, start, end):
        end.synchronize()
        return float(end.time_since(start))

    def synchronize(self, stream):
        stream.synchronize()

    def device_facts(self):
        dev = self.cuda.Context.get_device()
        major, minor = dev.compute_capability()
        return {
            "gpu": dev.name(),
            "sms": int(dev.get_attribute(self.cuda.device_attribute.MULTIPROCESSOR_COUNT)),
            "compute_capability": "%d.%d" % (major, minor),
        }


def cuda_api(prefer=None):
    order = [CudaPython, PyCuda] if prefer != "pycuda" else [PyCuda, CudaPython]
    for cls in order:
        try:
            return cls()
        except ImportError:
            continue
    # cuda-python pinned to the board's CUDA major: an unpinned install fetches one its driver
    # cannot run (cudaErrorInsufficientDriver; jetson/README.md, section 1)
    raise RunnerError("neither cuda-python nor pycuda is importable (JetPack 4.6: sudo apt install python3-pycuda"
                      " or pip3 install pycuda; JetPack 5: pip3 install 'cuda-python>=11.4,<12';"
                      " JetPack 6: pip3 install 'cuda-python>=12.2,<13')")


# ----------------------------------------------------------------------------------------------
# build, load, time


def import_numpy():
    """numpy, or one line: JetPack's python3 has it only once python3-numpy is installed."""
    try:
        import numpy
    except ImportError:
        raise RunnerError("numpy is not importable (on JetPack: sudo apt install python3-numpy)")
    return numpy


#: The files a run writes, by option: none of them may be the model it reads.
WRITTEN = (("out", "--out"), ("save_engine", "--save-engine"), ("timing_cache", "--timing-cache"),
           ("calib_cache", "--calib-cache"))


def refuse_model_as_output(args):
    """`--out model.onnx` wrote the result JSON over the model, `--save-engine model.onnx` the
    engine, `--timing-cache model.onnx` a timing cache, each with exit status 0."""
    for dest, flag in WRITTEN:
        path = getattr(args, dest, None)
        if path and os.path.isfile(path) and os.path.samefile(path, args.model):
            raise RunnerError("cannot write %s: it is the model this runner reads; give another %s"
                              % (path, flag))


def import_trt():
    try:
        import tensorrt as trt
    except ImportError:
        raise RunnerError("tensorrt is not importable (it comes with JetPack: python3-libnvinfer)")
    return trt


def make_logger(trt):
    """A trt.ILogger writing TensorRT's warnings and errors to stderr. trt.Logger writes them to
    std::cout (the DefaultLogger in NVIDIA/TensorRT python/src/infer/pyCore.cpp, 8.2 to 10.x), in
    front of the JSON this runner prints on stdout (`runner.py model.onnx > result.json` was not
    JSON). TensorRT calls log() from noexcept C++, so it never raises (8.2 would abort)."""

    class StderrLogger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)  # pybind11 needs the explicit base init
            self.min_severity = int(trt.Logger.WARNING)

        def log(self, severity, msg):
            try:
                if int(severity) <= self.min_severity:  # INTERNAL_ERROR 0 ... VERBOSE 4
                    sys.stderr.write("[TensorRT] %s: %s\n" % (getattr(severity, "name", severity), msg))
            except Exception:  # noqa: BLE001 - nothing may escape into TensorRT
                pass

    return StderrLogger()


def load_calib_npy(npy_path):
    """--calib-npy as float32, or one RunnerError line: np.load gave a ValueError traceback for text
    or a pickle, an .npz came back as an archive (AttributeError at astype), and NaN or infinite
    values were fed to the calibrator, whose histograms they spoil."""
    import numpy as np

    try:
        data = np.load(npy_path, allow_pickle=False)
    except (OSError, IOError):
        raise  # main() says which file could not be read
    except Exception as exc:  # text, a pickle, a truncated or broken file
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RunnerError("--calib-npy %s: not a NumPy .npy array (%s)" % (npy_path, first))
    if not isinstance(data, np.ndarray):  # np.load opens an .npz archive lazily
        data.close()
        raise RunnerError("--calib-npy %s: an .npz archive; give one .npy array of inputs" % npy_path)
    if data.dtype.kind not in "biuf" or data.ndim < 1:
        raise RunnerError("--calib-npy %s: holds %s values of shape %s, not an array of numbers"
                          % (npy_path, data.dtype, list(data.shape)))
    with np.errstate(over="ignore", invalid="ignore"):  # past float32 is inf, refused below in one line
        data = data.astype(np.float32)
    if not np.isfinite(data).all():
        raise RunnerError("--calib-npy %s: holds NaN or infinite values (or values past float32)" % npy_path)
    return data


def make_npy_calibrator(trt, cuda, npy_path, cache_path, shape):
    """IInt8EntropyCalibrator2 over a .npy of N items shaped like the input (or like one batch item)."""
    import numpy as np

    data = load_calib_npy(npy_path)
    per_item = tuple(shape[1:])
    if tuple(data.shape[1:]) != per_item:
        raise RunnerError("calibration data %s has items of shape %s; the input needs %s"
                          % (npy_path, list(data.shape[1:]), list(per_item)))
    batch = shape[0]
    batches = [np.ascontiguousarray(data[i:i + batch]) for i in range(0, len(data) - batch + 1, batch)]
    if not batches:
        raise RunnerError("calibration data has fewer items (%d) than one batch (%d)" % (len(data), batch))

    class Calibrator(trt.IInt8EntropyCalibrator2):
        def __init__(self):
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.index = 0
            self.error = None  # what a callback raised (see guarded)
            self.ptr = cuda.alloc(batches[0].nbytes)

        def get_batch_size(self):
            return 1  # explicit batch: the batch is in the input shape

        def free(self):
            if self.ptr:
                cuda.free(self.ptr)
                self.ptr = 0

        def get_batch(self, names, *args):
            return guarded(self, self._next_batch)

        def _next_batch(self):
            if self.index >= len(batches):
                return None
            cuda.htod(self.ptr, batches[self.index])
            self.index += 1
            return [self.ptr]

        def read_calibration_cache(self, *args):
            return guarded(self, read_table, cache_path, False) if cache_path else None

        def write_calibration_cache(self, cache, *args):
            if cache_path:
                guarded(self, write_table, cache_path, cache)

    return Calibrator()


def guarded(calibrator, call, *args):
    """Run a calibrator callback so that nothing escapes into TensorRT. It calls them from C++
    noexcept overrides (NVIDIA/TensorRT python/src/infer/pyInt8.cpp): on 8.2 (@0a4ed147) an escaping
    exception aborts the process; from 8.4 on (@768d994b) it is printed and taken as "no batch" /
    "no table", so a CUDA error at the third batch ends calibration on two and the build succeeds.
    The first error is kept, later callbacks do nothing, and raise_calibrator_error raises it once
    the build returns."""
    if calibrator.error is not None:
        return None
    try:
        return call(*args)
    except BaseException as exc:  # noqa: BLE001 - kept, raised after the build
        calibrator.error = exc
        return None


def raise_calibrator_error(calibrator):
    """What a calibrator callback raised during the build: the runner's one-line errors as they
    are, anything else (pycuda's LogicError) as one RunnerError line."""
    error = getattr(calibrator, "error", None)
    if error is None:
        return
    if isinstance(error, (RunnerError, OSError, IOError)) or not isinstance(error, Exception):
        raise error
    first = str(error).splitlines()[0] if str(error) else ""
    raise RunnerError("INT8 calibration failed: %s: %s" % (type(error).__name__, first))


def read_table(path, required):
    """A calibration table's bytes; None when there is none (or it is empty) and it is optional."""
    try:
        if not required and not (os.path.isfile(path) and os.path.getsize(path) > 0):
            return None
        with open(path, "rb") as fh:
            return fh.read()
    except (OSError, IOError) as exc:
        raise RunnerError("cannot read --calib-cache " + path + ": " + (exc.strerror or str(exc)))


def write_table(path, cache):
    try:
        atomic_write(path, bytes(cache))
    except (OSError, IOError) as exc:
        raise RunnerError("cannot write --calib-cache " + path + ": " + (exc.strerror or str(exc)))


def atomic_write(path, data):
    """Write through a temporary file and a rename. A failure names `path`, the file the user gave,
    not the temporary one, and leaves no temporary file behind."""
    tmp = path + ".tmp%d" % os.getpid()
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except (OSError, IOError) as exc:
        try:
            os.remove(tmp)
        except (OSError, IOError):
            pass
        raise OSError(exc.errno, exc.strerror or str(exc), path)


def check_writable(path, flag, create=True):
    """A file the run will write, before any work: a file is created and removed in its folder, so a
    typo, a read-only card or a file in the way costs one line, not the build (minutes on a Nano) and
    the timed runs followed by a traceback. With `create` the folder is made now (as `deployopt bench
    -o` does); without, nothing is left behind: the probe goes to the nearest folder that exists."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        if os.path.isdir(path):
            raise RunnerError("cannot write " + flag + " " + path + ": it is a folder; give a file path")
        if not create:
            while not os.path.exists(parent) and os.path.dirname(parent) != parent:
                parent = os.path.dirname(parent)
        if os.path.exists(parent) and not os.path.isdir(parent):
            raise RunnerError("cannot write " + flag + " " + path + ": " + parent + " is a file, not a folder")
        if not os.path.isdir(parent):
            os.makedirs(parent)
        probe = os.path.join(parent, ".runner-probe-%d" % os.getpid())
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except (OSError, IOError) as exc:
        raise RunnerError("cannot write " + flag + " " + path + ": " + (exc.strerror or str(exc)))


def check_out(path):
    """--out before any work (check_writable)."""
    check_writable(path, "--out")


def warn(message):
    """One `warning:` line on stderr: something went wrong that the result does not depend on."""
    sys.stderr.write("warning: %s\n" % message)


def check_shapes(inputs, shapes):
    """--shapes may name only the model's inputs, and a static input only at its own shape: an
    entry the build would ignore still changes the engine's key (a rebuild) and the result would
    record a shape that was not timed. inputs: [(name, dims)], -1 for a dynamic dim."""
    known = dict((name, [int(d) for d in dims]) for name, dims in inputs)
    for name in sorted(shapes):
        given = "x".join(str(d) for d in shapes[name])
        if name not in known:
            raise RunnerError("--shapes %s:%s: the model has no input %r (its inputs: %s)"
                              % (name, given, name, ", ".join(sorted(known))))
        dims = known[name]
        if -1 not in dims and dims != list(shapes[name]):
            raise RunnerError("--shapes %s:%s: input %r is static, %s (drop the entry, or export the model "
                              "with that dimension dynamic)" % (name, given, name, "x".join(str(d) for d in dims)))


def build_engine(trt, args, shapes, cuda):
    version = trt.__version__
    logger = make_logger(trt)
    builder = trt.Builder(logger)
    if args.dtype == "int8" and version_tuple(version) < (10, 0) and not builder.platform_has_fast_int8:
        # Jetson Nano and TX2 (JetPack 4.x): TensorRT would build it, slower than FP16. (The query is
        # deprecated in 10.x, which runs only on GPUs that have INT8.)
        raise RunnerError("--dtype int8: this GPU has no native INT8 (platform_has_fast_int8 is False, as on "
                          "Jetson Nano and TX2), so an INT8 engine runs slower than FP16; use --dtype fp16")
    flags = 0
    if version_tuple(version) < (10, 0):
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    with open(args.model, "rb") as fh:
        data = fh.read()
    if not parser.parse(data, args.model):
        errs = [str(parser.get_error(i)).replace("\n", " ") for i in range(parser.num_errors)]
        raise RunnerError("TensorRT cannot parse " + args.model + ": " + "; ".join(errs)[:300])
    typed = strongly_typed(version)
    if typed:
        refuse_untyped(version, args, network, trt)
    config = builder.create_builder_config()
    workspace = args.workspace_mib << 20
    if version_tuple(version) >= (8, 4):
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace)
    else:
        config.max_workspace_size = workspace
    if hasattr(trt, "ProfilingVerbosity"):  # DETAILED from 8.2 on; 8.0/8.1 (JetPack 4.6.0): VERBOSE
        levels = trt.ProfilingVerbosity
        config.profiling_verbosity = levels.DETAILED if hasattr(levels, "DETAILED") else levels.VERBOSE
    if args.dtype in ("fp16", "int8") and not typed:  # 11.x: the model's own types, no flag
        config.set_flag(trt.BuilderFlag.FP16)
    profile = None
    check_shapes([(t.name, tuple(t.shape)) for t in (network.get_input(i) for i in range(network.num_inputs))], shapes)
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        if -1 in tuple(tensor.shape):
            if tensor.name not in shapes:
                raise RunnerError("input %r is dynamic: give --shapes %s:..." % (tensor.name, tensor.name))
            if profile is None:
                profile = builder.create_optimization_profile()
            s = shapes[tensor.name]
            profile.set_shape(tensor.name, s, s, s)
    if profile is not None:
        config.add_optimization_profile(profile)
    calibrator = None
    if args.dtype == "int8" and not typed:  # 11.x: INT8 from the model's Q/DQ nodes, no flag
        config.set_flag(trt.BuilderFlag.INT8)
        if args.calib_npy or args.calib_cache:
            first = network.get_input(0)
            shape = shapes.get(first.name, list(first.shape))
            if args.calib_npy:
                if first.dtype != trt.DataType.FLOAT:  # TensorRT reads the buffer as the input's type
                    raise RunnerError(
                        "--calib-npy feeds float32 data, and input %r is %s (calibrate on the host with the"
                        " deployopt tensorrt backend, then pass --calib-cache)"
                        % (first.name, getattr(first.dtype, "name", first.dtype)))
                if network.num_inputs != 1:  # one .npy feeds one input
                    raise RunnerError(
                        "--calib-npy calibrates single-input models; this one has %d inputs (calibrate"
                        " on the host with the deployopt tensorrt backend, then pass --calib-cache)"
                        % network.num_inputs
                    )
                calibrator = make_npy_calibrator(trt, cuda, args.calib_npy, args.calib_cache, shape)
            else:
                calibrator = make_npy_calibrator_from_cache(trt, args.calib_cache)
            config.int8_calibrator = calibrator
            if profile is not None:
                config.set_calibration_profile(profile)
        elif not network_precision(trt, network)[1]:
            # no scales at all: TensorRT says 'Missing scale and zero-point' per tensor and builds
            # those layers fp16/fp32, and the timing was labelled int8 (the tensorrt backend refuses)
            raise RunnerError("--dtype int8 needs --calib-npy or --calib-cache, or a model with Q/DQ nodes;"
                              " %s has none of them (without scales TensorRT builds it fp16/fp32)"
                              % os.path.basename(args.model))
    cache = None
    if args.timing_cache:  # it only saves tactic timing: trouble with it is a warning, as in the backend
        blob = b""
        try:
            if os.path.isfile(args.timing_cache):
                with open(args.timing_cache, "rb") as fh:
                    blob = fh.read()
        except (OSError, IOError) as exc:
            warn("cannot read the TensorRT timing cache %s (%s); building without it"
                 % (args.timing_cache, exc.strerror or exc))
        cache = config.create_timing_cache(blob)
        if cache is None and blob:  # TensorRT refused the blob (another version, corrupt)
            warn("TensorRT could not read the timing cache %s; building with a fresh one" % args.timing_cache)
            cache = config.create_timing_cache(b"")
        if cache is not None and not config.set_timing_cache(cache, False) and blob:
            # refused as another device's (a home folder moved to another board): a fresh one
            warn("TensorRT refused the timing cache %s (another device's?); building with a fresh one"
                 % args.timing_cache)
            cache = config.create_timing_cache(b"")
            if cache is not None and not config.set_timing_cache(cache, False):
                cache = None
    try:
        serialized = builder.build_serialized_network(network, config)
    finally:
        if calibrator is not None:  # its device buffer is only needed while building
            calibrator.free()
    raise_calibrator_error(calibrator)  # before anything is written: the engine may lack part of the data
    if serialized is None:
        raise RunnerError("TensorRT could not build an engine (see its warnings above)")
    used = config.get_timing_cache() if cache is not None else None
    if used is not None:  # None: TensorRT kept none (nothing to save)
        try:
            atomic_write(args.timing_cache, bytes(used.serialize()))
        except (OSError, IOError) as exc:  # the engine is built: only the next build's speed-up is lost
            warn("cannot write %s: %s; the TensorRT timing cache is not saved"
                 % (args.timing_cache, exc.strerror or exc))
    return bytes(serialized)


def make_npy_calibrator_from_cache(trt, cache_path):
    """INT8 from an existing calibration table only (no data on the board)."""
    if not os.path.isfile(cache_path):
        raise RunnerError("calibration cache " + cache_path + " not found (give --calib-npy to calibrate)")

    class CacheOnly(trt.IInt8EntropyCalibrator2):
        def __init__(self):
            trt.IInt8EntropyCalibrator2.__init__(self)
            self.error = None

        def get_batch_size(self):
            return 1

        def get_batch(self, names, *args):
            return None

        def read_calibration_cache(self, *args):
            return guarded(self, read_table, cache_path, True)

        def free(self):
            return None

        def write_calibration_cache(self, cache, *args):
            return None

    return CacheOnly()


def is_serialized_engine(path):
    """A serialized engine, by its name (any case, as deployopt.prebuilt.is_engine_file): loaded and
    timed as it is, never built."""
    return path.lower().endswith((".engine", ".plan", ".trt"))


#: What `timed` says of a serialized engine given as the model: its precision is the one it was
#: built with, --dtype only labels it (deployopt.prebuilt.PREBUILT, word for word: a test keeps
#: the two equal, so a result from the board and one from the host time "the same thing").
PREBUILT = "a prebuilt engine (precision as built, --dtype only a label)"


def file_digest(path):
    """sha256 of a file's bytes: files enter build keys by contents, so the same name with new
    contents (a re-exported model, new calibration data) is a different build. None when absent."""
    if not path or not os.path.isfile(path):
        return None
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def model_identity(path, sha256=None):
    """What was timed, as `deployopt bench -o` records it: the file name and the sha256 of its bytes
    (an ONNX model's, or a serialized engine's when that was given)."""
    return {"file": os.path.basename(path), "sha256": sha256 or file_digest(path)}


def _proto_fields(buf):
    """(field number, wire type, value) of one protobuf message's fields: a length-delimited value
    is a memoryview of its bytes (not copied: initializers can be large), a varint an int."""
    pos, end = 0, len(buf)

    def varint():
        nonlocal pos
        value, shift = 0, 0
        while True:
            if pos >= end or shift > 63:
                raise ValueError("truncated varint")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    while pos < end:
        tag = varint()
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            yield field, wire, varint()
        elif wire == 2:
            n = varint()
            if pos + n > end:
                raise ValueError("truncated field")
            yield field, wire, buf[pos:pos + n]
            pos += n
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise ValueError("unsupported wire type %d" % wire)


# onnx.proto's field numbers on the way to a tensor's external data: ModelProto.graph 7;
# GraphProto.node 1, initializer 5, sparse_initializer 15 (SparseTensorProto values 1, indices 2);
# NodeProto.attribute 5; AttributeProto t 5, g 6, tensors 10, graphs 11; TensorProto
# external_data 13 (StringStringEntryProto key 1, value 2), data_location 14 (EXTERNAL = 1)


def _tensor_locations(buf, out):
    entries, external = [], False
    for field, wire, value in _proto_fields(buf):
        if field == 14 and wire == 0:
            external = value == 1
        elif field == 13 and wire == 2:
            kv = dict((f, bytes(v).decode("utf-8", "replace")) for f, w, v in _proto_fields(value) if w == 2)
            if kv.get(1) == "location" and kv.get(2):
                entries.append(kv[2])
    if external:
        out.extend(entries)


def _graph_locations(buf, out):
    for field, wire, value in _proto_fields(buf):
        if wire != 2:
            continue
        if field == 5:
            _tensor_locations(value, out)
        elif field == 15:
            for f, w, v in _proto_fields(value):
                if f in (1, 2) and w == 2:
                    _tensor_locations(v, out)
        elif field == 1:
            for f, w, attr in _proto_fields(value):
                if f != 5 or w != 2:
                    continue
                for af, aw, av in _proto_fields(attr):
                    if aw == 2 and af in (5, 10):
                        _tensor_locations(av, out)
                    elif aw == 2 and af in (6, 11):
                        _graph_locations(av, out)


def external_data_locations(path):
    """The `location` of every tensor an ONNX model keeps outside the file (initializers, Constant
    and subgraph values), each once, in the file's order; read with no onnx package (JetPack has
    none) by walking protobuf's wire format. [] for a file that does not parse as ONNX: TensorRT's
    parser says what is wrong with it."""
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0 or not _mentions(fh, b"location"):
                return []  # a model with its weights inside is not read into memory a second time
            data = memoryview(fh.read())
        out = []
        for field, wire, value in _proto_fields(data):
            if field == 7 and wire == 2:
                _graph_locations(value, out)
    except (OSError, IOError, ValueError, IndexError):
        return []
    seen = []
    for loc in out:
        if loc not in seen:
            seen.append(loc)
    return seen


def _mentions(fh, needle):
    """Whether the open file holds `needle`, searched through mmap: the page cache, not a copy in
    memory (a Nano has 4 GB for everything)."""
    import mmap

    mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return mm.find(needle) >= 0
    finally:
        mm.close()


def external_data_digests(model):
    """[[location, sha256 or "absent"], ...] of the files `model` keeps its weights in (see
    external_data_locations), where TensorRT's parser finds them: beside the model."""
    folder = os.path.dirname(os.path.abspath(model))
    return [[loc, file_digest(os.path.join(folder, loc)) or "absent"] for loc in external_data_locations(model)]


def build_facts(args, trt_version, shapes):
    """Everything build_engine's result depends on. Left out on purpose: --timing-cache (it only
    saves tactic timing, and every build rewrites it, so keying on it would rebuild every time),
    --per-layer (profiling verbosity is always DETAILED) and --cuda; for fp32/fp16 the calibration
    flags, which those builds ignore. An ONNX model's external data files are keyed by contents
    when it has any (only then: other models' keys are as before)."""
    int8 = args.dtype == "int8"
    facts = {
        "recipe": BUILD_RECIPE,
        "model_sha256": file_digest(args.model),
        "dtype": args.dtype,
        "shapes": [[name, list(dims)] for name, dims in sorted(shapes.items())],
        "tensorrt": str(trt_version),
        "workspace_mib": args.workspace_mib,
        # "absent": the flag was given but its file is not there (yet), unlike not given (None)
        "calib_npy_sha256": (file_digest(args.calib_npy) or "absent") if int8 and args.calib_npy else None,
        "calib_cache_sha256": (file_digest(args.calib_cache) or "absent") if int8 and args.calib_cache else None,
    }
    external = external_data_digests(args.model)
    if external:
        facts["external_data_sha256"] = external
    return facts


def build_key(facts):
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode("utf-8")).hexdigest()


def engine_path_for(args, key):
    """Where the engine built from an ONNX model goes: --save-engine FILE, else a name in
    --engine-dir that carries the key (so different inputs never share a file)."""
    if args.save_engine:
        return args.save_engine
    stem = os.path.splitext(os.path.basename(args.model))[0]
    return os.path.join(args.engine_dir, "%s-%s-%s.engine" % (stem, args.dtype, key[:16]))


def engine_is_current(path, key, named_by_user):
    """An engine may be reused when it exists and was built from these inputs: a cached name says
    so by carrying the key; a --save-engine FILE says so in FILE.key (missing or different: no)."""
    if not os.path.isfile(path):
        return False
    if not named_by_user:
        return True
    try:
        with open(path + KEY_SUFFIX) as fh:
            return json.load(fh).get("key") == key
    except (OSError, IOError, ValueError, AttributeError):
        return False


def write_engine(path, blob, facts, named_by_user):
    """The engine, atomically; for a --save-engine FILE also FILE.key, what it was built from."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        os.makedirs(parent)
    key_file = path + KEY_SUFFIX
    if named_by_user and os.path.exists(key_file):
        # gone before the engine changes: interrupted between the two writes, the next run finds an
        # engine without a key and rebuilds, never a new engine beside the old engine's key
        os.remove(key_file)
    atomic_write(path, blob)
    if named_by_user:
        doc = dict(facts, key=build_key(facts))
        atomic_write(key_file, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def make_profiler(trt):
    class LayerProfiler(trt.IProfiler):
        def __init__(self):
            trt.IProfiler.__init__(self)
            self.times = {}
            self.order = []

        def report_layer_time(self, layer_name, ms):
            if layer_name not in self.times:
                self.times[layer_name] = []
                self.order.append(layer_name)
            self.times[layer_name].append(float(ms))

    return LayerProfiler()


def layer_table(times, order):
    """Each layer's median and IQR over the runs (µs), as deployopt's profile gives them."""
    meds = [(name, median(times[name]) * 1000.0) for name in order]
    total = sum(m for _, m in meds) or 1.0
    return [{"name": n, "time_us": m, "share": m / total, "runs": len(times[n]),
             "iqr_us": iqr(times[n]) * 1000.0 if len(times[n]) > 1 else None} for n, m in meds]


# numpy's type for each TensorRT DataType numpy can hold, by the type's name. Not TensorRT's own
# nptype: on 8.0-8.5 it reads np.bool on every call, which numpy 1.24-1.26 lacks, so every type, fp32
# included, was an AttributeError traceback after the build (NVIDIA/TensorRT#2557; JetPack 5's Python
# 3.8 gets numpy 1.24.4 from a plain `pip3 install -U numpy`). deployopt's tensorrt backend has the same.
NUMPY_TYPES = {"FLOAT": "float32", "HALF": "float16", "INT8": "int8", "INT32": "int32", "INT64": "int64",
               "UINT8": "uint8", "BOOL": "bool"}


def io_dtype(trt, name, is_input, trt_type):
    """numpy's dtype for an input or output: none for bf16, fp8, int4 or fp4 (nor a type newer than
    NUMPY_TYPES), one line naming the tensor where TensorRT's nptype raised a TypeError naming none."""
    import numpy as np
    kind = getattr(trt_type, "name", None) or str(trt_type).rsplit(".", 1)[-1]
    if kind in NUMPY_TYPES:
        return np.dtype(NUMPY_TYPES[kind])
    raise RunnerError("%s %r is %s, which numpy has no type for: the runner cannot allocate or fill it; "
                      "give the model fp32 or fp16 inputs and outputs (a Cast at its edges), or time it "
                      "with trtexec on the board" % ("input" if is_input else "output", name, kind))


def refused_shape(name, dims):
    """set_input_shape (8.5+) and set_binding_shape (8.2) return False for a shape the engine cannot
    take (NVIDIA/TensorRT python/src/infer/pyCore.cpp binds the C++ bool-returning setters; TensorRT
    logs which dimension is out of range). Ignored, the outputs kept their -1 dimensions and the
    runner blamed an NMS-like output."""
    return RunnerError("--shapes %s:%s: the engine does not take this shape (outside the optimization profile "
                       "it was built with; TensorRT's error above says which dimension)"
                       % (name, "x".join(str(d) for d in dims)))


#: Random values of an integer input wider than 8 bits (deployopt.fidelity.RANDOM_INT_RANGE; a test
#: keeps the two equal): indices, counts, sizes, which a table of 16 entries takes.
RANDOM_INT_RANGE = (0, 15)


def random_input(rng, shape, dtype):
    """Timing inputs as the host's backends make them (deployopt.fidelity.random_values): standard
    normals for a float input, a uint8/int8 input's whole range (pixels a model with its
    preprocessing inside casts itself), RANDOM_INT_RANGE for wider integers, bools both ways. Zeros,
    which integer inputs got here, timed a board on a blank picture while the host timed pixels."""
    import numpy as np

    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        lo, hi = 0, 1
    elif dtype.itemsize == 1:
        lo, hi = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    else:
        lo, hi = RANDOM_INT_RANGE
    return rng.randint(lo, hi + 1, size=shape).astype(dtype)


def run(args, trt=None, cuda=None):
    """Build (or load) args.model, time it: the result document. `trt` and `cuda` (the tensorrt
    module and a CUDA binding) are given by --batch-dir, which sets them up once for every model."""
    np = import_numpy()

    if trt is None:
        trt = import_trt()
    version = trt.__version__
    api = api_for_version(version)
    if not is_serialized_engine(args.model):
        refuse_calibration(version, args)  # before anything is hashed or built
    if cuda is None:
        cuda = cuda_api(args.cuda)
    shapes = parse_shapes(args.shapes)
    key = None
    built = None
    engine_file = args.model  # a serialized engine is loaded as is
    model_sha256 = None
    if not is_serialized_engine(args.model):
        facts = build_facts(args, version, shapes)
        model_sha256 = facts["model_sha256"]
        key = build_key(facts)
        engine_file = engine_path_for(args, key)
        named = bool(args.save_engine)
        if args.rebuild or not engine_is_current(engine_file, key, named):
            # before the build: a read-only card or a file in the way costs one line, not a build
            check_writable(engine_file, "--save-engine" if named else "--engine-dir", create=False)
            t0 = time.time()
            blob = build_engine(trt, args, shapes, cuda)
            if facts["calib_cache_sha256"] is not None:
                # The INT8 calibrator may just have written --calib-cache. The engine is keyed on the
                # table as it is now, as if it had been there before the build: an engine calibrated
                # from the data that wrote this table is the one a build reading the table makes, so
                # the next identical invocation (which finds the table) reuses it, and a table
                # changed or deleted afterwards no longer matches it.
                facts["calib_cache_sha256"] = file_digest(args.calib_cache) or "absent"
                key = build_key(facts)
                engine_file = engine_path_for(args, key)
            write_engine(engine_file, blob, facts, named)
            built = time.time() - t0
            sys.stderr.write("built engine %s in %.1f s\n" % (engine_file, built))
        else:
            sys.stderr.write("reusing engine %s: built earlier from the same model, dtype, shapes, "
                             "workspace, TensorRT and calibration (--rebuild builds it again)\n" % engine_file)
    logger = make_logger(trt)
    runtime = trt.Runtime(logger)
    with open(engine_file, "rb") as fh:
        engine = runtime.deserialize_cuda_engine(fh.read())
    if engine is None:
        raise RunnerError("could not deserialize " + engine_file + " (built by another TensorRT version?)")
    context = engine.create_execution_context()
    if context is None:  # pybind returns nullptr as None, e.g. activation memory too large (TensorRT#3554)
        raise RunnerError("TensorRT could not create an execution context for " + engine_file +
                          " (out of GPU memory? TensorRT's error above says why)")

    ios = []  # (name, is_input, shape, dtype)
    if api == "v3":
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT and -1 in tuple(engine.get_tensor_shape(name)):
                if name not in shapes:
                    raise RunnerError("input %r is dynamic: give --shapes" % name)
                if not context.set_input_shape(name, shapes[name]):
                    raise refused_shape(name, shapes[name])
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            is_in = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            ios.append((name, is_in, tuple(context.get_tensor_shape(name)),
                        io_dtype(trt, name, is_in, engine.get_tensor_dtype(name))))
    else:
        # 8.2-8.4 count every optimization profile's bindings: with K profiles, profile p's n are
        # p*n .. p*n+n-1, named "x [profile p]" for p > 0 (NvInferRuntime.h, getNbBindings /
        # getBindingName). The first context runs profile 0: only its bindings are set and listed.
        n_bindings = engine.num_bindings // max(1, engine.num_optimization_profiles)
        for i in range(n_bindings):
            name = engine.get_binding_name(i)
            if engine.binding_is_input(i) and -1 in tuple(engine.get_binding_shape(i)):
                if name not in shapes:
                    raise RunnerError("input %r is dynamic: give --shapes" % name)
                if not context.set_binding_shape(i, shapes[name]):
                    raise refused_shape(name, shapes[name])
        for i in range(n_bindings):
            name, is_in = engine.get_binding_name(i), engine.binding_is_input(i)
            ios.append((name, is_in, tuple(context.get_binding_shape(i)),
                        io_dtype(trt, name, is_in, engine.get_binding_dtype(i))))

    check_shapes([(name, shape) for name, is_in, shape, _ in ios if is_in], shapes)
    for name, is_in, shape, _ in ios:
        if not is_in and -1 in shape:  # NMS-like: its size depends on the data, nothing to allocate
            raise RunnerError("output %r has a data-dependent shape %s (an NMS-like op): the runner cannot "
                              "allocate it; time the model with trtexec on the board" % (name, list(shape)))
    rng = np.random.RandomState(0)
    ptrs = []
    for name, is_in, shape, dtype in ios:
        nbytes = int(np.prod(shape)) * dtype.itemsize
        ptr = cuda.alloc(nbytes)
        ptrs.append(ptr)
        if is_in:
            host = random_input(rng, shape, dtype)
            cuda.htod(ptr, np.ascontiguousarray(host))
        if api == "v3":
            context.set_tensor_address(name, ptr)
    # enqueueV2 reads its list by binding index, every profile's: profile 0's pointers, 0 elsewhere
    bindings = ptrs + [0] * (engine.num_bindings - len(ptrs)) if api == "v2" else []
    stream = cuda.stream()
    handle = cuda.handle(stream)

    def execute():
        ok = context.execute_async_v3(handle) if api == "v3" else context.execute_async_v2(bindings, handle)
        if not ok:
            raise RunnerError("TensorRT execution failed (execute_async returned False)")

    try:
        for _ in range(args.warmup):
            execute()
        cuda.synchronize(stream)
        start, end = cuda.event(), cuda.event()
        samples = []
        before = board_state()  # after the warm-up, right before the timed loop
        for _ in range(args.runs):
            cuda.record(start, stream)
            execute()
            cuda.record(end, stream)
            samples.append(cuda.elapsed_ms(start, end) * 1000.0)
        after = board_state()  # at once: the GPU has just finished the last timed pass
        measured_at = measured_now()
        layers = None
        if args.per_layer:
            profiler = make_profiler(trt)
            context.profiler = profiler
            for _ in range(args.runs):
                if api == "v2":  # 8.2-8.4 report to IProfiler only from synchronous execution
                    context.execute_v2(bindings)
                else:
                    execute()
                    cuda.synchronize(stream)
            layers = layer_table(profiler.times, profiler.order)
    finally:
        for ptr in ptrs:
            cuda.free(ptr)

    env = board_environment()
    env.update(during_run(before, after))
    env.update({"tensorrt": version, "api": api, "cuda_binding": cuda.name, "engine": engine_file})
    # the shape each input ran at (batch included): deployopt compare flags a pair timed at others
    env["input_shapes"] = dict((name, [int(d) for d in shape]) for name, is_in, shape, _ in ios if is_in)
    env["engine_built_now"] = built is not None  # False: reused, or a serialized engine given as the model
    if key is not None:
        env["engine_key"] = key
        env["dtype"] = args.dtype  # built here (a serialized engine's dtype is not known, only labelled)
    else:  # deployopt.prebuilt.mark_prebuilt's keys
        env["prebuilt_engine"] = True
        env["dtype_label"] = args.dtype
    if built is not None:
        env["engine_build_s"] = round(built, 1)
    try:
        env.update(cuda.device_facts())
    except Exception:  # noqa: BLE001 - facts are optional
        pass
    what = "(%s)" % precision_phrase(args.dtype, version) if key is not None else "of " + PREBUILT
    timed = ("one forward pass %s, CUDA events around execute_async_%s on one stream, inputs on the GPU "
             "(no copies timed), no CUDA graph" % (what, api))
    result = summarize(samples, args.warmup, timed, env, model=model_identity(args.model, model_sha256),
                       measured_at=measured_at)
    if layers is not None:
        result["layers"] = layers
    return result


# ----------------------------------------------------------------------------------------------
# --repeat N: replicates, as `deployopt bench --repeat N` writes them
#
# A replicate is worth its place in compare's test on replicate medians only as a run of its own:
# a new process that deserializes the engine and makes its CUDA context anew (bench --remote
# --repeat starts the runner N times), not one process's samples split in N. Each replicate here is
# a child forked before this process loads TensorRT or CUDA (it never does), so each pays both as a
# runner started anew would; the first builds the engine (unless cached), the others reuse it. The
# result is the document Timing.from_replicates(...).to_json() is on the host: every sample in
# order, the split in "replicates", the first replicate's environment unless a later one's GPU
# clock was held down (held_down), a replicate timed in another setup refused (setup_differences).


def _count(value):
    """A JSON number that is a count, else None (deployopt.clocks._count: bool, negatives, NaN and
    infinities are not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return int(value)


def recorded_lock(env):
    """Whether the GPU clock was locked, as the host reads a result (deployopt.clocks.clocks_locked):
    the recorded clocks_locked, else clocks_locked's rule."""
    locked = env.get("clocks_locked")
    return locked if isinstance(locked, bool) else clocks_locked(env)


def held_down(env):
    """Whether this run's record of its timed loop (during_run) says the GPU clock was held down:
    deployopt.clocks.jetson_held_down's rule, which compare reads (a test keeps the two equal): an
    over-current counter that grew with its throttling on, a locked clock read below its lock right
    after the warm-up or the loop, a devfreq ceiling lowered during the loop."""
    oc = env.get("oc_events")
    enabled = env.get("oc_throttle_enabled")
    enabled = enabled if isinstance(enabled, dict) else {}
    if isinstance(oc, dict) and any(_count(v) and enabled.get(k) is not False for k, v in oc.items()):
        return True
    clock = env.get("gpu_clock_during_run")
    if not isinstance(clock, dict):
        return False
    before, after = clock.get("before"), clock.get("after")
    if not isinstance(before, dict) or not isinstance(after, dict):
        return False
    ceiling, floor = _count(before.get("max_hz")), _count(before.get("min_hz"))
    locked = floor == ceiling if floor is not None and ceiling is not None else recorded_lock(env)
    if ceiling and locked:
        for reading in (before, after):
            hz = _count(reading.get("cur_hz"))
            if hz is not None and hz < ceiling:
                return True
    lowered = _count(after.get("max_hz"))
    return bool(ceiling and lowered is not None and lowered < ceiling)


#: The facts of deployopt.regression.LIKE_FOR_LIKE this runner records (a test keeps them so): a
#: replicate that differs from the first by one was timed in another setup.
SETUP_FACTS = (
    ("gpu", "GPU"),
    ("board", "board"),
    ("sms", "SMs"),
    ("nvpmodel", "power mode"),
    ("clocks_locked", "GPU clock"),
    ("tensorrt", "TensorRT"),
    ("dtype", "dtype"),
    ("input_shapes", "input shapes"),
)


def _shown(key, value):
    """A fact as deployopt.regression's setup line shows it."""
    if key == "clocks_locked":
        return "locked" if value else "not locked"
    if key == "input_shapes" and isinstance(value, dict):
        return ",".join("%s:%s" % (name, "x".join(str(d) for d in dims) if isinstance(dims, list) else dims)
                        for name, dims in value.items())
    return str(value)


def setup_differences(first, part):
    """What differs between two replicates' setups, in deployopt.regression.setup_differences' words
    ('power mode MAXN -> 15W': an arrow any board's terminal prints): the SETUP_FACTS both
    recorded, and what was timed."""
    out = []
    for key, word in SETUP_FACTS:
        a, b = first["environment"].get(key), part["environment"].get(key)
        if key == "clocks_locked":
            a, b = recorded_lock(first["environment"]), recorded_lock(part["environment"])
        if a is not None and b is not None and a != b:
            out.append("%s %s -> %s" % (word, _shown(key, a), _shown(key, b)))
    if first["timed"] != part["timed"]:
        out.append("what was timed %r -> %r" % (first["timed"], part["timed"]))
    return out


def check_replicate_setup(first, part, number, repeat):
    """A replicate timed in another setup than the first (a clock unlocked, a power mode changed
    between the processes) is one line, nothing written, as `bench --repeat` refuses it: the result
    keeps one environment, which would read as the first's setup throughout."""
    diffs = setup_differences(first, part)
    if diffs:
        raise RunnerError("--repeat %d: replicate %d was timed in another setup than replicate 1 (%s): nothing "
                          "written (the replicates of one result must share a setup); time again once the setup "
                          "holds" % (repeat, number, "; ".join(diffs)))


def from_replicates(parts):
    """One result of the replicates `parts` (run's documents, in order), as deployopt.timing's
    Timing.from_replicates(...).to_json() writes it: samples concatenated, median and IQR over all of
    them, the 95 % CI on the replicates' medians (replicate_median_ci), "replicates" with each one's
    runs, median, IQR and measured_at; what was timed, the model and the warm-up the first's;
    measured_at the latest."""
    first = parts[0]
    samples = [s for part in parts for s in part["samples_us"]]
    env = next((part["environment"] for part in parts if held_down(part["environment"])), first["environment"])
    times = [part["measured_at"] for part in parts if part.get("measured_at")]
    out = summarize(samples, first["warmup"], first["timed"], env, model=first.get("model"),
                    measured_at=max(times) if times else None)
    ci = replicate_median_ci([median(part["samples_us"]) for part in parts])
    out["ci95_us"] = list(ci) if ci is not None and out["iqr_us"] is not None else None
    out["replicates"] = []
    for part in parts:
        entry = {"runs": part["runs"], "median_us": part["median_us"], "iqr_us": part["iqr_us"]}
        if part.get("measured_at"):
            entry["measured_at"] = part["measured_at"]
        out["replicates"].append(entry)
    return out


def in_own_process(call, args):
    """call(args) in a child process of its own (os.fork; this process has loaded neither TensorRT
    nor CUDA): its return value, sent back as JSON over a pipe. Its RunnerError or OSError comes
    back as a RunnerError of its words; a child that dies (a signal: the OOM killer's KILL) or exits
    without an answer is a RunnerError saying so."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        code = 0
        try:
            os.close(read_end)
            try:
                answer = {"result": call(args)}
            except RunnerError as exc:
                answer = {"error": str(exc)}
            except (OSError, IOError) as exc:
                answer = {"error": io_error_text(exc)}
            with os.fdopen(write_end, "w") as fh:
                json.dump(answer, fh)
        except KeyboardInterrupt:  # Ctrl-C reaches the whole foreground group: the parent says it
            code = 130
        except BaseException:  # noqa: BLE001 - anything else: its traceback, as a runner's own
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as fh:
        text = fh.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise RunnerError("its process died of signal %d%s" % (
            os.WTERMSIG(status), " (SIGKILL: the kernel's OOM killer?)" if os.WTERMSIG(status) == 9 else ""))
    try:
        answer = json.loads(text)
    except ValueError:
        raise RunnerError("its process exited %d without a result (its error is above)" % os.WEXITSTATUS(status))
    if "error" in answer:
        raise RunnerError(answer["error"])
    return answer["result"]


def run_replicates(args):
    """--repeat N: the model timed N times, each a run() in a process of its own, one after the
    other; one result of N replicates (from_replicates). A replicate that fails is one line naming
    it; one timed in another setup than the first is refused (check_replicate_setup)."""
    parts = []
    for number in range(1, args.repeat + 1):
        try:
            part = in_own_process(run, args)
        except RunnerError as exc:
            raise RunnerError("replicate %d of %d: %s" % (number, args.repeat, exc))
        if parts:
            check_replicate_setup(parts[0], part, number, args.repeat)
        parts.append(part)
    return from_replicates(parts)


# ----------------------------------------------------------------------------------------------
# command line


def build_parser():
    p = argparse.ArgumentParser(
        prog="runner.py",
        description="Build or load a TensorRT engine on this Jetson, time it, print deployopt bench JSON.",
    )
    p.add_argument("model", nargs="?", help="model.onnx (built, cached in --engine-dir) or a serialized .engine/.plan")
    p.add_argument("--dtype", choices=("fp32", "fp16", "int8"), default="fp16",
                   help="build precision (default fp16)")
    p.add_argument("--runs", type=int, default=100, help="timed forward passes (default 100)")
    p.add_argument("--warmup", type=int, default=20, help="untimed forward passes first (default 20)")
    p.add_argument("--shapes", default="", help="shapes of dynamic inputs, e.g. x:1x3x224x224,y:1x10")
    p.add_argument("--workspace-mib", type=int, default=1024, help="builder workspace (default 1024 MiB)")
    p.add_argument("--engine-dir", default="engines", help="where built engines are cached (default engines/)")
    p.add_argument("--save-engine", default=None,
                   help="engine file to write instead of the cached name (with FILE.key; an existing FILE "
                   "is reused only when FILE.key matches this build)")
    p.add_argument("--rebuild", action="store_true", help="build even if a matching engine exists")
    p.add_argument("--timing-cache", default=None, help="TensorRT timing cache file (read and updated)")
    p.add_argument("--calib-npy", default=None, help="INT8: .npy of calibration inputs (N x input item shape)")
    p.add_argument("--calib-cache", default=None, help="INT8: calibration table to read/write")
    p.add_argument("--per-layer", action="store_true", help="also report per-layer times (IProfiler)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="time the model N times, each in a process of its own, as one result of N replicates "
                   "(as `deployopt bench --repeat N` writes it; default 1)")
    p.add_argument("--cuda", choices=("cuda-python", "pycuda"), default=None, help="CUDA binding to prefer")
    p.add_argument("--out", default=None, help="write the JSON here as well as to stdout")
    p.add_argument("--env-only", action="store_true", help="print the board environment only (no TensorRT)")
    p.add_argument("--batch-dir", default=None, metavar="DIR",
                   help="instead of one model: build and time every DIR/*.onnx (sorted) in this one process with "
                   "the same flags, each result written as DIR/<stem>.json; stops at the first model that fails")
    return p


def check_counts(args):
    """--runs, --warmup and --workspace-mib within the host's bounds (deployopt.timing.MAX_RUNS): a
    typo would otherwise run until Ctrl-C."""
    if not 1 <= args.runs <= MAX_RUNS:
        raise RunnerError("--runs {}: must be between 1 and {:,}".format(args.runs, MAX_RUNS))
    if not 0 <= args.warmup <= MAX_RUNS:
        raise RunnerError("--warmup {}: must be between 0 and {:,}".format(args.warmup, MAX_RUNS))
    if not 1 <= args.workspace_mib <= MAX_WORKSPACE_MIB:
        raise RunnerError("--workspace-mib {}: must be between 1 and {:,}".format(
            args.workspace_mib, MAX_WORKSPACE_MIB))
    if not 1 <= args.repeat <= MAX_REPEAT:
        raise RunnerError("--repeat {}: must be between 1 and {}".format(args.repeat, MAX_REPEAT))
    if args.repeat > 1 and args.per_layer:
        raise RunnerError("--repeat times the model end to end, as `deployopt bench --repeat` does: --per-layer "
                          "cannot go with it (profile one run)")


def io_error_text(exc):
    """An OSError (a read-only --engine-dir, a full card) as the one line printed after `error: `."""
    where = " " + str(exc.filename) if getattr(exc, "filename", None) else ""
    return "cannot read or write%s: %s" % (where, exc.strerror or exc)


def note_few_runs(args):
    """On the board, not when compare refuses the copy: too few runs to compare."""
    if args.runs < COMPARE_MIN_RUNS:
        sys.stderr.write("note: %d run%s: `deployopt compare` needs at least %d per side (at its default "
                         "--alpha 0.01) to judge a difference between two results this short; use --runs %d or more to "
                         "compare this\n"
                         % (args.runs, "" if args.runs == 1 else "s", COMPARE_MIN_RUNS, COMPARE_MIN_RUNS))


# ----------------------------------------------------------------------------------------------
# --batch-dir: many models, one process
#
# deployopt's per-layer sweep on a board (`optimize --remote`) times about a hundred one-conv
# models. A runner process per model pays python3's start, `import tensorrt` and the CUDA context
# each time (seconds on a Nano), plus an ssh and two scp round trips; a batch pays them once.

#: What --batch-dir cannot go with: a file of one model's (the model itself, --out, --save-engine),
#: calibration files (one model's input), --env-only, and --per-layer (the sweep needs none).
BATCH_REFUSED = (
    ("model", "a model argument"),
    ("out", "--out"),
    ("save_engine", "--save-engine"),
    ("per_layer", "--per-layer"),
    ("env_only", "--env-only"),
    ("calib_npy", "--calib-npy"),
    ("calib_cache", "--calib-cache"),
)


def batch_result_path(model):
    """DIR/<stem>.json for DIR/<stem>.onnx."""
    return os.path.splitext(model)[0] + ".json"


def run_batch(args):
    """Every DIR/*.onnx, sorted by name, built and timed as the single-model mode would with the
    same flags, TensorRT imported and the CUDA binding set up once; each result document written
    atomically as DIR/<stem>.json, and its path printed on stdout as it is written. The first model
    that fails stops the batch with a RunnerError naming it; the results written before it stay.
    Results an earlier batch left for these models are removed first, so every DIR/<stem>.json
    there afterwards is this run's."""
    refused = [flag for dest, flag in BATCH_REFUSED if getattr(args, dest)]
    if args.repeat != 1:  # its default, 1, is no replicate to refuse
        refused.append("--repeat")
    if refused:
        raise RunnerError("--batch-dir times every model in its folder, each with its own result: "
                          "%s cannot go with it" % refused[0])
    check_counts(args)
    folder = args.batch_dir
    if not os.path.isdir(folder):
        raise RunnerError("--batch-dir %s: not a folder" % folder)
    models = sorted(p for p in glob.glob(os.path.join(folder, "*.onnx")) if os.path.isfile(p))
    if not models:
        raise RunnerError("--batch-dir %s: holds no .onnx model" % folder)
    for model in models:
        stale = batch_result_path(model)
        if os.path.isfile(stale):
            os.remove(stale)
    check_writable(batch_result_path(models[0]), "--batch-dir", create=False)
    trt = import_trt()
    api_for_version(trt.__version__)  # too old: one line before any model
    cuda = cuda_api(args.cuda)
    for model in models:
        one = argparse.Namespace(**vars(args))
        one.model = model
        out = batch_result_path(model)
        try:
            result = run(one, trt, cuda)
            atomic_write(out, (json.dumps(result, indent=2) + "\n").encode("utf-8"))
        except RunnerError as exc:
            raise RunnerError("%s: %s" % (os.path.basename(model), exc))
        except (OSError, IOError) as exc:
            raise RunnerError("%s: %s" % (os.path.basename(model), io_error_text(exc)))
        sys.stdout.write(out + "\n")
        sys.stdout.flush()


def main_batch(args):
    """main() for --batch-dir: the same one-line errors and exit status 2."""
    try:
        run_batch(args)
    except RunnerError as exc:
        sys.stderr.write("error: %s\n" % exc)
        return 2
    except (OSError, IOError) as exc:
        sys.stderr.write("error: %s\n" % io_error_text(exc))
        return 2
    note_few_runs(args)
    return 0


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.batch_dir is not None:
        return main_batch(args)
    try:
        if args.out:
            check_out(args.out)
        if args.env_only:
            result = board_environment()
        else:
            check_counts(args)
            if not args.model:
                raise RunnerError("give a model (.onnx or .engine), or --env-only")
            if not os.path.isfile(args.model):
                raise RunnerError("model not found: " + args.model)
            refuse_model_as_output(args)
            parse_shapes(args.shapes)  # a bad entry is one line before numpy, TensorRT or CUDA
            building = not is_serialized_engine(args.model)
            if building and args.dtype == "int8" and args.calib_npy and not os.path.isfile(args.calib_npy):
                raise RunnerError("calibration data not found: " + args.calib_npy)
            result = run(args) if args.repeat == 1 else run_replicates(args)
        text = json.dumps(result, indent=2)
        if args.out:
            atomic_write(args.out, (text + "\n").encode("utf-8"))
    except RunnerError as exc:
        sys.stderr.write("error: %s\n" % exc)
        return 2
    except (OSError, IOError) as exc:  # a read-only --engine-dir, a full card: one line, not a traceback
        sys.stderr.write("error: %s\n" % io_error_text(exc))
        return 2
    sys.stdout.write(text + "\n")
    if not args.env_only:
        note_few_runs(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
