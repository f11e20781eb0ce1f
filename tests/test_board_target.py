"""Which built-in target a Jetson is (deployopt.targets.board), from what `jetson/runner.py
--env-only` reads on it (device-tree model and compatible, MemTotal); `deployopt targets --remote`
and `optimize --remote` without --target against the stand-in board of tests/test_tensorrt_remote.py
(ssh and scp played on this machine, the real runner on a fake sysfs tree). No real Jetson: the
boards' strings are tests/jetson_sysfs_fake.BOARDS, which says per string whether it was seen in a
public source (where) or assumed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import jetson_sysfs_fake as sysfs_fake
import pytest
from cli_runner import run_cli
from scripts import load_script
from test_optimize_remote import ENV_ONLY_LINES, optimize_remote, two_convs, without_budget_note
from test_tensorrt_remote import HOST, RUNNER, play_the_board

from deployopt.errors import BackendFailed, BackendUnavailable, TargetError
from deployopt.targets import board as board_module
from deployopt.targets import builtin_names, get_target, list_targets
from deployopt.targets.board import (
    MODULES,
    BoardMatch,
    nominal_memory_gb,
    target_for_board,
    target_for_remote,
)

#: The board these tests play is this machine: its /tmp/deployopt-trtexec and deployopt-runner folders
#: are every such test's, and a run at work in one (optimize --remote) is what bench's and optimize's
#: look for other runs warns of. One xdist worker runs them all, in turn (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("board")

runner = load_script(RUNNER, "jetson_runner_board")
BOARDS = sysfs_fake.BOARDS
JETSON_TARGETS = [t.name for t in list_targets() if t.kind == "jetson"]


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def env_of(board: sysfs_fake.Board) -> dict[str, Any]:
    """The keys runner.py --env-only records for `board`."""
    env: dict[str, Any] = {"board": board.model, "compatible": list(board.compatible)}
    if board.mem_total_kib is not None:
        env["mem_total_kib"] = board.mem_total_kib
    return env


# ------------------------------------------------------------------ the mapping (pure)


@pytest.mark.parametrize("name", JETSON_TARGETS)
def test_every_jetson_target_we_ship_is_what_its_board_says(name: str) -> None:
    """Each built-in Jetson target is reached from its board's strings, by the module part number
    in compatible (a developer kit's name there on TX2 and AGX Xavier), and the reason says how
    MemTotal weighed in (it agrees, or it chose among the kit's modules)."""
    match = target_for_board(env_of(BOARDS[name]))
    assert match.target == name, match.why
    assert match.why.startswith("compatible names p"), match.why
    assert re.search(r"MemTotal agrees \(\d+ GB\)|, with its \d+ GB: ", match.why), match.why


def test_every_target_the_tables_name_ships() -> None:
    shipped = set(builtin_names())
    named = {m.target for m in MODULES.values()} - {None}
    assert named <= shipped and set(JETSON_TARGETS) <= named


def test_orin_nano_8gb_and_orin_nx_8gb_are_told_apart() -> None:
    """Same SM count (8) and compute capability (8.7): measured_elsewhere cannot tell them apart,
    the SKU in compatible can."""
    nano, nx = get_target("orin-nano-8gb"), get_target("orin-nx-8gb")
    assert (nano.sms, nano.cc) == (nx.sms, nx.cc)
    assert target_for_board(env_of(BOARDS["orin-nano-8gb"])).target == "orin-nano-8gb"
    assert target_for_board(env_of(BOARDS["orin-nx-8gb"])).target == "orin-nx-8gb"


def test_the_agx_orin_developer_kit_and_a_super_mode() -> None:
    devkit = target_for_board(env_of(BOARDS["agx-orin-devkit"]))  # p3701-0000 with 32 GB
    assert devkit.target == "agx-orin-64gb"
    assert "16 SMs at 1300 MHz" in devkit.why and "MemTotal says (32 GB)" in devkit.why
    fast = target_for_board(env_of(BOARDS["orin-nano-super"]))
    assert fast.target == "orin-nano-8gb" and "Super mode" in fast.why


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (env_of(BOARDS["thor"]), "module p3834-0008 is not one deployopt has a target for (model "
                                 "'NVIDIA Jetson AGX Thor Developer Kit'; compatible "
                                 "'nvidia,p4071-0000+p3834-0008, nvidia,p3834-0008, nvidia,tegra264')"),
        (env_of(BOARDS["tx1"]), "compatible names jetson-cv: Jetson TX1: no built-in target has its GPU"),
        ({}, "the board names no Jetson module deployopt knows (no device-tree model, compatible or "
             "MemTotal)"),
        ({"board": "Raspberry Pi 5", "compatible": ["raspberrypi,5-model-b", "brcm,bcm2712"]},
         "the board names no Jetson module deployopt knows (model 'Raspberry Pi 5'"),
    ],
)  # fmt: skip
def test_unknown_boards_are_none_with_what_was_read(env: dict[str, Any], said: str) -> None:
    match = target_for_board(env)
    assert match.target is None and said in match.why


def test_a_module_with_no_target_names_the_calibrate_command_and_a_target_to_start_from() -> None:
    """Each module no built-in target has names `deployopt calibrate --remote USER@HOST --target T
    --name NAME` with T a built-in target of the same GPU line (it said `deployopt calibrate` alone,
    the command that had just failed on that board)."""
    nearest = {}
    for part, module in MODULES.items():
        if module.target is None:
            found = re.search(
                r"`deployopt calibrate --remote USER@HOST --target (\S+) --name NAME`", module.note
            )
            assert found is not None, (part, module.note)
            nearest[part] = found.group(1)
    assert set(nearest.values()) <= set(builtin_names())
    assert nearest["p2180-1000"] == "nano" and nearest["p3489-0000"] == "tx2"  # TX1: the Nano's Tegra X1


def test_memory_and_the_model_narrow_what_compatible_leaves_open() -> None:
    """A carrier maker's device tree may name no module: the model's words and MemTotal decide, and
    where they cannot (8 GB Orin with no Nano/NX in the model, an AGX Orin with 32 GB: the developer
    kit's 16-SM module or the 14-SM 32GB one), None names the choices; MemTotal that contradicts
    the SKU named is None too."""
    vendor = ["acme,carrier", "nvidia,tegra234"]

    def match(model: str, gb: float, compatible: list[str] = vendor) -> BoardMatch:
        return target_for_board(
            {"board": model, "compatible": compatible, "mem_total_kib": int(gb * 0.93 * 2**20)}
        )

    assert match("ACME Orin NX carrier", 16).target == "orin-nx-16gb"
    assert match("ACME Orin NX carrier", 8).target == "orin-nx-8gb"
    assert match("ACME Orin Nano carrier", 8).target == "orin-nano-8gb"
    assert match("ACME Orin Nano carrier", 4).target == "orin-nano-4gb"
    open_8 = match("ACME Orin carrier", 8, ["nvidia,p3768-0000+p3767-0099", "nvidia,tegra234"])
    assert open_8.target is None and "a Jetson Orin NX / Orin Nano SKU not in the module table" in open_8.why
    assert "orin-nx-8gb (Jetson Orin NX 8GB) or orin-nano-8gb" in open_8.why
    agx = match("NVIDIA Jetson AGX Orin Developer Kit", 32)
    assert agx.target is None and "agx-orin-64gb" in agx.why and "agx-orin-32gb" in agx.why
    assert match("NVIDIA Jetson AGX Orin Developer Kit", 64).target == "agx-orin-64gb"
    wrong = match("NVIDIA Orin Nano Developer Kit", 4, list(BOARDS["orin-nano-8gb"].compatible))
    assert wrong.target is None and "Jetson Orin Nano 8GB (8 GB), but the board has 4 GB" in wrong.why
    small = match("Jetson-AGX", 8, ["nvidia,p2972-0000", "nvidia,tegra194"])
    assert small.target is None and "Jetson AGX Xavier 8GB" in small.why


def test_nominal_memory_is_memtotal_rounded_up_to_a_power_of_two() -> None:
    assert nominal_memory_gb(4_059_504) == 4  # a Nano's MemTotal (goodrobots/maverick#867)
    assert [nominal_memory_gb(b.mem_total_kib) for b in BOARDS.values() if b.mem_total_kib] == [
        4, 8, 8, 32, 4, 8, 8, 16, 32, 64, 32, 8,
    ]  # fmt: skip


# ------------------------------------------------------------------ the runner reads it


@pytest.mark.parametrize(
    ("tree", "board"),
    [(sysfs_fake.nano, "nano"), (sysfs_fake.orin, "agx-orin-64gb"), (sysfs_fake.orin, "orin-nano-8gb")],
)
def test_env_only_reports_model_compatible_and_memory(
    tree: Any, board: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On fake Nano and Orin trees, --env-only records the device tree's model and compatible (NUL
    separated in the file) and MemTotal, which map to that board's target; each is left out where
    it cannot be read."""
    root = tree(tmp_path, board=board)
    monkeypatch.setattr(runner, "SYSFS", str(root / "sys"))
    monkeypatch.setattr(runner, "PROCFS", str(root / "proc"))
    monkeypatch.setattr(runner, "_cmd", lambda args, timeout=10: None)  # no nvpmodel here
    assert runner.main(["--env-only"]) == 0
    env = json.loads(capsys.readouterr().out)
    expected = BOARDS[board]
    assert env["board"] == expected.model
    assert env["compatible"] == list(expected.compatible)
    assert env["mem_total_kib"] == expected.mem_total_kib
    assert target_for_board(env).target == board
    for fact in ("device-tree/model", "device-tree/compatible", "meminfo"):  # unreadable: left out
        (root / "proc" / fact).unlink()
    assert runner.main(["--env-only"]) == 0
    assert not {"board", "compatible", "mem_total_kib"} & set(json.loads(capsys.readouterr().out))


# ------------------------------------------------------------------ the CLI, on the stand-in board


def board_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, board: str) -> Path:
    """The stand-in board (test_tensorrt_remote.play_the_board) with BOARDS[board]'s device tree;
    returns the ssh/scp log."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_ROOT", str(sysfs_fake.orin(tmp_path / board, board=board)))
    return log


def test_cli_targets_remote_names_the_board_its_target_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = board_tree(tmp_path, monkeypatch, "orin-nx-16gb")
    code, stdout, err = run_cli(monkeypatch, capsys, "targets", "--remote", HOST)
    assert code == 0, err
    assert log.read_text().splitlines() == ENV_ONLY_LINES
    lines = stdout.splitlines()
    assert lines[0].startswith(
        f"board at {HOST}: model 'NVIDIA Jetson Orin NX Engineering Reference Developer Kit'; compatible "
        "'nvidia,p3768-0000+p3767-0000, nvidia,p3767-0000, nvidia,tegra234'; MemTotal 15,660,000 kB (16 GB)"
    )
    assert lines[1] == (
        "target: orin-nx-16gb (Jetson Orin NX 16GB, 8 SMs, CC 8.7): compatible names p3767-0000: "
        "Jetson Orin NX 16GB; MemTotal agrees (16 GB)"
    )
    assert lines[2] == (
        f"use --target orin-nx-16gb; optimize, calibrate and staircase with `--remote {HOST}` and no "
        "--target read it from the board"
    )
    code, stdout, err = run_cli(monkeypatch, capsys, "targets", "--remote", HOST, "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["target"] == "orin-nx-16gb" and doc["remote"] == HOST
    assert doc["read"]["compatible"] == list(BOARDS["orin-nx-16gb"].compatible)
    assert doc["read"]["mem_total_kib"] == 15_660_000 and doc["read"]["nvpmodel"] == "MODE_30W"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("thor", f"the board at {HOST} is no built-in target: module p3834-0008 is not one deployopt has a "
                 "target for (model 'NVIDIA Jetson AGX Thor Developer Kit'; compatible "
                 "'nvidia,p4071-0000+p3834-0008, nvidia,p3834-0008, nvidia,tegra264')"),
        ("unreachable", f"cannot reach {HOST} over ssh: ssh: connect to host jetson port 22: No route to "
                        "host"),
        ("no_python", f"python3 not found on {HOST}: runner.py needs Python 3.6+ there (JetPack ships it as "
                      "python3)"),
        ("with_target", "--remote reads which target the board is: give it without --target and --sms"),
        ("empty", "--remote '': give the board as USER@HOST"),
    ],
)  # fmt: skip
def test_cli_targets_remote_failures_are_one_line(
    case: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    board_tree(tmp_path, monkeypatch, "thor" if case == "thor" else "agx-orin-64gb")
    if case == "unreachable":
        (tmp_path / "sshbin" / "ssh").write_text(
            '#!/bin/sh\necho "ssh: connect to host jetson port 22: No route to host" >&2\nexit 255\n'
        )
    if case == "no_python":
        monkeypatch.setenv("FAKE_BOARD_NO_PYTHON", "1")
    more = ["--target", "nano"] if case == "with_target" else []
    host = "" if case == "empty" else HOST
    code, stdout, err = run_cli(monkeypatch, capsys, "targets", "--remote", host, *more)
    assert (code, stdout, err) == (2, "", f"error: {message}\n")


def test_optimize_remote_without_target_uses_the_boards_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No --target and no --remote: click's missing-option error, as before. With --remote: the
    board's target, read first (one stderr line saying which and from what), then the run as with
    --target; the report is that target's."""
    model = two_convs(tmp_path / "host" / "net.onnx")
    code, _, err = run_cli(monkeypatch, capsys, "optimize", str(model))
    assert (code, err) == (2, "error: Missing option '--target' / '-t'; see 'deployopt optimize --help'\n")
    log = board_tree(tmp_path, monkeypatch, "agx-orin-64gb")
    out = tmp_path / "out"
    code, stdout, err = optimize_remote(monkeypatch, capsys, model, out, "--json")
    assert code == 0, err
    said = (
        f"target: agx-orin-64gb, read from the board at {HOST} (compatible names p3701-0005: Jetson AGX "
        "Orin 64GB; MemTotal agrees (64 GB))"
    )
    err = without_budget_note(err)
    assert err.splitlines().count(said) == 1 and "warning" not in err
    assert json.loads(stdout)["target"]["name"] == "agx-orin-64gb"
    assert log.read_text().splitlines()[:3] == ENV_ONLY_LINES


def test_optimize_remote_target_the_board_contradicts_is_kept_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    board_tree(tmp_path, monkeypatch, "orin-nx-8gb")
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = optimize_remote(monkeypatch, capsys, model, out, "--target", "orin-nano-8gb")
    assert code == 0, err
    warning = (
        f"warning: --target orin-nano-8gb, but the board at {HOST} is orin-nx-8gb (compatible names "
        "p3767-0001: Jetson Orin NX 8GB; MemTotal agrees (8 GB)); keeping --target orin-nano-8gb"
    )
    assert err.splitlines().count(warning) == 1
    assert json.loads((out / "report.json").read_text())["target"]["name"] == "orin-nano-8gb"


def test_a_target_the_board_contradicts_is_in_the_report_where_the_gpus_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fake board's GPU (16 SMs, 8.7) is an AGX Orin 64GB's; the board says it is a 32GB module.
    The first measurement's SM check sees nothing (as on an Orin Nano 8GB against an NX 8GB), so
    the report said nothing and the run's first stderr line was the only record; the report keeps
    the board's word now, in report.json's measured_elsewhere and at the top of report.md."""
    board_tree(tmp_path, monkeypatch, "agx-orin-32gb")
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = optimize_remote(monkeypatch, capsys, model, out, "--target", "agx-orin-64gb")
    assert code == 0, err
    err = without_budget_note(err)
    assert err.count("warning: ") == 1  # the run's first line, once: not again at the first measurement
    said = (
        f"the board at {HOST} is agx-orin-32gb (compatible names p3701-0004: Jetson AGX Orin 32GB; MemTotal "
        "agrees (32 GB)), not agx-orin-64gb: the latencies are that board's, the candidate widths and wave "
        "columns agx-orin-64gb's; give --target agx-orin-32gb"
    )
    assert json.loads((out / "report.json").read_text())["measured_elsewhere"] == said
    assert f"**Warning: {said}.**" in (out / "report.md").read_text()


def test_optimize_remote_without_target_on_a_board_it_cannot_name_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = board_tree(tmp_path, monkeypatch, "thor")
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, stdout, err = optimize_remote(monkeypatch, capsys, model, out)
    assert code == 2 and stdout == "" and err.count("\n") == 1
    assert err.startswith(
        f"error: --target not given and the board at {HOST} does not say which it is: module p3834-0008 "
        "is not one deployopt has a target for"
    )
    assert not out.exists() and log.read_text().splitlines() == ENV_ONLY_LINES  # nothing else ran there


@pytest.mark.parametrize(
    ("case", "more", "message"),
    [
        ("exists", [], "{out} already exists; use --resume to continue or --force to start over"),
        ("no_journal", ["--resume"], "--resume: {out}/journal.jsonl does not exist; nothing to resume"),
        ("max_evals", ["--max-evals", "1"], "--max-evals must be at least 2 (the two baselines)"),
        ("sms", ["--sms", "4"], "backend 'tensorrt' cannot limit the GPU's SMs (--sms)"),
        ("table", ["--dtype", "int8", "--calibration-data", "{table}"], "--calibration-data {table} is a "
                  "calibration table: optimize checks each plan's outputs on real inputs"),
    ],
)  # fmt: skip
def test_optimize_remote_refuses_what_needs_no_board_before_asking_it(
    case: str,
    more: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without --target the board is asked which it is; an output folder that exists, a --resume
    with nothing to resume or a bad option is refused first, in one line, with nothing run on the
    board. They came after an ssh round trip and a `target:` line, so the error was not one line."""
    log = board_tree(tmp_path, monkeypatch, "agx-orin-64gb")
    model = two_convs(tmp_path / "host" / "net.onnx")
    out, table = tmp_path / "out", tmp_path / "net.calib"
    table.write_text("TRT-8601-EntropyCalibration2\n")
    if case == "exists":
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
    fill = {"out": str(out), "table": str(table)}
    more = [arg.format(**fill) for arg in more]
    code, stdout, err = optimize_remote(monkeypatch, capsys, model, out, *more)
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert err.startswith(f"error: {message.format(**fill)}")
    assert not log.exists()  # the board was not asked anything


def test_a_resumed_remote_run_takes_its_target_from_the_journal_and_refuses_another_board_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`optimize --remote H --resume` without --target: the run being resumed asked the board which it
    is when it began, so its journal's target is used and the board is not asked again (one line says
    so). A --resume naming another board is refused before any ssh, in the wording --resume uses for
    every other change; it came after an ssh round trip and a `target:` line."""
    log = board_tree(tmp_path, monkeypatch, "agx-orin-64gb")
    model = two_convs(tmp_path / "host" / "net.onnx")
    out = tmp_path / "out"
    code, _, err = optimize_remote(monkeypatch, capsys, model, out)
    assert code == 0, err
    log.write_text("")
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(model), "--remote", "someone@other-board", "--max-evals", "4",
        "--runs", "8", "--warmup", "1", "--sweep-runs", "3", "-o", str(out), "--resume",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(
        f"error: --resume: {out}/journal.jsonl was written by a different run "
        f"(--remote was {HOST}, now someone@other-board); use --force to start over"
    )
    assert log.read_text() == ""  # no board was asked anything
    code, _, err = optimize_remote(monkeypatch, capsys, model, out, "--resume")
    assert code == 0, err
    assert "target: agx-orin-64gb (the resumed run's, from its journal)" in err
    assert "--env-only" not in log.read_text()  # the board was not asked which it is


# ------------------------------------------------------------------ target_for_remote's rules


def test_target_for_remote_keeps_the_users_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's --target wins; a warning only where the board names another built-in target (a
    profile of the user's own is not second-guessed, a board that cannot say is quiet); an
    unreachable board fails now either way; without --target a board that cannot say is one line."""
    said: dict[str, Any] = {"match": BoardMatch("orin-nx-8gb", "compatible names p3767-0001")}

    def detect(
        host: str, timeout_s: float = 600.0, without_python3: str = ""
    ) -> tuple[dict[str, Any], BoardMatch]:
        if isinstance(said["match"], Exception):
            raise said["match"]
        return {}, said["match"]

    monkeypatch.setattr(board_module, "detect_remote_target", detect)
    assert target_for_remote(None, HOST).target == "orin-nx-8gb"
    assert target_for_remote("orin-nx-8gb", HOST).warning is None
    assert "keeping --target orin-nano-8gb" in str(target_for_remote("orin-nano-8gb", HOST).warning)
    assert target_for_remote(os.path.join("profiles", "mine.json"), HOST).warning is None
    said["match"] = BoardMatch(None, "the board names no Jetson module deployopt knows")
    assert target_for_remote("nano", HOST) == board_module.RemoteTarget("nano")
    with pytest.raises(TargetError, match="does not say which it is: the board names no Jetson module"):
        target_for_remote(None, HOST)
    said["match"] = BackendFailed("runner.py on user@jetson: something")
    assert target_for_remote("nano", HOST) == board_module.RemoteTarget("nano")
    said["match"] = BackendUnavailable(f"cannot reach {HOST} over ssh: no route")
    with pytest.raises(BackendUnavailable):
        target_for_remote("nano", HOST)
