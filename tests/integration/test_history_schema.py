"""A history table whose shape changes under the sink, and the servers it meets:
a column added with a default, a TIMESTAMP version on a server of old defaults,
and an events table of an earlier release (docs/merge.md, "History")."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import apply_staged as apply
from tests.helpers import open_reasons, stage_rows
from wal_sink import faults
from wal_sink.errors import ConfigError, TerminalError
from wal_sink.protocol.sink_instance import SinkInstance

I64 = pa.int64()
SCHEMA = pa.schema(
    [("op", pa.string()), ("k", I64), ("label", pa.string()), ("v", I64)]
)
WIDER = SCHEMA.append(pa.field("c", I64))
TABLE = (
    "CREATE TABLE h (k BIGINT NOT NULL, label VARCHAR(8), v BIGINT, "
    "__START_AT BIGINT NOT NULL, __END_AT BIGINT, PRIMARY KEY (k, __START_AT))"
)
CDC = {"op_column": "op", "order_by": "v"}


def up(k, label, v, **more) -> dict:
    return {"op": "U", "k": k, "label": label, "v": v, **more}


def history(db, columns: str = "k, label, v") -> list[tuple]:
    return db.rows(
        f"SELECT {columns}, __START_AT, __END_AT FROM h ORDER BY k, __START_AT"
    )


def test_a_column_added_with_a_default_keeps_it_in_records_a_late_event_splits(
    db, fresh, config
):
    """The rows the ALTER filled hold the default, and one the DBA backfilled
    before the next start holds 5: a late event recomputes the key's records from
    its events, so the events applied before take, at that start, the values of
    the records they fell in, and the split records keep them."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1), up(2, "b", 1)], [up(1, "b", 5)])
    db.execute("ALTER TABLE h ADD COLUMN c BIGINT NOT NULL DEFAULT 7")
    db.execute("UPDATE h SET c = 5 WHERE k = 1 AND __START_AT = 1")  # backfill
    apply(cfg, WIDER, [up(1, "x", 3, c=8), up(2, "y", 4, c=9)], first=2)
    assert open_reasons(cfg) == []
    assert history(db, "k, label, v, c") == [
        (1, "a", 1, 5, 1, 3),
        (1, "x", 3, 8, 3, 5),
        (1, "b", 5, 7, 5, None),
        (2, "b", 1, 7, 1, 4),
        (2, "y", 4, 9, 4, None),
    ]


def test_a_column_the_stream_does_not_send_keeps_its_default_in_split_records(
    db, fresh, config
):
    """A column added to the history that the stream never sends: a late event's
    record and the records it splits keep what the table holds (its default)."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1)], [up(1, "b", 5)])
    db.execute("ALTER TABLE h ADD COLUMN c BIGINT NOT NULL DEFAULT 7")
    apply(cfg, SCHEMA, [up(1, "x", 3)], first=2)
    assert open_reasons(cfg) == []
    assert history(db, "k, label, v, c") == [
        (1, "a", 1, 7, 1, 3),
        (1, "x", 3, 7, 3, 5),
        (1, "b", 5, 7, 5, None),
    ]


def test_a_start_stopped_before_filling_an_added_column_fills_it_at_the_next(
    db, fresh, config, monkeypatch
):
    """A start that added the history's new column to the events table and
    stopped before filling it (killed, or the fill failed): the next start fills
    it, so a late event that splits a record keeps what the record holds (5,
    backfilled by the DBA)."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1)], [up(1, "b", 5)])
    db.execute("ALTER TABLE h ADD COLUMN c BIGINT NOT NULL DEFAULT 7")
    db.execute("UPDATE h SET c = 5 WHERE k = 1 AND __START_AT = 1")  # backfill
    monkeypatch.setenv(faults.ENV, "history.before_fill::raise")
    with pytest.raises(faults.InjectedFault):
        apply(cfg, WIDER, [up(1, "x", 3, c=8)], first=2)
    monkeypatch.delenv(faults.ENV)
    apply(cfg, WIDER)
    assert open_reasons(cfg) == []
    assert history(db, "k, label, v, c") == [
        (1, "a", 1, 5, 1, 3),
        (1, "x", 3, 8, 3, 5),
        (1, "b", 5, 7, 5, None),
    ]
    assert db.rows(
        "SELECT COLUMN_COMMENT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA "
        "= DATABASE() AND TABLE_NAME = 'h_events' AND COLUMN_NAME = 'c'"
    ) == [("",)]


def test_a_column_the_history_gains_while_the_sink_runs_stops_it_then_is_written(
    db, fresh, config
):
    """The stream sends a column added to the history after the sink started:
    the events table has it only from the next start, so the running sink stops
    naming it rather than drop its values; the restart applies the batch."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    stage_rows(cfg, 0, [up(1, "a", 1)], SCHEMA)
    stage_rows(cfg, 1, [up(1, "x", 3, c=9)], WIDER)
    sink = SinkInstance(cfg)
    try:
        committer = sink.start()
        committer.apply(0)
        db.execute("ALTER TABLE h ADD COLUMN c BIGINT NOT NULL DEFAULT 7")
        with pytest.raises(TerminalError, match="column.* c .*restart") as stopped:
            committer.apply(1)
    finally:
        sink.close()
    assert "\n" not in str(stopped.value)
    apply(cfg, WIDER)
    assert history(db, "k, label, v, c") == [
        (1, "a", 1, 7, 1, 3),
        (1, "x", 3, 9, 3, None),
    ]


def test_a_column_the_history_gains_before_the_stream_sends_it_is_written(
    db, fresh, config
):
    """The usual order: the DBA adds the column to the history, then a new query
    of the stream sends it (a follower's WAL meets the new schema). The running
    sink brings the events table in step before that batch: no stop."""
    fresh(TABLE)
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    stage_rows(cfg, 0, [up(1, "a", 1)], SCHEMA)
    sink = SinkInstance(cfg)
    try:
        committer = sink.start()
        committer.apply(0)
        db.execute("ALTER TABLE h ADD COLUMN c BIGINT NOT NULL DEFAULT 7")
        stage_rows(cfg, 1, [up(1, "x", 3, c=9)], WIDER)
        sink.wal.refresh()  # as a follower finds the new batch
        committer.apply(1)
    finally:
        sink.close()
    assert history(db, "k, label, v, c") == [
        (1, "a", 1, 7, 1, 3),
        (1, "x", 3, 9, 3, None),
    ]


def test_a_column_another_sinks_start_added_to_the_events_is_written(db, fresh, config):
    """Two sinks on one history: the other's start added the history's new
    column to the events table; this one, running since before, writes it."""
    fresh(TABLE)
    first = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    second = config(
        "h", ["k"], sink="s2", cdc=CDC, version_column="v", stored_as_scd_type=2
    )
    stage_rows(second, 0, [up(2, "a", 1)], SCHEMA)
    stage_rows(second, 1, [up(2, "x", 3, c=9)], WIDER)
    sink = SinkInstance(second)
    try:
        committer = sink.start()
        committer.apply(0)
        db.execute("ALTER TABLE h ADD COLUMN c BIGINT NOT NULL DEFAULT 7")
        apply(first, WIDER, [up(1, "a", 1, c=8)])
        committer.apply(1)
    finally:
        sink.close()
    assert history(db, "k, label, v, c") == [
        (1, "a", 1, 8, 1, None),
        (2, "a", 1, 7, 1, 3),
        (2, "x", 3, 9, 3, None),
    ]


def legacy(db, ddl: str) -> None:
    """``ddl`` run as on a server of old defaults: explicit_defaults_for_timestamp
    OFF and no strict mode (a TIMESTAMP NOT NULL takes a zero default, the first
    one DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP)."""
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION explicit_defaults_for_timestamp = OFF, sql_mode = ''")
        cur.execute(ddl)


STAMPED = pa.schema(
    [
        ("op", pa.string()),
        ("k", I64),
        ("label", pa.string()),
        ("v", pa.timestamp("us", tz="UTC")),
    ]
)
AT = [datetime(2026, 1, d, tzinfo=timezone.utc) for d in (1, 2, 3)]
NAIVE = [a.replace(tzinfo=None) for a in AT]


def test_a_timestamp_history_made_with_a_zero_default_start_takes_events(
    db, fresh, config
):
    """Its __START_AT made NOT NULL with a zero default (a legacy server's): the
    events table made from it must not copy what strict mode refuses, and a delete
    replacing an upsert at its sequence keeps the sequence."""
    fresh()
    legacy(
        db,
        "CREATE TABLE h (k BIGINT NOT NULL, label VARCHAR(8), v TIMESTAMP(6) NULL, "
        "__START_AT TIMESTAMP(6) NOT NULL, __END_AT TIMESTAMP(6) NULL, "
        "PRIMARY KEY (k, __START_AT))",
    )
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(
        cfg,
        STAMPED,
        [up(1, "a", AT[0]), up(1, "b", AT[2])],
        [{"op": "D", "k": 1, "label": None, "v": AT[2]}, up(1, "c", AT[1])],
    )
    assert history(db) == [
        (1, "a", NAIVE[0], NAIVE[0], NAIVE[1]),
        (1, "c", NAIVE[1], NAIVE[1], NAIVE[2]),
    ]


def test_a_history_whose_start_updates_itself_is_refused_at_start(db, fresh, config):
    """__START_AT as a legacy server makes a first TIMESTAMP NOT NULL: ON UPDATE
    CURRENT_TIMESTAMP would move a record's start (its key) whenever the sink ends
    it. Refused in one line that says the ALTER."""
    fresh()
    legacy(
        db,
        "CREATE TABLE h (k BIGINT NOT NULL, __START_AT TIMESTAMP(6) NOT NULL, "
        "__END_AT TIMESTAMP(6) NULL, label VARCHAR(8), v TIMESTAMP(6) NULL, "
        "PRIMARY KEY (k, __START_AT))",
    )
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    with pytest.raises(ConfigError, match="ON UPDATE") as refused:
        apply(cfg, STAMPED, [up(1, "a", AT[0])])
    assert "\n" not in str(refused.value)
    assert db.rows("SELECT COUNT(*) FROM h") == [(0,)]


def test_a_column_the_stream_sends_only_later_keeps_the_default_in_split_records(
    db, fresh, config
):
    """The events of a stream without c take the history's default for it, as
    the records do: a late event sending c splits a record and both halves keep
    the default (NULL there would refuse the key: c is NOT NULL)."""
    fresh(TABLE.replace("v BIGINT,", "v BIGINT, c BIGINT NOT NULL DEFAULT 7,"))
    cfg = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    apply(cfg, SCHEMA, [up(1, "a", 1)], [up(1, "b", 5)])
    apply(cfg, WIDER, [up(1, "x", 3, c=9)], first=2)
    assert open_reasons(cfg) == []
    assert history(db, "k, label, v, c") == [
        (1, "a", 1, 7, 1, 3),
        (1, "x", 3, 9, 3, 5),
        (1, "b", 5, 7, 5, None),
    ]


def test_a_column_a_second_sink_does_not_send_keeps_the_default_in_split_records(
    db, fresh, config
):
    fresh(TABLE)
    first = config("h", ["k"], cdc=CDC, version_column="v", stored_as_scd_type=2)
    second = config(
        "h", ["k"], sink="s2", cdc=CDC, version_column="v", stored_as_scd_type=2
    )
    db.execute("ALTER TABLE h ADD COLUMN c BIGINT NOT NULL DEFAULT 7")
    apply(first, WIDER, [up(1, "a", 1, c=8)])
    apply(second, SCHEMA, [up(2, "a", 1)], [up(2, "b", 5)])
    apply(first, WIDER, [up(2, "x", 3, c=9)], first=1)  # late, splits key 2
    assert open_reasons(first) == []
    assert history(db, "k, label, v, c") == [
        (1, "a", 1, 8, 1, None),
        (2, "a", 1, 7, 1, 3),
        (2, "x", 3, 9, 3, 5),
        (2, "b", 5, 7, 5, None),
    ]


def expected_history(events: list[dict]) -> list[tuple]:
    """The history function written plainly, for one stream of (k, label, c)
    events: per key and version the first upsert applied stays and a delete
    replaces it; sorted by version, an upsert whose (label, c) equal the open
    record's updates it in place, another ends it and opens one; a delete ends
    it. Rows as ``history(db, "k, label, v, c")`` reads them."""
    kept: dict[tuple, dict] = {}
    for event in events:
        at = (event["k"], event["v"])
        if at not in kept or event["op"] == "D":
            kept[at] = event
    rows: list[list] = []
    for k in sorted({k for k, _ in kept}):
        open_ = None
        for (_, v), e in sorted(i for i in kept.items() if i[0][0] == k):
            if e["op"] == "D":
                if open_ is not None:
                    open_[5] = v
                open_ = None
            elif open_ is not None and (open_[1], open_[3]) == (e["label"], e["c"]):
                open_[2] = v
            else:
                if open_ is not None:
                    open_[5] = v
                open_ = [k, e["label"], v, e["c"], v, None]
                rows.append(open_)
    return [tuple(r) for r in rows]


NAMES = iter(range(10**6))


@settings(
    max_examples=12,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_batches_around_an_added_column_end_as_the_history_of_their_events(
    db, fresh, config, data
):
    """Batches of events for two keys, in any order; a column c NOT NULL DEFAULT 7
    added to the history between two of them; after it, each batch sends c or
    not. The history ends as the function of all events with c as sent, or 7
    where not sent (before the column existed, or by a batch without it)."""
    event = st.fixed_dictionaries(
        {
            "op": st.sampled_from(["U", "U", "D"]),
            "k": st.integers(1, 2),
            "label": st.sampled_from(["a", "b"]),
            "v": st.integers(1, 6),
            "c": st.sampled_from([7, 8]),
        }
    )
    batch = st.lists(event, min_size=1, max_size=4)
    batches = data.draw(st.lists(batch, min_size=2, max_size=5))
    added = data.draw(st.integers(1, len(batches) - 1))
    sends = [i >= added and data.draw(st.booleans()) for i in range(len(batches))]
    fresh(TABLE)
    # a sink's WAL keeps a column once sent: a batch without c after that is
    # another sink's, of the same history and settings
    sinks = [
        config(
            "h",
            ["k"],
            sink=f"s{next(NAMES)}",
            cdc=CDC,
            version_column="v",
            stored_as_scd_type=2,
        )
        for _ in range(2)
    ]
    staged = [0, 0]
    seen = []
    for i, rows in enumerate(batches):
        if i == added:
            db.execute("ALTER TABLE h ADD COLUMN c BIGINT NOT NULL DEFAULT 7")
        sent = []
        for r in rows:
            values = {"label": r["label"], "c": r["c"]} if r["op"] == "U" else {}
            sent.append(
                {"op": r["op"], "k": r["k"], "v": r["v"], "label": values.get("label")}
                | ({"c": values.get("c")} if sends[i] else {})
            )
        s = int(not sends[i] and any(sends[:i]))
        apply(sinks[s], WIDER if sends[i] else SCHEMA, sent, first=staged[s])
        staged[s] += 1
        seen += [{**r, "c": r["c"] if sends[i] else 7} for r in rows]
    assert [open_reasons(c) for c in sinks] == [[], []]
    assert history(db, "k, label, v, c") == expected_history(seen)
