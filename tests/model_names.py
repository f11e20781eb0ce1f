"""A model with every tensor and node name rewritten, for the tests of how names are printed
(control characters, newlines) and kept in what deployopt writes."""

from __future__ import annotations

from typing import Callable

import onnx


def renamed(model: onnx.ModelProto, rename: Callable[[str], str]) -> onnx.ModelProto:
    """`model` with every tensor and node name passed through `rename` (in place; returned)."""
    g = model.graph
    names = {v.name for v in [*g.input, *g.output, *g.value_info]} | {t.name for t in g.initializer}
    names |= {o for n in g.node for o in n.output}
    new = {n: rename(n) for n in names}
    for values in (g.input, g.output, g.value_info, g.initializer):
        for v in values:
            v.name = new.get(v.name, v.name)
    for n in g.node:
        n.input[:] = [new.get(i, i) for i in n.input]
        n.output[:] = [new.get(o, o) for o in n.output]
        n.name = rename(n.name)
    return model
