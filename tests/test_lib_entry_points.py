"""deployopt as a Python library, second bug bash (2026-12-07): load_model left onnxruntime's
process-wide log severity at a guessed 2; Analysis.conv_shapes priced plans apply_plan refuses
(frozen groups, widths 0, -8, 8.5); documented calls raised bare TypeError/AttributeError/
ValueError/KeyError on plausible bad input; library config errors named CLI options."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deployopt.coupling import analyze
from deployopt.errors import DataError, DeployoptError, ModelError, PlanError, StaticDimsError, TargetError
from deployopt.fidelity import CalibrationSet, load_calibration, verify_models
from deployopt.model import load_model
from deployopt.optimize import OptimizeConfig, Optimizer, check_config, optimize
from deployopt.surgery import apply_plan
from deployopt.targets import get_target
from deployopt.timing import check_run_counts
from deployopt.waves import aligned_widths, conv_rows, fit, predict, staircase

ROOT = Path(__file__).resolve().parents[1]
RESNET56 = ROOT / "examples" / "resnet56_pruned_cifar.onnx"


@pytest.fixture(scope="module")
def loaded() -> Any:
    return load_model(RESNET56)


@pytest.fixture(scope="module")
def analysis(loaded: Any) -> Any:
    return analyze(loaded)


# ------------------------------------------------------------------ 01: onnxruntime's log severity


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_load_model_leaves_the_callers_onnxruntime_severity(tmp_path: Path) -> None:
    """A caller who silenced onnxruntime (severity 3) had its warnings back after load_model folded
    a Constant: deployopt set 3, then "restored" a guessed 2 (onnxruntime has no getter)."""
    w = numpy_helper.from_array(np.random.default_rng(0).random((8, 3, 3, 3), dtype=np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(8, np.float32))
    nodes = [
        helper.make_node("Constant", [], ["b"], value=bias),
        helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1], name="conv"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])
    opset = [helper.make_opsetid("", 17)]
    onnx.save(
        helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=opset, ir_version=8),
        tmp_path / "m.onnx",
    )
    # onnxruntime warns "Removing initializer 'unused'" about this one at severity 2
    unused = numpy_helper.from_array(np.zeros(1, np.float32), "unused")
    g2 = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g2",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [unused],
    )
    # IR 8: onnxruntime 1.23 (Python 3.10's) reads up to 11, onnx 1.23 writes 14
    onnx.save(helper.make_model(g2, opset_imports=opset, ir_version=8), tmp_path / "unused.onnx")
    code = """
        import sys
        import onnxruntime as ort
        from deployopt.model import load_model
        ort.set_default_logger_severity({severity})
        assert any(n.op_type == "Constant" for n in __import__("onnx").load("m.onnx").graph.node)
        loaded = load_model("m.onnx")
        assert not any(n.op_type == "Constant" for n in loaded.model.graph.node)  # it was folded
        sys.stderr.write("--- session\\n"); sys.stderr.flush()
        ort.InferenceSession("unused.onnx", providers=["CPUExecutionProvider"])
    """
    quiet = _run(code.format(severity=3), tmp_path)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert quiet.stderr == "--- session\n"
    # the guard on the test: at the default severity onnxruntime does warn about that model
    loud = _run(code.format(severity=2), tmp_path)
    assert loud.returncode == 0, loud.stderr[-2000:]
    assert "Removing initializer 'unused'" in loud.stderr.split("--- session")[1]


def test_folding_quiets_its_own_sessions_and_leaves_stderr_alone(tmp_path: Path) -> None:
    """The sessions the fold opens are made with log severity 3 (their own SessionOptions), and
    stderr is not held: a line written to fd 2 during the fold, just before a native crash, shows
    (a hold through a temp file, then a pipe, lost it; review of d27ce72)."""
    code = """
        import ctypes, os
        import onnx_graphsurgeon as gs
        from deployopt.model import _quiet_fold_sessions
        import onnxruntime as ort

        with _quiet_fold_sessions():
            real = ort.capi.onnxruntime_inference_collection.InferenceSession
            assert issubclass(ort.InferenceSession, real)  # a stand-in subclass: isinstance holds
            os.write(2, b"said before the crash\\n")
            ctypes.string_at(0)
    """
    proc = _run(code, tmp_path)
    assert proc.returncode != 0
    assert proc.stderr.startswith("said before the crash\n"), proc.stderr[-2000:]


def test_fold_sessions_get_severity_3_and_the_class_comes_back() -> None:
    import onnxruntime as ort

    from deployopt.model import _quiet_fold_sessions

    original = ort.InferenceSession
    seen: list[int] = []

    class Spy(original):  # type: ignore[misc, valid-type]
        def __init__(self, path_or_bytes, sess_options=None, *args, **kwargs):
            seen.append(sess_options.log_severity_level)
            super().__init__(path_or_bytes, sess_options, *args, **kwargs)

    ort.InferenceSession = Spy
    try:
        with _quiet_fold_sessions():
            g = helper.make_graph(
                [helper.make_node("Relu", ["x"], ["y"])],
                "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
            )
            model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        assert ort.InferenceSession is Spy
    finally:
        ort.InferenceSession = original
    assert seen == [3]


# ------------------------------------------------------------------ 02: conv_shapes checks the plan


def _bad_plans(analysis: Any) -> list[dict[str, Any]]:
    frozen = next(g for g in analysis.groups if g.frozen)
    free = analysis.free_groups()[0].id
    return [{frozen.id: 64}, {free: 0}, {free: -8}, {free: 8.5}, {free: True}, {free: 2**31}]


def test_conv_shapes_refuses_what_apply_plan_refuses_in_its_words(loaded: Any, analysis: Any) -> None:
    """A frozen group's width was priced (139 µs for the stem against 24.9), a width of 0 or -8 was
    a ModelError blaming the model in predict, 8.5 a TypeError from pow2_align."""
    for plan in _bad_plans(analysis):
        with pytest.raises(PlanError) as by_apply:
            apply_plan(loaded.model, plan, analysis)
        with pytest.raises(PlanError) as by_shapes:
            analysis.conv_shapes(plan)
        with pytest.raises(PlanError) as by_shape:
            analysis.conv_shape("stem.conv", plan)
        assert str(by_shapes.value) == str(by_apply.value) == str(by_shape.value), plan
    frozen = next(g for g in analysis.groups if g.frozen)
    with pytest.raises(PlanError, match=rf"^group '{frozen.id}' is frozen \("):
        analysis.conv_shapes({frozen.id: 64})
    with pytest.raises(PlanError, match=r"^width of group 'stem\.conv' must be an integer, got 8\.5$"):
        analysis.conv_shapes({"stem.conv": 8.5})
    with pytest.raises(PlanError, match=r"^width of group 'stem\.conv' must be at least 1, got 0$"):
        analysis.conv_shape("stem.conv", {"stem.conv": 0})


def test_valid_plans_are_shaped_as_before_checked_or_not(analysis: Any) -> None:
    other = analysis.free_groups()[1].id
    plan = {"stem.conv": 24, other: np.int64(16)}  # numpy widths are widths too
    shapes = analysis.conv_shapes(plan)
    assert shapes == analysis.conv_shapes_unchecked(plan)
    assert shapes["stem.conv"].k == 24
    assert analysis.conv_shape("stem.conv", plan) == shapes["stem.conv"]
    # the unchecked variant, for the optimizer's own plans, takes them as they are
    frozen = next(g for g in analysis.groups if g.frozen)
    analysis.conv_shapes_unchecked({frozen.id: frozen.width})


# ------------------------------------------------------------------ 04: the documented entry points


def test_verify_models_takes_the_loaded_model(loaded: Any, analysis: Any) -> None:
    """verify_models(loaded, edited, calib) was a TypeError from pathlib, though analyze(loaded)
    and apply_plan take it."""
    plan = {g.id: -(-g.width // 32) * 32 for g in analysis.free_groups()}
    edited = apply_plan(loaded.model, plan, analysis)
    calib = load_calibration(ROOT / "calibration_data" / "cifar10", loaded.input_shapes, count=2)
    report = verify_models(loaded, edited, calib)
    assert report.check() == []  # padding is exact
    assert report.cosine_min == verify_models(loaded.model, edited, calib).cosine_min
    with pytest.raises(
        DataError, match=r"^the inputs to compare on: expected the CalibrationSet .*not a NoneType$"
    ):
        verify_models(RESNET56, edited, None)  # type: ignore[arg-type]
    with pytest.raises(ModelError, match=r"^the candidate model: expected a path, .*not a int$"):
        verify_models(loaded, 42, calib)  # type: ignore[arg-type]


def test_wave_functions_take_a_target_name(analysis: Any) -> None:
    """predict(shape, 'nano') and conv_rows(analysis, 'nano') were AttributeErrors on the str."""
    nano = get_target("nano")
    shape = analysis.convs[0].shape
    assert predict(shape, "nano") == predict(shape, nano)
    assert staircase(shape, "nano", "fp16", [8, 16]) == staircase(shape, nano, "fp16", [8, 16])
    assert aligned_widths(shape, "nano", "fp16", 16) == aligned_widths(shape, nano, "fp16", 16)
    assert conv_rows(analysis, "nano") == conv_rows(analysis, nano)
    with pytest.raises(TargetError, match=r"^expected a Target .*or a target's name, not a int$"):
        predict(shape, 42)  # type: ignore[arg-type]
    with pytest.raises(TargetError):
        predict(shape, "no-such-board")
    with pytest.raises(DeployoptError, match=r"^role must be 'out' or 'in', not 'output'$"):
        aligned_widths(shape, nano, "fp16", 16, role="output")


def test_fit_names_the_point_without_a_latency(analysis: Any) -> None:
    """A failed timing's 0 or NaN reached scipy ("Residuals are not finite in the initial point",
    after numpy's divide-by-zero warning); a point without measured_us was a KeyError."""
    nano = get_target("nano")
    points = [
        {"shape": c.shape, "measured_us": 10.0 + i, "id": f"s{i}"} for i, c in enumerate(analysis.convs[:6])
    ]
    cases = [
        ({"measured_us": 0.0}, r"^point 's5': measured_us 0\.0 is no latency"),
        ({"measured_us": math.nan}, r"^point 's5': measured_us nan is no latency"),
        ({"measured_us": -3.0}, r"^point 's5': measured_us -3\.0 is no latency"),
        ({"measured_us": "fast"}, r"^point 's5': measured_us 'fast' is no latency"),
        ({"id": None, "measured_us": math.inf}, r"^point 5: measured_us inf is no latency"),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's divide-by-zero warning came first
        for change, message in cases:
            with pytest.raises(DataError, match=message):
                fit([*points[:5], {**points[5], **change}], nano, "fp16")
        with pytest.raises(DataError, match=r"^point 's0' has no 'measured_us'$"):
            fit([{"shape": p["shape"], "id": p["id"]} for p in points], nano, "fp16")
        with pytest.raises(DataError, match=r"^point 2 is a tuple, not a dict"):
            fit([*points[:2], (1, 2), *points[3:]], nano, "fp16")  # type: ignore[list-item]
    assert fit(points, "nano", "fp16").fitted  # a name for the target, and good points, fit


def test_cache_root_may_be_a_str(tmp_path: Path) -> None:
    """OptimizeConfig(cache_root="/some/dir") was a TypeError (str / str) in LayerCache, where
    model_path and outdir took a str."""
    from deployopt.lut import LayerCache

    assert LayerCache("fp", "fp16", root=str(tmp_path)).dir.parent == tmp_path / "fp"
    cfg = OptimizeConfig(
        model_path=str(RESNET56),
        target="nano",
        backend="model",
        outdir=str(tmp_path / "o"),
        cache_root=str(tmp_path / "cache"),
        plots=False,
        fidelity=False,
        max_evals=3,
    )
    assert optimize(cfg).outdir == tmp_path / "o"


# ------------------------------------------------------------------ 05: the caller's words


@pytest.mark.parametrize(
    ("fields", "library", "cli"),
    [
        ({"mode": "lossy"}, "mode='lossy': choose one of", "--mode 'lossy': choose one of"),
        (
            {"max_evals": 1},
            "max_evals=1: must be at least 2 (the two baselines)",
            "--max-evals must be at least 2",
        ),
        ({"runs": 0}, "runs=0: must be between 1 and 100,000", "--runs 0: must be between 1 and 100,000"),
        ({"warmup": -1}, "warmup=-1: must be between 0 and 100,000", "--warmup -1: must be between 0 and"),
        ({"sweep_runs": 0}, "sweep_runs=0: must be between 1", "--sweep-runs 0: must be between 1"),
        ({"sms": 0}, "sms=0: must be a positive integer", "--sms must be a positive integer"),
        (
            {"mode": "trim", "min_cosine": 2.0},
            "min_cosine=2.0: expected a value between -1 and 1",
            "--min-cosine 2.0:",
        ),
        (
            {"mode": "trim", "min_top1": 1.5},
            "min_top1=1.5: expected a fraction between 0 and 1",
            "--min-top1 1.5:",
        ),
        (
            {"mode": "trim", "max_trim": 2.0},
            "max_trim=2.0: must be between 0 and 1",
            "--max-trim 2.0: must be",
        ),
        (
            {"resume": True, "force": True},
            "resume and force exclude each other",
            "--resume and --force exclude",
        ),
        (
            {"timing_cache": "t.cache", "no_timing_cache": True},
            "timing_cache and no_timing_cache exclude each other",
            "--timing-cache and --no-timing-cache exclude each other",
        ),
    ],
)
def test_config_errors_name_the_field_a_library_caller_wrote(
    tmp_path: Path, fields: dict[str, Any], library: str, cli: str
) -> None:
    cfg = OptimizeConfig(model_path=RESNET56, target="nano", backend="model", outdir=tmp_path / "o", **fields)
    with pytest.raises(DeployoptError) as info:
        check_config(cfg)
    assert str(info.value).startswith(library), str(info.value)
    assert "--" not in str(info.value).split(":")[0], str(info.value)
    with pytest.raises(DeployoptError) as info:
        check_config(cfg, cli=True)
    assert str(info.value).startswith(cli), str(info.value)


def test_a_timing_cache_on_the_wave_model_names_the_field(tmp_path: Path) -> None:
    cfg = OptimizeConfig(model_path=RESNET56, target="nano", backend="model", no_timing_cache=True)
    with pytest.raises(DeployoptError, match=r"^no_timing_cache: backend 'model' builds no TensorRT"):
        Optimizer(cfg)
    with pytest.raises(DeployoptError, match=r"^--no-timing-cache: backend 'model' builds no TensorRT"):
        Optimizer(cfg, cli=True)


def test_input_shapes_that_change_a_fixed_dim_name_the_field(tmp_path: Path) -> None:
    """optimize(OptimizeConfig(input_shapes=...)) said `--input-shape sets its batch ...`."""
    cfg = OptimizeConfig(
        model_path=RESNET56,
        target="nano",
        backend="model",
        outdir=tmp_path / "o",
        input_shapes={"input": [1, 4, 32, 32]},
    )
    tail = (
        "sets its batch and its dynamic (?) dims only, got 1×4×32×32 (export the model at that size instead)"
    )
    with pytest.raises(StaticDimsError) as info:
        optimize(cfg)
    assert str(info.value) == f"input 'input' is 1×3×32×32 in the file; input_shapes {tail}"
    assert (info.value.name, info.value.have, info.value.want) == ("input", [1, 3, 32, 32], [1, 4, 32, 32])
    with pytest.raises(StaticDimsError) as info:
        Optimizer(cfg, cli=True).run()
    assert str(info.value) == f"input 'input' is 1×3×32×32 in the file; --input-shape {tail}"
    assert not (tmp_path / "o").exists()


def test_run_count_checks_keep_the_cli_words_by_default() -> None:
    """Guard: bench, calibrate and the backends call check_run_counts with the options' names."""
    with pytest.raises(DeployoptError, match=r"^--runs 0: must be between 1 and 100,000$"):
        check_run_counts(0)
    with pytest.raises(DeployoptError, match=r"^--warmup -1: must be between 0 and 100,000$"):
        check_run_counts(1, -1)


def test_a_calibration_set_is_still_accepted_as_made_in_code() -> None:
    """Guard: compare_models takes a CalibrationSet built by hand (tests and callers do)."""
    from deployopt.fidelity import check_calibration_set

    check_calibration_set(CalibrationSet([{"x": np.zeros((1,), np.float32)}], "code", True))
    with pytest.raises(DataError):
        check_calibration_set([{"x": np.zeros((1,), np.float32)}])


def test_a_frozen_group_at_its_own_width_is_a_valid_plan(loaded: Any, analysis: Any) -> None:
    """Review of d27ce72: the analysis's own `{g.id: g.width}` map (what the optimizer prices, and
    what a library caller copying it passes) was refused ("group 'input:input' is frozen"), though
    it changes nothing; it is priced and applied as the model it is. Another width stays refused."""
    ident = {g.id: g.width for g in analysis.groups}
    assert analysis.conv_shapes(ident) == analysis.conv_shapes_unchecked(ident)
    assert apply_plan(loaded, ident, analysis) is not None
    frozen = next(g for g in analysis.groups if g.frozen)
    with pytest.raises(PlanError, match="is frozen"):
        analysis.conv_shapes({**ident, frozen.id: frozen.width + 1})
