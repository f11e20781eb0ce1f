"""Three loose ends: a target cache that cannot be looked in, onnxruntime's telemetry line at import,
and a result timed through the library recording its model and time as `bench` does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import deployopt.targets as targets
from deployopt.backends.base import MeasureOptions, Session, get_backend
from deployopt.errors import CacheWarning
from deployopt.regression import compare_paths, model_identity
from deployopt.timing import Timing

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "resnet56_pruned_cifar.onnx"


# -- 1. an unreadable cache: built-in targets, one warning ----------------------------------------


@pytest.fixture
def locked_cache(monkeypatch, tmp_path: Path) -> Path:
    """A cache folder inside one this user may not enter (another user's mode-700 HOME): every
    stat, exists and is_dir under it raises EACCES, as it does for a non-root user."""
    cache = tmp_path / "locked" / "cache"
    monkeypatch.setenv("DEPLOYOPT_CACHE_DIR", str(cache))
    monkeypatch.setattr(targets, "_UNREADABLE_SAID", set(), raising=False)
    real_stat = Path.stat

    def stat(self: Path, *args, **kwargs):
        if str(self).startswith(str(cache)):
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    return cache


def test_a_cache_that_cannot_be_looked_in_leaves_built_in_targets_working(locked_cache: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tx2 = targets.get_target("tx2")
        h200 = targets.get_target("h200", sms=8)
        assert targets.cached_profiles() == {}
    assert (tx2.name, tx2.origin, h200.sms) == ("tx2", "built-in", 8)
    said = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert said == [
        f"cannot look in the target cache {locked_cache / 'targets'}: Permission denied; its calibrated "
        "profiles are not used, the built-in targets are (DEPLOYOPT_CACHE_DIR moves the cache)"
    ]


def test_an_unknown_target_is_still_unknown_with_an_unreadable_cache(locked_cache: Path) -> None:
    with (
        warnings.catch_warnings(record=True),
        pytest.raises(targets.TargetError, match="unknown target 'tx3'"),
    ):
        warnings.simplefilter("always")
        targets.get_target("tx3")


# -- 2. onnxruntime's telemetry line --------------------------------------------------------------


def _import_in_child(path_first: Path | None, env: dict[str, str]) -> subprocess.CompletedProcess:
    code = "from deployopt.onnxruntime_compat import import_onnxruntime; import_onnxruntime()"
    pythonpath = [str(ROOT), *([str(path_first)] if path_first else [])]
    if path_first:  # the stand-in before site-packages
        code = f"import sys; sys.path.insert(0, {str(path_first)!r}); " + code
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env, "PYTHONPATH": os.pathsep.join(pythonpath)},
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_import_leaves_out_the_telemetry_line_and_keeps_the_rest(tmp_path: Path) -> None:
    """A stand-in onnxruntime that writes, from native code's fd 2, the line the real one writes
    with ~/.cache unwritable and an error of its own: only the error is shown."""
    fake = tmp_path / "fake" / "onnxruntime"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        textwrap.dedent(
            """
            import os
            os.write(2, b"\\x1b[0;93m2026-12-07 [W:onnxruntime:Default, telemetry_1ds.cc:613 operator()] "
                        b"Failed to persist telemetry device ID; using an in-memory identifier\\x1b[m\\n")
            os.write(2, b"[E:onnxruntime:Default] something onnxruntime reports\\n")
            """
        )
    )
    done = _import_in_child(fake.parent, {})
    assert done.returncode == 0, done.stderr
    assert done.stderr == "[E:onnxruntime:Default] something onnxruntime reports\n"


def test_the_real_onnxruntime_imports_quietly_with_an_unwritable_cache(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    not_a_folder = tmp_path / "cache-is-a-file"  # unwritable for root too
    not_a_folder.write_text("")
    plain = subprocess.run(
        [sys.executable, "-c", "import onnxruntime"],
        env={**os.environ, "XDG_CACHE_HOME": str(not_a_folder)},
        capture_output=True,
        text=True,
        check=False,
    )
    if "telemetry" not in plain.stderr:
        pytest.skip("this onnxruntime writes no telemetry line at import")
    done = _import_in_child(None, {"XDG_CACHE_HOME": str(not_a_folder)})
    assert done.returncode == 0 and done.stderr == ""


# -- 3. a result timed through the library records its model and time -----------------------------


class _Fixed(Session):
    """A backend session that times nothing: one sample, no model, no time (as every backend's is)."""

    def measure(self, model_path: Path) -> Timing:
        return Timing(backend="fixed", samples_us=[100.0, 101.0, 99.0, 100.5, 100.2])


class _Derived(_Fixed):
    """A backend whose measure calls its parent's (both wrapped): recorded all the same."""

    def measure(self, model_path: Path) -> Timing:
        return super().measure(model_path)


def test_every_session_records_the_model_and_when(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"not really a model, but bytes to hash")
    for cls in (_Fixed, _Derived):
        t = cls(get_backend("model"), MeasureOptions()).measure(model)
        assert t.model == model_identity(model)
        assert t.measured_at is not None and t.measured_at.endswith("Z")


def test_a_library_result_compared_with_a_copy_of_itself_is_flagged(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    shutil.copy(EXAMPLE, tmp_path / EXAMPLE.name)
    with get_backend("ort").open(MeasureOptions(dtype="fp32", runs=5, warmup=1)) as s:
        t = s.measure(tmp_path / EXAMPLE.name)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(t.to_json()))
    shutil.copy(a, b)
    pair = compare_paths(a, b).pairs[0]
    assert pair.model.status == "same"
    assert pair.stale is not None and pair.stale.startswith("both sides are the same result")


def test_a_result_without_a_model_says_its_writer_did_not_record_it(tmp_path: Path) -> None:
    samples = [100.0, 101.0, 99.0, 100.5, 100.2, 99.8]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(Timing(backend="ort", samples_us=samples).to_json()))
    b.write_text(json.dumps(Timing(backend="ort", samples_us=samples[::-1]).to_json()))
    message = compare_paths(a, b).pairs[0].model.message
    assert "not recorded by the writer" in message and "written before" not in message
