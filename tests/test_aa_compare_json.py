"""benchmarks/aa_compare.py writes JSON: a comparison with no p (replicates with no spread, where
deployopt.timing gives NaN) is `"p_value": null`, as compare's own --json writes it. json.dumps
wrote `NaN`, which no strict JSON parser reads (jq, JSON.parse)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from deployopt.timing import Timing

AA = Path(__file__).resolve().parent.parent / "benchmarks" / "aa_compare.py"


def no_spread(median: float, replicates: int, at: str) -> Timing:
    """A result of `replicates` runs, each of ten equal samples: no spread between them."""
    model = {"file": "m.onnx", "sha256": "ab" * 32}
    runs = [Timing("ort", [median] * 10, 2, "x", {}, model=model, measured_at=at) for _ in range(replicates)]
    return Timing.from_replicates(runs)


def strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_a_pair_with_no_spread_writes_a_null_p(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("aa_compare", AA)
    assert spec is not None and spec.loader is not None
    aa = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(aa)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(no_spread(100.0, 3, "2026-11-01T00:00:00Z").to_json()))
    b.write_text(json.dumps(no_spread(100.0, 3, "2026-11-02T00:00:00Z").to_json()))
    out = tmp_path / "aa.json"
    assert aa.main([str(a), "--pair", str(b), "--rounds", "3", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    doc = strict(out.read_text())
    assert strict(printed) == doc
    assert isinstance(doc, dict)
    assert doc["interleaved"]["whole"]["aa"]["p_value"] is None
