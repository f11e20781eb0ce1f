"""Re-applying optimize's plan.json gives the model optimize wrote, byte for byte.

A trim drops the channels ranked least important, and the ranking depends on the data: optimize
ranks on the calibration samples after its fidelity gate's first 4, and `apply` ranked on the first
16, so `apply --plan plan.json` wrote another model than optimize's model.onnx. plan.json now lists
the channels each trimmed group keeps (`keep`), so re-applying needs no data at all; a plan without
them (hand-written, or from an older optimize) is ranked again on the samples optimize ranks on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import numpy_helper

CIFAR = Path(__file__).resolve().parents[1] / "calibration_data" / "cifar10"


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def trimmed_run(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> tuple[Path, Path]:
    """(input model, OUTDIR) of `optimize --mode trim` ranked on the bundled CIFAR-10 images, whose
    answer trims live channels (no gate: random weights fail it). A dynamic-batch input, so the
    written model also went through restore_dynamic_batch."""
    model = zoo_model_path("resnet_projection_dynamic")
    out = tmp_path / "out"
    args = [
        "optimize", str(model), "--target", "h200", "--sms", "8", "--backend", "model", "--mode", "trim",
        "--max-trim", "0.3", "--no-fidelity-gate", "--max-evals", "12", "--calibration-data", str(CIFAR),
        "-o", str(out),
    ]  # fmt: skip
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    # live channels trimmed: the ranking decides which go
    assert any(report["plan"][g["id"]] < g["original"] - g["dead"] for g in report["groups"])
    return model, out


def _apply(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, model: Path, plan: Path, dest: Path, *extra: str
) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, "apply", str(model), "--plan", str(plan), "-o", str(dest), *extra)


def test_reapplying_a_trim_plan_rebuilds_optimizes_model_exactly(
    trimmed_run: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Without data (another machine, the plan from git) and with the same data alike: the same
    bytes as optimize's model.onnx, and the JSON says the channels came from the plan."""
    model, out = trimmed_run
    written = (out / "model.onnx").read_bytes()
    for extra in ([], ["--calibration-data", str(CIFAR)]):
        dest = tmp_path / f"again{len(extra)}.onnx"
        code, stdout, err = _apply(monkeypatch, capsys, model, out / "plan.json", dest, *extra, "--json")
        assert code == 0, err
        assert dest.read_bytes() == written, f"re-applied plan differs from optimize's model ({extra})"
        said = json.loads(stdout)
        assert said["trim_order"] == "plan" and said["image_preprocess"] is None
        unused = "--calibration-data unused: the plan lists the channels each trimmed group keeps"
        assert (unused in said["notices"]) == bool(extra)
    plan = json.loads((out / "plan.json").read_text())
    report = json.loads((out / "report.json").read_text())
    originals = {g["id"]: g["original"] for g in report["groups"]}
    trimmed = sorted(g for g, w in plan["widths"].items() if w < originals[g])
    assert sorted(plan["keep"]) == trimmed
    for gid in trimmed:
        kept = plan["keep"][gid]
        assert len(kept) == plan["widths"][gid] and kept == sorted(set(kept))
        assert kept[0] >= 0 and kept[-1] < originals[gid]


def test_an_old_plan_without_kept_channels_is_ranked_on_the_samples_optimize_ranked_on(
    trimmed_run: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A plan.json from before `keep` (widths only) still applies: with the data optimize ranked on,
    apply ranks on the same samples (16 of the 20, none of the gate's 4, not the first 16) and rebuilds the
    same model, and one notice line says the channels were ranked again, and on what."""
    model, out = trimmed_run
    old = tmp_path / "old_plan.json"
    old.write_text(json.dumps({"widths": json.loads((out / "plan.json").read_text())["widths"]}))
    dest = tmp_path / "again.onnx"
    code, stdout, err = _apply(
        monkeypatch, capsys, model, old, dest, "--calibration-data", str(CIFAR), "--json"
    )
    assert code == 0, err
    assert dest.read_bytes() == (out / "model.onnx").read_bytes()
    said = json.loads(stdout)
    assert said["trim_order"] == "activation"
    (line,) = [n for n in said["notices"] if "lists no kept channels" in n]
    assert "written by hand or by an older optimize" in line
    assert line.endswith(
        "ranked on 16 calibration sample(s), those optimize ranks on (its fidelity gate checks the other 4 "
        "of the data's 20 samples)"
    )
    # on the console: the same notice, one line (the runner's console is 200 columns wide)
    code, _, err = _apply(
        monkeypatch, capsys, model, old, tmp_path / "b.onnx", "--calibration-data", str(CIFAR)
    )
    assert code == 0 and sum("lists no kept channels" in ln for ln in err.splitlines()) == 1, err


def test_a_hand_written_trim_plan_still_applies_and_says_how_it_ranked(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Widths written by hand, no indices: ranked by filter L1 without data, as before, with the
    notice; a padding alone needs no ranking and says nothing about it."""
    from deployopt.coupling import analyze
    from deployopt.surgery import apply_plan

    model = zoo_model_path("resnet_projection")
    plan, dest = tmp_path / "plan.json", tmp_path / "out.onnx"
    plan.write_text(json.dumps({"widths": {"stem.conv": 24, "layer4.0.conv1.conv": 120}}))
    code, stdout, err = _apply(monkeypatch, capsys, model, plan, dest, "--json")
    assert code == 0, err
    said = json.loads(stdout)
    assert said["trim_order"] == "l1"
    assert [n for n in said["notices"] if "lists no kept channels" in n] == [
        "the plan lists no kept channels for 1 trimmed group(s) (layer4.0.conv1.conv; written by hand or "
        "by an older optimize): ranked by filter L1, as optimize without --calibration-data"
    ]
    loaded = onnx.load(str(model))
    want = apply_plan(loaded, {"stem.conv": 24, "layer4.0.conv1.conv": 120}, analyze(loaded))
    got = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(dest)).graph.initializer}
    for t in want.graph.initializer:
        np.testing.assert_array_equal(got[t.name], numpy_helper.to_array(t), err_msg=t.name)
    plan.write_text(json.dumps({"widths": {"stem.conv": 24}}))
    code, stdout, err = _apply(monkeypatch, capsys, model, plan, dest, "--json")
    assert code == 0 and not [n for n in json.loads(stdout)["notices"] if "kept channels" in n], err


@pytest.mark.parametrize(
    ("keep", "message"),
    [
        ({"layer4.0.conv1.conv": list(range(121))}, "lists 121 channel(s) to keep for width 120"),
        ({"layer4.0.conv1.conv": [*range(119), 128]}, "keeps channel 128; its channels are 0 … 127"),
        ({"layer4.0.conv1.conv": [*range(119), -1]}, "keeps channel -1; its channels are 0 … 127"),
        ({"layer4.0.conv1.conv": [*range(119), 5]}, "lists channel 5 to keep more than once"),
        ({"stem.conv": list(range(16))}, "'stem.conv' lists channels to keep but is not trimmed"),
        (
            {"layer1.0.conv1.conv": list(range(8))},
            "'layer1.0.conv1.conv' lists channels to keep but the plan",
        ),
        ({"nope": [0]}, "unknown channel group 'nope'"),
        ({"layer4.0.conv1.conv": "0-119"}, "channels kept by group 'layer4.0.conv1.conv' must be a list"),
        ({"layer4.0.conv1.conv": [0.5]}, "must be a list of integers, got [0.5]"),
        ({"layer4.0.conv1.conv": [True]}, "must be a list of integers, got [True]"),
        ([0, 1], '"keep" must map group ids to lists of channel indices'),
    ],
)
def test_kept_channels_that_do_not_fit_the_model_are_one_line_errors(
    keep: Any,
    message: str,
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    """A plan edited by hand, or made for another model: one line naming the plan, exit 2, nothing
    written (before, `keep` was ignored and the channels ranked without a word)."""
    model = zoo_model_path("resnet_projection")
    plan, dest = tmp_path / "plan.json", tmp_path / "out.onnx"
    plan.write_text(json.dumps({"widths": {"stem.conv": 16, "layer4.0.conv1.conv": 120}, "keep": keep}))
    code, _, err = _apply(monkeypatch, capsys, model, plan, dest)
    assert code == 2, err
    assert err.startswith(f"error: {plan}: ") and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not dest.exists()
