"""Commit ratio: rows/s of the sink's committer applying a staged batch (upserts and
ack, one transaction) vs. the server's own set-based upsert of the same rows
(INSERT … SELECT … ON DUPLICATE KEY UPDATE from an identical table). Goal >= 0.9.

Usage: python -m bench.commit_ratio [ROWS] [--second-unique]
Runs alternate (row path, LOAD DATA path, server, …) and the medians are compared.
The row path sends multi-row INSERTs rendered in Arrow (the default); the LOAD
DATA path is ``mysql.local_infile = true``. ``--second-unique`` gives every table a
second unique index (on ``label``, which no two rows share) and the sink
``mysql.unique_conflicts = "quarantine"``: what guarding upserts against reaching
another row costs, beside the index itself (the server's tables have it too).
"""

from __future__ import annotations

import sys

from bench.common import Bench, ratio_line, seconds, spark_session, upsert_rows
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter

TABLE = (
    "(k VARCHAR(24) PRIMARY KEY, amount DECIMAL(14,2), label VARCHAR(32), "
    "seq BIGINT) ENGINE=InnoDB"
)
# The baseline: the server's own set-based upsert, with the sink's merge policy
# (``amount`` added, ``label`` and ``seq`` guarded by ``seq``), in staged order.
SERVER_SQL = (
    "INSERT INTO server_target (k, amount, label, seq) "
    "SELECT k, amount, label, seq FROM source ORDER BY seq "
    "ON DUPLICATE KEY UPDATE amount = COALESCE(server_target.amount + "
    "VALUES(amount), server_target.amount, VALUES(amount)), "
    "label = IF(server_target.seq IS NULL OR "
    "VALUES(seq) >= server_target.seq, VALUES(label), server_target.label), "
    "seq = IF(server_target.seq IS NULL OR VALUES(seq) >= server_target.seq, "
    "VALUES(seq), server_target.seq)"
)


def main(rows: int = 200_000, repeat: int = 5, second_unique: bool = False) -> None:
    table = TABLE.replace(") ENGINE", ", UNIQUE KEY label_u (label)) ENGINE")
    if not second_unique:
        table = TABLE
    with Bench("commit") as bench:
        spark = spark_session()
        bench.sql(
            f"CREATE TABLE target {table}",
            f"CREATE TABLE fast_target {table}",
            f"CREATE TABLE server_target {table}",
            # the same rows, repeated keys included: no key on the source
            f"CREATE TABLE source {TABLE.replace(' PRIMARY KEY', '')}",
        )
        df = upsert_rows(spark, rows)
        config = bench.config(
            "target",
            version_column="seq",
            unique_conflicts="quarantine" if second_unique else "refuse",
        )
        instance = SinkInstance(config)
        committer = instance.start()
        stage(df, WalWriter(config.wal_path, "bench"), 0)
        # A WAL belongs to one sink (I9): the LOAD DATA side stages into its own.
        fast_config = bench.config(
            "fast_target",
            sink_id="bench_fast",
            version_column="seq",
            unique_conflicts="quarantine" if second_unique else "refuse",
            local_infile=True,
        )
        fast_instance = SinkInstance(fast_config)
        fast = fast_instance.start()
        stage(df, WalWriter(fast_config.wal_path, "bench_fast"), 0)
        bench.jdbc_append(df, "source")
        sink, loaded, server = [], [], []
        for _ in range(repeat):
            bench.sql("TRUNCATE target", "DELETE FROM wal_sink_ack")
            sink.append(rows / seconds(lambda: committer.apply(0)))
            bench.sql("TRUNCATE fast_target", "DELETE FROM wal_sink_ack")
            loaded.append(rows / seconds(lambda: fast.apply(0)))
            bench.sql("TRUNCATE server_target")
            server.append(rows / seconds(lambda: bench.sql(SERVER_SQL, "COMMIT")))
        checksums = {
            t: bench.sql(f"CHECKSUM TABLE {t}")[0][1]
            for t in ("target", "fast_target", "server_target")
        }
        assert len(set(checksums.values())) == 1, f"results differ: {checksums}"
        print(
            f"rows: {rows}{'; a second unique index' if second_unique else ''}; "
            f"row path {[f'{r:,.0f}' for r in sink]} rows/s; "
            f"LOAD DATA path {[f'{r:,.0f}' for r in loaded]} rows/s; "
            f"server INSERT…SELECT {[f'{r:,.0f}' for r in server]} rows/s"
        )
        print(ratio_line("commit ratio, row path", sink, server, ">= 0.9"))
        print(ratio_line("commit ratio, LOAD DATA path", loaded, server, ">= 0.9"))
        instance.close()
        fast_instance.close()
        spark.stop()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--second-unique"]
    main(*(int(a) for a in args[:1]), second_unique="--second-unique" in sys.argv)
