"""Terminal-facing fixes of the CLI: a stdout whose error handler is `surrogateescape` (the C/POSIX
locale with UTF-8 mode off) gets every line, escaped; the tables of verify, analyze and apply keep
every figure whole at any width (print_table), names folding; staircase and calibrate take
`-b/--backend` as bench, profile and optimize spell it; bench and optimize answer `--measure` with
`--backend`; examples/README.md says how verify picks its images and makes the candidate it checks."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_cli

from deployopt.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "resnet56_pruned_cifar.onnx"
CIFAR = ROOT / "calibration_data" / "cifar10"
CLEARED = ("FORCE_COLOR", "NO_COLOR", "COLUMNS", "LINES", "PYTHONIOENCODING", "TTY_COMPATIBLE", "TERM")


def _deployopt(cwd: Path, *args: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """`python -m deployopt ARGS` from this checkout in `cwd`, `env` over the environment."""
    base = {k: v for k, v in os.environ.items() if k not in CLEARED}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    base["DEPLOYOPT_CACHE_DIR"] = str(cwd / "cache")
    base.update(env)
    return subprocess.run(
        [sys.executable, "-m", "deployopt", *map(str, args)],
        cwd=cwd,
        env=base,
        capture_output=True,
        timeout=300,
        check=False,
    )


# 01: stdout with errors=surrogateescape


def test_any_encoding_makes_a_surrogateescape_stream_escape_and_puts_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors="surrogateescape")
    monkeypatch.setattr(sys, "stdout", stream)
    with cli_main._any_encoding():
        stream.write("24.9 µs …\n")
        stream.flush()
        assert stream.errors == "backslashreplace"
    assert stream.errors == "surrogateescape"  # the handler it had, not `strict`
    assert raw.getvalue() == b"24.9 \\xb5s \\u2026\n"


@pytest.mark.parametrize(
    "env",
    [{"PYTHONIOENCODING": "ascii:surrogateescape"}, {"LC_ALL": "C", "PYTHONUTF8": "0", "LANG": "C"}],
    ids=["PYTHONIOENCODING", "C-locale"],
)
def test_a_surrogateescape_stdout_gets_analyze_with_its_units_escaped(tmp_path: Path, env: dict) -> None:
    """analyze --target's waves table (`pred. µs`, `…`) was a UnicodeEncodeError traceback, exit 1."""
    done = _deployopt(tmp_path, "analyze", EXAMPLE, "--target", "nano", env=env)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"Traceback" not in done.stderr
    text = done.stdout.decode("ascii")
    assert "32 channel groups" in text and "pred. \\xb5s" in text


def test_verify_on_a_surrogateescape_stdout_passes_rather_than_crashes(tmp_path: Path) -> None:
    """A passing verify exited 1 (a traceback), the code of a real fidelity failure."""
    env = {"PYTHONIOENCODING": "ascii:surrogateescape"}
    done = _deployopt(tmp_path, "verify", EXAMPLE, EXAMPLE, "--count", "2", env=env)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"PASSED" in done.stdout and b"\\u2265 0.999" in done.stdout


# 02: tables keep figures whole at any width


def _rows(text: str, title: str) -> list[list[str]]:
    """The body lines of the table titled `title` (a line holding it), each split into its cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("└"):
            return rows
        if line.startswith("│"):
            rows.append([cell.strip() for cell in line.strip().strip("│").split("│")])
    raise AssertionError(f"table {title!r} has no end:\n{text}")


def _words(rows: list[list[str]], column: int) -> set[str]:
    return {word for row in rows for word in row[column].split()}


def _assert_figures_whole(wide: str, narrow: str, title: str, columns: list[int]) -> None:
    """Every word of each figure column at the narrow width is a word the wide table has: a cut
    (`0.999999…`) or split (`1024×16×` / `27`) figure is not."""
    wide_rows, narrow_rows = _rows(wide, title), _rows(narrow, title)
    assert len(narrow_rows[0]) == len(wide_rows[0])
    for column in columns:
        whole = _words(wide_rows, column)
        got = _words(narrow_rows, column)
        assert got <= whole, (column, sorted(got - whole), narrow)
        assert any(re.search(r"\d", w) for w in got), (column, narrow)
        assert not any("…" in row[column] for row in narrow_rows), (column, narrow)


@pytest.fixture(scope="module")
def padded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example with every free group padded to a multiple of 8 (analyze --json, then apply), a
    candidate whose cosine is printed with many digits (0.99999999997)."""
    folder = tmp_path_factory.mktemp("padded")
    done = _deployopt(folder, "analyze", EXAMPLE, "--json", env={})
    assert done.returncode == 0, done.stderr.decode()
    groups = json.loads(done.stdout)["groups"]
    widths = {g["id"]: -(-g["width"] // 8) * 8 for g in groups if not g["frozen"]}
    (folder / "pad8.json").write_text(json.dumps({"widths": widths}))
    done = _deployopt(folder, "apply", EXAMPLE, "--plan", "pad8.json", "-o", "c.onnx", env={})
    assert done.returncode == 0, done.stderr.decode()
    return folder / "c.onnx"


@pytest.mark.parametrize("columns", [30, 40])
def test_verify_keeps_its_values_whole_at_narrow_widths(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], padded: Path, columns: int
) -> None:
    """verify's headline value was cut (`0.999999…` at 40 columns, `0.9999999999…` at 50) and its
    `threshold` header too."""
    args = ("verify", str(EXAMPLE), str(padded), "--calibration-data", str(CIFAR), "--count", "4")
    code, wide, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    code, narrow, err = run_cli(monkeypatch, capsys, *args, columns=columns)
    assert code == 0, err
    _assert_figures_whole(wide, narrow, "fidelity:", [1, 2])
    (cosine,) = [row[1] for row in _rows(wide, "fidelity:") if row[0].startswith("cosine similarity (min)")]
    assert len(cosine) > 10 and cosine in narrow and "threshold" in narrow  # 0.9999999999…, whole


@pytest.mark.parametrize("columns", [40, 80])
def test_analyze_waves_and_groups_keep_figures_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], columns: int
) -> None:
    """The waves table split a GEMM `1024×16×27` over two lines at 80 columns (a pipe's width) and
    every figure into one character a line at 40; names still fold."""
    args = ("analyze", str(EXAMPLE), "--target", "nano")
    code, wide, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    code, narrow, err = run_cli(monkeypatch, capsys, *args, columns=columns)
    assert code == 0, err
    _assert_figures_whole(wide, narrow, "waves on nano", [1, 2, 3, 4, 5, 6])
    _assert_figures_whole(wide, narrow, "channel groups", [1])
    waves = _rows(narrow, "waves on nano")
    assert waves[0][:7] == ["stem.conv", "1024×16×27", "128×64", "8", "4", "100 %", "24.9"], waves[0]
    if columns == 40:  # a long conv name folds rather than widening the table to hold it
        assert any(row[0] == "layer1.0.c" for row in waves), waves[:6]


def test_analyze_convs_keeps_shapes_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ("analyze", str(EXAMPLE), "--convs")
    code, wide, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    code, narrow, err = run_cli(monkeypatch, capsys, *args, columns=40)
    assert code == 0, err
    _assert_figures_whole(wide, narrow, "57 convs", [1, 2, 3])
    assert "1×16×32×32" in narrow


def test_apply_keeps_its_widths_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"widths": {"layer1.0.conv1.conv": 16, "layer1.1.conv1.conv": 4}}))
    outputs = []
    for columns, name in ((200, "wide.onnx"), (20, "narrow.onnx")):
        args = ("apply", str(EXAMPLE), "--plan", str(plan), "-o", str(tmp_path / name))
        code, out, err = run_cli(monkeypatch, capsys, *args, columns=columns)
        assert code == 0, err
        outputs.append(out)
    _assert_figures_whole(*outputs, "changed groups", [1])
    rows = _rows(outputs[1], "changed groups")
    assert [row[1] for row in rows if row[1]] == ["11 → 16", "8 → 4"]
    # a name folds, FOLD_MIN_WIDTH characters a line: rich squeezed it to `lay`/`er1`/`.0.`/...
    assert [row[0] for row in rows if row[0]][:2] == ["layer1.0.c", "onv1.conv"], rows


# 05: one backend option, two spellings


def test_staircase_takes_backend_and_b_as_measure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ("staircase", "--target", "nano", "--input", "1x16x32x32", "--out-channels", "16,24", "--json")
    docs = []
    for spelling in (("--measure", "ort"), ("--backend", "ort"), ("-b", "ort"), ("--backend=ort",)):
        code, out, err = run_cli(monkeypatch, capsys, *base, *spelling, "--runs", "2")
        assert code == 0, (spelling, err)
        docs.append(json.loads(out))
    for doc in docs:
        assert doc["measured"]["backend"] == "ort" and doc["measured"]["runs"] == [2, 2], doc["measured"]
        assert [p["out_channels"] for p in doc["points"] if p["measured_us"] > 0] == [16, 24]
    code, _, err = run_cli(monkeypatch, capsys, *base, "-b", "model")
    assert code == 2 and err == "error: --measure model: that backend predicts, it does not measure\n", err


def test_calibrate_takes_backend_as_measure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`calibrate --backend ort` was `No such option: --backend`; now it reaches calibrate's own
    check of the backend (model predicts: refused), as --measure does."""
    for spelling in ("--measure", "--backend", "-b"):
        code, _, err = run_cli(monkeypatch, capsys, "calibrate", "--target", "nano", spelling, "model")
        assert code == 2 and err == "error: --measure model: that backend predicts, it does not measure\n", (
            err
        )


@pytest.mark.parametrize("command", ["bench", "optimize"])
@pytest.mark.parametrize("given", ["--measure", "--measure=ort"])
def test_measure_on_bench_and_optimize_points_at_backend(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, given: str
) -> None:
    """click proposed `--mean` (an image-preprocessing option) for `--measure`."""
    code, _, err = run_cli(monkeypatch, capsys, command, str(EXAMPLE), given, "ort")
    assert code == 2
    assert (
        err
        == f"error: No such option: --measure (did you mean --backend?); see 'deployopt {command} --help'\n"
    )


def test_other_unknown_options_keep_clicks_suggestion(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A guard (passes before and after): only `--measure` is mapped; `--mea` keeps click's list."""
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(EXAMPLE), "--mea", "ort")
    assert code == 2 and "(Possible options: --mean" in err and "--backend" not in err, err


# 06: examples/README.md


def test_examples_readme_says_how_verify_picks_and_where_the_candidate_comes_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], padded: Path
) -> None:
    text = (ROOT / "examples" / "README.md").read_text()
    assert "first 16" not in text
    assert "verify reads 16 of them, at an even stride" in text
    code, out, err = run_cli(
        monkeypatch, capsys, "verify", str(EXAMPLE), str(padded), "--calibration-data", str(CIFAR)
    )
    assert code == 0, err
    assert "16 of the data's 20 images, at an even stride over its sorted files" in out
    # every model the README verifies is written by a command before it
    block = text.split("```")[3]
    for match in re.finditer(r"deployopt verify \S+ (\S+)", block):
        made = block[: match.start()]
        assert f"-o {match.group(1)}" in made, (match.group(1), block)
