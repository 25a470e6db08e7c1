"""A key's history (``stored_as_scd_type = 2``) as a function of its events: the
one rule the sink applies and the docs state (docs/merge.md, "History").

The events of one key are sorted by sequence (the version column). At one
sequence the delete wins: an upsert at a sequence its key has a delete at is no
event at all (so one event per sequence is all the sink keeps). Walking them:

- an upsert opens a record [s, next) with its values and ends the open one at s —
  unless every tracked column equals the open record's: then the open record takes
  the upsert's values in place (its untracked columns change, no version opens);
- a delete ends the open record at s; the next upsert opens a new one.

With ``ignore_null_updates`` a NULL in an upsert keeps the open record's value; an
upsert with no record open (a new key, or after a delete) takes its NULLs.

Because the result depends only on the set of events, a late event splits the
record it falls in, an event seen again changes nothing, and any delivery order
ends the same. The sink keeps every event of a key for that reason: a late event
that splits a record whose untracked columns were updated since needs their
earlier values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    sequence: Any
    delete: bool
    values: dict[str, Any]
    """The data columns of an upsert (a delete has none)."""


@dataclass(frozen=True)
class Record:
    start: Any
    end: Any | None
    """None while the record is the key's current one."""
    values: dict[str, Any]


def records(
    events: Iterable[Event], tracks: Callable[[str], bool], keep_nulls: bool = False
) -> list[Record]:
    """The history of one key's ``events`` (see the module docstring);
    ``tracks(column)`` says whether a change of the column opens a version."""
    found: list[Record] = []
    start: Any = None
    current: dict[str, Any] | None = None
    events = list(events)
    deleted = {e.sequence for e in events if e.delete}
    for event in sorted(events, key=lambda e: e.sequence):
        if not event.delete and event.sequence in deleted:
            continue  # the delete at its sequence wins
        if event.delete:
            if current is not None:
                found.append(Record(start, event.sequence, current))
                current = None
            continue
        values = event.values
        if keep_nulls and current is not None:
            values = {c: current.get(c) if v is None else v for c, v in values.items()}
        if current is not None and all(
            values.get(c) == current.get(c) for c in {*values, *current} if tracks(c)
        ):
            current = values
            continue
        if current is not None:
            found.append(Record(start, event.sequence, current))
        start, current = event.sequence, values
    if current is not None:
        found.append(Record(start, None, current))
    return found
