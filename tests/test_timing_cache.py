"""The TensorRT timing cache shared by a run's builds: `optimize` gives every engine it builds (the
candidates, the per-layer sweep's convs) one cache, of the run's own by default or the user's
`--timing-cache FILE`, so a layer shape's tactics are timed once; `bench` and `profile` take the
option too. Local trtexec is tests/test_trtexec_backend.py's stand-in binary; the board is
tests/test_tensorrt_remote.py's stand-in (its runner builds with the fake TensorRT, whose timing
cache counts the builds that wrote it). No real TensorRT, trtexec or Jetson.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from cli_runner import run_cli
from test_optimize import DesignedSession
from test_optimize_remote import optimize_remote, two_convs
from test_tensorrt_remote import HOST, play_the_board
from test_trtexec_backend import fake, trtexec_that  # noqa: F401  (fake: the stand-in trtexec fixture)

from deployopt.backends.base import MeasureOptions
from deployopt.backends.tensorrt_remote import runner_flags
from deployopt.backends.trtexec import build_command
from deployopt.optimize import OptimizeConfig, optimize
from deployopt.remote import board_timing_cache

#: The board these tests play is this machine: its /tmp/deployopt-trtexec and deployopt-runner folders
#: are every such test's, and a run at work in one (optimize --remote) is what bench's and optimize's
#: look for other runs warns of. One xdist worker runs them all, in turn (--dist loadgroup).
pytestmark = pytest.mark.xdist_group("board")

M, OUT = Path("/m/model.onnx"), Path("/w/model")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


# ------------------------------------------------------------------ pure: where the cache goes


def test_trtexec_before_8_gets_no_timing_cache_flag() -> None:
    """--timingCacheFile came with TensorRT 8.0 (JetPack 4.6 has 8.2); 7.x's trtexec would refuse
    the unknown flag and fail every build."""
    opts = MeasureOptions(extra={"timing_cache": "/c/t.cache"})
    assert "--timingCacheFile=/c/t.cache" in build_command("trtexec", M, OUT, opts, "8.0.1")
    assert not any("timingCache" in a for a in build_command("trtexec", M, OUT, opts, "7.1.3"))


def test_the_board_keeps_a_named_cache_in_the_shared_folder_and_a_run_cache_in_the_run_folder() -> None:
    root, run = PurePosixPath("/tmp/deployopt-trtexec"), PurePosixPath("/tmp/deployopt-trtexec/optimize-x-1")
    named = MeasureOptions(extra={"timing_cache": "/home/me/caches/orin nx.cache"})
    assert board_timing_cache(named, root, run) == root / "orin_nx.cache"  # kept for the next run
    assert board_timing_cache(named, root, None) == root / "orin_nx.cache"
    own = MeasureOptions(
        extra={"timing_cache": "/tmp/deployopt-work-1/timing.cache", "timing_cache_per_run": True}
    )
    assert board_timing_cache(own, root, run) == run / "timing.cache"  # removed with the run's folder
    assert board_timing_cache(MeasureOptions(), root, run) is None


def test_the_runner_is_given_the_board_path() -> None:
    opts = MeasureOptions(extra={"timing_cache": "deployopt-runner/t.cache"})
    flags = runner_flags(opts, {}, PurePosixPath("e"))
    assert flags[flags.index("--timing-cache") + 1] == "deployopt-runner/t.cache"
    assert "--timing-cache" not in runner_flags(MeasureOptions(), {}, PurePosixPath("e"))


# ------------------------------------------------------------------ optimize, local trtexec


def log_trtexec_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Wrap the stand-in trtexec so that every build's arguments are one line of the returned log."""
    log = tmp_path / "trtexec_calls.log"
    inner = os.environ["DEPLOYOPT_TRTEXEC"]
    trtexec_that(monkeypatch, tmp_path, f'echo "$*" >> "{log}"\nexec "{inner}" "$@"')
    return log


def cache_flags(log: Path) -> list[str]:
    """Each build's --timingCacheFile value ('' for a build without one)."""
    builds = [shlex.split(ln) for ln in log.read_text().splitlines() if "--onnx=" in ln]
    return [
        next((a.split("=", 1)[1] for a in args if a.startswith("--timingCacheFile=")), "") for args in builds
    ]


@pytest.mark.slow
def test_optimize_trtexec_builds_share_one_cache(
    fake: dict[str, Path],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every build of a run (candidates and the sweep's convs) names the same cache: by default one
    in the run's work folder (gone with it), with --timing-cache the user's file; --no-timing-cache
    none at all. report.md says which."""
    log = log_trtexec_calls(tmp_path, monkeypatch)
    model = two_convs(tmp_path / "host" / "net.onnx")
    argv = ["optimize", str(model), "--target", "h200", "--backend", "trtexec", "--max-evals", "4",
            "--sweep-runs", "2", "--runs", "8"]  # fmt: skip

    code, _, err = run_cli(monkeypatch, capsys, *argv, "-o", str(tmp_path / "own"))
    assert code == 0, err
    # the sweep's convs and the candidates alike; the confirmation rounds' rebuilds (round-up-to-8
    # against the input: a rebuild of each per round) take none, so a rebuild is free to choose again
    caches = [c for c in cache_flags(log) if c]
    assert len(caches) > 2 and len(set(caches)) == 1
    assert len(cache_flags(log)) - len(caches) in (0, 2, 4)  # rounds as --max-evals leaves them
    own = Path(caches[0])
    assert own.name == "timing.cache" and own.parent.name.startswith("deployopt-work-")
    assert not own.parent.exists()  # the run's work folder, cache included, is gone
    report = (tmp_path / "own" / "report.md").read_text()
    assert "TensorRT timing cache: one of this run's own, removed at the end" in report
    assert "shared by every build but the confirmation rounds'" in report

    log.unlink()
    kept = tmp_path / "caches" / "h200.cache"  # its folder does not exist yet: made for trtexec
    code, _, err = run_cli(
        monkeypatch, capsys, *argv, "--timing-cache", str(kept), "-o", str(tmp_path / "kept")
    )
    assert code == 0, err
    assert set(cache_flags(log)) - {""} == {str(kept)} and kept.parent.is_dir()  # "": confirmation
    assert f"TensorRT timing cache: {kept} (kept)" in (tmp_path / "kept" / "report.md").read_text()

    log.unlink()
    code, _, err = run_cli(monkeypatch, capsys, *argv, "--no-timing-cache", "-o", str(tmp_path / "none"))
    assert code == 0, err
    assert set(cache_flags(log)) == {""}
    assert "TensorRT timing cache: none" in (tmp_path / "none" / "report.md").read_text()


class CacheRecordingSession(DesignedSession):
    """tests/test_optimize.py's stand-in with a known optimum (so the confirmation rounds run), given
    a timing cache as optimize's own sessions are; it records the cache each build was given."""

    def __init__(self) -> None:
        self.options = MeasureOptions(extra={"timing_cache": "/w/timing.cache", "timing_cache_per_run": True})
        self.caches: list[str | None] = []

    def measure(self, path: Path) -> Any:
        self.caches.append(self.options.extra.get("timing_cache"))
        return super().measure(path)


@pytest.mark.slow
def test_the_confirmation_rounds_rebuild_without_the_cache(
    zoo_model_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """With the cache a rebuild takes every tactic of the first build, so the rounds that check the
    answer against the best baseline on fresh builds would not see what a build of the user's own
    does: they build without it, and the search's builds before and after keep it."""
    session = CacheRecordingSession()
    given = session.options
    cfg = OptimizeConfig(
        model_path=zoo_model_path("vgg16_pruned_b4"), target="h200", sms=8, outdir=tmp_path / "out",
        max_candidates=16, fidelity_samples=1, cache_root=tmp_path / "lut", backend="model", plots=False,
    )  # fmt: skip
    res = optimize(cfg, session=session)
    labels = [e.label for e in res.evaluations]
    assert any("(confirm" in label for label in labels) and res.report["confirmation"]["rounds"] == 2
    assert len(session.caches) == len(labels)
    assert [c for c, label in zip(session.caches, labels) if "(confirm" in label] == [None] * 4
    assert {c for c, label in zip(session.caches, labels) if "(confirm" not in label} == {"/w/timing.cache"}
    assert session.options is given  # the session's own options again


# ------------------------------------------------------------------ optimize and bench on the board


def cache_builds(path: Path) -> int:
    """How many builds wrote the fake TensorRT's timing cache (it counts them)."""
    return int(path.read_text().rsplit("builds=", 1)[1])


def runner_builds(log: Path) -> list[list[str]]:
    """The runner calls in the stand-in ssh log that build (a candidate's, a sweep batch's)."""
    calls = [shlex.split(ln) for ln in log.read_text().splitlines() if "/runner.py " in ln]
    return [args for args in calls if "--engine-dir" in args]


@pytest.mark.slow
def test_optimize_remote_runner_builds_share_the_runs_cache_and_a_named_one_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the board every runner (a candidate's, each sweep batch's) reads and updates one cache: by
    default in the run's own folder, removed at the end; a named one in the runner's shared folder,
    where a second run starts from what the first timed (the fake cache counts every build)."""
    log, home = play_the_board(tmp_path, monkeypatch)
    model = two_convs(tmp_path / "host" / "net.onnx")
    code, _, err = optimize_remote(monkeypatch, capsys, model, tmp_path / "own", "--target", "agx-orin-64gb")
    assert code == 0, err
    # the confirmation rounds' rebuilds (round-up-to-8 against the input) take no cache
    runs = [args for args in runner_builds(log) if "--timing-cache" in args]
    assert len(runs) > 2 and any("--batch-dir" in args for args in runs)
    assert len(runner_builds(log)) - len(runs) in (0, 2, 4)  # rounds as --max-evals leaves them
    caches = {args[args.index("--timing-cache") + 1] for args in runs}
    (cache,) = caches
    assert cache.startswith("deployopt-runner/optimize-net-") and cache.endswith("/timing.cache")
    assert not (home / cache).exists()  # removed with the run's folder

    log.unlink()
    named = ["--timing-cache", str(tmp_path / "host" / "orin.cache")]
    code, _, err = optimize_remote(
        monkeypatch, capsys, model, tmp_path / "first", "--target", "agx-orin-64gb", *named
    )
    assert code == 0, err
    kept = home / "deployopt-runner" / "orin.cache"
    first = cache_builds(kept)
    # the candidates' (the sweep's convs are in the layer cache now), not the confirmation rounds'
    runs = [args for args in runner_builds(log) if "--timing-cache" in args]
    assert first == len(runs) >= 2 and not any("--batch-dir" in args for args in runs)
    assert not (tmp_path / "host" / "orin.cache").exists()  # the board keeps it, not the host
    report = (tmp_path / "first" / "report.md").read_text()
    assert f"TensorRT timing cache: {named[1]} (on the board, kept as orin.cache)" in report
    code, _, err = optimize_remote(
        monkeypatch, capsys, model, tmp_path / "second", "--target", "agx-orin-64gb", *named
    )
    assert code == 0, err
    assert cache_builds(kept) == 2 * first  # the second run began from the first's cache


def test_bench_remote_runner_keeps_a_named_cache_on_the_board(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log, home = play_the_board(tmp_path, monkeypatch)
    model = two_convs(tmp_path / "host" / "net.onnx")
    argv = ["bench", str(model), "--backend", "tensorrt", "--remote", HOST, "--runs", "8", "--warmup", "1",
            "--timing-cache", str(tmp_path / "nano.cache")]  # fmt: skip
    code, _, err = run_cli(monkeypatch, capsys, *argv)
    assert code == 0, err
    (run,) = [shlex.split(ln) for ln in log.read_text().splitlines() if "/runner.py " in ln and "--out" in ln]
    assert run[run.index("--timing-cache") + 1] == "deployopt-runner/nano.cache"
    assert run[run.index("--dtype") + 1] == "fp16"  # bench's default on TensorRT: what deploys
    assert cache_builds(home / "deployopt-runner" / "nano.cache") == 1
    code, _, err = run_cli(monkeypatch, capsys, *argv, "--dtype", "fp32")  # another engine, same cache
    assert code == 0, err
    assert cache_builds(home / "deployopt-runner" / "nano.cache") == 2


# ------------------------------------------------------------------ one-line refusals


#: optimize on the wave model, which builds no engine (the options are added after)
OPTIMIZE_MODEL = ["optimize", "{model}", "--target", "nano", "--backend", "model", "-o", "{tmp}/o"]
NOT_TENSORRT = "builds no TensorRT engines (a timing cache is for --backend tensorrt or trtexec)"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "{model}", "--backend", "ort", "--timing-cache", "{tmp}/t.cache"],
         f"error: --timing-cache: backend 'ort' {NOT_TENSORRT}"),
        ([*OPTIMIZE_MODEL, "--timing-cache", "{tmp}/t.cache"],
         f"error: --timing-cache: backend 'model' {NOT_TENSORRT}"),
        ([*OPTIMIZE_MODEL, "--no-timing-cache"], f"error: --no-timing-cache: backend 'model' {NOT_TENSORRT}"),
        ([*OPTIMIZE_MODEL, "--timing-cache", "{tmp}/t.cache", "--no-timing-cache"],
         "error: --timing-cache and --no-timing-cache exclude each other"),
        (["bench", "{tmp}/net.engine", "--backend", "trtexec", "--timing-cache", "{tmp}/t.cache"],
         "error: --timing-cache: net.engine is a prebuilt engine, timed as it was built: nothing is "
         "built, so no tactic is timed; give the ONNX model to build with the cache"),
        (["bench", "{model}", "--backend", "trtexec", "--remote", HOST, "--timing-cache", "{tmp}"],
         "error: cannot write {tmp}: it is a folder; give a file path"),
    ],
    ids=["bench-ort", "optimize-model", "optimize-model-off", "both", "engine", "folder"],
)  # fmt: skip
def test_refusals_are_one_line(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = two_convs(tmp_path / "net.onnx")
    (tmp_path / "net.engine").write_bytes(b"not really an engine")
    fill = {"model": str(model), "tmp": str(tmp_path)}
    code, out, err = run_cli(monkeypatch, capsys, *(a.format(**fill) for a in argv))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [message.format(**fill)]
    assert not (tmp_path / "t.cache").exists()
