"""deployopt used as a Python library does what the CLI does (the 2026-12 library bug bash): the
checks and steps `deployopt optimize` and `deployopt apply` run live in the library functions they
call, so a caller of OptimizeConfig/optimize, apply_plan, load_model, analyze or get_target gets the
same dtype, the same refusals and the same written model, each refusal a one-line DeployoptError."""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from deployopt.backends.base import MeasureOptions, get_backend
from deployopt.coupling import analyze
from deployopt.errors import DeployoptError, ModelError, PlanError, TargetError
from deployopt.model import load_model
from deployopt.optimize import OptimizeConfig, Optimizer, check_config, optimize
from deployopt.surgery import apply_plan, channel_order
from deployopt.targets import get_target
from deployopt.zoo import resnet_projection, with_dynamic_batch

ROOT = Path(__file__).resolve().parents[1]
RESNET56 = ROOT / "examples" / "resnet56_pruned_cifar.onnx"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small residual net (32×32, widths 16 … 128): fast to predict and to time on the CPU."""
    path = tmp_path_factory.mktemp("small") / "net.onnx"
    onnx.save(resnet_projection(), str(path))
    return path


@pytest.fixture(scope="module")
def qdq(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from test_coupling_qdq import qdq_net

    path = tmp_path_factory.mktemp("qdq") / "q.onnx"
    onnx.save(qdq_net(), str(path))
    return path


def config(model: Path, out: Path, **fields: Any) -> OptimizeConfig:
    base: dict[str, Any] = dict(target="h200", backend="model", plots=False, fidelity=False, max_evals=2)
    return OptimizeConfig(model_path=model, outdir=out, **{**base, **fields})


# ------------------------------------------------------------------ item 2: the caller's session


def test_a_session_opened_with_other_options_than_the_config_is_refused(small: Path, tmp_path: Path) -> None:
    """optimize(cfg, session=...) timed with the session's options (7 runs) while report.md and the
    journal's start record (which --resume trusts) said the config's (50): refused, each field named,
    before anything is loaded or written."""
    with get_backend("ort").open(MeasureOptions(dtype="fp32", runs=7, warmup=1)) as session:
        cfg = config(small, tmp_path / "o", backend="ort", dtype="fp32", runs=50, warmup=5, sweep_runs=5)
        with pytest.raises(DeployoptError) as info:
            optimize(cfg, session=session)
    assert str(info.value) == (
        "the session given was opened with other options than the config's: runs 7 (config: 50), "
        "warmup 1 (config: 5); open it with the config's options, or give the config the session's"
    )
    assert not (tmp_path / "o").exists()
    # the wave model times nothing, so its runs are not compared; its dtype and SMs are
    options = MeasureOptions(dtype="fp32", extra={"target": get_target("h200")})
    differ = r"dtype 'fp32' \(config: 'fp16'\), sms None \(config: 8\)"
    with get_backend("model").open(options) as session, pytest.raises(DeployoptError, match=differ):
        optimize(config(small, tmp_path / "p", dtype="fp16", sms=8), session=session)


def test_a_session_opened_with_the_config_options_runs(small: Path, tmp_path: Path) -> None:
    options = MeasureOptions(dtype="fp16", sms=8, extra={"target": get_target("h200", sms=8)})
    with get_backend("model").open(options) as session:
        res = optimize(config(small, tmp_path / "o", dtype="fp16", sms=8), session=session)
    assert res.report["dtype"] == "fp16" and (tmp_path / "o" / "report.json").is_file()


# ------------------------------------------------------------------ item 3: the default dtype


def test_the_config_dtype_defaults_as_the_cli_does(small: Path, qdq: Path, tmp_path: Path) -> None:
    """OptimizeConfig's dtype was the literal "fp16": a Q/DQ model was timed in fp16 where the CLI
    takes int8, and backend ort refused fp16 where the CLI takes the model's fp32."""
    assert OptimizeConfig(model_path=small, target="h200").dtype is None
    assert Optimizer(config(qdq, tmp_path / "q")).cfg.dtype == "int8"
    assert Optimizer(config(small, tmp_path / "s", backend="ort")).cfg.dtype == "fp32"
    assert Optimizer(config(small, tmp_path / "m")).cfg.dtype == "fp16"
    assert Optimizer(config(qdq, tmp_path / "g", dtype="fp16")).cfg.dtype == "fp16"  # given: kept
    res = optimize(config(qdq, tmp_path / "run"))
    assert res.report["dtype"] == "int8"


def test_a_quantized_model_on_a_target_without_int8_says_where_int8_came_from(
    qdq: Path, tmp_path: Path
) -> None:
    with pytest.raises(TargetError) as info:
        optimize(config(qdq, tmp_path / "o", target="nano"))
    assert str(info.value).startswith(
        "q.onnx is quantized (Q/DQ nodes), so it runs in INT8, which Jetson Nano"
    )
    assert "(dtype='fp16' predicts fp16 widths" in str(info.value)  # the field, not --dtype
    assert not (tmp_path / "o").exists()
    with pytest.raises(TargetError, match=r"^--dtype int8: Jetson Nano"):  # asked for: the target's words
        optimize(config(qdq, tmp_path / "o", target="nano", dtype="int8"))


# ------------------------------------------------------------------ item 4: the CLI's checks


@pytest.mark.parametrize(
    ("fields", "library", "cli"),
    [
        (
            {"batch": 2, "input_shapes": {"input": [1, 3, 32, 32]}},
            "batch=2 and input_shapes['input']=[1, 3, 32, 32] disagree on the batch of 'input' (1); "
            "give one of them, or the same batch in both",
            "--batch 2 and --input-shape input:1x3x32x32 disagree on the batch of 'input' (1); "
            "give one of them, or the same batch in both",
        ),
        ({"batch": 0}, "batch=0: must be a whole number, at least 1", "--batch must be at least 1"),
        (
            {"max_trim": 0.3},
            "max_trim=0.3 applies to mode='trim' only (mode 'lossless' keeps the outputs equal)",
            "--max-trim 0.3 applies to --mode trim only (mode 'lossless' keeps the outputs equal)",
        ),
        (
            {"fidelity_samples": 0},
            "fidelity_samples 0: must be at least 1 (calibration samples the fidelity check runs)",
            "fidelity_samples 0: must be at least 1 (calibration samples the fidelity check runs)",
        ),
        ({"timeout_s": -1.0}, "timeout_s -1: must be a number of seconds above 0", None),
    ],
)
def test_the_cli_checks_are_the_library_checks_in_the_callers_words(
    small: Path, tmp_path: Path, fields: dict[str, Any], library: str, cli: str | None
) -> None:
    """OptimizeConfig(batch=2, input_shapes={"input": [1, 3, 32, 32]}) ran at batch 1 and
    max_trim=0.3 in lossless mode was ignored, where the CLI refused both; fidelity_samples=0 said
    "--count must be >= 1", an option optimize does not have."""
    cfg = config(small, tmp_path / "o", **fields)
    with pytest.raises(DeployoptError) as info:
        check_config(cfg)
    assert str(info.value).startswith(library), str(info.value)
    if cli is not None:
        with pytest.raises(DeployoptError) as info:
            check_config(cfg, cli=True)
        assert str(info.value).startswith(cli), str(info.value)
    with pytest.raises(DeployoptError):  # optimize() itself, before anything is written
        optimize(cfg)
    assert not (tmp_path / "o").exists()


def test_settings_that_agree_pass(small: Path, tmp_path: Path) -> None:
    check_config(config(small, tmp_path / "o", batch=2, input_shapes={"input": [2, 3, 32, 32]}))
    check_config(config(small, tmp_path / "o", mode="trim", max_trim=0.3, min_cosine=0.9))
    # the gate's settings are unused outside trim, and one config may serve both modes (the benchmark)
    check_config(config(small, tmp_path / "o", mode="lossless", fidelity_gate=False, min_top1=0.5))


# ------------------------------------------------------------------ item 5: the documented API


def test_the_documented_python_api_keeps_a_dynamic_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/surgery.md's "Python API" snippet, run as written on a dynamic-batch export: it wrote a
    batch-1 model (save_model at the loaded shapes) where `deployopt apply` restores the batch."""
    import onnxruntime as ort

    text = (ROOT / "docs" / "surgery.md").read_text()
    snippet = re.search(r"## Python API\n\n```python\n(.*?)```", text, re.S)
    assert snippet is not None
    onnx.save(with_dynamic_batch(resnet_projection(image_size=224)), str(tmp_path / "model.onnx"))
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet[1], "docs/surgery.md", "exec"), {})
    session = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((4, 3, 224, 224), dtype=np.float32)
    (logits,) = session.run(None, {"input": x})
    assert logits.shape == (4, 10)


def test_apply_plan_takes_the_loaded_model_and_save_edited_restores_the_batch(tmp_path: Path) -> None:
    from deployopt.surgery import save_edited

    onnx.save(with_dynamic_batch(resnet_projection()), str(tmp_path / "dyn.onnx"))
    loaded = load_model(tmp_path / "dyn.onnx")
    analysis = analyze(loaded)
    g = analysis.free_groups()[0]
    edited = apply_plan(loaded, {g.id: g.width + 8}, analysis)
    notices = save_edited(edited, tmp_path / "out.onnx", loaded)
    assert any("dynamic batch" in n for n in notices), notices
    dim = onnx.load(str(tmp_path / "out.onnx")).graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param == "batch"
    with pytest.raises(ModelError, match="save_edited needs the LoadedModel"):
        save_edited(edited, tmp_path / "x.onnx", loaded.model)  # type: ignore[arg-type]


# ------------------------------------------------------------------ item 6: conv_shapes' keys


def test_conv_shapes_reads_a_plan_as_apply_plan_does() -> None:
    """A plan keyed by a producer name (which apply_plan accepts) priced the group at its old width,
    and a typo was priced as no change, without a word."""
    analysis = analyze(load_model(RESNET56))
    by_producer = {"layer1.0.conv2.conv": 32}  # a producer of group 'stem.conv' (16 wide)
    by_id = analysis.plan_by_id(by_producer)
    assert by_id == {"stem.conv": 32}
    assert analysis.conv_shapes(by_producer) == analysis.conv_shapes(by_id)
    assert analysis.conv_shapes(by_producer)["stem.conv"].k == 32
    assert analysis.conv_shape("stem.conv", by_producer).k == 32
    with pytest.raises(PlanError, match=r"^unknown channel group 'stem\.cnov'"):
        analysis.conv_shapes({"stem.cnov": 32})
    with pytest.raises(PlanError, match=r"^unknown channel group 'stem\.cnov'"):
        analysis.conv_shape("stem.conv", {"stem.cnov": 32})


# ------------------------------------------------------------------ item 7: input dims


@pytest.mark.parametrize("dims", [[0, 3, 32, 32], [-1, 3, 32, 32], [1.0, 3, 32, 32], [1, 3, 32, True], []])
def test_load_model_refuses_input_dims_that_are_no_size(dims: list[Any]) -> None:
    """A batch of 0 or -1 was loaded and analysed as if valid; 1.0 was a TypeError from protobuf."""
    with pytest.raises(
        ModelError, match=r"^input shape for 'input': \[.*\]: .*(every dim is a size|no dims)"
    ):
        load_model(RESNET56, {"input": dims})


def test_load_model_takes_a_tuple_or_numpy_dims_and_refuses_a_string() -> None:
    assert load_model(RESNET56, {"input": (2, 3, 32, 32)}).input_shapes == {"input": [2, 3, 32, 32]}
    assert load_model(RESNET56, {"input": np.array([2, 3, 32, 32])}).input_shapes == {"input": [2, 3, 32, 32]}
    with pytest.raises(
        ModelError, match=r"must be a list of dims such as \[1, 3, 224, 224\], got '1x3x32x32'"
    ):
        load_model(RESNET56, {"input": "1x3x32x32"})  # type: ignore[dict-item]


# ------------------------------------------------------------------ item 8: matplotlib's backend


def test_plotting_leaves_the_process_matplotlib_backend_alone(tmp_path: Path) -> None:
    """plot_staircase called matplotlib.use("Agg"): a notebook's inline backend (or a GUI's) was
    switched for the whole process by a library call that writes a PNG."""
    import matplotlib

    from deployopt.plots import plot_staircase

    before = matplotlib.get_backend()
    try:
        matplotlib.use("svg")
        out = plot_staircase(
            [8, 16, 24, 32], tmp_path / "s.png", predicted_us=[1, 1, 2, 2], waves=[1, 1, 2, 2]
        )
        assert matplotlib.get_backend() == "svg"
        assert out.read_bytes().startswith(b"\x89PNG")
        plot_staircase(
            [8, 16], tmp_path / "s.svg", measured_us=[1.0, None], measured_quartiles_us=[(0.9, 1.2), None]
        )
        assert b"<svg" in (tmp_path / "s.svg").read_bytes()[:400]
    finally:
        matplotlib.use(before)


# ------------------------------------------------------------------ item 10: the targets cache


def test_a_target_is_the_callers_own() -> None:
    """get_target returned the process's cached built-in itself: a what-if edit of its params
    changed what every later get_target("h100") predicted."""
    from deployopt.layers import ConvShape
    from deployopt.waves import predict

    shape = ConvShape(
        n=8, c=256, h=56, w=56, k=256, r=3, s=3, stride=(1, 1), pad=(1, 1), dilation=(1, 1), groups=1
    )
    fresh = predict(shape, get_target("h100"), "fp16").predicted_us
    mine = get_target("h100")
    mine.params["fp16"] = mine.params["fp32"]
    mine.sources["sms"] = "edited"
    assert predict(shape, get_target("h100"), "fp16").predicted_us == fresh
    assert get_target("h100").sources.get("sms") != "edited"
    assert predict(shape, mine, "fp16").predicted_us != fresh  # the caller's copy has the edit
    copy = pickle.loads(pickle.dumps(get_target("h100", sms=8)))  # as a worker gets it
    assert copy.to_json() == get_target("h100", sms=8).to_json()


def test_get_target_takes_a_path_and_refuses_what_is_no_name(tmp_path: Path) -> None:
    import json

    profile = tmp_path / "mine.json"
    profile.write_text(json.dumps(dict(get_target("orin-nano-8gb").to_json(), clock_mhz=510.0)))
    target = get_target(profile)
    assert target.name == "orin-nano-8gb" and target.clock_mhz == 510.0
    with pytest.raises(TargetError, match="no such file"):
        get_target(tmp_path / "missing.json")
    with pytest.raises(TargetError, match=r"^a target is a name .* not a int$"):
        get_target(8)  # type: ignore[arg-type]


# ------------------------------------------------------------------ item 11: bad library input


@pytest.fixture(scope="module")
def resnet56() -> tuple[Any, Any]:
    loaded = load_model(RESNET56)
    return loaded, analyze(loaded.model)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"importance": "2-D"},
            r"^importance of group 'stem.conv': one value per channel \(16\), not an array",
        ),
        ({"importance": "nan"}, r"^importance of group 'stem.conv' holds NaN or infinite values"),
        ({"importance": "short"}, r"^importance of group 'stem.conv': 3 values for 16 channels$"),
        (
            {"keep": ["a", "b"]},
            r"^channels kept by group 'stem.conv' must be integers \(channel indices\), got 'a'$",
        ),
        (
            {"keep": [0.5, 1.5]},
            r"^channels kept by group 'stem.conv' must be integers \(channel indices\), got 0.5$",
        ),
        ({"keep": 5}, r"^channels kept by group 'stem.conv' must be a list of channel indices, got 5$"),
    ],
)
def test_bad_importance_or_kept_channels_are_a_plan_error(
    resnet56: tuple[Any, Any], kwargs: dict[str, Any], message: str
) -> None:
    """A 2-D importance was numpy's "all keys need to be the same shape"; kept channels "a" were a
    ValueError from int(), and 0.5, 1.5 were kept as channels 0 and 1 without a word."""
    loaded, analysis = resnet56
    arrays = {"2-D": np.ones((16, 2)), "nan": np.full(16, np.nan), "short": np.ones(3)}
    if "importance" in kwargs:
        kwargs = {"importance": {"stem.conv": arrays[kwargs["importance"]]}}
        with pytest.raises(PlanError, match=message):
            channel_order(loaded.model, analysis, "stem.conv", kwargs["importance"]["stem.conv"])
        width = 14
    else:
        kwargs = {"keep": {"stem.conv": kwargs["keep"]}}
        width = 2
    with pytest.raises(PlanError, match=message):
        apply_plan(loaded.model, {"stem.conv": width}, analysis, **kwargs)


def test_unknown_convs_paths_and_lists_are_one_line_errors(resnet56: tuple[Any, Any]) -> None:
    loaded, analysis = resnet56
    with pytest.raises(
        ModelError, match=r"^no conv named 'nope' in the analysed model \(its convs include: 'stem.conv'"
    ):
        analysis.conv_shape("nope", {})
    with pytest.raises(ModelError, match="no conv named 'nope'"):
        analysis.conv_shapes({}, only=["nope"])
    with pytest.raises(ModelError, match=r"give a loaded model, not a path: load_model\('m.onnx'\) first"):
        analyze("m.onnx")  # type: ignore[arg-type]
    with pytest.raises(ModelError, match=r"^expected an onnx\.ModelProto or the LoadedModel"):
        analyze(42)  # type: ignore[arg-type]
    assert [g.to_json() for g in analyze(loaded).groups] == [g.to_json() for g in analysis.groups]
    with pytest.raises(PlanError, match=r"widths map group ids to widths .*not a list"):
        apply_plan(loaded.model, [("stem.conv", 16)], analysis)  # type: ignore[arg-type]
