"""Catch-up ratio: rows/s of applying a backlog of staged batches after an outage
(``SinkInstance.recover()``: every unacked batch in order, consecutive ones grouped
into transactions up to ``mysql.max_transaction_rows``, each with its ack row) vs.
the commit ratio's baseline, the server's own ``INSERT … SELECT … ON DUPLICATE KEY
UPDATE`` of the same rows from an identical table. Higher is better; no goal set.

Usage: python -m bench.catch_up [BATCHES] [ROWS_PER_BATCH]   (default: 200 1000)
The batches are staged with the real staging code (one Spark write and one delta-rs
commit each) while nothing applies them. Each round starts from an empty target and
no ack rows, takes the lease with a new instance (not timed), then times
``recover()``; the server's upsert alternates with it. Merge policy as in the
commit ratio: ``amount`` added, ``label`` and ``seq`` guarded by ``seq``; keys repeat
across batches.
"""

from __future__ import annotations

import sys

from bench.commit_ratio import SERVER_SQL, TABLE
from bench.common import Bench, ratio_line, seconds, spark_session, upsert_rows
from wal_sink.protocol.recovery import groups
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import stage
from wal_sink.wal.writer import WalWriter


def main(batches: int = 200, per_batch: int = 1000, repeat: int = 5) -> None:
    rows = batches * per_batch
    with Bench("catchup") as bench:
        spark = spark_session()
        bench.sql(
            f"CREATE TABLE target {TABLE}",
            f"CREATE TABLE server_target {TABLE}",
            f"CREATE TABLE source {TABLE.replace(' PRIMARY KEY', '')}",
        )

        config = bench.config("target", version_column="seq")
        SinkInstance(config).start()  # the sink's tables; the lease is taken again
        writer = WalWriter(config.wal_path, "bench")
        for batch_id in range(batches):
            stage(upsert_rows(spark, per_batch, batch_id * per_batch), writer, batch_id)
        bench.jdbc_append(upsert_rows(spark, rows), "source")
        spark.stop()
        transactions = len(
            groups(
                [(b, per_batch) for b in range(batches)],
                config.mysql.max_transaction_rows,
            )
        )
        ours, server = [], []
        for _ in range(repeat):
            bench.sql("TRUNCATE target", "DELETE FROM wal_sink_ack")
            instance = SinkInstance(config)
            instance.start()
            results = []
            ours.append(rows / seconds(lambda: results.extend(instance.recover())))
            instance.close()
            assert [r.batch_id for r in results] == list(range(batches)), results
            assert sum(r.rows for r in results) == rows
            bench.sql("TRUNCATE server_target")
            server.append(rows / seconds(lambda: bench.sql(SERVER_SQL, "COMMIT")))
        checksums = {
            t: bench.sql(f"CHECKSUM TABLE {t}")[0][1]
            for t in ("target", "server_target")
        }
        assert len(set(checksums.values())) == 1, f"results differ: {checksums}"
        print(
            f"backlog: {batches} batches of {per_batch} rows ({rows} rows, "
            f"{transactions} transaction(s)); recover "
            f"{[f'{r:,.0f}' for r in ours]} rows/s; server INSERT…SELECT "
            f"{[f'{r:,.0f}' for r in server]} rows/s"
        )
        print(ratio_line("catch-up ratio", ours, server, "none set"))


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
