"""A terminal that hangs up answers EIO to every write, and the kernel sends SIGHUP: a write can
fail before the signal's handler runs. Under load it did, and optimize ended "error: Input/output
error", exit 2, without its resume line (the full suite's pty hangup test on the 2-core machine).
Here SIGHUP is held back (blocked, or ignored as `nohup` does), so the EIO comes first every time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_signals_sighup import _DRIVER, _args, run_and_hang_up

from deployopt.optimize import LOCK_NAME

_HELD_BACK = {
    # SIGHUP pending, never delivered: only the EIO says the terminal is gone
    "blocked": "import signal; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})\n",
    # nohup: a hangup is no interrupt, the run goes on and its lines go nowhere
    "ignored": "import signal; signal.signal(signal.SIGHUP, signal.SIG_IGN)\n",
}


def _run_and_hang_up(tmp_path: Path, model: Path, held: str, max_evals: str) -> tuple[int, Path, Path]:
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    marker = tmp_path / "predicting"
    env = {**os.environ, "TMPDIR": str(tmp), "DEPLOYOPT_CACHE_DIR": str(tmp_path / "cache")}
    code = run_and_hang_up(
        [
            sys.executable,
            "-c",
            _HELD_BACK[held] + _DRIVER,
            str(marker),
            *_args(model, out),
            "--max-evals",
            max_evals,
        ],
        marker,
        env,
    )
    return code, out, tmp


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pty hangup as Linux does it")
def test_a_write_to_a_hung_up_terminal_before_sighup_arrives_is_that_hangup(
    zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    code, out, tmp = _run_and_hang_up(tmp_path, zoo_model_path("vgg16_pruned_b4"), "blocked", "400")
    assert code == 129  # 2 before: "error: Input/output error"
    assert not (out / LOCK_NAME).exists() and (out / "journal.jsonl").is_file()
    assert list(tmp.glob("deployopt-*")) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pty hangup as Linux does it")
def test_under_nohup_a_hung_up_terminal_does_not_end_the_run(
    zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    code, out, _ = _run_and_hang_up(tmp_path, zoo_model_path("vgg16_pruned_b4"), "ignored", "30")
    assert code == 0  # 2 before: "error: Input/output error", the run stopped
    assert (out / "report.json").is_file() and (out / "model.onnx").is_file()
    assert not (out / LOCK_NAME).exists()
