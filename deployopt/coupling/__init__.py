"""Channel coupling: which channel counts may change, and which must change together.

`analyze(model)` walks the graph once in topological order, lets the rule registered for each op
(deployopt/coupling/rules/) declare how channel sets relate, and closes those declarations with a
union-find into `ChannelGroup`s. A group is frozen (with the first reason found) when any op in it
cannot follow a width change; free groups are what the optimizer may pad or trim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import onnx

from deployopt.coupling import rules as _rules  # noqa: F401  (registers every rule)
from deployopt.coupling.registry import RULES, CouplingState, Layout, default_opset, rule
from deployopt.errors import ModelError, PlanError
from deployopt.layers import ConvShape, conv_shape_from_onnx
from deployopt.model import LoadedModel, model_proto

#: the widest channel count a plan may ask (an int32 dim; any wider is far past surgery's
#: PROTOBUF_LIMIT anyway)
MAX_WIDTH = (1 << 31) - 1

#: The oldest default-domain opset the rules read (docs/surgery.md: opsets 9 … current): older
#: ones spell ops differently (BatchNormalization's `spatial`, Slice, Upsample and Pad attributes).
MIN_OPSET = 9

__all__ = ["Analysis", "ChannelGroup", "ConvLayer", "analyze", "foreign_ops_note", "rule"]


@dataclass(frozen=True)
class ChannelGroup:
    """Tensors whose channel count must stay equal, the ops that create them and those that read them."""

    id: str
    width: int
    frozen: bool
    reason: str  # "" when free
    producers: list[str]
    consumers: list[str]
    tensors: list[str]
    #: g when a grouped conv (groups = g) reads or writes this group: its tensors there hold g
    #: copies side by side, one per conv group, so `width` is the width per conv group and the
    #: GPU sees repeat × width channels; 1 for every other group
    repeat: int = 1
    #: a one-channel statistic (the mean or max over another group's channels, kept as an axis so
    #: the ops that broadcast it back know where the channels are): frozen at width 1 by nature,
    #: not a width anyone could tune, so `analyze` counts it apart
    statistic: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "width": self.width,
            "frozen": self.frozen,
            "reason": self.reason,
            "producers": list(self.producers),
            "consumers": list(self.consumers),
            "tensors": list(self.tensors),
            "repeat": self.repeat,
            "statistic": self.statistic,
        }


@dataclass(frozen=True)
class ConvLayer:
    """One 2-D Conv with the groups its input and output channels belong to."""

    name: str
    shape: ConvShape
    out_group: Optional[str]
    in_groups: list[tuple[Optional[str], int]]
    #: (group id, width) segments of the output channels; several when a Split cuts the output
    out_groups: list[tuple[Optional[str], int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": self.shape.to_json(),
            "out_group": self.out_group,
            "in_groups": [[g, w] for g, w in self.in_groups],
            "out_groups": [[g, w] for g, w in self.out_groups],
        }


def _shape_after(conv: ConvLayer, widths: Mapping[str, int]) -> ConvShape:
    def width(segments: list[tuple[Optional[str], int]]) -> int:
        return sum(widths.get(g, w) if g is not None else w for g, w in segments)

    if conv.shape.is_depthwise:
        return conv.shape.with_channels(c=width(conv.in_groups))
    k = width(conv.out_groups) if conv.out_groups else conv.shape.k
    return conv.shape.with_channels(c=width(conv.in_groups), k=k)


@dataclass
class Analysis:
    """The groups and convs of one model, plus what surgery must edit (kept private)."""

    groups: list[ChannelGroup]
    convs: list[ConvLayer]
    state: Optional[CouplingState] = field(default=None, repr=False, compare=False)
    atom_group: dict[int, str] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_id = {g.id: g for g in self.groups}
        self._convs_by_name: dict[str, ConvLayer] = {}
        self._by_producer: Optional[dict[str, ChannelGroup]] = None

    def group(self, gid: str) -> ChannelGroup:
        """The group with id `gid`, or else the one group `gid` names a producer of: a group's id
        is its first producer in node order, which an exporter's node order can change (a QDQ
        twin's quantizer writes a shortcut conv first), so a plan keyed by another producer of the
        same group still finds it."""
        group = self._by_id.get(gid)
        if group is not None:
            return group
        if self._by_producer is None:
            count: dict[str, int] = {}
            for g in self.groups:
                for p in g.producers:
                    count[p] = count.get(p, 0) + 1
            self._by_producer = {p: g for g in self.groups for p in g.producers if count[p] == 1}
        group = self._by_producer.get(gid)
        if group is not None:
            return group
        # the closest name a plan may give (a group's id or its producer), as --target typos get:
        # the first five free groups in node order rarely held the one meant
        import difflib

        free = self.free_groups()
        names = [g.id for g in self.groups] + [p for p in self._by_producer if p not in self._by_id]
        near = difflib.get_close_matches(gid, names, n=1, cutoff=0.6)
        listed = f"`deployopt analyze MODEL` lists all {len(free)} free groups"
        if near:
            raise PlanError(f"unknown channel group {gid!r}; did you mean {near[0]!r}? ({listed})")
        known = ", ".join(repr(g.id) for g in free[:5])
        raise PlanError(f"unknown channel group {gid!r} (free groups include: {known or 'none'}; {listed})")

    def plan_by_id(self, widths: dict[str, int]) -> dict[str, int]:
        """A plan keyed by group ids, whatever producer names it was keyed by; one group named
        twice with different widths is a PlanError."""
        out: dict[str, int] = {}
        for key, w in widths.items():
            gid = self.group(key).id
            if gid in out and out[gid] != w:
                raise PlanError(f"the plan gives group {gid!r} two widths ({out[gid]} and {w}, as {key!r})")
            out[gid] = w
        return out

    def free_groups(self) -> list[ChannelGroup]:
        return [g for g in self.groups if not g.frozen]

    def unpriced_convs(self) -> list[str]:
        """The convs the wave model prices none of (`unpriced_reasons`), in node order."""
        return [name for name, _ in self.unpriced_reasons()]

    def unpriced_reasons(self) -> list[tuple[str, str]]:
        """(name, why) of every conv not in `convs`, in node order: Conv1d and Conv3d ("not 2-D"),
        ConvTranspose (not an implicit-GEMM forward conv), a 2-D conv whose input size is unknown
        (after an If whose branches differ in size), one whose input channels are not traced (after
        a Loop or a plugin op) or whose weights are no constant. A prediction of the model leaves
        them out; `analyze --target` left a ConvTranspose out without a word, called the unknown
        sizes "not 2-D", and left the untraced convs out of both lists."""
        if self.state is None:
            return []
        st = self.state
        priced = {c.name for c in self.convs}
        recorded = {rec.node: rec for rec in st.convs}
        out = []
        for i, (node, name) in enumerate(zip(st.nodes, st.node_names)):
            if name in priced:
                continue
            if i in recorded:
                rec = recorded[i]
                xs = st.shape(rec.x)
                flat = len(rec.weight_shape) == 4 and (xs is None or len(xs) == 4)
                out.append((name, "input size unknown" if flat else "not 2-D"))
            elif node.op_type == "ConvTranspose":
                out.append((name, "ConvTranspose"))
            elif node.op_type == "Conv":
                weights = st.const(node.input[1]) if len(node.input) > 1 else None
                out.append((name, "weights not constant" if weights is None else "input channels not traced"))
        return out

    def group_of_atom(self, atom: int) -> str:
        assert self.state is not None
        return self.atom_group[self.state.find(atom)]

    def layout_groups(self, layout: Layout) -> list[tuple[str, int]]:
        return [(self.group_of_atom(a), w) for a, w in layout]

    def check_plan(self, widths: Mapping[str, int]) -> None:
        """A PlanError for a plan `apply_plan` would refuse: an unknown group, a frozen one at another
        width than its own, a width that is no integer, under 1 or over MAX_WIDTH
        (surgery.validate_plan is this check)."""
        if not isinstance(widths, Mapping):  # a list of pairs was an AttributeError on .items()
            raise PlanError(
                "a plan's widths map group ids to widths ({'<group id>': 64}), "
                f"not a {type(widths).__name__}"
            )
        for gid, w in widths.items():
            group = self.group(gid)  # PlanError when unknown
            # a frozen group at its own width changes nothing: the whole `{g.id: g.width}` map of an
            # analysis (what the optimizer prices) is a valid plan (review of d27ce72)
            if group.frozen and not (isinstance(w, (int, np.integer)) and w == group.width):
                raise PlanError(f"group {gid!r} is frozen ({group.reason}); it cannot change width")
            if isinstance(w, bool) or not isinstance(w, (int, np.integer)):
                raise PlanError(f"width of group {gid!r} must be an integer, got {w!r}")
            if w < 1:
                raise PlanError(f"width of group {gid!r} must be at least 1, got {w}")
            if w > MAX_WIDTH:
                raise PlanError(f"width of group {gid!r} is {len(str(w))} digits long; at most {MAX_WIDTH}")

    def conv_shapes(
        self, widths: Mapping[str, int], only: Iterable[str] | None = None
    ) -> dict[str, ConvShape]:
        """Every conv's shape after a plan (or only the named convs'): C from its input groups, K
        from its output group. The plan is checked as `apply_plan` checks it (`check_plan`): a
        frozen group's width, or a width of 0 or 8.5, was priced as a plan that cannot exist.

        C and K are sums over the segments, so a grouped conv's g pieces of one group count g
        times (C = g × width per conv group) and its `groups` stays g.
        """
        self.check_plan(widths)
        return self.conv_shapes_unchecked(widths, only)

    def conv_shape(self, name: str, widths: Mapping[str, int]) -> ConvShape:
        """One conv's shape after a plan, checked as `conv_shapes` checks it."""
        self.check_plan(widths)
        return self.conv_shape_unchecked(name, widths)

    def conv_shapes_unchecked(
        self, widths: Mapping[str, int], only: Iterable[str] | None = None
    ) -> dict[str, ConvShape]:
        """`conv_shapes` without `check_plan`, for plans valid by construction (the optimizer's hot
        loops, whose widths are their free groups' candidates); names are still resolved."""
        convs = self.convs if only is None else [self._conv(name) for name in only]
        by_id = self._by_ids(widths)
        return {conv.name: _shape_after(conv, by_id) for conv in convs}

    def conv_shape_unchecked(self, name: str, widths: Mapping[str, int]) -> ConvShape:
        """`conv_shape` without `check_plan` (the optimizer's tables ask for one conv at a time)."""
        return _shape_after(self._conv(name), self._by_ids(widths))

    def _by_ids(self, widths: Mapping[str, int]) -> Mapping[str, int]:
        """`widths` keyed by group ids, as `apply_plan` reads a plan: a plan keyed by a producer
        name priced the group at its old width, and a typo was priced as no change, without a word.
        A plan of ids (the optimizer's, in its hot loops) is taken as it is: one subset test."""
        if type(widths) is not dict and not isinstance(widths, Mapping):
            raise PlanError(f"a plan's widths map group ids to widths, not a {type(widths).__name__}")
        if widths.keys() <= self._by_id.keys():
            return widths
        return self.plan_by_id(dict(widths))

    def _conv(self, name: str) -> ConvLayer:
        if len(self._convs_by_name) != len(self.convs):
            self._convs_by_name = {c.name: c for c in self.convs}
        conv = self._convs_by_name.get(name)
        if conv is None:  # was a KeyError
            unpriced = dict(self.unpriced_reasons())
            if name in unpriced:
                raise ModelError(f"conv {name!r} has no shape the wave model prices ({unpriced[name]})")
            known = ", ".join(repr(c.name) for c in self.convs[:3])
            raise ModelError(
                f"no conv named {name!r} in the analysed model (its convs include: {known or 'none'})"
            )
        return conv

    def to_json(self) -> dict[str, Any]:
        return {"groups": [g.to_json() for g in self.groups], "convs": [c.to_json() for c in self.convs]}


def _conv_shape(st: CouplingState, rec: Any) -> Optional[ConvShape]:
    node = st.nodes[rec.node]
    xs = st.shape(rec.x)
    if xs is None or len(xs) != 4 or len(rec.weight_shape) != 4 or min(xs) < 1:
        return None
    names = ("pads", "auto_pad", "strides", "dilations", "group")
    attrs = {name: st.attr(node, name, None) for name in names}
    return conv_shape_from_onnx(xs, rec.weight_shape, {k: v for k, v in attrs.items() if v is not None})


def _repeats(st: CouplingState) -> dict[int, int]:
    """Per group root: how many pieces of it a grouped conv's input or output holds (its groups)."""
    out: dict[int, int] = {}
    for node in st.nodes:
        group = int(st.attr(node, "group", 1)) if node.op_type in ("Conv", "ConvTranspose") else 1
        xl = st.layout(node.input[0]) if group > 1 else None
        if xl is None or group == sum(w for _, w in xl):  # a full or depthwise conv: one copy of each set
            continue
        for lay in (xl, st.layout(node.output[0]) or ()):
            counts: dict[int, int] = {}
            for a, _ in lay:
                root = st.find(a)
                counts[root] = counts.get(root, 0) + 1
            for root, n in counts.items():
                out[root] = max(out.get(root, 1), n)
    return out


def _unique_ids(st: CouplingState, roots: list[int]) -> dict[int, str]:
    ids: dict[int, str] = {}
    used: set[str] = set()
    for root in roots:
        base = st.atoms[root].source
        gid, k = base, 1
        while gid in used:
            k += 1
            gid = f"{base}#{k}"
        used.add(gid)
        ids[root] = gid
    return ids


#: Quantized convs of onnxruntime's QOperator format (quantize_static(quant_format=QuantFormat.QOperator)):
#: integer ops with their own scales, which the channel analysis does not read.
QOPERATOR_CONVS = frozenset({"QLinearConv", "ConvInteger"})


def refuse_qoperator(model: onnx.ModelProto) -> None:
    """One line for a model quantized in onnxruntime's QOperator format: its convs are QLinearConv or
    ConvInteger, so the analysis found "no Conv node: nothing to optimize", which named neither
    the format nor what to do. A model with float Convs too is refused as well: widths changed
    around a QLinearConv would not reach its integer weights and scales."""
    for i, node in enumerate(model.graph.node):
        if node.op_type in QOPERATOR_CONVS and node.domain in ("", "ai.onnx"):
            name = node.name or f"node {i}"
            raise ModelError(
                f"{node.op_type} ({name!r}: onnxruntime's QOperator format) is not supported: "
                "quantize with QuantFormat.QDQ (Q/DQ nodes around float ops), which deployopt edits exactly"
            )


def foreign_ops_note(model: onnx.ModelProto) -> str | None:
    """What freezes a model's groups where ops of another domain have no rule (None: there are
    none). A file saved by onnxruntime's graph optimizer (com.microsoft FusedConv, BiasGelu) had
    every group frozen by what followed them ("Add …: output shape unknown"), and optimize said only
    that no group was free, naming neither the ops nor what to do."""
    counts: dict[str, dict[str, int]] = {}
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            ops = counts.setdefault(node.domain, {})
            ops[node.op_type] = ops.get(node.op_type, 0) + 1
    if not counts:
        return None
    parts = []
    for domain, ops in sorted(counts.items()):
        named = [f"{op} ×{n}" if n > 1 else op for op, n in sorted(ops.items())]
        parts.append(f"{domain}: {', '.join(named[:6])}{', …' if len(named) > 6 else ''}")
    total = sum(sum(ops.values()) for ops in counts.values())
    ms = set(counts.get("com.microsoft", ()))
    if ms and ms <= {"QuantizeLinear", "DequantizeLinear"}:  # onnxruntime's quantizer, contrib Q/DQ
        hint = " (quantize with the standard-domain Q/DQ: onnxruntime's use_qdq_contrib_ops=False)"
    elif ms:
        hint = " (a file onnxruntime's graph optimizer saved? give deployopt the model as exported)"
    else:
        hint = ""
    return (
        f"{total} op(s) outside the ONNX domain ({'; '.join(parts)}) have no channel rule and freeze "
        f"every group they touch{hint}"
    )


def analyze(model: onnx.ModelProto | LoadedModel) -> Analysis:
    """Find every channel group of a (loaded: static shapes, folded constants) model, or of the
    LoadedModel load_model returned."""
    model = model_proto(model)
    refuse_qoperator(model)
    if not any(n.op_type == "Conv" for n in model.graph.node):
        raise ModelError("no Conv node: nothing to optimize")
    opset = default_opset(model)
    if opset < MIN_OPSET:
        raise ModelError(
            f"opset {opset} is older than the channel analysis reads (opsets {MIN_OPSET} and newer); "
            f"re-export the model at opset {MIN_OPSET} or newer"
        )
    if not model.graph.value_info:
        model = onnx.shape_inference.infer_shapes(model)
    st = CouplingState(model)
    st.run(RULES)
    st.drop_weights()  # the walk is done: what it read of the weights is not needed again

    # roots in order of their oldest atom, i.e. their first producer in topological order
    live = [a for a in range(len(st.atoms)) if not st.atoms[a].retired]
    roots = sorted({st.find(a) for a in live}, key=lambda r: st.atoms[r].order)
    ids = _unique_ids(st, roots)
    producers: dict[int, list[str]] = {r: [] for r in roots}
    for a in live:
        atom = st.atoms[a]
        if atom.producer is not None:
            name = st.node_names[atom.producer]
            lst = producers[st.find(a)]
            if name not in lst:
                lst.append(name)
    tensors: dict[int, list[str]] = {r: [] for r in roots}
    readers: dict[int, set[int]] = {r: set() for r in roots}
    for t, lay in st.layouts.items():
        for root in {st.find(a) for a, _ in lay}:
            tensors[root].append(t)
            readers[root].update(st.users.get(t, ()))
    repeat = _repeats(st)
    statistic = {r: True for r in roots}
    for a in live:
        statistic[st.find(a)] &= st.atoms[a].statistic
    groups = []
    for r in roots:
        atom = st.atoms[r]
        groups.append(
            ChannelGroup(
                id=ids[r],
                width=atom.width,
                frozen=bool(atom.frozen),
                reason=atom.frozen,
                producers=producers[r],
                consumers=[st.node_names[i] for i in sorted(readers[r])],
                tensors=tensors[r],
                repeat=repeat.get(r, 1),
                statistic=statistic[r],
            )
        )
    analysis = Analysis(groups=groups, convs=[], state=st, atom_group=ids)
    convs = []
    for rec in st.convs:
        shape = _conv_shape(st, rec)
        if shape is None:
            continue
        out_groups = analysis.layout_groups(rec.out_layout) if rec.out_layout is not None else []
        # one group, or a grouped conv's g pieces of one group; None when a Split cut the output
        out_group = out_groups[0][0] if len({g for g, _ in out_groups}) == 1 else None
        convs.append(
            ConvLayer(
                name=st.node_names[rec.node],
                shape=shape,
                out_group=out_group,
                in_groups=[(g, w) for g, w in analysis.layout_groups(rec.in_layout)],
                out_groups=[(g, w) for g, w in out_groups],
            )
        )
    analysis.convs = convs
    return analysis
