"""The report says a layer cache that could not be written through LayerCache's public
`write_failed` (and the optimizer's public `layer_cache`), not by reading private attributes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from deployopt.errors import CacheWarning
from deployopt.layers import ConvShape
from deployopt.lut import LayerCache
from deployopt.report import _table_source
from deployopt.timing import Timing


def _timing() -> Timing:
    return Timing("ort", [9.0, 10.0, 11.0])


def test_write_failed_turns_true_when_an_entry_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    cache = LayerCache("fp", "fp16", root=tmp_path / "file" / "cache")
    assert cache.write_failed is False
    with pytest.warns(CacheWarning, match="the layer cache is not saved this run"):
        cache.put(ConvShape(1, 8, 8, 8, 16), _timing())
    assert cache.write_failed is True
    with pytest.raises(AttributeError):  # read-only: only `put` finds it out
        cache.write_failed = False  # type: ignore[misc]


def test_table_source_names_an_unwritten_cache_and_a_written_one(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    failed = LayerCache("fp", "fp16", root=tmp_path / "file" / "cache")
    with pytest.warns(CacheWarning):
        failed.put(ConvShape(1, 8, 8, 8, 16), _timing())
    sweep = {"shapes": 1}
    opt = SimpleNamespace(layer_cache=failed)  # the optimizer's public property, no private one
    assert _table_source(opt, sweep) == " (not cached: the layer cache could not be written)"  # type: ignore[arg-type]
    written = LayerCache("fp", "fp16", root=tmp_path / "cache")
    written.put(ConvShape(1, 8, 8, 8, 16), _timing())
    opt = SimpleNamespace(layer_cache=written)
    assert _table_source(opt, sweep) == f" (cached per device in {written.dir})"  # type: ignore[arg-type]
    assert _table_source(SimpleNamespace(layer_cache=None), sweep) == ""  # type: ignore[arg-type]
