"""A local trtexec runs in a session of its own (run_trtexec), so the terminal's Ctrl-C never reaches
it: an interrupt, SIGTERM or any other exit of deployopt while it ran left it timing on the GPU.
Only a timeout killed its process group. Now every way out of run_trtexec kills it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "killpg"), reason="process groups are POSIX")

# the parent: run_trtexec on a "trtexec" that starts a grandchild (as trtexec's own helpers would)
# and waits; SIGTERM ends it with SystemExit, as a command's own handler may
_PARENT = textwrap.dedent(
    """
    import signal, sys
    from pathlib import Path
    from deployopt.backends.trtexec import run_trtexec

    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    pidfile, log = sys.argv[1], sys.argv[2]
    script = f"sleep 120 & echo $! > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; wait"
    run_trtexec(["sh", "-c", script], 300.0, Path(log))
    """
)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize(("sig", "rc"), [(signal.SIGINT, None), (signal.SIGTERM, 143)])
def test_interrupted_run_kills_trtexec_group(tmp_path: Path, sig: signal.Signals, rc: int | None) -> None:
    pidfile = tmp_path / "grandchild.pid"
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(pidfile), str(tmp_path / "trtexec.log")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    grandchild = None
    try:
        deadline = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < deadline and parent.poll() is None:
            time.sleep(0.05)
        assert pidfile.exists(), parent.communicate()[1]
        grandchild = int(pidfile.read_text())
        assert _running(grandchild)
        parent.send_signal(sig)
        _, err = parent.communicate(timeout=30)
        if rc is None:
            assert "KeyboardInterrupt" in err  # the interrupt went on, after the group was killed
        else:
            assert parent.returncode == rc
        deadline = time.monotonic() + 5
        while _running(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(grandchild), "trtexec's process group outlived the interrupted run"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if grandchild is not None and _running(grandchild):
            os.kill(grandchild, signal.SIGKILL)
