"""The per-layer latency cache: what is measured once is never measured again."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployopt.errors import CacheWarning
from deployopt.layers import ConvShape
from deployopt.lut import LayerCache, cache_root, device_fingerprint
from deployopt.timing import Timing


class CountingMeasure:
    """Stand-in for Session.measure_convs: latency = K/8 + C/100 µs, and a record of every call."""

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail_on_call = fail_on_call

    def __call__(self, shapes: list[ConvShape]) -> list[Timing]:
        self.calls.append([s.signature() for s in shapes])
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise KeyboardInterrupt
        return [Timing("stub", [s.k / 8 + s.c / 100, s.k / 8 + s.c / 100 + 1.0]) for s in shapes]


def shapes(ks: list[int], c: int = 64) -> list[ConvShape]:
    return [ConvShape(n=8, c=c, h=28, w=28, k=k) for k in ks]


def test_cache_root_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x" / "lut"
    monkeypatch.delenv("DEPLOYOPT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "deployopt" / "lut"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "deployopt" / "lut"


def test_fill_measures_each_shape_once_and_rereads_from_disk(tmp_path: Path) -> None:
    measure = CountingMeasure()
    cache = LayerCache("fp1", "fp16", root=tmp_path)
    first = cache.fill(measure, shapes([64, 72, 64, 80]), chunk=2)  # one duplicate
    assert first.measured == 3 and first.cached == 0
    assert [len(c) for c in measure.calls] == [2, 1]
    sig72 = shapes([72])[0].signature()
    assert first.values[sig72] == pytest.approx(72 / 8 + 0.64 + 0.5)  # median of the two samples
    # A new cache object on the same folder (another run, another model): nothing measured.
    again = LayerCache("fp1", "fp16", root=tmp_path).fill(measure, shapes([80, 72]))
    assert again.measured == 0 and again.cached == 2 and len(measure.calls) == 2
    assert again.values[sig72] == first.values[sig72]
    assert (tmp_path / "fp1" / "fp16" / f"{sig72}.json").exists()
    # Another dtype or device is another table.
    other = LayerCache("fp1", "fp32", root=tmp_path).fill(measure, shapes([72]))
    assert other.measured == 1


def test_known_values_win_and_nothing_is_persisted_for_predictions(tmp_path: Path) -> None:
    measure = CountingMeasure()
    sig = shapes([96])[0].signature()
    cache = LayerCache("model-x", "fp16", root=tmp_path, persist=False)
    res = cache.fill(measure, shapes([96, 104]), known={sig: 1.5})
    assert res.values[sig] == 1.5 and res.cached == 1 and res.measured == 1
    assert not (tmp_path / "model-x").exists()


def test_an_interrupted_sweep_keeps_the_chunks_already_measured(tmp_path: Path) -> None:
    cache = LayerCache("fp1", "fp16", root=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        cache.fill(CountingMeasure(fail_on_call=2), shapes([8, 16, 24, 32]), chunk=2)
    measure = CountingMeasure()
    res = cache.fill(measure, shapes([8, 16, 24, 32]), chunk=2)
    assert res.cached == 2 and res.measured == 2
    assert measure.calls == [[s.signature() for s in shapes([24, 32])]]


def test_fingerprint_changes_with_what_changes_timings() -> None:
    env = {
        "gpu": "NVIDIA H200",
        "torch": "2.11",
        "clocks": {"driver": "580", "sm_clock_mhz": 1980.0},
        "timestamp": 1,
    }
    fp = device_fingerprint("torch", env, 8)
    assert fp.startswith("torch-nvidia-h200-8sms-")
    assert device_fingerprint("torch", {**env, "timestamp": 2}, 8) == fp
    assert device_fingerprint("torch", {**env, "clocks": {"driver": "580", "sm_clock_mhz": 1755.0}}, 8) == fp
    assert device_fingerprint("torch", {**env, "clocks": {"driver": "590", "sm_clock_mhz": 1980.0}}, 8) != fp
    assert device_fingerprint("torch", env, 16) != fp
    assert device_fingerprint("torch", {**env, "torch": "2.12"}, 8) != fp
    assert device_fingerprint("ort", env, None).startswith("ort-nvidia-h200-allsms-")
    # versions whose names hold a drifting word as a substring ("onnxruntime": "time") are versions
    libs = {**env, "libraries": {"onnxruntime": "1.17.0"}, "cuda_runtime": "12.4"}
    base = device_fingerprint("ort", libs, None)
    assert device_fingerprint("ort", {**libs, "libraries": {"onnxruntime": "1.20.1"}}, None) != base
    assert device_fingerprint("ort", {**libs, "cuda_runtime": "13.0"}, None) != base
    drift = {"temperature_c": 61, "host_walltime_s": 3.2, "gpu_memory_used_mb": 9}
    assert device_fingerprint("ort", {**libs, **drift}, None) == base
    # cuDNN's kernel choice (autotuned, how many engines, or heuristics alone) is a different table
    tuned = {**env, "cudnn_benchmark": True, "cudnn_benchmark_limit": 10}
    heuristic = {**env, "cudnn_benchmark": False, "cudnn_benchmark_limit": None}
    every = {**tuned, "cudnn_benchmark_limit": 0}
    assert len({device_fingerprint("torch", e, 8) for e in (tuned, heuristic, every)}) == 3


def test_fingerprint_ignores_the_engine_and_loop_of_the_model_timed_first() -> None:
    """TensorRT (local, runner.py, --remote) reports the engine it built in a per-run work folder and
    the board's clock and over-current events during the loop: two runs on the same board must find
    the same table, and another power mode (devfreq maximum) or TensorRT must not."""
    board = {"board": "NVIDIA Orin Nano", "nvpmodel": "15W", "gpu_max_freq_mhz": 624.75, "tensorrt": "10.3.0"}
    first = {
        **board,
        "engine": "/tmp/deployopt-abc/engines/m-fp16-1a2b.engine",
        "engine_key": "1a2b",
        "engine_built_now": True,
        "engine_build_s": 41.5,
        "gpu_cur_freq_mhz": 624.75,
        "oc_events": {},
    }
    second = {
        **board,
        "engine": "/tmp/deployopt-xyz/engines/m-fp16-1a2b.engine",
        "engine_key": "1a2b",
        "engine_built_now": False,
        "gpu_cur_freq_mhz": 306.0,
        "oc_events": {"oc1": 2},
    }
    fp = device_fingerprint("tensorrt", first, None)
    assert device_fingerprint("tensorrt", second, None) == fp
    assert device_fingerprint("tensorrt", {**second, "gpu_max_freq_mhz": 306.0}, None) != fp
    assert device_fingerprint("tensorrt", {**second, "tensorrt": "8.5.2"}, None) != fp
    # what the runner reads around each timed loop, and trtexec's verdicts on one run
    loop = {
        "gpu_clock_during_run": {"devfreq": "17000000.gpu", "before": {"cur_hz": 306_000_000}},
        "temperatures_c": {"before": {"gpu-thermal": 48.5}, "after": {"gpu-thermal": 61.0}},
        "trtexec_flags": ["unstable"],
    }
    assert device_fingerprint("tensorrt", {**second, **loop}, None) == fp


def test_an_unwritable_cache_is_one_warning_and_the_sweep_goes_on(tmp_path: Path) -> None:
    """A read-only $HOME (here: a file where the cache folder goes) must not abort a measured run."""
    (tmp_path / "file").write_text("")
    cache = LayerCache("fp1", "fp16", root=tmp_path / "file" / "lut")
    with pytest.warns(CacheWarning) as caught:
        res = cache.fill(CountingMeasure(), shapes([8, 16, 24]), chunk=1)
    assert res.measured == 3 and len(res.values) == 3
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert "the layer cache is not saved this run" in str(caught[0].message)


def test_a_corrupt_entry_warns_and_is_measured_again(tmp_path: Path) -> None:
    cache = LayerCache("fp1", "fp16", root=tmp_path)
    cache.fill(CountingMeasure(), shapes([8]))
    (tmp_path / "fp1" / "fp16" / f"{shapes([8])[0].signature()}.json").write_text("{not json")
    with pytest.warns(CacheWarning, match="cannot read cache entry .*not a cache entry"):
        res = cache.fill(CountingMeasure(), shapes([8]))
    assert res.measured == 1


def test_an_int8_table_from_before_the_qdq_sweep_convs_is_not_read(tmp_path: Path) -> None:
    """Tables timed with plain convs under --dtype int8 (TensorRT ran them in fp16) sit in the old
    `int8/` folder; the Q/DQ sweep convs' table is `int8-qdq/`, so an upgrade measures them again."""
    measure = CountingMeasure()
    old = LayerCache("fp1", "fp16", root=tmp_path)
    old.dir = tmp_path / "fp1" / "int8"  # where an int8 table was written before
    old.fill(measure, shapes([64]))
    assert (old.dir / f"{shapes([64])[0].signature()}.json").exists()
    fresh = LayerCache("fp1", "int8", root=tmp_path)
    assert fresh.dir == tmp_path / "fp1" / "int8-qdq"
    assert fresh.fill(measure, shapes([64])).measured == 1
    assert LayerCache("fp1", "int8", root=tmp_path).fill(measure, shapes([64])).cached == 1


@pytest.mark.parametrize("sample", [float("nan"), float("inf"), -1.0, "12"])
def test_an_entry_whose_samples_are_no_latencies_is_measured_again(tmp_path: Path, sample) -> None:
    """Read as it was: its NaN median went into the sweep's table and optimize's journal, whose
    next --resume refused the 'sweep' event as damaged."""
    import json

    cache = LayerCache("fp1", "fp16", root=tmp_path)
    cache.fill(CountingMeasure(), shapes([8]))
    entry = tmp_path / "fp1" / "fp16" / f"{shapes([8])[0].signature()}.json"
    doc = json.loads(entry.read_text())
    doc["timing"]["samples_us"] = [sample, sample]
    entry.write_text(json.dumps(doc))
    with pytest.warns(CacheWarning, match="cannot read cache entry .*not a cache entry"):
        res = cache.fill(CountingMeasure(), shapes([8]))
    assert res.measured == 1 and res.values[shapes([8])[0].signature()] == pytest.approx(8 / 8 + 0.64 + 0.5)


def test_an_entry_of_fewer_samples_than_asked_is_timed_again(tmp_path: Path) -> None:
    """A run asking for 50 samples per conv was given an earlier run's 2-sample medians from the
    shared cache, and its report said 50. An entry with fewer samples than `min_runs` is timed again
    and replaced; one with as many or more is read, and its count is what the result says."""

    def measure(n: int) -> CountingMeasure:
        class Measure(CountingMeasure):
            def __call__(self, shapes: list[ConvShape]) -> list[Timing]:
                self.calls.append([s.signature() for s in shapes])
                return [Timing("stub", [s.k / 8 + i / 100 for i in range(n)]) for s in shapes]

        return Measure()

    few = LayerCache("fp1", "fp16", root=tmp_path, min_runs=2).fill(measure(2), shapes([64, 72]))
    assert few.measured == 2 and few.samples == [2, 2]
    more = measure(5)
    again = LayerCache("fp1", "fp16", root=tmp_path, min_runs=5).fill(more, shapes([64, 72]))
    assert again.measured == 2 and again.cached == 0 and again.samples == [5, 5] and len(more.calls) == 1
    fewer = measure(3)
    read = LayerCache("fp1", "fp16", root=tmp_path, min_runs=3).fill(fewer, shapes([64, 72, 80]))
    assert read.cached == 2 and read.measured == 1 and sorted(read.samples) == [3, 5, 5]
    assert fewer.calls == [[shapes([80])[0].signature()]]


def test_whether_the_clock_was_locked_is_part_of_the_fingerprint() -> None:
    """The volatile words matched as prefixes: "clocks" starts with "clock", so "clocks_locked" was
    dropped and a table filled with a board's clock locked (`sudo jetson_clocks`) was reused with it
    unlocked, where DVFS makes every timing another. The readings that drift stay out: the clocks
    read now, jetson_clocks --show's lines, temperatures, times, a throttled run's slowdown."""
    board = {
        "board": "NVIDIA Jetson Orin Nano",
        "nvpmodel": "15W",
        "tensorrt": "10.3.0",
        "clocks": {"driver": "540"},
    }
    locked = device_fingerprint("tensorrt", {**board, "clocks_locked": True}, None)
    assert device_fingerprint("tensorrt", {**board, "clocks_locked": False}, None) != locked
    assert device_fingerprint("tensorrt", board, None) != locked  # not recorded is not "locked"
    readings = {
        "clocks_locked": True,
        "sm_clock_mhz": 1020.0,
        "mem_clock_mhz": 3199.0,
        "gpu_clock_during_run": {"before": {"cur_hz": 1_020_000_000}},
        "jetson_clocks": ["SOC family:tegra234  Machine:Orin", "GPU MinFreq=1020000000 MaxFreq=1020000000"],
        "clocks": {"driver": "540", "sm_clock_mhz": 1020.0, "sm_clock_read": "right after the timed loop"},
        "temperatures_c": {"before": {"gpu-thermal": 48.5}},
        "temp_c": 50,
        "timestamp": 1765000000,
        "power_limit_w": 15.0,
        "pid": 4242,
        "hostname": "orin-1",
        "gpu_utilization": 97,
        "clock_slowdown_us": {"sw_thermal_slowdown": 1_200_000, "applications_clocks_setting": 0},
    }
    drifted = {
        **readings,
        "sm_clock_mhz": 306.0,
        "mem_clock_mhz": 2133.0,
        "gpu_clock_during_run": {"before": {"cur_hz": 306_000_000}},
        "jetson_clocks": ["SOC family:tegra234  Machine:Orin", "GPU MinFreq=306000000 MaxFreq=1020000000"],
        "clocks": {"driver": "540", "sm_clock_mhz": 306.0, "sm_clock_read": "(read outside the timed run)"},
        "temperatures_c": {"before": {"gpu-thermal": 61.0}},
        "temp_c": 63,
        "timestamp": 1765000999,
        "power_limit_w": 7.0,
        "pid": 99,
        "hostname": "orin-2",
        "gpu_utilization": 3,
        "clock_slowdown_us": {},
    }
    assert device_fingerprint("tensorrt", {**board, **readings}, None) == locked
    assert device_fingerprint("tensorrt", {**board, **drifted}, None) == locked
