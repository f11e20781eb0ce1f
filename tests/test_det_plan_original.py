"""A plan records each group's width in the model it was written for (`"original"`), and `apply`
refuses it, in one line, for a model where one differs. Unnamed nodes get group ids
`<op type>_<node index>`, so the same model saved with its nodes in another valid order (onnxsim, a
re-export) gives `Conv_0` to another conv: a lossless plan {Conv_0: 16, Conv_1: 24} written for
convs of 13 and 22 filters trimmed the 22-filter one to 16 on the reordered file, exit 0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from cli_runner import run_cli
from ort_session import session
from two_convs import parallel_convs

from deployopt.coupling import analyze
from deployopt.errors import PlanError
from deployopt.surgery import apply_plan, read_plan

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resnet56_pruned_cifar.onnx"


def _model(order: str) -> onnx.ModelProto:
    """Two UNNAMED parallel convs, A (13 filters) and B (22), into a Concat and a 1×1 conv; `order`
    "ab" or "ba" says which comes first in the node list (both valid topological orders)."""
    return parallel_convs(order, 13, 22)


#: a lossless plan for the "ab" file: A 13 → 16, B 22 → 24, with the widths it was written against
PLAN = {"widths": {"Conv_0": 16, "Conv_1": 24}, "original": {"Conv_0": 13, "Conv_1": 22}}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    ab, ba = tmp_path / "ab.onnx", tmp_path / "ba.onnx"
    onnx.save(_model("ab"), str(ab))
    onnx.save(_model("ba"), str(ba))
    return ab, ba


def _apply(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, model: Path, plan: Path, out: Path
) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, "apply", str(model), "--plan", str(plan), "-o", str(out))


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    return session(str(path)).run(None, {"x": x})[0]


def test_a_plan_for_the_model_in_another_node_order_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, files: tuple[Path, Path]
) -> None:
    ab, ba = files
    assert {g.id: g.width for g in analyze(onnx.load(str(ba))).free_groups()}["Conv_0"] == 22  # the swap
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    out = tmp_path / "out.onnx"
    code, stdout, err = _apply(monkeypatch, capsys, ba, plan, out)
    assert code == 2, (stdout, err)
    assert (
        err.startswith(f"error: {plan}: group 'Conv_0' is 22 channel(s) wide in this model, ")
        and err.count("\n") == 1
    ), err
    assert "where it is 13 " in err, err
    assert not out.exists()
    # the model it was written for: applied, and lossless (outputs as the input's)
    code, stdout, err = _apply(monkeypatch, capsys, ab, plan, out)
    assert code == 0, err
    assert "2 group(s) changed" in " ".join(stdout.split())
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_array_equal(_run(out, x), _run(ab, x))
    shapes = {t.name: tuple(t.dims) for t in onnx.load(str(out)).graph.initializer}
    assert shapes["wa"][0] == 16 and shapes["wb"][0] == 24


def test_a_recorded_width_is_checked_before_the_kept_channels(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, files: tuple[Path, Path]
) -> None:
    """A trim plan's `keep` on the swapped file: the mismatch is what is said, not a channel index
    out of range (which a swap makes of a right plan), nor a trim of the wrong conv."""
    _, ba = files
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "widths": {"Conv_0": 10, "Conv_1": 20},
                "original": {"Conv_0": 13, "Conv_1": 22},
                "keep": {"Conv_0": list(range(10)), "Conv_1": list(range(20))},
            }
        )
    )
    code, _, err = _apply(monkeypatch, capsys, ba, plan, tmp_path / "out.onnx")
    assert code == 2 and err.count("\n") == 1, err
    assert "group 'Conv_0' is 22 channel(s) wide in this model" in err and "where it is 13 " in err, err
    assert not (tmp_path / "out.onnx").exists()


def test_a_plan_without_recorded_widths_applies_as_before_and_the_same_as_with_them(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path, files: tuple[Path, Path]
) -> None:
    """Hand-written plans (widths alone) are not checked: same bytes as the plan with `original`."""
    ab, _ = files
    with_original, hand = tmp_path / "p1.json", tmp_path / "p2.json"
    with_original.write_text(json.dumps(PLAN))
    hand.write_text(json.dumps({"widths": PLAN["widths"]}))
    assert read_plan(with_original).original == PLAN["original"] and read_plan(hand).original == {}
    outs = []
    for i, plan in enumerate((with_original, hand)):
        out = tmp_path / f"out{i}.onnx"
        code, _, err = _apply(monkeypatch, capsys, ab, plan, out)
        assert code == 0, err
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_a_group_named_by_another_producer_is_checked_too(tmp_path: Path) -> None:
    """The recorded width may name a group by any of its producers, as widths may."""
    model = onnx.load(str(EXAMPLE))
    analysis = analyze(model)
    group = next(g for g in analysis.free_groups() if len(g.producers) > 1)
    other = next(p for p in group.producers if p != group.id)
    widths = {group.id: group.width + 3}
    with pytest.raises(PlanError) as exc:
        apply_plan(model, widths, analysis, original={other: group.width + 1})
    said = str(exc.value)
    assert f"group {other!r} (group {group.id!r}) is {group.width} channel(s) wide" in said, said
    assert f"where it is {group.width + 1} " in said and "\n" not in said
    edited = apply_plan(model, widths, analysis, original={other: group.width})
    assert edited.SerializeToString() == apply_plan(model, widths, analysis).SerializeToString()


@pytest.mark.parametrize(
    ("original", "said"),
    [
        ("[13, 22]", '"original" must map group ids to widths'),
        ('{"Conv_0": true}', "\"original\" width of group 'Conv_0' must be an integer from 1 to"),
        ('{"Conv_0": 13.0}', "\"original\" width of group 'Conv_0' must be an integer from 1 to"),
        ('{"Conv_0": 0}', "\"original\" width of group 'Conv_0' must be an integer from 1 to"),
    ],
)
def test_malformed_recorded_widths_are_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    tmp_path: Path,
    files: tuple[Path, Path],
    original: str,
    said: str,
) -> None:
    ab, _ = files
    plan = tmp_path / "plan.json"
    plan.write_text('{"widths": {"Conv_0": 16}, "original": ' + original + "}")
    code, _, err = _apply(monkeypatch, capsys, ab, plan, tmp_path / "out.onnx")
    assert code == 2 and err.startswith(f"error: {plan}: {said}") and err.count("\n") == 1, err
    assert not (tmp_path / "out.onnx").exists()


def _reordered(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its node names stripped and its nodes in another valid topological order: of the
    nodes whose inputs are ready, the last one ready goes first (the file's order takes the first)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = list(out.graph.node)
    ready = {i.name for i in out.graph.input} | {t.name for t in out.graph.initializer} | {""}
    order: list[onnx.NodeProto] = []
    left = list(range(len(nodes)))
    while left:
        free = [i for i in left if all(x in ready for x in nodes[i].input)]
        pick = free[-1]
        left.remove(pick)
        order.append(nodes[pick])
        ready.update(nodes[pick].output)
    del out.graph.node[:]
    for n in order:
        m = onnx.NodeProto()
        m.CopyFrom(n)
        m.name = ""
        out.graph.node.append(m)
    return out


def test_resnet56_with_names_stripped_and_nodes_reordered(
    monkeypatch: pytest.MonkeyPatch, capsys: Any, tmp_path: Path
) -> None:
    """The bug bash's second case: a pad-to-16 plan of the stripped ResNet56, with the widths it was
    written against, is refused on the reordered file and applies losslessly on its own."""
    stripped = onnx.load(str(EXAMPLE))
    for n in stripped.graph.node:
        n.name = ""
    first, second = tmp_path / "stripped.onnx", tmp_path / "reordered.onnx"
    onnx.save(stripped, str(first))
    onnx.save(_reordered(stripped), str(second))
    other = {g.id: g.width for g in analyze(onnx.load(str(second))).free_groups()}
    # the ids both files have (the others are an "unknown channel group" line already): two of them
    # name groups of other widths there (Conv_131: 33 here, 64 there, which the plan's 48 trimmed)
    groups = [g for g in analyze(stripped).free_groups() if g.id in other]
    assert sum(other[g.id] != g.width for g in groups) >= 1
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "widths": {g.id: -(-g.width // 16) * 16 for g in groups},
                "original": {g.id: g.width for g in groups},
            }
        )
    )
    code, _, err = _apply(monkeypatch, capsys, second, plan, tmp_path / "out.onnx")
    assert code == 2 and err.count("\n") == 1 and "channel(s) wide in this model" in err, err
    assert not (tmp_path / "out.onnx").exists()
    code, _, err = _apply(monkeypatch, capsys, first, plan, tmp_path / "out.onnx")
    assert code == 0, err
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    name = stripped.graph.input[0].name
    run = [session(str(p)).run(None, {name: x})[0] for p in (first, tmp_path / "out.onnx")]
    np.testing.assert_allclose(run[1], run[0], rtol=1e-4, atol=1e-4)  # 56 layers of float sums
