"""History commit: rows/s of the sink's committer applying one staged batch to a
history table (``mysql.stored_as_scd_type = 2``) vs. the server doing the same with
hand-written SQL in one transaction. Goal >= 0.8.

Usage: python -m bench.history_commit [ROWS]   (default 100,000)
The history holds ROWS keys, each with one open record; the batch updates every
key once (a new label, amount and ``seq``), so each key's open record ends and one
opens. Every round starts from fresh tables: the sink's history and events table
are filled by applying a first staged batch through the sink itself (not timed),
the server's history by copying the same records. Then, alternating:

- the sink: ``Committer.apply`` of the second staged batch (its rows read back from
  the WAL, their events added, each key's events read back and its records
  written, the ack row; one transaction);
- the server: over a connection opened before, in one transaction, the batch's rows
  sent from Python into an empty staging table (multi-row INSERTs, PyMySQL's
  ``executemany``: the sink has to send its rows too, so the load counts), then
  ``UPDATE … JOIN`` ending the open records and ``INSERT … SELECT`` opening the new
  ones. Its UPDATE, INSERT and COMMIT alone (as if the staging table were
  already filled) are timed too and printed beside it, with their own ratio.

The two histories are compared by checksum at the end.
"""

from __future__ import annotations

import sys
import time

import pymysql

from bench.common import Bench, load_line, ratio_line, seconds, spark_session
from devtools.mariadb import SINK_PASSWORD, SINK_USER
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

HISTORY = (
    "(k VARCHAR(24), label VARCHAR(32), amount DECIMAL(14,2), seq BIGINT, "
    "__START_AT BIGINT NOT NULL, __END_AT BIGINT, PRIMARY KEY (k, __START_AT)) "
    "ENGINE=InnoDB"
)
BATCH = (
    "(k VARCHAR(24) PRIMARY KEY, label VARCHAR(32), amount DECIMAL(14,2), "
    "seq BIGINT) ENGINE=InnoDB"
)
LOAD = "INSERT INTO staging (k, label, amount, seq) VALUES (%s, %s, %s, %s)"
CLOSE = (
    "UPDATE server_history h JOIN staging s ON h.k = s.k AND h.__END_AT IS NULL "
    "SET h.__END_AT = s.seq"
)
OPEN = "INSERT INTO server_history SELECT k, label, amount, seq, seq, NULL FROM staging"


def batch(spark, rows: int, number: int):
    """Batch ``number`` (0 or 1): every key once, ``seq`` rising across batches."""
    return spark.range(rows).selectExpr(
        "concat('key-', lpad(cast(id AS string), 8, '0')) AS k",
        f"concat('label-{number}-', id) AS label",
        f"cast((id * {7 + number}) % 100000 / 100 AS decimal(12,2)) AS amount",
        f"id + {number * rows} AS seq",
    )


def main(rows: int = 100_000, repeat: int = 3) -> None:
    print(load_line("start"))
    with Bench("history") as bench:
        spark = spark_session()
        bench.sql(
            f"CREATE TABLE history {HISTORY}",
            f"CREATE TABLE server_history {HISTORY}",
            f"CREATE TABLE first_batch {BATCH}",
            f"CREATE TABLE staging {BATCH}",
        )
        first, second = batch(spark, rows, 0), batch(spark, rows, 1)
        config = bench.config(
            "history", merge={}, version_column="seq", stored_as_scd_type=2
        )
        instance = SinkInstance(config)
        committer = instance.start()
        writer = WalWriter(config.wal_path, "bench")
        stage(first, writer, 0)
        stage(second, writer, 1)
        bench.jdbc_append(first, "first_batch")
        updates = [tuple(r) for r in second.collect()]
        server = pymysql.connect(
            host="127.0.0.1",
            port=bench.mariadb.port,
            user=SINK_USER,
            password=SINK_PASSWORD,
            database="bench",
        )

        def by_sink() -> None:
            result = committer.apply(1)
            assert result.rows == rows, result

        def by_hand() -> None:
            with server.cursor() as cur:
                cur.executemany(LOAD, updates)
                started = time.perf_counter()
                cur.execute(CLOSE)
                cur.execute(OPEN)
                server.commit()
                statements.append(rows / (time.perf_counter() - started))

        sink, by_server, statements = [], [], []
        for _ in range(repeat):
            bench.sql(
                "TRUNCATE history",
                "TRUNCATE history_events",
                "DELETE FROM wal_sink_ack",
            )
            committer.apply(0)
            sink.append(rows / seconds(by_sink))
            bench.sql(
                "TRUNCATE server_history",
                "TRUNCATE staging",
                "INSERT INTO server_history SELECT k, label, amount, seq, seq, NULL "
                "FROM first_batch",
            )
            by_server.append(rows / seconds(by_hand))
        checksums = {
            t: bench.sql(f"CHECKSUM TABLE {t}")[0][1]
            for t in ("history", "server_history")
        }
        assert len(set(checksums.values())) == 1, f"histories differ: {checksums}"
        server.close()
        print(
            f"rows: {rows}; sink {[f'{r:,.0f}' for r in sink]} rows/s; "
            f"server {[f'{r:,.0f}' for r in by_server]} rows/s (load, UPDATE, "
            f"INSERT, COMMIT); its UPDATE, INSERT and COMMIT alone "
            f"{[f'{r:,.0f}' for r in statements]} rows/s"
        )
        print(ratio_line("history commit ratio", sink, by_server, ">= 0.8"))
        print(
            ratio_line(
                "history commit ratio, the staging table already filled",
                sink,
                statements,
                "none",
            )
        )
        instance.close()
        spark.stop()
    print(load_line("end"))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
