"""Operator latency with a long history: ``wal-sink status --json`` and ``wal-sink
recover`` with 100,000 acked batches in the ack table and a WAL of 100 staged
batches, as a user runs them (a new process each time). Goal: each under 1 s
(median). The floor is the same process printing ``--help`` (interpreter and the
CLI's imports only), measured in the same rounds.

Usage: python -m bench.ack_table_latency [ACKS] [STAGED]   (default: 100000 100)
The ack rows go straight into MySQL (batch ids 0 … ACKS-1). The WAL holds the
newest STAGED batches (ids ACKS-STAGED+1 … ACKS), each a small Parquet file
committed by the sink's own delta-rs commit (``WalWriter.commit``, one commit per
batch, as staging does), so the newest batch is staged but not acked. Every
``recover`` applies that batch; its ack row is deleted again before the next round.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import Bench, seconds
from wal_sink.protocol.sink_instance import SinkInstance
from wal_sink.spark.staging import attempt_files
from wal_sink.wal.format import BATCH_COLUMN, SEQ_COLUMN
from wal_sink.wal.writer import WalWriter


def stage_small(writer: WalWriter, batch_id: int, rows: int = 10) -> None:
    """Batch ``batch_id`` staged as staging does it, the Parquet file written by
    pyarrow instead of Spark (no JVM needed for the set-up)."""
    attempt = f"{BATCH_COLUMN}={batch_id}/{uuid.uuid4().hex}"
    directory = Path(writer.location) / attempt
    directory.mkdir(parents=True)
    first = batch_id * rows
    pq.write_table(
        pa.table(
            {
                SEQ_COLUMN: pa.array(range(rows), pa.int64()),
                "k": [f"k{i % 1000}" for i in range(first, first + rows)],
                "amount": [1.0] * rows,
            }
        ),
        directory / "part-00000.parquet",
    )
    files, schema = attempt_files(writer, attempt, batch_id)
    assert writer.commit(batch_id, files, schema)


def main(acks: int = 100_000, staged: int = 100, repeat: int = 7) -> None:
    with Bench("acks") as bench:
        bench.sql(
            "CREATE TABLE t (k VARCHAR(16) PRIMARY KEY, amount DOUBLE) ENGINE=InnoDB"
        )
        config = bench.config("t")
        instance = SinkInstance(config)
        instance.start()
        instance.close()
        bench.sql(
            "INSERT INTO wal_sink_ack (sink_id, batch_id, row_count, deleted_count, "
            "quarantined, epoch, committed_at, apply_id) "
            f"SELECT 'bench', seq, 10, 0, 0, 1, NOW(6), NULL FROM seq_0_to_{acks - 1}"
        )
        writer = WalWriter(config.wal_path, "bench")
        for batch_id in range(acks - staged + 1, acks + 1):
            stage_small(writer, batch_id)
        toml = bench.dir / "bench.toml"
        toml.write_text(
            f'[sink]\nid = "bench"\n[wal]\npath = "{config.wal_path}"\n'
            f'[mysql]\nurl = "{config.mysql.url}"\ntable = "t"\nkey = ["k"]\n'
            'merge = { amount = "add" }\n'
        )
        cli = str(Path(sys.executable).with_name("wal-sink"))

        def run(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [cli, "-c", str(toml), *args],
                check=True,
                capture_output=True,
                text=True,
            )

        times: dict[str, list[float]] = {"--help": [], "status": [], "recover": []}
        for _ in range(repeat):
            bench.sql(f"DELETE FROM wal_sink_ack WHERE batch_id = {acks}")
            times["--help"].append(seconds(lambda: run("--help")))
            out: list[subprocess.CompletedProcess] = []
            times["status"].append(seconds(lambda: out.append(run("status", "--json"))))
            assert '"unacked": [\n    ' + str(acks) in out[-1].stdout, out[-1].stdout
            times["recover"].append(seconds(lambda: out.append(run("recover"))))
            assert f"batch {acks}:" in out[-1].stdout, out[-1].stdout
        count = bench.sql("SELECT COUNT(*) FROM wal_sink_ack")[0][0]
        print(
            f"ack table: {count:,} rows; WAL: {staged} staged batches, the newest "
            "unacked before each recover"
        )
        for name, measured in times.items():
            print(
                f"{name}: {[f'{s:.2f}' for s in measured]} s; median "
                f"{statistics.median(measured):.2f} s"
            )
        floor = statistics.median(times["--help"])
        for name in ("status", "recover"):
            median = statistics.median(times[name])
            print(
                f"latency of `wal-sink {name}`: median {median:.2f} s (goal < 1 s: "
                f"{'met' if median < 1 else 'not met'}), {median - floor:.2f} s "
                "above the process start (--help)"
            )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
