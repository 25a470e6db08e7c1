"""History tables (docs/merge.md, "History"): with ``stored_as_scd_type = 2`` a
key's rows are the records its events make, sorted by version, whatever order the
events arrive in: a late event splits the record it falls in, an event seen again
changes nothing, a delete ends the open record, untracked columns change in
place."""

from __future__ import annotations

import itertools
import json
import random
import threading
from datetime import datetime
from decimal import Decimal
from types import SimpleNamespace

import pyarrow as pa
import pytest
from rich.console import Console
from sqlalchemy import Engine, event

from tests.helpers import apply_staged as apply
from tests.helpers import open_reasons
from wal_sink.cli.render import status_table
from wal_sink.config import config_from_dict
from wal_sink.errors import ConfigError
from wal_sink.mysql.history_appends import HistoryAppends
from wal_sink.ops.purge import run_purge, select_purge
from wal_sink.ops.quarantine_entries import list_entries
from wal_sink.ops.quarantine_retry import plan_retry, run_retry
from wal_sink.ops.replay import plan_replay, run_replay
from wal_sink.ops.status import collect_status
from wal_sink.protocol import history_rows
from wal_sink.protocol.sink_instance import SinkInstance

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


def test_auto_create_makes_a_history_table(db, fresh, config):
    fresh()
    cfg = config(
        "h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2, auto_create=True
    )
    apply(cfg, SCHEMA, [up(1, "a", 1, 1)], [up(1, "b", 2, 2)])
    assert history(db) == [(1, "a", 1, 1, 1, 2), (1, "b", 2, 2, 2, None)]
    primary = db.rows(
        "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE "
        "TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'h' AND CONSTRAINT_NAME = "
        "'PRIMARY' ORDER BY ORDINAL_POSITION"
    )
    assert primary == [("k",), ("__START_AT",)]


def test_values_the_history_cannot_hold_are_set_aside(db, fresh, config):
    """A NULL for a NOT NULL column (the events table takes it, the history
    would not) and a label too long: set aside, the rest applied."""
    fresh(TABLE.replace("n BIGINT", "n BIGINT NOT NULL"))
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(
        cfg,
        SCHEMA,
        [up(1, "a", None, 1), up(2, "far too long", 1, 1), up(3, "c", 1, 1)],
        [gone(3, 2)],  # its event holds no n: the events table takes the NULL
    )
    assert history(db) == [(3, "c", 1, 1, 1, 2)]
    first, second = open_reasons(cfg)
    assert first == "NULL in NOT NULL column(s) n"
    assert second.startswith("MySQL error 1406")


def test_a_history_and_a_table_of_one_row_per_key_in_one_stream(db, fresh, tmp_path):
    """Routed: h keeps the history, t the newest record; one transaction."""
    fresh(TABLE, "CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(8), v BIGINT)")
    cfg = config_from_dict(
        {
            "sink": {"id": "s1"},
            "wal": {"path": str(tmp_path / "wal")},
            "mysql": {
                "url": db.url,
                "route_column": "tbl",
                "tables": {
                    "h": {"key": ["k"], "version_column": "v", "stored_as_scd_type": 2},
                    "t": {
                        "key": ["k"],
                        "version_column": "v",
                        "columns": ["k", "label", "v"],
                    },
                },
            },
            "cdc": CDC,
        },
        base_dir=tmp_path,
    )
    schema = pa.schema([("tbl", pa.string()), *SCHEMA])
    both = [{"tbl": t, **r} for r in (up(1, "a", 1, 1), up(1, "b", 2, 2)) for t in "ht"]
    apply(cfg, schema, both, [{"tbl": "h", **gone(1, 3)}, {"tbl": "t", **gone(1, 3)}])
    assert history(db) == [(1, "a", 1, 1, 1, 2), (1, "b", 2, 2, 2, 3)]
    assert db.rows("SELECT * FROM t") == []
    assert db.rows(
        "SELECT batch_id, table_name, row_count, deleted_count FROM "
        "wal_sink_ack_tables ORDER BY 1, 2"
    ) == [(0, "h", 2, 0), (0, "t", 2, 0), (1, "h", 0, 1), (1, "t", 0, 1)]


def test_status_says_how_many_events_a_history_keeps(db, fresh, config):
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1), up(1, "b", 2, 2)])
    db.execute("ANALYZE TABLE h_events")
    sink = SinkInstance(cfg)
    try:
        found = collect_status(sink)
    finally:
        sink.close()
    assert found.tables["h"]["history_events"] == 2
    assert found.tombstones is None, "a history keeps events, not tombstones"
    shown = Console(record=True, width=200)
    shown.print(status_table(found))
    assert "about 2 event(s) kept" in shown.export_text()


def test_a_record_set_aside_is_retried_once_the_history_can_hold_it(db, fresh, config):
    """The label too long for VARCHAR(8): once the column is widened, the next
    start widens the events table too, and a retry applies the record."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "far too long", 1, 1), up(1, "b", 2, 2)])
    assert history(db) == [(1, "b", 2, 2, 2, None)]
    db.execute("ALTER TABLE h MODIFY label VARCHAR(16)")
    sink = SinkInstance(cfg)
    try:
        assert [r.applied for r in run_retry(sink, plan_retry(sink))] == [1]
    finally:
        sink.close()
    assert history(db) == [(1, "far too long", 1, 1, 1, 2), (1, "b", 2, 2, 2, None)]


def test_a_history_passes_the_starts_checks_of_the_streams_columns(db, fresh, config):
    """The job and the follower check the stream's columns at start: the sink
    writes __START_AT (NOT NULL, keyed) and __END_AT itself."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    sink = SinkInstance(cfg)
    try:
        sink.expect_columns(SCHEMA.names)
        sink.start()
        sink.check_columns(SCHEMA.names)
    finally:
        sink.close()


def test_a_history_filled_elsewhere_is_refused_at_start(db, fresh, config):
    """Its rows are not the sink's events: a key's next event would replace them."""
    fresh(TABLE)
    db.execute("INSERT INTO h VALUES (1, 'old', 0, 1, 1, NULL)")
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    with pytest.raises(ConfigError, match="holds rows but its events table h_events"):
        apply(cfg, SCHEMA, [up(1, "new", 0, 9)])
    assert history(db) == [(1, "old", 0, 1, 1, None)]


def test_rows_that_stay_are_not_written_again(db, fresh, config):
    """A record whose span and values stay keeps its row: its AUTO_INCREMENT id,
    and the rows of a child whose foreign key cascades deletes."""
    fresh(
        TABLE.replace("(k BIGINT", "(id BIGINT AUTO_INCREMENT UNIQUE, k BIGINT"),
        "CREATE TABLE c (id INT PRIMARY KEY, k BIGINT NOT NULL, s BIGINT NOT NULL, "
        "FOREIGN KEY (k, s) REFERENCES h (k, __START_AT) ON DELETE CASCADE)",
    )
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1)])
    db.execute("INSERT INTO c VALUES (1, 1, 1)")
    apply(cfg, SCHEMA, [up(1, "b", 1, 5)], first=1)
    ids = dict(db.rows("SELECT __START_AT, id FROM h"))
    apply(cfg, SCHEMA, [up(1, "c", 1, 9)], first=2)
    spans = db.rows("SELECT __START_AT, __END_AT, id FROM h ORDER BY 1")
    assert [s[:2] for s in spans] == [(1, 5), (5, 9), (9, None)]
    assert {s[0]: s[2] for s in spans[:2]} == ids, "the closed records kept their ids"
    assert db.rows("SELECT * FROM c") == [(1, 1, 1)]


def test_a_key_whose_history_mysql_refuses_is_set_aside_the_rest_applied(
    db, fresh, config
):
    """A CHECK the history holds (the events table does not): the key's records
    of the chunk go to the quarantine, the other keys' apply."""
    fresh(TABLE.replace("n BIGINT,", "n BIGINT CHECK (n > 0),"))
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1), up(2, "b", -1, 1), up(3, "c", 3, 1)])
    assert history(db) == [(1, "a", 1, 1, 1, None), (3, "c", 3, 1, 1, None)]
    assert [r.split(":")[0] for r in open_reasons(cfg)] == ["MySQL error 4025"]
    assert acks(db) == [(0, 2, 0, 0, 1)]


def test_another_unique_index_on_a_history_is_refused(db, fresh, config):
    """Records of one key share their values: UNIQUE (label) would refuse a key's
    next version, so it is refused before anything is written."""
    fresh(TABLE.replace("PRIMARY KEY", "UNIQUE (label), PRIMARY KEY"))
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    with pytest.raises(ConfigError, match="label"):
        apply(cfg, SCHEMA, [up(1, "a", 1, 1)])
    assert history(db) == []


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_every_record_spells_the_key_as_its_first_event(db, fresh, config, order):
    """A case-insensitive key: 'A' at version 1 comes first, in any arrival order
    (found by the reference model's fuzzer: the rows written before a late 'A'
    kept 'a')."""
    fresh(TABLE.replace("k BIGINT NOT NULL", "k VARCHAR(8) NOT NULL"))
    schema = pa.schema([("op", pa.string()), ("k", pa.string()), *list(SCHEMA)[2:]])
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    events = [[up("A", "x", 1, 1)], [up("a", "y", 1, 5)], [up("A", "z", 1, 7)]]
    apply(cfg, schema, *[events[i] for i in order])
    assert history(db) == [
        ("A", "x", 1, 1, 1, 5),
        ("A", "y", 1, 5, 5, 7),
        ("A", "z", 1, 7, 7, None),
    ]


def test_a_late_event_after_an_in_place_update_splits_the_open_record(
    db, fresh, config
):
    """The open record began before the late event (its later event changed an
    untracked column in place): the late event is not the key's newest, so the
    set-based path leaves it to the whole computation (mysql/history_appends.py)."""
    fresh(TABLE)
    cfg = config(
        "h",
        ["k"],
        cdc=CDC,
        version_column="v",
        stored_as_scd_type=2,
        track_history_except_column_list=["n"],
    )
    apply(cfg, SCHEMA, [up(1, "a", 1, 1)], [up(1, "a", 2, 3)], [up(1, "b", 0, 2)])
    assert history(db) == [
        (1, "a", 1, 1, 1, 2),
        (1, "b", 0, 2, 2, 3),
        (1, "a", 2, 3, 3, None),
    ]


def test_a_chunk_whose_upserts_all_append_reads_no_keys_back(
    db, fresh, config, monkeypatch
):
    """One chunk updates key 1, sends key 2's values again (its open record takes
    the new version in place), opens key 4 and brings a late event of key 3: only
    key 3 is read back and computed whole. A chunk that updates key 1 and opens
    key 5 reads no key back: its counts say every upsert appended
    (mysql/history_appends.py). A chunk whose every upsert opens a record ends the
    open ones without comparing their values again."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    batches = [
        [up(1, "a", 1, 1), up(2, "b", 1, 1), up(3, "c", 1, 1)],
        [up(3, "c", 2, 5)],
        [up(4, "d", 1, 6), up(1, "a2", 1, 6), up(2, "b", 1, 6), up(3, "x", 1, 3)],
        [up(1, "a3", 1, 7), up(5, "e", 1, 7)],
        [up(1, "a4", 1, 8), up(4, "d2", 1, 8)],
    ]
    apply(cfg, SCHEMA, *batches[:2])
    computed, reads, updates = [], [], []
    real = history_rows.rewrite

    def rewrite(*args):
        computed.append(args[4])
        return real(*args)

    def read(conn, cursor, statement, *rest):
        if statement.startswith("SELECT DISTINCT"):
            reads.append(statement)
        if statement.startswith("UPDATE") and " JOIN " in statement:
            updates.append("IF(" in statement)

    monkeypatch.setattr(history_rows, "rewrite", rewrite)
    event.listen(Engine, "before_cursor_execute", read)
    try:
        apply(cfg, SCHEMA, batches[2], first=2)
        assert (computed, len(reads)) == ([[(3,)]], 1)
        apply(cfg, SCHEMA, *batches[3:], first=3)
        assert (computed, len(reads)) == ([[(3,)]], 1)
        assert updates == [True, False, False], "the values compared again or not"
    finally:
        event.remove(Engine, "before_cursor_execute", read)
    assert history(db) == [
        (1, "a", 1, 1, 1, 6),
        (1, "a2", 1, 6, 6, 7),
        (1, "a3", 1, 7, 7, 8),
        (1, "a4", 1, 8, 8, None),
        (2, "b", 1, 6, 1, None),
        (3, "c", 1, 1, 1, 3),
        (3, "x", 1, 3, 3, 5),
        (3, "c", 2, 5, 5, None),
        (4, "d", 1, 6, 6, 8),
        (4, "d2", 1, 8, 8, None),
        (5, "e", 1, 7, 7, None),
    ]


def test_a_second_open_record_of_another_writer_hides_no_other_key(
    db, fresh, config
):
    """Another writer gave key 1 a second open record. A chunk updating key 1 in
    place (its two open records met) and reopening key 2 after its delete must
    still write key 2: the count of records met is not trusted for a chunk with an
    update in place."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1), up(2, "b", 1, 1)], [gone(2, 2)])
    db.execute("INSERT INTO h VALUES (1, 'a', 1, 0, 0, NULL)")  # not the sink's
    apply(cfg, SCHEMA, [up(1, "a", 1, 5), up(2, "c", 1, 5)], first=2)
    assert [r for r in history(db) if r[0] == 2] == [
        (2, "b", 1, 1, 1, 2),
        (2, "c", 1, 5, 5, None),
    ]


def test_tracked_text_that_differs_only_in_case_or_spaces_opens_a_record(
    db, fresh, config
):
    """Values compare as sent, byte for byte, not as the column's collation
    would ('a' = 'A ' under it)."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1)], [up(1, "A", 1, 2)], [up(1, "A ", 1, 3)])
    assert history(db) == [
        (1, "a", 1, 1, 1, 2),
        (1, "A", 1, 2, 2, 3),
        (1, "A ", 1, 3, 3, None),
    ]


def test_a_tracked_float_compares_as_read_back(db, fresh, config):
    """A FLOAT reads back rounded (0.1 for both values): the record is updated in
    place, as the history function over the stored events says."""
    fresh(TABLE.replace("n BIGINT", "n FLOAT"))
    schema = pa.schema([*list(SCHEMA)[:3], ("n", pa.float64()), ("v", I64)])
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, schema, [up(1, "a", 0.1, 1)], [up(1, "a", 0.1000001, 2)])
    assert history(db) == [(1, "a", 0.1, 2, 1, None)]


def test_ignore_null_updates_keeps_the_open_records_values(db, fresh, config):
    """A NULL keeps the open record's value, and is compared as that value: an
    upsert whose only tracked change is a NULL updates in place."""
    fresh(TABLE)
    cfg = config(
        "h",
        ["k"],
        cdc=CDC,
        version_column="v",
        stored_as_scd_type=2,
        ignore_null_updates=True,
        track_history_except_column_list=["n"],
    )
    apply(
        cfg,
        SCHEMA,
        [up(1, "a", 1, 1), up(2, None, 7, 1)],
        [up(1, None, 2, 2), up(2, "z", None, 2)],
        [up(1, "b", None, 3)],
    )
    assert history(db) == [
        (1, "a", 2, 2, 1, 3),
        (1, "b", 2, 3, 3, None),
        (2, None, 7, 1, 1, 2),
        (2, "z", 7, 2, 2, None),
    ]


def test_an_events_table_made_before_its_index_gets_it_at_start(db, fresh, config):
    """The chunk finds its events by their token: an events table of an earlier
    release gains the index at the next start."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1)])
    db.execute("ALTER TABLE h_events DROP KEY _wal_applied_by")
    apply(cfg, SCHEMA, [up(1, "b", 1, 2)], first=1)
    indexed = db.rows(
        "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = "
        "DATABASE() AND TABLE_NAME = 'h_events' AND COLUMN_NAME = '_wal_applied_by'"
    )
    assert indexed == [(1,)]
    assert history(db) == [(1, "a", 1, 1, 1, 2), (1, "b", 1, 2, 2, None)]


def test_a_sink_with_other_history_settings_is_refused_at_start(db, fresh, config):
    """A second sink (or this one's config changed) tracking other columns or
    ignoring NULLs would compute some keys' records under its settings and leave
    the others under the first's: refused, one line, nothing written."""
    fresh(TABLE)
    settings = dict(cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(config("h", ["k"], **settings), SCHEMA, [up(1, "a", 1, 1)])
    for other in (
        {"track_history_except_column_list": ["n"]},
        {"ignore_null_updates": True},
    ):
        cfg = config("h", ["k"], sink="s2", **settings, **other)
        with pytest.raises(ConfigError, match="kept with other settings"):
            apply(cfg, SCHEMA, [up(1, "b", 2, 2)])
    same = config("h", ["k"], sink="s3", **settings)
    apply(same, SCHEMA, [up(1, "b", 2, 2)])
    assert history(db) == [(1, "a", 1, 1, 1, 2), (1, "b", 2, 2, 2, None)]


def test_an_events_table_made_before_its_settings_takes_the_sinks(db, fresh, config):
    fresh(TABLE)
    settings = dict(cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(config("h", ["k"], **settings), SCHEMA, [up(1, "a", 1, 1)])
    db.execute("ALTER TABLE h_events COMMENT = 'wal_sink events of h'")
    untracked = config("h", ["k"], track_history_except_column_list=["n"], **settings)
    apply(untracked, SCHEMA, [up(1, "a", 2, 2)], first=1)
    assert history(db) == [(1, "a", 2, 2, 1, None)]
    with pytest.raises(ConfigError, match="kept with other settings"):
        apply(config("h", ["k"], **settings), SCHEMA, [up(1, "a", 3, 3)], first=2)


# -- history_retention: events folded into floors ----------------------------------

RETAINED = dict(cdc=CDC, version_column="v", stored_as_scd_type=2)
HISTORY2 = dict(version_column="v", stored_as_scd_type=2)


def purge(cfg, dry_run=False) -> list:
    sink = SinkInstance(cfg)
    try:
        return run_purge(sink, select_purge(sink, dry_run=dry_run)).folded
    finally:
        sink.close()


def age(db, hours: int = 2) -> None:
    """Every event so far applied ``hours`` ago."""
    db.execute(
        "UPDATE h_events SET _wal_applied_at = "
        f"UTC_TIMESTAMP(6) - INTERVAL {hours} HOUR WHERE _wal_applied_by <> 'floor'"
    )


def events(db) -> list[tuple]:
    return db.rows("SELECT k, _wal_sequence, _wal_op FROM h_events ORDER BY 1, 2")


def test_purge_folds_old_events_into_floors_and_the_history_stays(db, fresh, config):
    """Key 1's events up to 5 and key 2's (deleted) become one floor each; the
    event applied since stays; the rows are not touched. Dry, only counted."""
    fresh(TABLE)
    cfg = config("h", ["k"], history_retention="1 hour", **RETAINED)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1), up(1, "b", 1, 3), up(2, "z", 1, 1)])
    apply(cfg, SCHEMA, [up(1, "c", 1, 5), gone(2, 2)], first=1)
    age(db)
    apply(cfg, SCHEMA, [up(1, "d", 1, 7)], first=2)
    before = history(db)
    dry = purge(cfg, dry_run=True)
    assert [(f.keys, f.events) for f in dry] == [(2, 5)]
    assert len(events(db)) == 6
    assert [(f.keys, f.events) for f in purge(cfg)] == [(2, 5)]
    assert events(db) == [(1, 5, "O"), (1, 7, "U"), (2, 2, "C")]
    assert history(db) == before
    assert [(f.keys, f.events) for f in purge(cfg)] == [(0, 0)], "nothing old left"
    apply(cfg, SCHEMA, [up(1, "e", 1, 6)], first=3)  # late, above the floor
    assert history(db) == [
        *before[:2],
        (1, "c", 1, 5, 5, 6),
        (1, "e", 1, 6, 6, 7),
        *before[3:],
    ]


def test_an_event_above_a_floor_splits_with_the_values_the_floor_kept(
    db, fresh, config
):
    """n untracked: 3 updated key 1's record in place, 6 again after the fold. A
    late 5 splits the record: before it, the values as of the floor (n 2, v 3),
    not the row's (n 3, v 6). Events at (3) and below (2) the floor are set aside."""
    fresh(TABLE)
    cfg = config(
        "h",
        ["k"],
        history_retention="1 hour",
        track_history_except_column_list=["n"],
        **RETAINED,
    )
    apply(cfg, SCHEMA, [up(1, "a", 1, 1), up(1, "a", 2, 3)])
    age(db)
    purge(cfg)
    apply(cfg, SCHEMA, [up(1, "a", 3, 6)], first=1)
    assert history(db) == [(1, "a", 3, 6, 1, None)]
    apply(cfg, SCHEMA, [up(1, "b", 5, 5), up(1, "x", 0, 2), up(1, "y", 0, 3)], first=2)
    assert history(db) == [
        (1, "a", 2, 3, 1, 5),
        (1, "b", 5, 5, 5, 6),
        (1, "a", 3, 6, 6, None),
    ]
    assert [r.split(":")[0] for r in open_reasons(cfg)] == [
        "at or below its key's floor 3",
        "at or below its key's floor 3",
    ]
    assert acks(db)[-1] == (2, 1, 0, 0, 2)


def test_a_key_deleted_before_its_floor_opens_a_new_record(db, fresh, config):
    """The floor keeps no record open: the next upsert opens one, the closed rows
    stay; a delete below the floor is set aside too."""
    fresh(TABLE)
    cfg = config("h", ["k"], history_retention="1 hour", **RETAINED)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1), gone(1, 2)])
    age(db)
    purge(cfg)
    apply(cfg, SCHEMA, [up(1, "b", 1, 4), gone(1, 1)], first=1)
    assert history(db) == [(1, "a", 1, 1, 1, 2), (1, "b", 1, 4, 4, None)]
    assert len(open_reasons(cfg)) == 1


def test_every_event_is_kept_without_a_retention(db, fresh, config):
    fresh(TABLE)
    cfg = config("h", ["k"], **RETAINED)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1), up(1, "b", 1, 3)])
    age(db, hours=10_000)
    assert purge(cfg) == []
    assert len(events(db)) == 2


def test_a_retention_is_refused_without_a_history(db, config):
    with pytest.raises(Exception, match="history_retention need"):
        config("h", ["k"], version_column="v", history_retention="1 hour")


def test_an_event_committed_by_another_sink_between_chunks_is_seen(
    db, fresh, tmp_path, monkeypatch
):
    """s1 applies a batch in chunks of one record; after its first chunk (key 3)
    s2 commits key 1's event at 12, or waits for s1's locks. s1's event at 10 is
    then not key 1's newest: read as of s1's first chunk (a plain read), it was
    taken as one, and the set-based writes, finding no record open before it,
    wrote nothing (found by review). The chunks' tokens are chosen so that s2's
    events sort after s1's in the token index: no lock of s1's there is in s2's
    way, only the reads that must see it."""
    fresh(TABLE)

    def sink(name: str):
        return config_from_dict(
            {
                "sink": {"id": name},
                "wal": {"path": str(tmp_path / name), "chunk_rows": 1},
                "mysql": {"url": db.url, "table": "h", "key": ["k"], **HISTORY2},
                "cdc": CDC,
            },
            base_dir=tmp_path,
        )

    s1, s2 = sink("s1"), sink("s2")
    numbers = itertools.count()
    prefix = {"now": "1"}
    monkeypatch.setattr(
        history_rows,
        "uuid",
        SimpleNamespace(
            uuid4=lambda: SimpleNamespace(hex=f"{prefix['now']}{next(numbers):031x}")
        ),
    )
    apply(s1, SCHEMA, [up(1, "a", 1, 5)])
    prefix["now"] = "9"
    apply(s2, SCHEMA, [up(2, "z", 1, 1)])
    real = HistoryAppends.apply
    other = threading.Thread(
        target=apply, args=(s2, SCHEMA, [up(1, "c", 1, 12)]), kwargs={"first": 1}
    )

    def then_s2(self, conn, token):
        done = real(self, conn, token)
        if other.ident is None:
            prefix["now"] = "f"
            other.start()
            other.join(timeout=5)  # committed, or waiting for s1's locks
            prefix["now"] = "8"
        return done

    monkeypatch.setattr(HistoryAppends, "apply", then_s2)
    prefix["now"] = "8"
    apply(s1, SCHEMA, [up(3, "q", 1, 1), up(1, "b", 1, 10)], first=1)
    other.join(timeout=120)
    assert history(db)[:3] == [
        (1, "a", 1, 5, 5, 10),
        (1, "b", 1, 10, 10, 12),
        (1, "c", 1, 12, 12, None),
    ]


def test_the_first_of_several_events_at_a_floor_is_set_aside(db, fresh, config):
    """Two records of key 1 at its floor's version in one chunk: the first applied
    stays (here: set aside), the other is seen again (skipped), as at any version
    (found by the reference model's fuzzer: the last was set aside)."""
    fresh(TABLE)
    cfg = config("h", ["k"], history_retention="1 hour", **RETAINED)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1), up(1, "b", 1, 3)])
    age(db)
    purge(cfg)
    apply(cfg, SCHEMA, [gone(1, 3), up(1, "y", 0, 3)], first=1)
    sink = SinkInstance(cfg)
    try:
        held = [json.loads(e.entry.record) for e in list_entries(sink)]
    finally:
        sink.close()
    assert [(r["op"], r["v"]) for r in held] == [("D", 3)]
    assert acks(db)[-1] == (1, 0, 0, 1, 1)


@pytest.mark.parametrize(
    "version, span, kind, value",
    [
        ("DATETIME(6)", "DATETIME", pa.timestamp("us"), datetime(2026, 1, 1)),
        ("DECIMAL(10,2)", "BIGINT", pa.decimal128(10, 2), Decimal("1.50")),
    ],
)
def test_a_history_span_narrower_than_its_version_is_refused(
    db, fresh, config, version, span, kind, value
):
    """Two versions would become one record, the second counted as seen again,
    silently (found by review)."""
    fresh(
        f"CREATE TABLE h (k BIGINT NOT NULL, v {version}, __START_AT {span} NOT "
        f"NULL, __END_AT {span}, PRIMARY KEY (k, __START_AT))"
    )
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    schema = pa.schema([("op", pa.string()), ("k", I64), ("v", kind)])
    with pytest.raises(ConfigError, match="take the version column's type"):
        apply(cfg, schema, [{"op": "U", "k": 1, "v": value}])


def test_a_forced_replay_after_a_fold_sets_aside_what_the_floor_holds(
    db, fresh, config
):
    """A replayed event at or below its key's floor cannot be told from a late
    one there: it is set aside naming the floor, and the history does not change;
    an event above the floor is seen again."""
    fresh(TABLE)
    cfg = config("h", ["k"], history_retention="1 hour", **RETAINED)
    apply(cfg, SCHEMA, [up(1, "a", 1, 1), up(1, "b", 1, 3)])
    age(db)
    purge(cfg)
    apply(cfg, SCHEMA, [up(1, "c", 1, 5)], first=1)
    before = history(db)
    sink = SinkInstance(cfg)
    try:
        run_replay(sink, plan_replay(sink, 0, 1, force=True), force=True)
    finally:
        sink.close()
    assert history(db) == before
    assert [r.split(":")[0] for r in open_reasons(cfg)] == [
        "at or below its key's floor 3",
        "at or below its key's floor 3",
    ]
    assert acks(db)[-2:] == [(0, 0, 0, 0, 2), (1, 0, 0, 1, 0)]
