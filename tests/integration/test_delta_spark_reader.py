"""Users query the WAL and the quarantine from Spark with delta-spark
(``spark.read.format("delta").load(path)``): it must return exactly the rows
staged, value by value, as delta-rs and pyarrow read them.

delta-spark 4.4 runs on Spark 4.0.1-4.2.x only, so the reader runs in its own
virtualenv (``.venv-delta``, pyspark 4.2 + delta-spark 4.4, made by ``make setup``)
as a subprocess, with the jars Maven fetched into ``.jars/delta``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from tests.fixtures.spark_types import TYPES_SCHEMA, type_rows
from tests.helpers import REPO
from wal_sink.spark.staging import WRITE_CONF, StageTimes, session_conf, stage
from wal_sink.storage import Storage
from wal_sink.wal.maintenance import delete_batches
from wal_sink.wal.quarantine import Entry, Quarantine
from wal_sink.wal.writer import WalWriter

DELTA_PYTHON = REPO / ".venv-delta" / "bin" / "python"
DELTA_JARS = REPO / ".jars" / "delta"
READER = REPO / "tests" / "interop" / "read_with_delta_spark.py"


def read_with_delta_spark(out: Path, *tables: str) -> dict[str, Any]:
    if not DELTA_PYTHON.exists():
        pytest.fail(
            f"{DELTA_PYTHON.relative_to(REPO)} is missing: the Spark-side reader "
            "needs its own virtualenv (pyspark 4.2 + delta-spark 4.4); run `make setup`"
        )
    if not any(DELTA_JARS.glob("delta-spark_*.jar")):
        pytest.fail(f"no delta-spark jar in {DELTA_JARS}: run `make setup`")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "SPARK_")) and k != "PYTHONPATH"
    }
    started = time.monotonic()
    done = subprocess.run(
        [str(DELTA_PYTHON), str(READER), str(DELTA_JARS), str(out), *tables],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    # pyarrow is not imported there, but a JVM at exit can still be noisy: the
    # output file is the result, the exit code must say success.
    errors = [ln for ln in done.stderr.splitlines() if "Exception: " in ln]
    assert done.returncode == 0, "\n".join(errors[:5]) or done.stderr[-3000:]
    print(f"delta-spark read in {time.monotonic() - started:.1f}s")
    return json.loads(out.read_text())


def comparable(column: pa.ChunkedArray) -> list[Any]:
    """Values as the reader script writes them (see its docstring)."""
    kind = column.type
    if pa.types.is_timestamp(kind):
        assert kind.unit == "us"
        return column.cast(pa.int64()).to_pylist()
    if pa.types.is_date32(kind):
        return column.cast(pa.int32()).to_pylist()
    values = column.to_pylist()
    if pa.types.is_binary(kind):
        return [None if v is None else v.hex() for v in values]
    if pa.types.is_decimal(kind):
        return [None if v is None else format(v, "f") for v in values]
    if pa.types.is_floating(kind):
        return [None if v is None else repr(v) for v in values]
    return values


def read_with_pyarrow(path: str) -> list[dict[str, Any]]:
    """The table's rows as delta-rs lists its files and pyarrow reads them."""
    table = DeltaTable(path)
    names = [f.name for f in table.schema().fields]
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    found = []
    for action in actions:
        data = pq.ParquetFile(f"{path}/{unquote(action['path'])}").read()
        columns = {n: comparable(data.column(n)) for n in data.column_names}
        partition = {
            k.removeprefix("partition."): int(v)
            for k, v in action.items()
            if k.startswith("partition.")
        }
        for i in range(data.num_rows):
            row = {n: columns[n][i] if n in columns else None for n in names}
            found.append({**row, **partition})
    return found


def test_delta_spark_reads_exactly_what_was_staged_and_quarantined(spark, tmp_path):
    wal, quarantine = str(tmp_path / "wal"), str(tmp_path / "wal_quarantine")
    writer = WalWriter(wal, "interop")
    full = spark.createDataFrame(type_rows(), TYPES_SCHEMA)
    before = full.drop("ntz", "void_s")  # batches 2 on add these (schema evolution)
    batches = {
        0: before.repartition(3),
        1: before.repartition(2),  # purged below
        2: full.repartition(3),
        3: full.limit(0),  # an empty batch
        4: full.where("k < 5").repartition(2),
    }
    # A 64-byte dictionary page: every column falls back to the other encodings
    # of Parquet's v2 pages (text, binary and wide decimals as DELTA_BYTE_ARRAY).
    with session_conf(spark, {"parquet.dictionary.page.size": "64"}):
        for batch_id, df in batches.items():
            stage(df, writer, batch_id)
    encodings = {
        encoding
        for path in Path(wal).rglob("part-*.parquet")
        for meta in [pq.read_metadata(path)]
        for g in range(meta.num_row_groups)
        for i in range(meta.num_columns)
        for encoding in meta.row_group(g).column(i).encodings
    }
    assert {"DELTA_BYTE_ARRAY", "DELTA_BINARY_PACKED"} <= encodings
    delete_batches(wal, Storage(), [1])
    staged = {b: df.count() for b, df in batches.items() if b != 1}
    when = datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
    Quarantine(quarantine, "interop").record(
        "interop:outbox",
        2,
        [
            Entry({"k": 1, "amount": Decimal("0.000000000000000001")}, "MySQL 1264"),
            Entry({"k": None, "at": when, "b": b"\x00'"}, "null key column(s): k"),
        ],
    )
    Quarantine(quarantine, "interop").record(
        "interop:parse", 0, [Entry({"_raw": '{"k": 1,'}, "unparseable record")]
    )

    by_datasource = stage_through_the_data_source(spark, full, tmp_path)

    got = read_with_delta_spark(tmp_path / "read.json", wal, quarantine, by_datasource)

    assert got["spark"].startswith("4.2")
    wal_read = got["tables"][wal]
    for field in ("d38s:decimal(38,18)", "ts:timestamp", "ntz:timestamp_ntz"):
        assert field in wal_read["schema"]
    by_seq = lambda r: (r["_wal_batch_id"], r["_wal_seq"])  # noqa: E731
    spark_rows = sorted(wal_read["rows"], key=by_seq)
    assert spark_rows == sorted(read_with_pyarrow(wal), key=by_seq)
    counts = {b: 0 for b in staged}
    for row in spark_rows:
        counts[row["_wal_batch_id"]] += 1
    assert counts == staged and staged[0] > 10 and staged[3] == 0
    assert {r["ntz"] for r in spark_rows if r["_wal_batch_id"] == 0} == {None}
    assert any(r["ntz"] is not None for r in spark_rows if r["_wal_batch_id"] == 2)

    entries = got["tables"][quarantine]["rows"]
    by_record = lambda r: (r["batch_id"], r["record"])  # noqa: E731
    assert sorted(entries, key=by_record) == sorted(
        read_with_pyarrow(quarantine), key=by_record
    )
    assert len(entries) == 3
    amounts = [json.loads(e["record"]).get("amount") for e in entries]
    assert Decimal("0.000000000000000001") in [Decimal(a) for a in amounts if a]

    # The data source's WAL: what delta-spark reads is what pyarrow reads, and the
    # stream's columns are exactly those staged above through foreachBatch.
    ds_read = got["tables"][by_datasource]
    assert fields(ds_read["schema"]) == fields(wal_read["schema"])
    ds_rows = sorted(ds_read["rows"], key=by_seq)
    assert ds_rows == sorted(read_with_pyarrow(by_datasource), key=by_seq)
    columns = lambda r: {k: v for k, v in r.items() if not k.startswith("_wal_")}  # noqa: E731
    by_k = lambda r: r["k"]  # noqa: E731
    assert sorted(map(columns, ds_rows), key=by_k) == sorted(
        (columns(r) for r in spark_rows if r["_wal_batch_id"] == 2), key=by_k
    )


def test_batches_staged_from_the_driver_read_back_as_the_executors(spark, tmp_path):
    """A batch of at most ``wal.driver_stage_rows`` rows is one Parquet file written
    from the driver: delta-spark and delta-rs/pyarrow read it exactly as the same
    rows staged by the executors, every type, schema evolution and an empty batch
    included; one row more than the threshold goes to the executors."""
    wal = str(tmp_path / "wal")
    writer = WalWriter(wal, "driver")
    full = spark.createDataFrame(type_rows(), TYPES_SCHEMA)
    n = full.count()
    paths = {}
    for batch_id, df, limit in [
        (0, full.drop("ntz", "void_s").repartition(2), n),  # creates the WAL
        (1, full.repartition(3), n),  # adds two columns
        (2, full.repartition(3), 0),  # the executors
        (3, full.limit(0), n),  # empty
        (4, full.repartition(2), n - 1),  # one row too many
    ]:
        times = StageTimes()
        staged = stage(df, writer, batch_id, times=times, driver_rows=limit)
        paths[batch_id] = (times.from_driver, len(staged.files))
    assert [paths[b][0] for b in range(5)] == [True, True, False, True, False]
    assert paths[1] == (True, 1) and paths[2][1] == 3 and paths[3] == (True, 1)

    got = read_with_delta_spark(tmp_path / "read.json", wal)

    by_seq = lambda r: (r["_wal_batch_id"], r["_wal_seq"])  # noqa: E731
    spark_rows = sorted(got["tables"][wal]["rows"], key=by_seq)
    assert spark_rows == sorted(read_with_pyarrow(wal), key=by_seq)
    for field in ("d38s:decimal(38,18)", "ts:timestamp", "ntz:timestamp_ntz"):
        assert field in got["tables"][wal]["schema"]

    def batch(b: int) -> list[dict[str, Any]]:
        return sorted(
            (
                {k: v for k, v in r.items() if not k.startswith("_wal_")}
                for r in spark_rows
                if r["_wal_batch_id"] == b
            ),
            key=lambda r: r["k"],
        )

    assert len(batch(2)) == n and batch(1) == batch(2) == batch(4)
    assert batch(0) == [{**r, "ntz": None, "void_s": None} for r in batch(2)]
    assert batch(3) == []
    seqs = [r["_wal_seq"] for r in spark_rows if r["_wal_batch_id"] == 1]
    assert seqs == list(range(n)), "the driver numbers its rows from 0"


def fields(schema: str) -> set[str]:
    """A struct's simple string as its set of ``name:type`` fields."""
    return set(re.findall(r"\w+:\w+(?:\(\d+,\d+\))?", schema))


def stage_through_the_data_source(spark, df, tmp_path: Path) -> str:
    """``df`` streamed through ``format("wal_sink")`` in two batches: Parquet
    files in a landing directory, read as a stream."""
    landing, wal = tmp_path / "landing", str(tmp_path / "wal_ds")
    with session_conf(spark, WRITE_CONF):
        df.repartition(2).write.parquet(str(landing))
    config = tmp_path / "ds.toml"
    config.write_text(
        f'[sink]\nid = "interop_ds"\n[wal]\npath = "{wal}"\nmax_pending = 10\n'
        '[mysql]\nurl = "mysql+pymysql://u@127.0.0.1/db"\ntable = "t"\nkey = ["k"]\n'
    )
    (
        spark.readStream.schema(df.schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(landing))
        .writeStream.format("wal_sink")
        .option("config", str(config))
        .option("checkpointLocation", str(tmp_path / "cp_ds"))
        .trigger(availableNow=True)
        .start()
        .awaitTermination()
    )
    assert DeltaTable(wal).transaction_version("interop_ds") == 1
    return wal
