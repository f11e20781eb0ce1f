"""Tests of /tmp/term_other.patch (deployopt/cli/app.py and optimize_cmd.py, edited by another
helper when it was written): they fail until that patch is applied.

`-h` is help, as `--help` is, for the group and every command; a path option given `~/...` after
`=` (which the shell leaves as it is) means the home folder, not a folder named `~` made in the
working folder; optimize's summary table keeps every figure whole at any width."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import typer.main
from cli_runner import run_cli

from deployopt.cli.main import app

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_dash_h_is_help(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """`deployopt -h`, `deployopt optimize -h`: `No such option: -h`, exit 2."""
    words = [name] if name else []
    code, out, err = run_cli(monkeypatch, capsys, *words, "--help", columns=100)
    assert code == 0 and err == "" and out.startswith("Usage: deployopt"), err
    code, short, err = run_cli(monkeypatch, capsys, *words, "-h", columns=100)
    assert (code, err, short) == (0, "", out)
    assert "-h, --help" in out  # and the help says so


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """HOME in tmp_path, the working folder beside it (so a literal `~` there is seen)."""
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(work)
    return home


def test_a_tilde_output_folder_is_the_home_folder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    """`--out=~/runs/a` made `./~/runs/a` and said `wrote ~/runs/a/`, read as $HOME."""
    code, out, err = run_cli(
        monkeypatch, capsys, "optimize", str(EXAMPLE), "-t", "nano", "-b", "model", "--out=~/runs/a"
    )
    assert code == 0, err
    assert not Path("~").exists()
    assert {"model.onnx", "plan.json", "report.json"} <= {p.name for p in (home / "runs" / "a").iterdir()}
    assert out.splitlines()[-1].startswith(f"wrote {home / 'runs' / 'a'}/ (model.onnx")


def test_tilde_file_outputs_and_inputs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    """fp16 --output=~/m16.onnx, staircase --plot=~/s.png, and a model given as '~/m.onnx'."""
    code, _, err = run_cli(monkeypatch, capsys, "fp16", str(EXAMPLE), "--output=~/m16.onnx")
    assert code == 0, err
    args = (
        "staircase",
        "--target",
        "nano",
        "--input",
        "1x16x32x32",
        "--out-channels",
        "16,24",
        "--plot=~/s.png",
    )
    code, out, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    assert (home / "m16.onnx").is_file() and (home / "s.png").stat().st_size > 0
    assert f"{home / 's.png'}" in out and not Path("~").exists()
    shutil.copyfile(EXAMPLE, home / "m.onnx")
    code, out, err = run_cli(monkeypatch, capsys, "analyze", "~/m.onnx", "--json")
    assert code == 0, err
    assert len(json.loads(out)["groups"]) == 32


def test_a_tilde_user_that_names_no_user_stays_as_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], home: Path
) -> None:
    """`~nosuchuser/x` cannot be expanded (Path.expanduser raises RuntimeError): the path as given,
    here a missing file, one line; no traceback."""
    code, _, err = run_cli(monkeypatch, capsys, "analyze", "~nosuchuser-deployopt/m.onnx")
    assert code == 2 and err == "error: ~nosuchuser-deployopt/m.onnx: no such file\n", err


@pytest.mark.parametrize("columns", [24, 30])
def test_optimize_summary_keeps_figures_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, columns: int
) -> None:
    """The summary table went through console.print: at 30 columns rich split `1854.7` over lines."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    out_dir = tmp_path / "o"
    args = ("optimize", str(EXAMPLE), "-t", "nano", "-b", "model", "-o", str(out_dir), "--force")
    code, out, err = run_cli(monkeypatch, capsys, *args, columns=columns)
    assert code == 0, err
    report = json.loads((out_dir / "report.json").read_text())
    figures = {
        report["latency"][k]["describe"].split(": ")[-1].split()[0] for k in ("input", "round_up_8", "best")
    }
    words = {w for line in out.splitlines() if line.startswith("│") for w in line.replace("│", " ").split()}
    assert figures <= words, (figures, out)
    assert "…" not in out.split("vs input")[0], out
    assert os.path.isfile(out_dir / "model.onnx")
