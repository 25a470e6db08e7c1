"""The target's shape (docs/merge.md, "The target's shape"): each property of a
table or server that changes what an upsert does is either made to mean what the
config says or refused at start with one line, nothing written. Driven in process
(the committer and recovery, batches staged by pyarrow); the job's own runs are in
test_target_shape_job.py."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal

import pyarrow as pa
import pytest

from devtools.mariadb import SINK_PASSWORD
from tests.helpers import apply_staged as apply
from tests.helpers import server_default, stage_rows
from wal_sink.errors import ConfigError, TerminalError
from wal_sink.mysql.engine import SELECT_ANY, SESSION_SQL_MODE, make_engine
from wal_sink.mysql.multi_row import MultiRowUpsert
from wal_sink.mysql.retry_state import RETRIED
from wal_sink.ops.quarantine_entries import list_entries
from wal_sink.ops.quarantine_retry import plan_retry, run_retry
from wal_sink.protocol.sink_instance import SinkInstance

I64 = pa.int64()


def refused_at_start(config, schema: pa.Schema) -> str:
    """The one line a start refuses ``config`` with, a stream of ``schema`` known."""
    sink = SinkInstance(config)
    sink.expect_columns(schema.names)
    try:
        with pytest.raises(ConfigError) as info:
            sink.start()
    finally:
        sink.close()
    assert "\n" not in str(info.value)
    return str(info.value)


def fast_rows(local_infile: bool, rows: int) -> dict[str, int]:
    """What the ``calls`` fixture counts when ``rows`` rows took the fast way
    ``mysql.local_infile`` picks: LOAD DATA, or else multi-row INSERTs."""
    counts = {"local_infile": 0, "multi_row": 0}
    counts["local_infile" if local_infile else "multi_row"] = rows
    return counts


def nothing_written(db) -> bool:
    tables = {r[0] for r in db.rows("SHOW TABLES")}
    return "wal_sink_ack" not in tables or not db.rows("SELECT * FROM wal_sink_ack")


# -- columns the config names -------------------------------------------------


def test_a_version_column_the_stream_lacks_is_refused_at_start_and_by_recovery(
    db, fresh, config
):
    fresh("CREATE TABLE t (k BIGINT PRIMARY KEY, v BIGINT, ver BIGINT)")
    db.execute("INSERT INTO t VALUES (1, 100, 10)")
    cfg = config("t", ["k"], version_column="ver")
    schema = pa.schema([("k", I64), ("v", I64)])
    said = refused_at_start(cfg, schema)
    assert "mysql.version_column names column 'ver'" in said
    # The CLI knows no query: the committer checks the staged schema first.
    with pytest.raises(ConfigError, match="version_column names column 'ver'"):
        apply(cfg, schema, [{"k": 1, "v": 1}])
    assert db.rows("SELECT v, ver FROM t") == [(100, 10)]
    assert nothing_written(db)


CDC_SEQ = {"op_column": "op", "order_by": "seq"}
NAMED = [
    (["k"], {"merge": {"n": "add"}}, None, ["k", "seq"], "mysql.merge.n"),
    (["k"], {}, CDC_SEQ, ["k", "seq"], "cdc.op_column"),
    (["k"], {}, CDC_SEQ, ["k", "op"], "cdc.order_by"),
    (["k", "n"], {}, None, ["k", "seq"], "mysql.key"),
]
"""A setting naming a column, a stream without it, and the setting refused."""


def named_config(fresh, config, key, mysql, cdc, stream):
    """A config naming a column ``stream`` lacks, and ``stream``'s schema."""
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT, seq BIGINT, op CHAR(1), "
        "UNIQUE KEY kn (k, n))"
    )
    types = {"k": I64, "seq": I64, "op": pa.string()}
    schema = pa.schema([(name, types[name]) for name in stream])
    return config("t", key, cdc=cdc, **mysql), schema


@pytest.mark.parametrize("key, mysql, cdc, stream, named", NAMED)
def test_every_column_the_config_names_must_be_in_the_stream(
    fresh, config, key, mysql, cdc, stream, named
):
    cfg, schema = named_config(fresh, config, key, mysql, cdc, stream)
    said = refused_at_start(cfg, schema)
    assert said.startswith(f"{named} names column"), said


@pytest.mark.parametrize("key, mysql, cdc, stream, named", NAMED)
def test_a_staged_batch_without_a_column_the_config_names_is_refused(
    db, fresh, config, key, mysql, cdc, stream, named
):
    """The CLI knows no query: the committer checks the staged schema first."""
    cfg, schema = named_config(fresh, config, key, mysql, cdc, stream)
    rows = [{name: "I" if name == "op" else 1 for name in stream}]
    with pytest.raises(ConfigError, match=f"^{named} names column"):
        apply(cfg, schema, rows)
    assert nothing_written(db)


def test_a_target_that_is_not_transactional_is_refused_at_start(db, fresh, config):
    fresh("CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT) ENGINE=MyISAM")
    said = refused_at_start(config("t", ["k"]), pa.schema([("k", I64), ("n", I64)]))
    assert "table 't': target table uses MyISAM; it must be InnoDB" in said, said
    assert nothing_written(db)


# -- columns MySQL writes by itself -------------------------------------------

TS = pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize(
    "ddl, key, merge, said",
    [
        (
            "CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(8), created "
            "TIMESTAMP(6) NULL DEFAULT NULL ON UPDATE CURRENT_TIMESTAMP(6))",
            ["k"],
            {"created": "keep"},
            "column created of table t is a keep column (mysql.merge) but has ON "
            "UPDATE",
        ),
        (
            "CREATE TABLE t (k BIGINT NOT NULL, created TIMESTAMP(6) NOT NULL DEFAULT "
            "'2020-01-01' ON UPDATE CURRENT_TIMESTAMP(6), label VARCHAR(8), "
            "PRIMARY KEY (k, created))",
            ["k", "created"],
            {},
            "column created of table t is a key column but has ON UPDATE",
        ),
    ],
)
def test_a_key_or_keep_column_with_on_update_is_refused(
    db, fresh, config, ddl, key, merge, said
):
    fresh(ddl)
    schema = pa.schema([("k", I64), ("created", TS), ("label", pa.string())])
    assert said in refused_at_start(config("t", key, merge=merge), schema)
    assert nothing_written(db)


def test_on_update_added_while_the_sink_runs_changes_no_key_or_keep_column(
    db, fresh, config
):
    """Every key and keep column is assigned to itself, which MySQL's ON UPDATE
    leaves alone: the defence behind the refusal at start."""
    fresh(
        "CREATE TABLE t (k BIGINT NOT NULL, at DATETIME(6) NOT NULL, "
        "first DATETIME(6), label VARCHAR(8), PRIMARY KEY (k, at))"
    )
    cfg = config("t", ["k", "at"], merge={"first": "keep"})
    schema = pa.schema([("k", I64), ("at", TS), ("first", TS), ("label", I64)])
    then = pa.scalar(1_600_000_000_000_000, TS).as_py()
    row = {"k": 1, "at": then, "first": then, "label": 1}
    sink = SinkInstance(cfg)
    sink.start()
    stage_rows(cfg, 0, [row], schema)
    sink.committer.apply(0)
    for column in ("at", "first"):
        db.execute(
            f"ALTER TABLE t MODIFY {column} TIMESTAMP(6) NOT NULL "
            "DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)"
        )
    stage_rows(cfg, 1, [{**row, "first": None, "label": 2}], schema)
    sink.committer.apply(1)
    sink.close()
    stored = db.rows("SELECT k, at, first, label FROM t")
    assert stored == [(1, then.replace(tzinfo=None), then.replace(tzinfo=None), "2")]


def test_an_updated_at_column_the_stream_does_not_write_keeps_refreshing(
    db, fresh, config
):
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(8), updated_at "
        "TIMESTAMP(6) NOT NULL DEFAULT '2001-01-01' ON UPDATE CURRENT_TIMESTAMP(6))"
    )
    schema = pa.schema([("k", I64), ("label", pa.string())])
    apply(
        config("t", ["k"]), schema, [{"k": 1, "label": "a"}], [{"k": 1, "label": "b"}]
    )
    [(label, updated)] = db.rows("SELECT label, updated_at FROM t")
    assert label == "b" and updated.year > 2001


@pytest.fixture
def server_at(db, zone: str) -> Iterator[None]:
    """The server's time zone is the test's ``zone`` meanwhile (a named one loaded
    from the system's zoneinfo first)."""
    if "/" in zone and not db.rows(
        "SELECT 1 FROM mysql.time_zone_name WHERE Name = %s", (zone,)
    ):
        sql = subprocess.run(
            ["mariadb-tzinfo-to-sql", f"/usr/share/zoneinfo/{zone}", zone],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(
            ["mariadb", "--no-defaults", "-S", str(db.server.socket), "-uroot"]
            + ["mysql"],
            input=sql,
            capture_output=True,
            check=True,
        )
    with server_default(db, "time_zone", zone):
        yield


def server_now(db) -> datetime:
    """NOW() of a new session: the server's wall clock, in its own zone."""
    return db.rows("SELECT NOW(6)")[0][0]


# Berlin's clocks went back at 01:00 UTC that day: both are 02:30 there.
FALL_BACK = [datetime(2026, 10, 25, h, 30, tzinfo=timezone.utc) for h in (0, 1)]


@pytest.mark.parametrize("zone", ["+02:00", "Europe/Berlin"])
@pytest.mark.parametrize("path", ["row by row", "multi-row", "local_infile"])
def test_datetime_columns_mysql_fills_take_the_servers_local_time(
    db, fresh, config, calls, monkeypatch, server_at, path
):
    """DATETIME DEFAULT / ON UPDATE CURRENT_TIMESTAMP columns the stream does not
    write get the server's wall clock, as every other writer's rows do, although
    the sink's sessions run in UTC; ON UPDATE only where the upsert changes the
    row (a label differing only in case is a change); the TIMESTAMP values the
    stream writes keep their instants, in the hour a DST zone has twice too."""
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(8), n BIGINT, "
        "u INT UNSIGNED, at TIMESTAMP(6) NULL, "
        "made DATETIME DEFAULT CURRENT_TIMESTAMP, "
        "made3 DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), "
        "touched DATETIME(6) NULL ON UPDATE CURRENT_TIMESTAMP(6))"
    )
    old = datetime(2001, 1, 1)
    db.execute("INSERT INTO t VALUES (5, 'e', 1, 1, NULL, %s, %s, %s)", (old,) * 3)
    if path == "row by row":
        monkeypatch.setattr(MultiRowUpsert, "for_schema", classmethod(lambda *a: None))
    cfg = config(
        "t", ["k"], merge={"n": "add", "u": "add"}, local_infile=path == "local_infile"
    )
    schema = pa.schema(
        [("k", I64), ("label", pa.string()), ("n", I64), ("u", I64), ("at", TS)]
    )
    began = server_now(db)
    apply(
        cfg,
        schema,
        [
            {"k": 1, "label": "a", "n": 1, "u": 5, "at": FALL_BACK[0]},
            {"k": 2, "label": "b", "n": 1, "u": 5, "at": FALL_BACK[1]},
            {"k": 3, "label": "c", "n": 1, "u": 5, "at": None},
        ],
        [
            {"k": 1, "label": "A", "n": 0, "u": 0, "at": FALL_BACK[0]},  # changed
            {"k": 2, "label": "b", "n": 0, "u": 0, "at": FALL_BACK[1]},  # unchanged
            {"k": 4, "label": "d", "n": 1, "u": 1, "at": None},
            {"k": 5, "label": "e", "n": None, "u": None, "at": None},  # unchanged
        ],
        [{"k": 3, "label": "c", "n": 0, "u": -1, "at": None}],  # by key: changed
    )
    ended = server_now(db)
    fast = {"row by row": 0, "multi-row": 7, "local_infile": 7}[path]
    assert calls == {
        "multi_row": fast if path == "multi-row" else 0,
        "local_infile": fast if path == "local_infile" else 0,
    }
    got = {
        k: rest
        for k, *rest in db.rows(
            "SELECT k, made, made3, touched, UNIX_TIMESTAMP(at) FROM t ORDER BY k"
        )
    }

    def now(value: datetime | None, digits: int) -> bool:
        step = 10 ** (6 - digits)  # the column's precision: truncated
        low = began.replace(microsecond=began.microsecond // step * step)
        return value is not None and low <= value <= ended

    assert all(now(got[k][0], 0) and now(got[k][1], 3) for k in (1, 2, 3, 4)), got
    assert [got[k][2] for k in (2, 4, 5)] == [None, None, old], got
    assert now(got[1][2], 6) and now(got[3][2], 6), got
    assert got[5][:2] == [old, old]
    assert [got[k][3] for k in (1, 2)] == [f.timestamp() for f in FALL_BACK]


@pytest.mark.parametrize("local_infile", [False, True])
def test_an_auto_increment_key_of_zero_is_the_key_zero(
    db, fresh, config, calls, local_infile
):
    fresh("CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY, n BIGINT)")
    db.execute("INSERT INTO t VALUES (7, 1)")
    cfg = config("t", ["id"], merge={"n": "add"}, local_infile=local_infile)
    schema = pa.schema([("id", I64), ("n", I64)])
    apply(cfg, schema, [{"id": 0, "n": 2}], [{"id": 0, "n": 3}], [{"id": None, "n": 5}])
    assert db.rows("SELECT id, n FROM t ORDER BY id") == [(0, 5), (7, 1)]
    assert calls == fast_rows(local_infile, 2), "the key 0 inserted, then updated"
    assert db.rows("SELECT row_count, quarantined FROM wal_sink_ack") == [
        (1, 0),
        (1, 0),
        (0, 1),
    ], "a NULL key is set aside, not given the next value"


@pytest.mark.parametrize("local_infile", [False, True])
def test_a_null_for_a_timestamp_not_null_is_set_aside_never_now(
    db, fresh, config, calls, local_infile
):
    """MariaDB stores NULL into a TIMESTAMP NOT NULL as NOW() whatever
    explicit_defaults_for_timestamp says (OFF here, older servers' default): a
    NULL version would win every later comparison. Such a row is set aside."""
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(8), "
        "v TIMESTAMP(6) NOT NULL DEFAULT '2000-01-01')"
    )
    db.execute("SET GLOBAL explicit_defaults_for_timestamp = OFF")
    try:
        schema = pa.schema([("k", I64), ("label", pa.string()), ("v", TS)])
        at = [pa.scalar(t * 1_000_000, TS).as_py() for t in (1e9, 1.1e9, 1.2e9)]
        apply(
            config("t", ["k"], version_column="v", local_infile=local_infile),
            schema,
            [{"k": 1, "label": "v1", "v": at[0]}],
            [{"k": 1, "label": "v2", "v": None}],
            [{"k": 1, "label": "v3", "v": at[2]}],
        )
    finally:
        db.execute("SET GLOBAL explicit_defaults_for_timestamp = ON")
    assert db.rows("SELECT label, v FROM t") == [("v3", at[2].replace(tzinfo=None))]
    assert [r[0] for r in db.rows("SELECT quarantined FROM wal_sink_ack")] == [0, 1, 0]
    assert calls == fast_rows(local_infile, 2), "v1 and v3"


def test_a_stale_upsert_with_a_null_timestamp_is_skipped_not_set_aside(
    db, fresh, config
):
    """With CDC and a version column, staleness is judged before values (stale
    history is not bad data): an upsert a tombstone makes stale is skipped even
    when its NULL for a TIMESTAMP NOT NULL column could not be stored. Set aside,
    it would stay open for good, and keep its key's tombstone from purge."""
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(8), seq BIGINT, "
        "v TIMESTAMP(6) NOT NULL DEFAULT '2000-01-01')"
    )
    cdc = {"op_column": "op", "order_by": "seq"}
    schema = pa.schema(
        [
            ("k", I64),
            ("label", pa.string()),
            ("seq", I64),
            ("v", TS),
            ("op", pa.string()),
        ]
    )
    at = pa.scalar(int(1.1e15), TS).as_py()
    apply(
        config("t", ["k"], version_column="v", cdc=cdc),
        schema,
        [
            {"k": 1, "label": "new", "seq": 0, "v": None, "op": "I"},
            {"k": 1, "label": None, "seq": 1, "v": at, "op": "D"},
            {"k": 1, "label": "stale", "seq": 2, "v": None, "op": "I"},
        ],
        [{"k": 1, "label": "stale", "seq": 0, "v": None, "op": "U"}],
    )
    assert db.rows("SELECT * FROM t") == []
    counts = "SELECT deleted_count, quarantined, skipped_count FROM wal_sink_ack"
    assert db.rows(counts + " ORDER BY batch_id") == [(1, 1, 1), (0, 0, 1)]


# -- columns and triggers no statement can repair ------------------------------


@pytest.mark.parametrize(
    "ddl, said",
    [
        (
            "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT, "
            "g BIGINT AS (n * 2) STORED)",
            "column g of table t is generated",
        ),
        (
            "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT, tenant INT NOT NULL)",
            "column tenant of table t is NOT NULL without a default",
        ),
        (
            "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT, g BIGINT)",
            "trigger t_before (BEFORE UPDATE) on table t sets NEW.n",
        ),
    ],
)
def test_what_no_statement_can_repair_is_refused_in_one_line(
    db, fresh, config, ddl, said
):
    fresh(ddl)
    if "g BIGINT)" in ddl:
        db.execute(
            "CREATE TRIGGER t_before BEFORE UPDATE ON t FOR EACH ROW "
            "BEGIN IF NEW.n > 9 THEN SET NEW.g = 1, NEW.n = 9; END IF; END"
        )
    columns = [("k", I64), ("n", I64)] + ([("g", I64)] if "STORED" in ddl else [])
    assert said in refused_at_start(config("t", ["k"]), pa.schema(columns))
    assert nothing_written(db)


def clamping_trigger(db, mode: str) -> None:
    """A BEFORE INSERT trigger on t passing NEW.n to procedure clamp, whose second
    parameter is ``mode`` (the first argument holds a comma of its own); clamp
    notes the value it got in table seen, then sets its parameter (only OUT and
    INOUT hand that back to NEW.n)."""
    db.execute("DROP PROCEDURE IF EXISTS clamp")
    db.execute(
        f"CREATE PROCEDURE clamp(IN lo BIGINT, {mode} x BIGINT) "
        "BEGIN INSERT INTO seen VALUES (x); SET x = lo; END"
    )
    db.execute(
        "CREATE TRIGGER t_clamp BEFORE INSERT ON t FOR EACH ROW "
        "CALL clamp(LEAST(0, 1), NEW.`n`)"
    )


@pytest.mark.parametrize("mode", ["IN", "OUT", "INOUT"])
def test_a_trigger_passing_a_written_column_to_a_procedure_is_refused_unless_in(
    db, fresh, config, mode
):
    """``CALL clamp(…, NEW.n)`` sets NEW.n where that parameter is OUT or INOUT:
    the stream's value was replaced, and the start went on. An IN parameter only
    reads it."""
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT)",
        "CREATE TABLE seen (n BIGINT)",
    )
    clamping_trigger(db, mode)
    cfg = config("t", ["k"])
    schema = pa.schema([("k", I64), ("n", I64)])
    if mode == "IN":
        apply(cfg, schema, [{"k": 1, "n": 5}])
        assert db.rows("SELECT n FROM t") == db.rows("SELECT n FROM seen") == [(5,)]
        return
    assert refused_at_start(cfg, schema) == (
        "trigger t_clamp (BEFORE INSERT) on table t sets NEW.n, a column the stream "
        f"writes, through procedure clamp (its {mode} parameter 2): rows would end "
        "as the trigger says, not as mysql.merge does. Leave n out of the stream, "
        "or drop the trigger"
    )
    assert nothing_written(db)


def test_a_trigger_calling_a_procedure_this_user_cannot_see_is_refused_saying_so(
    mariadb, db, fresh, config
):
    """The server shows a user only the routines it holds a privilege on: a
    parameter this user cannot see may be OUT. Once it may see it, an IN
    parameter lets the sink start."""
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT)",
        "CREATE TABLE seen (n BIGINT)",
    )
    clamping_trigger(db, "IN")
    with mariadb.root() as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE USER IF NOT EXISTS 'unseen'@'127.0.0.1' "
            f"IDENTIFIED BY '{SINK_PASSWORD}'"
        )
        cur.execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, TRIGGER "
            f"ON {db.name}.* TO 'unseen'@'127.0.0.1'"
        )
    cfg = config("t", ["k"], url=db.url.replace("sink@", "unseen@"))
    schema = pa.schema([("k", I64), ("n", I64)])
    assert refused_at_start(cfg, schema) == (
        "trigger t_clamp (BEFORE INSERT) on table t may set NEW.n, a column the "
        "stream writes, through procedure clamp, whose parameters this user cannot "
        "see: rows would end as the trigger says, not as mysql.merge does. Leave n "
        "out of the stream, or drop the trigger, or let this user see the "
        "procedure's parameters (GRANT EXECUTE ON PROCEDURE clamp)"
    )
    db.execute(f"GRANT EXECUTE ON PROCEDURE {db.name}.clamp TO 'unseen'@'127.0.0.1'")
    apply(cfg, schema, [{"k": 1, "n": 5}])
    assert db.rows("SELECT n FROM t") == [(5,)]


def test_an_audit_trigger_works_and_one_that_refuses_a_row_sets_it_aside(
    db, fresh, config
):
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT)",
        "CREATE TABLE audit (k BIGINT, n BIGINT)",
    )
    db.execute(
        "CREATE TRIGGER t_audit AFTER INSERT ON t FOR EACH ROW "
        "INSERT INTO audit VALUES (NEW.k, NEW.n)"
    )
    db.execute(
        "CREATE TRIGGER t_check BEFORE INSERT ON t FOR EACH ROW BEGIN "
        "IF NEW.n < 0 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'no'; END IF; "
        "END"
    )
    schema = pa.schema([("k", I64), ("n", I64)])
    apply(config("t", ["k"]), schema, [{"k": 1, "n": 1}, {"k": 2, "n": -1}])
    assert db.rows("SELECT k, n FROM t") == [(1, 1)]
    assert db.rows("SELECT k, n FROM audit") == [(1, 1)]
    assert db.rows("SELECT row_count, quarantined FROM wal_sink_ack") == [(1, 1)]


def test_triggers_this_user_cannot_see_are_said_at_start(
    mariadb, db, fresh, config, caplog
):
    """information_schema hides triggers from a user without TRIGGER: the start
    says so instead of assuming there are none."""
    fresh("CREATE TABLE t (k BIGINT PRIMARY KEY, n BIGINT)")
    with mariadb.root() as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE USER IF NOT EXISTS 'blind'@'127.0.0.1' "
            f"IDENTIFIED BY '{SINK_PASSWORD}'"
        )
        cur.execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX "
            f"ON {db.name}.* TO 'blind'@'127.0.0.1'"
        )
    sink = SinkInstance(config("t", ["k"], url=db.url.replace("sink@", "blind@")))
    try:
        sink.start()
    finally:
        sink.close()
    assert "holds no TRIGGER privilege on table t" in caplog.text


# -- foreign keys -----------------------------------------------------------------


def test_a_row_whose_parent_is_missing_is_set_aside_and_retried_once_it_exists(
    db, fresh, config
):
    fresh(
        "CREATE TABLE parents (id BIGINT PRIMARY KEY) ENGINE=InnoDB",
        "CREATE TABLE t (k BIGINT PRIMARY KEY, p BIGINT, label VARCHAR(8), "
        "FOREIGN KEY (p) REFERENCES parents (id)) ENGINE=InnoDB",
    )
    db.execute("INSERT INTO parents VALUES (1)")
    cfg = config("t", ["k"])
    schema = pa.schema([("k", I64), ("p", I64), ("label", pa.string())])
    apply(
        cfg,
        schema,
        [
            {"k": 1, "p": 1, "label": "a"},
            {"k": 2, "p": 7, "label": "b"},  # no parent 7 yet
            {"k": 3, "p": None, "label": "c"},
        ],
    )
    assert db.rows("SELECT k, p, label FROM t ORDER BY k") == [
        (1, 1, "a"),
        (3, None, "c"),
    ]
    sink = SinkInstance(cfg)
    sink.start()
    try:
        (entry,) = list_entries(sink)
        assert entry.is_open and entry.reason.startswith("MySQL error 1452")
        assert json.loads(entry.entry.record) == {"k": 2, "p": 7, "label": "b"}
        (again,) = run_retry(sink, plan_retry(sink))
        assert again.applied == 0 and "1452" in again.failed[entry.entry.entry_id]
        db.execute("INSERT INTO parents VALUES (7)")
        (retried,) = run_retry(sink, plan_retry(sink))
        assert (retried.applied, retried.failed) == (1, {})
        assert [e.state for e in list_entries(sink)] == [RETRIED]
    finally:
        sink.close()
    assert db.rows("SELECT k, p, label FROM t ORDER BY k") == [
        (1, 1, "a"),
        (2, 7, "b"),
        (3, None, "c"),
    ]


def test_a_delete_of_a_parent_row_cascades_or_sets_null_as_the_keys_say(
    db, fresh, config
):
    """The target is the parent of two tables, one ON DELETE CASCADE, one ON DELETE
    SET NULL: a CDC delete takes the first's rows with it and empties the second's
    reference, in the batch's transaction, and leaves its tombstone."""
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(8), v BIGINT) "
        "ENGINE=InnoDB",
        "CREATE TABLE items (id INT PRIMARY KEY, k BIGINT, FOREIGN KEY (k) "
        "REFERENCES t (k) ON DELETE CASCADE) ENGINE=InnoDB",
        "CREATE TABLE notes (id INT PRIMARY KEY, k BIGINT, FOREIGN KEY (k) "
        "REFERENCES t (k) ON DELETE SET NULL) ENGINE=InnoDB",
    )
    cfg = config(
        "t", ["k"], version_column="v", cdc={"op_column": "op", "order_by": "v"}
    )
    schema = pa.schema(
        [("op", pa.string()), ("k", I64), ("label", pa.string()), ("v", I64)]
    )
    apply(
        cfg,
        schema,
        [
            {"op": "I", "k": 1, "label": "a", "v": 1},
            {"op": "I", "k": 2, "label": "b", "v": 1},
        ],
    )
    db.execute("INSERT INTO items VALUES (10, 1), (20, 2)")
    db.execute("INSERT INTO notes VALUES (10, 1), (20, 2)")
    apply(cfg, schema, [{"op": "D", "k": 1, "label": None, "v": 5}], first=1)
    assert db.rows("SELECT k, label FROM t") == [(2, "b")]
    assert db.rows("SELECT id, k FROM items ORDER BY id") == [(20, 2)]
    assert db.rows("SELECT id, k FROM notes ORDER BY id") == [(10, None), (20, 2)]
    assert db.rows("SELECT k, _wal_version FROM t_tombstones") == [(1, 5)]
    assert db.rows(
        "SELECT deleted_count, quarantined FROM wal_sink_ack ORDER BY batch_id"
    ) == [(0, 0), (1, 0)]


# -- add columns ----------------------------------------------------------------


@pytest.mark.parametrize("local_infile", [False, True])
def test_add_into_unsigned_takes_a_negative_amount_whose_sum_fits(
    db, fresh, config, calls, local_infile
):
    fresh("CREATE TABLE t (k BIGINT PRIMARY KEY, n INT UNSIGNED, m BIGINT)")
    cfg = config("t", ["k"], merge={"n": "add", "m": "add"}, local_infile=local_infile)
    schema = pa.schema([("k", I64), ("n", I64), ("m", I64)])
    apply(
        cfg,
        schema,
        [{"k": 1, "n": 10, "m": None}, {"k": 2, "n": 1, "m": None}],
        [
            {"k": 1, "n": -3, "m": None},  # 7: applied
            {"k": 2, "n": -2, "m": 4},  # -1: out of range, set aside
            {"k": 3, "n": -1, "m": 1},  # a new row of -1: set aside
            {"k": 1, "n": 1, "m": None},  # order kept: 8
        ],
    )
    assert db.rows("SELECT k, n, m FROM t ORDER BY k") == [
        (1, 8, None),
        (2, 1, None),
    ], "NULL + NULL stays NULL; a NULL total takes the amount"
    assert db.rows("SELECT row_count, quarantined FROM wal_sink_ack") == [
        (2, 0),
        (2, 2),
    ]
    assert calls == fast_rows(local_infile, 2), "negative amounts go by key"


def test_a_negative_unsigned_amount_carries_no_value_an_upsert_would_refuse(
    db, fresh, config
):
    """A negative amount for an UNSIGNED add column goes by key, an UPDATE that
    assigns an older record's guarded columns their stored values: MySQL never saw
    the record's own, and a NULL for a NOT NULL column or a text too long went
    through with the amount. Such a record is set aside whole, as the upsert of a
    positive amount is (found by the reference model's fuzzer)."""
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, n INT UNSIGNED, label VARCHAR(4), "
        "req INT NOT NULL, v BIGINT)"
    )
    cfg = config("t", ["k"], merge={"n": "add"}, version_column="v")
    schema = pa.schema(
        [("k", I64), ("n", I64), ("label", pa.string()), ("req", I64), ("v", I64)]
    )
    apply(
        cfg,
        schema,
        [{"k": 1, "n": 5, "label": "a", "req": 1, "v": 7}],
        [
            {"k": 1, "n": -1, "label": "b", "req": None, "v": 1},  # NULL: NOT NULL
            {"k": 1, "n": -1, "label": "too long", "req": 1, "v": 1},  # too long
            {"k": 1, "n": 1, "label": "c", "req": None, "v": 1},  # as the upsert
            {"k": 1, "n": -2, "label": "d", "req": 2, "v": 1},  # older: adds only
        ],
    )
    assert db.rows("SELECT k, n, label, req, v FROM t") == [(1, 3, "a", 1, 7)]
    assert db.rows(
        "SELECT row_count, quarantined FROM wal_sink_ack ORDER BY batch_id"
    ) == [(1, 0), (1, 3)]


def test_add_with_nulls_adds_nothing_and_a_null_total_takes_the_amount(
    db, fresh, config
):
    fresh("CREATE TABLE t (k BIGINT PRIMARY KEY, n DECIMAL(10,2))")
    schema = pa.schema([("k", I64), ("n", pa.decimal128(10, 2))])
    cfg = config("t", ["k"], merge={"n": "add"})
    apply(
        cfg,
        schema,
        [{"k": 1, "n": None}, {"k": 2, "n": Decimal(1)}],
        [{"k": 1, "n": None}, {"k": 2, "n": None}],
    )
    assert db.rows("SELECT k, n FROM t ORDER BY k") == [(1, None), (2, Decimal(1))]
    apply(cfg, schema, [{"k": 1, "n": Decimal("2.5")}], first=2)
    assert db.rows("SELECT n FROM t WHERE k = 1") == [(Decimal("2.50"),)]


def test_a_stream_column_missing_from_the_target_stays_a_terminal_error(fresh, config):
    fresh("CREATE TABLE t (k BIGINT PRIMARY KEY)")
    with pytest.raises(TerminalError, match="colour.*do not exist in the target"):
        apply(config("t", ["k"]), pa.schema([("k", I64), ("colour", I64)]), [{"k": 1}])


# -- the server's settings --------------------------------------------------------

HOSTILE = [
    ("sql_mode", ""),  # not strict: a text too long would be cut, 0 the next id
    ("sql_mode", "PAD_CHAR_TO_FULL_LENGTH,ANSI_QUOTES,NO_BACKSLASH_ESCAPES"),
    ("time_zone", "+05:00"),
    ("unique_checks", 0),
    ("foreign_key_checks", 0),
    ("sql_auto_is_null", 1),
    ("completion_type", "CHAIN"),
    ("completion_type", "RELEASE"),  # a COMMIT would end the connection
    ("autocommit", 0),
    ("tx_isolation", "READ-UNCOMMITTED"),
    ("tx_isolation", "SERIALIZABLE"),
    ("sql_select_limit", 1),
    ("sql_safe_updates", 1),
]


@pytest.mark.parametrize("variable, value", HOSTILE)
def test_a_hostile_server_default_changes_no_write_of_the_sink(
    db, fresh, config, calls, variable, value
):
    """Every session of the sink pins what changes a write (mysql/engine.py):
    with any of these as the server's default for new sessions, a text too long
    is still set aside (not cut), a key 0 into AUTO_INCREMENT is still 0, a row
    without its parent is still refused, quotes and backslashes land as sent,
    instants and UTC wall times are unchanged, and each batch commits with its ack
    row, its add applied once."""
    fresh(
        "CREATE TABLE parents (id BIGINT PRIMARY KEY)",
        "CREATE TABLE t (id BIGINT AUTO_INCREMENT PRIMARY KEY, p BIGINT, "
        "label VARCHAR(4), c CHAR(4), n DECIMAL(12,2), at TIMESTAMP(6) NULL, "
        "dt DATETIME(6), FOREIGN KEY (p) REFERENCES parents (id))",
    )
    db.execute("INSERT INTO parents VALUES (1)")
    schema = pa.schema(
        [
            ("id", I64),
            ("p", I64),
            ("label", pa.string()),
            ("c", pa.string()),
            ("n", pa.decimal128(12, 2)),
            ("at", TS),
            ("dt", TS),
        ]
    )
    when = FALL_BACK[0]

    def row(id: int, p: int = 1, label: str = "a", n: str = "1.50") -> dict:
        return {"id": id, "p": p, "label": label, "c": "x", "n": Decimal(n)} | {
            "at": when,
            "dt": when,
        }

    with server_default(db, variable, value):
        apply(
            config("t", ["id"], merge={"n": "add"}),
            schema,
            [row(0, label="a\\'\""), row(1, label="toolong"), row(2, p=99)],
            [row(0, label='"b', n="2.00"), row(3)],
        )
    assert db.rows(
        "SELECT id, p, label, c, n, UNIX_TIMESTAMP(at), CAST(dt AS CHAR) FROM t "
        "ORDER BY id"
    ) == [
        (i, 1, label, "x", Decimal(n), Decimal(int(when.timestamp())), wall)
        for i, label, n, wall in [
            (0, '"b', "3.50", "2026-10-25 00:30:00.000000"),
            (3, "a", "1.50", "2026-10-25 00:30:00.000000"),
        ]
    ]
    assert db.rows(
        "SELECT batch_id, row_count, quarantined FROM wal_sink_ack ORDER BY batch_id"
    ) == [(0, 1, 2), (1, 2, 0)]
    assert calls["multi_row"] == 2, "the second batch took the rendered path"


@pytest.mark.parametrize("variable, value", HOSTILE)
def test_a_hostile_server_default_changes_no_versioned_delete_or_skip(
    db, fresh, config, variable, value
):
    """The reads the sink decides by (tombstones of a chunk's keys, with CDC and
    a version column) see every row whatever the server's defaults: each stale
    upsert is skipped, every delete leaves its tombstone."""
    fresh(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, label VARCHAR(8), v BIGINT, seq BIGINT)"
    )
    schema = pa.schema(
        [
            ("k", I64),
            ("label", pa.string()),
            ("v", I64),
            ("seq", I64),
            ("op", pa.string()),
        ]
    )

    def op(k: int, v: int, what: str = "U") -> dict:
        return {"k": k, "label": f"{what}{v}", "v": v, "seq": v, "op": what}

    with server_default(db, variable, value):
        apply(
            config(
                "t", ["k"], version_column="v", cdc=CDC_SEQ | {"delete_values": ["D"]}
            ),
            schema,
            [op(1, 1), op(2, 1), op(3, 1), op(1, 5, "D"), op(2, 5, "D")],
            [op(1, 3), op(2, 3), op(3, 2), op(4, 1)],
        )
    assert db.rows("SELECT k, label, v FROM t ORDER BY k") == [
        (3, "U2", 2),
        (4, "U1", 1),
    ]
    assert db.rows(
        "SELECT deleted_count, skipped_count FROM wal_sink_ack ORDER BY batch_id"
    ) == [(2, 0), (0, 2)]


def test_every_session_of_the_sink_pins_its_settings_whatever_the_servers_defaults(
    db, config
):
    """What the tests above show by their writes, asked of a session directly: the
    server's defaults for new sessions (each variable's last hostile value at once)
    reach no session of the sink's engine."""
    with contextlib.ExitStack() as stack:
        for variable, value in dict(HOSTILE).items():
            stack.enter_context(server_default(db, variable, value))
        engine = make_engine(config("t", ["k"]).mysql)
        try:
            with engine.connect() as conn:
                got = conn.exec_driver_sql(
                    "SELECT @@sql_mode, @@time_zone, @@unique_checks, "
                    "@@foreign_key_checks, @@sql_auto_is_null, @@completion_type, "
                    "@@tx_isolation, @@sql_select_limit, @@autocommit"
                ).one()
        finally:
            engine.dispose()
    assert set(got[0].split(",")) == set(SESSION_SQL_MODE.split(","))
    assert got[1:] == ("+00:00", 1, 1, 0, "NO_CHAIN", "REPEATABLE-READ", SELECT_ANY, 0)
