"""Fake /sys and /proc trees of a Jetson Nano and a Jetson Orin, for what jetson/runner.py reads
right before and right after its timed loop (GPU devfreq clock, thermal zones, over-current
counters). The layout follows the sources runner.py cites (Linux's devfreq and thermal sysfs ABI,
NVIDIA's soctherm_oc hwmon driver on Orin, the soctherm_edp interrupt on the Nano); the numbers
are made up but in range (the clocks are the boards' maxima: Nano 921.6 MHz, AGX Orin 1300.5 MHz,
as `jetson_clocks --show` prints it in test_jetson_runner.py). No Jetson was used. Writing a tree
again over the same root changes only the values: the reading after the loop.

Each tree also says which module it is, as `runner.py --env-only` reads it: the device tree's model
and compatible (/proc/device-tree) and /proc/meminfo's MemTotal, from BOARDS: one board per Jetson
target deployopt ships, and a few it does not. BOARDS says, per string, whether it was seen in a
public source (where) or assumed (from what); the MemTotal values are made up but in range (less
than the module's memory, more than half of it) unless a source is named."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class Board(NamedTuple):
    """What a Jetson's device tree and /proc/meminfo say about it, and where each string is from."""

    model: str
    compatible: tuple[str, ...]
    mem_total_kib: int | None
    provenance: str


UPSTREAM_P3767_0000 = (
    "upstream Linux arch/arm64/boot/dts/nvidia/tegra234-p3768-0000+p3767-0000.dts (a kernel patch in "
    'the public code index): compatible "nvidia,p3768-0000+p3767-0000", "nvidia,p3767-0000", '
    '"nvidia,tegra234"; model "NVIDIA Jetson Orin NX Engineering Reference Developer Kit"'
)
GPIO = "NVIDIA Jetson.GPIO's compats lists (lib/python/Jetson/GPIO/gpio_pin_data.py)"

#: Board -> (strings, provenance). Keys that are built-in targets are the boards that target is.
BOARDS: dict[str, Board] = {
    "nano": Board(
        "NVIDIA Jetson Nano Developer Kit",
        ("nvidia,p3449-0000-b00+p3448-0000-b00", "nvidia,jetson-nano", "nvidia,tegra210"),
        4_059_504,
        "model seen: rbonghi/jetson_stats#48 (JetPack 4.3) and #586; MemTotal seen: goodrobots/maverick#867 "
        "(a Nano, 4059504 kB); compatible assumed: the <carrier>+<module> form of L4T's DTs with "
        "'nvidia,jetson-nano' from " + GPIO,
    ),
    "tx2": Board(
        "quill",
        ("nvidia,p2771-0000", "nvidia,tegra186"),
        7_995_000,
        "model assumed from adafruit/Adafruit_Python_PlatformDetect#36 (TX2 models read 'quill', 'storm', "
        "'lightning'); compatible assumed: 'nvidia,p2771-0000' (the TX2 developer kit) from " + GPIO,
    ),
    "xavier-nx": Board(
        "NVIDIA Jetson Xavier NX Developer Kit",
        ("nvidia,p3509-0000-a00+p3668-0000-a01", "nvidia,p3509-0000-a00+p3668-0001-a01", "nvidia,tegra194"),
        7_774_000,
        "compatible seen: adafruit/Adafruit_Python_PlatformDetect#168 (`cat /proc/device-tree/compatible` "
        "on a ConnectTech Boson carrier, NULs not shown); model assumed",
    ),
    "agx-xavier": Board(
        "Jetson-AGX",
        ("nvidia,p2972-0000", "nvidia,tegra194"),
        32_488_000,
        "model seen: adafruit/Adafruit_Python_PlatformDetect#37 (L4T 32.2's model is 'Jetson-AGX'); "
        "compatible assumed: 'nvidia,p2972-0000' (the AGX Xavier developer kit) from " + GPIO,
    ),
    "orin-nano-4gb": Board(
        "NVIDIA Orin Nano Developer Kit",
        ("nvidia,p3768-0000+p3767-0004", "nvidia,p3767-0004", "nvidia,tegra234"),
        3_550_000,
        "assumed: the form of " + UPSTREAM_P3767_0000 + ", with SKU 0004 as " + GPIO + " lists it",
    ),
    "orin-nano-8gb": Board(
        "NVIDIA Orin Nano Developer Kit",
        ("nvidia,p3768-0000+p3767-0003", "nvidia,p3767-0003", "nvidia,tegra234"),
        7_650_336,
        "model seen with module p3767-0003: rbonghi/jetson_stats#514 (L4T 35.3.1); compatible assumed: "
        "the form of " + UPSTREAM_P3767_0000 + ", with SKU 0003 as " + GPIO + " lists it",
    ),
    "orin-nx-8gb": Board(
        "NVIDIA Orin NX Developer Kit",
        ("nvidia,p3768-0000+p3767-0001", "nvidia,p3767-0001", "nvidia,tegra234"),
        7_620_000,
        "assumed: the form of " + UPSTREAM_P3767_0000 + ", with SKU 0001 as " + GPIO + " lists it",
    ),
    "orin-nx-16gb": Board(
        "NVIDIA Jetson Orin NX Engineering Reference Developer Kit",
        ("nvidia,p3768-0000+p3767-0000", "nvidia,p3767-0000", "nvidia,tegra234"),
        15_660_000,
        "seen: " + UPSTREAM_P3767_0000,
    ),
    "agx-orin-32gb": Board(
        "Jetson AGX Orin",
        ("nvidia,p3737-0000+p3701-0004", "nvidia,p3701-0004", "nvidia,tegra234"),
        30_536_000,
        "model seen with module p3701-0004: rbonghi/jetson_stats#617 (L4T 35.3.1); compatible assumed: "
        "'nvidia,p3737-0000+p3701-0004' from " + GPIO + ", the rest in the form of the 64GB board's",
    ),
    "agx-orin-64gb": Board(
        "NVIDIA Jetson AGX Orin Developer Kit",
        ("nvidia,p3737-0000+p3701-0005", "nvidia,p3701-0005", "nvidia,tegra234", "nvidia,tegra23x"),
        65_864_000,
        "compatible seen: NVIDIA/jetson-gpio#125 (an AGX Orin 64GB developer kit, NULs not shown); "
        "model seen on an AGX Orin developer kit: rbonghi/jetson_stats#864",
    ),
    # not one target each: the developer kit's module, a Super mode, boards without a target
    "agx-orin-devkit": Board(
        "NVIDIA Jetson AGX Orin Developer Kit",
        ("nvidia,p3737-0000+p3701-0000", "nvidia,p3701-0000", "nvidia,tegra234"),
        30_536_000,
        "model and first compatible entry seen: rbonghi/jetson_stats#864 (L4T 39.2); the rest assumed",
    ),
    "orin-nano-super": Board(
        "NVIDIA Jetson Orin Nano Developer Kit",
        ("nvidia,p3768-0000+p3767-0005-super", "nvidia,p3767-0005", "nvidia,tegra234"),
        7_650_336,
        "'nvidia,p3768-0000+p3767-0005-super' seen in the compatible lists of NVIDIA's r36 device-tree "
        "overlays (copies in public repositories) and anduril/jetpack-nixos#488; the list assumed",
    ),
    "thor": Board(
        "NVIDIA Jetson AGX Thor Developer Kit",
        ("nvidia,p4071-0000+p3834-0008", "nvidia,p3834-0008", "nvidia,tegra264"),
        None,
        "seen: rbonghi/jetson_stats#711 (L4T 38.2, NULs not shown)",
    ),
    "tx1": Board(
        "jetson_tx1",
        ("nvidia,jetson-cv", "nvidia,tegra210"),
        None,
        "seen: rbonghi/jetson_stats#48 (JetPack 3.2, NULs not shown)",
    ),
}


def device_tree(root: Path, board: Board) -> Path:
    """/proc/device-tree/model and compatible as the kernel shows them (NUL-terminated strings) and
    /proc/meminfo's first lines."""
    dt = root / "proc" / "device-tree"
    dt.mkdir(parents=True, exist_ok=True)
    (dt / "model").write_bytes(board.model.encode() + b"\0")
    (dt / "compatible").write_bytes(b"".join(entry.encode() + b"\0" for entry in board.compatible))
    if board.mem_total_kib is not None:
        _write(
            root,
            "proc/meminfo",
            f"MemTotal:       {board.mem_total_kib:>9} kB\nMemFree:        {board.mem_total_kib // 2:>9} kB",
        )
    return root


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
    board: str = "nano",
) -> Path:
    """A Jetson Nano (JetPack 4.6): devfreq 57000000.gpu, locked by default (min = max, what
    jetson_clocks sets), six thermal zones, and the soctherm over-current interrupt's line in
    /proc/interrupts (counted on CPU0), no soctherm_oc hwmon; the device tree of BOARDS[board]."""
    device_tree(root, BOARDS[board])
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
    board: str = "agx-orin-64gb",
) -> Path:
    """A Jetson AGX Orin: devfreq 17000000.ga10b (JetPack 5) or 17000000.gpu (JetPack 6), with
    another device's devfreq sorted before it; thermal zones; an INA3221 hwmon and the soctherm_oc
    hwmon with oc1..oc3 event counters and throttle switches; the device tree of BOARDS[board] (an
    Orin Nano's or NX's board: the same sysfs layout, NVIDIA's Orin series share the GPU block)."""
    device_tree(root, BOARDS[board])
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
