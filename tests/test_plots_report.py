"""optimize's staircase pictures (OUTDIR/staircases/*.png) from the bug bash on the plots: a picture
never costs the results, each group gets a file of its own, the marks and the prediction say what
they are, and long names or legends do not squash the plot.

Built on report.write_staircases (the real plot code) with a stub optimizer, and on real optimize
runs of a two-conv chain whose first conv's name is chosen per test (backend `model`: seconds).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from deployopt.errors import DeployoptWarning
from deployopt.layers import ConvShape
from deployopt.lut import LayerCache
from deployopt.report import render_markdown, write_report, write_staircases
from deployopt.targets import get_target
from deployopt.timing import Timing

WIDTHS = [120, 128, 130, 136, 144, 152, 160, 168]


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def chain(path: Path, names: list[str], widths: list[int]) -> Path:
    """A Conv-Relu chain: conv i named names[i] with widths[i] output channels, on 1x16x56x56."""
    rng = np.random.default_rng(0)
    nodes, inits, prev, c = [], [], "x", 16
    for i, (name, w) in enumerate(zip(names, widths)):
        weight = numpy_helper.from_array(
            (rng.standard_normal((w, c, 3, 3)) * 0.1).astype(np.float32), f"W{i}"
        )
        bias = numpy_helper.from_array(np.zeros(w, np.float32), f"B{i}")
        inits += [weight, bias]
        nodes.append(
            helper.make_node(
                "Conv", [prev, f"W{i}", f"B{i}"], [f"o{i}"], name=name, pads=[1] * 4, kernel_shape=[3, 3]
            )
        )
        nodes.append(helper.make_node("Relu", [f"o{i}"], [f"r{i}"], name=f"relu{i}"))
        prev, c = f"r{i}", w
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 56, 56])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, c, 56, 56])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def optimize(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, first: str
) -> tuple[int, str, Path]:
    """(exit code, stderr, OUTDIR) of a trim run on chain([first, 'second'], [130, 16]): the model's
    wave model moves conv 0 off 130 and off its round-up 136, so it gets one staircase."""
    model = chain(tmp_path / "m.onnx", [first, "second"], [130, 16])
    out = tmp_path / "out"
    args = ["optimize", str(model), "--target", "orin-nano-8gb", "--mode", "trim", "--no-fidelity-gate"]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--backend", "model", "-o", str(out))
    return code, err, out


def shape(k: int) -> ConvShape:
    return ConvShape(1, 16, 56, 56, k)


def stub(
    groups: list[str], *, predict: bool = False, cache: LayerCache | None = None, values: Any = None
) -> Any:
    """An optimizer as write_staircases reads it: conv `c<i>` produces group groups[i]."""
    convs = {f"c{i}": gid for i, gid in enumerate(groups)}
    values = values or {k: 30.0 + k / 10 for k in WIDTHS}
    return SimpleNamespace(
        deps={conv: {gid} for conv, gid in convs.items()},
        conv_shapes=lambda plan: {conv: shape(plan[gid]) for conv, gid in convs.items()},
        conv_shape=lambda conv, plan: shape(plan[convs[conv]]),
        layer_values={shape(k).signature(): v for k, v in values.items()},
        _predict=(lambda s: 1.0) if predict else None,
        target=get_target("orin-nano-8gb"),
        cfg=SimpleNamespace(dtype="fp16"),
        _layer_cache=cache,
    )


def report_of(groups: list[str], measured: bool = False, on: str = "") -> dict[str, Any]:
    return {
        "measured": measured,
        "backend": "ort" if measured else "model",
        "measured_on": on,
        "plan": {gid: 120 for gid in groups},
        "groups": [
            {
                "id": gid,
                "producers": [f"c{i}"],
                "best": 120,
                "round_up_8": 136,
                "original": 130,
                "candidates": WIDTHS,
            }
            for i, gid in enumerate(groups)
        ],
    }


# --- 1: a `$` in a name is text, and a picture never costs the results ----------------------------


def test_a_dollar_in_a_conv_name_costs_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, figures: list[Any]
) -> None:
    """`price$\\frac{a$` went to matplotlib as mathtext: optimize exited 1 with a 105-line traceback
    after its search, OUTDIR holding only journal.jsonl. The name is drawn as written."""
    name = "price$\\frac{a$"
    code, err, out = optimize(monkeypatch, capsys, tmp_path, name)
    assert code == 0, err
    assert "Traceback" not in err and "warning" not in err, err
    report = json.loads((out / "report.json").read_text())
    (png,) = report["staircases"]
    assert (out / png).stat().st_size > 1000
    (fig,) = figures
    ax = fig.axes[0]
    assert ax.get_title().startswith(f"{name}: output channels") and name in ax.get_xlabel()
    fig.canvas.draw()  # what the texts render as: the name, not math
    assert not ax.title._preprocess_math(ax.title.get_text())[1]
    assert not ax.xaxis.label._preprocess_math(ax.xaxis.label.get_text())[1]


def test_a_picture_that_fails_is_one_warning_and_the_report_stands(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Any failure drawing one group's picture leaves that picture out, with one `warning:`; the
    other groups' pictures and report.md are written (before: the exception ended optimize)."""
    import deployopt.plots

    real = deployopt.plots.plot_staircase

    def flaky(widths: Any, path: Path, **kw: Any) -> Path:
        if "bad" in kw["xlabel"]:
            raise RuntimeError("font cache\nis broken")
        return real(widths, path, **kw)

    monkeypatch.setattr(deployopt.plots, "plot_staircase", flaky)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        written = write_staircases(tmp_path, report_of(["bad", "good"]), stub(["bad", "good"]))
    assert written == ["staircases/staircase_good.png"]
    assert sorted(p.name for p in (tmp_path / "staircases").iterdir()) == ["staircase_good.png"]
    (w,) = [w for w in seen if issubclass(w.category, DeployoptWarning)]
    assert str(w.message) == (
        "1 of 2 staircase pictures not drawn (RuntimeError: font cache); report.md goes on without them"
    )


def test_write_report_survives_any_error_in_the_pictures(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """write_report caught ImportError only: anything else from write_staircases was a traceback
    and no report.json or report.md."""
    import deployopt.report as report_module

    def broken(*args: Any) -> list[str]:
        raise ValueError("Key backend: 'inline' is not a valid value for backend\nsupported values are […]")

    monkeypatch.setattr(report_module, "write_staircases", broken)
    monkeypatch.setattr(report_module, "render_markdown", lambda report: "# report\n")
    report: dict[str, Any] = {"plan": {}}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        write_report(tmp_path, report, opt=object())  # type: ignore[arg-type]
    assert report["staircases"] == []
    assert (tmp_path / "report.md").read_text() == "# report\n" and (tmp_path / "report.json").is_file()
    assert [str(w.message) for w in seen if issubclass(w.category, DeployoptWarning)] == [
        "staircase pictures not drawn (ValueError: Key backend: 'inline' is not a valid value for backend); "
        "report.md goes on without them"
    ]


# --- 3: a file of its own for each group --------------------------------------------------------------


def test_each_group_gets_a_png_of_its_own(tmp_path: Path) -> None:
    """Ids cut to 80 characters, or differing only where a file name holds `_`, gave one file name:
    the second picture replaced the first and report.md linked it twice."""
    long = "block/" + "a" * 80
    groups = [f"{long}/conv_first", f"{long}/conv_second", "a/b", "a:b", "plain", "PLAIN"]
    written = write_staircases(tmp_path, report_of(groups), stub(groups))
    assert len(written) == len(groups) and len({p.lower() for p in written}) == len(groups)
    assert sorted(f"staircases/{p.name}" for p in (tmp_path / "staircases").iterdir()) == sorted(written)
    assert "staircases/staircase_plain.png" in written  # an id that is a file name already stays one
    assert all(len(Path(p).name) < 100 for p in written)


def test_report_md_says_how_many_staircases_were_left_out(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """12 pictures at most: the reader of report.md could not know more groups had changed."""
    code, err, out = optimize(monkeypatch, capsys, tmp_path, "conv0")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    (moved,) = [g for g in report["groups"] if g["best"] not in (g["round_up_8"], g["original"])]
    report["groups"] += [{**moved, "id": f"g{i}"} for i in range(14)]  # 15 changed groups in all
    report["staircases"] = [f"staircases/staircase_g{i}.png" for i in range(12)]
    md = render_markdown(report)
    assert "\n(3 more groups changed; pictures are drawn for the first 12 only.)\n" in md
    report["groups"] = report["groups"][:-3]  # 12 changed: all drawn
    assert "more group" not in render_markdown(report)


# --- 6: the marks and the prediction say what they are ----------------------------------------------


def test_original_round_up_and_chosen_are_marked_apart_and_the_prediction_named(
    tmp_path: Path, figures: list[Any]
) -> None:
    """Original and chosen were two identical unlabelled green lines, the round-up not marked, and
    the legend said 'wave model (predicted)': not which parameters, target, SMs or dtype."""
    write_staircases(tmp_path, report_of(["g"]), stub(["g"], predict=True))
    (fig,) = figures
    ax = fig.axes[0]
    legend = [t.get_text().replace("\n", " ") for t in ax.get_legend().get_texts()]
    assert {"original 130", "round-up to 8 136", "chosen 120"} <= set(legend)
    target = get_target("orin-nano-8gb")
    assert (
        f"predicted for {target.display_name} (8 SMs, fp16), {target.wave_params('fp16').describe()}"
        in legend
    )
    marks = {line.get_label(): line for line in ax.get_lines() if line.get_label() in legend[2:]}
    styles = {(str(line.get_color()), line.get_linestyle()) for line in marks.values()}
    assert len(marks) == 3 and len(styles) == 3
    assert {label: line.get_xdata()[0] for label, line in marks.items()} == {
        "original 130": 130,
        "round-up to 8 136": 136,
        "chosen 120": 120,
    }


# --- 8, 10: long names and long legends keep the picture's shape -------------------------------------


def test_a_long_name_is_cut_in_the_middle_and_the_picture_keeps_its_width(tmp_path: Path) -> None:
    """A 190-character conv name stretched the PNG to 3839x480, the plot a box in its middle."""
    name = "StatefulPartitionedCall/model/" + "backbone_stage" * 11 + "conv2d"
    (png,) = write_staircases(tmp_path, report_of([name]), stub([name]))
    width, height = Image.open(tmp_path / png).size
    assert width < 1100 and height < 600, (width, height)


def test_a_measured_legend_is_wrapped_not_one_line_across(tmp_path: Path) -> None:
    """The measured entry (~180 characters in one line, beside the predicted one) widened the PNG
    to 1307 pixels, the axes 40 % of it."""
    cache = LayerCache("ort-test", "fp32", root=tmp_path / "cache")
    timings = {k: Timing("ort", [30.0 + k / 10 + i for i in (0, 3, 1, 4, 2)]) for k in WIDTHS}
    for k, t in timings.items():
        cache.put(shape(k), t)
    on = "ort (CPUExecutionProvider; this machine's CPU, not the GPU of orin-nano-8gb)"
    opt = stub(["g"], predict=True, cache=cache, values={k: t.median_us for k, t in timings.items()})
    (png,) = write_staircases(tmp_path, report_of(["g"], measured=True, on=on), opt)
    width, _ = Image.open(tmp_path / png).size
    assert width < 1100, width
