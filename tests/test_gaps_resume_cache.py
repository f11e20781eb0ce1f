"""A resumed run's sweep and the per-layer cache: what this machine times goes to this machine's
folder, never to the folder the journal's environment names. A journal taken before a Python patch
release (which --resume lets pass, saying so) or by an older backend (fewer facts) names another
setup's table, and the resumed sweep wrote this machine's timings into it, where the next run with
that setup read them as its own.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import pytest
from test_gaps_resume_checks import patch_later
from test_resume2_sweep_resume import interrupted_sweep
from test_resume_journal_upgrade import rewrite_journal, run_ort, three_convs

from deployopt.lut import device_fingerprint

pytestmark = pytest.mark.filterwarnings("ignore::deployopt.errors.DeployoptWarning")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def before_a_patch_release(env: dict[str, Any]) -> None:
    """Taken one Python patch release away from this machine's (--resume says so, and goes on)."""
    env["python"] = patch_later(platform.python_version())


def by_an_older_backend(env: dict[str, Any]) -> None:
    """Taken by a deployopt that recorded no thread or core counts (--resume says it cannot check them)."""
    env.pop("cpu_cores")
    env.pop("intra_op_threads")


def baselines_only(outdir: Path, edit: Any) -> str:
    """Cut OUTDIR's journal after its two baselines (no sweep), their environments passed through
    `edit`; the layer-cache folder that environment names."""
    envs: list[dict[str, Any]] = []

    def cut(event: dict[str, Any]) -> dict[str, Any] | None:
        if event["event"] == "start":
            return event
        if event["event"] == "measured" and event["index"] <= 2:
            edit(event["timing"]["environment"])
            envs.append(event["timing"]["environment"])
            return event
        return None

    rewrite_journal(outdir, cut)
    return device_fingerprint("ort", envs[0], None)


JOURNALS = pytest.mark.parametrize("edit", [before_a_patch_release, by_an_older_backend])


def folders(lut: Path) -> list[str]:
    return sorted(p.name for p in lut.iterdir() if p.is_dir())


@JOURNALS
def test_a_resumed_sweep_writes_only_this_machines_folder(tmp_path: Path, edit: Any) -> None:
    model = three_convs(tmp_path / "m.onnx")
    out = tmp_path / "out"
    run_ort(model, out, tmp_path / "old_lut")
    journal_folder = baselines_only(out, edit)
    lut = tmp_path / "lut"
    resumed = run_ort(model, out, lut, resume=True, max_evals=4)
    assert resumed.sweep["measured"] == resumed.sweep["shapes"] > 0
    assert journal_folder not in folders(lut)  # it held every conv this machine timed
    fresh = run_ort(model, tmp_path / "fresh", lut)
    assert fresh.sweep["measured"] == 0  # all in this machine's folder, the only one there
    assert len(folders(lut)) == 1


@JOURNALS
def test_an_interrupted_resumed_sweep_is_found_in_this_machines_folder(tmp_path: Path, edit: Any) -> None:
    """Stopped after one chunk (16 convs), then resumed again: one conv is timed again (its timing
    names the folder), the other 15 are read there; the journal's folder was never written."""
    model = three_convs(tmp_path / "m.onnx")
    out = tmp_path / "out"
    run_ort(model, out, tmp_path / "old_lut", max_candidates=8)
    journal_folder = baselines_only(out, edit)
    lut = tmp_path / "lut"
    interrupted_sweep(model, out, lut, resume=True)
    assert journal_folder not in folders(lut) and sum(1 for _ in lut.rglob("*.json")) == 16
    done = run_ort(model, out, lut, resume=True, max_evals=4, max_candidates=8)
    assert done.sweep["cached"] == 15 and done.sweep["measured"] == done.sweep["shapes"] - 15
    assert journal_folder not in folders(lut)
    sweep = [json.loads(ln) for ln in (out / "journal.jsonl").read_text().splitlines()]
    assert [e["fingerprint"] for e in sweep if e["event"] == "sweep"] == folders(lut)
