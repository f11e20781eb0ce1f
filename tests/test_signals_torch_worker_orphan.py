"""The torch worker ends when deployopt does: a parent killed with SIGKILL (the OOM killer,
`timeout -s KILL`) left it timing its model, holding the GPU, until its next stdin read or answer
write (torch_worker.exit_with_parent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# what deployopt.backends.torch starts the worker with (torch_worker.PARENT_ENV, DEATH_SIGNAL_ENV)
PARENT_ENV = "DEPLOYOPT_WORKER_PARENT"
DEATH_SIGNAL_ENV = "DEPLOYOPT_WORKER_DEATH_SIGNAL"

pytestmark = pytest.mark.skipif(os.name != "posix", reason="parent-death handling is POSIX only")

# deployopt's side: a WorkerProcess (as TorchSession starts it) from the main thread, or from a
# thread that then ends (Linux's death signal fires when that thread ends: it must not be set
# then); the worker set busy for a minute; its pid printed; then it waits to be killed
_PARENT = textwrap.dedent(
    """
    import json, sys, threading, time
    from deployopt.backends.torch import WorkerProcess

    config = {"dtype": "fp32", "device": "cpu", "runs": 1, "warmup": 0}
    made = []
    if sys.argv[1] == "thread":
        t = threading.Thread(target=lambda: made.append(WorkerProcess(config, 120.0)))
        t.start()
        t.join()
        time.sleep(1.0)  # the thread that started it has ended
        worker = made[0]
        assert worker.request({"op": "_sleep", "seconds": 0}, 30.0, "checking")["ok"]
    else:
        worker = WorkerProcess(config, 120.0)
    worker.proc.stdin.write(json.dumps({"op": "_sleep", "seconds": 60}) + "\\n")
    worker.proc.stdin.flush()
    print(worker.proc.pid, flush=True)
    time.sleep(120)
    """
)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("started_from", ["main", "thread"])
def test_worker_exits_when_its_parent_is_killed(started_from: str) -> None:
    pytest.importorskip("torch")
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, started_from], stdout=subprocess.PIPE, text=True
    )
    worker = None
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), f"parent failed (exit {parent.wait()})"
        worker = int(line)
        time.sleep(0.3)  # the worker is in its 60 s request
        assert _running(worker)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while _running(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(worker), "the torch worker outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if worker is not None and _running(worker):
            os.kill(worker, signal.SIGKILL)


def test_worker_whose_parent_died_before_it_started_exits_at_once() -> None:
    """The race prctl leaves: deployopt gone between starting the worker and the worker's first
    look at its parent. It is told by the pid deployopt gave it, not by blocking on stdin."""
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no longer running: the parent deployopt named
    env = {**os.environ, PARENT_ENV: str(gone.pid), DEATH_SIGNAL_ENV: "1"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "deployopt.backends.torch_worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert worker.wait(timeout=10) == 1
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_worker_run_by_hand_still_serves() -> None:
    """No parent named (the worker run by hand, or by an older deployopt): it serves as before."""
    env = {k: v for k, v in os.environ.items() if k not in (PARENT_ENV, DEATH_SIGNAL_ENV)}
    done = subprocess.run(
        [sys.executable, "-m", "deployopt.backends.torch_worker"],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0 and done.stdout == ""
