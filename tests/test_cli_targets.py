"""`deployopt targets / staircase / calibrate`: outputs, JSON schema, plots, one-line errors."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from cli_runner import run_cli

from deployopt.cli.targets_cmd import parse_channels, parse_dims
from deployopt.errors import DeployoptError
from deployopt.layers import ConvShape
from deployopt.targets import get_target, list_targets
from deployopt.waves import predict

run = run_cli


def test_parse_channels_and_dims():
    assert parse_channels("16:64:16") == [16, 32, 48, 64]  # b included
    assert parse_channels("16:70:16") == [16, 32, 48, 64]
    assert parse_channels("8:10") == [8, 9, 10]
    assert parse_channels("128, 64,96") == [64, 96, 128]
    assert parse_dims("8x128x28x28") == (8, 128, 28, 28)
    for bad in ("16:a:16", "64:16:16", "16:64:0", "0:16:16", "1:2:3:4", "", "-8"):
        with pytest.raises(DeployoptError):
            parse_channels(bad)
    for typo in ("8,,16", "64,128,", ",64"):  # a width left out was skipped: 8,,16 swept 8 and 16
        with pytest.raises(DeployoptError, match="an empty item in the list"):
            parse_channels(typo)
    for bad in ("8x128x28", "8x128x28x0", "axbxcxd"):
        with pytest.raises(DeployoptError):
            parse_dims(bad)


def test_targets_table_and_json(monkeypatch, capsys):
    code, out, _ = run(monkeypatch, capsys, "targets")
    assert code == 0
    for name in ("nano", "orin-nano-8gb", "agx-orin-64gb", "h200"):
        assert name in out
    code, out, _ = run(monkeypatch, capsys, "targets", "--target", "h200", "--sms", "8", "--json")
    d = json.loads(out)
    assert (d["name"], d["sms"], d["full_sms"], d["compute_capability"]) == ("h200", 8, 132, [9, 0])
    assert d["params"]["fp16"]["fitted"] is True
    code, out, _ = run(monkeypatch, capsys, "targets", "--json")
    assert len(json.loads(out)) == 15
    code, out, _ = run(monkeypatch, capsys, "targets", "--sms", "16", "--json")
    listed = json.loads(out)
    assert code == 0 and {d["name"] for d in listed} == {
        "agx-orin-64gb",
        "p6000",
        "t4",
        "a100",
        "h100",
        "h200",
    }
    assert all(d["sms"] == 16 for d in listed)
    code, out, _ = run(monkeypatch, capsys, "targets", "--sms", "4")  # the table says who is missing
    assert code == 0 and "note: left out, fewer than 4 SMs: nano, tx2\n" in out
    assert "xavier-nx" in out and not re.search(r"^\W*nano ", out, re.M)


def test_targets_table_prints_every_figure_whole_in_80_columns(monkeypatch, capsys):
    """Piped or in a CI log (80 columns) the table cut its cells: '2048/32…' for the per-SM limits,
    '164/163' with 'KB' folded onto the next line. Each target is now one line, every figure whole."""
    from deployopt.targets import list_targets

    code, out, _ = run(monkeypatch, capsys, "targets", columns=80)
    assert code == 0 and "…" not in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    for t in list_targets():
        limits = f"{t.max_threads_per_sm}/{t.max_blocks_per_sm}/{t.max_warps_per_sm}"
        smem = f"{t.shared_mem_per_sm // 1024}/{t.shared_mem_per_block // 1024} KB"
        assert limits in rows[t.name] and smem in rows[t.name], rows.get(t.name)
    assert max(len(line) for line in out.splitlines() if "─" in line) <= 80


def test_staircase_json_schema(monkeypatch, capsys, tmp_path):
    plot = tmp_path / "stairs.png"
    conv = ["staircase", "--target", "h200", "--sms", "8", "--input", "8x128x28x28", "--kernel", "3"]
    code, out, _ = run(
        monkeypatch, capsys, *conv, "--out-channels", "16:512:16", "--json", "--plot", str(plot)
    )
    assert code == 0
    doc = json.loads(out)
    assert [p["out_channels"] for p in doc["points"]] == list(range(16, 513, 16))
    for p in doc["points"]:
        assert set(p) == {"out_channels", "waves", "tail_fill", "predicted_us"}  # no measured_* keys
        assert 0 < p["tail_fill"] <= 1
    assert [k["out_channels"] for k in doc["predicted_kernels"]] == list(range(16, 513, 16))
    t = get_target("h200", sms=8)
    first = predict(ConvShape(8, 128, 28, 28, 16, 3, 3, (1, 1), (1, 1)), t, "fp16")
    assert doc["points"][0]["predicted_us"] == pytest.approx(first.predicted_us)
    assert doc["points"][0]["waves"] == first.waves
    code, table, _ = run(monkeypatch, capsys, *conv, "--out-channels", "128:160:16")
    rows = [line.split() for line in table.splitlines() if line.split()[:1] in (["128"], ["144"], ["160"])]
    assert code == 0 and [r[5] for r in rows] == ["13%", "38%", "38%"], table  # 1/8 and 3/8 of a wave
    assert doc["shape"]["pad"] == [1, 1] and doc["dtype"] == "fp16"
    assert (doc["target"]["sms"], doc["target"]["full_sms"]) == (8, 132)  # an --sms what-if says so
    assert doc["predictor"]["model"] == "wave" and doc["predictor"]["fitted"] is True
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10000


def test_staircase_of_a_depthwise_conv_sweeps_its_channels_together(monkeypatch, capsys):
    # --groups equal to the input channels: C = K = groups at every width, the depthwise path
    args = ["staircase", "--target", "orin-nano-8gb", "--input", "8x144x56x56", "--groups", "144"]
    code, out, _ = run(monkeypatch, capsys, *args, "--out-channels", "16:64:16", "--json")
    assert code == 0
    doc = json.loads(out)
    assert {k["family"] for k in doc["predicted_kernels"]} == {"depthwise-direct"}
    t = get_target("orin-nano-8gb")
    want = [
        predict(ConvShape(8, k, 56, 56, k, 3, 3, groups=k), t, "fp16").predicted_us for k in (16, 32, 48, 64)
    ]
    assert [p["predicted_us"] for p in doc["points"]] == pytest.approx(want)
    assert want == sorted(want)
    code, out, _ = run(monkeypatch, capsys, *args, "--out-channels", "16:64:16")
    assert code == 0 and "depthwise (C = K = groups at every width)" in out
    # a sweep from 1 channel: refused as "every width must be a multiple of --groups 144" (its base
    # was a groups-1 conv); the 1-channel point is that conv, every other point depthwise
    code, out, err = run(monkeypatch, capsys, *args, "--out-channels", "1:33:16", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [k["family"] == "depthwise-direct" for k in doc["predicted_kernels"]] == [False, True, True]
    shapes = [ConvShape(8, 1, 56, 56, 1, 3, 3)]
    shapes += [ConvShape(8, k, 56, 56, k, 3, 3, groups=k) for k in (17, 33)]
    want = [predict(shape, t, "fp16").predicted_us for shape in shapes]
    assert [p["predicted_us"] for p in doc["points"]] == pytest.approx(want)


def test_staircase_table_says_predicted(monkeypatch, capsys):
    code, out, _ = run(
        monkeypatch,
        capsys,
        "staircase",
        "--target",
        "orin-nano-8gb",
        "--input",
        "1x64x56x56",
        "--kernel",
        "1",
        "--out-channels",
        "64,96,128",
        "--dtype",
        "int8",
    )
    assert code == 0
    assert "pred µs: predicted, wave model 'cc8.7-int8 default' (default, not calibrated on hardware)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "orin"], "unknown target 'orin'; choose one of: a100, agx-orin-32gb"),
        (["--target", "h200", "--sms", "200"], "--sms 200: h200 has only 132 SMs"),
        (["--target", "nano", "--sms", "2"], "--sms 2: nano has only 1 SM\n"),
        (["--target", "nano", "--dtype", "int8"], "--dtype int8: Jetson Nano (compute capability 5.3)"),
        (["--target", "h200", "--sms", "0"], "--sms 0: must be a positive integer"),
        (["--target", "h200", "--input", "8x128x28"], "--input '8x128x28': expected four positive integers"),
        (["--target", "h200", "--out-channels", "64:16:16"], "--out-channels '64:16:16': need 1 <= start"),
        (["--target", "h200", "--dtype", "bf16"], "--dtype 'bf16': choose one of fp16, fp32, int8"),
        (["--target", "h200", "--dtype", "int8", "--measure", "torch"], "INT8 staircases are predicted only"),
        (["--target", "h200", "--measure", "model"], "--measure model: that backend predicts"),
        (["--target", "h200", "--measure", "nope"], "unknown backend 'nope'"),
    ],
)
def test_staircase_errors_are_one_line(monkeypatch, capsys, args, message):
    base = {"--input": "8x128x28x28", "--out-channels": "16:64:16"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    argv = ["staircase"] + [x for kv in base.items() for x in kv]
    code, _, err = run(monkeypatch, capsys, *argv)
    assert code == 2
    assert message in err
    assert err.strip().count("\n") == 0 and "Traceback" not in err


def test_local_without_gpu_is_one_line(monkeypatch, capsys):
    from deployopt.targets import local

    monkeypatch.setattr(local, "READERS", [("torch", lambda: None)])
    code, _, err = run(monkeypatch, capsys, "targets", "--target", "local")
    assert code == 2 and "no CUDA GPU found" in err and err.strip().count("\n") == 0


def fake_backend(truth, opened=None, engines=False, on_gpu=None, factors=(0.99, 1.0, 1.03), after=None):
    """A stand-in backend that 'measures' with a known model (one sample per factor, 3 by default);
    the options of every session it opens are appended to `opened`; `on_gpu`: its runs_on_gpu;
    `after(timings)`, when given, may change each batch of timings before they are returned."""
    from deployopt.backends import base
    from deployopt.timing import Timing

    class FakeSession(base.Session):
        runs_on_gpu = on_gpu

        def measure(self, model_path):  # pragma: no cover - measure_convs is overridden
            raise AssertionError

        def measure_convs(self, shapes):
            dt = self.options.dtype
            env = {"device": "fake GPU"}
            if engines:  # what the torch worker records
                limit = self.options.cudnn_engines
                env["device_sms"] = 132
                env["cudnn_benchmark"] = self.options.cudnn_benchmark
                if self.options.cudnn_benchmark:
                    env["cudnn_benchmark_limit"] = 10 if limit is None else limit
            timings = [
                Timing(
                    "fake",
                    [predict(s, truth, dt).predicted_us * f for f in factors],
                    environment=env,
                )
                for s in shapes
            ]
            if after is not None:
                after(timings)
            return timings

    class FakeBackend(base.Backend):
        name = "fake"
        description = "test stand-in"
        can_limit_sms = True
        can_choose_cudnn_engines = engines

        def availability(self):
            return True, "test"

        def open(self, options):
            self.check_options(options)
            if opened is not None:
                opened.append(options)
            return FakeSession(self, options)

    return FakeBackend()


def test_staircase_measured_json_and_plot(monkeypatch, capsys, tmp_path):
    from deployopt.backends import base

    truth = get_target("h200", sms=8)
    monkeypatch.setattr(base, "get_backend", lambda name: fake_backend(truth))
    plot = tmp_path / "m.png"
    code, out, err = run(
        monkeypatch,
        capsys,
        "staircase",
        "--target",
        "h200",
        "--sms",
        "8",
        "--input",
        "8x128x28x28",
        "--out-channels",
        "64:128:32",
        "--measure",
        "fake",
        "--runs",
        "3",
        "--json",
        "--plot",
        str(plot),
    )
    assert code == 0, err
    doc = json.loads(out)
    for p in doc["points"]:
        assert set(p) == {
            "out_channels",
            "waves",
            "tail_fill",
            "predicted_us",
            "measured_us",
            "measured_iqr_us",
        }
        assert p["measured_us"] == pytest.approx(p["predicted_us"])  # the middle of 0.99/1.0/1.03
        assert p["measured_iqr_us"] == pytest.approx(0.02 * p["predicted_us"])
    assert doc["measured"]["backend"] == "fake" and doc["measured"]["runs"] == [3, 3, 3]
    assert plot.stat().st_size > 10000
    code, out, _ = run(
        monkeypatch,
        capsys,
        "staircase",
        "--target",
        "h200",
        "--sms",
        "8",
        "--input",
        "8x128x28x28",
        "--out-channels",
        "64:128:32",
        "--measure",
        "fake",
        "--runs",
        "3",
    )
    assert "meas µs: measured on backend fake, median and IQR of 3 runs per width" in out


def test_staircase_measured_once_says_1_run(monkeypatch, capsys) -> None:
    """`staircase --measure B --runs 1` printed 'median and IQR of 1 runs per width'."""
    from deployopt.backends import base

    truth = get_target("h200", sms=8)
    monkeypatch.setattr(base, "get_backend", lambda name: fake_backend(truth, factors=(1.0,)))
    args = ["--input", "8x128x28x28", "--out-channels", "64:128:32", "--measure", "fake", "--runs", "1"]
    code, out, err = run(monkeypatch, capsys, "staircase", "--target", "h200", "--sms", "8", *args)
    assert code == 0, err
    assert "median and IQR of 1 run per width" in " ".join(out.split()), out


def test_staircase_measured_on_ort_without_dtype_runs_what_ort_runs(monkeypatch, capsys) -> None:
    """`staircase --measure ort` with no --dtype (docs/wave_model.md's CPU example) was refused,
    "backend 'ort' runs fp32 only (asked for fp16)", for a dtype the user never gave: it now sweeps
    fp32, predicted and measured, and says so in one note. Unmeasured, the default stays fp16;
    a --dtype given is kept: fp16 convs typed so, as onnxruntime runs a model as it is typed."""
    args = ["staircase", "--target", "orin-nano-8gb", "--input", "1x8x8x8", "--out-channels", "8:16:8"]
    code, out, err = run(monkeypatch, capsys, *args, "--measure", "ort", "--runs", "3", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["dtype"] == "fp32" and len(doc["points"]) == 2
    assert "note: --dtype fp32: what backend 'ort' runs here (predicted and measured alike)" in err
    code, out, _ = run(monkeypatch, capsys, *args, "--json")
    assert code == 0 and json.loads(out)["dtype"] == "fp16"
    code, out, err = run(
        monkeypatch, capsys, *args, "--measure", "ort", "--dtype", "fp16", "--runs", "3", "--json"
    )
    assert code == 0 and json.loads(out)["dtype"] == "fp16" and "note:" not in err, err


def test_cudnn_engines_reach_the_backend_or_are_refused(monkeypatch, capsys, tmp_path):
    from deployopt.backends import base

    truth = get_target("h200", sms=8)
    args = ["staircase", "--target", "h200", "--input", "8x128x28x28", "--out-channels", "64:128:32"]
    opened: list = []
    monkeypatch.setattr(base, "get_backend", lambda name: fake_backend(truth, opened, engines=True))
    code, _, err = run(monkeypatch, capsys, *args, "--measure", "fake", "--cudnn-engines", "0", "--json")
    assert code == 0, err
    assert [o.cudnn_engines for o in opened] == [0]
    code, out, err = run(monkeypatch, capsys, *args, "--measure", "fake", "--cudnn-engines", "0")
    assert code == 0, err
    assert "median and IQR of 3 runs per width (fake GPU; cuDNN: all engines timed)" in " ".join(out.split())
    opened.clear()
    code, _, err = run(
        monkeypatch, capsys, "calibrate", "--target", "h200", "--measure", "fake", "--out-channels",
        "32:256:32", "--cudnn-engines", "4", "-o", str(tmp_path / "p.json"),
    )  # fmt: skip
    assert code == 0, err
    assert [o.cudnn_engines for o in opened] == [4]
    monkeypatch.setattr(base, "get_backend", lambda name: fake_backend(truth))  # times no engines
    code, _, err = run(monkeypatch, capsys, *args, "--measure", "fake", "--cudnn-engines", "0")
    assert code == 2 and err.strip().count("\n") == 0
    assert "--cudnn-engines: backend 'fake' does not run cudnn.benchmark" in err


def test_no_cudnn_benchmark_reaches_the_backend_and_the_label(monkeypatch, capsys):
    """--no-cudnn-benchmark (cuDNN's heuristics alone, PyTorch's default) must reach the session
    and be named beside the measured latencies; with --cudnn-engines, or on a backend without
    cuDNN's autotuner, it is a one-line error."""
    from deployopt.backends import base

    truth = get_target("h200", sms=8)
    args = ["staircase", "--target", "h200", "--input", "8x128x28x28", "--out-channels", "64:128:32"]
    opened: list = []
    monkeypatch.setattr(base, "get_backend", lambda name: fake_backend(truth, opened, engines=True))
    code, out, err = run(monkeypatch, capsys, *args, "--measure", "fake", "--no-cudnn-benchmark")
    assert code == 0, err
    assert [o.cudnn_benchmark for o in opened] == [False]
    assert "(fake GPU; cuDNN heuristics, no autotuning (cudnn.benchmark off))" in " ".join(out.split())
    opened.clear()
    code, out, err = run(monkeypatch, capsys, *args, "--measure", "fake")
    assert code == 0, err
    assert [o.cudnn_benchmark for o in opened] == [True]
    assert "cuDNN: 10 engines timed" in " ".join(out.split())
    code, _, err = run(
        monkeypatch, capsys, *args, "--measure", "fake", "--no-cudnn-benchmark", "--cudnn-engines", "0"
    )
    assert code == 2 and err.strip().count("\n") == 0
    assert "--cudnn-engines and --no-cudnn-benchmark" in err
    monkeypatch.setattr(base, "get_backend", lambda name: fake_backend(truth))
    code, _, err = run(monkeypatch, capsys, *args, "--measure", "fake", "--no-cudnn-benchmark")
    assert code == 2 and err.strip().count("\n") == 0
    assert "--no-cudnn-benchmark: backend 'fake' does not run cuDNN's autotuner" in err


def test_sms_with_the_default_engine_search_gets_one_note(monkeypatch, capsys):
    """Under --sms, PyTorch's default search times engines cuDNN ranked for the whole GPU: one
    stderr note says so, and only then (not with --cudnn-engines, --no-cudnn-benchmark, no --sms,
    or a backend without cuDNN's autotuner)."""
    from deployopt.backends import base

    truth = get_target("h200", sms=8)
    args = ["staircase", "--target", "h200", "--input", "8x128x28x28", "--out-channels", "64:128:32"]
    monkeypatch.setattr(base, "get_backend", lambda name: fake_backend(truth, engines=True))
    code, _, err = run(monkeypatch, capsys, *args, "--sms", "8", "--measure", "fake", "--json")
    assert code == 0 and err.count("note:") == 1
    assert "note: under --sms 8 cuDNN still ranks its engines for the whole GPU" in " ".join(err.split())
    for extra in (["--sms", "8", "--cudnn-engines", "0"], ["--sms", "8", "--no-cudnn-benchmark"], []):
        code, _, err = run(monkeypatch, capsys, *args, *extra, "--measure", "fake", "--json")
        assert code == 0 and "note:" not in err, extra
    monkeypatch.setattr(base, "get_backend", lambda name: fake_backend(truth))
    code, _, err = run(monkeypatch, capsys, *args, "--sms", "8", "--measure", "fake", "--json")
    assert code == 0 and "note:" not in err
    # a session the backend refuses (no CUDA, say) is one error line, with no note before it
    refusing = fake_backend(truth, engines=True)

    def refuse(options):
        raise DeployoptError("--sms needs a CUDA GPU (green contexts); none is visible")

    monkeypatch.setattr(refusing, "open", refuse)
    monkeypatch.setattr(base, "get_backend", lambda name: refusing)
    for command in (args, ["calibrate", "--target", "h200", "--out-channels", "32:256:32"]):
        code, _, err = run(monkeypatch, capsys, *command, "--sms", "8", "--measure", "fake")
        assert code == 2 and err.strip().count("\n") == 0 and "note:" not in err, err


def test_calibrate_saves_a_profile_target_can_load(monkeypatch, capsys, tmp_path):
    """Measurements from a known model: calibrate must fit them and save a loadable profile."""
    from deployopt.backends import base

    truth = get_target("h200", sms=8)
    monkeypatch.setattr(base, "get_backend", lambda name: fake_backend(truth))
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    code, _, err = run(
        monkeypatch,
        capsys,
        "calibrate",
        "--target",
        "h200",
        "--measure",
        "fake",
        "--sms",
        "8",
        "--out-channels",
        "32:256:32",
        "--name",
        "myh200",
    )
    assert code == 0, err
    path = tmp_path / "cache" / "targets" / "myh200.json"
    doc = json.loads(path.read_text())
    assert doc["target"]["name"] == "myh200" and doc["target"]["sms"] == 8
    assert doc["params"]["fp16"]["fitted"] is True and len(doc["sweeps"][0]["points"]) == 4 * 8
    t = get_target("myh200")
    assert (t.sms, t.full_sms) == (8, 132)
    s = ConvShape(8, 128, 28, 28, 160)
    assert predict(s, t).predicted_us == pytest.approx(predict(s, truth).predicted_us, rel=0.05)
    code, _, err = run(
        monkeypatch, capsys, "calibrate", "--target", "h200", "--measure", "fake", "--dtype", "int8"
    )
    assert code == 2 and "INT8 is predicted only" in err


def test_calibrate_refuses_timings_taken_on_the_cpu(monkeypatch, capsys, tmp_path):
    """ort on its CPU provider or torch without CUDA: a GPU wave-model fit to host-CPU timings would
    replace what --target NAME predicts. One line, before the sweep, nothing written."""
    from deployopt.backends import base

    truth = get_target("h200")
    backend = fake_backend(truth, on_gpu=False)
    swept = []
    backend_open = backend.open

    def open_(options):
        session = backend_open(options)
        session.measure_convs = lambda shapes: swept.append(shapes)
        return session

    monkeypatch.setattr(backend, "open", open_)
    monkeypatch.setattr(base, "get_backend", lambda name: backend)
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    code, _, err = run(
        monkeypatch, capsys, "calibrate", "--target", "orin-nano-8gb", "--measure", "ort", "--dtype", "fp32"
    )
    assert code == 2 and err.strip().count("\n") == 0, err
    assert "--measure ort: this backend runs on the CPU here" in err and "GPU's SMs" in err
    assert "torch on CUDA" in err and swept == [] and not (tmp_path / "cache").exists()


def test_calibrated_profile_records_its_device_and_shows_in_the_target_list(monkeypatch, capsys, tmp_path):
    """The profile says what it was measured on; `targets` (table and JSON) shows the cached
    profile that --target NAME now loads; -o FILE's hint names the file, not the target."""
    from deployopt.backends import base

    truth = get_target("h200")
    monkeypatch.setattr(base, "get_backend", lambda name: fake_backend(truth, on_gpu=True))
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    args = ["calibrate", "--target", "orin-nano-8gb", "--measure", "fake", "--out-channels", "32:256:32"]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    cached = tmp_path / "cache" / "targets" / "orin-nano-8gb.json"
    assert json.loads(cached.read_text())["measured_with"]["device"] == "fake GPU"
    code, out, _ = run(monkeypatch, capsys, "targets")
    row = next(line for line in out.splitlines() if "orin-nano-8gb" in line)
    assert "calibrated:" in row and "default" not in row
    # the path may wrap onto the next lines of its cell (a narrow terminal, a long tmp path)
    assert f"calibrated:{cached}" in re.sub(r"[\s│]", "", out), out
    code, out, _ = run(monkeypatch, capsys, "targets", "--json")
    entry = next(t for t in json.loads(out) if t["name"] == "orin-nano-8gb")
    assert entry["origin"] == str(cached) and entry["params"]["fp16"]["fitted"] is True
    monkeypatch.chdir(tmp_path)
    code, out, err = run(monkeypatch, capsys, *args, "-o", "orin.json")
    assert code == 0, err
    assert out.strip().endswith("use --target orin.json") and "--target orin-nano-8gb" not in out
    code, out, err = run(monkeypatch, capsys, *args, "-o", "orinprofile")
    assert out.strip().endswith("use --target ./orinprofile"), out
    code, out, err = run(monkeypatch, capsys, "targets", "--target", "./orinprofile", "--json")
    assert code == 0 and json.loads(out)["origin"] == "orinprofile", err


def test_a_broken_cached_profile_is_a_warning_in_the_list(monkeypatch, capsys, tmp_path):
    """A truncated calibrated profile for one target made `deployopt targets` one error line, with
    none of the 15 targets listed; now that row is the built-in one, with a warning, while
    `--target` of that name still refuses the broken file."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    broken = tmp_path / "cache" / "targets" / "nano.json"
    broken.parent.mkdir(parents=True)
    broken.write_text(json.dumps(get_target("nano").to_json())[:300])
    code, out, err = run(monkeypatch, capsys, "targets", "--json")
    assert code == 0 and len(json.loads(out)) == len(list_targets())
    assert err.startswith(f"warning: nano: cannot read target profile {broken}: ") and err.count("\n") == 1
    assert "`--target nano` fails until that file is fixed or removed" in " ".join(err.split())
    code, out, err = run(monkeypatch, capsys, "targets", "--target", "nano")
    assert code == 2 and err.startswith(f"error: cannot read target profile {broken}: ")


def test_calibrate_refuses_what_would_write_a_wrong_profile(monkeypatch, capsys, tmp_path):
    """No dtype to fit (an empty profile that would shadow the built-in target), a --name that is
    a path (a file outside the cache), an -o that cannot be written: one line, nothing measured."""
    from deployopt.backends import base

    def no_backend(name):
        raise AssertionError("measured although the options were bad")

    monkeypatch.setattr(base, "get_backend", no_backend)
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    a_file = tmp_path / "file.json"
    a_file.write_text("{}")
    cases = [
        (["--dtype", ","], "--dtype ',': give at least one of fp16, fp32"),
        (["--dtype", " "], "--dtype ' ': give at least one of fp16, fp32"),
        (["--name", "../../escaped"], "--name '../../escaped': a profile name, not a path"),
        (["--name", ".."], "--name '..': a profile name, not a path"),
        # names no --target could reach, and a built-in name over another GPU's or fewer SMs' profile
        (["--name", "local"], "--name 'local': --target local reads the GPU present, so no --target"),
        (["--name", "mine.json"], "--name 'mine.json': --target mine.json is read as a file path"),
        (["--name", "nano"], "--name 'nano': a built-in target's name; a profile of h200 under it would"),
        (["--name", "h200", "--sms", "8"], "a profile of h200 at 8 SMs under it would change"),
        (["-o", str(tmp_path)], f"cannot write {tmp_path}: it is a folder"),
        (["-o", str(a_file / "p.json")], f"cannot write {a_file / 'p.json'}: {a_file} is a file"),
    ]
    for extra, message in cases:
        code, _, err = run(monkeypatch, capsys, "calibrate", "--target", "h200", "--measure", "fake", *extra)
        assert code == 2, (extra, err)
        assert message in err and err.strip().count("\n") == 0 and "Traceback" not in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["file.json"]


def test_targets_sms_beyond_every_target_and_a_binary_profile_are_one_line(monkeypatch, capsys, tmp_path):
    code, out, err = run(monkeypatch, capsys, "targets", "--sms", "100000")
    assert code == 2 and out == ""
    assert err.startswith("error: --sms 100000: no built-in target has that many SMs (the largest, ")
    assert err.strip().count("\n") == 0
    binary = tmp_path / "model.onnx"
    binary.write_bytes(b"\x08\x07\xc8\xff\xfe binary, not JSON")
    code, _, err = run(monkeypatch, capsys, "targets", "--target", str(binary))
    assert code == 2 and err == f"error: {binary} is not a deployopt target profile (not JSON text)\n"


def test_a_folder_or_empty_file_as_the_target_profile(monkeypatch, capsys, tmp_path):
    """A folder was "cannot read target profile D: [Errno 21] Is a directory: 'D'", an empty file
    "Expecting value: line 1 column 1 (char 0)"; now said as every other input path says them."""
    folder = tmp_path / "profiles.json"
    folder.mkdir()
    empty = tmp_path / "empty.json"
    empty.write_text("\n")
    for path, message in ((folder, "is a folder"), (empty, "empty file")):
        for args in (["targets"], ["staircase", "--input", "1x8x8x8", "--out-channels", "8"]):
            code, out, err = run(monkeypatch, capsys, *args, "--target", str(path))
            assert (
                code == 2
                and out == ""
                and err == f"error: {path}: {message}, expected a target profile (.json)\n"
            ), err


def test_staircase_unwritable_plot_is_one_line_before_measuring(monkeypatch, capsys, tmp_path):
    from deployopt.backends import base

    def no_backend(name):
        raise AssertionError("measured although --plot cannot be written")

    monkeypatch.setattr(base, "get_backend", no_backend)
    a_file = tmp_path / "file.png"
    a_file.write_bytes(b"")
    for dest, message in [(tmp_path, "it is a folder"), (a_file / "s.png", f"{a_file} is a file")]:
        code, _, err = run(
            monkeypatch, capsys, "staircase", "--target", "h200", "--input", "8x128x28x28",
            "--out-channels", "16:64:16", "--measure", "fake", "--plot", str(dest),
        )  # fmt: skip
        assert code == 2 and err.startswith(f"error: cannot write {dest}: ") and message in err, err
        assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert [p.name for p in tmp_path.iterdir()] == ["file.png"]


COMMANDS = (
    "optimize", "analyze", "apply", "verify", "targets", "staircase", "calibrate", "backends", "bench",
    "profile", "compare",
)  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_help_texts_print_as_written(monkeypatch, capsys, command):
    """rich turns ':name:' in help text into an emoji (the staircase help's 'a:b:s' printed as
    'a🅱s'): every command's --help holds no emoji, and the width syntax reads start:stop:step."""
    code, out, _ = run(monkeypatch, capsys, command, "--help")
    assert code == 0 and out
    emoji = [c for c in out if 0x1F000 <= ord(c) <= 0x1FAFF or 0x2600 <= ord(c) <= 0x27BF]
    assert emoji == []
    if command in ("staircase", "calibrate"):
        assert "start:stop:step" in out


def test_every_option_says_what_it_does() -> None:
    """`staircase --help` listed --stride and --groups with a default and no word on what they are
    (what --groups takes: a divisor of C and of every width, C for depthwise)."""
    import typer.main

    from deployopt.cli.main import app

    command = typer.main.get_command(app)
    bare = [
        f"{name} {param.opts[0]}"
        for name, sub in command.commands.items()  # type: ignore[attr-defined]
        for param in sub.params
        if param.param_type_name == "option" and not getattr(param, "help", None)
    ]
    assert bare == []


def test_an_edited_what_if_profile_is_not_listed_as_calibrated(monkeypatch, capsys, tmp_path):
    """docs/wave_model.md's power-mode recipe (`targets --target orin-nano-8gb --json`, clock edited,
    `--target super.json`) is a what-if on default parameters: the model column must say default,
    as every prediction from it does, not `calibrated:`."""
    doc = get_target("orin-nano-8gb").to_json()
    doc.update(name="super", clock_mhz=1020.0)
    path = tmp_path / "super.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(monkeypatch, capsys, "targets", "--target", str(path))
    assert code == 0, err
    flat = re.sub(r"[\s│]", "", out)
    assert f"default({path})" in flat and "calibrated:" not in flat, out
    assert "fp16: wave model 'cc8.7-fp16 default' (default, not calibrated on hardware)" in out
    # a copy of a built-in fit is fitted, but nobody calibrated it: it said `calibrated: h8.json`
    copy = tmp_path / "h8.json"
    copy.write_text(json.dumps(get_target("h200", sms=8).to_json()))
    code, out, err = run(monkeypatch, capsys, "targets", "--target", str(copy))
    assert code == 0, err
    flat = re.sub(r"[\s│]", "", out)
    assert f"h200-fp16fit,h200-fp32fit(from{copy})" in flat and "calibrated:" not in flat, out


@pytest.mark.parametrize("on_gpu", [False, True])
def test_calibrate_on_the_cpu_says_so_rather_than_suggest_fp32(monkeypatch, capsys, tmp_path, on_gpu):
    """`calibrate --measure torch` as README shows it (fp16 by default) on a machine without CUDA:
    torch refuses fp16 on opening and suggested `--dtype fp32`, which only led to the CPU refusal.
    The CPU refusal comes first; a backend on a GPU that refuses the options keeps its own error."""
    from deployopt.backends import base

    backend = fake_backend(get_target("h200"), on_gpu=on_gpu)
    backend_open = backend.open

    def open_(options):
        if options.dtype != "fp32":
            raise DeployoptError("backend 'fake' runs fp16 only on a CUDA GPU; use --dtype fp32")
        return backend_open(options)

    monkeypatch.setattr(backend, "open", open_)
    monkeypatch.setattr(base, "get_backend", lambda name: backend)
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    code, _, err = run(monkeypatch, capsys, "calibrate", "--target", "h200", "--measure", "fake")
    assert code == 2 and err.strip().count("\n") == 0, err
    if on_gpu:
        assert "use --dtype fp32" in err and "CPU" not in err, err
    else:
        assert "--measure fake: this backend runs on the CPU here" in err and "fp32" not in err, err
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize(("target", "sms"), [("nano", "1 SM,"), ("tx2", "2 SMs,")])
def test_staircase_header_counts_sms_in_words(monkeypatch, capsys, target, sms):
    """The Nano has one SM: '1 SM', not '1 SMs'."""
    code, out, _ = run(
        monkeypatch, capsys, "staircase", "--target", target, "--input", "1x64x28x28", "--kernel", "3",
        "--out-channels", "16,32",
    )  # fmt: skip
    assert code == 0 and f"({target}, {sms} CC" in out


def test_staircase_plot_format_follows_the_name(monkeypatch, capsys, tmp_path):
    """.svg gives an SVG (for docs), .pdf a PDF; a .txt name is refused before any work, nothing written."""
    base = ["staircase", "--target", "nano", "--input", "1x16x8x8", "--kernel", "3"]
    base += ["--out-channels", "16,32"]
    for name, head in (("s.svg", b"<?xml"), ("s.pdf", b"%PDF"), ("s.png", b"\x89PNG"), ("s", b"\x89PNG")):
        code, _, err = run(monkeypatch, capsys, *base, "--plot", str(tmp_path / name))
        assert code == 0, err
        assert (tmp_path / name).read_bytes().startswith(head)
    code, _, err = run(monkeypatch, capsys, *base, "--plot", str(tmp_path / "s.txt"))
    want = f"error: --plot {tmp_path / 's.txt'}: name it .png, .svg or .pdf (got '.txt')"
    assert code == 2 and err.strip() == want
    assert not (tmp_path / "s.txt").exists()


def test_staircase_says_when_a_conv_is_too_small_for_waves(monkeypatch, capsys) -> None:
    """MobileNetV2's last 1×1 at batch 1 on the full H200 is mostly fixed cost: the JSON carries
    its size class, the table a note; a batch-8 3×3 on 8 SMs is wave-bound and gets no note."""
    tiny = ["staircase", "--target", "h200", "--input", "1x320x7x7", "--kernel", "1",
            "--out-channels", "256:512:64"]  # fmt: skip
    code, out, err = run(monkeypatch, capsys, *tiny, "--json")
    assert code == 0, err
    doc = json.loads(out)
    sc = doc["size_class"]
    fixed = get_target("h200").wave_params("fp16").fixed_us
    assert sc["fixed_us"] == pytest.approx(fixed)
    assert (sc["launch_bound_below"], sc["wave_bound_from"]) == (1.75, 4)
    median = sorted(p["predicted_us"] for p in doc["points"])[2]
    assert sc["predicted_median_us"] == pytest.approx(median) and median < 1.75 * fixed
    assert sc["class"] == "launch-bound"
    code, out, _ = run(monkeypatch, capsys, *tiny)
    assert code == 0 and "note: launch-bound (predicted median" in " ".join(out.split())
    big = ["staircase", "--target", "h200", "--sms", "8", "--input", "8x128x28x28",
           "--out-channels", "64:128:32"]  # fmt: skip
    code, out, _ = run(monkeypatch, capsys, *big, "--json")
    assert json.loads(out)["size_class"]["class"] == "wave-bound"
    code, out, _ = run(monkeypatch, capsys, *big)
    assert code == 0 and "note:" not in out


@pytest.mark.parametrize(
    ("on_gpu", "env", "warned"),
    [
        (
            False,
            {"device": "CPU (no CUDA device)"},
            "--measure fake measures on this machine's CPU, not on the GPU of nano",
        ),
        (None, {"device": "NVIDIA RTX 4090", "compute_capability": "8.9"}, "NVIDIA RTX 4090 is not nano"),
        (None, {"device": "NVIDIA Jetson Nano", "compute_capability": "5.3"}, None),
    ],
)
def test_staircase_measured_says_where_in_plot_and_warns_off_target(monkeypatch, capsys, on_gpu, env, warned):
    """`staircase --target nano --measure torch --plot` on a laptop drew "measured on torch" under a
    "Jetson Nano" title: the plot did not say the CPU timed it, and no line warned (optimize does)."""
    from deployopt import plots
    from deployopt.backends import base

    backend = fake_backend(get_target("nano"), on_gpu=on_gpu)
    measure_convs = None

    def open_(options):
        nonlocal measure_convs
        session = type(backend).open(backend, options)
        measure_convs = session.measure_convs
        timings = lambda shapes: [dataclasses.replace(t, environment=env) for t in measure_convs(shapes)]  # noqa: E731
        monkeypatch.setattr(session, "measure_convs", timings)
        return session

    labels: list[str] = []
    monkeypatch.setattr(backend, "open", open_)
    monkeypatch.setattr(base, "get_backend", lambda name: backend)
    monkeypatch.setattr(plots, "plot_staircase", lambda *a, **kw: labels.append(kw["measured_label"]))
    code, out, err = run(
        monkeypatch, capsys, "staircase", "--target", "nano", "--input", "1x64x28x28", "--dtype", "fp32",
        "--out-channels", "16,32", "--measure", "fake", "--runs", "3", "--plot", "p.png",
    )  # fmt: skip
    assert code == 0, err
    assert labels == [
        f"measured on fake ({env['device']}) (median of 3 runs, bars from the first to the third quartile)"
    ]
    assert f"measured on backend fake, median and IQR of 3 runs per width ({env['device']})" in out
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert [warned in w for w in warnings] == ([True] if warned else []), err


@pytest.mark.parametrize(
    ("given", "hint"),
    [("orin_nano_8gb", "did you mean 'orin-nano-8gb'? "), ("Nano", "did you mean 'nano'? "), ("jetson", "")],
)
def test_a_mistyped_target_names_the_closest_one(monkeypatch, capsys, given, hint):
    """A typo gets the nearest valid name first (difflib), then the whole list as before; a name
    near none gets the list alone."""
    code, _, err = run(monkeypatch, capsys, "targets", "--target", given)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: unknown target {given!r}; {hint}choose one of: a100, agx-orin-32gb")


def test_a_target_page_cites_what_a_user_has_and_says_uncalibrated_once():
    """Every source is a public document or deployopt's own measurement (it cited shared/FINDINGS.md,
    a file no installed package has), and a default wave model's line says 'not calibrated on
    hardware' once: in describe(), not again at the end of its source."""
    from deployopt.targets import builtin_names

    for name in builtin_names():
        target = get_target(name)
        assert "FINDINGS" not in json.dumps(target.to_json()), name
        for dtype in target.dtypes():
            params = target.wave_params(dtype)
            line = f"{params.describe()} — {params.source}"
            assert line.count("not calibrated on hardware") == (0 if params.fitted else 1), (name, dtype)


def test_staircase_shows_a_width_that_was_timed_again(monkeypatch, capsys):
    """A width the torch backend re-timed as a spike (cuda_conv.spikes) lists its medians in the
    JSON point and in a note under the table; the run's `measured.environment` does not carry them."""
    from deployopt.backends import base
    from deployopt.backends.cuda_conv import RETIMED

    def retime_the_second(timings):
        timings[1].environment = {**timings[1].environment, RETIMED: [310.0, timings[1].median_us]}

    backend = fake_backend(get_target("h200", sms=8), after=retime_the_second)
    monkeypatch.setattr(base, "get_backend", lambda name: backend)
    args = [
        "staircase",
        "--target",
        "h200",
        "--sms",
        "8",
        "--input",
        "8x128x28x28",
        "--out-channels",
        "64:128:32",
    ]
    code, out, err = run(monkeypatch, capsys, *args, "--measure", "fake", "--json")
    assert code == 0, err
    doc = json.loads(out)
    points = doc["points"]
    assert [p.get("measured_retimed_medians_us") for p in points] == [
        None,
        [310.0, points[1]["measured_us"]],
        None,
    ]
    assert RETIMED not in doc["measured"]["environment"]
    code, out, err = run(monkeypatch, capsys, *args, "--measure", "fake")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "note: timed again, being over 2× their neighbours' median" in flat
    assert f"96: 310.0 → {points[1]['measured_us']:.1f} µs" in flat


def _profile(tmp_path, name: str, target: str = "h200", facts: dict | None = None, fp16: dict | None = None):
    """`targets --target T --json` of a built-in, edited: its facts, and its fp16 params kept as fitted."""
    doc = get_target(target).to_json()
    doc.update(facts or {})
    if fp16 is not None:
        doc["params"]["fp16"].update(fp16, fitted=True)
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_a_profile_of_infinite_or_implausible_values_is_one_line_never_infinity_in_json(
    monkeypatch, capsys, tmp_path
):
    """Bug bash: `"sms": Infinity` was an OverflowError traceback, a small_tile of 1e308 a
    ZeroDivisionError, a tile [128] a ValueError; a wave of 1e308 µs printed `Infinity` into
    `staircase --json` (no JSON) and a clock of 1e-300 MHz latencies of 1e305 µs."""
    base = ["staircase", "--input", "8x128x28x28", "--out-channels", "16:64:16", "--json"]
    cases = [
        (
            _profile(tmp_path, "sms.json", facts={"sms": float("inf")}),
            "sms must be an integer above 0, not inf",
        ),
        (_profile(tmp_path, "clock.json", facts={"clock_mhz": 1e-300}), "clock_mhz must be from 10 to 10000"),
        (_profile(tmp_path, "tile.json", fp16={"small_tile": 1e308}), "small_tile must be from 0 to 1024"),
        (_profile(tmp_path, "wave.json", fp16={"wave_us": 1e308}), "wave_us must be from 0 to 1e+06"),
        (_profile(tmp_path, "macs.json", fp16={"macs_per_us_per_sm": 1e-300}), "macs_per_us_per_sm must be"),
    ]
    for path, message in cases:
        code, out, err = run(monkeypatch, capsys, *base, "--target", str(path))
        assert code == 2 and out == "", (path, out)
        assert err.startswith(f"error: target profile {path}: ") and message in err, err
        assert err.count("\n") == 1 and "Traceback" not in err


def test_a_cached_profile_without_a_padded_family_is_one_line_for_its_name(monkeypatch, capsys, tmp_path):
    """A profile in the user cache whose families all need aligned channels made `--target a100`
    (its name, not a path) a `ValueError: no kernel family … accepts alignment 1` traceback for 17
    output channels; now the profile is refused when it is read, for every width."""
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))
    doc = get_target("a100").to_json()
    for params in doc["params"].values():
        params.update(fitted=True, families=[f for f in params["families"] if f["min_align"] > 1])
    cached = tmp_path / "cache" / "targets" / "a100.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps({"deployopt_profile": 1, "target": doc, "params": doc.pop("params")}))
    for widths in ("17", "16"):
        args = ["staircase", "--target", "a100", "--input", "8x128x28x28", "--out-channels", widths]
        code, _, err = run(monkeypatch, capsys, *args)
        assert code == 2 and err.startswith(f"error: target profile {cached}: unreadable fp16 params"), err
        assert "families must include one with min_align 1" in err and err.count("\n") == 1


def test_a_calibrated_profile_with_fewer_full_sms_than_sms_is_one_line(monkeypatch, capsys, tmp_path):
    """`targets` showed "8/2" SMs for it, and `--sms 4` said "has only -3 SMs" for full_sms -3."""
    facts = get_target("orin-nano-8gb").to_json()
    facts.pop("params")
    for full, message in ((2, "full_sms 2 is fewer than sms 8"), (-3, "full_sms must be an integer above 0")):
        path = tmp_path / "calibrated.json"
        path.write_text(
            json.dumps({"deployopt_profile": 1, "target": {**facts, "full_sms": full}, "params": {}})
        )
        for args in (
            ["targets"],
            ["staircase", "--sms", "4", "--input", "8x128x28x28", "--out-channels", "16"],
        ):
            code, out, err = run(monkeypatch, capsys, *args, "--target", str(path))
            assert code == 2 and out == "" and message in err and err.count("\n") == 1, err


def test_staircase_tail_fill_of_one_block_is_not_0_percent(monkeypatch, capsys):
    """1 block in the last wave's 216 slots (108 SMs × 2) printed 0 %, as if the wave were empty."""
    args = ["staircase", "--target", "a100", "--input", "1x64x8x8", "--out-channels", "16"]
    code, out, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["16"])
    assert row[2:6] == ["1", "2", "1", "1%"], row
