"""A result's "measured_at" reads the same on every Python deployopt supports. It was parsed by
datetime.fromisoformat, which on 3.11 reads any ISO 8601 time but on 3.9 and 3.10 only 0, 3 or 6
fraction digits and ±HH:MM offsets: `compare` refused on 3.9 a file (`date +%FT%T.%N%:z`, or a
hand-written `.5Z`) it read on 3.11. The 3.10 leg of CI runs this file on a real 3.10 too."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest

import deployopt.timing as timing
from deployopt.timing import measured_time

UTC = timezone.utc
READ = {
    "2026-12-07T15:45:11Z": datetime(2026, 12, 7, 15, 45, 11, tzinfo=UTC),
    "2026-12-07T15:45:11.5Z": datetime(2026, 12, 7, 15, 45, 11, 500000, tzinfo=UTC),
    "2026-12-07T16:45:11.25+01:00": datetime(2026, 12, 7, 15, 45, 11, 250000, tzinfo=UTC),
    "2026-12-07T16:45:11.123456789+01:00": datetime(2026, 12, 7, 15, 45, 11, 123456, tzinfo=UTC),
    "2026-12-07T15:45:11+0000": datetime(2026, 12, 7, 15, 45, 11, tzinfo=UTC),
    "2026-12-07T10:45:11-05": datetime(2026, 12, 7, 15, 45, 11, tzinfo=UTC),
    "20261207T154511Z": datetime(2026, 12, 7, 15, 45, 11, tzinfo=UTC),
    "2026-12-07 15:45:11,5z": datetime(2026, 12, 7, 15, 45, 11, 500000, tzinfo=UTC),
}


class _Py39Datetime(datetime):
    """datetime as 3.9 and 3.10 have it: fromisoformat reads 3 or 6 fraction digits, ±HH:MM only."""

    @classmethod
    def fromisoformat(cls, text: str) -> datetime:  # type: ignore[override]
        iso = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{3}|\.\d{6})?)?([+-]\d{2}:\d{2})?"
        ok = re.fullmatch(iso, text)
        if ok is None:
            raise ValueError(f"Invalid isoformat string: {text!r}")
        return datetime.fromisoformat(text)


@pytest.mark.parametrize("pretend_py39", [False, True])
@pytest.mark.parametrize("text", list(READ))
def test_every_iso_8601_form_reads_the_same_on_every_python(
    text: str, pretend_py39: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pretend_py39:
        monkeypatch.setattr(timing, "datetime", _Py39Datetime)
    got = measured_time(text)
    assert got == READ[text]
    assert got.utcoffset() is not None


@pytest.mark.parametrize(
    "text, why",
    [
        ("2026-12-07T15:45:11", "no UTC offset"),  # whose local time?
        ("yesterday", "not ISO 8601"),
        ("2026-13-07T15:45:11Z", "month"),
        ("2026-12-07T15:45:11+24:00", "offset"),
    ],
)
def test_a_time_that_is_not_one_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        measured_time(text)


def test_offsets_compare_as_instants() -> None:
    later, earlier = measured_time("2026-12-07T16:45:11+01:00"), measured_time("2026-12-07T15:45:10Z")
    assert later - earlier == timedelta(seconds=1)


def test_an_offset_past_59_minutes_is_refused() -> None:
    """+05:99 read as +06:39 (review): an offset's minutes are 00-59."""
    with pytest.raises(ValueError, match="offset"):
        measured_time("2026-12-07T15:45:11+05:99")
