"""No row can block its batch forever: rows MySQL rejects for any reason of their
own, text that is not UTF-8, rows larger than max_allowed_packet are set aside with
their reason and the rest of the batch commits; struct, list and map columns are
written as JSON text, and refused at start when their column cannot hold it."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from devtools.spark_job import JobProcess
from tests.helpers import JOB, write_config
from wal_sink import ConfigError
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.quarantine import Quarantine


def fresh(db, *ddl: str) -> None:
    for t in ("cdc_child", "edge", "cdc_parent", "big", "nest", "nest_bad", "notes"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    for t in ("wal_sink_ack", "wal_sink_lease", "wal_sink_outbox"):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    for statement in ddl:
        db.execute(statement)


def apply_batches(spark, config, *frames):
    """Stage each frame as the next batch and apply it; the last batch's result."""
    instance = SinkInstance(config)
    committer = instance.start()
    for batch_id, df in enumerate(frames):
        stage(df, instance.writer, batch_id)
        result = committer.apply(batch_id)
    instance.close()
    return result


def set_aside(config) -> dict[str, str]:
    """Quarantined records' key -> reason."""
    entries = Quarantine(config.quarantine_path, config.sink.id).read(100)
    return {json.loads(e["record"])["k"]: e["reason"] for e in entries}


def test_rows_mysql_rejects_for_their_own_values_are_set_aside(spark, db, make_config):
    fresh(
        db,
        "CREATE TABLE edge (k VARCHAR(8) PRIMARY KEY, colour ENUM('red', 'green'), "
        "total BIGINT, doc JSON) ENGINE=InnoDB",
    )
    config = make_config(table="edge", merge={"total": "add"})
    schema = "k STRING, colour STRING, total BIGINT, doc STRING"
    first = spark.createDataFrame([("big", "red", 2**63 - 1, "{}")], schema)
    second = spark.createDataFrame(
        [
            ("a", "red", 1, '{"x": 1}'),
            ("b", "blue", 1, "{}"),  # 1265: no such ENUM value
            ("big", "red", 1, "{}"),  # 1690: the add passes BIGINT's maximum
            ("c", "green", 1, "{not json"),  # 4025: MariaDB's JSON is a CHECK
            ("d", "green", 2, "[1, 2]"),
        ],
        schema,
    ).coalesce(1)
    result = apply_batches(spark, config, first, second)
    assert (result.rows, result.quarantined) == (2, 3)
    assert db.rows("SELECT k, colour, total FROM edge ORDER BY k") == [
        ("a", "red", 1),
        ("big", "red", 2**63 - 1),
        ("d", "green", 2),
    ]
    reasons = set_aside(config)
    assert reasons["b"] == (
        "MySQL error 1265: (1265, \"Data truncated for column 'colour' at row 1\")"
    )
    assert {k: r.split(":")[0] for k, r in reasons.items()} == {
        "b": "MySQL error 1265",
        "big": "MySQL error 1690",
        "c": "MySQL error 4025",
    }


def test_a_cdc_delete_of_a_referenced_parent_is_set_aside(spark, db, make_config):
    fresh(
        db,
        "CREATE TABLE cdc_parent (k VARCHAR(8) PRIMARY KEY, seq BIGINT) ENGINE=InnoDB",
        "CREATE TABLE cdc_child (id INT PRIMARY KEY, p VARCHAR(8), FOREIGN KEY (p) "
        "REFERENCES cdc_parent (k)) ENGINE=InnoDB",
    )
    db.execute("INSERT INTO cdc_parent VALUES ('held', 1), ('free', 1)")
    db.execute("INSERT INTO cdc_child VALUES (1, 'held')")
    config = make_config(table="cdc_parent", cdc={"op_column": "op", "order_by": "seq"})
    df = spark.createDataFrame(
        [("U", "new", 2), ("D", "held", 3), ("D", "free", 4)],
        "op STRING, k STRING, seq BIGINT",
    )
    result = apply_batches(spark, config, df)
    assert (result.rows, result.deleted, result.quarantined) == (1, 1, 1)
    assert db.rows("SELECT k FROM cdc_parent ORDER BY k") == [("held",), ("new",)]
    reason = set_aside(config)["held"]
    assert reason.startswith("MySQL error 1451") and "parent row" in reason


def test_text_that_is_not_utf8_is_set_aside(spark, db, make_config):
    fresh(
        db,
        "CREATE TABLE notes (k VARCHAR(8) PRIMARY KEY, note VARCHAR(32)) ENGINE=InnoDB",
    )
    config = make_config(table="notes")
    df = spark.createDataFrame(
        [("ok", bytearray("fine ü".encode())), ("bad", bytearray(b"\xff\xfex"))],
        "k STRING, raw BINARY",
    ).selectExpr("k", "CAST(raw AS STRING) AS note")  # Spark keeps the bytes
    result = apply_batches(spark, config, df)
    assert (result.rows, result.quarantined) == (1, 1)
    assert db.rows("SELECT k, note FROM notes") == [("ok", "fine ü")]
    entries = Quarantine(config.quarantine_path, "s1").read(10)
    assert json.loads(entries[0]["record"]) == {"k": "bad", "note": "fffe78"}
    assert entries[0]["reason"] == (
        "text that is not UTF-8 in column(s) note (its bytes are shown in hex); "
        "MySQL's utf8mb4 cannot store it"
    )


@pytest.fixture
def small_packets(mariadb):
    """max_allowed_packet at 1 MiB for the connections opened meanwhile."""
    with mariadb.root() as root, root.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.max_allowed_packet")
        (before,) = cur.fetchone()
        cur.execute("SET GLOBAL max_allowed_packet = 1048576")
    yield 1048576
    with mariadb.root() as root, root.cursor() as cur:
        cur.execute(f"SET GLOBAL max_allowed_packet = {before}")


def test_a_row_larger_than_max_allowed_packet_is_set_aside_not_retried(
    spark, db, make_config, small_packets
):
    """The server would drop the connection: an outage to the sink, retried for the
    whole budget, every time the batch is applied."""
    fresh(
        db,
        "CREATE TABLE big (k VARCHAR(8) PRIMARY KEY, v LONGTEXT) ENGINE=InnoDB",
    )
    config = make_config(table="big")
    config = replace(config, mysql=replace(config.mysql, outage_budget=10.0))
    rows = [("small", "x"), ("huge", "y" * 2_000_000), ("near", "z" * 1_000_000)]
    df = spark.createDataFrame(rows, "k STRING, v STRING").coalesce(1)
    result = apply_batches(spark, config, df)
    assert (result.rows, result.quarantined) == (2, 1)
    assert db.rows("SELECT k, LENGTH(v) FROM big ORDER BY k") == [
        ("near", 1_000_000),
        ("small", 1),
    ]
    (entry,) = Quarantine(config.quarantine_path, "s1").read(10)
    assert json.loads(entry["record"]) == {"k": "huge", "v": "y" * 1000}
    assert entry["reason"].startswith("the row's statement would take up to ")
    assert "more than the server's max_allowed_packet (1048576)" in entry["reason"]


def test_a_server_whose_packets_cannot_hold_a_statement_is_refused_at_start(
    db, mariadb, make_config
):
    """Under 1 MiB the sink's statements would be dropped with the connection at
    every attempt, whatever the rows: one line at start instead."""
    fresh(db, "CREATE TABLE big (k VARCHAR(8) PRIMARY KEY, v LONGTEXT) ENGINE=InnoDB")
    with mariadb.root() as root, root.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.max_allowed_packet")
        (before,) = cur.fetchone()
        cur.execute("SET GLOBAL max_allowed_packet = 1047552")
    try:
        sink = SinkInstance(make_config(table="big"))
        with pytest.raises(ConfigError) as refused:
            sink.start()
        sink.close()
    finally:
        with mariadb.root() as root, root.cursor() as cur:
            cur.execute(f"SET GLOBAL max_allowed_packet = {before}")
    assert str(refused.value) == (
        "the server's max_allowed_packet is 1047552 bytes, and the sink sends "
        "statements of up to 1024000 bytes: raise it to at least 1048576 (SET GLOBAL "
        "max_allowed_packet = 1048576, and max_allowed_packet in the server's "
        "configuration)"
    )


NESTED = (
    "k STRING, attrs STRUCT<colour: STRING, size: INT, price: DECIMAL(8,2), "
    "at: TIMESTAMP>, tags ARRAY<STRING>, scores MAP<STRING, DOUBLE>"
)


def test_struct_list_and_map_columns_are_written_as_json_text(spark, db, make_config):
    fresh(
        db,
        "CREATE TABLE nest (k VARCHAR(8) PRIMARY KEY, attrs JSON, tags TEXT, "
        "scores VARCHAR(200)) ENGINE=InnoDB",
    )
    config = make_config(table="nest")
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    df = spark.createDataFrame(
        [
            ("a", ("red", 3, Decimal("1.50"), at), ["x", 'q"uote'], {"m": 1.5}),
            ("b", None, [], None),
            ("c", (None, None, None, None), [None], {"inf": float("inf")}),
        ],
        NESTED,
    ).coalesce(1)
    bad = spark.sql(
        "SELECT 'd' AS k, CAST(NULL AS STRUCT<colour: STRING, size: INT, "
        "price: DECIMAL(8,2), at: TIMESTAMP>) AS attrs, "
        "array(CAST(X'FF' AS STRING)) AS tags, CAST(NULL AS MAP<STRING, DOUBLE>) "
        "AS scores"
    )
    result = apply_batches(spark, config, df.unionByName(bad).coalesce(1))
    assert (result.rows, result.quarantined) == (3, 1)
    got = {r[0]: r[1:] for r in db.rows("SELECT * FROM nest")}
    assert got == {
        "a": (
            '{"colour":"red","size":3,"price":1.50,"at":"2026-01-02T03:04:05+00:00"}',
            '["x","q\\"uote"]',
            '{"m":1.5}',
        ),
        "b": (None, "[]", None),
        "c": (
            '{"colour":null,"size":null,"price":null,"at":null}',
            "[null]",
            '{"inf":"Infinity"}',
        ),
    }
    assert db.rows("SELECT JSON_VALUE(attrs, '$.price') FROM nest WHERE k = 'a'") == [
        ("1.50",)
    ]
    assert set_aside(config)["d"].startswith("text that is not UTF-8 in column(s) tags")


def test_a_nested_column_whose_target_is_not_json_or_text_is_refused(
    spark, db, make_config, tmp_path
):
    fresh(
        db,
        "CREATE TABLE nest_bad (k VARCHAR(8) PRIMARY KEY, tags INT) ENGINE=InnoDB",
    )
    config = make_config(table="nest_bad")
    df = spark.createDataFrame([("a", ["x"])], "k STRING, tags ARRAY<STRING>")
    with pytest.raises(ConfigError) as refused:
        apply_batches(spark, config, df)
    assert str(refused.value) == (
        "stream column 'tags' is list<element: string>, which the sink writes as "
        "JSON text, but column 'tags' of table 'nest_bad' is INTEGER; make it a JSON "
        "or text column, or turn the value into a scalar in [transform]"
    )
    assert db.rows("SELECT COUNT(*) FROM wal_sink_ack") == [(0,)]
    # The job refuses before its query starts: one line, exit 2, nothing staged.
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "f.json").write_text('{"k": "a", "tags": ["x"]}\n')
    (tmp_path / "job").mkdir()
    job_config = write_config(
        tmp_path / "job" / "nested.toml",
        db,
        job=JOB,
        source=f"""
[source]
format = "json"
path = "{landing}"
schema = "k STRING, tags ARRAY<STRING>"
""",
        table="nest_bad",
        mysql="",
    )
    job = JobProcess(job_config, tmp_path / "job.log", "--available-now")
    assert job.wait() == 2, job.tail()
    errors = [line for line in job.text().splitlines() if " ERROR " in line]
    assert len(errors) == 1, job.tail()
    assert errors[0].endswith(
        "stream column 'tags' is array<string>, which the sink writes as JSON text, "
        "but column 'tags' of table 'nest_bad' is INTEGER; make it a JSON or text "
        "column, or turn the value into a scalar in [transform]"
    )
    assert not (tmp_path / "job" / "wal").exists()
