"""Operator latency: `wal-sink status` on a WAL holding 10,000 staged batches, as a
user runs it (a new process). Goal: under 1 s. The baseline is the same process
printing --help (interpreter and imports only), measured in the same run.

Usage: python -m bench.status_latency [BATCHES]
The WAL is built with delta-rs, 100 batches per commit and a checkpoint at the end,
to keep set-up short: what status reads — the last checkpoint with one add action
per batch file, plus the commits after it — is the same as for a WAL staged batch by
batch (Spark checkpoints every 10 commits). Acks for every second batch go straight
into MySQL.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from bench.common import Bench, seconds
from wal_sink.protocol.sink_instance import SinkInstance


def build_wal(path: Path, batches: int, per_commit: int = 100) -> None:
    for first in range(0, batches, per_commit):
        ids = list(range(first, min(first + per_commit, batches)))
        data = pa.table(
            {
                "_wal_seq": ids,
                "k": [f"k{b}" for b in ids],
                "amount": [1.0] * len(ids),
                "_wal_batch_id": ids,
            }
        )
        write_deltalake(
            str(path),
            data,
            mode="append",
            partition_by=["_wal_batch_id"],
            commit_properties=CommitProperties(
                app_transactions=[Transaction("bench", ids[-1])]
            ),
        )
    DeltaTable(str(path)).create_checkpoint()


def main(batches: int = 10_000, repeat: int = 5) -> None:
    with Bench("status") as bench:
        bench.sql(
            "CREATE TABLE t (k VARCHAR(16) PRIMARY KEY, amount DOUBLE) ENGINE=InnoDB"
        )
        config = bench.config("t")
        SinkInstance(config).start()
        build_wal(Path(config.wal_path), batches)
        bench.sql(
            "INSERT INTO wal_sink_ack (sink_id, batch_id, row_count, deleted_count, "
            "quarantined, epoch, committed_at) "
            "SELECT 'bench', seq, 1, 0, 0, 1, NOW(6) "
            f"FROM seq_0_to_{batches - 1} WHERE seq % 2 = 0"
        )
        toml = bench.dir / "bench.toml"
        toml.write_text(
            f'[sink]\nid = "bench"\n[wal]\npath = "{config.wal_path}"\n'
            f'[mysql]\nurl = "{config.mysql.url}"\ntable = "t"\nkey = ["k"]\n'
        )
        cli = str(Path(sys.executable).with_name("wal-sink"))
        status, baseline = [], []
        for _ in range(repeat):
            status.append(
                seconds(
                    lambda: subprocess.run(
                        [cli, "-c", str(toml), "status", "--json"],
                        check=True,
                        stdout=subprocess.DEVNULL,
                    )
                )
            )
            baseline.append(
                seconds(
                    lambda: subprocess.run(
                        [cli, "-c", str(toml), "--help"],
                        check=True,
                        stdout=subprocess.DEVNULL,
                    )
                )
            )
        print(
            f"batches: {batches}; status {[f'{s:.2f}' for s in status]} s; "
            f"--help {[f'{s:.2f}' for s in baseline]} s"
        )
        print(
            f"status latency: median {statistics.median(status):.2f} s (goal < 1 s), "
            f"{statistics.median(status) / statistics.median(baseline):.1f}x the "
            "process start-up alone"
        )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
