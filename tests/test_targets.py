"""Built-in GPU targets: complete, sourced, consistent with shared/FINDINGS.md §3; resolution rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deployopt import targets as targets_mod
from deployopt.errors import TargetError
from deployopt.targets import builtin_names, get_target, list_targets, load_profile
from deployopt.targets import local as local_mod

# FINDINGS §3: name -> (CC, SMs, CUDA cores, max GPU clock MHz)
FINDINGS_TARGETS = {
    "nano": ((5, 3), 1, 128, 921.6),
    "tx2": ((6, 2), 2, 256, 1300),
    "xavier-nx": ((7, 2), 6, 384, 1100),
    "agx-xavier": ((7, 2), 8, 512, 1377),
    "orin-nano-4gb": ((8, 7), 4, 512, 625),
    "orin-nano-8gb": ((8, 7), 8, 1024, 625),
    "orin-nx-8gb": ((8, 7), 8, 1024, 765),
    "orin-nx-16gb": ((8, 7), 8, 1024, 918),
    "agx-orin-32gb": ((8, 7), 14, 1792, 930),
    "agx-orin-64gb": ((8, 7), 16, 2048, 1300),
    "p6000": ((6, 1), 30, 3840, 1645),
    "t4": ((7, 5), 40, 2560, 1590),
    "a100": ((8, 0), 108, 6912, 1410),
    "h100": ((9, 0), 132, 16896, 1980),
    "h200": ((9, 0), 132, 16896, 1980),
}
# FINDINGS §3 per-CC limits: threads/SM, blocks/SM, warps/SM, smem/SM KB, smem/block KB, regs/block K
FINDINGS_LIMITS = {
    (5, 3): (2048, 32, 64, 64, 48, 32),
    (6, 1): (2048, 32, 64, 96, 48, 64),
    (6, 2): (2048, 32, 64, 64, 48, 32),
    (7, 2): (2048, 32, 64, 96, 96, 64),
    (7, 5): (1024, 16, 32, 64, 64, 64),
    (8, 0): (2048, 32, 64, 164, 163, 64),
    (8, 7): (1536, 16, 48, 164, 163, 64),
    (9, 0): (2048, 32, 64, 228, 227, 64),
}


def _refusal(path: Path, doc: object) -> str:
    """What loading `doc`, written as a profile file at `path`, is refused with (a TargetError)."""
    path.write_text(json.dumps(doc))
    with pytest.raises(TargetError) as exc:
        get_target(str(path))
    return str(exc.value)


def test_all_builtin_targets_present():
    assert sorted(t.name for t in list_targets()) == sorted(FINDINGS_TARGETS)


@pytest.mark.parametrize("name", sorted(FINDINGS_TARGETS))
def test_target_matches_findings(name):
    t = get_target(name)
    cc, sms, cores, clock = FINDINGS_TARGETS[name]
    assert (t.compute_capability, t.sms, t.cuda_cores, t.clock_mhz) == (cc, sms, cores, clock)
    threads, blocks, warps, smem_kb, smem_blk_kb, regs_blk_k = FINDINGS_LIMITS[cc]
    assert t.max_threads_per_sm == threads
    assert t.max_blocks_per_sm == blocks
    assert t.max_warps_per_sm == warps == threads // 32
    assert t.shared_mem_per_sm == smem_kb * 1024
    assert t.shared_mem_per_block == smem_blk_kb * 1024
    assert t.registers_per_sm == 65536
    assert t.registers_per_block == regs_blk_k * 1024
    # cores per SM follow the architecture: 64 on Volta/Turing/GA100, 128 elsewhere
    assert t.cuda_cores // t.sms == (64 if cc in {(7, 2), (7, 5), (8, 0)} else 128)
    for key in ("sms", "cuda_cores", "clock_mhz", "compute_capability", "per_sm_limits"):
        assert len(t.sources[key]) > 20, f"{name}: no source for {key}"
    if t.kind == "jetson":
        assert t.software["jetpack"] and t.software["tensorrt"] and "software" in t.sources


def test_h200_data_file_is_the_measured_one():
    d = json.loads((targets_mod.DATA_DIR / "h200.json").read_text())
    assert d["shared_mem_per_sm"] == 233472  # measured on the H200 (FINDINGS §3)
    assert "Measured" in d["sources"]["sms"]


def test_sms_override_and_errors():
    t = get_target("h200", sms=8)
    assert (t.sms, t.full_sms) == (8, 132)
    assert get_target("agx-orin-64gb", sms=16).sms == 16
    with pytest.raises(TargetError, match="only 132 SMs"):
        get_target("h200", sms=133)
    with pytest.raises(TargetError, match="positive integer"):
        get_target("h200", sms=0)
    assert t.with_sms(16).sms == 16  # an overridden target still knows the real GPU's SM count
    with pytest.raises(TargetError, match="only 132 SMs"):
        t.with_sms(140)


def test_unknown_target_lists_valid_ones():
    with pytest.raises(TargetError) as exc:
        get_target("orin-nano")
    msg = str(exc.value)
    assert "\n" not in msg
    for name in FINDINGS_TARGETS:
        assert name in msg
    assert "local" in msg


def test_local_without_gpu_is_one_line(monkeypatch):
    monkeypatch.setattr(local_mod, "READERS", [("torch", lambda: None), ("nvidia-ml-py", lambda: None)])
    with pytest.raises(TargetError) as exc:
        get_target("local")
    assert "no CUDA GPU found" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_local_says_why_each_probe_found_nothing(monkeypatch):
    """No torch installed is 'torch: not installed', not 'torch: no GPU' (what a GPU-less machine
    with torch says): each probe gives its own reason."""
    import sys

    # importing any of these raises ImportError (the submodules too: one an earlier test imported
    # would otherwise be found in sys.modules whatever its parent is)
    for module in ("torch", "cuda", "cuda.bindings", "cuda.bindings.runtime", "cuda.cudart", "pynvml"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(TargetError) as exc:
        get_target("local")
    msg = str(exc.value)
    assert "torch: not installed; cuda-python: not installed; nvidia-ml-py: not installed" in msg
    assert "no GPU" not in msg and "\n" not in msg

    class CpuTorch:
        __version__ = "2.5.0+cpu"
        version = type("version", (), {"cuda": None})

    monkeypatch.setitem(sys.modules, "torch", CpuTorch)
    with pytest.raises(TargetError, match=r"torch: CPU-only build \(torch 2.5.0\+cpu\); cuda-python"):
        get_target("local")


def test_local_reader_fills_limits_from_cc(monkeypatch):
    def fake() -> dict:
        return {"display_name": "Orin (nvgpu)", "compute_capability": (8, 7), "sms": 4, "via": "torch"}

    def broken() -> dict:
        raise RuntimeError("driver mismatch")

    monkeypatch.setattr(local_mod, "READERS", [("cuda-python", broken), ("torch", fake)])
    t = get_target("local", sms=2)
    assert (t.name, t.sms, t.full_sms, t.cc) == ("local", 2, 4, "8.7")
    assert (t.max_threads_per_sm, t.max_blocks_per_sm, t.shared_mem_per_sm) == (1536, 16, 167936)
    assert t.cuda_cores == 4 * 128
    assert t.clock_mhz == 1300  # no clock reported: the fastest built-in of the same CC
    assert "torch" in t.origin


def test_profile_path_and_cache_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    base = get_target("orin-nano-8gb").to_json()
    params = base.pop("params")
    fp16 = dict(params["fp16"], name="my-orin-fp16 calibrated", fixed_us=12.5, fitted=True)
    doc = {"deployopt_profile": 1, "target": dict(base, name="my-orin"), "params": {"fp16": fp16}}
    path = tmp_path / "my-orin.json"
    path.write_text(json.dumps(doc))
    t = get_target(str(path))
    assert (t.name, t.sms, t.origin) == ("my-orin", 8, str(path))
    assert t.wave_params("fp16").fixed_us == 12.5
    assert t.wave_params("fp32").fitted is False  # not calibrated: falls back to defaults
    # a profile saved in the cache under a built-in name wins over the built-in
    cache = targets_mod.cache_dir()
    cache.mkdir(parents=True)
    (cache / "orin-nano-8gb.json").write_text(json.dumps(dict(doc, target=dict(base))))
    assert get_target("orin-nano-8gb").wave_params("fp16").fixed_us == 12.5
    assert get_target("nano").name == "nano"
    with pytest.raises(TargetError, match=r"missing\.json: no such file"):
        get_target(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(TargetError, match="not a deployopt target profile"):
        load_profile(Path(tmp_path / "bad.json"))
    # an exported profile missing one of its facts said "no 'target' key", which it never had
    exported = get_target("orin-nano-8gb").to_json()
    del exported["compute_capability"]
    (tmp_path / "no_cc.json").write_text(json.dumps(exported))
    with pytest.raises(TargetError, match=r"no_cc.json: a `targets --json` profile needs compute_capab"):
        load_profile(tmp_path / "no_cc.json")


def test_params_fitted_or_default():
    h200 = get_target("h200")
    for dt in ("fp16", "fp32"):
        p = h200.wave_params(dt)
        assert p.fitted and p.fitted_on, f"h200 {dt} should ship a fit"
        assert get_target("h100").wave_params(dt) == p  # same SM design: the H200's fit
    nano = get_target("orin-nano-8gb").wave_params("fp16")
    # said once, by describe(), which every line that prints the source prints before it
    assert not nano.fitted and "not calibrated on hardware" in nano.describe()
    with pytest.raises(TargetError):
        h200.wave_params("bf16")


def test_target_json_round_trip():
    t = get_target("agx-orin-64gb", sms=8)
    d = t.to_json()
    assert d["sms"] == 8 and d["full_sms"] == 16
    again = targets_mod.target_from_json(d)
    assert again == t


def test_int8_only_where_the_gpu_has_native_int8():
    """Jetson Nano (CC 5.3) and TX2 (6.2) have no native INT8: TensorRT reports platform_has_fast_int8
    False and runs an INT8 build slower than FP16, so an INT8 prediction or run for them is refused
    in one line; Pascal 6.1 (P6000, dp4a) and every CC from 7.0 on keep INT8."""
    without = {t.name for t in list_targets() if not t.fast_int8}
    assert without == {"nano", "tx2"}
    for name in ("nano", "tx2"):
        t = get_target(name)
        assert t.dtypes() == ("fp16", "fp32") and "int8" not in t.to_json()["params"]
        with pytest.raises(TargetError) as exc:
            t.wave_params("int8")
        assert str(exc.value).startswith(f"--dtype int8: {t.display_name} (compute capability {t.cc}) has no")
        assert str(exc.value).endswith("use --dtype fp16")
    for name in ("p6000", "agx-xavier", "orin-nano-8gb", "h200"):
        assert get_target(name).wave_params("int8").dtype == "int8"


def test_a_target_printed_as_json_and_edited_is_a_what_if_profile(tmp_path):
    """A Jetson power mode: `targets --target orin-nano-8gb --json`, clock set to the 'Super' mode's,
    loads as a target whose default parameters follow the new clock (per-wave time scales with it);
    an H200 file keeps its fitted parameters as they are."""
    from deployopt.layers import ConvShape
    from deployopt.waves import predict

    doc = get_target("orin-nano-8gb").to_json()
    doc.update(name="orin-nano-super", clock_mhz=1020.0)
    path = tmp_path / "orin-nano-super.json"
    path.write_text(json.dumps(doc))
    fast, base = get_target(str(path)), get_target("orin-nano-8gb")
    assert (fast.name, fast.clock_mhz, fast.origin) == ("orin-nano-super", 1020.0, str(path))
    expected = base.wave_params("fp16").wave_us * 625.0 / 1020.0
    assert fast.wave_params("fp16").wave_us == pytest.approx(expected)
    shape = ConvShape(n=1, c=64, h=80, w=80, k=96, r=3, s=3)
    assert predict(shape, fast, "fp16").predicted_us < predict(shape, base, "fp16").predicted_us
    h200 = get_target("h200").to_json()
    (tmp_path / "h200.json").write_text(json.dumps(h200))
    kept = get_target(str(tmp_path / "h200.json")).wave_params("fp16")
    assert kept == get_target("h200").wave_params("fp16") and kept.fitted


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"sms": 0}, "sms must be an integer above 0, not 0"),
        ({"sms": 2.5}, "sms must be an integer above 0, not 2.5"),
        ({"sms": True}, "sms must be an integer above 0, not True"),
        ({"sms": "8"}, "sms must be an integer above 0, not '8'"),  # was read as 8
        ({"clock_mhz": -5}, "clock_mhz must be a number above 0, not -5"),
        ({"clock_mhz": "fast"}, "clock_mhz must be a number above 0, not 'fast'"),
        ({"compute_capability": "8.7"}, "compute_capability must be [major, minor], not '8.7'"),
        ({"params": {"fp16": "fitted"}}, None),  # a what-if's default params are dropped anyway
    ],
)
def test_a_hand_edited_profile_with_bad_values_is_one_line(tmp_path, edit, message):
    """A what-if profile is edited by hand: a zero SM count, a clock of 'fast', a CC string were
    tracebacks (ValueError deep in the wave arithmetic); now each is one TargetError line."""
    doc = {**get_target("orin-nano-8gb").to_json(), **edit}
    path = tmp_path / "mode.json"
    if message is None:
        path.write_text(json.dumps(doc))
        assert get_target(str(path)).sms == 8
        return
    assert _refusal(path, doc) == f"target profile {path}: {message}"
    calibrated = {"deployopt_profile": 1, "target": doc, "params": {"fp16": {"fitted": True}}}  # calibrate's
    path.write_text(json.dumps({**calibrated, "target": get_target("orin-nano-8gb").to_json()}))
    with pytest.raises(TargetError, match=r"unreadable fp16 params \(KeyError"):
        get_target(str(path))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # size classes are multiples of the fixed cost: 0 was a ZeroDivisionError traceback
        (
            {"fixed_us": 0},
            "unreadable fp16 params (ValueError: fixed_us must be above 0 (every launch costs something), "
            "not 0)",
        ),
        ({"dw_fixed_us": 0}, "unreadable fp16 params (ValueError: dw_fixed_us must be above 0"),
        # a block that cannot run on an SM was priced at one block per SM, without a word
        ({"families": {"threads": 0}}, "family 'tc-aligned64': threads must be a whole number >= 1, not 0"),
        (
            {"families": {"shared_mem_bytes": 10**9}},
            "shared_mem_bytes 1000000000 is more than one SM has (167936)",
        ),
        (
            {"families": {"registers_per_thread": 1000}},
            "registers (threads × registers_per_thread) 256000 is more",
        ),
    ],
)
def test_fitted_params_that_cannot_predict_are_one_line(tmp_path, edit, message):
    doc = get_target("orin-nano-8gb").to_json()
    params = doc["params"]["fp16"]
    params["fitted"] = True  # fitted params are kept as they are (defaults would be derived again)
    for key, value in edit.items():
        if key == "families":
            for fam in params["families"]:
                fam.update(value)
        else:
            params[key] = value
    path = tmp_path / "edited.json"
    said = _refusal(path, doc)
    assert said.startswith(f"target profile {path}: ") and message in said


@pytest.mark.parametrize("name", builtin_names())
def test_every_built_in_targets_params_load_back_as_fitted(tmp_path, name):
    """What `calibrate` writes has the default families it started from: on a T4 (64 KB an SM)
    those asked 72 KB a block, which the check above would refuse in a calibrated T4 profile."""
    doc = get_target(name).to_json()
    for params in doc["params"].values():
        params["fitted"] = True
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    loaded, builtin = get_target(str(path)), get_target(name)
    assert doc["params"]
    for dtype in doc["params"]:
        assert loaded.wave_params(dtype).families == builtin.wave_params(dtype).families


def _one_node_model(node, opset: int, inits: list | None = None):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits or [],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_a_jetpacks_tensorrt_is_warned_of_ops_newer_than_its_parser() -> None:
    """The torch exporter's default writes opset 18 to 20: ReduceMean reads its axes as an input,
    Reshape sets allowzero=1, ops JetPack 4.6's TensorRT 8.2 (ops up to opset 13) and 5.1's 8.5
    (17) were never documented to read. Read from onnx.defs per node: an attribute at its default
    (BatchNormalization's training_mode=0) or a renamed input is no change, and neither is
    anything on a target that names no TensorRT."""
    import numpy as np
    from onnx import helper, numpy_helper

    from deployopt.targets import opset_beyond_tensorrt

    axes = numpy_helper.from_array(np.array([2, 3], np.int64), "axes")
    mean18 = _one_node_model(helper.make_node("ReduceMean", ["x", "axes"], ["y"]), 18, [axes])
    said = opset_beyond_tensorrt(get_target("nano"), mean18)
    assert said is not None and said.startswith("the model is ONNX opset 18, and its ReduceMean nodes")
    assert "TensorRT 8.2.1 (JetPack 4.6.6, nano)" in said and "opset_version=13" in said
    assert "opset_version=17" in opset_beyond_tensorrt(get_target("agx-xavier"), mean18)
    assert opset_beyond_tensorrt(get_target("agx-orin-64gb"), mean18) is None  # TensorRT 10: up to 20
    assert opset_beyond_tensorrt(get_target("h200"), mean18) is None  # no TensorRT named
    all18 = _one_node_model(helper.make_node("ReduceMean", ["x"], ["y"]), 18)  # no axes: as at 13
    assert opset_beyond_tensorrt(get_target("nano"), all18) is None

    bn_inits = [numpy_helper.from_array(np.ones(4, np.float32), n) for n in ("s", "b", "m", "v")]
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], training_mode=0)
    assert opset_beyond_tensorrt(get_target("nano"), _one_node_model(bn, 17, bn_inits)) is None
    ln = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=1)
    said = opset_beyond_tensorrt(get_target("nano"), _one_node_model(ln, 17, bn_inits[:2]))
    assert said is not None and "LayerNormalization" in said  # no such op at 13
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    reshape = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)
    assert "Reshape" in opset_beyond_tensorrt(get_target("nano"), _one_node_model(reshape, 14, [shape]))
    reshape0 = helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=0)
    assert opset_beyond_tensorrt(get_target("nano"), _one_node_model(reshape0, 14, [shape])) is None


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # int(Infinity) was an OverflowError traceback (JSON's Infinity, and 1e400, which reads as it)
        ({"sms": float("inf")}, "sms must be an integer above 0, not inf"),
        ({"sms": float("nan")}, "sms must be an integer above 0, not nan"),
        # a clock of Infinity was taken, and every conv predicted at its fixed cost alone
        ({"clock_mhz": float("inf")}, "clock_mhz must be a finite number above 0, not inf"),
        # finite but no GPU's: 1e-300 MHz predicted 1e305 µs, 10**20 SMs was taken as given
        (
            {"clock_mhz": 1e-300},
            "clock_mhz must be from 10 to 10000 (MHz; GPU clocks run from about 100 to 3000 MHz), not 1e-300",
        ),
        ({"sms": 10**20}, "sms must be from 1 to 1024 (the largest GPUs have under 200 SMs), not a 21-digit"),
        ({"sms": 1_000_000}, "sms must be from 1 to 1024 (the largest GPUs have under 200 SMs), not 1000000"),
        ({"shared_mem_per_sm": 2**40}, "shared_mem_per_sm must be from 1 to 4194304 (bytes; 228 KB"),
    ],
)
def test_a_profile_with_an_infinite_or_implausible_fact_is_one_line(tmp_path, edit, message):
    """Bug bash: `"sms": Infinity` was an OverflowError traceback; `"clock_mhz": Infinity` and
    1e-300 were accepted. Positive facts must be finite and inside generous physical bounds."""
    doc = {**get_target("orin-nano-8gb").to_json(), **edit}
    path = tmp_path / "mode.json"  # json writes inf as Infinity, nan as NaN, as the bug bash's files
    said = _refusal(path, doc)
    assert said.startswith(f"target profile {path}: {message}"), said
    assert "\n" not in said


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # each was a traceback only when a conv was predicted: ZeroDivisionError, unpack, no family
        ({"small_tile": 1e308}, "small_tile must be from 0 to 1024 (rows and columns of overhead"),
        ({"families": {"tiles": [[128]]}}, "each tile must be [rows, columns], two whole numbers, not [128]"),
        ({"families": {"tiles": [["a", 64]]}}, "each tile must be [rows, columns], two whole numbers, not"),
        ({"families": {"tiles": [[1e9, 1e9]]}}, "tiles must be from 1 to 1024 (rows or columns, each side"),
        ({"families": {"min_align": 2.5}}, "min_align must be a power of two from 1 to 256, not 2.5"),
        ({"drop_padded": True}, "families must include one with min_align 1 (the default 'padded' one)"),
        # finite, but predicting 1e305 µs or Infinity (written into --json, which no reader takes)
        ({"wave_us": 1e308}, "wave_us must be from 0 to 1e+06 (µs; a second per wave), not 1e+308"),
        ({"macs_per_us_per_sm": 1e-300}, "macs_per_us_per_sm must be from 10 to 1e+10"),
        ({"families": {"efficiency": 1e-320}}, "efficiency must be from 1e-06 to 1000"),
    ],
)
def test_fitted_params_past_what_the_model_can_evaluate_are_one_line(tmp_path, edit, message):
    """Bug bash: profile params that passed the checks above crashed the first prediction (a
    small_tile of 1e308 divided by zero, a tile [128] did not unpack, a profile without a min_align
    1 family had no kernel for 17 channels) or predicted Infinity; now each is refused at load, in
    one line naming the file, the dtype and the field."""
    doc = get_target("h200").to_json()
    params = doc["params"]["fp16"]
    for key, value in edit.items():
        if key == "families":
            params["families"][0].update(value)
        elif key == "drop_padded":
            params["families"] = [f for f in params["families"] if f["min_align"] != 1]
        else:
            params[key] = value
    path = tmp_path / "edited.json"
    said = _refusal(path, doc)
    assert said.startswith(f"target profile {path}: unreadable fp16 params (ValueError: ") and message in said
    assert "\n" not in said


@pytest.mark.parametrize(
    ("full_sms", "message"),
    [
        ("x", "full_sms must be an integer above 0, not 'x'"),  # was a TypeError traceback at --sms
        (-3, "full_sms must be an integer above 0, not -3"),  # was "--sms 4: … has only -3 SMs"
        (True, "full_sms must be an integer above 0, not True"),
        (2, "full_sms 2 is fewer than sms 8 (full_sms is the GPU's SM count before an --sms what-if)"),
    ],
)
def test_a_calibrated_profiles_full_sms_is_checked(tmp_path, full_sms, message):
    """A calibrated profile's `full_sms` was never checked: `targets` showed "8/2" SMs."""
    facts = get_target("orin-nano-8gb").to_json()
    facts.pop("params")
    path = tmp_path / "calibrated.json"
    assert _refusal(
        path, {"deployopt_profile": 1, "target": {**facts, "full_sms": full_sms}, "params": {}}
    ) == (f"target profile {path}: {message}")
    path.write_text(json.dumps({"deployopt_profile": 1, "target": {**facts, "full_sms": 16}, "params": {}}))
    t = get_target(str(path))
    assert (t.sms, t.full_sms) == (8, 16) and get_target(str(path), sms=12).full_sms == 16


@pytest.mark.parametrize(
    ("cc", "reported", "limits"),
    [
        # an RTX 3090 as torch reports it (no blocks or warps per SM): it got an H100's 32 and 64
        (
            (8, 6),
            {"max_threads_per_sm": 1536, "shared_mem_per_sm": 102400, "registers_per_sm": 65536},
            (1536, 16, 48, 102400, 101376, 65536, 65536),
        ),
        ((8, 9), {}, (1536, 24, 48, 102400, 101376, 65536, 65536)),  # an RTX 4090, nothing reported
        ((7, 0), {}, (2048, 32, 64, 98304, 98304, 65536, 65536)),  # a V100
        ((6, 0), {}, (2048, 32, 64, 65536, 49152, 65536, 65536)),  # a P100
    ],
)
def test_local_gpu_without_a_built_in_target_gets_its_own_ccs_limits(monkeypatch, cc, reported, limits):
    """`--target local` on a CC with no built-in target took the H100's limits for whatever torch
    does not report; deployopt.kernels.SM_LIMITS (the CUDA guide's table) has 6.0, 7.0, 8.6, 8.9."""

    def fake() -> dict:
        return {"display_name": "a GPU", "compute_capability": cc, "sms": 40, "via": "torch", **reported}

    monkeypatch.setattr(local_mod, "READERS", [("torch", fake)])
    t = get_target("local")
    fields = ("max_threads_per_sm", "max_blocks_per_sm", "max_warps_per_sm", "shared_mem_per_sm")
    fields += ("shared_mem_per_block", "registers_per_sm", "registers_per_block")
    assert tuple(getattr(t, k) for k in fields) == limits
    assert t.sources["per_sm_limits"] == f"torch where reported, else the CUDA guide's limits for CC {t.cc}"


def test_local_gpu_of_a_cc_in_no_table_says_whose_limits_it_took(monkeypatch):
    """A CC newer than every table (a Blackwell 12.0) takes the nearest CC below's limits, and says
    so; an older one (Kepler 3.7) the oldest known, not the H100's."""
    for cc, used, which in (((12, 0), "9.0", "the nearest below"), ((3, 7), "5.3", "the oldest known")):

        def fake(cc: tuple[int, int] = cc) -> dict:
            return {"display_name": "a GPU", "compute_capability": cc, "sms": 10, "via": "torch"}

        monkeypatch.setattr(local_mod, "READERS", [("torch", fake)])
        t = get_target("local")
        assert t.max_threads_per_sm == 2048 and t.max_warps_per_sm == 64
        assert t.shared_mem_per_sm == (233472 if used == "9.0" else 65536)
        said = t.sources["per_sm_limits"]
        assert said == f"torch where reported, else CC {used}'s limits (CC {t.cc} is in no table; {which})"
