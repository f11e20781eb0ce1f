"""Bad input found by a third pass over every command: each case was a wrong verdict, NaN or
negative latencies printed as predictions, or a valid model refused with a garbled line; now one
`error:` line and exit 2 (or, for the valid model, the run it asked for)."""

from __future__ import annotations

import json

import pytest
from cli_runner import run_cli
from test_cli_bad_input import _one_error


def _journal_of_a_run(monkeypatch, capsys, tmp_path, zoo_model_path, *extra: str):
    """A finished `optimize -b model` run of a small model: its arguments (to --resume with), its
    journal and the journal's events, to damage and write back with `_write_events`."""
    m = str(zoo_model_path("resnet_projection"))
    args = ["optimize", m, "-t", "nano", "-b", "model", *extra, "-o", str(tmp_path / "run")]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    journal = tmp_path / "run" / "journal.jsonl"
    return args, journal, [json.loads(line) for line in journal.read_text().splitlines()]


def _write_events(journal, events) -> None:
    journal.write_text("".join(json.dumps(e) + "\n" for e in events))


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_verify_rel_error_that_is_no_fraction(monkeypatch, capsys, zoo_model_path, value) -> None:
    """--rel-error nan passed the `< 0` check and every output then 'failed' against a NaN limit:
    FAILED and exit 1 for a model compared with itself."""
    m = str(zoo_model_path("resnet_projection"))
    args = ["verify", m, m, "--max-abs-error", "0.1", "--rel-error", value]
    _one_error(*run_cli(monkeypatch, capsys, *args), f"--rel-error {value}: needs --max-abs-error")
    code, out, err = run_cli(monkeypatch, capsys, *args[:-1], "0.5")
    assert code == 0 and "PASSED" in out, err


def test_verify_a_model_whose_input_has_no_shape(monkeypatch, capsys, tmp_path) -> None:
    """An input the file gives no shape (unknown rank) takes its shape from --input-shape, as in
    analyze, bench and optimize; verify refused it with 'input 'x' is  in the file'."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[weights],
    )
    m = tmp_path / "no_shape.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(m))
    code, out, err = run_cli(monkeypatch, capsys, "verify", str(m), str(m), "--input-shape", "x:1x3x8x8")
    assert code == 0 and "PASSED" in out, err
    # a shape the model cannot take is still one line
    _one_error(
        *run_cli(monkeypatch, capsys, "verify", str(m), str(m), "--input-shape", "x:1x5x8x8"),
        "gets 5 input channels, but its weights take 3",
    )


@pytest.mark.parametrize(
    "change, message",
    [
        ({"epilogue_us": float("nan")}, "epilogue_us must be a finite number >= 0, not nan"),  # 'nan' µs
        ({"epilogue_us": -1.0}, "epilogue_us must be a finite number >= 0, not -1.0"),  # -11.2 µs
        ({"tail_floor": 5.0}, "tail_floor must be a share of a full wave's time, 0 to 1, not 5.0"),
    ],
)
def test_profile_costs_the_model_cannot_predict_with(monkeypatch, capsys, tmp_path, change, message) -> None:
    """A hand-edited profile's family epilogue cost of NaN or below 0 was printed as 'nan' or
    negative predicted µs; a tail_floor above 1 (a share of a wave) made a part-filled last wave
    cost more than a full one. fixed_us and the other costs were checked already."""
    from deployopt.targets import get_target

    profile = get_target("nano").to_json()
    params = {**profile["params"]["fp16"], "fitted": True}
    if "epilogue_us" in change:
        params["families"] = [{**params["families"][0], **change}, *params["families"][1:]]
    else:
        params.update(change)
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**profile, "params": {"fp16": params}}))
    args = ["staircase", "--target", str(path), "--input", "8x16x8x8", "--out-channels", "16:64:16"]
    code, out, err = run_cli(monkeypatch, capsys, *args)
    _one_error(code, out, err, message)
    assert out == ""


@pytest.mark.parametrize("value", [float("nan"), -5.0, float("inf")])
def test_resume_from_a_journal_whose_sweep_holds_no_latency(
    monkeypatch, capsys, tmp_path, zoo_model_path, value
) -> None:
    """A measured event's samples were checked on --resume, a sweep's per-conv values were not: NaN
    went into the search's per-layer table and the report's 'Per layer' rows read 'nan'."""
    args, journal, events = _journal_of_a_run(
        monkeypatch, capsys, tmp_path, zoo_model_path, "--max-evals", "4"
    )
    sweep = next(e for e in events if e["event"] == "sweep")
    first = next(iter(sweep["values"]))
    sweep["values"][first] = value
    _write_events(journal, events)
    _one_error(
        *run_cli(monkeypatch, capsys, *args, "--resume"),
        f"{journal}: a 'sweep' event is damaged (values must be finite per-conv latencies in µs)",
    )


@pytest.mark.parametrize(
    "damage, message",
    [
        ({"report": None}, "report is not an object"),  # TypeError: 'NoneType' object is not subscriptable
        ({"report": {}}, "no 'failures'"),  # KeyError: 'failures'
        ({"report": {"failures": 5}}, "failures is not a list of lines"),  # TypeError: cannot join
        ({"report": {"failures": "bad"}}, "failures is not a list of lines"),  # refused as 'b; a; d'
    ],
)
def test_resume_from_a_journal_whose_fidelity_event_is_damaged(
    monkeypatch, capsys, tmp_path, zoo_model_path, damage, message
) -> None:
    """A 'fidelity' event was stored as it was read and used deep in the trim search: a report that
    is no object, or failures that are no list, were a traceback out of `optimize --resume`."""
    extra = ("--mode", "trim", "--max-evals", "8")
    args, journal, events = _journal_of_a_run(monkeypatch, capsys, tmp_path, zoo_model_path, *extra)
    first = next(i for i, e in enumerate(events) if e["event"] == "fidelity")
    events = events[: first + 1]  # killed after its first fidelity check: --resume reads it back
    events[first].update(damage)
    _write_events(journal, events)
    _one_error(
        *run_cli(monkeypatch, capsys, *args, "--resume"),
        f"{journal}: a 'fidelity' event is damaged ({message}); use --force to start over",
    )


@pytest.mark.parametrize(
    "damage, message",
    [
        ({"plan": [16, 32]}, "plan is not an object of group widths"),  # IndexError in plan_key
        ({"timing": "environment"}, "environment is not an object"),  # TypeError keying the layer cache
        ({"timing": "measured"}, "measured is not true or false"),  # 'no': printed as a measurement
    ],
)
def test_resume_from_a_journal_whose_measured_event_is_damaged(
    monkeypatch, capsys, tmp_path, zoo_model_path, damage, message
) -> None:
    """A 'measured' event's samples were checked on --resume, not the rest of what the run reads
    back: a plan that is a list and an environment that is no object were tracebacks, a
    "measured": "no" (a string, so true) dropped '(predicted)' from the wave model's latency."""
    args, journal, events = _journal_of_a_run(
        monkeypatch, capsys, tmp_path, zoo_model_path, "--max-evals", "4"
    )
    first = next(i for i, e in enumerate(events) if e["event"] == "measured")
    events = events[: first + 1]
    if "plan" in damage:
        events[first].update(damage)
    else:
        events[first]["timing"][damage["timing"]] = [1] if damage["timing"] == "environment" else "no"
    _write_events(journal, events)
    _one_error(
        *run_cli(monkeypatch, capsys, *args, "--resume"),
        f"{journal}: a 'measured' event is damaged ({message}); use --force to start over",
    )


@pytest.mark.parametrize(
    "host",
    # a leading '-' after the '@' too: only some ssh builds refuse such a host name themselves
    [
        "@",
        "user@",
        "@jetson",
        "user@jet son",
        "-oProxyCommand=true",
        "user@-oProxyCommand=true",
        "user@jetson:2222",
        "ssh://jetson",
    ],
)
@pytest.mark.parametrize("command", ["bench", "targets"])
def test_a_remote_that_names_no_board(monkeypatch, capsys, tmp_path, zoo_model_path, host, command) -> None:
    """ssh was run with it: '@' printed ssh's usage text after 'cannot reach @ over ssh', a space
    'hostname contains invalid characters', and a leading '-' was read by ssh as one of its options;
    a port (host:2222) was a host name to ssh and HOST:PATH to scp, which copied to '2222:...'."""
    m = str(zoo_model_path("resnet_projection"))
    args = ["bench", m, "-b", "trtexec", "--runs", "3"] if command == "bench" else ["targets"]
    _one_error(
        *run_cli(monkeypatch, capsys, *args, "--remote", host),
        f"--remote {host!r}: give the board as USER@HOST",
    )
