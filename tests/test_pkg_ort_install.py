"""onnxruntime and onnxruntime-gpu: two distributions of one `onnxruntime` module, which pip cannot
make alternatives. deployopt requires the CPU one, so `pip install deployopt` after onnxruntime-gpu
wrote it over the GPU one (the CUDA EP gone, both distributions listed) and the ort backend timed on
the CPU without a word (bug bash 02). The broken states are said in one `warning:` line with the
commands that fix them, by `deployopt backends` and wherever the ort backend opens; and a record
names the onnxruntime that ran, not the distribution whose files were overwritten (bug bash 03).
The distributions are faked (importlib.metadata.version); the module is the real one or a stand-in.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import types
from pathlib import Path
from typing import Any

import onnx
import onnxruntime
import pytest
from cli_runner import run_cli
from two_convs import parallel_convs

from deployopt import onnxruntime_compat
from deployopt.backends import ort as ort_backend
from deployopt.regression import runtime_version
from deployopt.timing import Timing, load_timing

REAL = onnxruntime.__version__
#: an onnxruntime-gpu version other than the module's (Python 3.10's pip has onnxruntime 1.23.2 itself)
OTHER = "1.23.2" if REAL != "1.23.2" else "1.22.1"
FIX_PREFIX = "pip uninstall -y onnxruntime onnxruntime-gpu && pip install "


def fake_distributions(monkeypatch: pytest.MonkeyPatch, **installed: str) -> None:
    """Only the onnxruntime distributions named (onnxruntime, onnxruntime_gpu) are installed, at
    those versions; every other distribution is what it is."""
    real = importlib.metadata.version
    ours = {name.replace("_", "-"): v for name, v in installed.items()}

    def version(name: str) -> str:
        key = name.lower().replace("_", "-")
        if key in ("onnxruntime", "onnxruntime-gpu"):
            if key in ours:
                return ours[key]
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setattr(ort_backend, "_MIXED_SAID", set())  # said once a process: afresh per test
    monkeypatch.setattr(onnxruntime_compat, "_on_jetson", lambda: False)


def module(version: str, *providers: str) -> Any:
    return types.SimpleNamespace(__version__=version, get_available_providers=lambda: list(providers))


CPU = ("AzureExecutionProvider", "CPUExecutionProvider")
GPU = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


def test_both_distributions_with_the_cpu_module_is_one_line_with_the_fix(monkeypatch) -> None:
    """What `pip install deployopt` over onnxruntime-gpu 1.23.2 left (bug bash 02's `pip list`)."""
    fake_distributions(monkeypatch, onnxruntime="1.32.0", onnxruntime_gpu="1.23.2")
    line = onnxruntime_compat.mixed_install_warning(module("1.32.0", *CPU))
    assert line is not None and "\n" not in line
    assert "onnxruntime 1.32.0 and onnxruntime-gpu 1.23.2 are both installed" in line
    assert "(1.32.0 imported, without the CUDA EP: runs on the CPU;" in line
    assert line.endswith(f": {FIX_PREFIX}onnxruntime-gpu==1.23.2")


def test_both_distributions_with_the_gpu_module_is_still_said(monkeypatch) -> None:
    """The docs' old order (deployopt, then onnxruntime-gpu): the CUDA EP is there, for now; an
    uninstall of either distribution removes the other's files."""
    fake_distributions(monkeypatch, onnxruntime="1.23.2", onnxruntime_gpu="1.23.2")
    line = onnxruntime_compat.mixed_install_warning(module("1.23.2", *GPU))
    assert line is not None and "both installed" in line and "with the CUDA EP, for now" in line
    assert "uninstalling either breaks the other" in line
    assert line.endswith(f"{FIX_PREFIX}onnxruntime-gpu==1.23.2")


def test_gpu_metadata_over_a_cpu_module_is_said(monkeypatch) -> None:
    fake_distributions(monkeypatch, onnxruntime_gpu="1.19.0")
    line = onnxruntime_compat.mixed_install_warning(module("1.19.0", "CPUExecutionProvider"))
    assert line is not None
    assert "onnxruntime-gpu 1.19.0 is installed but the onnxruntime imported (1.19.0) has no " in line
    assert "has no CUDAExecutionProvider (its files overwritten)" in line
    assert line.endswith(f"{FIX_PREFIX}onnxruntime-gpu==1.19.0")


@pytest.mark.parametrize(
    ("installed", "providers"),
    [({"onnxruntime_gpu": "1.23.2"}, GPU), ({"onnxruntime": "1.23.2"}, CPU), ({}, CPU)],
)
def test_a_clean_install_says_nothing(
    monkeypatch, installed: dict[str, str], providers: tuple[str, ...]
) -> None:
    fake_distributions(monkeypatch, **installed)
    assert onnxruntime_compat.mixed_install_warning(module("1.23.2", *providers)) is None


def test_on_a_jetson_the_fix_is_jetson_zoos_wheel(monkeypatch) -> None:
    fake_distributions(monkeypatch, onnxruntime="1.32.0", onnxruntime_gpu="1.16.0")
    monkeypatch.setattr(onnxruntime_compat, "_on_jetson", lambda: True)
    line = onnxruntime_compat.mixed_install_warning(module("1.32.0", *CPU))
    assert line is not None and "pip install onnxruntime-gpu==" not in line
    assert line.endswith(f"{FIX_PREFIX}<Jetson Zoo's onnxruntime_gpu 1.16.0 wheel for this JetPack>")


def test_gpu_metadata_without_its_files_is_the_ort_backends_reason(monkeypatch) -> None:
    """`pip uninstall onnxruntime` of a mixed install removes the module both shared: the backend
    is unavailable, and the reason is the fix, not `pip install onnxruntime` (the CPU one again)."""
    fake_distributions(monkeypatch, onnxruntime_gpu="1.23.2")

    def missing() -> Any:
        raise ImportError("No module named 'onnxruntime'")

    monkeypatch.setattr(onnxruntime_compat, "import_onnxruntime", missing)
    ok, why = ort_backend.OrtBackend().availability()
    assert not ok
    assert why.startswith(
        "onnxruntime-gpu 1.23.2 is installed but `import onnxruntime` fails (No module named 'onnxruntime'): "
    )
    assert why.endswith(f"{FIX_PREFIX}onnxruntime-gpu==1.23.2")


def warnings_in(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def test_backends_says_a_mixed_install_in_one_line(monkeypatch, capsys) -> None:
    fake_distributions(monkeypatch, onnxruntime=REAL, onnxruntime_gpu="1.23.2")
    code, out, err = run_cli(monkeypatch, capsys, "backends")
    assert code == 0 and "│ ort" in out
    said = warnings_in(err)
    assert len(said) == 1 and err.count("\n") == 1, err
    assert f"onnxruntime {REAL} and onnxruntime-gpu 1.23.2 are both installed" in said[0]
    assert said[0].endswith(f"{FIX_PREFIX}onnxruntime-gpu==1.23.2")
    code, out, err = run_cli(monkeypatch, capsys, "backends", "--json")
    assert code == 0 and any(row["name"] == "ort" for row in json.loads(out))
    assert len(warnings_in(err)) == 1  # on stderr: the JSON stays whole


def test_backends_of_a_clean_install_warns_of_nothing(monkeypatch, capsys) -> None:
    fake_distributions(monkeypatch, onnxruntime=REAL)
    code, _, err = run_cli(monkeypatch, capsys, "backends")
    assert code == 0 and warnings_in(err) == []


@pytest.fixture
def small_model(tmp_path: Path) -> Path:
    path = tmp_path / "two_convs.onnx"
    onnx.save(parallel_convs("ab", 4, 4), str(path))
    return path


def test_bench_on_a_mixed_install_warns_once_and_records_the_onnxruntime_that_ran(
    monkeypatch, capsys, small_model: Path, tmp_path: Path
) -> None:
    """Once, though --repeat opens a session per replicate; and the record's runtime is the module
    that ran (REAL), not onnxruntime-gpu's metadata (bug bash 03: `compare` said 1.23.2)."""
    fake_distributions(monkeypatch, onnxruntime=REAL, onnxruntime_gpu=OTHER)
    dest = tmp_path / "a.json"
    args = ["bench", str(small_model), "--backend", "ort", "--runs", "3", "--warmup", "1", "--repeat", "2"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "-o", str(dest))
    assert code == 0, err
    mixed = [w for w in warnings_in(err) if f"onnxruntime-gpu {OTHER}" in w]
    assert len(mixed) == 1, err
    assert mixed[0].endswith(f"{FIX_PREFIX}onnxruntime-gpu=={OTHER}")
    record = json.loads(dest.read_text())
    record = record[0] if isinstance(record, list) else record
    env = record["environment"]
    assert env["onnxruntime"] == REAL
    assert env["libraries"]["onnxruntime-gpu"] == OTHER  # the distributions, as facts beside it
    assert runtime_version(load_timing(dest)) == f"onnxruntime {REAL}"


def test_bench_on_a_clean_install_says_no_mixed_install(monkeypatch, capsys, small_model: Path) -> None:
    fake_distributions(monkeypatch, onnxruntime=REAL)
    args = ["bench", str(small_model), "--backend", "ort", "--runs", "3", "--warmup", "1"]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0 and not [w for w in warnings_in(err) if "onnxruntime-gpu" in w], err


def test_runtime_version_prefers_the_module_that_ran_and_reads_old_records() -> None:
    libs = {"onnxruntime": "1.32.0", "onnxruntime-gpu": "1.23.2"}
    now = Timing("ort", [1.0], environment={"onnxruntime": "1.32.0", "libraries": libs})
    assert runtime_version(now) == "onnxruntime 1.32.0"
    # written before the module's version was recorded: the distributions, as before
    assert runtime_version(Timing("ort", [1.0], environment={"libraries": libs})) == "onnxruntime 1.23.2"
    only_cpu = {"libraries": {"onnxruntime": "1.32.0"}}
    assert runtime_version(Timing("ort", [1.0], environment=only_cpu)) == "onnxruntime 1.32.0"
    assert runtime_version(Timing("ort", [1.0], environment={})) is None


def test_compare_of_the_same_onnxruntime_is_like_for_like() -> None:
    """A baseline from an env with onnxruntime alone against a run on the mixed env that imported the
    same onnxruntime: the same runtime, no "not like for like" (bug bash 03's false warning)."""
    from deployopt.regression import differences

    base = {"onnxruntime": "1.32.0", "libraries": {"onnxruntime": "1.32.0"}}
    mixed = {"onnxruntime": "1.32.0", "libraries": {"onnxruntime": "1.32.0", "onnxruntime-gpu": "1.23.2"}}
    a, b = Timing("ort", [1.0], environment=base), Timing("ort", [1.0], environment=mixed)
    assert not [d for d in differences(a, b) if "runtime" in d]


def test_the_sessions_environment_names_the_imported_module(monkeypatch) -> None:
    from deployopt.backends.base import MeasureOptions

    fake_distributions(monkeypatch, onnxruntime="9.9.9")  # what metadata says is not what ran
    with ort_backend.OrtBackend().open(MeasureOptions(runs=1, warmup=0)) as session:
        env = session._environment("fp32")
    assert env["onnxruntime"] == sys.modules["onnxruntime"].__version__ == REAL
    assert env["libraries"]["onnxruntime"] == "9.9.9"


def test_a_clean_install_records_no_second_version_and_keeps_its_cache_folder(monkeypatch) -> None:
    """Where the distributions name the module that ran, nothing is added: the environment (and so
    the layer cache's folder, lut.device_fingerprint) is what it was before the module's version was
    recorded, and existing ort tables are not re-timed (review of 4f5ef1b)."""
    from deployopt.backends.base import MeasureOptions
    from deployopt.lut import device_fingerprint

    fake_distributions(monkeypatch, onnxruntime=REAL)
    with ort_backend.OrtBackend().open(MeasureOptions(runs=1, warmup=0)) as session:
        env = session._environment("fp32")
    assert "onnxruntime" not in env and env["libraries"]["onnxruntime"] == REAL
    ran = dict(env, onnxruntime=REAL)
    assert device_fingerprint("ort", env) != device_fingerprint("ort", ran)  # the key would re-key
