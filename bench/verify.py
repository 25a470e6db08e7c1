"""`wal-sink verify --against`: a target of ROWS rows against a Delta table holding
the same, first identical, then with 100 differences scattered over the key range
(40 rows changed by another writer, 30 deleted, 30 added). The baseline is the
naive way, measured in the same run: read both tables whole into Python (the
target through the driver, the Delta table through delta-rs) and compare them by
key. Goal: at least 3x faster, and the differences exact — the same 100 for both.

Usage: python -m bench.verify [ROWS] [ROUNDS]
The target is filled by SQL (MariaDB's sequence engine), not by the sink: verify
reads a table, whoever wrote it. Rounds alternate the two ways.

And `wal-sink verify` (the books) as a user runs it, a new process, on a WAL of
BATCHES staged batches, each acked (goal: seconds):
python -m bench.verify books [BATCHES]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pymysql
from deltalake import DeltaTable, write_deltalake

from bench.common import Bench, load_line, seconds
from bench.status_latency import build_wal
from devtools.mariadb import SINK_PASSWORD
from wal_sink.ops.verify_against import DIFFERENT, EXTRA, MISSING, verify_against
from wal_sink.ops.verify_read import Source
from wal_sink.protocol.sink_instance import SinkInstance

START = datetime(2026, 1, 1)


def source_table(rows: int) -> pa.Table:
    """What the target should hold: the same values the SQL below writes."""
    ids = np.arange(rows, dtype=np.int64)
    return pa.table(
        {
            "k": ids,
            "name": pa.array([f"name-{i}" for i in range(rows)]),
            "amount": pa.array(
                [Decimal(i % 100_000) / 100 for i in range(rows)], pa.decimal128(12, 2)
            ),
            "at": pa.array(
                (np.datetime64(START, "us") + ids * 1_000_000).astype("datetime64[us]"),
            ).cast(pa.timestamp("us", tz="UTC")),
        }
    )


def fill_target(bench: Bench, rows: int) -> None:
    bench.sql(
        "CREATE TABLE t (k BIGINT PRIMARY KEY, name VARCHAR(32), "
        "amount DECIMAL(12,2), at DATETIME(6)) ENGINE=InnoDB",
        "INSERT INTO t SELECT seq, CONCAT('name-', seq), (seq % 100000) / 100, "
        f"'{START:%Y-%m-%d %H:%M:%S}' + INTERVAL seq SECOND "
        f"FROM seq_0_to_{rows - 1}",
    )


def scatter(bench: Bench, rows: int) -> set[tuple[str, int]]:
    """100 differences over the key range; returns them as verify names them."""
    step = rows // 100
    changed = [i * step + 7 for i in range(0, 100, 5)]
    changed += [i * step + 11 for i in range(1, 100, 5)]
    deleted = [i * step + 3 for i in range(2, 100, 10)]
    deleted += [i * step + 5 for i in range(3, 100, 5)][:20]
    added = [rows + i * 13 for i in range(30)]
    bench.sql(
        f"UPDATE t SET amount = amount + 1 WHERE k IN ({_ids(changed[:20])})",
        f"UPDATE t SET name = 'changed' WHERE k IN ({_ids(changed[20:])})",
        f"DELETE FROM t WHERE k IN ({_ids(deleted)})",
        f"INSERT INTO t (k, name) VALUES {','.join(f'({k}, 0)' for k in added)}",
    )
    found = {(DIFFERENT, k) for k in changed} | {(MISSING, k) for k in deleted}
    assert len(found | {(EXTRA, k) for k in added}) == 100
    return found | {(EXTRA, k) for k in added}


def _ids(keys: list[int]) -> str:
    return ",".join(map(str, keys))


def ours(sink: SinkInstance, lake: str) -> set[tuple[str, int]]:
    (report,) = verify_against(sink, Source.parse(lake))
    return {(d.kind, d.key["k"]) for d in report.differences}


def naive(bench: Bench, lake: str) -> set[tuple[str, int]]:
    """Both tables whole in Python, compared by key."""
    with (
        pymysql.connect(
            host="127.0.0.1",
            port=bench.mariadb.port,
            user="sink",
            password=SINK_PASSWORD,
            database="bench",
        ) as conn,
        conn.cursor() as cur,
    ):
        cur.execute("SELECT k, name, amount, at FROM t")
        mine = {r[0]: r[1:] for r in cur.fetchall()}
    theirs = {
        r["k"]: (r["name"], r["amount"], r["at"].replace(tzinfo=None))
        for r in DeltaTable(lake).to_pyarrow_table().to_pylist()
    }
    found = {(MISSING, k) for k in theirs.keys() - mine.keys()}
    found |= {(EXTRA, k) for k in mine.keys() - theirs.keys()}
    both = theirs.keys() & mine.keys()
    found |= {(DIFFERENT, k) for k in both if theirs[k] != mine[k]}
    return found


def main(rows: int = 1_000_000, rounds: int = 3) -> None:
    print(load_line("start"), flush=True)
    with Bench("verify") as bench:
        fill_target(bench, rows)
        lake = str(bench.dir / "lake")
        write_deltalake(lake, source_table(rows))
        sink = SinkInstance(bench.config("t", merge={}))
        for case in ("identical", "100 differences"):
            expected = scatter(bench, rows) if case != "identical" else set()
            timings: dict[str, list[float]] = {"verify": [], "naive": []}
            for _ in range(rounds):
                for way, run in (("verify", ours), ("naive", naive)):
                    found: set = set()
                    arg = sink if way == "verify" else bench

                    def once(run=run, arg=arg, found=found) -> None:
                        found.update(run(arg, lake))

                    timings[way].append(seconds(once))
                    assert found == expected, (way, case, found ^ expected)
            v, n = (statistics.median(timings[w]) for w in ("verify", "naive"))
            print(
                f"{case}, {rows:,} rows: verify {_runs(timings['verify'])} s, naive "
                f"{_runs(timings['naive'])} s; verify is {n / v:.1f}x faster (goal "
                f">= 3x; {rounds} alternating rounds), differences exact "
                f"({len(expected)} found by both)",
                flush=True,
            )
        sink.close()
    print(load_line("end"), flush=True)


def _runs(times: list[float]) -> str:
    return "[" + ", ".join(f"{t:.2f}" for t in times) + "]"


def books(batches: int = 10_000, rounds: int = 3) -> None:
    print(load_line("start"), flush=True)
    with Bench("verify-books") as bench:
        bench.sql("CREATE TABLE t (k VARCHAR(16) PRIMARY KEY, amount DOUBLE)")
        config = bench.config("t")
        SinkInstance(config).start()
        build_wal(Path(config.wal_path), batches)  # a row per batch
        bench.sql(
            "INSERT INTO wal_sink_ack (sink_id, batch_id, row_count, deleted_count, "
            "quarantined, epoch, committed_at, apply_id, state) SELECT 'bench', seq, "
            "1, 0, 0, 1, NOW(6), REPEAT('a', 32), 'applied' "
            f"FROM seq_0_to_{batches - 1}"
        )
        toml = bench.dir / "bench.toml"
        toml.write_text(
            f'[sink]\nid = "bench"\n[wal]\npath = "{config.wal_path}"\n'
            f'[mysql]\nurl = "{config.mysql.url}"\ntable = "t"\nkey = ["k"]\n'
        )
        cli = str(Path(sys.executable).with_name("wal-sink"))
        times = [
            seconds(
                lambda: subprocess.run(
                    [cli, "-c", str(toml), "verify"], check=True, capture_output=True
                )
            )
            for _ in range(rounds)
        ]
        print(
            f"wal-sink verify on {batches:,} acked batches: {_runs(times)} s, median "
            f"{statistics.median(times):.2f} s (goal: seconds; exit 0, books balance)",
            flush=True,
        )
    print(load_line("end"), flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["books"]:
        books(*(int(a) for a in sys.argv[2:3]))
    else:
        main(*(int(a) for a in sys.argv[1:3]))
