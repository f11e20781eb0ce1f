"""Output where users read it: a CI log (FORCE_COLOR, 80 columns, no terminal), a narrow terminal,
COLUMNS=0 (a 0x0 pty), a stdout that is not UTF-8, a model file name that is not UTF-8.

Each test runs `python -m deployopt` in a subprocess with the environment set, on this checkout:
rich fixes its colour system and width when it is imported, so the in-process runner
(cli_runner.run_cli) never saw what these users saw. Tables are checked by what they must show
whole (every figure the JSON of the same run holds), not by their layout."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "resnet56_pruned_cifar.onnx"
#: what a developer's shell or a CI job may have set, that these tests set themselves
CLEARED = ("FORCE_COLOR", "NO_COLOR", "COLUMNS", "LINES", "PYTHONIOENCODING", "TTY_COMPATIBLE", "TERM")
#: a figure as the tables print it: 1300, 921.6, +30.0, 3e-11, 50%; a figure split over two lines
#: ("2338." / "4") reads as two other figures
FIGURE = re.compile(r"[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?%?")


def deployopt(
    cwd: Path,
    *args: str | Path,
    env: dict[str, str] | None = None,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.PIPE,
    **popen: Any,
) -> subprocess.CompletedProcess[bytes]:
    """`python -m deployopt ARGS` from this checkout, run in `cwd` with an empty cache there and
    `env` over the environment (less CLEARED); `popen`: more of subprocess.run's arguments."""
    base = {k: v for k, v in os.environ.items() if k not in CLEARED}
    base["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    base["DEPLOYOPT_CACHE_DIR"] = str(cwd / "cache")
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "deployopt", *map(str, args)],
        cwd=cwd,
        env=base,
        stdout=stdout,
        stderr=stderr,
        timeout=300,
        check=False,
        **popen,
    )


def figures(text: str) -> set[str]:
    return set(FIGURE.findall(text))


def boxed_rows(out: str, data_columns: int) -> list[list[str]]:
    """The rows of a boxed table (`│` between cells) as each column's pieces joined: a row starts
    on a line whose cell `data_columns` (a number every row has) is not empty, and a folded name
    is its pieces put together again (word-wrapped text loses the spaces it broke at)."""
    rows: list[list[str]] = []
    for line in out.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells[data_columns]:
            rows.append(cells)
        else:
            rows[-1] = [a + b for a, b in zip(rows[-1], cells)]
    return rows


# --json under FORCE_COLOR: many CI configurations set it for coloured logs, and rich's print_json
# wrapped each key in ANSI codes, so `--json | jq` failed there (and only there)

JSON_COMMANDS = {
    "targets": ["targets"],
    "targets -t": ["targets", "-t", "tx2"],
    "backends": ["backends"],
    "staircase": ["staircase", "-t", "tx2", "--input", "1x64x28x28", "--out-channels", "8:64:8"],
    "bench": ["bench", EXAMPLE, "--runs", "5", "--warmup", "1"],
    "profile": ["profile", EXAMPLE, "--runs", "1", "--warmup", "1"],
}


@pytest.mark.parametrize("command", JSON_COMMANDS)
def test_json_is_json_when_a_ci_forces_colour(tmp_path: Path, command: str) -> None:
    done = deployopt(tmp_path, *JSON_COMMANDS[command], "--json", env={"FORCE_COLOR": "1"})
    assert done.returncode == 0, done.stderr.decode()
    assert b"\x1b" not in done.stdout
    json.loads(done.stdout)
    assert done.stdout.isascii()  # a stdout of any encoding takes it


def test_targets_remote_json_is_json_when_a_ci_forces_colour(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The board's answer (the stand-in board of test_board_target, reached through the fake ssh
    its environment puts on PATH) under FORCE_COLOR."""
    from test_board_target import HOST, board_tree

    board_tree(tmp_path, monkeypatch, "orin-nx-16gb")
    done = deployopt(tmp_path, "targets", "--remote", HOST, "--json", env={"FORCE_COLOR": "1"})
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["target"] == "orin-nx-16gb"


def test_a_log_under_force_color_is_coloured_but_gets_no_live_bar(tmp_path: Path) -> None:
    """stderr a pipe (a CI log) under FORCE_COLOR: rich took it for a terminal and redrew its live
    progress bar there (a 25 s optimize wrote 206 redraws, 62 KB); it is no terminal, so none of
    the bar's cursor controls, while FORCE_COLOR still colours what is printed."""
    done = deployopt(
        tmp_path, "optimize", EXAMPLE, "-t", "tx2", "-b", "model", "-o", "out", env={"FORCE_COLOR": "1"}
    )
    assert done.returncode == 0, done.stderr.decode()
    for control in (b"\r", b"\x1b[?25l", b"\x1b[2K", b"\x1b[1A"):  # redraw, hide cursor, erase, up
        assert control not in done.stderr, control
    assert b"\x1b[" in done.stdout  # the table and its notes still in colour


# Narrow output: a pipe or a CI log is 80 columns, a terminal may be 40. A figure must be whole.


@pytest.mark.parametrize("columns", [40, 60, 80])
def test_targets_table_keeps_every_name_and_figure_whole(tmp_path: Path, columns: int) -> None:
    """At 60 columns TX2's 1300 MHz read 130 and compute capability 6.2 read 6.; at 50 two
    orin-nano names collapsed into one; the model column went without a mark."""
    listed = json.loads(deployopt(tmp_path, "targets", "--json").stdout)
    done = deployopt(tmp_path, "targets", env={"COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "…" not in out
    assert {"name", "CC", "SMs", "MHz", "model"} <= set(out.split())
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()}
    for t in listed:
        row = rows[t["name"]]  # the name whole, at the start of its row
        expected = [
            ".".join(map(str, t["compute_capability"])),
            str(t["sms"]),
            f"{t['clock_mhz']:g}",
            f"{t['max_threads_per_sm']}/{t['max_blocks_per_sm']}/{t['max_warps_per_sm']}",
            f"{t['shared_mem_per_sm'] // 1024}/{t['shared_mem_per_block'] // 1024}",
            f"{t['registers_per_sm'] // 1024}K/{t['registers_per_block'] // 1024}K",
        ]
        assert [e for e in expected if e not in row] == [], (t["name"], row)


def write_result(path: Path, median: float, seed: int, measured_at: str) -> None:
    """A bench result of 200 samples about `median` with an IQR about 12,000 µs (a noisy host)."""
    from deployopt.timing import Timing

    samples = list(median + np.random.default_rng(seed).normal(0.0, 9000.0, 200))
    model = {"file": path.stem + ".onnx", "sha256": "ab" * 32}
    timing = Timing("ort", samples, 10, "one forward pass", {}, model=model, measured_at=measured_at)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(timing.to_json()))


def compare_folders(tmp_path: Path, slower: float = 1.3) -> tuple[Path, Path]:
    """Baseline and current folders of two models whose names differ only at their end; the
    second `slower` times as slow now."""
    base, cur = tmp_path / "base", tmp_path / "cur"
    for i, (name, factor) in enumerate(
        (("resnet56_pruned_cifar_v1", 1.0), ("resnet56_pruned_cifar_v2", slower))
    ):
        write_result(base / f"{name}.json", 77777.7, 2 * i, "2026-12-07T09:00:00Z")
        write_result(cur / f"{name}.json", 77777.7 * factor, 2 * i + 1, "2026-12-07T09:10:00Z")
    return base, cur


@pytest.mark.parametrize("columns", [40, 60, 80])
def test_compare_names_every_model_and_keeps_every_figure_whole(tmp_path: Path, columns: int) -> None:
    """At 80 columns both models read `resnet56…`, and the summary did not say which regressed; at
    60 an IQR of 12149.7 read `(1214…`. The names fold, every figure is whole, the summary names
    the slower model."""
    base, cur = compare_folders(tmp_path)
    done = deployopt(tmp_path, "compare", base, cur, "-o", "c.json", env={"COLUMNS": str(columns)})
    assert done.returncode == 1, done.stderr.decode()  # one regression
    out = done.stdout.decode()
    assert "…" not in out
    doc = json.loads((tmp_path / "c.json").read_text())
    rows = boxed_rows(out, data_columns=4)  # p: one word, on its row's first line
    assert [row[0] for row in rows] == [p["name"] for p in doc["pairs"]]
    shown = figures(out)
    for p in doc["pairs"]:
        for side in ("baseline", "current"):
            expected = {f"{p[side]['median_us']:.1f}", f"{p[side]['iqr_us']:.1f}", str(p[side]["runs"])}
            assert expected <= shown, (p["name"], side, expected - shown)
        assert {f"{p['change_pct']:+.1f}", f"{p['p_value']:.2g}"} <= shown, p["name"]
    summary = next(line for line in out.splitlines() if " compared" in line)
    assert summary.startswith("1 regression in 2 compared")
    assert "resnet56_pruned_cifar_v2" in summary and "resnet56_pruned_cifar_v1" not in summary


@pytest.mark.parametrize("columns", [40, 80])
def test_profile_table_keeps_names_and_figures_whole(tmp_path: Path, columns: int) -> None:
    """At 80 columns three ONNX nodes of a layer read `layer1.0.conv…` alike; at 40 the layer and
    op columns went to nothing. Every row of the table is its layer in the JSON, whole."""
    args = ("profile", EXAMPLE, "--runs", "2", "--warmup", "1", "-o", "p.json")
    done = deployopt(tmp_path, *args, env={"COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr.decode()
    out = done.stdout.decode()
    assert "…" not in out
    layers = json.loads((tmp_path / "p.json").read_text())["layers"]
    rows = boxed_rows(out, data_columns=2)
    assert len(rows) == len(layers)
    for row, layer in zip(rows, layers):
        nodes = ", ".join(layer["onnx_nodes"]) if layer["onnx_nodes"] != [layer["name"]] else "="
        iqr = "n/a" if layer["iqr_us"] is None else f"{layer['iqr_us']:.1f}"
        row[5] = row[5].replace(" ", "")  # the spaces of a line holding two of its names
        assert row == [
            layer["name"],
            layer["extra"]["op"],
            f"{layer['time_us']:.1f}",
            iqr,
            f"{100 * layer['share']:.1f}%",
            nodes.replace(" ", ""),
        ]


@pytest.mark.parametrize("columns", [40, 60, 80])
def test_staircase_table_keeps_every_figure_on_one_line(tmp_path: Path, columns: int) -> None:
    """staircase --measure at 80 columns split `2338.4` into `2338.` and `4`, and the tile 128x128
    into `128x12` and `8`: each row is now one line of nine whole figures, the predicted ones
    those of the JSON."""
    sweep = (
        "staircase",
        "-t",
        "nano",
        "--input",
        "1x128x28x28",
        "--out-channels",
        "128,384",
        "--dtype",
        "fp32",
    )
    doc = json.loads(deployopt(tmp_path, *sweep, "--json").stdout)
    done = deployopt(tmp_path, *sweep, "--measure", "ort", "--runs", "3", env={"COLUMNS": str(columns)})
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    rule = next(i for i, line in enumerate(lines) if line.strip().startswith("─"))
    rows = [line.split() for line in lines[rule + 1 :] if line.strip()][: len(doc["points"]) + 1]
    for row, point, kernel in zip(rows, doc["points"], doc["predicted_kernels"]):
        assert row[:5] == [
            str(point["out_channels"]),
            "x".join(map(str, kernel["tile"])),
            str(kernel["blocks"]),
            str(kernel["blocks_per_sm"]),
            str(point["waves"]),
        ]
        assert re.fullmatch(r"\d+%", row[5]) and row[6] == f"{point['predicted_us']:.1f}"
        assert all(re.fullmatch(r"\d+\.\d", cell) for cell in row[7:]) and len(row) == 9, row
    assert not rows[len(doc["points"])][0][0].isdigit()  # the note under the table, no third row


def test_columns_0_keeps_every_line(tmp_path: Path) -> None:
    """`export COLUMNS=$(tput cols)` in a 0x0 pty (script, docker exec -t): rich printed nothing
    at width 0, the error line and --json included, with the exit status unchanged."""
    env = {"COLUMNS": "0", "LINES": "0"}
    table = deployopt(tmp_path, "targets", env=env)
    assert table.returncode == 0 and b"orin-nano-8gb" in table.stdout
    doc = deployopt(tmp_path, "targets", "-t", "tx2", "--json", env=env)
    assert json.loads(doc.stdout)["name"] == "tx2"
    failed = deployopt(tmp_path, "bench", "missing.onnx", env=env)
    assert (
        failed.returncode == 2 and failed.stderr.startswith(b"error: ") and b"missing.onnx" in failed.stderr
    )


# A stdout that is not UTF-8 (PYTHONIOENCODING=ascii, a Latin-1 console): a `µs` or `…` was a
# traceback and exit 1 once the work was done

ASCII_COMMANDS: dict[str, tuple[list[Any], bytes]] = {
    "analyze": (["analyze", EXAMPLE], b"32 channel groups"),
    "verify": (["verify", EXAMPLE, EXAMPLE], b"PASSED"),
    "optimize": (["optimize", EXAMPLE, "-t", "tx2", "-b", "model", "-o", "out"], b"\nwrote out/ (model.onnx"),
}


@pytest.mark.parametrize("command", ASCII_COMMANDS)
def test_a_stdout_that_is_not_utf8_gets_every_line(tmp_path: Path, command: str) -> None:
    args, said = ASCII_COMMANDS[command]
    done = deployopt(tmp_path, *args, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr.decode()
    assert said in done.stdout and b"Traceback" not in done.stderr
    done.stdout.decode("ascii")


def test_json_on_a_stdout_that_is_not_utf8_is_the_same_document(tmp_path: Path) -> None:
    utf8 = json.loads(deployopt(tmp_path, "targets", "--json").stdout)
    done = deployopt(tmp_path, "targets", "--json", env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == utf8


def test_a_model_file_name_that_is_not_utf8(tmp_path: Path) -> None:
    """A Latin-1 name (`caf\\xe9.onnx`) under a UTF-8 locale (PYTHONIOENCODING=utf-8:strict, as an
    en_US.UTF-8 one has it): report.md could not name it (surrogates not allowed), a traceback
    and a folder with only its journal; then stdout could not print it. The byte is written
    `\\udce9`, in valid UTF-8."""
    name = os.fsdecode(b"caf\xe9.onnx")
    shutil.copyfile(EXAMPLE, tmp_path / name)
    done = deployopt(
        tmp_path, "optimize", name, "-t", "tx2", "-b", "model", env={"PYTHONIOENCODING": "utf-8:strict"}
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    outdir = tmp_path / os.fsdecode(b"caf\xe9.deployopt")
    assert {"model.onnx", "plan.json", "report.md", "report.json"} <= {p.name for p in outdir.iterdir()}
    assert "# deployopt optimize: caf\\udce9.onnx" in (outdir / "report.md").read_bytes().decode("utf-8")
    assert json.loads((outdir / "report.json").read_text())["model"] == name
    assert done.stdout.splitlines()[-1].startswith(b"wrote caf\\udce9.deployopt/ (model.onnx")


def test_profile_says_where_its_trace_went(tmp_path: Path) -> None:
    """--trace-dir DIR wrote DIR/<model>.ort_profile.json and said so nowhere."""
    args = ("profile", EXAMPLE, "--runs", "1", "--warmup", "1", "--trace-dir", "traces", "-o", "p.json")
    done = deployopt(tmp_path, *args)
    assert done.returncode == 0, done.stderr.decode()
    (trace,) = json.loads((tmp_path / "p.json").read_text())["trace"]
    # named after the model, the time and the pid (fileio.run_unique_path): one run's own
    assert re.fullmatch(r"traces/resnet56_pruned_cifar\.\d{8}T\d{6}-\d+\.ort_profile\.json", trace)
    assert f"wrote {trace}" in done.stdout.decode().splitlines()
    assert isinstance(json.loads((tmp_path / trace).read_text()), list)  # the profiler's events
