"""fd 2 filtered while onnxruntime is imported (onnxruntime_compat.stderr_filtered): one holder
at a time, and lines passed on as they come (review of d27ce72).

A hold swapped fd 2 for a temp file and put the saved one back at its end: four threads loading
models at once (the fold held it then) left the process's stderr on a deleted file for good, and a
native crash inside a hold lost everything said before it, held in an unread file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_holds_from_several_threads_leave_stderr_where_it_was(tmp_path: Path) -> None:
    """Each of 8 threads holds fd 2 and writes through it; afterwards fd 2 is the process's own
    stderr again (a later line reaches the caller), and every thread's kept line got out once."""
    code = """
        import os, threading, time
        from deployopt.onnxruntime_compat import stderr_filtered

        def work(i):
            with stderr_filtered(lambda line: b"drop" in line):
                time.sleep(0.01 * (i % 3))
                os.write(2, b"drop this\\n")
                os.write(2, b"kept %d\\n" % i)
                time.sleep(0.01 * ((i + 1) % 3))

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        os.write(2, b"after\\n")
    """
    proc = _run(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[-1] == "after"
    assert sorted(lines[:-1]) == sorted(f"kept {i}" for i in range(8))


def test_a_hold_passes_lines_on_while_its_block_runs(tmp_path: Path) -> None:
    """A line written inside the hold reaches the real stderr while the block still runs, not at its
    end: given the pump a moment, a segfault after it no longer loses it (a crash at once still can;
    the fold holds nothing for that reason, tests/test_lib_entry_points.py)."""
    code = """
        import ctypes, os, time
        from deployopt.onnxruntime_compat import stderr_filtered

        with stderr_filtered(lambda line: b"[W:onnxruntime:" in line):
            os.write(2, b"2026-12-07 [W:onnxruntime:, a.cc:1] a note\\n")
            os.write(2, b"2026-12-07 [E:onnxruntime:, b.cc:2] the error before the crash\\n")
            time.sleep(0.5)  # the pump passes it on as it comes, not at the end of the block
            ctypes.string_at(0)
    """
    proc = _run(code, tmp_path)
    assert proc.returncode != 0
    assert "the error before the crash" in proc.stderr
    assert "a note" not in proc.stderr
