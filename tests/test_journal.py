"""The journal: durable lines, exact replay, torn lines."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from deployopt.errors import DeployoptError
from deployopt.journal import Journal, plan_key
from deployopt.timing import Timing


def test_plan_key_ignores_order_and_types() -> None:
    assert plan_key({"b": 16, "a": 8}) == plan_key({"a": 8, "b": 16}) == '{"a":8,"b":16}'
    assert plan_key({"a": 8}, repeat=2) == '{"a":8}#2' and plan_key({"a": 8}, repeat=0) == '{"a":8}'


def test_re_measurements_of_one_plan_replay_as_their_own_timings(tmp_path: Path) -> None:
    """The final confirmation rounds re-measure the same plan: each round is kept, none overwrites."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.write("start", config={})  # every journal opens with it (replay refuses a file without)
        for repeat, us in enumerate([10.0, 11.0, 12.0]):
            extra = {"repeat": repeat} if repeat else {}
            j.write(
                "measured",
                index=repeat,
                label="final",
                plan={"g": 8},
                timing=Timing("x", [us]).to_json(),
                **extra,
            )
    rep = Journal.replay(path)
    assert {k: t.samples_us for k, t in rep.timings.items()} == {
        '{"g":8}': [10.0],
        '{"g":8}#1': [11.0],
        '{"g":8}#2': [12.0],
    }


def test_replay_gives_back_exact_timings_sweeps_and_config(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    t = Timing("torch", [10.5, 11.25, 9.75], warmup=3, environment={"gpu": "H200"})
    with Journal(path) as j:
        j.write("start", config={"mode": "lossless", "sms": 8})
        j.write("measured", index=1, label="input", plan={"g1": 45, "g0": 32}, timing=t.to_json())
        j.write("sweep", values={"sig_a": 1.5, "sig_b": 2.0}, measured=2, cached=0, seconds=0.1)
        j.write("fidelity", plan={"g0": 32, "g1": 40}, report={"failures": ["x"]})
    with Journal(path) as j:  # appending (a resumed run) keeps what was there
        j.write("done", best={"g0": 32, "g1": 48})
    rep = Journal.replay(path)
    assert rep.config == {"mode": "lossless", "sms": 8}
    got = rep.timings[plan_key({"g0": 32, "g1": 45})]
    assert got.samples_us == [10.5, 11.25, 9.75] and got.warmup == 3 and got.environment == {"gpu": "H200"}
    assert rep.layer_values == {"sig_a": 1.5, "sig_b": 2.0}
    assert rep.fidelity[plan_key({"g0": 32, "g1": 40})]["report"]["failures"] == ["x"]
    assert rep.done and [e["event"] for e in rep.events] == ["start", "measured", "sweep", "fidelity", "done"]


def test_a_torn_last_line_is_dropped_a_torn_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.write("start", config={})
        j.write("measured", index=1, label="input", plan={"g": 8}, timing=Timing("x", [1.0]).to_json())
    with open(path, "a") as f:
        f.write('{"event": "measured", "index": 2, "pla')  # killed mid-write
    rep = Journal.replay(path)
    assert len(rep.timings) == 1 and not rep.done
    with open(path, "a") as f:
        f.write("\n" + '{"event": "done"}' + "\n")
    with pytest.raises(DeployoptError, match="line 3 is not valid JSON"):
        Journal.replay(path)


@pytest.mark.parametrize("failing", ["write", "fsync"])
def test_a_full_disk_is_one_output_error_naming_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    import errno
    import os

    import deployopt.journal
    from deployopt.errors import OutputError

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    path = tmp_path / "journal.jsonl"
    with Journal(path) as journal:
        journal.write("start", config={})
        if failing == "fsync":
            monkeypatch.setattr(deployopt.journal.os, "fsync", full)
        else:
            monkeypatch.setattr(journal, "_fh", type("Full", (), {"write": full, "closed": True})())
        with pytest.raises(OutputError) as caught:
            journal.write("measured", plan={"a": 1})
    assert str(caught.value) == f"cannot write {path}: No space left on device"


def test_an_unopenable_journal_is_one_output_error(tmp_path: Path) -> None:
    from deployopt.errors import OutputError

    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match=r"cannot write .*journal\.jsonl"):
        Journal(tmp_path / "file" / "journal.jsonl")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("garbage\n", "is not a deployopt journal (line 1 is not JSON)"),
        (b"\xff\xfe\x00\n", "is not a deployopt journal (line 1 is not JSON)"),
        ('{"a": 1}\n{"b": 2}\n', "is not a deployopt journal (its first line is not a 'start' event)"),
        ('{"event": "measured", "plan": {}}\n', "(its first line is not a 'start' event)"),
        ("", "records no run; nothing to resume"),
        ('{"event": "start", "con', "records no run; nothing to resume"),  # killed writing its first line
    ],
    ids=["garbage", "binary", "unrelated-json", "no-start", "empty", "torn-start"],
)
def test_a_file_that_is_no_journal_of_a_run_is_refused(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    """Each replayed as an empty journal, so --resume silently started the run over on top of it."""
    path = tmp_path / "journal.jsonl"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(DeployoptError) as caught:
        Journal.replay(path)
    assert str(caught.value).startswith(str(path)) and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_unreadable_journal_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "journal.jsonl").mkdir()
    with pytest.raises(DeployoptError, match=r"^cannot read .*journal\.jsonl: Is a directory$"):
        Journal.replay(tmp_path / "journal.jsonl")


def test_a_complete_last_line_that_is_not_json_is_damage_not_a_torn_line(tmp_path: Path) -> None:
    """Lines are written newline last: a last line that has its newline was not cut short."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.write("start", config={})
    with open(path, "a") as f:
        f.write("garbage\n")
    with pytest.raises(DeployoptError, match="line 2 is not valid JSON; the journal is damaged"):
        Journal.replay(path)


def test_appending_after_a_torn_line_cuts_it_so_the_journal_resumes_again(tmp_path: Path) -> None:
    """The resumed run's first event was glued onto the torn line: a damaged middle line, so the
    run after it could not resume."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.write("start", config={})
    with open(path, "a") as f:
        f.write('{"event": "measured", "index": 2, "pla')  # killed mid-write
    assert [e["event"] for e in Journal.replay(path).events] == ["start"]
    with Journal(path) as j:  # the resumed run
        j.write("resume", previous_evaluations=0)
    assert [e["event"] for e in Journal.replay(path).events] == ["start", "resume"]
    assert path.read_text().count("\n") == 2


def test_a_journal_of_two_runs_is_refused(tmp_path: Path) -> None:
    """Two runs' lines in one file (a second run's `start` appended to the first's journal): replay
    merged their timings, and a later --resume reported the other run's predictions as its own."""
    path = tmp_path / "journal.jsonl"
    with Journal(path) as j:
        j.write("start", config={"mode": "lossless"})
        j.write("measured", index=1, label="input", plan={"g": 8}, timing=Timing("x", [10.0]).to_json())
        j.write("start", config={"mode": "trim"})
    with pytest.raises(DeployoptError) as exc:
        Journal.replay(path)
    assert (
        str(exc.value)
        == f"{path} records more than one run (a second 'start' event); use --force to start over"
    )


def test_a_journal_whose_file_was_removed_or_replaced_stops_the_run(tmp_path: Path) -> None:
    """`rm -rf OUTDIR` while a run went on: it appended on to the deleted file (and a second run,
    started meanwhile, wrote a journal of its own at the path) and exited 0."""
    outdir = tmp_path / "out"
    journal = Journal(outdir / "journal.jsonl")
    try:
        journal.write("start", config={})
        assert journal.in_place()
        shutil.rmtree(outdir)
        assert not journal.in_place()
        outdir.mkdir()
        (outdir / "journal.jsonl").write_text('{"event":"start","config":{}}\n')  # another run's
        assert not journal.in_place()
        with pytest.raises(DeployoptError) as exc:
            journal.write("measured", plan={"g": 8})
        assert str(exc.value) == (
            f"{outdir} was removed or replaced during the run; nothing written (its journal went "
            "with it): run it again"
        )
        journal.write("done", check=False)  # after the results moved in: never refused
        assert (outdir / "journal.jsonl").read_text() == '{"event":"start","config":{}}\n'
    finally:
        journal.close()


@pytest.mark.parametrize(
    "line, why",
    [
        # the hunter's line: "('NoneType' object is not subscriptable)"
        ({"event": "measured", "plan": None, "timing": None}, "plan is not an object of group widths"),
        ({"event": "measured", "plan": {"g": 8}, "timing": None}, "timing is not an object"),
        (
            {"event": "measured", "plan": {"g": "x"}, "timing": {"backend": "x", "samples_us": [1.0]}},
            "plan is not an object of group widths",
        ),  # "invalid literal for int() with base 10: 'x'"
        (
            {"event": "measured", "plan": {"g": 8}, "timing": {"backend": "x", "samples_us": 5}},
            "samples_us must be finite latencies in µs",
        ),  # "'int' object is not iterable"
        ({"event": "sweep", "values": None}, "values is not an object of per-conv latencies"),
        ({"event": "sweep", "values": {"conv": "x"}}, "values must be finite per-conv latencies in µs"),
    ],
)
def test_a_damaged_event_says_what_is_wrong_in_the_users_terms(
    tmp_path: Path, line: dict[str, object], why: str
) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text('{"event":"start","config":{}}\n' + json.dumps(line) + "\n")
    with pytest.raises(DeployoptError) as exc:
        Journal.replay(path)
    assert str(exc.value) == (
        f"{path}: a {line['event']!r} event is damaged ({why}); use --force to start over"
    )


def test_a_field_replay_does_not_check_is_no_python_internal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TypeError or AttributeError from deep in the reading said Python's words; now what kind
    of damage it is."""
    import deployopt.journal as journal_module

    def broken(d: dict[str, object]) -> Timing:
        return None.samples_us  # type: ignore[attr-defined]  # AttributeError, as a field read wrong

    monkeypatch.setattr(journal_module.Timing, "from_json", staticmethod(broken))
    path = tmp_path / "journal.jsonl"
    path.write_text('{"event":"start","config":{}}\n{"event":"measured","plan":{},"timing":{}}\n')
    with pytest.raises(DeployoptError) as exc:
        Journal.replay(path)
    assert str(exc.value) == (
        f"{path}: a 'measured' event is damaged (a field is missing or of the wrong type); "
        "use --force to start over"
    )
