"""`deployopt optimize` on the command line: outputs, one-line errors, Ctrl-C and --resume."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import ort_session
import pytest
from cli_runner import run_cli

from deployopt.backends.model import WaveModelSession
from deployopt.journal import Journal


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


cli = run_cli


def base_args(model: Path, outdir: Path) -> list[str]:
    return ["optimize", str(model), "--target", "h200", "--sms", "8", "--backend", "model", "-o", str(outdir)]


def test_json_report_of_a_predicted_run(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    model = zoo_model_path("vgg16_pruned_b4")
    code, out, err = cli(
        monkeypatch, capsys, *base_args(model, tmp_path / "out"), "--max-evals", "6", "--json"
    )
    assert code == 0, err
    assert "unused" not in err  # no timing option given, nothing to say
    report = json.loads(out)
    assert report["backend"] == "model" and report["measured"] is False
    assert report["note"] == "predicted by the wave model, not measured"
    assert report["target"] == {"name": "h200", "sms": 8}
    assert report["evaluations"]["count"] <= 6
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["widths"] == report["plan"]
    # a prediction has no traffic to fit: the term is on, and nothing is priced
    assert report["traffic"]["enabled"] is True and report["traffic"]["used"] is False
    assert report["traffic"]["fits"] == [] and report["traffic"]["mb_input"] > 0
    # Same folder again without --resume/--force: a one-line refusal, exit 2.
    code, out, err = cli(monkeypatch, capsys, *base_args(model, tmp_path / "out"))
    assert code == 2 and err.strip().count("\n") == 0
    assert "already exists; use --resume to continue or --force to start over" in err
    # … but a typo in --target, or a backend not installed, is said first: --force would only have
    # traded "already exists" for it (the README's first command left that folder behind)
    args = [a if a != "h200" else "h2OO" for a in base_args(model, tmp_path / "out")]
    code, _, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and err.startswith("error: unknown target 'h2OO'"), err
    monkeypatch.setenv("DEPLOYOPT_TRTEXEC", str(tmp_path / "no-trtexec"))
    monkeypatch.setenv("PATH", str(tmp_path))
    trtexec = [
        "optimize",
        str(model),
        "--target",
        "h200",
        "--backend",
        "trtexec",
        "-o",
        str(tmp_path / "out"),
    ]
    code, _, err = cli(monkeypatch, capsys, *trtexec)
    assert code == 2 and err.startswith("error: backend 'trtexec' is unavailable"), err


def test_a_folder_another_run_is_writing_is_refused(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Two runs into one OUTDIR both exited 0 with their journals interleaved, and a second run's
    --force deleted the journal of one still running. A run holds a lock on the folder; another
    (with --force or --resume too) is one line, exit 2, and touches nothing there."""
    import fcntl

    model, out = zoo_model_path("vgg16_pruned_b4"), tmp_path / "out"
    code, _, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "6")
    assert code == 0, err
    assert not (out / ".deployopt.lock").exists()  # removed when the run ends
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with open(out / ".deployopt.lock", "a") as held:  # a run in progress
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for extra in (["--force"], ["--resume", "--max-evals", "8"]):
            code, stdout, err = cli(monkeypatch, capsys, *base_args(model, out), *extra)
            assert code == 2 and stdout == "", extra
            assert err == (
                f"error: {out} is in use by another `deployopt optimize` run (it holds .deployopt.lock "
                "there); wait for it to end, or give another -o\n"
            )
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != ".deployopt.lock"}
    assert after == before


def test_bad_options_are_one_line_errors(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    model = zoo_model_path("vgg16_pruned_b4")
    bad_calib = tmp_path / "calib.npy"
    np.save(bad_calib, np.zeros((1, 3, 64, 64), dtype=np.float32))
    table = tmp_path / "model.calib"  # trtexec's or an earlier run's: no inputs to check on
    table.write_bytes(b"TRT-8502-EntropyCalibration2\ninput: 3c010a14\n")
    cases = [
        (["--mode", "trim", "--max-trim", "1.5"], "--max-trim 1.5: must be between 0 and 1"),
        (["--mode", "trim", "--max-trim", "0"], "--max-trim 0.0: must be between 0 and 1"),
        (["--mode", "shrink"], "--mode 'shrink'"),
        (["--resume", "--force"], "exclude each other"),
        (["--calibration-data", str(bad_calib)], "calib.npy"),
        (
            ["--backend", "tensorrt", "--dtype", "int8", "--calibration-data", str(table)],
            f"--calibration-data {table} is a calibration table: optimize checks each plan's outputs on "
            "real inputs, so give the data",
        ),
        (["--cudnn-engines", "0"], "--cudnn-engines: backend 'model' does not run cudnn.benchmark"),
        (["--no-cudnn-benchmark"], "--no-cudnn-benchmark: backend 'model' does not run cuDNN's"),
        (
            ["--input-shape", "input:2x3x32x32", "--batch", "4"],
            "--batch 4 and --input-shape input:2x3x32x32 disagree on the batch of 'input' (2)",
        ),
    ]
    for extra, message in cases:
        code, _, err = cli(monkeypatch, capsys, *base_args(model, tmp_path / "o"), *extra)
        assert code == 2, (extra, err)
        assert message in err and err.strip().count("\n") == 0, err
        assert "Traceback" not in err
    code, _, err = cli(
        monkeypatch, capsys, "optimize", str(model), "--target", "jetson-9000", "-o", str(tmp_path / "p")
    )
    assert code == 2 and "unknown target 'jetson-9000'" in err
    code, _, err = cli(monkeypatch, capsys, "optimize", str(model), "--target", "tx2", "--dtype", "int8",
                       "--backend", "model", "-o", str(tmp_path / "i8"))  # fmt: skip
    assert code == 2 and err.strip().count("\n") == 0
    assert "--dtype int8: Jetson TX2 (compute capability 6.2) has no native INT8" in err
    assert not (tmp_path / "i8").exists()
    code, _, err = cli(
        monkeypatch, capsys, *base_args(model, tmp_path / "q")[:-4], "--backend", "cuda", "-o", "x"
    )
    assert code == 2 and "unknown backend 'cuda'" in err
    from deployopt.backends.base import get_backend

    if not get_backend("trtexec").availability()[0]:
        args = [*base_args(model, tmp_path / "t")[:-4], "--backend", "trtexec", "-o", str(tmp_path / "t")]
        code, _, err = cli(monkeypatch, capsys, *args)
        assert code == 2 and "backend 'trtexec' is unavailable" in err and err.strip().count("\n") == 0
        assert not (tmp_path / "t").exists()  # nothing left behind
    code, _, err = cli(monkeypatch, capsys, *base_args(tmp_path / "missing.onnx", tmp_path / "r"))
    assert code == 2 and "no such file" in err
    assert not (tmp_path / "o" / "journal.jsonl").exists()


@pytest.mark.slow
def test_ctrl_c_keeps_the_journal_and_resume_finishes(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    model = zoo_model_path("vgg16_pruned_b4")
    real = WaveModelSession.predict_shapes
    calls: list[Any] = []

    def interrupt_on_fourth(self: WaveModelSession, *args: Any) -> Any:
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(args)
        return real(self, *args)

    monkeypatch.setattr(WaveModelSession, "predict_shapes", interrupt_on_fourth)
    out = tmp_path / "out"
    code, _, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "8")
    assert code == 130
    assert "interrupted; resume with --resume" in err
    measured = [e for e in Journal.read(out / "journal.jsonl") if e["event"] == "measured"]
    assert len(measured) == 3
    assert not (out / "model.onnx").exists() and not (out / "report.json").exists()

    monkeypatch.setattr(WaveModelSession, "predict_shapes", real)
    code, stdout, err = cli(
        monkeypatch, capsys, *base_args(model, out), "--max-evals", "8", "--resume", "--json"
    )
    assert code == 0, err
    report = json.loads(stdout)
    assert report["evaluations"]["from_journal"] == 3
    assert report["evaluations"]["measured_this_run"] == report["evaluations"]["count"] - 3
    assert (out / "model.onnx").exists()


def test_ctrl_c_in_the_cleanup_after_the_results_says_they_are_complete(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A Ctrl-C that lands after the results are written (closing the sessions, removing the work
    folder) said "interrupted; resume with --resume" over a finished run; it exits 130 still (the
    user interrupted), saying the results are complete."""
    import deployopt.optimize as optimize_module

    def interrupted(handle: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(optimize_module, "_unlock_outdir", interrupted)
    out = tmp_path / "out"
    code, _, err = cli(
        monkeypatch, capsys, *base_args(zoo_model_path("vgg16_pruned_b4"), out), "--max-evals", "4"
    )
    assert code == 130 and "resume" not in err
    assert f"interrupted after the run finished: its results in {out} are complete" in err
    assert (out / "model.onnx").is_file() and (out / "report.json").is_file()
    assert [e["event"] for e in Journal.read(out / "journal.jsonl")][-1] == "done"


def test_ctrl_c_before_the_journal_says_to_run_again_not_to_resume(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A Ctrl-C while the model loads or the board is asked (no journal yet) said "resume with
    --resume", and --resume then found nothing to resume. It says to run the command again, and
    that run goes through."""
    import deployopt.optimize as optimize_module

    real = optimize_module._lock_outdir

    def interrupted(outdir: Path) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(optimize_module, "_lock_outdir", interrupted)
    out = tmp_path / "out"
    args = base_args(zoo_model_path("vgg16_pruned_b4"), out)
    code, _, err = cli(monkeypatch, capsys, *args, "--max-evals", "4")
    assert code == 130 and err.strip().splitlines()[-1] == (
        "interrupted before the run began (no journal written): run it again"
    )
    assert not (out / "journal.jsonl").exists()
    monkeypatch.setattr(optimize_module, "_lock_outdir", real)
    code, _, err = cli(monkeypatch, capsys, *args, "--max-evals", "4")
    assert code == 0, err
    assert (out / "report.json").is_file()


def test_ctrl_c_while_the_run_checks_its_options_says_to_run_again(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The first second of a run, checking --runs (scipy's import), came before the optimizer had a
    journal attribute at all: Ctrl-C or SIGTERM there was an AttributeError traceback, exit 1."""
    import deployopt.optimize as optimize_module

    def interrupted(self: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(optimize_module.Optimizer, "_check_runs", interrupted)
    out = tmp_path / "out"
    code, _, err = cli(
        monkeypatch, capsys, *base_args(zoo_model_path("vgg16_pruned_b4"), out), "--max-evals", "4"
    )
    assert code == 130 and err.strip().splitlines()[-1] == (
        "interrupted before the run began (no journal written): run it again"
    )
    assert "Traceback" not in err and not out.exists()


def test_sigterm_unwinds_like_ctrl_c_and_resume_finishes(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`kill`, `timeout` or a cancelled CI job send SIGTERM: Python's default died on the spot, with
    no line and the work folder of candidate models left in the temp dir. Now it unwinds as Ctrl-C
    does (journal kept, work folder removed, how to resume said) and exits 143."""
    import os
    import signal
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    model = zoo_model_path("vgg16_pruned_b4")
    real = WaveModelSession.predict_shapes
    calls: list[Any] = []

    def terminated_on_fourth(self: WaveModelSession, *args: Any) -> Any:
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        calls.append(args)
        return real(self, *args)

    def default_would_kill(signum: int, frame: Any) -> None:  # what this test stands in for SIG_DFL
        pytest.fail("SIGTERM was not handled: the process would have died here")

    monkeypatch.setattr(WaveModelSession, "predict_shapes", terminated_on_fourth)
    previous = signal.signal(signal.SIGTERM, default_would_kill)
    try:
        out = tmp_path / "out"
        code, _, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "8")
        assert signal.getsignal(signal.SIGTERM) is default_would_kill  # put back as it was
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 143, err
    assert err.strip().splitlines()[-1] == "interrupted; resume with --resume"
    assert len([e for e in Journal.read(out / "journal.jsonl") if e["event"] == "measured"]) == 3
    assert not (out / "report.json").exists() and list((tmp_path / "tmp").iterdir()) == []

    monkeypatch.setattr(WaveModelSession, "predict_shapes", real)
    code, _, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "8", "--resume")
    assert code == 0, err
    assert (out / "report.json").exists()


def test_auto_backend_without_a_gpu_is_the_wave_model_and_says_so(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from deployopt.optimize import resolve_backend_name

    if resolve_backend_name("auto") != "model":
        pytest.skip("a GPU backend is usable here; auto would measure")
    model = zoo_model_path("vgg16_pruned_b4")
    code, out, err = cli(
        monkeypatch,
        capsys,
        "optimize",
        str(model),
        "--target",
        "nano",
        "-o",
        str(tmp_path / "a"),
        "--max-evals",
        "3",
    )
    assert code == 0, err
    assert "predicted by the wave model, not measured" in out
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["backend"] == "model" and report["target"]["sms"] == 1


def test_a_model_named_json_or_given_through_a_pipe_is_read_as_protobuf(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The default --dtype peeks for Q/DQ nodes with onnx.load, which parses by the file's name: a
    .json or .textproto given as the model (a profile, a config) raised its parser's error as a
    traceback; and it read a pipe (`<(gunzip -c m.onnx.gz)`) empty before the model was loaded."""
    import os
    import threading

    not_onnx = "not an ONNX model (protobuf parse failed: truncated or not ONNX)"
    for name, text in (("profile.json", '{"name": "x"}'), ("m.textproto", "{ bad"), ("m.onnxtxt", "{")):
        path = tmp_path / name
        path.write_text(text)
        code, out, err = cli(monkeypatch, capsys, *base_args(path, tmp_path / "o"))
        assert code == 2 and out == "" and "Traceback" not in err, err
        assert err.strip() == f"error: {path}: {not_onnx}"
    assert not (tmp_path / "o").exists()

    # what `<(cat m.onnx)` gives: /dev/fd/N of a pipe whose writer closes once the bytes are in
    data = zoo_model_path("vgg16_pruned_b4").read_bytes()
    read_end, write_end = os.pipe()

    def feed() -> None:
        with os.fdopen(write_end, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        pipe = Path(f"/dev/fd/{read_end}")
        code, _, err = cli(monkeypatch, capsys, *base_args(pipe, tmp_path / "p"), "--max-evals", "3")
    finally:
        writer.join(timeout=10)
        os.close(read_end)
    assert code == 0, err
    assert (tmp_path / "p" / "report.json").exists()


def test_closing_line_lists_the_staircases_and_engine_it_wrote() -> None:
    """The 'wrote OUTDIR/ (...)' line names the staircase PNGs and model.engine when a run wrote them."""
    from deployopt.cli.optimize_cmd import written_files

    base = ["model.onnx", "plan.json", "report.md", "report.json", "journal.jsonl"]
    assert written_files({"staircases": [], "engine": None}) == base
    pngs = ["staircases/staircase_a.png", "staircases/staircase_b.png"]
    rep = {"staircases": pngs, "engine": "model.engine"}
    assert written_files(rep) == [*base, "staircases/ (2 PNGs)", "model.engine"]


def test_too_few_measured_runs_for_the_test_are_one_line(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    # at alpha 0.01 Mann-Whitney U needs 5 samples a side: fewer could keep no candidate, ever
    model = zoo_model_path("vgg16_pruned_b4")
    args = ["optimize", str(model), "--target", "h200", "--backend", "ort", "-o", str(tmp_path / "o")]
    code, _, err = cli(monkeypatch, capsys, *args, "--runs", "4")
    assert code == 2 and err.strip().count("\n") == 0, err
    assert "--runs 4: deciding 'faster' at alpha 0.01 needs at least 5 measured runs" in err
    assert not (tmp_path / "o").exists()
    # predictions are deterministic: one run is all the model backend needs
    code, _, err = cli(
        monkeypatch, capsys, *base_args(model, tmp_path / "m"), "--runs", "1", "--max-evals", "4"
    )
    assert code == 0, err


def test_measuring_a_gpu_target_on_the_cpu_warns_once(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """ort on its CPU provider picks widths for the host CPU, not the target GPU: one warning line
    once the session stands (the search is cut short here: the warning is what is tested)."""
    from deployopt.backends.ort import OrtBackend
    from deployopt.errors import DeployoptError
    from deployopt.optimize import Optimizer

    def stop(self: Any) -> Any:
        raise DeployoptError("stopped after the session opened")

    monkeypatch.setattr(Optimizer, "search", stop)
    monkeypatch.setattr(OrtBackend, "providers", lambda self: ["CPUExecutionProvider"])
    model = zoo_model_path("vgg16_pruned_b4")
    args = ["optimize", str(model), "--target", "orin-nano-8gb", "--backend", "ort"]
    code, _, err = cli(monkeypatch, capsys, *args, "-o", str(tmp_path / "o"))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 2 and lines[1] == "error: stopped after the session opened", err
    assert lines[0].startswith("warning: --backend ort measures on this machine's CPU, not on the GPU of ")
    assert "orin-nano-8gb" in lines[0] and "fit the CPU, not the target" in lines[0]
    code, _, err = cli(monkeypatch, capsys, *base_args(model, tmp_path / "m"))
    assert "warning:" not in err  # the wave model predicts for the target: nothing to warn about
    # a refusal of the options is the one line: the warning came first, for a run that never began
    code, _, err = cli(monkeypatch, capsys, *args, "--dtype", "fp16", "-o", str(tmp_path / "f"))
    assert code == 2 and err.startswith("error: vgg16_pruned_b4.onnx is an fp32 model, and backend 'ort'")
    assert err.count("\n") == 1 and not (tmp_path / "f").exists()


def test_the_report_says_where_it_measured_and_that_the_host_cpu_is_not_the_target(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """report.md said 'backend: ort' and 'measured on ort' under 'target: orin-nano-8gb': read on its
    own (the console's warning is not in it), CPU latencies passed for the Jetson's."""
    from deployopt.backends.ort import OrtBackend

    monkeypatch.setattr(OrtBackend, "providers", lambda self: ["CPUExecutionProvider"])
    model = zoo_model_path("vgg16_pruned_b4")
    out = tmp_path / "o"
    args = ["optimize", str(model), "--target", "orin-nano-8gb", "--backend", "ort", "-o", str(out)]
    code, _, err = cli(monkeypatch, capsys, *args, "--runs", "5", "--warmup", "0", "--max-evals", "6")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    where = "ort (CPUExecutionProvider; this machine's CPU, not the GPU of orin-nano-8gb)"
    assert report["measured_on"] == where
    assert report["what_was_measured"][0].startswith(f"end-to-end latencies: measured on {where} (5 runs")
    assert f"- latencies measured on {where}\n" in (out / "report.md").read_text()
    # the wave model measures nothing: no such line
    code, _, err = cli(monkeypatch, capsys, *base_args(model, tmp_path / "m"), "--max-evals", "3")
    assert code == 0, err
    assert json.loads((tmp_path / "m" / "report.json").read_text())["measured_on"] is None
    assert "latencies measured on" not in (tmp_path / "m" / "report.md").read_text()


def test_a_budget_that_leaves_the_search_nothing_is_said(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """On a measured backend --max-evals 6 is the two baselines and the four confirmation timings:
    the search got nothing and the answer was the faster baseline, said only in report.md. Now one
    warning line says so and what to give; with one evaluation left for the search, nothing."""
    from deployopt.backends.ort import OrtBackend

    monkeypatch.setattr(OrtBackend, "providers", lambda self: ["CPUExecutionProvider"])
    model = zoo_model_path("vgg16_pruned_b4")
    said = (
        "warning: --max-evals 6 leaves the search no evaluation: the two baselines take 2 and 4 are "
        "kept back to confirm a searched plan against them, so the answer is the faster baseline "
        "(nothing searched; round-up-to-8, if the faster, confirmed against the input); give "
        "--max-evals 7 or more to search (10 to measure the solver's top 4 plans)"
    )
    for evals, expected in (("6", True), ("7", False)):
        out = tmp_path / f"o{evals}"
        args = ["optimize", str(model), "--target", "h200", "--backend", "ort", "-o", str(out)]
        code, _, err = cli(monkeypatch, capsys, *args, "--runs", "5", "--warmup", "0", "--max-evals", evals)
        assert code == 0, err
        assert (said in err) is expected, err
        assert ("leaves the search no evaluation" in err) is expected
        assert json.loads((out / "report.json").read_text())["evaluations"]["reserved_for_confirmation"] == 4
    # the wave model keeps nothing back: --max-evals 3 searches one plan, no warning
    code, _, err = cli(monkeypatch, capsys, *base_args(model, tmp_path / "m"), "--max-evals", "3")
    assert code == 0 and "leaves the search" not in err


def test_an_outdir_whose_results_would_replace_the_input_model_is_refused(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`optimize out/model.onnx -o out --force` (or `-o .` beside it) deleted the model it optimized
    and wrote the answer over it; now one line, exit 2, the model untouched."""
    folder = tmp_path / "out"
    folder.mkdir()
    model = folder / "model.onnx"
    model.write_bytes(zoo_model_path("vgg16_pruned_b4").read_bytes())
    before = model.read_bytes()
    monkeypatch.chdir(folder)
    for outdir, extra in ((folder, ["--force"]), (folder, []), (Path("."), ["--force"])):
        code, out, err = cli(monkeypatch, capsys, *base_args(Path("model.onnx"), outdir), *extra)
        assert code == 2 and out == "" and err.strip().count("\n") == 0, err
        assert (
            "model.onnx: it is the model this command reads; give another -o/--out (or move the model out"
            in err
        )
    assert model.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["model.onnx"]


def test_unwritable_outdir_and_negative_warmup_are_one_line(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    model = zoo_model_path("vgg16_pruned_b4")
    a_file = tmp_path / "file.txt"
    a_file.write_text("not a folder")
    cases = [
        (a_file, [], f"cannot write into {a_file}: it is a file, not a folder"),
        (a_file, ["--resume"], f"cannot write into {a_file}: it is a file, not a folder"),
        (a_file / "out", [], f"cannot write into {a_file / 'out'}: {a_file} is a file, not a folder"),
        (a_file / "a" / "b", [], f"{a_file} is a file, not a folder"),
        (tmp_path / "w", ["--warmup", "-1"], "--warmup -1: must be between 0 and 100,000"),
        (tmp_path / "w", ["--runs", "100001"], "--runs 100001: must be between 1 and 100,000"),
        (tmp_path / "w", ["--sweep-runs", "0"], "--sweep-runs 0: must be between 1 and 100,000"),
    ]
    for outdir, extra, message in cases:
        code, out, err = cli(monkeypatch, capsys, *base_args(model, outdir), *extra)
        assert code == 2 and out == "", (outdir, err)
        assert message in err and err.strip().count("\n") == 0 and "Traceback" not in err, err
    assert a_file.read_text() == "not a folder" and not (tmp_path / "w").exists()


def test_a_full_disk_while_writing_results_is_one_line_and_resume_finishes(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A failure half way through the results (report.json written, report.md not) leaves none of
    them and no staging folder, only the journal; --resume then writes the complete set."""
    import errno
    import os

    import deployopt.report
    from deployopt.fileio import atomic_path

    def full_disk(dest: Any, text: str) -> None:
        with atomic_path(dest) as tmp:
            tmp.write_text(text[:100])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    model = zoo_model_path("vgg16_pruned_b4")
    out = tmp_path / "out"
    real = deployopt.report.write_text
    monkeypatch.setattr(deployopt.report, "write_text", full_disk)
    code, stdout, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "5")
    assert code == 2 and stdout == ""
    assert err.strip() == f"error: cannot write {out / 'report.md'}: No space left on device"
    assert sorted(p.name for p in out.iterdir()) == ["journal.jsonl"]

    monkeypatch.setattr(deployopt.report, "write_text", real)
    args = [*base_args(model, out), "--max-evals", "5", "--resume", "--json"]
    code, stdout, err = cli(monkeypatch, capsys, *args)
    assert code == 0, err
    report = json.loads(stdout)
    assert report["evaluations"]["measured_this_run"] == 0  # all from the failed run's journal
    assert json.loads((out / "report.json").read_text()) == report
    assert json.loads((out / "plan.json").read_text())["widths"] == report["plan"]
    names = {p.name for p in out.iterdir()}
    assert {"model.onnx", "plan.json", "report.json", "report.md", "journal.jsonl"} <= names
    assert not [n for n in names if n.startswith(".partial-")]


@pytest.mark.slow
def test_optimize_a_yolov8_export_end_to_end(
    yolo_detect: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The model Jetson users ship most, as `yolo export` writes it (Detect head, C2f blocks whose
    equal Split sizes torch's exporter shares): optimize plans every one of its 59 free groups,
    and the lossless model it writes gives the input model's detections on onnxruntime."""

    path, x = yolo_detect
    out = tmp_path / "out"
    code, stdout, err = cli(monkeypatch, capsys, *base_args(path, out), "--max-evals", "8", "--json")
    assert code == 0, err
    report = json.loads(stdout)
    assert len(report["plan"]) == 59 and report["fidelity"]["passed"] and report["fidelity"]["lossless_plan"]
    groups = report["groups"]
    assert all(g["best"] >= g["original"] for g in groups)  # lossless: pads only
    assert sum(g["best"] != g["original"] for g in groups) >= 10  # irregular widths get padded
    runs = [ort_session.session(str(p)).run(None, {"images": x})[0]
            for p in (path, out / "model.onnx")]  # fmt: skip
    np.testing.assert_allclose(runs[1], runs[0], rtol=0, atol=1e-5 * float(np.abs(runs[0]).max()))


@pytest.mark.slow
def test_detect_head_at_640_passes_the_lossless_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """At 640×640 the Detect head's boxes reach ~636 px, where fp32 steps by 6.1e-5: padding changes
    the convs' summation order and the boxes move by an ulp or two (1.2e-4). An absolute 1e-4 made
    every such run end in 'internal check failed'; the limit now scales with each output."""
    pytest.importorskip("torch")
    from deployopt.zoo.yolo import export_yolo_like

    path = tmp_path / "yolo640.onnx"
    export_yolo_like(path, size=640, batch=1, head="detect")
    code, stdout, err = cli(
        monkeypatch, capsys, *base_args(path, tmp_path / "out"), "--max-evals", "4", "--json"
    )
    assert code == 0, err
    fid = json.loads(stdout)["fidelity"]
    assert fid["passed"] and fid["lossless_plan"] and fid["failures"] == []
    (out,) = fid["per_output"]
    assert out["name"] == "output0" and 600 < out["max_abs_reference"] < 640
    assert out["max_abs_error"] <= 1e-4 + 1e-5 * out["max_abs_reference"]


def test_paths_and_names_print_as_they_are(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Console output is literal: rich markup would drop '[v2]' from a folder name and turn ':b:'
    into an emoji, so the closing line named a folder that does not exist."""
    folder = tmp_path / "models [v2] :b:"
    folder.mkdir()
    model = folder / "m.onnx"
    model.write_bytes(zoo_model_path("vgg16_pruned_b4").read_bytes())
    code, out, err = cli(monkeypatch, capsys, "optimize", str(model), "--target", "nano", "--max-evals", "4")
    assert code == 0, err
    assert f"wrote {folder / 'm.deployopt'}/ (" in out
    code, out, _ = cli(monkeypatch, capsys, "analyze", str(model))
    assert code == 0 and "🅱" not in out


@pytest.mark.slow
def test_an_unwritable_layer_cache_is_one_warning_and_the_measured_run_finishes(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A read-only $HOME (here: a file where the cache folder goes) must not abort a measured run."""
    model = zoo_model_path("vgg16_pruned_b4")
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "file" / "cache"))
    out = tmp_path / "o"
    args = ["optimize", str(model), "--target", "orin-nano-8gb", "--backend", "ort", "-o", str(out)]
    code, _, err = cli(monkeypatch, capsys, *args, "--runs", "5", "--warmup", "1", "--max-evals", "2")
    assert code == 0, err
    cache = [line for line in err.splitlines() if "the layer cache is not saved this run" in line]
    assert len(cache) == 1 and cache[0].startswith("warning: cannot write "), err
    # the other lines: ort times the GPU target on this machine's CPU; --max-evals 2 searches nothing
    assert [line for line in err.splitlines() if line not in cache] == [
        "warning: --backend ort measures on this machine's CPU, not on the GPU of orin-nano-8gb: the "
        "latencies and the widths chosen fit the CPU, not the target (measure on the GPU: torch on CUDA, "
        "tensorrt or trtexec)",
        # the baselines are the whole budget: nothing is kept back of it (it said "2 and 4 are kept back")
        "warning: --max-evals 2 leaves the search no evaluation: the two baselines take 2, so the answer "
        "is the faster baseline (nothing searched, nothing to confirm); give --max-evals 7 or more to "
        "search (10 to measure the solver's top 4 plans)",
    ], err
    report = json.loads((out / "report.json").read_text())
    assert report["evaluations"]["reserved_for_confirmation"] == 0
    assert "kept back" not in (out / "report.md").read_text()


def test_a_full_disk_while_writing_the_journal_is_one_line(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    import errno
    import os

    import deployopt.journal

    calls: list[int] = []

    def full_after_two(fd: int) -> None:
        calls.append(fd)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(deployopt.journal.os, "fsync", full_after_two)
    out = tmp_path / "out"
    code, stdout, err = cli(monkeypatch, capsys, *base_args(zoo_model_path("vgg16_pruned_b4"), out))
    assert (code, stdout) == (2, "")
    assert err == f"error: cannot write {out / 'journal.jsonl'}: No space left on device\n"


def test_a_read_only_outdir_is_one_line_before_the_run(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Root passes every permission bit but not a read-only filesystem: the check creates a file."""
    import errno
    import os

    from deployopt import fileio

    real_mkstemp = fileio.tempfile.mkstemp

    def read_only(*args: Any, **kwargs: Any) -> tuple[int, str]:
        if Path(str(kwargs.get("dir"))) == tmp_path:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(fileio.tempfile, "mkstemp", read_only)
    out = tmp_path / "out"
    code, stdout, err = cli(monkeypatch, capsys, *base_args(zoo_model_path("vgg16_pruned_b4"), out))
    assert (code, stdout) == (2, "")
    assert err == f"error: cannot write {out}: Read-only file system\n"
    assert not out.exists()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize(
    ("journal", "message"),
    [
        ("garbage\n", "is not a deployopt journal (line 1 is not JSON)"),
        ('{"a": 1}\n{"b": 2}\n', "is not a deployopt journal (its first line is not a 'start' event)"),
    ],
    ids=["garbage", "unrelated-json"],
)
def test_resume_from_a_file_that_is_no_journal_is_one_line_and_touches_nothing(
    zoo_model_path: Callable[[str], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    journal: str,
    message: str,
) -> None:
    """Both replayed as an empty journal: the run started over ("13 this run"), exit 0, appended to
    the file and wrote a result set, where a missing journal is "nothing to resume"."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "journal.jsonl").write_text(journal)
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)
    model = zoo_model_path("vgg16_pruned_b4")
    code, stdout, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "4", "--resume")
    assert code == 2 and stdout == ""
    assert err == f"error: {out / 'journal.jsonl'} {message}; use --force to start over\n"
    assert _snapshot(out) == before


def test_a_run_killed_mid_line_resumes_and_resumes_again(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A torn last line (SIGKILL mid-write) is skipped; the resumed run's first event was appended
    onto it, a damaged middle line that made the next --resume fail."""
    model = zoo_model_path("vgg16_pruned_b4")
    out = tmp_path / "out"
    code, _, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "4")
    assert code == 0, err
    journal = out / "journal.jsonl"
    measured = [e for e in Journal.read(journal) if e["event"] == "measured"]
    with open(journal, "a") as f:
        f.write('{"event":"measured","index":99,"label":"x","pla')  # killed mid-write
    for evals in ("5", "6"):
        args = [*base_args(model, out), "--max-evals", evals, "--resume", "--json"]
        code, stdout, err = cli(monkeypatch, capsys, *args)
        assert code == 0, err
        assert json.loads(stdout)["evaluations"]["from_journal"] >= len(measured)
    assert journal.read_text().endswith("\n")
    assert [e["event"] for e in Journal.read(journal)].count("resume") == 2


def test_optimize_writes_external_weights_with_the_umask_mode(
    zoo_model: Callable[[str], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """model.onnx.data came out 0600 (onnx creates it so) beside a 0644 model.onnx."""
    import os
    import stat

    import onnx

    model = tmp_path / "m.onnx"
    onnx.save(zoo_model("vgg16_pruned_b4"), model, save_as_external_data=True, location="m.onnx.data")
    out = tmp_path / "out"
    old = os.umask(0o022)
    try:
        code, said, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "4")
    finally:
        os.umask(old)
    assert code == 0, err
    for name in ("model.onnx", "model.onnx.data", "plan.json", "report.json"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644, name
    # and the closing line names the weights file it wrote beside the model
    assert "(model.onnx, model.onnx.data, plan.json," in " ".join(said.split())


def test_timing_options_the_model_backend_does_not_use_are_named(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`--runs 300` (to tighten a search) had no effect with the model backend, and nothing said so."""
    model = zoo_model_path("vgg16_pruned_b4")
    args = [*base_args(model, tmp_path / "out"), "--max-evals", "3", "--runs", "300", "--sweep-runs", "5"]
    code, out, err = cli(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    assert " ".join(err.split()).endswith(  # rich wraps stderr at the terminal's width
        "note: --runs, --sweep-runs unused: backend model predicts every latency, it times nothing"
    )
    assert json.loads(out)["measured"] is False  # stdout stays the report alone


def test_no_traffic_term_reaches_the_run_and_its_journal(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    model = zoo_model_path("vgg16_pruned_b4")
    out = tmp_path / "out"
    code, stdout, err = cli(
        monkeypatch, capsys, *base_args(model, out), "--max-evals", "4", "--no-traffic-term", "--json"
    )
    assert code == 0, err
    assert json.loads(stdout)["traffic"]["enabled"] is False
    # a journal searched without the term does not resume into a search with it …
    code, _, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "6", "--resume")
    assert code == 2 and err.strip().count("\n") == 0
    assert "(--no-traffic-term: the journal's run had it, this one does not)" in err
    # … while one from before the term existed (no such key) does
    journal = out / "journal.jsonl"
    lines = journal.read_text().splitlines()
    start = json.loads(lines[0])
    del start["config"]["traffic_term"]
    journal.write_text("\n".join([json.dumps(start), *lines[1:]]) + "\n")
    code, _, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "6", "--resume")
    assert code == 0, err


def test_the_live_evaluation_line_says_measured_or_predicted() -> None:
    """optimize's progress line ("end-to-end: input 1854.7 µs") showed each evaluation's latency
    with no word on whether it was measured: with --backend model it was a prediction."""
    import io

    from rich.console import Console
    from rich.progress import Progress

    from deployopt.cli.optimize_cmd import _progress_callback
    from deployopt.timing import Timing

    progress = Progress(console=Console(file=io.StringIO()))
    on_event = _progress_callback(progress)
    predicted = Timing("model", [1854.7], measured=False, predictor="wave model")
    on_event("eval", label="input", done=1, total=4, timing=predicted)
    assert progress.tasks[0].description == "end-to-end: input 1854.7 µs predicted"
    on_event("eval", label="round-up-to-8", done=2, total=4, timing=Timing("ort", [1500.0, 1510.0]))
    assert progress.tasks[0].description == "end-to-end: round-up-to-8 1505.0 µs measured"


def test_a_quantized_model_on_a_gpu_without_int8_says_where_int8_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A Q/DQ model gets --dtype int8 by default; for `--target nano` (no native INT8) the error was
    "--dtype int8: ... use --dtype fp16", naming an option the user never gave. Now it says the
    model is quantized, before any work, and nothing is written."""
    import onnx
    from test_coupling_qdq import qdq_net

    model = tmp_path / "q.onnx"
    onnx.save(qdq_net(), str(model))
    out = tmp_path / "out"
    args = ["optimize", str(model), "--target", "nano", "--backend", "model", "-o", str(out)]
    code, stdout, err = cli(monkeypatch, capsys, *args)
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert err.startswith("error: q.onnx is quantized (Q/DQ nodes), so it runs in INT8, which Jetson Nano")
    assert not out.exists()
    code, _, err = cli(monkeypatch, capsys, *args, "--dtype", "int8")  # asked for: the target's own words
    assert code == 2 and err.startswith("error: --dtype int8: Jetson Nano"), err


def test_a_table_value_in_a_label_says_measured_or_predicted(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A refinement move's label ("move G→40 (table gain 0.9 µs)", printed in the console's
    `refused` lines, the live line and report.md) gave a per-layer table value without saying
    whether it was measured or predicted; so did report.md's evaluation columns. Now each says;
    and the live line drops a value its cut would part from that word."""
    import io
    from types import SimpleNamespace

    from rich.console import Console
    from rich.progress import Progress

    from deployopt.cli.optimize_cmd import _progress_callback
    from deployopt.optimize import Optimizer
    from deployopt.timing import Timing

    out = tmp_path / "out"
    args = ["optimize", str(zoo_model_path("resnet56_pruned")), "--target", "h200", "--sms", "8"]
    code, _, err = cli(monkeypatch, capsys, *args, "--backend", "model", "-o", str(out))
    assert code == 0, err
    labels = [e["label"] for e in json.loads((out / "report.json").read_text())["evaluations"]["list"]]
    moves = [label for label in labels if "table" in label]
    assert moves and all(label.endswith(" µs, predicted)") for label in moves), labels
    md = (out / "report.md").read_text()
    assert "| # | what | median µs (predicted) | IQR | table µs (predicted) | accepted |" in md
    measured = SimpleNamespace(session=SimpleNamespace(backend=SimpleNamespace(measured=True)))
    assert Optimizer._table_source(measured) == "per-layer measured"  # type: ignore[arg-type]
    progress = Progress(console=Console(file=io.StringIO()))
    on_event = _progress_callback(progress)
    label = "move layer3.4.conv1.conv→56 (table cost 0.1 µs, per-layer measured)"
    on_event("eval", label=label, done=1, total=4, timing=Timing("torch", [537.0, 537.2]))
    assert progress.tasks[0].description == "end-to-end: move layer3.4.conv1.conv→56 537.1 µs measured"


def test_summary_lines_are_whole_in_a_log_80_columns_wide(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """Piped into a log (a weekly job: no terminal, 80 columns) the summary's lines were folded mid
    phrase, `wrote OUTDIR/ (…` on two lines and a `notice:` in three, so grep found half of each.
    The table still fits the width; every other line is one line."""
    model = zoo_model_path("vgg16_pruned_b4")
    out = tmp_path / "a-folder-with-a-rather-long-name" / "for-the-weekly-regression-job"
    code, stdout, err = cli(monkeypatch, capsys, *base_args(model, out), "--max-evals", "4", columns=80)
    assert code == 0, err
    lines = stdout.splitlines()
    assert f"wrote {out}/ (model.onnx, plan.json, report.md, report.json, journal.jsonl)" in lines
    sweep = [ln for ln in lines if " end-to-end evaluations (" in ln]
    assert len(sweep) == 1 and sweep[0].endswith(" cached")
    table = [ln for ln in lines if ln[:1] in "┏┃┡│└"]
    assert table and all(len(ln) <= 80 for ln in table)


def test_resume_in_another_mode_names_the_mode_not_max_trim(monkeypatch, capsys, tmp_path) -> None:
    """A lossless run resumed with --mode trim said "max_trim was the default, now 0.1; mode was
    "lossless", now "trim"": the user changed the mode alone (max_trim is recorded in trim mode only).
    A --max-trim changed between two trim runs is still named."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    example = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"
    base = ["optimize", str(example), "--target", "nano", "--backend", "model", "--max-evals", "3"]
    for mode, out in (("lossless", "a"), ("trim", "b")):
        code, _, err = run_cli(monkeypatch, capsys, *base, "--mode", mode, "-o", str(tmp_path / out))
        assert code == 0, err
    journal = tmp_path / "a" / "journal.jsonl"
    code, _, err = run_cli(
        monkeypatch, capsys, *base, "--mode", "trim", "-o", str(tmp_path / "a"), "--resume"
    )
    assert code == 2 and err == (
        f"error: --resume: {journal} was written by a different run (--mode was lossless, now trim); "
        "use --force to start over\n"
    )
    args = ["--mode", "trim", "--max-trim", "0.2", "-o", str(tmp_path / "b"), "--resume"]
    code, _, err = run_cli(monkeypatch, capsys, *base, *args)
    assert code == 2 and "(--max-trim was 0.1, now 0.2)" in err, err


def test_the_readme_says_what_its_first_command_finds(monkeypatch, capsys, tmp_path) -> None:
    """README's first lines tell a newcomer what the bundled example's optimize finds on the Nano
    (its own widths, predicted 4.1 % faster than round-up-to-8) and on an Orin Nano 8GB (14.9 % faster
    than the input): the wave model or the example changing makes those sentences false."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    root = Path(__file__).resolve().parents[1]
    intro = (root / "README.md").read_text().split("## ", 1)[0]
    example = root / "examples" / "resnet56_pruned_cifar.onnx"
    found = {}
    for target in ("nano", "orin-nano-8gb"):
        out = tmp_path / target
        args = ["optimize", str(example), "--target", target, "-o", str(out)]
        code, _, err = run_cli(monkeypatch, capsys, *args)
        assert code == 0, err
        found[target] = json.loads((out / "report.json").read_text())["comparisons"]
    assert found["nano"]["vs_input"]["describe"] == (
        "the same plan (no other widths were predicted at least 0.5 % faster than the input's)"
    )
    text = " ".join(intro.split())
    faster = 1 - found["nano"]["vs_round_up_8"]["ratio"]
    assert f"predicts the answer {faster * 100:.1f} % faster than rounding up" in text
    faster = 1 - found["orin-nano-8gb"]["vs_input"]["ratio"]
    assert f"{faster * 100:.1f} % faster than the input" in text
    assert found["orin-nano-8gb"]["vs_round_up_8"]["describe"] == (
        "the same plan (no other widths were predicted at least 0.5 % faster than rounding up to "
        "multiples of 8)"
    )


def test_a_static_batch_rewritten_by_batch_is_said(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`--batch 4` on a static batch-1 export wrote a static batch-4 model.onnx with no notice and
    `written_batch` null: a pipeline feeding batch 1 then failed on the answer."""
    import onnx

    model = zoo_model_path("resnet_projection")  # static batch 1
    out = tmp_path / "out"
    code, stdout, err = cli(
        monkeypatch, capsys, *base_args(model, out), "--batch", "4", "--max-evals", "6", "--json"
    )
    assert code == 0, err
    note = (
        "written with a static batch of 4 ('input' is static batch 1 in the input file, set to 4 by "
        "--batch/--input-shape): a caller feeding batch 1 cannot run it; export the model with a dynamic "
        "batch to keep any"
    )
    assert json.loads(stdout)["written_batch"] == note  # and report.md's model.onnx line, as every notice
    assert f"- model.onnx: {note}" in (out / "report.md").read_text()
    written = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert written.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 4
    code, stdout, err = cli(
        monkeypatch,
        capsys,
        *base_args(model, tmp_path / "same"),
        "--batch",
        "1",
        "--max-evals",
        "6",
        "--json",
    )
    assert code == 0 and json.loads(stdout)["written_batch"] is None, err  # its own batch: nothing to say


def test_a_model_computing_in_fp16_passes_its_own_lossless_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """An fp16-typed net (weights, activations and I/O fp16; widths 13, 21, 27, 19): padding
    reorders its convs' fp16 sums, and its outputs moved by 2^-12 at a magnitude of 2.3, past the
    fp32 bound (1e-4 + 1e-5 × 2.3): every optimize of it stopped at "internal check failed" with
    nothing written. It is held to its own precision's bound now, and its padded model is still
    checked: within 4 fp16 epsilons of the input's outputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    widths = [3, 13, 21, 27, 19, 4]
    nodes, inits, t = [], [], "x"
    for k in range(5):
        w = rng.standard_normal((widths[k + 1], widths[k], 3, 3)) / np.sqrt(widths[k] * 9)
        inits += [
            numpy_helper.from_array(w.astype(np.float16), f"w{k}"),
            numpy_helper.from_array(rng.standard_normal(widths[k + 1]).astype(np.float16), f"b{k}"),
        ]
        nodes.append(
            helper.make_node("Conv", [t, f"w{k}", f"b{k}"], [f"c{k}"], name=f"conv{k}", pads=[1] * 4)
        )
        t = f"c{k}"
        if k < 4:
            nodes.append(helper.make_node("Relu", [t], [f"r{k}"], name=f"relu{k}"))
            t = f"r{k}"
    graph = helper.make_graph(
        nodes,
        "fp16net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 3, 32, 32])],
        [helper.make_tensor_value_info(t, TensorProto.FLOAT16, [1, 4, 32, 32])],
        inits,
    )
    src = tmp_path / "fp16net.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    out = tmp_path / "out"
    code, _, err = cli(monkeypatch, capsys, "optimize", str(src), "--target", "orin-nano-8gb", "--backend",
                       "model", "-o", str(out))  # fmt: skip
    assert code == 0, err
    plan = json.loads((out / "plan.json").read_text())["widths"]
    assert any(w % 8 == 0 and w > 4 for w in plan.values()), plan  # something was padded
    x = {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float16)}
    a, b = (ort_session.session(str(p)).run(None, x)[0].astype(np.float64) for p in (src, out / "model.onnx"))
    assert np.abs(a - b).max() <= 4 * 2.0**-10 * np.abs(a).max()


def test_optimize_for_a_jetson_warns_of_ops_its_tensorrt_may_not_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """A conv net exported at opset 18 (the torch exporter's default and newer) whose ReduceMean
    reads its axes as an input, optimized for a Nano (TensorRT 8.2: ops up to opset 13): the model
    written keeps its opset, so the run says so once; for an Orin (TensorRT 10) it says nothing."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((12, 3, 3, 3)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((10, 12, 3, 3)).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1] * 4),
        helper.make_node("Relu", ["a"], ["r"], name="r"),
        helper.make_node("Conv", ["r", "w2"], ["b"], name="c2", pads=[1] * 4),
        helper.make_node("ReduceMean", ["b", "axes"], ["y"], name="mean", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    src = tmp_path / "net18.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), src)
    for target, warned in (("nano", True), ("agx-orin-64gb", False)):
        args = ["optimize", str(src), "--target", target, "--backend", "model", "-o", str(tmp_path / target)]
        code, _, err = cli(monkeypatch, capsys, *args)
        said = " ".join(err.split())
        assert code == 0, err
        assert said.count("warning: the model is ONNX opset 18, and its ReduceMean nodes") == int(warned), err


def test_resume_of_a_predicted_run_ignores_the_timing_options_it_said_were_unused(
    zoo_model_path: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`--backend model --runs 50` notes that --runs is unused; a --resume without it was refused
    ("runs was 50, now 100") over an option that changed nothing."""
    out = tmp_path / "out"
    model = zoo_model_path("vgg16_pruned_b4")
    code, _, err = cli(monkeypatch, capsys, *base_args(model, out), "--runs", "50", "--warmup", "3")
    assert code == 0 and "--runs, --warmup unused" in err, err
    code, _, err = cli(monkeypatch, capsys, *base_args(model, out), "--resume")
    assert code == 0, err
    journal = [json.loads(line)["event"] for line in (out / "journal.jsonl").read_text().splitlines()]
    assert journal[0] == "start" and journal.count("start") == 1 and journal[-1] == "done"
    # what the wave model reads still decides
    code, _, err = cli(monkeypatch, capsys, *base_args(model, out), "--resume", "--dtype", "fp32")
    assert code == 2 and "(--dtype was fp16, now fp32)" in err, err
