"""The depthwise wave model's time follows the busiest SM's block count, rounded up.

Why: a mutation run found `_depthwise_work` unguarded: with the busiest SM's blocks rounded down
(blocks // SMs), 42 channels of a 14×14 depthwise conv on an 8-SM Orin Nano (9 blocks, one SM
holding two) cost what 41 did (8 blocks, one each), the step moved to 80 → 84, and 8 channels (2
blocks) were predicted at the bare fixed cost, no work at all. Every depthwise conv's predicted
staircase (MobileNet, EfficientNet), the `model` backend and the search's depthwise tables rest on it.
"""

from __future__ import annotations

import math

import pytest
from cli_runner import run_cli

from deployopt.layers import ConvShape
from deployopt.targets import get_target
from deployopt.waves import DW_OUTPUTS_PER_BLOCK, predict

WIDTHS = (8, 40, 41, 42, 48, 80, 83, 84)
#: ceil(14 · 14 · k / 1024) for each width: 9 blocks at 42, 17 at 84 (one past 8 and 16 SM's worth)
BLOCKS = {8: 2, 40: 8, 41: 8, 42: 9, 48: 10, 80: 16, 83: 16, 84: 17}


def _depthwise(k: int) -> ConvShape:
    return ConvShape(1, k, 14, 14, k, groups=k)


@pytest.mark.parametrize("k", WIDTHS)
def test_depthwise_time_is_the_fixed_cost_plus_the_busiest_sms_blocks(k: int) -> None:
    """By hand: µs = dw_fixed_us + ceil(blocks / 8 SMs) × 1024 outputs × ns per output (9 taps)."""
    target = get_target("orin-nano-8gb")
    assert target.sms == 8
    params = target.wave_params("fp16")
    pred = predict(_depthwise(k), target)
    assert pred.blocks == BLOCKS[k]
    busiest = math.ceil(BLOCKS[k] / 8)
    per_output_ns = params.dw_ns_per_output + 9 * params.dw_ns_per_tap
    assert pred.predicted_us == pytest.approx(
        params.dw_fixed_us + busiest * DW_OUTPUTS_PER_BLOCK * per_output_ns / 1000.0, rel=1e-12
    )
    assert pred.predicted_us > params.dw_fixed_us  # 2 blocks on 8 SMs still do work


def test_depthwise_steps_where_one_sm_takes_a_second_block() -> None:
    target = get_target("orin-nano-8gb")
    us = {k: predict(_depthwise(k), target).predicted_us for k in WIDTHS}
    assert us[8] == us[40] == us[41]  # 2 to 8 blocks: one a SM at most
    assert us[41] < us[42]  # 9 blocks: one SM holds two
    assert us[42] == us[48] == us[80] == us[83]  # up to 16 blocks: two a SM at most
    assert us[83] < us[84]  # 17 blocks: one SM holds three


def test_staircase_cli_shows_the_depthwise_step_at_42_and_84(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`deployopt staircase --groups 40` on the Orin Nano: the printed pred µs steps up at 42 and at
    84, and 8 channels cost what 41 do, not less."""
    code, out, err = run_cli(
        monkeypatch, capsys, "staircase", "-t", "orin-nano-8gb", "--input", "1x40x14x14",
        "--out-channels", ",".join(map(str, WIDTHS)), "--groups", "40",
    )  # fmt: skip
    assert code == 0, out + err
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) == 7 and cells[0].isdigit() and cells[1] == f"{DW_OUTPUTS_PER_BLOCK}x1":
            rows[int(cells[0])] = (int(cells[2]), float(cells[6]))
    assert sorted(rows) == list(WIDTHS), out
    assert {k: blocks for k, (blocks, _) in rows.items()} == BLOCKS
    us = {k: pred for k, (_, pred) in rows.items()}
    assert us[8] == us[40] == us[41] < us[42] == us[48] == us[80] == us[83] < us[84], us
