"""`staircase --kernel` pads 'same', as its help says: k - 1 in all, so the output is the input's
size (at stride 1). An even kernel got k // 2 on each side, k in all: -k 2 on 17x19 priced an
18x20 output (implicit GEMM M = 360, not 323). The measured conv is the one priced."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_runner import run_cli

from deployopt.backends.ort import OrtSession
from deployopt.layers import ConvShape


def _shape(doc: dict[str, Any]) -> ConvShape:
    """The JSON's conv at its first width (the shape has no K: the points give it)."""
    s = {**doc["shape"], "k": doc["points"][0]["out_channels"]}
    return ConvShape(
        **{**s, "stride": tuple(s["stride"]), "pad": tuple(s["pad"]), "dilation": tuple(s["dilation"])}
    )


@pytest.mark.parametrize(
    ("kernel", "stride", "out"),
    [("2", 1, (17, 19)), ("4x2", 1, (17, 19)), ("3", 1, (17, 19)), ("2", 2, (9, 10)), ("5", 2, (9, 10))],
)
def test_staircase_pads_same(monkeypatch, capsys, kernel: str, stride: int, out: tuple[int, int]) -> None:
    args = ["staircase", "-t", "a100", "--input", "1x13x17x19", "--out-channels", "16", "-k", kernel]
    code, text, err = run_cli(monkeypatch, capsys, *args, "--stride", str(stride), "--json")
    assert code == 0, err
    shape = _shape(json.loads(text))
    assert (shape.p, shape.q) == out  # ceil(H / stride) × ceil(W / stride)
    code, text, err = run_cli(monkeypatch, capsys, *args, "--stride", str(stride))
    assert code == 0, err
    assert f"implicit GEMM M={out[0] * out[1]}," in text


def test_the_measured_conv_is_the_priced_one(monkeypatch, capsys) -> None:
    """--measure ort builds and times a conv of the priced shape: its output is 'same' too."""
    built = []
    real = OrtSession.conv_model

    def conv_model(self: OrtSession, shape: ConvShape) -> onnx.ModelProto:
        model = real(self, shape)
        built.append((shape, model))
        return model

    monkeypatch.setattr(OrtSession, "conv_model", conv_model)
    args = ["staircase", "-t", "a100", "--input", "1x13x17x19", "--out-channels", "16,24", "-k", "2"]
    code, text, err = run_cli(monkeypatch, capsys, *args, "--measure", "ort", "--runs", "5", "--json")
    assert code == 0, err
    doc = json.loads(text)
    priced = _shape(doc)
    assert [s for s, _ in built] == [priced.with_out_channels(16), priced.with_out_channels(24)]
    assert all(p["measured_us"] > 0 for p in doc["points"])
    shape, model = built[0]
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.zeros([shape.n, shape.c, shape.h, shape.w], np.float32)
    (y,) = sess.run(None, {sess.get_inputs()[0].name: x})
    assert y.shape == (1, 16, 17, 19)
