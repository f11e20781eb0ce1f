"""Refusals that named internal keys, or not the option at fault (bug bash, error messages 04, 05,
08).

04: `optimize --resume` refused with "(trim_gate changed)" for --min-cosine / --min-top1 /
--no-fidelity-gate, "traffic_term was the default, now false" for --no-traffic-term, and
"trim_order was \"activation\", now the default" (no such option) once --calibration-data was
dropped. 05: an unknown plan group listed the first five free groups, not the close match.
08: a wrong --backend / --measure listed 'model', which each of these commands refuses, and named
no option.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import one_error, run_cli

from deployopt.errors import PlanError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "resnet56_pruned_cifar.onnx"
CIFAR = ROOT / "calibration_data" / "cifar10"


@pytest.fixture(autouse=True)
def _own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _optimize(monkeypatch, capsys, out: Path, *extra: str) -> tuple[int, str]:
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(EXAMPLE), "--target", "nano", "--backend", "model",
        "--mode", "trim", "--max-evals", "3", "-o", str(out), *extra,
    )  # fmt: skip
    return code, err


@pytest.mark.slow
def test_resume_names_the_options_and_their_values(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "r1"
    code, err = _optimize(monkeypatch, capsys, out, "--min-cosine", "0.5", "--force")
    assert code == 0, err
    journal = out / "journal.jsonl"
    cases = [
        (["--min-cosine", "0.6"], "--min-cosine was 0.5, now 0.6"),
        (
            ["--min-top1", "0.5"],
            "--min-cosine was 0.5, now the default (0.99); --min-top1 was the default (0.99), now 0.5",
        ),
        (
            ["--min-cosine", "0.5", "--no-fidelity-gate"],
            "--no-fidelity-gate: the journal's run did not have it, this one does",
        ),
        (
            ["--min-cosine", "0.5", "--no-traffic-term"],
            "--no-traffic-term: the journal's run did not have it, this one does",
        ),
        (
            ["--min-cosine", "0.5", "--input-shape", "input:2x3x32x32"],
            "--input-shape was the default, now input:2x3x32x32",
        ),
        (["--min-cosine", "0.5", "--dtype", "fp32"], "--dtype was fp16, now fp32"),
    ]
    for extra, said in cases:
        code, err = _optimize(monkeypatch, capsys, out, *extra, "--resume")
        err = one_error(code, err)
        refused = f"error: --resume: {journal} was written by a different run ({said}); "
        assert err == refused + "use --force to start over\n"
        assert "trim_gate" not in err and "traffic_term" not in err and "input_shapes" not in err


@pytest.mark.slow
def test_resume_without_the_calibration_data_says_so_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "r2"
    code, err = _optimize(monkeypatch, capsys, out, "--calibration-data", str(CIFAR), "--force")
    assert code == 0, err
    err = one_error(*_optimize(monkeypatch, capsys, out, "--resume"))
    assert "(--calibration-data: the journal's run had it, this one does not)" in err, err
    assert "trim_order" not in err and "calibration data changed" not in err


def test_resume_diff_keeps_the_config_fields_for_library_callers() -> None:
    from deployopt.optimize import _resume_diff

    old, new = {"trim_gate": {"min_cosine": 0.5, "min_top1": 0.99, "enforced": True}}, {}
    assert _resume_diff(["trim_gate"], old, new).startswith("trim_gate was {")  # the field, as before
    assert _resume_diff(["trim_gate"], old, new, cli=True) == "--min-cosine was 0.5, now the default (0.99)"
    assert _resume_diff(["traffic_term"], {"traffic_term": False}, {}, cli=True) == (
        "--no-traffic-term: the journal's run had it, this one does not"
    )
    # a field no option sets says so
    assert (
        _resume_diff(["top_k"], {"top_k": 3}, {"top_k": 5}, cli=True)
        == "top_k (no option sets it) was 3, now 5"
    )


def test_an_unknown_plan_group_gets_the_close_match(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {"layer3.8.conv1.cov": 64}}))
    err = one_error(
        *run_cli(
            monkeypatch, capsys, "apply", str(EXAMPLE), "--plan", str(plan), "-o", str(tmp_path / "o.onnx")
        )[::2]
    )
    assert "unknown channel group 'layer3.8.conv1.cov'; did you mean 'layer3.8.conv1.conv'?" in err, err
    assert "`deployopt analyze MODEL` lists all 30 free groups" in err, err
    assert "free groups include" not in err
    assert not (tmp_path / "o.onnx").exists()


def test_an_unknown_group_with_no_close_match_lists_some_and_the_count() -> None:
    from deployopt.coupling import analyze
    from deployopt.model import load_model

    analysis = analyze(load_model(EXAMPLE).model)
    with pytest.raises(PlanError) as info:
        analysis.group("zzz")
    said = str(info.value)
    assert said.startswith("unknown channel group 'zzz' (free groups include: 'stem.conv', ")
    assert said.endswith("; `deployopt analyze MODEL` lists all 30 free groups)")


MEASURING = "ort, torch, tensorrt, trtexec"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["bench", str(EXAMPLE), "--backend", "onnxruntime"],
            f"did you mean 'ort'? choose one of: {MEASURING} for --backend",
        ),
        (
            ["profile", str(EXAMPLE), "--backend", "trtexc"],
            f"did you mean 'trtexec'? choose one of: {MEASURING} for --backend",
        ),
        (["bench", str(EXAMPLE), "--backend", "nope"], f"choose one of: {MEASURING} for --backend"),
        (
            ["calibrate", "--target", "nano", "--measure", "onnxruntime"],
            f"did you mean 'ort'? choose one of: {MEASURING} for --measure",
        ),
        (
            [
                "staircase",
                "--target",
                "nano",
                "--input",
                "1x16x32x32",
                "--out-channels",
                "8:64:8",
                "--measure",
                "onnxruntime",
            ],
            f"did you mean 'ort'? choose one of: {MEASURING} for --measure",
        ),
    ],
    ids=["bench-alias", "profile-typo", "bench-unknown", "calibrate", "staircase"],
)
def test_a_wrong_backend_lists_what_the_command_takes_and_names_the_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    err = one_error(*run_cli(monkeypatch, capsys, *args)[::2])
    name = args[args.index("--backend" if "--backend" in args else "--measure") + 1]
    assert err.startswith(f"error: unknown backend {name!r}"), err
    assert err.rstrip("\n").endswith(said), err
    assert "model" not in err.split("choose one of:")[1], err
