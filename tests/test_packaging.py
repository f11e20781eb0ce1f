"""jetson/runner.py ships inside the installed package, so `--backend tensorrt --remote` works from a
wheel or a normal `pip install .`, not only from a checkout.

pyproject.toml maps the private subpackage deployopt._jetson to the jetson/ folder (one copy of the
runner in git), and find_runner looks there before the checkout's jetson/runner.py. Nothing may
install a top-level `jetson`: NVIDIA's jetson-inference owns that name on the boards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from setuptools import find_namespace_packages

from deployopt.backends.tensorrt_remote import ENV_RUNNER, find_runner
from deployopt.errors import BackendUnavailable

REPO = Path(__file__).resolve().parents[1]
RUNNER = REPO / "jetson" / "runner.py"
PACKAGED = "deployopt/_jetson/runner.py"


def setuptools_conf() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the tests run there
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_pyproject_maps_jetson_into_a_private_subpackage_and_lists_every_package() -> None:
    """The mapping that puts runner.py in the wheel, no top-level `jetson`, and the explicit package
    list still holding every folder under deployopt/ (what `packages.find` listed before)."""
    conf = setuptools_conf()
    assert conf["package-dir"] == {"deployopt._jetson": "jetson"}
    assert (REPO / conf["package-dir"]["deployopt._jetson"] / "runner.py").is_file()
    packages = conf["packages"]
    assert "deployopt._jetson" in packages
    assert [p for p in packages if p.split(".")[0] != "deployopt"] == []
    found = find_namespace_packages(where=str(REPO), include=["deployopt*"], exclude=["*__pycache__*"])
    assert sorted(packages) == sorted([*found, "deployopt._jetson"])


def test_find_runner_in_a_checkout_is_jetson_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install (as the tests run) has no copy inside deployopt/: the checkout's file."""
    monkeypatch.delenv(ENV_RUNNER, raising=False)
    path = find_runner()
    assert path.is_file() and path.read_bytes() == RUNNER.read_bytes()


def test_deployopt_runner_wins_and_a_missing_one_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "my_runner.py"
    mine.write_text("print('mine')\n")
    monkeypatch.setenv(ENV_RUNNER, str(mine))
    assert find_runner() == mine
    monkeypatch.setenv(ENV_RUNNER, str(tmp_path / "nope.py"))
    with pytest.raises(BackendUnavailable) as exc:
        find_runner()
    assert str(exc.value) == (
        "--backend tensorrt --remote needs jetson/runner.py: not found at "
        f"{ENV_RUNNER}={tmp_path / 'nope.py'}"
    )


@pytest.mark.slow
def test_the_wheel_carries_the_runner_and_find_runner_finds_it_there(tmp_path: Path) -> None:
    """A real wheel build (pip, its own isolated setuptools) of a copy of the source: runner.py is in
    it under deployopt/_jetson, nothing top-level but deployopt, and the wheel unpacked as pip
    installs it (no checkout beside it) makes find_runner return that copy."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        (src / name).write_bytes((REPO / name).read_bytes())
    for folder in ("deployopt", "jetson"):
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                dest = src / path.relative_to(REPO)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(path.read_bytes())
    wheels = tmp_path / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = wheels.glob("deployopt-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert zf.read(PACKAGED) == RUNNER.read_bytes()
        site = tmp_path / "site"
        zf.extractall(site)  # a pure-Python wheel installs by unpacking
    assert {n.split("/")[0] for n in names} == {"deployopt", wheel.name.split("-py")[0] + ".dist-info"}
    assert "deployopt/_jetson/README.md" not in names  # the runner only, not the folder's docs
    # PEP 561: without the marker an installed deployopt is untyped to mypy and pyright
    assert "deployopt/py.typed" in names
    dist = wheel.name.split("-py")[0] + ".dist-info"
    assert f"{dist}/licenses/LICENSE" in names  # Apache-2.0 asks for its text to ship

    env = {k: v for k, v in os.environ.items() if k not in (ENV_RUNNER, "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)  # ahead of the editable install's finder, which comes last
    code = "from deployopt.backends.tensorrt_remote import find_runner; print(find_runner())"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == str(site / PACKAGED)
