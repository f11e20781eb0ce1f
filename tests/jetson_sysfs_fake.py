"""Fake /sys and /proc trees of a Jetson Nano and a Jetson Orin, for what jetson/runner.py reads
right before and right after its timed loop (GPU devfreq clock, thermal zones, over-current
counters). The layout follows the sources runner.py cites (Linux's devfreq and thermal sysfs ABI,
NVIDIA's soctherm_oc hwmon driver on Orin, the soctherm_edp interrupt on the Nano); the numbers
are made up but in range (the clocks are the boards' maxima: Nano 921.6 MHz, AGX Orin 1300.5 MHz,
as `jetson_clocks --show` prints it in test_jetson_runner.py). No Jetson was used. Writing a tree
again over the same root changes only the values: the reading after the loop."""

from __future__ import annotations

from pathlib import Path

NANO_MAX_HZ = 921_600_000
NANO_MIN_HZ = 76_800_000
ORIN_MAX_HZ = 1_300_500_000
ORIN_MIN_HZ = 306_000_000


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _zones(root: Path, temps: dict[str, float]) -> None:
    for i, (kind, celsius) in enumerate(temps.items()):
        _write(root, f"sys/class/thermal/thermal_zone{i}/type", kind)
        _write(root, f"sys/class/thermal/thermal_zone{i}/temp", str(round(celsius * 1000)))


def nano(
    root: Path,
    *,
    cur_hz: int = NANO_MAX_HZ,
    min_hz: int = NANO_MAX_HZ,
    max_hz: int = NANO_MAX_HZ,
    gpu_c: float = 41.5,
    edp_interrupts: int = 0,
) -> Path:
    """A Jetson Nano (JetPack 4.6): devfreq 57000000.gpu, locked by default (min = max, what
    jetson_clocks sets), six thermal zones, and the soctherm over-current interrupt's line in
    /proc/interrupts (counted on CPU0), no soctherm_oc hwmon."""
    dev = "sys/class/devfreq/57000000.gpu"
    _write(root, f"{dev}/device/of_node/name", "gpu")
    for key, hz in (("cur_freq", cur_hz), ("min_freq", min_hz), ("max_freq", max_hz)):
        _write(root, f"{dev}/{key}", str(hz))
    _write(root, f"{dev}/governor", "nvhost_podgov")
    temps = {"AO-therm": 40.5, "CPU-therm": gpu_c - 1.0, "GPU-therm": gpu_c, "PLL-therm": 38.0}
    _zones(root, {**temps, "PMIC-Die": 100.0, "thermal-fan-est": gpu_c - 0.5})
    _write(
        root,
        "proc/interrupts",
        "           CPU0       CPU1       CPU2       CPU3\n"
        " 84:          0          0          0          0     GICv2  80 Level     soctherm_thermal\n"
        f" 85: {edp_interrupts:10d}          0          0          0     GICv2  81 Level     soctherm_edp\n"
        "IPI0:      1234       2345       3456       4567       Rescheduling interrupts",
    )
    return root


def orin(
    root: Path,
    *,
    jetpack: int = 5,
    cur_hz: int = ORIN_MAX_HZ,
    min_hz: int = ORIN_MAX_HZ,
    max_hz: int = ORIN_MAX_HZ,
    gpu_c: float = 52.0,
    oc_events: tuple[int, int, int] = (0, 0, 0),
    throttle_enabled: tuple[int, int, int] = (1, 1, 1),
) -> Path:
    """A Jetson AGX Orin: devfreq 17000000.ga10b (JetPack 5) or 17000000.gpu (JetPack 6), with
    another device's devfreq sorted before it; thermal zones; an INA3221 hwmon and the soctherm_oc
    hwmon with oc1..oc3 event counters and throttle switches."""
    name = "17000000.ga10b" if jetpack == 5 else "17000000.gpu"
    _write(root, "sys/class/devfreq/15340000.vic/device/of_node/name", "vic")
    _write(root, "sys/class/devfreq/15340000.vic/cur_freq", "115200000")
    dev = f"sys/class/devfreq/{name}"
    _write(root, f"{dev}/device/of_node/name", "ga10b" if jetpack == 5 else "gpu")
    for key, hz in (("cur_freq", cur_hz), ("min_freq", min_hz), ("max_freq", max_hz)):
        _write(root, f"{dev}/{key}", str(hz))
    _zones(
        root,
        {
            "cpu-thermal": gpu_c - 2.0,
            "gpu-thermal": gpu_c,
            "cv0-thermal": gpu_c - 3.0,
            "soc0-thermal": gpu_c - 1.5,
            "tj-thermal": gpu_c + 0.5,
        },
    )
    _write(root, "sys/class/hwmon/hwmon0/name", "ina3221")
    _write(root, "sys/class/hwmon/hwmon0/curr1_input", "1856")
    _write(root, "sys/class/hwmon/hwmon1/name", "soctherm_oc")
    for i, (events, enabled) in enumerate(zip(oc_events, throttle_enabled), start=1):
        _write(root, f"sys/class/hwmon/hwmon1/oc{i}_event_cnt", str(events))
        _write(root, f"sys/class/hwmon/hwmon1/oc{i}_throt_en", str(enabled))
    _write(
        root,
        "proc/interrupts",
        "           CPU0       CPU1\n 13:       4821       3310     GICv3  27 Level     arch_timer",
    )
    return root
