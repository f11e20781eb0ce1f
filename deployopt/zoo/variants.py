"""Rewrites of a zoo model into the forms exporters really produce, with the same outputs.

Real ONNX files keep weights as Constant nodes, compute biases through ConstantOfShape
subgraphs, use Sum instead of Add, and leave the batch dimension symbolic. Loading code and
channel surgery must handle all of them; these variants let tests check that on known models
(each variant's outputs equal the original's up to float rounding). For an old-opset model build
with `opset=9` (every zoo builder takes it).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def weights_as_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every initializer becomes a Constant node with the same output name (as some exporters do)."""
    out = _copy(model)
    g = out.graph
    consts = [
        helper.make_node("Constant", [], [init.name], name=f"const.{init.name}", value=init)
        for init in g.initializer
    ]
    nodes = consts + list(g.node)
    del g.initializer[:]
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(out)
    return out


def bias_from_constantofshape(model: onnx.ModelProto) -> onnx.ModelProto:
    """Biases computed at run time by ConstantOfShape (+ Add) subgraphs that must be folded.

    - every Gemm/Conv bias initializer B becomes ConstantOfShape([len(B)], value=mean(B)) + (B - mean);
    - every second Conv without a bias gets one: ConstantOfShape([K], value=0) (an exporter pattern).
    """
    out = _copy(model)
    g = out.graph
    inits = {t.name: t for t in g.initializer}
    new_nodes: list[onnx.NodeProto] = []
    used = {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
    bias_free_convs = 0

    def fresh(name: str) -> str:
        while name in used:
            name += "_"
        used.add(name)
        return name

    def const_of_shape(prefix: str, length: int, value: float) -> str:
        shape_name = fresh(f"{prefix}.shape")
        g.initializer.append(numpy_helper.from_array(np.array([length], dtype=np.int64), shape_name))
        out_name = fresh(f"{prefix}.filled")
        new_nodes.append(
            helper.make_node(
                "ConstantOfShape",
                [shape_name],
                [out_name],
                name=fresh(f"{prefix}.constantofshape"),
                value=numpy_helper.from_array(np.array([value], dtype=np.float32)),
            )
        )
        return out_name

    for node in g.node:
        if node.op_type in ("Conv", "Gemm") and len(node.input) >= 3 and node.input[2] in inits:
            bias = numpy_helper.to_array(inits[node.input[2]])
            mean = float(bias.mean())
            filled = const_of_shape(node.input[2], bias.size, mean)
            delta = fresh(f"{node.input[2]}.delta")
            g.initializer.append(numpy_helper.from_array((bias - np.float32(mean)).astype(np.float32), delta))
            summed = fresh(f"{node.input[2]}.computed")
            new_nodes.append(
                helper.make_node("Add", [filled, delta], [summed], name=fresh(f"{node.name}.bias_add"))
            )
            node.input[2] = summed
        elif node.op_type == "Conv" and len(node.input) == 2:
            if bias_free_convs % 2 == 0:
                k = inits[node.input[1]].dims[0]
                node.input.append(const_of_shape(f"{node.name}.bias", int(k), 0.0))
            bias_free_convs += 1
        new_nodes.append(node)
    del g.node[:]
    g.node.extend(new_nodes)
    still_used = {i for n in g.node for i in n.input}
    kept = [t for t in g.initializer if t.name in still_used]
    del g.initializer[:]
    g.initializer.extend(kept)
    onnx.checker.check_model(out)
    return out


def with_sum(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every Add becomes a Sum (older exporters and some converters emit Sum for residuals)."""
    out = _copy(model)
    for node in out.graph.node:
        if node.op_type == "Add":
            node.op_type = "Sum"
    onnx.checker.check_model(out)
    return out


def with_dynamic_batch(model: onnx.ModelProto, dim_param: str = "batch") -> onnx.ModelProto:
    """The batch dimension of every graph input and output becomes symbolic (`dim_param`)."""
    out = _copy(model)
    g = out.graph
    init_names = {t.name for t in g.initializer}
    for vi in [*(i for i in g.input if i.name not in init_names), *g.output]:
        dim = vi.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = dim_param
    del g.value_info[:]
    onnx.checker.check_model(out)
    return out
