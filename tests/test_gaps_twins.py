"""Guards (pass before and after): the twins merged in environment.py and optimize.py behave as
each copy did. nvidia_smi (one GPU's facts) and nvidia_gpus (every GPU's name, the driver) now query
nvidia-smi through one helper; optimize's resume refusal and its config errors name options from
one mapping (CLI_OPTIONS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployopt import environment
from deployopt.optimize import _resume_diff, setting


def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> Path:
    """An nvidia-smi on PATH running `script` (sh), logging its arguments; the log's path."""
    folder = tmp_path / "bin"
    folder.mkdir()
    log = tmp_path / "args"
    smi = folder / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" >> {log}\n{script}\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))
    return log


def test_one_gpu_and_every_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = fake_smi(
        tmp_path,
        monkeypatch,
        'case "$*" in *--id=*) echo "NVIDIA H100, 580.1, 1980, 1980, 2619, 700.00, Enabled";; '
        '*) printf "NVIDIA H100, 580.1\\nNVIDIA H100, 580.1\\n[N/A], 580.1\\n";; esac',
    )
    assert environment.nvidia_smi(1) == {
        "gpu": "NVIDIA H100",
        "driver": "580.1",
        "sm_clock_mhz": 1980.0,
        "max_sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 2619.0,
        "power_limit_w": 700.0,
        "persistence_mode": "Enabled",
    }
    assert environment.nvidia_gpus() == (["NVIDIA H100", "NVIDIA H100"], "580.1")
    first, every = log.read_text().splitlines()
    assert first.startswith("--id=1 --query-gpu=name,driver_version,clocks.sm,")
    assert every.startswith("--query-gpu=name,driver_version --format=csv,noheader")


@pytest.mark.parametrize("script", ["exit 9", "echo", "sleep 30"])
def test_nvidia_smi_that_cannot_say(script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_smi(tmp_path, monkeypatch, script)
    if script.startswith("sleep"):
        import subprocess

        real = subprocess.run
        monkeypatch.setattr(subprocess, "run", lambda *a, **k: real(*a, **{**k, "timeout": 0.3}))
    assert environment.nvidia_smi() == {} and environment.nvidia_gpus() == ([], None)


def test_options_are_named_from_one_mapping() -> None:
    assert (
        setting("max_trim", 0.3, True) == "--max-trim 0.3" and setting("mode", "trim", False) == "mode='trim'"
    )
    old, new = (
        {"runs": 8, "target": "nano", "cudnn_engines": None},
        {"runs": 100, "target": "orin", "cudnn_engines": 4},
    )
    assert _resume_diff(["runs", "target", "cudnn_engines"], old, new, cli=True) == (
        "--runs was 8, now 100; --target was nano, now orin; --cudnn-engines was the default, now 4"
    )
