"""`python3` on the stand-in board of tests/test_tensorrt_remote.py: runs the real jetson/runner.py
(argv[1]) with the fake TensorRT and CUDA of tests/test_tensorrt_fake_api.py in sys.modules, and its
board files (sysfs, procfs) read from FAKE_BOARD_ROOT, a tree made by tests/jetson_sysfs_fake.py.
`python3 -c CODE` runs CODE with the same fake TensorRT (the host's version check), failing as a
real python3 does: a traceback on stderr, exit 1.

FAKE_BOARD_TRT=none leaves tensorrt out (a board without it); FAKE_BOARD_TRT=VERSION picks a surface.
FAKE_BOARD_DISK_FULL=1: the board's disk is full when the runner writes an engine (its `open` of a
`.engine` file for writing fails with ENOSPC, as a full eMMC's would).
"""

from __future__ import annotations

import builtins
import errno
import os
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path[:0] = [str(TESTS), str(TESTS.parent)]


def main() -> int:
    import pytest
    from scripts import load_script
    from test_tensorrt_fake_api import V10, install

    script, *args = sys.argv[1:]
    version = os.environ.get("FAKE_BOARD_TRT", V10)
    if version != "none":
        install(pytest.MonkeyPatch(), version, "bindings" if version == V10 else "cudart")
    if script == "-c":
        exec(compile(args[0], "<string>", "exec"), {"__name__": "__main__"})
        return 0
    runner = load_script(Path(script).resolve(), "board_runner")
    root = os.environ.get("FAKE_BOARD_ROOT")
    if root:
        runner.SYSFS, runner.PROCFS = f"{root}/sys", f"{root}/proc"
    if os.environ.get("FAKE_BOARD_DISK_FULL"):
        runner.open = disk_full_for_engines
    return int(runner.main(args))


def disk_full_for_engines(path: str, mode: str = "r", *args: object, **kwargs: object) -> object:
    """`open` as the runner's: an engine file (its temporary one too) opened for writing fails with
    ENOSPC, the message a full disk gives."""
    if "w" in mode and ".engine" in os.path.basename(str(path)):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return builtins.open(path, mode, *args, **kwargs)  # type: ignore[call-overload]


if __name__ == "__main__":
    sys.exit(main())
