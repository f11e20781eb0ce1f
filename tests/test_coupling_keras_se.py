"""Keras' squeeze-excitation (every keras.applications EfficientNet / MobileNetV3 SE block): GAP to
[N, C], `Reshape((1, 1, C))` to the channels-last [N, 1, 1, C], a Transpose back to NCHW, the 1×1
convs. The Reshape only inserts singleton axes, so the channels move to axis 3 and the Transpose
brings them back to axis 1: the expand conv stays free, and no group is made up on the way (a bug
bash's finding 03: "Reshape Reshape_5 mixes channels with other axes", a phantom "Reshape_5 w=1"
and "Transpose_6@Conv_7 w=27")."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from test_coupling_reshape_nc import G, groups, pad_and_trim

from deployopt.coupling import analyze
from deployopt.surgery import apply_plan


def keras_se(target: list[int], transpose: bool = True) -> onnx.ModelProto:
    """conv(4→11) → Relu → expand conv(11→27) → SE(27 → 7 → 27, squeezed through `target`) →
    project conv(27→11) + the residual → a 1×1 head, GAP, Flatten."""
    g = G()
    a = g.node("Relu", [g.conv("x", 4, 11, 3)])
    e = g.node("Relu", [g.conv(a, 11, 27)])
    s = g.node("ReduceMean", [e], axes=[2, 3], keepdims=0)  # [N, 27]
    s = g.node("Reshape", [s, g.ints(target)])
    if transpose:
        s = g.node("Transpose", [s], perm=[0, 3, 1, 2])
    s = g.node("Sigmoid", [g.conv(g.node("Relu", [g.conv(s, 27, 7)]), 7, 27)])
    y = g.node("Add", [a, g.conv(g.node("Mul", [e, s]), 27, 11)])
    out = g.node("Flatten", [g.node("GlobalAveragePool", [g.conv(y, 11, 3)])])
    return g.build(out, [1, 4, 10, 10], opset=13)


@pytest.mark.parametrize("target", [[-1, 1, 1, 27], [1, 1, 1, 27], [0, 1, 1, 27], [1, 1, 1, -1]], ids=str)
def test_reshape_to_1_1_c_then_transpose_keeps_the_expand_conv_free(target: list[int]) -> None:
    model = keras_se(target)
    assert groups(model) == {
        "Conv_0": (11, ""),
        "Conv_2": (27, ""),  # was frozen, "Reshape Reshape_5 mixes channels with other axes"
        "Conv_7": (7, ""),
        "Conv_14": (3, "feeds the graph output 'Flatten_16'"),
    }  # and no "Reshape_5" (w=1) nor "Transpose_6@Conv_7" groups
    pad_and_trim(model, ["Conv_0", "Conv_2", "Conv_7"])


def test_the_channel_count_is_kept_in_step_where_the_target_spells_it_out() -> None:
    model = keras_se([-1, 1, 1, 27])
    padded = apply_plan(model, {"Conv_2": 32}, analyze(model))
    reshape = next(n for n in padded.graph.node if n.op_type == "Reshape")
    target = next(t for t in padded.graph.initializer if t.name == reshape.input[1])
    assert numpy_helper.to_array(target).tolist() == [-1, 1, 1, 32]


def test_the_nchw_spelling_is_unchanged() -> None:
    """Reshape [-1, 27, 1, 1] with no Transpose (the finding's contrast case): free as before."""
    model = keras_se([-1, 27, 1, 1], transpose=False)
    assert groups(model) == {
        "Conv_0": (11, ""),
        "Conv_2": (27, ""),
        "Conv_6": (7, ""),
        "Conv_13": (3, "feeds the graph output 'Flatten_15'"),
    }
    pad_and_trim(model, ["Conv_2"])


def test_a_conv_reading_the_channels_last_tensor_without_the_transpose_freezes() -> None:
    """Without the Transpose the NHWC [N, 1, 1, 27] reaches the conv as a 1-channel map: the
    conv reads channels off axis 1, and the expand width freezes rather than be misread."""
    g = G()
    e = g.node("Relu", [g.conv("x", 4, 27)])
    s = g.node("Reshape", [g.node("ReduceMean", [e], axes=[2, 3], keepdims=0), g.ints([-1, 1, 1, 27])])
    model = g.build(g.node("Conv", [s, g.c(np.ones((2, 1, 1, 1)))], kernel_shape=[1, 1]), [1, 4, 6, 6])
    conv = analyze(model).group("Conv_0")
    assert conv.frozen and conv.reason == "Conv Conv_4 expects channels on axis 1, not axis 3"
