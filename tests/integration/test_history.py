"""History tables (docs/merge.md, "History"): with ``stored_as_scd_type = 2`` a
key's rows are the records its events make, sorted by version, whatever order the
events arrive in: a late event splits the record it falls in, an event seen again
changes nothing, a delete ends the open record, untracked columns change in
place."""

from __future__ import annotations

import itertools
import random

import pyarrow as pa
import pytest

from tests.helpers import apply_staged as apply
from tests.helpers import open_reasons
from wal_sink.errors import ConfigError

I64 = pa.int64()
SCHEMA = pa.schema(
    [("op", pa.string()), ("k", I64), ("label", pa.string()), ("n", I64), ("v", I64)]
)
TABLE = (
    "CREATE TABLE h (k BIGINT NOT NULL, label VARCHAR(8), n BIGINT, v BIGINT, "
    "__START_AT BIGINT NOT NULL, __END_AT BIGINT, PRIMARY KEY (k, __START_AT))"
)
CDC = {"op_column": "op", "order_by": "v"}


def up(k, label, n, v) -> dict:
    return {"op": "U", "k": k, "label": label, "n": n, "v": v}


def gone(k, v) -> dict:
    return {"op": "D", "k": k, "label": None, "n": None, "v": v}


def history(db) -> list[tuple]:
    return db.rows(
        "SELECT k, label, n, v, __START_AT, __END_AT FROM h ORDER BY k, __START_AT"
    )


def acks(db) -> list[tuple]:
    return db.rows(
        "SELECT batch_id, row_count, deleted_count, skipped_count, quarantined "
        "FROM wal_sink_ack WHERE sink_id = 's1' ORDER BY batch_id"
    )


def test_a_late_event_splits_the_record_it_falls_in(db, fresh, config):
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(
        cfg,
        SCHEMA,
        [up(1, "a", 1, 1), up(2, "b", 2, 1)],
        [up(1, "a2", 3, 5), gone(2, 4)],
        [up(1, "x", 9, 3)],  # late: between 1 and 5
        [up(1, "x", 9, 3), gone(2, 4)],  # seen again: nothing changes
    )
    assert history(db) == [
        (1, "a", 1, 1, 1, 3),
        (1, "x", 9, 3, 3, 5),
        (1, "a2", 3, 5, 5, None),
        (2, "b", 2, 1, 1, 4),
    ]
    assert acks(db) == [
        (0, 2, 0, 0, 0),
        (1, 1, 1, 0, 0),
        (2, 1, 0, 0, 0),
        (3, 0, 0, 2, 0),
    ]


EVENTS = [
    up(1, "a", 1, 1),
    up(1, "a", 2, 2),  # only n changes: untracked, in place
    up(1, "b", 3, 3),
    gone(1, 4),
    up(1, "c", 4, 6),
    up(1, "c", 5, 5),  # late, and only n differs from 6's
    up(2, "z", 0, 2),
    gone(2, 2),  # a delete at the upsert's version wins
    up(3, "q", 1, 7),
]
EXPECTED = [
    (1, "a", 2, 2, 1, 3),
    (1, "b", 3, 3, 3, 4),
    (1, "c", 4, 6, 5, None),
    (3, "q", 1, 7, 7, None),
]


@pytest.mark.parametrize("seed", range(4))
def test_any_order_of_batches_ends_as_the_history_of_all_events(
    db, fresh, config, seed
):
    """Untracked n: the records are a's (1..3, n as of its last event 2), b's, and
    c's from 5 (its record takes 6's values in place); key 2 is deleted at the
    version it was inserted at: no record."""
    fresh(TABLE)
    cfg = config(
        "h",
        ["k"],
        cdc=CDC,
        version_column="v",
        stored_as_scd_type=2,
        track_history_except_column_list=["n"],
    )
    rng = random.Random(seed)
    events = EVENTS[:]
    rng.shuffle(events)
    cuts = sorted(rng.sample(range(1, len(events)), 3))
    batches = [events[a:b] for a, b in itertools.pairwise([0, *cuts, len(events)])]
    apply(cfg, SCHEMA, *batches)
    assert history(db) == EXPECTED


def test_a_record_without_a_version_is_set_aside(db, fresh, config):
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1, None), up(2, "b", 1, 1)])
    assert history(db) == [(2, "b", 1, 1, 1, None)]
    assert open_reasons(cfg) == ["a history record needs a version (v is NULL)"]


def test_a_table_that_is_not_a_history_is_refused_at_start(db, fresh, config):
    fresh("CREATE TABLE h (k BIGINT PRIMARY KEY, label VARCHAR(8), n BIGINT, v BIGINT)")
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    with pytest.raises(ConfigError, match="is not a history table"):
        apply(cfg, SCHEMA, [up(1, "a", 1, 1)])
