"""`deployopt compare` as a CI gate: a fresh pair benched in either order is not stale, a change of
warm-up or run length is not like for like, a result from the future blames the clock, and
--max-age bounds how old a current result may be (findings 01-03 of the CI bug-bash)."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from cli_runner import run_cli

from deployopt.regression import compare_paths, staleness
from deployopt.timing import Timing

MODEL = {"file": "m.onnx", "sha256": "ab" * 32}


def _at(delta: timedelta) -> str:
    """A "measured_at" this far from this machine's clock now."""
    return (datetime.now(timezone.utc) + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


def _timing(
    median: float, seed: int, at: str | None, runs: int = 200, warmup: int = 50, backend: str = "ort"
):
    rng = np.random.default_rng(seed)
    samples = list(median + rng.normal(0.0, median * 0.002, runs))
    return Timing(backend, samples, warmup, "one forward pass (fp32)", {}, model=MODEL, measured_at=at)


def _write(path: Path, t: Timing) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(t.to_json()))
    return path


def _replicated(median: float, seed: int, times: list[str]) -> Timing:
    return Timing.from_replicates([_timing(median, seed + i, at) for i, at in enumerate(times)])


# 02: a fresh pair benched current first


def test_a_fresh_pair_benched_current_first_passes_strict(monkeypatch, capsys, tmp_path: Path) -> None:
    """The PR's model benched into current.json, then the release's into baseline.json, seconds
    apart: --strict failed it as "stale", blaming a bench that never failed."""
    current = _write(tmp_path / "current.json", _timing(500.0, 1, _at(-timedelta(minutes=5))))
    baseline = _write(tmp_path / "baseline.json", _timing(500.0, 2, _at(-timedelta(minutes=4, seconds=58))))
    code, out, err = run_cli(
        monkeypatch, capsys, "compare", str(baseline), str(current), "--strict", "--json"
    )
    doc = json.loads(out)
    assert code == 0 and err == "", err
    assert doc["stale"] == [] and doc["failures"] == [] and doc["pairs"][0]["stale"] is None
    # --repeat 3 on each side, current first, twenty minutes apart: one session too
    cur = _replicated(500.0, 10, [_at(-timedelta(minutes=m)) for m in (40, 39, 38)])
    base = _replicated(500.0, 20, [_at(-timedelta(minutes=m)) for m in (20, 19, 18)])
    assert staleness(base, cur) is None
    # the same second with other samples (two parallel jobs): one session, not "cannot be told"
    same = _at(-timedelta(minutes=3))
    assert staleness(_timing(500.0, 3, same), _timing(500.0, 4, same)) is None


def test_a_copy_or_a_clearly_older_current_is_still_stale(monkeypatch, capsys, tmp_path: Path) -> None:
    base = _write(tmp_path / "base" / "m.json", _timing(500.0, 1, _at(-timedelta(hours=2))))
    copy = tmp_path / "copy" / "m.json"
    copy.parent.mkdir()
    shutil.copy(base, copy)
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(base), str(copy), "--strict")
    assert code == 1 and "both sides are the same result" in err
    older = _write(tmp_path / "older.json", _timing(500.0, 2, _at(-timedelta(days=2))))
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(base), str(older), "--strict")
    assert code == 1 and "before its baseline" in err


# 03: warm-up and run length


def test_another_warmup_or_run_length_is_not_like_for_like(monkeypatch, capsys, tmp_path: Path) -> None:
    """Baseline --runs 60 --warmup 30, current --runs 12 --warmup 0: bench --append refuses to pool
    them, and compare --strict passed them as like for like with no word of the warm-up."""
    base = _write(tmp_path / "base.json", _timing(500.0, 1, None, runs=60, warmup=30))
    cur = _write(tmp_path / "cur.json", _timing(500.0, 2, None, runs=12, warmup=0))
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(base), str(cur), "--strict", "--json")
    doc = json.loads(out)
    assert code == 1
    assert doc["pairs"][0]["environment_differences"] == ["warm-up 30 → 0", "runs per replicate 60 → 12"]
    assert [f["reason"] for f in doc["failures"]] == ["not_like_for_like"]
    assert doc["pairs"][0]["baseline"]["warmup"] == 30 and doc["pairs"][0]["current"]["warmup"] == 0
    assert "not like for like (warm-up 30 → 0; runs per replicate 60 → 12)" in err
    # the same procedure: like for like
    same = _write(tmp_path / "same.json", _timing(500.0, 3, None, runs=60, warmup=30))
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(base), str(same), "--strict", "--json")
    assert code == 0 and json.loads(out)["pairs"][0]["environment_differences"] == []
    # trtexec counts its own runs (--iterations is a minimum): only the warm-up is its procedure
    tb = _write(tmp_path / "tb.json", _timing(500.0, 4, None, runs=60, warmup=200, backend="trtexec"))
    tc = _write(tmp_path / "tc.json", _timing(500.0, 5, None, runs=80, warmup=200, backend="trtexec"))
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(tb), str(tc), "--strict", "--json")
    assert code == 0 and json.loads(out)["pairs"][0]["environment_differences"] == []


# 01: the clock, and --max-age


def test_a_record_from_the_future_blames_the_clock(monkeypatch, capsys, tmp_path: Path) -> None:
    """A baseline from a board whose clock ran ahead failed every later result as stale, blaming a
    failed bench; a current one from the future passed --strict without a word."""
    ahead = _write(tmp_path / "ahead.json", _timing(500.0, 1, _at(timedelta(days=39))))
    now = _write(tmp_path / "now.json", _timing(500.0, 2, _at(-timedelta(minutes=1))))
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(ahead), str(now), "--strict", "--json")
    doc = json.loads(out)
    assert code == 1
    assert [f["reason"] for f in doc["failures"]] == ["future"] and doc["future"] == ["now"]
    assert "baseline measured_at" in err and "after this machine's clock" in err and "a clock is wrong" in err
    assert "not newer than its baseline" not in err and doc["stale"] == []
    # the current side from the future: a warning, and a failure under --strict only
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(now), str(ahead))
    assert code == 0 and "current measured_at" in err and "(--strict exits 1)" in err
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(now), str(ahead), "--strict")
    assert code == 1 and "a result dated after this machine's clock" in err.splitlines()[-1]
    # within the skew allowance (two clocks minutes apart): nothing said
    near = _write(tmp_path / "near.json", _timing(500.0, 3, _at(timedelta(minutes=5))))
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(now), str(near), "--strict")
    assert code == 0 and err == ""


def test_max_age_fails_a_leftover_current_result(monkeypatch, capsys, tmp_path: Path) -> None:
    """Week 3 of the weekly recipe: the bench failed and left week 2's result, newer than week 1's
    baseline, and --strict passed it. --max-age 8d fails it (too_old), with or without --strict."""
    week1 = _write(tmp_path / "base" / "m.json", _timing(500.0, 1, _at(-timedelta(days=14))))
    week2 = _write(tmp_path / "cur" / "m.json", _timing(500.0, 2, _at(-timedelta(days=7, hours=1))))
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(week1.parent), str(week2.parent), "--strict")
    assert code == 0  # no limit asked: as before
    code, out, err = run_cli(
        monkeypatch, capsys, "compare", str(week1.parent), str(week2.parent), "--max-age", "6d", "--json"
    )
    doc = json.loads(out)
    assert code == 1 and doc["too_old"] == ["m"] and doc["max_age_s"] == 6 * 86400
    assert [f["reason"] for f in doc["failures"]] == ["too_old"]
    assert "more than --max-age 6.0 days" in err
    code, _, err = run_cli(
        monkeypatch, capsys, "compare", str(week1), str(week2), "--max-age", "8d", "--strict"
    )
    assert code == 0 and err == ""
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(week1), str(week2), "--max-age", "36h")
    assert code == 1 and err.splitlines()[-1].startswith("FAILED: 1 pair(s) whose current result is older")
    # a current result that records no time cannot show its age
    undated = _write(tmp_path / "undated.json", _timing(500.0, 3, None))
    report = compare_paths(week1, undated, max_age=timedelta(days=8))
    assert "records no measured_at" in report.pairs[0].too_old
    # a duration that is none: one line, exit 2
    code, _, err = run_cli(monkeypatch, capsys, "compare", str(week1), str(week2), "--max-age", "soon")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--max-age 'soon'" in err


def test_parse_duration() -> None:
    from deployopt.regression import parse_duration  # new with --max-age

    assert parse_duration("8d") == timedelta(days=8)
    assert parse_duration("36h") == timedelta(hours=36)
    assert parse_duration("90m") == timedelta(minutes=90)
    assert parse_duration("2w") == timedelta(weeks=2)


# 04: the deployopt that wrote each side


def test_every_record_names_its_deployopt_and_compare_notes_a_difference(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    """A baseline months older than the tool comparing it could not say which deployopt wrote it."""
    from deployopt import __version__, environment

    assert environment.collect("ort")["deployopt"] == __version__
    old, new = _timing(500.0, 1, None), _timing(500.0, 2, None)
    old.environment, new.environment = {"deployopt": "0.1.0"}, {"deployopt": "0.2.0"}
    base, cur = _write(tmp_path / "base.json", old), _write(tmp_path / "cur.json", new)
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(base), str(cur), "--strict", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["pairs"][0]["environment_differences"] == []  # a note, not a failure
    assert any("deployopt 0.1.0 (baseline) and 0.2.0 (current)" in n for n in doc["pairs"][0]["notes"])
    new.environment = {}  # a side that did not record it: nothing said
    _write(tmp_path / "cur.json", new)
    code, out, _ = run_cli(monkeypatch, capsys, "compare", str(base), str(cur), "--json")
    assert json.loads(out)["pairs"][0]["notes"] == []


def test_the_deployopt_version_is_not_in_the_layer_cache_key() -> None:
    """Recording deployopt's version in every environment must not re-key the layer cache: the
    same device and libraries keep their tables across a deployopt upgrade."""
    from deployopt.environment import collect
    from deployopt.lut import device_fingerprint

    env = collect("ort", device="CPUExecutionProvider")
    assert env["deployopt"]
    without = {k: v for k, v in env.items() if k != "deployopt"}
    assert device_fingerprint("ort", env) == device_fingerprint("ort", without)
    assert device_fingerprint("ort", env) == device_fingerprint("ort", dict(env, deployopt="9.9.9"))
