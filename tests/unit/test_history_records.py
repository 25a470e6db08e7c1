"""A key's history as a function of its events (merge/history.py): the order
events are given in never matters; a late event splits a record; a delete wins at
its version; equal tracked columns change a record in place; partial upserts keep
the open record's values."""

from __future__ import annotations

import itertools

from wal_sink.merge.history import Event, Record, records

EVENTS = [
    Event(1, False, {"label": "a", "n": 1}),
    Event(3, False, {"label": "b", "n": 2}),
    Event(5, True, {}),
    Event(7, False, {"label": "b", "n": 3}),
    Event(8, False, {"label": "b", "n": 4}),
]


def every(column: str) -> bool:
    return True


def label_only(column: str) -> bool:
    return column == "label"


def test_the_order_events_come_in_never_matters():
    first = records(EVENTS, label_only)
    for order in itertools.permutations(EVENTS):
        assert records(order, label_only) == first
    assert first == [
        Record(1, 3, {"label": "a", "n": 1}),
        Record(3, 5, {"label": "b", "n": 2}),
        Record(7, None, {"label": "b", "n": 4}),  # 8 changed only n: in place
    ]


def test_a_late_event_splits_the_record_it_falls_in():
    late = Event(2, False, {"label": "x", "n": 0})
    assert records([*EVENTS, late], every)[:3] == [
        Record(1, 2, {"label": "a", "n": 1}),
        Record(2, 3, {"label": "x", "n": 0}),
        Record(3, 5, {"label": "b", "n": 2}),
    ]


def test_a_delete_wins_at_its_version():
    events = [Event(1, False, {"n": 1}), Event(4, False, {"n": 2}), Event(4, True, {})]
    assert records(events, every) == [Record(1, 4, {"n": 1})]


def test_a_null_keeps_the_open_records_value_and_a_new_record_takes_it():
    events = [
        Event(1, False, {"label": "a", "n": 1}),
        Event(2, False, {"label": None, "n": 2}),
        Event(3, True, {}),
        Event(4, False, {"label": None, "n": 3}),
    ]
    assert records(events, every, keep_nulls=True) == [
        Record(1, 2, {"label": "a", "n": 1}),
        Record(2, 3, {"label": "a", "n": 2}),
        Record(4, None, {"label": None, "n": 3}),
    ]


def test_an_upsert_at_a_deleted_version_is_no_event():
    """Even one that would only change an untracked column in place."""
    events = [
        Event(1, False, {"label": "a", "n": 1}),
        Event(5, False, {"label": "a", "n": 2}),
        Event(5, True, {}),
    ]
    assert records(events, label_only) == [Record(1, 5, {"label": "a", "n": 1})]
