"""optimize --resume's checks of the machine: a Python patch release or a kernel update of the same
series resumes with one warning line naming both values (it was refused as another setup), a journal
whose timings recorded no thread or core count says it cannot check them, and another thread count
is refused before the resumed run times anything (it came at its first fresh end-to-end timing,
after its sweep had timed every conv at the new count).
"""

from __future__ import annotations

import json
import platform
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from test_resume_setup import interrupted, run, two_convs

from deployopt.environment import setup_changes
from deployopt.errors import DeployoptError, DeployoptWarning, HostTimingWarning
from deployopt.journal import Journal, Replay
from deployopt.timing import Timing


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(tmp_path / "cache"))


def resumed_warnings(model: Path, out: Path, **kw: Any) -> list[str]:
    """The DeployoptWarning lines a resumed run says (not the host-CPU one every ort run says)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(model, out, resume=True, **kw)
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, DeployoptWarning) and not issubclass(w.category, HostTimingWarning)
    ]


def patch_later(version: str) -> str:
    """`version` one patch release on: 3.11.8 → 3.11.9."""
    major, minor, patch = re.match(r"(\d+)\.(\d+)\.(\d+)", version).groups()  # type: ignore[union-attr]
    return f"{major}.{minor}.{int(patch) + 1}"


def kernel_update(os_string: str) -> str:
    """The same OS a kernel patch release on: Linux-6.8.0-45-generic-… → Linux-6.8.1-45-generic-…"""
    found = re.match(r"([^-]+-\d+\.\d+\.)(\d+)", os_string)
    assert found, os_string  # every Linux and macOS kernel release is x.y.z
    return f"{found[1]}{int(found[2]) + 1}{os_string[found.end() :]}"


def test_series_of_python_and_the_os() -> None:
    """What a patch release keeps: Python's major.minor, the kernel's major.minor, its flavour, the
    machine and the C library; a string it cannot split is its own series."""
    from deployopt.environment import os_series, python_series

    assert python_series("3.11.8") == python_series("3.11.9") == "3.11"
    # a pre-release is its own series: 3.12.0rc1 -> 3.12.0 is no patch release (review of 25dd4a8)
    assert python_series("3.12.0rc1") == "3.12.0rc1" != python_series("3.12.0") == "3.12"
    assert python_series("3.13.0b4") != python_series("3.13.1")
    generic = "Linux-6.8.0-45-generic-x86_64-with-glibc2.39"
    assert os_series(generic) == os_series("Linux-6.8.0-47-generic-x86_64-with-glibc2.39")
    assert os_series(generic) == "Linux 6.8 generic x86_64-with-glibc2.39"
    for other in (
        "Linux-6.11.0-8-generic-x86_64-with-glibc2.39",  # another kernel series
        "Linux-6.8.0-45-lowlatency-x86_64-with-glibc2.39",  # another flavour
        "Linux-6.8.0-45-generic-x86_64-with-glibc2.40",  # another C library
        "Linux-6.8.0-45-generic-aarch64-with-glibc2.39",  # another machine
    ):
        assert os_series(other) != os_series(generic), other
    assert os_series("Windows-10-10.0.19041-SP0") == "Windows-10-10.0.19041-SP0"


def test_setup_changes_refuses_a_series_and_lets_a_patch_release_pass() -> None:
    from deployopt.environment import patch_changes

    here = {"python": "3.11.9", "platform": "Linux-6.8.0-47-generic-x86_64-with-glibc2.39", "cpu": "Xeon"}
    patched = {"python": "3.11.8", "platform": "Linux-6.8.0-45-generic-x86_64-with-glibc2.39", "cpu": "Xeon"}
    assert setup_changes(patched, here) == []
    assert patch_changes(patched, here) == [
        "Python 3.11.8 → 3.11.9",
        "OS Linux-6.8.0-45-generic-x86_64-with-glibc2.39 → Linux-6.8.0-47-generic-x86_64-with-glibc2.39",
    ]
    upgraded = {**patched, "python": "3.10.14", "platform": "Linux-6.5.0-1-generic-x86_64-with-glibc2.39"}
    assert setup_changes(upgraded, here) == [
        "Python 3.10.14 → 3.11.9",
        "OS Linux-6.5.0-1-generic-x86_64-with-glibc2.39 → Linux-6.8.0-47-generic-x86_64-with-glibc2.39",
    ]
    assert patch_changes(upgraded, here) == []
    # the rest as before: any change of the CPU refuses
    assert setup_changes({**patched, "cpu": "EPYC"}, here) == ["CPU EPYC → Xeon"]


def test_a_patch_release_resumes_with_one_warning_naming_both_values(tmp_path: Path) -> None:
    model, out = two_convs(tmp_path / "m.onnx"), tmp_path / "out"
    run(model, out)
    python, os_string = platform.python_version(), platform.platform()
    was_python, was_os = patch_later(python), kernel_update(os_string)  # "before" it: another patch

    def patched(env: dict[str, Any]) -> None:
        env.update(python=was_python, platform=was_os)

    interrupted(out, keep=2, edit=patched)
    said = resumed_warnings(model, out)
    ours = [w for w in said if "patch release" in w]
    assert len(ours) == 1 and "\n" not in ours[0], said
    assert f"Python {was_python} → {python}" in ours[0]
    assert f"OS {was_os} → {os_string}" in ours[0]
    assert ours[0].startswith(f"--resume: {out / 'journal.jsonl'} holds timings measured before ")


def test_another_python_series_is_still_refused(tmp_path: Path) -> None:
    """Guard (passes before the fix too): only a patch release passes; 3.10 → 3.11 is refused."""
    model, out = two_convs(tmp_path / "m.onnx"), tmp_path / "out"
    run(model, out)
    major, minor = platform.python_version_tuple()[:2]
    older = f"{major}.{int(minor) - 1}.3"
    before = interrupted(out, keep=2, edit=lambda env: env.update(python=older))
    with pytest.raises(
        DeployoptError, match=rf"another setup than this machine's \(Python {re.escape(older)} → "
    ):
        run(model, out, resume=True)
    assert (out / "journal.jsonl").read_bytes() == before


def without_thread_facts(env: dict[str, Any]) -> None:
    """A timing as a deployopt from before the thread and core counts recorded it."""
    env.pop("intra_op_threads", None)
    env.pop("cpu_cores", None)


def test_a_journal_without_thread_or_core_counts_says_it_cannot_check_them(tmp_path: Path) -> None:
    model, out = two_convs(tmp_path / "m.onnx"), tmp_path / "out"
    run(model, out)
    interrupted(out, keep=2, edit=without_thread_facts)
    said = [w for w in resumed_warnings(model, out) if "recorded no" in w]
    assert len(said) == 1 and "\n" not in said[0], said
    assert said[0].startswith(
        f"--resume: {out / 'journal.jsonl'} recorded no thread count and no usable CPU core count with its "
        "timings (an older deployopt wrote it): cannot check that they were measured at this run's "
        "(onnxruntime intra-op threads 0, usable CPU cores "
    ), said[0]
    # one that recorded them says nothing of the kind
    run(model, out, force=True)
    interrupted(out, keep=2)
    assert not [w for w in resumed_warnings(model, out) if "recorded no" in w]


def test_another_thread_count_is_refused_before_anything_is_timed(tmp_path: Path) -> None:
    """The journal's timings at 4 intra-op threads, this run's session at onnxruntime's default (0):
    refused before the resumed sweep times a conv (it timed them all, then refused), nothing written."""
    model, out = two_convs(tmp_path / "m.onnx"), tmp_path / "out"
    run(model, out)
    before = interrupted(out, keep=2, edit=lambda env: env.update(intra_op_threads=4))
    # no sweep in the journal: the resumed run has every conv to time
    lines = [ln for ln in before.decode().splitlines() if json.loads(ln)["event"] != "sweep"]
    before = ("\n".join(lines) + "\n").encode()
    (out / "journal.jsonl").write_bytes(before)
    lut = tmp_path / "lut"
    with pytest.raises(DeployoptError) as refused:
        run(model, out, resume=True, cache_root=lut)
    said = str(refused.value)
    assert "\n" not in said and said.startswith(
        f"--resume: {out / 'journal.jsonl'} holds timings measured at onnxruntime intra-op threads 4, "
        "this run measures at 0"
    ), said
    assert not list(lut.rglob("*.json"))  # not one conv timed
    assert (out / "journal.jsonl").read_bytes() == before


def test_the_journal_holds_fresh_timings_to_the_replayed_ones_thread_counts(tmp_path: Path) -> None:
    """Journal takes the thread counts from what replay read (it parsed the file again): a Replay
    handed to it is what a fresh timing is held to, whatever the file holds."""
    replayed = Replay(
        timings={
            "{}": Timing("ort", [100.0], environment={"intra_op_threads": 4}, measured=True),
            "{}#1": Timing("ort", [100.0], environment={"intra_op_threads": 8, "remote": "me@b"}),
        }
    )
    path = tmp_path / "journal.jsonl"  # no file: the counts can only come from the Replay
    journal = Journal(path, replayed)
    try:
        with pytest.raises(
            DeployoptError, match="measured at onnxruntime intra-op threads 4, this run measures at 2"
        ):
            journal.write("measured", index=3, plan={}, timing={"environment": {"intra_op_threads": 2}})
        journal.write("measured", index=3, plan={}, timing={"environment": {"intra_op_threads": 4}})
    finally:
        journal.close()
    assert len(path.read_text().splitlines()) == 1  # the refused one was never written
