"""Edges of the wave-model commands a bug bash found: calibrate on another GPU overwrote a built-in
target's profile, depthwise predictions named the GEMM fit or a fit of another GPU as their source,
analyze searched a reversed span, a plot said '1 waves', '1_28' and full-width digits parsed as
numbers, and cached profiles under new names were missing from `deployopt targets`."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from cli_runner import run_cli

from deployopt.targets import get_target
from deployopt.waves import predict

run = run_cli


def _gpu_backend(truth: Any, env: dict[str, Any]) -> Any:
    """A measuring backend whose timings are `truth`'s predictions, recording `env` as the GPU."""
    from deployopt.backends import base
    from deployopt.timing import Timing

    class Session(base.Session):
        runs_on_gpu = True

        def measure(self, model_path):  # pragma: no cover - measure_convs is what calibrate calls
            raise AssertionError

        def measure_convs(self, shapes):
            self.timed = getattr(self, "timed", 0) + len(shapes)
            us = [predict(s, truth, self.options.dtype).predicted_us for s in shapes]
            return [Timing("fake", [u, u * 1.01, u * 0.99], environment=dict(env)) for u in us]

    class Backend(base.Backend):
        name = "fake"
        description = "test stand-in"
        can_limit_sms = True

        def availability(self):
            return True, "test"

        def open(self, options):
            self.check_options(options)
            self.session = Session(self, options)
            return self.session

    return Backend()


H200_ENV = {"gpu": "NVIDIA H200", "sms": 132, "compute_capability": "9.0"}


def test_calibrate_on_another_gpu_does_not_replace_a_builtin_targets_profile(monkeypatch, capsys, tmp_path):
    """`calibrate --target orin-nano-8gb` on an H200 wrote targets/orin-nano-8gb.json, and every
    later `--target orin-nano-8gb` predicted the H200's 14.6 µs for a conv the Orin takes 452 µs for.
    Now one line, after the first chunk, nothing written; --name or -o keep it apart."""
    from deployopt.backends import base

    backend = _gpu_backend(get_target("h200"), H200_ENV)
    monkeypatch.setattr(base, "get_backend", lambda name: backend)
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    args = ["calibrate", "--target", "orin-nano-8gb", "--measure", "fake", "--runs", "3"]
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    said = " ".join(err.split())
    assert (
        "the timings are NVIDIA H200's (132 SMs, the target 8; compute capability 9.0, the target 8.7)"
        in said
    )
    assert "replace what --target orin-nano-8gb predicts; give --name NAME or -o FILE" in said, said
    assert not (tmp_path / "cache" / "targets" / "orin-nano-8gb.json").exists()
    assert backend.session.timed == 16  # stopped after the first chunk of 64 convs
    shape = "8x128x28x28"
    code, out, _ = run(
        monkeypatch,
        capsys,
        "staircase",
        "--target",
        "orin-nano-8gb",
        "--input",
        shape,
        "--out-channels",
        "128",
        "--json",
    )
    assert json.loads(out)["predictor"]["params"] == "cc8.7-fp16 default"
    code, out, err = run(monkeypatch, capsys, *args, "--name", "h200-as-orin", "--out-channels", "32:256:32")
    assert code == 0 and (tmp_path / "cache" / "targets" / "h200-as-orin.json").exists(), err


@pytest.mark.parametrize("sms", [None, "8"])
def test_calibrate_on_the_targets_own_gpu_writes_its_profile(monkeypatch, capsys, tmp_path, sms):
    """The GPU the timings record is the target (or its --sms what-if): the profile is written, and
    its depthwise terms, which this sweep did not measure, say whose they are."""
    from deployopt.backends import base

    env = dict(H200_ENV, sms=int(sms or 132))
    monkeypatch.setattr(base, "get_backend", lambda name: _gpu_backend(get_target("h200"), env))
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    extra = ["--sms", sms] if sms else []
    code, _, err = run(
        monkeypatch,
        capsys,
        "calibrate",
        "--target",
        "h200",
        "--measure",
        "fake",
        "--out-channels",
        "32:256:32",
        *extra,
    )
    assert code == 0, err
    name = "h200" if sms is None else "h200-8sm"
    doc = json.loads((tmp_path / "cache" / "targets" / f"{name}.json").read_text())
    assert doc["params"]["fp16"]["dw_source"] == (
        "kept from 'h200-fp16 fit' (fitted on 864 measured depthwise points (18 sweeps)): no depthwise conv "
        "in this fit"
    )


def test_depthwise_sources_say_where_the_terms_come_from(monkeypatch, capsys):
    """The Orin's depthwise terms are the H200's scaled by clock, but said "fitted on 864 measured
    depthwise points"; a depthwise staircase named the GEMM fit as its prediction's source."""
    code, out, _ = run(monkeypatch, capsys, "targets", "--target", "orin-nano-8gb", "--json")
    params = json.loads(out)["params"]
    assert params["fp16"]["dw_source"] == (
        "derived from the H200 fp16 fit's depthwise terms (fitted on 864 measured depthwise points (18 "
        "sweeps)) scaled by clock (625 vs 1980 MHz); not measured on this GPU"
    )
    assert (
        "no INT8 fit exists" in params["int8"]["dw_source"]
        and "scaled by clock" in params["int8"]["dw_source"]
    )
    code, out, _ = run(monkeypatch, capsys, "targets", "--target", "h200", "--json")
    assert "no INT8 fit exists" in json.loads(out)["params"]["int8"]["dw_source"]
    assert (
        json.loads(out)["params"]["fp16"]["dw_source"]
        == "fitted on 864 measured depthwise points (18 sweeps)"
    )
    args = [
        "staircase",
        "--target",
        "h200",
        "--input",
        "8x128x28x28",
        "--groups",
        "128",
        "--out-channels",
        "16:64:16",
    ]
    code, out, _ = run(monkeypatch, capsys, *args)
    line = next(line for line in out.splitlines() if line.startswith("pred µs:"))
    assert line.endswith("its depthwise terms: fitted on 864 measured depthwise points (18 sweeps)"), line
    assert "least-squares" not in line and "cuDNN sweeps" not in line
    code, out, _ = run(monkeypatch, capsys, *args, "--json")
    assert json.loads(out)["predictor"]["source"] == "fitted on 864 measured depthwise points (18 sweeps)"
    code, out, _ = run(monkeypatch, capsys, *args[:-4], "--out-channels", "16:64:16", "--json")  # dense
    assert code == 0
    assert json.loads(out)["predictor"]["source"].startswith("fitted on 5568 measured points")


def test_analyze_never_searches_a_reversed_span(monkeypatch, capsys, tmp_path):
    """Widths 1-4 (under half of fp16's vector of 8) showed 'flat 8–2 (no step)', JSON [8, 2]."""
    import onnx

    from deployopt.zoo.builder import GraphBuilder

    b = GraphBuilder(seed=0, opset=17, batch=1, image_size=16)
    x = b.input_name
    for width in (1, 2, 3, 5, 4):
        x = b.conv_bn(x, width, 3, name=f"c{width}")
    path = tmp_path / "tiny.onnx"
    onnx.save(b.build(b.classifier(x, 10), graph_name="tiny"), str(path))
    code, out, err = run(monkeypatch, capsys, "analyze", str(path), "--target", "h200", "--json")
    assert code == 0, err
    spans = [w["searched"] for c in json.loads(out)["waves"]["convs"] for w in c["widths"]]
    assert spans and all(lo <= hi for lo, hi in spans), spans
    assert [8, 8] in spans
    code, out, err = run(monkeypatch, capsys, "analyze", str(path), "--target", "h200")
    flat = re.findall(r"flat (\d+)–(\d+)", " ".join(out.split()))
    assert all(int(lo) <= int(hi) for lo, hi in flat), flat


def test_a_plot_says_1_wave(tmp_path):
    import matplotlib

    from deployopt.plots import plot_staircase

    path = tmp_path / "s.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text, not as paths
        plot_staircase([16, 32, 48], path, predicted_us=[1.0, 1.0, 2.0], waves=[1, 1, 2])
    svg = path.read_text()
    assert ">1 wave<" in svg and ">2 waves<" in svg and "1 waves" not in svg


def test_plot_bars_span_the_quartiles_not_the_median_plus_minus_half_the_iqr(tmp_path, monkeypatch):
    """Skewed samples [10]*4 + [11] + [30]*3: quartiles 10 and 30 around a median of 10.5. Bars of
    median ± IQR/2 ran from 0.5 to 20.5, below every sample; they span 10 to 30."""
    from matplotlib.axes import Axes

    from deployopt.plots import plot_staircase
    from deployopt.timing import Timing

    t = Timing(backend="fake", samples_us=[10.0] * 4 + [11.0] + [30.0] * 3)
    assert t.quartiles_us == (10.0, 30.0) and t.median_us == 10.5
    drawn: list[Any] = []
    errorbar = Axes.errorbar

    def spy(self, x, y, **kw):
        drawn.append((list(y), kw["yerr"]))
        return errorbar(self, x, y, **kw)

    monkeypatch.setattr(Axes, "errorbar", spy)
    plot_staircase(
        [16, 32],
        tmp_path / "s.png",
        measured_us=[t.median_us, 12.0],
        measured_quartiles_us=[t.quartiles_us, None],
    )
    ((ys, (below, above)),) = drawn
    assert [y - b for y, b in zip(ys, below)] == [10.0, 12.0]
    assert [y + a for y, a in zip(ys, above)] == [30.0, 12.0]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--input", "8x1_28x28x28"),  # ran as 128 channels
        ("--input", "８x128x28x28"),  # full-width 8
        ("--out-channels", "１６:３２"),
        ("--out-channels", "16,3_2"),
        ("--kernel", "３"),
    ],
)
def test_sizes_take_ascii_digits_only(monkeypatch, capsys, option, value):
    given = {"--input": "8x128x28x28", "--out-channels": "16:32:16", "--kernel": "3", option: value}
    args = [a for pair in given.items() for a in pair]
    code, out, err = run(monkeypatch, capsys, "staircase", "--target", "h200", *args)
    assert code == 2 and out == "" and err.startswith(f"error: {option} {value!r}: expected "), err
    assert err.count("\n") == 1


def test_cached_profiles_are_listed_once_and_under_new_names(monkeypatch, capsys, tmp_path):
    """A cached h100.json made the unknown-target error list h100 twice; a profile calibrated under
    a new name (`--name mine`) was missing from `deployopt targets`, though --target mine loads it."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "targets"
    cache.mkdir(parents=True)
    facts = get_target("h200").to_json()
    params = {dt: dict(p, fitted=True) for dt, p in facts.pop("params").items() if dt != "int8"}
    for name in ("h100", "mine"):
        doc = {"deployopt_profile": 1, "target": dict(facts, name=name), "params": params}
        (cache / f"{name}.json").write_text(json.dumps(doc))
    code, _, err = run(monkeypatch, capsys, "targets", "--target", "h1000")
    assert code == 2 and " ".join(err.split()).count("h100,") == 1 and "mine" in err, err
    code, out, err = run(monkeypatch, capsys, "targets")
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.split()[:1] == ["mine"])
    assert "calibrated:" in row
    assert f"calibrated:{cache / 'mine.json'}" in re.sub(r"[\s│]", "", out), out
    code, out, err = run(monkeypatch, capsys, "targets", "--json")
    entry = next(t for t in json.loads(out) if t["name"] == "mine")
    assert entry["origin"] == str(cache / "mine.json")
    (cache / "broken.json").write_text("{")  # a warning, the rest listed
    code, out, err = run(monkeypatch, capsys, "targets", "--json")
    assert code == 0 and any(t["name"] == "mine" for t in json.loads(out))
    assert err.startswith("warning: broken: cannot read target profile") and err.count("\n") == 1, err


def test_targets_page_names_the_depthwise_source(monkeypatch, capsys):
    code, out, _ = run(monkeypatch, capsys, "targets", "--target", "orin-nano-8gb")
    assert code == 0
    text = " ".join(out.split())
    assert "fp16 depthwise: derived from the H200 fp16 fit's depthwise terms" in text, text


def test_a_cached_profile_is_listed_under_the_name_target_reaches_it_by(monkeypatch, capsys, tmp_path):
    """calibrate's h200-8sm profile copied in as h200.json replaced the h200 row under the name
    h200-8sm, which `--target h200-8sm` then called unknown; it is listed, and loads, as h200."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    cache = tmp_path / "cache" / "targets"
    cache.mkdir(parents=True)
    facts = get_target("h200").to_json()
    params = {dt: dict(p, fitted=True) for dt, p in facts.pop("params").items() if dt != "int8"}
    doc = {"deployopt_profile": 1, "target": dict(facts, name="h200-8sm", sms=8), "params": params}
    (cache / "h200.json").write_text(json.dumps(doc))
    code, out, err = run(monkeypatch, capsys, "targets", "--json")
    assert code == 0, err
    names = [t["name"] for t in json.loads(out)]
    assert "h200-8sm" not in names and names.count("h200") == 1, names
    entry = next(t for t in json.loads(out) if t["name"] == "h200")
    assert entry["origin"] == str(cache / "h200.json") and entry["sms"] == 8
    assert get_target("h200").name == "h200"


def test_an_edited_builtin_profile_names_the_file_as_the_source_of_what_changed(
    monkeypatch, capsys, tmp_path
):
    """docs/wave_model.md's power-mode what-if (`targets --target T --json`, clock_mhz edited): the
    data sheet's "625 MHz max" was printed as the source beside 1020 MHz."""
    code, out, err = run(monkeypatch, capsys, "targets", "--target", "orin-nano-8gb", "--json")
    assert code == 0, err
    doc = json.loads(out)
    sheet = doc["sources"]["clock_mhz"]
    doc["clock_mhz"] = 1020
    path = tmp_path / "super.json"
    path.write_text(json.dumps(doc))
    edited = get_target(str(path))
    assert edited.sources["clock_mhz"] == f"edited in {path} (built-in orin-nano-8gb: 625.0)"
    assert edited.sources["sms"] == doc["sources"]["sms"]  # what was not edited keeps its source
    assert get_target("orin-nano-8gb").sources["clock_mhz"] == sheet


def test_plot_legend_sits_outside_the_axes(tmp_path, monkeypatch):
    """CPU-measured points far above a GPU's predicted steps leave no corner of the axes free: the
    legend, inside at "lower right", hid the predicted steps there. It sits below the axes."""
    from matplotlib.figure import Figure

    from deployopt.plots import plot_staircase

    seen: list[tuple[Any, Any]] = []
    savefig = Figure.savefig

    def spy(self, *args, **kw):
        self.canvas.draw()
        (ax,) = self.axes
        seen.append((ax.get_legend().get_window_extent(), ax.get_window_extent()))
        return savefig(self, *args, **kw)

    monkeypatch.setattr(Figure, "savefig", spy)
    ks = list(range(16, 529, 16))
    plot_staircase(
        ks,
        tmp_path / "s.png",
        predicted_us=[10.0 + 2 * (k // 128) for k in ks],
        waves=[1 + k // 128 for k in ks],
        measured_us=[400.0 + k for k in ks],
    )
    legend, axes = seen[0]
    assert not legend.overlaps(axes), (legend, axes)
    assert (tmp_path / "s.png").stat().st_size > 0
