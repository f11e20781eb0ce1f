"""Models from torch's default exporter (torch.export, `torch.onnx.export(..., dynamo=True)`, the
default since torch 2.9): what a user on a current torch writes without choosing an exporter.

Its files differ from the TorchScript exporter's in ways deployopt must take: weights in an
external NAME.onnx.data file, a recent opset (20 with torch 2.14), `chunk` as Split(num_outputs=2),
node names like `node_conv2d_3`. Every check is exact: the padded model computes what the export does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import ort_session
import pytest
from cli_runner import run_cli

from deployopt.coupling import analyze
from deployopt.model import load_model
from deployopt.surgery import apply_plan

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")  # the dynamo exporter's dependency (the dev extra installs it)
nn = torch.nn


class C2f(nn.Module):
    """YOLOv8's C2f: a 1×1 conv, `chunk(2, 1)`, one half through a 3×3 conv, all three concatenated."""

    def __init__(self, c: int, hidden: int) -> None:
        super().__init__()
        self.cv1 = nn.Sequential(
            nn.Conv2d(c, 2 * hidden, 1, bias=False), nn.BatchNorm2d(2 * hidden), nn.SiLU()
        )
        self.m = nn.Sequential(nn.Conv2d(hidden, hidden, 3, padding=1), nn.SiLU())
        self.cv2 = nn.Conv2d(3 * hidden, c, 1)

    def forward(self, x: Any) -> Any:
        a, b = self.cv1(x).chunk(2, 1)
        return self.cv2(torch.cat([a, b, self.m(b)], 1))


class Block(nn.Module):
    """A residual block with a depthwise conv and a squeeze-excitation gate."""

    def __init__(self, c: int, hidden: int, squeeze: int) -> None:
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden), nn.ReLU())
        self.se = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(hidden, squeeze, 1),
            nn.ReLU(),
            nn.Conv2d(squeeze, hidden, 1),
            nn.Sigmoid(),
        )
        self.project = nn.Sequential(nn.Conv2d(hidden, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: Any) -> Any:
        h = self.dw(self.expand(x))
        return x + self.project(h * self.se(h))


def _export(path: Path) -> np.ndarray:
    """Export a small irregular-width network as a user would; returns an input for it."""
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 21, 3, stride=2, padding=1), nn.ReLU(), Block(21, 37, 9), C2f(21, 13),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(21, 10),
    ).eval()  # fmt: skip
    for mod in net.modules():  # non-trivial BatchNorm statistics, as a trained net has
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.1, 0.1)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.onnx.export(net, (x,), str(path), dynamo=True, verbose=False)  # the defaults, as a user's call
    return x.numpy()


def _run(model: onnx.ModelProto | Path, x: np.ndarray) -> np.ndarray:
    src = str(model) if isinstance(model, Path) else model.SerializeToString()
    sess = ort_session.session(src)
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    path = tmp_path_factory.mktemp("dynamo") / "net.onnx"
    return path, _export(path)


def test_the_export_is_what_a_current_torch_writes(exported: tuple[Path, np.ndarray]) -> None:
    """What this file guards against: if the exporter stops writing these forms, the test says so."""
    path, _ = exported
    assert (path.parent / "net.onnx.data").is_file()  # the weights beside the graph
    model = onnx.load(str(path), load_external_data=False)
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 18
    (split,) = [n for n in model.graph.node if n.op_type == "Split"]
    assert {a.name for a in split.attribute} >= {"num_outputs"} and len(split.input) == 1


def test_analyze_names_each_layer_by_its_module(
    monkeypatch, capsys, exported: tuple[Path, np.ndarray]
) -> None:
    """The exporter names a conv `node_conv2d_3`; its weight keeps the module path (`3.m.0.weight`),
    so analyze shows `node_conv2d_3 (3.m.0)` and its JSON maps one to the other."""
    path, _ = exported
    code, out, err = run_cli(monkeypatch, capsys, "analyze", str(path), "--json")
    assert code == 0, err
    layers = json.loads(out)["layers"]
    assert all(name.startswith("node_") for name in layers)
    # every weighted layer of the network, the folded convs (stem, expand, C2f.cv1) by their conv
    assert sorted(layers.values()) == ["0", "2.dw.0", "2.expand.0", "2.project.0", "2.se.1", "2.se.3",
                                       "3.cv1.0", "3.cv2", "3.m.0", "6"]  # fmt: skip
    code, out, err = run_cli(monkeypatch, capsys, "analyze", str(path), "--convs")
    assert code == 0, err
    name = next(n for n, m in layers.items() if m == "3.m.0")
    assert f"{name} (3.m.0)" in " ".join(out.split()), out


def test_every_width_is_free_and_padding_is_exact(exported: tuple[Path, np.ndarray]) -> None:
    path, x = exported
    loaded = load_model(path)
    assert loaded.external_data
    analysis = analyze(loaded.model)
    free = [g.width for g in analysis.free_groups()]
    # the trunk (21: stem and the block's residual), the expansion (37), the SE squeeze (9), the C2f
    # halves (13 and 13), its inner conv (13) and its output (21, read by the Linear): every width a
    # pruner would leave irregular, the chunk's halves included
    assert sorted(free) == [9, 13, 13, 13, 21, 21, 37]
    assert sum(g.id.endswith(("[0]", "[1]")) for g in analysis.free_groups()) == 2
    plan = {g.id: -(-g.width // 8) * 8 + 8 for g in analysis.free_groups()}
    padded = apply_plan(loaded.model, plan, analysis)
    onnx.checker.check_model(padded, full_check=True)
    np.testing.assert_allclose(_run(padded, x), _run(path, x), rtol=0, atol=1e-5)
    trimmed = apply_plan(loaded.model, {g.id: max(1, g.width - 5) for g in analysis.free_groups()}, analysis)
    onnx.checker.check_model(trimmed, full_check=True)
    assert _run(trimmed, x).shape == (2, 10)


def test_optimize_on_the_export_writes_a_model_that_computes_the_same(
    exported: tuple[Path, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The user's command on the user's file: `deployopt optimize net.onnx --target orin-nano-8gb`
    (lossless, the model backend on this GPU-less machine): it pads, and the result is exact."""
    path, x = exported
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        monkeypatch,
        capsys,
        "optimize",
        str(path),
        "--target",
        "orin-nano-8gb",
        "-o",
        str(out),
        "--max-evals",
        "6",
    )
    assert code == 0, err
    assert "predicted by the wave model" in stdout
    result = out / "model.onnx"
    widths = [d.dims[0] for d in onnx.load(str(result)).graph.initializer if len(d.dims) == 4]
    assert widths != [d.dims[0] for d in onnx.load(str(path)).graph.initializer if len(d.dims) == 4]
    np.testing.assert_allclose(_run(result, x), _run(path, x), rtol=0, atol=1e-5)
    # the report names each group's layer by its module, as analyze does
    groups = json.loads((out / "report.json").read_text())["groups"]
    assert {g["layer"] for g in groups if "layer" in g} >= {"2.expand.0", "3.m.0"}
    assert any(
        f"| {g['id']} ({g['layer']}) |" in (out / "report.md").read_text() for g in groups if "layer" in g
    )


def test_the_torch_backend_times_the_export(exported: tuple[Path, np.ndarray]) -> None:
    """onnx2torch reads opsets up to 17; the export is opset 20 (ReduceMean 18, Split 18, Reshape 19
    with allowzero): the backend rewrites it into opset-17 ops (deployopt/backends/onnx2torch_opset.py)
    and times it. Before, this was "onnx2torch cannot convert op ReduceMean (version 18)"."""
    pytest.importorskip("onnx2torch")
    from deployopt.backends import MeasureOptions, get_backend

    path, _ = exported
    opts = MeasureOptions(dtype="fp32", runs=3, warmup=1, timeout_s=120, extra={"device": "cpu"})
    with get_backend("torch").open(opts) as session:
        timing = session.measure(path)
    assert timing.measured and timing.runs == 3 and timing.median_us > 0


def test_softplus_as_the_exporter_spells_it_stays_free(tmp_path: Path) -> None:
    """nn.Softplus comes out as Softplus → Greater → Where (its threshold), and a user's
    `torch.where(x > 0, x, 0.1 * x)` as Greater → Where: each froze its conv's group ("unknown op
    Greater"), where the TorchScript exporter's plain Softplus left it free. Padding is exact."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.head = (
                nn.Conv2d(3, 11, 3, padding=1),
                nn.Conv2d(11, 13, 1),
                nn.Conv2d(13, 4, 1),
            )

        def forward(self, x: Any) -> Any:
            h = nn.functional.softplus(self.a(x))
            g = self.b(h)
            return self.head(torch.where(g > 0, g, 0.1 * g))

    torch.manual_seed(0)
    x = torch.randn(1, 3, 8, 8)
    path = tmp_path / "softplus.onnx"
    with torch.no_grad():
        torch.onnx.export(Net().eval(), (x,), str(path), dynamo=True, verbose=False)
    loaded = load_model(path)
    assert {"Softplus", "Greater", "Where"} <= {n.op_type for n in loaded.model.graph.node}
    analysis = analyze(loaded.model)
    assert sorted(g.width for g in analysis.free_groups()) == [11, 13]
    padded = apply_plan(loaded.model, {g.id: 16 for g in analysis.free_groups()}, analysis)
    onnx.checker.check_model(padded, full_check=True)
    np.testing.assert_allclose(_run(padded, x.numpy()), _run(path, x.numpy()), rtol=0, atol=1e-5)
