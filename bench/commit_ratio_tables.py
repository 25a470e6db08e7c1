"""Commit ratio with several tables: rows/s of the committer applying one staged
batch routed to TABLES target tables (``mysql.route_column``, rows spread evenly, one
transaction with its ack row) vs. the server's own INSERT … SELECT … ON DUPLICATE KEY
UPDATE into the same tables, in one transaction; beside it, in the same alternating
rounds, the single-table ratio over the same total rows (bench.commit_ratio's
case). Goal: the several-table ratio at least the single-table one.

Usage: python -m bench.commit_ratio_tables [ROWS] [TABLES]
"""

from __future__ import annotations

import sys
from typing import Any

from bench.commit_ratio import SERVER_SQL, TABLE
from bench.common import Bench, load_line, ratio_line, seconds, spark_session
from wal_sink.config import config_from_dict
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

MERGE: dict[str, Any] = {
    "key": ["k"],
    "merge": {"amount": "add"},
    "version_column": "seq",
}


def rows_of(spark, count: int, tables: int):
    """bench.commit_ratio's rows, each with the table it goes to (``tbl``)."""
    return spark.range(count).selectExpr(
        f"concat('target_', id % {tables}) AS tbl",
        "concat('key-', id % 50000) AS k",
        "cast(id % 1000 AS decimal(12,2)) AS amount",
        "concat('label-', id) AS label",
        "id AS seq",
    )


def main(rows: int = 200_000, tables: int = 4, repeat: int = 5) -> None:
    names = [f"target_{i}" for i in range(tables)]
    with Bench("commit_tables") as bench:
        print(load_line("start"))
        spark = spark_session()
        bench.sql(
            f"CREATE TABLE single {TABLE}",
            f"CREATE TABLE server_single {TABLE}",
            *(f"CREATE TABLE {n} {TABLE}" for n in names),
            *(f"CREATE TABLE server_{n} {TABLE}" for n in names),
            f"CREATE TABLE source {TABLE.replace(' PRIMARY KEY', '')}",
            "ALTER TABLE source ADD COLUMN tbl VARCHAR(16), ADD INDEX (tbl)",
        )
        df = rows_of(spark, rows, tables)
        routed = config_from_dict(
            {
                "sink": {"id": "routed"},
                "wal": {"path": str(bench.dir / "wal_routed")},
                "mysql": {
                    "url": bench.mariadb.sink_url("bench"),
                    "route_column": "tbl",
                    "tables": {n: MERGE for n in names},
                },
            }
        )
        single = bench.config("single", sink_id="single", version_column="seq")
        several = SinkInstance(routed).start()
        one = SinkInstance(single).start()
        stage(df, WalWriter(routed.wal_path, "routed"), 0)
        stage(df.drop("tbl"), WalWriter(single.wal_path, "single"), 0)
        bench.jdbc_append(df, "source")
        server_one = SERVER_SQL.replace("server_target", "server_single")
        server_each = [
            SERVER_SQL.replace("server_target", f"server_{n}").replace(
                "FROM source", f"FROM source WHERE tbl = '{n}'"
            )
            for n in names
        ]
        ours_one, ours_several, base_one, base_several = [], [], [], []
        for _ in range(repeat):
            bench.sql("TRUNCATE single", "DELETE FROM wal_sink_ack")
            ours_one.append(rows / seconds(lambda: one.apply(0)))
            bench.sql(
                *(f"TRUNCATE {n}" for n in names),
                "DELETE FROM wal_sink_ack",
                "DELETE FROM wal_sink_ack_tables",
            )
            ours_several.append(rows / seconds(lambda: several.apply(0)))
            bench.sql("TRUNCATE server_single")
            base_one.append(rows / seconds(lambda: bench.sql(server_one, "COMMIT")))
            bench.sql(*(f"TRUNCATE server_{n}" for n in names))
            base_several.append(
                rows / seconds(lambda: bench.sql("BEGIN", *server_each, "COMMIT"))
            )
        for n in names:
            ours, theirs = (
                bench.sql(f"CHECKSUM TABLE {t}")[0][1] for t in (n, f"server_{n}")
            )
            assert ours == theirs, f"{n} differs from the server's"
        print(
            f"rows: {rows} over {tables} tables; several {fmt(ours_several)}, "
            f"single {fmt(ours_one)}; server several {fmt(base_several)}, "
            f"single {fmt(base_one)} rows/s"
        )
        print(ratio_line("commit ratio, one table", ours_one, base_one, ">= 0.9"))
        print(
            ratio_line(
                f"commit ratio, {tables} tables",
                ours_several,
                base_several,
                ">= the one-table ratio",
            )
        )
        print(load_line("end"))
        spark.stop()


def fmt(rates: list[float]) -> str:
    return str([f"{r:,.0f}" for r in rates])


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
