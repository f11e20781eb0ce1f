"""Six problems a review of just-landed commits found (bug bash rva): a stale-folder name whose pid
overflows pid_t crashed every run; --resume pooled torch timings taken at other thread counts; an
old ort calibration without a device was said to be "calibrated from host-CPU timings"; a node
failing on the user's data was blamed on the model; a NaN weight in a Constant node was missed; a
legitimate NaN constant (a Where's fill value) warned that the outputs were not valid."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper

from deployopt import fileio, model_checks
from deployopt.errors import DataError, DeployoptError, DeployoptWarning
from deployopt.journal import Journal


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "dcache"))
    monkeypatch.setattr(model_checks, "_WARNED", set(), raising=False)


def _save(nodes, inputs, outputs, inits, path: Path) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])


# 01 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pid", [2**31, 4294967296, 99999999999, 10**40])
def test_a_stale_folder_whose_pid_overflows_is_skipped_not_a_crash(tmp_path: Path, pid: int) -> None:
    odd = tmp_path / f"deployopt-work-{pid}-abcdefgh"
    odd.mkdir()
    past = (os.stat(odd).st_mtime_ns - 10**12) / 1e9
    os.utime(odd, (past, past))  # older than this process: only its pid keeps it
    fileio.remove_stale_temp_dirs(tmp_path, "deployopt-work-")  # raised OverflowError
    assert odd.is_dir()  # not a pid here: not ours to remove
    made = fileio.owned_temp_dir("deployopt-work-", tmp_path)
    assert made.is_dir() and odd.is_dir()
    fileio.remove_owned_temp_dir(made)


def test_pid_alive_takes_pids_beyond_pid_t_for_alive() -> None:
    assert fileio._pid_alive(2**31) is True
    assert fileio._pid_alive(10**40) is True
    assert fileio._pid_alive(os.getpid()) is True
    assert fileio._pid_alive(0) is False


def test_optimize_runs_beside_such_a_folder(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tmp = tmp_path / "tmp"
    (tmp / "deployopt-work-4294967296-abcdefgh").mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    example = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"
    code, _, err = run_cli(
        monkeypatch, capsys, "optimize", str(example), "-t", "t4", "-b", "model", "--max-evals", "4",
        "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    assert "Traceback" not in err and "OverflowError" not in err, err
    assert (tmp / "deployopt-work-4294967296-abcdefgh").is_dir()


# 02 ------------------------------------------------------------------------------------------


def _timing(**env) -> dict:
    """A measured event's timing as a journal replays it (samples and all): Journal takes the
    thread counts from its replay."""
    return {"backend": "torch", "measured": True, "samples_us": [100.0], "environment": env}


def _journal_with(path: Path, **env) -> None:
    events = [
        {"event": "start", "config": {}},
        {"event": "measured", "index": 1, "label": "input", "plan": {}, "timing": _timing(**env)},
    ]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


@pytest.mark.parametrize(
    ("key", "was", "now", "word"),
    [
        ("cpu_threads", 1, 2, "torch CPU threads (OMP_NUM_THREADS) 1, this run measures at 2"),
        ("intra_op_threads", 0, 4, "onnxruntime intra-op threads 0, this run measures at 4"),
    ],
)
def test_resume_refuses_a_fresh_timing_at_another_thread_count(
    tmp_path: Path, key: str, was: int, now: int, word: str
) -> None:
    path = tmp_path / "journal.jsonl"
    _journal_with(path, **{key: was, "cpu_cores": 2})
    before = path.read_text()
    journal = Journal(path)
    try:
        with pytest.raises(DeployoptError) as refused:
            journal.write(
                "measured", index=2, label="x", plan={}, timing=_timing(**{key: now, "cpu_cores": 2})
            )
        assert f"--resume: {path} holds timings measured at {word}" in str(refused.value)
        assert "use --force to start over" in str(refused.value)
        assert path.read_text() == before  # not written: never pooled
        # the same count resumes
        journal.write("measured", index=2, label="x", plan={}, timing=_timing(**{key: was, "cpu_cores": 2}))
    finally:
        journal.close()
    assert len(path.read_text().splitlines()) == 3


def test_a_journal_without_thread_counts_or_a_new_one_refuses_nothing(tmp_path: Path) -> None:
    old = tmp_path / "old.jsonl"
    _journal_with(old, cpu_cores=2)  # recorded before the thread counts were
    for path in (old, tmp_path / "new.jsonl"):
        journal = Journal(path)
        try:
            journal.write("measured", index=2, label="x", plan={}, timing=_timing(cpu_threads=2))
        finally:
            journal.close()


# 03 ------------------------------------------------------------------------------------------


def _old_ort_profile(tmp_path: Path) -> Path:
    from deployopt.targets import get_target

    facts = get_target("orin-nano-8gb").to_json()
    params = facts.pop("params")
    doc = {
        "deployopt_profile": 1,
        "target": facts,
        "params": {"fp32": dict(params["fp32"], fitted=True, name="orin-nano-8gb-fp32 calibrated")},
        "measured_with": {"backend": "ort", "runs": 5, "statistic": "median"},  # CUDA EP or CPU alike
    }
    path = tmp_path / "dcache" / "targets" / "orin-nano-8gb.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    return path


def test_an_old_ort_profile_without_a_device_is_not_said_to_be_a_cpu_fit(tmp_path: Path) -> None:
    from deployopt.targets import get_target

    path = _old_ort_profile(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target = get_target("orin-nano-8gb")
    said = [str(w.message) for w in caught if issubclass(w.category, DeployoptWarning)]
    assert len(said) == 1, said
    assert said[0].startswith(f"{path}: recorded no device for its ort timings"), said
    assert "may be a fit to host-CPU timings" in said[0]
    assert "calibrated from host-CPU timings" not in said[0] and "CPU provider)," not in said[0]
    assert "re-run `deployopt calibrate -t orin-nano-8gb` on the GPU" in said[0]
    assert not target.calibrated


def test_a_profile_naming_a_cpu_device_is_still_said_to_be_one(tmp_path: Path) -> None:
    from deployopt.targets import get_target

    path = _old_ort_profile(tmp_path)
    doc = json.loads(path.read_text())
    doc["measured_with"]["device"] = "CPUExecutionProvider"
    path.write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        get_target("orin-nano-8gb")
    said = [str(w.message) for w in caught if issubclass(w.category, DeployoptWarning)]
    assert len(said) == 1 and "calibrated from host-CPU timings" in said[0], said


# 04 ------------------------------------------------------------------------------------------


def _gather_model(tmp_path: Path, baked: bool) -> Path:
    r = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(r.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(r.standard_normal((10, 8)).astype(np.float32), "emb"),
    ]
    inputs = [X]
    if baked:  # the model's own index is out of range: any input fails
        inits.append(numpy_helper.from_array(np.array([57], np.int64), "idx"))
    else:
        inputs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, [1]))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("GlobalAveragePool", ["c"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        helper.make_node("Gather", ["emb", "idx"], ["e"], axis=0, name="embed_lookup"),
        helper.make_node("Add", ["f", "e"], ["y"], name="add"),
    ]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])]
    return _save(nodes, inputs, out, inits, tmp_path / ("baked.onnx" if baked else "cond.onnx"))


def test_a_node_failing_on_the_users_data_names_the_data(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = _gather_model(tmp_path, baked=False)
    data = tmp_path / "cal.npz"
    np.savez(data, x=np.zeros((1, 3, 8, 8), np.float32), idx=np.array([57], np.int64))
    code, _, err = run_cli(
        monkeypatch, capsys, "verify", str(model), str(model), "--calibration-data", str(data)
    )
    assert code != 0 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"error: reference model cannot run on {data}: onnxruntime fails on that data in ")
    assert "Gather 'embed_lookup'" in line and "idx=57" in line, line
    assert "check the data" in line, line
    assert "check that node of the model" not in line and "fails inside it" not in line, line


def test_a_model_failing_on_random_inputs_is_still_blamed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = _gather_model(tmp_path, baked=True)
    code, _, err = run_cli(monkeypatch, capsys, "verify", str(model), str(model))
    assert code != 0 and "Traceback" not in err, err
    line = err.strip().splitlines()[-1]
    if "cannot load it" in line:  # onnxruntime 1.23 (Python 3.10's) folds the baked Gather at load
        assert line.startswith("error: reference model: onnxruntime cannot load it") and "idx=57" in line
        return
    assert "reference model cannot run: onnxruntime fails inside it, in Gather 'embed_lookup'" in line
    assert "check that node of the model" in line


def test_run_words_a_node_failure_by_where_the_inputs_came_from() -> None:
    from deployopt.fidelity import _run

    class Failing:
        def run(self, *_: object) -> None:
            raise RuntimeError(
                "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Non-zero status code returned while "
                "running Gather node. Name:'g' Status Message: idx=57 must be within [-10,9]"
            )

    with pytest.raises(DataError) as on_data:
        _run(Failing(), {}, "candidate", "cal.npz")
    assert str(on_data.value).startswith(
        "candidate model cannot run on cal.npz: onnxruntime fails on that data"
    )
    with pytest.raises(DataError) as on_random:
        _run(Failing(), {}, "candidate")
    assert "fails inside it" in str(on_random.value) and "check that node of the model" in str(
        on_random.value
    )


# 05, 06 --------------------------------------------------------------------------------------


def _conv_model(tmp_path: Path, in_constant: bool) -> Path:
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    w[0, 0, 0, 0] = np.nan
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    inits = []
    if in_constant:
        nodes.insert(
            0, helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "wv"), name="wconst")
        )
    else:
        inits = [numpy_helper.from_array(w, "w")]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])]
    return _save(nodes, [X], out, inits, tmp_path / f"nan_{in_constant}.onnx")


def test_a_nan_weight_in_a_constant_node_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = _conv_model(tmp_path, in_constant=True)
    found = model_checks.nonfinite_weights(onnx.load(str(model)))
    assert found == [("w", 1, 0, "Constant 'wconst' (output 'w')")]
    assert model_checks.describe_nonfinite(found) == "Constant 'wconst' (output 'w') holds 1 NaN value(s)"
    code, _, err = run_cli(monkeypatch, capsys, "verify", str(model), str(model))
    assert code != 0, err
    said = "Constant 'wconst' (output 'w') holds 1 NaN value(s)"
    warned = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert any(said in line for line in warned), err
    line = err.strip().splitlines()[-1]
    assert said in line and "fix or re-export the checkpoint" in line, line
    assert "give --calibration-data" not in line, line


def test_the_initializer_form_is_said_as_before(tmp_path: Path) -> None:
    found = model_checks.nonfinite_weights(onnx.load(str(_conv_model(tmp_path, in_constant=False))))
    assert found == [("w", 1, 0)]
    assert model_checks.describe_nonfinite(found) == "initializer 'w' holds 1 NaN value(s)"
    both = [*found, ("v", 2, 0, "Constant 'c' (output 'v')")]
    assert model_checks.describe_nonfinite(both).endswith("(and 1 other weight(s))")


def _where_nan_model(tmp_path: Path, in_constant: bool) -> Path:
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32), "w"
    )
    nan = numpy_helper.from_array(np.array(np.nan, dtype=np.float32), "nanfill")
    big = numpy_helper.from_array(np.array(1e30, dtype=np.float32), "big")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Greater", ["c", "big"], ["mask"]),
        helper.make_node("Where", ["mask", "nanfill", "c"], ["y"]),
    ]
    inits = [w, big]
    if in_constant:
        nodes.insert(0, helper.make_node("Constant", [], ["nanfill"], value=nan))
    else:
        inits.append(nan)
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])]
    return _save(nodes, [X], out, inits, tmp_path / f"wnan_{in_constant}.onnx")


@pytest.mark.parametrize("in_constant", [False, True], ids=["initializer", "constant"])
def test_a_nan_fill_value_is_not_a_broken_weight(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, in_constant: bool
) -> None:
    model = _where_nan_model(tmp_path, in_constant)
    assert model_checks.nonfinite_weights(onnx.load(str(model))) == []
    code, out, err = run_cli(monkeypatch, capsys, "verify", str(model), str(model))
    assert code == 0, err
    assert "PASSED" in out + err
    assert not [line for line in err.splitlines() if line.startswith("warning: ") and "NaN" in line], err
