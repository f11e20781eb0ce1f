"""A result's "measured_at" reads every form Python 3.11's datetime.fromisoformat reads for a
time with an offset, the same on every Python (the expectations are written out, so the 3.9 and
3.10 legs check them too). Until the fix, hour-only times (`2026-12-07T17Z`, `+05` after an
hour), offsets with seconds (`+05:30:15`), ISO week dates and separators other than T or a space
were refused: `compare` exited 2 on a file 3.11 reads."""

from __future__ import annotations

import itertools
import sys
from datetime import datetime, timedelta, timezone

import pytest

from deployopt.timing import measured_time


def _tz(hours: int = 0, minutes: int = 0, seconds: int = 0, micro: int = 0) -> timezone:
    return timezone(timedelta(hours=hours, minutes=minutes, seconds=seconds, microseconds=micro))


UTC = timezone.utc
READ = {
    # an hour alone, with Z or an offset of hours
    "2026-12-07T17Z": datetime(2026, 12, 7, 17, tzinfo=UTC),
    "2026-12-07T17+05": datetime(2026, 12, 7, 17, tzinfo=_tz(5)),
    "2026-12-07T17-0530": datetime(2026, 12, 7, 17, tzinfo=_tz(-5, -30)),
    "20261207T17Z": datetime(2026, 12, 7, 17, tzinfo=UTC),
    "2026-12-07T1730+05": datetime(2026, 12, 7, 17, 30, tzinfo=_tz(5)),
    # offsets with seconds, and their fractions
    "2026-12-07T17:30:15+05:30:15": datetime(2026, 12, 7, 17, 30, 15, tzinfo=_tz(5, 30, 15)),
    "2026-12-07T17:30:15+053015": datetime(2026, 12, 7, 17, 30, 15, tzinfo=_tz(5, 30, 15)),
    "2026-12-07T17:30:15-05:30:15.25": datetime(2026, 12, 7, 17, 30, 15, tzinfo=_tz(-5, -30, -15, -250000)),
    "2026-12-07T17:30:15+05:30:15,1234567": datetime(2026, 12, 7, 17, 30, 15, tzinfo=_tz(5, 30, 15, 123456)),
    "2026-12-07T17:30:15+23:59:59.999999": datetime(2026, 12, 7, 17, 30, 15, tzinfo=_tz(23, 59, 59, 999999)),
    # as 3.11 reads it: a zero offset is UTC whatever its fraction
    "2026-12-07T17:30:15+00:00:00.5": datetime(2026, 12, 7, 17, 30, 15, tzinfo=UTC),
    # ISO week dates (Monday 1), extended and basic, the day optional
    "2026-W49-1T17Z": datetime(2026, 11, 30, 17, tzinfo=UTC),
    "2026W497T17:30Z": datetime(2026, 12, 6, 17, 30, tzinfo=UTC),
    "2026-W49T17Z": datetime(2026, 11, 30, 17, tzinfo=UTC),
    "2026W49T17Z": datetime(2026, 11, 30, 17, tzinfo=UTC),
    "2020-W53-7T00Z": datetime(2021, 1, 3, tzinfo=UTC),
    # any one character between date and time; an empty fraction
    "2026-12-07x17:30Z": datetime(2026, 12, 7, 17, 30, tzinfo=UTC),
    "2026-12-07\u00e917:30Z": datetime(2026, 12, 7, 17, 30, tzinfo=UTC),
    "2026-12-07017:30Z": datetime(2026, 12, 7, 17, 30, tzinfo=UTC),
    "2026-12-07T17:30:15.Z": datetime(2026, 12, 7, 17, 30, 15, tzinfo=UTC),
    # the forms read before stay read
    "2026-12-07T15:45:11Z": datetime(2026, 12, 7, 15, 45, 11, tzinfo=UTC),
    "2026-12-07T16:45:11.123456789+01:00": datetime(2026, 12, 7, 16, 45, 11, 123456, tzinfo=_tz(1)),
    "2026-12-07 15:45:11,5z": datetime(2026, 12, 7, 15, 45, 11, 500000, tzinfo=UTC),
}


@pytest.mark.parametrize("text", list(READ))
def test_every_form_311_reads_is_read_alike(text: str) -> None:
    got = measured_time(text)
    assert got == READ[text] and got.utcoffset() == READ[text].utcoffset()


REFUSED = {
    "2026-12-07T17": "no UTC offset",  # whose local time?
    "2026-12-07T17.5Z": "not ISO 8601",  # 3.11: 17:00:00.5, ISO 8601: 17:30; neither is safe
    "2026-12-07T17:30.5Z": "not ISO 8601",
    "2026-12-07T17:30:15x+05:00": "not ISO 8601",  # 3.11 skips the x
    "2026-12-07T17 Z": "not ISO 8601",
    "2026-12-07T17:30:15+05:60": "offset out of range",  # 3.11: +06:00
    "2026-12-07T17:30:15+05:30:60": "offset out of range",
    "2026-12-07T17:30:15+05.5": "not ISO 8601",  # a fraction of an offset's hour
    "2026-12-07T17:30:15+24": "offset out of range",
    "2026-12-07T24Z": "hour",
    "2026-02-29T17Z": "day",
    "2025-W53-1T17Z": "week",  # 2025 has 52 ISO weeks (2026 has 53)
    "2026-W49-8T17Z": "week",
    "2026-1207T17Z": "not ISO 8601",  # extended and basic mixed in the date
    "2026-12-07T17:3015Z": "not ISO 8601",
}


@pytest.mark.parametrize("text", list(REFUSED))
def test_what_is_not_a_time_with_an_offset_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=REFUSED[text]):
        measured_time(text)


_DATES = ["2026-12-07", "20261207", "2026-W49", "2026W49", "2026-W49-1", "2026W491", "2026-W491", "2026-1207"]
_SEPS = ["T", " ", "x", "-", "+", "Z", "0"]
_TIMES = ["17", "17:30", "1730", "17:30:15", "173015", "17:30:15.5", "173015,123456789", "17:30:15.", "1"]
_OFFSETS = [
    "",
    "Z",
    "+05",
    "-0530",
    "+05:30",
    "+053015",
    "-05:30:15",
    "+05:30:15.5",
    "+0530:15",
    "+5",
    "+123",
]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="compares with 3.11's datetime.fromisoformat")
def test_agrees_with_fromisoformat_on_3_11() -> None:
    """Every combination of dates, separators, times and offsets: where 3.11's fromisoformat reads
    a time with an offset, measured_time reads the same instant and offset, and it reads nothing
    3.11 refuses."""
    for d, s, t, o in itertools.product(_DATES, _SEPS, _TIMES, _OFFSETS):
        text = d + s + t + o
        try:
            want: datetime | None = datetime.fromisoformat(text)
        except ValueError:
            want = None
        if want is not None and want.tzinfo is None:
            want = None  # no offset: refused here by design
        try:
            got: datetime | None = measured_time(text)
        except ValueError:
            got = None
        if got is not None:  # read: as 3.11 reads it
            assert want is not None and got == want and got.utcoffset() == want.utcoffset(), text
        # refused: 3.11 refuses it too, or reads digits after the seconds as their fraction (a
        # digit separator after a week date moves 3.11's split: 2026-W49-1 0 173015 is 10:17:30.15)
        assert got is not None or want is None or s.isdigit(), text
