"""The rule registry and the state rules write into while the graph is walked.

A rule states, for one ONNX op type, how the channel sets of its inputs and outputs relate: it
passes them through, joins them into one group, concatenates them at offsets, consumes them as a
reduction dimension, produces new ones, or freezes them. Rules only ever *declare* relations; the
union-find in `CouplingState` closes them into groups, so a rule never needs to see the whole
graph. An op without a rule freezes everything it touches: an unknown op can stop an edit, it can
never cause a wrong one.

Adding an op is one small function in deployopt/coupling/rules/:

    @rule("Celu")
    def celu(ctx: CouplingState, node: onnx.NodeProto) -> None:
        ctx.pass_through(node)

Where the channels are: every tensor's channel set lies on one axis, `CouplingState.channel_axis`
(axis 1 unless a Transpose moved it, or a MatMul produced channels on the last axis). A rule sees
only tensors with channels on axis 1 unless it is registered with `any_axis=True` (it then reads
`ctx.channel_axis`); for any other rule the walk freezes the node ("expects channels on axis 1"),
so a rule written for NCHW can never misread a channels-last tensor (unless every such set is
frozen already: the rule then reads the input as untraced, see `_forget_frozen_moved`).

Flattened channels: a Flatten (or Reshape) of an [N, C, H, W] map to [N, C·H·W] keeps channel c as
the H·W consecutive features c·H·W … (c+1)·H·W − 1, so padding a channel appends features and trimming
one drops a block of them. The flattened tensor keeps the map's layout with a `spread` of H·W; only
rules registered with `spread=True` may read it, any other freezes ("reads channels flattened with
their spatial positions"): Gemm and MatMul bind their weights with that spread, and per-element ops
(Relu, Dropout, Sigmoid …; Add, Mul … of such features and scalar constants) pass it on through
`pass_through`.
A padded feature may become nonzero on the way (Sigmoid(0) = 0.5): the classifier reads it with
zero weights. Dead-channel detection therefore reads the features the classifier reads, a block of
`spread` per channel, not the map before the Flatten.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import onnx
from onnx import numpy_helper

from deployopt.errors import ModelError, PlanError, first_line
from deployopt.model import default_opset, unique_node_names

#: One run of channels inside a tensor's channel axis: (atom id, width).
Segment = tuple[int, int]
#: A tensor's channel axis as consecutive segments (one, unless a Concat joined several groups).
Layout = tuple[Segment, ...]

RuleFn = Callable[["CouplingState", onnx.NodeProto], None]
RULES: dict[str, RuleFn] = {}
#: op types whose rule reads `ctx.channel_axis` and so may see channels on any axis
ANY_AXIS: set[str] = set()
#: op types whose rule reads `ctx.spread` and so may see channels flattened with spatial positions
SPREAD: set[str] = set()


def rule(*op_types: str, any_axis: bool = False, spread: bool = False) -> Callable[[RuleFn], RuleFn]:
    """Register a coupling rule for one or more ONNX op types (default domain).

    `any_axis=True`: the rule handles inputs whose channels are not on axis 1 (it asks
    `ctx.channel_axis`); without it, such an input freezes the node before the rule runs.
    `spread=True`: likewise for inputs whose channels were flattened with their spatial positions
    (it asks `ctx.spread`).
    """

    def register(fn: RuleFn) -> RuleFn:
        for op in op_types:
            if op in RULES:
                raise ValueError(f"a coupling rule for {op} is already registered ({RULES[op].__module__})")
            RULES[op] = fn
            if any_axis:
                ANY_AXIS.add(op)
            if spread:
                SPREAD.add(op)
        return fn

    return register


@dataclass
class Binding:
    """A constant whose `axis` runs over the channels of `layout`: resized with the groups in it."""

    init: str
    axis: int
    layout: Layout
    pad: float  # value for padded entries: keeps a padded channel exactly neutral
    node: int  # index of the node that reads the constant
    spread: int = 1  # entries per channel along `axis` (H·W for a classifier read after a Flatten)


@dataclass
class AttrEdit:
    """A node attribute that must equal the total width of `layout` (depthwise conv `group`)."""

    node: int
    attr: str
    layout: Layout
    index: Optional[int] = None  # for a list attribute (Split's `split` before opset 13)
    scale: int = 1  # the value is the width times this (-1: a Slice bound counted from the end)


@dataclass
class ShapeEdit:
    """An int64 shape constant whose entry `index` is the width of `layout` (Resize sizes, Reshape)."""

    init: str
    index: int
    layout: Layout
    node: int
    scale: int = 1  # the entry is the width times this (C·H·W for a Reshape that flattens a map)


@dataclass
class ConvRecord:
    node: int
    x: str
    in_layout: Layout
    out_layout: Optional[Layout]
    weight_shape: tuple[int, ...]


@dataclass
class _Atom:
    width: int
    source: str  # node name (or "input:<name>") that created it; used to name the group
    producer: Optional[int]  # node index that produces these channels (Conv/Gemm/unknown op)
    frozen: str = ""  # reason, "" when free
    offset: int = 0  # first of the producer's output channels that this atom covers
    order: tuple[int, ...] = ()  # creation order; a refined piece sorts where its parent did
    retired: bool = False  # replaced by pieces (see CouplingState.refine)
    statistic: bool = False  # one value over all channels (a Reduce over them, kept as an axis)


#: The most rounds of cuts `CouplingState.union` makes before it freezes two sets that will not
#: match (see there).
_MAX_UNION_ROUNDS = 128


class CouplingState:
    """Union-find over channel atoms plus everything surgery must edit when a group changes width."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.graph = model.graph
        self.nodes = list(model.graph.node)
        # distinct, as load_model names them: convs and groups are keyed by these names
        self.node_names = unique_node_names(self.nodes)
        self.opset = default_opset(model)
        self._parent: list[int] = []
        self.atoms: list[_Atom] = []
        self.layouts: dict[str, Layout] = {}
        self.axes: dict[str, int] = {}  # channel axis of a tensor, where it is not axis 1
        self.spread: dict[str, int] = {}  # entries per channel, where a Flatten spread them (H·W)
        self.shapes: dict[str, list[int]] = {}
        self.bindings: list[Binding] = []
        self.attr_edits: list[AttrEdit] = []
        self.shape_edits: list[ShapeEdit] = []
        self.convs: list[ConvRecord] = []
        self.consumed: list[tuple[int, str]] = []  # (node, tensor) read with channels as reduction dim
        self._inits = {t.name: t for t in model.graph.initializer}
        self._const_nodes = _constant_values(self.nodes)
        #: values read by the walk (and `const` callers after it) from the analysed model: at apply
        #: time weights are read from the model given, through `constants_of`
        self._const_cache: dict[str, np.ndarray] = {}
        #: name → (element type, dims) of every initializer, as analysed (`constants_of` checks them)
        self._init_types = {t.name: (t.data_type, tuple(t.dims)) for t in model.graph.initializer}
        #: outputs of QuantizeLinear/DequantizeLinear of constants (quantized weights), by name
        self._quantized: dict[str, onnx.NodeProto] = {}
        for n in self.nodes:
            if _quantizes_constants(n, self.is_const, self._elem_type):
                self._quantized[n.output[0]] = n
        #: per quantized weight: (reader node, layout) of every binding made through it
        self._quantized_readers: dict[str, list[tuple[int, Layout]]] = {}
        self.users: dict[str, list[int]] = {}
        self.producer: dict[str, int] = {}  # tensor → index of the node that outputs it
        #: per node with subgraphs (If, Loop, Scan): the outer tensors its bodies read by name
        self.implicit: dict[int, list[str]] = {}
        for i, n in enumerate(self.nodes):
            outer = sorted(subgraph_reads(n))
            if outer:
                self.implicit[i] = outer
            for t in [*n.input, *outer]:
                if t:
                    self.users.setdefault(t, []).append(i)
            for t in n.output:
                if t:
                    self.producer[t] = i
        self._collect_shapes()

    # ----- facts about tensors -------------------------------------------------------------
    def _collect_shapes(self) -> None:
        g = self.graph
        for vi in [*g.input, *g.value_info, *g.output]:
            tt = vi.type.tensor_type
            if tt.HasField("shape"):
                dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
                self.shapes[vi.name] = dims
        for t in g.initializer:
            self.shapes[t.name] = list(t.dims)
        for name, a in self._const_nodes.items():
            self.shapes[name] = list(a.t.dims)
        for name, q in self._quantized.items():  # a quantized weight has its input's shape
            if q.input[0] in self.shapes:
                self.shapes[name] = self.shapes[q.input[0]]

    def shape(self, tensor: str) -> Optional[list[int]]:
        return self.shapes.get(tensor)

    def is_const(self, tensor: str) -> bool:
        return tensor in self._inits or tensor in self._const_nodes or tensor in self._quantized

    def const(self, tensor: str) -> Optional[np.ndarray]:
        """The value of a constant input, else None.

        A constant is an initializer, a Constant node's value, or a quantized weight: the output of
        a DequantizeLinear (or QuantizeLinear) whose inputs are constants, read as the values it
        computes (int8 × scale), so a rule reads a QDQ model's weights as it reads float ones.
        `bind` follows such a tensor to the constants it is computed from (`quantized_source`).
        """
        cache = self._const_cache
        return _read_const(tensor, self._inits, self._const_nodes, self._quantized, cache, self.const)

    def drop_weights(self) -> None:
        """Forget the values the walk read but those `check_graph` compares (small integer
        constants): the rest are weights, read again from the model where needed, and holding them
        to the end cost a copy of every weight (VGG16: 460 MiB through `apply` and its write)."""
        self._const_cache = {
            name: arr
            for name, arr in self._const_cache.items()
            if arr.dtype.kind in "iub" and arr.size <= _COMPARED_VALUES
        }

    def constants_of(self, model: onnx.ModelProto) -> Constants:
        """The constants of `model`, read from it by name: what surgery edits and a trim ranks by.

        `model` may be the analysed one with its weights changed since, or another model of the
        same graph (another checkpoint of the architecture): the analysis holds only its structure.
        Any other graph is a one-line PlanError (`check_graph`).
        """
        self.check_graph(model)
        return Constants(model, self._quantized)

    def check_graph(self, model: onnx.ModelProto) -> None:
        """A PlanError unless `model` has the analysed graph: the same nodes (names, op types,
        inputs, outputs and attributes; a tensor attribute's type and shape), graph inputs and
        outputs, initializer names, types and shapes, and the same values of the integer constants
        the walk read (shapes, axes, zero points) and of the small float settings (Clip bounds,
        Resize scales, Pad values: `_settings_difference`). Weights are never compared, only their
        types and shapes: reading them would cost as much as the model. The analysed model itself (weights
        changed in place, say) checks only its initializers' types and shapes."""
        other = model is not self.model
        why = _graph_difference(self, model) if other else None
        why = why or _init_difference(self._init_types, model)
        if why is None and other:
            why = _values_difference(self, model)
        if why is not None:
            raise PlanError(
                f"the analysis is of another graph ({why}); run analyze(model) on this model and "
                "use that analysis"
            )

    def quantized_source(self, tensor: str) -> Optional[onnx.NodeProto]:
        """The QuantizeLinear/DequantizeLinear of constants that computes `tensor`, else None."""
        return self._quantized.get(tensor)

    def _elem_type(self, tensor: str) -> int:
        if tensor in self._inits:
            return self._inits[tensor].data_type
        if tensor in self._const_nodes:
            return self._const_nodes[tensor].t.data_type
        node = self._quantized.get(tensor)
        if node is None:
            return onnx.TensorProto.UNDEFINED
        if node.op_type == "DequantizeLinear":
            return self._elem_type(node.input[1])  # the scale's type
        if len(node.input) > 2 and node.input[2]:
            return self._elem_type(node.input[2])  # the zero point's type
        return onnx.TensorProto.UINT8

    def attr(self, node: onnx.NodeProto, name: str, default: Any = None) -> Any:
        for a in node.attribute:
            if a.name == name:
                return onnx.helper.get_attribute_value(a)
        return default

    def index(self, node: onnx.NodeProto) -> int:
        return self._node_index[id(node)]

    def name(self, node: onnx.NodeProto) -> str:
        return self.node_names[self.index(node)]

    # ----- union-find ------------------------------------------------------------------------
    def find(self, a: int) -> int:
        parent = self._parent
        root = a
        while parent[root] != root:
            root = parent[root]
        while parent[a] != root:
            parent[a], a = root, parent[a]
        return root

    def new_atom(
        self,
        width: int,
        source: str,
        producer: Optional[int],
        frozen: str = "",
        offset: int = 0,
        order: tuple[int, ...] = (),
    ) -> int:
        index = len(self.atoms)
        self._parent.append(index)
        self.atoms.append(_Atom(width, source, producer, frozen, offset, order or (index,)))
        return index

    def new_layout(
        self, node: onnx.NodeProto, width: int, frozen: str = "", output: int = 0, statistic: bool = False
    ) -> Layout:
        """Channels created by `node` (a Conv's filters, a Gemm's columns, an untraceable op)."""
        source = self.name(node) if output == 0 else f"{self.name(node)}:{output}"
        atom = self.new_atom(width, source, self.index(node), frozen)
        self.atoms[atom].statistic = statistic
        return ((atom, width),)

    def frozen_reason(self, atom: int) -> str:
        return self.atoms[self.find(atom)].frozen

    def freeze(self, layout: Optional[Layout], reason: str) -> None:
        for atom, _ in layout or ():
            root = self.atoms[self.find(atom)]
            if not root.frozen:
                root.frozen = reason

    def _union_atoms(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.atoms[rb].order < self.atoms[ra].order:
            ra, rb = rb, ra
        # the older atom stays the root, so a group is named after its first producer
        self._parent[rb] = ra
        if not self.atoms[ra].frozen and self.atoms[rb].frozen:
            self.atoms[ra].frozen = self.atoms[rb].frozen

    def union(self, a: Layout, b: Layout, where: str) -> bool:
        """Declare two tensors' channels equal, segment by segment; freeze both if they cannot be.

        The same width split differently on the two sides (a ghost module's Concat of two halves
        added to one conv's output, or multiplied by an SE gate) is cut at every boundary of either
        side, then joined piece by piece: the conv's output becomes two pieces, each tied to a half.
        """
        a, b = self.current(a), self.current(b)
        total = sum(w for _, w in a)
        # A cut can cut an atom that the other side holds too (Add(Concat(a, b), Concat(b, a)) ties
        # a's channels to b's at shifted offsets): cut again until both sides agree, as Euclid's
        # algorithm does (by subtraction), down to the widths' gcd. A round that does not agree adds
        # a piece; the rounds grow with the ratio of the widths (1 and 64 take 64), and each costs
        # more pieces, so past _MAX_UNION_ROUNDS the sets freeze, saying so (a cap of 32 froze (1,
        # 64) as "different widths"; no cap took seconds at (1, 512), a RecursionError at (1, 1024))
        for _ in range(_MAX_UNION_ROUNDS):
            if [w for _, w in a] == [w for _, w in b]:
                for (x, _), (y, _) in zip(a, b):
                    self._union_atoms(x, y)
                return True
            if total != sum(w for _, w in b) or total < 1:
                break
            bounds = set(_offsets(a)) | set(_offsets(b))
            a = self.cut(a, bounds)
            b = self.cut(b, bounds)
            a = self.current(a)
        if total == sum(w for _, w in b) and total >= 1:
            reason = f"channel sets split too unevenly to match meet at {where} ({_MAX_UNION_ROUNDS} cuts)"
        else:
            reason = f"channel sets of different widths/split meet at {where}"
        self.freeze(a, reason)
        self.freeze(b, reason)
        return False

    def current(self, layout: Layout) -> Layout:
        """`layout` with every atom that has been cut since replaced by its pieces.

        A rule may still hold a layout it read before a `union` or `cut` refined it; everything
        that stores a layout passes it through here, so no record ever names a retired atom.
        """
        if not any(self.atoms[a].retired for a, _ in layout):
            return layout
        return tuple(seg for a, w in layout for seg in self._current(a, w))

    # ----- layouts of tensors ----------------------------------------------------------------
    def layout(self, tensor: str) -> Optional[Layout]:
        return self.layouts.get(tensor)

    def set_layout(self, tensor: str, layout: Optional[Layout], axis: Optional[int] = None) -> None:
        """Record the tensor's channel set (on `axis`; None keeps what is known, else axis 1)."""
        if layout is not None and tensor:
            self.layouts[tensor] = self.current(layout)
            self.set_axis(tensor, axis)

    def set_axis(self, tensor: str, axis: Optional[int]) -> None:
        if axis is None or not tensor:
            return
        if axis == 1:
            self.axes.pop(tensor, None)
        else:
            self.axes[tensor] = axis

    def channel_axis(self, tensor: str) -> int:
        """The axis that holds the tensor's channels: 1 (NCHW, [N, C]) unless a rule moved it.

        This is the one place that knows: a Transpose moves it where its perm puts it, a MatMul
        makes its output's channels the last axis, pass-through ops keep it. Surgery needs no
        copy of it (each constant's channel axis is recorded in its Binding), dead-channel
        detection (deployopt.importance) reads it to index observed tensors.
        """
        return self.axes.get(tensor, 1)

    def channels(self, tensor: str) -> Optional[int]:
        """Width of the tensor's channel axis from the inferred shape, if the tensor has one."""
        shape = self.shape(tensor)
        axis = self.channel_axis(tensor)
        if shape is None or len(shape) < 2 or axis >= len(shape) or shape[axis] < 1:
            return None
        return shape[axis] // self.spread.get(tensor, 1)

    def require_layout(
        self, tensor: str, node: onnx.NodeProto, axis: Optional[int] = None, reason: str = ""
    ) -> Optional[Layout]:
        """The tensor's layout; a frozen one (on `axis`, default 1) if its channels could not be traced
        (`reason`, default "channels of … not traced")."""
        lay = self.layout(tensor)
        if lay is not None:
            return lay
        if axis is not None:
            self.set_axis(tensor, axis)
        width = self.channels(tensor)
        if width is None:
            return None
        why = reason or f"channels of {tensor!r} not traced"
        lay = ((self.new_atom(width, f"{tensor}@{self.name(node)}", None, why), width),)
        self.layouts[tensor] = lay
        return lay

    def consume(self, tensor: str, node: onnx.NodeProto) -> None:
        """`node` reads `tensor`'s channels as a reduction dim (Conv input, Gemm rows)."""
        self.consumed.append((self.index(node), tensor))

    # ----- edits surgery must make -----------------------------------------------------------
    def bind(
        self,
        init: str,
        axis: int,
        layout: Optional[Layout],
        pad: float,
        node: onnx.NodeProto,
        spread: int = 1,
        scale_pad: float = 1.0,
    ) -> None:
        """Bind constant `init` along `axis` to `layout`'s channels, padded with `pad`; a quantized
        one's per-axis scale is padded with `scale_pad` (`_bind_quantized`)."""
        if layout is None or not init:
            return
        if not self.is_const(init):
            # a bias or BatchNorm parameter fed at run time (a graph input, a computed tensor):
            # surgery edits constants only, so these channels cannot change width
            self.freeze(
                layout,
                f"{node.op_type} {self.name(node)} reads {init!r} per channel, and it is not a constant",
            )
            return
        source = self._quantized.get(init)
        if source is not None:
            self._bind_quantized(init, source, axis, layout, pad, node, spread, scale_pad)
            return
        self.bindings.append(Binding(init, axis, self.current(layout), pad, self.index(node), spread))

    def _bind_quantized(
        self,
        tensor: str,
        q: onnx.NodeProto,
        axis: int,
        layout: Layout,
        pad: float,
        reader: onnx.NodeProto,
        spread: int,
        scale_pad: float = 1.0,
    ) -> None:
        """Bind a quantized weight: its integer (or float) input on the same axis, and a per-axis
        scale (padded with `scale_pad`: 1.0, but a conv's int32 bias its input's scale, see
        rules/conv.py) and zero point (0) where they run along the bound axis.

        With zero points 0 (symmetric, the only quantization TensorRT takes), an entry padded with
        the integer p dequantizes to p · scale: the float weight's pad (0, or 1 for a Mul operand
        when the scale runs along the bound axis and is padded with 1). A nonzero zero point, or a
        pad that one shared scale would turn into something else, freezes the channels.
        """
        self._quantized_readers.setdefault(tensor, []).append((self.index(reader), self.current(layout)))
        name = self.name(q)
        scale_name, zp_name = q.input[1], q.input[2] if len(q.input) > 2 else ""
        scale = self.const(scale_name)
        zp = self.const(zp_name) if zp_name else None
        assert scale is not None
        if zp is not None and np.any(zp != 0):
            self.freeze(
                layout,
                f"{q.op_type} {name} quantizes weights with a nonzero zero point (asymmetric; "
                "padded entries would not be 0)",
            )
            return
        x = self.const(q.input[0])
        assert x is not None
        along = scale.size > 1 and normalize_axis(int(self.attr(q, "axis", 1)), x.ndim) == axis
        if pad != 0 and (not along or pad != int(pad)):
            self.freeze(layout, f"{q.op_type} {name}: a pad of {pad:g} cannot be quantized exactly")
            return
        if along:
            self.bind(scale_name, 0, layout, scale_pad, q, spread)
            self.bind(zp_name, 0, layout, 0.0, q, spread)
        self.bind(q.input[0], axis, layout, pad, q, spread)

    def edit_attr(
        self, node: onnx.NodeProto, attr: str, layout: Layout, index: Optional[int] = None, scale: int = 1
    ) -> None:
        self.attr_edits.append(AttrEdit(self.index(node), attr, self.current(layout), index, scale))

    # ----- refinement: cutting a channel set into pieces that can change on their own ---------
    def refine(self, atom: int, cuts: Iterable[int], suffix: str = "[{i}]") -> None:
        """Cut every atom of `atom`'s group at the same relative offsets (a Split on channels).

        Each member becomes consecutive pieces (same producer, shifted offsets); piece i of every
        member joins piece i of the others, and every recorded layout is rewritten to the pieces.
        Piece i is named after its member plus `suffix` (formatted with i): "conv1[0]" for a Split's
        pieces, "" where the pieces are joined again (a grouped conv's) and keep their producer's name.
        """
        root = self.find(atom)
        width = self.atoms[root].width
        bounds = sorted({0, width, *[c for c in cuts if 0 < c < width]})
        if len(bounds) == 2:
            return
        live = (a for a in range(len(self.atoms)) if not self.atoms[a].retired and self.find(a) == root)
        members = sorted(live, key=lambda a: self.atoms[a].order)
        frozen = self.atoms[root].frozen
        pieces: dict[int, list[tuple[int, int]]] = {}
        for m in members:
            parent = self.atoms[m]
            parts = []
            for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
                src = parent.source + suffix.format(i=i)  # piece i: ids stay the same when widths change
                new = self.new_atom(
                    hi - lo, src, parent.producer, frozen, parent.offset + lo, (*parent.order, i)
                )
                parts.append((new, hi - lo))
            parent.retired = True
            pieces[m] = parts
        for i in range(len(bounds) - 1):
            first = pieces[members[0]][i][0]
            for m in members[1:]:
                self._union_atoms(first, pieces[m][i][0])

        def rewrite(layout: Layout) -> Layout:
            out: list[Segment] = []
            for a, w in layout:
                out.extend(pieces.get(a, [(a, w)]))
            return tuple(out)

        self.layouts = {t: rewrite(lay) for t, lay in self.layouts.items()}
        for item in (*self.bindings, *self.attr_edits, *self.shape_edits):
            item.layout = rewrite(item.layout)
        for rec in self.convs:
            rec.in_layout = rewrite(rec.in_layout)
            rec.out_layout = rewrite(rec.out_layout) if rec.out_layout is not None else None

    def cut(self, layout: Layout, offsets: Iterable[int], suffix: str = "[{i}]") -> Layout:
        """Refine whatever atoms straddle the given channel offsets of `layout`; the new layout."""
        # a caller may hold a layout from before another cut retired some of its atoms (a union
        # cutting one side refines atoms the other side holds too): offsets count in today's pieces
        layout = self.current(layout)
        wanted = sorted(set(offsets))
        start = 0
        per_root: dict[int, set[int]] = {}
        for a, w in layout:
            for off in wanted:
                if start < off < start + w:
                    per_root.setdefault(self.find(a), set()).add(off - start)
            start += w
        # one atom per root may appear several times (Concat(x, x)); cut every occurrence alike
        for root, cuts in per_root.items():
            members = [a for a, _ in layout if self.find(a) == root and not self.atoms[a].retired]
            self.refine(members[0] if members else root, cuts, suffix)
            layout = tuple(seg for a, w in layout for seg in self._current(a, w))
        return layout

    def _current(self, atom: int, width: int) -> list[Segment]:
        """An atom's pieces if it was refined (recursively), else the atom itself."""
        if not self.atoms[atom].retired:
            return [(atom, width)]
        out: list[Segment] = []
        kids = [i for i, at in enumerate(self.atoms) if at.order[:-1] == self.atoms[atom].order
                and len(at.order) == len(self.atoms[atom].order) + 1]  # fmt: skip
        kids.sort(key=lambda i: self.atoms[i].order)
        for k in kids:
            out.extend(self._current(k, self.atoms[k].width))
        return out

    def edit_shape(self, init: str, index: int, layout: Layout, node: onnx.NodeProto, scale: int = 1) -> None:
        self.shape_edits.append(ShapeEdit(init, index, self.current(layout), self.index(node), scale))

    def set_spread(self, tensor: str, spread: int) -> None:
        """`tensor` holds a map's channels flattened: `spread` consecutive entries per channel."""
        if spread > 1 and tensor:
            self.spread[tensor] = spread

    # ----- common rule bodies ----------------------------------------------------------------
    def freeze_node(self, node: onnx.NodeProto, reason: str) -> None:
        """Freeze every channel set the node touches; its outputs become frozen sets of their own."""
        for t in node.input:
            if t and not self.is_const(t):
                self.freeze(self.layout(t), reason)
        for k, t in enumerate(node.output):
            width = self.channels(t) if t else None
            if width is not None:
                self.set_layout(t, self.new_layout(node, width, frozen=reason, output=k))

    def freeze_flattened(self, node: onnx.NodeProto) -> None:
        """Freeze a node that reads a flattened map's features as if they were channels."""
        self.freeze_node(
            node, f"{node.op_type} {self.name(node)} reads channels flattened with their spatial positions"
        )

    def pass_through(self, node: onnx.NodeProto, data_inputs: Iterable[int] = (0,)) -> Optional[Layout]:
        """Outputs carry the same channels, on the same axis, as the data input(s) (Relu, BatchNorm …).

        They also keep the first data input's `spread`: only rules registered with `spread=True` see
        one, and those call this only for an op whose output entry i depends on entry i of its data
        inputs alone, all flattened with the same spread.
        """
        lay: Optional[Layout] = None
        axis, spread = 1, 1
        for i in data_inputs:
            if i < len(node.input) and node.input[i]:
                cur = self.layout(node.input[i])
                if cur is None:
                    continue
                if lay is None:
                    lay, axis = cur, self.channel_axis(node.input[i])
                    spread = self.spread.get(node.input[i], 1)
                elif self.channel_axis(node.input[i]) != axis:
                    reason = f"{node.op_type} {self.name(node)} joins channels that lie on different axes"
                    self.freeze(lay, reason)
                    self.freeze(cur, reason)
                else:
                    self.union(lay, cur, self.name(node))
        if lay is None:
            return None
        width = sum(w for _, w in lay)
        for t in node.output:
            self.set_axis(t, axis)
            self.set_spread(t, spread)
            out = self.channels(t) if t else None
            if out is not None and out != width:
                self.freeze(lay, f"{node.op_type} {self.name(node)} changes the channel count")
            elif t:
                self.set_layout(t, lay)  # unknown shape: assume the op keeps channels, as its rule says
        return lay

    # ----- the walk --------------------------------------------------------------------------
    def run(self, rules: dict[str, RuleFn]) -> None:
        self._node_index = {id(n): i for i, n in enumerate(self.nodes)}
        consts = set(self._inits)
        for inp in self.graph.input:
            if inp.name in consts:
                continue
            width = self.channels(inp.name)
            if width is not None:
                src = f"input:{inp.name}"
                self.layouts[inp.name] = (
                    (self.new_atom(width, src, None, f"graph input {inp.name!r}"), width),
                )
        for i, node in enumerate(self.nodes):
            if node.op_type == "Constant":
                continue
            for t in self.implicit.get(i, ()):  # not in node.input: no rule would see them
                self.freeze(self.layout(t), f"{node.op_type} {self.node_names[i]} reads it inside a subgraph")
            fn = rules.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            moved = self._moved_axis(node) if node.op_type not in ANY_AXIS else None
            spread = node.op_type not in SPREAD and any(t in self.spread for t in node.input if t)
            if fn is None:
                self.freeze_node(node, f"unknown op {node.op_type}")
            elif moved is not None and not self._forget_frozen_moved(node):
                self.freeze_node(
                    node, f"{node.op_type} {self.name(node)} expects channels on axis 1, not axis {moved}"
                )
            elif spread:
                self.freeze_flattened(node)
            else:
                fn(self, node)
        for out in self.graph.output:
            self.freeze(self.layout(out.name), f"feeds the graph output {out.name!r}")
        for rec in self.convs:  # a rule may have recorded a layout that a later union cut
            rec.in_layout = self.current(rec.in_layout)
            rec.out_layout = self.current(rec.out_layout) if rec.out_layout is not None else None
        self._check_shared_constants()

    def forget_frozen_moved(self, node: onnx.NodeProto) -> None:
        """What the walk does before a rule that reads axis 1 only, for a rule registered with
        `any_axis=True` that reads an axis given by its attributes (Concat's `axis`, Pad's `pads`):
        where every input set off axis 1 is frozen, those inputs are read as untraced on axis 1
        (`_forget_frozen_moved`). An NHWC graph input read through a Transpose was traced on its
        H: its Pad (tf2onnx's SAME padding) would take the spatial pads for pads of the channels."""
        if self._moved_axis(node) is not None:
            self._forget_frozen_moved(node)

    def _forget_frozen_moved(self, node: onnx.NodeProto) -> bool:
        """True when every input whose channel set lies off axis 1 holds a frozen set: those
        tensors then change on no axis, so where their channels were is forgotten and the rule reads
        them as untraced (a frozen set on axis 1) instead of the node being frozen whole. An NHWC
        graph input read through a Transpose (tf2onnx's exports) was traced on its axis 1, H, which
        the Transpose moved to axis 2: the first conv's filters froze with it."""
        moved = [
            t
            for t in node.input
            if t and t in self.layouts and not self.is_const(t) and self.channel_axis(t) != 1
        ]
        if any(t in self.spread for t in moved):
            return False
        if not all(self.frozen_reason(atom) for t in moved for atom, _ in self.current(self.layouts[t])):
            return False
        reason = f"{node.op_type} {self.name(node)} reads channels that lie on another axis, frozen there"
        for t in moved:
            del self.layouts[t]
            self.axes.pop(t, None)
            self.require_layout(t, node, reason=reason)  # what the rule reads on axis 1: frozen too
        return True

    def _moved_axis(self, node: onnx.NodeProto) -> Optional[int]:
        """The channel axis of the first traced input whose channels are not on axis 1, else None."""
        for t in node.input:
            if t and t in self.layouts and not self.is_const(t) and self.channel_axis(t) != 1:
                return self.channel_axis(t)
        return None

    def _check_shared_constants(self) -> None:
        """A constant edited for one reader must not silently change another reader."""
        by_init: dict[str, list[Binding]] = {}
        for b in self.bindings:
            by_init.setdefault(b.init, []).append(b)
        for init, bs in by_init.items():
            # the pad too: an Add (pad 0) and a Div (pad 1) of one constant got the first's, 0/0
            keys = {(b.axis, self.resolve(b.layout), b.spread, b.pad) for b in bs}
            axes = [b.axis for b in bs]
            binders = {b.node for b in bs}
            users = set(self.users.get(init, []))
            clash = len(keys) != len(set(axes)) or not users <= binders or self.is_graph_output(init)
            if clash:
                for b in bs:
                    self.freeze(b.layout, f"constant {init!r} is shared by several ops")
        edits: dict[str, list[ShapeEdit]] = {}
        for e in self.shape_edits:
            edits.setdefault(e.init, []).append(e)
        for init, es in edits.items():
            if set(self.users.get(init, [])) != {e.node for e in es} or len({e.node for e in es}) > 1:
                for e in es:
                    self.freeze(e.layout, f"constant {init!r} is shared by several ops")
        for tensor, readers in self._quantized_readers.items():
            users = set(self.users.get(tensor, []))
            if not users <= {r for r, _ in readers} or self.is_graph_output(tensor):
                for _, lay in readers:
                    self.freeze(lay, f"quantized weight {tensor!r} is shared by several ops")
        # dedupe identical bindings (same constant, axis and channels) left by shared readers
        seen: set[tuple[str, int]] = set()
        kept: list[Binding] = []
        for b in self.bindings:
            if (b.init, b.axis) not in seen:
                seen.add((b.init, b.axis))
                kept.append(b)
        self.bindings = kept

    def is_graph_output(self, name: str) -> bool:
        """Whether `name` is one of the model's outputs (read by the user, not by a node)."""
        return any(o.name == name for o in self.graph.output)

    def resolve(self, layout: Layout) -> tuple[tuple[int, int], ...]:
        return tuple((self.find(a), w) for a, w in layout)


class Constants:
    """The constants of one model of the analysed graph, read from that model by name, each once:
    an initializer, a Constant node's value, or a quantized weight computed from its constants (as
    `CouplingState.const` reads the analysed model's). `CouplingState.constants_of` makes one."""

    def __init__(self, model: onnx.ModelProto, quantized: dict[str, onnx.NodeProto]) -> None:
        self.model = model
        self._inits = {t.name: t for t in model.graph.initializer}
        self._const_nodes = _constant_values(model.graph.node)
        self._quantized = quantized  # the analysed graph's nodes: only their inputs and axis are read
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, tensor: str) -> Optional[np.ndarray]:
        """The value of constant `tensor` in this model, else None."""
        return _read_const(tensor, self._inits, self._const_nodes, self._quantized, self._cache, self)

    def last(self, tensor: str) -> Optional[np.ndarray]:
        """`self(tensor)` for its last reader, which keeps what it makes of it: not kept here too
        (surgery would hold each weight it rewrites twice)."""
        arr = self(tensor)
        self._cache.pop(tensor, None)
        return arr


def _constant_values(nodes: Iterable[onnx.NodeProto]) -> dict[str, onnx.AttributeProto]:
    """Output name → `value` attribute of every Constant node that has one."""
    out: dict[str, onnx.AttributeProto] = {}
    for n in nodes:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    out[n.output[0]] = a
    return out


def _read_const(
    tensor: str,
    inits: dict[str, onnx.TensorProto],
    const_nodes: dict[str, onnx.AttributeProto],
    quantized: dict[str, onnx.NodeProto],
    cache: dict[str, np.ndarray],
    const: Callable[[str], Optional[np.ndarray]],
) -> Optional[np.ndarray]:
    """A constant's value, read once into `cache` (`const` reads a quantized weight's inputs)."""
    if tensor in cache:
        return cache[tensor]
    if tensor in inits or tensor in const_nodes:
        t = inits[tensor] if tensor in inits else const_nodes[tensor].t
        try:
            arr = numpy_helper.to_array(t)
        except (ValueError, KeyError, TypeError) as exc:  # data longer than its dims, an unknown type
            raise ModelError(f"constant {tensor!r} cannot be read: {first_line(exc)}") from None
    elif tensor in quantized:
        arr = _quantized_value(quantized[tensor], const)
    else:
        return None
    cache[tensor] = arr
    return arr


def _quantized_value(node: onnx.NodeProto, const: Callable[[str], Optional[np.ndarray]]) -> np.ndarray:
    """What a QuantizeLinear/DequantizeLinear of constants computes (per tensor or per axis)."""
    x = const(node.input[0])
    scale = const(node.input[1])
    assert x is not None and scale is not None
    zp_name = node.input[2] if len(node.input) > 2 else ""
    zp = const(zp_name) if zp_name else np.zeros((), dtype=np.uint8)
    assert zp is not None
    if scale.size > 1:  # per axis: scale and zero point run along `axis` of x
        axis_attr = next((a for a in node.attribute if a.name == "axis"), None)
        stated = int(axis_attr.i) if axis_attr is not None else 1
        axis = normalize_axis(stated, x.ndim)
        sizes = {"scale": scale, "zero point": zp} if zp.size > 1 or zp_name else {"scale": scale}
        if not 0 <= axis < x.ndim or any(v.ndim != 1 or v.size != x.shape[axis] for v in sizes.values()):
            along = f"axis {stated}" + ("" if axis_attr is not None else " (the default)")
            got = ", ".join(f"{k} {'×'.join(map(str, v.shape)) or 'a scalar'}" for k, v in sizes.items())
            raise ModelError(
                f"{node.op_type} {node.name or node.output[0]!r}: a per-channel {got} does not run along "
                f"{along} of its {'×'.join(map(str, x.shape)) or 'scalar'} input (onnxruntime refuses it)"
            )
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    if node.op_type == "DequantizeLinear":
        return ((x.astype(np.int64) - zp.astype(np.int64)) * scale.astype(np.float64)).astype(scale.dtype)
    info = np.iinfo(zp.dtype)
    q = np.rint(x.astype(np.float64) / scale.astype(np.float64)) + zp.astype(np.int64)
    return np.clip(q, info.min, info.max).astype(zp.dtype)


#: integer constants the walk read with more entries than this are compared by type and shape only
_COMPARED_VALUES = 1 << 16


def _init_difference(types: dict[str, tuple[int, tuple[int, ...]]], model: onnx.ModelProto) -> Optional[str]:
    """How `model`'s initializers differ from the analysed ones (`types`: name → (type, dims)) in
    name, element type or shape, else None."""
    names = set()
    for t in model.graph.initializer:
        names.add(t.name)
        was = types.get(t.name)
        if was is None:
            return f"initializer {t.name!r} is not in the analysed graph"
        if was[0] != t.data_type:
            now, then = _type_name(t.data_type), _type_name(was[0])
            return f"initializer {t.name!r} is {now}, analysed {then}"
        if was[1] != tuple(t.dims):
            return f"initializer {t.name!r} has shape {list(t.dims)}, analysed {list(was[1])}"
    missing = next((n for n in types if n not in names), None)
    return None if missing is None else f"initializer {missing!r} is missing"


def _type_name(data_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(data_type)
    except ValueError:
        return str(data_type)


def _graph_difference(st: CouplingState, model: onnx.ModelProto) -> Optional[str]:
    """How `model`'s nodes, graph inputs or graph outputs differ from the analysed ones, else None
    (initializers: `_init_difference`, constants' values: `_values_difference`)."""
    opset = default_opset(model)
    if opset != st.opset:
        return f"opset {opset}, analysed {st.opset}"
    nodes = model.graph.node
    if len(nodes) != len(st.nodes):
        return f"{len(nodes)} nodes, analysed {len(st.nodes)}"
    for i, (was, node) in enumerate(zip(st.nodes, nodes)):
        why = _node_difference(was, node)
        if why:
            return f"node {i} ({st.node_names[i]!r}) {why}"
    for what, now, then in (
        ("inputs", model.graph.input, st.graph.input),
        ("outputs", model.graph.output, st.graph.output),
    ):
        if len(now) != len(then):
            return f"{len(now)} graph {what}, analysed {len(then)}"
        odd = next((a for a, b in zip(now, then) if not _same_value_info(a, b)), None)
        if odd is not None:
            return f"graph {what[:-1]} {odd.name!r} differs in name, type or shape"
    return None


def _values_difference(st: CouplingState, model: onnx.ModelProto) -> Optional[str]:
    """Which integer constant the walk read (to trace channels: a Reshape target, Split sizes,
    pads, zero points…) holds other values in `model`, else None. Not the integer weights a
    DequantizeLinear reads: those are a checkpoint's own."""
    weights = {q.input[0] for q in st._quantized.values() if q.op_type == "DequantizeLinear"}
    consts = Constants(model, st._quantized)
    for name, arr in list(st._const_cache.items()):
        if (
            arr.dtype.kind not in "iub"
            or arr.size > _COMPARED_VALUES
            or name in weights
            or not (name in st._inits or name in st._const_nodes)
        ):
            continue
        now_arr = consts(name)
        if now_arr is None or not np.array_equal(now_arr, arr):
            return f"constant {name!r} holds other values"
    return _settings_difference(st, model)


#: float constants in these inputs are an op's settings, not weights a checkpoint learns: Clip's
#: bounds (ReLU6), Resize's roi and scales, Upsample's scales, Pad's value, Pow's exponent
_SETTING_INPUTS = {"Clip": (1, 2), "Resize": (1, 2), "Upsample": (1,), "Pad": (2,), "Pow": (1,)}
#: ... compared by value up to this many entries (a setting is a scalar or one per axis)
_COMPARED_SETTINGS = 64
_FLOAT_SETTINGS = frozenset(
    {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
)


def _setting_values(
    nodes: Iterable[onnx.NodeProto],
    inits: dict[str, onnx.TensorProto],
    const_nodes: dict[str, onnx.AttributeProto],
) -> dict[str, np.ndarray]:
    """The small float constants `nodes` read as settings (`_SETTING_INPUTS`), by name: only those
    tensors are read (their sizes from their dims first), never a weight, nor external data."""
    out: dict[str, np.ndarray] = {}
    for node in nodes:
        for i in _SETTING_INPUTS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ():
            name = node.input[i] if i < len(node.input) else ""
            tensor = inits.get(name) if name in inits else getattr(const_nodes.get(name), "t", None)
            if (
                tensor is None
                or name in out
                or tensor.data_type not in _FLOAT_SETTINGS
                or int(np.prod(tensor.dims, dtype=np.int64)) > _COMPARED_SETTINGS
                or tensor.data_location == onnx.TensorProto.EXTERNAL
            ):
                continue
            out[name] = numpy_helper.to_array(tensor)
    return out


def _settings_difference(st: CouplingState, model: onnx.ModelProto) -> Optional[str]:
    """Which small float setting (`_setting_values`: a Clip bound, Resize scales, a Pad value)
    holds other values in `model`, else None: ReLU6 and a clip at 8, or a 2x and a 4x upsample,
    are other graphs whose weights a plan must not be applied to as this one's."""
    then = _setting_values(st.nodes, st._inits, st._const_nodes)
    if not then:
        return None
    inits = {t.name: t for t in model.graph.initializer if t.name in then}
    now = _setting_values(model.graph.node, inits, _constant_values(model.graph.node))
    for name, arr in then.items():
        other = now.get(name)
        if other is None or other.shape != arr.shape or not np.array_equal(other, arr, equal_nan=True):
            return f"constant {name!r} holds other values"
    return None


def _node_difference(was: onnx.NodeProto, node: onnx.NodeProto) -> str:
    """How `node` differs from the analysed node `was`, else "": op, name, inputs, outputs,
    attributes (a tensor attribute by type and shape, a subgraph not at all)."""
    if node.op_type != was.op_type or node.domain != was.domain:
        return f"is {_op_name(node)}, analysed {_op_name(was)}"
    if node.name != was.name:
        return f"is named {node.name!r}"
    if list(node.input) != list(was.input):
        return f"reads {list(node.input)}, analysed {list(was.input)}"
    if list(node.output) != list(was.output):
        return f"writes {list(node.output)}, analysed {list(was.output)}"
    then = {a.name: a for a in was.attribute}
    if sorted(a.name for a in node.attribute) != sorted(then):
        return "has other attributes"
    for a in node.attribute:
        b = then[a.name]
        if a.type != b.type:
            return f"attribute {a.name!r} differs"
        if a.type == onnx.AttributeProto.TENSOR:
            if a.t.data_type != b.t.data_type or list(a.t.dims) != list(b.t.dims):
                return f"attribute {a.name!r} differs in type or shape"
        elif a.type not in _UNCOMPARED_ATTRIBUTES and a != b:
            return f"attribute {a.name!r} differs"
    return ""


#: attribute types `_node_difference` does not compare: subgraphs (and what they hold), tensor lists
_UNCOMPARED_ATTRIBUTES = frozenset(
    {
        onnx.AttributeProto.GRAPH,
        onnx.AttributeProto.GRAPHS,
        onnx.AttributeProto.TENSORS,
        onnx.AttributeProto.SPARSE_TENSOR,
        onnx.AttributeProto.SPARSE_TENSORS,
    }
)


def _op_name(node: onnx.NodeProto) -> str:
    return f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def _same_value_info(a: onnx.ValueInfoProto, b: onnx.ValueInfoProto) -> bool:
    """Same name, element type and rank, and the same size wherever both sizes are known (a
    symbolic batch size matches any)."""
    ta, tb = a.type.tensor_type, b.type.tensor_type
    if a.name != b.name or ta.elem_type != tb.elem_type or ta.HasField("shape") != tb.HasField("shape"):
        return False
    da, db = ta.shape.dim, tb.shape.dim
    if len(da) != len(db):
        return False
    return all(
        x.dim_value == y.dim_value
        for x, y in zip(da, db)
        if x.HasField("dim_value") and y.HasField("dim_value")
    )


#: element types a DequantizeLinear of constants may read (narrower or float8 ones freeze its readers)
_QUANTIZED_TYPES = frozenset(
    {onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16,
     onnx.TensorProto.INT32}
)  # fmt: skip
_SCALE_TYPES = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE})


def _quantizes_constants(
    node: onnx.NodeProto, is_const: Callable[[str], bool], elem_type: Callable[[str], int]
) -> bool:
    """Whether `node` is a QuantizeLinear/DequantizeLinear of constants whose value `const` computes:
    per tensor or per axis (no `block_size`), integer types of at most 32 bits, float scales."""
    if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or node.domain not in ("", "ai.onnx"):
        return False
    ins = [t for t in node.input if t]
    if len(ins) < 2 or len(node.output) != 1 or not all(is_const(t) for t in ins):
        return False
    if any(a.name == "block_size" and a.i for a in node.attribute):
        return False
    if any(a.name == "output_dtype" and a.i for a in node.attribute):
        return False
    if elem_type(node.input[1]) not in _SCALE_TYPES:
        return False
    if node.op_type == "DequantizeLinear":
        return elem_type(node.input[0]) in _QUANTIZED_TYPES
    zp = node.input[2] if len(node.input) > 2 else ""
    out_types = _QUANTIZED_TYPES - {onnx.TensorProto.INT32}  # QuantizeLinear does not make int32
    return elem_type(node.input[0]) in _SCALE_TYPES and (not zp or elem_type(zp) in out_types)


def subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """Tensors of enclosing graphs that the node's subgraphs (If branches, Loop and Scan bodies,
    nested ones included) read by name, without listing them among the node's inputs."""
    reads: set[str] = set()
    for a in node.attribute:
        for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
            made = {v.name for v in g.input} | {t.name for t in g.initializer}
            made |= {t.values.name for t in g.sparse_initializer}
            used: set[str] = set()
            for n in g.node:
                used.update(t for t in n.input if t)
                used |= subgraph_reads(n)
                made.update(t for t in n.output if t)
            reads |= used - made
    return reads


def _offsets(layout: Layout) -> list[int]:
    """Where each segment of `layout` starts, and where the last one ends."""
    out, off = [0], 0
    for _, w in layout:
        off += w
        out.append(off)
    return out


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def channel_axis_of(input_shape: Optional[list[int]], out_rank: int, out_axis: int = 1) -> Optional[int]:
    """Where the output's channel axis (`out_axis`, default 1) lands in a broadcast input, or None.

    Broadcasting aligns shapes at their last axis: for channels on the last axis of an NHWC
    output, a `[C]` or `[1, 1, 1, C]` constant has them on its own last axis.
    """
    if input_shape is None:
        return None
    axis = out_axis - (out_rank - len(input_shape))
    return axis if 0 <= axis < len(input_shape) else None
