"""`python3 runner.py MODEL --repeat N` on the board: N replicates, each in a process of its own, in
the result `deployopt bench --repeat N` writes, so `deployopt compare` tests a pair of them on their
replicate medians as it does bench's.

Why: a user timing on the board directly (jetson/README.md) had no --repeat, and so no replicates;
one run a side is judged on its samples, which cannot see the run-to-run variation a new process
brings. The runner runs on the stand-in board's python3 (tests/fake_board_python.py: the real
runner, the fake TensorRT, a fake sysfs tree), here wrapped to count and tell its replicates apart;
no real Jetson or TensorRT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jetson_sysfs_fake as sysfs_fake
import numpy as np
import pytest
from cli_runner import run_cli
from scripts import load_script
from test_jetson_runner import STEADY_AND_THROTTLED, _record

from deployopt.backends.tensorrt import load_runner_result
from deployopt.clocks import held_down_phrase
from deployopt.regression import LIKE_FOR_LIKE, setup_differences
from deployopt.timing import MAX_REPEAT, REPLICATE_TEST, Timing

TESTS = Path(__file__).resolve().parent
RUNNER = TESTS.parent / "jetson" / "runner.py"
runner = load_script(RUNNER, "jetson_runner_repeat")
RUNS = 6

#: The board's python3: tests/fake_board_python.py, with the runner's run() (what each replicate's
#: process does) counted in RR_STATE/replicates, and per replicate n: a line "n pid" in RR_STATE/pids,
#: its pid in RR_STATE/deserialized for each engine it deserializes, its forward passes slowed by
#: RR_SCALE_<n>, its sysfs tree RR_ROOT_<n> (else FAKE_BOARD_ROOT's), and RR_KILL=<n>: it is killed
#: (SIGKILL, as the OOM killer kills) before it times. RR_STATE/main holds the runner's own pid.
BOARD_PYTHON = """
import os, sys
sys.path[:0] = [{tests!r}, {root!r}]
import fake_board_python, scripts, test_tensorrt_fake_api as api

state = os.environ["RR_STATE"]
load = scripts.load_script


def note(name, text):
    with open(os.path.join(state, name), "a") as fh:
        fh.write(text + "\\n")


def load_counted(path, name):
    runner = load(path, name)
    run = runner.run

    def counted_run(args, trt=None, cuda=None):
        counter = os.path.join(state, "replicates")
        n = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
        with open(counter, "w") as fh:
            fh.write(str(n))
        note("pids", "%d %d" % (n, os.getpid()))
        if os.environ.get("RR_KILL") == str(n):
            os.kill(os.getpid(), 9)
        root = os.environ.get("RR_ROOT_%d" % n)
        if root:
            runner.SYSFS, runner.PROCFS = root + "/sys", root + "/proc"
        scale = float(os.environ.get("RR_SCALE_%d" % n, "1"))
        call, execute = api.FakeGpu.call, api.FakeGpu.execute

        def logged_call(gpu, name, *rest):
            if name == "Runtime.deserialize_cuda_engine":
                note("deserialized", str(os.getpid()))
            return call(gpu, name, *rest)

        def scaled_execute(gpu, handle):
            ms = execute(gpu, handle) * (scale - 1)
            gpu.clocks[handle] += ms
            return ms

        api.FakeGpu.call, api.FakeGpu.execute = logged_call, scaled_execute
        return run(args, trt, cuda)

    runner.run = counted_run
    return runner


scripts.load_script = load_counted
note("main", str(os.getpid()))
sys.exit(fake_board_python.main())
"""


def on_the_board(tmp_path: Path, *argv: str, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`python3 runner.py ARGV` on the stand-in board (BOARD_PYTHON; `env` its RR_* settings), in
    `tmp_path`/board: (the finished process, RR_STATE)."""
    board = tmp_path / "board"
    state = board / f"state{len(list(board.glob('state*'))) if board.is_dir() else 0}"
    state.mkdir(parents=True)
    script = board / "board_python.py"
    script.write_text(BOARD_PYTHON.format(tests=str(TESTS), root=str(TESTS.parent)))
    root = board / "sysfs"
    if not root.is_dir():
        sysfs_fake.orin(root)
    full_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RR_", "FAKE_BOARD"))},
        "FAKE_BOARD_ROOT": str(root),
        "RR_STATE": str(state),
        **env,
    }
    proc = subprocess.run(
        [sys.executable, str(script), str(RUNNER), *argv],
        cwd=board,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc, state


@pytest.fixture
def model(zoo_model_path: Callable[[str], Path], tmp_path: Path) -> Path:
    path = tmp_path / "board" / "net.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(zoo_model_path("mobilenet_like").read_bytes())
    return path


def timed(model: Path, out: Path, repeat: int = 3) -> list[str]:
    return [
        str(model), "--runs", str(RUNS), "--warmup", "1", "--repeat", str(repeat), "--engine-dir",
        str(model.parent / "engines"), "--out", str(out),
    ]  # fmt: skip


# ------------------------------------------------------------------ on the board, end to end


def test_repeat_times_each_replicate_in_a_process_of_its_own_and_compare_reads_replicates(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--repeat 3: three processes, none the runner's own, each deserializing the engine itself
    (the first builds it, the others reuse it); one result of 3 replicates of RUNS runs, their
    samples in order, each replicate's median its own; stdout and --out the same document. Two
    such results: compare tests them on their replicate medians, as it does two bench --repeat 3."""
    out = tmp_path / "baseline.json"
    proc, state = on_the_board(tmp_path, *timed(model, out), RR_SCALE_2="1.5", RR_SCALE_3="1.2")
    assert proc.returncode == 0, proc.stderr
    main = (state / "main").read_text().split()
    pids = [line.split() for line in (state / "pids").read_text().splitlines()]
    assert [n for n, _ in pids] == ["1", "2", "3"]
    assert len({pid for _, pid in pids}) == 3 and not {pid for _, pid in pids} & set(main)
    assert (state / "deserialized").read_text().split() == [pid for _, pid in pids]  # one each
    assert proc.stderr.count("built engine ") == 1 and proc.stderr.count("reusing engine ") == 2
    doc = json.loads(out.read_text())
    assert json.loads(proc.stdout) == doc
    assert doc["runs"] == 3 * RUNS and [r["runs"] for r in doc["replicates"]] == [RUNS] * 3
    parts = [doc["samples_us"][i * RUNS : (i + 1) * RUNS] for i in range(3)]
    medians = [float(np.median(p)) for p in parts]
    assert medians[1] == pytest.approx(1.5 * medians[0]) and medians[2] == pytest.approx(1.2 * medians[0])
    assert [r["median_us"] for r in doc["replicates"]] == pytest.approx(medians)
    assert doc["environment"]["engine_built_now"] is True  # the first replicate's: it built the engine
    timing = load_runner_result(out)
    assert timing.replicate_count == 3 and timing.replicate_medians_us == pytest.approx(medians)
    assert "3 replicates of 6 runs" in timing.replicate_text()

    current = tmp_path / "current.json"
    proc, _ = on_the_board(tmp_path, *timed(model, current), RR_SCALE_2="1.1", RR_SCALE_3="1.3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("built engine ") == 0  # cached by the first run
    code, stdout, err = run_cli(monkeypatch, capsys, "compare", str(out), str(current), "--json")
    assert code in (0, 1), err
    pair = json.loads(stdout)["pairs"][0]
    assert pair["test"]["name"] == REPLICATE_TEST
    assert pair["test"]["replicates"] == {"baseline": 3, "current": 3}


def test_a_replicate_that_fails_is_one_line_naming_it_and_nothing_is_written(
    model: Path, tmp_path: Path
) -> None:
    """A replicate's own error (the board's disk full as the first writes the engine) is the runner's
    one line with `replicate 1 of 3: ` before it; a replicate killed (SIGKILL, as the OOM killer
    kills) says so. Exit 2, no --out file, and no replicate after it runs."""
    out = tmp_path / "r.json"
    proc, state = on_the_board(tmp_path, *timed(model, out), FAKE_BOARD_DISK_FULL="1")
    assert proc.returncode == 2 and proc.stdout == ""
    engine = proc.stderr.splitlines()[-1]
    assert engine.startswith("error: replicate 1 of 3: cannot read or write "), proc.stderr
    assert engine.endswith(": No space left on device"), proc.stderr
    assert (state / "replicates").read_text() == "1" and not out.exists()
    proc, state = on_the_board(tmp_path, *timed(model, out), RR_KILL="2")
    assert proc.returncode == 2 and proc.stdout == "" and not out.exists()
    assert proc.stderr.splitlines()[-1] == (
        "error: replicate 2 of 3: its process died of signal 9 (SIGKILL: the kernel's OOM killer?)"
    )
    assert (state / "replicates").read_text() == "2"


def test_a_replicate_timed_in_another_setup_is_refused_and_nothing_is_written(
    model: Path, tmp_path: Path
) -> None:
    """The second replicate's board has its GPU clock unlocked (jetson_clocks undone between the
    processes): one line naming the difference, exit 2, nothing written, as bench --repeat refuses
    it (the result keeps one environment, which would read as locked throughout)."""
    out = tmp_path / "r.json"
    unlocked = sysfs_fake.orin(tmp_path / "unlocked", min_hz=306_000_000)
    proc, _ = on_the_board(tmp_path, *timed(model, out), RR_ROOT_2=str(unlocked))
    assert proc.returncode == 2 and proc.stdout == "" and not out.exists()
    assert proc.stderr.splitlines()[-1] == (
        "error: --repeat 3: replicate 2 was timed in another setup than replicate 1 (GPU clock locked -> "
        "not locked): nothing written (the replicates of one result must share a setup); time again once "
        "the setup holds"
    )


# ------------------------------------------------------------------ the host's rules, kept equal


def part(samples: list[float], env: dict[str, Any], at: str) -> dict[str, Any]:
    """One replicate's document, as run() returns it."""
    model = {"file": "net.onnx", "sha256": "ab" * 32}
    return runner.summarize(samples, 2, "one forward pass (fp16)", env, model=model, measured_at=at)


def test_the_result_is_what_the_host_writes_for_the_same_replicates(tmp_path: Path) -> None:
    """from_replicates is Timing.from_replicates(...).to_json(): the samples in order, the statistics
    over all of them, each replicate's runs, median, IQR and time, measured_at the latest, and the
    environment the first replicate's unless a later one's clock was held down (the second's here,
    over-current events during its loop, so compare still flags the result). One run a replicate:
    its IQR null."""
    setup = {"board": "Jetson AGX Orin", "clocks_locked": True, "tensorrt": "10.3.0"}
    steady = {**setup, **_record(tmp_path / "a", "orin", {}, {"gpu_c": 60.0})}
    held = {**setup, **_record(tmp_path / "b", "orin", {"oc_events": (0, 0, 3)}, {"oc_events": (0, 0, 5)})}
    rng = np.random.default_rng(0)
    for runs in (RUNS, 1):
        parts = [
            part(list(500 + rng.normal(0, 2, runs)), steady, "2026-12-07T10:00:00Z"),
            part(list(520 + rng.normal(0, 2, runs)), held, "2026-12-07T10:00:09Z"),
            part(list(505 + rng.normal(0, 2, runs)), steady, "2026-12-07T10:00:05Z"),
        ]
        ours = runner.from_replicates(parts)
        theirs = Timing.from_replicates([Timing.from_json(p) for p in parts]).to_json()
        assert list(ours) == list(theirs)
        for key, value in theirs.items():
            if key == "replicates":
                assert [set(r) for r in ours[key]] == [set(r) for r in value]
                for a, b in zip(ours[key], value):
                    assert a == pytest.approx(b) if runs > 1 else a == b
            elif isinstance(value, (float, list)) and key != "samples_us":
                assert ours[key] == pytest.approx(value), key
            else:
                assert ours[key] == value, key
        assert ours["environment"] == held and ours["measured_at"] == "2026-12-07T10:00:09Z"


MALFORMED = [
    {"clocks_locked": True, "nvpmodel": "MAXN"},
    {"oc_events": "lots"},
    {"oc_events": {"oc1": True, "oc2": -4, "oc3": "2"}},
    {"oc_events": {"oc1": float("nan"), "oc2": float("inf")}},
    {"gpu_clock_during_run": {"before": 1, "after": {}}},
    {"gpu_clock_during_run": {"before": {"cur_hz": "x", "max_hz": None}, "after": {"cur_hz": 5}}},
    {"gpu_clock_during_run": []},
    {"gpu_clock_during_run": {"before": {"cur_hz": 900, "max_hz": 1000}, "after": {"max_hz": 1000}}},
    {
        "gpu_clock_during_run": {"before": {"cur_hz": 900, "max_hz": 1000}, "after": {"max_hz": 1000}},
        "clocks_locked": True,
    },
    {"gpu_clock_during_run": {"before": {"max_hz": 1000, "min_hz": 1000}, "after": {"max_hz": 900}}},
]


@pytest.mark.parametrize(("board", "before", "after", "held"), STEADY_AND_THROTTLED)
def test_held_down_is_the_hosts_rule_on_the_runners_record(
    tmp_path: Path, board: str, before: dict[str, Any], after: dict[str, Any], held: str | None
) -> None:
    assert runner.held_down(_record(tmp_path, board, before, after)) == (held is not None)


@pytest.mark.parametrize("env", MALFORMED)
def test_held_down_is_the_hosts_rule_on_old_and_malformed_records(env: dict[str, Any]) -> None:
    assert runner.held_down(env) == (held_down_phrase(env) is not None)


def test_the_setup_facts_and_their_words_are_the_hosts() -> None:
    """Every fact the runner compares between replicates is one compare's --strict compares, in the
    same words; every LIKE_FOR_LIKE fact a runner result records is one of them; the differences
    read as the host's (its arrow ASCII)."""
    words = dict(LIKE_FOR_LIKE)
    assert all(words.get(key) == word for key, word in runner.SETUP_FACTS)
    env = {
        "runner": "jetson/runner.py v1", "board": "Jetson AGX Orin", "gpu": "Orin", "sms": 16,
        "compute_capability": "8.7", "nvpmodel": "MAXN", "clocks_locked": True, "tensorrt": "10.3.0",
        "dtype": "fp16", "input_shapes": {"input": [1, 3, 32, 32]}, "engine": "e", "engine_key": "k",
    }  # fmt: skip
    assert {key for key, _ in LIKE_FOR_LIKE} & set(env) == {key for key, _ in runner.SETUP_FACTS}
    other = {
        **env, "nvpmodel": "15W", "clocks_locked": False, "input_shapes": {"input": [2, 3, 32, 32]},
        "engine": "f",
    }  # fmt: skip
    a, b = part([1.0, 2.0], env, "2026-12-07T10:00:00Z"), part([1.0, 2.0], other, "2026-12-07T10:00:01Z")
    host = setup_differences(Timing.from_json(a), Timing.from_json(b))
    assert host == [
        "power mode MAXN → 15W",
        "GPU clock locked → not locked",
        "input shapes input:1x3x32x32 → input:2x3x32x32",
    ]
    assert runner.setup_differences(a, b) == [d.replace("→", "->") for d in host]
    assert runner.setup_differences(a, part([3.0], env, "2026-12-07T10:00:02Z")) == []


def test_repeat_bounds_and_refusals_are_one_line(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--repeat takes bench's bounds (deployopt.timing.MAX_REPEAT); --per-layer (bench has no
    per-layer replicates) and --batch-dir (one result per model) are refused with it, before any
    TensorRT."""
    assert runner.MAX_REPEAT == MAX_REPEAT
    for n in (0, MAX_REPEAT + 1):
        assert runner.main([str(model), "--repeat", str(n)]) == 2
        assert capsys.readouterr().err == f"error: --repeat {n}: must be between 1 and {MAX_REPEAT}\n"
    assert runner.main([str(model), "--repeat", "2", "--per-layer"]) == 2
    assert capsys.readouterr().err == (
        "error: --repeat times the model end to end, as `deployopt bench --repeat` does: --per-layer cannot "
        "go with it (profile one run)\n"
    )
    assert runner.main(["--batch-dir", str(tmp_path), "--repeat", "2"]) == 2
    assert capsys.readouterr().err == (
        "error: --batch-dir times every model in its folder, each with its own result: --repeat cannot go "
        "with it\n"
    )
