"""`bench|profile --backend tensorrt --remote USER@HOST`: jetson/runner.py on the board, in one command.

The board is played on this machine by stand-in ssh and scp (as in tests/test_trtexec_backend.py:
ssh runs its command here, in a folder that is the board's home; scp copies), each logging its
arguments, and its `python3` runs the real jetson/runner.py against the fake TensorRT of
tests/test_tensorrt_fake_api.py (tests/fake_board_python.py), on a fake Orin sysfs tree. No real
Jetson, ssh or TensorRT is involved.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jetson_sysfs_fake as sysfs_fake
import pytest
from cli_runner import run_cli
from ssh_fake import SWEEP_TOKEN, board_processes

from deployopt.backends.base import MeasureOptions, Session, get_backend
from deployopt.errors import BackendFailed
from deployopt.layers import ConvShape
from deployopt.remote import PASS_STATUS, model_dir_name
from deployopt.timing import load_timing

#: The board these tests play is this machine: its /tmp/deployopt-trtexec and deployopt-runner folders
#: are every such test's, and a run at work in one (optimize --remote) is what bench's and optimize's
#: look for other runs warns of. One xdist worker runs them all, in turn (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("board")

TESTS = Path(__file__).resolve().parent
RUNNER = TESTS.parent / "jetson" / "runner.py"
OPTS = "-o BatchMode=yes -o ConnectTimeout=10"
HOST = "user@jetson"
REMOTE = ("--backend", "tensorrt", "--remote", HOST)
#: The runner's result in a model's board folder: each session's own name for it (remote.own_name),
#: its token pinned by conftest.
RESULT = f"result-{SWEEP_TOKEN}.json"
V11 = "11.4.1.2"  # tests/test_tensorrt_fake_api.py's strongly typed fake
QDQ_MODEL = TESTS / "data" / "modelopt_int8_se_net.onnx"  # ModelOpt's INT8 Q/DQ export


def play_the_board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Stand-in ssh and scp (tests/test_trtexec_backend.py's, with a home folder for the board, as
    the runner's work folder is relative to it) and the board's own python3 and nvpmodel.
    Returns (the ssh/scp log, the board's home)."""
    home = tmp_path / "board_home"
    home.mkdir()
    hostbin, boardbin = tmp_path / "sshbin", tmp_path / "boardbin"
    hostbin.mkdir()
    boardbin.mkdir()
    log = tmp_path / "ssh_scp.log"
    (hostbin / "ssh").write_text(
        f'#!/bin/sh\necho "ssh $*" >> "{log}"\nshift 5\n'  # -o BatchMode=yes -o ConnectTimeout=N HOST
        f'cd "{home}" || exit 1\nPATH="{boardbin}:$PATH" exec sh -c "$*"\n'
    )
    (hostbin / "scp").write_text(
        f'#!/bin/sh\necho "scp $*" >> "{log}"\nshift 4\nhere="$PWD"\ncd "{home}" || exit 1\n'
        # several sources and a folder, as scp takes them; a HOST:PATH is read as old scp's board
        # shell reads it (unquoted: a wildcard expands there, in the board's home); a relative path
        # here is the caller's, as real scp reads it (`bench examples/m.onnx --remote ...`)
        f'for a; do shift; case "$a" in {HOST}:*) set -- "$@" ${{a#*:}};; /*) set -- "$@" "$a";;'
        ' *) set -- "$@" "$here/$a";; esac; done\n'
        'exec cp "$@"\n'
    )
    (boardbin / "python3").write_text(
        "#!/bin/sh\n"
        # a runner that hangs (a build stuck in the driver): a child holds on, its pid recorded; the
        # version check before it answers at once (the fake TensorRT's import may take over 1 s)
        'if [ -n "$FAKE_BOARD_HANG" ] && [ "$1" = "-c" ]; then echo 10.3.0.26; exit 0; fi\n'
        'if [ -n "$FAKE_BOARD_HANG" ]; then\n'
        '  sleep 60 </dev/null >/dev/null 2>&1 &\n  echo $! > "$FAKE_BOARD_HANG"; wait; exit 0\nfi\n'
        # what TensorRT or the runner says on stderr on the way (FAKE_BOARD_SAYS), the run going on
        '[ -n "$FAKE_BOARD_SAYS" ] && [ "$1" != "-c" ] && printf "%s\\n" "$FAKE_BOARD_SAYS" >&2\n'
        # a board without python3: what its login shell (bash) says for a command it cannot find
        'if [ -n "$FAKE_BOARD_NO_PYTHON" ]; then\n'
        '  echo "bash: line 1: python3: command not found" >&2; exit 127\nfi\n'
        f'exec "{sys.executable}" "{TESTS / "fake_board_python.py"}" "$@"\n'
    )
    (boardbin / "nvpmodel").write_text('#!/bin/sh\nprintf "NV Power Mode: MODE_30W\\n2\\n"\n')
    for exe in [*hostbin.iterdir(), *boardbin.iterdir()]:
        exe.chmod(0o755)
    board_processes(boardbin, str(tmp_path), monkeypatch)
    monkeypatch.setenv("PATH", f"{hostbin}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_BOARD_ROOT", str(sysfs_fake.orin(tmp_path / "sysfs")))
    for name in (
        "FAKE_BOARD_TRT",
        "FAKE_BOARD_NO_PYTHON",
        "FAKE_BOARD_HANG",
        "FAKE_BOARD_SAYS",
        "FAKE_BOARD_DISK_FULL",
        "DEPLOYOPT_RUNNER",
    ):
        monkeypatch.delenv(name, raising=False)
    # the board's /tmp is this machine's: other tests' trtexec runs there are no run of this board's
    import deployopt.remote

    monkeypatch.setattr(deployopt.remote, "TRTEXEC_WORKDIR", str(home / "tmp" / "deployopt-trtexec"))
    return log, home


@pytest.fixture
def model(zoo_model_path: Callable[[str], Path], tmp_path: Path) -> Path:
    path = tmp_path / "host" / "net.onnx"
    path.parent.mkdir()
    path.write_bytes(zoo_model_path("mobilenet_like").read_bytes())
    return path


def board_dir(model: Path, stem: str | None = None, root: str = "deployopt-runner") -> str:
    """`model`'s folder on the board: its stem (`stem`: the user's, for a copy typed fp16 here) and
    a hash of its bytes (model_dir_name), in the work folder `root`."""
    return f"{root}/{model_dir_name(stem or model.stem, hashlib.sha256(model.read_bytes()).hexdigest())}"


def calib_npy_sent(run: str, model: Path) -> str:
    """The .npy the runner's command line `run` calibrates from: made here, named calib1 and a hash
    of its contents (another run's data, made into calib1.npy too, must not replace it) in the
    model's folder."""
    found = re.search(r" --calib-npy (\S+) ", run)
    assert found is not None, run
    assert re.fullmatch(re.escape(board_dir(model)) + r"/calib1-[0-9a-f]{12}\.npy", found.group(1)), run
    return found.group(1)


def version_check(timeout: str = "120") -> str:
    """The ssh line that reads the board's TensorRT version (fp16/int8 only, once per session),
    under the board's own `timeout` (the short limit: --timeout, at most 120 s)."""
    return (
        f"ssh {OPTS} {HOST} timeout --kill-after=10 {timeout} python3 -c "
        "'import tensorrt; print(tensorrt.__version__)'" + PASS_STATUS
    )


def made_and_looked(home: Path, rdir: str = "deployopt-runner/net") -> str:
    """The ssh line that makes the model's folder on the board, bench's and profile's first: in the
    same round trip it looks for what runs from the runner's and trtexec's work folders (the board's
    /tmp is `home`/tmp here), so the look costs no ssh more; and it removes the result this session
    left there (its own name, RESULT), which a runner writing none handed back."""
    return (
        f"ssh {OPTS} {HOST} mkdir -p {rdir} && rm -f -- {rdir}/{RESULT} || exit; "
        "echo deployopt-self $$ $PPID; pgrep -af -- "
        f"'[d]eployopt-runner/|[/]{str(home)[1:]}/tmp/deployopt-trtexec/' 2>/dev/null; exit 0"
    )


def runner_argv(flags: str, rdir: str = "deployopt-runner/net", timeout: str = "600") -> str:
    """The ssh line that runs the runner, up to its --engine-dir: under the board's own `timeout`
    (--timeout, 600 s by default), so a hung runner ends there too."""
    return (
        f"ssh {OPTS} {HOST} timeout --kill-after=10 {timeout} python3 deployopt-runner/runner.py "
        f"{rdir}/net.onnx {flags} "
        f"--workspace-mib 1024 --engine-dir {rdir}/engines"
    )


def test_cli_bench_runs_the_runner_on_the_board_and_reuses_its_engine(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One command: the runner and the model go to the board's work folder, the runner runs there
    with bench's flags, its JSON comes back and is written as bench writes it (the board's
    environment, its clock around the timed loop included); a second run reuses the engine."""
    log, home = play_the_board(tmp_path, monkeypatch)
    out = tmp_path / "result.json"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE,
        "--dtype", "fp16", "--runs", "6", "--warmup", "2", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    lines = log.read_text().splitlines()
    rdir = board_dir(model)  # deployopt-runner/net-<12 hex digits of its sha256>
    assert re.fullmatch(r"deployopt-runner/net-[0-9a-f]{12}", rdir)
    assert lines[:5] == [
        version_check(),  # 10.x: the model goes as it is
        made_and_looked(home, rdir),
        f"scp {OPTS} {RUNNER} {HOST}:deployopt-runner/runner.py",
        f"scp {OPTS} {model} {HOST}:{rdir}/net.onnx",
        runner_argv("--dtype fp16 --runs 6 --warmup 2", rdir) + f" --out {rdir}/{RESULT}" + PASS_STATUS,
    ]
    assert lines[5].startswith(f"scp {OPTS} {HOST}:{rdir}/{RESULT} /") and len(lines) == 6
    assert (home / "deployopt-runner" / "runner.py").read_bytes() == RUNNER.read_bytes()
    assert (home / rdir / "net.onnx").read_bytes() == model.read_bytes()
    doc = json.loads(out.read_text())
    assert list(doc) == [
        "backend", "median_us", "iqr_us", "ci95_us", "runs", "warmup", "samples_us", "timed", "environment",
        "model", "measured_at",
    ]  # fmt: skip
    assert doc["runs"] == len(doc["samples_us"]) == 6 and doc["warmup"] == 2
    assert doc["model"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
    env = doc["environment"]
    assert env["remote"] == HOST and env["runner"].startswith("jetson/runner.py v")
    assert env["nvpmodel"] == "MODE_30W" and env["tensorrt"] == "10.3.0.26"
    assert env["gpu_clock_during_run"]["before"]["cur_hz"] == sysfs_fake.ORIN_MAX_HZ
    assert env["engine_built_now"] is True and env["dtype"] == "fp16" and "fp16_typed_by" not in env
    assert doc["timed"].startswith("one forward pass (fp16), CUDA events")
    assert "(measured)" in stdout and f"wrote {out}" in stdout
    assert load_timing(out).median_us == doc["median_us"]

    again = tmp_path / "again.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE,
        "--dtype", "fp16", "--runs", "6", "--warmup", "2", "-o", str(again),
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(again.read_text())["environment"]["engine_built_now"] is False  # cached on the board
    code, stdout, err = run_cli(monkeypatch, capsys, "compare", str(out), str(again))
    assert code in (0, 1), err  # compare reads both (same model, same board)


def test_cli_bench_and_profile_remote_without_backend_run_the_runner(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`bench MODEL --remote HOST` with no --backend times on the board with the runner, as optimize's
    auto does with --remote: the default (ort) cannot run there, and the command was refused with
    `use it with one of those, not 'ort'`, a backend the user never named."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    for command in ("bench", "profile"):
        code, stdout, err = run_cli(
            monkeypatch, capsys, command, str(model), "--remote", HOST, "--dtype", "fp16", "--runs", "5"
        )
        assert code == 0, err
        assert "not 'ort'" not in err and "at user@jetson" in stdout
    runs = [ln for ln in log.read_text().splitlines() if " python3 deployopt-runner/runner.py " in ln]
    assert len(runs) == 2 and runs[1].endswith(f"--per-layer --out {board_dir(model)}/{RESULT}" + PASS_STATUS)
    # an explicit backend still wins: one that runs here is refused, naming it
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), "--remote", HOST, "--backend", "ort")
    assert code == 2 and "not 'ort'" in err


def test_cli_int8_sends_the_calibration_table_and_shapes(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An INT8 calibration table goes to the board beside the model, and the runner's --calib-cache
    names that copy; --input-shape becomes the runner's --shapes."""
    log, home = play_the_board(tmp_path, monkeypatch)
    table = tmp_path / "host" / "net.calib"
    table.write_bytes(b"TRT-8601-EntropyCalibration2\n")
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "int8",
        "--calibration-data", str(table), "--input-shape", "input:1x3x32x32", "--runs", "5",
    )  # fmt: skip
    assert code == 0, err
    lines = log.read_text().splitlines()
    rdir = board_dir(model)
    sent = f"{rdir}/{model_dir_name('net', hashlib.sha256(table.read_bytes()).hexdigest())}.calib"
    assert lines[0] == version_check()
    assert lines[4] == f"scp {OPTS} {table} {HOST}:{sent}"  # named by its contents (and its own name)
    assert (home / sent).read_bytes() == table.read_bytes()
    assert lines[5] == (
        runner_argv("--dtype int8 --runs 5 --warmup 20 --shapes input:1x3x32x32", rdir)
        + f" --calib-cache {sent} --out {rdir}/{RESULT}"
        + PASS_STATUS
    )


def test_cli_int8_without_calibration_or_qdq_is_refused_before_the_copy(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--dtype int8 on TensorRT up to 10.x with no calibration data and a model without Q/DQ nodes:
    the board built it fp16/fp32 (no scales) and the timing said int8; the tensorrt backend here
    refuses it. One line after the version check, nothing copied, nothing written."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    out = tmp_path / "r.json"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "int8", "-o", str(out)
    )
    assert (code, stdout) == (2, "") and err.count("\n") == 1
    assert err.startswith("error: INT8 needs calibration data (--calibration-data) or a model with Q/DQ")
    assert log.read_text().splitlines() == [version_check()] and not out.exists()


def test_cli_bench_notes_a_board_left_to_dvfs(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """jetson_clocks not run: the devfreq minimum is below the maximum, so the latency followed the
    governor; bench says so on stderr (the JSON on stdout stays clean) and what to run."""
    play_the_board(tmp_path, monkeypatch)
    low = 306_000_000
    monkeypatch.setenv("FAKE_BOARD_ROOT", str(sysfs_fake.orin(tmp_path / "dvfs", min_hz=low, cur_hz=low)))
    code, stdout, err = run_cli(monkeypatch, capsys, "bench", str(model), *REMOTE, "--runs", "5", "--json")
    assert code == 0, err
    assert json.loads(stdout)["environment"]["clocks_locked"] is False
    assert "note: the board's GPU clock was not locked (devfreq 306–1300.5 MHz)" in err
    assert "sudo jetson_clocks" in err


def test_cli_profile_notes_a_board_left_to_dvfs_and_both_name_the_board(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """profile times on the board as bench does, so a clock left to DVFS is the same note (it said
    nothing); and both say where they measured: the board's address, module and power mode, as
    optimize's "measured on" does (they named the GPU alone, "Orin", of any Orin board)."""
    play_the_board(tmp_path, monkeypatch)
    low = 306_000_000
    monkeypatch.setenv("FAKE_BOARD_ROOT", str(sysfs_fake.orin(tmp_path / "dvfs", min_hz=low, cur_hz=low)))
    where = (
        f"Orin (fake) at {HOST}, compute capability 8.7, sms 16, board NVIDIA Jetson AGX Orin Developer Kit, "
        "power mode MODE_30W, TensorRT 10.3.0.26"
    )
    code, stdout, err = run_cli(monkeypatch, capsys, "profile", str(model), *REMOTE, "--runs", "5")
    assert code == 0, err
    assert f"measured on: {where}" in stdout
    assert "note: the board's GPU clock was not locked (devfreq 306–1300.5 MHz)" in err
    code, stdout, err = run_cli(monkeypatch, capsys, "bench", str(model), *REMOTE, "--runs", "5")
    assert code == 0, err
    assert where in stdout and err.count("note: the board's GPU clock was not locked") == 1


def test_cli_sends_the_external_data_a_model_reads(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model that keeps its weights in a file beside it (torch.onnx.export of a large model, or
    onnx.save(save_as_external_data=True)) is copied with that file, under its name, beside the
    board's copy, where TensorRT's parser (parse(data, path)) looks; weights that are missing, or
    kept in a subfolder, are one line before anything is copied."""
    import onnx

    log, home = play_the_board(tmp_path, monkeypatch)
    big = tmp_path / "host" / "big.onnx"
    proto = onnx.load(str(model))
    onnx.save(proto, str(big), save_as_external_data=True, location="big.weights", size_threshold=0)
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(big), *REMOTE, "--dtype", "fp32", "--runs", "5")
    assert code == 0, err
    lines = log.read_text().splitlines()
    # the folder is keyed on the weights too: one .onnx header can go with other weights
    weights = hashlib.sha256((tmp_path / "host" / "big.weights").read_bytes()).hexdigest()
    key = hashlib.sha256(
        repr((hashlib.sha256(big.read_bytes()).hexdigest(), [["big.weights", weights]])).encode()
    )
    rdir = f"deployopt-runner/{model_dir_name('big', key.hexdigest())}"
    assert lines[2:4] == [
        f"scp {OPTS} {big} {HOST}:{rdir}/big.onnx",
        f"scp {OPTS} {tmp_path / 'host' / 'big.weights'} {HOST}:{rdir}/big.weights",
    ]
    board = home / rdir
    assert (board / "big.weights").read_bytes() == (tmp_path / "host" / "big.weights").read_bytes()

    log.unlink()
    (tmp_path / "host" / "big.weights").unlink()
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(big), *REMOTE, "--dtype", "fp32", "--runs", "5")
    assert code == 2 and err.strip() == (
        f"error: big.onnx keeps weights in big.weights, which is not beside it ({tmp_path / 'host'})"
    )
    assert not log.exists()  # nothing reached the board
    nested = tmp_path / "nested" / "m.onnx"
    (nested.parent / "w").mkdir(parents=True)
    onnx.save(
        onnx.load(str(model)), str(nested), save_as_external_data=True, location="w/m.data", size_threshold=0
    )
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(nested), *REMOTE, "--dtype", "fp32", "--runs", "5"
    )
    assert code == 2 and "m.onnx keeps weights in 'w/m.data', not a file beside it" in err


def test_cli_profile_reads_the_runners_per_layer_table(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log, _ = play_the_board(tmp_path, monkeypatch)
    code, stdout, err = run_cli(
        monkeypatch, capsys, "profile", str(model), *REMOTE, "--dtype", "fp16",
        "--runs", "5", "--warmup", "1", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert log.read_text().splitlines()[4] == (
        runner_argv("--dtype fp16 --runs 5 --warmup 1", board_dir(model))
        + f" --per-layer --out {board_dir(model)}/{RESULT}"
        + PASS_STATUS
    )
    doc = json.loads(stdout)
    assert doc["backend"] == "tensorrt" and doc["runs"] == 5 and len(doc["layers"]) > 1
    assert sum(layer["share"] for layer in doc["layers"]) == pytest.approx(1.0)
    assert all(layer["extra"]["runs"] == 5 for layer in doc["layers"])
    assert doc["environment"]["nvpmodel"] == "MODE_30W"


def other_runs_on_the_board(home: Path) -> tuple[list[str], list[Any]]:
    """Other runs left at work on the board (their host killed): an optimize run's folder in the
    runner's work folder, with a runner still running from it, and a bench of another model,
    timing from that model's folder. Beside them what is no other run's: a finished run's folder
    with nothing running, and a process naming a folder outside the work folders whose name ends
    like theirs. Returns (the busy folders, the processes: the busy ones first)."""
    import subprocess

    stale = f"deployopt-runner/optimize-old-{os.getpid()}"
    bench = f"deployopt-runner/other-{os.getpid()}"
    for folder in (stale, bench, f"deployopt-runner/optimize-done-{os.getpid()}", "my-deployopt-runner/x"):
        (home / folder).mkdir(parents=True)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    procs = [
        subprocess.Popen([*sleeper, f"{stale}/runner.py", f"{stale}/net/net.onnx"], cwd=home),
        subprocess.Popen([*sleeper, "deployopt-runner/runner.py", f"{bench}/other.onnx"], cwd=home),
        subprocess.Popen([*sleeper, "my-deployopt-runner/x/runner.py"], cwd=home),
    ]
    return [stale, bench], procs


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_cli_bench_and_profile_name_another_run_at_work_on_the_board(
    command: str,
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bench and profile look for another run at work on the board, as optimize does, in the ssh that
    makes the model's folder: a stale run is one warning line naming its folder, its pid and the
    ssh that ends it, said before the runner times (its GPU work would be timed too); the run goes
    on, and the stale one is warned of, not touched. What is no other run's is not named."""
    log, home = play_the_board(tmp_path, monkeypatch)
    (stale, bench), procs = other_runs_on_the_board(home)
    try:
        code, _, err = run_cli(
            monkeypatch, capsys, command, str(model), *REMOTE, "--dtype", "fp32", "--runs", "5",
            "--warmup", "1", "--json",
        )  # fmt: skip
        assert code == 0, err
        said = [ln for ln in err.splitlines() if "another deployopt run" in ln]
        pids = {folder: str(proc.pid) for folder, proc in zip((stale, bench), procs)}
        assert len(said) == 1, err
        assert said[0].startswith(f"warning: another deployopt run is still at work on {HOST} (")
        assert f"{stale}: pid {pids[stale]}" in said[0] and f"{bench}: pid {pids[bench]}" in said[0]
        assert said[0].endswith(f"ssh {HOST} kill {pids[stale]} {pids[bench]}") or said[0].endswith(
            f"ssh {HOST} kill {pids[bench]} {pids[stale]}"
        )
        assert str(procs[2].pid) not in said[0] and "optimize-done-" not in said[0]
        lines = log.read_text().splitlines()
        assert lines[0] == made_and_looked(home, board_dir(model))  # the look rides on the mkdir: no ssh more
        assert " python3 deployopt-runner/runner.py " in lines[3]  # timed after the warning
        assert all(proc.poll() is None for proc in procs) and (home / stale).is_dir()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_cli_bench_beside_no_run_at_work_says_nothing(
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A board with only finished runs' folders: nothing runs from them, and bench says nothing, with
    no ssh more than the mkdir's. The bench's own work folder is no other run's, even for a model
    named like an optimize run (optimize-net.onnx: deployopt-runner/optimize-net-<hash>, left by an
    earlier bench)."""
    log, home = play_the_board(tmp_path, monkeypatch)
    model = tmp_path / "host" / "optimize-net.onnx"
    model.parent.mkdir()
    model.write_bytes(zoo_model_path("mobilenet_like").read_bytes())
    done = f"deployopt-runner/optimize-done-{os.getpid()}"
    for folder in (done, board_dir(model), "deployopt-runner/old-model"):
        (home / folder).mkdir(parents=True)
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "fp32", "--runs", "5"
    )
    assert code == 0, err
    assert "another deployopt run" not in err
    lines = log.read_text().splitlines()
    assert lines[0] == made_and_looked(home, board_dir(model))
    assert sum(" pgrep " in ln for ln in lines) == 1


@pytest.mark.parametrize(
    ("board", "message"),
    [
        ("unreachable", f"cannot reach {HOST} over ssh: ssh: connect to host jetson port 22: "
                        "No route to host"),
        ("no_tensorrt", f"runner.py on {HOST}: tensorrt is not importable (it comes with JetPack: "
                        "python3-libnvinfer)"),
        ("no_python", f"python3 not found on {HOST}: runner.py needs Python 3.6+ there (JetPack ships it as "
                      "python3)"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])  # the runner finds it; the version check does
def test_cli_board_failures_are_one_line_and_leave_no_output(
    dtype: str,
    board: str,
    message: str,
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log, _ = play_the_board(tmp_path, monkeypatch)
    if board == "unreachable":
        (tmp_path / "sshbin" / "ssh").write_text(
            '#!/bin/sh\necho "ssh: connect to host jetson port 22: No route to host" >&2\nexit 255\n'
        )
    monkeypatch.setenv("FAKE_BOARD_TRT" if board == "no_tensorrt" else "FAKE_BOARD_X", "none")
    if board == "no_python":
        monkeypatch.setenv("FAKE_BOARD_NO_PYTHON", "1")
    out = tmp_path / "result.json"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", dtype, "-o", str(out)
    )
    assert (code, stdout, err) == (2, "", f"error: {message}\n")
    assert not out.exists()
    if board != "unreachable" and dtype == "fp16":  # the version check, before anything was copied
        assert log.read_text().splitlines() == [version_check()]


def test_the_version_checks_refusal_is_the_runners() -> None:
    """A board without tensorrt reads the same whether the host's version check or the runner
    found it: the host's line is the runner's import_trt line, word for word."""
    from deployopt.backends.tensorrt_remote import TENSORRT_NOT_IMPORTABLE

    assert f'raise RunnerError("{TENSORRT_NOT_IMPORTABLE}")' in RUNNER.read_text()


def test_cli_trt11_fp16_is_typed_on_the_host_and_built_on_the_board(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A board on TensorRT 11 (strongly typed; the runner cannot retype a model): the version is
    read first, the host types the fp32 model fp16 (deployopt.precision, as trtexec --remote does),
    that model goes to the board and the runner builds it with no flag; the result says the host
    typed it, the way trtexec's says it. The host's typed copy is gone when the session closes."""
    from test_tensorrt_fake_api import engine_blob

    from deployopt.precision import CONVERSION_RECIPE, is_low_precision

    log, home = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_TRT", V11)
    out = tmp_path / "result.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE,
        "--dtype", "fp16", "--runs", "5", "--warmup", "1", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    lines = log.read_text().splitlines()
    # the folder of the file sent, the copy typed here: the model's name, the copy's bytes
    (typed,) = (home / "deployopt-runner").glob("net-*/net.fp16.onnx")
    rdir = board_dir(typed, "net")
    assert lines[:3] == [
        version_check(),
        made_and_looked(home, rdir),
        f"scp {OPTS} {RUNNER} {HOST}:deployopt-runner/runner.py",
    ]
    sent, dest = lines[3].removeprefix(f"scp {OPTS} ").split()
    assert Path(sent).name == "net.fp16.onnx" and dest == f"{HOST}:{rdir}/net.fp16.onnx"
    assert not Path(sent).exists()  # the session's temporary folder, removed at close
    assert lines[4] == (
        runner_argv("--dtype fp16 --runs 5 --warmup 1", rdir).replace("/net.onnx", "/net.fp16.onnx")
        + f" --out {rdir}/{RESULT}"
        + PASS_STATUS
    )
    import onnx

    on_board = home / rdir / "net.fp16.onnx"
    assert is_low_precision(onnx.load(str(on_board))) and not is_low_precision(onnx.load(str(model)))
    doc = json.loads(out.read_text())
    env = doc["environment"]
    assert env["tensorrt"] == V11 and env["dtype"] == "fp16"
    assert env["fp16_typed_by"] == f"deployopt.precision on the host (recipe {CONVERSION_RECIPE})"
    blob = engine_blob(home / env["engine"])
    assert blob["flags"] == [] and blob["typed_fp16"]
    assert [t for _, _, t in blob["inputs"] + blob["outputs"]] == ["FLOAT", "FLOAT"]
    assert doc["timed"].startswith(
        "one forward pass (fp16: the model typed fp16 inside, fp32 I/O (TensorRT 11 strong typing)), "
        "CUDA events"
    )  # trtexec's and the local tensorrt backend's words for the same build
    assert doc["model"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()  # what the user gave

    # profile: the same model, the same record; the board reuses the engine it built
    code, stdout, err = run_cli(
        monkeypatch, capsys, "profile", str(model), *REMOTE, "--dtype", "fp16", "--runs", "3", "--json"
    )
    assert code == 0, err
    prof = json.loads(stdout)
    assert prof["environment"]["fp16_typed_by"] == env["fp16_typed_by"]
    assert prof["environment"]["engine_built_now"] is False

    # a Q/DQ model with --dtype int8 goes as it is (its Q/DQ nodes are its precision)
    log.unlink()
    qdq = tmp_path / "host" / "qdq.onnx"
    qdq.write_bytes(QDQ_MODEL.read_bytes())
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(qdq), *REMOTE, "--dtype", "int8", "--runs", "3", "--json"
    )
    assert code == 0, err
    assert (home / board_dir(qdq) / "qdq.onnx").read_bytes() == qdq.read_bytes()
    assert log.read_text().splitlines()[3] == f"scp {OPTS} {qdq} {HOST}:{board_dir(qdq)}/qdq.onnx"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("qdq_fp16", "fp16 conversion: the model has Q/DQ nodes (explicitly quantized)"),
        ("int8_no_qdq", f"--dtype int8: TensorRT {V11} builds INT8 only from Q/DQ nodes in the model"),
        ("int8_table", "--dtype int8 with calibration "),
    ],
)
def test_cli_trt11_refusals_are_on_the_host_before_any_copy(
    case: str,
    message: str,
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On a TensorRT 11 board what it cannot build is refused here in one line, in the words the
    trtexec backend uses for the same case, after the version check and before any mkdir or scp
    (the runner would refuse it too, but only after the model was copied)."""
    log, home = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_TRT", V11)
    table = tmp_path / "host" / "net.calib"
    table.write_bytes(b"TRT-8601-EntropyCalibration2\n")
    args = {
        "qdq_fp16": [str(QDQ_MODEL), "--dtype", "fp16"],
        "int8_no_qdq": [str(model), "--dtype", "int8"],
        "int8_table": [str(QDQ_MODEL), "--dtype", "int8", "--calibration-data", str(table)],
    }[case]
    out = tmp_path / "result.json"
    code, stdout, err = run_cli(monkeypatch, capsys, "bench", *args, *REMOTE, "-o", str(out))
    assert (code, stdout) == (2, "") and err.startswith(f"error: {message}"), err
    assert err.count("\n") == 1 and not out.exists()
    assert log.read_text().splitlines() == [version_check()]
    assert list(home.iterdir()) == []


def test_calibration_images_are_made_into_the_npy_the_runner_reads(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runner reads one .npy or a table, not images: a folder of images is made into tensors
    here (--mean/--std/... as everywhere) and goes as one .npy of the model's input, --calib-npy.
    It was refused, saying to calibrate on the host with TensorRT, which a host that only drives
    a board has not got. Data that cannot be read is one line before anything is sent."""
    import numpy as np

    from deployopt.fidelity import ImagePreprocess, load_calibration

    log, home = play_the_board(tmp_path, monkeypatch)
    images = TESTS.parent / "calibration_data" / "cifar10"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "int8", "--runs", "5",
        "--calibration-data", str(images), "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25",
    )  # fmt: skip
    assert code == 0, err
    run = log.read_text().splitlines()[-2]
    sent = np.load(home / calib_npy_sent(run, model))
    preprocess = ImagePreprocess(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    made = load_calibration(images, {"input": [1, 3, 32, 32]}, count=512, preprocess=preprocess)
    assert sent.shape == (20, 3, 32, 32) and sent.dtype == np.float32  # the 20 images, one per row
    assert np.array_equal(sent, np.concatenate([s["input"] for s in made.samples]))

    empty = tmp_path / "empty"
    empty.mkdir()
    log.write_text("")
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "int8",
        "--calibration-data", str(empty),
    )  # fmt: skip
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert str(empty) in err
    assert log.read_text().splitlines() == [version_check()]  # nothing sent


def test_a_calibration_npy_goes_as_the_hosts_loader_reads_it(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A .npy goes through the same loader as other data (calibration_npy): one the host reads (N
    items with their batch axis, or a single item without N) reaches the board as N x C x H x W,
    capped at 512 inputs; NaN is one line before anything is sent. It went as it was: the runner
    refused the first two after ssh, and took NaN and any number of inputs unchecked."""
    import numpy as np

    log, home = play_the_board(tmp_path, monkeypatch)
    rng = np.random.default_rng(0)
    cases = {
        "batched.npy": rng.standard_normal((8, 1, 3, 32, 32)).astype(np.float32),
        "one.npy": rng.standard_normal((3, 32, 32)).astype(np.float32),
        "many.npy": rng.standard_normal((600, 3, 32, 32)).astype(np.float32),
    }
    for name, arr in cases.items():
        np.save(tmp_path / name, arr)
        log.write_text("")
        code, _, err = run_cli(
            monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "int8", "--runs", "5",
            "--calibration-data", str(tmp_path / name),
        )  # fmt: skip
        assert code == 0, (name, err)
        sent = np.load(home / calib_npy_sent(log.read_text().splitlines()[-2], model))
        want = arr.reshape(-1, 3, 32, 32)[:512]
        assert sent.shape == want.shape and np.array_equal(sent, want), name

    bad = cases["batched.npy"].copy()
    bad[2, 0, 0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    log.write_text("")
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "int8",
        "--calibration-data", str(tmp_path / "nan.npy"),
    )  # fmt: skip
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "NaN" in err and "nan.npy" in err
    assert log.read_text().splitlines() == [version_check()]  # nothing sent


def test_calibration_data_goes_to_the_board_once_a_session(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """optimize times every candidate in one session, all calibrated on the same data: the .npy made
    from it (up to 512 inputs: 300 MB of 224x224 images) goes to the board once, and every later
    runner reads that copy; it went again beside every candidate. A table given as it is, too."""
    log, home = play_the_board(tmp_path, monkeypatch)
    images = TESTS.parent / "calibration_data" / "cifar10"
    table = tmp_path / "host" / "net.calib"
    table.write_bytes(b"TRT-8601-EntropyCalibration2\n")
    other = model.with_name("other.onnx")
    other.write_bytes(model.read_bytes())
    table_name = f"{model_dir_name('net', hashlib.sha256(table.read_bytes()).hexdigest())}.calib"
    rdir = board_dir(model, root="deployopt-runner/optimize-net-1")
    for data, sent in ((images, "calib1-*.npy"), (table, table_name)):
        log.write_text("")
        extra = {"remote": HOST, "remote_run": "optimize-net-1"}
        options = MeasureOptions(dtype="int8", runs=5, warmup=1, calibration_data=str(data), extra=extra)
        with get_backend("tensorrt").open(options) as session:
            session.measure(model)
            session.measure(other)
            (sent_path,) = (home / rdir).glob(sent)  # beside the first model, read by both
            sent = sent_path.name
        lines = log.read_text().splitlines()
        copies = [ln for ln in lines if ln.startswith("scp ") and ln.endswith(f"/{sent}")]
        assert len(copies) == 1, copies
        runs = [ln for ln in lines if " python3 deployopt-runner/optimize-net-1/runner.py " in ln]
        assert len(runs) == 2 and all(f" {rdir}/{sent} " in ln for ln in runs)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_a_hung_runner_is_ended_on_the_board_at_timeout(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--timeout 1 with a runner that hangs: the board's own `timeout` ends it (and what it started)
    there, not only the local ssh (which, without a tty, leaves the board's command running and
    its GPU held), and the error is the one line a local timeout gives."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    pidfile = tmp_path / "hung.pid"
    monkeypatch.setenv("FAKE_BOARD_HANG", str(pidfile))
    out = tmp_path / "result.json"
    try:
        code, stdout, err = run_cli(
            monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "fp16", "--timeout", "1",
            "-o", str(out),
        )  # fmt: skip
        for _ in range(50):  # TERM reaches the board's process group at once; allow it a moment
            if not alive(int(pidfile.read_text())):
                break
            time.sleep(0.1)
        left_running = alive(int(pidfile.read_text()))
    finally:
        if pidfile.is_file() and alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the stand-in board's own child
    assert (code, stdout, err) == (2, "", f"error: {RUNNER_TIMED_OUT.format(s=1)}\n")
    assert not out.exists()
    assert log.read_text().splitlines()[0] == version_check(timeout="1")
    assert log.read_text().splitlines()[4] == (
        runner_argv("--dtype fp16 --runs 100 --warmup 20", board_dir(model), timeout="1")
        + f" --out {board_dir(model)}/{RESULT}"
        + PASS_STATUS
    )
    assert not left_running, "the runner's process outlived --timeout on the board"


#: The runner's --timeout line: what raises the limit, and why a first run may need more.
RUNNER_TIMED_OUT = (
    f"runner.py on {HOST} did not finish within {{s}} s; --timeout SECONDS raises the limit (a first "
    "engine build on a Jetson Nano can take minutes)"
)


def interrupt_the_timed_run(
    monkeypatch: pytest.MonkeyPatch, home: Path, folder: str, procs: list[subprocess.Popen[bytes]]
) -> tuple[Callable[[], bool], subprocess.Popen[bytes]]:
    """Board.call raises KeyboardInterrupt at the run under the board's `timeout` that names
    `folder`/, after starting what the board goes on running once the local ssh is gone: a process
    with that run's command line (less its `timeout`: the runner's or trtexec's, which names the
    session's own result files there). Also starts one of another folder. Returns (whether the
    first was ended, waiting up to 10 s; the second), both in `procs`."""
    from deployopt.remote import Board

    (home / "deployopt-runner" / "other").mkdir(parents=True, exist_ok=True)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    started: list[subprocess.Popen[bytes]] = []
    real_call = Board.call

    def interrupted(self: Board, cmd: list[str], *args: Any, **kwargs: Any) -> str:
        if " --kill-after=" in cmd[-1] and f"{folder}/" in cmd[-1]:  # the timed run, not a check
            argv = shlex.split(cmd[-1].rpartition(";")[0])[3:]  # less `timeout --kill-after=10 N`
            started.append(subprocess.Popen([*sleeper, *argv], cwd=home))
            procs.append(started[-1])
            raise KeyboardInterrupt
        return real_call(self, cmd, *args, **kwargs)

    monkeypatch.setattr(Board, "call", interrupted)
    procs.append(subprocess.Popen([*sleeper, "deployopt-runner/other/model.onnx"], cwd=home))

    def ended() -> bool:
        try:
            return len(started) == 1 and started[0].wait(timeout=10) != 0
        except subprocess.TimeoutExpired:
            return False

    return ended, procs[-1]


def test_ctrl_c_on_bench_remote_ends_the_runners_work_on_the_board(
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    board_processes: list[subprocess.Popen[bytes]],
) -> None:
    """Ctrl-C while the board times the model kills the local ssh only (no tty: no hangup there),
    and the runner held the board's GPU until its --timeout, timed beside the next bench. Now what
    runs from the model's folder for this session is ended (one pkill of what names its own result
    file there) before exit 130; a process of another folder is left alone (another session's in
    the same folder too: tests/test_remote_loose_ends.py). (trtexec's: tests/test_trtexec_backend.py.)"""
    log, home = play_the_board(tmp_path, monkeypatch)
    rdir = board_dir(model)
    ended, other = interrupt_the_timed_run(monkeypatch, home, rdir, board_processes)
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *REMOTE, "--runs", "5")
    assert code == 130, err
    assert ended() and other.poll() is None  # the model's folder's work ended; another folder's not
    own = f"[d]{rdir[1:]}/{RESULT}".replace(".json", "\\.json")
    assert log.read_text().splitlines()[-1] == f"ssh {OPTS} {HOST} pkill -f -- '{own}'"


def test_the_boards_timeout_reads_plain_seconds() -> None:
    """coreutils `timeout` takes no exponent (`:g` writes 1e+06) and takes 0 as no limit at all."""
    from deployopt.remote import seconds_arg

    assert [seconds_arg(s) for s in (600.0, 604800.0, 1e6, 2.5, 1e-9)] == [
        "600", "604800", "1000000", "2.5", "0.001",
    ]  # fmt: skip


def test_one_version_check_per_session_and_the_typed_copies_go_at_close(
    model: Path, zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two models in one session (as a library caller or optimize would time them): the board's
    version is read once, before the first model goes there; each model is typed fp16 on the host
    and the folder holding the typed copies is removed when the session closes."""
    from deployopt.backends.base import MeasureOptions, get_backend

    log, home = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_TRT", V11)
    other = tmp_path / "host" / "se.onnx"
    other.write_bytes(zoo_model_path("se_net").read_bytes())
    options = MeasureOptions(dtype="fp16", runs=3, warmup=1, extra={"remote": HOST})
    with get_backend("tensorrt").open(options) as session:
        first, second = session.measure(model), session.measure(other)
        typed = session._here
        assert typed is not None and Path(typed.name).is_dir()
    assert not Path(typed.name).exists()
    assert log.read_text().splitlines().count(version_check()) == 1
    assert log.read_text().splitlines()[0] == version_check()
    assert "fp16_typed_by" in first.environment and "fp16_typed_by" in second.environment
    assert len(list((home / "deployopt-runner").glob("se-*/se.fp16.onnx"))) == 1


# ------------------------------------------------------------------ the per-layer sweep: one batch

SWEEP = "deployopt-runner/_sweep"
#: a calibrate's or staircase's own conv folder there (its session removes it when it closes)
CONVS_DIR = f"convs-{SWEEP_TOKEN}"
CONVS = [ConvShape(1, 8, 16, 16, 8), ConvShape(1, 8, 16, 16, 24), ConvShape(1, 16, 8, 8, 16, groups=16)]


def remote_session(**options: Any) -> Session:
    """The session `optimize --remote` sweeps with: the runner on the stand-in board."""
    return get_backend("tensorrt").open(MeasureOptions(extra={"remote": HOST}, **options))


def conv_names(shapes: list[ConvShape]) -> list[str]:
    return [f"conv{i:05d}-{shape.signature()}.onnx" for i, shape in enumerate(shapes)]


def test_a_sweep_is_one_batch_on_the_board_whatever_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """measure_convs: the batch folder emptied and made, the conv models sent in one scp, the runner
    run once with --batch-dir (under the board's `timeout` at --timeout per conv), the results
    fetched in one scp; runner.py is sent once a session. One conv or three: the same round trips."""
    log, home = play_the_board(tmp_path, monkeypatch)
    folder = f"{SWEEP}/{CONVS_DIR}"
    with remote_session(runs=6, warmup=4) as session:
        session.measure_convs([ConvShape(1, 8, 16, 16, 40)])
        first = log.read_text().splitlines()
        timings = session.measure_convs(CONVS)
        lines = log.read_text().splitlines()[len(first) :]
        on_board = sorted(p.name for p in (home / folder).iterdir())
    made = f"ssh {OPTS} {HOST} rm -rf {folder} && mkdir -p {folder}"
    runner = f"scp {OPTS} {RUNNER} {HOST}:deployopt-runner/runner.py"
    # the first batch makes the session's own folder and, in the same ssh, looks for other runs
    looked = f"ssh {OPTS} {HOST} mkdir -p {folder} || exit; echo deployopt-self $$ $PPID; pgrep -af -- "
    assert first[0] == version_check() and first[1].startswith(looked) and first[2] == runner
    assert len(first) == 6  # fp16: the version, once
    assert len(lines) == 4 and lines[0] == made
    sent = lines[1].split()
    assert sent[:5] == ["scp", *OPTS.split()] and sent[-1] == f"{HOST}:{folder}"
    assert [Path(p).name for p in sent[5:-1]] == conv_names(CONVS)
    assert lines[2] == (
        f"ssh {OPTS} {HOST} timeout --kill-after=10 1800 python3 deployopt-runner/runner.py "
        f"--batch-dir {folder} --dtype fp16 --runs 6 --warmup 4 --workspace-mib 1024 "
        f"--engine-dir {SWEEP}/engines{PASS_STATUS}"
    )
    assert re.fullmatch(rf"scp {OPTS} {HOST}:{re.escape(folder)}/\*\.json /\S+/results", lines[3])
    names = conv_names(CONVS)  # on the board: this batch's models and results, the first batch's gone
    assert on_board == sorted([*names, *(n.replace(".onnx", ".json") for n in names)])
    assert [t.model["file"] for t in timings if t.model] == names
    assert all(t.environment["remote"] == HOST and t.runs == 6 for t in timings)
    # closed: the session's folder is gone from the board, the engines' stay
    assert not (home / folder).exists() and log.read_text().splitlines()[-1].endswith(f"rm -rf {folder}")


def test_a_batch_times_each_conv_as_a_runner_of_its_own_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's Timings, in the order of the shapes, are what `measure` on each conv gives (the
    base class's measure_convs) with the same flags: the same samples, the same engine key (the same
    model, dtype, shapes, workspace, TensorRT). One runner process for the batch, one per conv the
    other way."""
    log, _ = play_the_board(tmp_path, monkeypatch)
    # 10 passes a conv: the fake's pass durations repeat every 5, so a conv's samples do not depend
    # on how many passes the runner's process ran before it
    with remote_session(runs=6, warmup=4) as session:
        batch = session.measure_convs(CONVS)
        runs = len([ln for ln in log.read_text().splitlines() if " python3 " in ln and "/runner.py " in ln])
        one_by_one = Session.measure_convs(session, CONVS)
    assert runs == 1
    assert len(batch) == len(one_by_one) == len(CONVS)
    keys = set()
    for mine, theirs in zip(batch, one_by_one):
        a, b = mine.to_json(), theirs.to_json()
        for doc in (a, b):
            doc["environment"].pop("engine_build_s")  # a build's wall time
            doc["model"].pop("file")  # conv00000-SIGNATURE.onnx here, conv0.onnx there
            doc.pop("measured_at")  # the board's clock when each was timed (every runner result has one)
        assert a["environment"].pop("engine").startswith(f"{SWEEP}/engines/conv")
        assert b["environment"].pop("engine").startswith("deployopt-runner/conv")
        assert a == b and a["environment"]["remote"] == HOST
        keys.add(a["environment"]["engine_key"])
    assert len(keys) == len(CONVS)  # three different convs, each in its place


def test_a_conv_that_fails_mid_batch_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner stops at the conv that fails: the session raises the runner's one line (its file
    name carries the conv's shape), nothing is fetched, and what it timed before stays on the board."""
    import deployopt.layers

    log, home = play_the_board(tmp_path, monkeypatch)
    conv_model = deployopt.layers.conv_model

    def broken_second(shape: ConvShape, int8: bool = False) -> Any:
        model = conv_model(shape, int8=int8)
        if shape == CONVS[1]:
            del model.graph.input[:]  # the fake TensorRT's parser refuses a graph without inputs
        return model

    monkeypatch.setattr(deployopt.layers, "conv_model", broken_second)
    name = conv_names(CONVS)[1]
    with remote_session(runs=5, warmup=0) as session, pytest.raises(BackendFailed) as failed:
        try:
            session.measure_convs(CONVS)
        finally:  # what the board kept before the session's close removes its folder
            done = sorted(p.name for p in (home / SWEEP / CONVS_DIR).glob("*.json"))
    assert str(failed.value) == (
        f"runner.py on {HOST}: {name}: TensorRT cannot parse {SWEEP}/{CONVS_DIR}/{name}: In node -1 "
        "(parseGraph): INVALID_GRAPH: the graph has no inputs"
    )
    assert "\n" not in str(failed.value)
    ran = [line for line in log.read_text().splitlines() if "rm -rf" not in line]  # but the close's
    assert " --batch-dir " in ran[-1]  # the last round trip: no results fetched
    assert done == [conv_names(CONVS)[0].replace(".onnx", ".json")]


@pytest.mark.parametrize("version", ["10.3.0.26", V11])
def test_an_int8_sweep_sends_convs_that_carry_their_own_qdq_scales(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--dtype int8 (a Q/DQ model's default): each conv of the sweep is quantized with Q/DQ nodes, so
    TensorRT builds INT8 kernels for it from its own scales, with no calibration data. A plain conv
    has no ranges: 10.x ran it in fp16 (the int8 table timed other kernels), and 11.x refused it
    ("builds INT8 only from Q/DQ nodes"), so `optimize --remote` of a Q/DQ model failed there."""
    import onnx

    from deployopt.model import has_qdq

    _, home = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_TRT", version)
    with remote_session(dtype="int8", runs=5, warmup=1) as session:
        timings = session.measure_convs(CONVS)
        sent = sorted((home / SWEEP / CONVS_DIR).glob("*.onnx"))
        assert [p.name for p in sent] == sorted(conv_names(CONVS))  # as they are: nothing typed fp16
        assert all(has_qdq(onnx.load(str(p))) for p in sent)
    assert len(timings) == len(CONVS) and all(t.environment["tensorrt"] == version for t in timings)


def test_a_batch_on_a_tensorrt_11_board_sends_convs_typed_fp16_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep's batch goes through the same host-side typing as `measure` on TensorRT 11: each conv
    is typed fp16 here (the runner refuses an fp32 model with --dtype fp16 there), its result is read
    under the typed file's name, and says who typed it."""
    log, home = play_the_board(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_BOARD_TRT", V11)
    with remote_session(runs=5, warmup=1) as session:
        timings = session.measure_convs(CONVS)
        sent = sorted(p.name for p in (home / SWEEP / CONVS_DIR).glob("*.onnx"))
    names = [n.replace(".onnx", ".fp16.onnx") for n in conv_names(CONVS)]
    assert sent == sorted(names)
    assert len(timings) == len(CONVS)
    assert all(t.environment["fp16_typed_by"].startswith("deployopt.precision on the host") for t in timings)
    assert all(t.environment["tensorrt"] == V11 for t in timings)
    assert log.read_text().splitlines().count(version_check()) == 1


# ------------------------------------------------------------------ killed by SIGKILL (the OOM killer)

RUNNER_OOM = (
    f"runner.py on {HOST} was killed (SIGKILL): most often the kernel's out-of-memory killer (a Jetson's "
    "GPU shares the system's memory): `sudo dmesg | grep -i -E 'killed process|out of memory'` on the "
    "board tells; stop other programs, add swap or try a smaller --batch"
)


def runner_killed_on_the_board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in board, its ssh ending as OpenSSH's does (tests/ssh_fake.py), where `python3
    runner.py` is ended by SIGKILL (it sends itself one, as the kernel's OOM killer ends a build);
    `python3 -c` (the version check) answers as before. Returns the ssh/scp log."""
    from ssh_fake import end_as_openssh

    log, _ = play_the_board(tmp_path, monkeypatch)
    end_as_openssh(tmp_path / "sshbin" / "ssh")
    python3 = tmp_path / "boardbin" / "python3"
    real = python3.rename(python3.with_name("python3_real"))
    python3.write_text(
        f'#!/bin/sh\nif [ "$1" = "-c" ]; then exec "{real}" "$@"; fi\n'
        'echo "building an engine" >&2\nkill -KILL $$\n'
    )
    python3.chmod(0o755)
    return log


def test_cli_runner_killed_on_the_board_points_at_its_oom_killer(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """bench and profile: the runner killed by SIGKILL on the board is one line naming it, the host
    and the board's kernel log, exit 2, nothing written; it read as an unreachable board (ssh's 255,
    the board's shell having exec'd the command and died with it)."""
    runner_killed_on_the_board(tmp_path, monkeypatch)
    out = tmp_path / "result.json"
    for command in ("bench", "profile"):
        code, stdout, err = run_cli(
            monkeypatch, capsys, command, str(model), *REMOTE, "--dtype", "fp16", "-o", str(out)
        )
        assert (code, stdout, err) == (2, "", f"error: {RUNNER_OOM}\n"), command
        assert not out.exists()


def test_a_sweep_batch_killed_on_the_board_points_at_its_oom_killer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """optimize's sweep (measure_convs: one runner for a batch of convs, its own ssh line) killed by
    SIGKILL on the board: the same one line as a single model's run."""
    log = runner_killed_on_the_board(tmp_path, monkeypatch)
    with remote_session(runs=5, warmup=1) as session, pytest.raises(BackendFailed) as exc:
        session.measure_convs(CONVS)
    assert str(exc.value) == RUNNER_OOM
    # the batch's run: nothing fetched after it, only the session's folder removed at close
    *_, last, close = log.read_text().splitlines()
    assert " --batch-dir " in last and last.endswith(PASS_STATUS)
    assert close.endswith(f"rm -rf {SWEEP}/{CONVS_DIR}")


# ------------------------------------------------------------------ a full disk on the board


def disk_full_hint_text(trtexec_dir: str = "/tmp/deployopt-trtexec") -> str:
    """What a full disk on the board adds to the line; trtexec's folder is /tmp's on a board, its
    stand-in's here (play_the_board)."""
    return (
        f"the board's disk is full (`ssh {HOST} 'df -h ~ /tmp'` shows it): deployopt keeps models, engines "
        f"and timing caches there in ~/deployopt-runner/ (runner.py) and {trtexec_dir}/ (trtexec), "
        "and a killed run's optimize-* folders in them; remove the old engines and folders you no longer "
        f"need (`ssh {HOST} 'rm -rf ~/deployopt-runner {trtexec_dir}'` removes all of it, "
        "timing caches too)"
    )


def test_a_full_disk_on_the_board_says_so_and_what_deployopt_keeps_there(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The board's disk full: the scp of the model fails with scp's own line, which said nothing of
    whose disk, nor what to remove. Now the one line says the board's disk is full, how to see it
    and which folders deployopt fills there; so does the runner's own line when the engine it built
    cannot be written (a different route: the runner's status 2, phrased by the session)."""
    _, home = play_the_board(tmp_path, monkeypatch)
    hint = disk_full_hint_text(str(home / "tmp" / "deployopt-trtexec"))
    scp = tmp_path / "sshbin" / "scp"
    board_scp = scp.rename(scp.with_name("board_scp"))
    scp.write_text(
        '#!/bin/sh\nfor a; do case "$a" in *.onnx)\n'
        '  echo "scp: deployopt-runner/net-0/net.onnx: No space left on device" >&2; exit 1;; esac; done\n'
        f'exec "{board_scp}" "$@"\n'
    )
    scp.chmod(0o755)
    out = tmp_path / "result.json"
    code, stdout, err = run_cli(monkeypatch, capsys, "bench", str(model), *REMOTE, "-o", str(out))
    assert (code, stdout) == (2, "") and not out.exists()
    assert err == (
        f"error: scp of the model on {HOST} exited 1: scp: deployopt-runner/net-0/net.onnx: No space left "
        f"on device; {hint}\n"
    )

    scp.unlink()
    board_scp.rename(scp)
    monkeypatch.setenv("FAKE_BOARD_DISK_FULL", "1")
    code, stdout, err = run_cli(monkeypatch, capsys, "bench", str(model), *REMOTE, "-o", str(out))
    assert (code, stdout) == (2, "") and not out.exists() and "Traceback" not in err
    assert err.startswith(
        f"error: runner.py on {HOST} exited 2: error: cannot read or write {board_dir(model)}/"
    )
    assert err.endswith(f".engine: No space left on device; {hint}\n")
    assert err.count("\n") == 1


def test_a_full_disk_here_on_a_copy_back_is_not_blamed_on_the_board(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy back (Board.get) that fails on a full disk fails on this machine's disk, not the
    board's: no board hint, the RemoteFailed its callers phrase."""
    from deployopt.remote import Board, RemoteFailed, disk_full_hint

    assert disk_full_hint(HOST, "No space left on device") == disk_full_hint_text()  # a board's /tmp
    play_the_board(tmp_path, monkeypatch)
    (tmp_path / "sshbin" / "scp").write_text(
        '#!/bin/sh\necho "/here/model.engine: No space left on device" >&2; exit 1\n'
    )
    with pytest.raises(RemoteFailed) as exc:
        Board(HOST).get("deployopt-runner/net/m.engine", tmp_path / "m.engine", "scp of the engine", 30)
    assert (
        str(exc.value) == f"scp of the engine on {HOST} exited 1: /here/model.engine: No space left on device"
    )


def test_a_runner_that_writes_no_result_is_not_handed_the_last_one(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The board folder keeps result.json between runs, and the copy back took whatever was there:
    a runner that exited 0 without writing its result (or one killed before it did) handed back
    the last run's numbers as this run's, exit 0. The folder's old result is removed first."""
    _, home = play_the_board(tmp_path, monkeypatch)
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "fp32", "--runs", "5"
    )
    assert code == 0, err
    assert (home / board_dir(model) / RESULT).is_file()
    quiet = tmp_path / "quiet_runner.py"
    quiet.write_text("import sys\nprint('nothing to say')\nsys.exit(0)\n")
    monkeypatch.setenv("DEPLOYOPT_RUNNER", str(quiet))
    code, out, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--dtype", "fp32", "--runs", "5"
    )
    assert code == 2 and out == "", (code, out)
    assert err.startswith("error: ") and RESULT in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("name", "folder", "file"), [("net:v2.onnx", "net_v2-", "net_v2.onnx"), ("...onnx", "..-", "...onnx")]
)
def test_cli_bench_remote_of_a_model_whose_name_scp_or_the_board_misreads(
    name: str,
    folder: str,
    file: str,
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`bench net:v2.onnx --remote`, the model in the current folder: scp reads `net:v2.onnx` as
    HOST:PATH (a copy from a machine named net), so every path here goes to scp absolute. A model
    named `...onnx` has the stem '..': its board folder was the work folder's parent, the
    result.json there removed and overwritten; it is '..-<hash>' now, inside the work folder."""
    log, home = play_the_board(tmp_path, monkeypatch)
    renamed = model.with_name(name)
    model.rename(renamed)
    monkeypatch.chdir(renamed.parent)
    out = tmp_path / "result.json"
    code, _, err = run_cli(monkeypatch, capsys, "bench", name, *REMOTE, "--runs", "3", "-o", str(out))
    assert code == 0, err
    rdir = board_dir(renamed)
    assert rdir.startswith(f"deployopt-runner/{folder}") and "/" not in rdir.removeprefix("deployopt-runner/")
    assert f"scp {OPTS} {renamed} {HOST}:{rdir}/{file}" in log.read_text().splitlines()
    assert (home / rdir / file).read_bytes() == renamed.read_bytes()
    assert [p.name for p in home.iterdir()] == ["deployopt-runner"]  # nothing written above it
    assert json.loads(out.read_text())["environment"]["remote"] == HOST
