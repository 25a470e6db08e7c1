"""CDC with a version column reaches the state the versions say, whatever the order
batches and rows arrive in: deletes are guarded by the version and leave tombstones,
so an older upsert never brings a row back."""

from __future__ import annotations

import json
import os
import random
import time
from decimal import Decimal
from pathlib import Path

import pytest

from devtools.spark_job import JobProcess
from tests.helpers import cli, settle, write_config
from wal_sink import WalSink
from wal_sink.wal.quarantine import Quarantine

CDC_MYSQL = 'version_column = "seq"'
CDC_SECTION = '[cdc]\nop_column = "op"\norder_by = "seq"\n'

SEED = int(os.environ.get("WAL_SINK_TEST_SEED", time.time()))
SCHEMA = (
    "arrival INT, op STRING, k STRING, label STRING, amount DECIMAL(12,2), seq BIGINT"
)
SINK_TABLES = ("wal_sink_ack", "wal_sink_lease", "wal_sink_outbox")
Op = tuple[str, str, int, str | None, Decimal | None]  # op, key, version, label, amount


def history(rng: random.Random, keys: int = 8) -> list[Op]:
    """Inserts, updates, deletes and re-inserts of ``keys`` keys, each key's versions
    rising (some deletes of absent keys, some upserts of deleted ones)."""
    ops: list[Op] = []
    for n in range(keys):
        k, version, alive = f"k{n}", rng.randrange(1, 5), False
        for step in range(rng.randrange(3, 8)):
            version += rng.randrange(1, 4)
            op = rng.choice("UD") if alive or rng.random() < 0.2 else "I"
            if op == "D":
                ops.append(("D", k, version, None, None))
            else:
                ops.append((op, k, version, f"{k}v{version}", Decimal(step)))
            alive = op != "D"
    return ops


def final_state(ops: list[Op]) -> dict[str, tuple]:
    """What the versions say: each key as its newest op left it."""
    newest: dict[str, Op] = {}
    for o in ops:
        if o[1] not in newest or o[2] > newest[o[1]][2]:
            newest[o[1]] = o
    return {k: (o[3], o[4], o[2]) for k, o in newest.items() if o[0] != "D"}


@pytest.fixture
def items(db):
    for t in ("items_cdc", "items_cdc_tombstones", "items_cdc_deleted", *SINK_TABLES):
        db.execute(f"DROP TABLE IF EXISTS {t}")
    db.execute(
        "CREATE TABLE items_cdc (k VARCHAR(16) PRIMARY KEY, label VARCHAR(32), "
        "amount DECIMAL(14,2), seq BIGINT, arrival INT) ENGINE=InnoDB "
        "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"
    )
    return lambda: {
        r[0]: r[1:] for r in db.rows("SELECT k, label, amount, seq FROM items_cdc")
    }


def cdc_sink(make_config, tmp_path: Path, name: str, order_by: str = "seq"):
    return WalSink(
        make_config(
            table="items_cdc",
            sink_id=name,
            wal_path=tmp_path / f"wal_{name}",
            version_column="seq",
            cdc={"op_column": "op", "order_by": order_by, "delete_values": ["D"]},
        )
    )


def apply_batches(spark, sink, batches: list[list[tuple]]) -> None:
    for batch_id, rows in enumerate(batches):
        sink.foreach_batch(spark.createDataFrame(rows, SCHEMA).repartition(2), batch_id)
        settle(sink)


@pytest.mark.parametrize("order_by", ["seq", "arrival"])
def test_any_delivery_order_ends_as_the_versions_say(
    spark, db, items, make_config, tmp_path, order_by
):
    """One history in many random orders, cut into random batches; with ``arrival``
    the rows of a batch are applied in their shuffled order too."""
    print(f"seed {SEED}")
    rng = random.Random(SEED)
    ops = history(rng, keys=12)
    expected = final_state(ops)
    for trial in range(8):
        # Each trial from nothing: tombstones are the table's, and an earlier
        # trial's would keep this one's older upserts out in its place.
        db.execute("DELETE FROM items_cdc")
        db.execute("DROP TABLE IF EXISTS items_cdc_tombstones")
        shuffled = rng.sample(ops, len(ops))
        rows = [
            (i, o, k, label, a, v) for i, (o, k, v, label, a) in enumerate(shuffled)
        ]
        cuts = sorted(rng.sample(range(1, len(rows)), 4))
        batches = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)])]
        sink = cdc_sink(make_config, tmp_path, f"{order_by}{trial}", order_by)
        apply_batches(spark, sink, batches)
        sink.close()
        assert items() == expected, f"trial {trial}, seed {SEED}"
        quarantined = db.rows(
            "SELECT SUM(quarantined) FROM wal_sink_ack WHERE sink_id = %s",
            (f"{order_by}{trial}",),
        )
        assert quarantined == [(0,)]


def test_a_chunk_read_in_pieces_sees_the_deletes_of_the_pieces_before(
    spark, db, items, make_config, tmp_path, monkeypatch
):
    """A chunk whose keys and versions would not fit one read is read a piece at a
    time, each once the one before is applied: here one row a piece."""
    from wal_sink.mysql import tombstone_probe

    monkeypatch.setattr(tombstone_probe, "DOCUMENT_BYTES", 1)
    rng = random.Random(SEED + 2)
    ops = history(rng)
    shuffled = rng.sample(ops, len(ops))
    rows = [(i, o, k, label, a, v) for i, (o, k, v, label, a) in enumerate(shuffled)]
    sink = cdc_sink(make_config, tmp_path, "pieces", "arrival")
    apply_batches(spark, sink, [rows])
    sink.close()
    assert items() == final_state(ops), f"seed {SEED}"


def test_delete_beats_an_upsert_of_its_version_and_null_versions_are_oldest(
    spark, db, items, make_config, tmp_path
):
    def row(op, k, seq, label=None):
        return (0, op, k, label, None if op == "D" else Decimal(1), seq)

    def batch(*rows):  # applied in the order given (cdc.order_by = "arrival")
        return [(i, *r[1:]) for i, r in enumerate(rows)]

    for name, batches in {
        "tie_delete_first": [[row("D", "a", 5)], [row("I", "a", 5, "x")]],
        "tie_upsert_first": [[row("I", "a", 5, "x")], [row("D", "a", 5)]],
        "null_version": [[row("D", "a", 3)], [row("U", "a", None, "x")]],
        "older_in_one_batch": [batch(row("D", "a", 7), row("I", "a", 2, "x"))],
        # The key's collation: 'A' and 'a' are one key, so is its tombstone.
        "same_key_other_case": [[row("D", "A", 4)], [row("I", "a", 2, "x")]],
    }.items():
        db.execute("DELETE FROM items_cdc")
        # Tombstones are the table's, every sink's: each case starts without any.
        db.execute("DROP TABLE IF EXISTS items_cdc_tombstones")
        sink = cdc_sink(make_config, tmp_path, name, "arrival")
        apply_batches(spark, sink, batches)
        sink.close()
        assert items() == {}, name
    # An older delete arriving late leaves newer data alone.
    db.execute("DELETE FROM items_cdc")
    db.execute("DROP TABLE IF EXISTS items_cdc_tombstones")
    sink = cdc_sink(make_config, tmp_path, "older_delete_later", "arrival")
    apply_batches(spark, sink, [[row("I", "b", 5, "x")], [row("D", "b", 3)]])
    sink.close()
    assert items() == {"b": ("x", Decimal(1), 5)}
    db.execute("DELETE FROM items_cdc")
    # A newer upsert after the delete does bring the key back.
    sink = cdc_sink(make_config, tmp_path, "same_key_other_case", "arrival")
    sink.foreach_batch(spark.createDataFrame([row("I", "a", 9, "y")], SCHEMA), 2)
    settle(sink)
    sink.close()
    assert items() == {"a": ("y", Decimal(1), 9)}
    skipped = db.rows(
        "SELECT SUM(skipped_count) FROM wal_sink_ack WHERE sink_id LIKE 't%' "
        "OR sink_id IN ('null_version', 'older_in_one_batch', 'same_key_other_case')"
    )
    assert skipped == [(4,)], "tie_delete_first, null_version, older..., same_key..."


def test_a_version_mysql_cannot_take_is_set_aside_not_skipped(
    spark, db, items, make_config, tmp_path
):
    """A value that does not fit the version column would be read as another value
    (MySQL clips 10^20 to BIGINT's largest with a warning): never dropped as stale
    for it. (A STRING version into a BIGINT column is refused at start: text such
    as '1.5' would land as another number, test_value_fit.py.)"""
    sink = WalSink(
        make_config(
            table="items_cdc",
            sink_id="bad_version",
            wal_path=tmp_path / "wal_bad",
            version_column="seq",
            cdc={"op_column": "op", "order_by": "arrival"},
        )
    )
    schema = "arrival INT, op STRING, k STRING, label STRING, seq DECIMAL(30,0)"
    rows = [
        (0, "D", "a", None, Decimal(0)),
        (1, "I", "a", "x", Decimal(10) ** 20),
        (2, "I", "b", "y", Decimal(1)),
    ]
    sink.foreach_batch(spark.createDataFrame(rows, schema), 0)
    settle(sink)
    sink.close()
    assert {k: v[0] for k, v in items().items()} == {"b": "y"}
    assert db.rows(
        "SELECT row_count, deleted_count, quarantined, skipped_count FROM wal_sink_ack"
    ) == [(1, 1, 1, 0)]
    entries = Quarantine(str(tmp_path / "wal_bad_quarantine"), "bad_version").read(9)
    assert (
        len(entries) == 1
        and "does not fit the target's columns" in entries[0]["reason"]
    )


def test_job_with_files_landing_out_of_order_then_replay_and_purge(db, items, tmp_path):
    """The real job reads files one per batch in an order their versions do not
    follow; a forced replay of old batches changes nothing; purge expires the
    tombstones and status counts them."""
    print(f"seed {SEED}")
    rng = random.Random(SEED + 1)
    ops = history(rng, keys=6)
    expected = final_state(ops)
    landing = tmp_path / "landing"
    landing.mkdir()
    by_version = sorted(ops, key=lambda o: o[2])
    files = [by_version[i : i + 4] for i in range(0, len(by_version), 4)]
    picked = rng.sample(range(len(files)), len(files))  # Spark's order: by mtime
    for i, rows in enumerate(files):
        path = landing / f"cdc{i:03d}.json"
        path.write_text(
            "".join(
                json.dumps(
                    {
                        "op": o,
                        "k": k,
                        "seq": v,
                        "label": label,
                        "amount": None if a is None else str(a),
                    }
                )
                + "\n"
                for o, k, v, label, a in rows
            )
        )
        os.utime(path, (1_700_000_000 + picked[i],) * 2)
    config = write_config(
        tmp_path / "cdc_job.toml",
        db,
        table="items_cdc",
        source=f"""
[source]
format = "json"
path = "{landing}"
schema = "op STRING, k STRING, label STRING, amount DECIMAL(12,2), seq BIGINT"
options = {{ maxFilesPerTrigger = 1 }}""",
        mysql=CDC_MYSQL,
        job='trigger = "1 second"',
        sections=CDC_SECTION + 'tombstone_retention = "3 seconds"\n',
    )
    db.execute("ALTER TABLE items_cdc DROP COLUMN arrival")
    job = JobProcess(config, tmp_path / "job.log", "--available-now")
    assert job.wait() == 0, job.tail()
    assert items() == expected, f"seed {SEED}"
    assert db.rows("SELECT COUNT(*) FROM wal_sink_ack") == [(len(files),)]
    for first, last in (("0", "0"), ("0", str(len(files) - 1))):
        done = cli(config, "replay", "--from", first, "--to", last, "--force", "--yes")
        assert done.returncode == 0, done.stderr
        assert items() == expected, f"replay {first}..{last}, seed {SEED}"
    deleted_keys = {o[1] for o in ops if o[0] == "D"}
    done = cli(config, "status", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["tombstones"] == len(deleted_keys)
    time.sleep(3)
    done = cli(config, "purge", "--before", "0", "--dry-run")
    assert f"would remove {len(deleted_keys)} tombstone(s)" in done.stdout
    done = cli(config, "purge", "--before", "0")
    assert done.returncode == 0, done.stderr
    assert (
        f"removed {len(deleted_keys)} tombstone(s) older than 3 seconds" in done.stdout
    )
    assert json.loads(cli(config, "status", "--json").stdout)["tombstones"] == 0


def test_a_table_of_that_name_that_is_not_a_tombstone_table_is_refused(
    db, items, make_config, tmp_path
):
    from wal_sink.errors import ConfigError
    from wal_sink.protocol.sink_instance import SinkInstance

    db.execute("CREATE TABLE items_cdc_tombstones (k VARCHAR(16)) ENGINE=InnoDB")
    sink = cdc_sink(make_config, tmp_path, "clash")
    with pytest.raises(ConfigError, match="not the tombstone table of items_cdc"):
        sink.start()
    config = sink.config
    named = type(config.mysql)(
        **{**config.mysql.__dict__, "tombstone_table": "items_cdc_deleted"}
    )
    db.execute("DROP TABLE IF EXISTS items_cdc_deleted")
    SinkInstance(type(config)(**{**config.__dict__, "mysql": named})).start()
    assert db.rows("SHOW TABLES LIKE 'items_cdc_deleted'") == [("items_cdc_deleted",)]


def test_an_ack_table_of_0_2_is_read_and_then_upgraded(db, items, tmp_path):
    """status reads an ack table without skipped_count; init-db adds it."""
    db.execute(
        "CREATE TABLE wal_sink_ack (sink_id VARCHAR(128) NOT NULL, batch_id BIGINT "
        "NOT NULL, row_count BIGINT NOT NULL, deleted_count BIGINT NOT NULL, "
        "quarantined BIGINT NOT NULL, epoch BIGINT NOT NULL, committed_at "
        "DATETIME(6) NOT NULL, apply_id CHAR(32), PRIMARY KEY (sink_id, batch_id)) "
        "ENGINE=InnoDB"
    )
    db.execute("INSERT INTO wal_sink_ack VALUES ('old', 0, 5, 1, 0, 1, NOW(6), NULL)")
    db.run_sql_file("wal_sink_tables.sql")  # the lease and outbox tables
    config = write_config(
        tmp_path / "old.toml",
        db,
        table="items_cdc",
        mysql=CDC_MYSQL,
        sections=CDC_SECTION,
    )
    done = cli(config, "status", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert (status["rows_applied"], status["rows_skipped"]) == (5, 0)
    assert status["tombstones"] == 0
    done = cli(config, "init-db")
    assert done.returncode == 0, done.stderr
    assert "tombstone table items_cdc_tombstones is ready" in done.stdout
    assert db.rows("SELECT skipped_count FROM wal_sink_ack") == [(0,)]


def test_tombstones_of_a_key_of_two_columns(spark, db, make_config, tmp_path):
    db.execute("DROP TABLE IF EXISTS pairs")
    db.execute("DROP TABLE IF EXISTS pairs_tombstones")
    db.execute(
        "CREATE TABLE pairs (org VARCHAR(8), k INT, label VARCHAR(8), seq BIGINT, "
        "n INT, PRIMARY KEY (org, k)) ENGINE=InnoDB"
    )
    sink = WalSink(
        make_config(
            table="pairs",
            key=["org", "k"],
            sink_id="pairs",
            wal_path=tmp_path / "wal_pairs",
            version_column="seq",
            cdc={"op_column": "op", "order_by": "n"},
        )
    )
    schema = "n INT, op STRING, org STRING, k INT, label STRING, seq BIGINT"
    rows = [
        (0, "D", "a", 1, None, 5),
        (1, "I", "a", 1, "stale", 3),  # the delete above is newer: skipped
        (2, "I", "a", 2, "x", 1),  # another key of the same org
        (3, "I", "b", 1, "y", 1),  # the same k in another org
    ]
    sink.foreach_batch(spark.createDataFrame(rows, schema).coalesce(1), 0)
    settle(sink)
    sink.foreach_batch(spark.createDataFrame([(0, "U", "a", 1, "old", 4)], schema), 1)
    settle(sink)
    sink.close()
    assert sorted(db.rows("SELECT org, k, label FROM pairs")) == [
        ("a", 2, "x"),
        ("b", 1, "y"),
    ]
    assert db.rows(
        "SELECT batch_id, skipped_count FROM wal_sink_ack WHERE sink_id = 'pairs' "
        "ORDER BY batch_id"
    ) == [(0, 1), (1, 1)]
