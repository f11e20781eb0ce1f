"""jetson/runner.py: stays Python 3.6-compatible, parses its arguments, and computes the same
statistics as deployopt.timing (its JSON is read back with load_runner_result)."""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import jetson_sysfs_fake as sysfs_fake
import numpy as np
import pytest
from scripts import load_script

from deployopt.backends.tensorrt import load_runner_result
from deployopt.timing import CI_MIN_RUNS, Timing, bootstrap_median_ci

RUNNER = Path(__file__).resolve().parents[1] / "jetson" / "runner.py"
SRC = RUNNER.read_text()


runner = load_script(RUNNER, "jetson_runner")


# ------------------------------------------------------------------ Python 3.6 compatibility


def test_vermin_minimum_version_at_most_36() -> None:
    exe = Path(sys.executable).parent / "vermin"
    vermin = str(exe) if exe.is_file() else shutil.which("vermin")
    if vermin is None:
        pytest.skip("vermin not installed (pip install vermin; it belongs in the dev extra)")
    proc = subprocess.run(
        [vermin, "-t=3.6-", "--no-tips", "--violations", str(RUNNER)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    full = subprocess.run(
        [vermin, "--no-tips", str(RUNNER)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    m = re.search(r"Minimum required versions: (\d+)\.(\d+)", full.stdout)
    assert m is not None, full.stdout
    assert (int(m.group(1)), int(m.group(2))) <= (3, 6)


def test_parses_as_python36() -> None:
    ast.parse(SRC, feature_version=(3, 6))


def test_no_constructs_newer_than_36() -> None:
    tree = ast.parse(SRC)
    for node in ast.walk(tree):
        assert not isinstance(node, ast.NamedExpr), "walrus needs 3.8"
        if isinstance(node, ast.ImportFrom):
            assert node.module != "__future__", "from __future__ import annotations needs 3.7"
            assert node.module != "dataclasses", "dataclasses need 3.7"
        if isinstance(node, ast.Import):
            assert all(a.name != "dataclasses" for a in node.names), "dataclasses need 3.7"
        if isinstance(node, ast.keyword):
            assert node.arg not in ("capture_output", "text"), f"subprocess {node.arg}= needs 3.7"
    assert not re.search(r"f[\"'][^\"']*\{[^{}]*=\}", SRC), "f-string '=' needs 3.8"
    assert "breakpoint(" not in SRC


# ------------------------------------------------------------------ command line


def test_help_runs() -> None:
    proc = subprocess.run([sys.executable, str(RUNNER), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for flag in ("--dtype", "--runs", "--warmup", "--shapes", "--per-layer", "--calib-npy", "--env-only"):
        assert flag in proc.stdout


def test_arguments() -> None:
    args = runner.build_parser().parse_args(
        ["m.onnx", "--dtype", "int8", "--runs", "7", "--shapes", "x:2x3x4x4"]
    )
    assert (args.model, args.dtype, args.runs, args.warmup, args.shapes) == (
        "m.onnx",
        "int8",
        7,
        20,
        "x:2x3x4x4",
    )


README = RUNNER.with_name("README.md")


def _source_flags() -> set[str]:
    """Every option string passed to an `add_argument(...)` call in runner.py."""
    flags = set()
    for node in ast.walk(ast.parse(SRC)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags |= {
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
            }
    return flags


def _readme_flag_rows() -> dict[str, list[str]]:
    """jetson/README.md's 'Every flag' table: each flag (or `model`) named in a row's first cell →
    that row's cells."""
    section = README.read_text().split("## 5. Every flag", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        for name in re.findall(r"`(-{1,2}[a-z][\w-]*|model)\b", cells[0]):
            rows[name] = cells
    return rows


def test_every_runner_flag_is_documented_in_the_readme() -> None:
    """A flag added to runner.py without a row in jetson/README.md fails here, and so does a row for
    a flag that no longer exists; the documented defaults are the parser's."""
    parser = runner.build_parser()
    parser_flags = {s for a in parser._actions for s in a.option_strings}
    assert _source_flags() | {"-h", "--help"} == parser_flags  # the AST scan sees every add_argument
    rows = _readme_flag_rows()
    documented = set(rows) - {"model"}
    assert sorted(parser_flags - documented) == [], "undocumented in jetson/README.md section 5"
    assert sorted(documented - parser_flags) == [], "documented but not a runner.py flag"
    assert [a.dest for a in parser._actions if not a.option_strings] == ["model"] and "model" in rows
    for action in parser._actions:
        default = action.default
        if action.option_strings and default not in (None, False, "", argparse.SUPPRESS):
            assert f"`{default}`" in rows[action.option_strings[-1]][1], (action.option_strings, default)


def test_errors_are_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(tmp_path / "absent.onnx")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"error: model not found: {tmp_path / 'absent.onnx'}\n"
    assert runner.main([str(RUNNER), "--runs", "0"]) == 2


def test_timing_inputs_are_the_hosts_random_values_in_each_inputs_type() -> None:
    """The runner fed an integer input zeros, a blank picture where the host's backends timed random
    pixels (fidelity.random_values): the same ranges now, in the input's own type."""
    from deployopt.fidelity import RANDOM_INT_RANGE, random_range

    assert runner.RANDOM_INT_RANGE == RANDOM_INT_RANGE
    rng = np.random.RandomState(0)
    for dtype in (np.uint8, np.int8, np.int32, np.int64, np.bool_):
        x = runner.random_input(rng, (4, 3, 16, 16), dtype)
        assert x.dtype == dtype and (int(x.min()), int(x.max())) == random_range(dtype), dtype
    x = runner.random_input(rng, (2, 8), np.float16)
    assert x.dtype == np.float16 and x.std() > 0.5


def test_run_counts_have_the_hosts_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    """The board refuses what `deployopt bench` refuses, with the same words."""
    from deployopt.timing import MAX_RUNS

    assert runner.MAX_RUNS == MAX_RUNS
    for flags, message in (
        (["--runs", str(MAX_RUNS + 1)], f"--runs {MAX_RUNS + 1}: must be between 1 and 100,000"),
        (["--warmup", "-1"], "--warmup -1: must be between 0 and 100,000"),
    ):
        assert runner.main([str(RUNNER), *flags]) == 2
        assert capsys.readouterr().err == f"error: {message}\n"


def test_compare_minimum_matches_the_host() -> None:
    """The runner's note on too few runs names the minimum `deployopt compare` applies by default."""
    from deployopt.regression import DEFAULT_ALPHA
    from deployopt.timing import min_samples

    assert min_samples(DEFAULT_ALPHA) == runner.COMPARE_MIN_RUNS
    assert f"--alpha {DEFAULT_ALPHA:g})" in SRC


def test_env_only_prints_json() -> None:
    proc = subprocess.run(
        [sys.executable, str(RUNNER), "--env-only"], capture_output=True, text=True, timeout=60
    )
    env = json.loads(proc.stdout)
    assert env["runner"] == "jetson/runner.py v1" and env["python"] == ".".join(
        map(str, sys.version_info[:3])
    )


def test_parse_shapes() -> None:
    assert runner.parse_shapes("x:1x3x224x224,mask:1x10") == {"x": [1, 3, 224, 224], "mask": [1, 10]}
    assert runner.parse_shapes("") == {}
    with pytest.raises(runner.RunnerError, match="bad --shapes entry 'x1x3'"):
        runner.parse_shapes("x1x3")
    with pytest.raises(runner.RunnerError, match="must be integers"):
        runner.parse_shapes("x:1xN")
    # the host's --input-shape refuses these too; on the board 0 timed an empty batch, -1 failed as a
    # "data-dependent output shape", and a repeated input silently took its last shape
    for text in ("x:0x3x16x16", "x:-1x3x16x16"):
        with pytest.raises(runner.RunnerError, match=r"\(dimensions must be positive\)$"):
            runner.parse_shapes(text)
    with pytest.raises(runner.RunnerError, match=r"'x' was already given; give each input once$"):
        runner.parse_shapes("x:1x3x16x16,x:1x3x8x8")


def test_no_output_may_be_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--out model.onnx` wrote the result over the model (exit 0), `--save-engine` the engine and
    `--timing-cache` a cache; each is refused before TensorRT is imported, the model untouched."""
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not really a model, but a file this runner would read")
    for flag in ("--out", "--save-engine", "--timing-cache", "--calib-cache"):
        assert runner.main([str(model), flag, str(tmp_path / "." / "m.onnx")]) == 2
        err = capsys.readouterr().err
        dest = tmp_path / "." / "m.onnx"
        assert err == f"error: cannot write {dest}: it is the model this runner reads; give another {flag}\n"
    assert model.read_bytes() == b"not really a model, but a file this runner would read"


def test_a_missing_numpy_is_one_line(tmp_path: Path) -> None:
    """JetPack's python3 lacks numpy until python3-numpy is installed: that was a traceback."""
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    code = (
        "import sys; sys.modules['numpy'] = None; sys.argv = ['runner.py', sys.argv[1]]; "
        f"exec(compile(open({str(RUNNER)!r}).read(), 'runner.py', 'exec'))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(model)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "error: numpy is not importable (on JetPack: sudo apt install python3-numpy)\n"


def test_parse_nvpmodel() -> None:
    assert runner.parse_nvpmodel("NV Power Mode: MODE_15W_2CORE\n2\n") == {
        "nvpmodel": "MODE_15W_2CORE",
        "nvpmodel_id": 2,
    }
    assert runner.parse_nvpmodel(None) == {}


def test_version_dispatch_matches_backend() -> None:
    from deployopt.backends.tensorrt import api_for_version

    for v in ("8.0.1", "8.2.1", "8.4.1", "8.5.2", "8.6.1.6", "10.3.0", "10.16.1"):
        assert runner.api_for_version(v) == api_for_version(v)
    with pytest.raises(runner.RunnerError, match="too old"):
        runner.api_for_version("7.1.3")


VERSIONS = ("8.0.1", "8.2.1", "8.5.2", "8.6.1.6", "10.3.0", "10.16.1", "11.0.0", "11.2", "12.0.1", "")


def test_strong_typing_rule_matches_backend() -> None:
    """The runner's own strongly_typed (it cannot import deployopt) keeps the host's rule."""
    from deployopt.backends.trtexec import strongly_typed

    for v in VERSIONS:
        assert runner.strongly_typed(v) == strongly_typed(v), v


def test_precision_phrase_matches_backend() -> None:
    """`timed` names the precision as the host does; the one deliberate difference is fp16 on
    TensorRT >= 11, where the host types the model itself (fp32 I/O) and the runner takes a model
    typed elsewhere, so it says only that the types come from the model."""
    from deployopt.backends.trtexec import precision_phrase, strongly_typed

    for v in VERSIONS:
        for dtype in ("fp32", "fp16", "int8"):
            board, host = runner.precision_phrase(dtype, v), precision_phrase(dtype, v)
            if dtype == "fp16" and strongly_typed(v):
                assert board == "fp16 as typed in the model (TensorRT 11 strong typing)"
                assert host.startswith("fp16") and host.endswith("(TensorRT 11 strong typing)")
            else:
                assert board == host, (dtype, v)


def test_compare_knows_every_engine_line_the_runner_wrote_before_b70dbfb() -> None:
    """Before b70dbfb the runner said `one forward pass (precision_phrase(--dtype))` of a serialized
    engine; compare reads exactly those clauses as today's (LEGACY_ENGINE_CLAUSES), so the list
    must hold every phrase precision_phrase gives, and today's clause must be the runner's."""
    from deployopt.regression import ENGINE_CLAUSE, LEGACY_ENGINE_CLAUSES

    phrases = {runner.precision_phrase(d, v) for v in VERSIONS for d in ("fp32", "fp16", "int8")}
    assert {f"one forward pass ({p})" for p in phrases} == LEGACY_ENGINE_CLAUSES
    assert ENGINE_CLAUSE == "one forward pass of " + runner.PREBUILT


def test_shapes_syntax_matches_trtexec() -> None:
    """--shapes takes trtexec's syntax, as deployopt writes it for trtexec."""
    from deployopt.backends.trtexec import shapes_arg

    for shapes in ({"input": [1, 3, 224, 224]}, {"x": [2, 3, 32, 32], "mask:0": [2, 10]}, {}):
        assert runner.parse_shapes(shapes_arg(shapes)) == shapes


def test_engine_file_endings_match_compare() -> None:
    """What the runner loads as a serialized engine is what `deployopt compare` calls an engine."""
    from deployopt.prebuilt import ENGINE_SUFFIXES

    for suffix in ENGINE_SUFFIXES:
        assert runner.is_serialized_engine("model" + suffix)
    for name in ("model.onnx", "model.engine.onnx", "engine"):
        assert not runner.is_serialized_engine(name)


def test_layer_table() -> None:
    rows = runner.layer_table({"a": [0.01, 0.03, 0.02], "b": [0.005]}, ["a", "b"])
    assert rows == [
        {
            "name": "a",
            "time_us": pytest.approx(20.0),
            "share": pytest.approx(0.8),
            "runs": 3,
            "iqr_us": pytest.approx(10.0),
        },
        {"name": "b", "time_us": pytest.approx(5.0), "share": pytest.approx(0.2), "runs": 1, "iqr_us": None},
    ]


@pytest.mark.parametrize(
    ("times", "order"),
    [
        ({"a": [0.01, 0.03, 0.02], "b": [0.005]}, ["a", "b"]),
        ({"conv": [0.2, 0.1, 0.9, 0.3], "relu": [0.0, 0.0], "pool": [0.05, 0.07]}, ["relu", "conv", "pool"]),
        ({"only": [0.0]}, ["only"]),  # no time at all: shares of 0, not a division by zero
    ],
)
def test_layer_table_matches_backend(times: dict[str, list[float]], order: list[str]) -> None:
    """The board's per-layer rows are the tensorrt backend's aggregate_layer_times, row for row."""
    from deployopt.backends.tensorrt import aggregate_layer_times

    host = [
        {"name": t.name, "time_us": t.time_us, "share": t.share, "runs": t.extra["runs"], "iqr_us": t.iqr_us}
        for t in aggregate_layer_times(times, order)
    ]
    board = runner.layer_table(times, order)
    assert [r["name"] for r in board] == order and [r["runs"] for r in board] == [r["runs"] for r in host]
    for b, h in zip(board, host):
        assert b["time_us"] == pytest.approx(h["time_us"], rel=1e-12, abs=1e-12)
        assert b["share"] == pytest.approx(h["share"], rel=1e-12, abs=1e-12)
        assert (b["iqr_us"] is None) == (h["iqr_us"] is None)
        assert b["iqr_us"] is None or b["iqr_us"] == pytest.approx(h["iqr_us"], rel=1e-12, abs=1e-12)


# ------------------------------------------------------------------ engine keys
# (an engine is reused only for the same inputs; end to end on the fake TensorRT: test_tensorrt_fake_api.py)


def _key(tmp_path: Path, *argv: str) -> str:
    args = runner.build_parser().parse_args([str(tmp_path / "m.onnx"), *argv])
    return runner.build_key(runner.build_facts(args, "10.3.0", runner.parse_shapes(args.shapes)))


def test_build_key_follows_file_contents_and_build_flags(tmp_path: Path) -> None:
    (tmp_path / "m.onnx").write_bytes(b"model one")
    (tmp_path / "c.calib").write_bytes(b"table one")
    (tmp_path / "d.npy").write_bytes(b"data one")
    base = _key(tmp_path)
    assert base == _key(tmp_path) and len(base) == 64
    # not the build: timing cache, per-layer, CUDA binding, runs, where engines go
    same = ["--timing-cache", "t.bin", "--per-layer", "--cuda", "pycuda", "--runs", "3", "--engine-dir", "e"]
    assert _key(tmp_path, *same) == base
    assert _key(tmp_path, "--calib-cache", str(tmp_path / "c.calib")) == base  # fp16 ignores calibration
    for argv in (["--dtype", "fp32"], ["--workspace-mib", "512"], ["--shapes", "x:2x3x8x8"]):
        assert _key(tmp_path, *argv) != base, argv
    npy = ["--dtype", "int8", "--calib-npy", str(tmp_path / "d.npy")]
    int8 = [*npy, "--calib-cache", str(tmp_path / "c.calib")]
    calibrated = _key(tmp_path, *int8)
    absent = [*npy, "--calib-cache", str(tmp_path / "no")]  # given, not there (yet): not the same as none
    assert len({calibrated, _key(tmp_path, *npy), _key(tmp_path, *absent), _key(tmp_path, *npy[:2])}) == 4
    (tmp_path / "c.calib").write_bytes(b"table two")  # same names, new contents: new keys
    assert _key(tmp_path, *int8) != calibrated
    calibrated = _key(tmp_path, *int8)
    (tmp_path / "d.npy").write_bytes(b"data two")
    assert _key(tmp_path, *int8) != calibrated
    (tmp_path / "m.onnx").write_bytes(b"model two")
    assert _key(tmp_path) != base


def test_save_engine_sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FILE.key says what FILE was built from; FILE without it, with another key or an unreadable
    one is not reused; a new engine replaces FILE only after the old FILE.key is gone."""
    engine = tmp_path / "sub" / "m.engine"
    facts = {"dtype": "fp16", "model_sha256": "ab"}
    key = runner.build_key(facts)
    assert not runner.engine_is_current(str(engine), key, True)
    runner.write_engine(str(engine), b"engine one", facts, True)
    assert engine.read_bytes() == b"engine one"
    assert json.loads((tmp_path / "sub" / "m.engine.key").read_text()) == {**facts, "key": key}
    assert runner.engine_is_current(str(engine), key, True)
    assert not runner.engine_is_current(str(engine), runner.build_key({**facts, "dtype": "int8"}), True)
    assert runner.engine_is_current(str(engine), "any", False)  # a cached name carries its key
    for text in ("not json", "[1, 2]", ""):
        (tmp_path / "sub" / "m.engine.key").write_text(text)
        assert not runner.engine_is_current(str(engine), key, True), text
    runner.write_engine(str(engine), b"engine one", facts, True)

    def interrupted(path: str, data: bytes) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "atomic_write", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.write_engine(str(engine), b"engine two", {**facts, "dtype": "int8"}, True)
    assert not (tmp_path / "sub" / "m.engine.key").exists()
    assert not runner.engine_is_current(str(engine), key, True)


def test_missing_calibration_data_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model")
    argv = [str(model), "--dtype", "int8", "--calib-npy", str(tmp_path / "none.npy")]
    assert runner.main(argv) == 2
    assert capsys.readouterr().err == f"error: calibration data not found: {tmp_path / 'none.npy'}\n"


# ------------------------------------------------------------------ statistics agree with deployopt.timing


@pytest.mark.parametrize(
    "samples",
    [
        [100.0],
        [3.0, 1.0, 2.0],
        [10.5, 11.25, 9.75, 12.0],
        list(np.random.default_rng(1).normal(500, 20, 101)),
        list(np.random.default_rng(2).lognormal(3, 0.5, 64)),
    ],
)
def test_statistics_match_timing(samples: list[float]) -> None:
    t = Timing(backend="tensorrt", samples_us=samples)
    assert runner.median(samples) == pytest.approx(t.median_us, rel=1e-12)
    assert runner.iqr(samples) == pytest.approx(t.iqr_us, rel=1e-12, abs=1e-12)
    assert runner.bootstrap_median_ci(samples) == pytest.approx(bootstrap_median_ci(samples), rel=1e-12)


def test_the_bootstrap_draws_in_blocks_and_matches_the_hosts(monkeypatch) -> None:
    """Bug bash: the runner drew one (2000, n) index array, 4.9 GB at --runs 100000 on a Nano's 4 GB;
    the host had drawn in blocks of ~4M indices since the same bug. Both now draw the same blocks
    (200 resamples here, to keep the test short), so their CIs are equal."""
    import deployopt.timing as timing

    monkeypatch.setattr(runner, "BOOTSTRAP_RESAMPLES", 200)
    monkeypatch.setattr(timing, "BOOTSTRAP_RESAMPLES", 200)
    samples = list(np.random.default_rng(3).lognormal(5, 0.2, 100_000))
    real = np.random.default_rng
    draws: list[tuple[int, int]] = []

    class Spy:
        def __init__(self, seed: int) -> None:
            self.rng = real(seed)

        def integers(self, lo: int, hi: int, size: tuple[int, int]) -> np.ndarray:
            draws.append(size)
            return self.rng.integers(lo, hi, size=size)

    monkeypatch.setattr(np.random, "default_rng", Spy)
    ci = runner.bootstrap_median_ci(samples)
    assert sum(r for r, _ in draws) == 200 and max(r * n for r, n in draws) <= 1 << 22
    monkeypatch.setattr(np.random, "default_rng", real)
    assert ci == pytest.approx(bootstrap_median_ci(samples), rel=1e-12)


def test_on_numpy_without_default_rng_the_bootstrap_is_still_numpys(monkeypatch) -> None:
    """JetPack 4.6's numpy 1.13 has no default_rng: the runner resampled in pure Python, 2000 sorts of
    the samples (48 s for 10 000 runs on a desktop CPU). It now draws with RandomState in the same
    blocks: another random stream, so a CI close to the host's, computed by numpy."""
    samples = list(np.random.default_rng(4).normal(500, 20, 2001))
    monkeypatch.delattr(np.random, "default_rng")
    monkeypatch.setattr(runner, "median", lambda values: pytest.fail("resampled in pure Python"))
    lo, hi = runner.bootstrap_median_ci(samples)
    monkeypatch.undo()
    host_lo, host_hi = bootstrap_median_ci(samples)
    assert lo < float(np.median(samples)) < hi
    assert lo == pytest.approx(host_lo, rel=2e-3) and hi == pytest.approx(host_hi, rel=2e-3)


def test_summary_json_is_read_back(tmp_path: Path) -> None:
    samples = [120.0, 118.5, 121.0, 119.0, 150.0]
    out = runner.summarize(samples, 20, "one forward pass (fp16)", {"sms": 8, "nvpmodel": "MODE_15W"})
    assert set(out) >= {
        "backend",
        "median_us",
        "iqr_us",
        "ci95_us",
        "runs",
        "warmup",
        "samples_us",
        "timed",
        "environment",
    }
    path = tmp_path / "result.json"
    path.write_text(json.dumps(out))
    t = load_runner_result(path)
    assert t.backend == "tensorrt" and t.runs == 5 and t.warmup == 20
    assert t.median_us == out["median_us"] == 120.0 and t.iqr_us == out["iqr_us"] == 2.0
    assert t.to_json()["ci95_us"] == pytest.approx(out["ci95_us"])
    assert t.environment == {"sms": 8, "nvpmodel": "MODE_15W"}


def test_the_result_says_when_it_was_measured_as_the_host_writes_it(tmp_path: Path) -> None:
    """The result's "measured_at" is written as deployopt's own results write it (UTC, ISO 8601, to
    the second) and read back, so `deployopt compare` can tell last week's result, left in place by
    a run that failed, from this week's."""
    from datetime import datetime, timedelta, timezone

    from deployopt.timing import measured_now, measured_time

    board, host = runner.measured_now(), measured_now()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", board) and len(board) == len(host)
    assert abs(measured_time(board) - datetime.now(timezone.utc)) < timedelta(seconds=5)
    out = runner.summarize([120.0, 118.5, 121.0], 0, "one forward pass (fp16)", {}, measured_at=board)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(out))
    assert out["measured_at"] == load_runner_result(path).measured_at == board
    assert "measured_at" not in runner.summarize([1.0], 0, "", {})  # none given, none written


@pytest.mark.parametrize(
    "samples", [[431.5], [120.0, 118.5, 121.0], [120.0, 118.5, 121.0, 119.0, 150.0, 122.0]]
)
def test_summary_spread_matches_timing_to_json(samples: list[float]) -> None:
    """The board's JSON and the host's agree on spreads: null for one run, numbers otherwise; the CI
    null below 6 runs (timing.CI_MIN_RUNS), on both."""
    out = runner.summarize(samples, 0, "one forward pass (fp16)", {})
    host = Timing(backend="tensorrt", samples_us=samples).to_json()
    assert (out["iqr_us"] is None) == (host["iqr_us"] is None) == (len(samples) == 1)
    assert (out["ci95_us"] is None) == (host["ci95_us"] is None) == (len(samples) < 6)
    assert runner.CI_MIN_RUNS == CI_MIN_RUNS
    if len(samples) > 1:
        assert out["iqr_us"] == pytest.approx(host["iqr_us"]) and out["ci95_us"] == pytest.approx(
            host["ci95_us"]
        )
    json.dumps(out)  # what the board writes


# ------------------------------------------------------------------ what was timed, clocks: read by compare


def test_the_result_names_the_model_it_timed(tmp_path: Path) -> None:
    """The runner's result records the file and its sha256 as `bench -o` does, so `deployopt compare`
    can tell a wrong pair (another model) from a regression; before, nothing said what was timed."""
    from deployopt.regression import model_identity

    model = tmp_path / "resnet.onnx"
    model.write_bytes(b"onnx bytes")
    ident = runner.model_identity(str(model))
    assert ident == model_identity(model)
    assert runner.model_identity(str(model), ident["sha256"]) == ident  # the build key's hash, reused
    out = runner.summarize(
        [120.0, 118.5, 121.0, 119.0, 150.0], 20, "one forward pass (fp16)", {}, model=ident
    )
    path = tmp_path / "result.json"
    path.write_text(json.dumps(out))
    assert load_runner_result(path).model == ident


CPU_LINE = "cpu{}: Online=1 Governor=schedutil MinFreq=2201600 MaxFreq=2201600 CurrentFreq=2201600"
AGX_ORIN_SHOW = "\n".join(
    ["SOC family:tegra234  Machine:Jetson AGX Orin", "Online CPUs: 0-11"]
    + [CPU_LINE.format(i) for i in range(12)]
    + [
        "GPU MinFreq=1300500000 MaxFreq=1300500000 CurrentFreq=1300500000",
        "EMC MinFreq=204000000 MaxFreq=3199000000 CurrentFreq=3199000000 FreqOverride=1",
        "NV Power Mode: MAXN",
    ]
)


def test_clocks_locked_is_recorded_with_or_without_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, only `jetson_clocks --show` (root) said anything about the clocks, cut to its first 12
    lines: on an AGX Orin (12 CPUs) that cut off the GPU line. devfreq is readable by any user."""
    nvpmodel = "NV Power Mode: MAXN\n0"
    as_root = {("nvpmodel", "-q"): nvpmodel, ("jetson_clocks", "--show"): AGX_ORIN_SHOW}
    monkeypatch.setattr(runner, "_cmd", lambda args, timeout=10: as_root.get(tuple(args)))
    monkeypatch.setattr(runner, "gpu_devfreq", lambda: {})
    env = runner.board_environment()
    assert env["clocks_locked"] is True and env["nvpmodel"] == "MAXN"
    assert env["jetson_clocks"][-2].startswith("GPU MinFreq=1300500000") and len(env["jetson_clocks"]) == 14
    user = {("nvpmodel", "-q"): nvpmodel}  # jetson_clocks --show fails without root
    monkeypatch.setattr(runner, "_cmd", lambda args, timeout=10: user.get(tuple(args)))
    devfreq = {"gpu_devfreq": "17000000.ga10b", "gpu_min_freq_mhz": 306.0, "gpu_max_freq_mhz": 1300.5}
    monkeypatch.setattr(runner, "gpu_devfreq", lambda: dict(devfreq))
    assert runner.board_environment()["clocks_locked"] is False
    monkeypatch.setattr(runner, "gpu_devfreq", lambda: {})
    assert "clocks_locked" not in runner.board_environment()  # nothing says: not guessed


def test_clocks_locked_follows_the_rule_compare_reads_older_results_by() -> None:
    from deployopt.clocks import clocks_locked

    show = AGX_ORIN_SHOW.splitlines()
    for env in (
        {"gpu_min_freq_mhz": 1300.5, "gpu_max_freq_mhz": 1300.5},
        {"gpu_min_freq_mhz": 306.0, "gpu_max_freq_mhz": 1300.5, "jetson_clocks": show},
        {"jetson_clocks": show},
        {"jetson_clocks": [line.replace("MinFreq=1300500000", "MinFreq=306000000") for line in show]},
        {"nvpmodel": "MAXN"},
    ):
        assert runner.clocks_locked(env) == clocks_locked(env), env


def test_calib_npy_that_is_not_an_array_of_finite_numbers_is_one_line(tmp_path: Path) -> None:
    """--calib-npy went straight into np.load(...).astype: text or a pickle was a ValueError
    traceback, an .npz an AttributeError, and NaN/inf reached TensorRT's calibration histograms."""
    text = tmp_path / "text.npy"
    text.write_text("1 2 3\n")
    pickled = tmp_path / "pickled.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    archive = tmp_path / "a.npz"
    np.savez(archive, x=np.zeros((2, 3), np.float32))
    nan = tmp_path / "nan.npy"
    np.save(nan, np.array([[0.0, np.nan]], np.float32))
    big = tmp_path / "big.npy"
    np.save(big, np.array([[1e300]], np.float64))
    words = tmp_path / "words.npy"
    np.save(words, np.array(["a", "b"]))
    cases = {
        text: "not a NumPy .npy array",
        pickled: "not a NumPy .npy array",
        archive: "an .npz archive",
        nan: "holds NaN or infinite values",
        big: "holds NaN or infinite values",
        words: r"holds <U1 values of shape \[2\], not an array of numbers",
    }
    for path, message in cases.items():
        with warnings.catch_warnings():  # numpy's overflow warning would be a second stderr line
            warnings.simplefilter("error")
            with pytest.raises(runner.RunnerError, match=rf"^--calib-npy {re.escape(str(path))}: {message}"):
                runner.load_calib_npy(str(path))
    good = tmp_path / "good.npy"
    np.save(good, np.arange(6, dtype=np.uint8).reshape(2, 3))
    loaded = runner.load_calib_npy(str(good))
    assert loaded.dtype == np.float32 and loaded.tolist() == [[0, 1, 2], [3, 4, 5]]


# ------------------------------------------------------------------ the timed loop: clock, heat, over-current
# (fake Nano and Orin trees, tests/jetson_sysfs_fake.py; never run on a Jetson)


def _state(root: Path) -> dict:
    return runner.board_state(str(root / "sys"), str(root / "proc"))


NANO_TEMPS = {
    "AO-therm": 40.5,
    "CPU-therm": 40.5,
    "GPU-therm": 41.5,
    "PLL-therm": 38.0,
    "PMIC-Die": 100.0,
    "thermal-fan-est": 41.0,
}


def test_board_state_reads_a_nano_like_tree(tmp_path: Path) -> None:
    """The GPU's devfreq clock in Hz, every thermal zone in °C, and the soctherm over-current
    interrupt's count from /proc/interrupts (the Nano has no soctherm_oc hwmon)."""
    state = _state(sysfs_fake.nano(tmp_path, edp_interrupts=7))
    assert state == {
        "devfreq": "57000000.gpu",
        "clock": {"cur_hz": 921_600_000, "min_hz": 921_600_000, "max_hz": 921_600_000},
        "temperatures_c": NANO_TEMPS,
        "oc_counts": {"soctherm_edp": 7},
        "oc_enabled": {},
    }


@pytest.mark.parametrize(("jetpack", "name"), [(5, "17000000.ga10b"), (6, "17000000.gpu")])
def test_board_state_reads_an_orin_like_tree(tmp_path: Path, jetpack: int, name: str) -> None:
    """The GPU's devfreq (not the video engine's, sorted first), and the soctherm_oc hwmon's event
    counters with their throttle switches; the INA3221 hwmon is not an over-current counter."""
    state = _state(
        sysfs_fake.orin(tmp_path, jetpack=jetpack, oc_events=(0, 4, 1), throttle_enabled=(1, 1, 0))
    )
    assert state["devfreq"] == name
    assert state["clock"] == {"cur_hz": 1_300_500_000, "min_hz": 1_300_500_000, "max_hz": 1_300_500_000}
    assert list(state["temperatures_c"]) == [
        "cpu-thermal",
        "gpu-thermal",
        "cv0-thermal",
        "soc0-thermal",
        "tj-thermal",
    ]
    assert state["temperatures_c"]["gpu-thermal"] == 52.0
    assert state["oc_counts"] == {"oc1": 0, "oc2": 4, "oc3": 1}
    assert state["oc_enabled"] == {"oc1": True, "oc2": True, "oc3": False}


def test_board_state_leaves_out_what_it_cannot_read(tmp_path: Path) -> None:
    """Nothing there, unreadable files, words where numbers belong: left out, never an error (the
    reading sits right next to the timed loop). Zone 10 sorts after zone 2; a type seen twice
    is keyed by its zone."""
    assert _state(tmp_path / "empty") == {
        "clock": {},
        "temperatures_c": {},
        "oc_counts": {},
        "oc_enabled": {},
    }
    root = sysfs_fake.orin(tmp_path / "odd")
    sys_ = root / "sys"
    (sys_ / "class/devfreq/17000000.ga10b/cur_freq").write_text("N/A\n")
    (sys_ / "class/devfreq/17000000.ga10b/max_freq").unlink()
    (sys_ / "class/thermal/thermal_zone1/temp").write_text("")
    (sys_ / "class/thermal/thermal_zone3/temp").unlink()
    (sys_ / "class/thermal/thermal_zone3/temp").mkdir()  # a read raises IsADirectoryError
    (sys_ / "class/thermal/thermal_zone10").mkdir()
    (sys_ / "class/thermal/thermal_zone10/type").write_text("cpu-thermal\n")
    (sys_ / "class/thermal/thermal_zone10/temp").write_text("61250\n")
    (sys_ / "class/hwmon/hwmon1/oc2_event_cnt").write_text("busy\n")
    (sys_ / "class/hwmon/hwmon1/oc3_throt_en").unlink()
    (root / "proc/interrupts").unlink()
    (root / "proc/interrupts").mkdir()
    state = _state(root)
    assert state["clock"] == {"min_hz": 1_300_500_000}
    assert state["temperatures_c"] == {
        "cpu-thermal": 50.0,
        "cv0-thermal": 49.0,
        "tj-thermal": 52.5,
        "cpu-thermal (thermal_zone10)": 61.25,
    }
    assert state["oc_counts"] == {"oc1": 0, "oc3": 0} and state["oc_enabled"] == {"oc1": True}


def test_edp_interrupts_sums_every_cpu() -> None:
    text = " 85:   3   0   2   0   GICv2  81 Level   soctherm_edp\n 86:   9   9   GICv2  82 Level  other\n"
    assert runner.edp_interrupts(text) == 5
    assert runner.edp_interrupts(" 86:   9   GICv2  82 Level  other\n") is None
    assert runner.edp_interrupts(" 85:   GICv2  81 Level   soctherm_edp\n") is None
    assert runner.edp_interrupts(None) is None


def test_during_run_records_before_and_after(tmp_path: Path) -> None:
    """Two readings around the timed loop become the environment's record: the clock and the
    temperatures before and after, and by how much each over-current counter grew."""
    before = _state(sysfs_fake.nano(tmp_path, edp_interrupts=7))
    after = _state(sysfs_fake.nano(tmp_path, cur_hz=768_000_000, gpu_c=58.0, edp_interrupts=10))
    env = runner.during_run(before, after)
    assert env["gpu_clock_during_run"] == {
        "devfreq": "57000000.gpu",
        "before": {"cur_hz": 921_600_000, "min_hz": 921_600_000, "max_hz": 921_600_000},
        "after": {"cur_hz": 768_000_000, "min_hz": 921_600_000, "max_hz": 921_600_000},
    }
    assert env["temperatures_c"]["before"] == NANO_TEMPS
    assert env["temperatures_c"]["after"]["GPU-therm"] == 58.0
    assert env["oc_events"] == {"soctherm_edp": 3} and "oc_throttle_enabled" not in env
    orin_before = _state(sysfs_fake.orin(tmp_path / "orin", oc_events=(0, 4, 1), throttle_enabled=(1, 1, 0)))
    orin_after = _state(sysfs_fake.orin(tmp_path / "orin", oc_events=(0, 6, 9), throttle_enabled=(1, 1, 0)))
    env = runner.during_run(orin_before, orin_after)
    assert env["oc_events"] == {"oc1": 0, "oc2": 2, "oc3": 8}
    assert env["oc_throttle_enabled"] == {"oc1": True, "oc2": True, "oc3": False}
    assert runner.during_run(_state(tmp_path / "none"), _state(tmp_path / "none")) == {}
    json.dumps(env)  # what the board writes


def _record(tmp_path: Path, board: str, before: dict, after: dict) -> dict:
    """The environment the runner writes for a loop between two fake readings of `board`."""
    make = sysfs_fake.nano if board == "nano" else sysfs_fake.orin
    first = _state(make(tmp_path / board, **before))
    return runner.during_run(first, _state(make(tmp_path / board, **after)))


STEADY_AND_THROTTLED = [
    # (board, reading before, reading after, what held the clock down or None)
    ("nano", {}, {"gpu_c": 63.0}, None),  # warmer, clock steady: not judged
    (
        "nano",
        {"edp_interrupts": 2},
        {"edp_interrupts": 5},
        "over-current throttling: 3 soctherm_edp event(s)",
    ),
    (
        "nano",
        {},
        {"cur_hz": 768_000_000},
        "a cap below the locked clock: 768 of 921.6 MHz right after the timed loop",
    ),
    ("orin", {}, {"gpu_c": 71.0}, None),
    ("orin", {"oc_events": (1, 4, 0)}, {"oc_events": (1, 6, 0)}, "over-current throttling: 2 oc2 event(s)"),
    # oc3 fired, but the board said its throttling is off: not a slowdown
    (
        "orin",
        {"oc_events": (0, 0, 1), "throttle_enabled": (1, 1, 0)},
        {"oc_events": (0, 0, 5), "throttle_enabled": (1, 1, 0)},
        None,
    ),
    # DVFS (not locked): a clock below the maximum is the governor, not a slowdown
    (
        "orin",
        {"min_hz": 306_000_000, "cur_hz": 1_300_500_000},
        {"min_hz": 306_000_000, "cur_hz": 624_750_000},
        None,
    ),
    (
        "orin",
        {"min_hz": 306_000_000},
        {"min_hz": 306_000_000, "max_hz": 918_000_000, "cur_hz": 918_000_000},
        "a lowered devfreq ceiling: 1300.5 → 918 MHz during the loop",
    ),
    (
        "orin",
        {"cur_hz": 1_032_750_000},
        {"cur_hz": 1_300_500_000, "oc_events": (0, 0, 1)},
        "over-current throttling: 1 oc3 event(s), "
        "a cap below the locked clock: 1032.75 of 1300.5 MHz right after the warm-up",
    ),
]


@pytest.mark.parametrize(("board", "before", "after", "held"), STEADY_AND_THROTTLED)
def test_the_host_reads_the_runners_record_by_its_rule(
    tmp_path: Path, board: str, before: dict, after: dict, held: str | None
) -> None:
    """deployopt.clocks.held_down_phrase (behind bench's warning, compare's flag and optimize's
    report) judges what the runner recorded: an over-current counter that grew with throttling on,
    a locked clock read below its lock, a lowered devfreq ceiling; warmth alone is not judged."""
    from deployopt.clocks import held_down_phrase

    assert held_down_phrase(_record(tmp_path, board, before, after)) == held


def test_the_host_rule_reads_old_and_malformed_records_as_nothing() -> None:
    """Results written before the record (or hand-edited ones) never raise; a record without
    the devfreq minimum falls back on the environment's clocks_locked."""
    from deployopt.clocks import held_down_phrase, jetson_held_down

    assert held_down_phrase({"clocks_locked": True, "nvpmodel": "MAXN"}) is None
    for bad in (
        {"oc_events": "lots"},
        {"oc_events": {"oc1": True, "oc2": -4, "oc3": "2"}},
        {"gpu_clock_during_run": {"before": 1, "after": {}}},
        {"gpu_clock_during_run": {"before": {"cur_hz": "x", "max_hz": None}, "after": {"cur_hz": 5}}},
        {"gpu_clock_during_run": []},
    ):
        assert jetson_held_down(bad) == [], bad
    clock = {"before": {"cur_hz": 900, "max_hz": 1000}, "after": {"cur_hz": 1000, "max_hz": 1000}}
    assert jetson_held_down({"gpu_clock_during_run": clock}) == []  # locked? nothing says
    assert jetson_held_down({"gpu_clock_during_run": clock, "clocks_locked": True}) == [
        "a cap below the locked clock: 0.0009 of 0.001 MHz right after the warm-up"
    ]


def _runner_result(path: Path, median: float, env: dict, seed: int) -> Path:
    """A runner result as the board writes it (runner.summarize), 200 samples."""
    rng = np.random.default_rng(seed)
    samples = list(median + rng.normal(0.0, median * 0.002, 200))
    model = {"file": "resnet.onnx", "sha256": "ab" * 32}
    out = runner.summarize(samples, 50, "one forward pass (fp16)", env, model=model)
    path.write_text(json.dumps(out))
    return path


def test_compare_flags_a_runner_result_whose_board_throttled(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The same Orin, the same setup: the current run's board cut its clock for over-current in
    the middle of the loop, so its 4 % is not the model's. compare flags that side like a setup
    difference (row and warning), --strict exits 1; the steady pair is judged as before."""
    from cli_runner import run_cli

    setup = {"board": "Jetson AGX Orin", "nvpmodel": "MAXN", "clocks_locked": True, "tensorrt": "8.5.2"}
    steady = _record(tmp_path / "a", "orin", {}, {"gpu_c": 60.0})
    throttled = _record(tmp_path / "b", "orin", {"oc_events": (0, 0, 3)}, {"oc_events": (0, 0, 5)})
    base = _runner_result(tmp_path / "base.json", 500.0, {**setup, **steady}, seed=0)
    same = _runner_result(tmp_path / "same.json", 500.0, {**setup, **steady}, seed=1)
    slow = _runner_result(tmp_path / "slow.json", 520.0, {**setup, **throttled}, seed=2)
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(base), str(same), "--strict")
    assert code == 0 and err == "" and "held down" not in out
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(base), str(slow))
    assert code == 1 and "slower" in out
    assert "current: GPU clock held down by over-current throttling: 2 oc3 event(s)" in " ".join(out.split())
    assert err == (
        "warning: slow: not like for like (current: GPU clock held down by over-current throttling: 2 oc3 "
        "event(s)): the change need not be the model's\n"
    )


def test_compare_notes_a_runner_result_it_cannot_check_for_throttling(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A result of a runner older than its record of the board around the timed loop (a copy left on
    the board by hand) cannot be flagged as throttled, and compare said nothing of it: a throttled
    week read as a regression. Now a note names that side; the exit status is the verdict's."""
    from cli_runner import run_cli

    setup = {"runner": "jetson/runner.py v1", "board": "Jetson AGX Orin", "clocks_locked": True}
    steady = _record(tmp_path / "a", "orin", {}, {"gpu_c": 60.0})
    old = _runner_result(tmp_path / "old.json", 500.0, setup, seed=0)
    new = _runner_result(tmp_path / "new.json", 500.0, {**setup, **steady}, seed=1)
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(old), str(new), "--strict")
    assert code == 0 and "not significant" in out
    assert err == (
        "note: new: baseline: not checked for throttling: this jetson/runner.py result has no record of "
        "the GPU clock or over-current counters around its timed loop (a runner older than that record: "
        "copy the current jetson/runner.py to the board; or a board whose devfreq clock is unreadable)\n"
    )
    code, out, err = run_cli(monkeypatch, capsys, "compare", str(new), str(new), "--json")
    assert code == 0 and err == "" and json.loads(out)["pairs"][0]["notes"] == []


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["m.onnx"], "a model argument"),
        (["--out", "r.json"], "--out"),
        (["--save-engine", "m.engine"], "--save-engine"),
        (["--per-layer"], "--per-layer"),
        (["--env-only"], "--env-only"),
        (["--calib-npy", "c.npy"], "--calib-npy"),
        (["--calib-cache", "m.calib"], "--calib-cache"),
    ],
)
def test_batch_dir_refuses_what_belongs_to_one_model(
    flags: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--batch-dir times every model of its folder, each result beside its model: a flag naming one
    model's file or input, or a mode the batch does not run, is one line and exit 2, nothing run."""
    (tmp_path / "a.onnx").write_bytes(b"not read")
    assert runner.main(["--batch-dir", str(tmp_path), *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"error: --batch-dir times every model in its folder, each with its own result: {named} "
        "cannot go with it\n"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["a.onnx"]


def test_batch_dir_needs_a_folder_of_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.json").write_text("{}\n")
    (tmp_path / "dir.onnx").mkdir()  # a folder is not a model
    for argv, message in (
        (["--batch-dir", str(tmp_path / "absent")], f"--batch-dir {tmp_path / 'absent'}: not a folder"),
        (["--batch-dir", str(tmp_path)], f"--batch-dir {tmp_path}: holds no .onnx model"),
        (["--batch-dir", str(tmp_path), "--runs", "0"], "--runs 0: must be between 1 and 100,000"),
    ):
        assert runner.main(argv) == 2
        assert capsys.readouterr() == ("", f"error: {message}\n")


def test_no_cuda_binding_names_the_pinned_installs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither binding importable: the line names what jetson/README.md says to install, cuda-python
    pinned to the board's CUDA major (an unpinned pip3 install fetches one JetPack 5's or 6's driver
    cannot run; it said `pip3 install cuda-python`)."""

    def absent(*args: object) -> None:
        raise ImportError("no module")

    monkeypatch.setattr(runner.CudaPython, "__init__", absent)
    monkeypatch.setattr(runner.PyCuda, "__init__", absent)
    with pytest.raises(runner.RunnerError) as failed:
        runner.cuda_api()
    message = str(failed.value)
    readme = (RUNNER.parent / "README.md").read_text()
    for install in ("sudo apt install python3-pycuda", "'cuda-python>=11.4,<12'", "'cuda-python>=12.2,<13'"):
        assert install in message and install in readme
    assert "pip3 install cuda-python)" not in message
