"""A calibrated profile fitted to host-CPU timings (what `calibrate --measure ort` wrote before it
refused such a sweep, 13e34d9) is not a GPU's calibration: `--target NAME` fell back to nothing and
`deployopt targets` listed it as "calibrated: FILE" (bug bash: an old profile kept steering every
--backend model prediction for orin-nano-8gb, no word said)."""

from __future__ import annotations

import json
import warnings

import pytest
from cli_runner import run_cli

from deployopt.errors import DeployoptWarning
from deployopt.layers import ConvShape
from deployopt.targets import get_target, load_profile
from deployopt.waves import predict

#: what a deployopt before 13e34d9 wrote for `calibrate -t orin-nano-8gb --measure ort --runs 5`
OLD_ORT = {"backend": "ort", "runs": 5, "statistic": "median"}
SHAPE = ConvShape(n=1, c=64, h=28, w=28, k=64, r=3, s=3)


def _cpu_fit_profile(path, name="orin-nano-8gb", measured_with=None):
    """A calibrate-form profile of `name`'s facts whose fp32 fit is a degenerate CPU fit (a fixed
    cost twice the built-in's), written to `path`."""
    facts = get_target("orin-nano-8gb").to_json()
    params = facts.pop("params")
    fp32 = dict(params["fp32"], fitted=True, name=f"{name}-fp32 calibrated")
    fp32["fixed_us"] = params["fp32"]["fixed_us"] * 2
    facts["name"] = name
    doc = {
        "deployopt_profile": 1,
        "target": facts,
        "params": {"fp32": fp32},
        "measured_with": OLD_ORT if measured_with is None else measured_with,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "targets"


def _builtin_target():
    import deployopt.targets as t

    return t._own_copy(t._builtin("orin-nano-8gb"))


@pytest.mark.parametrize(
    "measured_with",
    [
        OLD_ORT,
        {"backend": "ort", "runs": 5, "statistic": "median", "device": "CPUExecutionProvider"},
        {"backend": "torch", "runs": 30, "statistic": "median", "device": "CPU (no CUDA device)"},
    ],
)
def test_a_cpu_fit_under_a_builtin_name_is_the_builtin_target_with_one_warning(cache, measured_with):
    path = _cpu_fit_profile(cache / "orin-nano-8gb.json", measured_with=measured_with)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target = get_target("orin-nano-8gb")
        again = get_target("orin-nano-8gb")  # a run resolves its target more than once: one warning
    said = [str(w.message) for w in caught if issubclass(w.category, DeployoptWarning)]
    assert len(said) == 1, said
    assert str(path) in said[0] and "host-CPU timings" in said[0]
    assert "re-run `deployopt calibrate -t orin-nano-8gb` on the GPU, or delete the file" in said[0]
    assert "\n" not in said[0]
    for t in (target, again):
        assert t.origin == "built-in" and not t.calibrated
        assert (
            predict(SHAPE, t, "fp32").predicted_us == predict(SHAPE, _builtin_target(), "fp32").predicted_us
        )


def test_a_gpu_calibration_is_still_used(cache):
    """Guard (passes before the fix too): a profile timed on a GPU, or on a board over ssh, or one
    that does not say (a hand-written one), stays the target's calibration, without a warning."""
    for measured_with in (
        {"backend": "torch", "runs": 30, "statistic": "median", "device": "NVIDIA H200"},
        {"backend": "ort", "runs": 5, "statistic": "median", "device": "CUDAExecutionProvider"},
        {"backend": "tensorrt", "runs": 30, "remote": "me@nano", "where": "GPU at me@nano"},
        {},
    ):
        path = _cpu_fit_profile(cache / "orin-nano-8gb.json", measured_with=measured_with)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeployoptWarning)
            target = get_target("orin-nano-8gb")
        assert target.calibrated and target.origin == str(path), measured_with
        assert (
            predict(SHAPE, target, "fp32").predicted_us
            > predict(SHAPE, _builtin_target(), "fp32").predicted_us
        )


def test_host_cpu_fit_rule():
    from deployopt.targets import host_cpu_fit

    assert host_cpu_fit(OLD_ORT)
    assert host_cpu_fit({"backend": "torch", "device": "CPU (no CUDA device)"})
    assert host_cpu_fit({"backend": "ort", "device": "CUDAExecutionProvider"}) is None
    assert host_cpu_fit({"backend": "torch"}) is None  # not told: unknown passes, as calibrate's check
    assert host_cpu_fit({"backend": "ort", "remote": "me@nano"}) is None
    assert host_cpu_fit(None) is None


def test_a_cpu_fit_under_its_own_name_or_path_keeps_its_facts_with_default_parameters(cache, tmp_path):
    for path, name in (
        (cache / "mine.json", "mine"),
        (tmp_path / "elsewhere" / "old.json", str(tmp_path / "elsewhere" / "old.json")),
    ):
        _cpu_fit_profile(path, name="mine")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            target = get_target(name)
        said = [str(w.message) for w in caught if issubclass(w.category, DeployoptWarning)]
        assert len(said) == 1 and str(path) in said[0] and "default parameters" in said[0], said
        assert not target.calibrated and not any(p.fitted for p in target.params.values())
        assert (
            predict(SHAPE, target, "fp32").predicted_us
            == predict(SHAPE, _builtin_target(), "fp32").predicted_us
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not load_profile(path).calibrated


def test_targets_lists_it_as_not_calibrated_and_says_why(monkeypatch, capsys, cache):
    path = _cpu_fit_profile(cache / "orin-nano-8gb.json")
    code, out, err = run_cli(monkeypatch, capsys, "targets")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.split()[:1] == ["orin-nano-8gb"])
    assert "calibrated" not in row and str(path) not in out, row
    warned = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warned) == 1 and str(path) in warned[0] and "host-CPU timings" in warned[0], err


def test_optimize_model_backend_predicts_with_the_builtin_and_warns(monkeypatch, capsys, cache, tmp_path):
    from pathlib import Path

    path = _cpu_fit_profile(cache / "orin-nano-8gb.json")
    model = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"
    out_dir = tmp_path / "out"
    args = ["optimize", str(model), "-t", "orin-nano-8gb", "--backend", "model", "--dtype", "fp32"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "-o", str(out_dir))
    assert code == 0, err
    warned = [line for line in err.splitlines() if str(path) in line]
    assert len(warned) == 1 and warned[0].startswith("warning:"), err
    report = (out_dir / "report.md").read_text()
    assert "calibrated (orin-nano-8gb" not in report
