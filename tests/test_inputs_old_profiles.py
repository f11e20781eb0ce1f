"""A T4 profile calibrated before 839ae8d (Volta/Turing default families cut from 72 KB of shared
memory a block to 64 KB) loads after an upgrade, with the same predictions; it was refused as a
hand edit ("shared_mem_bytes 73728 is more than one SM has (65536)")."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_runner import run_cli

from deployopt.errors import TargetError
from deployopt.layers import ConvShape
from deployopt.targets import get_target, load_profile
from deployopt.waves import predict

#: what the cc 7.x default families asked a block before 839ae8d (deployopt.targets has it too)
OLD_CC7_FAMILY_SHARED_MEM = 73728


def _old_calibrated(name: str, path: Path, smem: int = OLD_CC7_FAMILY_SHARED_MEM) -> Path:
    """`name`'s profile as calibrate wrote it before 839ae8d: fitted params whose 64 KB families
    ask `smem` a block, as the defaults then did."""
    doc = get_target(name).to_json()
    for params in doc["params"].values():
        params["fitted"] = True
        for fam in params["families"]:
            if fam["shared_mem_bytes"] == 65536:
                fam["shared_mem_bytes"] = smem
    path.write_text(json.dumps({"deployopt_profile": 1, "target": doc, "params": doc.pop("params")}))
    return path


SHAPES = [
    ConvShape(1, c, hw, hw, k, r, r, (st, st), (r // 2, r // 2))
    for c, hw, k, r, st in [
        (64, 56, 64, 3, 1),
        (128, 28, 200, 3, 2),
        (256, 14, 512, 1, 1),
        (3, 224, 32, 7, 2),
    ]
    for k in (k, k + 8, k + 24)
]


def test_an_old_t4_profile_loads_and_predicts_as_before(tmp_path: Path) -> None:
    path = _old_calibrated("t4", tmp_path / "t4.json")
    loaded = load_profile(path)
    assert loaded.calibrated
    for dtype in ("fp16", "fp32"):
        assert {f.shared_mem_bytes for f in loaded.wave_params(dtype).families} <= {65536, 32768}
    # the profile as it was read before the check: 72 KB blocks, priced at one block per SM
    old = replace(
        loaded,
        params={
            dt: replace(
                p,
                families=tuple(
                    replace(f, shared_mem_bytes=OLD_CC7_FAMILY_SHARED_MEM)
                    if f.shared_mem_bytes == 65536
                    else f
                    for f in p.families
                ),
            )
            for dt, p in loaded.params.items()
        },
    )
    assert any(f.shared_mem_bytes == OLD_CC7_FAMILY_SHARED_MEM for f in old.wave_params("fp16").families)
    for shape in SHAPES:
        for dtype in ("fp16", "fp32"):
            assert predict(shape, loaded, dtype) == predict(shape, old, dtype)


def test_the_commands_of_the_report_read_it(monkeypatch, capsys, tmp_path: Path, zoo_model_path) -> None:
    path = _old_calibrated("t4", tmp_path / "t4.json")
    code, _, err = run_cli(
        monkeypatch, capsys, "analyze", str(zoo_model_path("resnet_projection")), "--target", str(path)
    )
    assert code == 0 and "shared_mem_bytes" not in err, err


def test_a_volta_profile_with_room_for_the_old_blocks_is_kept_as_it_was(tmp_path: Path) -> None:
    """A Xavier SM has 96 KB: 72 KB blocks fit there, and are left as calibrate wrote them."""
    loaded = load_profile(_old_calibrated("xavier-nx", tmp_path / "x.json"))
    assert {f.shared_mem_bytes for f in loaded.wave_params("fp16").families} == {OLD_CC7_FAMILY_SHARED_MEM}


def test_other_oversized_blocks_are_still_refused(tmp_path: Path) -> None:
    """Only the old default is taken back: another size a T4 SM cannot hold is a hand edit."""
    path = _old_calibrated("t4", tmp_path / "t4.json", smem=80000)
    with pytest.raises(TargetError, match="shared_mem_bytes 80000 is more than one SM has \\(65536\\)"):
        load_profile(path)
