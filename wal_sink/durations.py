"""Durations as users write them in config and on the command line ("10 seconds"),
and the clock they are measured against."""

from __future__ import annotations

import re
from datetime import datetime, timezone

_UNITS = {
    "ms": 0.001,
    "millisecond": 0.001,
    "milliseconds": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")


def parse_duration(text: str) -> float:
    """Return seconds for text such as "2 seconds", "500ms", "7d".

    Raises:
        ValueError: with a message that shows the accepted form.
    """
    match = _PATTERN.match(str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(
            f"{text!r} is not a duration; write a number and a unit, e.g. '10 seconds'"
        )
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


def utc_now() -> datetime:
    """Now, in UTC, naive: as the sink's MySQL sessions (time_zone UTC) and its
    DATETIME columns of times take it."""
    return datetime.now(timezone.utc).replace(tzinfo=None)
