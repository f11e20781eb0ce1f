"""Profiles are read strictly: a version this deployopt does not know, a value of the wrong JSON type,
parameters under another dtype's key were each used as if they were right (a bug bash's findings);
now each is one `error:` line naming the file and the field, exit 2."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import run_cli

from deployopt.errors import TargetError
from deployopt.targets import get_target

run = run_cli


@pytest.fixture(scope="module")
def calibrated() -> dict[str, Any]:
    """An H200 profile in calibrate's form (deployopt_profile, target, params)."""
    facts = get_target("h200").to_json()
    params = facts.pop("params")
    for p in params.values():
        p["fitted"] = True
    return {"deployopt_profile": 1, "target": facts, "params": params}


def _refused(monkeypatch, capsys, path: Path, doc: Any) -> str:
    """The one error line `targets --target PATH` gives for `doc`, and that it is one line, exit 2."""
    path.write_text(json.dumps(doc))
    code, out, err = run(monkeypatch, capsys, "targets", "--target", str(path))
    assert code == 2 and out == "", (code, out, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return " ".join(err.split())


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (99, "unsupported profile version 99 (deployopt_profile)"),
        ("two", "unsupported profile version 'two' (deployopt_profile)"),
        (True, "unsupported profile version True (deployopt_profile)"),
        (None, "unsupported profile version None (deployopt_profile)"),
    ],
)
def test_a_profile_of_an_unknown_version_is_refused(
    monkeypatch, capsys, tmp_path, calibrated, version, message
):
    """Version 99 or "two" was read as version 1, without a word."""
    err = _refused(monkeypatch, capsys, tmp_path / "p.json", {**calibrated, "deployopt_profile": version})
    assert message in err and "reads version 1" in err, err


def test_a_profile_without_a_version_is_no_deployopt_profile(monkeypatch, capsys, tmp_path, calibrated):
    doc = {k: v for k, v in calibrated.items() if k != "deployopt_profile"}
    err = _refused(monkeypatch, capsys, tmp_path / "p.json", doc)
    assert "is not a deployopt target profile" in err and "no 'deployopt_profile' version" in err, err
    (tmp_path / "ok.json").write_text(json.dumps(calibrated))  # the same with its version: read
    assert get_target(str(tmp_path / "ok.json")).calibrated


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("fixed_us", True, "fixed_us must be a finite number >= 0, not true"),  # was 1.0
        ("fixed_us", "5", "fixed_us must be a finite number >= 0, not the string '5'"),  # was 5.0
        ("macs_per_us_per_sm", False, "macs_per_us_per_sm must be a finite number > 0, not false"),
        ("dw_ns_per_tap", "0.1", "dw_ns_per_tap must be a finite number >= 0, not the string '0.1'"),
        ("fitted", "false", "fitted must be true or false, not the string 'false'"),  # was True
        ("fitted", 1, "fitted must be true or false, not 1"),
        ("name", None, "name must be a string, not null"),  # was 'None'
        ("name", 123, "name must be a string, not 123"),
        ("source", 5, "source must be a string, not 5"),
        ("dw_source", None, "dw_source must be a string, not null"),
        ("fitted_on", "abc", "fitted_on must be an array of sweep ids (strings), not the string 'abc'"),
        ("families", "x", "families must be an array of kernel families, not the string 'x'"),
    ],
)
def test_params_of_the_wrong_json_type_are_refused(
    monkeypatch, capsys, tmp_path, calibrated, key, value, message
):
    doc = copy.deepcopy(calibrated)
    doc["params"]["fp16"][key] = value
    path = tmp_path / "p.json"
    err = _refused(monkeypatch, capsys, path, doc)
    assert f"target profile {path}: unreadable fp16 params" in err and message in err, err


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("efficiency", True, "family 'tc-aligned64': efficiency must be a number, not true"),
        ("efficiency", "1", "family 'tc-aligned64': efficiency must be a number, not the string '1'"),
        ("name", None, "family name must be a string, not null"),
    ],
)
def test_a_kernel_familys_fields_are_typed(monkeypatch, capsys, tmp_path, calibrated, key, value, message):
    doc = copy.deepcopy(calibrated)
    doc["params"]["fp16"]["families"][0][key] = value
    assert message in _refused(monkeypatch, capsys, tmp_path / "p.json", doc)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("name", None, "name must be a non-empty string, not null"),  # was the target 'None'
        ("name", "", "name must be a non-empty string, not the string ''"),
        ("display_name", ["x"], "display_name must be a non-empty string, not an array"),
        ("kind", 5, "kind must be a string, not 5"),
        ("notes", ["a"], "notes must be a string, not an array"),
    ],
)
def test_a_targets_text_fields_are_strings(monkeypatch, capsys, tmp_path, calibrated, key, value, message):
    doc = copy.deepcopy(calibrated)
    doc["target"][key] = value
    assert message in _refused(monkeypatch, capsys, tmp_path / "p.json", doc)


def test_source_and_software_entries_are_strings(monkeypatch, capsys, tmp_path, calibrated):
    doc = copy.deepcopy(calibrated)
    doc["target"]["software"] = {"cuda": None}  # printed "software: cuda None"
    assert "software 'cuda' must be a string, not null" in _refused(
        monkeypatch, capsys, tmp_path / "p.json", doc
    )


def test_params_under_another_dtypes_key_are_refused(monkeypatch, capsys, tmp_path, calibrated):
    """An int8 key holding fp16 parameters predicted INT8 with them and labelled it fp16; a bf16 key
    was kept and never used; "dtype": "fp32" under fp16 predicted fp16 with TF32's fit."""
    path = tmp_path / "p.json"
    doc = copy.deepcopy(calibrated)
    doc["params"]["int8"] = doc["params"]["fp16"]
    err = _refused(monkeypatch, capsys, path, doc)
    assert f"target profile {path}: params 'int8' holds fp16 parameters ('h200-fp16 fit')" in err, err
    doc = copy.deepcopy(calibrated)
    doc["params"]["fp16"]["dtype"] = "fp32"
    assert "params 'fp16' holds fp32 parameters" in _refused(monkeypatch, capsys, path, doc)
    doc = copy.deepcopy(calibrated)
    doc["params"]["bf16"] = doc["params"].pop("fp16")
    assert "params 'bf16': no dtype the wave model has (fp16, fp32, int8)" in _refused(
        monkeypatch, capsys, path, doc
    )
    doc = {**calibrated, "params": []}  # was taken as no params
    assert "params must be an object of dtype → parameters, not array" in _refused(
        monkeypatch, capsys, path, doc
    )


def test_a_good_profile_and_a_targets_json_copy_still_load(tmp_path, calibrated):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(calibrated))
    t = get_target(str(path))
    assert t.wave_params("fp16").fixed_us == calibrated["params"]["fp16"]["fixed_us"]
    path.write_text(json.dumps(get_target("orin-nano-8gb").to_json()))  # what a what-if edits
    assert get_target(str(path)).name == "orin-nano-8gb"
    with pytest.raises(TargetError, match="no 'deployopt_profile' version"):
        path.write_text(json.dumps({"target": calibrated["target"], "params": {}}))
        get_target(str(path))


def _fake_reader(cc: tuple[int, int], clock: float | None = None) -> Any:
    def read() -> dict[str, Any]:
        d: dict[str, Any] = {"display_name": "a GPU", "compute_capability": cc, "sms": 82, "via": "torch"}
        if clock:
            d["clock_mhz"] = clock
        return d

    return read


@pytest.mark.parametrize(
    ("cc", "clock", "mhz", "says"),
    [
        # an RTX 3090 as torch reports it: no clock, and no built-in target of CC 8.6
        (
            (8, 6),
            None,
            1000.0,
            "assumed: torch reported no clock, and no built-in target has compute capability 8.6",
        ),
        (
            (8, 7),
            None,
            1300.0,
            "assumed: torch reported no clock; 1300 MHz is built-in target agx-orin-64gb's",
        ),
        ((8, 6), 1695.0, 1695.0, "read from the device via torch"),
    ],
)
def test_the_local_targets_clock_and_cores_have_a_source(monkeypatch, cc, clock, mhz, says):
    """--target local fell back to a built-in target's clock, else 1000 MHz, with no source line:
    every default parameter scales with it."""
    from deployopt.targets import local

    monkeypatch.setattr(local, "READERS", [("torch", _fake_reader(cc, clock))])
    t = get_target("local")
    assert t.clock_mhz == mhz and says in t.sources["clock_mhz"], t.sources
    assert (
        t.sources["cuda_cores"] == f"82 SMs × 128 cores an SM, the CUDA guide's figure for CC {cc[0]}.{cc[1]}"
    )
