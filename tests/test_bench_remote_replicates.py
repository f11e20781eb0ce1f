"""`bench --remote USER@HOST --repeat N` and `bench --remote ... -o FILE --append`, end to end on the
stand-in board of tests/test_tensorrt_remote.py (ssh and scp play it on this machine, its python3
runs the real jetson/runner.py against the fake TensorRT, on a fake Orin sysfs tree).

Why: a replicate is only worth its place in compare's test on replicate medians if it is a run of
its own on the board (a new runner process that deserializes the engine again, not one process's
samples split in two), and a replicate the board held down must keep its record so compare flags
the result; a board lost midway must leave nothing written, and an --append FILE as it was. No real
Jetson, ssh or TensorRT is involved.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

import jetson_sysfs_fake as sysfs_fake
import numpy as np
import pytest
from cli_runner import run_cli
from test_tensorrt_remote import HOST, RESULT, play_the_board
from test_tensorrt_remote import model as model  # the model on the host (a fixture)
from test_trtexec_backend import fake as fake  # the stand-in trtexec (a fixture)

from deployopt.timing import REPLICATE_TEST

#: The stand-in board is this machine (see tests/test_tensorrt_remote.py): one xdist worker runs
#: every board test, in turn.
pytestmark = pytest.mark.xdist_group("board")

TESTS = Path(__file__).resolve().parent
RUNS = 6
REMOTE = (
    "--backend", "tensorrt", "--remote", HOST, "--dtype", "fp16", "--runs", str(RUNS), "--warmup", "1",
)  # fmt: skip
RUNNER_LINE = " python3 deployopt-runner/runner.py "

#: The board's python3 for these tests: tests/fake_board_python.py, and per runner process (counted
#: in RR_STATE/runs) a line in RR_STATE/deserialized with its pid for each engine it deserializes;
#: its forward passes slowed by the factor RR_SCALE_<n> gives its n-th process; for its n-th process
#: RR_ROOT_<n> its fake sysfs tree and RR_HELD_<n> ("BEFORE:AFTER", two trees) the ones read right
#: before and after the timed loop (a clock capped, over-current events that grew during it); and
#: RR_DOWN_AFTER=<n>: the board unreachable (ssh's 255) from the end of its n-th runner process on.
BOARD_PYTHON = """
import os, sys
sys.path[:0] = [{tests!r}, {root!r}]
import fake_board_python, scripts, test_tensorrt_fake_api as api

state = os.environ["RR_STATE"]
if sys.argv[1:2] != ["-c"]:
    runs_file = os.path.join(state, "runs")
    n = int(open(runs_file).read()) + 1 if os.path.exists(runs_file) else 1
    with open(runs_file, "w") as fh:
        fh.write(str(n))
    call, execute = api.FakeGpu.call, api.FakeGpu.execute
    scale = float(os.environ.get("RR_SCALE_%d" % n, "1"))

    def logged_call(gpu, name, *args):
        if name == "Runtime.deserialize_cuda_engine":
            with open(os.path.join(state, "deserialized"), "a") as fh:
                fh.write("%d\\n" % os.getpid())
        return call(gpu, name, *args)

    def scaled_execute(gpu, handle):
        ms = execute(gpu, handle) * (scale - 1)
        gpu.clocks[handle] += ms
        return ms

    api.FakeGpu.call, api.FakeGpu.execute = logged_call, scaled_execute
    if os.environ.get("RR_ROOT_%d" % n):  # another sysfs tree for this process, read throughout
        os.environ["FAKE_BOARD_ROOT"] = os.environ["RR_ROOT_%d" % n]
    held = os.environ.get("RR_HELD_%d" % n)
    if held:
        roots = iter(held.split(":"))
        load = scripts.load_script

        def load_held(path, name):
            runner = load(path, name)
            state_of = runner.board_state

            def board_state(sysfs=None, procfs=None):
                root = next(roots)
                return state_of(root + "/sys", root + "/proc")

            runner.board_state = board_state
            return runner

        scripts.load_script = load_held
    code = fake_board_python.main()
    if str(n) == os.environ.get("RR_DOWN_AFTER"):
        open(os.path.join(state, "down"), "w").close()
    sys.exit(code)
sys.exit(fake_board_python.main())
"""

#: ssh and scp as the board gone (no route), once RR_STATE/down exists.
GONE = (
    '#!/bin/sh\nif [ -e "{down}" ]; then\n'
    '  echo "ssh: connect to host jetson port 22: No route to host" >&2; exit 255\nfi\nexec "{real}" "$@"\n'
)


def board(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """play_the_board with BOARD_PYTHON as the board's python3, ssh and scp that fail once the board
    is gone, and this host's temporary folder in the test's own: (ssh/scp log, board home, RR_STATE)."""
    log, home = play_the_board(tmp_path, monkeypatch)
    state = tmp_path / "rr_state"
    state.mkdir()
    monkeypatch.setenv("RR_STATE", str(state))
    script = tmp_path / "board_python.py"
    script.write_text(BOARD_PYTHON.format(tests=str(TESTS), root=str(TESTS.parent)))
    python3 = tmp_path / "boardbin" / "python3"  # the stand-in's own python3, its last line replaced
    lines = python3.read_text().splitlines()
    assert "fake_board_python.py" in lines[-1]
    python3.write_text("\n".join([*lines[:-1], f'exec "{sys.executable}" "{script}" "$@"', ""]))
    for tool in ("ssh", "scp"):
        real = tmp_path / "sshbin" / tool
        real.rename(real.with_name(f"{tool}_board"))
        real.write_text(GONE.format(down=state / "down", real=real.with_name(f"{tool}_board")))
        real.chmod(0o755)
    here = tmp_path / "host_tmp"
    here.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(here))
    return log, home, state


def runner_runs(log: Path) -> int:
    return sum(RUNNER_LINE in line for line in log.read_text().splitlines())


def held_tree(root: Path, **kw: object) -> str:
    return str(sysfs_fake.orin(root, **kw))  # type: ignore[arg-type]


def test_repeat_runs_the_runner_once_per_replicate(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """(Working behaviour.) --repeat 2: two runner processes on the board, each deserializing the
    engine itself (the second reuses the first's cached engine file, builds nothing); the result
    holds both replicates' samples in order, split as `replicates`; what each copied back is gone
    here, and on the board only the last run's result.json is left (cleared before each run)."""
    log, home, state = board(tmp_path, monkeypatch)
    monkeypatch.setenv("RR_SCALE_2", "1.5")  # the second process's passes half as slow again
    out = tmp_path / "r.json"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--repeat", "2", "-o", str(out)
    )
    assert code == 0, err
    assert runner_runs(log) == 2
    pids = (state / "deserialized").read_text().split()
    assert len(pids) == 2 and pids[0] != pids[1]  # one deserialization per process
    doc = json.loads(out.read_text())
    assert [r["runs"] for r in doc["replicates"]] == [RUNS, RUNS] and doc["runs"] == 2 * RUNS
    first, second = doc["samples_us"][:RUNS], doc["samples_us"][RUNS:]
    assert np.median(second) == pytest.approx(1.5 * np.median(first))
    assert [r["median_us"] for r in doc["replicates"]] == pytest.approx([np.median(first), np.median(second)])
    assert (
        all(r["measured_at"] for r in doc["replicates"])
        and doc["measured_at"] == doc["replicates"][1]["measured_at"]
    )
    env = doc["environment"]
    assert env["remote"] == HOST and env["engine_built_now"] is True  # the first's: it built the engine
    assert "2 replicates of 6 runs" in stdout and "jetson/runner.py run again on the board" in stdout
    (folder,) = (home / "deployopt-runner").glob("net-*")  # the model's: its name, a hash of its bytes
    left = sorted(p.name for p in folder.iterdir())
    assert left == ["engines", "net.onnx", RESULT]
    assert len(list((folder / "engines").iterdir())) == 1
    board_last = json.loads((folder / RESULT).read_text())
    assert board_last["samples_us"] == second
    assert list(Path(tempfile.gettempdir()).iterdir()) == []  # the copies back are gone here
    # a second such result: compare judges the pair on the replicates' medians
    monkeypatch.setenv("RR_SCALE_3", "1.2")
    monkeypatch.setenv("RR_SCALE_4", "1.3")
    again = tmp_path / "again.json"
    code, _, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--repeat", "2", "-o", str(again)
    )
    assert code == 0, err
    code, stdout, err = run_cli(monkeypatch, capsys, "compare", str(out), str(again), "--json")
    assert code in (0, 1), err
    pair = json.loads(stdout)["pairs"][0]
    assert pair["test"]["name"] == REPLICATE_TEST and pair["test"]["replicates"] == {
        "baseline": 2,
        "current": 2,
    }


def test_a_replicate_that_wrote_no_result_does_not_hand_back_the_one_before(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """(Working behaviour.) The second runner exits 0 without writing its result.json: the first's,
    left on the board, was removed before it ran, so the copy back fails in one line and nothing is
    written (it would otherwise be the first replicate's samples a second time)."""
    _, _, state = board(tmp_path, monkeypatch)
    python3 = tmp_path / "boardbin" / "python3"
    lines = python3.read_text().splitlines()
    silent = f'[ "$1" != -c ] && [ -e "{state}/runs" ] && exit 0'  # the second runner: writes nothing
    python3.write_text("\n".join([lines[0], silent, *lines[1:], ""]))
    out = tmp_path / "r.json"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--repeat", "2", "-o", str(out)
    )
    assert (code, stdout) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"error: scp of {RESULT} on user@jetson") and not out.exists()


def test_a_held_down_replicate_keeps_its_board_record(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """(Working behaviour.) The board capped the clock and fired over-current events during the
    second replicate only: the result keeps that replicate's record (its devfreq readings, the
    over-current counts, its clocks), bench warns, and compare flags the result, as for a desktop
    GPU's clock (Timing.from_replicates)."""
    board(tmp_path, monkeypatch)
    capped = 1_032_750_000
    before = held_tree(tmp_path / "held_before", oc_events=(0, 4, 0))
    after = held_tree(tmp_path / "held_after", oc_events=(0, 6, 0), cur_hz=capped)
    monkeypatch.setenv("RR_HELD_2", f"{before}:{after}")
    out = tmp_path / "held.json"
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *REMOTE, "--repeat", "2", "-o", str(out))
    assert code == 0, err
    env = json.loads(out.read_text())["environment"]
    assert env["oc_events"] == {"oc1": 0, "oc2": 2, "oc3": 0}
    assert env["gpu_clock_during_run"]["after"]["cur_hz"] == capped
    assert env["engine_built_now"] is False  # the second replicate's record, whole
    assert (
        "warning: the GPU's clock was held down while this was timed (over-current throttling: 2 oc2" in err
    )
    assert "a cap below the locked clock: 1032.75 of 1300.5 MHz right after the timed loop" in err
    # and --append: a clean file, then a held-down run added to it
    monkeypatch.setenv("RR_HELD_2", "")
    monkeypatch.setenv("RR_HELD_4", f"{before}:{after}")
    appended = tmp_path / "appended.json"
    for _ in range(2):
        code, _, err = run_cli(
            monkeypatch, capsys, "bench", str(model), *REMOTE, "--append", "-o", str(appended)
        )
        assert code == 0, err
    doc = json.loads(appended.read_text())
    assert len(doc["replicates"]) == 2 and doc["environment"]["oc_events"] == {"oc1": 0, "oc2": 2, "oc3": 0}
    assert "held down" in err
    code, stdout, err = run_cli(monkeypatch, capsys, "compare", str(appended), str(out), "--json")
    assert code == 0, err
    pair = json.loads(stdout)["pairs"][0]
    assert pair["test"]["name"] == REPLICATE_TEST
    flags = [d for d in pair["environment_differences"] if "GPU clock held down" in d]
    assert [d.split(":")[0] for d in flags] == ["baseline", "current"]  # both sides flagged


def test_a_board_lost_on_the_second_replicate_writes_nothing(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """(Working behaviour.) The board answers the first replicate and is gone for the second: one
    line, exit 2, no -o written; with --append the FILE is left byte for byte as it was."""
    log, _, state = board(tmp_path, monkeypatch)
    monkeypatch.setenv("RR_DOWN_AFTER", "1")
    out = tmp_path / "r.json"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--repeat", "2", "-o", str(out)
    )
    assert (code, stdout) == (2, "")
    assert (
        err == f"error: cannot reach {HOST} over ssh: ssh: connect to host jetson port 22: No route to host\n"
    )
    assert not out.exists() and runner_runs(log) == 1
    # --append: a file of one replicate, then a bench of two whose second finds the board gone
    (state / "down").unlink()
    monkeypatch.delenv("RR_DOWN_AFTER")
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *REMOTE, "--append", "-o", str(out))
    assert code == 0, err
    before = out.read_bytes()
    monkeypatch.setenv("RR_DOWN_AFTER", "3")  # the runner's third process: this bench's first
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--append", "--repeat", "2", "-o", str(out)
    )
    assert (code, stdout) == (2, "") and err.count("\n") == 1 and "cannot reach" in err
    assert out.read_bytes() == before


def docs_board_loop() -> tuple[list[str], list[tuple[str, str]], list[str]]:
    """The `--remote` loop of docs/regression.md's "Interleaving": B's flags, each round's (model,
    -o FILE) in order, and the compare line's arguments."""
    text = (TESTS.parent / "docs" / "regression.md").read_text()
    block = next(b for b in text.split("```")[1::2] if "--remote" in b and "--append" in b)
    lines = [ln.strip() for ln in block.strip().splitlines()]
    flags = shlex.split(lines[0].partition("=")[2])[0].split()
    benches = [shlex.split(ln) for ln in lines if ln.startswith("deployopt bench")]
    rounds = [(argv[2], argv[argv.index("-o") + 1]) for argv in benches]
    assert all(
        argv[3:] == ["$B", "--append", "-o", dest, "||", "exit", "1"]
        for argv, (_, dest) in zip(benches, rounds)
    )
    compare = next(shlex.split(ln) for ln in lines if ln.startswith("deployopt compare"))
    return flags, rounds, compare[2:]


def test_the_docs_remote_interleaving_loop(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """(Working behaviour: the docs' loop is right.) docs/regression.md's loop on a board, as written
    there (3 rounds of its 6): the baseline and the current model (both model.onnx, in two folders,
    their bytes differing) benched in turns, each --append into its own file, then its compare line."""
    import onnx

    log, home, state = board(tmp_path, monkeypatch)
    flags, rounds, compare = docs_board_loop()
    assert flags[flags.index("--remote") + 1] == HOST
    monkeypatch.chdir(tmp_path)
    (tmp_path / "release").mkdir()
    (tmp_path / "release" / "model.onnx").write_bytes(model.read_bytes())
    current = onnx.load(str(model))
    current.doc_string = "the next release"
    onnx.save(current, str(tmp_path / "model.onnx"))
    n = 0
    for _ in range(3):
        for path, dest in rounds:
            n += 1  # the runner's n-th process: a little slower or faster, by round
            monkeypatch.setenv(f"RR_SCALE_{n}", str(1 + 0.01 * (n * 7 % 5)))
            code, _, err = run_cli(monkeypatch, capsys, "bench", path, *flags, "--append", "-o", dest)
            assert code == 0, err
    assert runner_runs(log) == 6
    deserialized = (state / "deserialized").read_text().split()
    assert len(set(deserialized)) == len(deserialized) == 6  # each round's runner a process of its own
    # a folder a model (both model.onnx: its name and a hash of its bytes), one engine in each, built
    # by its first round, then loaded
    folders = sorted((home / "deployopt-runner").glob("model-*"))
    assert len(folders) == 2 and [len(list((f / "engines").iterdir())) for f in folders] == [1, 1]
    code, out, err = run_cli(monkeypatch, capsys, "compare", *compare, "--json")
    assert code == 0, err
    pair = json.loads(out)["pairs"][0]
    assert pair["test"]["name"] == REPLICATE_TEST and pair["one_run_per_side"] is False
    assert pair["test"]["replicates"] == {"baseline": 3, "current": 3}
    assert pair["model_check"]["status"] == "changed" and pair["environment_differences"] == []
    assert "model changed" in err


def test_trtexec_on_the_board_is_not_called_the_runner(
    fake: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """(A fix.) `--backend trtexec --remote HOST --repeat 2` runs trtexec twice on the board; bench's
    replicates row says so (it said each replicate was jetson/runner.py run again)."""
    import shutil

    import test_trtexec_backend as trtexec_board

    log = trtexec_board.play_the_board(tmp_path, monkeypatch)
    onnx_file = (
        tmp_path / f"rr_conv_{os.getpid()}.onnx"
    )  # the board's /tmp is this machine's: a name of its own
    onnx_file.write_bytes(fake["model"].read_bytes())
    try:
        code, stdout, err = run_cli(
            monkeypatch, capsys, "bench", str(onnx_file), "--backend", "trtexec", "--remote", HOST,
            "--dtype", "fp16", "--repeat", "2",
        )  # fmt: skip
    finally:
        shutil.rmtree(Path("/tmp/deployopt-trtexec") / onnx_file.stem, ignore_errors=True)
    assert code == 0, err
    runs = [ln for ln in log.read_text().splitlines() if ln.startswith("ssh ") and "/trtexec --onnx=" in ln]
    assert len(runs) == 2 and all("--saveEngine=" in ln for ln in runs)  # each builds the engine again
    assert "2 replicates of 300 runs" in stdout and "runner.py" not in stdout
    assert "each a new trtexec process on the board that builds the engine again" in stdout


def test_a_replicate_timed_with_the_clock_unlocked_is_refused(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """(A fix.) The board's clock was unlocked (jetson_clocks undone: devfreq's minimum below its
    maximum) for the second replicate only. The result keeps one environment, the first's, so it
    read "GPU clock locked" and compare --strict passed it; now one line, exit 2, nothing written,
    as --append refuses a run of another setup. With --append --repeat 2 the second new run is
    checked against FILE too (only the first was), and FILE stays as it was."""
    log, _, _ = board(tmp_path, monkeypatch)
    low = sysfs_fake.ORIN_MIN_HZ
    unlocked = held_tree(tmp_path / "dvfs", min_hz=low, cur_hz=low)
    monkeypatch.setenv("RR_ROOT_2", unlocked)
    out = tmp_path / "r.json"
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--repeat", "2", "-o", str(out)
    )
    assert (code, stdout) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(
        "error: --repeat 2: replicate 2 was timed in another setup than replicate 1 (GPU clock "
    )
    assert not out.exists() and runner_runs(log) == 2
    monkeypatch.delenv("RR_ROOT_2")
    code, _, err = run_cli(monkeypatch, capsys, "bench", str(model), *REMOTE, "--append", "-o", str(out))
    assert code == 0, err  # the runner's third process
    before = out.read_bytes()
    monkeypatch.setenv("RR_ROOT_5", unlocked)  # this bench's second replicate
    code, stdout, err = run_cli(
        monkeypatch, capsys, "bench", str(model), *REMOTE, "--append", "--repeat", "2", "-o", str(out)
    )
    assert (code, stdout) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"error: --append: {out} holds runs of another setup than this one (GPU clock ")
    assert out.read_bytes() == before and runner_runs(log) == 5
