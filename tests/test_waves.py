"""The wave model: arithmetic on hand-computed cases, fitting, scoring, and agreement on real sweeps."""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from deployopt.errors import DeployoptError
from deployopt.layers import ConvShape
from deployopt.targets import get_target
from deployopt.waves import (
    KernelFamily,
    WaveParams,
    _CandidateGrid,
    _evaluate,
    _evaluate_gemm,
    aligned_widths,
    blocks_per_sm,
    classify_change,
    conv_alignment,
    conv_rows,
    fill_percent,
    fit,
    fit_depthwise,
    pair_agreement,
    pow2_align,
    predict,
    recommend,
    regret,
    regret_per_width,
    size_class,
    staircase,
    wave_count,
)

ROOT = Path(__file__).resolve().parents[1]


def test_wave_count_hand_cases():
    assert wave_count(132, 132) == (1, 1.0)  # exactly one full wave
    waves, tail = wave_count(133, 132)  # one block over: a second, nearly empty wave
    assert waves == 2 and tail == pytest.approx(1 / 132)
    assert wave_count(264, 132, 2) == (1, 1.0)
    assert wave_count(1, 8) == (1, 0.125)
    assert wave_count(49, 8) == (7, 0.125)
    with pytest.raises(ValueError, match="must be positive"):
        wave_count(0, 8)


def test_fill_percent_rounds_halves_up():
    """Fills are often eighths: 12.5 % printed as 12 but 37.5 % as 38 (round half to even)."""
    assert [fill_percent(k / 8) for k in range(9)] == [0, 13, 25, 38, 50, 63, 75, 88, 100]
    assert fill_percent(wave_count(49, 8)[1]) == 13 and fill_percent(1 / 132) == 1


def test_pow2_align():
    assert [pow2_align(k) for k in (240, 256, 448, 432, 250, 1024)] == [16, 256, 64, 16, 2, 256]


def test_alignment_follows_output_channels_once_inputs_allow_vector_loads():
    def align(c: int, k: int, groups: int = 1) -> int:
        return conv_alignment(ConvShape(8, c, 14, 14, k, 1, 1, groups=groups))

    # round four's shape af (C = 96): sm90 kernels at K = 128 and 192, whatever C's alignment
    assert [align(96, k) for k in (128, 192, 160, 144)] == [128, 64, 32, 16]
    assert align(256, 128) == 128
    # an RGB stem (C = 3) cannot vector-load its input: it limits the alignment
    assert align(3, 64) == 1 and align(4, 64) == 4
    # per group: 4 groups of 32 output channels
    assert align(128, 128, groups=4) == 32
    h200 = get_target("h200")
    fp16 = h200.wave_params("fp16")
    fast = predict(ConvShape(32, 96, 14, 14, 128, 1, 1), h200, "fp16").family
    assert fast == fp16.families[0].name  # the aligned-to-64 family, although C = 96


def simple_target(sms: int = 8, **params_kw):
    """A toy GPU: one kernel family, one 128×128 tile, one block per SM, round numbers."""
    fam = KernelFamily("only", 1, ((128, 128),), threads=1024, registers_per_thread=64, shared_mem_bytes=0)
    p = WaveParams(
        name="toy",
        dtype="fp16",
        fixed_us=2.0,
        macs_per_us_per_sm=128 * 128 * 64,  # one 128×128 tile of depth 64 per µs
        wave_us=1.0,
        tail_floor=1.0,
        small_tile=0.0,
        families=(fam,),
        **params_kw,
    )
    base = get_target("orin-nano-8gb")
    return replace(base, sms=sms, params={"fp16": p})


def test_predict_exact_wave_vs_one_block_over():
    t = simple_target()
    # M = 1·32·32 = 1024 = 8 tiles of 128 rows; K=128 → 1 column tile: 8 blocks on 8 SMs
    full = predict(ConvShape(1, 64, 32, 32, 128, 1, 1, pad=(0, 0)), t)
    assert (full.blocks, full.blocks_per_sm, full.waves, full.tail_fill) == (8, 1, 1, 1.0)
    # depth 64 → 1 µs of work per tile, + 1 µs per wave, + 2 µs fixed
    assert full.predicted_us == pytest.approx(2 + 1 * (1 + 1))
    assert full.tile == (128, 128) and full.gemm == (1024, 128, 64) and full.aligned
    # one block over: M = 1·25·41 = 1025 → 9 row tiles → 2 waves, the second 1/8 full
    over = predict(ConvShape(1, 64, 25, 41, 128, 1, 1, pad=(0, 0)), t)
    assert (over.blocks, over.waves, over.tail_fill) == (9, 2, 0.125)
    assert over.predicted_us == pytest.approx(2 + 2 * 2)
    # K = 136 needs a second, mostly empty column of tiles: 16 blocks, 2 full waves, not aligned
    wide = predict(ConvShape(1, 64, 32, 32, 136, 1, 1, pad=(0, 0)), t)
    assert (wide.blocks, wide.waves, wide.tail_fill, wide.aligned) == (16, 2, 1.0, False)


def test_size_class_sorts_convs_by_predicted_latency_over_the_fixed_cost():
    """Below 1.75× the fixed cost launch-bound, from 4× wave-bound; a depthwise conv against the
    depthwise fixed cost. On the shipped H200 fit a batch-1 1×1 at 7×7 is launch-bound, a batch-8
    3×3 at 28×28 wave-bound."""
    p = replace(get_target("h200").wave_params("fp16"), fixed_us=6.0, dw_fixed_us=2.0)
    assert [size_class(us, p) for us in (6.0, 10.49, 10.5, 23.99, 24.0, 500.0)] == [
        "launch-bound", "launch-bound", "small", "small", "wave-bound", "wave-bound",
    ]  # fmt: skip
    assert (
        size_class(10.0, p, depthwise=True) == "wave-bound"
        and size_class(3.0, p, depthwise=True) == "launch-bound"
    )
    h200 = get_target("h200")
    fit16 = h200.wave_params("fp16")
    tiny = predict(ConvShape(1, 320, 7, 7, 512, 1, 1, pad=(0, 0)), h200, "fp16")
    big = predict(ConvShape(8, 128, 28, 28, 256, 3, 3, pad=(1, 1)), get_target("h200", sms=8), "fp16")
    assert size_class(tiny.predicted_us, fit16) == "launch-bound"
    assert size_class(big.predicted_us, fit16) == "wave-bound"


def test_tail_floor_discounts_a_sparse_last_wave():
    t = simple_target()
    p = replace(t.params["fp16"], tail_floor=0.5)
    t = replace(t, params={"fp16": p})
    over = predict(ConvShape(1, 64, 25, 41, 128, 1, 1, pad=(0, 0)), t)
    # waves − 1 + floor + (1 − floor)·tail = 1 + 0.5 + 0.5·0.125
    assert over.predicted_us == pytest.approx(2 + (1 + 0.5 + 0.5 * 0.125) * 2)


def test_occupancy_from_limits():
    t = get_target("h200")
    big = KernelFamily("x", 1, ((128, 128),), threads=384, registers_per_thread=168, shared_mem_bytes=231424)
    small = KernelFamily("y", 1, ((64, 64),), threads=128, registers_per_thread=128, shared_mem_bytes=43008)
    assert blocks_per_sm(big, t) == 1  # shared memory: 233472 // 231424
    assert blocks_per_sm(small, t) == 4  # registers: 65536 // (128·128)
    orin = get_target("orin-nano-8gb")
    tiny = KernelFamily("z", 1, ((32, 32),), threads=64, registers_per_thread=32, shared_mem_bytes=1024)
    assert blocks_per_sm(tiny, orin) == 16  # the 16-blocks-per-SM limit of CC 8.7


def test_staircase_and_families():
    t = get_target("h200", sms=8)
    shape = ConvShape(8, 128, 28, 28, 64)
    ks = [128, 144, 256, 272, 400, 512]
    preds = staircase(shape, t, "fp16", ks)
    assert [p.out_channels for p in preds] == ks
    assert all(p.predictor == t.wave_params("fp16").name for p in preds)
    # more output channels never need fewer tiles on the same tile shape
    by_k = {p.out_channels: p for p in preds}
    assert by_k[512].predicted_us > by_k[128].predicted_us
    # the sweep measured 128 → 144 as a step up on 8 SMs; the model agrees
    assert classify_change(by_k[128].predicted_us, by_k[144].predicted_us) == "up"
    # K not a multiple of 8 in fp16 runs a padded path: slower than the next multiple of 8
    odd = predict(shape.with_channels(k=250), t, "fp16")
    assert odd.family == "padded" and odd.predicted_us > predict(shape.with_channels(k=256), t).predicted_us
    with pytest.raises(DeployoptError, match="unknown dtype 'bf16'; choose one of: fp16, fp32, int8"):
        predict(shape, t, "bf16")


def test_families_are_chosen_by_alignment_and_old_profiles_still_load():
    fam = KernelFamily("f", 8, ((64, 64),))
    assert fam.offered(8) and fam.offered(64) and not fam.offered(4)
    assert KernelFamily.from_json(fam.to_json()) == fam
    # profiles written while the sm80-small family existed carry its size limits: ignored
    old = {**fam.to_json(), "max_rows_depth": 1.0e6, "min_rows_depth": 0.0}
    assert KernelFamily.from_json(old) == fam


def test_fp16_widths_aligned_to_32_run_a_family_no_slower_than_16_aligned_ones():
    # fp16 has a family for multiples of 32 between the 64 and the 8 one; the fit keeps every
    # family no faster than the better-aligned one before it, so K = 160 (≡ 32 mod 64) is never
    # predicted slower than K = 176 (≡ 48: 16-aligned) with the same tiles and waves
    t = get_target("h200", sms=8)
    fp16 = t.wave_params("fp16")
    assert [f.min_align for f in fp16.families] == [64, 32, 8, 1]
    effs = [(f.efficiency, -f.epilogue_us) for f in fp16.families[:3]]
    assert effs == sorted(effs, reverse=True)
    shape = ConvShape(8, 128, 28, 28, 160, 3, 3)
    at160, at176 = predict(shape, t, "fp16"), predict(shape.with_channels(k=176), t, "fp16")
    assert (at160.family, at176.family) == ("tc-aligned32", "tc-aligned8")
    assert at160.waves == at176.waves and at160.predicted_us < at176.predicted_us
    # fp32 keeps two aligned families: a family at 16 changed no prediction there
    assert [f.min_align for f in t.wave_params("fp32").families] == [32, 4, 1]


def test_fit_keeps_families_ordered_by_alignment():
    # synthetic points where 16-aligned widths run *faster* than 32-aligned ones: the fit may not
    # make the 32 family slower than the 8 one (a wider alignment never buys a slower kernel)
    t = get_target("h200", sms=8)
    points = []
    for k in range(16, 513, 16):
        shape = ConvShape(8, 128, 28, 28, k, 3, 3)
        us = _evaluate(shape, t, t.wave_params("fp16")).predicted_us * (0.9 if k % 32 else 1.0)
        points.append({"shape": shape, "measured_us": us, "sms": 8, "id": "toy"})
    fitted = fit(points, t, "fp16")
    f64, f32, f8 = fitted.families[:3]
    assert f64.efficiency >= f32.efficiency >= f8.efficiency
    assert f32.epilogue_us <= f8.epilogue_us


def test_narrow_n_tiles_cost_more_per_mac_than_narrow_m_tiles():
    # 256×256 GEMM: 128×64 and 64×128 tiles both make 8 tiles; a tile 64 output channels wide
    # re-reads its input rows for every column, so the model (N_OVERHEAD > 1) prefers 64×128
    t = get_target("h200", sms=8)
    base = t.wave_params("fp16")
    shape = ConvShape(1, 256, 16, 16, 256, 1, 1, pad=(0, 0))  # M = 256, N = 256, depth 256

    def us(tile: tuple[int, int], small_tile: float = base.small_tile) -> float:
        fam = replace(base.families[0], tiles=(tile,))
        return _evaluate(shape, t, replace(base, small_tile=small_tile, families=(fam,))).predicted_us

    assert us((64, 128)) < us((128, 64))
    # the difference is the per-tile overhead alone: without it the two tiles cost the same
    assert us((64, 128), 0.0) == pytest.approx(us((128, 64), 0.0))


def test_vectorized_fit_grid_predicts_what_evaluate_does():
    # fit() evaluates all points at once through _CandidateGrid; it must be the same formula
    t = get_target("h200")
    shapes = [
        ConvShape(n, c, hw, hw, k, r, r, stride=(st, st), groups=g)
        for n, c, hw, r, st, g in ((8, 128, 28, 3, 1, 1), (4, 96, 56, 1, 2, 1), (1, 64, 14, 3, 1, 1))
        for k in (16, 24, 40, 64, 100, 128, 200, 256, 384)
    ] + [ConvShape(2, 64, 28, 28, 64, 3, 3, groups=64)]
    sms = [8, 16, 132] * (len(shapes) // 3) + [8] * (len(shapes) % 3)
    for dtype in ("fp16", "fp32"):
        params = t.wave_params(dtype)
        got = _CandidateGrid(shapes, sms, t, params.families).predicted_us(params)
        want = [_evaluate_gemm(s, t, params, n).predicted_us for s, n in zip(shapes, sms)]
        assert list(got) == pytest.approx(want, rel=1e-12)
        # every conv but the depthwise one (its own path) is predicted by that GEMM formula
        assert [_evaluate(s, t, params, n).predicted_us for s, n in zip(shapes[:-1], sms)] == want[:-1]


def test_aligned_widths_on_toy_target():
    t = simple_target()
    shape = ConvShape(1, 64, 32, 32, 200, 1, 1, pad=(0, 0))  # tiles of 128 columns: steps after 128, 256
    assert aligned_widths(shape, t, "fp16", 200) == (128, 256)
    assert aligned_widths(shape, t, "fp16", 256) == (128, 256)  # already at a step end
    # input channels: depth grows smoothly, every width costs more than the one below
    below, above = aligned_widths(shape, t, "fp16", 64, role="in")
    assert (below, above) == (56, 64)


def test_classify_agreement_regret_by_hand():
    assert [classify_change(100, x) for x in (102, 105, 109, 91, 95)] == [
        "flat",
        "between",
        "up",
        "down",
        "between",
    ]
    measured = [10.0, 10.1, 12.0, 12.1, 11.0]
    assert pair_agreement(measured, [1.0, 1.0, 2.0, 2.0, 2.0]) == (3, 4)
    # pairs: flat (agree), up (agree), flat (agree), down (model flat: disagree)
    widths = [80, 96, 112, 128, 144]
    meas = [10.0, 11.0, 12.0, 9.0, 13.0]
    pred = [1.0, 1.0, 1.0, 1.0, 1.0]  # flat: recommend K itself (ties → wider)
    assert recommend(widths, pred, 144) == 144
    assert recommend([100, 104, 108, 112], [1, 0.5, 1, 1], 112) == 104
    assert recommend([100, 104, 108, 112], [1, 0.5, 1, 1], 100) == 100  # 104 is outside [90, 100]
    # the alignment prior breaks ties only: 144 and 160 tie, 160 (32-aligned) wins over the wider
    # 176 (16-aligned) when asked to, and a faster prediction still wins over any alignment
    assert recommend([144, 160, 176], [1.0, 1.0, 1.0], 176) == 176
    assert recommend([144, 160, 176], [1.0, 1.0, 1.0], 176, prefer_aligned=32) == 160
    assert recommend([144, 160, 176], [0.9, 1.0, 1.0], 160, prefer_aligned=32) == 144
    assert recommend([128, 160, 192], [1.0, 1.0, 1.0], 192, prefer_aligned=32) == 192  # 64 counts as 32
    # K=80: {80} → 0; 96: {96} → 0; 112: {112} → 0; 128: [115.2,128] → {128}; 144: [129.6,144] → {144}
    assert regret(widths, meas, pred) == 0.0
    wide = [100, 104, 108, 112]
    # K=112: window [100.8,112] → {104,108,112}: best 104 (9) vs recommended 112 (12): regret 1/3
    # K=100: {100}; 104: {100,104} → 104 is best; 108: rec 108 (11) vs 104 (9); 112: rec 112 (12) vs 9
    assert regret(wide, [10, 9, 11, 12], [1, 1, 1, 1]) == pytest.approx((2 / 9 + 3 / 9) / 4)
    # a model that knows 104 is fastest has no regret
    assert regret(wide, [10, 9, 11, 12], [1, 0.5, 1, 1]) == 0.0
    # per width: what the model recommends and what that costs over the measured best
    assert regret_per_width(wide, [10, 9, 11, 12], [1, 1, 1, 1]) == [
        (100, 0.0),
        (104, 0.0),
        (108, pytest.approx(2 / 9)),
        (112, pytest.approx(3 / 9)),
    ]


def test_fit_recovers_toy_parameters():
    truth = simple_target()
    p0 = truth.params["fp16"]
    shapes = [ConvShape(n, 64, 32, 32, k, 3, 3) for n in (1, 4, 16) for k in range(32, 520, 32)]
    points = [
        {"id": f"n{s.n}", "shape": s.to_json(), "measured_us": predict(s, truth).predicted_us} for s in shapes
    ]
    start = replace(
        p0, fixed_us=5.0, macs_per_us_per_sm=p0.macs_per_us_per_sm * 2, wave_us=0.3, tail_floor=0.6
    )
    fitted = fit(points, replace(truth, params={"fp16": start}), "fp16")
    assert fitted.fitted and fitted.fitted_on == ("n1", "n16", "n4")
    for s, pt in zip(shapes, points):
        assert predict(s, replace(truth, params={"fp16": fitted})).predicted_us == pytest.approx(
            pt["measured_us"], rel=0.02
        )
    with pytest.raises(DeployoptError, match="at least 4 measured points, got 2"):
        fit(points[:2], truth, "fp16")


def test_conv_rows_contract():
    t = get_target("h200", sms=8)
    convs = [
        SimpleNamespace(name="conv1", shape=ConvShape(8, 64, 28, 28, 200), out_group="g1", in_groups=[]),
        SimpleNamespace(
            name="conv2", shape=ConvShape(8, 200, 28, 28, 128), out_group="g2", in_groups=[("g1", 200)]
        ),
    ]
    groups = [
        SimpleNamespace(id="g1", width=200, frozen=False),
        SimpleNamespace(id="g2", width=128, frozen=True),
    ]
    rows = conv_rows(SimpleNamespace(convs=convs, groups=groups), t, "fp16")
    assert [r["name"] for r in rows] == ["conv1", "conv2"]
    r1, r2 = rows
    assert (r1["gemm_m"], r1["gemm_n"], r1["gemm_k"]) == (6272, 200, 576)
    pred = predict(convs[0].shape, t)
    assert (r1["blocks"], r1["waves"], r1["tail_fill"]) == (pred.blocks, pred.waves, pred.tail_fill)
    assert [(w["group"], w["role"], w["width"]) for w in r1["widths"]] == [("g1", "out", 200)]
    assert [(w["group"], w["role"]) for w in r2["widths"]] == [("g1", "in")]  # g2 is frozen
    w = r1["widths"][0]
    below, above = aligned_widths(convs[0].shape, t, "fp16", 200)
    assert (w["below"], w["above"]) == (below, above)
    assert w["below"] < 200 <= w["above"]
    assert w["below_delta_us"] == pytest.approx(
        predict(convs[0].shape.with_channels(k=below), t).predicted_us - pred.predicted_us
    )
    assert w["below_delta_us"] <= 0
    w2 = r2["widths"][0]
    assert (w2["below"], w2["above"]) == aligned_widths(convs[1].shape, t, "fp16", 200, role="in")


def test_conv_rows_on_a_real_coupling_analysis():
    from conftest import get_zoo_model

    from deployopt.coupling import analyze

    analysis = analyze(get_zoo_model("vgg16_pruned"))
    t = get_target("orin-nano-8gb")
    rows = conv_rows(analysis, t, "fp16")
    assert [r["name"] for r in rows] == [c.name for c in analysis.convs]
    free = {g.id for g in analysis.free_groups()}
    for conv, row in zip(analysis.convs, rows):
        assert row["gemm_n"] == conv.shape.k and row["predicted_us"] > 0
        for w in row["widths"]:
            assert w["group"] in free
            if w["below"] is not None:
                shape = analysis.conv_shapes({w["group"]: w["below"]})[conv.name]
                assert w["below_delta_us"] == pytest.approx(
                    predict(shape, t).predicted_us - row["predicted_us"]
                )
    assert sum(len(r["widths"]) for r in rows) >= len(analysis.convs)


def test_conv_rows_price_a_grouped_conv_per_conv_group():
    """A grouped conv's groups (4 conv groups of 4 → 8): widths per conv group, priced through
    conv_shapes (C = 4 × width, groups stays 4), searched in steps of 2 (4 × 2 = one fp16 vector)."""
    from test_surgery import grouped_net

    from deployopt.coupling import analyze

    analysis = analyze(grouped_net())
    rows = {r["name"]: r for r in conv_rows(analysis, get_target("orin-nano-8gb"), "fp16")}
    row = rows["conv7"]
    assert (row["gemm_n"], row["gemm_k"]) == (8, 4 * 9)  # per conv group: K/g, C/g·R·S
    entries = {w["group"]: w for w in row["widths"]}
    assert set(entries) == {"conv4", "conv7"}
    assert entries["conv7"]["searched"] == [4, 16] and entries["conv4"]["searched"] == [2, 8]
    for gid, w in entries.items():
        for key in ("below", "above"):
            if w[key] is not None:
                assert w[key] % 2 == 0
                shape = analysis.conv_shapes({gid: w[key]})["conv7"]
                assert shape.groups == 4 and shape.c % 4 == 0


def test_no_width_below_is_offered_that_is_slower_than_the_width_itself(tmp_path) -> None:
    """analyze offered 20 below 24 channels per conv group (4 groups, C/g 20: the unaligned kernel)
    at +69.7 µs as "the nearest wave-aligned width below": a step end, but of a slower staircase."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from deployopt.coupling import analyze

    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for i, (k, c, r, g) in enumerate([(96, 64, 1, 1), (96, 24, 3, 4), (40, 96, 1, 1)]):
        inits.append(numpy_helper.from_array(rng.standard_normal((k, c, r, r)).astype(np.float32), f"w{i}"))
        pads = [r // 2] * 4
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"y{i}"], f"conv{i}", group=g, pads=pads))
        prev = f"y{i}"
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64, 28, 28])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rows = {r["name"]: r for r in conv_rows(analyze(model), get_target("orin-nano-8gb"), "fp16")}
    entry = next(w for w in rows["conv1"]["widths"] if w["role"] == "in")
    assert entry["width"] == 24 and entry["below"] == 16 and entry["below_delta_us"] < 0
    for row in rows.values():
        for w in row["widths"]:
            assert w["below"] is None or w["below_delta_us"] <= 1e-9 * row["predicted_us"], (row["name"], w)


# --- the model against the committed H200 sweeps (benchmarks/staircases/) ---------------------------

sys.path.insert(0, str(ROOT / "benchmarks"))


@pytest.mark.skipif(not (ROOT / "benchmarks" / "staircases").is_dir(), reason="no committed sweeps")
def test_shipped_fit_agreement_on_committed_sweeps():
    import eval_wave_model as ev

    sweeps = ev.load_sweeps()
    target = get_target("h200")
    params = {dt: target.wave_params(dt) for dt in ("fp16", "fp32")}
    scores = ev.score(sweeps, target, params)
    wave, tile128 = scores["wave"], scores["tile128"]
    # levels reached by the shipped fit (docs/wave_model_evaluation.md); fail if the model regresses
    assert wave["agreement"] >= AGREEMENT_ALL
    assert wave["regret"] <= REGRET_ALL
    # and it beats the plain 128×128-tile wave model on both figures
    assert wave["agreement"] > tile128["agreement"] and wave["regret"] < tile128["regret"]
    recorded = json.loads((ROOT / "deployopt" / "targets" / "fitted" / "h200.json").read_text())
    # the fit names the committed files (compressed: staircases*/ ship as NAME.json.gz)
    assert all((ROOT / p).is_file() and p.endswith(".json.gz") for p in recorded["sweeps"])
    assert sorted(p.removesuffix(".json.gz") for p in recorded["sweeps"]) == sorted(
        s["path"].removesuffix(".json.gz") for s in sweeps
    )
    # at 8 SMs (Orin Nano / Orin NX / AGX Xavier size), pooled over both dtypes: at the goal's edge
    eight = ev.score([s for s in sweeps if s["sms"] == 8], target, params)["wave"]
    assert eight["agreement"] >= 0.80 and eight["regret"] <= 0.0155  # reached: 80.6 % / 1.51 %


@pytest.mark.skipif(not (ROOT / "benchmarks" / "staircases").is_dir(), reason="no committed sweeps")
def test_default_search_regret_comes_from_64_row_tiles_at_multiples_of_64():
    """docs/wave_model_evaluation.md: with PyTorch's default search most of the fp16 regret at 8 and 16 SMs is
    at recommended multiples of 64 where cuDNN ran a 64-row tile; with every engine timed, little."""
    import eval_wave_model as ev

    target = get_target("h200")
    params = {dt: target.wave_params(dt) for dt in ("fp16", "fp32")}
    default = ev.regret_sources([s for s in ev.load_sweeps() if s["dtype"] == "fp16"], target, params)
    every = ev.regret_sources(
        [s for s in ev.load_sweeps(ROOT / "benchmarks" / "staircases_all_engines") if s["dtype"] == "fp16"],
        target,
        params,
    )
    for key in ("fp16 8 SMs", "fp16 16 SMs"):
        d, e = default[key], every[key]
        assert d["share_at_multiples_of_64"] >= d["share_there_with_64_row_tiles"] >= 0.5  # 58 %, 54 %
        assert e["share_there_with_64_row_tiles"] <= 0.2  # 15 %, 13 %
        assert d["regret"] > e["regret"]


AGREEMENT_ALL = 0.72  # reached: 72.3 % of 9152 pairs (tile128 baseline: 68.0 %); 72.6 % before round six
REGRET_ALL = (
    0.0225  # reached: 2.22 % (tile128: 3.65 %); before round six 2.18 %, 2.27 % without the family at 32
)


@pytest.mark.skipif(
    not (ROOT / "benchmarks" / "staircases_all_engines").is_dir(), reason="no committed all-engines sweeps"
)
def test_shipped_fit_on_sweeps_timed_with_all_cudnn_engines():
    """Sweeps measured with every cuDNN engine timed (--cudnn-engines 0, as TensorRT times every
    tactic) were never fitted on; at 8 and 16 SMs the shipped model meets issue 3's goal on them."""
    import eval_wave_model as ev

    sweeps = ev.load_sweeps(ROOT / "benchmarks" / "staircases_all_engines")
    assert {s["sms"] for s in sweeps} == {8, 16, 132} and len(sweeps) == 264
    target = get_target("h200")
    params = {dt: target.wave_params(dt) for dt in ("fp16", "fp32")}
    eight = ev.score([s for s in sweeps if s["sms"] == 8], target, params)
    assert eight["wave"]["pairs"] > 1500
    assert eight["wave"]["agreement"] >= 0.86  # reached: 86.2 % of 2223 pairs
    assert eight["wave"]["regret"] <= 0.0100  # reached: 0.90 % (1.12 % before the fp16 family at 32)
    assert eight["wave"]["agreement"] > eight["tile128"]["agreement"] + 0.05  # tile128: 79.9 %
    sixteen = ev.score([s for s in sweeps if s["sms"] == 16], target, params)["wave"]
    assert sixteen["agreement"] >= 0.80 and sixteen["regret"] <= 0.014  # reached: 80.7 % / 1.33 %
    every = ev.score(sweeps, target, params)["wave"]
    assert every["agreement"] >= 0.745 and every["regret"] <= 0.020  # reached: 74.8 % / 1.96 %


@pytest.mark.skipif(
    not (ROOT / "benchmarks" / "staircases_heuristic").is_dir(), reason="no committed heuristic sweeps"
)
def test_heuristic_sweeps_are_reproducible_and_the_shipped_fit_tracks_fp32():
    """Sweeps with cudnn.benchmark off (cuDNN's heuristics pick every kernel, PyTorch's default),
    never fitted on: a repeat agrees with its original far more than an autotuned one does, and
    the shipped model keeps its fp32 level on few SMs (docs/wave_model_evaluation.md)."""
    import eval_wave_model as ev

    sweeps = ev.load_sweeps(ROOT / "benchmarks" / "staircases_heuristic")
    assert {s["sms"] for s in sweeps} == {8, 16, 132} and len(sweeps) == 444
    few = [r for r in ev.noise_ceiling(sweeps) if "_132sm" not in r["measured"]]
    agree, pairs = sum(r["agree"] for r in few), sum(r["pairs"] for r in few)
    assert pairs > 5000 and agree / pairs >= 0.96  # reached: 97.2 % of 6335 (96.3–98.8 % per setting)
    target = get_target("h200")
    params = {dt: target.wave_params(dt) for dt in ("fp16", "fp32")}
    fp32 = ev.score([s for s in sweeps if s["dtype"] == "fp32" and s["sms"] < 132], target, params)
    assert fp32["wave"]["agreement"] >= 0.83 and fp32["wave"]["regret"] <= 0.0225  # 83.9 % / 2.22 %
    every = ev.score(sweeps, target, params)
    assert every["wave"]["agreement"] >= 0.705 and every["wave"]["regret"] <= 0.032  # 70.8 % / 3.15 %
    assert every["wave"]["agreement"] > every["tile128"]["agreement"]
    assert every["wave"]["regret"] < every["tile128"]["regret"]


ROUND4 = ROOT / "benchmarks" / "results" / "h200_round4"
ROUND5 = ROOT / "benchmarks" / "results" / "h200_round5"
ROUND6 = ROOT / "benchmarks" / "results" / "h200_round6"
ROUND7 = ROOT / "benchmarks" / "results" / "h200_round7"  # held out: not in benchmarks/staircases/
ROUND8 = ROOT / "benchmarks" / "results" / "h200_round8"  # held out, like round seven
ROUND9 = ROOT / "benchmarks" / "results" / "h200_round9"  # held out, batch-1 layers
ROUND10 = ROOT / "benchmarks" / "results" / "h200_round10"  # held out, pre-registered test of size_class
ROUND11 = ROOT / "benchmarks" / "results" / "h200_round11"  # a second one, the fit unchanged
ROUND12 = ROOT / "benchmarks" / "results" / "h200_round12"  # a third, first measured on H100s


def _held_out_round(record_dir: Path, number: int, every: list[dict]) -> tuple[dict, list[dict], dict]:
    """(the round's record, its first-measurement default-limit sweeps, the fit shipped before it):
    checks that the record's sweeps are all committed and that the fit saw none of them."""
    record = json.loads((record_dir / f"round{number}_sweeps.json").read_text())
    ids = {i for i in record["sweeps"]["default_limit"] if not i.endswith("_repeat")}
    sweeps = [s for s in every if s["id"] in ids]
    assert len(sweeps) == len(ids)
    fit_doc = json.loads((record_dir / f"fit_before_round{number}.json").read_text())
    assert not ids & {Path(p).stem for p in fit_doc["sweeps"]}  # none of them was fitted on
    return record, sweeps, {dt: WaveParams.from_json(fit_doc["params"][dt]) for dt in ("fp16", "fp32")}


@pytest.mark.skipif(not ROUND4.is_dir(), reason="no round-four record")
def test_round_four_scored_with_the_fit_shipped_before_it():
    """Round four (6 new Jetson-typical shapes at 8/16/132 SMs, and w–ab at 8/16 SMs) scored with
    the fit of commit cf4b182, fitted on rounds one to three only: issue 3's two figures on its 60
    default-limit sweeps (repeats excluded), as docs/wave_model_evaluation.md reports them. The regret meets
    the goal; the agreement misses it by one pair."""
    import eval_wave_model as ev

    _, sweeps, params = _held_out_round(ROUND4, 4, ev.load_sweeps())
    assert len(sweeps) == 60
    scores = ev.score(sweeps, get_target("h200"), params)
    wave = scores["wave"]
    assert wave["pairs"] == 1631
    # reached: 1304 of 1631 pairs, 79.95 % — one pair short of the 80 %
    assert round(wave["agreement"] * wave["pairs"]) >= 1304
    assert wave["regret"] <= 0.015  # reached: 1.44 % (the goal: 1.5 %)
    assert wave["agreement"] > scores["tile128"]["agreement"] + 0.05  # 74.4 %
    assert scores["constant"]["agreement"] < 0.66  # 64.7 %: the reference set scores 65 %


@pytest.mark.skipif(not ROUND5.is_dir(), reason="no round-five record")
def test_round_five_scored_with_the_fit_shipped_before_it():
    """Round five (6 new deployment layers, ai–an, at 8/16/132 SMs) scored with the fit of commit
    d5f5956, which never saw them: the figures docs/wave_model_evaluation.md reports, goal missed — 70.2 % /
    2.53 % over all 36 default-limit sweeps, 82.1 % / 1.71 % at 8 SMs. On the full GPU a second
    measurement of the same 12 sweeps agrees with the first on fewer pairs (46.6 %) than the model
    does (48.2 %): no width model can do much better there."""
    import eval_wave_model as ev

    every = ev.load_sweeps()
    _, sweeps, params = _held_out_round(ROUND5, 5, every)
    assert len(sweeps) == 36
    target = get_target("h200")
    scores = ev.score(sweeps, target, params)
    wave = scores["wave"]
    assert (wave["pairs"], round(wave["agreement"] * wave["pairs"])) == (979, 687)
    assert wave["regret"] == pytest.approx(0.0253, abs=5e-5)
    assert wave["agreement"] > scores["tile128"]["agreement"] + 0.05  # 65.1 %
    assert wave["regret"] < scores["tile128"]["regret"] - 0.01  # 3.59 %
    eight = ev.score([s for s in sweeps if s["sms"] == 8], target, params)["wave"]
    assert eight["agreement"] >= 0.82 and eight["regret"] <= 0.0175  # 82.1 % / 1.71 %
    full = [s for s in sweeps if s["sms"] == 132]
    model_full = ev.score(full, target, params)["wave"]
    full_ids = {s["id"] for s in full}
    repeats = [s for s in every if s["id"].removesuffix("_repeat") in full_ids]
    ceiling = [r for r in ev.noise_ceiling(repeats) if not r["measured"].endswith("_repeat")]
    assert len(ceiling) == 12
    repeat_agreement = sum(r["agree"] for r in ceiling) / sum(r["pairs"] for r in ceiling)
    assert repeat_agreement < 0.5 and model_full["agreement"] > repeat_agreement  # 46.6 % < 48.2 %


@pytest.mark.skipif(not ROUND6.is_dir(), reason="no round-six record")
def test_round_six_scored_with_the_fit_shipped_before_it():
    """Round six (6 new deployment layers, ao–at, at 8/16/132 SMs) scored with the fit of commit
    f1dd72a (rounds one to five, with the fp16 family at 32), which never saw them: 71.3 % / 2.37 %
    over the 36 default-limit sweeps, where the fit before that family (239f504) scores 71.3 % /
    2.66 % — the family lowers the regret on data measured after it was added. With every engine
    timed the 8- and 16-SM sweeps meet issue 3's goal."""
    import eval_wave_model as ev

    record, sweeps, params = _held_out_round(ROUND6, 6, ev.load_sweeps())
    assert len(sweeps) == 36
    assert [f.name for f in params["fp16"].families][:3] == ["tc-aligned64", "tc-aligned32", "tc-aligned8"]
    target = get_target("h200")
    scores = ev.score(sweeps, target, params)
    wave = scores["wave"]
    assert (wave["pairs"], round(wave["agreement"] * wave["pairs"])) == (975, 695)
    assert wave["regret"] == pytest.approx(0.0237, abs=5e-5)
    assert wave["regret"] < scores["tile128"]["regret"] - 0.015  # 3.93 %
    # the same fit without the family at 32 (its fp16 families dropped to 64 / 8 / padded, as the
    # fit of 239f504 had them) predicts the same classes and recommends worse widths
    two = {**params, "fp16": replace(params["fp16"], families=tuple(
        f for f in params["fp16"].families if f.name != "tc-aligned32"))}  # fmt: skip
    without = ev.score(sweeps, target, two)["wave"]
    assert without["agreement"] == pytest.approx(wave["agreement"], abs=0.005)
    assert without["regret"] > wave["regret"] + 0.002
    engines = record["sweeps"]["all_engines"]
    timed = [s for s in ev.load_sweeps(ROOT / "benchmarks" / "staircases_all_engines") if s["id"] in engines]
    assert len(timed) == 36
    for sms, (agree, most) in {8: (0.83, 0.0065), 16: (0.83, 0.0120)}.items():
        w = ev.score([s for s in timed if s["sms"] == sms], target, params)["wave"]
        assert w["agreement"] >= agree and w["regret"] <= most  # 83.6 % / 0.62 %, 83.1 % / 1.19 %


@pytest.mark.skipif(not ROUND7.is_dir(), reason="no round-seven record")
def test_round_seven_is_held_out_and_scored_with_the_shipped_fit():
    """Round seven (4 shapes with input channels 40, 80, 32, 112) is kept in its record, out of
    the fitted sweeps, and scored with the fit shipped when it was measured — today's: 60.9 % /
    2.49 % over its 24 default-limit sweeps (fp32 at 8 SMs 85.0 % / 1.31 %, fp16 53.6 % / 1.39 %)."""
    import eval_wave_model as ev

    record, sweeps, params = _held_out_round(ROUND7, 7, ev.load_sweeps(ROUND7 / "default_limit"))
    assert len(sweeps) == 24 and not list((ROOT / "benchmarks" / "staircases").glob("h200_au_*"))
    shipped = json.loads((ROOT / "deployopt" / "targets" / "fitted" / "h200.json").read_text())
    assert not {s["id"] for s in sweeps} & {Path(p).stem for p in shipped["sweeps"]}
    target = get_target("h200")
    scores = ev.score(sweeps, target, params)
    wave = scores["wave"]
    assert (wave["pairs"], round(wave["agreement"] * wave["pairs"])) == (632, 385)
    assert wave["regret"] == pytest.approx(0.0249, abs=5e-5)
    assert wave["agreement"] > scores["tile128"]["agreement"] and wave["regret"] < scores["tile128"]["regret"]
    fp32 = ev.score([s for s in sweeps if s["dtype"] == "fp32" and s["sms"] == 8], target, params)["wave"]
    assert fp32["agreement"] >= 0.84  # 85.0 %
    timed = ev.load_sweeps(ROUND7 / "all_engines")
    assert sorted(s["id"] for s in timed) == record["sweeps"]["all_engines"] and len(timed) == 8
    eight = ev.score(timed, target, params)["wave"]
    assert eight["regret"] <= 0.012  # 1.11 %; agreement 70.4 % (fp16 45.9 %: cuBLAS/CUTLASS 1×1 kernels)


def _gemm_terms(params: WaveParams) -> dict:
    return {k: v for k, v in params.to_json().items() if not k.startswith("dw_")}


@pytest.mark.skipif(not ROUND8.is_dir(), reason="no round-eight record")
def test_round_eight_is_held_out_and_scored_with_the_shipped_fit():
    """Round eight (8 deployment layers, ay–bf, at 8/16/132 SMs in three search modes, measured
    twice with the default search) stays out of the fitted sweeps and is scored with the fit
    shipped when it was measured — today's (docs/wave_model_evaluation.md): 73.2 % / 2.14 % over its 48
    default-limit sweeps, 83.4 % / 1.51 % at 8 SMs, 80.5 % / 1.90 % at 16; every engine timed 86.5 %
    / 1.23 % and 81.7 % / 1.50 %. A second measurement of the same sweeps, scored as a model of the
    first, agrees on 76.3 % of their pairs: below the issue's 80 % itself."""
    import eval_wave_model as ev

    record, sweeps, params = _held_out_round(ROUND8, 8, ev.load_sweeps(ROUND8 / "default_limit"))
    assert len(sweeps) == 48
    shipped = json.loads((ROOT / "deployopt" / "targets" / "fitted" / "h200.json").read_text())
    # the shipped GEMM terms (its depthwise terms, added later, come from depthwise sweeps alone)
    assert {dt: _gemm_terms(params[dt]) for dt in params} == {
        dt: _gemm_terms(WaveParams.from_json(shipped["params"][dt])) for dt in ("fp16", "fp32")
    }
    assert not {s["id"] for s in sweeps} & {Path(p).stem for p in shipped["sweeps"]}
    target = get_target("h200")
    scores = ev.score(sweeps, target, params)
    wave = scores["wave"]
    assert (wave["pairs"], round(wave["agreement"] * wave["pairs"])) == (1312, 960)
    assert wave["regret"] == pytest.approx(0.0214, abs=5e-5)
    assert wave["agreement"] > scores["tile128"]["agreement"] + 0.03  # 69.4 %
    assert wave["regret"] < scores["tile128"]["regret"] - 0.01  # 3.22 %
    for sms, (agree, most) in {8: (0.834, 0.0152), 16: (0.805, 0.0191)}.items():
        w = ev.score([s for s in sweeps if s["sms"] == sms], target, params)["wave"]
        assert w["agreement"] >= agree and w["regret"] <= most
    timed = ev.load_sweeps(ROUND8 / "all_engines")
    assert sorted(s["id"] for s in timed) == record["sweeps"]["all_engines"] and len(timed) == 48
    for sms, (agree, most) in {8: (0.864, 0.0124), 16: (0.816, 0.0151)}.items():
        w = ev.score([s for s in timed if s["sms"] == sms], target, params)["wave"]
        assert w["agreement"] >= agree and w["regret"] <= most  # 86.5 % / 1.23 %, 81.7 % / 1.50 %
    repeats = ev.load_sweeps(ROUND8 / "repeats")
    assert len(repeats) == 48
    ceiling = [r for r in ev.noise_ceiling(sweeps + repeats) if not r["measured"].endswith("_repeat")]
    assert len(ceiling) == 48
    agree, pairs = sum(r["agree"] for r in ceiling), sum(r["pairs"] for r in ceiling)
    assert (agree, pairs) == (1001, 1312)  # 76.3 %: the repeat as a model of the first measurement


@pytest.mark.skipif(not ROUND9.is_dir(), reason="no round-nine record")
def test_round_nine_is_held_out_and_scored_with_the_shipped_fit():
    """Round nine (8 batch-1 deployment layers, bg–bn, at 8/16/132 SMs, default search measured
    twice, every engine timed once) is out of the fitted sweeps and scored with today's fit:
    64.6 % / 2.70 % (default), 64.4 % / 2.83 % (every engine). Batch-1 layers are small: a second
    measurement agrees with the first on 69.2, 63.5 and 49.4 % of pairs at 8, 16 and 132 SMs, and
    the model agrees more at every SM count (71.8, 67.4, 53.7 %)."""
    import eval_wave_model as ev

    record, sweeps, params = _held_out_round(ROUND9, 9, ev.load_sweeps(ROUND9 / "default_limit"))
    assert len(sweeps) == 48
    shipped = json.loads((ROOT / "deployopt" / "targets" / "fitted" / "h200.json").read_text())
    assert {dt: _gemm_terms(params[dt]) for dt in params} == {
        dt: _gemm_terms(WaveParams.from_json(shipped["params"][dt])) for dt in ("fp16", "fp32")
    }
    target = get_target("h200")
    wave = ev.score(sweeps, target, params)["wave"]
    assert (wave["pairs"], round(wave["agreement"] * wave["pairs"])) == (1250, 808)
    assert wave["regret"] == pytest.approx(0.0270, abs=5e-5)
    timed = ev.load_sweeps(ROUND9 / "all_engines")
    assert sorted(s["id"] for s in timed) == record["sweeps"]["all_engines"] and len(timed) == 48
    w = ev.score(timed, target, params)["wave"]
    assert (w["pairs"], round(w["agreement"] * w["pairs"])) == (1234, 795)
    repeats = ev.load_sweeps(ROUND9 / "repeats")
    assert len(repeats) == 48
    ceiling = [r for r in ev.noise_ceiling(sweeps + repeats) if not r["measured"].endswith("_repeat")]
    for sms, repeat_share in {8: 295 / 426, 16: 275 / 433, 132: 193 / 391}.items():
        rows = [r for r in ceiling if r["measured"].endswith(f"_{sms}sm")]
        assert sum(r["agree"] for r in rows) / sum(r["pairs"] for r in rows) == pytest.approx(repeat_share)
        model = ev.score([s for s in sweeps if s["sms"] == sms], target, params)["wave"]
        assert model["agreement"] > repeat_share


@pytest.mark.skipif(not ROUND10.is_dir(), reason="no round-ten record")
def test_round_ten_tests_size_class_as_pre_registered():
    """Round ten's shapes were chosen after size_class was committed, and the class of each sweep
    written down before measuring (prediction.json): the code still gives those classes. Measured:
    wave-bound sweeps 82.5 % / 1.81 % with the default search (agreement as expected, regret not:
    fp16 multiples of 64 where cuDNN ran a slower grid), 91.3 % / 0.98 % with every engine timed."""
    import eval_wave_model as ev
    import score_rounds

    _, sweeps, params = _held_out_round(ROUND10, 10, ev.load_sweeps(ROUND10 / "default_limit"))
    assert len(sweeps) == 48 and len(ev.load_sweeps(ROUND10 / "all_engines")) == 31
    prediction = json.loads((ROUND10 / "prediction.json").read_text())
    target = get_target("h200")
    for s in sweeps:
        median = statistics.median(ev.predictions("wave", s, target, params[s["dtype"]]))
        assert prediction["classes"][s["id"]] == size_class(median, params[s["dtype"]]), s["id"]
    cells = score_rounds.size_cells([10])
    default = score_rounds.pooled(cells, "default_limit", "wave-bound")
    timed = score_rounds.pooled(cells, "all_engines", "wave-bound")
    assert default is not None and timed is not None
    assert (default["sweeps"], round(default["agreement"] * default["pairs"]), default["pairs"]) == (
        30,
        695,
        842,
    )
    assert default["regret"] == pytest.approx(0.0181, abs=5e-5)
    assert timed["sweeps"] == 26 and timed["agreement"] >= 0.91 and timed["regret"] <= 0.0099


@pytest.mark.skipif(not ROUND10.is_dir(), reason="no round-ten record")
def test_wave_bound_convs_meet_the_goal_on_seven_held_out_rounds():
    """What SIZE_CLASS_MEANING tells users, checked on rounds four to ten (new shapes, each
    scored with the fit shipped before it; `score_rounds.py --by-size`): convs predicted at ≥ 4×
    the fixed cost meet issue 3's goal (default search 81.5 % / 1.47 %, every engine 87.7 % /
    0.95 %); under 1.75× a second measurement agrees with the first on under half of the pairs,
    in between on about two in three, and the model is no better than that there."""
    import score_rounds

    cells = score_rounds.size_cells([4, 5, 6, 7, 8, 9, 10])

    def get(mode: str, cls: str, sms: int | None = None) -> dict:
        got = score_rounds.pooled(cells, mode, cls, sms)
        assert got is not None
        return got

    for mode, agree, most in (("default_limit", 0.814, 0.0148), ("all_engines", 0.876, 0.0096)):
        wave = get(mode, "wave-bound")
        assert wave["agreement"] >= agree and wave["regret"] <= most, (mode, wave)
    for sms in (8, 16):  # with every engine timed, at Jetson-like SM counts on their own too
        wave = get("all_engines", "wave-bound", sms)
        assert wave["agreement"] >= 0.87 and wave["regret"] <= 0.0103, (sms, wave)
    assert get("repeat", "launch-bound")["agreement"] < 0.5
    assert 0.6 < get("repeat", "small")["agreement"] < 0.72
    assert get("default_limit", "launch-bound")["agreement"] < 0.5
    assert get("default_limit", "small")["agreement"] < 0.72
    assert get("repeat", "wave-bound")["agreement"] > 0.85


@pytest.mark.skipif(not ROUND11.is_dir(), reason="no round-eleven record")
def test_round_eleven_a_second_pre_registered_test_fails_with_the_default_search():
    """Round eleven: eight new shapes, classes written by preregister_round.py and committed
    (86efb8d) before measuring, with the fit of round ten (unchanged). Measured: wave-bound sweeps
    78.6 % / 1.63 % with the default search (the expectation, >= 80 % / <= 1.5 %, fails in both),
    87.6 % / 0.77 % with every engine timed at 8, 16 and 132 SMs (meets it); a second measurement
    of the default-search sweeps, as a "model" of the first, gets 87.2 % of the wave-bound pairs,
    so the model's misses there are not run-to-run noise."""
    import eval_wave_model as ev
    import preregister_round
    import score_rounds

    _, sweeps, _ = _held_out_round(ROUND11, 11, ev.load_sweeps(ROUND11 / "default_limit"))
    assert len(sweeps) == 48 and len(ev.load_sweeps(ROUND11 / "all_engines")) == 48
    assert len(ev.load_sweeps(ROUND11 / "repeats")) == 48
    prediction = json.loads((ROUND11 / "prediction.json").read_text())
    fit = json.loads((ROUND11 / "fit_before_round11.json").read_text())
    assert fit["params"] == json.loads((ROUND10 / "fit_before_round10.json").read_text())["params"]
    shapes = sorted({s["id"].split("_")[1] for s in sweeps})
    assert preregister_round.classes(shapes, [8, 16, 132], list(range(16, 513, 16))) == prediction["classes"]
    assert prediction["counts"] == {"launch-bound": 4, "small": 12, "wave-bound": 32}
    cells = score_rounds.size_cells([11])
    default = score_rounds.pooled(cells, "default_limit", "wave-bound")
    timed = score_rounds.pooled(cells, "all_engines", "wave-bound")
    assert default is not None and timed is not None
    assert (default["sweeps"], round(default["agreement"] * default["pairs"]), default["pairs"]) == (
        32,
        679,
        864,
    )
    assert default["regret"] == pytest.approx(0.0163, abs=5e-5)
    assert timed["sweeps"] == 32 and round(timed["agreement"], 3) == 0.876 and timed["regret"] < 0.008
    repeat = score_rounds.pooled(cells, "repeat", "wave-bound")
    assert repeat is not None and repeat["sweeps"] == 32 and round(repeat["agreement"], 3) == 0.872


@pytest.mark.skipif(not ROUND11.is_dir(), reason="no round-eleven record")
def test_wave_bound_convs_on_eight_held_out_rounds():
    """Rounds four to eleven pooled (docs/wave_model_evaluation.md's headline): with every engine timed the
    wave-bound convs meet the goal (87.7 % / 0.92 %, and at 8 and 16 SMs on their own); with
    PyTorch's default search they sit on its edge, 81.0 % / 1.501 % (the regret just over)."""
    import score_rounds

    cells = score_rounds.size_cells([4, 5, 6, 7, 8, 9, 10, 11])
    default = score_rounds.pooled(cells, "default_limit", "wave-bound")
    timed = score_rounds.pooled(cells, "all_engines", "wave-bound")
    assert default is not None and timed is not None
    assert (default["sweeps"], default["pairs"], timed["sweeps"], timed["pairs"]) == (181, 5022, 170, 4726)
    assert round(default["agreement"], 3) == 0.810 and default["regret"] == pytest.approx(0.01501, abs=5e-6)
    assert round(timed["agreement"], 3) == 0.877 and round(timed["regret"], 4) == 0.0092
    for sms in (8, 16):
        wave = score_rounds.pooled(cells, "all_engines", "wave-bound", sms)
        assert wave is not None and wave["agreement"] >= 0.87 and wave["regret"] <= 0.0099, (sms, wave)


@pytest.mark.skipif(not (ROUND12 / "default_limit").is_dir(), reason="round twelve not measured on the H200")
def test_round_twelve_on_the_h200_meets_its_preregistered_expectation():
    """Round twelve: classes and expectation committed (161dbc7) before anything was measured, the
    fit still round ten's. On the H200 (2026-12-05) every sweep's class is the pre-registered one,
    and the wave-bound sweeps meet the expectation with the default search: 83.0 % / 1.22 %
    (727 of 876 pairs); every engine at 16 SMs, all 16 sweeps: 83.9 % / 0.84 %."""
    import eval_wave_model as ev
    import score_rounds

    _, sweeps, params = _held_out_round(ROUND12, 12, ev.load_sweeps(ROUND12 / "default_limit"))
    assert len(sweeps) == 48 and len(ev.load_sweeps(ROUND12 / "all_engines")) == 16
    prediction = json.loads((ROUND12 / "prediction.json").read_text())
    fit = json.loads((ROUND12 / "fit_before_round12.json").read_text())
    assert fit["params"] == json.loads((ROUND10 / "fit_before_round10.json").read_text())["params"]
    target = get_target("h200")
    for sweep in sweeps:
        assert ev.sweep_class(sweep, target, params[sweep["dtype"]]) == prediction["classes"][sweep["id"]]
    cells = score_rounds.size_cells([12])
    default = score_rounds.pooled(cells, "default_limit", "wave-bound")
    assert default is not None
    assert (default["sweeps"], round(default["agreement"] * default["pairs"]), default["pairs"]) == (
        32,
        727,
        876,
    )
    assert default["agreement"] >= 0.80 and default["regret"] <= 0.015
    assert round(default["regret"], 4) == 0.0122
    timed = ev.score(ev.load_sweeps(ROUND12 / "all_engines"), target, params)["wave"]
    assert (round(100 * timed["agreement"], 1), round(100 * timed["regret"], 2)) == (83.9, 0.84)


@pytest.mark.skipif(not (ROUND12 / "default_limit").is_dir(), reason="round twelve not measured on the H200")
def test_wave_bound_convs_on_nine_held_out_rounds_meet_the_goal_with_either_search():
    """Rounds four to twelve pooled (docs/wave_model_evaluation.md's headline since round twelve's H200
    sweeps): wave-bound convs meet the goal with every engine timed (87.5 % / 0.92 %) and, just, with
    PyTorch's default search (81.3 % / 1.46 %, where rounds four to eleven gave 1.501 %)."""
    import score_rounds

    cells = score_rounds.size_cells(list(range(4, 13)))
    default = score_rounds.pooled(cells, "default_limit", "wave-bound")
    timed = score_rounds.pooled(cells, "all_engines", "wave-bound")
    assert default is not None and timed is not None
    assert (default["sweeps"], default["pairs"], timed["sweeps"], timed["pairs"]) == (213, 5898, 183, 5104)
    assert round(default["agreement"], 3) == 0.813 and round(default["regret"], 4) == 0.0146
    assert round(timed["agreement"], 3) == 0.875 and round(timed["regret"], 4) == 0.0092


@pytest.mark.skipif(not ROUND11.is_dir(), reason="no round-eleven record")
def test_with_every_engine_timed_the_model_is_as_good_as_a_second_measurement():
    """Round eleven's 48 every-engine sweeps, measured again in new processes (all_repeats/): a
    second measurement scored as a "model" of the first does no better than the wave model in any
    size class (wave-bound 85.9 % against the model's 87.6 %, small 63.2 % against 65.5 %,
    launch-bound 43.3 % both). With a TensorRT-like search, what the model misses over all convs is
    what the measurement itself does not reproduce."""
    import eval_wave_model as ev
    import score_rounds

    assert len(ev.load_sweeps(ROUND11 / "all_repeats")) == 48
    cells = score_rounds.size_cells([11])
    for cls, sweeps in (("wave-bound", 32), ("small", 12), ("launch-bound", 4)):
        model = score_rounds.pooled(cells, "all_engines", cls)
        repeat = score_rounds.pooled(cells, "repeat_all_engines", cls)
        assert model is not None and repeat is not None
        assert model["sweeps"] == repeat["sweeps"] == sweeps and model["pairs"] == repeat["pairs"], cls
        assert model["agreement"] >= repeat["agreement"], (cls, model, repeat)
    repeat = score_rounds.pooled(cells, "repeat_all_engines", "wave-bound")
    assert repeat is not None and round(repeat["agreement"], 3) == 0.859
    # rounds ten and eleven pooled (round ten's 31 every-engine sweeps, 8 and 16 SMs, measured
    # again too): a tie on wave-bound convs, the model ahead on small ones, and over every pair
    # of both rounds the model at 83.4 % where the repeat gets 82.7 %
    assert len(ev.load_sweeps(ROUND10 / "all_repeats")) == 31
    cells = score_rounds.size_cells([10, 11])
    agree = {"all_engines": 0.0, "repeat_all_engines": 0.0}
    for cls in ("wave-bound", "small", "launch-bound"):
        model = score_rounds.pooled(cells, "all_engines", cls)
        repeat = score_rounds.pooled(cells, "repeat_all_engines", cls)
        assert model is not None and repeat is not None and model["pairs"] == repeat["pairs"], cls
        assert model["agreement"] >= repeat["agreement"] - 0.001, (cls, model, repeat)
        agree["all_engines"] += model["agreement"] * model["pairs"] / 2134
        agree["repeat_all_engines"] += repeat["agreement"] * repeat["pairs"] / 2134
    assert round(agree["all_engines"], 3) == 0.834 and round(agree["repeat_all_engines"], 3) == 0.827


def test_tie_break_study_scores_both_tie_rules_for_every_model():
    """A flat prediction recommends K itself under issue 3's rule and the 32-aligned width of the
    window under the alignment prior: on a sweep where 32-aligned widths are faster, only the
    second has no regret, for the constant model as much as for any other."""
    import eval_wave_model as ev

    ks = [144, 160, 176]
    shape = ConvShape(8, 64, 14, 14, 144, 3, 3, (1, 1), (1, 1))
    sweep = {"id": "x", "dtype": "fp16", "sms": 8, "shape": shape, "ks": ks, "measured": [12.0, 10.0, 12.0]}
    target = get_target("h200")
    study = ev.tie_break_study([sweep], target, {"fp16": target.wave_params("fp16")})
    const = study["constant"]["all"]
    # K = 176: window [158.4, 176] = {160, 176}; the rule keeps 176 (12 vs best 10) → 0.2 / 3 widths
    assert const["ties_wider"] == pytest.approx(0.2 / 3)
    assert const["ties_aligned32"] == pytest.approx(0.0)
    assert set(study) == {"wave", "flops", "constant", "tile128"}
    assert study["constant"]["fp16 8 SMs"] == const


def test_noise_ceiling_scores_each_repeat_against_its_original():
    import eval_wave_model as ev

    ks = [160, 176, 192, 208]  # windows [0.9·K, K] hold two widths from K = 176 on
    orig = {"id": "x_fp16_132sm", "ks": ks, "measured": [10.0, 10.1, 12.0, 12.0]}
    rep = {"id": "x_fp16_132sm_repeat", "ks": ks, "measured": [10.0, 11.5, 11.6, 12.0]}
    alone = {"id": "y_fp16_8sm", "ks": ks, "measured": [1.0, 1.0, 1.0, 1.0]}
    rows = ev.noise_ceiling([orig, rep, alone])
    # original measured flat, up, flat; the repeat says up, flat, +3.4 % (agrees with nothing)
    # repeat measured up, flat, +3.4 % (not counted); the original says flat, up
    assert [(r["measured"], r["as_model"], r["agree"], r["pairs"]) for r in rows] == [
        ("x_fp16_132sm", "x_fp16_132sm_repeat", 0, 3),
        ("x_fp16_132sm_repeat", "x_fp16_132sm", 0, 2),
    ]
    # the repeat recommends the measured best of the original at every K
    assert rows[0]["regret"] == pytest.approx(0.0)
    # the original ties at K = 192/208 and keeps 208 (12.0); the repeat measured 11.6 at 192
    assert rows[1]["regret"] == pytest.approx((12.0 / 11.6 - 1) / 4)


def test_alignment_oracle_finds_a_sawtooth_the_model_misses():
    """A sweep measured as the model × 1.3 at K ≡ 16 mod 64: the model misses those steps, the
    in-sample oracle (one factor per K mod 64) finds them all and says which factor it used."""
    import eval_wave_model as ev

    target = get_target("h200", sms=8)
    params = {"fp16": target.wave_params("fp16")}
    shape = ConvShape(8, 128, 28, 28, 16)
    ks = list(range(16, 257, 16))
    base = [predict(shape.with_channels(k=k), target).predicted_us for k in ks]
    measured = [b * (1.3 if k % 64 == 16 else 1.0) for b, k in zip(base, ks)]
    sweep = {"id": "saw_fp16_8sm", "dtype": "fp16", "sms": 8, "shape": shape, "ks": ks, "measured": measured}
    out = ev.alignment_oracle([sweep], target, params)
    row = out["sweeps"][0]
    assert row["model"] < row["pairs"] and row["oracle"] == row["pairs"]
    assert row["factors"][0] == 1.0 and row["factors"][1] >= 1.1  # a step up at K ≡ 16 mod 64
    assert out["overall"]["oracle"] == 1.0 and out["overall"]["model"] < 1.0


# --- depthwise convs (their own path; benchmarks/results/h200_depthwise/) ---------------------------
DEPTHWISE_RECORD = ROOT / "benchmarks" / "results" / "h200_depthwise"


def test_depthwise_width_sweeps_keep_the_conv_depthwise():
    dw = ConvShape(8, 144, 56, 56, 144, 3, 3, groups=144)
    wider = dw.with_out_channels(192)
    assert (wider.c, wider.k, wider.groups) == (192, 192, 192) and wider.is_depthwise
    mult2 = ConvShape(1, 32, 28, 28, 64, 3, 3, groups=32).with_out_channels(96)
    assert (mult2.c, mult2.k, mult2.groups) == (48, 96, 48)
    with pytest.raises(ValueError, match="multiplier 2"):
        ConvShape(1, 32, 28, 28, 64, 3, 3, groups=32).with_out_channels(95)
    plain = ConvShape(8, 128, 28, 28, 64).with_out_channels(80)
    assert (plain.c, plain.k, plain.groups) == (128, 80, 1)
    t = get_target("orin-nano-8gb")
    preds = staircase(dw, t, "fp16", [16, 32, 48, 64, 512, 1024])
    assert [p.family for p in preds] == ["depthwise-direct"] * 6
    # blocks of 1024 outputs over C = K channels, time never falls as the layer widens
    assert [p.blocks for p in preds] == [-(-8 * 56 * 56 * k // 1024) for k in (16, 32, 48, 64, 512, 1024)]
    us = [p.predicted_us for p in preds]
    assert us == sorted(us) and us[-1] > 10 * us[0]


def test_fit_depthwise_recovers_its_terms_and_fit_routes_points_by_kind():
    t = get_target("h200")
    truth = replace(t.wave_params("fp16"), dw_fixed_us=4.0, dw_ns_per_output=0.05, dw_ns_per_tap=0.02)
    dws = [
        ConvShape(n, k, hw, hw, k, r, r, groups=k, pad=(r // 2, r // 2))
        for n, hw, r in ((1, 112, 3), (8, 28, 3), (8, 14, 5))
        for k in range(16, 400, 48)
    ]
    sms = [8, 16, 132]
    points = [
        {
            "id": f"s{i % 3}",
            "shape": s,
            "sms": sms[i % 3],
            "measured_us": _evaluate(s, t, truth, sms[i % 3]).predicted_us,
        }
        for i, s in enumerate(dws)
    ]
    start = t.wave_params("fp16")
    fitted = fit_depthwise(points, t, start)
    assert (fitted.dw_fixed_us, fitted.dw_ns_per_output, fitted.dw_ns_per_tap) == pytest.approx(
        (4.0, 0.05, 0.02)
    )
    assert "3 sweeps" in fitted.dw_source
    # fit() with depthwise points alone: only the depthwise terms move
    routed = fit(points, t, "fp16")
    assert (
        routed.dw_ns_per_tap == pytest.approx(0.02) and routed.macs_per_us_per_sm == start.macs_per_us_per_sm
    )
    with pytest.raises(ValueError, match="depthwise convs only"):
        fit_depthwise([*points, {"shape": ConvShape(1, 64, 14, 14, 64), "measured_us": 5.0}], t, start)
    # and the terms survive JSON (older profiles without them load with the start values)
    assert WaveParams.from_json(fitted.to_json()) == fitted
    old = {k: v for k, v in start.to_json().items() if not k.startswith("dw_")}
    assert WaveParams.from_json(old).dw_fixed_us == WaveParams.dw_fixed_us


@pytest.mark.skipif(not DEPTHWISE_RECORD.is_dir(), reason="no committed depthwise sweeps")
def test_depthwise_path_predicts_measured_h200_depthwise_convs():
    import statistics

    import eval_wave_model as ev

    sweeps = ev.load_sweeps(DEPTHWISE_RECORD / "default_limit")
    assert len(sweeps) == 35 and all(s["shape"].is_depthwise for s in sweeps)
    t = get_target("h200")
    ratios, gemm_ratios = [], []
    for s in sweeps:
        params = t.wave_params(s["dtype"])
        for k, measured in zip(s["ks"], s["measured"]):
            shape = s["shape"].with_out_channels(k)
            assert shape.c == shape.k == shape.groups == k
            ratios.append(_evaluate(shape, t, params, s["sms"]).predicted_us / measured)
            gemm_ratios.append(_evaluate_gemm(shape, t, params, s["sms"]).predicted_us / measured)
    # the shipped depthwise terms (fitted on these sweeps): the median point within 16 % ...
    assert statistics.median(abs(r - 1) for r in ratios) < 0.16  # reached: 15.8 %
    assert 0.8 < statistics.median(ratios) < 1.25
    # ... where one GEMM per group predicted them a median 20× too slow
    assert statistics.median(gemm_ratios) > 15
    recorded = json.loads((ROOT / "deployopt" / "targets" / "fitted" / "h200.json").read_text())
    assert sorted(Path(p).stem for p in recorded["depthwise_sweeps"]) == sorted(s["id"] for s in sweeps)


@pytest.mark.skipif(
    not (ROOT / "benchmarks" / "results" / "h200_networks").is_dir(), reason="no network record"
)
def test_depthwise_path_on_networks_no_fit_has_seen():
    """EfficientNet-B0 and MobileNetV3-Large, every conv timed alone on the H200 after the depthwise
    terms were fitted (benchmarks/network_convs.py): their depthwise convs' summed time is predicted
    at 0.75–1.11× at 8 and 132 SMs, batch 1 and 8; as one GEMM per group it was 3–50× too slow."""
    import eval_depthwise

    rows = eval_depthwise.networks_check(
        get_target("h200"), {dt: get_target("h200").wave_params(dt) for dt in ("fp16", "fp32")}
    )
    assert len(rows) == 8 and {r["depthwise"]["layers"] for r in rows.values()} == {15, 16}
    for name, row in rows.items():
        dw = row["depthwise"]
        assert 0.7 < dw["after_us"] / dw["measured_us"] < 1.25, name  # reached: 0.75 … 1.11
        assert dw["before_us"] / dw["measured_us"] > 3, name
        assert dw["level_error_after"] < 0.35 < dw["level_error_before"], name
        # the other convs take the GEMM path, unchanged by the depthwise one
        assert row["other"]["before_us"] == row["other"]["after_us"]


def test_int8_defaults_say_they_come_from_the_fp16_fit() -> None:
    """There is no INT8 fit: the defaults are the fp16 one at twice the rate, and the source line
    (printed by `targets`) said "the H200 int8 fit"."""
    from deployopt.waves import default_params

    fp16, int8 = default_params((8, 7), "fp16", 625), default_params((8, 7), "int8", 625)
    assert "the H200 fp16 fit at twice its rate (no INT8 fit exists)" in int8.source
    assert "int8 fit" not in int8.source and "the H200 fp16 fit scaled" in fp16.source
    assert int8.macs_per_us_per_sm == pytest.approx(2 * fp16.macs_per_us_per_sm)


def test_refitting_the_gemm_terms_keeps_the_shipped_depthwise_terms():
    """eval_wave_model.py --write-fitted rewrote h200.json with dw_* back at generic start values
    (a docs walkthrough found it): the GEMM refit must carry the depthwise fit over untouched."""
    import eval_wave_model as ev

    from deployopt.targets import get_target
    from deployopt.waves import WaveParams, generic_params

    shipped = json.loads((ROOT / "deployopt" / "targets" / "fitted" / "h200.json").read_text())
    t = get_target("h200")
    fresh = {dt: generic_params(t.compute_capability, dt, t.clock_mhz).to_json() for dt in ("fp16", "fp32")}
    fitted = {"gpu": "h200", "params": fresh}
    assert ev.keep_depthwise(fitted, shipped)
    for dt in ("fp16", "fp32"):
        new, old = WaveParams.from_json(fitted["params"][dt]), WaveParams.from_json(shipped["params"][dt])
        gen = generic_params(t.compute_capability, dt, t.clock_mhz)
        assert (new.dw_fixed_us, new.dw_ns_per_output, new.dw_ns_per_tap) == (
            old.dw_fixed_us,
            old.dw_ns_per_output,
            old.dw_ns_per_tap,
        )
        assert new.dw_fixed_us != gen.dw_fixed_us and new.fixed_us == gen.fixed_us  # GEMM terms: the new fit
    assert fitted["depthwise_sweeps"] == shipped["depthwise_sweeps"]
    assert not ev.keep_depthwise({"params": {"fp16": {}}}, {})  # no file before: nothing to keep


def test_fill_percent_of_a_last_wave_neither_empty_nor_full_is_1_to_99():
    """1 block in 216 slots (an A100's 108 SMs × 2) printed 0 %, as if the last wave were empty, and
    215 of 216 printed 100 %; halves still round up, and empty and full stay 0 and 100."""
    slots = 108 * 2
    assert [fill_percent(b / slots) for b in (1, 2, 108, 214, 215, 216)] == [1, 1, 50, 99, 99, 100]
    assert fill_percent(wave_count(217, 108, 2)[1]) == 1 and fill_percent(1e-9) == 1
    assert fill_percent(1 - 1e-9) == 99 and (fill_percent(0.0), fill_percent(1.0)) == (0, 100)
    assert [fill_percent(k / 8) for k in range(9)] == [0, 13, 25, 38, 50, 63, 75, 88, 100]


def test_a_prediction_that_is_no_finite_number_is_one_line():
    """Parameters past PARAM_RANGES, made in code (a profile's are refused at load), predicted
    Infinity, which `staircase --json` wrote and no JSON reader takes: every path that predicts a
    conv (predict, staircase, analyze's wave columns) refuses it in one TargetError line."""
    from deployopt.errors import TargetError

    h200 = get_target("h200")
    for key, value in (("wave_us", 1e308), ("dw_ns_per_output", 1e308)):
        broken = replace(h200.wave_params("fp16"), **{key: value})
        t = replace(h200, params={**h200.params, "fp16": broken})
        shape = ConvShape(64, 128, 56, 56, 128, 3, 3, groups=128 if key.startswith("dw") else 1)  # 12 waves
        conv = SimpleNamespace(name="c", shape=shape, out_group=None, in_groups=[])
        for predicted, args in (
            (predict, (shape, t, "fp16")),
            (staircase, (shape, t, "fp16", [shape.k])),
            (conv_rows, (SimpleNamespace(convs=[conv], groups=[]), t, "fp16")),
        ):
            with pytest.raises(TargetError) as exc:
                predicted(*args)
            said = str(exc.value)
            assert said.startswith("h200: the wave model 'h200-fp16 fit' predicts inf µs for a conv with 128")
            assert said.endswith("its parameters are out of any GPU's range") and "\n" not in said, key


def test_int8_families_align_to_16_channels_on_the_h200s_design_too():
    """INT8 borrows the fp16 fit; on the H200's own design it kept fp16's families (an 8-channel
    vector), so 24 output channels ran aligned on an H100 and padded on a T4 and every other GPU."""
    from deployopt.targets import get_target

    for name in ("h200", "h100", "t4", "orin-nano-8gb"):
        params = get_target(name).wave_params("int8")
        assert sorted(f.min_align for f in params.families) == [1, 16, 64], name
        t = get_target(name)
        us = {k: predict(ConvShape(8, 128, 28, 28, k), t, "int8").predicted_us for k in (16, 24, 32)}
        assert us[24] > us[16] and us[24] > us[32], (name, us)
    assert [f.min_align for f in get_target("h200").wave_params("fp16").families] == [64, 32, 8, 1]


GROUPED = ROOT / "benchmarks" / "results" / "h100_grouped"


@pytest.mark.skipif(not GROUPED.is_dir(), reason="no grouped-conv record")
def test_grouped_convs_held_out_are_scored_as_the_record_says():
    """The H100's grouped-conv staircases (never fitted on): the model puts its steps where the
    measured ones are (109 of 112 pairs), and the analyze case (C/g 20 below 24) was really slower."""
    import score_grouped as sg

    from deployopt.fileio import read_json

    rows = sg.staircase_rows(GROUPED)
    assert len(rows) == 6
    recorded = read_json(GROUPED / "score.json")
    assert [(r["sweep"], r["pairs"], r["agreement"]) for r in rows] == [
        (r["sweep"], r["pairs"], r["agreement"]) for r in recorded["staircases"]
    ]
    pairs = sum(r["pairs"] for r in rows)
    agree = sum(round(r["agreement"] * r["pairs"]) for r in rows)
    assert (agree, pairs) == (109, 112)
    assert sum(r["regret"] for r in rows) / len(rows) == pytest.approx(0.0106, abs=5e-5)
    by_cg = {r["channels_per_group"]: r for r in sg.input_rows(GROUPED)}
    assert by_cg[20]["measured_us"] > 2.5 * max(by_cg[24]["measured_us"], by_cg[16]["measured_us"])
    assert by_cg[20]["predicted_us"] > by_cg[24]["predicted_us"]  # the direction, if not the size


def test_analyze_target_shapes_one_conv_per_width_it_prices(monkeypatch) -> None:
    """Performance bug bash: each width a row's below/above search priced made every conv's shape
    (conv_shapes), so the table cost convs² × widths: 18 s for DenseNet-201's 200 convs against
    2.5 s without --target. A chain of 21 convs now makes about a dozen shapes per conv, not 21 ×
    that."""
    from test_coupling import Net

    import deployopt.coupling as coupling
    from deployopt.coupling import analyze
    from deployopt.waves import conv_rows

    n = Net(hw=8)
    x = "x"
    for i in range(20):
        x = n.op("Relu", [n.conv(x, 13 + i)])
    analysis = analyze(n.build(n.conv(x, 4)))
    calls: list[int] = []
    real = coupling._shape_after
    monkeypatch.setattr(coupling, "_shape_after", lambda *a, **k: calls.append(1) or real(*a, **k))
    rows = conv_rows(analysis, get_target("orin-nano-8gb"), "fp16")
    assert len(rows) == 21 and sum(len(r["widths"]) for r in rows) == 40
    assert len(calls) <= 15 * len(rows)
